"""The timed loop of one launched process, the same for every strategy, with every rank in lockstep.

It follows the train workload's loop (``clsbench.workloads.loop``): a first call timed alone, warm-up until its
rule holds, then timed blocks until the stop rule holds, with the same block planning (``StopWatch``). What
changes with several ranks:

* **Same decisions on every rank.** Every duration the rules look at is the maximum over the ranks
  (``Session.agree_max``, one all-reduce of a few integers, outside the timed region). Every rank feeds
  identical numbers to identical rules, so all plan the same blocks and stop after the same iteration, with no
  rank deciding for the others; the slowest rank sets the pace, as it does in training.
* **Synchronised block edges.** Before a block: synchronise this process's devices, then a barrier across ranks,
  then read the clock. After it: synchronise, read the clock. A block's wall time is the slowest rank's.
* **Non-finite loss** is checked where the train workload checks it (after the first call, warm-up and each
  block), and agreed in the same all-reduce, so every rank stops together with ``nan_loss``.
* **Communication share** (DDP, two ranks or more): after the timed region, one block of ``n_c`` steps inside
  ``no_sync()`` (backward skips the gradient all-reduce) and one ordinary block of ``n_c`` steps, each preceded
  by one untimed step of its kind. ``comm_share = 1 - t(no_sync) / t(sync)`` estimates the share of the step
  that the all-reduce adds, i.e. the part it does not hide behind the backward pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from clsbench.analysis import stats
from clsbench.measure.clock import NS_PER_S, Clock
from clsbench.procedures.scale.strategies.base import Session
from clsbench.workloads.base import NonFiniteLossError, StopWatch
from clsbench.workloads.loop import ESTIMATE_WINDOW, timed_block

#: Each communication-share block runs this fraction of the timed iterations, and at least
#: :data:`COMM_MIN_ITERATIONS`: enough to average out one slow step, short enough to add little to a launch.
COMM_BLOCK_FRACTION = 0.25
COMM_MIN_ITERATIONS = 5


def _block(session: Session, step: Callable[[], object], n: int, clock: Clock) -> tuple[int, list[float]]:
    """Run ``n`` steps between synchronised edges, the ranks lined up by a barrier first; return this rank's wall
    ns and its per-step ms."""
    return timed_block(step, n, clock, cuda=session.device.type == "cuda", synchronize=session.synchronize,
                       before=session.barrier)


def run_rank_loop(session: Session, step: Callable[[], object], stop: Any, clock: Clock, *,
                  nonfinite: Callable[[], bool], comm_share: bool) -> dict[str, Any]:
    """First call, warm-up, timed blocks and (optionally) the communication blocks; returns the raw samples.

    Args:
        session: the strategy's session of this process.
        step: one training step (forward, loss, backward, optimizer step).
        stop: the :class:`~clsbench.core.plan.StopRule`.
        clock: the host clock.
        nonfinite: reads this rank's non-finite-loss flag (a synchronising read; called only between blocks).
        comm_share: run the communication-share blocks when the strategy has ``no_sync``.

    Raises:
        NonFiniteLossError: the loss became NaN or infinite on any rank.
    """

    def agreed(elapsed_ns: int) -> int:
        slowest, bad = session.agree_max([int(elapsed_ns), int(bool(nonfinite()))])
        if bad:
            raise NonFiniteLossError("loss became non-finite on at least one rank")
        return slowest

    def one_step() -> int:
        t0 = clock.now_ns()
        step()
        session.synchronize()
        return clock.now_ns() - t0

    session.barrier()
    first_ns = agreed(one_step())
    warm = StopWatch(stop, warmup=True)
    warm_ns: list[int] = []
    while not warm.done:
        elapsed = agreed(one_step())
        warm.add(1, elapsed)
        warm_ns.append(elapsed)
    estimate_ns = stats.median(warm_ns[-ESTIMATE_WINDOW:]) if warm_ns else float(first_ns or 1)

    timed = StopWatch(stop)
    block_iterations: list[int] = []
    block_wall_s: list[float] = []  # this rank's
    block_wall_max_s: list[float] = []  # the slowest rank's: what the stop rule and the throughput use
    iteration_ms: list[float] = []
    while not timed.done:
        n = timed.plan_block(estimate_ns)
        own_ns, per_step = _block(session, step, n, clock)
        slowest_ns = agreed(own_ns)
        timed.add(n, slowest_ns)
        block_iterations.append(n)
        block_wall_s.append(own_ns / NS_PER_S)
        block_wall_max_s.append(slowest_ns / NS_PER_S)
        iteration_ms.extend(per_step)
        estimate_ns = timed.elapsed_ns / timed.iterations

    comm = None
    no_sync = session.no_sync() if comm_share and session.world_size > 1 else None
    if no_sync is not None:
        n_c = max(COMM_MIN_ITERATIONS, math.ceil(COMM_BLOCK_FRACTION * timed.iterations))
        with no_sync:
            agreed(one_step())  # untimed: a compiled module recompiles once for the flag no_sync flips
            own_free, free_ms = _block(session, step, n_c, clock)
            free = agreed(own_free)
        agreed(one_step())
        own_sync, sync_ms = _block(session, step, n_c, clock)
        synced = agreed(own_sync)
        comm = {
            "iterations": n_c,
            "no_sync_wall_max_s": free / NS_PER_S,
            "sync_wall_max_s": synced / NS_PER_S,
            "no_sync_wall_s": own_free / NS_PER_S,
            "sync_wall_s": own_sync / NS_PER_S,
            "no_sync_iteration_ms": free_ms,
            "sync_iteration_ms": sync_ms,
        }

    return {
        "samples": {
            "iteration_ms": iteration_ms,
            "block_iterations": block_iterations,
            "block_wall_s": block_wall_s,
            "block_wall_max_s": block_wall_max_s,
            "iteration_clock": "cuda_events" if session.device.type == "cuda" else "host",
        },
        "timings": {
            "first_iteration_s": first_ns / NS_PER_S,
            "warmup_iterations": warm.iterations,
            "warmup_s": warm.elapsed_ns / NS_PER_S,
        },
        "validity": timed.validity(),
        "comm": comm,
    }
