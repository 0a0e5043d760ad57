"""What ``clsbench diagnose`` prints: per setting its img/s against the synthetic ceiling and its data-wait and idle
shares, which pipelines keep the ceiling fed, each stage measured alone and while training runs, the verdict, the
best setting and the command that measures it again.

Pure: it renders :func:`clsbench.procedures.diagnose.analyze_diagnose`, which reads the result file alone. This module
also registers diagnose's section of ``clsbench show`` in :data:`~clsbench.procedures.base.PROCEDURES`.
"""

from __future__ import annotations

from typing import Any

from clsbench.analysis.data import busiest_stage
from clsbench.core.text_table import fmt_ms
from clsbench.core.vocab import Status
from clsbench.procedures.base import PROCEDURES, ProcedureView
from clsbench.procedures.diagnose import (
    EPOCH_START_NOTE,
    IDLE_LIMIT,
    INPUT_BOUND_RATIO,
    WAITING_SHARE,
    analyze_diagnose,
)
from clsbench.report.table import fmt_rate, render_rows

_VERDICT_WORDS = {
    "input-bound": "input-bound: the {what} waits for data",
    "compute-bound": "compute-bound: the input pipeline keeps up; the model's own speed sets the pace",
    "launch-bound": "launch-bound: the input pipeline keeps up, but the GPU is busy less than half of each synthetic "
                    "step (kernel launches limit it: a larger batch, torch.compile or CUDA graphs help, not data "
                    "loading)",
}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.1f}%"


def _status(row: dict[str, Any]) -> str:
    if row["status"] == Status.OK:
        return "ok"
    return f"{row['status'].upper()}: {row['reason']}"


def _row_label(row: dict[str, Any]) -> str:
    if row["data"] is None:
        return "synthetic (ceiling)"
    return row["label"] + (" (PyTorch default)" if row["is_default"] else "")


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:,.1f}"


def fed_lines(analysis: dict[str, Any]) -> list[str]:
    """Which pipelines keep the synthetic ceiling of the measured mode fed, and which do not (best setting of each)."""
    pipelines = analysis.get("pipelines") or []
    ceiling = analysis.get("ceiling_img_s")
    if not pipelines or ceiling is None:
        return []

    def each(entries: list[dict[str, Any]]) -> str:
        return ", ".join(f"{e['pipeline']} ({e['label']}, {_pct(e['ratio_to_synthetic'])})" for e in entries) or "none"

    fed = [e for e in pipelines if e["keeps_fed"]]
    starved = [e for e in pipelines if not e["keeps_fed"]]
    line = (f"kept fed: the {analysis.get('mode')} synthetic ceiling ({fmt_rate(ceiling)} img/s) is kept fed by "
            f"{each(fed)}")
    return [line + (f"; not by {each(starved)}" if starved else "")]


def stage_lines(row: dict[str, Any], synthetic_step_ms: float | None) -> list[str]:
    """A setting's stages measured alone (:func:`clsbench.analysis.data.stage_figures`) as a small table, the slowest
    named, and the GPU time the pipeline takes per batch against the synthetic step (its kernels and copies where
    they were profiled, else its events' span)."""
    stages = row.get("stages")
    if not stages:
        return []
    if stages.get("error"):
        return [f"stages of {row['label']}: not measured ({stages['error']})"]
    count = stages.get("batches")
    lines = [f"stages of {row['label']}, each alone (batch {stages.get('batch_size')}, {count} timed "
             f"batch{'' if count == 1 else 'es'}; reading on {stages.get('read_threads')} thread):"]
    rows = stages.get("stages") or []
    profiled = any(stage.get("busy_ms_per_batch") is not None for stage in rows)
    table = []
    for stage in rows:
        name = stage["stage"] + (f" {stage['augment']}" if stage.get("augment") else "")
        note = "" if stage["stage"] != "augment" else ("used" if stage["augment"] == stages.get("augment")
                                                       else "for comparison")
        busy = (fmt_ms(stage.get("busy_ms_per_batch")),) if profiled else ()
        table.append((name, fmt_rate(stage["img_s"]), fmt_ms(stage["device_ms_per_batch"]), *busy,
                      _mb(stage["peak_bytes"]), note))
    header = ("stage", "img/s", "GPU ms/batch", *(("GPU busy ms",) if profiled else ()), "peak MB", "augmentation")
    lines += render_rows(header, table, {"img/s", "GPU ms/batch", "GPU busy ms", "peak MB"})
    if stages.get("slowest"):
        lines.append(f"slowest stage: {stages['slowest']} ({fmt_rate(stages['slowest_img_s'])} img/s: the pipeline "
                     "cannot deliver more)")
    device_ms, busy_ms = stages.get("device_ms_per_batch"), stages.get("busy_ms_per_batch")
    cost = busy_ms if busy_ms is not None else device_ms
    if cost is not None:
        share = (f" = {_pct(cost / synthetic_step_ms)} of the synthetic step ({synthetic_step_ms:.1f} ms)"
                 if synthetic_step_ms else "")
        if busy_ms is not None:
            what = (f"{busy_ms:.1f} ms of kernels and copies per batch (decode + augment, alone, profiled after the "
                    f"timed region; their events span {device_ms:.1f} ms, the rest is host work)")
        else:
            what = f"{device_ms:.1f} ms of device time per batch (decode + augment, alone: their events' span)"
        lines.append(f"GPU cost of the pipeline: {what}{share}; peak memory {_mb(stages.get('peak_bytes'))} MB above "
                     "the model's")
    if stages.get("busy_error"):
        lines.append(f"GPU busy time of the stages: not measured ({stages['busy_error']})")
    return lines


def running_lines(row: dict[str, Any]) -> list[str]:
    """A setting's stage threads while training ran (:func:`clsbench.analysis.data.running_figures`): a small table
    and the busiest stage, set against its time alone where the stages were measured alone."""
    running = row.get("running")
    if not running or not running.get("stages"):
        return []
    alone = {s["stage"]: s for s in (row.get("stages") or {}).get("stages") or []
             if s["stage"] != "augment" or s.get("augment") == (row.get("stages") or {}).get("augment")}
    lines = [f"stages of {row['label']} while training (ms per batch in the timed region; CPU: the stage thread's "
             "own; waits: for the stage before it, for room after it):"]
    table = [(r["stage"], fmt_ms(r["work_ms"]), fmt_ms(r["cpu_ms"]), fmt_ms(r["wait_in_ms"]), fmt_ms(r["wait_out_ms"]),
              f"{r['batches']:,}") for r in running["stages"]]
    lines += render_rows(("stage", "work ms", "CPU ms", "waits in ms", "waits out ms", "batches"), table,
                         {"work ms", "CPU ms", "waits in ms", "waits out ms", "batches"})
    busiest = busiest_stage(running)
    if busiest is None:
        return lines
    line = f"busiest stage while training: {busiest['stage']} ({busiest['work_ms']:.1f} ms per batch"
    single = alone.get(busiest["stage"])
    if single and single.get("img_s") and (row.get("stages") or {}).get("batch_size"):
        alone_ms = 1000.0 * row["stages"]["batch_size"] / single["img_s"]
        line += f", against {alone_ms:.1f} ms alone"
    line += ")"
    cpu = busiest.get("cpu_ms")
    if cpu is not None and busiest["work_ms"] > 0:
        if cpu < WAITING_SHARE * busiest["work_ms"]:
            line += (f"; its thread used the CPU for {cpu:.1f} ms of it: the rest it waited, for the interpreter "
                     "(the GIL, held by the other stages and the training loop), the GPU or the disk")
        else:
            line += (f"; its thread used the CPU for {cpu:.1f} ms of it: its own host work, or spinning in a CUDA "
                     "synchronisation (a thread waiting for the GPU that way counts as busy: nvJPEG's decode "
                     "synchronises about once per image, and beside a step captured as a CUDA graph each wait is "
                     "long; --gpu-decode cpu has no such waits where the host decodes fast enough: "
                     "docs/methodology/data.md 16.4.4)")
    return lines + [line]


def pipeline_lines(analysis: dict[str, Any]) -> list[str]:
    """Each setting's stages measured alone, where it measured them, and its stage threads while training."""
    ceiling, batch = analysis.get("ceiling_img_s"), analysis.get("batch_size")
    step_ms = 1000.0 * batch / ceiling if ceiling and batch else None
    lines: list[str] = []
    for row in analysis.get("rows", []):
        lines += stage_lines(row, step_ms)
        lines += running_lines(row)
    return lines


def render_diagnose(analysis: dict[str, Any]) -> str:
    """The diagnosis in words: the table of settings, the verdict, the best setting and how to reproduce it."""
    dataset = analysis.get("dataset") or {}
    lines = [f"diagnose: {analysis.get('model')} train {analysis.get('mode')} bs{analysis.get('batch_size')} on "
             f"{analysis.get('device')}"]
    if dataset:
        size = float(dataset.get("bytes") or 0)
        lines.append(f"data: {analysis.get('directory')}: {dataset.get('images', 0):,} images in "
                     f"{dataset.get('classes', 0)} classes, {size / 1e6:,.1f} MB, {analysis.get('source')} source; "
                     f"{dataset.get('skipped_n', 0)} file(s) skipped")
    lines.append("")
    idle_by = {r.get("idle_method") for r in analysis.get("rows", []) if r.get("idle_method")}
    idle_header = "GPU idle" if idle_by == {"cuda_events"} else "idle"
    header = ("setting", "img/s", "vs synthetic", "data wait", "copy", idle_header, "status")
    rows = [(_row_label(r), fmt_rate(r["throughput_img_s"]),
             "100.0%" if r["data"] is None and r["throughput_img_s"] is not None else _pct(r["ratio_to_synthetic"]),
             "-" if r["data"] is None else _pct(r["data_wait_fraction"]),
             "-" if r["data"] is None else _pct(r.get("copy_fraction")),
             "-" if r["data"] is None else _pct(r["idle_fraction"]), _status(r))
            for r in analysis.get("rows", [])]
    lines += render_rows(header, rows, {"img/s", "vs synthetic", "data wait", "copy", idle_header})
    lines.append("")
    ceiling = analysis.get("ceiling_img_s")
    rules = analysis.get("rules") or {}
    ratio_limit = 100 * rules.get("input_bound_ratio", INPUT_BOUND_RATIO)
    if ceiling is None:
        lines.append(f"verdict: none: the synthetic ceiling did not run ({analysis.get('ceiling_status')}: "
                     f"{analysis.get('ceiling_reason')})")
    elif analysis.get("best") is None:
        lines.append("verdict: none: no real-data setting ran (see the status column)")
    else:
        best = analysis["best"]
        what = "GPU" if str(analysis.get("device") or "").startswith("cuda") else "model"
        lines.append(f"verdict: {_VERDICT_WORDS[analysis['verdict']].format(what=what)} (best setting at "
                     f"{_pct(best['ratio_to_synthetic'])} of synthetic; input-bound below {ratio_limit:.0f}% or above "
                     f"{100 * rules.get('idle_limit', IDLE_LIMIT):.0f}% idle)")
        lines += fed_lines(analysis)
        default = analysis.get("default")
        if default is not None and default.get("throughput_img_s") is not None:
            lines.append(f"with PyTorch's defaults (num_workers=0, pin_memory=False): "
                         f"{fmt_rate(default['throughput_img_s'])} img/s = {_pct(default['ratio_to_synthetic'])} of "
                         f"synthetic, {analysis.get('default_verdict')}")
        elif default is not None:
            lines.append(f"with PyTorch's defaults: {_status(default)}")
        gain = analysis.get("gain_over_default")
        gain_text = f", {gain:.2f}x the default" if gain is not None else ""
        lines.append(f"best: {best['label']}: {fmt_rate(best['throughput_img_s'])} img/s = "
                     f"{_pct(best['ratio_to_synthetic'])} of synthetic ({fmt_rate(ceiling)} img/s){gain_text}")
        if analysis.get("command"):
            lines.append(f"reproduce: {analysis['command']}")
        for sentence in analysis.get("explanation") or []:
            lines.append(f"why: {sentence}")
    lines += pipeline_lines(analysis)
    lines.append("data wait: waiting for a prepared batch; copy: placing it on the device (from unpinned memory this "
                 "also waits for the previous step); shares of the timed wall time")
    images = (analysis.get("dataset") or {}).get("images")
    for r in analysis.get("rows", []):
        share = r.get("epoch_start_wait_fraction")
        if share is not None and share > EPOCH_START_NOTE and r["throughput_img_s"] and images:
            lines.append(f"note: {r['label']} spent {_pct(share)} of its time on the first batch of an epoch (the "
                         f"DataLoader starts over and refills in order); {images:,} images last "
                         f"{images / r['throughput_img_s']:.1f} s at its speed, and a larger dataset pays this less "
                         "often")
    if any(r["data"] is not None and r.get("idle_method") == "host" for r in analysis.get("rows", [])):
        lines.append("note: on a CPU the step runs synchronously: idle is the share of time spent waiting and copying")
    if analysis.get("quick"):
        lines.append("note: --quick: short measurement windows; rerun without it before trusting small differences")
    return "\n".join(lines) + "\n"


PROCEDURES.register("diagnose", ProcedureView("diagnose", lambda result: render_diagnose(analyze_diagnose(result))))
