"""Write or check the book's pages generated from ``tools/book_plan.yml`` and ``_toc.yml``.

- ``intro.md``'s chapter map (between its two ``chapter map`` markers): every chapter of the plan, in order, linked
  with the notebook's own title when ``_toc.yml`` lists it, named and marked *being written* otherwise;
- ``traceability.md``, "The paper in the book": a section per item of the paper the course covers, with the chapter
  and build cell that build it (linked; the cell's label comes from ``tools/book_extension.py``), the
  ``tutorial_lib`` symbol and the test that checks it against a reference. A chapter not in ``_toc.yml`` yet is
  named as being written.

    python tools/book_pages.py --write   # after a chapter lands in _toc.yml, or after editing tools/book_plan.yml
    python tools/book_pages.py --check   # exit 1 when a page differs from what --write would give

A chapter of ``_toc.yml`` missing from the plan, or a listed chapter whose notebook shows no build cell of the row's
symbol, is an error that names what to fix.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/ is not a package
import sync_build_cells  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PLAN = Path("tools/book_plan.yml")
INTRO = Path("intro.md")
TRACEABILITY = Path("traceability.md")
MAP_BEGIN = "<!-- chapter map: written by tools/book_pages.py from _toc.yml and tools/book_plan.yml; edit those -->"
MAP_END = "<!-- end of the chapter map -->"
BEING_WRITTEN = "*being written*"
TRACEABILITY_TITLE = "The paper in the book"


@dataclass(frozen=True)
class TocChapter:
    file: str  # "chapters/03_scaled_dot_product_attention"
    part: str  # the caption of its part in _toc.yml


def load_plan(root: Path = ROOT) -> dict:
    return yaml.safe_load((root / PLAN).read_text(encoding="utf-8"))


def toc_files(root: Path = ROOT) -> list[str]:
    """Every page of the book in reading order (the order of its Next button): the root, then each ``file:``."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))

    def files(node: object) -> list[str]:
        if isinstance(node, dict):
            return ([node["file"]] if "file" in node else []) + [f for value in node.values() for f in files(value)]
        if isinstance(node, list):
            return [f for item in node for f in files(item)]
        return []

    return [toc["root"], *files(toc.get("parts", toc.get("chapters", [])))]


def page_title(page: str, root: Path = ROOT) -> str:
    """The title a page of the book shows: a notebook's first line, an .md page's first heading, without ``# ``."""
    notebook = root / f"{page}.ipynb"
    if notebook.exists():
        return notebook_title(notebook)
    text = (root / f"{page}.md").read_text(encoding="utf-8")
    return next(line for line in text.splitlines() if line.startswith("# ")).removeprefix("# ").strip()


def toc_chapters(root: Path = ROOT) -> dict[str, TocChapter]:
    """The chapters ``_toc.yml`` lists, by number."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    found = {}
    for part in toc.get("parts", []):
        for entry in part.get("chapters", []):
            match = re.fullmatch(r"chapters/(\d\d)_\w+", entry.get("file", ""))
            if match:
                found[match[1]] = TocChapter(entry["file"], part.get("caption", ""))
    return found


def notebook_title(path: Path) -> str:
    """``NN · Title``: the first line of the notebook's first cell without its ``# ``."""
    first = nbformat.read(path, as_version=4).cells[0].source.split("\n", 1)[0]
    return first.removeprefix("# ").strip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def chapter_map(root: Path = ROOT) -> str:
    """The markdown of the chapter map, between (and including) its markers."""
    plan = {chapter["number"]: chapter for chapter in load_plan(root)["chapters"]}
    present = toc_chapters(root)
    unplanned = sorted(set(present) - set(plan))
    if unplanned:
        raise ValueError(f"_toc.yml lists chapters {unplanned} that {PLAN} does not plan: add them to its `chapters`")
    rows, previous_part = [], None
    for number, chapter in plan.items():
        if number in present:
            part = present[number].part
            name = f"[{_cell(notebook_title(root / f'{present[number].file}.ipynb'))}]({present[number].file}.ipynb)"
        else:
            part = chapter["part"]
            name = f"{number} · {_cell(chapter['title'])} ({BEING_WRITTEN})"
        rows.append(f"| {part if part != previous_part else ''} | {name} | {_cell(chapter['builds'])} |")
        previous_part = part
    return "\n".join([MAP_BEGIN, "| part | chapter | what you build |", "|---|---|---|", *rows, MAP_END])


def with_chapter_map(intro: str, root: Path = ROOT) -> str:
    """``intro`` with its chapter map replaced by the generated one."""
    begin, end = intro.find(MAP_BEGIN), intro.find(MAP_END)
    if begin < 0 or end < begin:
        raise ValueError(f"{INTRO} has no chapter map between the lines\n{MAP_BEGIN}\n{MAP_END}")
    return intro[:begin] + chapter_map(root) + intro[end + len(MAP_END):]


def split_symbol(symbol: str, root: Path = ROOT) -> tuple[str, str]:
    """``tutorial_lib.models.transformer.Encoder`` -> ``("models/transformer", "Encoder")``: the module file's path
    inside ``tutorial_lib/`` (the longest prefix that is a file) and the name in it."""
    parts = symbol.split(".")
    if parts[0] != "tutorial_lib":
        raise ValueError(f"{symbol}: a symbol of tutorial_lib is expected (tutorial_lib.module.name)")
    for cut in range(len(parts) - 1, 1, -1):
        module = "/".join(parts[1:cut])
        if (root / "tutorial_lib" / f"{module}.py").exists():
            return module, ".".join(parts[cut:])
    raise ValueError(f"{symbol}: no module of tutorial_lib/ holds it")


def build_cell_label(chapter_file: Path, symbol: str, root: Path = ROOT) -> str | None:
    """The label of the first build cell of ``chapter_file`` that shows ``symbol`` (or one of its methods)."""
    module, name = split_symbol(symbol, root)
    number = chapter_file.name[:2]
    for cell in sync_build_cells.build_cells(chapter_file, root):
        match = re.fullmatch(r"# tutorial_lib/(?P<module>[\w/]+)\.py · (?P<names>.+)", cell.marker)
        if match is None or match["module"] != module:
            continue
        for shown in (shown.strip() for shown in match["names"].split(",")):
            if shown == name or shown.startswith(f"{name}."):
                # The label tools/book_extension.py gives that cell (labels are lower case in Sphinx).
                return f"cell-{number}-{module.replace('/', '.')}.{shown}".lower()
    return None


def traceability(root: Path = ROOT) -> str:
    """The markdown of ``traceability.md``: a section per item of the paper (so it reads on a phone, and the page's
    contents list the items), a line per chapter that builds it."""
    plan = load_plan(root)
    titles = {chapter["number"]: chapter["title"] for chapter in plan["chapters"]}
    present = toc_chapters(root)
    sections = []
    sources = [None] + list(dict.fromkeys(item["source"] for item in plan["paper"] if item.get("source")))
    items = [item for source in sources for item in plan["paper"] if item.get("source") == source]
    for index, item in enumerate(items):
        source = item.get("source")
        if source and (index == 0 or items[index - 1].get("source") != source):
            sections.append(f"## {source}\n\nWhat a chapter builds from a later paper: its equations, sections and figures, numbered as in that paper.")
        lines = [f"{'###' if source else '##'} {item['item']}", "", item["what"], ""]
        for where in item["where"]:
            number = where["chapter"]
            if number in present:
                path = root / f"{present[number].file}.ipynb"
                label = build_cell_label(path, where["symbol"], root)
                if label is None:
                    raise ValueError(
                        f"{PLAN}: {item['item']}: {present[number].file} shows no build cell of {where['symbol']}: "
                        "name a symbol that chapter's build cells show"
                    )
                chapter = f"[{notebook_title(path)}]({present[number].file}.ipynb), [build cell](#{label})"
            else:
                chapter = f"{number} · {titles[number]} ({BEING_WRITTEN})"
            lines.append(f"- {chapter}: `{where['symbol']}`, checked by `{where['test']}`")
        sections.append("\n".join(lines))
    return "\n".join(
        [
            f"# {TRACEABILITY_TITLE}",
            "",
            "Every numbered equation, section and table of",
            "[*Attention Is All You Need*](https://arxiv.org/abs/1706.03762) that this book builds: the chapter and the",
            "**build cell** that build it (the cell shows the package's own code, kept identical to it by a test), the",
            "`tutorial_lib` symbol, and the test that checks that symbol against a reference nobody here wrote (PyTorch's",
            "own modules, Hugging Face's, or the paper's formula). A chapter *being written* is not in the book yet.",
            "",
            "This page is written by `tools/book_pages.py` from `tools/book_plan.yml`, and `tests/test_book_pages.py`",
            "keeps it true: every symbol and test exists, every build cell is where the line says, and every equation",
            "number a chapter shows has its section.",
            "",
            "\n\n".join(sections),
            "",
        ]
    )


def expected_pages(root: Path = ROOT) -> dict[Path, str]:
    """Each generated page and the text it must have."""
    intro = (root / INTRO).read_text(encoding="utf-8")
    return {root / INTRO: with_chapter_map(intro, root), root / TRACEABILITY: traceability(root)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 when a page differs from what --write gives")
    mode.add_argument("--write", action="store_true", help="rewrite the pages")
    parser.add_argument("--root", type=Path, default=ROOT, help="the book's folder")
    args = parser.parse_args(argv)
    try:
        pages = expected_pages(args.root)
    except ValueError as error:
        print(f"book_pages: {error}", file=sys.stderr)
        return 1
    stale = [path for path, text in pages.items() if not path.exists() or path.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(f"book_pages: {path.name} is not what tools/book_pages.py writes: run it with --write", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(pages[path], encoding="utf-8")
        print(f"book_pages: wrote {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
