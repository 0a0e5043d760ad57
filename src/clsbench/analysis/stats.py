"""Statistics over raw samples: pure functions, no torch, no numpy.

Percentile method: **nearest rank** (the method MLPerf LoadGen uses). For a percentile ``p`` in (0, 100] of ``n``
sorted samples ``x[0] <= ... <= x[n-1]``, the result is ``x[ceil(p / 100 * n) - 1]``: the smallest sample such
that at least ``p`` percent of all samples are less than or equal to it. ``p = 0`` gives the minimum. The result
is always a value that was actually observed, never an interpolation between two samples, so "p99 = 5.1 ms"
means a real request took 5.1 ms and 99% of requests took no longer.

A percentile is reported only where each repeat holds enough samples for it (:data:`MIN_SAMPLES`: 100 for p99,
1,000 for p99.9); otherwise the summary says None and, under ``withheld``, why.

Spread over repeats is ``(max - min) / median`` of the per-repeat figures, in percent; a figure whose spread is
above :data:`UNSTABLE_SPREAD_PCT` is flagged UNSTABLE.

Drift within one repeat (:func:`segment_drift_pct`) is ``(max - min)`` of the medians of consecutive time segments
of one repeat's samples, over the median of all its samples, in percent: it tells a speed that changed *while* a
process ran from one that was steady in each process but differed between processes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Spread over repeats above which a figure is marked UNSTABLE (the product brief: "a loud flag when spread > 10%").
UNSTABLE_SPREAD_PCT = 10.0

#: Consecutive segments a repeat's samples are cut into for :func:`segment_drift_pct`, and the fewest samples a
#: segment may hold (fewer segments are used for a short repeat).
DRIFT_SEGMENTS = 10
DRIFT_MIN_PER_SEGMENT = 5

#: Percentiles reported for every latency distribution, keyed by the name used in result files.
REPORTED_PERCENTILES: dict[str, float] = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}

#: Samples each repeat needs before a percentile is reported: a p-th percentile means something only when at least
#: one sample lies above it, i.e. n >= 1 / (1 - p/100): 10 for p90, 100 for p99, 1,000 for p99.9 (MLPerf's
#: SingleStream minimum of 1,024 queries is set by the same reasoning for its p90 with a margin). With fewer, the
#: nearest-rank p99 of 5 samples is their maximum, and p90 = p99 = p99.9: reported as None, with the reason.
MIN_SAMPLES: dict[str, int] = {"p50": 1, "p90": 10, "p99": 100, "p999": 1000}


def percentile(samples: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of ``samples`` (see the module docstring).

    Raises:
        ValueError: for an empty sequence or ``p`` outside [0, 100].
    """
    if not samples:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile must lie in [0, 100], got {p}")
    ordered = sorted(samples)
    if p == 0.0:
        return ordered[0]
    # round() guards against float noise: 99.9 / 100 * 1000 is 999.0000000000001, whose ceiling would be 1000.
    rank = math.ceil(round(p / 100.0 * len(ordered), 9))
    return ordered[max(rank, 1) - 1]


def median(values: Sequence[float]) -> float:
    """Ordinary median (mean of the two middle values for an even count); used across repeats, not samples."""
    if not values:
        raise ValueError("median of an empty sequence")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2.0


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of an empty sequence")
    return math.fsum(values) / len(values)


def stdev(values: Sequence[float]) -> float:
    """Sample standard deviation (n - 1 in the denominator); 0.0 for a single value."""
    if len(values) < 2:
        return 0.0
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))


def spread_pct(values: Sequence[float]) -> float | None:
    """``(max - min) / median`` in percent; None when fewer than two values (a single repeat has no spread)."""
    if len(values) < 2:
        return None
    mid = median(values)
    if mid == 0:
        return None
    return (max(values) - min(values)) / abs(mid) * 100.0


def segment_medians(samples: Sequence[float], segments: int = DRIFT_SEGMENTS,
                    min_per_segment: int = DRIFT_MIN_PER_SEGMENT) -> list[float]:
    """Medians of consecutive, nearly equal chunks of the time-ordered ``samples``, in time order.

    The chunk count is ``k = min(segments, len(samples) // min_per_segment)``; chunk ``i`` holds
    ``samples[i * n // k : (i + 1) * n // k]``, so chunk sizes differ by at most one and none is below
    ``min_per_segment``. Returns an empty list when fewer than two chunks are possible.

    Raises:
        ValueError: for ``segments < 2`` or ``min_per_segment < 1``.
    """
    if segments < 2:
        raise ValueError(f"segments must be at least 2, got {segments}")
    if min_per_segment < 1:
        raise ValueError(f"min_per_segment must be at least 1, got {min_per_segment}")
    n = len(samples)
    k = min(segments, n // min_per_segment)
    if k < 2:
        return []
    return [median(samples[i * n // k:(i + 1) * n // k]) for i in range(k)]


def segment_drift_pct(samples: Sequence[float], segments: int = DRIFT_SEGMENTS,
                      min_per_segment: int = DRIFT_MIN_PER_SEGMENT) -> float | None:
    """How far the typical sample moved *during* one repeat, in percent: ``(max - min)`` of the medians of its
    consecutive time segments (:func:`segment_medians`) over the median of all its samples.

    What it means: a large value says the speed changed while the process ran (on the H200, segment medians of
    2.9 ms and 5.9 ms per request inside one 5 s repeat), so the cause varies with time (a shared or throttled host
    CPU, other work, clocks) and is not something fixed when the process started. What it does not mean: it is not
    per-sample jitter or tail latency (a segment's median ignores its outliers), not a trend (the segments' order
    is not used), and not proof of a cause: it only says when, not why. Segments of few samples read a few percent
    from plain noise. None when fewer than two segments are possible or the median is 0.
    """
    medians = segment_medians(samples, segments, min_per_segment)
    if not medians:
        return None
    mid = median(samples)
    if mid == 0:
        return None
    return (max(medians) - min(medians)) / abs(mid) * 100.0


@dataclass(frozen=True)
class Distribution:
    """Summary of one sample set; every field in the samples' own unit."""

    n: int
    mean: float
    std: float
    min: float
    p50: float
    p90: float
    p99: float
    p999: float
    max: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "n": self.n,
            "mean": self.mean,
            "std": self.std,
            "min": self.min,
            "p50": self.p50,
            "p90": self.p90,
            "p99": self.p99,
            "p999": self.p999,
            "max": self.max,
        }


def describe(samples: Sequence[float]) -> Distribution:
    """n, mean, sample std, min, nearest-rank p50/p90/p99/p99.9 and max of ``samples``."""
    if not samples:
        raise ValueError("cannot describe an empty sample set")
    pcts = {key: percentile(samples, p) for key, p in REPORTED_PERCENTILES.items()}
    return Distribution(
        n=len(samples),
        mean=mean(samples),
        std=stdev(samples),
        min=min(samples),
        max=max(samples),
        **pcts,
    )


def combine_repeats(distributions: Sequence[Distribution]) -> dict[str, float | int]:
    """Combine per-repeat distributions: each statistic is the median over repeats; ``n`` is the total count.

    Taking the median of each per-repeat statistic (rather than pooling every sample) keeps one disturbed repeat
    from dragging the figure, which is the point of repeating in fresh processes.
    """
    if not distributions:
        raise ValueError("no repeats to combine")
    out: dict[str, Any] = {"n": sum(d.n for d in distributions)}
    fewest = min(d.n for d in distributions)
    withheld: dict[str, str] = {}
    for key in ("mean", "std", "min", "p50", "p90", "p99", "p999", "max"):
        if fewest < MIN_SAMPLES.get(key, 1):
            out[key] = None
            withheld[key] = f"needs >= {MIN_SAMPLES[key]} samples in each repeat; the fewest were {fewest}"
        else:
            out[key] = median([getattr(d, key) for d in distributions])
    if withheld:
        out["withheld"] = withheld
    return out


def tail_latency(latency: dict[str, Any]) -> tuple[float | None, str]:
    """The tail of a latency summary: its p99 where enough samples support one, else its maximum; with the name."""
    p99 = latency.get("p99")
    if isinstance(p99, (int, float)) and not isinstance(p99, bool):
        return float(p99), "p99"
    top = latency.get("max")
    return (float(top), "max") if isinstance(top, (int, float)) and not isinstance(top, bool) else (None, "p99")
