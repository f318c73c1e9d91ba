"""Prose quotes the verdicts the notebook prints: a sentence that names a row of a comparison table (in backticks, as
`no_warmup`) and says "better", "worse" or "no difference detected" must say what the table printed for that row.

A chapter's verdict table is found by the code that prints it (``TABLES``); its printed lines read
``<row> <verdict> ...``, the first block of lines that do. The prose of the whole chapter is checked, sentence by
sentence, against those verdicts, and every row of the table must be named with its verdict somewhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
# chapter notebook -> a piece of the source of the cell that prints its verdict table
TABLES = {"11_what_if_we_remove_it.ipynb": "family = holm("}
ROW_LINE = re.compile(r"^(\w+) +(better|worse|no difference detected)\b", re.MULTILINE | re.IGNORECASE)
VERDICT_WORDS = re.compile(r"\b(better|worse|no difference detected)\b", re.IGNORECASE)
SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+(?=[A-Z*`(])|\n\s*[-*] ")


def printed_verdicts(path: Path, marker: str) -> dict[str, str]:
    """Row -> the verdict word the table printed for it ("better", "worse" or "no difference detected")."""
    notebook = nbformat.read(path, as_version=4)
    (cell,) = [c for c in notebook.cells if c.cell_type == "code" and marker in c.source]
    text = "".join(output.get("text", "") for output in cell.get("outputs", []))
    first_block = text.split("\n\n")[0]  # the table; other blocks may repeat the rows with unadjusted verdicts
    return {row: verdict.lower() for row, verdict in ROW_LINE.findall(first_block)}


def sentences(path: Path) -> list[str]:
    notebook = nbformat.read(path, as_version=4)
    text = "\n\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    return [" ".join(s.split()) for paragraph in text.split("\n\n") for s in SENTENCE_END.split(paragraph)]


def contradictions(verdicts: dict[str, str], prose: list[str]) -> tuple[list[str], set[str]]:
    """The sentences whose verdict words disagree with the rows they name, and the rows named with their verdict."""
    wrong, stated = [], set()
    for sentence in prose:
        rows = [row for row in re.findall(r"`(\w+)`", sentence) if row in verdicts]
        words = {w.lower() for w in VERDICT_WORDS.findall(sentence)}
        if not rows or not words:
            continue
        if words != {verdicts[row] for row in rows}:
            wrong.append(f"{sentence!r}: says {sorted(words)}, the table {[(row, verdicts[row]) for row in rows]}")
        else:
            stated.update(rows)
    return wrong, stated


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_prose_states_each_rows_printed_verdict(name):
    path = ROOT / "chapters" / name
    verdicts = printed_verdicts(path, TABLES[name])
    assert len(verdicts) >= 3, verdicts
    wrong, stated = contradictions(verdicts, sentences(path))
    assert not wrong, "the prose contradicts the printed verdicts:\n" + "\n".join(wrong)
    assert stated == set(verdicts), f"rows whose verdict the prose never states: {sorted(set(verdicts) - stated)}"


def test_a_contradiction_is_found():
    verdicts = {"no_warmup": "no difference detected", "no_norm": "worse"}
    prose = ["Without warm-up, `no_warmup` is worse by three hundredths.", "`no_norm` is worse.",
             "Worse: `no_norm` and `no_warmup`."]
    wrong, stated = contradictions(verdicts, prose)
    assert len(wrong) == 2 and stated == {"no_norm"}
    assert contradictions(verdicts, ["No difference detected: `no_warmup`."]) == ([], {"no_warmup"})
