"""Chapter 02's figures: the sinusoidal encoding as a heatmap, and how alike two positions' encodings are.

:func:`position_similarity` is the pure function (cosine similarity between the encodings of every pair of
positions); :func:`plot_pe_heatmap` and :func:`plot_position_similarity` draw what the book shows;
:func:`positions_widget` lets a reader choose the base, in the rendered book too (every choice is drawn
when the notebook runs).
"""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as widgets
from jaxtyping import Float
from matplotlib.figure import Figure
from torch import Tensor

from tutorial_lib.embeddings import sinusoidal_positional_encoding
from tutorial_lib.widgets._live import live_states, png_view
from tutorial_lib.widgets._plotting import new_figure


def position_similarity(n_ctx: int, d_model: int, *, base: float = 10000.0) -> Float[Tensor, "n_ctx n_ctx"]:
    """Cosine similarity between PE(p) and PE(q) for every pair of positions p, q < n_ctx."""
    pe = sinusoidal_positional_encoding(n_ctx, d_model, base=base).double()
    unit = pe / pe.norm(dim=-1, keepdim=True)
    return (unit @ unit.T).float()


def _heatmap(ax, n_ctx: int, d_model: int, base: float) -> None:
    pe = sinusoidal_positional_encoding(n_ctx, d_model, base=base)
    image = ax.imshow(pe.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_xlabel("dimension (sin, cos, sin, cos, …)")
    ax.set_ylabel("position")
    ax.set_title(f"PE, d_model = {d_model}, base = {base:g}", fontsize="medium")
    ax.figure.colorbar(image, ax=ax, shrink=0.8)


def _similarity(ax, positions: Sequence[int], n_ctx: int, d_model: int, bases: Sequence[float]) -> None:
    lowest = 0.0
    for base in bases:
        similarity = position_similarity(n_ctx, d_model, base=base)
        lowest = min(lowest, similarity[list(positions)].min().item())
        for position in positions:
            label = f"position {position}" + (f", base {base:g}" if len(bases) > 1 else "")
            ax.plot(similarity[position].numpy(), label=label)
    ax.set_xlabel("other position")
    ax.set_ylabel("cosine similarity")
    ax.set_ylim(lowest - 0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


def plot_pe_heatmap(n_ctx: int = 100, d_model: int = 64, *, base: float = 10000.0) -> Figure:
    """The table of §3.5: one row per position, one column per dimension; fast waves on the left, slow on the right."""
    fig, ax = new_figure(1, 1, figsize=(5.6, 4.0))
    _heatmap(ax, n_ctx, d_model, base)
    return fig


def plot_position_similarity(positions: Sequence[int] = (20, 60), *, n_ctx: int = 100, d_model: int = 64,
                             bases: Sequence[float] = (10000.0,)) -> Figure:
    """Cosine similarity of each chosen position's encoding with every position's: a peak at itself, falling off with
    distance, the same shape wherever the position is."""
    if not positions or any(not 0 <= p < n_ctx for p in positions):
        raise ValueError(f"positions must be non-empty and lie in [0, n_ctx={n_ctx}), got {list(positions)}")
    fig, ax = new_figure(1, 1, figsize=(5.6, 3.4))
    _similarity(ax, positions, n_ctx, d_model, bases)
    shown = ", ".join(str(p) for p in positions)
    ax.set_title(f"cosine similarity of position{'s' if len(positions) > 1 else ''} {shown} with every position",
                 fontsize="medium")
    return fig


BASE_CHOICES = (10.0, 100.0, 1000.0, 10000.0, 100000.0)  # the widget's stops: 5 states drawn for the book


def positions_view(position: int, d_model: int, base: float, *, n_ctx: int = 100) -> Figure:
    """The widget's picture for one state: the encoding's heatmap with ``position`` marked, and that position's
    similarity to every other."""
    if not 0 <= position < n_ctx:
        raise ValueError(f"position must lie in [0, n_ctx={n_ctx}), got {position!r}")
    fig, axes = new_figure(2, 1, figsize=(5.2, 6.8))
    _heatmap(axes[0], n_ctx, d_model, base)
    axes[0].axhline(position, color="black", linewidth=1)
    _similarity(axes[1], [position], n_ctx, d_model, [base])
    axes[1].set_title(f"cosine similarity of position {position} with every position", fontsize="medium")
    return fig


def positions_widget(position: int = 20, *, d_model: int = 64, base: float = 10000.0, n_ctx: int = 100) -> widgets.VBox:
    """The base as a control; the encoding's heatmap above, ``position``'s similarity to every position below.

    Every base is drawn now and switched in the browser (:func:`~tutorial_lib.widgets._live.live_states`), so the
    slider also works in the rendered book, with no kernel. Another position or d_model: call the function again.
    """
    if base not in BASE_CHOICES:
        raise ValueError(f"base must be one of {BASE_CHOICES}, got {base!r}")
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 2 or d_model % 2:
        raise ValueError(f"d_model must be an even int >= 2, got {d_model!r}")
    if not 0 <= position < n_ctx:
        raise ValueError(f"position must lie in [0, n_ctx={n_ctx}), got {position!r}")
    base_slider = widgets.SelectionSlider(options=[(f"{b:g}", b) for b in BASE_CHOICES], value=base, description="base")
    return live_states([base_slider], lambda base_: png_view(positions_view(position, d_model, base_, n_ctx=n_ctx)))
