"""One view per procedure: everything a procedure adds to the outputs of a result file, registered once
(:data:`PROCEDURES`).

A procedure (sweep, tune, diagnose, scale, serve, soak, ...) stores its own facts under ``settings[key]`` of an
ordinary result file. Its :class:`ProcedureView` says which key that is and how each output reads the file alone:
the section ``show`` prints after the run table, the section of the HTML report, the flat rows of ``show --format
csv|markdown`` when the procedure has rows of its own, and how ``compare`` compares such files. ``show``, the HTML
report (:mod:`clsbench.report.html`) and the flat exports (:mod:`clsbench.report.export`) loop over this registry
and name no procedure: adding a procedure is adding its folder with one ``PROCEDURES.register(...)``.

The registry lives in the report layer, below the procedures, so that reports can read it; the procedures register
into it when imported, and the registry imports every module of :mod:`clsbench.procedures` the first time it is
asked (``package=``, :class:`~clsbench.core.registry.Registry`), so a report never misses a view however it was
started.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clsbench.core.registry import Registry
from clsbench.errors import InvalidInputError
from clsbench.results.schema import BenchmarkResult

if TYPE_CHECKING:
    from clsbench.report.html_parts import Figures, ReportRun


@dataclass(frozen=True)
class ProcedureComparison:
    """What ``compare`` prints for results that a procedure compares its own way, in each of its formats.

    Attributes:
        text: the ``table`` format, for people.
        data: everything, JSON-ready (the ``json`` format).
        rows: flat rows, one per compared figure and run after the first (``csv`` and ``markdown``).
        slowdowns: ``(description, slowdown in percent)`` of every significant slowdown against the first run,
            which ``--fail-if-slower`` holds to its threshold.
    """

    text: str
    data: dict[str, Any]
    rows: list[dict[str, Any]]
    slowdowns: list[tuple[str, float]] = field(default_factory=list)


#: ``compare(results, names, alpha)``: the first result is the baseline.
Comparer = Callable[[Sequence[BenchmarkResult], Sequence[str], float], ProcedureComparison]

#: ``body(runs, figures)``: the HTML inside the procedure's report section for the runs that hold its facts (in the
#: report's order), or None when none of them has anything to show; figures are drawn with ``figures``.
HtmlBody = Callable[[Sequence["ReportRun"], "Figures"], str | None]

#: ``rows(result, result_file)``: the procedure's own flat rows of one file; ``result_file`` is the name it was read
#: from, for the rows' ``result_file`` column.
RowsOf = Callable[[BenchmarkResult, str], list[dict[str, Any]]]


@dataclass(frozen=True)
class HtmlSection:
    """A procedure's section of the HTML report.

    Attributes:
        anchor: the section's ``id`` (the contents link to it).
        title: its heading and its entry in the contents.
        order: where it stands among the procedures' sections, lowest first (they follow the batch sweeps).
        body: see :data:`HtmlBody`. Returned text is inserted as HTML: it must escape what it takes from a file
            (:func:`clsbench.report.html_parts.render_fragment` does).
    """

    anchor: str
    title: str
    order: int
    body: HtmlBody


@dataclass(frozen=True)
class ProcedureView:
    """How every output reads one procedure's result.

    Attributes:
        key: the key of ``settings`` the procedure stores its facts under.
        text: the section ``show`` prints after the run table (derived from the file alone: pure).
        compare: None: ``compare`` matches the measurements as for any run; else how ``compare`` compares files that
            all hold ``key`` (pure, from the files alone).
        html: the procedure's section of the HTML report; None: the report shows its measurements as any run's.
        rows: None: the flat formats write one row per measurement; else the procedure's own flat rows, used when
            every exported file holds ``key`` (a serve result's LoadGen runs, whose measurements are answers
            searched over them).
        first_columns: the columns ``rows`` puts first; the rest follow in the order the rows first hold them.
        holds: whether a file holds the procedure's facts; None: ``key`` is in its settings.
        throughput_bars: False when the measurements are not medians over repeats (serve's scenario answers), so
            that the report's throughput bars leave them out (the procedure's own section shows them).
        knee_fraction: the knee rule the file was measured with (``sweep --knee``), which the report's batch-sweep
            curves mark; None: the default rule.
        measures: False for a procedure that measures nothing itself (``select`` reads other results): ``show``
            then prints no run header (machine, device, torch: not this file's) and no empty run table before it.
    """

    key: str
    text: Callable[[BenchmarkResult], str]
    compare: Comparer | None = None
    html: HtmlSection | None = None
    rows: RowsOf | None = None
    first_columns: tuple[str, ...] = ()
    holds: Callable[[BenchmarkResult], bool] | None = None
    throughput_bars: bool = True
    knee_fraction: Callable[[BenchmarkResult], float | None] | None = None
    measures: bool = True

    def matches(self, result: BenchmarkResult) -> bool:
        """Whether ``result`` holds this procedure's facts."""
        return self.holds(result) if self.holds is not None else self.key in result.settings


PROCEDURES: Registry[ProcedureView] = Registry("procedure", package="clsbench.procedures")


def views_of(result: BenchmarkResult) -> list[ProcedureView]:
    """The views of every procedure whose facts ``result`` holds, in registration order."""
    return [view for _, view in PROCEDURES.items() if view.matches(result)]


def sections(result: BenchmarkResult) -> str:
    """The ``show`` sections of every procedure whose facts ``result`` holds, each after a blank line."""
    return "".join("\n" + view.text(result) for view in views_of(result))


def html_views() -> list[ProcedureView]:
    """The views of every procedure that has a report section, in the sections' order."""
    views = [view for _, view in PROCEDURES.items() if view.html is not None]
    return sorted(views, key=lambda view: view.html.order if view.html is not None else 0)


def in_throughput_bars(result: BenchmarkResult) -> bool:
    """Whether the report's throughput bars show ``result``'s measurements (see ``ProcedureView.throughput_bars``)."""
    return all(view.throughput_bars for view in views_of(result))


def knee_fraction(result: BenchmarkResult) -> float | None:
    """The knee rule ``result`` was measured with, if a procedure of it says so; None: the default rule."""
    for view in views_of(result):
        if view.knee_fraction is not None:
            fraction = view.knee_fraction(result)
            if fraction is not None:
                return fraction
    return None


def rows_view(results: Sequence[BenchmarkResult]) -> ProcedureView | None:
    """The procedure whose own flat rows ``results`` are exported as (every result holds its facts), or None."""
    if not results:
        return None
    for _, view in PROCEDURES.items():
        if view.rows is not None and all(view.matches(result) for result in results):
            return view
    return None


def comparer(results: Sequence[BenchmarkResult]) -> Comparer | None:
    """The ``compare`` hook of the procedure that compares ``results`` its own way (every result holds its key), or
    None for the generic comparison.

    Raises:
        InvalidInputError: only some of the results hold such a procedure's key (a serve result against a run).
    """
    for name, view in PROCEDURES.items():
        if view.compare is None:
            continue
        holding = [view.matches(result) for result in results]
        if all(holding):
            return view.compare
        if any(holding):
            raise InvalidInputError(f"only some of these files are {name} results; a {name} result compares only with "
                                    f"another {name} result", f"compare {name} files with {name} files")
    return None
