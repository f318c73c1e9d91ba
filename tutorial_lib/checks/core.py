"""The verdict machinery behind every exercise check.

An exercise is declared once (:class:`Exercise`): its reference, seeded input cases, points, a catalogue of known
mistakes, each a small wrong implementation (:class:`Mistake`), and uncatalogued wrong implementations the tests plant
(:class:`Mutant`). :func:`check` runs the learner's object on every case, compares it with the reference, and prints
**one** verdict. The rules a learner can trust:

- **Naming.** A verdict names a catalogued mistake only when the learner's behaviour matches that mistake's on *every*
  case (same outputs within the tolerance, same inputs afterwards, or the same exception). When two mistakes match, it
  names both as candidates. When none does but exactly one pair explains every case (each case matches A or B, or
  shows A's values with B's NaN), it names both as made together. Otherwise it says what is wrong in terms of the
  output (which entries, by how much, the expected and obtained values on a slice) and points to the hints folded
  under the exercise in its notebook. No verdict of that kind gives code or the formula of the answer.
- **Randomness.** When a case hands over a ``torch.Generator``, the answer must draw from it alone: the same generator
  state gives the same output, two seeds give different outputs (where the reference's do), the global RNG is untouched.
- **Honest blame.** "Your code raised" only when the learner's code raised; a failure of the exercise's own wrapper
  while examining the learner's output is reported as what is wrong with that output.
- NaN and infinities are described as such, with a hint for overflow and underflow.

A check never raises on a wrong answer unless strict mode is on.

Two environment variables connect checks to the outside world:

- ``TUTORIAL_LIB_STRICT_CHECKS=1``: a wrong answer raises ``AssertionError`` (CI). "Not attempted yet" never does.
- ``TUTORIAL_LIB_CHECK_LOG=path``: every result is appended to ``path`` as a JSON line (the grader sets it). Inside
  :func:`graded_cell` (which the grader wraps around each check cell it restored from the released exercise) the line
  carries that cell's secret, and the grader counts only lines with it.

An answer that is ``tutorial_lib``'s own implementation (the exercise's reference, or any function or class of the
package outside its checks) is refused with its own verdict: the exercise asks for the learner's code. So is an answer
that *calls* the exercise's work while it runs (the reference, or a callee the exercise lists in ``forbidden``: the
package's implementation, torch's fused function or module), directly or through any wrapper: the learner's calls are
traced (:mod:`tutorial_lib.checks.tracing`).
"""

from __future__ import annotations

import contextlib
import dis
import importlib
import json
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from tutorial_lib.checks.compare import (
    Failure,
    describe_type,
    named_leaves,
    overflow_hint,
    same,
    same_but_non_finite,
    tensor_failure,
)
from tutorial_lib.checks.compound import Compound, compounds
from tutorial_lib.checks.running import (
    Outcome,
    describe_error,
    fresh_copy,
    has_generator,
    reseeded,
    run_learner,
    run_ours,
    with_gradients,
)
from tutorial_lib.checks.tracing import Forbidden

STRICT_ENV = "TUTORIAL_LIB_STRICT_CHECKS"
LOG_ENV = "TUTORIAL_LIB_CHECK_LOG"
DEFAULT_TIME_LIMIT = 10.0
_EXERCISE_ID = re.compile(r"^(\d\d)\.[a-z0-9_]+$")


# --- declaring exercises --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One seeded input: the positional arguments, their names (for verdicts) and an optional note."""

    args: tuple[Any, ...]
    names: tuple[str, ...]
    note: str = ""

    @classmethod
    def of(cls, *, note: str = "", **named_args: Any) -> Case:
        """``Case.of(q=q, k=k, v=v, note="causal mask")``: arguments are passed positionally, in this order."""
        return cls(tuple(named_args.values()), tuple(named_args), note)

    def describe(self) -> str:
        """Short plain-text description, e.g. ``q (2, 5, 8), k (2, 7, 8) float64, mask (5, 7)``."""
        parts: list[str] = []
        floats: list[str] = []
        float_dtype = None
        for name, value in zip(self.names, self.args):
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                floats.append(f"{name} {tuple(value.shape)}")
                float_dtype = str(value.dtype).removeprefix("torch.")
                continue
            if floats:  # close a run of float tensors with their dtype
                parts.append(", ".join(floats) + f" {float_dtype}")
                floats = []
            if isinstance(value, torch.Generator):
                parts.append(f"{name} seeded {value.initial_seed()}")
            elif isinstance(value, torch.Tensor) and value.dtype != torch.bool and value.numel() <= 8:
                parts.append(f"{name}={value.tolist()}")
            elif isinstance(value, torch.Tensor):
                parts.append(f"{name} {tuple(value.shape)}")
            elif len(repr(value)) > 60 and hasattr(value, "__len__"):
                parts.append(f"{name} ({type(value).__name__} of {len(value)} items)")
            else:
                parts.append(f"{name}={value!r}")
        if floats:
            parts.append(", ".join(floats) + f" {float_dtype}")
        text = ", ".join(parts)
        return f"{text} ({self.note})" if self.note else text


@dataclass(frozen=True)
class Mistake:
    """A known wrong answer. ``variants`` are implementations that make it, written the ways a learner would.

    The verdict reads "It looks like you {description}. {fix}", so ``description`` starts with a past-tense verb.
    """

    name: str
    description: str
    fix: str
    variants: tuple[Callable[..., Any], ...]

    def __post_init__(self) -> None:
        if not self.variants:
            raise ValueError(f"Mistake {self.name!r}: variants must hold at least one implementation")


@dataclass(frozen=True)
class Mutant:
    """A plausible wrong implementation that is *not* in the catalogue (an off-by-one, a wrong axis, a forgotten
    argument...). The mutation test runs every exercise's mutants: each must lose its points, and its verdict must not
    name a catalogued mistake (it is not one). ``what`` says what is wrong with it, for the test's report."""

    name: str
    what: str
    implementation: Callable[..., Any]


class WrongOutput(Exception):
    """Raised by an exercise's own ``call`` wrapper when the learner's *output* cannot be examined (a wrong type,
    shape or dtype): the verdict reports what is wrong with the output, never "your code raised"."""

    def __init__(self, kind: str, detail: str) -> None:
        if kind not in {"wrong_type", "wrong_shape", "wrong_values"}:
            raise ValueError(f"kind must be 'wrong_type', 'wrong_shape' or 'wrong_values', got {kind!r}")
        super().__init__(detail)
        self.kind, self.detail = kind, detail


@dataclass(frozen=True)
class Exercise:
    """An exercise, declared once: ``check(id, obj)`` needs nothing else.

    ``cases`` builds the inputs from a seeded generator. ``outputs`` names what the function returns: one name for
    a single object, several for a tuple (``("out", "weights")``). ``checked`` completes "It matches the reference
    on N seeded cases: ...". Wrong values that no catalogued mistake explains are described, never hinted at with
    the answer's code: the notebook's folded hints are where a learner asks for more.

    ``call(obj, args)`` says how to run an answer on a case, for the learner's object, the reference and every
    mistake alike (default ``obj(*args)``; a class exercise builds a module and calls it); when it must examine the
    learner's output before returning, it raises :class:`WrongOutput` for an output it cannot use. ``tolerance`` is
    ``(rtol, atol)`` for floating-point outputs (default: per dtype, as ``torch.testing.assert_close``). ``axes``
    names the trailing axes of an output for the verdicts (``{"weights": "query_pos key_pos"}``).
    """

    id: str
    reference: Callable[..., Any]
    cases: Callable[[torch.Generator], list[Case]]
    points: int
    checked: str
    mistakes: tuple[Mistake, ...] = ()
    mutants: tuple[Mutant, ...] = ()
    outputs: tuple[str, ...] = ("the result",)
    call: Callable[[Any, tuple[Any, ...]], Any] | None = None
    tolerance: tuple[float, float] | None = None
    axes: dict[str, str] = field(default_factory=dict)
    nan_hint: str = "NaN comes from 0/0, inf - inf, the square root or log of a negative number, or a softmax over -inf only."
    seed: int = 0
    # A predict-then-measure exercise (tutorial_lib.checks.prediction): the sentence a right prediction gets, from the
    # learner's function; its verdicts speak of the prediction, not of "seeded cases".
    on_pass: Callable[[Any], str] | None = None
    # A component that is trained: once the values match, the gradients of a seeded upstream gradient with respect to
    # the inputs and the modules' parameters must match too (a detached branch keeps the values, not the training).
    gradients: bool = False
    # What does the exercise's work for the learner (tutorial_lib.checks.tracing): the package's implementations and
    # torch's functions and modules that an answer may not call (the reference too, when it is the package's own).
    forbidden: tuple[Any, ...] = ()
    # Whole packages an answer may not call into (a prediction: ``("tutorial_lib",)``, where its measurement lives).
    forbidden_modules: tuple[str, ...] = ()
    # Refuses an answer before it is run: returns ``(kind, body, reason)`` for a verdict, or None to go on (a
    # prediction whose record, made before the measurement was shown, is missing or differs from the answer).
    precondition: Callable[[Any], tuple[str, str, str] | None] | None = None
    # A model the learner assembles: ``localize(obj, args)`` says in a sentence where the answer first departs from the
    # reference on a case (the first module whose output differs), added to a verdict that names no mistake.
    localize: Callable[[Any, tuple[Any, ...]], str | None] | None = None

    def __post_init__(self) -> None:
        if not _EXERCISE_ID.match(self.id):
            raise ValueError(f"Exercise id must look like '03.attention', got {self.id!r}")
        if self.points < 1:
            raise ValueError(f"Exercise {self.id}: points must be positive, got {self.points}")
        names = [mistake.name for mistake in self.mistakes]
        if len(set(names)) != len(names):
            raise ValueError(f"Exercise {self.id}: mistake names must be unique, got {names}")
        mutants = [mutant.name for mutant in self.mutants]
        if len(set(mutants)) != len(mutants) or set(mutants) & set(names):
            raise ValueError(f"Exercise {self.id}: mutant names must be unique and differ from the mistakes', got {mutants}")

    @property
    def chapter(self) -> str:
        return self.id.split(".")[0]

    def make_cases(self) -> list[Case]:
        return self.cases(torch.Generator().manual_seed(self.seed))

    def run(self, obj: Any, args: tuple[Any, ...]) -> Any:
        return obj(*args) if self.call is None else self.call(obj, args)

    @property
    def traced(self) -> Forbidden:
        """The callees an answer may not call, compiled once: the reference (the package's function, or the one the
        checks write out) and ``forbidden``."""
        kept = self.__dict__.get("_traced")
        key = (self.reference, self.forbidden, self.forbidden_modules)
        if kept is None or kept[0] != key:
            kept = (key, Forbidden((self.reference, *self.forbidden), self.forbidden_modules))
            object.__setattr__(self, "_traced", kept)  # on the (frozen) exercise, as its outcomes are
        return kept[1]


_REGISTRY: dict[str, Exercise] = {}


def register(*exercises: Exercise) -> None:
    """Make exercises known to :func:`check`; chapter modules call this once, at import."""
    for exercise in exercises:
        if exercise.id in _REGISTRY:
            raise ValueError(f"exercise {exercise.id!r} is registered twice")
        _REGISTRY[exercise.id] = exercise


def chapter_exercises(chapter: str) -> list[Exercise]:
    """The exercises of chapter ``"03"``, in declaration order (empty when the chapter has none)."""
    if not re.fullmatch(r"\d\d", chapter):
        raise ValueError(f"chapter must be two digits such as '03', got {chapter!r}")
    try:
        importlib.import_module(f"{__package__}.ch{chapter}")
    except ModuleNotFoundError as error:
        if error.name != f"{__package__}.ch{chapter}":
            raise
        return []
    return [exercise for exercise in _REGISTRY.values() if exercise.chapter == chapter]


def get_exercise(exercise_id: str) -> Exercise:
    """The exercise ``"03.attention"``; its chapter module is imported on first use."""
    match = _EXERCISE_ID.match(exercise_id) if isinstance(exercise_id, str) else None
    if match is None:
        raise ValueError(f"exercise_id must look like '03.attention', got {exercise_id!r}")
    chapter_exercises(match.group(1))
    if exercise_id not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise ValueError(f"exercise_id {exercise_id!r} is not a known exercise (known: {known})")
    return _REGISTRY[exercise_id]


# --- the result -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """What :func:`check` found. ``kind`` is one of :data:`KINDS`; ``mistake`` is the catalogued mistake's name when one
    is named, ``candidates`` every catalogued mistake that matched (two or more when they cannot be told apart).
    ``made_together`` says the candidates are two mistakes the answer makes at once (each explains cases the other
    does not). ``summary`` is one line for a grade table: the headline and why the points were lost."""

    exercise_id: str
    kind: str
    points: int
    max_points: int
    summary: str
    verdict: str
    mistake: str | None = None
    candidates: tuple[str, ...] = ()
    made_together: bool = False  # candidates are two mistakes made at once (both to fix), not alternatives

    @property
    def passed(self) -> bool:
        return self.kind == "passed"

    def __str__(self) -> str:
        return self.verdict

    def _ipython_display_(self) -> None:
        """Show nothing when the result ends a cell: :func:`check` has already printed the verdict."""

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "passed": self.passed}, ensure_ascii=False)


KINDS = (
    "passed",
    "not_attempted",
    "raised",
    "too_slow",
    "wrong_type",
    "wrong_shape",
    "mutated_input",
    "randomness",
    "nan",
    "inf",
    "wrong_values",
    "check_failed",
    "library_answer",
    "wrong_gradients",
    "calls_the_work",
    "not_recorded",
    "predicted_after_measurement",
    "earlier_answer_fails",
)
_HEADLINES = {
    "passed": "correct",
    "not_attempted": "not attempted yet",
    "raised": "raised an exception",
    "too_slow": "too slow",
    "wrong_type": "wrong type",
    "wrong_shape": "wrong shape",
    "mutated_input": "mutated its input in place",
    "randomness": "does not draw from its generator",
    "nan": "returned NaN",
    "inf": "returned inf",
    "wrong_values": "wrong values",
    "check_failed": "could not be checked",
    "library_answer": "tutorial_lib's own code, not yours",
    "wrong_gradients": "wrong gradients",
    "calls_the_work": "calls code that does the exercise's work",
    "not_recorded": "prediction not recorded before the measurement",
    "predicted_after_measurement": "predicted after the measurement was shown",
    "earlier_answer_fails": "uses an earlier answer that does not pass yet",
}


# --- comparing one case -------------------------------------------------------------------------------------------------


def sentence(text: str) -> str:
    """``text`` as a sentence: stripped, ending in exactly one full stop (or its own ?, !)."""
    text = text.strip()
    return text if not text or text.endswith((".", "?", "!")) else text + "."


def _compare(exercise: Exercise, case: Case, got: Outcome, want: Outcome) -> Failure | None:
    """The first way the learner's call differs from the reference's, in the order the verdicts are given."""
    if got.timed_out:
        return Failure("too_slow", "")
    if want.error is not None:  # the case is bad input: the answer must refuse it with the same kind of error
        expected = describe_error(want.error, learner_line=False)
        if got.error is not None and type(got.error) is type(want.error):
            return None
        if got.error is not None:
            return Failure("raised", f"{describe_error(got.error)}, where {expected} is expected")
        return Failure("wrong_values", f"it should raise {expected} here, but returned {describe_type(got.value)}")
    if got.error is not None:
        if got.raised_by_learner:
            return Failure("raised", describe_error(got.error))
        if isinstance(got.error, WrongOutput):
            return Failure(got.error.kind, got.error.detail)
        returned = f" ({describe_type(got.returned[-1])})" if got.returned else ""
        return Failure("wrong_type", f"what your code returned{returned} could not be used: "
                                     f"{describe_error(got.error, learner_line=False)}")
    pairs, failure = named_leaves(exercise.outputs, want.value, got.value)
    if failure:
        return failure
    for name, before, after in zip(case.names, case.args, got.args_after):
        if _changed(before, after):
            return Failure("mutated_input", f"the call changed {name}, which belongs to the caller")
    for kinds in (("nan",), ("inf", "wrong_values")):  # NaN anywhere first: it is the most telling
        for name, want_leaf, got_leaf in pairs:
            failure = tensor_failure(name, want_leaf, got_leaf, exercise.tolerance, exercise.axes.get(name))
            if failure is not None and failure.kind in kinds:
                return failure
    return None


def _changed(before: Any, after: Any) -> bool:
    """Whether an argument was modified in place: a tensor's values, or a list's or dict's contents."""
    if isinstance(before, torch.Tensor):
        return not (isinstance(after, torch.Tensor) and after.shape == before.shape and torch.equal(after, before))
    if isinstance(before, (list, dict)):
        return not same(before, after, (0.0, 0.0))
    return False


def _same_behaviour(a: Outcome, b: Outcome, tolerance: tuple[float, float] | None, *, refused: bool = False) -> bool:
    """Same value, same arguments afterwards, or the same exception: the same type and message, or only the same type
    on a case of bad input that the reference itself ``refused`` (a learner words their own error message)."""
    if a.timed_out or b.timed_out:
        return False
    if a.error is not None or b.error is not None:
        return (a.error is not None and b.error is not None and type(a.error) is type(b.error)
                and (refused or str(a.error) == str(b.error)))
    return same(a.value, b.value, tolerance) and same(a.args_after, b.args_after, tolerance)


def _mistake_outcomes(exercise: Exercise, cases: Sequence[Case]) -> dict[str, list[list[Outcome]]]:
    """Each catalogued mistake's variants run on every case: ``outcomes[name][variant][case]``."""
    return {
        mistake.name: [[run_ours(exercise.run, variant, case.args) for case in cases] for variant in mistake.variants]
        for mistake in exercise.mistakes
    }


class _OurOutcomes:
    """An exercise's seeded cases, and the reference's and the catalogued mistakes' outcomes on them, computed on first
    use and kept with the exercise. The cases are seeded and every call that draws random numbers seeds them itself, so
    these never change: checking again (a learner's next try, or a test's whole catalogue) runs only the answer checked.
    The cases are kept too: an answer's arguments afterwards are compared with ours, and a case may hold a function
    made when the cases are (a model's builder), equal only to itself."""

    def __init__(self, exercise: Exercise) -> None:
        self.exercise = exercise
        self.key = _outcomes_key(exercise)
        self.cases = exercise.make_cases()
        self._reference: dict[int, Outcome] = {}
        self._mistakes: dict[str, list[list[Outcome]]] | None = None
        self._compounds: list[tuple[Compound, list[Outcome]]] | None = None

    def reference(self, index: int, case: Case) -> Outcome:
        if index not in self._reference:
            self._reference[index] = run_ours(self.exercise.run, self.exercise.reference, case.args)
        return self._reference[index]

    def mistakes(self, cases: Sequence[Case]) -> dict[str, list[list[Outcome]]]:
        if self._mistakes is None:
            self._mistakes = _mistake_outcomes(self.exercise, cases)
        return self._mistakes

    def compounds(self, cases: Sequence[Case]) -> list[tuple[Compound, list[Outcome]]]:
        """The pairs of mistakes made together (tutorial_lib.checks.compound) and their outcomes on every case."""
        if self._compounds is None:
            self._compounds = [(compound, [run_ours(self.exercise.run, compound.answer, case.args) for case in cases])
                               for compound in compounds(self.exercise.mistakes)]
        return self._compounds


def _outcomes_key(exercise: Exercise) -> tuple:
    # What decides the outcomes: a field replaced on the exercise (a test adding a mistake, say) computes them again.
    return (exercise.reference, exercise.cases, exercise.call, exercise.seed,
            tuple((mistake.name, tuple(mistake.variants)) for mistake in exercise.mistakes))


def _ours(exercise: Exercise) -> _OurOutcomes:
    kept = exercise.__dict__.get("_our_outcomes")
    if kept is None or kept.key != _outcomes_key(exercise):
        kept = _OurOutcomes(exercise)
        object.__setattr__(exercise, "_our_outcomes", kept)  # on the (frozen) exercise: it lives and dies with it
    return kept


def _matching_mistakes(exercise: Exercise, cases: Sequence[Case], learner: Sequence[Outcome], refused: Sequence[bool],
                       outcomes: dict[str, list[list[Outcome]]],
                       learner_grads: Sequence[Outcome | None] | None = None) -> list[Mistake]:
    """Every catalogued mistake one of whose variants behaves like the learner on *every* case (and, given the
    learner's gradients, has the same gradients too)."""
    return [
        mistake
        for mistake in exercise.mistakes
        if any(
            all(_same_behaviour(got, theirs, exercise.tolerance, refused=bad)
                for got, theirs, bad in zip(learner, results, refused))
            and (learner_grads is None or _same_gradients(exercise, variant, cases, learner_grads))
            for variant, results in zip(mistake.variants, outcomes[mistake.name])
        )
    ]


def _mistake_pair(exercise: Exercise, learner: Sequence[Outcome], refused: Sequence[bool],
                  outcomes: dict[str, list[list[Outcome]]]) -> tuple[Mistake, Mistake] | None:
    """Two catalogued mistakes made together, when the evidence shows both and explains every case.

    A case is explained by a variant of A or of B when the learner behaves exactly like it there, or jointly when the
    learner's output has B's NaN and inf (where A's is finite) and A's values everywhere else. The pair must explain
    *every* case, A must explain some case B does not and B some case A does not (a joint case counts for both), and
    exactly one pair may do so: anything less certain is described by its output instead.
    """
    tolerance = exercise.tolerance
    found: list[tuple[Mistake, Mistake]] = []
    for first in exercise.mistakes:
        for second in exercise.mistakes:
            if first is second:
                continue
            explained = False
            for a in outcomes[first.name]:
                for b in outcomes[second.name]:
                    by_a = [_same_behaviour(g, x, tolerance, refused=bad) for g, x, bad in zip(learner, a, refused)]
                    by_b = [_same_behaviour(g, y, tolerance, refused=bad) for g, y, bad in zip(learner, b, refused)]
                    jointly = [
                        not (ea or eb) and g.error is None and x.error is None and y.error is None
                        and same_but_non_finite(g.value, x.value, y.value, tolerance)
                        and (same(g.args_after, x.args_after, tolerance) or same(g.args_after, y.args_after, tolerance))
                        for g, x, y, ea, eb in zip(learner, a, b, by_a, by_b)
                    ]
                    if (all(ea or eb or ej for ea, eb, ej in zip(by_a, by_b, jointly))
                            and any((ea and not eb) or ej for ea, eb, ej in zip(by_a, by_b, jointly))
                            and any((eb and not ea) or ej for ea, eb, ej in zip(by_a, by_b, jointly))):
                        explained = True
                        break
                if explained:
                    break
            if explained and (second, first) not in found:
                found.append((first, second))
    return found[0] if len(found) == 1 else None


def _two_mistakes(exercise: Exercise, cases: Sequence[Case], learner: Sequence[Outcome], refused: Sequence[bool],
                  outcomes: dict[str, list[list[Outcome]]]) -> tuple[Mistake, Mistake] | None:
    """Two catalogued mistakes made together, named only when nothing else explains the answer as well.

    First the compounds the catalogue's builders make (tutorial_lib.checks.compound): exactly one pair whose compound
    behaves like the learner on every case is named; two or more are told apart by nothing, so none is. Without a
    compound that matches, the evidence of the cases themselves (:func:`_mistake_pair`)."""
    found = {(compound.first, compound.second)
             for compound, results in _ours(exercise).compounds(cases)
             if all(_same_behaviour(got, theirs, exercise.tolerance, refused=bad)
                    for got, theirs, bad in zip(learner, results, refused))}
    if not found:
        return _mistake_pair(exercise, learner, refused, outcomes)
    if len(found) > 1:
        return None
    (first, second), = found
    by_name = {mistake.name: mistake for mistake in exercise.mistakes}
    return by_name[first], by_name[second]


def _gradient_run(exercise: Exercise, case: Case) -> Callable[[Any, tuple[Any, ...]], dict[str, torch.Tensor]]:
    return with_gradients(exercise.run, case.names, exercise.seed)


def _gradient_tolerance(exercise: Exercise) -> tuple[float, float] | None:
    """An exercise's tolerance for its gradients: no tighter than 1e-5, since a formula written another way rounds its
    backward differently (tanh-GELU written out differs from torch's by 1e-7), while its values may be pinned tighter
    to tell two formulas apart."""
    if exercise.tolerance is None:
        return None
    rtol, atol = exercise.tolerance
    return max(rtol, 1e-5), max(atol, 1e-5)


def _gradient_failure(exercise: Exercise, got: Outcome, want: Outcome) -> Failure | None:
    """How the learner's gradients differ from the reference's, or None."""
    if got.error is not None:
        if got.raised_by_learner:
            return Failure("raised", f"{describe_error(got.error)}, when its output was differentiated")
        return Failure("wrong_gradients", f"its output could not be differentiated: "
                                          f"{describe_error(got.error, learner_line=False)}")
    if want.error is not None:
        return None  # the reference's own gradient cannot be taken here: nothing to compare
    for name, want_grad in want.value.items():
        failure = tensor_failure(f"the gradient with respect to {name}", want_grad, got.value[name],
                                 _gradient_tolerance(exercise), None)
        if failure is not None:
            return Failure("wrong_gradients", f"the output is right, but {failure.detail}")
    return None


def _same_gradients(exercise: Exercise, obj: Any, cases: Sequence[Case], learner_grads: Sequence[Outcome | None]) -> bool:
    """Whether a catalogued variant ``obj`` has the learner's gradients on every case."""
    return all(
        _same_behaviour(got, run_ours(_gradient_run(exercise, case), obj, case.args), _gradient_tolerance(exercise))
        for case, got in zip(cases, learner_grads) if got is not None
    )


# --- randomness discipline -----------------------------------------------------------------------------------------------


_USE_THE_GENERATOR = (
    "Pass the generator you were given to every random draw (`torch.multinomial(probs, 1, generator=generator)`, "
    "`torch.rand(..., generator=generator)`): a seeded generator is what makes the result reproducible, and the "
    "notebook's other random numbers stay as they were."
)


def _randomness_problem(
    exercise: Exercise, obj: Any, cases: Sequence[Case], learner: Sequence[Outcome], time_limit: float
) -> str | None:
    """How the learner's answer fails to draw from the generator it is given, or None (also when no case has one)."""
    drawn = [(case, got) for case, got in zip(cases, learner) if has_generator(case.args) and got.error is None]
    for case, got in drawn:
        if got.global_rng_moved:
            return (f"On {case.describe()}, your code drew from PyTorch's global random generator (a call without "
                    f"`generator=generator`, such as `torch.randint(...)`)")
    for case, got in drawn:
        again = run_learner(exercise.run, obj, case.args, calls_directly=exercise.call is None, time_limit=time_limit,
                             wrapper=exercise.call)
        if again.error is None and not again.timed_out and not same(got.value, again.value, (0.0, 0.0)):
            return f"On {case.describe()}, two calls with the same generator state gave different results"
    reference_varies = False
    for case, got in drawn:
        other_seed = reseeded(case.args)
        if same(run_ours(exercise.run, exercise.reference, case.args).value,
                run_ours(exercise.run, exercise.reference, other_seed).value, (0.0, 0.0)):
            continue  # this case's result does not depend on the seed (T = 0, say)
        reference_varies = True
        other = run_learner(exercise.run, obj, other_seed, calls_directly=exercise.call is None, time_limit=time_limit,
                             wrapper=exercise.call)
        if other.error is not None or other.timed_out or not same(got.value, other.value, (0.0, 0.0)):
            return None
    if reference_varies:
        return ("Two generators seeded differently gave exactly the same results, so your code does not draw from the "
                "generator it is given (a generator of its own, or a fixed seed)")
    return None


# --- the verdict ------------------------------------------------------------------------------------------------------


def _points_text(points: int, max_points: int) -> str:
    return f"{points}/{max_points} point{'s' if max_points != 1 else ''}"


def _strict_from_env() -> bool:
    return os.environ.get(STRICT_ENV, "").strip().lower() in {"1", "true", "yes"}


@dataclass
class _Verdict:
    kind: str
    body: str
    reason: str = ""  # one line for the grade table, after the headline
    mistakes: list[Mistake] = field(default_factory=list)
    headline: str = ""  # overrides the kind's headline, e.g. "raised RuntimeError"
    made_together: bool = False  # the mistakes are two made at once, not candidates that cannot be told apart


def _reason(detail: str) -> str:
    """A failure's detail shortened to a grade table's line: up to the first colon that opens the values shown."""
    short = detail.split(": at [", 1)[0].split(": expected ", 1)[0]
    return short if len(short) <= 160 else short[:159] + "…"


def _library_origin(exercise: Exercise, obj: Any) -> str | None:
    """Where ``obj`` comes from when it is the package's own implementation (the answer the exercise asks to write)."""
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    if isinstance(module, str) and (module == "tutorial_lib" or module.startswith("tutorial_lib.")):
        # The catalogue's mistakes and mutants live in tutorial_lib.checks (the tests check them), references too.
        if not module.startswith("tutorial_lib.checks") or obj is exercise.reference:
            return f"`{name}` from `{module}`"
    if obj is exercise.reference:
        return f"the reference implementation of {exercise.id}"
    return None


FOLDED_HINTS = ("The hints folded under the exercise in its notebook lead to the answer a step at a time, if you "
                "want them.")


# Why a prediction that runs the package's code is refused: by its check, and by the cell that records it.
WORKED_OUT = ("a prediction is worked out before the measurement, not computed by running the package's code. Return "
              "the number you expect; plain arithmetic and `math` are all a prediction needs.")


def _called_verdict(exercise: Exercise, callee: str) -> _Verdict:
    if exercise.on_pass is not None:  # a prediction
        return _Verdict("calls_the_work", f"Your prediction runs {callee}: {WORKED_OUT}", f"runs {callee}")
    return _Verdict("calls_the_work",
                    f"Your answer calls {callee}, which does what this exercise asks you to build. Write that part "
                    f"yourself: the tensor operations the chapter uses, and your own answers to earlier exercises, are "
                    f"allowed.", f"calls {callee}")


def _judge(exercise: Exercise, obj: Any, time_limit: float) -> _Verdict:
    origin = _library_origin(exercise, obj)
    if origin is not None:
        return _Verdict("library_answer",
                        f"This is {origin}, imported rather than written: the exercise asks for your own code. Define "
                        f"the function in the cell above (without importing it from tutorial_lib) and run both cells "
                        f"again.", f"the answer is {origin}")
    if not callable(obj):
        return _Verdict("wrong_type", f"check expects your function or class, got {describe_type(obj)}.",
                        f"got {describe_type(obj)}, not a function")
    if exercise.precondition is not None:
        refusal = exercise.precondition(obj)
        if refusal is not None:
            return _Verdict(*refusal)
    cases = _ours(exercise).cases
    learner: list[Outcome] = []
    failures: list[Failure | None] = []
    refused: list[bool] = []  # cases of bad input, which the reference refuses with an exception
    for index, case in enumerate(cases):
        got = run_learner(exercise.run, obj, case.args, calls_directly=exercise.call is None, time_limit=time_limit,
                          wrapper=exercise.call, forbidden=exercise.traced)
        if got.called is not None:
            return _called_verdict(exercise, got.called)
        if index == 0 and got.raised_by_learner and isinstance(got.error, NotImplementedError):
            what = "class still raises NotImplementedError: replace the `raise` lines" if isinstance(obj, type) else \
                "function still raises NotImplementedError: replace the `raise` line"  # a module exercise: a class
            return _Verdict("not_attempted", f"The {what} with your solution and run both cells again.")
        if got.timed_out:
            return _Verdict("too_slow", f"On {case.describe()}, the call did not finish within {time_limit:g} s: look "
                                        f"for a loop that never ends.", f"did not finish within {time_limit:g} s")
        learner.append(got)
        want = _ours(exercise).reference(index, case)
        refused.append(want.error is not None)
        failures.append(_compare(exercise, case, got, want))

    first = next((index for index, failure in enumerate(failures) if failure is not None), None)
    learner_grads: list[Outcome | None] | None = None
    if first is None and exercise.gradients:
        learner_grads = []
        for index, case in enumerate(cases):
            if refused[index]:
                learner_grads.append(None)  # bad input, refused by the reference: no output to differentiate
                continue
            run = _gradient_run(exercise, case)
            got = run_learner(run, obj, case.args, calls_directly=False, time_limit=time_limit, wrapper=exercise.call,
                              forbidden=exercise.traced)
            if got.called is not None:
                return _called_verdict(exercise, got.called)
            if got.timed_out:
                return _Verdict("too_slow", f"On {case.describe()}, differentiating the output did not finish within "
                                            f"{time_limit:g} s.", f"its gradient did not finish within {time_limit:g} s")
            learner_grads.append(got)
            failures[index] = _gradient_failure(exercise, got, run_ours(run, exercise.reference, case.args))
            if first is None and failures[index] is not None:
                first = index
    if first is None or failures[first].kind != "raised":
        problem = _randomness_problem(exercise, obj, cases, learner, time_limit)
        if problem is not None:
            return _Verdict("randomness", f"{sentence(problem)} It looks like you ignored the `generator` argument. "
                                          f"{_USE_THE_GENERATOR}", "ignored the generator it was given")
    if first is None and exercise.on_pass is not None:
        return _Verdict("passed", sentence(exercise.on_pass(obj)))
    if first is None:
        return _Verdict("passed", f"It matches the reference on {len(cases)} seeded cases: {sentence(exercise.checked)}")

    failure, case = failures[first], cases[first]
    where = "" if exercise.on_pass is not None else f"On {case.describe()}, "  # a prediction has no inputs to name
    if failure.kind == "raised":
        body = sentence(f"{where}your code raised {failure.detail}")
    else:
        body = sentence(f"{where}{failure.detail}")
    body = body[0].upper() + body[1:]
    outcomes = _ours(exercise).mistakes(cases)
    mistakes = _matching_mistakes(exercise, cases, learner, refused, outcomes, learner_grads)
    pair = None
    if not mistakes and learner_grads is None:
        try:
            pair = _two_mistakes(exercise, cases, learner, refused, outcomes)
        except Exception:  # an output too strange to compare entry by entry (a meta tensor, say): described instead
            pair = None
    if len(mistakes) == 1:
        body += f" It looks like you {mistakes[0].description}. {sentence(mistakes[0].fix)}"
    elif mistakes:
        either = ", or you ".join(mistake.description for mistake in mistakes)
        fixes = " ".join(sentence(mistake.fix) for mistake in mistakes)
        body += f" On every case your answer behaves like {len(mistakes)} known mistakes at once: you {either}. {fixes}"
    elif pair is not None:
        body += (f" It looks like you made two mistakes: you {pair[0].description}, and you {pair[1].description}. "
                 f"{sentence(pair[0].fix)} {sentence(pair[1].fix)}")
    elif failure.kind == "mutated_input":
        body += " Leave the arguments untouched: write `x = x / 2`, not `x /= 2` or `x.div_(2)`."
    elif failure.kind == "nan":
        body += f" {sentence(exercise.nan_hint)}"
    elif failure.kind == "inf":
        body += f" {overflow_hint(learner[first].value)}"
    elif failure.kind == "wrong_gradients":
        body += (" Something between the inputs and the output stops or changes the gradient (a `.detach()`, "
                 "`torch.no_grad()`, `.data`, or a value computed outside the graph): the layer computes the right "
                 "numbers but would not train as the reference does.")
    elif failure.kind in {"wrong_values", "wrong_shape", "wrong_gradients"} and exercise.localize is not None:
        body += f" It matches none of the known mistakes.{_located(exercise, obj, case)} {FOLDED_HINTS}"
    elif failure.kind in {"wrong_values", "wrong_shape"}:
        body += f" It matches none of the known mistakes. {FOLDED_HINTS}"
    headline, reason = "", _reason(failure.detail)
    if exercise.on_pass is not None and failure.kind == "wrong_values":
        headline = "prediction missed"
    if pair is not None:
        return _Verdict(failure.kind, body, reason, list(pair), headline, made_together=True)
    if failure.kind == "raised":
        headline = f"raised {type(learner[first].error).__name__}"
        reason = reason.removeprefix(type(learner[first].error).__name__).removeprefix(": ")
    return _Verdict(failure.kind, body, reason, mistakes, headline)


def _located(exercise: Exercise, obj: Any, case: Case) -> str:
    """`` <sentence>`` from the exercise's ``localize`` on the case that failed, or "" when it cannot say."""
    try:
        with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
            warnings.simplefilter("ignore")
            sentence_ = exercise.localize(obj, fresh_copy(case.args))
    except Exception:  # the learner's model already ran on this case: a failure here only means no location
        return ""
    return f" {sentence(sentence_)}" if sentence_ else ""


_graded_cell_secret: str | None = None


def graded_secret() -> str | None:
    """The secret of the grader's cell running now (see :func:`graded_cell`), or None outside the grader."""
    return _graded_cell_secret


@contextlib.contextmanager
def graded_cell(secret: str) -> Iterator[None]:
    """Mark the checks run inside as the grader's: their log lines carry ``secret`` (see tutorial_lib.grade)."""
    global _graded_cell_secret
    previous, _graded_cell_secret = _graded_cell_secret, secret
    try:
        yield
    finally:
        _graded_cell_secret = previous


def passes(exercise_id: str, obj: Any, *, time_limit: float | int = DEFAULT_TIME_LIMIT) -> bool:
    """Whether ``obj`` passes the check of ``exercise_id``, silently (no verdict printed, nothing logged): for a later
    exercise or a measurement that runs the learner's earlier answer."""
    try:
        return _judge(get_exercise(exercise_id), obj, float(time_limit)).kind == "passed"
    except Exception:  # noqa: BLE001 - the check's own failure is reported by check(), not here
        return False


def _global_names(code: Any) -> set[str]:
    """The global names a function's code reads (not attributes), its nested functions' and lambdas' included."""
    names = {instruction.argval for instruction in dis.get_instructions(code) if instruction.opname == "LOAD_GLOBAL"}
    for constant in code.co_consts:
        if hasattr(constant, "co_code"):
            names |= _global_names(constant)
    return names


def uses_earlier_answer(name: str, exercise_id: str, number: int) -> Callable[[Any], tuple[str, str, str] | None]:
    """An :attr:`Exercise.precondition` for an exercise that builds on an earlier one of the same notebook: an answer
    that calls the learner's ``name`` (their answer to exercise ``number``, checked by ``exercise_id``) is graded only
    once that one passes its own check, so that a mistake made there is named there, not here."""

    def earlier_answer_passes(obj: Any) -> tuple[str, str, str] | None:
        code, namespace = getattr(obj, "__code__", None), getattr(obj, "__globals__", {})
        if code is None or name not in _global_names(code) or name not in namespace:
            return None
        if str(getattr(namespace[name], "__module__", "")).startswith("tutorial_lib"):
            return None  # not the learner's: the package's, or the catalogue's (a mistake built on the reference)
        if passes(exercise_id, namespace[name]):
            return None
        return ("earlier_answer_fails",
                f"Your answer calls your `{name}` of exercise {number}, which does not pass its check "
                f"(`{exercise_id}`) yet. Make that one pass first, then run this check again: this one is graded on "
                f"top of it.", f"its `{name}` of exercise {number} does not pass yet")

    return earlier_answer_passes


def check(
    exercise_id: str, obj: Any, *, strict: bool | None = None, time_limit: float | int = DEFAULT_TIME_LIMIT
) -> CheckResult:
    """Check the learner's ``obj`` for exercise ``exercise_id``, print one verdict and return a :class:`CheckResult`.

    Never raises on a wrong answer (an exception, NaN, a wrong shape, a mutated input, a hang of more than
    ``time_limit`` seconds all become verdicts), except in strict mode (``strict=True``, or ``strict=None`` with
    ``TUTORIAL_LIB_STRICT_CHECKS=1``), where a wrong answer raises ``AssertionError``; an exercise not attempted yet
    never raises. An unknown ``exercise_id`` is the notebook author's error and raises ``ValueError``.
    """
    exercise = get_exercise(exercise_id)
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not time_limit > 0:
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    try:
        verdict = _judge(exercise, obj, float(time_limit))
    except Exception as error:  # a bug of ours, or an object too strange to compare: still one verdict, no raise
        verdict = _Verdict("check_failed", f"The check itself failed on your answer ({describe_error(error)}).",
                           f"the check itself failed ({type(error).__name__})")
    points = exercise.points if verdict.kind == "passed" else 0
    headline = verdict.headline or _HEADLINES[verdict.kind]
    text = f"{exercise.id}: {headline} ({_points_text(points, exercise.points)}). {verdict.body}"
    named = verdict.mistakes[0] if len(verdict.mistakes) == 1 else None
    if named is not None:
        reason = named.description
    elif verdict.made_together:
        reason = "two mistakes: " + ", and ".join(mistake.description for mistake in verdict.mistakes)
    elif verdict.mistakes:
        reason = "either " + ", or ".join(mistake.description for mistake in verdict.mistakes)
    else:
        reason = verdict.reason
    result = CheckResult(
        exercise_id=exercise.id,
        kind=verdict.kind,
        points=points,
        max_points=exercise.points,
        summary=headline + (f": {reason}" if reason else ""),
        verdict=text,
        mistake=named.name if named else None,
        candidates=tuple(mistake.name for mistake in verdict.mistakes),
        made_together=verdict.made_together,
    )
    print(text)
    log = os.environ.get(LOG_ENV)
    if log:
        record = json.loads(result.to_json())
        if _graded_cell_secret is not None:
            record["cell_secret"] = _graded_cell_secret
        with open(log, "a", encoding="utf-8") as file:
            file.write(json.dumps(record, ensure_ascii=False) + "\n")
    if (_strict_from_env() if strict is None else strict) and verdict.kind not in {"passed", "not_attempted"}:
        raise AssertionError(text)
    return result


__all__ = [
    "Case",
    "CheckResult",
    "DEFAULT_TIME_LIMIT",
    "Exercise",
    "KINDS",
    "LOG_ENV",
    "Mistake",
    "Mutant",
    "STRICT_ENV",
    "WrongOutput",
    "chapter_exercises",
    "check",
    "get_exercise",
    "graded_cell",
    "passes",
    "register",
    "uses_earlier_answer",
]
