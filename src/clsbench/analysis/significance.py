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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

TEST_NAME = "Welch's t-test (two-sided)"
#: Default significance level: a difference is called significant when p < alpha.
DEFAULT_ALPHA = 0.05
#: Minimum number of values on each side for the test to be defined (a variance needs two).
MIN_SAMPLES = 2

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
