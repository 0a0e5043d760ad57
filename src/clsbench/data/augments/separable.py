"""``separable``: the antialiased bilinear resize of a whole batch as two batched matrix products.

What it computes: the antialiased reference, ``resized_crop(..., antialias=True)`` (the cpu pipeline's resize and
the ``per-image`` augmentation's), which is PIL's separable triangle filter. Along one axis, a crop side of
``length`` pixels resized to ``size`` has the weights, for output index i and input index j < length::

    scale = length / size,  centre = scale * (i + 0.5),  support = max(scale, 1)
    w[i, j] = max(0, 1 - |j + 0.5 - centre| / support),  then each row divided by its sum

When shrinking (scale > 1) the triangle widens with the scale (the antialiasing); when enlarging, the divisor is 1,
which is plain bilinear interpolation with ``align_corners=False`` (torch's antialiased kernel uses ``invscale = 1``
below scale 1; a divisor of ``scale`` there would be wrong: checked numerically, and ``tests/test_augment_separable.py``
holds the float32 result to torchvision's on float images within 1e-3 grey levels). The resize is linear and
separable, so one crop's channel c is ``Wy @ crop_c @ Wx^T`` with Wy (size x height) and Wx (size x width); a
horizontal flip is Wx with its rows reversed (the output columns mirrored, exactly).

Per group of images with crops of similar size (:func:`clsbench.data.augments.batched.groups`, the same groups as
``batched``; about three for a batch of 256 ImageNet-sized images at 224):

1. a zero-filled canvas (K, H, 3, W) in the compute dtype (H x W: the group's largest crop height and width), rows
   outermost so that the channels fold into the matrices of step 3; each crop (a strided view of its uint8 image)
   is copied into its top-left corner, converted in the same copy: the only operation made once per image, all K
   copies issued by one ``torch._foreach_copy_`` call (as in ``batched``: one GIL hand-over per group). The
   padding must be zeros, not uninitialised memory: its weights are zero, but 0 * NaN is NaN;
2. one small int64 table (each crop's height, width, flip and batch position) copied to the device, from which a
   few vectorised operations make Wy (K, size, H) and Wx (K, size, W) on the device (:func:`resize_weights`);
3. two batched matmuls with the channels folded in (no broadcasting, so torch copies no weights per channel):
   Wy (K, size, H) @ canvas (K, H, 3 W) -> (K, size, 3 W); seen as (K, 3 size, W), @ Wx^T (K, W, size) ->
   (K, 3 size, size), that is (K, size, 3, size);
4. the group's output goes to its places in a staged batch (N, size, 3, size) (``index_copy_``).

Then one ``addcmul`` over the batch, ``x * 1/(255 std) - mean/std``, reads the staged batch as (N, 3, size, size)
and writes the mode's dtype and memory format: the normalisation, the cast and the layout change are one kernel
(as in ``batched``).

Cost per group: one fill, K copies (one call), one host-to-device copy of 4K integers, about fifteen small kernels
per axis for the weights (six passes over the full-size float32 weight tensor, one of them writing the compute
dtype), two ``bmm`` of 2 * 3 * size * H * W and 2 * 3 * size * W * size floating-point operations per image, one
``index_copy_``. The matmuls are dense while the weights are banded (about 2 * support nonzero taps a row), so most
of that arithmetic multiplies zeros: for 256 crops of 500 x 375 images at 224, about 87 GFLOP where the banded
filter needs 0.5. It trades arithmetic for a few large kernels, which suits tensor cores (87 GFLOP is about 0.1 ms
at an H200's dense float16 datasheet peak) and not a CPU, where it is slower than ``per-image``. Memory per group,
in the compute dtype: the canvas 3 K H W (padding included: at most
:data:`~clsbench.data.augments.batched.PAD_LIMIT` times the crops' pixels), the intermediate 3 K size W, the output
3 K size size, the weights K size (H + W) (built in float32, one axis at a time); plus the staged batch 3 N size
size. For the 256 crops above, in float16: canvases 250 MB in all, intermediates 140 MB, weights 90 MB (and about as
much float32 while they are built), staged batch 77 MB; the largest group's working set about 0.4 GB (estimated from
the shapes; measured on the H200, 2026-12-02: a peak of 413 MB, against ``batched``'s 3,106 MB).

Compute dtype (:func:`compute_dtype`): float16 on CUDA, float32 elsewhere. Pixel values 0-255 are exact in float16
and float16 matmuls run on tensor cores (accumulating in float32). The error this adds: every weight is rounded to
float16's 11 significant bits (relative error at most 2**-11), which moves one pass's result by at most
255 * 2**-11 = 0.125 grey levels, and each pass's result, at most 255, is rounded to float16 (spacing 0.125 from 128
to 256: at most 0.0625): two passes, at most 0.37 grey levels in all (:data:`FLOAT16_BOUND`; typically much less,
the roundings are independent). ``tests/test_augment_separable.py`` checks that bound by running the float16
computation on the CPU (measured: at most 0.27). One caveat on a GPU: PyTorch lets cuBLAS reduce split-K partial sums
in float16 (``torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction``, on by default; this module does
not change global settings), which can add up to 0.06 grey levels per extra float16 addition; only a GPU run
measures that.

Against the reference on uint8 (the cpu pipeline's result), which rounds its intermediate pass and its output to
integers (with fixed-point weights), the difference is about 0.3 grey levels on average and at most about one:
:data:`TOLERANCE_MEAN`, :data:`TOLERANCE_P99` and :data:`TOLERANCE_MAX`, measured as stated beside them and in
docs/methodology/data.md 16.4.2. Against the same arithmetic on float32 images it is about 1e-4 grey levels (float32
compute).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from clsbench.data.augment import affine_normalisation, device_table
from clsbench.data.augments.batched import groups
from clsbench.data.base import AUGMENTS

#: Agreement with the antialiased reference on uint8 (``resized_crop(..., antialias=True)``, the cpu pipeline's), in
#: grey levels (0-255) per pixel value: mean absolute difference, its 99th percentile, and the largest. Measured on
#: the CPU (torch 2.14.1, torchvision 0.29.1), float32 / float16 compute: photographs from ``clsbench data make``,
#: 160 x 120 cropped to 64 (32 images, 3 epochs): mean 0.29 / 0.29, p99 0.80 / 0.81, max 1.00 / 1.00; 500 x 375 to
#: 224 (48 images, 2 epochs): mean 0.29 / 0.29, p99 0.81 / 0.81, max 1.00 / 1.13; to 96: mean 0.27, p99 0.72 / 0.75,
#: max 1.00 / 1.13; noise, checkerboards and stripes, crops from 1 pixel to whole images, to 16-100: mean 0.21-0.27,
#: p99 0.59-0.75, max 0.98 / 1.06. The reference's own rounding explains it (its intermediate pass and its output to
#: integers, up to 0.5 each). Bounds: the largest figures with a margin; the max also allows :data:`FLOAT16_BOUND`.
TOLERANCE_MEAN = 0.4
TOLERANCE_P99 = 1.0
TOLERANCE_MAX = 1.5
#: Agreement of the float32 computation with torchvision's antialiased resize of float32 images (no rounding on
#: either side), in grey levels: the largest difference measured on the same images was 1.5e-4.
TOLERANCE_FLOAT32 = 1e-3
#: The worst case the float16 compute dtype adds, in grey levels (module docstring: two passes, each a weight
#: rounding of at most 255 * 2**-11 and a result rounding of at most 0.0625): 0.37. Measured against the float32
#: reference on the same images: mean 0.02-0.03, p99 0.09-0.14, max 0.27.
FLOAT16_BOUND = 2 * (255.0 * 2.0**-11 + 0.0625)


def compute_dtype(device: torch.device) -> torch.dtype:
    """float16 on CUDA (exact for 0-255, tensor cores), float32 elsewhere (float16 is no faster on most CPUs)."""
    return torch.float16 if device.type == "cuda" else torch.float32


def resize_weights(lengths: torch.Tensor, flips: torch.Tensor | None, size: int, span: int,
                   dtype: torch.dtype) -> torch.Tensor:
    """The antialiased bilinear weights (module docstring) of K crop sides: (K, size, span) in ``dtype``, on the
    device of ``lengths`` (int64, (K,)); row i of crop k weighs its input pixels j < ``lengths[k]``, zero beyond.
    Where ``flips[k]`` is set, the rows are in reverse order (the output mirrored).

    Computed in float32 as max(0, support - |j + 0.5 - centre|), the triangle times its support (a factor each row's
    normalisation removes), with a limit of -inf for the taps past the crop, so that the full-size tensor takes four
    elementwise passes, a sum and the normalising division written straight into ``dtype``."""
    device = lengths.device
    length = lengths.to(torch.float32).view(-1, 1, 1)
    out_index = torch.arange(size, dtype=torch.float32, device=device).view(1, size, 1)
    if flips is not None:
        out_index = torch.where(flips.view(-1, 1, 1).bool(), (size - 1) - out_index, out_index)
    scale = length / size
    centre = scale * (out_index + 0.5)  # (K, size, 1)
    taps = torch.arange(span, dtype=torch.float32, device=device).view(1, 1, span)
    limit = torch.where(taps < length, scale.clamp(min=1.0), -math.inf)  # (K, 1, span): the support, or -inf
    weights = (taps + 0.5) - centre
    weights = torch.sub(limit, weights.abs_(), out=weights).clamp_(min=0.0)
    # Every row has a positive weight: the tap nearest its centre lies within half a pixel of it, inside the support.
    out = torch.empty((len(lengths), size, span), dtype=dtype, device=device)
    return torch.div(weights, weights.sum(dim=-1, keepdim=True), out=out)


def resize_group(images: Sequence[torch.Tensor], boxes: Sequence[tuple[int, int, int, int]],
                 flips: Sequence[bool], members: Sequence[int], size: int,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 1-3 of the module docstring for the images ``members``: their resized crops, 0-255, in ``dtype`` (the
    compute dtype), laid out (K, size, 3, size) (row, channel, column), and their positions in the batch (an int64
    tensor on the same device)."""
    device = images[members[0]].device
    sizes = [(boxes[i][2], boxes[i][3]) for i in members]
    height, width = max(h for h, _ in sizes), max(w for _, w in sizes)
    k = len(members)
    canvas = torch.zeros((k, height, 3, width), dtype=dtype, device=device)
    crops = [(slot, boxes[i], images[i]) for slot, i in enumerate(members)]
    torch._foreach_copy_([canvas[slot, :h, :, :w] for slot, (_, _, h, w), _ in crops],
                         [image[:, top:top + h, left:left + w].permute(1, 0, 2)
                          for _, (top, left, h, w), image in crops])
    meta = device_table([[h, w, int(bool(flips[i])), i] for (h, w), i in zip(sizes, members, strict=True)], device)
    h_t, w_t, flip_t, where = meta.unbind(1)
    rows = resize_weights(h_t, None, size, height, dtype)  # (K, size, H)
    cols = resize_weights(w_t, flip_t, size, width, dtype)  # (K, size, W)
    out = torch.bmm(rows, canvas.view(k, height, 3 * width))  # (K, size, 3 W)
    out = torch.bmm(out.view(k, size * 3, width), cols.transpose(1, 2))  # (K, 3 size, size)
    return out.view(k, size, 3, size), where


class Separable:
    """The ``separable`` augmentation (module docstring).

    Args:
        compute: the dtype of the canvas and the matmuls; None (the registered entry): :func:`compute_dtype` of
            the images' device. Tests pass float16 to run the GPU's arithmetic on a CPU.
    """

    name = "separable"
    resize = "bilinear, antialiased (separable weights, two batched matmuls)"

    def __init__(self, compute: torch.dtype | None = None) -> None:
        self.compute = compute

    def apply(self, images: Sequence[torch.Tensor], boxes: Sequence[tuple[int, int, int, int]],
              flips: Sequence[bool], size: int, memory_format: torch.memory_format,
              dtype: torch.dtype) -> torch.Tensor:
        device = images[0].device
        compute = self.compute or compute_dtype(device)
        staged = torch.empty((len(images), size, 3, size), dtype=compute, device=device)  # (N, row, channel, col)
        for members in groups([(box[2], box[3]) for box in boxes]):  # together they fill every image of staged
            out, where = resize_group(images, boxes, flips, members, size, compute)
            staged.index_copy_(0, where, out)
        scale, shift = affine_normalisation(device)
        batch = torch.empty((len(images), 3, size, size), dtype=dtype, device=device, memory_format=memory_format)
        return torch.addcmul(shift, staged.permute(0, 2, 1, 3), scale, out=batch)


AUGMENTS.register(Separable.name, Separable())
