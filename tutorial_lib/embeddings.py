"""Token embeddings (§3.4) and positions: learned (GPT-2) and sinusoidal (§3.5) (chapter 02)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn


class TokenEmbedding(nn.Module):
    """A lookup table from token id to a ``d_model`` vector.

    §3.4: "In the embedding layers, we multiply those weights by √d_model" (``scale=True``); GPT-2 does not.
    """

    def __init__(self, d_vocab: int, d_model: int, *, scale: bool = False) -> None:
        super().__init__()
        self.d_vocab = d_vocab
        self.weight = nn.Parameter(torch.empty(d_vocab, d_model))
        nn.init.normal_(self.weight, std=d_model**-0.5 if scale else 0.02)
        self.scale = math.sqrt(d_model) if scale else 1.0

    def forward(self, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq d_model"]:
        check_token_ids(tokens, self.d_vocab)
        # F.embedding is self.weight[tokens]; its backward adds each row's gradients in a fixed order, where indexing's
        # backward (an accumulating index_put) adds them in a thread-dependent order: runs on 2 threads drift apart.
        return F.embedding(tokens, self.weight) * self.scale


class LearnedPositionalEmbedding(nn.Module):
    """One learned vector per position 0..n_ctx-1 (GPT-2's ``wpe``); sequences longer than n_ctx are impossible."""

    def __init__(self, n_ctx: int, d_model: int) -> None:
        super().__init__()
        self.n_ctx = n_ctx
        self.weight = nn.Parameter(torch.empty(n_ctx, d_model))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, seq_len: int, offset: int = 0) -> Float[Tensor, "seq d_model"]:
        """Rows ``offset .. offset + seq_len - 1`` (``offset`` = tokens already in the KV cache)."""
        check_sequence_fits(offset + seq_len, self.n_ctx)
        return self.weight[offset : offset + seq_len]


def sinusoidal_positional_encoding(n_ctx: int, d_model: int, *, base: float = 10000.0) -> Float[Tensor, "n_ctx d_model"]:
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    ``base`` is the paper's 10000: the wavelengths run from 2π to base · 2π.
    """
    for name, value in (("n_ctx", n_ctx), ("d_model", d_model)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 1:
        raise ValueError(f"base must be a number greater than 1, got {base!r}")
    position = torch.arange(n_ctx, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = position / base ** (two_i / d_model)  # (n_ctx, ceil(d_model / 2))
    pe = torch.zeros(n_ctx, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.float()  # computed in float64 so large positions keep their precision


class SinusoidalPositionalEncoding(nn.Module):
    """The fixed table of §3.5 as a registered buffer (moves with ``.to(device)``, is not trained)."""

    def __init__(self, n_ctx: int, d_model: int) -> None:
        super().__init__()
        self.n_ctx = n_ctx
        self.register_buffer("pe", sinusoidal_positional_encoding(n_ctx, d_model), persistent=False)

    def forward(self, seq_len: int, offset: int = 0) -> Float[Tensor, "seq d_model"]:
        check_sequence_fits(offset + seq_len, self.n_ctx)
        return self.pe[offset : offset + seq_len]


def check_token_ids(tokens: Tensor, d_vocab: int) -> None:
    """``ValueError`` unless ``tokens`` is an integer tensor with every id in ``[0, d_vocab)``."""
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must be an integer (long) tensor, got dtype {tokens.dtype}")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= d_vocab):
        bad = tokens[(tokens < 0) | (tokens >= d_vocab)][0].item()
        raise ValueError(f"tokens must be ids in [0, d_vocab={d_vocab}), got {bad}")


def check_sequence_fits(seq_len: int, n_ctx: int) -> None:
    if seq_len > n_ctx:
        raise ValueError(f"sequence length {seq_len} exceeds the context n_ctx={n_ctx}: seq must be <= n_ctx")
