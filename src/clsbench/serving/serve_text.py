"""The words of a serve result's text: figures with their units, the time split, why a batching setting won, what
stopped the others, the ``--target`` server and an artifact backend's builds, and the time split's column names.

Pure formatting of what :func:`clsbench.serving.analysis.analyze_serve` derives;
:func:`clsbench.serving.analysis.render_serve` lays them out.
"""

from __future__ import annotations

from typing import Any

from clsbench.core.text_table import fmt_ms
from clsbench.serving.config import MLPERF_MIN_DURATION_S

#: A setting's time-split component is named as why it lost when it exceeds the winner's by at least this (ms).
WHY_MIN_DIFFERENCE_MS = 0.05

_SPLIT_NAMES = {"queue": "queue wait", "gather": "gather", "copy_in": "copy in", "compute": "compute",
                "copy_out": "copy out", "complete": "hand-back"}

#: The time split's columns when a ``--target`` server was driven: the server's stages come from its statistics,
#: the client's from its own clock (:meth:`clsbench.serving.triton_target.TritonTarget.end_run` maps them so).
TARGET_SPLIT_HEADER = ("queue", "client send", "compute input", "compute infer", "compute output",
                       "client callback")
LOCAL_SPLIT_HEADER = ("queue", "gather", "copy in", "compute", "copy out", "hand-back")

#: Instances busier than this (share of the run's wall time) at a failing load ran out of throughput.
SATURATED_BUSY_PCT = 90.0


def figure_text(value: float | None, unit: str) -> str:
    """A figure with its unit, to the digits that matter: ``1,234 qps``, ``12.5 samples/s``, ``0.812 ms``."""
    if value is None:
        return "none"
    if unit == "ms":
        return f"{value:.3f} ms" if value < 10 else f"{value:.2f} ms"
    return f"{value:,.0f} {unit}" if value >= 100 else f"{value:,.1f} {unit}"


def split_text(split: dict[str, float]) -> str:
    """A request's time split (ms) in four parts: queue, compute, the two copies, the host's gather and hand-back."""
    host = split.get("gather", 0.0) + split.get("complete", 0.0)
    copies = split.get("copy_in", 0.0) + split.get("copy_out", 0.0)
    return (f"queue {split.get('queue', 0.0):.2f} ms, compute {split.get('compute', 0.0):.2f} ms, "
            f"copies {copies:.2f} ms, host {host:.2f} ms")


def duration_text(seconds: float) -> str:
    """The LoadGen run length, and whether it reaches MLPerf's minimum."""
    if seconds >= MLPERF_MIN_DURATION_S:
        return f"; LoadGen runs of >= {seconds:g} s (MLPerf's minimum)"
    return (f"; LoadGen runs of >= {seconds:g} s (a quick look; MLPerf's are >= {MLPERF_MIN_DURATION_S:g} s: "
            "serve --mlperf)")


def _limit_text(row: dict[str, Any]) -> str:
    """What the failing run above a setting's answer shows: out of throughput, or out of latency budget."""
    limit = row.get("limit")
    if not limit:
        return ""
    busy = limit.get("busy_pct") or []
    mean_busy = sum(busy) / len(busy) if busy else None
    split = limit.get("split_ms") or {}
    per_batch = (limit.get("per_batch_ms") or {}).get("compute")
    batch = f"batches of {limit['mean_batch']:.1f}/{row.get('max_batch')}" if limit.get("mean_batch") else ""
    head = f"at {limit['target_qps']:,.0f} qps p99 was {fmt_ms(limit.get('p99_ms'))} ms"
    if mean_busy is not None and mean_busy >= SATURATED_BUSY_PCT:
        return (f"{head} with its instances {mean_busy:.0f}% busy ({batch}, {fmt_ms(per_batch)} ms compute each): "
                "out of throughput")
    return (f"{head} with its instances only {mean_busy or 0:.0f}% busy (queue {split.get('queue', 0.0):.2f} ms, "
            f"compute {split.get('compute', 0.0):.2f} ms per request, {batch}): out of latency budget, not throughput")


def winner_and_why(scenario: str, rows: list[dict[str, Any]], higher_is_better: bool,
                   answer_setting: str | None = None) -> tuple[str | None, str]:
    """The winning setting and why, from the time split of each setting's best run. Settings with the same figure
    are ranked with the scenario's answer first (``answer_setting``: the setting of the run its headline picked), so
    the winner named here is the setting the answer's row shows."""
    ranked = [r for r in rows if r["figure"] is not None]
    if not ranked:
        return None, ""
    ranked.sort(key=lambda r: (r["figure"] if higher_is_better else -r["figure"], r["setting"] == answer_setting),
                reverse=True)
    win = ranked[0]
    if scenario == "offline":  # everything is queued at once: only the batches' own cost tells settings apart
        return win["setting"], "\n".join(_offline_line(r, r is win) for r in [win] + [r for r in rows if r is not win])
    split = (win["best"] or {}).get("split_ms") or {}
    unit = win["unit"] or ""
    lines = [f"{win['setting']} wins with {figure_text(win['figure'], unit)}"
             + (f"; per request at that run: {split_text(split)}" if split else "")
             + (f", mean batch {win['best']['mean_batch']:.1f}" if (win["best"] or {}).get("mean_batch") else "")
             + (f", {win['best']['ahead_pct']:.0f}% gathered ahead" if (win["best"] or {}).get("ahead_pct") else "")
             + (f"; {_limit_text(win)}" if win.get("limit") else "")]
    for other in rows:
        if other is win:
            continue
        other_split = (other["best"] or {}).get("split_ms") or {}
        if other["figure"] is None:
            lines.append(f"{other['setting']}: {other['note'] or 'no VALID run'}")
            continue
        text = f"{other['setting']}: {figure_text(other['figure'], unit)}"
        if split and other_split:
            component = max(other_split, key=lambda c: other_split[c] - split.get(c, 0.0))
            gap = other_split[component] - split.get(component, 0.0)
            if gap >= WHY_MIN_DIFFERENCE_MS:
                text += (f"; its requests spent {other_split[component]:.2f} ms in {_SPLIT_NAMES[component]} "
                         f"against {split.get(component, 0.0):.2f} ms")
                if component == "queue":
                    text += " (waiting for a batch to fill, or for a free instance)"
                elif component == "compute":
                    text += f" (mean batch {other['best'].get('mean_batch') or 0:.1f}: larger batches take longer)"
        if other.get("limit"):
            text += f"; {_limit_text(other)}"
        lines.append(text)
    return win["setting"], "\n".join(lines)


def _offline_line(row: dict[str, Any], winner: bool) -> str:
    best = row.get("best") or {}
    if row["figure"] is None:
        return f"{row['setting']}: {row['note'] or 'no VALID run'}"
    per_batch = (best.get("per_batch_ms") or {}).get("compute")
    mean_batch = best.get("mean_batch")
    busy = best.get("busy_pct") or []
    text = f"{row['setting']}{' wins with' if winner else ':'} {figure_text(row['figure'], row['unit'] or '')}"
    if per_batch is not None and mean_batch:
        text += (f"; {per_batch:.3f} ms compute per batch of {mean_batch:.1f} ({per_batch / mean_batch * 1000:.1f} us "
                 "per sample)")
    if busy:
        text += f", instances {sum(busy) / len(busy):.0f}% busy"
    return text


def target_text(t: dict[str, Any]) -> list[str]:
    """The ``--target`` server's line (a :func:`clsbench.serving.analysis.target_summary`)."""
    batching = (f"dynamic batching, preferred {t['preferred'] or '-'}, max queue delay {t['delay_us']} us"
                if t["dynamic_batching"] else "no dynamic batching")
    return [f"target: {t['url']} ({t['server'] or 'server'}; {t['platform'] or 'platform not reported'}); "
            f"max_batch_size {t['max_batch_size']}, {batching}, instances {t['instances']}; "
            f"Triton statistics {t['statistics']}"]


def artifacts_text(art: dict[str, Any]) -> str:
    """An artifact backend's buckets, builds and parity (an :func:`clsbench.serving.analysis.artifacts_summary`)."""
    sizes = ",".join(str(b) for b in art["buckets"]) or "-"
    text = (f"  artifacts ({art['name']}): buckets {sizes}: {art['built']} built now "
            f"({art['build_s']:.0f} s of builds), {art['cached']} from the cache")
    if art.get("parity_max_err") is not None:
        text += (f"; parity against fp32 eager: worst error {art['parity_max_err']:.1e} "
                 f"(tolerance {art['parity_tolerance']:.0e})")
    return text
