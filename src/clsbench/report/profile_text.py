"""Profiles in words and tables (pure: from the stored summary alone, :mod:`clsbench.analysis.profile`):
the whole profile that ``clsbench profile`` prints, and the one row per measurement that ``show`` prints for a
``run --profile`` result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clsbench.analysis.profile import IDLE, OTHER, PHASES, SPLIT_ORDER
from clsbench.core.text_table import cut, fmt_ms, text_table
from clsbench.core.vocab import Status

#: How each part of the split is named in tables.
PART_NAMES = {"data_wait": "data wait", "copy": "copy", "forward": "forward", "backward": "backward",
              "optimizer": "optimizer", OTHER: "other", IDLE: "idle"}
#: Kernel names are C++ templates hundreds of characters long: tables keep this many.
NAME_WIDTH = 72
MIB = 1024 * 1024


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100.0 * share:.1f}%"


def _bytes(value: float | None, *, signed: bool = False) -> str:
    if value is None:
        return "-"
    text = f"{value / MIB:,.1f} MiB" if abs(value) < 1024 * MIB else f"{value / MIB / 1024:,.2f} GiB"
    return f"+{text}" if signed and value >= 0 else text


def shown_parts(summary: Mapping[str, Any]) -> list[str]:
    """The parts of the split worth a row: every phase the step entered, then other, then idle (on a GPU)."""
    split = summary.get("split_ms") or {}
    host = summary.get("host_phase_ms") or {}
    parts = [p for p in PHASES if (split.get(p) or 0) > 0 or (host.get(p) or 0) > 0]
    return parts + [p for p in (OTHER, IDLE) if split.get(p) is not None]


def split_lines(summary: Mapping[str, Any]) -> list[str]:
    """The split table: per part its time per step, its share of the step, and on a GPU the host's time in it."""
    gpu = summary.get("basis") == "gpu"
    split, shares = summary.get("split_ms") or {}, summary.get("split_share") or {}
    host = summary.get("host_phase_ms") or {}
    header = ("part", "ms/step", "share", *(("host ms",) if gpu else ()))
    rows = [(PART_NAMES[p], fmt_ms(split.get(p)), _pct(shares.get(p)),
             *((fmt_ms(host.get(p)) if p in PHASES else "-",) if gpu else ())) for p in shown_parts(summary)]
    total = sum(v for v in split.values() if v is not None)
    verdict = "adds up" if summary.get("adds_up") else "DOES NOT add up"
    rows.append(("sum", fmt_ms(total), _pct(summary.get("sum_share")), *(("",) if gpu else ())))
    lines = text_table(header, rows, right={1, 2, 3})
    lines.append(f"({verdict}: the parts sum to {100 * (summary.get('sum_share') or 0):.2f}% of the step, "
                 f"tolerance +-{100 * (summary.get('tolerance') or 0):g}%)")
    return lines


def top_lines(top: Mapping[str, Any]) -> list[str]:
    """The top kernels (GPU) or CPU ops (by self time), with their share of all of it."""
    gpu = top.get("kind") == "gpu"
    rows = [(str(i), cut(r["name"], NAME_WIDTH), fmt_ms(r["ms_per_step"]), f"{r['calls_per_step']:g}",
             _pct(r.get("share"))) for i, r in enumerate(top.get("rows") or [], 1)]
    rest = top.get("rest") or {}
    if rest.get("names"):
        rows.append(("", f"({rest['names']} more)", fmt_ms(rest.get("ms_per_step")), "", _pct(rest.get("share"))))
    what = "kernel (or copy)" if gpu else "CPU op"
    return text_table(("#", what, "ms/step", "calls/step", "share"), rows, right={0, 2, 3, 4})


def memory_lines(memory: Mapping[str, Any]) -> list[str]:
    """Memory by phase: the peak allocated inside the phase (GPU) and how far it rose above the phase's start."""
    if memory.get("unavailable"):
        return [f"memory by phase: unavailable ({memory['unavailable']})"]
    by_phase = memory.get("by_phase") or {}
    if not by_phase:
        return ["memory by phase: no phase allocated anything while profiled"]
    absolute = memory.get("absolute")
    rows = [(PART_NAMES[p], *((_bytes(v.get("peak_bytes")),) if absolute else ()),
             _bytes(v.get("rise_bytes"), signed=True)) for p, v in by_phase.items()]
    header = ("phase", *(("peak allocated",) if absolute else ()), "rise in phase")
    return text_table(header, rows, right=set(range(1, len(header))))


def render_profile(summary: Mapping[str, Any], title: str) -> str:
    """The whole profile ``clsbench profile`` prints: the split, the top kernels or ops, memory, notes."""
    if summary.get("unavailable"):
        return f"{title}\n\nprofile unavailable: {summary['unavailable']}\n"
    gpu = summary.get("basis") == "gpu"
    measured = summary.get("measured_step_ms")
    overhead = summary.get("profiler_overhead_pct")
    timed = f" (timed region: {fmt_ms(measured)} ms; profiler {overhead:+.1f}%)" if measured and overhead is not None \
        else ""
    lines = [title, f"{summary.get('steps')} profiled steps after {summary.get('warmup_steps', '?')} profiler "
             f"warm-up steps; step {fmt_ms(summary.get('step_ms'))} ms{timed}", ""]
    lines.append("where a step's time goes: GPU time by the phase that launched it; idle: no kernel or copy "
                 "running" if gpu else "where a step's time goes: host time in each phase; other: outside them")
    lines += [""] + split_lines(summary)
    if gpu:
        lines.append(f"GPU busy {_pct(summary.get('gpu_busy_share'))} of the step; launch-bound (GPU idle between "
                     f"kernels) {_pct(summary.get('launch_bound_share'))}; "
                     f"{summary.get('gpu_activities_per_step') or 0:g} kernels and copies per step")
    top = summary.get("top") or {}
    lines += ["", "top kernels by GPU time" if gpu else "top CPU ops by self time", ""] + top_lines(top)
    memory = summary.get("memory") or {}
    lines += ["", "memory by phase" + ("" if memory.get("absolute") else " (CPU: the profiler counts only what was "
                                       "allocated while it ran, so only the rise is shown)"), ""]
    lines += memory_lines(memory)
    notes = summary.get("notes") or []
    if notes:
        lines.append("")
        lines += [f"note: {note}" for note in notes]
    return "\n".join(lines) + "\n"


PROFILE_COLUMNS = ("model", "workload", "mode", "batch", "step ms", *(PART_NAMES[p] for p in SPLIT_ORDER),
                   "launch-bound", "top kernel or op")


def profile_row(m: Any) -> tuple[str, ...] | None:
    """One measurement's profile as a row of :data:`PROFILE_COLUMNS`; None when it holds none."""
    summary = (m.summary or {}).get("profile")
    if m.status != Status.OK or not isinstance(summary, Mapping):
        return None
    head = (m.model, m.workload, m.mode, str(m.batch_size))
    if summary.get("unavailable"):
        return (*head, "-", *("-" for _ in SPLIT_ORDER), "-", f"unavailable: {cut(summary['unavailable'], 60)}")
    shares = summary.get("split_share") or {}
    rows = (summary.get("top") or {}).get("rows") or []
    top = f"{cut(rows[0]['name'], 40)} ({_pct(rows[0].get('share'))})" if rows else "-"
    return (*head, fmt_ms(summary.get("step_ms")), *(_pct(shares.get(p)) for p in SPLIT_ORDER),
            _pct(summary.get("launch_bound_share")), top)


def profile_section(measurements: Sequence[Any]) -> list[str]:
    """What ``show`` prints of ``run --profile``: one row per profiled measurement (empty when none is)."""
    rows = [row for row in (profile_row(m) for m in measurements) if row is not None]
    if not rows:
        return []
    keep = [i for i in range(len(PROFILE_COLUMNS)) if i < 5 or i == len(PROFILE_COLUMNS) - 1
            or any(row[i] not in ("-", "0.0%") for row in rows)]
    header = [PROFILE_COLUMNS[i] for i in keep]
    lines = ["profiles (first repeat, after its timed region: shares of the profiled step; GPU: by GPU time, idle: "
             "no kernel running; CPU: host time; `clsbench show --format json` holds the top kernels and memory)", ""]
    lines += text_table(header, [tuple(row[i] for i in keep) for row in rows],
                        right={i for i, name in enumerate(header) if name not in ("model", "workload", "mode",
                                                                                 "top kernel or op")})
    notes = [f"note: {m.model} {m.workload} {m.mode} bs{m.batch_size}: {note}" for m in measurements
             for note in ((m.summary or {}).get("profile") or {}).get("notes") or []]
    return lines + notes
