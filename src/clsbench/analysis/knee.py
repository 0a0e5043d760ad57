"""The knee of a throughput curve, one rule for every reader (``sweep``'s analysis and the HTML report).

The knee is the smallest batch size whose throughput reaches ``fraction`` of the best throughput seen. The default,
90%, is the usual "diminishing returns" cut (the seed articles' "sweet spot"): beyond it, a larger batch buys at
most another 10% while costing memory and latency.
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_KNEE_FRACTION = 0.9


def knee(points: Iterable[tuple[int, float]], fraction: float = DEFAULT_KNEE_FRACTION) -> tuple[int, float] | None:
    """The smallest batch size whose throughput reaches ``fraction`` of the best, as (batch size, img/s).

    Args:
        points: (batch size, img/s) pairs, in any order.
        fraction: the share of the best throughput that counts as "reached".

    Returns:
        None when there are no points.
    """
    pairs = list(points)
    if not pairs:
        return None
    best = max(v for _, v in pairs)
    return min(((b, v) for b, v in pairs if v >= fraction * best), key=lambda p: p[0])
