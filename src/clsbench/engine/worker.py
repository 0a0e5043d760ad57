"""One repeat of one measurement, run inside a fresh worker process (or inline, for tests and debugging).

A job goes through two phases so the parent can overlap them across workers on a GPU:

* **prepare** (CPU only, never touches the GPU): resolve the model and build it with seeded weights;
* **measure** (exclusive use of the device): configure backend flags, move the model, apply the mode, apply the
  cell's inference backend when it is not ``eager`` (:class:`BackendStep`: build or reuse its artifact, load it),
  run the workload, read memory, and on the first repeat check the backend's outputs against fp32 eager.

With overlap, measure also passes two **gates** (:class:`Gate`): ``device``, after creating the CUDA context and
before the first kernel, where the parent makes sure the previous worker has exited (its GPU memory is freed);
and ``timed``, just before the timed region, where the parent stops the worker preparing ahead (SIGSTOP), so
nothing but this measurement runs on the host or the device while it is timed.

Every outcome becomes a plain dict (a *repeat record*) with ``status`` ``ok``, ``failed`` or ``skipped`` and, when
not ok, a ``reason`` code (``oom``, ``nan_loss``, ``compile_error``, ``unsupported_mode``, ``crash``; for real data
also ``data_error``, ``data_loader_timeout``, ``data_loader_crash``, ``unsupported_pipeline``; for an inference
backend ``unsupported_backend``, ``export_error``, ``build_error``, ``build_crash``, ``build_timeout``,
``load_error``) and a one-line ``detail``. Exceptions never escape :func:`execute`.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from clsbench.core.plan import Cell, StopRule, TrainSettings
from clsbench.core.vocab import Reason, Status
from clsbench.errors import ClsbenchError
from clsbench.measure.clock import Clock, WallClock
from clsbench.results.schema import DEFAULT_BACKEND


@dataclass(frozen=True)
class Job:
    """One repeat of one cell, with everything the worker needs (picklable)."""

    cell: Cell
    repeat: int
    stop: StopRule
    seed: int = 0
    data_seed: int = 0
    compile_mode: str = "default"
    cudnn_benchmark: bool = True
    train: TrainSettings = TrainSettings()
    num_classes: int = 1000
    clock: Clock = field(default_factory=WallClock)
    telemetry: bool = True  # sample NVML over the timed region (GPU only)
    telemetry_interval_s: float = 0.05
    timeout_s: float | None = None  # the worker's own limit (a backend's build must end well before it)
    no_cache: bool = False  # inference backends: build the artifact anew
    cache_dir: str | None = None  # inference backends: the artifact cache (None: its default location)
    profile: Any = None  # a core.plan.ProfileSettings: profile after the timed region (the runner sets it on repeat 0)
    window_s: float | None = None  # a soak: the timed region in windows of this length; Ctrl-C keeps finished ones
    compile_cache_dir: str | None = None  # +compile: Inductor's cache for this cell's repeats (engine.compile_cache)


@dataclass
class Prepared:
    model: Any = None
    input_size: int = 224
    prepare_s: float = 0.0
    costs: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


#: How allocators word running out of memory: CUDA's and most ("out of memory"), torch's CPU allocator
#: ("DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes").
OUT_OF_MEMORY_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory")


def record(status: Status, reason: Reason | None = None, detail: str | None = None, **extra: Any) -> dict[str, Any]:
    """A repeat record: its status, the reason code when it is not ok, a one-line detail, and any other facts."""
    return {"status": status, "reason": reason, "detail": detail, **extra}


def failure_record(exc: BaseException) -> dict[str, Any]:
    """Classify an exception into a failed (or skipped) repeat record; the one classification every worker uses
    (single-process workers here, scale's ranks in :mod:`clsbench.procedures.scale.rank`)."""
    import torch

    from clsbench.backends import BackendNotRun
    from clsbench.data.errors import data_failure_record
    from clsbench.workloads import NonFiniteLossError

    message = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:500]
    if isinstance(exc, BackendNotRun):  # export_error, build_error, build_crash, build_timeout, load_error, skipped
        return exc.record()
    data_record = data_failure_record(exc)  # data_error, data_loader_timeout, data_loader_crash, unsupported_pipeline
    if data_record is not None:
        return data_record
    if isinstance(exc, ModelError):
        return record(Status.FAILED, Reason.MODEL_ERROR, str(exc)[:500])
    if isinstance(exc, ClsbenchError):
        return record(Status.SKIPPED, Reason.UNSUPPORTED_MODE, str(exc))
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or any(words in str(exc).lower()
                                                                      for words in OUT_OF_MEMORY_WORDS):
        return record(Status.FAILED, Reason.OOM, message)
    if isinstance(exc, NonFiniteLossError):
        return record(Status.FAILED, Reason.NAN_LOSS, message)
    if type(exc).__module__.startswith(("torch._dynamo", "torch._inductor")):
        return record(Status.FAILED, Reason.COMPILE_ERROR, message)
    return record(Status.FAILED, Reason.CRASH, message, traceback=traceback.format_exc(limit=8))


class ModelError(Exception):
    """The model could not be resolved or built (``model_error``)."""


def build_model(name: str, *, seed: int, num_classes: int, input_size: int | None) -> tuple[Any, int]:
    """The seeded, randomly initialised model on the CPU, and its input side (the model's own when None).

    Raises:
        ModelError: the name does not resolve or the builder fails to give a model.
    """
    from clsbench.models import get_model_spec

    try:
        spec = get_model_spec(name)
        model = spec.build(seed=seed, num_classes=num_classes, input_size=input_size)
    except ClsbenchError as exc:
        raise ModelError(str(exc)) from exc
    return model, input_size or spec.input_size


def configure_mode(mode_name: str, device: Any, workload_kind: str, *, compile_mode: str,
                   cudnn_benchmark: bool) -> tuple[Any, Any, dict[str, Any]]:
    """Parse the mode, check it against the live device, and set the process-wide flags it needs.

    Returns:
        ``(mode, mode context, flags in force)``.

    Raises:
        ClsbenchError: the mode cannot run here (recorded as skipped, ``unsupported_mode``).
    """
    import torch

    from clsbench.measure.device import device_capabilities
    from clsbench.modes import parse_mode

    mode = parse_mode(mode_name)
    bf16, tf32 = device_capabilities(device)
    ctx = mode.context(device, workload_kind, bf16_supported=bf16, tf32_supported=tf32, compile_mode=compile_mode)
    reason = mode.unsupported_reason(ctx)
    if reason:
        raise ClsbenchError(reason)
    torch.backends.cudnn.benchmark = cudnn_benchmark
    flags = mode.configure(ctx)
    flags["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    flags["num_threads"] = torch.get_num_threads()
    return mode, ctx, flags


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """As timeit and pyperf do: no garbage-collector pauses inside the timed loops (one collection before)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextlib.contextmanager
def _one_thread(enabled: bool) -> Iterator[None]:
    """Limit torch to one CPU thread while preparing alongside another worker's (possibly CPU-bound) measurement."""
    if not enabled:
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _model_costs(model: Any, input_size: int, job: Job) -> dict[str, Any]:
    """FLOPs, parameters and minimal bytes per image, counted on the CPU model (a meta-device copy)."""
    try:
        from clsbench.measure.flops import count_model_costs

        return count_model_costs(model, input_size, num_classes=job.num_classes)
    except Exception as exc:  # noqa: BLE001 - efficiency figures are extras; the measurement goes on without them
        return {"unavailable": f"{type(exc).__name__}: {exc}"[:300]}


class Gate:
    """The worker's side of the overlap handshake: announce a phase, wait until the parent says "ok"."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def __call__(self, phase: str) -> None:
        self._conn.send(("gate", phase))
        reply = self._conn.recv()
        if reply != "ok":
            raise RuntimeError(f"the parent answered {reply!r} at the {phase!r} gate")


def prepare(job: Job, *, ahead: bool = False) -> Prepared:
    """Build the model on the CPU with seeded weights; touches no GPU, so it may overlap another measurement.

    Args:
        job: what to prepare.
        ahead: this worker prepares while another one measures: build on one CPU thread.
    """
    t0 = time.perf_counter()
    try:
        with _one_thread(ahead):
            model, input_size = build_model(job.cell.model, seed=job.seed, num_classes=job.num_classes,
                                            input_size=job.cell.input_size)
            # The costs are the same in every repeat of a cell: count them once, in the first.
            costs = _model_costs(model, input_size, job) if job.repeat == 0 else None
        return Prepared(model=model, input_size=input_size, prepare_s=time.perf_counter() - t0, costs=costs)
    except Exception as exc:  # noqa: BLE001 - recorded as the repeat's failure
        return Prepared(error=failure_record(exc))


def measure(job: Job, prepared: Prepared, gate: Gate | None = None, *, on_window: Any = None,
            early_stop: Any = None) -> dict[str, Any]:
    """Run the workload on the prepared model; return the repeat record.

    With ``job.compile_cache_dir`` (a compiled cell), Inductor compiles into that directory, and the record's
    ``compile_cache`` says what the repeat found there (:func:`clsbench.engine.compile_cache.inductor_cache`).

    Args:
        job: what to measure.
        prepared: what :func:`prepare` built.
        gate: with overlap, the handshake with the parent (see the module's docstring); None runs straight through.
        on_window: a soak (``job.window_s``): called with each finished window's figures.
        early_stop: a soak: the :class:`~clsbench.workloads.base.EarlyStop` that Ctrl-C sets (None: one of its own).
    """
    if prepared.error is not None:
        return prepared.error
    if job.compile_cache_dir is None:
        return _measure(job, prepared, gate, on_window=on_window, early_stop=early_stop)
    from clsbench.engine.compile_cache import inductor_cache

    with inductor_cache(job.compile_cache_dir) as cache:
        out = _measure(job, prepared, gate, on_window=on_window, early_stop=early_stop)
    return out if out.get("status") == Status.SKIPPED else {**out, "compile_cache": cache}


def _measure(job: Job, prepared: Prepared, gate: Gate | None, *, on_window: Any, early_stop: Any) -> dict[str, Any]:
    from clsbench.measure.device import memory_readings, reset_peak_memory
    from clsbench.workloads import WorkloadContext, get_workload
    from clsbench.workloads.base import EarlyStop

    cell = job.cell
    started = time.perf_counter()
    try:
        device, context_s = _open_device(cell)
        if gate is not None:
            gate("device")  # returns once the previous worker has exited: the device is ours alone
        workload = get_workload(cell.workload)
        if cell.data is not None:  # real data through a pipeline (train only; checked when planning)
            workload = _real_data_workload(cell)
        mode, mode_ctx, flags = configure_mode(cell.mode, device, workload.kind, compile_mode=job.compile_mode,
                                               cudnn_benchmark=job.cudnn_benchmark)
        backend = BackendStep(job, mode.name, prepared.input_size, workload.kind, started) \
            if cell.backend != DEFAULT_BACKEND else None
        if backend is not None:
            skipped = backend.unsupported()
            if skipped is not None:
                return skipped
        ready, setup_s = _set_up(prepared, device, workload.kind, mode, mode_ctx)
        if backend is not None:
            ready = backend.apply(ready)  # raises BackendNotRun: the record says which step failed
        reset_peak_memory(device)
        from clsbench.system.telemetry import NoneSource, make_source

        telemetry = (make_source(cell.device, interval_s=job.telemetry_interval_s) if job.telemetry
                     else NoneSource("telemetry was turned off (--no-telemetry)"))
        ctx = WorkloadContext(cell=cell, stop=job.stop, clock=job.clock, device=device, prepared=ready,
                              input_size=prepared.input_size, num_classes=job.num_classes,
                              data_seed=job.data_seed, train=job.train,
                              compiled="compile" in {n.split(":")[0] for n in mode.modifier_names},
                              telemetry=telemetry,
                              # Busy time is a property of the cell, like its FLOPs: profile the first repeat only.
                              profile_busy=job.repeat == 0,
                              # The dispatch calibration explains launch-bound GPU figures; on a CPU the
                              # workload's own threads disturb it.
                              host_calibration=device.type == "cuda",
                              gate=gate, profile=job.profile, window_s=job.window_s, on_window=on_window,
                              early_stop=early_stop if early_stop is not None or job.window_s is None
                              else EarlyStop())
        with no_gc():
            out = workload.run(ctx)
        flags["gc_disabled_while_running"] = True
        timings = _timings(prepared, context_s, setup_s, out, ctx.compiled)
        memory = memory_readings(device)
        extra: dict[str, Any] = {}
        if backend is not None:
            timings["backend_s"] = backend.seconds
            # Parity is a property of the artifact, like its FLOPs: checked once, after the first repeat's figures.
            extra = {"backend": backend.facts, **({"parity": backend.parity(ready)} if job.repeat == 0 else {})}
        timings["measure_s"] = time.perf_counter() - started  # all of measure: what the phases above leave out
        return record(
            Status.OK,
            samples=out.samples,
            timings=timings,
            validity=out.validity,
            memory=memory,
            flags=flags,
            mode_notes=ready.notes,
            input_size=prepared.input_size,
            telemetry=out.telemetry,
            host_cpu=ctx.host_cpu,
            busy=out.busy,
            costs=prepared.costs,
            pid=os.getpid(),
            **({"data": out.data} if out.data is not None else {}),
            **({"profile": out.profile} if out.profile is not None else {}),
            **extra,
        )
    except Exception as exc:  # noqa: BLE001 - any failure is recorded, the suite goes on
        return failure_record(exc)


def _open_device(cell: Cell) -> tuple[Any, float | None]:
    """The cell's torch device and, on a GPU, the seconds its CUDA context took to create (None elsewhere).

    The context comes first and on its own (host-side driver work plus a tiny allocation, no kernel), so that its
    cost is reported apart and charged neither to moving the model nor to the workload.
    """
    import torch

    device = torch.device(cell.device)
    context_s = None
    if device.type == "cuda":
        t0 = time.perf_counter()
        if device.index is not None:
            torch.cuda.set_device(device.index)
        torch.empty(1, device=device)
        context_s = time.perf_counter() - t0
    return device, context_s


def _real_data_workload(cell: Cell) -> Any:
    """The train workload fed through the cell's real-data pipeline in place of the resident synthetic batch.

    Raises:
        DataError: the cell's workload is not ``train``, the only one real data feeds (planning refuses it; a job
            made by hand may not have been planned).
    """
    from clsbench.workloads.train_data import TrainWithData

    if cell.workload != "train":
        from clsbench.data.errors import DataError

        raise DataError(f"real data feeds the train workload only, not {cell.workload}")
    return TrainWithData()


def _set_up(prepared: Prepared, device: Any, kind: str, mode: Any, mode_ctx: Any) -> tuple[Any, float]:
    """Move the model to the device (in eval mode for inference) and apply the mode.

    Returns:
        ``(the mode's prepared model, seconds taken)``; on a GPU the device is synchronised before the clock is
        read, so the copies queued by the move are counted.
    """
    import torch

    t0 = time.perf_counter()
    model = prepared.model.to(device)
    if kind == "inference":
        model.eval()
    ready = mode.prepare(model, mode_ctx)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return ready, time.perf_counter() - t0


def _timings(prepared: Prepared, context_s: float | None, setup_s: float, out: Any, compiled: bool) -> dict[str, Any]:
    """The repeat's phase durations: preparing, the CUDA context, setting up, then the workload's own; with
    ``+compile`` also ``compile_s``, the first call's time (compilation is lazy: it happens inside that call)."""
    timings = {"prepare_s": prepared.prepare_s, "context_s": context_s, "setup_s": setup_s, **out.timings}
    if compiled:
        timings["compile_s"] = out.timings.get("first_iteration_s")
    return timings


#: A backend's build must end this long before the worker's own limit, so the worker lives to record the timeout.
BUILD_MARGIN_S = 60.0
#: A build is never given less than this, however little of the worker's limit is left.
MIN_BUILD_S = 30.0


class BackendStep:
    """A non-eager cell's inference backend inside one repeat (:mod:`clsbench.backends.apply`): checked before the
    model is prepared, applied after the mode prepared it (build or cache, load, wrap), checked for parity after
    the timed region."""

    def __init__(self, job: Job, mode: str, input_size: int, workload_kind: str, started: float) -> None:
        from clsbench.backends import BackendRequest

        self.job = job
        self.name = job.cell.backend
        self.started = started
        self.request = BackendRequest(model=job.cell.model, mode=mode, batch_size=job.cell.batch_size,
                                      input_size=input_size, device=job.cell.device, seed=job.seed,
                                      num_classes=job.num_classes, workload_kind=workload_kind)
        self.facts: dict[str, Any] = {"name": self.name}
        self.seconds: float | None = None

    def unsupported(self) -> dict[str, Any] | None:
        """A skipped record (``unsupported_backend``) when the backend cannot run this request here, else None."""
        from clsbench.backends import backend_unsupported_reason

        reason = backend_unsupported_reason(self.name, self.request)
        if reason is None:
            return None
        return record(Status.SKIPPED, Reason.UNSUPPORTED_BACKEND, reason, backend={"name": self.name})

    def build_timeout_s(self) -> float:
        """The build's limit: the backends' default, or what the worker's own limit leaves, less a margin."""
        from clsbench.backends.isolate import DEFAULT_BUILD_TIMEOUT_S

        if self.job.timeout_s is None:
            return DEFAULT_BUILD_TIMEOUT_S
        left = self.job.timeout_s - (time.perf_counter() - self.started) - BUILD_MARGIN_S
        return max(MIN_BUILD_S, min(DEFAULT_BUILD_TIMEOUT_S, left))

    def apply(self, prepared: Any) -> Any:
        """The Prepared that runs the backend; raises :class:`~clsbench.backends.BackendNotRun` when it cannot."""
        from clsbench.backends import ArtifactCache, apply_backend

        t0 = time.perf_counter()
        ready, self.facts = apply_backend(self.name, prepared, self.request, cache=ArtifactCache(self.job.cache_dir),
                                          no_cache=self.job.no_cache, build_timeout_s=self.build_timeout_s())
        self.seconds = time.perf_counter() - t0
        return ready

    def parity(self, ready: Any) -> dict[str, Any]:
        """Outputs against fp32 eager on a fixed batch (:func:`clsbench.backends.check_parity`); never raises."""
        from clsbench.backends import check_parity

        return check_parity(ready, self.request, data_seed=self.job.data_seed)


def execute(job: Job, on_window: Any = None) -> dict[str, Any]:
    """Prepare and measure in this process (the inline path; a soak's Ctrl-C arrives as KeyboardInterrupt)."""
    return measure(job, prepare(job), on_window=on_window)


#: The signal the parent sends a soak's worker on Ctrl-C: end after the current window (the worker ignores SIGINT).
EARLY_STOP_SIGNAL = getattr(signal, "SIGUSR1", None)


def _window_sender(conn: Any) -> Any:
    """``on_window`` of a worker process: each finished window goes to the parent as a ``("window", figures)``
    message (a parent that went away costs nothing here: the worker ends with it)."""
    def send(figures: dict[str, Any]) -> None:
        with contextlib.suppress(OSError, ValueError):
            conn.send(("window", figures))

    return send


def worker_main(conn: Any) -> None:
    """Entry point of a worker process: job -> prepare -> 'ready' -> wait for 'go' -> measure -> result.

    The worker ends itself when the run that started it is gone (:func:`clsbench.system.lifetime
    .exit_with_parent_process`), so a killed run never leaves a worker holding the GPU. A fatal signal (a native
    library's SIGSEGV) writes the Python stack to stderr before the process dies, so the run's output says where a
    ``crash`` record came from.
    """
    import faulthandler

    from clsbench.system.lifetime import (
        exit_with_parent_process,
        release_compile_workers,
        thread_lock_for_progress_bars,
    )

    exit_with_parent_process()
    faulthandler.enable()
    thread_lock_for_progress_bars()
    try:
        job, gated, ahead = conn.recv()
        early_stop = on_window = None
        if job.window_s is not None:  # a soak: windows go to the parent as they end; Ctrl-C keeps the finished ones
            from clsbench.workloads.base import EarlyStop

            early_stop = EarlyStop()
            on_window = _window_sender(conn)
            if EARLY_STOP_SIGNAL is not None:
                signal.signal(EARLY_STOP_SIGNAL, early_stop.handler)
        prepared = prepare(job, ahead=ahead)
        conn.send(("ready", None))
        message = conn.recv()
        if message != "go":
            return
        result = measure(job, prepared, Gate(conn) if gated else None, on_window=on_window, early_stop=early_stop)
        release_compile_workers()
        conn.send(("result", result))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        conn.close()
