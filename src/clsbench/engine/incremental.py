"""One result file that grows a step at a time: the engine of procedures that decide what to measure next from
what they have measured (``sweep``, ``tune``, ``diagnose``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clsbench.core.options import Execution
from clsbench.core.plan import Cell, RunPlan
from clsbench.engine.runner import new_result, run_plan
from clsbench.results import io as result_io
from clsbench.results.schema import Measurement


class IncrementalRun:
    """A result file measured in steps: each step measures new cells with the same plan settings.

    Before each step the stored ``settings`` become the plan of every cell asked for so far (plus ``facts`` under
    ``key``), and :func:`~clsbench.engine.runner.run_plan` saves after every measurement; so an interrupted step is
    finished by ``clsbench run --resume FILE``, and the file always reads as an ordinary run.

    Args:
        plan: the settings every step uses (its cells are ignored).
        path: the result file (None: keep in memory only). It must not exist yet; it is claimed at once.
        environment: the environment to record.
        key: where in ``settings`` the procedure's own facts go (``"sweep"``, ``"tune"``, ``"diagnose"``).
        facts: those facts; the caller may update the dict and call :meth:`save`.
        execution: isolation, clock and progress of every step.
    """

    def __init__(self, plan: RunPlan, path: Path | None, *, environment: dict[str, Any], key: str,
                 facts: dict[str, Any], execution: Execution = Execution()) -> None:
        self.base = plan
        self.path = path
        self.key = key
        self.facts = facts
        self.execution = execution
        self.cells: list[Cell] = []
        self.result = new_result(dataclasses.replace(plan, cells=()), environment)
        self.save()  # the path is claimed, and known to be writable, before anything is measured

    @property
    def plan(self) -> RunPlan:
        return dataclasses.replace(self.base, cells=tuple(self.cells))

    def save(self) -> None:
        """Store the current plan and facts in the result, and write it (atomically) if there is a file."""
        settings = {**self.plan.to_dict(), self.key: self.facts}
        self.result = dataclasses.replace(self.result, settings=settings)
        if self.path is not None:
            result_io.save(self.result, self.path)

    def measure(self, cells: Sequence[Cell]) -> list[Measurement]:
        """Measure the cells the result lacks (each repeat in its own worker); return the measurement of each."""
        for cell in cells:
            if cell not in self.cells:
                self.cells.append(cell)
        self.save()
        self.result = run_plan(self.plan, self.result, self.path, execution=self.execution)
        found = [self.result.find(cell.key) for cell in cells]
        return [m for m in found if m is not None]
