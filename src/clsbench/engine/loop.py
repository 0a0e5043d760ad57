"""The one repeat loop every procedure drives: repeats per measurement, skips, an ETA, a save after every
measurement, and Ctrl-C that keeps what finished.

``run`` (and through it ``sweep``, ``tune`` and ``diagnose``) measures each repeat in a fresh worker process;
``scale`` in a fresh launch of several processes. Both go through :func:`measure_all` and supply only what differs:
how one repeat runs, why a measurement is skipped without running, how its repeat records become a
:class:`~clsbench.results.schema.Measurement`, and what a result needs after each one (scale's efficiencies).

A repeat whose record is not ``ok`` ends its measurement (oom, nan_loss, a failed rank... repeat the same way);
the repeats it leaves out count as done for the ETA and the progress bar.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

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


def measure_all(cells: Sequence[Any], repeats: int, result: BenchmarkResult, procedure: Procedure, *,
                save: Callable[[BenchmarkResult], None], progress: ProgressCallback | None = None) -> BenchmarkResult:
    """Measure every cell (``repeats`` times each), adding each measurement to ``result`` and saving at once.

    Args:
        cells: what to measure, in order (cells already in ``result`` must have been left out by the caller).
        repeats: repeats per cell.
        result: the result so far.
        procedure: how repeats run and become measurements.
        save: called with the result after every measurement (writes the file; a no-op in memory).
        progress: called with a :class:`ProgressEvent` at the start, before each repeat, after each measurement
            and at the end.

    Raises:
        ClsbenchError: ``procedure.interrupted(result)`` on Ctrl-C, once what finished is saved.
    """
    counts = _Progress(total=len(cells) * repeats, notify=progress or (lambda event: None))
    counts.notify(ProgressEvent("start", 0, counts.total))
    try:
        for cell in cells:
            records = _repeats(cell, repeats, procedure, counts)
            measurement = procedure.build(cell, records)
            result = procedure.finalize(result.with_measurement(measurement))
            save(result)
            counts.notify(ProgressEvent("measurement", counts.done, counts.total, cell, measurement=measurement))
    except KeyboardInterrupt:
        procedure.close()
        raise procedure.interrupted(result) from None
    finally:
        procedure.close()
    counts.notify(ProgressEvent("finish", counts.done, counts.total))
    return result


def _repeats(cell: Any, repeats: int, procedure: Procedure, counts: _Progress) -> list[dict[str, Any]]:
    """The records of one cell: one skipped record, or repeats until the first that is not ok."""
    skipped = procedure.skip(cell)
    if skipped is not None:  # known before any process starts: no worker needed to say so
        counts.done += repeats
        return [skipped]
    records: list[dict[str, Any]] = []
    for repeat in range(repeats):
        counts.notify(ProgressEvent("repeat", counts.done, counts.total, cell, repeat + 1, repeats, counts.eta()))
        t0 = time.monotonic()
        record = procedure.run_repeat(cell, repeat)
        counts.spent_s += time.monotonic() - t0
        counts.measured += 1
        counts.done += 1
        records.append(record)
        if record["status"] != Status.OK:
            counts.done += repeats - 1 - repeat
            break
    return records
