"""Run a plan: one fresh worker process per repeat, timeouts, failure reasons, atomic saves, resume.

Start-up cost is kept small without sharing state between measurements:

* workers are forked from a **forkserver** that has already imported torch, torchvision (and timm) but never
  touched the GPU, so each worker starts in tens of milliseconds with a clean CUDA context and allocator;
* on a GPU (``overlap``), the next worker is forked and **prepares** (builds its model on the CPU) while the
  current one starts up, autotunes and warms up, and is stopped (SIGSTOP) before the current one's timed region
  begins, so it takes nothing from the timed work; it gets "go" only after the current result has arrived. A
  finished worker is killed without waiting for it to exit: the next worker creates its CUDA context meanwhile,
  and waits at its ``device`` gate until the old process is gone (its GPU memory freed) before any kernel runs.
  No two measurements ever run kernels at the same time, and no other worker runs while one is timed.

Each finished measurement is written to the output file at once (atomically), so an interruption loses at most
the measurement in flight; ``resume`` measures only the cells the file lacks.
"""

from __future__ import annotations

import datetime as _dt
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clsbench.analysis.summary import build_measurement
from clsbench.core.plan import Cell, RunPlan
from clsbench.engine.worker import Job, execute, worker_main
from clsbench.errors import EXIT_INTERRUPTED, ClsbenchError, ResultFileError
from clsbench.measure.clock import Clock, WallClock
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult, Measurement

#: Modules the forkserver imports once, so forked workers start with them loaded (import errors are ignored).
PRELOAD_MODULES = ["torch", "torchvision", "timm", "clsbench.engine.worker", "clsbench.workloads", "clsbench.modes",
                   "clsbench.models"]

#: Seconds to wait for a killed worker to be reaped.
KILL_GRACE_S = 5.0

#: Whether a worker prepared ahead can be paused during another's timed region (POSIX job-control signals).
_CAN_STOP = hasattr(signal, "SIGSTOP") and hasattr(signal, "SIGCONT")


class RunInterrupted(ClsbenchError):
    """Ctrl-C during a run; everything finished so far is in the output file, and in ``result``."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str, hint: str | None = None, result: BenchmarkResult | None = None) -> None:
        super().__init__(message, hint)
        self.result = result


@dataclass(frozen=True)
class ProgressEvent:
    """What the runner tells a progress display."""

    kind: str  # "start", "repeat", "measurement", "finish"
    done: int  # repeats finished
    total: int  # repeats planned (skipped cells count as done at once)
    cell: Cell | None = None
    repeat: int = 0
    repeats: int = 0
    eta_s: float | None = None
    measurement: Measurement | None = None


ProgressCallback = Callable[[ProgressEvent], None]


class _Worker:
    """A worker process and the parent's end of its pipe."""

    def __init__(self, ctx: Any, job: Job, gated: bool, ahead: bool = False) -> None:
        self.job = job
        self.stopped = False
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child,), daemon=True,
                                   name=f"clsbench-{job.cell.label()}-r{job.repeat}")
        self.process.start()  # the first start also starts the forkserver (imports torch): not the worker's time
        self.started = time.monotonic()
        child.close()
        self.conn.send((job, gated, ahead))

    def wait(self, deadline: float) -> tuple[str, Any] | None:
        """Next message, or None when the deadline passes or the process dies first."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                # A message that arrived in time but was not read yet (the worker waited its turn) still counts.
                return self.conn.recv() if self.conn.poll(0) else None
            if self.conn.poll(min(remaining, 0.5)):
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    return None
            if not self.process.is_alive() and not self.conn.poll(0):
                return None

    def kill(self, wait: bool = True) -> None:
        """SIGKILL (a stopped process dies too); ``wait=False`` leaves the exit to :meth:`reap`."""
        if self.process.is_alive():
            self.process.kill()
        if wait:
            self.reap()

    def reap(self) -> None:
        self.process.join(KILL_GRACE_S)
        self.conn.close()

    def pause(self) -> None:
        """Stop the process where it is (SIGSTOP): it keeps its state and takes no CPU until :meth:`resume`."""
        if not self.stopped and _CAN_STOP and self.process.is_alive():
            os.kill(self.process.pid, signal.SIGSTOP)
            self.stopped = True

    def resume(self) -> None:
        if self.stopped:
            self.stopped = False
            try:
                os.kill(self.process.pid, signal.SIGCONT)
            except ProcessLookupError:  # it died meanwhile; its absence is reported where it is waited for
                pass

    def death_record(self, timeout_s: float) -> dict[str, Any]:
        self.process.join(1.0)
        code = self.process.exitcode
        if code is None:
            return {"status": "failed", "reason": "timeout",
                    "detail": f"no result within {timeout_s:g} s; the worker was killed"}
        what = f"signal {-code}" if code < 0 else f"exit code {code}"
        return {"status": "failed", "reason": "crash", "detail": f"worker process died ({what}) without a result"}


class ProcessExecutor:
    """Runs each job in its own process; with ``overlap``, prepares the next job while the current one is not timed.

    Overlap protocol (see the module's docstring): the worker announces its ``device`` gate (context created, no
    kernel yet) and its ``timed`` gate (timed region about to start); the parent answers "ok" after reaping the
    previous worker and after pausing the worker prepared ahead, respectively.
    """

    def __init__(self, timeout_s: float, overlap: bool) -> None:
        try:
            self._ctx = multiprocessing.get_context("forkserver")
            self._ctx.set_forkserver_preload(PRELOAD_MODULES)
        except ValueError:  # no forkserver on this platform
            self._ctx = multiprocessing.get_context("spawn")
        self.timeout_s = timeout_s
        self.overlap = overlap
        self._ahead: _Worker | None = None
        self._exiting: _Worker | None = None  # killed, not yet reaped (overlap only)
        self._gates: dict[str, Any] = {}  # what the overlap protocol did for the job in flight (in its record)

    def run(self, job: Job, next_job: Job | None) -> dict[str, Any]:
        prepared_ahead = self._ahead is not None and self._ahead.job == job
        if prepared_ahead:
            worker, self._ahead = self._ahead, None
        else:
            self.cancel_ahead()
            worker = _Worker(self._ctx, job, self.overlap)
        self._gates = {"prepared_ahead": prepared_ahead, "exit_wait_s": 0.0, "ahead_stopped_when_timed": None}
        try:
            # Preparing and measuring each get the full timeout: a worker started ahead may have waited a whole
            # measurement for its turn, which must not count against it.
            message = worker.wait(worker.started + self.timeout_s)
            if message is None or message[0] != "ready":
                return worker.death_record(self.timeout_s)
            if self.overlap and next_job is not None:
                self._ahead = _Worker(self._ctx, next_job, gated=True, ahead=True)
            worker.conn.send("go")
            deadline = time.monotonic() + self.timeout_s
            while True:
                message = worker.wait(deadline)
                if message is None or message[0] not in ("gate", "result"):
                    return worker.death_record(self.timeout_s)
                if message[0] == "result":
                    return {**message[1], "overlap": dict(self._gates)} if self.overlap else message[1]
                self._pass_gate(message[1])
                worker.conn.send("ok")
        finally:
            if self._ahead is not None:
                self._ahead.resume()
            if self.overlap:
                self._reap_exiting()
                worker.kill(wait=False)
                self._exiting = worker
            else:
                worker.kill()

    def _pass_gate(self, phase: str) -> None:
        if phase == "device":
            t0 = time.monotonic()
            self._reap_exiting()
            self._gates["exit_wait_s"] = time.monotonic() - t0
        elif phase == "timed" and self._ahead is not None:
            self._ahead.pause()
            self._gates["ahead_stopped_when_timed"] = self._ahead.stopped

    def _reap_exiting(self) -> None:
        if self._exiting is not None:
            self._exiting.reap()
            self._exiting = None

    def cancel_ahead(self) -> None:
        if self._ahead is not None:
            self._ahead.kill()
            self._ahead = None

    def close(self) -> None:
        self.cancel_ahead()
        self._reap_exiting()


class InlineExecutor:
    """Runs each job in this process: no isolation and no timeout; for tests and debugging (--isolation inline)."""

    def run(self, job: Job, next_job: Job | None) -> dict[str, Any]:
        return execute(job)

    def close(self) -> None:
        pass


def new_result(plan: RunPlan, environment: dict[str, Any]) -> BenchmarkResult:
    from clsbench import __version__

    return BenchmarkResult(
        environment=environment,
        settings=plan.to_dict(),
        created_utc=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        tool={"name": "clsbench", "version": __version__},
    )


def run_plan(
    plan: RunPlan,
    result: BenchmarkResult,
    output: Path | None,
    *,
    isolation: str = "process",
    clock: Clock | None = None,
    progress: ProgressCallback | None = None,
) -> BenchmarkResult:
    """Measure every cell of ``plan`` that ``result`` lacks, saving ``result`` to ``output`` after each one.

    Args:
        plan: what to measure.
        result: the result so far (new, or loaded for a resume); its measurements are not measured again.
        output: where to save after each measurement (None: keep in memory only).
        isolation: "process" (a fresh worker per repeat; the default) or "inline" (this process).
        clock: the clock the workloads read (a FakeClock in tests).
        progress: called with a ProgressEvent as the run advances.

    Raises:
        RunInterrupted: on Ctrl-C, after saving everything finished.
    """
    plan.validate()
    clock = clock or WallClock()
    todo = [cell for cell in plan.cells if result.find(cell.key) is None]
    total = len(todo) * plan.repeats
    notify = progress or (lambda event: None)
    on_gpu = any(cell.device.startswith("cuda") for cell in todo)
    executor: ProcessExecutor | InlineExecutor
    if isolation == "inline":
        executor = InlineExecutor()
    elif isolation == "process":
        # Overlap only on a GPU: on a CPU, building the next model would steal cores from the measurement.
        executor = ProcessExecutor(plan.timeout_s, overlap=on_gpu and plan.overlap_prepare)
    else:
        raise ClsbenchError(f"unknown isolation {isolation!r}", "use process or inline")

    skips = {cell.key: static_skip_reason(cell, result.environment, plan.compile_mode) for cell in todo}
    jobs = [
        Job(cell=cell, repeat=r, stop=plan.stop_rule(cell.workload), seed=plan.seed, data_seed=plan.data_seed,
            compile_mode=plan.compile_mode, cudnn_benchmark=plan.cudnn_benchmark, train=plan.train, clock=clock,
            telemetry=plan.telemetry)
        for cell in todo
        if not skips[cell.key]
        for r in range(plan.repeats)
    ]
    done = 0
    measured = 0  # repeats that ran a worker: the ETA is their mean duration times what is left
    spent_s = 0.0
    notify(ProgressEvent("start", 0, total))
    try:
        index = 0
        for cell in todo:
            records: list[dict[str, Any]] = []
            reason = skips[cell.key]
            if reason:  # known before any process starts: no worker needed to say so
                records.append({"status": "skipped", "reason": "unsupported_mode", "detail": reason})
                done += plan.repeats
            for r in range(0 if reason else plan.repeats):
                job = jobs[index + r]
                eta = spent_s / measured * (total - done) if measured else None
                notify(ProgressEvent("repeat", done, total, cell, r + 1, plan.repeats, eta))
                following = jobs[index + r + 1] if index + r + 1 < len(jobs) else None
                t0 = time.monotonic()
                record = executor.run(job, following)
                spent_s += time.monotonic() - t0
                measured += 1
                done += 1
                records.append(record)
                if record["status"] != "ok":
                    # oom, nan_loss, unsupported... repeat the same way: stop this cell, count the rest as done.
                    done += plan.repeats - 1 - r
                    break
            if not reason:
                index += plan.repeats
            measurement = build_measurement(cell, records, plan.stop_rule(cell.workload),
                                                     environment=result.environment)
            result = result.with_measurement(measurement)
            if output is not None:
                result_io.save(result, output)
            notify(ProgressEvent("measurement", done, total, cell, measurement=measurement))
    except KeyboardInterrupt:
        executor.close()
        where = f"; finish it with: clsbench run --resume {output}" if output is not None else ""
        raise RunInterrupted(f"interrupted: {len(result.measurements)} measurement(s) saved{where}",
                             result=result) from None
    finally:
        executor.close()
    notify(ProgressEvent("finish", done, total))
    return result


def static_skip_reason(cell: Cell, environment: dict[str, Any], compile_mode: str) -> str | None:
    """Why ``cell``'s mode cannot run on its device, judged from the recorded environment, or None.

    Only what is certain without a worker (bf16 and TF32 from the GPU's compute capability); anything else is
    left to the worker, which checks again against the live device.
    """
    import torch

    from clsbench.modes import parse_mode
    from clsbench.workloads import get_workload

    capability = (environment.get("gpu") or {}).get("compute_capability")
    try:
        major = float(capability) if capability is not None else None
    except (TypeError, ValueError):
        major = None
    on_cuda = cell.device.startswith("cuda")
    bf16 = True if not on_cuda or major is None else major >= 8.0
    tf32 = on_cuda and (major is None or major >= 8.0)
    mode = parse_mode(cell.mode)
    ctx = mode.context(torch.device(cell.device), get_workload(cell.workload).kind, bf16_supported=bf16,
                       tf32_supported=tf32, compile_mode=compile_mode)
    return mode.unsupported_reason(ctx)


def check_resume_compatible(result: BenchmarkResult, environment: dict[str, Any], source: str) -> None:
    """Refuse to resume a run on a machine or software stack other than the one that started it."""
    from clsbench.system.environment import KEY_FIELDS, get_field

    differences = []
    for path in KEY_FIELDS:
        old, new = get_field(result.environment, path), get_field(environment, path)
        if old != new:
            differences.append(f"{path}: {old} -> {new}")
    if differences:
        raise ResultFileError(
            f"{source} was started in another environment ({'; '.join(differences[:3])})",
            "resume it where it started, or begin a new run",
        )
