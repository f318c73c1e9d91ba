"""Exercises that teach (the chapter contract): in every chapter 01–15 one build exercise that composes the chapter's
pieces, one predict-then-measure exercise, two folded hints per exercise (a nudge, then the recipe), and no TODO comment
that writes the code for the learner.

The conventions this reads, in ``solutions/NN_*.ipynb`` (the exercises notebooks are generated from them):
- an exercise starts at a markdown heading ``## Exercise N · Title (P points)``; a build exercise's title starts with
  ``Build:``, a predict-then-measure exercise's with ``Predict:``;
- each exercise's markdown holds ``<details><summary>Hint 1 · …</summary> … </details>`` and then the same with
  ``Hint 2 · …`` (folded in Jupyter and in the book);
- a predict exercise is checked by an exercise made by ``tutorial_lib.checks.prediction.predict_number``, after a code
  cell that makes the measurement.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from tutorial_lib.checks import get_exercise
from tutorial_lib.checks.prediction import check_as_recorded

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = [f"{n:02d}" for n in range(1, 16)]
HEADING = re.compile(r"^## Exercise (\d+) · (.+?) \((\d+) points?\)\s*$", re.MULTILINE)
HINT = re.compile(r"<details>\s*<summary>\s*Hint (\d) · [^<]+</summary>(.+?)</details>", re.DOTALL)
CHECK = re.compile(r"""^(?:\w+ = )?check\(\s*["'](\d\d\.\w+)["']""", re.MULTILINE)  # its result kept or not


def _solutions(chapter: str) -> nbformat.NotebookNode:
    (path,) = (ROOT / "solutions").glob(f"{chapter}_*.ipynb")
    return nbformat.read(path, as_version=4)


def _sections(chapter: str) -> list[tuple[str, str, list[str]]]:
    """(title, markdown of the exercise, ids checked in it) per exercise heading, in order."""
    sections: list[tuple[str, str, list[str]]] = []
    for cell in _solutions(chapter).cells:
        heading = HEADING.search(cell.source) if cell.cell_type == "markdown" else None
        if heading:
            sections.append((heading.group(2), "", []))
        if not sections:
            continue
        title, markdown, ids = sections[-1]
        if cell.cell_type == "markdown":
            markdown += cell.source + "\n"
        else:
            ids = ids + CHECK.findall(cell.source)
        sections[-1] = (title, markdown, ids)
    return sections


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_exercise_has_a_nudge_then_a_recipe_folded(chapter):
    sections = _sections(chapter)
    assert sections, f"solutions/{chapter}: no '## Exercise N · Title (P points)' heading"
    for title, markdown, _ids in sections:
        hints = HINT.findall(markdown)
        levels = [level for level, _text in hints]
        assert levels == ["1", "2"], f"solutions/{chapter}, {title!r}: hints {levels}, expected Hint 1 then Hint 2"
        assert all(len(text.strip()) >= 40 for _level, text in hints), f"{title!r}: a hint says almost nothing"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_chapter_has_a_build_and_a_predict_exercise(chapter):
    sections = _sections(chapter)
    build = [(t, ids) for t, _m, ids in sections if t.startswith("Build:")]
    predict = [(t, ids) for t, _m, ids in sections if t.startswith("Predict:")]
    assert build, f"solutions/{chapter}: no exercise titled 'Build: …'"
    assert predict, f"solutions/{chapter}: no exercise titled 'Predict: …'"
    for title, ids in build + predict:
        assert ids, f"solutions/{chapter}, {title!r}: no check(...) cell in the exercise"
    for title, ids in predict:
        assert all(get_exercise(i).on_pass is not None for i in ids), \
            f"solutions/{chapter}, {title!r}: its check is not a prediction (tutorial_lib.checks.prediction)"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_todo_comment_writes_the_code(chapter):
    for index, cell in enumerate(_solutions(chapter).cells):
        if cell.cell_type == "code":
            todo = [line.strip() for line in cell.source.splitlines() if re.match(r"\s*# TODO", line)]
            assert not todo, f"solutions/{chapter} cell {index}: {todo[0]!r} (the hints are in the folded Hint 1/2)"


RECORD = re.compile(r"""^if record_prediction\(\s*["'](\d\d\.\w+)["']\s*,\s*(\w+)\s*\):""", re.MULTILINE)


@pytest.mark.parametrize("chapter", [f"{n:02d}" for n in range(1, 16)])
def test_every_prediction_is_recorded_before_its_measurement(chapter):
    """The measuring cell of each prediction measures inside ``if record_prediction(id, fn):`` (after its imports) and
    its check comes after."""
    cells = [cell for cell in _solutions(chapter).cells if cell.cell_type == "code"]
    recorded = {}
    for index, cell in enumerate(cells):
        guard = RECORD.search(cell.source)
        if guard:
            recorded.setdefault(guard.group(1), index)
    predictions = [i for i in (CHECK.findall(cell.source) for cell in cells) for i in i
                   if get_exercise(i).on_pass is not None]
    assert predictions, f"solutions/{chapter}: no graded prediction"
    for exercise_id in predictions:
        check_cell = next(i for i, cell in enumerate(cells) if exercise_id in CHECK.findall(cell.source))
        assert exercise_id in recorded, f"solutions/{chapter}: no cell measures under if record_prediction({exercise_id!r}, …)"
        assert recorded[exercise_id] < check_cell, f"solutions/{chapter}: {exercise_id} is checked before it is measured"


# Each chapter's graded prediction that is measured by running code (a trained or untrained model, sampled data,
# a tokenizer trained on the corpus, a FLOP count), not a closed form: what each measures.
MEASURED_PREDICTIONS = {
    "01": "01.predict_capitals",  # ids per character of the held-out text in capitals, a 500-merge BPE trained here
    "02": "02.predict_position_recovered",  # positions read back from sampled scaled embeddings plus their encodings
    "03": "03.predict_variance",  # the variance of q·k over sampled vectors at d_k = 64
    "04": "04.predict_flop_ratio",  # FLOPs of 8-head over 1-head attention, counted by FlopCounterMode
    "05": "05.predict_dead_share",  # ReLU units at 0 in an initialised FFN on shifted inputs
    "06": "06.predict_deep_stream",  # the pre-norm stream leaving block 96 of the chapter's model at initialisation
    "07": "07.predict_decoding_flops",  # FLOPs of greedy decoding over a teacher-forced forward, counted
    "08": "08.predict_own_token_share",  # how often the untrained tied character GPT ranks its input first
    "09": "09.predict_initial_loss",  # the untrained character GPT's loss on random characters
    "10": "10.predict_distinct_tokens",  # different tokens among 500 draws of the package's sampler
    "11": "11.predict_no_attention_loss",  # the bigram cross-entropy of the corpus, counted
    "12": "12.predict_rmsnorm_spread",  # the spread of RMSNorm's output on sampled offset inputs
    "13": "13.predict_naive_memory",  # the peak memory of naive attention at 1024 positions, measured
    "14": "14.predict_pairs_without_label",  # pre-training pairs left without a label by the masking
    "15": "15.predict_ring_bytes",  # the bytes the ring all-reduce sends per rank, counted on its messages
}


@pytest.mark.parametrize("chapter", sorted(MEASURED_PREDICTIONS))
def test_a_prediction_that_runs_its_own_measurement_scores_nothing(chapter):
    exercise = get_exercise(MEASURED_PREDICTIONS[chapter])

    def measured_not_predicted():  # the measurement, run by the prediction: the number is right, the work is not done
        return exercise.reference()

    result = check_as_recorded(exercise.id, measured_not_predicted)
    assert result.kind == "calls_the_work" and result.points == 0, result.verdict


def test_a_prediction_that_runs_the_measuring_function_by_name_scores_nothing():
    from tutorial_lib.checks.ch06 import pre_norm_stream_lengths

    def predicted_deep_stream():
        return pre_norm_stream_lengths()[-1].item()

    result = check_as_recorded("06.predict_deep_stream", predicted_deep_stream)
    assert result.kind == "calls_the_work" and result.points == 0
    assert "runs `pre_norm_stream_lengths` from `tutorial_lib.checks.ch06`" in result.verdict


@pytest.mark.parametrize("chapter", sorted(MEASURED_PREDICTIONS))
def test_every_chapter_has_a_measured_prediction_whose_hints_do_not_print_the_answer(chapter):
    exercise_id = MEASURED_PREDICTIONS[chapter]
    exercise = get_exercise(exercise_id)
    assert exercise.on_pass is not None, f"{exercise_id} is not a graded prediction"
    (markdown,) = [markdown for _title, markdown, ids in _sections(chapter) if exercise_id in ids]
    hints = " ".join(text for _level, text in HINT.findall(markdown))
    measured = exercise.reference()
    shown = f"{measured:.3g}"
    assert len(shown) < 3 or shown not in hints, f"{exercise_id}: a hint prints the measurement {shown}"
