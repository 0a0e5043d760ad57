"""``clsbench scale``: parse, plan (:func:`clsbench.api.plan_scale`), call :func:`clsbench.api.scale`,
print.

Wire it in with ``register(main)`` in cli.py. Exit codes as for ``run``: 0, 2 bad input, 3 output file problem,
4 when a measurement failed (after saving and printing everything), 130 interrupted.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from typing import Any

import click

from clsbench import api
from clsbench.cli.common import Progress, saved
from clsbench.cli.options import db_option, measure_options
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.vocab import Status
from clsbench.errors import EXIT_MEASUREMENT_FAILED
from clsbench.version import __version__


@click.command("scale")
@click.option("--model", required=True, help="Model name (see `clsbench models`).")
@click.option("--gpus", required=True,
              help="GPU counts per node to measure, comma list (1,2,4,8). On a CPU: gloo processes.")
@click.option("--strategy", type=click.Choice(["ddp", "dp", "both"]), default="ddp", show_default=True,
              help="ddp: DistributedDataParallel, one process per GPU via torchrun; dp: DataParallel in one process.")
@click.option("--mode", default="fp32", show_default=True, help="Execution mode, e.g. amp-bf16+cl.")
@click.option("--batch-size-per-gpu", type=int, required=True, help="Images per GPU per step.")
@click.option("--comm-share/--no-comm-share", default=True, show_default=True,
              help="DDP on 2+ GPUs: after timing, estimate the gradient all-reduce's share of a step with no_sync().")
@click.option("--nnodes", type=int, default=1, show_default=True, help="Nodes taking part (torchrun's --nnodes).")
@click.option("--node-rank", type=int, default=0, show_default=True,
              help="This node's rank; node 0 hosts the rendezvous and writes the result file.")
@click.option("--rdzv-endpoint",
              help="HOST:PORT of node 0 for several nodes; launch i uses PORT+i, so open PORT..PORT+launches-1.")
@click.option("--dry-run", is_flag=True, help="Print the launch commands of this node and exit; nothing runs.")
@db_option
@measure_options(api.SCALE_OPTIONS, execution=(), helps={
    "device": "auto, cuda (GPUs 0..k-1; choose them with CUDA_VISIBLE_DEVICES) or cpu (gloo).",
    "repeats": "Fresh launches per strategy and GPU count.",
    "iterations": "Minimum timed iterations per launch.",
    "min_time": "Minimum timed seconds per launch.",
    "max_time": "Stop a launch's timed region after this many seconds.",
    "timeout_s": "Seconds before a launch (torchrun and all its ranks) is killed and recorded as failed (timeout).",
    "cudnn_benchmark": "Let cuDNN autotune convolution algorithms (in the untimed first iteration). Default: on, "
                       "except DataParallel on 2+ GPUs, whose new threads every step would autotune again."})
def scale_command(model: str, gpus: str, strategy: str, mode: str, batch_size_per_gpu: int, comm_share: bool,
                  nnodes: int, node_rank: int, rdzv_endpoint: str | None, dry_run: bool, db: str | None,
                  measure: MeasureOptions, execution: Execution, device: str, output: str | None,
                  quiet: bool) -> None:
    """Multi-GPU training: DDP (torchrun) and DataParallel at each GPU count, scaling efficiency against 1 GPU."""
    plan = api.plan_scale(model=model, gpus=gpus, strategy=strategy, mode=mode, batch_size_per_gpu=batch_size_per_gpu,
                      device=device, options=measure, comm_share=comm_share, nnodes=nnodes, node_rank=node_rank,
                      rdzv_endpoint=rdzv_endpoint)
    if dry_run:
        print_launches(plan)
        return
    writer = plan.node_rank == 0
    if writer:  # node 0 indexes the result: a store URL that cannot work is refused before any launch, not after
        api.check_store(db)
    env = api.environment(plan.device)
    for line in api.preflight_warnings(env):
        click.echo(f"warning: {line}", err=True)
    path = (output or str(api.default_output_path(plan.device))) if writer else None
    if not quiet:
        where = f"results -> {path}" if writer else "node 0 writes the result file"
        click.echo(f"clsbench {__version__}: scale {plan.model} {plan.mode} {', '.join(plan.strategies)} on "
                   f"{'/'.join(map(str, plan.gpus))} {plan.device} x {plan.nnodes} node(s) x {plan.repeats} "
                   f"repeat(s); {where}", err=True)
        shown = {k: v for k, v in api.communication_env().items() if k.startswith(("NCCL_", "TORCH_SYMM", "NVSHMEM_"))}
        click.echo("communication variables: " + (", ".join(f"{k}={v}" for k, v in shown.items()) or "none set"),
                   err=True)
    if plan.device == "cuda" and max(plan.gpus) * plan.nnodes > 1 and "ddp" in plan.strategies:
        note = api.multicast_note()
        if note:
            click.echo(f"note: {note}", err=True)
    progress = Progress(quiet)
    try:
        result = api.scale(plan, path, execution=dataclasses.replace(execution, env=env, progress=progress))
    finally:
        progress.close()
    click.echo(api.result_table(result), nl=False)
    click.echo("")
    click.echo(api.scale_text(result), nl=False)
    if path is not None:
        saved(path, result, db)
    elif not quiet:
        click.echo(f"\nnode {plan.node_rank}: done; the result file is written on node 0", err=True)
    if any(m.status == Status.FAILED for m in result.measurements):
        sys.exit(EXIT_MEASUREMENT_FAILED)


def print_launches(plan: Any) -> None:
    """``--dry-run``: this node's launch commands, one comment line and one command per launch (nothing runs)."""
    for item in api.launch_commands(plan):
        if item["skipped"]:
            if item["repeat"] == 0:
                click.echo(f"# {item['strategy']} x{item['gpus']}: skipped: {item['skipped']}")
            continue
        click.echo(f"# {item['strategy']} x{item['gpus']} repeat {item['repeat'] + 1} (launch {item['index']})")
        click.echo(shlex.join(item["command"]))


def register(group: click.Group) -> None:
    """Add ``scale`` to the CLI group (cli.py: ``scale_cmds.register(main)``)."""
    group.add_command(scale_command)
