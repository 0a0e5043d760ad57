"""The edges of analysis/stats.py that mutation testing found unpinned (docs/development.md, "Mutation testing"):
the exact minimum sample counts, two values for a standard deviation, a rank within float noise of a boundary,
the smallest valid arguments, and the words of each refusal."""

from __future__ import annotations

import math

import pytest

from clsbench.analysis import stats


def _repeats(n: int, count: int = 2) -> list[stats.Distribution]:
    return [stats.describe([float(i) for i in range(1, n + 1)]) for _ in range(count)]


@pytest.mark.parametrize(("key", "fewest"), [("p90", 10), ("p99", 100), ("p999", 1000)])
def test_a_percentile_appears_at_exactly_its_minimum_count_and_not_one_sample_below(key: str, fewest: int) -> None:
    at = stats.combine_repeats(_repeats(fewest))
    assert at[key] == stats.percentile(range(1, fewest + 1), stats.REPORTED_PERCENTILES[key])
    assert key not in at.get("withheld", {})
    below = stats.combine_repeats(_repeats(fewest)[:1] + _repeats(fewest - 1)[:1])
    assert below[key] is None
    assert below["withheld"][key] == f"needs >= {fewest} samples in each repeat; the fewest were {fewest - 1}"


def test_one_sample_per_repeat_still_reports_mean_std_min_max_and_p50() -> None:
    out = stats.combine_repeats([stats.describe([2.0]), stats.describe([4.0]), stats.describe([9.0])])
    assert out == {"n": 3, "mean": 4.0, "std": 0.0, "min": 4.0, "p50": 4.0, "max": 4.0,
                   "p90": None, "p99": None, "p999": None,
                   "withheld": {k: f"needs >= {stats.MIN_SAMPLES[k]} samples in each repeat; the fewest were 1"
                                for k in ("p90", "p99", "p999")}}


def test_two_values_have_a_standard_deviation() -> None:
    assert stats.stdev([1.0, 3.0]) == pytest.approx(math.sqrt(2.0))
    assert stats.describe([1.0, 3.0]).std == pytest.approx(math.sqrt(2.0))


def test_a_rank_within_float_noise_of_a_boundary_is_that_rank_and_a_real_fraction_above_it_is_the_next() -> None:
    # 50.000000015% of 2 samples is rank 1.0000000003: noise below 1e-9 of a rank counts as that rank ...
    assert stats.percentile([1.0, 2.0], 50.000000015) == 1.0
    # ... while a fraction of a rank that is not noise rounds up to the next sample.
    assert stats.percentile([1.0, 2.0], 50.001) == 2.0


def test_p1_of_many_samples_is_not_the_minimum() -> None:
    samples = [float(i) for i in range(1, 201)]
    assert stats.percentile(samples, 1.0) == 2.0  # ceil(0.01 * 200) = 2
    assert stats.percentile(samples, 0.0) == 1.0


@pytest.mark.parametrize(("call", "message"), [
    (lambda: stats.percentile([], 50), "percentile of an empty sequence"),
    (lambda: stats.percentile([1.0], -0.5), "percentile must lie in [0, 100], got -0.5"),
    (lambda: stats.median([]), "median of an empty sequence"),
    (lambda: stats.mean([]), "mean of an empty sequence"),
    (lambda: stats.describe([]), "cannot describe an empty sample set"),
    (lambda: stats.combine_repeats([]), "no repeats to combine"),
    (lambda: stats.segment_medians([1.0] * 20, segments=1), "segments must be at least 2, got 1"),
    (lambda: stats.segment_medians([1.0] * 20, min_per_segment=0), "min_per_segment must be at least 1, got 0"),
])
def test_each_refusal_says_what_is_wrong(call, message: str) -> None:
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == message


def test_two_segments_are_allowed() -> None:
    samples = [1.0] * 5 + [3.0] * 5
    assert stats.segment_medians(samples, segments=2) == [1.0, 3.0]
    assert stats.segment_drift_pct(samples, segments=2) == pytest.approx(100.0)  # (3 - 1) / median 2


def test_drift_honours_the_smallest_segment_it_is_given() -> None:
    samples = [1.0, 1.0, 3.0, 3.0]  # too short for the default 5 a segment; two segments of 2 with min 2
    assert stats.segment_drift_pct(samples) is None
    assert stats.segment_drift_pct(samples, segments=2, min_per_segment=2) == pytest.approx(100.0)
