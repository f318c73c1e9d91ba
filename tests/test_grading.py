"""python -m tutorial_lib.grade: solutions score full marks, fresh exercises score zero, planted mistakes are named.

Each graded notebook runs in a fresh kernel (a few seconds), so mistakes of different exercises share a notebook.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
from pathlib import Path

import nbformat
import pytest
import torch
from jaxtyping import Bool, Float, Int
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from tutorial_lib import grade
from tutorial_lib.build_track import cell_python
from tutorial_lib.checks import chapter_exercises, get_exercise

ROOT = Path(__file__).resolve().parents[1]
NAME = "03_scaled_dot_product_attention.ipynb"
SOLUTION = ROOT / "solutions" / NAME
EXERCISE = ROOT / "exercises" / NAME


def _attention(*, pre="", scores="q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])",
               fill='scores.masked_fill(~mask, float("-inf"))', softmax="torch.softmax(scores, dim=-1).nan_to_num(0.0)",
               post="", ret="weights @ v, weights") -> str:
    """A learner's attention body: the solution with one piece swapped for a mistake."""
    return "\n".join(
        line for line in [
            pre,
            f"scores = {scores}",
            "if mask is not None:",
            f"    scores = {fill}",
            f"weights = {softmax}",
            post,
            f"return {ret}",
        ] if line
    )


# Function to plant into -> list of (mistake name, body written as a learner would).
PLANTED = {
    "scaled_dot_product_attention": [
        ("no_scale", _attention(scores="q @ k.transpose(-2, -1)")),
        ("divided_by_d_k", _attention(scores="q @ k.transpose(-2, -1) / q.shape[-1]")),
        ("scaled_by_d_value", _attention(scores="q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])")),
        ("wrong_k_axes", _attention(scores="q @ k.T / math.sqrt(q.shape[-1])")),
        ("softmax_over_queries", _attention(softmax="torch.softmax(scores, dim=-2).nan_to_num(0.0)")),
        ("inverted_mask", _attention(fill='scores.masked_fill(mask, float("-inf"))')),
        ("mask_after_softmax", _attention(fill="scores", post="weights = weights if mask is None else weights * mask")),
        ("masked_with_zero", _attention(fill="scores.masked_fill(~mask, 0.0)")),
        ("masked_with_large_negative", _attention(fill="scores.masked_fill(mask == 0, -1e9)")),
        ("nan_for_fully_masked_rows", _attention(softmax="torch.softmax(scores, dim=-1)")),
        ("scaled_q_in_place", _attention(pre="q /= math.sqrt(q.shape[-1])", scores="q @ k.transpose(-2, -1)")),
        ("swapped_outputs", _attention(ret="weights, weights @ v")),
    ],
    "causal_mask": [
        ("upper_triangle", "return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool))"),
        ("true_means_masked", "return torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)"),
        ("excluded_diagonal", "return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=-1)"),
        ("sees_the_next_token", "return torch.ones(seq_len, seq_len).tril(1).bool()"),
        ("not_bool", "return torch.tril(torch.ones(seq_len, seq_len))"),
    ],
    "padding_mask": [
        ("inverted", "return (torch.arange(seq_len)[None, :] >= lengths[:, None])[:, None, :]"),
        ("off_by_one", "return (torch.arange(seq_len)[None, :] <= lengths[:, None])[:, None, :]"),
        ("missing_query_axis", "return torch.arange(seq_len)[None, :] < lengths[:, None]"),
        ("query_axis_last", "return (torch.arange(seq_len)[None, :] < lengths[:, None]).unsqueeze(-1)"),
    ],
    "sliding_window_mask": [
        ("one_too_wide", "query, key = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]\n"
                         "return (key <= query) & (query - key <= window)"),
        ("one_too_narrow", "query, key = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]\n"
                           "return (key <= query) & (query - key < window - 1)"),
        ("not_causal", "query, key = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]\n"
                       "return (query - key).abs() < window"),
        ("excluded_self", "mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)\n"
                          "for t in range(seq_len):\n"
                          "    mask[t, max(0, t - window):t] = True\n"
                          "return mask"),
        ("window_from_the_start", "query, key = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]\n"
                                  "return (key <= query) & (key < window)"),
    ],
}
EXERCISE_OF = {
    "scaled_dot_product_attention": "03.attention",
    "causal_mask": "03.causal_mask",
    "padding_mask": "03.padding_mask",
    "sliding_window_mask": "03.sliding_window_mask",
}
GRADED_COPIES = 2


def plant(notebook: nbformat.NotebookNode, function: str, body: str) -> None:
    """Replace the solution of ``function`` (between its markers) by ``body``, at the markers' indentation."""
    cell = next(cell for cell in notebook.cells if cell.cell_type == "code" and f"def {function}(" in cell.source)
    lines = cell.source.split("\n")
    begin = next(i for i, line in enumerate(lines) if line.strip() == "# BEGIN SOLUTION")
    end = next(i for i, line in enumerate(lines) if line.strip() == "# END SOLUTION")
    indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
    cell.source = "\n".join(lines[: begin + 1] + [indent + line for line in body.split("\n")] + lines[end:])


def test_the_catalogue_is_planted_whole():
    for function, mistakes in PLANTED.items():
        catalogued = [mistake.name for mistake in get_exercise(EXERCISE_OF[function]).mistakes]
        assert [name for name, _ in mistakes] == catalogued


# The grader runs these notebooks end to end: 03 (functions and predictions), 13 (the longest exercises). Every other
# solutions and exercises notebook is covered by its stored verdicts (test_every_stored_verdict_is_full_marks_or_not_attempted),
# which nbval re-executes and compares in `make test`: a grader run of all thirty would repeat that work. (09's
# solutions were graded here too: 100 s, most of it training the training-loop check's cached reference run, which
# nbval's run of the same notebook now trains instead; about 35 s of the whole run saved.)
GRADED_END_TO_END = ("03", "13")
VERDICT = re.compile(r"^(\d\d\.\w+): (.+?) \((\d+)/(\d+) points?\)", re.MULTILINE)


def _notebooks(folder: str, chapters=None) -> list[Path]:
    return [p for p in sorted((ROOT / folder).glob("*.ipynb")) if chapters is None or p.name[:2] in chapters]


@pytest.mark.parametrize("path", _notebooks("solutions", GRADED_END_TO_END), ids=lambda path: path.name)
def test_the_solutions_score_full_marks(path):
    # One thread, as the notebooks run in CI: a solutions notebook may train a model the chapters share through the
    # recipes' cache (chapter 11's table baseline), and its numbers depend on the thread count.
    result = grade.grade_notebook(path, threads=1)
    assert result.status == "ran to the end"
    assert [(g.exercise_id, g.points, g.summary) for g in result.exercises] == [
        (exercise.id, exercise.points, "correct") for exercise in chapter_exercises(path.name[:2])
    ]


@pytest.mark.parametrize("path", _notebooks("exercises", GRADED_END_TO_END), ids=lambda path: path.name)
def test_every_fresh_exercises_notebook_runs_and_scores_zero(path):
    result = grade.grade_notebook(path, threads=1)
    assert result.status == "ran to the end"
    assert [(g.exercise_id, g.points, g.summary) for g in result.exercises] == [
        (exercise.id, 0, "not attempted yet") for exercise in chapter_exercises(path.name[:2])
    ]


@pytest.mark.parametrize("path", _notebooks("solutions") + _notebooks("exercises"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_stored_verdict_is_full_marks_or_not_attempted(path):
    """Each check cell's stored verdict (what nbval checks a fresh run still prints): every exercise of the chapter
    once, in order, with full marks in the solutions and "not attempted yet" with 0 points in the exercises."""
    notebook = nbformat.read(path, as_version=4)
    verdicts = [match.groups() for cell in notebook.cells if cell.cell_type == "code" and "check(" in cell.source
                for output in cell.get("outputs", []) for match in VERDICT.finditer(output.get("text", ""))]
    exercises = chapter_exercises(path.name[:2])
    if path.parent.name == "solutions":
        expected = [(e.id, "correct", str(e.points), str(e.points)) for e in exercises]
    else:
        expected = [(e.id, "not attempted yet", "0", str(e.points)) for e in exercises]
    assert verdicts == expected


def test_a_fresh_exercise_notebook_runs_and_scores_zero(capsys):
    assert grade.main([str(EXERCISE)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == f"{EXERCISE}: ran to the end"
    assert out[-1] == f"score: 0/{sum(e.points for e in chapter_exercises('03'))}"
    for exercise_id, max_points in [("03.attention", 2), ("03.causal_mask", 1), ("03.padding_mask", 1)]:
        assert any(line.split() == [exercise_id, f"0/{max_points}", "not", "attempted", "yet"] for line in out), out


def _planted_function(function: str, body: str):
    """``function`` as the planted solutions notebook defines it, run here: the cell's source with ``body`` planted."""
    notebook = nbformat.read(SOLUTION, as_version=4)
    plant(notebook, function, body)
    cell = next(cell for cell in notebook.cells if cell.cell_type == "code" and f"def {function}(" in cell.source)
    namespace = {"math": math, "torch": torch, "Tensor": torch.Tensor, "Bool": Bool, "Float": Float, "Int": Int}
    exec(compile(cell_python(cell.source), f"<{function}, planted>", "exec"), namespace)  # noqa: S102 - our own test's cell
    return namespace[function]


@pytest.mark.parametrize(("function", "mistake", "body"),
                         [(function, name, body) for function, mistakes in PLANTED.items() for name, body in mistakes],
                         ids=lambda value: value if isinstance(value, str) and "\n" not in value and len(value) < 40 else "")
def test_each_planted_mistake_is_named_by_its_check(function, mistake, body, assert_mistake_named):
    # Every mistake as a learner writes it, checked in this process; the grader's kernels run two copies below.
    assert_mistake_named(EXERCISE_OF[function], _planted_function(function, body), mistake)


# The grader end to end on planted notebooks: two copies, each with a mistake in every function (a kernel each, a few
# seconds). That every planted mistake is named is the test above's, in this process, without a kernel per copy.
@pytest.mark.parametrize("copy", range(GRADED_COPIES))
def test_planted_mistakes_lose_their_points_and_are_named(copy, tmp_path):
    notebook = nbformat.read(SOLUTION, as_version=4)
    # What a learner submits has no solution-only cells: they use the solved functions beyond the checks.
    notebook.cells = [c for c in notebook.cells if "solution-only" not in c.get("metadata", {}).get("tags", [])]
    planted = {}
    for function, mistakes in PLANTED.items():
        if copy < len(mistakes):
            name, body = mistakes[copy]
            plant(notebook, function, body)
            planted[EXERCISE_OF[function]] = name
    path = tmp_path / NAME
    nbformat.write(notebook, path)

    result = grade.grade_notebook(path)
    table = grade.format_table(result)
    assert result.status == "ran to the end", table
    for exercise in result.exercises:
        if exercise.exercise_id in planted:
            mistake = next(m for m in get_exercise(exercise.exercise_id).mistakes if m.name == planted[exercise.exercise_id])
            assert exercise.points == 0 and exercise.mistake == mistake.name, table
            assert mistake.description in table
        elif exercise.exercise_id == "03.padded_causal_attention" and planted:
            continue  # the build exercise composes the learner's own pieces, so it inherits a planted mistake
        else:
            assert exercise.points == exercise.max_points, table


CAUSAL = "def causal_mask(seq_len):\n    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()"
PADDING = "def padding_mask(lengths, seq_len):\n    return (torch.arange(seq_len) < lengths[:, None])[:, None]"


def _submission(path: Path, *sources: str) -> Path:
    """A learner's notebook written from scratch: its cells have no ids in common with the released exercise."""
    nbformat.write(new_notebook(cells=[new_code_cell(source) for source in sources]), path)
    return path


def test_crashes_timeouts_and_missing_checks_are_graded_on_what_ran(tmp_path, capsys):
    path = _submission(
        tmp_path / "03_submission.ipynb",
        "import torch\nfrom tutorial_lib.checks import check",
        CAUSAL,
        'check("03.causal_mask", causal_mask)',
        "1 / 0",
        PADDING,
        'check("03.padding_mask", padding_mask)',
        "import time\ntime.sleep(120)",
        'sliding_window_mask = print\ncheck("03.sliding_window_mask", sliding_window_mask)',
    )
    assert grade.main([str(path), "--timeout", "10", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (notebook,) = report["notebooks"]
    # The released check of 03.attention, deleted here, is put back at the end: after the cell that ran out of time.
    assert notebook["status"] == "timed out after 10 s; graded on what ran; 4 deleted check cell(s) put back"
    assert [(e["exercise_id"], e["points"], e["summary"]) for e in notebook["exercises"]] == [
        ("03.attention", 0, "not run: the notebook's 10 s ran out at cell 6"),
        ("03.causal_mask", 1, "correct"),
        ("03.padding_mask", 1, "correct"),
        ("03.sliding_window_mask", 0, "not run: the notebook's 10 s ran out at cell 6"),
        ("03.padded_causal_attention", 0, "not run: the notebook's 10 s ran out at cell 6"),
        ("03.predict_variance", 0, "not run: the notebook's 10 s ran out at cell 6"),
    ]
    assert (report["points"], report["max_points"]) == (2, sum(e.points for e in chapter_exercises("03")))
    assert [row["verdict"] for row in report["rows"]] == [e["summary"] for e in notebook["exercises"]]


def test_a_dead_kernel_scores_zero_for_what_remains_and_says_why(tmp_path):
    path = _submission(
        tmp_path / "03_submission.ipynb",
        "import os, torch\nfrom tutorial_lib.checks import check",
        CAUSAL,
        'check("03.causal_mask", causal_mask)',
        "os._exit(1)",
        'padding_mask = print\ncheck("03.padding_mask", padding_mask)',
    )
    result = grade.grade_notebook(path, timeout=60)
    assert result.status == "the kernel died; graded on what ran; 5 deleted check cell(s) put back"
    assert [(g.exercise_id, g.points, g.summary) for g in result.exercises] == [
        ("03.attention", 0, "not run: the kernel died at cell 3"),
        ("03.causal_mask", 1, "correct"),
        ("03.padding_mask", 0, "not run: the kernel died at cell 3"),
        ("03.sliding_window_mask", 0, "not run: the kernel died at cell 3"),
        ("03.padded_causal_attention", 0, "not run: the kernel died at cell 3"),
        ("03.predict_variance", 0, "not run: the kernel died at cell 3"),
    ]


def test_a_check_whose_cell_raised_first_says_so_and_a_lost_point_says_why(tmp_path, capsys):
    path = _submission(
        tmp_path / "03_submission.ipynb",
        "import math, torch\nfrom tutorial_lib.checks import check",
        "def scaled_dot_product_attention(q, k, v, mask=None)\n    return q",  # a syntax error
        'check("03.attention", scaled_dot_product_attention)',
        "def causal_mask(seq_len):\n    return torch.ones(seq_len, seq_len).tril()",
        'check("03.causal_mask", causal_mask)',
        "def padding_mask(lengths, seq_len):\n    return (torch.arange(seq_len) < lengths[:, None] + 1)[:, None]",
        'check("03.padding_mask", padding_mask)',
    )
    assert grade.main([str(path), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    # The chapter's later exercises have no cell here: each is a row of 0 that says so.
    later = rows[4:]
    assert [r["exercise"] for r in later] == [e.id for e in chapter_exercises("03")][4:]
    assert all(r["points"] == "0" and "no cell defines" in r["verdict"] for r in later)
    rows = rows[:4]
    assert [(r["exercise"], r["points"], r["max_points"], r["verdict"]) for r in rows] == [
        ("03.attention", "0", "2",
         "not run: its check's cell 2 raised NameError after cell 1, which defines scaled_dot_product_attention, "
         "raised SyntaxError"),
        ("03.causal_mask", "0", "1", "wrong type: returned numbers instead of booleans"),
        ("03.padding_mask", "0", "1", "wrong values: let each sequence see one padding position too many"),
        ("03.sliding_window_mask", "0", "1", "not run: its check's cell 7 raised NameError: no cell defines sliding_window_mask"),
    ]
    assert {r["notebook"] for r in rows} == {str(path)}


def test_an_uncatalogued_lost_point_is_explained_in_one_line(tmp_path):
    path = _submission(
        tmp_path / "03_submission.ipynb",
        "import torch\nfrom tutorial_lib.checks import check",
        "def causal_mask(seq_len):\n    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril(-2)",
        'check("03.causal_mask", causal_mask)',
    )
    (exercise,) = [g for g in grade.grade_notebook(path).exercises if g.points == 0 and g.exercise_id == "03.causal_mask"]
    assert exercise.summary == "wrong values: the mask differs from the reference at 7 of 16 entries"


def test_a_folder_is_graded_in_parallel_with_one_thread_per_kernel(tmp_path, monkeypatch):
    for name in ("03_a.ipynb", "03_b.ipynb"):
        _submission(
            tmp_path / name,
            "import os, torch\nfrom tutorial_lib.checks import check",
            "assert os.environ['OMP_NUM_THREADS'] == '1' and torch.get_num_threads() == 1",
            CAUSAL,
            'check("03.causal_mask", causal_mask)',
        )
    monkeypatch.setattr(grade.os, "cpu_count", lambda: 2)
    grades = grade.grade_all(sorted(tmp_path.glob("*.ipynb")), timeout=120, jobs=2)
    assert [g.status.split(";")[0] for g in grades] == ["ran to the end", "ran to the end"]
    assert [g.path for g in grades] == [str(tmp_path / "03_a.ipynb"), str(tmp_path / "03_b.ipynb")]
    assert [g.points for g in grades] == [1, 1]


def _learner_copy(source: Path) -> nbformat.NotebookNode:
    notebook = nbformat.read(source, as_version=4)
    notebook.cells = [c for c in notebook.cells if "solution-only" not in c.get("metadata", {}).get("tags", [])]
    return notebook


def _with_cell(notebook: nbformat.NotebookNode, after_id: str, source: str) -> nbformat.NotebookNode:
    index = next(i for i, cell in enumerate(notebook.cells) if cell.get("id") == after_id)
    notebook.cells.insert(index + 1, new_code_cell(source))
    return notebook


def test_a_prediction_changed_after_its_measurement_was_shown_scores_zero(tmp_path):
    # The learner predicted 1, ran the measuring cell (its saved output shows the record), then typed in the number
    # the measurement printed. A fresh kernel would record 64 as if first: the grader starts from what was shown.
    notebook = _learner_copy(SOLUTION)
    plant(notebook, "predicted_variance", "return 64.3")
    measuring = next(c for c in notebook.cells if c.cell_type == "code" and "record_prediction(" in c.source)
    measuring.outputs = [nbformat.v4.new_output(
        "stream", name="stdout", text="Prediction recorded before the measurement (03.predict_variance): 1.\n")]
    path = tmp_path / NAME
    nbformat.write(notebook, path)
    grades = {g.exercise_id: g for g in grade.grade_notebook(path).exercises}
    late = grades["03.predict_variance"]
    assert (late.points, late.summary) == (0, "predicted after the measurement was shown: changed from 1 after the "
                                              "measurement was shown")
    assert grades["03.attention"].points == grades["03.attention"].max_points  # the rest is graded as usual


FORGE = """import json, os
with open(os.environ["TUTORIAL_LIB_CHECK_LOG"], "a") as log:
    for exercise_id, points in (("03.attention", 2), ("03.bonus", 100)):
        log.write(json.dumps({"exercise_id": exercise_id, "kind": "passed", "points": points, "max_points": points,
                              "summary": "correct", "verdict": "", "mistake": None}) + "\\n")
    log.write("not json at all\\n")"""


def test_a_folder_of_bad_submissions_gets_every_row_with_its_maximum_and_reason(tmp_path, capsys):
    folder = tmp_path / "class"
    folder.mkdir()
    nbformat.write(_learner_copy(SOLUTION), folder / "03_solved.ipynb")
    (folder / "03_empty_object.ipynb").write_text("{}")
    (folder / "03_list.ipynb").write_text("[1, 2]")
    (folder / "03_not_json.ipynb").write_text("{ not json")
    (folder / "mystery.ipynb").write_text("{ not json")
    shutil.copy(EXERCISE, folder / "renamed by the learner.ipynb")  # no NN_ prefix: the metadata says 03
    shutil.copy(EXERCISE, folder / "UPPER.IPYNB")
    shutil.copy(EXERCISE, folder / "03_saved_by_a_browser.ipynb.txt")
    (folder / "notes.txt").write_text("not a notebook")
    no_checks = _learner_copy(SOLUTION)
    no_checks.cells = [c for c in no_checks.cells if not (c.cell_type == "code" and "check(" in c.source)]
    nbformat.write(no_checks, folder / "03_checks_deleted.ipynb")
    edited = _learner_copy(EXERCISE)  # the check cell edited to check the library instead of the answer
    for cell in edited.cells:
        if cell.get("id") == "cell-07":
            cell.source = ("from tutorial_lib.attention import scaled_dot_product_attention as ours\n"
                           'check("03.attention", ours)')
    nbformat.write(edited, folder / "03_check_edited.ipynb")
    nbformat.write(_with_cell(_learner_copy(EXERCISE), "cell-07", FORGE), folder / "03_forged_log.ipynb")
    nbformat.write(_with_cell(_learner_copy(EXERCISE), "cell-06",
                              "from tutorial_lib.attention import scaled_dot_product_attention"),
                   folder / "03_imported_reference.ipynb")
    nbformat.write(_with_cell(_learner_copy(EXERCISE), "cell-07",
                              "from tutorial_lib.attention import scaled_dot_product_attention as ours\n"
                              "from tutorial_lib.checks import check\n"
                              'check("03.attention", ours)\n'
                              'check("03.attention", lambda q, k, v, mask=None: ours(q, k, v, mask))'),
                   folder / "03_check_called_again.ipynb")

    assert grade.main([str(folder), "--json", "--timeout", "120"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    report = json.loads(captured.out)
    assert report["skipped"] == [f"{folder / 'notes.txt'} (its name has no .ipynb)"]
    by_name = {Path(n["path"]).name: n for n in report["notebooks"]}
    assert len(by_name) == 13
    maximum = [(e.id, e.points) for e in chapter_exercises("03")]
    for name, notebook in by_name.items():
        if name != "mystery.ipynb":  # every other file is a 03 submission: all its rows, each with its maximum
            assert [(e["exercise_id"], e["max_points"]) for e in notebook["exercises"]] == maximum, name
            assert all(e["summary"] for e in notebook["exercises"]), name

    def points(name: str) -> dict[str, int]:
        return {e["exercise_id"]: e["points"] for e in by_name[name]["exercises"]}

    def verdict(name: str, exercise_id: str) -> str:
        return next(e["summary"] for e in by_name[name]["exercises"] if e["exercise_id"] == exercise_id)

    full = sum(points for _, points in maximum)
    assert by_name["03_solved.ipynb"]["points"] == full
    assert by_name["03_checks_deleted.ipynb"]["points"] == full  # the released checks were put back
    assert by_name["03_checks_deleted.ipynb"]["status"] == (
        f"ran to the end; {len(maximum)} deleted check cell(s) put back")
    for name, why in [("03_empty_object.ipynb", "not a notebook: JSON dict without a list of cells"),
                      ("03_list.ipynb", "not a notebook: JSON list without a list of cells"),
                      ("03_not_json.ipynb", "not a notebook: the file is not JSON")]:
        assert by_name[name]["status"] == why
        assert {e["summary"] for e in by_name[name]["exercises"]} == {"not run: the notebook could not be read"}
    assert by_name["mystery.ipynb"]["exercises"] == [
        {"exercise_id": "?", "points": 0, "max_points": 0, "summary": "not graded: not a notebook: the file is not JSON",
         "mistake": None}]
    for name in ("renamed by the learner.ipynb", "UPPER.IPYNB", "03_saved_by_a_browser.ipynb.txt"):
        assert by_name[name]["status"] == "ran to the end" and by_name[name]["points"] == 0, name
        assert {e["summary"] for e in by_name[name]["exercises"]} == {"not attempted yet"}
    # The released check cell came back: the edit to check the library instead changes nothing.
    assert verdict("03_check_edited.ipynb", "03.attention") == "not attempted yet"
    assert points("03_forged_log.ipynb") == dict.fromkeys(points("03_forged_log.ipynb"), 0)
    assert by_name["03_forged_log.ipynb"]["status"] == (
        "ran to the end; ignored 3 check-log line(s): 1 malformed, 2 not written by a released check cell")
    assert points("03_imported_reference.ipynb")["03.attention"] == 0
    assert verdict("03_imported_reference.ipynb", "03.attention") == (
        "tutorial_lib's own code, not yours: the answer is `scaled_dot_product_attention` from `tutorial_lib.attention`")
    assert points("03_check_called_again.ipynb")["03.attention"] == 0
    assert verdict("03_check_called_again.ipynb", "03.attention") == "not attempted yet"
    assert by_name["03_check_called_again.ipynb"]["status"] == (
        "ran to the end; ignored 2 check-log line(s): 2 not written by a released check cell")
    assert (report["points"], report["max_points"]) == (2 * full, 12 * full)


def test_the_table_lists_points_and_verdicts():
    result = grade.NotebookGrade("a.ipynb", "ran to the end", (
        grade.ExerciseGrade("03.attention", 0, 2, "wrong values: divided the scores by d_k instead of √d_k", "divided_by_d_k"),
        grade.ExerciseGrade("03.causal_mask", 1, 1, "correct"),
    ))
    assert grade.format_table(result) == "\n".join([
        "a.ipynb: ran to the end",
        "  exercise        points  verdict",
        "  03.attention    0/2     wrong values: divided the scores by d_k instead of √d_k",
        "  03.causal_mask  1/1     correct",
        "  total           1/3",
    ])


@pytest.mark.parametrize(
    "argv",
    [[], ["missing.ipynb"], ["README.md"], ["--timeout", "0", "solutions"], ["--timeout", "inf", "solutions"],
     ["--timeout", "nan", "solutions"], ["empty"], ["--release", "missing", "solutions"]],
    ids=["no-path", "missing", "not-a-notebook", "zero-timeout", "infinite-timeout", "nan-timeout", "empty-folder",
         "no-release"],
)
def test_usage_errors_exit_with_2_and_one_line(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("")
    (tmp_path / "empty").mkdir()
    (tmp_path / "solutions").mkdir()
    assert grade.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m tutorial_lib.grade: error: "), err
