"""train: forward, loss, backward, optimizer step on a synthetic batch resident on the device.

SGD with momentum by default; autocast for the amp modes, with a gradient scaler for fp16 (whose ``step`` reads
the inf/NaN check back to the host every step, as every real fp16 loop does). How the step runs (the optimizer's
implementation, compiled as a whole, captured as a CUDA graph) is the mode's choice
(:mod:`clsbench.workloads.step`). A non-finite loss is detected without a per-step synchronisation: each step ORs
``!isfinite(loss)`` into a flag on the device, and the flag is read only between timed blocks; if set, the
measurement fails with reason ``nan_loss``.
"""

from __future__ import annotations

import torch

from clsbench.measure.clock import NS_PER_S
from clsbench.measure.device import synchronize
from clsbench.workloads.base import WORKLOADS, NonFiniteLossError, WorkloadContext, WorkloadOutput
from clsbench.workloads.loop import run_timed_loop
from clsbench.workloads.step import build_optimizer, make_optimizer, make_step, train_step

__all__ = ["Train", "make_optimizer", "train_step"]  # the step's pieces live in workloads/step.py; kept here too


class Train:
    name = "train"
    kind = "train"

    def run(self, ctx: WorkloadContext) -> WorkloadOutput:
        device, prepared = ctx.device, ctx.prepared
        model = prepared.model
        model.train()
        optimizer = build_optimizer(prepared, ctx.train)
        scaler = torch.amp.GradScaler(device.type) if prepared.grad_scaler else None
        run_step = make_step(prepared, optimizer, scaler, device)
        images = ctx.make_images()
        generator = torch.Generator().manual_seed(ctx.data_seed + 1)
        labels = torch.randint(0, ctx.num_classes, (ctx.cell.batch_size,), generator=generator).to(device)
        nonfinite = torch.zeros((), dtype=torch.bool, device=device)
        last_loss: list[torch.Tensor] = []

        def step() -> None:
            detached = run_step(images, labels).detach()
            torch.logical_or(nonfinite, ~torch.isfinite(detached), out=nonfinite)
            if last_loss:
                last_loss[0] = detached
            else:
                last_loss.append(detached)

        last_value: list[float] = []

        def check_finite() -> None:
            # Reads back one flag and the loss; called only between timed blocks, outside the timed region's work.
            if bool(nonfinite):
                raise NonFiniteLossError(f"loss became non-finite (last loss {float(last_loss[0])})")
            last_value[:] = [float(last_loss[0])]

        t0 = ctx.clock.now_ns()
        step()
        synchronize(device)
        first_ns = ctx.clock.now_ns() - t0
        first_loss = float(last_loss[0])
        out = run_timed_loop(ctx, step, first_call_done=True, after_block=check_finite, first_call_ns=first_ns)
        out.samples["loss_first"] = first_loss
        out.samples["loss_last"] = last_value[0]  # after the last timed block, before any busy-time profiling
        out.timings.setdefault("first_iteration_s", first_ns / NS_PER_S)
        return out


WORKLOADS.register(Train.name, Train())
