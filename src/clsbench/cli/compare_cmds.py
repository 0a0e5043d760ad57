"""``clsbench compare A B [C ...]``: matched measurements, speed-ups, significance, and a regression gate.

Exit codes: those of :mod:`clsbench.errors`, plus, with ``--fail-if-slower``, :data:`EXIT_REGRESSION` (5) for a
significant slowdown beyond its threshold, else :data:`EXIT_INCONCLUSIVE` (6) when a figure is too noisy (or has too
few repeats) to tell a slowdown of that size from none.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from clsbench.cli.common import emit, handle_errors
from clsbench.errors import EXIT_INCONCLUSIVE, EXIT_REGRESSION, InvalidInputError

if TYPE_CHECKING:
    from clsbench.api import CompareOutcome


def parse_percent(text: str) -> float:
    """``"5"``, ``"5%"`` or ``"2.5 %"`` -> 5.0 / 2.5; a negative or non-numeric value is bad input."""
    raw = text.strip().removesuffix("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise InvalidInputError(f"--fail-if-slower {text!r} is not a percentage", "e.g. --fail-if-slower 5%") \
            from None
    if not value >= 0 or value == float("inf"):
        raise InvalidInputError(f"--fail-if-slower {text!r} must be a percentage >= 0", "e.g. --fail-if-slower 5%")
    return value


def print_gate(outcome: CompareOutcome, threshold: float) -> int:
    """Print the regression gate's findings on stderr and return its exit code: 5 for a significant slowdown beyond
    ``threshold``, else 6 when a figure is inconclusive, else 0."""
    for line in outcome.notes:
        click.echo(f"note: {line} (not counted by --fail-if-slower)", err=True)
    if outcome.slowdowns:
        click.echo(f"regression gate: {len(outcome.slowdowns)} significant slowdown(s) beyond {threshold:g}%:",
                   err=True)
        for text in outcome.slowdowns:
            click.echo(f"  SLOWER {text}", err=True)
    if outcome.undecided:
        click.echo(f"regression gate: inconclusive for {len(outcome.undecided)} figure(s): too noisy or too few "
                   f"repeats to tell a {threshold:g}% slowdown from none ({outcome.gate_basis}):", err=True)
        for first, *rest in outcome.undecided:
            click.echo(f"  INCONCLUSIVE {first}", err=True)
            for line in rest:
                click.echo(f"    {line}", err=True)
    if outcome.slowdowns:
        return EXIT_REGRESSION
    if outcome.undecided:
        return EXIT_INCONCLUSIVE
    passed = outcome.passed or f"no significant slowdown beyond {threshold:g}%"
    click.echo(f"regression gate: passed: {passed} ({outcome.gate_basis})", err=True)
    return 0


def register(group: click.Group) -> None:
    """Add ``compare`` to ``group``."""

    @group.command()
    @click.argument("runs", nargs=-1, required=True)
    @click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "markdown"]), default="table",
                  show_default=True, help="table: text for people; json: everything; csv: one row per cell and run.")
    @click.option("--output", "-o", default="-", show_default=True,
                  help="Write here instead of stdout ('-'); an existing file is not overwritten without --force.")
    @click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
    @click.option("--fail-if-slower", "fail_if_slower",
                  help="Exit 5 when a run is significantly slower than the first by more than this, e.g. 5%; "
                       "else exit 6 when a figure is too noisy to tell a slowdown of this size from none.")
    @click.option("--alpha", type=float, default=0.05, show_default=True,
                  help="Significance level of Welch's t-test on the per-repeat figures.")
    @click.option("--db", metavar="PATH|URL",
                  help="The store for run ids: a path, sqlite:///PATH or postgresql://USER@HOST/DB (default: "
                       "$CLSBENCH_DB, else the user's data directory).")
    @click.option("--allow-protocol-mix", is_flag=True,
                  help="Compare runs measured under different stop-rule protocols (run --protocol) anyway, with a "
                       "warning; without it, such runs are refused.")
    @handle_errors
    def compare(runs: tuple[str, ...], fmt: str, output: str, force: bool, fail_if_slower: str | None,
                alpha: float, db: str | None, allow_protocol_mix: bool) -> None:
        """Compare runs A B [C ...] (result files or run ids) against the first.

        Measurements are matched by model, workload, mode, batch size, backend, input size, data pipeline and
        world size (not device: comparing GPUs is the point); cells that differ in input size, data pipeline or
        world size are separate rows, and a warning says which differed. Each ratio is a speed-up against A (> 1
        is faster; latency inverted), with Welch's two-sided t-test on the per-repeat figures deciding whether it
        is faster or slower; if not significant, "no change > X%" when the repeats could have detected a change of X
        (the --fail-if-slower threshold, else the smallest change they could detect, at 80% power) and
        "inconclusive" when the noise is too large to tell. Runs measured under different stop-rule protocols
        (run --protocol) are refused unless --allow-protocol-mix is given. Serve results are compared by each
        scenario's answer (server QPS, offline samples/s, ...) and p99, tested where both runs repeated their answer
        (serve --confirm N); otherwise significance is not assessed.
        """
        from clsbench import api

        api.check_compare(runs, alpha)
        threshold = parse_percent(fail_if_slower) if fail_if_slower is not None else None
        if output != "-":
            api.check_output(output, force=force)
        outcome = api.compare(runs, fmt=fmt, alpha=alpha, threshold_pct=threshold,
                              allow_protocol_mix=allow_protocol_mix, db=db)
        for line in outcome.warnings:
            click.echo(f"warning: {line}", err=True)
        emit(outcome.text, output, force=force)
        if threshold is None:
            return
        code = print_gate(outcome, threshold)
        if code:
            sys.exit(code)
