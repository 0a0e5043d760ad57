"""``clsbench select``: parse, call :func:`clsbench.api.select` (one
:class:`~clsbench.procedures.select.SelectSettings`), print the ranked table and the verdict.

Exit codes: 0 an answer (written to its file); 2 bad input: no requirement or two, a negative price, a price for a
card with no results, no result of the model, a requirement no card meets (the line gives each card's reason);
3 a result file that cannot be read, or an output that exists or cannot be written.
"""

from __future__ import annotations

import click

from clsbench import api
from clsbench.cli.common import handle_errors
from clsbench.cli.options import list_option


@click.command("select")
@click.argument("inputs", nargs=-1, metavar="[FILE|DIR|RUN_ID]...")
@click.option("--model", required=True, help="The model the requirement is for (as the results name it).")
@click.option("--throughput", type=float, metavar="IMG_S",
              help="Requirement: this many images per second of --workload (offline inference by default).")
@click.option("--qps", type=float, help="Requirement: this many queries (images) per second, served ...")
@click.option("--p99-ms", type=float, help="... with the 99th percentile latency within this many ms.")
@click.option("--epochs", type=float, help="Requirement: a training job of this many epochs ...")
@click.option("--dataset-images", type=float, help="... over a dataset of this many images ...")
@click.option("--deadline", help="... done within this time: 24h, 90m, 1h30m or seconds.")
@click.option("--workload", help="With --throughput: infer-throughput (default), infer-latency or train.")
@list_option("--mode", "modes", help="Allowed modes (as `run` spells them); repeat or comma-separate. Default: any.")
@list_option("--precision", "precisions",
             help="Allowed precisions, e.g. fp32 (full fp32 numerics only) or fp32,tf32. Default: any.")
@list_option("--backend", "backends", help="Allowed inference backends, e.g. eager,export. Default: any.")
@click.option("--no-compile", is_flag=True, help="Leave out modes that compile (+compile, +freeze, +compiled-step).")
@click.option("--input-size", type=int, help="The input size the cells must have (default: the one the results hold).")
@click.option("--price", "prices", multiple=True, metavar="CARD=PRICE/h",
              help="An hourly price per card, e.g. H100=2.49/h; repeat for each card (docs/select.md: card names).")
@click.option("--prices", "prices_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="A TOML file of prices: hourly, or purchase with amortisation years and utilisation.")
@click.option("--kwh-price", type=float, help="Price of a kWh, for the energy cost per million images.")
@click.option("--currency", help="Printed before every cost (default: the --prices file's, else $).")
@click.option("--headroom", type=float, default=0.0, show_default=True,
              help="Spare capacity on top of the requirement, as a fraction (0.2: 20%% more).")
@click.option("--max-cards", type=int, help="A card that needs more than this many is excluded (default: no limit).")
@click.option("--from-history", is_flag=True, help="Also read every run of --model the history index holds.")
@click.option("--db", metavar="PATH|URL", help="The store for run ids and --from-history (as `history --db`).")
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="The result file (never overwritten). Default: clsbench-results/<time>-<host>-select.json.")
@handle_errors
def select_command(inputs: tuple[str, ...], model: str, throughput: float | None, qps: float | None,
                   p99_ms: float | None, epochs: float | None, dataset_images: float | None, deadline: str | None,
                   workload: str | None, modes: tuple[str, ...], precisions: tuple[str, ...],
                   backends: tuple[str, ...], no_compile: bool, input_size: int | None, prices: tuple[str, ...],
                   prices_file: str | None, kwh_price: float | None, currency: str | None, headroom: float,
                   max_cards: int | None, from_history: bool, db: str | None, output: str | None) -> None:
    """Which card, how many, at what cost: for --model and one requirement, rank the cards of the results (FILEs,
    DIRs of result files, run ids) by the cost of meeting it, with the best configuration of each, the cards
    needed, cost per hour and per million images, energy, and why each other card is excluded."""
    settings = api.SelectSettings(
        inputs=inputs, model=model,
        requirement={"throughput": throughput, "qps": qps, "p99_ms": p99_ms, "epochs": epochs,
                     "dataset_images": dataset_images, "deadline": deadline},
        workload=workload, modes=tuple(api.split_list(modes, "--mode")),
        precisions=tuple(api.split_list(precisions, "--precision")),
        backends=tuple(api.split_list(backends, "--backend")), no_compile=no_compile, input_size=input_size,
        prices=prices, prices_file=prices_file, kwh_price=kwh_price, currency=currency, headroom=headroom,
        max_cards=max_cards, from_history=from_history, db=db)
    path = output or str(api.default_output_path("select"))
    outcome = api.select(settings, path)
    for note in outcome.skipped:
        click.echo(f"note: {note}", err=True)
    click.echo(api.select_text(outcome.facts), nl=False)
    click.echo(f"\nsaved: {path}", err=True)


def register(group: click.Group) -> None:
    """Add ``select`` to the CLI group (``clsbench.cli``: ``select_cmds.register(main)``)."""
    group.add_command(select_command)
