"""GPU busy time: how much of the wall time the GPU actually spends running kernels and copies.

Measured with ``torch.profiler`` (CUPTI activity records) over a few extra iterations run AFTER the timed region,
so profiling never disturbs the reported figures. The busy time per iteration is the union of all GPU activity
intervals (kernels, memcpy, memset) divided by the number of iterations; the busy fraction divides it by the
wall time per iteration measured in the (unprofiled) timed region. A fraction well below one means the GPU waits
on the host: the workload is launch- or overhead-bound.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

#: Iterations profiled after the timed region: enough to average over, few enough to add under 3% to the seed suite.
BUSY_PROFILE_ITERATIONS = 5


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total = 0.0
    end = float("-inf")
    for start, stop in sorted(intervals):
        if start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def gpu_busy_per_iteration(run_once: Callable[[], Any], iterations: int = BUSY_PROFILE_ITERATIONS) -> dict[str, Any]:
    """Profile ``iterations`` calls of ``run_once`` on the current CUDA device; never raises.

    Returns:
        ``{"gpu_busy_ms_per_iteration": float | None, "profiled_iterations": int, "method": str,
        "unavailable": str | None}``.
    """
    try:
        import torch
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize()
        with warnings.catch_warnings():
            # torch 2.11 warns once per process that events are cleared per cycle; one cycle is all we record.
            warnings.filterwarnings("ignore", message=".*Profiler clears events.*", category=UserWarning)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(iterations):
                    run_once()
                torch.cuda.synchronize()
        intervals = [
            (float(e.time_range.start), float(e.time_range.end))
            for e in prof.events()
            if getattr(e, "device_type", None) == DeviceType.CUDA and e.time_range.end > e.time_range.start
        ]
        if not intervals:
            return {"gpu_busy_ms_per_iteration": None, "profiled_iterations": iterations,
                    "method": "torch.profiler CUDA activities", "unavailable": "the profiler recorded no GPU activity"}
        busy_us = _union_length(intervals)
        return {"gpu_busy_ms_per_iteration": busy_us / 1000.0 / iterations, "profiled_iterations": iterations,
                "method": "union of torch.profiler CUDA activity intervals", "unavailable": None}
    except Exception as exc:  # noqa: BLE001 - busy time is an extra; its absence must not fail the measurement
        return {"gpu_busy_ms_per_iteration": None, "profiled_iterations": 0,
                "method": "torch.profiler CUDA activities", "unavailable": f"{type(exc).__name__}: {exc}"[:200]}
