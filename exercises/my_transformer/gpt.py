import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from my_transformer.block import Block, LayerNorm  # chapter 06, exercise 5
from my_transformer.embeddings import PositionEmbedding, TokenEmbedding  # chapter 02, exercise 7


class GPT(nn.Module):
    """A decoder-only GPT: embeddings, pre-norm causal blocks, a final LayerNorm, an unembedding tied to the tokens'."""

    def __init__(self, d_vocab: int, n_ctx: int, d_model: int, n_heads: int, n_layers: int, d_ff: int,
                 kind: str = "gelu_tanh") -> None:
        super().__init__()
        raise NotImplementedError("write your solution here")

    def forward(self, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq d_vocab"]:
        raise NotImplementedError("write your solution here")
