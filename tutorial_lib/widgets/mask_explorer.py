"""The masks of §3.2.3 and what they do to the attention weights (chapter 03).

Pure functions build a mask by name and the attention weights it produces; :func:`mask_explorer_widget` is a thin
ipywidgets wrapper over them (every mask drawn when the notebook runs, so it works in the rendered book too) and
:func:`plot_masks` draws every kind side by side for the static book.
"""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as widgets
import matplotlib
import numpy as np
import torch
from jaxtyping import Bool, Float
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from torch import Tensor

from tutorial_lib.attention import (
    bidirectional_mask,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
    sliding_window_mask,
)
from tutorial_lib.widgets._live import live_states, png_view
from tutorial_lib.widgets._plotting import new_figure

MASK_KINDS = ("causal", "padding", "causal + padding", "sliding window", "bidirectional")


def build_mask(kind: str, seq_len: int, *, window: int = 3, length: int | None = None) -> Bool[Tensor, "query_pos key_pos"]:
    """The ``(seq_len, seq_len)`` self-attention mask of one sequence, True = may attend.

    ``window`` is the sliding window's number of keys; ``length`` is the number of real tokens before the right
    padding (``None``: no padding), used by the two padding kinds.
    """
    if kind not in MASK_KINDS:
        raise ValueError(f"kind must be one of {MASK_KINDS}, got {kind!r}")
    if length is None:
        length = seq_len
    if kind == "causal":
        return causal_mask(seq_len)
    if kind == "sliding window":
        return sliding_window_mask(seq_len, window)
    if kind == "bidirectional":
        return bidirectional_mask(seq_len)
    # padding_mask is (batch, 1, key_pos): one sequence, the same keys hidden from every query.
    padding = padding_mask(torch.tensor([length]), seq_len)[0].expand(seq_len, seq_len)
    return padding & causal_mask(seq_len) if kind == "causal + padding" else padding


def masked_attention_weights(
    mask: Bool[Tensor, "query_pos key_pos"], *, d_head: int = 8, seed: int = 0
) -> Float[Tensor, "query_pos key_pos"]:
    """Attention weights of random unit-variance queries and keys under ``mask`` (the package's Eq. (1))."""
    seq_len = mask.shape[-1]
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(seq_len, d_head, generator=generator)
    k = torch.randn(seq_len, d_head, generator=generator)
    return scaled_dot_product_attention(q, k, k, mask)[1]


def _draw(axes, kind: str, mask: Tensor, weights: Tensor) -> AxesImage:
    """The mask in the first axes; the weights in the second, on a shared 0..1 scale, masked pairs left white (they
    are exactly 0)."""
    mask_ax, weights_ax = axes
    mask_ax.imshow(mask.numpy(), cmap="Greys", vmin=0, vmax=1.6)
    mask_ax.set_title(kind, fontsize="medium")
    colormap = matplotlib.colormaps["viridis"].with_extremes(bad="white")
    image = weights_ax.imshow(np.ma.masked_where(~mask.numpy(), weights.numpy()), cmap=colormap, vmin=0, vmax=1)
    positions = range(mask.shape[-1])
    for ax in axes:
        ax.set_xlabel("key_pos")
        ax.set_xticks(positions, [str(p) for p in positions], fontsize="x-small")
        ax.set_yticks(positions, [str(p) for p in positions], fontsize="x-small")
    return image


def plot_masks(
    kinds: Sequence[str] = MASK_KINDS, *, seq_len: int = 8, window: int = 3, length: int = 5, seed: int = 0
) -> Figure:
    """Every mask kind, one per row: the mask (left, dark = may attend) and the attention weights it yields (right).

    The weights come from the same random queries and keys in every row, so only the mask differs. Two columns, so
    that the figure stays readable on a phone.
    """
    fig, axes = new_figure(len(kinds), 2, figsize=(4.8, 0.3 + 2.3 * len(kinds)), squeeze=False)
    for row, kind in enumerate(kinds):
        mask = build_mask(kind, seq_len, window=window, length=length)
        image = _draw(axes[row, :], kind, mask, masked_attention_weights(mask, seed=seed))
        axes[row, 0].set_ylabel(f"{kind}\nquery_pos")
        axes[row, 0].set_title("mask (dark = may attend)" if row == 0 else "", fontsize="medium")
        axes[row, 1].set_title("attention weights" if row == 0 else "", fontsize="medium")
    fig.colorbar(image, ax=axes[:, 1].tolist(), shrink=0.4, label="weight")
    return fig


def mask_view(kind: str, *, seq_len: int = 8, window: int = 3, length: int | None = None, seed: int = 0) -> Figure:
    """The widget's picture for one mask: the mask above, the attention weights it yields below, with a colour bar."""
    mask = build_mask(kind, seq_len, window=window, length=length)
    fig, axes = new_figure(2, 1, figsize=(3.2, 5.6), squeeze=False)
    heatmap = _draw(axes[:, 0], kind, mask, masked_attention_weights(mask, seed=seed))
    axes[0, 0].set_ylabel("mask: query_pos")
    axes[1, 0].set_ylabel("weights: query_pos")
    axes[1, 0].set_title("attention weights", fontsize="medium")
    fig.colorbar(heatmap, ax=axes[1, 0], shrink=0.8)
    return fig


def mask_states(*, window: int = 3, length: int = 5) -> list[tuple[str, dict[str, str | int]]]:
    """The widget's masks, as (option label, keyword arguments of :func:`mask_view`): every kind, and causal +
    padding once more with no real token at all (every query fully masked: the zero-weight rows of §3.2.3's edge)."""
    states = []
    for kind in MASK_KINDS:
        if kind == "sliding window":
            states.append((f"{kind} ({window})", {"kind": kind, "window": window}))
        elif "padding" in kind:
            states.append((f"{kind} (length {length})", {"kind": kind, "length": length}))
            if kind == "causal + padding" and length != 0:
                states.append((f"{kind} (length 0)", {"kind": kind, "length": 0}))
        else:
            states.append((kind, {"kind": kind}))
    return states


def mask_explorer_widget(
    kind: str = "causal + padding", *, seq_len: int = 8, window: int = 3, length: int = 5, seed: int = 0
) -> widgets.VBox:
    """The mask kinds as buttons (padded to ``length`` real tokens, a ``window``-key sliding window, and causal +
    padding with no real token); the chosen mask and its attention weights as heatmaps.

    Every mask is drawn now and switched in the browser (:func:`~tutorial_lib.widgets._live.live_states`), so the
    buttons also work in the rendered book, with no kernel. Another size, window or length: call the function again.
    """
    build_mask(kind, seq_len, window=window, length=length)  # validate before building any control
    if not 0 <= length <= seq_len:
        raise ValueError(f"length must lie in [0, seq_len={seq_len}], got {length!r}")
    states = mask_states(window=window, length=length)
    first = next(i for i, (_, state) in enumerate(states) if state["kind"] == kind)
    buttons = widgets.ToggleButtons(options=[(label, i) for i, (label, _) in enumerate(states)], value=first,
                                    description="mask")
    return live_states(
        [buttons], lambda i: png_view(mask_view(**states[i][1], seq_len=seq_len, seed=seed)),
    )
