"""Scaled dot-product attention and its masks, against ``F.scaled_dot_product_attention`` and exact mask values."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.attention import (
    attention,
    bidirectional_mask,
    causal_attention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
    sliding_window_mask,
)

TOL = {"atol": 1e-5, "rtol": 0.0}


def qkv(*batch: int, query_pos: int = 5, key_pos: int = 5, d_head: int = 8, d_value: int = 8, grad: bool = False):
    q = torch.randn(*batch, query_pos, d_head, requires_grad=grad)
    k = torch.randn(*batch, key_pos, d_head, requires_grad=grad)
    v = torch.randn(*batch, key_pos, d_value, requires_grad=grad)
    return q, k, v


def random_mask(*shape: int, p: float = 0.5) -> torch.Tensor:
    """A random boolean mask in which every query keeps at least one key (fully masked rows are tested apart)."""
    mask = torch.rand(*shape) < p
    first_key = torch.zeros_like(mask)
    first_key[..., torch.randint(shape[-1], ()).item()] = True
    return mask | (first_key & ~mask.any(dim=-1, keepdim=True))


# ------------------------------------------------------------------------------ parity with PyTorch


@pytest.mark.parametrize(
    "batch, query_pos, key_pos, d_head, d_value",
    [((), 5, 5, 8, 8), ((3,), 4, 7, 16, 16), ((2, 4), 6, 6, 8, 3), ((2, 3), 1, 9, 32, 32), ((2, 3), 9, 2, 4, 4)],
)
def test_matches_pytorch_without_mask(batch, query_pos, key_pos, d_head, d_value):
    # d_value != d_head catches a scale by the wrong width; query_pos != key_pos catches a transposed softmax axis.
    q, k, v = qkv(*batch, query_pos=query_pos, key_pos=key_pos, d_head=d_head, d_value=d_value)
    out, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), **TOL)
    assert weights.shape == (*batch, query_pos, key_pos)


@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
def test_matches_pytorch_causal(batch):
    q, k, v = qkv(*batch, query_pos=6, key_pos=6)
    out, _ = scaled_dot_product_attention(q, k, v, causal_mask(6))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), **TOL)


@pytest.mark.parametrize(
    "batch, mask_shape", [((2, 3), (2, 3, 5, 7)), ((2, 3), (2, 1, 5, 7)), ((2, 3), (5, 7)), ((4,), (4, 5, 7))]
)
def test_matches_pytorch_random_boolean_mask(batch, mask_shape):
    q, k, v = qkv(*batch, query_pos=5, key_pos=7)
    mask = random_mask(*mask_shape)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **TOL)
    assert not weights.masked_select(~mask.expand_as(weights)).any(), "a masked key received weight"


def test_gradients_match_pytorch():
    q, k, v = qkv(2, 3, query_pos=5, key_pos=6, grad=True)
    mask = random_mask(2, 1, 5, 6)
    ours = torch.autograd.grad(scaled_dot_product_attention(q, k, v, mask)[0].pow(2).sum(), (q, k, v))
    ref = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, attn_mask=mask).pow(2).sum(), (q, k, v))
    for name, g_ours, g_ref in zip("qkv", ours, ref, strict=True):
        torch.testing.assert_close(g_ours, g_ref, **TOL, msg=f"gradient w.r.t. {name}")


def test_weights_sum_to_one_over_keys():
    q, k, v = qkv(2, 3, query_pos=5, key_pos=7)
    _, weights = scaled_dot_product_attention(q, k, v, random_mask(2, 3, 5, 7))
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2, 3, 5), **TOL)
    assert (weights >= 0).all()


def test_weights_are_softmax_of_scaled_scores():
    """The weights themselves, against Eq. (1) written out in float64."""
    q, k, v = qkv(2, query_pos=4, key_pos=6, d_head=16)
    _, weights = scaled_dot_product_attention(q, k, v)
    expected = torch.softmax(q.double() @ k.double().transpose(-2, -1) / 16**0.5, dim=-1)
    torch.testing.assert_close(weights.double(), expected, **TOL)


def test_fully_masked_row_gives_zeros_not_nan():
    q, k, v = qkv(2, query_pos=4, key_pos=5, grad=True)
    mask = random_mask(2, 4, 5)
    mask[0, 2] = False  # query 2 of the first sequence may attend to nothing
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(out[0, 2], torch.zeros(8)) and torch.equal(weights[0, 2], torch.zeros(5))
    # The other rows are untouched by the special case.
    keep = torch.ones(2, 4, dtype=torch.bool)
    keep[0, 2] = False
    torch.testing.assert_close(out[keep], F.scaled_dot_product_attention(q, k, v, attn_mask=mask)[keep], **TOL)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)


# ------------------------------------------------------------------------------ the fast path


@pytest.mark.parametrize("with_mask", [False, True])
def test_fast_path_matches_readable_path(with_mask):
    q, k, v = qkv(2, 3, query_pos=5, key_pos=7, d_value=4, grad=True)
    mask = random_mask(2, 1, 5, 7) if with_mask else None
    slow, fast = attention(q, k, v, mask), attention(q, k, v, mask, fast=True)
    torch.testing.assert_close(fast, slow, **TOL)
    g_slow = torch.autograd.grad(slow.sum(), (q, k, v))
    g_fast = torch.autograd.grad(fast.sum(), (q, k, v))
    for g_s, g_f in zip(g_slow, g_fast, strict=True):
        torch.testing.assert_close(g_f, g_s, **TOL)


def test_fast_path_fully_masked_rows():
    q, k, v = qkv(2, 3, query_pos=4, key_pos=6)
    mask = random_mask(2, 3, 4, 6)
    mask[1, 2, 0] = False
    mask[0, :, 3] = False
    fast = attention(q, k, v, mask, fast=True)
    assert torch.isfinite(fast).all()
    torch.testing.assert_close(fast, attention(q, k, v, mask), **TOL)
    assert torch.equal(fast[1, 2, 0], torch.zeros(8))


# ------------------------------------------------------------------------------ causal attention with an offset


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("n_query", [1, 3, 7])
def test_causal_attention_with_cached_keys_equals_slice_of_full(fast, n_query):
    """Queries that are the last ``n_query`` of 7 positions see exactly what they saw in the full causal pass."""
    q, k, v = qkv(2, 3, query_pos=7, key_pos=7)
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out = causal_attention(q[..., -n_query:, :], k, v, fast=fast)
    torch.testing.assert_close(out, full[..., -n_query:, :], **TOL)


# ------------------------------------------------------------------------------ mask values


def test_causal_mask_values():
    assert torch.equal(causal_mask(5), torch.ones(5, 5).tril().bool())
    assert causal_mask(1).tolist() == [[True]]


def test_causal_mask_with_past():
    mask = causal_mask(3, n_past=2)
    assert mask.shape == (3, 5)
    expected = torch.tensor([[k <= q + 2 for k in range(5)] for q in range(3)])
    assert torch.equal(mask, expected)
    # The last rows of the full mask, as a cache needs them.
    assert torch.equal(mask, causal_mask(5)[2:])


def test_padding_mask_values():
    mask = padding_mask(torch.tensor([3, 0, 5]), 5)
    assert mask.shape == (3, 1, 5)
    expected = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(mask[:, 0], expected)


def test_sliding_window_mask_values():
    mask = sliding_window_mask(6, 3)
    expected = torch.tensor([[q - 3 < k <= q for k in range(6)] for q in range(6)])
    assert torch.equal(mask, expected)
    assert mask.sum(dim=-1).tolist() == [1, 2, 3, 3, 3, 3]
    assert torch.equal(sliding_window_mask(4, 4), causal_mask(4)), "a window as long as the sequence is causal"


def test_bidirectional_mask_values():
    mask = bidirectional_mask(4)
    assert mask.dtype == torch.bool and mask.shape == (4, 4) and mask.all()


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: causal_mask(0), "seq_len"),
        (lambda: causal_mask(3, n_past=-1), "n_past"),
        (lambda: sliding_window_mask(4, 0), "window"),
        (lambda: bidirectional_mask(0), "seq_len"),
        (lambda: padding_mask(torch.tensor([2, 6]), 5), "lengths"),
        (lambda: padding_mask(torch.tensor([2, -1]), 5), "lengths"),
    ],
)
def test_mask_bad_input(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_wrong_dtypes_are_rejected_with_value_errors():
    # Unwrapped: the functions as a notebook calls them, without the test run's jaxtyping hook (which rejects these
    # dtypes first); their own ValueError is what a reader sees.
    with pytest.raises(ValueError, match="lengths must be an integer tensor"):
        inspect.unwrap(padding_mask)(torch.tensor([2.0, 1.0]), 5)
    sdpa = inspect.unwrap(scaled_dot_product_attention)
    q, k, v = qkv(query_pos=3, key_pos=3)
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        sdpa(q, k, v, torch.ones(3, 3))
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        inspect.unwrap(attention)(q, k, v, torch.ones(3, 3), fast=True)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda q, k, v: (q[0, 0], k, v), "q must have shape \\(batch axes, positions, features\\), at least 2-D, got \\(8,\\)"),
        (lambda q, k, v: (q, k[..., :2], v), "k's last axis \\(d_head\\) must equal q's"),
        (lambda q, k, v: (q, k, v[:, :2]), "v must have one row per key"),
        (lambda q, k, v: (q, k.repeat(3, 1, 1), v.repeat(3, 1, 1)), "the batch axes of q, k and v do not broadcast"),
        (lambda q, k, v: (q, k.double(), v), "q, k and v must share one dtype"),
        (lambda q, k, v: (q.long(), k, v), "q must be a floating-point tensor"),
        (lambda q, k, v: ([[1.0]], k, v), "q must be a tensor, got list"),
    ],
    ids=["1-D q", "d_head", "v rows", "batch", "dtypes", "integer q", "list"],
)
def test_attention_names_the_argument_that_is_wrong(make, message):
    q, k, v = qkv(2, query_pos=3, key_pos=5)
    with pytest.raises(ValueError, match=message):
        inspect.unwrap(scaled_dot_product_attention)(*make(q, k, v))


def test_a_mask_that_does_not_broadcast_to_the_scores_is_named():
    q, k, v = qkv(query_pos=3, key_pos=5)
    with pytest.raises(ValueError, match=r"mask must broadcast to the scores' shape \(3, 5\) \(batch axes, query_pos, key_pos\), got \(3, 3\)"):
        inspect.unwrap(scaled_dot_product_attention)(q, k, v, torch.ones(3, 3, dtype=torch.bool))


def test_masks_take_numpy_integers_and_padding_mask_takes_a_list():
    np = pytest.importorskip("numpy")
    # Unwrapped: the test run's jaxtyping hook would refuse np.int64 for an `int` annotation before the function does.
    assert torch.equal(inspect.unwrap(causal_mask)(np.int64(4)), causal_mask(4))
    assert torch.equal(inspect.unwrap(padding_mask)(torch.tensor([2, 3]), np.int64(5)), padding_mask(torch.tensor([2, 3]), 5))
    assert torch.equal(inspect.unwrap(padding_mask)([2, 3], 5), padding_mask(torch.tensor([2, 3]), 5))
    with pytest.raises(ValueError, match="lengths must be a 1-D integer tensor or list .* got 'x'"):
        inspect.unwrap(padding_mask)("x", 5)
    with pytest.raises(ValueError, match="seq_len must be a positive int, got True"):
        inspect.unwrap(causal_mask)(True)


def test_a_long_argument_is_shortened_in_the_message():
    with pytest.raises(ValueError, match=r"got \[0, 1, 2, .*… \(\d+ characters\)$") as error:
        padding_mask(torch.arange(1000), 5)
    assert len(str(error.value)) < 160
