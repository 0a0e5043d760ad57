"""infer-latency: one request at a time, as a client sees it.

Each request: an input on the host (cycled through a pool of 8 pinned buffers, so consecutive requests never
share one) -> copy to the device -> forward -> result copied back to the host, then
synchronised. Two clocks per request: the **wall** time of the whole request (host clock, what a client waits)
and, on CUDA, the **GPU** time of the forward pass alone, between two CUDA events around it on the same stream.
The first request (cuDNN autotuning, lazy compilation, graph capture) is timed on its own; warm-up requests follow
and are not kept; the stop rule is checked after every request.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from clsbench.measure.clock import NS_PER_MS, NS_PER_S
from clsbench.measure.device import synchronize
from clsbench.measure.profiler import phase
from clsbench.workloads.base import WORKLOADS, StopWatch, WindowLog, WorkloadContext, WorkloadOutput

#: Distinct host inputs cycled through, so no request reuses the previous request's buffer.
HOST_INPUT_POOL = 8


class InferLatency:
    name = "infer-latency"
    kind = "inference"

    def run(self, ctx: WorkloadContext) -> WorkloadOutput:
        device, clock, prepared = ctx.device, ctx.clock, ctx.prepared
        on_cuda = device.type == "cuda"
        base = ctx.make_images(on_device=False)
        pool = [(base + 0.01 * i).contiguous(memory_format=prepared.memory_format) for i in range(HOST_INPUT_POOL)]
        if on_cuda:
            pool = [x.pin_memory() for x in pool]
        start_event = torch.cuda.Event(enable_timing=True) if on_cuda else None
        end_event = torch.cuda.Event(enable_timing=True) if on_cuda else None

        def request(i: int) -> tuple[int, float | None]:
            t0 = clock.now_ns()
            with phase("copy"):
                x = pool[i % HOST_INPUT_POOL].to(device, non_blocking=True)
            if start_event is not None:
                start_event.record()
            with phase("forward"):
                out = prepared.forward(x)
            if end_event is not None:
                end_event.record()
            with phase("copy"):
                out.to("cpu")
            synchronize(device)
            t1 = clock.now_ns()
            gpu_ms = start_event.elapsed_time(end_event) if start_event is not None else None
            return t1 - t0, gpu_ms

        wall_ms: list[float] = []
        gpu_ms: list[float] = []
        with torch.inference_mode(), prepared.autocast(device.type):
            first_ns, _ = request(0)
            warm = StopWatch(ctx.stop, warmup=True)
            while not warm.done:
                elapsed, _ = request(warm.iterations)
                warm.add(1, elapsed)
            timed = StopWatch(ctx.stop)
            ctx.timed_region_started()
            windows = timed_requests(ctx, timed, request, wall_ms, gpu_ms)
            telemetry = ctx.timed_region_ended()
            stopped = ctx.stop_requested
            busy = ctx.busy_time(lambda: request(0)) if not stopped else None
            profile = ctx.profile_steps(lambda: request(0), timed.elapsed_ns / NS_PER_MS / len(wall_ms) if wall_ms
                                        else None) if not stopped else None
        samples = {
            "wall_ms": wall_ms,
            "gpu_ms": gpu_ms if on_cuda else None,
            "images": len(wall_ms) * ctx.cell.batch_size,
            "wall_s": timed.elapsed_ns / NS_PER_S,
        }
        validity = timed.validity()
        if windows is not None:
            samples["windows"] = windows.samples()
            validity["ended_early"] = ctx.stop_requested and not timed.rule_met
        timings = {"first_iteration_s": first_ns / NS_PER_S, "warmup_iterations": warm.iterations,
                   "warmup_s": warm.elapsed_ns / NS_PER_S}
        return WorkloadOutput(samples=samples, timings=timings, validity=validity, telemetry=telemetry, busy=busy,
                              profile=profile)


def timed_requests(ctx: WorkloadContext, timed: StopWatch, request: Callable[[int], tuple[int, float | None]],
                   wall_ms: list[float], gpu_ms: list[float]) -> WindowLog | None:
    """The timed region: requests until the stop rule holds. In a soak, the requests are grouped into windows
    (a window ends once its requests' summed time reaches the window length; the last may be partial), and an
    early stop ends the region after the request in flight; a KeyboardInterrupt (``--isolation inline``) after
    the first window ends it too.

    Returns:
        The soak's windows, or None outside a soak.
    """
    windows = ctx.windows()
    try:
        while not timed.done and not ctx.stop_requested:
            if windows is not None:
                windows.open()
            elapsed, gpu = request(timed.iterations)
            timed.add(1, elapsed)
            wall_ms.append(elapsed / NS_PER_MS)
            if gpu is not None:
                gpu_ms.append(gpu)
            if windows is not None:
                windows.add(1, elapsed)
                if windows.full:
                    windows.close()
    except KeyboardInterrupt:
        if windows is None or not windows.finished or ctx.early_stop is None:
            raise
        ctx.early_stop.requested = True
    if windows is not None:
        windows.close()  # the last window, partial when the soak ended early
    return windows


WORKLOADS.register(InferLatency.name, InferLatency())
