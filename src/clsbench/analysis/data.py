"""Real-data figures of a measurement, derived from its stored repeats (pure: reads records only), and their table.

Per repeat (from ``samples``):

* ``data_wait_fraction`` = sum(``data_wait_ms``) / (``wall_s`` x 1000): the share of the timed wall time the
  training loop spent waiting for the pipeline to deliver a prepared batch;
* ``copy_fraction`` = sum(``copy_ms``) / (``wall_s`` x 1000): the share spent placing batches on the device (the cpu
  pipeline's copy call, which from unpinned memory also waits for the previous step);
* ``epoch_start_wait_fraction`` = sum(``epoch_start_wait_ms``) / (``wall_s`` x 1000): the part of the data wait
  spent on the first batch of an epoch begun inside the timed region (cpu pipeline: the DataLoader starts over);
* ``idle_fraction`` = sum(``idle_ms``) / sum(``iteration_ms``) on a GPU (CUDA events: the share of the event span in
  which the training stream had no step running); on the CPU, where the step runs synchronously, the data-wait
  plus copy fraction;
* ``step_ms_mean``: mean of ``step_ms`` (GPU time of a step between events on a GPU; host time on the CPU).

The measurement's figures are the median over its ok repeats; counts (decode failures, epochs) the maximum.

Where the pipeline measured its stages alone before training (``data.stages``, the gpu pipeline:
:mod:`clsbench.data.stages`), ``stages`` holds :func:`stage_figures` of the first ok repeat that has them: each
stage's images/s (images / host seconds), its device milliseconds per batch (mean of the CUDA event times), its GPU
busy milliseconds per batch where they were profiled after the timed region, and peak device memory; the slowest of
read, decode and the augmentation the pipeline used, whose rate bounds the pipeline's.

Where the pipeline timed its stage threads while training ran (``data.pipeline.running_stages``, the gpu pipeline:
:mod:`clsbench.data.running`), ``running`` holds :func:`running_figures`: per stage, the median over the repeats of
its milliseconds per batch working, of them on its own thread's CPU, waiting for the stage before it, and waiting
for room after it; and the busiest stage (the most work per batch), whose pace is the pipeline's while it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clsbench.analysis import stats
from clsbench.results.schema import data_label


def repeat_figures(record: dict[str, Any]) -> dict[str, float | None]:
    samples = record.get("samples") or {}
    wall_s = samples.get("wall_s") or 0.0
    wait = samples.get("data_wait_ms") or []
    copy = samples.get("copy_ms") or []
    wait_fraction = sum(wait) / (wall_s * 1000.0) if wall_s > 0 else None
    copy_fraction = sum(copy) / (wall_s * 1000.0) if wall_s > 0 else None
    starts = samples.get("epoch_start_wait_ms") or []
    start_fraction = sum(starts) / (wall_s * 1000.0) if wall_s > 0 else None
    idle = samples.get("idle_ms")
    iterations = samples.get("iteration_ms") or []
    if idle is not None:
        span = sum(iterations)
        idle_fraction = sum(idle) / span if span > 0 else None
    else:
        idle_fraction = None if wait_fraction is None else wait_fraction + (copy_fraction or 0.0)
    steps = samples.get("step_ms") or []
    return {
        "data_wait_fraction": wait_fraction,
        "copy_fraction": copy_fraction,
        "epoch_start_wait_fraction": start_fraction,
        "epoch_starts": len(starts),
        "idle_fraction": idle_fraction,
        "step_ms_mean": sum(steps) / len(steps) if steps else None,
    }


def _median(values: Sequence[Any]) -> float | None:
    present = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return stats.median(present) if present else None


def _mean(values: Sequence[Any] | None) -> float | None:
    present = [v for v in values or [] if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(present) / len(present) if present else None


def _busy_ms(busy: dict[str, Any] | None, stage: dict[str, Any]) -> float | None:
    """The stage's GPU busy ms per batch from the record's ``busy`` block (decode; each augmentation by name)."""
    if not isinstance(busy, dict) or busy.get("error"):
        return None
    if stage.get("stage") == "decode":
        found = busy.get("decode")
    elif stage.get("stage") == "augment":
        found = (busy.get("augment") or {}).get(stage.get("augment"))
    else:
        return None
    value = (found or {}).get("gpu_busy_ms_per_iteration")
    return float(value) if isinstance(value, (int, float)) else None


def _busy_unavailable(busy: dict[str, Any] | None) -> str | None:
    """Why the busy-time probe gave no figure: its error, or the profiler's first reason (None where it was not run)."""
    if not isinstance(busy, dict):
        return None
    if busy.get("error"):
        return str(busy["error"])
    records = [busy.get("decode") or {}] + list((busy.get("augment") or {}).values())
    return next((str(r["unavailable"]) for r in records if isinstance(r, dict) and r.get("unavailable")), None)


def _stage_row(stage: dict[str, Any], busy: dict[str, Any] | None = None) -> dict[str, Any]:
    seconds, images = stage.get("seconds"), stage.get("images")
    return {"stage": stage.get("stage"), "augment": stage.get("augment"),
            "img_s": images / seconds if images and seconds and seconds > 0 else None,
            "device_ms_per_batch": _mean(stage.get("batch_ms")), "busy_ms_per_batch": _busy_ms(busy, stage),
            "peak_bytes": stage.get("peak_bytes"), "batch_bytes": stage.get("batch_bytes")}


def stage_figures(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """Rates, device time and memory per stage from a stored stage record (module docstring); None without one.

    ``slowest`` names the slowest of the stages the pipeline runs (read, decode, its augmentation; the other
    augmentations are measured for comparison only); ``device_ms_per_batch`` and ``peak_bytes`` are those stages'
    device time per batch summed (their event spans) and their largest peak; ``busy_ms_per_batch``, where the record
    has the busy-time probe (``busy``), the GPU time they really take per batch summed (kernels and copies: what the
    pipeline takes from the model's GPU), with each row's own figure.
    """
    if not record:
        return None
    if record.get("error"):
        return {"error": record["error"]}
    rows = [_stage_row(stage, record.get("busy")) for stage in record.get("stages") or []]
    used = record.get("augment")
    running = [r for r in rows if r["stage"] != "augment" or r["augment"] == used]
    rated = [r for r in running if r["img_s"] is not None]
    slowest = min(rated, key=lambda r: r["img_s"], default=None)
    device = [r["device_ms_per_batch"] for r in running if r["device_ms_per_batch"] is not None]
    busy = [r["busy_ms_per_batch"] for r in running if r["busy_ms_per_batch"] is not None]
    peaks = [r["peak_bytes"] for r in running if r["peak_bytes"] is not None]
    return {
        "batch_size": record.get("batch_size"),
        "batches": record.get("batches"),
        "read_threads": record.get("read_threads"),
        "device_timer": record.get("device_timer"),
        "augment": used,
        "stages": rows,
        "slowest": slowest["stage"] if slowest else None,
        "slowest_img_s": slowest["img_s"] if slowest else None,
        "device_ms_per_batch": sum(device) if device else None,
        "busy_ms_per_batch": sum(busy) if busy else None,
        "busy_error": None if busy else _busy_unavailable(record.get("busy")),
        "peak_bytes": max(peaks) if peaks else None,
    }


def _running_stage(stage: dict[str, Any]) -> dict[str, Any] | None:
    batches = stage.get("batches")
    if not isinstance(batches, int) or batches <= 0:
        return None

    def per_batch(field: str) -> float | None:
        value = stage.get(field)
        return value / batches / 1e6 if isinstance(value, (int, float)) else None

    return {"stage": stage.get("stage"), "batches": batches, "work_ms": per_batch("work_ns"),
            "cpu_ms": per_batch("cpu_ns"), "wait_in_ms": per_batch("wait_in_ns"),
            "wait_out_ms": per_batch("wait_out_ns")}


def running_figures(repeats: Sequence[Sequence[dict[str, Any]] | None]) -> dict[str, Any] | None:
    """Each stage thread's time per batch while training ran (module docstring), the median over the repeats that
    recorded it; None when none did (or no stage handled a batch)."""
    per_stage: dict[str, list[dict[str, Any]]] = {}
    for stages in repeats:
        for stage in stages or []:
            row = _running_stage(stage)
            if row is not None:
                per_stage.setdefault(str(row["stage"]), []).append(row)
    if not per_stage:
        return None
    rows = [{"stage": name, "repeats": len(found), "batches": int(_median([r["batches"] for r in found]) or 0),
             **{field: _median([r[field] for r in found])
                for field in ("work_ms", "cpu_ms", "wait_in_ms", "wait_out_ms")}}
            for name, found in per_stage.items()]
    busiest = max((r for r in rows if r["work_ms"] is not None), key=lambda r: r["work_ms"], default=None)
    return {"stages": rows, "busiest": busiest["stage"] if busiest else None,
            "busiest_work_ms": busiest["work_ms"] if busiest else None}


def busiest_stage(running: dict[str, Any] | None) -> dict[str, Any] | None:
    """The busiest stage's row of :func:`running_figures`' result (None without one, or without its work time)."""
    running = running or {}
    row = next((r for r in running.get("stages") or [] if r.get("stage") == running.get("busiest")), None)
    return row if row is not None and row.get("work_ms") is not None else None


def summarize_data(ok: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The ``summary.data`` block of a real-data measurement (None when no ok repeat carries data facts)."""
    records = [r for r in ok if r.get("data")]
    if not records:
        return None
    first = records[0]["data"]
    per_repeat = [repeat_figures(r) for r in records]
    dataset = first.get("dataset") or {}
    source = [r["data"].get("source") or {} for r in records]
    timings = [r.get("timings") or {} for r in records]
    failures: list[str] = []
    for r in records:
        for name in r["data"].get("decode_failures") or []:
            if name not in failures:
                failures.append(name)
    out = {
        "label": data_label(first.get("settings")),
        "pipeline": (first.get("settings") or {}).get("pipeline"),
        "source": (first.get("settings") or {}).get("source"),
        "images": dataset.get("images"),
        "classes": dataset.get("classes"),
        "bytes": dataset.get("bytes"),
        "skipped_n": dataset.get("skipped_n"),
        "data_wait_fraction": _median([p["data_wait_fraction"] for p in per_repeat]),
        "copy_fraction": _median([p["copy_fraction"] for p in per_repeat]),
        "epoch_start_wait_fraction": _median([p["epoch_start_wait_fraction"] for p in per_repeat]),
        "timed_epoch_starts": max(int(p["epoch_starts"] or 0) for p in per_repeat),
        "idle_fraction": _median([p["idle_fraction"] for p in per_repeat]),
        "idle_method": first.get("idle_method"),
        "step_ms_mean": _median([p["step_ms_mean"] for p in per_repeat]),
        "data_setup_s": _median([t.get("data_setup_s") for t in timings]),
        "data_startup_s": _median([t.get("data_startup_s") for t in timings]),
        "cache_prime_s": _median([s.get("cache_prime_s") for s in source]),
        "load_s": _median([s.get("load_s") for s in source]),
        "drained_batches": _median([r["data"].get("drained_batches") for r in records]),
        "epochs_started": max((r["data"].get("pipeline") or {}).get("epochs_started") or 0 for r in records),
        "decode_failures_n": max(r["data"].get("decode_failures_n") or 0 for r in records),
        "decode_failures": failures[:20],
    }
    probed = next((r["data"]["stages"] for r in records if r["data"].get("stages") is not None), None)
    if probed is not None:  # left out otherwise: summaries of pipelines without stage figures keep their bytes
        out["stages"] = stage_figures(probed)
    running = running_figures([(r["data"].get("pipeline") or {}).get("running_stages") for r in records])
    if running is not None:  # as the stages: only pipelines that time their stage threads
        out["running"] = running
    shares = [(r["data"].get("pipeline") or {}).get("cpu_share_mean") for r in records]
    if any(share is not None for share in shares):  # the split decoder: the host's share of each batch
        out["host_decode_share"] = _median(shares)
    return out
