"""``clsbench soak``: the verdicts on synthetic series with known answers, the windowed engine on a CPU (inline and in
a fresh worker), Ctrl-C keeping the finished windows, the CLI, ``show``, ``compare`` and the report."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from clsbench.analysis import soak as analysis
from clsbench.cli import main
from clsbench.core.durations import parse_duration
from clsbench.core.options import Execution, MeasureOptions
from clsbench.errors import InvalidInputError
from clsbench.measure.clock import FakeClock
from clsbench.procedures.base import PROCEDURES, comparer, sections
from clsbench.procedures.soak import SoakSettings, compare_runs, soak
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult, Measurement
from clsbench.system.telemetry import FakeSource
from terminal import as_a_terminal_starts_it

TINY = "clsbench_testmodels:tiny"
ROOT = Path(__file__).resolve().parent.parent
SW_POWER_CAP = 0x4
HW_THERMAL_SLOWDOWN = 0x40
GPU_IDLE = 0x1
#: A fake clock of 100 ms a reading: every iteration of the CPU loop takes exactly 100 ms (ten a second).
CLOCK = (100_000_000,)


@pytest.fixture(scope="module")
def fast() -> Execution:
    """Inline, on the fake clock, with the environment read once."""
    from clsbench import api

    return Execution(isolation="inline", probe=False, clock=FakeClock(increments_ns=CLOCK), env=api.environment("cpu"))


# ----------------------------------------------------------------------------------------------- synthetic soaks


def soak_result(rates: list[float], *, window_s: float = 10.0, walls: list[float] | None = None,
                telemetry: dict[str, Any] | None = None, model: str = "resnet50", ended_early: bool = False,
                duration_s: float | None = None, env: dict[str, Any] | None = None) -> BenchmarkResult:
    """A stored soak of batch-1 windows at ``rates`` img/s, each ``window_s`` long unless ``walls`` says otherwise."""
    walls = walls or [window_s] * len(rates)
    iterations = [round(rate * wall) for rate, wall in zip(rates, walls, strict=True)]
    starts = [sum(walls[:i]) for i in range(len(walls))]
    repeat = {"status": "ok", "samples": {"windows": {"window_s": window_s, "start_s": starts, "wall_s": walls,
                                                      "iterations": iterations},
                                          "images": sum(iterations), "wall_s": sum(walls), "iteration_ms": []},
              "telemetry": telemetry, "validity": {"ended_early": ended_early}}
    m = Measurement(model, "train", "amp-bf16+cl", 1, "cuda:0", "ok", repeats=(repeat,),
                    summary={"throughput_img_s": sum(iterations) / sum(walls)})
    facts = {"format": 1, "model": model, "workload": "train", "mode": "amp-bf16+cl", "batch_size": 1,
             "device": "cuda:0", "duration_s": duration_s or sum(walls), "window_s": window_s}
    return BenchmarkResult(environment=env or {}, settings={"soak": facts}, measurements=(m,))


def record(seconds: int, **series: Any) -> dict[str, Any]:
    """A 1 Hz telemetry record over ``seconds``; each series a function of the sample's time."""
    t = [float(i) for i in range(seconds)]
    source = FakeSource({"t_s": t, **{name: [f(x) for x in t] for name, f in series.items()}}, interval_s=1.0)
    source.start()
    return source.stop()


# The reference soak: 30 windows of 10 s; the first slow (warm-up), then 100 img/s until 200 s, then 95 (a power cap
# from 150 s, which costs speed from 200 s); the temperature climbs 40 -> 70 C over 100 s and stays.
RATES = [70.0] + [100.0] * 19 + [95.0] * 10


def reference() -> dict[str, Any]:
    telemetry = record(300, power_w=lambda t: 700.0 if t >= 150 else 600.0,
                       sm_clock_mhz=lambda t: 1755 if t >= 150 else 1980, mem_clock_mhz=lambda t: 3201,
                       temperature_c=lambda t: min(70.0, 40.0 + 0.3 * t),
                       clock_event_reasons=lambda t: SW_POWER_CAP if t >= 150 else 0)
    telemetry["energy_counter_j"] = 195_000.0
    return analysis.analyze_soak(soak_result(RATES, telemetry=telemetry, duration_s=300.0,
                                             env={"gpu": {"power_limit_enforced_w": 700.0}}))


def test_reference_soak_verdicts() -> None:
    a = reference()
    assert a["status"] == "ok" and len(a["windows"]) == 30 and a["full_windows"] == 30
    assert a["warmup"] == {"windows": 1, "until_s": 10.0}
    assert a["drift_pct"] == pytest.approx(-5.0)
    assert (a["first_img_s"], a["last_img_s"]) == (100.0, 95.0)
    # Steady: the tail from window 19 (one 100 before the ten 95s; the rolling median smooths that one).
    steady = a["steady"]
    assert (steady["from_window"], steady["windows"], steady["from_s"], steady["to_s"]) == (19, 11, 190.0, 300.0)
    assert steady["throughput_img_s"] == pytest.approx((1000 + 10 * 950) / 110)
    throttling = a["throttling"]
    assert throttling["onset"] == {"t_s": 150.0, "reasons": ["sw_power_cap"]}
    assert throttling["throttled_share"] == pytest.approx(0.5)
    assert throttling["reasons"] == {"sw_power_cap": pytest.approx(0.5)}
    assert throttling["intervals"] == [{"start_s": 150.0, "end_s": 300.0, "reasons": ["sw_power_cap"]}]
    cost = a["cost"]
    assert (cost["throttled_windows"], cost["unthrottled_windows"]) == (15, 14)
    assert cost["unthrottled_img_s"] == pytest.approx(100.0)
    assert cost["throttled_img_s"] == pytest.approx((5 * 1000 + 10 * 950) / 150)
    assert cost["cost_pct"] == pytest.approx(100 * (1 - 96.6666667 / 100), rel=1e-6)
    assert cost["verdict"] == "costly" and cost["test"]["significant"]
    assert (cost["throttled_sm_clock_mhz"], cost["unthrottled_sm_clock_mhz"]) == (1755, 1980)
    temperature = a["temperature"]
    assert (temperature["start_c"], temperature["max_c"], temperature["plateau_c"]) == (40.0, 70.0, 70.0)
    assert temperature["reached_s"] == 94.0  # the first sample within 2 C of 70 (68.2 C), never leaving it after
    assert temperature["still_rising"] is False
    energy = a["energy"]
    assert energy["energy_method"] == "counter"
    assert energy["joules_per_image"] == pytest.approx(195_000.0 / (700 + 19 * 1000 + 10 * 950))
    assert energy["steady_joules_per_image"] == pytest.approx(700.0 * 109 / 10_500)  # 190..299 s at 700 W
    assert a["duration"]["shorter_than_mlperf"] is True and a["power_limit_w"] == 700.0
    assert any("shorter than MLPerf's 600 s" in note for note in a["notes"])


def test_reference_soak_text() -> None:
    text = analysis.render_soak(reference())
    assert text.startswith("soak: resnet50 train amp-bf16+cl bs1 on cuda:0\n")
    for expected in ("warm-up transient  1 window(s), until 10.0 s", "drift              -5.0% (last window 95.0",
                     "steady state       95.5 img/s from 190 s (11 window(s)",
                     "throttling         from 150 s (power cap); 50% of samples throttled (power cap 50%), 1 interval",
                     "throttling cost    yes: 3.3% slower when throttled", "temperature        40 -> 70 C",
                     "power              mean 650 W, peak 700 W, limit 700 W",
                     "clocks             SM median 1868 MHz (min 1755), memory 3201 MHz",
                     "note: 300 s is shorter than MLPerf's 600 s minimum run"):
        assert expected in text, expected
    # Thirty windows fit the listing (at most 24 are listed: every 2nd, first and last kept).
    assert "(one window in 2 of 30, the last too" in text
    assert "   30    290.0" in text


def test_ten_minute_soak_has_no_mlperf_note_and_no_steady_state_when_still_declining() -> None:
    rates = [100.0 - i for i in range(61)]  # 1% slower each window, to the end
    a = analysis.analyze_soak(soak_result(rates))
    assert a["duration"]["shorter_than_mlperf"] is False
    assert a["warmup"]["windows"] == 0 and a["steady"] is None
    assert a["drift_pct"] == pytest.approx(-60.0)
    assert not any("MLPerf" in note for note in a["notes"])
    assert any("no steady state" in note for note in a["notes"])
    assert "steady state       not reached" in analysis.render_soak(a)


def test_a_fast_start_is_drift_not_warm_up() -> None:
    a = analysis.analyze_soak(soak_result([110.0, 100.0, 100.0, 100.0, 100.0, 100.0]))
    assert a["warmup"]["windows"] == 0
    assert a["drift_pct"] == pytest.approx(100 / 110 * 100 - 100)
    assert a["steady"]["from_window"] == 1 and a["steady"]["throughput_img_s"] == pytest.approx(100.0)


def test_one_odd_window_does_not_break_the_steady_state() -> None:
    assert analysis.steady_start([100, 100, 100, 130, 100, 100, 100]) == 0
    assert analysis.warmup_windows([50.0, 80.0, 100.0, 100.0, 100.0]) == 2
    assert analysis.warmup_windows([100.0]) == 0
    assert analysis.rolling_medians([1.0, 5.0, 2.0, 3.0]) == [3.0, 2.0, 3.0, 2.5]
    assert analysis.rolling_medians([1.0, 2.0]) == [1.0, 2.0]  # two windows are judged each on its own
    assert analysis.steady_start([100.0, 60.0]) is None
    assert analysis.steady_start([100.0]) == 0


def test_a_partial_last_window_is_kept_but_not_judged() -> None:
    a = analysis.analyze_soak(soak_result([100.0, 100.0, 100.0, 50.0], walls=[10.0, 10.0, 10.0, 2.0],
                                          ended_early=True))
    assert [w["full"] for w in a["windows"]] == [True, True, True, False]
    assert a["drift_pct"] == pytest.approx(0.0) and a["last_img_s"] == 100.0
    assert a["images"] == 3100 and a["duration"]["timed_s"] == 32.0 and a["duration"]["ended_early"]
    assert any(note.startswith("ended early (Ctrl-C) after 32.0 s") for note in a["notes"])
    assert "(partial)" in analysis.render_soak(a)


def test_throttling_in_every_window_and_in_none() -> None:
    always = record(60, clock_event_reasons=lambda t: SW_POWER_CAP | GPU_IDLE, sm_clock_mhz=lambda t: 1600)
    a = analysis.analyze_soak(soak_result([100.0] * 6, telemetry=always))
    assert a["cost"]["verdict"] == "always" and a["cost"]["throttled_sm_clock_mhz"] == 1600
    assert "no unthrottled window to compare with" in analysis.render_soak(a)
    idle_only = record(60, clock_event_reasons=lambda t: GPU_IDLE)  # idle is not throttling
    b = analysis.analyze_soak(soak_result([100.0] * 6, telemetry=idle_only))
    assert b["throttling"]["onset"] is None and b["throttling"]["intervals"] == []
    assert b["cost"]["verdict"] == "none"


def test_throttling_that_costs_nothing_is_said_so() -> None:
    flicker = record(60, clock_event_reasons=lambda t: HW_THERMAL_SLOWDOWN if 20 <= t < 40 else 0)
    a = analysis.analyze_soak(soak_result([100.0, 101.0, 99.0, 100.0, 101.0, 99.0], telemetry=flicker))
    assert a["throttling"]["onset"] == {"t_s": 20.0, "reasons": ["hw_thermal_slowdown"]}
    assert a["cost"]["verdict"] == "no_cost" and not a["cost"]["test"]["significant"]


def test_throttle_intervals_split_and_end_after_the_last_sample() -> None:
    samples = {"t_s": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
               "clock_event_reasons": [0, SW_POWER_CAP, SW_POWER_CAP | HW_THERMAL_SLOWDOWN, 0, None, SW_POWER_CAP]}
    assert analysis.throttle_intervals(samples, 1.0) == [
        {"start_s": 1.0, "end_s": 3.0, "reasons": ["hw_thermal_slowdown", "sw_power_cap"]},
        {"start_s": 5.0, "end_s": 6.0, "reasons": ["sw_power_cap"]}]


def test_a_temperature_still_rising_is_noted() -> None:
    a = analysis.analyze_soak(soak_result([100.0] * 6, telemetry=record(60, temperature_c=lambda t: 40 + 0.5 * t)))
    assert a["temperature"]["still_rising"] is True
    assert any("still rising" in note for note in a["notes"])


def test_window_telemetry_figures_and_without_telemetry() -> None:
    figures = analysis.window_telemetry({"t_s": [0, 1, 2], "power_w": [100, 200, None], "sm_clock_mhz": [1, 3, 2],
                                         "temperature_c": [50, 52, 51], "fan_pct": [30, 40, 50],
                                         "clock_event_reasons": [0, SW_POWER_CAP, GPU_IDLE]})
    assert figures["power_w"] == 150 and figures["sm_clock_mhz"] == 2 and figures["temperature_c"] == 52
    assert figures["fan_pct"] == 40 and figures["throttled_share"] == pytest.approx(1 / 3)
    assert figures["reasons"] == ["sw_power_cap"] and figures["mem_clock_mhz"] is None
    empty = analysis.window_telemetry(None)
    assert empty["throttled_share"] is None and empty["power_w"] is None
    a = analysis.analyze_soak(soak_result([100.0] * 3))
    assert a["throttling"] is None and a["cost"] is None and a["temperature"] is None
    assert any(note.startswith("no telemetry") for note in a["notes"])


# ------------------------------------------------------------------------------------------------ settings


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90.0), ("10m", 600.0), ("1h", 3600.0), ("1h30m", 5400.0),
                                               ("600", 600.0), ("2.5m", 150.0), (" 1M ", 60.0), (45, 45.0)])
def test_parse_duration(text: Any, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10x", "m", "-5", "0", "1h-2m", "5 minutes"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_duration(text)


def test_settings_refuse_a_duration_shorter_than_a_window() -> None:
    with pytest.raises(InvalidInputError, match="a soak of 5 s is shorter than one 10 s window"):
        SoakSettings(model=TINY, duration_s=5, window_s=10).validate()
    with pytest.raises(InvalidInputError, match="longer than one"):
        SoakSettings(model=TINY, duration_s=5, window_s=1, sample_interval_s=2).validate()
    assert SoakSettings(model=TINY, duration_s=5, window_s=0.5).interval_s == 0.5
    assert SoakSettings(model=TINY).interval_s == 1.0


# ------------------------------------------------------------------------------------------- the engine, inline


def test_inline_soak_end_to_end(tmp_path: Path, fast: Execution) -> None:
    events: list[Any] = []
    out = tmp_path / "soak.json"
    outcome = soak(SoakSettings(model=TINY, device="cpu", duration_s=3, window_s=1), out,
                   options=MeasureOptions(warmup=2), execution=dataclasses.replace(fast, progress=events.append))
    stored = result_io.load(out)
    assert stored.settings["soak"]["duration_s"] == 3 and stored.settings["window_s"] == 1
    assert stored.settings["telemetry_interval_s"] == 1.0 and stored.settings["repeats"] == 1
    assert stored.settings["stop_rules"]["train"]["min_seconds"] == 3
    windows = stored.measurements[0].repeats[0]["samples"]["windows"]
    assert len(windows["wall_s"]) == 3 and all(w >= 0.99 for w in windows["wall_s"])
    assert windows["start_s"] == sorted(windows["start_s"]) and windows["start_s"][0] <= 0.1
    assert sum(windows["iterations"]) == stored.measurements[0].repeats[0]["validity"]["timed_iterations"]
    assert [e.window["index"] for e in events if e.kind == "window"] == [0, 1, 2]
    assert outcome.analysis["status"] == "ok" and not outcome.ended_early
    # On the fake clock every iteration takes 100 ms: ten per window, a flat soak of 80 img/s at batch 8.
    assert windows["iterations"] == [10, 10, 10] and windows["wall_s"] == [1.0, 1.0, 1.0]
    assert outcome.analysis["drift_pct"] == 0.0 and outcome.analysis["steady"]["throughput_img_s"] == 80.0
    assert "soak: clsbench_testmodels:tiny train fp32 bs8 on cpu" in sections(stored)


def test_an_iteration_longer_than_the_window_makes_windows_of_one_iteration(fast: Execution) -> None:
    outcome = soak(SoakSettings(model=TINY, device="cpu", duration_s=1, window_s=0.05), execution=fast)
    windows = outcome.result.measurements[0].repeats[0]["samples"]["windows"]
    assert windows["iterations"] == [1] * 10 and windows["wall_s"] == [0.1] * 10


def test_inline_soak_of_infer_latency_groups_requests_into_windows(fast: Execution) -> None:
    outcome = soak(SoakSettings(model=TINY, workload="infer-latency", device="cpu", duration_s=2, window_s=0.5),
                   execution=fast)
    windows = outcome.result.measurements[0].repeats[0]["samples"]["windows"]
    assert len(windows["wall_s"]) >= 4 and sum(windows["iterations"]) == len(
        outcome.result.measurements[0].repeats[0]["samples"]["wall_ms"])


def test_ctrl_c_inside_the_soak_keeps_the_finished_windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           fast: Execution) -> None:
    monkeypatch.setenv("CLSBENCH_TEST_INTERRUPT_AFTER", "20")  # first call, 2 warm-up, then 5 iterations a window
    outcome = soak(SoakSettings(model="clsbench_testmodels:interrupting_model", device="cpu", duration_s=60,
                                window_s=0.5), tmp_path / "s.json", options=MeasureOptions(warmup=2), execution=fast)
    assert outcome.ended_early
    repeat = result_io.load(tmp_path / "s.json").measurements[0].repeats[0]
    assert repeat["validity"]["ended_early"] is True and len(repeat["samples"]["windows"]["wall_s"]) >= 2
    assert repeat["validity"]["timed_iterations"] == sum(repeat["samples"]["windows"]["iterations"])
    assert any(note.startswith("ended early") for note in outcome.analysis["notes"])


def test_ctrl_c_before_the_first_window_keeps_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     fast: Execution) -> None:
    from clsbench.engine.runner import RunInterrupted

    monkeypatch.setenv("CLSBENCH_TEST_INTERRUPT_AFTER", "2")  # during warm-up
    with pytest.raises(RunInterrupted):
        soak(SoakSettings(model="clsbench_testmodels:interrupting_model", device="cpu", duration_s=60, window_s=1),
             tmp_path / "s.json", execution=fast)
    assert result_io.load(tmp_path / "s.json").measurements == ()


# ------------------------------------------------------------------------------------------------- CLI


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def test_cli_soak_on_a_cpu_in_a_fresh_worker(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    result = invoke("soak", "--device", "cpu", "--model", TINY, "--duration", "3s", "--window", "1s",
                    "--clock", "fake:100ms", "--no-probe", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "[window 1, 1/3 s]  80.0 img/s" in result.output and "[window 3, " in result.output
    assert "soak: clsbench_testmodels:tiny train fp32 bs8 on cpu" in result.output
    assert "note: no telemetry: device is cpu" in result.output
    stored = result_io.load(out)
    assert len(stored.measurements[0].repeats[0]["samples"]["windows"]["wall_s"]) == 3
    shown = invoke("show", str(out))
    assert shown.exit_code == 0 and "drift" in shown.output and "window  start s" in shown.output


def test_cli_refuses_a_duration_shorter_than_a_window(tmp_path: Path) -> None:
    result = invoke("soak", "--device", "cpu", "--model", TINY, "--duration", "5s", "--window", "10s",
                    "-o", str(tmp_path / "x.json"))
    assert result.exit_code == 2
    assert result.output.splitlines()[0] == "error: a soak of 5 s is shorter than one 10 s window"
    assert not (tmp_path / "x.json").exists()
    bad = invoke("soak", "--device", "cpu", "--model", TINY, "--duration", "ten minutes")
    assert bad.exit_code == 2 and "is not a duration" in bad.output


@pytest.mark.slow
def test_ctrl_c_in_a_terminal_ends_a_worker_soak_after_its_window(tmp_path: Path) -> None:
    """SIGINT to the whole process group, as a terminal sends it: the worker (which ignores SIGINT) is asked to stop
    after its window, the verdicts are printed, every finished window is saved, and the exit code is 130."""
    out = tmp_path / "soak.json"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT / 'tests'}"}
    process = subprocess.Popen([sys.executable, "-m", "clsbench", "soak", "--device", "cpu", "--model", TINY,
                                "--duration", "1h", "--window", "0.5s", "--no-probe", "-o", str(out)],
                               env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, preexec_fn=as_a_terminal_starts_it)
    try:
        seen = ""
        deadline = time.monotonic() + 120
        while "[window 2," not in seen and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            seen += line
        assert "[window 2," in seen, seen
        os.killpg(process.pid, signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr
    assert "interrupted: the soak ended early" in stderr and "ended early (Ctrl-C)" in stdout
    repeat = json.loads(out.read_text())["measurements"][0]["repeats"][0]
    assert repeat["validity"]["ended_early"] is True and len(repeat["samples"]["windows"]["wall_s"]) >= 2


# ---------------------------------------------------------------------------------------- show, compare, report


def test_show_and_compare_of_two_soaks(tmp_path: Path) -> None:
    a = soak_result([100.0, 101.0, 99.0, 100.0, 100.0, 101.0])
    b = soak_result([95.0, 96.0, 94.0, 95.0, 95.0, 96.0])
    assert PROCEDURES.get("soak").key == "soak" and comparer([a, b]) is compare_runs
    comparison = compare_runs([a, b], ["a.json", "b.json"], 0.05)
    assert "B is 5.0% slower than A (steady state; " in comparison.text
    assert comparison.slowdowns and comparison.slowdowns[0][1] == pytest.approx(5.0, abs=0.05)
    throughput = comparison.rows[0]
    assert throughput["figure"] == "throughput img/s" and throughput["change"] == pytest.approx(-5.0, abs=0.05)
    same = compare_runs([a, a], ["a", "a2"], 0.05)
    assert not same.slowdowns and "B is as fast as A (steady state; " in same.text
    other = soak_result([100.0] * 3, model="resnet18")
    with pytest.raises(InvalidInputError, match="not compared"):
        compare_runs([a, other], ["a", "o"], 0.05)
    ordinary = BenchmarkResult(environment={}, settings={"cells": []})
    with pytest.raises(InvalidInputError, match="only some of these files are soak results"):
        comparer([a, ordinary])
    for name, result in (("a.json", a), ("b.json", b)):
        result_io.save(result, tmp_path / name)
    shown = invoke("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--fail-if-slower", "2%")
    assert shown.exit_code == 5 and "B is 5.0% slower" in shown.output


def test_report_draws_the_soak(tmp_path: Path) -> None:
    from clsbench.report.html import render_report

    telemetry = record(300, power_w=lambda t: 700.0 if t >= 150 else 600.0, sm_clock_mhz=lambda t: 1980,
                       mem_clock_mhz=lambda t: 3201, temperature_c=lambda t: 60.0, fan_pct=lambda t: 45.0,
                       clock_event_reasons=lambda t: SW_POWER_CAP if 150 <= t < 200 else 0)
    page = render_report([soak_result(RATES, telemetry=telemetry)], ["soak.json"])
    assert 'id="soaks"' in page and "images per second" in page and "temperature (C)" in page
    assert "fan (%)" in page and "red: throttled (power or heat)" in page
    assert "drift              -5.0%" in page


# ------------------------------------------------------------------------------------------ telemetry sources


def test_fake_and_none_sources_hand_out_recent_samples() -> None:
    from clsbench.system.telemetry import NoneSource

    fake = FakeSource({"power_w": [1.0, 2.0], "fan_pct": [10, 20]})
    assert fake.recent() == {}  # not started
    fake.start()
    assert fake.recent()["fan_pct"] == [10, 20] and fake.recent() == {}
    assert fake.stop()["samples"]["fan_pct"] == [10, 20]
    assert "fan_pct" not in FakeSource({"power_w": [1.0]}).stop()["samples"]
    assert NoneSource("device is cpu").recent() == {}


# ------------------------------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@pytest.mark.parametrize("workload", ["train", "infer-latency"])
def test_gpu_soak_windows_and_telemetry_share_one_time_axis(tmp_path: Path, workload: str) -> None:
    """A short soak on the GPU in a fresh worker: windows about one window long, NVML samples at the soak's interval
    covering the same span, and verdicts with power, clocks and temperature."""
    outcome = soak(SoakSettings(model="resnet18", workload=workload, mode="amp-bf16+cl", device="cuda",
                                batch_size=64 if workload == "train" else 1, duration_s=6, window_s=2,
                                sample_interval_s=0.5), tmp_path / "soak.json", execution=Execution(probe=False))
    m = outcome.result.measurements[0]
    assert m.status == "ok", m.detail
    repeat = m.repeats[0]
    windows = repeat["samples"]["windows"]
    assert len(windows["wall_s"]) >= 3 and all(1.5 <= w <= 3.0 for w in windows["wall_s"][:-1])
    telemetry = repeat["telemetry"]
    assert telemetry["source"] == "nvml" and telemetry["interval_s"] == 0.5
    t = telemetry["samples"]["t_s"]
    end = windows["start_s"][-1] + windows["wall_s"][-1]
    assert t[0] < 0.5 and abs(t[-1] - end) < 1.5  # one time axis: the samples span the windows
    a = outcome.analysis
    assert a["energy"]["power_avg_w"] and a["energy"]["sm_clock_median_mhz"] and a["temperature"]["max_c"]
    assert a["throttling"] is not None and all(w["telemetry"]["samples_n"] >= 2 for w in a["windows"][:-1])
