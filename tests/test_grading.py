"""python -m tutorial_lib.grade: solutions score full marks, fresh exercises score zero, planted mistakes are named.

Each graded notebook runs in a fresh kernel (a few seconds), so mistakes of different exercises share a notebook.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from tutorial_lib import grade
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
N_COPIES = max(len(mistakes) for mistakes in PLANTED.values())


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


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("*.ipynb")), ids=lambda path: path.name)
def test_the_solutions_score_full_marks(path):
    result = grade.grade_notebook(path)
    assert result.status == "ran to the end"
    assert [(g.exercise_id, g.points, g.summary) for g in result.exercises] == [
        (exercise.id, exercise.points, "correct") for exercise in chapter_exercises(path.name[:2])
    ]


@pytest.mark.parametrize("path", sorted((ROOT / "exercises").glob("*.ipynb")), ids=lambda path: path.name)
def test_every_fresh_exercises_notebook_runs_and_scores_zero(path):
    result = grade.grade_notebook(path)
    assert result.status == "ran to the end"
    assert [(g.exercise_id, g.points, g.summary) for g in result.exercises] == [
        (exercise.id, 0, "not attempted yet") for exercise in chapter_exercises(path.name[:2])
    ]


def test_a_fresh_exercise_notebook_runs_and_scores_zero(capsys):
    assert grade.main([str(EXERCISE)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == f"{EXERCISE}: ran to the end"
    assert out[-1] == "score: 0/5"
    for exercise_id, max_points in [("03.attention", 2), ("03.causal_mask", 1), ("03.padding_mask", 1)]:
        assert any(line.split() == [exercise_id, f"0/{max_points}", "not", "attempted", "yet"] for line in out), out


@pytest.mark.parametrize("copy", range(N_COPIES))
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
        else:
            assert exercise.points == exercise.max_points, table


def test_crashes_timeouts_and_missing_checks_are_graded_on_what_ran(tmp_path, capsys):
    path = tmp_path / "03_submission.ipynb"
    nbformat.write(new_notebook(cells=[
        new_markdown_cell("A submission that crashes, then hangs."),
        new_code_cell("import torch\nfrom tutorial_lib.checks import check"),
        new_code_cell('check("03.causal_mask", lambda seq_len: torch.ones(seq_len, seq_len, dtype=torch.bool).tril())'),
        new_code_cell("1 / 0"),
        new_code_cell('check("03.padding_mask", lambda lengths, seq_len: (torch.arange(seq_len) < lengths[:, None])[:, None])'),
        new_code_cell("import time\ntime.sleep(120)"),
        new_code_cell('check("03.sliding_window_mask", print)'),
    ]), path)
    assert grade.main([str(path), "--timeout", "10", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (notebook,) = report["notebooks"]
    assert notebook["status"] == "timed out after 10 s; graded on what ran"
    assert [(e["exercise_id"], e["points"], e["summary"]) for e in notebook["exercises"]] == [
        ("03.attention", 0, "not run: the notebook has no check of it"),
        ("03.causal_mask", 1, "correct"),
        ("03.padding_mask", 1, "correct"),
        ("03.sliding_window_mask", 0, "not run: the notebook's 10 s ran out at cell 5"),
    ]
    assert (report["points"], report["max_points"]) == (2, 5)
    assert [row["verdict"] for row in report["rows"]] == [e["summary"] for e in notebook["exercises"]]


def test_a_dead_kernel_scores_zero_for_what_remains_and_says_why(tmp_path):
    path = tmp_path / "03_submission.ipynb"
    nbformat.write(new_notebook(cells=[
        new_code_cell("import os, torch\nfrom tutorial_lib.checks import check"),
        new_code_cell('check("03.causal_mask", lambda seq_len: torch.ones(seq_len, seq_len, dtype=torch.bool).tril())'),
        new_code_cell("os._exit(1)"),
        new_code_cell('check("03.padding_mask", print)'),
        new_code_cell('check("03.attention", undefined_name)'),
    ]), path)
    result = grade.grade_notebook(path, timeout=60)
    assert result.status == "the kernel died; graded on what ran"
    assert [(g.exercise_id, g.points, g.summary) for g in result.exercises] == [
        ("03.attention", 0, "not run: the kernel died at cell 2"),
        ("03.causal_mask", 1, "correct"),
        ("03.padding_mask", 0, "not run: the kernel died at cell 2"),
        ("03.sliding_window_mask", 0, "not run: the notebook has no check of it"),
    ]


def test_a_check_whose_cell_raised_first_says_so_and_a_lost_point_says_why(tmp_path, capsys):
    path = tmp_path / "03_submission.ipynb"
    nbformat.write(new_notebook(cells=[
        new_code_cell("import math, torch\nfrom tutorial_lib.checks import check"),
        new_code_cell('check("03.attention", undefined_name)'),
        new_code_cell('check("03.causal_mask", lambda seq_len: torch.ones(seq_len, seq_len).tril())'),
        new_code_cell('check("03.padding_mask", lambda lengths, seq_len: (torch.arange(seq_len) < lengths[:, None] + 1)[:, None])'),
    ]), path)
    assert grade.main([str(path), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["exercise"], r["points"], r["max_points"], r["verdict"]) for r in rows] == [
        ("03.attention", "0", "2", "not run: its check's cell 1 raised NameError"),
        ("03.causal_mask", "0", "1", "wrong type: returned numbers instead of booleans"),
        ("03.padding_mask", "0", "1", "wrong values: let each sequence see one padding position too many"),
        ("03.sliding_window_mask", "0", "1", "not run: the notebook has no check of it"),
    ]
    assert {r["notebook"] for r in rows} == {str(path)}


def test_an_uncatalogued_lost_point_is_explained_in_one_line(tmp_path):
    path = tmp_path / "03_submission.ipynb"
    nbformat.write(new_notebook(cells=[
        new_code_cell("import torch\nfrom tutorial_lib.checks import check"),
        new_code_cell('check("03.causal_mask", lambda seq_len: torch.ones(seq_len, seq_len, dtype=torch.bool).tril(-2))'),
    ]), path)
    (exercise,) = [g for g in grade.grade_notebook(path).exercises if g.points == 0 and g.exercise_id == "03.causal_mask"]
    assert exercise.summary == "wrong values: the mask differs from the reference at 7 of 16 entries"


def test_a_folder_is_graded_in_parallel_with_one_thread_per_kernel(tmp_path, monkeypatch):
    for name in ("03_a.ipynb", "03_b.ipynb"):
        nbformat.write(new_notebook(cells=[
            new_code_cell("import os, torch\nfrom tutorial_lib.checks import check"),
            new_code_cell("assert os.environ['OMP_NUM_THREADS'] == '1' and torch.get_num_threads() == 1"),
            new_code_cell('check("03.causal_mask", lambda seq_len: torch.ones(seq_len, seq_len, dtype=torch.bool).tril())'),
        ]), tmp_path / name)
    monkeypatch.setattr(grade.os, "cpu_count", lambda: 2)
    grades = grade.grade_all(sorted(tmp_path.glob("*.ipynb")), timeout=120, jobs=2)
    assert [g.status for g in grades] == ["ran to the end", "ran to the end"]
    assert [g.path for g in grades] == [str(tmp_path / "03_a.ipynb"), str(tmp_path / "03_b.ipynb")]
    assert [g.points for g in grades] == [1, 1]


def test_a_folder_is_graded_notebook_by_notebook_even_when_one_is_unreadable(tmp_path, capsys):
    shutil.copy(EXERCISE, tmp_path / NAME)
    (tmp_path / "03_corrupt.ipynb").write_text("{ not json")
    (tmp_path / "notes.txt").write_text("not a notebook")
    assert grade.main([str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    corrupt, exercise = report["notebooks"]
    assert corrupt["path"] == str(tmp_path / "03_corrupt.ipynb") and exercise["path"] == str(tmp_path / NAME)
    assert corrupt["status"].startswith("could not read the notebook")
    assert [e["summary"] for e in corrupt["exercises"]] == ["not run: the notebook could not be read"] * 4
    assert exercise["status"] == "ran to the end"
    assert (report["points"], report["max_points"]) == (0, 10)


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
    [[], ["missing.ipynb"], ["README.md"], ["--timeout", "0", "solutions"], ["empty"]],
    ids=["no-path", "missing", "not-a-notebook", "zero-timeout", "empty-folder"],
)
def test_usage_errors_exit_with_2(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("")
    (tmp_path / "empty").mkdir()
    (tmp_path / "solutions").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        grade.main(argv)
    assert exit_info.value.code == 2
