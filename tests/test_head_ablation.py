"""Knocking heads out (chapter 04): checked against the same removal done to the weights, and against a head's output
computed by hand."""

from __future__ import annotations

import pytest
import torch

from tutorial_lib.attention import causal_attention
from tutorial_lib.head_ablation import ablated_heads, mean_head_outputs
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.multi_head import merge_heads

CFG = GPTConfig(d_vocab=11, n_ctx=8, d_model=16, n_heads=4, n_layers=2)


def model_and_tokens(seed: int = 0) -> tuple[GPT, torch.Tensor]:
    torch.manual_seed(seed)
    model = GPT(CFG).eval()
    with torch.no_grad():
        for p in model.parameters():  # biases too, so that a head's zero output differs from its value bias
            p.add_(0.1 * torch.randn_like(p))
    return model, torch.randint(CFG.d_vocab, (3, CFG.n_ctx))


@torch.no_grad()
def test_zero_ablation_equals_a_head_whose_values_are_zero():
    # A head whose W^V rows and bias are zero outputs zero whatever it attends to: the same removal, in the weights.
    model, tokens = model_and_tokens()
    with ablated_heads(model, [(1, 2), (0, 0)]):
        hooked = model(tokens)
    edited, _ = model_and_tokens()
    d_head = CFG.d_head
    for layer, head in [(1, 2), (0, 0)]:
        rows = slice(head * d_head, (head + 1) * d_head)
        edited.blocks[layer].attn.v_proj.weight[rows] = 0.0
        edited.blocks[layer].attn.v_proj.bias[rows] = 0.0
    torch.testing.assert_close(hooked, edited(tokens), atol=1e-6, rtol=0)
    assert (hooked - model(tokens)).abs().max() > 1e-3  # the removal changed something


@torch.no_grad()
def test_the_model_is_restored_after_the_block_even_on_error():
    model, tokens = model_and_tokens()
    before = model(tokens)
    with pytest.raises(RuntimeError), ablated_heads(model, [(0, 1)]):
        raise RuntimeError("inside")
    assert torch.equal(model(tokens), before)
    assert all(not block.attn.out_proj._forward_pre_hooks for block in model.blocks)


@torch.no_grad()
def test_mean_head_outputs_match_the_heads_computed_by_hand():
    model, tokens = model_and_tokens(1)
    means = mean_head_outputs(model, tokens)
    assert means.shape == (CFG.n_layers, CFG.n_heads, CFG.d_head)
    x = model.embed(tokens) + model.pos_embed(tokens.shape[1])
    block = model.blocks[0]
    q, k, v = block.attn._heads(block.attn_residual.norm(x), None, None)
    by_hand = merge_heads(causal_attention(q, k, v)).mean(dim=(0, 1)).view(CFG.n_heads, CFG.d_head)
    torch.testing.assert_close(means[0], by_hand, atol=1e-6, rtol=0)


@torch.no_grad()
def test_mean_ablation_writes_the_mean_into_the_head_slice_only():
    model, tokens = model_and_tokens(2)
    means = mean_head_outputs(model, tokens)
    seen = {}
    with ablated_heads(model, [(1, 3)], means):  # pre-hooks run in order: this one sees the ablated input
        handle = model.blocks[1].attn.out_proj.register_forward_pre_hook(lambda m, args: seen.update(z=args[0].clone()))
        model(tokens)
    handle.remove()
    d_head = CFG.d_head
    z = seen["z"]
    assert torch.equal(z[..., 3 * d_head:], means[1, 3].expand_as(z[..., 3 * d_head:]))
    handle = model.blocks[1].attn.out_proj.register_forward_pre_hook(lambda m, args: seen.update(clean=args[0].clone()))
    model(tokens)
    handle.remove()
    assert torch.equal(z[..., : 3 * d_head], seen["clean"][..., : 3 * d_head])
    assert not torch.equal(z, seen["clean"])


@pytest.mark.parametrize("heads", [[(2, 0)], [(0, 4)], [(-1, 0)]])
def test_heads_outside_the_model_are_refused(heads):
    model, _ = model_and_tokens()
    with pytest.raises(ValueError, match="heads"), ablated_heads(model, heads):
        pass


def test_bad_means_and_models_are_refused():
    model, tokens = model_and_tokens()
    with pytest.raises(ValueError, match="means"), ablated_heads(model, [(0, 0)], torch.zeros(3, 4, 4)):
        pass
    with pytest.raises(ValueError, match="blocks"):
        mean_head_outputs(torch.nn.Linear(2, 2), tokens)
