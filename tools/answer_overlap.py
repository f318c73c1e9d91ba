"""Which code cells of a chapter print the answer of one of its exercises; fold them in the book.

An exercise's *answer* is what its reference solution writes between ``# BEGIN SOLUTION`` and ``# END SOLUTION``
(``solutions/NN_*.ipynb``). A chapter code cell *prints* an answer when runs of at least ``RUN`` tokens that also occur
in the cell cover at least ``SHARE`` of the answer's tokens (Python tokens: comments, blank lines and indentation do not
count, so neither re-spacing nor re-commenting hides a copy).

Why these numbers. ``RUN = 8`` tokens is about one short expression (``torch.tril(torch.ones(n, n))`` is 13): shorter
runs are idioms every PyTorch program shares (``.sum(dim=-1)``, ``[..., None, :]``), longer ones are code. ``SHARE =
0.5``: below it the learner writes at least half of the answer themselves. Measured over the 107 answers of chapters
01-15 before the folds, the shares split into two groups: 0.53-1.00 (copies: the chapter's build cell of the same
function) and 0-0.49, where the highest are variants the chapter does not print (13's causal linear attention by
cumulative sums, 0.49, beside the chapter's one-step recurrence; 13's banded attention by ``unfold``, 0.41).

Where the chapter must show the same code (its build cell is the lesson), the cell is *folded*: in the book it is
collapsed behind a line that names the exercise and sends the reader there first (MyST-NB's ``hide-input`` tag, with
the cell's own ``code_prompt_show``); in JupyterLab its source is collapsed (``jupyter.source_hidden``). The cell still
runs and its output still shows. ``tests/test_answers_not_printed.py`` fails when an unfolded cell prints an answer,
or when a fold no longer matches one.

    python tools/answer_overlap.py            # report: each printed answer, its share, the chapter cell
    python tools/answer_overlap.py --fold     # fold exactly the cells that print an answer (and unfold the others)
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = 8
SHARE = 0.5
FOLD_TAG = "hide-input"
_EXERCISE_HEADING = re.compile(r"^##\s+Exercise\s+(\d+)\s*·\s*(.+?)\s*(?:\(\d+ points?\))?\s*$", re.MULTILINE)
_BEGIN = re.compile(r"^\s*# BEGIN SOLUTION\s*$")
_END = re.compile(r"^\s*# END SOLUTION\s*$")


@dataclass(frozen=True)
class Answer:
    exercise: int  # its number in the chapter's exercises
    title: str
    source: str  # the lines between the markers


@dataclass(frozen=True)
class PrintedAnswer:
    answer: Answer
    cell: int  # index of the chapter cell that prints it
    share: float


def code_tokens(source: str) -> list[str]:
    """The Python tokens of ``source``, without comments, line breaks or indentation; IPython magics are skipped."""
    lines = [line for line in source.split("\n") if not line.lstrip().startswith(("%", "!"))]
    text = "\n".join(lines)
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    try:
        return [token.string for token in tokenize.generate_tokens(io.StringIO(text).readline) if token.type not in skip]
    except (tokenize.TokenError, IndentationError, SyntaxError):  # a fragment (an answer cut out of its function)
        return text.split()


def shared_share(answer: list[str], cell: list[str], run: int = RUN) -> float:
    """The share of ``answer``'s tokens covered by runs of ``run`` tokens (all of them, for a shorter answer) that
    occur in ``cell`` too."""
    if not answer:
        return 0.0
    run = min(run, len(answer))
    grams = {tuple(cell[i : i + run]) for i in range(len(cell) - run + 1)}
    covered = [False] * len(answer)
    for i in range(len(answer) - run + 1):
        if tuple(answer[i : i + run]) in grams:
            covered[i : i + run] = [True] * run
    return sum(covered) / len(answer)


def answers(solutions: dict) -> list[Answer]:
    """Every solution block of a solutions notebook, with the exercise it belongs to (the heading above it)."""
    found, exercise, title = [], 0, ""
    for cell in solutions["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            for match in _EXERCISE_HEADING.finditer(source):
                exercise, title = int(match.group(1)), match.group(2)
            continue
        block: list[str] | None = None
        for line in source.split("\n"):
            if _BEGIN.match(line):
                block = []
            elif _END.match(line) and block is not None:
                found.append(Answer(exercise, title, "\n".join(block)))
                block = None
            elif block is not None:
                block.append(line.strip())
    return found


def is_folded(cell: dict) -> bool:
    return FOLD_TAG in cell.get("metadata", {}).get("tags", [])


def printed_answers(chapter: dict, solutions: dict, *, folded_too: bool = False) -> list[PrintedAnswer]:
    """Each (answer, code cell of ``chapter`` that prints it), in unfolded cells only unless ``folded_too``."""
    cells = [(index, code_tokens("".join(cell["source"]))) for index, cell in enumerate(chapter["cells"])
             if cell["cell_type"] == "code" and (folded_too or not is_folded(cell))]
    printed = []
    for answer in answers(solutions):
        tokens = code_tokens(answer.source)
        for index, cell_tokens in cells:
            share = shared_share(tokens, cell_tokens)
            if share >= SHARE:
                printed.append(PrintedAnswer(answer, index, share))
    return printed


def chapter_pairs() -> list[tuple[Path, Path]]:
    """(chapter, solutions) notebook paths of every chapter that has exercises."""
    return [(ROOT / "chapters" / path.name, path) for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))]


def fold_prompt(exercises: list[int]) -> str:
    """The line the book shows on a folded cell, in place of its code."""
    if len(exercises) == 1:
        return (f"Exercise {exercises[0]} of this chapter's exercises asks you to write this code: try it first, then "
                f"click to show it")
    which = ", ".join(str(n) for n in exercises[:-1]) + f" and {exercises[-1]}"
    return f"Exercises {which} of this chapter's exercises ask you to write this code: try them first, then click to show it"


def apply_folds(chapter: dict, printed: list[PrintedAnswer]) -> int:
    """Fold exactly the cells in ``printed`` (unfolding cells folded before that print no answer now); returns how
    many cells changed."""
    by_cell: dict[int, list[int]] = {}
    for item in printed:
        by_cell.setdefault(item.cell, []).append(item.answer.exercise)
    changed = 0
    for index, cell in enumerate(chapter["cells"]):
        if cell["cell_type"] != "code":
            continue
        metadata = cell.setdefault("metadata", {})
        before = json.dumps(metadata, sort_keys=True)
        tags = [tag for tag in metadata.get("tags", []) if tag != FOLD_TAG]
        metadata.pop("mystnb", None)
        metadata.pop("tutorial_lib", None)
        jupyter = {key: value for key, value in metadata.pop("jupyter", {}).items() if key != "source_hidden"}
        if index in by_cell:
            exercises = sorted(set(by_cell[index]))
            tags.append(FOLD_TAG)
            jupyter["source_hidden"] = True
            metadata["mystnb"] = {"code_prompt_show": fold_prompt(exercises), "code_prompt_hide": "Hide the code"}
            metadata["tutorial_lib"] = {"answer_of": exercises}
        if jupyter:
            metadata["jupyter"] = jupyter
        if tags:
            metadata["tags"] = tags
        else:
            metadata.pop("tags", None)
        changed += before != json.dumps(metadata, sort_keys=True)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fold", action="store_true", help="fold the chapter cells that print an answer")
    args = parser.parse_args(argv)
    for chapter_path, solutions_path in chapter_pairs():
        chapter = json.loads(chapter_path.read_text())
        solutions = json.loads(solutions_path.read_text())
        printed = printed_answers(chapter, solutions, folded_too=args.fold)
        for item in printed:
            state = "folded" if is_folded(chapter["cells"][item.cell]) else "PRINTED"
            print(f"{chapter_path.name[:2]} exercise {item.answer.exercise:>2} ({item.answer.title}): "
                  f"{item.share:.0%} in chapter cell {item.cell} [{state}]")
        if args.fold and apply_folds(chapter, printed):
            chapter_path.write_text(json.dumps(chapter, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
            print(f"  wrote {chapter_path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
