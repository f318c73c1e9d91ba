"""What the book's pages say is true: the generated pages are up to date, each chapter's "Next" goes where the book's
Next button goes, no ``\\text{…}`` shows a backslash, every Colab badge opens its own notebook, and the traceability
page names symbols, tests and build cells that exist, with a row for every equation number a chapter shows."""

from __future__ import annotations

import ast
import base64
import importlib
import posixpath
import re
import struct
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # tools/ holds scripts, not a package
import book_pages  # noqa: E402
import notebook_header  # noqa: E402

PAGES = book_pages.toc_files()
CHAPTERS = [page for page in PAGES if page.startswith("chapters/")]
NOTEBOOKS = sorted(path for folder in ("chapters", "solutions", "exercises") for path in (ROOT / folder).glob("*.ipynb"))
PLAN = book_pages.load_plan()
WHERE = [(item["item"], where) for item in PLAN["paper"] for where in item["where"]]
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def _ids(paths: list[Path]) -> list[str]:
    return [path.relative_to(ROOT).as_posix() for path in paths]


def _markdown(path: Path) -> str:
    if path.suffix == ".ipynb":
        return "\n\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "markdown")
    return path.read_text(encoding="utf-8")


# --- generated pages ------------------------------------------------------------------------------------------------


def test_intro_map_and_traceability_page_are_what_the_tool_writes(capsys):
    assert book_pages.main(["--check"]) == 0, capsys.readouterr().err


def test_the_map_links_every_chapter_of_the_toc_and_names_the_others():
    intro = (ROOT / "intro.md").read_text(encoding="utf-8")
    for chapter in PLAN["chapters"]:
        present = [page for page in CHAPTERS if page.startswith(f"chapters/{chapter['number']}_")]
        if present:
            assert f"]({present[0]}.ipynb)" in intro, chapter["number"]
        else:
            assert f"{chapter['number']} · {chapter['title']} ({book_pages.BEING_WRITTEN})" in intro


def _toy_book(root: Path, toc_chapters: list[str], build_cell: str = "# tutorial_lib/toy.py · f") -> None:
    (root / "tools").mkdir()
    (root / "tutorial_lib").mkdir()
    (root / "chapters").mkdir()
    (root / "tutorial_lib" / "toy.py").write_text("def f():\n    return 1\n\n\ndef g():\n    return 2\n")
    plan = {
        "chapters": [
            {"number": "01", "part": "One", "title": "First", "builds": "f"},
            {"number": "02", "part": "One", "title": "Second", "builds": "g"},
        ],
        "paper": [{"item": "Eq. (1)", "what": "f", "tags": ["1"], "where": [
            {"chapter": "01", "symbol": "tutorial_lib.toy.f", "test": "tests/test_toy.py::test_f"},
            {"chapter": "02", "symbol": "tutorial_lib.toy.f", "test": "tests/test_toy.py::test_f"},
        ]}],
    }
    (root / "tools" / "book_plan.yml").write_text(yaml.safe_dump(plan, allow_unicode=True))
    toc = {"root": "intro", "parts": [{"caption": "Part one", "chapters": [{"file": f} for f in toc_chapters]}]}
    (root / "_toc.yml").write_text(yaml.safe_dump(toc))
    cells = [nbformat.v4.new_markdown_cell("# 01 · The first"), nbformat.v4.new_code_cell(build_cell)]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), root / "chapters" / "01_first.ipynb")
    (root / "intro.md").write_text(f"# Intro\n\n{book_pages.MAP_BEGIN}\nold\n{book_pages.MAP_END}\n\nAfter.\n")


def test_the_generator_links_chapters_present_and_names_chapters_to_come(tmp_path):
    _toy_book(tmp_path, ["chapters/01_first"])
    assert book_pages.main(["--write", "--root", str(tmp_path)]) == 0
    intro = (tmp_path / "intro.md").read_text()
    assert "| Part one | [01 · The first](chapters/01_first.ipynb) | f |" in intro  # the notebook's title, the toc's part
    assert "| One | 02 · Second (*being written*) | g |" in intro and intro.endswith("\n\nAfter.\n")
    page = (tmp_path / "traceability.md").read_text()
    assert "## Eq. (1)\n\nf\n\n- [01 · The first](chapters/01_first.ipynb), [build cell](#cell-01-toy.f): `tutorial_lib.toy.f`" in page
    assert "02 · Second (*being written*)" in page
    assert book_pages.main(["--check", "--root", str(tmp_path)]) == 0


def test_the_generator_refuses_a_missing_build_cell_or_an_unplanned_chapter(tmp_path, capsys):
    _toy_book(tmp_path, ["chapters/01_first"], build_cell="# tutorial_lib/toy.py · g")
    assert book_pages.main(["--check", "--root", str(tmp_path)]) == 1
    assert "chapters/01_first shows no build cell of tutorial_lib.toy.f" in capsys.readouterr().err
    other = tmp_path / "other"
    other.mkdir()
    _toy_book(other, ["chapters/01_first", "chapters/03_third"])
    assert book_pages.main(["--check", "--root", str(other)]) == 1
    assert "lists chapters ['03'] that tools/book_plan.yml does not plan" in capsys.readouterr().err


# --- the traceability page's claims ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("item", "where"), WHERE, ids=[f"{item} {where['chapter']} {where['symbol']}" for item, where in WHERE])
def test_every_listed_symbol_and_test_exists(item, where):
    module, name = book_pages.split_symbol(where["symbol"])
    value = importlib.import_module(f"tutorial_lib.{module.replace('/', '.')}")
    for attribute in name.split("."):
        value = getattr(value, attribute)  # AttributeError names what is missing
    file, test = where["test"].split("::")
    tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
    tests = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert test.split("[")[0] in tests, f"{file} has no {test}"


def test_every_equation_number_a_chapter_shows_has_its_row():
    listed = {tag for item in PLAN["paper"] for tag in item["tags"]}
    shown = {
        (tag, path.name) for path in sorted((ROOT / "chapters").glob("*.ipynb")) for tag in re.findall(r"\\tag\{([^}]*)\}", _markdown(path))
    }
    assert sorted((tag, name) for tag, name in shown if tag not in listed) == []


def test_the_traceability_page_covers_what_the_issue_lists():
    items = {item["item"] for item in PLAN["paper"]}
    assert {"Eq. (1)", "Eq. (2)", "Eq. (3)", "§3.1", "§3.2.2", "§3.2.3", "§3.4", "§3.5", "§5.4", "§6.1", "Table 1", "Table 3"} <= items
    assert "traceability" in PAGES


# --- "Next" ---------------------------------------------------------------------------------------------------------


def closing_next(path: Path) -> str:
    """The last paragraph starting with "Next" in the notebook's last markdown cell (its closing)."""
    last = [cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "markdown"][-1]
    paragraphs = [paragraph.strip() for paragraph in last.source.split("\n\n") if paragraph.strip().startswith("Next")]
    return paragraphs[-1] if paragraphs else ""


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_closing_next_goes_where_the_books_next_goes(chapter):
    """The book's Next button opens the next file of _toc.yml; the closing says where that is, as a link titled with
    the page's own title, and names no other chapter (a chapter being written is named once it is in the toc)."""
    following = PAGES[PAGES.index(chapter) + 1] if chapter != PAGES[-1] else None
    if following is None:
        pytest.skip("the last page of the book has no Next")
    paragraph = closing_next(ROOT / f"{chapter}.ipynb")
    assert paragraph, "the closing has no paragraph starting with 'Next'"
    links = LINK.findall(paragraph)
    assert links, f"'Next' must link the page, as [NN · Title](NN_slug.ipynb): {paragraph!r}"
    text, target = links[0]
    linked = posixpath.normpath(posixpath.join("chapters", target.split("#")[0])).rsplit(".", 1)[0]
    assert linked == following, f"'Next' links {target}, but the book's Next button opens {following}"
    assert text == book_pages.page_title(following), f"the link's text must be the page's title, {book_pages.page_title(following)!r}"
    named = set(re.findall(r"\b[Cc]hapters? (\d\d)\b", paragraph))
    assert named <= {following.split("/")[-1][:2]}, f"'Next' names chapter(s) {sorted(named)}, but Next opens {following}"


# --- text that renders wrongly --------------------------------------------------------------------------------------

MARKDOWN_SOURCES = NOTEBOOKS + [ROOT / f"{page}.md" for page in PAGES if (ROOT / f"{page}.md").exists()]


@pytest.mark.parametrize("path", MARKDOWN_SOURCES, ids=_ids(MARKDOWN_SOURCES))
def test_no_backslash_shows_inside_text(path):
    """Inside ``\\text{…}`` TeX is in text mode, where ``\\_`` prints a backslash before the underscore in MathJax:
    write ``\\text{warmup steps}`` or ``\\mathrm{warmup\\_steps}``."""
    assert re.findall(r"\\text\{[^{}]*\\_[^{}]*\}", _markdown(path)) == []


# --- Colab badges ---------------------------------------------------------------------------------------------------

BADGE = re.compile(r"\[!\[[^\]]*\]\([^)]*\)\]\((?P<url>https://colab\.research\.google\.com/[^)]+)\)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_every_badge_opens_its_notebook_in_the_repository_of_the_config(path):
    url, branch = notebook_header.repository()
    prefix = f"https://colab.research.google.com/github/{url.removeprefix('https://github.com/')}/blob/{branch}/"
    relative = path.relative_to(ROOT).as_posix()
    expected = [relative]
    if relative.startswith("chapters/") and (ROOT / "solutions" / path.name).exists():
        expected.append(f"exercises/{path.name}")
    found = [match["url"] for match in BADGE.finditer(nbformat.read(path, as_version=4).cells[0].source)]
    assert [link.removeprefix(prefix) for link in found] == expected, f"badges must open {[prefix + e for e in expected]}"
    assert all(link.startswith(prefix) and (ROOT / link.removeprefix(prefix)).exists() for link in found)


# --- figures on a phone ---------------------------------------------------------------------------------------------

# The widest figure a phone shows readably: at 390 px the page's text column is about 358 px wide, and a figure is
# shrunk to it. Matplotlib's 10 pt text is 12.5 px at the figures' 90 dpi (tutorial_lib/widgets/_plotting.py), so a
# figure wider than 650 px shows it below 7 px. Several panels go in at most two columns, or one above the other.
PHONE_FIGURE_WIDTH = 650
BOOK_NOTEBOOKS = [ROOT / f"{page}.ipynb" for page in PAGES if (ROOT / f"{page}.ipynb").exists()]


def stored_pngs(path: Path) -> list[tuple[str, bytes]]:
    """``(where, png)`` for every figure a notebook stores: cell outputs, and the pictures of its widgets."""
    notebook = nbformat.read(path, as_version=4)
    found = [
        (f"cell {index}", base64.b64decode(output["data"]["image/png"]))
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code"
        for output in cell.outputs
        if "image/png" in output.get("data", {})
    ]
    state = notebook.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    for model_id, model in state.items():
        if model.get("model_name") == "ImageModel":
            found += [(f"widget {model_id[-4:]}", base64.b64decode(buffer["data"])) for buffer in model.get("buffers", [])]
    return found


@pytest.mark.parametrize("path", BOOK_NOTEBOOKS, ids=_ids(BOOK_NOTEBOOKS))
def test_figures_are_narrow_enough_to_read_on_a_phone(path):
    widths = {where: struct.unpack(">II", png[16:24])[0] for where, png in stored_pngs(path) if png[:8] == b"\x89PNG\r\n\x1a\n"}
    too_wide = {where: width for where, width in widths.items() if width > PHONE_FIGURE_WIDTH}
    assert too_wide == {}, f"figures wider than {PHONE_FIGURE_WIDTH} px (stack the panels, at most two columns): {too_wide}"
