"""The notebooks agree with the package, with _config.yml and with the table of contents, and were stored executed.

nbval (``make test-notebooks``) re-runs them and compares outputs; these tests check what nbval cannot: headers, build
cells, the toc, and the stored notebooks themselves.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # tools/ holds scripts, not a package
import book_pages  # noqa: E402
import notebook_header  # noqa: E402
import sync_build_cells  # noqa: E402

CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))
NOTEBOOKS = CHAPTERS + SOLUTIONS + EXERCISES
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def _ids(paths: list[Path]) -> list[str]:
    return [path.relative_to(ROOT).as_posix() for path in paths]


def _code_cells(path: Path) -> list[nbformat.NotebookNode]:
    return [cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]


def test_the_book_has_its_chapters():
    assert {"00_how_to_use.ipynb", "03_scaled_dot_product_attention.ipynb"} <= {path.name for path in CHAPTERS}


# --- header cells ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_header_cells_match_config(path):
    assert notebook_header.problems(path) == []


def _book(root: Path, url: str, branch: str) -> None:
    (root / "_config.yml").write_text(yaml.safe_dump({"repository": {"url": url, "branch": branch}}))
    for folder in notebook_header.NOTEBOOK_DIRS:
        (root / folder).mkdir()


def test_headers_derive_from_config_alone(tmp_path):
    _book(tmp_path, "https://github.com/someone/fork", "dev")
    (tmp_path / "solutions" / "07_x.ipynb").touch()  # chapter 07 has exercises, chapter 08 does not
    with_exercises, without = tmp_path / "chapters" / "07_x.ipynb", tmp_path / "chapters" / "08_y.ipynb"
    for path, title in ((with_exercises, "# 07 · Seven"), (without, "# 08 · Eight")):
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(title), nbformat.v4.new_code_cell("x = 1")])
        nbformat.write(notebook_header.apply_header(notebook, path, tmp_path), path)
        assert notebook_header.problems(path, tmp_path) == []

    title, setup, body = nbformat.read(with_exercises, as_version=4).cells
    colab = "https://colab.research.google.com/github/someone/fork/blob/dev"
    assert title.source.split("\n")[0] == "# 07 · Seven"
    assert f"]({colab}/chapters/07_x.ipynb)" in title.source and f"]({colab}/exercises/07_x.ipynb)" in title.source
    assert '"git+https://github.com/someone/fork"' in setup.source and "setup_notebook(seed=0)" in setup.source
    assert setup.metadata["tags"] == ["remove-cell"] and body.source == "x = 1"
    assert "exercises/" not in nbformat.read(without, as_version=4).cells[0].source


def test_header_problems_are_reported(tmp_path):
    _book(tmp_path, "https://github.com/someone/fork", "main")
    path = tmp_path / "exercises" / "03_z.ipynb"
    notebook = notebook_header.apply_header(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 03 · Z")]), path, tmp_path)
    notebook.cells[0].source = notebook.cells[0].source.replace("/blob/main/", "/blob/old/")
    notebook.cells[1].metadata["tags"] = []
    nbformat.write(notebook, path)
    found = notebook_header.problems(path, tmp_path)
    assert len(found) == 2 and "header cell 1" in found[0] and "remove-cell" in found[1]
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 04 · Wrong number")]), path)
    assert "'# 03 · Title'" in notebook_header.problems(path, tmp_path)[0]


def test_solutions_and_exercises_are_titled_after_their_chapter(tmp_path):
    """In the book no two pages share a name: the solutions page is "Solutions · 07 Seven", never "07 · Seven"."""
    _book(tmp_path, "https://github.com/someone/fork", "main")
    chapter = tmp_path / "chapters" / "07_x.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 07 · Seven")]), chapter)
    for folder, expected in (("solutions", "# Solutions · 07 Seven"), ("exercises", "# Exercises · 07 Seven")):
        path = tmp_path / folder / "07_x.ipynb"
        # The author's first line in the chapter's form, or an outdated one: --write gives the chapter's title.
        for written in ("# 07 · Seven", f"# {expected.split(' ')[1]} · 07 Old title"):
            notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(written)])
            nbformat.write(notebook_header.apply_header(notebook, path, tmp_path), path)
            assert nbformat.read(path, as_version=4).cells[0].source.split("\n")[0] == expected
            assert notebook_header.problems(path, tmp_path) == []
        notebook = nbformat.read(path, as_version=4)
        notebook.cells[0].source = notebook.cells[0].source.replace(expected, "# 07 · Seven")
        nbformat.write(notebook, path)
        assert "header cell 1 (title and badges) differs (run tools/notebook_header.py --write" in notebook_header.problems(path, tmp_path)[0]
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Solutions · 07 Seven")]), chapter)
    assert "'# 07 · Title'" in notebook_header.problems(chapter, tmp_path)[0]  # a chapter keeps the chapter form


def test_every_page_of_the_book_has_its_own_title():
    titles = [nbformat.read(path, as_version=4).cells[0].source.split("\n")[0] for path in CHAPTERS + SOLUTIONS]
    assert sorted(title for title in titles if titles.count(title) > 1) == []


# --- build cells ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", CHAPTERS + SOLUTIONS, ids=_ids(CHAPTERS + SOLUTIONS))
def test_build_cells_match_the_package(path):
    assert sync_build_cells.drift(path) == []


def test_chapter_03_shows_its_components():
    cells = sync_build_cells.build_cells(ROOT / "chapters" / "03_scaled_dot_product_attention.ipynb")
    shown = {name for cell in cells for name in cell.marker.split(" · ")[1].split(", ")}
    assert {"scaled_dot_product_attention", "causal_mask", "padding_mask", "sliding_window_mask"} <= shown


def test_build_cell_drift_and_bad_markers_are_caught(tmp_path):
    (tmp_path / "tutorial_lib").mkdir()
    (tmp_path / "tutorial_lib" / "toy.py").write_text(
        "import functools\n\n\n@functools.cache\ndef f(x):\n    return x + 1\n\n\nclass C:\n    def g(self):\n        return 2\n"
    )
    marker = "# tutorial_lib/toy.py · f, C.g"
    expected = f"{marker}\n@functools.cache\ndef f(x):\n    return x + 1\n\n\ndef g(self):\n    return 2"
    assert sync_build_cells.expected_source(marker, tmp_path) == expected

    path = tmp_path / "nb.ipynb"
    drifted = expected.replace("x + 1", "x + 2")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(drifted)]), path)
    assert len(sync_build_cells.drift(path, tmp_path)) == 1
    assert sync_build_cells.write(path, tmp_path) == 1
    assert sync_build_cells.drift(path, tmp_path) == []
    assert nbformat.read(path, as_version=4).cells[0].source == expected

    for bad, message in [
        ("# tutorial_lib/toy.py · missing", "defines no 'missing'"),
        ("# tutorial_lib/toy.py · C.missing", "defines no 'C.missing'"),
        ("# tutorial_lib/gone.py · f", "does not exist"),
        ("# tutorial_lib/toy.py - f", "malformed"),
    ]:
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(bad)]), path)
        with pytest.raises(ValueError, match=message):
            sync_build_cells.drift(path, tmp_path)


# --- stored outputs -------------------------------------------------------------------------------------------------


def _has_assert(source: str) -> bool:
    # IPython magics and shell escapes are not Python: leave them out before parsing.
    python = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))
    return any(isinstance(node, ast.Assert) for node in ast.walk(ast.parse(python)))


IGNORE_OUTPUT = "nbval-ignore-output"  # the cell tag nbval honours; a tag is metadata, which no reader sees


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_ignored_outputs_are_pinned_by_an_assert(path):
    unpinned = [
        cell.source.split("\n")[0]
        for cell in _code_cells(path)
        if IGNORE_OUTPUT in cell.metadata.get("tags", []) and not _has_assert(cell.source)
    ]
    assert unpinned == [], "a cell whose output nbval ignores must assert the claim it shows"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_no_nbval_marker_comments(path):
    """nbval's comment markers (``# NBVAL_IGNORE_OUTPUT``, ``# NBVAL_SKIP``, …) are printed at the top of the cell in
    the book, in Jupyter and on Colab; its cell tags (``nbval-ignore-output``) do the same and no reader sees them."""
    markers = [cell.source.split("\n")[0] for cell in _code_cells(path) if "NBVAL_" in cell.source]
    assert markers == [], f"use the cell tag {IGNORE_OUTPUT!r} (cell metadata) instead of a marker comment"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_ignore_tags_are_ones_nbval_honours(path):
    """A misspelt tag (``nbval-ignore``, ``nbval_ignore_output``) is silently not honoured by nbval."""
    near_misses = {
        tag for cell in _code_cells(path) for tag in cell.metadata.get("tags", []) if "nbval" in tag.lower()
    } - {IGNORE_OUTPUT, "nbval-skip", "nbval-raises-exception", "nbval-check-output"}
    assert near_misses == set()


def test_the_assert_rule_sees_asserts_only():
    assert _has_assert("%time x = 1\nassert x == 1")
    assert not _has_assert("# assert nothing\nprint('assert')")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_no_stored_errors(path):
    errors = [output.ename for cell in _code_cells(path) for output in cell.outputs if output.output_type == "error"]
    assert errors == []


@pytest.mark.parametrize("path", CHAPTERS + SOLUTIONS, ids=_ids(CHAPTERS + SOLUTIONS))
def test_stored_outputs_come_from_one_run_top_to_bottom(path):
    counts = [cell.execution_count for cell in _code_cells(path)]
    assert counts == list(range(1, len(counts) + 1)), "run `make execute` (or tools/execute_notebooks.py PATH)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_every_displayed_widget_has_stored_state(path):
    notebook = nbformat.read(path, as_version=4)
    state = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    shown = [
        output.data[WIDGET_VIEW]["model_id"]
        for cell in _code_cells(path)
        for output in cell.outputs
        if WIDGET_VIEW in output.get("data", {})
    ]
    assert [model_id for model_id in shown if model_id not in state] == []


# --- table of contents ----------------------------------------------------------------------------------------------



def test_every_toc_entry_exists():
    entries = book_pages.toc_files()  # the root, then every file: the pages of the book
    missing = [entry for entry in entries if not any((ROOT / f"{entry}{suffix}").exists() for suffix in (".md", ".ipynb"))]
    assert missing == []


def test_every_chapter_and_solution_is_in_the_toc():
    listed = set(book_pages.toc_files())
    assert [name for name in _ids(CHAPTERS + SOLUTIONS) if name.removesuffix(".ipynb") not in listed] == []
