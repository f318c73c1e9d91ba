"""The copying task (chapter 13): a random string, a separator, and the same string again.

To write the copy, the position that holds symbol t of the copy must read symbol t + 1 of the original: at every step
one earlier position, found by where it is. Softmax attention learns that sharp lookup quickly; linear attention, whose
weights are a smooth kernel φ(q)·φ(k) and whose causal state has a fixed size, struggles with it (Jelassi et al. 2024,
"Repeat After Me"). Generated from a seed: nothing to download.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Int
from torch import Tensor, nn

IGNORE_INDEX = -100  # targets that are not scored (``F.cross_entropy``'s default ignore_index)


def copy_batch(
    batch_size: int, length: int, n_symbols: int, generator: torch.Generator
) -> tuple[Int[Tensor, "batch seq"], Int[Tensor, "batch seq"]]:
    """``batch_size`` sequences ``s = x_1 … x_L, SEP, x_1 … x_L`` (symbols ``0 … n_symbols - 1``, ``SEP = n_symbols``),
    as inputs ``s[:-1]`` and next-token targets ``s[1:]`` of ``2 · length`` positions each. The targets of the first
    ``length`` positions (the random string itself, unpredictable) are :data:`IGNORE_INDEX`: only the copy is scored.
    A model for it has ``d_vocab = n_symbols + 1`` and ``n_ctx >= 2 · length``."""
    for name, value in (("batch_size", batch_size), ("length", length), ("n_symbols", n_symbols)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    string = torch.randint(n_symbols, (batch_size, length), generator=generator, device=generator.device)
    separator = torch.full((batch_size, 1), n_symbols, dtype=string.dtype, device=string.device)
    sequence = torch.cat([string, separator, string], dim=1)
    inputs, targets = sequence[:, :-1], sequence[:, 1:].clone()
    targets[:, :length] = IGNORE_INDEX
    return inputs, targets


def copy_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Cross-entropy over the copied positions only (for :func:`tutorial_lib.training.train`)."""
    x, y = batch
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE_INDEX)


@torch.no_grad()
def copy_accuracy(model: nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[float, float]:
    """``(token accuracy, exact match)`` of the greedy next-token predictions on the copied positions.

    Exact match is the share of sequences whose whole copy is right. Computed with the true prefix at every position
    (teacher forcing), it equals greedy generation's exact match: a copy generated right feeds the same prefixes."""
    was_training = model.training
    model.eval()
    x, y = batch
    predictions = model(x).argmax(dim=-1)
    scored = y != IGNORE_INDEX
    correct = predictions == y
    model.train(was_training)
    return correct[scored].float().mean().item(), (correct | ~scored).all(dim=1).float().mean().item()
