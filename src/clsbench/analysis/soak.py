"""The verdicts of a soak (``clsbench soak``): pure functions of its windows and its telemetry, no torch, no NVML.

A soak is one long timed region split into windows (:mod:`clsbench.procedures.soak`); each window stores where it
started (``start_s``, seconds since the region began), how long it ran (``wall_s``) and how many iterations it
finished. The telemetry record of the same region (:mod:`clsbench.results.telemetry`) has its own ``t_s`` from the
same start, within a few milliseconds (the sampler starts right before the region's clock is read), so windows
and samples share one time axis.

The rules (docs/methodology/soak.md, "Soak verdicts", says the same in prose):

* **full windows**: a window that ran at least :data:`PARTIAL_WINDOW_SHARE` of the window length; a shorter one
  (a soak ended early mid-window) counts in the totals but in no judgement below.
* **warm-up transient**: the leading windows *slower* than the median of the next :data:`LOOKAHEAD_WINDOWS` by more
  than :data:`STEADY_BAND_PCT`. A fast start is not a transient: boost clocks that fade as the card heats up are
  what a soak is for, so they stay in the drift.
* **drift** = last full window / first full window after the transient - 1, in percent (negative: slower at the
  end).
* **steady state**: the longest tail of the post-transient windows whose rolling medians (centred, of
  :data:`ROLLING_WINDOWS`) span at most :data:`STEADY_BAND_PCT` of that tail's median, and that covers at least
  :data:`STEADY_MIN_SHARE` of the post-transient windows (and two windows); its throughput is its images over its
  seconds. No such tail: the speed kept moving to the end ("not reached").
* **throttling**: a sample is throttled when its clock-event reasons include power or heat
  (:data:`~clsbench.results.telemetry.THROTTLE_REASONS`; ``gpu_idle`` and clock settings are not throttling).
  Onset = the first throttled sample, with its reasons; intervals = runs of consecutive throttled samples.
* **cost of throttling**: a window is throttled when more than
  :data:`~clsbench.analysis.telemetry.THROTTLE_MIN_FRACTION` of its samples are; the throughput of throttled and
  unthrottled full post-transient windows is compared (images over seconds of each group), with Welch's t-test on
  the windows' rates. Consecutive windows are not independent samples (they share a process and a temperature), so
  the p-value is a guide, not proof.
* **temperature plateau**: the final level is the median temperature of the last :data:`PLATEAU_TAIL_SHARE` of the
  run; it is reached at the first sample after which every sample stays within :data:`PLATEAU_BAND_C` of it. Reached
  only within that last share, and higher than at the start by more than the band: still rising.
* **energy per image**: the NVML energy counter over the region (else power integrated over time) / images; for
  the steady state, power integrated over the steady windows / their images.
* **duration**: shorter than MLPerf's minimum run of :data:`MLPERF_MIN_DURATION_S` is said.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from clsbench.analysis import stats
from clsbench.analysis.significance import DEFAULT_ALPHA, format_p, welch_t_test
from clsbench.analysis.telemetry import THROTTLE_MIN_FRACTION, summarize_telemetry
from clsbench.core.text_table import fmt_rate, text_table
from clsbench.results.schema import BenchmarkResult, Measurement, backend_suffix
from clsbench.results.telemetry import THROTTLE_REASONS, reason_label, reason_names

#: MLPerf's minimum duration of a performance run (MLPerf Inference rules, ``min_duration`` 600 s): the anchor for
#: "long enough" to see a card's thermal and power steady state.
MLPERF_MIN_DURATION_S = 600.0
#: How far (percent) the speed may move over a stretch of windows that counts as steady (and how much slower than
#: the next windows a window of the warm-up transient is).
STEADY_BAND_PCT = 3.0
#: Windows in the centred rolling median of the steady-state rule (one odd window does not break a steady state).
ROLLING_WINDOWS = 3
#: Windows after a window that the warm-up rule compares it with.
LOOKAHEAD_WINDOWS = 3
#: The steady tail must cover at least this share of the windows after the warm-up transient.
STEADY_MIN_SHARE = 1 / 3
#: A window shorter than this share of the window length is partial (left out of the judgements).
PARTIAL_WINDOW_SHARE = 0.5
#: Degrees Celsius a temperature may move and still be on its plateau (NVML reads whole degrees).
PLATEAU_BAND_C = 2.0
#: The final stretch of the run (share of its duration) whose median temperature is the plateau level.
PLATEAU_TAIL_SHARE = 0.2
#: Version of the ``settings["soak"]`` block.
SOAK_FORMAT = 1
#: Most windows ``show`` lists; longer soaks are listed every n-th window (the first and last always).
MAX_LISTED_WINDOWS = 24


# ------------------------------------------------------------------------------------------------ small helpers


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _points(samples: dict[str, Any], key: str) -> list[tuple[float, float]]:
    """``(t_s, value)`` of every sample of ``key`` that was read."""
    times = samples.get("t_s") or []
    values = samples.get(key) or []
    out = []
    for t, v in zip(times, values, strict=False):
        t, v = _num(t), _num(v)
        if t is not None and v is not None:
            out.append((t, v))
    return out


def _throttle_names(mask: Any) -> list[str]:
    value = _num(mask)
    if value is None:
        return []
    return [name for name in reason_names(int(value)) if name in THROTTLE_REASONS]


def _rate(windows: Sequence[dict[str, Any]]) -> float | None:
    """Images over seconds of a group of windows (a time-weighted mean, not a mean of rates)."""
    wall = sum(w["wall_s"] for w in windows)
    return sum(w["images"] for w in windows) / wall if wall > 0 else None


def _integrate(points: Sequence[tuple[float, float]], start: float, end: float) -> float | None:
    """The trapezoid integral of ``points`` between ``start`` and ``end`` (None with fewer than two inside)."""
    inside = [(t, v) for t, v in points if start <= t <= end]
    if len(inside) < 2:
        return None
    return sum(0.5 * (v0 + v1) * (t1 - t0) for (t0, v0), (t1, v1) in zip(inside, inside[1:], strict=False))


# ------------------------------------------------------------------------------------------------- windows


def window_rows(windows: dict[str, Any], batch_size: int) -> list[dict[str, Any]]:
    """The stored windows (parallel lists ``start_s``, ``wall_s``, ``iterations``, with ``window_s``) as rows:
    ``index``, ``start_s``, ``end_s``, ``wall_s``, ``iterations``, ``images``, ``throughput_img_s``, ``full``."""
    length = _num(windows.get("window_s")) or 0.0
    rows = []
    for index, (start, wall, iterations) in enumerate(zip(windows.get("start_s") or [], windows.get("wall_s") or [],
                                                          windows.get("iterations") or [], strict=False)):
        start, wall = _num(start), _num(wall)
        if start is None or wall is None or wall <= 0 or not isinstance(iterations, int):
            continue
        images = iterations * batch_size
        rows.append({"index": index, "start_s": start, "end_s": start + wall, "wall_s": wall,
                     "iterations": iterations, "images": images, "throughput_img_s": images / wall,
                     "full": wall >= PARTIAL_WINDOW_SHARE * length})
    return rows


def warmup_windows(rates: Sequence[float], band_pct: float = STEADY_BAND_PCT,
                   lookahead: int = LOOKAHEAD_WINDOWS) -> int:
    """How many leading windows are a warm-up transient: each slower than the median of the next ``lookahead``
    windows by more than ``band_pct``. The last window never is (there is nothing after it to compare with)."""
    for index in range(len(rates)):
        after = rates[index + 1:index + 1 + lookahead]
        if not after or rates[index] >= stats.median(after) * (1 - band_pct / 100):
            return index
    return 0


def rolling_medians(values: Sequence[float], width: int = ROLLING_WINDOWS) -> list[float]:
    """The centred rolling median of ``values`` (shorter at the ends). The width is ``width`` (odd), or the largest
    odd number not above ``len(values)``, so that two windows are judged each on its own, not by their mean."""
    width = min(width, len(values) if len(values) % 2 else len(values) - 1)
    half = max(width, 1) // 2
    return [stats.median(values[max(0, i - half):i + half + 1]) for i in range(len(values))]


def steady_start(rates: Sequence[float], band_pct: float = STEADY_BAND_PCT,
                 min_share: float = STEADY_MIN_SHARE) -> int | None:
    """Where the steady state begins in ``rates`` (the windows after the transient), or None when it is not reached.

    The earliest ``k`` whose tail ``rates[k:]`` has its centred rolling medians (of the tail alone) spanning at
    most ``band_pct`` of the tail's median, the tail holding at least two windows and ``min_share`` of ``rates``. A
    single window is its own steady state.
    """
    n = len(rates)
    if n == 1:
        return 0
    need = max(2, math.ceil(n * min_share))
    for k in range(0, n - need + 1):
        tail = rates[k:]
        level = stats.median(tail)
        smooth = rolling_medians(tail)
        if level > 0 and (max(smooth) - min(smooth)) / level * 100 <= band_pct:
            return k
    return None


def _windows_verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Warm-up, drift and steady state of the full windows."""
    full = [w for w in rows if w["full"]]
    out: dict[str, Any] = {"full_windows": len(full), "warmup_windows": 0, "warmup_s": 0.0, "drift_pct": None,
                           "first_rate": None, "last_rate": None, "steady": None}
    if not full:
        return out
    rates = [w["throughput_img_s"] for w in full]
    warm = warmup_windows(rates)
    after = full[warm:]
    out["warmup_windows"] = warm
    out["warmup_s"] = after[0]["start_s"]
    out["first_rate"], out["last_rate"] = after[0]["throughput_img_s"], after[-1]["throughput_img_s"]
    if len(after) >= 2:
        out["drift_pct"] = (after[-1]["throughput_img_s"] / after[0]["throughput_img_s"] - 1) * 100
    start = steady_start([w["throughput_img_s"] for w in after])
    if start is not None:
        steady = after[start:]
        steady_rates = [w["throughput_img_s"] for w in steady]
        out["steady"] = {"from_window": steady[0]["index"], "from_s": steady[0]["start_s"],
                         "to_s": steady[-1]["end_s"], "windows": len(steady), "throughput_img_s": _rate(steady),
                         "spread_pct": stats.spread_pct(steady_rates), "rates": steady_rates,
                         "images": sum(w["images"] for w in steady), "wall_s": sum(w["wall_s"] for w in steady)}
    out["post_warmup"] = after
    return out


# ----------------------------------------------------------------------------------------------- telemetry


def window_telemetry(samples: dict[str, Any] | None) -> dict[str, Any]:
    """The figures of a stretch of telemetry samples (one window's): mean power, median SM and memory clocks,
    highest temperature, mean fan speed, the share of throttled samples and the throttle reasons seen. Every key is
    present; None where the series was not read (no telemetry: every figure None, share None)."""
    samples = samples if isinstance(samples, dict) else {}
    out: dict[str, Any] = {"samples_n": len(samples.get("t_s") or [])}
    for key, series, how in (("power_w", "power_w", stats.mean), ("sm_clock_mhz", "sm_clock_mhz", stats.median),
                             ("mem_clock_mhz", "mem_clock_mhz", stats.median),
                             ("temperature_c", "temperature_c", max), ("fan_pct", "fan_pct", stats.mean)):
        values = [v for v in (_num(x) for x in samples.get(series) or []) if v is not None]
        out[key] = how(values) if values else None
    masks = [m for m in samples.get("clock_event_reasons") or [] if _num(m) is not None]
    throttled = [_throttle_names(m) for m in masks]
    out["throttled_share"] = sum(1 for names in throttled if names) / len(masks) if masks else None
    out["reasons"] = sorted({name for names in throttled for name in names})
    return out


def _slice(samples: dict[str, Any], start: float, end: float) -> dict[str, list[Any]]:
    """The samples with ``start <= t_s < end``, every series cut alike."""
    times = samples.get("t_s") or []
    keep = [i for i, t in enumerate(times) if _num(t) is not None and start <= t < end]
    return {key: [values[i] for i in keep if i < len(values)] for key, values in samples.items()
            if isinstance(values, list)}


def throttle_intervals(samples: dict[str, Any], interval_s: float) -> list[dict[str, Any]]:
    """Runs of consecutive throttled samples: ``start_s``, ``end_s`` (the next sample's time, or one interval after
    the last sample) and the throttle reasons seen in the run."""
    out: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    last_t = 0.0
    for t, mask in zip(samples.get("t_s") or [], samples.get("clock_event_reasons") or [], strict=False):
        t = _num(t)
        if t is None:
            continue
        last_t = t
        names = _throttle_names(mask)
        if names and current is None:
            current = {"start_s": t, "end_s": None, "reasons": sorted(names)}
        elif names and current is not None:
            current["reasons"] = sorted(set(current["reasons"]) | set(names))
        elif current is not None:
            current["end_s"] = t
            out.append(current)
            current = None
    if current is not None:
        current["end_s"] = last_t + interval_s
        out.append(current)
    return out


def _throttling_verdict(samples: dict[str, Any], interval_s: float) -> dict[str, Any] | None:
    """Onset, share per reason and intervals of throttling; None when no reason was read."""
    masks = [(t, m) for t, m in zip(samples.get("t_s") or [], samples.get("clock_event_reasons") or [], strict=False)
             if _num(t) is not None and _num(m) is not None]
    if not masks:
        return None
    counts: dict[str, int] = {}
    throttled = 0
    onset = None
    for t, mask in masks:
        names = _throttle_names(mask)
        if names:
            throttled += 1
            onset = onset or {"t_s": float(t), "reasons": names}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    shares = {name: counts[name] / len(masks) for name in sorted(counts, key=lambda n: (-counts[n], n))}
    return {"samples_n": len(masks), "throttled_share": throttled / len(masks), "onset": onset,
            "reasons": shares, "intervals": throttle_intervals(samples, interval_s)}


def _cost_verdict(post_warmup: list[dict[str, Any]], alpha: float) -> dict[str, Any] | None:
    """Throughput of throttled against unthrottled full windows after the transient; None without telemetry."""
    judged = [w for w in post_warmup if w.get("telemetry", {}).get("throttled_share") is not None]
    if not judged:
        return None
    hot = [w for w in judged if w["telemetry"]["throttled_share"] > THROTTLE_MIN_FRACTION]
    cool = [w for w in judged if w["telemetry"]["throttled_share"] <= THROTTLE_MIN_FRACTION]
    out: dict[str, Any] = {"throttled_windows": len(hot), "unthrottled_windows": len(cool),
                           "throttled_img_s": _rate(hot), "unthrottled_img_s": _rate(cool), "cost_pct": None,
                           "test": None, "verdict": "none"}
    for group, key in ((hot, "throttled_sm_clock_mhz"), (cool, "unthrottled_sm_clock_mhz")):
        clocks = [w["telemetry"]["sm_clock_mhz"] for w in group if w["telemetry"].get("sm_clock_mhz") is not None]
        out[key] = stats.median(clocks) if clocks else None
    if not hot:
        return out
    if not cool:
        out["verdict"] = "always"
        return out
    out["cost_pct"] = (1 - out["throttled_img_s"] / out["unthrottled_img_s"]) * 100
    test = welch_t_test([w["throughput_img_s"] for w in hot], [w["throughput_img_s"] for w in cool], alpha)
    out["test"] = test.to_dict()
    out["verdict"] = ("costly" if out["cost_pct"] > 0 else "faster") if test.significant else \
        "untestable" if not test.testable else "no_cost"
    return out


def _plateau_verdict(samples: dict[str, Any]) -> dict[str, Any] | None:
    """Start, highest and final temperature, when the final level was reached and whether it is still rising."""
    points = _points(samples, "temperature_c")
    if not points:
        return None
    first_t, last_t = points[0][0], points[-1][0]
    tail_from = last_t - PLATEAU_TAIL_SHARE * (last_t - first_t)
    level = stats.median([v for t, v in points if t >= tail_from])
    reached = points[-1][0]
    for index in range(len(points) - 1, -1, -1):
        if abs(points[index][1] - level) > PLATEAU_BAND_C:
            break
        reached = points[index][0]
    start = points[0][1]
    return {"start_c": start, "max_c": max(v for _, v in points), "plateau_c": level, "reached_s": reached,
            "still_rising": reached > tail_from and level - start > PLATEAU_BAND_C and last_t > first_t}


def _energy_verdict(record: dict[str, Any], samples: dict[str, Any], images: int, wall_s: float,
                    steady: dict[str, Any] | None) -> dict[str, Any]:
    summary = summarize_telemetry(record, images=images, wall_s=wall_s)
    out = {key: summary[key] for key in ("energy_j", "energy_method", "joules_per_image", "power_avg_w",
                                         "power_peak_w", "sm_clock_median_mhz", "sm_clock_min_mhz",
                                         "mem_clock_median_mhz", "mem_clock_min_mhz", "unavailable")}
    out["steady_joules_per_image"] = None
    if steady is not None and steady["images"]:
        energy = _integrate(_points(samples, "power_w"), steady["from_s"], steady["to_s"])
        if energy is not None:
            out["steady_joules_per_image"] = energy / steady["images"]
    return out


# ------------------------------------------------------------------------------------------------ analysis


def analyze_windows(windows: dict[str, Any], telemetry: dict[str, Any] | None, *, batch_size: int,
                    asked_s: float | None = None, ended_early: bool = False,
                    alpha: float = DEFAULT_ALPHA) -> dict[str, Any]:
    """Every verdict of one soak from its stored windows and telemetry record (see the module docstring).

    Args:
        windows: ``samples["windows"]`` of the soak's repeat: ``window_s`` and the parallel lists ``start_s``,
            ``wall_s``, ``iterations``.
        telemetry: the repeat's raw telemetry record (None or one without samples: no telemetry verdicts).
        batch_size: images per iteration.
        asked_s: the duration asked for (``--duration``).
        ended_early: the soak was ended by Ctrl-C.
        alpha: significance level of the throttling-cost test.

    Returns:
        A JSON-ready dict: ``windows`` (each with its ``telemetry`` figures), ``duration``, ``warmup``, ``drift_pct``,
        ``steady``, ``throttling``, ``cost``, ``temperature``, ``energy`` and ``notes`` (sentences for people).
    """
    record = telemetry if isinstance(telemetry, dict) else {}
    samples = record.get("samples") if isinstance(record.get("samples"), dict) else {}
    interval = _num(record.get("interval_s")) or 1.0
    rows = window_rows(windows, batch_size)
    for row in rows:
        row["telemetry"] = window_telemetry(_slice(samples, row["start_s"], row["end_s"]))
    verdict = _windows_verdict(rows)
    images = sum(w["images"] for w in rows)
    timed_s = sum(w["wall_s"] for w in rows)
    steady = verdict["steady"]
    analysis: dict[str, Any] = {
        "window_s": _num(windows.get("window_s")), "windows": rows,
        "duration": {"asked_s": asked_s, "timed_s": timed_s, "span_s": rows[-1]["end_s"] if rows else 0.0,
                     "ended_early": bool(ended_early), "mlperf_min_s": MLPERF_MIN_DURATION_S,
                     "shorter_than_mlperf": timed_s < MLPERF_MIN_DURATION_S},
        "images": images, "throughput_img_s": images / timed_s if timed_s > 0 else None,
        "full_windows": verdict["full_windows"],
        "warmup": {"windows": verdict["warmup_windows"], "until_s": verdict["warmup_s"]},
        "drift_pct": verdict["drift_pct"], "first_img_s": verdict["first_rate"], "last_img_s": verdict["last_rate"],
        "steady": steady,
        "throttling": _throttling_verdict(samples, interval),
        "cost": _cost_verdict(verdict.get("post_warmup", []), alpha),
        "temperature": _plateau_verdict(samples),
        "energy": _energy_verdict(record, samples, images, timed_s, steady),
        "telemetry_unavailable": record.get("unavailable") if record else "no telemetry recorded",
    }
    analysis["notes"] = notes(analysis)
    return analysis


def notes(analysis: dict[str, Any]) -> list[str]:
    """What a reader must know before trusting the verdicts, in words."""
    duration = analysis["duration"]
    out = []
    if duration["ended_early"]:
        asked = f" of the {duration['asked_s']:g} s asked" if duration.get("asked_s") else ""
        out.append(f"ended early (Ctrl-C) after {duration['timed_s']:.1f} s{asked}; every finished window is kept")
    if duration["shorter_than_mlperf"]:
        out.append(f"{duration['timed_s']:.0f} s is shorter than MLPerf's {MLPERF_MIN_DURATION_S:.0f} s minimum run: "
                   "heat and power may not have settled; soak for --duration 10m or more before trusting the "
                   "steady state")
    if analysis["full_windows"] < 3:
        out.append(f"only {analysis['full_windows']} full window(s): too few to tell a trend; lower --window or "
                   "raise --duration")
    if analysis["steady"] is None and analysis["full_windows"]:
        out.append(f"no steady state: the throughput kept moving by more than {STEADY_BAND_PCT:g}% to the end; "
                   "soak longer")
    temperature = analysis.get("temperature")
    if temperature and temperature["still_rising"]:
        out.append("the temperature was still rising at the end; soak longer to see its plateau")
    if analysis.get("telemetry_unavailable"):
        out.append(f"no telemetry: {analysis['telemetry_unavailable']}")
    return out


def soak_measurement(result: BenchmarkResult) -> Measurement | None:
    """The one measurement of a soak result (None when the file holds none yet)."""
    return result.measurements[0] if result.measurements else None


def analyze_soak(result: BenchmarkResult, *, alpha: float = DEFAULT_ALPHA) -> dict[str, Any]:
    """The verdicts of a stored soak result (:func:`analyze_windows` on its measurement), with what it measured;
    ``status`` says whether there was anything to judge (``ok``, else the measurement's status and reason)."""
    facts = result.settings.get("soak") or {}
    m = soak_measurement(result)
    head = {"facts": facts, "label": _label(facts, m), "device": m.device if m else facts.get("device")}
    if m is None:
        return {**head, "status": "empty", "detail": "nothing was measured"}
    if m.status != "ok" or not m.repeats:
        return {**head, "status": m.status, "reason": m.reason, "detail": m.detail}
    repeat = m.repeats[0]
    samples = repeat.get("samples") or {}
    windows = samples.get("windows") if isinstance(samples.get("windows"), dict) else None
    if windows is None:
        return {**head, "status": "failed", "reason": None, "detail": "the measurement holds no windows"}
    validity = repeat.get("validity") or {}
    analysis = analyze_windows(windows, repeat.get("telemetry"), batch_size=m.batch_size,
                               asked_s=_num(facts.get("duration_s")), ended_early=bool(validity.get("ended_early")),
                               alpha=alpha)
    gpu = result.environment.get("gpu") if isinstance(result.environment.get("gpu"), dict) else {}
    analysis["power_limit_w"] = _num(gpu.get("power_limit_enforced_w"))
    return {**head, "status": "ok", **analysis}


def _label(facts: dict[str, Any], m: Measurement | None) -> str:
    if m is not None:
        return f"{m.model} {m.workload} {m.mode} bs{m.batch_size}{backend_suffix(m.backend)}"
    return " ".join(str(facts.get(k, "?")) for k in ("model", "workload", "mode"))


# ------------------------------------------------------------------------------------------------- text


def _s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.0f} s" if seconds >= 100 else f"{seconds:.1f} s"


def _pct(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "-"
    return f"{value:+.1f}%" if signed else f"{value:.1f}%"


def _reasons_text(reasons: Sequence[str]) -> str:
    return ", ".join(reason_label(name) for name in reasons) or "-"


def verdict_rows(analysis: dict[str, Any]) -> list[tuple[str, str]]:
    """``(verdict, figure in words)`` rows of an ok soak analysis: what ``show`` prints and the report repeats."""
    d = analysis["duration"]
    asked = f" of {d['asked_s']:g} s asked" if d.get("asked_s") else ""
    mlperf = "shorter than" if d["shorter_than_mlperf"] else ">="
    rows = [("duration", f"{d['timed_s']:.1f} s timed{asked}, {len(analysis['windows'])} window(s) of "
                         f"{analysis['window_s']:g} s ({mlperf} MLPerf's {MLPERF_MIN_DURATION_S:.0f} s)"
                         + ("; ended early (Ctrl-C)" if d["ended_early"] else "")),
            ("throughput", f"{fmt_rate(analysis['throughput_img_s'])} img/s over the run")]
    warm = analysis["warmup"]
    rows.append(("warm-up transient", "none (the first window was already at speed)" if not warm["windows"] else
                 f"{warm['windows']} window(s), until {_s(warm['until_s'])}"))
    steady = analysis["steady"]
    rows.append(("steady state", "not reached (still moving)" if steady is None else
                 f"{fmt_rate(steady['throughput_img_s'])} img/s from {_s(steady['from_s'])} "
                 f"({steady['windows']} window(s), spread {_pct(steady['spread_pct'], signed=False)})"))
    rows.append(("drift", "-" if analysis["drift_pct"] is None else
                 f"{_pct(analysis['drift_pct'])} (last window {fmt_rate(analysis['last_img_s'])} vs first after "
                 f"warm-up {fmt_rate(analysis['first_img_s'])} img/s)"))
    rows += _telemetry_rows(analysis)
    return rows


def _telemetry_rows(analysis: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [("throttling", _throttling_text(analysis.get("throttling"))),
            ("throttling cost", _cost_text(analysis.get("cost")))]
    rows.append(("temperature", _temperature_text(analysis.get("temperature"))))
    energy = analysis["energy"]
    if energy.get("power_avg_w") is not None:
        limit = f", limit {analysis['power_limit_w']:.0f} W" if analysis.get("power_limit_w") else ""
        rows.append(("power", f"mean {energy['power_avg_w']:.0f} W, peak {energy['power_peak_w']:.0f} W{limit}"))
    if energy.get("sm_clock_median_mhz") is not None:
        memory = f", memory {energy['mem_clock_median_mhz']:.0f} MHz" \
            if energy.get("mem_clock_median_mhz") is not None else ""
        rows.append(("clocks", f"SM median {energy['sm_clock_median_mhz']:.0f} MHz (min "
                               f"{energy['sm_clock_min_mhz']:.0f}){memory}"))
    if energy.get("joules_per_image") is not None:
        steady = f"; steady state {energy['steady_joules_per_image']:.4g} J/image (integrated power)" \
            if energy.get("steady_joules_per_image") is not None else ""
        rows.append(("energy", f"{energy['joules_per_image']:.4g} J/image over the run ({energy['energy_method']})"
                               f"{steady}"))
    return rows


def _throttling_text(throttling: dict[str, Any] | None) -> str:
    if throttling is None:
        return "unknown (no clock-event reasons read)"
    if throttling["onset"] is None:
        return f"none in {throttling['samples_n']} samples"
    shares = ", ".join(f"{reason_label(name)} {share:.0%}" for name, share in throttling["reasons"].items())
    onset = throttling["onset"]
    return (f"from {_s(onset['t_s'])} ({_reasons_text(onset['reasons'])}); {throttling['throttled_share']:.0%} of "
            f"samples throttled ({shares}), {len(throttling['intervals'])} interval(s)")


def _cost_text(cost: dict[str, Any] | None) -> str:
    if cost is None:
        return "unknown (no telemetry)"
    verdict = cost["verdict"]
    if verdict == "none":
        return "none (no window throttled)"
    if verdict == "always":
        clock = f", SM median {cost['throttled_sm_clock_mhz']:.0f} MHz" \
            if cost.get("throttled_sm_clock_mhz") is not None else ""
        return (f"every window after warm-up was throttled ({fmt_rate(cost['throttled_img_s'])} img/s{clock}): no "
                "unthrottled window to compare with")
    figures = (f"throttled windows {fmt_rate(cost['throttled_img_s'])} vs unthrottled "
               f"{fmt_rate(cost['unthrottled_img_s'])} img/s ({cost['throttled_windows']} vs "
               f"{cost['unthrottled_windows']} windows)")
    test = cost.get("test") or {}
    p = f", {format_p(test['p'])}" if test.get("p") is not None else ""
    words = {"costly": f"yes: {cost['cost_pct']:.1f}% slower when throttled",
             "faster": f"no: {-cost['cost_pct']:.1f}% faster when throttled",
             "no_cost": f"no measurable cost ({_pct(-cost['cost_pct'])}, not significant)",
             "untestable": f"{_pct(-cost['cost_pct'])}, too few windows to test"}[verdict]
    return f"{words}{p}; {figures}"


def _temperature_text(temperature: dict[str, Any] | None) -> str:
    if temperature is None:
        return "unknown (no temperature read)"
    text = (f"{temperature['start_c']:.0f} -> {temperature['plateau_c']:.0f} C, within {PLATEAU_BAND_C:g} C of it "
            f"from {_s(temperature['reached_s'])} (max {temperature['max_c']:.0f} C)")
    return text + ("; still rising" if temperature["still_rising"] else "")


def _listed(rows: list[dict[str, Any]], limit: int = MAX_LISTED_WINDOWS) -> tuple[list[dict[str, Any]], int]:
    """At most ``limit`` windows, every n-th (first and last kept), and that n."""
    if len(rows) <= limit:
        return rows, 1
    step = math.ceil((len(rows) - 1) / (limit - 1))
    picked = rows[::step]
    if picked[-1] is not rows[-1]:
        picked.append(rows[-1])
    return picked, step


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def window_table(analysis: dict[str, Any]) -> list[str]:
    """The windows as table lines (every n-th of a long soak)."""
    listed, step = _listed(analysis["windows"])
    body = []
    for w in listed:
        t = w["telemetry"]
        body.append([str(w["index"] + 1), f"{w['start_s']:.1f}", f"{w['wall_s']:.2f}", fmt_rate(w["throughput_img_s"]),
                     _fmt(t["power_w"]), _fmt(t["sm_clock_mhz"]), _fmt(t["mem_clock_mhz"]),
                     _fmt(t["temperature_c"]), _fmt(t["fan_pct"]), _reasons_text(t["reasons"])
                     + ("" if w["full"] else " (partial)")])
    header = ["window", "start s", "wall s", "img/s", "power W", "SM MHz", "mem MHz", "temp C", "fan %", "throttle"]
    lines = text_table(header, body, right=range(9))
    if step > 1:
        lines.append(f"(one window in {step} of {len(analysis['windows'])}, the last too; `clsbench report` draws "
                     "them all)")
    return lines


def render_soak(analysis: dict[str, Any]) -> str:
    """The section ``show`` prints for a soak: the verdict table, the notes, then the windows."""
    title = f"soak: {analysis['label']} on {analysis.get('device') or '?'}"
    if analysis["status"] != "ok":
        detail = ": ".join(str(x) for x in (analysis.get("reason"), analysis.get("detail")) if x)
        return f"{title}\n  {analysis['status']}: {detail}\n"
    lines = [title, *text_table(["verdict", "figure"], verdict_rows(analysis))]
    lines += [f"note: {note}" for note in analysis["notes"]]
    lines += ["", *window_table(analysis)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------- compare


def compare_soaks(a: dict[str, Any], b: dict[str, Any], *, alpha: float = DEFAULT_ALPHA) -> dict[str, Any]:
    """Two soaks' steady states (and the figures around them), B against A.

    The steady throughputs are compared with Welch's t-test on the steady windows' rates of each (windows of one
    soak are consecutive, not independent: the p-value is a guide). Without a steady state on a side, the soak's
    post-warm-up throughput is used and ``basis`` says so.

    Returns:
        ``rows`` (figure, A, B, change in percent) and ``throughput``: ``a``, ``b``, ``ratio`` (B / A),
        ``slowdown_pct``, ``test`` and ``basis``.
    """
    def level(x: dict[str, Any]) -> tuple[float | None, list[float], str]:
        if x.get("steady"):
            return x["steady"]["throughput_img_s"], x["steady"]["rates"], "steady state"
        rates = [w["throughput_img_s"] for w in x["windows"] if w["full"]]
        return x.get("throughput_img_s"), rates, "whole run (no steady state)"

    (rate_a, rates_a, basis_a), (rate_b, rates_b, basis_b) = level(a), level(b)
    test = welch_t_test(rates_a, rates_b, alpha) if rates_a and rates_b else None
    ratio = rate_b / rate_a if rate_a and rate_b is not None else None
    throughput = {"a": rate_a, "b": rate_b, "ratio": ratio,
                  "slowdown_pct": (1 - ratio) * 100 if ratio is not None else None,
                  "test": test.to_dict() if test is not None else None, "basis": [basis_a, basis_b]}
    rows = [_row("throughput img/s", rate_a, rate_b), _row("drift %", a.get("drift_pct"), b.get("drift_pct"), False)]
    for name, side in (("throttled share %", "throttling"), ("plateau C", "temperature"),
                       ("J/image", "energy")):
        key = {"throttling": "throttled_share", "temperature": "plateau_c", "energy": "joules_per_image"}[side]
        scale = 100.0 if side == "throttling" else 1.0
        va, vb = ((x.get(side) or {}).get(key) for x in (a, b))
        rows.append(_row(name, va * scale if va is not None else None, vb * scale if vb is not None else None,
                         side == "energy"))
    return {"throughput": throughput, "rows": rows}


def _row(name: str, a: float | None, b: float | None, relative: bool = True) -> dict[str, Any]:
    change = None
    if a is not None and b is not None:
        change = (b / a - 1) * 100 if relative and a else b - a
    return {"figure": name, "a": a, "b": b, "change": change, "relative": relative}
