"""Chapter 12's exercises: RoPE's tables, RoPE applied with a KV-cache offset, grouped-query attention's repeated
key/value heads, and a LLaMA block's forward pass.

- ``12.rope_tables`` is the package's :func:`~tutorial_lib.rope.rope_tables` (the halves layout of Hugging Face's
  LLaMA: dimensions ``i`` and ``i + d_head/2`` share the angle ``m·θ_i``), on contexts short enough that float32 angles
  are exact to the tolerance.
- ``12.apply_rope`` rotates queries or keys of shape ``(batch, n_heads, seq, d_head)`` at positions
  ``offset .. offset + seq - 1``; the cases include one new token after seven cached ones (generation) and a block of
  tokens after an offset, so that a learner who ignores the offset, or uses position ``offset`` for every token, is
  caught.
- ``12.repeat_kv`` is grouped-query attention's repetition of the key/value heads,
  :func:`~tutorial_lib.models.llama.repeat_kv`: ``(batch, n_kv_heads, seq, d_head)`` to ``n_kv_heads · n_rep``
  heads, head ``h`` a copy of head ``h // n_rep``. The cases have two or more key/value heads repeated, so that
  ``x.repeat(1, n_rep, 1, 1)`` (the heads tiled, ``h % n_kv_heads``) is told apart from ``repeat_interleave``, and
  ``n_kv_heads != n_rep`` once, so that the two counts cannot be swapped unnoticed.
- ``12.llama_block`` is one pre-norm block with RMSNorm, causal grouped-query attention with RoPE on q and k (written
  out: torch's fused attention, whose ``enable_gqa`` would repeat the heads, is refused), and SwiGLU, no biases,
  weights given as matrices used as ``x @ w``. Its reference is written with the package's functions; the tests check
  it against :class:`~tutorial_lib.models.llama.LlamaBlock` with the same weights. The inputs have a non-zero mean per
  position, so that an RMSNorm that subtracts the mean is told apart, and one case has ε = 0.5; the cases have 2 of 4,
  all and 1 of 2 key/value heads, so that the heads tiled instead of repeated in place are told apart.
- ``12.predict_rope_wavelength`` (predict, then measure): how many positions the slowest pair of a 64-dimensional
  head needs for one turn, 2π / θ_31, from :func:`~tutorial_lib.rope.rope_frequencies`.
- ``12.predict_rmsnorm_spread`` (predict, then measure): the spread over the features of RMSNorm's output when every
  feature of a position carries the same offset, measured on seeded samples with the package's
  :class:`~tutorial_lib.normalization.RMSNorm` (LayerNorm's would be 1).

``12.llama_block`` is the chapter's build exercise: it composes RMSNorm, RoPE (the learner's), grouped-query attention
(the learner's ``repeat_kv``) and SwiGLU.

As in ``ch03``, the mistakes are written the way a learner would write them and carry no annotations.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tutorial_lib.attention import causal_mask
from tutorial_lib.checks.compound import mistake_builder
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, register, uses_earlier_answer
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction
from tutorial_lib.checks.tracing import ATTENTION_CALLEES
from tutorial_lib.models.llama import LlamaBlock, repeat_kv
from tutorial_lib.multi_head import merge_heads, split_heads
from tutorial_lib.normalization import RMSNorm
from tutorial_lib.rope import RotaryEmbedding, RotaryMultiHeadAttention, apply_rope, rope_frequencies, rope_tables

# --- 12.rope_tables -----------------------------------------------------------------------------------------------------


def reference_rope_tables(n_ctx, d_head, base=10000.0):
    """cos and sin of ``m·θ_i``, θ_i = base^(-2i/d_head), row ``m`` laid out ``[θ_0 .. θ_(d/2-1), θ_0 .. θ_(d/2-1)]``."""
    return rope_tables(n_ctx, d_head, base)


def _tables_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(n_ctx=8, d_head=8, base=10000.0, note="8 positions, d_head 8"),
        Case.of(n_ctx=16, d_head=4, base=100.0, note="base 100"),
        Case.of(n_ctx=5, d_head=16, base=10000.0),
        Case.of(n_ctx=32, d_head=64, base=500000.0, note="LLaMA 3's base 500,000"),
    ]


@mistake_builder
def _tables_like(*, two_i=True, sign=-1, layout="halves", start=0, swap=False, duplicate=True, dtype=torch.float32):
    """A learner's rope_tables; each keyword reproduces one way of getting it wrong (``dtype``: where the angles are
    computed, which matters for the huge angles of growing frequencies)."""

    def rope_tables(n_ctx, d_head, base=10000.0):
        i = torch.arange(d_head // 2, dtype=dtype)
        exponent = (2 * i if two_i else i) / d_head
        theta = base ** (sign * exponent)
        angles = torch.arange(start, start + n_ctx, dtype=dtype)[:, None] * theta[None, :]
        if duplicate:
            angles = angles.repeat_interleave(2, dim=-1) if layout == "interleaved" else torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos().float(), angles.sin().float()
        return (sin, cos) if swap else (cos, sin)

    return rope_tables


def _tables_d_minus_2(n_ctx, d_head, base=10000.0):
    theta = base ** (-torch.arange(0, d_head, 2) / (d_head - 2))
    angles = torch.arange(n_ctx)[:, None] * theta[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def _tables_one_row_short(n_ctx, d_head, base=10000.0):
    cos, sin = reference_rope_tables(n_ctx, d_head, base)
    return cos[:-1], sin[:-1]


ROPE_TABLES = Exercise(
    id="12.rope_tables",
    forbidden=(rope_tables, RotaryEmbedding),
    reference=reference_rope_tables,
    cases=_tables_cases,
    points=1,
    outputs=("cos", "sin"),
    axes={"cos": "n_ctx d_head", "sin": "n_ctx d_head"},
    checked="8 and 16 positions, d_head 4 to 64, bases 100, 10,000 and 500,000, in the halves layout",
    mistakes=(
        Mistake("frequencies_i_over_d", "computed the frequencies as base^(-i/d_head) instead of base^(-2i/d_head)",
                "The exponent runs over the even dimensions: θ_i = base^(-2i/d_head), so the slowest pair turns by "
                "about 1/base per position (with -i/d_head it never gets slower than 1/√base).",
                (_tables_like(two_i=False),)),
        Mistake("interleaved_layout", "laid the angles out interleaved, θ_0, θ_0, θ_1, θ_1 and so on, instead of in halves",
                "The paper and Meta's code pair dimensions (2i, 2i + 1); this book and Hugging Face pair (i, i + d/2), "
                "whose tables hold the d_head/2 angles twice, the whole row and then the whole row again along the "
                "last axis, not each angle twice in place as `repeat_interleave` does. Mixing the two layouts makes "
                "the rotation something else.",
                (_tables_like(layout="interleaved"),)),
        Mistake("angles_not_duplicated", "returned one angle per pair, (n_ctx, d_head/2), without repeating them",
                "Both dimensions of a pair are multiplied by the same cos and sin: the tables have d_head columns, the "
                "d_head/2 angles written twice.", (_tables_like(duplicate=False),)),
        Mistake("positions_from_one", "numbered the positions from 1 instead of 0",
                "The first token is at position 0 and is not rotated at all: row 0 of cos is all ones, of sin all "
                "zeros. The positions run from 0 to n_ctx − 1.", (_tables_like(start=1),)),
        Mistake("positive_exponent", "computed base^(+2i/d_head), frequencies that grow instead of shrink",
                "θ_i = base^(-2i/d_head): pair 0 turns by 1 radian per position and every later pair more slowly, "
                "down to about 1/base.", (_tables_like(sign=1), _tables_like(sign=1, dtype=torch.float64))),
        Mistake("cos_sin_swapped", "returned (sin, cos) instead of (cos, sin)",
                "Return the cosine table first and the sine table second, in that order.", (_tables_like(swap=True),)),
    ),
    mutants=(
        Mutant("d_minus_2", "divides by d_head - 2 so that the last pair is exactly 1/base", _tables_d_minus_2),
        Mutant("one_row_short", "leaves out the last position", _tables_one_row_short),
    ),
)


# --- 12.apply_rope ------------------------------------------------------------------------------------------------------


def reference_apply_rope(x, cos, sin, offset=0):
    """x rotated at positions offset .. offset + seq - 1: ``x·cos + rotate_half(x)·sin`` with the tables' rows."""
    return apply_rope(x, cos, sin, offset=offset)


def _apply_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    def tables(n_ctx: int, d_head: int) -> dict[str, torch.Tensor]:
        cos, sin = rope_tables(n_ctx, d_head)
        return {"cos": cos, "sin": sin}

    return [
        Case.of(x=randn(2, 3, 5, 8), **tables(16, 8), offset=0, note="a prompt of 5 tokens"),
        Case.of(x=randn(1, 2, 1, 8), **tables(16, 8), offset=7, note="one new token after 7 cached ones"),
        Case.of(x=randn(2, 1, 4, 16), **tables(12, 16), offset=3, note="4 new tokens after 3 cached ones"),
        Case.of(x=randn(1, 4, 6, 4, dtype=torch.float64), **tables(6, 4), offset=0, note="float64, the whole context"),
        Case.of(x=randn(3, 2, 2, 8), **tables(10, 8), offset=8, note="the last two positions of the context"),
    ]


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


@mistake_builder
def _apply_like(*, rows="offset", rotate="half", sign=1.0):
    """A learner's apply_rope; each keyword reproduces one way of getting it wrong."""

    def rotated(x):
        if rotate == "interleaved":  # pairs (2i, 2i + 1): [-x1, x0, -x3, x2, ...]
            return torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
        if rotate == "swap":  # [x2, x1]: the halves exchanged, without the minus sign
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat([x2, x1], dim=-1)
        return _rotate_half(x)

    def apply_rope(x, cos, sin, offset=0):
        seq = x.shape[-2]
        if rows == "start":
            cos, sin = cos[:seq], sin[:seq]
        elif rows == "single":
            cos, sin = cos[offset], sin[offset]
        else:
            cos, sin = cos[offset : offset + seq], sin[offset : offset + seq]
        return x * cos + sign * rotated(x) * sin

    return apply_rope


def _apply_last_rows(x, cos, sin, offset=0):
    seq = x.shape[-2]
    return x * cos[-seq:] + _rotate_half(x) * sin[-seq:]


def _apply_cos_twice(x, cos, sin, offset=0):
    seq = x.shape[-2]
    c = cos[offset : offset + seq]
    return x * c + _rotate_half(x) * c


APPLY_ROPE = Exercise(
    id="12.apply_rope",
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    forbidden=(apply_rope, RotaryEmbedding, RotaryMultiHeadAttention),
    reference=reference_apply_rope,
    cases=_apply_cases,
    points=2,
    outputs=("the rotated x",),
    axes={"the rotated x": "seq d_head"},
    checked=(
        "a prompt, one new token after 7 cached ones, 4 tokens after 3, float64, and the last positions of the context"
    ),
    mistakes=(
        Mistake("offset_ignored", "ignored the offset, rotating the new tokens as if they started at position 0",
                "With a KV cache the new tokens follow `offset` cached ones: take rows offset to offset + seq - 1 of "
                "the tables. Otherwise every generated token is rotated as position 0 and the model loses its place.",
                (_apply_like(rows="start"),)),
        Mistake("one_position_for_all", "rotated every token by the angles of position `offset`",
                "Row `offset` alone is right only for one token at a time; a block of seq tokens needs the seq rows "
                "that start at `offset`, one position each.", (_apply_like(rows="single"),)),
        Mistake("interleaved_pairs", "rotated interleaved pairs (2i, 2i + 1) with tables laid out in halves",
                "The tables pair dimension i with i + d_head/2 (the halves layout): rotate_half must exchange the two "
                "halves, [-x2, x1], not neighbouring dimensions. Mixing the layouts turns each pair by two different "
                "angles: no longer a rotation, and the score stops depending on the offset alone.",
                (_apply_like(rotate="interleaved"),)),
        Mistake("rotated_backwards", "rotated by -θ instead of θ (the minus sign on the wrong half)",
                "rotate_half(x) is [-x2, x1]: then x·cos + rotate_half(x)·sin turns (x1, x2) counter-clockwise, as "
                "the reference tables and Hugging Face's weights expect.",
                (_apply_like(sign=-1.0),)),
        Mistake("swapped_without_sign", "exchanged the two halves without negating one, [x2, x1]",
                "A rotation needs the minus sign: rotate_half(x) = [-x2, x1]. Without it the map is a reflection "
                "mixed in, and the vector's length changes.", (_apply_like(rotate="swap"),)),
    ),
    mutants=(
        Mutant("last_rows", "takes the tables' last seq rows whatever the offset", _apply_last_rows),
        Mutant("cos_twice", "multiplies the rotated half by cos instead of sin", _apply_cos_twice),
    ),
)


# --- 12.llama_block -----------------------------------------------------------------------------------------------------


def _rms_norm(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def _attention(q, k, v, *, causal=True, scale=None, softmax_dim=-1):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if causal:
        scores = scores.masked_fill(~causal_mask(q.shape[-2], device=q.device), float("-inf"))
    return torch.softmax(scores, dim=softmax_dim).nan_to_num(0.0) @ v  # over the queries, a causal column can be empty


def reference_llama_block(x, weights, n_heads, n_kv_heads, cos, sin, eps=1e-6):
    """x + Attention(RMSNorm(x)), then + SwiGLU(RMSNorm(·)); RoPE on q and k at positions 0 .. seq - 1, causal;
    ``n_kv_heads`` key/value heads, each read by ``n_heads / n_kv_heads`` consecutive query heads."""
    h = _rms_norm(x, weights["attn_norm"], eps)
    q = split_heads(h @ weights["wq"], n_heads)
    k, v = (split_heads(h @ weights[name], n_kv_heads) for name in ("wk", "wv"))
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    k, v = repeat_kv(k, n_heads // n_kv_heads), repeat_kv(v, n_heads // n_kv_heads)
    x = x + merge_heads(_attention(q, k, v)) @ weights["wo"]
    h = _rms_norm(x, weights["ffn_norm"], eps)
    return x + (F.silu(h @ weights["w_gate"]) * (h @ weights["w_up"])) @ weights["w_down"]


def _block_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    def weights(d_model: int, d_ff: int, d_kv: int, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
        widths = {"wq": d_model, "wk": d_kv, "wv": d_kv, "wo": d_model}  # d_kv = n_kv_heads · d_head
        projections = {name: randn(d_model, width, dtype=dtype) / math.sqrt(d_model) for name, width in widths.items()}
        return {
            "attn_norm": 1 + 0.3 * randn(d_model, dtype=dtype), **projections,
            "ffn_norm": 1 + 0.3 * randn(d_model, dtype=dtype),
            "w_gate": randn(d_model, d_ff, dtype=dtype) / math.sqrt(d_model),
            "w_up": randn(d_model, d_ff, dtype=dtype) / math.sqrt(d_model),
            "w_down": randn(d_ff, d_model, dtype=dtype) / math.sqrt(d_ff),
        }

    def tables(n_ctx: int, d_head: int, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
        cos, sin = rope_tables(n_ctx, d_head)
        return {"cos": cos.to(dtype), "sin": sin.to(dtype)}

    return [
        Case.of(x=randn(2, 5, 16) + 0.5, weights=weights(16, 48, 8), n_heads=4, n_kv_heads=2, **tables(8, 4),
                eps=1e-6, note="4 query heads of d_head 4 sharing 2 key/value heads"),
        Case.of(x=randn(1, 7, 32) - 0.5, weights=weights(32, 96, 32), n_heads=2, n_kv_heads=2, **tables(7, 16),
                eps=0.5, note="2 heads of d_head 16 (multi-head: n_kv_heads = n_heads), ε = 0.5"),
        Case.of(x=randn(2, 4, 8, dtype=torch.float64) + 1.0, weights=weights(8, 24, 4, torch.float64), n_heads=2,
                n_kv_heads=1, **tables(16, 4, torch.float64), eps=1e-6, note="float64, multi-query: 1 key/value head"),
    ]


@mistake_builder
def _block_like(*, norm="rms", rotate="qk", causal=True, scale="d_head", placement="pre", eps_inside=True, softmax_dim=-1,
                kv_order="interleave"):
    """A learner's LLaMA block; each keyword reproduces one way of getting it wrong. ``kv_order="tile"``: the key/value
    heads written as a whole stack n_rep times (``k.repeat(1, n_rep, 1, 1)``), so query head h reads head h mod
    n_kv_heads."""

    def rms(x, weight, eps):
        if norm == "layer":  # subtracts the mean: LayerNorm without its bias
            x = x - x.mean(dim=-1, keepdim=True)
        ms = x.pow(2).mean(dim=-1, keepdim=True)
        return (x / torch.sqrt(ms + eps) if eps_inside else x / (torch.sqrt(ms) + eps)) * weight

    def llama_block(x, weights, n_heads, n_kv_heads, cos, sin, eps=1e-6):
        def residual(x, name, sublayer):
            if placement == "post":
                return rms(x + sublayer(x), weights[name], eps)
            return x + sublayer(rms(x, weights[name], eps))

        def attend(h):
            q = split_heads(h @ weights["wq"], n_heads)
            k, v = (split_heads(h @ weights[name], n_kv_heads) for name in ("wk", "wv"))
            if rotate in ("qk", "qkv"):
                q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            if rotate == "qkv":
                v = apply_rope(v, cos, sin)
            repeat = _repeat_like(order=kv_order)  # exercise 4's learner, right or tiled
            k, v = repeat(k, n_heads // n_kv_heads), repeat(v, n_heads // n_kv_heads)
            d = q.shape[-1] if scale == "d_head" else x.shape[-1]
            z = _attention(q, k, v, causal=causal, scale=d**-0.5, softmax_dim=softmax_dim)
            if rotate == "output":  # rotated after the scores were computed: the attention's output
                z = apply_rope(z, cos, sin)
            return merge_heads(z) @ weights["wo"]

        def ffn(h):
            return (F.silu(h @ weights["w_gate"]) * (h @ weights["w_up"])) @ weights["w_down"]

        return residual(residual(x, "attn_norm", attend), "ffn_norm", ffn)

    return llama_block


def _block_gate_up_swapped(x, weights, n_heads, n_kv_heads, cos, sin, eps=1e-6):
    swapped = {**weights, "w_gate": weights["w_up"], "w_up": weights["w_gate"]}
    return reference_llama_block(x, swapped, n_heads, n_kv_heads, cos, sin, eps)


def _llama_block_preconditions(obj):
    """Graded once the learner's RoPE (exercise 3) and repeat_kv (exercise 4) pass their own checks, where called."""
    for name, exercise_id, number in (("apply_rope", "12.apply_rope", 3), ("repeat_kv", "12.repeat_kv", 4)):
        if (failed := uses_earlier_answer(name, exercise_id, number)(obj)) is not None:
            return failed
    return None


LLAMA_BLOCK = Exercise(
    id="12.llama_block",
    precondition=_llama_block_preconditions,  # your RoPE and repeat_kv of exercises 3 and 4, graded there
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    # the package's block, and torch's fused attention, whose enable_gqa would do the repetition asked for here
    forbidden=(LlamaBlock, *ATTENTION_CALLEES),
    reference=reference_llama_block,
    cases=_block_cases,
    points=2,
    outputs=("the block's output",),
    axes={"the block's output": "seq d_model"},
    checked=("4 query heads sharing 2 key/value heads, 2 heads of d_head 16 with ε = 0.5, and multi-query attention "
             "in float64, inputs with a non-zero mean"),
    mistakes=(
        Mistake("values_rotated", "rotated the values too, not only the queries and keys",
                "RoPE goes on q and k, whose dot product then depends on the offset alone. Rotating v makes each "
                "position read a rotated copy of what a key holds, which depends on the key's absolute position.",
                (_block_like(rotate="qkv"),)),
        Mistake("rope_after_scores", "applied RoPE after the attention scores were computed",
                "Rotate q and k before q kᵀ: the rotation is what puts the positions into the scores. Rotated "
                "afterwards (or the attention's output rotated instead), the scores see no position at all.",
                (_block_like(rotate="output"), _block_like(rotate="none"))),
        Mistake("rms_norm_subtracts_mean", "subtracted the mean in RMSNorm",
                "RMSNorm divides by the root of the mean of x², with no re-centring: x / sqrt(mean(x²) + eps) · w. "
                "Subtracting the mean makes it LayerNorm without its bias.", (_block_like(norm="layer"),)),
        Mistake("no_causal_mask", "left out the causal mask",
                "Each position may attend to itself and the earlier ones only: fill the scores above the diagonal "
                "with -inf before the softmax.", (_block_like(causal=False),)),
        Mistake("norm_after_residual", "normalized after adding the sublayer (post-norm) instead of before it",
                "LLaMA's block is pre-norm, x + Sublayer(RMSNorm(x)); the stream itself is never normalized inside "
                "the block.", (_block_like(placement="post"),)),
        Mistake("scaled_by_d_model", "divided the scores by √d_model instead of √d_head",
                "Each head's dot products are over d_head dimensions, so the scaling of Eq. (1) is 1/√d_head.",
                (_block_like(scale="d_model"),)),
        Mistake("kv_heads_tiled", "repeated the whole stack of key/value heads instead of each head in place",
                "The first n_rep query heads form one group and share key/value head 0: query head h reads key/value "
                "head h // n_rep. Written as a whole stack n_rep times, query head 1 reads key/value head 1 instead: "
                "repeat each head where it stands, as your repeat_kv of exercise 4 does.",
                (_block_like(kv_order="tile"),)),
    ),
    mutants=(
        Mutant("gate_up_swapped", "puts SiLU on the up branch instead of the gate", _block_gate_up_swapped),
        Mutant("eps_outside_root", "adds ε to the root instead of inside it", _block_like(eps_inside=False)),
        Mutant("softmax_over_queries", "normalizes the attention over the queries", _block_like(softmax_dim=-2)),
    ),
)


# --- 12.repeat_kv -------------------------------------------------------------------------------------------------------


def reference_repeat_kv(x, n_rep):
    """``(batch, n_kv_heads, seq, d_head)`` → ``(batch, n_kv_heads · n_rep, seq, d_head)``, head h = head h // n_rep."""
    return repeat_kv(x, n_rep)


def _repeat_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    return [
        Case.of(x=randn(2, 2, 5, 4), n_rep=2, note="2 key/value heads for 4 query heads"),
        Case.of(x=randn(1, 2, 3, 8), n_rep=4, note="2 key/value heads for 8 query heads"),
        Case.of(x=randn(1, 1, 4, 4), n_rep=4, note="multi-query: 1 key/value head for 4"),
        Case.of(x=randn(2, 4, 2, 6), n_rep=1, note="multi-head: n_rep = 1"),
        Case.of(x=randn(1, 3, 4, 2, dtype=torch.float64), n_rep=2, note="float64, 3 key/value heads"),
    ]


@mistake_builder
def _repeat_like(*, order="interleave", dim=1, merge=True):
    """A learner's repeat_kv (a new axis of n_rep copies, then merged); each keyword reproduces one way of getting it
    wrong. ``order="tile"``: the copies go before the axis (``x.repeat``, ``torch.cat([x] * n_rep)``), so the whole
    stack of heads is written n_rep times; ``dim``: the axis repeated, 2 (the positions) or 3 (d_head) instead of 1;
    ``merge=False``: the new axis is expanded but not merged, a 5-D result."""

    def repeat_kv(x, n_rep):
        axis = dim % x.dim()
        copies = axis if order == "tile" else axis + 1
        sizes = [*x.shape]
        sizes.insert(copies, n_rep)
        repeated = x.unsqueeze(copies).expand(*sizes)
        return repeated.flatten(axis, axis + 1) if merge else repeated

    return repeat_kv


def _repeat_by_n_kv_heads(x, n_rep):
    return x.repeat_interleave(x.shape[1], dim=1)


def _repeat_groups_reversed(x, n_rep):
    return x.flip(1).repeat_interleave(n_rep, dim=1)


def _repeat_first_head_only(x, n_rep):
    return x[:, :1].expand(-1, x.shape[1] * n_rep, -1, -1)


REPEAT_KV = Exercise(
    id="12.repeat_kv",
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    forbidden=(repeat_kv,),
    reference=reference_repeat_kv,
    cases=_repeat_cases,
    points=1,
    outputs=("the repeated keys or values",),
    axes={"the repeated keys or values": "n_heads seq d_head"},
    checked="2 key/value heads for 4 and for 8 query heads, multi-query, multi-head (n_rep = 1), and float64",
    mistakes=(
        Mistake("tiled_heads", "tiled the heads with `repeat` (head h reads head h % n_kv_heads) instead of repeating "
                "each head in place with `repeat_interleave`",
                "`repeat` writes the whole stack of heads n_rep times, [k0, k1, k0, k1]; grouped-query attention "
                "gives each key/value head n_rep consecutive query heads, [k0, k0, k1, k1], as `repeat_interleave` "
                "does along `dim=1`. The shapes agree, so nothing raises, but a checkpoint trained "
                "with consecutive groups (LLaMA's, Hugging Face's) pairs every query head with the wrong keys.",
                (_repeat_like(order="tile"),)),
        Mistake("repeated_positions", "repeated along the sequence axis instead of the head axis",
                "The heads are axis 1 of (batch, n_kv_heads, seq, d_head); dim=2 (or -2) repeats every position, "
                "making a sequence n_rep times longer.", (_repeat_like(dim=2),)),
        Mistake("repeated_d_head", "repeated along the last axis, d_head, instead of the head axis",
                "Each head keeps its d_head dimensions; it is the number of heads that grows: repeat along dim=1.",
                (_repeat_like(dim=3),)),
        Mistake("group_axis_not_merged", "expanded a group axis but did not merge it into the head axis",
                "Inserting a group axis and expanding it to n_rep leaves a 5-D result; reshape it to "
                "(batch, n_kv_heads · n_rep, seq, d_head), so that the query heads find their keys on axis 1.",
                (_repeat_like(merge=False),)),
    ),
    mutants=(
        Mutant("groups_reversed", "gives the groups their key/value heads in reverse order", _repeat_groups_reversed),
        Mutant("first_head_only", "shares the first key/value head with every query head", _repeat_first_head_only),
        # Not catalogued: the function is handed n_rep, so no learner repeats by the number of key/value heads instead.
        Mutant("repeated_n_kv_heads_times", "repeats each head n_kv_heads times instead of n_rep times",
               _repeat_by_n_kv_heads),
    ),
)

# --- 12.predict_rope_wavelength (predict, then measure) ---------------------------------------------------------------


def slowest_rope_wavelength(d_head: int = 64, base: float = 10000.0) -> float:
    """How many positions the slowest-turning pair of a head's dimensions needs for one full turn: 2π / θ_(d/2 - 1)."""
    return (2 * math.pi / rope_frequencies(d_head, base)[-1]).item()


PREDICT_ROPE_WAVELENGTH = predict_number(
    "12.predict_rope_wavelength",
    measure=slowest_rope_wavelength,
    question="the slowest pair's wavelength at d_head 64",
    within=1.2,
    points=1,
    misconceptions=[
        Misconception("base_is_wavelength", 10000.0,
                      "took the base, 10000, for the longest wavelength",
                      "The base sets the slowest angle, θ = base^(-2i/d_head) radians per position, and one turn is 2π "
                      "radians: the wavelength is 2π / θ."),
        Misconception("exponent_one", 2 * math.pi * 10000.0,
                      "let the last pair turn by base^(-1) radians per position, 2π · 10000 positions per turn",
                      "i stops at d_head/2 - 1, so the last exponent is -2(d_head/2 - 1)/d_head = -62/64 at d_head 64, "
                      "not -1: the slowest angle is a little faster than 1/base."),
        Misconception("radians_not_turns", 10000.0 ** (62 / 64),
                      "gave 1/θ, the positions per radian, where a turn is 2π radians",
                      "A full turn is 2π radians: multiply 1/θ by 2π."),
        Misconception("fastest_pair", 2 * math.pi,
                      "gave the wavelength of the fastest pair, θ_0 = 1 radian per position",
                      "Pair 0 turns once every 2π positions; the question is about the slowest pair, i = d_head/2 - 1."),
        Misconception("head_size", 64.0,
                      "expected every pair to turn once over d_head positions",
                      "The wavelengths are geometric, from 2π positions to about 2π · base: d_head only sets how many "
                      "pairs share that range."),
    ],
    mutants=[
        wrong_prediction("a_million", 1e6, "twenty times too long, no misconception's value"),
        wrong_prediction("five_hundred", 500.0, "a hundred times too short, no misconception's value"),
    ],
)


# --- 12.predict_rmsnorm_spread (predict, then measure) -----------------------------------------------------------------

SPREAD_SHIFT = 2.0  # the offset every feature of a position carries
SPREAD_POSITIONS, SPREAD_D_MODEL = 256, 64


def shifted_features(seed: int = 0) -> torch.Tensor:
    """``SPREAD_POSITIONS`` positions of ``SPREAD_D_MODEL`` features: each feature N(0, 1) plus ``SPREAD_SHIFT``, the
    same offset for every feature (a common offset in a residual stream)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(SPREAD_POSITIONS, SPREAD_D_MODEL, generator=generator) + SPREAD_SHIFT


def rmsnorm_spread(seed: int = 0) -> float:
    """The standard deviation over the features of the package's RMSNorm (weight 1) applied to
    :func:`shifted_features`, averaged over the positions: what of the features' variation RMSNorm passes on when it
    does not re-centre."""
    with torch.no_grad():
        normalized = RMSNorm(SPREAD_D_MODEL)(shifted_features(seed))
    return normalized.std(dim=-1, unbiased=False).mean().item()


PREDICT_RMSNORM_SPREAD = predict_number(
    "12.predict_rmsnorm_spread",
    measure=rmsnorm_spread,
    question="the spread of RMSNorm's output on inputs shifted by 2",
    within=1.25,
    points=1,
    misconceptions=[
        Misconception("recentred_like_layer_norm", 1.0,
                      "expected RMSNorm to remove the common offset first, as LayerNorm does, leaving a spread of 1",
                      "RMSNorm does not subtract the mean: the offset stays in every feature, and it counts in the "
                      "root mean square that the whole vector is divided by, so the variation around the offset "
                      "comes out smaller than LayerNorm's."),
        Misconception("root_mean_square_as_sum", 1 / 3,
                      "took the root mean square of the shifted features to be the offset plus the spread, 2 + 1",
                      "Squares do not add like that: the mean of the squares of numbers with an offset is the square "
                      "of the offset plus the variance, and the root of that is smaller than offset plus spread."),
        Misconception("no_square_root", 0.2,
                      "divided the features by their mean square instead of by its square root",
                      "RMSNorm divides by the root of the mean square, a quantity in the units of the features "
                      "themselves, so that the output's root mean square is 1."),
        Misconception("unit_length", 1 / math.sqrt(5 * SPREAD_D_MODEL),
                      "divided each position by its length, so that the vector has length 1",
                      "RMSNorm divides by the root of the *mean* of the squares, not of their sum: its output has a "
                      "root mean square of 1, a length of about the square root of d_model, and its features stay "
                      "of the order of 1."),
    ],
    mutants=[
        wrong_prediction("tiny", 0.01, "forty times too small, no misconception's value"),
        wrong_prediction("three", 3.0, "larger than the input's own spread, no misconception's value"),
    ],
)


register(ROPE_TABLES, PREDICT_ROPE_WAVELENGTH, APPLY_ROPE, REPEAT_KV, LLAMA_BLOCK, PREDICT_RMSNORM_SPREAD)
