"""Host CPU readings judged: what in one repeat's reading (:mod:`clsbench.system.hostcpu`) could have slowed a
CPU-bound (launch-bound) measurement."""

from __future__ import annotations

from typing import Any

#: Flag a repeat when the hypervisor took more than this share of the machine's CPU time.
STEAL_WARN_PCT = 2.0
#: Flag a repeat when other work kept more than this many cores busy besides this process.
OTHER_BUSY_WARN_CORES = 1.0


def concerns(reading: dict[str, Any] | None) -> list[str]:
    """What in one reading could have slowed a CPU-bound (launch-bound) measurement, in words."""
    if not reading:
        return []
    out = []
    steal = reading.get("steal_pct")
    if steal is not None and steal > STEAL_WARN_PCT:
        out.append(f"hypervisor steal {steal:.1f}% of CPU time")
    other = reading.get("other_busy_cores")
    if other is not None and other > OTHER_BUSY_WARN_CORES:
        out.append(f"other work kept {other:.1f} cores busy")
    return out
