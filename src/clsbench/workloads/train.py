"""train: forward, loss, backward, optimizer step on a synthetic batch resident on the device.

SGD with momentum by default; autocast for the amp modes, with a gradient scaler for fp16 (whose ``step`` reads
the inf/NaN check back to the host every step, as every real fp16 loop does). A non-finite loss is detected
without a per-step synchronisation: each step ORs ``!isfinite(loss)`` into a flag on the device, and the flag is
read only between timed blocks; if set, the measurement fails with reason ``nan_loss``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from clsbench.core.plan import TrainSettings
from clsbench.measure.clock import NS_PER_S
from clsbench.measure.device import synchronize
from clsbench.measure.profiler import phase
from clsbench.modes.base import Prepared
from clsbench.workloads.base import WORKLOADS, NonFiniteLossError, WorkloadContext, WorkloadOutput
from clsbench.workloads.loop import run_timed_loop


def make_optimizer(model: torch.nn.Module, settings: TrainSettings) -> torch.optim.Optimizer:
    if settings.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=settings.lr, momentum=settings.momentum,
                               weight_decay=settings.weight_decay)
    if settings.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    raise ValueError(f"unknown optimizer {settings.optimizer!r}")


def train_step(prepared: Prepared, images: torch.Tensor, labels: torch.Tensor, optimizer: torch.optim.Optimizer,
               scaler: torch.amp.GradScaler | None, device_type: str) -> torch.Tensor:
    """One training step: forward and loss under the mode's autocast, (scaled) backward, optimizer step.

    Returns the loss tensor, still on the device (reading it is the caller's choice: it synchronises).
    """
    with phase("forward"), prepared.autocast(device_type):
        loss = F.cross_entropy(prepared.forward(images), labels)
    with phase("backward"):
        (scaler.scale(loss) if scaler is not None else loss).backward()
    with phase("optimizer"):
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return loss


class Train:
    name = "train"
    kind = "train"

    def run(self, ctx: WorkloadContext) -> WorkloadOutput:
        device, prepared = ctx.device, ctx.prepared
        model = prepared.model
        model.train()
        optimizer = make_optimizer(model, ctx.train)
        scaler = torch.amp.GradScaler(device.type) if prepared.grad_scaler else None
        images = ctx.make_images()
        generator = torch.Generator().manual_seed(ctx.data_seed + 1)
        labels = torch.randint(0, ctx.num_classes, (ctx.cell.batch_size,), generator=generator).to(device)
        nonfinite = torch.zeros((), dtype=torch.bool, device=device)
        last_loss: list[torch.Tensor] = []

        def step() -> None:
            detached = train_step(prepared, images, labels, optimizer, scaler, device.type).detach()
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
