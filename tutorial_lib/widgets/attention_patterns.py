"""Chapter 04's figures: what every head of a trained GPT attends to, and measurements that describe a head.

:func:`attention_patterns` runs a GPT on tokens through the readable attention path and returns every head's weights;
:func:`head_scores` measures, for every head, how much weight it puts on the previous token and on word boundaries,
next to what a head spreading its weight evenly over the past would give; :func:`plot_head_grid` draws every head on
one line of text (the book's static rendering), :func:`plot_head` one head with the characters as labels, and
:func:`attention_pattern_widget` lets a reader pick the layer and head (in the rendered book too: every head is
drawn when the notebook runs).
"""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as widgets
import torch
from jaxtyping import Float, Int
from matplotlib.figure import Figure
from torch import Tensor

from tutorial_lib.models.gpt import GPT
from tutorial_lib.widgets._live import MAX_STATES, live_states, png_view
from tutorial_lib.widgets._plotting import new_figure


@torch.no_grad()
def attention_patterns(model: GPT, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch n_layers n_heads query_pos key_pos"]:
    """Every head's attention weights on ``tokens``: the blocks are run as ``model`` runs them, and each attention
    layer once more through its readable path (:meth:`~tutorial_lib.multi_head.MultiHeadAttention.forward_with_weights`)
    on the same normalised input, to read its weights."""
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape (batch, seq), got {tuple(tokens.shape)}")
    if model.cfg.placement.value != "pre":
        raise ValueError(f"attention_patterns reads pre-norm blocks, got placement {model.cfg.placement.value!r}")
    x = model.embed(tokens) + model.pos_embed(tokens.shape[1])
    weights = []
    for block in model.blocks:
        _, w = block.attn.forward_with_weights(block.attn_residual.norm(x), causal=True)
        weights.append(w)
        x = block(x, causal=True)
    return torch.stack(weights, dim=1)


def head_scores(patterns: Float[Tensor, "batch n_layers n_heads query_pos key_pos"], tokens: Int[Tensor, "batch seq"],
                boundary_ids: Sequence[int]) -> dict[str, Float[Tensor, "n_layers n_heads"]]:
    """Per head, averaged over the batch and the queries:

    - ``"previous token"``: the weight on key t - 1 (queries t ≥ 1);
    - ``"word boundary"``: the total weight on keys that are a space or a newline (``boundary_ids``);

    and, for each, ``"... (even)"``: the same measure for a head that spreads its weight evenly over the keys it may
    see (1 / (t + 1) on each), the baseline a head must beat to be described by it."""
    batch, n_layers, n_heads, seq, _ = patterns.shape
    if tokens.shape != (batch, seq):
        raise ValueError(f"tokens must have shape {(batch, seq)} to match the patterns, got {tuple(tokens.shape)}")
    t = torch.arange(1, seq)
    even = torch.tril(torch.ones(seq, seq)) / torch.arange(1, seq + 1)[:, None]  # (query_pos, key_pos)
    boundary = torch.isin(tokens, torch.tensor(list(boundary_ids))).to(patterns.dtype)  # (batch, key_pos)
    return {
        "previous token": patterns[..., t, t - 1].mean(dim=(0, -1)),
        "previous token (even)": even[t, t - 1].mean().expand(n_layers, n_heads),
        "word boundary": (patterns * boundary[:, None, None, None, :]).sum(-1).mean(dim=(0, -1)),
        "word boundary (even)": (even * boundary[:, None, :]).sum(-1).mean().expand(n_layers, n_heads),
    }


def _draw(ax, pattern: Tensor, labels: Sequence[str] | None, title: str) -> None:
    ax.imshow(pattern.numpy(), cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
    ax.set_title(title, fontsize="small", pad=2)
    if labels is None:
        ax.set_xticks([])
        ax.set_yticks([])
    else:
        ticks = range(len(labels))
        ax.set_xticks(ticks, labels, fontsize=7, family="monospace")
        ax.set_yticks(ticks, labels, fontsize=7, family="monospace")
        ax.set_xlabel("key (what is read)")
        ax.set_ylabel("query (who reads)")


def _shown(text: str) -> list[str]:
    return ["␣" if c == " " else "↵" if c == "\n" else c for c in text]


def plot_head_grid(pattern: Float[Tensor, "n_layers n_heads query_pos key_pos"], *,
                   marked: Sequence[tuple[int, int]] = ()) -> Figure:
    """Every head of every layer on one sequence, a small heatmap each (row = query, column = key; dark = weight);
    the ``marked`` heads (layer, head) get a red frame."""
    n_layers, n_heads = pattern.shape[:2]
    fig, axes = new_figure(n_layers, n_heads, figsize=(1.55 * n_heads, 1.6 * n_layers), squeeze=False)
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer, head]
            _draw(ax, pattern[layer, head], None, f"layer {layer} head {head}")
            if (layer, head) in marked:
                for spine in ax.spines.values():
                    spine.set_edgecolor("red")
                    spine.set_linewidth(2.5)
    # The title is also the figure's text alternative (figure_alt), which would otherwise only list the panels.
    # Two lines, so that the title does not widen the figure beyond a phone's screen.
    fig.suptitle(f"Attention weights of all {n_layers * n_heads} heads on one text\n(row: query, column: key"
                 + ("; marked heads framed in red)" if marked else ")"), fontsize="medium")
    return fig


def plot_head(pattern: Float[Tensor, "query_pos key_pos"], text: str, *, title: str = "") -> Figure:
    """One head on ``text``: each row is a character reading the characters to its left."""
    if pattern.shape != (len(text), len(text)):
        raise ValueError(f"pattern must be ({len(text)}, {len(text)}) for a text of {len(text)} characters, "
                         f"got {tuple(pattern.shape)}")
    fig, ax = new_figure(1, 1, figsize=(5.0, 5.0))
    _draw(ax, pattern, _shown(text), title)
    return fig


def attention_pattern_widget(model: GPT, tokens: Int[Tensor, " seq"], text: str, *, layer: int = 0,
                             head: int = 0) -> widgets.VBox:
    """Layer and head as sliders over one line of text; the chosen head's weights, characters as labels.

    Every head is drawn now and switched in the browser (:func:`~tutorial_lib.widgets._live.live_states`), so the
    sliders also work in the rendered book, with no kernel.
    """
    if tokens.ndim != 1 or tokens.numel() != len(text):
        raise ValueError(f"tokens must be 1-D with one token per character of text ({len(text)}), "
                         f"got shape {tuple(tokens.shape)}")
    pattern = attention_patterns(model, tokens[None])[0]
    n_layers, n_heads = pattern.shape[:2]
    if n_layers * n_heads > MAX_STATES:
        raise ValueError(f"model must have at most {MAX_STATES} heads in all to draw each, has {n_layers * n_heads}")
    for name, value, count in (("layer", layer, n_layers), ("head", head, n_heads)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count:
            raise ValueError(f"{name} must be an int in [0, {count - 1}], got {value!r}")
    layer_slider = widgets.SelectionSlider(options=range(n_layers), value=layer, description="layer")
    head_slider = widgets.SelectionSlider(options=range(n_heads), value=head, description="head")
    return live_states(
        [layer_slider, head_slider],
        lambda layer_, head_: png_view(plot_head(pattern[layer_, head_], text, title=f"layer {layer_}, head {head_}")),
    )
