"""The timed loop shared by the batch workloads (infer-throughput, train).

1. First call, synchronised and timed on its own (it includes cuDNN autotuning, lazy compilation, graph capture).
2. Warm-up: each iteration synchronised and timed, until the warm-up rule holds; the last iterations give the
   per-iteration estimate used to size the timed block.
3. Timed block(s): synchronise, read the clock, run N iterations back to back (CUDA events between them on a GPU),
   synchronise, read the clock. Normally one block meets the stop rule; if it falls short another follows.
   Throughput is images over the summed block wall times.

A soak (``ctx.window_s``) sizes every timed block to one window instead (:func:`run_windows`), until the minimum
time has passed or Ctrl-C asks it to stop; the repeat then also stores its windows (``samples["windows"]``) and
whether it ended early (``validity["ended_early"]``).
"""

from __future__ import annotations

from collections.abc import Callable

from clsbench.analysis import stats
from clsbench.measure.clock import NS_PER_MS, NS_PER_S, Clock
from clsbench.measure.device import EventTimeline, synchronize
from clsbench.workloads.base import StopWatch, WindowLog, WorkloadContext, WorkloadOutput

#: Warm-up iterations used to estimate the time of one timed iteration (median of the last few).
ESTIMATE_WINDOW = 5
#: A soak's first window begins with a block of this fraction of it, sized from the warm-up estimate alone.
FIRST_WINDOW_PARTS = 4


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
    windows = ctx.windows()
    if windows is not None:
        blocks = run_windows(ctx, step, timed, windows, estimate_ns, iteration_ms, after_block)
    while windows is None and not timed.done:
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
    if windows is not None:
        synchronize(device)  # a soak ended by Ctrl-C inside a block leaves work queued
    telemetry = ctx.timed_region_ended()
    stopped = ctx.stop_requested
    busy = ctx.busy_time(step) if not stopped else None
    profile = (ctx.profile_steps(step, timed.elapsed_ns / NS_PER_MS / timed.iterations if timed.iterations else None)
               if not stopped else None)

    images = timed.iterations * ctx.cell.batch_size
    samples = {
        "iteration_ms": iteration_ms,
        "images": images,
        "wall_s": timed.elapsed_ns / NS_PER_S,
        "blocks": blocks,
        "iteration_clock": "cuda_events" if on_cuda else "host",
    }
    validity = timed.validity()
    if windows is not None:
        samples["windows"] = windows.samples()
        validity["ended_early"] = ctx.stop_requested and not timed.rule_met
    timings = {
        "first_iteration_s": first_call_ns / NS_PER_S if first_call_ns is not None else None,
        "warmup_iterations": warm.iterations,
        "warmup_s": warm.elapsed_ns / NS_PER_S,
    }
    return WorkloadOutput(samples=samples, timings=timings, validity=validity, telemetry=telemetry,
                          busy=busy, profile=profile)


def run_windows(ctx: WorkloadContext, step: Callable[[], object], timed: StopWatch, windows: WindowLog,
                estimate_ns: float, iteration_ms: list[float], after_block: Callable[[], None] | None) -> int:
    """A soak's timed region: windows until the stop rule's minimum time has passed or an early stop is requested
    (after a finished window).

    A window is one timed block sized from the time per iteration so far; when the block falls short of the window
    (the estimate was high), another block fills the rest. The first window starts with a block of
    1/:data:`FIRST_WINDOW_PARTS` of it, so that a warm-up estimate that was too low cannot stretch it far.

    A KeyboardInterrupt (Ctrl-C with ``--isolation inline``) ends the region too, losing only the window in
    flight; before the first window has finished there is nothing to keep, and it propagates.

    Returns:
        The number of timed blocks run; the windows are in ``windows``, the iterations in ``timed``.
    """
    device, clock = ctx.device, ctx.clock
    blocks = 0
    try:
        while not timed.done and not ctx.stop_requested:
            windows.open()
            # At least one block; the window is full once another iteration would take it further past its length
            # than it is short (an iteration longer than the window makes a window of one iteration).
            while not windows.elapsed_ns or windows.elapsed_ns + estimate_ns / 2 < windows.window_ns:
                n = max(1, round((windows.window_ns - windows.elapsed_ns) / max(estimate_ns, 1.0)))
                if not timed.iterations:
                    n = max(1, n // FIRST_WINDOW_PARTS)
                elapsed_ns, per_iteration_ms = timed_block(step, n, clock, cuda=device.type == "cuda",
                                                           synchronize=lambda: synchronize(device))
                iteration_ms.extend(per_iteration_ms)
                timed.add(n, elapsed_ns)
                windows.add(n, elapsed_ns)
                blocks += 1
                estimate_ns = timed.elapsed_ns / timed.iterations
                if after_block:
                    after_block()
            windows.close()
    except KeyboardInterrupt:
        if not windows.finished or ctx.early_stop is None:
            raise
        ctx.early_stop.requested = True
    return blocks
