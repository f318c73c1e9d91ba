import torch
from jaxtyping import Int
from torch import Tensor


def get_batch(
    data: Int[Tensor, " n_tokens"], batch_size: int, n_ctx: int, generator: torch.Generator
) -> tuple[Int[Tensor, "batch seq"], Int[Tensor, "batch seq"]]:
    """``(x, y)``, each ``(batch_size, n_ctx)``: random windows of ``data`` and the same windows one token later."""
    raise NotImplementedError("write your solution here")
