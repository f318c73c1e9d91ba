"""Chapter 02's checks: answers written as learners write them, right and wrong.

Written independently of the catalogue in ``tutorial_lib/checks/ch02.py``: a mistake must be recognised by what it
does, not by how it is spelt.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tutorial_lib.checks import check, get_exercise

from conftest import check_recorded  # a prediction's answer is recorded before its check, as in a notebook


def table_numpy(n_ctx, d_model, *, swap=False, two=2, start=0, halves=False):
    position = np.arange(start, start + n_ctx)[:, None]
    i = np.arange((d_model + 1) // 2)[None, :]
    angle = position / np.power(10000.0, two * i / d_model)
    first, second = (np.cos(angle), np.sin(angle)) if swap else (np.sin(angle), np.cos(angle))
    if halves:
        out = np.concatenate([first, second], axis=1)[:, :d_model]
    else:
        out = np.empty((n_ctx, 2 * i.shape[1]))
        out[:, 0::2], out[:, 1::2] = first, second
        out = out[:, :d_model]
    return torch.from_numpy(out).float()


def table_by_column(n_ctx, d_model):
    pe = torch.empty(n_ctx, d_model)
    for c in range(d_model):
        angle = torch.arange(n_ctx) / 10000 ** (c / d_model)
        pe[:, c] = torch.sin(angle) if c % 2 == 0 else torch.cos(angle)
    return pe


def rows_right(table, seq_len, offset):
    if table.shape[0] < offset + seq_len:
        raise ValueError("does not fit")
    return table.narrow(0, offset, seq_len)


def rows_no_offset(table, seq_len, offset):
    if table.shape[0] < offset + seq_len:
        raise ValueError("does not fit")
    return table.narrow(0, 0, seq_len)


def rows_to_seq_len(table, seq_len, offset):
    if table.shape[0] < offset + seq_len:
        raise ValueError("does not fit")
    return table[range(offset, seq_len)] if offset < seq_len else table[offset:seq_len]


def rows_one_late(table, seq_len, offset):
    if table.shape[0] < offset + seq_len:
        raise ValueError("does not fit")
    return table[[offset + 1 + j for j in range(seq_len)]] if offset + seq_len < table.shape[0] else table[offset + 1:]


def rows_unchecked(table, seq_len, offset):
    return table[offset:][:seq_len]


def rows_last(table, seq_len, offset):
    if table.shape[0] < offset + seq_len:
        raise ValueError("does not fit")
    return table[offset + seq_len - 1][None]


def embed_right(tokens, weight):
    return torch.nn.functional.embedding(tokens, weight) * weight.size(-1) ** 0.5


LEARNER_MISTAKES = [
    ("02.sinusoidal", lambda n, d: table_numpy(n, d, swap=True), "sin_cos_swapped"),
    ("02.sinusoidal", lambda n, d: table_numpy(n, d, two=1), "exponent_i_over_d"),
    ("02.sinusoidal", table_by_column, "exponent_column_over_d"),
    ("02.sinusoidal", lambda n, d: table_numpy(n, d, halves=True), "halves_concatenated"),
    ("02.sinusoidal", lambda n, d: table_numpy(n, d, start=1), "positions_from_one"),
    ("02.position_rows", rows_no_offset, "offset_ignored"),
    ("02.position_rows", rows_to_seq_len, "end_index_is_seq_len"),
    ("02.position_rows", rows_one_late, "off_by_one"),
    ("02.position_rows", rows_unchecked, "no_length_check"),
    ("02.position_rows", rows_last, "last_row_only"),
    ("02.scaled_embedding", lambda t, w: w[t] * w.shape[-1], "scaled_by_d_model"),
    ("02.scaled_embedding", lambda t, w: torch.nn.functional.embedding(t, w), "not_scaled"),
    ("02.scaled_embedding", lambda t, w: w[t] * len(w) ** 0.5, "scaled_by_sqrt_d_vocab"),
    ("02.scaled_embedding", lambda t, w: w[t] / w.shape[1] ** 0.5, "divided"),
    ("02.scaled_embedding", lambda t, w: w.mul_(math.sqrt(w.shape[1]))[t], "scaled_the_table_in_place"),
]


@pytest.mark.parametrize(("exercise_id", "learner", "mistake"), LEARNER_MISTAKES, ids=[m for _, _, m in LEARNER_MISTAKES])
def test_a_learners_mistake_is_named(exercise_id, learner, mistake, assert_mistake_named):
    assert_mistake_named(exercise_id, learner, mistake)


def test_every_catalogued_mistake_has_a_learner_version_here():
    catalogued = {(e, m.name) for e in ("02.sinusoidal", "02.position_rows", "02.scaled_embedding")
                  for m in get_exercise(e).mistakes}
    assert catalogued == {(e, m) for e, _, m in LEARNER_MISTAKES}


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("02.sinusoidal", lambda n, d: table_numpy(n, d)),
    ("02.position_rows", rows_right),
    ("02.scaled_embedding", embed_right),
])
def test_a_correct_answer_written_differently_passes(exercise_id, answer):
    result = check_recorded(exercise_id, answer)
    assert result.passed, result.verdict


def test_a_window_that_runs_past_the_table_must_be_refused():
    result = check("02.position_rows", rows_unchecked)
    assert "it should raise ValueError" in result.verdict and "but returned a tensor of shape (2, 4)" in result.verdict


# --- the build exercise (02.embed_inputs) and the prediction (02.predict_position_norm) ---------------------------------


def inputs_right(tokens, weight, pe, offset):
    seq = tokens.shape[1]
    if offset + seq > len(pe):
        raise ValueError(f"positions {offset}..{offset + seq - 1} run past the {len(pe)} rows of pe")
    return torch.nn.functional.embedding(tokens, weight) * weight.shape[1] ** 0.5 + pe[offset : offset + seq]


def inputs_scaled_sum(tokens, weight, pe, offset):
    seq = tokens.shape[1]
    if offset + seq > len(pe):
        raise ValueError("too long")
    return (weight[tokens] + pe[offset : offset + seq]) * weight.shape[1] ** 0.5


def inputs_pe_of_tokens(tokens, weight, pe, offset):
    if offset + tokens.shape[1] > len(pe):
        raise ValueError("too long")
    return weight[tokens] * weight.shape[1] ** 0.5 + pe[tokens]


def test_the_build_exercise_passes_an_input_layer_written_differently():
    result = check("02.embed_inputs", inputs_right)
    assert result.passed, result.verdict


@pytest.mark.parametrize(("learner", "mistake"), [(inputs_scaled_sum, "scaled_the_sum"),
                                                  (inputs_pe_of_tokens, "positions_by_token_id")])
def test_a_learners_input_layer_mistake_is_named(learner, mistake, assert_mistake_named):
    assert_mistake_named("02.embed_inputs", learner, mistake)


def test_the_prediction_is_the_square_root_of_half_d_model(predict):
    assert predict("02.predict_position_norm", lambda: 32 ** 0.5).passed
    assert predict("02.predict_position_norm", lambda: 8).mistake == "every_entry_one"


def test_the_position_survives_the_scaled_embedding_only_about_half_the_time(predict):
    from tutorial_lib.checks.ch02 import positions_recovered

    exact, near = positions_recovered()
    assert 0.45 < exact < 0.65 and near > 0.85  # often a neighbour, rarely far off
    assert positions_recovered(scale=False) == (1.0, 1.0)  # GPT-2's small embedding leaves every position readable
    assert predict("02.predict_position_recovered", lambda: 0.5).passed  # the solution's reasoning
    assert predict("02.predict_position_recovered", lambda: 1).mistake == "always_readable"
    assert predict("02.predict_position_recovered", lambda: 1 / 128).mistake == "drowned_to_chance"
    assert predict("02.predict_position_recovered", lambda: 0).mistake == "never_exact"
    assert predict("02.predict_position_recovered", lambda: 0.9).mistake == "counted_neighbours"
