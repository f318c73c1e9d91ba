"""Prose quotes the verdicts the notebook prints: a sentence that names a row of a comparison table and says
"better", "worse" or "no difference detected" must say what the table printed for that row.

A chapter's verdict table is found by the code that prints it (``Table.marker``), and its rows by the shape of their
printed lines (``Table.row_line``: a ``row`` and a ``verdict`` group; the first line of each row counts, since later
blocks may repeat a row with its unadjusted verdict). The prose names a row in backticks (`no_warmup`, where rows are
identifiers) or by a bold name that the table's ``names`` maps to the rows it stands for ("**Fewer key/value heads**":
two rows). The prose of the whole chapter is checked, sentence by sentence, and every row must be named with its
verdict somewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
VERDICT = r"(?P<verdict>better|worse|no difference detected)\b"
VERDICT_WORDS = re.compile(r"\b(better|worse|no difference detected)\b", re.IGNORECASE)
SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+(?=[A-Z*`(])|\n\s*[-*] ")


@dataclass(frozen=True)
class Table:
    marker: str  # a piece of the source of the cell that prints the verdicts
    row_line: str  # a printed line of the table, with a ``row`` and a ``verdict`` group
    names: dict[str, tuple[str, ...]] = field(default_factory=dict)  # bold name in the prose -> the rows it names


TABLES = {
    ("11_what_if_we_remove_it.ipynb", "the ablations"): Table("family = holm(", rf"^(?P<row>\w+) +{VERDICT}"),
    ("12_modern_variants.ipynb", "the positions"): Table(
        "positions_family = holm(", rf"^(?P<row>\S.*?\S) {{2,}}{VERDICT}",
        {"RoPE against learned": ("RoPE against learned",), "none against learned": ("none against learned",),
         "sinusoidal against learned": ("sinusoidal against learned",),
         "sinusoidal against none": ("sinusoidal against none",),
         "unscaled sinusoidal against none": ("unscaled sinusoidal against none",),
         "paper's init against none": ("paper's init against none",),
         "paper's init against sinusoidal": ("paper's init against sinusoidal",)}),
    ("12_modern_variants.ipynb", "LLaMA's ladder"): Table(
        "family = holm({**steps", rf"^(?P<row>\S.*?\S) +\d\.\d{{4}} +\d\.\d{{4}} +{VERDICT}",
        {"RoPE": ("+ RoPE",), "the whole LLaMA variant": ("LLaMA against GPT",), "RMSNorm": ("+ RMSNorm",),
         "SwiGLU": ("+ SwiGLU",), "no biases with an untied head": ("+ no biases, untied: LLaMA",),
         "Fewer key/value heads": ("LLaMA, 2 key/value heads", "LLaMA, 1 key/value head")}),
    ("07_encoder_decoder_transformer.ipynb", "the what-ifs"): Table(
        "whatif_family = holm(", rf"^ +(?P<row>[^:]+): +Δ = .*?\): {VERDICT} \(Holm",
        {"calibration without smoothing": ("no label smoothing, calibration, 200 updates",),
         "exact match, perplexity and when wrong without smoothing": (
             "no label smoothing, exact match, 200 updates", "no label smoothing, perplexity, 200 updates",
             "no label smoothing, when wrong, 200 updates"),
         "no warm-up after 100 updates": ("no warm-up, Eq. (3), perplexity, 100 updates",
                                          "no warm-up, same peak, perplexity, 100 updates"),
         "no warm-up after 200 updates": ("no warm-up, same peak, exact match, 200 updates",
                                          "no warm-up, same peak, perplexity, 200 updates")}),
}


def printed_verdicts(path: Path, table: Table) -> dict[str, str]:
    """Row -> the verdict word the table printed for it ("better", "worse" or "no difference detected")."""
    notebook = nbformat.read(path, as_version=4)
    (cell,) = [c for c in notebook.cells if c.cell_type == "code" and table.marker in c.source]
    text = "".join(output.get("text", "") for output in cell.get("outputs", []))
    verdicts: dict[str, str] = {}
    for line in re.finditer(table.row_line, text, re.MULTILINE):
        verdicts.setdefault(line["row"], line["verdict"].lower())
    return verdicts


def sentences(path: Path) -> list[str]:
    notebook = nbformat.read(path, as_version=4)
    text = "\n\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    return [" ".join(s.split()) for paragraph in text.split("\n\n") for s in SENTENCE_END.split(paragraph)]


def named_rows(sentence: str, verdicts: dict[str, str], names: dict[str, tuple[str, ...]]) -> list[str]:
    rows = [row for row in re.findall(r"`(\w+)`", sentence) if row in verdicts]
    for name in re.findall(r"\*\*(.+?)\*\*", sentence):
        rows.extend(names.get(name, ()))
    return rows


def contradictions(verdicts: dict[str, str], prose: list[str],
                   names: dict[str, tuple[str, ...]] | None = None) -> tuple[list[str], set[str]]:
    """The sentences whose verdict words disagree with the rows they name, and the rows named with their verdict."""
    wrong, stated = [], set()
    for sentence in prose:
        rows = named_rows(sentence, verdicts, names or {})
        words = {w.lower() for w in VERDICT_WORDS.findall(sentence)}
        if not rows or not words:
            continue
        if words != {verdicts[row] for row in rows}:
            wrong.append(f"{sentence!r}: says {sorted(words)}, the table {[(row, verdicts[row]) for row in rows]}")
        else:
            stated.update(rows)
    return wrong, stated


@pytest.mark.parametrize("name, table", sorted(TABLES), ids=[f"{n[:2]} {t}" for n, t in sorted(TABLES)])
def test_the_prose_states_each_rows_printed_verdict(name, table):
    path, table = ROOT / "chapters" / name, TABLES[name, table]
    verdicts = printed_verdicts(path, table)
    assert len(verdicts) >= 3, verdicts
    named = {row for rows in table.names.values() for row in rows}
    assert named <= set(verdicts), f"names for rows the table does not print: {sorted(named - set(verdicts))}"
    wrong, stated = contradictions(verdicts, sentences(path), table.names)
    assert not wrong, "the prose contradicts the printed verdicts:\n" + "\n".join(wrong)
    assert stated == set(verdicts), f"rows whose verdict the prose never states: {sorted(set(verdicts) - stated)}"


def test_a_contradiction_is_found():
    verdicts = {"no_warmup": "no difference detected", "no_norm": "worse"}
    prose = ["Without warm-up, `no_warmup` is worse by three hundredths.", "`no_norm` is worse.",
             "Worse: `no_norm` and `no_warmup`."]
    wrong, stated = contradictions(verdicts, prose)
    assert len(wrong) == 2 and stated == {"no_norm"}
    assert contradictions(verdicts, ["No difference detected: `no_warmup`."]) == ([], {"no_warmup"})


def test_a_bold_name_stands_for_its_rows():
    verdicts = {"LLaMA, 2 key/value heads": "no difference detected", "LLaMA, 1 key/value head": "worse"}
    names = {"Fewer key/value heads": tuple(verdicts)}
    wrong, _ = contradictions(verdicts, ["**Fewer key/value heads**: no difference detected."], names)
    assert len(wrong) == 1
    assert contradictions(verdicts, ["**Other heads**: better."], names) == ([], set())
