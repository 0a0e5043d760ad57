"""Host CPU contention over a timed region: hypervisor steal, other load on the machine, our own context switches.

Launch-bound measurements (batch-1 latency, small-batch training) run at the speed of one CPU thread issuing
kernels, so anything that takes that thread's core away moves the figure: another process on the machine, the
hypervisor running someone else's virtual CPU (``steal``, from psutil's CPU times), or the scheduler pre-empting us
(involuntary context switches). These readings say, per repeat, whether that happened; they cost two file reads
and one ``getrusage`` call at each edge of the timed region and nothing inside it. What in a reading is a
concern is judged on reading, by :mod:`clsbench.analysis.hostcpu`.

The machine-wide figures come from psutil (steal exists on Linux only; elsewhere it reads 0).
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from typing import Any

#: Host-speed calibration: this many tiny CPU tensor additions, timed as one block, at each edge of the timed
#: region (about 1-3 ms in all on a current server core).
CALIBRATION_OPS = 200


def calibrate(ops: int = CALIBRATION_OPS) -> float:
    """Microseconds per tiny CPU tensor operation through torch's dispatcher, the best of three blocks.

    This is the host work a kernel launch costs before the driver (Python call, argument parsing, dispatch,
    allocation), done on the CPU so it never touches the GPU. It was meant to show the host core getting faster
    or slower, which no counter inside a virtual machine reports. On the H200 machine it does not: it jumped
    between about 1.1 and 2.0-2.6 us per op between repeats, and even between the two edges of one timed region,
    while the batch-1 latencies of the same repeats did not follow it (ResNet-50 and vit_tiny; the p50 of the
    repeat with the slowest calibration was often the fastest). So it is recorded for study and never raised as
    a concern; it is not evidence either way.
    """
    import torch

    a = torch.ones(8)
    b = torch.ones(8)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter_ns()
        for _ in range(ops):
            torch.add(a, b)
        best = min(best, (time.perf_counter_ns() - t0) / 1000.0 / ops)
    return best


#: The machine-wide CPU time counters read, in this order (psutil's names; Linux has them all, other systems some).
CPU_TIME_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True)
class Snapshot:
    wall_s: float
    cpu_times_s: tuple[float, ...] | None  # machine-wide seconds per CPU_TIME_FIELDS (all cores added), or None
    process_cpu_s: float
    involuntary_switches: int
    voluntary_switches: int


def machine_cpu_times() -> tuple[float, ...] | None:
    """The machine-wide CPU time counters (seconds, all cores added; psutil), 0 where a system lacks one."""
    try:
        import psutil

        times = psutil.cpu_times()
    except Exception:  # noqa: BLE001 - a reading that cannot be had is None, never a failed measurement
        return None
    return tuple(float(getattr(times, name, 0.0)) for name in CPU_TIME_FIELDS)


def snapshot() -> Snapshot:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return Snapshot(
        wall_s=time.monotonic(),
        cpu_times_s=machine_cpu_times(),
        process_cpu_s=usage.ru_utime + usage.ru_stime,
        involuntary_switches=usage.ru_nivcsw,
        voluntary_switches=usage.ru_nvcsw,
    )


def contention(start: Snapshot, end: Snapshot, *, cores: int | None = None) -> dict[str, Any]:
    """The figures between two snapshots (see the module docstring); ``None`` where unreadable."""
    wall = max(end.wall_s - start.wall_s, 1e-9)
    cores = cores or os.cpu_count() or 1
    out: dict[str, Any] = {
        "wall_s": wall,
        "process_cpu_pct": 100.0 * (end.process_cpu_s - start.process_cpu_s) / wall,
        "involuntary_switches_per_s": (end.involuntary_switches - start.involuntary_switches) / wall,
        "voluntary_switches_per_s": (end.voluntary_switches - start.voluntary_switches) / wall,
        "steal_pct": None,
        "machine_busy_pct": None,
        "other_busy_cores": None,
        "cores": cores,
    }
    if start.cpu_times_s is not None and end.cpu_times_s is not None:
        delta = [b - a for a, b in zip(start.cpu_times_s, end.cpu_times_s, strict=True)]
        total = sum(delta)
        if total > 0:
            user, nice, system, idle, iowait, irq, softirq, steal = delta
            busy_core_s = user + nice + system + irq + softirq
            out["steal_pct"] = 100.0 * steal / total
            out["machine_busy_pct"] = 100.0 * busy_core_s / total
            out["other_busy_cores"] = max(0.0, (busy_core_s - (end.process_cpu_s - start.process_cpu_s)) / wall)
    return out
