"""Real data on a GPU (marker ``gpu``; skipped without CUDA): nvJPEG decode on the device, the side-stream
hand-over, training on the gpu and pinned cpu pipelines with GPU idle from events, and diagnose on CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from clsbench.core.plan import Cell, StopRule
from clsbench.data import DataSettings
from clsbench.data.base import BatchSpec
from clsbench.data.make import MakeSpec, make_dataset
from clsbench.data.pipelines.cpu import CpuPipeline
from clsbench.data.pipelines.gpu import GpuPipeline
from clsbench.data.sources.memory import MemorySource
from clsbench.engine.worker import Job, execute

pytestmark = pytest.mark.gpu

TINY = "clsbench_testmodels:tiny"
DAMAGED = b"\xff\xd8\xff\xfe\x00\x04ab" + b"\x00" * 50 + b"\xff\xd9"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gpu-data") / "ds"
    make_dataset(root, MakeSpec(images=64, classes=4, seed=3, width=96, height=72), jobs=2)
    return root


def spec_for(settings: DataSettings, device: str, batch: int = 16) -> BatchSpec:
    return BatchSpec(batch_size=batch, input_size=32, device=torch.device(device),
                     memory_format=torch.channels_last, dtype=torch.float32, seed=0, settings=settings)


def test_gpu_pipeline_matches_the_cpu_pipeline(dataset: Path):
    gpu_settings = DataSettings(str(dataset), source="memory", pipeline="gpu")
    cpu_settings = DataSettings(str(dataset), source="memory")
    data = MemorySource().open(gpu_settings)
    gpu = GpuPipeline().open(data, spec_for(gpu_settings, "cuda"))
    cpu = CpuPipeline().open(data, spec_for(cpu_settings, "cpu"))
    try:
        for _ in range(5):  # 4 batches per epoch: into the second epoch
            images, labels = gpu.next()
            expected_images, expected_labels = cpu.next()
            torch.cuda.synchronize()
            assert images.device.type == "cuda" and images.dtype == torch.float32
            assert images.shape == (16, 3, 32, 32) and images.is_contiguous(memory_format=torch.channels_last)
            assert torch.equal(labels.cpu(), expected_labels)  # same order, same seeded choices
            # nvJPEG and libjpeg-turbo decode, float and uint8 resizes: close, not equal
            assert float((images.cpu() - expected_images).abs().mean()) < 0.15
        assert gpu.facts()["epochs_started"] >= 2  # its reader may already be further ahead
    finally:
        gpu.close()
        cpu.close()


def test_gpu_pipeline_names_and_replaces_a_damaged_jpeg(dataset: Path, tmp_path: Path):
    import shutil

    root = tmp_path / "ds"
    shutil.copytree(dataset, root)
    (root / "class_0001" / "damaged.jpg").write_bytes(DAMAGED)
    settings = DataSettings(str(root), pipeline="gpu", num_workers=2, persistent_workers=True)
    from clsbench.data.sources.folder import FolderSource

    stream = GpuPipeline().open(FolderSource().open(settings), spec_for(settings, "cuda", batch=65))
    try:
        images, _ = stream.next()
        torch.cuda.synchronize()
    finally:
        stream.close()
    assert images.shape[0] == 65 and bool(torch.isfinite(images).all())
    assert stream.take_failures() == ["class_0001/damaged.jpg"]


@pytest.mark.parametrize("settings", [
    dict(source="memory", pipeline="gpu"),
    dict(source="folder", pipeline="cpu", num_workers=2, pin_memory=True, persistent_workers=True),
])
def test_training_on_cuda_records_gpu_idle_from_events(dataset: Path, settings: dict):
    data = DataSettings(str(dataset), **settings)
    cell = Cell(TINY, "train", "amp-bf16+cl", 16, "cuda", data=data)
    record = execute(Job(cell=cell, repeat=0, stop=StopRule(warmup=2, min_iterations=10, min_seconds=0.2)))
    assert record["status"] == "ok", record
    s = record["samples"]
    assert s["iteration_clock"] == "cuda_events"
    n = record["validity"]["timed_iterations"]
    assert len(s["idle_ms"]) == len(s["step_ms"]) == len(s["iteration_ms"]) == len(s["data_wait_ms"]) == n
    for idle, step, iteration in zip(s["idle_ms"], s["step_ms"], s["iteration_ms"], strict=True):
        assert idle >= 0 and step > 0 and iteration == pytest.approx(idle + step, abs=0.01)
    assert record["busy"] is None  # replaced by the idle time between events
    assert record["data"]["idle_method"] == "cuda_events"


@pytest.mark.parametrize("pin", [False, True])
def test_uint8_batches_are_normalised_on_the_gpu_like_the_workers_floats(dataset: Path, pin: bool):
    batches = {}
    for where in ("worker", "device"):
        settings = DataSettings(str(dataset), source="memory", num_workers=2, pin_memory=pin, normalize=where)
        stream = CpuPipeline().open(MemorySource().open(settings), spec_for(settings, "cuda"))
        try:
            images, _ = stream.next()
            torch.cuda.synchronize()
            batches[where] = images.cpu()
        finally:
            stream.close()
        assert images.device.type == "cuda" and images.dtype == torch.float32
        assert images.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(batches["device"], batches["worker"], rtol=1e-6, atol=1e-6)


def test_dali_pipeline_when_installed(dataset: Path):
    pytest.importorskip("nvidia.dali")
    cell = Cell(TINY, "train", "amp-bf16+cl", 16, "cuda", data=DataSettings(str(dataset), pipeline="dali",
                                                                          num_workers=2))
    record = execute(Job(cell=cell, repeat=0, stop=StopRule(warmup=2, min_iterations=10, min_seconds=0.2)))
    assert record["status"] == "ok", record


def test_diagnose_on_cuda(dataset: Path, tmp_path: Path):
    from clsbench.procedures.diagnose import diagnose, render_diagnose

    outcome = diagnose(TINY, dataset, mode="amp-bf16+cl", batch_size=16, device="cuda", workers=[0, 2],
                       pipelines=["cpu", "gpu"], quick=True, output=tmp_path / "diagnose.json")
    statuses = {row["label"]: row["status"] for row in outcome.analysis["rows"]}
    assert statuses["synthetic"] == "ok" and statuses["folder gpu w0"] == "ok", outcome.analysis["rows"]
    assert statuses["folder cpu w2 pin persistent"] == "ok"
    assert statuses["folder cpu w2 pin persistent uint8"] == "ok"
    assert outcome.analysis["verdict"] in ("input-bound", "compute-bound", "launch-bound")
    assert "reproduce: clsbench run" in render_diagnose(outcome.analysis)
