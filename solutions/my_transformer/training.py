from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from my_transformer.schedule import warmup_cosine_lr  # exercise 1
from my_transformer.train_step import train_step  # exercise 2


def estimate_loss(
    model: nn.Module, batches: Callable[[], Any], loss_fn: Callable[[nn.Module, Any], Tensor], n_batches: int
) -> float:
    """The mean loss over ``n_batches`` batches of ``batches()``, in eval mode and without gradients; the model's
    mode is restored."""
    # BEGIN SOLUTION
    was_training = model.training
    model.eval()
    total = 0.0
    with torch.no_grad():
        for _ in range(n_batches):
            total += loss_fn(model, batches()).item()
    model.train(was_training)
    return total / n_batches
    # END SOLUTION


def train_model(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    train_batches: Callable[[], Any],
    val_batches: Callable[[], Any],
    loss_fn: Callable[[nn.Module, Any], Tensor],
    *,
    max_steps: int,
    max_lr: float,
    min_lr: float,
    warmup_steps: int,
    grad_clip: float | None,
    eval_interval: int,
    eval_batches: int,
) -> tuple[list[float], dict[int, float]]:
    """``max_steps`` updates on the warm-up + cosine schedule, evaluated every ``eval_interval`` updates and after the
    last; returns every update's training loss and ``{updates done: validation loss}``."""
    # BEGIN SOLUTION
    train_losses: list[float] = []
    val_losses: dict[int, float] = {}
    for step in range(max_steps):
        lr = warmup_cosine_lr(step, max_lr=max_lr, warmup_steps=warmup_steps, total_steps=max_steps, min_lr=min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        train_losses.append(train_step(model, train_batches(), loss_fn, optimizer, grad_clip))
        done = step + 1
        if done % eval_interval == 0 or done == max_steps:
            val_losses[done] = estimate_loss(model, val_batches, loss_fn, eval_batches)
    return train_losses, val_losses
    # END SOLUTION
