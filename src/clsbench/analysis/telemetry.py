"""Statistics of one telemetry record: pure functions, no NVML, no torch, so reports rebuild from files alone.

``summarize_telemetry`` turns the raw record a telemetry source wrote (``base`` describes it) into the numbers a
table shows: average and peak power, energy, utilisation, clocks, temperature, the clock-event (throttle)
reasons seen with the fraction of samples each was active in, and, given the number of images, joules per image
and images per second per watt.

Energy comes from NVML's total-energy counter when the GPU has one (Volta and newer): the driver accumulates it
internally, so it is exact over the region whatever the sampling rate. Otherwise the power samples are
integrated with the trapezoid rule over ``t_s``. ``energy_method`` says which. Note that on recent data-centre
GPUs ``nvmlDeviceGetPowerUsage`` reports power averaged over about a second, so over short regions the power
samples lag the load and the counter is the better figure.
"""

from __future__ import annotations

import statistics
from typing import Any

from clsbench.results.telemetry import THROTTLE_REASONS, reason_label, reason_names

__all__ = ["SUMMARY_KEYS", "THROTTLE_MIN_FRACTION", "summarize_telemetry"]

THROTTLE_MIN_FRACTION = 0.05
"""A measurement counts as throttled when power or thermal reasons were active in more than this fraction of
its samples. One sample in twenty (at 20 Hz, a single sample of a one-second region) is tolerated: NVML reports
a reason when the clock controller acted at any time during its own sampling window, so a lone blip at a load
step is common and says nothing about the steady state being measured."""

SUMMARY_KEYS: tuple[str, ...] = (
    "source",
    "samples_n",
    "power_avg_w",
    "power_peak_w",
    "energy_j",
    "energy_method",
    "gpu_util_avg_pct",
    "mem_util_avg_pct",
    "sm_clock_min_mhz",
    "sm_clock_median_mhz",
    "mem_clock_min_mhz",
    "mem_clock_median_mhz",
    "temperature_start_c",
    "temperature_max_c",
    "throttle_reasons",
    "throttled",
    "throttle_summary",
    "joules_per_image",
    "images_per_s_per_w",
    "unavailable",
)
"""Every key ``summarize_telemetry`` returns, always present (``None`` where unknown)."""


def summarize_telemetry(record: dict | None, *, images: int | None = None, wall_s: float | None = None) -> dict:
    """Derives the per-measurement telemetry figures from a raw record.

    Args:
        record: the dict a telemetry source's ``stop()`` returned, possibly loaded from a result file; ``None``
            when the measurement has no telemetry.
        images: images processed in the region the record covers (for ``joules_per_image`` and
            ``images_per_s_per_w``).
        wall_s: duration of that region. Only used for energy when the power samples cannot be integrated (a
            single power sample: energy = that power × ``wall_s``).

    Returns:
        A dict with the keys of ``SUMMARY_KEYS``:

        * ``power_avg_w``: the mean of the power samples (the sampler's interval is fixed, so this is the time
          average); ``power_peak_w`` their maximum.
        * ``energy_j`` with ``energy_method`` ``"counter"`` or ``"integrated"`` (``None`` when neither works).
        * ``gpu_util_avg_pct``, ``mem_util_avg_pct``: means of NVML's utilisation samples.
        * ``sm_clock_min_mhz``/``_median_mhz``, ``mem_clock_min_mhz``/``_median_mhz``; the median of an even
          count is the mean of the middle two.
        * ``temperature_start_c``: the first temperature sample; ``temperature_max_c`` the highest.
        * ``throttle_reasons``: every clock-event reason seen, mapped to the fraction of samples (with a readable
          bitmask) in which it was active, largest first; this includes ``gpu_idle``, which is not throttling.
        * ``throttled``: ``True`` when power or thermal reasons (``base.THROTTLE_REASONS``) were active in more
          than ``THROTTLE_MIN_FRACTION`` of the samples, ``None`` when no reason could be read.
        * ``throttle_summary``: for a throttled measurement, words for the table, e.g.
          ``"power cap 35% of samples"``; otherwise ``None``.
        * ``joules_per_image`` = energy / images; ``images_per_s_per_w`` = images / energy, which is the same
          quantity as (images / s) / W over the region, computed from the energy so that both columns agree and
          use the counter when there is one.
        * ``unavailable``: the record's reason for having no telemetry, or why there is no record.
    """
    out: dict[str, Any] = dict.fromkeys(SUMMARY_KEYS)
    out["samples_n"] = 0
    out["throttle_reasons"] = {}
    if not isinstance(record, dict):
        out["unavailable"] = "no telemetry recorded"
        return out
    out["source"] = record.get("source")
    out["unavailable"] = record.get("unavailable")
    samples = record.get("samples") if isinstance(record.get("samples"), dict) else {}

    times = list(samples.get("t_s") or [])
    out["samples_n"] = len(times)

    power = _present(samples.get("power_w"))
    if power:
        out["power_avg_w"] = statistics.fmean(power)
        out["power_peak_w"] = max(power)
    out["gpu_util_avg_pct"] = _mean(samples.get("gpu_util_pct"))
    out["mem_util_avg_pct"] = _mean(samples.get("mem_util_pct"))
    for series, prefix in (("sm_clock_mhz", "sm_clock"), ("mem_clock_mhz", "mem_clock")):
        values = _present(samples.get(series))
        if values:
            out[f"{prefix}_min_mhz"] = min(values)
            out[f"{prefix}_median_mhz"] = statistics.median(values)
    temperatures = _present(samples.get("temperature_c"))
    if temperatures:
        out["temperature_start_c"] = temperatures[0]
        out["temperature_max_c"] = max(temperatures)

    out["energy_j"], out["energy_method"] = _energy(record, times, samples.get("power_w"), wall_s)
    energy = out["energy_j"]
    if images is not None and images > 0 and energy is not None and energy > 0:
        out["joules_per_image"] = energy / images
        out["images_per_s_per_w"] = images / energy

    out["throttle_reasons"], out["throttled"], out["throttle_summary"] = _throttling(samples.get("clock_event_reasons"))
    return out


def _present(values: Any) -> list[float]:
    """The values of a series that were read (``None`` marks an unread sample)."""
    if not isinstance(values, list):
        return []
    return [value for value in values if value is not None]


def _mean(values: Any) -> float | None:
    present = _present(values)
    return statistics.fmean(present) if present else None


def _energy(record: dict, times: list[Any], power: Any, wall_s: float | None) -> tuple[float | None, str | None]:
    """(energy in J, method): the counter difference, else the trapezoid integral of power over time."""
    counter = record.get("energy_counter_j")
    if isinstance(counter, (int, float)) and not isinstance(counter, bool):
        return float(counter), "counter"
    if not isinstance(power, list):
        return None, None
    points = [(t, p) for t, p in zip(times, power, strict=False) if t is not None and p is not None]
    if len(points) >= 2:
        energy = 0.0
        for (t0, p0), (t1, p1) in zip(points, points[1:], strict=False):
            energy += 0.5 * (p0 + p1) * (t1 - t0)
        return energy, "integrated"
    if len(points) == 1 and wall_s is not None and wall_s > 0:
        return points[0][1] * wall_s, "integrated"
    return None, None


def _throttling(reasons: Any) -> tuple[dict[str, float], bool | None, str | None]:
    """(fraction of samples per reason, throttled?, words) from the clock-event reason bitmasks."""
    masks = [int(mask) for mask in _present(reasons)]
    if not masks:
        return {}, None, None
    counts: dict[str, int] = {}
    throttled_samples = 0
    for mask in masks:
        names = reason_names(mask)
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        if THROTTLE_REASONS.intersection(names):
            throttled_samples += 1
    total = len(masks)
    fractions = {name: counts[name] / total for name in sorted(counts, key=lambda n: (-counts[n], n))}
    throttled = throttled_samples / total > THROTTLE_MIN_FRACTION
    if not throttled:
        return fractions, False, None
    parts = [f"{reason_label(name)} {_percent(share)}" for name, share in fractions.items() if name in THROTTLE_REASONS]
    return fractions, True, ", ".join(parts) + " of samples"


def _percent(fraction: float) -> str:
    """``0.35`` → ``"35%"``; a fraction that would round to 0% reads ``"<1%"`` so that it does not vanish."""
    if 0 < fraction < 0.005:
        return "<1%"
    return f"{fraction * 100:.0f}%"
