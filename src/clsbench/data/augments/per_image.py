"""``per-image``: one antialiased bilinear resize per image (the sizes differ), then the flips and the normalisation
for the whole batch (:func:`clsbench.data.augment.crop_flip_resize`), then the mode's dtype.

The same arithmetic as the cpu pipeline's ``resized_crop(..., antialias=True)``, in float32 rather than on uint8; it
costs a few kernel launches per image, so a batch of 256 is about a thousand launches from the augment thread.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from clsbench.data.augment import crop_flip_resize
from clsbench.data.base import AUGMENTS


class PerImage:
    name = "per-image"
    resize = "bilinear, antialiased (torch.nn.functional.interpolate per image)"

    def apply(self, images: Sequence[torch.Tensor], boxes: Sequence[tuple[int, int, int, int]],
              flips: Sequence[bool], size: int, memory_format: torch.memory_format,
              dtype: torch.dtype) -> torch.Tensor:
        out = crop_flip_resize(images, boxes, flips, size, memory_format)
        return out if out.dtype == dtype else out.to(dtype)


AUGMENTS.register(PerImage.name, PerImage())
