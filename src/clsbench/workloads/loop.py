"""The timed loop shared by the batch workloads (infer-throughput, train).

1. First call, synchronised and timed on its own (it includes cuDNN autotuning, lazy compilation, graph capture).
2. Warm-up: each iteration synchronised and timed, until the warm-up rule holds; the last iterations give the
   per-iteration estimate used to size the timed block.
3. Timed block(s): synchronise, read the clock, run N iterations back to back (CUDA events between them on a GPU),
   synchronise, read the clock. Normally one block meets the stop rule; if it falls short another follows.
   Throughput is images over the summed block wall times.
"""

from __future__ import annotations

from collections.abc import Callable

from clsbench.analysis import stats
from clsbench.measure.clock import NS_PER_MS, NS_PER_S, Clock
from clsbench.measure.device import EventTimeline, synchronize
from clsbench.workloads.base import StopWatch, WorkloadContext, WorkloadOutput

#: Warm-up iterations used to estimate the time of one timed iteration (median of the last few).
ESTIMATE_WINDOW = 5


def timed_block(step: Callable[[], object], n: int, clock: Clock, *, cuda: bool, synchronize: Callable[[], None],
                before: Callable[[], None] | None = None) -> tuple[int, list[float]]:
    """One timed block, the same for every loop (the workloads' and scale's ranks'): synchronise (then ``before``,
    e.g. a barrier across ranks), read the clock, run ``step`` ``n`` times back to back, synchronise, read the clock.

    Returns:
        The block's wall time in ns, and the time of each iteration in ms: from CUDA events recorded between the
        iterations on a GPU (a few microseconds of host time each, never a synchronisation), from the host clock
        on a CPU (which runs synchronously).
    """
    synchronize()
    if before is not None:
        before()
    if cuda:
        timeline = EventTimeline()
        start = clock.now_ns()
        timeline.mark()
        for _ in range(n):
            step()
            timeline.mark()
        synchronize()
        end = clock.now_ns()
        return end - start, timeline.intervals_ms()
    start = last = clock.now_ns()
    per_iteration_ms: list[float] = []
    for _ in range(n):
        step()
        now = clock.now_ns()
        per_iteration_ms.append((now - last) / NS_PER_MS)
        last = now
    return last - start, per_iteration_ms


def run_timed_loop(
    ctx: WorkloadContext,
    step: Callable[[], object],
    *,
    first_call_done: bool = False,
    after_block: Callable[[], None] | None = None,
    first_call_ns: int | None = None,
) -> WorkloadOutput:
    """Run ``step`` through first call, warm-up and timed blocks; return the raw samples.

    Args:
        ctx: the workload context.
        step: one iteration (forward, or a whole training step).
        first_call_done: the caller already made the first call (e.g. to find a static input), untimed here.
        after_block: called after each synchronised phase, outside any timed region (e.g. a NaN check).
        first_call_ns: duration of the caller's first call, when it timed it.
    """
    device, clock = ctx.device, ctx.clock
    on_cuda = device.type == "cuda"
    if not first_call_done:
        t0 = clock.now_ns()
        step()
        synchronize(device)
        first_call_ns = clock.now_ns() - t0
    if after_block:
        after_block()

    warm = StopWatch(ctx.stop, warmup=True)
    warm_ns: list[int] = []
    while not warm.done:
        t0 = clock.now_ns()
        step()
        synchronize(device)
        elapsed = clock.now_ns() - t0
        warm.add(1, elapsed)
        warm_ns.append(elapsed)
    if after_block:
        after_block()
    # With no warm-up at all, the first call (autotuning included) is the only, pessimistic, estimate.
    estimate_ns = stats.median(warm_ns[-ESTIMATE_WINDOW:]) if warm_ns else float(first_call_ns or 1)

    timed = StopWatch(ctx.stop)
    iteration_ms: list[float] = []
    blocks = 0
    synchronize(device)
    ctx.timed_region_started()
    while not timed.done:
        n = timed.plan_block(estimate_ns)
        elapsed_ns, per_iteration_ms = timed_block(step, n, clock, cuda=on_cuda,
                                                   synchronize=lambda: synchronize(device))
        iteration_ms.extend(per_iteration_ms)
        timed.add(n, elapsed_ns)
        blocks += 1
        if timed.iterations:
            estimate_ns = timed.elapsed_ns / timed.iterations
        if after_block:
            after_block()
    telemetry = ctx.timed_region_ended()
    busy = ctx.busy_time(step)
    profile = ctx.profile_steps(step, timed.elapsed_ns / NS_PER_MS / timed.iterations if timed.iterations else None)

    images = timed.iterations * ctx.cell.batch_size
    samples = {
        "iteration_ms": iteration_ms,
        "images": images,
        "wall_s": timed.elapsed_ns / NS_PER_S,
        "blocks": blocks,
        "iteration_clock": "cuda_events" if on_cuda else "host",
    }
    timings = {
        "first_iteration_s": first_call_ns / NS_PER_S if first_call_ns is not None else None,
        "warmup_iterations": warm.iterations,
        "warmup_s": warm.elapsed_ns / NS_PER_S,
    }
    return WorkloadOutput(samples=samples, timings=timings, validity=timed.validity(), telemetry=telemetry,
                          busy=busy, profile=profile)
