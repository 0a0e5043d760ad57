"""One result file that grows a step at a time: the engine of procedures that decide what to measure next from
what they have measured (``sweep``, ``tune``, ``diagnose``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from clsbench.core.options import Execution
from clsbench.core.plan import Cell, RunPlan, StopRule
from clsbench.engine.runner import RunInterrupted, new_result, run_plan
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult, Measurement


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

    @classmethod
    def reopen(cls, result: BenchmarkResult, path: Path, *, key: str,
               execution: Execution = Execution()) -> IncrementalRun:
        """Go on with a result file an earlier step sequence left (``tune --resume``): its stored plan is the base
        and its cells are the cells asked for so far; its facts under ``key`` are taken as they are."""
        run = cls.__new__(cls)
        plan = RunPlan.from_dict(result.settings)
        run.base = plan
        run.path = path
        run.key = key
        run.facts = dict(result.settings.get(key) or {})
        run.execution = execution
        run.cells = list(plan.cells)
        run.result = result
        return run

    @property
    def plan(self) -> RunPlan:
        return dataclasses.replace(self.base, cells=tuple(self.cells))

    def save(self) -> None:
        """Store the current plan and facts in the result, and write it (atomically) if there is a file."""
        settings = {**self.plan.to_dict(), self.key: self.facts}
        self.result = dataclasses.replace(self.result, settings=settings)
        if self.path is not None:
            result_io.save(self.result, self.path)

    def measure(self, cells: Sequence[Cell], *, repeats: int | None = None,
                stop_rules: Mapping[str, StopRule] | None = None) -> list[Measurement]:
        """Measure the cells the result lacks (each repeat in its own worker); return the measurement of each.

        Args:
            repeats, stop_rules: for this step only, instead of the plan's (a procedure that measures some cells
                more briefly than others, such as tune's screening rung); the stored plan keeps its own, and each
                measurement records the rule it ran under (``validity.stop_rule``). With either given, only
                ``cells`` are measured, not other cells of the plan that the result lacks.
        """
        for cell in cells:
            if cell not in self.cells:
                self.cells.append(cell)
        self.save()
        plan = self.plan
        if repeats is not None or stop_rules is not None:
            plan = dataclasses.replace(plan, cells=tuple(cells), repeats=repeats or plan.repeats,
                                       stop_rules={**plan.stop_rules, **(stop_rules or {})})
        try:
            self.result = run_plan(plan, self.result, self.path, execution=self.execution)
        except RunInterrupted as exc:
            if exc.result is not None:
                self.result = exc.result  # what finished before Ctrl-C, as saved
            raise
        found = [self.result.find(cell.key) for cell in cells]
        return [m for m in found if m is not None]

    def retire(self, cell: Cell) -> Measurement | None:
        """Take ``cell``'s measurement out of the result (so that it can be measured anew); return it. The caller
        keeps it (tune stores it whole in its facts): nothing measured is dropped."""
        old = self.result.find(cell.key)
        if old is not None:
            kept = tuple(m for m in self.result.measurements if m.key != cell.key)
            self.result = dataclasses.replace(self.result, measurements=kept)
        return old

    def continue_measurement(self, cell: Cell) -> None:
        """Turn ``cell``'s finished measurement back into pending repeats, so that a step with more repeats (and the
        same stop rule) continues it: its repeats stay the first ones, nothing is measured twice."""
        old = self.retire(cell)
        if old is not None:
            self.result = self.result.with_pending(cell.key, list(old.repeats))
