"""Parameter counting: shared tensors once, the meta device, trainable-only, grouping by module."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

from tutorial_lib.counting import count_parameters, parameters_by_module
from tutorial_lib.models.gpt import GPT, GPTConfig

TINY = GPTConfig(d_vocab=50, n_ctx=16, d_model=32, n_heads=4, n_layers=2)


def test_a_shared_tensor_counts_once():
    first, second = nn.Linear(4, 6, bias=False), nn.Linear(4, 6)
    second.weight = first.weight
    model = nn.Sequential(first, second)
    assert count_parameters(model) == 24 + 6
    assert sum(t.numel() for t in model.state_dict().values()) == 2 * 24 + 6, "the state dict does list it twice"


def test_tied_embeddings_count_once():
    tied, untied = GPT(TINY), GPT(TINY.replace(tie_embeddings=False))
    assert count_parameters(untied) - count_parameters(tied) == TINY.d_vocab * TINY.d_model
    assert count_parameters(tied) == sum(p.numel() for p in {id(p): p for p in tied.parameters()}.values())


def test_meta_device_model():
    with torch.device("meta"):
        model = GPT(TINY)
    assert count_parameters(model) == count_parameters(GPT(TINY))


def test_trainable_only():
    model = GPT(TINY)
    model.embed.weight.requires_grad_(False)  # the tied matrix: embedding and unembedding together
    frozen = TINY.d_vocab * TINY.d_model
    assert count_parameters(model, trainable_only=True) == count_parameters(model) - frozen


def test_parameters_by_module():
    model = GPT(TINY)
    groups = parameters_by_module(model, depth=1)
    assert list(groups) == ["embed", "pos_embed", "blocks", "ln_final"], "the tied unembedding belongs to embed"
    assert groups["embed"] == TINY.d_vocab * TINY.d_model and groups["ln_final"] == 2 * TINY.d_model
    assert sum(groups.values()) == count_parameters(model)
    per_block = parameters_by_module(model, depth=2)
    assert per_block["blocks.0"] == per_block["blocks.1"] == 12 * 32**2 + 13 * 32


def test_bad_input():
    # Unwrapped: as a notebook calls it, without the test run's type-checking hook, which rejects a str first.
    with pytest.raises(ValueError, match="model must be a torch.nn.Module, got str"):
        inspect.unwrap(count_parameters)("GPT")


def test_parameters_by_module_rejects_a_non_positive_depth():
    """depth=0 today returns {"": total}: a silent wrong grouping, not the ValueError that bad input gets."""
    with pytest.raises(ValueError, match="depth"):
        parameters_by_module(GPT(TINY), depth=0)
