"""Grade exercise notebooks: ``python -m tutorial_lib.grade PATH... [--timeout SECONDS] [--json]``.

Each notebook (a file, or every notebook under a folder) runs top to bottom in a fresh kernel from its own folder,
within a time limit for the whole notebook. Every ``check(...)`` it calls appends its result to a log the grader names
in the kernel's environment (``TUTORIAL_LIB_CHECK_LOG``); strict checks are switched off, so a wrong answer costs its
points and nothing else. A cell that raises does not stop the run: later exercises still count. Exercises of the
notebook's chapter (from its ``NN_`` file name and its ``check("NN.…")`` calls) that never reported score 0,
"not run". The last line is ``score: X/Y`` over every notebook. The exit status is 0 whatever the score, 2 on a
usage error.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

from tutorial_lib.checks.core import LOG_ENV, STRICT_ENV, chapter_exercises

DEFAULT_TIMEOUT = 300.0
_CHAPTER_IN_NAME = re.compile(r"^(\d\d)_")
_CHECK_CALL = re.compile(r"""check\(\s*["'](\d\d)\.""")


@dataclass(frozen=True)
class ExerciseGrade:
    exercise_id: str
    points: int
    max_points: int
    summary: str
    mistake: str | None = None


@dataclass(frozen=True)
class NotebookGrade:
    path: str
    status: str
    exercises: tuple[ExerciseGrade, ...]

    @property
    def points(self) -> int:
        return sum(grade.points for grade in self.exercises)

    @property
    def max_points(self) -> int:
        return sum(grade.max_points for grade in self.exercises)


def _chapters(path: Path, notebook: nbformat.NotebookNode) -> list[str]:
    chapters = set(_CHAPTER_IN_NAME.findall(path.name))
    for cell in notebook.cells:
        if cell.cell_type == "code":
            chapters.update(_CHECK_CALL.findall(cell.source))
    return sorted(chapters)


def _run(notebook: nbformat.NotebookNode, folder: Path, env: dict[str, str], timeout: float) -> str:
    """Execute every code cell, carrying on after errors, until the notebook's time is up; returns the status."""
    client = NotebookClient(
        notebook,
        timeout=math.ceil(timeout),
        kernel_name="python3",
        resources={"metadata": {"path": str(folder)}},
        shutdown_kernel="immediate",
    )
    deadline = time.monotonic() + timeout
    failed: list[str] = []
    try:
        # The kernel process's own stderr holds only jupyter_client's start-up notices; cells' output comes over ZMQ.
        with client.setup_kernel(env=env, stderr=subprocess.DEVNULL):
            for index, cell in enumerate(notebook.cells):
                if cell.cell_type != "code":
                    continue
                # The whole notebook shares one budget: each cell gets what is left of it.
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CellTimeoutError(f"the notebook's {timeout:g} s are up")
                client.timeout = math.ceil(left)
                try:
                    client.execute_cell(cell, index)
                except CellExecutionError as error:
                    failed.append(f"cell {index} raised {error.ename}")
    except CellTimeoutError:
        return f"timed out after {timeout:g} s; graded on what ran"
    except DeadKernelError:
        return "the kernel died; graded on what ran"
    except Exception as error:  # the kernel would not start, or the notebook cannot be run at all
        return f"could not run ({type(error).__name__}: {error})"
    if failed:
        return "ran to the end; " + ", ".join(failed)
    return "ran to the end"


def grade_notebook(path: Path, timeout: float = DEFAULT_TIMEOUT) -> NotebookGrade:
    """Run ``path`` in a fresh kernel and collect the points of every exercise of its chapter(s)."""
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    try:
        notebook = nbformat.read(path, as_version=4)
    except (OSError, ValueError) as error:  # one unreadable submission must not stop a folder's grading
        notebook = nbformat.v4.new_notebook()
        status, lines = f"could not read the notebook ({type(error).__name__})", []
    else:
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "checks.jsonl"
            env = {key: value for key, value in os.environ.items() if key != STRICT_ENV}
            env[LOG_ENV] = str(log)
            status = _run(notebook, path.resolve().parent, env, timeout)
            lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    reported: dict[str, dict] = {}
    for line in lines:
        result = json.loads(line)
        reported[result["exercise_id"]] = result  # a check run twice counts as it last ran
    exercises = [exercise for chapter in _chapters(path, notebook) for exercise in chapter_exercises(chapter)]
    grades = []
    for exercise in exercises:
        result = reported.pop(exercise.id, None)
        if result is None:
            grades.append(ExerciseGrade(exercise.id, 0, exercise.points, "not run"))
        else:
            grades.append(ExerciseGrade(exercise.id, result["points"], exercise.points, result["summary"], result["mistake"]))
    # Checks of exercises from other chapters still count, at the points they report.
    for exercise_id, result in reported.items():
        grades.append(ExerciseGrade(exercise_id, result["points"], result["max_points"], result["summary"], result["mistake"]))
    return NotebookGrade(str(path), status, tuple(grades))


def format_table(grade: NotebookGrade) -> str:
    """A plain-text table: exercise, points awarded / available, short verdict; then the notebook's total."""
    width = max([len("exercise"), *(len(exercise.exercise_id) for exercise in grade.exercises)])
    rows = [f"{grade.path}: {grade.status}", f"  {'exercise':<{width}}  points  verdict"]
    for exercise in grade.exercises:
        points = f"{exercise.points}/{exercise.max_points}"
        rows.append(f"  {exercise.exercise_id:<{width}}  {points:<6}  {exercise.summary}")
    rows.append(f"  {'total':<{width}}  {grade.points}/{grade.max_points}")
    return "\n".join(rows)


def _notebooks(paths: list[Path], parser: argparse.ArgumentParser) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
            if not inside:
                parser.error(f"no notebooks under {path}")
            found.extend(inside)
        elif path.is_file() and path.suffix == ".ipynb":
            found.append(path)
        else:
            parser.error(f"{path} is neither a notebook (.ipynb) nor a folder")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tutorial_lib.grade", description="Grade exercise notebooks in fresh kernels."
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="notebooks, or folders of notebooks")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per notebook (default 300)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    args = parser.parse_args(argv)
    if not args.timeout > 0:
        parser.error(f"--timeout must be positive, got {args.timeout:g}")
    grades = [grade_notebook(path, args.timeout) for path in _notebooks(args.paths, parser)]
    points, max_points = sum(g.points for g in grades), sum(g.max_points for g in grades)
    if args.json:
        notebooks = [{**asdict(g), "points": g.points, "max_points": g.max_points} for g in grades]
        print(json.dumps({"notebooks": notebooks, "points": points, "max_points": max_points}, indent=2, ensure_ascii=False))
    else:
        for grade in grades:
            print(format_table(grade), end="\n\n")
        print(f"score: {points}/{max_points}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
