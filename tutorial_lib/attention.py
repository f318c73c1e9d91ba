"""Scaled dot-product attention, Eq. (1) of the paper, and the masks of §3.2.3 (chapter 03).

Mask convention, everywhere in the package: a **boolean** tensor where ``True`` means *may attend*,
broadcastable to ``(..., query_pos, key_pos)``. It is the convention of ``F.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

# Shared argument checks (numpy integers accepted, long arguments shortened), under the names the chapter imports.
from tutorial_lib.validation import broadcast_shapes
from tutorial_lib.validation import check_positive_int as _check_positive_int
from tutorial_lib.validation import shortened as _shortened


def scaled_dot_product_attention(
    q: Float[Tensor, "*batch query_pos d_head"],
    k: Float[Tensor, "*batch key_pos d_head"],
    v: Float[Tensor, "*batch key_pos d_value"],
    mask: Bool[Tensor, "..."] | None = None,
) -> tuple[Float[Tensor, "*batch query_pos d_value"], Float[Tensor, "*batch query_pos key_pos"]]:
    """Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V, returning the output and the attention weights.

    ``mask`` is boolean, True where a query may attend to a key, broadcastable to ``(..., query_pos, key_pos)``.
    A query whose keys are all masked gets zero weights and a zero output (not NaN).
    """
    _check_qkv(q, k, v, mask)
    d_head = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        # A row with every key masked is softmax(-inf, ..., -inf) = NaN; it attends to nothing instead.
        weights = weights.nan_to_num(0.0)
    return weights @ v, weights


def attention(
    q: Float[Tensor, "*batch query_pos d_head"],
    k: Float[Tensor, "*batch key_pos d_head"],
    v: Float[Tensor, "*batch key_pos d_value"],
    mask: Bool[Tensor, "..."] | None = None,
    *,
    fast: bool = False,
) -> Float[Tensor, "*batch query_pos d_value"]:
    """The one switch between the readable path and PyTorch's fused kernel (same mask convention).

    The fast path does not materialise the weights; use :func:`scaled_dot_product_attention` to look at them.
    """
    if not fast:
        return scaled_dot_product_attention(q, k, v, mask)[0]
    if mask is not None:
        _check_mask(mask)
        # The fused kernel returns NaN for a fully masked row; keep the readable path's zeros.
        any_key = mask.any(dim=-1, keepdim=True)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~any_key)
        return out.masked_fill(~any_key, 0.0)
    return F.scaled_dot_product_attention(q, k, v)


def causal_attention(
    q: Float[Tensor, "*batch query_pos d_head"],
    k: Float[Tensor, "*batch key_pos d_head"],
    v: Float[Tensor, "*batch key_pos d_value"],
    *,
    fast: bool = False,
) -> Float[Tensor, "*batch query_pos d_value"]:
    """Causal attention where the queries are the *last* ``query_pos`` positions of the keys (as with a KV cache).

    On the fast path with as many queries as keys this uses the kernel's own ``is_causal`` flag, which needs no
    mask tensor at all (the fastest case, used in training).
    """
    n_query, n_key = q.shape[-2], k.shape[-2]
    if fast and n_query == n_key:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if n_query == 1:  # one new token sees every cached key: no mask needed
        return attention(q, k, v, fast=fast)
    mask = causal_mask(n_query, device=q.device, n_past=n_key - n_query)
    return attention(q, k, v, mask, fast=fast)


def causal_mask(seq_len: int, device: torch.device | str | None = None, *, n_past: int = 0) -> Bool[Tensor, "query_pos key_pos"]:
    """``(seq_len, n_past + seq_len)`` boolean mask, True on and below the diagonal: position t sees 0..t.

    ``n_past`` shifts the diagonal for queries that follow ``n_past`` cached keys (the KV cache's offset).
    """
    _check_positive_int("seq_len", seq_len)
    if not isinstance(n_past, int) or n_past < 0:
        raise ValueError(f"n_past must be a non-negative int, got {n_past!r}")
    query = torch.arange(seq_len, device=device)[:, None] + n_past
    key = torch.arange(n_past + seq_len, device=device)[None, :]
    return key <= query


def padding_mask(lengths: Int[Tensor, " batch"], seq_len: int) -> Bool[Tensor, "batch 1 key_pos"]:
    """``(batch, 1, seq_len)`` mask, True on the first ``lengths[b]`` keys of each sequence (the real tokens).

    The singleton axis broadcasts over the queries: padding keys are hidden from every query.
    """
    _check_positive_int("seq_len", seq_len)
    if isinstance(lengths, (list, tuple)) and all(type(n) is int for n in lengths):
        lengths = torch.tensor(lengths, dtype=torch.long)  # [2, 3] says as much as a tensor
    if not isinstance(lengths, Tensor) or lengths.dim() != 1:
        got = f"shape {tuple(lengths.shape)}" if isinstance(lengths, Tensor) else _shortened(lengths)
        raise ValueError(f"lengths must be a 1-D integer tensor or list (one length per sequence), got {got}")
    if lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be an integer tensor, got dtype {lengths.dtype}")
    if lengths.numel() and (lengths.min() < 0 or lengths.max() > seq_len):
        raise ValueError(f"lengths must lie in [0, seq_len={seq_len}], got {_shortened(lengths.tolist())}")
    positions = torch.arange(seq_len, device=lengths.device)
    return (positions[None, :] < lengths[:, None])[:, None, :]


def sliding_window_mask(seq_len: int, window: int, device: torch.device | str | None = None) -> Bool[Tensor, "query_pos key_pos"]:
    """Causal mask that also forgets the distant past: position t sees t - window + 1 .. t (``window`` keys)."""
    _check_positive_int("seq_len", seq_len)
    _check_positive_int("window", window)
    query = torch.arange(seq_len, device=device)[:, None]
    key = torch.arange(seq_len, device=device)[None, :]
    return (key <= query) & (key > query - window)


def bidirectional_mask(seq_len: int, device: torch.device | str | None = None) -> Bool[Tensor, "query_pos key_pos"]:
    """Every position sees every position (the encoder's self-attention): all True."""
    _check_positive_int("seq_len", seq_len)
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device)


def _check_mask(mask: object) -> None:
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = f"dtype {mask.dtype}" if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a bool tensor (True = may attend), got {got}")


def _check_qkv(q: object, k: object, v: object, mask: object) -> None:
    """Errors that name the argument, before torch's own (\"Expected size for first two dimensions of batch2…\")."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor):
            raise ValueError(f"{name} must be a tensor, got {type(x).__name__}")
        if x.dim() < 2:
            raise ValueError(f"{name} must have shape (batch axes, positions, features), at least 2-D, got {tuple(x.shape)}")
        if not x.dtype.is_floating_point:
            raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k's last axis (d_head) must equal q's: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"v must have one row per key (k's second-to-last axis): k {tuple(k.shape)}, v {tuple(v.shape)}")
    batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if batch is None:
        raise ValueError(f"the batch axes of q, k and v do not broadcast: q {tuple(q.shape)}, k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    if mask is not None:
        _check_mask(mask)
        scores = (*batch, q.shape[-2], k.shape[-2])
        if broadcast_shapes(mask.shape, scores) is None:
            raise ValueError(f"mask must broadcast to the scores' shape {scores} (batch axes, query_pos, key_pos), "
                             f"got {tuple(mask.shape)}")
