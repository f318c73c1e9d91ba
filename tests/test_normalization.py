"""LayerNorm and RMSNorm against ``nn.LayerNorm`` / ``nn.RMSNorm`` with random weights copied across."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tutorial_lib.normalization import LayerNorm, RMSNorm

TOL = {"atol": 1e-5, "rtol": 0.0}

# (shape, eps, input scale). Every case is one where the classic LayerNorm mistakes change the output by far more
# than the tolerance (checked below): a small scale makes the variance comparable to eps, where eps's place matters;
# a large eps does the same at unit scale; d_model up to 1024 keeps the d vs d - 1 divisor visible.
CASES = [((2, 3, 16), 1e-5, 0.01), ((4, 16), 1e-5, 0.1), ((2, 5, 33), 1e-3, 1.0), ((3, 1024), 1e-2, 1.0), ((8,), 1e-6, 0.003)]
# The everyday case, where eps's place hardly shows: parity only.
TYPICAL = ((2, 7, 64), 1e-5, 1.0)


def make_input(shape, scale):
    return (torch.randn(*shape) * scale + 0.5 * scale).requires_grad_()


def copied(ours: nn.Module, ref: nn.Module) -> nn.Module:
    """Randomise our weight (and bias) away from 1 and 0, then load them into PyTorch's module."""
    with torch.no_grad():
        for p in ours.parameters():
            p.copy_(torch.randn_like(p) * 0.5 + 1.0)
    ref.load_state_dict(ours.state_dict(), strict=True)
    return ref


def assert_same_outputs_and_gradients(ours: nn.Module, ref: nn.Module, x: torch.Tensor) -> None:
    y, y_ref = ours(x), ref(x)
    torch.testing.assert_close(y, y_ref, **TOL)
    upstream = torch.randn_like(y)  # a random upstream gradient, not the sum (whose gradient w.r.t. x is ~0 for LN)
    grads = torch.autograd.grad(y, [x, *ours.parameters()], upstream)
    grads_ref = torch.autograd.grad(y_ref, [x, *ref.parameters()], upstream)
    for g, g_ref in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(g, g_ref, atol=1e-4, rtol=1e-5)  # parameter gradients sum over rows: looser


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("shape, eps, scale", [*CASES, TYPICAL])
def test_layer_norm_matches_pytorch(shape, eps, scale, fast):
    x = make_input(shape, scale)  # drawn first: the very inputs of the tolerance test below
    ours = LayerNorm(shape[-1], eps, fast=fast)
    assert_same_outputs_and_gradients(ours, copied(ours, nn.LayerNorm(shape[-1], eps=eps)), x)


@pytest.mark.parametrize("fast", [False, True])
def test_layer_norm_without_bias_matches_pytorch(fast):
    ours = LayerNorm(16, bias=False, fast=fast)
    assert ours.bias is None
    ref = copied(ours, nn.LayerNorm(16, bias=False))
    assert_same_outputs_and_gradients(ours, ref, make_input((3, 16), 1.0))


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("shape, eps, scale", [*CASES, TYPICAL])
def test_rms_norm_matches_pytorch(shape, eps, scale, fast):
    x = make_input(shape, scale)
    ours = RMSNorm(shape[-1], eps, fast=fast)
    assert_same_outputs_and_gradients(ours, copied(ours, nn.RMSNorm(shape[-1], eps=eps)), x)


@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm])
def test_fast_path_equals_the_formula(cls):
    """The fused kernel and the from-scratch formula: same outputs and gradients, so ``fast`` changes speed only."""
    x = make_input((4, 9, 32), 1.0)
    formula = cls(32)
    fast = copied(formula, cls(32, fast=True))
    assert_same_outputs_and_gradients(fast, formula, x)
    assert "fast=True" in repr(fast) and "fast" not in repr(formula)


def test_default_eps():
    assert LayerNorm(4).eps == 1e-5 == nn.LayerNorm(4).eps  # as PyTorch's (and GPT-2's)
    assert RMSNorm(4).eps == 1e-6  # LLaMA's


@pytest.mark.parametrize("shape, eps, scale", CASES)
def test_the_tolerance_catches_the_classic_layer_norm_mistakes(shape, eps, scale):
    """The parity test above would fail for an unbiased variance or eps outside the root, on these very inputs
    (same seed, same first draw), even before the random weight and bias."""
    x = make_input(shape, scale).detach()
    reference = nn.functional.layer_norm(x, shape[-1:], eps=eps)
    centred = x - x.mean(dim=-1, keepdim=True)
    unbiased = centred / torch.sqrt(x.var(dim=-1, unbiased=True, keepdim=True) + eps)
    eps_outside = centred / (x.std(dim=-1, unbiased=False, keepdim=True) + eps)
    for name, wrong in (("unbiased variance", unbiased), ("eps outside the root", eps_outside)):
        gap = (wrong - reference).abs().max().item()
        assert gap > 10 * TOL["atol"], f"{name} differs by only {gap:.1e} for shape={shape}, eps={eps}, scale={scale}"


def test_output_statistics():
    """With unit weight and zero bias: zero mean and unit (biased) variance per row; RMSNorm: unit mean square."""
    x = torch.randn(4, 7, 64) * 3 + 2
    y = LayerNorm(64, eps=1e-12)(x)
    torch.testing.assert_close(y.mean(-1), torch.zeros(4, 7), **TOL)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(4, 7), **TOL)
    z = RMSNorm(64, eps=1e-12)(x)
    torch.testing.assert_close(z.pow(2).mean(-1), torch.ones(4, 7), **TOL)


@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm])
@pytest.mark.parametrize("d_model, eps, argument", [(0, 1e-5, "d_model"), (8, 0.0, "eps"), (8, -1e-5, "eps")])
def test_bad_arguments(cls, d_model, eps, argument):
    with pytest.raises(ValueError, match=argument):
        cls(d_model, eps)
