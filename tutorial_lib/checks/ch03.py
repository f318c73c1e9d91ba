"""Chapter 03's exercises: scaled dot-product attention and its masks, with the mistakes learners make.

Each mistake is written the way a learner would write it: the reference with exactly one thing wrong. The mistakes
carry no annotations on purpose: under the test suite's jaxtyping hook an annotation would turn a mistake's own shape
error into a type-check error, which is not what the learner's code raises.

``03.padded_causal_attention`` (the build exercise) is attention over a padded batch, causal or not, with an optional
window on both sides: the learner builds the mask from positions, refuses bad arguments with ``ValueError``s, and is
compared with torch's ``F.scaled_dot_product_attention``; its catalogue holds the composition mistakes (masks combined
with ``|``, one of them forgotten, the padding on the query axis, the causal flag or the window ignored or miscounted,
NaN rows) and the bad arguments let through. ``03.predict_variance`` (predict, then measure) asks for the variance of
q·k at d_k = 64 before scaling.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tutorial_lib import attention as reference
from tutorial_lib.checks.compound import mistake_builder
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, register, uses_earlier_answer
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction
from tutorial_lib.checks.tracing import ATTENTION_CALLEES

# --- 03.attention ---------------------------------------------------------------------------------------------------


def _attention_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    # Left padding under a causal mask: batch 1's first two queries may attend to nothing at all.
    left_padded = reference.causal_mask(4) & (torch.arange(4) >= torch.tensor([0, 2])[:, None])[:, None, None, :]
    return [
        # batch = seq = d_head: transposing the wrong axes of k keeps every shape and only changes the values.
        Case.of(q=randn(4, 4, 4), k=randn(4, 4, 4), v=randn(4, 4, 4)),
        Case.of(q=randn(2, 3, 5, 8, dtype=torch.float64), k=randn(2, 3, 7, 8, dtype=torch.float64),
                v=randn(2, 3, 7, 6, dtype=torch.float64), note="query_pos ≠ key_pos, d_value ≠ d_head"),
        Case.of(q=randn(6, 8), k=randn(6, 8), v=randn(6, 8), mask=reference.causal_mask(6), note="causal mask"),
        Case.of(q=randn(3, 5, 8), k=randn(3, 5, 8), v=randn(3, 5, 8),
                mask=reference.padding_mask(torch.tensor([5, 3, 1]), 5), note="padding mask"),
        Case.of(q=randn(2, 2, 4, 8, dtype=torch.float64), k=randn(2, 2, 4, 8, dtype=torch.float64),
                v=randn(2, 2, 4, 8, dtype=torch.float64), mask=left_padded,
                note="causal mask and left padding: two query rows see no key at all"),
        # batch = seq = d_head again, now with d_value ≠ d_head and a mask that empties some query rows: every wrong
        # transpose of k runs here, so a masking or scaling mistake made with it still shows.
        Case.of(q=randn(4, 4, 4), k=randn(4, 4, 4), v=randn(4, 4, 6),
                mask=reference.causal_mask(4) & (torch.arange(4) >= torch.tensor([0, 2, 1, 3])[:, None])[:, None, :],
                note="batch = seq = d_head, d_value ≠ d_head, causal mask and left padding"),
    ]


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)


@mistake_builder
def _attention_like(*, scale="sqrt_d_k", k_axes=(-2, -1), softmax_dim=-1, mask_with="-inf", nan_to_zero=True,
                    q_in_place=False, swapped=False):
    """A learner's attention; each keyword reproduces one way of getting it wrong. ``scale``: what the scores are
    divided by, "sqrt_d_k" (right), "none", "d_k" or "sqrt_d_value"; ``k_axes``: the axes of k swapped, or "T";
    ``softmax_dim``; ``mask_with``: "-inf" (right), "inverted" (-inf where the mask is True), "zero", "-1e9", "finfo_min"
    (a large negative number), or "after_softmax" (weights zeroed afterwards); ``nan_to_zero=False`` leaves fully
    masked rows NaN; ``q_in_place`` scales q in place; ``swapped`` returns (weights, out)."""

    def attention(q, k, v, mask=None):
        divisor = {"sqrt_d_k": math.sqrt(q.shape[-1]), "none": 1, "d_k": q.shape[-1],
                   "sqrt_d_value": math.sqrt(v.shape[-1])}[scale]
        k_t = k.T if k_axes == "T" else k.transpose(*k_axes)
        if q_in_place:
            q /= divisor
            scores = q @ k_t
        else:
            scores = q @ k_t if scale == "none" else q @ k_t / divisor
        if mask is not None and mask_with != "after_softmax":
            fill = {"-inf": float("-inf"), "inverted": float("-inf"), "zero": 0.0, "-1e9": -1e9,
                    "finfo_min": torch.finfo(scores.dtype).min}[mask_with]
            scores = scores.masked_fill(mask if mask_with == "inverted" else ~mask, fill)
        weights = torch.softmax(scores, dim=softmax_dim)
        if mask is not None and mask_with == "after_softmax":
            weights = weights.masked_fill(~mask, 0.0)
        if nan_to_zero:
            weights = weights.nan_to_num(0.0)
        out = weights @ v
        return (weights, out) if swapped else (out, weights)

    return attention


def _multiply_by_sqrt_d_k(q, k, v, mask=None):
    weights = _masked_softmax(q @ k.transpose(-2, -1) * math.sqrt(q.shape[-1]), mask)
    return weights @ v, weights


def _bmm(q, k, v, mask=None):  # torch.bmm takes 3-D tensors only
    weights = _masked_softmax(torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1]), mask)
    return torch.bmm(weights, v), weights


def _softmax_in_float32(q, k, v, mask=None):
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).float()
    weights = _masked_softmax(scores, mask)
    return weights @ v.float(), weights


def _unmasked_weights_returned(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    masked = _masked_softmax(scores, mask)
    return masked @ v, torch.softmax(scores, dim=-1)


ATTENTION = Exercise(
    id="03.attention",
    forbidden=(*ATTENTION_CALLEES,),
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    reference=reference.scaled_dot_product_attention,
    cases=_attention_cases,
    points=2,
    outputs=("out", "weights"),
    checked=(
        "2-D, 3-D and 4-D inputs, query_pos ≠ key_pos and d_value ≠ d_head, float32 and float64, no mask, "
        "causal and padding masks that broadcast, and query rows with every key masked (zero weights, zero output)"
    ),
    mistakes=(
        Mistake("no_scale", "forgot to divide the scores by √d_k",
                "Eq. (1) scales by 1/√d_k: divide the scores by √d_k before the softmax.", (_attention_like(scale="none"),)),
        Mistake("divided_by_d_k", "divided the scores by d_k instead of √d_k",
                "Divide by the square root of d_k: the dot product of two unit-variance vectors has variance d_k, so "
                "its standard deviation is √d_k.", (_attention_like(scale="d_k"),)),
        Mistake("scaled_by_d_value", "scaled by the size of v's last axis instead of d_k",
                "d_k is the size of the vectors in the dot product: the last axis of q and k, not of v.",
                (_attention_like(scale="sqrt_d_value"),)),
        Mistake("wrong_k_axes", "transposed the wrong axes of k",
                "Swap only the last two axes, counted from the end (the `mT` attribute does just that); `k.T` "
                "reverses every axis, and fixed indices such as 1 and 2 break as soon as there is a head axis.",
                (_attention_like(k_axes="T"), _attention_like(k_axes=(-1, -3)), _attention_like(k_axes=(1, 2)),
                 _attention_like(k_axes=(0, 1)))),
        Mistake("softmax_over_queries", "took the softmax over the wrong axis",
                "Each query's weights must sum to 1 over the keys: take the softmax over the last axis, `dim=-1`.",
                (_attention_like(softmax_dim=-2), _attention_like(softmax_dim=1), _attention_like(softmax_dim=0))),
        Mistake("inverted_mask", "inverted the mask",
                "True means *may attend*: fill the scores with -inf where the mask is False, not where it is "
                "True.", (_attention_like(mask_with="inverted"),)),
        Mistake("mask_after_softmax", "applied the mask after the softmax without renormalising",
                "Zeroing weights afterwards leaves rows that no longer sum to 1: set masked scores to -inf "
                "before the softmax.", (_attention_like(mask_with="after_softmax"),)),
        Mistake("masked_with_zero", "masked the scores with 0 instead of -inf",
                "A score of 0 still gets weight exp(0) = 1 in the softmax: fill with -inf, whose weight is 0.",
                (_attention_like(mask_with="zero"),)),
        Mistake("masked_with_large_negative", "masked with a large negative number instead of -inf",
                "It works until a query has no key to attend to: then every score is the same large negative "
                "number and the softmax spreads the weight evenly over keys it must not see. Use -inf and turn "
                "those rows' NaN into 0 (`nan_to_num`).",
                (_attention_like(mask_with="-1e9"), _attention_like(mask_with="finfo_min"))),
        Mistake("nan_for_fully_masked_rows", "left the softmax of all -inf rows as NaN",
                "A query whose keys are all masked should attend to nothing: turning its NaN weights into 0 after "
                "the softmax (`nan_to_num`) gives it zero weights and a zero output.", (_attention_like(nan_to_zero=False),)),
        Mistake("scaled_q_in_place", "scaled q in place",
                "Dividing `q` in place divides the caller's tensor too: put the scaled q in a new tensor, or "
                "scale the scores instead.", (_attention_like(q_in_place=True),)),
        Mistake("swapped_outputs", "returned (weights, out) instead of (out, weights)",
                "Return the output first and the attention weights second.", (_attention_like(swapped=True),)),
    ),
    mutants=(
        Mutant("multiplied_by_sqrt_d_k", "multiplies the scores by √d_k instead of dividing", _multiply_by_sqrt_d_k),
        Mutant("bmm", "uses torch.bmm, which takes 3-D tensors only", _bmm),
        Mutant("softmax_in_float32", "casts the scores to float32, so float64 inputs give float32 outputs",
               _softmax_in_float32),
        Mutant("unmasked_weights_returned", "returns the weights of the unmasked scores", _unmasked_weights_returned),
    ),
)


# --- 03.causal_mask -------------------------------------------------------------------------------------------------


def _seq_len_cases(generator: torch.Generator) -> list[Case]:
    return [Case.of(seq_len=4), Case.of(seq_len=7), Case.of(seq_len=1)]


@mistake_builder
def _causal_like(*, triangle="lower", diagonal=0, dtype=torch.bool):
    """A learner's causal mask; each keyword reproduces one way of getting it wrong: the ``triangle`` kept, the
    ``diagonal`` it starts from (``torch.tril``'s), and the ``dtype``."""

    def causal_mask(seq_len):
        ones = torch.ones(seq_len, seq_len, dtype=dtype)
        return torch.tril(ones, diagonal=diagonal) if triangle == "lower" else torch.triu(ones, diagonal=diagonal)

    return causal_mask


def _additive_mask(seq_len):  # nn.Transformer.generate_square_subsequent_mask's form
    return torch.triu(torch.full((seq_len, seq_len), float("-inf")), diagonal=1)


def _with_batch_axis(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))[None]


CAUSAL_MASK = Exercise(
    id="03.causal_mask",
    forbidden=(reference.causal_mask, nn.Transformer.generate_square_subsequent_mask),
    reference=lambda seq_len: reference.causal_mask(seq_len),
    cases=_seq_len_cases,
    points=1,
    outputs=("the mask",),
    checked="seq_len 4, 7 and 1, a boolean (seq_len, seq_len) mask, True on and below the diagonal",
    mistakes=(
        Mistake("upper_triangle", "built the upper triangle instead of the lower one",
                "True means *may attend*, and position t may attend to 0 … t (the past), so True belongs on and "
                "below the diagonal: `torch.tril`.", (_causal_like(triangle="upper"),)),
        Mistake("true_means_masked", "marked the positions to hide (True = masked) instead of those to see",
                "That is the convention of `nn.MultiheadAttention`'s boolean `attn_mask`; here True means *may "
                "attend*, so True goes on and below the diagonal, in a boolean mask.", (_causal_like(triangle="upper", diagonal=1),)),
        Mistake("excluded_diagonal", "left out the diagonal",
                "A position may attend to itself: keep the diagonal (the default `diagonal=0` of `torch.tril`).",
                (_causal_like(diagonal=-1),)),
        Mistake("sees_the_next_token", "let each position see the next one (`diagonal=1`)",
                "With `diagonal=1` position t also sees t + 1, the token it must predict: use the default "
                "`diagonal=0`.", (_causal_like(diagonal=1),)),
        Mistake("not_bool", "returned numbers instead of booleans",
                "Masks are boolean (True = may attend): create the ones with `dtype=torch.bool`, or compare the "
                "key positions with the query positions.", (_causal_like(dtype=torch.float32), _causal_like(dtype=torch.int64))),
    ),
    mutants=(
        Mutant("additive_mask", "returns nn.Transformer's additive float mask (0 and -inf)", _additive_mask),
        Mutant("batch_axis", "adds a leading batch axis: (1, seq_len, seq_len)", _with_batch_axis),
    ),
)


# --- 03.padding_mask ------------------------------------------------------------------------------------------------


def _padding_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(lengths=torch.tensor([3, 5, 1]), seq_len=5),
        Case.of(lengths=torch.tensor([0, 2]), seq_len=4, note="an empty sequence"),
        Case.of(lengths=torch.tensor([6]), seq_len=6, note="no padding"),
    ]


@mistake_builder
def _padding_like(*, compare="<", singleton="middle"):
    """A learner's padding mask; each keyword reproduces one way of getting it wrong: how a position is compared with
    the length ("<" right, ">=" inverted, "<=" one too many), and where the singleton axis goes ("middle" right,
    "none", "last")."""

    def padding_mask(lengths, seq_len):
        position, length = torch.arange(seq_len)[None, :], lengths[:, None]
        mask = {"<": position < length, ">=": position >= length, "<=": position <= length}[compare]
        return {"middle": mask[:, None, :], "none": mask, "last": mask[:, :, None]}[singleton]

    return padding_mask


def _padding_as_long(lengths, seq_len):
    return (torch.arange(seq_len)[None, :] < lengths[:, None]).long()[:, None, :]


def _padding_to_longest(lengths, seq_len):  # ignores seq_len
    return (torch.arange(int(lengths.max()))[None, :] < lengths[:, None])[:, None, :]


def _padding_leading_axis(lengths, seq_len):
    return (torch.arange(seq_len)[None, :] < lengths[:, None])[None]


PADDING_MASK = Exercise(
    id="03.padding_mask",
    reference=reference.padding_mask,
    cases=_padding_cases,
    points=1,
    outputs=("the mask",),
    checked="ragged lengths, an empty sequence and an unpadded one; bool masks of shape (batch, 1, seq_len)",
    mistakes=(
        Mistake("inverted", "marked the padding instead of the real tokens",
                "True means *may attend*: True on the first lengths[b] positions, the real tokens, False on the "
                "padding.",
                (_padding_like(compare=">="),)),
        Mistake("off_by_one", "let each sequence see one padding position too many",
                "A sequence of length n has positions 0 … n - 1: position n is already padding, so the comparison "
                "must be strict.",
                (_padding_like(compare="<="),)),
        Mistake("missing_query_axis", "left out the singleton query axis",
                "Return (batch, 1, seq_len) so the mask broadcasts over the queries: add an axis of size 1 in the "
                "middle.",
                (_padding_like(singleton="none"),)),
        Mistake("query_axis_last", "put the singleton axis last",
                "A (batch, seq_len, 1) mask hides padding *queries*; the keys are the last axis, so the "
                "singleton goes in the middle: (batch, 1, seq_len).", (_padding_like(singleton="last"),)),
    ),
    mutants=(
        Mutant("long_dtype", "returns 0/1 integers instead of booleans", _padding_as_long),
        Mutant("padded_to_longest", "ignores seq_len and pads to the longest length", _padding_to_longest),
        Mutant("leading_singleton", "puts the singleton axis first: (1, batch, seq_len)", _padding_leading_axis),
    ),
)


# --- 03.sliding_window_mask -----------------------------------------------------------------------------------------


def _window_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(seq_len=6, window=3),
        Case.of(seq_len=5, window=1, note="each position sees only itself"),
        Case.of(seq_len=4, window=10, note="a window longer than the sequence"),
    ]


def _positions(seq_len):
    return torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]


@mistake_builder
def _window_like(*, start="window_back", end="self"):
    """A learner's sliding-window mask; each keyword reproduces one way of getting it wrong. ``start``, the first key
    a query sees: "window_back" (t - window + 1: right), "one_too_wide" (t - window), "one_too_narrow"
    (t - window + 2), or "from_zero" (the first ``window`` keys of the sequence); ``end``, the last: "self" (right),
    "before_self", or "ahead" (window - 1 keys into the future)."""

    def sliding_window_mask(seq_len, window):
        query, key = _positions(seq_len)
        first = {"window_back": key > query - window, "one_too_wide": key >= query - window,
                 "one_too_narrow": key > query - window + 1, "from_zero": key < window}[start]
        last = {"self": key <= query, "before_self": key < query, "ahead": key < query + window}[end]
        return last & first

    return sliding_window_mask


def _window_ignored(seq_len, window):
    query, key = _positions(seq_len)
    return key <= query


def _window_looking_ahead(seq_len, window):
    query, key = _positions(seq_len)
    return (key >= query) & (key < query + window)


def _window_as_float(seq_len, window):
    query, key = _positions(seq_len)
    return ((key <= query) & (key > query - window)).float()


SLIDING_WINDOW_MASK = Exercise(
    id="03.sliding_window_mask",
    forbidden=(reference.sliding_window_mask,),
    reference=lambda seq_len, window: reference.sliding_window_mask(seq_len, window),
    cases=_window_cases,
    points=1,
    outputs=("the mask",),
    checked="windows of 3, 1 and longer than the sequence; bool (seq_len, seq_len) masks",
    mistakes=(
        Mistake("one_too_wide", "let each position see window + 1 keys",
                "Position t sees t - window + 1 … t, which is `window` keys: the key exactly `window` positions back "
                "is already out.",
                (_window_like(start="one_too_wide"),)),
        Mistake("one_too_narrow", "let each position see only window - 1 keys",
                "The window counts the position itself: t sees t - window + 1 … t, so the key at t - window + 1 is "
                "still in.",
                (_window_like(start="one_too_narrow"),)),
        Mistake("not_causal", "let positions see the future inside the window",
                "A sliding window is still causal: also require that the key does not come after the query.",
                (_window_like(end="ahead"),)),
        Mistake("excluded_self", "left each position out of its own window",
                "A position sees itself and the window - 1 before it: keep the keys from t - window + 1 up to and "
                "including t.",
                (_window_like(start="one_too_wide", end="before_self"),)),
        Mistake("window_from_the_start", "kept the first `window` positions instead of the last `window` ones",
                "The window slides with the query: count the window back from the query's position, not forward "
                "from 0.", (_window_like(start="from_zero"),)),
    ),
    mutants=(
        Mutant("window_ignored", "returns the plain causal mask", _window_ignored),
        Mutant("looking_ahead", "builds the band of the next `window` keys (the transpose)", _window_looking_ahead),
        Mutant("float_mask", "returns 0.0/1.0 instead of booleans", _window_as_float),
    ),
)


# --- 03.padded_causal_attention (build: attention over a padded batch, causal or not, with an optional window) ---------


def check_padded_inputs(q, k, v, lengths, window) -> None:
    """ValueError, naming the argument, for what attention over one padded batch cannot take."""
    batch, seq_len = q.shape[0], q.shape[1]
    if k.shape[:2] != (batch, seq_len) or v.shape[:2] != (batch, seq_len):
        raise ValueError(f"k and v must have q's (batch, seq) = {(batch, seq_len)}: the batch attends to itself, got "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    if not isinstance(lengths, torch.Tensor) or lengths.shape != (batch,) or lengths.dtype.is_floating_point:
        got = tuple(lengths.shape) if isinstance(lengths, torch.Tensor) else type(lengths).__name__
        raise ValueError(f"lengths must be an integer tensor with one length per sequence, shape ({batch},), got {got}")
    if batch and (lengths.min() < 0 or lengths.max() > seq_len):
        raise ValueError(f"lengths must lie in [0, seq={seq_len}], got {lengths.tolist()}")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"window must be None or a positive int, got {window!r}")


def padded_attention_mask(lengths: torch.Tensor, seq_len: int, causal: bool, window: int | None) -> torch.Tensor:
    """``(batch, query_pos, key_pos)``, True where query t may attend to key s: s is a real token (s < lengths[b]),
    not after t when ``causal``, and less than ``window`` positions from t (either side) when a window is given.
    Written from positions, not from the package's masks (tested against them)."""
    query, key = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    allowed = (key < lengths[:, None, None]).expand(len(lengths), seq_len, seq_len)
    if causal:
        allowed = allowed & (key <= query)
    return allowed & ((query - key).abs() < window) if window is not None else allowed


def reference_padded_attention(q, k, v, lengths, causal=True, window=None):
    """Self-attention over a right-padded batch: each query attends to the real keys the causal mask (when ``causal``)
    and the window (when given) leave it, by Eq. (1); a query left with no key gets zero weights and a zero output.
    Computed by torch's ``F.scaled_dot_product_attention``, the weights as its output for v = I (row t of I is key t's
    one-hot value, so each query's output is its row of weights). Returns ``(out, weights)``."""
    check_padded_inputs(q, k, v, lengths, window)
    batch, seq_len = q.shape[0], q.shape[1]
    mask = padded_attention_mask(lengths, seq_len, causal, window)
    sees = mask.any(dim=-1, keepdim=True)  # the kernel gives NaN for a row with no key: let it see all, then zero it
    kernel_mask = mask | ~sees
    identity = torch.eye(seq_len, dtype=q.dtype).expand(batch, seq_len, seq_len)
    weights = F.scaled_dot_product_attention(q, k, identity, attn_mask=kernel_mask).masked_fill(~sees, 0.0)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=kernel_mask).masked_fill(~sees, 0.0)
    return out, weights


def _padded_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    def qkv(batch: int, seq: int, d_head: int, d_value: int, dtype: torch.dtype = torch.float32) -> dict:
        return {"q": randn(batch, seq, d_head, dtype=dtype), "k": randn(batch, seq, d_head, dtype=dtype),
                "v": randn(batch, seq, d_value, dtype=dtype)}

    return [
        Case.of(**qkv(2, 4, 8, 8), lengths=torch.tensor([4, 2]), causal=True, window=None,
                note="causal, the second sequence padded after 2 tokens"),
        Case.of(**qkv(3, 5, 4, 6, torch.float64), lengths=torch.tensor([5, 1, 3]), causal=True, window=None,
                note="float64, d_value ≠ d_head, a sequence of one token"),
        Case.of(**qkv(2, 3, 8, 8), lengths=torch.tensor([0, 3]), causal=True, window=None,
                note="an empty sequence: every key of it is padding, so its queries attend to nothing"),
        Case.of(**qkv(2, 5, 8, 8), lengths=torch.tensor([5, 3]), causal=False, window=None,
                note="not causal (an encoder's): every real key, before or after the query"),
        Case.of(**qkv(2, 6, 8, 8), lengths=torch.tensor([6, 4]), causal=True, window=2,
                note="causal with a window of 2: the second sequence's last query sees only padding"),
        Case.of(**qkv(2, 6, 4, 4, torch.float64), lengths=torch.tensor([6, 3]), causal=False, window=2,
                note="float64, not causal, a window of 2 on both sides"),
        Case.of(**qkv(2, 5, 8, 8), lengths=torch.tensor([5, 7]), causal=True, window=None,
                note="a length of 7 in a batch of 5 positions, which must raise ValueError"),
        Case.of(**qkv(2, 5, 8, 8), lengths=torch.tensor([5, 2, 3]), causal=True, window=None,
                note="three lengths for a batch of two sequences, which must raise ValueError"),
        Case.of(**qkv(2, 5, 8, 8), lengths=torch.tensor([5, 2]), causal=True, window=0,
                note="a window of 0, which must raise ValueError"),
        Case.of(q=randn(2, 4, 8), k=randn(2, 5, 8), v=randn(2, 5, 8), lengths=torch.tensor([4, 2]), causal=True,
                window=None, note="k and v with 5 positions where q has 4, which must raise ValueError"),
    ]


@mistake_builder
def _padded_like(*, combine="and", padding_on="keys", triangle="lower", diagonal=0, causal_flag="kept",
                 window_band="both_sides", nan_to_zero=True, check_lengths=True, check_count=True, check_window=True,
                 check_shapes=True, key_compare="<", fill="-inf"):
    """A learner's padded attention, the mask built from positions and Eq. (1) written out; each keyword reproduces
    one way of getting it wrong. ``combine``: "and" (right), "or" or "plus" (booleans added: the same) between the
    causal mask and the padding, "or_all" (the window joined with or too),
    "causal_only" (no padding), "padding_only" (no causal mask), or "sequential" (each mask applied to fresh scores,
    so the last one alone counts); ``padding_on="queries"`` hides the padded queries' rows instead of the padded keys;
    ``triangle="upper"``; ``diagonal`` (1: each query sees the next key, -1: not itself); ``causal_flag="ignored"``
    (causal whatever ``causal`` says); ``window_band``: "both_sides" (right), "behind_only" (t - window < s), "one_too_wide"
    (|t - s| <= window) or "ignored"; ``nan_to_zero=False``; ``check_*=False``: a bad argument not refused;
    ``key_compare="<="`` (one padding key seen); ``fill="-1e9"``."""

    def attention(q, k, v, lengths, causal=True, window=None):
        batch, seq_len = q.shape[0], q.shape[1]
        if check_shapes and (k.shape[:2] != (batch, seq_len) or v.shape[:2] != (batch, seq_len)):
            raise ValueError("k and v must have q's batch and seq")
        if check_count and lengths.shape != (batch,):
            raise ValueError("lengths must hold one length per sequence")
        if check_lengths and (lengths.min() < 0 or lengths.max() > seq_len):
            raise ValueError("lengths must lie in [0, seq]")
        if check_window and window is not None and window < 1:
            raise ValueError("window must be at least 1")
        query, key = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
        real = key < lengths[:, None] if key_compare == "<" else key <= lengths[:, None]
        padding = real[:, :, None] if padding_on == "queries" else real[:, None, :]
        masks = []
        if (causal or causal_flag == "ignored") and combine != "padding_only":
            masks.append(key <= query + diagonal if triangle == "lower" else key >= query + diagonal)
        if combine != "causal_only":
            masks.append(padding)
        if window is not None and window_band != "ignored":
            distance = query - key
            masks.append({"both_sides": distance.abs() < window, "behind_only": distance < window,
                          "one_too_wide": distance.abs() <= window}[window_band])
        if combine == "sequential":
            masks = masks[-1:]
        mask = masks[0] if masks else torch.ones(seq_len, seq_len, dtype=torch.bool)
        for index, each in enumerate(masks[1:], start=1):
            # "or" and "plus" join the causal mask and the padding (the window, if any, still with &); "or_all" all.
            joined = combine == "or_all" or (combine in ("or", "plus") and index == 1
                                             and (causal or causal_flag == "ignored"))
            mask = (mask + each if combine == "plus" else mask | each) if joined else mask & each
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~mask, float("-inf") if fill == "-inf" else -1e9)
        weights = torch.softmax(scores, dim=-1)
        if nan_to_zero:
            weights = weights.nan_to_num(0.0)
        return weights @ v, weights

    return attention


def _weights_transposed(q, k, v, lengths, causal=True, window=None):
    out, weights = reference_padded_attention(q, k, v, lengths, causal, window)
    return out, weights.transpose(-2, -1)


PADDED_ATTENTION = Exercise(
    id="03.padded_causal_attention",
    # The package's attention and masks, torch's fused attention: the mask and Eq. (1) are the learner's own (their
    # answer to exercise 1 is allowed, graded once it passes).
    forbidden=(*ATTENTION_CALLEES, reference.causal_mask, reference.padding_mask, reference.sliding_window_mask,
               reference.bidirectional_mask),
    precondition=uses_earlier_answer("scaled_dot_product_attention", "03.attention", 1),
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    reference=reference_padded_attention,
    cases=_padded_cases,
    points=3,
    outputs=("out", "weights"),
    axes={"weights": "query_pos key_pos"},
    checked=(
        "causal right-padded batches in float32 and float64, a sequence of one token, an empty sequence whose queries "
        "attend to nothing (zero weights, zero output), a batch that is not causal, a window of 2 with and without the "
        "causal mask, and four bad inputs that must raise ValueError (a length beyond the sequence, one length too many, "
        "a window of 0, k and v longer than q); compared with torch's F.scaled_dot_product_attention, gradients too"
    ),
    mistakes=(
        Mistake("masks_or", "combined the masks with | (or) instead of & (and)",
                "True means *may attend*: a key must pass every mask, so combine them with and (&); with or (|) a "
                "query sees its future, and a key passes when any one mask lets it.",
                (_padded_like(combine="or"), _padded_like(combine="plus"), _padded_like(combine="or_all"))),
        Mistake("causal_only", "used the causal mask alone and forgot the padding",
                "The padded positions of a short sequence are keys too: without the padding mask every query attends "
                "to them. Hide every key at or beyond its sequence's length.", (_padded_like(combine="causal_only"),)),
        Mistake("padding_only", "let the padding mask alone decide, so the causal mask is lost",
                "With `causal=True` a query must not look ahead: combine the causal condition with the padding into "
                "one mask, and apply the result once (masking fresh scores for the second mask throws the first one "
                "away).", (_padded_like(combine="padding_only"), _padded_like(combine="sequential"))),
        Mistake("padding_on_the_query_axis", "put the padding on the query axis instead of the key axis",
                "Padding hides *keys*: its singleton axis is the query axis, (batch, 1, key_pos), so that it broadcasts "
                "over the queries. On the query axis it hides the padded queries' rows instead.",
                (_padded_like(padding_on="queries"),)),
        Mistake("causal_upside_down", "built the causal mask from the upper triangle, so each query sees its future",
                "Query t may attend to keys 0 … t: the lower triangle, key position at most the query's.",
                (_padded_like(triangle="upper"),)),
        Mistake("causal_off_by_one", "shifted the causal mask's diagonal by one",
                "Query t sees key t itself and nothing after it: compare the key's position with the query's, with no "
                "offset (neither the next key nor one fewer).",
                (_padded_like(diagonal=1), _padded_like(diagonal=-1))),
        Mistake("causal_flag_ignored", "applied the causal mask whatever `causal` says",
                "With `causal=False` (an encoder's attention) a query sees every real key, before and after it: add "
                "the causal condition only when `causal` is true.", (_padded_like(causal_flag="ignored"),)),
        Mistake("window_behind_only", "counted the window back from the query only, so without the causal mask a "
                                      "query sees every later key",
                "The window bounds the distance between query and key on both sides, |t − s| < window; the causal "
                "mask, when asked for, is what removes the later side.", (_padded_like(window_band="behind_only"),)),
        Mistake("window_one_too_wide", "let each query see keys exactly `window` positions away",
                "A window of w keeps the keys *less* than w positions from the query: a window of 1 is the query "
                "alone, so the distance w is already out.", (_padded_like(window_band="one_too_wide"),)),
        Mistake("window_ignored", "ignored the window",
                "When `window` is given, hide the keys that are `window` or more positions from the query as well, "
                "on top of the padding and the causal mask.", (_padded_like(window_band="ignored"),)),
        Mistake("nan_for_fully_masked_rows", "left NaN in the rows of queries that have no key left",
                "An empty sequence's queries, and a window that covers only padding, leave a query with every key "
                "masked: its softmax is 0/0. Give it zero weights and a zero output, as your attention of exercise 1 "
                "does.", (_padded_like(nan_to_zero=False),)),
        Mistake("length_not_refused", "accepted a length longer than the sequence",
                "A length beyond seq (or below 0) is a caller's bug that a mask would hide: raise ValueError naming "
                "`lengths` and the range [0, seq] before building anything.", (_padded_like(check_lengths=False),)),
        Mistake("lengths_count_not_refused", "let a `lengths` whose size is not the batch's reach the mask",
                "`lengths` holds one length per sequence: when its size is not q's batch, raise ValueError naming "
                "`lengths` and the shape expected, instead of the broadcasting error torch raises later.",
                (_padded_like(check_count=False),)),
        Mistake("window_not_refused", "accepted a window of 0, which hides every key",
                "A window must be at least 1 (the query itself): raise ValueError naming `window` for anything "
                "smaller.", (_padded_like(check_window=False),)),
        Mistake("shapes_not_refused", "let k and v with another number of positions than q reach the scores",
                "This is self-attention over one padded batch: k and v must have q's batch and seq. Raise ValueError "
                "naming them and the shape expected, instead of the broadcasting error torch raises later.",
                (_padded_like(check_shapes=False),)),
    ),
    mutants=(
        Mutant("padding_one_longer", "lets every query see one padding key (<= instead of <)",
               _padded_like(key_compare="<=")),
        Mutant("large_negative_fill", "fills with -1e9, so an empty sequence's queries spread their weight evenly",
               _padded_like(fill="-1e9")),
        Mutant("weights_transposed", "returns the weights with query_pos and key_pos swapped", _weights_transposed),
    ),
)


# --- 03.predict_variance (predict, then measure: why Eq. (1) divides by √d_k) ------------------------------------------


def _qk_variance_at_64() -> float:
    from tutorial_lib.widgets.softmax_saturation import qk_variance  # imported when measured: it loads matplotlib

    return qk_variance([64])[64][0]


PREDICT_VARIANCE = predict_number(
    "03.predict_variance",
    measure=_qk_variance_at_64,
    question="the variance of q·k at d_k = 64",
    within=1.5,
    points=1,
    misconceptions=[
        Misconception("no_growth", 1.0, "expected the variance to stay at 1, the variance of each entry",
                      "q·k adds d_k products, each of variance 1, and the variances of independent terms add up: "
                      "the sum has variance d_k."),
        Misconception("standard_deviation", 8.0, "gave the standard deviation, √d_k, instead of the variance",
                      "√d_k is the *spread* of q·k, the number Eq. (1) divides by; the variance is its square, d_k."),
        Misconception("squared", 4096.0, "expected the variance to grow with d_k², like the square of a sum of d_k ones",
                      "The products q_i k_i have mean 0 and are independent, so the variance of their sum is the sum "
                      "of their variances, d_k, not (d_k)²."),
        Misconception("averaged", 1 / 64, "treated q·k as an average of d_k products, whose variance shrinks as 1/d_k",
                      "A dot product sums the products, it does not average them: the variance grows with d_k."),
    ],
    mutants=[
        wrong_prediction("much_too_small", 20.0, "between √d_k and d_k, explained by no misconception"),
        wrong_prediction("much_too_large", 1000.0, "between d_k and d_k², explained by no misconception"),
    ],
)

register(ATTENTION, CAUSAL_MASK, PADDING_MASK, SLIDING_WINDOW_MASK, PADDED_ATTENTION, PREDICT_VARIANCE)
