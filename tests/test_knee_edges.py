"""The edges of the knee rule (analysis/knee.py) that mutation testing found unpinned: a point exactly at the
fraction, curves that are not monotonic, points in any order, and fractions the rule cannot mean."""

from __future__ import annotations

import math

import pytest

from clsbench.analysis.knee import DEFAULT_KNEE_FRACTION, knee


def test_the_default_fraction_is_ninety_percent() -> None:
    points = [(1, 89.0), (2, 90.0), (4, 100.0)]
    assert DEFAULT_KNEE_FRACTION == 0.9
    assert knee(points) == (2, 90.0)


@pytest.mark.parametrize(("low", "best"), [(90.0, 100.0), (11.7, 13.0), (6.93, 7.7)])
def test_a_point_exactly_at_the_fraction_reaches_it(low: float, best: float) -> None:
    # 0.9 * 13.0 is 11.700000000000001 in binary floating point; 11.7 img/s is still exactly 90% of 13.
    assert knee([(8, best), (1, low)]) == (1, low)


def test_a_point_just_below_the_fraction_does_not() -> None:
    assert knee([(1, 89.999), (2, 100.0)]) == (2, 100.0)


def test_a_curve_that_dips_after_the_knee_keeps_the_smallest_batch_that_reached_it() -> None:
    points = [(1, 50.0), (2, 95.0), (4, 80.0), (8, 100.0), (16, 70.0)]
    assert knee(points) == (2, 95.0)


def test_a_curve_that_peaks_in_the_middle_measures_every_point_against_that_peak() -> None:
    points = [(16, 40.0), (4, 100.0), (1, 30.0), (2, 91.0), (8, 60.0)]
    assert knee(points) == (2, 91.0)
    assert knee(points, 1.0) == (4, 100.0)


def test_points_in_any_order_and_no_points() -> None:
    assert knee(reversed([(1, 10.0), (2, 95.0), (4, 100.0)])) == (2, 95.0)
    assert knee([]) is None
    assert knee([(32, 5.0)], 0.5) == (32, 5.0)


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.01, math.nan])
def test_a_fraction_outside_zero_to_one_is_refused(fraction: float) -> None:
    with pytest.raises(ValueError, match=r"knee fraction must lie in \(0, 1\], got"):
        knee([(1, 10.0), (2, 20.0)], fraction)


def test_a_curve_that_falls_from_its_first_point_has_its_knee_there() -> None:
    # Larger batches slower (a CPU thrashing its caches): the smallest batch is the knee, not the slowest that reaches.
    assert knee([(1, 100.0), (2, 95.0), (4, 91.0)]) == (1, 100.0)


def test_a_flat_curve_at_zero_has_its_knee_at_the_smallest_batch() -> None:
    assert knee([(2, 0.0), (1, 0.0)]) == (1, 0.0)
