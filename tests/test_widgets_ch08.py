"""Chapter 08's widgets: the residual stream's size at initialisation and the parameter split of a GPT."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from matplotlib.figure import Figure
from torch import nn

from tutorial_lib.counting import count_parameters
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.widgets._live import live_views, view_label
from tutorial_lib.widgets.parameter_split import KINDS, parameters_by_kind, plot_parameter_split
from tutorial_lib.widgets.residual_growth import (
    WIDGET_DEPTHS,
    WIDGET_WIDTHS,
    depth_sweep,
    final_stds,
    plot_residual_growth,
    residual_growth,
    residual_growth_widget,
    residual_stream_stds,
)

TINY = GPTConfig(d_vocab=50, n_ctx=16, d_model=32, n_heads=4, n_layers=3)


# --- the residual stream --------------------------------------------------------------------------------------------


def test_stds_are_those_of_the_stream_between_the_blocks():
    model = GPT(TINY).eval()
    tokens = torch.randint(0, TINY.d_vocab, (2, 12))
    with torch.no_grad():
        x = model.embed(tokens) + model.pos_embed(12)
        expected = [x.std()]
        for block in model.blocks:
            x = block(x, causal=True)
            expected.append(x.std())
    torch.testing.assert_close(residual_stream_stds(model, tokens), torch.stack(expected))


def test_the_hooks_are_removed_even_when_the_forward_fails():
    model = GPT(TINY).eval()
    with pytest.raises(ValueError, match="n_ctx"):
        residual_stream_stds(model, torch.zeros(1, TINY.n_ctx + 1, dtype=torch.long))
    assert not model.blocks[0]._forward_pre_hooks
    assert not any(block._forward_hooks for block in model.blocks)


def test_residual_growth_is_seeded_and_leaves_the_global_random_state_alone():
    state = torch.random.get_rng_state()
    first = residual_growth(4, scale_residual=True, d_model=32, seq_len=16)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert first.shape == (5,)
    torch.testing.assert_close(residual_growth(4, scale_residual=True, d_model=32, seq_len=16), first, rtol=0, atol=0)
    assert not torch.equal(residual_growth(4, scale_residual=True, d_model=32, seq_len=16, seed=1), first)


def test_both_initialisations_start_from_the_same_embeddings():
    scaled = residual_growth(3, scale_residual=True, d_model=32, seq_len=16)
    unscaled = residual_growth(3, scale_residual=False, d_model=32, seq_len=16)
    assert scaled[0] == unscaled[0]
    assert scaled[0].item() == pytest.approx(0.02 * math.sqrt(2), rel=0.1)  # token + position, each std 0.02


def test_scaling_makes_the_last_std_independent_of_depth_and_its_absence_grows_it_like_sqrt_depth():
    growth = depth_sweep((2, 8, 32), d_model=64, seq_len=32)
    scaled, unscaled = final_stds(growth, scale_residual=True), final_stds(growth, scale_residual=False)
    assert list(scaled) == list(unscaled) == [2, 8, 32]
    assert max(scaled.values()) / min(scaled.values()) < 1.1
    # Var = Var(embeddings) + 2·n_layers·v: √16 = 4 from 2 to 32 layers once the branches dominate.
    assert 3 < unscaled[32] / unscaled[2] < 5
    assert all(unscaled[n] > scaled[n] for n in (2, 8, 32))


@pytest.mark.parametrize("kwargs", [{"n_layers": 0}, {"n_layers": 2.0}, {"n_layers": 2, "batch": 0}])
def test_residual_growth_rejects_bad_sizes(kwargs):
    with pytest.raises(ValueError, match="n_layers|batch"):
        inspect.unwrap(residual_growth)(**kwargs, scale_residual=True)  # unwrapped: past jaxtyping's own int check


def test_plot_residual_growth_draws_two_panels_and_needs_both_curves():
    growth = depth_sweep((1, 2), d_model=32, seq_len=8)
    fig = plot_residual_growth(growth)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    left, right = fig.axes
    assert len(left.lines) == 2 and len(left.lines[0].get_xdata()) == 3  # embeddings + 2 blocks
    assert [len(line.get_xdata()) for line in right.lines] == [2, 2, 2]  # scaled, unscaled, the √depth guide
    with pytest.raises(ValueError, match="with and without"):
        plot_residual_growth({key: value for key, value in growth.items() if key != (2, False)})


def test_the_widget_draws_every_depth_and_width_for_the_browser():
    widget = residual_growth_widget(n_layers=48)
    controls, views = live_views(widget)
    width, depth = controls
    assert (width.value, depth.value) == (128, 48)
    assert list(width.options) == list(WIDGET_WIDTHS) and list(depth.options) == list(WIDGET_DEPTHS)
    assert len(views) == len(WIDGET_WIDTHS) * len(WIDGET_DEPTHS)
    pictures = {view.children[1].value for view in views.values()}
    assert len(pictures) == len(views) and all('src="data:image/png;base64,' in p for p in pictures)
    assert view_label(views[(1, 5)]) == "d_model = 128 · n_layers = 48"
    assert 'alt="Plot: n_layers = 48, d_model = 128 (x axis: after block' in views[(1, 5)].children[1].value
    with pytest.raises(ValueError, match="n_layers"):
        residual_growth_widget(n_layers=49)
    with pytest.raises(ValueError, match="d_model"):
        residual_growth_widget(n_layers=48, d_model=100)


# --- the parameter split ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tied", [True, False])
def test_parameters_by_kind_matches_the_architecture(tied):
    cfg = TINY.replace(tie_embeddings=tied)
    split = parameters_by_kind(GPT(cfg))
    d, n = cfg.d_model, cfg.n_layers
    assert list(split) == list(KINDS)
    assert split == {
        "attention": n * (4 * d * d + 4 * d),
        "feed-forward": n * (8 * d * d + 5 * d),
        "norms": (2 * n + 1) * 2 * d,
        "position embedding": cfg.n_ctx * d,
        "token embedding": cfg.d_vocab * d,
        "unembedding": 0 if tied else cfg.d_vocab * d,
    }
    assert sum(split.values()) == count_parameters(GPT(cfg))


def test_parameters_by_kind_works_on_the_meta_device_and_refuses_other_models():
    with torch.device("meta"):
        model = GPT(GPTConfig.gpt2("small"))
    assert sum(parameters_by_kind(model).values()) == 124_439_808
    with pytest.raises(ValueError, match="'0.weight' is not one of a GPT's"):
        parameters_by_kind(nn.Sequential(nn.Linear(2, 2)))


def test_plot_parameter_split_stacks_the_kinds_each_model_has():
    splits = {name: parameters_by_kind(GPT(TINY.replace(tie_embeddings=name == "tied"))) for name in ("tied", "untied")}
    matrices = dict.fromkeys(splits, 12 * TINY.n_layers * TINY.d_model**2)
    fig = plot_parameter_split(splits, matrices)
    (ax,) = fig.axes
    assert [container.get_label() for container in ax.containers] == list(KINDS)  # the unembedding only untied
    for x in range(2):  # every bar reaches 1: shares of its own total
        assert sum(container.patches[x].get_height() for container in ax.containers) == pytest.approx(1.0)
    assert len(ax.texts) == 2
    with pytest.raises(ValueError, match="at least one"):
        plot_parameter_split({})
