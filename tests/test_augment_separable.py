"""The ``separable`` augmentation (two batched matmuls with antialiased bilinear weights), on the CPU.

* against the antialiased reference, ``resized_crop(..., antialias=True)``: on uint8 images (the cpu pipeline's
  result) within the stated tolerance, on float32 images to 1e-3 grey levels; on generated photographs and on
  seeded noise, checkerboards and stripes, with shrunk and enlarged crops, odd sizes, crops at the image edges and
  one pixel wide; the float16 computation (the GPU's) run on the CPU within its stated bound;
* its flips, dtypes, layouts, normalisation and groups, and that the padding never reaches the output;
* its registration, and its use through ``AUGMENTS`` by the stage measurement.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from augment_reference import grey_levels, reference
from clsbench.data import DataSettings
from clsbench.data.augment import MEAN, STD, choices
from clsbench.data.augments.batched import groups
from clsbench.data.augments.separable import (
    FLOAT16_BOUND,
    TOLERANCE_FLOAT32,
    TOLERANCE_MAX,
    TOLERANCE_MEAN,
    TOLERANCE_P99,
    Separable,
    resize_weights,
)
from clsbench.data.base import AUGMENTS, BatchSpec
from clsbench.data.decoders.nvjpeg import decode_batch
from clsbench.data.make import MakeSpec, make_dataset
from clsbench.data.sources.folder import FolderSource
from clsbench.data.stages import HostMeter, measure_stages
from clsbench.measure.clock import FakeClock

#: 160 x 120 photographs cropped to 64: crops shrunk and enlarged in about the proportions of 500 x 375 ImageNet-sized
#: images cropped to 224 (as in tests/test_augment.py).
PHOTOS = MakeSpec(images=32, classes=2, seed=7, width=160, height=120)
SIZE = 64
FP32 = Separable(torch.float32)
FP16 = Separable(torch.float16)  # the GPU's arithmetic, on the CPU


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("photos") / "ds"
    make_dataset(root, PHOTOS, jobs=1)
    return root


@pytest.fixture(scope="module")
def decoded(photos: Path) -> list[torch.Tensor]:
    """The reference CPU decode of every photograph, in scan order."""
    data = FolderSource().open(DataSettings(str(photos), prime_cache=False))
    images = decode_batch([data.read(i) for i in range(len(data))], list(data.index.kinds), torch.device("cpu"))
    assert all(image is not None for image in images)
    return images  # type: ignore[return-value]


def picks(images: list[torch.Tensor], epoch: int) -> tuple[list[tuple[int, int, int, int]], list[bool]]:
    chosen = [choices(0, epoch, i, int(im.shape[-2]), int(im.shape[-1])) for i, im in enumerate(images)]
    return [box for box, _ in chosen], [flip for _, flip in chosen]


def checkerboard(height: int, width: int, period: int) -> torch.Tensor:
    y = torch.arange(height).view(-1, 1) // period
    x = torch.arange(width).view(1, -1) // period
    return (((y + x) % 2) * 255).to(torch.uint8).expand(3, height, width).contiguous()


def stripes(height: int, width: int) -> torch.Tensor:
    return ((torch.arange(width) % 2) * 255).to(torch.uint8).view(1, 1, width).expand(3, height, width).contiguous()


def sharp_images() -> list[torch.Tensor]:
    """Seeded images whose finest detail is one pixel (noise, checkerboards, stripes), of odd sizes."""
    generator = torch.Generator().manual_seed(3)
    return [torch.randint(0, 256, (3, 97, 131), dtype=torch.uint8, generator=generator), checkerboard(120, 90, 1),
            checkerboard(75, 150, 3), stripes(64, 81),
            torch.randint(0, 256, (3, 33, 41), dtype=torch.uint8, generator=generator),
            torch.randint(0, 256, (3, 250, 177), dtype=torch.uint8, generator=generator), checkerboard(13, 17, 2),
            stripes(40, 200)]


def sharp_boxes(images: list[torch.Tensor], seed: int) -> tuple[list[tuple[int, int, int, int]], list[bool]]:
    """Random boxes and flips, and three set ones: a whole image, a one-pixel-wide column at the right edge, a
    one-pixel-high row at the bottom edge."""
    rng = random.Random(seed)
    boxes, flips = [], []
    for image in images:
        height, width = int(image.shape[-2]), int(image.shape[-1])
        h, w = rng.randint(1, height), rng.randint(1, width)
        boxes.append((rng.randint(0, height - h), rng.randint(0, width - w), h, w))
        flips.append(rng.random() < 0.5)
    boxes[0] = (0, 0, 97, 131)
    boxes[1] = (0, 89, 120, 1)
    boxes[2] = (74, 0, 1, 150)
    return boxes, flips




def within_tolerance(difference: torch.Tensor) -> None:
    difference = difference.abs().flatten()
    assert float(difference.mean()) <= TOLERANCE_MEAN
    assert float(difference.quantile(0.99)) <= TOLERANCE_P99
    assert float(difference.max()) <= TOLERANCE_MAX


# ------------------------------------------------------------------------------------ against the reference


@pytest.mark.parametrize("augment", [FP32, FP16], ids=["float32", "float16"])
def test_photographs_match_the_uint8_reference_within_the_tolerance(decoded: list[torch.Tensor], augment: Separable):
    for epoch in range(3):
        boxes, flips = picks(decoded, epoch)
        out = grey_levels(augment.apply(decoded, boxes, flips, SIZE, torch.contiguous_format, torch.float32))
        expected = reference(decoded, boxes, flips, SIZE)
        within_tolerance(out - expected)
        # not a vacuous bound: another epoch's crops and flips are far outside it
        other_boxes, other_flips = picks(decoded, epoch + 100)
        wrong = augment.apply(decoded, other_boxes, other_flips, SIZE, torch.contiguous_format, torch.float32)
        assert float((grey_levels(wrong) - expected).abs().mean()) > 20 * TOLERANCE_MEAN


@pytest.mark.parametrize("size", [16, 31, 100])  # every image shrunk; both ways; most enlarged
@pytest.mark.parametrize("augment", [FP32, FP16], ids=["float32", "float16"])
def test_sharp_images_match_the_uint8_reference_within_the_tolerance(size: int, augment: Separable):
    images = sharp_images()
    boxes, flips = sharp_boxes(images, seed=size)
    out = grey_levels(augment.apply(images, boxes, flips, size, torch.contiguous_format, torch.float32))
    within_tolerance(out - reference(images, boxes, flips, size))


@pytest.mark.parametrize("size", [16, 31, 100])
def test_float32_arithmetic_is_torchvisions_on_float_images(size: int):
    images = sharp_images()
    boxes, flips = sharp_boxes(images, seed=size)
    expected = reference(images, boxes, flips, size, as_float=True)
    out = grey_levels(FP32.apply(images, boxes, flips, size, torch.contiguous_format, torch.float32))
    assert float((out - expected).abs().max()) <= TOLERANCE_FLOAT32
    # the float16 computation: within its stated worst case, and really in float16 (it differs)
    half = grey_levels(FP16.apply(images, boxes, flips, size, torch.contiguous_format, torch.float32))
    assert 1e-2 < float((half - expected).abs().max()) <= FLOAT16_BOUND


def test_enlarging_is_plain_bilinear_interpolation():
    # Below scale 1 the triangle keeps a support of one input pixel: bilinear with align_corners=False.
    import torch.nn.functional as F

    image = torch.randint(0, 256, (3, 7, 9), dtype=torch.uint8, generator=torch.Generator().manual_seed(4))
    out = grey_levels(FP32.apply([image], [(0, 0, 7, 9)], [False], 20, torch.contiguous_format, torch.float32))
    plain = F.interpolate(image[None].float(), size=(20, 20), mode="bilinear", align_corners=False)
    torch.testing.assert_close(out, plain, atol=TOLERANCE_FLOAT32, rtol=0)


def test_the_weights_are_normalised_zero_past_each_crop_and_mirrored_by_a_flip():
    lengths = torch.tensor([1, 5, 37, 100])
    plain = resize_weights(lengths, None, 24, 100, torch.float32)
    flipped = resize_weights(lengths, torch.tensor([0, 1, 1, 0]), 24, 100, torch.float32)
    assert plain.shape == (4, 24, 100)
    torch.testing.assert_close(plain.sum(-1), torch.ones(4, 24))
    for k, length in enumerate(lengths.tolist()):
        assert bool((plain[k, :, length:] == 0).all()) and bool((plain[k, :, :length] >= 0).all())
    assert torch.equal(flipped[[1, 2]], plain[[1, 2]].flip(1)) and torch.equal(flipped[[0, 3]], plain[[0, 3]])
    # shrinking 100 to 24: each output pixel weighs about 2 * 100 / 24 input pixels
    assert int((plain[3, 12] > 0).sum()) in (8, 9)


def test_a_wrong_box_gives_a_different_result():
    images = sharp_images()
    boxes, flips = sharp_boxes(images, seed=7)
    expected = reference(images, boxes, flips, 31)
    shifted = [(top, left + 1, h, w - 1) if w > 1 else (top, left, h, w) for top, left, h, w in boxes]
    wrong = grey_levels(FP32.apply(images, shifted, flips, 31, torch.contiguous_format, torch.float32))
    assert float((wrong - expected).abs().max()) > 10 * TOLERANCE_MAX


# ------------------------------------------------------------------------------ flips, formats and groups


@pytest.mark.parametrize("augment", [FP32, FP16], ids=["float32", "float16"])
def test_a_flip_mirrors_the_output_exactly(augment: Separable):
    images = sharp_images()
    boxes, _ = sharp_boxes(images, seed=2)
    n = len(images)
    plain = augment.apply(images, boxes, [False] * n, 24, torch.contiguous_format, torch.float32)
    flipped = augment.apply(images, boxes, [True] * n, 24, torch.contiguous_format, torch.float32)
    torch.testing.assert_close(flipped, plain.flip(-1), atol=1e-5, rtol=0)
    mixed = [i % 3 == 0 for i in range(n)]
    out = augment.apply(images, boxes, mixed, 24, torch.contiguous_format, torch.float32)
    torch.testing.assert_close(out, torch.stack([p.flip(-1) if f else p for p, f in zip(plain, mixed, strict=True)]),
                               atol=1e-5, rtol=0)
    assert float((plain - plain.flip(-1)).abs().max()) > 1.0  # the images are not symmetric


@pytest.mark.parametrize("memory_format, dtype, rtol", [(torch.contiguous_format, torch.float32, 0.0),
                                                        (torch.channels_last, torch.float32, 0.0),
                                                        (torch.channels_last, torch.bfloat16, 2.0**-8),
                                                        (torch.contiguous_format, torch.float16, 2.0**-11)])
def test_the_output_is_in_the_modes_dtype_and_memory_format(decoded: list[torch.Tensor], memory_format, dtype, rtol):
    images = decoded[:8]
    boxes, flips = picks(images, epoch=1)
    full = FP32.apply(images, boxes, flips, SIZE, torch.contiguous_format, torch.float32)
    out = FP32.apply(images, boxes, flips, SIZE, memory_format, dtype)
    assert out.shape == (8, 3, SIZE, SIZE) and out.dtype == dtype and out.is_contiguous(memory_format=memory_format)
    torch.testing.assert_close(out.to(torch.float32), full, atol=1e-6, rtol=rtol)  # only the final rounding


def test_the_normalisation_is_the_imagenet_one():
    # An image of one value per channel resizes to that value everywhere (rows of weights sum to one).
    values = (10, 128, 250)
    image = torch.tensor(values, dtype=torch.uint8).view(3, 1, 1).expand(3, 40, 30).contiguous()
    out = FP32.apply([image, image], [(0, 0, 40, 30), (5, 3, 11, 17)], [False, True], 16, torch.channels_last,
                     torch.float32)
    expected = torch.tensor([(v / 255.0 - m) / s for v, m, s in zip(values, MEAN, STD, strict=True)])
    torch.testing.assert_close(out, expected.view(1, 3, 1, 1).expand(2, 3, 16, 16), atol=1e-5, rtol=0)


def test_images_of_several_groups_land_in_their_places():
    rng = random.Random(6)
    generator = torch.Generator().manual_seed(6)
    sides = [(8, 8), (120, 110), (30, 90), (90, 30), (64, 64), (5, 200), (150, 150), (17, 23), (100, 12), (45, 45)]
    rng.shuffle(sides)
    images = [torch.randint(0, 256, (3, h + 3, w + 5), dtype=torch.uint8, generator=generator) for h, w in sides]
    boxes = [(rng.randint(0, 3), rng.randint(0, 5), h, w) for h, w in sides]
    flips = [rng.random() < 0.5 for _ in sides]
    assert len(groups([(h, w) for _, _, h, w in boxes])) >= 3
    out = FP32.apply(images, boxes, flips, 32, torch.contiguous_format, torch.float32)
    for i, (image, box, flip) in enumerate(zip(images, boxes, flips, strict=True)):
        alone = FP32.apply([image], [box], [flip], 32, torch.contiguous_format, torch.float32)
        torch.testing.assert_close(out[i], alone[0], atol=1e-5, rtol=1e-5)


def test_the_padding_never_reaches_the_output(monkeypatch: pytest.MonkeyPatch):
    # Were the canvas uninitialised memory, NaN in it would spread (0 * NaN = NaN): every torch.empty is NaN here.
    empty = torch.empty

    def poisoned(*args, **kwargs):
        return empty(*args, **kwargs).fill_(math.nan)

    monkeypatch.setattr(torch, "empty", poisoned)
    images = sharp_images()
    boxes, flips = sharp_boxes(images, seed=1)
    for augment in (FP32, FP16):
        assert bool(augment.apply(images, boxes, flips, 24, torch.contiguous_format, torch.float32).isfinite().all())


# ------------------------------------------------------------------------------- registry and stage use


def test_it_is_registered_and_measured_through_the_registry(photos: Path):
    augment = AUGMENTS.get("separable")
    assert "separable" in AUGMENTS.names() and isinstance(augment, Separable) and augment.name == "separable"
    assert augment.compute is None and augment.resize.startswith("bilinear, antialiased")
    dataset = FolderSource().open(DataSettings(str(photos), prime_cache=False))

    def decode(encoded, indices):
        return decode_batch(encoded, [dataset.index.kinds[i] for i in indices], torch.device("cpu"))

    spec = BatchSpec(batch_size=8, input_size=SIZE, device=torch.device("cpu"), memory_format=torch.channels_last,
                     dtype=torch.bfloat16, seed=0, settings=DataSettings(str(photos), pipeline="gpu"))
    record = measure_stages(dataset, spec, decode=decode, augments=[augment, AUGMENTS.get("batched")],
                            meter=HostMeter(), clock=FakeClock(), batches=2)
    assert record["augment"] == "separable"
    assert [(s["stage"], s.get("augment")) for s in record["stages"]] == [
        ("read", None), ("decode", None), ("augment", "separable"), ("augment", "batched")]
    assert record["stages"][2]["batch_bytes"] == 8 * 3 * SIZE * SIZE * 2 and record["stages"][2]["images"] == 16
