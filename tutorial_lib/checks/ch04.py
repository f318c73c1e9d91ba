"""Chapter 04's exercises: splitting a vector into heads, merging the heads back, and a whole multi-head forward.

The cases include shapes where ``seq == n_heads`` (or ``batch == n_heads``), where a reshape that skips the transpose,
or a mask that is not broadcast over the heads, keeps every shape right and only changes the values: the bugs that
train silently. As in ``ch03``, the mistakes are written the way a learner would write them and carry no annotations.

``04.multi_head_attention`` is the build exercise and the second piece of the learner's own transformer (the build
track, :mod:`tutorial_lib.build_track`): a ``MultiHeadAttention`` module of their own, made of the four projections,
their split and merge and their chapter 03 attention, whose layers carry the package's names so that the book's
trained weights load into it. Its check runs the learner's class with each case's weights in place. ``04.predict_parameters`` (predict, then measure) asks how many
parameters 8-head attention has at d_model = 512: as many as one head, since the heads split d_model.
``04.predict_flop_ratio`` measures the same fact in compute: the FLOPs of 8 heads over those of 1, counted by PyTorch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tutorial_lib.attention import scaled_dot_product_attention
from tutorial_lib.checks.compound import mistake_builder
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, register
from tutorial_lib.checks.modules import run_module
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction
from tutorial_lib.multi_head import MultiHeadAttention, merge_heads, split_heads

# --- 04.split_heads -----------------------------------------------------------------------------------------------------


def _split_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    return [
        Case.of(x=randn(2, 5, 12), n_heads=3, note="d_head = 4"),
        Case.of(x=randn(1, 4, 8), n_heads=4, note="seq = n_heads: every shape is right even when the values are not"),
        Case.of(x=randn(3, 6, 6), n_heads=2, note="d_head = 3"),
        Case.of(x=randn(2, 3, 4), n_heads=1, note="one head"),
    ]


@mistake_builder
def _split_like(*, way="view_then_swap_1_2"):
    """A learner's split_heads. Its mistakes are other ways of writing the one reshape, so they share one keyword and
    are never made together: "reshape_straight" (to (batch, n_heads, seq, d_head), no transpose), "heads_inner" (the
    last axis viewed as (d_head, n_heads)), "no_transpose", "swap_1_3" (the positions swapped with d_head), or
    "chunk_positions" (the sequence cut into n_heads chunks)."""

    def split_heads(x, n_heads):
        batch, seq, d_model = x.shape
        d_head = d_model // n_heads
        if way == "reshape_straight":
            return x.reshape(batch, n_heads, seq, d_head)
        if way == "heads_inner":  # d_head outer, heads inner: the columns of a head are strided
            return x.view(batch, seq, d_head, n_heads).permute(0, 3, 1, 2)
        if way == "chunk_positions":
            return torch.stack(x.chunk(n_heads, dim=1), dim=1)
        viewed = x.view(batch, seq, n_heads, d_head)
        return {"no_transpose": viewed, "swap_1_3": viewed.transpose(1, 3)}.get(way, viewed.transpose(1, 2))

    return split_heads


_SPLIT_STRAIGHT = _split_like(way="reshape_straight")  # one object: the multi-head module's catalogue uses it too
_SPLIT_RIGHT = _split_like()  # the module's mistakes split with this, not with the package's split_heads (forbidden there)


def _split_swapped_sizes(x, n_heads):  # n_heads slices of d_head written the other way round
    batch, seq, d_model = x.shape
    return x.view(batch, seq, d_model // n_heads, n_heads).transpose(1, 3)


def _split_in_float64(x, n_heads):
    return split_heads(x.double(), n_heads)


SPLIT_HEADS = Exercise(
    id="04.split_heads",
    reference=split_heads,
    cases=_split_cases,
    points=1,
    outputs=("the heads",),
    axes={"the heads": "batch n_heads seq d_head"},
    checked="d_head of 4, 2 and 3, one head, and seq = n_heads, where only the values can tell a wrong reshape",
    mistakes=(
        Mistake("reshape_without_transpose", "reshaped straight to (batch, n_heads, seq, d_head) without a transpose",
                "A reshape keeps the memory order, so each 'head' gets pieces of several positions: view as "
                "(batch, seq, n_heads, d_head) first, then swap axes 1 and 2.", (_SPLIT_STRAIGHT,)),
        Mistake("heads_interleaved", "split the last axis as (d_head, n_heads), so each head takes every n-th column",
                "Head h owns a contiguous slice of d_head columns: view as (batch, seq, n_heads, d_head), heads "
                "outer, d_head inner.", (_split_like(way="heads_inner"),)),
        Mistake("missing_transpose", "left the head axis after the positions",
                "Attention works on the last two axes (positions, d_head) of each head: swap the positions with the "
                "heads to get (batch, n_heads, seq, d_head).", (_split_like(way="no_transpose"),)),
        Mistake("transposed_wrong_axes", "transposed the positions with d_head instead of with the heads",
                "Swap axes 1 and 2 of (batch, seq, n_heads, d_head), the positions and the heads, not d_head.",
                (_split_like(way="swap_1_3"),)),
        Mistake("split_positions", "cut the sequence into n_heads chunks instead of cutting d_model",
                "Every head sees every position with d_head of the features: split the last axis, not the positions.",
                (_split_like(way="chunk_positions"),)),
    ),
    mutants=(
        Mutant("swapped_sizes", "views as (d_head, n_heads) and swaps axes 1 and 3", _split_swapped_sizes),
        Mutant("float64", "returns float64", _split_in_float64),
    ),
)


# --- 04.merge_heads -----------------------------------------------------------------------------------------------------


def _merge_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    return [
        Case.of(z=randn(2, 3, 5, 4), note="3 heads, seq 5, d_head 4"),
        Case.of(z=randn(1, 4, 4, 2), note="seq = n_heads"),
        Case.of(z=randn(2, 2, 3, 3, dtype=torch.float64), note="float64"),
    ]


@mistake_builder
def _merge_like(*, way="swap_then_reshape"):
    """A learner's merge_heads. Its mistakes are other ways of writing the one reshape, so they share one keyword and
    are never made together: "reshape_straight" (no transpose), "heads_inner" (d_head outer, heads inner),
    "view_after_swap" (``view`` on the non-contiguous transpose), "sum" or "mean" of the heads."""

    def merge_heads(z):
        batch, n_heads, seq, d_head = z.shape
        if way == "reshape_straight":
            return z.reshape(batch, seq, n_heads * d_head)
        if way == "heads_inner":  # column = d · n_heads + h: the heads interleaved
            return z.permute(0, 2, 3, 1).reshape(batch, seq, n_heads * d_head)
        if way == "view_after_swap":  # the transposed tensor is not contiguous: view refuses
            return z.transpose(1, 2).view(batch, seq, n_heads * d_head)
        if way in ("sum", "mean"):
            return z.sum(dim=1) if way == "sum" else z.mean(dim=1)
        return z.transpose(1, 2).reshape(batch, seq, n_heads * d_head)

    return merge_heads


_MERGE_STRAIGHT = _merge_like(way="reshape_straight")  # one object each: the multi-head module's catalogue uses them
_MERGE_HEADS_INNER = _merge_like(way="heads_inner")
_MERGE_RIGHT = _merge_like()


def _merge_reversed_heads(z):
    return merge_heads(z.flip(1))


def _merge_concat_positions(z):
    return torch.cat(list(z.unbind(1)), dim=1)


MERGE_HEADS = Exercise(
    id="04.merge_heads",
    reference=merge_heads,
    cases=_merge_cases,
    points=1,
    outputs=("the merged output",),
    axes={"the merged output": "batch seq d_model"},
    checked="3 heads of 4, seq = n_heads, and float64: Concat(head_1, …, head_h), head 1 first",
    mistakes=(
        Mistake("reshape_without_transpose", "reshaped straight to (batch, seq, d_model) without a transpose",
                "(batch, n_heads, seq, d_head) must first become (batch, seq, n_heads, d_head): swap axes 1 and 2, "
                "then reshape.", (_MERGE_STRAIGHT,)),
        Mistake("heads_interleaved", "merged the heads in the wrong order, d_head outer and heads inner",
                "Concat puts whole heads side by side: once axes 1 and 2 are swapped the last two axes are (n_heads, "
                "d_head), which reshape to n_heads · d_head with head 1 first.", (_MERGE_HEADS_INNER,)),
        Mistake("view_after_transpose", "called `.view` on the transposed tensor",
                "A transpose makes the tensor non-contiguous, and `view` cannot reinterpret it: use `.reshape`, or "
                "call `contiguous()` before `view`.", (_merge_like(way="view_after_swap"),)),
        Mistake("summed_heads", "added the heads instead of concatenating them",
                "Concat keeps every head's d_head numbers: the output has n_heads · d_head = d_model columns.",
                (_merge_like(way="sum"),)),
        Mistake("averaged_heads", "averaged the heads instead of concatenating them",
                "Concat keeps every head's d_head numbers: the output has n_heads · d_head = d_model columns.",
                (_merge_like(way="mean"),)),
    ),
    mutants=(
        Mutant("reversed_heads", "puts the last head first", _merge_reversed_heads),
        Mutant("concat_along_positions", "concatenates the heads along the positions", _merge_concat_positions),
    ),
)


# --- 04.multi_head_attention (the build track's module) -------------------------------------------------------------


_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")


def _attention_weights(d_model: int, generator: torch.Generator, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Four nn.Linear(d_model, d_model) layers' weights, named as the package's MultiHeadAttention names them; the
    biases are not zero, so that a forgotten bias shows."""
    weights = {}
    for name in _PROJECTIONS:
        weights[f"{name}.weight"] = torch.randn(d_model, d_model, generator=generator, dtype=dtype) / math.sqrt(d_model)
        weights[f"{name}.bias"] = 0.1 * torch.randn(d_model, generator=generator, dtype=dtype)
    return weights


def _module_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    x = randn(2, 5, 16)
    padding = torch.tensor([[True] * 5 + [False] * 2, [True] * 7])[:, None, :].expand(2, 5, 7)
    x4 = randn(4, 6, 16)
    lengths = torch.tensor([6, 4, 2, 5])
    pad4 = (torch.arange(6)[None, None, :] < lengths[:, None, None]).expand(4, 6, 6)
    return [
        Case.of(d_model=16, n_heads=4, weights=_attention_weights(16, generator), x=x, context=None, mask=None,
                note="self-attention (context None), 4 heads of 4"),
        Case.of(d_model=16, n_heads=2, weights=_attention_weights(16, generator), x=x, context=x,
                mask=torch.ones(5, 5, dtype=torch.bool).tril(), note="a causal mask (query_pos, key_pos)"),
        Case.of(d_model=16, n_heads=4, weights=_attention_weights(16, generator), x=randn(2, 5, 16),
                context=randn(2, 7, 16), mask=padding,
                note="cross-attention, 7 keys, a (batch, query_pos, key_pos) padding mask"),
        Case.of(d_model=16, n_heads=4, weights=_attention_weights(16, generator), x=x4, context=None, mask=pad4,
                note="batch = n_heads = 4 with a (batch, query_pos, key_pos) mask"),
        Case.of(d_model=12, n_heads=3, weights=_attention_weights(12, generator, torch.float64),
                x=randn(1, 3, 12, dtype=torch.float64), context=randn(1, 3, 12, dtype=torch.float64), mask=None,
                note="float64, 3 heads of 4"),
    ]


def _module_call(cls, args):
    d_model, n_heads, weights, x, context, mask = args
    return run_module(cls, (d_model, n_heads), weights, (x, context), {"mask": mask},
                      what="MultiHeadAttention(d_model, n_heads)")


def reference_multi_head(x, context, w_q, w_k, w_v, w_o, n_heads, mask):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V);
    queries from ``x``, keys and values from ``context``, ``mask`` broadcast over the heads (no biases)."""
    q, k, v = split_heads(x @ w_q, n_heads), split_heads(context @ w_k, n_heads), split_heads(context @ w_v, n_heads)
    if mask is not None and mask.dim() >= 3:
        mask = mask.unsqueeze(-3)  # (batch, query_pos, key_pos) -> (batch, 1, query_pos, key_pos)
    return merge_heads(scaled_dot_product_attention(q, k, v, mask)[0]) @ w_o


@mistake_builder
def _mha_like(*, scale=lambda d_model, d_head: math.sqrt(d_head), w_o=True, split=_SPLIT_RIGHT, merge=_MERGE_RIGHT,
              broadcast_mask=True, keys_from_x=False, bias=True):
    """A learner's MultiHeadAttention module; each keyword reproduces one way of getting it wrong."""

    class MultiHeadAttention(nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            self.n_heads = n_heads
            self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d_model, d_model) for _ in range(4))

        def forward(self, x, context=None, mask=None):
            source = x if keys_from_x or context is None else context

            def project(layer, t):
                return layer(t) if bias else t @ layer.weight.T

            q = split(project(self.q_proj, x), self.n_heads)
            k, v = split(project(self.k_proj, source), self.n_heads), split(project(self.v_proj, source), self.n_heads)
            scores = q @ k.transpose(-2, -1) / scale(x.shape[-1], x.shape[-1] // self.n_heads)
            if mask is not None:
                if broadcast_mask and mask.dim() >= 3:
                    mask = mask.unsqueeze(1)
                scores = scores.masked_fill(~mask, float("-inf"))
            out = merge(torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v)
            return project(self.out_proj, out) if w_o else out

    return MultiHeadAttention


class _NamedOtherwise(nn.Module):
    """The right computation, with its layers named as the learner liked (w_q, ...): the book's weights do not load."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x, context=None, mask=None):
        source = x if context is None else context
        q, k, v = (_SPLIT_RIGHT(layer(t), self.n_heads) for layer, t in ((self.w_q, x), (self.w_k, source), (self.w_v, source)))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~(mask.unsqueeze(1) if mask.dim() >= 3 else mask), float("-inf"))
        return self.w_o(_MERGE_RIGHT(torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v))


MULTI_HEAD_ATTENTION = Exercise(
    id="04.multi_head_attention",
    # the package's answers to chapter 03 and to exercises 1 and 2: the module is made of the learner's own
    forbidden=(nn.MultiheadAttention, F.multi_head_attention_forward, F.scaled_dot_product_attention,
               scaled_dot_product_attention, split_heads, merge_heads),
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    reference=MultiHeadAttention,
    call=_module_call,
    cases=_module_cases,
    points=3,
    outputs=("the output",),
    axes={"the output": "batch query_pos d_model"},
    checked=(
        "self-attention with 4 and 2 heads (context None or x), a causal mask, cross-attention with a (batch, query_pos, "
        "key_pos) padding mask, batch = n_heads with such a mask, and float64; the weights are the cases' own, put in "
        "your layers by name, and the gradients with respect to them match too"
    ),
    mistakes=(
        Mistake("scaled_by_sqrt_d_model", "divided the scores by √d_model instead of √d_head",
                "Each head's dot products have d_head terms: divide by √d_head, with d_head = d_model / n_heads.",
                (_mha_like(scale=lambda d_model, d_head: math.sqrt(d_model)),)),
        Mistake("forgot_w_o", "forgot the output projection W^O",
                "MultiHead = Concat(head_1, …, head_h) W^O: pass the merged heads through out_proj.", (_mha_like(w_o=False),)),
        Mistake("mask_not_broadcast_over_heads", "applied a (batch, query_pos, key_pos) mask without a head axis",
                "Against scores of shape (batch, n_heads, query_pos, key_pos) the mask's batch axis lines up with the "
                "heads: it fails, or, when batch = n_heads, masks each head with another sequence's mask. Add a "
                "head axis of size 1 at position 1 (`unsqueeze`).", (_mha_like(broadcast_mask=False),)),
        Mistake("reshape_without_transpose", "split or merged the heads with a reshape that skips the transpose",
                "(batch, seq, d_model) -> view (batch, seq, n_heads, d_head) -> swap axes 1 and 2, and the reverse to "
                "merge.", (_mha_like(split=_SPLIT_STRAIGHT, merge=_MERGE_STRAIGHT),
                           _mha_like(split=_SPLIT_STRAIGHT), _mha_like(merge=_MERGE_STRAIGHT))),
        Mistake("heads_merged_in_the_wrong_order", "merged the heads in the wrong order",
                "Concat puts whole heads side by side, head 1 first: transpose to (batch, seq, n_heads, d_head), then "
                "reshape.", (_mha_like(merge=_MERGE_HEADS_INNER),)),
        Mistake("keys_from_the_queries", "took the keys and values from x instead of from context",
                "In cross-attention the queries come from x, the keys and values from context: project context with "
                "k_proj and v_proj (and x only when context is None).", (_mha_like(keys_from_x=True),)),
        Mistake("biases_left_out", "multiplied by the layers' weights and left their biases out",
                "Call the nn.Linear layers themselves rather than multiplying by their `weight`: each adds its "
                "`bias`, which the trained weights hold.", (_mha_like(bias=False),)),
    ),
    mutants=(
        Mutant("no_scaling", "divides the scores by nothing", _mha_like(scale=lambda d_model, d_head: 1.0)),
        Mutant("scaled_by_d_head", "divides by d_head instead of its square root",
               _mha_like(scale=lambda d_model, d_head: d_head)),
        Mutant("layers_named_otherwise", "computes the right thing with layers named w_q, w_k, w_v, w_o", _NamedOtherwise),
    ),
)


# --- 04.predict_parameters (predict, then measure: what splitting into heads costs) ---------------------------------------


def attention_parameters(d_model=512, n_heads=8):
    """The number of parameters of the package's MultiHeadAttention (W^Q, W^K, W^V, W^O and their biases)."""
    with torch.device("meta"):  # shapes without numbers: nothing is drawn from the random generator
        module = MultiHeadAttention(d_model, n_heads)
    return sum(parameter.numel() for parameter in module.parameters())


PREDICT_PARAMETERS = predict_number(
    "04.predict_parameters",
    measure=attention_parameters,
    question="8-head attention's parameters",
    within=1.25,
    points=1,
    misconceptions=[
        Misconception("every_head_full_size", 8 * 4 * (512 * 512 + 512),
                      "gave every head its own d_model × d_model projections",
                      "Each head projects to d_head = d_model / n_heads columns only: the 8 heads' W_i^Q side by side "
                      "make one d_model × d_model matrix, whatever the number of heads."),
        Misconception("d_head_squared", 8 * 4 * (64 * 64 + 64), "gave each head d_head × d_head matrices",
                      "A head reads the whole d_model-wide vector: its W_i^Q is d_model × d_head, not d_head × d_head."),
        Misconception("no_output_projection", 3 * (512 * 512 + 512), "forgot the output projection W^O",
                      "MultiHead = Concat(head_1, …, head_h) W^O: a fourth d_model × d_model matrix, with its bias."),
        Misconception("output_projection_per_head", 3 * (512 * 512 + 512) + 8 * (512 * 512 + 512),
                      "gave every head its own d_model × d_model output projection",
                      "W^O is applied once, to the concatenated heads: one d_model × d_model matrix."),
    ],
    mutants=[
        wrong_prediction("twice", 2_000_000, "about twice the count, explained by no misconception"),
        wrong_prediction("tiny", 50_000, "far too few, explained by no misconception"),
    ],
)


# --- 04.predict_flop_ratio (predict, then measure: what splitting into heads costs in compute) ------------------------------


def attention_flops(n_heads: int, d_model: int = 512, seq: int = 128) -> int:
    """The floating-point operations of one forward of the package's MultiHeadAttention on 1 × ``seq`` random positions
    (seed 0), as torch.utils.flop_counter.FlopCounterMode counts them: the four projections (``aten.addmm``) and the
    two attention products Q Kᵀ and weights · V (``aten.bmm``), 2 per multiply-add; it counts no softmax or scaling."""
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(1, seq, d_model, generator=torch.Generator().manual_seed(0))
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
        torch.manual_seed(0)
        module = MultiHeadAttention(d_model, n_heads)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        module(x)
    return counter.get_total_flops()


def flop_ratio() -> float:
    """FLOPs of 8-head attention over FLOPs of 1-head attention at d_model = 512 on 128 positions (counted)."""
    return attention_flops(8) / attention_flops(1)


PREDICT_FLOP_RATIO = predict_number(
    "04.predict_flop_ratio",
    measure=flop_ratio,
    question="the FLOPs of 8 heads over those of 1 head",
    within=1.25,
    points=1,
    misconceptions=[
        Misconception("every_head_full_size", 8.0, "gave every head the cost of a full-size single head",
                      "A head works on d_head = d_model / n_heads columns, not on all of d_model: the heads share out "
                      "the width of the single head, so together they do the work it does."),
        Misconception("heads_divide_the_work", 1 / 8, "counted the cost of one of the eight heads only",
                      "The heads run side by side, but every one of them is computed: add their costs, and add the "
                      "projections, which are the same d_model-wide matrices whatever the number of heads."),
        Misconception("full_width_attention_per_head", 16 / 9,
                      "kept the projections shared but gave every head full-width score and value products",
                      "Inside attention each head's queries, keys and values are d_head wide, not d_model: its score "
                      "product is 8 times smaller than the single head's, so the 8 heads together match it."),
        Misconception("pairs_of_heads", 64.0, "made every head attend with every other head (8 × 8 pairs)",
                      "Each head compares its own queries with its own keys only; heads never meet until their outputs "
                      "are concatenated and multiplied by W^O."),
    ],
    mutants=[
        wrong_prediction("three_times", 3.0, "three times the cost, explained by no misconception"),
        wrong_prediction("half", 0.5, "half the cost, explained by no misconception"),
    ],
)

register(SPLIT_HEADS, MERGE_HEADS, MULTI_HEAD_ATTENTION, PREDICT_PARAMETERS, PREDICT_FLOP_RATIO)
