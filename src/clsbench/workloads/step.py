"""How one training step runs, as the mode asks: the optimizer's implementation (``+foreach``, ``+fused``), the
whole step compiled (``+compiled-step``) and the whole step captured as one CUDA graph (``+cudagraph``).

The step itself is always :func:`train_step`: forward and loss under the mode's autocast, (scaled) backward,
optimizer step, gradients set to None. :func:`make_step` wraps it: compiled with the mode's own compiler, then, for
``+cudagraph``, captured once and replayed (:class:`GraphedStep`, PyTorch's whole-network capture: warm-up steps on
a side stream first, so the optimizer's state exists and cuDNN has chosen its algorithms before capture). Every
train loop (synthetic data, real data) and the training parity check build their step here, so what is checked is
what was measured.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from clsbench.core.plan import TrainSettings
from clsbench.errors import ClsbenchError
from clsbench.measure.profiler import phase
from clsbench.modes.base import Prepared

#: Warm-up steps before capture; PyTorch's CUDA-graph notes use a few on a side stream (also in modes/cudagraph.py).
CAPTURE_WARMUP_STEPS = 3

#: The optimizers of :class:`~clsbench.core.plan.TrainSettings` and the constructor arguments each takes from it.
OPTIMIZERS: dict[str, tuple[type[torch.optim.Optimizer], Callable[[TrainSettings], dict[str, Any]]]] = {
    "sgd": (torch.optim.SGD, lambda s: {"lr": s.lr, "momentum": s.momentum, "weight_decay": s.weight_decay}),
    "adamw": (torch.optim.AdamW, lambda s: {"lr": s.lr, "weight_decay": s.weight_decay}),
}

Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def make_optimizer(model: torch.nn.Module, settings: TrainSettings, options: Mapping[str, Any] | None = None, *,
                   capturable: bool = False) -> torch.optim.Optimizer:
    """The optimizer ``settings`` names over ``model``'s parameters.

    Args:
        options: further constructor flags (``{"fused": True}``, from :attr:`Prepared.optimizer_options`).
        capturable: the step will be captured in a CUDA graph: pass ``capturable=True`` to an optimizer that has
            the flag (AdamW keeps its step count on the device then; SGD has no such state and no flag).
    """
    if settings.optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {settings.optimizer!r}")
    cls, arguments = OPTIMIZERS[settings.optimizer]
    kwargs = {**arguments(settings), **(options or {})}
    if capturable and "capturable" in inspect.signature(cls).parameters:
        kwargs["capturable"] = True
    return cls(model.parameters(), **kwargs)


def build_optimizer(prepared: Prepared, settings: TrainSettings) -> torch.optim.Optimizer:
    """The optimizer for a model prepared in its mode (its implementation, capturable for ``+cudagraph``).

    Raises:
        ClsbenchError: torch refuses the implementation the mode names on this device (the measurement is recorded
            as skipped, ``unsupported_mode``, with torch's words).
    """
    try:
        return make_optimizer(prepared.model, settings, prepared.optimizer_options, capturable=prepared.capture_step)
    except (RuntimeError, ValueError) as exc:
        if not prepared.optimizer_options:
            raise
        chosen = ", ".join(sorted(prepared.optimizer_options))
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClsbenchError(f"{chosen} {settings.optimizer} is not available here: {text}") from exc


def train_step(prepared: Prepared, images: torch.Tensor, labels: torch.Tensor, optimizer: torch.optim.Optimizer,
               scaler: torch.amp.GradScaler | None, device_type: str, *, annotate: bool = True) -> torch.Tensor:
    """One training step: forward and loss under the mode's autocast, (scaled) backward, optimizer step.

    ``annotate`` opens the profile's phase ranges (:func:`clsbench.measure.profiler.phase`; no-ops unless a profile
    records); a step compiled whole is not annotated, since a range that appears only while profiling would make
    the compiler trace the step again.

    Returns the loss tensor, still on the device (reading it is the caller's choice: it synchronises).
    """
    ranges = phase if annotate else _no_range
    with ranges("forward"), prepared.autocast(device_type):
        loss = F.cross_entropy(prepared.forward(images), labels)
    with ranges("backward"):
        (scaler.scale(loss) if scaler is not None else loss).backward()
    with ranges("optimizer"):
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return loss


def _no_range(name: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def make_step(prepared: Prepared, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None,
              device: torch.device) -> Step:
    """The training step as the mode runs it: ``step(images, labels) -> loss`` (the loss stays on the device).

    Raises:
        ClsbenchError: ``+cudagraph`` with a gradient scaler (amp-fp16), whose step reads the inf/NaN check back
            to the host every step, which a captured graph cannot do (recorded as skipped).
    """

    def step(images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return train_step(prepared, images, labels, optimizer, scaler, device.type,
                          annotate=not prepared.compiled_step)

    run: Step = step
    if prepared.compiled_step:
        if prepared.compiler is None:
            raise RuntimeError("+compiled-step without +compile: the mode gave no compiler")
        run = prepared.compiler(step)
    if prepared.capture_step:
        if scaler is not None:
            raise ClsbenchError("+cudagraph cannot capture a training step with a gradient scaler (amp-fp16: it "
                                "reads the inf/NaN check back every step); use amp-bf16, which needs none")
        run = GraphedStep(run)
    return run


class GraphedStep:
    """A training step captured into one CUDA graph on its first call, then replayed.

    The first call's images and labels become the graph's static inputs; a later call with other tensors copies
    them in (a real-data batch), one with the same tensors (the resident synthetic batch) copies nothing. The loss
    returned is the graph's static output, overwritten by the next replay. Gradients are set to None before
    capture, so the captured backward allocates them from the graph's private pool and every replay refills them.

    The first call runs :data:`CAPTURE_WARMUP_STEPS` real steps before the capture (which computes nothing) and the
    first replay; their losses are kept in ``warmup_losses``, so a parity check can count every update made.
    """

    def __init__(self, step: Step) -> None:
        self._step = step
        self._graph: torch.cuda.CUDAGraph | None = None
        self.static_images: torch.Tensor | None = None
        self.static_labels: torch.Tensor | None = None
        self._loss: torch.Tensor | None = None
        self.warmup_losses: list[torch.Tensor] = []

    def _capture(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.static_images, self.static_labels = images, labels
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(CAPTURE_WARMUP_STEPS):  # creates the optimizer state; cuDNN autotunes outside capture
                self.warmup_losses.append(self._step(images, labels).detach())
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._loss = self._step(images, labels)
        self._graph = graph

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self._graph is None:
            self._capture(images, labels)
        assert self._graph is not None and self.static_images is not None and self.static_labels is not None
        for new, static in ((images, self.static_images), (labels, self.static_labels)):
            if new is not static:
                if new.shape != static.shape:
                    raise ValueError(f"training step captured for {tuple(static.shape)}, got {tuple(new.shape)}")
                static.copy_(new, non_blocking=True)
        self._graph.replay()
        assert self._loss is not None
        return self._loss
