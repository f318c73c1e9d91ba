"""A table of comparisons is judged as a family (COURSE_PLAN.md, "Families of comparisons"): a chapter's code cell that
makes several paired comparisons (``compare_paired`` called twice, or in a loop or a comprehension) and prints verdicts
judges them together with :func:`tutorial_lib.stats.holm`, or labels its verdicts "unadjusted" (and the prose names the
family). A verdict called alone among several would be called with a false-alarm rate that grows with the table.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))


def unjudged_tables(source: str) -> bool:
    """Whether a cell's code makes several comparisons and prints their verdicts one by one, with no family."""
    calls = [line for line in source.splitlines() if "compare_paired(" in line]
    several = len(calls) >= 2 or any(line.startswith((" ", "\t")) or " for " in line for line in calls)
    return several and ".verdict" in source and "holm(" not in source and "unadjusted" not in source


@pytest.mark.parametrize("path", CHAPTERS, ids=[path.name for path in CHAPTERS])
def test_every_table_of_comparisons_is_judged_as_a_family(path):
    notebook = nbformat.read(path, as_version=4)
    cells = [index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code" and unjudged_tables(cell.source)]
    assert not cells, f"cells {cells} print several comparisons' verdicts one by one: judge them with holm()"


def test_a_table_judged_one_by_one_is_found():
    loop = ("for row in rows:\n    comparison = compare_paired(base, runs[row])\n"
            "    print(row, comparison.verdict())")
    assert unjudged_tables(loop)
    assert unjudged_tables("a = compare_paired(x, y)\nb = compare_paired(x, z)\nprint(a.verdict(), b.verdict())")
    assert not unjudged_tables(loop + "\nfamily = holm(comparisons)")
    assert not unjudged_tables("a = compare_paired(x, y)\nprint(a.verdict())")  # a family of one
    assert not unjudged_tables(loop.replace("comparison.verdict()", "comparison.verdict(), 'unadjusted'"))
