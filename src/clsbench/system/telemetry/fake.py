"""A scripted source for tests on machines without a GPU: ``stop()`` returns the samples it was given."""

from __future__ import annotations

import copy
from typing import Any

from clsbench.results.telemetry import OPTIONAL_SERIES, SERIES, make_record
from clsbench.system.telemetry.base import DEFAULT_INTERVAL_S

__all__ = ["FakeSource"]


class FakeSource:
    """Returns a scripted record, so workloads, summaries and reports can be tested on a CPU.

    Args:
        samples: series by name (see ``results.telemetry.SERIES``). A series left out is filled with ``None`` (one
            per sample); when ``t_s`` is left out it becomes ``0, interval_s, 2 * interval_s, ...``. An optional
            series (``OPTIONAL_SERIES``, e.g. ``fan_pct``) is in the record only when given.
        energy_counter_j: what the NVML energy counter would have said (``None``: no counter).
        interval_s: the sampling interval recorded in the record.
        unavailable: a reason, to script a source that found no telemetry.

    Attributes:
        starts, stops: how often ``start()`` and ``stop()`` were called (tests check the pairing).
    """

    name = "fake"

    def __init__(
        self,
        samples: dict[str, list[Any]] | None = None,
        *,
        energy_counter_j: float | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        unavailable: str | None = None,
    ) -> None:
        given = copy.deepcopy(samples or {})
        unknown = sorted(set(given) - set(SERIES) - set(OPTIONAL_SERIES))
        if unknown:
            raise ValueError(f"unknown telemetry series {unknown}; known: {list(SERIES + OPTIONAL_SERIES)}")
        lengths = {len(values) for values in given.values()}
        if len(lengths) > 1:
            raise ValueError(f"telemetry series differ in length: { {k: len(v) for k, v in given.items()} }")
        count = lengths.pop() if lengths else 0
        if "t_s" not in given:
            given["t_s"] = [i * interval_s for i in range(count)]
        self._samples = {key: given.get(key, [None] * count) for key in SERIES}
        self._samples.update({key: given[key] for key in OPTIONAL_SERIES if key in given})
        self._handed_out = False
        self.energy_counter_j = energy_counter_j
        self.interval_s = interval_s
        self.unavailable = unavailable
        self.starts = 0
        self.stops = 0

    def start(self) -> None:
        """Counts the call; nothing to sample."""
        self.starts += 1
        self._handed_out = False

    def recent(self) -> dict:
        """Every scripted sample on the first call after ``start()``, nothing after that."""
        if self._handed_out or not self.starts:
            return {}
        self._handed_out = True
        return copy.deepcopy(self._samples)

    def stop(self) -> dict:
        """Returns a fresh copy of the scripted record (callers may modify it)."""
        self.stops += 1
        return make_record(
            self.name,
            self.interval_s,
            unavailable=self.unavailable,
            energy_counter_j=self.energy_counter_j,
            samples=copy.deepcopy(self._samples),
        )
