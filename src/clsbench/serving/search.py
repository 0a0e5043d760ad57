"""The server-QPS search: the highest target QPS whose LoadGen run is VALID, to a stated resolution.

1. Bracket: run at the start target; while VALID, multiply the target by :data:`~.config.SEARCH_GROWTH`; while
   INVALID, divide it, down to :data:`~.config.MIN_TARGET_QPS`. The bracket is the highest VALID target below the
   lowest INVALID one.
2. Bisect: run at the bracket's midpoint and move the end whose verdict it shares, until the bracket is narrower
   than ``resolution`` times its lower end (2%: the answer is within 2% of the boundary the runs saw).

Each step is a full LoadGen run, made by the ``run_step(target_qps, role)`` function the caller passes, which
returns that run's record; the search itself never touches LoadGen, a model or a clock, so it is tested with a fake
server of known capacity. A step whose record carries an ``error`` (the model failed, the server is gone) ends the
search. The answer is the highest VALID target seen; when a VALID run lies above an INVALID one (noise at the
boundary), the outcome says so.

The search *converged* only when it stopped on the resolution; stopped any other way (``max_steps``, ``error``)
with a VALID target, its answer is a lower bound: :func:`unfinished` says so, with the bracket the runs left.

Going down stops early when the caller's ``hopeless(record)`` says a run proves that no lower target can be VALID
(for the Server scenario: the latency bound was missed while the server sat mostly idle, so the bound is below what
one request costs, not a matter of load).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clsbench.serving.config import DEFAULT_SEARCH_RESOLUTION, MAX_SEARCH_STEPS, MIN_TARGET_QPS, SEARCH_GROWTH

StepFunction = Callable[[float, str], dict[str, Any]]
ValidFunction = Callable[[dict[str, Any]], bool]


def search_max_qps(run_step: StepFunction, is_valid: ValidFunction, *, start_qps: float,
                   resolution: float = DEFAULT_SEARCH_RESOLUTION, growth: float = SEARCH_GROWTH,
                   floor_qps: float = MIN_TARGET_QPS, max_steps: int = MAX_SEARCH_STEPS,
                   hopeless: ValidFunction | None = None) -> dict[str, Any]:
    """Search the highest VALID target QPS (see the module docstring).

    Args:
        run_step: runs one LoadGen run at a target (``role`` is ``"bracket"`` or ``"bisect"``) and returns its
            record.
        is_valid: whether a record is a VALID run.
        start_qps: the first target.
        resolution: stop when ``hi - lo <= resolution * lo``.
        growth: the bracketing factor.
        floor_qps: the lowest target tried; INVALID there means no target meets the bound.
        max_steps: the most runs the search makes.
        hopeless: whether an INVALID record proves no lower target can be VALID (stops the downward bracket).

    Returns:
        ``best_qps`` (None if no run was VALID), the final bracket ``lo_qps`` / ``hi_qps`` (None where not found),
        ``steps``, ``stopped_by`` (``resolution``, ``floor``, ``hopeless``, ``max_steps`` or ``error``),
        ``converged`` (True only when the bracket closed to the resolution, on the last step allowed included) and
        the search parameters. (Files before 2026-12-06 also hold ``monotonic``, always true: the search never runs a
        target above its lowest INVALID one or below its highest VALID one, so it cannot see a non-monotonic pair.)
    """
    lo: float | None = None  # highest VALID target of the bracket
    hi: float | None = None  # lowest INVALID target of the bracket
    seen: list[tuple[float, bool]] = []
    stopped_by = "max_steps"

    last: dict[str, Any] = {}

    def step(target: float, role: str) -> bool | None:
        record = run_step(target, role)
        last["record"] = record
        if record.get("error"):
            return None
        valid = bool(is_valid(record))
        seen.append((target, valid))
        return valid

    target = max(float(start_qps), floor_qps)
    while len(seen) < max_steps:
        if lo is not None and hi is not None:
            if _closed(lo, hi, resolution):
                stopped_by = "resolution"
                break
            target, role = (lo + hi) / 2.0, "bisect"
        else:
            role = "bracket"
        verdict = step(target, role)
        if verdict is None:
            stopped_by = "error"
            break
        if verdict:
            lo = target if lo is None else max(lo, target)
            if hi is None:
                target = target * growth
        else:
            hi = target if hi is None else min(hi, target)
            if lo is None:
                why = _why_not_lower(target, floor_qps, hopeless, last["record"])
                if why:
                    stopped_by = why
                    break
                target = max(target / growth, floor_qps)
    if stopped_by == "max_steps" and _closed(lo, hi, resolution):
        stopped_by = "resolution"  # the last run allowed closed the bracket: that is an answer, not a bound
    valid_targets = [t for t, ok in seen if ok]
    return {
        "best_qps": max(valid_targets) if valid_targets else None,
        "lo_qps": lo,
        "hi_qps": hi,
        "steps": len(seen),
        "stopped_by": stopped_by,
        "converged": stopped_by == "resolution",
        "start_qps": float(start_qps),
        "resolution": resolution,
        "growth": growth,
    }


def _why_not_lower(target: float, floor_qps: float, hopeless: ValidFunction | None,
                   record: dict[str, Any]) -> str | None:
    """Why an INVALID target with no VALID one below ends the search (``floor``, ``hopeless``), or None to go lower."""
    if target <= floor_qps:
        return "floor"
    if hopeless is not None and hopeless(record):
        return "hopeless"
    return None


def _closed(lo: float | None, hi: float | None, resolution: float) -> bool:
    """Whether the bracket is found and no wider than ``resolution`` of its lower end."""
    return lo is not None and hi is not None and hi - lo <= resolution * lo


def converged(outcome: dict[str, Any]) -> bool:
    """Whether a stored search outcome converged to its resolution; files written before ``converged`` was stored
    are read from ``stopped_by``."""
    if "converged" in outcome:
        return bool(outcome["converged"])
    return outcome.get("stopped_by") == "resolution"


def unfinished(outcome: dict[str, Any]) -> dict[str, Any] | None:
    """What a search that found a VALID target but did not converge leaves: its answer is a lower bound.

    Returns None when it converged or found no VALID target (then there is no answer to bound); else ``best_qps``,
    ``steps``, ``stopped_by``, ``lo_qps`` and ``hi_qps`` (None: no INVALID target above was seen), the bracket's
    ``width`` relative to its lower end (None without an upper end) and the ``resolution`` asked for.
    """
    best = outcome.get("best_qps")
    if best is None or converged(outcome):
        return None
    lo, hi = outcome.get("lo_qps"), outcome.get("hi_qps")
    lo = best if lo is None else lo
    return {"best_qps": best, "steps": outcome.get("steps"), "stopped_by": outcome.get("stopped_by"),
            "lo_qps": lo, "hi_qps": hi, "width": (hi - lo) / lo if hi is not None and lo else None,
            "resolution": outcome.get("resolution")}


def bound_text(state: dict[str, Any]) -> str:
    """An unfinished search's answer in words: ``>= 830 qps; search stopped after 4 steps, bracket 830-968 (17% wide,
    resolution 2%)``."""
    why = {"max_steps": f"search stopped after {state['steps']} steps",
           "error": f"search ended by a failed run after {state['steps']} steps"}.get(
        state.get("stopped_by") or "", f"search stopped ({state.get('stopped_by')}) after {state['steps']} steps")
    if state.get("hi_qps") is None:
        bracket = "no INVALID target above it yet"
    else:
        bracket = f"bracket {state['lo_qps']:,.0f}-{state['hi_qps']:,.0f}"
        if state.get("width") is not None:
            bracket += f" ({state['width'] * 100:.0f}% wide"
            bracket += f", resolution {state['resolution'] * 100:g}%)" if state.get("resolution") else ")"
    return f">= {state['best_qps']:,.0f} qps; {why}, {bracket}"
