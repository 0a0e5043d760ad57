"""The knee of a throughput curve, one rule for every reader (``sweep``'s analysis and the HTML report).

The knee is the smallest batch size whose throughput reaches ``fraction`` of the best throughput seen. The default,
90%, is the usual "diminishing returns" cut (the seed articles' "sweet spot"): beyond it, a larger batch buys at
most another 10% while costing memory and latency.
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_KNEE_FRACTION = 0.9

#: A throughput this close below ``fraction`` of the best (relative to the best) still reaches it: the cut is
#: computed in binary floating point, where 0.9 * 13.0 is 11.700000000000001, so 11.7 img/s, exactly 90% of 13 img/s,
#: would otherwise miss it. Far below any difference a measurement can show.
CUT_TOLERANCE = 1e-9


def knee(points: Iterable[tuple[int, float]], fraction: float = DEFAULT_KNEE_FRACTION) -> tuple[int, float] | None:
    """The smallest batch size whose throughput reaches ``fraction`` of the best, as (batch size, img/s).

    Args:
        points: (batch size, img/s) pairs, in any order.
        fraction: the share of the best throughput that counts as "reached".

    Returns:
        None when there are no points.

    Raises:
        ValueError: for a fraction outside (0, 1] (above 1 no point could reach it; at or below 0 every point would).
    """
    if not 0.0 < fraction <= 1.0:  # also refuses NaN
        raise ValueError(f"knee fraction must lie in (0, 1], got {fraction}")
    pairs = list(points)
    if not pairs:
        return None
    best = max(v for _, v in pairs)
    cut = (fraction - CUT_TOLERANCE) * best
    return min(((b, v) for b, v in pairs if v >= cut), key=lambda p: p[0])
