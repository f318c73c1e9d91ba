"""Chapter 04's checks: answers written as learners write them, right and wrong (independently of the catalogue)."""

from __future__ import annotations

import math

import einops
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tutorial_lib.checks import check, get_exercise
from tutorial_lib.multi_head import MultiHeadAttention

from conftest import check_recorded  # a prediction's answer is recorded before its check, as in a notebook


def split_right(x, n_heads):
    return einops.rearrange(x, "b s (h d) -> b h s d", h=n_heads)


def merge_right(z):
    return torch.cat(z.unbind(dim=1), dim=-1)


class MhaRight(nn.Module):
    """Multi-head attention one head at a time, slicing each head's rows of the projections."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q, k, v = self.q_proj(x), self.k_proj(context), self.v_proj(context)
        d_head = x.shape[-1] // self.n_heads
        outputs = []
        for h in range(self.n_heads):
            cols = slice(h * d_head, (h + 1) * d_head)
            scores = q[..., cols] @ k[..., cols].transpose(-2, -1) / math.sqrt(d_head)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            outputs.append(torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v[..., cols])
        return self.out_proj(torch.cat(outputs, dim=-1))


def split_reshape(x, n_heads):
    return x.reshape(x.shape[0], n_heads, x.shape[1], -1)


def split_strided(x, n_heads):
    return einops.rearrange(x, "b s (d h) -> b h s d", h=n_heads)


def split_no_transpose(x, n_heads):
    return x.unflatten(-1, (n_heads, -1))


def split_wrong_transpose(x, n_heads):
    return x.unflatten(-1, (n_heads, -1)).transpose(1, 3)


def split_positions(x, n_heads):
    return torch.stack(list(x.tensor_split(n_heads, dim=1)), dim=1)


def merge_reshape(z):
    return z.reshape(z.shape[0], z.shape[2], -1)


def merge_strided(z):
    return einops.rearrange(z, "b h s d -> b s (d h)")


def merge_view(z):
    b, h, s, d = z.shape
    return z.permute(0, 2, 1, 3).view(b, s, h * d)


def merge_sum(z):
    return z.sum(1)


def merge_mean(z):
    return torch.mean(z, dim=1)


def mha_like(**kwargs):
    class Learner(nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            self.n_heads = n_heads
            self.q_proj, self.k_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
            self.v_proj, self.out_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

        def forward(self, x, context=None, mask=None):
            n_heads, d_head = self.n_heads, x.shape[-1] // self.n_heads
            split = kwargs.get("split", split_right)
            merge = kwargs.get("merge", merge_right)
            keys = x if kwargs.get("keys_from_x") or context is None else context
            if kwargs.get("no_bias"):
                q, k, v = (t @ layer.weight.T for layer, t in ((self.q_proj, x), (self.k_proj, keys), (self.v_proj, keys)))
            else:
                q, k, v = self.q_proj(x), self.k_proj(keys), self.v_proj(keys)
            q, k, v = split(q, n_heads), split(k, n_heads), split(v, n_heads)
            scale = math.sqrt(x.shape[-1]) if kwargs.get("sqrt_d_model") else math.sqrt(d_head)
            scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / scale
            if mask is not None:
                m = mask if kwargs.get("no_head_axis") or mask.dim() < 3 else mask[:, None]
                scores = scores.masked_fill(m.logical_not(), -math.inf)
            out = merge(torch.softmax(scores, -1).nan_to_num(0.0) @ v)
            if kwargs.get("no_w_o"):
                return out
            return out @ self.out_proj.weight.T if kwargs.get("no_bias") else self.out_proj(out)

    return Learner


LEARNER_MISTAKES = [
    ("04.split_heads", split_reshape, "reshape_without_transpose"),
    ("04.split_heads", split_strided, "heads_interleaved"),
    ("04.split_heads", split_no_transpose, "missing_transpose"),
    ("04.split_heads", split_wrong_transpose, "transposed_wrong_axes"),
    ("04.split_heads", split_positions, "split_positions"),
    ("04.merge_heads", merge_reshape, "reshape_without_transpose"),
    ("04.merge_heads", merge_strided, "heads_interleaved"),
    ("04.merge_heads", merge_view, "view_after_transpose"),
    ("04.merge_heads", merge_sum, "summed_heads"),
    ("04.merge_heads", merge_mean, "averaged_heads"),
    ("04.multi_head_attention", mha_like(sqrt_d_model=True), "scaled_by_sqrt_d_model"),
    ("04.multi_head_attention", mha_like(no_w_o=True), "forgot_w_o"),
    ("04.multi_head_attention", mha_like(no_head_axis=True), "mask_not_broadcast_over_heads"),
    ("04.multi_head_attention", mha_like(split=split_reshape, merge=merge_reshape), "reshape_without_transpose"),
    ("04.multi_head_attention", mha_like(merge=merge_strided), "heads_merged_in_the_wrong_order"),
    ("04.multi_head_attention", mha_like(keys_from_x=True), "keys_from_the_queries"),
    ("04.multi_head_attention", mha_like(no_bias=True), "biases_left_out"),
]


@pytest.mark.parametrize(("exercise_id", "learner", "mistake"), LEARNER_MISTAKES,
                         ids=[f"{e}-{m}" for e, _, m in LEARNER_MISTAKES])
def test_a_learners_mistake_is_named(exercise_id, learner, mistake, assert_mistake_named):
    assert_mistake_named(exercise_id, learner, mistake)


def test_every_catalogued_mistake_has_a_learner_version_here():
    exercises = ("04.split_heads", "04.merge_heads", "04.multi_head_attention")
    catalogued = {(e, m.name) for e in exercises for m in get_exercise(e).mistakes}
    assert catalogued == {(e, m) for e, _, m in LEARNER_MISTAKES}


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("04.split_heads", split_right), ("04.merge_heads", merge_right), ("04.multi_head_attention", MhaRight),
    ("04.multi_head_attention", mha_like()),
])
def test_a_correct_answer_written_differently_passes(exercise_id, answer):
    assert check_recorded(exercise_id, answer).passed


def test_the_module_must_carry_the_books_names_and_be_the_learners_own():
    class NamedOtherwise(MhaRight):
        def __init__(self, d_model, n_heads):
            super().__init__(d_model, n_heads)
            self.w_o = self.out_proj
            del self.out_proj

        def forward(self, x, context=None, mask=None):
            self.out_proj = self.w_o
            return super().forward(x, context, mask)

    named = check("04.multi_head_attention", NamedOtherwise)
    assert named.kind == "wrong_type" and "it lacks out_proj.bias, out_proj.weight" in named.verdict
    assert "it has w_o.bias, w_o.weight" in named.verdict

    class NotAModule:
        def __init__(self, d_model, n_heads):
            pass

    assert "not an nn.Module" in check("04.multi_head_attention", NotAModule).verdict

    class Wrapped(nn.Module):  # the package's module inside the learner's: its work is not the learner's
        def __init__(self, d_model, n_heads):
            super().__init__()
            self.inner = MultiHeadAttention(d_model, n_heads)

        def forward(self, x, context=None, mask=None):
            return self.inner(x, context, mask=mask)

    assert check("04.multi_head_attention", Wrapped).kind in ("calls_the_work", "wrong_type")

    class Fused(MhaRight):  # torch's fused attention does the heads' work
        def forward(self, x, context=None, mask=None):
            context = x if context is None else context
            q, k, v = (split_right(t, self.n_heads) for t in (self.q_proj(x), self.k_proj(context), self.v_proj(context)))
            if mask is not None and mask.dim() == 3:
                mask = mask[:, None]
            return self.out_proj(merge_right(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)))

    assert check("04.multi_head_attention", Fused).kind == "calls_the_work"


def test_the_functional_reference_is_the_package_module_with_its_weights():
    from tutorial_lib.checks.ch04 import reference_multi_head

    torch.manual_seed(0)
    module = MultiHeadAttention(16, 4, bias=False)
    x, context = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    mask = torch.rand(2, 5, 7) > 0.3
    weights = [module.q_proj.weight.T, module.k_proj.weight.T, module.v_proj.weight.T, module.out_proj.weight.T]
    expected = module(x, context, mask=mask)
    torch.testing.assert_close(reference_multi_head(x, context, *weights, 4, mask), expected, atol=1e-6, rtol=0)


# --- the prediction (04.predict_parameters) ----------------------------------------------------------------------------


def test_the_parameter_prediction_names_full_size_heads(predict):
    assert predict("04.predict_parameters", lambda: 4 * 512 * 512).passed  # biases forgotten: still within 1.25
    assert predict("04.predict_parameters", lambda: 8 * 4 * 512 * 512).mistake == "every_head_full_size"


# --- the measured prediction (04.predict_flop_ratio) ------------------------------------------------------------------


def test_the_flop_counter_counts_the_projections_and_the_attention_products():
    from tutorial_lib.checks.ch04 import attention_flops

    projections = 4 * 2 * 128 * 512 * 512  # four d_model × d_model projections of 128 positions, 2 FLOPs a multiply-add
    attention_products = 2 * 2 * 128 * 128 * 512  # Q Kᵀ and weights · V, summed over the heads
    assert attention_flops(8) == attention_flops(1) == projections + attention_products


def test_the_flop_ratio_prediction_names_each_wrong_picture(predict):
    assert predict("04.predict_flop_ratio", lambda: 1.0).passed
    assert predict("04.predict_flop_ratio", lambda: 8).mistake == "every_head_full_size"
    assert predict("04.predict_flop_ratio", lambda: 1 / 8).mistake == "heads_divide_the_work"
    assert predict("04.predict_flop_ratio", lambda: 1.8).mistake == "full_width_attention_per_head"
    assert predict("04.predict_flop_ratio", lambda: 64).mistake == "pairs_of_heads"
