"""Chapter 10's exercises: sampling (temperature, top-k, top-p) and the KV cache, with the mistakes learners make.

Sampling is random, so ``10.sample`` is checked on what it draws from: each case runs the learner's sampler on
``N_DRAWS`` copies of every row of logits with the case's seeded generator and compares the frequencies of the drawn
tokens with the reference's, to ``FREQUENCY_TOLERANCE``. The generator is part of the case, so the core also checks
that the sampler draws from it (same state, same tokens; another seed, other tokens; the global generator untouched).
A learner may sample differently from the reference (the inverse CDF,
the Gumbel trick, another generator call) and still pass: two correct samplers differ by noise only, at most
``√(2 · 0.25 / N_DRAWS) ≈ 0.005`` (one standard deviation), five times below the tolerance, while every catalogued
mistake moves some frequency by more than 0.1. Everything is seeded, so a verdict never changes from run to run.

``10.predict_distinct_tokens`` (predict, then measure, by sampling): how many different tokens 500 draws of the
package's sampler see under the Zipf distribution of ``10.predict_nucleus_size``: the head repeats, the tail is new.

As in ``ch03``, the mistakes are written the way a learner would write them and carry no annotations.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from tutorial_lib import sampling as reference
from tutorial_lib.attention import causal_attention, scaled_dot_product_attention
from tutorial_lib.checks.ch08 import SMALL_GPT, BookGPT, _gpt_module_like, _random_gpt_weights, _tied, book_char_gpt_case
from tutorial_lib.checks.compound import mistake_builder
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, WrongOutput, register
from tutorial_lib.checks.modules import build_module, same_parameters
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction
from tutorial_lib.kv_cache import KVCache, LayerKVCache
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.multi_head import MultiHeadAttention

N_DRAWS = 20_000
FREQUENCY_TOLERANCE = 0.025

# --- 10.sample ------------------------------------------------------------------------------------------------------


def _sample_cases(generator: torch.Generator) -> list[Case]:
    logits = 2 * torch.randn(2, 6, generator=generator)  # spread enough that T = 0.5, 1 and 2 differ by > 0.1
    return [
        Case.of(logits=logits, temperature=1.0, generator=_seeded(0)),
        Case.of(logits=logits, temperature=0.5, generator=_seeded(1), note="T < 1 sharpens"),
        Case.of(logits=logits, temperature=2.0, generator=_seeded(2), note="T > 1 flattens"),
        Case.of(logits=2 * torch.randn(3, 6, generator=generator), temperature=0.0, generator=_seeded(3),
                note="T = 0 is greedy"),
        Case.of(logits=torch.randn(2, 5, generator=generator, dtype=torch.float64), temperature=0.7,
                generator=_seeded(4)),
    ]


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _frequencies(sample, logits: torch.Tensor, temperature: float, generator: torch.Generator) -> torch.Tensor:
    """``(rows, d_vocab)`` frequencies of ``N_DRAWS`` draws per row of ``logits``, all drawn in one batched call."""
    rows, d_vocab = logits.shape
    draws = sample(logits.repeat_interleave(N_DRAWS, dim=0), temperature, generator)
    if not isinstance(draws, torch.Tensor):
        raise WrongOutput("wrong_type", f"sample_next_token should return a tensor of token ids, got "
                                        f"{type(draws).__name__}")
    if draws.shape != (rows * N_DRAWS,):
        raise WrongOutput("wrong_shape", f"sample_next_token should return one token id per row, shape (batch,) = "
                                         f"({rows * N_DRAWS},), got {tuple(draws.shape)}")
    if draws.dtype.is_floating_point or draws.dtype == torch.bool:
        raise WrongOutput("wrong_type", f"sample_next_token should return integer token ids, got dtype {draws.dtype}")
    if draws.numel() and (draws.min() < 0 or draws.max() >= d_vocab):
        raise WrongOutput("wrong_values", f"sample_next_token returned token ids outside [0, d_vocab={d_vocab}): "
                                          f"{draws.min().item()} to {draws.max().item()}")
    counts = torch.nn.functional.one_hot(draws.reshape(rows, N_DRAWS), d_vocab).sum(dim=1)
    return counts.to(torch.float64) / N_DRAWS


def _reference_sample(logits, temperature, generator):
    return reference.sample_next_token(logits, temperature=temperature, generator=generator)


@mistake_builder
def _sample_like(*, temperature_on="logits", zero="greedy", softmax=True):
    """A learner's sampler; each keyword reproduces one way of getting it wrong. ``temperature_on``: "logits"
    (divided: right), "multiplied" (the logits times T), "probabilities" (the softmax divided by T), or
    "probabilities_softmaxed" (that, through a second softmax); ``zero``: "greedy" (right), "skipped" (T = 0 is falsy:
    no temperature), "divided" (divides by 0); ``softmax=False`` hands the scaled logits to the sampler as weights."""

    def sample(logits, temperature, generator):
        if zero == "greedy" and temperature == 0:
            return logits.argmax(dim=-1)
        if zero == "skipped" and not temperature:
            weights = torch.softmax(logits, dim=-1) if softmax else logits
        elif temperature_on in ("probabilities", "probabilities_softmaxed"):
            weights = torch.softmax(logits, dim=-1) / temperature
            if temperature_on == "probabilities_softmaxed":
                weights = torch.softmax(weights, dim=-1)
        else:
            scaled = logits * temperature if temperature_on == "multiplied" else logits / temperature
            weights = torch.softmax(scaled, dim=-1) if softmax else scaled
        return torch.multinomial(weights, 1, generator=generator).squeeze(-1)

    return sample


def _always_greedy(logits, temperature, generator):
    return logits.argmax(dim=-1)


def _softmax_over_the_batch(logits, temperature, generator):
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=0)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


SAMPLE = Exercise(
    id="10.sample",
    forbidden=(reference.sample_next_token, reference.generate),
    reference=_reference_sample,
    cases=_sample_cases,
    points=2,
    outputs=("the distribution of the drawn tokens",),
    call=lambda sample, args: _frequencies(sample, *args),
    tolerance=(0.0, FREQUENCY_TOLERANCE),
    checked=(
        f"{N_DRAWS:,} draws per row at T = 1, 0.5, 2 and 0.7 (float32 and float64) have the frequencies of "
        f"softmax(logits / T) to within {FREQUENCY_TOLERANCE}, and T = 0 always draws the argmax"
    ),
    mistakes=(
        Mistake("temperature_after_softmax", "applied the temperature to the probabilities instead of the logits",
                "Divide the logits by the temperature, then take the softmax over the vocabulary. Probabilities "
                "divided by T are renormalised by the sampler, so T changes nothing; a second softmax of them is "
                "almost uniform.", (_sample_like(temperature_on="probabilities"), _sample_like(temperature_on="probabilities_softmaxed"))),
        Mistake("multiplied_by_temperature", "multiplied the logits by T instead of dividing",
                "softmax(logits / T): a small T must make the largest logit dominate, so divide.",
                (_sample_like(temperature_on="multiplied"),)),
        Mistake("zero_temperature_not_greedy", "did not treat T = 0 as greedy decoding",
                "T → 0 puts all the mass on the largest logit, but dividing by 0 gives inf or NaN, and skipping the "
                "division when T is 0 samples at T = 1: check for 0 first and return each row's `argmax`.",
                (_sample_like(zero="skipped"), _sample_like(zero="divided"))),
        Mistake("sampled_logits", "passed the logits to torch.multinomial as if they were probabilities",
                "torch.multinomial wants non-negative weights: take the softmax of the scaled logits first.",
                (_sample_like(softmax=False),)),
    ),
    mutants=(
        Mutant("always_greedy", "returns the argmax at every temperature", _always_greedy),
        Mutant("softmax_over_the_batch", "takes the softmax over the batch axis (dim=0)", _softmax_over_the_batch),
    ),
)


# --- 10.top_k -------------------------------------------------------------------------------------------------------


def _top_k_cases(generator: torch.Generator) -> list[Case]:
    ties = torch.tensor([[2.0, 1.0, 1.0, 0.0, -1.0], [0.5, 0.5, 0.5, 0.5, 0.1]])
    return [
        Case.of(logits=torch.randn(3, 10, generator=generator), top_k=3),
        Case.of(logits=ties, top_k=2, note="ties with the 2nd largest logit"),
        Case.of(logits=torch.randn(2, 8, generator=generator, dtype=torch.float64), top_k=1),
        Case.of(logits=torch.randn(2, 6, generator=generator), top_k=6, note="k = d_vocab"),
        Case.of(logits=torch.randn(2, 6, generator=generator), top_k=10, note="k > d_vocab keeps everything"),
    ]


@mistake_builder
def _top_k_like(*, threshold="kth_value", fill=float("-inf"), probabilities=False, clamp=True):
    """A learner's top-k filter; each keyword reproduces one way of getting it wrong. ``threshold``: "kth_value"
    (drop below the k-th largest value: right), "by_index" (keep exactly the k positions topk returns), "strict" (drop
    the k-th too), "one_late" (threshold at the (k+1)-th sorted value); ``fill``: what a dropped logit becomes;
    ``probabilities=True`` filters the softmax's probabilities with zeros; ``clamp=False`` lets k exceed the vocabulary."""

    def top_k_filter(logits, top_k):
        if clamp:
            top_k = min(top_k, logits.shape[-1])
        values, dropped = (torch.softmax(logits, dim=-1), 0.0) if probabilities else (logits, fill)
        if threshold == "by_index":
            indices = torch.topk(values, top_k, dim=-1).indices
            keep = torch.zeros_like(values, dtype=torch.bool).scatter(-1, indices, True)
            return values.masked_fill(~keep, dropped)
        if threshold == "kth_value":
            kth = torch.topk(values, top_k, dim=-1).values[:, -1:]
            return values.masked_fill(values < kth, dropped)
        position = top_k - 1 if threshold == "strict" else top_k
        kth = torch.sort(values, dim=-1, descending=True).values[:, position, None]
        return values.masked_fill(values <= kth if threshold == "strict" else values < kth, dropped)

    return top_k_filter


def _top_k_large_negative(logits, top_k):
    top_k = min(top_k, logits.shape[-1])
    kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, -1e9)


def _top_k_in_place(logits, top_k):
    top_k = min(top_k, logits.shape[-1])
    kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
    logits[logits < kth] = float("-inf")
    return logits


TOP_K = Exercise(
    id="10.top_k",
    reference=reference.top_k_filter,
    cases=_top_k_cases,
    points=1,
    outputs=("the returned tensor",),
    checked=(
        "k = 3, 1, d_vocab and more than d_vocab, float32 and float64, and ties with the k-th largest logit (all kept)"
    ),
    mistakes=(
        Mistake("dropped_ties", "kept exactly k tokens, dropping those tied with the k-th",
                "Tokens with the same logit are equally likely; keeping some of them depends on their order in the "
                "vocabulary. Compare values, not positions: every logit below the k-th largest value becomes -inf.",
                (_top_k_like(threshold="by_index"),)),
        Mistake("kept_k_minus_one", "kept k - 1 tokens",
                "Drop only the logits strictly below the k-th largest, not those equal to it: the k-th itself stays.",
                (_top_k_like(threshold="strict"),)),
        Mistake("kept_k_plus_one", "kept k + 1 tokens",
                "Indices count from 0: the k-th largest value sits at index k − 1 of the sorted logits, not at "
                "index k.",
                (_top_k_like(threshold="one_late"),)),
        Mistake("filled_with_zero", "set the dropped logits to 0 instead of -inf",
                "A logit of 0 still has probability e⁰ / Σ after the softmax; only -inf gives probability 0.",
                (_top_k_like(fill=0.0),)),
        Mistake("returned_probabilities", "returned probabilities with zeros instead of logits with -inf",
                "The filters work on logits, so that temperature, top-k and top-p compose and the softmax comes "
                "last: return the logits themselves, with -inf in place of the dropped ones.", (_top_k_like(probabilities=True),)),
        Mistake("k_larger_than_vocabulary", "let k exceed the vocabulary",
                "torch.topk refuses k > d_vocab; first clamp k to the size of the logits' last axis.",
                (_top_k_like(clamp=False),)),
    ),
    mutants=(
        Mutant("large_negative_fill", "sets the dropped logits to -1e9 instead of -inf", _top_k_large_negative),
        Mutant("in_place", "writes -inf into the caller's logits", _top_k_in_place),
    ),
)


# --- 10.top_p -------------------------------------------------------------------------------------------------------


def _top_p_cases(generator: torch.Generator) -> list[Case]:
    confident = torch.tensor([[0.0, 6.0, 1.0, 0.5, 0.0, -1.0], [0.2, 0.0, 0.4, 0.1, 0.3, 0.0]])
    return [
        Case.of(logits=confident, top_p=0.5, note="in row 0 the most likely token alone has 0.98 > top_p"),
        Case.of(logits=2 * torch.randn(3, 10, generator=generator), top_p=0.9),
        Case.of(logits=torch.zeros(2, 8), top_p=0.375, note="uniform: 3 tokens reach 0.375 exactly"),
        Case.of(logits=torch.randn(2, 7, generator=generator, dtype=torch.float64), top_p=1.0,
                note="top_p = 1 keeps all"),
    ]


@mistake_builder
def _top_p_like(*, rule="mass_before", keep_first=True, sort=True, restore_order=True):
    """A learner's top-p filter; each keyword reproduces one way of getting it wrong. ``rule`` decides which sorted
    token is dropped: "mass_before" (when the tokens before it reach top_p: right), "shifted" (the cumulative sum
    shifted by one, the usual form), "shifted_exceeding" (shifted, but only when it exceeds top_p) or "mass_with_own"
    (its own probability included); ``keep_first=False`` lets the most likely token go; ``sort=False`` sums in
    vocabulary order; ``restore_order=False`` returns the logits in sorted order."""

    def top_p_filter(logits, top_p):
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True) if sort else (logits, None)
        probs = torch.softmax(sorted_logits, dim=-1)
        cumulative = probs.cumsum(dim=-1)
        if rule == "mass_before":
            drop = cumulative - probs >= top_p
        elif rule == "mass_with_own":
            drop = cumulative > top_p
        else:
            exceeded = cumulative > top_p if rule == "shifted_exceeding" else cumulative >= top_p
            drop = exceeded.clone()
            drop[..., 1:] = exceeded[..., :-1]  # shift right: the token that crosses top_p is kept
        if keep_first and rule != "mass_before":
            drop[..., 0] = False
        if order is None:
            return logits.masked_fill(drop, float("-inf"))
        if not restore_order:
            return sorted_logits.masked_fill(drop, float("-inf"))
        return logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))

    return top_p_filter


def _top_p_cumsum_of_logits(logits, top_p):
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    cumulative = sorted_logits.cumsum(dim=-1)  # logits summed as if they were probabilities
    drop = cumulative - sorted_logits >= top_p
    return logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))


def _top_p_in_place(logits, top_p):
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    drop = probs.cumsum(dim=-1) - probs >= top_p
    return logits.masked_fill_(drop.scatter(-1, order, drop), float("-inf"))


TOP_P = Exercise(
    id="10.top_p",
    reference=reference.top_p_filter,
    cases=_top_p_cases,
    points=2,
    outputs=("the returned tensor",),
    checked=(
        "top_p = 0.5, 0.9, 0.375 and 1, float32 and float64: the smallest set of most likely tokens that reaches "
        "top_p, the most likely token kept even when it alone exceeds top_p, a sum that reaches top_p exactly, and "
        "the logits returned in vocabulary order"
    ),
    mistakes=(
        Mistake("dropped_the_top_token", "dropped the most likely token when it alone exceeds top_p",
                "The nucleus is never empty: the most likely token always stays. Decide on the probability mass "
                "*before* each token, its own probability left out, or always keep the first of the sorted tokens.",
                (_top_p_like(rule="mass_with_own", keep_first=False),
                 _top_p_like(rule="shifted_exceeding", keep_first=False), _top_p_like(rule="shifted", keep_first=False))),
        Mistake("one_token_too_few", "dropped the token that makes the sum reach top_p",
                "The nucleus must *reach* top_p: keep the token that crosses it. Drop a token only when the tokens "
                "before it already reach top_p, that is when the cumulative sum without its own probability does.",
                (_top_p_like(rule="mass_with_own"),)),
        Mistake("one_token_too_many", "kept one token too many when the sum reaches top_p exactly",
                "Once the kept tokens reach top_p the nucleus is complete: drop the next one as soon as the mass "
                "before it equals top_p, not only when it exceeds it.",
                (_top_p_like(rule="shifted_exceeding"),)),
        Mistake("not_sorted", "summed the probabilities in vocabulary order without sorting them",
                "The nucleus is made of the *most likely* tokens: sort the logits in descending order "
                "(`descending=True`) before the cumulative sum.", (_top_p_like(sort=False),)),
        Mistake("left_in_sorted_order", "returned the logits in sorted order",
                "The filtered logits must stay in vocabulary order, as the sampler indexes tokens by position: "
                "scatter the decision made in sorted order back to each token's own position (`scatter`).",
                (_top_p_like(restore_order=False),)),
    ),
    mutants=(
        Mutant("cumsum_of_logits", "sums the sorted logits instead of their probabilities", _top_p_cumsum_of_logits),
        Mutant("in_place", "fills the caller's logits in place (masked_fill_)", _top_p_in_place),
    ),
)


# --- 10.kv_cache_attention --------------------------------------------------------------------------------------------


def _kv_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    def case(batch: int, n_heads: int, n_past: int, n_new: int, d_head: int, note: str, dtype=torch.float32) -> Case:
        new = {name: randn(batch, n_heads, n_new, d_head, dtype=dtype) for name in ("q", "k", "v")}
        past = {name: randn(batch, n_heads, n_past, d_head, dtype=dtype) for name in ("past_k", "past_v")}
        return Case.of(**new, **past, note=note)

    return [
        case(2, 2, 5, 1, 8, "one new token after 5 cached positions"),
        case(1, 3, 0, 4, 8, "an empty cache: the prompt's 4 positions at once"),
        case(2, 2, 3, 4, 8, "a chunk of 4 new positions after 3 cached ones"),
        case(1, 2, 6, 2, 4, "a chunk of 2 after 6", dtype=torch.float64),
    ]


def _reference_cached_attention(q, k, v, past_k, past_v):
    """The package's way: the cache's ``append`` returns every key and value so far; the causal mask is offset by
    the number of cached positions (``causal_attention`` builds it with ``n_past``)."""
    batch, n_heads, n_past, d_head = past_k.shape
    cache = LayerKVCache(batch, n_heads, n_past + k.shape[-2], d_head, device=k.device, dtype=k.dtype)
    cache.append(past_k, past_v)
    keys, values = cache.append(k, v)
    return causal_attention(q, keys, values), keys, values


@mistake_builder
def _cached_attention_like(*, attend_to="everything", mask="offset", order="past_first"):
    """A learner's cached attention; each keyword reproduces one way of getting it wrong. ``attend_to="past"``
    attends to the cache before appending; ``mask``: "offset" (key ≤ n_past + query: right), "none", "top_left" (query
    i sees keys 0..i) or "new_only" (a mask over the new positions alone); ``order="new_first"`` puts the new keys and
    values before the cached ones."""

    def cached_attention(q, k, v, past_k, past_v):
        pair = ((past_k, k), (past_v, v)) if order == "past_first" else ((k, past_k), (v, past_v))
        keys, values = (torch.cat(two, dim=-2) for two in pair)
        if attend_to == "past":
            return scaled_dot_product_attention(q, past_k, past_v)[0], keys, values
        n_new, n_past = q.shape[-2], past_k.shape[-2]
        if mask == "none":
            allowed = None
        elif mask == "top_left":
            allowed = torch.ones(n_new, keys.shape[-2], dtype=torch.bool).tril()
        elif mask == "new_only":
            allowed = torch.ones(n_new, n_new, dtype=torch.bool).tril()
        else:
            allowed = torch.arange(keys.shape[-2])[None, :] <= torch.arange(n_new)[:, None] + n_past
        return scaled_dot_product_attention(q, keys, values, allowed)[0], keys, values

    return cached_attention


def _strict_offset_mask(q, k, v, past_k, past_v):  # key < query: no query sees its own key
    keys, values = torch.cat([past_k, k], dim=-2), torch.cat([past_v, v], dim=-2)
    query = torch.arange(q.shape[-2])[:, None] + past_k.shape[-2]
    mask = torch.arange(keys.shape[-2])[None, :] < query
    return scaled_dot_product_attention(q, keys, values, mask)[0], keys, values


def _cat_on_the_head_axis(q, k, v, past_k, past_v):
    keys, values = torch.cat([past_k, k], dim=1), torch.cat([past_v, v], dim=1)
    return scaled_dot_product_attention(q, keys, values)[0], keys, values


KV_CACHE_ATTENTION = Exercise(
    id="10.kv_cache_attention",
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    forbidden=(LayerKVCache, KVCache),
    reference=_reference_cached_attention,
    cases=_kv_cases,
    points=2,
    outputs=("out", "keys", "values"),
    checked=(
        "one new token after a cache, an empty cache, chunks of several new positions after a cache, float32 and "
        "float64: every new query sees the cached positions and the new ones up to itself, and the keys and values "
        "returned are the cached ones followed by the new ones"
    ),
    mistakes=(
        Mistake("attended_before_appending", "attended to the cached keys before appending the new ones",
                "A new position must see itself (and the new positions before it): append k and v to the cache "
                "first, then attend to everything it holds.", (_cached_attention_like(attend_to="past"),)),
        Mistake("no_mask_for_the_chunk", "used no causal mask for a chunk of several new positions",
                "One new token may see every key, but in a chunk the first new position must not see the ones "
                "after it: mask with `causal_mask`, offset by the number of cached positions (`n_past`).", (_cached_attention_like(mask="none"),)),
        Mistake("mask_not_offset", "built the causal mask as if the new positions came first, without the n_past "
                "offset", "New query i is position n_past + i: it sees every cached key and new keys up to itself. "
                "Give `causal_mask` the number of cached positions as `n_past`: it shifts the diagonal by that many.",
                (_cached_attention_like(mask="top_left"), _cached_attention_like(mask="new_only"))),
        Mistake("new_keys_first", "put the new keys and values before the cached ones",
                "The cache holds positions in order: concatenate along the sequence axis, the cached keys and values "
                "first, the new ones after them.",
                (_cached_attention_like(order="new_first"),)),
    ),
    mutants=(
        Mutant("strict_mask", "masks with key < query, so no position sees its own key", _strict_offset_mask),
        Mutant("cat_on_the_head_axis", "concatenates the cache along dim 1, the heads", _cat_on_the_head_axis),
    ),
)


# --- 10.cached_forward ------------------------------------------------------------------------------------------------


def _cached_forward_model() -> GPT:
    """A small GPT whose next token depends strongly on its context and on positions: at GPT-2's initial scale
    (std 0.02) a model that lost the past or its positions would barely change its logits."""
    with torch.random.fork_rng(devices=[]):  # building a GPT draws from the global generator: leave it alone
        model = GPT(GPTConfig(d_vocab=11, n_ctx=16, d_model=16, n_heads=2, n_layers=2))
    generator = torch.Generator().manual_seed(10)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.copy_(0.5 * torch.randn(parameter.shape, generator=generator))
    return model.eval()


def _run_cached_forward(forward, tokens: torch.Tensor, chunks: tuple[int, ...]) -> torch.Tensor:
    """Feed ``tokens`` chunk by chunk through ``forward(model, chunk, cache)``, one cache for all; concatenate the
    logits."""
    model = _cached_forward_model()
    cache = model.make_kv_cache(tokens.shape[0])
    logits, start = [], 0
    for size in chunks:
        logits.append(forward(model, tokens[:, start : start + size], cache))
        start += size
    return torch.cat(logits, dim=1)


def _forward_cases(generator: torch.Generator) -> list[Case]:
    def tokens(batch: int, seq: int) -> torch.Tensor:
        return torch.randint(11, (batch, seq), generator=generator)

    return [
        Case.of(tokens=tokens(2, 9), chunks=(4, 1, 1, 3), note="a prompt of 4, two single tokens, a chunk of 3"),
        Case.of(tokens=tokens(1, 16), chunks=(16,), note="the whole context at once"),
        Case.of(tokens=tokens(3, 12), chunks=(1,) * 12, note="one token at a time"),
    ]


def _reference_forward(model, tokens, cache):
    return model(tokens, cache=cache)


@mistake_builder
def _forward_with(*, offset_from_cache: bool = True, pass_cache: bool = True, causal: bool = True,
                  final_norm: bool = True, extra_offset: int = 0):
    def forward(model, tokens, cache):
        offset = (cache.length if offset_from_cache else 0) + extra_offset
        x = model.embed(tokens) + model.pos_embed(tokens.shape[1], offset)
        for i, block in enumerate(model.blocks):
            x = block(x, causal=causal, cache=cache[i] if pass_cache else None)
        return model.unembed(model.ln_final(x) if final_norm else x)

    return forward


def _positions_after_the_blocks(model, tokens, cache):
    offset = cache.length
    x = model.embed(tokens)
    for i, block in enumerate(model.blocks):
        x = block(x, causal=True, cache=cache[i])
    return model.unembed(model.ln_final(x + model.pos_embed(tokens.shape[1], offset)))


CACHED_FORWARD = Exercise(
    id="10.cached_forward",
    forbidden=(GPT.forward,),
    reference=_reference_forward,
    cases=_forward_cases,
    points=1,
    outputs=("the logits tensor",),
    call=lambda forward, args: _run_cached_forward(forward, *args),
    tolerance=(1e-4, 1e-5),
    checked=(
        "a small GPT fed its tokens in chunks (a prompt then single tokens, the whole context at once, one token at "
        "a time) through one cache gives the logits of the package's GPT.forward at every position"
    ),
    mistakes=(
        Mistake("positions_from_zero", "numbered the new tokens' positions from 0 instead of from cache.length",
                "The new tokens are positions cache.length, cache.length + 1, …: "
                "pass `cache.length` to `model.pos_embed` as its `offset`, read before the blocks append to the "
                "cache.",
                (_forward_with(offset_from_cache=False),)),
        Mistake("cache_not_passed", "did not pass the cache to the blocks",
                "Without it every call sees only its own tokens: hand each block its own layer's entry of the cache, "
                "as its `cache` argument.",
                (_forward_with(pass_cache=False),)),
        Mistake("not_causal", "left out causal=True",
                "Within a chunk (and the prompt) a position must not see the ones after it: `causal=True`, passed to "
                "every block, masks them, offset by the cached positions.", (_forward_with(causal=False),)),
        Mistake("no_final_norm", "left out the final LayerNorm",
                "The cached forward is the same computation as the model's own forward: apply `model.ln_final` "
                "before `model.unembed`.",
                (_forward_with(final_norm=False),)),
    ),
    mutants=(
        Mutant("offset_plus_one", "numbers the new positions from cache.length + 1", _forward_with(extra_offset=1)),
        Mutant("positions_after_the_blocks", "adds the position embeddings after the blocks",
               _positions_after_the_blocks),
    ),
)

# --- 10.generate (build) -----------------------------------------------------------------------------------------------


class _SmallGPT(GPT):
    """The small, context-sensitive GPT of ``10.cached_forward``, with a one-line repr for the verdicts."""

    def __repr__(self) -> str:
        return "GPT(d_vocab=11, n_ctx=16, d_model=16, 2 layers, random weights)"


def _generation_model() -> GPT:
    model = _cached_forward_model()
    model.__class__ = _SmallGPT  # the same modules and weights; only the repr differs
    return model


def reference_generate(model, prompt, max_new_tokens, temperature, top_p, generator):
    """The package's :func:`~tutorial_lib.sampling.generate` with its KV cache: temperature, then top-p, then a draw."""
    return reference.generate(model, prompt, max_new_tokens, temperature=temperature, top_p=top_p, generator=generator)


def _generate_cases(generator: torch.Generator) -> list[Case]:
    def seeded(seed: int) -> torch.Generator:
        return torch.Generator().manual_seed(seed)

    return [
        Case.of(model=_generation_model(), prompt=torch.randint(11, (2, 4), generator=generator), max_new_tokens=6,
                temperature=0.7, top_p=0.9, generator=seeded(1), note="two prompts of 4 tokens, T = 0.7, top-p 0.9"),
        Case.of(model=_generation_model(), prompt=torch.randint(11, (3, 3), generator=generator), max_new_tokens=5,
                temperature=1.5, top_p=0.6, generator=seeded(2), note="three prompts of 3 tokens, T = 1.5, top-p 0.6"),
    ]


@mistake_builder
def _generate_like(*, feed="new", cache=True, temperature="logits", top_p=True, position=-1, returned="all", steps=0):
    """A learner's generation loop; each keyword reproduces one way of composing it wrong."""

    def generate(model, prompt, max_new_tokens, temperature_, top_p_, generator):
        model.eval()
        kv = model.make_kv_cache(prompt.shape[0]) if cache else None
        tokens, step_input = prompt, prompt
        with torch.no_grad():
            for _ in range(max_new_tokens + steps):
                logits = model(step_input, cache=kv)[:, position]
                if temperature == "logits":
                    logits = logits / temperature_
                if top_p and temperature == "after":
                    logits = reference.top_p_filter(logits, top_p_) / temperature_
                elif top_p:
                    logits = reference.top_p_filter(logits, top_p_)
                probs = torch.softmax(logits, dim=-1)
                if temperature == "probabilities":
                    probs = probs / temperature_
                next_token = torch.multinomial(probs, 1, generator=generator)
                tokens = torch.cat([tokens, next_token], dim=1)
                step_input = next_token if feed == "new" else tokens
        return tokens if returned == "all" else tokens[:, prompt.shape[1]:]

    return generate


def _generate_greedy(model, prompt, max_new_tokens, temperature, top_p, generator):
    cache, tokens, step_input = model.make_kv_cache(prompt.shape[0]), prompt, prompt
    with torch.no_grad():
        for _ in range(max_new_tokens):
            next_token = model.eval()(step_input, cache=cache)[:, -1].argmax(-1, keepdim=True)
            tokens, step_input = torch.cat([tokens, next_token], dim=1), next_token
    return tokens


GENERATE = Exercise(
    id="10.generate",
    forbidden=(reference.generate,),
    reference=reference_generate,
    cases=_generate_cases,
    points=3,
    outputs=("the tokens",),
    axes={"the tokens": "position"},
    checked="a small GPT continuing two batches of prompts with temperature and top-p through its KV cache, drawing "
            "from the seeded generator, against the package's generate",
    mistakes=(
        Mistake("refed_the_sequence", "fed the whole sequence again at every step, into a cache that already holds it",
                "The cache already holds the keys and values of every earlier position: after the prompt, feed only "
                "the newest token (`next_token`, shape (batch, 1)).", (_generate_like(feed="all"),)),
        Mistake("no_cache", "fed only the newest token but without a KV cache, so the model forgot the context",
                "Feeding one token is only right because the cache holds the rest: create it with "
                "`model.make_kv_cache` before the first step and pass it as the `cache` argument at every step.",
                (_generate_like(cache=False),)),
        Mistake("filtered_before_temperature", "applied top-p before the temperature",
                "The temperature reshapes the distribution first, and the nucleus is taken from the reshaped one: "
                "divide by T, then filter with top-p.", (_generate_like(temperature="after"),)),
        Mistake("temperature_not_applied", "left the temperature out of the distribution (or divided the "
                                           "probabilities by it, which the draw renormalises away)",
                "Divide the *logits* by the temperature, before the softmax.",
                (_generate_like(temperature="none"), _generate_like(temperature="probabilities"))),
        Mistake("top_p_not_applied", "sampled from the whole distribution, without the top-p filter",
                "Filter the tempered logits with top-p (`top_p_filter`) before the softmax.",
                (_generate_like(top_p=False),)),
        Mistake("first_position_logits", "took the logits of the first position of each step's input instead of the last",
                "The next token is predicted at the last position: take the logits of the last position of the "
                "model's output. (From the second step on there is one position, so only the first token goes "
                "wrong.)", (_generate_like(position=0),)),
        Mistake("returned_new_tokens_only", "returned only the new tokens, without the prompt",
                "Return the whole sequence, the prompt followed by the new tokens, as `generate` does.",
                (_generate_like(returned="new"),)),
    ),
    mutants=(
        Mutant("greedy", "takes the argmax instead of sampling", _generate_greedy),
        Mutant("one_token_short", "generates max_new_tokens - 1 tokens", _generate_like(steps=-1)),
    ),
)


# --- 10.predict_nucleus_size (predict, then measure) --------------------------------------------------------------------

PREDICT_VOCAB, PREDICT_TOP_P = 1000, 0.9


def nucleus_size(d_vocab: int = PREDICT_VOCAB, top_p: float = PREDICT_TOP_P) -> tuple[int, float]:
    """How many tokens top-p keeps of a Zipf distribution (p ∝ 1/rank) over ``d_vocab`` tokens, and the probability
    of the most likely token."""
    logits = -torch.log(torch.arange(1, d_vocab + 1, dtype=torch.float64))[None]
    kept = reference.top_p_filter(logits, top_p) > float("-inf")
    return int(kept.sum()), torch.softmax(logits, dim=-1)[0, 0].item()


PREDICT_NUCLEUS_SIZE = predict_number(
    "10.predict_nucleus_size",
    measure=lambda: nucleus_size()[0],
    question=f"the number of tokens top-p = {PREDICT_TOP_P} keeps of {PREDICT_VOCAB}",
    within=1.5,
    misconceptions=[
        Misconception("fraction_of_vocabulary", PREDICT_TOP_P * PREDICT_VOCAB,
                      "took top-p to keep that fraction of the vocabulary",
                      "top-p keeps a share of the probability *mass*, not of the tokens: the most likely tokens hold "
                      "most of it, so fewer tokens are needed."),
        Misconception("a_handful", 10.0, "expected the nucleus to hold a handful of tokens, as a small top-k does",
                      "Under a long flat tail the rare tokens together hold much of the mass: reaching 90% takes "
                      "hundreds of them. That is top-p's point: its size adapts to the distribution."),
        Misconception("only_the_best", 1.0, "expected top-p to keep the single most likely token",
                      "The most likely token holds about 13% here; top-p keeps adding tokens, most likely first, until "
                      "their mass reaches 0.9."),
        Misconception("complement", (1 - PREDICT_TOP_P) * PREDICT_VOCAB,
                      "kept (1 - top_p) of the vocabulary, the share that top-p drops",
                      "top_p is the mass kept, not the mass dropped, and it is counted in probability, not in tokens."),
    ],
    mutants=[
        wrong_prediction("everything", 5000.0, "more tokens than the vocabulary has"),
        wrong_prediction("three", 3.0, "a count of the top three"),
    ],
    points=1,
)


# --- 10.predict_distinct_tokens (predict, then measure: how many different tokens 500 draws see) -----------------------

DISTINCT_DRAWS = 500


def distinct_tokens(draws: int = DISTINCT_DRAWS, d_vocab: int = PREDICT_VOCAB, seed: int = 0) -> tuple[int, int]:
    """``draws`` tokens sampled with the package's ``sample_next_token`` (temperature 1, generator seeded with ``seed``)
    from the Zipf distribution of :func:`nucleus_size` over ``d_vocab`` tokens: how many different tokens they hold,
    and how many times the most likely token was drawn."""
    logits = -torch.log(torch.arange(1, d_vocab + 1, dtype=torch.float64))[None].expand(draws, -1)
    tokens = reference.sample_next_token(logits, temperature=1.0, generator=torch.Generator().manual_seed(seed))
    return tokens.unique().numel(), int((tokens == 0).sum())


PREDICT_DISTINCT_TOKENS = predict_number(
    "10.predict_distinct_tokens",
    measure=lambda: distinct_tokens()[0],
    question=f"the number of different tokens among {DISTINCT_DRAWS} draws from the Zipf distribution",
    within=1.3,
    points=1,
    misconceptions=[
        Misconception("every_draw_new", float(DISTINCT_DRAWS), "expected every draw to be a token not drawn before",
                      "The most likely tokens are drawn again and again: the first one alone holds about an eighth of "
                      "the mass, so dozens of the draws are that one token."),
        Misconception("whole_vocabulary", float(PREDICT_VOCAB), "expected the draws to cover the whole vocabulary",
                      "There are fewer draws than tokens, and most tokens of the tail have a chance of a few in ten "
                      "thousand per draw: many are never drawn."),
        Misconception("only_the_head", 67.0,
                      "counted only the tokens expected to come up at least once, as if the tail were never drawn",
                      "Each token of the tail is unlikely, but there are hundreds of them: together they are drawn "
                      "often, and nearly every such draw is a token not seen before."),
        Misconception("a_handful", 10.0, "expected a handful of likely tokens to take every draw",
                      "Under 1/rank the mass is spread thinly: the ten most likely tokens hold well under half of it."),
    ],
    mutants=[
        wrong_prediction("two_thousand", 2000.0, "more tokens than were drawn"),
        wrong_prediction("one", 1.0, "a single token, as greedy decoding would give"),
    ],
)

# --- 10.cached_gpt (the build track: the learner's GPT of chapter 08, with a KV cache of the learner's) ----------------


class _BookCacheView:
    """The package's :class:`KVCache` seen through the build track's interface: ``keys[i]`` and ``values[i]``, layer
    i's stored positions, ``(batch, n_heads, length, d_head)``, and ``length``."""

    def __init__(self, cache: KVCache) -> None:
        self.inner = cache

    @property
    def length(self) -> int:
        return self.inner.length

    @property
    def keys(self) -> list[torch.Tensor]:
        return [layer.keys[:, :, : layer.length] for layer in self.inner.layers]

    @property
    def values(self) -> list[torch.Tensor]:
        return [layer.values[:, :, : layer.length] for layer in self.inner.layers]


class BookCachedGPT(BookGPT):
    """The reference: chapter 08's ``BookGPT`` whose cached forward runs the package's ``MultiHeadAttention`` on the
    package's :class:`KVCache` (``causal=True``, the mask offset by the cache's length)."""

    def __init__(self, d_vocab: int, n_ctx: int, d_model: int, n_heads: int, n_layers: int, d_ff: int,
                 kind: str = "gelu_tanh") -> None:
        super().__init__(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind)
        self.n_heads, self.d_head = n_heads, d_model // n_heads

    def make_kv_cache(self, batch: int) -> _BookCacheView:
        return _BookCacheView(KVCache(len(self.blocks), batch, self.n_heads, self.n_ctx, self.d_head,
                                      dtype=self.embed.weight.dtype))

    def forward(self, tokens: torch.Tensor, cache: _BookCacheView | None = None) -> torch.Tensor:
        if cache is None:
            return super().forward(tokens)
        offset, seq = cache.length, tokens.shape[1]
        if offset + seq > self.n_ctx:
            raise ValueError(f"{offset} cached and {seq} new positions: more than n_ctx={self.n_ctx}")
        x = self.embed(tokens) + self.pos_embed.weight[offset : offset + seq]
        for block, layer in zip(self.blocks, cache.inner.layers):
            x = x + block.attn(block.ln_1(x), causal=True, cache=layer)
            x = x + block.ffn(block.ln_2(x))
        return self.unembed(self.ln_final(x))


def _cached_gpt_cases(generator: torch.Generator) -> list[Case]:
    book_sizes, book_weights, book_tokens = book_char_gpt_case()
    relu = dataclasses.replace(SMALL_GPT, n_layers=3, kind="relu")

    def tokens(sizes, batch: int, seq: int) -> torch.Tensor:
        return torch.randint(sizes.d_vocab, (batch, seq), generator=generator)

    def double(weights):
        return {name: t.double() for name, t in weights.items()}

    return [
        Case.of(sizes=SMALL_GPT, weights=double(_random_gpt_weights(SMALL_GPT, generator)),
                tokens=tokens(SMALL_GPT, 2, 8), chunks=(3, 1, 1, 2, 1),
                note="a prompt of 3, single tokens and a chunk of 2, to the full context"),
        Case.of(sizes=relu, weights=double(_random_gpt_weights(relu, generator)), tokens=tokens(relu, 1, 6),
                chunks=(1,) * 6, note="a ReLU FFN, one token at a time from an empty cache"),
        Case.of(sizes=SMALL_GPT, weights=double(_random_gpt_weights(SMALL_GPT, generator)),
                tokens=tokens(SMALL_GPT, 1, 9), chunks=(6, 3), note="9 positions for n_ctx = 8: a ValueError"),
        Case.of(sizes=book_sizes, weights=double(book_weights), tokens=book_tokens[:2, :24].clone(),
                chunks=(16, 1, 1, 1, 5), note="chapter 09's trained character GPT, in float64, on validation text"),
    ]


def _layer_tensors(cache, field: str, n_layers: int) -> torch.Tensor:
    """Every layer's cached keys (or values) stacked, or WrongOutput that says what the cache should hold."""
    held = getattr(cache, field, None)
    if not isinstance(held, (list, tuple)) or len(held) != n_layers or not all(isinstance(t, torch.Tensor) for t in held):
        raise WrongOutput("wrong_type", f"the cache's `{field}` should be a list of {n_layers} tensors, one per layer, "
                                        f"each (batch, n_heads, length, d_head); got {type(held).__name__}")
    if len({tuple(t.shape) for t in held}) != 1:
        raise WrongOutput("wrong_shape", f"the cache's `{field}` should hold tensors of one shape, (batch, n_heads, "
                                         f"length, d_head); got {[tuple(t.shape) for t in held]}")
    return torch.stack([t.detach() for t in held])


def _cached_gpt_call(cls, args):
    sizes, weights, tokens, chunks = args
    what = "CachedGPT(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind)"
    weights = _tied(weights)
    model = build_module(cls, sizes.args(), what)
    same_parameters(model, weights, what)
    model.to(torch.float64).load_state_dict(weights, strict=True)
    model.eval()
    if not callable(getattr(model, "make_kv_cache", None)):
        raise WrongOutput("wrong_type", "CachedGPT needs a method make_kv_cache(batch) that returns an empty KVCache")
    cache = model.make_kv_cache(tokens.shape[0])
    logits, lengths, start = [], [], 0
    with torch.no_grad():
        for size in chunks:
            logits.append(model(tokens[:, start : start + size], cache=cache))
            start += size
            lengths.append(cache.length)
    return (torch.cat(logits, dim=1), torch.tensor(lengths), _layer_tensors(cache, "keys", sizes.n_layers),
            _layer_tensors(cache, "values", sizes.n_layers))


class _LearnersCache:
    """A learner's KV cache: a list of keys and one of values, per layer, starting empty."""

    def __init__(self, n_layers, batch, n_heads, d_head, dtype=torch.float32):
        self.keys = [torch.zeros(batch, n_heads, 0, d_head, dtype=dtype) for _ in range(n_layers)]
        self.values = [torch.zeros(batch, n_heads, 0, d_head, dtype=dtype) for _ in range(n_layers)]

    @property
    def length(self):
        return self.keys[0].shape[-2]


@mistake_builder
def _cached_gpt_like(*, positions="offset", store=True, chunk_mask=True, residual="stream", ffn=True,
                     cached_values="values"):
    """A learner's CachedGPT; each keyword reproduces one way of getting it wrong. ``positions``: "offset" or
    "from_zero"; ``store``: False never puts the new keys and values in the cache; ``chunk_mask``: False lets every
    new position see every key; ``residual``: "stream" or "normed" (the attention's output added to ln_1's output);
    ``ffn``: False skips the feed-forward sublayer; ``cached_values``: "keys" caches the keys in place of the values."""

    class CachedGPT(_gpt_module_like()):
        def __init__(self, d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind="gelu_tanh"):
            super().__init__(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind)
            self.n_heads, self.d_head = n_heads, d_model // n_heads

        def make_kv_cache(self, batch):
            return _LearnersCache(len(self.blocks), batch, self.n_heads, self.d_head, self.embed.weight.dtype)

        def forward(self, tokens, cache=None):
            if cache is None:
                return super().forward(tokens)
            batch, seq = tokens.shape
            offset = cache.length
            if offset + seq > self.n_ctx:
                raise ValueError(f"{offset + seq} positions, more than n_ctx={self.n_ctx}")
            start = offset if positions == "offset" else 0
            x = self.embed(tokens) + self.pos_embed.weight[start : start + seq]
            for i, block in enumerate(self.blocks):
                h = block.ln_1(x)
                q, k, v = (layer(h).view(batch, seq, self.n_heads, self.d_head).transpose(1, 2)
                           for layer in (block.attn.q_proj, block.attn.k_proj, block.attn.v_proj))
                keys = torch.cat([cache.keys[i], k], dim=2)
                values = torch.cat([cache.values[i], k if cached_values == "keys" else v], dim=2)
                if store:
                    cache.keys[i], cache.values[i] = keys, values
                scores = q @ keys.transpose(-2, -1) / self.d_head ** 0.5
                if chunk_mask:
                    allowed = torch.arange(keys.shape[2])[None, :] <= torch.arange(seq)[:, None] + offset
                    scores = scores.masked_fill(~allowed, float("-inf"))
                heads = torch.softmax(scores, dim=-1) @ values
                out = block.attn.out_proj(heads.transpose(1, 2).reshape(batch, seq, -1))
                x = (h if residual == "normed" else x) + out
                if ffn:
                    x = x + block.ffn(block.ln_2(x))
            return self.unembed(self.ln_final(x))

    return CachedGPT


class _RerunsTheWholeSequence(_cached_gpt_like()):
    """Keeps the tokens and runs the uncached forward on all of them at every call: right logits, no KV cache."""

    def forward(self, tokens, cache=None):
        if cache is None:
            return super().forward(tokens)
        seen = getattr(cache, "tokens", tokens[:, :0])
        cache.tokens = torch.cat([seen, tokens], dim=1)
        cache.keys = [torch.zeros(tokens.shape[0], self.n_heads, cache.tokens.shape[1], self.d_head,
                                  dtype=self.embed.weight.dtype) for _ in self.blocks]
        cache.values = [k.clone() for k in cache.keys]
        return super().forward(cache.tokens)[:, -tokens.shape[1]:]


CACHED_GPT = Exercise(
    id="10.cached_gpt",
    # the package's models and attention, and its KV cache, are not the learner's; their own earlier files are
    forbidden=(GPT, BookGPT, KVCache, LayerKVCache, MultiHeadAttention, causal_attention, scaled_dot_product_attention,
               F.scaled_dot_product_attention, nn.MultiheadAttention),
    reference=BookCachedGPT,
    call=_cached_gpt_call,
    cases=_cached_gpt_cases,
    points=3,
    outputs=("the tensor of every call's logits, along the positions", "the tensor of the cache's length after each "
             "call", "the tensor of every layer's cached keys", "the tensor of every layer's cached values"),
    tolerance=(1e-9, 1e-10),  # float64 throughout
    checked=(
        "GPTs with every weight random (GPT-2's and a ReLU FFN) fed a prompt then single tokens and a chunk, one token "
        "at a time from an empty cache, 9 positions for n_ctx = 8 (a ValueError), and chapter 09's trained character "
        "GPT, in float64: the logits of every call, the cache's length and every layer's cached keys and values "
        "equal to the book's GPT with the package's KV cache"
    ),
    mistakes=(
        Mistake("positions_from_zero", "gave the new tokens the positions 0, 1, … instead of continuing after the "
                "cached ones", "The new tokens are positions `cache.length`, `cache.length` + 1, …: read the length "
                "before the blocks append to the cache, and take those rows of the position embeddings.",
                (_cached_gpt_like(positions="from_zero"),)),
        Mistake("cache_never_grows", "never put the new keys and values in the cache",
                "Each layer's cache must end up holding the keys and values of every position so far: store what "
                "your cached attention returns for that layer, so that the next call reads it.",
                (_cached_gpt_like(store=False),)),
        Mistake("no_mask_for_the_chunk", "let every new position of a chunk see all the keys, the later new ones too",
                "A prompt or a chunk of several tokens goes through at once: its first position must not read the "
                "positions after it. Your cached attention of exercise 4 applies the offset causal mask.",
                (_cached_gpt_like(chunk_mask=False),)),
        Mistake("residual_from_the_norm", "added the attention's output to ln_1's output instead of to the stream",
                "Pre-norm: the norm is applied to the copy that goes into attention; the attention's output is added "
                "to the residual stream x itself.", (_cached_gpt_like(residual="normed"),)),
        Mistake("skipped_the_ffn", "left out the feed-forward sublayer in the cached forward",
                "Each block is attention and then the FFN, each in its pre-norm residual: the cached forward runs "
                "the same block as the uncached one, only its attention reads the cache.",
                (_cached_gpt_like(ffn=False),)),
    ),
    mutants=(
        Mutant("reruns_the_whole_sequence", "keeps the tokens and reruns the whole sequence: no keys or values cached",
               _RerunsTheWholeSequence),
        Mutant("keys_as_values", "caches each new position's key in place of its value",
               _cached_gpt_like(cached_values="keys")),
    ),
)


register(SAMPLE, TOP_K, TOP_P, KV_CACHE_ATTENTION, CACHED_FORWARD, GENERATE, PREDICT_NUCLEUS_SIZE,
         PREDICT_DISTINCT_TOKENS, CACHED_GPT)
