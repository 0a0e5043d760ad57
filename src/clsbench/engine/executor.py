"""Executors: where one repeat runs. A fresh worker process per repeat (:class:`ProcessExecutor`), or this process
(:class:`InlineExecutor`, for tests and debugging).

Start-up cost is kept small without sharing state between measurements:

* workers are forked from a **forkserver** that has already imported torch, torchvision (and timm) but never
  touched the GPU, so each worker starts in tens of milliseconds with a clean CUDA context and allocator;
* on a GPU (``overlap``), the next worker is forked and **prepares** (builds its model on the CPU) while the
  current one starts up, autotunes and warms up, and is stopped (SIGSTOP) before the current one's timed region
  begins, so it takes nothing from the timed work; it gets "go" only after the current result has arrived. A
  finished worker is killed without waiting for it to exit: the next worker creates its CUDA context meanwhile,
  and waits at its ``device`` gate until the old process is gone (its GPU memory freed) before any kernel runs.
  No two measurements ever run kernels at the same time, and no other worker runs while one is timed.

A soak's worker (``job.window_s``) sends each finished window as it ends (``("window", figures)``, handed to
``on_window``); Ctrl-C while it measures asks it to stop after the window in flight (:data:`EARLY_STOP_SIGNAL`) and
waits for its result, so every finished window is kept; a second Ctrl-C abandons it.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from clsbench.core.vocab import Reason, Status
from clsbench.engine.worker import EARLY_STOP_SIGNAL, Job, execute, worker_main

#: ``on_window(job, figures)``: a soak's finished window, as the worker reported it.
WindowCallback = Callable[[Job, dict[str, Any]], None]

#: Seconds a soak's worker gets, beyond one window, to finish its window and send its result after Ctrl-C.
EARLY_STOP_GRACE_S = 120.0

#: Modules the forkserver imports once, so forked workers start with them loaded (import errors are ignored). The
#: first makes it (and its workers) ignore Ctrl-C, which the run handles.
PRELOAD_MODULES = ["clsbench.engine.forkserver_setup", "torch", "torchvision", "timm", "clsbench.engine.worker",
                   "clsbench.workloads", "clsbench.modes", "clsbench.models"]

#: Seconds to wait for a killed worker to be reaped.
KILL_GRACE_S = 5.0

#: Whether a worker prepared ahead can be paused during another's timed region (POSIX job-control signals).
_CAN_STOP = hasattr(signal, "SIGSTOP") and hasattr(signal, "SIGCONT")


class _Worker:
    """A worker process and the parent's end of its pipe."""

    def __init__(self, ctx: Any, job: Job, gated: bool, ahead: bool = False) -> None:
        self.job = job
        self.stopped = False
        self.timed_out = False  # the last wait ended at its deadline with no message
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child,), daemon=True,
                                   name=f"clsbench-{job.cell.label()}-r{job.repeat}")
        self.process.start()  # the first start also starts the forkserver (imports torch): not the worker's time
        self.started = time.monotonic()
        child.close()
        self.conn.send((job, gated, ahead))

    def wait(self, deadline: float) -> tuple[str, Any] | None:
        """Next message, or None when the deadline passes (then :attr:`timed_out` is set) or the process dies first."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                # A message that arrived in time but was not read yet (the worker waited its turn) still counts.
                if self.conn.poll(0):
                    return self.conn.recv()
                self.timed_out = True
                return None
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

    def request_stop(self) -> bool:
        """Ask a soak's worker to end after its current window (:data:`EARLY_STOP_SIGNAL`); False when it cannot
        be asked (no such signal here, or the process is gone)."""
        if EARLY_STOP_SIGNAL is None or not self.process.is_alive():
            return False
        try:
            os.kill(self.process.pid, EARLY_STOP_SIGNAL)
        except ProcessLookupError:
            return False
        return True

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
        # A worker past its deadline timed out even if it then ends within the grace second (a loaded host).
        if code is None or self.timed_out:
            return {"status": Status.FAILED, "reason": Reason.TIMEOUT,
                    "detail": f"no result within {timeout_s:g} s; the worker was killed"}
        what = f"signal {-code}" if code < 0 else f"exit code {code}"
        return {"status": Status.FAILED, "reason": Reason.CRASH,
                "detail": f"worker process died ({what}) without a result"}


class ProcessExecutor:
    """Runs each job in its own process; with ``overlap``, prepares the next job while the current one is not timed.

    Overlap protocol (see the module's docstring): the worker announces its ``device`` gate (context created, no
    kernel yet) and its ``timed`` gate (timed region about to start); the parent answers "ok" after reaping the
    previous worker and after pausing the worker prepared ahead, respectively.
    """

    def __init__(self, timeout_s: float, overlap: bool, on_window: WindowCallback | None = None) -> None:
        self.on_window = on_window
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
            return self._await_result(worker, time.monotonic() + self.timeout_s)
        finally:
            if self._ahead is not None:
                self._ahead.resume()
            if self.overlap:
                self._reap_exiting()
                worker.kill(wait=False)
                self._exiting = worker
            else:
                worker.kill()

    def _await_result(self, worker: _Worker, deadline: float) -> dict[str, Any]:
        """The measuring worker's messages until its result: gates, a soak's windows; Ctrl-C on a soak asks it to
        stop after its current window and goes on waiting (a second Ctrl-C, or no result in time, interrupts)."""
        stopping = False
        while True:
            try:
                message = worker.wait(deadline)
                if message is None and stopping:
                    raise KeyboardInterrupt  # it stopped before its timed region (nothing to keep), or not in time
                if message is None or message[0] not in ("gate", "result", "window"):
                    return worker.death_record(self.timeout_s)
                if message[0] == "result":
                    return {**message[1], "overlap": dict(self._gates)} if self.overlap else message[1]
                if message[0] == "window":
                    if self.on_window is not None:
                        self.on_window(worker.job, message[1])
                    continue
                self._pass_gate(message[1])
                worker.conn.send("ok")
            except KeyboardInterrupt:
                if stopping or worker.job.window_s is None or not worker.request_stop():
                    raise
                stopping = True
                deadline = min(deadline, time.monotonic() + worker.job.window_s + EARLY_STOP_GRACE_S)

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

    def __init__(self, on_window: WindowCallback | None = None) -> None:
        self.on_window = on_window

    def run(self, job: Job, next_job: Job | None) -> dict[str, Any]:
        if self.on_window is None or job.window_s is None:
            return execute(job)
        callback = self.on_window
        return execute(job, on_window=lambda figures: callback(job, figures))

    def close(self) -> None:
        pass
