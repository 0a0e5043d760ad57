"""Soak's section of the HTML report: per soak, throughput per window and the telemetry of the same timed region on
one time axis (throttle intervals shaded), then the verdicts ``show`` prints. Pure: drawn from the file alone
(:mod:`clsbench.analysis.soak` derives the windows and verdicts).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clsbench.analysis.soak import analyze_soak, render_soak, soak_measurement
from clsbench.report.html_parts import Figures, ReportRun, finite, render_fragment, series_color, thin
from clsbench.report.table import fmt_rate

#: Throttle intervals closer than this share of a soak's span are drawn as one shaded band (a power cap that flickers
#: on and off every second would otherwise draw thousands of bands); at most this many bands are drawn.
SOAK_MERGE_SHARE = 0.002
MAX_SOAK_BANDS = 400


def throttle_bands(intervals: list[dict[str, Any]], span: float) -> list[tuple[float, float]]:
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


def series_points(samples: dict[str, Any], key: str) -> tuple[list[float], list[float]]:
    """The read samples of one telemetry series as ``(times, values)``, thinned to :data:`MAX_POINTS_PER_CURVE`."""
    pairs = [(t, v) for t, v in zip((finite(x) for x in samples.get("t_s") or ()),
                                    (finite(y) for y in samples.get(key) or ()), strict=False)
             if t is not None and v is not None]
    keep = thin(len(pairs))
    return [pairs[i][0] for i in keep], [pairs[i][1] for i in keep]


#: The telemetry panels of a soak's chart below its throughput: (y label, series drawn), each shown when read.
SOAK_PANELS = (("power (W)", ("power_w",)), ("clock (MHz)", ("sm_clock_mhz", "mem_clock_mhz")),
               ("temperature (C)", ("temperature_c", "fan_pct")))


def soak_chart(analysis: dict[str, Any], samples: dict[str, Any], figs: Figures) -> Any:
    """Throughput per window, power, SM and memory clocks, temperature (and fan speed, in %) on one time axis,
    throttle intervals shaded in every panel, the steady state's level dashed over the throughput."""
    windows = analysis["windows"]
    span = max([w["end_s"] for w in windows] + [finite(t) or 0.0 for t in samples.get("t_s") or ()] + [1e-9])
    panels = [(label, keys) for label, keys in SOAK_PANELS if series_points(samples, keys[0])[0]]
    fig = figs.new(8.0, 1.2 + 1.6 * (1 + len(panels)))
    axes = fig.subplots(1 + len(panels), 1, sharex=True, squeeze=False)[:, 0]
    bands = throttle_bands((analysis.get("throttling") or {}).get("intervals") or [], span)
    for ax in axes:
        for start, end in bands:
            ax.axvspan(start, end, color="#d62728", alpha=0.15, linewidth=0)
    ys = [w["throughput_img_s"] for w in windows]
    axes[0].stairs(ys, [w["start_s"] for w in windows] + [windows[-1]["end_s"]], color=series_color(0), linewidth=1.4,
                   label="img/s per window", baseline=None)
    steady = analysis.get("steady")
    if steady:
        axes[0].hlines(steady["throughput_img_s"], steady["from_s"], steady["to_s"], colors="#333333",
                       linestyles="--", linewidth=0.9, label=f"steady state {fmt_rate(steady['throughput_img_s'])}")
    axes[0].set_ylim(0, max(ys) * 1.15)
    axes[0].set_ylabel("images per second")
    for ax, (label, keys) in zip(axes[1:], panels, strict=True):
        for index, key in enumerate(keys):
            t, v = series_points(samples, key)
            if t:
                ax.plot(t, v, color=series_color(index + 1), linewidth=1.0, linestyle=":" if key == "fan_pct" else "-",
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


#: The section's body: what the chart shows, then per soak its heading, chart and verdicts.
BODY = """\
<p class="small muted">One cell measured for a long time (<code>clsbench soak</code>): throughput per window and the
NVML telemetry of the same timed region on one time axis; red bands: samples throttled by power or heat. The
verdicts below each chart are what <code>clsbench show</code> prints.</p>
{% for s in soaks %}
<h3>{{ s.run.tag }}: {{ s.run.name }} ({{ s.label }})</h3>
{% if s.chart %}
<figure>{{ s.chart }}</figure>
{% endif %}
<div class="scroll"><pre class="small">{{ s.text }}</pre></div>
{% endfor %}
"""


def soak_section(runs: Sequence[ReportRun], figs: Figures) -> Any:
    """The report section of the soaks in ``runs``: each one's time series and the verdicts ``show`` prints."""
    soaks = []
    for run in runs:
        analysis = analyze_soak(run.result)
        chart = None
        if analysis["status"] == "ok" and analysis["windows"]:
            m = soak_measurement(run.result)
            telemetry = m.repeats[0].get("telemetry") if m is not None else None
            samples = telemetry.get("samples") if isinstance(telemetry, dict) else None
            chart = soak_chart(analysis, samples if isinstance(samples, dict) else {}, figs)
        soaks.append({"run": run, "label": analysis["label"], "chart": chart, "text": render_soak(analysis)})
    return render_fragment(BODY, soaks=soaks) if soaks else None
