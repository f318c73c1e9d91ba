"""Predict-then-measure exercises (tutorial_lib.checks.prediction): right within a factor, misses sized, misconceptions
named, and a prediction that is not a number told so."""

from __future__ import annotations

import pytest

from tutorial_lib.checks import check
from tutorial_lib.checks.core import register
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction

MEASURED = 64.3


def _demo():
    return predict_number(
        "98.predict_demo",
        measure=lambda: MEASURED,
        question="the variance of q·k at d_k = 64",
        within=1.5,
        misconceptions=[
            Misconception("no_growth", 1.0, "expected the variance to stay at 1 whatever d_k",
                          "q·k sums d_k products, each of variance 1, and variances of independent terms add."),
            Misconception("root_growth", 8.0, "predicted √d_k, the growth of the standard deviation",
                          "The standard deviation grows as √d_k; the variance is its square."),
        ],
        mutants=[wrong_prediction("negative", -5.0, "a variance is never negative")],
    )


register(_demo())


def _answer(value):
    def prediction():
        return value

    return prediction


def test_a_prediction_within_the_factor_is_right_and_told_how_close():
    result = check("98.predict_demo", _answer(60))
    assert result.passed and result.points == 1
    assert "You predicted 60 for the variance of q·k at d_k = 64; the measurement is 64.3, 7% away" in result.verdict


def test_a_miss_is_sized():
    result = check("98.predict_demo", _answer(20))
    assert not result.passed and result.mistake is None
    assert "prediction missed (0/1 point). You predicted 20" in result.verdict and "3.2× too small" in result.verdict
    assert "within a factor of 1.5 counts as right" in result.verdict


@pytest.mark.parametrize("value", [1, 1.2, 0.8])
def test_a_prediction_near_a_misconception_names_it(value):
    result = check("98.predict_demo", _answer(value))
    assert result.mistake == "no_growth"
    assert "It looks like you expected the variance to stay at 1 whatever d_k" in result.verdict


def test_a_prediction_that_is_not_a_number_is_told_what_a_prediction_is():
    result = check("98.predict_demo", _answer("64"))
    assert result.kind == "wrong_type" and "must be a number" in result.verdict


def test_an_unanswered_prediction_is_not_attempted():
    def prediction():
        raise NotImplementedError("write your solution here")

    assert check("98.predict_demo", prediction).kind == "not_attempted"


def test_within_must_be_a_factor():
    with pytest.raises(ValueError, match="within"):
        predict_number("98.x", measure=lambda: 1.0, question="q", within=1.0, misconceptions=[])
