"""``clsbench sweep`` and ``clsbench tune``: parse, call :func:`clsbench.api.sweep` (one
:class:`~clsbench.procedures.sweep.SweepSettings`) and :func:`clsbench.api.tune` (one
:class:`~clsbench.procedures.tune.settings.TuneSettings`, built here once), print.

Wire them in with ``register(main)`` in cli.py. Exit codes as for ``run``, except that an out-of-memory point of a
sweep is the sweep's answer ("this batch does not fit"), not a failure: ``sweep`` exits 4 only when a point failed
for another reason. ``tune`` exits 2 when nothing satisfies the limits, after printing what it measured.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import click

from clsbench import api
from clsbench.cli.common import Progress, check_cell, exit_if_nothing_measured, saved, start
from clsbench.cli.data_options import data_options
from clsbench.cli.options import artifact_cache_options, db_option, list_option, measure_options
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.vocab import Reason, Status
from clsbench.errors import EXIT_MEASUREMENT_FAILED, InvalidInputError
from clsbench.version import __version__


@click.command("sweep")
@click.option("--model", required=True, help="Model name (see `clsbench models`).")
@click.option("--workload", default="infer-throughput", show_default=True,
              help="infer-throughput, train or infer-latency.")
@click.option("--mode", default="fp32", show_default=True,
              help="Execution mode, e.g. amp-bf16+cl, fp8+compile (fp8: torchao, compute capability 8.9+; fast "
                   "only with +compile).")
@list_option("--batch-size", "batch_sizes", default=("auto",),
             help="Batch sizes (repeat or comma-separate: 1,2,4,8), or auto: double from 1 until out of memory or "
                  "throughput stops rising.")
@click.option("--knee", "knee_fraction", type=float, default=0.9, show_default=True,
              help="The knee is the smallest batch reaching this fraction of the best throughput.")
@click.option("--max-batch", type=int, default=4096, show_default=True, help="Largest batch auto may try.")
@click.option("--backend", default="eager", show_default=True,
              help="Inference backend of every point: eager, torchscript, export, onnxruntime, tensorrt.")
@artifact_cache_options
@db_option
@measure_options(opt_in=("protocol",))
def sweep_command(model: str, workload: str, mode: str, batch_sizes: tuple[str, ...], knee_fraction: float,
                  max_batch: int, backend: str, no_cache: bool, backend_cache: str | None, db: str | None,
                  measure: MeasureOptions, execution: Execution, device: str, output: str | None,
                  quiet: bool) -> None:
    """Measure one model/workload/mode at several batch sizes: the knee, the largest fit, the latency curve."""
    sizes = api.parse_batch_sizes(",".join(batch_sizes))  # bad input fails here, before anything is read or started
    api.validate_knee_fraction(knee_fraction)
    resolved, env, path = start(device, output, db)
    check_cell(model, workload, resolved, mode, backend)
    settings = api.SweepSettings(model=model, workload=workload, mode=mode, device=resolved, batch_sizes=sizes,
                                 knee_fraction=knee_fraction, max_batch=max_batch, backend=backend, no_cache=no_cache,
                                 cache_dir=backend_cache)
    if not quiet:
        what = "auto" if sizes == "auto" else ",".join(map(str, sizes))
        on = "" if backend == "eager" else f" @{backend}"
        click.echo(f"clsbench {__version__}: sweep {model} {workload} {mode}{on} over batch sizes {what} x "
                   f"{measure.repeats} repeat(s) on {resolved}; results -> {path}", err=True)
    progress = Progress(quiet)
    try:
        outcome = api.sweep(settings, path, options=measure,
                            execution=dataclasses.replace(execution, progress=progress, env=env))
    finally:
        progress.close()
    click.echo(api.result_table(outcome.result), nl=False)
    click.echo("")
    click.echo(api.sweep_text(outcome.analysis), nl=False)
    saved(path, outcome.result, db)
    if any(m.status == Status.FAILED and m.reason != Reason.OOM for m in outcome.result.measurements):
        sys.exit(EXIT_MEASUREMENT_FAILED)
    exit_if_nothing_measured(path, outcome.result.measurements, "batch size")


#: The options that define a search: ``tune --resume`` takes them from the file and refuses them on the line.
SEARCH_OPTIONS = ("model", "workload", "max_latency_ms", "max_memory_gb", "modes", "batch_sizes", "compile_variants",
                  "backends", "variants", "max_autotune", "check_outputs", "exhaustive")


@click.command("tune")
@click.option("--model", help="Model name (see `clsbench models`); required unless --resume.")
@click.option("--workload", default="infer-throughput", show_default=True,
              help="infer-throughput, infer-latency or train.")
@click.option("--max-latency-ms", type=float,
              help="Limit: p50 request latency (infer-latency) or p99 latency per batch (otherwise), in ms.")
@click.option("--max-memory-gb", type=float,
              help="Limit: peak reserved GPU memory (worker peak RSS on a CPU), in GB (10^9 bytes).")
@list_option("--mode", "modes",
             help="Eager modes to explore first (repeat or comma-separate); default: every precision +/- cl, and fp8 "
                  "where the GPU (compute capability 8.9+) and torchao can run it.")
@list_option("--batch-size", "batch_sizes",
             help="Batch sizes to try (repeat or comma-separate); default: 1 for infer-latency, a short doubling "
                  "otherwise.")
@click.option("--compile/--no-compile", "compile_variants", default=True, show_default=True,
              help="Also try torch.compile and CUDA graphs for the best eager modes, then Inductor freezing "
                   "(inference) or the training-step candidates (train: fused/foreach optimizer, compiled and "
                   "captured step), and for inference the inference backends (--backend).")
@list_option("--backend", "backends",
             help="Inference backends the backend phase tries (repeat or comma-separate), e.g. export,tensorrt; "
                  "default: every one but eager (those that cannot run here are listed as pruned).")
@click.option("--variants", "variants", multiple=True,
              help="Which compile-phase variants to try (repeat or comma-separate): compile, cudagraph, "
                   "compile+cudagraph (train: compile); default: all.")
@click.option("--max-autotune/--no-max-autotune", default=True, show_default=True,
              help="Also try +compile:max-autotune for the best mode (the slowest compilation).")
@click.option("--check/--no-check", "check_outputs", default=True, show_default=True,
              help="Reject candidates whose outputs differ from fp32 eager beyond the documented tolerance.")
@click.option("--budget", metavar="DURATION",
              help="Time for the whole search, e.g. 10m, 600s, 1h (default: 10m on a GPU, 3m on a CPU; none with "
                   "--exhaustive). Candidates that cannot finish within it are not started; they are listed as left "
                   "out.")
@click.option("--exhaustive", is_flag=True, default=False,
              help="Cut nothing for speed: every candidate measured at the longer rung (no screen, no halving), no "
                   "plateau or dominance stop, every mode in the compile, freeze, train-step, max-autotune and "
                   "backend kinds, no budget unless --budget is given; the best two are confirmed as usual. The "
                   "reference for benchmarks/tune_vs_exhaustive.py.")
@click.option("--resume", "resume_path", metavar="FILE",
              help="Continue the search of an interrupted (or budget-limited) tune file; --budget is the new total.")
@click.option("--plan-only", is_flag=True, default=False,
              help="Print the search's plan (each stage, its candidates and estimated time, what the budget leaves "
                   "out) and stop: nothing is measured or written. With --exhaustive: how long the whole search "
                   "would take.")
@click.option("--costs-from", metavar="FILE",
              help="Price the plan by what an earlier tune file of this machine observed (each worker's start, each "
                   "build) instead of the priors; refused for a file of another device or card.")
@db_option
@measure_options(api.TUNE_OPTIONS, opt_in=("protocol",))
@data_options
@click.pass_context
def tune_command(ctx: click.Context, model: str | None, workload: str, max_latency_ms: float | None,
                 max_memory_gb: float | None, modes: tuple[str, ...], batch_sizes: tuple[str, ...],
                 compile_variants: bool, backends: tuple[str, ...], variants: tuple[str, ...], max_autotune: bool,
                 check_outputs: bool, budget: str | None, exhaustive: bool, resume_path: str | None,
                 plan_only: bool, costs_from: str | None, db: str | None, measure: MeasureOptions,
                 execution: Execution, device: str, output: str | None, quiet: bool, **data: Any) -> None:
    """Find the fastest configuration (mode x batch size x backend) of a model here, within latency and memory
    limits and a time budget: screen every candidate briefly, measure the best third longer, confirm the best two
    with the full repeats. With --data DIR (train): the best compute candidates on real data too, under each
    pipeline's most tuned setting; the winner is a mode, a batch and a pipeline setting."""
    if resume_path is not None:
        if plan_only or costs_from:
            flag = "--plan-only" if plan_only else "--costs-from"
            raise InvalidInputError(f"{flag} is for a new search; a search in a file has its plan and its costs",
                                    f"drop --resume for a new search, or drop {flag} to continue this one")
        _resume_tune(ctx, resume_path, budget, execution, quiet, db, data)
        return
    chosen_modes = api.split_list(modes) or None
    if modes and not chosen_modes:
        raise InvalidInputError("--mode names no mode", "e.g. --mode fp32,amp-bf16+cl")
    chosen_backends = api.split_list(backends) or None
    if backends and not chosen_backends:
        raise InvalidInputError("--backend names no backend", "e.g. --backend export,tensorrt")
    data_settings, pipelines, workers = tune_data(data)
    # The one place the search's settings are built and checked (the budget, --model, the limits, the sizes...).
    settings = api.TuneSettings(
        model=model or "", workload=workload, device=device, max_latency_ms=max_latency_ms,
        max_memory_gb=max_memory_gb, modes=chosen_modes, batch_sizes=",".join(batch_sizes) if batch_sizes else None,
        options=measure, compile_variants=compile_variants,
        variants=api.split_list(variants) if variants else None, max_autotune=max_autotune,
        check_outputs=check_outputs, backends=chosen_backends, budget=budget, exhaustive=exhaustive,
        data=data_settings, pipelines=pipelines, workers=workers)
    if plan_only:
        resolved = api.resolve_device(device)
        check_cell(settings.model, workload, resolved)
        api.plan_tune(settings, execution=dataclasses.replace(execution, env=api.environment(resolved)),
                      announce=click.echo, costs_from=costs_from)
        return
    resolved, env, path = start(device, output, db)
    check_cell(settings.model, workload, resolved)
    if not quiet:
        on = f" with data from {data_settings.directory}" if data_settings is not None else ""
        what = "tune --exhaustive" if exhaustive else "tune"
        click.echo(f"clsbench {__version__}: {what} {model} {workload}{on} on {resolved}; results -> {path}", err=True)
    progress = Progress(quiet)
    _finish_tune(path, progress, lambda: api.tune(
        settings, output=path,
        execution=dataclasses.replace(execution, progress=progress, env=env),
        announce=None if quiet else _announce, costs_from=costs_from), db)


#: Data options tune refuses: the pipeline kind chooses them itself for each pipeline.
TUNE_CHOOSES = {"pin_memory": "--pin-memory", "persistent_workers": "--persistent-workers",
                "prefetch_factor": "--prefetch-factor", "normalize_on": "--normalize-on",
                "gpu_augment": "--gpu-augment", "gpu_decode": "--gpu-decode"}


def tune_data(options: dict[str, Any]) -> tuple[Any, list[str] | None, int | None]:
    """``tune``'s real-data options: the base settings (--data, --data-source, --prime-cache, --data-timeout), the
    pipelines to try (--pipeline, comma-separated) and the worker count (--num-workers); the options that pick one
    setting of a pipeline are refused, since tune tries each pipeline's most tuned setting itself."""
    from clsbench.cli.data_options import data_settings

    chosen = [flag for name, flag in TUNE_CHOOSES.items() if options.get(name) is not None]
    if chosen:
        raise InvalidInputError(f"tune chooses {chosen[0]} itself for each pipeline it tries",
                                "drop it; measure one setting of your own with clsbench run --data DIR "
                                f"{chosen[0]}")
    base = {k: options.get(k) for k in ("data_dir", "data_source", "prime_cache", "data_timeout")}
    pipelines = [p.strip() for p in options["pipeline"].split(",") if p.strip()] if options.get("pipeline") \
        else None
    workers = options.get("num_workers")
    if options.get("data_dir") is None and (pipelines is not None or workers is not None):
        raise InvalidInputError(f"{'--pipeline' if pipelines is not None else '--num-workers'} needs --data DIR",
                                "e.g. --data ./images --num-workers 8")
    return data_settings(**base), pipelines, workers


def _announce(line: str) -> None:
    click.echo(line, err=True)


def _resume_tune(ctx: click.Context, path: str, budget: str | None, execution: Execution, quiet: bool,
                 db: str | None, data: dict[str, Any] | None = None) -> None:
    """``tune --resume FILE``: the search's own options (the data options too) come from the file and are refused
    on the line."""
    from click.core import ParameterSource

    from clsbench.cli.data_options import given as data_given

    api.parse_budget(budget)  # a bad budget is the first error, as for a new search
    given = [name for name in SEARCH_OPTIONS if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT,
                                                                                       None)]
    given += [flag.lstrip("-").replace("-", "_") for flag in data_given(data or {})]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise InvalidInputError(f"--resume continues the search stored in {path}; it takes no {flags}",
                                f"clsbench tune --resume {path} [--budget 20m]")
    api.check_store(db)  # a store URL that cannot work is refused before the search goes on, not after
    if not quiet:
        click.echo(f"clsbench {__version__}: tune --resume {path}", err=True)
    progress = Progress(quiet)
    _finish_tune(path, progress, lambda: api.resume_tune(
        path, budget=budget, execution=dataclasses.replace(execution, progress=progress),
        announce=None if quiet else _announce), db)


def _finish_tune(path: str, progress: Progress, search: Any, db: str | None) -> None:
    """Run the search; print its table (also when nothing met the limits, or on Ctrl-C, with the resume line); index
    the saved file in the store ``db`` (else $CLSBENCH_DB)."""
    try:
        outcome = search()
    except (api.NoConfigurationError, api.TuneInterrupted) as exc:
        progress.close()
        click.echo(api.tune_text(exc.tune_result.analysis), nl=False)
        if isinstance(exc, api.NoConfigurationError):
            saved(path, exc.tune_result.result, db)
            exit_if_nothing_measured(path, exc.tune_result.result.measurements, "candidate")
        raise
    finally:
        progress.close()
    click.echo(api.tune_text(outcome.analysis), nl=False)
    saved(path, outcome.result, db)


def register(group: click.Group) -> None:
    """Add ``sweep`` and ``tune`` to the CLI group (cli.py: ``sweep_cmds.register(main)``)."""
    group.add_command(sweep_command)
    group.add_command(tune_command)
