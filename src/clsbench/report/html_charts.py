"""The HTML report's charts of measurements, for any run: throughput by mode, batch-sweep curves with the knee
marked, latency CDFs, power over time and the roofline. A procedure's own charts are drawn by its view
(:class:`~clsbench.report.views.HtmlSection`), next to the procedure.

Figures, each defined as in the summary tables or named where it is not:

- img/s is the median over repeats, as in ``clsbench show``; its whiskers span the repeats (min to max). A bar's
  label sits at the end of the bar itself, above the whisker, wherever the whisker reaches, and the axis is wide
  enough for every whisker and label.
- The latency CDF draws the raw ``wall_ms`` of every repeat pooled. Its legend gives the table's p50 and p99 (the
  median over repeats of each repeat's nearest-rank percentile, named so), and then the curve's own markers, the
  *pooled* nearest-rank p50 (●) and p99 (▲) (:func:`clsbench.analysis.stats.percentile`), named ``pooled``: the two
  differ when the repeats do (a busy host: 599.9 ms against 806.9 ms). The pooled p99 is left out of a pool of fewer
  than 100 samples, where it would be the maximum, as the table leaves out its p99.
- The roofline's TFLOP/s and MFU cells are the efficiency table's (:func:`clsbench.report.table.efficiency_row`): MFU
  against the datasheet peak, in brackets against the measured one.
"""

from __future__ import annotations

from typing import Any

from clsbench.analysis.knee import DEFAULT_KNEE_FRACTION, knee
from clsbench.core.vocab import Status
from clsbench.report.html_parts import (
    Figures,
    ReportRun,
    chunks,
    finite,
    fmt_g,
    label_of,
    legend_patch,
    log_axis,
    mode_of,
    rate_of,
    series_color,
    series_name,
    succeeded,
    thin,
)
from clsbench.report.table import EFFICIENCY_COLUMNS, efficiency_row, fmt_ms, fmt_rate
from clsbench.report.views import in_throughput_bars, knee_fraction
from clsbench.results.schema import Measurement

#: Throughput bars switch to a logarithmic axis when the largest bar is this many times the smallest
#: (a CPU next to a GPU), so that the small bars do not vanish.
LOG_AXIS_RATIO = 30.0
#: A bar's label starts this many points right of the bar's end and this many points above its centre line, where
#: the whisker runs (its caps reach 2 points above it), so that a whisker never runs through the label.
BAR_LABEL_OFFSET_PT = (3.0, 2.5)
#: Room right of the longest bar or whisker for its label: times the axis' end on a linear axis, factor on a log one.
LINEAR_HEADROOM, LOG_HEADROOM = 1.35, 8.0


# ---------------------------------------------------------------------------------------- throughput by mode


def _bar_measurements(run: ReportRun) -> tuple[Measurement, ...]:
    """The measurements the throughput bars show: none of a file whose procedure says its figures are not medians
    over repeats (``ProcedureView.throughput_bars``: its own section shows them)."""
    return run.measurements if in_throughput_bars(run.result) else ()


def throughput_charts(runs: list[ReportRun], figs: Figures) -> list[dict[str, Any]]:
    """One horizontal grouped-bar chart per workload: a group per model, a bar per (run, mode)."""
    many = len(runs) > 1
    workloads: list[str] = []
    for run in runs:
        for m in _bar_measurements(run):
            if rate_of(m) and m.workload not in workloads:
                workloads.append(m.workload)
    colors = _series_colors(runs, many)
    charts = []
    for workload in workloads:
        models, series, bars = _best_bars(runs, workload, many)
        charts.append(_throughput_chart(workload, models, series, bars, colors, figs))
    return charts


def _series_colors(runs: list[ReportRun], many: bool) -> dict[str, str]:
    """One colour per (run, mode) across every chart, so that a series keeps its colour from chart to chart."""
    colors: dict[str, str] = {}
    for run in runs:
        for m in _bar_measurements(run):
            if rate_of(m):
                colors.setdefault(series_name(run, mode_of(m), many), series_color(len(colors)))
    return colors


def _best_bars(
    runs: list[ReportRun], workload: str, many: bool
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
            value = rate_of(m)
            if m.workload != workload or value is None:
                continue
            name = series_name(run, mode_of(m), many)
            key = (m.model, name)
            if key not in best or value > (rate_of(best[key]) or 0.0):
                best[key] = m
            if m.model not in models:
                models.append(m.model)
            if name not in series:
                series.append(name)
    bars = [(model, name, best[(model, name)]) for model in models for name in series if (model, name) in best]
    return models, series, bars


def _throughput_chart(workload: str, models: list[str], series: list[str],
                      bars: list[tuple[str, str, Measurement]], colors: dict[str, str],
                      figs: Figures) -> dict[str, Any]:
    """One workload's chart (see :func:`_best_bars` for its bars): a log axis when the rates span more than
    :data:`LOG_AXIS_RATIO`, a legend of the series."""
    values = [rate_of(m) or 0.0 for _, _, m in bars]
    # The axis spans every whisker too: one that passed the axis would be cut, and its bar's label with it.
    reach = [v for _, _, m in bars for v in _repeat_rates(m)] + values
    log = max(values) / max(min(values), 1e-12) > LOG_AXIS_RATIO
    fig = figs.new(9.0, 1.0 + 0.28 * len(bars) + 0.12 * len(models))
    ax = fig.add_subplot()
    _draw_bar_groups(ax, models, bars, colors)
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    if log:
        low, high = min(reach) / 2, max(reach) * LOG_HEADROOM
        ax.set_xscale("log")
        ax.set_xlim(low, high)
        log_axis(ax.xaxis, low, high)
    else:
        ax.set_xlim(0, max(reach) * LINEAR_HEADROOM)
    ax.set_xlabel("images per second (median over repeats; whiskers: min-max of repeats)"
                  + (", log scale" if log else ""))
    ax.set_title(f"{workload}: throughput by mode")
    handles = [legend_patch(colors[name], name) for name in series]
    fig.legend(handles=handles, loc="outside right upper", frameon=False)
    return {"title": f"{workload}: throughput by mode", "svg": figs.svg(fig),
            "caption": "Each model's best batch size per mode is shown (bs in brackets)."}


def _repeat_rates(m: Measurement) -> list[float]:
    """The positive img/s of each repeat (the whiskers' ends)."""
    return [v for v in (finite(x) for x in m.summary.get("throughput_img_s_by_repeat") or ()) if v and v > 0]


def _draw_bar_groups(ax: Any, models: list[str], bars: list[tuple[str, str, Measurement]],
                     colors: dict[str, str]) -> None:
    """The bars, a group per model labelled on the y axis, each with min-max whiskers over its repeats (when
    there are two or more) and its rate and batch size written at the bar's end, just above the whisker's line
    (:data:`BAR_LABEL_OFFSET_PT`): where the bar ends, however far its whisker reaches."""
    y, ticks, labels = 0.0, [], []
    for model in models:
        group = [(name, m) for mdl, name, m in bars if mdl == model]
        start = y
        for name, m in group:
            value = rate_of(m) or 0.0
            per_repeat = _repeat_rates(m)
            err = None
            if len(per_repeat) > 1:
                err = [[max(value - min(per_repeat), 0.0)], [max(max(per_repeat) - value, 0.0)]]
            ax.barh(y, value, height=0.8, color=colors[name], xerr=err,
                    error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "#333333"})
            ax.annotate(f"{fmt_rate(value)} (bs{m.batch_size})", (value, y), xytext=BAR_LABEL_OFFSET_PT,
                        textcoords="offset points", va="bottom", ha="left", fontsize=7,
                        annotation_clip=False)
            y += 1
        ticks.append((start + y - 1) / 2)
        labels.append(model)
        y += 0.6
    ax.set_yticks(ticks, labels)




# -------------------------------------------------------------------------------------------- batch sweeps


def sweeps(runs: list[ReportRun]) -> list[dict[str, Any]]:
    """Every (run, model, workload, mode) measured at two or more batch sizes."""
    many = len(runs) > 1
    out = []
    for run in runs:
        groups: dict[tuple[str, str, str], dict[int, float]] = {}
        for m in run.measurements:
            value = rate_of(m)
            if value is not None:
                groups.setdefault((m.model, m.workload, mode_of(m)), {})[m.batch_size] = value
        for (model, workload, mode), by_batch in groups.items():
            if len(by_batch) < 2:
                continue
            points = sorted(by_batch.items())
            # A file may store the knee rule it was run with (`clsbench sweep --knee`); use that one.
            fraction = float(knee_fraction(run.result) or DEFAULT_KNEE_FRACTION)
            knee_b, knee_v = knee(points, fraction) or (None, None)
            best_b, best_v = max(points, key=lambda p: p[1])
            out.append({
                "run": run.letter, "model": model, "workload": workload, "mode": mode,
                "name": series_name(run, f"{model} {mode}", many), "points": points,
                "batches": ", ".join(str(b) for b, _ in points),
                "best": f"{fmt_rate(best_v)} at bs{best_b}", "knee_batch": knee_b,
                "knee": f"bs{knee_b} ({fmt_rate(knee_v)} img/s)",
            })
    return out


def sweep_charts(sweeps: list[dict[str, Any]], figs: Figures) -> list[dict[str, Any]]:
    charts = []
    workloads = list(dict.fromkeys(s["workload"] for s in sweeps))
    for workload in workloads:
        curves = [s for s in sweeps if s["workload"] == workload]
        parts = chunks(curves)
        for part_index, part in enumerate(parts):
            fig = figs.new(6.4, 3.6)
            ax = fig.add_subplot()
            batches: set[int] = set()
            for i, s in enumerate(part):
                xs = [b for b, _ in s["points"]]
                ys = [v for _, v in s["points"]]
                batches.update(xs)
                ax.plot(xs, ys, marker="o", markersize=3, color=series_color(i), label=s["name"], linewidth=1.4)
                kb = s["knee_batch"]
                kv = dict(s["points"])[kb]
                ax.plot([kb], [kv], marker="*", markersize=12, color=series_color(i), markeredgecolor="black",
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




# ----------------------------------------------------------------------------------------- latency CDFs


def _wall_samples(m: Measurement) -> list[float]:
    pooled: list[float] = []
    for r in m.repeats:
        if r.get("status", "ok") != Status.OK:
            continue
        samples = r.get("samples") if isinstance(r.get("samples"), dict) else {}
        pooled.extend(v for v in (finite(x) for x in samples.get("wall_ms") or ()) if v is not None and v > 0)
    return pooled


def latency_charts(runs: list[ReportRun], figs: Figures) -> list[dict[str, Any]]:
    """Per model: the CDF of every repeat's raw per-request wall time pooled, one curve per (run, mode, batch)."""
    from clsbench.analysis.stats import MIN_SAMPLES, percentile

    many = len(runs) > 1
    curves: dict[str, list[tuple[str, list[float], str]]] = {}
    for run in runs:
        for m in run.measurements:
            if m.workload != "infer-latency" or not succeeded(m):
                continue
            samples = _wall_samples(m)
            if samples:
                text = mode_of(m) if m.batch_size == 1 else f"{mode_of(m)} bs{m.batch_size}"
                curves.setdefault(m.model, []).append((series_name(run, text, many), samples, _table_latency(m)))
    charts = []
    for model, entries in curves.items():
        parts = chunks(entries)
        for part_index, part in enumerate(parts):
            fig = figs.new(5.6, 3.2)
            ax = fig.add_subplot()
            lows, highs = [], []
            for i, (name, samples, table_figures) in enumerate(part):
                ordered = sorted(samples)
                n = len(ordered)
                keep = thin(n)
                xs = [ordered[k] for k in keep]
                ys = [(k + 1) / n for k in keep]
                p50 = percentile(ordered, 50.0)
                # The p99 marker only where the pool holds enough samples for one (else it is the maximum).
                p99 = percentile(ordered, 99.0) if n >= MIN_SAMPLES["p99"] else None
                lows.append(ordered[0])
                highs.append(ordered[-1])
                # Straight segments between the kept quantiles: a step drawing would double the vertices for no
                # visible difference at this size.
                pooled = f"pooled ● p50 {fmt_ms(p50)}" + (f", ▲ p99 {fmt_ms(p99)}" if p99 is not None else "")
                ax.plot(xs, ys, color=series_color(i), linewidth=1.3,
                        label=f"{name}: {table_figures}\n{pooled} ms (n={n})")
                ax.plot([p50], [0.5], marker="o", markersize=5, color=series_color(i), markeredgecolor="black",
                        markeredgewidth=0.5, linestyle="none")
                if p99 is not None:
                    ax.plot([p99], [0.99], marker="^", markersize=6, color=series_color(i), markeredgecolor="black",
                            markeredgewidth=0.5, linestyle="none")
            if max(highs) / max(min(lows), 1e-9) > 20:
                ax.set_xscale("log")
                log_axis(ax.xaxis, min(lows), max(highs))
            ax.axhline(0.5, color="#999999", linewidth=0.6, linestyle=":")
            ax.axhline(0.99, color="#999999", linewidth=0.6, linestyle=":")
            ax.set_ylim(0, 1.02)
            ax.set_xlabel("request latency, wall clock (ms); markers: pooled percentiles")
            ax.set_ylabel("fraction of requests ≤ x")
            suffix = f" ({part_index + 1}/{len(parts)})" if len(parts) > 1 else ""
            title = f"{model}: infer-latency CDF{suffix}"
            ax.set_title(title)
            ax.legend(loc="lower right", fontsize=7)
            charts.append({"title": title, "svg": figs.svg(fig), "caption": ""})
    return charts


def _table_latency(m: Measurement) -> str:
    """The table's p50 and p99 of ``m``, named: ``table p50 599.9, p99 612.0 ms (median of 3 repeats)``."""
    latency = m.summary.get("latency_ms") if isinstance(m.summary.get("latency_ms"), dict) else {}
    p50, p99 = finite(latency.get("p50")), finite(latency.get("p99"))
    if p50 is None:
        return "no p50 in the table"
    repeats = sum(r.get("status", "ok") == Status.OK for r in m.repeats)
    figures = f"table p50 {fmt_ms(p50)}" + (f", p99 {fmt_ms(p99)}" if p99 is not None else "")
    return f"{figures} ms (median of {repeats} repeats)"


# ------------------------------------------------------------------------------------------ power over time


def power_charts(runs: list[ReportRun], figs: Figures) -> list[dict[str, Any]]:
    """Per run: power draw over each repeat's timed region, from the telemetry samples (t_s, power_w)."""
    charts = []
    for run in runs:
        curves = []
        for m in run.measurements:
            for index, r in enumerate(m.repeats):
                telemetry = r.get("telemetry") if isinstance(r.get("telemetry"), dict) else {}
                samples = telemetry.get("samples") if isinstance(telemetry.get("samples"), dict) else {}
                ts, ps = samples.get("t_s") or [], samples.get("power_w") or []
                pairs = [(t, p) for t, p in zip((finite(x) for x in ts), (finite(y) for y in ps), strict=False)
                         if t is not None and p is not None]
                if len(pairs) >= 2:
                    curves.append((f"{label_of(m)} r{index + 1}", pairs))
        parts = chunks(curves)
        for part_index, part in enumerate(parts):
            fig = figs.new(5.6, 3.2)
            ax = fig.add_subplot()
            for i, (name, pairs) in enumerate(part):
                keep = thin(len(pairs))
                ax.plot([pairs[k][0] for k in keep], [pairs[k][1] for k in keep], color=series_color(i), linewidth=1.3,
                        label=name)
            ax.set_xlabel("time in the timed region (s)")
            ax.set_ylabel("board power (W)")
            limit = finite((run.result.environment.get("gpu") or {}).get("power_limit_enforced_w")) \
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


def roofline(runs: list[ReportRun], figs: Figures) -> tuple[list[dict[str, Any]], list[str]]:
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
            intensity, achieved = finite(eff.get("arithmetic_intensity")), finite(eff.get("achieved_tflop_s"))
            if succeeded(m) and intensity and achieved and intensity > 0 and achieved > 0:
                points.append((m, eff, intensity, achieved))
        if not points:
            continue
        env = run.result.environment
        probe = env.get("probe") if isinstance(env.get("probe"), dict) else {}
        gpu = env.get("gpu") if isinstance(env.get("gpu"), dict) else {}
        peak = lookup_gpu(str(gpu["name"])) if gpu.get("name") else None
        bw_measured = finite(probe.get("copy_bytes_s"))
        bw_datasheet = peak.memory_bandwidth_bytes_s if peak else None
        units: dict[str, dict[str, float | None]] = {}
        for _, eff, _, _ in points:
            unit = str(eff.get("precision_unit") or "?")
            units.setdefault(unit, {"measured": finite(eff.get("peak_tflop_s_measured")),
                                    "datasheet": finite(eff.get("peak_tflop_s_datasheet"))})
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
            color = series_color(ui)
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
            color = series_color(list(units).index(unit))
            ax.plot([intensity], [achieved], marker="o", markersize=6, color=color, markeredgecolor="black",
                    markeredgewidth=0.6, linestyle="none")
            # Alternate the label above and below its point, so that neighbouring points stay readable.
            ax.annotate(str(i), (intensity, achieved), textcoords="offset points",
                        xytext=(5, 3) if i % 2 else (5, -11), fontsize=8, fontweight="bold")
            roof = eff.get("roofline") if isinstance(eff.get("roofline"), dict) else {}
            fraction = finite(roof.get("fraction_of_attainable"))
            # The efficiency table's own cells: one definition of TFLOP/s and MFU on the page.
            cells = dict(zip(EFFICIENCY_COLUMNS, efficiency_row(m), strict=True))
            rows.append({
                "n": str(i), "label": label_of(m), "unit": unit, "intensity": fmt_g(intensity),
                "achieved": cells["TFLOP/s"], "mfu": cells["MFU %"],
                "attainable": "-" if fraction is None else f"{100 * fraction:.0f}%",
                "bound_by": str(eff.get("bound_by") or "-"), "reason": str(roof.get("reason") or ""),
            })
        y_lo, y_hi = min(p[3] for p in points) / 4, max(ceilings) * 3
        ax.set_xlim(x_lo, x_hi)
        ax.set_ylim(y_lo, y_hi)
        log_axis(ax.xaxis, x_lo, x_hi)
        log_axis(ax.yaxis, y_lo, y_hi)
        ax.set_xlabel("arithmetic intensity (FLOP per byte of minimal memory traffic, log)")
        ax.set_ylabel("achieved TFLOP/s (log)")
        title = f"{run.tag}: roofline ({run.hardware})"
        ax.set_title(title)
        ax.legend(loc="lower right", fontsize=7)
        charts.append({"title": title, "svg": figs.svg(fig), "rows": rows,
                       "caption": "Solid: measured ceilings (clsbench probe); dashed: datasheet ceilings."})
    return charts, notes
