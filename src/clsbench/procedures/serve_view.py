"""What ``serve`` adds to the outputs of its result file besides ``show``'s text: its section of the HTML report and
its flat rows. Pure: from the file alone, through :mod:`clsbench.serving.analysis`; registered with serve's view at
the bottom of :mod:`clsbench.procedures.serve`.

A serve result's measurements are scenario answers searched over LoadGen runs, not medians over repeats: its flat
rows are the LoadGen runs, and the report shows its answers in this section rather than in the throughput bars.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clsbench.report.html_parts import Figures, ReportRun, render_fragment
from clsbench.results.schema import BenchmarkResult
from clsbench.serving.analysis import analyze_serve, csv_rows, render_serve, serve_figures

#: The first columns of a serve result's flat rows; the rest are those of :func:`clsbench.serving.analysis.csv_rows`.
SERVE_FIRST_COLUMNS = ("result_file", "model", "device", "index", "mode", "scenario", "role", "setting")

#: The section's body: what the figures are, then per serve run its charts by mode and the text ``show`` prints.
BODY = ("<p class=\"small muted\">MLPerf LoadGen scenarios against clsbench's dynamic-batching server "
        "(<code>clsbench serve</code>).\n"
        "Each figure is a scenario's answer over its LoadGen runs (server: the highest target QPS whose run was "
        "VALID);\n"
        """percentiles are LoadGen's.</p>
{% for s in serving %}
<h3>{{ s.run.tag }}: {{ s.run.name }} ({{ s.model }})</h3>
{% for mode in s.modes %}
{% if mode.charts %}
<p><b>{{ mode.mode }}</b></p>
<div class="charts">
{% for c in mode.charts %}
<figure>{{ c.svg }}<figcaption>{{ c.caption }}</figcaption></figure>
{% endfor %}
</div>
{% endif %}
{% endfor %}
<div class="scroll"><pre class="small">{{ s.text }}</pre></div>
{% endfor %}
""")


def serve_section(runs: Sequence[ReportRun], figs: Figures) -> Any:
    """The report section of the serve runs in ``runs``: per mode, latency against offered load with the bound drawn
    and the best Server run's batch-size histogram (:func:`clsbench.serving.analysis.serve_figures`), then the text
    ``show`` prints. ``figs`` is unused: serving.analysis draws its own SVG."""
    from markupsafe import Markup

    serving = []
    for run in runs:
        analysis = analyze_serve(run.result)
        # The SVG is written by serving.analysis, which escapes every text it takes from the file.
        modes = [{"mode": mode["mode"], "charts": [{"svg": Markup(c["svg"]), "caption": c["caption"]}
                                                   for c in mode["charts"]]} for mode in serve_figures(analysis)]
        serving.append({"run": run, "model": analysis.get("model"), "modes": modes, "text": render_serve(analysis)})
    return render_fragment(BODY, serving=serving) if serving else None


def serve_rows(result: BenchmarkResult, result_file: str) -> list[dict[str, Any]]:
    """Flat rows of a serve result: one per LoadGen run (:func:`clsbench.serving.analysis.csv_rows`), with the file,
    model and device."""
    analysis = analyze_serve(result)
    head = {"result_file": result_file, "model": analysis.get("model"), "device": analysis.get("device")}
    return [{**head, **row} for row in csv_rows(analysis)]
