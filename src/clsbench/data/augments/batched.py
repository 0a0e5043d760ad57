"""``batched`` (the default): crop, resize, flip and normalise a whole batch in a few batched operations.

The decoded images differ in size, so the crops are first brought into one tensor. Images whose crops are of
similar size form a group (:func:`groups`; one to a few groups per batch), and per group:

1. each crop (a strided view of its decoded uint8 image) is copied into the top-left corner of a uint8 canvas
   (K, 3, max crop height, max crop width): the only operation made once per image, one copy each, all issued by
   one ``torch._foreach_copy_`` call (its loop runs in C++: the pipeline's thread enters the interpreter, and
   gives up and takes back the GIL, once per group rather than once per image);
2. one gather over the canvas with per-image row and column indices repeats each crop's last row and column into
   the padding (so the bilinear samples at a crop's far edges see that edge, as a resize of the crop alone does)
   and mirrors the columns of the images to flip (mirroring a crop is flipping its output: the sample points of
   step 3 are symmetric within the box);
3. one conversion to float32 and one ``torchvision.ops.roi_align`` call with each crop's box (0, 0, w, h),
   ``aligned=True`` (pixel centres at +0.5, as ``interpolate(align_corners=False)``) and ``sampling_ratio=0``:
   each output pixel is the mean of ceil(h / size) x ceil(w / size) bilinear samples spread evenly over its
   footprint in the crop;
4. the group's outputs go into their places of a float32 batch (``index_copy_``).

Then one ``addcmul`` over the batch, ``x * 1/(255 std) - mean/std``, writes it straight into the mode's dtype and
memory format: the normalisation, the cast and the layout change are one kernel.

What it computes, against the antialiased reference (``resized_crop(..., antialias=True)``, the cpu pipeline's
and the ``per-image`` augmentation's resize): where a crop is enlarged (its side at most ``size``), both are the
same bilinear interpolation, one sample at each output pixel's centre. Where a crop is shrunk, the reference
weights the input pixels with a triangle filter two output pixels wide; roi_align averages samples over one output
pixel's footprint (a box filter one output pixel wide, blurred by the bilinear interpolation of each sample): both
are low-pass filters that follow the scale, roi_align's the narrower, so it keeps a little more of the finest detail
and noise. The difference, measured on generated photographs, is stated in docs/methodology/data.md and held by a test
(:data:`TOLERANCE_MEAN`, :data:`TOLERANCE_P99`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from clsbench.data.augment import affine_normalisation, device_table
from clsbench.data.base import AUGMENTS

#: A group's canvas may hold at most this many times its crops' pixels (the rest is padding); an image that would
#: take it past this starts the next group. 2 keeps the canvas within twice the crops' pixels at a handful of groups
#: per batch (crop areas spread over 8-100% of an image: about four halvings).
PAD_LIMIT = 2.0
#: Agreement with the antialiased reference (``resized_crop(..., antialias=True)`` on uint8), in grey levels (0-255)
#: per pixel value, over batches of generated photographs: the mean absolute difference and its 99th percentile.
#: Measured: see docs/methodology/data.md (16.4.1); ``tests/test_augment.py`` holds every batch to these bounds.
TOLERANCE_MEAN = 1.0
TOLERANCE_P99 = 5.0


def groups(sizes: Sequence[tuple[int, int]]) -> list[list[int]]:
    """The images (by position) of each group, from the crops' (height, width): largest crops first, each into the
    first group whose canvas stays within :data:`PAD_LIMIT` times its crops' pixels with it, else into a new group.
    Deterministic: ties keep their order."""
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i][0] * sizes[i][1], i))
    out: list[list[int]] = []
    shapes: list[list[int]] = []  # per group: max height, max width, pixels
    for i in order:
        h, w = sizes[i]
        for members, shape in zip(out, shapes, strict=True):
            grown_h, grown_w = max(shape[0], h), max(shape[1], w)
            if (len(members) + 1) * grown_h * grown_w <= PAD_LIMIT * (shape[2] + h * w):
                members.append(i)
                shape[:] = [grown_h, grown_w, shape[2] + h * w]
                break
        else:
            out.append([i])
            shapes.append([h, w, h * w])
    return out


def resize_group(images: Sequence[torch.Tensor], boxes: Sequence[tuple[int, int, int, int]],
                 flips: Sequence[bool], members: Sequence[int], size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 1-3 of the module docstring for the images ``members``: their (K, 3, size, size) float32 crops, 0-255,
    and their positions in the batch (an int64 tensor on the same device)."""
    from torchvision.ops import roi_align

    device = images[members[0]].device
    sizes = [(boxes[i][2], boxes[i][3]) for i in members]
    height, width = max(h for h, _ in sizes), max(w for _, w in sizes)
    k = len(members)
    canvas = torch.empty((k, 3, height, width), dtype=torch.uint8, device=device)
    crops = [(slot, boxes[i], images[i]) for slot, i in enumerate(members)]
    torch._foreach_copy_([canvas[slot, :, :h, :w] for slot, (_, _, h, w), _ in crops],
                         [image[:, top:top + h, left:left + w] for _, (top, left, h, w), image in crops])
    meta = device_table([[h, w, int(bool(flips[i])), i] for (h, w), i in zip(sizes, members, strict=True)], device)
    h_t, w_t, flip_t, where = meta.unbind(1)
    last_row, last_col = (h_t - 1)[:, None], (w_t - 1)[:, None]
    rows = torch.minimum(torch.arange(height, device=device)[None, :], last_row)
    cols = torch.minimum(torch.arange(width, device=device)[None, :], last_col)
    cols = torch.where(flip_t[:, None].bool(), last_col - cols, cols)
    slots = torch.arange(k, device=device)
    filled = canvas[slots.view(k, 1, 1, 1), torch.arange(3, device=device).view(1, 3, 1, 1),
                    rows.view(k, 1, height, 1), cols.view(k, 1, 1, width)]
    zero = torch.zeros(k, dtype=torch.float32, device=device)
    rois = torch.stack([slots.to(torch.float32), zero, zero, w_t.to(torch.float32), h_t.to(torch.float32)], dim=1)
    out = roi_align(filled.to(torch.float32), rois, output_size=(size, size), spatial_scale=1.0, sampling_ratio=0,
                    aligned=True)
    return out, where


class Batched:
    name = "batched"
    resize = "bilinear, area-averaged when shrinking (torchvision.ops.roi_align, sampling_ratio=0, aligned)"

    def apply(self, images: Sequence[torch.Tensor], boxes: Sequence[tuple[int, int, int, int]],
              flips: Sequence[bool], size: int, memory_format: torch.memory_format,
              dtype: torch.dtype) -> torch.Tensor:
        device = images[0].device
        staged = torch.empty((len(images), 3, size, size), dtype=torch.float32, device=device)
        for members in groups([(box[2], box[3]) for box in boxes]):
            out, where = resize_group(images, boxes, flips, members, size)
            staged.index_copy_(0, where, out)
        scale, shift = affine_normalisation(device)
        batch = torch.empty((len(images), 3, size, size), dtype=dtype, device=device, memory_format=memory_format)
        return torch.addcmul(shift, staged, scale, out=batch)


AUGMENTS.register(Batched.name, Batched())
