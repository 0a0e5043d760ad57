"""``clsbench data make`` and ``clsbench data check``: parse, call :func:`clsbench.api.make_dataset` or
:func:`clsbench.api.check_dataset`, print.

``make`` exits 2 on a bad option and 3 when DIR is not empty (a dataset is never overwritten). ``check`` exits 2
when nothing usable is left (or DIR is missing), 0 otherwise; what it leaves out is listed on stderr.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from clsbench.cli.app import handle_errors


def _human_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


class _MakeProgress:
    """A live bar on a terminal; otherwise a line at every tenth of the images."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.live = sys.stderr.isatty() and not quiet
        self._bar: Any = None
        self._task: Any = None
        self._next_tenth = 1
        self._t0 = time.perf_counter()

    def __call__(self, done: int, total: int) -> None:
        if self.quiet:
            return
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            if self._bar is None:
                self._bar = Progress(TextColumn("generating"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), transient=True)
                self._bar.start()
                self._task = self._bar.add_task("images", total=total)
            self._bar.update(self._task, completed=done)
            return
        tenths = min(10, done * 10 // total) if total else 0
        if tenths >= self._next_tenth:  # one line per tenth crossed, however many a chunk crosses at once
            click.echo(f"[{'#' * tenths}{'.' * (10 - tenths)}] {done:,}/{total:,} images, "
                       f"{time.perf_counter() - self._t0:.1f} s", err=True)
            self._next_tenth = tenths + 1

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


@click.group("data")
def data_group() -> None:
    """Real datasets for `run --data` and `diagnose`: generate one, check one."""


@data_group.command("make")
@click.argument("directory")
@click.option("--images", type=int, required=True, help="How many JPEG files to write.")
@click.option("--classes", type=int, required=True, help="How many class folders (images go round-robin).")
@click.option("--seed", type=int, default=0, show_default=True, help="The same seed gives the same bytes.")
@click.option("--size", default="500x375", show_default=True,
              help="Output size WIDTHxHEIGHT (ImageNet-like; a quarter are portrait, all scaled by 0.85-1.15).")
@click.option("--quality", type=int, default=90, show_default=True, help="JPEG quality (each image +-5).")
@click.option("--jobs", type=int, help="Processes (default: the CPU count).")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@handle_errors
def make_command(directory: str, images: int, classes: int, seed: int, size: str, quality: int, jobs: int | None,
                 quiet: bool) -> None:
    """Generate a realistic JPEG dataset in DIRECTORY (ImageFolder layout), from images installed packages ship."""
    from clsbench import api

    width, height = api.parse_size(size)
    spec = api.MakeSpec(images=images, classes=classes, seed=seed, width=width, height=height,
                        quality=quality).validate()
    progress = _MakeProgress(quiet)
    try:
        result = api.make_dataset(directory, spec, jobs=jobs, progress=progress)
    finally:
        progress.close()
    rate = result.images / result.seconds if result.seconds > 0 else 0.0
    click.echo(f"wrote {result.images:,} images in {result.classes:,} classes to {result.directory}: "
               f"{_human_bytes(result.bytes)} ({_human_bytes(result.mean_bytes)} per image on average) in "
               f"{result.seconds:.1f} s ({rate:,.0f} images/s, {result.jobs} process(es))")


@data_group.command("check")
@click.argument("directory")
@click.option("--decode", is_flag=True,
              help="Also decode every image (on the CPU, in threads) to find damage the quick check cannot see.")
@click.option("--threads", type=int, default=8, show_default=True, help="Threads for --decode.")
@handle_errors
def check_command(directory: str, decode: bool, threads: int) -> None:
    """Count the usable images of DIRECTORY and name every file left out, with the reason."""
    from collections import Counter

    from clsbench import api

    check = api.check_dataset(directory, decode=decode, threads=threads)
    index = check.index
    kinds = Counter(index.kinds)
    click.echo(f"{index.root}: {len(index):,} usable images in {len(index.classes):,} classes, "
               f"{_human_bytes(index.total_bytes)} (JPEG {kinds.get('jpeg', 0):,}, PNG {kinds.get('png', 0):,}); "
               f"fingerprint {index.fingerprint}; scanned in {check.scan_s:.2f} s")
    for skipped in index.skipped:
        click.echo(f"warning: skipped {skipped.path}: {skipped.reason}", err=True)
    for name in index.empty_classes:
        click.echo(f"warning: class folder {name} has no usable image; left out", err=True)
    if check.decode_failures is not None:
        failed = check.decode_failures
        for line in failed:
            click.echo(f"warning: does not decode: {line}", err=True)
        click.echo(f"decoded {len(index) - len(failed):,} of {len(index):,} images in "
                   f"{check.decode_s:.1f} s; {len(failed)} failed (a pipeline replaces each by another "
                   "image and names it in the result)")


def register(group: click.Group) -> None:
    """Add ``data make`` and ``data check`` to the CLI group (cli.py: ``data_cmds.register(main)``)."""
    group.add_command(data_group)
