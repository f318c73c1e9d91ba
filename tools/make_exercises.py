"""Write ``exercises/NN_*.ipynb`` from ``solutions/NN_*.ipynb``, the single source of every exercise.

In each code cell of a solutions notebook, the lines from ``# BEGIN SOLUTION`` to ``# END SOLUTION`` (inside a
function body) become ``raise NotImplementedError(...)`` at the same indentation; the signature, the docstring and any
``# TODO`` hint above the block stay. Cells tagged ``solution-only`` are dropped, and ``tools/notebook_header.py``
writes the header cells for the exercises file (from ``_config.yml``). Every ``check(...)`` cell must follow at least
one solution block.

A cell that starts with ``%%my_transformer NAME`` (the build track, ``tutorial_lib/build_track.py``) writes
``my_transformer/NAME.py`` when it runs; the files of both folders are committed (a notebook run alone, or beside
another, imports the earlier chapters' files), so they are written here too, the stubbed ones under ``exercises/``,
and the drift check compares them.

Exercise notebooks are stored executed, by ``tools/execute_notebooks.py`` as ``make execute`` does: their outputs are
the "not attempted yet" verdicts, compared by nbval. So the drift check compares sources (cell types, sources, tags,
and the ``tutorial_lib.assignment`` metadata the grader reads) and that every code cell has run, never outputs.

    python tools/make_exercises.py            # regenerate; execute only the notebooks whose sources changed
    python tools/make_exercises.py --force    # regenerate and execute all of them
    python tools/make_exercises.py --check    # exit 1 when exercises/ differs from what this would write
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat
from nbclient.exceptions import CellExecutionError
from nbformat import NotebookNode

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/ is not a package: reach the tools beside this one
from execute_notebooks import execute  # noqa: E402
from notebook_header import apply_header  # noqa: E402

from tutorial_lib.build_track import PACKAGE, PACKAGE_DOC, module_source  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SOLUTION_ONLY = "solution-only"
STUB = 'raise NotImplementedError("write your solution here")'
CELL_TIMEOUT = 120
# A line that looks like a marker, however spaced or cased; exactly "# BEGIN SOLUTION" / "# END SOLUTION" are valid.
_MARKER_LIKE = re.compile(r"^\s*#\s*(BEGIN|END)\s*SOLUTION\b", re.IGNORECASE)
_MARKER = re.compile(r"^(?P<indent>\s*)# (?P<which>BEGIN|END) SOLUTION\s*$")
_CHECK_CALL = re.compile(r"^\s*(?:\w+ = )?check\(", re.MULTILINE)  # a check, its result kept or not
_NOTEBOOK_NAME = re.compile(r"^\d\d_[a-z0-9_]+\.ipynb$")


class MarkerError(ValueError):
    """A solutions notebook whose markers cannot be turned into stubs."""


def stub_source(source: str, where: str) -> tuple[str, int]:
    """Replace every solution block of one cell's source by a stub; returns the new source and the block count."""
    lines = source.split("\n")
    out: list[str] = []
    begin: tuple[int, str] | None = None  # line number and indentation of the open block
    blocks = 0
    for number, line in enumerate(lines, start=1):
        match = _MARKER.match(line)
        if match is None and _MARKER_LIKE.match(line):
            raise MarkerError(f"{where}, line {number}: malformed marker {line.strip()!r}; write '# BEGIN SOLUTION' or '# END SOLUTION'")
        if match is None:
            if begin is None:
                out.append(line)
            continue
        indent, which = match.group("indent"), match.group("which")
        if which == "BEGIN":
            if begin is not None:
                raise MarkerError(f"{where}, line {number}: '# BEGIN SOLUTION' inside the block opened on line {begin[0]}")
            if not indent:
                raise MarkerError(f"{where}, line {number}: '# BEGIN SOLUTION' at top level; put the solution inside a function body")
            begin = (number, indent)
            continue
        if begin is None:
            raise MarkerError(f"{where}, line {number}: '# END SOLUTION' without a '# BEGIN SOLUTION' before it")
        if indent != begin[1]:
            raise MarkerError(f"{where}, line {number}: '# END SOLUTION' is indented differently from its '# BEGIN SOLUTION' on line {begin[0]}")
        if number == begin[0] + 1:
            raise MarkerError(f"{where}, line {begin[0]}: empty solution block")
        out.append(indent + STUB)
        begin = None
        blocks += 1
    if begin is not None:
        raise MarkerError(f"{where}, line {begin[0]}: '# BEGIN SOLUTION' is never closed by '# END SOLUTION'")
    return "\n".join(out), blocks


def make_exercise_notebook(solution: NotebookNode, name: str, root: Path = ROOT) -> NotebookNode:
    """The exercises notebook for ``<root>/solutions/<name>``: stubs, its own header, no outputs, not executed."""
    exercise = copy.deepcopy(solution)
    cells = []
    blocks_total = 0
    blocks_since_check = 0
    for index, cell in enumerate(exercise.cells):
        if SOLUTION_ONLY in cell.get("metadata", {}).get("tags", []):
            continue
        if cell.cell_type == "code":
            where = f"solutions/{name} cell {index}"
            if _CHECK_CALL.search(cell.source):
                if blocks_since_check == 0:
                    raise MarkerError(f"{where}: this check follows no solution block; put the solution between '# BEGIN SOLUTION' and '# END SOLUTION'")
                blocks_since_check = 0
            cell.source, blocks = stub_source(cell.source, where)
            blocks_total += blocks
            blocks_since_check += blocks
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
        cells.append(cell)
    if blocks_total == 0:
        raise MarkerError(f"solutions/{name} has no '# BEGIN SOLUTION' ... '# END SOLUTION' block")
    exercise.cells = cells
    # The grader (tutorial_lib.grade) reads the assignment from here, the file name being only its fallback.
    exercise.metadata["tutorial_lib"] = {"assignment": name[:2]}
    return apply_header(exercise, root / "exercises" / name, root)


_MODULE_CELL = re.compile(r"^%%my_transformer[ \t]+(?P<name>\S+)[ \t]*\n")


def module_files(notebook: NotebookNode, where: str) -> dict[str, str]:
    """The files of ``my_transformer/`` that the notebook's ``%%my_transformer NAME`` cells write, by file name."""
    files = {}
    for index, cell in enumerate(notebook.cells):
        match = _MODULE_CELL.match(cell.source) if cell.cell_type == "code" else None
        if match is None:
            continue
        name = f"{match.group('name')}.py"
        if name in files:
            raise MarkerError(f"{where} cell {index}: a second cell writes {PACKAGE}/{name}")
        files[name] = module_source(cell.source[match.end():])
    return files


def package_files(root: Path) -> tuple[dict[Path, str], list[str]]:
    """Every file of both ``my_transformer/`` folders, with its text, from the solutions notebooks and their stubs."""
    files: dict[Path, str] = {}
    problems: list[str] = []
    owners: dict[str, str] = {}
    for path in sorted(p for p in (root / "solutions").glob("*.ipynb") if _NOTEBOOK_NAME.match(p.name)):
        solution = nbformat.read(path, as_version=4)
        try:
            solved = module_files(solution, f"solutions/{path.name}")
            stubbed = {name: stub_source(text, f"solutions/{path.name}, {PACKAGE}/{name}")[0]
                       for name, text in solved.items()}
        except MarkerError as error:
            problems.append(str(error))
            continue
        for name in solved:
            if name in owners:
                problems.append(f"solutions/{path.name} and {owners[name]} both write {PACKAGE}/{name}")
            owners[name] = f"solutions/{path.name}"
        for folder, texts in (("solutions", solved), ("exercises", stubbed)):
            for name, text in texts.items():
                files[root / folder / PACKAGE / name] = text
    for folder in ("solutions", "exercises"):
        if any(path.parent == root / folder / PACKAGE for path in files):
            files[root / folder / PACKAGE / "__init__.py"] = PACKAGE_DOC
    return files, problems


def sources(notebook: NotebookNode) -> list[tuple[str, str, list[str]]]:
    """What the drift check compares: each cell's type, source and tags, and the assignment the grader reads."""
    return [(cell.cell_type, cell.source, list(cell.get("metadata", {}).get("tags", []))) for cell in notebook.cells] + [
        ("metadata", str(notebook.metadata.get("tutorial_lib")), [])]


def is_executed(notebook: NotebookNode) -> bool:
    return all(cell.execution_count is not None for cell in notebook.cells if cell.cell_type == "code")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when exercises/ differs from what would be written")
    mode.add_argument("--force", action="store_true", help="execute every exercises notebook, changed or not")
    mode.add_argument("--no-execute", action="store_true", help="write the notebooks without executing them")
    parser.add_argument("--root", type=Path, default=ROOT, help="the book's folder: solutions/, exercises/, _config.yml")
    args = parser.parse_args(argv)
    solutions, exercises = args.root / "solutions", args.root / "exercises"

    problems: list[str] = []
    for orphan in sorted(exercises.glob("*.ipynb")):
        if not (solutions / orphan.name).exists():
            problems.append(f"{orphan}: no solutions/{orphan.name} to generate it from")
    # my_transformer/ first: an exercises notebook that runs below imports the files of the chapters before it
    files, file_problems = package_files(args.root)
    problems += file_problems
    for folder in ("solutions", "exercises"):
        for stale in sorted((args.root / folder / PACKAGE).glob("*.py")):
            if stale in files:
                continue
            if args.check:
                problems.append(f"{stale}: no %%my_transformer cell writes it")
            else:
                stale.unlink()
    for path, text in files.items():
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                problems.append(f"{path}: differs from what its %%my_transformer cell writes; run `make exercises`")
        elif not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"{path}: written")
    for solution_path in sorted(path for path in solutions.glob("*.ipynb") if _NOTEBOOK_NAME.match(path.name)):
        try:
            generated = make_exercise_notebook(nbformat.read(solution_path, as_version=4), solution_path.name, args.root)
        except ValueError as error:  # a MarkerError, or a header that notebook_header.py refuses
            problems.append(str(error))
            continue
        target = exercises / solution_path.name
        existing = nbformat.read(target, as_version=4) if target.exists() else None
        if args.check:
            if existing is None:
                problems.append(f"{target}: missing; run `make exercises`")
            elif sources(existing) != sources(generated):
                problems.append(f"{target}: differs from what {solution_path.name} generates; run `make exercises`")
            elif not is_executed(existing):
                problems.append(f"{target}: has code cells that never ran; run `make exercises`")
            continue
        if existing is not None and sources(existing) == sources(generated) and is_executed(existing) and not args.force:
            print(f"{target}: up to date")
            continue
        exercises.mkdir(parents=True, exist_ok=True)
        nbformat.write(generated, target)
        if args.no_execute:
            print(f"{target}: written, not executed")
            continue
        try:
            execute(target, CELL_TIMEOUT)
        except CellExecutionError as error:  # a fresh exercises notebook must run: stubs only report "not attempted"
            problems.append(f"{target}: a cell failed when executed\n{error}")
            continue
        print(f"{target}: written and executed")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
