"""Rotary position embeddings, pictured (chapter 12).

* :func:`score_grid` computes the attention score of one query and one key placed at every pair of positions, with a
  given way of encoding the positions; :func:`diagonal_spread` measures how far it is from depending on the offset
  alone (0 for RoPE); :func:`plot_score_grids` draws the grids side by side.
* :func:`rope_similarity` is how much a vector still matches itself rotated by an offset ``r`` (the mean of
  ``cos(r·θ_i)`` over the pairs): the reach of RoPE's frequencies. :func:`plot_rope_frequencies` draws it with the
  pairs' wavelengths; :func:`rope_widget` draws :func:`rope_similarity_view` for a few bases and head sizes, switched
  in the browser.
* :func:`plot_runs` (validation curves of several seeds, mean and spread), :func:`plot_loss_by_position` (loss at each
  position, beyond the training length too) and :func:`plot_equal_time` (validation loss against seconds of training)
  draw the chapter's experiments from their results.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import ipywidgets as widgets
import torch
from jaxtyping import Float
from matplotlib.figure import Figure
from torch import Tensor

from tutorial_lib.rope import rope_frequencies
from tutorial_lib.widgets._live import live_states, png_view
from tutorial_lib.widgets._plotting import new_figure

# The widget's stops: 12 states drawn for the book (each PNG about 40 kB: a page must stay well under 2 MB).
_D_HEADS = (32, 128)
_BASES = (100.0, 1000.0, 10000.0, 100000.0, 500000.0, 1000000.0)
LLAMA_BASE = 10000.0


def score_grid(
    encode: Callable[[Tensor, int], Tensor], q: Float[Tensor, " d_head"], k: Float[Tensor, " d_head"], n_positions: int
) -> Float[Tensor, "query_pos key_pos"]:
    """``S[m, n] = encode(q, m) · encode(k, n)``: the score of the query placed at ``m`` and the key placed at ``n``,
    for every ``m, n < n_positions``. ``encode(x, position)`` returns ``x`` with its position encoded."""
    if isinstance(n_positions, bool) or not isinstance(n_positions, int) or n_positions < 1:
        raise ValueError(f"n_positions must be a positive int, got {n_positions!r}")
    if q.shape != k.shape or q.dim() != 1:
        raise ValueError(f"q and k must be vectors of the same size, got {tuple(q.shape)} and {tuple(k.shape)}")
    queries = torch.stack([encode(q, m) for m in range(n_positions)])
    keys = torch.stack([encode(k, n) for n in range(n_positions)])
    return queries @ keys.T


def diagonal_spread(scores: Float[Tensor, "query_pos key_pos"]) -> Float[Tensor, " n_offsets"]:
    """For every offset ``n - m`` from ``-(N - 1)`` to ``N - 1``: the largest minus the smallest score on that diagonal.
    All zero exactly when the scores depend on the offset alone."""
    if scores.dim() != 2 or scores.shape[0] != scores.shape[1]:
        raise ValueError(f"scores must be a square matrix, got shape {tuple(scores.shape)}")
    n = scores.shape[0]
    spreads = [scores.diagonal(offset) for offset in range(-(n - 1), n)]
    return torch.stack([d.max() - d.min() for d in spreads])


def plot_score_grids(grids: Mapping[str, Float[Tensor, "query_pos key_pos"]]) -> Figure:
    """One heatmap per grid (two columns), and a last panel with each grid's spread along its diagonals."""
    if not grids:
        raise ValueError("grids must hold at least one score grid")
    n_panels = len(grids) + 1
    n_rows = math.ceil(n_panels / 2)
    fig, axes = new_figure(n_rows, 2, figsize=(7.0, 3.2 * n_rows), squeeze=False)
    axes = list(axes.flat)
    limit = max(grid.abs().max().item() for grid in grids.values())
    for ax, (name, grid) in zip(axes, grids.items()):
        image = ax.imshow(grid, cmap="RdBu_r", vmin=-limit, vmax=limit, origin="upper")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("key position n")
        ax.set_ylabel("query position m")
    fig.colorbar(image, ax=axes[: len(grids)], shrink=0.8, label="score")
    spread_ax = axes[len(grids)]
    for name, grid in grids.items():
        n = grid.shape[0]
        spread_ax.plot(range(-(n - 1), n), diagonal_spread(grid), label=name)
    spread_ax.set_title("spread of the scores along each diagonal", fontsize=10)
    spread_ax.set_xlabel("offset n - m")
    spread_ax.set_ylabel("max - min")
    spread_ax.legend(fontsize=8)
    spread_ax.grid(alpha=0.3)
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig


def rope_similarity(offsets: Sequence[int] | Tensor, d_head: int, base: float = 10000.0) -> Float[Tensor, " n_offsets"]:
    """The mean of ``cos(r·θ_i)`` over RoPE's ``d_head / 2`` pairs, for each offset ``r``.

    For a random vector ``x`` with independent components of equal variance, ``E[x · R_r x] / E[‖x‖²]`` is exactly
    this: how much a query still matches the same key ``r`` positions further away. 1 at ``r = 0``.
    """
    offsets = torch.as_tensor(offsets, dtype=torch.float64)
    if offsets.dim() != 1:
        raise ValueError(f"offsets must be a sequence of numbers, got shape {tuple(offsets.shape)}")
    return torch.cos(offsets[:, None] * rope_frequencies(d_head, base)[None, :]).mean(dim=-1)


def plot_rope_frequencies(d_head: int = 64, bases: Sequence[float] = (10000.0, 500000.0), max_offset: int = 4096) -> Figure:
    """Top: each pair's wavelength ``2π/θ_i`` in positions. Bottom: :func:`rope_similarity` against the offset (log
    scale), one curve per base. Stacked, so that the figure reads at phone width."""
    if not bases:
        raise ValueError("bases must hold at least one base")
    if isinstance(max_offset, bool) or not isinstance(max_offset, int) or max_offset < 2:
        raise ValueError(f"max_offset must be an int >= 2, got {max_offset!r}")
    fig, (top, bottom) = new_figure(2, 1, figsize=(6.0, 6.6))
    offsets = torch.unique(torch.logspace(0, math.log10(max_offset), 400).round().long())
    for base in bases:
        wavelengths = 2 * math.pi / rope_frequencies(d_head, base)
        top.plot(range(d_head // 2), wavelengths, "o-", markersize=3, label=f"base {base:g}")
        bottom.plot(offsets, rope_similarity(offsets, d_head, base), label=f"base {base:g}")
    top.set_yscale("log")
    top.set_xlabel("pair i")
    top.set_ylabel("wavelength 2π/θ_i (positions)")
    top.set_title(f"d_head = {d_head}: one wavelength per pair of dimensions", fontsize=11)
    bottom.set_xscale("log")
    bottom.axhline(0, color="grey", linewidth=0.6)
    bottom.set_xlabel("offset r between query and key (positions)")
    bottom.set_ylabel("mean of cos(r·θ_i)")
    bottom.set_title("how much a vector still matches itself r positions away", fontsize=11)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=9)
    return fig


def rope_similarity_view(d_head: int, base: float, max_offset: int = 4096) -> Figure:
    """The widget's picture for one state: :func:`rope_similarity` against the offset for ``base``, over LLaMA's
    base 10,000 in grey, with the longest wavelength of each in the legend."""
    if isinstance(max_offset, bool) or not isinstance(max_offset, int) or max_offset < 2:
        raise ValueError(f"max_offset must be an int >= 2, got {max_offset!r}")
    fig, ax = new_figure(1, 1, figsize=(5.6, 3.4))
    offsets = torch.unique(torch.logspace(0, math.log10(max_offset), 150).round().long())
    curves = [(LLAMA_BASE, {"color": "0.6", "linewidth": 2.5})] if base != LLAMA_BASE else []  # the reference
    for value, style in [*curves, (base, {"color": "C0"})]:
        longest = 2 * math.pi / rope_frequencies(d_head, value)[-1].item()
        ax.plot(offsets.numpy(), rope_similarity(offsets, d_head, value).numpy(), label=f"base {value:,.0f} (longest wavelength "
                f"{longest:,.0f})", **style)
    ax.set_xscale("log")
    ax.axhline(0, color="grey", linewidth=0.6)
    ax.set_ylim(-0.45, 1.05)
    ax.set(xlabel="offset r between query and key (positions)", ylabel="mean of cos(r·θ_i)",
           title=f"d_head = {d_head}, base {base:,.0f}: how much a vector matches itself r positions away")
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    return fig


def rope_widget(d_head: int = 128, base: float = LLAMA_BASE, max_offset: int = 4096) -> widgets.VBox:
    """The base (log-spaced stops) and ``d_head`` as controls over :func:`rope_similarity_view`, compared with
    LLaMA's base 10,000.

    Every state is drawn now and switched in the browser (:func:`~tutorial_lib.widgets._live.live_states`), so the
    controls also work in the rendered book, with no kernel.
    """
    if d_head not in _D_HEADS:
        raise ValueError(f"d_head must be one of {_D_HEADS}, got {d_head!r}")
    if base not in _BASES:
        raise ValueError(f"base must be one of {_BASES}, got {base!r}")
    d_head_buttons = widgets.ToggleButtons(options=_D_HEADS, value=d_head, description="d_head")
    base_slider = widgets.SelectionSlider(options=[(f"{b:,.0f}", b) for b in _BASES], value=base, description="base")
    return live_states(
        [d_head_buttons, base_slider], lambda d_head_, base_: png_view(rope_similarity_view(d_head_, base_, max_offset))
    )


def plot_runs(
    runs: Mapping[str, Sequence[tuple[Sequence[int], Sequence[float]]]], *, ylabel: str = "validation loss",
    ylim: tuple[float, float] | None = None,
) -> Figure:
    """Per label, curves ``(steps, losses)`` of several seeds: their mean as a line, their range as a band."""
    if not runs:
        raise ValueError("runs must hold at least one label")
    fig, ax = new_figure(1, 1, figsize=(6.0, 3.8))
    for name, curves in runs.items():
        steps = list(curves[0][0])
        if any(list(s) != steps for s, _ in curves):
            raise ValueError(f"the curves of {name!r} must share their steps")
        losses = torch.tensor([list(values) for _, values in curves])
        line = ax.plot(steps, losses.mean(dim=0), "o-", markersize=3, label=f"{name} ({len(curves)} seed{'s' if len(curves) > 1 else ''})")
        ax.fill_between(steps, losses.min(dim=0).values, losses.max(dim=0).values, alpha=0.25, color=line[0].get_color())
    ax.set_xlabel("update")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{ylabel} during training: mean of the seeds, their range shaded", fontsize=10)  # also the alt text
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    return fig


def plot_loss_by_position(curves: Mapping[str, Float[Tensor, " seq"]], train_n_ctx: int) -> Figure:
    """Loss at each position, one line per model; the training length is marked."""
    if not curves:
        raise ValueError("curves must hold at least one model")
    fig, ax = new_figure(1, 1, figsize=(6.0, 3.8))
    for name, losses in curves.items():
        ax.plot(range(len(losses)), losses, label=name)
    ax.axvline(train_n_ctx - 0.5, color="grey", linestyle="--", linewidth=1)
    ax.text(train_n_ctx, ax.get_ylim()[1], " trained up to here", va="top", fontsize=9, color="grey")
    ax.set_xlabel("position in the window")
    ax.set_ylabel("loss (nats per character)")
    ax.set_title(f"loss at each position, trained on windows of {train_n_ctx}", fontsize=10)  # also the alt text
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    return fig


def plot_equal_time(records: Mapping[str, dict], target: float) -> Figure:
    """Validation loss against seconds of training (evaluation excluded) of kept runs
    (:func:`~tutorial_lib.recipes.char_gpt.load_or_train_char_run`), with the target loss marked."""
    if not records:
        raise ValueError("records must hold at least one run")
    fig, ax = new_figure(1, 1, figsize=(6.0, 3.8))
    for name, record in records.items():
        history = record["history"]
        ax.plot(history["eval_seconds"], history["val_loss"], "o-", markersize=3, label=name)
    ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"validation loss {target:.2f}")
    ax.set_xlabel("seconds of training")
    ax.set_ylabel("validation loss")
    ax.set_title("validation loss against training time", fontsize=10)  # also the figure's alt text
    ax.set_ylim(top=min(ax.get_ylim()[1], 2.7))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    return fig
