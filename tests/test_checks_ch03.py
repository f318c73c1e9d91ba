"""Chapter 03's build and predict exercises: answers written as learners write them, right and wrong.

``tests/test_check_catalogue.py`` checks every catalogued variant and mutant of every chapter; this file checks that
answers spelt independently of ``tutorial_lib/checks/ch03.py`` are judged by what they do.
"""

from __future__ import annotations

import math

import pytest
import torch

from tutorial_lib.checks import check


def _attend(q, k, v, allowed):
    scores = torch.einsum("bqd,bkd->bqk", q, k) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1)
    weights = torch.where(torch.isnan(weights), torch.zeros_like(weights), weights)
    return torch.einsum("bqk,bkd->bqd", weights, v), weights


def padded_causal_right(q, k, v, lengths):
    n = k.shape[1]
    query, key = torch.arange(n)[:, None], torch.arange(n)[None, :]
    allowed = (key <= query)[None] & (key[None] < lengths[:, None, None])
    return _attend(q, k, v, allowed)


def padded_causal_with_or(q, k, v, lengths):
    n = k.shape[1]
    query, key = torch.arange(n)[:, None], torch.arange(n)[None, :]
    allowed = (key <= query)[None] | (key[None] < lengths[:, None, None])
    return _attend(q, k, v, allowed)


def padded_causal_without_padding(q, k, v, lengths):
    n = k.shape[1]
    allowed = torch.ones(n, n, dtype=torch.bool).tril().expand(len(lengths), n, n)
    return _attend(q, k, v, allowed)


def test_the_build_exercise_passes_an_attention_written_differently():
    result = check("03.padded_causal_attention", padded_causal_right)
    assert result.passed, result.verdict


@pytest.mark.parametrize(("learner", "mistake"), [(padded_causal_with_or, "masks_or"),
                                                  (padded_causal_without_padding, "causal_only")])
def test_a_learners_mask_composition_mistake_is_named(learner, mistake, assert_mistake_named):
    assert_mistake_named("03.padded_causal_attention", learner, mistake)


def test_the_variance_prediction_names_the_standard_deviation(predict):
    assert predict("03.predict_variance", lambda: 64).passed
    assert predict("03.predict_variance", lambda: 8).mistake == "standard_deviation"
    assert predict("03.predict_variance", lambda: 1).mistake == "no_growth"
