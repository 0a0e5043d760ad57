"""``clsbench compare A B [C ...]``: matched measurements, speed-ups, significance, and a regression gate.

Exit codes: those of :mod:`clsbench.errors`, plus :data:`EXIT_REGRESSION` (5) when ``--fail-if-slower`` finds a
significant slowdown beyond its threshold.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from clsbench.cli.common import emit, handle_errors, load_result
from clsbench.errors import EXIT_REGRESSION, InvalidInputError

if TYPE_CHECKING:
    from clsbench.procedures.base import ProcedureComparison


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


def _gate_procedure(comparison: ProcedureComparison, threshold: float | None, alpha: float) -> None:
    """``--fail-if-slower`` for a procedure's own comparison: exit 5 on a significant slowdown beyond ``threshold``."""
    if threshold is None:
        return
    found = [(text, pct) for text, pct in comparison.slowdowns if pct > threshold]
    if not found:
        click.echo(f"regression gate: no significant slowdown beyond {threshold:g}% (alpha {alpha:g}; only answers "
                   "repeated on both sides can be significant)", err=True)
        return
    click.echo(f"regression gate: {len(found)} significant slowdown(s) beyond {threshold:g}%:", err=True)
    for text, _ in found:
        click.echo(f"  SLOWER {text}", err=True)
    sys.exit(EXIT_REGRESSION)


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
                  help="Exit 5 when a run is significantly slower than the first by more than this, e.g. 5%.")
    @click.option("--alpha", type=float, default=0.05, show_default=True,
                  help="Significance level of Welch's t-test on the per-repeat figures.")
    @click.option("--db", metavar="PATH",
                  help="The run index for run ids (default: $CLSBENCH_DB, else the user's data directory).")
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
        is faster, slower or not significant. Runs measured under different stop-rule protocols (run --protocol)
        are refused unless --allow-protocol-mix is given. Serve results are compared by each scenario's answer
        (server QPS, offline samples/s, ...) and p99, tested where both runs repeated their answer (serve --confirm
        N); otherwise significance is not assessed.
        """
        from clsbench.analysis.compare import check_protocols, lost_measurements, regressions
        from clsbench.analysis.compare import compare as build_comparison
        from clsbench.procedures.base import comparer
        from clsbench.report import export

        if len(runs) < 2:
            raise InvalidInputError("compare needs at least two runs", "e.g. clsbench compare baseline.json new.json")
        if not 0.0 < alpha < 1.0:
            raise InvalidInputError(f"--alpha {alpha:g} must lie between 0 and 1", "e.g. --alpha 0.05")
        threshold = parse_percent(fail_if_slower) if fail_if_slower is not None else None
        if output != "-":
            export.check_output(output, force=force)
        results = [load_result(ref, db) for ref in runs]
        own_way = comparer(results)
        if own_way is not None:  # a procedure that compares its own way (serve: each scenario's answer)
            for line in check_protocols(results, list(runs), allow_mix=allow_protocol_mix):
                click.echo(f"warning: {line}", err=True)
            own = own_way(results, list(runs), alpha)
            emit(export.export_own_comparison(own.text, own.data, own.rows, fmt), output, force=force)
            _gate_procedure(own, threshold, alpha)
            return
        comparison = build_comparison(results, list(runs), alpha=alpha, allow_protocol_mix=allow_protocol_mix)
        emit(export.export_comparison(comparison, fmt), output, force=force)
        if threshold is None:
            return
        for line in lost_measurements(comparison):
            click.echo(f"note: {line} (not counted by --fail-if-slower)", err=True)
        found = regressions(comparison, threshold)
        if not found:
            click.echo(f"regression gate: no significant slowdown beyond {threshold:g}% "
                       f"({comparison.test}, alpha {alpha:g})", err=True)
            return
        click.echo(f"regression gate: {len(found)} significant slowdown(s) beyond {threshold:g}%:", err=True)
        for regression in found:
            click.echo(f"  SLOWER {regression.describe()}", err=True)
        sys.exit(EXIT_REGRESSION)
