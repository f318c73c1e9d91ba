"""Knocking heads out (chapter 04): what a model loses when a head's output is replaced by its average.

A pattern of attention weights says where a head looks, not whether the model uses what it reads there. The test is
an intervention: remove the head and measure the loss. :func:`mean_head_outputs` records every head's average output
(its ``d_head`` slice of the input of W^O) over some text; :func:`ablated_heads` makes the chosen heads output that
average, or zero, while the model runs. Mean-ablation keeps what a head writes on any input, so what it removes is
what the head says about *this* input; zero-ablation removes that average too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn


def _attention_layers(model: nn.Module) -> list[nn.Module]:
    """The multi-head attention of every block, in order (``model.blocks[i].attn``, with ``out_proj`` = W^O)."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or len(blocks) == 0:
        raise ValueError(f"model must hold its layers in a non-empty ModuleList `blocks`, got {type(model).__name__}")
    layers = [getattr(block, "attn", None) for block in blocks]
    if not all(hasattr(attn, "out_proj") and hasattr(attn, "n_heads") for attn in layers):
        raise ValueError("model's blocks must each have an `attn` with `out_proj` (W^O) and `n_heads`")
    return layers


@torch.no_grad()
def mean_head_outputs(model: nn.Module, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, "n_layers n_heads d_head"]:
    """Every head's output averaged over the batch and the positions of ``tokens`` (the head's slice of Concat)."""
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape (batch, seq), got {tuple(tokens.shape)}")
    layers = _attention_layers(model)
    means: dict[int, Tensor] = {}

    def recorder(index: int):
        def hook(module: nn.Module, args: tuple[Tensor, ...]) -> None:
            means[index] = args[0].mean(dim=(0, 1))  # (d_model,): the heads side by side
        return hook

    handles = [attn.out_proj.register_forward_pre_hook(recorder(i)) for i, attn in enumerate(layers)]
    try:
        model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack([means[i].view(attn.n_heads, -1) for i, attn in enumerate(layers)])


@contextlib.contextmanager
def ablated_heads(
    model: nn.Module, heads: Iterable[tuple[int, int]], means: Float[Tensor, "n_layers n_heads d_head"] | None = None
) -> Iterator[None]:
    """Inside the ``with`` block, each ``(layer, head)`` of ``heads`` outputs ``means[layer, head]`` (mean-ablation,
    ``means`` from :func:`mean_head_outputs`) or zero (``means=None``); the model is restored on leaving."""
    layers = _attention_layers(model)
    heads = list(heads)
    for item in heads:
        if not (isinstance(item, tuple) and len(item) == 2 and all(isinstance(i, int) for i in item)
                and 0 <= item[0] < len(layers) and 0 <= item[1] < layers[item[0]].n_heads):
            raise ValueError(f"heads must be (layer, head) pairs of ints within the model's {len(layers)} layers and "
                             f"their heads, got {item!r}")
    if means is not None and means.shape[:2] != (len(layers), layers[0].n_heads):
        raise ValueError(f"means must have shape (n_layers, n_heads, d_head) = ({len(layers)}, {layers[0].n_heads}, "
                         f"d_head), got {tuple(means.shape)}")

    def replacer(index: int, knocked: list[int]):
        def hook(module: nn.Module, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
            z = args[0].clone()  # (batch, seq, d_model): Concat(head_1, ..., head_h), the input of W^O
            d_head = z.shape[-1] // layers[index].n_heads
            for head in knocked:
                columns = slice(head * d_head, (head + 1) * d_head)
                z[..., columns] = 0.0 if means is None else means[index, head].to(z.dtype)
            return (z, *args[1:])
        return hook

    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    handles = [layers[i].out_proj.register_forward_pre_hook(replacer(i, knocked)) for i, knocked in by_layer.items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
