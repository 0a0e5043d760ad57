"""clsbench diagnose: the sweep it plans, the verdict rules on hand-made results (pure), and the whole command end to
end on a CPU (2 cores in CI) with the tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import clsbench
from clsbench.core.plan import Cell
from clsbench.data import DataSettings
from clsbench.data.make import MakeSpec, make_dataset
from clsbench.errors import InvalidInputError
from clsbench.procedures.diagnose import (
    INPUT_BOUND_RATIO,
    analyze_diagnose,
    candidate_settings,
    classify,
    explain,
    parse_pipelines,
    parse_workers,
    sweep_workers,
    time_split,
)
from clsbench.procedures.diagnose_text import render_diagnose
from clsbench.results.schema import BenchmarkResult, Measurement

TESTS = Path(__file__).parent
TINY = "clsbench_testmodels:tiny"


def test_worker_sweep_follows_the_cpu_count():
    assert sweep_workers(16) == [0, 2, 4, 8, 16]
    assert sweep_workers(12) == [0, 2, 4, 8, 12]
    assert sweep_workers(2) == [0, 2]
    assert sweep_workers(1) == [0, 1]
    assert sweep_workers(None) == [0, 1]
    assert parse_workers("8, 0,4,4") == [0, 4, 8]
    for bad in ("", "1,-2", "a"):
        with pytest.raises(InvalidInputError):
            parse_workers(bad)
    assert parse_pipelines("gpu,cpu,gpu") == ["gpu", "cpu"]


def test_candidate_settings_default_first_pins_only_on_a_gpu():
    base = DataSettings("/d")
    cpu = candidate_settings(base, "cpu", [0, 2], ["cpu", "gpu", "dali"])
    assert [s.label() for s in cpu] == ["folder cpu w0", "folder cpu w2 persistent", "folder cpu w2 persistent uint8",
                                        "folder gpu w0", "folder dali w2"]
    gpu = candidate_settings(DataSettings("/d", source="memory"), "cuda", [0, 4], ["cpu"])
    assert [s.label() for s in gpu] == ["memory cpu w0", "memory cpu w0 pin", "memory cpu w4 persistent",
                                        "memory cpu w4 pin persistent", "memory cpu w4 persistent uint8",
                                        "memory cpu w4 pin persistent uint8"]
    assert [s.label() for s in candidate_settings(base, "cuda", [0], ["cpu"])] == ["folder cpu w0", "folder cpu w0 pin"]


# ------------------------------------------------------------------------------------ verdicts (pure analysis)


def result_of(ceiling: float | None, settings: list[tuple[DataSettings, float | None, float]],
              bound_by: str | None = "compute", device: str = "cuda",
              extra: dict[str, dict] | None = None) -> BenchmarkResult:
    plan = clsbench.plan_run(models=[TINY], workloads=["train"], device="cpu", batch_sizes=[8],
                             options=clsbench.MeasureOptions(repeats=1))
    synthetic = Measurement(TINY, "train", "fp32", 8, device, "ok" if ceiling else "failed",
                            reason=None if ceiling else "oom",
                            summary={"throughput_img_s": ceiling, "efficiency": {"bound_by": bound_by}})
    measured = [synthetic]
    for data, rate, idle in settings:
        summary = {"throughput_img_s": rate, "data": {"data_wait_fraction": idle, "idle_fraction": idle,
                                                      "idle_method": "cuda_events",
                                                      **(extra or {}).get(data.label(), {})}}
        measured.append(Measurement(TINY, "train", "fp32", 8, device, "ok" if rate else "failed",
                                    reason=None if rate else "data_loader_timeout", summary=summary,
                                    data=data.to_dict()))
    cells = [dict(Cell.of(synthetic).to_dict())] + [dict(Cell.of(m).to_dict(), data=m.data) for m in measured[1:]]
    settings_dict = {**plan.to_dict(), "cells": cells,
                     "diagnose": {"model": TINY, "mode": "fp32", "batch_size": 8, "device": device,
                                  "default": DataSettings("/d").label(), "directory": "/d", "source": "folder",
                                  "dataset": {"images": 100, "classes": 2, "bytes": 10_000, "skipped_n": 0}}}
    return BenchmarkResult(environment={"cpu": {"logical_cores": 16}}, settings=settings_dict,
                           measurements=tuple(measured),
                           tool={"name": "clsbench", "version": "0.1.0"})


DEFAULT = DataSettings("/d")
WORKERS = DataSettings("/d", num_workers=8, pin_memory=True, persistent_workers=True)
GPU = DataSettings("/d", pipeline="gpu")


def test_verdict_compute_bound_with_gain_and_command():
    analysis = analyze_diagnose(result_of(1000.0, [(DEFAULT, 200.0, 0.8), (WORKERS, 700.0, 0.3),
                                                   (GPU, 950.0, 0.02)]))
    assert analysis["verdict"] == "compute-bound"
    assert analysis["default_verdict"] == "input-bound"
    assert analysis["best"]["label"] == "folder gpu w0"
    assert analysis["best"]["ratio_to_synthetic"] == pytest.approx(0.95)
    assert analysis["gain_over_default"] == pytest.approx(4.75)
    command = analysis["command"]
    assert command.startswith("clsbench run --model clsbench_testmodels:tiny --workload train --mode fp32 "
                              "--batch-size 8 --device cuda --repeats 1")
    assert command.endswith("--data /d --data-source folder --pipeline gpu --num-workers 0")
    text = render_diagnose(analysis)
    assert "verdict: compute-bound" in text
    assert "folder cpu w0 (PyTorch default)" in text and "20.0%" in text
    assert "best: folder gpu w0: 950 img/s = 95.0% of synthetic (1,000 img/s), 4.75x the default" in text
    assert "reproduce: clsbench run" in text


@pytest.mark.parametrize("rate, idle, bound_by, verdict", [
    (950.0, 0.02, "launch", "launch-bound"),
    (950.0, 0.25, "compute", "input-bound"),  # close to the ceiling, but the GPU sat idle a quarter of the time
    (1000.0 * INPUT_BOUND_RATIO - 1, 0.0, "compute", "input-bound"),
    (1000.0 * INPUT_BOUND_RATIO, 0.0, None, "compute-bound"),
])
def test_verdict_rules(rate: float, idle: float, bound_by: str | None, verdict: str):
    analysis = analyze_diagnose(result_of(1000.0, [(DEFAULT, 100.0, 0.9), (GPU, rate, idle)], bound_by=bound_by))
    assert analysis["verdict"] == verdict


def test_where_the_time_goes_on_the_gpu_pipeline():
    # batch 8: synthetic 1000 img/s = 8 ms per step; the gpu pipeline 800 img/s = 10 ms, of which its steps took 9.5
    analysis = analyze_diagnose(result_of(1000.0, [(DEFAULT, 100.0, 0.9), (GPU, 800.0, 0.05)],
                                          extra={GPU.label(): {"step_ms_mean": 9.5}}))
    assert analysis["verdict"] == "input-bound"
    split = analysis["time_split"]
    assert split["iteration_ms"] == pytest.approx(10.0) and split["synthetic_ms"] == pytest.approx(8.0)
    assert split["waiting_ms"] == pytest.approx(0.5) and split["slower_step_ms"] == pytest.approx(1.5)
    text = render_diagnose(analysis)
    assert ("why: folder gpu w0 takes 10.0 ms per step against 8.0 ms on synthetic data: the GPU waits 0.5 ms of it "
            "for data, and the step itself runs 1.5 ms slower") in text
    assert "the step itself runs slower beside the gpu pipeline" in text and "do not keep up" in text  # both > 2%
    assert "a cheaper augmentation (--gpu-augment" in text
    assert "cudagraph" not in text  # capture starves nvJPEG (methodology 16.4.4): not proposed to the launched fp32
    captured = explain(analysis["best"], [], split, 1000.0, 16, mode="amp-bf16+cl+cudagraph")
    assert "--gpu-augment" in captured[1] and "cudagraph" not in captured[1]
    assert time_split(analysis["best"], None, 8) is None


HOLDS_BACK = "the captured step holds back the decoder's many small GPU round trips"


def gpu_best(waiting_ms: float, slower_ms: float, decoder: str | None = None) -> tuple[dict, dict]:
    """A gpu-pipeline best setting at batch 8 against a synthetic 1000 img/s (8 ms per step), and its time split."""
    data = DataSettings("/d", pipeline="gpu", decoder=decoder)
    step_ms = 8.0 + slower_ms
    rate = 8000.0 / (step_ms + waiting_ms)
    analysis = analyze_diagnose(result_of(1000.0, [(DEFAULT, 100.0, 0.9), (data, rate, 0.05)],
                                          extra={data.label(): {"step_ms_mean": step_ms}}))
    assert analysis["best"]["pipeline"] == "gpu" and analysis["verdict"] == "input-bound"
    return analysis["best"], analysis["time_split"]


@pytest.mark.parametrize("mode, launched", [
    ("amp-bf16+cl+compile+cudagraph", "amp-bf16+cl+compile"),
    ("AMP-BF16+cudagraph+compile+cl", "amp-bf16+cl+compile"),  # canonical spelling, from parse_mode's components
    ("fp32+cudagraph", "fp32"),
])
def test_a_captured_step_waiting_for_nvjpeg_is_pointed_at_the_launched_mode(mode: str, launched: str):
    best, split = gpu_best(waiting_ms=3.0, slower_ms=0.1)  # waits 3 ms > 2% of 8 ms; the step itself is not slower
    lines = explain(best, [], split, 1000.0, 16, mode=mode)
    assert lines[-1] == ("the captured step holds back the decoder's many small GPU round trips (nvJPEG: about 250 "
                         "per batch of 256), so they pass only while the step waits; the same mode without "
                         f"+cudagraph ({launched}), its step launched from Python, fed better on an H200 (ResNet-50: "
                         "5,383 img/s, 80% of the captured synthetic, against 4,509 captured, both over the memory "
                         "source)")
    assert "do not keep up while training" in lines[-2]  # the memory-source advice stays, before it
    assert sum(HOLDS_BACK in line for line in lines) == 1
    # the split decoder sends part of each batch to nvJPEG too; the cpu decoder makes no such round trips
    split_best, split_split = gpu_best(waiting_ms=3.0, slower_ms=0.1, decoder="split")
    assert HOLDS_BACK in explain(split_best, [], split_split, 1000.0, 16, mode=mode)[-1]
    cpu_best, cpu_split = gpu_best(waiting_ms=3.0, slower_ms=0.1, decoder="cpu")
    assert not any(HOLDS_BACK in line for line in explain(cpu_best, [], cpu_split, 1000.0, 16, mode=mode))


def test_a_launched_step_is_not_told_to_capture_beside_the_gpu_pipeline():
    best, split = gpu_best(waiting_ms=3.0, slower_ms=5.0)  # both parts worth a sentence
    lines = explain(best, [], split, 1000.0, 16, mode="amp-bf16+cl+compile")
    assert any(line.startswith("the step itself runs slower beside the gpu pipeline") for line in lines)
    assert "--gpu-augment" in " ".join(lines) and "smaller stored images" in " ".join(lines)
    assert not any("cudagraph" in line or "captured as a CUDA graph" in line for line in lines)
    assert not any(HOLDS_BACK in line for line in lines)
    assert not any(HOLDS_BACK in line for line in explain(best, [], split, 1000.0, 16))  # no mode known


def test_a_captured_step_that_does_not_wait_gets_no_launched_advice():
    best, split = gpu_best(waiting_ms=0.1, slower_ms=5.0)  # waits 0.1 ms < 2% of 8 ms; the step itself is slower
    assert split["waiting_ms"] == pytest.approx(0.1)
    lines = explain(best, [], split, 1000.0, 16, mode="amp-bf16+cl+compile+cudagraph")
    assert len(lines) == 2 and lines[1].startswith("the step itself runs slower beside the gpu pipeline")
    assert not any(HOLDS_BACK in line or "do not keep up" in line for line in lines)


def test_where_the_time_goes_on_the_cpu_pipeline():
    four = DataSettings("/d", num_workers=4, persistent_workers=True)
    eight = DataSettings("/d", num_workers=8, persistent_workers=True)
    # the workers wait for decoding: 4 workers made 400 img/s (100 each), 8 made 600
    waiting = analyze_diagnose(result_of(1000.0, [(DEFAULT, 50.0, 0.9), (four, 400.0, 0.6), (eight, 600.0, 0.4)]))
    text = render_diagnose(waiting)
    assert ("why: the workers decode about 100 images/s each at best; 1,000 img/s needs about 10 such workers, each "
            "with a core of its own (this machine has 16 CPUs), or the gpu pipeline") in text
    assert "--normalize-on device" not in text
    on_a_cpu = render_diagnose(analyze_diagnose(result_of(1000.0, [(DEFAULT, 50.0, 0.9), (four, 400.0, 0.6),
                                                                   (eight, 600.0, 0.4)], device="cpu")))
    assert "(this machine has 16 CPUs)" in on_a_cpu and "gpu pipeline" not in on_a_cpu  # no GPU to offer
    # the copy of float32 batches dominates: move uint8 instead
    copying = analyze_diagnose(result_of(1000.0, [(DEFAULT, 50.0, 0.9), (eight, 600.0, 0.1)],
                                         extra={eight.label(): {"copy_fraction": 0.35}}))
    assert "most of the wait is the copy of float32 batches to the device (35% of the time): --normalize-on " \
           "device" in render_diagnose(copying)
    # a compute-bound verdict needs no explanation; the command reproduces uint8 batches
    uint8 = DataSettings("/d", num_workers=8, persistent_workers=True, normalize="device")
    done = analyze_diagnose(result_of(1000.0, [(DEFAULT, 50.0, 0.9), (uint8, 950.0, 0.01)]))
    assert done["explanation"] == [] and done["verdict"] == "compute-bound"
    assert done["command"].endswith("--num-workers 8 --persistent-workers --normalize-on device")


def test_the_verdict_names_the_pipelines_that_keep_the_ceiling_fed_and_the_gpu_stages():
    from clsbench.analysis.data import stage_figures

    record = {"batch_size": 8, "batches": 4, "read_threads": 1, "device_timer": "cuda_events", "augment": "batched",
              "stages": [{"stage": "read", "images": 32, "seconds": 0.004, "batch_ms": None, "peak_bytes": None},
                         {"stage": "decode", "images": 32, "seconds": 0.008, "batch_ms": [2.0] * 4,
                          "peak_bytes": 3_000_000, "batch_bytes": 1_000_000},
                         {"stage": "augment", "augment": "batched", "images": 32, "seconds": 0.002,
                          "batch_ms": [1.0] * 4, "peak_bytes": 5_000_000, "batch_bytes": 2_000_000},
                         {"stage": "augment", "augment": "per-image", "images": 32, "seconds": 0.016,
                          "batch_ms": [6.0] * 4, "peak_bytes": 4_000_000, "batch_bytes": 2_000_000}]}
    dali = DataSettings("/d", pipeline="dali", num_workers=8)
    analysis = analyze_diagnose(result_of(1000.0, [(DEFAULT, 200.0, 0.8), (WORKERS, 700.0, 0.3), (GPU, 950.0, 0.02),
                                                   (dali, 920.0, 0.03)],
                                          extra={GPU.label(): {"stages": stage_figures(record)}}))
    assert [(e["pipeline"], e["label"], e["keeps_fed"]) for e in analysis["pipelines"]] == [
        ("cpu", WORKERS.label(), False), ("gpu", "folder gpu w0", True), ("dali", "folder dali w8", True)]
    text = render_diagnose(analysis)
    assert ("kept fed: the fp32 synthetic ceiling (1,000 img/s) is kept fed by gpu (folder gpu w0, 95.0%), dali "
            "(folder dali w8, 92.0%); not by cpu (folder cpu w8 pin persistent, 70.0%)") in text
    assert "stages of folder gpu w0, each alone (batch 8, 4 timed batches; reading on 1 thread):" in text
    assert "slowest stage: decode (4,000 img/s: the pipeline cannot deliver more)" in text  # per-image not used
    # decode 2 ms + batched 1 ms per batch of 8 against the 8 ms synthetic step; the larger peak is the augment's
    assert ("GPU cost of the pipeline: 3.0 ms of device time per batch (decode + augment, alone: their events' span) "
            "= 37.5% of the synthetic step (8.0 ms); peak memory 5.0 MB above the model's") in text
    row = next(line for line in text.splitlines() if line.startswith("augment per-image"))
    assert "2,000" in row and "6.000" in row and "for comparison" in row and "GPU busy ms" not in text
    # With the busy-time probe (after the timed region): the kernels and copies each stage really takes.
    record["busy"] = {"batches": 2, "decode": {"gpu_busy_ms_per_iteration": 0.5},
                      "augment": {"batched": {"gpu_busy_ms_per_iteration": 0.25},
                                  "per-image": {"gpu_busy_ms_per_iteration": 1.5}}}
    profiled = render_diagnose(analyze_diagnose(result_of(1000.0, [(GPU, 950.0, 0.02)], extra={
        GPU.label(): {"stages": stage_figures(record)}})))
    assert ("GPU cost of the pipeline: 0.8 ms of kernels and copies per batch (decode + augment, alone, profiled "
            "after the timed region; their events span 3.0 ms, the rest is host work) = 9.4% of the synthetic "
            "step") in profiled
    row = next(line for line in profiled.splitlines() if line.startswith("augment per-image"))
    assert "6.000" in row and "1.500" in row and "GPU busy ms" in profiled
    record["busy"] = {"error": "RuntimeError: CUPTI unavailable"}
    unprofiled = render_diagnose(analyze_diagnose(result_of(1000.0, [(GPU, 950.0, 0.02)], extra={
        GPU.label(): {"stages": stage_figures(record)}})))
    assert "GPU busy time of the stages: not measured (RuntimeError: CUPTI unavailable)" in unprofiled
    assert "of device time per batch" in unprofiled
    record["busy"] = {"batches": 2, "augment": {"batched": {"gpu_busy_ms_per_iteration": None,
                                                            "unavailable": "the profiler recorded no GPU activity"}}}
    assert stage_figures(record)["busy_error"] == "the profiler recorded no GPU activity"
    starved = analyze_diagnose(result_of(1000.0, [(DEFAULT, 200.0, 0.8), (GPU, 800.0, 0.02)]))
    assert "is kept fed by none; not by cpu (folder cpu w0, 20.0%), gpu (folder gpu w0, 80.0%)" in \
        render_diagnose(starved)
    failed = analyze_diagnose(result_of(1000.0, [(GPU, 950.0, 0.02)],
                                        extra={GPU.label(): {"stages": stage_figures({"error": "OutOfMemoryError"})}}))
    assert "stages of folder gpu w0: not measured (OutOfMemoryError)" in render_diagnose(failed)


def test_no_verdict_without_a_ceiling_or_a_real_setting():
    assert "verdict: none: the synthetic ceiling did not run (failed: oom)" in render_diagnose(
        analyze_diagnose(result_of(None, [(DEFAULT, 100.0, 0.5)])))
    analysis = analyze_diagnose(result_of(1000.0, [(DEFAULT, None, 0.0)]))
    assert analysis["verdict"] is None and analysis["best"] is None
    assert "no real-data setting ran" in render_diagnose(analysis)
    assert classify(None, "compute") is None


# ---------------------------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_diagnose_end_to_end_on_the_cpu(tmp_path: Path):
    data = tmp_path / "ds"
    make_dataset(data, MakeSpec(images=64, classes=4, seed=2, width=40, height=30), jobs=1)
    (data / "class_0003" / "notes.txt").write_text("not an image\n")
    out = tmp_path / "diagnose.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent / "src"), str(TESTS)])
    command = [sys.executable, "-m", "clsbench", "diagnose", TINY, "--data", str(data), "--batch-size", "8",
               "--device", "cpu", "--quick", "-o", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "warning: skipped 1 file(s)" in done.stderr and "notes.txt" in done.stderr
    text = done.stdout
    assert "synthetic (ceiling)" in text and "folder cpu w0 (PyTorch default)" in text
    assert "folder cpu w2 persistent" in text  # 0 and the CPU count (2 in CI) with --quick
    assert "SKIPPED: unsupported_pipeline" in text and "GPU decode needs CUDA" in text
    assert "verdict: " in text and "with PyTorch's defaults (num_workers=0, pin_memory=False): " in text
    assert "best: folder cpu w" in text and "reproduce: clsbench run --model clsbench_testmodels:tiny" in text
    stored = json.loads(out.read_text())
    assert stored["settings"]["diagnose"]["workers"] == sorted({0, os.cpu_count() or 1})
    ok = [m for m in stored["measurements"] if m["status"] == "ok"]
    assert len(ok) >= 2 and all(m["summary"]["throughput_img_s"] > 0 for m in ok)
    assert sum(1 for m in stored["measurements"] if "data" not in m) == 1  # the synthetic ceiling

    # The file alone gives the diagnosis again; and it is never overwritten.
    shown = subprocess.run([sys.executable, "-m", "clsbench", "show", str(out)], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=120)
    assert shown.returncode == 0 and "diagnose: clsbench_testmodels:tiny train fp32 bs8 on cpu" in shown.stdout
    again = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert again.returncode == 3 and "already exists" in again.stderr

    # The reproduce command runs as printed (inline and fake-clocked here, to stay short).
    reproduce = next(line for line in text.splitlines() if line.startswith("reproduce: "))
    args = reproduce.split()[2:] + ["--isolation", "inline", "--clock", "fake:1ms", "-q", "-o",
                                    str(tmp_path / "again.json")]
    rerun = subprocess.run([sys.executable, "-m", "clsbench", *args], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
    assert rerun.returncode == 0, rerun.stderr


def test_compare_matches_each_data_setting_of_a_diagnose_file_with_the_same_one():
    from clsbench.analysis.compare import compare

    a = result_of(1000.0, [(DEFAULT, 200.0, 0.8), (GPU, 950.0, 0.02)])
    b = result_of(1100.0, [(DEFAULT, 210.0, 0.8)])
    comparison = compare([a, b], ["a.json", "b.json"])
    (table,) = comparison.tables
    by_data = {row.data: [c.value for c in row.cells] for row in table.rows}
    assert by_data == {None: [1000.0, 1100.0], DEFAULT.label(): [200.0, 210.0], GPU.label(): [950.0, None]}
    assert comparison.warnings == ()  # a setting only A measured is a row missing from B, as any other cell
    # The cross-GPU view is of synthetic data: the ceiling.
    (cross,) = comparison.cross
    assert [f.train_img_s for f in cross.runs] == [1000.0, 1100.0]


def test_diagnose_compares_the_gpu_decoders_it_is_given():
    from clsbench.procedures.diagnose import with_gpu_decoders

    cpu = DataSettings("/d", num_workers=2)
    gpu = DataSettings("/d", pipeline="gpu")
    assert with_gpu_decoders([cpu, gpu], None) == [cpu, gpu]
    both = with_gpu_decoders([cpu, gpu], ["nvjpeg", " split", "split"])
    assert [s.label() for s in both] == ["folder cpu w2", "folder gpu w0", "folder gpu w0 split-decode"]
    assert both[1] == gpu  # the default decoder is stored as without the option
    for decoders, settings, fragment in ((["nvjpg"], [gpu], "did you mean: nvjpeg?"),
                                         (["split"], [cpu], "--gpu-decode applies to the gpu pipeline"),
                                         ([" "], [gpu], "the gpu decoder list is empty")):
        with pytest.raises(InvalidInputError, match=fragment):
            with_gpu_decoders(settings, decoders)


def test_diagnose_cli_refuses_a_decoder_without_the_gpu_pipeline(tmp_path: Path):
    from click.testing import CliRunner

    from clsbench.cli import main

    data = tmp_path / "ds"
    make_dataset(data, MakeSpec(images=16, classes=2, seed=2, width=40, height=30), jobs=1)
    done = CliRunner().invoke(main, ["diagnose", TINY, "--data", str(data), "--device", "cpu", "--batch-size", "4",
                                     "--pipeline", "cpu",
                                     "--gpu-decode", "split", "-o", str(tmp_path / "d.json")])
    assert done.exit_code == 2 and "--gpu-decode applies to the gpu pipeline" in done.output, done.output
    assert "Traceback" not in done.output and not (tmp_path / "d.json").exists()
