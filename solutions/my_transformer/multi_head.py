from jaxtyping import Bool, Float
from torch import Tensor, nn

from my_transformer.attention import scaled_dot_product_attention  # your chapter 03 answer
from my_transformer.merge_heads import merge_heads  # exercise 2
from my_transformer.split_heads import split_heads  # exercise 1


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O (§3.2.2), with the layers q_proj, k_proj, v_proj, out_proj."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        # BEGIN SOLUTION
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        # END SOLUTION

    def forward(
        self,
        x: Float[Tensor, "batch query_pos d_model"],
        context: Float[Tensor, "batch key_pos d_model"] | None = None,
        mask: Bool[Tensor, "..."] | None = None,
    ) -> Float[Tensor, "batch query_pos d_model"]:
        """Project, split into heads, attend per head (scores / √d_head), merge, project with out_proj."""
        # BEGIN SOLUTION
        if context is None:
            context = x  # self-attention
        q = split_heads(self.q_proj(x), self.n_heads)
        k = split_heads(self.k_proj(context), self.n_heads)
        v = split_heads(self.v_proj(context), self.n_heads)
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # the same mask for every head
        z, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(merge_heads(z))
        # END SOLUTION
