"""Keep every chapter's build cells identical to the code of ``tutorial_lib`` they present (the package is the source).

A build cell is a code cell whose first line is a marker naming a file of the package and the top-level functions
or classes (or ``Class.method``) it shows, in order::

    # tutorial_lib/attention.py · scaled_dot_product_attention
    # tutorial_lib/attention.py · causal_mask, padding_mask

The rest of the cell is exactly their source, decorators included, separated by two blank lines. The source is read
from the file with :mod:`ast` rather than imported, so that nothing (not even jaxtyping's import hook under pytest)
stands between the file and the cell.

    python tools/sync_build_cells.py --check           # every notebook of chapters/ and solutions/
    python tools/sync_build_cells.py --write chapters/03_scaled_dot_product_attention.ipynb

After ``--write`` run ``make execute``: the stored outputs came from the old code.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIRS = ("chapters", "solutions")
MARKER_START = "# tutorial_lib/"
MARKER = re.compile(r"# (?P<file>tutorial_lib/[\w/]+\.py) · (?P<names>[\w.]+(?:, [\w.]+)*)")


@dataclass(frozen=True)
class BuildCell:
    index: int  # position of the cell in the notebook
    marker: str
    expected: str  # the cell's source as the package gives it
    found: str


def object_source(file: Path, qualname: str) -> str:
    """Source of the top-level function/class ``qualname`` (or ``Class.method``) of ``file``, dedented."""
    text = file.read_text(encoding="utf-8")
    body = ast.parse(text).body
    node = None
    for part in qualname.split("."):
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            raise ValueError(f"{file.relative_to(ROOT) if file.is_relative_to(ROOT) else file} defines no {qualname!r}")
        body = node.body
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    lines = text.splitlines()[first - 1 : node.end_lineno]
    return textwrap.dedent("\n".join(lines))


def expected_source(marker: str, root: Path = ROOT) -> str:
    """The whole cell a marker line stands for."""
    match = MARKER.fullmatch(marker)
    if match is None:
        raise ValueError(f"malformed build-cell marker {marker!r}: expected '# tutorial_lib/FILE.py · NAME[, NAME…]'")
    file = root / match["file"]
    if not file.is_file():
        raise ValueError(f"build-cell marker {marker!r} names a file that does not exist: {match['file']}")
    sources = [object_source(file, name) for name in match["names"].split(", ")]
    return "\n".join([marker, "\n\n\n".join(sources)])


def build_cells(path: Path, root: Path = ROOT) -> list[BuildCell]:
    """Every build cell of the notebook with the source it should have; raises ValueError on a bad marker."""
    notebook = nbformat.read(path, as_version=4)
    cells = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code" or not cell.source.startswith(MARKER_START):
            continue
        marker = cell.source.split("\n", 1)[0]
        try:
            expected = expected_source(marker, root)
        except ValueError as error:
            raise ValueError(f"{path}, cell {index}: {error}") from None
        cells.append(BuildCell(index, marker, expected, cell.source))
    return cells


def drift(path: Path, root: Path = ROOT) -> list[str]:
    """One message per build cell that differs from the package (empty when in sync)."""
    return [
        f"{path}, cell {cell.index} ({cell.marker}) differs from the package: "
        f"run tools/sync_build_cells.py --write {path}, then make execute"
        for cell in build_cells(path, root)
        if cell.found != cell.expected
    ]


def write(path: Path, root: Path = ROOT) -> int:
    """Rewrite the drifted build cells from the package; returns how many changed."""
    stale = [cell for cell in build_cells(path, root) if cell.found != cell.expected]
    if stale:
        notebook = nbformat.read(path, as_version=4)
        for cell in stale:
            notebook.cells[cell.index].source = cell.expected
        nbformat.write(notebook, path)
    return len(stale)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="fail when a build cell differs from the package")
    mode.add_argument("--write", action="store_true", help="rewrite drifted build cells from the package")
    parser.add_argument("paths", nargs="*", help="notebooks (default: chapters/ and solutions/)")
    args = parser.parse_args(argv)
    paths = [Path(p).resolve() for p in args.paths] or sorted(
        p for folder in NOTEBOOK_DIRS for p in (ROOT / folder).glob("*.ipynb")
    )
    failed = False
    for path in paths:
        try:
            if args.check:
                for message in drift(path):
                    print(message, file=sys.stderr)
                    failed = True
            elif changed := write(path):
                print(f"{path.relative_to(ROOT)}: rewrote {changed} build cell(s); run make execute")
        except ValueError as error:
            print(error, file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
