"""``clsbench select``: which card, how many, at what cost, answered from stored results (no GPU).

The package's modules import one way only: ``prices``, ``cards``, ``candidates`` <- ``kinds/`` (the requirement
kinds, one module each: ``throughput``, ``served``, ``training``; registry :data:`REQUIREMENTS`) <- ``settings``
(:class:`SelectSettings`) <- ``scaling`` <- ``analysis`` (the selection, pure) <- ``text`` (show, flat rows,
compare) <- ``view`` (the HTML report's section) <- ``run`` (:func:`select`: the result file). The procedure's view
is registered here.
"""

from __future__ import annotations

from clsbench.procedures.base import PROCEDURES, HtmlSection, ProcedureView
from clsbench.procedures.select.analysis import RequirementNotMetError, select_answer
from clsbench.procedures.select.kinds import REQUIREMENTS, RequirementKind
from clsbench.procedures.select.prices import Price
from clsbench.procedures.select.run import SelectOutcome, select
from clsbench.procedures.select.settings import SELECT_FORMAT, SelectSettings
from clsbench.procedures.select.text import FIRST_COLUMNS, KEY, compare_selections, facts_of, render_select, select_rows
from clsbench.procedures.select.view import select_section

__all__ = ["REQUIREMENTS", "SELECT_FORMAT", "Price", "RequirementKind", "RequirementNotMetError", "SelectOutcome",
           "SelectSettings", "render_select", "select", "select_answer"]

#: Where select's section stands in the HTML report: after the other procedures' sections.
SELECT_SECTION_ORDER = 40

PROCEDURES.register(KEY, ProcedureView(
    KEY, lambda result: render_select(facts_of(result)), compare=compare_selections,
    html=HtmlSection("select", "Card selection", SELECT_SECTION_ORDER, select_section), rows=select_rows,
    first_columns=FIRST_COLUMNS, measures=False))
