"""The contract every exercise of every chapter keeps, now and later: a chapter joins by registering its exercises.

- Confusion: each variant of each catalogued mistake is named as that mistake and no other.
- Mutation: each declared mutant (a plausible wrong answer that is *not* in the catalogue) loses its points and is
  named as no catalogued mistake, and its verdict describes the output without writing the answer's code.
- Randomness: where a case hands over a generator, two answers built from the reference that ignore it (one draws
  from the global generator, one from a fixed seed of its own) lose their points and are told so.
- Depth: at least four catalogued mistakes and two mutants per exercise.
- Text: every verdict these answers produce, and a few generic wrong answers', passes a lint.
"""

from __future__ import annotations

import inspect
import pkgutil
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

from tutorial_lib import checks
from tutorial_lib.checks import CheckResult, Exercise, chapter_exercises, check
from tutorial_lib.checks.core import FOLDED_HINTS

from conftest import check_recorded  # a prediction's answer is recorded before its check, as in a notebook

EXERCISES = [
    exercise
    for module in pkgutil.iter_modules(checks.__path__)
    if re.fullmatch(r"ch\d\d", module.name)
    for exercise in chapter_exercises(module.name[2:])
]
VARIANTS = [(e, m.name, i, variant) for e in EXERCISES for m in e.mistakes for i, variant in enumerate(m.variants)]
MUTANTS = [(e, mutant) for e in EXERCISES for mutant in e.mutants]
RANDOM = [e for e in EXERCISES if not inspect.isclass(e.reference)
          and any(isinstance(arg, torch.Generator) for case in e.make_cases() for arg in case.args)]
pytestmark = [pytest.mark.filterwarnings("ignore"),  # a mistake's `k.T` warns; the verdict is what is tested
              pytest.mark.usefixtures("annotation_checks_off")]  # tests/conftest.py says why


def _id(value: Any) -> str:
    return value.id if isinstance(value, Exercise) else value if isinstance(value, str) else str(value) if isinstance(value, int) else ""


# --- depth ---------------------------------------------------------------------------------------------------------------


def test_every_chapter_module_registers_exercises():
    assert len(EXERCISES) >= 15 and len({e.chapter for e in EXERCISES}) >= 4


@pytest.mark.parametrize("exercise", EXERCISES, ids=_id)
def test_every_exercise_has_four_mistakes_and_two_mutants(exercise):
    assert len(exercise.mistakes) >= 4, [m.name for m in exercise.mistakes]
    assert len(exercise.mutants) >= 2, [m.name for m in exercise.mutants]


# --- confusion and mutation -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("exercise", "mistake", "index", "variant"), VARIANTS, ids=_id)
def test_each_catalogued_mistake_is_named_as_itself_and_no_other(exercise, mistake, index, variant):
    result = check_recorded(exercise.id, variant)
    assert result.points == 0, result.verdict
    assert result.mistake == mistake and result.candidates == (mistake,), result.verdict
    assert not lint(exercise.id, result), (lint(exercise.id, result), result.verdict)


# Python's own advice a verdict may give whatever the exercise: how not to mutate an argument, how to draw from a
# generator, what stops a gradient. Anything else in backticks, outside the quote of the learner's own line, would be
# the exercise's code.
_GENERIC_CODE = re.compile(
    r"`(x = x / 2|x /= 2|x\.div_\(2\)|generator|generator=generator|torch\.multinomial\(probs, 1, generator=generator\)|"
    r"torch\.rand\(\.\.\., generator=generator\)|torch\.randint\(\.\.\.\)|\.detach\(\)|torch\.no_grad\(\)|\.data|raise)`")
_OWN_LINE = re.compile(r"\(line \d+ of your code: `[^`]*`\)")


# Some mutants are the reference with one thing changed: what they call is not what they test (tests/test_call_tracing.py
# refuses such answers), so this one runs untraced, to judge each mutant by its output.
@pytest.mark.parametrize(("exercise", "mutant"), MUTANTS, ids=lambda v: v.id if isinstance(v, Exercise) else v.name)
@pytest.mark.usefixtures("untraced")
def test_each_mutant_loses_its_points_and_is_named_as_no_catalogued_mistake(exercise, mutant):
    result = check_recorded(exercise.id, mutant.implementation)
    assert result.points == 0, f"{mutant.name} ({mutant.what}) passed: {result.verdict}"
    assert result.mistake is None and result.candidates == (), f"{mutant.name} named: {result.verdict}"
    assert not lint(exercise.id, result), (lint(exercise.id, result), result.verdict)
    # The verdict describes the output and gives no code (checked on this result: a mutant's check is run once).
    prose = _GENERIC_CODE.sub("", _OWN_LINE.sub("", result.verdict))
    assert "`" not in prose, f"{mutant.name}: {result.verdict}"
    if result.kind == "wrong_values":
        assert FOLDED_HINTS in result.verdict, result.verdict  # after what is wrong with the output


# --- randomness -------------------------------------------------------------------------------------------------------------


def _ignoring_the_generator(reference: Callable[..., Any], replacement: Callable[[], torch.Generator]):
    """The reference, handed another generator than the one it was given."""

    def answer(*args: Any) -> Any:
        return reference(*(replacement() if isinstance(arg, torch.Generator) else arg for arg in args))

    return answer


def _from_the_global_generator() -> torch.Generator:
    return torch.Generator().manual_seed(int(torch.randint(2**62, (1,))))


def _from_a_fixed_seed() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


def test_there_is_an_exercise_that_takes_a_generator():
    assert {"09.get_batch", "10.sample"} <= {e.id for e in RANDOM}


@pytest.mark.parametrize("replacement", [_from_the_global_generator, _from_a_fixed_seed], ids=["global", "fixed-seed"])
@pytest.mark.parametrize("exercise", RANDOM, ids=_id)
@pytest.mark.usefixtures("untraced")
def test_an_answer_that_ignores_the_generator_is_told_so(exercise, replacement):
    result = check_recorded(exercise.id, _ignoring_the_generator(exercise.reference, replacement))
    assert result.kind == "randomness" and result.points == 0, result.verdict
    assert "It looks like you ignored the `generator` argument." in result.verdict
    assert result.summary == "does not draw from its generator: ignored the generator it was given"


def test_a_sampler_that_forgets_the_generator_loses_its_points():
    def sample(logits, temperature, generator):
        if temperature == 0:
            return logits.argmax(dim=-1)
        return torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1).squeeze(-1)

    result = check("10.sample", sample)
    assert result.kind == "randomness" and "drew from PyTorch's global random generator" in result.verdict


def test_a_check_leaves_the_notebooks_random_numbers_alone():
    def sample(logits, temperature, generator):
        return torch.multinomial(torch.softmax(logits, dim=-1), 1).squeeze(-1)

    state = torch.random.get_rng_state()
    check("10.sample", sample)
    assert torch.equal(torch.random.get_rng_state(), state)


# --- the text of every verdict ------------------------------------------------------------------------------------------


def _generic_wrong_answers() -> list[Callable[..., Any]]:
    def stub(*args: Any) -> Any:
        raise NotImplementedError("write your solution here")

    def raises(*args: Any) -> Any:
        raise ValueError("something went wrong.")

    def returns_none(*args: Any) -> None:
        return None

    def returns_text(*args: Any) -> str:
        return "answer"

    return [stub, raises, returns_none, returns_text]


_CODE_SPAN = re.compile(r"`[^`]*`|\[[^\]]*\]")  # code, and index notation such as [0, :]
_LINT = {
    "doubled punctuation": re.compile(r"\.\s*\.|[,;:]\s*[.,;:!?]|[.!?]\s*[,;:]"),
    "an empty detail": re.compile(r"\s\(\s*\)|:\s*[.)]|\(\s*[.,]|\bOn\s*,|\byou\s*\.|\s[,.](\s|$)"),
    "a tensor's repr": re.compile(r"tensor\(|Parameter containing"),
}


def lint(exercise_id: str, result: CheckResult) -> list[str]:
    """What is wrong with a verdict's text: an empty list when nothing is."""
    problems = []
    if not result.verdict.startswith(f"{exercise_id}: "):
        problems.append("the headline does not start with the exercise's name")
    for text, what in ((result.verdict, "verdict"), (result.summary, "summary")):
        if "\n" in text or "\x1b" in text:
            problems.append(f"the {what} is not one plain line")
        prose = _CODE_SPAN.sub("`code`", text)
        problems += [f"{name} in the {what}: {m.group(0)!r}" for name, pattern in _LINT.items() if (m := pattern.search(prose))]
    if len(result.summary) > 200:
        problems.append(f"the summary is {len(result.summary)} characters long, more than a table's line")
    if not result.verdict.endswith((".", "?", "!")):
        problems.append("the verdict does not end a sentence")
    return problems


def _answers(exercise: Exercise) -> list[tuple[str, Callable[..., Any]]]:
    # The catalogue's variants and mutants are linted by their own tests above, which check them anyway.
    answers = [("reference", exercise.reference)]
    if exercise in RANDOM:
        answers += [(r.__name__, _ignoring_the_generator(exercise.reference, r))
                    for r in (_from_the_global_generator, _from_a_fixed_seed)]
    return answers + [(f.__name__, f) for f in _generic_wrong_answers()]


@pytest.mark.parametrize("exercise", EXERCISES, ids=_id)
def test_every_verdict_passes_the_text_lint(exercise):
    problems = {}
    for name, answer in _answers(exercise):
        result = check_recorded(exercise.id, answer)
        if found := lint(exercise.id, result):
            problems[name] = (found, result.verdict)
    assert not problems, problems


def test_the_lint_catches_what_it_is_for():
    def result(verdict: str, summary: str = "wrong values") -> CheckResult:
        return CheckResult("03.attention", "wrong_values", 0, 2, summary, verdict)

    assert lint("03.attention", result("03.attention: wrong values (0/2 points). Fine, `x[..., 0]` and all.")) == []
    assert "doubled punctuation" in lint("03.attention", result("03.attention: wrong (0/2 points). Done..")).pop()
    assert "an empty detail" in lint("03.attention", result("03.attention: wrong (0/2 points). On , x.")).pop()
    assert "a tensor's repr" in lint("03.attention", result("03.attention: wrong. tensor([1, 2]).")).pop()
    assert lint("03.causal_mask", result("03.attention: x.")) == ["the headline does not start with the exercise's name"]


@pytest.mark.parametrize("exercise", EXERCISES, ids=_id)
def test_every_catalogue_string_reads_as_the_verdict_uses_it(exercise):
    texts = {"checked": exercise.checked, "nan_hint": exercise.nan_hint}
    for mistake in exercise.mistakes:
        assert mistake.description[:1].islower() and not mistake.description.endswith("."), mistake.name
        texts[f"{mistake.name}.description"], texts[f"{mistake.name}.fix"] = mistake.description, mistake.fix
    for mutant in exercise.mutants:
        assert mutant.what.strip(), mutant.name
    for where, text in texts.items():
        assert text.strip(), where
        prose = _CODE_SPAN.sub("`code`", text)
        found = [name for name, pattern in _LINT.items() if pattern.search(prose)]
        assert not found, (where, found, text)


# A fix may name what to change (an identifier, an attribute, an argument and its value, a number), never write it:
# no expression or statement of the answer's code appears in a verdict (the hints folded in the notebook do that).
_NAMING_SPAN = re.compile(r"`(?:[\w.]+(?:\(\))?|-?[\d.]+(?:e-?\d+)?|\w+=-?[\w.'\"]+|'[^']*'|\"[^\"]*\")`")


def _code_spans(text: str) -> list[str]:
    return [span for span in re.findall(r"`[^`]*`", text) if not _NAMING_SPAN.fullmatch(span)]


@pytest.mark.parametrize("exercise", EXERCISES, ids=_id)
def test_no_catalogued_fix_writes_the_answers_code(exercise):
    written = {mistake.name: _code_spans(mistake.fix) for mistake in exercise.mistakes}
    assert not any(written.values()), {name: spans for name, spans in written.items() if spans}
