"""Clocks. Workloads read time only through a :class:`Clock`, so tests can inject a :class:`FakeClock`.

Wall time is ``time.perf_counter_ns``: monotonic, the highest resolution Python offers, unaffected by NTP.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000


class Clock(Protocol):
    """A monotonic clock in integer nanoseconds."""

    def now_ns(self) -> int: ...


class WallClock:
    """The real clock (``time.perf_counter_ns``)."""

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    def __repr__(self) -> str:
        return "WallClock()"


@dataclass
class FakeClock:
    """A clock that advances by scripted increments, one per reading, cycling; it never sleeps.

    With ``increments_ns=(1_000_000,)`` every reading is 1 ms after the previous one, so a request timed by two
    readings takes exactly 1 ms. Picklable, so it travels to worker processes inside a job.
    """

    increments_ns: tuple[int, ...] = (NS_PER_MS,)
    start_ns: int = 0
    _now: int = field(default=-1, repr=False)
    _calls: int = field(default=0, repr=False)

    def now_ns(self) -> int:
        if self._now < 0:
            self._now = self.start_ns
        self._now += self.increments_ns[self._calls % len(self.increments_ns)]
        self._calls += 1
        return self._now


def make_clock(spec: str | None) -> Clock:
    """Build a clock from a test specification: None or "wall" for the real clock, "fake:1ms,3ms" for a fake."""
    if not spec or spec == "wall":
        return WallClock()
    kind, _, rest = spec.partition(":")
    if kind != "fake" or not rest:
        raise ValueError(f"unknown clock specification {spec!r}")
    units = {"ns": 1, "us": 1_000, "ms": NS_PER_MS, "s": NS_PER_S}
    increments = []
    for part in rest.split(","):
        part = part.strip()
        for suffix in ("ns", "us", "ms", "s"):
            if part.endswith(suffix):
                increments.append(int(float(part[: -len(suffix)]) * units[suffix]))
                break
        else:
            raise ValueError(f"fake clock increment needs a unit (ns, us, ms, s): {part!r}")
    return FakeClock(increments_ns=tuple(increments))
