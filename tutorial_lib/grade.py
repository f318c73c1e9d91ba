"""Grade exercise notebooks: ``python -m tutorial_lib.grade PATH... [--timeout S] [--jobs N] [--format F]``.

Each notebook (a file, or every notebook under a folder) runs top to bottom in a fresh kernel from its own folder,
within a time limit for the whole notebook. Every ``check(...)`` it calls appends its result to a log the grader names
in the kernel's environment (``TUTORIAL_LIB_CHECK_LOG``); strict checks are switched off, so a wrong answer costs its
points and nothing else. A cell that raises does not stop the run: later exercises still count. Exercises of the
notebook's chapter (from its ``NN_`` file name and its ``check("NN.…")`` calls) that never reported score 0, with the
reason (the notebook ran out of time, the kernel died, the check's cell raised first).

A folder is graded ``--jobs`` notebooks at a time (default: one per core), each kernel limited to its share of the
cores (one thread each when every core runs a kernel): kernels that each start a full thread pool on a shared CPU run
many times slower. ``--format table`` (default) prints a table per notebook, every lost point with its one-line
reason, and a last line ``score: X/Y``; ``csv`` and ``json`` print a gradebook, one row per notebook and exercise.
The exit status is 0 whatever the score, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

from tutorial_lib.checks.core import LOG_ENV, STRICT_ENV, chapter_exercises

DEFAULT_TIMEOUT = 300.0
_CHAPTER_IN_NAME = re.compile(r"^(\d\d)_")
_CHECK_CALL = re.compile(r"""check\(\s*["'](\d\d)\.""")
_CHECKED_ID = re.compile(r"""check\(\s*["'](\d\d\.[a-z0-9_]+)["']""")
# Every thread pool a kernel may start: PyTorch's (OpenMP), MKL's and OpenBLAS's (numpy).
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


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


@dataclass
class _Run:
    """How a notebook's run went: its status line, the cells that raised, and the cell it stopped at, if any."""

    status: str
    raised: dict[int, str]
    stopped_at: int | None = None
    why_stopped: str = ""


def _run(notebook: nbformat.NotebookNode, folder: Path, env: dict[str, str], timeout: float) -> _Run:
    """Execute every code cell, carrying on after errors, until the notebook's time is up."""
    client = NotebookClient(
        notebook,
        timeout=math.ceil(timeout),
        kernel_name="python3",
        resources={"metadata": {"path": str(folder)}},
        shutdown_kernel="immediate",
    )
    deadline = time.monotonic() + timeout
    raised: dict[int, str] = {}
    index = None
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
                    raised[index] = error.ename
    except CellTimeoutError:
        why = f"the notebook's {timeout:g} s ran out at cell {index}"
        return _Run(f"timed out after {timeout:g} s; graded on what ran", raised, index, why)
    except DeadKernelError:
        return _Run("the kernel died; graded on what ran", raised, index, f"the kernel died at cell {index}")
    except Exception as error:  # the kernel would not start, or the notebook cannot be run at all
        return _Run(f"could not run ({type(error).__name__}: {error})", raised, 0, "the notebook could not run")
    if raised:
        return _Run("ran to the end; " + ", ".join(f"cell {i} raised {name}" for i, name in raised.items()), raised)
    return _Run("ran to the end", raised)


def _not_run_reason(exercise_id: str, notebook: nbformat.NotebookNode, run: _Run) -> str:
    """Why an exercise of the notebook reported nothing, in a few words."""
    cells = [i for i, cell in enumerate(notebook.cells)
             if cell.cell_type == "code" and exercise_id in _CHECKED_ID.findall(cell.source)]
    if not cells:
        return f"not run: {run.why_stopped}" if run.stopped_at == 0 else "not run: the notebook has no check of it"
    if run.stopped_at is not None and cells[0] >= run.stopped_at:
        return f"not run: {run.why_stopped}"
    failed = [i for i in cells if i in run.raised]
    if failed:
        return f"not run: its check's cell {failed[0]} raised {run.raised[failed[0]]}"
    return "not run: its check did not report"


def kernel_environment(threads: int) -> dict[str, str]:
    """The grading kernels' environment: strict checks off, and at most ``threads`` threads per thread pool."""
    env = {key: value for key, value in os.environ.items() if key != STRICT_ENV}
    env.update({name: str(threads) for name in _THREAD_VARIABLES})
    return env


def grade_notebook(path: Path, timeout: float = DEFAULT_TIMEOUT, threads: int | None = None) -> NotebookGrade:
    """Run ``path`` in a fresh kernel and collect the points of every exercise of its chapter(s).

    ``threads`` caps the kernel's thread pools (default: every core, for a notebook graded alone)."""
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    threads = threads or os.cpu_count() or 1
    try:
        notebook = nbformat.read(path, as_version=4)
    except (OSError, ValueError) as error:  # one unreadable submission must not stop a folder's grading
        notebook = nbformat.v4.new_notebook()
        run = _Run(f"could not read the notebook ({type(error).__name__})", {}, 0, "the notebook could not be read")
        lines: list[str] = []
    else:
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "checks.jsonl"
            env = kernel_environment(threads)
            env[LOG_ENV] = str(log)
            run = _run(notebook, path.resolve().parent, env, timeout)
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
            grades.append(ExerciseGrade(exercise.id, 0, exercise.points, _not_run_reason(exercise.id, notebook, run)))
        else:
            grades.append(ExerciseGrade(exercise.id, result["points"], exercise.points, result["summary"], result["mistake"]))
    # Checks of exercises from other chapters still count, at the points they report.
    for exercise_id, result in reported.items():
        grades.append(ExerciseGrade(exercise_id, result["points"], result["max_points"], result["summary"], result["mistake"]))
    return NotebookGrade(str(path), run.status, tuple(grades))


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


def grade_all(paths: list[Path], timeout: float = DEFAULT_TIMEOUT, jobs: int | None = None) -> list[NotebookGrade]:
    """Grade ``paths``, ``jobs`` at a time (default: one per core), in the order given.

    The cores are shared out: each kernel gets ``cores // jobs`` threads (at least one)."""
    cores = os.cpu_count() or 1
    jobs = max(1, min(jobs or cores, len(paths)))
    threads = max(1, cores // jobs)
    if jobs == 1:
        return [grade_notebook(path, timeout, threads) for path in paths]
    # Fresh worker processes ("spawn"): forking a process that has started PyTorch's thread pool can hang.
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(grade_notebook, paths, [timeout] * len(paths), [threads] * len(paths)))


def gradebook_rows(grades: list[NotebookGrade]) -> list[dict[str, object]]:
    """One row per notebook and exercise: notebook, status, exercise, points, max_points, verdict."""
    return [
        {"notebook": g.path, "status": g.status, "exercise": e.exercise_id, "points": e.points,
         "max_points": e.max_points, "verdict": e.summary}
        for g in grades for e in g.exercises
    ]


def format_csv(grades: list[NotebookGrade]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["notebook", "status", "exercise", "points", "max_points", "verdict"],
                            lineterminator="\n")
    writer.writeheader()
    writer.writerows(gradebook_rows(grades))
    return out.getvalue()


def format_json(grades: list[NotebookGrade]) -> str:
    notebooks = [{**asdict(g), "points": g.points, "max_points": g.max_points} for g in grades]
    return json.dumps(
        {"notebooks": notebooks, "rows": gradebook_rows(grades), "points": sum(g.points for g in grades),
         "max_points": sum(g.max_points for g in grades)},
        indent=2, ensure_ascii=False,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tutorial_lib.grade", description="Grade exercise notebooks in fresh kernels."
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="notebooks, or folders of notebooks")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per notebook (default 300)")
    parser.add_argument("--jobs", type=int, default=None, help="notebooks graded at once (default: one per core)")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output (default table)")
    parser.add_argument("--json", action="store_const", const="json", dest="format", help="same as --format json")
    args = parser.parse_args(argv)
    if not args.timeout > 0:
        parser.error(f"--timeout must be positive, got {args.timeout:g}")
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    grades = grade_all(_notebooks(args.paths, parser), args.timeout, args.jobs)
    if args.format == "json":
        print(format_json(grades))
    elif args.format == "csv":
        print(format_csv(grades), end="")
    else:
        for grade in grades:
            print(format_table(grade), end="\n\n")
        print(f"score: {sum(g.points for g in grades)}/{sum(g.max_points for g in grades)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
