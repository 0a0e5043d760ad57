"""``clsbench report FILE... -o report.html``: the self-contained HTML report, from result files alone."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from clsbench.errors import ResultFileError
from clsbench.results.io import check_writable, write_text_atomic


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`clsbench.cli.app.handle_errors`, looked up at call time.

    cli.py imports this module to register the command; importing cli here at module level would be circular
    whenever this module is imported first (``cli`` would then ask this half-loaded module for ``register``).
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from clsbench.cli.app import handle_errors as cli_handle_errors

        return cli_handle_errors(func)(*args, **kwargs)

    return wrapper


def _check_output(path: Path, *, force: bool) -> None:
    """Fail before any work if ``path`` is a directory, exists (without ``--force``) or cannot be written."""
    if path.is_dir():
        raise ResultFileError(f"{path} is a directory", "give a file name such as report.html")
    check_writable(path, overwrite=force, exists_hint="choose another -o, or pass --force to replace it")


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB" if n >= 1024 * 1024 else f"{n / 1024:.0f} KiB"


@click.command()
@click.argument("files", nargs=-1, required=True)
@click.option("-o", "--output", required=True, help="The HTML file to write (not overwritten without --force).")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
@handle_errors
def report(files: tuple[str, ...], output: str, force: bool) -> None:
    """Write one self-contained HTML report of FILE(S): tables, plots, warnings, environments (opens offline)."""
    from clsbench.report.html import render_report
    from clsbench.results.io import load

    path = Path(output)
    _check_output(path, force=force)
    results = [load(name) for name in files]
    size = write_text_atomic(path, render_report(results, list(files)))
    click.echo(f"wrote {path} ({size:,} bytes, {_size(size)})")


def register(group: click.Group) -> None:
    """Add ``report`` to the command group (the CLI's ``main``)."""
    group.add_command(report)
