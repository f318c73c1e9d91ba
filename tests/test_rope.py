"""RoPE (chapter 12) against its defining properties, an independent complex-number formulation and Hugging Face."""

from __future__ import annotations

import math

import pytest
import torch

from tutorial_lib.attention import causal_mask
from tutorial_lib.kv_cache import LayerKVCache
from tutorial_lib.rope import (
    RotaryEmbedding,
    RotaryMultiHeadAttention,
    apply_rope,
    interleaved_to_halves,
    permute_to_halves,
    rope_frequencies,
    rope_tables,
)


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _complex_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE as the paper's §3.2 writes it in 2-D: pair i is a complex number multiplied by e^{i·m·θ_i}.

    Pairs follow the rotate-half layout: the real part is dimension i, the imaginary part dimension i + d/2.
    """
    d = x.shape[-1]
    theta = torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
    z = torch.complex(x[..., : d // 2].double(), x[..., d // 2 :].double())
    z = z * torch.polar(torch.ones_like(theta), positions.double()[:, None] * theta)
    return torch.cat([z.real, z.imag], dim=-1).float()


def test_frequencies_are_the_geometric_ladder() -> None:
    theta = rope_frequencies(8, base=10000.0)
    assert theta.tolist() == pytest.approx([1.0, 10000 ** -0.25, 10000 ** -0.5, 10000 ** -0.75], rel=1e-12)


def test_tables_hold_cos_and_sin_of_position_times_frequency() -> None:
    cos, sin = rope_tables(n_ctx=7, d_head=6, base=100.0)
    m, i = 5, 2  # position 5, pair 2: dimensions 2 and 2 + 3
    angle = m * 100.0 ** (-2 * i / 6)
    assert cos[m, i].item() == pytest.approx(math.cos(angle), abs=1e-7)
    assert cos[m, i + 3].item() == pytest.approx(math.cos(angle), abs=1e-7)
    assert sin[m, i].item() == pytest.approx(math.sin(angle), abs=1e-7)
    assert torch.equal(cos[0], torch.ones(6)) and torch.equal(sin[0], torch.zeros(6))  # position 0: no rotation


def test_rotation_preserves_norms() -> None:
    rope = RotaryEmbedding(d_head=16, n_ctx=64)
    x = _randn(2, 3, 64, 16)
    rotated = rope(x)
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(rotated[..., 1:, :], x[..., 1:, :], atol=1e-2)  # it did rotate


def test_score_depends_only_on_relative_offset() -> None:
    rope = RotaryEmbedding(d_head=32, n_ctx=512)
    q, k = _randn(1, 32, seed=1), _randn(1, 32, seed=2)

    def score(m: int, n: int) -> float:
        q_m = rope(q, positions=torch.tensor([m]))
        k_n = rope(k, positions=torch.tensor([n]))
        return (q_m @ k_n.T).item()

    for m, n in [(0, 0), (3, 10), (10, 3), (100, 37)]:
        for shift in (1, 17, 300):
            assert score(m + shift, n + shift) == pytest.approx(score(m, n), abs=1e-5)
    assert abs(score(0, 1) - score(0, 2)) > 1e-3  # ... and it does depend on the offset


def test_matches_independent_complex_formulation() -> None:
    for d_head, base in [(2, 10000.0), (16, 10000.0), (64, 500000.0)]:
        rope = RotaryEmbedding(d_head, n_ctx=100, base=base)
        x = _randn(4, 100, d_head, seed=d_head)
        torch.testing.assert_close(rope(x), _complex_rope(x, torch.arange(100), base), atol=1e-5, rtol=1e-5)


def test_matches_hugging_face_llama_rotary_embedding() -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=50, rope_theta=10000.0)
    q, k = _randn(2, 4, 50, 16, seed=3), _randn(2, 4, 50, 16, seed=4)
    cos, sin = LlamaRotaryEmbedding(config)(q, torch.arange(50)[None])
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)
    rope = RotaryEmbedding(16, n_ctx=50)
    torch.testing.assert_close(rope(q), q_hf, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rope(k), k_hf, atol=1e-5, rtol=1e-5)


def test_offset_and_positions_equal_slicing() -> None:
    rope = RotaryEmbedding(d_head=8, n_ctx=20)
    x = _randn(2, 20, 8)
    full = rope(x)
    torch.testing.assert_close(rope(x[:, 5:9], offset=5), full[:, 5:9], atol=0, rtol=0)
    torch.testing.assert_close(rope(x[:, 5:9], positions=torch.arange(5, 9)), full[:, 5:9], atol=0, rtol=0)
    # per-sequence positions, broadcast over a head axis
    x_heads = _randn(2, 3, 4, 8)
    positions = torch.tensor([[0, 1, 2, 3], [7, 8, 9, 10]])[:, None, :]
    out = rope(x_heads, positions=positions)
    torch.testing.assert_close(out[1], rope(x_heads[1], offset=7), atol=0, rtol=0)


def test_keeps_low_precision_dtype() -> None:
    x = _randn(3, 8).to(torch.bfloat16)
    assert RotaryEmbedding(8, n_ctx=3)(x).dtype == torch.bfloat16


def test_tables_are_buffers_not_parameters_nor_state() -> None:
    rope = RotaryEmbedding(8, n_ctx=16)
    assert list(rope.parameters()) == [] and rope.state_dict() == {}
    assert {name for name, _ in rope.named_buffers()} == {"cos", "sin"}


def test_rotary_attention_rotates_queries_and_keys() -> None:
    torch.manual_seed(0)
    attn = RotaryMultiHeadAttention(32, 4, n_ctx=16).eval()
    x = _randn(2, 10, 32)
    q = attn.rope(attn.q_proj(x).view(2, 10, 4, 8).transpose(1, 2))
    k = attn.rope(attn.k_proj(x).view(2, 10, 4, 8).transpose(1, 2))
    v = attn.v_proj(x).view(2, 10, 4, 8).transpose(1, 2)
    reference = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = attn.out_proj(reference.transpose(1, 2).reshape(2, 10, 32))
    torch.testing.assert_close(attn(x, causal=True), expected, atol=1e-5, rtol=1e-5)


def test_rotary_attention_with_cache_equals_without() -> None:
    torch.manual_seed(0)
    attn = RotaryMultiHeadAttention(32, 4, n_ctx=16).eval()
    x = _randn(2, 12, 32)
    full = attn(x, causal=True)
    cache = LayerKVCache(batch=2, n_heads=4, max_len=16, d_head=8)
    steps = [attn(x[:, :5], causal=True, cache=cache)] + [attn(x[:, t : t + 1], causal=True, cache=cache) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_rotary_attention_weights_path_agrees() -> None:
    torch.manual_seed(0)
    attn = RotaryMultiHeadAttention(16, 2, n_ctx=8, fast=True).eval()
    x = _randn(1, 8, 16)
    out, weights = attn.forward_with_weights(x, causal=True)
    torch.testing.assert_close(out, attn(x, causal=True), atol=1e-5, rtol=1e-5)
    assert torch.all(weights.masked_select(~causal_mask(8)) == 0)


def test_bad_input_raises(without_annotation_checks) -> None:
    with pytest.raises(ValueError, match="d_head"):
        RotaryEmbedding(7, n_ctx=4)
    with pytest.raises(ValueError, match="base"):
        rope_frequencies(8, base=1.0)
    with pytest.raises(ValueError, match="n_ctx"):
        rope_tables(0, 8)
    rope = RotaryEmbedding(8, n_ctx=4)
    with pytest.raises(ValueError, match="n_ctx=4"):
        rope(_randn(5, 8))
    with pytest.raises(ValueError, match="n_ctx=4"):
        rope(_randn(2, 8), offset=3)
    with pytest.raises(ValueError, match="offset"):
        rope(_randn(2, 8), offset=-1)
    with pytest.raises(ValueError, match="positions"):
        rope(_randn(2, 8), positions=torch.tensor([0, 4]))
    with without_annotation_checks(), pytest.raises(ValueError, match="positions"):
        rope(_randn(2, 8), positions=torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="positions"):
        rope(_randn(2, 8), positions=torch.tensor([0, 1, 2]))
    cos, sin = rope_tables(4, 8)
    with without_annotation_checks(), pytest.raises(ValueError, match="d_head=6"):
        apply_rope(_randn(2, 6), cos, sin)
    attn = RotaryMultiHeadAttention(16, 2, n_ctx=8)
    with pytest.raises(ValueError, match="context"):
        attn(_randn(1, 3, 16), _randn(1, 4, 16))
    with pytest.raises(ValueError, match="d_head"):
        RotaryMultiHeadAttention(12, 4, n_ctx=8)  # d_head = 3 is odd


def _meta_rope(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Meta's LLaMA code (model.py, ``apply_rotary_emb``): interleaved pairs (2i, 2i + 1) as complex numbers, position t
    multiplied by e^{i·t·θ_i}; positions along the second-to-last axis."""
    seq, d = x.shape[-2], x.shape[-1]
    freqs = 1.0 / (base ** (torch.arange(0, d, 2)[: d // 2].double() / d))
    freqs_cis = torch.polar(torch.ones(seq, d // 2, dtype=torch.float64), torch.outer(torch.arange(seq).double(), freqs))
    x_complex = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(x_complex * freqs_cis).flatten(-2).float()


def test_the_two_layouts_are_one_rotation_up_to_a_fixed_permutation() -> None:
    assert interleaved_to_halves(8).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    x = _randn(2, 3, 10, 16, seed=5)
    perm = interleaved_to_halves(16)
    halves = RotaryEmbedding(16, n_ctx=10)(x[..., perm])[..., torch.argsort(perm)]
    torch.testing.assert_close(halves, _meta_rope(x), atol=1e-5, rtol=1e-5)


def test_permuted_weights_give_the_interleaved_models_scores() -> None:
    d_model, n_heads, seq = 32, 4, 12
    x = _randn(1, seq, d_model, seed=6)
    w_q, w_k = _randn(d_model, d_model, seed=7), _randn(d_model, d_model, seed=8)

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(1, seq, n_heads, d_model // n_heads).transpose(1, 2)

    meta = _meta_rope(heads(x @ w_q.T)) @ _meta_rope(heads(x @ w_k.T)).transpose(-2, -1)
    rope = RotaryEmbedding(d_model // n_heads, n_ctx=seq)
    ours = rope(heads(x @ permute_to_halves(w_q, n_heads).T)) @ rope(heads(x @ permute_to_halves(w_k, n_heads).T)).transpose(-2, -1)
    torch.testing.assert_close(ours, meta, atol=1e-4, rtol=1e-5)
    unpermuted = rope(heads(x @ w_q.T)) @ rope(heads(x @ w_k.T)).transpose(-2, -1)
    assert (unpermuted - meta).abs().max() > 1.0  # loading Meta's weights unpermuted is another model


def test_permutation_helpers_refuse_bad_input() -> None:
    with pytest.raises(ValueError, match="d_head"):
        interleaved_to_halves(5)
    with pytest.raises(ValueError, match="n_heads"):
        permute_to_halves(torch.zeros(8, 8), 0)
    with pytest.raises(ValueError, match="n_heads=3"):
        permute_to_halves(torch.zeros(8, 8), 3)
