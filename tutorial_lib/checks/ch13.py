"""Chapter 13's exercises: the online softmax, one tile of FlashAttention, banded attention, causal linear attention,
and the backward of one tile.

- ``13.online_softmax`` is the softmax over the last axis in one pass over blocks, with a running maximum and a
  running denominator (:func:`tutorial_lib.efficient_attention.online_softmax`).
- ``13.tile_update`` folds one tile of keys into a block of queries' running ``(m, l, acc)`` under the causal mask of
  a self-attention layer, the tile placed by ``q_start`` and ``k_start``
  (:func:`tutorial_lib.efficient_attention.tile_update`).
- ``13.banded_attention`` is sliding-window attention computed without the ``seq × seq`` score matrix: the check runs
  the answer under a recorder of every tensor it creates, and a tensor the size of the score matrix fails it.
- ``13.causal_linear_attention`` is linear attention with φ = elu + 1 and running sums
  (:func:`tutorial_lib.efficient_attention.linear_attention` with ``causal=True``).
- ``13.tile_backward`` is one tile of FlashAttention-2's backward: this tile's share of dQ, dK and dV, from the tile
  recomputed with the saved log-sum-exp and ``D = rowsum(dO ∘ O)``
  (:func:`tutorial_lib.efficient_attention.tile_backward`).
- ``13.tiled_attention`` (the build exercise) composes the tile update into the causal forward of FlashAttention
  (:func:`tutorial_lib.efficient_attention.tiled_attention`); like the banded exercise, it records the tensors the
  answer creates, so scores built a strip at a time are caught.
- ``13.predict_naive_memory`` (predict, then measure): the peak memory of the chapter-03 causal attention at 1024
  positions, measured by :func:`tutorial_lib.widgets.attention_costs.peak_tensor_memory`.

As in ``ch03``, the mistakes are written the way a learner would write them and carry no annotations.
"""

from __future__ import annotations

import math
import torch
import torch._dynamo  # noqa: F401  the tensor recorders' first use imports it: here, outside a check's time limit
import torch.nn.functional as F

from tutorial_lib import efficient_attention as reference
from tutorial_lib.checks.compound import mistake_builder
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, WrongOutput, register
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction
from tutorial_lib.checks.tracing import ATTENTION_CALLEES
from tutorial_lib.widgets.attention_costs import LargestTensor

# --- 13.online_softmax --------------------------------------------------------------------------------------------------


def _online_softmax_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    rising = torch.linspace(0, 12, 20) + randn(2, 4, 20)  # the maximum grows from block to block
    early_peak = randn(3, 24)
    early_peak[:, 1] = 200.0  # the largest score comes first, far above the rest
    return [
        Case.of(x=randn(3, 37) * 3, block_size=8, note="37 scores in blocks of 8: a partial last block"),
        Case.of(x=rising, block_size=5, note="rising scores: the maximum grows in every block"),
        Case.of(x=randn(2, 30) + 1000.0, block_size=7, note="scores near 1000: exp overflows without the maximum"),
        Case.of(x=early_peak, block_size=6, note="one score of 200 in the first block"),
        Case.of(x=randn(4, 6), block_size=10, note="a block longer than the row"),
        Case.of(x=randn(2, 3, 9, dtype=torch.float64) * 4, block_size=1, note="float64, blocks of one"),
    ]


@mistake_builder
def _online_softmax_like(*, rescale=True, running_max=True, subtract_max=True, blocks="all"):
    """A learner's one-pass softmax; each keyword reproduces one way of getting it wrong."""

    def online_softmax(x, block_size):
        n = x.shape[-1]
        m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)
        l = torch.zeros(x.shape[:-1], dtype=x.dtype)
        stop = n if blocks == "all" else n // block_size * block_size
        for start in range(0, stop, block_size):
            block = x[..., start : start + block_size]
            if not subtract_max:
                l = l + torch.exp(block).sum(dim=-1)
                continue
            block_max = block.max(dim=-1).values
            m_new = torch.maximum(m, block_max) if running_max else block_max
            old = l * torch.exp(m - m_new) if rescale else l
            l = old + torch.exp(block - m_new[..., None]).sum(dim=-1)
            m = m_new
        if not subtract_max:
            return torch.exp(x) / l[..., None]
        return torch.exp(x - m[..., None]) / l[..., None]

    return online_softmax


def _online_softmax_inverted_rescale(x, block_size):
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        l = l * torch.exp(m_new - m) + torch.exp(block - m_new[..., None]).sum(dim=-1)
        m = m_new
    return torch.exp(x - m[..., None]) / l[..., None]


def _online_softmax_overwritten_sum(x, block_size):
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start : start + block_size]
        m = torch.maximum(m, block.amax(dim=-1))
        l = torch.exp(block - m[..., None]).sum(dim=-1)
    return torch.exp(x - m[..., None]) / l[..., None]


def _softmax_per_block(x, block_size):
    return torch.cat([torch.softmax(x[..., s : s + block_size], dim=-1) for s in range(0, x.shape[-1], block_size)], dim=-1)


ONLINE_SOFTMAX = Exercise(
    id="13.online_softmax",
    reference=reference.online_softmax,
    cases=_online_softmax_cases,
    points=1,
    outputs=("the softmax",),
    checked=(
        "a partial last block, a maximum that grows in every block, scores near 1000, a peak of 200 in the first "
        "block, a block longer than the row, and float64 in blocks of one"
    ),
    mistakes=(
        Mistake("sum_not_rescaled", "did not rescale the running sum when the maximum grew",
                "l holds Σ exp(x_j - m_old): when the maximum rises to m_new, multiply it by exp(m_old - m_new) "
                "before adding the new block's terms, themselves taken relative to m_new.",
                (_online_softmax_like(rescale=False),)),
        Mistake("no_maximum_subtracted", "summed exp(x) without subtracting a maximum",
                "exp(1000) overflows float32 to inf, and inf / inf is NaN: keep the running maximum m and sum "
                "exp(x - m), which is never above 1.", (_online_softmax_like(subtract_max=False),)),
        Mistake("block_maximum_not_running", "kept each block's own maximum instead of the running maximum",
                "m must be the largest score seen so far, the larger of the old m and this block's maximum: with the "
                "last block's maximum, a score of 200 seen earlier gives exp(200 - m) = inf at the end.",
                (_online_softmax_like(running_max=False),)),
        Mistake("dropped_partial_block", "left out the last, partial block",
                "Start a block at every multiple of block_size below n, so that the last one comes too, shorter when "
                "block_size does not divide n; stopping after the last whole block skips it.",
                (_online_softmax_like(blocks="whole"),)),
    ),
    mutants=(
        Mutant("inverted_rescale", "rescales by exp(m_new - m) instead of exp(m - m_new)", _online_softmax_inverted_rescale),
        Mutant("overwritten_sum", "replaces the running sum by the last block's sum", _online_softmax_overwritten_sum),
        Mutant("softmax_per_block", "normalises every block on its own", _softmax_per_block),
    ),
)


# --- 13.tile_update -----------------------------------------------------------------------------------------------------


def reference_tile_update(q_blk, k_blk, v_blk, m, l, acc, q_start, k_start):
    """The package's tile update, under the causal mask of self-attention: query q_start + r sees key k_start + c
    when k_start + c <= q_start + r."""
    query = torch.arange(q_start, q_start + q_blk.shape[-2])[:, None]
    key = torch.arange(k_start, k_start + k_blk.shape[-2])[None, :]
    return reference.tile_update(q_blk, k_blk, v_blk, m, l, acc, key <= query)


def _tile_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    def case(batch, rows, cols, d_head, q_start, k_start, *, key_scale=1.0, dtype=torch.float32, note):
        """The state after every earlier key block (blocks of ``cols`` keys from 0), then the tile at k_start."""
        q = randn(*batch, rows, d_head, dtype=dtype) / math.sqrt(d_head)
        m = torch.full((*batch, rows, 1), float("-inf"), dtype=dtype)
        l, acc = torch.zeros(*batch, rows, 1, dtype=dtype), torch.zeros(*batch, rows, 5, dtype=dtype)
        for start in range(0, k_start, cols):
            m, l, acc = reference_tile_update(q, randn(*batch, cols, d_head, dtype=dtype),
                                              randn(*batch, cols, 5, dtype=dtype), m, l, acc, q_start, start)
        k_blk = randn(*batch, cols, d_head, dtype=dtype) * key_scale
        return Case.of(q_blk=q, k_blk=k_blk, v_blk=randn(*batch, cols, 5, dtype=dtype), m=m, l=l, acc=acc,
                       q_start=q_start, k_start=k_start, note=note)

    return [
        case((2,), 4, 4, 8, 0, 0, note="the first tile, on the diagonal"),
        case((2, 3), 4, 4, 8, 8, 4, key_scale=4.0, note="below the diagonal, after one tile, larger scores"),
        case((2,), 5, 3, 8, 6, 6, key_scale=3.0, note="5 queries, 3 keys, on the diagonal, after two tiles"),
        case((1, 2), 3, 6, 4, 9, 6, note="3 queries, 6 keys, crossing the diagonal"),
        case((2,), 4, 4, 6, 12, 8, key_scale=0.2, dtype=torch.float64, note="float64, smaller scores"),
    ]


@mistake_builder
def _tile_like(*, rescale_l=True, rescale_acc=True, boundary="<=", positions="absolute", masked=True):
    """A learner's tile update; each keyword reproduces one way of getting it wrong."""

    def tile_update(q_blk, k_blk, v_blk, m, l, acc, q_start, k_start):
        scores = q_blk @ k_blk.transpose(-2, -1)
        rows, cols = scores.shape[-2:]
        if positions == "absolute":
            query = q_start + torch.arange(rows)[:, None]
            key = k_start + torch.arange(cols)[None, :]
        else:
            query, key = torch.arange(rows)[:, None], torch.arange(cols)[None, :]
        visible = {"<=": key <= query, "<": key < query, "<=+1": key <= query + 1}[boundary]
        if masked:
            scores = scores.masked_fill(~visible, float("-inf"))
        m_new = torch.maximum(m, scores.max(dim=-1, keepdim=True).values)
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(scores - shift)
        factor = torch.exp(m - shift)
        l_new = (l * factor if rescale_l else l) + p.sum(dim=-1, keepdim=True)
        acc_new = (acc * factor if rescale_acc else acc) + p @ v_blk
        return m_new, l_new, acc_new

    return tile_update


def _tile_old_maximum(q_blk, k_blk, v_blk, m, l, acc, q_start, k_start):
    """Shifts this tile's scores by the old maximum and keeps it: no rescaling needed, but exp can overflow."""
    scores = q_blk @ k_blk.transpose(-2, -1)
    query = q_start + torch.arange(scores.shape[-2])[:, None]
    key = k_start + torch.arange(scores.shape[-1])[None, :]
    scores = scores.masked_fill(key > query, float("-inf"))
    shift = torch.where(torch.isinf(m), scores.amax(dim=-1, keepdim=True), m)
    p = torch.exp(scores - shift)
    return shift, l + p.sum(dim=-1, keepdim=True), acc + p @ v_blk


def _tile_inverted_rescale(q_blk, k_blk, v_blk, m, l, acc, q_start, k_start):
    m_new, _, _ = reference_tile_update(q_blk, k_blk, v_blk, m, l, acc, q_start, k_start)
    scores = q_blk @ k_blk.transpose(-2, -1)
    query = q_start + torch.arange(scores.shape[-2])[:, None]
    key = k_start + torch.arange(scores.shape[-1])[None, :]
    p = torch.exp(scores.masked_fill(key > query, float("-inf")) - m_new)
    factor = torch.nan_to_num(torch.exp(m_new - m), posinf=0.0)
    return m_new, l * factor + p.sum(dim=-1, keepdim=True), acc * factor + p @ v_blk


def _tile_normalised(q_blk, k_blk, v_blk, m, l, acc, q_start, k_start):
    """Returns acc / l, the tile's normalised output, in place of the un-normalised accumulator."""
    m_new, l_new, acc_new = reference_tile_update(q_blk, k_blk, v_blk, m, l, acc, q_start, k_start)
    return m_new, l_new, acc_new / l_new


TILE_UPDATE = Exercise(
    id="13.tile_update",
    forbidden=(reference.tile_update,),
    reference=reference_tile_update,
    cases=_tile_cases,
    points=2,
    outputs=("m", "l", "acc"),
    axes={"m": "block_q 1", "l": "block_q 1", "acc": "block_q d_value"},
    checked=(
        "the first tile on the diagonal, tiles below and across the diagonal after earlier tiles, a maximum that grows, "
        "block_q ≠ block_k, a batch and a head axis, and float64"
    ),
    mistakes=(
        Mistake("denominator_not_rescaled", "rescaled the accumulator but not the denominator",
                "acc and l are sums of the same exp(score - m) terms: when m grows, both are multiplied by "
                "exp(m_old - m_new), or acc / l is wrong.", (_tile_like(rescale_l=False),)),
        Mistake("accumulator_not_rescaled", "rescaled the denominator but not the accumulator",
                "acc = Σ exp(score - m) v is relative to m, as l is: multiply it by exp(m_old - m_new) too.",
                (_tile_like(rescale_acc=False),)),
        Mistake("nothing_rescaled", "added the new tile without rescaling the running sums",
                "l and acc were summed relative to the old maximum: multiply both by exp(m_old - m_new) before adding "
                "this tile's terms (taken relative to m_new).", (_tile_like(rescale_l=False, rescale_acc=False),)),
        Mistake("causal_boundary_off_by_one", "put the causal boundary of the tile one key off",
                "Query i sees keys 0 … i, itself included: keep key k_start + c when k_start + c <= q_start + r "
                "(less than or equal, not strictly less, and no + 1).",
                (_tile_like(boundary="<"), _tile_like(boundary="<=+1"))),
        Mistake("tile_local_positions", "built the causal mask from positions inside the tile",
                "A tile's row r is query q_start + r and its column c is key k_start + c: a `tril` of the tile is "
                "right only on the diagonal. Compare absolute positions.", (_tile_like(positions="tile"),)),
        Mistake("no_causal_mask", "left out the causal mask",
                "Tiles on the diagonal hold future keys: hide key k_start + c from query q_start + r when it comes "
                "later, by setting its score to -inf before the exponentials.", (_tile_like(masked=False),)),
    ),
    mutants=(
        Mutant("old_maximum_kept", "shifts by the old maximum and never updates it", _tile_old_maximum),
        Mutant("inverted_rescale", "rescales by exp(m_new - m)", _tile_inverted_rescale),
        Mutant("normalised_accumulator", "returns acc / l instead of acc", _tile_normalised),
    ),
)


# --- 13.banded_attention ------------------------------------------------------------------------------------------------


def _banded_call(banded_attention, args):
    """Run the answer while recording its tensors; on a long sequence, a tensor half the size of one seq × seq matrix
    (scores, or a mask) or more means the answer built one."""
    q, k, v, window = args
    with LargestTensor() as recorder:
        out = banded_attention(q, k, v, window)
    seq = q.shape[-2]
    if seq >= 32 and recorder.largest >= seq * seq // 2:
        raise WrongOutput("wrong_values", f"it created a tensor at least half as large as a {seq} × {seq} "
                                          f"matrix of scores or mask ({seq * seq:,} elements), where "
                                          f"the band of one head holds {seq * window:,} scores")
    return out


def _banded_cases(generator: torch.Generator) -> list[Case]:
    def qkv(*batch: int, seq: int, d_head: int, d_value: int, dtype: torch.dtype = torch.float32):
        return {name: torch.randn(*batch, seq, size, generator=generator, dtype=dtype)
                for name, size in (("q", d_head), ("k", d_head), ("v", d_value))}

    return [
        Case.of(**qkv(2, seq=10, d_head=8, d_value=8), window=3, note="the first positions have fewer keys"),
        Case.of(**qkv(2, 3, seq=12, d_head=6, d_value=5), window=4, note="a head axis, d_value ≠ d_head"),
        Case.of(**qkv(1, seq=7, d_head=4, d_value=4), window=1, note="each position sees only itself"),
        Case.of(**qkv(2, seq=9, d_head=4, d_value=3, dtype=torch.float64), window=20,
                note="float64, a window longer than the sequence"),
        Case.of(**qkv(2, seq=128, d_head=4, d_value=4), window=4, note="128 positions: no room for 128 × 128 scores"),
    ]


@mistake_builder
def _band_like(*, extra=0, mask_padding=True, scale=True):
    """A learner's banded attention with unfold; ``extra`` keys more (or fewer) than the window."""

    def banded_attention(q, k, v, window):
        width = window + extra
        k_pad = F.pad(k, (0, 0, width - 1, 0))
        v_pad = F.pad(v, (0, 0, width - 1, 0))
        k_band = k_pad.unfold(-2, width, 1)  # (..., seq, d_head, width)
        v_band = v_pad.unfold(-2, width, 1)
        scores = (q[..., None] * k_band).sum(dim=-2)  # (..., seq, width)
        if scale:
            scores = scores / math.sqrt(q.shape[-1])
        if mask_padding:
            seq = q.shape[-2]
            key = torch.arange(seq)[:, None] - width + 1 + torch.arange(width)[None, :]
            scores = scores.masked_fill(key < 0, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return (weights[..., None, :] * v_band).sum(dim=-1)

    return banded_attention


def _band_full_matrix(q, k, v, window):
    seq = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    i, j = torch.arange(seq)[:, None], torch.arange(seq)[None, :]
    scores = scores.masked_fill((j > i) | (j <= i - window), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _band_symmetric(q, k, v, window):
    """Both sides of each query: keys t - window + 1 .. t + window - 1."""
    seq, width = q.shape[-2], 2 * window - 1
    k_band = F.pad(k, (0, 0, window - 1, window - 1)).unfold(-2, width, 1)
    v_band = F.pad(v, (0, 0, window - 1, window - 1)).unfold(-2, width, 1)
    scores = (q[..., None] * k_band).sum(dim=-2) / math.sqrt(q.shape[-1])
    key = torch.arange(seq)[:, None] - window + 1 + torch.arange(width)[None, :]
    scores = scores.masked_fill((key < 0) | (key >= seq), float("-inf"))
    return (torch.softmax(scores, dim=-1)[..., None, :] * v_band).sum(dim=-1)


def _band_without_self(q, k, v, window):
    """The window shifted one back: keys t - window .. t - 1, so position 0 sees nothing (zeros)."""
    seq = q.shape[-2]
    k_band = F.pad(k, (0, 0, window, 0)).unfold(-2, window, 1)[..., :seq, :, :]
    v_band = F.pad(v, (0, 0, window, 0)).unfold(-2, window, 1)[..., :seq, :, :]
    scores = (q[..., None] * k_band).sum(dim=-2) / math.sqrt(q.shape[-1])
    key = torch.arange(seq)[:, None] - window + torch.arange(window)[None, :]
    weights = torch.softmax(scores.masked_fill(key < 0, float("-inf")), dim=-1).nan_to_num(0.0)
    return (weights[..., None, :] * v_band).sum(dim=-1)


BANDED_ATTENTION = Exercise(
    id="13.banded_attention",
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    forbidden=(reference.banded_attention, reference.sliding_window_attention),
    reference=lambda q, k, v, window: reference.banded_attention(q, k, v, window),
    cases=_banded_cases,
    points=2,
    call=_banded_call,
    outputs=("out",),
    axes={"out": "seq d_value"},
    checked=(
        "windows of 3, 4 and 1 keys, a window longer than the sequence (float64), a head axis with d_value ≠ d_head, "
        "and 128 positions computed without a 128 × 128 matrix"
    ),
    mistakes=(
        Mistake("window_one_too_wide", "let each query see window + 1 keys",
                "Position t sees t - window + 1 … t: window keys, itself included; pad window - 1 rows and unfold "
                "windows of `window`.", (_band_like(extra=1),)),
        Mistake("window_one_too_narrow", "let each query see window - 1 keys",
                "Position t sees t - window + 1 … t: window keys, itself included.", (_band_like(extra=-1),)),
        Mistake("padding_not_masked", "let the padding slots in front of position 0 take part in the softmax",
                "A padded key is a zero vector with score 0, and exp(0) = 1 is a weight like any other: set the "
                "scores of slots before position 0 to -inf.", (_band_like(mask_padding=False),)),
        Mistake("full_score_matrix", "computed every score and masked all but the band",
                "The values are right, but the seq × seq matrix is what banded attention exists to avoid: build each "
                "query's window of keys (pad, then `unfold`) and compute only seq × window scores.",
                (_band_full_matrix,)),
        Mistake("not_scaled", "forgot to divide the scores by √d_k",
                "The band's scores are the same dot products as Eq. (1): divide them by √d_k, where d_k is "
                "the size of q's last axis.",
                (_band_like(scale=False),)),
    ),
    mutants=(
        Mutant("symmetric_window", "sees window - 1 keys on each side, the future included", _band_symmetric),
        Mutant("window_without_self", "sees t - window … t - 1 instead of t - window + 1 … t", _band_without_self),
    ),
)


# --- 13.causal_linear_attention -----------------------------------------------------------------------------------------


def _linear_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    silent = randn(1, 6, 4)
    silent[:, 2] = -60.0  # φ(q) rounds to 0 in float32: 0 / 0 without eps
    return [
        Case.of(q=randn(2, 9, 6), k=randn(2, 9, 6), v=randn(2, 9, 5), eps=1e-6, note="d_value ≠ d_head"),
        Case.of(q=randn(2, 3, 17, 8), k=randn(2, 3, 17, 8), v=randn(2, 3, 17, 8), eps=1e-6, note="a head axis"),
        Case.of(q=randn(1, 12, 4, dtype=torch.float64) * 2, k=randn(1, 12, 4, dtype=torch.float64) * 2,
                v=randn(1, 12, 3, dtype=torch.float64), eps=0.5, note="float64, a large eps"),
        Case.of(q=silent, k=randn(1, 6, 4), v=randn(1, 6, 4), eps=1e-6, note="a query whose features underflow to 0"),
    ]


@mistake_builder
def _linear_like(*, causal=True, normalise=True, include_self=True, plus_one=True, use_eps=True, phi_values=False,
                 scale=False):
    """A learner's causal linear attention with cumulative sums; each keyword reproduces one way of getting it wrong."""

    def causal_linear_attention(q, k, v, eps=1e-6):
        if scale:
            q = q / math.sqrt(q.shape[-1])
        phi_q = F.elu(q) + 1 if plus_one else F.elu(q)
        phi_k = F.elu(k) + 1 if plus_one else F.elu(k)
        values = F.elu(v) + 1 if phi_values else v
        kv = phi_k[..., :, None] * values[..., None, :]  # (..., seq, d_head, d_value)
        if causal:
            s = kv.cumsum(dim=-3)
            z = phi_k.cumsum(dim=-2)
            if not include_self:
                s, z = s - kv, z - phi_k
        else:
            s = kv.sum(dim=-3, keepdim=True).expand_as(kv)
            z = phi_k.sum(dim=-2, keepdim=True).expand_as(phi_k)
        numerator = (phi_q[..., :, None] * s).sum(dim=-2)
        if not normalise:
            return numerator
        return numerator / ((phi_q * z).sum(dim=-1, keepdim=True) + (eps if use_eps else 0.0))

    return causal_linear_attention


LINEAR_ATTENTION = Exercise(
    id="13.causal_linear_attention",
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    forbidden=(reference.linear_attention, reference.LinearMultiHeadAttention),
    reference=lambda q, k, v, eps=1e-6: reference.linear_attention(q, k, v, causal=True, eps=eps),
    cases=_linear_cases,
    points=2,
    outputs=("out",),
    axes={"out": "seq d_value"},
    checked=(
        "d_value ≠ d_head, a head axis, float64 with a large eps, and a query whose features underflow to 0 (eps keeps "
        "the output finite)"
    ),
    mistakes=(
        Mistake("normaliser_forgotten", "left out the normaliser φ(q_i)·z_i",
                "Softmax divides by the sum of its exponentials; linear attention divides by the sum of its "
                "similarities, φ(q_i)·Σ_{j≤i} φ(k_j), plus eps. Without it the output grows with the position.",
                (_linear_like(normalise=False),)),
        Mistake("not_causal", "summed over every position instead of the positions up to i",
                "Causal attention sees the past only: running (cumulative) sums over the positions, as `cumsum` "
                "gives along the sequence axis, not totals.", (_linear_like(causal=False),)),
        Mistake("excluded_current_position", "left position i out of its own running sums",
                "Position i sees keys 0 … i, itself included, as with the causal mask: add φ(k_i) v_iᵀ to the state "
                "before reading it with q_i.", (_linear_like(include_self=False),)),
        Mistake("scaled_queries", "divided the queries by √d_k, as in Eq. (1)",
                "The 1/√d_k of Eq. (1) keeps softmax's exponentials from saturating; linear attention has no "
                "exponential, and its kernel is φ(q)·φ(k) on the queries and keys as they are.",
                (_linear_like(scale=True),)),
        Mistake("eps_left_out", "divided without adding eps",
                "The denominator is φ(q_i)·z_i + eps: eps is part of the formula, and it keeps a query whose "
                "features are all 0 (elu(x) + 1 underflows below x ≈ -17 in float32) from 0 / 0.",
                (_linear_like(use_eps=False),)),
    ),
    mutants=(
        Mutant("phi_on_values", "applies the feature map to the values too", _linear_like(phi_values=True)),
        Mutant("elu_without_plus_one", "uses φ = elu, which is negative below 0, without the + 1", _linear_like(plus_one=False)),
    ),
)


# --- 13.tile_backward ---------------------------------------------------------------------------------------------------


def reference_tile_backward(q_blk, k_blk, v_blk, out_blk, d_out_blk, lse_blk):
    """The package's tile backward, with D = rowsum(dO ∘ O) taken from the block's full output and τ = 1/√d_k."""
    delta = (d_out_blk * out_blk).sum(dim=-1, keepdim=True)
    return reference.tile_backward(q_blk, k_blk, v_blk, d_out_blk, lse_blk, delta, 1 / math.sqrt(q_blk.shape[-1]))


def _tile_backward_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    def case(batch, rows, n_key, k_start, cols, d_head, d_value, *, key_scale=1.0, dtype=torch.float32, note):
        """A block of queries over all n_key keys (the forward's output and log-sum-exp), and the tile at k_start."""
        q = randn(*batch, rows, d_head, dtype=dtype)
        k = randn(*batch, n_key, d_head, dtype=dtype) * key_scale
        v = randn(*batch, n_key, d_value, dtype=dtype)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
        out = torch.softmax(scores, dim=-1) @ v
        lse = torch.logsumexp(scores, dim=-1, keepdim=True)
        tile = slice(k_start, k_start + cols)
        return Case.of(q_blk=q, k_blk=k[..., tile, :], v_blk=v[..., tile, :], out_blk=out,
                       d_out_blk=randn(*batch, rows, d_value, dtype=dtype), lse_blk=lse, note=note)

    return [
        case((2,), 4, 12, 4, 4, 8, 5, note="the middle tile of three"),
        case((2, 3), 3, 10, 0, 5, 6, 4, note="a head axis, the first tile of two"),
        case((2,), 5, 9, 6, 3, 8, 8, key_scale=3.0, note="larger scores, the last tile of three"),
        case((1,), 4, 7, 2, 1, 4, 6, note="a tile of one key"),
        case((2,), 3, 8, 4, 4, 16, 3, dtype=torch.float64, note="float64, d_head 16"),
    ]


@mistake_builder
def _tile_backward_like(*, p_from="lse", delta="output", scale_scores=True, scale_grads=True):
    """A learner's tile backward; each keyword reproduces one way of getting it wrong."""

    def tile_backward(q_blk, k_blk, v_blk, out_blk, d_out_blk, lse_blk):
        tau = 1 / math.sqrt(q_blk.shape[-1])
        scores = q_blk @ k_blk.transpose(-2, -1)
        if scale_scores:
            scores = scores * tau
        if p_from == "lse":
            p = torch.exp(scores - lse_blk)
        elif p_from == "exp":
            p = torch.exp(scores)
        elif p_from == "tile max":
            p = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
        else:  # "tile softmax"
            p = torch.softmax(scores, dim=-1)
        d_v = p.transpose(-2, -1) @ d_out_blk
        d_p = d_out_blk @ v_blk.transpose(-2, -1)
        if delta == "output":
            d_s = p * (d_p - (d_out_blk * out_blk).sum(dim=-1, keepdim=True))
        elif delta == "tile":
            d_s = p * (d_p - (d_out_blk * (p @ v_blk)).sum(dim=-1, keepdim=True))
        else:  # forgotten
            d_s = p * d_p
        d_q = d_s @ k_blk
        d_k = d_s.transpose(-2, -1) @ q_blk
        if scale_grads:
            d_q, d_k = d_q * tau, d_k * tau
        return d_q, d_k, d_v

    return tile_backward


def _tile_backward_sign_flipped(q_blk, k_blk, v_blk, out_blk, d_out_blk, lse_blk):
    tau = 1 / math.sqrt(q_blk.shape[-1])
    p = torch.exp(q_blk @ k_blk.transpose(-2, -1) * tau - lse_blk)
    d_s = p * ((d_out_blk * out_blk).sum(dim=-1, keepdim=True) - d_out_blk @ v_blk.transpose(-2, -1))
    return tau * d_s @ k_blk, tau * d_s.transpose(-2, -1) @ q_blk, p.transpose(-2, -1) @ d_out_blk


def _tile_backward_lse_added(q_blk, k_blk, v_blk, out_blk, d_out_blk, lse_blk):
    tau = 1 / math.sqrt(q_blk.shape[-1])
    p = torch.exp(q_blk @ k_blk.transpose(-2, -1) * tau + lse_blk)
    d_s = p * (d_out_blk @ v_blk.transpose(-2, -1) - (d_out_blk * out_blk).sum(dim=-1, keepdim=True))
    return tau * d_s @ k_blk, tau * d_s.transpose(-2, -1) @ q_blk, p.transpose(-2, -1) @ d_out_blk


def _tile_backward_d_out_for_d_p(q_blk, k_blk, v_blk, out_blk, d_out_blk, lse_blk):
    """Uses dP itself where dS belongs: the softmax's backward skipped."""
    tau = 1 / math.sqrt(q_blk.shape[-1])
    p = torch.exp(q_blk @ k_blk.transpose(-2, -1) * tau - lse_blk)
    d_p = d_out_blk @ v_blk.transpose(-2, -1)
    return tau * d_p @ k_blk, tau * d_p.transpose(-2, -1) @ q_blk, p.transpose(-2, -1) @ d_out_blk


TILE_BACKWARD = Exercise(
    id="13.tile_backward",
    forbidden=(reference.tile_backward, reference.flash_attention_backward, reference.FlashAttention),
    reference=reference_tile_backward,
    cases=_tile_backward_cases,
    points=2,
    outputs=("dq", "dk", "dv"),
    axes={"dq": "block_q d_head", "dk": "block_k d_head", "dv": "block_k d_value"},
    checked=(
        "a tile in the middle, first and last of a row of keys, a head axis, larger scores, a tile of one key, "
        "d_value ≠ d_head, and float64"
    ),
    mistakes=(
        Mistake("delta_forgotten", "left D out of the softmax's backward",
                "The softmax couples every key of a row: dS = P ∘ (dP - D), where D = rowsum(dO ∘ O) is one number "
                "per query, the sum of P·dP over all its keys. Without it dq and dk are wrong, while dv is right.",
                (_tile_backward_like(delta="forgotten"),)),
        Mistake("delta_from_the_tile", "computed D from this tile's partial output P V instead of the full output O",
                "D sums P·dP over every key of the row, not only this tile's: it equals rowsum(dO ∘ O) with the "
                "output O of the whole row, which is why the backward is given out_blk.",
                (_tile_backward_like(delta="tile"),)),
        Mistake("weights_not_normalised", "recomputed the weights without dividing by the row's softmax sum",
                "exp(score) or exp(score - the tile's maximum) is not yet a weight: the weight is exp(score - L), "
                "with L the log-sum-exp of the whole row that the forward saved (lse_blk).",
                (_tile_backward_like(p_from="exp"), _tile_backward_like(p_from="tile max"))),
        Mistake("softmax_over_the_tile", "normalised the weights over this tile's keys only",
                "A softmax over the tile makes its weights sum to 1 here, but the row's weights sum to 1 over all its "
                "keys: exp(score - lse_blk) gives the tile's share of the whole row's softmax.",
                (_tile_backward_like(p_from="tile softmax"),)),
        Mistake("scale_left_out_of_gradients", "scaled the scores by 1/√d_k but not the gradients of q and k",
                "The scores are τ·q·k with τ = 1/√d_k, so the chain rule brings τ into dq = τ dS K and dk = τ dSᵀ Q "
                "as well.", (_tile_backward_like(scale_grads=False),)),
        Mistake("scale_forgotten", "left 1/√d_k out altogether",
                "The forward's scores, and so its log-sum-exp, are τ·q·k with τ = 1/√d_k: recompute the same scores, "
                "and carry τ into dq and dk.", (_tile_backward_like(scale_scores=False, scale_grads=False),)),
    ),
    mutants=(
        Mutant("sign_flipped", "computes dS = P ∘ (D - dP)", _tile_backward_sign_flipped),
        Mutant("lse_added", "recomputes the weights as exp(score + L)", _tile_backward_lse_added),
        Mutant("softmax_backward_skipped", "uses dP where dS belongs", _tile_backward_d_out_for_d_p),
    ),
)


# --- 13.tiled_attention (build) -----------------------------------------------------------------------------------------
# The tile update of 13.tile_update, composed into FlashAttention's forward: the queries scaled once, a fresh running
# state per block of queries, the key tiles up to the diagonal folded in by absolute position, acc / l at the end.


def reference_tiled_attention(q, k, v, block_size):
    """The package's :func:`tutorial_lib.efficient_attention.tiled_attention`, causal, square tiles."""
    return reference.tiled_attention(q, k, v, causal=True, block_q=block_size, block_k=block_size)


def _tiled_call(tiled_attention, args):
    """Run the answer while recording its tensors: on a long sequence, a tensor more than twice the size of a tile or
    of the inputs means the answer built (a strip of) the scores it was meant to tile."""
    q, k, v, block_size = args
    with LargestTensor() as recorder:
        out = tiled_attention(q, k, v, block_size)
    seq = q.shape[-2]
    room = 2 * max(block_size * block_size, seq * q.shape[-1], seq * v.shape[-1])  # a tile, or the inputs' size
    if seq >= 64 and recorder.largest > room:
        raise WrongOutput("wrong_values", f"it created a tensor of more than {room:,} elements, where one tile of "
                                          f"scores holds {block_size * block_size:,} and the {seq} × {seq} matrix "
                                          f"that tiling avoids {seq * seq:,}")
    return out


def _tiled_cases(generator: torch.Generator) -> list[Case]:
    def qkv(*batch: int, seq: int, d_head: int, d_value: int, scale: float = 1.0, dtype: torch.dtype = torch.float32):
        q, k, v = (torch.randn(*batch, seq, size, generator=generator, dtype=dtype)
                   for size in (d_head, d_head, d_value))
        return {"q": q * scale, "k": k, "v": v}

    return [
        Case.of(**qkv(2, seq=8, d_head=4, d_value=4, scale=2.0), block_size=4, note="two blocks of 4"),
        Case.of(**qkv(2, 3, seq=10, d_head=6, d_value=5, scale=2.0), block_size=4,
                note="a head axis, a last block of 2, d_value ≠ d_head"),
        Case.of(**qkv(1, seq=7, d_head=4, d_value=3, scale=3.0, dtype=torch.float64), block_size=3,
                note="float64, blocks of 3"),
        Case.of(**qkv(2, seq=5, d_head=4, d_value=4), block_size=8, note="one block longer than the sequence"),
        Case.of(**qkv(1, seq=128, d_head=4, d_value=4, scale=2.0), block_size=16,
                note="128 positions in blocks of 16: no room for 128 × 128 scores"),
    ]


@mistake_builder
def _tiled_like(*, scale=True, reset=True, positions="absolute", normalise=True, last_block=True):
    """A learner's tiled attention built on the tile update; each keyword reproduces one way of getting it wrong."""

    def tiled_attention(q, k, v, block_size):
        seq = q.shape[-2]
        if scale:
            q = q / math.sqrt(q.shape[-1])
        stop = seq if last_block else seq - seq % block_size

        def fresh(q_blk):
            return (torch.full((*q_blk.shape[:-1], 1), float("-inf"), dtype=q.dtype),
                    torch.zeros((*q_blk.shape[:-1], 1), dtype=q.dtype),
                    torch.zeros((*q_blk.shape[:-1], v.shape[-1]), dtype=q.dtype))

        outputs = []
        state = None
        for q_start in range(0, stop, block_size):
            q_blk = q[..., q_start : q_start + block_size, :]
            if reset or state is None or state[0].shape != (*q_blk.shape[:-1], 1):
                state = fresh(q_blk)
            m, l, acc = state
            for k_start in range(0, min(seq, q_start + block_size), block_size):
                where = (q_start, k_start) if positions == "absolute" else (q_start // block_size, k_start // block_size)
                m, l, acc = reference_tile_update(q_blk, k[..., k_start : k_start + block_size, :],
                                                  v[..., k_start : k_start + block_size, :], m, l, acc, *where)
            state = (m, l, acc)
            outputs.append(acc / l if normalise else acc)
        return torch.cat(outputs, dim=-2)

    return tiled_attention


def _tiled_full_matrix(q, k, v, block_size):
    seq = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _tiled_full_matrix_per_block(q, k, v, block_size):
    """Each block of queries against every key at once: a block_size × seq strip of scores."""
    seq = q.shape[-2]
    outputs = []
    for q_start in range(0, seq, block_size):
        q_blk = q[..., q_start : q_start + block_size, :] / math.sqrt(q.shape[-1])
        scores = q_blk @ k.transpose(-2, -1)
        query = q_start + torch.arange(q_blk.shape[-2])[:, None]
        scores = scores.masked_fill(torch.arange(seq)[None, :] > query, float("-inf"))
        outputs.append(torch.softmax(scores, dim=-1) @ v)
    return torch.cat(outputs, dim=-2)


def _tiled_scaled_twice(q, k, v, block_size):
    return reference_tiled_attention(q / math.sqrt(q.shape[-1]), k, v, block_size)


def _tiled_anticausal(q, k, v, block_size):
    return reference_tiled_attention(q.flip(-2), k.flip(-2), v.flip(-2), block_size).flip(-2)


TILED_ATTENTION = Exercise(
    id="13.tiled_attention",
    forbidden=(*ATTENTION_CALLEES, reference.tiled_attention, reference.flash_attention, reference.flash_attention_forward, reference.FlashAttention),
    reference=reference_tiled_attention,
    cases=_tiled_cases,
    points=3,
    call=_tiled_call,
    outputs=("the output",),
    axes={"the output": "seq d_value"},
    checked=(
        "causal self-attention in blocks of 3, 4, 8 and 16, a last block shorter than the others, a block longer than "
        "the sequence, float64, and 128 positions with no tensor as large as the score matrix"
    ),
    mistakes=(
        Mistake("not_normalised", "returned the accumulator without dividing it by the running sum",
                "acc holds Σ e^(s - m) v, the numerator of the softmax's weighted sum: divide it by the running "
                "sum l.",
                (_tiled_like(normalise=False),)),
        Mistake("state_carried_over", "carried the running state (m, l, acc) from one block of queries to the next",
                "Each query's state starts empty: create m = -inf, l = 0 and acc = 0 inside the loop over query blocks, "
                "before its key tiles.", (_tiled_like(reset=False),)),
        Mistake("block_numbers_for_positions", "passed the block numbers to the tile update instead of the positions",
                "The tile update places its causal mask by absolute position: pass q_start and k_start, the first "
                "position of each block, not the block's index.", (_tiled_like(positions="index"),)),
        Mistake("not_scaled", "forgot to divide the queries by √d_k",
                "The tile update expects queries already divided by √d_head (Eq. (1)): scale q once, before the loops.",
                (_tiled_like(scale=False),)),
        Mistake("full_score_matrix", "computed the scores of many keys at once instead of one tile at a time",
                "The point of tiling is that no more than one block_size × block_size tile of scores exists at once: "
                "loop over the key tiles too, and fold each in with the tile update.",
                (_tiled_full_matrix, _tiled_full_matrix_per_block)),
    ),
    mutants=(
        Mutant("last_block_dropped", "stops before a last, shorter block of queries", _tiled_like(last_block=False)),
        Mutant("scaled_twice", "divides the queries by √d_k twice", _tiled_scaled_twice),
        Mutant("anticausal", "lets each query read the later keys instead of the earlier ones", _tiled_anticausal),
    ),
)


# --- 13.predict_naive_memory (predict, then measure) ----------------------------------------------------------------


def naive_attention_peak_mib(seq: int = 1024, d_head: int = 64) -> float:
    """The peak memory, in MiB, of the tensors that the chapter-03 causal attention creates on one head of ``seq``
    positions (float32 queries, keys and values of ``d_head``; the inputs not counted)."""
    from tutorial_lib.attention import causal_attention
    from tutorial_lib.widgets.attention_costs import peak_tensor_memory, random_qkv

    q, k, v = random_qkv(seq, n_heads=1, d_head=d_head)
    _, peak = peak_tensor_memory(causal_attention, q, k, v)
    return peak / 2**20


PREDICT_NAIVE_MEMORY = predict_number(
    "13.predict_naive_memory",
    measure=naive_attention_peak_mib,
    question="the naive attention's peak memory in MiB",
    within=1.5,
    points=1,
    misconceptions=[
        Misconception("one_score_matrix", 4.0,
                      "counted one 1024 × 1024 matrix of scores (4 MiB)",
                      "The scores are not the only n × n tensor: the mask, the masked scores and the softmax's weights "
                      "are each another one, and several are alive at once."),
        Misconception("inputs_and_output", 0.25,
                      "counted only tensors of the size of q, k, v and the output (1024 × 64 floats, 0.25 MiB)",
                      "The naive path materialises the n × n scores; it is the tiled path that stays near the size "
                      "of its inputs."),
        Misconception("elements_not_bytes", 1.0,
                      "counted the 1024² elements of one matrix as bytes (1 MiB)",
                      "A float32 takes 4 bytes: one 1024 × 1024 matrix is 4 MiB, before the others."),
        Misconception("pairs_times_d_head", 256.0,
                      "expected a d_head-long vector per query-key pair (1024² · 64 floats, 256 MiB)",
                      "q kᵀ sums over d_head: each pair leaves one number, so the largest tensors are 1024 × 1024."),
    ],
    mutants=[
        wrong_prediction("fifty", 50.0, "almost four times too large, no misconception's value"),
        wrong_prediction("two_gib", 2048.0, "a hundred and fifty times too large, no misconception's value"),
    ],
)


register(ONLINE_SOFTMAX, TILE_UPDATE, TILED_ATTENTION, PREDICT_NAIVE_MEMORY, BANDED_ATTENTION, LINEAR_ATTENTION,
         TILE_BACKWARD)

