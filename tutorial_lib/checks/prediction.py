"""Predict-then-measure exercises: the learner writes down a number before a cell measures it.

A prediction is an :class:`~tutorial_lib.checks.core.Exercise` like the others, so the grader, the check log and the
catalogue tests treat it alike: the learner's answer is a function with no arguments that returns the prediction
(``def predicted_ratio(): return 64``), checked with ``check("03.predict_variance", predicted_ratio)`` after the cell
that makes the measurement. The check makes the measurement itself (the package's deterministic function), so a
prediction cannot be graded against a number the learner typed into the measuring cell.

**Recorded before it is measured.** The measuring cell starts with ``if record_prediction("03.predict_variance",
predicted_variance):``: it calls the learner's function, keeps the number in a small record file (with the grader's
secret when the grader runs the cell) and prints it, and only then does the cell measure and show the result; with no
prediction written yet it says so and the measurement is not shown. The check grades the prediction recorded first:
an answer that differs from it (changed after the measurement was printed) scores 0 with the verdict
``predicted_after_measurement``, and one that was never recorded scores 0 with ``not_recorded``. The record file
(``.tutorial_lib_predictions.json`` in the notebook's folder, or ``$TUTORIAL_LIB_PREDICTIONS``) outlives a restart of
the kernel; the grader starts its own from the records the submitted notebook's outputs show
(:func:`shown_records`), so a prediction changed after its measurement scores 0 there too.

**Worked out, not run.** A prediction's function may call nothing of ``tutorial_lib`` (:data:`NOT_IN_A_PREDICTION`):
one that runs the measurement, or the models and helpers it is made of, is not recorded, and its check scores 0 with
the verdict ``calls_the_work`` naming what it ran (traced as any answer is, :mod:`tutorial_lib.checks.tracing`).

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
import json
import math
import numbers
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tutorial_lib.checks.core import (
    WORKED_OUT,
    Case,
    Exercise,
    Mistake,
    Mutant,
    WrongOutput,
    get_exercise,
    graded_secret,
)
from tutorial_lib.checks.tracing import CallTrace, Forbidden

PREDICTIONS_ENV = "TUTORIAL_LIB_PREDICTIONS"  # where the records are kept; default: the notebook's folder
RECORDS_FILE = ".tutorial_lib_predictions.json"
# The line a recording prints: the evidence, in a notebook's saved outputs, of what was predicted before measuring.
_RECORDED = "Prediction recorded before the measurement"
_RECORDED_LINE = re.compile(rf"{_RECORDED} \((\d\d\.[a-z0-9_]+)\): (\S+?)\.?$", re.MULTILINE)
_PREDICTION_IDS: set[str] = set()
# A prediction that runs the package (its measurement, or the models and helpers the measurement is made of) is a
# measurement, not a prediction: its function may call nothing defined in these packages.
NOT_IN_A_PREDICTION = ("tutorial_lib",)


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


def _recorded(value: float) -> str:
    """``value`` as the record line prints it: six significant digits, read back as the same prediction."""
    return f"{value:.6g}"


def _same_prediction(a: float, b: float) -> bool:
    """Whether two predictions are one: equal to the six digits the record line keeps."""
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-300)


# --- the record of predictions made before their measurement ------------------------------------------------------------


def records_path() -> Path:
    """The record file: ``$TUTORIAL_LIB_PREDICTIONS``, else ``.tutorial_lib_predictions.json`` in the current folder."""
    return Path(os.environ.get(PREDICTIONS_ENV) or Path.cwd() / RECORDS_FILE)


def _records() -> list[dict[str, Any]]:
    try:
        records = json.loads(records_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def write_records(records: Iterable[dict[str, Any]], path: Path | None = None) -> None:
    """Write ``records`` (``{"exercise": id, "value": v, "secret": s}``) as the record file."""
    (path or records_path()).write_text(json.dumps(list(records), indent=1) + "\n", encoding="utf-8")


def check_as_recorded(exercise_id: str, learner: Any, **kwargs: Any) -> Any:
    """``check(exercise_id, learner)``, a prediction's answer first recorded afresh (the record file is replaced), as
    its measuring cell records it before the measurement: for the tests and the catalogue report, which check many
    answers to one prediction in turn. Not for a notebook, whose records are the evidence."""
    from tutorial_lib.checks.core import check

    get_exercise(exercise_id)  # loads the chapter's module, whose declarations fill the registry is_prediction reads
    if is_prediction(exercise_id):
        try:
            value = learner()
        except Exception:  # not a prediction yet: nothing to record, as in the notebook
            value = None
        write_records([] if value is None else [{"exercise": exercise_id, "value": value, "secret": None}])
    return check(exercise_id, learner, **kwargs)


def first_record(exercise_id: str) -> float | None:
    """The prediction recorded first for ``exercise_id`` (in the grader: first under its secret), or None."""
    secret = graded_secret()
    for record in _records():
        if record.get("exercise") == exercise_id and (secret is None or record.get("secret") == secret):
            value = record.get("value")
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
    return None


def shown_records(text: str) -> list[tuple[str, float]]:
    """The ``(exercise id, prediction)`` pairs a notebook's outputs show as recorded before their measurement."""
    found = []
    for exercise_id, value in _RECORDED_LINE.findall(text):
        try:
            found.append((exercise_id, float(value)))
        except ValueError:
            continue
    return found


def is_prediction(exercise_id: str) -> bool:
    """Whether ``exercise_id`` is a predict-then-measure exercise (made by :func:`predict_number`)."""
    return exercise_id in _PREDICTION_IDS


def record_prediction(exercise_id: str, predicted: Callable[[], Any]) -> bool:
    """Record the learner's prediction before its measurement is shown; True when the cell may go on to measure.

    Prints the recorded number (or why nothing was recorded: no prediction written yet, not a number). A prediction
    that differs from the one recorded first is not recorded again: the first one is graded, and the check says so.
    """
    if exercise_id not in _PREDICTION_IDS:
        get_exercise(exercise_id)  # an unknown id raises ValueError, naming the chapter's exercises
        raise ValueError(f"{exercise_id} is not a prediction exercise, so there is nothing to record")
    name = getattr(predicted, "__name__", "your function")
    if not callable(predicted):
        print(f"record_prediction expects your prediction function, got {type(predicted).__name__}: nothing "
              f"recorded, and the measurement is not shown.")
        return False
    trace = CallTrace(Forbidden((), NOT_IN_A_PREDICTION))
    try:
        value = _number(trace.run(predicted))
    except NotImplementedError:
        print(f"Write your prediction in {name}() first, then run this cell again: the measurement is shown once "
              f"your prediction is recorded.")
        return False
    except WrongOutput as problem:
        print(f"Nothing recorded: {problem.detail}. The measurement is shown once your prediction is recorded.")
        return False
    except Exception as error:  # the learner's function is broken: say how, as a check would
        print(f"Nothing recorded: {name}() raised {type(error).__name__}: {error}. The measurement is shown once "
              f"your prediction is recorded.")
        return False
    if trace.hit is not None:
        print(f"Nothing recorded: {name}() runs {trace.hit}: {WORKED_OUT} The measurement is shown once your "
              f"prediction is recorded.")
        return False
    first = first_record(exercise_id)
    if first is None:
        write_records([*_records(), {"exercise": exercise_id, "value": value, "secret": graded_secret()}])
        first = value
    print(f"{_RECORDED} ({exercise_id}): {_recorded(first)}.")
    if not _same_prediction(value, first):
        print(f"Your prediction is now {_shown(value)}, after the measurement was shown: the one recorded before it "
              f"is the one graded.")
    return True


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
    _PREDICTION_IDS.add(exercise_id)

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

    def recorded_first(obj: Any) -> tuple[str, str, str] | None:
        if isinstance(obj, _Prediction):  # the catalogue's own fixed predictions
            return None
        try:
            prediction = _number(obj())
        except Exception:  # not written yet, not a number, or broken: the check's run says which
            return None
        first = first_record(exercise_id)
        if first is None:
            return ("not_recorded",
                    f"Your prediction of {question} was not recorded before the measurement: run the measuring cell "
                    f"above, which records it and only then measures.", "run the measuring cell first")
        if not _same_prediction(prediction, first):
            return ("predicted_after_measurement",
                    f"Your prediction is now {_shown(prediction)}, but {_shown(first)} was recorded before the "
                    f"measurement was shown: a prediction written after seeing the measurement does not count.",
                    f"changed from {_shown(first)} after the measurement was shown")
        return None

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
        precondition=recorded_first,
        forbidden_modules=NOT_IN_A_PREDICTION,
    )


def wrong_prediction(name: str, value: float, what: str) -> Mutant:
    """A mutant for the catalogue tests: a prediction of ``value`` that no misconception explains (``what`` says why)."""
    return Mutant(name, what, _Prediction(value))
