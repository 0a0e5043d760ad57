"""The training augmentation every pipeline applies, and the seeded choices behind it.

RandomResizedCrop (the Inception-style crop of the ImageNet reference recipes): pick an area fraction uniformly in
[0.08, 1] and a log-uniform aspect ratio in [3/4, 4/3]; if the box fits, place it uniformly; try 10 times, then fall
back to the largest centred box with the ratio clamped to that range. Then a horizontal flip with probability 1/2,
and normalisation ``(x / 255 - mean) / std`` with the ImageNet statistics.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F

#: ImageNet channel statistics (RGB) used by the torchvision reference recipes.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)
CROP_ATTEMPTS = 10
FLIP_PROBABILITY = 0.5


def sample_rng(seed: int, epoch: int, index: int) -> random.Random:
    """The generator for image ``index`` in ``epoch``: independent of the worker or thread that prepares it."""
    return random.Random((seed * 1_000_003 + epoch) * 10_000_019 + index)


def crop_box(rng: random.Random, height: int, width: int) -> tuple[int, int, int, int]:
    """(top, left, height, width) of a RandomResizedCrop box inside an image of ``height`` x ``width``."""
    area = height * width
    log_lo, log_hi = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
    for _ in range(CROP_ATTEMPTS):
        target = area * rng.uniform(*CROP_SCALE)
        ratio = math.exp(rng.uniform(log_lo, log_hi))
        w = int(round(math.sqrt(target * ratio)))
        h = int(round(math.sqrt(target / ratio)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    ratio = width / height
    if ratio < CROP_RATIO[0]:
        w, h = width, int(round(width / CROP_RATIO[0]))
    elif ratio > CROP_RATIO[1]:
        h, w = height, int(round(height * CROP_RATIO[1]))
    else:
        h, w = height, width
    h, w = max(1, min(h, height)), max(1, min(w, width))
    return (height - h) // 2, (width - w) // 2, h, w


def choices(seed: int, epoch: int, index: int, height: int, width: int) -> tuple[tuple[int, int, int, int], bool]:
    """The crop box and the flip for one image."""
    rng = sample_rng(seed, epoch, index)
    box = crop_box(rng, height, width)
    return box, rng.random() < FLIP_PROBABILITY


def normalisation_constants(device: torch.device, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor,
                                                                                                 torch.Tensor]:
    """``(255 * mean, 1 / (255 * std))`` as (1, 3, 1, 1) tensors on ``device``, for :func:`normalise_`. Creating
    them copies from host memory, so a caller in a timed loop makes them once."""
    mean = torch.tensor([255.0 * m for m in MEAN], dtype=dtype, device=device).view(1, 3, 1, 1)
    scale = torch.tensor([1.0 / (255.0 * s) for s in STD], dtype=dtype, device=device).view(1, 3, 1, 1)
    return mean, scale


#: Per device: the (scale, shift) of :func:`affine_normalisation`.
_AFFINE: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}


def affine_normalisation(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(1/(255 std), -mean/std)`` as (1, 3, 1, 1) float32 tensors on ``device``: ``addcmul(shift, x, scale)``
    normalises 0-255 values and, with ``out=``, casts and lays them out in the same kernel (the gpu pipeline's
    batched augmentations). Made once per device (making them copies from host memory)."""
    key = str(device)
    if key not in _AFFINE:
        mean, scale = normalisation_constants(device)  # 255 mean, 1/(255 std)
        _AFFINE[key] = (scale, -mean * scale)
    return _AFFINE[key]


def device_table(rows: list[int] | list[list[int]], device: torch.device) -> torch.Tensor:
    """A small int64 tensor (per-image facts of a batch: a list, or a table of rows) on ``device``: one copy,
    asynchronous from pinned memory on a GPU (the pinned block is not reused before the copy has run), so the
    calling thread never waits for the work queued on its stream."""
    host = torch.tensor(rows, dtype=torch.int64)
    if device.type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device)


def normalise_(batch: torch.Tensor, constants: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """In place on a float batch (N, 3, H, W) of 0-255 values: ``(x / 255 - mean) / std``."""
    mean, scale = constants or normalisation_constants(batch.device, batch.dtype)
    return batch.sub_(mean).mul_(scale)


def crop_flip_resize(images: Sequence[torch.Tensor], boxes: Sequence[tuple[int, int, int, int]],
                     flips: Sequence[bool], size: int, memory_format: torch.memory_format) -> torch.Tensor:
    """Crop, resize (bilinear, antialiased) and flip decoded uint8 images (3, H, W) of any sizes into one
    normalised float32 batch, on the images' device. One resize per image (the sizes differ), then the flips and
    the normalisation on the whole batch."""
    device = images[0].device
    out = torch.empty((len(images), 3, size, size), dtype=torch.float32, device=device)
    out = out.contiguous(memory_format=memory_format)
    for i, (image, (top, left, h, w)) in enumerate(zip(images, boxes, strict=True)):
        crop = image[:, top:top + h, left:left + w].unsqueeze(0).to(torch.float32)
        out[i] = F.interpolate(crop, size=(size, size), mode="bilinear", align_corners=False, antialias=True)[0]
    flipped = [i for i, f in enumerate(flips) if f]
    if flipped:
        rows = torch.tensor(flipped, device=device)
        out[rows] = out[rows].flip(-1)
    return normalise_(out)


class EpochSampler(torch.utils.data.Sampler):
    """Yields ``(epoch, index)`` keys: each pass over the dataset is a new seeded permutation.

    The epoch travels with every key, so a worker knows which crop and flip to draw without shared state.
    """

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.seed = seed
        self.epoch = -1

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[tuple[int, int]]:
        self.epoch += 1
        order = list(range(self.size))
        random.Random(self.seed * 7_919 + self.epoch).shuffle(order)
        epoch = self.epoch
        return iter([(epoch, i) for i in order])
