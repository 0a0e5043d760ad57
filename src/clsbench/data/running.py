"""What each stage thread of a running pipeline does with its time, while the model trains beside it.

Measured alone (:mod:`clsbench.data.stages`), a stage has the interpreter, the CPU and the GPU to itself. While the
pipeline feeds training, its stage threads share the interpreter's lock (the GIL) with each other and with the
training loop, which launches the step's kernels, and they share the GPU with the step: a stage that takes 11 ms
alone can take 30 ms then, and only a reading taken while it runs says so. On the H200 (2026-12-02, ResNet-50,
amp-bf16+cl+compile, batch 256), the gpu pipeline delivered a batch every 56.7 ms when the step was captured as a
CUDA graph, while its stages alone took 15, 16 and 11 ms.

Each stage thread adds, for every batch it handles (:meth:`StageMeter.add`):

* ``work_ns``: wall time doing its work on the batch (reading its files; decoding; augmenting);
* ``cpu_ns``: the CPU time its own thread used for that (``time.thread_time_ns``): work time well above it was
  spent waiting, for the GIL, the GPU or the disk;
* ``wait_in_ns``: wall time waiting for the previous stage (an empty queue);
* ``wait_out_ns``: wall time waiting for room in the next queue (the stages after it, or training, are slower).

:meth:`RunningStages.mark` starts the reading (the gpu pipeline marks at the end of its drain, just before the timed
region) and :meth:`RunningStages.since_mark` returns the totals since then, per stage: raw figures, stored in the
pipeline's facts (``data.pipeline.running_stages``); :func:`clsbench.analysis.data.running_figures` turns them into
milliseconds per batch and names the busiest stage. The clocks are injectable (tests pass fake ones).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

FIELDS = ("batches", "work_ns", "cpu_ns", "wait_in_ns", "wait_out_ns")


class StageMeter:
    """One stage thread's running totals (only that thread adds; reading them from another thread is safe)."""

    def __init__(self, name: str, wall_ns: Callable[[], int] = time.perf_counter_ns,
                 cpu_ns: Callable[[], int] = time.thread_time_ns) -> None:
        self.name = name
        self.wall_ns = wall_ns
        self.cpu_ns = cpu_ns
        self._lock = threading.Lock()
        self._totals = dict.fromkeys(FIELDS, 0)

    def add(self, *, work_ns: int, cpu_ns: int, wait_in_ns: int, wait_out_ns: int) -> None:
        with self._lock:
            totals = self._totals
            totals["batches"] += 1
            totals["work_ns"] += work_ns
            totals["cpu_ns"] += cpu_ns
            totals["wait_in_ns"] += wait_in_ns
            totals["wait_out_ns"] += wait_out_ns

    def totals(self) -> dict[str, int]:
        with self._lock:
            return dict(self._totals)

    def run(self, get: Callable[[], Any], work: Callable[[Any], Any], put: Callable[[Any], bool],
            stop: threading.Event, done: Callable[[Any], bool]) -> None:
        """The stage loop: ``get`` an item, ``work`` on it, ``put`` the result, each part timed and added as one
        batch. It ends when ``stop`` is set, when ``done(item)`` says so (the caller's ``done`` hands a failure of an
        earlier stage on itself), or when ``put`` returns False (stopped while waiting for room)."""
        while not stop.is_set():
            t0 = self.wall_ns()
            item = get()
            t1 = self.wall_ns()
            if done(item):
                return
            c0 = self.cpu_ns()
            out = work(item)
            c1 = self.cpu_ns()
            t2 = self.wall_ns()
            handed = put(out)
            t3 = self.wall_ns()
            self.add(work_ns=t2 - t1, cpu_ns=c1 - c0, wait_in_ns=t1 - t0, wait_out_ns=t3 - t2)
            if not handed:
                return


class RunningStages:
    """The meters of a pipeline's stage threads, and the mark the reading starts from."""

    def __init__(self, meters: Sequence[StageMeter]) -> None:
        self.meters = list(meters)
        self._marked: dict[str, dict[str, int]] = {m.name: dict.fromkeys(FIELDS, 0) for m in self.meters}

    def mark(self) -> None:
        self._marked = {m.name: m.totals() for m in self.meters}

    def since_mark(self) -> list[dict[str, Any]]:
        """Per stage, in pipeline order: ``{"stage": name, "batches": ..., "work_ns": ..., ...}`` since the mark."""
        out = []
        for meter in self.meters:
            now, then = meter.totals(), self._marked[meter.name]
            out.append({"stage": meter.name, **{field: now[field] - then[field] for field in FIELDS}})
        return out
