"""Checks beyond values: gradients for trained components, and two catalogued mistakes made at once named together."""

from __future__ import annotations

import math

import pytest
import torch

from tutorial_lib.checks import check, get_exercise


pytestmark = pytest.mark.filterwarnings("ignore")  # `k.T` on a 3-D tensor warns; the verdict is what is tested


# --- two mistakes at once --------------------------------------------------------------------------------------------------


def learner_attention(q, k, v, mask=None, *, scale=None, dim=-1, k_t=False, invert=False, swap=False, in_place=False):
    """Attention as a learner writes it from scratch: -inf for masked scores and *no* guard for rows that see no key."""
    if in_place:
        q /= math.sqrt(q.shape[-1])
    scores = q @ (k.T if k_t else k.transpose(-2, -1))
    if not in_place:
        scores = scores / (math.sqrt(q.shape[-1]) if scale is None else scale(q, v))
    if mask is not None:
        scores = scores.masked_fill(mask if invert else ~mask, float("-inf"))
    weights = torch.softmax(scores, dim=dim)
    return (weights, weights @ v) if swap else (weights @ v, weights)


CLASSIC = {  # eight classic mistakes, each written without the guard (so each is two mistakes)
    "no_scale": dict(scale=lambda q, v: 1.0),
    "divided_by_d_k": dict(scale=lambda q, v: q.shape[-1]),
    "scaled_by_d_value": dict(scale=lambda q, v: math.sqrt(v.shape[-1])),
    "wrong_k_axes": dict(k_t=True),
    "softmax_over_queries": dict(dim=-2),
    "inverted_mask": dict(invert=True),
    "scaled_q_in_place": dict(in_place=True),
    "swapped_outputs": dict(swap=True),
}


def test_the_issues_example_names_both_mistakes():
    result = check("03.attention", lambda q, k, v, mask=None: learner_attention(q, k, v, mask, scale=lambda q, v: 1.0))
    assert result.points == 0 and result.mistake is None
    assert result.candidates == ("no_scale", "nan_for_fully_masked_rows") and result.made_together
    assert ("It looks like you made two mistakes: you forgot to divide the scores by √d_k, and you left the softmax "
            "of all -inf rows as NaN.") in result.verdict
    assert result.summary == ("wrong values: two mistakes: forgot to divide the scores by √d_k, and left the softmax "
                              "of all -inf rows as NaN")


def test_each_mistake_alone_is_still_named_alone():
    guarded = check("03.attention", lambda q, k, v, mask=None: tuple(
        t.nan_to_num(0.0) for t in learner_attention(q, k, v, mask, scale=lambda q, v: 1.0)))
    assert guarded.candidates == ("no_scale",) and not guarded.made_together
    unguarded = check("03.attention", learner_attention)
    assert unguarded.candidates == ("nan_for_fully_masked_rows",)


def test_the_eight_classic_mistakes_written_without_the_guard_are_named_with_it():
    for name, options in CLASSIC.items():
        result = check("03.attention", lambda q, k, v, mask=None, o=options: learner_attention(q, k, v, mask, **o))
        # Each is its mistake and the missing guard, generated together from the catalogue's builder and named so.
        assert set(result.candidates) == {name, "nan_for_fully_masked_rows"} and result.made_together, (name, result.verdict)


def test_a_pair_needs_every_case_explained():
    def three_things_wrong(q, k, v, mask=None):
        out, weights = learner_attention(q, k, v, mask, scale=lambda q, v: 1.0)
        return out * 1.5, weights  # a third, uncatalogued change
    assert check("03.attention", three_things_wrong).candidates == ()


# --- gradients ---------------------------------------------------------------------------------------------------------------


def test_a_detached_residual_branch_loses_its_point_and_is_named():
    for detached in (lambda x, norm, sublayer: x + sublayer(norm(x)).detach(),
                     lambda x, norm, sublayer: x + sublayer(norm(x)).data):
        result = check("06.pre_norm_residual", detached)
        assert result.kind == "wrong_gradients" and result.points == 0
        assert result.mistake == "detached_branch", result.verdict
        assert "the output is right, but the gradient with respect to x differs" in result.verdict
    assert check("06.pre_norm_residual", lambda x, norm, sublayer: x + sublayer(norm(x))).passed


def test_gradients_are_compared_for_parameters_too():
    def norm_detached(x, norm, sublayer):  # x's gradient through the branch is lost, and so is the norm's
        return x + sublayer(norm(x.detach()))

    result = check("06.pre_norm_residual", norm_detached)
    assert result.kind == "wrong_gradients" and result.candidates == ()
    assert "wrong gradients" in result.summary and "gradient with respect to x" in result.summary


TRAINED = ["02.scaled_embedding", "02.embed_inputs", "03.attention", "03.padded_causal_attention",
           "04.multi_head_attention", "05.feed_forward", "05.gelu_tanh", "05.swiglu", "05.ffn", "06.layer_norm",
           "06.rms_norm", "06.pre_norm_residual", "06.pre_norm_block", "06.block", "07.encoder_layer", "07.decoder_layer",
           "07.label_smoothed_loss", "08.gpt_module",
           "10.kv_cache_attention", "12.apply_rope", "12.llama_block", "12.repeat_kv", "13.banded_attention",
           "13.causal_linear_attention", "14.mlm_loss"]


@pytest.mark.parametrize("exercise_id", TRAINED)
@pytest.mark.usefixtures("untraced")
def test_trained_components_compare_gradients_and_their_reference_passes(exercise_id):
    exercise = get_exercise(exercise_id)
    assert exercise.gradients
    assert check(exercise_id, lambda *args, **options: exercise.reference(*args, **options)).passed


@pytest.mark.parametrize("exercise_id", TRAINED)
@pytest.mark.usefixtures("untraced")
def test_an_output_computed_without_grad_loses_its_points(exercise_id):
    reference = get_exercise(exercise_id).reference

    def under_no_grad(*args, **options):  # options: a module exercise's keyword arguments (05.ffn's bias, dropout)
        with torch.no_grad():
            out = reference(*args, **options)
        if isinstance(out, torch.nn.Module):  # a module exercise builds the answer, then calls it: that call too
            forward = out.forward

            def forward_without_grad(*inputs, **options):
                with torch.no_grad():
                    return forward(*inputs, **options)

            out.forward = forward_without_grad
        return out

    result = check(exercise_id, under_no_grad)
    assert result.kind == "wrong_gradients" and result.points == 0, result.verdict
