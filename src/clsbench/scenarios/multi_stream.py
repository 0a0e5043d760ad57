"""MLPerf MultiStream: one query of 8 samples at a time (a camera rig's frame set); the answer is the 99th-percentile
per-query latency. The query's samples arrive together and leave as one batch (max queue delay forced to 0)."""

from __future__ import annotations

from typing import Any

from clsbench.scenarios import SCENARIOS
from clsbench.scenarios.single_stream import SingleStream
from clsbench.serving import records
from clsbench.serving.config import MULTI_STREAM_MIN_QUERIES, MULTI_STREAM_PERCENTILE, MULTI_STREAM_SAMPLES_PER_QUERY


class MultiStream(SingleStream):
    name = "multi-stream"
    loadgen_name = "MultiStream"
    description = "8 samples per query, one query at a time; p99 query latency"
    order = 20
    samples_per_query = MULTI_STREAM_SAMPLES_PER_QUERY
    percentile = MULTI_STREAM_PERCENTILE
    mlperf_min_queries = MULTI_STREAM_MIN_QUERIES

    def figure_ms(self, step: dict[str, Any]) -> float | None:
        return records.query_latency_ms(step, f"p{self.percentile * 100:g}")


SCENARIOS.register("multi-stream", MultiStream())
