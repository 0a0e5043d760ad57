"""Triton's inference statistics as plain integers: one model's totals, and the difference over one LoadGen run.

Triton answers with its statistics in JSON, where gRPC gives 64-bit integers as strings; these read them into ints.
:meth:`clsbench.serving.triton_target.TritonTarget.end_run` maps the run's delta onto the record ``show`` reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Triton's statistics sections that hold a ``{count, ns}`` pair per request.
DURATION_SECTIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
#: Triton's per-batch-size sections (``batch_stats``): ``count`` is the number of executions of that size.
BATCH_SECTIONS = ("compute_input", "compute_infer", "compute_output")


def as_int(value: Any, default: int = 0) -> int:
    """``int(value)``, or ``default`` for a value that is not a number (absent, None, text)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _pair(section: Mapping[str, Any] | None) -> dict[str, int]:
    section = section or {}
    return {"count": as_int(section.get("count")), "ns": as_int(section.get("ns"))}


def model_statistics(raw: Mapping[str, Any], model: str) -> dict[str, Any]:
    """One model's statistics from Triton's answer (every version of it added up), with integers.

    Returns:
        ``inference_count`` (requests inferred), ``execution_count`` (batches executed), one ``{count, ns}`` per
        :data:`DURATION_SECTIONS` (per request: each request of a batch counts the whole batch's time), and
        ``batch_stats``: ``{size: {section: {count, ns}}}`` per :data:`BATCH_SECTIONS` (count: executions).
    """
    out: dict[str, Any] = {"inference_count": 0, "execution_count": 0,
                           **{s: {"count": 0, "ns": 0} for s in DURATION_SECTIONS}, "batch_stats": {}}
    for entry in raw.get("model_stats") or []:
        if entry.get("name") != model:
            continue
        out["inference_count"] += as_int(entry.get("inference_count"))
        out["execution_count"] += as_int(entry.get("execution_count"))
        stats = entry.get("inference_stats") or {}
        for section in DURATION_SECTIONS:
            pair = _pair(stats.get(section))
            out[section] = {k: out[section][k] + pair[k] for k in pair}
        for batch in entry.get("batch_stats") or []:
            size = str(as_int(batch.get("batch_size")))
            mine = out["batch_stats"].setdefault(size, {s: {"count": 0, "ns": 0} for s in BATCH_SECTIONS})
            for section in BATCH_SECTIONS:
                pair = _pair(batch.get(section))
                mine[section] = {k: mine[section][k] + pair[k] for k in pair}
    return out


def statistics_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """``after - before`` of two :func:`model_statistics` (batch sizes that did not run in between are left out)."""
    delta: dict[str, Any] = {
        "inference_count": after["inference_count"] - before["inference_count"],
        "execution_count": after["execution_count"] - before["execution_count"],
        **{s: {k: after[s][k] - before[s][k] for k in ("count", "ns")} for s in DURATION_SECTIONS},
        "batch_stats": {}}
    zero = {s: {"count": 0, "ns": 0} for s in BATCH_SECTIONS}
    for size in sorted(after["batch_stats"], key=int):
        now, then = after["batch_stats"][size], before["batch_stats"].get(size, zero)
        change = {s: {k: now[s][k] - then[s][k] for k in ("count", "ns")} for s in BATCH_SECTIONS}
        if change["compute_infer"]["count"]:
            delta["batch_stats"][size] = change
    return delta
