"""A serve measurement's LoadGen runs as data: the scenario's answer among them, each run as a flat row, and each
batching setting's answer, best run and the failing run that shows what stopped it.

Pure: reads step records (:mod:`clsbench.serving.records`) only. :func:`clsbench.serving.analysis.analyze_serve`
puts these together per mode and scenario.
"""

from __future__ import annotations

from typing import Any

from clsbench.results.schema import backend_suffix
from clsbench.serving import records


def scenario_headline(scenario: str, steps: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any] | None:
    """The scenario plug-in's answer among ``steps`` (figure, unit, label, note and the run it comes from); None for
    a scenario this clsbench does not know."""
    from clsbench.errors import InvalidInputError
    from clsbench.scenarios import SCENARIOS

    try:
        plugin = SCENARIOS.get(scenario)
    except InvalidInputError:
        return None  # a scenario this clsbench does not know: its runs are still listed
    return plugin.headline(steps, settings)


#: The LoadGen percentiles a serve table shows, and the name :data:`clsbench.analysis.stats.MIN_SAMPLES` gives each.
PERCENTILES = {"p50": "p50", "p90": "p90", "p99": "p99", "p99.9": "p999"}


def sample_count(step: dict[str, Any]) -> int | None:
    """How many samples LoadGen's per-sample latencies of a run cover (queries x samples per query); None when the
    log did not say."""
    loadgen = step.get("loadgen") or {}
    queries = loadgen.get("query_count")
    if not isinstance(queries, (int, float)) or isinstance(queries, bool):
        return None
    per_query = loadgen.get("generated_samples_per_query")
    per_query = per_query if isinstance(per_query, (int, float)) and not isinstance(per_query, bool) else 1
    return int(queries) * int(per_query or 1)


def percentiles_ms(step: dict[str, Any]) -> dict[str, float | None]:
    """A run's latency percentiles in ms (``p50``, ``p90``, ``p99``, ``p99.9``), each None where the run covered too
    few samples to support it (:data:`clsbench.analysis.stats.MIN_SAMPLES`, as the run table withholds): LoadGen's
    p99 of 40 samples is their maximum."""
    from clsbench.analysis.stats import MIN_SAMPLES

    count = sample_count(step)
    return {name: None if count is not None and count < MIN_SAMPLES[key] else records.latency_ms(step, name)
            for name, key in PERCENTILES.items()}


def step_row(step: dict[str, Any]) -> dict[str, Any]:
    """One LoadGen run as a flat row (the steps table, the report's chart, CSV)."""
    stats = records.batch_stats(step) or {}
    return {
        "index": step.get("index"), "mode": f"{step.get('mode')}{backend_suffix(step.get('backend'))}",
        "scenario": step.get("scenario"),
        "role": step.get("role"), "setting": records.setting_label(step.get("setting") or {}),
        "target_qps": records.target_qps(step), "setting_facts": step.get("setting") or {},
        "scheduled_qps": records.loadgen_figure(step, "scheduled_qps"),
        "completed_qps": records.loadgen_figure(step, "completed_qps"),
        "samples_per_second": records.loadgen_figure(step, "samples_per_second"),
        **{f"{name}_ms": value for name, value in percentiles_ms(step).items()},
        "max_ms": records.latency_ms(step, "max"), "samples": sample_count(step),
        "valid": records.is_valid(step), "reason": records.reason(step),
        "mean_batch": stats.get("mean_batch"), "padding_pct": stats.get("padding_pct"),
        "ahead_pct": stats.get("ahead_pct"),
        "histogram": stats.get("histogram") or {}, "split_ms": records.time_split_ms(step),
        "per_batch_ms": stats.get("per_batch_ms"), "busy_pct": stats.get("busy_pct") or [],
        "log_dir": step.get("log_dir"), "wall_s": step.get("wall_s"),
    }


def per_setting(scenario: str, steps: list[dict[str, Any]], settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Each batching setting's answer, best run and time split, in the order the settings were served."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for step in steps:
        groups.setdefault(records.setting_key(step.get("setting") or {}), []).append(step)
    out = []
    for group in groups.values():
        head = scenario_headline(scenario, group, settings) or {}
        best = head.get("step")
        out.append({"setting": records.setting_label(group[0].get("setting") or {}),
                    "max_batch": (group[0].get("setting") or {}).get("max_batch"),
                    "figure": head.get("figure"), "unit": head.get("unit"), "note": head.get("note") or "",
                    "runs": len(group), "valid_runs": sum(1 for s in group if records.is_valid(s)),
                    "best": step_row(best) if best else None, "limit": _limit(group, best)})
    return out


def _limit(steps: list[dict[str, Any]], best: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run that shows what stopped a setting: the lowest-target INVALID Server run above its answer."""
    floor = records.target_qps(best) if best else 0.0
    above = [s for s in steps if not records.is_valid(s) and not s.get("error") and records.target_qps(s)
             and records.target_qps(s) > (floor or 0.0) and records.time_split_ms(s) is not None]
    if not above:
        return None
    return step_row(min(above, key=lambda s: records.target_qps(s) or 0.0))
