import math

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn


class TokenEmbedding(nn.Module):
    """``d_vocab`` learned vectors of ``d_model`` numbers (the parameter ``weight``), looked up by token id; times
    √d_model when ``scale`` (§3.4)."""

    def __init__(self, d_vocab: int, d_model: int, scale: bool = False) -> None:
        super().__init__()
        raise NotImplementedError("write your solution here")

    def forward(self, tokens: Int[Tensor, "..."]) -> Float[Tensor, "... d_model"]:
        raise NotImplementedError("write your solution here")


class PositionEmbedding(nn.Module):
    """One learned vector per position 0 … n_ctx − 1 (the parameter ``weight``), GPT-2's ``wpe``."""

    def __init__(self, n_ctx: int, d_model: int) -> None:
        super().__init__()
        raise NotImplementedError("write your solution here")

    def forward(self, seq_len: int, offset: int = 0) -> Float[Tensor, "seq_len d_model"]:
        """Rows ``offset`` … ``offset + seq_len − 1``: the positions of tokens that follow ``offset`` cached ones."""
        raise NotImplementedError("write your solution here")
