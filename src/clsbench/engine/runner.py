"""Run a plan: one fresh worker per repeat (:mod:`clsbench.engine.executor`) through the one repeat loop
(:mod:`clsbench.engine.loop`), failure reasons, atomic saves after every measurement, resume.

Each finished repeat is written to the output file at once (atomically), so an interruption loses at most the
repeat in flight; :func:`resume` measures only the repeats the file lacks.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import secrets
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clsbench.analysis.summary import build_measurement
from clsbench.core.options import Execution
from clsbench.core.plan import Cell, RunPlan
from clsbench.core.vocab import Reason, Status
from clsbench.engine.executor import InlineExecutor, ProcessExecutor
from clsbench.engine.loop import Procedure, measure_all, schedule
from clsbench.engine.worker import Job
from clsbench.errors import EXIT_INTERRUPTED, ClsbenchError, ResultFileError
from clsbench.measure.clock import WallClock
from clsbench.results import io as result_io
from clsbench.results.schema import DEFAULT_BACKEND, BenchmarkResult
from clsbench.system.machine import run_facts

#: A run's id is this many random bytes, in hex (12 characters: a collision needs about 2^24 runs in one index).
RUN_ID_BYTES = 6


class RunInterrupted(ClsbenchError):
    """Ctrl-C during a run; everything finished so far is in the output file, and in ``result``."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str, hint: str | None = None, result: BenchmarkResult | None = None,
                 report: list[str] | None = None) -> None:
        super().__init__(message, hint)
        self.result = result
        self.report = report or []  # the table of every measurement: finished, partly saved, lost, not started


def interruption(cells: Sequence[Cell], repeats: int, partial: BenchmarkResult, in_flight: tuple[Any, int] | None,
                 output: str | Path | None) -> RunInterrupted:
    """What Ctrl-C leaves, as the error ``run`` ends with: one line of counts and the exact resume command, and
    a table (``report``) of each planned measurement: repeats saved, and whether it finished, was partly saved, lost
    the repeat in flight, or had not started."""
    from clsbench.core.text_table import text_table

    rows: list[tuple[str, str, str]] = []
    counts = {"finished": 0, "partly saved": 0, "lost": 0, "not started": 0}
    for cell in cells:
        measurement = partial.find(cell.key)
        saved = len(measurement.repeats) if measurement is not None else len(partial.pending_repeats(cell.key))
        lost = in_flight is not None and in_flight[0] == cell.key
        if measurement is not None:
            state = "finished" if measurement.status == Status.OK else f"finished: {measurement.status}"
            counts["finished"] += 1
        elif saved:
            state = "partly saved" + (f"; repeat {in_flight[1] + 1} was in flight: lost" if lost else "")
            counts["partly saved"] += 1
        else:
            state = "in flight: lost" if lost else "not started"
            counts["lost" if lost else "not started"] += 1
        total = saved if measurement is not None else repeats
        rows.append((cell.label(), f"{saved}/{total}", state))
    report = ["what the interrupted run holds:",
              *("  " + line for line in text_table(("measurement", "repeats saved", "state"), rows, right={1}))]
    text = f"interrupted: {counts['finished']} measurement(s) saved"
    if partial.pending:
        text += f", and {sum(len(p.repeats) for p in partial.pending)} repeat(s) of {len(partial.pending)} more"
    text += "; the repeat in flight was lost" if in_flight is not None else ""
    text += f"; {counts['not started']} not started" if counts["not started"] else ""
    if output is None:
        return RunInterrupted(f"{text}; nothing was written (no output file)", None, partial, report)
    if counts["partly saved"] + counts["lost"] + counts["not started"]:
        return RunInterrupted(f"{text}; finish it with: clsbench run --resume {shlex.quote(str(output))}", None,
                              partial, report)
    return RunInterrupted(f"{text}; every measurement is in {output}", None, partial, report)


def new_result(plan: RunPlan, environment: dict[str, Any]) -> BenchmarkResult:
    from clsbench.version import __version__

    return BenchmarkResult(
        environment=environment,
        settings=plan.to_dict(),
        created_utc=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        tool={"name": "clsbench", "version": __version__},
        run_id=secrets.token_hex(RUN_ID_BYTES),
    )


def run(plan: RunPlan, output: str | Path | None = None, *, execution: Execution = Execution()) -> BenchmarkResult:
    """Measure ``plan``, saving to ``output`` after every measurement; refuse to overwrite an existing file.

    On a GPU, ``execution.probe`` first measures the matmul and copy ceilings (:mod:`clsbench.system.probe`) in a
    separate process and stores them in the environment, so MFU can be stated against measured as well as
    datasheet peaks.
    """
    path = Path(output) if output is not None else None
    if path is not None:
        result_io.check_writable(path)
    device = plan.cells[0].device if plan.cells else "cpu"
    result = new_result(plan, run_facts(device, execution.env, probe=execution.probe))
    if path is not None:
        result_io.save(result, path)  # an empty run file now: the path is claimed, and writable
    return run_plan(plan, result, path, execution=execution)


def resume(output: str | Path, *, execution: Execution = Execution(), force: bool = False,
           retry_failed: bool = False) -> BenchmarkResult:
    """Finish an interrupted run: measure only the cells ``output`` lacks, with the settings stored in it.

    Args:
        retry_failed: measure the cells that failed again too (their failed measurements are replaced).
    """
    from clsbench.system.machine import environment

    path = Path(output)
    result = result_io.load(path)
    if "scale" in result.settings:
        raise ResultFileError(f"{path} is a `clsbench scale` result, which cannot be resumed",
                              "run `clsbench scale` again with another --output for what it lacks")
    tune = result.settings.get("tune")
    if isinstance(tune, dict) and (tune.get("format") or 1) >= 2:
        # Its rungs measure with other stop rules and repeats than the stored plan's: only tune can continue it.
        raise ResultFileError(f"{path} is a `clsbench tune` search, which `run --resume` cannot continue",
                              f"continue it with: clsbench tune --resume {path}")
    try:
        plan = RunPlan.from_dict(result.settings)
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultFileError(f"{path} has no usable run settings to resume ({exc})") from None
    device = plan.cells[0].device if plan.cells else "cpu"
    current = execution.env if execution.env is not None else environment(device)
    if not force:
        check_resume_compatible(result, current, str(path))
        from clsbench.data.plan import check_data_unchanged

        check_data_unchanged((cell.data for cell in plan.cells), str(path))
    if retry_failed:
        result = dataclasses.replace(result, measurements=tuple(m for m in result.measurements
                                                                 if m.status != Status.FAILED))
    return run_plan(plan, result, path, execution=execution)


def run_plan(plan: RunPlan, result: BenchmarkResult, output: Path | None, *,
             execution: Execution = Execution()) -> BenchmarkResult:
    """Measure every cell of ``plan`` that ``result`` lacks, saving ``result`` to ``output`` after each one.

    Args:
        plan: what to measure.
        result: the result so far (new, or loaded for a resume); its measurements are not measured again.
        output: where to save after each measurement (None: keep in memory only).
        execution: isolation ("process", a fresh worker per repeat, or "inline"), the clock the workloads read
            (a FakeClock in tests) and the progress callback.

    Raises:
        RunInterrupted: on Ctrl-C, after saving everything finished.
    """
    plan.validate()
    execution.validate()
    clock = execution.clock or WallClock()
    todo = [cell for cell in plan.cells if result.find(cell.key) is None]
    on_gpu = any(cell.device.startswith("cuda") for cell in todo)
    executor: ProcessExecutor | InlineExecutor
    on_window = window_reporter(execution.progress)
    if execution.isolation == "inline":
        executor = InlineExecutor(on_window)
    else:
        # Overlap only on a GPU: on a CPU, building the next model would steal cores from the measurement.
        executor = ProcessExecutor(plan.timeout_s, overlap=on_gpu and plan.overlap_prepare, on_window=on_window)

    skips = {cell.key: static_skip(cell, result.environment, plan.compile_mode) for cell in todo}
    compile_caches = compile_cache_dirs(result, todo)
    # The jobs in the order they will run, so that overlap prepares the one that really comes next.
    done = {cell.key: len(result.pending_repeats(cell.key)) for cell in todo}
    order = schedule([cell for cell in todo if not skips[cell.key]], plan.repeats, order=plan.order, seed=plan.seed,
                     done=done)
    jobs = [
        Job(cell=cell, repeat=r, stop=plan.stop_rule(cell.workload), seed=plan.seed, data_seed=plan.data_seed,
            compile_mode=plan.compile_mode, cudnn_benchmark=plan.cudnn_benchmark, train=plan.train, clock=clock,
            telemetry=plan.telemetry, timeout_s=plan.timeout_s if execution.isolation != "inline" else None,
            no_cache=plan.no_cache, cache_dir=plan.cache_dir, profile=plan.profile if r == 0 else None,
            window_s=plan.window_s, compile_cache_dir=compile_caches.get(cell.key),
            **({"telemetry_interval_s": plan.telemetry_interval_s} if plan.telemetry_interval_s else {}))
        for cell, r in order
    ]
    position = {(job.cell.key, job.repeat): index for index, job in enumerate(jobs)}

    in_flight: list[tuple[Any, int] | None] = [None]  # the repeat running now: Ctrl-C loses it

    def run_repeat(cell: Cell, repeat: int) -> dict[str, Any]:
        index = position[(cell.key, repeat)]
        in_flight[0] = (cell.key, repeat)
        record = executor.run(jobs[index], jobs[index + 1] if index + 1 < len(jobs) else None)
        in_flight[0] = None
        return record

    def skip(cell: Cell) -> dict[str, Any] | None:
        return skips[cell.key]

    def interrupted(partial: BenchmarkResult) -> RunInterrupted:
        return interruption(plan.cells, plan.repeats, partial, in_flight[0], output)

    procedure = Procedure(
        run_repeat=run_repeat, skip=skip, interrupted=interrupted, close=executor.close,
        build=lambda cell, records: build_measurement(cell, records, plan.stop_rule(cell.workload),
                                                      environment=result.environment))
    options = {"progress": execution.progress, "order": plan.order, "seed": plan.seed,
               "placement": [cell.key for cell in plan.cells]}
    if output is None:
        return measure_all(todo, plan.repeats, result, procedure, save=lambda r: None, **options)
    with result_io.writer_lock(output):
        return measure_all(todo, plan.repeats, result, procedure, save=lambda r: result_io.save(r, output), **options)


def compile_cache_dirs(result: BenchmarkResult, cells: list[Cell]) -> dict[tuple[Any, ...], str]:
    """The Inductor cache directory of each compiled cell (:mod:`clsbench.engine.compile_cache`), by cell key: one
    per cell, under one directory per run (named by the result's run id), so that a cell's later repeats (in this
    call, a later one, or a resume) reuse what its first repeat compiled."""
    from clsbench.engine.compile_cache import cell_cache_dir, compiles, run_cache_root

    root = run_cache_root(result.run_id, result.created_utc)
    return {cell.key: cell_cache_dir(root, cell.label(), cell.key) for cell in cells if compiles(cell.mode)}


def window_reporter(progress: Any) -> Any:
    """The executors' ``on_window`` for a progress callback: each finished window of a soak becomes a ``window``
    :class:`~clsbench.engine.events.ProgressEvent` (None without a callback)."""
    if progress is None:
        return None
    from clsbench.engine.events import ProgressEvent

    def report(job: Job, figures: dict[str, Any]) -> None:
        progress(ProgressEvent("window", 0, 1, job.cell, job.repeat + 1, 1, window=figures))

    return report


def static_skip(cell: Cell, environment: dict[str, Any], compile_mode: str) -> dict[str, Any] | None:
    """The skipped record of a cell that cannot run here, known without starting a worker, or None.

    The mode first (``unsupported_mode``, :func:`static_skip_reason`), then the cell's inference backend
    (``unsupported_backend``, :func:`static_backend_skip_reason`): a backend whose library is missing starts no
    worker, and the record says how to install it.
    """
    reason = static_skip_reason(cell, environment, compile_mode)
    if reason:
        return {"status": Status.SKIPPED, "reason": Reason.UNSUPPORTED_MODE, "detail": reason}
    reason = static_backend_skip_reason(cell, environment)
    if reason:
        return {"status": Status.SKIPPED, "reason": Reason.UNSUPPORTED_BACKEND, "detail": reason,
                "backend": {"name": cell.backend}}
    return None


def static_backend_skip_reason(cell: Cell, environment: dict[str, Any]) -> str | None:
    """Why ``cell``'s inference backend cannot run its request here (a missing library, a mode or device it cannot
    express), or None; None for ``eager``. The worker asks again with the model's real input size."""
    if cell.backend == DEFAULT_BACKEND:
        return None
    from clsbench.backends import BackendRequest, backend_unsupported_reason
    from clsbench.models import get_model_spec
    from clsbench.modes import parse_mode
    from clsbench.workloads import get_workload

    try:
        input_size = cell.input_size or get_model_spec(cell.model).input_size
    except ClsbenchError:
        return None  # the worker records the model error
    request = BackendRequest(model=cell.model, mode=parse_mode(cell.mode).name, batch_size=cell.batch_size,
                             input_size=input_size, device=cell.device,
                             workload_kind=get_workload(cell.workload).kind)
    return backend_unsupported_reason(cell.backend, request)


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
    from clsbench.results.facts import KEY_FIELDS, get_field

    differences = []
    for path in KEY_FIELDS:
        if path.split(".")[0] not in result.environment:
            continue  # a section the run's clsbench did not record yet (e.g. container): nothing to compare
        old, new = get_field(result.environment, path), get_field(environment, path)
        if old != new:
            differences.append(f"{path}: {old} -> {new}")
    if differences:
        raise ResultFileError(
            f"{source} was started in another environment ({'; '.join(differences[:3])})",
            "resume it where it started, or begin a new run",
        )
