"""``clsbench soak``: parse, call :func:`clsbench.api.soak` (one :class:`~clsbench.procedures.soak.SoakSettings`),
print a line per window and the verdicts.

Exit codes as for ``run``: 2 bad input (a duration shorter than one window included), 3 file problems, 4 when the
soak's measurement failed, 130 on Ctrl-C: the soak stops after the window in flight, its verdicts are printed and
every finished window is in the file (Ctrl-C before the first window ends keeps nothing but the empty file).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import click

from clsbench import api
from clsbench.cli.common import check_cell, exit_if_nothing_measured, saved, start
from clsbench.cli.options import db_option, measure_options
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.vocab import Status
from clsbench.errors import EXIT_INTERRUPTED, EXIT_MEASUREMENT_FAILED
from clsbench.version import __version__

#: The measurement options a soak takes; the repeats and the stop rule's times are its own.
SOAK_FIELDS = ("warmup", "input_size", "seed", "compile_mode", "timeout_s", "cudnn_benchmark", "telemetry")

#: Help texts of the shared options that say more for ``soak``.
SOAK_HELPS = {
    "timeout_s": "Seconds the worker may take beyond --duration (start-up, compilation, warm-up) before it is killed.",
    "telemetry": "On a GPU, sample power, clocks, temperature, fan and throttling over the soak (NVML).",
}


class SoakProgress:
    """One line per finished window on stderr (nothing with ``--quiet``): its throughput, power, clocks,
    temperature and throttle reasons."""

    def __init__(self, quiet: bool, duration_s: float) -> None:
        self.quiet = quiet
        self.duration_s = duration_s

    def __call__(self, event: Any) -> None:
        if self.quiet:
            return
        if event.kind == "repeat":
            click.echo(f"starting {event.cell.label()}: building, warming up; then a line per window", err=True)
        elif event.kind == "window" and event.window is not None:
            click.echo(window_line(event.window, self.duration_s), err=True)
        elif event.kind == "measurement" and event.measurement.status != Status.OK:
            m = event.measurement
            click.echo(f"    {m.status}: {m.reason}: {m.detail}", err=True)


def window_line(window: dict[str, Any], duration_s: float) -> str:
    """The progress line of one finished window (the figures :class:`~clsbench.workloads.base.WindowLog` sends)."""
    from clsbench.core.text_table import fmt_rate

    end = window["start_s"] + window["wall_s"]
    parts = [f"[window {window['index'] + 1}, {end:.0f}/{duration_s:.0f} s]",
             f"{fmt_rate(window.get('throughput_img_s'))} img/s"]
    figures = api.window_facts(window)
    for key, text in (("power_w", "{:.0f} W"), ("sm_clock_mhz", "SM {:.0f} MHz"),
                      ("mem_clock_mhz", "mem {:.0f} MHz"), ("temperature_c", "{:.0f} C"), ("fan_pct", "fan {:.0f}%")):
        if figures.get(key) is not None:
            parts.append(text.format(figures[key]))
    if figures.get("throttled_share"):
        parts.append("throttled: " + ", ".join(figures["reason_labels"]))
    elif figures.get("throttled_share") == 0:
        parts.append("not throttled")
    return "  ".join(parts)


@click.command("soak")
@click.option("--model", required=True, help="Model name (see `clsbench models`).")
@click.option("--workload", default="train", show_default=True, help="train, infer-throughput or infer-latency.")
@click.option("--mode", default="fp32", show_default=True, help="Execution mode, e.g. amp-bf16+cl.")
@click.option("--batch-size", type=int, help="Batch size; default: the workload's default (as `run` chooses it).")
@click.option("--backend", default="eager", show_default=True,
              help="Inference backend: eager, torchscript, export, onnxruntime, tensorrt (inference only).")
@click.option("--duration", default="10m", show_default=True,
              help="How long to soak: 90s, 10m, 1h, 1h30m or seconds. MLPerf's minimum run is 600 s (10m).")
@click.option("--window", default="10s", show_default=True,
              help="Length of one window: throughput and telemetry are reported per window.")
@click.option("--sample-interval", type=float,
              help="Seconds between NVML telemetry samples; default: 1, or the window when it is shorter.")
@db_option
@measure_options(fields=SOAK_FIELDS, execution=("isolation", "probe"), helps=SOAK_HELPS)
def soak_command(model: str, workload: str, mode: str, batch_size: int | None, backend: str, duration: str,
                 window: str, sample_interval: float | None, db: str | None, measure: MeasureOptions,
                 execution: Execution, device: str, output: str | None, quiet: bool) -> None:
    """Measure one cell for a long time: throughput per window beside power, clocks, temperature and throttling.

    The verdicts: drift (last window against the first after warm-up), the steady-state throughput, when
    throttling began and why, whether it cost speed, the temperature plateau and the energy per image. Ctrl-C
    ends the soak after the current window and keeps everything measured.
    """
    settings = api.SoakSettings(model=model, workload=workload, mode=mode, batch_size=batch_size, device=device,
                                backend=backend, duration_s=api.parse_duration(duration),
                                window_s=api.parse_duration(window, "--window"),
                                sample_interval_s=sample_interval).validate()
    resolved, env, path = start(device, output, db)
    check_cell(model, workload, resolved, mode, backend, batch_size)
    if not quiet:
        what = " ".join(x for x in (model, workload, mode, f"bs{batch_size}" if batch_size else "") if x)
        on = "" if backend == "eager" else f" @{backend}"
        click.echo(f"clsbench {__version__}: soak {what}{on} on {resolved} for {settings.duration_s:g} s in "
                   f"{settings.window_s:g} s windows; results -> {path}", err=True)
        if settings.duration_s < api.MLPERF_MIN_DURATION_S:
            click.echo(f"note: {settings.duration_s:g} s is shorter than MLPerf's {api.MLPERF_MIN_DURATION_S:.0f} s "
                       "minimum run; the verdicts will say so", err=True)
    outcome = api.soak(settings, path, options=measure,
                       execution=dataclasses.replace(execution, env=env,
                                                     progress=SoakProgress(quiet, settings.duration_s)))
    click.echo(api.result_table(outcome.result), nl=False)
    click.echo("")
    click.echo(api.soak_text(outcome.analysis), nl=False)
    saved(path, outcome.result, db)
    if any(m.status == Status.FAILED for m in outcome.result.measurements):
        sys.exit(EXIT_MEASUREMENT_FAILED)
    if not outcome.ended_early:
        exit_if_nothing_measured(path, outcome.result.measurements)
    if outcome.ended_early:
        click.echo(f"interrupted: the soak ended early; every finished window is in {path}", err=True)
        sys.exit(EXIT_INTERRUPTED)


def register(group: click.Group) -> None:
    """Add ``soak`` to the CLI group (``clsbench.cli``: ``soak_cmds.register(main)``)."""
    group.add_command(soak_command)
