"""The analysis of a tune result file (pure: reads the file, measures nothing): :func:`analyze_tune`.

Like a sweep, the search's own facts are stored under ``settings["tune"]`` (limits, rules, pruned branches, the
correctness checks, the budget, the plan, every trial with its estimated and actual cost, what was left out, how long
the search took); the ranking (highest rung first, then score), each candidate's verdict, the winner (confirmed or
not) and the command that reproduces it are derived here on reading, so that ``show``, ``compare`` and the search
itself agree (:mod:`clsbench.procedures.tune.text` prints the result).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clsbench.core.options import reproduce_command
from clsbench.core.plan import Cell, RunPlan
from clsbench.core.vocab import Reason, Status
from clsbench.procedures.tune.figures import (
    candidate_figures,
    candidate_key,
    limit_violations,
    number,
    overshoot,
    parity_verdict,
    rank_key,
)
from clsbench.results.schema import DEFAULT_BACKEND, BenchmarkResult, Measurement


def analyze_tune(result: BenchmarkResult) -> dict[str, Any]:
    """Rank a tune's candidates, pick the winner and build the command that reproduces it (pure: reads the file).

    Verdicts: ``winner``; ``allowed`` (within the limits; checked and passed, or not checked because a better
    candidate passed); ``rejected`` (the correctness guard); ``over limit``; ``failed``; ``skipped``.
    """
    facts = result.settings.get("tune") or {}
    workload = facts.get("workload") or (result.measurements[0].workload if result.measurements else None)
    limits = facts.get("limits") or {}
    guard = facts.get("correctness_guard", True)
    checks = {(c["mode"], c["batch_size"], c.get("backend") or DEFAULT_BACKEND): c
              for c in facts.get("correctness") or []}
    rungs = _latest_rungs(facts.get("trials") or [])
    candidates = []
    for m in result.measurements:
        if facts and (m.model, m.workload, m.device) != (facts.get("model"), workload, facts.get("device")):
            continue
        f = _judged_candidate(m, workload or m.workload, limits, checks, guard)
        f["rung"] = rungs.get((*candidate_key(f), f.get("data")))
        f["rung_level"] = _RUNG_LEVELS.get(f["rung"], -1)
        f["repeats"] = sum(1 for r in m.repeats if r.get("status", Status.OK) == Status.OK)
        f["data_settings"] = m.data
        f["idle_fraction"] = number(((m.summary or {}).get("data") or {}).get("idle_fraction"))
        candidates.append(f)
    if facts.get("data"):
        _judge_against_ceilings(candidates)
    candidates.sort(key=lambda f: (bool(facts.get("data")) and f.get("data") is None, *rank_key(f)))
    winner = next((f for f in candidates if f["verdict"] == "allowed"
                   and (not guard or (f["correctness"] or {}).get("ok"))), None)
    if guard:  # allowed by the limits, but no output check vouches for them: they cannot win, and say why
        for f in candidates:
            if f["verdict"] == "allowed" and not (f["correctness"] or {}).get("ok"):
                f["verdict"] = "unchecked"
    if winner is not None:
        winner["verdict"] = "winner"
        # Confirmed: the full protocol (more than one fresh repeat) of the confirmation rung; files without rungs
        # (format 1) say nothing either way.
        winner["confirmed"] = (winner["rung"] == "confirm" and winner["repeats"] > 1) if rungs else None
    baseline = max((f["score"] for f in candidates if f["mode"] == "fp32" and f["backend"] == DEFAULT_BACKEND
                    and f.get("data") is None and f["score"] is not None), default=None)
    for rank, f in enumerate(candidates, start=1):
        f["rank"] = rank
        f["vs_fp32"] = f["score"] / baseline if baseline and f["score"] is not None else None
    command = _winner_command(result, facts, workload, winner) if winner is not None else None
    # Ceilings never win: with real-data cells measured, the closest is one of them.
    eligible = [f for f in candidates if f.get("data")] or candidates
    closest = _closest(eligible, limits) if winner is None else None
    return {
        "model": facts.get("model"),
        "workload": workload,
        "device": facts.get("device"),
        "objective": facts.get("objective"),
        "limits": limits,
        "correctness_guard": guard,
        "candidates": candidates,
        "winner": winner,
        "closest": closest,
        "command": command,
        "pruned": facts.get("pruned") or [],
        "search_s": facts.get("search_s"),
        "budget_s": facts.get("budget_s"),
        "spent_s": facts.get("spent_s"),
        "plan": facts.get("plan") or [],
        "left_out": facts.get("left_out") or [],
        "trials": facts.get("trials") or [],
        "interrupted": bool(rungs) and facts.get("search_s") is None,
        "data": facts.get("data"),
        "exhaustive": bool(facts.get("exhaustive")),
        "measurements": len(candidates),
        "checks": len(checks),
    }


_RUNG_LEVELS = {"screen": 0, "longer": 1, "confirm": 2}


def _latest_rungs(trials: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int, str, str | None], str]:
    """Each candidate's highest rung among its finished trials (pure); keyed by mode, batch, backend and the data
    label (None: synthetic)."""
    out: dict[tuple[str, int, str, str | None], str] = {}
    for t in trials:
        if t.get("actual_s") is None or t.get("rung") not in _RUNG_LEVELS:
            continue
        key = (t["mode"], int(t["batch_size"]), t.get("backend") or DEFAULT_BACKEND, t.get("data"))
        if _RUNG_LEVELS[t["rung"]] >= _RUNG_LEVELS.get(out.get(key), -1):
            out[key] = t["rung"]
    return out


def _judged_candidate(m: Measurement, workload: str, limits: Mapping[str, Any],
                      checks: Mapping[tuple[str, int, str], dict[str, Any]], guard: bool) -> dict[str, Any]:
    """One measurement as a candidate row (pure): its figures, the limits it breaks, its correctness verdict and
    its verdict before ranking (``allowed``, ``rejected``, ``over limit``, or the status when it did not run ok).

    Correctness comes from the tune's own output check, overridden by a backend's parity check when there is no
    tune check or the parity check failed; fp32 eager, never checked, is the reference when the guard is on.
    """
    f = candidate_figures(m, workload)
    f["violations"] = limit_violations(f, limits) if m.status == Status.OK else []
    f["correctness"] = checks.get(candidate_key(f))
    parity = parity_verdict(m)
    if parity is not None and (f["correctness"] is None or not parity["ok"]):
        f["correctness"] = parity  # a backend's own check, also with the guard off: a failed one never wins
    if m.mode == "fp32" and m.backend == DEFAULT_BACKEND and f["correctness"] is None and guard:
        f["correctness"] = {"ok": True, "reason": None, "error": 0.0, "reference": True}
    if m.status != Status.OK:
        f["verdict"] = m.status
    elif parity is not None and not parity["ok"]:
        f["verdict"] = "rejected"
        f["reason"] = Reason.PARITY_FAILED
    elif f["violations"]:
        f["verdict"] = "over limit"
    elif f["correctness"] is not None and not f["correctness"].get("ok"):
        f["verdict"] = "rejected"
    else:
        f["verdict"] = "allowed"
    return f


def _judge_against_ceilings(candidates: list[dict[str, Any]]) -> None:
    """``tune --data``: each real-data candidate's synthetic ceiling (the synthetic candidate of the same mode, batch
    and backend), its ratio to it and whether the pipeline keeps that ceiling fed (``diagnose``'s rule,
    :func:`clsbench.procedures.diagnose.classify`: at least :data:`~clsbench.procedures.diagnose.INPUT_BOUND_RATIO`
    of it, and not idle beyond its limit); a synthetic candidate that would have been allowed is a ``ceiling``, never
    the winner (pure)."""
    from clsbench.procedures.diagnose import classify

    ceilings = {candidate_key(f): f for f in candidates if f.get("data") is None}
    for f in candidates:
        if f.get("data") is None:
            if f["verdict"] == "allowed":
                f["verdict"] = "ceiling"
            continue
        ceiling = ceilings.get(candidate_key(f))
        rate = ceiling.get("throughput_img_s") if ceiling is not None and ceiling["status"] == Status.OK else None
        f["ceiling_img_s"] = rate
        f["ratio_to_synthetic"] = f["throughput_img_s"] / rate if rate and f["throughput_img_s"] is not None \
            else None
        verdict = classify({"ratio_to_synthetic": f["ratio_to_synthetic"], "idle_fraction": f.get("idle_fraction")},
                           None)
        f["keeps_fed"] = None if verdict is None else verdict != "input-bound"


def _winner_command(result: BenchmarkResult, facts: Mapping[str, Any], workload: str | None,
                    winner: dict[str, Any]) -> str | None:
    """The command that measures the winner again with the tune's settings; None when the file's settings do not
    make a plan (a hand-edited or partial file)."""
    try:
        plan = RunPlan.from_dict(result.settings)
    except (KeyError, TypeError, ValueError):
        return None
    from clsbench.core.data_settings import DataSettings

    data = DataSettings.from_dict(winner["data_settings"]) if winner.get("data_settings") else None
    return reproduce_command(plan, Cell(facts.get("model") or "", workload or "", winner["mode"],
                                        winner["batch_size"], facts.get("device") or "cpu",
                                        facts.get("input_size"), data=data, backend=winner["backend"]))


def _closest(candidates: list[dict[str, Any]], limits: Mapping[str, Any]) -> dict[str, Any] | None:
    """Without a winner: the candidate that ran and was not rejected and lies nearest the limits (the smallest
    overshoot, then the best score), to say how far the limits would have to move; None when there is none."""
    pool = [f for f in candidates if f["status"] == Status.OK and f["verdict"] != "rejected"]
    if not pool:
        return None
    return min(pool, key=lambda f: (overshoot(f, limits), -(f["score"] or 0.0)))


__all__ = ["analyze_tune"]
