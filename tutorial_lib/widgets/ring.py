"""The ring all-reduce, step by step (chapter 15): whose gradient each chunk on each rank holds after each step.

:func:`ring_contributions` replays the schedule of :func:`tutorial_lib.distributed.ring_all_reduce_` on booleans;
:func:`plot_ring_step` draws one step as a ranks × chunks grid, :func:`plot_ring_steps` every step of a ring as small
multiples (the book's static picture), and :func:`ring_widget` draws the ring's milestones for several numbers of
ranks, switched in the browser.
"""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np
import torch
from jaxtyping import Bool
from matplotlib.figure import Figure
from torch import Tensor

from tutorial_lib.widgets._live import live_states, png_view
from tutorial_lib.widgets._plotting import new_figure


def _check(n_ranks: int, step: int) -> None:
    if isinstance(n_ranks, bool) or not isinstance(n_ranks, int) or n_ranks < 2:
        raise ValueError(f"n_ranks must be an int >= 2, got {n_ranks!r}")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= 2 * (n_ranks - 1):
        raise ValueError(f"step must be an int in [0, 2 · (n_ranks - 1) = {2 * (n_ranks - 1)}], got {step!r}")


def ring_contributions(n_ranks: int, step: int) -> Bool[Tensor, "rank chunk contributor"]:
    """``[r, c, s]`` is True when rank ``r``'s copy of chunk ``c`` holds rank ``s``'s gradient after ``step`` steps:
    0 before any, ``n_ranks - 1`` at the end of the reduce-scatter, ``2 (n_ranks - 1)`` at the end of the all-gather.
    Reduce-scatter step ``k``: rank ``r`` adds its left neighbour's chunk ``(r - k - 1) mod n``; all-gather step
    ``g``: rank ``r`` copies its left neighbour's chunk ``(r - g) mod n``."""
    _check(n_ranks, step)
    n = n_ranks
    held = torch.eye(n, dtype=torch.bool)[:, None, :].expand(n, n, n).clone()  # rank r holds only its own gradient
    for k in range(step):
        before = held.clone()  # every rank sends at once: what arrives was sent before this step's additions
        for r in range(n):
            left = (r - 1) % n
            if k < n - 1:
                chunk = (r - k - 1) % n
                held[r, chunk] = before[r, chunk] | before[left, chunk]
            else:
                chunk = (r - (k - (n - 1))) % n
                held[r, chunk] = before[left, chunk]
    return held


def _phase(n_ranks: int, step: int) -> str:
    if step == 0:
        return "before: each rank its own gradient"
    if step <= n_ranks - 1:
        return f"reduce-scatter, step {step} of {n_ranks - 1}"
    return f"all-gather, step {step - (n_ranks - 1)} of {n_ranks - 1}"


def _draw(ax, n_ranks: int, step: int, *, small: bool = False) -> None:
    counts = ring_contributions(n_ranks, step).sum(dim=-1).numpy()
    ax.imshow(counts, cmap="Blues", vmin=0, vmax=n_ranks, aspect="equal")
    for r in range(n_ranks):
        for c in range(n_ranks):
            complete = counts[r, c] == n_ranks
            ax.text(c, r, f"{counts[r, c]}", ha="center", va="center", fontsize=7 if small else 9,
                    color="white" if counts[r, c] > n_ranks / 2 else "black", fontweight="bold" if complete else None)
    ax.set_xticks(range(n_ranks), [str(c) for c in range(n_ranks)], fontsize=7)
    ax.set_yticks(range(n_ranks), [str(r) for r in range(n_ranks)], fontsize=7)
    ax.set_xlabel("chunk", fontsize=8)
    ax.set_ylabel("rank", fontsize=8)
    short = "start" if step == 0 else "reduce-scatter" if step <= n_ranks - 1 else "all-gather"
    ax.set_title(_phase(n_ranks, step) if not small else f"step {step}: {short}", fontsize=8 if small else 10)


def plot_ring_step(n_ranks: int, step: int) -> Figure:
    """One step of the ring: for each rank (row) and chunk (column), how many ranks' gradients that copy holds."""
    _check(n_ranks, step)
    fig, ax = new_figure(1, 1, figsize=(3.6, 3.4))
    _draw(ax, n_ranks, step)
    return fig


def plot_ring_steps(n_ranks: int = 4) -> Figure:
    """Every step of a ring of ``n_ranks``, as small multiples, two per row (readable at phone width)."""
    _check(n_ranks, 0)
    steps = 2 * (n_ranks - 1) + 1
    rows = (steps + 1) // 2
    fig, axes = new_figure(rows, 2, figsize=(5.6, 2.5 * rows))
    for index, ax in enumerate(np.ravel(axes)):
        if index < steps:
            _draw(ax, n_ranks, index, small=True)
        else:
            ax.axis("off")
    fig.suptitle(f"ring all-reduce, {n_ranks} ranks: how many ranks' gradients each copy of a chunk holds", fontsize=9)
    return fig


WIDGET_RANKS = (3, 4, 6, 8)  # from 3 ranks on, the five milestones below are five different steps
MILESTONES = ("start", "reduce-scatter step 1", "reduce-scatter done", "all-gather step 1", "all-reduce done")


def milestone_step(n_ranks: int, milestone: str) -> int:
    """The step of a ring of ``n_ranks`` at which ``milestone`` (one of :data:`MILESTONES`) is reached."""
    _check(n_ranks, 0)
    steps = dict(zip(MILESTONES, (0, 1, n_ranks - 1, n_ranks, 2 * (n_ranks - 1))))
    if milestone not in steps:
        raise ValueError(f"milestone must be one of {MILESTONES}, got {milestone!r}")
    return steps[milestone]


def ring_widget(n_ranks: int = 4, milestone: str = "start") -> widgets.VBox:
    """Buttons for the number of ranks and a slider over the ring's milestones, over :func:`plot_ring_step`.

    The steps of one ring are the static :func:`plot_ring_steps`; the widget compares rings: the same milestone takes
    more steps with more ranks. Every state is drawn now and switched in the browser
    (:func:`~tutorial_lib.widgets._live.live_states`), so the controls also work in the rendered book, with no kernel.
    """
    if n_ranks not in WIDGET_RANKS or isinstance(n_ranks, bool):
        raise ValueError(f"n_ranks must be one of {WIDGET_RANKS}, got {n_ranks!r}")
    if milestone not in MILESTONES:
        raise ValueError(f"milestone must be one of {MILESTONES}, got {milestone!r}")
    ranks = widgets.ToggleButtons(options=WIDGET_RANKS, value=n_ranks, description="ranks")
    step = widgets.SelectionSlider(options=MILESTONES, value=milestone, description="step")
    step.style.description_width = "initial"
    step.layout.width = "95%"
    return live_states([ranks, step], lambda n, m: png_view(plot_ring_step(n, milestone_step(n, m))))
