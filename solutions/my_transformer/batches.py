import torch
from jaxtyping import Int
from torch import Tensor


def get_batch(
    data: Int[Tensor, " n_tokens"], batch_size: int, n_ctx: int, generator: torch.Generator
) -> tuple[Int[Tensor, "batch seq"], Int[Tensor, "batch seq"]]:
    """``(x, y)``, each ``(batch_size, n_ctx)``: random windows of ``data`` and the same windows one token later."""
    # BEGIN SOLUTION
    starts = torch.randint(len(data) - n_ctx, (batch_size,), generator=generator)
    x = torch.stack([data[s : s + n_ctx] for s in starts.tolist()])
    y = torch.stack([data[s + 1 : s + 1 + n_ctx] for s in starts.tolist()])
    return x, y
    # END SOLUTION
