"""Attention that costs less than ``query_pos × key_pos``, chapter 13.

Table 1 of the paper prices self-attention at O(n² · d) per layer: every query meets every key. Three answers:

* :func:`sliding_window_attention` (Longformer, Mistral): each query meets only its last ``window`` keys, O(n · w · d).
  :func:`banded_attention` computes only that band, block by block; the masked version computes the full matrix and
  hides most of it.
* :func:`linear_attention` (Katharopoulos et al. 2020): replace ``exp(q·k)`` by a product of feature maps
  ``φ(q)·φ(k)`` with ``φ = elu + 1``; associativity then gives ``φ(Q) (φ(K)ᵀ V)``, O(n · d²). A different model; its
  causal form is a recurrent network (:func:`linear_attention_step`), and :class:`LinearMultiHeadAttention` puts it
  into a GPT.
* :func:`tiled_attention` (FlashAttention, Dao et al. 2022): the *same* softmax attention, computed block by block with
  the online softmax (:func:`online_softmax`, :func:`tile_update`), so the ``query_pos × key_pos`` matrix never exists
  in memory at once. Still O(n² · d) arithmetic; the gain is memory (and, in a fused GPU kernel, memory traffic).
* :func:`flash_attention` (FlashAttention's backward, as FlashAttention-2 orders it): an autograd function whose
  forward saves only q, k, v, the output and each query's log-sum-exp, and whose backward recomputes every tile
  (:func:`tile_backward`), so training, too, never holds the ``query_pos × key_pos`` weights. Differentiating
  :func:`tiled_attention` with autograd instead keeps every tile's weights alive until the backward: O(n²) again.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from tutorial_lib.attention import attention, sliding_window_mask
from tutorial_lib.kv_cache import LayerKVCache
from tutorial_lib.multi_head import MultiHeadAttention, merge_heads
from tutorial_lib.validation import check_positive_int as _check_positive_int

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
    """The same result as :func:`sliding_window_attention`, computing only ``2 · seq · window`` scores, not ``seq²``.

    The queries are cut into blocks of ``window`` positions. A query of block b sees keys of block b and of block
    b - 1 only, so each block of queries meets the ``2 · window`` keys of those two blocks. The keys get one block of
    padding in front (the block before position 0) and the sequence is padded up to whole blocks; the mask hides the
    padding and every key outside the query's window.
    """
    _check_self_attention(q, k)
    _check_positive_int("window", window)
    seq = q.shape[-2]
    window = min(window, seq)  # a window longer than the sequence is the full causal mask
    n_blocks = -(-seq // window)
    pad_end = n_blocks * window - seq
    q = q / math.sqrt(q.shape[-1])  # scaled once, as tiled_attention does: one fewer matrix of scores
    q_blocks = F.pad(q, (0, 0, 0, pad_end)).unflatten(-2, (n_blocks, window))  # (*batch, n_blocks, window, d_head)
    k_blocks = F.pad(k, (0, 0, window, pad_end)).unflatten(-2, (n_blocks + 1, window))  # block -1 first
    v_blocks = F.pad(v, (0, 0, window, pad_end)).unflatten(-2, (n_blocks + 1, window))
    k_pairs = torch.cat([k_blocks[..., :-1, :, :], k_blocks[..., 1:, :, :]], dim=-2)  # blocks b-1 and b: 2·window keys
    v_pairs = torch.cat([v_blocks[..., :-1, :, :], v_blocks[..., 1:, :, :]], dim=-2)
    scores = q_blocks @ k_pairs.transpose(-2, -1)  # (*batch, n_blocks, window, 2·window)
    # Query r of block b is position b·window + r; key c of its pair is position (b - 1)·window + c.
    blocks = torch.arange(n_blocks, device=q.device)[:, None, None]
    query = blocks * window + torch.arange(window, device=q.device)[None, :, None]
    key = (blocks - 1) * window + torch.arange(2 * window, device=q.device)[None, None, :]
    keep = (key <= query) & (key > query - window) & (key >= 0)
    weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
    return (weights @ v_pairs).flatten(-3, -2)[..., :seq, :]


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
    chunk_size: int = 64,
) -> Float[Tensor, "*batch query_pos d_value"]:
    """out_i = φ(q_i)ᵀ S / (φ(q_i)ᵀ z + eps) with S = Σ_j φ(k_j) v_jᵀ and z = Σ_j φ(k_j), the sums over all keys, or
    over ``j ≤ i`` when ``causal`` (then ``query_pos`` must equal ``key_pos``).

    Non-causal: ``S`` (``d_head × d_value``) and ``z`` are computed once and shared by every query. Causal: ``S`` and
    ``z`` become running sums, carried from one chunk of ``chunk_size`` positions to the next; inside a chunk the
    few pairs ``j ≤ i`` are summed directly, as the masked product ``(φ(Q) φ(K)ᵀ ⊙ tril) V``. Memory stays
    ``chunk_size²`` per head, plus the state; the same numbers as :func:`linear_attention_step` run position by
    position. ``eps`` guards the division, as in the authors' code.
    """
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
    _check_positive_int("chunk_size", chunk_size)
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    if not causal:
        kv = phi_k.transpose(-2, -1) @ v  # S = φ(K)ᵀ V: (*batch, d_head, d_value), whatever the length
        k_sum = phi_k.sum(dim=-2, keepdim=True)  # z = Σ_j φ(k_j), as a row: (*batch, 1, d_head)
        return (phi_q @ kv) / ((phi_q * k_sum).sum(dim=-1, keepdim=True) + eps)
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(f"causal linear attention needs query_pos == key_pos, got {q.shape[-2]} and {k.shape[-2]}")
    kv = v.new_zeros(*v.shape[:-2], q.shape[-1], v.shape[-1])  # S over the chunks before this one
    k_sum = v.new_zeros(*v.shape[:-2], 1, q.shape[-1])  # z over the chunks before this one
    outputs = []
    for start in range(0, q.shape[-2], chunk_size):
        phi_q_c, phi_k_c = phi_q[..., start : start + chunk_size, :], phi_k[..., start : start + chunk_size, :]
        v_c = v[..., start : start + chunk_size, :]
        within = (phi_q_c @ phi_k_c.transpose(-2, -1)).tril()  # φ(q_i)·φ(k_j) for j ≤ i inside the chunk
        numerator = phi_q_c @ kv + within @ v_c
        normaliser = (phi_q_c * k_sum).sum(dim=-1, keepdim=True) + within.sum(dim=-1, keepdim=True)
        outputs.append(numerator / (normaliser + eps))
        kv = kv + phi_k_c.transpose(-2, -1) @ v_c
        k_sum = k_sum + phi_k_c.sum(dim=-2, keepdim=True)
    return torch.cat(outputs, dim=-2)


class LinearAttentionState(NamedTuple):
    """What causal linear attention remembers of the past: two running sums whose size does not grow with it."""

    kv: Float[Tensor, "*batch d_head d_value"]  # S = Σ_j φ(k_j) v_jᵀ
    k_sum: Float[Tensor, "*batch d_head"]  # z = Σ_j φ(k_j)


def linear_attention_step(
    q: Float[Tensor, "*batch d_head"],
    k: Float[Tensor, "*batch d_head"],
    v: Float[Tensor, "*batch d_value"],
    state: LinearAttentionState | None = None,
    *,
    eps: float = 1e-6,
) -> tuple[Float[Tensor, "*batch d_value"], LinearAttentionState]:
    """One position of causal linear attention as a recurrent network ("the transformer as an RNN"): fold this
    position's key and value into the state, then read the state with its query. ``state=None`` starts empty."""
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    if state is None:
        state = LinearAttentionState(v.new_zeros(*k.shape, v.shape[-1]), torch.zeros_like(k))
    kv = state.kv + phi_k[..., :, None] * v[..., None, :]  # S_t = S_{t-1} + φ(k_t) v_tᵀ
    k_sum = state.k_sum + phi_k  # z_t = z_{t-1} + φ(k_t)
    numerator = (phi_q[..., None, :] @ kv).squeeze(-2)
    return numerator / ((phi_q * k_sum).sum(dim=-1, keepdim=True) + eps), LinearAttentionState(kv, k_sum)


def linear_attention_weights(
    q: Float[Tensor, "*batch query_pos d_head"],
    k: Float[Tensor, "*batch key_pos d_head"],
    *,
    causal: bool = False,
    eps: float = 1e-6,
) -> Float[Tensor, "*batch query_pos key_pos"]:
    """The weights linear attention gives each key, written out (``query_pos × key_pos``, for looking at them only):
    φ(q_i)·φ(k_j) normalised over the visible keys. ``weights @ v`` is :func:`linear_attention`'s output."""
    similarity = elu_feature_map(q) @ elu_feature_map(k).transpose(-2, -1)
    if causal:
        similarity = similarity.tril(diagonal=k.shape[-2] - q.shape[-2])
    return similarity / (similarity.sum(dim=-1, keepdim=True) + eps)


class LinearMultiHeadAttention(MultiHeadAttention):
    """Main difference with :class:`~tutorial_lib.multi_head.MultiHeadAttention`: each head computes
    :func:`linear_attention` (the kernel φ(q)·φ(k), no softmax, no 1/√d_k) instead of Eq. (1). Same parameters.

    Only ``causal`` decides what a query sees: a boolean ``mask`` and a KV ``cache`` are refused (generation would
    carry a :class:`LinearAttentionState` per head instead of a cache).
    """

    def forward(
        self,
        x: Float[Tensor, "batch query_pos d_model"],
        context: Float[Tensor, "batch key_pos d_model"] | None = None,
        *,
        mask: Bool[Tensor, "..."] | None = None,
        causal: bool = False,
        cache: LayerKVCache | None = None,
    ) -> Float[Tensor, "batch query_pos d_model"]:
        self._refuse(mask, cache)
        q, k, v = self._heads(x, context, None)
        return self.out_proj(merge_heads(linear_attention(q, k, v, causal=causal)))

    def forward_with_weights(
        self,
        x: Float[Tensor, "batch query_pos d_model"],
        context: Float[Tensor, "batch key_pos d_model"] | None = None,
        *,
        mask: Bool[Tensor, "..."] | None = None,
        causal: bool = False,
    ) -> tuple[Float[Tensor, "batch query_pos d_model"], Float[Tensor, "batch n_heads query_pos key_pos"]]:
        """The output and every head's weights (:func:`linear_attention_weights`), for the pattern viewers."""
        self._refuse(mask, None)
        q, k, v = self._heads(x, context, None)
        weights = linear_attention_weights(q, k, causal=causal)
        return self.out_proj(merge_heads(weights @ v)), weights

    @staticmethod
    def _refuse(mask: Tensor | None, cache: LayerKVCache | None) -> None:
        if mask is not None:
            raise ValueError("mask must be None: linear attention takes causal=True or sees every key")
        if cache is not None:
            raise ValueError("cache must be None: causal linear attention carries a LinearAttentionState, not a KV cache")


def use_linear_attention(model: nn.Module) -> None:
    """Surgery for the ablation runner: every block's attention becomes a :class:`LinearMultiHeadAttention` with the
    same weights (``model.blocks``, each with an ``attn``, as :class:`~tutorial_lib.models.gpt.GPT` has them)."""
    blocks = getattr(model, "blocks", None)
    if blocks is None or not all(isinstance(getattr(block, "attn", None), MultiHeadAttention) for block in blocks):
        raise ValueError("model must have .blocks whose .attn is a MultiHeadAttention (a GPT)")
    for block in blocks:
        old = block.attn
        new = LinearMultiHeadAttention(old.d_model, old.n_heads, bias=old.q_proj.bias is not None)
        new.load_state_dict(old.state_dict(), strict=True)
        block.attn = new.to(old.q_proj.weight.device)


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


def tile_update(
    q_blk: Float[Tensor, "*batch block_q d_head"],
    k_blk: Float[Tensor, "*batch block_k d_head"],
    v_blk: Float[Tensor, "*batch block_k d_value"],
    m: Float[Tensor, "*batch block_q 1"],
    l: Float[Tensor, "*batch block_q 1"],
    acc: Float[Tensor, "*batch block_q d_value"],
    keep: Bool[Tensor, "..."] | None = None,
) -> tuple[Float[Tensor, "*batch block_q 1"], Float[Tensor, "*batch block_q 1"], Float[Tensor, "*batch block_q d_value"]]:
    """One step of FlashAttention's inner loop: fold one tile of keys into a block of queries' running state.

    ``q_blk`` is already divided by √d_k. Per query: ``m`` the largest score so far, ``l = Σ exp(score - m)`` and
    ``acc = Σ exp(score - m) v`` over the keys seen so far; ``keep`` (True = may attend) masks the tile. When the
    maximum grows, **both** ``l`` and ``acc`` are rescaled by ``exp(m_old - m_new)``. A query that has seen no key
    yet keeps ``m = -inf`` and ``l = acc = 0`` (its shift is taken as 0, so no ``-inf - (-inf)`` = NaN).
    """
    scores = q_blk @ k_blk.transpose(-2, -1)  # one block_q × block_k tile of scores
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)
    p = torch.exp(scores - m_safe)
    rescale = torch.exp(m - m_safe)
    return m_new, l * rescale + p.sum(dim=-1, keepdim=True), acc * rescale + p @ v_blk


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

    For each block of queries, the key blocks are visited in turn and folded in by :func:`tile_update`; ``acc / l``
    is the answer. Only one tile of scores exists at a time: beyond the inputs and the output (``query_pos · d``),
    memory is ``block_q · block_k`` per head instead of ``query_pos · key_pos``.

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
            cols = min(block_k, n_key - k_start)
            keep = None if mask is None else mask[..., q_start : q_start + rows, k_start : k_start + cols]
            if causal:
                query_abs = n_past + torch.arange(q_start, q_start + rows, device=q.device)[:, None]
                tile = torch.arange(k_start, k_start + cols, device=q.device)[None, :] <= query_abs
                keep = tile if keep is None else keep & tile
            m, l, acc = tile_update(q_blk, k[..., k_start : k_start + cols, :], v[..., k_start : k_start + cols, :],
                                    m, l, acc, keep)
        outputs.append(torch.where(l > 0, acc / l.clamp_min(torch.finfo(l.dtype).tiny), 0.0))
    return torch.cat(outputs, dim=-2)


# ------------------------------------------------------------------ FlashAttention's backward: store the log-sum-exp


def tile_backward(
    q_blk: Float[Tensor, "*batch block_q d_head"],
    k_blk: Float[Tensor, "*batch block_k d_head"],
    v_blk: Float[Tensor, "*batch block_k d_value"],
    d_out_blk: Float[Tensor, "*batch block_q d_value"],
    lse_blk: Float[Tensor, "*batch block_q 1"],
    delta_blk: Float[Tensor, "*batch block_q 1"],
    scale: float,
    keep: Bool[Tensor, "..."] | None = None,
) -> tuple[Float[Tensor, "*batch block_q d_head"], Float[Tensor, "*batch block_k d_head"], Float[Tensor, "*batch block_k d_value"]]:
    """One tile of FlashAttention-2's backward: this tile's share of dQ, dK and dV, from the tile recomputed.

    ``q_blk`` is not scaled (the scores are ``scale · q kᵀ``); ``lse_blk`` is each query's log-sum-exp of its scores
    over *all* its keys, saved by the forward, so ``exp(score - lse)`` is the attention weight itself, normalised
    over the whole row although only this tile is in hand; ``delta_blk`` is ``D = rowsum(dO ∘ O)``, the softmax's
    backward term. With ``dP = dO Vᵀ``: ``dS = P ∘ (dP - D)``, ``dV = Pᵀ dO``, ``dQ = scale · dS K``,
    ``dK = scale · dSᵀ Q``. ``keep`` (True = may attend) masks the tile: a hidden key gets ``P = 0``.
    """
    scores = (q_blk * scale) @ k_blk.transpose(-2, -1)  # the same tile of scores as the forward
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    p = torch.exp(scores - lse_blk)  # the attention weights of this tile, already normalised: no division
    d_v = p.transpose(-2, -1) @ d_out_blk
    d_p = d_out_blk @ v_blk.transpose(-2, -1)
    d_s = p * (d_p - delta_blk)  # the softmax's backward, with Σ_j P_ij dP_ij = D_i computed once per row
    return scale * (d_s @ k_blk), scale * (d_s.transpose(-2, -1) @ q_blk), d_v


def flash_attention_forward(
    q: Float[Tensor, "*batch query_pos d_head"],
    k: Float[Tensor, "*batch key_pos d_head"],
    v: Float[Tensor, "*batch key_pos d_value"],
    *,
    causal: bool = False,
    block_size: int = 64,
) -> tuple[Float[Tensor, "*batch query_pos d_value"], Float[Tensor, "*batch query_pos 1"]]:
    """The output of Eq. (1) and each query's log-sum-exp ``L = m + log ℓ``, by :func:`tile_update` in
    FlashAttention-2's order: queries outer, keys inner, one division by ``ℓ`` per query block at the end. ``causal``:
    the queries are the last ``query_pos`` positions of the keys (as in :func:`tiled_attention`), tiles above the
    diagonal are skipped."""
    scale = 1 / math.sqrt(q.shape[-1])
    n_query, n_key = q.shape[-2], k.shape[-2]
    n_past = n_key - n_query
    outputs, lses = [], []
    for q_start in range(0, n_query, block_size):
        q_blk = q[..., q_start : q_start + block_size, :] * scale
        rows = q_blk.shape[-2]
        m = q.new_full((*q_blk.shape[:-1], 1), float("-inf"))
        l = q.new_zeros((*q_blk.shape[:-1], 1))
        acc = q.new_zeros((*q_blk.shape[:-1], v.shape[-1]))
        k_end = min(n_key, n_past + q_start + rows) if causal else n_key
        for k_start in range(0, k_end, block_size):
            k_stop = min(k_start + block_size, n_key)
            keep = _causal_tile(n_past, q_start, rows, k_start, k_stop, q.device) if causal else None
            m, l, acc = tile_update(q_blk, k[..., k_start:k_stop, :], v[..., k_start:k_stop, :], m, l, acc, keep)
        outputs.append(acc / l)  # every query sees at least one key (causal: itself), so ℓ > 0
        lses.append(m + torch.log(l))
    return torch.cat(outputs, dim=-2), torch.cat(lses, dim=-2)


def flash_attention_backward(
    q: Float[Tensor, "*batch query_pos d_head"],
    k: Float[Tensor, "*batch key_pos d_head"],
    v: Float[Tensor, "*batch key_pos d_value"],
    out: Float[Tensor, "*batch query_pos d_value"],
    lse: Float[Tensor, "*batch query_pos 1"],
    d_out: Float[Tensor, "*batch query_pos d_value"],
    *,
    causal: bool = False,
    block_size: int = 64,
) -> tuple[Float[Tensor, "*batch query_pos d_head"], Float[Tensor, "*batch key_pos d_head"], Float[Tensor, "*batch key_pos d_value"]]:
    """dQ, dK, dV from what the forward kept (q, k, v, the output and the log-sum-exp), recomputing every tile with
    :func:`tile_backward`: FlashAttention-2's backward, keys outer (each key block's dK and dV are summed over the
    query blocks, then written once), queries inner (dQ is accumulated into its rows). Nothing of size
    ``query_pos × key_pos`` is ever held."""
    scale = 1 / math.sqrt(q.shape[-1])
    n_query, n_key = q.shape[-2], k.shape[-2]
    n_past = n_key - n_query
    delta = (d_out * out).sum(dim=-1, keepdim=True)  # D_i = rowsum(dO ∘ O), once per query
    d_q, d_k, d_v = torch.zeros_like(q), torch.empty_like(k), torch.empty_like(v)
    for k_start in range(0, n_key, block_size):
        k_stop = min(k_start + block_size, n_key)
        k_blk, v_blk = k[..., k_start:k_stop, :], v[..., k_start:k_stop, :]
        d_k_blk, d_v_blk = torch.zeros_like(k_blk), torch.zeros_like(v_blk)
        # Causal: query r sees keys up to n_past + r, so the queries before k_start - n_past see none of this block.
        first = max(0, k_start - n_past) // block_size * block_size if causal else 0
        for q_start in range(first, n_query, block_size):
            rows = slice(q_start, min(q_start + block_size, n_query))
            keep = _causal_tile(n_past, q_start, rows.stop - q_start, k_start, k_stop, q.device) if causal else None
            d_q_part, d_k_part, d_v_part = tile_backward(q[..., rows, :], k_blk, v_blk, d_out[..., rows, :],
                                                         lse[..., rows, :], delta[..., rows, :], scale, keep)
            d_q[..., rows, :] += d_q_part
            d_k_blk += d_k_part
            d_v_blk += d_v_part
        d_k[..., k_start:k_stop, :] = d_k_blk
        d_v[..., k_start:k_stop, :] = d_v_blk
    return d_q, d_k, d_v


class FlashAttention(torch.autograd.Function):
    """Eq. (1) with FlashAttention's memory in training: the forward saves q, k, v, the output and the per-query
    log-sum-exp, never the weights; the backward recomputes each tile of weights from them."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, causal: bool, block_size: int) -> Tensor:
        out, lse = flash_attention_forward(q, k, v, causal=causal, block_size=block_size)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.block_size = causal, block_size
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out: Tensor) -> tuple[Tensor, Tensor, Tensor, None, None]:
        q, k, v, out, lse = ctx.saved_tensors
        d_q, d_k, d_v = flash_attention_backward(q, k, v, out, lse, d_out, causal=ctx.causal, block_size=ctx.block_size)
        return d_q, d_k, d_v, None, None  # causal and block_size get no gradient


def flash_attention(
    q: Float[Tensor, "*batch query_pos d_head"],
    k: Float[Tensor, "*batch key_pos d_head"],
    v: Float[Tensor, "*batch key_pos d_value"],
    *,
    causal: bool = False,
    block_size: int = 64,
) -> Float[Tensor, "*batch query_pos d_value"]:
    """softmax(Q Kᵀ / √d_k) V with FlashAttention's forward *and* backward (:class:`FlashAttention`): in training,
    memory beyond the inputs, the output and their gradients is one ``query_pos`` log-sum-exp and a few
    ``block_size × block_size`` tiles, never ``query_pos × key_pos``. ``causal``: the queries are the last
    ``query_pos`` positions of the keys (square: the usual causal mask). q, k and v share their leading axes."""
    _check_flash_inputs(q, k, v, causal, block_size)
    return FlashAttention.apply(q, k, v, causal, block_size)


def _causal_tile(n_past: int, q_start: int, rows: int, k_start: int, k_stop: int, device: torch.device) -> Tensor:
    """The causal mask of one tile in absolute positions: query n_past + q_start + r sees keys up to itself."""
    query = n_past + torch.arange(q_start, q_start + rows, device=device)[:, None]
    return torch.arange(k_start, k_stop, device=device)[None, :] <= query


def _check_flash_inputs(q: object, k: object, v: object, causal: object, block_size: object) -> None:
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if not isinstance(tensor, Tensor) or tensor.dim() < 2 or not tensor.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor (..., positions, features), got "
                             f"{tensor.dtype if isinstance(tensor, Tensor) else type(tensor).__name__}"
                             f"{' of shape ' + str(tuple(tensor.shape)) if isinstance(tensor, Tensor) else ''}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(f"q, k and v must share their leading (batch, head) axes, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k must have q's d_head = {q.shape[-1]} features, got {k.shape[-1]}")
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"v must have one row per key ({k.shape[-2]}), got {v.shape[-2]}")
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        raise ValueError(f"q and k must hold at least one position, got {q.shape[-2]} queries and {k.shape[-2]} keys")
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be a bool, got {causal!r}")
    if causal and q.shape[-2] > k.shape[-2]:
        raise ValueError(f"causal needs query_pos <= key_pos, got {q.shape[-2]} queries and {k.shape[-2]} keys")
    _check_positive_int("block_size", block_size)


def _check_self_attention(q: Tensor, k: Tensor) -> None:
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(f"sliding-window self-attention needs as many queries as keys, got {q.shape[-2]} and {k.shape[-2]}")
