"""The pure functions behind chapter 01's and 02's figures and widgets."""

from __future__ import annotations

import pytest
import torch

from tutorial_lib.embeddings import sinusoidal_positional_encoding
from tutorial_lib.tokenizers import BPETokenizer
from tutorial_lib.widgets._live import live_views, view_label
from tutorial_lib.widgets.bpe import (
    bpe_step_widget,
    merge_step_view,
    merge_trace,
    plot_merge_trace,
    plot_tokens_per_character,
    show_token,
)
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


def _pictures(views) -> set[str]:
    """The distinct pictures of a live widget's views (each an <img> with its PNG inline)."""
    pictures = {view.children[1].value for view in views.values()}
    assert all('src="data:image/png;base64,' in p for p in pictures)
    return pictures


def test_the_bpe_figures_and_widget_draw():
    assert plot_merge_trace(merge_trace(MERGES, "hugs"), current=1).axes
    widget = bpe_step_widget(MERGES, "hugs")
    (step,), views = live_views(widget)
    assert step.value == 3 and len(views) == 4  # the bytes and three merges, starting at the last step
    assert len(_pictures(views)) == 4  # each step its own picture
    assert view_label(views[(1,)]) == "step = 1 (merge #0)" and view_label(views[(0,)]) == "step = 0 (bytes)"
    assert 'alt="Plot: hugs: 3 merge(s) turn 4 bytes into 1 token(s), hugs"' in views[(3,)].children[1].value
    with pytest.raises(ValueError, match="word must be a non-empty string"):
        bpe_step_widget(MERGES, "")
    word = bytes(range(65, 115)).decode()  # 50 different bytes, merged left to right: 49 merges
    with pytest.raises(ValueError, match="word must take at most 47 merges"):
        bpe_step_widget([(word[:i].encode(), word[i].encode()) for i in range(1, 50)], word)
    with pytest.raises(ValueError, match="step must be an int"):
        merge_step_view(merge_trace(MERGES, "hugs"), 4)
    assert plot_tokens_per_character([256, 300], [1.0, 0.8], pretokens_per_character=0.2).axes
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
    (base,), views = live_views(widget)
    assert base.value == 10000.0 and len(views) == len(base.options) == 5
    assert len(_pictures(views)) == 5  # each base its own picture
    assert view_label(views[(0,)]) == "base = 10"
    assert "cosine similarity of position 3" in views[(0,)].children[1].value  # in the alt text
    for kwargs, argument in (({"base": 50.0}, "base"), ({"position": 25}, "position"), ({"d_model": 7}, "d_model")):
        with pytest.raises(ValueError, match=f"{argument} must"):
            positions_widget(**{"position": 3, "n_ctx": 20, **kwargs})
