"""Reading one stored LoadGen run (a *step record*): validity and its reason, latencies, the time split. Pure.

A step record is a plain dict, one per LoadGen run, stored as a repeat of the scenario's measurement::

    {"index": 3, "mode": "bf16+cl", "scenario": "server", "role": "bisect",
     "setting": {"max_batch": 64, "max_delay_ms": 2.0, "instances": 2, "buckets": [...], "cuda_graphs": false},
     "params": {... the LoadGen test settings ...},
     "loadgen": {... parsed from LoadGen's logs, see clsbench.serving.logs ...},
     "server": {... the server's counters, see clsbench.serving.counters ...},
     "error": null, "log_dir": "serve.loadgen/003-bf16_cl-server-b64-d2-i2-q7000", "wall_s": 12.4}

Nothing here is stored: validity, percentiles in ms and the time split are derived from those raw facts.
"""

from __future__ import annotations

import re
from typing import Any

from clsbench.measure.clock import NS_PER_MS
from clsbench.serving.counters import STAGES

#: The time split of a request, in order: the queue, then the stages of its batch.
SPLIT = ("queue", *STAGES)


def is_valid(step: dict[str, Any]) -> bool:
    """VALID: LoadGen said so and the server did not fail during the run."""
    return not step.get("error") and (step.get("loadgen") or {}).get("validity") == "VALID"


def reason(step: dict[str, Any]) -> str:
    """Why a run is INVALID, in one line: the server's failure, else LoadGen's reasons; "" for a VALID run."""
    if step.get("error"):
        return str(step["error"])
    loadgen = step.get("loadgen") or {}
    if loadgen.get("validity") == "VALID":
        return ""
    reasons = [r for r in loadgen.get("reasons") or [] if r]
    if not reasons and loadgen.get("invalid_reason"):
        reasons = [str(loadgen["invalid_reason"])]
    failed = [name for key, name in (("perf_constraints_met", "latency bound"), ("min_duration_met", "min duration"),
                                     ("min_queries_met", "min queries"), ("early_stopping_met", "early stopping"))
              if loadgen.get(key) is False]
    errors = [e for e in loadgen.get("errors") or [] if "Ending early" in e]
    text = "; ".join(reasons + [e.split(": ", 1)[-1] for e in errors])
    if failed:
        text = "not met: " + ", ".join(failed) + (f" ({text})" if text else "")
    return text or f"LoadGen says {loadgen.get('validity') or 'nothing (no log)'}"


_MORE_QUERIES = re.compile(r"Would need to run at least (\d+) more queries")
_TOTAL_QUERIES = re.compile(r"Need to process at least (\d+) queries")


def early_stopping_shortfall(step: dict[str, Any]) -> int | None:
    """How many queries a run lacked for LoadGen's early-stopping rule, when that is all that made it INVALID.

    LoadGen's rule (``loadgen/early_stopping.cc``) needs enough queries to bound the percentile at 99% confidence
    (about 460 for p99 with none over the bound); a short run misses it even when its latency is fine. LoadGen says
    how many more it needs in ``early_stopping_result``; None when the run failed for any other reason.
    """
    loadgen = step.get("loadgen") or {}
    if step.get("error") or loadgen.get("validity") == "VALID" or loadgen.get("early_stopping_met") is not False:
        return None
    if any(loadgen.get(key) is False for key in ("perf_constraints_met", "min_duration_met", "min_queries_met")):
        return None
    text = str(loadgen.get("early_stopping_result") or "")
    count = loadgen.get("query_count") or 0
    if (match := _MORE_QUERIES.search(text)) is not None:
        return int(match.group(1))
    if (match := _TOTAL_QUERIES.search(text)) is not None:
        return max(1, int(match.group(1)) - int(count))
    return None


def latency_ms(step: dict[str, Any], name: str) -> float | None:
    """A latency figure of the run in ms (``p50``, ``p90``, ``p99``, ``p99.9``, ``mean``, ``max``), from LoadGen."""
    value = ((step.get("loadgen") or {}).get("latency_ns") or {}).get(name)
    return None if not isinstance(value, (int, float)) else value / NS_PER_MS


def query_latency_ms(step: dict[str, Any], name: str) -> float | None:
    """A per-query latency figure in ms (MultiStream's result); falls back to per-sample latency."""
    value = ((step.get("loadgen") or {}).get("query_latency_ns") or {}).get(name)
    return latency_ms(step, name) if not isinstance(value, (int, float)) else value / NS_PER_MS


def loadgen_figure(step: dict[str, Any], key: str) -> float | None:
    value = (step.get("loadgen") or {}).get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def target_qps(step: dict[str, Any]) -> float | None:
    value = (step.get("params") or {}).get("target_qps")
    return float(value) if isinstance(value, (int, float)) else None


def setting_label(setting: dict[str, Any]) -> str:
    graphs = " graphs" if setting.get("cuda_graphs") else ""
    return f"b{setting.get('max_batch')} d{float(setting.get('max_delay_ms', 0)):g}ms i{setting.get('instances')}" \
           + graphs


def setting_key(setting: dict[str, Any]) -> tuple[Any, ...]:
    return (setting.get("max_batch"), float(setting.get("max_delay_ms", 0)), setting.get("instances"),
            bool(setting.get("cuda_graphs")))


def time_split_ms(step: dict[str, Any]) -> dict[str, float] | None:
    """Mean time a request spent in each part of :data:`SPLIT`, in ms, from the server's counters; None if none."""
    server = step.get("server") or {}
    requests = server.get("requests") or 0
    if requests <= 0:
        return None
    split = {"queue": server.get("queue_ns", 0) / requests / NS_PER_MS}
    weighted = server.get("stage_ns_request") or {}
    for stage in STAGES:
        split[stage] = float(weighted.get(stage, 0.0)) / requests / NS_PER_MS
    return split


def batch_stats(step: dict[str, Any]) -> dict[str, Any] | None:
    """Mean batch size, batches, padding share, the share of requests gathered ahead and per-batch stage means (ms)
    from the counters; None if none."""
    server = step.get("server") or {}
    batches = server.get("batches") or 0
    if batches <= 0:
        return None
    requests = server.get("requests") or 0
    padded = server.get("padded_samples") or 0
    per_batch = {stage: float((server.get("stage_ns") or {}).get(stage, 0.0)) / batches / NS_PER_MS
                 for stage in STAGES}
    wall = server.get("wall_ns") or 0
    busy = server.get("busy_ns") or []
    return {
        "batches": batches,
        "mean_batch": requests / batches,
        "padding_pct": 100.0 * padded / (requests + padded) if requests + padded else 0.0,
        "ahead_pct": 100.0 * (server.get("gathered_ahead") or 0) / requests if requests else 0.0,
        "per_batch_ms": per_batch,
        "histogram": {int(k): int(v) for k, v in (server.get("batch_sizes") or {}).items()},
        "busy_pct": [100.0 * b / wall for b in busy] if wall else [],
    }
