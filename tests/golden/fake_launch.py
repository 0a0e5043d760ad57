"""A deterministic stand-in for a scale launch: rank records with fixed step times (no processes started)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def rank_record(rank: int, world: int, batch: int, steps: int = 10, step_s: float = 0.1) -> dict[str, Any]:
    wall = steps * step_s
    return {
        "status": "ok", "rank": rank, "local_rank": rank, "world_size": world, "host": "golden", "pid": 100 + rank,
        "device": f"cpu:{rank}", "batch_size": batch, "gpus": 1,
        "samples": {"iteration_ms": [step_s * 1000.0] * steps, "block_iterations": [steps], "block_wall_s": [wall],
                    "block_wall_max_s": [wall * (1 + 0.01 * rank)], "iteration_clock": "host", "loss_first": 7.0,
                    "loss_last": 6.9},
        "timings": {"first_iteration_s": 0.5}, "validity": {"stop_rule_met": True, "timed_iterations": steps},
        "memory": {"peak_memory_allocated_bytes": 1000 * (rank + 1)},
        "devices_memory": [{"device": f"cpu:{rank}", "peak_memory_allocated_bytes": 1000 * (rank + 1)}],
        "flags": {"cudnn_benchmark": False}, "distributed": {"backend": "gloo"},
        "comm": {"iterations": 4, "no_sync_wall_max_s": 0.36, "sync_wall_max_s": 0.4, "no_sync_wall_s": 0.35,
                 "sync_wall_s": 0.39, "no_sync_iteration_ms": [90.0] * 4, "sync_iteration_ms": [100.0] * 4},
    }


class FakeLauncher:
    """Called like ``clsbench.procedures.scale.launch.launch``; every launch succeeds with 0.1 s steps (+5% per
    extra GPU)."""

    def __call__(self, command: list[str], folder: Path, *, timeout_s: float, env: Any = None) -> Any:
        from clsbench.procedures.scale.launch import LaunchOutcome

        job = json.loads((folder / "job.json").read_text())
        gpus = job["gpus"]
        world = gpus if job["strategy"] == "ddp" else 1
        batch = job["batch_size_per_gpu"] * (gpus if world == 1 else 1)
        step = 0.1 * (1 + 0.05 * (gpus - 1))
        records = {r: rank_record(r, world, batch, step_s=step) for r in range(world)}
        return LaunchOutcome(exit_code=0, timed_out=False, wall_s=1.0, records=records, source="gathered")
