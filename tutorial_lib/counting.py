"""Counting parameters (chapters 07, 08): a tensor shared by two modules (tied embeddings) counts once."""

from __future__ import annotations

from collections import Counter

from torch import nn


def count_parameters(model: nn.Module, *, trainable_only: bool = False) -> int:
    """Number of distinct parameters. Works on a model built on the meta device (no memory is allocated).

    ``model.parameters()`` yields each shared tensor once; summing over ``state_dict()`` would count tied
    embeddings twice.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def parameters_by_module(model: nn.Module, depth: int = 1) -> dict[str, int]:
    """Distinct parameters grouped by the first ``depth`` components of their names, in order of appearance.

    A shared tensor is attributed to the first module that owns it.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a positive int, got {depth!r}")
    counts: Counter[str] = Counter()
    for name, p in model.named_parameters():  # named_parameters also skips repeats of a shared tensor
        counts[".".join(name.split(".")[:depth])] += p.numel()
    return dict(counts)
