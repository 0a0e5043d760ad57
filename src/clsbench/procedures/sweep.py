"""Batch-size sweeps: throughput, latency, memory and power against the batch size, the knee and the largest fit.

A sweep is an ordinary result file: one model, workload, mode and device measured at several batch sizes, each
repeat in its own fresh worker process (:func:`clsbench.engine.runner.run_plan`). Only the facts of the *procedure* are
stored beyond that, under ``settings["sweep"]`` (the sizes asked for, the automatic-growth rules, the knee
fraction, why growth stopped); the knee, the largest batch that fits and the latency-throughput curve are derived
on reading by the pure function :func:`analyze_sweep`, so ``show`` and later reports get them from the file
alone, and the raw samples stay the only source of truth.

``batch_sizes="auto"``:

1. start at :data:`AUTO_START_BATCH` and multiply by :data:`AUTO_GROWTH_FACTOR`, up to ``max_batch``;
2. growth ends when throughput stops rising (``plateau``: :data:`AUTO_PLATEAU_PATIENCE` sizes in a row that do not
   raise the best throughput seen by at least :data:`AUTO_MIN_GAIN`, 3%), at the first size that fails (``oom``
   or another failure reason; the failure is that point's recorded outcome and the sweep goes on), or at
   ``max_batch``;
3. refinement: after a failure, up to :data:`AUTO_REFINE_FAILURE_STEPS` bisections between the last size that ran
   and the one that failed, towards the largest size that still runs; after a plateau,
   :data:`AUTO_REFINE_PLATEAU_STEPS` midpoint between the last size that raised the best and the next one.

The knee is the smallest batch size whose throughput reaches at least ``knee_fraction`` (default 0.9) of the best
throughput seen in the sweep.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clsbench.analysis import stats
from clsbench.analysis.knee import DEFAULT_KNEE_FRACTION, knee
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.plan import MAX_BATCH_SIZE, Cell, validate_batch_size
from clsbench.core.vocab import Reason, Status
from clsbench.engine.incremental import IncrementalRun
from clsbench.engine.planning import plan_run
from clsbench.errors import InvalidInputError
from clsbench.procedures.base import PROCEDURES, ProcedureView
from clsbench.report.table import fmt_ms, fmt_rate, render_rows
from clsbench.results import io as result_io
from clsbench.results.schema import DEFAULT_BACKEND, BenchmarkResult, Measurement, backend_suffix
from clsbench.system.machine import resolve_device, run_facts

#: Automatic growth continues only while a doubling raises the best throughput seen by at least this fraction.
#: 3% is about three times the spread of batch >= 64 throughput between fresh processes on the H200 (<= 0.91%,
#: docs/methodology/limitations.md), so a smaller gain cannot be told apart from noise.
AUTO_MIN_GAIN = 0.03

#: Growth ends on a plateau only after this many doublings in a row without that gain: launch-bound small batches
#: can move by tens of % between fresh processes (docs/methodology/limitations.md), and one unlucky point must not end
#: a sweep at batch 2.
AUTO_PLATEAU_PATIENCE = 2

#: Automatic growth starts here and multiplies by this factor.
AUTO_START_BATCH = 1
AUTO_GROWTH_FACTOR = 2

#: Bisections after growth ended in a failure (out of memory): each halves the gap to the largest batch that runs.
AUTO_REFINE_FAILURE_STEPS = 2
#: Midpoints measured after growth ended on a plateau.
AUTO_REFINE_PLATEAU_STEPS = 1

#: Automatic growth never goes beyond this batch size unless told to (``max_batch``).
DEFAULT_MAX_BATCH = 4096

#: Version of the ``settings["sweep"]`` block, in case its keys ever change.
SWEEP_FORMAT = 1

AUTO = "auto"


# --------------------------------------------------------------------------------------------- input checking


def parse_batch_sizes(text: str | Sequence[int | str]) -> list[int] | str:
    """``"auto"``, or a list of distinct batch sizes in ascending order, from ``"1,2,4"`` or a sequence.

    Raises:
        InvalidInputError: an empty list, a value that is not a whole number, or a size out of range.
    """
    if isinstance(text, str):
        if text.strip().lower() == AUTO:
            return AUTO
        parts: list[int | str] = [p.strip() for p in text.split(",")]
    else:
        parts = list(text)
    if len(parts) > 1 and any(isinstance(p, str) and p.lower() == AUTO for p in parts):
        raise InvalidInputError("batch size auto goes alone, not in a list",
                                "give --batch-size auto, or a list such as --batch-size 1,2,4")
    if not parts or all(isinstance(p, str) and not p for p in parts):
        raise InvalidInputError("the batch-size list is empty", "e.g. --batch-size 1,2,4,8 or --batch-size auto")
    sizes: list[int] = []
    for part in parts:
        if isinstance(part, bool):
            raise InvalidInputError(f"batch size {part!r} is not a whole number", "e.g. --batch-size 1,2,4")
        if isinstance(part, str):
            if not part:
                raise InvalidInputError("the batch-size list has an empty entry", "e.g. --batch-size 1,2,4")
            try:
                part = int(part)
            except ValueError:
                raise InvalidInputError(f"batch size {part!r} is not a whole number",
                                        "e.g. --batch-size 1,2,4 or --batch-size auto") from None
        if not isinstance(part, int):
            raise InvalidInputError(f"batch size {part!r} is not a whole number", "e.g. --batch-size 1,2,4")
        validate_batch_size(part)
        sizes.append(part)
    return sorted(set(sizes))


def validate_knee_fraction(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0.0 < value <= 1.0:
        raise InvalidInputError(f"knee fraction must lie in (0, 1], got {value!r}", "e.g. --knee 0.9")
    return float(value)


def _validate_max_batch(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BATCH_SIZE:
        raise InvalidInputError(f"max batch must be a whole number in 1..{MAX_BATCH_SIZE}, got {value!r}",
                                "e.g. --max-batch 1024")
    return value


# ------------------------------------------------------------------------------------------------ the sweep


@dataclass(frozen=True)
class SweepResult:
    """What :func:`sweep` returns: the result (as saved) and its analysis (:func:`analyze_sweep`)."""

    result: BenchmarkResult
    analysis: dict[str, Any]
    path: Path | None = None

    @property
    def knee_batch(self) -> int | None:
        knee = self.analysis.get("knee")
        return knee["batch_size"] if knee else None

    @property
    def largest_fitting_batch(self) -> int | None:
        return self.analysis.get("largest_fitting_batch")

    @property
    def points(self) -> list[dict[str, Any]]:
        return self.analysis.get("points", [])


def _throughput(m: Measurement) -> float:
    value = m.summary.get("throughput_img_s") if m.status == Status.OK else None
    return float(value) if isinstance(value, (int, float)) else 0.0


def sweep(
    model: str,
    workload: str,
    mode: str = "fp32",
    device: str = "auto",
    batch_sizes: Sequence[int] | str = AUTO,
    output: str | Path | None = None,
    *,
    options: MeasureOptions = MeasureOptions(),
    execution: Execution = Execution(),
    knee_fraction: float = DEFAULT_KNEE_FRACTION,
    max_batch: int = DEFAULT_MAX_BATCH,
    backend: str = DEFAULT_BACKEND,
    no_cache: bool = False,
    cache_dir: str | None = None,
) -> SweepResult:
    """Measure one model/workload/mode at several batch sizes, each in its own worker processes.

    Args:
        model, workload, mode, device: the series to sweep (as for ``clsbench run``).
        batch_sizes: the sizes to measure, or ``"auto"`` (see the module docstring).
        output: the result file, saved after every measurement (None: memory only); never overwritten.
        options: what each measurement does (as for :func:`clsbench.api.plan_run`).
        execution: isolation, clock, progress, the environment to record and the GPU probe (as for ``run``).
        knee_fraction: the knee is the smallest batch reaching this fraction of the best throughput.
        max_batch: the largest size automatic growth may try.
        backend: the inference backend every point runs on (``eager``: the PyTorch module; another backend builds
            one artifact per batch size, each cached); inference workloads only.
        no_cache, cache_dir: the backends' artifact cache (as for ``clsbench run``).

    Raises:
        InvalidInputError: bad input (empty or invalid sizes, knee fraction outside (0, 1], unknown names...).
        ResultFileError: ``output`` exists or cannot be written.
        RunInterrupted: Ctrl-C; what finished is saved, and ``clsbench run --resume`` finishes the step in flight.
    """
    from clsbench.modes import parse_mode
    from clsbench.workloads import WORKLOADS

    sizes = parse_batch_sizes(batch_sizes) if isinstance(batch_sizes, str) else parse_batch_sizes(list(batch_sizes))
    knee_fraction = validate_knee_fraction(knee_fraction)
    max_batch = _validate_max_batch(max_batch)
    WORKLOADS.get(workload)
    path = Path(output) if output is not None else None
    if path is not None:
        result_io.check_writable(path)
    resolved = resolve_device(device)
    first = AUTO_START_BATCH if sizes == AUTO else sizes[0]
    plan = plan_run(models=[model], workloads=[workload], modes=[mode], batch_sizes=[first], device=resolved,
                    options=options, execution=execution, environment=execution.env, backends=[backend],
                    no_cache=no_cache, cache_dir=cache_dir)
    canonical = parse_mode(mode).name
    facts: dict[str, Any] = {
        "format": SWEEP_FORMAT,
        "model": model,
        "workload": workload,
        "mode": canonical,
        "device": resolved,
        "input_size": options.input_size,
        "batch_sizes": sizes,
        "knee_fraction": knee_fraction,
        "order": [],
    }
    if backend != DEFAULT_BACKEND:
        facts["backend"] = backend  # written only when not eager, so eager sweeps read as before
    if sizes == AUTO:
        facts["auto"] = {"start": AUTO_START_BATCH, "factor": AUTO_GROWTH_FACTOR, "min_gain": AUTO_MIN_GAIN,
                         "plateau_patience": AUTO_PLATEAU_PATIENCE, "max_batch": max_batch,
                         "refine_failure_steps": AUTO_REFINE_FAILURE_STEPS,
                         "refine_plateau_steps": AUTO_REFINE_PLATEAU_STEPS}
        facts["growth_stopped_by"] = None
    environment = run_facts(resolved, execution.env, probe=execution.probe)
    run = IncrementalRun(plan, path, environment=environment, key="sweep", facts=facts, execution=execution)

    def cell(size: int) -> Cell:
        return Cell(model, workload, canonical, size, resolved, options.input_size, backend=backend)

    def measure(batch: list[int]) -> list[Measurement]:
        facts["order"].extend(b for b in batch if b not in facts["order"])
        return run.measure([cell(b) for b in batch])

    if sizes == AUTO:
        facts["growth_stopped_by"] = _grow(measure, max_batch)
        run.save()
    else:
        measure(list(sizes))
    return SweepResult(result=run.result, analysis=analyze_sweep(run.result), path=path)


def _grow(measure: Any, max_batch: int) -> str:
    """Automatic growth then refinement (module docstring); returns why growth stopped."""
    measured: dict[int, Measurement] = {}

    def one(size: int) -> Measurement:
        if size not in measured:
            measured[size] = measure([size])[0]
        return measured[size]

    growth = _Growth()
    while growth.stopped_by is None:
        growth.add(growth.size, one(growth.size), max_batch)
    if growth.last_ok is None or growth.skipped or growth.stopped_by == "max_batch":
        return growth.stopped_by  # nothing ran at all, or the growth reached its limit with everything running
    if growth.stopped_by == "plateau":
        _refine_plateau(one, measured, growth.best_size)
    else:
        _refine_failure(one, growth.last_ok, growth.size)
    return growth.stopped_by


@dataclass
class _Growth:
    """The automatic growth's state: the size to measure next, the best throughput seen and how many sizes in a row
    failed to raise it, and, once growth stops, why."""

    size: int = AUTO_START_BATCH
    last_ok: int | None = None
    best: float = 0.0
    best_size: int = AUTO_START_BATCH
    strikes: int = 0
    stopped_by: str | None = None
    skipped: bool = False  # the size that stopped growth was skipped (the mode cannot run here)

    def add(self, size: int, point: Measurement, max_batch: int) -> None:
        """Take the measurement of ``size``; decide whether to grow (then ``size`` is the next) or stop."""
        if point.status != Status.OK:
            self.stopped_by = point.reason or point.status
            self.skipped = point.status == Status.SKIPPED
            return
        throughput = _throughput(point)
        self.last_ok = size
        if size != self.best_size and throughput < self.best * (1.0 + AUTO_MIN_GAIN):
            self.strikes += 1
            if self.strikes >= AUTO_PLATEAU_PATIENCE:
                self.stopped_by = "plateau"
                return
        else:
            self.best, self.best_size, self.strikes = throughput, size, 0
        if size * AUTO_GROWTH_FACTOR > max_batch:
            self.stopped_by = "max_batch"
            return
        self.size = size * AUTO_GROWTH_FACTOR


def _refine_plateau(one: Any, measured: dict[int, Measurement], best_size: int) -> None:
    """The rise ended between the last size that raised the best and the next one: look in between."""
    low, high = best_size, best_size * AUTO_GROWTH_FACTOR
    for _ in range(AUTO_REFINE_PLATEAU_STEPS):
        mid = (low + high) // 2
        if mid <= low or mid in measured:
            break
        one(mid)
        low = mid


def _refine_failure(one: Any, last_ok: int, failed: int) -> None:
    """Bisect between the largest size that ran and the first that failed, towards the largest that runs."""
    low, high = last_ok, failed
    for _ in range(AUTO_REFINE_FAILURE_STEPS):
        mid = (low + high) // 2
        if mid <= low:
            break
        if one(mid).status == Status.OK:
            low = mid
        else:
            high = mid


# ------------------------------------------------------------------------------------------- analysis (pure)


def _point(m: Measurement) -> dict[str, Any]:
    s = m.summary
    latency = s.get("latency_ms") or {}
    tail, tail_is = stats.tail_latency(latency)
    tele = s.get("telemetry") or {}
    memory = s.get("peak_memory_reserved_bytes")
    memory_kind = "reserved"
    if memory is None and s.get("peak_memory_allocated_bytes") is not None:
        memory, memory_kind = s["peak_memory_allocated_bytes"], "allocated"
    if memory is None and s.get("host_peak_rss_bytes") is not None:
        memory, memory_kind = s["host_peak_rss_bytes"], "host_rss"
    return {
        "batch_size": m.batch_size,
        "status": m.status,
        "reason": m.reason,
        "detail": m.detail,
        "throughput_img_s": s.get("throughput_img_s"),
        "latency_p50_ms": latency.get("p50"),
        # The p99 only where each repeat timed enough batches for one (else None, as the run table shows it).
        "latency_p99_ms": latency.get("p99"),
        "latency_max_ms": latency.get("max"),
        # The curve's tail: the p99, else the slowest batch (never below the p99 it replaces), with its name.
        "latency_tail_ms": tail,
        "latency_tail_is": tail_is,
        "latency_kind": s.get("latency_kind"),
        "peak_memory_bytes": memory if memory is not None else None,
        "peak_memory_kind": memory_kind if memory is not None else None,
        "peak_memory_reserved_bytes": s.get("peak_memory_reserved_bytes"),
        "peak_memory_allocated_bytes": s.get("peak_memory_allocated_bytes"),
        "host_peak_rss_bytes": s.get("host_peak_rss_bytes"),
        "power_avg_w": tele.get("power_avg_w"),
        "joules_per_image": tele.get("joules_per_image"),
        "images_per_s_per_w": tele.get("images_per_s_per_w"),
        "spread_pct": s.get("spread_pct"),
        "unstable": bool(s.get("unstable")),
        "repeats": s.get("repeats"),
    }


def _series(result: BenchmarkResult) -> tuple[dict[str, Any], list[Measurement]]:
    facts = result.settings.get("sweep") or {}
    if facts:
        key = (facts.get("model"), facts.get("workload"), facts.get("mode"), facts.get("device"),
               facts.get("backend") or DEFAULT_BACKEND)
        return facts, [m for m in result.measurements
                       if (m.model, m.workload, m.mode, m.device, m.backend) == key]
    groups = {(m.model, m.workload, m.mode, m.device, m.backend) for m in result.measurements}
    if len(groups) > 1:
        raise InvalidInputError(f"not a sweep: the result holds {len(groups)} model/workload/mode/device/backend "
                                "series", "run `clsbench sweep`, or pass a file with one series at several batch "
                                "sizes")
    return facts, list(result.measurements)


def analyze_sweep(result: BenchmarkResult, *, knee_fraction: float | None = None) -> dict[str, Any]:
    """Derive a sweep's figures from a result file alone (pure: reads the measurements and ``settings``).

    Returns a dict with ``points`` (per batch size, ascending: throughput, p50/p99 latency per batch, peak memory,
    power), ``best`` (the highest throughput), ``knee`` (the smallest batch reaching ``knee_fraction`` of it),
    ``largest_fitting_batch`` (the largest batch that ran ok), ``smallest_oom_batch``, and for inference the
    ``latency_throughput_curve`` (the tail latency per batch against img/s: the p99 where each repeat timed enough
    batches for one, else the slowest batch, named in ``latency_tail_is``; each point marked ``pareto`` when no
    other point has both more img/s and a lower tail). A point's ``latency_p99_ms`` is None where the p99 was
    withheld (too few batches timed); its ``latency_max_ms`` is the slowest batch. ``knee_fraction`` defaults to
    the one stored with the sweep.
    """
    facts, measurements = _series(result)
    fraction = validate_knee_fraction(knee_fraction if knee_fraction is not None else
                                      facts.get("knee_fraction", DEFAULT_KNEE_FRACTION))
    points = sorted((_point(m) for m in measurements), key=lambda p: p["batch_size"])
    ok = [p for p in points if p["status"] == Status.OK and p["throughput_img_s"] is not None]
    first = measurements[0] if measurements else None
    workload = facts.get("workload") or (first.workload if first else None)
    out: dict[str, Any] = {
        "model": facts.get("model") or (first.model if first else None),
        "workload": workload,
        "mode": facts.get("mode") or (first.mode if first else None),
        "backend": facts.get("backend") or (first.backend if first else DEFAULT_BACKEND),
        "device": facts.get("device") or (first.device if first else None),
        "requested": facts.get("batch_sizes"),
        "growth_stopped_by": facts.get("growth_stopped_by"),
        "knee_fraction": fraction,
        "points": points,
        "best": None,
        "knee": None,
        "largest_fitting_batch": max((p["batch_size"] for p in points if p["status"] == Status.OK), default=None),
        "smallest_oom_batch": min((p["batch_size"] for p in points if p["reason"] == Reason.OOM), default=None),
        "latency_throughput_curve": None,
        "still_rising": None,
    }
    if ok:
        best = max(ok, key=lambda p: (p["throughput_img_s"], -p["batch_size"]))
        out["best"] = {"batch_size": best["batch_size"], "throughput_img_s": best["throughput_img_s"]}
        knee_batch, knee_rate = knee([(p["batch_size"], p["throughput_img_s"]) for p in ok], fraction) or (0, 0.0)
        out["knee"] = {"batch_size": knee_batch, "throughput_img_s": knee_rate,
                       "fraction_of_best": knee_rate / best["throughput_img_s"],
                       "rule": f"smallest batch reaching >= {fraction:g} of the best throughput"}
        ordered = sorted(ok, key=lambda p: p["batch_size"])
        if len(ordered) >= 2 and ordered[-1] is best and ordered[-2]["throughput_img_s"]:
            gain = best["throughput_img_s"] / ordered[-2]["throughput_img_s"] - 1.0
            if gain >= AUTO_MIN_GAIN:
                # The best is the largest size measured and it still gained: a larger batch may move the knee.
                out["still_rising"] = {"from_batch": ordered[-2]["batch_size"], "to_batch": best["batch_size"],
                                       "gain": gain}
    if workload in ("infer-throughput", "infer-latency"):
        curve = []
        for p in ok:
            dominated = p["latency_tail_ms"] is None or any(
                q is not p and q["latency_tail_ms"] is not None and q["throughput_img_s"] >= p["throughput_img_s"]
                and q["latency_tail_ms"] <= p["latency_tail_ms"]
                and (q["throughput_img_s"] > p["throughput_img_s"] or q["latency_tail_ms"] < p["latency_tail_ms"])
                for q in ok)
            curve.append({"batch_size": p["batch_size"], "throughput_img_s": p["throughput_img_s"],
                          "latency_p50_ms": p["latency_p50_ms"], "latency_p99_ms": p["latency_p99_ms"],
                          "latency_max_ms": p["latency_max_ms"], "latency_tail_ms": p["latency_tail_ms"],
                          "latency_tail_is": p["latency_tail_is"], "pareto": not dominated})
        out["latency_throughput_curve"] = curve
    return out


# ----------------------------------------------------------------------------------------------- rendering






def _mem(point: dict[str, Any]) -> str:
    value = point.get("peak_memory_bytes")
    if value is None:
        return "-"
    suffix = {"reserved": "", "allocated": " alloc", "host_rss": " rss"}.get(point.get("peak_memory_kind") or "", "")
    return f"{value / (1024 * 1024):,.0f} MiB{suffix}"


def _withheld_p99_note(points: list[dict[str, Any]]) -> str:
    """The footnote under the table when some ``p99 ms`` cell is ``-`` because too few batches were timed."""
    short = [str(p["batch_size"]) for p in points if p["status"] == Status.OK and p["latency_p99_ms"] is None
             and p.get("latency_max_ms") is not None]
    if not short:
        return ""
    return (f"p99 -: batch {', '.join(short)} timed fewer than {stats.MIN_SAMPLES['p99']} batches in a repeat, too "
            "few for a p99 (max ms is the slowest batch); raise --iterations or --min-time for one")


_GROWTH_WORDS = {
    "plateau": "throughput stopped rising (< {gain:.0f}% per doubling)",
    "oom": "out of memory",
    "max_batch": "reached the largest batch allowed (--max-batch)",
}


def render_sweep(analysis: dict[str, Any]) -> str:
    """The sweep as text: one row per batch size, then the knee, the largest fit and the curve, in words."""
    best = analysis.get("best")
    knee = analysis.get("knee")
    header = ("batch", "img/s", "% best", "p50 ms", "p99 ms", "max ms", "peak mem", "avg W", "J/img", "status",
              "note")
    rows = []
    for p in analysis.get("points", []):
        share = "-"
        if best and p["status"] == Status.OK and p["throughput_img_s"] is not None:
            share = f"{100.0 * p['throughput_img_s'] / best['throughput_img_s']:.0f}%"
        notes = []
        if knee and p["batch_size"] == knee["batch_size"]:
            notes.append("knee")
        if best and p["batch_size"] == best["batch_size"]:
            notes.append("best")
        if p["batch_size"] == analysis.get("largest_fitting_batch"):
            notes.append("largest fit")
        status = p["status"] if p["status"] == Status.OK else f"{p['status'].upper()}: {p['reason']}"
        if p["status"] == Status.OK and p["unstable"]:
            status = "UNSTABLE"
        rows.append((str(p["batch_size"]), fmt_rate(p["throughput_img_s"]), share, fmt_ms(p["latency_p50_ms"]),
                     fmt_ms(p["latency_p99_ms"]), fmt_ms(p["latency_max_ms"]), _mem(p),
                     "-" if p["power_avg_w"] is None else f"{p['power_avg_w']:.0f}",
                     "-" if p["joules_per_image"] is None else f"{p['joules_per_image']:.4f}", status,
                     ", ".join(notes)))
    title = (f"sweep: {analysis.get('model')} {analysis.get('workload')} {analysis.get('mode')}"
             f"{backend_suffix(analysis.get('backend'))} on "
             f"{analysis.get('device')} (latency per batch; memory: peak reserved on a GPU, worker RSS on a CPU)")
    lines = [title, ""]
    if not rows:
        return "\n".join([*lines, "(no points)"]) + "\n"
    lines += render_rows(header, rows, {"batch", "img/s", "% best", "p50 ms", "p99 ms", "max ms", "peak mem",
                                         "avg W", "J/img"})
    withheld = _withheld_p99_note(analysis.get("points", []))
    lines += [withheld] if withheld else []
    lines.append("")
    fraction = analysis.get("knee_fraction", DEFAULT_KNEE_FRACTION)
    if knee and best:
        lines.append(f"knee: batch {knee['batch_size']} ({fmt_rate(knee['throughput_img_s'])} img/s, "
                     f"{100 * knee['fraction_of_best']:.0f}% of the best {fmt_rate(best['throughput_img_s'])} img/s at "
                     f"batch {best['batch_size']}; rule: the smallest batch reaching {100 * fraction:g}% of the best)")
    else:
        lines.append("knee: none (no batch size ran successfully)")
    rising = analysis.get("still_rising")
    if rising:
        lines.append(f"note: throughput was still rising at the largest batch measured (+{100 * rising['gain']:.0f}% "
                     f"from batch {rising['from_batch']} to {rising['to_batch']}): the knee may lie further out; "
                     "measure larger sizes")
    fit = analysis.get("largest_fitting_batch")
    oom = analysis.get("smallest_oom_batch")
    fit_text = f"largest batch that fits: {fit if fit is not None else 'none'}"
    fit_text += f" (batch {oom} ran out of memory)" if oom is not None else " (no size measured ran out of memory)"
    lines.append(fit_text)
    stopped = analysis.get("growth_stopped_by")
    if stopped:
        words = _GROWTH_WORDS.get(stopped, "a point failed ({reason})")
        lines.append("automatic growth stopped: " + words.format(gain=100 * AUTO_MIN_GAIN, reason=stopped))
    curve = analysis.get("latency_throughput_curve")
    if curve:
        lines += ["", "latency-throughput curve (tail latency per batch against img/s: the p99, or the slowest "
                      "batch where too few were timed for a p99; * = Pareto-optimal):", ""]
        table = render_rows(("batch", "tail", "tail ms", "img/s", "pareto"), [
            (str(c["batch_size"]), c.get("latency_tail_is") or "p99", fmt_ms(c.get("latency_tail_ms")),
             fmt_rate(c["throughput_img_s"]), "*" if c["pareto"] else "")
            for c in curve], {"batch", "tail ms", "img/s"})
        lines += ["  " + line for line in table]
    return "\n".join(lines) + "\n"


def knee_fraction_of(result: BenchmarkResult) -> float | None:
    """The knee rule a sweep file was run with (``sweep --knee``), which the report's batch-sweep curves mark."""
    facts = result.settings.get("sweep") or {}
    return facts.get("knee_fraction") or None


PROCEDURES.register("sweep", ProcedureView("sweep", lambda result: render_sweep(analyze_sweep(result)),
                                           knee_fraction=knee_fraction_of))


@dataclass(frozen=True)
class SweepSettings:
    """What one sweep measures (``clsbench sweep``; :func:`clsbench.api.sweep` takes it): the cell without its batch
    size, the batch sizes (a list, or :data:`AUTO`: double from 1 until out of memory or a plateau), the knee's
    fraction of the best throughput, the largest batch ``auto`` may try, and the backend's artifact cache."""

    model: str
    workload: str = "infer-throughput"
    mode: str = "fp32"
    device: str = "auto"
    batch_sizes: Sequence[int] | str = AUTO
    knee_fraction: float = DEFAULT_KNEE_FRACTION
    max_batch: int = DEFAULT_MAX_BATCH
    backend: str = DEFAULT_BACKEND
    no_cache: bool = False
    cache_dir: str | None = None
