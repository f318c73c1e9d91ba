"""tools/make_exercises.py: exercises/ is what solutions/ generates, and malformed solution markers are refused."""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from tutorial_lib.build_track import cell_python

from tutorial_lib.checks import chapter_exercises

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_exercises", ROOT / "tools" / "make_exercises.py")
make_exercises = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_exercises)
notebook_header = sys.modules["notebook_header"]  # imported by make_exercises from tools/

SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
NAME = "98_example.ipynb"
BADGE = "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/o/r/blob/main/solutions/98_example.ipynb)"

SOLVED = '''def double(x):
    """Twice x."""
    # TODO: one line.
    # BEGIN SOLUTION
    y = x + x
    return y
    # END SOLUTION'''


def example(*code: str, extra: list | None = None) -> nbformat.NotebookNode:
    cells = [new_markdown_cell("# 98 · Example\n\n" + BADGE)]
    cells += [new_code_cell(source) for source in code]
    return new_notebook(cells=cells + (extra or []))


# --- the repository is in sync ----------------------------------------------------------------------------------------


def test_exercises_are_what_the_solutions_generate(capsys):
    assert make_exercises.main(["--check"]) == 0, capsys.readouterr().err


def test_every_solutions_notebook_has_a_catalogue_and_every_catalogue_a_notebook():
    catalogues = sorted(p.stem[2:] for p in (ROOT / "tutorial_lib" / "checks").glob("ch[0-9][0-9].py"))
    assert SOLUTIONS, "no solutions notebook found"
    assert sorted(path.name[:2] for path in SOLUTIONS) == catalogues


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda path: path.name)
def test_every_exercise_of_the_chapter_is_checked_once_in_its_solutions(path):
    notebook = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
    checked = re.findall(r"""^(?:\w+ = )?check\(["']([^"']+)["']""", code, re.M)  # a check, its result kept or not
    assert checked == [exercise.id for exercise in chapter_exercises(path.name[:2])]


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda path: path.name)
def test_generated_stubs_are_valid_python_that_keeps_the_hints(path):
    solution = nbformat.read(path, as_version=4)
    exercise = nbformat.read(ROOT / "exercises" / path.name, as_version=4)
    for cell in exercise.cells:
        if cell.cell_type == "code":
            ast.parse(cell_python(cell.source))
    code = "\n".join(cell.source for cell in exercise.cells if cell.cell_type == "code")
    assert "SOLUTION" not in code
    solved = "\n".join(cell.source for cell in solution.cells if cell.cell_type == "code")
    assert code.count(make_exercises.STUB) == solved.count("# BEGIN SOLUTION") > 0
    # The hints are folded in the markdown (Hint 1 · a nudge, Hint 2 · the recipe): every one reaches the learner.
    def hints(notebook):
        return sum(cell.source.count("<summary>Hint") for cell in notebook.cells if cell.cell_type == "markdown")

    assert hints(exercise) == hints(solution)
    assert f"blob/main/exercises/{path.name})" in exercise.cells[0].source


# --- what the generator writes ----------------------------------------------------------------------------------------


def test_a_solution_block_becomes_a_stub_keeping_signature_docstring_and_todo():
    source, blocks = make_exercises.stub_source(SOLVED, "here")
    assert blocks == 1
    assert source == '''def double(x):
    """Twice x."""
    # TODO: one line.
    raise NotImplementedError("write your solution here")'''


def test_every_block_of_a_class_becomes_a_stub_at_its_own_indentation():
    source = '''class Counter:
    def __init__(self):
        # BEGIN SOLUTION
        self.n = 0
        # END SOLUTION

    def step(self):
        if True:
            # BEGIN SOLUTION
            self.n += 1
            # END SOLUTION
        return self.n'''
    stubbed, blocks = make_exercises.stub_source(source, "here")
    assert blocks == 2
    assert '        raise NotImplementedError("write your solution here")\n\n    def step' in stubbed
    assert '            raise NotImplementedError("write your solution here")\n        return self.n' in stubbed
    ast.parse(stubbed)


def test_the_notebook_loses_solution_only_cells_and_outputs_and_gets_its_own_header():
    solution = example(
        SOLVED,
        'check("98.double", double)',
        extra=[new_markdown_cell("Solutions only.", metadata={"tags": ["solution-only"]})],
    )
    solution.cells[1].outputs = [nbformat.v4.new_output("stream", text="done\n")]
    solution.cells[1].execution_count = 3
    exercise = make_exercises.make_exercise_notebook(solution, NAME)
    title, setup = notebook_header.header_sources(ROOT / "exercises" / NAME, "# 98 · Example")
    assert "/blob/main/exercises/98_example.ipynb)" in title
    assert [(cell.cell_type, cell.source) for cell in exercise.cells[:2]] == [("markdown", title), ("code", setup)]
    assert [cell.cell_type for cell in exercise.cells[2:]] == ["code", "code"]
    assert exercise.cells[2].outputs == [] and exercise.cells[2].execution_count is None
    assert solution.cells[1].execution_count == 3  # the source notebook is left alone


# --- what it refuses ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f():\n    # BEGIN SOLUTION\n    return 1\n", "never closed"),
        ("def f():\n    return 1\n    # END SOLUTION\n", "without a '# BEGIN SOLUTION'"),
        ("def f():\n    # BEGIN SOLUTION\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n", "inside the block"),
        ("def f():\n    # BEGIN SOLUTION\n    return 1\n  # END SOLUTION\n", "indented differently"),
        ("# BEGIN SOLUTION\nx = 1\n# END SOLUTION\n", "at top level"),
        ("def f():\n    # BEGIN SOLUTION\n    # END SOLUTION\n", "empty solution block"),
        ("def f():\n    #BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n", "malformed marker"),
        ("def f():\n    # begin solution\n    return 1\n    # END SOLUTION\n", "malformed marker"),
    ],
    ids=["unclosed", "unopened", "nested", "indentation", "top-level", "empty", "no-space", "lower-case"],
)
def test_unbalanced_or_malformed_markers_are_refused(source, message):
    with pytest.raises(make_exercises.MarkerError, match=message):
        make_exercises.stub_source(source, "here")


def test_a_check_that_follows_no_solution_block_is_refused():
    solution = example(SOLVED, 'check("98.double", double)', "def half(x):\n    return x / 2", 'check("98.half", half)')
    with pytest.raises(make_exercises.MarkerError, match="cell 4: this check follows no solution block"):
        make_exercises.make_exercise_notebook(solution, NAME)


def test_a_solutions_notebook_without_markers_is_refused():
    with pytest.raises(make_exercises.MarkerError, match="has no '# BEGIN SOLUTION'"):
        make_exercises.make_exercise_notebook(example("def f():\n    return 1"), NAME)


def test_a_notebook_without_its_title_is_refused():
    solution = example(SOLVED, 'check("98.double", double)')
    solution.cells[0].source = "# Example"
    with pytest.raises(ValueError, match="the first cell must be markdown starting with '# 98 · Title'"):
        make_exercises.make_exercise_notebook(solution, NAME)


# --- --check finds drift ------------------------------------------------------------------------------------------------


@pytest.fixture
def copy_of_the_repository(tmp_path):
    for folder in ("solutions", "exercises"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    return tmp_path


def _check(root: Path) -> int:
    return make_exercises.main(["--check", "--root", str(root)])


def test_check_passes_on_an_unchanged_copy(copy_of_the_repository):
    assert _check(copy_of_the_repository) == 0


def test_check_fails_when_an_exercise_was_edited_by_hand(copy_of_the_repository, capsys):
    path = copy_of_the_repository / "exercises" / SOLUTIONS[0].name
    notebook = nbformat.read(path, as_version=4)
    notebook.cells[-1].source += "\nEdited by hand."
    nbformat.write(notebook, path)
    assert _check(copy_of_the_repository) == 1
    assert "differs from what" in capsys.readouterr().err


def test_check_fails_when_a_solution_changed(copy_of_the_repository, capsys):
    path = copy_of_the_repository / "solutions" / SOLUTIONS[0].name
    notebook = nbformat.read(path, as_version=4)
    cell = next(cell for cell in notebook.cells if cell.cell_type == "code" and "# BEGIN SOLUTION" in cell.source)
    cell.source = cell.source.replace("# BEGIN SOLUTION", "# (a line the stub keeps)\n    # BEGIN SOLUTION", 1)
    nbformat.write(notebook, path)
    assert _check(copy_of_the_repository) == 1
    assert "differs from what" in capsys.readouterr().err


def test_check_fails_on_missing_orphaned_or_unexecuted_exercises(copy_of_the_repository, capsys):
    root = copy_of_the_repository
    (root / "exercises" / SOLUTIONS[0].name).rename(root / "exercises" / "99_orphan.ipynb")
    assert _check(root) == 1
    err = capsys.readouterr().err
    assert "missing" in err and "no solutions/99_orphan.ipynb" in err

    (root / "exercises" / "99_orphan.ipynb").unlink()
    assert make_exercises.main(["--no-execute", "--root", str(root)]) == 0
    assert _check(root) == 1
    assert "never ran" in capsys.readouterr().err
