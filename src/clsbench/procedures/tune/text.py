"""What ``clsbench tune`` prints (pure): the runner-up table, the winner, the command that reproduces it, what was
pruned, rejected or left out for the budget, and without a winner, why (:func:`no_winner_message`). Everything is
read from :func:`clsbench.procedures.tune.analysis.analyze_tune`'s dict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clsbench.analysis.stats import MIN_SAMPLES
from clsbench.core.options import profile_command
from clsbench.core.vocab import Reason, Status
from clsbench.procedures.tune.figures import GB, candidate_key
from clsbench.results.schema import DEFAULT_BACKEND, backend_suffix


def _describe(f: dict[str, Any]) -> str:
    parts = [f"{f['limited_latency_name']} {f['limited_latency_ms']:.3g} ms" if f.get("limited_latency_ms")
             is not None else None,
             f"{f['memory_kind']} {f['memory_bytes'] / GB:.3g} GB" if f.get("memory_bytes") is not None else None,
             f"{f['throughput_img_s']:,.1f} img/s" if f.get("throughput_img_s") is not None else None]
    figures = ", ".join(p for p in parts if p)
    data = f" on {f['data']}" if f.get("data") else ""
    return f"{f['mode']}{backend_suffix(f.get('backend'))} at batch {f['batch_size']}{data} ({figures})"


def _limits_text(limits: Mapping[str, Any], workload: str | None) -> str:
    parts = []
    if limits.get("max_latency_ms") is not None:
        what = "p50 request latency" if workload == "infer-latency" else "p99 latency per batch"
        parts.append(f"{what} <= {limits['max_latency_ms']:g} ms")
    if limits.get("max_memory_gb") is not None:
        parts.append(f"peak memory <= {limits['max_memory_gb']:g} GB")
    return " and ".join(parts) if parts else "no limits"


def no_winner_message(analysis: dict[str, Any]) -> tuple[str, str]:
    """The one-line error and hint when there is no winner (pure)."""
    limits = analysis.get("limits") or {}
    candidates = analysis.get("candidates") or []
    closest = analysis.get("closest")
    text = _limits_text(limits, analysis.get("workload"))
    real = [f for f in candidates if f.get("data")]
    ceilings = [f for f in candidates if f["verdict"] == "ceiling"]
    if analysis.get("data") and (real or ceilings) and not any(f["status"] == Status.OK for f in real):
        # Compute candidates qualified, but no pipeline fed one: say what each pipeline tried met.
        reasons = sorted({f"{f['data']}: {f['status']}: {f['detail'] or f['reason']}" for f in real} |
                         {f"{p['mode']}: {p['reason']}" for p in analysis.get("pruned") or []
                          if p.get("stage") == "pipeline"})
        return (f"no real-data setting ran successfully ({'; '.join(reasons) or 'none was measured'})",
                "see the table and the pruned lines; `clsbench diagnose MODEL --data DIR` measures the pipelines "
                "one by one")
    if not any(f["status"] == Status.OK for f in candidates):
        reasons = sorted({f"{f['status']}: {f['reason']}" for f in candidates})
        return (f"no configuration ran successfully ({'; '.join(reasons) or 'nothing measured'})",
                "see the table and each failure's reason; `clsbench run` one mode to investigate")
    if closest is None:
        rejected = [f for f in candidates if f["verdict"] == "rejected"]
        first = rejected[0] if rejected else None
        why = f": {first['mode']} batch {first['batch_size']}: {first['correctness']['reason']}" if first else ""
        return (f"every configuration within {text} was rejected by the correctness guard{why}",
                "see the table; fp32 eager is always correct, or loosen a tolerance deliberately (tolerances=...)")
    needed = []
    if limits.get("max_latency_ms") is not None and closest.get("limited_latency_ms") is not None \
            and closest["limited_latency_ms"] > limits["max_latency_ms"]:
        needed.append(f"--max-latency-ms to at least {closest['limited_latency_ms']:.3g}")
    if limits.get("max_memory_gb") is not None and closest.get("memory_bytes") is not None \
            and closest["memory_bytes"] > limits["max_memory_gb"] * GB:
        needed.append(f"--max-memory-gb to at least {closest['memory_bytes'] / GB:.3g}")
    if not needed:  # the closest is within the limits but was not checked or not correct: say so plainly
        return (f"no checked configuration meets {text}; the closest is {_describe(closest)}",
                "see the table")
    return (f"no configuration meets {text}; the closest is {_describe(closest)}",
            "raise " + " and ".join(needed) + ", or try a smaller batch with --batch-size")


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s" if seconds >= 60 else f"{seconds:.1f} s"


def render_tune(analysis: dict[str, Any]) -> str:
    """The runner-up table, the winner, the command that reproduces it and how long the search took."""
    from clsbench.report.table import render_rows

    workload = analysis.get("workload")
    what = "tune (exhaustive)" if analysis.get("exhaustive") else "tune"
    lines = [f"{what}: {analysis.get('model')} {workload} on {analysis.get('device')} | objective: "
             f"{analysis.get('objective')} | limits: {_limits_text(analysis.get('limits') or {}, workload)}", ""]
    candidates = analysis.get("candidates") or []
    with_backend = any((f.get("backend") or DEFAULT_BACKEND) != DEFAULT_BACKEND for f in candidates)
    with_rung = any(f.get("rung") for f in candidates)
    with_data = any(f.get("data") for f in candidates)
    header = ("rank", "mode", *(("backend",) if with_backend else ()), "batch", *(("rung",) if with_rung else ()),
              "img/s", "vs fp32", "p50 ms", "p99 ms", "memory", "outputs", "verdict")
    rows = [_candidate_row(f, with_backend, with_rung) for f in candidates]
    if with_data:  # the pipeline setting and the share of the synthetic ceiling, after the batch column
        at = header.index("batch") + 1
        header = (*header[:at], "data", "vs synth", *header[at:])
        rows = [(*row[:at], f.get("data") or "synthetic", _pct(f.get("ratio_to_synthetic")), *row[at:])
                for row, f in zip(rows, candidates, strict=True)]
    lines += render_rows(header, rows, {"rank", "batch", "img/s", "vs fp32", "vs synth", "p50 ms", "p99 ms",
                                        "memory"})
    footnote = _p99_footnote(candidates)
    if footnote:
        lines.append(footnote)
    lines.append("")
    lines += _outcome_lines(analysis)
    for pruned in analysis.get("pruned") or []:
        lines.append(f"pruned ({pruned['stage']}): {pruned['mode']} -> not tried {', '.join(pruned['variants'])}: "
                     f"{pruned['reason']}")
    lines += _left_out_lines(analysis.get("left_out") or [], analysis.get("plan") or [])
    for f in candidates:
        if f["verdict"] == "rejected":
            lines.append(f"rejected: {f['mode']}{backend_suffix(f.get('backend'))} batch {f['batch_size']}: "
                         f"{f['correctness'].get('reason')}")
    checks = analysis.get("checks") or 0
    took = analysis.get("search_s") if analysis.get("search_s") is not None else analysis.get("spent_s")
    budget = f", budget {format_duration(analysis['budget_s'])}" if analysis.get("budget_s") is not None else \
        ", no budget" if analysis.get("exhaustive") else ""
    count = analysis.get("measurements") or 0
    lines.append(f"search took {format_duration(took)}{budget} ({count} candidate{'' if count == 1 else 's'}, "
                 f"{len(analysis.get('trials') or [])} measured in rungs, "
                 f"{checks} output check{'' if checks == 1 else 's'})" if analysis.get("trials") else
                 f"search took {format_duration(took)} ({analysis.get('measurements')} measurements, "
                 f"{checks} output check{'' if checks == 1 else 's'})")
    return "\n".join(lines) + "\n"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.1f}%"


def _left_out_lines(left_out: Sequence[Mapping[str, Any]], plan: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per stage the plan left out up front (unless its candidates are listed), and per candidate (or
    check) the budget left out while the search ran, saying why."""
    listed = {entry.get("stage") for entry in left_out}
    lines = [f"left out for the budget: {stage['stage']} (up to {stage['candidates']} candidate(s)): "
             f"{stage.get('reason')}" for stage in plan if not stage.get("planned") and stage["stage"] not in listed]
    for entry in left_out:
        data = f" on {entry['data']}" if entry.get("data") else ""
        what = entry.get("stage") if entry.get("mode") is None else \
            f"{entry['mode']}{backend_suffix(entry.get('backend'))} batch {entry['batch_size']}{data} " \
            f"({entry['stage']})"
        lines.append(f"left out for the budget: {what}: {entry.get('reason')}")
    return lines


def _p99_footnote(candidates: list[dict[str, Any]]) -> str:
    """Why a candidate's ``p99 ms`` is ``-`` although its p50 is shown: too few timed batches for a p99."""
    short = [f for f in candidates if f.get("latency_p50_ms") is not None and f.get("latency_p99_ms") is None]
    if not short:
        return ""
    return (f"p99 -: {len(short)} candidate(s) timed fewer than {MIN_SAMPLES['p99']} batches in a repeat, too few "
            "for a p99 (a screening rung is short: a larger --budget times longer)")


def _candidate_row(f: dict[str, Any], with_backend: bool, with_rung: bool = False) -> tuple[str, ...]:
    """A candidate's row of the tune table (the backend column only when some candidate is not eager; the rung
    column, with the repeats behind the figure, for searches with rungs)."""
    from clsbench.report.table import fmt_ms, fmt_rate

    memory = "-" if f.get("memory_bytes") is None else f"{f['memory_bytes'] / GB:.2f} GB"
    backend = ((f.get("backend") or DEFAULT_BACKEND),) if with_backend else ()
    rung = (f"{f.get('rung') or '-'} x{f.get('repeats') or 0}",) if with_rung else ()
    return (str(f["rank"]), f["mode"], *backend, str(f["batch_size"]), *rung, fmt_rate(f.get("throughput_img_s")),
            "-" if f.get("vs_fp32") is None else f"{f['vs_fp32']:.2f}x", fmt_ms(f.get("latency_p50_ms")),
            fmt_ms(f.get("latency_p99_ms")), memory, _outputs_cell(f), _verdict_cell(f))


def _outputs_cell(f: dict[str, Any]) -> str:
    """The ``outputs`` column: the correctness check's error against fp32 eager, "reference" for fp32 eager
    itself, "check failed" when the check gave no figure, "-" when a candidate that ran was not checked."""
    correctness = f.get("correctness")
    if correctness is None:
        return "-" if f["status"] == Status.OK else ""
    if correctness.get("reference"):
        return "reference"
    if correctness.get("error") is None:
        return "check failed"
    return f"{correctness['error']:.1e}" + ("" if correctness.get("ok") else " (too far)")


def _verdict_cell(f: dict[str, Any]) -> str:
    """The ``verdict`` column: the verdict (WINNER in capitals) and, for the others that lost, why."""
    verdict = f["verdict"].upper() if f["verdict"] == "winner" else f["verdict"]
    if f["verdict"] == "failed":
        verdict += f": {f['reason']}"
    elif f["verdict"] == "skipped":
        verdict += f": {f['detail'] or f['reason']}"
    elif f["verdict"] == "over limit":
        verdict += ": " + "; ".join(f["violations"])
    elif f["verdict"] == "rejected":
        verdict += ": " + (f"{Reason.PARITY_FAILED}" if f.get("reason") == Reason.PARITY_FAILED else
                           "outputs differ from fp32 eager")
    return verdict


def _fed_line(winner: Mapping[str, Any]) -> str:
    """``tune --data``: the winner's share of the synthetic ceiling of its mode and batch, and whether it is fed."""
    from clsbench.procedures.diagnose import IDLE_LIMIT, INPUT_BOUND_RATIO

    ceiling = winner.get("ceiling_img_s")
    if ceiling is None or winner.get("ratio_to_synthetic") is None:
        return f"input: {winner['data']}: no synthetic ceiling of {winner['mode']} at batch {winner['batch_size']} " \
               "to compare with"
    idle = winner.get("idle_fraction")
    if winner.get("keeps_fed"):
        fed = "kept fed"
    elif winner["ratio_to_synthetic"] >= INPUT_BOUND_RATIO and idle is not None:
        fed = f"not kept fed: it sat idle waiting for data {_pct(idle)} of the time (above {IDLE_LIMIT:.0%})"
    else:
        fed = "not kept fed: the input pipeline limits training"
    return (f"input: {winner['data']}: {_pct(winner['ratio_to_synthetic'])} of the synthetic ceiling of "
            f"{winner['mode']} at batch {winner['batch_size']} ({ceiling:,.1f} img/s): {fed} (kept fed, as in "
            f"diagnose: at least {INPUT_BOUND_RATIO:.0%} of it, idle at most {IDLE_LIMIT:.0%})")


def _ahead_unconfirmed(candidates: Sequence[Mapping[str, Any]], winner: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The best candidate that passed its checks and scored above the winner at a lower rung (fewer repeats: the
    winner ranks first for its confirmation), or None."""
    score = winner.get("score")
    if score is None or score <= 0:
        return None
    ahead = [f for f in candidates if f.get("verdict") == "allowed" and f.get("score") is not None
             and f["score"] > score and f.get("rung_level", -1) < winner.get("rung_level", -1)]
    return max(ahead, key=lambda f: f["score"], default=None)


def _outcome_lines(analysis: dict[str, Any]) -> list[str]:
    """The lines under the table: the winner, how its outputs compare with fp32 eager's and the command that
    reproduces it; or, without a winner, why (:func:`no_winner_message`)."""
    winner = analysis.get("winner")
    if winner is None:
        message, _hint = no_winner_message(analysis)
        return [f"no winner: {message}"]
    speed = f", {winner['vs_fp32']:.2f}x fp32 eager" if winner.get("vs_fp32") is not None else ""
    confirmed = winner.get("confirmed")
    repeats = winner.get("repeats") or 0
    how = "" if confirmed is None else f"; confirmed over {repeats} repeats" if confirmed else \
        f"; from {repeats} repeat{'' if repeats == 1 else 's'}, unconfirmed"
    lines = [f"winner: {_describe(winner)}{speed}{how}"]
    faster = [f for f in analysis.get("candidates") or [] if f["verdict"] == "unchecked" and f["rank"] < winner["rank"]]
    if faster:
        ratio = f" ({faster[0]['vs_fp32']:.2f}x fp32 eager)" if faster[0].get("vs_fp32") is not None else ""
        more = f" and {len(faster) - 1} more" if len(faster) > 1 else ""
        lines.append(f"faster but unchecked: {_describe(faster[0])}{ratio}{more}: no output check vouches for "
                     "them (not run, e.g. left out for the budget), so they cannot win; a larger --budget checks them")
    ahead = _ahead_unconfirmed(analysis.get("candidates") or [], winner)
    if ahead is not None:
        repeats_ahead = ahead.get("repeats") or 0
        left_out = any(e.get("rung") == "confirm" and candidate_key(e) == candidate_key(ahead)
                       for e in analysis.get("left_out") or [])
        why = "its confirmation was left out for the budget" if left_out else "it was not among those confirmed"
        lines.append(f"ahead but unconfirmed: {_describe(ahead)}, {(ahead['score'] / winner['score'] - 1) * 100:.1f}% "
                     f"ahead in {repeats_ahead} repeat{'' if repeats_ahead == 1 else 's'} ({why}): which of the "
                     "two is faster is not settled; a larger --budget (or `tune --resume FILE --budget ...`) "
                     "confirms it")
    if winner.get("data"):
        lines.append(_fed_line(winner))
    correctness = winner.get("correctness") or {}
    if correctness.get("reference"):
        lines.append("outputs: fp32 eager is the reference")
    elif correctness.get("error") is not None:
        lines.append(f"outputs: {correctness['metric']} within {correctness['error']:.2g} of fp32 eager "
                     f"(tolerance {correctness['tolerance']:g})")
    elif not analysis.get("correctness_guard", True):
        lines.append("outputs: not checked (correctness guard off)")
    lines.append(f"reproduce: {analysis.get('command')}")
    if analysis.get("command"):  # where the winner's step time goes: one command away
        lines.append(f"profile: {profile_command(analysis['command'])}")
    return lines


__all__ = ["format_duration", "no_winner_message", "render_tune"]
