"""GPT against Hugging Face's GPT2LMHeadModel, GPT-2's published sizes, its initialisation, config and input checks."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.blocks import NormPlacement
from tutorial_lib.counting import count_parameters
from tutorial_lib.models.gpt import GPT, GPTConfig

transformers = pytest.importorskip("transformers")

TOL = {"atol": 1e-5, "rtol": 1e-5}  # logits of a randomised model reach ~10: a relative part for float32 rounding
TINY = GPTConfig(d_vocab=50, n_ctx=16, d_model=32, n_heads=4, n_layers=2)


def hf_gpt2(cfg: GPTConfig) -> transformers.GPT2LMHeadModel:
    """A randomly initialised Hugging Face GPT-2 of ``cfg``'s shape, every parameter (biases and norms too) redrawn."""
    hf_cfg = transformers.GPT2Config(
        vocab_size=cfg.d_vocab, n_positions=cfg.n_ctx, n_embd=cfg.d_model, n_layer=cfg.n_layers, n_head=cfg.n_heads,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )
    model = transformers.GPT2LMHeadModel(hf_cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if "ln_" in name and name.endswith("weight") else 0.0, 0.2)
    return model


@pytest.fixture(scope="module")
def hf_model() -> transformers.GPT2LMHeadModel:
    torch.manual_seed(1234)
    return hf_gpt2(TINY)


# ------------------------------------------------------------------------------ Hugging Face parity


@pytest.mark.parametrize("fast_norm", [False, True])
@pytest.mark.parametrize("fast_attention", [False, True])
def test_logits_match_hugging_face_gpt2(hf_model, fast_attention, fast_norm):
    cfg = TINY.replace(fast_attention=fast_attention, fast_norm=fast_norm)
    ours = GPT.from_gpt2_state_dict(hf_model.state_dict(), cfg).eval()
    tokens = torch.randint(0, cfg.d_vocab, (3, cfg.n_ctx))
    with torch.no_grad():
        expected = hf_model(tokens).logits
        torch.testing.assert_close(ours(tokens), expected, **TOL)
        torch.testing.assert_close(ours(tokens[:, :5]), expected[:, :5], **TOL)


def test_loads_the_bare_transformer_state_dict_too(hf_model):
    """``GPT2Model`` (no ``transformer.`` prefix, no ``lm_head``): the unembedding is tied to ``wte``."""
    ours = GPT.from_gpt2_state_dict(hf_model.transformer.state_dict(), TINY).eval()
    tokens = torch.randint(0, TINY.d_vocab, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), hf_model(tokens).logits, **TOL)


def test_untied_config_loads_lm_head_into_its_own_matrix(hf_model):
    ours = GPT.from_gpt2_state_dict(hf_model.state_dict(), TINY.replace(tie_embeddings=False))
    assert ours.unembed.weight is not ours.embed.weight
    assert torch.equal(ours.unembed.weight, hf_model.lm_head.weight)


def test_same_parameter_count_as_hugging_face(hf_model):
    assert count_parameters(GPT(TINY)) == sum(p.numel() for p in hf_model.parameters())


def test_loading_is_strict(hf_model):
    state = hf_model.state_dict()
    missing = {k: v for k, v in state.items() if k != "transformer.h.1.mlp.c_fc.bias"}
    with pytest.raises(KeyError, match="h.1.mlp.c_fc.bias"):
        GPT.from_gpt2_state_dict(missing, TINY)
    extra = {**state, "transformer.h.2.ln_1.weight": torch.ones(TINY.d_model)}
    with pytest.raises(KeyError, match="h.2.ln_1.weight"):
        GPT.from_gpt2_state_dict(extra, TINY)
    wrong_shape = {**state, "transformer.h.0.attn.c_proj.bias": torch.zeros(TINY.d_model + 1)}
    with pytest.raises(ValueError, match=r"h.0.attn.c_proj.bias: expected shape \(32,\)"):
        GPT.from_gpt2_state_dict(wrong_shape, TINY)
    with pytest.raises(ValueError, match="wpe.weight"):
        GPT.from_gpt2_state_dict(state, TINY.replace(n_ctx=32))


def test_tied_config_rejects_a_checkpoint_whose_lm_head_differs_from_wte(hf_model):
    """With ``tie_embeddings=True`` there is one matrix; a checkpoint with two different ones cannot be loaded without
    silently dropping one of them."""
    state = {**hf_model.state_dict(), "lm_head.weight": torch.randn(TINY.d_vocab, TINY.d_model)}
    with pytest.raises((ValueError, KeyError), match="lm_head"):
        GPT.from_gpt2_state_dict(state, TINY)


# ------------------------------------------------------------------------------ sizes


def gpt2_parameter_count(d_vocab: int, n_ctx: int, d_model: int, n_layers: int, *, tied: bool = True) -> int:
    """Per block: W^Q,K,V,O with biases (4d² + 4d), the FFN d→4d→d with biases (8d² + 5d), two norms (4d)."""
    per_block = 12 * d_model**2 + 13 * d_model
    embeddings = d_vocab * d_model * (1 if tied else 2) + n_ctx * d_model
    return n_layers * per_block + embeddings + 2 * d_model  # + the final norm


@pytest.mark.parametrize(
    "size, published", [("small", 124_439_808), ("medium", 354_823_168), ("large", 774_030_080), ("xl", 1_557_611_200)]
)
def test_gpt2_parameter_counts(size, published):
    cfg = GPTConfig.gpt2(size)
    with torch.device("meta"):  # no memory: XL would need 6 GB
        model = GPT(cfg)
    assert all(p.is_meta for p in model.parameters())
    assert count_parameters(model) == published == gpt2_parameter_count(cfg.d_vocab, cfg.n_ctx, cfg.d_model, cfg.n_layers)


def test_untied_gpt2_small_adds_one_embedding_matrix():
    with torch.device("meta"):
        untied = GPT(GPTConfig.gpt2("small", tie_embeddings=False))
    assert count_parameters(untied) == 124_439_808 + 50257 * 768


def test_initial_loss_is_about_log_vocab():
    """A fresh GPT-2 small predicts nearly uniformly. Its logits h·w have variance d_model·0.02² ≈ 0.31 (h, the final
    norm's output, has unit variance; w ~ N(0, 0.02²)), which lifts the expected loss by σ²/2 ≈ 0.15 above ln(d_vocab):
    the loss is ≈ ln(d_vocab) only to 0.2, and ln(d_vocab) + σ²/2 to 0.05."""
    cfg = GPTConfig.gpt2("small")
    model = GPT(cfg).eval()
    tokens = torch.randint(0, cfg.d_vocab, (2, 32))
    with torch.no_grad():
        logits = model(tokens)
    # The loss averaged over every possible target (what random targets give on average, without their sampling noise).
    loss = (logits.logsumexp(dim=-1) - logits.mean(dim=-1)).mean().item()
    random_targets = F.cross_entropy(logits.flatten(0, 1), torch.randint(0, cfg.d_vocab, (64,))).item()
    log_vocab, half_variance = math.log(cfg.d_vocab), cfg.d_model * 0.02**2 / 2
    assert abs(loss - log_vocab) < 0.2
    assert abs(loss - (log_vocab + half_variance)) < 0.05
    assert abs(random_targets - loss) < 0.25  # 64 sampled targets: standard error ≈ σ/√64 ≈ 0.07


def test_gpt2_initialisation():
    cfg = GPTConfig(d_vocab=100, n_ctx=16, d_model=256, n_heads=4, n_layers=8)
    model = GPT(cfg)
    residual_std = 0.02 / math.sqrt(2 * cfg.n_layers)
    for block in model.blocks:
        # 65,536 and 262,144 draws: the estimated std is within ~0.3% of the true one; 3% tells 0.02 from 0.005 easily.
        assert block.attn.out_proj.weight.std().item() == pytest.approx(residual_std, rel=0.03)
        assert block.ffn.down.weight.std().item() == pytest.approx(residual_std, rel=0.03)
        assert block.attn.q_proj.weight.std().item() == pytest.approx(0.02, rel=0.03)
        assert block.ffn.up.weight.std().item() == pytest.approx(0.02, rel=0.03)
        assert not block.attn.out_proj.bias.any() and not block.ffn.up.bias.any()
        assert block.attn_residual.norm.weight.eq(1).all() and not block.attn_residual.norm.bias.any()
    assert model.embed.weight.std().item() == pytest.approx(0.02, rel=0.03)
    assert model.pos_embed.weight.std().item() == pytest.approx(0.02, rel=0.05)  # 4,096 draws: ~1.1% standard error
    assert model.unembed.weight is model.embed.weight


# ------------------------------------------------------------------------------ config


def test_config_defaults_and_derived_sizes():
    cfg = GPTConfig(d_vocab=50, n_ctx=16, d_model=32, n_heads=4, n_layers=2)
    assert cfg.d_ff == 128 and cfg.d_head == 8
    assert GPTConfig(d_vocab=50, n_ctx=16, d_model=32, n_heads=4, n_layers=2, d_ff=100).d_ff == 100
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d_model = 64


@pytest.mark.parametrize(
    "size, shape", [("small", (768, 12, 12)), ("medium", (1024, 16, 24)), ("large", (1280, 20, 36)), ("xl", (1600, 25, 48))]
)
def test_gpt2_presets(size, shape):
    cfg = GPTConfig.gpt2(size)
    assert (cfg.d_model, cfg.n_heads, cfg.n_layers) == shape
    assert (cfg.d_vocab, cfg.n_ctx, cfg.d_ff, cfg.activation) == (50257, 1024, 4 * shape[0], "gelu_tanh")
    assert cfg.tie_embeddings


def test_replace_rederives_the_default_d_ff():
    """``d_ff=None`` means 4·d_model; a config derived with ``replace(d_model=...)`` must not keep the old width
    (dataclasses.replace alone would carry 4·32 = 128 over to d_model=64)."""
    assert TINY.replace(d_model=64).d_ff == 256
    assert TINY.replace(d_ff=100).replace(d_model=64).d_ff == 100  # an explicit width stays


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"n_heads": 5}, "d_model=32 must be divisible by n_heads=5"),
        ({"n_layers": 0}, "n_layers must be a positive int"),
        ({"d_ff": 0}, "d_ff must be a positive int"),
        ({"dropout": 1.0}, "dropout must be in"),
    ],
)
def test_config_validation(changes, message):
    with pytest.raises(ValueError, match=message):
        TINY.replace(**changes)


def test_config_accepts_placement_as_string():
    """``__post_init__`` converts with ``NormPlacement(placement)``, so a string is meant to work; the field's
    annotation (``NormPlacement``) must allow it too, or the checked test run rejects it before the conversion."""
    assert TINY.replace(placement="post").placement is NormPlacement.POST
    with pytest.raises(ValueError, match="'middle' is not a valid NormPlacement"):
        TINY.replace(placement="middle")


def test_gpt2_bad_size():
    with pytest.raises(ValueError, match=r"size must be one of \['small', 'medium', 'large', 'xl'\], got 'tiny'"):
        GPTConfig.gpt2("tiny")


# ------------------------------------------------------------------------------ forward


@pytest.fixture(scope="module")
def tiny_model() -> GPT:
    torch.manual_seed(0)
    return GPT(TINY).eval()


def test_forward_errors_name_the_argument(tiny_model):
    with pytest.raises(ValueError, match=r"sequence length 17 exceeds the context n_ctx=16"):
        tiny_model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match=r"tokens must be ids in \[0, d_vocab=50\), got 50"):
        tiny_model(torch.tensor([[1, 2, 50]]))
    with pytest.raises(ValueError, match=r"tokens must be ids in \[0, d_vocab=50\), got -3"):
        tiny_model(torch.tensor([[-3, 2]]))


def test_future_tokens_do_not_change_past_logits(tiny_model):
    tokens = torch.randint(0, TINY.d_vocab, (2, 10))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % TINY.d_vocab
    with torch.no_grad():
        torch.testing.assert_close(tiny_model(changed)[:, :6], tiny_model(tokens)[:, :6], **TOL)


@pytest.mark.parametrize("fast_attention", [False, True])
@pytest.mark.parametrize("chunks", [[4, 1, 1, 3], [1] * 9])
def test_cached_chunks_equal_the_full_forward(tiny_model, fast_attention, chunks):
    model = GPT(TINY.replace(fast_attention=fast_attention)).eval()
    model.load_state_dict(tiny_model.state_dict())
    tokens = torch.randint(0, TINY.d_vocab, (2, sum(chunks)))
    cache = model.make_kv_cache(2)
    with torch.no_grad():
        pieces, start = [], 0
        for size in chunks:
            pieces.append(model(tokens[:, start : start + size], cache=cache))
            start += size
        torch.testing.assert_close(torch.cat(pieces, dim=1), model(tokens), **TOL)
    assert cache.length == sum(chunks)


def test_cache_cannot_run_past_n_ctx(tiny_model):
    cache = tiny_model.make_kv_cache(1)
    with torch.no_grad():
        tiny_model(torch.zeros(1, 15, dtype=torch.long), cache=cache)
        with pytest.raises(ValueError, match="n_ctx=16"):
            tiny_model(torch.zeros(1, 2, dtype=torch.long), cache=cache)
