"""Chapter 07's figures: the label-smoothed target and the decoder's cross-attention maps."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from tutorial_lib.data.dates import DateVocab, encode_pairs, make_date_pairs
from tutorial_lib.models.transformer import Transformer, TransformerConfig
from tutorial_lib.widgets._live import live_views, view_label
from tutorial_lib.widgets.seq2seq import (
    cross_attention_view,
    cross_attention_weights,
    cross_attention_widget,
    plot_cross_attention,
    plot_label_smoothing,
    plot_training_history,
    smoothed_loss_curve,
    smoothed_target,
)

VOCAB = DateVocab()


def test_the_smoothed_target_is_pytorchs():
    """The cross-entropy against our target distribution is F.cross_entropy(label_smoothing=ε)."""
    logits = torch.randn(7, 11, dtype=torch.float64)
    targets = torch.randint(0, 11, (7,))
    ours = torch.stack([-(smoothed_target(int(t), 11, 0.2) * logits[i].log_softmax(-1)).sum() for i, t in enumerate(targets)])
    torch.testing.assert_close(ours.mean(), F.cross_entropy(logits, targets, label_smoothing=0.2))
    assert smoothed_target(3, 11, 0.2).sum().item() == pytest.approx(1.0)


def test_the_smoothed_loss_is_smallest_at_the_smoothed_target():
    p = torch.linspace(0.5, 1 - 1e-9, 200_001, dtype=torch.float64)
    curve = smoothed_loss_curve(p, 70, 0.1)
    assert p[curve.argmin()].item() == pytest.approx(1 - 0.1 + 0.1 / 70, abs=1e-5)
    without = smoothed_loss_curve(p, 70, 0.0)
    assert (without.diff() < 0).all() and without[-1] < 1e-8  # no minimum short of certainty


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"target": 11, "d_vocab": 11, "smoothing": 0.1}, r"target must be a token id in \[0, d_vocab=11\)"),
    ({"target": 0, "d_vocab": 1, "smoothing": 0.1}, "d_vocab must be an int >= 2"),
    ({"target": 0, "d_vocab": 5, "smoothing": 1.0}, r"smoothing must be in \[0, 1\)"),
])
def test_smoothed_target_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        smoothed_target(**kwargs)


def test_plot_label_smoothing_draws_two_stacked_panels():
    fig = plot_label_smoothing(70, 0.1)
    assert isinstance(fig, Figure) and len(fig.axes) == 2


@pytest.fixture(scope="module")
def model_and_batch():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_vocab=VOCAB.d_vocab, n_ctx=32, d_model=32, n_heads=4, n_layers=2, d_ff=64, dropout=0.3)
    model = Transformer(cfg)
    batch = encode_pairs(make_date_pairs(4, seed=1), VOCAB)
    return model, batch


def test_cross_attention_weights_come_with_the_models_own_logits(model_and_batch):
    model, batch = model_and_batch
    model.train()  # the function switches to eval mode (dropout 0.3 would change the logits) and back
    logits, maps = cross_attention_weights(model, batch.src, batch.tgt_in, batch.src_lengths)
    assert model.training
    with torch.no_grad():
        expected = model.eval()(batch.src, batch.tgt_in, src_lengths=batch.src_lengths)
    model.train()
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    assert maps.shape == (2, 4, 4, batch.tgt_in.shape[1], batch.src.shape[1])
    torch.testing.assert_close(maps.sum(-1), torch.ones(maps.shape[:-1]))
    for row, length in enumerate(batch.src_lengths.tolist()):  # no weight on the source's padding
        assert (maps[:, row, :, :, length:] == 0).all()


def test_plot_cross_attention_stacks_one_map_per_example():
    maps = [torch.softmax(torch.randn(11, 14), -1), torch.softmax(torch.randn(11, 9), -1)]
    fig = plot_cross_attention(maps, ["3 March 1997xx", "3/3/1997"[:8] + "x"], [list("1997-03-03") + ["<eos>"]] * 2,
                               ["a", "b"])
    assert isinstance(fig, Figure) and len(fig.axes) == 3  # two maps and the colour bar
    with pytest.raises(ValueError, match="maps, sources and outputs must be non-empty and of one length"):
        plot_cross_attention(maps, ["x"], ["y"])


def test_cross_attention_widget_draws_every_state_and_reports_bad_input(model_and_batch):
    model, _ = model_and_batch
    box = cross_attention_widget(model.eval(), ["3 March 1997", "1/2/2003"], layer=0, head=2)
    (source, head), views = live_views(box)
    assert (source.value, head.value) == ("3 March 1997", 2) and len(views) == 2 * 5  # the mean and 4 heads
    pictures = {view.children[1].value for view in views.values()}
    assert len(pictures) == len(views) and all('src="data:image/png;base64,' in p for p in pictures)  # each its own
    assert view_label(views[(1, 0)]) == "source = 1/2/2003 · head = mean"
    assert "1/2/2003 → " in views[(1, 0)].children[1].value and "layer 1, mean of the heads" in views[(1, 0)].children[1].value
    for texts, message in ((["3 March 1997!"], "outside the date vocabulary"), ([], "texts must hold 1 to 4 dates"),
                           (["1/2/2003"] * 2, "texts must hold different dates")):
        with pytest.raises(ValueError, match=message):
            cross_attention_widget(model, texts)
    with pytest.raises(ValueError, match=r"head must be -1 \(the mean\) or an int in \[0, 3\]"):
        cross_attention_widget(model, ["1/2/2003"], head=4)
    with pytest.raises(ValueError, match=r"layer must be an int in \[-2, 1\]"):
        cross_attention_view(model, "1/2/2003", layer=2)


def test_plot_training_history_draws_losses_above_the_rate():
    history = {"steps": [0, 1, 2, 3], "train_loss": [3.0, 2.0, 1.5, 1.2], "lr": [1e-4, 2e-4, 3e-4, 2.5e-4],
               "eval_steps": [2, 4], "val_loss": [1.8, 1.1]}
    fig = plot_training_history(history, floor=0.74)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    with pytest.raises(ValueError, match="history must hold 'val_loss'"):
        plot_training_history({k: v for k, v in history.items() if k != "val_loss"})
