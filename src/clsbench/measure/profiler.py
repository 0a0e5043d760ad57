"""Profiling a few steps after the timed region with ``torch.profiler``: the phase ranges the workloads open, the
driver that records and exports the trace, and the summary of it (:mod:`clsbench.analysis.profile`).

The workloads wrap each part of a step in :func:`phase` (``with phase("forward"): ...``). Outside a profile it
returns a shared no-op context manager after one flag test, so the timed region pays nothing measurable; while
:func:`profile_steps` records, it opens a ``torch.profiler.record_function`` range named ``clsbench.<phase>``.
With ``CLSBENCH_NVTX=1`` in the environment (the ``nsys profile`` command that ``clsbench profile`` prints sets it)
it opens an NVTX range of the same name instead, always, so Nsight Systems shows the phases on its timeline.

:func:`profile_steps` runs after the timed region (as the busy-time profile does, :mod:`clsbench.measure.busy`):
``warmup`` steps under the profiler that are thrown away, then ``steps`` recorded ones, CPU activity always and
CUDA activity on a GPU, with memory events. The device is synchronised before the first recorded step and inside
the last, so the recorded window holds exactly those steps' work. It never raises: a failure (no CUPTI, a full
disk, a step that fails) gives ``{"unavailable": reason}`` and the measurement stands.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from clsbench.analysis.profile import PHASE_PREFIX, PHASES, summarize_trace

#: The environment variable that turns the phases into NVTX ranges for Nsight Systems.
NVTX_ENV = "CLSBENCH_NVTX"

_NULL = contextlib.nullcontext()
#: [recording under torch.profiler, NVTX requested (None: not read yet)]; one process records one profile at a time.
_STATE: list[Any] = [False, None]


def phase(name: str) -> contextlib.AbstractContextManager[Any]:
    """A range around one phase of a step (one of :data:`clsbench.analysis.profile.PHASES`): a no-op unless a
    profile is recording or NVTX was asked for (module docstring)."""
    if _STATE[0]:
        from torch.profiler import record_function

        return record_function(PHASE_PREFIX + name)
    if _STATE[1] is None:
        _STATE[1] = os.environ.get(NVTX_ENV) == "1"
    if _STATE[1]:
        return _nvtx(PHASE_PREFIX + name)
    return _NULL


@contextlib.contextmanager
def _nvtx(name: str) -> Iterator[None]:
    import torch

    if not torch.cuda.is_available():
        yield
        return
    torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        torch.cuda.nvtx.range_pop()


@contextlib.contextmanager
def _recording() -> Iterator[None]:
    _STATE[0] = True
    try:
        yield
    finally:
        _STATE[0] = False


def record_trace(run_once: Callable[[], Any], *, steps: int, warmup: int, cuda: bool, trace_path: Path) -> None:
    """Run ``warmup + steps`` calls of ``run_once`` under ``torch.profiler`` and export the recorded ``steps`` as a
    Chrome trace to ``trace_path``."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])

    def synchronize() -> None:
        if cuda:
            torch.cuda.synchronize()

    total = warmup + steps
    with warnings.catch_warnings():
        # torch warns once per process that events are cleared per cycle (one cycle is all we record), and that
        # no warm-up may skew the results (--profile-warmup 0 asks for exactly that).
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*won't be using warmup.*", category=UserWarning)
        synchronize()
        plan = schedule(wait=0, warmup=warmup, active=steps, repeat=1)
        with _recording(), profile(activities=activities, schedule=plan, profile_memory=True, record_shapes=False,
                                   with_stack=False) as prof:
            for index in range(total):
                run_once()
                if index in (warmup - 1, total - 1):
                    synchronize()  # the recorded window starts with an idle device and ends with its work done
                prof.step()
        prof.export_chrome_trace(str(trace_path))


def profile_steps(run_once: Callable[[], Any], *, steps: int, warmup: int, cuda: bool,
                  trace_path: str | None = None, measured_step_ms: float | None = None) -> dict[str, Any]:
    """Profile ``steps`` calls of ``run_once`` and summarise them; never raises.

    Args:
        run_once: one step of the workload (its phases marked with :func:`phase`).
        steps, warmup: recorded steps, and profiler warm-up steps before them.
        cuda: the steps run on a GPU (CUDA activity is recorded too).
        trace_path: where the Chrome trace goes (it must not exist); None: a temporary file, removed afterwards.
        measured_step_ms: the timed region's step time, to state the profiler's overhead.

    Returns:
        The summary (:func:`clsbench.analysis.profile.summarize_trace`) with ``trace_path`` (None when it was not
        kept), ``warmup_steps`` and ``profile_s`` (the seconds all this took); or ``{"unavailable": reason,
        "profile_s": ...}``.
    """
    t0 = time.perf_counter()
    keep = trace_path is not None
    path = Path(trace_path) if keep else Path(tempfile.gettempdir()) / f"clsbench-trace-{os.getpid()}.json"
    partial = path.with_name(f".{path.name}.partial")
    try:
        record_trace(run_once, steps=steps, warmup=warmup, cuda=cuda, trace_path=partial)
        with open(partial, encoding="utf-8") as fh:
            trace = json.load(fh)
        summary = summarize_trace(trace, gpu=cuda, measured_step_ms=measured_step_ms)
        if keep:
            if path.exists():
                raise FileExistsError(f"{path} exists; the trace is not written over it")
            os.replace(partial, path)
        return {**summary, "trace_path": str(path) if keep else None, "warmup_steps": warmup,
                "phases": list(PHASES), "profile_s": time.perf_counter() - t0}
    except Exception as exc:  # noqa: BLE001 - a profile is an extra; its absence must not fail the measurement
        return {"unavailable": f"{type(exc).__name__}: {exc}"[:300], "profile_s": time.perf_counter() - t0}
    finally:
        partial.unlink(missing_ok=True)
