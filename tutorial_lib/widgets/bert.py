"""Chapter 14's figures: BERT's masking measured over many draws, the pre-training curves, and what ``[CLS]`` reads.

* :func:`masking_statistics` draws :func:`~tutorial_lib.models.bert.mask_tokens` many times on one batch and counts
  what happened; :func:`plot_masking_statistics` draws the shares against the 15% · 80/10/10 rule and the random
  replacements against a uniform draw.
* :func:`plot_pretraining` draws the measurements that :func:`~tutorial_lib.recipes.bert.train_tiny_bert` records.
* :func:`bert_attention` returns every head's attention weights of a BERT on a batch; :func:`cls_attention_shares`
  measures where the ``[CLS]`` query puts its weight (segment A, the boundary, segment B), next to what a query
  spreading its weight evenly would give; :func:`plot_cls_attention` draws the ``[CLS]`` row of every layer on one
  pair, and :func:`cls_attention_widget` draws it for every pair and head, switched in the browser.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import ipywidgets as widgets
import torch
from jaxtyping import Float, Int
from matplotlib.figure import Figure
from torch import Tensor

from tutorial_lib.attention import padding_mask
from tutorial_lib.models.bert import BERT, IGNORE_INDEX, mask_tokens
from tutorial_lib.widgets._live import live_states, png_view
from tutorial_lib.widgets._plotting import new_figure

# --- masking -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MaskingStats:
    """Counts over ``n_draws`` maskings of the same tokens. A chosen token is *shown* as ``[MASK]``, as another token
    (a random replacement that differs from it), or as itself (kept, or replaced by a random draw of itself)."""

    n_draws: int
    p: float
    n_ordinary: int  # ordinary (non-special) token positions, over all draws
    n_special: int
    chosen: int  # ordinary positions chosen
    special_chosen: int  # special positions chosen (should be 0)
    shown_mask: int
    shown_random: int
    shown_original: int
    changed_unchosen: int  # positions changed in the input that were not chosen (should be 0)
    replacements: Int[Tensor, " d_vocab"]  # how often each id appeared as a random replacement
    ordinary_ids: Int[Tensor, " n_ids"]

    @property
    def expected(self) -> dict[str, float]:
        """The rule's shares: p of the ordinary tokens chosen; of those 80% [MASK], 10% a random ordinary token
        (which is the original itself with probability 1 / len(ordinary_ids)), 10% kept."""
        same = 1 / len(self.ordinary_ids)
        return {"chosen": self.p, "mask": 0.8, "random": 0.1 * (1 - same), "original": 0.1 + 0.1 * same}

    @property
    def measured(self) -> dict[str, float]:
        return {"chosen": self.chosen / self.n_ordinary, "mask": self.shown_mask / self.chosen,
                "random": self.shown_random / self.chosen, "original": self.shown_original / self.chosen}

    @property
    def standard_errors(self) -> dict[str, float]:
        """The binomial standard error of each measured share, sqrt(q (1 - q) / n), at the expected q."""
        expected = self.expected
        sizes = {"chosen": self.n_ordinary, "mask": self.chosen, "random": self.chosen, "original": self.chosen}
        return {name: math.sqrt(expected[name] * (1 - expected[name]) / sizes[name]) for name in expected}


def masking_statistics(
    tokens: Int[Tensor, "batch seq"],
    mask_id: int,
    d_vocab: int,
    special_ids: Sequence[int],
    *,
    n_draws: int,
    seed: int = 0,
    p: float = 0.15,
) -> MaskingStats:
    """Mask ``tokens`` ``n_draws`` times with :func:`mask_tokens` (one generator seeded by ``seed``) and count."""
    if isinstance(n_draws, bool) or not isinstance(n_draws, int) or n_draws < 1:
        raise ValueError(f"n_draws must be a positive int, got {n_draws!r}")
    generator = torch.Generator().manual_seed(seed)
    special = torch.isin(tokens, torch.tensor(sorted(set(special_ids))))
    ordinary_ids = (~torch.isin(torch.arange(d_vocab), torch.tensor(sorted(set(special_ids))))).nonzero().squeeze(1)
    counts = dict.fromkeys(("chosen", "special_chosen", "mask", "random", "original", "changed_unchosen"), 0)
    replacements = torch.zeros(d_vocab, dtype=torch.long)
    for _ in range(n_draws):
        inputs, labels = mask_tokens(tokens, mask_id, d_vocab, special_ids, generator, p)
        chosen = labels != IGNORE_INDEX
        changed = inputs != tokens
        counts["chosen"] += int((chosen & ~special).sum())
        counts["special_chosen"] += int((chosen & special).sum())
        counts["mask"] += int((chosen & (inputs == mask_id)).sum())
        random = chosen & changed & (inputs != mask_id)
        counts["random"] += int(random.sum())
        counts["original"] += int((chosen & ~changed).sum())
        counts["changed_unchosen"] += int((~chosen & changed).sum())
        replacements += torch.bincount(inputs[random], minlength=d_vocab)
    return MaskingStats(n_draws, p, int((~special).sum()) * n_draws, int(special.sum()) * n_draws, counts["chosen"],
                        counts["special_chosen"], counts["mask"], counts["random"], counts["original"],
                        counts["changed_unchosen"], replacements, ordinary_ids)


def plot_masking_statistics(stats: MaskingStats) -> Figure:
    """Top: each measured share against the rule (the bar's whisker: ±3 standard errors). Bottom: how often each
    ordinary id was drawn as a replacement, as a histogram over the ids, against a Poisson law of the same mean (a
    uniform draw); the special ids' counts are printed in the title."""
    fig, (top, bottom) = new_figure(2, 1, figsize=(6.2, 5.6))
    names = {"chosen": "chosen / ordinary tokens", "mask": "[MASK] / chosen", "random": "random token / chosen",
             "original": "unchanged / chosen"}
    measured, expected, errors = stats.measured, stats.expected, stats.standard_errors
    y = range(len(names))
    top.barh(list(y), [measured[n] for n in names], xerr=[3 * errors[n] for n in names], color="tab:blue",
             alpha=0.7, label="measured", capsize=3)
    top.scatter([expected[n] for n in names], list(y), marker="|", s=400, color="black", label="the rule", zorder=3)
    top.set_yticks(list(y), list(names.values()))
    top.invert_yaxis()
    top.set_xlim(0, 1)
    top.set_xlabel("share")
    top.legend(loc="lower right", fontsize="small")
    top.set_title(f"{stats.n_draws} maskings: {stats.chosen:,} of {stats.n_ordinary:,} ordinary tokens chosen, "
                  f"{stats.special_chosen} of {stats.n_special:,} special", fontsize="small")
    counts = stats.replacements[stats.ordinary_ids].float()
    mean = counts.mean().item()
    high = int(counts.max().item()) + 1
    bottom.hist(counts.numpy(), bins=range(high + 1), color="tab:blue", alpha=0.7, align="left",
                label="ordinary ids")
    k = torch.arange(high + 1, dtype=torch.float64)
    poisson = torch.exp(k * math.log(mean) - mean - torch.lgamma(k + 1)) * len(counts)
    bottom.plot(k.numpy(), poisson.numpy(), color="black", label=f"Poisson, mean {mean:.1f}")
    special_counts = int(stats.replacements.sum() - counts.sum())
    bottom.set_xlabel("times drawn as a random replacement")
    bottom.set_ylabel("number of ids")
    bottom.set_title(f"random replacements: {int(counts.sum()):,} over {len(counts):,} ordinary ids, "
                     f"{special_counts} special", fontsize="small")
    bottom.legend(fontsize="small")
    return fig


# --- pre-training ------------------------------------------------------------------------------------------------------


def plot_pretraining(records: Mapping[str, dict], *, most_frequent: float, nsp_rule: float | None = None) -> Figure:
    """Three stacked panels over the updates of each run of ``records`` (name → record of ``train_tiny_bert``): MLM
    accuracy where the input shows ``[MASK]``, where it shows the original word (kept), and NSP accuracy; the
    baselines as dashed lines."""
    if not records:
        raise ValueError("records must hold at least one run")
    fig, axes = new_figure(3, 1, figsize=(6.2, 7.2), sharex=True)
    panels = (("mask_accuracy", "MLM accuracy at [MASK]"), ("kept_accuracy", "MLM accuracy at a kept word"),
              ("nsp_accuracy", "NSP accuracy"))
    for (key, title), ax in zip(panels, axes):
        for (name, record), color in zip(records.items(), ("tab:blue", "tab:red", "tab:green", "tab:purple")):
            points = [(0, math.nan)] + [(m["updates"], m[key]) for m in record["metrics"]]
            ax.plot([u for u, _ in points], [v for _, v in points], marker="o", ms=3, color=color, label=name)
        ax.set_title(title, fontsize="small")
        ax.set_ylabel("accuracy")
    axes[0].axhline(most_frequent, color="grey", ls="--", label="most frequent word")
    axes[1].axhline(most_frequent, color="grey", ls="--", label="most frequent word")
    axes[2].axhline(0.5, color="grey", ls="--", label="coin (50%)")
    if nsp_rule is not None:
        axes[2].axhline(nsp_rule, color="grey", ls=":", label="headings rule")
    for ax in axes:
        ax.legend(fontsize="x-small", loc="upper left")
    axes[-1].set_xlabel("updates")
    return fig


# --- attention ---------------------------------------------------------------------------------------------------------


@torch.no_grad()
def bert_attention(
    bert: BERT,
    tokens: Int[Tensor, "batch seq"],
    segments: Int[Tensor, "batch seq"],
    lengths: Int[Tensor, " batch"],
) -> Float[Tensor, "batch n_layers n_heads query_pos key_pos"]:
    """Every head's attention weights: the encoder is run as usual (padding masked), and each block's attention once
    more through its readable path (:meth:`~tutorial_lib.multi_head.MultiHeadAttention.forward_with_weights`) on the
    input that block received (post-norm: the block's input itself)."""
    if tokens.dim() != 2 or segments.shape != tokens.shape or lengths.shape != tokens.shape[:1]:
        raise ValueError(f"tokens and segments must be (batch, seq) and lengths (batch,), got {tuple(tokens.shape)}, "
                         f"{tuple(segments.shape)}, {tuple(lengths.shape)}")
    mask = padding_mask(lengths, tokens.shape[1])
    inputs: list[Tensor] = []
    hooks = [block.register_forward_pre_hook(lambda module, args: inputs.append(args[0])) for block in bert.blocks]
    was_training = bert.training
    bert.eval()
    try:
        bert(tokens, segments, mask=mask)
    finally:
        bert.train(was_training)
        for hook in hooks:
            hook.remove()
    return torch.stack([block.attn.forward_with_weights(x, mask=mask)[1] for block, x in zip(bert.blocks, inputs)], dim=1)


CLS_TARGETS = ("[CLS]", "A", "end of A", "[SEP] after A", "start of B", "B", "[SEP] at the end")


def _target_masks(segments: Tensor, lengths: Tensor) -> dict[str, Tensor]:
    """Boolean (batch, key_pos) masks of the parts of ``[CLS] A [SEP] B [SEP]`` (A and B hold at least one token)."""
    position = torch.arange(segments.shape[1])[None]
    real = position < lengths[:, None]
    first_sep = (real & (segments == 0)).sum(-1, keepdim=True) - 1  # segment 0 is [CLS] A [SEP]
    last = lengths[:, None] - 1
    return {
        "[CLS]": position == 0,
        "A": (position >= 1) & (position < first_sep - 1),
        "end of A": position == first_sep - 1,
        "[SEP] after A": position == first_sep,
        "start of B": position == first_sep + 1,
        "B": (position > first_sep + 1) & (position < last),
        "[SEP] at the end": position == last,
    }


def cls_attention_shares(
    weights: Float[Tensor, "batch n_layers n_heads query_pos key_pos"],
    segments: Int[Tensor, "batch seq"],
    lengths: Int[Tensor, " batch"],
) -> tuple[Float[Tensor, "n_layers n_targets"], Float[Tensor, " n_targets"]]:
    """Where the ``[CLS]`` query's weight goes, per layer (averaged over heads and pairs), on each part of the
    pair (:data:`CLS_TARGETS`: the last token of A and the first of B apart from the rest), and the share an even
    spread over the real tokens would give each part (its number of tokens over the length)."""
    masks = _target_masks(segments, lengths)
    row = weights[:, :, :, 0, :].mean(dim=2)  # (batch, n_layers, key_pos): the [CLS] query, heads averaged
    shares = torch.stack([(row * m[:, None, :]).sum(-1).mean(0) for m in masks.values()], dim=-1)
    even = torch.stack([(m.sum(-1) / lengths).float().mean() for m in masks.values()])
    return shares, even


def _shown(word: str) -> str:
    return word if len(word) <= 10 else word[:9] + "…"


def plot_cls_attention(weights: Float[Tensor, "n_layers key_pos"], labels: Sequence[str], *, title: str = "") -> Figure:
    """One pair: the ``[CLS]`` query's weight on each token (columns), one row per layer (dark = weight)."""
    n_layers, seq = weights.shape
    if len(labels) != seq:
        raise ValueError(f"labels must name the {seq} tokens, got {len(labels)}")
    # At most 7 inches (630 px at the figures' 90 dpi): wider, a phone shows the page's figures below legible size.
    fig, ax = new_figure(1, 1, figsize=(min(7.0, max(4.0, 0.24 * seq + 1.2)), 0.42 * n_layers + 1.6))
    ax.imshow(weights.numpy(), cmap="Blues", vmin=0, vmax=max(0.05, float(weights.max())), aspect="auto",
              interpolation="nearest")
    ax.set_xticks(range(seq), [_shown(w) for w in labels], rotation=90, fontsize=8, family="monospace")
    ax.set_yticks(range(n_layers), [f"layer {i}" for i in range(n_layers)], fontsize=8)
    ax.set_title(title, fontsize="small")
    ax.set_xlabel("token the [CLS] query reads", fontsize=8)  # the axes also make the figure's alt text
    ax.set_ylabel("layer", fontsize=8)
    return fig


def cls_attention_widget(
    weights: Float[Tensor, "batch n_layers n_heads query_pos key_pos"],
    labels: Sequence[Sequence[str]],
    titles: Sequence[str],
) -> widgets.VBox:
    """A pair (buttons 1, 2, ...; its title above its picture) and a head (or the mean over heads) as controls over
    :func:`plot_cls_attention`.

    Every state is drawn now and switched in the browser (:func:`~tutorial_lib.widgets._live.live_states`), so the
    controls also work in the rendered book, with no kernel.
    """
    if not len(labels) == len(titles) == weights.shape[0]:
        raise ValueError(f"labels and titles must have one entry per pair ({weights.shape[0]}), got {len(labels)} and "
                         f"{len(titles)}")
    pair = widgets.ToggleButtons(options=[(str(i + 1), i) for i in range(len(titles))], value=0, description="pair")
    head = widgets.ToggleButtons(options=["mean"] + [str(h) for h in range(weights.shape[2])], value="mean",
                                 description="head")

    def view(index: int, head_: str) -> widgets.HTML:
        n = len(labels[index])
        row = weights[index, :, :, 0, :n]  # (n_layers, n_heads, key_pos)
        row = row.mean(dim=1) if head_ == "mean" else row[:, int(head_)]
        return png_view(plot_cls_attention(row, labels[index], title=f"{titles[index]}, head {head_}"))

    return live_states([pair, head], view)
