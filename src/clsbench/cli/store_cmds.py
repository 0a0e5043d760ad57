"""``clsbench import``, ``clsbench history`` and ``clsbench store push|pull|migrate``: the results store (a SQLite
file, or a PostgreSQL database a team shares; see :mod:`clsbench.results.store` and docs/store.md).

Parse, call one :mod:`clsbench.api` function, print. The history table fits in :data:`TABLE_WIDTH` columns: the
measurement description, its last column, is cut at its end when needed, never the figures.

History columns: run id; the day the run started (UTC); the host that ran it; the GPU's name, or ``cpu`` and the
CPU model; torch; the named suite; counts of ok, failed and unstable measurements; the headline figure (p50
latency for infer-latency, qps for serve's server scenario, img/s otherwise, median over repeats) of the first ok
measurement, and which measurement that is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from clsbench import api
from clsbench.cli.common import handle_errors
from clsbench.core.text_table import cut, fmt_ms, fmt_rate, text_table
from clsbench.errors import InvalidInputError, ResultFileError

TABLE_WIDTH = 120
#: The GPU/device column is cut to this width; GPU names are short, CPU model strings can run to 50 characters.
DEVICE_WIDTH = 22
#: The host column is cut to this width (a store shared by many machines names each run's host).
HOST_WIDTH = 10
#: The measurement description is never cut below this width, even if the line then runs past TABLE_WIDTH.
MIN_DESCRIPTION_WIDTH = 16
HISTORY_HEADER = ("run id", "date", "host", "device", "torch", "suite", "ok/fail/unst", "figure",
                  "first ok measurement")
RIGHT_ALIGNED = {"ok/fail/unst", "figure"}

_DB_HELP = (f"The store: a file path, sqlite:///PATH or postgresql://USER@HOST/DB (default: ${api.DB_ENV_VAR}, "
            "else the user's data directory). Keep passwords out of it: PGPASSWORD or ~/.pgpass.")


def register(group: click.Group) -> None:
    """Add ``import``, ``history`` and the ``store`` group to ``group`` (the lead wires this into cli.main)."""
    group.add_command(import_command)
    group.add_command(history_command)
    group.add_command(store_group)


@click.command("import")
@click.argument("files", nargs=-1, required=True)
@click.option("--db", metavar="PATH|URL", help=_DB_HELP)
@handle_errors
def import_command(files: tuple[str, ...], db: str | None) -> None:
    """Index result FILE(S) (or every *.json in a directory) so `history` lists them; importing again updates."""
    _print_outcomes(api.import_results(files, db=db), db)


def _print_outcomes(outcomes: Sequence[Any], db: str | None) -> None:
    """One line per file, a count, and exit 3 when a file failed (the others are in the store)."""
    for o in outcomes:
        if o.ok:
            click.echo(f"{o.status:<8}  {o.run_id}  {o.path}  ({o.message})")
        else:
            click.echo(f"{'failed':<8}  {'-':<{api.RUN_ID_LENGTH}}  {o.path}: {o.message}")
    counts = {status: sum(o.status == status for o in outcomes) for status in (api.IMPORTED, api.UPDATED)}
    failed = sum(not o.ok for o in outcomes)
    click.echo(f"{len(outcomes)} file(s): {counts[api.IMPORTED]} imported, {counts[api.UPDATED]} updated, "
               f"{failed} failed; index: {api.history_index_path(db)}")
    if failed:
        raise ResultFileError(f"{failed} of {len(outcomes)} file(s) could not be imported (listed above)",
                              "fix or remove them and import them again; the other files are indexed")


@click.command("history")
@click.option("--model", metavar="PATTERN", help="Only runs that measured a matching model (wildcards: 'resnet*').")
@click.option("--gpu", metavar="PATTERN",
              help="Only runs on matching hardware: 'h200' (anywhere in the name), '*A100*', 'cpu'.")
@click.option("--since", metavar="WHEN",
              help="Only runs started since: a date or time (UTC), or '7d', '12h', '30m' ago.")
@click.option("--commit", metavar="HEX", help="Only runs of a clsbench git commit starting with these digits.")
@click.option("--limit", type=int, metavar="N", default=api.DEFAULT_HISTORY_LIMIT, show_default=True,
              help="Show at most this many runs, newest first.")
@click.option("--db", metavar="PATH|URL", help=_DB_HELP)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="json: every column of the index, the full headline measurement and the run's models.")
@handle_errors
def history_command(model: str | None, gpu: str | None, since: str | None, commit: str | None, limit: int,
                    db: str | None, fmt: str) -> None:
    """List the runs of every host that wrote to the store, newest first, with their key figures (add runs with
    `clsbench import`)."""
    if limit < 1:
        raise InvalidInputError(f"--limit must be at least 1, not {limit}", "e.g. --limit 20")
    # One more than shown, to tell whether there are more.
    runs = api.history(db=db, model=model, gpu=gpu, since=since, commit=commit, limit=limit + 1)
    more, runs = len(runs) > limit, runs[:limit]
    if fmt == "json":
        click.echo(json.dumps(runs, indent=1))
        return
    index = api.history_index_path(db)
    if not runs:
        what = "match the filters" if model or gpu or since or commit else "indexed"
        click.echo(f"no runs {what} (index: {index}); add result files with `clsbench import FILE...`", err=True)
        return
    for line in render_history(runs):
        click.echo(line)
    shown = f"the newest {len(runs)} run(s) shown; --limit N for more" if more else f"{len(runs)} run(s)"
    click.echo(f"{shown}; index: {index}", err=True)


def render_history(runs: Sequence[dict[str, Any]], width: int = TABLE_WIDTH) -> list[str]:
    """The history table as lines, from :func:`clsbench.api.history`'s dicts. The description is the last
    column: when a line is too long, it is cut at its end."""
    right = {i for i, name in enumerate(HISTORY_HEADER) if name in RIGHT_ALIGNED}
    return text_table(HISTORY_HEADER, [_history_row(run) for run in runs], right=right, width=width,
                      min_last=MIN_DESCRIPTION_WIDTH)


def _history_row(run: dict[str, Any]) -> tuple[str, ...]:
    # The day only (UTC): the full time is in --format json, and the id tells runs of one day apart.
    date = (run.get("created_utc") or "-")[:10]
    if run.get("gpu_name"):
        hardware = run["gpu_name"]
    else:
        hardware = " ".join(str(part) for part in (run.get("device"), run.get("cpu_model")) if part) or "-"
    head = run.get("headline")
    if head is None:
        description, figure = "-", "-"
    else:
        backend = head.get("backend") or "eager"
        description = f"{head['model']} {head['workload']} {head['mode']} bs{head['batch_size']}" + (
            "" if backend == "eager" else f" @{backend}")
        figure = _figure(head)
    return (
        run["run_id"],
        date,
        cut(run.get("hostname") or "-", HOST_WIDTH),
        cut(hardware, DEVICE_WIDTH),
        run.get("torch") or "-",
        run.get("suite") or "-",
        f"{run.get('ok', 0)}/{run.get('failed', 0)}/{run.get('unstable', 0)}",
        figure,
        description,
    )


def _figure(head: dict[str, Any]) -> str:
    """The headline figure: p50 latency for infer-latency (the figure that workload exists for) and for a measurement
    without a rate (serve's single-stream and multi-stream), queries per second for serve's server scenario (the
    highest target whose LoadGen run was VALID), else img/s."""
    p50 = head.get("latency_p50_ms")
    rate = head.get("throughput_img_s")
    if (head.get("workload") == "infer-latency" or rate is None) and p50 is not None:
        return f"p50 {fmt_ms(p50)} ms"
    if rate is None:
        return "-"
    return f"{fmt_rate(rate)} {'qps' if head.get('workload') in api.QPS_WORKLOADS else 'img/s'}"





@click.group("store")
def store_group() -> None:
    """Move result files into and out of the store, or copy a whole history to another store (docs/store.md)."""


@store_group.command("push")
@click.argument("files", nargs=-1, required=True)
@click.option("--db", metavar="PATH|URL", help=_DB_HELP)
@handle_errors
def push_command(files: tuple[str, ...], db: str | None) -> None:
    """Put result FILE(S) (or every *.json in a directory) into the store, whole, so any machine can pull them."""
    _print_outcomes(api.store_push(files, db=db), db)


@store_group.command("pull")
@click.argument("run_id")
@click.option("-o", "--output", required=True, metavar="FILE", help="The result file to write (never overwritten).")
@click.option("--db", metavar="PATH|URL", help=_DB_HELP)
@handle_errors
def pull_command(run_id: str, output: str, db: str | None) -> None:
    """Write the run RUN_ID (or an id prefix, from `clsbench history`) from the store to a new result file."""
    found, path = api.store_pull(run_id, output, db=db)
    click.echo(f"pulled {found} -> {path} (from {api.history_index_path(db)})")


@store_group.command("migrate")
@click.option("--from", "source", required=True, metavar="PATH|URL", help="The store to copy from.")
@click.option("--to", "destination", required=True, metavar="PATH|URL", help="The store to copy into.")
@handle_errors
def migrate_command(source: str, destination: str) -> None:
    """Copy every run of one store into another (runs already there are replaced), checked by a checksum."""
    outcome = api.store_migrate(source, destination)
    click.echo(f"copied {outcome.runs} run(s), {outcome.measurements} measurement(s), {outcome.documents} result "
               f"document(s) from {outcome.source} to {outcome.destination}")
    click.echo(f"checksum sha256:{outcome.checksum} (source and copy agree)")
