"""Efficient attention (chapter 13) against references written here: explicit per-query loops, the quadratic form of
linear attention, PyTorch's softmax and the chapter-03 attention; and a measurement of what tiled attention allocates."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from tutorial_lib.attention import (
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)
from tutorial_lib.efficient_attention import (
    LinearMultiHeadAttention,
    banded_attention,
    elu_feature_map,
    flash_attention,
    flash_attention_backward,
    flash_attention_forward,
    linear_attention,
    linear_attention_step,
    linear_attention_weights,
    online_softmax,
    sliding_window_attention,
    tile_backward,
    tile_update,
    tiled_attention,
    use_linear_attention,
)
from tutorial_lib.kv_cache import LayerKVCache
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.multi_head import MultiHeadAttention
from tutorial_lib.widgets.attention_costs import LargestTensor
from tutorial_lib.widgets.tiling import SKIPPED, tile_grid


def _qkv(*batch: int, n_query: int, n_key: int, d_head: int = 8, d_value: int = 6, seed: int = 0, requires_grad: bool = False):
    g = torch.Generator().manual_seed(seed)
    shapes = [(*batch, n_query, d_head), (*batch, n_key, d_head), (*batch, n_key, d_value)]
    return [torch.randn(*shape, generator=g).requires_grad_(requires_grad) for shape in shapes]


# ---------------------------------------------------------------------------------------------- sliding window


def _sliding_window_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    """One query at a time, over its own keys t - window + 1 .. t, with PyTorch's attention."""
    rows = []
    for t in range(q.shape[-2]):
        lo = max(0, t - window + 1)
        rows.append(F.scaled_dot_product_attention(q[..., t : t + 1, :], k[..., lo : t + 1, :], v[..., lo : t + 1, :]))
    return torch.cat(rows, dim=-2)


@pytest.mark.parametrize("window", [1, 3, 8, 40])
def test_sliding_window_matches_per_query_reference(window: int) -> None:
    q, k, v = _qkv(2, 3, n_query=21, n_key=21)
    expected = _sliding_window_reference(q, k, v, window)
    torch.testing.assert_close(sliding_window_attention(q, k, v, window), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sliding_window_attention(q, k, v, window, fast=True), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(banded_attention(q, k, v, window), expected, atol=1e-5, rtol=1e-5)


def test_banded_attention_computes_only_the_band() -> None:
    q, k, v = _qkv(1, 2, n_query=250, n_key=250, d_head=4, d_value=4)  # 250 = 31 blocks of 8 and a partial one
    full_scores = 2 * 250 * 250
    with LargestTensor() as banded:
        banded_attention(q, k, v, 8)
    with LargestTensor() as masked:
        sliding_window_attention(q, k, v, 8)
    assert masked.largest >= full_scores  # the masked version builds every score (and the recorder sees it)
    assert banded.largest <= 2 * 256 * 2 * 8  # each block of 8 queries meets 2 · 8 keys: 2 · seq · 2 · window scores


def test_banded_attention_gradients_equal_the_masked_version() -> None:
    q, k, v = _qkv(2, n_query=19, n_key=19, seed=11, requires_grad=True)
    weights = torch.randn(2, 19, 6, generator=torch.Generator().manual_seed(12))
    grads = []
    for fn in (banded_attention, sliding_window_attention):
        (fn(q, k, v, 5) * weights).sum().backward()
        grads.append([t.grad.clone() for t in (q, k, v)])
        for t in (q, k, v):
            t.grad = None
    for banded, masked in zip(*grads):
        torch.testing.assert_close(banded, masked, atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------------------------- linear attention


def _quadratic_linear_attention(q, k, v, causal: bool, eps: float = 1e-6) -> torch.Tensor:
    """The same kernel written as attention: sim(q_i, k_j) = φ(q_i)·φ(k_j), normalised over the visible keys."""
    sim = elu_feature_map(q) @ elu_feature_map(k).transpose(-2, -1)
    if causal:
        sim = sim * torch.ones(q.shape[-2], k.shape[-2]).tril()
    return sim @ v / (sim.sum(dim=-1, keepdim=True) + eps)


def test_feature_map_is_elu_plus_one_and_positive() -> None:
    x = torch.linspace(-10, 5, 50)
    torch.testing.assert_close(elu_feature_map(x), torch.where(x > 0, x + 1, torch.exp(x)))
    assert torch.all(elu_feature_map(x) > 0)


def test_linear_attention_stays_finite_when_the_features_underflow() -> None:
    q, k, v = _qkv(1, n_query=4, n_key=4)
    q = torch.full_like(q, -50.0)  # φ(q) rounds to 0 in float32: 0 / 0 without eps
    assert torch.equal(linear_attention(q, k, v), torch.zeros(1, 4, 6))


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_matches_quadratic_formula(causal: bool) -> None:
    q, k, v = _qkv(2, 3, n_query=17, n_key=17, seed=1)
    torch.testing.assert_close(linear_attention(q, k, v, causal=causal), _quadratic_linear_attention(q, k, v, causal), atol=1e-5, rtol=1e-5)


def test_linear_attention_cross_lengths_and_causality() -> None:
    q, k, v = _qkv(2, n_query=5, n_key=9, seed=2)
    torch.testing.assert_close(linear_attention(q, k, v), _quadratic_linear_attention(q, k, v, False), atol=1e-5, rtol=1e-5)
    q, k, v = _qkv(1, n_query=10, n_key=10, seed=3)
    future = v.clone()
    future[:, 6:] += 1.0  # changing the future changes nothing before it
    torch.testing.assert_close(linear_attention(q, k, future, causal=True)[:, :6], linear_attention(q, k, v, causal=True)[:, :6])


@pytest.mark.parametrize("chunk_size", [1, 5, 17, 64])
def test_causal_linear_attention_is_the_same_whatever_the_chunks(chunk_size: int) -> None:
    q, k, v = _qkv(2, 3, n_query=17, n_key=17, seed=13)
    expected = _quadratic_linear_attention(q, k, v, causal=True)
    torch.testing.assert_close(linear_attention(q, k, v, causal=True, chunk_size=chunk_size), expected, atol=1e-5, rtol=1e-5)


def test_the_recurrent_step_gives_the_parallel_outputs_with_a_state_of_fixed_size() -> None:
    q, k, v = _qkv(2, 3, n_query=20, n_key=20, seed=14)
    state, outputs = None, []
    for t in range(20):
        out, state = linear_attention_step(q[..., t, :], k[..., t, :], v[..., t, :], state)
        outputs.append(out)
        assert state.kv.shape == (2, 3, 8, 6) and state.k_sum.shape == (2, 3, 8)
    torch.testing.assert_close(torch.stack(outputs, dim=-2), linear_attention(q, k, v, causal=True), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_weights_reproduce_the_output(causal: bool) -> None:
    q, k, v = _qkv(2, n_query=11, n_key=11, seed=15)
    weights = linear_attention_weights(q, k, causal=causal)
    torch.testing.assert_close(weights @ v, linear_attention(q, k, v, causal=causal), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2, 11))
    assert (weights.triu(1) == 0).all() == causal


def test_linear_multi_head_attention_keeps_the_parameters_and_swaps_the_kernel() -> None:
    torch.manual_seed(0)
    softmax_mha = MultiHeadAttention(16, 4)
    linear_mha = LinearMultiHeadAttention(16, 4)
    linear_mha.load_state_dict(softmax_mha.state_dict(), strict=True)
    x = torch.randn(2, 9, 16)
    heads = [p.weight @ x.transpose(-2, -1) + p.bias[:, None] for p in (linear_mha.q_proj, linear_mha.k_proj, linear_mha.v_proj)]
    q, k, v = (h.unflatten(-2, (4, 4)).transpose(-2, -1) for h in heads)  # (batch, n_heads, seq, d_head)
    expected = linear_mha.out_proj(linear_attention(q, k, v, causal=True).transpose(1, 2).flatten(-2))
    torch.testing.assert_close(linear_mha(x, causal=True), expected, atol=1e-5, rtol=1e-5)
    out, weights = linear_mha.forward_with_weights(x, causal=True)
    torch.testing.assert_close(out, linear_mha(x, causal=True), atol=1e-5, rtol=1e-5)
    assert weights.shape == (2, 4, 9, 9)
    assert not torch.allclose(linear_mha(x, causal=True), softmax_mha(x, causal=True), atol=1e-3)
    with pytest.raises(ValueError, match="mask"):
        linear_mha(x, mask=torch.ones(9, 9, dtype=torch.bool))
    with pytest.raises(ValueError, match="cache"):
        linear_mha(x, cache=LayerKVCache(2, 4, 16, 4))


def test_use_linear_attention_swaps_every_block_and_keeps_its_weights() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(d_vocab=11, n_ctx=16, d_model=16, n_heads=2, n_layers=2))
    before = {name: p.clone() for name, p in model.state_dict().items()}
    use_linear_attention(model)
    assert all(type(block.attn) is LinearMultiHeadAttention for block in model.blocks)
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[name], after[name]) for name in before)
    tokens = torch.randint(11, (2, 16))
    changed = tokens.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 11
    torch.testing.assert_close(model(changed)[:, :10], model(tokens)[:, :10])  # still causal
    with pytest.raises(ValueError, match="blocks"):
        use_linear_attention(torch.nn.Linear(2, 2))


def test_linear_attention_is_not_softmax_attention() -> None:
    q, k, v = _qkv(1, n_query=10, n_key=10, seed=4)
    assert not torch.allclose(linear_attention(q, k, v), scaled_dot_product_attention(q, k, v)[0], atol=1e-2)


# ------------------------------------------------------------------------------- online softmax, tiled attention


@pytest.mark.parametrize("block_size", [1, 4, 7, 100])
def test_online_softmax_equals_softmax(block_size: int) -> None:
    x = torch.randn(3, 37, generator=torch.Generator().manual_seed(5)) * 10
    x[0] += 1000.0  # exp would overflow without the running maximum
    out = online_softmax(x, block_size)
    torch.testing.assert_close(out, torch.softmax(x, dim=-1), atol=1e-6, rtol=1e-5)


BLOCKS = [(1, 1), (3, 5), (8, 8), (16, 4), (64, 64)]


@pytest.mark.parametrize("block_q, block_k", BLOCKS)
def test_tiled_attention_equals_naive(block_q: int, block_k: int) -> None:
    q, k, v = _qkv(2, 3, n_query=23, n_key=31)  # lengths that no block size divides
    expected = scaled_dot_product_attention(q, k, v)[0]
    torch.testing.assert_close(tiled_attention(q, k, v, block_q=block_q, block_k=block_k), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block_q, block_k", BLOCKS)
@pytest.mark.parametrize("n_query", [29, 6, 1])  # training (square), a chunk after a cache, one decoding step
def test_tiled_attention_causal(block_q: int, block_k: int, n_query: int) -> None:
    q, k, v = _qkv(2, 3, n_query=n_query, n_key=29, seed=6)
    expected = scaled_dot_product_attention(q, k, v, causal_mask(n_query, n_past=29 - n_query))[0]
    out = tiled_attention(q, k, v, causal=True, block_q=block_q, block_k=block_k)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block_q, block_k", BLOCKS)
def test_tiled_attention_with_masks(block_q: int, block_k: int) -> None:
    q, k, v = _qkv(3, 2, n_query=19, n_key=19, seed=7)
    padding = padding_mask(torch.tensor([19, 11, 4]), 19)[:, None]  # (batch, 1, 1, key_pos): every head, every query
    torch.testing.assert_close(
        tiled_attention(q, k, v, padding, block_q=block_q, block_k=block_k),
        scaled_dot_product_attention(q, k, v, padding)[0], atol=1e-5, rtol=1e-5,
    )
    combined = padding & causal_mask(19)
    torch.testing.assert_close(
        tiled_attention(q, k, v, padding, causal=True, block_q=block_q, block_k=block_k),
        scaled_dot_product_attention(q, k, v, combined)[0], atol=1e-5, rtol=1e-5,
    )
    random_mask = torch.rand(3, 2, 19, 19, generator=torch.Generator().manual_seed(8)) < 0.3
    random_mask[0, 0, 5] = False  # a query that sees no key: zeros, not NaN, as in chapter 03
    out = tiled_attention(q, k, v, random_mask, block_q=block_q, block_k=block_k)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, random_mask)[0], atol=1e-5, rtol=1e-5)
    assert torch.equal(out[0, 0, 5], torch.zeros(6))


def test_tiled_attention_gradients_equal_naive() -> None:
    q, k, v = _qkv(2, n_query=13, n_key=13, seed=9, requires_grad=True)
    weights = torch.randn(2, 13, 6, generator=torch.Generator().manual_seed(10))
    (tiled_attention(q, k, v, causal=True, block_q=4, block_k=3) * weights).sum().backward()
    tiled_grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    (scaled_dot_product_attention(q, k, v, causal_mask(13))[0] * weights).sum().backward()
    for tiled_grad, t in zip(tiled_grads, (q, k, v)):
        torch.testing.assert_close(tiled_grad, t.grad, atol=1e-5, rtol=1e-5)


def test_tiled_attention_never_materialises_the_score_matrix() -> None:
    q, k, v = _qkv(2, 2, n_query=96, n_key=128, d_head=8, d_value=8)
    full_scores = 2 * 2 * 96 * 128
    padding = padding_mask(torch.tensor([128, 70]), 128)[:, None]
    with LargestTensor() as naive:
        scaled_dot_product_attention(q, k, v, padding)
    with LargestTensor() as tiled:
        tiled_attention(q, k, v, padding, causal=True, block_q=16, block_k=16)
    assert naive.largest >= full_scores  # the recorder sees the matrix when it exists
    # Nothing larger than the inputs and output (query_pos · d per head) is ever allocated.
    assert tiled.largest <= max(q.numel(), k.numel(), v.numel())
    assert tiled.largest < full_scores / 4


def test_tile_update_folds_keys_in_any_split() -> None:
    """Two tiles folded in turn give the state of one tile holding all their keys; acc / l is the softmax output."""
    q, k, v = _qkv(2, n_query=5, n_key=12, seed=16)
    q = q / 8**0.5
    fresh = (torch.full((2, 5, 1), float("-inf")), torch.zeros(2, 5, 1), torch.zeros(2, 5, 6))
    whole = tile_update(q, k, v, *fresh)
    state = tile_update(q, k[:, :7], v[:, :7], *fresh)
    split = tile_update(q, k[:, 7:], v[:, 7:], *state)
    for a, b in zip(whole, split):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    m, l, acc = whole
    torch.testing.assert_close(acc / l, F.scaled_dot_product_attention(q * 8**0.5, k, v), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(m, (q @ k.transpose(-2, -1)).amax(dim=-1, keepdim=True))


def test_tile_update_leaves_a_query_without_visible_keys_empty() -> None:
    q, k, v = _qkv(1, n_query=3, n_key=4, seed=17)
    keep = torch.tensor([[True, False, True, True], [False] * 4, [True] * 4])
    fresh = (torch.full((1, 3, 1), float("-inf")), torch.zeros(1, 3, 1), torch.zeros(1, 3, 6))
    m, l, acc = tile_update(q, k, v, *fresh, keep)
    assert m[0, 1, 0] == float("-inf") and l[0, 1, 0] == 0 and torch.equal(acc[0, 1], torch.zeros(6))
    assert not any(t.isnan().any() for t in (m, l, acc))


class _CountMatmuls(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += getattr(func, "__name__", "") == "matmul"  # `a @ b` and torch.matmul alike
        return func(*args, **(kwargs or {}))


def test_tiled_attention_skips_tiles_above_the_diagonal() -> None:
    q, k, v = _qkv(1, n_query=32, n_key=32)
    with _CountMatmuls() as full:
        tiled_attention(q, k, v, block_q=8, block_k=8)
    with _CountMatmuls() as causal:
        tiled_attention(q, k, v, causal=True, block_q=8, block_k=8)
    assert full.count == 2 * 4 * 4  # two products (scores, then weights · values) per tile, 4 × 4 tiles
    assert causal.count == 2 * (1 + 2 + 3 + 4)  # only the tiles on or below the diagonal


def test_bad_input_raises(without_annotation_checks) -> None:
    q, k, v = _qkv(1, n_query=4, n_key=6)
    for name in ("block_q", "block_k"):
        with pytest.raises(ValueError, match=name):
            tiled_attention(q, k, v, **{name: 0})
    with pytest.raises(ValueError, match="query_pos <= key_pos"):
        tiled_attention(k, q, q[..., :6], causal=True)
    with without_annotation_checks(), pytest.raises(ValueError, match="mask must be a bool"):
        tiled_attention(q, k, v, torch.ones(4, 6))
    with pytest.raises(ValueError, match="block_size"):
        online_softmax(torch.zeros(3), 0)
    with pytest.raises(ValueError, match="query_pos == key_pos"):
        linear_attention(q, k, v, causal=True)
    with pytest.raises(ValueError, match="eps"):
        linear_attention(q, k, v, eps=-1.0)
    with pytest.raises(ValueError, match="chunk_size"):
        linear_attention(q, k, v, chunk_size=0)
    with pytest.raises(ValueError, match="eps"):
        linear_attention_step(q[:, 0], k[:, 0], v[:, 0], eps=-1.0)
    square_q, square_k, square_v = _qkv(1, n_query=5, n_key=5)
    with pytest.raises(ValueError, match="window"):
        banded_attention(square_q, square_k, square_v, 0)
    with pytest.raises(ValueError, match="window"):
        sliding_window_attention(square_q, square_k, square_v, 0)
    with without_annotation_checks(), pytest.raises(ValueError, match="as many queries as keys"):
        banded_attention(q, k, v, 2)


@pytest.mark.parametrize(("n_query", "n_key", "block_q", "block_k"), [(32, 32, 8, 8), (37, 53, 7, 5), (6, 29, 4, 8), (20, 20, 64, 3)])
def test_the_tile_grid_widget_draws_the_walk_tiled_attention_takes(n_query, n_key, block_q, block_k) -> None:
    q, k, v = torch.randn(n_query, 4), torch.randn(n_key, 4), torch.randn(n_key, 4)
    with _CountMatmuls() as counter:
        tiled_attention(q, k, v, causal=True, block_q=block_q, block_k=block_k)
    assert counter.count == 2 * int((tile_grid(n_query, n_key, block_q, block_k, causal=True) != SKIPPED).sum())


def test_table_1_complexities_counted() -> None:
    """PyTorch's FLOP counter on one head: self-attention 4·n²·d, the band 8·n·w·d, linear attention 4·n·d·d_value."""
    from torch.utils.flop_counter import FlopCounterMode

    def flops(fn, *args, **kwargs) -> int:
        with FlopCounterMode(display=False) as counter:
            fn(*args, **kwargs)
        return counter.get_total_flops()

    for n in (64, 128):
        q, k, v = _qkv(1, n_query=n, n_key=n, d_head=16, d_value=16)
        assert flops(scaled_dot_product_attention, q, k, v, causal_mask(n)) == 4 * n * n * 16
        assert flops(banded_attention, q, k, v, 16) == 8 * n * 16 * 16
        assert flops(linear_attention, q, k, v) == 4 * n * 16 * 16


# ------------------------------------------------------------------------------------ FlashAttention's backward


def _reference_mask(n_query: int, n_key: int) -> torch.Tensor:
    """The causal mask with the queries the last n_query positions of the keys, built independently."""
    return torch.ones(n_query, n_key, dtype=torch.bool).tril(diagonal=n_key - n_query)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("n_query", "n_key", "block_size"), [(13, 13, 4), (37, 53, 16), (5, 29, 7), (20, 20, 64)])
def test_flash_attention_output_and_gradients_equal_pytorchs(causal, n_query, n_key, block_size) -> None:
    q, k, v = _qkv(2, 3, n_query=n_query, n_key=n_key, seed=n_query + n_key, requires_grad=True)
    upstream = torch.randn(2, 3, n_query, 6, generator=torch.Generator().manual_seed(1))
    ours = flash_attention(q, k, v, causal=causal, block_size=block_size)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=_reference_mask(n_query, n_key) if causal else None)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    for a, b in zip(torch.autograd.grad(ours, (q, k, v), upstream), torch.autograd.grad(theirs, (q, k, v), upstream)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_flash_attention_passes_gradcheck_in_float64() -> None:
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, n, 4, generator=g, dtype=torch.float64, requires_grad=True) for n in (9, 11, 11))
    assert torch.autograd.gradcheck(lambda q, k, v: flash_attention(q, k, v, causal=True, block_size=4), (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: flash_attention(q, k, v, block_size=3), (q, k, v))


def test_flash_attention_saves_only_inputs_output_and_log_sum_exp() -> None:
    q, k, v = _qkv(2, n_query=16, n_key=16, requires_grad=True)
    out = flash_attention(q, k, v, causal=True, block_size=4)
    saved = out.grad_fn.saved_tensors
    assert [tuple(t.shape) for t in saved] == [(2, 16, 8), (2, 16, 8), (2, 16, 6), (2, 16, 6), (2, 16, 1)]
    _, lse = flash_attention_forward(q.detach(), k.detach(), v.detach(), causal=True, block_size=4)
    scores = (q @ k.transpose(-2, -1) / 8**0.5).masked_fill(~_reference_mask(16, 16), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1, keepdim=True).detach())


def test_flash_attention_backward_never_holds_the_weights() -> None:
    q, k, v = _qkv(2, 2, n_query=96, n_key=128, d_head=8, d_value=8, requires_grad=True)
    upstream = torch.randn(2, 2, 96, 8)
    with LargestTensor() as flash:
        flash_attention(q, k, v, causal=True, block_size=16).backward(upstream)
    with LargestTensor() as tiled:
        tiled_attention(q, k, v, causal=True, block_q=16, block_k=16).backward(upstream)
    assert flash.largest <= max(q.numel(), k.numel(), v.numel())
    assert flash.largest < 2 * 2 * 96 * 128 / 4


def test_the_backward_tiles_add_up_to_the_gradients_in_any_split() -> None:
    """dQ, dK, dV summed over tiles of 1, 5 or all keys equal autograd's through the softmax written out."""
    q, k, v = _qkv(2, n_query=7, n_key=10, seed=3, requires_grad=True)
    d_out = torch.randn(2, 7, 6, generator=torch.Generator().manual_seed(4))
    out = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, dim=-1) @ v
    expected = torch.autograd.grad(out, (q, k, v), d_out)
    q, k, v, out = q.detach(), k.detach(), v.detach(), out.detach()
    lse = torch.logsumexp(q @ k.transpose(-2, -1) / 8**0.5, dim=-1, keepdim=True)
    delta = (d_out * out).sum(dim=-1, keepdim=True)
    for block in (1, 5, 10):
        d_q, d_k, d_v = torch.zeros_like(q), [], []
        for start in range(0, 10, block):
            part = tile_backward(q, k[:, start : start + block], v[:, start : start + block], d_out, lse, delta, 8**-0.5)
            d_q += part[0]
            d_k.append(part[1])
            d_v.append(part[2])
        for got, want in zip((d_q, torch.cat(d_k, dim=1), torch.cat(d_v, dim=1)), expected):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    d_q, d_k, d_v = flash_attention_backward(q, k, v, out, lse, d_out, block_size=3)
    torch.testing.assert_close(d_k, expected[1], atol=1e-5, rtol=1e-5)


def test_flash_attention_bad_input_raises(without_annotation_checks) -> None:
    q, k, v = _qkv(1, n_query=4, n_key=6)
    with pytest.raises(ValueError, match="block_size"):
        flash_attention(q, k, v, block_size=0)
    with pytest.raises(ValueError, match="block_size"):
        flash_attention(q, k, v, block_size=True)
    with pytest.raises(ValueError, match="query_pos <= key_pos"):
        flash_attention(k, q, q[..., :6], causal=True)
    with without_annotation_checks():
        with pytest.raises(ValueError, match="causal must be a bool"):
            flash_attention(q, k, v, causal="yes")
        with pytest.raises(ValueError, match="^q must be a floating-point"):
            flash_attention(q.long(), k, v)
        with pytest.raises(ValueError, match="k must have q's d_head"):
            flash_attention(q, k[..., :5], v)
        with pytest.raises(ValueError, match="v must have one row per key"):
            flash_attention(q, k, v[:, :5])
        with pytest.raises(ValueError, match="share one dtype"):
            flash_attention(q, k.double(), v)
        with pytest.raises(ValueError, match="leading"):
            flash_attention(q, k.expand(2, 6, 8), v.expand(2, 6, 6))
        with pytest.raises(ValueError, match="at least one position"):
            flash_attention(q, k[:, :0], v[:, :0])
