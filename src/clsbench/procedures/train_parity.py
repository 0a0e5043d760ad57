"""Training parity: does a mode's training step train like fp32 eager? The loss after N steps, compared.

:func:`train_parity` builds the network afresh for each case with the same seed (identical weights), feeds it the
same seeded batch as the train workload (``randn`` from ``data_seed``, labels from ``data_seed + 1``), and runs the
step exactly as a worker runs it: the mode applied by ``parse_mode(mode).configure`` and ``.prepare``, the
optimizer and the step from :mod:`clsbench.workloads.step` (``+foreach``, ``+fused``, ``+compiled-step``,
``+cudagraph`` included). The reference is plain fp32 eager with the default optimizer, for as many steps as the
case made: a captured step (``+cudagraph``) makes its warm-up steps before the capture, and they count.

The verdict uses the tune module's tolerances (:mod:`clsbench.procedures.tune`): the first loss (the forward
before any update) within the precision's output tolerance (``tolerance_for``), the loss after the last step within
``TRAIN_LOSS_RTOL``. Each entry has the shape of ``tune.output_errors``' entries (``metric``, ``error``,
``error_last``, ``detail``), so ``tune.judge`` reads it too. Run it in a fresh process where flags must not leak
(TF32, cuDNN), as tune runs its own check.
"""

from __future__ import annotations

import gc
import importlib
import math
from collections.abc import Sequence
from typing import Any

from clsbench.core.plan import TrainSettings
from clsbench.procedures.tune import TRAIN_CHECK_STEPS, TRAIN_LOSS_RTOL, tolerance_for

#: The mode every case is compared with: fp32 eager, the default optimizer.
REFERENCE_MODE = "fp32"


def quiet_random_layers(model: Any) -> None:
    """Dropout and stochastic depth off (eval) inside a training model, so that compiled and eager code draw no
    different random masks; BatchNorm stays in training mode."""
    for module in model.modules():
        name = type(module).__name__
        if "Dropout" in name or "DropPath" in name or "StochasticDepth" in name:
            module.eval()


def train_losses(model: str, mode: str, batch_size: int, device: str, *, steps: int = TRAIN_CHECK_STEPS,
                 seed: int = 0, data_seed: int = 0, input_size: int | None = None, compile_mode: str = "default",
                 cudnn_benchmark: bool = True, train: TrainSettings | None = None,
                 num_classes: int = 1000) -> list[float] | str:
    """The loss of every update ``mode``'s training step made in ``steps`` calls (more than ``steps`` when a
    captured step warmed up first), or a string saying why the mode cannot run here."""
    import torch

    from clsbench.measure.device import device_capabilities
    from clsbench.models import get_model_spec
    from clsbench.modes import parse_mode
    from clsbench.workloads.step import build_optimizer, make_step

    dev = torch.device(device)
    parsed = parse_mode(mode)
    bf16, tf32 = device_capabilities(dev)
    ctx = parsed.context(dev, "train", bf16_supported=bf16, tf32_supported=tf32, compile_mode=compile_mode)
    reason = parsed.unsupported_reason(ctx)
    if reason:
        return f"unsupported here: {reason}"
    torch.backends.cudnn.benchmark = cudnn_benchmark
    parsed.configure(ctx)
    spec = get_model_spec(model)
    side = input_size or spec.input_size
    net = spec.build(seed=seed, num_classes=num_classes, input_size=input_size).to(dev)
    try:
        prepared = parsed.prepare(net, ctx)
        prepared.model.train()
        quiet_random_layers(prepared.model)
        scaler = torch.amp.GradScaler(dev.type) if prepared.grad_scaler else None
        step = make_step(prepared, build_optimizer(prepared, train or TrainSettings()), scaler, dev)
        images = torch.randn((batch_size, 3, side, side), generator=torch.Generator().manual_seed(data_seed))
        x = images.to(dtype=prepared.input_dtype).contiguous(memory_format=prepared.memory_format).to(dev)
        labels = torch.randint(0, num_classes, (batch_size,), generator=torch.Generator().manual_seed(data_seed + 1))
        labels = labels.to(dev)
        losses = [float(step(x, labels).detach()) for _ in range(steps)]
        return [float(loss) for loss in getattr(step, "warmup_losses", [])] + losses
    finally:
        if "compile" in {m.split(":")[0] for m in parsed.modifier_names}:
            # Every fresh module recompiles the same code; without a reset dynamo's recompile limit would silently
            # fall back to eager after a few cases.
            importlib.import_module("torch._dynamo").reset()


def relative_error(value: float, reference: float) -> float:
    """``|value - reference| / |reference|``; infinite for a non-finite value."""
    if not math.isfinite(value):
        return math.inf
    return abs(value - reference) / abs(reference) if reference else (0.0 if value == reference else math.inf)


def compare_losses(mode: str, losses: list[float] | str, reference: list[float]) -> dict[str, Any]:
    """One case's entry: the first and last losses' relative errors against the reference's, and the verdict."""
    entry: dict[str, Any] = {"metric": "loss", "error": None, "error_last": None, "detail": None,
                             "steps": None, "tolerance": tolerance_for(mode), "tolerance_last": TRAIN_LOSS_RTOL,
                             "ok": False, "reason": None}
    if isinstance(losses, str):
        entry["detail"] = entry["reason"] = losses
        return entry
    entry["steps"] = len(losses)
    entry["error"] = relative_error(losses[0], reference[0])
    entry["error_last"] = relative_error(losses[-1], reference[len(losses) - 1])
    if not entry["error"] <= entry["tolerance"]:
        entry["reason"] = (f"the first-step loss differs from fp32 eager's by {entry['error']:.3g} (relative; "
                           f"tolerance {entry['tolerance']:g})")
    elif not entry["error_last"] <= TRAIN_LOSS_RTOL:
        entry["reason"] = (f"the loss after {len(losses)} steps differs from fp32 eager's by "
                           f"{entry['error_last']:.3g} (relative; tolerance {TRAIN_LOSS_RTOL:g})")
    else:
        entry["ok"] = True
    return entry


def free_memory(device: str) -> None:
    """Collect the previous case's network, optimizer state and graphs, and on a GPU hand the cached blocks back, so
    that every case starts from the same memory (tune checks several candidates in one process)."""
    import torch

    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def train_parity(model: str, device: str, cases: Sequence[tuple[str, int]], *, steps: int = TRAIN_CHECK_STEPS,
                 **kwargs: Any) -> dict[tuple[str, int], dict[str, Any]]:
    """Compare each ``(mode, batch_size)`` case's training losses with fp32 eager's, in this process.

    Args:
        kwargs: ``seed``, ``data_seed``, ``input_size``, ``compile_mode``, ``cudnn_benchmark``, ``train``,
            ``num_classes``, as :func:`train_losses` takes them.

    Returns:
        For each case, :func:`compare_losses`' entry: ``error`` and ``error_last`` (relative errors of the first
        and last loss), ``steps`` (updates compared), ``tolerance`` and ``tolerance_last``, ``ok``, ``reason``, and
        ``detail`` when the case could not run (a mode this device cannot run, or the error it raised).
    """
    references: dict[int, list[float]] = {}
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for mode, batch in cases:
        try:
            losses = train_losses(model, mode, batch, device, steps=steps, **kwargs)
            needed = steps if isinstance(losses, str) else len(losses)
            if len(references.get(batch, [])) < needed:
                reference = train_losses(model, REFERENCE_MODE, batch, device, steps=needed, **kwargs)
                if isinstance(reference, str):
                    raise RuntimeError(f"the fp32 eager reference cannot run: {reference}")
                references[batch] = reference
            out[(mode, batch)] = compare_losses(mode, losses, references[batch])
        except Exception as exc:  # noqa: BLE001 - a case that cannot run is reported, the others go on
            text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
            out[(mode, batch)] = compare_losses(mode, f"the check failed: {text}", [])
        finally:
            free_memory(device)
    return out
