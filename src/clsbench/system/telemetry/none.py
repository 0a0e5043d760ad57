"""The source used where there is no telemetry (CPU, no NVML, a GPU NVML cannot map): it says why."""

from __future__ import annotations

from clsbench.results.telemetry import make_record
from clsbench.system.telemetry.base import DEFAULT_INTERVAL_S, SOURCES

__all__ = ["NoneSource"]


class NoneSource:
    """Records nothing; its record carries ``unavailable`` = the reason and empty samples.

    Args:
        reason: why there is no telemetry, in words, e.g. ``"device is cpu"``.
        interval_s: the interval that was asked for, recorded as-is.
    """

    name = "none"

    def __init__(self, reason: str, *, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.reason = reason
        self.interval_s = interval_s

    def start(self) -> None:
        """Does nothing."""

    def stop(self) -> dict:
        """Returns a record with no samples and the reason in ``unavailable``."""
        return make_record(self.name, self.interval_s, unavailable=self.reason)

    def recent(self) -> dict:
        """Nothing was sampled: an empty dict."""
        return {}

    def __repr__(self) -> str:
        return f"NoneSource({self.reason!r})"


SOURCES.register("none", lambda cuda_index, interval_s: NoneSource("telemetry source none", interval_s=interval_s))
