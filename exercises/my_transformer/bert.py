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
        raise NotImplementedError("write your solution here")

    def forward(self, x: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch d_model"]:
        raise NotImplementedError("write your solution here")


def gelu(x: Tensor) -> Tensor:
    """BERT's exact GELU, x Φ(x)."""
    raise NotImplementedError("write your solution here")


class FeedForward(nn.Module):
    """up, the exact GELU, down."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        raise NotImplementedError("write your solution here")

    def forward(self, x: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch d_model"]:
        raise NotImplementedError("write your solution here")


class PostNormBlock(nn.Module):
    """BERT's block: each sublayer's output added to its input, then the sum normalised."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, eps: float) -> None:
        super().__init__()
        raise NotImplementedError("write your solution here")

    def forward(self, x: Float[Tensor, "batch seq d_model"], mask: Bool[Tensor, "..."] | None = None
                ) -> Float[Tensor, "batch seq d_model"]:
        raise NotImplementedError("write your solution here")


class BERT(nn.Module):
    """An encoder-only BERT with its masked-LM head: every token reads both directions."""

    def __init__(self, d_vocab: int, n_ctx: int, d_model: int, n_heads: int, n_layers: int, d_ff: int,
                 n_segments: int = 2, eps: float = 1e-12) -> None:
        super().__init__()
        raise NotImplementedError("write your solution here")

    def forward(self, tokens: Int[Tensor, "batch seq"], segments: Int[Tensor, "batch seq"] | None = None,
                mask: Bool[Tensor, "..."] | None = None) -> Float[Tensor, "batch seq d_vocab"]:
        raise NotImplementedError("write your solution here")
