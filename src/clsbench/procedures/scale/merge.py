"""From the records of one launch's processes to one repeat record (pure: reads only what it is given).

An ok repeat record has the keys every clsbench repeat has (``samples`` with ``images``, ``wall_s`` and
``iteration_ms``; ``timings``; ``validity``; ``memory``; ``flags``), so ``clsbench.analysis.summary`` summarises it like
any other, plus:

* ``ranks``: one entry per process, in rank order: host, device, pid, batch, its own per-step times and block
  wall times, the memory of each of its GPUs and its communication blocks;
* ``comm``: the communication-share blocks, as agreed over the ranks (the slowest rank's times);
* ``distributed``: rank 0's backend, NCCL version, wrapper options and communication variables;
* ``launch``: the command, its exit code, wall time, and whether records came gathered by rank 0.

Definitions:

* images = timed iterations x the sum of every process's batch; wall_s = the sum over blocks of the slowest
  rank's block wall time (all ranks ran the same blocks). So throughput counts every GPU's images over the time
  the slowest rank needed.
* ``samples.iteration_ms`` are the per-step times of the slowest rank (largest summed block wall time), which
  sets the pace; ``samples.iteration_ms_rank`` says which.

A failed launch gives a failed repeat: the earliest failure of any rank with that rank's reason (``oom``,
``nan_loss``, ``compile_error`` and ``model_error`` are kept, anything else becomes ``rank_failed``) and its
one-line detail; a launch that ran out of time gives ``timeout``; ranks that ended without a record give
``rank_failed`` with the launcher's exit code and the last error line of its output.
"""

from __future__ import annotations

from typing import Any

from clsbench.analysis import stats
from clsbench.core.vocab import Status

#: Failure reasons of a rank that keep their name in the measurement; any other failure is ``rank_failed``.
KEPT_REASONS = frozenset({"oom", "nan_loss", "compile_error", "model_error"})

MEMORY_KEYS = ("peak_memory_allocated_bytes", "peak_memory_reserved_bytes", "device_memory_used_bytes",
               "host_peak_rss_bytes")

#: Markers of the line in a launcher's output most likely to say why it failed.
ERROR_MARKERS = ("Error", "error:", "exitcode", "Traceback", "Killed", "Signal")


def last_error_line(lines: list[str]) -> str | None:
    for line in reversed(lines):
        if any(marker in line for marker in ERROR_MARKERS):
            return line.strip()[:300]
    return lines[-1].strip()[:300] if lines else None


def _ranks_text(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _failed(reason: str, detail: str, launch: dict[str, Any], log: list[str], **extra: Any) -> dict[str, Any]:
    return {"status": Status.FAILED, "reason": reason, "detail": detail, "launch": launch, "log_tail": log, **extra}


def merge_launch(records: dict[int, dict[str, Any]], *, expected_ranks: list[int], launch: dict[str, Any],
                 log_tail: list[str], timeout_s: float) -> dict[str, Any]:
    """The repeat record of one launch.

    Args:
        records: the processes' records, by global rank.
        expected_ranks: the ranks whose records make the launch complete (every rank on node 0; this node's
            ranks on another node).
        launch: facts about the launch (``command``, ``exit_code``, ``timed_out``, ``wall_s``, ``killed``, ...).
        log_tail: the last lines of the launcher's output.
        timeout_s: the launch's time limit, for the timeout's detail.
    """
    bad = [r for r in records.values() if r.get("status") != Status.OK]
    if bad:
        first = min(bad, key=lambda r: (r.get("failed_at") or float("inf"), r.get("rank", 0)))
        where = f"rank {first.get('rank')}" + (f" ({first['host']})" if first.get("host") else "")
        if first.get("status") == Status.SKIPPED:
            return {"status": Status.SKIPPED, "reason": first.get("reason") or "unsupported_mode",
                    "detail": first.get("detail"), "launch": launch}
        reason = first.get("reason") if first.get("reason") in KEPT_REASONS else "rank_failed"
        detail = f"{where}: {first.get('detail') or first.get('reason')}"
        return _failed(reason, detail, launch, log_tail, traceback=first.get("traceback"),
                       failed_rank=first.get("rank"))
    missing = [r for r in expected_ranks if r not in records]
    if launch.get("timed_out"):
        detail = f"no result within {timeout_s:g} s; the launch and its processes were ended"
        if launch.get("processes_started") == 0 and launch.get("nnodes", 1) > 1:
            detail += (" (no rank had started: the rendezvous did not complete; are all nodes running the same "
                       "command, and can they reach the endpoint?)")
        elif missing:
            detail += f" ({_ranks_text(missing)} had not reported)"
        return _failed("timeout", detail, launch, log_tail)
    if missing:
        code = launch.get("exit_code")
        detail = f"{_ranks_text(missing)} ended without a result (launcher exit code {code})"
        line = last_error_line(log_tail)
        if line:
            detail += f": {line}"
        return _failed("rank_failed", detail, launch, log_tail)
    ranks = [records[r] for r in expected_ranks]
    counts = {r["validity"]["timed_iterations"] for r in ranks}
    if len(counts) != 1:  # cannot happen with agreed decisions; a guard against a wrong result, not a case
        return _failed("rank_failed", f"ranks timed different numbers of iterations: {sorted(counts)}", launch,
                       log_tail)
    merged = _merge_ok(ranks, launch)
    if launch.get("exit_code") not in (0, None):
        # Every rank reported a complete measurement, so it stands; what went wrong after it is kept for reading.
        merged["launch_note"] = f"every rank reported, then the launcher exited with code {launch['exit_code']}"
        merged["log_tail"] = log_tail
    return merged


def _merge_ok(ranks: list[dict[str, Any]], launch: dict[str, Any]) -> dict[str, Any]:
    lead = ranks[0]
    iterations = lead["validity"]["timed_iterations"]
    slowest = max(ranks, key=lambda r: sum(r["samples"]["block_wall_s"]))
    samples = {
        "images": iterations * sum(int(r["batch_size"]) for r in ranks),
        "wall_s": sum(lead["samples"]["block_wall_max_s"]),
        "iteration_ms": slowest["samples"]["iteration_ms"],
        "iteration_ms_rank": slowest["rank"],
        "blocks": len(lead["samples"]["block_iterations"]),
        "block_iterations": lead["samples"]["block_iterations"],
        "block_wall_max_s": lead["samples"]["block_wall_max_s"],
        "iteration_clock": lead["samples"]["iteration_clock"],
        "loss_first": lead["samples"].get("loss_first"),
        "loss_last": lead["samples"].get("loss_last"),
    }
    devices = [m for r in ranks for m in r.get("devices_memory") or [r.get("memory") or {}]]
    memory: dict[str, Any] = {}
    for key in MEMORY_KEYS:
        values = [m.get(key) for m in devices if m.get(key) is not None]
        memory[key] = max(values) if values else None
    return {
        "status": Status.OK,
        "reason": None,
        "detail": None,
        "samples": samples,
        "timings": lead.get("timings") or {},
        "validity": lead["validity"],
        "memory": memory,
        "flags": lead.get("flags"),
        "mode_notes": lead.get("mode_notes"),
        "input_size": lead.get("input_size"),
        "comm": comm_figures(lead.get("comm")),
        "ranks": [_rank_entry(r) for r in ranks],
        "distributed": lead.get("distributed"),
        "launch": launch,
    }


def _rank_entry(record: dict[str, Any]) -> dict[str, Any]:
    samples = record["samples"]
    comm = record.get("comm") or {}
    return {
        "rank": record.get("rank"),
        "local_rank": record.get("local_rank"),
        "host": record.get("host"),
        "device": record.get("device"),
        "pid": record.get("pid"),
        "gpus": record.get("gpus"),
        "batch_size": record.get("batch_size"),
        "iteration_ms": samples["iteration_ms"],
        "block_wall_s": samples["block_wall_s"],
        "devices_memory": record.get("devices_memory"),
        "timings": record.get("timings"),
        "comm": {k: comm.get(k) for k in ("no_sync_wall_s", "sync_wall_s", "no_sync_iteration_ms",
                                          "sync_iteration_ms")} if comm else None,
    }


def comm_figures(comm: dict[str, Any] | None) -> dict[str, Any] | None:
    """The communication blocks of one launch with their derived figures, or None when none ran.

    ``share`` = 1 - t(no_sync) / t(sync), from the slowest rank's block times; negative values (noise larger
    than the effect) are kept as measured.
    """
    if not comm:
        return None
    n = comm["iterations"]
    free, synced = comm["no_sync_wall_max_s"], comm["sync_wall_max_s"]
    out = dict(comm)
    out["no_sync_ms_per_iteration"] = free * 1000.0 / n
    out["sync_ms_per_iteration"] = synced * 1000.0 / n
    out["exposed_comm_ms_per_iteration"] = (synced - free) * 1000.0 / n
    out["share"] = 1.0 - free / synced if synced > 0 else None
    return out


def rank_step_ms(repeat: dict[str, Any]) -> list[float]:
    """Per rank, the median time of one step in the timed region (ms)."""
    return [stats.median(r["iteration_ms"]) if r.get("iteration_ms") else float("nan") for r in repeat["ranks"]]
