"""The verdict machinery behind every exercise check.

An exercise is declared once (:class:`Exercise`): its reference, seeded input cases, points, and a catalogue of
known mistakes, each a small wrong implementation (:class:`Mistake`). :func:`check` runs the learner's object on every
case, compares it with the reference, and prints **one** verdict. When the learner's behaviour matches a catalogued
mistake on every case up to the first failure (same outputs, same inputs afterwards, or the same exception), the
verdict names it. A check never raises on a wrong answer unless strict mode is on.

Two environment variables connect checks to the outside world:

- ``TUTORIAL_LIB_STRICT_CHECKS=1``: a wrong answer raises ``AssertionError`` (CI). "Not attempted yet" never does.
- ``TUTORIAL_LIB_CHECK_LOG=path``: every result is appended to ``path`` as a JSON line (the grader sets it).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import sysconfig
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

STRICT_ENV = "TUTORIAL_LIB_STRICT_CHECKS"
LOG_ENV = "TUTORIAL_LIB_CHECK_LOG"
DEFAULT_TIME_LIMIT = 10.0

# (rtol, atol) per dtype: torch.testing.assert_close's defaults, loose enough for any order of operations.
_TOLERANCES = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}
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
            if isinstance(value, torch.Tensor) and value.dtype != torch.bool and value.numel() <= 8:
                parts.append(f"{name}={value.tolist()}")
            elif isinstance(value, torch.Tensor):
                parts.append(f"{name} {tuple(value.shape)}")
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
    on N seeded cases: ...". ``hint`` is given for wrong values that no catalogued mistake explains.

    ``call(obj, args)`` says how to run an answer on a case, for the learner's object, the reference and every
    mistake alike (default ``obj(*args)``; a class exercise builds a module and calls it). ``tolerance`` is
    ``(rtol, atol)`` for floating-point outputs (default: per dtype, as ``torch.testing.assert_close``).
    """

    id: str
    reference: Callable[..., Any]
    cases: Callable[[torch.Generator], list[Case]]
    points: int
    checked: str
    hint: str
    mistakes: tuple[Mistake, ...] = ()
    mutants: tuple[Mutant, ...] = ()
    outputs: tuple[str, ...] = ("the result",)
    call: Callable[[Any, tuple[Any, ...]], Any] | None = None
    tolerance: tuple[float, float] | None = None
    nan_hint: str = "NaN comes from 0/0, inf - inf, the square root or log of a negative number, or a softmax over -inf only."
    seed: int = 0

    def __post_init__(self) -> None:
        if not _EXERCISE_ID.match(self.id):
            raise ValueError(f"Exercise id must look like '03.attention', got {self.id!r}")
        if self.points < 1:
            raise ValueError(f"Exercise {self.id}: points must be positive, got {self.points}")
        names = [mistake.name for mistake in self.mistakes]
        if len(set(names)) != len(names):
            raise ValueError(f"Exercise {self.id}: mistake names must be unique, got {names}")

    @property
    def chapter(self) -> str:
        return self.id.split(".")[0]

    def make_cases(self) -> list[Case]:
        return self.cases(torch.Generator().manual_seed(self.seed))

    def run(self, obj: Any, args: tuple[Any, ...]) -> Any:
        return obj(*args) if self.call is None else self.call(obj, args)


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
    """What :func:`check` found. ``kind`` is one of :data:`KINDS`; ``mistake`` is the catalogued mistake's name."""

    exercise_id: str
    kind: str
    points: int
    max_points: int
    summary: str
    verdict: str
    mistake: str | None = None

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
    "nan",
    "wrong_values",
    "check_failed",
)
_HEADLINES = {
    "passed": "correct",
    "not_attempted": "not attempted yet",
    "raised": "raised an exception",
    "too_slow": "too slow",
    "wrong_type": "wrong type",
    "wrong_shape": "wrong shape",
    "mutated_input": "mutated its input in place",
    "nan": "returned NaN",
    "wrong_values": "wrong values",
    "check_failed": "could not be checked",
}


# --- running the learner's code ---------------------------------------------------------------------------------------


class _TimeLimitExceeded(BaseException):
    """Raised into the learner's code by the alarm: a BaseException, so ``except Exception`` cannot swallow it."""


@dataclass
class _Outcome:
    """What one call did: its value or exception, and the (possibly mutated) arguments afterwards."""

    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    args_after: tuple[Any, ...] = ()


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_clone(item) for item in value)
    return value


def _call_with_time_limit(fn: Callable[..., Any], args: tuple[Any, ...], seconds: float) -> Any:
    if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
        def on_alarm(signum: int, frame: Any) -> None:
            raise _TimeLimitExceeded

        previous_handler = signal.signal(signal.SIGALRM, on_alarm)
        # Someone else's timer (pytest-timeout uses SIGALRM too) is re-armed afterwards with what it had left.
        previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
        start = time.monotonic()
        try:
            return fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous_handler)
            if previous_delay > 0:
                left = max(previous_delay - (time.monotonic() - start), 1e-3)
                signal.setitimer(signal.ITIMER_REAL, left, previous_interval)
    # Off the main thread (or without SIGALRM) a thread can be waited for but not stopped: a hang keeps running.
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as error:  # handed back to the caller below
            box["error"] = error

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise _TimeLimitExceeded
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _run_learner(exercise: Exercise, obj: Any, case: Case, time_limit: float) -> _Outcome:
    args = _clone(case.args)
    try:
        return _Outcome(value=_call_with_time_limit(exercise.run, (obj, args), time_limit), args_after=args)
    except _TimeLimitExceeded:
        return _Outcome(timed_out=True, args_after=args)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # SystemExit too: the learner's code must not end the check
        return _Outcome(error=error, args_after=args)


def _run_ours(exercise: Exercise, fn: Any, case: Case) -> _Outcome:
    """Run the reference or a catalogued mistake; a mistake may raise, and that exception is its behaviour."""
    args = _clone(case.args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. the deprecation warning of a mistake's `k.T`
        try:
            return _Outcome(value=exercise.run(fn, args), args_after=args)
        except Exception as error:
            return _Outcome(error=error, args_after=args)


# --- comparing --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Failure:
    kind: str
    detail: str


def _describe_type(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} items"
    return "None" if value is None else f"a value of type {type(value).__name__}"


def _leaves(want: Any, got: Any, name: str) -> tuple[list[tuple[str, torch.Tensor, torch.Tensor]], _Failure | None]:
    """Pair the tensors of the learner's output with the reference's, or say how the structure differs."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return [], _Failure("wrong_type", f"{name} should be a tensor, got {_describe_type(got)}")
        if got.shape != want.shape:
            return [], _Failure(
                "wrong_shape", f"{name} has shape {tuple(got.shape)} but should have {tuple(want.shape)}"
            )
        if got.dtype != want.dtype:
            return [], _Failure("wrong_type", f"{name} has dtype {got.dtype} but should have {want.dtype}")
        if got.device != want.device:
            return [], _Failure("wrong_type", f"{name} is on {got.device} but should be on {want.device}, like the inputs")
        return [(name, want, got)], None
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return [], _Failure(
                "wrong_type", f"{name} should be a tuple of {len(want)} items, got {_describe_type(got)}"
            )
        pairs: list[tuple[str, torch.Tensor, torch.Tensor]] = []
        for index, (want_item, got_item) in enumerate(zip(want, got)):
            item_pairs, failure = _leaves(want_item, got_item, f"item {index} of {name}")
            if failure:
                return [], failure
            pairs.extend(item_pairs)
        return pairs, None
    if type(got) is not type(want):
        return [], _Failure("wrong_type", f"{name} should be {_describe_type(want)}, got {_describe_type(got)}")
    if got != want:
        return [], _Failure("wrong_values", f"{name} is {got!r} but should be {want!r}")
    return [], None


def _named_leaves(exercise: Exercise, want: Any, got: Any) -> tuple[list[tuple[str, Any, Any]], _Failure | None]:
    names = exercise.outputs
    if len(names) == 1:
        return _leaves(want, got, names[0])
    if not isinstance(got, (tuple, list)) or len(got) != len(names):
        expected = f"a tuple ({', '.join(names)})"
        return [], _Failure("wrong_type", f"it should return {expected}, got {_describe_type(got)}")
    pairs: list[tuple[str, Any, Any]] = []
    for name, want_item, got_item in zip(names, want, got):
        item_pairs, failure = _leaves(want_item, got_item, name)
        if failure:
            return [], failure
        pairs.extend(item_pairs)
    return pairs, None


def _close(want: torch.Tensor, got: torch.Tensor, tolerance: tuple[float, float] | None) -> bool:
    """Equal, or within tolerance for floating point; NaN equals NaN (NaN where the reference has none is a verdict of its own)."""
    if want.is_floating_point() or want.is_complex():
        rtol, atol = tolerance or _TOLERANCES.get(want.dtype, (1e-5, 1e-8))
        return torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    return torch.equal(got, want)


def _same(a: Any, b: Any, tolerance: tuple[float, float] | None) -> bool:
    """Same structure, types, shapes and dtypes, values within tolerance (NaN equals NaN)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and a.device == b.device
            and _close(a, b, tolerance)
        )
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return (
            isinstance(a, (tuple, list))
            and isinstance(b, (tuple, list))
            and len(a) == len(b)
            and all(_same(x, y, tolerance) for x, y in zip(a, b))
        )
    return type(a) is type(b) and a == b


def _same_behaviour(a: _Outcome, b: _Outcome, tolerance: tuple[float, float] | None) -> bool:
    if a.timed_out or b.timed_out:
        return False
    if a.error is not None or b.error is not None:
        return (
            a.error is not None
            and b.error is not None
            and type(a.error) is type(b.error)
            and str(a.error) == str(b.error)
        )
    return _same(a.value, b.value, tolerance) and _same(a.args_after, b.args_after, tolerance)


def _compare(exercise: Exercise, case: Case, got: _Outcome, want: _Outcome) -> _Failure | None:
    """The first way the learner's call differs from the reference's, in the order the verdicts are given."""
    if got.timed_out:
        return _Failure("too_slow", "")
    if isinstance(got.error, WrongOutput):  # the exercise's own wrapper could not examine the learner's output
        return _Failure(got.error.kind, got.error.detail)
    if got.error is not None:
        return _Failure("raised", _describe_error(got.error))
    pairs, failure = _named_leaves(exercise, want.value, got.value)
    if failure:
        return failure
    for name, before, after in zip(case.names, case.args, got.args_after):
        if isinstance(before, torch.Tensor) and not (
            isinstance(after, torch.Tensor) and after.shape == before.shape and torch.equal(after, before)
        ):
            return _Failure("mutated_input", f"the call changed {name}, which belongs to the caller")
    for name, want_leaf, got_leaf in pairs:
        if got_leaf.is_floating_point():
            new_nan = got_leaf.isnan() & ~want_leaf.isnan()
            if new_nan.any():
                count = int(new_nan.sum())
                return _Failure(
                    "nan", f"{name} has {count} NaN value{'s' if count != 1 else ''} where the reference has none"
                )
    for name, want_leaf, got_leaf in pairs:
        if not _close(want_leaf, got_leaf, exercise.tolerance):
            if want_leaf.is_floating_point():
                difference = (got_leaf - want_leaf).abs().nan_to_num(0.0).max().item()
                return _Failure("wrong_values", f"{name} differs from the reference by up to {difference:.3g}")
            wrong = int((got_leaf != want_leaf).sum())
            return _Failure("wrong_values", f"{name} differs from the reference in {wrong} of {want_leaf.numel()} entries")
    return None


_LIBRARY_DIRS = tuple(
    str(Path(path).resolve())
    for path in (
        Path(__file__).parent.parent,  # tutorial_lib itself
        Path(torch.__file__).parent,
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
    )
)


def _describe_error(error: BaseException) -> str:
    """``RuntimeError: message`` plus the line of the learner's code that raised it, when there is one."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if len(message) > 200:
        message = message[:197] + "..."
    text = type(error).__name__ + (f": {message}" if message else "")
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if not str(Path(frame.filename).resolve()).startswith(_LIBRARY_DIRS) and frame.line:
            return f"{text} (line {frame.lineno} of your code: `{frame.line.strip()}`)"
    return text


# --- the check ----------------------------------------------------------------------------------------------------------


def _points_text(points: int, max_points: int) -> str:
    return f"{points}/{max_points} point{'s' if max_points != 1 else ''}"


def _strict_from_env() -> bool:
    return os.environ.get(STRICT_ENV, "").strip().lower() in {"1", "true", "yes"}


@dataclass
class _Verdict:
    kind: str
    body: str
    mistake: Mistake | None = None
    headline: str = ""  # overrides the kind's headline, e.g. "raised RuntimeError"


def _judge(exercise: Exercise, obj: Any, time_limit: float) -> _Verdict:
    if not callable(obj):
        return _Verdict("wrong_type", f"check expects your function or class, got {_describe_type(obj)}.")
    cases = exercise.make_cases()
    learner: list[_Outcome] = []
    for index, case in enumerate(cases):
        got = _run_learner(exercise, obj, case, time_limit)
        if index == 0 and isinstance(got.error, NotImplementedError):
            return _Verdict(
                "not_attempted",
                "The function still raises NotImplementedError: replace the `raise` line with your solution "
                "and run both cells again.",
            )
        learner.append(got)
        failure = _compare(exercise, case, got, _run_ours(exercise, exercise.reference, case))
        if failure is None:
            continue
        where = f"On {case.describe()}"
        if failure.kind == "too_slow":
            return _Verdict("too_slow", f"{where}, the call did not finish within {time_limit:g} s: look for a loop that never ends.")
        if failure.kind == "raised":
            body = f"{where}, your code raised {failure.detail}."
        else:
            body = f"{where}, {failure.detail}."
        mistake = _matching_mistake(exercise, cases[: index + 1], learner)
        if mistake is not None:
            body += f" It looks like you {mistake.description}. {mistake.fix}"
        elif failure.kind == "mutated_input":
            body += " Leave the arguments untouched: write `x = x / 2`, not `x /= 2` or `x.div_(2)`."
        elif failure.kind == "nan":
            body += f" {exercise.nan_hint}"
        elif failure.kind in {"wrong_values", "wrong_shape"}:
            body += f" It matches none of the known mistakes. Hint: {exercise.hint}"
        headline = f"raised {type(got.error).__name__}" if failure.kind == "raised" else ""
        return _Verdict(failure.kind, body, mistake, headline)
    return _Verdict("passed", f"It matches the reference on {len(cases)} seeded cases: {exercise.checked}.")


def _matching_mistake(exercise: Exercise, cases: Sequence[Case], learner: Sequence[_Outcome]) -> Mistake | None:
    """The first catalogued mistake that behaves like the learner on every case up to the first failure."""
    for mistake in exercise.mistakes:
        for variant in mistake.variants:
            if all(
                _same_behaviour(got, _run_ours(exercise, variant, case), exercise.tolerance)
                for case, got in zip(cases, learner)
            ):
                return mistake
    return None


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
        verdict = _Verdict("check_failed", f"The check itself failed on your answer ({type(error).__name__}: {error}).")
    points = exercise.points if verdict.kind == "passed" else 0
    headline = verdict.headline or _HEADLINES[verdict.kind]
    text = f"{exercise.id}: {headline} ({_points_text(points, exercise.points)}). {verdict.body}"
    summary = headline + (f": {verdict.mistake.description}" if verdict.mistake else "")
    result = CheckResult(
        exercise_id=exercise.id,
        kind=verdict.kind,
        points=points,
        max_points=exercise.points,
        summary=summary,
        verdict=text,
        mistake=verdict.mistake.name if verdict.mistake else None,
    )
    print(text)
    log = os.environ.get(LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as file:
            file.write(result.to_json() + "\n")
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
    "register",
]
