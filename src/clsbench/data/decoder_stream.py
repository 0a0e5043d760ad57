"""Give torchvision's nvJPEG decoder stream a high priority (an experiment: ``CLSBENCH_GPU_STREAM_PRIORITY=high``).

Why (measured on the H200, benchmarks/results/h200/decode-contention-*): ``decode_jpeg(list, device="cuda")`` decodes
a batch of baseline JPEGs on the hardware decoder, but per image it still copies the bitstream, synchronises on an
event and runs a small colour-conversion kernel on the decoder's own CUDA stream: about 250 round trips through the
GPU per batch of 256. Alone they take 12.6 ms per batch; beside a GPU kept busy by a captured ResNet-50 they took
450 ms. The idea was that at a high priority the GPU's scheduler would take the decoder's blocks first. Measured on
the H200 on 2026-12-02 (docs/methodology/data.md 16.4.4), it did not: with the priority set and read back as -3, the
decode still took 453 ms beside the graph, and the pipeline ran as before. So this is not the default.

torchvision makes that stream itself (the next stream of PyTorch's pool of normal-priority streams, when its decoder
is first made for a device) and offers no way to choose it. So :func:`raise_decoder_priority`:

1. makes torchvision build a fresh decoder for ``device`` (a decode for the same GPU named the other way, ``cuda``
   against ``cuda:N``, then one for ``device``: torchvision makes a new decoder whenever the device differs) right
   after taking one stream from the pool as a marker, so the decoder's stream is the pool's next one;
2. takes streams from the pool until the marker comes round again: the one after it is the decoder's (checked: it
   was not among those taken on the way);
3. sets that stream's priority attribute (``cuStreamSetAttribute(CU_LAUNCH_ATTRIBUTE_PRIORITY)``, CUDA 12 and later)
   to the device's greatest priority, and reads it back.

Nothing else in the process uses that stream until the pool comes round to it again (32 streams later in PyTorch).
Every failure is returned as a reason (the decode then runs at normal priority); nothing here raises.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

#: ``CU_LAUNCH_ATTRIBUTE_PRIORITY`` (cuda.h, CUDA 12): valid for streams, graph nodes and launches.
CU_LAUNCH_ATTRIBUTE_PRIORITY = 8
#: Bytes of a ``CUlaunchAttributeValue`` (a union padded to 64 bytes; the priority is its first int).
ATTRIBUTE_VALUE_BYTES = 64
#: At most this many streams are taken from the pool while looking for the marker (PyTorch's pool holds 32).
MAX_POOL = 256


def _driver() -> Any:
    return ctypes.CDLL("libcuda.so.1")


def _probe_jpeg() -> torch.Tensor:
    from torchvision.io import encode_jpeg

    return encode_jpeg(torch.zeros((3, 16, 16), dtype=torch.uint8), quality=90)


def find_decoder_stream(device: torch.device, decode: Any = None) -> tuple[torch.cuda.Stream | None, str | None]:
    """Steps 1-2 of the module docstring: the stream of a decoder torchvision makes now for ``device``, or
    (None, reason). ``decode(list_of_jpegs, device)`` is torchvision's (a stand-in in tests)."""
    if decode is None:
        from torchvision.io import decode_jpeg

        def decode(data: list[torch.Tensor], where: torch.device) -> Any:
            return decode_jpeg(data, device=where)

    index = device.index if device.index is not None else torch.cuda.current_device()
    named = torch.device("cuda", index)
    probe = _probe_jpeg()
    decode([probe], torch.device("cuda") if device.index is not None else named)
    marker = torch.cuda.Stream(device=named)
    decode([probe], device)
    seen = set()
    for _ in range(MAX_POOL):
        stream = torch.cuda.Stream(device=named)
        if stream.cuda_stream == marker.cuda_stream:
            break
        seen.add(stream.cuda_stream)
    else:
        return None, f"PyTorch's stream pool did not come round to its marker within {MAX_POOL} streams"
    decoder = torch.cuda.Stream(device=named)
    if decoder.cuda_stream in seen or decoder.cuda_stream == marker.cuda_stream:
        return None, "torchvision did not take a new stream from the pool for its decoder"
    return decoder, None


def set_stream_priority(handle: int, priority: int, driver: Any = None) -> tuple[int | None, str | None]:
    """Set the priority attribute of the CUDA stream ``handle``; the value read back, or (None, reason)."""
    try:
        lib = _driver() if driver is None else driver
        value = (ctypes.c_char * ATTRIBUTE_VALUE_BYTES)()
        ctypes.c_int.from_buffer(value).value = priority
        status = lib.cuStreamSetAttribute(ctypes.c_void_p(handle), CU_LAUNCH_ATTRIBUTE_PRIORITY, ctypes.byref(value))
        if status != 0:
            return None, f"cuStreamSetAttribute(priority) returned CUDA error {status}"
        back = (ctypes.c_char * ATTRIBUTE_VALUE_BYTES)()
        status = lib.cuStreamGetAttribute(ctypes.c_void_p(handle), CU_LAUNCH_ATTRIBUTE_PRIORITY, ctypes.byref(back))
        if status != 0:
            return None, f"cuStreamGetAttribute(priority) returned CUDA error {status}"
        return ctypes.c_int.from_buffer(back).value, None
    except (OSError, AttributeError) as exc:  # no driver library, or a driver without stream attributes
        return None, f"{type(exc).__name__}: {exc}"


def raise_decoder_priority(device: torch.device, decode: Any = None, driver: Any = None) -> dict[str, Any]:
    """Steps 1-3 of the module docstring. Returns the facts a result keeps: ``{"priority": int | None,
    "greatest": int, "error": str | None}``."""
    greatest = None
    try:
        greatest = int(torch.cuda.Stream.priority_range()[1])
        stream, reason = find_decoder_stream(device, decode)
        if stream is None:
            return {"priority": None, "greatest": greatest, "error": reason}
        priority, reason = set_stream_priority(stream.cuda_stream, greatest, driver)
        return {"priority": priority, "greatest": greatest, "error": reason}
    except Exception as exc:  # noqa: BLE001 - an optimisation: its failure is recorded, the decode still runs
        return {"priority": None, "greatest": greatest, "error": f"{type(exc).__name__}: {exc}"[:300]}
