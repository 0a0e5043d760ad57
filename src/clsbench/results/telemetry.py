"""The telemetry record as stored in result files: its layout, and the decoding of clock-event reasons.

A telemetry source (:mod:`clsbench.system.telemetry`) returns this *raw record* for the timed region of one
measurement; it is kept as-is in the result file so that a report can plot power over time months later, and read
back by :mod:`clsbench.analysis.telemetry` without NVML or a GPU::

    {
        "source": "nvml",                 # which source wrote it: "nvml", "fake" or "none"
        "interval_s": 0.05,               # the requested sampling interval
        "unavailable": None,              # why there is no telemetry at all (None when there is)
        "energy_counter_j": 1234.5,       # NVML total-energy counter at stop minus at start; None if unsupported
        "samples": {                      # parallel lists, one entry per sample; None where a value was unread
            "t_s": [...],                 # seconds since start (time.perf_counter)
            "power_w": [...],
            "gpu_util_pct": [...],
            "mem_util_pct": [...],
            "sm_clock_mhz": [...],
            "mem_clock_mhz": [...],
            "temperature_c": [...],
            "clock_event_reasons": [...], # NVML clock-event (throttle) reason bitmask, see ``reason_names``
            "fan_pct": [...],             # optional (``OPTIONAL_SERIES``): only where the board reports a fan
        },
        "series_unavailable": {"power_w": "not supported on this GPU"},  # optional: why a series is all None
    }

Readers must accept records without ``series_unavailable`` (it is optional) and with series missing; the series
of :data:`OPTIONAL_SERIES` are present only where the GPU has them (a fanless data-centre board has no fan speed).

Values are stored as read (never rounded); statistics are derived on demand by
:func:`clsbench.analysis.telemetry.summarize_telemetry`.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "OPTIONAL_SERIES",
    "REASON_BITS",
    "SERIES",
    "THROTTLE_REASONS",
    "empty_samples",
    "make_record",
    "reason_label",
    "reason_names",
]

SERIES: tuple[str, ...] = (
    "t_s",
    "power_w",
    "gpu_util_pct",
    "mem_util_pct",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "temperature_c",
    "clock_event_reasons",
)
"""The keys of ``record["samples"]``, in a fixed order."""

OPTIONAL_SERIES: tuple[str, ...] = ("fan_pct",)
"""Series a source adds only where the GPU reports them: ``fan_pct``, the fan speed in percent of its maximum
(``nvmlDeviceGetFanSpeed``; boards cooled by the chassis, such as SXM modules, have none)."""

REASON_BITS: tuple[tuple[int, str, str], ...] = (
    (0x001, "gpu_idle", "GPU idle"),
    (0x002, "applications_clocks_setting", "application clocks setting"),
    (0x004, "sw_power_cap", "power cap"),
    (0x008, "hw_slowdown", "hardware slowdown"),
    (0x010, "sync_boost", "sync boost"),
    (0x020, "sw_thermal_slowdown", "thermal slowdown (software)"),
    (0x040, "hw_thermal_slowdown", "thermal slowdown (hardware)"),
    (0x080, "hw_power_brake_slowdown", "power brake (hardware)"),
    (0x100, "display_clock_setting", "display clock setting"),
    (0x200, "board_limit", "board limit"),
    (0x400, "reliability", "reliability limit"),
)
"""(bit, stable name, words for people) of each NVML clock-event reason.

The bits are NVML's ``nvmlClocksEventReason*`` constants (nvml.h; ``pynvml.nvmlClocksEventReasonSwPowerCap`` is
0x4 and so on); ``board_limit`` and ``reliability`` exist only under the older ``nvmlClocksThrottleReason*``
names. They are copied here so that decoding a stored bitmask needs neither NVML nor a GPU; a test checks them
against pynvml's constants.
"""

THROTTLE_REASONS: frozenset[str] = frozenset(
    {"sw_power_cap", "hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown"}
)
"""The reasons that mean the GPU ran slower than it could because of power or heat.

``gpu_idle``, ``applications_clocks_setting``, ``sync_boost`` and ``display_clock_setting`` are not throttling:
they say the GPU had nothing to do or that clocks were set that way on purpose.
"""

_LABELS = {name: label for _, name, label in REASON_BITS}



def empty_samples() -> dict[str, list[Any]]:
    """A ``samples`` dict with every series present and empty."""
    return {key: [] for key in SERIES}


def make_record(
    source: str,
    interval_s: float,
    *,
    unavailable: str | None = None,
    energy_counter_j: float | None = None,
    samples: dict[str, list[Any]] | None = None,
    series_unavailable: dict[str, str] | None = None,
) -> dict:
    """Builds a raw record with every key present (see the module docstring for the layout)."""
    return {
        "source": source,
        "interval_s": float(interval_s),
        "unavailable": unavailable,
        "energy_counter_j": energy_counter_j,
        "samples": samples if samples is not None else empty_samples(),
        "series_unavailable": dict(series_unavailable or {}),
    }


def reason_names(bitmask: int) -> list[str]:
    """Decodes an NVML clock-event reason bitmask into stable snake_case names, lowest bit first.

    Args:
        bitmask: the value of ``nvmlDeviceGetCurrentClocksEventReasons`` (or the older
            ``...ThrottleReasons``), e.g. ``0x44``.

    Returns:
        E.g. ``["sw_power_cap", "hw_thermal_slowdown"]`` for ``0x44``; ``[]`` for 0. A bit NVML may define later
        is named ``unknown_0x800`` (its value), so that no bit is silently dropped.
    """
    mask = int(bitmask)
    names = [name for bit, name, _ in REASON_BITS if mask & bit]
    known = 0
    for bit, _, _ in REASON_BITS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest >= bit:
        if rest & bit:
            names.append(f"unknown_0x{bit:x}")
        bit <<= 1
    return names


def reason_label(name: str) -> str:
    """Words for people for a reason name, e.g. ``"power cap"`` for ``"sw_power_cap"``."""
    return _LABELS.get(name, name.replace("_", " "))
