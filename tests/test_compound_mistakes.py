"""Two catalogued mistakes made at once (tutorial_lib.checks.compound): every pair that the catalogue's builders can
make together is generated, checked, and named.

A compound's verdict names both mistakes, unless the compound cannot be told from something simpler on the cases: it
behaves exactly as one catalogued mistake (then that one is named: it is the one the check is sure of), or as another
pair, or the two mistakes cancel. Those are counted and listed by ``tools/catalogue_report.py``.
"""

from __future__ import annotations

import pkgutil
import re

import pytest

from tutorial_lib import checks
from tutorial_lib.checks import chapter_exercises, check
from tutorial_lib.checks.compound import Recipe, compounds, mistake_builder, recipe_of
from tutorial_lib.checks.core import Mistake, _ours, _same_behaviour

CHAPTERS = sorted(m.name[2:] for m in pkgutil.iter_modules(checks.__path__) if re.fullmatch(r"ch\d\d", m.name))
ALL_EXERCISES = [exercise for chapter in CHAPTERS for exercise in chapter_exercises(chapter)]
pytestmark = pytest.mark.usefixtures("annotation_checks_off")  # tests/conftest.py says why
PAIRS = [(exercise, compound) for exercise in ALL_EXERCISES for compound in compounds(exercise.mistakes)]


def _behaves_like(exercise, answer_outcomes, other_outcomes) -> bool:
    cases = _ours(exercise).cases
    refused = [_ours(exercise).reference(i, case).error is not None for i, case in enumerate(cases)]
    return all(_same_behaviour(a, b, exercise.tolerance, refused=bad)
               for a, b, bad in zip(answer_outcomes, other_outcomes, refused))


def simpler_explanation(exercise, compound) -> str | None:
    """What else the compound behaves exactly like on every case, if anything: the reference, one mistake, a pair."""
    ours = _ours(exercise)
    cases = ours.cases
    mine = next(results for other, results in ours.compounds(cases) if other is compound or other.recipe == compound.recipe)
    if _behaves_like(exercise, mine, [ours.reference(i, case) for i, case in enumerate(cases)]):
        return "the reference"
    for name, variants in ours.mistakes(cases).items():
        if any(_behaves_like(exercise, mine, results) for results in variants):
            return name
    for other, results in ours.compounds(cases):
        if {other.first, other.second} != {compound.first, compound.second} and _behaves_like(exercise, mine, results):
            return f"{other.first} + {other.second}"
    return None


def test_pairs_are_generated_for_most_exercises():
    with_pairs = {exercise.id for exercise, _ in PAIRS}
    assert len(PAIRS) >= 100 and len(with_pairs) >= 30, (len(PAIRS), sorted(with_pairs))


@pytest.mark.parametrize(("exercise", "compound"), PAIRS,
                         ids=[f"{e.id}-{c.first}+{c.second}-{i}" for i, (e, c) in enumerate(PAIRS)])
def test_two_mistakes_made_together_are_both_named(exercise, compound):
    result = check(exercise.id, compound.answer)
    if result.made_together and set(result.candidates) == {compound.first, compound.second}:
        assert result.points == 0
        assert "you made two mistakes" in result.verdict
        return
    simpler = simpler_explanation(exercise, compound)
    assert simpler is not None, f"{compound.first} + {compound.second} made together: {result.verdict}"
    if simpler == "the reference":
        assert result.passed
    elif "+" not in simpler:
        # The compound is that one mistake on every case: naming it is right, and the check cannot see more.
        assert result.candidates == (simpler,) or simpler in result.candidates, result.verdict
    else:  # two pairs behave alike on every case: neither is named as sure, and the answer loses its points
        assert result.points == 0 and not result.made_together, result.verdict


# --- the generator itself ---------------------------------------------------------------------------------------------


@mistake_builder
def _demo_like(*, a=False, b=False, c=0):
    def answer(x):
        return x + a + 10 * b + 100 * c

    return answer


def _mistakes(*variants_by_name):
    return tuple(Mistake(name, "did it", "Do not.", tuple(variants)) for name, variants in variants_by_name)


def test_two_builders_keywords_compose_and_a_shared_keyword_does_not():
    mistakes = _mistakes(("a", [_demo_like(a=True)]), ("b", [_demo_like(b=True)]),
                         ("c1", [_demo_like(c=1)]), ("c2", [_demo_like(c=2)]))
    made = {(c.first, c.second): c.answer(0) for c in compounds(mistakes)}
    assert made == {("a", "b"): 11, ("a", "c1"): 101, ("a", "c2"): 201, ("b", "c1"): 110, ("b", "c2"): 210}
    assert recipe_of(_demo_like(a=True)) == Recipe(_demo_like.__wrapped__, (("a", True),))


def test_a_compound_the_catalogue_holds_as_one_mistake_is_that_mistake():
    mistakes = _mistakes(("a", [_demo_like(a=True)]), ("b", [_demo_like(b=True)]),
                         ("both", [_demo_like(a=True, b=True)]))
    assert [(c.first, c.second) for c in compounds(mistakes)] == []


def test_variants_not_made_by_a_builder_are_not_composed():
    mistakes = _mistakes(("a", [_demo_like(a=True)]), ("by_hand", [lambda x: x + 1]))
    assert list(compounds(mistakes)) == []
