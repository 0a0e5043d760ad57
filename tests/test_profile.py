"""Profiles: the pure summary of trace events (synthetic traces, exact figures), a real CPU profile (a loadable
Chrome trace with the expected events, a split that adds up), `clsbench profile`, `run --profile`, `show`, the
Nsight Systems command and the tune line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner, Result

from clsbench import api
from clsbench.analysis import profile as summary_module
from clsbench.analysis.profile import SUM_TOLERANCE, summarize_trace
from clsbench.cli import main
from clsbench.core.options import Execution, MeasureOptions, profile_command
from clsbench.core.plan import ProfileSettings, RunPlan
from clsbench.errors import InvalidInputError, ResultFileError
from clsbench.measure import profiler
from clsbench.procedures import profile as procedure
from clsbench.results import io as result_io

TINY = "clsbench_testmodels:tiny"
FAKE = ["--device", "cpu", "--isolation", "inline", "--clock", "fake:1ms"]
SHORT = [*FAKE, "--iterations", "3", "--warmup", "1", "--min-time", "0"]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


# ------------------------------------------------------------------------------------------ synthetic traces


def span(name: str, cat: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": args.pop("tid", 1), "ts": ts, "dur": dur,
            "args": args}


def step(k: int, ts: float, dur: float) -> dict[str, Any]:
    return span(f"ProfilerStep#{k}", "user_annotation", ts, dur)


def phase(name: str, ts: float, dur: float) -> dict[str, Any]:
    return span(f"clsbench.{name}", "user_annotation", ts, dur)


def launch(ts: float, correlation: int) -> dict[str, Any]:
    return span("cudaLaunchKernel", "cuda_runtime", ts, 2.0, correlation=correlation)


def kernel(name: str, ts: float, dur: float, correlation: int) -> dict[str, Any]:
    return span(name, "kernel", ts, dur, correlation=correlation, tid=7)


def memory(ts: float, total: float, nbytes: float, device_type: int = 1) -> dict[str, Any]:
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": {"Total Allocated": total, "Bytes": nbytes, "Device Type": device_type}}


def gpu_trace() -> list[dict[str, Any]]:
    """Two steps of 100 us. Step 1: forward launched at 1 (GPU 10-40), backward at 42 (GPU 45-75), optimizer at 80
    (GPU 80-90): idle 0-10, 40-45, 75-80, 90-100. Step 2 the same, 100 us later. Memory: 1000 bytes before, the
    forward allocates 500 then frees 200, the backward allocates 300."""
    events: list[dict[str, Any]] = []
    for k, base in enumerate((0.0, 100.0)):
        c = 10 * k
        events += [step(k, base, 100.0), phase("forward", base + 1, 39), phase("backward", base + 41, 38),
                   phase("optimizer", base + 79, 12),
                   launch(base + 1, c + 1), kernel("conv_fwd", base + 10, 30, c + 1),
                   launch(base + 42, c + 2), kernel("conv_bwd", base + 45, 30, c + 2),
                   launch(base + 80, c + 3), kernel("sgd", base + 80, 10, c + 3)]
    events += [memory(-5, 1000, 1000), memory(5, 1500, 500), memory(30, 1300, -200), memory(50, 1600, 300),
               memory(95, 1000, -600)]
    return events


def test_gpu_split_is_exact_and_adds_up() -> None:
    s = summarize_trace({"traceEvents": gpu_trace()}, gpu=True)
    assert s["basis"] == "gpu" and s["steps"] == 2
    assert s["step_ms"] == pytest.approx(0.1)
    split = s["split_ms"]
    assert split["forward"] == pytest.approx(0.030) and split["backward"] == pytest.approx(0.030)
    assert split["optimizer"] == pytest.approx(0.010) and split["idle"] == pytest.approx(0.030)
    assert split["data_wait"] == split["copy"] == split["other"] == 0.0
    assert s["sum_share"] == pytest.approx(1.0, abs=SUM_TOLERANCE) and s["adds_up"]
    assert s["gpu_busy_share"] == pytest.approx(0.7)
    # Between kernels: 40-45 and 75-80 in each step, plus 90-110 between the steps (edges 0-10 and 190-200 not).
    assert s["launch_bound_share"] == pytest.approx((10 + 10 + 20) / 200)
    assert s["host_phase_ms"]["forward"] == pytest.approx(0.039)
    rows = s["top"]["rows"]
    assert [r["name"] for r in rows] == ["conv_bwd", "conv_fwd", "sgd"]  # ties by name
    assert rows[0]["share"] == pytest.approx(30 / 70) and rows[0]["calls_per_step"] == 1
    by_phase = s["memory"]["by_phase"]
    assert by_phase["forward"] == {"peak_bytes": 1500, "rise_bytes": 500}
    assert by_phase["backward"] == {"peak_bytes": 1600, "rise_bytes": 300}
    assert s["memory"]["window_peak_bytes"] == 1600 and s["notes"] == []


def test_gpu_idle_while_the_host_waits_for_data_is_data_wait_not_launch_bound() -> None:
    events = [step(0, 0, 100), phase("data_wait", 0, 50), phase("forward", 50, 10), launch(50, 1),
              launch(51, 2), kernel("a", 55, 10, 1), kernel("b", 70, 20, 2), kernel("stray", 20, 5, 99)]
    s = summarize_trace(events, gpu=True)
    split = s["split_ms"]
    # 0-50 waiting: 20-25 busy with a kernel no phase launched (other), the remaining 45 us idle while waiting.
    assert split["data_wait"] == pytest.approx(0.045) and split["other"] == pytest.approx(0.005)
    assert split["forward"] == pytest.approx(0.030) and split["idle"] == pytest.approx(0.020)
    assert s["adds_up"]
    # Gaps between kernels: 25-55 (of which 25-50 waiting for data) and 65-70.
    assert s["launch_bound_share"] == pytest.approx((5 + 5) / 100)


def test_work_of_two_phases_at_once_does_not_add_up_and_says_so() -> None:
    events = [step(0, 0, 100), phase("forward", 0, 10), phase("backward", 10, 10), launch(1, 1), launch(11, 2),
              kernel("a", 20, 50, 1), kernel("b", 30, 50, 2)]
    s = summarize_trace(events, gpu=True)
    assert s["overlap_ms"] == pytest.approx(0.040)
    assert s["sum_share"] == pytest.approx(1.4) and not s["adds_up"]
    assert any("ran at once" in note for note in s["notes"])


def test_host_split_and_cpu_ops_by_self_time() -> None:
    events = [step(0, 0, 100), phase("forward", 0, 40), phase("backward", 40, 50),
              span("aten::conv2d", "cpu_op", 1, 30), span("aten::convolution", "cpu_op", 2, 25),
              span("aten::add", "cpu_op", 50, 10), memory(1, 100, 100, 0), memory(3, 400, 300, 0),
              memory(45, 350, -50, 0)]
    s = summarize_trace(events, gpu=False, measured_step_ms=0.05)
    split = s["split_ms"]
    assert split["forward"] == pytest.approx(0.040) and split["backward"] == pytest.approx(0.050)
    assert split["other"] == pytest.approx(0.010) and split["idle"] is None
    assert s["adds_up"] and "launch_bound_share" not in s
    top = {r["name"]: r["ms_per_step"] for r in s["top"]["rows"]}
    assert top == pytest.approx({"aten::convolution": 0.025, "aten::add": 0.010, "aten::conv2d": 0.005})
    assert s["memory"]["absolute"] is False
    assert s["memory"]["by_phase"]["forward"] == {"peak_bytes": None, "rise_bytes": 400}
    assert s["profiler_overhead_pct"] == pytest.approx(100.0)
    assert any("slower than the timed ones" in note for note in s["notes"])


def test_a_trace_without_profiled_steps_is_refused() -> None:
    with pytest.raises(ValueError, match="ProfilerStep"):
        summarize_trace([phase("forward", 0, 10)], gpu=False)


def test_interval_helpers() -> None:
    merged = summary_module.merge([(5, 8), (0, 2), (1, 3), (9, 9)])
    assert merged == [(0, 3), (5, 8)]
    assert summary_module.complement(merged, 0, 10) == [(3, 5), (8, 10)]
    assert summary_module.intersect(merged, [(2, 6)]) == [(2, 3), (5, 6)]
    assert summary_module.gaps(merged) == [(3, 5)]


# ------------------------------------------------------------------------------------------ a real CPU profile


def tiny_train_step() -> Any:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 14 * 14, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    images, labels = torch.randn(2, 3, 16, 16), torch.tensor([1, 2])

    def run_once() -> None:
        with profiler.phase("forward"):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        with profiler.phase("backward"):
            loss.backward()
        with profiler.phase("optimizer"):
            optimizer.step()
            optimizer.zero_grad()

    return run_once


def test_a_cpu_profile_writes_a_loadable_trace_and_a_split_that_adds_up(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    s = profiler.profile_steps(tiny_train_step(), steps=3, warmup=1, cuda=False, trace_path=str(trace))
    assert "unavailable" not in s, s
    events = json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
    names = {e.get("name") for e in events}
    assert {"ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"} <= names  # the recorded steps, not the warm-up
    assert {"clsbench.forward", "clsbench.backward", "clsbench.optimizer"} <= names
    assert any(e.get("cat") == "cpu_op" and e.get("name") == "aten::convolution" for e in events)
    assert s["steps"] == 3 and s["trace_path"] == str(trace)
    assert abs(sum(v for v in s["split_share"].values() if v is not None) - 1.0) <= SUM_TOLERANCE
    assert s["adds_up"] and all(s["split_ms"][p] > 0 for p in ("forward", "backward", "optimizer"))
    assert s["top"]["kind"] == "cpu" and s["top"]["rows"]
    assert not list(tmp_path.glob(".*partial"))


def test_a_profiler_failure_is_a_reason_not_an_exception(tmp_path: Path) -> None:
    def broken() -> None:
        raise RuntimeError("the step broke")

    s = profiler.profile_steps(broken, steps=2, warmup=0, cuda=False, trace_path=str(tmp_path / "t.json"))
    assert s["unavailable"].startswith("RuntimeError: the step broke") and s["profile_s"] >= 0
    assert list(tmp_path.iterdir()) == []
    assert profiler.phase("forward") is profiler.phase("backward")  # no-op again after the failure


def test_an_existing_trace_is_not_written_over(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text("mine", encoding="utf-8")
    s = profiler.profile_steps(tiny_train_step(), steps=1, warmup=0, cuda=False, trace_path=str(trace))
    assert "exists" in s["unavailable"] and trace.read_text(encoding="utf-8") == "mine"


# ---------------------------------------------------------------------------------------- run --profile


def test_run_profile_attaches_the_profile_to_the_first_repeat_and_show_prints_it(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    result = invoke("run", "--model", TINY, "--workload", "train", "--batch-size", "2", "--repeats", "2", *SHORT,
                    "--profile", "-q", "-o", str(path))
    assert result.exit_code == 0, result.output
    assert "profiles (first repeat" in result.stdout
    stored = result_io.load(path)
    assert stored.settings["profile"] == {"steps": 5, "warmup": 3, "trace_path": None}
    m = stored.measurements[0]
    assert "profile" in m.repeats[0] and "profile" not in m.repeats[1]
    profile = m.summary["profile"]
    assert profile["basis"] == "host" and profile["adds_up"] and profile["trace_path"] is None
    shown = invoke("show", str(path))
    assert shown.exit_code == 0 and "profiles (first repeat" in shown.stdout
    lines = shown.stdout.splitlines()
    section = lines[next(i for i, line in enumerate(lines) if line.startswith("profiles (first repeat")):]
    header, row = section[2], section[4]
    assert header.split()[:9] == ["model", "workload", "mode", "batch", "step", "ms", "forward", "backward",
                                  "optimizer"]
    assert row.startswith(TINY) and row.count("%") >= 4
    # The plan round-trips, profile included (what --resume reads).
    assert RunPlan.from_dict(stored.settings).profile == ProfileSettings()


def test_runs_without_profile_store_nothing_new(tmp_path: Path) -> None:
    plan = api.plan_run(models=[TINY], workloads=["infer-throughput"], batch_sizes=[2], device="cpu",
                        options=MeasureOptions(repeats=1, warmup=1, iterations=2, min_time=0.0))
    result = api.run(plan, None, execution=Execution(isolation="inline", probe=False))
    assert "profile" not in result.settings and "profile" not in result.measurements[0].repeats[0]
    assert "profile" not in result.measurements[0].summary


def test_a_stored_profile_must_be_an_object(tmp_path: Path, data_dir: Path) -> None:
    data = json.loads(next(data_dir.glob("*.json")).read_text(encoding="utf-8"))
    data["measurements"][0].setdefault("summary", {})["profile"] = "fast"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ResultFileError, match="profile"):
        result_io.load(bad)


# ---------------------------------------------------------------------------------------- clsbench profile


def test_profile_command_writes_trace_summary_and_result_into_a_new_directory(tmp_path: Path) -> None:
    out = tmp_path / "prof"
    result = invoke("profile", "--model", TINY, "--workload", "train", "--batch-size", "2", "--steps", "2",
                    "--profile-warmup", "1", *SHORT, "-q", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["result.json", "summary.json", "trace.json"]
    events = json.loads((out / "trace.json").read_text(encoding="utf-8"))["traceEvents"]
    assert {"ProfilerStep#1", "ProfilerStep#2", "clsbench.forward"} <= {e.get("name") for e in events}
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["cell"]["model"] == TINY and summary["files"]["trace"] == "trace.json"
    assert summary["profile"]["steps"] == 2 and summary["profile"]["adds_up"]
    assert "where a step's time goes" in result.stdout and "top CPU ops by self time" in result.stdout
    assert "(adds up: the parts sum to" in result.stdout and "memory by phase" in result.stdout
    assert f"trace: {out / 'trace.json'}" in result.stdout
    assert "nsys: Nsight Systems records GPU work; this cell runs on the CPU" in result.stdout
    assert result_io.load(out / "result.json").measurements[0].summary["profile"]["trace_path"] == \
        str((out / "trace.json").absolute())


def test_profile_refuses_an_existing_directory_untouched(tmp_path: Path) -> None:
    out = tmp_path / "prof"
    out.mkdir()
    (out / "keep.txt").write_text("mine", encoding="utf-8")
    result = invoke("profile", "--model", TINY, *SHORT, "-o", str(out))
    assert result.exit_code == 3 and result.stdout == ""
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        f"error: {out} already exists; a profile goes into a new directory and clsbench never writes over one"]
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize(("args", "words"), [
    ([], "give -o DIR"),
    (["--model", "no_such_model"], "unknown model"),
    (["--steps", "0"], "profiled steps must be >= 1"),
])
def test_profile_bad_input_is_one_line(args: list[str], words: str, tmp_path: Path) -> None:
    out = tmp_path / "prof"
    base = ["--model", TINY] if "--model" not in args else []
    result = invoke("profile", *base, *args, *SHORT, *(["-o", str(out)] if args else []))
    assert result.exit_code == 2, result.output
    assert words in result.stderr and "Traceback" not in result.output
    assert not out.exists()


def test_nsys_without_nsys_exits_2_before_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(procedure, "nsys_path", lambda: None)
    out = tmp_path / "prof"
    result = invoke("profile", "--model", TINY, "--nsys", "--device", "cpu", "-o", str(out))
    assert result.exit_code == 2 and "--nsys records GPU work" in result.stderr
    monkeypatch.setattr(api, "resolve_device", lambda device: "cuda:0")
    result = invoke("profile", "--model", TINY, "--nsys", "-o", str(out))
    assert result.exit_code == 2 and "Nsight Systems (nsys) is not installed here" in result.stderr
    assert not out.exists()
    with pytest.raises(InvalidInputError, match="not installed"):
        procedure.run_nsys(["CLSBENCH_NVTX=1", "nsys", "profile", "clsbench", "run"])


def test_the_nsys_command_records_the_same_cell_in_one_process(tmp_path: Path) -> None:
    plan = api.plan_run(models=[TINY], workloads=["train"], modes=["fp32"], batch_sizes=[8], device="cpu",
                        options=MeasureOptions(repeats=1, warmup=4))
    command = procedure.nsys_command(plan, plan.cells[0], tmp_path)
    assert command[:3] == ["CLSBENCH_NVTX=1", "nsys", "profile"]
    run = command[command.index("clsbench"):]
    assert run[:12] == ["clsbench", "run", "--model", TINY, "--workload", "train", "--mode", "fp32",
                        "--batch-size", "8", "--device", "cpu"]
    assert "--warmup" in run and "--isolation" in run and "inline" in run and "--no-probe" in run
    assert str(tmp_path / "nsys-report") in command
    assert procedure.nsys_text(command).startswith("CLSBENCH_NVTX=1 nsys profile --trace=cuda,nvtx")


def test_ctrl_c_leaves_no_half_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clsbench.engine import runner

    def interrupted(plan: Any, output: Path, **_: Any) -> Any:
        result_io.save(runner.new_result(plan, {}), Path(output))  # the empty run file a run claims first
        raise runner.RunInterrupted("interrupted: 0 measurement(s) saved")

    monkeypatch.setattr(runner, "run", interrupted)
    out = tmp_path / "prof"
    result = invoke("profile", "--model", TINY, *SHORT, "-q", "-o", str(out))
    assert result.exit_code == 130
    assert f"error: interrupted: nothing was profiled; {out} removed" in result.stderr
    assert not out.exists()


def test_phases_are_free_outside_a_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profiler, "_STATE", [False, False])
    assert profiler.phase("forward") is profiler.phase("optimizer")
    with profiler.phase("forward"):  # a no-op context manager
        pass


# --------------------------------------------------------------------------------------- tune's profile line


def test_profile_command_of_a_reproduce_line() -> None:
    line = ("clsbench run --model timm/resnet50 --workload train --mode amp-bf16+cl --batch-size 256 --device cuda "
            "--repeats 1 --no-overlap --order cell --warmup 3")
    assert profile_command(line) == ("clsbench profile --model timm/resnet50 --workload train --mode amp-bf16+cl "
                                     "--batch-size 256 --device cuda --warmup 3 -o "
                                     "profile-timm_resnet50-amp-bf16_cl-bs256")
    words = profile_command(line, "prof").split()
    assert words[-2:] == ["-o", "prof"]
    with pytest.raises(ValueError):
        profile_command("clsbench sweep --model x")


def test_tune_prints_the_profile_command_beside_the_reproduce_line() -> None:
    from clsbench.procedures.tune import render_tune

    command = "clsbench run --model m --workload train --mode fp32 --batch-size 4 --device cpu --repeats 1"
    analysis = {"model": "m", "workload": "train", "device": "cpu", "objective": "throughput", "limits": {},
                "candidates": [], "command": command, "pruned": [], "checks": 0, "search_s": 1.0,
                "measurements": 1, "winner": {"mode": "fp32", "batch_size": 4, "backend": "eager",
                                              "correctness": {"reference": True}}}
    lines = render_tune(analysis).splitlines()
    at = lines.index(f"reproduce: {command}")
    assert lines[at + 1] == ("profile: clsbench profile --model m --workload train --mode fp32 --batch-size 4 "
                             "--device cpu -o profile-m-fp32-bs4")


def test_the_tune_profile_line_is_a_command_profile_accepts(tmp_path: Path) -> None:
    line = profile_command(f"clsbench run --model {TINY} --workload infer-throughput --mode fp32 --batch-size 2 "
                           "--device cpu --repeats 1 --warmup 1 --iterations 2 --min-time 0",
                           str(tmp_path / "p"))
    words = line.split()
    result = invoke(*words[1:], "--isolation", "inline", "--clock", "fake:1ms", "-q")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p" / "trace.json").exists()


# ----------------------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize(("workload", "batch"), [("train", 32), ("infer-latency", 1)])
def test_a_gpu_profile_splits_by_gpu_time(workload: str, batch: int, tmp_path: Path) -> None:
    outcome = procedure.profile(model="resnet18", workload=workload, mode="amp-bf16+cl", batch_size=batch,
                                device="cuda", output=tmp_path / "prof",
                                options=MeasureOptions(warmup=3, iterations=10, min_time=0.0))
    s = outcome.summary
    assert "unavailable" not in s, s
    assert s["basis"] == "gpu" and s["adds_up"] and s["top"]["kind"] == "gpu" and s["top"]["rows"]
    assert s["split_ms"]["forward"] > 0 and 0 <= s["launch_bound_share"] <= s["split_share"]["idle"] + 1e-9
    assert s["memory"]["absolute"] and s["memory"]["by_phase"]["forward"]["peak_bytes"] > 0
    if workload == "train":
        assert s["split_ms"]["backward"] > 0 and s["split_ms"]["optimizer"] > 0
    else:
        assert s["split_ms"]["copy"] > 0
    assert json.loads(outcome.trace.read_text(encoding="utf-8"))["traceEvents"]
