"""``--throughput N``: N images per second of one workload (offline inference by default, or training), from the
ordinary cells of the results (run, sweep, tune, soak)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clsbench.core.text_table import fmt_rate
from clsbench.procedures.select.candidates import CardCells, Filters, Source, gather_cells
from clsbench.procedures.select.kinds import REQUIREMENTS, RequirementKind, positive, workload_for


class Throughput(RequirementKind):
    options = ("throughput",)
    workloads = ("infer-throughput", "infer-latency", "train")
    default_workload = "infer-throughput"
    latency_heading = "batch p99 ms"

    def requirement(self, given: Mapping[str, Any], workload: str | None) -> dict[str, Any]:
        target = positive(given["throughput"], "throughput", "20000")
        chosen = workload_for("throughput", self, workload)
        return {"kind": "throughput", "target_img_s": target, "workload": chosen,
                "text": f"{fmt_rate(target)} img/s of {chosen}"}

    def gather(self, sources: Sequence[Source], filters: Filters, requirement: Mapping[str, Any],
               cells: dict[str, CardCells]) -> list[str]:
        gather_cells(sources, filters, [requirement["workload"]], cells)
        return []


REQUIREMENTS.register("throughput", Throughput())
