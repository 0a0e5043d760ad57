"""``clsbench scale``: parse, call :mod:`clsbench.procedures.scale`, print.

Wire it in with ``register(main)`` in cli.py. Exit codes as for ``run``: 0, 2 bad input, 3 output file problem,
4 when a measurement failed (after saving and printing everything), 130 interrupted.
"""

from __future__ import annotations

import shlex
import sys

import click

from clsbench.cli.app import handle_errors
from clsbench.errors import EXIT_MEASUREMENT_FAILED


@click.command("scale")
@click.option("--model", required=True, help="Model name (see `clsbench models`).")
@click.option("--gpus", required=True,
              help="GPU counts per node to measure, comma list (1,2,4,8). On a CPU: gloo processes.")
@click.option("--strategy", type=click.Choice(["ddp", "dp", "both"]), default="ddp", show_default=True,
              help="ddp: DistributedDataParallel, one process per GPU via torchrun; dp: DataParallel in one process.")
@click.option("--mode", default="fp32", show_default=True, help="Execution mode, e.g. amp-bf16+cl.")
@click.option("--batch-size-per-gpu", type=int, required=True, help="Images per GPU per step.")
@click.option("--device", default="auto", show_default=True,
              help="auto, cuda (GPUs 0..k-1; choose them with CUDA_VISIBLE_DEVICES) or cpu (gloo).")
@click.option("--repeats", type=int, default=3, show_default=True,
              help="Fresh launches per strategy and GPU count.")
@click.option("--warmup", type=int, help="Warm-up iterations before timing.")
@click.option("--iterations", type=int, help="Minimum timed iterations per launch.")
@click.option("--min-time", type=float, help="Minimum timed seconds per launch.")
@click.option("--max-time", type=float, help="Stop a launch's timed region after this many seconds.")
@click.option("--input-size", type=int, help="Square input side; default: the model's own.")
@click.option("--timeout", "timeout_s", type=float, default=900.0, show_default=True,
              help="Seconds before a launch (torchrun and all its ranks) is killed and recorded as failed (timeout).")
@click.option("--comm-share/--no-comm-share", default=True, show_default=True,
              help="DDP on 2+ GPUs: after timing, estimate the gradient all-reduce's share of a step with no_sync().")
@click.option("--compile-mode", default="default", show_default=True, help="torch.compile mode for +compile.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for weights and synthetic data.")
@click.option("--cudnn-benchmark/--no-cudnn-benchmark", default=None,
              help="Let cuDNN autotune convolution algorithms (in the untimed first iteration). Default: on, except "
                   "DataParallel on 2+ GPUs, whose new threads every step would autotune again.")
@click.option("--nnodes", type=int, default=1, show_default=True, help="Nodes taking part (torchrun's --nnodes).")
@click.option("--node-rank", type=int, default=0, show_default=True,
              help="This node's rank; node 0 hosts the rendezvous and writes the result file.")
@click.option("--rdzv-endpoint",
              help="HOST:PORT of node 0 for several nodes; launch i uses PORT+i, so open PORT..PORT+launches-1.")
@click.option("--output", "-o", help="Result file (never overwritten); default under clsbench-results/.")
@click.option("--dry-run", is_flag=True, help="Print the launch commands of this node and exit; nothing runs.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@handle_errors
def scale_command(model: str, gpus: str, strategy: str, mode: str, batch_size_per_gpu: int, device: str,
                  repeats: int, warmup: int | None, iterations: int | None, min_time: float | None,
                  max_time: float | None, input_size: int | None, timeout_s: float, comm_share: bool,
                  compile_mode: str, seed: int, cudnn_benchmark: bool | None, nnodes: int, node_rank: int,
                  rdzv_endpoint: str | None, output: str | None, dry_run: bool, quiet: bool) -> None:
    """Multi-GPU training: DDP (torchrun) and DataParallel at each GPU count, scaling efficiency against 1 GPU."""
    from clsbench import __version__, api
    from clsbench.procedures.scale import analyze_scale, launch_commands, plan_scale, render_scale, run_scale
    from clsbench.procedures.scale.nccl import communication_env, multicast_note
    from clsbench.report import table

    plan = plan_scale(model=model, gpus=gpus, strategy=strategy, mode=mode, batch_size_per_gpu=batch_size_per_gpu,
                      device=device, repeats=repeats, warmup=warmup, iterations=iterations, min_time=min_time,
                      max_time=max_time, input_size=input_size, timeout_s=timeout_s, compile_mode=compile_mode,
                      seed=seed, cudnn_benchmark=cudnn_benchmark, comm_share=comm_share, nnodes=nnodes,
                      node_rank=node_rank, rdzv_endpoint=rdzv_endpoint)
    if dry_run:
        for item in launch_commands(plan):
            if item["skipped"]:
                if item["repeat"] == 0:
                    click.echo(f"# {item['strategy']} x{item['gpus']}: skipped: {item['skipped']}")
                continue
            click.echo(f"# {item['strategy']} x{item['gpus']} repeat {item['repeat'] + 1} (launch {item['index']})")
            click.echo(shlex.join(item["command"]))
        return
    env = api.environment(plan.device)
    for line in api.preflight_warnings(env):
        click.echo(f"warning: {line}", err=True)
    writer = plan.node_rank == 0
    path = (output or str(api.default_output_path(plan.device))) if writer else None
    if not quiet:
        where = f"results -> {path}" if writer else "node 0 writes the result file"
        click.echo(f"clsbench {__version__}: scale {plan.model} {plan.mode} {', '.join(plan.strategies)} on "
                   f"{'/'.join(map(str, plan.gpus))} {plan.device} x {plan.nnodes} node(s) x {plan.repeats} "
                   f"repeat(s); {where}", err=True)
        shown = {k: v for k, v in communication_env().items() if k.startswith(("NCCL_", "TORCH_SYMM", "NVSHMEM_"))}
        click.echo("communication variables: " + (", ".join(f"{k}={v}" for k, v in shown.items()) or "none set"),
                   err=True)
    if plan.device == "cuda" and max(plan.gpus) * plan.nnodes > 1 and "ddp" in plan.strategies:
        note = multicast_note()
        if note:
            click.echo(f"note: {note}", err=True)
    from clsbench.cli.app import _Progress

    progress = _Progress(quiet)
    try:
        result = run_scale(plan, path, env=env, progress=progress)
    finally:
        progress.close()
    click.echo(table.render(result), nl=False)
    click.echo("")
    click.echo(render_scale(analyze_scale(result)), nl=False)
    if path is not None:
        from clsbench.cli.app import _index

        click.echo(f"\nsaved: {path}", err=True)
        _index(path, result)
    elif not quiet:
        click.echo(f"\nnode {plan.node_rank}: done; the result file is written on node 0", err=True)
    if any(m.status == "failed" for m in result.measurements):
        sys.exit(EXIT_MEASUREMENT_FAILED)


def register(group: click.Group) -> None:
    """Add ``scale`` to the CLI group (cli.py: ``scale_cmds.register(main)``)."""
    group.add_command(scale_command)
