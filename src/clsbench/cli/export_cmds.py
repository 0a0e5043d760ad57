"""``clsbench export --triton-repo DIR``: parse, call :func:`clsbench.api.export_triton_repo`, print.

Exit codes: 2 bad input (an unknown backend, one without a Triton format, an autocast or +compile mode, a serve
file without a Server answer), 3 file problems (``DIR/<name>`` exists, ``DIR`` cannot be written, ``--from``
unreadable), 4 when the artifact failed to build or failed its check against fp32 eager (nothing is written).
"""

from __future__ import annotations

import click

from clsbench.cli.common import handle_errors
from clsbench.errors import InvalidInputError


def parse_sizes(text: str | None, option: str) -> tuple[int, ...]:
    """``"16,32"`` -> ``(16, 32)``; one error line for anything but whole numbers."""
    if not text:
        return ()
    sizes = []
    for part in text.split(","):
        try:
            sizes.append(int(part.strip()))
        except ValueError:
            raise InvalidInputError(f"{option} {part.strip()!r} is not a whole number",
                                    f"e.g. {option} 16,32") from None
    return tuple(sizes)


@click.command("export")
@click.option("--triton-repo", "repo_dir", required=True, metavar="DIR",
              help="Triton model repository to write the model into (created if missing); DIR/<name> must not exist.")
@click.option("--model", help="Model name (see `clsbench models`); default with --from: the served model.")
@click.option("--mode", help="Execution mode measured, e.g. fp16+cl (default fp32). amp-* and +compile have no "
                             "artifact; +cudagraph is dropped (the server's choice).")
@click.option("--backend", help="Backend whose artifact is deployed: onnxruntime (ONNX, platform onnxruntime_onnx; the "
                                "default) or torchscript (legacy: deprecated upstream; platform pytorch_libtorch).")
@click.option("--from", "from_result", metavar="FILE",
              help="A `clsbench serve` result: deploy its best Server answer's model, mode, backend and batching "
                   "setting (max batch, max delay, instances); the options above and below override it.")
@click.option("--name", help="The model's name in the repository; default: the model name, file-safe.")
@click.option("--max-batch", type=int, help="max_batch_size: the largest batch the dynamic batcher forms "
                                            "(default: --from's, else 64 as serve).")
@click.option("--max-delay-ms", type=float, help="How long a request waits for its batch to fill "
                                                 "(default: --from's, else 2 as serve).")
@click.option("--instances", type=int, help="Model instances per device (default: --from's, else 1).")
@click.option("--preferred-batch", metavar="SIZES",
              help="Preferred batch sizes of the dynamic batcher, comma list (default none, as Triton advises).")
@click.option("--input-size", type=int, help="Square input side (default: the served one, else the model's).")
@click.option("--seed", type=int, help="Seed of the weights (default: the serve result's, else 0).")
@click.option("--device", help="Where the server runs the instances: cuda (KIND_GPU, the default) or cpu (KIND_CPU). "
                               "The artifact is built and checked on the CPU either way.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
@handle_errors
def export_command(repo_dir: str, model: str | None, mode: str | None, backend: str | None, from_result: str | None,
                   name: str | None, max_batch: int | None, max_delay_ms: float | None, instances: int | None,
                   preferred_batch: str | None, input_size: int | None, seed: int | None, device: str | None,
                   quiet: bool) -> None:
    """Write the model you measured into a Triton Inference Server model repository.

    The artifact takes a dynamic batch dimension (Triton's dynamic batcher needs one), is built as the backend
    builds it, and is checked against fp32 eager PyTorch at batch sizes 1 and 3 before anything is written.
    config.pbtxt carries the batching setting; README.txt the parity figures and how to start Triton.
    """
    from clsbench import api

    settings = api.TritonExportSettings(
        repo_dir=repo_dir, model=model, mode=mode, backend=backend, from_result=from_result, name=name,
        max_batch=max_batch, max_delay_ms=max_delay_ms, instances=instances,
        preferred_batch=parse_sizes(preferred_batch, "--preferred-batch"), input_size=input_size, seed=seed,
        device=device)
    outcome = api.export_triton_repo(settings, progress=None if quiet else lambda line: click.echo(line, err=True))
    plan = outcome.plan
    if not quiet:
        worst = max(p["max_abs_err_rel"] for p in outcome.parity)
        click.echo(f"wrote {outcome.path}: config.pbtxt, 1/{plan.format.artifact}, README.txt (parity against fp32 "
                   f"eager: {worst:.2e} of the logits' scale, tolerance {outcome.parity[0]['tolerance']:g})", err=True)
    click.echo(f"start Triton on it: {outcome.start_command}")


def register(group: click.Group) -> None:
    """Add ``export`` to the CLI group (``clsbench.cli``: ``export_cmds.register(main)``)."""
    group.add_command(export_command)
