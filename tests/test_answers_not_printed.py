"""Nothing hands over an answer: no unfolded chapter cell prints an exercise's answer, and no exercise notebook imports
one of its own answers from tutorial_lib (``tools/answer_overlap.py`` says how a printed answer is measured)."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import sys
from pathlib import Path

import pytest

from tutorial_lib.checks import Exercise

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import answer_overlap  # noqa: E402

PAIRS = answer_overlap.chapter_pairs()
IDS = [chapter.name[:2] for chapter, _ in PAIRS]


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def test_every_chapter_with_exercises_is_compared():
    assert IDS == [f"{n:02d}" for n in range(1, 16)]


@pytest.mark.parametrize(("chapter_path", "solutions_path"), PAIRS, ids=IDS)
def test_no_unfolded_chapter_cell_prints_an_answer(chapter_path, solutions_path):
    printed = answer_overlap.printed_answers(_load(chapter_path), _load(solutions_path))
    assert not printed, "\n".join(
        f"{chapter_path.name} cell {item.cell} prints {item.share:.0%} of exercise {item.answer.exercise}'s answer "
        f"({item.answer.title}): ask for what the chapter does not show, or fold the cell with "
        f"`python tools/answer_overlap.py --fold`" for item in printed)


@pytest.mark.parametrize(("chapter_path", "solutions_path"), PAIRS, ids=IDS)
def test_each_fold_hides_an_answer_and_sends_the_reader_to_its_exercise(chapter_path, solutions_path):
    """The folds are exactly the cells that print an answer (none left over from an answer that changed), each
    collapsed in the book and in JupyterLab, behind a line naming the exercise."""
    chapter = _load(chapter_path)
    printed = answer_overlap.printed_answers(chapter, _load(solutions_path), folded_too=True)
    expected: dict[int, set[int]] = {}
    for item in printed:
        expected.setdefault(item.cell, set()).add(item.answer.exercise)
    folded = {index: cell for index, cell in enumerate(chapter["cells"]) if answer_overlap.is_folded(cell)}
    assert set(folded) == set(expected), "run `python tools/answer_overlap.py --fold`"
    for index, cell in folded.items():
        metadata = cell["metadata"]
        assert metadata["jupyter"]["source_hidden"] is True
        assert metadata["tutorial_lib"]["answer_of"] == sorted(expected[index])
        prompt = metadata["mystnb"]["code_prompt_show"]
        assert prompt == answer_overlap.fold_prompt(sorted(expected[index]))
        assert all(str(n) in prompt for n in expected[index]) and "first" in prompt


def test_the_share_sees_through_spacing_comments_and_indentation():
    answer = answer_overlap.code_tokens("return torch.tril(torch.ones(n, n, dtype=torch.bool))")
    copied = answer_overlap.code_tokens("def causal(n):\n    # the mask\n    return torch.tril(\n        torch.ones(n, n, dtype=torch.bool)\n    )\n")
    assert answer_overlap.shared_share(answer, copied) == 1.0
    other = answer_overlap.code_tokens("mask = torch.ones(n, n).triu(1).bool()\nreturn ~mask")
    assert answer_overlap.shared_share(answer, other) < answer_overlap.SHARE
    half = answer_overlap.code_tokens("a = torch.tril(torch.ones(n, n, dtype=torch.bool))\nreturn something_else(q, k, v, mask=a) * 2")
    assert 0.4 < answer_overlap.shared_share(half, copied) < 0.6


def test_answers_are_found_under_their_exercise():
    solutions = {"cells": [
        {"cell_type": "markdown", "source": ["## Exercise 2 · The causal mask (1 point)\n"]},
        {"cell_type": "code", "source": ["def f(n):\n", "    # BEGIN SOLUTION\n", "    return n + 1\n", "    # END SOLUTION\n"]},
    ]}
    (answer,) = answer_overlap.answers(solutions)
    assert (answer.exercise, answer.title, answer.source) == (2, "The causal mask", "return n + 1")


def _code(cell: dict) -> str:
    """A code cell's Python: its cell and line magics left out."""
    return "\n".join(line for line in "".join(cell["source"]).split("\n") if not line.startswith(("%", "!")))


def _answer_names(solutions: dict) -> set[str]:
    """The functions and classes whose bodies hold a solution block: what the learner writes."""
    names = set()
    for cell in solutions["cells"]:
        if cell["cell_type"] == "code" and "# BEGIN SOLUTION" in (source := _code(cell)):
            names |= {node.name for node in ast.parse(source).body if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                      and "# BEGIN SOLUTION" in ast.get_source_segment(source, node)}
    return names


def _package_imports(notebook: dict) -> list[tuple[str, object]]:
    """``(name as written, object)`` for every name a code cell imports from tutorial_lib."""
    found = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        for node in ast.walk(ast.parse(_code(cell))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tutorial_lib"):
                module = importlib.import_module(node.module)
                found += [(alias.asname or alias.name, getattr(module, alias.name, None)) for alias in node.names]
    return found


# A package object a notebook needs as a *tool*, not as a helper of an answer: the exercise whose answer it would be
# lists it in ``forbidden``, so an answer that uses it scores 0 (the test checks that), and the learner's own class
# rebinds the name in the cell that builds it.
TOOLS = {
    ("08", "GPT"): "08.gpt_module",  # the book's GPT, that exercise 2 initialises; exercise 3 builds the learner's own
    ("10", "KVCache"): "10.cached_gpt",  # the book's cache, for the book's GPT in exercise 6; exercise 9 builds the learner's
}


@pytest.mark.parametrize(("chapter_path", "solutions_path"), PAIRS, ids=IDS)
def test_no_exercise_notebook_imports_its_own_answer(chapter_path, solutions_path):
    """No package object that is an exercise's answer (its check's reference, or an object of the same name as the
    learner's) is imported into that notebook, under any name: a later exercise or
    measurement uses the learner's own earlier answer, graded once that one passes its own check."""
    chapter = chapter_path.name[:2]
    solutions = _load(solutions_path)
    names = _answer_names(solutions)
    checks = importlib.import_module(f"tutorial_lib.checks.ch{chapter}")
    exercises = {exercise.id: exercise for exercise in vars(checks).values() if isinstance(exercise, Exercise)}
    answers = {id(exercise.reference) for exercise in exercises.values()}
    for notebook, where in ((solutions, "solutions"), (_load(ROOT / "exercises" / solutions_path.name), "exercises")):
        for name, obj in _package_imports(notebook):
            if (chapter, getattr(obj, "__name__", None)) in TOOLS:
                assert obj in exercises[TOOLS[chapter, obj.__name__]].forbidden
                continue
            assert getattr(obj, "__name__", None) not in names and id(obj) not in answers, (
                f"{where}/{solutions_path.name} imports {name} from tutorial_lib: it is the answer of one of its exercises")


def _merge(symbols, pair, new):
    merged, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            merged, i = [*merged, new], i + 2
        else:
            merged, i = [*merged, symbols[i]], i + 1
    return merged


def test_a_later_answer_is_graded_once_the_earlier_one_it_uses_passes():
    from tutorial_lib.checks import check
    from tutorial_lib.checks.ch01 import reference_encode_word

    namespace = {"merge": lambda symbols, pair, new: list(symbols)}  # exercise 3, wrong: merges nothing
    exec(compile(inspect.getsource(reference_encode_word).replace("reference.merge_pair", "merge"), "<learner>", "exec"),
         namespace)
    result = check("01.encode_word", namespace["reference_encode_word"])
    assert (result.kind, result.points) == ("earlier_answer_fails", 0) and "`merge` of exercise 3" in result.verdict
    namespace["merge"] = _merge  # a merge that passes 01.merge
    assert check("01.encode_word", namespace["reference_encode_word"]).kind == "passed"
