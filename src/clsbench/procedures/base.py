"""What a procedure adds to a result file, to ``show`` and to ``compare``: one registry (:data:`PROCEDURES`), one
entry per procedure module.

A procedure (sweep, tune, diagnose, scale, serve, ...) stores its own facts under ``settings[key]`` of an ordinary
result file; :class:`ProcedureView` says which key that is and how to print the procedure's section from the file
alone. ``show`` prints the run table, then the section of every procedure whose key the file holds; adding a
procedure is adding its module here with one ``PROCEDURES.register(...)``. A procedure whose figures are not the
cells ``compare`` matches (serve: a scenario's answer, searched over LoadGen runs) also gives a ``compare`` hook,
and ``compare`` hands it the files when every one of them holds its key (:func:`comparer`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from clsbench.core.registry import Registry
from clsbench.errors import InvalidInputError
from clsbench.results.schema import BenchmarkResult


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


@dataclass(frozen=True)
class ProcedureView:
    """How ``show`` and ``compare`` read one procedure's result.

    Attributes:
        key: the key of ``settings`` the procedure stores its facts under.
        section: the text ``show`` prints after the run table (derived from the file alone: pure).
        compare: None: ``compare`` matches the measurements as for any run; else how ``compare`` compares files that
            all hold ``key`` (pure, from the files alone).
    """

    key: str
    section: Callable[[BenchmarkResult], str]
    compare: Comparer | None = None


PROCEDURES: Registry[ProcedureView] = Registry("procedure", package="clsbench.procedures")


def sections(result: BenchmarkResult) -> str:
    """The sections of every procedure whose facts ``result`` holds, each after a blank line."""
    return "".join("\n" + view.section(result) for _, view in PROCEDURES.items() if view.key in result.settings)


def comparer(results: Sequence[BenchmarkResult]) -> Comparer | None:
    """The ``compare`` hook of the procedure that compares ``results`` its own way (every result holds its key), or
    None for the generic comparison.

    Raises:
        InvalidInputError: only some of the results hold such a procedure's key (a serve result against a run).
    """
    for name, view in PROCEDURES.items():
        if view.compare is None:
            continue
        holding = [view.key in result.settings for result in results]
        if all(holding):
            return view.compare
        if any(holding):
            raise InvalidInputError(f"only some of these files are {name} results; a {name} result compares only with "
                                    f"another {name} result", f"compare {name} files with {name} files")
    return None
