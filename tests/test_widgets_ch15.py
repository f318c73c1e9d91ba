"""Chapter 15's ring picture: the replayed schedule ends with every chunk complete on every rank, as the package's
ring all-reduce promises, and the figures and the widget are built."""

from __future__ import annotations

import pytest
import torch
from matplotlib.figure import Figure

from tutorial_lib.widgets._live import live_views, view_label
from tutorial_lib.widgets.ring import (
    MILESTONES,
    WIDGET_RANKS,
    milestone_step,
    plot_ring_step,
    plot_ring_steps,
    ring_contributions,
    ring_widget,
)


@pytest.mark.parametrize("n_ranks", [2, 3, 4, 7])
def test_the_ring_completes_every_chunk_on_every_rank(n_ranks):
    assert ring_contributions(n_ranks, 0).sum(dim=-1).eq(1).all()
    after_reduce_scatter = ring_contributions(n_ranks, n_ranks - 1).sum(dim=-1)
    for rank in range(n_ranks):  # rank r holds the complete sum of chunk r + 1, as ring_all_reduce_ says
        assert after_reduce_scatter[rank, (rank + 1) % n_ranks] == n_ranks
    assert after_reduce_scatter.eq(n_ranks).sum() == n_ranks  # and no other chunk is complete yet
    assert ring_contributions(n_ranks, 2 * (n_ranks - 1)).all()


def test_no_step_adds_a_rank_twice_or_loses_one():
    previous = ring_contributions(5, 0)
    for step in range(1, 9):
        current = ring_contributions(5, step)
        assert (current | previous).eq(current).all()  # contributions only grow
        previous = current


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="n_ranks"):
        ring_contributions(1, 0)
    with pytest.raises(ValueError, match="step"):
        ring_contributions(3, 5)


def test_figures_are_built():
    assert isinstance(plot_ring_step(4, 3), Figure)
    assert len(plot_ring_steps(4).axes) == 8


def test_the_milestones_are_five_different_steps_of_every_ring_the_widget_offers():
    for n_ranks in WIDGET_RANKS:
        steps = [milestone_step(n_ranks, milestone) for milestone in MILESTONES]
        assert steps == sorted(set(steps)) and steps[0] == 0 and steps[-1] == 2 * (n_ranks - 1)
        assert ring_contributions(n_ranks, milestone_step(n_ranks, "reduce-scatter done")).sum(-1).eq(n_ranks).sum() == n_ranks
    with pytest.raises(ValueError, match="milestone"):
        milestone_step(4, "halfway")


def test_the_widget_draws_every_ring_and_milestone_for_the_browser():
    widget = ring_widget(4)
    (ranks, step), views = live_views(widget)
    assert (ranks.value, step.value) == (4, "start") and len(views) == len(WIDGET_RANKS) * len(MILESTONES)
    pictures = {view.children[1].value for view in views.values()}
    assert len(pictures) == len(views) and all('src="data:image/png;base64,' in p for p in pictures)
    assert view_label(views[(3, 2)]) == "ranks = 8 · step = reduce-scatter done"
    assert 'alt="Plot: reduce-scatter, step 7 of 7 (x axis: chunk, y axis: rank)"' in views[(3, 2)].children[1].value
    with pytest.raises(ValueError, match="n_ranks"):
        ring_widget(2)
    with pytest.raises(ValueError, match="milestone"):
        ring_widget(4, "halfway")
