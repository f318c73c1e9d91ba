"""Grade exercise notebooks: ``python -m tutorial_lib.grade PATH... [--timeout S] [--jobs N] [--format F] [--release D]``.

Each notebook (a file, or every file under a folder whose name contains ``.ipynb``, in any case) runs top to bottom in
a fresh kernel from its own folder, within a time limit for the whole notebook. Strict checks are switched off, so a
wrong answer costs its points and nothing else; a cell that raises does not stop the run.

**Which assignment.** The notebook's metadata (``{"tutorial_lib": {"assignment": "03"}}``, written by
``tools/make_exercises.py``), else its ``NN_`` file name, else the chapters its ``check("NN.…")`` calls name. Every
exercise of the assignment gets a row with its maximum, whatever happened: a notebook that cannot be read, is not a
notebook, had its check cells deleted, killed its kernel or ran out of time still has every row, at 0 with the reason.

**The grader does not believe the kernel.** Before running, the assignment's check cells are restored from the released
exercise notebook (``exercises/`` beside the package, or ``--release``), matched by cell id (else by the exercise they
check; a deleted one is put back after the cell that preceded it), so editing or deleting them changes nothing. Each
restored cell runs inside ``graded_cell(secret)`` with a secret drawn for this run, and only check-log lines carrying it
count: a learner's own ``check(...)`` call, or a cell that writes lines to the log, scores nothing. A check also refuses
an answer that is ``tutorial_lib``'s own implementation. A prediction counts as recorded when a restored measuring cell
(``record_prediction(...)``) recorded it under the run's secret; the run starts from the predictions the submitted
notebook's saved outputs show as recorded before their measurement, so one changed after its measurement was printed
scores 0 here as in Jupyter (clearing the outputs erases that evidence). This protects against accidents and copying the library; it
does not stop a determined attacker in the same kernel (who can read the secret from the kernel's history): grade
untrusted code in a sandbox.

A folder is graded ``--jobs`` notebooks at a time (default: one per core), each kernel limited to its share of the
cores (one thread each when every core runs a kernel): kernels that each start a full thread pool on a shared CPU run
many times slower. ``--format table`` (default) prints a table per notebook, every lost point with its one-line
reason, and a last line ``score: X/Y``; ``csv`` and ``json`` print a gradebook, one row per notebook and exercise.
Files under a folder that do not look like notebooks are listed as skipped. The exit status is 0 whatever the score,
2 on a usage error (one line on stderr).
"""

from __future__ import annotations

import argparse
import copy
import csv
import io
import json
import math
import multiprocessing
import os
import re
import secrets
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

from tutorial_lib.checks.core import LOG_ENV, STRICT_ENV, chapter_exercises
from tutorial_lib.checks.prediction import PREDICTIONS_ENV, shown_records, write_records

DEFAULT_TIMEOUT = 300.0
DEFAULT_RELEASE = Path(__file__).resolve().parents[1] / "exercises"  # the released exercises, in a clone of the book
METADATA_KEY = "tutorial_lib"  # notebook metadata: {"tutorial_lib": {"assignment": "03"}}
_CHAPTER_IN_NAME = re.compile(r"^(\d\d)_")
_CHECK_CALL = re.compile(r"""check\(\s*["'](\d\d)\.""")
_CHECKED_NAME = re.compile(r"""(?:check|record_prediction)\(\s*["']\d\d\.[a-z0-9_]+["']\s*,\s*([A-Za-z_]\w*)""")
# A released cell that checks an exercise, or records a prediction before its measurement: both are restored.
_CHECKED_ID = re.compile(r"""\b(check|record_prediction)\(\s*["'](\d\d\.[a-z0-9_]+)["']""")
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


def _read_notebook(path: Path) -> tuple[nbformat.NotebookNode | None, str]:
    """The notebook at ``path``, or None and why it cannot be run (not UTF-8, not JSON, JSON but not a notebook)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        return None, f"could not read the file ({type(error).__name__})"
    try:
        raw = json.loads(text)
    except ValueError:
        return None, "not a notebook: the file is not JSON"
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
        return None, f"not a notebook: JSON {type(raw).__name__} without a list of cells"
    try:
        notebook = nbformat.reads(text, as_version=4)
    except Exception as error:  # nbformat's conversions raise many kinds of errors on a damaged notebook
        return None, f"not a notebook: nbformat refused it ({type(error).__name__})"
    if any(not isinstance(cell, dict) or "cell_type" not in cell or "source" not in cell for cell in notebook.cells):
        return None, "not a notebook: a cell without a type or a source"
    return notebook, ""


def assignment_of(path: Path, notebook: nbformat.NotebookNode | None) -> tuple[list[str], str]:
    """The chapter(s) whose exercises ``notebook`` answers, and how that was decided (for the status line)."""
    if notebook is not None:
        meta = notebook.metadata.get(METADATA_KEY, {})
        assignment = meta.get("assignment") if isinstance(meta, dict) else None
        if isinstance(assignment, str) and re.fullmatch(r"\d\d", assignment) and chapter_exercises(assignment):
            return [assignment], "metadata"
    named = _CHAPTER_IN_NAME.findall(path.name)
    if named and chapter_exercises(named[0]):
        return named, "file name"
    if notebook is not None:
        called = sorted({chapter for cell in notebook.cells if cell.cell_type == "code"
                         for chapter in _CHECK_CALL.findall(cell.source) if chapter_exercises(chapter)})
        if called:
            return called, "check calls"
    return [], ""


def _released(chapter: str, release: Path) -> nbformat.NotebookNode | None:
    """The released exercises notebook of ``chapter`` under ``release``, if there is one."""
    found = sorted(release.glob(f"{chapter}_*.ipynb")) if release.is_dir() else []
    return nbformat.read(found[0], as_version=4) if found else None


def _predictions_shown(notebook: nbformat.NotebookNode) -> list[tuple[str, float]]:
    """The predictions the submitted notebook's saved outputs show as recorded before their measurement, first first:
    the grader's run starts from them, so a prediction changed after its measurement was printed scores 0."""
    texts = [output.get("text", "") if output.get("output_type") == "stream"
             else output.get("data", {}).get("text/plain", "")
             for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    return shown_records("\n".join("".join(text) if isinstance(text, list) else str(text) for text in texts))


def _checked_calls(cell: nbformat.NotebookNode) -> set[tuple[str, str]]:
    """The (call, exercise id) pairs of a code cell: ("check", "03.attention"), ("record_prediction", …)."""
    return set(_CHECKED_ID.findall(cell.source)) if cell.cell_type == "code" else set()


def _checked_ids(cell: nbformat.NotebookNode) -> set[str]:
    return {exercise_id for _, exercise_id in _checked_calls(cell)}


def _graded_source(source: str, secret: str) -> str:
    """A check cell run inside ``graded_cell(secret)``: only its checks' log lines carry the secret."""
    body = textwrap.indent(source, "    ") if source.strip() else "    pass"
    return (f"from tutorial_lib.checks.core import graded_cell as _tutorial_lib_graded_cell\n"
            f"with _tutorial_lib_graded_cell({secret!r}):\n{body}")


def restore_check_cells(notebook: nbformat.NotebookNode, released: nbformat.NotebookNode | None,
                        chapters: list[str], secret: str) -> tuple[nbformat.NotebookNode, str]:
    """``notebook`` with the assignment's check cells as released, each run inside ``graded_cell(secret)``.

    A released check cell replaces the submission's cell with its id (else the cell that checks the same exercises);
    one that was deleted goes back after the cell that preceded it in the release (else at the end). Without a release
    the submission's own check cells of the assignment are the ones marked. Returns the notebook and a note."""
    cells = list(notebook.cells)
    if released is None:
        marked = 0
        for cell in cells:
            if {i[:2] for i in _checked_ids(cell)} & set(chapters):
                cell.source = _graded_source(cell.source, secret)
                marked += 1
        notebook.cells = cells
        return notebook, f"no released exercise to restore the checks from; {marked} check cell(s) of its own counted"
    released_cells = [cell for cell in released.cells if cell.cell_type == "code"]
    put_back = 0
    for position, check_cell in enumerate(released_cells):
        ids = _checked_calls(check_cell)
        if not ids:
            continue
        target = next((i for i, cell in enumerate(cells) if cell.get("id") == check_cell.get("id")), None)
        if target is None:
            target = next((i for i, cell in enumerate(cells) if _checked_calls(cell) & ids), None)
        if target is not None:
            cell = copy.deepcopy(cells[target])
            cell.cell_type, cell.source, cell.outputs = "code", check_cell.source, []
            cell.setdefault("execution_count", None)
            cells[target] = cell
        else:
            before = released_cells[position - 1].get("id") if position else None
            after = next((i for i, cell in enumerate(cells) if before and cell.get("id") == before), len(cells) - 1)
            cells.insert(after + 1, nbformat.v4.new_code_cell(check_cell.source))
            put_back += 1
        cells[target if target is not None else after + 1].source = _graded_source(check_cell.source, secret)
    notebook.cells = cells
    return notebook, (f"{put_back} deleted check cell(s) put back" if put_back else "")


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
    cells = [i for i, cell in enumerate(notebook.cells) if exercise_id in _checked_ids(cell)]
    if not cells:
        return f"not run: {run.why_stopped}" if run.stopped_at == 0 else "not run: the notebook has no check of it"
    if run.stopped_at is not None and cells[0] >= run.stopped_at:
        return f"not run: {run.why_stopped}"
    failed = [i for i in cells if i in run.raised]
    if failed:
        reason = f"not run: its check's cell {failed[0]} raised {run.raised[failed[0]]}"
        checked = _CHECKED_NAME.search(notebook.cells[failed[0]].source)
        if run.raised[failed[0]] == "NameError" and checked:  # say where the answer's name should have come from
            name = checked.group(1)
            defines = re.compile(rf"^\s*(?:def|class)\s+{name}\b|^\s*{name}\s*=", re.MULTILINE)
            definers = [i for i, cell in enumerate(notebook.cells[:failed[0]])
                        if cell.cell_type == "code" and defines.search(cell.source)]
            if not definers:
                reason += f": no cell defines {name}"
            elif definers[-1] in run.raised:
                reason += f" after cell {definers[-1]}, which defines {name}, raised {run.raised[definers[-1]]}"
        return reason
    return "not run: its check did not report"


def _log_records(lines: list[str], secret: str, exercise_ids: set[str]) -> tuple[dict[str, dict], str]:
    """The results the restored check cells wrote (the last one of each exercise), and a note on the lines ignored."""
    reported: dict[str, dict] = {}
    malformed = forged = other = 0
    for line in lines:
        try:
            record = json.loads(line)
            fields_ok = (isinstance(record, dict) and isinstance(record.get("exercise_id"), str)
                         and isinstance(record.get("points"), int) and isinstance(record.get("summary"), str))
        except ValueError:
            fields_ok = False
        if not fields_ok:
            malformed += 1
        elif record.get("cell_secret") != secret:
            forged += 1
        elif record["exercise_id"] not in exercise_ids:
            other += 1
        else:
            reported[record["exercise_id"]] = record
    notes = [f"{n} {what}" for n, what in ((malformed, "malformed"), (forged, "not written by a released check cell"),
                                           (other, "of another assignment")) if n]
    return reported, (f"ignored {sum((malformed, forged, other))} check-log line(s): " + ", ".join(notes)) if notes else ""


def kernel_environment(threads: int) -> dict[str, str]:
    """The grading kernels' environment: strict checks off, and at most ``threads`` threads per thread pool."""
    env = {key: value for key, value in os.environ.items() if key != STRICT_ENV}
    env.update({name: str(threads) for name in _THREAD_VARIABLES})
    return env


def grade_notebook(path: Path, timeout: float = DEFAULT_TIMEOUT, threads: int | None = None,
                   release: Path = DEFAULT_RELEASE) -> NotebookGrade:
    """Run ``path`` in a fresh kernel, its check cells restored from ``release``, and grade its assignment.

    ``threads`` caps the kernel's thread pools (default: every core, for a notebook graded alone)."""
    if not 0 < timeout < math.inf:
        raise ValueError(f"timeout must be a finite positive number of seconds, got {timeout!r}")
    threads = threads or os.cpu_count() or 1
    notebook, unreadable = _read_notebook(path)
    chapters, decided_by = assignment_of(path, notebook)
    if not chapters:
        why = unreadable or "no tutorial_lib metadata, no NN_ file name, no check(...) call"
        status = f"could not tell which assignment this is ({why})"
        return NotebookGrade(str(path), status, (ExerciseGrade("?", 0, 0, f"not graded: {why}"),))
    exercises = [exercise for chapter in chapters for exercise in chapter_exercises(chapter)]
    notes: list[str] = []
    if notebook is None:
        run = _Run(unreadable, {}, 0, "the notebook could not be read")
        notebook, lines, secret = nbformat.v4.new_notebook(), [], ""
    else:
        secret = secrets.token_hex(16)
        shown = _predictions_shown(notebook)  # read before the restored cells replace the outputs
        released = _released(chapters[0], release) if len(chapters) == 1 else None
        notebook, note = restore_check_cells(notebook, released, chapters, secret)
        notes += [note] if note else []
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "checks.jsonl"
            env = kernel_environment(threads)
            env[LOG_ENV] = str(log)
            env[PREDICTIONS_ENV] = str(Path(tmp) / "predictions.json")
            write_records(({"exercise": exercise_id, "value": value, "secret": secret}
                           for exercise_id, value in shown), Path(env[PREDICTIONS_ENV]))
            run = _run(notebook, path.resolve().parent, env, timeout)
            lines = log.read_text(encoding="utf-8", errors="replace").splitlines() if log.exists() else []
    reported, note = _log_records(lines, secret, {exercise.id for exercise in exercises})
    notes += [note] if note else []
    if decided_by == "check calls":
        notes.append(f"assignment {', '.join(chapters)} from its check calls")
    grades = []
    for exercise in exercises:
        result = reported.get(exercise.id)
        if result is None:
            grades.append(ExerciseGrade(exercise.id, 0, exercise.points, _not_run_reason(exercise.id, notebook, run)))
        else:
            points = max(0, min(result["points"], exercise.points))
            grades.append(ExerciseGrade(exercise.id, points, exercise.points, result["summary"], result.get("mistake")))
    return NotebookGrade(str(path), "; ".join([run.status, *notes]), tuple(grades))


def format_table(grade: NotebookGrade) -> str:
    """A plain-text table: exercise, points awarded / available, short verdict; then the notebook's total."""
    width = max([len("exercise"), *(len(exercise.exercise_id) for exercise in grade.exercises)])
    rows = [f"{grade.path}: {grade.status}", f"  {'exercise':<{width}}  points  verdict"]
    for exercise in grade.exercises:
        points = f"{exercise.points}/{exercise.max_points}"
        rows.append(f"  {exercise.exercise_id:<{width}}  {points:<6}  {exercise.summary}")
    rows.append(f"  {'total':<{width}}  {grade.points}/{grade.max_points}")
    return "\n".join(rows)


class UsageError(ValueError):
    """A command line the grader cannot act on: exit 2 with one line."""


def looks_like_notebook(path: Path) -> bool:
    """``x.ipynb``, ``x.IPYNB``, ``x.ipynb.txt`` (as a browser may save it): graded, whatever is inside."""
    return ".ipynb" in path.name.lower()


def find_notebooks(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """The notebooks to grade and, for each other file under a folder, ``"path (why it was skipped)"``."""
    found: list[Path] = []
    skipped: list[str] = []
    for path in paths:
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts)
            inside = [p for p in files if looks_like_notebook(p)]
            skipped += [f"{p} (its name has no .ipynb)" for p in files if not looks_like_notebook(p)]
            if not inside:
                raise UsageError(f"no notebooks under {path}")
            found.extend(inside)
        elif path.is_file() and looks_like_notebook(path):
            found.append(path)
        elif path.exists():
            raise UsageError(f"{path} is neither a notebook (.ipynb) nor a folder")
        else:
            raise UsageError(f"{path} does not exist")
    return found, skipped


def grade_all(paths: list[Path], timeout: float = DEFAULT_TIMEOUT, jobs: int | None = None,
              release: Path = DEFAULT_RELEASE) -> list[NotebookGrade]:
    """Grade ``paths``, ``jobs`` at a time (default: one per core), in the order given.

    The cores are shared out: each kernel gets ``cores // jobs`` threads (at least one)."""
    cores = os.cpu_count() or 1
    jobs = max(1, min(jobs or cores, len(paths)))
    threads = max(1, cores // jobs)
    if jobs == 1:
        return [grade_notebook(path, timeout, threads, release) for path in paths]
    # Fresh worker processes ("spawn"): forking a process that has started PyTorch's thread pool can hang.
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(grade_notebook, paths, [timeout] * len(paths), [threads] * len(paths),
                             [release] * len(paths)))


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


def format_json(grades: list[NotebookGrade], skipped: list[str] = ()) -> str:
    notebooks = [{**asdict(g), "points": g.points, "max_points": g.max_points} for g in grades]
    return json.dumps(
        {"notebooks": notebooks, "rows": gradebook_rows(grades), "points": sum(g.points for g in grades),
         "max_points": sum(g.max_points for g in grades), "skipped": list(skipped)},
        indent=2, ensure_ascii=False,
    )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints the usage as well)
        raise UsageError(message)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m tutorial_lib.grade", description="Grade exercise notebooks in fresh kernels.")
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="notebooks, or folders of notebooks")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per notebook (default 300)")
    parser.add_argument("--jobs", type=int, default=None, help="notebooks graded at once (default: one per core)")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output (default table)")
    parser.add_argument("--json", action="store_const", const="json", dest="format", help="same as --format json")
    parser.add_argument("--release", type=Path, default=DEFAULT_RELEASE,
                        help="folder of the released exercises notebooks whose check cells are restored "
                             "(default: the book's exercises/)")
    try:
        args = parser.parse_args(argv)
        if not 0 < args.timeout < math.inf:
            raise UsageError(f"--timeout must be a finite number of seconds above 0, got {args.timeout:g}")
        if args.jobs is not None and args.jobs < 1:
            raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
        if not args.release.is_dir():
            raise UsageError(f"--release {args.release} is not a folder of released exercises")
        paths, skipped = find_notebooks(args.paths)
    except UsageError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    grades = grade_all(paths, args.timeout, args.jobs, args.release)
    if args.format == "json":
        print(format_json(grades, skipped))
    else:
        for line in skipped:
            print(f"skipped: {line}", file=sys.stderr)
        if args.format == "csv":
            print(format_csv(grades), end="")
        else:
            for grade in grades:
                print(format_table(grade), end="\n\n")
            print(f"score: {sum(g.points for g in grades)}/{sum(g.max_points for g in grades)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
