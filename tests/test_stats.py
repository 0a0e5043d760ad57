import math

import pytest

from clsbench.analysis import stats


def test_nearest_rank_percentiles_on_1_to_100():
    samples = list(range(100, 0, -1))  # unsorted on purpose
    assert stats.percentile(samples, 50) == 50
    assert stats.percentile(samples, 90) == 90
    assert stats.percentile(samples, 99) == 99
    assert stats.percentile(samples, 99.9) == 100
    assert stats.percentile(samples, 100) == 100
    assert stats.percentile(samples, 0) == 1


def test_nearest_rank_p999_of_1000_is_the_999th_value():
    samples = [float(i) for i in range(1, 1001)]
    assert stats.percentile(samples, 99.9) == 999.0  # ceil(0.999 * 1000) = 999, despite float noise
    assert stats.percentile(samples, 99) == 990.0
    assert stats.percentile(samples, 50) == 500.0


def test_percentile_is_always_an_observed_value():
    samples = [1.0, 2.0, 10.0]
    assert stats.percentile(samples, 50) == 2.0  # interpolation would give 2.0 too; check an uneven one:
    assert stats.percentile(samples, 70) == 10.0  # ceil(2.1) = 3 -> third value, not 4.8 interpolated


def test_percentile_small_sets():
    assert stats.percentile([7.0], 99.9) == 7.0
    assert stats.percentile([1.0, 2.0], 50) == 1.0
    assert stats.percentile([1.0, 2.0], 51) == 2.0


@pytest.mark.parametrize("bad", [-1, 100.5])
def test_percentile_rejects_out_of_range(bad):
    with pytest.raises(ValueError):
        stats.percentile([1.0], bad)


def test_percentile_rejects_empty():
    with pytest.raises(ValueError):
        stats.percentile([], 50)


def test_median_mean_stdev():
    assert stats.median([3, 1, 2]) == 2
    assert stats.median([4, 1, 2, 3]) == 2.5
    assert stats.mean([1, 2, 3, 4]) == 2.5
    assert math.isclose(stats.stdev([2, 4, 4, 4, 5, 5, 7, 9]), 2.138089935299395)
    assert stats.stdev([5.0]) == 0.0


def test_spread_pct():
    assert stats.spread_pct([100.0, 105.0, 110.0]) == pytest.approx(10 / 105 * 100)
    assert stats.spread_pct([100.0]) is None
    assert stats.spread_pct([0.0, 0.0]) is None


def test_describe_and_combine_repeats():
    a = stats.describe([1.0, 2.0, 3.0, 4.0])
    b = stats.describe([2.0, 3.0, 4.0, 5.0])
    c = stats.describe([10.0, 10.0, 10.0, 10.0])
    assert a.as_dict() == {"n": 4, "mean": 2.5, "std": pytest.approx(1.2909944), "min": 1.0, "p50": 2.0,
                           "p90": 4.0, "p99": 4.0, "p999": 4.0, "max": 4.0}
    combined = stats.combine_repeats([a, b, c])
    assert combined["n"] == 12
    assert combined["p50"] == 3.0  # median of 2, 3, 10: one disturbed repeat does not drag the figure
    assert combined["max"] == 5.0
    # Four samples a repeat support a p50 but no tail: a nearest-rank p90/p99/p99.9 of four would be their maximum.
    assert combined["p90"] is None and combined["p99"] is None and combined["p999"] is None
    assert combined["withheld"]["p99"] == "needs >= 100 samples in each repeat; the fewest were 4"
    assert set(combined["withheld"]) == {"p90", "p99", "p999"}


def test_percentiles_appear_once_each_repeat_holds_enough_samples():
    full = stats.describe([float(i) for i in range(1, 101)])  # 100 samples: p99 = the 99th value
    short = stats.describe([float(i) for i in range(1, 100)])  # 99
    combined = stats.combine_repeats([full, full])
    assert combined["p99"] == 99.0 and combined["p90"] == 90.0
    assert combined["p999"] is None and set(combined["withheld"]) == {"p999"}
    # The fewest samples in any repeat decide: one short repeat withholds the p99 of all.
    assert stats.combine_repeats([full, short, full])["p99"] is None


def test_tail_latency_falls_back_to_the_maximum():
    assert stats.tail_latency({"p99": 4.0, "max": 9.0}) == (4.0, "p99")
    assert stats.tail_latency({"p99": None, "max": 9.0}) == (9.0, "max")
    assert stats.tail_latency({}) == (None, "p99")


# ----------------------------------------------------------------------------------------------------------
# Drift within one repeat: medians of consecutive time segments


def test_segment_medians_cut_nearly_equal_consecutive_chunks():
    # 23 samples, at most 10 segments of >= 5: 23 // 5 = 4 segments, bounds 0, 5, 11, 17, 23 (sizes 5, 6, 6, 6).
    assert stats.segment_medians([float(i) for i in range(23)]) == [2.0, 7.5, 13.5, 19.5]
    # 100 samples: ten segments of ten, in time order.
    assert stats.segment_medians([float(i) for i in range(100)]) == [4.5 + 10 * i for i in range(10)]
    # 30 samples: six segments of five; a smaller minimum allows all ten (three each).
    assert len(stats.segment_medians([1.0] * 30)) == 6
    assert len(stats.segment_medians([1.0] * 30, min_per_segment=3)) == 10
    assert stats.segment_medians([float(i) for i in range(12)], segments=3, min_per_segment=1) == [1.5, 5.5, 9.5]


def test_segment_drift_needs_two_segments():
    assert stats.segment_medians([1.0] * 9) == []
    assert stats.segment_drift_pct([1.0] * 9) is None  # 9 // 5 = 1 segment
    assert stats.segment_drift_pct([]) is None
    assert stats.segment_drift_pct([1.0] * 5 + [3.0] * 5) == 100.0  # 10 samples: two segments of five, median 2
    assert stats.segment_drift_pct([0.0] * 20) is None  # a zero median has no relative drift


def test_segment_drift_exact_values():
    # Ten segments of ten: 4, 4, 4, 4, 5, 5, 4, 4, 4, 4 ms; median of all 4 ms: (5 - 4) / 4.
    assert stats.segment_drift_pct([4.0] * 40 + [5.0] * 20 + [4.0] * 40) == 25.0
    # A speed switch mid-repeat (2.9 -> 5.9 ms per request in the H200 runs): 60 fast then 40 slow, median 2.
    assert stats.segment_drift_pct([2.0] * 60 + [4.0] * 40) == 100.0
    # Steady with one outlier: every segment median is 2, so no drift (it is not a jitter or tail measure).
    assert stats.segment_drift_pct([2.0] * 50 + [50.0] + [2.0] * 49) == 0.0


def test_segment_drift_depends_on_time_order_not_on_the_distribution():
    interleaved = [1.0, 3.0] * 50  # every segment holds five of each: medians all 2
    in_two_halves = sorted(interleaved)  # the same samples, slow half after fast half
    assert stats.segment_drift_pct(interleaved) == 0.0
    assert stats.segment_drift_pct(in_two_halves) == 100.0  # (3 - 1) / median 2


@pytest.mark.parametrize(("segments", "min_per_segment"), [(1, 5), (10, 0)])
def test_segment_medians_rejects_bad_arguments(segments, min_per_segment):
    with pytest.raises(ValueError):
        stats.segment_medians([1.0] * 100, segments, min_per_segment)
