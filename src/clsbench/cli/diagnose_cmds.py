"""``clsbench diagnose MODEL --data DIR``: parse, call :func:`clsbench.api.diagnose` (one
:class:`~clsbench.procedures.diagnose.DiagnoseSettings`), print.

Exit codes as for ``run``: 2 on bad input (unknown model, unusable dataset...), 3 for the output file, 4 when a
setting failed (a hung or crashed DataLoader worker, say; the rest is still measured and printed). Skipped settings
(the gpu pipeline without CUDA, DALI not installed) are not failures.
"""

from __future__ import annotations

import dataclasses
import sys

import click

from clsbench import api
from clsbench.cli.common import Progress, exit_if_nothing_measured, saved, start
from clsbench.cli.options import db_option, list_option, measure_options
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.vocab import Status
from clsbench.errors import EXIT_MEASUREMENT_FAILED
from clsbench.version import __version__


@click.command("diagnose")
@click.argument("model")
@click.option("--data", "data_dir", required=True, metavar="DIR", help="The dataset (ImageFolder layout).")
@click.option("--mode", default="fp32", show_default=True, help="Execution mode, e.g. amp-bf16+cl.")
@click.option("--batch-size", type=int, help="Training batch size (default: run's train default, 32).")
@click.option("--data-source", default="folder", show_default=True,
              help="folder: read files while training; memory: read them into RAM first.")
@list_option("--num-workers", "workers",
             help="DataLoader num_workers values to sweep (repeat or comma-separate), e.g. 0,4,8,16 (default: 0, 2, "
                  "4, 8, ... up to the CPU count; with --quick: 0 and the CPU count).")
@list_option("--pipeline", "pipelines",
             help="Pipelines to try besides PyTorch's default (repeat or comma-separate; default: every pipeline: "
                  "cpu, gpu and dali where they can run).")
@list_option("--gpu-decode", "gpu_decoders",
             help="The gpu pipeline's decoders to compare (repeat or comma-separate: nvjpeg, cpu, split; default: "
                  "nvjpeg).")
@click.option("--quick", is_flag=True, help="Short measurement windows (smoke tests, CI).")
@click.option("--data-timeout", type=float, help="Seconds one batch may take (default 120).")
@db_option
@measure_options(api.DIAGNOSE_OPTIONS, execution=("isolation",), helps={
    "repeats": "Fresh worker processes per setting.",
    "warmup": "Warm-up iterations before timing (default: 3 on a GPU, 2 on a CPU).",
    "iterations": "Minimum timed iterations per setting (default 5).",
    "min_time": "Minimum timed seconds per setting (default: 3 on a GPU, 1 on a CPU).",
    "seed": "Seed for weights, data order and crops."})
def diagnose_command(model: str, data_dir: str, mode: str, batch_size: int | None, data_source: str,
                     workers: tuple[str, ...], pipelines: tuple[str, ...], gpu_decoders: tuple[str, ...], quick: bool,
                     data_timeout: float | None, db: str | None,
                     measure: MeasureOptions, execution: Execution, device: str, output: str | None,
                     quiet: bool) -> None:
    """Find what limits training MODEL on the images in DIR: synthetic ceiling vs real pipelines, best setting."""
    sizes = api.parse_workers(",".join(workers)) if workers else None
    chosen = api.parse_pipelines(",".join(pipelines)) if pipelines else None
    resolved, env, path = start(device, output, db)
    settings = api.DiagnoseSettings(
        model=model, data_dir=data_dir, mode=mode, batch_size=batch_size, device=resolved, source=data_source,
        workers=sizes, pipelines=chosen, quick=quick, data_timeout_s=data_timeout,
        gpu_decoders=",".join(gpu_decoders).split(",") if gpu_decoders else None)
    if not quiet:
        click.echo(f"clsbench {__version__}: diagnose {model} {mode} on {resolved} with the images in {data_dir}; "
                   f"results -> {path}", err=True)
    progress = Progress(quiet)
    try:
        outcome = api.diagnose(settings, path, options=measure,
                               execution=dataclasses.replace(execution, progress=progress, env=env),
                               warn=lambda line: click.echo(f"warning: {line}", err=True))
    finally:
        progress.close()
    click.echo(api.diagnose_text(outcome.analysis), nl=False)
    notes = api.result_warnings(outcome.result.measurements)
    if notes:
        click.echo("")
        for line in notes:
            click.echo(line)
    click.echo(f"(every figure: clsbench show {path})")
    saved(path, outcome.result, db)
    if any(m.status == Status.FAILED for m in outcome.result.measurements):
        sys.exit(EXIT_MEASUREMENT_FAILED)
    exit_if_nothing_measured(path, outcome.result.measurements, "setting")


def register(group: click.Group) -> None:
    """Add ``diagnose`` to the CLI group (cli.py: ``diagnose_cmds.register(main)``)."""
    group.add_command(diagnose_command)
