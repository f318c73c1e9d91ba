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
        # BEGIN SOLUTION
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        # END SOLUTION

    def forward(self, x: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch d_model"]:
        # BEGIN SOLUTION
        return layer_norm(x, self.weight, self.bias, 1e-5)
        # END SOLUTION


class Block(nn.Module):
    """A transformer block, the mask handed to the attention. ``placement="pre"`` (GPT-2's, the default):
    h = x + attn(ln_1(x)), out = h + ffn(ln_2(h)); ``placement="post"`` (the paper's §3.1): h = ln_1(x + attn(x)),
    out = ln_2(h + ffn(h)). Any other placement: ValueError, naming the argument."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, kind: str = "gelu_tanh", placement: str = "pre") -> None:
        super().__init__()
        # BEGIN SOLUTION
        if placement not in ("pre", "post"):
            raise ValueError(f"placement must be 'pre' or 'post', got {placement!r}")
        self.placement = placement
        self.ln_1 = LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln_2 = LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, kind)
        # END SOLUTION

    def forward(
        self, x: Float[Tensor, "batch seq d_model"], mask: Bool[Tensor, "..."] | None = None
    ) -> Float[Tensor, "batch seq d_model"]:
        # BEGIN SOLUTION
        if self.placement == "post":
            h = self.ln_1(x + self.attn(x, mask=mask))
            return self.ln_2(h + self.ffn(h))
        h = x + self.attn(self.ln_1(x), mask=mask)
        return h + self.ffn(self.ln_2(h))
        # END SOLUTION
