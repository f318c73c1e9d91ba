"""tutorial_lib.stats against scipy.stats (its values written in as literals: scipy is not a dependency)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tutorial_lib import stats
from tutorial_lib.stats import compare_paired, over_seeds, summarise, t_cdf, t_quantile

# scipy.stats.t.ppf(p, df), scipy 1.x
T_PPF = {
    (0.975, 1): 12.7062047362, (0.975, 2): 4.3026527297, (0.975, 3): 3.1824463053, (0.975, 4): 2.7764451052,
    (0.975, 5): 2.5705818356, (0.975, 9): 2.2621571628, (0.975, 29): 2.0452296421, (0.975, 100): 1.9839715185,
    (0.995, 1): 63.6567411629, (0.995, 4): 4.6040948713, (0.995, 29): 2.7563859037,
    (0.95, 2): 2.9199855804, (0.95, 9): 1.8331129327, (0.95, 100): 1.6602343261,
}
BASELINE = [2.038, 2.041, 2.047, 2.039, 2.040]  # chapter 11's five baseline seeds, and no_scaling's
NO_SCALING = [2.030, 2.033, 2.032, 2.026, 2.026]


def test_the_modules_example_runs_as_written():
    import doctest

    assert doctest.testmod(stats).failed == 0


@pytest.mark.parametrize(("p", "df"), list(T_PPF))
def test_t_quantile_equals_scipy(p, df):
    assert t_quantile(p, df) == pytest.approx(T_PPF[p, df], abs=1e-8)
    assert t_quantile(1 - p, df) == pytest.approx(-T_PPF[p, df], abs=1e-8)


def test_t_cdf_equals_scipy():
    assert t_cdf(2.0, 4) == pytest.approx(0.9419417382415922, abs=1e-12)  # scipy.stats.t.cdf(2.0, 4)
    assert t_cdf(-1.3, 7) == pytest.approx(0.11738391769618862, abs=1e-12)  # scipy.stats.t.cdf(-1.3, 7)
    assert t_cdf(0.0, 3) == 0.5


def test_paired_comparison_equals_scipys_paired_t_test():
    comparison = compare_paired(BASELINE, NO_SCALING)
    # scipy.stats.ttest_rel(NO_SCALING, BASELINE): statistic and confidence_interval(0.95)
    assert comparison.t == pytest.approx(-7.7162052207576295, rel=1e-9)
    assert comparison.low == pytest.approx(-0.015773912214472392, abs=1e-12)
    assert comparison.high == pytest.approx(-0.007426087785527895, abs=1e-12)
    assert comparison.n == 5 and comparison.difference == pytest.approx(-0.0116, abs=1e-12)
    assert comparison.describe() == "Δ = -0.012 ± 0.004 (95% CI, 5 paired seeds)"
    assert comparison.verdict() == "better" and comparison.verdict(lower_is_better=False) == "worse"


def test_an_interval_that_holds_zero_is_no_verdict():
    comparison = compare_paired([2.0, 2.1, 1.9], [2.05, 2.0, 1.95])
    assert comparison.low < 0 < comparison.high
    assert comparison.verdict() == "no difference detected at n = 3"


def test_pairing_by_seed_removes_what_the_seeds_share():
    """A 0.01 gain under a seed effect eight times larger: paired by seed it is found; the unpaired interval of the
    two means (the same t table, 8 degrees of freedom) holds 0 and finds nothing."""
    seed_effect = [0.0, 0.1, -0.1, 0.05, -0.05]
    a = [2.0 + e for e in seed_effect]
    b = [2.0 + e - 0.01 + 0.001 * (-1) ** i for i, e in enumerate(seed_effect)]
    assert compare_paired(a, b).verdict() == "better"
    gap = summarise(b).mean - summarise(a).mean
    unpaired_margin = t_quantile(0.975, 8) * math.hypot(summarise(a).sem, summarise(b).sem)
    assert summarise(a).sd > 8 * abs(gap) and abs(gap) < unpaired_margin


def test_summary_and_identical_differences():
    summary = summarise([1.0, 2.0, 3.0, 4.0])
    assert (summary.mean, summary.n) == (2.5, 4)
    assert summary.sd == pytest.approx(np.std([1, 2, 3, 4], ddof=1)) and summary.sem == pytest.approx(summary.sd / 2)
    assert summary.describe() == "2.500 ± 0.645 (mean ± standard error, n = 4)"
    same = compare_paired([1.0, 2.0, 3.0], [1.5, 2.5, 3.5])
    assert same.low == same.high == 0.5 and same.t == math.inf and same.verdict(lower_is_better=False) == "better"


def test_over_seeds_runs_each_seed_in_order():
    assert over_seeds(lambda seed: seed * 0.5, range(3)) == [0.0, 0.5, 1.0]
    assert over_seeds(lambda seed: np.float32(seed) + 0.5, [np.int64(2)]) == [2.5]  # numpy numbers are numbers


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: compare_paired([1.0, 2.0], [1.0, 2.0, 3.0]), "one value per seed"),
        (lambda: compare_paired([1.0], [2.0]), "at least 2 values"),
        (lambda: compare_paired([1.0, float("nan")], [1.0, 2.0]), "finite numbers"),
        (lambda: compare_paired("12", [1.0, 2.0]), "sequence of numbers"),
        (lambda: compare_paired([1.0, 2.0], [1.0, 2.0], confidence=95), "confidence"),
        (lambda: t_quantile(1.0, 3), "p must be"),
        (lambda: t_quantile(0.9, 0), "df must be"),
        (lambda: over_seeds(lambda seed: 1.0, []), "seeds must be"),
    ],
)
def test_bad_input_is_named(call, message, without_annotation_checks):
    with without_annotation_checks(), pytest.raises(ValueError, match=message):
        call()
