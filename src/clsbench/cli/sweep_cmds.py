"""``clsbench sweep`` and ``clsbench tune``: parse, call :mod:`clsbench.procedures.sweep` / :mod:`clsbench.procedures.tune`, print.

Wire them in with ``register(main)`` in cli.py. Exit codes as for ``run``, except that an out-of-memory point of a
sweep is the sweep's answer ("this batch does not fit"), not a failure: ``sweep`` exits 4 only when a point failed
for another reason. ``tune`` exits 2 when nothing satisfies the limits, after printing what it measured.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from clsbench.cli.app import handle_errors
from clsbench.errors import EXIT_MEASUREMENT_FAILED, InvalidInputError


def _measurement_options(default_repeats: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options ``sweep`` and ``tune`` share with ``run``."""
    options = [
        click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N."),
        click.option("--repeats", type=int, default=default_repeats, show_default=True,
                     help="Fresh worker processes per measurement."),
        click.option("--warmup", type=int, help="Warm-up iterations (requests) before timing."),
        click.option("--iterations", type=int, help="Minimum timed iterations (requests) per repeat."),
        click.option("--min-time", type=float, help="Minimum timed seconds per repeat."),
        click.option("--max-time", type=float, help="Stop a repeat after this many timed seconds."),
        click.option("--input-size", type=int, help="Square input side; default: the model's own."),
        click.option("--timeout", "timeout_s", type=float, default=900.0, show_default=True,
                     help="Seconds before a worker is killed and the repeat recorded as failed (timeout)."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed for weights and synthetic data."),
        click.option("--cudnn-benchmark/--no-cudnn-benchmark", default=True, show_default=True,
                     help="Let cuDNN autotune convolution algorithms (in the untimed first iteration)."),
        click.option("--telemetry/--no-telemetry", default=True, show_default=True,
                     help="On a GPU, sample power, clocks and throttling over each timed region (NVML)."),
        click.option("--probe/--no-probe", "probe_first", default=True, show_default=True,
                     help="On a GPU, first measure the matmul and copy ceilings (about 10 s)."),
        click.option("--overlap/--no-overlap", default=True, show_default=True,
                     help="On a GPU, prepare the next worker while the current one is not timed."),
        click.option("--output", "-o", help="Result file (never overwritten); default under clsbench-results/."),
        click.option("--isolation", type=click.Choice(["process", "inline"]), default="process", show_default=True,
                     help="process: a fresh worker per repeat; inline: this process (debugging only)."),
        click.option("--quiet", "-q", is_flag=True, help="No progress output."),
        click.option("--clock", hidden=True, help="Testing hook: fake:1ms[,2ms...] replaces the wall clock."),
    ]

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def _clock(spec: str | None) -> Any:
    from clsbench.measure.clock import make_clock

    try:
        return make_clock(spec) if spec else None
    except ValueError as exc:
        raise InvalidInputError(str(exc), "e.g. --clock fake:1ms") from None


def _start(device: str, output: str | None) -> tuple[str, dict[str, Any], str]:
    """Resolve the device, read the environment, choose the output path and print the pre-flight warnings."""
    from clsbench import api

    resolved = api.resolve_device(device)
    env = api.environment(resolved)
    path = output or str(api.default_output_path(resolved))
    for line in api.preflight_warnings(env):
        click.echo(f"warning: {line}", err=True)
    return resolved, env, path


def _progress(quiet: bool) -> Any:
    from clsbench.cli.app import _Progress

    return _Progress(quiet)


def _saved(path: str, result: Any) -> None:
    """Say where the file is and add it to the history index, as `run` does (a problem there is a warning)."""
    from clsbench.cli.app import _index

    click.echo(f"\nsaved: {path}", err=True)
    _index(path, result)


@click.command("sweep")
@click.option("--model", required=True, help="Model name (see `clsbench models`).")
@click.option("--workload", default="infer-throughput", show_default=True,
              help="infer-throughput, train or infer-latency.")
@click.option("--mode", default="fp32", show_default=True, help="Execution mode, e.g. amp-bf16+cl.")
@click.option("--batch-sizes", "batch_sizes", default="auto", show_default=True,
              help="Comma list (1,2,4,8) or auto: double from 1 until out of memory or throughput stops rising.")
@click.option("--knee", "knee_fraction", type=float, default=0.9, show_default=True,
              help="The knee is the smallest batch reaching this fraction of the best throughput.")
@click.option("--max-batch", type=int, default=4096, show_default=True, help="Largest batch auto may try.")
@click.option("--compile-mode", default="default", show_default=True, help="torch.compile mode for +compile.")
@_measurement_options(default_repeats=3)
@handle_errors
def sweep_command(model: str, workload: str, mode: str, batch_sizes: str, knee_fraction: float, max_batch: int,
                  compile_mode: str, device: str, repeats: int, warmup: int | None, iterations: int | None,
                  min_time: float | None, max_time: float | None, input_size: int | None, timeout_s: float,
                  seed: int, cudnn_benchmark: bool, telemetry: bool, probe_first: bool, overlap: bool,
                  output: str | None, isolation: str, quiet: bool, clock: str | None) -> None:
    """Measure one model/workload/mode at several batch sizes: the knee, the largest fit, the latency curve."""
    from clsbench import __version__
    from clsbench.procedures.sweep import parse_batch_sizes, render_sweep, sweep, validate_knee_fraction
    from clsbench.report import table

    sizes = parse_batch_sizes(batch_sizes)  # bad input fails here, before anything is read or started
    validate_knee_fraction(knee_fraction)
    fake = _clock(clock)
    resolved, env, path = _start(device, output)
    if not quiet:
        what = "auto" if sizes == "auto" else ",".join(map(str, sizes))
        click.echo(f"clsbench {__version__}: sweep {model} {workload} {mode} over batch sizes {what} x {repeats} "
                   f"repeat(s) on {resolved}; results -> {path}", err=True)
    progress = _progress(quiet)
    try:
        outcome = sweep(model, workload, mode, resolved, sizes, path, repeats=repeats, warmup=warmup,
                        iterations=iterations, min_time=min_time, max_time=max_time, input_size=input_size,
                        timeout_s=timeout_s, compile_mode=compile_mode, seed=seed, cudnn_benchmark=cudnn_benchmark,
                        overlap_prepare=overlap, telemetry=telemetry, isolation=isolation, clock=fake,
                        progress=progress, knee_fraction=knee_fraction, max_batch=max_batch, env=env,
                        probe=probe_first)
    finally:
        progress.close()
    click.echo(table.render(outcome.result), nl=False)
    click.echo("")
    click.echo(render_sweep(outcome.analysis), nl=False)
    _saved(path, outcome.result)
    if any(m.status == "failed" and m.reason != "oom" for m in outcome.result.measurements):
        sys.exit(EXIT_MEASUREMENT_FAILED)


@click.command("tune")
@click.option("--model", required=True, help="Model name (see `clsbench models`).")
@click.option("--workload", default="infer-throughput", show_default=True,
              help="infer-throughput, infer-latency or train.")
@click.option("--max-latency-ms", type=float,
              help="Limit: p50 request latency (infer-latency) or p99 latency per batch (otherwise), in ms.")
@click.option("--max-memory-gb", type=float,
              help="Limit: peak reserved GPU memory (worker peak RSS on a CPU), in GB (10^9 bytes).")
@click.option("--modes", "modes", multiple=True,
              help="Eager modes to explore first (repeat or comma-separate); default: every precision +/- cl.")
@click.option("--batch-sizes", "batch_sizes",
              help="Batch sizes to try (comma list); default: 1 for infer-latency, a short doubling otherwise.")
@click.option("--compile/--no-compile", "compile_variants", default=True, show_default=True,
              help="Also try torch.compile and CUDA graphs for the best eager modes.")
@click.option("--variants", "variants", multiple=True,
              help="Which compile-phase variants to try (repeat or comma-separate): compile, cudagraph, "
                   "compile+cudagraph (train: compile); default: all.")
@click.option("--max-autotune/--no-max-autotune", default=True, show_default=True,
              help="Also try +compile:max-autotune for the best mode (the slowest compilation).")
@click.option("--check/--no-check", "check_outputs", default=True, show_default=True,
              help="Reject candidates whose outputs differ from fp32 eager beyond the documented tolerance.")
@_measurement_options(default_repeats=1)
@handle_errors
def tune_command(model: str, workload: str, max_latency_ms: float | None, max_memory_gb: float | None,
                 modes: tuple[str, ...], batch_sizes: str | None, compile_variants: bool,
                 variants: tuple[str, ...], max_autotune: bool,
                 check_outputs: bool, device: str, repeats: int, warmup: int | None, iterations: int | None,
                 min_time: float | None, max_time: float | None, input_size: int | None, timeout_s: float,
                 seed: int, cudnn_benchmark: bool, telemetry: bool, probe_first: bool, overlap: bool,
                 output: str | None, isolation: str, quiet: bool, clock: str | None) -> None:
    """Find the fastest configuration (mode x batch size) of a model here, within latency and memory limits."""
    from clsbench import __version__, api
    from clsbench.procedures.sweep import parse_batch_sizes
    from clsbench.procedures.tune import NoConfigurationError, render_tune, tune, validate_limit

    validate_limit("max_latency_ms", max_latency_ms)
    validate_limit("max_memory_gb", max_memory_gb)
    sizes = parse_batch_sizes(batch_sizes) if batch_sizes is not None else None
    chosen_modes = api.split_list(modes) or None
    if modes and not chosen_modes:
        raise InvalidInputError("--modes names no mode", "e.g. --modes fp32,amp-bf16+cl")
    chosen_variants = api.split_list(variants) or None
    if variants and not chosen_variants:
        raise InvalidInputError("--variants names no variant", "e.g. --variants compile+cudagraph")
    if chosen_variants:
        from clsbench.procedures.tune import parse_variants

        parse_variants(workload, chosen_variants)
    fake = _clock(clock)
    resolved, env, path = _start(device, output)
    if not quiet:
        click.echo(f"clsbench {__version__}: tune {model} {workload} on {resolved}; results -> {path}", err=True)
    progress = _progress(quiet)
    try:
        outcome = tune(model, workload, resolved, max_latency_ms=max_latency_ms, max_memory_gb=max_memory_gb,
                       modes=chosen_modes, batch_sizes=sizes, output=path, repeats=repeats, warmup=warmup,
                       iterations=iterations, min_time=min_time, max_time=max_time, input_size=input_size,
                       timeout_s=timeout_s, seed=seed, cudnn_benchmark=cudnn_benchmark, overlap_prepare=overlap,
                       telemetry=telemetry, compile_variants=compile_variants, variants=chosen_variants,
                       max_autotune=max_autotune, check_outputs=check_outputs, isolation=isolation, clock=fake,
                       progress=progress, env=env, probe=probe_first)
    except NoConfigurationError as exc:
        progress.close()
        click.echo(render_tune(exc.tune_result.analysis), nl=False)
        _saved(path, exc.tune_result.result)
        raise
    finally:
        progress.close()
    click.echo(render_tune(outcome.analysis), nl=False)
    _saved(path, outcome.result)


def register(group: click.Group) -> None:
    """Add ``sweep`` and ``tune`` to the CLI group (cli.py: ``sweep_cmds.register(main)``)."""
    group.add_command(sweep_command)
    group.add_command(tune_command)
