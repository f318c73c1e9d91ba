"""The pure functions behind chapter 03's widgets, against analytical values; the wrappers construct and redraw."""

from __future__ import annotations

import inspect
import math

import ipywidgets as widgets
import pytest
import torch
from matplotlib.figure import Figure

from tutorial_lib.widgets._live import live_views, view_label
from tutorial_lib.widgets.mask_explorer import mask_states
from tutorial_lib.widgets import (
    MASK_KINDS,
    build_mask,
    mask_explorer_widget,
    masked_attention_weights,
    plot_masks,
    plot_qk_variance,
    plot_saturation_grid,
    qk_variance,
    qk_variance_standard_error,
    random_scores,
    saturation,
    softmax_saturation_widget,
    softmax_stats,
)


# --- softmax saturation -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_keys", [1, 2, 16, 1000])
def test_uniform_softmax_has_entropy_log_n_and_centred_gradient(n_keys):
    upstream = torch.randn(3, n_keys, generator=torch.Generator().manual_seed(0))
    stats = softmax_stats(torch.zeros(3, n_keys), upstream)
    torch.testing.assert_close(stats.weights, torch.full((3, n_keys), 1 / n_keys))
    torch.testing.assert_close(stats.entropy, torch.full((3,), math.log(n_keys)))
    # J = I/n − 11ᵀ/n², so J·g = (g − mean g)/n.
    expected = ((upstream - upstream.mean(dim=-1, keepdim=True)) / n_keys).norm(dim=-1)
    torch.testing.assert_close(stats.grad_norm, expected)


def test_saturated_softmax_has_no_entropy_and_no_gradient():
    scores = torch.tensor([[200.0, 0.0, 0.0, 0.0]])
    stats = softmax_stats(scores, torch.ones(1, 4))
    torch.testing.assert_close(stats.weights, torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    assert stats.entropy.item() == 0.0  # xlogy: 0·log 0 counts as 0, not NaN
    assert stats.grad_norm.item() == 0.0


def test_softmax_gradient_is_the_jacobian_times_the_upstream_gradient():
    generator = torch.Generator().manual_seed(1)
    scores = 3 * torch.randn(5, 7, generator=generator)
    upstream = torch.randn(5, 7, generator=generator)
    stats = softmax_stats(scores, upstream)
    p = torch.softmax(scores.double(), dim=-1)
    jacobian = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
    expected = (jacobian @ upstream.double()[:, :, None]).squeeze(-1).norm(dim=-1)
    torch.testing.assert_close(stats.grad_norm.double(), expected, rtol=1e-5, atol=1e-7)
    entropy = -(p * p.log()).sum(dim=-1)
    torch.testing.assert_close(stats.entropy.double(), entropy, rtol=1e-5, atol=1e-7)


def test_softmax_stats_rejects_mismatched_upstream():
    # Under pytest jaxtyping's shape check fires first; unwrapped is what a notebook runs.
    with pytest.raises(ValueError, match="upstream"):
        inspect.unwrap(softmax_stats)(torch.zeros(2, 3), torch.zeros(2, 4))


def test_scaled_scores_are_the_unscaled_ones_divided_by_sqrt_d_head():
    unscaled = random_scores(64, scaled=False, seed=3)
    scaled = random_scores(64, scaled=True, seed=3)
    assert unscaled.shape == (256, 16)
    torch.testing.assert_close(scaled, unscaled / 8)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_random_scores_rejects_bad_d_head(bad):
    with pytest.raises(ValueError, match="d_head"):
        inspect.unwrap(random_scores)(bad, scaled=True)  # unwrapped: past jaxtyping's own int check


def test_qk_variance_grows_with_d_head_and_scaling_brings_it_to_one():
    n_samples = 50_000
    variances = qk_variance([1, 16, 1024], n_samples=n_samples, seed=0)
    assert list(variances) == [1, 16, 1024]
    for d_head, (unscaled, scaled) in variances.items():
        tolerance = 4 * qk_variance_standard_error(d_head, n_samples)  # four standard errors
        assert unscaled == pytest.approx(d_head, rel=tolerance)
        assert scaled == pytest.approx(1.0, rel=tolerance)


def test_qk_variance_standard_error_matches_the_spread_over_seeds():
    estimates = torch.tensor([qk_variance([2], n_samples=500, seed=seed)[2][1] for seed in range(400)])
    # The spread of 400 estimates is itself known to about 1/sqrt(2·400) = 3.5%.
    assert estimates.std().item() == pytest.approx(qk_variance_standard_error(2, 500), rel=0.15)


@pytest.mark.parametrize("kwargs", [{"d_heads": [0]}, {"d_heads": [4], "n_samples": 1}])
def test_qk_variance_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError, match="d_heads|n_samples"):
        qk_variance(**kwargs)


def test_without_scaling_large_d_head_saturates_and_starves_the_gradient():
    unscaled, scaled = saturation(512, scaled=False), saturation(512, scaled=True)
    assert unscaled.entropy.mean() < 0.1 * scaled.entropy.mean()
    assert unscaled.grad_norm.mean() < 0.5 * scaled.grad_norm.mean()
    # Scaled, the distribution's shape no longer depends on d_k.
    assert saturation(4, scaled=True).entropy.mean() == pytest.approx(scaled.entropy.mean().item(), rel=0.1)


# --- masks --------------------------------------------------------------------------------------------------------


def _expected_mask(kind: str, seq_len: int, window: int, length: int) -> torch.Tensor:
    """Built from tril/triu, independently of tutorial_lib.attention."""
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    real_keys = (torch.arange(seq_len) < length).expand(seq_len, seq_len)
    return {
        "causal": ones.tril(),
        "padding": real_keys,
        "causal + padding": ones.tril() & real_keys,
        "sliding window": ones.tril() & ones.triu(-(window - 1)),
        "bidirectional": ones,
    }[kind]


@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize(("seq_len", "window", "length"), [(6, 2, 4), (8, 3, 8), (5, 5, 0), (1, 1, 1)])
def test_build_mask_matches_its_definition(kind, seq_len, window, length):
    mask = build_mask(kind, seq_len, window=window, length=length)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, _expected_mask(kind, seq_len, window, length))


def test_build_mask_without_length_has_no_padding():
    assert torch.equal(build_mask("padding", 4), torch.ones(4, 4, dtype=torch.bool))


@pytest.mark.parametrize(
    ("kind", "kwargs", "match"),
    [("diagonal", {}, "kind"), ("padding", {"length": 9}, "lengths"), ("sliding window", {"window": 0}, "window")],
)
def test_build_mask_rejects_bad_arguments(kind, kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_mask(kind, 8, **kwargs)


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_masked_weights_are_a_softmax_over_the_allowed_keys_only(kind):
    mask = build_mask(kind, 7, window=3, length=4)
    weights = masked_attention_weights(mask, d_head=8, seed=2)
    generator = torch.Generator().manual_seed(2)
    q, k = torch.randn(7, 8, generator=generator), torch.randn(7, 8, generator=generator)
    expected = torch.softmax((q @ k.T / math.sqrt(8)).masked_fill(~mask, -math.inf), dim=-1)
    torch.testing.assert_close(weights, expected)
    assert torch.all(weights[~mask] == 0)


def test_fully_masked_queries_get_zero_weights_not_nan():
    weights = masked_attention_weights(build_mask("padding", 5, length=0))
    assert torch.equal(weights, torch.zeros(5, 5))


# --- figures and wrappers -----------------------------------------------------------------------------------------


def test_figures_have_one_panel_per_case():
    assert len(plot_saturation_grid((4, 64)).axes) == 2 * 2
    assert len(plot_masks(seq_len=6).axes) == 2 * len(MASK_KINDS) + 1  # and a colour bar
    variance_figure = plot_qk_variance(qk_variance([1, 4], n_samples=1000))
    assert isinstance(variance_figure, Figure) and len(variance_figure.axes) == 1


def test_softmax_saturation_widget_draws_every_state_for_the_browser():
    widget = softmax_saturation_widget(d_head=64, scaled=True)
    controls, views = live_views(widget)
    toggle, slider = controls
    assert (toggle.value, slider.value) == (True, 64)
    assert len(views) == 2 * len(slider.options)
    pictures = {view.children[1].value for view in views.values()}
    assert len(pictures) == len(views) and all('src="data:image/png;base64,' in p for p in pictures)  # each its own
    assert all("alt=\"Plot: one query" in p for p in pictures)
    assert view_label(views[(1, slider.options.index(64))]) == "scores = q·k / √d_k (scaled) · d_k = 64"
    with pytest.raises(ValueError, match="d_head"):
        softmax_saturation_widget(d_head=100)


def test_mask_explorer_widget_draws_every_mask_for_the_browser():
    widget = mask_explorer_widget("causal + padding", seq_len=8, window=3, length=5)
    (buttons,), views = live_views(widget)
    labels = [view_label(view) for view in views.values()]
    assert labels == ["mask = causal", "mask = padding (length 5)", "mask = causal + padding (length 5)",
                      "mask = causal + padding (length 0)", "mask = sliding window (3)", "mask = bidirectional"]
    assert labels[buttons.index] == "mask = causal + padding (length 5)"  # the kind asked for is shown first
    pictures = {view.children[1].value for view in views.values()}
    assert len(pictures) == len(views) and all('src="data:image/png;base64,' in p for p in pictures)
    assert all("attention weights" in p for p in pictures)  # in each picture's alt text
    assert len(mask_states(length=0)) == len(MASK_KINDS)  # no second "length 0" state when length is already 0
    with pytest.raises(ValueError, match="kind"):
        mask_explorer_widget("diagonal")
    with pytest.raises(ValueError, match=r"length.* must lie in \[0, seq_len=4\]"):
        mask_explorer_widget(seq_len=4, length=5)
