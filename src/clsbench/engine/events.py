"""What the engine tells a progress display while it runs (one event type for every procedure)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProgressEvent:
    """What the runner tells a progress display."""

    kind: str  # "start", "repeat", "window" (a soak's), "measurement", "finish"
    done: int  # repeats finished
    total: int  # repeats planned (skipped cells count as done at once)
    cell: Any = None  # the Cell (or scale cell) being measured
    repeat: int = 0
    repeats: int = 0
    eta_s: float | None = None
    measurement: Any = None  # the finished Measurement
    window: dict[str, Any] | None = None  # a soak's finished window (clsbench.workloads.base.WindowLog.close)


ProgressCallback = Callable[[ProgressEvent], None]
