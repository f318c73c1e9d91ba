"""Numbers in a chapter's prose that no output of the chapter shows: the check behind ``test_prose_numbers_come_from_outputs``.

The book's rule: a number the prose states was measured in a cell of the same notebook, or it is a quotation with its
source. This script finds every number in the markdown cells of a notebook that has a decimal point or three or more
significant digits (``2.04``, ``0.0004``, ``63.5``, ``1,134``, ``128``; not ``3``, ``600`` or ``0.5e6``'s exponent) and
accepts it when

- a text output of the notebook (stream, ``text/plain``, ``text/markdown``, ``text/html``) shows it at the prose's
  precision: prose ``2.04`` is matched by an output ``2.0391``, ``63.5`` by ``63.52``, ``1,134`` by ``1134``, ``40%``
  by ``0.40`` as well as ``40.3%``, ``124.4 million`` by ``124,439,808``; signs are ignored (prose says "a drop of 0.012" where the output prints -0.012);
- or it is a literal in a code cell's code (a setting: ``lr=4e-3``, ``n_ctx=256``), comments excluded;
- or it is quoted: between double quotation marks ("…" or “…”) or on a blockquote line (``> …``), in a cell that names
  its source (a §, Table, Figure, Appendix, "et al.", "paper", a reference number like [31], a URL or README).

Not numbers of the prose, so never checked: `code spans` and fenced code, link targets and URLs, HTML tags,
references to sections and equations (§5.1, Eq. (3), 3.2.3 and 2.13.0 with two dots), four-digit years 1900-2099, and
digits glued to a word (fp32, H100, d2l, GPT-2).

    python tools/prose_numbers.py                       # every chapter: the numbers with no source, exit 1 if any
    python tools/prose_numbers.py chapters/07_*.ipynb   # some notebooks
"""

from __future__ import annotations

import argparse
import io
import math
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]

# A run of digits with thousands separators or a decimal point, an optional exponent (1.5e-7), glued to nothing that
# makes it part of a word or a longer dotted name (checked apart, in _prose_candidates).
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)*(?:[eE][-−]?\d+)?")
_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?(?:[eE][-−]?\d+)?")
_SOURCE = re.compile(r"§|\bTable\b|\bFigure\b|\bFig\.|\bAppendix\b|et al\.|\bpaper\b|\[\d+\]|https?://|README|arXiv",
                     re.IGNORECASE)
# What precedes a number that refers to a place, not a quantity: §5.1, Eq. (3), Table 3, chapter 09, Python 3.10.
_REFERENCE_BEFORE = re.compile(
    r"(§\s*|§§\s*|\b(?:Eq|Eqs|Equation|Table|Tables|Figure|Fig|Appendix|Section|Sections|chapter|chapters|"
    r"Chapter|Chapters|Algorithm|Alg|Theorem|ISO|arXiv|Python|PyTorch|torch|version|Llama|LLaMA|CUDA|numpy|"
    r"ipywidgets|jupyter-book|nbval|transformers|Jupyter Book)[.:]?\s*\(?)$"
)
_SCALES = {"thousand": 1e3, "million": 1e6, "billion": 1e9}
_CODE_FENCE = re.compile(r"```.*?```|~~~.*?~~~", re.DOTALL)
_CODE_SPAN = re.compile(r"``.+?``|`[^`\n]+`")
_LINK_TARGET = re.compile(r"\]\([^)]*\)|\]:\s*\S+|<https?://[^>]*>|https?://\S+")
_HTML = re.compile(r"<!--.*?-->|<[^>\n]+>", re.DOTALL)
_QUOTES = re.compile(r'"[^"\n]*(?:\n[^"\n]+)*"|“[^”]*”')


@dataclass(frozen=True)
class ProseNumber:
    """A number as the prose writes it, where it stands, and whether it is a quotation."""

    cell: int
    text: str
    value: float
    decimals: int | None  # digits after the point; None for scientific notation (compared by significant digits)
    significant: int
    percent: bool
    scale: float  # 1e6 for "124.4 million": an output may print the count in full (124,439,808)
    quoted: bool
    context: str


def _blank(match: re.Match) -> str:
    """Keep offsets (and line breaks) while removing what is not prose."""
    return re.sub(r"[^\n]", " ", match.group(0))


def _significant_digits(digits: str) -> int:
    """Significant digits of a plain number's digits: leading zeros never count, an integer's trailing zeros neither."""
    if "." in digits:
        whole, fraction = digits.split(".")
        stripped = (whole + fraction).lstrip("0")
        return len(stripped) if whole.strip("0") else len(fraction.lstrip("0"))
    return len(digits.lstrip("0").rstrip("0"))


def _parse(text: str) -> tuple[float, int | None, int] | None:
    """(value, decimals, significant digits) of a number as written, or None when it is not one number."""
    text = text.replace("−", "-")
    match = re.fullmatch(r"([\d,]*\d(?:\.\d+)?)(?:[eE]([-]?\d+))?", text)
    if match is None:
        return None
    mantissa, exponent = match.group(1), match.group(2)
    if "," in mantissa:
        if not _THOUSANDS.fullmatch(mantissa):
            return None
        mantissa = mantissa.replace(",", "")
    value = float(mantissa) * (10.0 ** int(exponent) if exponent else 1.0)
    decimals = None if exponent else (len(mantissa.split(".")[1]) if "." in mantissa else 0)
    return value, decimals, _significant_digits(mantissa)


def _quoted_spans(text: str) -> list[tuple[int, int]]:
    """Offsets of quotations: "…" and “…” within a paragraph, and blockquote lines."""
    spans = []
    offset = 0
    for paragraph in re.split(r"(\n\s*\n)", text):
        spans += [(offset + m.start(), offset + m.end()) for m in _QUOTES.finditer(paragraph)]
        offset += len(paragraph)
    offset = 0
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith(">"):
            spans.append((offset, offset + len(line)))
        offset += len(line)
    return spans


def prose_numbers(source: str, cell: int = 0) -> list[ProseNumber]:
    """The numbers a markdown cell states that the rule checks (a point, or three or more significant digits)."""
    text = source
    for pattern in (_CODE_FENCE, _CODE_SPAN, _LINK_TARGET, _HTML):
        text = pattern.sub(_blank, text)
    text = re.sub(r"\(\s*[\w-]+\s*\)=", _blank, text)  # MyST targets: (eq-attention)=
    text = re.sub(r"\^\{[^{}]*\}|\^-?[\d.]+", _blank, text)  # exponents of a formula: 10000^{2i/d}, d^{-0.5}
    text = re.sub(r"\{,\}(\d{3})", r",\1  ", text)  # LaTeX's thousands separator: 1{,}376 (offsets kept)
    sourced = bool(_SOURCE.search(source))
    quoted = _quoted_spans(text) if sourced else []
    found = []
    for match in _NUMBER.finditer(text):
        raw = match.group(0).rstrip(".,")
        start, end = match.start(), match.start() + len(raw)
        before, after = text[max(0, start - 40):start], text[end:end + 2]
        glued = text[start - 1] if start else ""
        if glued.isalpha() or glued in "_/\\" or (glued == "-" and text[start - 2:start - 1].isalpha()):
            continue  # part of a word or a name: fp32, H100, d2l, x_1, GPT-2 (but 0.1-0.2 is a range)
        if after[:1].isalpha() and not re.match(r"[×xMkKBGT]\b", after):
            continue  # 3rd, 2nd, 1st; but 65M, 10k, 2x are quantities
        if raw.count(".") > 1 or _REFERENCE_BEFORE.search(before):
            continue  # 3.2.3, 2.13.0, §5.1, Table 3, chapter 09
        parsed = _parse(raw)
        if parsed is None:
            continue
        value, decimals, significant = parsed
        if decimals == 0 and re.fullmatch(r"(19|20)\d\d", raw):
            continue  # a year
        if decimals == 0 and significant < 3:
            continue
        if decimals is None and significant < 2:
            continue
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        found.append(ProseNumber(
            cell=cell, text=raw, value=value, decimals=decimals, significant=significant,
            percent=text[end:end + 2].lstrip().startswith("%"),
            scale=_SCALES.get(next(iter(re.findall(r"^\s*(thousand|million|billion)\b", text[end:end + 10])), ""), 1.0),
            quoted=any(a <= start < b for a, b in quoted),
            context=source[line_start: line_end if line_end != -1 else len(source)].strip()[:160],
        ))
    return found


def _code_without_comments(source: str) -> str:
    """A code cell's code with its comments (and IPython magics' lines) removed."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    code = "\n".join(lines)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return re.sub(r"#[^\n]*", "", code)
    return " ".join(tok.string for tok in tokens if tok.type != tokenize.COMMENT)


def _output_text(output: nbformat.NotebookNode) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    data = output.get("data", {})
    parts = [data.get(kind, "") for kind in ("text/plain", "text/markdown", "text/latex")]
    parts.append(_HTML.sub(" ", data.get("text/html", "")))
    return "\n".join("".join(part) if isinstance(part, list) else part for part in parts)


def measured_values(notebook: nbformat.NotebookNode) -> list[float]:
    """Every number the notebook's outputs show, and every literal of its code: what prose may state."""
    text = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        text.append(_code_without_comments(cell.source))
        text += [_output_text(output) for output in cell.get("outputs", [])]
    values = []
    for match in re.finditer(r"\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?", "\n".join(text)):
        raw = match.group(0).rstrip(",")
        for part in ([raw] if _THOUSANDS.fullmatch(raw) else raw.split(",")):
            parsed = _parse(part.replace("+", "")) if part else None
            if parsed is not None:
                values.append(parsed[0])
    return values


def _matches(number: ProseNumber, value: float) -> bool:
    """Does ``value`` (from an output) show ``number`` at the prose's precision?"""
    candidates = [abs(value)] + ([abs(value) * 100] if number.percent else [])
    candidates += [abs(value) / number.scale] if number.scale != 1.0 else []
    for candidate in candidates:
        if number.decimals is not None:
            if abs(candidate - number.value) <= 0.5 * 10.0 ** -number.decimals * (1 + 1e-9):
                return True
        elif candidate > 0:
            scale = 10.0 ** (math.floor(math.log10(number.value)) - number.significant + 1)
            if abs(candidate - number.value) <= 0.5 * scale * (1 + 1e-9):
                return True
    return False


def unsourced_numbers(path: Path) -> list[ProseNumber]:
    """The numbers of a notebook's prose that no output or code of it shows and that are not quotations."""
    notebook = nbformat.read(path, as_version=4)
    values = sorted(measured_values(notebook))
    missing = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "markdown":
            continue
        for number in prose_numbers(cell.source, index):
            if not number.quoted and not any(_matches(number, value) for value in values):
                missing.append(number)
    return missing


def describe(path: Path, number: ProseNumber) -> str:
    return f"{path.name}, cell {number.cell}: {number.text!r} is in no output and not quoted: {number.context}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: chapters/*.ipynb)")
    args = parser.parse_args(argv)
    paths = args.paths or sorted((ROOT / "chapters").glob("*.ipynb"))
    problems = [describe(path, number) for path in paths for number in unsourced_numbers(path)]
    print("\n".join(problems) if problems else f"every prose number of {len(paths)} notebook(s) has its source")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
