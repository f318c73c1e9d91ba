"""The pure functions behind chapter 14's figures: masking statistics, the pre-training curves, what [CLS] reads."""

from __future__ import annotations

import math

import pytest
import torch

from tutorial_lib.attention import padding_mask
from tutorial_lib.models.bert import BERTConfig, BERTForPreTraining
from tutorial_lib.widgets._live import live_views, view_label
from tutorial_lib.widgets.bert import (
    CLS_TARGETS,
    bert_attention,
    cls_attention_shares,
    cls_attention_widget,
    masking_statistics,
    plot_cls_attention,
    plot_masking_statistics,
    plot_pretraining,
)

MAX_WIDTH_INCHES = 7.2  # tests/test_widgets_phone.py: readable at phone width


def _columns(fig) -> int:
    return max(ax.get_subplotspec().get_geometry()[1] for ax in fig.axes if ax.get_subplotspec() is not None)


def _tokens() -> torch.Tensor:
    tokens = torch.randint(5, 40, (32, 20), generator=torch.Generator().manual_seed(0))
    tokens[:, 0], tokens[:, 9], tokens[:, 16], tokens[:, 17:] = 2, 3, 3, 0
    return tokens


def test_masking_statistics_count_what_mask_tokens_does():
    tokens = _tokens()
    stats = masking_statistics(tokens, 4, 40, [0, 1, 2, 3, 4], n_draws=200, seed=0)
    n_ordinary = int((tokens >= 5).sum())
    assert stats.n_ordinary == 200 * n_ordinary and stats.n_special == 200 * (tokens.numel() - n_ordinary)
    assert stats.chosen == stats.shown_mask + stats.shown_random + stats.shown_original
    assert stats.special_chosen == 0 and stats.changed_unchosen == 0
    assert stats.replacements.sum() == stats.shown_random and stats.replacements[:5].sum() == 0
    for name in ("chosen", "mask", "random", "original"):
        assert abs(stats.measured[name] - stats.expected[name]) < 4 * stats.standard_errors[name], name
    assert stats.expected["random"] + stats.expected["original"] == pytest.approx(0.2)
    assert stats.expected["original"] == pytest.approx(0.1 + 0.1 / 35)  # a random draw of the token itself
    with pytest.raises(ValueError, match="n_draws"):
        masking_statistics(tokens, 4, 40, [0, 1, 2, 3, 4], n_draws=0)


def test_the_masking_figure_fits_a_phone():
    fig = plot_masking_statistics(masking_statistics(_tokens(), 4, 40, [0, 1, 2, 3, 4], n_draws=20))
    assert len(fig.axes) == 2 and fig.get_figwidth() <= MAX_WIDTH_INCHES and _columns(fig) == 1


def _record(updates, values) -> dict:
    keys = ("mask_accuracy", "kept_accuracy", "nsp_accuracy")
    return {"metrics": [{"updates": u, **dict.fromkeys(keys, v)} for u, v in zip(updates, values)]}


def test_the_pretraining_figure_draws_every_run_and_the_baselines():
    records = {"a": _record([250, 500], [0.1, 0.2]), "b": _record([250], [0.3])}
    fig = plot_pretraining(records, most_frequent=0.09, nsp_rule=0.57)
    assert len(fig.axes) == 3 and fig.get_figwidth() <= MAX_WIDTH_INCHES and _columns(fig) == 1
    first = fig.axes[0].get_lines()
    assert [list(line.get_xdata()) for line in first[:2]] == [[0, 250, 500], [0, 250]]
    assert [line.get_ydata()[0] for line in fig.axes[2].get_lines()[2:]] == [0.5, 0.57]
    with pytest.raises(ValueError, match="at least one run"):
        plot_pretraining({}, most_frequent=0.1)


def _model_and_batch():
    torch.manual_seed(0)
    model = BERTForPreTraining(BERTConfig(d_vocab=40, n_ctx=24, d_model=16, n_heads=2, n_layers=3, d_ff=32)).eval()
    tokens = _tokens()[:4]
    segments = torch.zeros_like(tokens)
    segments[:, 10:17] = 1  # [CLS] A [SEP] (0-9), B [SEP] (10-16), padding
    lengths = torch.tensor([17, 17, 12, 9])
    tokens[2, 11], tokens[2, 12:], segments[2, 12:] = 3, 0, 0  # B of one token: [SEP] at 11
    tokens[3, 6], tokens[3, 8], tokens[3, 9:] = 3, 3, 0  # A of five tokens, B of one: [SEP]s at 6 and 8
    segments[3], segments[3, 7:9] = 0, 1
    return model, tokens, segments, lengths


def test_bert_attention_is_the_weights_the_model_uses(without_annotation_checks):
    model, tokens, segments, lengths = _model_and_batch()
    weights = bert_attention(model.bert, tokens, segments, lengths)
    assert weights.shape == (4, 3, 2, 20, 20)
    real = padding_mask(lengths, 20)[:, None]  # (batch, 1, 1, key_pos)
    assert torch.allclose(weights.sum(-1), torch.ones(4, 3, 2, 20))
    assert (weights * ~real[:, :, None]).abs().max() == 0  # nothing on the padding
    # The first block's attention output, rebuilt from the weights and the values, is what the block computes.
    block, mask = model.bert.blocks[0], padding_mask(lengths, 20)
    x = model.bert.ln_embed(model.bert.embed(tokens) + model.bert.pos_embed(20) + model.bert.segment_embed(segments))
    v = block.attn.v_proj(x).view(4, 20, 2, 8).transpose(1, 2)
    rebuilt = block.attn.out_proj((weights[:, 0] @ v).transpose(1, 2).reshape(4, 20, 16))
    torch.testing.assert_close(rebuilt, block.attn(x, mask=mask), atol=1e-5, rtol=1e-5)
    assert model.training is False
    with without_annotation_checks(), pytest.raises(ValueError, match="tokens and segments"):
        bert_attention(model.bert, tokens, segments[:, :5], lengths)


def test_cls_attention_shares_split_the_pair_into_its_parts():
    model, tokens, segments, lengths = _model_and_batch()
    # An attention that puts all of [CLS]'s weight on one position: the share lands on that position's part.
    weights = torch.zeros(4, 1, 1, 20, 20)
    weights[:, 0, 0, 0, 10] = 1.0  # B's first token in pairs 0 to 2 (their first [SEP] is at 9); padding in pair 3
    shares, even = cls_attention_shares(weights, segments, lengths)
    assert shares.shape == (1, len(CLS_TARGETS)) and even.shape == (len(CLS_TARGETS),)
    parts = dict(zip(CLS_TARGETS, shares[0].tolist()))
    assert parts["start of B"] == pytest.approx(0.75) and sum(parts.values()) == pytest.approx(0.75)
    assert even.sum() == pytest.approx(1.0)
    real = bert_attention(model.bert, tokens, segments, lengths)
    assert torch.allclose(cls_attention_shares(real, segments, lengths)[0].sum(-1), torch.ones(3))
    # the even share of a part is its number of tokens over the length: [CLS] is one token of 17, 17, 12 and 9
    assert even[0].item() == pytest.approx((2 / 17 + 1 / 12 + 1 / 9) / 4)


def test_the_cls_figure_and_widget_draw():
    fig = plot_cls_attention(torch.rand(3, 5), ["[CLS]", "a", "[SEP]", "b", "[SEP]"], title="x")
    assert fig.get_figwidth() <= MAX_WIDTH_INCHES
    with pytest.raises(ValueError, match="labels must name the 5 tokens"):
        plot_cls_attention(torch.rand(3, 5), ["a"])
    weights = torch.rand(2, 3, 2, 5, 5)
    box = cls_attention_widget(weights, [["a"] * 5, ["b"] * 4], ["first", "second"])
    (pair, head), views = live_views(box)
    assert (pair.value, head.value) == (0, "mean") and list(head.options) == ["mean", "0", "1"]
    assert len(views) == 2 * 3
    pictures = {view.children[1].value for view in views.values()}
    assert len(pictures) == len(views) and all('src="data:image/png;base64,' in p for p in pictures)
    assert view_label(views[(1, 2)]) == "pair = 2 · head = 1"
    assert 'alt="Plot: second, head 1 (x axis: token the [CLS] query reads, y axis: layer)"' in views[(1, 2)].children[1].value
    with pytest.raises(ValueError, match="one entry per pair"):
        cls_attention_widget(weights, [["a"] * 5], ["first", "second"])
    assert math.isfinite(float(weights.sum()))
