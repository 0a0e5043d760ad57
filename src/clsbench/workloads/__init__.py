"""Workloads: one module each, behind the small :class:`~clsbench.workloads.base.Workload` protocol, registered in
:data:`~clsbench.workloads.base.WORKLOADS` (adding a workload is adding a module here)."""

from __future__ import annotations

from clsbench.workloads.base import WORKLOADS, NonFiniteLossError, Workload, WorkloadContext, WorkloadOutput

__all__ = ["WORKLOADS", "NonFiniteLossError", "Workload", "WorkloadContext", "WorkloadOutput", "get_workload"]


def get_workload(name: str) -> Workload:
    """The registered workload ``name``; an unknown name is one error line naming the closest ones."""
    return WORKLOADS.get(name)
