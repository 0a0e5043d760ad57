"""Exports of stored results and of comparisons: flat rows as CSV, JSON and Markdown, comparisons as text too.

Every function here reads stored results (or a :class:`~clsbench.analysis.compare.Comparison` built from them) and
returns text; nothing is measured, and nothing is written except by :func:`write_text`.

**Flat rows** (:data:`COLUMNS`): one row per measurement, units in the column names (``_ms``, ``_bytes``,
``_w``, ``_j``, ``_pct``, ``_img_s``), a value that a file does not have is empty in CSV and ``null`` in JSON.
Figures are written unrounded (CSV writes Python's shortest round-trip form of each float), so pandas'
``read_csv`` gets exactly what the result file holds. Definitions are those of ``clsbench show``: img/s is the
median over repeats, each latency statistic the median over repeats of that statistic within a repeat,
percentiles are nearest-rank (:mod:`clsbench.analysis.stats`).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from clsbench.analysis.compare_keys import SYNTHETIC, default_input_sizes, fact_text, input_size_of, world_size_of
from clsbench.analysis.compare_types import (
    VERDICT_FASTER,
    VERDICT_INCONCLUSIVE,
    VERDICT_NA,
    VERDICT_NO_CHANGE,
    VERDICT_NOT_TESTABLE,
    VERDICT_SLOWER,
    CellValue,
    Comparison,
    CrossRunFigures,
    Ratio,
    Row,
    RunInfo,
    detectable_text,
    format_ratio,
)
from clsbench.analysis.significance import DEFAULT_POWER, POWER_METHOD, format_p
from clsbench.core.text_table import text_table
from clsbench.core.vocab import Status
from clsbench.errors import InvalidInputError, ResultFileError
from clsbench.report.views import rows_view
from clsbench.results.facts import get_field
from clsbench.results.io import check_writable, jsonable, write_text_atomic
from clsbench.results.schema import DEFAULT_BACKEND, BenchmarkResult, Measurement, data_label

#: Formats of ``show`` and ``compare``.
FORMATS = ("table", "json", "csv", "markdown")

#: The flat row of one measurement, in this order (the CSV header).
COLUMNS: tuple[str, ...] = (
    "result_file",
    "run_created_utc",
    "gpu_name",
    "device",
    "model",
    "workload",
    "mode",
    "backend",
    "batch_size",
    "input_size",
    "data",
    "world_size",
    "status",
    "reason",
    "throughput_img_s",
    "spread_pct",
    "unstable",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "latency_p999_ms",
    "latency_mean_ms",
    "latency_n",
    "gpu_latency_p50_ms",
    "peak_memory_allocated_bytes",
    "peak_memory_reserved_bytes",
    "power_avg_w",
    "energy_j",
    "joules_per_image",
    "images_per_s_per_w",
    "achieved_tflop_s",
    "mfu_datasheet_pct",
    "bound_by",
    "throttled",
    "backend_build_s",
    "backend_load_s",
    "artifact_bytes",
    "backend_cache_hit",
    "parity_max_abs_err_rel",
    "parity_top1_agreement_pct",
    "parity_passed",
    "torch",
    "clsbench_version",
)
#: Columns that describe an inference backend's artifact and outputs (empty for eager measurements).
BACKEND_COLUMNS = COLUMNS[COLUMNS.index("backend_build_s"):COLUMNS.index("torch")]

MIB = 1024 * 1024


# ----------------------------------------------------------------------------------------------------------
# Flat rows of results


def measurement_row(result: BenchmarkResult, m: Measurement, result_file: str,
                    defaults: dict[str, int] | None = None) -> dict[str, Any]:
    """The flat row of one measurement (keys: :data:`COLUMNS`).

    ``input_size``, ``data`` and ``world_size`` are what ``compare`` matches on besides the key
    (:func:`clsbench.analysis.compare.match_key`): the input side (empty: the model's default, whose size the file
    does not show), ``synthetic`` or the data pipeline's label, and the devices one step ran on (1 but for
    ``clsbench scale``). ``defaults``: the models' default input sizes as the files show them
    (:func:`clsbench.analysis.compare.default_input_sizes`; None: as ``result`` alone shows them).
    """
    if defaults is None:
        defaults = default_input_sizes([result])
    s = m.summary or {}
    latency = s.get("latency_ms") or {}
    telemetry = s.get("telemetry") or {}
    eff = s.get("efficiency") or {}
    backend = s.get("backend") or {}
    parity = backend.get("parity") or {}
    env = result.environment
    return {
        "result_file": result_file,
        "run_created_utc": result.created_utc or None,
        # The GPU name describes the measurement only when it ran on that GPU.
        "gpu_name": get_field(env, "gpu.name") if m.device.startswith("cuda") else None,
        "device": m.device,
        "model": m.model,
        "workload": m.workload,
        "mode": m.mode,
        "backend": m.backend,
        "batch_size": m.batch_size,
        "input_size": input_size_of(m, defaults),
        "data": data_label(m.data) or SYNTHETIC,
        "world_size": world_size_of(m, result.settings),
        "status": m.status,
        "reason": m.reason,
        "throughput_img_s": s.get("throughput_img_s"),
        "spread_pct": s.get("spread_pct"),
        "unstable": s.get("unstable") if m.status == Status.OK else None,
        "latency_p50_ms": latency.get("p50"),
        "latency_p90_ms": latency.get("p90"),
        "latency_p99_ms": latency.get("p99"),
        "latency_p999_ms": latency.get("p999"),
        "latency_mean_ms": latency.get("mean"),
        "latency_n": latency.get("n"),
        "gpu_latency_p50_ms": (s.get("gpu_latency_ms") or {}).get("p50"),
        "peak_memory_allocated_bytes": s.get("peak_memory_allocated_bytes"),
        "peak_memory_reserved_bytes": s.get("peak_memory_reserved_bytes"),
        "power_avg_w": telemetry.get("power_avg_w"),
        "energy_j": telemetry.get("energy_j"),
        "joules_per_image": telemetry.get("joules_per_image"),
        "images_per_s_per_w": telemetry.get("images_per_s_per_w"),
        "achieved_tflop_s": eff.get("achieved_tflop_s"),
        "mfu_datasheet_pct": eff.get("mfu_datasheet_pct"),
        "bound_by": eff.get("bound_by"),
        # None when no telemetry sample could tell (older files store False even without samples).
        "throttled": telemetry.get("throttled") if telemetry.get("samples_n") else None,
        "backend_build_s": backend.get("build_s"),
        "backend_load_s": backend.get("load_s"),
        "artifact_bytes": backend.get("artifact_bytes"),
        "backend_cache_hit": backend.get("cache_hit"),
        "parity_max_abs_err_rel": parity.get("max_abs_err_rel"),
        "parity_top1_agreement_pct": parity.get("top1_agreement_pct"),
        "parity_passed": parity.get("passed"),
        "torch": get_field(env, "software.torch"),
        "clsbench_version": result.tool.get("version") or get_field(env, "clsbench.version"),
    }


def rows(results: Sequence[BenchmarkResult], names: Sequence[str]) -> list[dict[str, Any]]:
    """Flat rows of every measurement of ``results``; ``names`` (one per result) fill ``result_file``."""
    if len(results) != len(names):
        raise InvalidInputError(f"{len(names)} names for {len(results)} results")
    out = []
    for result, name in zip(results, names, strict=True):
        defaults = default_input_sizes([result])
        out += [measurement_row(result, m, name, defaults) for m in result.measurements]
    return out


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def to_csv(table: Sequence[dict[str, Any]], columns: Sequence[str] = COLUMNS) -> str:
    """CSV with a header row; empty cells for missing values; floats unrounded; ``\\n`` line ends."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in table:
        writer.writerow([_csv_value(row.get(c)) for c in columns])
    return out.getvalue()


def to_json(table: Sequence[dict[str, Any]]) -> str:
    """A JSON list of row objects (missing values are ``null``), as standard JSON (no NaN)."""
    return json.dumps(jsonable(list(table)), indent=1, allow_nan=False) + "\n"


def _md_cell(value: Any) -> str:
    """A value in a Markdown cell: pipes and asterisks escaped, newlines flattened, floats shortened for reading."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = _fmt_number(value)
    else:
        text = str(value)
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("*", "\\*")
    return text.replace("\r", " ").replace("\n", " ")


def _fmt_number(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.3f}"
    return f"{value:.4g}"


def markdown_table(header: Sequence[str], body: Sequence[Sequence[Any]], right: Sequence[bool] | None = None) -> str:
    """A GitHub pipe table; ``right`` marks right-aligned columns."""
    right = right or [False] * len(header)
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |",
             "|" + "|".join("---:" if r else "---" for r in right) + "|"]
    for row in body:
        lines.append("| " + " | ".join(_md_cell(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def to_markdown(table: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A Markdown pipe table of flat rows.

    Args:
        table: rows from :func:`rows`.
        columns: the columns to show; default: those of :data:`COLUMNS` that have a value in some row (a CPU
            run has no power or GPU columns) and say something (an eager, synthetic-data, single-device run has no
            backend, data or world_size column). Floats are shortened for reading; use CSV or JSON for exact values.
    """
    if columns is None:
        columns = [c for c in COLUMNS if any(r.get(c) is not None for r in table)] or list(COLUMNS)
        # Every row eager, synthetic or on one device: the column says nothing.
        plain = {"backend": (None, DEFAULT_BACKEND), "data": (None, SYNTHETIC), "world_size": (None, 1)}
        columns = [c for c in columns if c not in plain or any(r.get(c) not in plain[c] for r in table)]
    right = [any(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool) for r in table)
             for c in columns]
    return markdown_table(columns, [[r.get(c) for c in columns] for r in table], right)


def columns_of(table: Sequence[dict[str, Any]], first: Sequence[str] = ()) -> list[str]:
    """Every key of ``table``'s rows, ``first`` first, then in the order the rows first hold them."""
    return list(dict.fromkeys([*first, *(key for row in table for key in row)]))


def export_results(results: Sequence[BenchmarkResult], names: Sequence[str], fmt: str) -> str:
    """Flat rows of ``results`` in ``fmt`` (``csv``, ``json`` or ``markdown``): one per measurement, or, when every
    result holds the facts of a procedure that has flat rows of its own (``ProcedureView.rows``: a serve result's
    LoadGen runs), that procedure's rows, its first columns first."""
    if len(results) != len(names):
        raise InvalidInputError(f"{len(names)} names for {len(results)} results")
    view = rows_view(results)
    if view is not None and view.rows is not None:
        table = [row for result, name in zip(results, names, strict=True) for row in view.rows(result, name)]
        return export_table(table, fmt, columns_of(table, view.first_columns))
    return export_table(rows(results, names), fmt)


def export_table(table: Sequence[dict[str, Any]], fmt: str, columns: Sequence[str] | None = None) -> str:
    """Flat rows in ``fmt`` (``csv``, ``json`` or ``markdown``); ``columns`` None: :data:`COLUMNS`."""
    exporters: dict[str, Callable[[Sequence[dict[str, Any]]], str]] = {
        "csv": lambda t: to_csv(t, columns or COLUMNS), "json": to_json, "markdown": lambda t: to_markdown(t, columns),
    }
    if fmt not in exporters:
        raise InvalidInputError(f"unknown export format {fmt!r}", "choose from: " + ", ".join(exporters))
    return exporters[fmt](table)


# ----------------------------------------------------------------------------------------------------------
# Comparisons


#: The long-format rows of a comparison: one per matched row and run. ``input_size``, ``data`` and ``world_size`` are
#: part of the match (:func:`clsbench.analysis.compare.match_key`): ``input_size`` empty when the row ran at the
#: model's default and no compared file shows its size, ``data`` ``synthetic`` or the pipeline's label.
COMPARISON_COLUMNS: tuple[str, ...] = (
    "workload", "metric", "model", "mode", "backend", "batch_size", "input_size", "data", "world_size", "run",
    "run_label", "hardware", "device", "status", "reason", "value", "repeats", "cv_pct", "unstable",
    "speedup_vs_first", "slowdown_pct", "verdict", "test", "p_value", "t", "df", "alpha", "detectable_slowdown_pct",
    "threshold_pct", "repeats_needed",
)


def comparison_rows(comparison: Comparison) -> list[dict[str, Any]]:
    """One flat row per (matched row, run); the first run's ratio columns are empty (it is the baseline)."""
    out = []
    for table in comparison.tables:
        for row in table.rows:
            for i, (run, cell) in enumerate(zip(comparison.runs, row.cells, strict=True)):
                ratio = row.ratios[i - 1] if i else None
                test = ratio.test if ratio else None
                out.append({
                    "workload": row.workload, "metric": table.metric, "model": row.model, "mode": row.mode,
                    "backend": row.backend, "batch_size": row.batch_size, "input_size": row.input_size,
                    "data": row.data or SYNTHETIC, "world_size": row.world_size, "run": run.name,
                    "run_label": run.label, "hardware": run.hardware, "device": cell.device, "status": cell.status,
                    "reason": cell.reason,
                    "value": cell.value, "repeats": len(cell.values) if cell.values else None,
                    "cv_pct": cell.cv_pct, "unstable": cell.unstable if cell.status == Status.OK else None,
                    "speedup_vs_first": ratio.speedup if ratio else None,
                    "slowdown_pct": ratio.slowdown_pct if ratio else None,
                    "verdict": ratio.verdict if ratio else None,
                    "test": comparison.test if test and test.testable else None,
                    "p_value": test.p if test else None,
                    "t": test.t if test and test.t is not None and abs(test.t) != float("inf") else None,
                    "df": test.df if test else None,
                    "alpha": comparison.alpha if ratio else None,
                    "detectable_slowdown_pct": ratio.detectable_pct if ratio else None,
                    "threshold_pct": ratio.threshold_pct if ratio else None,
                    "repeats_needed": ratio.repeats_needed if ratio else None,
                })
    return out


def _fmt_figure(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    if metric.endswith("_ms"):
        return f"{value:.3f}" if value < 10 else f"{value:.2f}" if value < 100 else f"{value:.1f}"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}" if value >= 10 else f"{value:.2f}"


def _fmt_cell(metric: str, cell: CellValue) -> str:
    if cell.status == "missing":
        return "missing"
    if cell.status != Status.OK:
        label = "FAILED" if cell.status == Status.FAILED else cell.status
        return f"{label}: {cell.reason}" if cell.reason else label
    text = _fmt_figure(metric, cell.value)
    cv = cell.cv_pct
    if cv is not None:
        text += f" ±{cv:.2f}%" if cv < 1 else f" ±{cv:.1f}%"
    return text + ("*" if cell.unstable else "")


def _fmt_ratio(ratio: Ratio | None) -> str:
    if ratio is None or ratio.speedup is None:
        return "-"
    return format_ratio(ratio.speedup)


def _fmt_verdict(ratio: Ratio | None) -> str:
    if ratio is None or ratio.verdict == VERDICT_NA:
        return "-"
    if ratio.verdict == VERDICT_NOT_TESTABLE:
        test = ratio.test
        fewest = min(test.n_a, test.n_b) if test else 0
        return f"not testable ({fewest} repeat{'s' if fewest != 1 else ''})"
    p = format_p(ratio.test.p) if ratio.test and ratio.test.p is not None else "p=n/a"
    detectable = ratio.detectable_pct
    detects = "none" if detectable == float("inf") else detectable_text(detectable)
    if ratio.verdict == VERDICT_NO_CHANGE and ratio.threshold_pct is None:
        return f"no change > {detects} ({p})"  # judged against what the repeats could detect
    if ratio.verdict == VERDICT_NO_CHANGE:
        return f"no change > {ratio.threshold_pct:g}% (detects {detects}, {p})"
    if ratio.verdict == VERDICT_INCONCLUSIVE:
        return f"inconclusive (detects {detects}, {p})"
    return f"{ratio.verdict} ({p})"


def _fmt_cross_ratio(ratio: Ratio | None) -> str:
    if ratio is None or ratio.speedup is None:
        return "-"
    mark = "" if ratio.verdict in (VERDICT_FASTER, VERDICT_SLOWER) else f" ({ratio.verdict})"
    return f"{format_ratio(ratio.speedup)}{mark}"


def _fmt_memory(figures: CrossRunFigures) -> str:
    if figures.peak_memory_bytes is None:
        return "-"
    suffix = " rss" if figures.peak_memory_kind == "host_rss" else ""
    return f"{figures.peak_memory_bytes / MIB:,.0f} MiB{suffix}"


def _fmt_env_value(value: Any) -> str:
    return "n/a" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


_METRIC_TITLES = {
    "throughput_img_s": "img/s, median over repeats (higher is better)",
    "latency_p50_ms": "p50 latency in ms, median over repeats (lower is better)",
}
_METRIC_UNITS = {"throughput_img_s": "img/s", "latency_p50_ms": "p50 ms"}


#: The match columns of the text tables that are numbers (right-aligned).
_RIGHT_MATCH_COLUMNS = frozenset({"input size", "world size"})


def match_columns(comparison: Comparison) -> list[str]:
    """The columns of the text tables that tell matched rows apart beyond model, mode and batch, as ``clsbench show``
    adds a backend: ``backend`` when a row is not eager, ``input size`` when rows differ in it or one is not at its
    model's default, ``data`` when a row has real data, ``world size`` when a row ran on more than one device."""
    rows = comparison.rows()
    shown = {
        "backend": any(row.backend != DEFAULT_BACKEND for row in rows),
        "input size": len({row.input_size for row in rows}) > 1
        or any(row.input_size is not None and not row.input_size_is_default for row in rows),
        "data": any(row.data is not None for row in rows),
        "world size": any(row.world_size != 1 for row in rows),
    }
    return [name for name, show in shown.items() if show]


def _match_values(row: Row, columns: Sequence[str]) -> list[str]:
    values = {"backend": row.backend, "input size": fact_text(0, row.input_size), "data": fact_text(1, row.data),
              "world size": fact_text(2, row.world_size)}
    return [values[c] for c in columns]


def _table_sections(comparison: Comparison) -> list[tuple[str, list[str], list[list[str]], list[bool]]]:
    """(title, header, body, right-aligned) of every workload table and of the cross-GPU view."""
    runs = comparison.runs
    first = runs[0].label
    sections = []
    extra = match_columns(comparison)
    for table in comparison.tables:
        unit = _METRIC_UNITS.get(table.metric, table.metric)
        header = ["model", "mode", *extra, "batch"]
        header += [f"{r.label} {unit}" for r in runs]
        right = [False, False, *(c in _RIGHT_MATCH_COLUMNS for c in extra), True] + [True] * len(runs)
        for r in runs[1:]:
            header += [f"{r.label}/{first}", f"{r.label} vs {first}"]
            right += [True, False]
        body = []
        for row in table.rows:
            line = [row.model, row.mode, *_match_values(row, extra), str(row.batch_size)]
            line += [_fmt_cell(table.metric, c) for c in row.cells]
            for ratio in row.ratios:
                line += [_fmt_ratio(ratio), _fmt_verdict(ratio)]
            body.append(line)
        title = f"{table.workload}: {_METRIC_TITLES.get(table.metric, table.metric)}"
        sections.append((title, header, body, right))
    if comparison.cross:
        sections.append(_cross_section(comparison, "input size" in extra))
    return sections


def _cross_section(comparison: Comparison, with_size: bool) -> tuple[str, list[str], list[list[str]], list[bool]]:
    """The cross-GPU view's (title, header, body, right-aligned); ``with_size`` adds the input size after the mode."""
    runs = comparison.runs
    first = runs[0].label
    header = ["model", "mode", *(["input size"] if with_size else []), "train bs"]
    right = [False, False, *([True] if with_size else []), True]
    for r in runs:
        header += [f"{r.label} train img/s", f"{r.label} p50 ms bs1", f"{r.label} peak mem", f"{r.label} avg W"]
        right += [True, True, True, True]
    second = runs[1].label
    header += [f"{second}/{first} train", f"{second}/{first} p50"]
    right += [True, True]
    body = []
    for cross in comparison.cross:
        batch = next((f.train_batch_size for f in cross.runs if f.train_batch_size), None)
        line = [cross.model, cross.mode, *([fact_text(0, cross.input_size)] if with_size else []),
                str(batch) if batch else "-"]
        for f in cross.runs:
            line += [_fmt_figure("throughput_img_s", f.train_img_s),
                     _fmt_figure("latency_p50_ms", f.latency_p50_ms), _fmt_memory(f),
                     "-" if f.power_avg_w is None else f"{f.power_avg_w:.0f}"]
        line += [_fmt_cross_ratio(cross.train_ratio), _fmt_cross_ratio(cross.latency_ratio)]
        body.append(line)
    return ("cross-GPU view: training img/s, p50 latency at batch 1, peak memory and average power "
            "(of the training measurement)", header, body, right)


def _legend_lines(comparison: Comparison) -> list[str]:
    first = comparison.runs[0].label
    return [
        f"ratios: speed-up against {first}, > 1 means faster than {first}; for latency the ratio is inverted "
        f"({first}'s latency / the other's), so > 1 still means faster.",
        f"verdicts: {comparison.test} on the per-repeat figures at alpha = {comparison.alpha:g}. Not significant: "
        f"\"no change > X%\" when these repeats would detect a slowdown of X% {_power_words()}, X being "
        + ("the --fail-if-slower threshold" if comparison.threshold_pct is not None else
           "the smallest slowdown they would detect")
        + ", and the medians moved less; \"inconclusive\" when the noise hides a change that large or the medians "
        "moved more. \"detects\": that smallest detectable slowdown (\"none\": the noise is larger than the figure). "
        "The cross-GPU view marks its ratios likewise.",
        "± is the standard deviation over repeats relative to the mean; * marks an UNSTABLE figure (spread over "
        "repeats above 10%).",
    ]


def _power_words() -> str:
    return f"4 times in 5 ({DEFAULT_POWER:.0%} {POWER_METHOD})"


def _run_line(run: RunInfo) -> str:
    devices = ", ".join(run.devices) or "-"
    return f"{run.label} = {run.name}: {run.hardware} ({devices}), torch {run.torch or 'n/a'}, " \
           f"{run.created_utc or 'no date'}"


def _env_section(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    header = ["key fact"] + [r.label for r in comparison.runs]
    body = [[d.field] + [_fmt_env_value(v) for v in d.values] for d in comparison.env_differences]
    return header, body


def _aligned(header: Sequence[str], body: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    return text_table(header, body, right={i for i, flag in enumerate(right) if flag})


def comparison_text(comparison: Comparison) -> str:
    """The plain-text comparison ``clsbench compare`` prints: runs, environment differences, warnings, one
    table per workload, the cross-GPU view and a legend saying what the ratios and verdicts mean."""
    lines = [f"clsbench compare: {len(comparison.runs)} runs, {comparison.test}, alpha = {comparison.alpha:g}"]
    lines += ["  " + _run_line(r) for r in comparison.runs]
    lines.append("")
    if comparison.env_differences:
        lines.append("environment differences (key facts):")
        header, body = _env_section(comparison)
        lines += ["  " + line for line in _aligned(header, body, [False] * len(header))]
    else:
        lines.append("environment: the key facts are the same in every run")
    for warning in comparison.warnings:
        lines.append(f"warning: {warning}")
    for title, header, body, right in _table_sections(comparison):
        lines += ["", title, ""]
        lines += _aligned(header, body, right)
    lines.append("")
    lines += _legend_lines(comparison)
    return "\n".join(lines) + "\n"


def comparison_markdown(comparison: Comparison) -> str:
    """The comparison as Markdown: the same sections as :func:`comparison_text`, tables as pipe tables."""
    parts = [f"## clsbench compare\n\n{comparison.test}, alpha = {comparison.alpha:g}\n"]
    parts.append("\n".join(f"- {_md_cell(_run_line(r))}" for r in comparison.runs) + "\n")
    if comparison.env_differences:
        header, body = _env_section(comparison)
        parts.append("### Environment differences\n\n" + markdown_table(header, body))
    else:
        parts.append("Environment: the key facts are the same in every run.\n")
    if comparison.warnings:
        parts.append("\n".join(f"> **warning:** {_md_cell(w)}" for w in comparison.warnings) + "\n")
    for title, header, body, right in _table_sections(comparison):
        parts.append(f"### {_md_cell(title)}\n\n" + markdown_table(header, body, right))
    parts.append("\n".join(_md_cell(line) for line in _legend_lines(comparison)).replace("\n", "\n\n") + "\n")
    return "\n".join(parts)


def comparison_json(comparison: Comparison) -> str:
    return json.dumps(jsonable(comparison.to_dict()), indent=1, allow_nan=False) + "\n"


def export_comparison(comparison: Comparison, fmt: str) -> str:
    """The comparison in ``fmt``: ``table`` (text), ``json`` (the whole comparison), ``csv`` (long rows,
    :data:`COMPARISON_COLUMNS`) or ``markdown``."""
    if fmt == "table":
        return comparison_text(comparison)
    if fmt == "json":
        return comparison_json(comparison)
    if fmt == "csv":
        return to_csv(comparison_rows(comparison), COMPARISON_COLUMNS)
    if fmt == "markdown":
        return comparison_markdown(comparison)
    raise InvalidInputError(f"unknown format {fmt!r}", "choose from: " + ", ".join(FORMATS))


def export_own_comparison(text: str, data: dict[str, Any], table: Sequence[dict[str, Any]], fmt: str) -> str:
    """A comparison a procedure made its own way (:class:`clsbench.report.views.ProcedureComparison`'s fields) in
    ``fmt``: ``table`` its text, ``json`` its data, ``csv`` and ``markdown`` its flat rows."""
    if fmt == "table":
        return text
    if fmt == "json":
        return json.dumps(jsonable(data), indent=1, allow_nan=False) + "\n"
    if fmt in ("csv", "markdown"):
        return export_table(table, fmt, columns_of(table))
    raise InvalidInputError(f"unknown format {fmt!r}", "choose from: " + ", ".join(FORMATS))


# ----------------------------------------------------------------------------------------------------------
# Writing


def check_output(path: str | Path, *, force: bool = False) -> Path:
    """Fail before any work when ``path`` is a directory, exists (unless ``force``: never silently) or cannot be
    written (its directory is made if missing). Every command that writes a file (``run``, ``show``, ``compare``,
    ``report``) checks it this way (:func:`clsbench.results.io.check_writable`)."""
    target = Path(path)
    if target.is_dir():
        raise ResultFileError(f"{target} is a directory", "give a file name, e.g. -o out.csv")
    check_writable(target, overwrite=force, exists_hint="choose another --output, or pass --force to replace it")
    return target


def write_text(path: str | Path, text: str, *, force: bool = False) -> None:
    """Write ``text`` to ``path`` atomically (temporary file, then rename); an existing file only with ``force``."""
    write_text_atomic(check_output(path, force=force), text)
