from collections.abc import Callable

import torch
from torch import Tensor, nn


def train_step(
    model: nn.Module,
    batch: tuple[Tensor, Tensor],
    loss_fn: Callable[[nn.Module, tuple[Tensor, Tensor]], Tensor],
    optimizer: torch.optim.Optimizer,
    grad_clip: float | None = None,
) -> float:
    """One optimisation step on ``batch``; returns its loss (before the update) as a float."""
    raise NotImplementedError("write your solution here")
