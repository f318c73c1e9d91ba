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
    # BEGIN SOLUTION
    model.train()
    loss = loss_fn(model, batch)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip is not None:
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss.item()
    # END SOLUTION
