"""Chapter 02's figures: the sinusoidal encoding as a heatmap, and how alike two positions' encodings are.

:func:`position_similarity` is the pure function (cosine similarity between the encodings of every pair of
positions); :func:`plot_pe_heatmap` and :func:`plot_position_similarity` draw what the book shows;
:func:`positions_widget` lets a reader choose the position, d_model and base.
"""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as widgets
from jaxtyping import Float
from matplotlib.figure import Figure
from torch import Tensor

from tutorial_lib.embeddings import sinusoidal_positional_encoding
from tutorial_lib.widgets._plotting import figure_png, new_figure


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
    return fig


def positions_widget(position: int = 20, *, d_model: int = 64, base: float = 10000.0, n_ctx: int = 100) -> widgets.VBox:
    """Position, d_model and base as controls; the encoding's heatmap above, the chosen position's similarity below."""
    position_slider = widgets.IntSlider(value=position, min=0, max=n_ctx - 1, description="position")
    d_model_slider = widgets.SelectionSlider(options=[8, 16, 32, 64, 128, 256, 512], value=d_model, description="d_model")
    base_slider = widgets.SelectionSlider(options=[10.0, 100.0, 1000.0, 10000.0, 100000.0], value=base, description="base")
    image = widgets.Image(format="png")  # its PNG lives in the widget state: the book and nbval see no side output

    def redraw(_change=None) -> None:
        fig, axes = new_figure(2, 1, figsize=(5.2, 6.8))
        _heatmap(axes[0], n_ctx, d_model_slider.value, base_slider.value)
        axes[0].axhline(position_slider.value, color="black", linewidth=1)
        _similarity(axes[1], [position_slider.value], n_ctx, d_model_slider.value, [base_slider.value])
        image.value = figure_png(fig)

    for control in (position_slider, d_model_slider, base_slider):
        control.observe(redraw, names="value")
    redraw()
    return widgets.VBox([position_slider, d_model_slider, base_slider, image])
