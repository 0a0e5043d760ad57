"""Batch-size sweeps: the knee on synthetic results (exact), automatic growth on a plateau and on out-of-memory,
the file as an ordinary (resumable) result, and the CLI.

Most sweeps run inline with a *cost clock*: the test model's forward advances a shared clock by a cost that
depends on its batch size (and, for tune, on its mode), so throughput is a chosen function of the batch size and
every decision of the search is deterministic. One test runs the real thing: fresh worker processes, real clock.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest
from click.testing import CliRunner

from clsbench import api
from clsbench.cli import main
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.plan import RunPlan
from clsbench.errors import InvalidInputError
from clsbench.measure.clock import FakeClock
from clsbench.procedures.sweep import AUTO_MIN_GAIN, analyze_sweep, parse_batch_sizes, render_sweep, sweep
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult, Measurement

TINY = "clsbench_testmodels:tiny"

#: A test model whose forward advances ``STATE["ns"]`` (read by ``CostClock``) by ``cost(mode, batch)`` ns and
#: raises torch.OutOfMemoryError above ``STATE["oom_above"]``. Written to a fresh module per test, so workers in
#: other processes import it by name too (with the module's defaults, since STATE does not travel).
COSTED_SOURCE = '''
import torch
from torch import nn

OOM_ABOVE = {oom_above!r}
STATE = {{"ns": 0, "oom_above": OOM_ABOVE, "cost": None}}


def default_cost(mode, batch):
    return 1_000_000 + 100_000 * batch  # 1 ms + 0.1 ms per image: throughput keeps rising with the batch


class CostClock:
    def now_ns(self):
        return STATE["ns"]


def mode_key(x):
    if torch.is_autocast_enabled("cpu"):
        precision = {{torch.bfloat16: "amp-bf16", torch.float16: "amp-fp16"}}[torch.get_autocast_dtype("cpu")]
    else:
        precision = {{torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}}[x.dtype]
    channels_last = not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
    return precision + ("+cl" if channels_last else "")


class Costed(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, num_classes)

    def forward(self, x):
        batch = x.shape[0]
        if STATE["oom_above"] is not None and batch > STATE["oom_above"]:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB (simulated)")
        STATE["ns"] += int((STATE["cost"] or default_cost)(mode_key(x), batch))
        return self.head(torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3)))


def costed(num_classes=1000):
    return Costed(num_classes)


costed.input_size = 16
'''

#: Short stop rules: 1 warm-up, 2 timed iterations, no minimum time; one repeat unless a test needs more.
SHORT = MeasureOptions(repeats=1, warmup=1, iterations=2, min_time=0.0)


def per_image_cost(per_image_ms: Mapping[str, float]) -> Callable[[str, int], int]:
    """A cost for the costed model, in ns per call: 0.5 ms plus ``per_image_ms[mode]`` per image."""
    ms = 1_000_000
    return lambda mode, batch: int(0.5 * ms + per_image_ms[mode] * ms * batch)


def load_costed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, oom_above: int | None = None,
                per_image_ms: Mapping[str, float] | None = None) -> ModuleType:
    """Write the cost-model module under a fresh name, put it on sys.path and import it; with ``per_image_ms``,
    its cost is :func:`per_image_cost` of it."""
    name = f"costed_{uuid.uuid4().hex[:12]}"
    directory = tmp_path / "modules"
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.py").write_text(COSTED_SOURCE.format(oom_above=oom_above), encoding="utf-8")
    monkeypatch.syspath_prepend(str(directory))
    module = importlib.import_module(name)
    if per_image_ms is not None:
        module.STATE["cost"] = per_image_cost(per_image_ms)
    return module


def invoke_group(*args: str) -> Any:
    from clsbench.cli.sweep_cmds import register

    group = click.Group()
    register(group)
    return CliRunner().invoke(group, list(args))


# ------------------------------------------------------------------------------------------------ input


@pytest.mark.parametrize(("text", "expected"), [
    ("auto", "auto"), (" AUTO ", "auto"), ("1,2,4", [1, 2, 4]), ("8, 2,2,1", [1, 2, 8]), ([4, 1], [1, 4]),
])
def test_parse_batch_sizes(text: Any, expected: Any) -> None:
    assert parse_batch_sizes(text) == expected


@pytest.mark.parametrize("text", ["", " ", "1,,2", "0", "-1", "x", "1.5", "70000", [], [0], [True]])
def test_parse_batch_sizes_rejects_bad_lists(text: Any) -> None:
    with pytest.raises(InvalidInputError):
        parse_batch_sizes(text)


# ------------------------------------------------------------------------------------ knee on synthetic data


def _m(batch: int, throughput: float | None, *, p99: float = 1.0, status: str = "ok", reason: str | None = None,
       workload: str = "infer-throughput", power: float | None = None) -> Measurement:
    summary: dict[str, Any] = {}
    if status == "ok":
        summary = {"throughput_img_s": throughput, "latency_ms": {"p50": p99 / 2, "p99": p99},
                   "peak_memory_reserved_bytes": batch * 1_000_000, "telemetry": {"power_avg_w": power}}
    return Measurement(model="m", workload=workload, mode="fp32", batch_size=batch, device="cuda", status=status,
                       reason=reason, summary=summary)


def _result(points: list[Measurement], **sweep_facts: Any) -> BenchmarkResult:
    settings = {"sweep": sweep_facts} if sweep_facts else {}
    return BenchmarkResult(environment={}, settings=settings, measurements=tuple(points), tool={"name": "clsbench"})


SYNTHETIC = [
    _m(1, 100.0, p99=1.0), _m(2, 200.0, p99=1.5), _m(4, 359.9, p99=2.0), _m(8, 360.0, p99=3.0, power=300.0),
    _m(16, 400.0, p99=40.0), _m(32, 390.0, p99=80.0), _m(64, None, status="failed", reason="oom"),
    _m(128, None, status="failed", reason="oom"),
]


def test_knee_is_the_smallest_batch_reaching_the_fraction_of_the_best() -> None:
    analysis = analyze_sweep(_result(list(reversed(SYNTHETIC))))
    assert [p["batch_size"] for p in analysis["points"]] == [1, 2, 4, 8, 16, 32, 64, 128]
    assert analysis["best"] == {"batch_size": 16, "throughput_img_s": 400.0}
    # 0.9 x 400 = 360: batch 8 reaches it exactly; batch 4 (359.9) does not.
    assert analysis["knee"]["batch_size"] == 8
    assert analysis["knee"]["fraction_of_best"] == 0.9
    assert analysis["largest_fitting_batch"] == 32
    assert analysis["smallest_oom_batch"] == 64
    assert analysis["points"][3]["power_avg_w"] == 300.0
    assert analysis["points"][3]["peak_memory_bytes"] == 8_000_000
    # 0.5 x 400 = 200: batch 2 exactly.
    assert analyze_sweep(_result(SYNTHETIC), knee_fraction=0.5)["knee"]["batch_size"] == 2
    assert analyze_sweep(_result(SYNTHETIC), knee_fraction=1.0)["knee"]["batch_size"] == 16


def test_knee_fraction_comes_from_the_file_and_the_curve_marks_pareto_points() -> None:
    analysis = analyze_sweep(_result(SYNTHETIC, knee_fraction=0.5, model="m", workload="infer-throughput",
                                     mode="fp32", device="cuda"))
    assert analysis["knee"]["batch_size"] == 2
    curve = {c["batch_size"]: c for c in analysis["latency_throughput_curve"]}
    assert set(curve) == {1, 2, 4, 8, 16, 32}
    # Batch 32 gives fewer img/s than 16 at twice the p99: dominated. Every other point is a trade-off.
    assert [b for b, c in curve.items() if not c["pareto"]] == [32]
    assert curve[16]["latency_p99_ms"] == 40.0 and curve[16]["throughput_img_s"] == 400.0
    text = render_sweep(analysis)
    assert "knee: batch 2" in text and "largest batch that fits: 32 (batch 64 ran out of memory)" in text
    assert "latency-throughput curve" in text


def test_a_point_timed_too_briefly_for_a_p99_joins_the_curve_with_its_slowest_batch() -> None:
    short = _m(4, 300.0)
    short.summary["latency_ms"] = {"p50": 2.0, "p99": None, "max": 7.5, "withheld": {"p99": "needs >= 100"}}
    analysis = analyze_sweep(_result([_m(2, 200.0, p99=3.0), short]))
    curve = {c["batch_size"]: c for c in analysis["latency_throughput_curve"]}
    assert (curve[4]["latency_tail_ms"], curve[4]["latency_tail_is"]) == (7.5, "max")
    assert (curve[2]["latency_tail_ms"], curve[2]["latency_tail_is"]) == (3.0, "p99")
    assert curve[4]["latency_p99_ms"] is None  # the p99 itself stays withheld
    assert curve[4]["pareto"] and curve[2]["pareto"]  # more img/s at a higher tail: a trade-off, not dominated
    curve_text = render_sweep(analysis).split("latency-throughput curve")[1]
    assert any(line.split()[:3] == ["4", "max", "7.500"] for line in curve_text.splitlines())


def test_the_sweep_table_withholds_a_p99_too_few_batches_support_and_shows_the_slowest_under_max() -> None:
    short = _m(4, 300.0)
    short.summary["latency_ms"] = {"p50": 2.0, "p99": None, "max": 911.3, "withheld": {"p99": "needs >= 100"}}
    ok = _m(2, 200.0, p99=3.0)
    ok.summary["latency_ms"]["max"] = 3.5
    text = render_sweep(analyze_sweep(_result([ok, short])))
    table = text.split("\n\n")[1].splitlines()
    header = table[0].split()
    assert header[:6] == ["batch", "img/s", "%", "best", "p50", "ms"] and "max" in header
    row4 = next(line for line in table if line.split()[0] == "4").split()
    # batch, img/s, % best, p50, p99, max: the p99 cell is "-", the slowest batch sits under "max ms".
    assert row4[3:6] == ["2.000", "-", "911.3"]
    assert "911.3" not in "".join(line for line in text.splitlines() if line.startswith("latency-throughput"))
    assert "p99 -: batch 4 timed fewer than 100 batches in a repeat" in text
    assert "p99 -" not in render_sweep(analyze_sweep(_result([ok])))


def test_train_sweeps_have_no_latency_curve_and_failed_only_sweeps_have_no_knee() -> None:
    train = analyze_sweep(_result([_m(1, 10.0, workload="train"), _m(2, 15.0, workload="train")]))
    assert train["latency_throughput_curve"] is None and train["knee"]["batch_size"] == 2
    nothing = analyze_sweep(_result([_m(1, None, status="failed", reason="oom")]))
    assert nothing["knee"] is None and nothing["best"] is None and nothing["largest_fitting_batch"] is None
    assert "knee: none" in render_sweep(nothing)


def test_a_file_with_several_series_is_not_a_sweep() -> None:
    other = dataclasses.replace(_m(1, 5.0), mode="amp-bf16")
    with pytest.raises(InvalidInputError, match="not a sweep"):
        analyze_sweep(_result([_m(1, 10.0), other]))
    with pytest.raises(InvalidInputError):
        analyze_sweep(_result([_m(1, 10.0)]), knee_fraction=1.5)


# ------------------------------------------------------------------------------------------- auto growth


def test_auto_growth_stops_on_a_plateau_then_refines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     env: dict[str, Any]) -> None:
    costed = load_costed(tmp_path, monkeypatch)
    # 4 ms per call up to batch 4, then 1 ms per image: 250, 500, 1000, then 1000 img/s (no gain) at 8 and 16.
    costed.STATE["cost"] = lambda mode, batch: max(4_000_000, 1_000_000 * batch)
    path = tmp_path / "sweep.json"
    outcome = sweep(f"{costed.__name__}:costed", "infer-throughput", "fp32", "cpu", "auto", path, options=SHORT,
                    execution=Execution(isolation="inline", clock=costed.CostClock(), env=env))
    stored = result_io.load(path)
    facts = stored.settings["sweep"]
    # Two doublings without gain end the growth; then a midpoint between 4 (the last gain) and 8.
    assert facts["order"] == [1, 2, 4, 8, 16, 6]
    assert facts["growth_stopped_by"] == "plateau" and facts["auto"]["min_gain"] == AUTO_MIN_GAIN
    assert outcome.knee_batch == 4 and outcome.largest_fitting_batch == 16
    throughputs = {p["batch_size"]: p["throughput_img_s"] for p in outcome.points}
    assert throughputs[1] == pytest.approx(250.0) and throughputs[8] == pytest.approx(1000.0)
    # The file alone gives the same analysis, and its settings are an ordinary, resumable plan of every point.
    assert analyze_sweep(stored) == outcome.analysis
    plan = RunPlan.from_dict(stored.settings)
    assert sorted(c.batch_size for c in plan.cells) == [1, 2, 4, 6, 8, 16]


def test_one_flat_doubling_does_not_end_growth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              env: dict[str, Any]) -> None:
    costed = load_costed(tmp_path, monkeypatch)
    # 1000 img/s at batch 1 and 2 (a flat step, as a noisy launch-bound point can be), 2000 at 4, then flat.
    costs = {1: 1, 2: 2, 4: 2, 8: 4, 16: 8}
    costed.STATE["cost"] = lambda mode, batch: costs.get(batch, batch / 2) * 1_000_000
    outcome = sweep(f"{costed.__name__}:costed", "infer-throughput", "fp32", "cpu", "auto", None, options=SHORT,
                    execution=Execution(isolation="inline", clock=costed.CostClock(), env=env))
    assert outcome.result.settings["sweep"]["order"] == [1, 2, 4, 8, 16, 6]
    assert outcome.knee_batch == 4


def test_auto_growth_stops_at_out_of_memory_and_bisects_to_the_largest_fit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, Any]) -> None:
    costed = load_costed(tmp_path, monkeypatch, oom_above=20)
    outcome = sweep(f"{costed.__name__}:costed", "train", "fp32", "cpu", "auto", None, options=SHORT,
                    execution=Execution(isolation="inline", clock=costed.CostClock(), env=env))
    facts = outcome.result.settings["sweep"]
    # 1..16 keep gaining (1 ms + 0.1 ms per image); 32 runs out of memory; bisection: 24 (oom), then 20 (fits).
    assert facts["order"] == [1, 2, 4, 8, 16, 32, 24, 20]
    assert facts["growth_stopped_by"] == "oom"
    statuses = {p["batch_size"]: (p["status"], p["reason"]) for p in outcome.points}
    assert statuses[32] == ("failed", "oom") and statuses[24] == ("failed", "oom") and statuses[20] == ("ok", None)
    assert outcome.largest_fitting_batch == 20 and outcome.analysis["smallest_oom_batch"] == 24
    assert outcome.analysis["latency_throughput_curve"] is None  # train


def test_auto_growth_respects_max_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        env: dict[str, Any]) -> None:
    costed = load_costed(tmp_path, monkeypatch)
    outcome = sweep(f"{costed.__name__}:costed", "infer-latency", "fp32", "cpu", "auto", None, options=SHORT,
                    execution=Execution(isolation="inline", clock=costed.CostClock(), env=env), max_batch=5)
    assert outcome.result.settings["sweep"]["order"] == [1, 2, 4]
    assert outcome.analysis["growth_stopped_by"] == "max_batch"


def test_explicit_sizes_and_resume_of_an_interrupted_sweep(tmp_path: Path, env: dict[str, Any]) -> None:
    path = tmp_path / "sweep.json"
    outcome = sweep(TINY, "infer-throughput", "fp32", "cpu", "4,1,2,2", path, options=SHORT,
                    execution=Execution(isolation="inline", clock=FakeClock(), env=env), knee_fraction=0.5)
    assert [p["batch_size"] for p in outcome.points] == [1, 2, 4]
    assert outcome.result.settings["sweep"]["batch_sizes"] == [1, 2, 4]
    # Every iteration takes 1 ms on the fake clock: 1000 img/s per image of the batch; 0.5 x 4000 = 2000.
    assert outcome.knee_batch == 2
    # Lose the last point, as an interruption would, and let `clsbench run --resume` finish it.
    data = json.loads(path.read_text())
    data["measurements"] = data["measurements"][:2]
    path.write_text(json.dumps(data))
    resumed = api.resume(path, execution=Execution(env=env, isolation="inline", clock=FakeClock()))
    assert sorted(m.batch_size for m in resumed.measurements) == [1, 2, 4]
    assert analyze_sweep(result_io.load(path))["knee"]["batch_size"] == 2


# --------------------------------------------------------------------------------------------------- CLI


@pytest.mark.slow
def test_cli_sweep_in_worker_processes_survives_out_of_memory_and_show_reads_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    costed = load_costed(tmp_path, monkeypatch, oom_above=4)  # the workers import it with OOM above batch 4
    path = tmp_path / "sweep.json"
    # The fake clock travels to the workers inside each job: 1 ms per iteration, so img/s doubles with the batch.
    result = invoke_group("sweep", "--model", f"{costed.__name__}:costed", "--device", "cpu", "--repeats", "1",
                          "--warmup", "1", "--iterations", "2", "--min-time", "0", "--clock", "fake:1ms", "-q",
                          "-o", str(path))
    assert result.exit_code == 0, result.output  # out of memory is the sweep's answer, not a failure
    assert "largest batch that fits: 4 (batch 5 ran out of memory)" in result.stdout
    assert "automatic growth stopped: out of memory" in result.stdout
    stored = result_io.load(path)
    assert stored.settings["sweep"]["order"] == [1, 2, 4, 8, 6, 5]
    pids = {r["pid"] for m in stored.measurements if m.status == "ok" for r in m.repeats}
    assert len(pids) == 3  # one fresh worker per repeat
    shown = CliRunner().invoke(main, ["show", str(path)])
    assert shown.exit_code == 0, shown.output
    for batch in ("1", "2", "4", "5", "6", "8"):
        assert f" {batch}  " in shown.stdout
    assert "FAILED: oom" in shown.stdout


def test_cli_sweep_inline_prints_the_knee(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    result = invoke_group("sweep", "--model", TINY, "--device", "cpu", "--batch-size", "1,2,4", "--repeats", "1",
                          "--warmup", "1", "--iterations", "2", "--min-time", "0", "--isolation", "inline",
                          "--clock", "fake:1ms", "-q", "-o", str(path))
    assert result.exit_code == 0, result.output
    assert "knee: batch 4 (4,000 img/s, 100% of the best 4,000 img/s at batch 4" in result.stdout
    assert "latency-throughput curve" in result.stdout
    from clsbench.results import store

    assert len(store.history()) == 1  # indexed in the (private) history, as `run` does
    again = invoke_group("sweep", "--model", TINY, "--device", "cpu", "--batch-size", "1", "-o", str(path))
    assert again.exit_code == 3 and "already exists" in again.stderr


@pytest.mark.parametrize(("args", "words"), [
    (["--batch-size", ""], "empty"),
    (["--batch-size", "0,2"], "batch size must be >= 1"),
    (["--batch-size", "two"], "not a whole number"),
    (["--knee", "0"], "knee fraction"),
    (["--knee", "1.5"], "knee fraction"),
])
def test_cli_sweep_bad_input(args: list[str], words: str) -> None:
    result = invoke_group("sweep", "--model", TINY, "--device", "cpu", *args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and words in errors[0]
    assert "Traceback" not in result.output


def test_a_sweep_still_rising_at_its_largest_batch_says_so() -> None:
    rising = analyze_sweep(_result([_m(1, 10.0, workload="train"), _m(2, 15.0, workload="train")]))
    assert rising["still_rising"] == {"from_batch": 1, "to_batch": 2, "gain": 0.5}
    assert "note: throughput was still rising at the largest batch measured (+50% from batch 1 to 2)" in \
        render_sweep(rising)
    # A gain below AUTO_MIN_GAIN at the end, or a best before the end, is not "still rising".
    flat = analyze_sweep(_result([_m(1, 100.0, workload="train"), _m(2, 100.0 * (1 + AUTO_MIN_GAIN / 2),
                                                                      workload="train")]))
    assert flat["still_rising"] is None and "still rising" not in render_sweep(flat)
    assert analyze_sweep(_result(SYNTHETIC))["still_rising"] is None
