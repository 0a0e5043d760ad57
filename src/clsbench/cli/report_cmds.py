"""``clsbench report FILE... -o report.html``: the self-contained HTML report, from result files alone."""

from __future__ import annotations

from pathlib import Path

import click

from clsbench.cli.common import handle_errors


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB" if n >= 1024 * 1024 else f"{n / 1024:.0f} KiB"


@click.command()
@click.argument("files", nargs=-1, required=True)
@click.option("-o", "--output", required=True, help="The HTML file to write (not overwritten without --force).")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
@click.option("--db", metavar="PATH|URL",
              help="The store for run ids: a path, sqlite:///PATH or postgresql://USER@HOST/DB (default: "
                   "$CLSBENCH_DB, else the user's data directory).")
@handle_errors
def report(files: tuple[str, ...], output: str, force: bool, db: str | None) -> None:
    """Write one self-contained HTML report of FILE(S) (result files or run ids from `clsbench history`): tables,
    plots, warnings, environments (opens offline)."""
    from clsbench import api

    size = api.report(files, output, force=force, db=db)
    click.echo(f"wrote {Path(output)} ({size:,} bytes, {_size(size)})")


def register(group: click.Group) -> None:
    """Add ``report`` to the command group (the CLI's ``main``)."""
    group.add_command(report)
