import math

import torch
from jaxtyping import Bool, Float
from torch import Tensor


def scaled_dot_product_attention(
    q: Float[Tensor, "*batch query_pos d_head"],
    k: Float[Tensor, "*batch key_pos d_head"],
    v: Float[Tensor, "*batch key_pos d_value"],
    mask: Bool[Tensor, "..."] | None = None,
) -> tuple[Float[Tensor, "*batch query_pos d_value"], Float[Tensor, "*batch query_pos key_pos"]]:
    """softmax(q kᵀ / √d_k) v, returning ``(out, weights)``.

    Any number of leading batch axes (``*batch`` may be empty, or ``batch n_heads``). ``mask`` is boolean, True
    where a query may attend to a key, broadcastable to ``(..., query_pos, key_pos)``. Do not modify the arguments.
    """
    # BEGIN SOLUTION
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    # A row whose scores are all -inf gives softmax NaN; it attends to nothing instead.
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights
    # END SOLUTION
