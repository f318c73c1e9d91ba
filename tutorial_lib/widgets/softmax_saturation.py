"""Why Eq. (1) divides by √d_k (chapter 03): the variance of q·k, softmax saturation, and the vanishing gradient.

Pure functions return numbers and figures; :func:`softmax_saturation_widget` is a thin ipywidgets wrapper over them.
Figures are built with :class:`matplotlib.figure.Figure`, not ``pyplot``, so that nothing is shown or kept alive
behind the caller's back: a notebook shows one by ending a cell with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import ipywidgets as widgets
import torch
from jaxtyping import Float
from matplotlib.figure import Figure
from torch import Tensor

from tutorial_lib.widgets._live import live_states, png_view
from tutorial_lib.widgets._plotting import figure_png, new_figure


@dataclass(frozen=True)
class SoftmaxStats:
    """The softmax of a batch of score rows, how peaked it is, and how much gradient flows back through it."""

    weights: Float[Tensor, "*batch key_pos"]
    entropy: Float[Tensor, "*batch"]  # nats; log(key_pos) for a uniform row, 0 for a one-hot row
    grad_norm: Float[Tensor, "*batch"]  # ‖∂L/∂scores‖ for an upstream gradient ∂L/∂weights = ``upstream``


def softmax_stats(
    scores: Float[Tensor, "*batch key_pos"], upstream: Float[Tensor, "*batch key_pos"]
) -> SoftmaxStats:
    """Softmax over the last axis, its entropy, and the norm of the gradient it passes back to the scores.

    The gradient is measured with autograd: ``L = Σ weights · upstream``, so ``∂L/∂scores = J · upstream`` with
    ``J = diag(p) − p pᵀ``, the softmax Jacobian, which vanishes as ``p`` approaches a one-hot vector.
    """
    if scores.shape != upstream.shape:
        raise ValueError(f"upstream must have the shape of scores {tuple(scores.shape)}, got {tuple(upstream.shape)}")
    scores = scores.detach().clone().requires_grad_(True)
    weights = torch.softmax(scores, dim=-1)
    (weights * upstream).sum().backward()
    weights = weights.detach()
    # xlogy gives 0·log 0 = 0, so a saturated row has entropy 0 instead of NaN.
    entropy = -torch.special.xlogy(weights, weights).sum(dim=-1)
    return SoftmaxStats(weights=weights, entropy=entropy, grad_norm=scores.grad.norm(dim=-1))


def random_scores(
    d_head: int, *, scaled: bool, n_queries: int = 256, n_keys: int = 16, seed: int = 0
) -> Float[Tensor, "query_pos key_pos"]:
    """Scores q·k (divided by √d_head when ``scaled``) of unit-variance random queries and keys.

    The same ``seed`` draws the same q and k whether ``scaled`` or not, so the two are compared on equal terms.
    """
    for name, value in (("d_head", d_head), ("n_queries", n_queries), ("n_keys", n_keys)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(n_queries, d_head, generator=generator)
    k = torch.randn(n_keys, d_head, generator=generator)
    scores = q @ k.T
    return scores / math.sqrt(d_head) if scaled else scores


def saturation(d_head: int, *, scaled: bool, n_queries: int = 256, n_keys: int = 16, seed: int = 0) -> SoftmaxStats:
    """:func:`softmax_stats` of :func:`random_scores`, with a unit-variance random upstream gradient."""
    scores = random_scores(d_head, scaled=scaled, n_queries=n_queries, n_keys=n_keys, seed=seed)
    # A separate stream, so the upstream gradient is the same for every d_head and for scaled or not.
    upstream = torch.randn(scores.shape, generator=torch.Generator().manual_seed(seed + 1))
    return softmax_stats(scores, upstream)


def qk_variance(d_heads: Sequence[int], *, n_samples: int = 20_000, seed: int = 0) -> dict[int, tuple[float, float]]:
    """Measured variance of q·k and of q·k/√d_k over ``n_samples`` pairs q, k with independent N(0, 1) entries.

    Returns ``{d_head: (var(q·k), var(q·k/√d_head))}``; the paper's footnote 4 predicts ``(d_head, 1)``.
    """
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 2:
        raise ValueError(f"n_samples must be an int >= 2, got {n_samples!r}")
    generator = torch.Generator().manual_seed(seed)
    variances = {}
    for d_head in d_heads:
        if isinstance(d_head, bool) or not isinstance(d_head, int) or d_head < 1:
            raise ValueError(f"d_heads must hold positive ints, got {d_head!r}")
        rows = max(1, 2**20 // d_head)  # draw in chunks of about a million numbers, to bound memory at large d_k
        dots = torch.cat(
            [
                (torch.randn(n, d_head, generator=generator, dtype=torch.float64)
                 * torch.randn(n, d_head, generator=generator, dtype=torch.float64)).sum(dim=-1)
                for n in (min(rows, n_samples - start) for start in range(0, n_samples, rows))
            ]
        )
        variances[d_head] = (dots.var().item(), (dots / math.sqrt(d_head)).var().item())
    return variances


def qk_variance_standard_error(d_head: int, n_samples: int) -> float:
    """Relative standard error of :func:`qk_variance`'s estimate, √((κ − 1)/n).

    q·k is a sum of ``d_head`` independent products of two N(0, 1), each of kurtosis 9, so its kurtosis is
    κ = 3 + 6/d_head.
    """
    return math.sqrt((2 + 6 / d_head) / n_samples)


def plot_qk_variance(variances: dict[int, tuple[float, float]]) -> Figure:
    """Log-log plot of :func:`qk_variance`: unscaled variance on the line var = d_k, scaled variance on var = 1."""
    d_heads = sorted(variances)
    fig, ax = new_figure(1, 1, figsize=(5.5, 3.6))
    ax.plot(d_heads, d_heads, color="0.6", linestyle="--", label="var = $d_k$ (predicted)")
    ax.axhline(1.0, color="0.6", linestyle=":", label="var = 1 (predicted)")
    ax.plot(d_heads, [variances[d][0] for d in d_heads], "o-", label=r"$q \cdot k$")
    ax.plot(d_heads, [variances[d][1] for d in d_heads], "s-", label=r"$q \cdot k / \sqrt{d_k}$")
    ax.set(xscale="log", yscale="log", xlabel="$d_k$", ylabel="variance", title="Variance of the attention scores")
    ax.set_xticks(d_heads, [str(d) for d in d_heads])
    ax.legend(fontsize="small")
    return fig


def _draw_distribution(ax, stats: SoftmaxStats, title: str) -> None:
    """Bar chart of the first query's attention weights, annotated with the means over all queries."""
    weights = stats.weights[0]
    ax.bar(range(weights.numel()), weights.numpy(), color="C0")
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize="medium")
    ax.text(
        0.98, 0.95,
        f"entropy {stats.entropy.mean():.2f} nats\n‖grad‖ {stats.grad_norm.mean():.3f}",
        transform=ax.transAxes, ha="right", va="top", fontsize="small",
    )


def plot_saturation_grid(d_heads: Sequence[int] = (4, 64, 512), *, n_keys: int = 16, seed: int = 0) -> Figure:
    """Small multiples: one query's attention weights, unscaled (left) and scaled (right), one row per d_k.

    Each panel also prints the entropy and gradient norm averaged over 256 queries: the static lesson of the widget.
    Two columns, so that the figure stays readable on a phone however many sizes it shows.
    """
    fig, axes = new_figure(len(d_heads), 2, figsize=(6.4, 0.4 + 2.1 * len(d_heads)), squeeze=False, sharey=True)
    for row, d_head in enumerate(d_heads):
        for column, scaled in enumerate((False, True)):
            stats = saturation(d_head, scaled=scaled, n_keys=n_keys, seed=seed)
            label = r"$q \cdot k / \sqrt{d_k}$" if scaled else r"$q \cdot k$"
            _draw_distribution(axes[row, column], stats, f"{label}, $d_k$ = {d_head}")
    for ax in axes[-1]:
        ax.set_xlabel("key position")
    for ax in axes[:, 0]:
        ax.set_ylabel("attention weight")
    return fig


D_HEAD_CHOICES = (1, 4, 16, 64, 512)  # the slider's stops: with scaled or not, 10 states drawn for the book


def saturation_view(d_head: int, scaled: bool, *, n_keys: int = 16, seed: int = 0) -> Figure:
    """The widget's picture for one state: one query's attention weights, with the entropy and gradient norm."""
    stats = saturation(d_head, scaled=scaled, n_keys=n_keys, seed=seed)
    fig, ax = new_figure(1, 1, figsize=(5.5, 3.2))
    label = "scaled" if scaled else "unscaled"
    _draw_distribution(ax, stats, f"one query's attention weights ({label}, d_k = {d_head})")
    ax.set(xlabel="key position", ylabel="attention weight")
    return fig


def softmax_saturation_widget(d_head: int = 512, scaled: bool = False, *, n_keys: int = 16, seed: int = 0) -> widgets.VBox:
    """Controls for d_k and scaled/unscaled over :func:`saturation`: the distribution, its entropy, its gradient.

    Every state is drawn now and switched in the browser (:func:`~tutorial_lib.widgets._live.live_states`), so the
    controls also work in the rendered book, with no kernel.
    """
    if d_head not in D_HEAD_CHOICES:
        raise ValueError(f"d_head must be one of {D_HEAD_CHOICES}, got {d_head!r}")
    scaled_toggle = widgets.ToggleButtons(
        options=[("q·k (unscaled)", False), ("q·k / √d_k (scaled)", True)], value=scaled, description="scores"
    )
    d_head_slider = widgets.SelectionSlider(options=D_HEAD_CHOICES, value=d_head, description="d_k")
    return live_states(
        [scaled_toggle, d_head_slider],
        lambda scaled_, d_head_: png_view(saturation_view(d_head_, scaled_, n_keys=n_keys, seed=seed)),
    )
