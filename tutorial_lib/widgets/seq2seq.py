"""Figures of chapter 07: the label-smoothed target (§5.4), a training run, and the decoder's cross-attention.

Pure functions return tensors (:func:`smoothed_target`, :func:`smoothed_loss_curve`, :func:`cross_attention_weights`)
or figures (:func:`plot_label_smoothing`, :func:`plot_training_history`, :func:`plot_cross_attention`);
:func:`cross_attention_widget` is a thin ipywidgets wrapper over :func:`cross_attention_weights` and
:func:`plot_cross_attention` (every state drawn when the notebook runs, so it works in the rendered book too).
"""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as widgets
import torch
from jaxtyping import Float, Int
from matplotlib.figure import Figure
from torch import Tensor

from tutorial_lib.attention import padding_mask
from tutorial_lib.decoding import eval_mode
from tutorial_lib.models.transformer import Transformer
from tutorial_lib.recipes.date_transformer import DATE_VOCAB, normalise_dates
from tutorial_lib.widgets._live import live_states, png_view
from tutorial_lib.validation import is_int
from tutorial_lib.widgets._plotting import new_figure

# --- label smoothing -------------------------------------------------------------------------------------------------


def smoothed_target(target: int, d_vocab: int, smoothing: float) -> Float[Tensor, " d_vocab"]:
    """§5.4's target distribution for one position: ``(1 - ε)·one_hot(target) + ε/d_vocab`` (float64)."""
    if isinstance(d_vocab, bool) or not isinstance(d_vocab, int) or d_vocab < 2:
        raise ValueError(f"d_vocab must be an int >= 2, got {d_vocab!r}")
    if isinstance(target, bool) or not isinstance(target, int) or not 0 <= target < d_vocab:
        raise ValueError(f"target must be a token id in [0, d_vocab={d_vocab}), got {target!r}")
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing!r}")
    distribution = torch.full((d_vocab,), smoothing / d_vocab, dtype=torch.float64)
    distribution[target] += 1 - smoothing
    return distribution


def smoothed_loss_curve(
    p_target: Float[Tensor, " n"], d_vocab: int, smoothing: float
) -> Float[Tensor, " n"]:
    """The label-smoothed cross-entropy of a prediction that puts ``p_target`` on the right token and spreads the
    rest evenly over the ``d_vocab - 1`` others: what the loss asks of the model's confidence, in one curve.

    Without smoothing it falls to 0 as ``p_target → 1`` (the logits are pushed apart without end); with ε > 0 it is
    smallest at ``p_target = 1 - ε + ε/d_vocab``, the smoothed target itself, and rises again above it.
    """
    y = smoothed_target(0, d_vocab, smoothing)
    others = (1 - p_target) / (d_vocab - 1)
    return -(y[0] * p_target.log() + (1 - y[0]) * others.log())


def plot_label_smoothing(d_vocab: int, smoothing: float = 0.1, *, target: int = 5) -> Figure:
    """Two stacked panels: the one-hot and the smoothed target over the vocabulary (log scale), and the loss as a
    function of the probability the model puts on the right token, with and without smoothing."""
    fig, (top, bottom) = new_figure(2, 1, figsize=(6.0, 6.2))
    tokens = torch.arange(d_vocab)
    one_hot, smooth = smoothed_target(target, d_vocab, 0.0), smoothed_target(target, d_vocab, smoothing)
    top.bar(tokens - 0.2, one_hot.clamp_min(1e-5).numpy(), width=0.4, color="0.6", label="one-hot target (ε = 0)")
    top.bar(tokens + 0.2, smooth.numpy(), width=0.4, color="C0", label=f"smoothed target (ε = {smoothing})")
    top.set_yscale("log")
    top.set_ylim(1e-4, 2)
    top.set_xlabel(f"token id (the right one is {target})")
    top.set_ylabel("target probability")
    top.set_title(f"§5.4: (1 - ε)·one_hot + ε/{d_vocab}", fontsize="medium")
    top.legend(fontsize="small", loc="center right")
    p = torch.linspace(0.5, 1 - 1e-6, 2001, dtype=torch.float64)
    for eps, style in ((0.0, dict(color="0.4", linestyle="--")), (smoothing, dict(color="C0"))):
        bottom.plot(p.numpy(), smoothed_loss_curve(p, d_vocab, eps).numpy(), label=f"ε = {eps}", **style)
    best = 1 - smoothing + smoothing / d_vocab
    bottom.axvline(best, color="C0", linewidth=0.8, linestyle=":")
    bottom.annotate(f"minimum at p = {best:.3f}", (best, float(smoothed_loss_curve(torch.tensor([best], dtype=torch.float64), d_vocab, smoothing))),
                    xytext=(0.55, 0.6), textcoords="axes fraction", fontsize="small",
                    arrowprops=dict(arrowstyle="->", color="C0"))
    bottom.set_xlabel("probability the model gives the right token")
    bottom.set_ylabel("loss at this position")
    bottom.set_ylim(0, 1.5)
    bottom.legend(fontsize="small")
    return fig


# --- training ----------------------------------------------------------------------------------------------------------


def plot_training_history(history: dict, *, floor: float | None = None) -> Figure:
    """A run's losses (training, every logged update, and validation) above its learning rate, from the ``history``
    of a training record (``dataclasses.asdict`` of a :class:`~tutorial_lib.training.TrainHistory`). ``floor``, if
    given, is drawn as a dotted line (the smallest loss label smoothing allows, say)."""
    for key in ("steps", "train_loss", "lr", "eval_steps", "val_loss"):
        if key not in history:
            raise ValueError(f"history must hold {key!r} (a TrainHistory as a dict), got keys {sorted(history)}")
    fig, (top, bottom) = new_figure(2, 1, figsize=(6.0, 5.0), sharex=True)
    steps = [step + 1 for step in history["steps"]]  # the 0-based index of an update -> updates done
    top.plot(steps, history["train_loss"], color="C0", linewidth=0.6, alpha=0.7, label="training batch")
    top.plot(history["eval_steps"], history["val_loss"], "o-", color="C1", markersize=3, label="validation")
    if floor is not None:
        top.axhline(floor, color="0.4", linestyle=":", label="smallest possible")
    top.set_yscale("log")
    top.set_ylabel("loss (label-smoothed)")
    top.legend(fontsize="small")
    bottom.plot(steps, history["lr"], color="C2")
    bottom.set_ylabel("learning rate")
    bottom.set_xlabel("update")
    bottom.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    return fig


# --- cross-attention ------------------------------------------------------------------------------------------------


@torch.no_grad()
def cross_attention_weights(
    model: Transformer,
    src: Int[Tensor, "batch key_pos"],
    tgt_in: Int[Tensor, "batch query_pos"],
    src_lengths: Int[Tensor, " batch"] | None = None,
) -> tuple[Float[Tensor, "batch query_pos d_vocab"], Float[Tensor, "n_layers batch n_heads query_pos key_pos"]]:
    """The logits of teacher forcing and every decoder layer's cross-attention weights, in eval mode.

    The decoder's layers run as :class:`~tutorial_lib.blocks.DecoderBlock` runs them, with the cross-attention's
    readable path, which returns its weights; the logits equal ``model(src, tgt_in, src_lengths=...)`` (tested).
    Row ``t`` of a map is the query of target position ``t``, the one that predicts output character ``t``.
    """
    with eval_mode(model):
        src_mask = None if src_lengths is None else padding_mask(src_lengths, src.shape[1])
        memory = model.encode(src, src_mask)
        x = model._embed(model.tgt_embed, tgt_in)
        maps = []
        for layer in model.decoder.layers:

            def cross(h: Tensor, layer=layer) -> Tensor:
                out, weights = layer.cross_attn.forward_with_weights(h, memory, mask=src_mask)
                maps.append(weights)
                return out

            x = layer.self_attn_residual(x, lambda h, layer=layer: layer.self_attn(h, causal=True))
            x = layer.cross_attn_residual(x, cross)
            x = layer.ffn_residual(x, layer.ffn)
        logits = model.unembed(model.decoder.norm(x))
    return logits, torch.stack(maps)


def plot_cross_attention(
    maps: Sequence[Float[Tensor, "_query_pos _key_pos"]],  # each its own sizes
    sources: Sequence[Sequence[str]],
    outputs: Sequence[Sequence[str]],
    titles: Sequence[str] | None = None,
) -> Figure:
    """One heatmap per example, stacked: rows are the output tokens (the query that writes each), columns the
    source characters (the keys), each row a distribution over the source. ``sources`` and ``outputs`` hold the
    tick labels (a string is its characters); a map larger than its labels is cut to them (padding)."""
    if not (len(maps) == len(sources) == len(outputs)) or not maps:
        raise ValueError(f"maps, sources and outputs must be non-empty and of one length, got {len(maps)}, "
                         f"{len(sources)}, {len(outputs)}")
    titles = list(titles) if titles is not None else [""] * len(maps)
    height = sum(0.28 * len(o) + 1.0 for o in outputs)
    fig, axes = new_figure(len(maps), 1, figsize=(6.0, height), squeeze=False)
    for ax, weights, source, output, title in zip(axes[:, 0], maps, sources, outputs, titles):
        shown = weights[: len(output), : len(source)]
        image = ax.imshow(shown.numpy(), cmap="Blues", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(source)), list(source), fontsize="small")
        ax.set_yticks(range(len(output)), list(output), fontsize="small")
        ax.tick_params(length=0)
        ax.set_title(title, fontsize="medium")
        ax.set_ylabel("output")
    axes[-1, 0].set_xlabel("source character")
    fig.colorbar(image, ax=axes[:, 0].tolist(), shrink=0.6, label="attention weight")
    return fig


MAX_WIDGET_DATES = 4  # with the mean and each of 4 heads, 20 states drawn for the book


def _check_layer_and_head(model: Transformer, layer: object, head: object) -> None:
    n_layers, n_heads = model.cfg.n_decoder_layers, model.cfg.n_heads
    if not is_int(layer) or not -n_layers <= layer < n_layers:
        raise ValueError(f"layer must be an int in [{-n_layers}, {n_layers - 1}], got {layer!r}")
    if not is_int(head) or not -1 <= head < n_heads:
        raise ValueError(f"head must be -1 (the mean) or an int in [0, {n_heads - 1}], got {head!r}")


def cross_attention_view(model: Transformer, text: str, *, layer: int = -1, head: int = -1) -> Figure:
    """The widget's picture for one state: the model's greedy output for the date ``text`` and one decoder layer's
    cross-attention map of it, for head ``head`` (0-based) or, with ``head=-1``, the mean of the heads."""
    _check_layer_and_head(model, layer, head)
    layer = layer % model.cfg.n_decoder_layers
    (output,) = normalise_dates(model, [text])
    src = torch.tensor([DATE_VOCAB.encode(text)], device=model.unembed.weight.device)
    tgt_in = torch.tensor([[DATE_VOCAB.bos_id, *DATE_VOCAB.encode(output)]], device=src.device)
    _, maps = cross_attention_weights(model, src, tgt_in)
    chosen = maps[layer, 0]
    chosen = chosen.mean(dim=0) if head < 0 else chosen[head]
    title = f"{text} → {output}: layer {layer + 1}, " + ("mean of the heads" if head < 0 else f"head {head + 1}")
    return plot_cross_attention([chosen.cpu()], [text], [[*output, "<eos>"]], [title])


def cross_attention_widget(model: Transformer, texts: Sequence[str], *, layer: int = -1, head: int = -1) -> widgets.VBox:
    """The source date (one of ``texts``) and the head (or their mean) as buttons: the date model's ISO output and one
    decoder layer's cross-attention map of its greedy decoding, drawn by :func:`cross_attention_view`.

    Every state is drawn now and switched in the browser (:func:`~tutorial_lib.widgets._live.live_states`), so the
    buttons also work in the rendered book, with no kernel. Other dates or another layer: call the function again.
    """
    if not texts or len(texts) > MAX_WIDGET_DATES:
        raise ValueError(f"texts must hold 1 to {MAX_WIDGET_DATES} dates, got {len(texts)}")
    if len(set(texts)) != len(texts):
        raise ValueError(f"texts must hold different dates, got {list(texts)}")
    normalise_dates(model, list(texts))  # a date outside the vocabulary fails here, before any control is built
    _check_layer_and_head(model, layer, head)
    n_heads = model.cfg.n_heads
    date_buttons = widgets.ToggleButtons(options=list(texts), description="source")
    head_buttons = widgets.ToggleButtons(
        options=[("mean", -1)] + [(f"head {h + 1}", h) for h in range(n_heads)], value=head, description="head"
    )
    return live_states(
        [date_buttons, head_buttons],
        lambda text, head_: png_view(cross_attention_view(model, text, layer=layer, head=head_)),
    )
