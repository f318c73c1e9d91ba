"""Chapter 15's ring picture: the replayed schedule ends with every chunk complete on every rank, as the package's
ring all-reduce promises, and the figures and the widget are built."""

from __future__ import annotations

import pytest
import torch
from matplotlib.figure import Figure

from tutorial_lib.widgets.ring import plot_ring_step, plot_ring_steps, ring_contributions, ring_widget


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


def test_figures_and_widget_are_built():
    assert isinstance(plot_ring_step(4, 3), Figure)
    assert len(plot_ring_steps(4).axes) == 8
    widget = ring_widget(3)
    widget.children[1].value = 4
    assert bytes(widget.children[2].value).startswith(b"\x89PNG")
