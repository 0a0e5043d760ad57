"""The edges of the server-QPS search (serving/search.py) that mutation testing found unpinned: a bracket exactly
at the resolution, the floor reached exactly, a start below the floor, when ``hopeless`` is asked, the growth
factor, a failure on the first run, and the parameters the outcome records. A scripted server stands in for
LoadGen: ``verdict(target)`` says VALID (True), INVALID (False) or a failed run (None)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clsbench.serving import records
from clsbench.serving.search import bound_text, converged, search_max_qps, unfinished


def scripted(verdict: Callable[[float], bool | None]) -> tuple[Callable[[float, str], dict[str, Any]], list]:
    calls: list[tuple[float, str]] = []

    def run_step(target: float, role: str) -> dict[str, Any]:
        calls.append((target, role))
        valid = verdict(target)
        if valid is None:
            return {"error": "server_error: gone", "target": target}
        return {"loadgen": {"validity": "VALID" if valid else "INVALID"}, "error": None, "target": target}

    return run_step, calls


def test_a_bracket_exactly_as_wide_as_the_resolution_is_done() -> None:
    run_step, calls = scripted(lambda t: t <= 70.0)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=64.0, growth=1.25, resolution=0.25)
    assert calls == [(64.0, "bracket"), (80.0, "bracket")]  # 80 - 64 = 16 = 25% of 64: no bisection
    assert outcome["stopped_by"] == "resolution"
    assert (outcome["lo_qps"], outcome["hi_qps"], outcome["best_qps"], outcome["steps"]) == (64.0, 80.0, 64.0, 2)


def test_a_bracket_a_little_wider_than_the_resolution_is_bisected() -> None:
    run_step, calls = scripted(lambda t: t <= 70.0)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=64.0, growth=1.25, resolution=0.24)
    assert calls[2] == (72.0, "bisect")
    assert outcome["hi_qps"] == 72.0 and outcome["stopped_by"] == "resolution"


def test_the_floor_reached_exactly_ends_the_downward_bracket() -> None:
    run_step, calls = scripted(lambda t: False)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=3.0, floor_qps=1.0)
    assert [t for t, _ in calls] == [3.0, 1.5, 1.0]  # 1.5 / 2 = 0.75 is raised to the floor, then the floor fails
    assert outcome["stopped_by"] == "floor" and outcome["best_qps"] is None
    assert outcome["lo_qps"] is None and outcome["hi_qps"] == 1.0


def test_a_start_below_the_floor_starts_at_the_floor() -> None:
    run_step, calls = scripted(lambda t: t <= 2.5)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=0.25, floor_qps=2.0, resolution=0.5)
    assert calls[0] == (2.0, "bracket")
    assert outcome["best_qps"] == 2.0 and outcome["start_qps"] == 0.25


def test_hopeless_is_asked_about_the_invalid_run_only_while_going_down() -> None:
    asked: list[float] = []

    def hopeless(record: dict[str, Any]) -> bool:
        asked.append(record["target"])
        return True

    run_step, calls = scripted(lambda t: t <= 150.0)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=100.0, hopeless=hopeless, resolution=0.1)
    assert asked == [] and outcome["stopped_by"] == "resolution"  # above a VALID run, an INVALID one is a bound
    run_step, calls = scripted(lambda t: t <= 10.0)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=100.0, hopeless=lambda r: r["target"] < 40)
    assert [t for t, _ in calls] == [100.0, 50.0, 25.0]
    assert outcome["stopped_by"] == "hopeless" and outcome["hi_qps"] == 25.0


def test_the_growth_factor_sets_each_bracketing_step() -> None:
    run_step, calls = scripted(lambda t: t <= 100.0)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=10.0, growth=4.0, resolution=1.0)
    assert [t for t, _ in calls][:3] == [10.0, 40.0, 160.0]
    assert outcome["growth"] == 4.0 and outcome["resolution"] == 1.0
    run_step, calls = scripted(lambda t: t <= 5.0)
    search_max_qps(run_step, records.is_valid, start_qps=160.0, growth=4.0, resolution=1.0)
    assert [t for t, _ in calls][:3] == [160.0, 40.0, 10.0]


def test_a_failure_on_the_first_run_leaves_no_answer() -> None:
    run_step, calls = scripted(lambda t: None)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=100.0)
    assert len(calls) == 1
    assert outcome["stopped_by"] == "error" and outcome["steps"] == 0
    assert outcome["best_qps"] is None and outcome["lo_qps"] is None and outcome["hi_qps"] is None


def test_max_steps_counts_runs_and_keeps_the_bracket_so_far() -> None:
    run_step, calls = scripted(lambda t: t <= 130.0)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=100.0, max_steps=3, resolution=0.01)
    assert [t for t, _ in calls] == [100.0, 200.0, 150.0]
    assert outcome["stopped_by"] == "max_steps" and outcome["steps"] == 3
    assert (outcome["lo_qps"], outcome["hi_qps"], outcome["best_qps"]) == (100.0, 150.0, 100.0)


def test_the_outcome_records_the_start_as_a_float() -> None:
    run_step, _ = scripted(lambda t: t <= 3.0)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=2, resolution=0.5)
    assert outcome["start_qps"] == 2.0 and isinstance(outcome["start_qps"], float)


def test_a_bracket_closed_by_the_last_step_allowed_is_an_answer_not_a_bound() -> None:
    # start 64, growth 1.25, capacity 70: 64 VALID, 80 INVALID, and the two steps allowed are spent; 80 - 64 is
    # exactly 25% of 64, the resolution asked for, so the search converged on its last step
    run_step, _ = scripted(lambda t: t <= 70.0)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=64, growth=1.25, resolution=0.25, max_steps=2)
    assert (outcome["lo_qps"], outcome["hi_qps"], outcome["steps"]) == (64.0, 80.0, 2)
    assert outcome["stopped_by"] == "resolution" and outcome["converged"] is True
    wider = search_max_qps(scripted(lambda t: t <= 70.0)[0], records.is_valid, start_qps=64, growth=1.25,
                           resolution=0.2, max_steps=2)
    assert wider["stopped_by"] == "max_steps" and wider["converged"] is False


# ------------------------------------------------------------------------------------- an unfinished search
def test_a_stored_converged_flag_wins_and_an_old_file_is_read_from_stopped_by() -> None:
    assert converged({"converged": False, "stopped_by": "resolution"}) is False
    assert converged({"converged": True, "stopped_by": "max_steps"}) is True
    assert converged({"stopped_by": "resolution"}) is True  # written before `converged` was stored
    assert converged({"stopped_by": "max_steps"}) is False


def test_an_unfinished_search_keeps_its_answer_bracket_and_width() -> None:
    run_step, _ = scripted(lambda t: t <= 130.0)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=100.0, max_steps=3, resolution=0.02)
    state = unfinished(outcome)
    assert state == {"best_qps": 100.0, "steps": 3, "stopped_by": "max_steps", "lo_qps": 100.0, "hi_qps": 150.0,
                     "width": 0.5, "resolution": 0.02}
    assert bound_text(state) == ">= 100 qps; search stopped after 3 steps, bracket 100-150 (50% wide, resolution 2%)"


def test_bound_text_for_a_failed_run_an_open_bracket_and_a_file_without_a_resolution() -> None:
    base = {"best_qps": 1200.0, "steps": 4, "lo_qps": 1200.0}
    assert bound_text({**base, "stopped_by": "error", "hi_qps": None}) == (
        ">= 1,200 qps; search ended by a failed run after 4 steps, no INVALID target above it yet")
    assert bound_text({**base, "stopped_by": "interrupted", "hi_qps": 1500.0, "width": 0.25}) == (
        ">= 1,200 qps; search stopped (interrupted) after 4 steps, bracket 1,200-1,500 (25% wide)")
