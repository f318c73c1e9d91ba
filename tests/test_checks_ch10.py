"""Chapter 10's build exercise (generation with top-p through a KV cache) and prediction (the nucleus's size)."""

from __future__ import annotations

import math

import torch

from tutorial_lib.checks import check
from tutorial_lib.sampling import top_p_filter


def generate_without_cache(model, prompt, max_new_tokens, temperature, top_p, generator):
    tokens = prompt
    with torch.no_grad():
        for _ in range(max_new_tokens):  # re-reads the whole sequence: slower, the same tokens
            logits = model.eval()(tokens)[:, -1] / temperature
            probs = torch.softmax(top_p_filter(logits, top_p), dim=-1)
            tokens = torch.cat([tokens, torch.multinomial(probs, 1, generator=generator)], dim=1)
    return tokens


def generate_top_p_before_temperature(model, prompt, max_new_tokens, temperature, top_p, generator):
    cache, tokens, step = model.make_kv_cache(prompt.shape[0]), prompt, prompt
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = top_p_filter(model.eval()(step, cache=cache)[:, -1], top_p)
            step = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator)
            tokens = torch.cat([tokens, step], dim=1)
    return tokens


def test_generation_without_a_cache_passes_and_filtering_first_is_named(assert_mistake_named):
    assert check("10.generate", generate_without_cache).passed
    assert_mistake_named("10.generate", generate_top_p_before_temperature, "filtered_before_temperature")


def test_the_nucleus_of_a_zipf_distribution(predict):
    from tutorial_lib.checks.ch10 import nucleus_size

    kept, most_likely = nucleus_size()
    weights = [1 / r for r in range(1, 1001)]
    total, running, n = sum(weights), 0.0, 0
    while running < 0.9 * total:  # the rule of top-p: add tokens, most likely first, until the mass reaches 0.9
        running += weights[n]
        n += 1
    assert kept == n and math.isclose(most_likely, 1 / total, rel_tol=1e-9)
    assert predict("10.predict_nucleus_size", lambda: 900).mistake == "fraction_of_vocabulary"


def test_draws_from_a_zipf_distribution_repeat_the_head_and_meet_the_tail(predict):
    from tutorial_lib.checks.ch10 import distinct_tokens

    distinct, most_likely_count = distinct_tokens()
    weights = [1 / r for r in range(1, 1001)]
    expected = sum(1 - (1 - w / sum(weights)) ** 500 for w in weights)  # about 211 different tokens on average
    assert abs(distinct - expected) < 25 and 40 < most_likely_count < 95
    assert predict("10.predict_distinct_tokens", lambda: 250).passed  # the solution's estimate
    assert predict("10.predict_distinct_tokens", lambda: 500).mistake == "every_draw_new"
    assert predict("10.predict_distinct_tokens", lambda: 1000).mistake == "whole_vocabulary"
    assert predict("10.predict_distinct_tokens", lambda: 67).mistake == "only_the_head"
    assert predict("10.predict_distinct_tokens", lambda: 10).mistake == "a_handful"


def test_a_cached_gpt_made_of_the_packages_model_or_cache_is_refused():
    from tutorial_lib.checks.ch10 import BookCachedGPT, _cached_gpt_like
    from tutorial_lib.kv_cache import KVCache

    class PackagesCache(_cached_gpt_like()):  # the learner's model, the package's cache
        def make_kv_cache(self, batch):
            return KVCache(len(self.blocks), batch, self.n_heads, self.n_ctx, self.d_head)

    assert check("10.cached_gpt", PackagesCache).kind == "calls_the_work"
    assert check("10.cached_gpt", BookCachedGPT).points == 0


def test_a_cached_gpt_whose_cache_is_not_a_list_per_layer_is_told_what_it_should_hold():
    from tutorial_lib.checks.ch10 import _cached_gpt_like

    class OneTensorCache:  # keys and values as one tensor each, not a list with one per layer
        def __init__(self):
            self.keys, self.values, self.length = torch.zeros(0), torch.zeros(0), 0

    class CachedGPT(_cached_gpt_like()):
        def make_kv_cache(self, batch):
            return OneTensorCache()

        def forward(self, tokens, cache=None):
            if cache is not None:
                cache.length += tokens.shape[1]
            return super().forward(tokens)

    result = check("10.cached_gpt", CachedGPT)
    assert result.points == 0 and "the cache's `keys` should be a list of 2 tensors, one per layer" in result.verdict
