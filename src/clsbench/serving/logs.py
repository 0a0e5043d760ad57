"""Reading LoadGen's logs: every figure of a LoadGen run in the result file comes from here.

``mlperf_log_detail.txt`` holds one ``:::MLLOG {json}`` record per line (``key``, ``value``); it is the primary
source: validity and each constraint (``result_validity``, ``result_min_duration_met``, ...), the reason of an
INVALID run (``result_invalid_reason``), scheduled and completed samples per second, the latency percentiles, and
LoadGen's errors and warnings (keys ``error_*`` / ``warning_*``). ``mlperf_log_summary.txt`` is the human summary;
from it come the "Result is : VALID/INVALID" line and the recommendation lines under it, and any figure the detail
log lacks. Latencies stay in LoadGen's integer nanoseconds; LoadGen's percentile is the nearest rank below
(``sorted[floor(n * p)]``), which is the method of every percentile of a serve result.

Pure: no torch, no LoadGen; tested on log text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from clsbench.errors import ResultFileError

DETAIL_LOG = "mlperf_log_detail.txt"
SUMMARY_LOG = "mlperf_log_summary.txt"
#: Files LoadGen writes that a performance run leaves empty or trivial (trace off, accuracy log off).
DISPOSABLE_LOGS = ("mlperf_log_trace.json", "mlperf_log_accuracy.json")

_MLLOG = ":::MLLOG "
_PERCENTILE = re.compile(r"^result_(\d+(?:\.\d+)?)_percentile_(per_query_)?latency_ns$")
_SUMMARY_PERCENTILE = re.compile(r"^(\d+(?:\.\d+)?) percentile latency \(ns\)\s*:\s*(\d+)")
_SUMMARY_VALUE = re.compile(r"^([A-Za-z][A-Za-z0-9 ./()%-]*?)\s*:\s*(.*)$")

#: Detail-log keys kept as they are, under the name they get in the result.
_DETAIL_KEYS = {
    "result_validity": "validity",
    "result_perf_constraints_met": "perf_constraints_met",
    "result_min_duration_met": "min_duration_met",
    "result_min_queries_met": "min_queries_met",
    "early_stopping_met": "early_stopping_met",
    "result_invalid_reason": "invalid_reason",
    "early_stopping_result": "early_stopping_result",
    "result_query_count": "query_count",
    "result_overlatency_query_count": "overlatency_query_count",
    "result_scheduled_samples_per_sec": "scheduled_qps",
    "result_completed_samples_per_sec": "completed_qps",
    "result_samples_per_second": "samples_per_second",
    "result_qps_with_loadgen_overhead": "qps_with_loadgen_overhead",
    "result_qps_without_loadgen_overhead": "qps_without_loadgen_overhead",
    "early_stopping_latency_ss": "early_stopping_latency_ns",
    "early_stopping_latency_ms": "early_stopping_p99_latency_ns",
    "generated_query_count": "generated_query_count",
    "generated_samples_per_query": "generated_samples_per_query",
    "generated_query_duration": "generated_query_duration_ns",
    "loadgen_version": "loadgen_version",
    "num_errors": "num_errors",
}

#: Summary-log lines and the detail-log name of their figure (a fallback when the detail log lacks it).
_SUMMARY_KEYS = {
    "Samples per second": "samples_per_second",
    "Completed samples per second": "completed_qps",
    "Scheduled samples per second": "scheduled_qps",
    "QPS w/ loadgen overhead": "qps_with_loadgen_overhead",
    "QPS w/o loadgen overhead": "qps_without_loadgen_overhead",
}


def percentile_name(text: str) -> str:
    """LoadGen's ``"99.90"`` as the result's ``"p99.9"`` (``"50.00"`` -> ``"p50"``)."""
    value = float(text)
    return f"p{value:g}"


def parse_detail(text: str) -> dict[str, Any]:
    """The facts of a ``mlperf_log_detail.txt``; lines that are not MLLOG records are ignored."""
    out: dict[str, Any] = {"latency_ns": {}, "errors": [], "warnings": [], "effective": {}}
    for line in text.splitlines():
        if not line.startswith(_MLLOG):
            continue
        try:
            record = json.loads(line[len(_MLLOG):])
        except json.JSONDecodeError:
            continue
        key, value = record.get("key"), record.get("value")
        if not isinstance(key, str):
            continue
        meta = record.get("metadata") or {}
        if key in _DETAIL_KEYS:
            out[_DETAIL_KEYS[key]] = value.strip() if isinstance(value, str) else value
        elif key.startswith("effective_"):
            out["effective"][key[len("effective_"):]] = value
        elif (match := _PERCENTILE.match(key)) is not None:
            table = "query_latency_ns" if match.group(2) else "latency_ns"
            out.setdefault(table, {})[percentile_name(match.group(1))] = value
        elif key in ("result_min_latency_ns", "result_max_latency_ns", "result_mean_latency_ns"):
            out["latency_ns"][key[len("result_"):-len("_latency_ns")]] = value
        elif key.startswith("error") or meta.get("is_error"):
            out["errors"].append(f"{key}: {value}")
        elif key.startswith("warning") or meta.get("is_warning"):
            out["warnings"].append(f"{key}: {value}")
    return out


def parse_summary(text: str) -> dict[str, Any]:
    """The facts of a ``mlperf_log_summary.txt``: the verdict line, the reason lines under it, the figures."""
    out: dict[str, Any] = {"latency_ns": {}, "reasons": []}
    in_recommendations = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Result is"):
            out["validity"] = line.split(":", 1)[1].strip()
            continue
        if line == "Recommendations:":
            in_recommendations = True
            continue
        if in_recommendations:
            if line.startswith("*"):
                out["reasons"].append(line.lstrip("* ").strip())
                continue
            if raw.startswith("   ") and out["reasons"]:  # a reason continued on the next line
                out["reasons"][-1] += " " + line
                continue
            in_recommendations = False
        if (match := _SUMMARY_PERCENTILE.match(line)) is not None:
            out["latency_ns"][percentile_name(match.group(1))] = int(match.group(2))
            continue
        if (match := _SUMMARY_VALUE.match(line)) is not None:
            name, value = match.group(1).strip(), match.group(2).strip()
            if name in _SUMMARY_KEYS:
                out[_SUMMARY_KEYS[name]] = _number(value)
            elif name == "Scenario":
                out["scenario"] = value
            elif name in ("Min latency (ns)", "Max latency (ns)", "Mean latency (ns)"):
                out["latency_ns"][name.split()[0].lower()] = _number(value)
    return out


def parse_logs(log_dir: str | Path) -> dict[str, Any]:
    """One LoadGen run's facts from the two logs in ``log_dir``: the detail log's, completed by the summary's.

    Raises:
        ResultFileError: neither log is there (LoadGen did not finish, or the folder is not a LoadGen log folder).
    """
    log_dir = Path(log_dir)
    detail_path, summary_path = log_dir / DETAIL_LOG, log_dir / SUMMARY_LOG
    if not detail_path.exists() and not summary_path.exists():
        raise ResultFileError(f"{log_dir} holds no LoadGen log ({DETAIL_LOG}, {SUMMARY_LOG})",
                              "the LoadGen run did not finish")
    detail = parse_detail(detail_path.read_text(encoding="utf-8", errors="replace")) if detail_path.exists() else {}
    summary = parse_summary(summary_path.read_text(encoding="utf-8", errors="replace")) \
        if summary_path.exists() else {}
    facts = dict(detail) if detail else {"latency_ns": {}, "errors": [], "warnings": [], "effective": {}}
    for key, value in summary.items():
        if key == "latency_ns":
            for name, ns in value.items():
                facts["latency_ns"].setdefault(name, ns)
        elif key not in facts or facts[key] in (None, ""):
            facts[key] = value
    facts.setdefault("reasons", [])
    return facts


def _number(text: str) -> float | int | str:
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and "." not in text else value
