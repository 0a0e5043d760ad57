"""Pre-flight checks: the state of the GPU just before measuring, recorded and turned into warnings in words.

The reproducibility checklist, done by the tool: other processes on the GPU, a GPU that is busy or already hot,
the clocks and power limit in force, persistence mode, ECC and MIG. clsbench reports these and never changes
them: every NVML call here is a getter. Only NVML is used, so no CUDA context is created and the caller can
still fork clean workers.

Each check gives ``{"check": name, "status": "ok" | "warn" | "info" | "unavailable", "message": words}``:
``warn`` means the numbers may not be what this GPU delivers, ``info`` is a fact worth recording that does not
invalidate them, ``unavailable`` says why the fact could not be read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from clsbench.errors import InvalidInputError, short_reason
from clsbench.results.telemetry import THROTTLE_REASONS, reason_label, reason_names
from clsbench.system.nvml import cuda_index_of, nvml_reason, open_nvml, open_nvml_handle, shutdown

__all__ = [
    "CHECKS",
    "GPU_BUSY_UTIL_PCT",
    "GPU_HOT_C",
    "POWER_LIMIT_TOLERANCE",
    "preflight_checks",
]

GPU_BUSY_UTIL_PCT = 10
"""A GPU whose NVML utilisation is above this (percent of the last sampling window in which a kernel ran) is
not idle: something else is computing on it. An idle GPU reads 0%; a little headroom ignores a monitoring
tool's brief queries."""

GPU_HOT_C = 60
"""A GPU above this temperature (°C) before the run is already hot. Idle data-centre GPUs in a cooled room sit
around 25–45 °C; a higher reading means it just ran work or cools poorly. A hot start leaves less thermal
headroom, so boost clocks drop sooner than from a cold start, and two runs that start at different temperatures
are not comparable. Waiting a minute or two for the GPU to cool fixes it."""

POWER_LIMIT_TOLERANCE = 0.01
"""An enforced power limit more than this fraction below the default counts as lowered. Boards can enforce a
limit slightly below the nominal default; a difference within 1% does not change what the GPU delivers."""


def preflight_checks(device: str) -> list[dict]:
    """Reads the GPU's state and says, check by check, what could make a measurement on it untrustworthy.

    Read-only: no clock, limit or mode is changed. Creates no CUDA context (NVML only).

    Args:
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (N counts the GPUs visible to this process, honouring
            ``CUDA_VISIBLE_DEVICES``, as torch does).

    Returns:
        The checks ``other_processes``, ``gpu_busy``, ``gpu_hot``, ``clocks``, ``power_limit``, ``persistence``,
        ``ecc`` and ``mig``, in that order, each ``{"check", "status", "message"}``. When the GPU cannot be read
        at all (a CPU device, no NVML, an index NVML cannot map) a single entry with check ``"nvml"`` and
        status ``"unavailable"`` gives the reason. Never raises.
    """
    try:
        cuda_index = cuda_index_of(device)
    except InvalidInputError as exc:
        return [_entry("nvml", "unavailable", f"no GPU checks: {exc.message}")]
    if cuda_index is None:
        return [_entry("nvml", "unavailable", "no GPU checks: device is cpu")]
    nvml, why = open_nvml()
    if nvml is None:
        return [_entry("nvml", "unavailable", f"no GPU checks: {why}")]
    try:
        handle, _, why = open_nvml_handle(nvml, cuda_index)
        if handle is None:
            return [_entry("nvml", "unavailable", f"no GPU checks: {why}")]
        reason = nvml_reason(nvml)
        entries = []
        for name, check in CHECKS:
            try:
                status, message = check(nvml, handle)
            except Exception as exc:  # one unreadable fact costs one check, never the others
                status, message = "unavailable", reason(exc)
            entries.append(_entry(name, status, message))
        return entries
    except Exception as exc:  # a bug or a GPU falling off the bus: say so, do not stop the run
        return [_entry("nvml", "unavailable", f"GPU checks failed: {short_reason(exc)}")]
    finally:
        shutdown(nvml)


def _entry(check: str, status: str, message: str) -> dict:
    return {"check": check, "status": status, "message": message}


# ----------------------------------------------------------------------------------------------------------
# The checks: each takes (pynvml, handle) and returns (status, message); an exception means "unavailable".


def _other_processes(nvml: Any, handle: Any) -> tuple[str, str]:
    """Compute and graphics processes on the GPU other than this one.

    Inside a container NVML may list processes under host PIDs or not list other containers' processes at all,
    so "none" means none that NVML shows here.
    """
    processes = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
    graphics = getattr(nvml, "nvmlDeviceGetGraphicsRunningProcesses", None)
    if graphics is not None:
        try:
            processes.extend(graphics(handle))
        except Exception:  # graphics contexts are rare on compute GPUs; the compute list is what matters
            pass
    own = os.getpid()
    others: dict[int, Any] = {}
    for process in processes:
        pid = int(process.pid)
        if pid != own:
            others.setdefault(pid, getattr(process, "usedGpuMemory", None))
    if not others:
        return "ok", "no other process uses this GPU (as far as NVML shows)"
    described = []
    for pid, used in sorted(others.items()):
        memory = f", {used / 2**30:.1f} GiB" if isinstance(used, int) else ""
        described.append(f"pid {pid}{_process_name(pid)}{memory}")
    count = len(others)
    return "warn", (
        f"{count} other process{'es' if count != 1 else ''} on this GPU ({'; '.join(described)}): they compete for "
        "it and the numbers will be low and noisy; stop them or use another GPU"
    )


def _process_name(pid: int) -> str:
    try:
        import psutil

        return f" {psutil.Process(pid).name()}"
    except Exception:  # another PID namespace or an exited process: the pid alone must do
        return ""


def _gpu_busy(nvml: Any, handle: Any) -> tuple[str, str]:
    rates = nvml.nvmlDeviceGetUtilizationRates(handle)
    gpu, memory = int(rates.gpu), int(rates.memory)
    if gpu > GPU_BUSY_UTIL_PCT:
        return "warn", (
            f"GPU not idle: {gpu}% utilisation before the run (threshold {GPU_BUSY_UTIL_PCT}%), memory {memory}%; "
            "something else is computing on it"
        )
    return "ok", f"GPU idle: {gpu}% utilisation, memory {memory}%"


def _gpu_hot(nvml: Any, handle: Any) -> tuple[str, str]:
    temperature = int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
    if temperature > GPU_HOT_C:
        return "warn", (
            f"GPU already hot: {temperature} °C before the run (threshold {GPU_HOT_C} °C); it may throttle sooner "
            "than from a cold start: let it cool for a minute or two"
        )
    return "ok", f"GPU at {temperature} °C"


def _clocks(nvml: Any, handle: Any) -> tuple[str, str]:
    """The clocks in force now (an idle GPU's are low, which is normal) and any power or thermal reason active."""
    sm, mem = nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM
    sm_now = int(nvml.nvmlDeviceGetClockInfo(handle, sm))
    parts = [f"SM {sm_now} MHz now"]
    details = [
        ("max", _optional(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, sm))),
        ("application", _optional(lambda: nvml.nvmlDeviceGetApplicationsClock(handle, sm))),
    ]
    shown = [f"{label} {value}" for label, value in details if value is not None]
    if shown:
        parts[0] += f" ({', '.join(shown)} MHz)"
    mem_now = _optional(lambda: nvml.nvmlDeviceGetClockInfo(handle, mem))
    mem_max = _optional(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, mem))
    if mem_now is not None:
        parts.append(f"memory {mem_now} MHz" + (f" (max {mem_max} MHz)" if mem_max is not None else ""))
    message = ", ".join(parts)

    reasons = _current_reasons(nvml, handle)
    held = [name for name in reasons if name in THROTTLE_REASONS] if reasons is not None else []
    if held:
        return "warn", f"{message}; clocks held down now by {', '.join(reason_label(n) for n in held)}"
    return "info", message


def _power_limit(nvml: Any, handle: Any) -> tuple[str, str]:
    enforced = int(nvml.nvmlDeviceGetEnforcedPowerLimit(handle)) / 1000.0  # NVML gives milliwatts
    default_mw = _optional(lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle))
    if default_mw is None:
        return "info", f"power limit {enforced:g} W enforced (default not readable)"
    default = default_mw / 1000.0
    if enforced < default * (1 - POWER_LIMIT_TOLERANCE):
        return "warn", (
            f"power limit lowered: {enforced:g} W enforced, default {default:g} W; results are for a capped GPU "
            "and not comparable with the same GPU at its default limit"
        )
    if enforced > default * (1 + POWER_LIMIT_TOLERANCE):
        return "info", f"power limit raised: {enforced:g} W enforced, default {default:g} W"
    return "ok", f"power limit {enforced:g} W enforced (default {default:g} W)"


def _persistence(nvml: Any, handle: Any) -> tuple[str, str]:
    enabled = nvml.nvmlDeviceGetPersistenceMode(handle) == getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    if enabled:
        return "ok", "persistence mode on"
    return "info", (
        "persistence mode off: the driver may tear the GPU down between processes, adding start-up time to each "
        "worker (outside the timed regions); `nvidia-smi -pm 1` turns it on where you administer the machine"
    )


def _ecc(nvml: Any, handle: Any) -> tuple[str, str]:
    current, pending = nvml.nvmlDeviceGetEccMode(handle)
    on = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    later = f" (turns {'on' if pending == on else 'off'} at the next reset)" if pending != current else ""
    if current == on:
        return "ok", f"ECC on{later}"
    return "info", (
        f"ECC off{later}: memory bandwidth and capacity differ from the same GPU with ECC on; compare only with "
        "ECC-off results"
    )


def _mig(nvml: Any, handle: Any) -> tuple[str, str]:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except Exception as exc:
        if getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3):  # nvml.h code
            return "ok", "MIG not supported on this GPU: the whole GPU is used"
        raise
    if current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
        return "warn", (
            "MIG enabled: results are for a slice of the GPU, not the whole GPU, while power, clocks and "
            "temperature are the whole GPU's"
        )
    return "ok", "MIG off: the whole GPU is used"


def _current_reasons(nvml: Any, handle: Any) -> list[str] | None:
    for getter in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        function = getattr(nvml, getter, None)
        if function is not None:
            value = _optional(lambda f=function: f(handle))
            if value is not None:
                return reason_names(value)
    return None


def _optional(read: Callable[[], Any]) -> int | None:
    """``int(read())``, or None when the GPU or driver cannot answer: an optional detail of a check."""
    try:
        return int(read())
    except Exception:
        return None


CHECKS: tuple[tuple[str, Callable[[Any, Any], tuple[str, str]]], ...] = (
    ("other_processes", _other_processes),
    ("gpu_busy", _gpu_busy),
    ("gpu_hot", _gpu_hot),
    ("clocks", _clocks),
    ("power_limit", _power_limit),
    ("persistence", _persistence),
    ("ecc", _ecc),
    ("mig", _mig),
)
"""(name, check) in the order they are reported."""
