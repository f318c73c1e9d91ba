"""Where a GPT's parameters are (chapter 08): embeddings, attention, feed-forward and norms, across model sizes.

:func:`parameters_by_kind` sorts a model's distinct parameters (a tied matrix counts once) by what they do;
:func:`plot_parameter_split` draws the shares of several models side by side, with the ``12·n_layers·d_model²``
of their attention and feed-forward weight matrices marked.
"""

from __future__ import annotations

from collections.abc import Mapping

from matplotlib.figure import Figure
from torch import nn

from tutorial_lib.widgets._plotting import new_figure

# Attention and feed-forward first: stacked from the bottom, their top is the 12·n_layers·d_model² tick.
KINDS = ("attention", "feed-forward", "norms", "position embedding", "token embedding", "unembedding")
KIND_COLORS = dict(zip(KINDS, ("tab:blue", "tab:orange", "tab:grey", "tab:cyan", "tab:olive", "tab:purple")))


def _kind(name: str) -> str:
    """The kind of the parameter ``name`` of a :class:`~tutorial_lib.models.gpt.GPT`."""
    if name.startswith("embed."):
        return "token embedding"
    if name.startswith("pos_embed."):
        return "position embedding"
    if name.startswith("unembed."):  # only when untied: a tied matrix is listed once, as embed.weight
        return "unembedding"
    if name.startswith("ln_final.") or ".norm" in name:
        return "norms"
    if ".attn." in name:
        return "attention"
    if ".ffn." in name:
        return "feed-forward"
    raise ValueError(f"parameter {name!r} is not one of a GPT's: expected embed, pos_embed, blocks.*.attn, "
                     "blocks.*.ffn, a norm, ln_final or unembed")


def parameters_by_kind(model: nn.Module) -> dict[str, int]:
    """Distinct parameters of a GPT by kind, in the order of :data:`KINDS` (kinds the model lacks are 0).

    Works on a model built on the meta device. ``named_parameters`` yields a shared (tied) tensor once, under the
    name of the first module that holds it.
    """
    counts = dict.fromkeys(KINDS, 0)
    for name, parameter in model.named_parameters():
        counts[_kind(name)] += parameter.numel()
    return counts


def plot_parameter_split(
    splits: Mapping[str, Mapping[str, int]], matrices: Mapping[str, int] | None = None
) -> Figure:
    """A bar per model (``{label: parameters_by_kind(model)}``), stacked by kind, as shares of the model's total.

    ``matrices`` (``{label: 12·n_layers·d_model²}``) adds each model's share of attention and feed-forward weight
    matrices as a black tick with its percentage.
    """
    if not splits:
        raise ValueError("splits must hold at least one model")
    labels = list(splits)
    fig, ax = new_figure(1, 1, figsize=(5.6, 3.6))  # with the legend beside it, narrow enough for a phone
    bottoms = [0.0] * len(labels)
    for kind in KINDS:
        shares = [splits[label].get(kind, 0) / sum(splits[label].values()) for label in labels]
        if not any(shares):
            continue
        ax.bar(labels, shares, bottom=bottoms, color=KIND_COLORS[kind], label=kind, width=0.6)
        bottoms = [b + s for b, s in zip(bottoms, shares)]
    if matrices is not None:
        for x, label in enumerate(labels):
            share = matrices[label] / sum(splits[label].values())
            ax.plot([x - 0.3, x + 0.3], [share, share], color="black", linewidth=2)
            ax.annotate(f"12·L·d² = {share:.0%}", (x, share), xytext=(0, 4), textcoords="offset points",
                        ha="center", fontsize=8)
    ax.set_ylabel("share of the parameters")
    ax.set_ylim(0, 1.12)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    return fig
