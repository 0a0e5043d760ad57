"""The one repeat loop every procedure drives: repeats per measurement in round or cell order, skips, an ETA, a
save after every repeat, and Ctrl-C that keeps what finished.

``run`` (and through it ``sweep``, ``tune`` and ``diagnose``) measures each repeat in a fresh worker process;
``scale`` in a fresh launch of several processes. Both go through :func:`measure_all` and supply only what differs:
how one repeat runs, why a measurement is skipped without running, how its repeat records become a
:class:`~clsbench.results.schema.Measurement`, and what a result needs after each one (scale's efficiencies).

Order (:func:`schedule`): ``round`` runs repeat 1 of every cell, then repeat 2, and so on, each round in its own
order shuffled from the run's seed, so that a slow minute of a shared host lands on different cells instead of on
every repeat of one; ``cell`` runs all repeats of a cell before the next. Each record says where it ran
(``sequence``: its place in the run, counted on across a resume; ``round``). The repeats a measurement has finished
are saved at once as pending (:class:`~clsbench.results.schema.PendingRepeats`) and become its measurement when its
last repeat ends, so an interruption loses at most the repeat in flight.

A repeat whose record is not ``ok`` ends its measurement (oom, nan_loss, a failed rank... repeat the same way);
the repeats it leaves out count as done for the ETA and the progress bar.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from clsbench.core.plan import ORDERS
from clsbench.core.vocab import Status
from clsbench.engine.events import ProgressCallback, ProgressEvent
from clsbench.errors import ClsbenchError
from clsbench.results.schema import BenchmarkResult, Measurement


@dataclass
class Procedure:
    """What a procedure supplies to :func:`measure_all`.

    Attributes:
        run_repeat: ``(cell, repeat) -> record``: run one repeat; never raises for a failed measurement.
        build: ``(cell, records) -> Measurement`` from the repeat records (ok, failed or one skipped record).
        skip: ``cell -> record | None``: a skipped record when the cell cannot run at all (no repeat is started).
        finalize: the result after each added measurement (e.g. figures that compare measurements).
        interrupted: ``result -> error`` raised on Ctrl-C, after everything finished is saved.
    """

    run_repeat: Callable[[Any, int], dict[str, Any]]
    build: Callable[[Any, list[dict[str, Any]]], Measurement]
    interrupted: Callable[[BenchmarkResult], ClsbenchError]
    skip: Callable[[Any], dict[str, Any] | None] = lambda cell: None
    finalize: Callable[[BenchmarkResult], BenchmarkResult] = lambda result: result
    close: Callable[[], None] = lambda: None


@dataclass
class _Progress:
    """Counts for the progress display: repeats done of the total, and the mean duration of the ones that ran."""

    total: int
    notify: ProgressCallback
    done: int = 0
    measured: int = 0
    spent_s: float = field(default=0.0)

    def eta(self) -> float | None:
        return self.spent_s / self.measured * (self.total - self.done) if self.measured else None


def shuffled_round(cells: Sequence[Any], seed: int, round_index: int) -> list[Any]:
    """``cells`` in the order of round ``round_index`` (0-based): sorted by a hash of the seed, the round and each
    cell's key, so the order is fixed by the seed and does not depend on which other cells are present (a resumed run
    keeps the order the interrupted one had)."""
    def rank(cell: Any) -> str:
        text = json.dumps([seed, round_index, list(cell.key)], default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    return sorted(cells, key=rank)


def schedule(cells: Sequence[Any], repeats: int, *, order: str = "cell", seed: int = 0,
             done: dict[tuple[Any, ...], int] | None = None) -> list[tuple[Any, int]]:
    """The (cell, repeat) pairs in the order they run, repeats 0-based, leaving out those ``done`` already holds
    (cell key -> repeats finished). A cell whose repeat fails drops out of the rest at run time."""
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; use one of {', '.join(ORDERS)}")
    done = done or {}
    if order == "cell":
        return [(cell, r) for cell in cells for r in range(done.get(cell.key, 0), repeats)]
    return [(cell, r) for r in range(repeats) for cell in shuffled_round(cells, seed, r)
            if r >= done.get(cell.key, 0)]


def measure_all(cells: Sequence[Any], repeats: int, result: BenchmarkResult, procedure: Procedure, *,
                save: Callable[[BenchmarkResult], None], progress: ProgressCallback | None = None,
                order: str = "cell", seed: int = 0,
                placement: Sequence[tuple[Any, ...]] | None = None) -> BenchmarkResult:
    """Measure every cell (``repeats`` times each) in ``order``, saving ``result`` after every repeat.

    Args:
        cells: what to measure, in plan order (cells already measured in ``result`` must have been left out by the
            caller); the measurements join ``result`` in this order, whatever the order they ran in.
        repeats: repeats per cell.
        result: the result so far; its pending repeats of ``cells`` count as done (a resume goes on from them).
        procedure: how repeats run and become measurements.
        save: called with the result after every repeat (writes the file; a no-op in memory).
        progress: called with a :class:`ProgressEvent` at the start, before each repeat, after each measurement
            and at the end.
        order: ``round`` or ``cell`` (:func:`schedule`).
        seed: the run's seed, which shuffles each round.
        placement: the keys of the whole plan in order, where ``cells`` are only its unfinished part (a resume):
            the file's measurements are kept in this order; others in ``result`` stay first.

    Raises:
        ClsbenchError: ``procedure.interrupted(result)`` on Ctrl-C, once what finished is saved.
    """
    records = {cell.key: result.pending_repeats(cell.key) for cell in cells}
    finished: set[tuple[Any, ...]] = set()  # cells whose measurement is built (skipped, failed or all repeats run)
    plan_order = {key: index for index, key in enumerate(placement or [cell.key for cell in cells])}
    state = _State(result, procedure, save, plan_order, repeats,
                   _Progress(total=len(cells) * repeats, notify=progress or (lambda event: None)),
                   sequence=_last_sequence(result))
    state.counts.done = sum(len(r) for r in records.values())
    state.counts.notify(ProgressEvent("start", state.counts.done, state.counts.total))
    try:
        for cell in cells:
            skipped = procedure.skip(cell)
            if skipped is not None:  # known before any process starts: no worker needed to say so
                state.counts.done += repeats - len(records[cell.key])
                finished.add(cell.key)
                state.finish(cell, [skipped])
        runnable = [cell for cell in cells if cell.key not in finished]
        done = {cell.key: len(records[cell.key]) for cell in runnable}
        for cell, repeat in schedule(runnable, repeats, order=order, seed=seed, done=done):
            if cell.key in finished:
                continue  # an earlier repeat of this cell failed: its measurement is built
            records[cell.key].append(state.run(cell, repeat))
            if state.ended(cell, records[cell.key]):
                finished.add(cell.key)
    except KeyboardInterrupt:
        procedure.close()
        raise procedure.interrupted(state.result) from None
    finally:
        procedure.close()
    state.counts.notify(ProgressEvent("finish", state.counts.done, state.counts.total))
    return state.result


def _last_sequence(result: BenchmarkResult) -> int:
    """The highest ``sequence`` of any record in ``result`` (-1 when none): a resume counts on from it."""
    numbers = [r.get("sequence") for m in result.measurements for r in m.repeats]
    numbers += [r.get("sequence") for p in result.pending for r in p.repeats]
    return max((n for n in numbers if isinstance(n, int) and not isinstance(n, bool)), default=-1)


@dataclass
class _State:
    """The result as it grows, and what :func:`measure_all` does after each repeat and each finished cell."""

    result: BenchmarkResult
    procedure: Procedure
    save: Callable[[BenchmarkResult], None]
    plan_order: dict[tuple[Any, ...], int]
    repeats: int
    counts: _Progress
    sequence: int

    def run(self, cell: Any, repeat: int) -> dict[str, Any]:
        """Run one repeat (0-based); its record says where in the run it ran."""
        counts = self.counts
        counts.notify(ProgressEvent("repeat", counts.done, counts.total, cell, repeat + 1, self.repeats,
                                    counts.eta()))
        t0 = time.monotonic()
        record = self.procedure.run_repeat(cell, repeat)
        counts.spent_s += time.monotonic() - t0
        counts.measured += 1
        counts.done += 1
        if record["status"] != Status.OK:
            counts.done += self.repeats - 1 - repeat  # the repeats it leaves out count as done
        self.sequence += 1
        return {**record, "sequence": self.sequence, "round": repeat + 1}

    def ended(self, cell: Any, records: list[dict[str, Any]]) -> bool:
        """After a repeat: build the measurement when it failed or was the last (True), else save it as pending."""
        if records[-1]["status"] != Status.OK or len(records) >= self.repeats:
            self.finish(cell, records)
            return True
        self.result = self.result.with_pending(cell.key, records)
        self.save(self.result)
        return False

    def finish(self, cell: Any, records: list[dict[str, Any]]) -> None:
        """Build the cell's measurement, put it in plan order among the others, save and tell the display."""
        measurement = self.procedure.build(cell, records)
        result = self.result.with_measurement(measurement)
        # Measurements outside the plan (an earlier batch of a sweep) keep their places, first.
        ordered = sorted(result.measurements, key=lambda m: self.plan_order.get(m.key, -1))
        self.result = self.procedure.finalize(dataclasses.replace(result, measurements=tuple(ordered)))
        self.save(self.result)
        self.counts.notify(ProgressEvent("measurement", self.counts.done, self.counts.total, cell,
                                         measurement=measurement))
