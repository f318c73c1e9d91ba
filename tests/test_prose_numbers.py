"""Prose keeps to what the cells measured: every number a chapter states comes from one of its outputs, or is quoted.

The rule and its exemptions are in tools/prose_numbers.py; the first test applies it to every chapter, the others pin
what it accepts and what it reports on notebooks written here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # tools/ holds scripts, not a package
import prose_numbers  # noqa: E402

CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))


@pytest.mark.parametrize("path", CHAPTERS, ids=[path.name for path in CHAPTERS])
def test_prose_numbers_come_from_outputs(path: Path):
    missing = prose_numbers.unsourced_numbers(path)
    assert not missing, "numbers in the prose that no output shows and no quotation marks:\n" + "\n".join(
        prose_numbers.describe(path, number) for number in missing
    )


def _notebook(tmp_path: Path, markdown: str, printed: str = "", code: str = "x = 1") -> Path:
    cell = new_code_cell(code, outputs=[new_output("stream", name="stdout", text=printed)] if printed else [])
    path = tmp_path / "nb.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell(markdown), cell]), path)
    return path


def _missing(tmp_path: Path, markdown: str, printed: str = "", code: str = "x = 1") -> list[str]:
    return [number.text for number in prose_numbers.unsourced_numbers(_notebook(tmp_path, markdown, printed, code))]


def test_a_number_is_matched_at_the_prose_precision(tmp_path):
    printed = "final validation loss 2.0391, 1134 tokens/s, accuracy 0.4032, delta -0.0123"
    prose = "The loss reaches 2.04 at 1,134 tokens/s with 40.3% accuracy; no scaling is better by 0.012."
    assert _missing(tmp_path, prose, printed) == []


def test_a_number_no_output_shows_is_reported(tmp_path):
    prose = "The loss reaches 2.05 (the output says 2.0391), and the model has 1,135 parameters, or 2.039."
    assert _missing(tmp_path, prose, "loss 2.0391, 1134 parameters") == ["2.05", "1,135"]


def test_a_setting_in_code_counts_but_a_comment_does_not(tmp_path):
    code = "lr = 4.5e-3\nn_ctx = 256  # it reached 1.893 in an earlier run"
    assert _missing(tmp_path, "We train at a rate of 4.5e-3 with 256 characters; it reached 1.893.", code=code) == ["1.893"]


def test_quotations_count_only_with_a_source_in_the_cell(tmp_path):
    quoted = 'The paper (§6.1) reports *"a new state-of-the-art BLEU score of 28.4"*.'
    assert _missing(tmp_path, quoted) == []
    assert _missing(tmp_path, 'Someone said *"a BLEU score of 28.4"*.') == ["28.4"]
    assert _missing(tmp_path, "> Each training step took about 0.4 seconds (the paper, §5.2)") == []


def test_what_is_not_a_quantity_is_exempt(tmp_path):
    prose = ("See §5.1 and Eq. (3), chapter 09, Table 3, PyTorch 2.13.0, ISO 8601, a 2017 paper, fp32 and H100, "
             "GPT-2, `lr=0.123`, [a link](https://example.com/1.234), $10000^{2i/d}$ and $d^{-0.5}$, 600 updates.")
    assert _missing(tmp_path, prose) == []


def test_a_number_with_three_significant_digits_is_checked(tmp_path):
    assert _missing(tmp_path, "A model of 128 dimensions, 1{,}376 hidden units, 500 steps, 0.0004 apart.") == [
        "128", "1,376", "0.0004"]
