"""The self-contained HTML report: one file, readable offline, built from stored results alone.

What it holds: a summary table per run (with a backend column and a table of builds and output parity when a run
used an inference backend other than eager), throughput bars by mode (and backend), batch-sweep curves with the
knee marked, each tune search's candidates against search time (by rung and kind, with the budget), each serve
run's section (latency against offered load with the bound, the batch-size histogram, its table), latency CDFs,
power over time, the roofline, warnings in words, and the full environment of every run.

How it stays self-contained and safe:

- Plots are inline SVG drawn by matplotlib (``svg.fonttype = "none"``: text stays text, so the page's fonts are
  used and no glyph outlines bloat the file). No JavaScript, no CDN, no external fonts or stylesheets.
- Every string taken from a result file reaches the page through Jinja2 with autoescaping on, or through
  matplotlib's SVG writer, which escapes text content (``<`` becomes ``&lt;``). Math-text parsing is off, so a
  ``$`` in a model name is printed, not interpreted.
- Output is deterministic for the same input: a fixed ``svg.hashsalt`` per figure (matplotlib otherwise derives
  element ids from a random salt), no ``Date`` in the SVG metadata (the metadata block is dropped), no timestamp
  other than the runs' own ``created_utc``.
- Long series are thinned to :data:`MAX_POINTS_PER_CURVE` points per curve, which keeps the file small without
  changing what the eye sees at these chart sizes.

Figures: img/s is the median over repeats (as in ``clsbench show``); the latency CDF pools the raw ``wall_ms`` of
every repeat, and its markers are the pooled nearest-rank p50 and p99 (:func:`clsbench.analysis.stats.percentile`),
which can differ slightly from the table's p50/p99 (the median over repeats of each repeat's percentile); the p99
marker is left out of a pool of fewer than 100 samples, where it would be the maximum.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from clsbench.analysis.knee import DEFAULT_KNEE_FRACTION, knee
from clsbench.analysis.warnings import findings, grouped, preflight_findings
from clsbench.core.vocab import Status
from clsbench.errors import InvalidInputError
from clsbench.report import table
from clsbench.report.table import fmt_ms, fmt_rate
from clsbench.results.schema import DEFAULT_BACKEND, BenchmarkResult, Measurement, backend_suffix
from clsbench.serving.analysis import is_serve_result

#: Most points drawn per curve; longer series are thinned evenly (first and last point kept).
MAX_POINTS_PER_CURVE = 2000

#: Most curves in one chart; more are split over several charts so that every curve stays legible.
MAX_CURVES_PER_CHART = 6

#: Throughput bars switch to a logarithmic axis when the largest bar is this many times the smallest
#: (a CPU next to a GPU), so that the small bars do not vanish.
LOG_AXIS_RATIO = 30.0

TEMPLATE = "report.html.j2"

#: Colours (matplotlib's tab10, written out so the report does not depend on the user's matplotlib style).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")

#: matplotlib settings for every figure: text as text, fixed ids, no math text, small fonts.
RC_PARAMS: dict[str, Any] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "clsbench-report",
    "text.parse_math": False,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"],
    "font.size": 9,
    "axes.titlesize": 10,
    "legend.fontsize": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "path.simplify": True,
}

MIB = 1024 * 1024


# ----------------------------------------------------------------------------------------------- small helpers


def _num(value: Any) -> float | None:
    """A finite number from a result file, or None (missing, a bool, a string such as "nan", infinite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _label(m: Measurement) -> str:
    return f"{m.model} {m.workload} {m.mode} bs{m.batch_size}{backend_suffix(m.backend)}"


def _mode(m: Measurement) -> str:
    """The mode, and the inference backend when it is not eager (``bf16+cl @export``): one series in a chart."""
    return m.mode + backend_suffix(m.backend)






def _fmt_g(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _thin(n: int, limit: int = MAX_POINTS_PER_CURVE) -> list[int]:
    """Indices of at most ``limit`` points spread evenly over ``n``, always keeping the first and the last."""
    if n <= limit:
        return list(range(n))
    step = (n - 1) / (limit - 1)
    return sorted({round(i * step) for i in range(limit)})


def _chunks(items: Sequence[Any], size: int = MAX_CURVES_PER_CHART) -> list[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _ok(m: Measurement) -> bool:
    return m.status == Status.OK


def _rate(m: Measurement) -> float | None:
    """The measurement's img/s (median over repeats) if it succeeded with a positive figure, else None."""
    value = _num(m.summary.get("throughput_img_s")) if _ok(m) else None
    return value if value is not None and value > 0 else None


# ----------------------------------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class _Run:
    """One result file as the report shows it: a letter, the name it was given, the hardware, a short tag."""

    letter: str
    name: str
    result: BenchmarkResult
    hardware: str
    tag: str

    @property
    def measurements(self) -> tuple[Measurement, ...]:
        return self.result.measurements


def _hardware(result: BenchmarkResult) -> tuple[str, str]:
    """(full name, short name) of what the run measured: the GPU for a CUDA run, else the CPU."""
    env = result.environment
    gpu = env.get("gpu") if isinstance(env.get("gpu"), dict) else {}
    cpu = env.get("cpu") if isinstance(env.get("cpu"), dict) else {}
    devices = [m.device for m in result.measurements] or [str(env.get("device", ""))]
    if any(str(d).startswith("cuda") for d in devices) and gpu.get("name"):
        name = str(gpu["name"])
        return name, re.sub(r"^NVIDIA\s+(GeForce\s+)?", "", name) or name
    return str(cpu.get("model") or "unknown CPU"), "CPU"


def _runs(results: Sequence[BenchmarkResult], names: Sequence[str]) -> list[_Run]:
    runs = []
    for index, (result, name) in enumerate(zip(results, names, strict=True)):
        letter = chr(ord("A") + index) if index < 26 else f"R{index + 1}"
        hardware, short = _hardware(result)
        runs.append(_Run(letter, str(name), result, hardware, f"{letter} {short}"))
    return runs


def _series_name(run: _Run, text: str, many_runs: bool) -> str:
    return f"{run.tag} · {text}" if many_runs else text


# ------------------------------------------------------------------------------------------------- figures


class _Figures:
    """Makes figures and turns them into inline SVG; each figure gets its own fixed hash salt."""

    def __init__(self) -> None:
        self.count = 0

    def new(self, width_in: float, height_in: float) -> Any:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(width_in, height_in), layout="constrained")
        FigureCanvasAgg(fig)  # the Agg canvas, set on this figure only: no global backend switch, no pyplot
        return fig

    def svg(self, fig: Any) -> Any:
        import matplotlib
        from markupsafe import Markup

        self.count += 1
        buf = io.StringIO()
        # A distinct, fixed salt per figure: ids stay reproducible and never collide between the page's SVGs.
        with matplotlib.rc_context({"svg.hashsalt": f"{RC_PARAMS['svg.hashsalt']}-{self.count}"}):
            fig.savefig(buf, format="svg", metadata={"Date": None})
        text = buf.getvalue()
        text = text[text.index("<svg"):]  # drop the XML declaration and DOCTYPE: not valid inside HTML
        text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.S)
        # Matplotlib escapes every text it writes (``_escape_cdata``), so the SVG is safe to inline as is.
        return Markup(text.strip())


def _color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _tick(value: float, _pos: Any = None) -> str:
    """Plain tick labels (1,000 rather than 10^3: math text is off so that result strings print verbatim)."""
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:g}"


def _log_axis(axis: Any, low: float, high: float) -> None:
    """A log scale in plain numbers, labelled at 1, 2 and 5 times each power of ten over a short range and at the
    powers of ten only over more than three decades (where 1-2-5 labels would run into each other)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    subs = (1.0, 2.0, 5.0) if high / max(low, 1e-300) <= 1e3 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(_tick))
    axis.set_minor_formatter(NullFormatter())


# ---------------------------------------------------------------------------------------- throughput by mode


def _bar_measurements(run: _Run) -> tuple[Measurement, ...]:
    """The measurements the throughput bars show: none of a serve result, whose figures are scenario answers
    searched over LoadGen runs (its own section shows them), not medians over repeats."""
    return () if is_serve_result(run.result) else run.measurements


def _throughput_charts(runs: list[_Run], figs: _Figures) -> list[dict[str, Any]]:
    """One horizontal grouped-bar chart per workload: a group per model, a bar per (run, mode)."""
    many = len(runs) > 1
    workloads: list[str] = []
    for run in runs:
        for m in _bar_measurements(run):
            if _rate(m) and m.workload not in workloads:
                workloads.append(m.workload)
    colors = _series_colors(runs, many)
    charts = []
    for workload in workloads:
        models, series, bars = _best_bars(runs, workload, many)
        charts.append(_throughput_chart(workload, models, series, bars, colors, figs))
    return charts


def _series_colors(runs: list[_Run], many: bool) -> dict[str, str]:
    """One colour per (run, mode) across every chart, so that a series keeps its colour from chart to chart."""
    colors: dict[str, str] = {}
    for run in runs:
        for m in _bar_measurements(run):
            if _rate(m):
                colors.setdefault(_series_name(run, _mode(m), many), _color(len(colors)))
    return colors


def _best_bars(
    runs: list[_Run], workload: str, many: bool
) -> tuple[list[str], list[str], list[tuple[str, str, Measurement]]]:
    """The bars of one workload's chart: each (model, series)'s best measurement, so that a sweep contributes its
    best batch size.

    Returns:
        ``(models, series, bars)``: models and series in the order first met, and a ``(model, series,
        measurement)`` bar for every pair measured, grouped by model.
    """
    best: dict[tuple[str, str], Measurement] = {}
    models: list[str] = []
    series: list[str] = []
    for run in runs:
        for m in _bar_measurements(run):
            value = _rate(m)
            if m.workload != workload or value is None:
                continue
            name = _series_name(run, _mode(m), many)
            key = (m.model, name)
            if key not in best or value > (_rate(best[key]) or 0.0):
                best[key] = m
            if m.model not in models:
                models.append(m.model)
            if name not in series:
                series.append(name)
    bars = [(model, name, best[(model, name)]) for model in models for name in series if (model, name) in best]
    return models, series, bars


def _throughput_chart(workload: str, models: list[str], series: list[str],
                      bars: list[tuple[str, str, Measurement]], colors: dict[str, str],
                      figs: _Figures) -> dict[str, Any]:
    """One workload's chart (see :func:`_best_bars` for its bars): a log axis when the rates span more than
    :data:`LOG_AXIS_RATIO`, a legend of the series."""
    values = [_rate(m) or 0.0 for _, _, m in bars]
    log = max(values) / max(min(values), 1e-12) > LOG_AXIS_RATIO
    fig = figs.new(9.0, 1.0 + 0.24 * len(bars) + 0.12 * len(models))
    ax = fig.add_subplot()
    _draw_bar_groups(ax, models, bars, colors)
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    if log:
        ax.set_xscale("log")
        ax.set_xlim(min(values) / 2, max(values) * 8)
        _log_axis(ax.xaxis, min(values) / 2, max(values) * 8)
    else:
        ax.set_xlim(0, max(values) * 1.3)
    ax.set_xlabel("images per second (median over repeats; whiskers: min-max of repeats)"
                  + (", log scale" if log else ""))
    ax.set_title(f"{workload}: throughput by mode")
    handles = [_patch(colors[name], name) for name in series]
    fig.legend(handles=handles, loc="outside right upper", frameon=False)
    return {"title": f"{workload}: throughput by mode", "svg": figs.svg(fig),
            "caption": "Each model's best batch size per mode is shown (bs in brackets)."}


def _draw_bar_groups(ax: Any, models: list[str], bars: list[tuple[str, str, Measurement]],
                     colors: dict[str, str]) -> None:
    """The bars, a group per model labelled on the y axis, each with min-max whiskers over its repeats (when
    there are two or more) and its rate and batch size written at its end."""
    y, ticks, labels = 0.0, [], []
    for model in models:
        group = [(name, m) for mdl, name, m in bars if mdl == model]
        start = y
        for name, m in group:
            value = _rate(m) or 0.0
            per_repeat = [v for v in (_num(x) for x in m.summary.get("throughput_img_s_by_repeat") or ()) if v]
            err = None
            if len(per_repeat) > 1:
                err = [[max(value - min(per_repeat), 0.0)], [max(max(per_repeat) - value, 0.0)]]
            ax.barh(y, value, height=0.8, color=colors[name], xerr=err,
                    error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "#333333"})
            ax.text(max([value, *per_repeat]), y, f"  {fmt_rate(value)} (bs{m.batch_size})", va="center",
                    ha="left", fontsize=7)
            y += 1
        ticks.append((start + y - 1) / 2)
        labels.append(model)
        y += 0.6
    ax.set_yticks(ticks, labels)


def _patch(color: str, label: str) -> Any:
    from matplotlib.patches import Patch

    return Patch(facecolor=color, label=label)


# -------------------------------------------------------------------------------------------- batch sweeps


def _sweeps(runs: list[_Run]) -> list[dict[str, Any]]:
    """Every (run, model, workload, mode) measured at two or more batch sizes."""
    many = len(runs) > 1
    out = []
    for run in runs:
        groups: dict[tuple[str, str, str], dict[int, float]] = {}
        for m in run.measurements:
            value = _rate(m)
            if value is not None:
                groups.setdefault((m.model, m.workload, _mode(m)), {})[m.batch_size] = value
        for (model, workload, mode), by_batch in groups.items():
            if len(by_batch) < 2:
                continue
            points = sorted(by_batch.items())
            # A sweep file stores the knee rule it was run with (`clsbench sweep --knee`); use that one.
            sweep_facts = run.result.settings.get("sweep") or {}
            fraction = float(sweep_facts.get("knee_fraction") or DEFAULT_KNEE_FRACTION)
            knee_b, knee_v = knee(points, fraction) or (None, None)
            best_b, best_v = max(points, key=lambda p: p[1])
            out.append({
                "run": run.letter, "model": model, "workload": workload, "mode": mode,
                "name": _series_name(run, f"{model} {mode}", many), "points": points,
                "batches": ", ".join(str(b) for b, _ in points),
                "best": f"{fmt_rate(best_v)} at bs{best_b}", "knee_batch": knee_b,
                "knee": f"bs{knee_b} ({fmt_rate(knee_v)} img/s)",
            })
    return out


def _sweep_charts(sweeps: list[dict[str, Any]], figs: _Figures) -> list[dict[str, Any]]:
    charts = []
    workloads = list(dict.fromkeys(s["workload"] for s in sweeps))
    for workload in workloads:
        curves = [s for s in sweeps if s["workload"] == workload]
        parts = _chunks(curves)
        for part_index, part in enumerate(parts):
            fig = figs.new(6.4, 3.6)
            ax = fig.add_subplot()
            batches: set[int] = set()
            for i, s in enumerate(part):
                xs = [b for b, _ in s["points"]]
                ys = [v for _, v in s["points"]]
                batches.update(xs)
                ax.plot(xs, ys, marker="o", markersize=3, color=_color(i), label=s["name"], linewidth=1.4)
                kb = s["knee_batch"]
                kv = dict(s["points"])[kb]
                ax.plot([kb], [kv], marker="*", markersize=12, color=_color(i), markeredgecolor="black",
                        markeredgewidth=0.6, linestyle="none")
                ax.annotate(f"knee bs{kb}", (kb, kv), textcoords="offset points", xytext=(4, -10), fontsize=7)
            ax.set_xscale("log", base=2)
            ordered = sorted(batches)
            ax.set_xticks(ordered, [str(b) for b in ordered])
            ax.minorticks_off()
            ax.set_ylim(bottom=0)
            ax.set_xlabel("batch size (log scale)")
            ax.set_ylabel("images per second")
            suffix = f" ({part_index + 1}/{len(parts)})" if len(parts) > 1 else ""
            title = f"{workload}: throughput vs batch size{suffix}"
            ax.set_title(title)
            ax.legend(loc="lower right")
            charts.append({"title": title, "svg": figs.svg(fig),
                           "caption": f"★ knee: the smallest batch reaching {DEFAULT_KNEE_FRACTION:.0%} of the best."})
    return charts


# -------------------------------------------------------------------------------------------- tune searches

#: How each rung of a tune search is drawn: marker, size, label.
TUNE_RUNG_MARKERS = {"screen": ("o", 4, "screen"), "longer": ("s", 6, "longer"), "confirm": ("D", 7, "confirm")}


def _tune_points(run: _Run) -> list[dict[str, Any]]:
    """The finished trials of a tune search in ``run`` (settings["tune"]["trials"], format 2) that have a score."""
    facts = run.result.settings.get("tune")
    trials = facts.get("trials") if isinstance(facts, dict) else None
    out = []
    for t in trials if isinstance(trials, list) else []:
        if not isinstance(t, dict):
            continue
        end, score = _num(t.get("end_s")), _num(t.get("score"))
        if end is not None and score is not None and t.get("rung") in TUNE_RUNG_MARKERS:
            out.append({"end_s": end, "score": score, "rung": t["rung"], "kind": str(t.get("kind") or "?"),
                        "label": f"{t.get('mode')} bs{t.get('batch_size')}"
                                 + (f" [{t['data']}]" if t.get("data") else "")})
    return out


def _tune_charts(runs: list[_Run], figs: _Figures) -> list[dict[str, Any]]:
    """Per tune search: each candidate's score against the search time at which it finished, by rung and kind,
    with the budget drawn and the best confirmed figure starred."""
    charts = []
    for run in runs:
        points = _tune_points(run)
        if not points:
            continue
        facts = run.result.settings["tune"]
        fig = figs.new(6.4, 3.6)
        ax = fig.add_subplot()
        kinds = list(dict.fromkeys(p["kind"] for p in points))
        for rung, (marker, size, label) in TUNE_RUNG_MARKERS.items():
            for index, kind in enumerate(kinds):
                chosen = [p for p in points if p["rung"] == rung and p["kind"] == kind]
                if chosen:
                    ax.plot([p["end_s"] for p in chosen], [p["score"] for p in chosen], marker=marker,
                            markersize=size, linestyle="none", color=_color(index), markeredgecolor="black",
                            markeredgewidth=0.4, label=f"{kind}, {label}")
        confirmed = [p for p in points if p["rung"] == "confirm"]
        if confirmed:
            best = max(confirmed, key=lambda p: p["score"])
            ax.plot([best["end_s"]], [best["score"]], marker="*", markersize=14, color="#ffd700",
                    markeredgecolor="black", markeredgewidth=0.6, linestyle="none")
            ax.annotate(best["label"], (best["end_s"], best["score"]), textcoords="offset points", xytext=(6, 4),
                        fontsize=7)
        budget = _num(facts.get("budget_s"))
        if budget:
            ax.axvline(budget, color="#d62728", linewidth=0.8, linestyle="--")
            ax.annotate(f"budget {budget:.0f} s", (budget, 0.02), xycoords=("data", "axes fraction"),
                        xytext=(-3, 0), textcoords="offset points", fontsize=7, color="#d62728", ha="right")
        latency = facts.get("workload") == "infer-latency"
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("search time (s)")
        ax.set_ylabel("1000 / p50 request latency (ms)" if latency else "images per second")
        title = f"{run.tag}: tune {facts.get('model')} {facts.get('workload')}"
        ax.set_title(title)
        ax.legend(loc="lower right", fontsize=7)
        spent = _num(facts.get("spent_s"))
        charts.append({"title": title, "svg": figs.svg(fig),
                       "caption": f"{len(points)} candidate measurements" + (f" in {spent:.0f} s" if spent else "")})
    return charts


# ----------------------------------------------------------------------------------------- latency CDFs


def _wall_samples(m: Measurement) -> list[float]:
    pooled: list[float] = []
    for r in m.repeats:
        if r.get("status", "ok") != Status.OK:
            continue
        samples = r.get("samples") if isinstance(r.get("samples"), dict) else {}
        pooled.extend(v for v in (_num(x) for x in samples.get("wall_ms") or ()) if v is not None and v > 0)
    return pooled


def _latency_charts(runs: list[_Run], figs: _Figures) -> list[dict[str, Any]]:
    """Per model: the CDF of every repeat's raw per-request wall time pooled, one curve per (run, mode, batch)."""
    from clsbench.analysis.stats import MIN_SAMPLES, percentile

    many = len(runs) > 1
    curves: dict[str, list[tuple[str, list[float]]]] = {}
    for run in runs:
        for m in run.measurements:
            if m.workload != "infer-latency" or not _ok(m):
                continue
            samples = _wall_samples(m)
            if samples:
                text = _mode(m) if m.batch_size == 1 else f"{_mode(m)} bs{m.batch_size}"
                curves.setdefault(m.model, []).append((_series_name(run, text, many), samples))
    charts = []
    for model, entries in curves.items():
        parts = _chunks(entries)
        for part_index, part in enumerate(parts):
            fig = figs.new(5.6, 3.2)
            ax = fig.add_subplot()
            lows, highs = [], []
            for i, (name, samples) in enumerate(part):
                ordered = sorted(samples)
                n = len(ordered)
                keep = _thin(n)
                xs = [ordered[k] for k in keep]
                ys = [(k + 1) / n for k in keep]
                p50 = percentile(ordered, 50.0)
                # The p99 marker only where the pool holds enough samples for one (else it is the maximum).
                p99 = percentile(ordered, 99.0) if n >= MIN_SAMPLES["p99"] else None
                lows.append(ordered[0])
                highs.append(ordered[-1])
                # Straight segments between the kept quantiles: a step drawing would double the vertices for no
                # visible difference at this size.
                ax.plot(xs, ys, color=_color(i), linewidth=1.3,
                        label=f"{name}: p50 {fmt_ms(p50)}" + (f", p99 {fmt_ms(p99)}" if p99 is not None else "")
                        + f" ms (n={n})")
                ax.plot([p50], [0.5], marker="o", markersize=5, color=_color(i), markeredgecolor="black",
                        markeredgewidth=0.5, linestyle="none")
                if p99 is not None:
                    ax.plot([p99], [0.99], marker="^", markersize=6, color=_color(i), markeredgecolor="black",
                            markeredgewidth=0.5, linestyle="none")
            if max(highs) / max(min(lows), 1e-9) > 20:
                ax.set_xscale("log")
                _log_axis(ax.xaxis, min(lows), max(highs))
            ax.axhline(0.5, color="#999999", linewidth=0.6, linestyle=":")
            ax.axhline(0.99, color="#999999", linewidth=0.6, linestyle=":")
            ax.set_ylim(0, 1.02)
            ax.set_xlabel("request latency, wall clock (ms)")
            ax.set_ylabel("fraction of requests ≤ x")
            suffix = f" ({part_index + 1}/{len(parts)})" if len(parts) > 1 else ""
            title = f"{model}: infer-latency CDF{suffix}"
            ax.set_title(title)
            ax.legend(loc="lower right", fontsize=7)
            charts.append({"title": title, "svg": figs.svg(fig), "caption": ""})
    return charts


# ------------------------------------------------------------------------------------------ power over time


def _power_charts(runs: list[_Run], figs: _Figures) -> list[dict[str, Any]]:
    """Per run: power draw over each repeat's timed region, from the telemetry samples (t_s, power_w)."""
    charts = []
    for run in runs:
        curves = []
        for m in run.measurements:
            for index, r in enumerate(m.repeats):
                telemetry = r.get("telemetry") if isinstance(r.get("telemetry"), dict) else {}
                samples = telemetry.get("samples") if isinstance(telemetry.get("samples"), dict) else {}
                ts, ps = samples.get("t_s") or [], samples.get("power_w") or []
                pairs = [(t, p) for t, p in zip((_num(x) for x in ts), (_num(y) for y in ps), strict=False)
                         if t is not None and p is not None]
                if len(pairs) >= 2:
                    curves.append((f"{_label(m)} r{index + 1}", pairs))
        parts = _chunks(curves)
        for part_index, part in enumerate(parts):
            fig = figs.new(5.6, 3.2)
            ax = fig.add_subplot()
            for i, (name, pairs) in enumerate(part):
                keep = _thin(len(pairs))
                ax.plot([pairs[k][0] for k in keep], [pairs[k][1] for k in keep], color=_color(i), linewidth=1.3,
                        label=name)
            ax.set_xlabel("time in the timed region (s)")
            ax.set_ylabel("board power (W)")
            limit = _num((run.result.environment.get("gpu") or {}).get("power_limit_enforced_w")) \
                if isinstance(run.result.environment.get("gpu"), dict) else None
            top = max(p for _, pairs in part for _, p in pairs)
            if limit:
                ax.axhline(limit, color="#d62728", linewidth=0.8, linestyle="--")
                ax.annotate(f"power limit {limit:.0f} W", (0.99, limit), xycoords=("axes fraction", "data"),
                            xytext=(0, 3), textcoords="offset points", fontsize=7, color="#d62728", ha="right")
                top = max(top, limit)
            ax.set_ylim(0, top * 1.1)
            suffix = f" ({part_index + 1}/{len(parts)})" if len(parts) > 1 else ""
            title = f"{run.tag}: power over time{suffix}"
            ax.set_title(title)
            ax.legend(loc="lower right", fontsize=7)
            charts.append({"title": title, "svg": figs.svg(fig), "caption": ""})
    return charts


# ----------------------------------------------------------------------------------------------- roofline


def _roofline(runs: list[_Run], figs: _Figures) -> tuple[list[dict[str, Any]], list[str]]:
    """Per run with FLOPs: log-log roofline, a point per measurement at (intensity, achieved TFLOP/s).

    Ceilings per precision unit: solid from ``clsbench probe`` (measured matmul peak, measured copy bandwidth),
    dashed from the datasheet table (:mod:`clsbench.analysis.peaks`).
    """
    from clsbench.analysis.peaks import lookup_gpu

    charts, notes = [], []
    for run in runs:
        points = []
        for m in run.measurements:
            eff = m.summary.get("efficiency") if isinstance(m.summary.get("efficiency"), dict) else {}
            intensity, achieved = _num(eff.get("arithmetic_intensity")), _num(eff.get("achieved_tflop_s"))
            if _ok(m) and intensity and achieved and intensity > 0 and achieved > 0:
                points.append((m, eff, intensity, achieved))
        if not points:
            continue
        env = run.result.environment
        probe = env.get("probe") if isinstance(env.get("probe"), dict) else {}
        gpu = env.get("gpu") if isinstance(env.get("gpu"), dict) else {}
        peak = lookup_gpu(str(gpu["name"])) if gpu.get("name") else None
        bw_measured = _num(probe.get("copy_bytes_s"))
        bw_datasheet = peak.memory_bandwidth_bytes_s if peak else None
        units: dict[str, dict[str, float | None]] = {}
        for _, eff, _, _ in points:
            unit = str(eff.get("precision_unit") or "?")
            units.setdefault(unit, {"measured": _num(eff.get("peak_tflop_s_measured")),
                                    "datasheet": _num(eff.get("peak_tflop_s_datasheet"))})
        has_roof = any(c["measured"] or c["datasheet"] for c in units.values()) and (bw_measured or bw_datasheet)
        if not has_roof:
            notes.append(f"{run.tag} ({run.name}): FLOPs counted but no peak known for {run.hardware}; "
                         "roofline not drawn")
            continue
        fig = figs.new(6.4, 4.2)
        ax = fig.add_subplot()
        ax.set_xscale("log")
        ax.set_yscale("log")
        intensities = [p[2] for p in points]
        ceilings = [v for c in units.values() for v in c.values() if v]
        ridges = [v / (bw / 1e12) for v in ceilings for bw in (bw_measured, bw_datasheet) if bw]
        x_lo = min(intensities + ridges) / 4
        x_hi = max(intensities + ridges) * 4
        xs = [x_lo * (x_hi / x_lo) ** (i / 200) for i in range(201)]
        for ui, (unit, peaks) in enumerate(units.items()):
            color = _color(ui)
            for kind, bw, style in (("measured", bw_measured, "-"), ("datasheet", bw_datasheet, "--")):
                top = peaks[kind]
                if not top or not bw:
                    continue
                ys = [min(top, x * bw / 1e12) for x in xs]
                ax.plot(xs, ys, linestyle=style, color=color, linewidth=1.2,
                        label=f"{unit} roof, {kind}: {top:.4g} TFLOP/s, {bw / 1e12:.3g} TB/s")
        rows = []
        for i, (m, eff, intensity, achieved) in enumerate(points, start=1):
            unit = str(eff.get("precision_unit") or "?")
            color = _color(list(units).index(unit))
            ax.plot([intensity], [achieved], marker="o", markersize=6, color=color, markeredgecolor="black",
                    markeredgewidth=0.6, linestyle="none")
            # Alternate the label above and below its point, so that neighbouring points stay readable.
            ax.annotate(str(i), (intensity, achieved), textcoords="offset points",
                        xytext=(5, 3) if i % 2 else (5, -11), fontsize=8, fontweight="bold")
            roof = eff.get("roofline") if isinstance(eff.get("roofline"), dict) else {}
            fraction = _num(roof.get("fraction_of_attainable"))
            rows.append({
                "n": str(i), "label": _label(m), "unit": unit, "intensity": _fmt_g(intensity),
                "achieved": _fmt_g(achieved), "mfu": _fmt_g(_num(eff.get("mfu_measured_pct")) or
                                                              _num(eff.get("mfu_datasheet_pct"))),
                "attainable": "-" if fraction is None else f"{100 * fraction:.0f}%",
                "bound_by": str(eff.get("bound_by") or "-"), "reason": str(roof.get("reason") or ""),
            })
        y_lo, y_hi = min(p[3] for p in points) / 4, max(ceilings) * 3
        ax.set_xlim(x_lo, x_hi)
        ax.set_ylim(y_lo, y_hi)
        _log_axis(ax.xaxis, x_lo, x_hi)
        _log_axis(ax.yaxis, y_lo, y_hi)
        ax.set_xlabel("arithmetic intensity (FLOP per byte of minimal memory traffic, log)")
        ax.set_ylabel("achieved TFLOP/s (log)")
        title = f"{run.tag}: roofline ({run.hardware})"
        ax.set_title(title)
        ax.legend(loc="lower right", fontsize=7)
        charts.append({"title": title, "svg": figs.svg(fig), "rows": rows,
                       "caption": "Solid: measured ceilings (clsbench probe); dashed: datasheet ceilings."})
    return charts, notes


# ----------------------------------------------------------------------------------------------- warnings


#: What to do about each kind of warning, said once per kind rather than after every line.
def _warnings(runs: list[_Run]) -> list[dict[str, Any]]:
    """Failures, skips, instability, throttling, unmet stop rules and pre-flight problems
    (:mod:`clsbench.analysis.warnings`), grouped by kind, each group's advice said once."""
    found = []
    for run in runs:
        found += findings(run.measurements, label=_label, run=run.tag)
        found += preflight_findings(run.result.environment, run=run.tag)
    return [{"kind": group.kind, "css": group.kind.lower().replace("pre-flight", "note"),
             "advice": " ".join(group.advice),
             "items": [{"run": f.run, "label": f.label, "text": f.text} for f in group.findings]}
            for group in grouped(found)]


# -------------------------------------------------------------------------------------------- environment


def _flatten(value: Any, prefix: str = "") -> Iterable[tuple[str, str]]:
    """Nested dicts as dotted keys; lists of scalars joined by commas; everything else as text."""
    if isinstance(value, dict):
        if not value and prefix:
            yield prefix, "{}"
        for key, item in value.items():
            yield from _flatten(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        for index, item in enumerate(value):
            yield from _flatten(item, f"{prefix}[{index}]")
    elif isinstance(value, list):
        yield prefix, ", ".join(_scalar(v) for v in value) if value else "[]"
    else:
        yield prefix, _scalar(value)


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _environment(run: _Run) -> dict[str, Any]:
    result = run.result
    env = dict(result.environment)
    checks = env.pop("preflight", None)
    preflight = []
    for check in checks if isinstance(checks, list) else ():
        if isinstance(check, dict):
            preflight.append({"check": str(check.get("check", "")), "status": str(check.get("status", "")),
                              "message": str(check.get("message", ""))})
    settings = dict(result.settings)
    cells = settings.pop("cells", None)
    rows = [("file", run.name), ("schema_version", str(result.schema_version)), ("created_utc", result.created_utc)]
    rows += list(_flatten(result.tool, "tool"))
    rows += list(_flatten(env))
    rows += list(_flatten(settings, "settings"))
    if isinstance(cells, list):
        rows.append(("settings.cells", "; ".join(
            " ".join(str(c.get(k)) for k in ("model", "workload", "mode", "batch_size", "device"))
            + backend_suffix(c.get("backend")) if isinstance(c, dict) else str(c) for c in cells)))
    return {"run": run, "rows": rows, "preflight": preflight}


# ------------------------------------------------------------------------------------------------ serving


def _serving(runs: list[_Run]) -> list[dict[str, Any]]:
    """Each serve run's section: per mode, latency against offered load with the bound drawn and the best Server
    run's batch-size histogram (:func:`clsbench.serving.analysis.serve_figures`), then the text ``show`` prints."""
    from markupsafe import Markup

    from clsbench.serving.analysis import analyze_serve, render_serve, serve_figures

    out = []
    for run in runs:
        if not is_serve_result(run.result):
            continue
        analysis = analyze_serve(run.result)
        # The SVG is written by serving.analysis, which escapes every text it takes from the file.
        modes = [{"mode": mode["mode"], "charts": [{"svg": Markup(c["svg"]), "caption": c["caption"]}
                                                   for c in mode["charts"]]} for mode in serve_figures(analysis)]
        out.append({"run": run, "model": analysis.get("model"), "modes": modes, "text": render_serve(analysis)})
    return out


# --------------------------------------------------------------------------------------------------- soaks

#: Throttle intervals closer than this share of a soak's span are drawn as one shaded band (a power cap that flickers
#: on and off every second would otherwise draw thousands of bands); at most this many bands are drawn.
SOAK_MERGE_SHARE = 0.002
MAX_SOAK_BANDS = 400


def _bands(intervals: list[dict[str, Any]], span: float) -> list[tuple[float, float]]:
    """Throttle intervals as shaded bands: neighbours closer than :data:`SOAK_MERGE_SHARE` of ``span`` merged; when
    still too many, the gap allowed doubles until they fit in :data:`MAX_SOAK_BANDS`."""
    gap = SOAK_MERGE_SHARE * span
    while True:
        bands: list[tuple[float, float]] = []
        for interval in intervals:
            start, end = float(interval["start_s"]), float(interval["end_s"])
            if bands and start - bands[-1][1] <= gap:
                bands[-1] = (bands[-1][0], max(end, bands[-1][1]))
            else:
                bands.append((start, end))
        if len(bands) <= MAX_SOAK_BANDS or gap >= span:
            return bands
        gap = max(gap * 2, 1e-9)


def _series_points(samples: dict[str, Any], key: str) -> tuple[list[float], list[float]]:
    """The read samples of one telemetry series as ``(times, values)``, thinned to :data:`MAX_POINTS_PER_CURVE`."""
    pairs = [(t, v) for t, v in zip((_num(x) for x in samples.get("t_s") or ()),
                                    (_num(y) for y in samples.get(key) or ()), strict=False)
             if t is not None and v is not None]
    keep = _thin(len(pairs))
    return [pairs[i][0] for i in keep], [pairs[i][1] for i in keep]


#: The telemetry panels of a soak's chart below its throughput: (y label, series drawn), each shown when read.
SOAK_PANELS = (("power (W)", ("power_w",)), ("clock (MHz)", ("sm_clock_mhz", "mem_clock_mhz")),
               ("temperature (C)", ("temperature_c", "fan_pct")))


def _soak_chart(analysis: dict[str, Any], samples: dict[str, Any], figs: _Figures) -> Any:
    """Throughput per window, power, SM and memory clocks, temperature (and fan speed, in %) on one time axis,
    throttle intervals shaded in every panel, the steady state's level dashed over the throughput."""
    windows = analysis["windows"]
    span = max([w["end_s"] for w in windows] + [_num(t) or 0.0 for t in samples.get("t_s") or ()] + [1e-9])
    panels = [(label, keys) for label, keys in SOAK_PANELS if _series_points(samples, keys[0])[0]]
    fig = figs.new(8.0, 1.2 + 1.6 * (1 + len(panels)))
    axes = fig.subplots(1 + len(panels), 1, sharex=True, squeeze=False)[:, 0]
    bands = _bands((analysis.get("throttling") or {}).get("intervals") or [], span)
    for ax in axes:
        for start, end in bands:
            ax.axvspan(start, end, color="#d62728", alpha=0.15, linewidth=0)
    ys = [w["throughput_img_s"] for w in windows]
    axes[0].stairs(ys, [w["start_s"] for w in windows] + [windows[-1]["end_s"]], color=_color(0), linewidth=1.4,
                   label="img/s per window", baseline=None)
    steady = analysis.get("steady")
    if steady:
        axes[0].hlines(steady["throughput_img_s"], steady["from_s"], steady["to_s"], colors="#333333",
                       linestyles="--", linewidth=0.9, label=f"steady state {fmt_rate(steady['throughput_img_s'])}")
    axes[0].set_ylim(0, max(ys) * 1.15)
    axes[0].set_ylabel("images per second")
    for ax, (label, keys) in zip(axes[1:], panels, strict=True):
        for index, key in enumerate(keys):
            t, v = _series_points(samples, key)
            if t:
                ax.plot(t, v, color=_color(index + 1), linewidth=1.0, linestyle=":" if key == "fan_pct" else "-",
                        label={"fan_pct": "fan (%)"}.get(key, key.rsplit("_", 1)[0].replace("_", " ")))
        if keys == ("power_w",) and analysis.get("power_limit_w"):
            ax.axhline(analysis["power_limit_w"], color="#d62728", linewidth=0.8, linestyle="--",
                       label=f"power limit {analysis['power_limit_w']:.0f} W")
        ax.set_ylabel(label)
    for ax in axes:
        ax.legend(loc="lower right", fontsize=7)
    axes[-1].set_xlim(0, span)
    axes[-1].set_xlabel("seconds since the timed region began" + ("; red: throttled (power or heat)" if bands else ""))
    axes[0].set_title(f"{analysis['label']} on {analysis.get('device') or '?'}: soak")
    return figs.svg(fig)


def _soaks(runs: list[_Run], figs: _Figures) -> list[dict[str, Any]]:
    """Each soak run's section: the time series and the verdicts ``show`` prints."""
    from clsbench.analysis.soak import analyze_soak, render_soak, soak_measurement

    out = []
    for run in runs:
        if "soak" not in run.result.settings:
            continue
        analysis = analyze_soak(run.result)
        chart = None
        if analysis["status"] == "ok" and analysis["windows"]:
            m = soak_measurement(run.result)
            telemetry = m.repeats[0].get("telemetry") if m is not None else None
            samples = telemetry.get("samples") if isinstance(telemetry, dict) else None
            chart = _soak_chart(analysis, samples if isinstance(samples, dict) else {}, figs)
        out.append({"run": run, "label": analysis["label"], "chart": chart, "text": render_soak(analysis)})
    return out


# ---------------------------------------------------------------------------------------------- summaries


def _summary(run: _Run) -> dict[str, Any]:
    measurements = list(run.measurements)
    with_backend = table.has_backends(measurements)
    rows = []
    for m in measurements:
        cells = list(table.row(m, with_backend))
        status = cells[-1]
        css = "failed" if m.status == Status.FAILED else "skipped" if m.status == Status.SKIPPED else \
            "parity" if table.parity_failed(m) else "unstable" if m.summary.get("unstable") else \
            "throttled" if m.validity.get("throttled") else "ok"
        rows.append({"cells": cells, "status": status, "css": css})
    measured = [m for m in measurements if _ok(m)]
    efficiency = [list(table.efficiency_row(m, with_backend)) for m in measured] \
        if table.has_efficiency(measured) else []
    counts = {
        "total": len(measurements),
        "ok": sum(_ok(m) for m in measurements),
        "unstable": sum(bool(m.summary.get("unstable")) for m in measurements),
        "failed": sum(m.status == Status.FAILED for m in measurements),
        "skipped": sum(m.status == Status.SKIPPED for m in measurements),
    }
    software = run.result.environment.get("software")
    software = software if isinstance(software, dict) else {}
    devices = sorted({m.device for m in measurements}) or [str(run.result.environment.get("device") or "-")]
    return {
        "run": run, "rows": rows, "columns": table.columns(measurements), "right": table.RIGHT_ALIGNED,
        "backends": [list(table.backend_row(m)) for m in measurements
                     if with_backend and m.backend != DEFAULT_BACKEND and _ok(m)],
        "backend_columns": table.BACKEND_COLUMNS, "backend_right": table.BACKEND_RIGHT,
        "efficiency": efficiency, "efficiency_columns": table.columns(measurements, table.EFFICIENCY_COLUMNS),
        "counts": counts,
        "devices": ", ".join(devices), "torch": str(software.get("torch") or "?"),
        "version": str(run.result.tool.get("version") or "?"), "created": run.result.created_utc or "-",
        "suite": str(run.result.settings.get("suite") or "-"),
    }


# ------------------------------------------------------------------------------------------------- render


def _template() -> Any:
    from jinja2 import Environment, StrictUndefined

    # importlib.resources finds the template inside an installed wheel as well as in a source checkout.
    text = resources.files("clsbench.report").joinpath("templates", TEMPLATE).read_text(encoding="utf-8")
    env = Environment(autoescape=True, undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                      keep_trailing_newline=True)
    return env.from_string(text)


def render_report(results: Sequence[BenchmarkResult], names: Sequence[str]) -> str:
    """Build the whole report as one self-contained HTML document.

    Args:
        results: the runs to show, in the order given (the first is run A).
        names: how to call each run in the report, usually the file name it was loaded from.

    Raises:
        InvalidInputError: no results, or not one name per result.
    """
    import matplotlib

    if not results:
        raise InvalidInputError("no results to report", "pass at least one result file")
    if len(results) != len(names):
        raise InvalidInputError(f"{len(results)} results but {len(names)} names", "give one name per result")
    runs = _runs(results, names)
    warnings = _warnings(runs)
    figs = _Figures()
    with matplotlib.rc_context(RC_PARAMS):
        throughput = _throughput_charts(runs, figs)
        sweeps = _sweeps(runs)
        sweep_charts = _sweep_charts(sweeps, figs)
        tune_charts = _tune_charts(runs, figs)
        latency = _latency_charts(runs, figs)
        power = _power_charts(runs, figs)
        roofline, roofline_notes = _roofline(runs, figs)
        soaks = _soaks(runs, figs)
    serving = _serving(runs)
    context = {
        "title": "clsbench report: " + ", ".join(f"{r.tag}" for r in runs),
        "runs": runs,
        "summaries": [_summary(r) for r in runs],
        "throughput": throughput,
        "sweeps": sweeps,
        "sweep_charts": sweep_charts,
        "tune_charts": tune_charts,
        "serving": serving,
        "soaks": soaks,
        "knee_pct": f"{DEFAULT_KNEE_FRACTION:.0%}",
        "latency": latency,
        "power": power,
        "roofline": roofline,
        "roofline_notes": roofline_notes,
        "warnings": warnings,
        "warning_count": sum(len(group["items"]) for group in warnings),
        "environments": [_environment(r) for r in runs],
        "max_curves": MAX_CURVES_PER_CHART,
        "max_points": MAX_POINTS_PER_CURVE,
        "mib": MIB,
    }
    return _template().render(**context)
