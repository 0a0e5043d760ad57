"""Select's section of the HTML report: per selection, cost per million images against p99 latency, one point per
card and configuration that meets the requirement (priced cards only), the Pareto front marked (no other point is
both cheaper and faster), then the text ``show`` prints. Pure: drawn from the file alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clsbench.procedures.select.text import facts_of, render_select
from clsbench.report.html_parts import Figures, ReportRun, render_fragment, series_color


def pareto_front(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points no other point beats on both cost per million images and p99 (ties kept), by p99."""
    usable = [p for p in points if p.get("p99_ms") is not None and p.get("cost_per_m_images") is not None]
    front = [p for p in usable if not any(
        q["cost_per_m_images"] <= p["cost_per_m_images"] and q["p99_ms"] <= p["p99_ms"]
        and (q["cost_per_m_images"] < p["cost_per_m_images"] or q["p99_ms"] < p["p99_ms"]) for q in usable)]
    return sorted(front, key=lambda p: (p["p99_ms"], p["cost_per_m_images"]))


def cost_chart(facts: dict[str, Any], figs: Figures) -> Any:
    """The chart of one selection, or None when no point has both a cost and a p99."""
    points = [p for p in (facts.get("answer") or {}).get("points") or []
              if p.get("p99_ms") is not None and p.get("cost_per_m_images") is not None]
    if not points:
        return None
    currency = facts.get("currency") or "$"
    heading = (facts.get("requirement") or {}).get("latency_heading") or "p99 ms"
    fig = figs.new(7.5, 4.2)
    ax = fig.subplots()
    for index, card in enumerate(dict.fromkeys(p["card"] for p in points)):
        mine = [p for p in points if p["card"] == card]
        ax.scatter([p["p99_ms"] for p in mine], [p["cost_per_m_images"] for p in mine], color=series_color(index),
                   s=22, label=card, marker="o")
        estimated = [p for p in mine if p.get("estimate")]
        if estimated:
            ax.scatter([p["p99_ms"] for p in estimated], [p["cost_per_m_images"] for p in estimated],
                       facecolors="none", edgecolors="#333333", s=60, linewidths=0.8)
    front = pareto_front(points)
    ax.plot([p["p99_ms"] for p in front], [p["cost_per_m_images"] for p in front], color="#333333",
            linestyle="--", linewidth=0.9, marker="D", markersize=6, markerfacecolor="none", label="Pareto front")
    ax.set_xlabel(heading.replace(" ms", " (ms)") + " at the configuration's measured load")
    ax.set_ylabel(f"cost per million images ({currency})")
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.legend(loc="upper right", fontsize=7)
    ax.set_title(f"{facts.get('model')}: {(facts.get('requirement') or {}).get('text')}", fontsize=9)
    return figs.svg(fig)


BODY = """\
<p class="small muted">Which card, how many, at what cost (<code>clsbench select</code>): each point is a card and
configuration that meets the requirement at its price, cost per million images against its p99 latency; the dashed
line joins the Pareto front (no other point is both cheaper and faster); ringed points are estimates. The table
below each chart is what <code>clsbench show</code> prints.</p>
{% for s in selections %}
<h3>{{ s.run.tag }}: {{ s.run.name }}</h3>
{% if s.chart %}
<figure>{{ s.chart }}</figure>
{% endif %}
<div class="scroll"><pre class="small">{{ s.text }}</pre></div>
{% endfor %}
"""


def select_section(runs: Sequence[ReportRun], figs: Figures) -> Any:
    """The report section of the selections in ``runs``."""
    selections = []
    for run in runs:
        facts = facts_of(run.result)
        selections.append({"run": run, "chart": cost_chart(facts, figs), "text": render_select(facts)})
    return render_fragment(BODY, selections=selections) if selections else None
