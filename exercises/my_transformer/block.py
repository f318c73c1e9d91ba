import torch
from jaxtyping import Bool, Float
from torch import Tensor, nn

from my_transformer.feed_forward import FeedForward  # chapter 05, exercise 5
from my_transformer.layer_norm import layer_norm  # exercise 1
from my_transformer.multi_head import MultiHeadAttention  # chapter 04, exercise 3


class LayerNorm(nn.Module):
    """LayerNorm over the last axis with a learned scale ``weight`` (γ) and shift ``bias`` (β); ε = 1e-5."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        raise NotImplementedError("write your solution here")

    def forward(self, x: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch d_model"]:
        raise NotImplementedError("write your solution here")


class Block(nn.Module):
    """A transformer block, the mask handed to the attention. ``placement="pre"`` (GPT-2's, the default):
    h = x + attn(ln_1(x)), out = h + ffn(ln_2(h)); ``placement="post"`` (the paper's §3.1): h = ln_1(x + attn(x)),
    out = ln_2(h + ffn(h)). Any other placement: ValueError, naming the argument."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, kind: str = "gelu_tanh", placement: str = "pre") -> None:
        super().__init__()
        raise NotImplementedError("write your solution here")

    def forward(
        self, x: Float[Tensor, "batch seq d_model"], mask: Bool[Tensor, "..."] | None = None
    ) -> Float[Tensor, "batch seq d_model"]:
        raise NotImplementedError("write your solution here")
