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


def _refuse(q, k, v, lengths, window):
    n = q.shape[1]
    if k.shape[:2] != q.shape[:2] or v.shape[:2] != q.shape[:2]:
        raise ValueError("k, v: not q's batch and seq")
    if len(lengths) != len(q) or not all(0 <= length <= n for length in lengths.tolist()):
        raise ValueError(f"lengths: one per sequence, each in 0..{n}")
    if window is not None and window <= 0:
        raise ValueError("window: 1 or more")


def _allowed(lengths, n, causal, window, *, one_sided=False):
    query, key = torch.arange(n)[:, None], torch.arange(n)[None, :]
    allowed = (key[None] < lengths[:, None, None]).expand(len(lengths), n, n)
    if causal:
        allowed = allowed & (key <= query)
    if window is not None:
        allowed = allowed & ((query - key < window) if one_sided else (key - query).abs() < window)
    return allowed


def padded_right(q, k, v, lengths, causal=True, window=None):
    _refuse(q, k, v, lengths, window)
    return _attend(q, k, v, _allowed(lengths, q.shape[1], causal, window))


def padded_with_or(q, k, v, lengths, causal=True, window=None):
    _refuse(q, k, v, lengths, window)
    n = q.shape[1]
    query, key = torch.arange(n)[:, None], torch.arange(n)[None, :]
    allowed = (key <= query)[None] | (key[None] < lengths[:, None, None]) if causal else _allowed(lengths, n, False, None)
    if window is not None:
        allowed = allowed & ((key - query).abs() < window)
    return _attend(q, k, v, allowed)


def padded_without_padding(q, k, v, lengths, causal=True, window=None):
    _refuse(q, k, v, lengths, window)
    return _attend(q, k, v, _allowed(torch.full_like(lengths, q.shape[1]), q.shape[1], causal, window))


def padded_window_one_sided(q, k, v, lengths, causal=True, window=None):
    _refuse(q, k, v, lengths, window)
    return _attend(q, k, v, _allowed(lengths, q.shape[1], causal, window, one_sided=True))


def padded_always_causal(q, k, v, lengths, causal=True, window=None):
    return padded_right(q, k, v, lengths, True, window)


def padded_with_nan(q, k, v, lengths, causal=True, window=None):
    _refuse(q, k, v, lengths, window)
    scores = torch.einsum("bqd,bkd->bqk", q, k) / math.sqrt(q.shape[-1])
    allowed = _allowed(lengths, q.shape[1], causal, window)
    weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1)
    return torch.einsum("bqk,bkd->bqd", weights, v), weights


def padded_trusting_lengths(q, k, v, lengths, causal=True, window=None):
    _refuse(q, k, v, lengths.clamp(max=q.shape[1]), window)
    return _attend(q, k, v, _allowed(lengths, q.shape[1], causal, window))


def test_the_build_exercise_passes_an_attention_written_differently():
    result = check("03.padded_causal_attention", padded_right)
    assert result.passed, result.verdict


@pytest.mark.parametrize(("learner", "mistake"), [(padded_with_or, "masks_or"), (padded_without_padding, "causal_only"),
                                                  (padded_window_one_sided, "window_behind_only"),
                                                  (padded_always_causal, "causal_flag_ignored"),
                                                  (padded_with_nan, "nan_for_fully_masked_rows"),
                                                  (padded_trusting_lengths, "length_not_refused")],
                         ids=lambda value: getattr(value, "__name__", value))
def test_a_learners_padded_attention_mistake_is_named(learner, mistake, assert_mistake_named):
    assert_mistake_named("03.padded_causal_attention", learner, mistake)


def test_a_padded_attention_on_the_packages_masks_or_torchs_kernel_scores_nothing():
    from tutorial_lib.attention import padding_mask

    def on_the_packages_mask(q, k, v, lengths, causal=True, window=None):
        _refuse(q, k, v, lengths, window)
        return _attend(q, k, v, padding_mask(lengths, q.shape[1]) & _allowed(lengths, q.shape[1], causal, window))

    def on_torchs_kernel(q, k, v, lengths, causal=True, window=None):
        _refuse(q, k, v, lengths, window)
        allowed = _allowed(lengths, q.shape[1], causal, window)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return out.nan_to_num(0.0), _attend(q, k, v, allowed)[1]

    for answer in (on_the_packages_mask, on_torchs_kernel):
        assert check("03.padded_causal_attention", answer).kind == "calls_the_work"


def test_the_padded_attention_reference_agrees_with_torchs_multihead_attention_and_the_packages_masks():
    """The reference's numbers come from F.scaled_dot_product_attention; here its output and weights are checked against
    nn.MultiheadAttention (one head, identity projections, PyTorch's True = masked convention) and its mask against the
    package's causal, padding and sliding-window masks."""
    from tutorial_lib import attention
    from tutorial_lib.checks.ch03 import padded_attention_mask, reference_padded_attention

    torch.manual_seed(0)
    n, d = 6, 8
    q, k, v = (torch.randn(3, n, d) for _ in range(3))
    lengths = torch.tensor([6, 4, 2])
    mha = torch.nn.MultiheadAttention(d, 1, bias=False, batch_first=True).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.eye(d).repeat(3, 1))
        mha.out_proj.weight.copy_(torch.eye(d))
    query, key = torch.arange(n)[:, None], torch.arange(n)[None, :]
    for causal, window, band in [(True, None, key <= query), (False, None, torch.ones(n, n, dtype=torch.bool)),
                                 (True, 3, (key <= query) & (query - key < 3)), (False, 2, (query - key).abs() < 2)]:
        out, weights = reference_padded_attention(q, k, v, lengths, causal, window)
        theirs, their_weights = mha(q, k, v, key_padding_mask=key[0] >= lengths[:, None], attn_mask=~band)
        ours = padded_attention_mask(lengths, n, causal, window)
        sees = ours.any(dim=-1)  # torch's module gives NaN to a query with no key; the reference gives zeros
        assert (~sees).any() == (window is not None)  # each window here leaves the shortest sequence's last queries none
        torch.testing.assert_close(out[sees], theirs[sees])
        torch.testing.assert_close(weights[sees], their_weights[sees])
        assert not out[~sees].any() and not weights[~sees].any() and theirs[~sees].isnan().all()
        package = attention.padding_mask(lengths, n) & (attention.causal_mask(n) if causal else attention.bidirectional_mask(n))
        if window is not None:  # the package's window is causal; both sides, as torch's mask above, otherwise
            package = package & (attention.sliding_window_mask(n, window) if causal else band)
        assert torch.equal(ours, package)


@pytest.mark.parametrize(("change", "argument"), [({"lengths": torch.tensor([4, 5])}, "lengths must lie in"),
                                                  ({"lengths": torch.tensor([1, 2, 3])}, "lengths must be an integer"),
                                                  ({"lengths": torch.tensor([1.0, 2.0])}, "lengths must be an integer"),
                                                  ({"window": 0}, "window must be"),
                                                  ({"k": torch.randn(2, 3, 8)}, "k and v must have")])
def test_the_padded_attention_reference_refuses_bad_input_naming_the_argument(change, argument):
    from tutorial_lib.checks.ch03 import reference_padded_attention

    args = {"q": torch.randn(2, 4, 8), "k": torch.randn(2, 4, 8), "v": torch.randn(2, 4, 8),
            "lengths": torch.tensor([4, 2]), "causal": True, "window": None}
    with pytest.raises(ValueError, match=argument):
        reference_padded_attention(**{**args, **change})


def test_the_variance_prediction_names_the_standard_deviation(predict):
    assert predict("03.predict_variance", lambda: 64).passed
    assert predict("03.predict_variance", lambda: 8).mistake == "standard_deviation"
    assert predict("03.predict_variance", lambda: 1).mistake == "no_growth"
