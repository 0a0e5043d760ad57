"""GPU tests (marker ``gpu``): run on the GPU machine with `make test-gpu` or `pytest -m gpu`."""

from __future__ import annotations

import json

import pytest

import clsbench
from clsbench.core.plan import Cell, StopRule
from clsbench.engine.worker import Job, execute

pytestmark = pytest.mark.gpu

SHORT = StopRule(warmup=3, min_iterations=10, min_seconds=0.2)


def run_inline(workload: str, mode: str, batch: int = 8, model: str = "resnet18") -> dict:
    return execute(Job(cell=Cell(model, workload, mode, batch, "cuda"), repeat=0, stop=SHORT))


def test_latency_has_both_clocks():
    record = run_inline("infer-latency", "amp-bf16+cl", batch=1)
    assert record["status"] == "ok", record
    wall, gpu = record["samples"]["wall_ms"], record["samples"]["gpu_ms"]
    assert len(wall) == len(gpu) >= 10
    # the GPU forward time lies inside the request's wall time
    assert sorted(gpu)[len(gpu) // 2] <= sorted(wall)[len(wall) // 2]
    assert record["memory"]["peak_memory_allocated_bytes"] > 0
    host = record["host_cpu"]
    assert host["process_cpu_pct"] > 0 and host["calibration_us_per_op"] > 0
    assert host["calibration_us_per_op_before"] > 0 and host["calibration_us_per_op_after"] > 0
    assert record["busy"]["gpu_busy_ms_per_iteration"] > 0 and record["busy"]["profile_s"] > 0
    assert record["timings"]["context_s"] > 0 and record["timings"]["measure_s"] > record["timings"]["context_s"]


@pytest.mark.parametrize("mode", ["fp32", "tf32", "amp-fp16", "amp-bf16+cl", "bf16+cl", "fp16"])
def test_throughput_modes(mode):
    record = run_inline("infer-throughput", mode)
    assert record["status"] == "ok", record
    assert record["samples"]["iteration_clock"] == "cuda_events"
    assert len(record["samples"]["iteration_ms"]) == record["validity"]["timed_iterations"]


@pytest.mark.parametrize("mode", ["fp32", "amp-fp16", "amp-bf16+cl"])
def test_train_modes(mode):
    record = run_inline("train", mode)
    assert record["status"] == "ok", record
    assert record["samples"]["loss_last"] == record["samples"]["loss_last"]  # finite, not NaN


def test_tf32_flags_are_recorded():
    assert run_inline("infer-throughput", "tf32")["flags"]["cudnn_allow_tf32"] is True
    assert run_inline("infer-throughput", "fp32")["flags"]["cudnn_allow_tf32"] is False


@pytest.mark.parametrize("workload", ["infer-latency", "infer-throughput"])
def test_cuda_graph_replay(workload):
    record = run_inline(workload, "amp-bf16+cl+cudagraph", batch=1 if workload == "infer-latency" else 8)
    assert record["status"] == "ok", record
    assert record["mode_notes"]["cudagraph"] == "manual capture"


def test_compile_records_compile_time():
    record = run_inline("infer-throughput", "amp-bf16+cl+compile")
    assert record["status"] == "ok", record
    assert record["timings"]["compile_s"] > 0


def test_cudagraph_train_captures_the_whole_step():
    record = run_inline("train", "fp32+cudagraph")
    assert record["status"] == "ok", record
    assert record["mode_notes"]["cudagraph"] == "whole training step, manual capture"


def test_process_isolation_end_to_end(tmp_path):
    plan = clsbench.plan_run(models=["resnet18"], workloads=["infer-throughput", "train"], modes=["amp-bf16+cl"],
                             batch_sizes=[16], device="cuda",
                             options=clsbench.MeasureOptions(repeats=2, iterations=10, min_time=0.2))
    out = tmp_path / "gpu.json"
    result = clsbench.run(plan, out)
    assert [m.status for m in result.measurements] == ["ok", "ok"]
    pids = {r["pid"] for m in result.measurements for r in m.repeats}
    assert len(pids) == 4  # a fresh process for every repeat
    stored = json.loads(out.read_text())
    assert stored["environment"]["gpu"]["name"]
    assert stored["measurements"][0]["summary"]["peak_memory_reserved_bytes"] > 0


def test_overlap_on_the_gpu_prepares_ahead_and_stops_it_while_timed(tmp_path):
    """Overlap is the GPU default: every repeat after the first was prepared ahead, the worker ahead was stopped
    for every timed region but the last (nothing was prepared after it), and each worker created its CUDA context
    before its device gate."""
    plan = clsbench.plan_run(models=["resnet18"], workloads=["infer-latency", "train"], modes=["amp-bf16+cl"],
                             batch_sizes=[8], device="cuda",
                             options=clsbench.MeasureOptions(repeats=2, iterations=10, min_time=0.2))
    assert plan.overlap_prepare
    result = clsbench.run(plan, tmp_path / "overlap.json")
    # In the order they ran (round order, the default, interleaves the cells; measurements are stored in plan order)
    records = sorted((r for m in result.measurements for r in m.repeats), key=lambda r: r["sequence"])
    assert [r["sequence"] for r in records] == [0, 1, 2, 3]
    assert [r["status"] for r in records] == ["ok"] * 4, records
    assert [r["overlap"]["prepared_ahead"] for r in records] == [False, True, True, True]
    assert [r["overlap"]["ahead_stopped_when_timed"] for r in records] == [True, True, True, None]
    assert all(r["timings"]["context_s"] > 0 and r["overlap"]["exit_wait_s"] >= 0 for r in records)
    assert len({r["pid"] for r in records}) == 4
