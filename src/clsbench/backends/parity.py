"""Output parity: does the backend still compute the network it was given?

The reference is fp32 eager PyTorch: the same architecture built from the same model name and seed (so the same
weights as every repeat's model), in fp32, contiguous, with TF32 off, on the same device, fed a fixed seeded batch
(standard-normal noise, the range of ImageNet-normalised pixels) of the request's shape. The backend gets the same
batch in its own dtype and memory format.

Figures:

- ``max_abs_err_rel`` = max over the batch and classes of ``|out - ref|``, divided by ``max |ref|``, the largest
  absolute reference logit in the batch (the logits' scale). Single logits near zero make element-wise relative
  errors meaningless; the scale of the whole batch does not. The same figure ``clsbench tune`` uses.
- ``top1_agreement_pct``: the share of images whose arg-max class is the same, in %.

A backend passes when its error is within the tolerance of its precision (:data:`PARITY_TOLERANCE`); otherwise
the record is marked ``parity_failed``: its figures are kept and shown, and ``tune`` never picks it. Top-1
agreement is reported, not judged: with seeded random weights the top two logits of an image often differ by less
than a bf16 rounding step, so a flipped arg-max says nothing the error figure does not; and where the error is
within tolerance ``t``, only an image whose top-two margin is below ``2 t max|ref|`` can flip at all.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from clsbench.backends.base import PARITY_FAILED, BackendRequest

if TYPE_CHECKING:
    import torch

    from clsbench.modes import Prepared

#: Maximum ``max_abs_err_rel`` by precision. Each is about ten units of roundoff of the narrowest format the
#: backend computes in: fp16 and TF32 keep 10 mantissa bits (2^-11 = 4.9e-4 -> 5e-3), bf16 keeps 7 (2^-8 = 3.9e-3
#: -> 5e-2); fp32 backends and modes differ from fp32 eager only by summation order and folding (batch norm into
#: the convolution, fused epilogues, compile, channels_last), which stays well below 1e-4. ``clsbench tune`` holds
#: eager modes to the same table (``OUTPUT_RTOL`` in procedures/tune/settings.py is this dict). Measured on a CPU
#: for eager modes (torch 2.14, batch 4, 224x224, seeded weights): amp-bf16 4.0e-3 (resnet18), 4.8e-3 (resnet50),
#: 1.25e-2 (mobilenet_v3_large), 1.34e-2 (efficientnet_b0); amp-fp16 5.7e-4 / 7.7e-4 on the ResNets; fp32+cl <= 1.4e-6.
#: Measured on a CPU for backends (torch 2.14, seed 0, batch 4): the tiny test net through torchscript, export and
#: onnxruntime in fp32 <= 1.3e-7, in bf16 3.5e-3, in fp16 3.5e-4; eager with weights cast, at 128x128: bf16 5.1e-3
#: (resnet18), 4.4e-3 (resnet50), 1.2e-2 (mobilenet_v3_large), 1.5e-2 (efficientnet_b0); fp16 3.0e-3 (resnet18),
#: 3.1e-3 (resnet50), closer to its limit than bf16 is to its own, and 1.0 on mobilenet_v3_large and
#: efficientnet_b0, whose random-weight logits (~1e-10, ~1e-14) fp16 flushes to zero: rightly a failure.
#: fp8 (:mod:`clsbench.modes.fp8`: the Linear layers' inputs and weights in e4m3, one dynamic scale per tensor, bf16
#: elsewhere) keeps 3 mantissa bits: a unit roundoff of 2^-4 = 6.25e-2, 16 times bf16's, so ten units would pass
#: anything. Its errors do not add up linearly either: per-element roundings of random sign average out in each dot
#: product, and they came out 7 to 9 times bf16's, not 16. Measured on a CPU (torch 2.14, seed 0, timm ViTs, the
#: Linear layers quantised as torchao 0.17 does, accumulated in fp32): batch 4, vit_tiny 0.125 through torchao's
#: own quantize_ (its CPU path) and 0.119 emulated; batch 16, emulated, inference / training forward: vit_tiny
#: 0.115 / 0.118, vit_small 0.096 / 0.091, vit_base 0.104 / 0.095 (bf16 1.1e-2 to 1.6e-2 on the same nets). 0.25
#: is four units of e4m3 roundoff, twice the largest of those; a network that computes something else (a wrong
#: scale, a saturated cast, a layer fed the wrong weights) differs by the order of the logits' scale itself, 1.
PARITY_TOLERANCE: dict[str, float] = {
    "fp32": 1e-4,
    "tf32": 5e-3,
    "amp-fp16": 5e-3,
    "fp16": 5e-3,
    "amp-bf16": 5e-2,
    "bf16": 5e-2,
    "fp8": 0.25,
}
#: Seed of the parity batch (the workloads' default data seed, so parity sees the inputs the workloads time).
PARITY_DATA_SEED = 0
REFERENCE = "fp32 eager PyTorch, contiguous, TF32 off, same weights (model name + seed), same device"


def tolerance_for(request: BackendRequest) -> float:
    """The tolerance of the request's precision (fp32's for an unknown one)."""
    return PARITY_TOLERANCE.get(request.precision, PARITY_TOLERANCE["fp32"])


def parity_input(request: BackendRequest, data_seed: int = PARITY_DATA_SEED) -> torch.Tensor:
    """The fixed batch: ``randn`` of the request's shape from ``data_seed``, fp32, contiguous, on the CPU."""
    import torch

    return torch.randn(request.input_shape, generator=torch.Generator().manual_seed(data_seed))


@contextlib.contextmanager
def _true_fp32() -> Iterator[None]:
    """TF32 off for the reference (a ``tf32`` mode sets it process-wide), restored afterwards."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                 torch.get_float32_matmul_precision())
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[0], saved[1]
            torch.set_float32_matmul_precision(saved[2])


def reference_logits(request: BackendRequest, images: torch.Tensor) -> torch.Tensor:
    """fp32 eager logits of the request's model (built from its name and seed) for ``images``, on the CPU."""
    import torch

    from clsbench.models import get_model_spec

    device = torch.device(request.device)
    spec = get_model_spec(request.model)
    model = spec.build(seed=request.seed, num_classes=request.num_classes, input_size=request.input_size)
    model = model.to(device).eval()
    with _true_fp32(), torch.inference_mode():
        out = model(images.to(device)).float().cpu()
    del model
    return out


def parity_figures(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, float]:
    """``(max_abs_err_rel, top1_agreement_pct, scale)`` of logits ``out`` against ``ref`` (both ``(N, C)``).

    A non-finite output gives an infinite error; an all-zero reference is judged on the absolute error.
    """
    import torch

    out64, ref64 = out.detach().to("cpu", torch.float64), ref.detach().to("cpu", torch.float64)
    if out64.shape != ref64.shape:
        raise ValueError(f"the backend returned shape {tuple(out64.shape)}, the reference {tuple(ref64.shape)}")
    scale = float(ref64.abs().max()) if ref64.numel() else 0.0
    if not bool(torch.isfinite(out64).all()):
        error = math.inf
    else:
        diff = float((out64 - ref64).abs().max()) if ref64.numel() else 0.0
        error = diff / scale if scale > 0 else diff
    top1 = 100.0 * float((out64.argmax(dim=1) == ref64.argmax(dim=1)).double().mean()) if len(ref64) else 100.0
    return error, top1, scale


#: float16's smallest normal number (2^-14): logits below it lose precision, and below 2^-24 they become zero.
FP16_SMALLEST_NORMAL = 2.0 ** -14


def underflow_note(scale: float | None, dtype_name: str | None) -> str | None:
    """Why a float16 output cannot match: the reference logits' largest magnitude (``scale``) is below float16's
    smallest normal number. Seeded random weights can make a network's logits that small (MobileNetV3-Large, seed 0:
    8.0e-10 in fp32, and all zeros cast to fp16); bfloat16 keeps fp32's exponent range. None when that is not so."""
    if dtype_name != "float16" or scale is None or not 0 < scale < FP16_SMALLEST_NORMAL:
        return None
    return (f"the fp32 logits' largest magnitude is {scale:.2g}, below float16's smallest normal number "
            f"({FP16_SMALLEST_NORMAL:.2g}): this model's seeded random-weight logits underflow float16; "
            "bf16 keeps fp32's range")


def judge_parity(error: float, top1_pct: float, tolerance: float, *, dtype_name: str | None = None,
                 **extra: Any) -> dict[str, Any]:
    """The parity record: figures, tolerance, verdict (pure); a failed float16 check whose reference logits
    underflow float16 says so (:func:`underflow_note`, from ``extra``'s ``scale``)."""
    passed = error <= tolerance  # False for inf and NaN
    detail = None
    if not passed:
        detail = (f"outputs differ from fp32 eager by {error:.3g} of the logits' scale "
                  f"(tolerance {tolerance:g}); top-1 agreement {top1_pct:.1f}%")
        note = underflow_note(extra.get("scale"), dtype_name)
        detail = f"{detail}; {note}" if note else detail
    return {"max_abs_err_rel": error, "top1_agreement_pct": top1_pct, "tolerance": tolerance, "passed": passed,
            "reason": None if passed else PARITY_FAILED, "detail": detail, **extra}


def run_prepared(prepared: Prepared, images: torch.Tensor, device: str) -> torch.Tensor:
    """Logits of ``prepared`` for ``images``, fed as the workloads feed it (its dtype, memory format, autocast)."""
    import torch

    dev = torch.device(device)
    x = images.to(dtype=prepared.input_dtype).contiguous(memory_format=prepared.memory_format).to(dev)
    with torch.inference_mode(), prepared.autocast(dev.type):
        out = prepared.forward(x)
        out = out[0] if isinstance(out, (tuple, list)) else out
        return out.float().cpu()  # a copy: a backend's output buffer is overwritten by its next call


def check_parity(prepared: Prepared, request: BackendRequest, *, data_seed: int = PARITY_DATA_SEED,
                 tolerance: float | None = None, reference: torch.Tensor | None = None) -> dict[str, Any]:
    """Compare ``prepared`` (any backend, eager included) with fp32 eager on the fixed batch; never raises.

    Call it outside the timed region (before the workload, or after it): it builds and runs a reference model.

    Args:
        prepared: what :func:`~clsbench.backends.apply.apply_backend` returned (or a mode's eager Prepared).
        request: the measurement; its model, seed, shape and device make the reference.
        data_seed: seed of the batch.
        tolerance: overrides :func:`tolerance_for`.
        reference: precomputed reference logits for this batch (several backends of one cell share one).

    Returns:
        ``{"max_abs_err_rel", "top1_agreement_pct", "tolerance", "passed", "reason", "detail", "scale", "batch",
        "data_seed", "reference", "check_s"}``; ``reason`` is ``parity_failed`` when not passed. A check that
        cannot run at all (the backend raises) is not passed, with the error in ``detail`` and no figures.
    """
    t0 = time.perf_counter()
    limit = tolerance_for(request) if tolerance is None else tolerance
    extra = {"batch": request.batch_size, "data_seed": data_seed, "reference": REFERENCE}
    try:
        images = parity_input(request, data_seed)
        ref = reference if reference is not None else reference_logits(request, images)
        out = run_prepared(prepared, images, request.device)
        error, top1, scale = parity_figures(out, ref)
    except Exception as exc:  # noqa: BLE001 - a check that cannot run fails the check, not the suite
        from clsbench.backends.base import first_line

        return {"max_abs_err_rel": None, "top1_agreement_pct": None, "tolerance": limit, "passed": False,
                "reason": PARITY_FAILED, "detail": f"the parity check could not run: {first_line(exc)}",
                "scale": None, **extra, "check_s": time.perf_counter() - t0}
    return judge_parity(error, top1, limit, dtype_name=request.dtype_name, scale=scale, **extra,
                        check_s=time.perf_counter() - t0)
