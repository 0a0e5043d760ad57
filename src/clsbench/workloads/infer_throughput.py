"""infer-throughput: batch N resident on the device, forward passes back to back.

images/s = images processed / wall time between two synchronisations that bracket the timed iterations. Per
iteration times are kept too: CUDA events between iterations on a GPU (no synchronisation inside the region),
host clock readings on the CPU (which runs synchronously).
"""

from __future__ import annotations

import torch

from clsbench.measure.device import synchronize
from clsbench.measure.profiler import phase
from clsbench.workloads.base import WORKLOADS, WorkloadContext, WorkloadOutput
from clsbench.workloads.loop import run_timed_loop


class InferThroughput:
    name = "infer-throughput"
    kind = "inference"

    def run(self, ctx: WorkloadContext) -> WorkloadOutput:
        prepared = ctx.prepared
        images = ctx.make_images()
        with torch.inference_mode(), prepared.autocast(ctx.device.type):
            # A graph-replaying forward owns a static input: feed it that tensor so no copy enters the region.
            t0 = ctx.clock.now_ns()
            prepared.forward(images)
            synchronize(ctx.device)
            first_ns = ctx.clock.now_ns() - t0
            static = getattr(prepared.forward, "static_input", None)
            x = static if static is not None else images

            def step() -> None:
                with phase("forward"):
                    prepared.forward(x)

            return run_timed_loop(ctx, step, first_call_done=True, first_call_ns=first_ns)


WORKLOADS.register(InferThroughput.name, InferThroughput())
