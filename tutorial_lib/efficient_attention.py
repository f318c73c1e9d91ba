"""Attention that costs less than ``query_pos × key_pos``, chapter 13.

Table 1 of the paper prices self-attention at O(n² · d) per layer: every query meets every key. Three answers:

* :func:`sliding_window_attention` (Longformer, Mistral): each query meets only its last ``window`` keys, O(n · w · d).
  :func:`banded_attention` computes only that band; the masked version computes the full matrix and hides most of it.
* :func:`linear_attention` (Katharopoulos et al. 2020): replace ``exp(q·k)`` by a product of feature maps
  ``φ(q)·φ(k)`` with ``φ = elu + 1``; associativity then gives ``φ(Q) (φ(K)ᵀ V)``, O(n · d²). A different model.
* :func:`tiled_attention` (FlashAttention, Dao et al. 2022): the *same* softmax attention, computed block by block with
  the online softmax (:func:`online_softmax`), so the ``query_pos × key_pos`` matrix never exists in memory at once.
  Still O(n² · d) arithmetic; the gain is memory (and, in a fused GPU kernel, memory traffic).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float
from torch import Tensor

from tutorial_lib.attention import attention, sliding_window_mask

# ------------------------------------------------------------------------------------------------ sliding window


def sliding_window_attention(
    q: Float[Tensor, "*batch seq d_head"],
    k: Float[Tensor, "*batch seq d_head"],
    v: Float[Tensor, "*batch seq d_value"],
    window: int,
    *,
    fast: bool = False,
) -> Float[Tensor, "*batch seq d_value"]:
    """Causal self-attention where position t sees only t - window + 1 .. t: the chapter-03 attention with
    :func:`~tutorial_lib.attention.sliding_window_mask`. Simple, but it still computes all ``seq × seq`` scores."""
    _check_self_attention(q, k)
    return attention(q, k, v, sliding_window_mask(q.shape[-2], window, device=q.device), fast=fast)


def banded_attention(
    q: Float[Tensor, "*batch seq d_head"],
    k: Float[Tensor, "*batch seq d_head"],
    v: Float[Tensor, "*batch seq d_value"],
    window: int,
) -> Float[Tensor, "*batch seq d_value"]:
    """The same result as :func:`sliding_window_attention`, computing only the ``seq × window`` scores of the band.

    The keys are padded with ``window - 1`` slots in front, then ``unfold`` gives every query a view of its own
    ``window`` keys (a view: no copy). Slots in front of position 0 are masked out.
    """
    _check_self_attention(q, k)
    _check_positive_int("window", window)
    seq = q.shape[-2]
    window = min(window, seq)  # a window longer than the sequence is the full causal mask
    pad = (0, 0, window - 1, 0)  # (d_head: none, seq: window - 1 in front)
    k_band = F.pad(k, pad).unfold(-2, window, 1)  # (*batch, seq, d_head, window): row t holds keys t-window+1..t
    v_band = F.pad(v, pad).unfold(-2, window, 1)  # (*batch, seq, d_value, window)
    scores = torch.einsum("...qd,...qdw->...qw", q, k_band) / math.sqrt(q.shape[-1])
    # Band slot j of query t holds key t - window + 1 + j; it exists only when that index is >= 0.
    key_index = torch.arange(seq, device=q.device)[:, None] - window + 1 + torch.arange(window, device=q.device)[None, :]
    weights = torch.softmax(scores.masked_fill(key_index < 0, float("-inf")), dim=-1)
    return torch.einsum("...qw,...qdw->...qd", weights, v_band)


# -------------------------------------------------------------------------------------------- linear attention


def elu_feature_map(x: Float[Tensor, "*shape"]) -> Float[Tensor, "*shape"]:
    """φ(x) = elu(x) + 1 (Katharopoulos et al. 2020, Eq. 7): positive, so every similarity is > 0. (In float32,
    ``elu(x) + 1`` rounds to 0 below x ≈ -17: the ``eps`` of :func:`linear_attention` keeps the division finite.)"""
    return F.elu(x) + 1


def linear_attention(
    q: Float[Tensor, "*batch query_pos d_head"],
    k: Float[Tensor, "*batch key_pos d_head"],
    v: Float[Tensor, "*batch key_pos d_value"],
    *,
    causal: bool = False,
    eps: float = 1e-6,
) -> Float[Tensor, "*batch query_pos d_value"]:
    """out_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / (φ(q_i)ᵀ Σ_j φ(k_j) + eps), with the sums over all keys, or over ``j ≤ i``
    when ``causal`` (then ``query_pos`` must equal ``key_pos``).

    Non-causal: the ``d_head × d_value`` matrix ``S = φ(K)ᵀ V`` is computed once and shared by every query. Causal:
    ``S_i`` is a running (cumulative) sum over positions, the transformer as an RNN. This version keeps every ``S_i``
    (``seq × d_head × d_value`` memory) to stay readable; an RNN-style loop or chunked sums keep one at a time.
    ``eps`` guards the division, as in the authors' code.
    """
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    if not causal:
        kv = torch.einsum("...kd,...ke->...de", phi_k, v)  # S = φ(K)ᵀ V
        normaliser = torch.einsum("...qd,...d->...q", phi_q, phi_k.sum(dim=-2))
        return torch.einsum("...qd,...de->...qe", phi_q, kv) / (normaliser[..., None] + eps)
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(f"causal linear attention needs query_pos == key_pos, got {q.shape[-2]} and {k.shape[-2]}")
    kv = torch.einsum("...kd,...ke->...kde", phi_k, v).cumsum(dim=-3)  # S_i = Σ_{j≤i} φ(k_j) v_jᵀ
    normaliser = torch.einsum("...qd,...qd->...q", phi_q, phi_k.cumsum(dim=-2))
    return torch.einsum("...qd,...qde->...qe", phi_q, kv) / (normaliser[..., None] + eps)


# -------------------------------------------------------------------------------- online softmax, tiled attention


def online_softmax(x: Float[Tensor, "*batch n"], block_size: int) -> Float[Tensor, "*batch n"]:
    """softmax over the last axis of finite scores, finding the maximum and the denominator together in one pass
    over blocks of ``block_size`` (Milakov & Gimelshein 2018) instead of one pass for each.

    A running maximum ``m`` and a running denominator ``l = Σ exp(x_j - m)`` are kept. When a block raises the
    maximum from ``m`` to ``m'``, the old sum is rescaled by ``exp(m - m')``: exact, and never overflowing.
    """
    _check_positive_int("block_size", block_size)
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype, device=x.device)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start : start + block_size]
        m_new = torch.maximum(m, block.max(dim=-1).values)
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new[..., None]).sum(dim=-1)
        m = m_new
    return torch.exp(x - m[..., None]) / l[..., None]


def tiled_attention(
    q: Float[Tensor, "*batch query_pos d_head"],
    k: Float[Tensor, "*batch key_pos d_head"],
    v: Float[Tensor, "*batch key_pos d_value"],
    mask: Bool[Tensor, "..."] | None = None,
    *,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
) -> Float[Tensor, "*batch query_pos d_value"]:
    """softmax(Q Kᵀ / √d_k) V, as :func:`~tutorial_lib.attention.scaled_dot_product_attention` computes it, but one
    ``block_q × block_k`` tile of scores at a time (FlashAttention's algorithm, in plain PyTorch).

    For each block of queries, the key blocks are visited in turn, keeping per query a running maximum ``m``, a
    running denominator ``l`` and an un-normalised output ``acc``; both are rescaled by ``exp(m_old - m_new)`` when the
    maximum grows, and ``acc / l`` is the answer. Only one tile of scores exists at a time: beyond the inputs and the
    output (``query_pos · d``), memory is ``block_q · block_k`` per head instead of ``query_pos · key_pos``.

    ``mask`` (True = may attend, broadcastable to ``(..., query_pos, key_pos)``) and ``causal`` (the queries are the
    last ``query_pos`` positions of the keys, as with a KV cache) combine. Causal tiles entirely above the diagonal
    are skipped, never computed. A query whose keys are all masked gets a zero output, as in chapter 03.
    """
    _check_positive_int("block_q", block_q)
    _check_positive_int("block_k", block_k)
    n_query, n_key = q.shape[-2], k.shape[-2]
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ValueError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
        mask = mask.reshape((1,) * max(0, 2 - mask.dim()) + mask.shape)  # at least (query_pos, key_pos) axes
        mask = mask.expand(*mask.shape[:-2], n_query, n_key)  # a view: size-1 axes are not copied
    n_past = n_key - n_query
    if causal and n_past < 0:
        raise ValueError(f"causal needs query_pos <= key_pos, got {n_query} queries and {n_key} keys")
    q = q / math.sqrt(q.shape[-1])
    outputs = []
    for q_start in range(0, n_query, block_q):
        q_blk = q[..., q_start : q_start + block_q, :]
        rows = q_blk.shape[-2]
        m = q.new_full((*q_blk.shape[:-1], 1), float("-inf"))  # running max of the scores, per query
        l = q.new_zeros((*q_blk.shape[:-1], 1))  # running Σ exp(score - m)
        acc = q.new_zeros((*q_blk.shape[:-1], v.shape[-1]))  # running Σ exp(score - m) v
        # Causal: query q_start + r sees keys up to n_past + q_start + r, so later key blocks are all masked.
        k_end = min(n_key, n_past + q_start + rows) if causal else n_key
        for k_start in range(0, k_end, block_k):
            scores = q_blk @ k[..., k_start : k_start + block_k, :].transpose(-2, -1)
            cols = scores.shape[-1]
            keep = None if mask is None else mask[..., q_start : q_start + rows, k_start : k_start + cols]
            if causal:
                query_abs = n_past + torch.arange(q_start, q_start + rows, device=q.device)[:, None]
                tile = torch.arange(k_start, k_start + cols, device=q.device)[None, :] <= query_abs
                keep = tile if keep is None else keep & tile
            if keep is not None:
                scores = scores.masked_fill(~keep, float("-inf"))
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
            # Rows with no visible key yet have m_new = -inf; shifting by 0 keeps exp(-inf) = 0 instead of NaN.
            m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)
            p = torch.exp(scores - m_safe)
            rescale = torch.exp(m - m_safe)
            l = l * rescale + p.sum(dim=-1, keepdim=True)
            acc = acc * rescale + p @ v[..., k_start : k_start + block_k, :]
            m = m_new
        outputs.append(torch.where(l > 0, acc / l.clamp_min(torch.finfo(l.dtype).tiny), 0.0))
    return torch.cat(outputs, dim=-2)


def _check_positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_self_attention(q: Tensor, k: Tensor) -> None:
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(f"sliding-window self-attention needs as many queries as keys, got {q.shape[-2]} and {k.shape[-2]}")
