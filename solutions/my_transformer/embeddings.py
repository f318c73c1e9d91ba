import math

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn


class TokenEmbedding(nn.Module):
    """``d_vocab`` learned vectors of ``d_model`` numbers (the parameter ``weight``), looked up by token id; times
    √d_model when ``scale`` (§3.4)."""

    def __init__(self, d_vocab: int, d_model: int, scale: bool = False) -> None:
        super().__init__()
        # BEGIN SOLUTION
        self.weight = nn.Parameter(torch.randn(d_vocab, d_model))
        self.factor = math.sqrt(d_model) if scale else 1.0
        # END SOLUTION

    def forward(self, tokens: Int[Tensor, "..."]) -> Float[Tensor, "... d_model"]:
        # BEGIN SOLUTION
        d_vocab = self.weight.shape[0]
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= d_vocab):
            raise ValueError(f"token ids must be in [0, {d_vocab}), got {tokens.min().item()} to {tokens.max().item()}")
        return self.weight[tokens] * self.factor
        # END SOLUTION


class PositionEmbedding(nn.Module):
    """One learned vector per position 0 … n_ctx − 1 (the parameter ``weight``), GPT-2's ``wpe``."""

    def __init__(self, n_ctx: int, d_model: int) -> None:
        super().__init__()
        # BEGIN SOLUTION
        self.weight = nn.Parameter(torch.randn(n_ctx, d_model))
        # END SOLUTION

    def forward(self, seq_len: int, offset: int = 0) -> Float[Tensor, "seq_len d_model"]:
        """Rows ``offset`` … ``offset + seq_len − 1``: the positions of tokens that follow ``offset`` cached ones."""
        # BEGIN SOLUTION
        n_ctx = self.weight.shape[0]
        if offset + seq_len > n_ctx:
            raise ValueError(f"positions {offset} to {offset + seq_len - 1} run past the {n_ctx} of the table")
        return self.weight[offset : offset + seq_len]
        # END SOLUTION
