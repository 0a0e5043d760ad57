"""A tune candidate's figures, the limits it breaks, how candidates rank, and a backend's own parity verdict (pure).

The search (:mod:`clsbench.procedures.tune.search`), the kinds and the analysis
(:mod:`clsbench.procedures.tune.analysis`) judge every measurement by these functions, so that a candidate ranks the
same while the search runs and when the file is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clsbench.analysis import stats
from clsbench.core.vocab import Reason, Status
from clsbench.results.schema import DEFAULT_BACKEND, Measurement, data_label

#: Bytes in the GB of ``max_memory_gb`` (10^9, as the option's help says).
GB = 1e9


def number(value: Any) -> float | None:
    """A stored number (NaN and infinities are stored as strings) as a float, or None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def candidate_figures(m: Measurement, workload: str) -> dict[str, Any]:
    """The figures a candidate is ranked and limited by (pure)."""
    s = m.summary
    latency = s.get("latency_ms") or {}
    p50, p99 = number(latency.get("p50")), number(latency.get("p99"))
    throughput = number(s.get("throughput_img_s"))
    memory = s.get("peak_memory_reserved_bytes")
    memory_kind = "peak reserved"
    if memory is None:
        memory, memory_kind = s.get("host_peak_rss_bytes"), "worker peak RSS"
    # Per batch, the tail: the p99 where enough batches were timed for one, else the slowest batch (never lower).
    tail, tail_name = stats.tail_latency(latency)
    limited_latency = p50 if workload == "infer-latency" else tail
    if m.status != Status.OK:
        score = None
    elif workload == "infer-latency":
        score = 1000.0 / p50 if p50 else None
    else:
        score = throughput
    return {
        "mode": m.mode,
        "backend": m.backend,
        "batch_size": m.batch_size,
        "data": data_label(m.data),
        "status": m.status,
        "reason": m.reason,
        "detail": m.detail,
        "throughput_img_s": throughput,
        "latency_p50_ms": p50,
        "latency_p99_ms": p99,
        "limited_latency_ms": limited_latency,
        "limited_latency_name": "p50 request latency" if workload == "infer-latency" else f"{tail_name} latency per "
                                                                                          "batch",
        "memory_bytes": memory,
        "memory_kind": memory_kind,
        "spread_pct": s.get("spread_pct"),
        "unstable": bool(s.get("unstable")),
        "score": score,
    }


def limit_violations(figures: dict[str, Any], limits: Mapping[str, float | None]) -> list[str]:
    """The limits a candidate breaks, in words (empty: within every limit)."""
    out = []
    max_latency, max_memory = limits.get("max_latency_ms"), limits.get("max_memory_gb")
    latency, memory = figures.get("limited_latency_ms"), figures.get("memory_bytes")
    if max_latency is not None and latency is not None and latency > max_latency:
        out.append(f"{figures['limited_latency_name']} {latency:.3g} ms > {max_latency:g} ms")
    if max_memory is not None and memory is not None and memory > max_memory * GB:
        out.append(f"{figures['memory_kind']} {memory / GB:.3g} GB > {max_memory:g} GB")
    return out


def overshoot(figures: dict[str, Any], limits: Mapping[str, float | None]) -> float:
    """How far a candidate is from the limits: the largest ratio of a figure to its limit (<= 1: within)."""
    ratios = [1.0]
    if limits.get("max_latency_ms") is not None and figures.get("limited_latency_ms") is not None:
        ratios.append(figures["limited_latency_ms"] / limits["max_latency_ms"])
    if limits.get("max_memory_gb") is not None and figures.get("memory_bytes") is not None:
        ratios.append(figures["memory_bytes"] / (limits["max_memory_gb"] * GB))
    return max(ratios)


def rank_key(figures: dict[str, Any]) -> tuple[Any, ...]:
    """Candidates without a score (failed, skipped) last; the others by the highest rung they reached (a confirmed
    figure before a longer one before a screened one: a candidate reached a higher rung by beating those left
    below), then by score; ties by mode, batch, then eager first."""
    backend = figures.get("backend") or DEFAULT_BACKEND
    return (figures["score"] is None, -figures.get("rung_level", -1), -(figures["score"] or 0.0), figures["mode"],
            figures["batch_size"], backend != DEFAULT_BACKEND, backend)


def candidate_key(figures: dict[str, Any]) -> tuple[str, int, str]:
    """(mode, batch size, backend): what tells two candidates apart."""
    return (figures["mode"], figures["batch_size"], figures.get("backend") or DEFAULT_BACKEND)


def parity_verdict(m: Measurement) -> dict[str, Any] | None:
    """A backend measurement's own parity check against fp32 eager as a guard verdict (pure); None when eager or
    when the measurement has no check (it did not run)."""
    parity = (m.summary.get("backend") or {}).get("parity") if m.backend != DEFAULT_BACKEND else None
    if not isinstance(parity, dict):
        return None
    passed = parity.get("passed") is True
    return {"metric": "logits", "error": number(parity.get("max_abs_err_rel")), "tolerance": parity.get("tolerance"),
            "error_last": None, "tolerance_last": None, "ok": passed,
            "reason": None if passed else str(parity.get("detail") or Reason.PARITY_FAILED),
            "top1_agreement_pct": number(parity.get("top1_agreement_pct")), "source": "backend parity check"}


__all__ = ["GB", "candidate_figures", "candidate_key", "limit_violations", "number", "overshoot", "parity_verdict",
           "rank_key"]
