"""The pure functions behind chapter 01's and 02's figures and widgets."""

from __future__ import annotations

import pytest
import torch

from tutorial_lib.embeddings import sinusoidal_positional_encoding
from tutorial_lib.tokenizers import BPETokenizer
from tutorial_lib.widgets.bpe import bpe_step_widget, merge_trace, plot_merge_trace, plot_tokens_per_character, show_token
from tutorial_lib.widgets.positions import (
    plot_pe_heatmap,
    plot_position_similarity,
    position_similarity,
    positions_widget,
)

MERGES = [(b"u", b"g"), (b"h", b"ug"), (b"hug", b"s")]


def test_a_merge_trace_replays_the_encoder_step_by_step():
    trace = merge_trace(MERGES, "hugs")
    assert [step.tokens for step in trace] == [(b"h", b"u", b"g", b"s"), (b"h", b"ug", b"s"), (b"hug", b"s"), (b"hugs",)]
    assert [step.rank for step in trace] == [None, 0, 1, 2]
    tokenizer = BPETokenizer(MERGES)
    assert [tokenizer.vocab[i] for i in tokenizer.encode("hugs")] == list(trace[-1].tokens)


def test_a_merge_trace_stops_when_no_merge_applies_and_refuses_an_empty_word():
    assert len(merge_trace(MERGES, "xyz")) == 1
    with pytest.raises(ValueError, match="word must be a non-empty string"):
        merge_trace(MERGES, "")


def test_tokens_are_shown_readably():
    assert show_token(b" the\n") == "␣the↵" and show_token("é".encode()[:1]) == "<c3>"


def test_the_bpe_figures_and_widget_draw():
    assert plot_merge_trace(merge_trace(MERGES, "hugs"), current=1).axes
    widget = bpe_step_widget(MERGES, "hugs")
    text, step, image = widget.children
    assert step.max == 3 and step.value == 3 and image.value[:4] == b"\x89PNG"
    text.value = "hug"
    assert step.max == 2 and step.value == 0
    assert plot_tokens_per_character([256, 300], [1.0, 0.8], words_per_character=0.2).axes
    with pytest.raises(ValueError, match="equal length"):
        plot_tokens_per_character([256], [1.0, 0.8])


def test_position_similarity_is_a_function_of_the_distance():
    similarity = position_similarity(60, 32)
    assert torch.allclose(similarity.diagonal(), torch.ones(60), atol=1e-6)
    for k in (1, 5, 30):
        diagonal = similarity.diagonal(offset=k)
        assert (diagonal.max() - diagonal.min()) < 1e-5
    pe = sinusoidal_positional_encoding(60, 32)
    expected = torch.nn.functional.cosine_similarity(pe[10][None], pe, dim=-1)
    assert torch.allclose(similarity[10], expected, atol=1e-6)


def test_the_position_figures_and_widget_draw():
    assert plot_pe_heatmap(20, 8).axes and plot_position_similarity((2, 5), n_ctx=20, d_model=8).axes
    with pytest.raises(ValueError, match="positions must be non-empty"):
        plot_position_similarity((25,), n_ctx=20)
    widget = positions_widget(position=3, d_model=16, n_ctx=20)
    position, d_model, base, image = widget.children
    before = image.value
    base.value = 100.0
    assert image.value != before and image.value[:4] == b"\x89PNG"
