"""How far a default ``clsbench tune`` winner lies from the best an exhaustive search found (issue 18; pure).

Issue 18 asks that the default search's winner be within :data:`GOAL_PCT` of the best configuration an exhaustive
search (``tune --exhaustive``) finds on the same machine, and that the winner always be confirmed with the full
repeat protocol. :func:`compare_tunes` reads the two result files (nothing is measured) and derives:

- each search's winner (mode, batch, backend, real-data setting), its figure (median img/s, or median p50 request
  latency for infer-latency), the figure's spread and repeat count, and whether it was confirmed (the confirmation
  rung, more than one fresh repeat; a winner from one repeat is marked unconfirmed);
- the **gap**: the share of the exhaustive winner's score the default winner gives up,
  ``100 * (best - default) / best``, on tune's score (img/s; ``1000 / p50 ms`` for infer-latency, so that the gap
  of a latency is ``1 - p50_best / p50_default``), each winner's figure from its own file. A negative gap (the
  default winner measured faster) is within the goal. Whether the difference is significant is Welch's t-test on
  the two winners' per-repeat figures (:mod:`clsbench.analysis.significance`);
- when the two winners are different configurations: the default file's own figure for the exhaustive winner's
  configuration (and the rung it reached there) when the default search measured it, and the exhaustive file's
  figure for the default winner's configuration, with the gap inside the exhaustive file (one search, one run:
  no run-to-run difference between the two files in it);
- both search times (unfinished when the file has no ``search_s``: an interrupted search), and what the exhaustive
  search left out for its budget (then it is not complete, and says so).

Two files of different models, workloads, devices (device string, GPU or CPU model), input sizes or limits are
refused, as are a default file that is exhaustive and an exhaustive file that is not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clsbench.analysis.compare import per_repeat_values
from clsbench.analysis.significance import DEFAULT_ALPHA, welch_t_test
from clsbench.errors import InvalidInputError
from clsbench.procedures.tune.analysis import analyze_tune
from clsbench.results.facts import get_field
from clsbench.results.schema import DEFAULT_BACKEND, BenchmarkResult, Measurement, backend_suffix, data_label

#: The issue's goal: the default winner's score within this many percent of the exhaustive best's.
GOAL_PCT = 3.0
#: What must be equal in the two files' ``settings["tune"]`` for their winners to be comparable.
SAME = ("model", "workload", "device", "input_size", "limits")


def _facts(result: BenchmarkResult, name: str) -> dict[str, Any]:
    facts = result.settings.get("tune")
    if not isinstance(facts, dict) or not facts.get("model"):
        raise InvalidInputError(f"{name} is not a tune result file", "give two files written by clsbench tune -o")
    return facts


def hardware(result: BenchmarkResult, device: str) -> str | None:
    """The GPU (device ``cuda...``) or CPU model the file's environment names, or None when it names none."""
    field = "gpu.name" if device.startswith("cuda") else "cpu.model"
    value = get_field(result.environment, field)
    return str(value) if value and value != "n/a" else None  # "n/a": the environment could not read it


def check_comparable(default: BenchmarkResult, exhaustive: BenchmarkResult,
                     names: Sequence[str] = ("DEFAULT", "EXHAUSTIVE")) -> None:
    """Refuse two files whose winners cannot be compared (one line each, :class:`InvalidInputError`)."""
    a, b = _facts(default, names[0]), _facts(exhaustive, names[1])
    hint = "compare a default and an exhaustive tune of the same model, workload, device and limits"
    for key in SAME:
        if a.get(key) != b.get(key):
            raise InvalidInputError(f"{names[0]} and {names[1]} differ in {key.replace('_', ' ')}: "
                                    f"{a.get(key)!r} against {b.get(key)!r}", hint)
    device = str(a.get("device") or "cpu")
    machine_a, machine_b = hardware(default, device), hardware(exhaustive, device)
    if machine_a and machine_b and machine_a != machine_b:
        raise InvalidInputError(f"{names[0]} and {names[1]} were measured on different hardware: {machine_a!r} "
                                f"against {machine_b!r}", hint + ", on the same machine")
    if a.get("exhaustive"):
        raise InvalidInputError(f"{names[0]} is an exhaustive search", "give the default search first, then the "
                                "exhaustive one")
    if not b.get("exhaustive"):
        raise InvalidInputError(f"{names[1]} is not an exhaustive search", "make it with clsbench tune --exhaustive")


def _key(f: Mapping[str, Any]) -> tuple[str, int, str, str | None]:
    return (f["mode"], int(f["batch_size"]), f.get("backend") or DEFAULT_BACKEND, f.get("data"))


def _find(result: BenchmarkResult, key: tuple[str, int, str, str | None]) -> Measurement | None:
    return next((m for m in result.measurements
                 if (m.mode, m.batch_size, m.backend or DEFAULT_BACKEND, data_label(m.data)) == key), None)


def _figure(f: Mapping[str, Any], workload: str) -> float | None:
    return f.get("latency_p50_ms") if workload == "infer-latency" else f.get("throughput_img_s")


def _entry(f: Mapping[str, Any], workload: str) -> dict[str, Any]:
    """A candidate of an analysis as the comparison reports it."""
    return {"mode": f["mode"], "batch_size": f["batch_size"], "backend": f.get("backend") or DEFAULT_BACKEND,
            "data": f.get("data"), "figure": _figure(f, workload), "score": f.get("score"),
            "spread_pct": f.get("spread_pct"), "repeats": f.get("repeats"), "rung": f.get("rung"),
            "confirmed": f.get("confirmed"), "verdict": f.get("verdict")}


def _search_facts(analysis: Mapping[str, Any]) -> dict[str, Any]:
    left_out = analysis.get("left_out") or []
    unplanned = [s["stage"] for s in analysis.get("plan") or [] if not s.get("planned")]
    return {"search_s": analysis.get("search_s") if analysis.get("search_s") is not None
            else analysis.get("spent_s"), "finished": analysis.get("search_s") is not None,
            "budget_s": analysis.get("budget_s"), "left_out": len(left_out), "stages_left_out": unplanned,
            "candidates": analysis.get("measurements") or 0}


def gap_pct(default_score: float | None, best_score: float | None) -> float | None:
    """``100 * (best - default) / best`` on tune's score (higher is better); None without both scores."""
    if default_score is None or not best_score:
        return None
    return 100.0 * (best_score - default_score) / best_score


def _side(analysis: Mapping[str, Any], workload: str) -> dict[str, Any]:
    winner = analysis.get("winner")
    return {"winner": _entry(winner, workload) if winner is not None else None, **_search_facts(analysis)}


def _cross(analysis: Mapping[str, Any], key: tuple[str, int, str, str | None],
           workload: str) -> dict[str, Any] | None:
    """The candidate ``key`` as the other search measured it (None: it did not)."""
    f = next((c for c in analysis.get("candidates") or [] if _key(c) == key), None)
    return _entry(f, workload) if f is not None and f.get("score") is not None else None


def compare_tunes(default: BenchmarkResult, exhaustive: BenchmarkResult, *, goal_pct: float = GOAL_PCT,
                  alpha: float = DEFAULT_ALPHA, names: Sequence[str] = ("DEFAULT", "EXHAUSTIVE")) -> dict[str, Any]:
    """The default search's winner against the exhaustive search's (module docstring; pure).

    Raises:
        InvalidInputError: the files cannot be compared (:func:`check_comparable`).
    """
    check_comparable(default, exhaustive, names)
    facts = default.settings["tune"]
    workload = str(facts["workload"])
    a, b = analyze_tune(default), analyze_tune(exhaustive)
    out: dict[str, Any] = {
        "model": facts["model"], "workload": workload, "device": facts["device"],
        "hardware": hardware(default, str(facts["device"])), "objective": a.get("objective"),
        "limits": a.get("limits") or {}, "goal_pct": goal_pct, "names": list(names),
        "default": _side(a, workload), "exhaustive": _side(b, workload),
        "same_configuration": None, "gap_pct": None, "within_goal": None, "significance": None,
        "default_of_best": None, "exhaustive_of_default": None, "gap_in_exhaustive_pct": None,
    }
    mine, best = out["default"]["winner"], out["exhaustive"]["winner"]
    if mine is None or best is None:
        return out
    out["same_configuration"] = _key(mine) == _key(best)
    out["gap_pct"] = gap_pct(mine["score"], best["score"])
    out["within_goal"] = out["gap_pct"] is not None and out["gap_pct"] <= goal_pct
    ours, theirs = _find(default, _key(mine)), _find(exhaustive, _key(best))
    if ours is not None and theirs is not None:
        out["significance"] = welch_t_test(per_repeat_values(ours), per_repeat_values(theirs), alpha).describe()
    if not out["same_configuration"]:
        out["default_of_best"] = _cross(a, _key(best), workload)
        out["exhaustive_of_default"] = _cross(b, _key(mine), workload)
        if out["exhaustive_of_default"] is not None:
            out["gap_in_exhaustive_pct"] = gap_pct(out["exhaustive_of_default"]["score"], best["score"])
    return out


# ------------------------------------------------------------------------------------------------ the text


def _figure_text(entry: Mapping[str, Any], workload: str) -> str:
    if entry.get("figure") is None:
        return "-"
    return f"{entry['figure']:.3f} ms p50" if workload == "infer-latency" else f"{entry['figure']:,.1f} img/s"


def _configuration(entry: Mapping[str, Any]) -> str:
    data = f" on {entry['data']}" if entry.get("data") else ""
    return f"{entry['mode']}{backend_suffix(entry.get('backend'))} batch {entry['batch_size']}{data}"


def _how(entry: Mapping[str, Any]) -> str:
    """The protocol behind a figure: its spread and repeats; for a winner, confirmed or not."""
    repeats = entry.get("repeats") or 0
    spread = f", spread {entry['spread_pct']:.1f}%" if entry.get("spread_pct") is not None else ""
    if entry.get("confirmed"):
        return f"confirmed over {repeats} repeats{spread}"
    if entry.get("verdict") == "winner":
        return f"from {repeats} repeat{'' if repeats == 1 else 's'}, unconfirmed{spread}"
    return f"{entry.get('rung') or 'no'} rung, {repeats} repeat{'' if repeats == 1 else 's'}{spread}"


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    whole = int(round(max(0.0, value)))
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m{whole % 60:02d}s" if whole >= 3600 else \
        f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{max(0.0, value):.1f}s"


def _search_line(label: str, side: Mapping[str, Any]) -> str:
    budget = f"budget {_seconds(side['budget_s'])}" if side.get("budget_s") is not None else "no budget"
    state = "" if side.get("finished") else ", unfinished (interrupted: continue it with clsbench tune --resume)"
    left = f", {side['left_out']} left out for the budget" if side.get("left_out") else ""
    stages = f", stages left out up front: {', '.join(side['stages_left_out'])}" if side.get("stages_left_out") \
        else ""
    return f"{label} search: {_seconds(side.get('search_s'))} ({budget}; {side.get('candidates')} candidates" \
           f"{left}{stages}){state}"


def render_tune_comparison(c: Mapping[str, Any]) -> str:
    """The comparison as text: the two winners, the gap and its verdict, cross figures, search times."""
    workload = c["workload"]
    limits = c.get("limits") or {}
    named = [f"{k} {v:g}" for k, v in limits.items() if v is not None]
    lines = [f"tune vs exhaustive: {c['model']} {workload} on {c['device']}"
             + (f" ({c['hardware']})" if c.get("hardware") else "")
             + f" | objective: {c.get('objective')} | limits: {', '.join(named) or 'none'}"]
    for label, name in (("default", c["names"][0]), ("exhaustive", c["names"][1])):
        winner = c[label]["winner"]
        if winner is None:
            lines.append(f"{label} winner ({name}): none (see clsbench show {name})")
        else:
            lines.append(f"{label} winner ({name}): {_configuration(winner)}: {_figure_text(winner, workload)} "
                         f"({_how(winner)})")
    if c.get("gap_pct") is None:
        lines.append("gap: - (a search without a winner)")
    else:
        same = "the same configuration" if c["same_configuration"] else "a different configuration"
        verdict = "yes" if c["within_goal"] else "no"
        lines.append(f"gap of the default winner to the exhaustive best: {c['gap_pct']:.2f}% ({same}); within "
                     f"{c['goal_pct']:g}%: {verdict}")
        if c.get("significance"):
            lines.append(f"difference between the two winners' repeats: {c['significance']}")
    if c.get("same_configuration") is False:
        theirs = c.get("default_of_best")
        lines.append("the default search's figure for the exhaustive winner: " + (
            f"{_figure_text(theirs, workload)} ({_how(theirs)})" if theirs is not None else "not measured"))
        ours = c.get("exhaustive_of_default")
        if ours is not None:
            lines.append(f"the exhaustive search's figure for the default winner: {_figure_text(ours, workload)} "
                         f"({_how(ours)}); gap within the exhaustive search {c['gap_in_exhaustive_pct']:.2f}%")
    lines.append(_search_line("default", c["default"]))
    lines.append(_search_line("exhaustive", c["exhaustive"]))
    side = c["exhaustive"]
    if side.get("left_out") or side.get("stages_left_out") or not side.get("finished"):
        lines.append(f"warning: the exhaustive search is not complete; continue it with clsbench tune --resume "
                     f"{c['names'][1]} (a larger --budget if it ran out), then compare again")
    for label in ("default", "exhaustive"):
        winner = c[label]["winner"]
        if winner is not None and not winner.get("confirmed"):
            lines.append(f"warning: the {label} winner was not confirmed with the full repeats")
    return "\n".join(lines) + "\n"


__all__ = ["GOAL_PCT", "check_comparable", "compare_tunes", "gap_pct", "hardware", "render_tune_comparison"]
