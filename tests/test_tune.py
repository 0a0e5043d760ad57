"""``clsbench tune``: the fastest allowed candidate wins, limits exclude candidates, conflicting limits name the
closest candidate, pruning, the correctness guard (in a fresh process, and with a deliberately broken tolerance),
the command that reproduces the winner, and bad input.

The searches run inline with the cost clock of test_sweep.py: the test model's forward advances the clock by a
cost chosen per mode and batch, so the ranking, and every decision of the search, is exact.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from clsbench.cli import main
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.plan import RunPlan
from clsbench.errors import InvalidInputError
from clsbench.procedures.tune import (
    OUTPUT_RTOL,
    NoConfigurationError,
    analyze_tune,
    judge,
    output_errors,
    output_errors_in_subprocess,
    render_tune,
)
from clsbench.results import io as result_io
from test_sweep import per_image_cost
from test_tune_budget import tune_with

TINY = "clsbench_testmodels:tiny"
SHORT = MeasureOptions(repeats=1, warmup=1, iterations=2, min_time=0.0)
MS = 1_000_000

#: Per-image cost in ms by mode, plus 0.5 ms per call: fp32+cl is the fastest, amp-bf16 next, fp32 last.
PER_IMAGE_MS = {"fp32": 4.0, "amp-bf16": 2.0, "fp32+cl": 1.0, "amp-bf16+cl": 1.1}


def run_tune(costed: Any, env: dict[str, Any], **kwargs: Any) -> Any:
    # No backend phase: these searches are about the eager and compile phases (test_backend_wiring.py has it).
    options = {"workload": "infer-throughput", "modes": ["fp32", "amp-bf16", "fp32+cl"], "batch_sizes": [2, 4],
               "compile_variants": False, "options": SHORT, "backends": (), "budget": "1h", **kwargs}
    workload = options.pop("workload")
    return tune_with(f"{costed.__name__}:costed", workload, "cpu",
                     execution=Execution(isolation="inline", clock=costed.CostClock(), env=env),
                     **options)


def verdicts(outcome: Any) -> dict[tuple[str, int], str]:
    return {(c["mode"], c["batch_size"]): c["verdict"] for c in outcome.candidates}


def test_tune_picks_the_fastest_candidate_and_says_how_to_reproduce_it(costed: Any, env: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    path = tmp_path / "tune.json"
    outcome = run_tune(costed, env, output=path)
    winner = outcome.winner
    assert (winner["mode"], winner["batch_size"]) == ("fp32+cl", 4)
    # 4 images per 0.5 + 4 x 1 ms = 888.9 img/s; fp32 ran at batch 2 only (0.5 + 8 ms: 235.3 img/s, a quarter of the
    # best there, below the screen margin, so not grown).
    assert winner["throughput_img_s"] == pytest.approx(4000 / 4.5)
    assert winner["vs_fp32"] == pytest.approx((4000 / 4.5) / (2000 / 8.5))
    assert winner["correctness"]["ok"] and winner["correctness"]["error"] <= OUTPUT_RTOL["fp32"]
    ranked = [(c["mode"], c["batch_size"]) for c in outcome.candidates]
    assert ranked[:3] == [("fp32+cl", 4), ("fp32+cl", 2), ("amp-bf16", 2)]
    assert outcome.search_s > 0
    assert outcome.command == (f"clsbench run --model {costed.__name__}:costed --workload infer-throughput --mode "
                               "fp32+cl --batch-size 4 --device cpu --repeats 1 --warmup 1 --iterations 2 "
                               "--min-time 0")
    # Everything comes back from the file alone.
    stored = result_io.load(path)
    again = analyze_tune(stored)
    assert again["winner"]["mode"] == "fp32+cl" and again["command"] == outcome.command
    assert stored.settings["tune"]["correctness"][0]["mode"] == "fp32+cl"
    text = render_tune(again)
    assert "winner: fp32+cl at batch 4" in text and "reproduce: clsbench run" in text and "search took" in text
    # Without its output check (as when the budget leaves checks out) the faster candidate cannot win, and the
    # text says it is faster but unchecked rather than showing it as merely "allowed" above the winner.
    stored.settings["tune"]["correctness"] = []
    unchecked = analyze_tune(stored)
    assert unchecked["winner"]["mode"] == "fp32"
    assert [f["verdict"] for f in unchecked["candidates"] if (f["mode"], f["batch_size"]) == ("fp32+cl", 4)] \
        == ["unchecked"]
    assert not any(f["verdict"] == "allowed" for f in unchecked["candidates"])
    assert "faster but unchecked: fp32+cl at batch 4" in render_tune(unchecked)


def rerun_printed(words: list[str], path: Path) -> None:
    """Run the ``clsbench run ...`` command a tune printed (split into ``words``), inline on a fake clock, into
    ``path``; it must succeed."""
    result = CliRunner().invoke(main, [*words[1:], "--isolation", "inline", "--clock", "fake:1ms", "-q",
                                       "-o", str(path)])
    assert result.exit_code == 0, result.output


def test_the_printed_command_reproduces_the_winning_cell(costed: Any, env: dict[str, Any], tmp_path: Path) -> None:
    outcome = run_tune(costed, env, batch_sizes=[4], modes=["fp32", "fp32+cl"],
                       options=dataclasses.replace(SHORT, seed=3))
    words = shlex.split(outcome.command)
    assert words[:2] == ["clsbench", "run"] and "--seed" in words
    path = tmp_path / "again.json"
    rerun_printed(words, path)
    rerun = result_io.load(path)
    tuned = RunPlan.from_dict(outcome.result.settings)
    plan = RunPlan.from_dict(rerun.settings)
    winner = next(c for c in tuned.cells if c.mode == outcome.winner["mode"])
    assert plan.cells == (winner,)
    assert plan.stop_rules["infer-throughput"] == tuned.stop_rules["infer-throughput"]
    assert (plan.repeats, plan.seed) == (tuned.repeats, 3)


def test_a_latency_limit_excludes_candidates_and_stops_their_batch_growth(costed: Any, env: dict[str, Any]) -> None:
    # p99 per batch: fp32+cl 2.5 ms at batch 2 and 4.5 ms at 4; amp-bf16 4.5 ms and fp32 8.5 ms at batch 2.
    outcome = run_tune(costed, env, max_latency_ms=3.0)
    assert (outcome.winner["mode"], outcome.winner["batch_size"]) == ("fp32+cl", 2)
    table = verdicts(outcome)
    assert table[("fp32+cl", 4)] == "over limit" and table[("amp-bf16", 2)] == "over limit"
    assert ("fp32", 4) not in table and ("amp-bf16", 4) not in table  # over the limit at 2: 4 is never tried
    over = next(c for c in outcome.candidates if c["mode"] == "amp-bf16")
    # Too few batches were timed for a p99, so the limit is held against the slowest batch (never below the p99).
    assert over["violations"] == ["max latency per batch 4.5 ms > 3 ms"]


def test_conflicting_limits_name_the_closest_candidate(costed: Any, env: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "none.json"
    with pytest.raises(NoConfigurationError) as caught:
        run_tune(costed, env, max_latency_ms=1.0, max_memory_gb=1000.0, output=path)
    error = caught.value
    assert error.message.startswith("no configuration meets p99 latency per batch <= 1 ms and peak memory <= 1000 GB")
    assert "the closest is fp32+cl at batch 2 (max latency per batch 2.5 ms" in error.message
    assert error.hint.startswith("raise --max-latency-ms to at least 2.5")
    assert error.tune_result.winner is None and result_io.load(path).measurements  # measured and saved first
    with pytest.raises(NoConfigurationError, match="--max-memory-gb to at least"):
        run_tune(costed, env, max_memory_gb=1e-6, batch_sizes=[2], modes=["fp32"])


def test_the_correctness_guard_rejects_a_mode_beyond_its_tolerance(costed: Any, env: dict[str, Any]) -> None:
    costed.STATE["cost"] = per_image_cost({**PER_IMAGE_MS, "amp-bf16": 0.5})  # now amp-bf16 is the fastest
    fair = run_tune(costed, env, batch_sizes=[4])
    assert fair.winner["mode"] == "amp-bf16"
    assert 0 < fair.winner["correctness"]["error"] <= OUTPUT_RTOL["amp-bf16"]
    strict = run_tune(costed, env, batch_sizes=[4], tolerances={"amp-bf16": 1e-9})
    assert strict.winner["mode"] == "fp32+cl"
    rejected = next(c for c in strict.candidates if c["mode"] == "amp-bf16")
    assert rejected["verdict"] == "rejected"
    assert rejected["correctness"]["reason"].startswith("logits differ from fp32 eager by ")
    assert rejected["correctness"]["reason"].endswith("(relative; tolerance 1e-09)")
    assert "rejected: amp-bf16 batch 4: logits differ" in render_tune(strict.analysis)
    with pytest.raises(NoConfigurationError, match="rejected by the correctness guard"):
        run_tune(costed, env, batch_sizes=[4], modes=["amp-bf16"], tolerances={"amp-bf16": 0.0})


def test_pruning_skips_compile_variants_of_modes_that_lost(costed: Any, env: dict[str, Any],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # +cudagraph stands in for the compile variants: on a CPU the runner records it as skipped, without a worker.
    monkeypatch.setattr("clsbench.procedures.tune.settings._compile_suffixes", lambda workload: ("+cudagraph",))
    outcome = run_tune(costed, env, modes=["fp32", "fp32+cl", "amp-bf16", "amp-bf16+cl"], batch_sizes=[2],
                       compile_variants=True, max_autotune=False)
    pruned = {p["mode"]: p["reason"] for p in outcome.result.settings["tune"]["pruned"] if p["stage"] != "halving"}
    # Per image at batch 2: fp32+cl 1.25 ms, amp-bf16+cl 1.35, amp-bf16 2.25 (56% of the best), fp32 4.25 (29%).
    assert pruned["fp32"].startswith("its best result is 29% of the best so far")
    assert pruned["amp-bf16"].startswith("its best result is 56% of the best so far")
    assert set(pruned) == {"fp32", "amp-bf16"}
    table = verdicts(outcome)
    assert table[("fp32+cl+cudagraph", 2)] == "skipped" and table[("amp-bf16+cl+cudagraph", 2)] == "skipped"
    assert ("fp32+cudagraph", 2) not in table
    # Only the best two families get compiled.
    costed.STATE["cost"] = per_image_cost({"fp32": 1.0, "fp32+cl": 1.0, "amp-bf16": 1.0, "amp-bf16+cl": 1.0})
    even = run_tune(costed, env, modes=["fp32", "fp32+cl", "amp-bf16"], batch_sizes=[2], compile_variants=True,
                    max_autotune=False)
    reasons = [p["reason"] for p in even.result.settings["tune"]["pruned"] if p["stage"] != "halving"]
    assert reasons == ["not among the 2 best modes"]


def test_max_autotune_phase_tries_only_the_best_precision(costed: Any, env: dict[str, Any],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("clsbench.procedures.tune.settings._compile_suffixes", lambda workload: ("+cudagraph",))
    calls = []
    from clsbench.procedures.tune import mode_kinds

    original = mode_kinds.variant_of

    def variant(base: str, suffix: str) -> str | None:
        calls.append(suffix)
        return original(base, "+cl+cudagraph" if suffix == "+compile:max-autotune" else suffix)

    monkeypatch.setattr("clsbench.procedures.tune.mode_kinds.variant_of", variant)
    outcome = run_tune(costed, env, modes=["fp32", "amp-bf16"], batch_sizes=[2], compile_variants=True)
    phases = [p["phase"] for p in outcome.result.settings["tune"]["phases"]]
    assert phases == ["eager", "longer", "compile", "max-autotune"]
    assert "+compile:max-autotune" in calls
    assert outcome.result.settings["tune"]["phases"][-1]["candidates"] == ["amp-bf16+cl+cudagraph bs2"]


def test_train_is_checked_by_its_loss(costed: Any, env: dict[str, Any]) -> None:
    outcome = run_tune(costed, env, workload="train", modes=["fp32", "amp-bf16"], batch_sizes=[4])
    assert outcome.winner["mode"] == "amp-bf16"
    check = outcome.winner["correctness"]
    assert check["metric"] == "loss" and check["error"] <= check["tolerance"]
    assert check["error_last"] is not None and check["error_last"] <= check["tolerance_last"]


def test_infer_latency_tunes_batch_one_on_p50(costed: Any, env: dict[str, Any]) -> None:
    outcome = run_tune(costed, env, workload="infer-latency", batch_sizes=None, max_latency_ms=2.0)
    assert {c["batch_size"] for c in outcome.candidates} == {1}
    assert outcome.winner["mode"] == "fp32+cl" and outcome.winner["latency_p50_ms"] == pytest.approx(1.5)
    assert verdicts(outcome)[("fp32", 1)] == "over limit"  # p50 4.5 ms


def test_output_errors_run_in_a_fresh_process() -> None:
    answers = output_errors_in_subprocess(TINY, "infer-throughput", "cpu", [("fp32+cl", 2), ("amp-bf16", 2),
                                                                           ("tf32", 2)], timeout_s=120)
    assert answers[("fp32+cl", 2)]["error"] < OUTPUT_RTOL["fp32"]
    assert 0 < answers[("amp-bf16", 2)]["error"] < OUTPUT_RTOL["amp-bf16"]
    assert answers[("tf32", 2)]["error"] is None and "TF32" in answers[("tf32", 2)]["detail"]
    assert judge(answers[("tf32", 2)], "tf32")["ok"] is False


def test_output_errors_report_non_finite_outputs_as_infinite() -> None:
    answers = output_errors("clsbench_testmodels:nan_model", "train", "cpu", [("fp32+cl", 2)], train_steps=1)
    assert math.isinf(answers[("fp32+cl", 2)]["error"]) or answers[("fp32+cl", 2)]["detail"]
    broken = output_errors("clsbench_testmodels:oom_model", "infer-throughput", "cpu", [("fp32+cl", 2)])
    assert broken[("fp32+cl", 2)]["error"] is None and "OutOfMemoryError" in broken[("fp32+cl", 2)]["detail"]


@pytest.mark.parametrize("kwargs", [
    {"max_latency_ms": 0}, {"max_latency_ms": -1.0}, {"max_memory_gb": 0.0}, {"max_memory_gb": float("nan")},
    {"batch_sizes": []}, {"batch_sizes": [0]}, {"batch_sizes": "auto"}, {"modes": []}, {"modes": ["fp33"]},
    {"tolerances": {"fp32": -1.0}},
])
def test_bad_input_is_refused_before_measuring(kwargs: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        tune_with(TINY, "infer-throughput", "cpu", output=tmp_path / "x.json", execution=Execution(env={}), **kwargs)
    assert not (tmp_path / "x.json").exists()


def invoke_group(*args: str) -> Any:
    from clsbench.cli.sweep_cmds import register

    group = click.Group()
    register(group)
    return CliRunner().invoke(group, list(args))


def test_cli_tune(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    result = invoke_group("tune", "--model", TINY, "--workload", "infer-latency", "--device", "cpu", "--mode",
                          "fp32,fp32+cl", "--no-compile", "--warmup", "1", "--iterations", "3", "--min-time", "0",
                          "--isolation", "inline", "--clock", "fake:1ms", "-q", "-o", str(path))
    assert result.exit_code == 0, result.output
    # Every request takes 1 ms on the fake clock: a tie, broken by name; fp32 eager is its own reference.
    assert "winner: fp32 at batch 1 (p50 request latency 1 ms" in result.stdout
    assert "outputs: fp32 eager is the reference" in result.stdout
    assert f"reproduce: clsbench run --model {TINY} --workload infer-latency --mode fp32 --batch-size 1" \
        in result.stdout
    assert "search took" in result.stdout and path.exists()
    conflicting = invoke_group("tune", "--model", TINY, "--workload", "infer-latency", "--device", "cpu",
                               "--mode", "fp32", "--no-compile", "--warmup", "1", "--iterations", "3",
                               "--min-time", "0", "--isolation", "inline", "--clock", "fake:1ms", "-q",
                               "--max-latency-ms", "0.5", "-o", str(tmp_path / "c.json"))
    assert conflicting.exit_code == 2
    assert "no winner:" in conflicting.stdout  # the table of what was measured comes first
    errors = [line for line in conflicting.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: no configuration meets p50 request latency <= 0.5 ms; the closest is fp32 at batch 1 "
                      "(p50 request latency 1 ms, worker peak RSS " + errors[0].split("worker peak RSS ")[1]]
    assert "hint: raise --max-latency-ms to at least 1" in conflicting.stderr


def test_plan_only_prints_the_plan_and_measures_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clsbench import api

    monkeypatch.chdir(tmp_path)  # where a result would go by default
    monkeypatch.setenv("CLSBENCH_DB", str(tmp_path / "index.sqlite3"))
    result = invoke_group("tune", "--model", TINY, "--device", "cpu", "--budget", "1m", "--plan-only")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("tune plan: budget 1m00s") and "the planned stages need about" in lines[0]
    assert any(line.startswith("  try screen bs") for line in lines)
    assert any(line.startswith("  leave out ") and "of the budget left for it" in line for line in lines)
    assert list(tmp_path.iterdir()) == []  # no result file, no index
    exhaustive = invoke_group("tune", "--model", TINY, "--device", "cpu", "--exhaustive", "--plan-only")
    assert exhaustive.exit_code == 0, exhaustive.output
    assert exhaustive.stdout.startswith("exhaustive tune plan: no budget; the planned stages need about")
    assert "leave out" not in exhaustive.stdout and "try max-autotune" in exhaustive.stdout
    # On a CPU the CUDA-graph variants are refused without a worker: the plan counts one compile per mode (as many
    # as a longer rung has candidates), not three (they had been priced as compiles: 11 of the 84 minutes the plan
    # gave ResNet-18's exhaustive search on this VM, which took 15).
    longer = next(line for line in exhaustive.stdout.splitlines() if line.startswith("  try longer bs"))
    compile_line = next(line for line in exhaustive.stdout.splitlines() if line.startswith("  try compile: "))
    assert compile_line.startswith(f"  try compile: up to {longer.split('up to ')[1].split()[0]} candidate(s)")
    refused = invoke_group("tune", "--resume", str(tmp_path / "t.json"), "--plan-only")
    assert refused.exit_code == 2 and refused.stderr.startswith("error: --plan-only is for a new search")
    # The library call returns the stages the lines describe.
    stages = api.plan_tune(api.TuneSettings(model=TINY, workload="infer-throughput", device="cpu", budget="1m"),
                           execution=Execution(env={}))
    assert [s["stage"] for s in stages][-2:] == ["check", "confirm"]
    assert all(s["estimate_s"] > 0 and isinstance(s["planned"], bool) for s in stages if s["candidates"])


def test_costs_from_an_earlier_tune_of_this_machine_price_the_plan(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from clsbench import api

    monkeypatch.setenv("CLSBENCH_DB", str(tmp_path / "index.sqlite3"))
    earlier = tmp_path / "earlier.json"
    measured = invoke_group("tune", "--model", TINY, "--device", "cpu", "--mode", "fp32", "--batch-size", "2",
                            "--no-compile", "--warmup", "1", "--iterations", "3", "--min-time", "0", "--isolation",
                            "inline", "--clock", "fake:1ms", "-q", "-o", str(earlier))
    assert measured.exit_code == 0, measured.output
    observed = result_io.load(earlier).settings["tune"]["cost_model"]["observed_overhead_s"]["eager"]
    data = json.loads(earlier.read_text())
    slow = tmp_path / "slow.json"  # a machine whose workers took 50 s each to start
    data["settings"]["tune"]["cost_model"]["observed_overhead_s"] = {"eager": [50.0]}
    slow.write_text(json.dumps(data))
    plan = ["tune", "--model", TINY, "--device", "cpu", "--budget", "1m", "--plan-only"]
    settings = api.TuneSettings(model=TINY, workload="infer-throughput", device="cpu", budget="1m")
    here = Execution(env=result_io.load(earlier).environment)  # this machine, as the earlier file recorded it
    by_priors = api.plan_tune(settings, execution=here)
    by_slow = api.plan_tune(settings, execution=here, costs_from=slow)
    assert by_slow[0]["stage"] == by_priors[0]["stage"] and by_slow[0]["estimate_s"] > by_priors[0]["estimate_s"]
    assert by_slow[0]["estimate_s"] >= 50.0 * by_slow[0]["candidates"]  # a worker's start, each
    seeded = invoke_group(*plan, "--costs-from", str(slow))
    assert seeded.exit_code == 0 and seeded.stdout.splitlines()[0] != invoke_group(*plan).stdout.splitlines()[0]
    data = json.loads(earlier.read_text())
    data["environment"].update(device="cuda", gpu={"name": "NVIDIA H100 80GB HBM3"})
    elsewhere = tmp_path / "h100.json"
    elsewhere.write_text(json.dumps(data))
    refused = invoke_group(*plan, "--costs-from", str(elsewhere))
    assert refused.exit_code == 2
    assert refused.stderr.splitlines()[0].startswith(f"error: --costs-from {elsewhere} was measured on cuda (NVIDIA "
                                                     "H100 80GB HBM3), this search runs on cpu")
    missing = invoke_group(*plan, "--costs-from", str(tmp_path / "none.json"))
    assert missing.exit_code == 2 and missing.stderr.startswith("error: --costs-from: ")
    resumed = invoke_group("tune", "--resume", str(earlier), "--costs-from", str(earlier))
    assert resumed.exit_code == 2 and resumed.stderr.startswith("error: --costs-from is for a new search")
    again = tmp_path / "again.json"
    second = invoke_group("tune", "--model", TINY, "--device", "cpu", "--mode", "fp32", "--batch-size", "2",
                          "--no-compile", "--warmup", "1", "--iterations", "3", "--min-time", "0", "--isolation",
                          "inline", "--clock", "fake:1ms", "-q", "--costs-from", str(earlier), "-o", str(again))
    assert second.exit_code == 0, second.output
    facts = result_io.load(again).settings["tune"]
    # The file says where its first estimates came from, and keeps those costs beside its own.
    assert facts["costs_from"] == str(earlier)
    assert facts["cost_model"]["observed_overhead_s"]["eager"][:len(observed)] == observed
    assert len(facts["cost_model"]["observed_overhead_s"]["eager"]) > len(observed)


@pytest.mark.parametrize(("args", "words"), [
    (["--max-latency-ms", "0"], "max_latency_ms must be a number > 0"),
    (["--max-memory-gb", "-1"], "max_memory_gb must be a number > 0"),
    (["--batch-size", ""], "empty"),
    (["--batch-size", "4,x"], "not a whole number"),
    (["--mode", ","], "names no mode"),
])
def test_cli_tune_bad_input(args: list[str], words: str) -> None:
    result = invoke_group("tune", "--model", TINY, "--device", "cpu", *args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and words in errors[0], result.stderr


def test_variants_choose_the_compile_phase_candidates(costed: Any, env: dict[str, Any]) -> None:
    # On a CPU +cudagraph is recorded as skipped by the runner, without a worker: only the chosen variant appears.
    outcome = run_tune(costed, env, modes=["fp32+cl"], batch_sizes=[2], compile_variants=True, max_autotune=False,
                       variants=["cudagraph"])
    modes = {c["mode"] for c in outcome.candidates}
    assert modes == {"fp32+cl", "fp32+cl+cudagraph"}
    assert outcome.result.settings["tune"]["rules"]["variants"] == ["cudagraph"]


def test_variants_bad_input() -> None:
    from clsbench.procedures.tune import parse_variants

    assert parse_variants("train", None) == ("+compile",)
    assert parse_variants("infer-latency", ["+compile+cudagraph", "cudagraph"]) == ("+compile+cudagraph",
                                                                                    "+cudagraph")
    with pytest.raises(InvalidInputError, match="unknown variant 'cudagraph' for train"):
        parse_variants("train", ["cudagraph"])
    result = CliRunner().invoke(main, ["tune", "--model", TINY, "--device", "cpu", "--variants", "jit"])
    assert result.exit_code == 2
    assert "unknown variant 'jit'" in result.output and "Traceback" not in result.output


H100_TUNE = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "h100" / \
    "tune-resnet50-infer-throughput-20261206T174619Z" / "tune.json"


def test_a_candidate_ahead_of_the_confirmed_winner_in_fewer_repeats_is_named() -> None:
    # The H100's default inference search: compile+freeze was confirmed over 3 repeats at 26,542 img/s; export-frozen
    # measured 26,652 in its one longer repeat and its confirmation was left out for the budget. The winner stands on
    # more repeats, and the text says the order of the two is not settled.
    stored = result_io.load(H100_TUNE)
    analysis = analyze_tune(stored)
    assert (analysis["winner"]["mode"], analysis["winner"]["confirmed"]) == ("fp16+cl+compile+freeze", True)
    lines = [line for line in render_tune(analysis).splitlines() if line.startswith("ahead but unconfirmed")]
    assert lines == [
        "ahead but unconfirmed: fp16+cl @export-frozen at batch 512 (max latency per batch 19.5 ms, peak reserved "
        "3.45 GB, 26,652.1 img/s), 0.4% ahead in 1 repeat (its confirmation was left out for the budget): which of "
        "the two is faster is not settled; a larger --budget (or `tune --resume FILE --budget ...`) confirms it"]
    # Not left out for the budget (here: the record of it removed), it was simply not among those confirmed.
    stored.settings["tune"]["left_out"] = [e for e in stored.settings["tune"]["left_out"] if e["rung"] != "confirm"]
    assert "(it was not among those confirmed)" in render_tune(analyze_tune(stored))
    # One the checks did not pass is not named.
    for f in analysis["candidates"]:
        if f.get("backend") == "export-frozen":
            f["verdict"] = "unchecked"
    assert "ahead but unconfirmed" not in render_tune(analysis)
