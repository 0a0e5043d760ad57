"""Model costs per image: FLOPs (forward, training step), parameters, and a minimal memory-traffic estimate.

Everything here is counted, not timed: shapes alone decide the answer, so it is counted on the ``meta`` device
(no memory, no arithmetic) whenever the model runs there, and on the CPU otherwise. The model passed in is
never touched: a copy with meta-device parameters is made (see :func:`_copy_to`), and the global RNG state
is restored afterwards.

FLOPs: :class:`torch.utils.flop_counter.FlopCounterMode`, which counts matmul, convolution and attention
(SDPA) only, at 2 FLOPs per multiply-accumulate, the convention behind published "GMACs" figures (ResNet-50:
4.1 GMACs = 8.2 GFLOPs at 224x224). Elementwise work (normalisation, activations, residual adds, softmax,
pooling) is not counted; in image classifiers it is well under 1% of the multiply-adds.

One correction is applied: up to at least torch 2.14, the counter's formula for the weight gradient of a
grouped convolution ignores ``groups``, so a depthwise convolution's backward pass is overcounted by a factor
of its channel count (MobileNetV3-Large's training step came out at 27x its forward pass instead of ~3x).
See pytorch/pytorch PR #183405 ("Fix unused groups in test_convs"), which divides by ``groups``. We replace the
formula for ``aten.convolution_backward`` with an exact one: each of the input gradient and the weight
gradient costs as many multiply-adds as the forward convolution (every product ``x[i] * w[j]`` of the forward
pass appears exactly once in each), which equals torch's own count for ungrouped convolutions.

Memory traffic: see :func:`count_model_costs` (``bytes_method``).
"""

from __future__ import annotations

import copy
import functools
from typing import TYPE_CHECKING, Any

from clsbench.errors import InvalidInputError

if TYPE_CHECKING:
    import torch

#: Batch size of the counted training step. Per-image FLOPs are linear in the batch for every counted op, but
#: batch norm in training mode refuses a batch of one wherever a feature map has shrunk to 1x1 (SE blocks,
#: some heads: "Expected more than 1 value per channel when training"), so the step is counted at two images
#: and halved.
TRAIN_COUNT_BATCH = 2

#: Bytes per element of the default precision (fp32/tf32). fp16/bf16 modes pass 2.
DEFAULT_BYTES_PER_ELEMENT = 4

FLOPS_METHOD = (
    "torch.utils.flop_counter.FlopCounterMode: matmul, conv and SDPA only, 1 multiply-add = 2 FLOPs; "
    "grouped-conv backward corrected (weight gradient = forward multiply-adds); per image at batch 1 "
    "(training step: batch 2, halved); loss and optimizer step not counted"
)
BYTES_METHOD = (
    "unfused eager traffic: every floating-point tensor produced by a dispatched aten op in one batch-1 "
    "inference forward pass (views excluded, in-place ops included) written once and read once (2x its "
    "elements), plus the input image read once, plus every parameter read once; at bytes_per_element bytes "
    "per element"
)


def count_model_costs(
    model: torch.nn.Module,
    input_size: int,
    *,
    num_classes: int | None = None,
    in_chans: int = 3,
    bytes_per_element: int = DEFAULT_BYTES_PER_ELEMENT,
) -> dict[str, Any]:
    """Count FLOPs, parameters and minimal memory traffic per image of a classification network.

    FLOPs are counted with ``torch.utils.flop_counter.FlopCounterMode`` on the model itself (a meta-device
    copy of it) for a ``1 x in_chans x input_size x input_size`` input; see the module docstring for what is
    counted. ``forward_flops`` is one inference forward pass in eval mode under ``torch.no_grad``;
    ``train_step_flops`` is a forward pass in train mode plus the backward pass of a cross-entropy loss
    (all parameters that require grad get gradients). **The optimizer step is not counted** (it is
    elementwise, a few FLOPs per parameter), nor is the loss itself. A training step comes out near 3x the
    forward pass: the backward pass computes an input gradient and a weight gradient per layer, each as
    costly as the forward; the first layer needs no input gradient, so slightly under 3x.

    Memory traffic (``activation_bytes``) is estimated with a ``TorchDispatchMode`` over one batch-1
    inference forward pass: every floating-point tensor an aten op produces is counted as written once and
    read once (2x its size); views are free (they move no data); in-place ops count like out-of-place ones (an
    in-place ReLU reads and writes its tensor just the same), so ``ReLU(inplace=True)`` and ``ReLU()`` give
    the same answer. The input image is read once. This is dispatch level, not forward hooks on leaf modules,
    because the hooks would miss everything a model does functionally in its ``forward`` (residual adds,
    attention matmuls and softmax, concatenations, reshapes that copy), and their count would depend on how
    the author split the model into modules. It is the traffic of an *unfused* eager execution with perfect
    caching within each op: fused kernels (cuDNN conv+bias+activation, torch.compile, BN folded into the conv)
    move less, so the figure overstates their traffic (ResNet-50: 3.4x the outputs of its convolutions
    alone, MobileNetV3-Large 3.1x, ConvNeXt-T 2.2x); large tensors re-read by tiled kernels move more. On the
    meta device attention runs as SDPA's math path, so the ``heads x tokens x tokens`` score and softmax
    tensors count as traffic, which a flash-attention kernel never writes (about 20% of ViT-B/16's figure).
    Parameters are counted as read once per forward pass; a batch of B images reads them once for all B
    (divide ``param_bytes`` by B, see :func:`clsbench.analysis.efficiency.min_bytes_per_image`).

    Bytes are ``elements * bytes_per_element``, whatever dtype the model happens to be stored in: what
    matters is the precision the mode computes in (4 for fp32/tf32, 2 for fp16/bf16, AMP included: autocast
    reads fp16/bf16 copies of the weights in its matmuls and convolutions). The element counts are returned
    too, so bytes at another precision can be derived from a stored result.

    Args:
        model: the network; left exactly as it was (parameters, buffers, training flag, device).
        input_size: square input side in pixels.
        num_classes: the expected size of the output's class dimension; checked when given.
        in_chans: input channels.
        bytes_per_element: bytes per parameter and activation element.

    Returns:
        ``forward_flops``, ``train_step_flops``, ``params``, ``param_bytes``, ``activation_traffic_elements``,
        ``activation_bytes``, ``min_bytes_forward`` (param_bytes + activation_bytes),
        ``arithmetic_intensity_forward`` (forward_flops / min_bytes_forward, FLOP/byte),
        ``bytes_per_element``, ``input_size``, ``counted_on`` (``"meta"``, or ``"cpu"`` with the reason the
        meta device failed), ``flops_method`` and ``bytes_method`` (what was counted, in words). All per image.

    Raises:
        InvalidInputError: bad arguments, a model that does not produce a ``(batch, classes, ...)`` tensor, or
            one whose class dimension differs from ``num_classes``.
    """
    import torch

    for name, value, minimum in (("input_size", input_size, 1), ("in_chans", in_chans, 1),
                                 ("bytes_per_element", bytes_per_element, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise InvalidInputError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                    or num_classes < 1):
        raise InvalidInputError(f"num_classes must be a positive integer or None, got {num_classes!r}")

    params = sum(p.numel() for p in model.parameters())
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    shape = (in_chans, input_size, input_size)

    # Dropout and stochastic depth draw random numbers in training mode (on the CPU fallback); leave the
    # caller's CPU generator as it was. Nothing here runs on a CUDA device, so its generators are not touched.
    with torch.random.fork_rng(devices=[]):
        try:
            counts = _count(_copy_to(model, "meta"), torch.device("meta"), dtype, shape, num_classes)
            counted_on = "meta"
        except InvalidInputError:
            raise
        except Exception as exc:  # an op without a meta kernel, data-dependent control flow, stray CPU tensors
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
            counts = _count(_copy_to(model, "cpu"), torch.device("cpu"), dtype, shape, num_classes)
            counted_on = f"cpu (the meta device failed: {reason[:200]})"

    forward_flops, train_step_flops, activation_traffic_elements = counts
    param_bytes = params * bytes_per_element
    activation_bytes = activation_traffic_elements * bytes_per_element
    min_bytes_forward = param_bytes + activation_bytes
    return {
        "forward_flops": forward_flops,
        "train_step_flops": train_step_flops,
        "params": params,
        "param_bytes": param_bytes,
        "activation_traffic_elements": activation_traffic_elements,
        "activation_bytes": activation_bytes,
        "min_bytes_forward": min_bytes_forward,
        "arithmetic_intensity_forward": forward_flops / min_bytes_forward if min_bytes_forward else None,
        "bytes_per_element": bytes_per_element,
        "input_size": input_size,
        "counted_on": counted_on,
        "flops_method": FLOPS_METHOD,
        "bytes_method": BYTES_METHOD,
    }


def _copy_to(model: torch.nn.Module, device: str) -> torch.nn.Module:
    """A deep copy of ``model`` whose parameters and buffers live on ``device`` (``"meta"`` or ``"cpu"``).

    ``copy.deepcopy`` is handed a memo that already maps every parameter and buffer to its twin on ``device``
    (same shape, dtype and ``requires_grad``), so it builds the module tree around those and never copies a
    weight where it lies: on the meta device nothing is allocated at all, whatever the model's size, and a
    model on a GPU is not duplicated in GPU memory. Tied weights stay tied, as the memo is keyed by object.
    Tensors a model keeps in plain attributes are copied as they are; if one is then mixed with meta
    tensors, the forward pass fails and the caller falls back to the CPU.
    """
    import torch

    def twin(t: torch.Tensor) -> torch.Tensor:
        if device == "meta":
            return torch.empty_like(t, device="meta")
        return t.detach().to(device, copy=True)

    memo: dict[int, Any] = {}
    for p in model.parameters():
        memo[id(p)] = torch.nn.Parameter(twin(p), requires_grad=p.requires_grad)
    for b in model.buffers():
        memo[id(b)] = twin(b)
    return copy.deepcopy(model, memo)


def _count(
    model: torch.nn.Module,
    device: torch.device,
    dtype: torch.dtype,
    shape: tuple[int, int, int],
    num_classes: int | None,
) -> tuple[int, int, int]:
    """(forward FLOPs, training-step FLOPs, activation traffic in elements) per image, on ``model`` (a private copy)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    mapping = {torch.ops.aten.convolution_backward: _conv_backward_flop}

    model.eval()
    x = torch.zeros((1, *shape), device=device, dtype=dtype)
    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        _logits(model(x), num_classes)
    forward_flops = counter.get_total_flops()

    with torch.no_grad(), _activation_counter_class()() as traffic:
        model(x)
    activation_traffic_elements = 2 * traffic.elements + x.numel()  # each output written + read; image read

    model.train()
    x = torch.zeros((TRAIN_COUNT_BATCH, *shape), device=device, dtype=dtype)
    with torch.enable_grad(), FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        logits = _logits(model(x), num_classes)
        target = torch.zeros((logits.shape[0], *logits.shape[2:]), device=device, dtype=torch.long)
        loss = torch.nn.functional.cross_entropy(logits.float(), target)
        if loss.requires_grad:  # a model with every parameter frozen has no backward pass to count
            loss.backward()
    train_step_flops = counter.get_total_flops() // TRAIN_COUNT_BATCH
    return forward_flops, train_step_flops, activation_traffic_elements


def _logits(output: Any, num_classes: int | None) -> torch.Tensor:
    """The logits tensor of a model's output: the tensor itself, or the first tensor of a tuple/list/dict."""
    import torch
    from torch.utils._pytree import tree_leaves

    tensor = output if isinstance(output, torch.Tensor) else next(
        (t for t in tree_leaves(output) if isinstance(t, torch.Tensor)), None)
    if tensor is None or tensor.dim() < 2:
        got = "no tensor" if tensor is None else f"shape {tuple(tensor.shape)}"
        raise InvalidInputError(f"the model must return (batch, classes, ...) logits; it returned {got}")
    if num_classes is not None and tensor.shape[1] != num_classes:
        raise InvalidInputError(f"the model returns {tensor.shape[1]} classes, expected {num_classes}")
    return tensor


def _conv_backward_flop(
    grad_out_shape: list[int],
    x_shape: list[int],
    w_shape: list[int],
    _bias: Any,
    _stride: Any,
    _padding: Any,
    _dilation: Any,
    transposed: bool,
    _output_padding: Any,
    _groups: int,
    output_mask: list[bool],
    out_shape: Any = None,
    **kwargs: Any,
) -> int:
    """FLOPs of ``aten.convolution_backward``: the forward conv's count once per gradient computed.

    The weight shape already carries the group division (``[C_out, C_in / groups, kh, kw]``), so the forward
    formula is exact for grouped and depthwise convolutions; torch's own weight-gradient formula is not.
    """
    from torch.utils.flop_counter import conv_flop_count

    forward = conv_flop_count(x_shape, w_shape, grad_out_shape, transposed=transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


@functools.cache
def _activation_counter_class() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class ActivationCounter(TorchDispatchMode):
        """Sums the elements of every floating-point tensor produced by an aten op, views excluded."""

        def __init__(self) -> None:
            super().__init__()
            self.elements = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if not _is_view(func):
                self.elements += sum(t.numel() for t in tree_leaves(out) if _is_float_tensor(t))
            return out

    return ActivationCounter


#: Ops whose schema promises a fresh tensor but which return the input's storage reshaped: no data moves.
_UNANNOTATED_VIEWS = frozenset({"aten::_unsafe_view"})


def _is_view(func: Any) -> bool:
    """Whether an aten op returns a view of an input (aliasing, no write): no data moves."""
    if func._schema.name in _UNANNOTATED_VIEWS:
        return True
    returns = func._schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


def _is_float_tensor(t: Any) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.is_floating_point()
