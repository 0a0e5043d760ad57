"""Tune's section of the HTML report: each search's candidates against the search time, by rung and kind, with the
budget drawn and the best confirmed figure starred. Pure: drawn from ``settings["tune"]["trials"]`` of the file.

Imports no other module of the tune package (the report reads the stored trials, not the search).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clsbench.report.html_parts import Figures, ReportRun, finite, render_fragment, series_color

#: How each rung of a tune search is drawn: marker, size, label.
TUNE_RUNG_MARKERS = {"screen": ("o", 4, "screen"), "longer": ("s", 6, "longer"), "confirm": ("D", 7, "confirm")}


def tune_points(run: ReportRun) -> list[dict[str, Any]]:
    """The finished trials of a tune search in ``run`` (settings["tune"]["trials"], format 2) that have a score."""
    facts = run.result.settings.get("tune")
    trials = facts.get("trials") if isinstance(facts, dict) else None
    out = []
    for t in trials if isinstance(trials, list) else []:
        if not isinstance(t, dict):
            continue
        end, score = finite(t.get("end_s")), finite(t.get("score"))
        if end is not None and score is not None and t.get("rung") in TUNE_RUNG_MARKERS:
            out.append({"end_s": end, "score": score, "rung": t["rung"], "kind": str(t.get("kind") or "?"),
                        "label": f"{t.get('mode')} bs{t.get('batch_size')}"
                                 + (f" [{t['data']}]" if t.get("data") else "")})
    return out


def tune_charts(runs: list[ReportRun], figs: Figures) -> list[dict[str, Any]]:
    """Per tune search: each candidate's score against the search time at which it finished, by rung and kind,
    with the budget drawn and the best confirmed figure starred."""
    charts = []
    for run in runs:
        points = tune_points(run)
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
                            markersize=size, linestyle="none", color=series_color(index), markeredgecolor="black",
                            markeredgewidth=0.4, label=f"{kind}, {label}")
        confirmed = [p for p in points if p["rung"] == "confirm"]
        if confirmed:
            best = max(confirmed, key=lambda p: p["score"])
            ax.plot([best["end_s"]], [best["score"]], marker="*", markersize=14, color="#ffd700",
                    markeredgecolor="black", markeredgewidth=0.6, linestyle="none")
            ax.annotate(best["label"], (best["end_s"], best["score"]), textcoords="offset points", xytext=(6, 4),
                        fontsize=7)
        budget = finite(facts.get("budget_s"))
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
        spent = finite(facts.get("spent_s"))
        charts.append({"title": title, "svg": figs.svg(fig),
                       "caption": f"{len(points)} candidate measurements" + (f" in {spent:.0f} s" if spent else "")})
    return charts


#: The section's body: what the points mean, then the charts.
BODY = """\
<p class="small muted">Each point is one candidate of a <code>clsbench tune</code> search, measured at one rung
(screen: a short window, one repeat; longer: the full window, one repeat; confirm: the full protocol), placed at the
moment of the search it finished. The dashed line is the search's time budget; the star is the best confirmed
figure.</p>
<div class="charts">
{% for c in charts %}
<figure>{{ c.svg }}<figcaption>{{ c.caption }}</figcaption></figure>
{% endfor %}
</div>
"""


def tune_section(runs: Sequence[ReportRun], figs: Figures) -> Any:
    """The report section of the tune searches in ``runs``; None when none has a finished, scored trial."""
    charts = tune_charts(list(runs), figs)
    return render_fragment(BODY, charts=charts) if charts else None
