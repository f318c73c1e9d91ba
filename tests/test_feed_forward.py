"""The position-wise feed-forward network and SwiGLU against their formulas written out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from tutorial_lib.feed_forward import FeedForward, SwiGLU

TOL = {"atol": 1e-5, "rtol": 0.0}


def randomise_(module: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.5)
    return module


def erf_gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def gpt2_gelu(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's ``gelu`` (openai/gpt-2, model.py): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))."""
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize(
    "activation, formula", [("relu", lambda x: x.clamp(min=0)), ("gelu", erf_gelu), ("gelu_tanh", gpt2_gelu)]
)
def test_feed_forward_matches_eq_2(activation, formula):
    ffn = randomise_(FeedForward(16, 48, activation=activation))
    x = torch.randn(2, 5, 16)
    hidden = formula(x @ ffn.up.weight.T + ffn.up.bias)
    expected = hidden @ ffn.down.weight.T + ffn.down.bias
    torch.testing.assert_close(ffn(x), expected, **TOL)


def test_gelu_tanh_is_not_the_exact_gelu():
    """The two GELUs differ by more than the tolerance, so the test above tells them apart."""
    x = torch.linspace(-4, 4, 101)
    assert (gpt2_gelu(x) - erf_gelu(x)).abs().max() > 1e-4


def test_feed_forward_without_bias_and_with_dropout():
    ffn = randomise_(FeedForward(8, 32, bias=False, dropout=0.5))
    assert ffn.up.bias is None and ffn.down.bias is None
    x = torch.randn(3, 8)
    expected = torch.relu(x @ ffn.up.weight.T) @ ffn.down.weight.T
    torch.testing.assert_close(ffn.eval()(x), expected, **TOL)
    assert not torch.allclose(ffn.train()(x), expected), "dropout must act in training mode"


def test_swiglu_matches_formula():
    ffn = randomise_(SwiGLU(16, 40))
    x = torch.randn(2, 5, 16)
    gate = x @ ffn.gate.weight.T
    expected = (gate * torch.sigmoid(gate) * (x @ ffn.up.weight.T)) @ ffn.down.weight.T
    torch.testing.assert_close(ffn(x), expected, **TOL)
    assert all(m.bias is None for m in (ffn.gate, ffn.up, ffn.down))


def test_swiglu_with_eight_thirds_width_has_the_parameters_of_a_four_times_ffn():
    d_model = 96
    swiglu = SwiGLU(d_model, 8 * d_model // 3)
    plain = FeedForward(d_model, 4 * d_model, bias=False)
    assert sum(p.numel() for p in swiglu.parameters()) == sum(p.numel() for p in plain.parameters())


def test_unknown_activation():
    with pytest.raises(ValueError, match="activation must be one of"):
        FeedForward(8, 32, activation="swish")
