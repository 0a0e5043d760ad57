"""Where a step's time goes, derived from a ``torch.profiler`` trace. Pure: reads trace events (Chrome trace format,
as ``export_chrome_trace`` writes them), imports no torch, and is tested on synthetic events.

What it reads (docs/methodology/power-and-efficiency.md, "Profiles", has the long form):

* **steps**: the ``ProfilerStep#k`` ranges the profiler's schedule opens, one per profiled step. The *window* runs
  from the start of the first to the end of the last (or to the end of the last GPU activity, if later); the
  step time is the window over the number of steps. The driver (:mod:`clsbench.measure.profiler`) synchronises the
  device before the first profiled step and inside the last one, so the window holds exactly those steps' work.
* **phases**: the ``clsbench.<phase>`` ranges the workloads open around each part of a step
  (:func:`clsbench.measure.profiler.phase`): ``data_wait`` (waiting for the data pipeline's next batch), ``copy``
  (moving inputs to the device and outputs back), ``forward`` (loss included), ``backward``, ``optimizer`` (the
  optimizer and scaler step, zeroing gradients).
* **GPU activity**: ``kernel``, ``gpu_memcpy`` and ``gpu_memset`` events, each tied through ``args.correlation``
  to the host call that launched it (``cuda_runtime`` and ``cuda_driver`` events); the phase range open when that
  call was made is the activity's phase (``other`` when none was).
* **CPU ops** (``cpu_op``), by self time, and **memory** (``[memory]`` instant events: the allocated total after
  each allocation or free, per device).

The split of the window, per step:

* on a GPU (``basis`` ``gpu``): each phase is the time the GPU ran that phase's work (the union of its activity
  intervals); ``other`` the GPU work launched outside every phase; ``data_wait`` adds the time the GPU was idle
  while the host waited for data; ``idle`` is the rest: no kernel or copy running. ``launch_bound_share`` is the
  idle time *between* GPU activities (not at the window's edges, not while waiting for data) over the window: the
  GPU waiting for the host to launch work.
* on a CPU (``basis`` ``host``): each phase is the host time inside its ranges, ``other`` the time inside the steps
  but outside every phase range; there is no ``idle``.

The parts are disjoint unless work of two phases ran at once (concurrent streams; reported as ``overlap_ms``), so
their shares add up to the step time: :data:`SUM_TOLERANCE` says how closely, and ``adds_up`` whether they did.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: The phases a workload marks, in display order; each range is named ``PHASE_PREFIX + phase``.
PHASES = ("data_wait", "copy", "forward", "backward", "optimizer")
PHASE_PREFIX = "clsbench."
#: The parts of the split besides the phases: work outside every phase range, and the GPU doing nothing.
OTHER, IDLE = "other", "idle"
SPLIT_ORDER = (*PHASES, OTHER, IDLE)
#: The range the profiler's schedule opens around each step.
STEP_PREFIX = "ProfilerStep#"
#: Trace categories of GPU activity, and of the host calls that launch it.
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
#: The shares of the split may add up to 1 +- this before ``adds_up`` turns false: the parts are disjoint by
#: construction, so only work of two phases running at once (two streams) or a trace whose ranges nest can make
#: them sum to more; 1% of the step is far above float rounding and well below any share worth reading.
SUM_TOLERANCE = 0.01
#: Kernels (or CPU ops) listed by name; the rest are summed into one line.
TOP_N = 10
#: Above this, the profiled steps ran so much slower than the timed ones that the idle and launch-bound shares
#: (host time under the profiler) are overstated: the summary says so.
OVERHEAD_WARN_PCT = 10.0
#: ``args["Device Type"]`` of memory events: c10's DeviceType numbering.
DEVICE_TYPE_CPU, DEVICE_TYPE_CUDA = 0, 1

Interval = tuple[float, float]


# ------------------------------------------------------------------------------------------ interval arithmetic


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of ``intervals`` as sorted, disjoint intervals (empty ones dropped)."""
    out: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def length(merged: Iterable[Interval]) -> float:
    return sum(end - start for start, end in merged)


def clip(merged: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    """The parts of ``merged`` inside [lo, hi]."""
    return [(max(s, lo), min(e, hi)) for s, e in merged if e > lo and s < hi]


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """The intersection of two merged interval lists."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > start:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def gaps(merged: Sequence[Interval]) -> list[Interval]:
    """The holes between consecutive intervals of a merged list."""
    return [(merged[k][1], merged[k + 1][0]) for k in range(len(merged) - 1) if merged[k + 1][0] > merged[k][1]]


def complement(merged: Sequence[Interval], lo: float, hi: float) -> list[Interval]:
    """[lo, hi] less ``merged``."""
    inside = clip(merged, lo, hi)
    edges = [(lo, lo), *inside, (hi, hi)]
    return [(edges[k][1], edges[k + 1][0]) for k in range(len(edges) - 1) if edges[k + 1][0] > edges[k][1]]


# ------------------------------------------------------------------------------------------------ the trace


def trace_events(trace: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The events of a Chrome trace: an object with ``traceEvents``, or the bare list."""
    events = trace.get("traceEvents") if isinstance(trace, Mapping) else trace
    if not isinstance(events, Sequence):
        raise ValueError("the trace holds no traceEvents list")
    return [e for e in events if isinstance(e, Mapping)]


def _span(event: Mapping[str, Any]) -> Interval | None:
    """A complete event's (start, end) in microseconds, or None for any other kind."""
    if event.get("ph") != "X":
        return None
    try:
        start = float(event["ts"])
        return start, start + float(event.get("dur") or 0.0)
    except (KeyError, TypeError, ValueError):
        return None


class _Trace:
    """The parts of a trace the summary reads, sorted out once."""

    def __init__(self, events: Sequence[Mapping[str, Any]]) -> None:
        self.steps: list[Interval] = []
        self.phases: dict[str, list[Interval]] = {p: [] for p in PHASES}
        self.gpu: list[tuple[Interval, Mapping[str, Any]]] = []
        self.launches: dict[Any, float] = {}
        self.cpu_ops: list[tuple[Interval, Mapping[str, Any]]] = []
        self.memory: list[Mapping[str, Any]] = []
        for event in events:
            self._add(event)
        self.steps.sort()

    def _add(self, event: Mapping[str, Any]) -> None:
        name, category = str(event.get("name") or ""), event.get("cat")
        if name == "[memory]":
            self.memory.append(event)
            return
        span = _span(event)
        if span is None:
            return
        if category == "user_annotation" and name.startswith(STEP_PREFIX):
            self.steps.append(span)
        elif category == "user_annotation" and name.startswith(PHASE_PREFIX):
            phase = name[len(PHASE_PREFIX):]
            if phase in self.phases:
                self.phases[phase].append(span)
        elif category in GPU_CATEGORIES:
            self.gpu.append((span, event))
        elif category in LAUNCH_CATEGORIES:
            correlation = (event.get("args") or {}).get("correlation")
            if correlation is not None:
                self.launches[correlation] = span[0]
        elif category == "cpu_op":
            self.cpu_ops.append((span, event))

    def window(self) -> Interval | None:
        """From the first step's start to the last step's end (or the last GPU activity's, if later)."""
        if not self.steps:
            return None
        start, end = self.steps[0][0], max(s[1] for s in self.steps)
        inside = [span[1] for span, _ in self.gpu if span[0] >= start]
        return start, max([end, *inside])


class _PhaseLookup:
    """Which phase range holds a host timestamp (phase ranges do not overlap: one thread opens them in turn)."""

    def __init__(self, phases: Mapping[str, Sequence[Interval]]) -> None:
        ranges = sorted((s, e, p) for p, spans in phases.items() for s, e in spans)
        self.starts = [r[0] for r in ranges]
        self.ranges = ranges

    def __call__(self, ts: float | None) -> str:
        if ts is None:
            return OTHER
        index = bisect.bisect_right(self.starts, ts) - 1
        if index >= 0 and self.ranges[index][0] <= ts <= self.ranges[index][1]:
            return self.ranges[index][2]
        return OTHER


# -------------------------------------------------------------------------------------------------- the split


def _gpu_split(trace: _Trace, window: Interval) -> dict[str, Any]:
    """The window split by what the GPU ran (module docstring), in microseconds over the whole window."""
    lo, hi = window
    lookup = _PhaseLookup(trace.phases)
    by_phase: dict[str, list[Interval]] = defaultdict(list)
    for span, event in trace.gpu:
        correlation = (event.get("args") or {}).get("correlation")
        by_phase[lookup(trace.launches.get(correlation))].append(span)
    busy = clip(merge(span for span, _ in trace.gpu), lo, hi)
    waiting = clip(merge(trace.phases["data_wait"]), lo, hi)
    idle_while_waiting = length(intersect(waiting, complement(busy, lo, hi)))
    split = {p: length(clip(merge(by_phase.get(p, ())), lo, hi)) for p in (*PHASES, OTHER)}
    overlap = sum(split.values()) - length(busy)
    split["data_wait"] += idle_while_waiting
    split[IDLE] = (hi - lo) - length(busy) - idle_while_waiting
    between = gaps(busy)
    launch_gaps = length(between) - length(intersect(merge(between), waiting))
    return {"split": split, "overlap": overlap, "busy": length(busy), "launch_gaps": launch_gaps,
            "activities": sum(1 for span, _ in trace.gpu if lo <= span[0] <= hi)}


def _host_split(trace: _Trace, window: Interval) -> dict[str, Any]:
    """The window split by the host's phase ranges (module docstring), in microseconds over the whole window."""
    lo, hi = window
    split = {p: length(clip(merge(trace.phases[p]), lo, hi)) for p in PHASES}
    covered = length(clip(merge(s for spans in trace.phases.values() for s in spans), lo, hi))
    overlap = sum(split.values()) - covered
    split[OTHER] = (hi - lo) - covered
    split[IDLE] = None
    return {"split": split, "overlap": overlap}


def _host_phase_ms(trace: _Trace, window: Interval, steps: int) -> dict[str, float]:
    """The host time inside each phase's ranges, per step: on a GPU, how long the host took to launch the phase."""
    return {p: length(clip(merge(trace.phases[p]), *window)) / 1000.0 / steps for p in PHASES}


# --------------------------------------------------------------------------------------------- top kernels/ops


def _top(totals: Mapping[str, list[float]], steps: int, top: int) -> dict[str, Any]:
    """``totals``: name -> [microseconds, calls]; the ``top`` largest with their shares, the rest summed."""
    whole = sum(t for t, _ in totals.values())
    ranked = sorted(totals.items(), key=lambda item: (-item[1][0], item[0]))
    rows = [{"name": name, "ms_per_step": t / 1000.0 / steps, "calls_per_step": calls / steps,
             "share": t / whole if whole > 0 else None} for name, (t, calls) in ranked[:top]]
    rest = ranked[top:]
    rest_us = sum(t for _, (t, _) in rest)
    return {"rows": rows, "rest": {"names": len(rest), "ms_per_step": rest_us / 1000.0 / steps,
                                   "share": rest_us / whole if whole > 0 else None},
            "total_ms_per_step": whole / 1000.0 / steps}


def top_gpu(trace: _Trace, window: Interval, steps: int, top: int = TOP_N) -> dict[str, Any]:
    """GPU kernels (and copies, memsets) by their summed GPU time within the window; shares of all GPU time."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for span, event in trace.gpu:
        if window[0] <= span[0] <= window[1]:
            entry = totals[str(event.get("name") or "?")]
            entry[0] += span[1] - span[0]
            entry[1] += 1
    return {"kind": "gpu", **_top(totals, steps, top)}


def top_cpu(trace: _Trace, window: Interval, steps: int, top: int = TOP_N) -> dict[str, Any]:
    """CPU ops by self time (their own time, less the ops they called) within the window; shares of all of it."""
    by_thread: dict[Any, list[tuple[Interval, str]]] = defaultdict(list)
    for span, event in trace.cpu_ops:
        if window[0] <= span[0] <= window[1]:
            by_thread[(event.get("pid"), event.get("tid"))].append((span, str(event.get("name") or "?")))
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for ops in by_thread.values():
        ops.sort(key=lambda op: (op[0][0], -(op[0][1] - op[0][0])))
        self_us = [span[1] - span[0] for span, _ in ops]
        stack: list[int] = []
        for index, (span, _) in enumerate(ops):
            while stack and ops[stack[-1]][0][1] <= span[0]:
                stack.pop()
            if stack:
                self_us[stack[-1]] -= span[1] - span[0]
            stack.append(index)
        for (_, name), own in zip(ops, self_us, strict=True):
            totals[name][0] += max(own, 0.0)
            totals[name][1] += 1
    return {"kind": "cpu", **_top(totals, steps, top)}


# ------------------------------------------------------------------------------------------------------ memory


def _level_before(times: Sequence[float], events: Sequence[Mapping[str, Any]], ts: float) -> float | None:
    """The allocated total just before ``ts``: the last event's total, or the next event's total less its bytes."""
    index = bisect.bisect_left(times, ts)
    if index > 0:
        return float(events[index - 1]["args"]["Total Allocated"])
    if index < len(events):
        args = events[index]["args"]
        return float(args["Total Allocated"]) - float(args.get("Bytes") or 0)
    return None


def memory_by_phase(trace: _Trace, window: Interval, *, gpu: bool) -> dict[str, Any]:
    """Per phase: the peak allocated total inside its ranges and how far that rose above the total at the range's
    start (the largest over the phase's ranges). On a CPU the profiler counts only what was allocated while it
    ran, so only the rise means something there (``absolute`` false)."""
    wanted = DEVICE_TYPE_CUDA if gpu else DEVICE_TYPE_CPU
    events = sorted((e for e in trace.memory if isinstance(e.get("args"), Mapping)
                     and e["args"].get("Device Type") == wanted and e["args"].get("Total Allocated") is not None
                     and e.get("ts") is not None), key=lambda e: float(e["ts"]))
    if not events:
        return {"unavailable": "the trace holds no memory events for this device"}
    times = [float(e["ts"]) for e in events]
    by_phase: dict[str, dict[str, float | None]] = {}
    for phase in PHASES:
        peak: float | None = None
        rise: float | None = None
        for start, end in clip(trace.phases[phase], *window):
            before = _level_before(times, events, start)
            inside = [float(events[k]["args"]["Total Allocated"])
                      for k in range(bisect.bisect_left(times, start), bisect.bisect_right(times, end))]
            levels = inside + ([before] if before is not None else [])
            if not levels:
                continue
            top = max(levels)
            peak = top if peak is None else max(peak, top)
            if before is not None:
                rise = top - before if rise is None else max(rise, top - before)
        if peak is not None:
            by_phase[phase] = {"peak_bytes": peak if gpu else None, "rise_bytes": rise}
    in_window = [float(e["args"]["Total Allocated"]) for e, t in zip(events, times, strict=True)
                 if window[0] <= t <= window[1]]
    return {"device": "cuda" if gpu else "cpu", "absolute": gpu, "by_phase": by_phase,
            "window_peak_bytes": max(in_window) if in_window and gpu else None}


# ----------------------------------------------------------------------------------------------------- summary


def summarize_trace(trace: Mapping[str, Any] | Sequence[Mapping[str, Any]], *, gpu: bool, top: int = TOP_N,
                    measured_step_ms: float | None = None) -> dict[str, Any]:
    """The profile summary of a trace (module docstring): the split, the top kernels or ops, memory by phase.

    Args:
        trace: the Chrome trace (its object, or the list of its events).
        gpu: the steps ran on a GPU (split by GPU activity; top kernels) rather than a CPU (host ranges; top ops).
        top: how many kernels or ops to list by name.
        measured_step_ms: the step time of the unprofiled timed region, to state the profiler's overhead.

    Returns:
        A JSON-ready dict; times per step in ms, shares of the step time. Raises ValueError when the trace has no
        profiled step (nothing to divide by).
    """
    parsed = _Trace(trace_events(trace))
    window = parsed.window()
    if window is None or window[1] <= window[0]:
        raise ValueError(f"the trace holds no {STEP_PREFIX}N range: no profiled step to summarise")
    steps = len(parsed.steps)
    window_us = window[1] - window[0]
    step_ms = window_us / 1000.0 / steps
    parts = _gpu_split(parsed, window) if gpu else _host_split(parsed, window)
    split_ms = {k: (v / 1000.0 / steps if v is not None else None) for k, v in parts["split"].items()}
    shares = {k: (v / step_ms if v is not None else None) for k, v in split_ms.items()}
    total = sum(v for v in shares.values() if v is not None)
    out: dict[str, Any] = {
        "basis": "gpu" if gpu else "host",
        "steps": steps,
        "step_ms": step_ms,
        "split_ms": split_ms,
        "split_share": shares,
        "sum_share": total,
        "tolerance": SUM_TOLERANCE,
        "adds_up": abs(total - 1.0) <= SUM_TOLERANCE,
        "overlap_ms": parts["overlap"] / 1000.0 / steps,
        "host_phase_ms": _host_phase_ms(parsed, window, steps),
        "top": top_gpu(parsed, window, steps, top) if gpu else top_cpu(parsed, window, steps, top),
        "memory": memory_by_phase(parsed, window, gpu=gpu),
        "measured_step_ms": measured_step_ms,
        "profiler_overhead_pct": 100.0 * (step_ms / measured_step_ms - 1.0) if measured_step_ms else None,
    }
    if gpu:
        out["gpu_busy_share"] = parts["busy"] / window_us
        out["launch_bound_share"] = parts["launch_gaps"] / window_us
        out["gpu_activities_per_step"] = parts["activities"] / steps
    out["notes"] = summary_notes(out)
    return out


def summary_notes(summary: Mapping[str, Any]) -> list[str]:
    """What a reader must know before trusting the split, in words (empty when nothing needs saying)."""
    notes = []
    if summary.get("basis") == "gpu" and not (summary.get("top") or {}).get("rows"):
        notes.append("the trace holds no GPU activity (CUPTI unavailable?): the whole step reads as idle")
    if not summary.get("adds_up"):
        notes.append(f"the parts add up to {100 * summary['sum_share']:.1f}% of the step, not 100% +- "
                     f"{100 * SUM_TOLERANCE:g}%: work of several phases ran at once "
                     f"({summary.get('overlap_ms') or 0:.3f} ms per step)")
    overhead = summary.get("profiler_overhead_pct")
    if overhead is not None and overhead > OVERHEAD_WARN_PCT:
        if summary.get("basis") == "gpu":
            notes.append(f"profiled steps ran {overhead:.0f}% slower than the timed ones (the profiler's host-side "
                         "cost): the idle and launch-bound shares are overstated by up to that much")
        else:
            notes.append(f"profiled steps ran {overhead:.0f}% slower than the timed ones (the profiler's cost per "
                         "op, or other work on this machine): read the shares, not the times")
    return notes
