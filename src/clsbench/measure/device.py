"""Device helpers used by the workloads: synchronisation, CUDA event timers and memory readings."""

from __future__ import annotations

import resource
import sys
import warnings
from typing import Any

import torch


def set_tf32(enabled: bool) -> dict[str, Any]:
    """Set TF32 for matmuls and cuDNN convolutions, and return the flags now in force."""
    with warnings.catch_warnings():
        # Newer torch prefers the fp32_precision API and may warn about the legacy flags; both are honoured.
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled
        torch.set_float32_matmul_precision("high" if enabled else "highest")
        return {
            "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
        }


def synchronize(device: torch.device) -> None:
    """Wait until all queued work on ``device`` has finished (no-op on the CPU, which runs synchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class EventTimeline:
    """CUDA events recorded on the current stream between iterations, read after the region ends.

    Recording an event costs a few microseconds of host time and never synchronises, so per-iteration device
    times come for free inside a region timed by two synchronisations.
    """

    def __init__(self) -> None:
        self._events: list[torch.cuda.Event] = []

    def mark(self) -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self._events.append(event)

    def intervals_ms(self) -> list[float]:
        """Milliseconds between consecutive marks (call after synchronising)."""
        return [a.elapsed_time(b) for a, b in zip(self._events, self._events[1:], strict=False)]


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def memory_readings(device: torch.device) -> dict[str, Any]:
    """Peak torch allocations on ``device``, device memory in use (NVML) and this process's peak RSS, in bytes."""
    out: dict[str, Any] = {
        "peak_memory_allocated_bytes": None,
        "peak_memory_reserved_bytes": None,
        "device_memory_used_bytes": None,
        "host_peak_rss_bytes": _peak_rss_bytes(),
    }
    if device.type == "cuda":
        out["peak_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))
        out["peak_memory_reserved_bytes"] = int(torch.cuda.max_memory_reserved(device))
        out["device_memory_used_bytes"] = _nvml_used_bytes(device)
    return out


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # Linux reports KiB, macOS bytes


def _nvml_used_bytes(device: torch.device) -> int | None:
    """Memory in use on the whole GPU as NVML sees it (all processes, CUDA context included), or None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            index = device.index if device.index is not None else torch.cuda.current_device()
            uuid = torch.cuda.get_device_properties(index).uuid
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID("GPU-" + str(uuid))
            except Exception:  # noqa: BLE001 - fall back to the index when the UUID form differs
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - NVML is optional; the field stays null
        return None


def device_capabilities(device: torch.device) -> tuple[bool, bool]:
    """(bf16 supported, TF32 supported) for ``device``."""
    if device.type != "cuda":
        return True, False  # CPU autocast supports bfloat16; TF32 is a GPU tensor-core format
    major, _ = torch.cuda.get_device_capability(device)
    return bool(torch.cuda.is_bf16_supported()), major >= 8
