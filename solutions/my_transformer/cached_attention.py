import torch
from jaxtyping import Float
from torch import Tensor

from my_transformer.attention import scaled_dot_product_attention  # chapter 03, exercise 1


def cached_attention(
    q: Float[Tensor, "batch n_heads n_new d_head"],
    k: Float[Tensor, "batch n_heads n_new d_head"],
    v: Float[Tensor, "batch n_heads n_new d_head"],
    past_k: Float[Tensor, "batch n_heads n_past d_head"],
    past_v: Float[Tensor, "batch n_heads n_past d_head"],
) -> tuple[Float[Tensor, "batch n_heads n_new d_head"], Float[Tensor, "batch n_heads key_pos d_head"], Float[Tensor, "batch n_heads key_pos d_head"]]:
    """Causal attention of the new queries over the cached and the new positions; returns ``(out, keys, values)``
    where ``keys`` and ``values`` are the cached ones followed by the new ones (``key_pos = n_past + n_new``)."""
    # BEGIN SOLUTION
    keys = torch.cat([past_k, k], dim=-2)
    values = torch.cat([past_v, v], dim=-2)
    n_past, n_new = past_k.shape[-2], q.shape[-2]
    query = torch.arange(n_new, device=q.device)[:, None] + n_past  # the new queries' positions
    key = torch.arange(n_past + n_new, device=q.device)[None, :]
    out, _ = scaled_dot_product_attention(q, keys, values, key <= query)
    return out, keys, values
    # END SOLUTION
