"""The GPU section of the environment: the measured GPU's identity, clocks, power limits and modes.

Read from NVML, which talks to the driver without creating a CUDA context, so the caller can still fork benchmark
workers with a clean GPU; only when NVML is missing does it fall back to ``torch.cuda.get_device_properties``,
which initialises CUDA in this process. Every key of :data:`GPU_KEYS` is present; a fact that could not be read is
``None`` with its reason (:class:`~clsbench.system.fact_collector.FactCollector`). NVML reports power in milliwatts;
it is stored in watts, unrounded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from clsbench.errors import short_reason
from clsbench.system.fact_collector import FactCollector, FactUnavailable, import_optional
from clsbench.system.nvml import map_cuda_index, nvml_reason, nvml_text, open_nvml, shutdown, visible_nvml_indices

__all__ = ["GPU_KEYS", "collect_gpu"]

# NVML's compute modes (nvml.h, nvmlComputeMode_t).
_COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
_NVML_PSTATE_UNKNOWN = 32  # nvml.h, NVML_PSTATE_UNKNOWN

GPU_KEYS: tuple[str, ...] = (
    "source",
    "count",
    "visible_count",
    "index",
    "nvml_index",
    "name",
    "uuid",
    "pci_bus_id",
    "memory_total_bytes",
    "compute_capability",
    "multiprocessor_count",
    "driver_version",
    "cuda_driver_version",
    "nvml_version",
    "clock_sm_mhz",
    "clock_mem_mhz",
    "clock_sm_max_mhz",
    "clock_mem_max_mhz",
    "clock_sm_app_mhz",
    "clock_mem_app_mhz",
    "power_limit_enforced_w",
    "power_limit_default_w",
    "power_limit_min_w",
    "power_limit_max_w",
    "persistence_enabled",
    "mig_enabled",
    "ecc_enabled",
    "temperature_c",
    "performance_state",
    "compute_mode",
)


def collect_gpu(cuda_index: int | None, c: FactCollector) -> dict[str, Any]:
    """GPU facts from NVML, or from torch when NVML is missing; every key of ``GPU_KEYS`` is present."""
    gpu: dict[str, Any] = {}
    if cuda_index is None:
        c.missing(gpu, "gpu.index", "device is cpu")
    else:
        gpu["index"] = cuda_index

    nvml, nvml_why = open_nvml()
    if nvml is not None:
        gpu["source"] = "nvml"
        try:
            leftover_reason = _gpu_from_nvml(nvml, cuda_index, gpu, c)
        except Exception as exc:  # e.g. a GPU that falls off the bus mid-read: keep what was read
            leftover_reason = f"NVML failed: {short_reason(exc)}"
        finally:
            shutdown(nvml)
    elif cuda_index is None:
        c.missing(gpu, "gpu.count", nvml_why)
        leftover_reason = "device is cpu"
    else:
        leftover_reason = _gpu_from_torch(cuda_index, gpu, c, nvml_why)

    for key in GPU_KEYS:
        if key not in gpu:
            c.missing(gpu, f"gpu.{key}", leftover_reason)
    return {key: gpu[key] for key in GPU_KEYS}


def _gpu_from_nvml(nvml: Any, cuda_index: int | None, gpu: dict[str, Any], c: FactCollector) -> str:
    """Fills ``gpu`` from NVML for CUDA device ``cuda_index``; returns the reason for facts left unread."""
    reason = nvml_reason(nvml)
    count = c.read(gpu, "gpu.count", lambda: int(nvml.nvmlDeviceGetCount()), reason)
    if cuda_index is None:
        return "device is cpu"
    if count is None:
        return "NVML could not count the GPUs"

    visible, why = visible_nvml_indices(nvml, count)
    if visible is None:
        return why
    gpu["visible_count"] = len(visible)
    nvml_index, why = map_cuda_index(nvml, visible, cuda_index)
    if nvml_index is None:
        return why
    gpu["nvml_index"] = nvml_index
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(nvml_index)
    except Exception as exc:
        return f"NVML could not open GPU {nvml_index}: {reason(exc)}"

    def mhz(getter: Callable[..., Any], clock_type: str) -> Callable[[], int]:
        return lambda: int(getter(handle, getattr(nvml, clock_type)))

    def watts(getter: Callable[[], Any]) -> Callable[[], float]:
        return lambda: int(getter()) / 1000.0  # NVML reports milliwatts

    def enabled(value: Any, on_value: Any) -> bool:
        return value == on_value

    feature_enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    constraints: list[Any] = []

    def power_constraint(position: int) -> float:
        if not constraints:
            constraints.extend(nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle))
        return int(constraints[position]) / 1000.0

    facts: list[tuple[str, Callable[[], Any]]] = [
        ("name", lambda: nvml_text(nvml.nvmlDeviceGetName(handle))),
        ("uuid", lambda: nvml_text(nvml.nvmlDeviceGetUUID(handle))),
        ("pci_bus_id", lambda: nvml_text(nvml.nvmlDeviceGetPciInfo(handle).busId)),
        ("memory_total_bytes", lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).total)),
        ("compute_capability", lambda: "{}.{}".format(*nvml.nvmlDeviceGetCudaComputeCapability(handle))),
        ("multiprocessor_count", lambda: _nvml_multiprocessors(nvml, handle)),
        ("driver_version", lambda: nvml_text(nvml.nvmlSystemGetDriverVersion())),
        ("cuda_driver_version", lambda: _format_cuda_version(nvml.nvmlSystemGetCudaDriverVersion())),
        ("nvml_version", lambda: nvml_text(nvml.nvmlSystemGetNVMLVersion())),
        ("clock_sm_mhz", mhz(nvml.nvmlDeviceGetClockInfo, "NVML_CLOCK_SM")),
        ("clock_mem_mhz", mhz(nvml.nvmlDeviceGetClockInfo, "NVML_CLOCK_MEM")),
        ("clock_sm_max_mhz", mhz(nvml.nvmlDeviceGetMaxClockInfo, "NVML_CLOCK_SM")),
        ("clock_mem_max_mhz", mhz(nvml.nvmlDeviceGetMaxClockInfo, "NVML_CLOCK_MEM")),
        ("clock_sm_app_mhz", mhz(nvml.nvmlDeviceGetApplicationsClock, "NVML_CLOCK_SM")),
        ("clock_mem_app_mhz", mhz(nvml.nvmlDeviceGetApplicationsClock, "NVML_CLOCK_MEM")),
        ("power_limit_enforced_w", watts(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))),
        ("power_limit_default_w", watts(lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle))),
        ("power_limit_min_w", lambda: power_constraint(0)),
        ("power_limit_max_w", lambda: power_constraint(1)),
        ("persistence_enabled", lambda: enabled(nvml.nvmlDeviceGetPersistenceMode(handle), feature_enabled)),
        (
            "mig_enabled",
            lambda: enabled(nvml.nvmlDeviceGetMigMode(handle)[0], getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)),
        ),
        ("ecc_enabled", lambda: enabled(nvml.nvmlDeviceGetEccMode(handle)[0], feature_enabled)),
        ("temperature_c", lambda: int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))),
        ("performance_state", lambda: _performance_state(nvml.nvmlDeviceGetPerformanceState(handle))),
        ("compute_mode", lambda: _compute_mode(nvml.nvmlDeviceGetComputeMode(handle))),
    ]
    for key, reader in facts:
        c.read(gpu, f"gpu.{key}", reader, reason)
    return "not read"


def _nvml_multiprocessors(nvml: Any, handle: Any) -> int:
    """SM count; NVML documents ``nvmlDeviceGetAttributes`` for MIG handles only: whole GPUs may say no."""
    try:
        count = int(nvml.nvmlDeviceGetAttributes(handle).multiprocessorCount)
    except Exception as exc:
        if isinstance(exc, AttributeError) or getattr(exc, "value", None) is not None:
            raise FactUnavailable("NVML gives it for MIG instances only; CUDA would need a context") from exc
        raise
    if count <= 0:
        raise FactUnavailable("NVML gives it for MIG instances only; CUDA would need a context")
    return count


def _format_cuda_version(version: Any) -> str:
    """NVML and the CUDA driver API encode CUDA 12.4 as 12040."""
    number = int(version)
    return f"{number // 1000}.{number % 1000 // 10}"


def _performance_state(state: Any) -> str:
    if int(state) == _NVML_PSTATE_UNKNOWN:
        raise FactUnavailable("reported as unknown")
    return f"P{int(state)}"


def _compute_mode(mode: Any) -> str:
    return _COMPUTE_MODES.get(int(mode), f"unknown ({int(mode)})")


def _gpu_from_torch(cuda_index: int, gpu: dict[str, Any], c: FactCollector, nvml_reason: str) -> str:
    """Fallback without NVML: what ``torch.cuda.get_device_properties`` knows (this initialises CUDA)."""
    torch = import_optional("torch")
    if torch is None:
        return f"{nvml_reason}; torch not installed"
    try:
        if not torch.backends.cuda.is_built():
            return f"{nvml_reason}; torch built without CUDA"
        if not torch.cuda.is_available():
            return "no CUDA device"
        visible = int(torch.cuda.device_count())
    except Exception as exc:
        return f"{nvml_reason}; torch.cuda failed: {short_reason(exc)}"
    gpu["source"] = "torch"
    gpu["visible_count"] = visible
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        gpu["count"] = visible
    if cuda_index >= visible:
        return f"no CUDA device cuda:{cuda_index} ({visible} visible)"
    try:
        props = torch.cuda.get_device_properties(cuda_index)
    except Exception as exc:
        return f"{nvml_reason}; torch.cuda.get_device_properties failed: {short_reason(exc)}"
    c.read(gpu, "gpu.name", lambda: str(props.name))
    c.read(gpu, "gpu.uuid", lambda: _torch_uuid(props))
    c.read(gpu, "gpu.pci_bus_id", lambda: _torch_pci_bus_id(props))
    c.read(gpu, "gpu.memory_total_bytes", lambda: int(props.total_memory))
    c.read(gpu, "gpu.compute_capability", lambda: f"{props.major}.{props.minor}")
    c.read(gpu, "gpu.multiprocessor_count", lambda: int(props.multi_processor_count))
    c.read(gpu, "gpu.cuda_driver_version", lambda: _format_cuda_version(_torch_driver_version(torch)))
    return nvml_reason


def _torch_driver_version(torch: Any) -> int:
    getter = getattr(torch._C, "_cuda_getDriverVersion", None)
    if getter is None:
        raise FactUnavailable("not exposed by this torch")
    return int(getter())


def _torch_uuid(props: Any) -> str:
    uuid = getattr(props, "uuid", None)
    if uuid is None:
        raise FactUnavailable("not in this torch version")
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def _torch_pci_bus_id(props: Any) -> str:
    """In NVML's format, ``00000000:19:00.0``, so that both sources give the same string."""
    if not hasattr(props, "pci_bus_id"):
        raise FactUnavailable("not in this torch version")
    return f"{int(props.pci_domain_id):08X}:{int(props.pci_bus_id):02X}:{int(props.pci_device_id):02X}.0"
