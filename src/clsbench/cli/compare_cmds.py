"""``clsbench compare A B [C ...]``: matched measurements, speed-ups, significance, and a regression gate.

Exit codes: those of :mod:`clsbench.errors`, plus :data:`EXIT_REGRESSION` (5) when ``--fail-if-slower`` finds a
significant slowdown beyond its threshold.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from clsbench.errors import EXIT_REGRESSION, InvalidInputError
from clsbench.results.schema import BenchmarkResult

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


def load_run(ref: str, db: str | None = None) -> BenchmarkResult:
    """A run by result-file path or by run id (``clsbench history``); an existing file wins over a run id."""
    from clsbench.results import io as result_io
    from clsbench.results.store import resolve_run

    return result_io.load(resolve_run(ref, db))


def _handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """``clsbench.cli.app.handle_errors``, looked up at call time: cli.py imports this module while it loads, so a
    module-level import of cli here would be circular."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from clsbench.cli.app import handle_errors

        return handle_errors(func)(*args, **kwargs)

    return wrapper


def _emit(text: str, output: str) -> None:
    """Print ``text``, or write it to ``output`` (never overwriting)."""
    from clsbench.report import export

    if output == "-":
        click.echo(text, nl=False)
    else:
        export.write_text(output, text)
        click.echo(f"saved: {output}", err=True)


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
                  help="Write here instead of stdout ('-'); an existing file is never overwritten.")
    @click.option("--fail-if-slower", "fail_if_slower",
                  help="Exit 5 when a run is significantly slower than the first by more than this, e.g. 5%.")
    @click.option("--alpha", type=float, default=0.05, show_default=True,
                  help="Significance level of Welch's t-test on the per-repeat figures.")
    @click.option("--db", metavar="PATH",
                  help="The run index for run ids (default: $CLSBENCH_DB, else the user's data directory).")
    @_handle_errors
    def compare(runs: tuple[str, ...], fmt: str, output: str, fail_if_slower: str | None, alpha: float,
                db: str | None) -> None:
        """Compare runs A B [C ...] (result files or run ids) against the first.

        Measurements are matched by model, workload, mode and batch size (not device: comparing GPUs is the
        point). Each ratio is a speed-up against A (> 1 is faster; latency inverted), with Welch's two-sided
        t-test on the per-repeat figures deciding whether it is faster, slower or not significant. Serve results
        are compared by each scenario's answer (server QPS, offline samples/s, ...) and p99, tested where both
        runs repeated their answer (serve --confirm N); otherwise significance is not assessed.
        """
        from clsbench.analysis.compare import compare as build_comparison
        from clsbench.analysis.compare import lost_measurements, regressions
        from clsbench.procedures.base import comparer
        from clsbench.report import export

        if len(runs) < 2:
            raise InvalidInputError("compare needs at least two runs", "e.g. clsbench compare baseline.json new.json")
        if not 0.0 < alpha < 1.0:
            raise InvalidInputError(f"--alpha {alpha:g} must lie between 0 and 1", "e.g. --alpha 0.05")
        threshold = parse_percent(fail_if_slower) if fail_if_slower is not None else None
        if output != "-":
            export.check_output(output)
        results = [load_run(ref, db) for ref in runs]
        own_way = comparer(results)
        if own_way is not None:  # a procedure that compares its own way (serve: each scenario's answer)
            own = own_way(results, list(runs), alpha)
            _emit(export.export_own_comparison(own.text, own.data, own.rows, fmt), output)
            _gate_procedure(own, threshold, alpha)
            return
        comparison = build_comparison(results, list(runs), alpha=alpha)
        _emit(export.export_comparison(comparison, fmt), output)
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
