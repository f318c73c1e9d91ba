import math

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from my_transformer.embeddings import PositionEmbedding, TokenEmbedding  # chapter 02, exercise 7
from my_transformer.layer_norm import layer_norm  # chapter 06, exercise 1
from my_transformer.multi_head import MultiHeadAttention  # chapter 04, exercise 3


class LayerNorm(nn.Module):
    """A LayerNorm with its own ε (BERT's is 1e-12)."""

    def __init__(self, d_model: int, eps: float) -> None:
        super().__init__()
        # BEGIN SOLUTION
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        # END SOLUTION

    def forward(self, x: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch d_model"]:
        # BEGIN SOLUTION
        return layer_norm(x, self.weight, self.bias, self.eps)
        # END SOLUTION


def gelu(x: Tensor) -> Tensor:
    """BERT's exact GELU, x Φ(x)."""
    # BEGIN SOLUTION
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    # END SOLUTION


class FeedForward(nn.Module):
    """up, the exact GELU, down."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        # BEGIN SOLUTION
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        # END SOLUTION

    def forward(self, x: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch d_model"]:
        # BEGIN SOLUTION
        return self.down(gelu(self.up(x)))
        # END SOLUTION


class PostNormBlock(nn.Module):
    """BERT's block: each sublayer's output added to its input, then the sum normalised."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, eps: float) -> None:
        super().__init__()
        # BEGIN SOLUTION
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln_1 = LayerNorm(d_model, eps)
        self.ffn = FeedForward(d_model, d_ff)
        self.ln_2 = LayerNorm(d_model, eps)
        # END SOLUTION

    def forward(self, x: Float[Tensor, "batch seq d_model"], mask: Bool[Tensor, "..."] | None = None
                ) -> Float[Tensor, "batch seq d_model"]:
        # BEGIN SOLUTION
        x = self.ln_1(x + self.attn(x, mask=mask))
        return self.ln_2(x + self.ffn(x))
        # END SOLUTION


class BERT(nn.Module):
    """An encoder-only BERT with its masked-LM head: every token reads both directions."""

    def __init__(self, d_vocab: int, n_ctx: int, d_model: int, n_heads: int, n_layers: int, d_ff: int,
                 n_segments: int = 2, eps: float = 1e-12) -> None:
        super().__init__()
        # BEGIN SOLUTION
        self.embed = TokenEmbedding(d_vocab, d_model)
        self.pos_embed = PositionEmbedding(n_ctx, d_model)
        self.segment_embed = TokenEmbedding(n_segments, d_model)
        self.ln_embed = LayerNorm(d_model, eps)
        self.blocks = nn.ModuleList([PostNormBlock(d_model, n_heads, d_ff, eps) for _ in range(n_layers)])
        self.mlm_dense = nn.Linear(d_model, d_model)
        self.mlm_norm = LayerNorm(d_model, eps)
        self.mlm_bias = nn.Parameter(torch.zeros(d_vocab))
        # END SOLUTION

    def forward(self, tokens: Int[Tensor, "batch seq"], segments: Int[Tensor, "batch seq"] | None = None,
                mask: Bool[Tensor, "..."] | None = None) -> Float[Tensor, "batch seq d_vocab"]:
        # BEGIN SOLUTION
        if segments is None:
            segments = torch.zeros_like(tokens)
        x = self.embed(tokens) + self.pos_embed(tokens.shape[1]) + self.segment_embed(segments)
        x = self.ln_embed(x)
        for block in self.blocks:
            x = block(x, mask=mask)  # no causal mask: every token reads both directions
        return self.mlm_norm(gelu(self.mlm_dense(x))) @ self.embed.weight.T + self.mlm_bias
        # END SOLUTION
