"""What a procedure registers: its view (:class:`ProcedureView`) in :data:`PROCEDURES`, one entry per procedure.

The view and the registry live in :mod:`clsbench.report.views`, below the procedures, so that the report and the
exports can loop over every procedure without importing one; this module names them where a procedure registers,
and where ``show`` and ``compare`` read them (:func:`sections`, :func:`comparer`).
"""

from __future__ import annotations

from clsbench.report.views import (
    PROCEDURES,
    Comparer,
    HtmlSection,
    ProcedureComparison,
    ProcedureView,
    comparer,
    sections,
)

__all__ = ["PROCEDURES", "Comparer", "HtmlSection", "ProcedureComparison", "ProcedureView", "comparer", "sections"]
