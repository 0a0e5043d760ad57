"""``clsbench tune`` within a time budget: the budget's parsing, the cost model, planning and stopping with a fake
clock, successive-halving decisions, dominance pruning, the parity gate under the new search, an unconfirmed
winner, resume of an interrupted tune, and candidate kinds as an open registry.

The searches run inline on the cost clock of test_sweep.py (the test model's forward advances a shared clock by a
cost chosen per mode and batch). The budget reads the same clock in seconds, and each repeat (a fresh worker in a
real run) adds :data:`PROCESS_NS` to it from the progress callback, the way starting a process costs time without
timing anything: so every estimate, every decision and every second the budget counts is exact.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from clsbench import api
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.plan import StopRule
from clsbench.errors import InvalidInputError, ResultFileError
from clsbench.procedures.tune import TuneInterrupted, TuneSettings, render_tune, resume_tune, tune
from clsbench.procedures.tune.budget import PROCESS_S, Budget, CostModel, Window, format_seconds, parse_budget
from clsbench.procedures.tune.kinds import TUNE_KINDS, CandidateKind, register_kind
from clsbench.procedures.tune.search import screen_rule
from clsbench.results import io as result_io

MS = 1_000_000
#: What starting one worker costs on the budget's clock in these tests.
PROCESS_NS = 5_000 * MS
#: 1 warm-up, 8 timed iterations (the screen rung times 2), no minimum time; the full protocol is 3 repeats.
OPTIONS = MeasureOptions(repeats=3, warmup=1, iterations=8, min_time=0.0)
PER_IMAGE_MS = {"fp32": 4.0, "amp-bf16": 2.0, "fp32+cl": 1.0, "amp-bf16+cl": 1.02, "bf16": 3.0, "bf16+cl": 2.5}


def inline(costed: Any, env: dict[str, Any]) -> Execution:
    """Inline on the cost clock; each repeat costs PROCESS_NS more and is counted per mode in STATE["started"]."""
    def progress(event: Any) -> None:
        if event.kind == "repeat":
            costed.STATE["ns"] += PROCESS_NS
            started = costed.STATE.setdefault("started", {})
            started[event.cell.mode] = started.get(event.cell.mode, 0) + 1

    return Execution(isolation="inline", clock=costed.CostClock(), env=env, progress=progress)


#: tune()'s own arguments besides its settings: where the result goes and how the search runs and talks.
RUN_ARGUMENTS = ("output", "execution", "budget_clock", "announce")


def tune_with(model: str, workload: str, device: str, **kwargs: Any) -> Any:
    """:func:`tune` of ``TuneSettings(model, workload, device, **settings)``, the :data:`RUN_ARGUMENTS` in ``kwargs``
    passed to tune() itself."""
    run = {key: kwargs.pop(key) for key in RUN_ARGUMENTS if key in kwargs}
    return tune(TuneSettings(model, workload, device, **kwargs), **run)


def search(costed: Any, env: dict[str, Any], **kwargs: Any) -> Any:
    """A tune on the cost clock: the budget reads it in seconds (:func:`inline`)."""
    options = {"workload": "infer-throughput", "modes": ["fp32", "fp32+cl", "amp-bf16"], "batch_sizes": [2],
               "compile_variants": False, "options": OPTIONS, "backends": (), "budget": "1h", **kwargs}
    workload = options.pop("workload")
    return tune_with(f"{costed.__name__}:costed", workload, "cpu", execution=inline(costed, env),
                     budget_clock=lambda: costed.STATE["ns"] / 1e9, **options)


def trials(outcome: Any) -> list[dict[str, Any]]:
    return outcome.result.settings["tune"]["trials"]


# ------------------------------------------------------------------------------------------------ the budget


@pytest.mark.parametrize(("text", "seconds"), [("10m", 600.0), ("600s", 600.0), ("600", 600.0), ("1h", 3600.0),
                                               ("1h30m", 5400.0), (" 2.5m ", 150.0), (90, 90.0), (None, None)])
def test_parse_budget(text: Any, seconds: float | None) -> None:
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5m", "ten minutes", "10x", "m", "5s10", True, float("nan"), 0.0])
def test_parse_budget_refuses_what_is_not_a_duration(text: Any) -> None:
    with pytest.raises(InvalidInputError):
        parse_budget(text)


def test_the_cost_model_learns_what_candidates_cost_here() -> None:
    window = Window(warmup=1, warmup_seconds=0.0, min_iterations=10, min_seconds=1.0)
    cost = CostModel("cpu", {"eager": 0.0, "compile": 30.0})
    # Before anything ran: the default process start, plus the build of the kind; 10 iterations of 0.2 s = 2 s.
    assert cost.estimate_s("eager", window, 1, 0.2) == pytest.approx(PROCESS_S["cpu"] + 0.2 + 2.0)
    assert cost.estimate_s("compile", window, 2) == pytest.approx(2 * (PROCESS_S["cpu"] + 30.0 + 1.0))
    cost.observe("eager", 9.0, window, 1, 0.1)  # 9 s, of which 1.1 s was the window: 7.9 s of overhead
    assert cost.overhead_s("eager") == pytest.approx(7.9)
    # A kind not seen yet starts from the eager overhead seen here plus its build estimate; a warm rebuild from
    # a fraction of the build.
    assert cost.overhead_s("compile") == pytest.approx(7.9 + 30.0)
    assert cost.overhead_s("compile", warm=True) == pytest.approx(7.9 + 0.3 * 30.0)
    cost.observe("compile", 2 * 20.0, window, 2, None)
    assert cost.overhead_s("compile") == pytest.approx(19.0)
    again = CostModel("cpu", {})
    again.restore(cost.to_dict())
    assert again.overhead_s("compile") == pytest.approx(19.0)


def test_a_cached_artifact_is_priced_without_the_build_its_first_candidate_took() -> None:
    # On an H100: ResNet-50 export-frozen cost 86 s of overhead cold, 69 s of it the build process a cache hit skips.
    window = Window(warmup=1, warmup_seconds=0.0, min_iterations=10, min_seconds=1.0)
    cost = CostModel("cuda", {"eager": 0.0, "backend:export-frozen": 70.0})
    cost.observe("eager", 5.0 + 1.0, window, 1, None)  # 5 s of process overhead
    cost.observe("backend:export-frozen", 86.0 + 1.0, window, 1, None)
    assert cost.overhead_s("backend:export-frozen", warm=True) == pytest.approx(86.0 - 0.7 * 70.0)  # the fraction
    cost.observe_build("backend:export-frozen", 69.0)
    cost.observe_build("backend:export-frozen", float("nan"))  # ignored, as is a build of 0 s
    cost.observe_build("backend:export-frozen", 0.0)
    assert cost.overhead_s("backend:export-frozen", warm=True) == pytest.approx(17.0)
    assert cost.overhead_s("backend:export-frozen") == pytest.approx(86.0)  # a cold one still builds
    cost.observe_build("backend:export-frozen", 85.0)  # a build of more than the cold overhead: the process start
    assert cost.overhead_s("backend:export-frozen", warm=True) == pytest.approx(9.0)  # 86 - mean(69, 85)
    cost.observe_build("backend:export-frozen", 200.0)
    assert cost.overhead_s("backend:export-frozen", warm=True) == pytest.approx(5.0)  # never below the process start
    again = CostModel("cuda", {})
    again.restore(cost.to_dict())  # a resumed search keeps them
    assert again.overhead_s("backend:export-frozen", warm=True) == pytest.approx(5.0)


def test_budget_reads_its_clock_and_counts_what_was_spent_before() -> None:
    now = [100.0]
    budget = Budget(60.0, lambda: now[0], spent_before_s=20.0)
    now[0] += 15.0
    assert budget.spent_s() == pytest.approx(35.0) and budget.left_s() == pytest.approx(25.0)
    assert budget.fits(20.0, reserve_s=5.0) and not budget.fits(20.0, reserve_s=5.1)


def test_the_screen_rule_shortens_the_timed_minima_only() -> None:
    rule = StopRule(warmup=5, min_iterations=20, min_seconds=1.0, warmup_seconds=0.5, max_seconds=120.0)
    short = screen_rule(rule)
    assert (short.warmup, short.warmup_seconds, short.max_seconds) == (5, 0.5, 120.0)
    assert (short.min_iterations, short.min_seconds) == (5, 0.25)


# ----------------------------------------------------------------------------------- planning and stopping


def test_a_budget_is_planned_up_front_and_never_overrun(costed: Any, env: dict[str, Any]) -> None:
    lines: list[str] = []
    modes = ["fp32", "fp32+cl", "amp-bf16", "amp-bf16+cl", "bf16", "bf16+cl"]
    outcome = search(costed, env, modes=modes, batch_sizes=[2, 4, 8], budget="34s", announce=lines.append)
    facts = outcome.result.settings["tune"]
    # Said up front, priced with the default 2 s a worker (nothing was measured here yet). In priority order: the
    # first screen (6 modes, 12 s), the check (4 s), the confirmation (8 s) and the second screen (about a third of
    # the modes, 4 s) leave 6 s: the longer rung (4 candidates, 8 s) is planned for the 3 of them that fit, and the
    # third screen not at all.
    assert lines[0].startswith("tune plan: budget 34.0s")
    assert "  try screen bs2: up to 6 candidate(s), about 12.0s" in lines
    assert "  try longer: 3 of 4 candidate(s), about 6.0s" in lines
    assert any(line.startswith("  leave out screen bs8: up to 2 candidate(s), about 4.0s") for line in lines)
    started = trials(outcome)
    assert started and facts["left_out"]
    for t in started:  # no candidate was started that its estimate said could not finish
        assert t["start_s"] + t["estimate_s"] <= facts["budget_s"] + 1e-9
    # Once the first worker was seen, estimates are what this machine costs: 5 s a worker plus the window.
    later = [t for t in started if t is not started[0] and t["rung"] == "screen"]
    assert later and all(t["estimate_s"] == pytest.approx(5.0, abs=0.2) for t in later)
    biggest = max(t["estimate_s"] for t in started)
    assert facts["spent_s"] <= facts["budget_s"] + biggest  # at most one candidate's estimate over
    assert facts["spent_s"] <= facts["budget_s"]  # here the estimates were exact: not over at all
    text = render_tune(outcome.analysis)
    assert "left out for the budget: screen bs8 (up to 2 candidate(s))" in text and "budget 34.0 s" in text
    for entry in facts["left_out"]:
        assert entry["reason"] and entry["estimate_s"] > 0


def test_a_tiny_budget_screens_what_fits_and_leaves_the_winner_unconfirmed(costed: Any, env: dict[str, Any]) -> None:
    outcome = search(costed, env, modes=["fp32", "fp32+cl"], budget="15s")
    facts = outcome.result.settings["tune"]
    assert [t["rung"] for t in trials(outcome)] == ["screen", "screen"]
    plan = {s["stage"]: s["planned"] for s in facts["plan"]}
    assert plan["confirm"] is False and plan["screen bs2"] is True
    assert outcome.winner["mode"] == "fp32+cl" and outcome.winner["confirmed"] is False
    assert "from 1 repeat, unconfirmed" in render_tune(outcome.analysis)
    assert any(e["stage"] == "longer" for e in facts["left_out"])  # the longer rung no longer fit once 5 s/worker


# ---------------------------------------------------------------------------------------- successive halving


def test_halving_promotes_the_best_third_and_confirms_the_best_two(costed: Any, env: dict[str, Any]) -> None:
    modes = ["fp32", "fp32+cl", "amp-bf16", "amp-bf16+cl", "bf16", "bf16+cl"]
    outcome = search(costed, env, modes=modes)
    rungs: dict[str, list[str]] = {}
    for t in trials(outcome):
        rungs.setdefault(t["rung"], []).append(t["mode"])
    assert sorted(rungs["screen"]) == sorted(modes)
    assert rungs["longer"] == ["fp32+cl", "amp-bf16+cl"]  # ceil(6 / 3) = 2, best first
    assert rungs["confirm"] == ["fp32+cl", "amp-bf16+cl"]
    winner = outcome.winner
    assert (winner["mode"], winner["rung"], winner["repeats"], winner["confirmed"]) == ("fp32+cl", "confirm", 3, True)
    # The confirmation continued the longer rung's repeat: 3 repeats in all, the first from the longer rung.
    stored = outcome.result.find(("costed", "infer-throughput", "fp32+cl", 2, "cpu"))
    assert stored is None  # (keys name the module: look it up by mode)
    m = next(m for m in outcome.result.measurements if m.mode == "fp32+cl")
    assert len(m.repeats) == 3 and [r["sequence"] for r in m.repeats] == sorted(r["sequence"] for r in m.repeats)
    # Screening measurements a later rung replaced are kept whole.
    earlier = outcome.result.settings["tune"]["earlier"]
    assert {(e["measurement"]["mode"], e["rung"]) for e in earlier} == {("fp32+cl", "screen"),
                                                                         ("amp-bf16+cl", "screen")}
    text = render_tune(outcome.analysis)
    assert "confirmed over 3 repeats" in text and "pruned (halving): 4 of 6 screened candidates" in text
    assert outcome.analysis["candidates"][0]["mode"] == "fp32+cl"


def test_the_longer_rung_catches_a_candidate_that_was_only_fast_briefly(costed: Any, env: dict[str, Any]) -> None:
    def cost(mode: str, batch: int) -> int:
        if mode == "amp-bf16":  # fast in its first worker (the short screening window), slow in every later one
            first = costed.STATE["started"].get(mode) == 1
            return int(0.5 * MS + (0.5 if first else 3.0) * MS * batch)
        return int(0.5 * MS + PER_IMAGE_MS[mode] * MS * batch)

    costed.STATE["cost"] = cost
    outcome = search(costed, env, modes=["fp32", "fp32+cl", "amp-bf16"])
    screened = {t["mode"]: t["score"] for t in trials(outcome) if t["rung"] == "screen"}
    assert max(screened, key=screened.get) == "amp-bf16"  # it won the screen...
    assert outcome.winner["mode"] == "fp32+cl"  # ...and lost once measured for longer
    amp = next(c for c in outcome.candidates if c["mode"] == "amp-bf16")
    assert amp["rung"] in ("longer", "confirm") and amp["score"] < outcome.winner["score"]


def test_dominance_stops_a_mode_beaten_at_two_batch_sizes(costed: Any, env: dict[str, Any]) -> None:
    costed.STATE["cost"] = lambda mode, batch: int(0.5 * MS + {"fp32": 1.2, "fp32+cl": 1.0, "amp-bf16+cl": 1.02}[mode]
                                                   * MS * batch)
    outcome = search(costed, env, modes=["fp32", "fp32+cl", "amp-bf16+cl"], batch_sizes=[2, 4, 8])
    screened = {(t["mode"], t["batch_size"]) for t in trials(outcome) if t["rung"] == "screen"}
    # fp32 is within the screen margin at batch 2 (83% of the best), so it grows on, until beaten at two sizes.
    assert ("fp32", 4) in screened and ("fp32", 8) not in screened
    # amp-bf16+cl is within 3% of fp32+cl (1.02 ms an image against 1.0): not dominated, it grows on.
    assert ("amp-bf16+cl", 8) in screened and ("fp32+cl", 8) in screened
    pruned = [p for p in outcome.result.settings["tune"]["pruned"] if p["stage"] == "dominance"]
    assert [(p["mode"], p["variants"]) for p in pruned] == [("fp32", ["bs8"])]
    assert pruned[0]["reason"] == "fp32+cl beat it by more than 3% at batch 2 and 4"


def test_every_mode_is_screened_at_the_reference_size_and_only_the_close_ones_grow(costed: Any,
                                                                                   env: dict[str, Any]) -> None:
    # tune's own sizes on a CPU are 8..64: every mode at 16 (the second), then the larger sizes for the modes within
    # a quarter of the best there; the smallest size is not needed when the reference ran within the limits.
    lines: list[str] = []
    outcome = search(costed, env, modes=["fp32", "fp32+cl", "amp-bf16"], batch_sizes=None, announce=lines.append)
    facts = outcome.result.settings["tune"]
    assert facts["batch_sizes"] == [8, 16, 32, 64] and not facts["batch_sizes_explicit"]
    assert "  try screen bs16: up to 3 candidate(s), about 6.0s" in lines
    assert not any("bs8" in line for line in lines)
    screened = [(t["mode"], t["batch_size"]) for t in trials(outcome) if t["rung"] == "screen"]
    assert screened[:3] == [("fp32", 16), ("fp32+cl", 16), ("amp-bf16", 16)]
    assert {b for m, b in screened if m != "fp32+cl"} == {16} and ("fp32+cl", 32) in screened
    assert not any(b == 8 for _, b in screened)
    margin = {p["mode"]: p for p in facts["pruned"] if p["stage"] == "screen"}
    assert set(margin) == {"fp32", "amp-bf16"}
    assert margin["fp32"]["variants"] == ["bs32", "bs64"]
    assert margin["fp32"]["reason"] == "26% of the best at batch 16, below the 75% needed"
    assert outcome.winner["mode"] == "fp32+cl"


def test_a_mode_that_fails_at_the_reference_size_is_tried_smaller(costed: Any, env: dict[str, Any]) -> None:
    costed.STATE["oom_above"] = 8  # batch 16, the reference, runs out of memory for every mode
    outcome = search(costed, env, modes=["fp32", "fp32+cl"], batch_sizes=None)
    screened = [(t["mode"], t["batch_size"], t["status"]) for t in trials(outcome) if t["rung"] == "screen"]
    assert [(m, b) for m, b, _ in screened] == [("fp32", 16), ("fp32+cl", 16), ("fp32", 8), ("fp32+cl", 8)]
    assert [status for _, b, status in screened if b == 16] == ["failed", "failed"]
    assert (outcome.winner["mode"], outcome.winner["batch_size"]) == ("fp32+cl", 8)


# ------------------------------------------------------------------------------------------------ parity gate


def test_the_parity_gate_holds_under_the_new_search(costed: Any, env: dict[str, Any]) -> None:
    costed.STATE["cost"] = lambda mode, batch: int(0.5 * MS + {"fp32": 4.0, "fp32+cl": 1.0, "amp-bf16": 0.5}[mode]
                                                   * MS * batch)
    outcome = search(costed, env, tolerances={"amp-bf16": 1e-9})
    rejected = next(c for c in outcome.candidates if c["mode"] == "amp-bf16")
    assert rejected["verdict"] == "rejected" and rejected["score"] > outcome.winner["score"]
    assert outcome.winner["mode"] == "fp32+cl" and outcome.winner["correctness"]["ok"]
    assert outcome.winner["confirmed"] is True
    # A candidate that changes the outputs is never confirmed: the confirmation went to the two that passed.
    confirmed = [t["mode"] for t in trials(outcome) if t["rung"] == "confirm"]
    assert confirmed == ["fp32+cl", "fp32"]


# ----------------------------------------------------------------------------------------------------- resume


def invoke_group(*args: str) -> Any:
    from clsbench.cli.sweep_cmds import register

    group = click.Group()
    register(group)
    return CliRunner().invoke(group, list(args))


def test_an_interrupted_tune_prints_its_table_and_resumes(costed: Any, tmp_path: Path) -> None:
    path = tmp_path / "tune.json"
    state = {"armed": True}

    def cost(mode: str, batch: int) -> int:
        if mode == "amp-bf16" and batch == 4 and state["armed"]:
            state["armed"] = False
            raise KeyboardInterrupt
        return int(0.5 * MS + PER_IMAGE_MS[mode] * MS * batch)

    costed.STATE["cost"] = cost
    common = ["--isolation", "inline", "--clock", "fake:1ms", "-q"]
    first = invoke_group("tune", "--model", f"{costed.__name__}:costed", "--device", "cpu", "--mode",
                         "fp32,fp32+cl,amp-bf16", "--batch-size", "2,4", "--no-compile", "--warmup", "1",
                         "--iterations", "4", "--min-time", "0", "--budget", "1h", "-o", str(path), *common)
    assert first.exit_code == 130, first.output
    assert "rank  mode" in first.stdout  # the table of what finished
    assert f"continue it with: clsbench tune --resume {path}" in first.stderr
    assert "run --resume" not in first.stderr
    stopped = result_io.load(path).settings["tune"]
    done_before = {(t["mode"], t["batch_size"], t["rung"]) for t in stopped["trials"] if t.get("actual_s") is not None}
    assert ("fp32", 2, "screen") in done_before and ("amp-bf16", 4, "screen") not in done_before
    # `run --resume` cannot continue a tune: it says what can.
    refused = CliRunner().invoke(__import__("clsbench.cli", fromlist=["main"]).main, ["run", "--resume", str(path)])
    assert refused.exit_code == 3 and f"clsbench tune --resume {path}" in refused.output

    again = invoke_group("tune", "--resume", str(path), *common)
    assert again.exit_code == 0, again.output
    assert "WINNER" in again.stdout and "confirmed over 3 repeats" in again.stdout
    facts = result_io.load(path).settings["tune"]
    finished = [(t["mode"], t["batch_size"], t["rung"]) for t in facts["trials"] if t.get("actual_s") is not None]
    assert len(finished) == len(set(finished))  # nothing measured twice at one rung
    assert set(done_before) <= set(finished) and ("amp-bf16", 4, "screen") in finished
    assert facts["resumed"][0]["spent_s"] == pytest.approx(stopped["spent_s"])
    assert facts["spent_s"] >= stopped["spent_s"]


def test_resume_refuses_search_options_and_files_it_cannot_continue(costed: Any, env: dict[str, Any],
                                                                    tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    search(costed, env, modes=["fp32"], output=path, options=MeasureOptions(repeats=1, warmup=1, iterations=2,
                                                                            min_time=0.0))
    refused = invoke_group("tune", "--resume", str(path), "--model", "x", "--mode", "fp32")
    assert refused.exit_code == 2
    assert "error: --resume continues the search stored in" in refused.stderr and "--model, --modes" in refused.stderr
    bad = invoke_group("tune", "--model", "x", "--budget", "soon")
    assert bad.exit_code == 2 and "error: budget 'soon' is not a duration" in bad.stderr
    run_file = tmp_path / "run.json"
    api.run(api.plan_run(models=["clsbench_testmodels:tiny"], workloads=["infer-throughput"], modes=["fp32"],
                         batch_sizes=[2], device="cpu", options=MeasureOptions(repeats=1, warmup=1, iterations=2,
                                                                               min_time=0.0), environment=env),
            run_file, execution=Execution(isolation="inline", env=env, probe=False))
    with pytest.raises(ResultFileError, match="not a tune search"):
        resume_tune(run_file, execution=Execution(env=env))


def test_a_library_interrupt_keeps_what_finished(costed: Any, env: dict[str, Any], tmp_path: Path) -> None:
    def cost(mode: str, batch: int) -> int:
        if mode == "amp-bf16":
            raise KeyboardInterrupt
        return int(0.5 * MS + PER_IMAGE_MS[mode] * MS * batch)

    costed.STATE["cost"] = cost
    with pytest.raises(TuneInterrupted) as caught:
        search(costed, env, output=tmp_path / "i.json")
    partial = caught.value.tune_result
    assert {c["mode"] for c in partial.candidates} == {"fp32", "fp32+cl"}
    assert partial.analysis["interrupted"] is True
    assert caught.value.exit_code == 130


# ----------------------------------------------------------------------------------------- kinds are open


def test_a_registered_kind_joins_the_search_plan_and_budget(costed: Any, env: dict[str, Any]) -> None:
    def rounds(s: Any) -> Any:
        best = s.family_point("fp32+cl")
        yield "channels-last-batch-doubled", [s.cell("fp32+cl", best.batch_size * 2)]

    kind = CandidateKind(name="test-double", rung="longer", build_s={"cpu": 1.0, "cuda": 1.0},
                         stages=lambda s: [("channels-last-batch-doubled", 1, 2)], rounds=rounds)
    register_kind(kind)
    try:
        outcome = search(costed, env, modes=["fp32", "fp32+cl"])
    finally:
        TUNE_KINDS.unregister("test-double")
    added = [t for t in trials(outcome) if t["kind"] == "test-double"]
    assert [(t["mode"], t["batch_size"], t["rung"]) for t in added] == [("fp32+cl", 4, "longer"),
                                                                        ("fp32+cl", 4, "confirm")]
    assert any(s["stage"] == "channels-last-batch-doubled" for s in outcome.result.settings["tune"]["plan"])
    # Batch 4 is faster than batch 2 on the cost clock: the new kind's candidate wins, confirmed.
    assert (outcome.winner["mode"], outcome.winner["batch_size"]) == ("fp32+cl", 4)
    assert math.isclose(outcome.winner["throughput_img_s"], 4000 / 4.5)
    with pytest.raises(ValueError):
        register_kind(CandidateKind(name="bad", rung="sometime", build_s={}, stages=lambda s: [],
                                    rounds=lambda s: iter(())))


def test_the_report_draws_the_search_against_time(costed: Any, env: dict[str, Any], tmp_path: Path) -> None:
    from clsbench.report.html import render_report

    path = tmp_path / "t.json"
    search(costed, env, output=path)
    page = render_report([result_io.load(path)], ["t.json"])
    assert '<section id="tune">' in page and "search time (s)" in page and "budget 3600 s" in page
    assert "eager, screen" in page and "eager, confirm" in page
    plain = api.plan_run(models=["clsbench_testmodels:tiny"], workloads=["infer-throughput"], modes=["fp32"],
                         batch_sizes=[2], device="cpu", options=MeasureOptions(repeats=1, warmup=1, iterations=2,
                                                                               min_time=0.0), environment=env)
    other = api.run(plain, None, execution=Execution(isolation="inline", env=env, probe=False))
    assert '<section id="tune">' not in render_report([other], ["run.json"])


def test_a_confirmation_stopped_midway_is_continued_not_repeated(costed: Any, env: dict[str, Any],
                                                                 tmp_path: Path) -> None:
    path = tmp_path / "c.json"

    def cost(mode: str, batch: int) -> int:
        # fp32+cl's workers: screen, longer, then the confirmation's second and third; stop in the third.
        if mode == "fp32+cl" and costed.STATE["started"].get(mode) == 4 and not costed.STATE.get("stopped"):
            costed.STATE["stopped"] = True
            raise KeyboardInterrupt
        return int(0.5 * MS + PER_IMAGE_MS[mode] * MS * batch)

    costed.STATE["cost"] = cost
    with pytest.raises(TuneInterrupted):
        search(costed, env, output=path)
    stopped = result_io.load(path)
    assert [len(p.repeats) for p in stopped.pending] == [2]  # the longer repeat and one confirmation repeat
    before = dict(costed.STATE["started"])
    outcome = resume_tune(path, execution=inline(costed, env), budget_clock=lambda: costed.STATE["ns"] / 1e9)
    m = next(m for m in outcome.result.measurements if m.mode == "fp32+cl")
    assert len(m.repeats) == 3 and outcome.winner["confirmed"] is True
    assert costed.STATE["started"]["fp32+cl"] == before["fp32+cl"] + 1  # only the interrupted repeat, again
    assert costed.STATE["started"]["amp-bf16"] == before["amp-bf16"] + 2  # the runner-up's, never begun
    assert not outcome.result.pending


def with_wide_kind(costed: Any, env: dict[str, Any], kind: CandidateKind, budget: str) -> tuple[Any, list[str]]:
    """A search of fp32 and fp32+cl with ``kind`` registered for it alone; the outcome and the announced lines."""
    register_kind(kind)
    lines: list[str] = []
    try:
        outcome = search(costed, env, modes=["fp32", "fp32+cl"], budget=budget, announce=lines.append)
    finally:
        TUNE_KINDS.unregister(kind.name)
    return outcome, lines


def test_a_stage_the_plan_left_out_runs_when_its_turn_comes_and_it_fits(costed: Any, env: dict[str, Any]) -> None:
    # The plan prices a kind with a cautious 60 s build per candidate: its first stage (high priority) fits, with
    # what it adds to the confirmation's price (a winner of this kind rebuilds warm in each confirming repeat), its
    # second does not. The first candidate shows what the kind really costs here (no build: a worker and its
    # window), so when the second stage's turn comes it is priced again and runs after all.
    def rounds(s: Any) -> Any:
        best = s.family_point("fp32+cl")
        yield "wide", [s.cell("fp32+cl", best.batch_size * 2)]
        yield "wider", [s.cell("fp32+cl", best.batch_size * 4)]

    outcome, lines = with_wide_kind(costed, env, CandidateKind(
        name="test-wide", rung="longer", build_s={"cpu": 60.0, "cuda": 60.0},
        stages=lambda s: [("wide", 1, 2), ("wider", 1, 9)], rounds=rounds), budget="180s")
    facts = outcome.result.settings["tune"]
    assert any(line.startswith("  try wide: up to 1 candidate(s)") for line in lines)
    assert any(line.startswith("  leave out wider: up to 1 candidate(s)") for line in lines)
    wider = next(s for s in facts["plan"] if s["stage"] == "wider")
    assert wider["planned"] is True and wider["readmitted"]["candidates"] == 1
    assert wider["readmitted"]["estimate_s"] < wider["estimate_s"]
    assert any(line.startswith("tune plan: wider runs after all: 1 candidate(s)") for line in lines)
    assert [(t["mode"], t["batch_size"]) for t in trials(outcome) if t["kind"] == "test-wide"
            and t["rung"] == "longer"] == [("fp32+cl", 4), ("fp32+cl", 8)]
    assert not any(e["stage"] in ("wide", "wider") for e in facts["left_out"])
    assert "left out for the budget: wider" not in render_tune(outcome.analysis)
    assert facts["spent_s"] <= facts["budget_s"]


def test_a_stage_pays_for_what_it_adds_to_the_confirmation(costed: Any, env: dict[str, Any]) -> None:
    # With the same kind and 130 s, "wide" alone fits (62 s) but not with the 72 s its warm rebuilds would add to
    # the confirmation: the plan leaves it out rather than promise more than the budget, and every planned total
    # fits. Once the first candidates show the kind's real cost, it runs after all.
    def rounds(s: Any) -> Any:
        best = s.family_point("fp32+cl")
        yield "wide", [s.cell("fp32+cl", best.batch_size * 2)]

    outcome, lines = with_wide_kind(costed, env, CandidateKind(
        name="test-wide", rung="longer", build_s={"cpu": 60.0, "cuda": 60.0}, stages=lambda s: [("wide", 1, 2)],
        rounds=rounds), budget="130s")
    facts = outcome.result.settings["tune"]
    assert any(line.startswith("  leave out wide: up to 1 candidate(s)") and "of it for the confirmation" in line
               for line in lines)
    planned = sum(s["estimate_s"] for s in facts["plan"] if s["planned"] and not s.get("readmitted"))
    assert planned <= 130.0
    assert next(s for s in facts["plan"] if s["stage"] == "wide")["readmitted"]["candidates"] == 1
    assert facts["spent_s"] <= facts["budget_s"]


def test_a_candidate_whose_build_an_earlier_one_made_is_priced_warm(costed: Any, env: dict[str, Any]) -> None:
    # Two candidates of one kind share a build (as a backend's artifact and its CUDA-graph replay share one cache
    # entry): the second is priced and observed as a rebuild; a third of its own build key is not.
    def rounds(s: Any) -> Any:
        best = s.family_point("fp32+cl")
        yield "shared", [s.cell("fp32+cl", best.batch_size * 2), s.cell("fp32+cl", best.batch_size * 4),
                         s.cell("fp32", best.batch_size * 2)]

    outcome, _ = with_wide_kind(costed, env, CandidateKind(
        name="test-wide", rung="longer", build_s={"cpu": 20.0, "cuda": 20.0}, stages=lambda s: [("shared", 3, 2)],
        rounds=rounds, build_key=lambda cell: cell.mode), budget="1h")
    facts = outcome.result.settings["tune"]
    shared = [t for t in trials(outcome) if t["kind"] == "test-wide" and t["rung"] == "longer"]
    assert [(t["mode"], t["batch_size"]) for t in shared] == [("fp32+cl", 4), ("fp32+cl", 8), ("fp32", 4)]
    warm = facts["cost_model"]["observed_overhead_s"]["test-wide:warm"]
    confirmed = [t for t in trials(outcome) if t["kind"] == "test-wide" and t["rung"] == "confirm"]
    assert len(facts["cost_model"]["observed_overhead_s"]["test-wide"]) == 2  # the two builds of their own
    assert len(warm) == 1 + len(confirmed)  # the shared build, and the confirmation's repeats (always warm)
    assert shared[1]["estimate_s"] < shared[0]["estimate_s"]  # the warm prior: a fraction of the build


def test_a_stage_that_does_not_fit_whole_is_planned_for_the_candidates_that_fit(costed: Any,
                                                                                 env: dict[str, Any]) -> None:
    # Six candidates of a cautious 20 s build each do not fit in what the budget leaves the stage; the plan keeps
    # as many as fit, the kind proposes its most promising first, and each still starts only while it fits.
    def rounds(s: Any) -> Any:
        best = s.family_point("fp32+cl")
        yield "wide", [s.cell("fp32+cl", best.batch_size * 2 ** i) for i in range(1, 7)]

    outcome, lines = with_wide_kind(costed, env, CandidateKind(
        name="test-wide", rung="longer", build_s={"cpu": 20.0, "cuda": 20.0},
        stages=lambda s: [("wide", 6, 9)], rounds=rounds), budget="80s")
    facts = outcome.result.settings["tune"]
    wide = next(s for s in facts["plan"] if s["stage"] == "wide")
    assert wide["planned"] is True and wide["of"] == 6 and 1 <= wide["candidates"] < 6
    assert f"  try wide: {wide['candidates']} of 6 candidate(s), about {format_seconds(wide['estimate_s'])}" in lines
    ran = [t["batch_size"] for t in trials(outcome) if t["kind"] == "test-wide" and t["rung"] == "longer"]
    assert ran == [4 * 2 ** i for i in range(len(ran))] and ran  # the first ones, in the order proposed
    left = [e["batch_size"] for e in facts["left_out"] if e["stage"] == "wide"]
    assert sorted(ran + left) == [4 * 2 ** i for i in range(6)]  # the rest are logged as left out
    assert facts["spent_s"] <= facts["budget_s"]
