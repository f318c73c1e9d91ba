"""Predict-then-measure exercises: the learner writes down a number before a cell measures it.

A prediction is an :class:`~tutorial_lib.checks.core.Exercise` like the others, so the grader, the check log and the
catalogue tests treat it alike: the learner's answer is a function with no arguments that returns the prediction
(``def predicted_ratio(): return 64``), checked with ``check("03.predict_variance", predicted_ratio)`` after the cell
that makes the measurement. The check makes the measurement itself (the package's deterministic function), so a
prediction cannot be graded against a number the learner typed into the measuring cell.

A prediction within a factor of ``within`` of the measurement is right; otherwise the verdict says by how much it
missed, and when the prediction is near a catalogued misconception (the value a common wrong model of the chapter
predicts: "the variance does not grow", "√d_k instead of d_k") it names that misconception and explains it. The
misconceptions are :class:`~tutorial_lib.checks.core.Mistake` entries whose variant returns their value, so the
catalogue tests check that each one is named as itself.

    register(predict_number(
        "03.predict_variance", measure=lambda: qk_variance([64])[64][0],
        question="the variance of q·k at d_k = 64", within=1.5, points=1,
        misconceptions=[Misconception("no_growth", 1.0, "expected the variance to stay at 1 ...", "..."), ...],
        mutants=[Mutant(...)],
    ))
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, WrongOutput


@dataclass(frozen=True)
class Misconception:
    """A wrong model of the chapter and the number it predicts; ``description`` completes "It looks like you …"."""

    name: str
    value: float
    description: str
    fix: str


def _number(value: Any) -> float:
    """The learner's prediction as a float, or a WrongOutput saying what a prediction must be."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise WrongOutput("wrong_type", f"your prediction must be a number (an int or a float), got {shown}")
    if not math.isfinite(float(value)):
        raise WrongOutput("wrong_values", f"your prediction must be a finite number, got {float(value)!r}")
    return float(value)


def _factor(a: float, b: float) -> float:
    """How many times larger the larger of two numbers of the same sign is; inf across signs or with a zero."""
    if a == b:
        return 1.0
    if a == 0 or b == 0 or (a > 0) != (b > 0):
        return math.inf
    return max(a / b, b / a)


def _shown(value: float) -> str:
    return f"{value:.3g}"


class _Prediction:
    """A fixed prediction, as the catalogue's misconceptions and mutants answer.

    An object rather than a closure: under the jaxtyping import hook (the test suite's) every function of the package
    is wrapped in the same wrapper code, so a closure's code would be found on the traceback of the exercise's own
    ``call`` and its verdicts would read "your code raised WrongOutput".
    """

    def __init__(self, value: float) -> None:
        self.value = value

    def __call__(self) -> float:
        return self.value


def predict_number(
    exercise_id: str,
    *,
    measure: Callable[[], float],
    question: str,
    within: float,
    misconceptions: Sequence[Misconception],
    mutants: Sequence[Mutant] = (),
    points: int = 1,
) -> Exercise:
    """A predict-then-measure exercise: right within a factor ``within`` of ``measure()`` (computed once, lazily).

    ``question`` names what is predicted ("the variance of q·k at d_k = 64") for the verdicts.
    """
    if not within > 1:
        raise ValueError(f"within must be a factor greater than 1, got {within!r}")
    measured = functools.cache(lambda: float(measure()))

    def measurement() -> float:
        """The measurement the prediction is compared with (the exercise's reference)."""
        return measured()

    def near(prediction: float) -> Misconception | None:
        close = [m for m in misconceptions if _factor(prediction, m.value) < within]
        return min(close, key=lambda m: _factor(prediction, m.value)) if close else None

    def miss(prediction: float) -> str:
        truth = measured()
        factor = _factor(prediction, truth)
        if math.isinf(factor):
            size = "on the other side of zero" if prediction != 0 and truth != 0 else "zero where the other is not"
        else:
            size = f"{factor:.2g}× {'too large' if abs(prediction) > abs(truth) else 'too small'}"
        return size

    def cases(generator: Any) -> list[Case]:
        # Measure while the case is built, outside the time limit of the learner's call: a slow first measurement
        # (an import, a loaded machine) must not read as the learner's answer being too slow. Cached for the call.
        measured()
        return [Case.of(note="the measurement")]

    def call(obj: Any, args: tuple[Any, ...]) -> float:
        if obj is measurement:
            return measured()
        prediction = _number(obj())
        truth = measured()
        if _factor(prediction, truth) <= within:
            return truth  # right: the same value as the reference, so the check passes
        misconception = near(prediction)
        if misconception is not None:  # the same text for every prediction near it, so the catalogue names it
            raise WrongOutput("wrong_values", f"your prediction of {question} is near {_shown(misconception.value)}, "
                                              f"but the measurement is {_shown(truth)} "
                                              f"({miss(misconception.value)})")
        raise WrongOutput("wrong_values", f"you predicted {_shown(prediction)} for {question}, but the measurement "
                                          f"is {_shown(truth)} ({miss(prediction)}; within a factor of {within:g} "
                                          f"counts as right)")

    def on_pass(obj: Any) -> str:
        prediction, truth = _number(obj()), measured()
        off = abs(prediction - truth) / abs(truth) if truth else abs(prediction)
        return (f"You predicted {_shown(prediction)} for {question}; the measurement is {_shown(truth)}, "
                f"{off:.0%} away (within a factor of {within:g} counts as right)")

    return Exercise(
        id=exercise_id,
        reference=measurement,
        cases=cases,
        points=points,
        checked=f"the prediction of {question} is within a factor of {within:g} of the measurement",
        mistakes=tuple(Mistake(m.name, m.description, m.fix, (_Prediction(m.value),)) for m in misconceptions),
        mutants=tuple(mutants),
        call=call,
        tolerance=(0.0, 0.0),
        on_pass=on_pass,
    )


def wrong_prediction(name: str, value: float, what: str) -> Mutant:
    """A mutant for the catalogue tests: a prediction of ``value`` that no misconception explains (``what`` says why)."""
    return Mutant(name, what, _Prediction(value))
