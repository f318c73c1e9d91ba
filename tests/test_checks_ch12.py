"""Chapter 12's checks: answers written as learners write them, right and wrong (independently of the catalogue)."""

from __future__ import annotations

import inspect
import math
import sys

import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.checks import check, get_exercise
from tutorial_lib.models.llama import LlamaBlock, LlamaConfig
from tutorial_lib.rope import apply_rope, rope_tables

from conftest import check_recorded  # a prediction's answer is recorded before its check, as in a notebook

# --- rope tables -----------------------------------------------------------------------------------------------------


def tables_right(n_ctx, d_head, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.int64).float() / d_head))  # Hugging Face's form
    freqs = torch.outer(torch.arange(n_ctx).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def tables_like(**wrong):
    def tables(n_ctx, d_head, base=10000.0):
        dims = torch.arange(d_head // 2).double() if wrong.get("i_over_d") else torch.arange(0, d_head, 2).double()
        inv_freq = base ** (dims / d_head) if wrong.get("positive") else 1.0 / base ** (dims / d_head)
        positions = torch.arange(1, n_ctx + 1).double() if wrong.get("from_one") else torch.arange(n_ctx).double()
        freqs = positions[:, None] * inv_freq[None, :]
        if wrong.get("interleaved"):
            emb = torch.stack([freqs, freqs], dim=-1).reshape(n_ctx, d_head)
        elif wrong.get("once"):
            emb = freqs
        else:
            emb = torch.cat([freqs, freqs], dim=1)
        cos, sin = torch.cos(emb).float(), torch.sin(emb).float()
        return (sin, cos) if wrong.get("swap") else (cos, sin)

    return tables


# --- apply_rope ----------------------------------------------------------------------------------------------------------


def apply_right(x, cos, sin, offset=0):
    seq, half = x.shape[-2], x.shape[-1] // 2
    c, s = cos[offset : offset + seq], sin[offset : offset + seq]
    x1, x2 = x[..., :half], x[..., half:]
    # the 2-D rotation of each pair (x1_i, x2_i), written out: both halves of c and s hold the same angles
    return torch.cat([x1 * c[:, :half] - x2 * s[:, :half], x2 * c[:, half:] + x1 * s[:, half:]], dim=-1)


def apply_like(**wrong):
    def apply(x, cos, sin, offset=0):
        seq, half = x.shape[-2], x.shape[-1] // 2
        if wrong.get("no_offset"):
            c, s = cos[:seq], sin[:seq]
        elif wrong.get("one_row"):
            c, s = cos[offset], sin[offset]
        else:
            c, s = cos[offset : offset + seq], sin[offset : offset + seq]
        if wrong.get("pairs"):
            rotated = torch.empty_like(x)
            rotated[..., 0::2], rotated[..., 1::2] = -x[..., 1::2], x[..., 0::2]
        elif wrong.get("no_minus"):
            rotated = torch.cat([x[..., half:], x[..., :half]], dim=-1)
        elif wrong.get("backwards"):
            rotated = torch.cat([x[..., half:], -x[..., :half]], dim=-1)
        else:
            rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * c + rotated * s

    return apply


# --- llama_block ---------------------------------------------------------------------------------------------------------


def block_like(**wrong):
    def block(x, weights, n_heads, n_kv_heads, cos, sin, eps=1e-6):
        batch, seq, d_model = x.shape
        d_head = d_model // n_heads

        def norm(h, w):
            if wrong.get("centre"):
                h = h - h.mean(-1, keepdim=True)
            return w * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)

        def rope(t):
            t1, t2 = t[..., : d_head // 2], t[..., d_head // 2 :]
            return t * cos[:seq] + torch.cat([-t2, t1], dim=-1) * sin[:seq]

        def heads(t, n):
            return t.view(batch, seq, n, d_head).transpose(1, 2)

        def grouped(t):  # (batch, n_kv_heads, seq, d_head) -> (batch, n_heads, seq, d_head), copies side by side
            n_rep = n_heads // n_kv_heads
            if wrong.get("tiled"):
                return torch.cat([t] * n_rep, dim=1)
            return t[:, :, None].expand(batch, n_kv_heads, n_rep, seq, d_head).reshape(batch, n_heads, seq, d_head)

        def attention(h):
            q = heads(h @ weights["wq"], n_heads)
            k, v = heads(h @ weights["wk"], n_kv_heads), heads(h @ weights["wv"], n_kv_heads)
            if not wrong.get("late"):
                q, k = rope(q), rope(k)
            if wrong.get("v"):
                v = rope(v)
            k, v = grouped(k), grouped(v)
            scores = q @ k.transpose(-2, -1) / math.sqrt(d_model if wrong.get("d_model") else d_head)
            if not wrong.get("no_mask"):
                scores = scores.masked_fill(~torch.ones(seq, seq, dtype=torch.bool).tril(), float("-inf"))
            z = torch.softmax(scores, dim=-1) @ v
            if wrong.get("late"):
                z = rope(z)
            return z.transpose(1, 2).reshape(batch, seq, d_model) @ weights["wo"]

        def mlp(h):
            return (F.silu(h @ weights["w_gate"]) * (h @ weights["w_up"])) @ weights["w_down"]

        if wrong.get("post"):
            x = norm(x + attention(x), weights["attn_norm"])
            return norm(x + mlp(x), weights["ffn_norm"])
        x = x + attention(norm(x, weights["attn_norm"]))
        return x + mlp(norm(x, weights["ffn_norm"]))

    return block


LEARNER_MISTAKES = [
    ("12.rope_tables", tables_like(i_over_d=True), "frequencies_i_over_d"),
    ("12.rope_tables", tables_like(interleaved=True), "interleaved_layout"),
    ("12.rope_tables", tables_like(once=True), "angles_not_duplicated"),
    ("12.rope_tables", tables_like(from_one=True), "positions_from_one"),
    ("12.rope_tables", tables_like(positive=True), "positive_exponent"),
    ("12.rope_tables", tables_like(swap=True), "cos_sin_swapped"),
    ("12.apply_rope", apply_like(no_offset=True), "offset_ignored"),
    ("12.apply_rope", apply_like(one_row=True), "one_position_for_all"),
    ("12.apply_rope", apply_like(pairs=True), "interleaved_pairs"),
    ("12.apply_rope", apply_like(backwards=True), "rotated_backwards"),
    ("12.apply_rope", apply_like(no_minus=True), "swapped_without_sign"),
    ("12.llama_block", block_like(v=True), "values_rotated"),
    ("12.llama_block", block_like(late=True), "rope_after_scores"),
    ("12.llama_block", block_like(centre=True), "rms_norm_subtracts_mean"),
    ("12.llama_block", block_like(no_mask=True), "no_causal_mask"),
    ("12.llama_block", block_like(post=True), "norm_after_residual"),
    ("12.llama_block", block_like(d_model=True), "scaled_by_d_model"),
    ("12.llama_block", block_like(tiled=True), "kv_heads_tiled"),
]


@pytest.mark.parametrize(("exercise_id", "learner", "mistake"), LEARNER_MISTAKES,
                         ids=[f"{e}-{m}" for e, _, m in LEARNER_MISTAKES])
def test_a_learners_mistake_is_named(exercise_id, learner, mistake, assert_mistake_named):
    assert_mistake_named(exercise_id, learner, mistake)


def test_every_catalogued_mistake_has_a_learner_version_here():
    exercises = ("12.rope_tables", "12.apply_rope", "12.llama_block")
    catalogued = {(e, m.name) for e in exercises for m in get_exercise(e).mistakes}
    assert catalogued == {(e, m) for e, _, m in LEARNER_MISTAKES}


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("12.rope_tables", tables_right), ("12.rope_tables", tables_like()), ("12.apply_rope", apply_right),
    ("12.apply_rope", apply_like()), ("12.llama_block", block_like()),
])
def test_a_correct_answer_written_differently_passes(exercise_id, answer):
    assert check_recorded(exercise_id, answer).passed


def test_the_references_are_the_package_functions_and_the_llama_block():
    from tutorial_lib.checks.ch12 import reference_apply_rope, reference_llama_block, reference_rope_tables
    from tutorial_lib.rope import RotaryEmbedding

    for got, want in zip(reference_rope_tables(12, 8, 500.0), rope_tables(12, 8, 500.0)):
        assert torch.equal(got, want)
    x = torch.randn(2, 3, 4, 8)
    cos, sin = rope_tables(12, 8)
    torch.testing.assert_close(reference_apply_rope(x, cos, sin, offset=5), RotaryEmbedding(8, 12)(x, offset=5))

    cfg = LlamaConfig(d_vocab=10, n_ctx=12, d_model=32, n_heads=4, n_kv_heads=2, n_layers=1, layer_norm_eps=1e-5)
    block = LlamaBlock(cfg).eval()
    with torch.no_grad():
        for parameter in block.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))  # norms off 1
    weights = {
        "attn_norm": block.attn_residual.norm.weight, "ffn_norm": block.ffn_residual.norm.weight,
        "wq": block.attn.q_proj.weight.T, "wk": block.attn.k_proj.weight.T, "wv": block.attn.v_proj.weight.T,
        "wo": block.attn.out_proj.weight.T, "w_gate": block.ffn.gate.weight.T, "w_up": block.ffn.up.weight.T,
        "w_down": block.ffn.down.weight.T,
    }
    x = torch.randn(2, 9, 32) + 0.5
    cos, sin = rope_tables(12, 8)
    with torch.no_grad():
        torch.testing.assert_close(reference_llama_block(x, weights, 4, 2, cos, sin, 1e-5), block(x, causal=True))


# --- repeat_kv -------------------------------------------------------------------------------------------------------


def repeat_right(x, n_rep):
    batch, n_kv_heads, seq, d_head = x.shape
    return x[:, :, None, :, :].expand(batch, n_kv_heads, n_rep, seq, d_head).reshape(batch, n_kv_heads * n_rep, seq, d_head)


def repeat_like(**wrong):
    def repeat_kv(x, n_rep):
        if wrong.get("tile"):
            return x.repeat(1, n_rep, 1, 1)
        if wrong.get("cat"):
            return torch.cat([x for _ in range(n_rep)], dim=1)
        if wrong.get("seq"):
            return x.repeat_interleave(n_rep, dim=2)
        if wrong.get("last"):
            return x.repeat_interleave(n_rep, dim=3)
        if wrong.get("n_kv"):
            n_kv_heads = x.shape[1]
            return torch.repeat_interleave(x, n_kv_heads, dim=1)
        if wrong.get("no_reshape"):
            return x.unsqueeze(2).expand(-1, -1, n_rep, -1, -1)
        return torch.repeat_interleave(x, repeats=n_rep, dim=1)

    return repeat_kv


REPEAT_MISTAKES = [
    (repeat_like(tile=True), "tiled_heads"),
    (repeat_like(cat=True), "tiled_heads"),
    (repeat_like(seq=True), "repeated_positions"),
    (repeat_like(last=True), "repeated_d_head"),
    (repeat_like(no_reshape=True), "group_axis_not_merged"),
]


@pytest.mark.parametrize(("learner", "mistake"), REPEAT_MISTAKES, ids=[m for _, m in REPEAT_MISTAKES])
def test_a_learners_repeat_kv_mistake_is_named(learner, mistake, assert_mistake_named):
    assert_mistake_named("12.repeat_kv", learner, mistake)


def test_every_repeat_kv_mistake_has_a_learner_version_here():
    assert {m.name for m in get_exercise("12.repeat_kv").mistakes} == {m for _, m in REPEAT_MISTAKES}


@pytest.mark.parametrize("answer", [repeat_right, repeat_like()])
def test_a_correct_repeat_kv_written_differently_passes(answer):
    assert check("12.repeat_kv", answer).passed


def test_the_tiled_heads_verdict_names_repeat_and_repeat_interleave():
    verdict = str(check("12.repeat_kv", repeat_like(tile=True)))
    assert "`repeat`" in verdict and "`repeat_interleave`" in verdict and "h % n_kv_heads" in verdict


# --- 12.predict_rmsnorm_spread ----------------------------------------------------------------------------------------


def test_the_rmsnorm_spread_is_measured_and_its_misconceptions_are_named(predict):
    from tutorial_lib.checks.ch12 import rmsnorm_spread

    spread = rmsnorm_spread()
    assert 0.42 < spread < 0.47  # the variation of the features, divided by a root mean square that holds the offset
    assert predict("12.predict_rmsnorm_spread", lambda: 1 / math.sqrt(1 + 2**2)).passed  # the solution's reasoning
    assert predict("12.predict_rmsnorm_spread", lambda: 1.0).mistake == "recentred_like_layer_norm"
    assert predict("12.predict_rmsnorm_spread", lambda: 1 / 3).mistake == "root_mean_square_as_sum"
    assert predict("12.predict_rmsnorm_spread", lambda: 0.2).mistake == "no_square_root"
    assert predict("12.predict_rmsnorm_spread", lambda: 0.05).mistake == "unit_length"
    assert not predict("12.predict_rmsnorm_spread", lambda: 2.0).passed


def test_torchs_fused_attention_scores_nothing_in_the_block():
    # enable_gqa would repeat the key/value heads for the learner: the block asks for the repetition itself.
    def fused(x, weights, n_heads, n_kv_heads, cos, sin, eps=1e-6):
        batch, seq, d_model = x.shape

        def norm(h, w):
            return w * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)

        def heads(t, n):
            return t.view(batch, seq, n, d_model // n_heads).transpose(1, 2)

        h = norm(x, weights["attn_norm"])
        q, k = apply_rope(heads(h @ weights["wq"], n_heads), cos, sin), apply_rope(heads(h @ weights["wk"], n_kv_heads), cos, sin)
        z = F.scaled_dot_product_attention(q, k, heads(h @ weights["wv"], n_kv_heads), is_causal=True, enable_gqa=True)
        x = x + z.transpose(1, 2).reshape(batch, seq, d_model) @ weights["wo"]
        h = norm(x, weights["ffn_norm"])
        return x + (F.silu(h @ weights["w_gate"]) * (h @ weights["w_up"])) @ weights["w_down"]

    result = check_recorded("12.llama_block", fused)
    assert result.points == 0 and "F.scaled_dot_product_attention" in result.verdict, result.verdict


def test_the_block_is_graded_once_the_learners_repeat_kv_passes():
    # The learner's block calls their repeat_kv of exercise 4: a mistake there is named there, not in the block.
    from tutorial_lib.checks.ch12 import reference_llama_block

    source = inspect.getsource(reference_llama_block)
    namespace = {**vars(sys.modules[reference_llama_block.__module__]),
                 "repeat_kv": lambda x, n_rep: x.repeat(1, n_rep, 1, 1)}  # tiled: fails 12.repeat_kv
    namespace.pop("__name__")  # the block is the learner's, defined outside the package
    exec(compile(source, "<learner>", "exec"), namespace)
    result = check("12.llama_block", namespace["reference_llama_block"])
    assert (result.kind, result.points) == ("earlier_answer_fails", 0) and "`repeat_kv` of exercise 4" in result.verdict
    namespace["repeat_kv"] = lambda x, n_rep: x.repeat_interleave(n_rep, dim=1)
    assert check("12.llama_block", namespace["reference_llama_block"]).kind == "passed"
