"""The edges of analysis/significance.py that mutation testing found unpinned: p exactly at a printed or decided
boundary, the fewest repeats the test takes, closed forms of the distributions on both sides of each branch, and
the words of every refusal. Reference values are closed forms (t with 1 and 2 degrees of freedom, the incomplete
beta with a or b equal to 1), not this module's own output."""

from __future__ import annotations

import json
import math

import pytest

from clsbench.analysis.significance import (
    MAX_REPEATS_SEARCHED,
    TEST_NAME,
    TestResult,
    detectable_difference,
    format_p,
    normal_cdf,
    regularized_incomplete_beta,
    repeats_needed,
    student_t_cdf,
    student_t_critical,
    student_t_two_sided_p,
    welch_power,
    welch_t_test,
)


def t2_critical(alpha: float) -> float:
    """Two-sided critical value of t with 2 degrees of freedom, in closed form: P(|T| > t) = 1 - t / sqrt(2 + t^2)."""
    q = (1.0 - alpha) ** 2
    return math.sqrt(2.0 * q / (1.0 - q))


# ------------------------------------------------------------------------------------- verdict and words
def test_p_exactly_at_alpha_is_not_significant_and_just_below_is() -> None:
    at = TestResult(t=2.0, df=4.0, p=0.05, alpha=0.05, n_a=3, n_b=3)
    assert not at.significant and at.testable
    assert at.describe() == f"not significant at alpha=0.05 ({TEST_NAME}, p=0.0500)"
    below = TestResult(t=2.0, df=4.0, p=0.0499999, alpha=0.05, n_a=3, n_b=3)
    assert below.significant


def test_p_values_print_with_four_decimals_down_to_one_in_ten_thousand() -> None:
    assert format_p(1e-4) == "p=0.0001"
    assert format_p(0.99e-4) == "p<0.0001"
    assert format_p(0.0) == "p<0.0001"
    assert format_p(0.5) == "p=0.5000"


def test_a_stored_result_writes_infinity_as_text() -> None:
    stored = welch_t_test([3.0, 3.0], [4.0, 4.0]).to_dict()
    assert stored == {"test": TEST_NAME, "t": "-inf", "df": None, "p": 0.0, "alpha": 0.05, "n_a": 2, "n_b": 2,
                      "significant": True, "reason": "both runs constant, with different values"}
    assert welch_t_test([4.0, 4.0], [3.0, 3.0]).to_dict()["t"] == "inf"
    assert json.loads(json.dumps(welch_t_test([1.0, 3.0], [5.0, 7.0]).to_dict()))["t"] == pytest.approx(-2 * 2 ** 0.5)


# ------------------------------------------------------------------------------------- Welch's test
def test_two_repeats_on_each_side_are_enough_and_one_is_not() -> None:
    two = welch_t_test([1.0, 3.0], [5.0, 7.0])
    # Means 2 and 6, variances 2 and 2: t = -4 / sqrt(2/2 + 2/2) = -2 sqrt(2), df = 2.
    assert two.t == pytest.approx(-2.0 * math.sqrt(2.0)) and two.df == pytest.approx(2.0)
    assert two.p == pytest.approx(1.0 - 2.0 * math.sqrt(2.0) / math.sqrt(2.0 + 8.0), abs=1e-12)
    one = welch_t_test([1.0, 3.0, 5.0], [4.0])
    assert one.reason == "needs at least 2 repeats on each side (has 3 and 1)"
    assert (one.t, one.df, one.p, one.alpha, one.n_a, one.n_b) == (None, None, None, 0.05, 3, 1)
    assert one.describe() == "not testable: needs at least 2 repeats on each side (has 3 and 1)"


def test_identical_constants_are_not_significant_and_say_why() -> None:
    same = welch_t_test([2.0, 2.0], [2.0, 2.0, 2.0])
    assert (same.t, same.df, same.p, same.n_a, same.n_b) == (0.0, None, 1.0, 2, 3)
    assert same.reason == "both runs identical, without variance"


def test_one_constant_side_takes_its_degrees_of_freedom_from_the_other() -> None:
    result = welch_t_test([0.0, 2.0, 4.0, 6.0], [1.0, 1.0])  # var_a = 20/3, n_a = 4; side b has no variance
    assert result.df == pytest.approx(3.0)
    assert result.t == pytest.approx((3.0 - 1.0) / math.sqrt(20.0 / 3.0 / 4.0))


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1])
def test_alpha_outside_zero_to_one_is_refused(alpha: float) -> None:
    with pytest.raises(ValueError) as info:
        welch_t_test([1.0, 2.0], [3.0, 4.0], alpha=alpha)
    assert str(info.value) == f"alpha must lie in (0, 1), got {alpha}"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_value_that_is_not_finite_is_refused(bad: float) -> None:
    with pytest.raises(ValueError) as info:
        welch_t_test([1.0, 2.0], [3.0, bad])
    assert str(info.value) == "the t-test needs finite values"


# ------------------------------------------------------------------------------------- distributions
@pytest.mark.parametrize("t", [0.0, 0.5, 3.0, 40.0])
def test_t_with_two_degrees_of_freedom_has_a_closed_form(t: float) -> None:
    assert student_t_two_sided_p(t, 2.0) == pytest.approx(1.0 - t / math.sqrt(2.0 + t * t), abs=1e-12)


def test_an_infinite_t_has_no_tail_and_bad_degrees_of_freedom_are_refused() -> None:
    assert student_t_two_sided_p(math.inf, 3.0) == 0.0
    assert student_t_two_sided_p(-math.inf, 3.0) == 0.0
    for df in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError) as info:
            student_t_two_sided_p(1.0, df)
        assert str(info.value) == f"degrees of freedom must be > 0, got {df}"


def test_the_cdf_just_above_zero_is_just_above_a_half() -> None:
    assert 0.5 < student_t_cdf(1e-3, 1.0) == pytest.approx(0.5 + math.atan(1e-3) / math.pi, abs=1e-12)
    assert student_t_cdf(-1.0, 1.0) == pytest.approx(0.25, abs=1e-12)  # Cauchy: 1/2 + atan(-1)/pi


@pytest.mark.parametrize("x", [0.05, 0.3, 0.5, 0.7, 0.95])
def test_incomplete_beta_closed_forms_on_both_sides_of_the_branch(x: float) -> None:
    # I_x(a, 1) = x^a and I_x(1, b) = 1 - (1 - x)^b; the branch point (a + 1) / (a + b + 2) lies at 0.6 and 0.4.
    assert regularized_incomplete_beta(x, 3.0, 1.0) == pytest.approx(x ** 3, abs=1e-12)
    assert regularized_incomplete_beta(x, 1.0, 3.0) == pytest.approx(1.0 - (1.0 - x) ** 3, abs=1e-12)


def test_incomplete_beta_at_its_ends_and_its_refusals() -> None:
    assert regularized_incomplete_beta(0.0, 2.0, 3.0) == 0.0
    assert regularized_incomplete_beta(1.0, 2.0, 3.0) == 1.0
    for x in (-0.01, 1.5):
        with pytest.raises(ValueError) as info:
            regularized_incomplete_beta(x, 1.0, 1.0)
        assert str(info.value) == f"x must lie in [0, 1], got {x}"
    for a, b in ((1.0, 0.0), (-1.0, 2.0)):
        with pytest.raises(ValueError) as info:
            regularized_incomplete_beta(0.5, a, b)
        assert str(info.value) == f"a and b must be > 0, got a={a}, b={b}"


def test_normal_cdf() -> None:
    assert normal_cdf(0.0) == 0.5
    assert normal_cdf(1.959963984540054) == pytest.approx(0.975, abs=1e-12)
    assert normal_cdf(-1.0) == pytest.approx(0.15865525393145707, abs=1e-12)


# ------------------------------------------------------------------------------------- power
@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.2, 0.5, 0.99])  # 0.99: a critical value far below 1
def test_critical_value_with_two_degrees_of_freedom(alpha: float) -> None:
    assert student_t_critical(alpha, 2.0) == pytest.approx(t2_critical(alpha), rel=1e-8)


def test_critical_value_refuses_alpha_outside_zero_to_one() -> None:
    with pytest.raises(ValueError) as info:
        student_t_critical(1.0, 3.0)
    assert str(info.value) == "alpha must lie in (0, 1), got 1.0"


def test_power_of_an_overwhelming_difference_is_one_and_bad_arguments_are_refused() -> None:
    assert welch_power(1e6, 3.0) == 1.0
    for df, noncentrality, message in ((0.0, 1.0, "degrees of freedom must be finite and > 0, got 0.0"),
                                       (math.inf, 1.0, "degrees of freedom must be finite and > 0, got inf"),
                                       (3.0, math.nan, "the noncentrality must be finite, got nan")):
        with pytest.raises(ValueError) as info:
            welch_power(noncentrality, df)
        assert str(info.value) == message


def test_the_detectable_difference_has_the_asked_power() -> None:
    a, b = [10.0, 12.0, 11.0, 13.0], [10.5, 11.5, 12.5]
    # Power just above alpha needs a noncentrality below 1; power near 1 at alpha 0.01 one far above the critical
    # value plus 4 where the search starts.
    for alpha, power in ((0.05, 0.8), (0.1, 0.5), (0.01, 0.95), (0.05, 0.06), (0.01, 0.9999)):
        difference = detectable_difference(a, b, alpha, power)
        var_a, var_b = 5.0 / 3.0, 1.0
        se_a, se_b = var_a / 4, var_b / 3
        df = (se_a + se_b) ** 2 / (se_a ** 2 / 3 + se_b ** 2 / 2)
        assert welch_power(difference / math.sqrt(se_a + se_b), df, alpha) == pytest.approx(power, abs=1e-6)


@pytest.mark.parametrize(("a", "b", "alpha", "power", "message"), [
    ([1.0, 2.0], [1.0, 2.0], 1.0, 0.8, "alpha must lie in (0, 1), got 1.0"),
    ([1.0, 2.0], [1.0, 2.0], 0.05, 0.05, "power must lie in (alpha, 1), got 0.05"),
    ([1.0, 2.0], [1.0, 2.0], 0.05, 1.0, "power must lie in (alpha, 1), got 1.0"),
    ([1.0, 2.0], [1.0], 0.05, 0.8, "needs at least 2 values on each side (has 2 and 1)"),
    ([1.0, math.inf], [1.0, 2.0], 0.05, 0.8, "the power analysis needs finite values"),
])
def test_the_power_analysis_says_what_is_wrong(a: list[float], b: list[float], alpha: float, power: float,
                                               message: str) -> None:
    with pytest.raises(ValueError) as info:
        detectable_difference(a, b, alpha, power)
    assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        repeats_needed(a, b, 1.0, alpha, power)
    assert str(info.value) == message


@pytest.mark.parametrize("difference", [-0.5, math.inf, math.nan])
def test_repeats_needed_refuses_a_difference_it_cannot_mean(difference: float) -> None:
    with pytest.raises(ValueError) as info:
        repeats_needed([1.0, 2.0], [1.0, 2.0], difference)
    assert str(info.value) == f"the difference must be finite and >= 0, got {difference}"


def test_repeats_needed_at_exactly_the_most_it_searches() -> None:
    a, b = [100.0, 101.0, 99.0], [100.5, 99.5, 100.0]
    var = 1.0 + 0.25

    def power(count: int, difference: float) -> float:
        df = (count - 1) * var ** 2 / (1.0 + 0.25 ** 2)
        return welch_power(difference / math.sqrt(var / count), df)

    n = repeats_needed(a, b, 0.5)
    assert n is not None and power(n, 0.5) >= 0.8 > power(n - 1, 0.5)
    assert repeats_needed(a, b, 0.5, most=n) == n  # exactly enough at the last count searched
    assert repeats_needed(a, b, 0.5, most=n - 1) is None
    strict = repeats_needed(a, b, 0.5, alpha=0.01)
    assert strict is not None and strict > n
    df = (strict - 1) * var ** 2 / (1.0 + 0.25 ** 2)
    assert welch_power(0.5 / math.sqrt(var / strict), df, 0.01) >= 0.8
    assert MAX_REPEATS_SEARCHED == 10_000
