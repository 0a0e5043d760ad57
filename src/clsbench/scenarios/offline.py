"""MLPerf Offline: every sample in one query; the answer is samples per second.

The batcher sees the whole query at once, so every batch is full (the max queue delay plays no part): the run
measures the server's throughput at its max batch and instance count, which also bounds the Server scenario.
"""

from __future__ import annotations

from typing import Any

from clsbench.scenarios import SCENARIOS
from clsbench.serving import records
from clsbench.serving.config import OFFLINE_MIN_SAMPLES
from clsbench.serving.scenario import (
    OFFLINE_ESTIMATE_DISCOUNT,
    OFFLINE_RETRY_MARGIN,
    LoadGenParams,
    ScenarioContext,
    duration_ms,
    estimate_latency_ns,
    min_queries,
    ran_short,
)


class Offline:
    name = "offline"
    loadgen_name = "Offline"
    axes = ("max_batch", "instances")
    forced_delay_ms = None
    order = 0
    description = "all samples at once; samples/s"

    def params(self, ctx: ScenarioContext, expected_qps: float) -> LoadGenParams:
        return LoadGenParams(self.loadgen_name, duration_ms(ctx.settings), min_queries(ctx.settings,
                             OFFLINE_MIN_SAMPLES), expected_qps=max(1.0, expected_qps), seed=ctx.settings.seed)

    def run(self, ctx: ScenarioContext) -> None:
        batch = ctx.config.max_batch
        estimate = batch * ctx.config.instances * 1e9 / estimate_latency_ns(ctx, batch)
        step = ctx.run_step(self.params(ctx, estimate * OFFLINE_ESTIMATE_DISCOUNT), "run")
        measured = records.loadgen_figure(step, "samples_per_second")
        if ran_short(step) and measured:
            ctx.run_step(self.params(ctx, measured * OFFLINE_RETRY_MARGIN), "retry")

    def headline(self, steps: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
        valid = [s for s in steps if records.is_valid(s) and records.loadgen_figure(s, "samples_per_second")]
        if not valid:
            last = steps[-1] if steps else None
            return {"figure": None, "unit": "samples/s", "label": "offline samples/s", "step": last,
                    "note": "no VALID offline run" + (f": {records.reason(last)}" if last else "")}
        best = max(valid, key=lambda s: records.loadgen_figure(s, "samples_per_second") or 0.0)
        return {"figure": records.loadgen_figure(best, "samples_per_second"), "unit": "samples/s",
                "label": "offline samples/s", "step": best, "note": ""}


SCENARIOS.register("offline", Offline())
