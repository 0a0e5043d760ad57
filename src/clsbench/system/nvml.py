"""NVML, once: opening it, error reasons, the CUDA-index to NVML-device mapping, and text from its answers.

Environment capture (:mod:`clsbench.system.environment`), pre-flight checks (:mod:`clsbench.system.preflight`) and
telemetry (:mod:`clsbench.system.telemetry.nvml`) all read the GPU through NVML, which talks to the driver without
the CUDA runtime, so none of them creates a CUDA context. Every call here is a getter: clsbench never changes a GPU
setting.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from clsbench.errors import InvalidInputError, short_reason

__all__ = [
    "cuda_index_of",
    "is_permanent",
    "map_cuda_index",
    "nvml_reason",
    "nvml_text",
    "open_nvml",
    "open_nvml_handle",
    "resolve_nvml_index",
    "shutdown",
    "visible_nvml_indices",
]

# nvml.h error codes, used when the pynvml module in hand does not define the constants.
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_FUNCTION_NOT_FOUND = 13


def cuda_index_of(device: str) -> int | None:
    """Returns the CUDA index a device string names, or None for the CPU."""
    if device == "cpu":
        return None
    if device == "cuda":
        return 0
    match = re.fullmatch(r"cuda:(\d+)", device) if isinstance(device, str) else None
    if match is None:
        raise InvalidInputError(f"unknown device {device!r}", hint="use cpu, cuda or cuda:N")
    return int(match.group(1))


def open_nvml() -> tuple[Any, str]:
    """Imports pynvml and initialises NVML; returns (module, "") or (None, reason)."""
    try:
        import pynvml  # lazy: only GPU machines need it, and importing it has a cost
    except ImportError:
        return None, "NVML not installed (nvidia-ml-py)"
    except Exception as exc:
        return None, f"NVML import failed: {short_reason(exc)}"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # no driver, no library: the machine has no usable NVIDIA GPU
        return None, f"NVML unavailable: {short_reason(exc)}"
    return pynvml, ""


def nvml_reason(nvml: Any) -> Callable[[Exception], str]:
    """Returns a function that turns an NVML exception into a short reason."""
    not_supported, no_permission, function_not_found = _permanent_codes(nvml)

    def reason(exc: Exception) -> str:
        if isinstance(exc, AttributeError):
            return "not in this nvidia-ml-py version"
        code = getattr(exc, "value", None)
        if code == not_supported:
            return "not supported on this GPU"
        if code == no_permission:
            return "no permission to read it"
        if code == function_not_found:
            return "not in this driver's NVML"
        return f"NVML error: {short_reason(exc)}"

    return reason


def _permanent_codes(nvml: Any) -> tuple[int, int, int]:
    """NVML's "not supported", "no permission" and "function not found" codes, from the module or nvml.h."""
    return (getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED),
            getattr(nvml, "NVML_ERROR_NO_PERMISSION", NVML_ERROR_NO_PERMISSION),
            getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND))


def is_permanent(nvml: Any, exc: Exception) -> bool:
    """Whether an NVML failure will not go away by asking again (unsupported, forbidden, or missing)."""
    return isinstance(exc, AttributeError) or getattr(exc, "value", None) in _permanent_codes(nvml)


def shutdown(nvml: Any) -> None:
    """``nvmlShutdown``, ignoring failure: NVML's init count is per process; a failed shutdown leaks a reference."""
    try:
        nvml.nvmlShutdown()
    except Exception:  # noqa: BLE001
        pass


def visible_nvml_indices(nvml: Any, count: int) -> tuple[list[int] | None, str]:
    """NVML indices of the GPUs this process sees, in CUDA order, following ``CUDA_VISIBLE_DEVICES``.

    Entries are indices or (prefixes of) ``GPU-`` UUIDs; like CUDA, the list ends at the first entry that
    names no GPU. A ``MIG-`` entry cannot be mapped to a whole GPU and leaves the GPU facts unread.
    """
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return list(range(count)), ""
    uuids: list[str] | None = None
    visible: list[int] = []
    for raw in spec.split(","):
        entry = raw.strip()
        if entry.startswith("MIG-"):
            return None, "CUDA_VISIBLE_DEVICES names a MIG instance, which is not mapped to a GPU"
        if entry.isdigit() and int(entry) < count:
            index = int(entry)
        elif entry.startswith("GPU-"):
            if uuids is None:
                uuids = [
                    nvml_text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)))
                    for i in range(count)
                ]
            matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
            if len(matches) != 1:
                break
            index = matches[0]
        else:
            break
        if index in visible:
            break
        visible.append(index)
    return visible, ""


def nvml_text(value: Any) -> str:
    """NVML strings come back as bytes from older nvidia-ml-py versions and from ctypes structure fields."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def map_cuda_index(nvml: Any, visible: list[int], cuda_index: int) -> tuple[int | None, str]:
    """The NVML index of ``cuda:N`` among the ``visible`` NVML indices (in CUDA order), or (None, reason).

    CUDA's default order is fastest first; NVML's is PCI bus order. They agree when all visible GPUs are the same
    model, so only a mixed machine without ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` leaves the mapping unknown.
    """
    if cuda_index >= len(visible):
        return None, f"no CUDA device cuda:{cuda_index} ({len(visible)} visible)"
    if len(visible) > 1 and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        names = {nvml_text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i))) for i in visible}
        if len(names) > 1:
            return None, "mixed GPU models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: cannot tell which GPU is meant"
    return visible[cuda_index], ""


def resolve_nvml_index(nvml: Any, cuda_index: int) -> tuple[int | None, str]:
    """Maps CUDA device ``cuda_index`` (as torch counts, after ``CUDA_VISIBLE_DEVICES``) to an NVML index.

    The same rules as ``collect_environment``: indices or ``GPU-`` UUID prefixes in ``CUDA_VISIBLE_DEVICES``, a
    ``MIG-`` entry is not mapped, and on a machine with mixed GPU models CUDA's default fastest-first order is
    only trusted when ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.

    Args:
        nvml: the initialised pynvml module.
        cuda_index: the N of ``cuda:N``.

    Returns:
        ``(nvml_index, "")``, or ``(None, reason)`` when the GPU cannot be told.
    """
    try:
        count = int(nvml.nvmlDeviceGetCount())
        visible, why = visible_nvml_indices(nvml, count)
        if visible is None:
            return None, why
        return map_cuda_index(nvml, visible, cuda_index)
    except Exception as exc:  # a driver hiccup while mapping: no telemetry, never a failed run
        return None, f"NVML could not map cuda:{cuda_index}: {short_reason(exc)}"


def open_nvml_handle(nvml: Any, cuda_index: int) -> tuple[Any, int | None, str]:
    """``(handle, nvml_index, "")`` for CUDA device ``cuda_index``, or ``(None, None, reason)``."""
    nvml_index, why = resolve_nvml_index(nvml, cuda_index)
    if nvml_index is None:
        return None, None, why
    try:
        return nvml.nvmlDeviceGetHandleByIndex(nvml_index), nvml_index, ""
    except Exception as exc:
        return None, None, f"NVML could not open GPU {nvml_index}: {nvml_reason(nvml)(exc)}"
