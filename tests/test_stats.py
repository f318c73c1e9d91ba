"""tutorial_lib.stats against scipy.stats (its values written in as literals: scipy is not a dependency)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tutorial_lib import stats
from tutorial_lib.stats import (
    PairedComparison,
    compare_paired,
    holm,
    mcnemar,
    over_seeds,
    summarise,
    t_cdf,
    t_quantile,
)

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


# Student's sleep data (R's `sleep`): extra hours of sleep of ten patients under each of two drugs.
DRUG_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
DRUG_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]


def test_p_value_and_correlation_equal_rs_paired_t_test():
    comparison = compare_paired(DRUG_1, DRUG_2)
    # R: t.test(DRUG_2, DRUG_1, paired = TRUE): t = 4.0621, df = 9, p-value = 0.002833, 95% CI 0.7001142 2.4598858
    assert comparison.t == pytest.approx(4.0621, abs=1e-4) and comparison.p_value == pytest.approx(0.002833, abs=1e-6)
    assert (comparison.low, comparison.high) == pytest.approx((0.7001142, 2.4598858), abs=1e-7)
    # R: cor(DRUG_1, DRUG_2) = 0.7951702
    assert comparison.correlation == pytest.approx(0.7951702, abs=1e-7)
    assert compare_paired([1.0, 2.0, 3.0], [1.5, 2.5, 3.5]).p_value == 0.0  # identical differences: t is infinite


def test_an_interval_that_holds_zero_says_what_it_rules_out():
    comparison = compare_paired([2.0, 2.1, 1.9], [2.05, 2.0, 1.95])
    assert comparison.not_ruled_out() == (f"rules out a gain larger than {-comparison.low:.3f} and a loss larger "
                                          f"than {comparison.high:.3f}")
    higher = comparison.not_ruled_out(lower_is_better=False, digits=2)
    assert higher == f"rules out a gain larger than {comparison.high:.2f} and a loss larger than {-comparison.low:.2f}"


def _with_p(p: float, difference: float = 0.1, n: int = 5) -> PairedComparison:
    """A comparison whose two-sided p-value is ``p``."""
    t = t_quantile(1 - p / 2, n - 1) * (1 if difference > 0 else -1)
    margin = t_quantile(0.975, n - 1) * difference / t
    return PairedComparison(difference, difference - abs(margin), difference + abs(margin), t, n, 0.95)


def test_holm_adjusts_step_down_as_its_definition_says():
    family = {"a": _with_p(0.01), "b": _with_p(0.04), "c": _with_p(0.03, -0.1), "d": _with_p(0.005)}
    judged = holm(family)
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04; carried forward: 0.02, 0.03, 0.06, 0.06
    assert {name: round(v.adjusted_p, 10) for name, v in judged.items()} == {"a": 0.03, "b": 0.06, "c": 0.06, "d": 0.02}
    assert {name: v.verdict for name, v in judged.items()} == {
        "a": "worse", "b": "no difference detected at n = 5 (Holm, family of 4)",
        "c": "no difference detected at n = 5 (Holm, family of 4)", "d": "worse"}
    assert judged["a"].describe() == "worse (Holm p = 0.0300, family of 4)"
    assert judged["b"].describe() == "no difference detected at n = 5 (Holm p = 0.0600, family of 4)"
    assert holm({"c": _with_p(0.03, -0.1)})["c"].verdict == "better"  # alone, as compare_paired's interval says
    assert holm({"a": _with_p(0.01)}, lower_is_better=False)["a"].verdict == "better"


def test_holm_on_chapter_11s_kind_of_table_calls_only_what_survives_the_family():
    """Four large effects at n = 3 and three small ones each under 0.05 alone: in a family of 9, Holm keeps the four."""
    family = {name: _with_p(p, n=3) for name, p in [("no_norm", 0.0016), ("no_ffn", 0.002), ("no_residuals", 0.0021),
                                                    ("no_causal_mask", 0.0027), ("no_warmup", 0.012),
                                                    ("no_positions", 0.014), ("post_norm", 0.027), ("no_scaling", 0.032),
                                                    ("one_head", 0.3)]}
    called = {name for name, v in holm(family).items() if v.verdict == "worse"}
    assert called == {"no_norm", "no_ffn", "no_residuals", "no_causal_mask"}
    assert all(v.p_value < 0.05 for name, v in holm(family).items() if name in {"no_warmup", "no_positions", "post_norm"})


def test_holm_takes_a_direction_per_comparison():
    """A family that mixes a loss (lower is better) with an accuracy (higher is better): the same p-values, each
    verdict named by its own direction."""
    loss_down, accuracy_down = compare_paired([2.0, 2.1, 2.2], [1.0, 1.2, 1.3]), compare_paired([0.9, 0.8, 0.7], [0.1, 0.0, 0.2])
    mixed = holm({"loss": loss_down, "accuracy": accuracy_down}, lower_is_better={"loss": True, "accuracy": False})
    same = holm({"loss": loss_down, "accuracy": accuracy_down})
    assert [v.adjusted_p for v in mixed.values()] == [v.adjusted_p for v in same.values()]
    assert mixed["loss"].verdict == "better" and mixed["accuracy"].verdict == "worse"
    assert same["accuracy"].verdict == "better"  # one direction for the family reads a fall in accuracy as a gain
    with pytest.raises(ValueError, match="lower_is_better must give a direction for each comparison"):
        holm({"loss": loss_down}, lower_is_better={"accuracy": False})


def test_mcnemar_is_the_exact_binomial_test_of_the_disagreements():
    assert mcnemar(3, 0).p_value == 0.25  # 2 · 0.5^3
    assert mcnemar(0, 10).p_value == 2 * 0.5**10 and mcnemar(0, 10).verdict() == "worse"
    assert mcnemar(10, 0).verdict() == "better"
    assert mcnemar(5, 5).p_value == 1.0 and mcnemar(0, 0).p_value == 1.0
    # 2 · P(X ≤ 1) for X ~ Binomial(6, 1/2) = 2 · 7/64
    assert mcnemar(5, 1).p_value == pytest.approx(14 / 64, abs=1e-15)
    assert mcnemar(33, 28).verdict() == "no difference detected (33 against 28)"


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
        (lambda: holm({}), "non-empty dict"),
        (lambda: mcnemar(-1, 2), "only_b must be a count"),
        (lambda: mcnemar(1, 2.5), "only_a must be a count"),
        (lambda: holm({"a": 0.01}), "compare_paired's results"),
        (lambda: holm({"a": _with_p(0.01)}, alpha=5), "alpha"),
    ],
)
def test_bad_input_is_named(call, message, without_annotation_checks):
    with without_annotation_checks(), pytest.raises(ValueError, match=message):
        call()
