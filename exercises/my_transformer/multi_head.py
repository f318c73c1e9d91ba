from jaxtyping import Bool, Float
from torch import Tensor, nn

from my_transformer.attention import scaled_dot_product_attention  # your chapter 03 answer
from my_transformer.merge_heads import merge_heads  # exercise 2
from my_transformer.split_heads import split_heads  # exercise 1


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O (§3.2.2), with the layers q_proj, k_proj, v_proj, out_proj."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        raise NotImplementedError("write your solution here")

    def forward(
        self,
        x: Float[Tensor, "batch query_pos d_model"],
        context: Float[Tensor, "batch key_pos d_model"] | None = None,
        mask: Bool[Tensor, "..."] | None = None,
    ) -> Float[Tensor, "batch query_pos d_model"]:
        """Project, split into heads, attend per head (scores / √d_head), merge, project with out_proj."""
        raise NotImplementedError("write your solution here")
