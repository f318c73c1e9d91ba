"""Rotary position embeddings, RoPE (Su et al. 2021, "RoFormer"), chapter 12.

Instead of *adding* a position vector to the token embedding, RoPE *rotates* every query and key inside attention.
The ``d_head`` dimensions form ``d_head / 2`` pairs; pair ``i`` of a vector at position ``m`` is turned by the angle
``m · θ_i``, with

    θ_i = base^(-2i / d_head),   i = 0 .. d_head/2 - 1   (base = 10000),

fast-turning pairs first, slow ones last (the sinusoidal encoding's geometric ladder of wavelengths). A rotation
preserves lengths, and two rotations compose: ``(R_m q) · (R_n k) = q · R_(n-m) k``. The score between a query at
``m`` and a key at ``n`` therefore depends on the positions only through the offset ``n - m``.

Layout: this module uses the **"rotate half"** layout of GPT-NeoX and Hugging Face's LLaMA, where dimension ``i``
pairs with dimension ``i + d_head/2``. The paper (and Meta's original LLaMA code) pairs ``2i`` with ``2i + 1``
instead. The two are the same rotation up to a fixed permutation of the rows of W^Q and W^K, so they define the same
family of models; Hugging Face permutes Meta's weights once, when converting a checkpoint, and computes with the
half layout, which needs no interleaving.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from tutorial_lib.embeddings import check_sequence_fits
from tutorial_lib.kv_cache import LayerKVCache
from tutorial_lib.multi_head import MultiHeadAttention


def rope_frequencies(d_head: int, base: float = 10000.0) -> Float[Tensor, " half_d_head"]:
    """θ_i = base^(-2i/d_head) for i = 0 .. d_head/2 - 1: the angle, in radians, that pair i turns per position."""
    _check_d_head(d_head)
    if not base > 1.0:
        raise ValueError(f"base must be > 1, got {base!r}")
    two_i = torch.arange(0, d_head, 2, dtype=torch.float64)
    return base ** (-two_i / d_head)


def rope_tables(
    n_ctx: int, d_head: int, base: float = 10000.0
) -> tuple[Float[Tensor, "n_ctx d_head"], Float[Tensor, "n_ctx d_head"]]:
    """cos and sin of every angle ``m · θ_i``, one row per position ``m``, laid out for :func:`rotate_half`.

    Row ``m`` is ``[m·θ_0, ..., m·θ_(d/2-1), m·θ_0, ..., m·θ_(d/2-1)]``: dimensions ``i`` and ``i + d_head/2`` are
    one pair and share an angle. Computed in float64 so that large positions keep their precision.
    """
    if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 1:
        raise ValueError(f"n_ctx must be a positive int, got {n_ctx!r}")
    angles = torch.arange(n_ctx, dtype=torch.float64)[:, None] * rope_frequencies(d_head, base)[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def rotate_half(x: Float[Tensor, "*batch d_head"]) -> Float[Tensor, "*batch d_head"]:
    """``[x1, x2] → [-x2, x1]``: turns every pair ``(x_i, x_(i + d/2))`` by 90°, so that
    ``x · cos + rotate_half(x) · sin`` turns it by the angle (the 2-D rotation matrix, written without one)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(
    x: Float[Tensor, "*batch seq d_head"],
    cos: Float[Tensor, "n_ctx d_head"],
    sin: Float[Tensor, "n_ctx d_head"],
    *,
    offset: int = 0,
    positions: Int[Tensor, "..."] | None = None,
) -> Float[Tensor, "*batch seq d_head"]:
    """Rotate each vector of ``x`` by its position's angles (tables from :func:`rope_tables`).

    The positions are ``offset .. offset + seq - 1`` (``offset`` = tokens already in the KV cache), or ``positions``
    when given: integers whose last axis is ``seq``, broadcastable against ``x.shape[:-1]`` (e.g. ``(seq,)``, or
    ``(batch, 1, seq)`` for ``x`` of shape ``(batch, n_heads, seq, d_head)``).
    """
    n_ctx, seq = cos.shape[0], x.shape[-2]
    if cos.shape != sin.shape or cos.shape[-1] != x.shape[-1]:
        raise ValueError(f"cos and sin must have shape (n_ctx, d_head={x.shape[-1]}), got {tuple(cos.shape)} and {tuple(sin.shape)}")
    if positions is None:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a non-negative int, got {offset!r}")
        check_sequence_fits(offset + seq, n_ctx)
        cos, sin = cos[offset : offset + seq], sin[offset : offset + seq]
    else:
        if positions.dtype.is_floating_point or positions.dtype == torch.bool:
            raise ValueError(f"positions must be an integer tensor, got dtype {positions.dtype}")
        if positions.dim() == 0 or positions.shape[-1] != seq:
            raise ValueError(f"positions must have last axis seq={seq}, got shape {tuple(positions.shape)}")
        if positions.min() < 0 or positions.max() >= n_ctx:
            raise ValueError(f"positions must lie in [0, n_ctx={n_ctx}), got values in [{positions.min()}, {positions.max()}]")
        cos, sin = cos[positions], sin[positions]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin


def interleaved_to_halves(d_head: int) -> Int[Tensor, " d_head"]:
    """The fixed permutation between RoPE's two layouts: ``x_halves = x_interleaved[..., perm]``.

    The paper and Meta's LLaMA code pair dimensions ``(2i, 2i + 1)``; GPT-NeoX and Hugging Face pair ``(i, i + d/2)``.
    Taking the even dimensions first, then the odd ones, moves pair ``i`` of the first layout onto pair ``i`` of the
    second, with the same angle ``θ_i``. Its inverse is ``torch.argsort(perm)``.
    """
    _check_d_head(d_head)
    return torch.cat([torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)])


def permute_to_halves(weight: Float[Tensor, "d_out d_in"], n_heads: int) -> Float[Tensor, "d_out d_in"]:
    """A W^Q or W^K trained with interleaved RoPE, its output rows reordered head by head for the halves layout.

    ``nn.Linear`` weights have one row per output dimension; rows ``h·d_head .. (h+1)·d_head - 1`` belong to head
    ``h``. Permuting each head's rows by :func:`interleaved_to_halves` gives a model whose halves-layout RoPE scores
    equal the original's interleaved ones: Hugging Face does this once when it converts Meta's LLaMA checkpoints.
    """
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
        raise ValueError(f"n_heads must be a positive int, got {n_heads!r}")
    if weight.dim() != 2 or weight.shape[0] % n_heads:
        raise ValueError(f"weight must be a matrix whose {weight.shape[0] if weight.dim() else 0} rows split into "
                         f"n_heads={n_heads} heads, got shape {tuple(weight.shape)}")
    d_head = weight.shape[0] // n_heads
    perm = interleaved_to_halves(d_head).to(weight.device)
    return weight.view(n_heads, d_head, -1)[:, perm].reshape(weight.shape)


class RotaryEmbedding(nn.Module):
    """The cos/sin tables of :func:`rope_tables` as buffers (they follow ``.to(device)``, are not trained and are
    not saved: they are a function of the configuration), and :func:`apply_rope` with them."""

    def __init__(self, d_head: int, n_ctx: int, base: float = 10000.0) -> None:
        super().__init__()
        self.d_head, self.n_ctx, self.base = d_head, n_ctx, base
        cos, sin = rope_tables(n_ctx, d_head, base)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(
        self, x: Float[Tensor, "*batch seq d_head"], *, offset: int = 0, positions: Int[Tensor, "..."] | None = None
    ) -> Float[Tensor, "*batch seq d_head"]:
        return apply_rope(x, self.cos, self.sin, offset=offset, positions=positions)

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, n_ctx={self.n_ctx}, base={self.base}"


class RotaryMultiHeadAttention(MultiHeadAttention):
    """Main difference with :class:`~tutorial_lib.multi_head.MultiHeadAttention`: after the head split, queries and
    keys are rotated by RoPE at their positions (LLaMA's attention). Values are not rotated: position only has to
    shape *which* keys a query picks, not what it reads from them.

    With a KV cache, the new tokens sit at positions ``cache.length ..``; keys are rotated *before* they enter the
    cache, so cached keys keep the rotation of their own position and are never rotated again. Self-attention only:
    relative positions between a query and a separate ``context`` mean nothing.
    """

    def __init__(self, d_model: int, n_heads: int, n_ctx: int, *, base: float = 10000.0, bias: bool = False, fast: bool = False) -> None:
        super().__init__(d_model, n_heads, bias=bias, fast=fast)
        self.rope = RotaryEmbedding(self.d_head, n_ctx, base)

    def _heads(self, x: Tensor, context: Tensor | None, cache: LayerKVCache | None) -> tuple[Tensor, Tensor, Tensor]:
        if context is not None:
            raise ValueError("context must be None: rotary attention is self-attention only")
        q, k, v = super()._heads(x, None, None)
        offset = 0 if cache is None else cache.length
        q, k = self.rope(q, offset=offset), self.rope(k, offset=offset)
        if cache is not None:
            k, v = cache.append(k, v)
        return q, k, v


def _check_d_head(d_head: int) -> None:
    if isinstance(d_head, bool) or not isinstance(d_head, int) or d_head < 2 or d_head % 2:
        raise ValueError(f"d_head must be a positive even int (RoPE rotates pairs of dimensions), got {d_head!r}")
