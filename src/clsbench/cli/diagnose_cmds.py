"""``clsbench diagnose MODEL --data DIR``: parse, call :func:`clsbench.procedures.diagnose.diagnose`, print.

Exit codes as for ``run``: 2 on bad input (unknown model, unusable dataset...), 3 for the output file, 4 when a
setting failed (a hung or crashed DataLoader worker, say; the rest is still measured and printed). Skipped settings
(the gpu pipeline without CUDA, DALI not installed) are not failures.
"""

from __future__ import annotations

import sys

import click

from clsbench.cli.app import handle_errors
from clsbench.core.data_settings import PIPELINES, SOURCES
from clsbench.errors import EXIT_MEASUREMENT_FAILED


@click.command("diagnose")
@click.argument("model")
@click.option("--data", "data_dir", required=True, metavar="DIR", help="The dataset (ImageFolder layout).")
@click.option("--mode", default="fp32", show_default=True, help="Execution mode, e.g. amp-bf16+cl.")
@click.option("--batch-size", type=int, help="Training batch size (default: run's train default, 32).")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--data-source", type=click.Choice([s for s in SOURCES if s != "synthetic"]), default="folder",
              show_default=True, help="folder: read files while training; memory: read them into RAM first.")
@click.option("--workers", help="num_workers values to sweep, e.g. 0,4,8,16 (default: 0, 2, 4, 8, ... up to the "
                                "CPU count; with --quick: 0 and the CPU count).")
@click.option("--pipelines", default=",".join(PIPELINES), show_default=True,
              help="Pipelines to try besides PyTorch's default (cpu, gpu, dali).")
@click.option("--quick", is_flag=True, help="Short measurement windows (smoke tests, CI).")
@click.option("--repeats", type=int, default=1, show_default=True, help="Fresh worker processes per setting.")
@click.option("--warmup", type=int, help="Warm-up iterations before timing (default: 3 on a GPU, 2 on a CPU).")
@click.option("--iterations", type=int, help="Minimum timed iterations per setting (default 5).")
@click.option("--min-time", type=float, help="Minimum timed seconds per setting (default: 3 on a GPU, 1 on a CPU).")
@click.option("--max-time", type=float, help="Stop a setting after this many timed seconds.")
@click.option("--input-size", type=int, help="Square input side; default: the model's own.")
@click.option("--timeout", "timeout_s", type=float, default=900.0, show_default=True,
              help="Seconds before a worker is killed and the setting recorded as failed (timeout).")
@click.option("--data-timeout", type=float, help="Seconds one batch may take (default 120).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for weights, data order and crops.")
@click.option("--telemetry/--no-telemetry", default=True, show_default=True,
              help="On a GPU, sample power, clocks and throttling over each timed region (NVML).")
@click.option("--output", "-o", help="Result file (never overwritten); default under clsbench-results/.")
@click.option("--isolation", type=click.Choice(["process", "inline"]), default="process", show_default=True,
              help="process: a fresh worker per repeat; inline: this process (debugging only).")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--clock", hidden=True, help="Testing hook: fake:1ms[,2ms...] replaces the wall clock.")
@handle_errors
def diagnose_command(model: str, data_dir: str, mode: str, batch_size: int | None, device: str, data_source: str,
                     workers: str | None, pipelines: str, quick: bool, repeats: int, warmup: int | None,
                     iterations: int | None, min_time: float | None, max_time: float | None,
                     input_size: int | None, timeout_s: float, data_timeout: float | None, seed: int,
                     telemetry: bool, output: str | None, isolation: str, quiet: bool, clock: str | None) -> None:
    """Find what limits training MODEL on the images in DIR: synthetic ceiling vs real pipelines, best setting."""
    from clsbench import __version__
    from clsbench.cli.sweep_cmds import _clock, _progress, _saved, _start
    from clsbench.procedures.diagnose import diagnose, parse_pipelines, parse_workers, render_diagnose
    from clsbench.report import table

    sizes = parse_workers(workers) if workers is not None else None
    chosen = parse_pipelines(pipelines)
    fake = _clock(clock)
    resolved, env, path = _start(device, output)
    if not quiet:
        click.echo(f"clsbench {__version__}: diagnose {model} {mode} on {resolved} with the images in {data_dir}; "
                   f"results -> {path}", err=True)
    progress = _progress(quiet)
    try:
        outcome = diagnose(model, data_dir, mode=mode, batch_size=batch_size, device=resolved, source=data_source,
                           workers=sizes, pipelines=chosen, quick=quick, repeats=repeats, warmup=warmup,
                           iterations=iterations, min_time=min_time, max_time=max_time, input_size=input_size,
                           timeout_s=timeout_s, data_timeout_s=data_timeout, seed=seed, telemetry=telemetry,
                           output=path, isolation=isolation, clock=fake, progress=progress, env=env,
                           warn=lambda line: click.echo(f"warning: {line}", err=True))
    finally:
        progress.close()
    click.echo(render_diagnose(outcome.analysis), nl=False)
    notes = table.warnings(outcome.result.measurements)
    if notes:
        click.echo("")
        for line in notes:
            click.echo(line)
    click.echo(f"(every figure: clsbench show {path})")
    _saved(path, outcome.result)
    if any(m.status == "failed" for m in outcome.result.measurements):
        sys.exit(EXIT_MEASUREMENT_FAILED)


def register(group: click.Group) -> None:
    """Add ``diagnose`` to the CLI group (cli.py: ``diagnose_cmds.register(main)``)."""
    group.add_command(diagnose_command)
