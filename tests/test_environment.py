"""Seeding and device choice (chapter 00), and the test run's own set-up: jaxtyping's run-time checks are on."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from tutorial_lib.attention import scaled_dot_product_attention
from tutorial_lib.environment import pick_device, seed_everything, setup_notebook


def draws() -> tuple[float, float, torch.Tensor]:
    return random.random(), float(np.random.rand()), torch.randn(4)


def test_seed_everything_makes_every_generator_repeat():
    seed_everything(123)
    first = draws()
    seed_everything(123)
    again = draws()
    seed_everything(124)
    other = draws()
    assert first[:2] == again[:2] and torch.equal(first[2], again[2])
    assert first[0] != other[0] and first[1] != other[1] and not torch.equal(first[2], other[2])


def test_seed_everything_returns_a_generator_seeded_the_same_way():
    generator = seed_everything(7)
    assert torch.equal(torch.randn(5, generator=generator), torch.randn(5, generator=torch.Generator().manual_seed(7)))
    assert torch.equal(torch.rand(3, generator=setup_notebook(7)), torch.rand(3, generator=torch.Generator().manual_seed(7)))


@pytest.mark.parametrize("seed", [-1, True])
def test_bad_seed(seed):
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        seed_everything(seed)


def test_pick_device_from_the_environment(monkeypatch):
    monkeypatch.setenv("TUTORIAL_LIB_DEVICE", "cpu")
    assert pick_device() == torch.device("cpu")
    monkeypatch.delenv("TUTORIAL_LIB_DEVICE")
    expected = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    assert pick_device().type == expected
    assert pick_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_pick_device_refuses_a_missing_device(monkeypatch):
    monkeypatch.setenv("TUTORIAL_LIB_DEVICE", "cuda")
    with pytest.raises(ValueError, match="prefer='cuda' but no CUDA device is available"):
        pick_device()


def test_jaxtyping_runtime_checks_are_active():
    """The suite relies on the jaxtyping import hook (pyproject's ``--jaxtyping-packages``). Here the value tensor has
    a different batch than the queries: PyTorch would broadcast it silently, only the annotation
    ``*batch key_pos d_value`` rejects it. If the hook is off, this test fails."""
    from jaxtyping import TypeCheckError

    q, k = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    v = torch.randn(1, 3, 4)
    with pytest.raises(TypeCheckError, match="parameter 'v'"):
        scaled_dot_product_attention(q, k, v)
    with pytest.raises(TypeCheckError, match="parameter 'k'"):
        scaled_dot_product_attention(q, torch.randn(2, 3, 5), torch.randn(2, 3, 4))  # d_head 4 vs 5
