"""MLPerf SingleStream: one query of one sample at a time, the next sent when the last returns; the answer is the
90th-percentile latency (MLPerf's figure), with p50 and p99 beside it.

Waiting for company is pure loss here (no other request can come), so the max queue delay is forced to 0; batch
and instance count hardly matter, so it runs once per mode, at the first batching setting.
"""

from __future__ import annotations

from typing import Any

from clsbench.scenarios import SCENARIOS
from clsbench.serving import records
from clsbench.serving.config import LOADGEN_DEFAULT_MIN_QUERIES, SINGLE_STREAM_PERCENTILE
from clsbench.serving.scenario import (
    LoadGenParams,
    ScenarioContext,
    duration_ms,
    estimate_latency_ns,
    expected_latency_ns,
    min_queries,
    ran_short,
    with_enough_queries,
)


class SingleStream:
    name = "single-stream"
    loadgen_name = "SingleStream"
    axes: tuple[str, ...] = ()
    forced_delay_ms = 0.0
    order = 10
    description = "one query at a time; p90 latency"
    samples_per_query = 1
    percentile = SINGLE_STREAM_PERCENTILE
    mlperf_min_queries = LOADGEN_DEFAULT_MIN_QUERIES

    def params(self, ctx: ScenarioContext, latency_ns: float) -> LoadGenParams:
        return LoadGenParams(self.loadgen_name, duration_ms(ctx.settings),
                             min_queries(ctx.settings, self.mlperf_min_queries),
                             expected_latency_ns=expected_latency_ns(latency_ns),
                             samples_per_query=self.samples_per_query if self.samples_per_query > 1 else None,
                             latency_percentile=self.percentile, seed=ctx.settings.seed)

    def run(self, ctx: ScenarioContext) -> None:
        step = with_enough_queries(ctx.run_step, self.params(ctx, estimate_latency_ns(ctx, self.samples_per_query)),
                                   "run")
        mean = records.latency_ms(step, "mean")
        if ran_short(step) and mean:
            with_enough_queries(ctx.run_step, self.params(ctx, mean * 1e6), "retry")

    def figure_ms(self, step: dict[str, Any]) -> float | None:
        return records.latency_ms(step, f"p{self.percentile * 100:g}")

    def headline(self, steps: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
        label = f"p{self.percentile * 100:g} latency"
        valid = [s for s in steps if records.is_valid(s) and self.figure_ms(s) is not None]
        if not valid:
            last = steps[-1] if steps else None
            return {"figure": None, "unit": "ms", "label": label, "step": last,
                    "note": f"no VALID {self.name} run" + (f": {records.reason(last)}" if last else "")}
        best = min(valid, key=lambda s: self.figure_ms(s) or 0.0)
        return {"figure": self.figure_ms(best), "unit": "ms", "label": label, "step": best, "note": ""}


SCENARIOS.register("single-stream", SingleStream())
