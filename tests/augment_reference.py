"""The reference every gpu-pipeline augmentation is held to, shared by the augmentation tests: torchvision's
antialiased ``resized_crop`` (the cpu pipeline's resize) and the way back from a normalised batch to grey levels."""

from __future__ import annotations

import torch

from clsbench.data.augment import MEAN, STD


def reference(images: list[torch.Tensor], boxes: list[tuple[int, int, int, int]], flips: list[bool], size: int,
              as_float: bool = False) -> torch.Tensor:
    """torchvision's antialiased resized_crop, then the flip, in grey levels (float32): on the uint8 image (the cpu
    pipeline's augmentation before normalisation, rounded), or on the image as float32 (no rounding)."""
    from torchvision.transforms.v2 import functional as TF

    out = []
    for image, (top, left, h, w), flip in zip(images, boxes, flips, strict=True):
        crop = TF.resized_crop(image.float() if as_float else image, top, left, h, w, [size, size], antialias=True)
        out.append(crop.flip(-1) if flip else crop)
    return torch.stack(out).to(torch.float32)


def grey_levels(batch: torch.Tensor) -> torch.Tensor:
    """A normalised batch back in 0-255 grey levels."""
    mean = torch.tensor(MEAN).view(1, 3, 1, 1) * 255.0
    std = torch.tensor(STD).view(1, 3, 1, 1) * 255.0
    return batch.to(torch.float32) * std + mean
