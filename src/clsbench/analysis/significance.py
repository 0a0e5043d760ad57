"""Is a difference between two runs real? Welch's two-sample t-test on per-repeat figures. Pure; no numpy/scipy.

The test: **Welch's unequal-variances t-test, two-sided**, at significance level ``alpha`` (default
:data:`DEFAULT_ALPHA` = 0.05). Each sample is one figure per repeat of a measurement (img/s of each repeat, or the
p50 latency of each repeat): repeats run in fresh processes, so they are the independent observations; the
thousands of requests inside one repeat are not (they share one process, one allocator state, one clock ramp).

Welch's test does not assume the two runs have the same variance, which matters when a GPU (tight) is compared
with a CPU (noisy). With the usual three repeats per run it has few degrees of freedom, so only differences well
outside the repeat-to-repeat spread come out significant: "not significant" means *we cannot tell*, not *equal*.

Formulas (B. L. Welch, "The generalization of 'Student's' problem when several different population variances
are involved", Biometrika 34, 1947)::

    t  = (mean_a - mean_b) / sqrt(va/na + vb/nb)                 va, vb: sample variances (n - 1)
    df = (va/na + vb/nb)^2 / ((va/na)^2/(na-1) + (vb/nb)^2/(nb-1))   (Welch-Satterthwaite)
    p  = 2 * P(T_df > |t|) = I_{df/(df+t^2)}(df/2, 1/2)

where ``I_x(a, b)`` is the regularised incomplete beta function, computed here by its continued fraction
(modified Lentz's method; Numerical Recipes, 3rd ed., section 6.4, ``betacf``). ``df`` is not rounded.

Edge cases, decided here once so every caller reports them the same way:

* fewer than two values on either side: not testable (there is no variance to test against); the result says so;
* both sides without variance (every repeat gave the same figure): identical constants are *not significant*
  (p = 1), different constants are *significant* (p = 0): with no noise at all, any difference is real;
* one side without variance: Welch's formulas still hold (df comes from the other side alone).

What the test could have found (:func:`detectable_difference`, :func:`repeats_needed`): a *power analysis of this
same test*. With the standard error ``se`` and degrees of freedom ``df`` of the two samples, Welch's statistic for a
true difference of means ``delta`` follows the noncentral t distribution with ``df`` degrees of freedom and
noncentrality ``delta / se``. The test's power, the probability of calling that difference significant, is::

    power(delta) = P(|T'| > t_crit),   T' = (Z + delta/se) / W,   W = sqrt(chi2_df / df),   Z ~ N(0, 1)
                 = E_W[ Phi(delta/se - t_crit W) + Phi(-delta/se - t_crit W) ]

where ``t_crit`` is the two-sided critical value at ``alpha`` (``p(t_crit) = alpha``). The expectation over ``W``
is integrated numerically (Simpson's rule over W's density, :data:`_POWER_PANELS` panels over +-12 standard
deviations of W); at ``delta = 0`` it gives ``alpha`` back. The *smallest detectable difference* is the ``delta``
whose power is :data:`DEFAULT_POWER` (80%): a true change that large is found 4 times out of 5 with these repeats at
this noise, and a smaller one mostly is not. *Repeats needed* keeps both runs' variances and asks how many repeats
per run (the same on both sides) bring a given difference to that power.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

TEST_NAME = "Welch's t-test (two-sided)"
#: Default significance level: a difference is called significant when p < alpha.
DEFAULT_ALPHA = 0.05
#: Minimum number of values on each side for the test to be defined (a variance needs two).
MIN_SAMPLES = 2
#: Power at which the smallest detectable difference is computed: a true difference that large is called
#: significant 4 times out of 5 (the conventional 80% of J. Cohen, "Statistical Power Analysis for the Behavioral
#: Sciences", 2nd ed., 1988, section 2.4).
DEFAULT_POWER = 0.8
#: How the smallest detectable difference and the repeats needed are computed, in words for outputs.
POWER_METHOD = "power of Welch's t-test (noncentral t)"
#: The most repeats per run :func:`repeats_needed` looks at; beyond it the answer is "more than this".
MAX_REPEATS_SEARCHED = 10_000

# The power integral: Simpson's rule over W = sqrt(chi2_df / df), which spans +-_W_SPAN standard deviations of W
# (clipped at 0), in up to three stretches of _POWER_PANELS panels each, the middle one +-_STEP_SPAN / t_crit around
# the step of the rejection probability. Against an adaptive quadrature of the same integral (scipy's quad) the
# power is right to 1e-5 for df from 1 to 1e4 (alpha 0.01 to 0.2, noncentrality 0 to 80).
_POWER_PANELS = 64
_W_SPAN = 12.0
_STEP_SPAN = 8.0
# Bisections stop at this relative width (the answers are printed with three digits).
_SOLVE_RTOL = 1e-9

# Continued fraction: stop when a step changes the value by less than this relative amount, or after so many
# steps (it converges in O(sqrt(max(a, b))) steps for x on the fast side; 300 covers df up to ~1e5 easily).
_CF_EPS = 1e-15
_CF_MAX_ITERATIONS = 300
_CF_TINY = 1e-300  # Lentz's guard against division by zero


@dataclass(frozen=True)
class TestResult:
    """The outcome of one Welch's t-test.

    Attributes:
        t: the t statistic, positive when the mean of ``a`` is larger; ``None`` when not testable; +-inf for two
            different constants.
        df: Welch-Satterthwaite degrees of freedom (not rounded); ``None`` when not testable or undefined.
        p: two-sided p-value; ``None`` when not testable.
        alpha: the significance level the verdict uses.
        n_a, n_b: the sample sizes.
        reason: why the test could not be run, or a note on a degenerate case; ``None`` otherwise.
    """

    __test__ = False  # not a pytest test class, despite the name

    t: float | None
    df: float | None
    p: float | None
    alpha: float
    n_a: int
    n_b: int
    reason: str | None = None

    @property
    def testable(self) -> bool:
        return self.p is not None

    @property
    def significant(self) -> bool:
        """True when the test ran and p < alpha."""
        return self.p is not None and self.p < self.alpha

    def describe(self) -> str:
        """One line in words, e.g. ``significant at alpha=0.05 (Welch's t-test (two-sided), p=0.0012)``."""
        if self.p is None:
            return f"not testable: {self.reason}"
        verdict = "significant" if self.significant else "not significant"
        return f"{verdict} at alpha={self.alpha:g} ({TEST_NAME}, {format_p(self.p)})"

    def to_dict(self) -> dict[str, object]:
        return {"test": TEST_NAME, "t": _finite_or_text(self.t), "df": self.df, "p": self.p, "alpha": self.alpha,
                "n_a": self.n_a, "n_b": self.n_b, "significant": self.significant, "reason": self.reason}


def _finite_or_text(value: float | None) -> float | str | None:
    """JSON has no infinity: +-inf becomes the string "inf" / "-inf", as result files store it."""
    if value is not None and not math.isfinite(value):
        return str(value)
    return value


def format_p(p: float) -> str:
    """``p=0.0123``, or ``p<0.0001`` rather than a long row of zeros."""
    return "p<0.0001" if p < 1e-4 else f"p={p:.4f}"


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, var


def welch_t_test(a: Sequence[float], b: Sequence[float], alpha: float = DEFAULT_ALPHA) -> TestResult:
    """Welch's unequal-variances t-test, two-sided, of the means of ``a`` and ``b``.

    Args:
        a: one figure per repeat of the first run (e.g. img/s of each repeat).
        b: the same figure per repeat of the second run.
        alpha: significance level; p < alpha is called significant.

    Returns:
        The t statistic, Welch-Satterthwaite degrees of freedom and the two-sided p-value; when either side has
        fewer than two values, a result with ``p=None`` and the reason (see the module docstring).

    Raises:
        ValueError: ``alpha`` is not in (0, 1) or a value is not finite.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    a = [float(v) for v in a]
    b = [float(v) for v in b]
    if not all(math.isfinite(v) for v in (*a, *b)):
        raise ValueError("the t-test needs finite values")
    n_a, n_b = len(a), len(b)
    if n_a < MIN_SAMPLES or n_b < MIN_SAMPLES:
        return TestResult(None, None, None, alpha, n_a, n_b,
                          reason=f"needs at least {MIN_SAMPLES} repeats on each side (has {n_a} and {n_b})")
    mean_a, var_a = _mean_var(a)
    mean_b, var_b = _mean_var(b)
    se_a, se_b = var_a / n_a, var_b / n_b
    se2 = se_a + se_b
    if se2 == 0.0:
        if mean_a == mean_b:
            return TestResult(0.0, None, 1.0, alpha, n_a, n_b, reason="both runs identical, without variance")
        t = math.copysign(math.inf, mean_a - mean_b)
        return TestResult(t, None, 0.0, alpha, n_a, n_b, reason="both runs constant, with different values")
    t = (mean_a - mean_b) / math.sqrt(se2)
    df = se2 * se2 / ((se_a * se_a / (n_a - 1) if se_a else 0.0) + (se_b * se_b / (n_b - 1) if se_b else 0.0))
    return TestResult(t, df, student_t_two_sided_p(t, df), alpha, n_a, n_b)


def is_significant(a: Sequence[float], b: Sequence[float], alpha: float = DEFAULT_ALPHA) -> bool:
    """Whether Welch's two-sided t-test finds the means of ``a`` and ``b`` different at level ``alpha``.

    False when the test cannot be run (fewer than two values on a side): an untestable difference is not
    reported as real.
    """
    return welch_t_test(a, b, alpha).significant


def student_t_two_sided_p(t: float, df: float) -> float:
    """Two-sided tail probability P(|T| >= |t|) of Student's t distribution with ``df`` degrees of freedom.

    Uses ``P = I_{df/(df+t^2)}(df/2, 1/2)``; ``df`` may be fractional (Welch).
    """
    if df <= 0 or math.isnan(df):
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isinf(t):
        return 0.0
    x = df / (df + t * t)
    return min(1.0, max(0.0, regularized_incomplete_beta(x, df / 2.0, 0.5)))


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) of Student's t distribution with ``df`` degrees of freedom."""
    tail = student_t_two_sided_p(t, df) / 2.0
    return 1.0 - tail if t > 0 else tail


def regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """``I_x(a, b)``, the regularised incomplete beta function, for 0 <= x <= 1 and a, b > 0.

    The continued fraction converges fast for ``x < (a + 1) / (a + b + 2)``; on the other side the symmetry
    ``I_x(a, b) = 1 - I_{1-x}(b, a)`` is used (Numerical Recipes, 3rd ed., eq. 6.4.5 and ``betai``).
    """
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must lie in [0, 1], got {x}")
    if a <= 0 or b <= 0:
        raise ValueError(f"a and b must be > 0, got a={a}, b={b}")
    if x == 0.0 or x == 1.0:
        return x
    # Prefactor x^a (1-x)^b / (a B(a, b)), in logarithms to stay finite for large a, b.
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(1.0 - x, b, a) / b


def _beta_continued_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of the incomplete beta function, by the modified Lentz method."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _CF_TINY else _CF_TINY)
    h = d
    for m in range(1, _CF_MAX_ITERATIONS + 1):
        m2 = 2 * m
        # Even step: d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m))
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _CF_TINY else _CF_TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _CF_TINY else _CF_TINY
        h *= d * c
        # Odd step: d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1))
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _CF_TINY else _CF_TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _CF_TINY else _CF_TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _CF_EPS:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (x={x}, a={a}, b={b})")


# ----------------------------------------------------------------------------------------------------------
# What the test could have found: its power


def normal_cdf(x: float) -> float:
    """P(Z <= x) of the standard normal distribution."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def student_t_critical(alpha: float, df: float) -> float:
    """The two-sided critical value of Student's t with ``df`` degrees of freedom: the |t| whose p-value is
    ``alpha`` (12.71 for alpha 0.05 and df 1; 1.96 as df grows)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    low, high = 0.0, 1.0
    while student_t_two_sided_p(high, df) > alpha:
        low, high = high, high * 2.0
    while high - low > _SOLVE_RTOL * high:
        middle = (low + high) / 2.0
        if student_t_two_sided_p(middle, df) > alpha:
            low = middle
        else:
            high = middle
    return high


def welch_power(noncentrality: float, df: float, alpha: float = DEFAULT_ALPHA) -> float:
    """The probability that the two-sided t-test at ``alpha`` with ``df`` degrees of freedom calls a difference
    significant when the true difference is ``noncentrality`` standard errors (the module docstring's integral).

    Raises:
        ValueError: ``df`` is not > 0, ``alpha`` is not in (0, 1), or ``noncentrality`` is not finite.
    """
    if not df > 0 or math.isinf(df):
        raise ValueError(f"degrees of freedom must be finite and > 0, got {df}")
    if not math.isfinite(noncentrality):
        raise ValueError(f"the noncentrality must be finite, got {noncentrality}")
    critical = student_t_critical(alpha, df)
    shift = abs(noncentrality)
    spread = 1.0 / math.sqrt(2.0 * df)  # W's standard deviation, to first order
    low, high = max(0.0, 1.0 - _W_SPAN * spread), 1.0 + _W_SPAN * spread
    # log of W's density: df^(df/2) w^(df-1) exp(-df w^2 / 2) / (2^(df/2-1) Gamma(df/2))
    log_norm = 0.5 * df * math.log(df) - (0.5 * df - 1.0) * math.log(2.0) - math.lgamma(0.5 * df)

    def integrand(w: float) -> float:
        if w <= 0.0:
            return 0.0
        density = math.exp(log_norm + (df - 1.0) * math.log(w) - 0.5 * df * w * w)
        return density * (normal_cdf(shift - critical * w) + normal_cdf(-shift - critical * w))

    # The rejection probability falls from 1 to 0 around w = shift / critical, over a width of ~1 / critical:
    # that stretch gets panels of its own, so that a steep step (large critical values, df near 1) is resolved.
    step = shift / critical
    edges = sorted({min(high, max(low, x)) for x in (low, step - _STEP_SPAN / critical, step + _STEP_SPAN / critical,
                                                     high)})
    return min(1.0, max(0.0, sum(_simpson(integrand, a, b) for a, b in zip(edges, edges[1:], strict=False))))


def _simpson(f: Callable[[float], float], a: float, b: float) -> float:
    """Simpson's rule over [a, b] in :data:`_POWER_PANELS` panels; from a = 0 in the variable s with w = b s^2,
    which tames the density's w^(df-1) at 0 (df < 2)."""
    n = _POWER_PANELS
    if a == 0.0:
        def g(s: float) -> float:
            return f(b * s * s) * 2.0 * b * s
        lo, hi = 0.0, 1.0
    else:
        g, lo, hi = f, a, b
    h = (hi - lo) / n
    total = g(lo) + g(hi) + sum((4.0 if k % 2 else 2.0) * g(lo + k * h) for k in range(1, n))
    return total * h / 3.0


def _se_df(var_a: float, n_a: int, var_b: float, n_b: int) -> tuple[float, float | None]:
    """Welch's standard error of the difference of means, and its degrees of freedom (None without variance)."""
    se_a, se_b = var_a / n_a, var_b / n_b
    se2 = se_a + se_b
    if se2 == 0.0:
        return 0.0, None
    df = se2 * se2 / ((se_a * se_a / (n_a - 1) if se_a else 0.0) + (se_b * se_b / (n_b - 1) if se_b else 0.0))
    return math.sqrt(se2), df


def _smallest_noncentrality(df: float, alpha: float, power: float) -> float:
    """The noncentrality whose power is ``power`` (power rises with it: bisection)."""
    low, high = 0.0, student_t_critical(alpha, df) + 4.0
    while welch_power(high, df, alpha) < power:
        low, high = high, high * 2.0
    while high - low > _SOLVE_RTOL * high:
        middle = (low + high) / 2.0
        if welch_power(middle, df, alpha) < power:
            low = middle
        else:
            high = middle
    return high


def _check_power_arguments(a: Sequence[float], b: Sequence[float], alpha: float, power: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if not alpha < power < 1.0:
        raise ValueError(f"power must lie in (alpha, 1), got {power}")
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        raise ValueError(f"needs at least {MIN_SAMPLES} values on each side (has {len(a)} and {len(b)})")
    if not all(math.isfinite(float(v)) for v in (*a, *b)):
        raise ValueError("the power analysis needs finite values")


def detectable_difference(a: Sequence[float], b: Sequence[float], alpha: float = DEFAULT_ALPHA,
                          power: float = DEFAULT_POWER) -> float:
    """The smallest true difference of means that Welch's test on samples of ``a``'s and ``b``'s sizes and
    variances calls significant with probability ``power``, in the values' unit (0 when neither side varies: any
    difference is then significant).

    Raises:
        ValueError: fewer than two values on a side, a value that is not finite, ``alpha`` not in (0, 1) or
            ``power`` not in (alpha, 1).
    """
    _check_power_arguments(a, b, alpha, power)
    (_, var_a), (_, var_b) = _mean_var([float(v) for v in a]), _mean_var([float(v) for v in b])
    se, df = _se_df(var_a, len(a), var_b, len(b))
    if df is None:
        return 0.0
    return _smallest_noncentrality(df, alpha, power) * se


def repeats_needed(a: Sequence[float], b: Sequence[float], difference: float, alpha: float = DEFAULT_ALPHA,
                   power: float = DEFAULT_POWER, most: int = MAX_REPEATS_SEARCHED) -> int | None:
    """How many repeats per run (the same number on both sides) Welch's test needs to call a true ``difference``
    of means significant with probability ``power``, at the variances of ``a`` and ``b``.

    Returns:
        The smallest such count, at least :data:`MIN_SAMPLES`; None when even ``most`` repeats are not enough
        (always so for a zero ``difference`` amid noise). Without variance on either side, :data:`MIN_SAMPLES`
        for any nonzero difference.

    Raises:
        ValueError: as :func:`detectable_difference`, or a negative or non-finite ``difference``.
    """
    _check_power_arguments(a, b, alpha, power)
    if not difference >= 0.0 or math.isinf(difference):
        raise ValueError(f"the difference must be finite and >= 0, got {difference}")
    (_, var_a), (_, var_b) = _mean_var([float(v) for v in a]), _mean_var([float(v) for v in b])
    if var_a + var_b == 0.0:
        return MIN_SAMPLES if difference > 0.0 else None

    def enough(n: int) -> bool:
        # Welch's se and df with n on both sides: se^2 = (va + vb) / n, df = (n - 1)(va + vb)^2 / (va^2 + vb^2).
        se = math.sqrt((var_a + var_b) / n)
        df = (n - 1) * (var_a + var_b) ** 2 / (var_a * var_a + var_b * var_b)
        return welch_power(difference / se, df, alpha) >= power

    if not enough(most):
        return None
    low, high = MIN_SAMPLES - 1, most  # enough(high); low is not (or below the minimum)
    while high - low > 1:
        middle = (low + high) // 2
        if enough(middle):
            high = middle
        else:
            low = middle
    return high
