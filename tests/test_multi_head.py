"""Multi-head attention against ``nn.MultiheadAttention`` with the weights copied across; loop, fast path, cache."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tutorial_lib.attention import causal_mask, padding_mask
from tutorial_lib.kv_cache import LayerKVCache
from tutorial_lib.multi_head import MultiHeadAttention, MultiHeadAttentionLoop

TOL = {"atol": 1e-5, "rtol": 0.0}
D_MODEL, N_HEADS = 32, 4


def randomised(module: nn.Module) -> nn.Module:
    """Every parameter redrawn, biases included, so that a bias copied to the wrong place shows in the outputs."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.3)
    return module


def reference_copy(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    """PyTorch's module holding our weights: W^Q, W^K, W^V stacked into ``in_proj_weight``."""
    ref = nn.MultiheadAttention(ours.d_model, ours.n_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref.eval()


def run_reference(ref: nn.MultiheadAttention, x, context=None, *, key_padding=None, attn_mask=None):
    """PyTorch's boolean masks mean True = *masked*: the opposite of ours. need_weights keeps its generic path."""
    source = x if context is None else context
    return ref(
        x, source, source, key_padding_mask=key_padding, attn_mask=attn_mask, need_weights=True, average_attn_weights=False
    )


@pytest.fixture
def mha() -> MultiHeadAttention:
    return randomised(MultiHeadAttention(D_MODEL, N_HEADS))


def test_self_attention_matches_pytorch(mha):
    x = torch.randn(3, 6, D_MODEL)
    ref_out, ref_weights = run_reference(reference_copy(mha), x)
    torch.testing.assert_close(mha(x), ref_out, **TOL)
    out, weights = mha.forward_with_weights(x)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(weights, ref_weights, **TOL)


def test_cross_attention_matches_pytorch(mha):
    x, context = torch.randn(2, 4, D_MODEL), torch.randn(2, 7, D_MODEL)
    ref_out, ref_weights = run_reference(reference_copy(mha), x, context)
    torch.testing.assert_close(mha(x, context), ref_out, **TOL)
    out, weights = mha.forward_with_weights(x, context)
    assert weights.shape == (2, N_HEADS, 4, 7)
    torch.testing.assert_close(weights, ref_weights, **TOL)


def test_key_padding_mask_matches_pytorch(mha):
    x, context = torch.randn(3, 5, D_MODEL), torch.randn(3, 6, D_MODEL)
    lengths = torch.tensor([6, 2, 4])
    mask = padding_mask(lengths, 6)
    ref_out, ref_weights = run_reference(reference_copy(mha), x, context, key_padding=~mask[:, 0])
    torch.testing.assert_close(mha(x, context, mask=mask), ref_out, **TOL)
    _, weights = mha.forward_with_weights(x, context, mask=mask)
    torch.testing.assert_close(weights, ref_weights, **TOL)


def test_causal_matches_pytorch(mha):
    x = torch.randn(2, 6, D_MODEL)
    ref_out, ref_weights = run_reference(reference_copy(mha), x, attn_mask=~causal_mask(6))
    torch.testing.assert_close(mha(x, causal=True), ref_out, **TOL)
    torch.testing.assert_close(mha(x, mask=causal_mask(6)), ref_out, **TOL)
    _, weights = mha.forward_with_weights(x, causal=True)
    torch.testing.assert_close(weights, ref_weights, **TOL)


def test_causal_and_padding_combined_match_pytorch(mha):
    x = torch.randn(3, 6, D_MODEL)
    mask = padding_mask(torch.tensor([6, 3, 5]), 6)
    ref_out, _ = run_reference(reference_copy(mha), x, key_padding=~mask[:, 0], attn_mask=~causal_mask(6))
    torch.testing.assert_close(mha(x, mask=mask, causal=True), ref_out, **TOL)


def test_per_sequence_mask_matches_pytorch(mha):
    """A full (batch, query_pos, key_pos) mask: the module must add the head axis, PyTorch takes one per head."""
    x = torch.randn(2, 5, D_MODEL)
    mask = torch.rand(2, 5, 5) < 0.6
    mask[..., 0] = True  # no fully masked rows: PyTorch gives NaN there
    ref_out, ref_weights = run_reference(reference_copy(mha), x, attn_mask=(~mask).repeat_interleave(N_HEADS, dim=0))
    torch.testing.assert_close(mha(x, mask=mask), ref_out, **TOL)
    torch.testing.assert_close(mha.forward_with_weights(x, mask=mask)[1], ref_weights, **TOL)


def test_without_bias_matches_formula():
    mha = randomised(MultiHeadAttention(D_MODEL, N_HEADS, bias=False))
    assert all(getattr(mha, p).bias is None for p in ("q_proj", "k_proj", "v_proj", "out_proj"))
    ref = nn.MultiheadAttention(D_MODEL, N_HEADS, bias=False, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight]))
        ref.out_proj.weight.copy_(mha.out_proj.weight)
    x = torch.randn(2, 5, D_MODEL)
    torch.testing.assert_close(mha(x), run_reference(ref.eval(), x)[0], **TOL)


@pytest.mark.parametrize("mode", ["self", "cross", "causal", "mask"])
def test_loop_equals_fused_with_the_same_state_dict(mha, mode):
    loop = MultiHeadAttentionLoop(D_MODEL, N_HEADS)
    loop.load_state_dict(mha.state_dict(), strict=True)
    x, context = torch.randn(2, 5, D_MODEL), torch.randn(2, 7, D_MODEL)
    kwargs = {
        "self": {},
        "cross": {"context": context},
        "causal": {"causal": True},
        "mask": {"context": context, "mask": padding_mask(torch.tensor([7, 3]), 7)},
    }[mode]
    torch.testing.assert_close(loop(x, **kwargs), mha(x, **kwargs), **TOL)


def test_loop_refuses_a_cache(mha):
    loop = MultiHeadAttentionLoop(D_MODEL, N_HEADS)
    with pytest.raises(ValueError, match="cache"):
        loop(torch.randn(1, 2, D_MODEL), cache=LayerKVCache(1, N_HEADS, 4, D_MODEL // N_HEADS))


@pytest.mark.parametrize("kwargs", [{}, {"causal": True}, {"mask": "padding"}, {"mask": "padding", "causal": True}])
def test_fast_path_equals_readable_path(mha, kwargs):
    fast = MultiHeadAttention(D_MODEL, N_HEADS, fast=True)
    fast.load_state_dict(mha.state_dict(), strict=True)
    x = torch.randn(3, 6, D_MODEL)
    if kwargs.get("mask") == "padding":
        kwargs = {**kwargs, "mask": padding_mask(torch.tensor([6, 0, 2]), 6)}  # the second row: fully masked
    torch.testing.assert_close(fast(x, **kwargs), mha(x, **kwargs), **TOL)


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("chunks", [[1] * 7, [3, 4], [2, 1, 4], [7]])
def test_kv_cache_chunks_equal_full_causal_forward(mha, fast, chunks):
    mha.fast = fast
    x = torch.randn(2, 7, D_MODEL)
    cache = LayerKVCache(2, N_HEADS, 10, D_MODEL // N_HEADS)
    outs, start = [], 0
    for size in chunks:
        outs.append(mha(x[:, start : start + size], causal=True, cache=cache))
        start += size
    assert cache.length == 7
    torch.testing.assert_close(torch.cat(outs, dim=1), mha(x, causal=True), **TOL)


def test_kv_cache_overflow_raises(mha):
    cache = LayerKVCache(1, N_HEADS, 4, D_MODEL // N_HEADS)
    mha(torch.randn(1, 3, D_MODEL), causal=True, cache=cache)
    with pytest.raises(ValueError, match="max_len=4"):
        mha(torch.randn(1, 2, D_MODEL), causal=True, cache=cache)


@pytest.mark.parametrize("d_model, n_heads, argument", [(32, 0, "n_heads"), (32, 5, "divisible by n_heads")])
def test_bad_configuration(d_model, n_heads, argument):
    with pytest.raises(ValueError, match=argument):
        MultiHeadAttention(d_model, n_heads)
