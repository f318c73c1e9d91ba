"""Seeds and noise: a result over several seeds, and two settings compared seed by seed (the chapters' experiments).

A run's final loss depends on its seed (the initial weights, the order of the batches). One run of A and one of B
cannot say whether A beats B; several seeds of each can, compared **paired by seed**: run ``seed`` of A and run
``seed`` of B share their initial weights and batches, so their difference cancels what the seed does to both alike
(how much, the correlation of the pairs says: near +1 pairing helps much, near 0 or below it helps nothing). The
mean of the differences, with a Student-t interval on ``n - 1`` degrees of freedom, says how large the effect is and
how sure we are of it; the verdict is read from the interval alone. An interval that holds 0 is "no difference
detected", and its ends say the largest effect either way that the seeds do not rule out.

The example is Student's own (1908): the extra hours of sleep of ten patients under two drugs (Cushny and Peebles;
R's ``sleep`` data), each patient given both, paired as seeds are; R's ``t.test(..., paired = TRUE)`` gives
t = 4.0621, p = 0.002833, interval 0.7001 to 2.4599.

    >>> drug_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
    >>> drug_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]
    >>> comparison = compare_paired(drug_1, drug_2)
    >>> comparison.describe(digits=2)
    'Δ = +1.58 ± 0.88 (95% CI, 10 paired seeds)'
    >>> comparison.verdict(lower_is_better=False), round(comparison.p_value, 6), round(comparison.correlation, 3)
    ('better', 0.002833, 0.795)

A table compares several rows with one baseline: each row's 5% chance of a false "better" or "worse" adds up over the
rows. :func:`holm` judges the family together (Holm's step-down method, which keeps the chance of any false verdict in
the family at or under 5%).

The t quantile is computed here (the t distribution's CDF through the regularised incomplete beta function, then
bisection), without scipy; the tests compare it with ``scipy.stats.t.ppf`` at the values written into them.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
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
    # Pearson's correlation of a[i] and b[i] over the seeds: how much the pairing cancels (nan when either is constant).
    correlation: float = math.nan

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def describe(self, digits: int = 3) -> str:
        """``"Δ = +0.017 ± 0.004 (95% CI, 5 paired seeds)"``."""
        return (f"Δ = {self.difference:+.{digits}f} ± {self.half_width:.{digits}f} "
                f"({self.confidence:.0%} CI, {self.n} paired seeds)")

    @property
    def p_value(self) -> float:
        """The two-sided p-value of the paired t-test (no difference as the null hypothesis)."""
        if math.isinf(self.t):
            return 0.0
        return min(1.0, 2 * (1 - t_cdf(abs(self.t), self.n - 1)))

    def not_ruled_out(self, *, lower_is_better: bool = True, digits: int = 3) -> str:
        """What an interval that holds 0 still allows, worded for a verdict of no difference: ``"rules out a gain
        larger than 0.150 and a loss larger than 0.020"`` (the interval's ends, B against A)."""
        gain, loss = (-self.low, self.high) if lower_is_better else (self.high, -self.low)
        return f"rules out a gain larger than {max(gain, 0):.{digits}f} and a loss larger than {max(loss, 0):.{digits}f}"

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
                            confidence, _correlation(a, b))


def _correlation(a: list[float], b: list[float]) -> float:
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - mean_a) * (y - mean_b) for x, y in zip(a, b))
    spread = math.sqrt(sum((x - mean_a) ** 2 for x in a) * sum((y - mean_b) ** 2 for y in b))
    return cov / spread if spread > 0 else math.nan


@dataclass(frozen=True)
class FamilyVerdict:
    """One comparison of a family judged by :func:`holm`: the comparison, its Holm-adjusted p-value and the verdict."""

    comparison: PairedComparison
    adjusted_p: float
    verdict: str
    family_size: int = 1

    @property
    def p_value(self) -> float:
        """The comparison's own p-value, before the adjustment."""
        return self.comparison.p_value

    def describe(self, digits: int = 4) -> str:
        """The verdict with what it was judged in: ``"worse (Holm p = 0.0124, family of 3)"``,
        ``"no difference detected at n = 3 (Holm p = 0.0589, family of 4)"``."""
        word = self.verdict.split(" (Holm, family of ")[0]
        return f"{word} (Holm p = {self.adjusted_p:.{digits}f}, family of {self.family_size})"


def holm(comparisons: dict[str, PairedComparison], *, lower_is_better: bool | Mapping[str, bool] = True,
         alpha: float = 0.05) -> dict[str, FamilyVerdict]:
    """Judge a family of comparisons together, by Holm's step-down method (Holm 1979): sort the m p-values, multiply
    the k-th smallest by m - k + 1 (so the smallest by m), carry the largest so far forward, cap at 1; a row whose
    adjusted p-value is under ``alpha`` gets "better" or "worse", the others "no difference detected at n = N (Holm,
    family of m)". The chance of any false "better" or "worse" in the family stays at or under ``alpha``.
    ``lower_is_better`` is one direction for the whole family, or one per comparison (a family that mixes a loss with
    an accuracy): the direction names the verdict, it does not change the p-values."""
    if not isinstance(comparisons, dict) or not comparisons:
        raise ValueError(f"comparisons must be a non-empty dict of name -> PairedComparison, got {comparisons!r}")
    bad = [name for name, c in comparisons.items() if not isinstance(c, PairedComparison)]
    if bad:
        raise ValueError(f"comparisons must map names to compare_paired's results; not one: {bad}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    directions = lower_is_better if isinstance(lower_is_better, Mapping) else dict.fromkeys(comparisons, lower_is_better)
    if set(directions) != set(comparisons):
        raise ValueError(f"lower_is_better must give a direction for each comparison: missing "
                         f"{sorted(set(comparisons) - set(directions))}, unknown {sorted(set(directions) - set(comparisons))}")
    m = len(comparisons)
    order = sorted(comparisons, key=lambda name: comparisons[name].p_value)
    adjusted, running = {}, 0.0
    for k, name in enumerate(order):
        running = max(running, min(1.0, (m - k) * comparisons[name].p_value))
        adjusted[name] = running
    verdicts = {}
    for name, comparison in comparisons.items():
        if adjusted[name] < alpha:
            lower = comparison.difference < 0
            verdict = "better" if lower == directions[name] else "worse"
        else:
            verdict = f"no difference detected at n = {comparison.n} (Holm, family of {m})"
        verdicts[name] = FamilyVerdict(comparison, adjusted[name], verdict, m)
    return verdicts


@dataclass(frozen=True)
class PairedCounts:
    """Two methods scored right or wrong on the same items: the items only B gets right, those only A gets right, and
    McNemar's exact test of whether either wins more of them than a coin would give it."""

    only_b: int
    only_a: int
    p_value: float

    def verdict(self, *, alpha: float = 0.05) -> str:
        """``"better"`` (B wins more of the items where they disagree), ``"worse"``, or ``"no difference detected"``."""
        if self.p_value >= alpha:
            return f"no difference detected ({self.only_b} against {self.only_a})"
        return "better" if self.only_b > self.only_a else "worse"


def mcnemar(only_b: int, only_a: int) -> PairedCounts:
    """McNemar's exact test on paired right/wrong outcomes: only the items where A and B disagree count, and under no
    difference each of them is a fair coin's toss; the two-sided p-value is twice the binomial tail of the smaller
    count, capped at 1 (``mcnemar(3, 0).p_value`` = 2 · 0.5³ = 0.25)."""
    for name, count in (("only_b", only_b), ("only_a", only_a)):
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0:
            raise ValueError(f"{name} must be a count of items (an int >= 0), got {count!r}")
    n, smaller = only_b + only_a, min(only_b, only_a)
    tail = sum(math.comb(n, k) for k in range(smaller + 1)) / 2**n if n else 1.0
    return PairedCounts(int(only_b), int(only_a), min(1.0, 2 * tail))


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
