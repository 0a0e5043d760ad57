"""Issue 38's edges of the figures: every printed cell is what its heading says, an unfinished serve search reads as a
bound, a run that measured nothing exits 7, Ctrl-C prints what finished and how to resume, and bad arguments are
refused before the plan is announced.

Serve results are hand-written step records (no LoadGen, no model); runs use the tiny test models in process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clsbench.results.schema import BenchmarkResult, Measurement
from clsbench.serving import records
from clsbench.serving.analysis import analyze_serve, compare_serve, render_serve, render_serve_compare, scenario_summary
from clsbench.serving.search import search_max_qps

MS = 1_000_000
SETTING = {"max_batch": 8, "max_delay_ms": 2.0, "instances": 1, "buckets": [8], "cuda_graphs": False}
SERVE_SETTINGS = {"model": "resnet18", "device": "cpu", "latency_bound_ms": 200.0, "latency_percentile": 0.99,
                  "min_duration_s": 2.0}


def _serve_step(index: int, target: float | None, valid: bool, *, queries: int = 1000, scenario: str = "server",
                role: str = "bracket", p99: float = 150.0) -> dict[str, Any]:
    """One LoadGen run's record, as ``serve`` stores it."""
    return {"index": index, "mode": "fp32", "scenario": scenario, "role": role, "setting": dict(SETTING),
            "params": {"scenario": "Server", "target_qps": target} if target else {"scenario": "Offline"},
            "loadgen": {"validity": "VALID" if valid else "INVALID", "perf_constraints_met": valid,
                        "latency_ns": {"p50": int(p99 / 3 * MS), "p90": int(p99 / 2 * MS), "p99": int(p99 * MS),
                                       "p99.9": int(p99 * 1.1 * MS), "max": int(p99 * 1.5 * MS)},
                        "completed_qps": target, "scheduled_qps": target, "query_count": queries,
                        "samples_per_second": None if target else 900.0},
            "server": {}, "error": None, "log_dir": f"serve.loadgen/{index:03d}", "wall_s": 2.0}


def _serve_result(steps: dict[str, list[dict[str, Any]]], searches: list[dict[str, Any]] | None = None,
                  store_converged: bool = True) -> BenchmarkResult:
    if not store_converged:  # a file written before the search stored whether it converged
        searches = [{**s, "search": {k: v for k, v in s["search"].items() if k != "converged"}}
                    for s in searches or []]
    measurements = tuple(
        Measurement(model="resnet18", workload=f"serve-{scenario}", mode="fp32", batch_size=8, device="cpu",
                    status="ok", repeats=tuple(group),
                    summary=scenario_summary(scenario, group, SERVE_SETTINGS, searches=searches, line="fp32"))
        for scenario, group in steps.items())
    facts = {"format": 1, "settings": SERVE_SETTINGS, "log_dir": "serve.loadgen", "searches": searches or []}
    return BenchmarkResult(environment={}, settings={"serve": facts}, measurements=measurements)


def _searched(capacity: float, start: float, max_steps: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the real search against a server of known capacity; its runs as step records, and its outcome."""
    steps: list[dict[str, Any]] = []

    def run_step(target: float, role: str) -> dict[str, Any]:
        steps.append(_serve_step(len(steps) + 1, target, target <= capacity, role=role))
        return steps[-1]

    outcome = search_max_qps(run_step, records.is_valid, start_qps=start, max_steps=max_steps)
    return steps, outcome


# ------------------------------------------------------------------------------- item 2: serve's percentiles


def test_serve_tables_withhold_percentiles_a_short_run_cannot_support_and_show_its_max() -> None:
    short = _serve_step(1, 100.0, True, queries=40, p99=150.0)
    text = render_serve(analyze_serve(_serve_result({"server": [short]})))
    answer, runs = text.split("LoadGen runs (time split")
    header = next(line for line in runs.splitlines() if line.strip().startswith("#")).split()
    row = next(line for line in runs.splitlines() if line.strip().startswith("1 ")).split()
    cells = dict(zip(header[4:], row[6:], strict=False))  # the setting's label is three words
    assert header[6:11] == ["p50", "p90", "p99", "p99.9", "max"]
    # 40 samples support a p90 (needs 10), not a p99 (100) or a p99.9 (1,000): those read '-'; the slowest is max.
    assert (cells["p90"], cells["p99"], cells["p99.9"], cells["max"]) == ("75.00", "-", "-", "225.0")
    assert "p90/p99/p99.9 -: 1 LoadGen run(s) covered too few samples" in text and "the fewest: 40" in text
    # The answer's latencies say '-' too.
    assert "p99 -  p99.9 -" in answer
    summary = analyze_serve(_serve_result({"server": [short]}))
    assert summary["steps"][0]["p99_ms"] is None and summary["steps"][0]["max_ms"] == 225.0
    long = render_serve(analyze_serve(_serve_result({"server": [_serve_step(1, 100.0, True, queries=1000)]})))
    assert "covered too few samples" not in long and "150.0" in long


# ------------------------------------------------------------------------ item 3: an unfinished serve search


def test_a_search_stopped_by_its_step_limit_did_not_converge_and_says_its_bracket() -> None:
    steps, outcome = _searched(900.0, 500.0, max_steps=3)  # 500 VALID, 1000 INVALID, 750 VALID: 750-1000
    assert outcome["converged"] is False and outcome["stopped_by"] == "max_steps"
    search = {"mode": "fp32", "scenario": "server", "setting": dict(SETTING), "search": outcome}
    result = _serve_result({"server": steps}, [search])
    measurement = result.measurements[0]
    assert measurement.summary["serve"]["converged"] is False
    assert measurement.summary["serve"]["bound"]["hi_qps"] == 1000.0
    text = render_serve(analyze_serve(result))
    assert ">= 750 qps; search stopped after 3 steps, bracket 750-1,000 (33% wide, resolution 2%)" in text
    assert "server QPS (p99 <= 200 ms): 750 qps" not in text
    # A file written before `converged` was stored reads the same, from `stopped_by`.
    assert text == render_serve(analyze_serve(_serve_result({"server": steps}, [search], store_converged=False)))


def test_a_converged_search_reads_as_an_answer() -> None:
    steps, outcome = _searched(900.0, 500.0, max_steps=30)
    assert outcome["converged"] is True
    result = _serve_result({"server": steps}, [{"mode": "fp32", "scenario": "server", "setting": dict(SETTING),
                                                "search": outcome}])
    text = render_serve(analyze_serve(result))
    assert f"server QPS (p99 <= 200 ms): {outcome['best_qps']:,.0f} qps" in text and "qps;" not in text
    assert result.measurements[0].summary["serve"]["converged"] is True


def test_compare_marks_an_answer_that_is_only_a_bound() -> None:
    done, done_outcome = _searched(900.0, 500.0, max_steps=30)
    short, short_outcome = _searched(900.0, 500.0, max_steps=3)
    a = _serve_result({"server": done}, [{"mode": "fp32", "scenario": "server", "setting": dict(SETTING),
                                          "search": done_outcome}])
    b = _serve_result({"server": short}, [{"mode": "fp32", "scenario": "server", "setting": dict(SETTING),
                                           "search": short_outcome}])
    comparison = compare_serve(a, b)
    assert comparison["rows"][0]["a_bound"] is None and comparison["rows"][0]["b_bound"]["lo_qps"] == 750.0
    text = render_serve_compare(comparison)
    assert "-> >= 750 qps" in text
    assert "this run's answer is a lower bound, not an answer: >= 750 qps; search stopped after 3 steps" in text
    assert "baseline's answer is a lower bound" not in text


# ------------------------------------------------------------------- items 4, 13, 14: run's lifecycle (CLI)

TINY = "clsbench_testmodels:tiny"
#: An inline run on the fake clock: 2 repeats of 2 timed iterations, no minimum time.
QUICK = ["--device", "cpu", "--isolation", "inline", "--clock", "fake:1ms", "--repeats", "2", "--iterations", "2",
         "--warmup", "1", "--min-time", "0"]


def _invoke(tmp_path: Path, *args: str) -> Any:
    from click.testing import CliRunner

    from clsbench.cli import main

    return CliRunner().invoke(main, list(args), env={"CLSBENCH_DB": str(tmp_path / "index.sqlite3")})


def test_a_run_that_measured_nothing_exits_7_with_the_skip_reasons_and_keeps_its_file(tmp_path: Path) -> None:
    from clsbench.errors import EXIT_NOTHING_MEASURED

    out = tmp_path / "skipped.json"
    result = _invoke(tmp_path, "run", "--model", TINY, "--workload", "infer-latency", "--mode", "fp32+cudagraph",
                     *QUICK, "-o", str(out))
    assert result.exit_code == EXIT_NOTHING_MEASURED == 7, result.output
    assert "error: nothing measured: every measurement was skipped (unsupported_mode: CUDA graphs need a CUDA " \
           "device" in result.stderr
    assert out.exists()
    again = _invoke(tmp_path, "run", "--resume", str(out))  # nothing left to resume, and still nothing measured
    assert again.exit_code == 7, again.output
    assert "nothing to resume" in again.stderr and "error: nothing measured" in again.stderr


def test_a_sweep_whose_every_size_was_skipped_exits_7(tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    result = _invoke(tmp_path, "sweep", "--model", TINY, "--mode", "fp32+cudagraph", "--batch-size", "1,2", *QUICK,
                     "-o", str(out))
    assert result.exit_code == 7, result.output
    assert "nothing measured: every batch size was skipped" in result.stderr and out.exists()


def test_one_measurement_that_ran_is_not_nothing_measured() -> None:
    from clsbench.cli.common import exit_if_nothing_measured

    def m(status: str) -> Measurement:
        return Measurement(model="m", workload="train", mode="fp32", batch_size=1, device="cpu", status=status,
                           reason=None if status == "ok" else "unsupported_mode", detail="why")

    exit_if_nothing_measured("f.json", [m("skipped"), m("ok")])  # returns: something was measured
    exit_if_nothing_measured("f.json", [m("failed")])  # a failure is exit 4's business, not 7's
    for measurements in ([m("skipped")], []):
        with pytest.raises(SystemExit) as info:
            exit_if_nothing_measured("f.json", measurements)
        assert info.value.code == 7


@pytest.mark.parametrize("command", [
    ("run", "--model", TINY, "--workload", "infer-latency"),
    ("sweep", "--model", TINY, "--batch-size", "1,2"),
])
def test_an_existing_output_is_refused_before_the_plan_is_announced(tmp_path: Path, command: tuple[str, ...]) -> None:
    out = tmp_path / "taken.json"
    out.write_text("{}")
    result = _invoke(tmp_path, *command, *QUICK, "-o", str(out))
    assert result.exit_code == 3
    assert f"error: {out} already exists" in result.stderr
    assert "clsbench 0.1.0:" not in result.output and "results ->" not in result.output
    assert out.read_text() == "{}"


@pytest.mark.parametrize(("command", "error"), [
    (("serve", "--model", TINY, "--scenario", "nosuch"), "error: unknown scenario 'nosuch'"),
    (("sweep", "--model", "resnet1", "--batch-size", "1"), "error: unknown model 'resnet1'"),
    (("soak", "--model", "resnet1", "--duration", "10s"), "error: unknown model 'resnet1'"),
])
def test_an_unknown_name_is_refused_before_the_plan_is_announced(tmp_path: Path, command: tuple[str, ...],
                                                                  error: str) -> None:
    result = _invoke(tmp_path, *command, "--device", "cpu", "-o", str(tmp_path / "x.json"))
    assert result.exit_code == 2 and error in result.stderr
    assert "results ->" not in result.output


def test_ctrl_c_prints_what_finished_what_was_lost_and_the_resume_command(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from clsbench.engine import runner

    calls = [0]
    real = runner.InlineExecutor.run

    def interrupt_third(self: Any, job: Any, next_job: Any = None) -> dict[str, Any]:
        calls[0] += 1
        if calls[0] == 3:  # by cell: infer-latency's 2 repeats are done; infer-throughput's first is in flight
            raise KeyboardInterrupt
        return real(self, job, next_job)

    monkeypatch.setattr(runner.InlineExecutor, "run", interrupt_third)
    out = tmp_path / "cut.json"
    result = _invoke(tmp_path, "run", "--model", TINY, "--workload", "infer-latency,infer-throughput,train",
                     "--order", "cell", *QUICK, "-o", str(out))
    assert result.exit_code == 130, result.output
    # What finished: the results table on stdout.
    assert "infer-latency" in result.stdout and "1 measurement" in result.stdout
    states = {line.split()[1]: line for line in result.stderr.splitlines() if line.startswith(f"  {TINY}")}
    assert "2/2" in states["infer-latency"] and "finished" in states["infer-latency"]
    assert "0/2" in states["infer-throughput"] and "in flight: lost" in states["infer-throughput"]
    assert "0/2" in states["train"] and "not started" in states["train"]
    assert (f"error: interrupted: 1 measurement(s) saved; the repeat in flight was lost; 1 not started; finish it "
            f"with: clsbench run --resume {out}") in result.stderr
