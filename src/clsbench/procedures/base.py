"""What a procedure adds to a result file and to ``show``: one registry (:data:`PROCEDURES`), one entry per
procedure module.

A procedure (sweep, tune, diagnose, scale, ...) stores its own facts under ``settings[key]`` of an ordinary result
file; :class:`ProcedureView` says which key that is and how to print the procedure's section from the file alone.
``show`` prints the run table, then the section of every procedure whose key the file holds; adding a procedure
is adding its module here with one ``PROCEDURES.register(...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clsbench.core.registry import Registry
from clsbench.results.schema import BenchmarkResult


@dataclass(frozen=True)
class ProcedureView:
    """How ``show`` reads one procedure's result.

    Attributes:
        key: the key of ``settings`` the procedure stores its facts under.
        section: the text ``show`` prints after the run table (derived from the file alone: pure).
    """

    key: str
    section: Callable[[BenchmarkResult], str]


PROCEDURES: Registry[ProcedureView] = Registry("procedure", package="clsbench.procedures")


def sections(result: BenchmarkResult) -> str:
    """The sections of every procedure whose facts ``result`` holds, each after a blank line."""
    return "".join("\n" + view.section(result) for _, view in PROCEDURES.items() if view.key in result.settings)
