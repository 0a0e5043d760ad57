"""The telemetry interface: what every source (NVML, fake, none) provides.

A telemetry source samples the GPU's power, utilisation, clocks, temperature and clock-event reasons over the
timed region of one measurement: the workload calls ``start()`` right before the region and ``stop()`` right
after it (not around warm-up or compilation). ``stop()`` returns the raw record whose layout
:mod:`clsbench.results.telemetry` defines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from clsbench.core.registry import Registry

__all__ = ["DEFAULT_INTERVAL_S", "SOURCES", "TelemetrySource"]

DEFAULT_INTERVAL_S = 0.05
"""Sampling interval of the NVML source: 20 Hz, twice the 10 Hz the issue asks for as a minimum."""


@runtime_checkable
class TelemetrySource(Protocol):
    """Samples one GPU between ``start()`` and ``stop()``.

    Attributes:
        name: ``"nvml"``, ``"fake"`` or ``"none"``; also written to ``record["source"]``.
    """

    name: str

    def start(self) -> None:
        """Begins sampling (in a background thread for NVML). Cheap, and never raises."""
        ...

    def stop(self) -> dict:
        """Stops sampling, waits for the sampler, and returns the raw record. Never raises."""
        ...

    def recent(self) -> dict:
        """The samples taken since the previous call (or since ``start()``), as a ``samples`` dict (possibly
        empty): a soak's per-window progress figures. Never raises; ``stop()`` still returns every sample."""
        ...


#: The telemetry sources for a GPU, by name: each builds a source for a CUDA index (``factory(cuda_index,
#: interval_s)``); each module of this folder registers its own. ``nvml`` is the one :func:`make_source` uses.
SOURCES: Registry[Callable[[int, float], TelemetrySource]] = Registry(
    "telemetry source", package="clsbench.system.telemetry")
