"""Seeds and noise: a result over several seeds, and two settings compared seed by seed (the chapters' experiments).

A run's final loss depends on its seed (the initial weights, the order of the batches). One run of A and one of B
cannot say whether A beats B; several seeds of each can, compared **paired by seed**: run ``seed`` of A and run
``seed`` of B share their initial weights and batches, so their difference cancels most of what the seed does. The
mean of the differences, with a Student-t interval on ``n - 1`` degrees of freedom, says how large the effect is and
how sure we are of it; the verdict is read from the interval alone.

    >>> baseline = [2.038, 2.041, 2.047, 2.039, 2.040]   # final validation losses, seeds 0-4
    >>> no_scaling = [2.030, 2.033, 2.032, 2.026, 2.026]
    >>> comparison = compare_paired(baseline, no_scaling)
    >>> comparison.describe()
    'Δ = -0.012 ± 0.004 (95% CI, 5 paired seeds)'
    >>> comparison.verdict()
    'better'

The t quantile is computed here (the t distribution's CDF through the regularised incomplete beta function, then
bisection), without scipy; the tests compare it with ``scipy.stats.t.ppf`` at the values written into them.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass


def over_seeds(run: Callable[[int], float], seeds: Iterable[numbers.Integral]) -> list[float]:
    """``run(seed)`` for every seed, in order: one number per seed (a final loss, an accuracy)."""
    seeds = list(seeds)
    if not seeds or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) for s in seeds):
        raise ValueError(f"seeds must be a non-empty sequence of ints, got {seeds!r}")
    return [float(run(int(seed))) for seed in seeds]


@dataclass(frozen=True)
class Summary:
    """The mean of ``n`` values, their sample standard deviation and the mean's standard error (sd / √n)."""

    mean: float
    sd: float
    sem: float
    n: int

    def describe(self, digits: int = 3) -> str:
        return f"{self.mean:.{digits}f} ± {self.sem:.{digits}f} (mean ± standard error, n = {self.n})"


def summarise(values: Sequence[numbers.Real]) -> Summary:
    """Mean, sample standard deviation (n - 1 in the denominator) and standard error of ``values`` (at least 2)."""
    values = _check_values("values", values)
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return Summary(mean, sd, sd / math.sqrt(n), n)


@dataclass(frozen=True)
class PairedComparison:
    """B minus A, seed by seed: the mean difference, its ``confidence`` interval and the t statistic."""

    difference: float  # mean of b[i] - a[i]
    low: float
    high: float
    t: float  # difference / its standard error (±inf when every difference is the same and not 0)
    n: int
    confidence: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def describe(self, digits: int = 3) -> str:
        """``"Δ = +0.017 ± 0.004 (95% CI, 5 paired seeds)"``."""
        return (f"Δ = {self.difference:+.{digits}f} ± {self.half_width:.{digits}f} "
                f"({self.confidence:.0%} CI, {self.n} paired seeds)")

    def verdict(self, *, lower_is_better: bool = True) -> str:
        """``"better"`` or ``"worse"`` (B against A) when the interval excludes 0, else ``"no difference detected at
        n = N"``: an interval that holds 0 says the seeds cannot tell, not that there is no effect."""
        if self.low <= 0 <= self.high:
            return f"no difference detected at n = {self.n}"
        lower = self.high < 0
        return "better" if lower == lower_is_better else "worse"


def compare_paired(
    a: Sequence[numbers.Real], b: Sequence[numbers.Real], *, confidence: float = 0.95
) -> PairedComparison:
    """B against A, where ``a[i]`` and ``b[i]`` come from the same seed: Student's paired t-interval on ``n - 1``
    degrees of freedom for the mean of ``b[i] - a[i]``."""
    a, b = _check_values("a", a), _check_values("b", b)
    if len(a) != len(b):
        raise ValueError(f"a and b must hold one value per seed, paired: got {len(a)} and {len(b)} values")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    differences = summarise([y - x for x, y in zip(a, b)])
    margin = t_quantile(0.5 + confidence / 2, differences.n - 1) * differences.sem
    if differences.sem > 0:
        t = differences.mean / differences.sem
    else:
        t = 0.0 if differences.mean == 0 else math.copysign(math.inf, differences.mean)
    return PairedComparison(differences.mean, differences.mean - margin, differences.mean + margin, t, differences.n,
                            confidence)


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t distribution with ``df`` degrees of freedom (``t_quantile(0.975, 4)`` =
    2.776: a 95% interval from 5 values is ±2.776 standard errors, not ±1.96)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be a positive int, got {df!r}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2
    for _ in range(200):  # bisection to the float's resolution
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if t_cdf(middle, df) < p else (low, middle)
    return (low + high) / 2


def t_cdf(x: float, df: int) -> float:
    """P(T ≤ x) for Student's t with ``df`` degrees of freedom: 1 - I_{df/(df+x²)}(df/2, 1/2) / 2 for x ≥ 0."""
    tail = 0.5 * _regularized_incomplete_beta(df / (df + x * x), df / 2, 0.5)
    return 1 - tail if x >= 0 else tail


def _regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), by its continued fraction (Lentz's method), on the side of x where it converges fast."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _regularized_incomplete_beta(1 - x, b, a)
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1) < 1e-15:
            break
    return math.exp(log_front) * fraction / a


def _check_values(name: str, values: Sequence[numbers.Real]) -> list[float]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ValueError(f"{name} must be a sequence of numbers, one per seed, got {values!r}")
    values = list(values)
    if len(values) < 2:
        raise ValueError(f"{name} needs at least 2 values (one per seed) to measure their spread, got {len(values)}")
    if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        raise ValueError(f"{name} must hold finite numbers, got {values!r}")
    return [float(v) for v in values]
