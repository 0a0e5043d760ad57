"""The self-contained HTML report: one file, readable offline, built from stored results alone.

What it holds: a summary table per run (with a backend column and a table of builds and output parity when a run
used an inference backend other than eager), throughput bars by mode (and backend), batch-sweep curves with the
knee marked (:mod:`clsbench.report.html_charts`), then the section of every procedure whose facts a file holds (each
procedure's :class:`~clsbench.report.views.HtmlSection`, registered with its view in
:data:`~clsbench.report.views.PROCEDURES`: this page names none of them), latency CDFs, power over time, the
roofline, warnings in words, and the full environment of every run.

How it stays self-contained and safe:

- Plots are inline SVG drawn by matplotlib (``svg.fonttype = "none"``: text stays text, so the page's fonts are
  used and no glyph outlines bloat the file). No JavaScript, no CDN, no external fonts or stylesheets.
- Every string taken from a result file reaches the page through Jinja2 with autoescaping on
  (:func:`clsbench.report.html_parts.render_fragment` for a procedure's section), or through matplotlib's SVG
  writer, which escapes text content (``<`` becomes ``&lt;``). Math-text parsing is off, so a ``$`` in a model name
  is printed, not interpreted.
- Output is deterministic for the same input: a fixed ``svg.hashsalt`` per figure, numbered in the order the page
  shows the figures (matplotlib otherwise derives element ids from a random salt), no ``Date`` in the SVG metadata
  (the metadata block is dropped), no timestamp other than the runs' own ``created_utc``.
- Long series are thinned to :data:`MAX_POINTS_PER_CURVE` points per curve, which keeps the file small without
  changing what the eye sees at these chart sizes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any

from clsbench.analysis.knee import DEFAULT_KNEE_FRACTION, knee
from clsbench.analysis.warnings import findings, grouped, preflight_findings
from clsbench.core.vocab import Status
from clsbench.errors import InvalidInputError
from clsbench.report import html_charts, table
from clsbench.report.html_parts import (
    MAX_CURVES_PER_CHART,
    MAX_POINTS_PER_CURVE,
    RC_PARAMS,
    Figures,
    ReportRun,
    jinja_environment,
    label_of,
    report_runs,
    succeeded,
)
from clsbench.report.views import html_views
from clsbench.results.schema import DEFAULT_BACKEND, BenchmarkResult, backend_suffix

__all__ = ["MAX_CURVES_PER_CHART", "MAX_POINTS_PER_CURVE", "TEMPLATE", "knee", "render_report"]

TEMPLATE = "report.html.j2"

MIB = 1024 * 1024


# ----------------------------------------------------------------------------------------------- warnings


def _warnings(runs: list[ReportRun]) -> list[dict[str, Any]]:
    """Failures, skips, instability, throttling, unmet stop rules and pre-flight problems
    (:mod:`clsbench.analysis.warnings`), grouped by kind, each group's advice said once."""
    found = []
    for run in runs:
        found += findings(run.measurements, label=label_of, run=run.tag)
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


def _environment(run: ReportRun) -> dict[str, Any]:
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


# ----------------------------------------------------------------------------------------------- procedures


def _procedure_sections(runs: list[ReportRun], figs: Figures) -> list[dict[str, Any]]:
    """Every procedure's report section in its order: its anchor, title and body (None when no file holds the
    procedure's facts, or none has anything to show)."""
    out = []
    for view in html_views():
        section = view.html
        if section is None:  # html_views() gives only views that have one
            continue
        holding = [run for run in runs if view.matches(run.result)]
        body = section.body(holding, figs) if holding else None
        out.append({"anchor": section.anchor, "title": section.title, "body": body or None})
    return out


# ---------------------------------------------------------------------------------------------- summaries


def _summary(run: ReportRun) -> dict[str, Any]:
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
    measured = [m for m in measurements if succeeded(m)]
    efficiency = [list(table.efficiency_row(m, with_backend)) for m in measured] \
        if table.has_efficiency(measured) else []
    counts = {
        "total": len(measurements),
        "ok": sum(succeeded(m) for m in measurements),
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
                     if with_backend and m.backend != DEFAULT_BACKEND and succeeded(m)],
        "backend_columns": table.BACKEND_COLUMNS, "backend_right": table.BACKEND_RIGHT,
        "efficiency": efficiency, "efficiency_columns": table.columns(measurements, table.EFFICIENCY_COLUMNS),
        "counts": counts,
        "devices": ", ".join(devices), "torch": str(software.get("torch") or "?"),
        "version": str(run.result.tool.get("version") or "?"), "created": run.result.created_utc or "-",
        "suite": str(run.result.settings.get("suite") or "-"),
    }


# ------------------------------------------------------------------------------------------------- render


def _template() -> Any:
    # importlib.resources finds the template inside an installed wheel as well as in a source checkout.
    text = resources.files("clsbench.report").joinpath("templates", TEMPLATE).read_text(encoding="utf-8")
    return jinja_environment().from_string(text)


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
    runs = report_runs(results, names)
    warnings = _warnings(runs)
    figs = Figures()
    # Figures are drawn in the order the page shows them (each figure's hash salt is its number).
    with matplotlib.rc_context(RC_PARAMS):
        throughput = html_charts.throughput_charts(runs, figs)
        sweeps = html_charts.sweeps(runs)
        sweep_charts = html_charts.sweep_charts(sweeps, figs)
        procedures = _procedure_sections(runs, figs)
        latency = html_charts.latency_charts(runs, figs)
        power = html_charts.power_charts(runs, figs)
        roofline, roofline_notes = html_charts.roofline(runs, figs)
    context = {
        "title": "clsbench report: " + ", ".join(f"{r.tag}" for r in runs),
        "runs": runs,
        "summaries": [_summary(r) for r in runs],
        "throughput": throughput,
        "sweeps": sweeps,
        "sweep_charts": sweep_charts,
        "procedures": procedures,
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
