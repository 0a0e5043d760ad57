"""``fp8``: the Linear layers' matrix multiplications in float8 (e4m3) through torchao; everything else in bf16.

What runs in fp8 is only what torchao converts: the ``nn.Linear`` layers whose two dimensions are multiples of 16
(:data:`FP8_DIM_MULTIPLE`), outside ``nn.MultiheadAttention``. Their inputs and weights are scaled per tensor
(dynamic scaling: one scale from each tensor's absolute maximum, every call), cast to e4m3 and multiplied on the
fp8 tensor cores by ``torch._scaled_mm``; the result comes back in bf16. The rest of the network (convolutions,
normalisation, attention's softmax and its two batched matmuls, activations) runs in bf16, exactly as the
matching bf16 mode runs it:

- inference: the weights and the input are cast to bf16, as in ``bf16``, then
  ``torchao.quantization.quantize_(model, Float8DynamicActivationFloat8WeightConfig(), filter_fn=...)`` stores the
  eligible weights in e4m3 and quantises each activation as it arrives. The baseline to compare with is ``bf16``.
- train: the fp32 master weights stay, under bf16 autocast, as in ``amp-bf16``, and
  ``torchao.float8.convert_to_float8_training(model, module_filter_fn=...)`` swaps the eligible layers for
  ``Float8Linear`` (forward and both backward matmuls in fp8: e4m3 for inputs and weights, e5m2 for gradients).
  The baseline to compare with is ``amp-bf16``; no gradient scaler is needed (the scales are per tensor).

torchao's recommended Inductor settings (``set_inductor_config``, which turns on coordinate-descent tuning and TF32
process-wide) are NOT applied: the only difference between ``fp8+compile`` and ``bf16+compile`` must be the
Linear layers. fp8 is fast only under ``+compile``: in eager PyTorch every converted layer launches the scaling
(absolute maximum, divide, cast) as separate kernels, which Inductor fuses into the neighbouring ops. Small
matrices (a ViT-Tiny's 192-wide layers) can be slower in fp8 than in bf16 even compiled, so the mode is measured,
never assumed faster.

The mode refuses, with one reason line (the measurement is recorded as skipped, ``unsupported_mode``): a device
other than an NVIDIA GPU of compute capability 8.9 or newer (:data:`FP8_MIN_CAPABILITY`: Ada, Hopper and later;
torchao itself asserts the same), a machine without torchao, and a network none of whose Linear layers can be
converted (a CNN whose classifier maps to 1000 classes: 1000 is not a multiple of 16). The last is known only once
the network is built, so the worker refuses it while preparing the model; every other refusal is made before.
The mode notes record how many Linear layers were converted and skipped, and why each was skipped.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import clsbench.modes.precision  # noqa: F401 - the plain precisions register first, so listings name them first
from clsbench.errors import ClsbenchError
from clsbench.measure.device import set_tf32
from clsbench.modes.base import PRECISIONS, ModeContext, Prepared

#: The first compute capability with fp8 tensor cores: Ada (sm_89); Hopper is 9.0. ``torch._scaled_mm`` and torchao's
#: own hardware check (``torchao.float8.inference._check_hardware_support``) require it.
FP8_MIN_CAPABILITY = (8, 9)
#: Both dimensions of a Linear layer must be multiples of this for fp8: cuBLASLt's fp8 matmul, which
#: ``torch._scaled_mm`` calls, needs 16-byte-aligned leading dimensions (16 one-byte elements); torchao's own filters
#: (``torchao.float8.float8_linear_utils._auto_filter_for_tensorwise``) skip the others for the same reason.
FP8_DIM_MULTIPLE = 16
#: How to get torchao, for the refusal line.
TORCHAO_INSTALL = "pip install torchao"
#: At most this many skipped layers are named in the mode notes (a network may skip hundreds for one reason).
MAX_NAMED_SKIPS = 8
#: What each workload kind runs, for the mode notes.
RECIPES = {
    "inference": "torchao Float8DynamicActivationFloat8WeightConfig: e4m3 weights and activations, one scale per "
                 "tensor (dynamic); bf16 weights and input elsewhere",
    "train": "torchao convert_to_float8_training (Float8LinearConfig defaults): tensorwise dynamic scaling, e4m3 "
             "inputs and weights, e5m2 gradients; fp32 master weights under bf16 autocast elsewhere",
}


@dataclass(frozen=True)
class LinearChoice:
    """What the fp8 mode does with one ``nn.Linear`` layer.

    Attributes:
        name: the layer's qualified name in the network (``blocks.0.mlp.fc1``).
        in_features, out_features: its dimensions.
        skip_reason: why it stays in bf16, or None: it is converted to fp8.
    """

    name: str
    in_features: int
    out_features: int
    skip_reason: str | None = None

    @property
    def converted(self) -> bool:
        return self.skip_reason is None


def linear_skip_reason(layer: nn.Linear, parent: nn.Module | None) -> str | None:
    """Why ``layer`` (a child of ``parent``) cannot run in fp8, or None when it can (pure; needs no torchao)."""
    if isinstance(parent, nn.MultiheadAttention):
        # MultiheadAttention multiplies by out_proj.weight itself (F.multi_head_attention_forward) and never calls
        # the layer, so a swapped layer would never run; torchao's own default filter skips it too.
        return "inside nn.MultiheadAttention, which uses the weight directly and never calls the layer"
    if layer.in_features % FP8_DIM_MULTIPLE or layer.out_features % FP8_DIM_MULTIPLE:
        return (f"{layer.in_features}x{layer.out_features}: fp8 matrix multiplications need both dimensions to be "
                f"multiples of {FP8_DIM_MULTIPLE}")
    return None


def linear_choices(model: nn.Module) -> list[LinearChoice]:
    """Every ``nn.Linear`` layer of ``model`` (a shared one once), in module order, with what fp8 does with it."""
    choices: list[LinearChoice] = []
    seen: set[int] = set()
    for parent_name, parent in model.named_modules():
        for child_name, child in parent.named_children():
            if not isinstance(child, nn.Linear) or id(child) in seen:
                continue
            seen.add(id(child))
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            choices.append(LinearChoice(name, child.in_features, child.out_features,
                                        linear_skip_reason(child, parent)))
    return choices


def module_filter(choices: list[LinearChoice]) -> Callable[[nn.Module, str], bool]:
    """torchao's filter (``module_filter_fn`` / ``filter_fn``: module and qualified name in, convert or not out) that
    converts exactly the layers ``choices`` marks as converted."""
    names = frozenset(c.name for c in choices if c.converted)

    def convert(module: nn.Module, fqn: str) -> bool:
        return isinstance(module, nn.Linear) and fqn in names

    return convert


def conversion_facts(model: nn.Module, choices: list[LinearChoice]) -> dict[str, Any]:
    """The mode notes' counts: Linear layers converted and skipped (with the first reasons), and the share of the
    network's parameters the converted layers' weights hold (the part of the work fp8 can speed up)."""
    total = sum(p.numel() for p in model.parameters()) or 1
    weights = {name: module.weight.numel() for name, module in model.named_modules() if isinstance(module, nn.Linear)}
    converted = [c for c in choices if c.converted]
    skipped = [c for c in choices if not c.converted]
    return {
        "linear_layers": len(choices),
        "converted": len(converted),
        "skipped": len(skipped),
        "skipped_layers": {c.name: c.skip_reason for c in skipped[:MAX_NAMED_SKIPS]},
        "converted_weight_share": sum(weights.get(c.name, 0) for c in converted) / total,
    }


def refusal_for_model(model: nn.Module, choices: list[LinearChoice]) -> str | None:
    """Why fp8 has nothing to measure on ``model``: no Linear layer it can convert (it would run as plain bf16 under
    another name), or None."""
    if any(c.converted for c in choices):
        return None
    kind = type(model).__name__
    if not choices:
        return f"fp8 converts Linear layers only, and this {kind} has none: it would run as bf16, nothing to measure"
    shown = "; ".join(f"{c.name}: {c.skip_reason}" for c in choices[:2])
    layers = "layer" if len(choices) == 1 else "layers"
    return (f"fp8 converts Linear layers only, and none of this {kind}'s {len(choices)} Linear {layers} can be "
            f"converted ({shown}): it would run as bf16, nothing to measure")


@functools.lru_cache(maxsize=8)
def _nvml_capability(index: int) -> tuple[int, int] | None:
    """The compute capability of ``cuda:index`` read through NVML (no CUDA context), or None when unreadable."""
    from clsbench.system.nvml import open_nvml, open_nvml_handle, shutdown

    nvml, _ = open_nvml()
    if nvml is None:
        return None
    try:
        handle, _, _ = open_nvml_handle(nvml, index)
        if handle is None:
            return None
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        return int(major), int(minor)
    except Exception:  # noqa: BLE001 - an unreadable capability is left to the worker, which asks CUDA
        return None
    finally:
        shutdown(nvml)


def cuda_capability(device: torch.device) -> tuple[int, int] | None:
    """The compute capability of a CUDA ``device``, without creating a CUDA context where there is none yet.

    A worker has its context already and asks torch; the parent process (planning, tune) must not create one, since
    its forked workers could then not use CUDA, so it reads NVML. None: unknown here (the worker checks again).
    """
    if torch.cuda.is_initialized():
        return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]
    return _nvml_capability(device.index or 0)


def torchao_available() -> bool:
    """Whether torchao can be imported (found on the path; importing it is left to the worker, which needs it)."""
    return importlib.util.find_spec("torchao") is not None


def device_refusal(device: torch.device) -> str | None:
    """Why fp8 cannot run on ``device`` at all, whatever the network and workload, or None."""
    if device.type != "cuda" or torch.version.hip is not None:
        where = "a ROCm GPU" if device.type == "cuda" else device.type
        return (f"fp8 needs an NVIDIA GPU of compute capability {FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]} or "
                f"newer (fp8 tensor cores); this device is {where}")
    capability = cuda_capability(device)
    if capability is not None and tuple(capability) < FP8_MIN_CAPABILITY:
        return (f"fp8 needs compute capability {FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]} or newer (Ada, "
                f"Hopper: fp8 tensor cores); this GPU has {capability[0]}.{capability[1]}")
    if not torchao_available():
        return f"fp8 needs torchao, which is not installed ({TORCHAO_INSTALL})"
    return None


def _torchao_version() -> str | None:
    try:
        return importlib.metadata.version("torchao")
    except importlib.metadata.PackageNotFoundError:
        return None


class Fp8Precision:
    """The ``fp8`` precision (module docstring)."""

    name = "fp8"

    def unsupported_reason(self, ctx: ModeContext) -> str | None:
        return device_refusal(ctx.device)

    def configure(self, ctx: ModeContext) -> dict[str, Any]:
        return set_tf32(False)  # as every precision but tf32: nothing left in fp32 may silently use TF32

    def apply(self, prepared: Prepared, ctx: ModeContext) -> Prepared:
        model = prepared.model
        choices = linear_choices(model)
        refused = refusal_for_model(model, choices)
        if refused:
            raise ClsbenchError(refused)
        keep = module_filter(choices)
        facts = conversion_facts(model, choices)
        if ctx.workload_kind == "train":
            from torchao.float8 import convert_to_float8_training

            prepared.model = convert_to_float8_training(model, module_filter_fn=keep)
            prepared.autocast_dtype = torch.bfloat16
        else:
            from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, quantize_

            model = model.to(dtype=torch.bfloat16)
            quantize_(model, Float8DynamicActivationFloat8WeightConfig(set_inductor_config=False), filter_fn=keep)
            prepared.model = model
            prepared.input_dtype = torch.bfloat16
        prepared.forward = prepared.model
        prepared.notes["fp8"] = {**facts, "recipe": RECIPES["train" if ctx.workload_kind == "train" else "inference"],
                                 "torchao": _torchao_version(), "inductor_config": "torch defaults (torchao's "
                                 "recommended settings not applied)"}
        return prepared


PRECISIONS.register("fp8", Fp8Precision())
