"""Builds run in a child process, so an exporter or compiler that dies takes only its own measurement with it.

On the H200 image a bare ``torch.export`` + ``aoti_compile_and_package`` of ResNet-50 with bf16 weights and
channels_last killed its process with SIGSEGV. Here the export and compile happen in a fresh ``spawn`` child (a
clean interpreter and CUDA context; ``fork`` is unsafe once CUDA is initialised, and ``spawn`` hands the child the
parent's ``sys.path``, so custom and test models resolve there too). The child rebuilds the architecture from the
model's name and loads the parent's exact weights from a file (``load_state_dict(assign=True)`` keeps their dtype
and memory format), replays the parent's numeric flags (TF32, cuDNN benchmark), builds, and answers on a pipe.

Outcomes: the answer ``ok`` with the build's facts; a :class:`~clsbench.backends.base.BuildStepError` or other
exception becomes ``export_error`` / ``build_error`` with its first line; a child that dies without answering is
``build_crash`` with the signal's name; one that runs past the limit is killed with its whole process group
(compile workers included) as ``build_timeout``. The child's stdout and stderr, C++ compilers' output and a
``faulthandler`` stack at a fatal signal included, go to ``build.log`` in the build folder; a failure keeps its
last lines.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import multiprocessing
import os
import signal
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clsbench.backends.base import (
    FAILED_BUILD,
    FAILED_CRASH,
    FAILED_LOAD,
    FAILED_TIMEOUT,
    Backend,
    BackendRequest,
    BuildStepError,
    first_line,
)
from clsbench.system.processes import worker_processes_allowed

#: Where the child's output goes, inside the build folder (kept with the artifact, not part of it).
BUILD_LOG = "build.log"
#: The weights file the parent writes for the child (deleted once the build is over).
WEIGHTS_FILE = "weights.pt"
#: Written into the build folder while the build process loads the new artifact (:func:`smoke_load`): a process
#: that died with it in place died loading, not building.
LOAD_MARKER = "loading.marker"
#: Lines of the build log a failed record keeps.
LOG_TAIL_LINES = 20
#: A whole build (export + compile + serialise) may take this long by default. AOTInductor compiles every fused
#: kernel with Triton, and TensorRT's tactic search on a large network takes minutes. It stays under the
#: worker's own limit per repeat (900 s by default, ``--timeout``), which would otherwise end the build's parent
#: first; the worker passes what is left of its own limit when that is less.
DEFAULT_BUILD_TIMEOUT_S = 600.0
#: prctl(2) option: the signal the kernel sends this process when its parent dies (Linux).
PR_SET_PDEATHSIG = 1
#: After killing a timed-out child, wait this long for it to be reaped.
KILL_WAIT_S = 10.0


@dataclass(frozen=True)
class BuildJob:
    """Everything the build process needs; picklable (the backend object travels by reference to its class)."""

    backend: Backend
    request: BackendRequest
    weights_path: str
    out_dir: str
    variant: str
    flags: dict[str, Any] = field(default_factory=dict)


@dataclass
class BuildOutcome:
    """What one build attempt came to.

    Attributes:
        ok: the artifact is written.
        reason: the failure's reason code (:mod:`clsbench.backends.base`), None when ok.
        detail: the failure in one line.
        facts: the backend's build facts (ok only).
        build_s: export + compile + serialise inside the child (from a built model to files on disk).
        process_s: the whole attempt as the parent saw it (interpreter start, imports, model rebuild included).
        exitcode: the child's exit code (negative: killed by that signal); None inline.
        log_tail: the last lines of the build log (failures only).
        smoke_load_s: loading the new artifact and running it once in the build process (:func:`smoke_load`).
    """

    ok: bool
    reason: str | None = None
    detail: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    build_s: float | None = None
    process_s: float | None = None
    exitcode: int | None = None
    log_tail: list[str] = field(default_factory=list)
    smoke_load_s: float | None = None


def torch_flags() -> dict[str, Any]:
    """The process-wide numeric flags a mode sets (TF32, matmul precision, cuDNN benchmark), to replay in the child.

    Inductor reads them at compile time, TorchScript and torch.export trace under them: a build must see what the
    measuring process was configured with.
    """
    import torch

    return {
        "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
    }


def _apply_flags(flags: dict[str, Any]) -> None:
    import warnings

    import torch

    with warnings.catch_warnings():  # newer torch warns about the legacy TF32 flags; both are honoured
        warnings.simplefilter("ignore")
        if "matmul_allow_tf32" in flags:
            torch.backends.cuda.matmul.allow_tf32 = flags["matmul_allow_tf32"]
        if "cudnn_allow_tf32" in flags:
            torch.backends.cudnn.allow_tf32 = flags["cudnn_allow_tf32"]
        if "float32_matmul_precision" in flags:
            torch.set_float32_matmul_precision(flags["float32_matmul_precision"])
        if "cudnn_benchmark" in flags:
            torch.backends.cudnn.benchmark = flags["cudnn_benchmark"]


def save_weights(model: Any, path: Path) -> None:
    """Write the model's state for the build process (dtype and memory format preserved)."""
    import torch

    torch.save(model.state_dict(), path)


def rebuild_model(request: BackendRequest, weights_path: str | os.PathLike[str]) -> Any:
    """The parent's model, in the build process: the architecture from the spec, the weights from the file.

    The module is cast and laid out as the mode prepares it (so non-persistent buffers match too), then takes the
    saved tensors as they are.
    """
    import torch

    from clsbench.models import get_model_spec

    device = torch.device(request.device)
    spec = get_model_spec(request.model)
    model = spec.build(seed=request.seed, num_classes=request.num_classes, input_size=request.input_size)
    model = model.to(device=device, dtype=request.dtype)
    if request.channels_last:
        model = model.to(memory_format=torch.channels_last)
    state = torch.load(weights_path, map_location=device, weights_only=True)
    model.load_state_dict(state, assign=True)
    return model.eval()


def run_build(job: BuildJob) -> BuildOutcome:
    """One build in this process: rebuild the model, build, classify any exception. Never raises."""
    try:
        import torch

        _apply_flags(job.flags)
        if job.request.device_type == "cuda":
            torch.cuda.set_device(job.request.device_index)
        for module in getattr(job.backend, "build_imports", ()):
            importlib.import_module(module)
        model = rebuild_model(job.request, job.weights_path)
        example = job.request.example()
        t0 = time.perf_counter()
        facts = job.backend.build(model, example, job.request, Path(job.out_dir), job.variant)
        if job.request.device_type == "cuda":
            torch.cuda.synchronize()
        build_s = time.perf_counter() - t0
        facts = dict(facts or {})
        t1 = time.perf_counter()
        failure = smoke_load(job, example, facts)
        if failure is not None:
            return failure
        return BuildOutcome(ok=True, facts=facts, build_s=build_s, smoke_load_s=time.perf_counter() - t1)
    except BuildStepError as exc:
        return BuildOutcome(ok=False, reason=exc.reason, detail=exc.detail[:500])
    except Exception as exc:  # noqa: BLE001 - any build failure is that measurement's, never the suite's
        return BuildOutcome(ok=False, reason=FAILED_BUILD, detail=first_line(exc),
                            log_tail=traceback.format_exc(limit=6).splitlines()[-LOG_TAIL_LINES:])


def smoke_load(job: BuildJob, example: Any, facts: dict[str, Any]) -> BuildOutcome | None:
    """Load the new artifact once and run it on the example, here in the build process; a failure, or None.

    A loader that crashes (on the H200 image every AOTInductor package compiled by its ``$CXX`` died with SIGSEGV
    at load, see :func:`clsbench.backends.export.choose_compiler`) then takes the build process with it, not the
    measuring worker, and the parent reads the marker file left behind as ``load_error`` (which is not retried:
    another build variant loads the same way).
    The outcome's ``smoke_load_s`` records what it cost.
    """
    import torch

    marker = Path(job.out_dir) / LOAD_MARKER
    marker.write_text("loading\n", encoding="utf-8")
    try:
        loaded = job.backend.load(Path(job.out_dir), job.request, facts)
        fmt = loaded.memory_format
        x = example if fmt is None else example.contiguous(memory_format=fmt)
        with torch.inference_mode():
            loaded.forward(x)
        if job.request.device_type == "cuda":
            torch.cuda.synchronize()
        del loaded
    except Exception as exc:  # noqa: BLE001 - an artifact that does not load is that measurement's failure
        return BuildOutcome(ok=False, reason=FAILED_LOAD, detail=f"the artifact was built but does not load or run: "
                                                                 f"{first_line(exc)}"[:500],
                            log_tail=traceback.format_exc(limit=6).splitlines()[-LOG_TAIL_LINES:])
    marker.unlink(missing_ok=True)
    return None


def _die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when its parent dies (Linux), so a worker killed on its own timeout
    leaves no orphaned build behind; the build leads its own process group and would not get the parent's signal."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)


def _child_main(conn: Any, job: BuildJob, log_path: str, parent: int) -> None:
    """Entry point of the build process: tied to its parent, own process group, output to the log, build, answer."""
    _die_with_parent(parent)
    with contextlib.suppress(OSError):
        os.setpgrp()  # so a timeout can end the compile workers this build starts, and nothing else
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    faulthandler.enable()  # a fatal signal writes the Python stack into the log
    outcome = run_build(job)
    try:
        conn.send(outcome)
    finally:
        conn.close()
        with contextlib.suppress(Exception):
            import sys

            sys.stdout.flush()
            sys.stderr.flush()


def _log_tail(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return [line[:300] for line in lines if line.strip()][-LOG_TAIL_LINES:]


def _signal_name(exitcode: int | None) -> str:
    if exitcode is None:
        return "no exit code"
    if exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def _kill_group(process: Any) -> None:
    """Kill the child's process group (it leads one, see :func:`_child_main`); fall back to the child alone."""
    try:
        if os.getpgid(process.pid) == process.pid:
            os.killpg(process.pid, signal.SIGKILL)
            return
    except (OSError, AttributeError):
        pass
    process.kill()


def build_isolated(job: BuildJob, *, timeout_s: float = DEFAULT_BUILD_TIMEOUT_S, isolate: bool = True) -> BuildOutcome:
    """Run one build attempt in a fresh ``spawn`` child (or inline with ``isolate=False``). Never raises.

    Args:
        job: the build.
        timeout_s: limit on the whole attempt, interpreter start included.
        isolate: False builds in this process (tests, debugging): a crash then takes this process with it.
    """
    log_path = Path(job.out_dir) / BUILD_LOG
    t0 = time.perf_counter()
    if not isolate:
        outcome = run_build(job)
        outcome.process_s = time.perf_counter() - t0
        return outcome
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child_main, args=(sender, job, str(log_path), os.getpid()), daemon=True,
                          name=f"clsbench-build-{job.backend.name}")
    with worker_processes_allowed():  # a clsbench worker is daemonic; the build is tied to it (PR_SET_PDEATHSIG)
        process.start()
    sender.close()
    outcome: BuildOutcome | None = None
    timed_out = False
    try:
        if receiver.poll(timeout_s):
            outcome = receiver.recv()
        else:
            timed_out = True
    except (EOFError, OSError):
        outcome = None  # the child died before answering
    except BaseException:  # Ctrl-C: the child leads its own process group, so the terminal's signal missed it
        _kill_group(process)
        process.join(KILL_WAIT_S)
        raise
    finally:
        receiver.close()
        if timed_out and process.is_alive():
            _kill_group(process)
        process.join(KILL_WAIT_S if timed_out else None)
        if process.is_alive():  # answered, then hung in teardown: its answer stands
            _kill_group(process)
            process.join(KILL_WAIT_S)
    elapsed = time.perf_counter() - t0
    if outcome is None:
        if timed_out:
            outcome = BuildOutcome(ok=False, reason=FAILED_TIMEOUT,
                                   detail=f"the build ran past its limit of {timeout_s:g} s and was killed")
        elif (Path(job.out_dir) / LOAD_MARKER).exists():
            outcome = BuildOutcome(ok=False, reason=FAILED_LOAD,
                                   detail=f"the artifact was built, but loading it killed the build process "
                                          f"({_signal_name(process.exitcode)}); see {BUILD_LOG}")
        else:
            outcome = BuildOutcome(ok=False, reason=FAILED_CRASH,
                                   detail=f"the build process died ({_signal_name(process.exitcode)}) "
                                          f"before answering; see {BUILD_LOG}")
    outcome.process_s = elapsed
    outcome.exitcode = process.exitcode
    if not outcome.ok:
        outcome.log_tail = outcome.log_tail or _log_tail(log_path)
    return outcome
