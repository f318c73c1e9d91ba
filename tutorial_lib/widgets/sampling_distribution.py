"""What temperature, top-k and top-p do to a next-token distribution (chapter 10).

Pure functions turn a model's next-token logits into the distribution :func:`~tutorial_lib.sampling.sample_next_token`
draws from, and draw it; :func:`sampling_distribution_widget` draws :func:`plot_sampling_distribution` for a few
temperatures and filters, switched in the browser, and :func:`plot_sampling_grid` is the static small multiples.
"""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as widgets
import torch
from jaxtyping import Float, Int
from matplotlib.figure import Figure
from torch import Tensor, nn

from tutorial_lib.sampling import apply_temperature, top_k_filter, top_p_filter
from tutorial_lib.widgets._live import live_states, png_view
from tutorial_lib.widgets._plotting import new_figure

# How a character is written under its bar: whitespace would be invisible.
_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥"}
# The grid of the static figure: (label, top_k, top_p).
DEFAULT_FILTERS = (("no filter", None, None), ("top-k = 5", 5, None), ("top-p = 0.9", None, 0.9))
# The widget's temperature stops (0 = greedy): with the three filters, 15 states drawn for the book.
WIDGET_TEMPERATURES = (0.0, 0.5, 1.0, 2.0, 3.0)


@torch.no_grad()
def next_token_logits(model: nn.Module, tokens: Int[Tensor, " seq"]) -> Float[Tensor, " d_vocab"]:
    """A GPT's logits for the token after ``tokens`` (the last ``model.cfg.n_ctx`` of them), in eval mode, returned on
    the CPU."""
    if tokens.dim() != 1 or tokens.numel() < 1:
        raise ValueError(f"tokens must be a non-empty 1-D tensor of token ids, got shape {tuple(tokens.shape)}")
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        logits = model(tokens[-model.cfg.n_ctx :][None].to(device))[0, -1]
    finally:
        model.train(was_training)
    return logits.float().cpu()


def filtered_distribution(
    logits: Float[Tensor, " d_vocab"],
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> Float[Tensor, " d_vocab"]:
    """The distribution ``sample_next_token`` draws from: softmax of the logits divided by ``temperature``, filtered
    by top-k, then top-p, renormalised. ``temperature=0`` is greedy: all the mass on the argmax."""
    if logits.dim() != 1:
        raise ValueError(f"logits must be 1-D (d_vocab,), got shape {tuple(logits.shape)}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    if temperature == 0:
        return nn.functional.one_hot(logits.argmax(), logits.numel()).to(logits.dtype)
    scaled = apply_temperature(logits[None], temperature)
    if top_k is not None:
        scaled = top_k_filter(scaled, top_k)
    if top_p is not None:
        scaled = top_p_filter(scaled, top_p)
    return torch.softmax(scaled, dim=-1)[0]


def entropy(probs: Float[Tensor, "*batch d_vocab"]) -> Float[Tensor, "*batch"]:
    """Entropy in nats; 0·log 0 counts as 0, so a one-hot distribution has entropy 0."""
    return -torch.special.xlogy(probs, probs).sum(dim=-1)


def visible_label(token: str) -> str:
    """A token as written under its bar: space, newline and tab get a visible symbol."""
    return "".join(_VISIBLE.get(char, char) for char in token)


def _filter_text(top_k: int | None, top_p: float | None) -> str:
    parts = ([f"top-k {top_k}"] if top_k is not None else []) + ([f"top-p {top_p:g}"] if top_p is not None else [])
    return ", ".join(parts) or "no filter"


def _draw(
    ax,
    logits: Tensor,
    labels: Sequence[str],
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    n_shown: int,
    title: str | None,
) -> float:
    """Bars of the filtered distribution over the ``n_shown`` most likely tokens (in the model's own order); returns
    the tallest bar's height, for the caller's y-axis.

    Behind each bar, in grey, the probability at this temperature before filtering: what the filters cut away.
    """
    order = torch.argsort(logits, descending=True, stable=True)[:n_shown]  # temperature never changes the order
    unfiltered = filtered_distribution(logits, temperature=temperature) if temperature > 0 else None
    probs = filtered_distribution(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    kept = probs > 0
    x = range(len(order))
    if unfiltered is not None:
        ax.bar(x, unfiltered[order].numpy(), color="0.85", width=0.8, label="before the filters")
    ax.bar(x, probs[order].numpy(), color="C0", width=0.55, label="kept, renormalised")
    ax.set_xticks(list(x), [visible_label(labels[i]) for i in order], fontsize="small")
    ax.set_xlim(-0.6, len(order) - 0.4)
    heading = "greedy (T = 0)" if temperature == 0 else f"T = {temperature:g}, {_filter_text(top_k, top_p)}"
    ax.set_title(title or heading, fontsize="medium")
    ax.text(
        0.98, 0.95, f"{int(kept.sum())} kept\nentropy {entropy(probs):.2f} nats",
        transform=ax.transAxes, ha="right", va="top", fontsize="small",
    )
    return max(probs.max().item(), 0.0 if unfiltered is None else unfiltered.max().item())


def _y_limit(tallest: float) -> float:
    """Room above the tallest bar for the panel's text, never above 1."""
    return min(1.0, 1.35 * tallest)


def _check_labels(logits: Tensor, labels: Sequence[str], n_shown: int) -> None:
    if logits.dim() != 1:
        raise ValueError(f"logits must be 1-D (d_vocab,), got shape {tuple(logits.shape)}")
    if len(labels) != logits.numel():
        raise ValueError(f"labels must name every token: {logits.numel()} logits but {len(labels)} labels")
    if isinstance(n_shown, bool) or not isinstance(n_shown, int) or n_shown < 1:
        raise ValueError(f"n_shown must be a positive int, got {n_shown!r}")


def plot_sampling_distribution(
    logits: Float[Tensor, " d_vocab"],
    labels: Sequence[str],
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    n_shown: int = 20,
    title: str | None = None,
) -> Figure:
    """One panel: the filtered, renormalised next-token distribution, kept tokens in colour, with the number kept
    and the entropy."""
    _check_labels(logits, labels, n_shown)
    fig, ax = new_figure(1, 1, figsize=(6.4, 3.2))
    tallest = _draw(ax, logits, labels, temperature, top_k, top_p, n_shown, title)
    ax.set_ylim(0, _y_limit(tallest))
    ax.set(xlabel="next character (most likely first)", ylabel="probability")
    ax.legend(loc="center right", fontsize="small")
    return fig


def plot_sampling_grid(
    logits: Float[Tensor, " d_vocab"],
    labels: Sequence[str],
    *,
    temperatures: Sequence[float] = (0.5, 1.0, 1.5),
    filters: Sequence[tuple[str, int | None, float | None]] = DEFAULT_FILTERS,
    n_shown: int = 15,
) -> Figure:
    """Small multiples: one row per temperature, one column per filter ``(label, top_k, top_p)``; narrow panels, so
    that three columns stay readable on a phone."""
    _check_labels(logits, labels, n_shown)
    fig, axes = new_figure(
        len(temperatures), len(filters), figsize=(2.2 * len(filters), 2.2 * len(temperatures)),
        squeeze=False, sharey=True,
    )
    tallest = max(
        _draw(axes[row, column], logits, labels, temperature, top_k, top_p, n_shown, f"T = {temperature:g}, {label}")
        for row, temperature in enumerate(temperatures)
        for column, (label, top_k, top_p) in enumerate(filters)
    )
    axes[0, 0].set_ylim(0, _y_limit(tallest))  # shared by every panel
    for ax in axes[:, 0]:
        ax.set_ylabel("probability")
    return fig


def plot_entropy_vs_temperature(logits: Float[Tensor, " d_vocab"], temperatures: Sequence[float]) -> Figure:
    """Entropy of softmax(logits / T) against T (log scale), between its limits: 0 (greedy) and ln d_vocab (uniform)."""
    if logits.dim() != 1:
        raise ValueError(f"logits must be 1-D (d_vocab,), got shape {tuple(logits.shape)}")
    if not temperatures or min(temperatures) <= 0:
        raise ValueError(f"temperatures must be a non-empty sequence of positive numbers, got {temperatures!r}")
    values = [entropy(filtered_distribution(logits, temperature=t)).item() for t in temperatures]
    fig, ax = new_figure(1, 1, figsize=(5.5, 3.2))
    ax.plot(temperatures, values, "o-", label="entropy of softmax(logits / T)")
    ax.axhline(torch.log(torch.tensor(float(logits.numel()))).item(), color="0.6", linestyle="--",
               label=f"ln {logits.numel()} (uniform: T → ∞)")
    ax.axhline(0.0, color="0.6", linestyle=":", label="0 (greedy: T → 0)")
    ax.axvline(1.0, color="C1", linewidth=0.8, label="T = 1: the model's own distribution")
    ax.set(xscale="log", xlabel="temperature T", ylabel="entropy (nats)",
           title="Entropy of the next-token distribution")
    ax.legend(fontsize="small")
    return fig


def plot_nucleus_sizes(
    sizes: Int[Tensor, " seq"], labels: Sequence[str], *, top_p: float, top_k: int | None = None, per_row: int = 32
) -> Figure:
    """Bar chart of the nucleus size at each position of a text, the character that follows under each bar; a line
    at ``top_k``, the size top-k would use everywhere. A long text wraps onto several rows of at most
    ``per_row`` positions (as text does), so that the figure stays readable on a phone."""
    if sizes.dim() != 1 or len(labels) != sizes.numel():
        raise ValueError(
            f"sizes must be 1-D with one label per position: {tuple(sizes.shape)} sizes, {len(labels)} labels"
        )
    if isinstance(per_row, bool) or not isinstance(per_row, int) or per_row < 1:
        raise ValueError(f"per_row must be a positive int, got {per_row!r}")
    n_rows = -(-sizes.numel() // per_row)
    fig, axes = new_figure(n_rows, 1, figsize=(6.4, 0.5 + 2.2 * n_rows), squeeze=False, sharey=True)
    for row, ax in enumerate(axes[:, 0]):
        start = row * per_row
        chunk = sizes[start : start + per_row]
        ax.bar(range(chunk.numel()), chunk.numpy(), color="C0", width=0.8)
        if top_k is not None:
            ax.axhline(top_k, color="C1", linestyle="--", label=f"top-k = {top_k}")
        ax.set_xticks(range(chunk.numel()), [visible_label(label) for label in labels[start : start + per_row]],
                      fontsize="small")
        ax.set_xlim(-0.6, per_row - 0.4)  # every row on the same scale, the last one shorter
        ax.set_ylabel("tokens in the nucleus")
    if top_k is not None:
        axes[0, 0].legend(loc="upper right", fontsize="small")
    axes[-1, 0].set_xlabel("the character to predict")
    axes[0, 0].set_title(f"Nucleus size at top-p = {top_p:g}, position by position")
    return fig


def sampling_distribution_widget(
    logits: Float[Tensor, " d_vocab"],
    labels: Sequence[str],
    *,
    temperature: float = 1.0,
    filter_name: str = "no filter",
    filters: Sequence[tuple[str, int | None, float | None]] = DEFAULT_FILTERS,
    n_shown: int = 20,
) -> widgets.VBox:
    """A temperature slider (0 = greedy) and the filters ``(label, top_k, top_p)`` as buttons, over one fixed
    next-token distribution drawn by :func:`plot_sampling_distribution`.

    Every state is drawn now and switched in the browser (:func:`~tutorial_lib.widgets._live.live_states`), so the
    controls also work in the rendered book, with no kernel.
    """
    _check_labels(logits, labels, n_shown)
    d_vocab = logits.numel()
    if temperature not in WIDGET_TEMPERATURES:
        raise ValueError(f"temperature must be one of {WIDGET_TEMPERATURES}, got {temperature!r}")
    filters = tuple(filters)
    if not filters or len({label for label, _, _ in filters}) != len(filters):
        raise ValueError(f"filters must be a non-empty sequence of (label, top_k, top_p) with distinct labels, got {filters!r}")
    for label, top_k, top_p in filters:
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k < d_vocab):
            raise ValueError(f"filters: {label!r} has top_k {top_k!r}; it must be an int in [1, {d_vocab - 1}] or None")
        if top_p is not None and not 0 < top_p < 1:
            raise ValueError(f"filters: {label!r} has top_p {top_p!r}; it must lie in (0, 1) or be None")
    by_label = {label: (top_k, top_p) for label, top_k, top_p in filters}
    if filter_name not in by_label:
        raise ValueError(f"filter_name must be one of the filters' labels {list(by_label)}, got {filter_name!r}")

    def view(label: str, temperature_: float) -> widgets.HTML:
        top_k, top_p = by_label[label]
        # Greedy ignores the filters: the title says which one is selected, so that every state names itself.
        title = f"greedy (T = 0), {label}: the filters change nothing" if temperature_ == 0 else None
        return png_view(plot_sampling_distribution(logits, labels, temperature=temperature_, top_k=top_k, top_p=top_p,
                                                   n_shown=n_shown, title=title))

    filter_buttons = widgets.ToggleButtons(options=list(by_label), value=filter_name, description="filter")
    temperature_slider = widgets.SelectionSlider(
        options=[(f"{t:g}", t) for t in WIDGET_TEMPERATURES], value=temperature, description="temperature"
    )
    temperature_slider.style.description_width = "initial"
    return live_states([filter_buttons, temperature_slider], view)


__all__ = [
    "DEFAULT_FILTERS",
    "entropy",
    "filtered_distribution",
    "next_token_logits",
    "plot_entropy_vs_temperature",
    "plot_nucleus_sizes",
    "plot_sampling_distribution",
    "plot_sampling_grid",
    "sampling_distribution_widget",
    "visible_label",
]
