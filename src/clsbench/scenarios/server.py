"""MLPerf Server: single-sample queries with Poisson arrivals at a target rate; a run is VALID when the 99th
percentile latency is within the bound. The answer is the highest VALID target, found per batching setting by the
search in :mod:`clsbench.serving.search` (bracket, then bisect), each step a full LoadGen run.

LoadGen ends a run early (INVALID: too many outstanding queries) once more than ``max_async_queries`` are in
flight; it is set to :data:`MAX_ASYNC_FACTOR` times the queries the bound lets be in flight at the target rate
(Little's law: rate x bound), so a hopeless target costs a fraction of a second instead of a queue that drains for
minutes, while a run that can still be VALID never comes near it.
"""

from __future__ import annotations

import math
from typing import Any

from clsbench.measure.clock import NS_PER_MS
from clsbench.scenarios import SCENARIOS
from clsbench.serving import records
from clsbench.serving.config import DEFAULT_START_QPS, LOADGEN_DEFAULT_MIN_QUERIES, START_FRACTION_OF_OFFLINE
from clsbench.serving.scenario import (
    LoadGenParams,
    ScenarioContext,
    duration_ms,
    estimate_latency_ns,
    min_queries,
    with_enough_queries,
)
from clsbench.serving.search import search_max_qps

#: max_async_queries = this x target QPS x bound (see the module docstring); 8x is far past any VALID run's peak.
MAX_ASYNC_FACTOR = 8
#: ... but never below this many, so bursts at low rates are never cut short.
MIN_MAX_ASYNC = 256
#: A run that missed the latency bound while its instances were busy less than this fraction of the time proves
#: the bound is below what a request costs at any load: the search stops going down (``hopeless``).
IDLE_UTILISATION = 0.25


def hopeless(step: dict[str, Any]) -> bool:
    """The latency bound was missed with the server mostly idle (see :data:`IDLE_UTILISATION`)."""
    loadgen, server = step.get("loadgen") or {}, step.get("server") or {}
    wall, busy = server.get("wall_ns") or 0, server.get("busy_ns") or []
    if loadgen.get("perf_constraints_met") is not False or not wall or not busy:
        return False
    return sum(busy) / (wall * len(busy)) < IDLE_UTILISATION


class Server:
    name = "server"
    loadgen_name = "Server"
    axes = ("max_batch", "max_delay_ms", "instances")
    forced_delay_ms = None
    order = 30
    description = "Poisson arrivals; highest target QPS VALID at the latency bound"

    def params(self, ctx: ScenarioContext, target_qps: float) -> LoadGenParams:
        s = ctx.settings
        in_flight = target_qps * s.latency_bound_ms / 1000.0
        return LoadGenParams(self.loadgen_name, duration_ms(s), min_queries(s, LOADGEN_DEFAULT_MIN_QUERIES),
                             target_qps=target_qps, target_latency_ns=int(round(s.latency_bound_ms * NS_PER_MS)),
                             latency_percentile=s.latency_percentile,
                             max_async_queries=max(MIN_MAX_ASYNC, math.ceil(MAX_ASYNC_FACTOR * in_flight)),
                             coalesce=True, seed=s.seed)

    def start_qps(self, ctx: ScenarioContext) -> float:
        if ctx.settings.start_qps is not None:
            return ctx.settings.start_qps
        if ctx.offline_qps:
            return ctx.offline_qps * START_FRACTION_OF_OFFLINE
        batch = ctx.config.max_batch
        estimate = batch * ctx.config.instances * 1e9 / estimate_latency_ns(ctx, batch)
        return max(DEFAULT_START_QPS, estimate * START_FRACTION_OF_OFFLINE) if estimate > 0 else DEFAULT_START_QPS

    def run(self, ctx: ScenarioContext) -> None:
        def run(qps: float, role: str) -> dict[str, Any]:
            return with_enough_queries(ctx.run_step, self.params(ctx, qps), role)

        outcome = search_max_qps(run, records.is_valid,
                                 start_qps=self.start_qps(ctx), resolution=ctx.settings.search_resolution,
                                 max_steps=ctx.settings.max_search_steps, hopeless=hopeless)
        ctx.facts["search"] = outcome
        best = outcome["best_qps"]
        if best is not None and outcome["stopped_by"] != "error":
            for _ in range(ctx.settings.confirm):
                if with_enough_queries(ctx.run_step, self.params(ctx, best), "confirm").get("error"):
                    break

    def headline(self, steps: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
        bound = float(settings.get("latency_bound_ms") or 0.0)
        pct = f"p{float(settings.get('latency_percentile') or 0.99) * 100:g}"
        label = f"server QPS ({pct} <= {bound:g} ms)"
        valid = [s for s in steps if records.is_valid(s) and records.target_qps(s)]
        if valid:
            best = max(valid, key=lambda s: (records.target_qps(s) or 0.0, s.get("index", 0)))
            return {"figure": records.target_qps(best), "unit": "qps", "label": label, "step": best, "note": ""}
        seen = [s for s in steps if records.latency_ms(s, pct) is not None]
        if not seen:
            return {"figure": None, "unit": "qps", "label": label, "step": steps[-1] if steps else None,
                    "note": "no server run finished" + (f": {records.reason(steps[-1])}" if steps else "")}
        low = min(seen, key=lambda s: records.latency_ms(s, pct) or math.inf)
        return {"figure": None, "unit": "qps", "label": label, "step": low,
                "note": f"no target met {pct} <= {bound:g} ms; the lowest {pct} seen was "
                        f"{records.latency_ms(low, pct):.2f} ms at {records.target_qps(low) or 0:,.0f} qps "
                        f"({records.setting_label(low.get('setting') or {})})"}


SCENARIOS.register("server", Server())
