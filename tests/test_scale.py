"""clsbench scale: plans, launch commands (one node and several), the merge of rank records, scaling figures,
the launcher's time limit and clean-up, and DDP through the real torchrun with gloo on the CPU.

The end-to-end tests start real launches (torchrun and 2 gloo ranks of the tiny test model, a few seconds each):
two ranks measured and merged, one rank failing, one rank hanging until the time limit, and the DataParallel
process through its CPU test hook. Everything else is pure or uses a fake launcher. The GPU test (marked ``gpu``)
needs two GPUs and runs DDP over NCCL and DataParallel for real.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from click.testing import CliRunner, Result

from clsbench.cli import main
from clsbench.core.options import Execution, MeasureOptions
from clsbench.errors import DeviceUnavailableError, InvalidInputError, ResultFileError
from clsbench.procedures.scale import analyze_scale, launch_commands, plan_scale, render_scale, run_scale
from clsbench.procedures.scale.figures import efficiencies, scale_figures
from clsbench.procedures.scale.files import PID_FILE
from clsbench.procedures.scale.launch import LaunchOutcome, launch
from clsbench.procedures.scale.merge import comm_figures, merge_launch
from clsbench.procedures.scale.plan import (
    parse_endpoint,
    parse_gpus,
    parse_strategies,
    validate_gpu_counts,
    validate_nodes,
)
from clsbench.procedures.scale.run import make_job
from clsbench.procedures.scale.strategies import get_strategy
from clsbench.procedures.scale.strategies.dp import CPU_TEST_ENV
from clsbench.results import io as result_io

TESTS = Path(__file__).resolve().parent
TINY = "clsbench_testmodels:tiny"
#: Short stop rule for real launches: the launch's start (Python, torch, torchrun) dominates anyway.
QUICK = {"warmup": 1, "iterations": 3, "min_time": 0.2}
QUICK_ARGS = ["--warmup", "1", "--iterations", "3", "--min-time", "0.2"]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def assert_clean_error(result: Result, code: int, *words: str) -> None:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    hints = [line for line in lines if line.startswith("hint: ")]
    assert len(errors) == 1 and len(hints) == 1, result.stderr
    for word in words:
        assert word in errors[0] + hints[0], result.stderr


@pytest.fixture
def cpu_env() -> dict[str, Any]:
    """A small recorded environment (reading the real one is not what these tests are about)."""
    return {"device": "cpu", "cpu": {"model": "test CPU"}, "software": {"torch": "test"}, "gpu": {}}


@pytest.fixture(autouse=True)
def _children_import_the_test_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Launched processes get this process's import path, which holds tests/ (conftest adds it)."""
    assert str(TESTS) in sys.path


# ------------------------------------------------------------------------------------------------ input


def test_gpu_lists_are_parsed_sorted_and_deduplicated():
    assert parse_gpus("1,2,4,8") == (1, 2, 4, 8)
    assert parse_gpus("4, 1,2,1") == (1, 2, 4)
    assert parse_gpus([2, "1"]) == (1, 2)
    for bad in ("", "0", "two", "1.5", "1,,2", "-1"):
        with pytest.raises(InvalidInputError):
            parse_gpus(bad)


def test_strategies_endpoints_and_nodes_are_validated():
    assert parse_strategies("both") == ("ddp", "dp")
    assert parse_strategies(["dp", "ddp"]) == ("ddp", "dp")
    with pytest.raises(InvalidInputError, match="unknown strategy"):
        parse_strategies("fsdp")
    assert parse_endpoint("node0:29600") == ("node0", 29600)
    assert parse_endpoint("10.0.0.1") == ("10.0.0.1", 29500)
    assert parse_endpoint("[fe80::1]:1234") == ("fe80::1", 1234)
    for bad in ("node0:0", "node0:99999", "node0:x", ":29500", "a:b:c", ""):
        with pytest.raises(InvalidInputError):
            parse_endpoint(bad)
    with pytest.raises(InvalidInputError, match="needs --rdzv-endpoint"):
        validate_nodes(2, 0, None)
    with pytest.raises(InvalidInputError, match="node-rank must lie in 0..1"):
        validate_nodes(2, 2, "node0:29500")
    validate_nodes(2, 1, "node0:29500")


def test_gpu_counts_must_fit_on_the_node():
    validate_gpu_counts((1, 2), "cuda", visible=2)
    with pytest.raises(DeviceUnavailableError, match="asks for 8 GPUs on this node, but 2 are visible") as info:
        validate_gpu_counts((1, 2, 4, 8), "cuda", visible=2)
    assert "--gpus 1,2" in info.value.hint
    validate_gpu_counts((1, 2, 4), "cpu")  # processes on a CPU


def test_plan_uses_the_train_rules_and_global_batches():
    plan = plan_scale(model=TINY, gpus="2,1", strategy="both", mode="fp32", batch_size_per_gpu=8, device="cpu",
                      options=MeasureOptions(repeats=2, iterations=7, cudnn_benchmark=None))
    assert plan.gpus == (1, 2) and plan.strategies == ("ddp", "dp")
    assert plan.stop.min_iterations == 7 and plan.stop.warmup == 2  # CPU train defaults, one field replaced
    assert [plan.cell(s, g).batch_size for s, g in plan.measurements()] == [8, 16, 8, 16]
    assert plan.cell("dp", 2).workload == "train-dp"
    assert type(plan).from_dict(json.loads(json.dumps(plan.to_dict()))) == plan


@pytest.mark.parametrize("args, words", [
    (["--gpus", "0"], ["GPU count", "--gpus"]),
    (["--gpus", "1,x"], ["'x'", "--gpus"]),
    (["--device", "cuda:1"], ["CUDA_VISIBLE_DEVICES"]),
    (["--nnodes", "2"], ["--rdzv-endpoint"]),
    (["--nnodes", "2", "--node-rank", "5", "--rdzv-endpoint", "n0:29500"], ["--node-rank"]),
    (["--rdzv-endpoint", "n0:http"], ["bad port"]),
    (["--model", "resnet5"], ["unknown model", "resnet50"]),
    (["--mode", "fp33"], ["fp33"]),
    (["--batch-size-per-gpu", "0"], ["batch size"]),
    (["--strategy", "fsdp"], ["fsdp"]),
])
def test_bad_input_is_one_error_line_and_a_hint(args: list[str], words: list[str]):
    base = {"--model": TINY, "--gpus": "1,2", "--batch-size-per-gpu": "8", "--device": "cpu"}
    for option, value in zip(args[::2], args[1::2], strict=True):
        base[option] = value
    result = invoke("scale", *[part for pair in base.items() for part in pair], "--dry-run")
    assert_clean_error(result, 2, *words)


# ------------------------------------------------------------------------------------------ launch commands


def test_single_node_launch_is_standalone_torchrun():
    plan = plan_scale(model=TINY, gpus="1,2", strategy="both", batch_size_per_gpu=8, device="cpu",
                      options=MeasureOptions(repeats=2, cudnn_benchmark=None))
    launches = launch_commands(plan, "/jobs")
    assert [(x["strategy"], x["gpus"], x["repeat"], x["index"]) for x in launches] == [
        ("ddp", 1, 0, 0), ("ddp", 1, 1, 1), ("ddp", 2, 0, 2), ("ddp", 2, 1, 3),
        ("dp", 1, 0, 4), ("dp", 1, 1, 5), ("dp", 2, 0, 6), ("dp", 2, 1, 7)]
    command = launches[2]["command"]
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--standalone" in command and "--master-addr" not in command
    assert command[command.index("--nproc-per-node") + 1] == "2"
    assert command[command.index("--max-restarts") + 1] == "0"
    assert command[-4:] == ["-m", "clsbench.procedures.scale.rank", "--job", "/jobs/launch-2/job.json"]
    assert all(x["skipped"] and "CUDA GPUs" in x["skipped"] for x in launches[4:])  # DataParallel on a CPU


def test_multi_node_launch_uses_static_rendezvous_with_a_port_per_launch():
    plan = plan_scale(model="resnet50", gpus="1,2,4,8", strategy="both", mode="amp-bf16+cl", batch_size_per_gpu=256,
                      device="cpu", nnodes=2, node_rank=1, rdzv_endpoint="node0.example:29600",
                      options=MeasureOptions(repeats=1, cudnn_benchmark=None))
    launches = launch_commands(plan, "/jobs")
    ddp = [x for x in launches if x["strategy"] == "ddp"]
    for x in ddp:
        command = x["command"]
        flags = dict(zip(command[3:15:2], command[4:15:2], strict=True))
        assert flags == {"--nnodes": "2", "--node-rank": "1", "--master-addr": "node0.example",
                         "--master-port": str(29600 + x["index"]), "--nproc-per-node": str(x["gpus"]),
                         "--max-restarts": "0"}
        assert "--standalone" not in command
    assert [plan.cell("ddp", g).batch_size for g in plan.gpus] == [512, 1024, 2048, 4096]  # world = 2 nodes x g
    assert all("cannot span 2 nodes" in x["skipped"] for x in launches if x["strategy"] == "dp")


def test_dry_run_prints_this_nodes_commands():
    result = invoke("scale", "--model", "resnet50", "--gpus", "2", "--batch-size-per-gpu", "256", "--device", "cpu",
                    "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "10.0.0.1:29500", "--repeats", "1",
                    "--strategy", "both", "--dry-run")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "# ddp x2 repeat 1 (launch 0)"
    assert "--nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 --nproc-per-node 2" in lines[1]
    assert lines[2].startswith("# dp x2: skipped: ")


# ------------------------------------------------------------------------------------------------- merge


def rank_record(rank: int, *, world: int = 2, iters: int = 10, batch: int = 8, own_s: float = 1.0,
                slowest_s: float = 1.2, step_ms: float = 100.0, memory: int = 1000) -> dict[str, Any]:
    return {
        "status": "ok", "rank": rank, "local_rank": rank, "world_size": world, "host": "h", "pid": 100 + rank,
        "device": f"cuda:{rank}", "batch_size": batch, "gpus": 1,
        "samples": {"iteration_ms": [step_ms] * iters, "block_iterations": [iters], "block_wall_s": [own_s],
                    "block_wall_max_s": [slowest_s], "iteration_clock": "cuda_events", "loss_first": 7.0,
                    "loss_last": 6.9},
        "timings": {"first_iteration_s": 2.0}, "validity": {"stop_rule_met": True, "timed_iterations": iters},
        "memory": {"peak_memory_allocated_bytes": memory},
        "devices_memory": [{"device": f"cuda:{rank}", "peak_memory_allocated_bytes": memory}],
        "flags": {"cudnn_benchmark": True}, "distributed": {"backend": "nccl"},
        "comm": {"iterations": 4, "no_sync_wall_max_s": 0.36, "sync_wall_max_s": 0.4, "no_sync_wall_s": 0.35,
                 "sync_wall_s": 0.39, "no_sync_iteration_ms": [90.0] * 4, "sync_iteration_ms": [100.0] * 4},
    }


LAUNCH = {"command": ["torchrun"], "exit_code": 0, "timed_out": False, "wall_s": 9.0}


def test_merge_counts_every_gpus_images_over_the_slowest_ranks_time():
    records = {0: rank_record(0, own_s=1.0), 1: rank_record(1, own_s=1.1, step_ms=110.0, memory=3000)}
    merged = merge_launch(records, expected_ranks=[0, 1], launch=LAUNCH, log_tail=[], timeout_s=60)
    assert merged["status"] == "ok"
    assert merged["samples"]["images"] == 10 * (8 + 8)
    assert merged["samples"]["wall_s"] == 1.2  # the agreed (slowest) block time, not any rank's own
    assert merged["samples"]["iteration_ms_rank"] == 1 and merged["samples"]["iteration_ms"][0] == 110.0
    assert merged["memory"]["peak_memory_allocated_bytes"] == 3000
    assert [r["rank"] for r in merged["ranks"]] == [0, 1]
    assert merged["comm"]["share"] == pytest.approx(0.1)
    assert merged["comm"]["exposed_comm_ms_per_iteration"] == pytest.approx(10.0)


def test_merge_reports_the_earliest_failure_of_any_rank():
    root_cause = {"status": "failed", "rank": 1, "host": "b", "reason": "crash", "failed_at": 100.0,
                  "detail": "RuntimeError: rank 1 broke"}
    consequence = {"status": "failed", "rank": 0, "host": "a", "reason": "crash", "failed_at": 101.0,
                   "detail": "RuntimeError: [gloo] connection closed by peer"}
    merged = merge_launch({0: consequence, 1: root_cause}, expected_ranks=[0, 1], launch=LAUNCH, log_tail=[],
                          timeout_s=60)
    assert (merged["status"], merged["reason"]) == ("failed", "rank_failed")
    assert merged["detail"] == "rank 1 (b): RuntimeError: rank 1 broke"
    oom = {**root_cause, "reason": "oom", "detail": "CUDA out of memory"}
    assert merge_launch({1: oom}, expected_ranks=[0, 1], launch=LAUNCH, log_tail=[], timeout_s=60)["reason"] == "oom"
    skip = {"status": "skipped", "rank": 0, "reason": "unsupported_mode", "detail": "no bf16 here"}
    assert merge_launch({0: skip}, expected_ranks=[0], launch=LAUNCH, log_tail=[], timeout_s=60)["status"] == "skipped"


def test_merge_of_a_timeout_and_of_ranks_without_records():
    timed_out = {**LAUNCH, "timed_out": True, "exit_code": None}
    merged = merge_launch({0: rank_record(0)}, expected_ranks=[0, 1], launch=timed_out, log_tail=[], timeout_s=30)
    assert (merged["reason"], merged["detail"]) == ("timeout", "no result within 30 s; the launch and its processes "
                                                    "were ended (rank 1 had not reported)")
    stranded = {**timed_out, "nnodes": 2, "processes_started": 0}
    merged = merge_launch({}, expected_ranks=[0, 1, 2, 3], launch=stranded, log_tail=[], timeout_s=30)
    assert merged["reason"] == "timeout" and "the rendezvous did not complete" in merged["detail"]
    died = {**LAUNCH, "exit_code": 1}
    log = ["some output", "  exitcode  : -9 (pid: 4242)", "======"]
    merged = merge_launch({0: rank_record(0)}, expected_ranks=[0, 1], launch=died, log_tail=log, timeout_s=30)
    assert merged["reason"] == "rank_failed"
    assert merged["detail"] == "rank 1 ended without a result (launcher exit code 1): exitcode  : -9 (pid: 4242)"
    assert merged["log_tail"] == log


def test_a_processes_exception_is_classified_as_the_single_process_worker_does():
    import torch

    from clsbench.engine.worker import ModelError
    from clsbench.errors import ClsbenchError
    from clsbench.procedures.scale.rank import failure_record

    assert failure_record(ModelError("cannot import module 'x'"))["reason"] == "model_error"
    skipped = failure_record(ClsbenchError("this GPU does not support bfloat16"))
    assert (skipped["status"], skipped["reason"]) == ("skipped", "unsupported_mode")
    assert failure_record(torch.OutOfMemoryError("CUDA out of memory"))["reason"] == "oom"
    crash = failure_record(RuntimeError("boom"))
    assert (crash["status"], crash["reason"], crash["detail"]) == ("failed", "crash", "RuntimeError: boom")
    assert crash["failed_at"] > 0


def test_comm_figures():
    assert comm_figures(None) is None
    figures = comm_figures({"iterations": 10, "no_sync_wall_max_s": 0.9, "sync_wall_max_s": 1.0})
    assert figures["share"] == pytest.approx(0.1)
    assert figures["sync_ms_per_iteration"] == pytest.approx(100.0)


# ---------------------------------------------------------------------------------- figures and efficiency


def merged_repeat(step_ms: tuple[float, float], share: float | None, memory: tuple[int, int]) -> dict[str, Any]:
    return {"status": "ok", "comm": None if share is None else {"share": share, "exposed_comm_ms_per_iteration": 1.0},
            "ranks": [{"rank": i, "iteration_ms": [step_ms[i]] * 5,
                       "devices_memory": [{"peak_memory_allocated_bytes": memory[i]}]} for i in range(2)]}


def test_scale_figures_combine_repeats_per_rank():
    records = [merged_repeat((100.0, 110.0), 0.04, (5, 7)), merged_repeat((100.0, 120.0), 0.06, (6, 4))]
    figures = scale_figures(records, strategy="ddp", gpus=2, nnodes=1, batch_size_per_gpu=8, throughput=300.0,
                            comm_share_on=True)
    assert figures["gpus"] == 2 and figures["global_batch_size"] == 16
    assert figures["throughput_per_gpu_img_s"] == 150.0
    assert figures["rank_step_ms"] == [100.0, 115.0]
    assert figures["rank_spread_pct"] == pytest.approx((10 / 105 * 100 + 20 / 110 * 100) / 2)
    assert figures["slowest_rank"] == 1
    assert figures["comm_share"] == pytest.approx(0.05)
    assert figures["peak_memory_by_gpu_bytes"] == [6, 7]
    dp = scale_figures([merged_repeat((1.0, 1.0), None, (1, 1))], strategy="dp", gpus=2, nnodes=1,
                       batch_size_per_gpu=8, throughput=1.0, comm_share_on=True)
    assert dp["comm_share"] is None and "no_sync" in dp["comm_share_unavailable"]


def _measurement(strategy: str, gpus: int, throughput: float, status: str = "ok") -> Any:
    from clsbench.results.schema import Measurement

    summary = {"strategy": strategy, "gpus": gpus, "throughput_img_s": throughput} if status == "ok" else {}
    return Measurement(model="m", workload=f"train-{strategy}", mode="fp32", batch_size=8 * gpus, device="cuda",
                       status=status, summary=summary)


def test_efficiency_is_per_gpu_throughput_against_the_strategys_smallest_count():
    ms = [_measurement("ddp", 1, 1000.0), _measurement("ddp", 2, 1900.0), _measurement("ddp", 4, 3600.0),
          _measurement("dp", 2, 1600.0), _measurement("dp", 4, 2400.0), _measurement("dp", 8, 0, status="failed")]
    figures = efficiencies(ms)
    assert figures[ms[1].key]["scaling_efficiency"] == pytest.approx(0.95)  # 1900 / (2 x 1000)
    assert figures[ms[2].key]["scaling_efficiency"] == pytest.approx(0.9)
    assert figures[ms[1].key]["speedup_vs_dp"] == pytest.approx(1900 / 1600)
    assert figures[ms[0].key]["speedup_vs_dp"] is None
    # DataParallel's 1-GPU point is missing: its baseline is the smallest count it measured, and says so
    assert figures[ms[4].key]["scaling_baseline"]["gpus"] == 2
    assert figures[ms[4].key]["scaling_efficiency"] == pytest.approx(2400 / 4 / (1600 / 2))
    assert ms[5].key not in figures


# ------------------------------------------------------------------------------ the run, with a fake launcher


class FakeLauncher:
    """Answers each launch with made-up rank records (no process starts); can fail chosen GPU counts."""

    def __init__(self, fail_gpus: int | None = None) -> None:
        self.fail_gpus = fail_gpus
        self.commands: list[list[str]] = []

    def __call__(self, command: list[str], folder: Path, *, timeout_s: float, env: dict[str, str]) -> LaunchOutcome:
        self.commands.append(command)
        assert (folder / "job.json").exists()
        job = json.loads((folder / "job.json").read_text())
        gpus, world = job["gpus"], job["gpus"] if job["strategy"] == "ddp" else 1
        if gpus == self.fail_gpus:
            bad = {"status": "failed", "rank": 1, "reason": "crash", "detail": "RuntimeError: boom", "failed_at": 1.0}
            return LaunchOutcome(exit_code=1, timed_out=False, wall_s=1.0, records={1: bad}, source="rank files")
        # 10 steps of 8 images per GPU; one step takes 0.1 s on 1 GPU and 5% longer per extra GPU
        records = {r: rank_record(r, world=world, batch=8 * (gpus if world == 1 else 1), own_s=1.0,
                                  slowest_s=1.0 + 0.05 * (gpus - 1)) for r in range(world)}
        return LaunchOutcome(exit_code=0, timed_out=False, wall_s=1.0, records=records, source="gathered")


def test_run_saves_an_ordinary_result_after_every_measurement(tmp_path: Path, cpu_env: dict[str, Any],
                                                               monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(CPU_TEST_ENV, "1")
    out = tmp_path / "scale.json"
    plan = plan_scale(model=TINY, gpus="1,2,4", strategy="both", batch_size_per_gpu=8, device="cpu",
                      options=MeasureOptions(repeats=2, cudnn_benchmark=None))
    saved: list[int] = []

    def progress(event: Any) -> None:
        if event.kind == "measurement":
            saved.append(len(result_io.load(out).measurements))

    fake = FakeLauncher(fail_gpus=4)
    result = run_scale(plan, out, execution=Execution(env=cpu_env, progress=progress), runner=fake)
    assert saved == [1, 2, 3, 4, 5, 6]
    assert result_io.load(out) == result
    assert [(m.workload, m.batch_size, m.status) for m in result.measurements] == [
        ("train-ddp", 8, "ok"), ("train-ddp", 16, "ok"), ("train-ddp", 32, "failed"),
        ("train-dp", 8, "ok"), ("train-dp", 16, "ok"), ("train-dp", 32, "failed")]
    assert len(fake.commands) == 2 + 2 + 1 + 2 + 2 + 1  # a failed repeat is not repeated
    failed = result.measurements[2]
    assert (failed.reason, failed.detail) == ("rank_failed", "rank 1: RuntimeError: boom (repeat 1/1)")
    ddp2 = result.measurements[1].summary
    assert ddp2["throughput_img_s"] == pytest.approx(160 / 1.05)
    assert ddp2["scaling_efficiency"] == pytest.approx(1 / 1.05)
    assert ddp2["scaling_baseline"]["gpus"] == 1
    assert ddp2["speedup_vs_dp"] == pytest.approx(1.0)
    assert result.settings["scale"]["gpus"] == [1, 2, 4] and result.settings["repeats"] == 2
    assert "distributed" in result.environment
    text = render_scale(analyze_scale(result))
    assert "baseline of ddp: 1 GPU(s)" in text and "FAILED: rank_failed" in text
    with pytest.raises(ResultFileError, match="never overwrites"):
        run_scale(plan, out, execution=Execution(env=cpu_env), runner=fake)


def test_dataparallel_on_several_gpus_autotunes_only_when_asked_and_says_why(tmp_path: Path, cpu_env: dict[str, Any],
                                                                          monkeypatch: pytest.MonkeyPatch):
    # cuDNN keeps autotuned algorithms per thread and DataParallel's replicas run in new threads every step.
    monkeypatch.setenv(CPU_TEST_ENV, "1")
    plan = plan_scale(model=TINY, gpus="1,2", strategy="both", batch_size_per_gpu=8, device="cpu",
                      options=MeasureOptions(repeats=1, cudnn_benchmark=None))
    assert plan.cudnn_benchmark is None
    jobs = {(s, g): make_job(plan, s, g, tmp_path, 0)["cudnn_benchmark"] for s, g in plan.measurements()}
    assert jobs == {("ddp", 1): True, ("ddp", 2): True, ("dp", 1): True, ("dp", 2): False}
    result = run_scale(plan, execution=Execution(env=cpu_env), runner=FakeLauncher())
    summaries = {(m.workload, m.batch_size): m.summary for m in result.measurements}
    assert summaries[("train-dp", 16)]["cudnn_benchmark"] is False
    assert "per thread" in summaries[("train-dp", 16)]["cudnn_benchmark_note"]
    assert [k for k, s in summaries.items() if "cudnn_benchmark_note" in s] == [("train-dp", 16)]
    assert "dp x2: cuDNN autotuning off, the default" in render_scale(analyze_scale(result))

    forced = plan_scale(model=TINY, gpus="2", strategy="dp", batch_size_per_gpu=8, device="cpu",
                        options=MeasureOptions(repeats=1, cudnn_benchmark=True))
    assert make_job(forced, "dp", 2, tmp_path, 0)["cudnn_benchmark"] is True
    assert "every step autotunes again" in get_strategy("dp").cudnn_benchmark(True, 2)[1]
    off = plan_scale(model=TINY, gpus="1,2", strategy="both", batch_size_per_gpu=8, device="cpu",
                     options=MeasureOptions(repeats=1, cudnn_benchmark=False))
    assert {make_job(off, s, g, tmp_path, 0)["cudnn_benchmark"] for s, g in off.measurements()} == {False}
    assert get_strategy("dp").cudnn_benchmark(False, 2) == (False, None)


def test_a_strategy_that_cannot_run_is_skipped_with_its_reason(cpu_env: dict[str, Any]):
    plan = plan_scale(model=TINY, gpus="2", strategy="dp", batch_size_per_gpu=8, device="cpu",
                      options=MeasureOptions(repeats=1, cudnn_benchmark=None))
    fake = FakeLauncher()
    result = run_scale(plan, execution=Execution(env=cpu_env), runner=fake)
    (m,) = result.measurements
    assert (m.status, m.reason) == ("skipped", "unsupported_strategy") and "CUDA GPUs" in m.detail
    assert fake.commands == []


def test_show_prints_the_scaling_table(tmp_path: Path, cpu_env: dict[str, Any]):
    out = tmp_path / "scale.json"
    plan = plan_scale(model=TINY, gpus="1,2", batch_size_per_gpu=8, device="cpu",
                      options=MeasureOptions(repeats=1, cudnn_benchmark=None))
    run_scale(plan, out, execution=Execution(env=cpu_env), runner=FakeLauncher())
    shown = invoke("show", str(out))
    assert shown.exit_code == 0, shown.output
    assert "train-ddp" in shown.stdout and "scaling: clsbench_testmodels:tiny fp32 on cpu" in shown.stdout
    row = next(line for line in shown.stdout.splitlines() if line.startswith("ddp          2"))
    assert "95.2%" in row  # 1 / 1.05
    resumed = invoke("run", "--resume", str(out))
    assert_clean_error(resumed, 3, "cannot be resumed")


class TwoNodeLauncher:
    """What a node of a 2-node launch sees: rank 0's gathered records of all 4 ranks (node 0), or its own 2 ranks'
    files (node 1)."""

    def __init__(self, node_rank: int) -> None:
        self.node_rank = node_rank

    def __call__(self, command: list[str], folder: Path, *, timeout_s: float, env: dict[str, str]) -> LaunchOutcome:
        ranks = range(4) if self.node_rank == 0 else range(2, 4)
        records = {r: {**rank_record(r, world=4), "host": f"node{r // 2}", "local_rank": r % 2} for r in ranks}
        return LaunchOutcome(exit_code=0, timed_out=False, wall_s=1.0, records=records,
                             source="gathered" if self.node_rank == 0 else "rank files")


def test_two_nodes_merge_on_node_0_and_node_1_writes_nothing(tmp_path: Path, cpu_env: dict[str, Any]):
    def plan(node_rank: int) -> Any:
        return plan_scale(model=TINY, gpus="2", batch_size_per_gpu=8, device="cpu", nnodes=2,
                          node_rank=node_rank, rdzv_endpoint="node0:29500",
                          options=MeasureOptions(repeats=1, cudnn_benchmark=None))

    out0, out1 = tmp_path / "node0.json", tmp_path / "node1.json"
    (m,) = run_scale(plan(0), out0, execution=Execution(env=cpu_env), runner=TwoNodeLauncher(0)).measurements
    assert m.status == "ok" and m.batch_size == 32 and m.summary["gpus"] == 4 and m.summary["nnodes"] == 2
    (repeat,) = m.repeats
    assert [(r["rank"], r["host"]) for r in repeat["ranks"]] == [(0, "node0"), (1, "node0"), (2, "node1"),
                                                                 (3, "node1")]
    assert repeat["samples"]["images"] == 10 * 4 * 8
    assert result_io.load(out0).measurements == (m,)
    (m1,) = run_scale(plan(1), out1, execution=Execution(env=cpu_env), runner=TwoNodeLauncher(1)).measurements
    assert m1.status == "ok" and [r["rank"] for r in m1.repeats[0]["ranks"]] == [2, 3]  # what node 1 saw
    assert not out1.exists()


def test_ctrl_c_ends_the_run_and_keeps_what_finished(tmp_path: Path, cpu_env: dict[str, Any]):
    from clsbench.procedures.scale import ScaleInterrupted

    calls: list[int] = []

    def runner(command: list[str], folder: Path, **kwargs: Any) -> LaunchOutcome:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return FakeLauncher()(command, folder, **kwargs)

    out = tmp_path / "scale.json"
    plan = plan_scale(model=TINY, gpus="1,2", batch_size_per_gpu=8, device="cpu",
                      options=MeasureOptions(repeats=1, cudnn_benchmark=None))
    with pytest.raises(ScaleInterrupted, match="1 measurement"):
        run_scale(plan, out, execution=Execution(env=cpu_env), runner=runner)
    assert [m.batch_size for m in result_io.load(out).measurements] == [8]


# ------------------------------------------------------------------------- the launcher: time limit, no strays

ORPHAN_MAKER = """
import os, subprocess, sys, time
folder = sys.argv[1]
# like torchrun: a child in a session of its own, which a kill of this process group would not reach
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "clsbench.procedures.scale.rank",
                          folder],
                         start_new_session=True)
open(os.path.join(folder, "pid-0"), "w").write(str(child.pid))
time.sleep(float(sys.argv[2]))
"""


def test_a_launch_past_its_time_limit_is_ended_with_every_process(tmp_path: Path):
    t0 = time.monotonic()
    outcome = launch([sys.executable, "-c", ORPHAN_MAKER, str(tmp_path), "600"], tmp_path, timeout_s=1.5)
    assert outcome.timed_out and outcome.exit_code is None
    assert time.monotonic() - t0 < 1.5 + 10.0
    child = int((tmp_path / "pid-0").read_text())
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    assert outcome.killed >= 1


def test_a_process_left_behind_by_a_finished_launch_is_ended(tmp_path: Path):
    outcome = launch([sys.executable, "-c", ORPHAN_MAKER, str(tmp_path), "0.2"], tmp_path, timeout_s=60.0)
    assert not outcome.timed_out and outcome.exit_code == 0
    child = int((tmp_path / "pid-0").read_text())
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    assert outcome.killed == 1


# ------------------------------------------------------------------------ real launches: torchrun and gloo


class Recording:
    """The real launcher, noting the pid of every process each launch started (from the ranks' pid files)."""

    def __init__(self) -> None:
        self.pids: list[list[int]] = []

    def __call__(self, command: list[str], folder: Path, **kwargs: Any) -> LaunchOutcome:
        outcome = launch(command, folder, **kwargs)
        self.pids.append([int(p.read_text()) for p in sorted(folder.glob(PID_FILE.format(rank="*")))])
        return outcome

    def none_alive(self) -> bool:
        return not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                       for pids in self.pids for pid in pids)


@pytest.mark.slow
def test_two_gloo_ranks_through_torchrun(tmp_path: Path):
    out = tmp_path / "scale.json"
    result = invoke("scale", "--model", TINY, "--gpus", "1,2", "--strategy", "both", "--device", "cpu",
                    "--batch-size-per-gpu", "8", "--repeats", "1", *QUICK_ARGS, "-o", str(out))
    assert result.exit_code == 0, result.output
    saved = result_io.load(out)
    ddp1, ddp2, dp1, dp2 = saved.measurements
    assert (ddp1.status, ddp2.status) == ("ok", "ok")
    assert (dp1.status, dp1.reason) == ("skipped", "unsupported_strategy")
    (repeat,) = ddp2.repeats
    ranks = repeat["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert len({r["pid"] for r in ranks}) == 2 and os.getpid() not in {r["pid"] for r in ranks}
    iterations = repeat["validity"]["timed_iterations"]
    assert all(len(r["iteration_ms"]) == iterations for r in ranks)  # every rank ran the same steps
    assert repeat["samples"]["images"] == iterations * 16
    assert repeat["launch"]["exit_code"] == 0, "\n".join(repeat.get("log_tail") or [])
    assert repeat["launch"]["records_from"] == "gathered"
    assert repeat["launch"]["command"][2] == "torch.distributed.run"
    assert repeat["distributed"]["backend"] == "gloo"
    assert repeat["distributed"]["options"]["gradient_as_bucket_view"] is True
    assert repeat["distributed"]["buffers_synced_every_forward"] is True
    assert repeat["comm"]["iterations"] >= 5 and repeat["comm"]["share"] is not None
    s = ddp2.summary
    assert s["gpus"] == 2 and s["batch_size_per_gpu"] == 8 and len(s["rank_step_ms"]) == 2
    assert s["comm_share"] is not None and s["rank_spread_pct"] is not None
    assert len(s["peak_memory_by_gpu_bytes"]) == 2 and s["memory_kind"] == "host_peak_rss_bytes"
    assert s["scaling_efficiency"] == pytest.approx(s["throughput_img_s"] / 2 / ddp1.summary["throughput_img_s"])
    assert ddp1.summary["scaling_efficiency"] == 1.0 and ddp1.summary["comm_share"] is None
    if "OMP_NUM_THREADS" not in os.environ:  # the same CPU threads per process at every count, 1 GPU included
        assert ddp1.repeats[0]["distributed"]["env"]["OMP_NUM_THREADS"] == "1"
        assert ddp1.repeats[0]["flags"]["num_threads"] == repeat["flags"]["num_threads"] == 1
    assert saved.environment["distributed"]["gloo_available"] is True
    assert "scaling: clsbench_testmodels:tiny fp32 on cpu" in result.stdout


@pytest.mark.slow
def test_a_failing_rank_fails_the_measurement_with_its_error(cpu_env: dict[str, Any]):
    recording = Recording()
    plan = plan_scale(model="clsbench_testmodels:rank1_error_model", gpus="2", batch_size_per_gpu=8, device="cpu",
                      options=MeasureOptions(**QUICK, repeats=2, cudnn_benchmark=None))
    result = run_scale(plan, execution=Execution(env=cpu_env), runner=recording)
    (m,) = result.measurements
    assert (m.status, m.reason) == ("failed", "rank_failed")
    assert m.detail.startswith("rank 1 (") and "RuntimeError: rank 1 broke inside forward" in m.detail
    assert len(m.repeats) == 1 and m.repeats[0]["launch"]["exit_code"] != 0
    assert len(recording.pids[0]) == 2 and recording.none_alive()


@pytest.mark.slow
def test_a_hanging_rank_times_out_and_nothing_is_left_behind(cpu_env: dict[str, Any]):
    recording = Recording()
    timeout_s = 12.0  # the ranks start within a few seconds; then rank 1 sleeps in forward and rank 0 waits for it
    plan = plan_scale(model="clsbench_testmodels:rank1_hang_model", gpus="2", batch_size_per_gpu=8, device="cpu",
                      options=MeasureOptions(**QUICK, repeats=1, timeout_s=timeout_s, cudnn_benchmark=None))
    t0 = time.monotonic()
    result = run_scale(plan, execution=Execution(env=cpu_env), runner=recording)
    assert time.monotonic() - t0 < timeout_s + 12.0
    (m,) = result.measurements
    assert (m.status, m.reason) == ("failed", "timeout")
    assert m.detail.startswith(f"no result within {timeout_s:g} s")
    assert len(recording.pids[0]) == 2  # both ranks had started: the clean-up had something to do
    assert recording.none_alive()


@pytest.mark.slow
def test_the_dataparallel_process_through_its_cpu_test_hook(cpu_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(CPU_TEST_ENV, "1")
    plan = plan_scale(model=TINY, gpus="2", strategy="dp", batch_size_per_gpu=8, device="cpu",
                      options=MeasureOptions(**QUICK, repeats=1, cudnn_benchmark=None))
    result = run_scale(plan, execution=Execution(env=cpu_env))
    (m,) = result.measurements
    assert m.status == "ok", m.detail
    (repeat,) = m.repeats
    assert repeat["samples"]["images"] == repeat["validity"]["timed_iterations"] * 16  # one process, 2 x 8 images
    assert [r["batch_size"] for r in repeat["ranks"]] == [16]
    assert repeat["launch"]["command"][1:3] == ["-m", "clsbench.procedures.scale.rank"]
    assert "CPU test hook" in repeat["distributed"]["note"]
    assert m.summary["comm_share"] is None and m.summary["gpus"] == 2


# ------------------------------------------------------------------------------------------- two GPUs (NCCL)


def _two_gpus() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() >= 2


@pytest.mark.gpu
@pytest.mark.skipif(not _two_gpus(), reason="needs two CUDA GPUs")
def test_gpu_ddp_over_nccl_and_dataparallel_on_two_gpus(monkeypatch: pytest.MonkeyPatch):
    # NVLink multicast stays off, as on every shared machine (README): the launches inherit these.
    for name, value in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                        "NVSHMEM_DISABLE_NVLS": "1"}.items():
        monkeypatch.setenv(name, value)
    recording = Recording()
    plan = plan_scale(model="resnet18", gpus="1,2", strategy="both", mode="amp-bf16+cl", batch_size_per_gpu=64,
                      device="cuda", options=MeasureOptions(**QUICK, repeats=1, cudnn_benchmark=None))
    result = run_scale(plan, runner=recording)
    assert [m.status for m in result.measurements] == ["ok"] * 4, [m.detail for m in result.measurements]
    ddp2, dp2 = result.measurements[1], result.measurements[3]
    assert ddp2.repeats[0]["distributed"]["backend"] == "nccl"
    assert ddp2.repeats[0]["distributed"]["nccl_version"]
    assert [r["device"] for r in ddp2.repeats[0]["ranks"]] == ["cuda:0", "cuda:1"]
    assert len(ddp2.summary["peak_memory_by_gpu_bytes"]) == 2 and ddp2.summary["comm_share"] is not None
    assert dp2.repeats[0]["distributed"]["autocast_inside_replicas"] is True
    assert len(dp2.summary["peak_memory_by_gpu_bytes"]) == 2  # one process, both GPUs read
    assert result.environment["distributed"]["nccl_version"]
    assert ddp2.repeats[0]["distributed"]["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert recording.none_alive()
