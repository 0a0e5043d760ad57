"""Run a scale plan: one fresh launch per repeat of every (strategy, GPU count), saved after each measurement.

For each launch the parent writes a job file into a fresh temporary folder, starts the strategy's command
(:mod:`clsbench.procedures.scale.launch`), merges what the processes wrote (:mod:`clsbench.procedures.scale.merge`) and
deletes the folder. A measurement whose repeat fails stops there, with that repeat's reason (a rank that fails once will
fail again), and the run goes on with the next measurement. Results are saved atomically after every measurement into an
ordinary result file that never existed before.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clsbench.analysis.summary import build_measurement
from clsbench.core.options import Execution
from clsbench.core.plan import Cell, RunPlan
from clsbench.core.vocab import Reason, Status
from clsbench.engine.loop import Procedure, measure_all
from clsbench.engine.runner import new_result
from clsbench.errors import EXIT_INTERRUPTED, ClsbenchError
from clsbench.procedures.scale.figures import finalize, scale_figures
from clsbench.procedures.scale.files import JOB_FILE
from clsbench.procedures.scale.launch import child_env, launch
from clsbench.procedures.scale.merge import merge_launch
from clsbench.procedures.scale.plan import ScalePlan, workload_name
from clsbench.procedures.scale.strategies import get_strategy
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult, Measurement


class ScaleInterrupted(ClsbenchError):
    """Ctrl-C during a scale run; the launch in flight was ended, and what finished is in the file."""

    exit_code = EXIT_INTERRUPTED


def make_job(plan: ScalePlan, strategy: str, gpus: int, folder: Path, repeat: int) -> dict[str, Any]:
    """What every process of one launch needs (JSON): the plan's settings for this strategy and GPU count."""
    return {
        "strategy": strategy,
        "gpus": gpus,
        "nnodes": plan.nnodes,
        "repeat": repeat,
        "model": plan.model,
        "mode": plan.mode,
        "batch_size_per_gpu": plan.batch_size_per_gpu,
        "input_size": plan.input_size,
        "device": plan.device,
        "stop": plan.stop.to_dict(),
        "seed": plan.seed,
        "data_seed": plan.data_seed,
        "compile_mode": plan.compile_mode,
        "cudnn_benchmark": get_strategy(strategy).cudnn_benchmark(plan.cudnn_benchmark, gpus)[0],
        "comm_share": plan.comm_share,
        "num_classes": plan.num_classes,
        "train": dataclasses.asdict(plan.train),
        "timeout_s": plan.timeout_s,
        "folder": str(folder),
    }


def launch_commands(plan: ScalePlan, folder: str | Path = "JOBDIR") -> list[dict[str, Any]]:
    """Every planned launch with the command this node would run (nothing is started): for ``--dry-run``."""
    out = []
    for strategy, gpus in plan.measurements():
        impl = get_strategy(strategy)
        reason = impl.unsupported_reason(plan, gpus)
        for repeat in range(plan.repeats):
            index = plan.launch_index(strategy, gpus, repeat)
            job = Path(folder) / f"launch-{index}" / JOB_FILE
            out.append({"strategy": strategy, "gpus": gpus, "repeat": repeat, "index": index, "skipped": reason,
                        "command": None if reason else impl.command(plan, gpus, job, index)})
    return out


#: CPU threads per launched process when the user has not chosen (``OMP_NUM_THREADS`` unset). torchrun sets 1
#: itself when it starts several ranks per node, but not for one; without the same value everywhere, the 1-GPU
#: baseline would run with every core and the others with one (on a CPU that alone changed gloo's 1-process
#: figure fifteenfold). A GPU-resident training step does no CPU arithmetic, so 1 costs it nothing.
DEFAULT_OMP_NUM_THREADS = "1"


def launch_variables() -> dict[str, str]:
    """Variables added to every launch's environment (only where the user set none)."""
    return {} if "OMP_NUM_THREADS" in os.environ else {"OMP_NUM_THREADS": DEFAULT_OMP_NUM_THREADS}


def expected_ranks(plan: ScalePlan, strategy: str, gpus: int, source: str) -> list[int]:
    """The ranks whose records complete a launch as this node sees it."""
    if strategy != "ddp":
        return [0]
    if plan.node_rank == 0 or source == "gathered":
        return list(range(plan.world_size(gpus)))
    return list(range(plan.node_rank * gpus, (plan.node_rank + 1) * gpus))


def run_launch(plan: ScalePlan, strategy: str, gpus: int, repeat: int, *,
               runner: Callable[..., Any] = launch) -> dict[str, Any]:
    """One fresh launch; returns its repeat record (ok, failed or skipped, never raises for a failed rank)."""
    impl = get_strategy(strategy)
    folder = Path(tempfile.mkdtemp(prefix=f"clsbench-scale-{strategy}{gpus}-"))
    try:
        job_path = folder / JOB_FILE
        job_path.write_text(json.dumps(make_job(plan, strategy, gpus, folder, repeat)), encoding="utf-8")
        command = impl.command(plan, gpus, job_path, plan.launch_index(strategy, gpus, repeat))
        outcome = runner(command, folder, timeout_s=plan.timeout_s, env=child_env(launch_variables()))
        facts = {"command": command, "exit_code": outcome.exit_code, "timed_out": outcome.timed_out,
                 "wall_s": outcome.wall_s, "killed_processes": outcome.killed, "records_from": outcome.source,
                 "processes_started": outcome.started,
                 "node_rank": plan.node_rank, "nnodes": plan.nnodes}
        return merge_launch(outcome.records, expected_ranks=expected_ranks(plan, strategy, gpus, outcome.source),
                            launch=facts, log_tail=outcome.log_tail, timeout_s=plan.timeout_s)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def build_scale_measurement(plan: ScalePlan, strategy: str, gpus: int, records: list[dict[str, Any]],
                            environment: dict[str, Any]) -> Measurement:
    """An ordinary measurement (``clsbench.analysis.summary``) with the scale figures added to its summary."""
    cell = plan.cell(strategy, gpus)
    measurement = build_measurement(cell, records, plan.stop, environment=environment)
    if measurement.status != Status.OK:
        return measurement
    summary = dict(measurement.summary)
    summary.update(scale_figures(records, strategy=strategy, gpus=gpus, nnodes=plan.nnodes,
                                 batch_size_per_gpu=plan.batch_size_per_gpu,
                                 throughput=summary.get("throughput_img_s"), comm_share_on=plan.comm_share))
    summary["cudnn_benchmark"], note = get_strategy(strategy).cudnn_benchmark(plan.cudnn_benchmark, gpus)
    if note:
        summary["cudnn_benchmark_note"] = note
    summary["efficiency"] = {"unavailable": "FLOPs are not counted in scale runs"}
    summary["telemetry"] = {}
    return dataclasses.replace(measurement, summary=summary)


def settings_of(plan: ScalePlan) -> dict[str, Any]:
    """The result's ``settings``: the scale plan, with the keys every result carries at the top."""
    return {
        "suite": None,
        "repeats": plan.repeats,
        "seed": plan.seed,
        "data_seed": plan.data_seed,
        "timeout_s": plan.timeout_s,
        "compile_mode": plan.compile_mode,
        "cudnn_benchmark": plan.cudnn_benchmark,
        "train": dataclasses.asdict(plan.train),
        "stop_rules": {workload_name(s): plan.stop.to_dict() for s in plan.strategies},
        "scale": plan.to_dict(),
    }


def run_scale(
    plan: ScalePlan,
    output: str | Path | None = None,
    *,
    execution: Execution = Execution(),
    runner: Callable[..., Any] = launch,
) -> BenchmarkResult:
    """Measure ``plan``; save to ``output`` after every measurement (never over an existing file).

    Args:
        plan: from :func:`clsbench.procedures.scale.plan_scale`.
        output: the result file (None: keep in memory). On a node other than node 0 of a multi-node run nothing
            is written: node 0, which runs global rank 0, gathers every rank's record and writes the result.
        execution: ``env``, the environment to record (default: read now, plus ``distributed``), and
            ``progress``, called with a :class:`~clsbench.engine.events.ProgressEvent` per launch and per
            measurement. Each launch is its own set of processes, so isolation and overlap do not apply.
        runner: what runs one launch (tests replace it).

    Raises:
        ResultFileError: ``output`` exists or cannot be written.
        ScaleInterrupted: Ctrl-C; the launch in flight was ended, and the finished measurements are saved.
    """
    from clsbench.procedures.scale.nccl import distributed_facts
    from clsbench.system.machine import environment

    path = Path(output) if output is not None and plan.node_rank == 0 else None
    if path is not None:
        result_io.check_writable(path, exists_hint="choose another --output")
    facts = execution.env if execution.env is not None else environment(plan.device)
    if "distributed" not in facts:
        facts = {**facts, "distributed": distributed_facts(plan.device)}
    result = new_result(RunPlan(cells=()), facts)
    result = dataclasses.replace(result, settings=settings_of(plan))
    if path is not None:
        result_io.save(result, path)
    mode_reason = _mode_skip(plan, facts)
    cells = {plan.cell(strategy, gpus): (strategy, gpus) for strategy, gpus in plan.measurements()}

    def skip(cell: Cell) -> dict[str, Any] | None:
        reason = mode_reason or get_strategy(cells[cell][0]).unsupported_reason(plan, cells[cell][1])
        if not reason:
            return None
        code = Reason.UNSUPPORTED_MODE if mode_reason else Reason.UNSUPPORTED_STRATEGY
        return {"status": Status.SKIPPED, "reason": code, "detail": reason}

    def interrupted(partial: BenchmarkResult) -> ScaleInterrupted:
        where = f" in {path}" if path is not None else ""
        return ScaleInterrupted(f"interrupted: {len(partial.measurements)} measurement(s) saved{where}",
                                "run `clsbench scale` again with another --output for the rest")

    procedure = Procedure(
        run_repeat=lambda cell, repeat: run_launch(plan, *cells[cell], repeat, runner=runner),
        build=lambda cell, records: build_scale_measurement(plan, *cells[cell], records, facts),
        skip=skip, finalize=finalize, interrupted=interrupted)
    if path is None:
        return measure_all(list(cells), plan.repeats, result, procedure, save=lambda r: None,
                           progress=execution.progress)
    with result_io.writer_lock(path):
        return measure_all(list(cells), plan.repeats, result, procedure, save=lambda r: result_io.save(r, path),
                           progress=execution.progress)


def _mode_skip(plan: ScalePlan, environment: dict[str, Any]) -> str | None:
    """Why the mode cannot train on this device (judged from the recorded GPU, as ``run`` does), or None."""
    from clsbench.core.plan import Cell
    from clsbench.engine.runner import static_skip_reason

    return static_skip_reason(Cell(plan.model, "train", plan.mode, plan.batch_size_per_gpu, plan.device),
                              environment, plan.compile_mode)
