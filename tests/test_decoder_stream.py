"""Finding torchvision's decoder stream in PyTorch's stream pool and raising its priority, with stand-ins for the
pool, the decoder and the CUDA driver (the real thing runs in tests/test_data_gpu.py)."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest
import torch

from clsbench.data import decoder_stream


class Pool:
    """PyTorch's round-robin pool of normal-priority streams, as ``torch.cuda.Stream`` hands them out."""

    def __init__(self, size: int) -> None:
        self.size, self.next = size, 0

    def take(self) -> int:
        handle = 0x1000 + self.next
        self.next = (self.next + 1) % self.size
        return handle


class Decoder:
    """torchvision's decoder: a new one (with the pool's next stream) whenever the device differs from the last."""

    def __init__(self, pool: Pool, takes: bool = True) -> None:
        self.pool, self.takes, self.device, self.stream = pool, takes, None, None

    def __call__(self, data: list[torch.Tensor], device: torch.device) -> list[Any]:
        assert data and data[0].dtype == torch.uint8
        if device != self.device:
            self.device = device
            self.stream = self.pool.take() if self.takes else None
        return [None] * len(data)


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Pool:
    pool = Pool(32)
    pool.take()  # someone took streams before
    pool.take()

    class Stream:
        def __init__(self, device: Any = None, priority: int = 0) -> None:
            self.cuda_stream = pool.take()

        @staticmethod
        def priority_range() -> tuple[int, int]:
            return 0, -3

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    return pool


class Driver:
    """cuStreamSetAttribute / cuStreamGetAttribute over a dict; ``fail`` makes the set return a CUDA error."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.priorities: dict[int, int] = {}

    def cuStreamSetAttribute(self, handle: ctypes.c_void_p, attribute: int, value: Any) -> int:  # noqa: N802
        assert attribute == decoder_stream.CU_LAUNCH_ATTRIBUTE_PRIORITY
        if self.fail:
            return self.fail
        self.priorities[handle.value] = ctypes.c_int.from_buffer(value._obj).value
        return 0

    def cuStreamGetAttribute(self, handle: ctypes.c_void_p, attribute: int, value: Any) -> int:  # noqa: N802
        ctypes.c_int.from_buffer(value._obj).value = self.priorities[handle.value]
        return 0


def test_the_decoder_stream_is_found_and_its_priority_raised(pool: Pool):
    decoder, driver = Decoder(pool), Driver()
    facts = decoder_stream.raise_decoder_priority(torch.device("cuda", 0), decode=decoder, driver=driver)
    assert facts == {"priority": -3, "greatest": -3, "error": None}
    assert driver.priorities == {decoder.stream: -3}  # only the decoder's stream
    assert decoder.device == torch.device("cuda", 0)  # the decoder now serves the pipeline's device


def test_an_unnamed_device_is_primed_by_index(pool: Pool, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    decoder, driver = Decoder(pool), Driver()
    facts = decoder_stream.raise_decoder_priority(torch.device("cuda"), decode=decoder, driver=driver)
    assert facts["error"] is None and list(driver.priorities) == [decoder.stream]


def test_a_decoder_that_took_no_stream_is_reported_not_guessed(pool: Pool):
    driver = Driver()
    facts = decoder_stream.raise_decoder_priority(torch.device("cuda", 0), decode=Decoder(pool, takes=False),
                                                  driver=driver)
    assert facts["priority"] is None and "did not take a new stream" in facts["error"] and not driver.priorities


def test_driver_errors_become_reasons(pool: Pool):
    facts = decoder_stream.raise_decoder_priority(torch.device("cuda", 0), decode=Decoder(pool), driver=Driver(1))
    assert facts["priority"] is None and facts["error"] == "cuStreamSetAttribute(priority) returned CUDA error 1"

    class NoAttributes:
        pass

    value, reason = decoder_stream.set_stream_priority(0x1000, -1, driver=NoAttributes())
    assert value is None and reason.startswith("AttributeError")


def test_a_failing_decode_is_recorded_and_nothing_raises(pool: Pool):
    def broken(data: list[torch.Tensor], device: torch.device) -> None:
        raise RuntimeError("nvjpeg went away")

    facts = decoder_stream.raise_decoder_priority(torch.device("cuda", 0), decode=broken, driver=Driver())
    assert facts == {"priority": None, "greatest": -3, "error": "RuntimeError: nvjpeg went away"}
