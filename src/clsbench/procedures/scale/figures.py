"""Scale figures (pure): per-measurement figures from the repeats, scaling efficiency across measurements, the table.

Definitions (docs/methodology/scale.md, section 17, has the long form):

* ``throughput_img_s``: images of all GPUs / the slowest rank's wall time, median over repeats (as for ``run``);
  ``throughput_per_gpu_img_s`` = that / GPUs in total.
* ``scaling_efficiency`` = (img/s per GPU at k GPUs) / (img/s per GPU at the baseline), where the baseline is the
  same strategy at the smallest GPU count measured ok, normally 1 (DDP with one rank; DataParallel on one GPU).
  With a 1-GPU baseline this is throughput(k) / (k x throughput(1)). ``scaling_baseline`` names it.
* ``speedup_vs_dp`` (DDP rows): DDP's img/s / DataParallel's at the same GPU count.
* ``rank_step_ms``: per rank, the median over repeats of its median step time in the timed region;
  ``rank_spread_pct`` = (max - min) / median of the ranks' median step times, median over repeats;
  ``slowest_rank`` the rank with the largest step time.
* ``comm_share``: median over repeats of 1 - t(no_sync) / t(sync) (``clsbench.procedures.scale.rank_loop``), an estimate
  of the share of the step the gradient all-reduce adds beyond what the backward pass hides.
* ``peak_memory_by_gpu_bytes``: per GPU (rank order), the maximum over repeats of torch's peak allocation; on a
  CPU each process's peak RSS instead (``memory_kind`` says which).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from clsbench.analysis import stats
from clsbench.core.vocab import Status
from clsbench.procedures.scale.merge import rank_step_ms
from clsbench.report.table import MIB, fmt_rate, render_rows
from clsbench.results.schema import BenchmarkResult, Measurement

EFFICIENCY_DEFINITION = "(img/s per GPU) / (img/s per GPU of the same strategy at the baseline GPU count)"
COMM_SHARE_METHOD = ("1 - t(no_sync) / t(sync) over two extra blocks after the timed region: the share of a step "
                     "the gradient all-reduce adds beyond what the backward pass hides (an estimate)")


def strategy_of(m: Measurement) -> str:
    return m.workload.removeprefix("train-")


def _median(values: list[float]) -> float | None:
    present = [v for v in values if v is not None and v == v]  # drop None and NaN
    return stats.median(present) if present else None


def scale_figures(records: list[dict[str, Any]], *, strategy: str, gpus: int, nnodes: int, batch_size_per_gpu: int,
                  throughput: float | None, comm_share_on: bool) -> dict[str, Any]:
    """The scale figures of one measurement from its ok repeat records (see the module docstring)."""
    world = gpus * nnodes
    out: dict[str, Any] = {
        "strategy": strategy,
        "gpus": world,
        "gpus_per_node": gpus,
        "nnodes": nnodes,
        "processes": world if strategy == "ddp" else nnodes,
        "batch_size_per_gpu": batch_size_per_gpu,
        "global_batch_size": batch_size_per_gpu * world,
        "throughput_per_gpu_img_s": throughput / world if throughput else None,
        "scaling_efficiency": None,
        "scaling_baseline": None,
    }
    ok = [r for r in records if r.get("status") == Status.OK and r.get("ranks")]
    if not ok:
        return out
    per_repeat = [rank_step_ms(r) for r in ok]
    ranks = len(per_repeat[0])
    combined = [_median([rep[i] for rep in per_repeat if i < len(rep)]) for i in range(ranks)]
    out["rank_step_ms"] = combined
    out["rank_spread_pct"] = _median([s for s in (stats.spread_pct(rep) for rep in per_repeat) if s is not None])
    if combined and all(v is not None for v in combined):
        out["slowest_rank"] = ok[0]["ranks"][max(range(ranks), key=lambda i: combined[i])]["rank"]
    shares = [(r.get("comm") or {}).get("share") for r in ok]
    exposed = [(r.get("comm") or {}).get("exposed_comm_ms_per_iteration") for r in ok]
    out["comm_share"] = _median([s for s in shares if s is not None])
    out["comm_exposed_ms_per_iteration"] = _median([e for e in exposed if e is not None])
    if out["comm_share"] is not None:
        out["comm_share_method"] = COMM_SHARE_METHOD
    elif strategy != "ddp":
        out["comm_share_unavailable"] = "DataParallel has no no_sync(): its copies and reductions are inside every step"
    elif world == 1:
        out["comm_share_unavailable"] = "one rank: no gradient all-reduce to speak of"
    elif not comm_share_on:
        out["comm_share_unavailable"] = "turned off (--no-comm-share)"
    else:
        out["comm_share_unavailable"] = "not measured"
    gpu_memory: list[list[int]] = []
    kind = "peak_memory_allocated_bytes"
    for record in ok:
        readings = [m for rank in record["ranks"] for m in rank.get("devices_memory") or []]
        if readings and all(m.get(kind) is None for m in readings):
            kind = "host_peak_rss_bytes"
        for i, reading in enumerate(readings):
            while len(gpu_memory) <= i:
                gpu_memory.append([])
            if reading.get(kind) is not None:
                gpu_memory[i].append(reading[kind])
    out["peak_memory_by_gpu_bytes"] = [max(v) if v else None for v in gpu_memory]
    out["memory_kind"] = kind
    return out


def finalize(result: BenchmarkResult) -> BenchmarkResult:
    """Fill ``scaling_efficiency``, ``scaling_baseline`` and ``speedup_vs_dp`` in every scale measurement."""
    figures = efficiencies(result.measurements)
    measurements = []
    for m in result.measurements:
        if m.workload.startswith("train-") and m.summary.get("strategy"):
            summary = {**m.summary, **figures.get(m.key, {"scaling_efficiency": None, "scaling_baseline": None})}
            m = dataclasses.replace(m, summary=summary)
        measurements.append(m)
    return dataclasses.replace(result, measurements=tuple(measurements))


def efficiencies(measurements: tuple[Measurement, ...] | list[Measurement]) -> dict[tuple, dict[str, Any]]:
    """Scaling efficiency of every ok scale measurement against its strategy's baseline (pure)."""
    ok = [m for m in measurements if m.status == Status.OK and m.summary.get("strategy") and m.summary.get("gpus")
          and m.summary.get("throughput_img_s")]
    out: dict[tuple, dict[str, Any]] = {}
    by_strategy: dict[str, list[Measurement]] = {}
    for m in ok:
        by_strategy.setdefault(m.summary["strategy"], []).append(m)
    for strategy, group in by_strategy.items():
        base = min(group, key=lambda m: m.summary["gpus"])
        base_per_gpu = base.summary["throughput_img_s"] / base.summary["gpus"]
        baseline = {"strategy": strategy, "gpus": base.summary["gpus"],
                    "throughput_img_s": base.summary["throughput_img_s"], "definition": EFFICIENCY_DEFINITION}
        for m in group:
            per_gpu = m.summary["throughput_img_s"] / m.summary["gpus"]
            out[m.key] = {"scaling_efficiency": per_gpu / base_per_gpu, "scaling_baseline": baseline}
    dp = {m.summary["gpus"]: m.summary["throughput_img_s"] for m in by_strategy.get("dp", [])}
    for m in by_strategy.get("ddp", []):
        other = dp.get(m.summary["gpus"])
        out[m.key]["speedup_vs_dp"] = m.summary["throughput_img_s"] / other if other else None
    return out


# ------------------------------------------------------------------------------------------------ reading


def analyze_scale(result: BenchmarkResult) -> dict[str, Any]:
    """Rows, baselines and DDP-vs-DataParallel ratios of a scale result, recomputed from the file alone."""
    facts = result.settings.get("scale") or {}
    per_gpu_batch = facts.get("batch_size_per_gpu")
    figures = efficiencies(result.measurements)
    rows = []
    for m in result.measurements:
        if not m.workload.startswith("train-"):
            continue
        s = m.summary
        gpus = s.get("gpus") or (m.batch_size // per_gpu_batch if per_gpu_batch else None)
        memory = [v for v in s.get("peak_memory_by_gpu_bytes") or [] if v is not None]
        extra = figures.get(m.key, {})
        rows.append({
            "strategy": strategy_of(m),
            "gpus": gpus,
            "batch_size_per_gpu": s.get("batch_size_per_gpu") or per_gpu_batch,
            "throughput_img_s": s.get("throughput_img_s"),
            "throughput_per_gpu_img_s": s.get("throughput_per_gpu_img_s"),
            "scaling_efficiency": extra.get("scaling_efficiency"),
            "speedup_vs_dp": extra.get("speedup_vs_dp"),
            "rank_spread_pct": s.get("rank_spread_pct"),
            "slowest_rank": s.get("slowest_rank"),
            "comm_share": s.get("comm_share"),
            "peak_memory_max_bytes": max(memory) if memory else None,
            "memory_kind": s.get("memory_kind"),
            "spread_pct": s.get("spread_pct"),
            "cudnn_benchmark": s.get("cudnn_benchmark"),
            "cudnn_benchmark_note": s.get("cudnn_benchmark_note"),
            "status": m.status,
            "reason": m.reason,
            "detail": m.detail,
        })
    baselines = {}
    for extra in figures.values():
        base = extra["scaling_baseline"]
        baselines[base["strategy"]] = {"gpus": base["gpus"], "throughput_img_s": base["throughput_img_s"]}
    dist = result.environment.get("distributed") or {}
    return {
        "model": facts.get("model"),
        "mode": facts.get("mode"),
        "device": facts.get("device"),
        "nnodes": facts.get("nnodes", 1),
        "rows": rows,
        "baselines": baselines,
        "nccl_version": dist.get("nccl_version"),
        "communication_env": dist.get("communication_env") or {},
        "gpu_topology": dist.get("gpu_topology"),
        "topology_unavailable": (dist.get("unavailable") or {}).get("gpu_topology"),
    }


SCALE_COLUMNS = ("strategy", "gpus", "batch/gpu", "img/s", "img/s/gpu", "efficiency", "vs dp", "rank spread",
                 "comm share", "peak mem/gpu", "status")
SCALE_RIGHT = {"gpus", "batch/gpu", "img/s", "img/s/gpu", "efficiency", "vs dp", "rank spread", "comm share",
               "peak mem/gpu"}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _row(row: dict[str, Any]) -> tuple[str, ...]:
    memory = row["peak_memory_max_bytes"]
    mem = "-" if memory is None else f"{memory / MIB:,.0f} MiB" + (" rss" if row["memory_kind"] ==
                                                                    "host_peak_rss_bytes" else "")
    spread = row["rank_spread_pct"]
    status = "ok" if row["status"] == Status.OK else f"{row['status'].upper()}: {row['reason']}"
    return (
        row["strategy"],
        "-" if row["gpus"] is None else str(row["gpus"]),
        "-" if row["batch_size_per_gpu"] is None else str(row["batch_size_per_gpu"]),
        fmt_rate(row["throughput_img_s"]),
        fmt_rate(row["throughput_per_gpu_img_s"]),
        _pct(row["scaling_efficiency"]),
        "-" if row["speedup_vs_dp"] is None else f"{row['speedup_vs_dp']:.2f}x",
        "-" if spread is None else f"{spread:.1f}%",
        _pct(row["comm_share"]),
        mem,
        status,
    )


def render_scale(analysis: dict[str, Any]) -> str:
    """The scaling table and its notes, for ``scale`` and ``show``."""
    nodes = analysis.get("nnodes") or 1
    where = f" over {nodes} nodes" if nodes > 1 else ""
    lines = [f"scaling: {analysis.get('model')} {analysis.get('mode')} on {analysis.get('device')}{where} "
             "(ddp: DistributedDataParallel, one process per GPU via torchrun; dp: DataParallel, one process)", ""]
    rows = analysis["rows"]
    if not rows:
        return "\n".join(lines + ["(no scale measurements)"]) + "\n"
    lines.extend(render_rows(SCALE_COLUMNS, [_row(r) for r in rows], SCALE_RIGHT))
    lines.append("")
    for strategy, base in sorted(analysis["baselines"].items()):
        lines.append(f"baseline of {strategy}: {base['gpus']} GPU(s) at {fmt_rate(base['throughput_img_s'])} img/s; "
                     "efficiency = img/s per GPU / the baseline's img/s per GPU")
    notes: dict[str, list[str]] = {}
    for row in rows:
        if row.get("cudnn_benchmark_note"):
            notes.setdefault(row["cudnn_benchmark_note"], []).append(f"{row['strategy']} x{row['gpus']}")
    for note, where in notes.items():
        lines.append(f"{', '.join(where)}: {note}")
    lines.append("rank spread: (slowest - fastest) / median of the ranks' median step times; comm share: "
                 "1 - t(no_sync) / t(sync), an estimate of the step share the gradient all-reduce adds")
    env = analysis.get("communication_env") or {}
    nccl = analysis.get("nccl_version") or "-"
    shown = ", ".join(f"{k}={v}" for k, v in env.items() if k.startswith(("NCCL_", "TORCH_SYMM", "NVSHMEM_"))) \
        or "none set"
    lines.append(f"NCCL {nccl}; NCCL/NVSHMEM variables: {shown}")
    if analysis.get("gpu_topology"):
        lines.append("GPU topology (nvidia-smi topo -m):")
        lines.extend("  " + line for line in str(analysis["gpu_topology"]).splitlines())
    elif analysis.get("topology_unavailable"):
        lines.append(f"GPU topology: not read ({analysis['topology_unavailable']})")
    return "\n".join(lines) + "\n"
