import math

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from my_transformer.block import LayerNorm  # chapter 06, exercise 5
from my_transformer.embeddings import TokenEmbedding  # chapter 02, exercise 7
from my_transformer.feed_forward import FeedForward  # chapter 05, exercise 5
from my_transformer.multi_head import MultiHeadAttention  # chapter 04, exercise 3


def sinusoidal(n_ctx: int, d_model: int) -> Float[Tensor, "n_ctx d_model"]:
    """§3.5's table as float32 (computed in float64)."""
    raise NotImplementedError("write your solution here")


class EncoderLayer(nn.Module):
    """The paper's post-norm encoder layer."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        raise NotImplementedError("write your solution here")

    def forward(self, x: Float[Tensor, "batch seq d_model"], src_mask: Bool[Tensor, "batch 1 seq"] | None = None
                ) -> Float[Tensor, "batch seq d_model"]:
        raise NotImplementedError("write your solution here")


class DecoderLayer(nn.Module):
    """The paper's post-norm decoder layer: causal self-attention, cross-attention, FFN."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        raise NotImplementedError("write your solution here")

    def forward(self, x: Float[Tensor, "batch query_pos d_model"], memory: Float[Tensor, "batch key_pos d_model"],
                src_mask: Bool[Tensor, "batch 1 key_pos"] | None = None) -> Float[Tensor, "batch query_pos d_model"]:
        raise NotImplementedError("write your solution here")


class Transformer(nn.Module):
    """The paper's encoder-decoder: one shared embedding matrix, sinusoidal positions, post-norm layers."""

    def __init__(self, d_vocab: int, n_ctx: int, d_model: int, n_heads: int, n_layers: int, d_ff: int) -> None:
        super().__init__()
        raise NotImplementedError("write your solution here")

    def encode(self, src: Int[Tensor, "batch key_pos"], src_mask: Bool[Tensor, "batch 1 key_pos"] | None = None
               ) -> Float[Tensor, "batch key_pos d_model"]:
        raise NotImplementedError("write your solution here")

    def decode(self, tgt: Int[Tensor, "batch query_pos"], memory: Float[Tensor, "batch key_pos d_model"],
               src_mask: Bool[Tensor, "batch 1 key_pos"] | None = None) -> Float[Tensor, "batch query_pos d_vocab"]:
        raise NotImplementedError("write your solution here")

    def forward(self, src: Int[Tensor, "batch key_pos"], tgt: Int[Tensor, "batch query_pos"],
                src_mask: Bool[Tensor, "batch 1 key_pos"] | None = None) -> Float[Tensor, "batch query_pos d_vocab"]:
        return self.decode(tgt, self.encode(src, src_mask), src_mask)

    def embedded(self, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq d_model"]:
        """The scaled embeddings plus the positions (a ValueError past n_ctx)."""
        raise NotImplementedError("write your solution here")
