"""The pure functions behind chapter 05's activation widget and chapter 06's initialisation statistics."""

from __future__ import annotations

import math

import pytest
import torch

from tutorial_lib.widgets._live import live_views, view_label
from tutorial_lib.widgets.activations import ACTIVATION_NAMES, activation_curves, activation_widget, plot_activations
from tutorial_lib.widgets.norms_at_init import (
    ARRANGEMENTS,
    DEPTH_CHOICES,
    depth_profiles,
    norms_at_init,
    norms_at_init_widget,
    plot_norms_at_init,
)


def test_activation_curves_match_known_values_and_slopes():
    curves = activation_curves(n_points=9, x_max=4.0)  # the grid -4, -3, ..., 4
    relu, gelu, silu = curves["ReLU"], curves["GELU (exact)"], curves["SiLU"]
    assert relu.x.tolist() == [-4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0]
    assert relu.value.tolist() == [0, 0, 0, 0, 0, 1, 2, 3, 4] and relu.slope.tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    phi = 0.5 * (1 + math.erf(1 / math.sqrt(2)))  # Φ(1)
    assert gelu.value[5].item() == pytest.approx(phi)
    assert gelu.slope[5].item() == pytest.approx(phi + math.exp(-0.5) / math.sqrt(2 * math.pi))  # Φ(x) + x·φ(x)
    sigma = 1 / (1 + math.exp(-1))
    assert silu.slope[5].item() == pytest.approx(sigma * (1 + 1 * (1 - sigma)))
    gate = activation_curves(["SwiGLU gate"], n_points=9, gate_value=-2.0)["SwiGLU gate"]
    assert torch.allclose(gate.value, -2.0 * silu.value)


def test_activation_curves_refuse_bad_input():
    with pytest.raises(ValueError, match="names must be"):
        activation_curves(["Swish"])
    with pytest.raises(ValueError, match="names must be"):
        activation_curves([])
    with pytest.raises(ValueError, match="x_max must be > 0"):
        activation_curves(x_max=0)
    with pytest.raises(ValueError, match="n_points must be an int >= 2"):
        activation_curves(n_points=1)


def _pictures(views) -> set[str]:
    """The distinct pictures of a live widget's views (each an <img> with its PNG inline)."""
    pictures = {view.children[1].value for view in views.values()}
    assert all('src="data:image/png;base64,' in p for p in pictures)
    return pictures


def test_the_activation_figure_and_widget_draw():
    assert len(plot_activations(ACTIVATION_NAMES).axes) == 2
    (gate,), views = live_views(activation_widget(("ReLU", "SwiGLU gate"), gate_value=-1.0))
    assert gate.description == "gate: b" and gate.value == -1.0 and len(views) == len(gate.options) == 5
    assert len(_pictures(views)) == 5  # each value of b its own picture
    assert view_label(views[(3,)]) == "gate: b = 1"
    (x_range,), views = live_views(activation_widget(["ReLU"]))  # no gate drawn: the range is the control
    assert x_range.value == 4.0 and len(_pictures(views)) == len(views) == 3
    assert view_label(views[(2,)]) == "x range ± = 8"
    for kwargs, message in ((dict(names=["Swish"]), "names must be"), (dict(gate_value=0.3), "gate_value must be one of"),
                            (dict(names=["ReLU"], x_max=3.0), "x_max must be one of")):
        with pytest.raises(ValueError, match=message):
            activation_widget(**kwargs)


def test_norms_at_init_has_one_entry_per_block_and_is_seeded():
    stats = norms_at_init("pre-norm", n_layers=3, batch=2)
    assert stats.activation.shape == stats.gradient.shape == stats.similarity.shape == (3,)
    assert abs(stats.loss - math.log(65)) < 1.0  # random targets: about ln(vocabulary) whatever the arrangement
    again = norms_at_init("pre-norm", n_layers=3, batch=2)
    assert torch.equal(stats.gradient, again.gradient) and torch.equal(stats.activation, again.activation)
    state = torch.random.get_rng_state()
    norms_at_init("post-norm", n_layers=2, batch=2)
    assert torch.equal(state, torch.random.get_rng_state())


def test_post_norm_leaves_every_block_at_the_norm_of_a_layer_norm_output():
    stats = norms_at_init("post-norm", n_layers=4, batch=2, d_model=64)
    # LayerNorm with γ = 1, β = 0 returns vectors of mean 0 and variance 1: norm √d_model, whatever came in.
    assert torch.allclose(stats.activation, torch.full((4,), 8.0), atol=1e-3)


def test_the_known_depth_profiles_at_initialisation():
    profiles = depth_profiles(("post-norm", "pre-norm", "no residuals", "no norms"), n_layers=12, batch=4)
    post, pre = profiles["post-norm"].gradient, profiles["pre-norm"].gradient
    assert post[-1] > post[0]  # post-norm: gradients largest near the output (Xiong et al., 2020)
    assert pre[-1] < pre[0]  # pre-norm: the other way round
    assert profiles["pre-norm"].activation[-1] > profiles["pre-norm"].activation[0]  # the residual stream grows
    assert profiles["no residuals"].similarity[-1] > profiles["pre-norm"].similarity[-1]
    assert profiles["no norms"].activation[-1] > 10 * profiles["pre-norm"].activation[-1]


def test_norms_at_init_refuses_bad_input():
    with pytest.raises(ValueError, match="arrangement must be one of"):
        norms_at_init("postnorm")
    with pytest.raises(ValueError, match="init must be one of"):
        norms_at_init("pre-norm", init="kaiming")
    with pytest.raises(ValueError, match="n_layers must be a positive int"):
        norms_at_init("pre-norm", n_layers=0)
    with pytest.raises(ValueError, match="batch must be a positive int"):
        norms_at_init("pre-norm", batch=-1)
    with pytest.raises(ValueError, match="profiles must hold"):
        plot_norms_at_init({})
    with pytest.raises(ValueError, match="n_layers must be one of"):
        norms_at_init_widget(n_layers=100)
    with pytest.raises(ValueError, match="arrangements must be a non-empty selection"):
        norms_at_init_widget(arrangements=("pre-norm", "double norm"))


def test_every_arrangement_draws_and_the_widget_draws_every_state():
    profiles = depth_profiles(tuple(ARRANGEMENTS), n_layers=2, batch=2)
    assert len(plot_norms_at_init(profiles, title="two blocks").axes) == 2
    (depth, init), views = live_views(norms_at_init_widget(n_layers=6, arrangements=("pre-norm",), init="gpt2"))
    assert (depth.value, init.value) == (6, "gpt2") and len(views) == len(DEPTH_CHOICES) * 2
    assert len(_pictures(views)) == len(views)  # each depth and initialisation its own picture
    assert view_label(views[(2, 0)]) == "n_layers = 24 · init = Xavier"
    assert "24 blocks at initialisation (Xavier)" in views[(2, 0)].children[1].value  # the alt text names the state
