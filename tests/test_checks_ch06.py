"""Chapter 06's checks: answers written as learners write them, right and wrong (independently of the catalogue)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.checks import check, get_exercise
from tutorial_lib.normalization import LayerNorm, RMSNorm

from conftest import check_recorded  # a prediction's answer is recorded before its check, as in a notebook


def layer_norm_right(x, weight, bias, eps):
    centred = x - x.mean(dim=-1, keepdim=True)
    return centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps) * weight + bias


def layer_norm_like(**wrong):
    def layer_norm(x, weight, bias, eps):
        axis = wrong.get("axis", -1)
        mu = torch.mean(x, axis, keepdim=True)
        sigma = torch.std(x, axis, keepdim=True) if wrong.get("torch_std") else torch.sqrt(
            torch.var(x, axis, keepdim=True, correction=1 if wrong.get("unbiased") else 0) + eps)
        out = (x - mu) / (sigma + eps if wrong.get("torch_std") else sigma)
        if wrong.get("eps_outside"):
            out = (x - mu) / (torch.var(x, axis, keepdim=True, correction=0).sqrt() + eps)
        return out if wrong.get("no_affine") else weight * out + bias

    return layer_norm


def rms_right(x, weight, eps):
    return weight * x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps)


def rms_like(**wrong):
    def rms_norm(x, weight, eps):
        axis = wrong.get("axis", -1)
        if wrong.get("centre"):
            x = x - x.mean(axis, keepdim=True)
        if wrong.get("l2"):
            return weight * x / torch.sqrt(torch.sum(x * x, axis, keepdim=True) + eps)
        ms = torch.mean(x * x, axis, keepdim=True)
        y = x / (torch.sqrt(ms) + eps) if wrong.get("eps_outside") else x / torch.sqrt(ms + eps)
        return y if wrong.get("no_weight") else y * weight

    return rms_norm


def residual_right(x, norm, sublayer):
    h = norm(x)
    return sublayer(h) + x


LEARNER_MISTAKES = [
    ("06.layer_norm", layer_norm_like(unbiased=True), "unbiased_variance"),
    ("06.layer_norm", layer_norm_like(eps_outside=True), "eps_outside_root"),
    ("06.layer_norm", layer_norm_like(torch_std=True), "unbiased_std_eps_outside"),
    ("06.layer_norm", layer_norm_like(axis=0), "wrong_axis"),
    ("06.layer_norm", layer_norm_like(no_affine=True), "forgot_affine"),
    ("06.rms_norm", rms_like(centre=True), "subtracted_mean"),
    ("06.rms_norm", rms_like(eps_outside=True), "eps_outside_root"),
    ("06.rms_norm", rms_like(l2=True), "sum_instead_of_mean"),
    ("06.rms_norm", rms_like(axis=-2), "wrong_axis"),
    ("06.rms_norm", rms_like(no_weight=True), "forgot_weight"),
    ("06.pre_norm_residual", lambda x, norm, f: norm(f(x) + x), "post_norm"),
    ("06.pre_norm_residual", lambda x, norm, f: (lambda h: h + f(h))(norm(x)), "normalized_the_stream"),
    ("06.pre_norm_residual", lambda x, norm, f: f(norm(x)), "no_residual"),
    ("06.pre_norm_residual", lambda x, norm, f: norm(f(x)) + x, "norm_after_sublayer"),
    ("06.pre_norm_residual", lambda x, norm, f: f(x) + x, "no_norm"),
    ("06.pre_norm_residual", lambda x, norm, f: x + f(norm(x)).detach(), "detached_branch"),
]


@pytest.mark.parametrize(("exercise_id", "learner", "mistake"), LEARNER_MISTAKES,
                         ids=[f"{e}-{m}" for e, _, m in LEARNER_MISTAKES])
def test_a_learners_mistake_is_named(exercise_id, learner, mistake, assert_mistake_named):
    assert_mistake_named(exercise_id, learner, mistake)


def test_every_catalogued_mistake_has_a_learner_version_here():
    exercises = ("06.layer_norm", "06.rms_norm", "06.pre_norm_residual")
    catalogued = {(e, m.name) for e in exercises for m in get_exercise(e).mistakes}
    assert catalogued == {(e, m) for e, _, m in LEARNER_MISTAKES}


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("06.layer_norm", layer_norm_right), ("06.layer_norm", layer_norm_like()), ("06.rms_norm", rms_right),
    ("06.rms_norm", rms_like()), ("06.pre_norm_residual", residual_right),
])
def test_a_correct_answer_written_differently_passes(exercise_id, answer):
    assert check_recorded(exercise_id, answer).passed


def test_the_references_are_the_package_modules():
    from tutorial_lib.checks.ch06 import reference_layer_norm, reference_rms_norm

    torch.manual_seed(0)
    x = 2 * torch.randn(3, 5, 16) + 1
    layer_norm, rms_norm = LayerNorm(16), RMSNorm(16)
    with torch.no_grad():
        for p in (*layer_norm.parameters(), *rms_norm.parameters()):
            p.normal_(1.0, 0.3)
    torch.testing.assert_close(reference_layer_norm(x, layer_norm.weight, layer_norm.bias, 1e-5), layer_norm(x))
    torch.testing.assert_close(reference_rms_norm(x, rms_norm.weight, 1e-6), rms_norm(x))
    torch.testing.assert_close(rms_norm(x), F.rms_norm(x, (16,), rms_norm.weight, 1e-6))


# --- the build exercise and the prediction ------------------------------------------------------------------------------


def block_right(x, attention, feed_forward, norm_1, norm_2):
    x = x + attention(norm_1(x))
    return x + feed_forward(norm_2(x))


def block_like(wrong):
    def pre_norm_block(x, attention, feed_forward, norm_1, norm_2):
        if wrong == "post":
            x = norm_1(attention(x) + x)
            return norm_2(feed_forward(x) + x)
        if wrong == "same norm":
            x = x + attention(norm_1(x))
            return x + feed_forward(norm_1(x))
        if wrong == "parallel":
            return x + attention(norm_1(x)) + feed_forward(norm_2(x))
        a = norm_1(x)
        a = a + attention(a)
        b = norm_2(a)
        return b + feed_forward(b)

    return pre_norm_block


@pytest.mark.parametrize(("learner", "mistake"), [
    (block_like("post"), "post_norm_block"), (block_like("same norm"), "one_norm_for_both"),
    (block_like("parallel"), "parallel_branches"), (block_like("stream"), "normalized_the_stream"),
])
def test_a_learners_block_mistake_is_named(learner, mistake, assert_mistake_named):
    assert_mistake_named("06.pre_norm_block", learner, mistake)


def test_a_correct_block_passes_and_the_reference_is_the_packages_pre_norm_block():
    from tutorial_lib.blocks import TransformerBlock
    from tutorial_lib.checks.ch06 import reference_pre_norm_block

    assert check("06.pre_norm_block", block_right).passed
    torch.manual_seed(0)
    block = TransformerBlock(16, 4, 32, placement="pre").eval()
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(2, 7, 16)
    composed = reference_pre_norm_block(x, block.attn, block.ffn, block.attn_residual.norm, block.ffn_residual.norm)
    torch.testing.assert_close(composed, block(x))


def test_the_normalized_length_is_the_root_of_d_model(predict):
    from tutorial_lib.checks.ch06 import normalized_length

    before, after = normalized_length()
    assert abs(after - 16.0) < 1e-3 and before > 60
    assert predict("06.predict_normalized_length", lambda: 16).passed
    assert predict("06.predict_normalized_length", lambda: 256).mistake == "length_d_model"


def test_the_deep_pre_norm_stream_grows_like_a_sum_of_unrelated_additions(predict):
    from tutorial_lib.checks.ch06 import pre_norm_stream_lengths

    lengths = pre_norm_stream_lengths()
    assert 39 < lengths[23] < 45 and 75 < lengths[-1] < 88  # the chapter's 42 at block 24; about twice that at 96
    assert predict("06.predict_deep_stream", lambda: 84).passed  # the solution's reasoning
    assert predict("06.predict_deep_stream", lambda: 168).mistake == "grows_with_depth"
    assert predict("06.predict_deep_stream", lambda: 42).mistake == "stops_growing"
    assert predict("06.predict_deep_stream", lambda: 8).mistake == "normalized_stream"
    assert predict("06.predict_deep_stream", lambda: 42 * (42 / 6.1) ** (72 / 23)).mistake == "compounds_per_block"


# --- the build track's block (06.block): a learner's modules, right and wrong ---------------------------------------------


class MyLayerNorm(torch.nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d_model))
        self.bias = torch.nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        return layer_norm_right(x, self.weight, self.bias, 1e-5)


class MyAttention(torch.nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj, self.k_proj = torch.nn.Linear(d_model, d_model), torch.nn.Linear(d_model, d_model)
        self.v_proj, self.out_proj = torch.nn.Linear(d_model, d_model), torch.nn.Linear(d_model, d_model)

    def forward(self, x, context=None, mask=None):
        b, s, d = x.shape
        heads = [t.view(b, s, self.n_heads, -1).transpose(1, 2) for t in (self.q_proj(x), self.k_proj(x), self.v_proj(x))]
        scores = heads[0] @ heads[1].transpose(-1, -2) / (d // self.n_heads) ** 0.5
        if mask is not None:
            scores = scores.masked_fill(~(mask[:, None] if mask.dim() == 3 else mask), float("-inf"))
        out = (scores.softmax(-1).nan_to_num(0.0) @ heads[2]).transpose(1, 2).reshape(b, s, d)
        return self.out_proj(out)


class MyFeedForward(torch.nn.Module):
    def __init__(self, d_model, d_ff, kind):
        super().__init__()
        self.kind = kind
        self.up, self.down = torch.nn.Linear(d_model, d_ff), torch.nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = self.up(x)
        if self.kind == "relu":
            return self.down(h.clamp(min=0))
        return self.down(0.5 * h * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (h + 0.044715 * h**3))))


class MyBlock(torch.nn.Module):
    wrong = None

    def __init__(self, d_model, n_heads, d_ff, kind="gelu_tanh", placement="pre"):
        super().__init__()
        if placement not in ("pre", "post") and self.wrong != "no refusal":
            raise ValueError(f"placement: 'pre' or 'post', not {placement!r}")
        self.placement = placement
        self.ln_1, self.attn = MyLayerNorm(d_model), MyAttention(d_model, n_heads)
        self.ln_2, self.ffn = MyLayerNorm(d_model), MyFeedForward(d_model, d_ff, kind)

    def forward(self, x, mask=None):
        wrong = self.wrong
        if self.placement == "post" and wrong not in ("always pre", "post"):
            if wrong == "post on the branch":
                h = x + self.ln_1(self.attn(x, mask=mask))
                return h + self.ln_2(self.ffn(h))
            if wrong == "no mask":
                mask = None
            norm_1, norm_2 = self.ln_1, self.ln_1 if wrong == "one norm" else self.ln_2
            if wrong == "no affine":
                def norm_1(t):
                    centred = t - t.mean(-1, keepdim=True)
                    return centred / (centred.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt()
                norm_2 = norm_1
            h = norm_1(x + self.attn(x, mask=mask))
            return norm_2(self.ffn(h)) if wrong == "no residual" else norm_2(h + self.ffn(h))
        if wrong == "post":
            h = self.ln_1(x + self.attn(x, mask=mask))
            return self.ln_2(h + self.ffn(h))
        if wrong == "stream":
            h = self.ln_1(x)
            h = h + self.attn(h, mask=mask)
            h = self.ln_2(h)
            return h + self.ffn(h)
        norm_2 = self.ln_1 if wrong == "one norm" else self.ln_2
        if wrong == "no affine":  # normalized, never scaled by weight nor shifted by bias
            def plain(t):
                centred = t - t.mean(-1, keepdim=True)
                return centred / (centred.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt()

            h = x + self.attn(plain(x), mask=mask)
            return h + self.ffn(plain(h))
        h = x + self.attn(self.ln_1(x), mask=None if wrong == "no mask" else mask)
        return self.ffn(norm_2(h)) if wrong == "no residual" else h + self.ffn(norm_2(h))


def my_block(wrong):
    return type(f"Block_{wrong}", (MyBlock,), {"wrong": wrong})


BLOCK_MISTAKES = [("post", "post_norm_block"), ("one norm", "one_norm_for_both"), ("stream", "normalized_the_stream"),
                  ("no residual", "dropped_a_residual"), ("no mask", "mask_not_passed"),
                  ("no affine", "norms_without_gamma_and_beta"), ("always pre", "placement_ignored"),
                  ("post on the branch", "post_norm_on_the_branch"), ("no refusal", "placement_not_refused")]


@pytest.mark.parametrize(("wrong", "mistake"), BLOCK_MISTAKES, ids=[m for _, m in BLOCK_MISTAKES])
def test_a_learners_block_module_mistake_is_named(wrong, mistake, assert_mistake_named):
    assert_mistake_named("06.block", my_block(wrong), mistake)


def test_every_block_module_mistake_has_a_learner_version_and_the_right_one_passes():
    assert {m.name for m in get_exercise("06.block").mistakes} == {m for _, m in BLOCK_MISTAKES}
    assert check("06.block", MyBlock).passed


def test_a_block_built_on_the_packages_modules_scores_nothing():
    from tutorial_lib.normalization import LayerNorm

    class OnPackageNorms(MyBlock):
        def __init__(self, d_model, n_heads, d_ff, kind, placement="pre"):
            super().__init__(d_model, n_heads, d_ff, kind, placement)
            self.ln_1, self.ln_2 = LayerNorm(d_model), LayerNorm(d_model)

    assert check("06.block", OnPackageNorms).kind == "calls_the_work"


def test_the_block_reference_is_the_packages_pre_norm_gpt_block():
    from tutorial_lib.blocks import TransformerBlock
    from tutorial_lib.checks.ch06 import BookBlock

    torch.manual_seed(0)
    block = TransformerBlock(16, 4, 32, placement="pre", activation="gelu_tanh").eval()
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.3 * torch.randn_like(p))
    renamed = {name.replace("attn_residual.norm", "ln_1").replace("ffn_residual.norm", "ln_2"): t
               for name, t in block.state_dict().items()}
    book = BookBlock(16, 4, 32).eval()
    book.load_state_dict(renamed)
    x = torch.randn(2, 7, 16)
    torch.testing.assert_close(book(x, mask=torch.ones(7, 7, dtype=torch.bool).tril()), block(x, causal=True))


def test_the_post_norm_block_reference_is_torchs_post_norm_encoder_layer():
    """placement="post": torch's own nn.TransformerEncoderLayer (norm_first=False), its weights copied across."""
    from tutorial_lib.checks.ch06 import BookBlock

    torch.manual_seed(0)
    book = BookBlock(16, 4, 32, kind="relu", placement="post").eval()
    with torch.no_grad():
        for p in book.parameters():
            p.add_(0.3 * torch.randn_like(p))
    torch_layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation="relu", batch_first=True,
                                                   norm_first=False).eval()
    ours = dict(book.named_parameters())
    with torch.no_grad():
        torch_layer.self_attn.in_proj_weight.copy_(torch.cat([ours[f"attn.{n}_proj.weight"] for n in "qkv"]))
        torch_layer.self_attn.in_proj_bias.copy_(torch.cat([ours[f"attn.{n}_proj.bias"] for n in "qkv"]))
        for mine, theirs in (("attn.out_proj", torch_layer.self_attn.out_proj), ("ln_1", torch_layer.norm1),
                             ("ln_2", torch_layer.norm2)):
            theirs.weight.copy_(ours[f"{mine}.weight"]), theirs.bias.copy_(ours[f"{mine}.bias"])
        linears = [m for m in book.ffn.modules() if isinstance(m, torch.nn.Linear)]
        for mine, theirs in zip(linears, (torch_layer.linear1, torch_layer.linear2)):
            theirs.weight.copy_(mine.weight), theirs.bias.copy_(mine.bias)
    x = torch.randn(2, 7, 16)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    torch.testing.assert_close(book(x, mask=causal), torch_layer(x, src_mask=~causal), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="placement must be 'pre'"):
        BookBlock(16, 4, 32, placement="sandwich")
