"""Real data on the CPU: the dataset generator, the folder scan and its bad files, the sources, the cpu pipeline,
the data-wait/compute split (fake clock), failed workers as failed measurements, the CLI's data options and errors.

The GPU pipeline's threads, queues and failure paths run here too, with CUDA's stream and event objects replaced by
stand-ins (its real CUDA path is in test_data_gpu.py, marked ``gpu``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner, Result

from clsbench.cli import main
from clsbench.core.plan import Cell, StopRule
from clsbench.data import DataSettings
from clsbench.data.augment import EpochSampler, choices, crop_box, crop_flip_resize, sample_rng
from clsbench.data.base import BatchSpec
from clsbench.data.errors import DataError
from clsbench.data.make import MANIFEST_NAME, MakeSpec, make_dataset
from clsbench.data.pipelines.cpu import CpuPipeline
from clsbench.data.plan import check_settings
from clsbench.data.scan import scan_folder
from clsbench.data.sources.folder import FolderSource
from clsbench.data.sources.memory import MemorySource
from clsbench.engine.worker import Job, execute
from clsbench.errors import InvalidInputError, ResultFileError
from clsbench.measure.clock import FakeClock
from clsbench.results.schema import data_label

TESTS = Path(__file__).parent
TINY = "clsbench_testmodels:tiny"
SPEC = MakeSpec(images=48, classes=3, seed=5, width=40, height=30)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small generated dataset, made once per module (tests that change files work on a copy)."""
    root = tmp_path_factory.mktemp("data") / "ds"
    make_dataset(root, SPEC, jobs=1)
    return root


@pytest.fixture
def copy(dataset: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ds"
    shutil.copytree(dataset, target)
    return target


def first_jpeg(root: Path) -> Path:
    return sorted(root.glob("class_*/*.jpg"))[0]


# ------------------------------------------------------------------------------------------------ generator


def test_generator_is_deterministic_and_independent_of_processes(dataset: Path, tmp_path: Path):
    again = tmp_path / "again"
    result = make_dataset(again, SPEC, jobs=2)
    assert result.images == 48 and result.classes == 3 and result.jobs == 2
    files = sorted(p.relative_to(dataset) for p in dataset.glob("class_*/*.jpg"))
    assert len(files) == 48
    assert files == sorted(p.relative_to(again) for p in again.glob("class_*/*.jpg"))
    assert all((dataset / f).read_bytes() == (again / f).read_bytes() for f in files)
    other = make_dataset(tmp_path / "other", MakeSpec(**{**SPEC.__dict__, "seed": 6}), jobs=1)
    assert other.bytes != result.bytes or (tmp_path / "other" / files[0]).read_bytes() != (dataset / files[0]
                                                                                          ).read_bytes()


def test_generator_sizes_classes_and_manifest(dataset: Path):
    from PIL import Image

    counts = {d.name: len(list(d.glob("*.jpg"))) for d in dataset.iterdir() if d.is_dir()}
    assert counts == {"class_0000": 16, "class_0001": 16, "class_0002": 16}
    for path in sorted(dataset.glob("class_*/*.jpg"))[:12]:
        with Image.open(path) as image:
            assert image.format == "JPEG"
            w, h = image.size
            assert {round(max(w, h) / 40, 1), round(min(w, h) / 30, 1)} <= {x / 100 for x in range(80, 121)}
    manifest = json.loads((dataset / MANIFEST_NAME).read_text())
    assert manifest["spec"]["seed"] == 5 and manifest["images"] == 48
    assert manifest["bytes"] == sum(p.stat().st_size for p in dataset.glob("class_*/*.jpg"))
    assert any("procedural" in b for b in manifest["bases"])


def test_generator_default_size_is_imagenet_like(tmp_path: Path):
    result = make_dataset(tmp_path / "big", MakeSpec(images=6, classes=2, seed=1), jobs=1)
    assert 30_000 < result.mean_bytes < 250_000  # about 100 KB at 500x375, quality ~90


def test_generator_refuses_a_non_empty_directory_and_bad_options(dataset: Path, tmp_path: Path):
    with pytest.raises(ResultFileError, match="not empty"):
        make_dataset(dataset, SPEC)
    with pytest.raises(InvalidInputError, match="--images"):
        make_dataset(tmp_path / "x", MakeSpec(images=0, classes=1))
    with pytest.raises(InvalidInputError, match="at least as many images"):
        make_dataset(tmp_path / "x", MakeSpec(images=2, classes=3))


# ----------------------------------------------------------------------------------------------------- scan


def add_bad_files(root: Path) -> dict[str, str]:
    """Every kind of bad file next to good ones; returns {relative path: expected reason fragment}."""
    good = first_jpeg(root).read_bytes()
    bad = root / "class_0000"
    (bad / "truncated.jpg").write_bytes(good[: len(good) // 2])
    (bad / "notes.txt").write_text("not an image\n")
    (bad / "fake.jpg").write_text("this is text pretending to be a JPEG\n" * 40)
    (bad / "empty.jpg").write_bytes(b"")
    (bad / "broken_link.jpg").symlink_to(root / "nowhere.jpg")
    os.mkfifo(bad / "pipe.jpg")
    (root / "empty_class").mkdir()
    (root / "only_junk").mkdir()
    (root / "only_junk" / "readme.md").write_text("# nothing here\n")
    return {
        "class_0000/truncated.jpg": "truncated JPEG",
        "class_0000/notes.txt": "not an image file",
        "class_0000/fake.jpg": "unrecognised header",
        "class_0000/empty.jpg": "empty file",
        "class_0000/broken_link.jpg": "cannot stat",
        "class_0000/pipe.jpg": "not a regular file",
        "only_junk/readme.md": "not an image file",
    }


def test_scan_counts_skips_and_names_every_bad_file(copy: Path):
    expected = add_bad_files(copy)
    index = scan_folder(copy)
    assert len(index) == 48
    assert index.classes == ("class_0000", "class_0001", "class_0002")
    reasons = {s.path: s.reason for s in index.skipped}
    assert set(reasons) == set(expected)
    for path, fragment in expected.items():
        assert fragment in reasons[path], (path, reasons[path])
    assert index.empty_classes == ("empty_class", "only_junk")
    text = " ".join(index.warnings())
    assert "skipped 7 file(s)" in text and "broken_link.jpg (cannot stat" in text and "and 2 more" in text
    assert "empty_class, only_junk" in text
    assert index.ignored_top_level == 1  # the manifest


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_scan_skips_an_unreadable_file(copy: Path):
    target = first_jpeg(copy)
    target.chmod(0)
    try:
        reasons = {s.path: s.reason for s in scan_folder(copy).skipped}
    finally:
        target.chmod(0o644)
    assert "permission denied" in reasons[str(target.relative_to(copy))]


def test_scan_detects_png_and_truncated_png(tmp_path: Path):
    from PIL import Image

    root = tmp_path / "png" / "a"
    root.mkdir(parents=True)
    Image.new("RGB", (20, 10), (10, 200, 30)).save(root / "ok.png")
    data = (root / "ok.png").read_bytes()
    (root / "cut.png").write_bytes(data[:-20])
    index = scan_folder(tmp_path / "png")
    assert index.files == ("a/ok.png",) and index.kinds == ("png",)
    assert "truncated PNG" in index.skipped[0].reason


@pytest.mark.parametrize("case, message", [
    ("missing", "does not exist"), ("file", "not a directory"), ("empty", "is empty"),
    ("flat", "no class folders"), ("junk", "no usable image"),
])
def test_scan_errors_when_nothing_usable(tmp_path: Path, case: str, message: str):
    root = tmp_path / "root"
    if case == "file":
        root.write_text("x")
    elif case != "missing":
        root.mkdir()
    if case == "flat":
        (root / "a.jpg").write_bytes(b"\xff\xd8\xff\xd9")
    if case == "junk":
        (root / "c").mkdir()
        (root / "c" / "x.jpg").write_text("no")
        (root / "d").mkdir()
    with pytest.raises(DataError, match=message):
        scan_folder(root)


def test_fingerprint_follows_names_and_sizes(copy: Path):
    before = scan_folder(copy).fingerprint
    assert scan_folder(copy).fingerprint == before
    (copy / "class_0001" / "extra.jpg").write_bytes(first_jpeg(copy).read_bytes())
    assert scan_folder(copy).fingerprint != before


# -------------------------------------------------------------------------------------------------- sources


def test_memory_source_holds_the_same_bytes(dataset: Path):
    settings = DataSettings(str(dataset), source="memory")
    memory = MemorySource().open(settings)
    folder = FolderSource().open(settings)
    assert len(memory) == len(folder) == 48
    for i in (0, 17, 47):
        assert torch.equal(memory.read(i), folder.read(i))
    assert memory.facts()["bytes_in_memory"] == scan_folder(dataset).total_bytes
    assert folder.facts()["cache_prime_bytes"] == scan_folder(dataset).total_bytes
    no_prime = FolderSource().open(DataSettings(str(dataset), prime_cache=False))
    assert no_prime.facts()["cache_prime_s"] is None


# ------------------------------------------------------------------------------------------- augmentation


def test_crop_boxes_fit_and_follow_the_seed():
    for index in range(200):
        top, left, h, w = crop_box(sample_rng(0, 0, index), 30, 40)
        assert 0 <= top <= 30 - h and 0 <= left <= 40 - w and h > 0 and w > 0
    assert choices(1, 2, 3, 375, 500) == choices(1, 2, 3, 375, 500)
    assert choices(1, 2, 3, 375, 500) != choices(1, 3, 3, 375, 500)
    assert crop_box(sample_rng(0, 0, 0), 1, 1000) == (0, 0, 1, 1) or crop_box(sample_rng(0, 0, 0), 1, 1000)[2] == 1


def test_epoch_sampler_permutes_each_epoch():
    sampler = EpochSampler(10, seed=3)
    first, second = list(sampler), list(sampler)
    assert {e for e, _ in first} == {0} and {e for e, _ in second} == {1}
    assert sorted(i for _, i in first) == list(range(10)) and first != [(0, i) for i in range(10)]
    assert [i for _, i in first] != [i for _, i in second]


def test_crop_flip_resize_shapes_and_normalisation():
    images = [torch.full((3, 30, 40), 124, dtype=torch.uint8), torch.zeros((3, 50, 20), dtype=torch.uint8)]
    out = crop_flip_resize(images, [(0, 0, 30, 40), (5, 5, 20, 10)], [False, True], 16, torch.channels_last)
    assert out.shape == (2, 3, 16, 16) and out.dtype == torch.float32
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert abs(float(out[0, 0].mean()) - (124 / 255 - 0.485) / 0.229) < 1e-3  # (x/255 - mean) / std
    assert float(out[1].max()) < -1.5  # black, normalised


# ------------------------------------------------------------------------------------------- cpu pipeline


def spec_for(settings: DataSettings, *, batch: int = 8, size: int = 24, channels_last: bool = False) -> BatchSpec:
    return BatchSpec(batch_size=batch, input_size=size, device=torch.device("cpu"),
                     memory_format=torch.channels_last if channels_last else torch.contiguous_format,
                     dtype=torch.float32, seed=0, settings=settings)


@pytest.mark.parametrize("workers, channels_last", [(0, False), (2, True)])
def test_cpu_pipeline_batches(dataset: Path, workers: int, channels_last: bool):
    settings = DataSettings(str(dataset), num_workers=workers, persistent_workers=workers > 0)
    data = FolderSource().open(settings)
    stream = CpuPipeline().open(data, spec_for(settings, channels_last=channels_last))
    try:
        batches = [stream.next() for _ in range(8)]  # 6 batches per epoch: crosses into a second epoch
        assert stream.facts()["epochs_started"] == 2
    finally:
        stream.close()
    images, labels = batches[0]
    assert images.shape == (8, 3, 24, 24) and images.dtype == torch.float32
    assert images.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    assert labels.dtype == torch.int64 and 0 <= int(labels.min()) and int(labels.max()) <= 2
    assert -3.0 < float(images.mean()) < 3.0  # normalised, not 0..255
    assert stream.take_failures() == []


def test_cpu_pipeline_is_reproducible(dataset: Path):
    settings = DataSettings(str(dataset))
    first = []
    for _ in range(2):
        stream = CpuPipeline().open(FolderSource().open(settings), spec_for(settings))
        first.append(stream.next())
        stream.close()
    assert torch.equal(first[0][0], first[1][0]) and torch.equal(first[0][1], first[1][1])


@pytest.mark.parametrize("workers, channels_last", [(0, False), (2, True)])
def test_uint8_batches_normalised_on_the_device_equal_the_workers_floats(dataset: Path, workers: int,
                                                                          channels_last: bool):
    batches = {}
    for where in ("worker", "device"):
        settings = DataSettings(str(dataset), num_workers=workers, normalize=where)
        stream = CpuPipeline().open(FolderSource().open(settings), spec_for(settings, channels_last=channels_last))
        try:
            raw, _ = stream.take()
            batches[where] = (raw.dtype, stream.place((raw, torch.zeros(8, dtype=torch.int64)))[0])
            assert stream.facts()["batch_dtype"] == str(raw.dtype).removeprefix("torch.")
        finally:
            stream.close()
    assert batches["worker"][0] == torch.float32 and batches["device"][0] == torch.uint8
    worker, device = batches["worker"][1], batches["device"][1]
    assert device.dtype == torch.float32
    assert device.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    assert torch.equal(worker, device)  # the same arithmetic, only in another place


def test_an_undecodable_file_is_replaced_and_named(copy: Path):
    damaged = copy / "class_0001" / "damaged.jpg"
    damaged.write_bytes(b"\xff\xd8\xff\xfe\x00\x04ab" + b"\x00" * 50 + b"\xff\xd9")  # passes the scan
    settings = DataSettings(str(copy), source="memory")
    data = MemorySource().open(settings)
    assert "class_0001/damaged.jpg" in data.index.files
    stream = CpuPipeline().open(data, spec_for(settings, batch=49))  # the whole dataset in one batch
    try:
        images, _ = stream.next()
    finally:
        stream.close()
    assert images.shape[0] == 49
    assert stream.take_failures() == ["class_0001/damaged.jpg"]


# ------------------------------------------------------------------------------ the workload (inline, cpu)


def data_job(settings: DataSettings, *, clock=None, rule: StopRule | None = None, batch: int = 8,
             mode: str = "fp32") -> Job:
    cell = Cell(TINY, "train", mode, batch, "cpu", data=settings)
    return Job(cell=cell, repeat=0, stop=rule or StopRule(warmup=1, min_iterations=4, min_seconds=0.0),
               clock=clock or FakeClock((1_000_000,)))


def test_data_wait_and_compute_split_with_the_fake_clock(dataset: Path):
    from clsbench.analysis.summary import build_measurement

    settings = DataSettings(str(dataset))
    job = data_job(settings, rule=StopRule(warmup=2, min_iterations=5, min_seconds=0.0))
    record = execute(job)
    assert record["status"] == "ok", record
    samples = record["samples"]
    # Each timed iteration reads the clock three times: after taking the batch, after placing it on the device and
    # after the step; the fake clock moves 1 ms per reading.
    assert samples["data_wait_ms"] == [1.0] * 5
    assert samples["copy_ms"] == [1.0] * 5
    assert samples["step_ms"] == [1.0] * 5
    assert samples["iteration_ms"] == [3.0] * 5
    assert samples["wall_s"] == pytest.approx(0.015)
    assert samples["images"] == 40 and samples["idle_ms"] is None
    assert record["timings"]["warmup_iterations"] == 2
    assert record["timings"]["data_startup_s"] == pytest.approx(0.001)
    assert record["data"]["settings"]["num_workers"] == 0
    assert record["data"]["dataset"]["images"] == 48
    assert record["data"]["drained_batches"] == 0  # no workers: nothing is prepared ahead
    # first batch, 2 warm-up batches, 5 timed: the 7th batch (3 + 4) begins the second epoch of 6 batches
    assert samples["epoch_start_wait_ms"] == [1.0]
    m = build_measurement(job.cell, [record])
    assert m.summary["throughput_img_s"] == pytest.approx(40 / 0.015)
    assert m.summary["data"]["data_wait_fraction"] == pytest.approx(1 / 3)
    assert m.summary["data"]["copy_fraction"] == pytest.approx(1 / 3)
    assert m.summary["data"]["idle_fraction"] == pytest.approx(2 / 3)  # on a CPU: waiting and placing
    assert m.summary["data"]["idle_method"] == "host"
    assert m.summary["data"]["epoch_start_wait_fraction"] == pytest.approx(1 / 15)
    assert m.summary["data"]["timed_epoch_starts"] == 1
    assert m.data == settings.to_dict() and m.key[-1] == "folder cpu w0"


def test_channels_last_training_with_workers_and_memory(dataset: Path):
    settings = DataSettings(str(dataset), source="memory", num_workers=2, persistent_workers=True)
    record = execute(data_job(settings, mode="fp32+cl"))
    assert record["status"] == "ok", record
    assert record["data"]["source"]["bytes_in_memory"] > 0
    assert record["samples"]["loss_last"] == record["samples"]["loss_last"]


def test_gpu_and_dali_pipelines_are_skipped_on_the_cpu(dataset: Path):
    for pipeline, fragment in (("gpu", "GPU decode needs CUDA"), ("dali", "needs CUDA")):
        record = execute(data_job(DataSettings(str(dataset), pipeline=pipeline)))
        assert (record["status"], record["reason"]) == ("skipped", "unsupported_pipeline")
        assert fragment in record["detail"]


def test_a_batch_larger_than_the_dataset_fails_with_a_reason(dataset: Path):
    record = execute(data_job(DataSettings(str(dataset)), batch=64))
    assert (record["status"], record["reason"]) == ("failed", "data_error")
    assert "fewer than one batch" in record["detail"]


@pytest.fixture
def fast_worker_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch joins a stuck worker for 5 s before terminating it; 0.5 s keeps these tests short."""
    import torch.utils.data._utils as loader_utils

    monkeypatch.setattr(loader_utils, "MP_STATUS_CHECK_INTERVAL", 0.5)


def test_a_hung_worker_is_a_failed_measurement_not_a_hang(dataset: Path, monkeypatch, fast_worker_checks):
    from clsbench.data.pipelines import cpu as cpu_pipeline

    def hang(self, key):  # runs in the forked DataLoader worker
        time.sleep(3600)

    monkeypatch.setattr(cpu_pipeline.DecodeAugment, "__getitem__", hang)
    settings = DataSettings(str(dataset), num_workers=1, timeout_s=1.0)
    t0 = time.monotonic()
    record = execute(data_job(settings))
    assert time.monotonic() - t0 < 30
    assert (record["status"], record["reason"]) == ("failed", "data_loader_timeout"), record
    assert "timed out" in record["detail"]


def test_a_crashed_worker_is_a_failed_measurement(dataset: Path, monkeypatch, fast_worker_checks):
    from clsbench.data.pipelines import cpu as cpu_pipeline

    def crash(self, key):
        os._exit(7)

    monkeypatch.setattr(cpu_pipeline.DecodeAugment, "__getitem__", crash)
    record = execute(data_job(DataSettings(str(dataset), num_workers=1, timeout_s=5.0)))
    assert (record["status"], record["reason"]) == ("failed", "data_loader_crash"), record
    assert "DataLoader worker" in record["detail"]


def test_an_exception_in_a_worker_is_a_failed_measurement(dataset: Path, monkeypatch):
    from clsbench.data.pipelines import cpu as cpu_pipeline

    def broken(self, key):
        raise ValueError("augmentation bug")

    monkeypatch.setattr(cpu_pipeline.DecodeAugment, "__getitem__", broken)
    record = execute(data_job(DataSettings(str(dataset), num_workers=1, timeout_s=5.0)))
    assert (record["status"], record["reason"]) == ("failed", "data_loader_crash"), record
    assert "augmentation bug" in record["detail"] or "ValueError" in record["detail"]


# --------------------------------------------------------------------------------------- settings and plan


def test_settings_validation_and_labels(tmp_path: Path):
    assert DataSettings("/d", num_workers=8, pin_memory=True, persistent_workers=True).label() == \
        "folder cpu w8 pin persistent"
    assert data_label(DataSettings("/d", source="memory", pipeline="gpu", prefetch_factor=3).to_dict()) == \
        "memory gpu w0 pf3"
    assert data_label(None) is None
    assert DataSettings("/d", num_workers=8, persistent_workers=True, normalize="device").label() == \
        "folder cpu w8 persistent uint8"
    assert DataSettings.from_dict({"directory": "/d"}).normalize == "worker"  # files from before the setting
    for bad, message in ((dict(persistent_workers=True), "num_workers > 0"),
                         (dict(prefetch_factor=2), "prefetch_factor needs"),
                         (dict(pipeline="gpu", pin_memory=True), "--pin-memory applies"),
                         (dict(num_workers=-1), "0..1024"), (dict(source="synthetic"), "does not read"),
                         (dict(timeout_s=0.0), "timeout"), (dict(normalize="gpu"), "unknown place"),
                         (dict(pipeline="gpu", normalize="device"), "--normalize-on applies")):
        with pytest.raises(InvalidInputError, match=message):
            check_settings(DataSettings("/d", **bad))
    assert DataSettings("/d", timeout_s=5.0) == DataSettings("/d")  # the timeout is not part of the identity


def test_plan_run_attaches_data_to_train_cells(dataset: Path):
    import clsbench

    settings = DataSettings(str(dataset), num_workers=2)
    plan = clsbench.plan_run(models=[TINY], device="cpu", batch_sizes=[8], data=settings)
    (cell,) = plan.cells
    assert cell.workload == "train" and cell.data.fingerprint == scan_folder(dataset).fingerprint
    assert cell.label().endswith("[folder cpu w2]") and not plan.overlap_prepare
    restored = type(plan).from_dict(json.loads(json.dumps(plan.to_dict())))
    assert restored.cells == plan.cells and restored.cells[0].data.fingerprint == cell.data.fingerprint
    with pytest.raises(InvalidInputError, match="train workload only"):
        clsbench.plan_run(models=[TINY], workloads=["infer-throughput"], device="cpu", data=settings)
    with pytest.raises(DataError, match="fewer than one batch"):
        clsbench.plan_run(models=[TINY], device="cpu", batch_sizes=[100], data=settings)


# ------------------------------------------------------------------------- the GPU pipeline's logic on a CPU


@pytest.fixture
def stand_in_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA streams and events that do nothing, so the gpu pipeline's threads and queues run on the CPU."""

    class Stream:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def wait_event(self, event) -> None:
            pass

    class Event:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def record(self, stream=None) -> None:
            pass

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, stream: None)


@pytest.mark.parametrize("source, workers, decoder", [("memory", 0, None), ("folder", 2, None), ("folder", 0, "cpu")])
def test_gpu_pipeline_stages_on_stand_in_streams(copy: Path, stand_in_cuda, source: str, workers: int,
                                                 decoder: str | None):
    from clsbench.data.pipelines.gpu import GpuStream

    (copy / "class_0002" / "damaged.jpg").write_bytes(b"\xff\xd8\xff\xfe\x00\x04ab" + b"\x00" * 50 + b"\xff\xd9")
    settings = DataSettings(str(copy), source=source, pipeline="gpu", num_workers=workers,
                            persistent_workers=workers > 0, decoder=decoder)
    data = (MemorySource() if source == "memory" else FolderSource()).open(settings)
    stream = GpuStream(data, spec_for(settings, batch=7, size=20, channels_last=True), {"pipeline": "gpu"})
    try:
        batches = [stream.next() for _ in range(9)]  # 7 batches per epoch: two epochs
        dropped = stream.drain(10, 0.002)
        after_drain = [stream.next() for _ in range(12)]
        running = stream.facts()["running_stages"]
    finally:
        stream.close()
    assert not any(thread.is_alive() for thread in stream.threads) and len(after_drain) == 12
    # Each stage thread timed the batches it handled since the drain: the twelve taken, less those already waiting
    # ahead of it then (queues of 2, one batch in each thread's hands), plus those it has made ahead since.
    assert [s["stage"] for s in running] == ["read", "decode", "augment"]
    for figures in running:
        assert 12 - 3 * 3 <= figures["batches"] <= 12 + 3 * 3, figures
        assert figures["work_ns"] > 0 and min(figures[f] for f in ("cpu_ns", "wait_in_ns", "wait_out_ns")) >= 0
    images, labels = batches[0]
    assert images.shape == (7, 3, 20, 20) and images.is_contiguous(memory_format=torch.channels_last)
    assert labels.dtype == torch.int64 and stream.facts()["epochs_started"] >= 2 and dropped >= 1
    assert "class_0002/damaged.jpg" in stream.take_failures()


def test_gpu_pipeline_switch_interval_and_stream_priority_from_the_environment(copy: Path, stand_in_cuda,
                                                                            monkeypatch: pytest.MonkeyPatch):
    import sys

    from clsbench.data.pipelines import gpu as gpu_pipeline
    from clsbench.errors import InvalidInputError

    priorities = []
    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None, priority=0: priorities.append(priority))
    settings = DataSettings(str(copy), source="memory", pipeline="gpu")
    before = sys.getswitchinterval()
    monkeypatch.setenv(gpu_pipeline.SWITCH_ENV, "0.25")
    monkeypatch.setenv(gpu_pipeline.PRIORITY_ENV, "High")
    stream = gpu_pipeline.GpuStream(MemorySource().open(settings), spec_for(settings), {"pipeline": "gpu"})
    try:
        while_open = sys.getswitchinterval()
        facts = stream.facts()
    finally:
        stream.close()
    assert while_open == pytest.approx(0.25e-3) and sys.getswitchinterval() == before
    assert facts["switch_interval_ms"] == 0.25 and facts["stream_priority"] == "high" and priorities == [-1, -1]
    for name, value, hint in ((gpu_pipeline.SWITCH_ENV, "fast", "0.01 to 100"),
                              (gpu_pipeline.SWITCH_ENV, "0", "0.01 to 100"),
                              (gpu_pipeline.PRIORITY_ENV, "urgent", "normal, high")):
        monkeypatch.setenv(name, value)
        with pytest.raises(InvalidInputError, match=name) as caught:
            gpu_pipeline.GpuPipeline().check(settings)
        assert hint in caught.value.hint
        monkeypatch.delenv(name)
    monkeypatch.delenv(gpu_pipeline.SWITCH_ENV, raising=False)
    monkeypatch.delenv(gpu_pipeline.PRIORITY_ENV, raising=False)
    stream = gpu_pipeline.GpuStream(MemorySource().open(settings), spec_for(settings), {})
    stream.close()
    facts = stream.facts()
    assert facts["switch_interval_ms"] == round(before * 1e3, 4)
    assert facts["stream_priority"] == gpu_pipeline.DEFAULT_PRIORITY == "normal"


def test_gpu_pipeline_stage_errors_reach_the_training_thread(dataset: Path, stand_in_cuda, monkeypatch):
    from clsbench.data.pipelines import gpu as gpu_pipeline

    def broken(self, batch):
        raise RuntimeError("augment stage broke")

    monkeypatch.setattr(gpu_pipeline.GpuStream, "_augment", broken)
    settings = DataSettings(str(dataset), pipeline="gpu")
    stream = gpu_pipeline.GpuStream(FolderSource().open(settings), spec_for(settings), {})
    try:
        with pytest.raises(RuntimeError, match="augment stage broke"):
            stream.next()
    finally:
        stream.close()


def test_gpu_pipeline_times_out_when_no_batch_comes(dataset: Path, stand_in_cuda, monkeypatch):
    from clsbench.data.errors import DataLoaderTimeoutError
    from clsbench.data.pipelines import gpu as gpu_pipeline

    release = __import__("threading").Event()

    def stuck(self, raw):
        release.wait(30)
        raise RuntimeError("released")

    monkeypatch.setattr(gpu_pipeline.GpuStream, "_decode_batch", stuck)
    settings = DataSettings(str(dataset), pipeline="gpu", timeout_s=0.5)
    stream = gpu_pipeline.GpuStream(FolderSource().open(settings), spec_for(settings), {})
    try:
        with pytest.raises(DataLoaderTimeoutError, match="no batch within 0.5 s"):
            stream.next()
    finally:
        release.set()
        stream.close()


# ---------------------------------------------------------------------------------------------------- CLI


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent / "src"), str(TESTS)])
    return subprocess.run([sys.executable, "-m", "clsbench", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def invoke(*args: str) -> Result:
    """The CLI in this process (fast); the end-to-end test runs it in a subprocess."""
    return CliRunner().invoke(main, list(args))


def assert_one_line_error(done: subprocess.CompletedProcess | Result, code: int, fragment: str) -> None:
    returncode = done.returncode if isinstance(done, subprocess.CompletedProcess) else done.exit_code
    assert returncode == code, (returncode, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    hints = [line for line in lines if line.startswith("hint: ")]
    assert len(errors) == 1 and fragment in errors[0], done.stderr
    assert len(hints) == 1 and lines.index(hints[0]) == lines.index(errors[0]) + 1, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


@pytest.mark.slow
def test_cli_run_with_a_real_pipeline_show_and_resume_check(copy: Path, tmp_path: Path):
    (copy / "class_0001" / "junk.txt").write_text("x")
    out = tmp_path / "run.json"
    done = cli("run", "--model", TINY, "--data", str(copy), "--num-workers", "2", "--persistent-workers",
               "--device", "cpu", "--batch-size", "8", "--repeats", "1", "--warmup", "1", "--iterations", "3",
               "--min-time", "0", "-q", "-o", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "warning: skipped 1 file(s)" in done.stderr and "junk.txt" in done.stderr
    assert "train [folder cpu w2 persistent]" in done.stdout and "data pipelines" in done.stdout
    stored = json.loads(out.read_text())
    (m,) = stored["measurements"]
    assert m["status"] == "ok" and m["data"]["num_workers"] == 2 and m["data"]["persistent_workers"] is True
    assert stored["settings"]["cells"][0]["data"]["fingerprint"] == m["data"]["fingerprint"]
    assert m["summary"]["data"]["images"] == 48 and m["summary"]["data"]["skipped_n"] == 1
    assert m["repeats"][0]["data"]["dataset"]["skipped"][0]["path"] == "class_0001/junk.txt"
    shown = cli("show", str(out), cwd=tmp_path)
    assert shown.returncode == 0 and "folder cpu w2 persistent" in shown.stdout

    # A resume must see the same dataset: drop the measurement, change a file, and it is refused.
    stored["measurements"] = []
    unfinished = tmp_path / "unfinished.json"
    unfinished.write_text(json.dumps(stored))
    (copy / "class_0002" / "new.jpg").write_bytes(first_jpeg(copy).read_bytes())
    refused = cli("run", "--resume", str(unfinished), cwd=tmp_path)
    assert_one_line_error(refused, 3, "whose files changed since")
    with_options = cli("run", "--resume", str(unfinished), "--num-workers", "2", cwd=tmp_path)
    assert_one_line_error(with_options, 2, "--resume uses the data settings")


@pytest.mark.parametrize("args, code, fragment", [
    (["run", "--model", TINY, "--num-workers", "4", "--device", "cpu"], 2, "--num-workers needs --data DIR"),
    (["run", "--model", TINY, "--data-source", "memory", "--device", "cpu"], 2, "needs --data DIR"),
    (["run", "--model", TINY, "--data", "missing-dir", "--device", "cpu"], 2, "does not exist"),
    (["run", "--model", TINY, "--data", "{ds}", "--workload", "infer-throughput", "--device", "cpu"], 2,
     "train workload only"),
    (["run", "--model", TINY, "--data", "{ds}", "--pipeline", "gpu", "--pin-memory", "--device", "cpu"], 2,
     "--pin-memory applies to the cpu pipeline"),
    (["run", "--model", TINY, "--data", "{ds}", "--persistent-workers", "--device", "cpu"], 2,
     "persistent workers need num_workers > 0"),
    (["run", "--model", TINY, "--data", "{ds}", "--batch-size", "500", "--device", "cpu"], 2, "fewer than one batch"),
    (["run", "--model", TINY, "--data", "{ds}", "--pipeline", "tpu", "--device", "cpu"], 2, "tpu"),
    (["data", "make", "{ds}", "--images", "4", "--classes", "2"], 3, "not empty"),
    (["data", "make", "new", "--images", "0", "--classes", "2"], 2, "--images must lie"),
    (["data", "make", "new", "--images", "4", "--classes", "2", "--size", "big"], 2, "not WIDTHxHEIGHT"),
    (["data", "check", "missing-dir"], 2, "does not exist"),
    (["run", "--model", TINY, "--normalize-on", "device", "--device", "cpu"], 2, "--normalize-on needs --data"),
    (["diagnose", TINY, "--data", "empty", "--device", "cpu"], 2, "is empty"),
    (["diagnose", TINY, "--data", "{ds}", "--num-workers", "0,x", "--device", "cpu"], 2, "not a whole number"),
    (["diagnose", TINY, "--data", "{ds}", "--pipeline", "cpu,fpga", "--device", "cpu"], 2, "unknown pipeline"),
])
def test_cli_bad_input_is_one_error_line(dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        args: list[str], code: int, fragment: str):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    done = invoke(*[a.replace("{ds}", str(dataset)) for a in args])
    assert_one_line_error(done, code, fragment)


def test_cli_data_make_and_check(tmp_path: Path):
    target = tmp_path / "made"
    done = invoke("data", "make", str(target), "--images", "12", "--classes", "3", "--size", "32x24", "--jobs", "1")
    assert done.exit_code == 0, done.output
    assert "wrote 12 images in 3 classes" in done.stdout and " s (" in done.stdout
    assert "12/12 images" in done.stderr  # progress, one line per tenth when not on a terminal
    (target / "class_0000" / "cut.jpg").write_bytes(first_jpeg(target).read_bytes()[:40])
    (target / "class_0001" / "damaged.jpg").write_bytes(b"\xff\xd8\xff\xfe\x00\x04ab" + b"\x00" * 50 + b"\xff\xd9")
    checked = invoke("data", "check", str(target), "--decode")
    assert checked.exit_code == 0, checked.output
    assert "13 usable images in 3 classes" in checked.stdout
    assert "skipped class_0000/cut.jpg: truncated JPEG" in checked.stderr
    assert "does not decode: class_0001/damaged.jpg" in checked.stderr
    assert "decoded 12 of 13 images" in checked.stdout


def test_a_full_disk_ends_data_make_with_one_line_and_no_truncated_image(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch):
    """The third image's write fails as a full disk does: every file left is a whole JPEG, no temporary file stays,
    no manifest claims a complete dataset, and the error is one line naming the disk."""
    import errno
    import io

    from clsbench.results import io as result_io

    real_fdopen = os.fdopen
    calls = {"n": 0}

    class FullDisk(io.BufferedWriter):
        def write(self, data: bytes) -> int:  # half the bytes reach the disk, then it is full
            super().write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

    def fdopen(fd: int, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            return FullDisk(io.FileIO(fd, "wb"))
        return real_fdopen(fd, mode, *args, **kwargs)

    monkeypatch.setattr(result_io.os, "fdopen", fdopen)
    target = tmp_path / "ds"
    with pytest.raises(ResultFileError, match="No space left on device") as caught:
        make_dataset(target, MakeSpec(images=6, classes=2, seed=1, width=40, height=30), jobs=1)
    assert "incomplete dataset" in caught.value.message
    files = [p for p in target.rglob("*") if p.is_file()]
    assert len(files) == 2 and not any(p.name.startswith(".") for p in files)
    assert all(p.read_bytes().endswith(b"\xff\xd9") for p in files)  # each one a whole JPEG (ends with EOI)
    assert not (target / "clsbench-dataset.json").exists()


def test_data_make_progress_says_each_count_once_and_its_pool_ends_quietly(tmp_path: Path) -> None:
    """In a real process: the pool's workers, ended with SIGTERM when it closes, print no traceback."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent / "src"), str(TESTS)])}
    done = subprocess.run([sys.executable, "-m", "clsbench", "data", "make", str(tmp_path / "ds"), "--images", "300",
                           "--classes", "3", "--size", "40x30", "--jobs", "2"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    counts = [line.split("]")[1].split(",")[0] for line in done.stderr.splitlines() if line.startswith("[")]
    assert counts and len(counts) == len(set(counts)), done.stderr
