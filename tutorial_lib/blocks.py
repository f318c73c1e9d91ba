"""Residual blocks, §3.1: "LayerNorm(x + Sublayer(x))", and where else the norm can go (chapter 06).

The one place where norm placement is decided is :class:`Residual`:

* ``POST`` (the paper):      x = Norm(x + Sublayer(x))
* ``PRE`` (GPT-2, most LLMs): x = x + Sublayer(Norm(x))    — a final norm after the last block is then needed
* ``SANDWICH`` (CogView, Gemma 2): x = x + Norm_out(Sublayer(Norm(x)))
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from jaxtyping import Bool, Float
from torch import Tensor, nn

from tutorial_lib.feed_forward import FeedForward, SwiGLU
from tutorial_lib.kv_cache import LayerKVCache
from tutorial_lib.multi_head import MultiHeadAttention
from tutorial_lib.normalization import LayerNorm, RMSNorm


class NormPlacement(str, enum.Enum):
    POST = "post"
    PRE = "pre"
    SANDWICH = "sandwich"


def make_norm(kind: str, d_model: int, eps: float, *, fast: bool = False) -> nn.Module:
    """``"layer"`` → :class:`LayerNorm`, ``"rms"`` → :class:`RMSNorm`; ``fast`` picks PyTorch's fused kernel."""
    if kind == "layer":
        return LayerNorm(d_model, eps, fast=fast)
    if kind == "rms":
        return RMSNorm(d_model, eps, fast=fast)
    raise ValueError(f"norm must be 'layer' or 'rms', got {kind!r}")


def make_feed_forward(activation: str, d_model: int, d_ff: int, *, bias: bool, dropout: float) -> nn.Module:
    """Eq. (2)'s FFN with ``activation`` ("relu", "gelu", "gelu_tanh"), or ``"swiglu"`` for the gated variant."""
    if activation == "swiglu":
        return SwiGLU(d_model, d_ff, bias=bias, dropout=dropout)
    return FeedForward(d_model, d_ff, activation=activation, bias=bias, dropout=dropout)


class Residual(nn.Module):
    """One sublayer's residual connection, with dropout on the sublayer's output and the norm(s) in place."""

    def __init__(
        self, d_model: int, placement: NormPlacement | str, *, norm: str = "layer", eps: float = 1e-5,
        dropout: float = 0.0, fast_norm: bool = False,
    ) -> None:
        super().__init__()
        self.placement = NormPlacement(placement)
        self.norm = make_norm(norm, d_model, eps, fast=fast_norm)
        self.norm_out = make_norm(norm, d_model, eps, fast=fast_norm) if self.placement is NormPlacement.SANDWICH else None
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: Float[Tensor, "batch seq d_model"], sublayer: Callable[[Tensor], Tensor]
    ) -> Float[Tensor, "batch seq d_model"]:
        if self.placement is NormPlacement.POST:
            return self.norm(x + self.dropout(sublayer(x)))
        if self.placement is NormPlacement.PRE:
            return x + self.dropout(sublayer(self.norm(x)))
        return x + self.dropout(self.norm_out(sublayer(self.norm(x))))


class TransformerBlock(nn.Module):
    """Self-attention then feed-forward, each in a :class:`Residual`.

    The encoder layer of the paper (bidirectional, with a padding mask), GPT's block (``causal=True``) and BERT's.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        *,
        placement: NormPlacement | str = NormPlacement.POST,
        norm: str = "layer",
        eps: float = 1e-5,
        activation: str = "relu",
        bias: bool = True,
        dropout: float = 0.0,
        fast_attention: bool = False,
        fast_norm: bool = False,
    ) -> None:
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads, bias=bias, fast=fast_attention)
        self.attn_residual = Residual(d_model, placement, norm=norm, eps=eps, dropout=dropout, fast_norm=fast_norm)
        self.ffn = make_feed_forward(activation, d_model, d_ff, bias=bias, dropout=dropout)
        self.ffn_residual = Residual(d_model, placement, norm=norm, eps=eps, dropout=dropout, fast_norm=fast_norm)

    def forward(
        self,
        x: Float[Tensor, "batch seq d_model"],
        *,
        mask: Bool[Tensor, "..."] | None = None,
        causal: bool = False,
        cache: LayerKVCache | None = None,
    ) -> Float[Tensor, "batch seq d_model"]:
        x = self.attn_residual(x, lambda h: self.attn(h, mask=mask, causal=causal, cache=cache))
        return self.ffn_residual(x, self.ffn)


class DecoderBlock(nn.Module):
    """The paper's decoder layer: masked self-attention, cross-attention over the encoder's output, feed-forward."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        *,
        placement: NormPlacement | str = NormPlacement.POST,
        norm: str = "layer",
        eps: float = 1e-5,
        activation: str = "relu",
        bias: bool = True,
        dropout: float = 0.0,
        fast_attention: bool = False,
        fast_norm: bool = False,
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, bias=bias, fast=fast_attention)
        self.self_attn_residual = Residual(d_model, placement, norm=norm, eps=eps, dropout=dropout, fast_norm=fast_norm)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, bias=bias, fast=fast_attention)
        self.cross_attn_residual = Residual(d_model, placement, norm=norm, eps=eps, dropout=dropout, fast_norm=fast_norm)
        self.ffn = make_feed_forward(activation, d_model, d_ff, bias=bias, dropout=dropout)
        self.ffn_residual = Residual(d_model, placement, norm=norm, eps=eps, dropout=dropout, fast_norm=fast_norm)

    def forward(
        self,
        x: Float[Tensor, "batch query_pos d_model"],
        memory: Float[Tensor, "batch key_pos d_model"],
        *,
        self_mask: Bool[Tensor, "..."] | None = None,
        memory_mask: Bool[Tensor, "..."] | None = None,
        cache: LayerKVCache | None = None,
    ) -> Float[Tensor, "batch query_pos d_model"]:
        """``self_mask`` adds to the causal mask (e.g. target padding); ``memory_mask`` hides source padding."""
        x = self.self_attn_residual(x, lambda h: self.self_attn(h, mask=self_mask, causal=True, cache=cache))
        x = self.cross_attn_residual(x, lambda h: self.cross_attn(h, memory, mask=memory_mask))
        return self.ffn_residual(x, self.ffn)
