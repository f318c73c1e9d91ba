"""Where a model trained on the copying task looks (chapter 13): softmax attention against linear attention.

The inputs are ``x_1 … x_L, SEP, x_1 … x_(L-1)`` (``2·L`` positions) and position ``p`` predicts token ``p + 1``. From
the separator on (``p >= L``) that token is a copy of the symbol at position ``p - L``: the copy is a lookup ``L``
positions back, the same for every query. :func:`copy_head_scores` measures, for every head, the mean weight that the
copy's queries put on that source key; :func:`plot_copy_heads` draws the best head of each model.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from jaxtyping import Float
from matplotlib.figure import Figure
from torch import Tensor

from tutorial_lib.widgets._plotting import new_figure


def copy_head_scores(patterns: Float[Tensor, "batch n_layers n_heads query_pos key_pos"], length: int) -> Float[Tensor, "n_layers n_heads"]:
    """Per head, the mean weight that query ``p`` (``length <= p < 2·length``) puts on key ``p - length``, the position
    holding the symbol it must predict (1 for a perfect copying head; about ``1 / p`` for a head spreading its weight)."""
    if patterns.dim() != 5:
        raise ValueError(f"patterns must have shape (batch, n_layers, n_heads, query_pos, key_pos), got {tuple(patterns.shape)}")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1 or 2 * length > patterns.shape[-2]:
        raise ValueError(f"length must be a positive int with 2·length <= query_pos={patterns.shape[-2]}, got {length!r}")
    queries = torch.arange(length, 2 * length)
    return patterns[..., queries, queries - length].mean(dim=(0, -1))


def plot_copy_heads(patterns: Mapping[str, Float[Tensor, "query_pos key_pos"]], length: int) -> Figure:
    """One attention pattern per model (stacked, for phone width), with the source keys the copy must read outlined."""
    if not patterns:
        raise ValueError("patterns must name at least one model")
    fig, axes = new_figure(len(patterns), 1, figsize=(4.6, 4.4 * len(patterns)), squeeze=False)
    queries = torch.arange(length, 2 * length)
    for ax, (title, pattern) in zip(axes[:, 0], patterns.items()):
        ax.imshow(pattern.detach().numpy(), cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
        ax.scatter((queries - length).numpy(), queries.numpy(), s=14, facecolors="none", edgecolors="tab:red",
                   linewidths=0.8, label="the key to copy")
        ax.axvline(length - 0.5, color="grey", linewidth=0.8)
        ax.axhline(length - 0.5, color="grey", linewidth=0.8)
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("key position (string | SEP, copy)", fontsize=10)
        ax.set_ylabel("query position", fontsize=10)
    axes[0, 0].legend(fontsize=9, loc="upper right")
    return fig
