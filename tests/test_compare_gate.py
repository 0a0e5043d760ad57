"""compare's verdicts and regression gate at the edges (issue 38, item 1): what Welch's t-test could have found (its
power), ``no change > X%`` against ``inconclusive``, and the gate's exit codes 5 (slower), 6 (inconclusive), 0.

Every case is two hand-written result files (tests/test_compare.py's builders); the power math is checked against
reference values of an adaptive quadrature of the same integral (scipy's ``quad`` over W, by hand, not at test time).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clsbench.analysis.compare import compare, gate_passed, undecided, verdict_of
from clsbench.analysis.compare_types import VERDICT_INCONCLUSIVE, VERDICT_NO_CHANGE, VERDICT_SLOWER
from clsbench.analysis.significance import (
    MIN_SAMPLES,
    TestResult,
    detectable_difference,
    repeats_needed,
    student_t_critical,
    welch_power,
)
from clsbench.errors import EXIT_INCONCLUSIVE, EXIT_REGRESSION
from clsbench.results import io as result_io
from test_compare import invoke, measurement, result, throughput_records

#: The issue's case: resnet18 infer-throughput bs2, 3 repeats varying by ±109% (sd over mean) on a busy host.
NOISY = [10.0, 25.0, 105.0]
QUIET = [100.0, 101.0, 99.0]


def files(tmp_path: Path, a: list[float], b: list[float]) -> tuple[str, str]:
    """Two result files of resnet18 infer-throughput bs2 with these per-repeat img/s."""
    paths = []
    for name, values in (("a.json", a), ("slow.json", b)):
        run = result([measurement("resnet18", "infer-throughput", throughput_records(values, batch=2), batch=2)])
        result_io.save(run, tmp_path / name)
        paths.append(str(tmp_path / name))
    return paths[0], paths[1]


def row_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("resnet18"))


# ------------------------------------------------------------------------------------------------ the gate


def test_the_issue_case_a_3x_slowdown_in_109_percent_noise_is_inconclusive_not_a_pass(tmp_path: Path) -> None:
    out = invoke(*files(tmp_path, NOISY, [v / 3 for v in NOISY]), "--fail-if-slower", "5%")
    assert out.exit_code == EXIT_INCONCLUSIVE == 6, out.output
    assert row_line(out.stdout).endswith("0.333x  inconclusive (detects none, p=0.4056)")
    assert "not significant" not in out.stdout and "passed" not in out.stderr
    lines = out.stderr.splitlines()
    assert lines[0].startswith("regression gate: inconclusive for 1 figure(s): too noisy or too few repeats to tell "
                               "a 5% slowdown from none (Welch's t-test (two-sided), alpha 0.05; detectable at 80% "
                               "power of Welch's t-test (noncentral t))")
    assert lines[1].startswith("  INCONCLUSIVE resnet18 infer-throughput fp32 bs2: B (")
    assert lines[1].endswith("slow.json) is 200.0% slower than A by the medians (3.00x the time per image), not "
                             "significant (p=0.4056)")
    assert lines[2] == ("    smallest slowdown 3 + 3 repeats could detect at this noise (±109% in A, ±109% in B): "
                        "none: it would take a fall of 321% of A's mean, more than the whole figure (80% power of "
                        "Welch's t-test (noncentral t), alpha 0.05)")
    assert lines[3] == "    repeats needed to detect a 5% slowdown at this noise: 4,608 per run"


def test_without_a_threshold_the_table_still_says_inconclusive(tmp_path: Path) -> None:
    out = invoke(*files(tmp_path, NOISY, [v / 3 for v in NOISY]))
    assert out.exit_code == 0, out.output
    assert row_line(out.stdout).endswith("inconclusive (detects none, p=0.4056)")


def test_a_real_10_percent_slowdown_in_quiet_repeats_exits_5(tmp_path: Path) -> None:
    out = invoke(*files(tmp_path, QUIET, [v / 1.1 for v in QUIET]), "--fail-if-slower", "5%")
    assert out.exit_code == EXIT_REGRESSION == 5, out.output
    assert row_line(out.stdout).endswith("0.909x  slower (p=0.0003)")
    assert "regression gate: 1 significant slowdown(s) beyond 5%:" in out.stderr
    assert "SLOWER resnet18 infer-throughput fp32 bs2" in out.stderr and "is 10.0% slower than A" in out.stderr
    assert "INCONCLUSIVE" not in out.stderr


def test_no_change_in_quiet_repeats_passes_and_says_what_could_have_been_seen(tmp_path: Path) -> None:
    out = invoke(*files(tmp_path, QUIET, [100.5, 99.5, 100.0]), "--fail-if-slower", "5%")
    assert out.exit_code == 0, out.output
    assert row_line(out.stdout).endswith("1.00x  no change > 5% (detects 2.9%, p=1.0000)")
    assert out.stderr.startswith("regression gate: passed: no change beyond 5% in 1 figure(s) (Welch's t-test")
    # Without a threshold, "no change" is judged against what the repeats could detect.
    plain = invoke(*files(tmp_path, QUIET, [100.5, 99.5, 100.0]))
    assert row_line(plain.stdout).endswith("1.00x  no change > 2.9% (p=1.0000)")


def test_exactly_two_repeats_detect_only_large_changes(tmp_path: Path) -> None:
    pair = files(tmp_path, [100.0, 102.0], [101.0, 99.0])
    strict = invoke(*pair, "--fail-if-slower", "5%")
    assert strict.exit_code == EXIT_INCONCLUSIVE, strict.output
    assert row_line(strict.stdout).endswith("inconclusive (detects 8.6%, p=0.5528)")
    assert "smallest slowdown 2 + 2 repeats could detect at this noise (±1.4% in A, ±1.4% in B): 8.6%" in strict.stderr
    assert "repeats needed to detect a 5% slowdown at this noise: 3 per run" in strict.stderr
    loose = invoke(*pair, "--fail-if-slower", "10%")
    assert loose.exit_code == 0, loose.output
    assert row_line(loose.stdout).endswith("no change > 10% (detects 8.6%, p=0.5528)")


def test_one_repeat_is_never_a_pass(tmp_path: Path) -> None:
    out = invoke(*files(tmp_path, [100.0, 101.0], [50.0]), "--fail-if-slower", "5%")
    assert out.exit_code == EXIT_INCONCLUSIVE, out.output
    assert "not testable: 1 repeat(s) on a side, and the noise needs 2 to be estimated" in out.stderr
    assert "repeats needed: at least 2 per run before the noise is known" in out.stderr


def test_zero_variance(tmp_path: Path) -> None:
    same = invoke(*files(tmp_path, [100.0] * 3, [100.0] * 3), "--fail-if-slower", "0%")
    assert same.exit_code == 0, same.output  # no noise at all: even a 0% threshold is judged
    assert row_line(same.stdout).endswith("no change > 0% (detects 0.0%, p=1.0000)")
    slower = invoke(*files(tmp_path, [100.0] * 3, [90.0] * 3), "--fail-if-slower", "5%")
    assert slower.exit_code == EXIT_REGRESSION and "slower (p<0.0001)" in slower.stdout
    # One side constant: Welch's df comes from the other side alone (2), and a 0% threshold is never shown.
    one = invoke(*files(tmp_path, QUIET, [100.0] * 3), "--fail-if-slower", "0%")
    assert one.exit_code == EXIT_INCONCLUSIVE, one.output
    assert "no number of repeats detects a 0% change amid noise" in one.stderr


def test_regression_and_inconclusive_together_exit_5_and_list_both(tmp_path: Path) -> None:
    a = result([measurement("slow", "train", throughput_records(QUIET)),
                measurement("noisy", "train", throughput_records(NOISY))])
    b = result([measurement("slow", "train", throughput_records([v / 1.2 for v in QUIET])),
                measurement("noisy", "train", throughput_records([v / 3 for v in NOISY]))])
    result_io.save(a, tmp_path / "a.json")
    result_io.save(b, tmp_path / "b.json")
    out = invoke(str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--fail-if-slower", "5%")
    assert out.exit_code == EXIT_REGRESSION, out.output
    assert "SLOWER slow train fp32 bs32" in out.stderr and "INCONCLUSIVE noisy train fp32 bs32" in out.stderr


def test_json_and_csv_carry_the_detectable_change(tmp_path: Path) -> None:
    pair = files(tmp_path, NOISY, [v / 3 for v in NOISY])
    data = json.loads(invoke(*pair, "--format", "json", "--fail-if-slower", "5").stdout)
    ratio = data["tables"][0]["rows"][0]["ratios"][0]
    assert ratio["verdict"] == "inconclusive" and ratio["detectable_slowdown_pct"] == "inf"
    assert ratio["threshold_pct"] == 5.0 and ratio["repeats_needed"] == 4608
    assert ratio["detectable_difference"] == pytest.approx(3.21 * 46.667, rel=1e-3)
    assert data["power"] == 0.8 and data["threshold_pct"] == 5.0
    csv = invoke(*pair, "--format", "csv", "--fail-if-slower", "5").stdout.splitlines()
    header = csv[0].split(",")
    assert header[-3:] == ["detectable_slowdown_pct", "threshold_pct", "repeats_needed"]
    assert csv[2].endswith(",inf,5.0,4608")


# ------------------------------------------------------------------------------------------- the verdicts


def _test(p: float, t: float = -3.0) -> TestResult:
    return TestResult(t=t, df=4.0, p=p, alpha=0.05, n_a=3, n_b=3)


def test_p_equal_to_alpha_is_not_significant() -> None:
    assert verdict_of(_test(0.05), True, 10.0, 3.0, 5.0) == VERDICT_INCONCLUSIVE  # median 10% slower, not shown
    assert verdict_of(_test(0.05), True, 1.0, 3.0, 5.0) == VERDICT_NO_CHANGE
    assert verdict_of(_test(0.0499), True, 1.0, 3.0, 5.0) == VERDICT_SLOWER


def test_no_change_needs_the_detectable_and_the_point_estimate_within_the_reference() -> None:
    assert verdict_of(_test(0.5), True, 5.0, 5.0, 5.0) == VERDICT_NO_CHANGE  # both exactly at the threshold
    assert verdict_of(_test(0.5), True, 1.0, 5.01, 5.0) == VERDICT_INCONCLUSIVE
    assert verdict_of(_test(0.5), True, 5.01, 1.0, 5.0) == VERDICT_INCONCLUSIVE
    assert verdict_of(_test(0.5), True, -200.0, 1.0, 5.0) == VERDICT_INCONCLUSIVE  # a 3x speed-up, not shown
    assert verdict_of(_test(0.5), True, 200.0, 1.0, 5.0) == VERDICT_INCONCLUSIVE  # never a pass: a 3x slowdown
    # Without a threshold the reference is the detectable change itself.
    assert verdict_of(_test(0.5), True, 2.0, 3.0, None) == VERDICT_NO_CHANGE
    assert verdict_of(_test(0.5), True, 3.5, 3.0, None) == VERDICT_INCONCLUSIVE
    assert verdict_of(_test(0.5), True, 0.0, float("inf"), None) == VERDICT_INCONCLUSIVE


def test_undecided_and_gate_passed_need_a_threshold() -> None:
    a = result([measurement("m", "train", throughput_records(QUIET))])
    with pytest.raises(ValueError, match="threshold"):
        undecided(compare([a, a], ["a", "b"]))
    with pytest.raises(ValueError, match="threshold"):
        gate_passed(compare([a, a], ["a", "b"]))
    assert gate_passed(compare([a, a], ["a", "b"], threshold_pct=5.0)) == "no change beyond 5% in 1 figure(s)"


def test_latency_detectable_change_is_a_share_of_the_baseline() -> None:
    """For latency the detectable difference of means is ms more than A's mean: d / mean_A."""
    from test_compare import latency_records

    a = result([measurement("m", "infer-latency", latency_records([10.0, 10.2, 9.8]), batch=1)])
    b = result([measurement("m", "infer-latency", latency_records([10.1, 9.9, 10.0]), batch=1)])
    ratio = compare([a, b], ["a", "b"]).rows()[0].ratios[0]
    difference = detectable_difference([10.1, 9.9, 10.0], [10.0, 10.2, 9.8])
    assert ratio.detectable_difference == pytest.approx(difference)
    assert ratio.detectable_pct == pytest.approx(difference / 10.0 * 100.0)
    assert ratio.verdict == VERDICT_NO_CHANGE


# ----------------------------------------------------------------------------------------- the power math

# Reference values: scipy.stats.t.ppf, and scipy.integrate.quad of E_W[Phi(l - c W) + Phi(-l - c W)] with W's
# density from scipy.stats.chi, solved by scipy.optimize.brentq for 80% (computed once by hand).
CRITICAL = [(0.05, 1.0, 12.706204736174707), (0.05, 4.0, 2.7764451051977987), (0.01, 30.0, 2.7499956535672254)]
POWER = [(1.0, 0.05, 3.0, 0.18613206160658752), (2.0, 0.05, 4.0, 0.564514289260038),
         (4.0, 0.05, 2.5, 0.47726111738165405), (30.0, 0.01, 3.0, 0.6017891915266352)]
NONCENTRALITY_80 = [(1.0, 0.05, 16.33400886992099), (2.0, 0.05, 5.653489266197124), (4.0, 0.05, 3.76105955382502),
                    (4.0, 0.01, 5.8785640420177545)]


@pytest.mark.parametrize(("alpha", "df", "expected"), CRITICAL)
def test_student_t_critical(alpha: float, df: float, expected: float) -> None:
    assert student_t_critical(alpha, df) == pytest.approx(expected, rel=1e-8)


@pytest.mark.parametrize(("df", "alpha", "noncentrality", "expected"), POWER)
def test_welch_power_matches_the_reference(df: float, alpha: float, noncentrality: float, expected: float) -> None:
    assert welch_power(noncentrality, df, alpha) == pytest.approx(expected, abs=1e-5)
    assert welch_power(-noncentrality, df, alpha) == pytest.approx(expected, abs=1e-5)  # two-sided: symmetric


@pytest.mark.parametrize("df", [1.0, 1.5, 2.44, 10.0, 1e4])
def test_power_of_no_difference_is_alpha(df: float) -> None:
    assert welch_power(0.0, df, 0.05) == pytest.approx(0.05, abs=1e-6)


@pytest.mark.parametrize(("df", "alpha", "expected"), NONCENTRALITY_80)
def test_detectable_difference_is_the_80_percent_noncentrality_times_the_standard_error(
        df: float, alpha: float, expected: float) -> None:
    # Two samples of n = df + 1 with one side constant: Welch's df is n - 1 and se is sd / sqrt(n).
    n = int(df) + 1
    a = [float(i) for i in range(n)]
    sd = (sum((v - sum(a) / n) ** 2 for v in a) / (n - 1)) ** 0.5
    assert detectable_difference(a, [0.0] * n, alpha) == pytest.approx(expected * sd / n ** 0.5, rel=1e-5)


def test_detectable_difference_without_noise_is_zero_and_bad_input_raises() -> None:
    assert detectable_difference([5.0, 5.0], [7.0, 7.0]) == 0.0
    for bad in (([1.0], [1.0, 2.0], 0.05, 0.8), ([1.0, 2.0], [1.0, float("nan")], 0.05, 0.8),
                ([1.0, 2.0], [1.0, 2.0], 0.0, 0.8), ([1.0, 2.0], [1.0, 2.0], 0.05, 0.05),
                ([1.0, 2.0], [1.0, 2.0], 0.05, 1.0)):
        with pytest.raises(ValueError):
            detectable_difference(*bad)


def test_repeats_needed_is_the_smallest_count_with_80_percent_power() -> None:
    a, b = [100.0, 101.0, 99.0], [100.5, 99.5, 100.0]
    n = repeats_needed(a, b, 2.0)
    assert n is not None and n > 3
    var = 1.0 + 0.25  # the two sample variances

    def power(count: int) -> float:
        df = (count - 1) * var ** 2 / (1.0 + 0.25 ** 2)
        return welch_power(2.0 / (var / count) ** 0.5, df)

    assert power(n) >= 0.8 > power(n - 1)
    assert repeats_needed(a, b, 100.0) == MIN_SAMPLES  # a huge difference: the fewest repeats the test takes
    assert repeats_needed(a, b, 0.0) is None  # no count detects no difference amid noise
    assert repeats_needed(a, b, 0.01, most=50) is None  # more than the search looks at
    assert repeats_needed([5.0, 5.0], [5.0, 5.0], 0.1) == MIN_SAMPLES and repeats_needed([5.0, 5.0], [5.0, 5.0], 0.0) \
        is None
    with pytest.raises(ValueError):
        repeats_needed(a, b, -1.0)
