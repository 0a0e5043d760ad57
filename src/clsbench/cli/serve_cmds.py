"""``clsbench serve``: parse, call :func:`clsbench.serving.run.serve`, print a line per LoadGen run and the table.

Wire it in with ``register(main)`` in cli.py. Exit codes as for ``run``: 2 bad input (LoadGen missing included, with
the install command), 3 file problems, 4 when some (mode, scenario) failed (a model error, out of memory, a hung
batch), 130 on Ctrl-C (every finished LoadGen run is in the file). An INVALID LoadGen run is a finding, not a
failure.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from clsbench.cli import handle_errors
from clsbench.errors import EXIT_INTERRUPTED, EXIT_MEASUREMENT_FAILED


class _ServeProgress:
    """One line per LoadGen run and per server warm-up on stderr (nothing with ``--quiet``)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def __call__(self, event: dict[str, Any]) -> None:
        if self.quiet:
            return
        click.echo(progress_line(event), err=True)


def progress_line(event: dict[str, Any]) -> str:
    """The progress line of one event of :func:`clsbench.serving.run.serve`."""
    from clsbench.serving import records

    kind = event.get("kind")
    if kind == "setup":
        what = f"warm-up {event['mode']} b{event['max_batch']} i{event['instances']}"
        if event.get("error"):
            return f"{what}: FAILED: {event['error']}"
        buckets = ",".join(str(b) for b in event.get("buckets") or [])
        return f"{what}: buckets {buckets}{' with CUDA graphs' if event.get('cuda_graphs') else ''} ready"
    if kind == "skip":
        return f"{event['mode']}: {event['status']}: {event['reason']}"
    step = event["step"]
    setting = records.setting_label(step.get("setting") or {})
    target = records.target_qps(step)
    head = f"[{step['index']}] {step['mode']} {step['scenario']} {setting} {step['role']}"
    if target is not None:
        head += f" {target:,.0f} qps"
    if step.get("error") and not step.get("loadgen"):
        return f"{head}: {step['error']}"
    verdict = "VALID" if records.is_valid(step) else f"INVALID ({records.reason(step)})"
    parts = [f"p99 {records.latency_ms(step, 'p99') or 0:.2f} ms"]
    rate = records.loadgen_figure(step, "completed_qps") or records.loadgen_figure(step, "samples_per_second")
    if rate:
        parts.append(f"done {rate:,.0f}/s")
    stats = records.batch_stats(step)
    if stats:
        parts.append(f"mean batch {stats['mean_batch']:.1f}")
    parts.append(f"{step.get('wall_s') or 0:.1f} s")
    return f"{head}: {verdict}; " + ", ".join(parts)


@click.command("serve")
@click.option("--model", required=True, help="Model name (see `clsbench models`).")
@click.option("--mode", "modes", multiple=True, default=("fp32",), show_default=True,
              help="Execution mode(s), e.g. bf16+cl, bf16+cl+compile; +cudagraph means a CUDA graph per bucket.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
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
@click.option("--instances", "instances", multiple=True, default=("2",), show_default=True,
              help="Model instances (threads with their own CUDA stream); a comma list tries each.")
@click.option("--buckets", help="Batch shapes (comma list); default: powers of two up to each max batch.")
@click.option("--cuda-graphs/--no-cuda-graphs", default=False, show_default=True,
              help="Capture a CUDA graph per bucket in each instance (GPU only).")
@click.option("--min-duration-s", type=float, default=600.0, show_default=True,
              help="Minimum duration of every LoadGen run (MLPerf: 600 s); e.g. 10 for a quick look.")
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
@click.option("--input-size", type=int, help="Square input side; default: the model's own.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of weights, samples and LoadGen.")
@click.option("--batch-timeout-s", type=float, default=120.0, show_default=True,
              help="A batch running longer ends the LoadGen run as INVALID (timeout).")
@click.option("--threads", type=int, help="torch intra-op threads while serving; default: half the cores / instances.")
@click.option("--compile-mode", default="default", show_default=True, help="torch.compile mode for +compile.")
@click.option("--output", "-o", help="Result file (never overwritten); LoadGen's logs go to <stem>.loadgen/.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@handle_errors
def serve_command(model: str, modes: tuple[str, ...], device: str, scenarios: tuple[str, ...],
                  latency_bound_ms: float, latency_percentile: float, max_batches: tuple[str, ...],
                  max_delays: tuple[str, ...], instances: tuple[str, ...], buckets: str | None, cuda_graphs: bool,
                  min_duration_s: float, min_queries: int | None, resolution: float, start_qps: float | None,
                  max_search_steps: int, confirm: int, sample_count: int, input_size: int | None, seed: int,
                  batch_timeout_s: float, threads: int | None, compile_mode: str, output: str | None,
                  quiet: bool) -> None:
    """Serve a model behind a dynamic batcher under MLPerf LoadGen: offline, single-stream, server QPS at a bound."""
    from clsbench import __version__, api
    from clsbench.serving.analysis import analyze_serve, render_serve
    from clsbench.serving.config import MLPERF_MIN_DURATION_S, ServeSettings, parse_list
    from clsbench.serving.loadgen import import_loadgen
    from clsbench.serving.run import ServeInterrupted, serve

    resolved = api.resolve_device(device)
    settings = ServeSettings(
        model=model, modes=parse_list(modes, str, "--mode", "e.g. --mode bf16+cl"), device=resolved,
        scenarios=parse_list(scenarios, str, "--scenario", "e.g. --scenario offline,server"),
        max_batches=parse_list(max_batches, int, "--max-batch", "e.g. --max-batch 32,64"),
        max_delays_ms=parse_list(max_delays, float, "--max-delay-ms", "e.g. --max-delay-ms 0,2"),
        instances=parse_list(instances, int, "--instances", "e.g. --instances 1,2"),
        buckets=parse_list(buckets, int, "--buckets", "e.g. --buckets 8,16,32,64") or None, cuda_graphs=cuda_graphs,
        latency_bound_ms=latency_bound_ms, latency_percentile=latency_percentile / 100.0,
        min_duration_s=min_duration_s, min_queries=min_queries, search_resolution=resolution, start_qps=start_qps,
        sample_count=sample_count, input_size=input_size, seed=seed, batch_timeout_s=batch_timeout_s,
        compile_mode=compile_mode, confirm=confirm, max_search_steps=max_search_steps, threads=threads)
    settings.validate()  # bad input fails here, before the environment is read or anything is started
    import_loadgen()
    env = api.environment(resolved)
    path = output or str(api.default_output_path(resolved))
    for line in api.preflight_warnings(env):
        click.echo(f"warning: {line}", err=True)
    if not quiet:
        click.echo(f"clsbench {__version__}: serve {model} {','.join(settings.modes)} on {resolved}, scenarios "
                   f"{','.join(settings.scenarios)}, {len(settings.configs())} batching setting(s), LoadGen runs of "
                   f">= {settings.min_duration_s:g} s; results -> {path}", err=True)
        if settings.min_duration_s >= MLPERF_MIN_DURATION_S:
            click.echo(f"note: {settings.min_duration_s:g} s per LoadGen run is MLPerf's minimum; a server search "
                       "makes about 8 runs per setting (--min-duration-s 10 for a quick look)", err=True)
    try:
        outcome = serve(settings, path, environment=env, progress=_ServeProgress(quiet))
    except ServeInterrupted as exc:
        click.echo(render_serve(analyze_serve(exc.outcome.result)), nl=False)
        click.echo(f"\ninterrupted: the finished LoadGen runs are saved in {path}", err=True)
        if exc.abandoned:  # LoadGen is still running in its thread: leave without running Python's shutdown
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)
        sys.exit(EXIT_INTERRUPTED)
    click.echo(render_serve(analyze_serve(outcome.result)), nl=False)
    _saved(path, outcome.result)
    if any(m.status == "failed" for m in outcome.result.measurements):
        sys.exit(EXIT_MEASUREMENT_FAILED)


def _saved(path: str, result: Any) -> None:
    """Say where the file is and add it to the history index, as ``run`` does (a problem there is a warning)."""
    from clsbench.cli import _index

    click.echo(f"\nsaved: {path}", err=True)
    _index(path, result)


def register(group: click.Group) -> None:
    """Add ``serve`` to the CLI group (cli.py: ``serve_cmds.register(main)``)."""
    group.add_command(serve_command)
