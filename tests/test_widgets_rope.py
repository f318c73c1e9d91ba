"""The pure functions behind chapter 12's figures and RoPE widget."""

from __future__ import annotations

import math

import pytest
import torch

from tutorial_lib.rope import RotaryEmbedding
from tutorial_lib.widgets._live import live_views, view_label
from tutorial_lib.widgets.rope import (
    diagonal_spread,
    plot_equal_time,
    plot_loss_by_position,
    plot_rope_frequencies,
    plot_runs,
    plot_score_grids,
    rope_similarity,
    rope_widget,
    score_grid,
)


def _rope_encoder(d_head: int, n_positions: int):
    rope = RotaryEmbedding(d_head, n_ctx=n_positions)
    return lambda x, position: rope(x[None], offset=position)[0]


def test_rope_scores_depend_on_the_offset_alone_and_added_positions_do_not():
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(16, generator=generator), torch.randn(16, generator=generator)
    rope = score_grid(_rope_encoder(16, 12), q, k, 12)
    assert rope.shape == (12, 12) and rope[3, 5].item() == pytest.approx((q @ _rope_encoder(16, 12)(k, 2)).item(), abs=1e-5)
    assert diagonal_spread(rope).shape == (23,) and diagonal_spread(rope).max() < 1e-4
    position = torch.randn(12, 16, generator=generator)
    added = score_grid(lambda x, m: x + position[m], q, k, 12)
    assert diagonal_spread(added)[1:-1].min() > 0.1  # the one-entry corner diagonals have no spread to show


def test_score_helpers_refuse_bad_input(without_annotation_checks):
    with pytest.raises(ValueError, match="n_positions"):
        score_grid(lambda x, m: x, torch.zeros(4), torch.zeros(4), 0)
    with without_annotation_checks(), pytest.raises(ValueError, match="same size"):
        score_grid(lambda x, m: x, torch.zeros(4), torch.zeros(6), 3)
    with pytest.raises(ValueError, match="square"):
        diagonal_spread(torch.zeros(3, 4))


def test_rope_similarity_is_the_expected_match_of_a_vector_with_itself_rotated(without_annotation_checks):
    assert rope_similarity([0], 64).item() == pytest.approx(1.0)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(20000, 8, generator=generator, dtype=torch.float64)
    rope = RotaryEmbedding(8, n_ctx=64)
    rotated = rope(x[:, None].float(), offset=37)[:, 0].double()
    measured = (x * rotated).sum(-1).mean() / x.pow(2).sum(-1).mean()
    assert measured.item() == pytest.approx(rope_similarity([37], 8).item(), abs=0.02)
    assert rope_similarity([1], 2).item() == pytest.approx(math.cos(1.0))  # one pair, θ_0 = 1
    with without_annotation_checks(), pytest.raises(ValueError, match="offsets"):
        rope_similarity(torch.ones(2, 2), 8)


def test_the_figures_and_the_widget_draw():
    grid = torch.randn(6, 6)
    assert sum(ax.get_visible() for ax in plot_score_grids({"a": grid, "b": grid, "c": grid}).axes) >= 4
    assert len(plot_rope_frequencies(16, (100.0, 10000.0), max_offset=100).axes) == 2
    curves = [([1, 2, 3], [3.0, 2.0, 1.5]), ([1, 2, 3], [3.1, 2.1, 1.4])]
    assert len(plot_runs({"learned": curves, "rope": curves}, ylim=(1.0, 3.5)).axes) == 1
    assert len(plot_loss_by_position({"rope": torch.rand(8)}, train_n_ctx=4).axes) == 1
    record = {"history": {"eval_seconds": [1.0, 2.0], "val_loss": [2.5, 1.8]}}
    assert len(plot_equal_time({"gpt": record}, 1.9).axes) == 1
    controls, views = live_views(rope_widget(128, max_offset=64))
    d_head, base = controls
    assert (d_head.value, base.value) == (128, 10000.0) and len(views) == len(d_head.options) * len(base.options) == 12
    pictures = {view.children[1].value for view in views.values()}
    assert len(pictures) == len(views) and all('src="data:image/png;base64,' in p for p in pictures)
    assert view_label(views[(1, 4)]) == "d_head = 128 · base = 500,000"
    assert 'alt="Plot: d_head = 128, base 500,000: how much' in views[(1, 4)].children[1].value
    with pytest.raises(ValueError, match="base"):
        rope_widget(128, base=20000.0)
    with pytest.raises(ValueError, match="share their steps"):
        plot_runs({"x": [([1, 2], [1.0, 2.0]), ([1, 3], [1.0, 2.0])]})
    with pytest.raises(ValueError, match="d_head"):
        rope_widget(10)
    for figure, empty in ((plot_score_grids, {}), (plot_runs, {}), (plot_equal_time, {})):
        with pytest.raises(ValueError, match="at least one"):
            figure(empty) if figure is not plot_equal_time else figure(empty, 1.9)
