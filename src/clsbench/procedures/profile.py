"""``clsbench profile``: where one cell's step time goes.

The cell is measured as ``run`` measures it (one repeat, in a fresh worker, same options), then, after its timed
region, a few more steps run under ``torch.profiler`` (:mod:`clsbench.measure.profiler`). Everything goes into a
new directory, which must not exist (it is never written into, let alone over):

* ``trace.json``: the Chrome trace of the profiled steps (opens in ui.perfetto.dev or chrome://tracing);
* ``summary.json``: the profile summary (:mod:`clsbench.analysis.profile`: the split of the step into phases,
  the top kernels or CPU ops, memory by phase), the cell, and the Nsight Systems command for the same cell;
* ``result.json``: the ordinary result file of the measurement, its profile attached (``clsbench show`` reads it).

Nsight Systems is never required: :func:`nsys_command` gives the ``nsys profile`` command that records the same
cell (measured inline in one process, its phases as NVTX ranges); ``--nsys`` runs it where ``nsys`` is installed.

This module also registers what ``show`` prints for any result that holds profiles (``settings["profile"]``,
written by ``run --profile`` and by this procedure): one row per profiled measurement.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clsbench.core.options import Execution, MeasureOptions, reproduce_command
from clsbench.core.plan import PROFILE_STEPS, PROFILE_WARMUP, Cell, ProfileSettings, RunPlan
from clsbench.core.vocab import Status
from clsbench.errors import InvalidInputError, ResultFileError
from clsbench.procedures.base import PROCEDURES, ProcedureView
from clsbench.results import io as result_io
from clsbench.results.schema import DEFAULT_BACKEND, BenchmarkResult, Measurement

if TYPE_CHECKING:
    from clsbench.core.data_settings import DataSettings

TRACE_FILE = "trace.json"
SUMMARY_FILE = "summary.json"
RESULT_FILE = "result.json"
#: Where ``--nsys`` puts Nsight Systems' report (nsys adds ``.nsys-rep``) and the result file of its run.
NSYS_REPORT = "nsys-report"
NSYS_RESULT_FILE = "nsys-run.json"
#: What Nsight Systems traces: CUDA API and kernels, NVTX (the phases), OS runtime calls, cuDNN and cuBLAS; CPU
#: sampling and context switches off (they add overhead and little to a GPU step).
NSYS_OPTIONS = ("--trace=cuda,nvtx,osrt,cudnn,cublas", "--sample=none", "--cpuctxsw=none")


@dataclass(frozen=True)
class ProfileOutcome:
    """What :func:`profile` produced.

    Attributes:
        directory: the new directory holding the files.
        result: the result file's contents (one measurement).
        summary: the profile summary, or ``{"unavailable": reason}``.
        nsys: the ``nsys profile`` command for the same cell (a list of arguments).
    """

    directory: Path
    result: BenchmarkResult
    summary: dict[str, Any]
    nsys: list[str]

    @property
    def measurement(self) -> Measurement:
        return self.result.measurements[0]

    @property
    def trace(self) -> Path | None:
        path = self.directory / TRACE_FILE
        return path if path.exists() else None


def check_new_directory(directory: str | Path) -> Path:
    """Refuse, before any work, a directory (or file) that exists: a profile goes into a new one.

    Raises:
        ResultFileError: ``directory`` exists.
    """
    path = Path(directory)
    if path.exists():
        raise ResultFileError(f"{path} already exists; a profile goes into a new directory and clsbench never "
                              "writes over one", "choose another -o DIR (it must not exist)")
    return path


def _claim(path: Path) -> None:
    """Create ``path``; one that appeared since it was checked is refused the same way."""
    try:
        path.mkdir(parents=True)
    except FileExistsError:
        raise ResultFileError(f"{path} already exists; a profile goes into a new directory",
                              "choose another -o DIR (it must not exist)") from None
    except OSError as exc:
        raise ResultFileError(f"cannot create directory {path}: {exc.strerror or exc}",
                              "choose another -o DIR") from None


def profile(*, model: str, workload: str, mode: str, batch_size: int | None, device: str, output: str | Path,
            options: MeasureOptions = MeasureOptions(), execution: Execution = Execution(),
            backend: str = DEFAULT_BACKEND, data: DataSettings | None = None, steps: int = PROFILE_STEPS,
            warmup: int = PROFILE_WARMUP) -> ProfileOutcome:
    """Measure one cell (one repeat) and profile it after its timed region; write the files into ``output``.

    Args:
        model, workload, mode, batch_size, device, backend, data: the cell, as ``run`` names it (``batch_size``
            None: the workload's default).
        output: the new directory (refused when it exists).
        options: the measurement options (``repeats`` is always 1: the profile is of the first repeat).
        execution: isolation (a fresh worker by default), the clock, progress and environment hooks; the GPU
            probe is never run.
        steps, warmup: profiled steps, and profiler warm-up steps before them.

    Raises:
        ResultFileError: ``output`` exists or cannot be created.
        InvalidInputError: a name or value no measurement can use.
        RunInterrupted: Ctrl-C; the directory is removed when nothing was written into it but the empty run.
    """
    from clsbench.engine.planning import plan_run
    from clsbench.engine.runner import RunInterrupted, run

    directory = check_new_directory(output)
    settings = ProfileSettings(steps=steps, warmup=warmup,
                               trace_path=str(directory.absolute() / TRACE_FILE)).validate()
    plan = plan_run(models=[model], workloads=[workload], modes=[mode], batch_sizes=[batch_size] if batch_size else [],
                    device=device, options=dataclasses.replace(options, repeats=1), execution=execution,
                    environment=execution.env, data=data, backends=(backend,), profile=settings)
    if len(plan.cells) != 1:
        raise InvalidInputError(f"a profile is of one cell; this names {len(plan.cells)}",
                                "give one --model, --workload, --mode and --batch-size")
    _claim(directory)
    try:
        result = run(plan, directory / RESULT_FILE, execution=dataclasses.replace(execution, probe=False))
    except RunInterrupted as exc:
        where = f"{directory} removed" if _remove_unfinished(directory) else f"{directory} is left as it is"
        raise RunInterrupted(f"interrupted: nothing was profiled; {where}", result=exc.result) from None
    measurement = result.measurements[0]
    summary = measurement.summary.get("profile") or {"unavailable": _why_no_profile(measurement)}
    command = nsys_command(plan, plan.cells[0], directory)
    write_summary(directory / SUMMARY_FILE, measurement, summary, command)
    return ProfileOutcome(directory=directory, result=result, summary=summary, nsys=command)


def _why_no_profile(m: Measurement) -> str:
    if m.status != Status.OK:
        return f"the measurement {m.status}: {m.reason}: {m.detail}"
    return "the worker recorded no profile"


def _remove_unfinished(directory: Path) -> bool:
    """After Ctrl-C: remove what this procedure wrote when nothing finished (the run file holds no measurement) and
    then the directory, when nothing else is in it. Returns whether the directory is gone."""
    result_path = directory / RESULT_FILE
    try:
        if result_path.exists() and result_io.load(result_path).measurements:
            return False  # a finished measurement is never thrown away
        result_path.unlink(missing_ok=True)
        (directory / TRACE_FILE).unlink(missing_ok=True)
        directory.rmdir()
    except (OSError, ResultFileError):
        return False  # something else is there: leave the directory as it is
    return True


def write_summary(path: Path, m: Measurement, summary: dict[str, Any], command: list[str]) -> None:
    """``summary.json``: the cell, the profile summary, the files beside it and the Nsight Systems command."""
    cell = {"model": m.model, "workload": m.workload, "mode": m.mode, "batch_size": m.batch_size,
            "device": m.device, "input_size": m.input_size, **({"backend": m.backend}
                                                                if m.backend != DEFAULT_BACKEND else {}),
            **({"data": m.data} if m.data is not None else {})}
    files = {"result": RESULT_FILE, "trace": TRACE_FILE if (path.parent / TRACE_FILE).exists() else None}
    document = {"cell": cell, "status": m.status, "profile": summary, "files": files,
                "nsys_command": nsys_text(command)}
    result_io.write_text_atomic(path, json.dumps(result_io.jsonable(document), indent=1, allow_nan=False) + "\n")


# ------------------------------------------------------------------------------------------ Nsight Systems


def nsys_command(plan: RunPlan, cell: Cell, directory: Path) -> list[str]:
    """The ``nsys profile`` command that records ``cell`` as ``plan`` measures it, in one process (``--isolation
    inline``: no worker to follow), its phases as NVTX ranges (``CLSBENCH_NVTX=1``), its files in ``directory``."""
    run_args = shlex.split(reproduce_command(dataclasses.replace(plan, profile=None), cell))
    run_args += ["--isolation", "inline", "--no-probe", "-o", str(directory / NSYS_RESULT_FILE)]
    from clsbench.measure.profiler import NVTX_ENV

    return [f"{NVTX_ENV}=1", "nsys", "profile", *NSYS_OPTIONS, "--output", str(directory / NSYS_REPORT), *run_args]


def nsys_text(command: list[str]) -> str:
    """The command as a shell line."""
    setting, *rest = command
    return " ".join([setting, *(shlex.quote(a) for a in rest)])


def nsys_path() -> str | None:
    """Where ``nsys`` is installed (on PATH), or None."""
    return shutil.which("nsys")


def run_nsys(command: list[str]) -> int:
    """Run the :func:`nsys_command` line: nsys from PATH, clsbench as this interpreter's module, NVTX on.

    Returns:
        nsys's exit status.

    Raises:
        InvalidInputError: nsys is not installed.
    """
    nsys = nsys_path()
    if nsys is None:
        raise InvalidInputError(NSYS_MISSING, NSYS_HINT)
    setting, _, *rest = command
    name, _, value = setting.partition("=")
    at = rest.index("clsbench")
    argv = [nsys, *rest[:at], sys.executable, "-m", "clsbench", *rest[at + 1:]]
    return subprocess.run(argv, env={**os.environ, name: value}, check=False).returncode


NSYS_MISSING = "Nsight Systems (nsys) is not installed here"
NSYS_HINT = "install NVIDIA Nsight Systems and put nsys on PATH, or drop --nsys (the torch.profiler trace needs none)"


# ------------------------------------------------------------------------------------------------ show


def profile_section(result: BenchmarkResult) -> str:
    """What ``show`` prints of a result with profiles (``run --profile``, ``clsbench profile``)."""
    from clsbench.report.profile_text import profile_section as rows

    lines = rows(result.measurements)
    return "\n".join(lines) + "\n" if lines else ""


PROCEDURES.register("profile", ProcedureView("profile", profile_section))


@dataclass(frozen=True)
class CellProfileSettings:
    """What ``clsbench profile`` profiles (:func:`clsbench.api.profile` takes it), as :func:`profile`'s arguments of
    the same names: one cell, its backend and real data (None: synthetic), the recorded steps and the profiler's
    warm-up steps before them."""

    model: str
    workload: str = "train"
    mode: str = "fp32"
    batch_size: int | None = None
    device: str = "auto"
    backend: str = DEFAULT_BACKEND
    data: DataSettings | None = None
    steps: int = PROFILE_STEPS
    warmup: int = PROFILE_WARMUP
