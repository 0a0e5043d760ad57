"""Workloads: one module each, behind the small :class:`~clsbench.workloads.base.Workload` protocol."""

from __future__ import annotations

from clsbench.errors import InvalidInputError
from clsbench.workloads.base import NonFiniteLossError, Workload, WorkloadContext, WorkloadOutput
from clsbench.workloads.infer_latency import InferLatency
from clsbench.workloads.infer_throughput import InferThroughput
from clsbench.workloads.train import Train

WORKLOADS: dict[str, Workload] = {w.name: w for w in (InferLatency(), InferThroughput(), Train())}

__all__ = ["WORKLOADS", "NonFiniteLossError", "Workload", "WorkloadContext", "WorkloadOutput", "get_workload"]


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise InvalidInputError(f"unknown workload {name!r}", "choose from: " + ", ".join(WORKLOADS)) from None
