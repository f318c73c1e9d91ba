"""Predict-then-measure exercises (tutorial_lib.checks.prediction): right within a factor, misses sized, misconceptions
named, a prediction that is not a number told so, and a prediction graded only as recorded before its measurement."""

from __future__ import annotations

import pytest

from tutorial_lib.checks import check, record_prediction
from tutorial_lib.checks.core import get_exercise, graded_cell, register
from tutorial_lib.checks.prediction import (
    Misconception,
    first_record,
    predict_number,
    shown_records,
    wrong_prediction,
    write_records,
)

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


def test_a_prediction_within_the_factor_is_right_and_told_how_close(predict):
    result = predict("98.predict_demo", _answer(60))
    assert result.passed and result.points == 1
    assert "You predicted 60 for the variance of q·k at d_k = 64; the measurement is 64.3, 7% away" in result.verdict


def test_a_miss_is_sized(predict):
    result = predict("98.predict_demo", _answer(20))
    assert not result.passed and result.mistake is None
    assert "prediction missed (0/1 point). You predicted 20" in result.verdict and "3.2× too small" in result.verdict
    assert "within a factor of 1.5 counts as right" in result.verdict


@pytest.mark.parametrize("value", [1, 1.2, 0.8])
def test_a_prediction_near_a_misconception_names_it(predict, value):
    result = predict("98.predict_demo", _answer(value))
    assert result.mistake == "no_growth"
    assert "It looks like you expected the variance to stay at 1 whatever d_k" in result.verdict


def test_a_prediction_that_is_not_a_number_is_told_what_a_prediction_is(predict):
    result = predict("98.predict_demo", _answer("64"))
    assert result.kind == "wrong_type" and "must be a number" in result.verdict


def test_an_unanswered_prediction_is_not_attempted(predict):
    def prediction():
        raise NotImplementedError("write your solution here")

    assert predict("98.predict_demo", prediction).kind == "not_attempted"


def test_within_must_be_a_factor():
    with pytest.raises(ValueError, match="within"):
        predict_number("98.x", measure=lambda: 1.0, question="q", within=1.0, misconceptions=[])


# --- recorded before the measurement ----------------------------------------------------------------------------------


def test_the_measuring_cell_refuses_until_a_prediction_is_written(capsys):
    def prediction():
        raise NotImplementedError("write your solution here")

    assert not record_prediction("98.predict_demo", prediction)
    assert "Write your prediction in prediction() first" in capsys.readouterr().out
    assert not record_prediction("98.predict_demo", _answer("64"))
    assert "must be a number" in capsys.readouterr().out
    assert first_record("98.predict_demo") is None  # nothing recorded, so nothing may be measured


def test_a_recorded_prediction_is_printed_as_the_evidence_the_grader_reads(capsys):
    assert record_prediction("98.predict_demo", _answer(60))
    out = capsys.readouterr().out
    assert out == "Prediction recorded before the measurement (98.predict_demo): 60.\n"
    assert shown_records(out) == [("98.predict_demo", 60.0)]
    assert check("98.predict_demo", _answer(60)).passed


def test_a_prediction_never_recorded_scores_zero():
    result = check("98.predict_demo", _answer(64))
    assert result.kind == "not_recorded" and result.points == 0
    assert "run the measuring cell" in result.verdict


def test_a_prediction_changed_after_the_measurement_scores_zero(capsys):
    assert record_prediction("98.predict_demo", _answer(1))  # the measurement is shown after this
    assert record_prediction("98.predict_demo", _answer(64.3))  # the printed number, typed in afterwards
    out = capsys.readouterr().out
    assert out.count("Prediction recorded before the measurement (98.predict_demo): 1.") == 2
    assert "the one recorded before it is the one graded" in out
    result = check("98.predict_demo", _answer(64.3))
    assert result.kind == "predicted_after_measurement" and result.points == 0
    assert "1 was recorded before the measurement was shown" in result.verdict
    # a restarted kernel reads the same record file, so a restart does not forget the first prediction
    assert first_record("98.predict_demo") == 1.0


def _runs_the_package():
    from tutorial_lib.stats import t_quantile

    return 60 + 0 * t_quantile(0.975, 3)  # a number near the measurement, computed through the package


def test_a_prediction_that_runs_the_package_is_refused_by_the_check(predict):
    result = predict("98.predict_demo", _runs_the_package)
    assert result.kind == "calls_the_work" and result.points == 0
    assert "Your prediction runs `t_quantile` from `tutorial_lib.stats`" in result.verdict
    measurement = get_exercise("98.predict_demo").reference
    result = predict("98.predict_demo", lambda: measurement())  # the measurement itself
    assert result.kind == "calls_the_work" and "`measurement` from `tutorial_lib.checks.prediction`" in result.verdict


def test_a_prediction_that_runs_the_package_is_not_recorded_and_the_measurement_not_shown(capsys):
    assert not record_prediction("98.predict_demo", _runs_the_package)
    assert "Nothing recorded: _runs_the_package() runs `t_quantile` from `tutorial_lib.stats`" in capsys.readouterr().out
    assert first_record("98.predict_demo") is None
    assert record_prediction("98.predict_demo", _answer(60))  # plain arithmetic is recorded, and graded
    assert check("98.predict_demo", _answer(60)).passed


def test_an_unknown_or_non_prediction_exercise_cannot_be_recorded():
    with pytest.raises(ValueError, match="99.nothing"):
        record_prediction("99.nothing", _answer(1))
    with pytest.raises(ValueError, match="not a prediction exercise"):
        record_prediction("03.attention", _answer(1))


def test_in_the_grader_only_records_under_its_secret_count(capsys):
    write_records([{"exercise": "98.predict_demo", "value": 64.0, "secret": None}])  # a learner's own record
    with graded_cell("s3cret"):
        assert check("98.predict_demo", _answer(64)).kind == "not_recorded"
        assert record_prediction("98.predict_demo", _answer(64))
        assert check("98.predict_demo", _answer(64)).passed
