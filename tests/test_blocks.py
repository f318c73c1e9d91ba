"""Residual blocks: each norm placement against its formula, written with the block's own modules."""

from __future__ import annotations

import pytest
import torch

from tutorial_lib.attention import padding_mask
from tutorial_lib.blocks import DecoderBlock, NormPlacement, Residual, TransformerBlock, make_feed_forward, make_norm
from tutorial_lib.feed_forward import FeedForward, SwiGLU
from tutorial_lib.normalization import LayerNorm, RMSNorm

TOL = {"atol": 1e-5, "rtol": 0.0}
D_MODEL, N_HEADS, D_FF = 16, 4, 40


def randomise_(module: torch.nn.Module) -> torch.nn.Module:
    """Norm gains away from 1 and biases away from 0, so that a norm applied in the wrong place shows."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(1.0 if p.dim() == 1 else 0.0, 0.3)
    return module


def sublayer_formula(placement: NormPlacement, residual: Residual, x: torch.Tensor, sublayer) -> torch.Tensor:
    """§3.1 and its variants, written out: the reference the block is held to."""
    if placement is NormPlacement.POST:
        return residual.norm(x + sublayer(x))
    if placement is NormPlacement.PRE:
        return x + sublayer(residual.norm(x))
    return x + residual.norm_out(sublayer(residual.norm(x)))


@pytest.mark.parametrize("placement", list(NormPlacement))
@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_transformer_block_matches_its_formula(placement, norm):
    block = randomise_(TransformerBlock(D_MODEL, N_HEADS, D_FF, placement=placement, norm=norm, activation="gelu")).eval()
    x = torch.randn(2, 6, D_MODEL)
    mask = padding_mask(torch.tensor([6, 4]), 6)
    h = sublayer_formula(placement, block.attn_residual, x, lambda t: block.attn(t, mask=mask, causal=True))
    expected = sublayer_formula(placement, block.ffn_residual, h, block.ffn)
    torch.testing.assert_close(block(x, mask=mask, causal=True), expected, **TOL)
    assert isinstance(block.attn_residual.norm, LayerNorm if norm == "layer" else RMSNorm)


def test_the_three_placements_differ():
    """With the same weights, the placements are different functions (the formula test cannot pass by accident)."""
    x = torch.randn(2, 5, D_MODEL)
    reference = randomise_(TransformerBlock(D_MODEL, N_HEADS, D_FF, placement=NormPlacement.SANDWICH)).eval()
    outputs = []
    for placement in NormPlacement:
        block = TransformerBlock(D_MODEL, N_HEADS, D_FF, placement=placement).eval()
        block.load_state_dict(reference.state_dict(), strict=False)  # POST and PRE have no norm_out
        outputs.append(block(x))
    for i in range(3):
        assert not torch.allclose(outputs[i], outputs[(i + 1) % 3], atol=1e-3)


@pytest.mark.parametrize("placement", list(NormPlacement))
def test_decoder_block_matches_its_formula(placement):
    block = randomise_(DecoderBlock(D_MODEL, N_HEADS, D_FF, placement=placement)).eval()
    x, memory = torch.randn(2, 5, D_MODEL), torch.randn(2, 7, D_MODEL)
    memory_mask = padding_mask(torch.tensor([7, 3]), 7)
    h = sublayer_formula(placement, block.self_attn_residual, x, lambda t: block.self_attn(t, causal=True))
    h = sublayer_formula(placement, block.cross_attn_residual, h, lambda t: block.cross_attn(t, memory, mask=memory_mask))
    expected = sublayer_formula(placement, block.ffn_residual, h, block.ffn)
    torch.testing.assert_close(block(x, memory, memory_mask=memory_mask), expected, **TOL)


def test_causal_block_does_not_see_the_future():
    block = randomise_(TransformerBlock(D_MODEL, N_HEADS, D_FF, placement=NormPlacement.PRE)).eval()
    x = torch.randn(1, 6, D_MODEL)
    changed = x.clone()
    changed[:, 4:] = torch.randn(1, 2, D_MODEL)
    torch.testing.assert_close(block(changed, causal=True)[:, :4], block(x, causal=True)[:, :4], **TOL)
    assert not torch.allclose(block(changed)[:, :4], block(x)[:, :4]), "without causal=True the future is visible"


def test_decoder_self_attention_is_causal():
    block = randomise_(DecoderBlock(D_MODEL, N_HEADS, D_FF)).eval()
    x, memory = torch.randn(1, 6, D_MODEL), torch.randn(1, 3, D_MODEL)
    changed = x.clone()
    changed[:, 5] = torch.randn(D_MODEL)
    torch.testing.assert_close(block(changed, memory)[:, :5], block(x, memory)[:, :5], **TOL)


def test_dropout_acts_on_the_sublayer_output_in_training_only():
    residual = Residual(D_MODEL, NormPlacement.PRE, dropout=0.5)
    x = torch.randn(4, 8, D_MODEL)
    torch.testing.assert_close(residual.eval()(x, lambda t: t * 0.0 + 1.0), x + 1.0, **TOL)
    dropped = residual.train()(x, lambda t: t * 0.0 + 1.0) - x  # the sublayer's ones, dropped (0) or scaled (2)
    assert set(dropped.round(decimals=4).unique().tolist()) == {0.0, 2.0}


def test_factories():
    assert isinstance(make_norm("rms", 8, 1e-6), RMSNorm) and make_norm("layer", 8, 1e-3).eps == 1e-3
    assert isinstance(make_feed_forward("swiglu", 8, 24, bias=False, dropout=0.0), SwiGLU)
    ffn = make_feed_forward("gelu_tanh", 8, 32, bias=True, dropout=0.0)
    assert isinstance(ffn, FeedForward) and ffn.activation == "gelu_tanh"
    assert Residual(8, NormPlacement.SANDWICH).norm_out is not None and Residual(8, NormPlacement.POST).norm_out is None


def test_placement_accepts_its_string_value():
    """``Residual`` converts with ``NormPlacement(placement)``, so "pre" is meant to work (a notebook would write it);
    the annotation ``placement: NormPlacement`` must say so too, or the checked test run rejects it."""
    assert Residual(8, "pre").placement is NormPlacement.PRE
    assert TransformerBlock(8, 2, 16, placement="sandwich").attn_residual.norm_out is not None
    with pytest.raises(ValueError, match="'middle' is not a valid NormPlacement"):
        Residual(8, "middle")


def test_bad_norm():
    with pytest.raises(ValueError, match="norm must be 'layer' or 'rms'"):
        make_norm("batch", 8, 1e-5)
