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
    raise NotImplementedError("write your solution here")


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
    raise NotImplementedError("write your solution here")
