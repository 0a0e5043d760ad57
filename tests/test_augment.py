"""The gpu pipeline's augmentations and stage measurement, on the CPU.

* the crop geometry (scale, aspect ratio, position) against torchvision's ``RandomResizedCrop.get_params``: two-sample
  Kolmogorov-Smirnov statistics below their 0.1% critical value (and a wrong range is caught), flips near one half;
* the ``batched`` augmentation (roi_align) against the antialiased reference (``resized_crop(..., antialias=True)``
  on uint8, the cpu pipeline's) on generated photographs, within the stated tolerance; equal to it where crops are
  enlarged; its flips, dtypes, layouts and groups; determinism with a seed through the whole gpu pipeline;
* the hand-over between the pipeline's streams, with stand-in streams and events that log what happens;
* each stage measured alone (:mod:`clsbench.data.stages`) with the CPU reference decode, a fake clock and a
  stand-in device meter; its wiring into the train workload and ``diagnose`` through a pipeline registered here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from augment_reference import grey_levels, reference
from clsbench.core.plan import Cell, StopRule
from clsbench.data import DataSettings
from clsbench.data.augment import CROP_RATIO, CROP_SCALE, choices, crop_box, sample_rng
from clsbench.data.augments.batched import PAD_LIMIT, TOLERANCE_MEAN, TOLERANCE_P99, groups
from clsbench.data.base import AUGMENTS, PIPELINES, BatchSpec
from clsbench.data.decoders.nvjpeg import decode_batch
from clsbench.data.make import MakeSpec, make_dataset
from clsbench.data.pipelines.cpu import CpuPipeline
from clsbench.data.sources.folder import FolderSource
from clsbench.data.sources.memory import MemorySource
from clsbench.data.stages import HostMeter, measure_stages
from clsbench.measure.clock import FakeClock

TINY = "clsbench_testmodels:tiny"
#: 160 x 120 photographs cropped to 64: the crops are shrunk and enlarged in about the proportions of 500 x 375
#: ImageNet-sized images cropped to 224.
PHOTOS = MakeSpec(images=32, classes=2, seed=7, width=160, height=120)
SIZE = 64
#: Samples per distribution in the geometry tests, and the two-sample KS critical value factor at alpha = 0.001
#: (c(alpha) = sqrt(-ln(alpha / 2) / 2) = 1.949; D_crit = c * sqrt((n + m) / (n m))).
SAMPLES = 4000
KS_C_001 = math.sqrt(-math.log(0.001 / 2) / 2)
#: A file the scan keeps (JPEG markers at both ends) that no decoder can decode.
DAMAGED = b"\xff\xd8\xff\xfe\x00\x04ab" + b"\x00" * 50 + b"\xff\xd9"


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("photos") / "ds"
    make_dataset(root, PHOTOS, jobs=1)
    return root


def decoded(root: Path) -> tuple[list[torch.Tensor], list[int]]:
    """The reference CPU decode of every image of ``root`` (scan order) and their dataset indices."""
    data = FolderSource().open(DataSettings(str(root), prime_cache=False))
    images = decode_batch([data.read(i) for i in range(len(data))], list(data.index.kinds), torch.device("cpu"))
    assert all(image is not None for image in images)
    return images, list(range(len(data)))  # type: ignore[return-value]


def picks(images: list[torch.Tensor], seed: int, epoch: int) -> tuple[list[tuple[int, int, int, int]], list[bool]]:
    chosen = [choices(seed, epoch, i, int(im.shape[-2]), int(im.shape[-1])) for i, im in enumerate(images)]
    return [box for box, _ in chosen], [flip for _, flip in chosen]




# ------------------------------------------------------------------------------------------- crop geometry


def ks_statistic(a: list[float], b: list[float]) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two empirical distributions."""
    a, b = sorted(a), sorted(b)
    i = j = 0
    gap = 0.0
    while i < len(a) and j < len(b):
        x = min(a[i], b[j])
        while i < len(a) and a[i] == x:
            i += 1
        while j < len(b) and b[j] == x:
            j += 1
        gap = max(gap, abs(i / len(a) - j / len(b)))
    return gap


def geometry(boxes: list[tuple[int, int, int, int]], height: int, width: int) -> dict[str, list[float]]:
    return {"scale": [h * w / (height * width) for _, _, h, w in boxes],
            "log_ratio": [math.log(w / h) for _, _, h, w in boxes],
            "centre_y": [(top + h / 2) / height for top, _, h, _ in boxes],
            "centre_x": [(left + w / 2) / width for _, left, _, w in boxes]}


def torchvision_boxes(height: int, width: int, n: int, scale=CROP_SCALE, ratio=CROP_RATIO) -> list[tuple]:
    from torchvision.transforms import RandomResizedCrop

    torch.manual_seed(11)
    image = torch.empty((3, height, width), dtype=torch.uint8)
    return [tuple(RandomResizedCrop.get_params(image, list(scale), list(ratio))) for _ in range(n)]


def ours(height: int, width: int, n: int, seed: int = 3) -> list[tuple[int, int, int, int]]:
    return [crop_box(sample_rng(seed, 0, i), height, width) for i in range(n)]


@pytest.mark.parametrize("height, width", [(375, 500), (500, 333), (120, 480)])  # the last falls back often
def test_crop_geometry_follows_torchvision_random_resized_crop(height: int, width: int):
    critical = KS_C_001 * math.sqrt(2.0 / SAMPLES)
    mine = geometry(ours(height, width, SAMPLES), height, width)
    theirs = geometry(torchvision_boxes(height, width, SAMPLES), height, width)
    for name in mine:
        assert ks_statistic(mine[name], theirs[name]) < critical, name
    assert min(mine["scale"]) >= CROP_SCALE[0] * 0.9 and max(mine["scale"]) <= 1.0
    # within the ratio range up to the rounding of the sides (a 1:4 image's fallback crop clamps its ratio into it)
    assert all(math.log(CROP_RATIO[0]) - 0.05 <= r <= math.log(CROP_RATIO[1]) + 0.05 for r in mine["log_ratio"])


def test_the_geometry_test_catches_a_wrong_range():
    critical = KS_C_001 * math.sqrt(2.0 / SAMPLES)
    mine = geometry(ours(375, 500, SAMPLES), 375, 500)
    narrower = geometry(torchvision_boxes(375, 500, SAMPLES, scale=(0.2, 1.0)), 375, 500)
    squarer = geometry(torchvision_boxes(375, 500, SAMPLES, ratio=(0.9, 1.1)), 375, 500)
    assert ks_statistic(mine["scale"], narrower["scale"]) > critical
    assert ks_statistic(mine["log_ratio"], squarer["log_ratio"]) > critical


def test_flips_are_close_to_one_half_and_follow_the_seed():
    flips = [choices(5, 0, i, 375, 500)[1] for i in range(SAMPLES)]
    sigma = math.sqrt(0.25 / SAMPLES)
    assert abs(sum(flips) / SAMPLES - 0.5) < 4 * sigma
    assert flips == [choices(5, 0, i, 375, 500)[1] for i in range(SAMPLES)]
    assert flips != [choices(6, 0, i, 375, 500)[1] for i in range(SAMPLES)]
    # independent of the crop: flipped and unflipped images have the same crop-scale distribution
    boxes = [choices(5, 0, i, 375, 500)[0] for i in range(SAMPLES)]
    scale = geometry(boxes, 375, 500)["scale"]
    flipped = [s for s, f in zip(scale, flips, strict=True) if f]
    kept = [s for s, f in zip(scale, flips, strict=True) if not f]
    assert ks_statistic(flipped, kept) < KS_C_001 * math.sqrt((len(flipped) + len(kept)) / (len(flipped) * len(kept)))


# --------------------------------------------------------------------------------- the batched augmentation


def test_batched_augmentation_matches_the_antialiased_reference_within_the_tolerance(photos: Path):
    images, _ = decoded(photos)
    batched = AUGMENTS.get("batched")
    for epoch in range(3):
        boxes, flips = picks(images, seed=0, epoch=epoch)
        out = batched.apply(images, boxes, flips, SIZE, torch.contiguous_format, torch.float32)
        difference = (grey_levels(out) - reference(images, boxes, flips, SIZE)).abs().flatten()
        assert float(difference.mean()) <= TOLERANCE_MEAN, epoch
        assert float(difference.quantile(0.99)) <= TOLERANCE_P99, epoch
        # not a vacuous bound: the same images with another epoch's crops and flips are far outside it
        other_boxes, other_flips = picks(images, seed=0, epoch=epoch + 100)
        wrong = batched.apply(images, other_boxes, other_flips, SIZE, torch.contiguous_format, torch.float32)
        assert float((grey_levels(wrong) - reference(images, boxes, flips, SIZE)).abs().mean()) > 4 * TOLERANCE_MEAN


def test_enlarged_crops_are_the_same_bilinear_interpolation_as_the_reference():
    generator = torch.Generator().manual_seed(1)
    images = [torch.randint(0, 256, (3, 40, 50), dtype=torch.uint8, generator=generator) for _ in range(6)]
    boxes = [(0, 0, 40, 50), (3, 4, 20, 30), (10, 0, 7, 9), (0, 20, 33, 30), (39, 49, 1, 1), (5, 5, 16, 16)]
    flips = [False, True, False, True, True, False]
    out = AUGMENTS.get("batched").apply(images, boxes, flips, 50, torch.contiguous_format, torch.float32)
    expected = AUGMENTS.get("per-image").apply(images, boxes, flips, 50, torch.contiguous_format, torch.float32)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-5)


def test_a_flip_mirrors_the_output_exactly():
    generator = torch.Generator().manual_seed(2)
    images = [torch.randint(0, 256, (3, 90, 70), dtype=torch.uint8, generator=generator) for _ in range(4)]
    boxes = [(0, 0, 90, 70), (10, 5, 61, 47), (2, 30, 40, 33), (50, 0, 21, 20)]
    batched = AUGMENTS.get("batched")
    plain = batched.apply(images, boxes, [False] * 4, 24, torch.contiguous_format, torch.float32)
    flipped = batched.apply(images, boxes, [True] * 4, 24, torch.contiguous_format, torch.float32)
    torch.testing.assert_close(flipped, plain.flip(-1), atol=1e-5, rtol=1e-6)
    mixed = batched.apply(images, boxes, [True, False, False, True], 24, torch.contiguous_format, torch.float32)
    torch.testing.assert_close(mixed[1:3], plain[1:3])
    torch.testing.assert_close(mixed[0], plain[0].flip(-1), atol=1e-5, rtol=1e-6)


@pytest.mark.parametrize("memory_format, dtype", [(torch.channels_last, torch.float32),
                                                  (torch.channels_last, torch.bfloat16),
                                                  (torch.contiguous_format, torch.float16)])
def test_batched_output_is_in_the_modes_dtype_and_memory_format(photos: Path, memory_format, dtype):
    images, _ = decoded(photos)
    boxes, flips = picks(images[:8], seed=1, epoch=0)
    full = AUGMENTS.get("batched").apply(images[:8], boxes, flips, SIZE, torch.contiguous_format, torch.float32)
    out = AUGMENTS.get("batched").apply(images[:8], boxes, flips, SIZE, memory_format, dtype)
    assert out.shape == (8, 3, SIZE, SIZE) and out.dtype == dtype and out.is_contiguous(memory_format=memory_format)
    torch.testing.assert_close(out.to(torch.float32), full, atol=0.02, rtol=0.01)  # only the final rounding differs


def test_groups_cover_every_image_once_and_bound_the_padding():
    rng = random.Random(4)
    sizes = [(rng.randint(20, 500), rng.randint(20, 500)) for _ in range(256)]
    parts = groups(sizes)
    assert sorted(i for part in parts for i in part) == list(range(256))
    assert len(parts) <= 32  # any mix of shapes: a few dozen batched calls at most, not one per image
    for part in parts:
        canvas = len(part) * max(sizes[i][0] for i in part) * max(sizes[i][1] for i in part)
        assert len(part) == 1 or canvas <= PAD_LIMIT * sum(sizes[i][0] * sizes[i][1] for i in part)
    assert groups([(10, 10)] * 5) == [[0, 1, 2, 3, 4]] and groups([]) == []
    assert groups(sizes) == parts
    # RandomResizedCrop's crops of ImageNet-like images (landscape, portrait, a few larger ones): a handful
    shapes = [(375, 500)] * 150 + [(500, 375)] * 60 + [(rng.randint(200, 1200), rng.randint(200, 1200))] * 46
    crops = [choices(0, 0, i, h, w)[0] for i, (h, w) in enumerate(shapes)]
    assert len(groups([(h, w) for _, _, h, w in crops])) <= 6


# ------------------------------------------------------------------- the gpu pipeline's streams on a CPU


class Log:
    """What the stand-in streams, events and tensors saw, in order, with the thread that did it."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, ...]] = []
        self.lock = threading.Lock()

    def add(self, *entry: str) -> None:
        with self.lock:
            self.entries.append((threading.current_thread().name, *entry))


@pytest.fixture
def logged_cuda(monkeypatch: pytest.MonkeyPatch) -> Log:
    """CUDA streams and events replaced by stand-ins that log each record, wait and record_stream."""
    log = Log()
    counter = iter(range(1_000_000))

    class Stream:
        def __init__(self, *args: Any, name: str | None = None, **kwargs: Any) -> None:
            self.name = name or f"side{next(counter)}"

        def wait_event(self, event: Any) -> None:
            log.add("wait", self.name, event.name)

    class Event:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.name = f"event{next(counter)}"

        def record(self, stream: Any = None) -> None:
            log.add("record", self.name, getattr(stream, "name", "current"))

    current = Stream(name="current")
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, stream: log.add("record_stream", stream.name))
    return log


def test_the_stream_hand_over_orders_decode_augment_and_training(photos: Path, logged_cuda: Log,
                                                                monkeypatch: pytest.MonkeyPatch):
    from clsbench.data.pipelines.gpu import GpuStream

    batched = AUGMENTS.get("batched")
    apply = type(batched).apply

    def logged_apply(*args: Any) -> torch.Tensor:
        logged_cuda.add("augment")
        return apply(batched, *args)

    monkeypatch.setattr(batched, "apply", logged_apply)  # before the stream's threads start
    settings = DataSettings(str(photos), source="memory", pipeline="gpu")
    spec = BatchSpec(batch_size=4, input_size=16, device=torch.device("cpu"), memory_format=torch.channels_last,
                     dtype=torch.float32, seed=0, settings=settings)
    stream = GpuStream(MemorySource().open(settings), spec, {"pipeline": "gpu"})
    decode_name, augment_name = stream.decode_stream.name, stream.augment_stream.name
    try:
        for _ in range(3):
            stream.next()
    finally:
        stream.close()
    entries = list(logged_cuda.entries)
    by_thread: dict[str, list[tuple[str, ...]]] = {}
    for thread, *entry in entries:
        by_thread.setdefault(thread, []).append(tuple(entry))
    decoded_events = [e[1] for e in by_thread["clsbench-gpu-decode"] if e[0] == "record"]
    assert all(e == ("record", e[1], decode_name) for e in by_thread["clsbench-gpu-decode"])
    # the augment stage: wait for a decoded batch's event, augment, mark the decoded images, record ready
    augment = by_thread["clsbench-gpu-augment"]
    ready_events = []
    step = 2 + spec.batch_size + 1
    for n in range(0, len(augment) - step + 1, step):
        wait, apply, *marks, ready = augment[n:n + step]
        assert wait == ("wait", augment_name, decoded_events[n // step])
        assert apply == ("augment",)
        assert marks == [("record_stream", augment_name)] * spec.batch_size
        assert ready[0] == "record" and ready[2] == augment_name
        ready_events.append(ready[1])
    # the training thread: its stream waits for each ready event in turn and keeps images and labels alive on it
    main = by_thread[threading.main_thread().name]
    assert main == [entry for event in ready_events[:3] for entry in
                    (("wait", "current", event), ("record_stream", "current"), ("record_stream", "current"))]
    # and every wait comes after the record it waits for
    recorded = {e[2]: i for i, e in enumerate(entries) if e[1] == "record"}
    for i, entry in enumerate(entries):
        if entry[1] == "wait":
            assert recorded[entry[3]] < i


def batches_of(root: Path, seed: int, augment: str | None, count: int = 3,
               decoder: str | None = None) -> list[torch.Tensor]:
    from clsbench.data.pipelines.gpu import GpuStream

    settings = DataSettings(str(root), source="memory", pipeline="gpu", augment=augment, decoder=decoder)
    spec = BatchSpec(batch_size=8, input_size=SIZE, device=torch.device("cpu"), memory_format=torch.channels_last,
                     dtype=torch.float32, seed=seed, settings=settings)
    stream = GpuStream(MemorySource().open(settings), spec, {})
    try:
        return [stream.next()[0].clone() for _ in range(count)]
    finally:
        stream.close()


def test_the_gpu_pipeline_is_deterministic_with_a_seed(photos: Path, logged_cuda: Log):
    first, again, other = batches_of(photos, 3, None), batches_of(photos, 3, None), batches_of(photos, 4, None)
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(first[0], other[0])
    per_image = batches_of(photos, 3, "per-image")  # the same crops and flips, the other resize
    for a, b in zip(first, per_image, strict=True):
        assert not torch.equal(a, b)
        assert float((grey_levels(a) - grey_levels(b)).abs().mean()) <= TOLERANCE_MEAN


@pytest.mark.parametrize("augment, decoder", [("batched", "cpu"), ("separable", "cpu"), ("per-image", "cpu"),
                                              ("batched", "split")])
def test_the_host_decoders_give_the_same_batches_as_decoding_whole_images(photos: Path, logged_cuda: Log,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         augment: str, decoder: str):
    # The cpu decoder crops on the host and the augmentation gets the crops with whole-crop boxes; the default
    # decoder hands whole images with their boxes (decoded by libjpeg on a CPU in both cases here): same pixels.
    # The split decoder shares each batch between the two.
    monkeypatch.setenv("CLSBENCH_GPU_DECODE_THREADS", "3")
    whole = batches_of(photos, 5, augment)
    cropped = batches_of(photos, 5, augment, decoder=decoder)
    for a, b in zip(whole, cropped, strict=True):
        assert torch.equal(a, b)


def test_the_split_follows_the_two_decoders_rates():
    from clsbench.data.decoders.split import SHARE_LIMITS, SMOOTHING, START_SHARE, next_share

    # the host decoded 128 images in 40 ms, the GPU 128 in 20 ms: balanced, the host takes a third
    moved = next_share(START_SHARE, 128, 0.040, 128, 0.020)
    assert moved == pytest.approx((1 - SMOOTHING) * 0.5 + SMOOTHING / 3)
    share = START_SHARE
    for _ in range(40):  # at fixed rates (host 3,200 img/s, GPU 6,400 img/s) it settles at the balance
        k = round(share * 256)
        share = next_share(share, k, k / 3200, 256 - k, (256 - k) / 6400)
    assert share == pytest.approx(1 / 3, abs=0.01)
    assert next_share(0.95, 250, 0.001, 6, 1.0) == SHARE_LIMITS[1]  # never all to one side
    assert next_share(0.05, 6, 1.0, 250, 0.001) == SHARE_LIMITS[0]
    assert next_share(0.4, 0, 0.0, 256, 0.03) == 0.4  # a side with nothing to go by leaves it


def test_the_split_session_shares_batches_and_records_its_share(photos: Path):
    from clsbench.data.decoders.split import SplitSession
    from clsbench.data.sources.memory import MemorySource

    data = MemorySource().open(DataSettings(str(photos), source="memory", pipeline="gpu"))
    encoded = [data.read(i) for i in range(8)]
    session = SplitSession(torch.device("cpu"), 2)
    try:
        images = session.decode(encoded, list(data.index.kinds[:8]))
        assert len(images) == 8 and all(im is not None and im.shape[0] == 3 for im in images)
        assert session.facts["cpu_share_mean"] == 0.5 and 0.05 <= session.facts["cpu_share"] <= 0.95
        session.decode(encoded, list(data.index.kinds[:8]))
        assert session.facts["cpu_share_mean"] == pytest.approx((0.5 + session._shares[1]) / 2, abs=1e-4)
    finally:
        session.close()


def test_decode_thread_shares_and_count():
    from clsbench.data.decoders.cpu import THREADS_ENV, decode_threads, shares, usable_cpus
    from clsbench.errors import InvalidInputError

    assert shares(10, 3) == [range(0, 3), range(3, 6), range(6, 10)]
    assert shares(2, 8) == [range(0, 1), range(1, 2)] and shares(0, 4) == []
    assert sum(len(r) for r in shares(256, 12)) == 256 and len(shares(256, 12)) == 12
    assert decode_threads({}) == max(1, usable_cpus() - 4)
    assert decode_threads({THREADS_ENV: " 7 "}) == 7
    for bad in ("0", "many", "-2", "100000"):
        with pytest.raises(InvalidInputError, match=THREADS_ENV):
            decode_threads({THREADS_ENV: bad})


# ------------------------------------------------------------------------------- stages measured alone


class StandInMeter(HostMeter):
    """A device meter with scripted readings: 2 ms per batch, 1,000 bytes more at each reset."""

    timer = "stand-in"

    def __init__(self) -> None:
        self.marks = 0
        self.resets = 0
        self.released = False

    def begin(self) -> None:
        self.marks += 1

    def batch_ms(self) -> list[float] | None:
        return [2.0] * self.marks

    def reset(self) -> None:
        self.marks = 0
        self.resets += 1

    def peak_bytes(self) -> int | None:
        return 1000 * self.resets

    def release(self) -> None:
        self.released = True


def cpu_decode(dataset: Any) -> Any:
    def decode(encoded, indices):
        return decode_batch(encoded, [dataset.index.kinds[i] for i in indices], torch.device("cpu"))

    return decode


def stage_spec(root: Path, batch: int = 8) -> BatchSpec:
    return BatchSpec(batch_size=batch, input_size=SIZE, device=torch.device("cpu"), memory_format=torch.channels_last,
                     dtype=torch.float32, seed=0, settings=DataSettings(str(root), pipeline="gpu"))


def test_stages_are_measured_alone_with_the_reference_decode(photos: Path, tmp_path: Path):
    from clsbench.analysis.data import stage_figures

    root = tmp_path / "ds"
    shutil.copytree(photos, root)
    damaged = sorted(root.glob("class_0001/*.jpg"))[0]
    damaged.write_bytes(DAMAGED)  # the scan keeps it, the decoder fails
    dataset = FolderSource().open(DataSettings(str(root), prime_cache=False))
    # readings, two per stage: read 1 ms, decode 5 ms, batched 2 ms, per-image 9 ms
    clock = FakeClock((1_000_000, 1_000_000, 1_000_000, 5_000_000, 1_000_000, 2_000_000, 1_000_000, 9_000_000))
    meter = StandInMeter()
    record = measure_stages(dataset, stage_spec(root), decode=cpu_decode(dataset),
                            augments=[AUGMENTS.get("batched"), AUGMENTS.get("per-image")], meter=meter, clock=clock,
                            batches=3)
    assert record["batches"] == 3 and record["augment"] == "batched" and record["device_timer"] == "stand-in"
    assert [(s["stage"], s.get("augment")) for s in record["stages"]] == [
        ("read", None), ("decode", None), ("augment", "batched"), ("augment", "per-image")]
    assert [s["seconds"] for s in record["stages"]] == [0.001, 0.005, 0.002, 0.009]
    assert all(s["images"] == 24 for s in record["stages"])
    assert record["stages"][1]["batch_ms"] == [2.0] * 3 and record["stages"][0]["batch_ms"] is None
    assert record["stages"][2]["batch_bytes"] == 8 * 3 * SIZE * SIZE * 4 and meter.released
    assert record["decode_failures"] == [damaged.relative_to(root).as_posix()]  # 4 batches of 8: every image
    figures = stage_figures(record)
    assert figures["slowest"] == "decode" and figures["slowest_img_s"] == pytest.approx(24 / 0.005)
    assert figures["device_ms_per_batch"] == pytest.approx(4.0)  # decode + the augmentation used, not the other
    assert [r["img_s"] for r in figures["stages"]] == pytest.approx([24000, 4800, 12000, 24 / 0.009])
    assert stage_figures({"error": "OutOfMemoryError: x"}) == {"error": "OutOfMemoryError: x"}
    assert stage_figures(None) is None


def test_stage_failures_of_a_whole_batch_are_one_clear_error(photos: Path, tmp_path: Path):
    from clsbench.data.errors import DataError

    root = tmp_path / "ds"
    shutil.copytree(photos, root)
    for path in root.glob("class_*/*.jpg"):
        path.write_bytes(DAMAGED)
    dataset = FolderSource().open(DataSettings(str(root), prime_cache=False))
    with pytest.raises(DataError, match="could be decoded"):
        measure_stages(dataset, stage_spec(root), decode=cpu_decode(dataset), augments=[AUGMENTS.get("batched")],
                       meter=HostMeter(), clock=FakeClock(), batches=1)


class StagedCpuPipeline(CpuPipeline):
    """The cpu pipeline plus the stage measurement the gpu pipeline runs on a GPU (CPU decode, host meter)."""

    name = "staged"
    priority = 90
    fail = False

    def check(self, settings: DataSettings) -> None:
        pass

    def candidates(self, base: DataSettings, device: str, workers: Any) -> list[DataSettings]:
        import dataclasses

        return [dataclasses.replace(base, pipeline=self.name)]

    def measure_stages(self, dataset: Any, spec: BatchSpec, clock: Any) -> dict[str, Any]:
        if self.fail:
            raise RuntimeError("probe broke")
        return measure_stages(dataset, spec, decode=cpu_decode(dataset), augments=[AUGMENTS.get("batched")],
                              meter=HostMeter(), clock=clock, batches=1)


@pytest.fixture
def staged() -> Any:
    pipeline = StagedCpuPipeline()
    PIPELINES.register(pipeline.name, pipeline)
    yield pipeline
    PIPELINES.unregister(pipeline.name)


def test_the_train_workload_stores_the_stages_and_records_a_failed_probe(photos: Path, staged: Any):
    from clsbench.analysis.summary import build_measurement
    from clsbench.engine.worker import Job, execute

    settings = DataSettings(str(photos), pipeline="staged")
    cell = Cell(TINY, "train", "fp32", 8, "cpu", data=settings)
    job = Job(cell=cell, repeat=0, stop=StopRule(warmup=1, min_iterations=2, min_seconds=0.0), clock=FakeClock())
    record = execute(job)
    assert record["status"] == "ok", record
    assert record["data"]["stages"]["augment"] == "batched" and record["timings"]["stage_probe_s"] > 0
    summary = build_measurement(cell, [record]).summary["data"]
    assert summary["stages"]["slowest"] in ("read", "decode", "augment")
    staged.fail = True
    failed = execute(job)
    assert failed["status"] == "ok" and failed["data"]["stages"] == {"error": "RuntimeError: probe broke"}


def test_diagnose_takes_the_ceiling_in_the_given_mode_and_prints_the_stages(photos: Path, staged: Any,
                                                                            tmp_path: Path):
    from clsbench.core.options import Execution, MeasureOptions
    from clsbench.procedures.diagnose import diagnose
    from clsbench.procedures.diagnose_text import render_diagnose

    options = MeasureOptions(repeats=1, warmup=1, iterations=2, min_time=0.0, input_size=32)
    outcome = diagnose(TINY, photos, mode="fp32+cl", batch_size=8, device="cpu", workers=[0],
                       pipelines=["cpu", "staged"], quick=True, output=tmp_path / "d.json", options=options,
                       execution=Execution(isolation="inline", clock=FakeClock(), probe=False))
    modes = {m.mode for m in outcome.result.measurements}
    assert modes == {"fp32+cl"}  # the synthetic ceiling and every setting in the mode asked for
    synthetic = next(m for m in outcome.result.measurements if m.data is None)
    assert synthetic.status == "ok"
    text = render_diagnose(outcome.analysis)
    assert "kept fed: the fp32+cl synthetic ceiling" in text
    assert {e["pipeline"] for e in outcome.analysis["pipelines"]} == {"cpu", "staged"}
    assert "stages of folder staged w0, each alone (batch 8, 1 timed batch; reading on 1 thread):" in text
    assert "slowest stage: " in text and "augment batched" in text


# ------------------------------------------------------------------------------- the setting and its CLI


def test_the_augment_setting_is_checked_labelled_stored_and_reproduced():
    from clsbench.core.options import data_cli_args
    from clsbench.data.plan import check_settings
    from clsbench.errors import InvalidInputError
    from clsbench.results.schema import data_label

    chosen = DataSettings("/d", pipeline="gpu", augment="per-image")
    assert check_settings(chosen) is chosen and chosen.label() == "folder gpu w0 per-image"
    assert DataSettings("/d", pipeline="gpu").label() == "folder gpu w0"
    assert "augment" not in DataSettings("/d", pipeline="gpu").to_dict()  # older files keep their bytes
    assert chosen.to_dict()["augment"] == "per-image" and DataSettings.from_dict(chosen.to_dict()) == chosen
    assert Cell(TINY, "train", "fp32", 8, "cpu", data=chosen).to_dict()["data"]["augment"] == "per-image"
    assert "augment" not in Cell(TINY, "train", "fp32", 8, "cpu", data=DataSettings("/d")).to_dict()["data"]
    assert data_label({"directory": "/d", "pipeline": "gpu"}) == "folder gpu w0"
    assert data_cli_args(chosen)[-2:] == ["--gpu-augment", "per-image"]
    assert "--gpu-augment" not in data_cli_args(DataSettings("/d", pipeline="gpu"))
    for bad, message in ((dict(pipeline="gpu", augment="bilinear"), "unknown gpu augmentation 'bilinear'"),
                         (dict(augment="batched"), "--gpu-augment applies to the gpu pipeline, not 'cpu'"),
                         (dict(pipeline="dali", augment="batched"), "--gpu-augment applies"),
                         (dict(pipeline="gpu", augment=" "), "must be a name")):
        with pytest.raises(InvalidInputError, match=message):
            check_settings(DataSettings("/d", **bad))


def test_the_decoder_setting_is_checked_labelled_stored_and_reproduced():
    from clsbench.core.options import data_cli_args
    from clsbench.data.plan import check_settings
    from clsbench.errors import InvalidInputError

    chosen = DataSettings("/d", pipeline="gpu", augment="separable", decoder="cpu")
    assert check_settings(chosen) is chosen and chosen.label() == "folder gpu w0 separable cpu-decode"
    assert "decoder" not in DataSettings("/d", pipeline="gpu").to_dict()  # older files keep their bytes
    assert DataSettings.from_dict(chosen.to_dict()) == chosen
    assert DataSettings("/d", pipeline="gpu", decoder="cpu") != DataSettings("/d", pipeline="gpu")
    assert data_cli_args(chosen)[-4:] == ["--gpu-augment", "separable", "--gpu-decode", "cpu"]
    assert "--gpu-decode" not in data_cli_args(DataSettings("/d", pipeline="gpu"))
    for bad, message in ((dict(pipeline="gpu", decoder="turbo"), "unknown gpu decoder 'turbo'"),
                         (dict(decoder="cpu"), "--gpu-decode applies to the gpu pipeline, not 'cpu'"),
                         (dict(pipeline="gpu", decoder=""), "must be a name")):
        with pytest.raises(InvalidInputError, match=message):
            check_settings(DataSettings("/d", **bad))


@pytest.mark.parametrize("args, fragment", [
    (["--pipeline", "gpu", "--gpu-augment", "per-imag"], "did you mean: per-image?"),
    (["--gpu-augment", "batched"], "--gpu-augment applies to the gpu pipeline"),
    (["--pipeline", "gpu", "--gpu-decode", "cpus"], "did you mean: cpu?"),
    (["--gpu-decode", "cpu"], "--gpu-decode applies to the gpu pipeline"),
])
def test_cli_gpu_augment_errors_are_one_line(photos: Path, args: list[str], fragment: str):
    from click.testing import CliRunner

    from clsbench.cli import main

    done = CliRunner().invoke(main, ["run", "--model", TINY, "--device", "cpu", "--data", str(photos), *args])
    assert done.exit_code == 2, done.output
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert any(fragment in line for line in lines) and "Traceback" not in done.output


def test_stage_busy_time_profiles_the_decode_and_each_augmentation_alone(photos: Path):
    from clsbench.data.stages import measure_stage_busy

    dataset = FolderSource().open(DataSettings(str(photos), prime_cache=False))
    calls: list[tuple[str, int]] = []
    seen: list[Any] = []

    def busy(run_once: Any, iterations: int) -> dict[str, Any]:
        for _ in range(iterations):
            seen.append(run_once())
        calls.append((type(seen[-1]).__name__, iterations))
        return {"gpu_busy_ms_per_iteration": float(len(calls)), "profiled_iterations": iterations}

    augments = [AUGMENTS.get("batched"), AUGMENTS.get("per-image")]
    record = measure_stage_busy(dataset, stage_spec(photos), decode=cpu_decode(dataset), augments=augments,
                                busy=busy, batches=2)
    assert calls == [("list", 2), ("Tensor", 2), ("Tensor", 2)]  # the decode's images, then each augmented batch
    assert record == {"batches": 2, "decode": {"gpu_busy_ms_per_iteration": 1.0, "profiled_iterations": 2},
                      "augment": {"batched": {"gpu_busy_ms_per_iteration": 2.0, "profiled_iterations": 2},
                                  "per-image": {"gpu_busy_ms_per_iteration": 3.0, "profiled_iterations": 2}}}
    batched = seen[2:4]  # each profiled call draws new crops (another epoch), as in training
    assert batched[0].shape == (8, 3, SIZE, SIZE) and not torch.equal(batched[0], batched[1])


def test_the_stage_busy_probe_runs_on_cuda_only_and_records_its_failure():
    from clsbench.workloads.train_data import measure_stage_busy

    class Probed:
        def __init__(self, outcome: Any) -> None:
            self.outcome = outcome

        def measure_stage_busy(self, dataset: Any, spec: BatchSpec) -> dict[str, Any]:
            if isinstance(self.outcome, Exception):
                raise self.outcome
            return self.outcome

    cuda = dataclasses.replace(stage_spec(Path("/d")), device=torch.device("cuda"))
    assert measure_stage_busy(Probed({"batches": 2}), None, cuda) == {"batches": 2}
    assert measure_stage_busy(Probed({"batches": 2}), None, stage_spec(Path("/d"))) is None  # a CPU measurement
    assert measure_stage_busy(CpuPipeline(), None, cuda) is None  # a pipeline without the probe
    assert measure_stage_busy(Probed(RuntimeError("CUPTI broke")), None, cuda) == {"error": "RuntimeError: CUPTI broke"}
