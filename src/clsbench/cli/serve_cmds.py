"""``clsbench serve``: parse, call :func:`clsbench.api.serve` (one :class:`~clsbench.serving.config.ServeSettings`),
print a line per LoadGen run and the table.

Exit codes as for ``run``: 2 bad input (LoadGen missing included, with the install command), 3 file problems, 4 when
some (mode, scenario) failed (a model error, out of memory, a hung batch), 130 on Ctrl-C (every finished LoadGen
run is in the file). An INVALID LoadGen run is a finding, not a failure.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

import click
from click.core import ParameterSource

from clsbench import api
from clsbench.cli.common import exit_if_nothing_measured, saved, start
from clsbench.cli.options import artifact_cache_options, db_option, list_option, measure_options
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.vocab import Status
from clsbench.errors import EXIT_INTERRUPTED, EXIT_MEASUREMENT_FAILED, InvalidInputError
from clsbench.version import __version__

MLPERF_MIN_DURATION_S = api.MLPERF_MIN_DURATION_S
QUICK_MIN_DURATION_S = api.QUICK_MIN_DURATION_S

#: Help texts of the shared options that say more for ``serve``.
SERVE_HELPS = {
    "seed": "Seed of the weights, the sample pool and LoadGen's schedules.",
    "output": "Result file (never overwritten; default under clsbench-results/); LoadGen's logs go to "
              "<stem>.loadgen/ beside it.",
}


class ServeProgress:
    """One line per LoadGen run and per server warm-up on stderr (nothing with ``--quiet``)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def __call__(self, event: dict[str, Any]) -> None:
        if self.quiet:
            return
        click.echo(progress_line(event), err=True)


def progress_line(event: dict[str, Any]) -> str:
    """The progress line of one event of :func:`clsbench.api.serve` (a plain dict)."""
    kind = event.get("kind")
    if kind == "build":
        facts = event.get("facts") or {}
        how = "from the cache" if facts.get("cache_hit") else f"built in {facts.get('build_s') or 0:.1f} s"
        return f"{event['mode']}: bucket {event['bucket']} artifact {how}, loaded in {facts.get('load_s') or 0:.2f} s"
    if kind == "parity":
        parity = event.get("parity") or {}
        error = parity.get("max_abs_err_rel")
        figure = "not measured" if error is None else f"max error {error:.1e} (tolerance {parity.get('tolerance'):.0e})"
        return f"{event['mode']}: bucket {event['bucket']} parity {'ok' if parity.get('passed') else 'FAILED'}: " \
               f"{figure}"
    if kind == "setup":
        what = f"warm-up {event['mode']} b{event['max_batch']} i{event['instances']}"
        if event.get("error"):
            return f"{what}: FAILED: {event['error']}"
        buckets = ",".join(str(b) for b in event.get("buckets") or [])
        return f"{what}: buckets {buckets}{' with CUDA graphs' if event.get('cuda_graphs') else ''} ready"
    if kind == "skip":
        return f"{event['mode']}: {event['status']}: {event.get('detail') or event['reason']}"
    step = event["step"]
    facts = api.serve_step_facts(step)
    setting = facts["setting"]
    target = facts["target_qps"]
    on = f" @{step['backend']}" if step.get("backend") else ""
    head = f"[{step['index']}] {step['mode']}{on} {step['scenario']} {setting} {step['role']}"
    if target is not None:
        head += f" {target:,.0f} qps"
    if step.get("error") and not step.get("loadgen"):
        return f"{head}: {step['error']}"
    verdict = "VALID" if facts["valid"] else f"INVALID ({facts['reason']})"
    if facts["p99_ms"] is not None:
        parts = [f"p99 {facts['p99_ms']:.2f} ms"]
    elif facts["max_ms"] is not None:
        parts = [f"p99 - ({facts['samples']} samples), max {facts['max_ms']:.2f} ms"]
    else:
        parts = ["p99 -"]
    rate = facts["rate"]
    if rate:
        parts.append(f"done {rate:,.0f}/s")
    stats = facts["batch_stats"]
    if stats:
        parts.append(f"mean batch {stats['mean_batch']:.1f}")
    parts.append(f"{step.get('wall_s') or 0:.1f} s")
    return f"{head}: {verdict}; " + ", ".join(parts)


#: Options whose values a --target server decides (its model config): given with --target, they are an error.
SERVER_DECIDED = ("modes", "backends", "max_batches", "max_delays", "instances", "buckets", "cuda_graphs", "threads",
                  "overlap", "no_cache", "backend_cache")


def check_target_options(target: str | None, model: str | None) -> None:
    """``--model`` is needed without ``--target``; with it, the options its server decides must not be given."""
    ctx = click.get_current_context()
    if target is None:
        if model is None:
            raise click.UsageError("--model is required (or --target to drive a running Triton server)")
        return
    given = [p for p in ctx.command.params if p.name in SERVER_DECIDED
             and ctx.get_parameter_source(p.name) not in (ParameterSource.DEFAULT, None)]
    if given:
        flags = ", ".join(p.opts[0] for p in given)
        raise click.UsageError(f"{flags}: with --target the server's model config decides this; drop it (or drop "
                               "--target to serve with clsbench's own server)")


def check_one_model(model: str | None) -> None:
    """``serve`` serves one model: a comma list in ``--model`` is one error line that says how to serve several."""
    names = [name.strip() for name in (model or "").split(",")]
    if len(names) > 1:
        listed = [name for name in names if name]
        raise InvalidInputError(
            f"serve takes one model, got {len(listed)} in --model {model}",
            "serve each with its own command, one after the other, e.g. " + "; ".join(
                f"clsbench serve --model {name}" for name in listed[:2]))


def target_model(target: str | None) -> str:
    """The model name a ``--target`` URL names (the result's model when ``--model`` is not given)."""
    return api.target_model(str(target))


def parse_headers(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``'NAME: VALUE'`` strings as pairs (``NAME=VALUE`` also accepted, split at whichever comes first); one usage
    error for anything else, which names the header but never echoes its value. A value given itself (not
    ``env:VAR`` or ``@PATH``) gets a warning: other users of the machine can read a command line."""
    pairs = []
    for value in values:
        cut = min((i for i in (value.find(":"), value.find("=")) if i >= 0), default=-1)
        name, text = (value[:cut], value[cut + 1:]) if cut >= 0 else (value, "")
        if cut < 0 or not name.strip():
            shown = name.strip() if cut >= 0 else "(no name)"
            raise click.UsageError(f"--target-header {shown}: expected 'NAME: VALUE', 'NAME: env:VAR' or "
                                   "'NAME: @FILE'")
        pairs.append((name.strip(), text.strip()))
    for name in api.literal_header_names(pairs):
        click.echo(f"warning: --target-header {name}: its value is on the command line, where other users of this "
                   f"machine can read it (ps); give it as '{name}: env:VAR' or '{name}: @FILE'", err=True)
    return tuple(pairs)


def min_duration(given: float | None, mlperf: bool) -> float:
    """The minimum duration of every LoadGen run: ``--min-duration-s``, else MLPerf's with ``--mlperf``, else the
    quick look."""
    if given is not None and mlperf:
        raise click.UsageError("--mlperf sets MLPerf's minimum duration (600 s); drop --min-duration-s")
    if given is not None:
        return given
    return MLPERF_MIN_DURATION_S if mlperf else QUICK_MIN_DURATION_S


@click.command("serve")
@click.option("--model", help="Model name (see `clsbench models`); with --target, the name results carry (default: "
                               "the target's model).")
@click.option("--target", metavar="URL",
              help="Drive a running Triton Inference Server instead of clsbench's own: triton://HOST:PORT/MODEL[/VER] "
                   "(gRPC) or triton+http://... Its model config decides precision, backend and batching.")
@click.option("--target-header", "target_headers", multiple=True, metavar="'NAME: VALUE'",
              help="A header sent with every call to --target (repeatable), e.g. Triton's access token for its "
                   "restricted statistics; only the name is stored. Keep a secret off the command line: "
                   "'NAME: env:VAR' reads the environment variable VAR, 'NAME: @FILE' the file FILE.")
@click.option("--max-in-flight", type=int, default=api.TARGET_MAX_IN_FLIGHT, show_default=True,
              help="--target: batch-1 requests outstanding at once (the rest wait in the client's queue).")
@list_option("--mode", "modes", default=("fp32",),
             help="Execution mode(s), e.g. bf16+cl, bf16+cl+compile; +cudagraph means a CUDA graph per bucket.")
@list_option("--backend", "backends", default=("eager",),
             help="Inference backend(s) each mode is served on; repeat or comma-separate: eager, torchscript (legacy: "
                  "deprecated upstream), export, export-frozen, onnxruntime, tensorrt. An artifact backend serves "
                  "the artifacts `run --backend` builds, one per bucket (static shapes), parity-checked first.")
@artifact_cache_options
@click.option("--scenario", "scenarios", multiple=True, default=("offline,single-stream,server",),
              show_default=True, help="Scenarios (comma list): offline, single-stream, multi-stream, server.")
@click.option("--latency-bound-ms", type=float, default=15.0, show_default=True,
              help="Server: the p99 latency bound (MLPerf's ResNet-50 bound is 15 ms).")
@click.option("--latency-percentile", type=float, default=99.0, show_default=True,
              help="Server: the percentile held to the bound (MLPerf: 99).")
@click.option("--max-batch", "max_batches", multiple=True, default=("64",), show_default=True,
              help="Largest batch the batcher forms; a comma list tries each.")
@click.option("--max-delay-ms", "max_delays", multiple=True, default=("2",), show_default=True,
              help="How long the oldest request waits for company; a comma list tries each.")
@click.option("--instances", "instances", multiple=True, default=(",".join(map(str, api.DEFAULT_INSTANCES)),),
              show_default=True,
              help="Model instances (threads with their own CUDA stream); a comma list tries each (the default: 1 "
                   "served more within the latency bound on an H100, 2 more offline).")
@click.option("--buckets", help="Batch shapes (comma list); default: powers of two up to each max batch.")
@click.option("--cuda-graphs/--no-cuda-graphs", default=False, show_default=True,
              help="Capture a CUDA graph per bucket in each instance (GPU only).")
@click.option("--min-duration-s", type=float,
              help=f"Minimum duration of every LoadGen run; default: a quick look of {QUICK_MIN_DURATION_S:g} s (a "
                   f"plain serve ends in minutes), or MLPerf's {MLPERF_MIN_DURATION_S:g} s with --mlperf.")
@click.option("--mlperf", is_flag=True,
              help=f"MLPerf's minimum duration: every LoadGen run >= {MLPERF_MIN_DURATION_S:g} s (a server search "
                   "makes about 8 runs per batching setting: over an hour each).")
@click.option("--min-queries", type=int, help="Minimum queries of every run; default: MLPerf's per scenario.")
@click.option("--resolution", type=float, default=0.02, show_default=True,
              help="Server search: stop when the VALID/INVALID bracket is this narrow (fraction of its lower end).")
@click.option("--start-qps", type=float, help="Server search: first target; default: half the offline samples/s.")
@click.option("--max-search-steps", type=int, default=30, show_default=True,
              help="Server search: the most LoadGen runs per setting.")
@click.option("--confirm", type=int, default=0, show_default=True,
              help="Server: repeat the run at each setting's answer this many times (spread; compare's t-test).")
@click.option("--samples", "sample_count", type=int, default=1024, show_default=True,
              help="Images in the preloaded sample pool (MLPerf's ResNet-50 performance sample count).")
@click.option("--batch-timeout-s", type=float, default=120.0, show_default=True,
              help="A batch running longer ends the LoadGen run as INVALID (timeout).")
@click.option("--threads", type=int, help="torch intra-op threads while serving; default: half the cores / instances.")
@click.option("--overlap/--no-overlap", default=True, show_default=True,
              help="On a GPU, each instance gathers its next batch while the GPU runs the current one; "
                   "--no-overlap runs each batch to the end first.")
@db_option
@measure_options(fields=api.SHARED_OPTIONS, execution=(), helps=SERVE_HELPS, clock=False)
def serve_command(model: str | None, target: str | None, target_headers: tuple[str, ...], max_in_flight: int,
                  modes: tuple[str, ...], backends: tuple[str, ...], no_cache: bool,
                  backend_cache: str | None, scenarios: tuple[str, ...], latency_bound_ms: float,
                  latency_percentile: float, max_batches: tuple[str, ...], max_delays: tuple[str, ...],
                  instances: tuple[str, ...], buckets: str | None, cuda_graphs: bool, min_duration_s: float | None,
                  mlperf: bool, min_queries: int | None, resolution: float, start_qps: float | None,
                  max_search_steps: int, confirm: int, sample_count: int, batch_timeout_s: float,
                  threads: int | None, overlap: bool, db: str | None, measure: MeasureOptions,
                  execution: Execution, device: str, output: str | None, quiet: bool) -> None:
    """Serve a model behind a dynamic batcher under MLPerf LoadGen: offline, single-stream, server QPS at a bound.

    Every LoadGen run lasts at least 10 s by default (a quick look: a plain serve ends in minutes); --mlperf holds
    each to MLPerf's 600 s.
    """
    check_one_model(model)
    check_target_options(target, model)
    settings = api.ServeSettings.with_options(
        measure, model=model or target_model(target), modes=api.parse_list(modes, str, "--mode", "e.g. --mode bf16+cl"),
        device=api.resolve_device(device),
        scenarios=api.parse_list(scenarios, str, "--scenario", "e.g. --scenario offline,server"),
        max_batches=api.parse_list(max_batches, int, "--max-batch", "e.g. --max-batch 32,64"),
        max_delays_ms=api.parse_list(max_delays, float, "--max-delay-ms", "e.g. --max-delay-ms 0,2"),
        instances=api.parse_list(instances, int, "--instances", "e.g. --instances 1,2"),
        buckets=api.parse_list(buckets, int, "--buckets", "e.g. --buckets 8,16,32,64") or None, cuda_graphs=cuda_graphs,
        latency_bound_ms=latency_bound_ms, latency_percentile=latency_percentile / 100.0,
        min_duration_s=min_duration(min_duration_s, mlperf), min_queries=min_queries, search_resolution=resolution,
        start_qps=start_qps, sample_count=sample_count, batch_timeout_s=batch_timeout_s, confirm=confirm,
        max_search_steps=max_search_steps, threads=threads, overlap=overlap,
        backends=tuple(api.split_list(backends, "--backend")) or ("eager",), no_cache=no_cache, cache_dir=backend_cache,
        target=target, target_headers=parse_headers(target_headers), target_max_in_flight=max_in_flight)
    api.check_serve_names(settings)  # bad input fails here, before the environment is read or anything is started
    api.require_loadgen()
    resolved, env, path = start(settings.device, output, db)
    if not quiet:
        on = "" if settings.backends == ("eager",) else f" @{','.join(settings.backends)}"
        what = f"{settings.target} from {resolved}" if target else f"{','.join(settings.modes)}{on} on {resolved}"
        click.echo(f"clsbench {__version__}: serve {settings.model} {what}, scenarios "
                   f"{','.join(settings.scenarios)}, {len(settings.configs())} batching setting(s), LoadGen runs of "
                   f">= {settings.min_duration_s:g} s; results -> {path}", err=True)
        if settings.mlperf_duration:
            click.echo(f"note: {settings.min_duration_s:g} s per LoadGen run is MLPerf's minimum; a server search "
                       f"makes about 8 runs per setting (drop --mlperf for a {QUICK_MIN_DURATION_S:g} s quick look)",
                       err=True)
    try:
        outcome = api.serve(settings, path, execution=dataclasses.replace(execution, env=env,
                                                                          progress=ServeProgress(quiet)))
    except api.ServeInterrupted as exc:
        click.echo(api.serve_text(exc.outcome.result), nl=False)
        click.echo(f"\ninterrupted: the finished LoadGen runs are saved in {path}", err=True)
        if exc.abandoned:  # LoadGen is still running in its thread: leave without running Python's shutdown
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)
        sys.exit(EXIT_INTERRUPTED)
    click.echo(api.serve_text(outcome.result), nl=False)
    saved(path, outcome.result, db)
    if any(m.status == Status.FAILED for m in outcome.result.measurements):
        sys.exit(EXIT_MEASUREMENT_FAILED)
    exit_if_nothing_measured(path, outcome.result.measurements, "mode and scenario")


def register(group: click.Group) -> None:
    """Add ``serve`` to the CLI group (``clsbench.cli``: ``serve_cmds.register(main)``)."""
    group.add_command(serve_command)
