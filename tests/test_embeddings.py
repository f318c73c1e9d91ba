"""Token embeddings, learned positions and the sinusoidal encoding of §3.5, computed independently in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tutorial_lib.embeddings import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    check_token_ids,
    sinusoidal_positional_encoding,
)

TOL = {"atol": 1e-5, "rtol": 0.0}


def paper_pe(pos: int, dim: int, d_model: int) -> float:
    """§3.5, element by element: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same angle)."""
    two_i = dim - dim % 2
    angle = pos / np.float64(10000) ** (two_i / d_model)
    return float(np.sin(angle) if dim % 2 == 0 else np.cos(angle))


@pytest.mark.parametrize("d_model", [4, 7, 33, 512])
def test_sinusoidal_values_match_the_paper(d_model):
    n_ctx = 2048
    pe = sinusoidal_positional_encoding(n_ctx, d_model)
    assert pe.shape == (n_ctx, d_model) and pe.dtype == torch.float32
    for pos in (0, 1, 2, 17, 100, 1000, 2047):
        expected = torch.tensor([paper_pe(pos, dim, d_model) for dim in range(d_model)])
        torch.testing.assert_close(pe[pos], expected, **TOL, msg=f"position {pos}")


def test_sinusoidal_first_row_and_first_columns():
    pe = sinusoidal_positional_encoding(10, 6)
    assert pe[0].tolist() == [0.0, 1.0] * 3  # sin(0), cos(0)
    torch.testing.assert_close(pe[:, 0], torch.sin(torch.arange(10.0)), **TOL)  # the fastest pair: angle = pos


@pytest.mark.parametrize("k", [1, 5, 40])
def test_a_shift_by_k_is_a_rotation_of_each_frequency_pair(k):
    """§3.5's motivation: PE(pos + k) is a linear function of PE(pos), one 2×2 rotation by k·ω_i per pair,
    the same matrix for every pos."""
    d_model = 16
    pe = sinusoidal_positional_encoding(200, d_model)
    omega = 1.0 / 10000 ** (np.arange(0, d_model, 2) / d_model)
    for i, w in enumerate(omega):
        c, s = math.cos(k * w), math.sin(k * w)
        rotation = torch.tensor([[c, s], [-s, c]], dtype=torch.float32)  # [sin, cos](a + b) = R(b) [sin, cos](a)
        pair = pe[:, 2 * i : 2 * i + 2]
        torch.testing.assert_close(pair[:-k] @ rotation.T, pair[k:], **TOL, msg=f"frequency pair {i}")


def test_sinusoidal_module_is_a_fixed_buffer_with_offset():
    module = SinusoidalPositionalEncoding(16, 8)
    assert list(module.parameters()) == [] and "pe" in dict(module.named_buffers())
    assert "pe" not in module.state_dict(), "a table recomputed from the formula is not saved"
    assert torch.equal(module(4, offset=3), sinusoidal_positional_encoding(16, 8)[3:7])
    with pytest.raises(ValueError, match="n_ctx=16"):
        module(4, offset=13)


def test_token_embedding_lookup_and_scale():
    tokens = torch.tensor([[3, 0, 9], [9, 9, 1]])
    plain = TokenEmbedding(10, 64)
    assert torch.equal(plain(tokens), plain.weight[tokens])
    scaled = TokenEmbedding(10, 64, scale=True)
    torch.testing.assert_close(scaled(tokens), scaled.weight[tokens] * 8.0, **TOL)  # √64, §3.4


def test_scaled_embedding_has_unit_scale_at_init():
    """With scale=True the table starts at std 1/√d_model, so the scaled vectors have std ≈ 1 (like the PE's)."""
    out = TokenEmbedding(1000, 256, scale=True)(torch.arange(1000)[None])
    assert abs(out.std().item() - 1.0) < 0.01  # 256,000 draws: the std's standard error is ~0.0014


def test_learned_positions_with_offset():
    pos = LearnedPositionalEmbedding(8, 4)
    assert torch.equal(pos(3), pos.weight[:3])
    assert torch.equal(pos(3, offset=5), pos.weight[5:8])
    with pytest.raises(ValueError, match="n_ctx=8"):
        pos(9)
    with pytest.raises(ValueError, match="n_ctx=8"):
        pos(2, offset=7)


@pytest.mark.parametrize("bad", [10, -1])
def test_token_ids_out_of_range(bad):
    tokens = torch.tensor([[1, 2, bad]])
    with pytest.raises(ValueError, match=rf"tokens must be ids in \[0, d_vocab=10\), got {bad}"):
        TokenEmbedding(10, 4)(tokens)


def test_token_ids_must_be_integers():
    with pytest.raises(ValueError, match="tokens must be an integer"):
        check_token_ids(torch.tensor([[1.0, 2.0]]), 10)


@pytest.mark.parametrize("n_ctx, d_model, argument", [(0, 8, "n_ctx"), (8, 0, "d_model")])
def test_sinusoidal_bad_sizes(n_ctx, d_model, argument):
    with pytest.raises(ValueError, match=argument):
        sinusoidal_positional_encoding(n_ctx, d_model)


def test_the_base_sets_the_longest_wavelength():
    pe = sinusoidal_positional_encoding(50, 8, base=100.0)
    expected = torch.tensor([[paper_pe_base(pos, dim, 8, 100.0) for dim in range(8)] for pos in range(50)])
    torch.testing.assert_close(pe, expected, **TOL)
    assert torch.equal(sinusoidal_positional_encoding(50, 8), sinusoidal_positional_encoding(50, 8, base=10000))


def paper_pe_base(pos: int, dim: int, d_model: int, base: float) -> float:
    two_i = dim - dim % 2
    angle = pos / np.float64(base) ** (two_i / d_model)
    return float(np.sin(angle) if dim % 2 == 0 else np.cos(angle))


@pytest.mark.parametrize("base", [1.0, 0.5, -3, True, "10000"])
def test_the_base_must_exceed_one(base, without_annotation_checks):
    with without_annotation_checks(), pytest.raises(ValueError, match="base must be a number greater than 1"):
        sinusoidal_positional_encoding(4, 4, base=base)
