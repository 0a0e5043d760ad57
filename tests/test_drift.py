"""Drift within repeats in a measurement's summary, and the UNSTABLE advice it picks.

Records come from :func:`test_results_io.ok_record` (the worker's shape); times are exact binary fractions so the
percentages are exact.
"""

from __future__ import annotations

import pytest

from clsbench.analysis.summary import (
    ADVICE_WORDS,
    TIME_VARYING_ADVICE,
    TIME_VARYING_GPU,
    UNSTABLE_ADVICE,
    build_measurement,
    drift_is_time_varying,
    summarize,
    unstable_advice,
)
from clsbench.core.plan import Cell
from clsbench.report import table
from clsbench.results.schema import BenchmarkResult
from test_results_io import ok_record

LATENCY = Cell("clsbench_testmodels:tiny", "infer-latency", "fp32", 1, "cpu")


def latency_records(*series: list[float]) -> list[dict]:
    return [ok_record(s, workload="infer-latency", batch=1, pid=100 + i) for i, s in enumerate(series)]


def train_records(*series: list[float]) -> list[dict]:
    return [ok_record(s, workload="train", batch=32, pid=100 + i) for i, s in enumerate(series)]


def test_speed_switching_within_repeats_gets_the_time_varying_advice():
    # p50 (nearest rank) of each repeat: 2, 4, 2 ms -> spread 100%. Drift (segments of ten, over the median of all):
    # 60 x 2 then 40 x 4: (4 - 2) / 2 = 100%; 40 x 2 then 60 x 4: (4 - 2) / 4 = 50%; 70 x 2 then 30 x 2.5: 25%.
    records = latency_records([2.0] * 60 + [4.0] * 40, [2.0] * 40 + [4.0] * 60, [2.0] * 70 + [2.5] * 30)
    summary, validity = summarize(records, "infer-latency")
    assert summary["spread_pct"] == 100.0 and summary["unstable"] is True
    assert summary["within_repeat_drift_pct"] == 50.0  # median over repeats
    assert summary["within_repeat_drift_pct_max"] == 100.0  # the largest, which picks the advice
    assert validity["advice"] == TIME_VARYING_ADVICE.format(where="the GPU and its host", **TIME_VARYING_GPU)
    assert "fresh processes cannot remove it" in validity["advice"]
    assert "+cudagraph" in validity["advice"] and "--min-time" in validity["advice"]


def test_one_repeat_slowing_down_while_it_ran_is_enough():
    # The H200 case: two steady 16 ms repeats and one that went from 16 to 24 ms per iteration while it ran.
    # Throughput 2000, 2000 and 1920 / 1.12 img/s -> spread 14.3%; drifts 0, 0 and (24 - 16) / 16 = 50%.
    records = train_records([16.0] * 60, [16.0] * 60, [16.0] * 40 + [24.0] * 20)
    summary, validity = summarize(records, "train")
    assert summary["spread_pct"] == pytest.approx(100 * (2000 - 1920 / 1.12) / 2000)
    assert summary["within_repeat_drift_pct"] == 0.0  # the median alone would call the repeats steady
    assert summary["within_repeat_drift_pct_max"] == 50.0
    assert validity["advice"] == TIME_VARYING_ADVICE.format(where="the GPU and its host", **TIME_VARYING_GPU)


def test_steady_but_different_repeats_get_the_per_process_advice():
    # p50 of 2, 4 and 2 ms (spread 100%); within a repeat at most (4.125 - 4) / 4 = 3.125%.
    records = latency_records([2.0] * 100, [4.0] * 90 + [4.125] * 10, [2.0] * 100)
    summary, validity = summarize(records, "infer-latency")
    assert summary["unstable"] is True
    assert summary["within_repeat_drift_pct"] == 0.0
    assert summary["within_repeat_drift_pct_max"] == 3.125
    assert "each repeat was steady but they differed" in validity["advice"]
    assert "--repeats" in validity["advice"] and "--no-cudnn-benchmark" in validity["advice"]


def test_advice_on_a_cpu_offers_only_what_a_cpu_has():
    # The same two causes on a CPU: no clocks to check, no kernel launches to capture, no cuDNN autotuning.
    time_varying = unstable_advice(100.0, 100.0, "cpu")
    per_process = unstable_advice(100.0, 3.0, "cpu")
    for text in (time_varying, per_process, unstable_advice(100.0, None, "cpu")):
        assert "GPU" not in text and "cudagraph" not in text and "cudnn" not in text.lower()
    assert "fresh processes cannot remove it" in time_varying and "--min-time" in time_varying
    assert "--repeats" in per_process


def test_advice_holds_no_figure_so_cells_with_one_cause_share_it():
    assert unstable_advice(40.0, 30.0) == unstable_advice(100.0, 90.0)
    assert unstable_advice(40.0, 3.0) == unstable_advice(100.0, 1.0)
    assert not any(ch.isdigit() for ch in unstable_advice(40.0, 30.0) + unstable_advice(40.0, 3.0))


def test_stable_cell_has_no_advice_and_reports_its_drift():
    records = latency_records([2.0] * 100, [2.0] * 90 + [2.5] * 10, [2.0] * 100)
    summary, validity = summarize(records, "infer-latency")
    assert summary["unstable"] is False and "advice" not in validity
    assert summary["within_repeat_drift_pct"] == 0.0
    assert summary["within_repeat_drift_pct_max"] == 25.0  # a drift alone never makes a cell UNSTABLE


def test_repeats_too_short_for_segments_keep_the_generic_advice():
    records = latency_records([1.0] * 9, [2.0] * 9)  # 9 samples: fewer than two segments of five
    summary, validity = summarize(records, "infer-latency")
    assert summary["unstable"] is True
    assert summary["within_repeat_drift_pct"] is None and summary["within_repeat_drift_pct_max"] is None
    assert validity["advice"] == UNSTABLE_ADVICE.format(limit=10.0, **ADVICE_WORDS["gpu"])


def test_drift_ignores_repeats_too_short_to_cut():
    records = latency_records([2.0] * 60 + [4.0] * 40, [2.0] * 9)
    summary, _ = summarize(records, "infer-latency")
    assert summary["within_repeat_drift_pct"] == 100.0 and summary["within_repeat_drift_pct_max"] == 100.0


@pytest.mark.parametrize(("drift", "spread", "time_varying"), [
    (10.0, 40.0, True),   # the UNSTABLE limit itself
    (9.9, 40.0, False),
    (6.0, 12.0, True),    # half the spread, below the limit
    (5.9, 12.0, False),
])
def test_rule_limit_or_half_the_spread(drift, spread, time_varying):
    assert drift_is_time_varying(drift, spread) is time_varying
    assert ("fresh processes cannot remove it" in unstable_advice(spread, drift)) is time_varying


def test_unknown_drift_gives_the_generic_advice():
    assert unstable_advice(25.0, None) == UNSTABLE_ADVICE.format(limit=10.0, **ADVICE_WORDS["gpu"])
    assert "GPU" not in unstable_advice(25.0, None, "cpu") and "this machine" in unstable_advice(25.0, None, "cpu")


def test_table_prints_the_specific_advice():
    records = latency_records([2.0] * 60 + [4.0] * 40, [2.0] * 40 + [4.0] * 60, [2.0] * 70 + [2.5] * 30)
    m = build_measurement(LATENCY, records)
    text = table.render(BenchmarkResult(environment={}, settings={}, measurements=(m,)))
    lines = text.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("UNSTABLE "))
    assert lines[at] == ("UNSTABLE  clsbench_testmodels:tiny infer-latency fp32 bs1: spread 100.0% of p50 latency over "
                         "3 repeats; up to 100.0% within a repeat (time-varying cause)")
    # LATENCY is a CPU cell: the advice names the machine, not a GPU.
    assert lines[at + 1].strip() == "what to do: " + unstable_advice(100.0, 100.0, "cpu")


def test_compile_time_is_the_first_repeats_cold_compile_and_the_warm_ones_apart():
    """Repeats share the cell's compile cache (issue 35): the summary's compile_s is what a user pays once."""
    records = train_records([16.0] * 20, [16.0] * 20, [16.0] * 20)
    for record, seconds in zip(records, (56.7, 3.3, 3.1), strict=True):
        record.setdefault("timings", {})["compile_s"] = seconds
    summary, _ = summarize(records, "train")
    assert summary["compile_s"] == 56.7 and summary["compile_s_warm"] == pytest.approx(3.2)
    eager = train_records([16.0] * 20, [16.0] * 20)
    summary, _ = summarize(eager, "train")
    assert summary["compile_s"] is None and "compile_s_warm" not in summary
