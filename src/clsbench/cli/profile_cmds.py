"""``clsbench profile``: parse, call :func:`clsbench.api.profile` (one
:class:`~clsbench.procedures.profile.CellProfileSettings`), print the profile.

Exit codes as for ``run``: 2 on bad input (unknown name, ``--nsys`` without Nsight Systems), 3 when the directory
exists or cannot be created, 4 when the measurement failed (its reason is printed; nothing was profiled), 130 on
Ctrl-C. A profiler failure is not a failed measurement: the profile reads "unavailable" with the reason, exit 0.
With ``--nsys``, nsys's own exit status when it fails.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import click

from clsbench.cli.common import Progress, saved
from clsbench.cli.data_options import data_options
from clsbench.cli.options import db_option, measure_options
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.plan import PROFILE_STEPS, PROFILE_WARMUP
from clsbench.core.vocab import Status
from clsbench.errors import EXIT_MEASUREMENT_FAILED

#: The measurement options ``profile`` takes: all but ``--repeats`` (a profile is of one repeat).
PROFILE_FIELDS = ("warmup", "iterations", "min_time", "max_time", "input_size", "seed", "compile_mode", "timeout_s",
                  "cudnn_benchmark", "telemetry")


@click.command("profile")
@click.option("--model", required=True, help="Model name (see `clsbench models`).")
@click.option("--workload", default="train", show_default=True, help="infer-latency, infer-throughput or train.")
@click.option("--mode", default="fp32", show_default=True, help="Execution mode, e.g. amp-bf16+cl.")
@click.option("--batch-size", type=int, help="Batch size; default: the workload's default for `run`.")
@click.option("--backend", default="eager", show_default=True, help="Inference backend (inference workloads).")
@click.option("--steps", type=int, default=PROFILE_STEPS, show_default=True,
              help="Steps recorded by the profiler, after the timed region.")
@click.option("--profile-warmup", type=int, default=PROFILE_WARMUP, show_default=True,
              help="Profiler warm-up steps before the recorded ones (not recorded).")
@click.option("--nsys", "with_nsys", is_flag=True,
              help="Also record the cell with Nsight Systems (nsys must be installed; the command is printed "
                   "either way).")
@db_option
@measure_options(MeasureOptions(repeats=1), execution=("isolation",), fields=PROFILE_FIELDS, helps={
    "output": "The directory to create for trace.json, summary.json and result.json (must not exist)."})
@data_options
def profile_command(model: str, workload: str, mode: str, batch_size: int | None, backend: str, steps: int,
                    profile_warmup: int, with_nsys: bool, db: str | None, measure: MeasureOptions,
                    execution: Execution, device: str, output: str | None, quiet: bool, **data_opts: Any) -> None:
    """Where a step's time goes: profile one cell after its timed region (torch.profiler), write a Chrome/Perfetto
    trace and a summary into a new directory -o DIR, and print the split, the top kernels and memory by phase."""
    from clsbench import api
    from clsbench.cli.data_options import data_settings
    from clsbench.errors import InvalidInputError
    from clsbench.version import __version__

    if not output:
        raise click.UsageError("a profile goes into a new directory: give -o DIR")
    api.check_profile_directory(output)
    api.check_store(db)  # a store URL that cannot work is refused before measuring, not after
    resolved = api.resolve_device(device)
    if with_nsys and not resolved.startswith("cuda"):
        raise InvalidInputError(f"--nsys records GPU work; the device is {resolved}", "use --device cuda, or drop "
                                "--nsys")
    if with_nsys and api.nsys_path() is None:
        raise InvalidInputError(api.NSYS_MISSING, api.NSYS_HINT)
    settings = api.CellProfileSettings(model=model, workload=workload, mode=mode, batch_size=batch_size,
                                       device=resolved, backend=backend, data=data_settings(**data_opts),
                                       steps=steps, warmup=profile_warmup)
    env = api.environment(resolved)
    for line in api.preflight_warnings(env):
        click.echo(f"warning: {line}", err=True)
    if not quiet:
        click.echo(f"clsbench {__version__}: profile {model} {workload} {mode} on {resolved}; files -> {output}",
                   err=True)
    progress = Progress(quiet)
    try:
        outcome = api.profile(settings, output, options=measure,
                              execution=dataclasses.replace(execution, progress=progress, env=env))
    finally:
        progress.close()
    m = outcome.measurement
    title = f"profile: {m.model} {m.workload} {m.mode} bs{m.batch_size} on {m.device}"
    click.echo(api.profile_text(outcome.summary, title), nl=False)
    click.echo("")
    if outcome.trace is not None:
        click.echo(f"trace: {outcome.trace} (open it in ui.perfetto.dev or chrome://tracing)")
    click.echo(f"summary: {outcome.directory / api.SUMMARY_FILE}")
    _nsys_lines(outcome, resolved, with_nsys)
    saved(str(outcome.directory / api.RESULT_FILE), outcome.result, db)
    if m.status == Status.FAILED:
        sys.exit(EXIT_MEASUREMENT_FAILED)


def _nsys_lines(outcome: Any, device: str, run_it: bool) -> None:
    """Print the Nsight Systems command for the same cell (or why there is none), and run it with ``--nsys``."""
    from clsbench import api

    if not device.startswith("cuda"):
        click.echo("nsys: Nsight Systems records GPU work; this cell runs on the CPU")
        return
    command = api.nsys_text(outcome.nsys)
    if api.nsys_path() is None:
        click.echo(f"nsys: Nsight Systems is not installed here; where it is, this records the same cell:\n  {command}")
        return
    click.echo(f"nsys: {command}")
    if run_it:
        click.echo("running nsys...", err=True)
        code = api.record_nsys(outcome)
        if code != 0:
            click.echo(f"error: nsys exited with status {code}", err=True)
            sys.exit(code)
        click.echo(f"nsys report: {outcome.directory / api.NSYS_REPORT}.nsys-rep")


def register(group: click.Group) -> None:
    group.add_command(profile_command)
