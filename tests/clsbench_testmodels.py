"""Tiny models for tests, loaded by clsbench as custom builders (``clsbench_testmodels:tiny``)."""

from __future__ import annotations

import os
import tempfile
import time

import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        return self.head(x.mean(dim=(2, 3)))


def tiny(num_classes: int = 1000) -> nn.Module:
    return Tiny(num_classes)


tiny.input_size = 32


class _Broken(Tiny):
    def __init__(self, behaviour: str, num_classes: int) -> None:
        super().__init__(num_classes)
        self.behaviour = behaviour

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        if self.behaviour == "nan" and self.training:
            return out * float("nan")
        if self.behaviour == "oom":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (simulated)")
        if self.behaviour == "crash":
            os._exit(3)
        if self.behaviour == "hang":
            time.sleep(3600)
        if self.behaviour == "error":
            raise RuntimeError("something broke inside forward")
        return out


def nan_model(num_classes: int = 1000) -> nn.Module:
    return _Broken("nan", num_classes)


def oom_model(num_classes: int = 1000) -> nn.Module:
    return _Broken("oom", num_classes)


def crash_model(num_classes: int = 1000) -> nn.Module:
    return _Broken("crash", num_classes)


def hang_model(num_classes: int = 1000) -> nn.Module:
    return _Broken("hang", num_classes)


def error_model(num_classes: int = 1000) -> nn.Module:
    return _Broken("error", num_classes)


for _f in (nan_model, oom_model, crash_model, hang_model, error_model):
    _f.input_size = 32


class _RankOneBroken(Tiny):
    """Behaves on every rank but global rank 1 (torchrun's RANK), where it fails or hangs in forward."""

    def __init__(self, behaviour: str, num_classes: int) -> None:
        super().__init__(num_classes)
        self.behaviour = behaviour

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if os.environ.get("RANK") == "1":
            if self.behaviour == "error":
                raise RuntimeError("rank 1 broke inside forward")
            if self.behaviour == "hang":
                time.sleep(3600)
        return super().forward(x)


def rank1_error_model(num_classes: int = 1000) -> nn.Module:
    return _RankOneBroken("error", num_classes)


def rank1_hang_model(num_classes: int = 1000) -> nn.Module:
    return _RankOneBroken("hang", num_classes)


for _f in (rank1_error_model, rank1_hang_model):
    _f.input_size = 32


#: Where the overlap test's models write CLOCK_MONOTONIC stamps (shared by every process; fixed, because workers
#: fork from a forkserver that may have started before the test could set an environment variable).
STAMP_DIR = os.path.join(tempfile.gettempdir(), f"clsbench-overlap-test-{os.getuid() if hasattr(os, 'getuid') else 0}")


def _stamp(name: str) -> None:
    with open(os.path.join(STAMP_DIR, name), "a", encoding="utf-8") as f:
        f.write(f"{time.monotonic()!r}\n")


class _Stamping(Tiny):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _stamp("forward.txt")
        return super().forward(x)


def stamping_model(num_classes: int = 1000) -> nn.Module:
    """Writes a stamp at every forward call (the measurement being timed)."""
    return _Stamping(num_classes)


stamping_model.input_size = 32


def slow_building_model(num_classes: int = 1000) -> nn.Module:
    """Builds until 2.5 s after the stamping model's first forward call (at most 60 s), writing a stamp every 5 ms
    and always one more after any pause (a worker preparing ahead of a measurement)."""
    first_forward = os.path.join(STAMP_DIR, "forward.txt")
    give_up = time.monotonic() + 60.0
    seen: float | None = None
    while True:
        _stamp("build.txt")
        now = time.monotonic()
        if seen is None and os.path.exists(first_forward):
            seen = now
        if now > give_up or (seen is not None and now - seen > 2.5):
            break
        time.sleep(0.005)
    return Tiny(num_classes)


slow_building_model.input_size = 32


class _Flaky(Tiny):
    """Fails in forward while the environment variable CLSBENCH_TEST_FLAKY is 1 (a fault that goes away)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if os.environ.get("CLSBENCH_TEST_FLAKY") == "1":
            raise RuntimeError("flaky failure")
        return super().forward(x)


def flaky_model(num_classes: int = 1000) -> nn.Module:
    return _Flaky(num_classes)


class _HostOom(Tiny):
    """Runs out of host memory the way torch's CPU allocator says it (or as Python's MemoryError)."""

    def __init__(self, num_classes: int, python: bool) -> None:
        super().__init__(num_classes)
        self.python = python

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.python:
            raise MemoryError()
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 68719476736 bytes. Error code 12 (Cannot allocate memory)")


def host_oom_model(num_classes: int = 1000) -> nn.Module:
    return _HostOom(num_classes, python=False)


def memory_error_model(num_classes: int = 1000) -> nn.Module:
    return _HostOom(num_classes, python=True)


for _f in (flaky_model, host_oom_model, memory_error_model):
    _f.input_size = 32


def ten_classes() -> nn.Module:
    """A builder without num_classes: a 10-class head, whatever clsbench asks for."""
    return Tiny(10)


ten_classes.input_size = 32


def not_a_model(num_classes: int = 1000) -> str:
    """A builder that returns something other than a network."""
    return "not a network"


class _Interrupting(Tiny):
    """Raises KeyboardInterrupt (as Ctrl-C would, in this process) on its ``after``-th forward on a real device."""

    def __init__(self, after: int, num_classes: int) -> None:
        super().__init__(num_classes)
        self.after = after
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "meta":  # FLOP counting runs a meta-device copy: not a real call
            self.calls += 1
            if self.calls == self.after:
                raise KeyboardInterrupt
        return super().forward(x)


def interrupting_model(num_classes: int = 1000) -> nn.Module:
    """Ctrl-C on the n-th call ($CLSBENCH_TEST_INTERRUPT_AFTER, default 20): e.g. inside a soak's timed region."""
    return _Interrupting(int(os.environ.get("CLSBENCH_TEST_INTERRUPT_AFTER", "20")), num_classes)


interrupting_model.input_size = 32
