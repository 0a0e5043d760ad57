"""From repeat records to a measurement: status, summary and validity. Pure; reads only the records.

Definitions (docs/methodology.md has the long form):

* throughput of a repeat = images in the timed region / wall seconds of the timed region; the measurement's
  ``throughput_img_s`` is the median over its repeats;
* ``latency_ms``: per request wall time (infer-latency) or per iteration time (infer-throughput, train); each
  statistic is the median over repeats of that statistic within each repeat; ``n`` is the total sample count;
* ``spread_pct`` = (max - min) / median over repeats of the *stability metric*: p50 request latency for
  infer-latency, throughput otherwise; above :data:`clsbench.stats.UNSTABLE_SPREAD_PCT` the figure is UNSTABLE.
"""

from __future__ import annotations

from typing import Any

from . import stats
from .results.schema import Measurement
from .settings import Cell, StopRule

UNSTABLE_ADVICE = (
    "results moved by more than {limit:.0f}% between fresh processes: stop other work on this GPU/CPU, check clocks "
    "and temperature (`clsbench env`), and raise --min-time or --repeats"
)


def _throughput(record: dict[str, Any]) -> float | None:
    samples = record["samples"]
    wall_s = samples.get("wall_s") or 0.0
    return samples["images"] / wall_s if wall_s > 0 else None


def _latency_samples(workload: str, record: dict[str, Any]) -> list[float]:
    samples = record["samples"]
    return samples["wall_ms"] if workload == "infer-latency" else samples["iteration_ms"]


def _median_of(records: list[dict[str, Any]], section: str, key: str) -> float | None:
    values = [r.get(section, {}).get(key) for r in records]
    values = [v for v in values if v is not None]
    return stats.median(values) if values else None


def _max_of(records: list[dict[str, Any]], section: str, key: str) -> int | None:
    values = [r.get(section, {}).get(key) for r in records]
    values = [v for v in values if v is not None]
    return max(values) if values else None


def stop_rule_text(rule: StopRule | dict[str, Any]) -> str:
    r = rule if isinstance(rule, dict) else rule.to_dict()
    text = f"warm-up >= {r['warmup']} it"
    if r.get("warmup_seconds"):
        text += f" and >= {r['warmup_seconds']:g} s"
    text += f"; timed >= {r['min_iterations']} it and >= {r['min_seconds']:g} s"
    if r.get("max_iterations") is not None:
        text += f"; max {r['max_iterations']} it"
    if r.get("max_seconds") is not None:
        text += f"; max {r['max_seconds']:g} s"
    return text


def summarize(records: list[dict[str, Any]], workload: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Summary and validity of the ``ok`` records of one measurement (empty summary when none is ok)."""
    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        return {}, {"valid": False, "repeats_ok": 0, "repeats_run": len(records)}
    throughputs = [t for t in (_throughput(r) for r in ok) if t is not None]
    latency = stats.combine_repeats([stats.describe(_latency_samples(workload, r)) for r in ok])
    summary: dict[str, Any] = {
        "throughput_img_s": stats.median(throughputs) if throughputs else None,
        "throughput_img_s_by_repeat": throughputs,
        "latency_ms": latency,
        "latency_kind": "request_wall" if workload == "infer-latency" else "iteration",
    }
    gpu = [r["samples"].get("gpu_ms") for r in ok]
    if workload == "infer-latency" and all(gpu):
        summary["gpu_latency_ms"] = stats.combine_repeats([stats.describe(g) for g in gpu])
    for key in ("peak_memory_allocated_bytes", "peak_memory_reserved_bytes", "device_memory_used_bytes",
                "host_peak_rss_bytes"):
        summary[key] = _max_of(ok, "memory", key)
    for key in ("first_iteration_s", "compile_s", "setup_s", "prepare_s"):
        summary[key] = _median_of(ok, "timings", key)
    if workload == "infer-latency":
        per_repeat = [stats.describe(r["samples"]["wall_ms"]).p50 for r in ok]
        summary["spread_metric"] = "latency_ms.p50"
    else:
        per_repeat = throughputs
        summary["spread_metric"] = "throughput_img_s"
    spread = stats.spread_pct(per_repeat)
    summary["spread_pct"] = spread
    summary["unstable"] = spread is not None and spread > stats.UNSTABLE_SPREAD_PCT
    summary["repeats"] = len(ok)

    stop_met = all(r.get("validity", {}).get("stop_rule_met", False) for r in ok)
    validity = {
        "valid": stop_met and len(ok) == len(records),
        "stop_rule_met": stop_met,
        "repeats_ok": len(ok),
        "repeats_run": len(records),
        "stable": not summary["unstable"],
    }
    if summary["unstable"]:
        validity["advice"] = UNSTABLE_ADVICE.format(limit=stats.UNSTABLE_SPREAD_PCT)
    return summary, validity


def build_measurement(cell: Cell, records: list[dict[str, Any]], rule: StopRule | None = None) -> Measurement:
    """Combine the repeat records of ``cell`` into a Measurement; the first non-ok record sets the status."""
    bad = next((r for r in records if r["status"] != "ok"), None)
    summary, validity = summarize(records, cell.workload)
    if rule is not None:
        validity["stop_rule"] = stop_rule_text(rule)
    input_size = next((r.get("input_size") for r in records if r.get("input_size")), cell.input_size)
    status = "ok" if bad is None else bad["status"]
    detail = None
    if bad is not None:
        detail = bad.get("detail") or bad.get("reason")
        if bad["status"] == "failed":  # a skip is a property of the cell; a failure happened in one repeat
            detail = f"{detail} (repeat {records.index(bad) + 1}/{len(records)})"
    return Measurement(
        model=cell.model,
        workload=cell.workload,
        mode=cell.mode,
        batch_size=cell.batch_size,
        device=cell.device,
        input_size=input_size,
        status=status,
        reason=None if bad is None else bad.get("reason"),
        detail=detail,
        repeats=tuple(records),
        summary=summary,
        validity=validity,
    )
