"""The LLaMA-style GPT (chapter 12): its changes, the KV cache, generation, and parity with Hugging Face's LLaMA."""

from __future__ import annotations

import pytest
import torch

from tutorial_lib.blocks import NormPlacement
from tutorial_lib.counting import count_parameters
from tutorial_lib.feed_forward import SwiGLU
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.models.llama import (
    GroupedQueryAttention,
    Llama,
    LlamaConfig,
    RotaryGPT,
    SinusoidalGPT,
    UnscaledSinusoidalGPT,
    llama_d_ff,
    repeat_kv,
)
from tutorial_lib.normalization import RMSNorm
from tutorial_lib.rope import RotaryMultiHeadAttention
from tutorial_lib.sampling import generate


def _config(**changes) -> LlamaConfig:
    return LlamaConfig(**{"d_vocab": 61, "n_ctx": 24, "d_model": 32, "n_heads": 4, "n_layers": 2, **changes})


def _tokens(batch: int, seq: int, d_vocab: int = 61, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, d_vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def _model(**changes) -> Llama:
    torch.manual_seed(0)
    return Llama(_config(**changes)).eval()


def test_d_ff_is_eight_thirds_rounded_up() -> None:
    assert llama_d_ff(4096, 256) == 11008  # LLaMA-7B's published hidden size
    assert llama_d_ff(5120, 256) == 13824  # LLaMA-13B
    assert _config(multiple_of=32).d_ff == 96  # ⌊8/3 · 32⌋ = 85 → 96
    assert _config(d_ff=40).d_ff == 40


def test_config_defaults_are_llamas() -> None:
    cfg = _config()
    assert (cfg.activation, cfg.bias, cfg.tie_embeddings, cfg.layer_norm_eps) == ("swiglu", False, False, 1e-6)
    assert cfg.placement is NormPlacement.PRE and isinstance(cfg, GPTConfig)


def test_the_main_differences_with_gpt() -> None:
    model = _model()
    assert isinstance(model, GPT) and model.pos_embed is None
    assert all(isinstance(block.attn, RotaryMultiHeadAttention) for block in model.blocks)
    assert all(isinstance(block.ffn, SwiGLU) for block in model.blocks)
    norms = [block.attn_residual.norm for block in model.blocks] + [block.ffn_residual.norm for block in model.blocks]
    assert all(isinstance(norm, RMSNorm) for norm in norms + [model.ln_final])
    assert not [name for name, _ in model.named_parameters() if name.endswith("bias")]
    assert model.unembed.weight is not model.embed.weight
    tied = _model(tie_embeddings=True)
    assert tied.unembed.weight is tied.embed.weight


def test_output_shape_and_initial_loss() -> None:
    model = _model()
    logits = model(_tokens(3, 24))
    assert logits.shape == (3, 24, 61)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), _tokens(3, 24, seed=1).flatten())
    assert loss.item() == pytest.approx(torch.log(torch.tensor(61.0)).item(), abs=0.1)  # near-uniform at init


def test_positions_reach_the_model_through_rope() -> None:
    """With one layer and no position signal, the last position attends to a *set* of keys: swapping two earlier
    tokens could not change its output. RoPE makes the scores depend on offsets, so it must."""
    model = _model(n_layers=1)
    with torch.no_grad():  # sharper attention than at initialisation, so that the scores matter
        model.blocks[0].attn.q_proj.weight.mul_(20)
        model.blocks[0].attn.k_proj.weight.mul_(20)
    tokens = _tokens(1, 12)
    swapped = tokens.clone()
    swapped[0, [3, 4]] = tokens[0, [4, 3]]
    # Without a position signal the difference would be float noise (~1e-7); anything 1000x above it is RoPE's doing.
    assert (model(tokens)[:, -1] - model(swapped)[:, -1]).abs().max() > 1e-4


def test_cached_logits_equal_uncached() -> None:
    model = _model()
    tokens = _tokens(2, 20)
    full = model(tokens)
    cache = model.make_kv_cache(2)
    steps = [model(tokens[:, :7], cache=cache)] + [model(tokens[:, t : t + 1], cache=cache) for t in range(7, 20)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fast", ["fast_attention", "fast_norm"])
def test_fast_kernels_equal_the_readable_path(fast: str) -> None:
    tokens = _tokens(2, 24)
    torch.testing.assert_close(_model(**{fast: True})(tokens), _model()(tokens), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 1.0, "top_k": 10}])
def test_generate_cached_equals_uncached(sampling: dict) -> None:
    model = _model()
    prompt = _tokens(2, 5)
    # 30 new tokens run past n_ctx = 24: the context slides and the cache is rebuilt
    cached = generate(model, prompt, 30, generator=torch.Generator().manual_seed(1), use_cache=True, **sampling)
    uncached = generate(model, prompt, 30, generator=torch.Generator().manual_seed(1), use_cache=False, **sampling)
    assert cached.shape == (2, 35)
    assert torch.equal(cached, uncached)


@pytest.mark.parametrize("tie", [False, True])
def test_matches_hugging_face_llama(tie: bool) -> None:
    transformers = pytest.importorskip("transformers")
    cfg = _config(tie_embeddings=tie, n_layers=3)
    hf_config = transformers.LlamaConfig(
        vocab_size=cfg.d_vocab, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_heads, max_position_embeddings=cfg.n_ctx,
        rms_norm_eps=cfg.layer_norm_eps, rope_theta=cfg.rope_base, tie_word_embeddings=tie, attn_implementation="eager",
    )
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(hf_config).eval()
    with torch.no_grad():  # move every weight off its initial value (norms start at exactly 1)
        for parameter in hf.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    ours = Llama.from_hf_llama_state_dict(hf.state_dict(), cfg).eval()
    assert count_parameters(ours) == sum(p.numel() for p in hf.parameters())
    tokens = _tokens(3, cfg.n_ctx)
    with torch.no_grad():
        expected = hf(tokens).logits
    torch.testing.assert_close(ours(tokens), expected, atol=1e-5, rtol=1e-5)


def test_hf_key_map_is_strict() -> None:
    state = {k: v.clone() for k, v in _model().state_dict().items()}
    with pytest.raises(KeyError, match="model.embed_tokens.weight"):
        Llama.from_hf_llama_state_dict(state, _config())


def test_bad_input_raises(without_annotation_checks) -> None:
    model = _model()
    with pytest.raises(ValueError, match="n_ctx=24"):
        model(_tokens(1, 25))
    with pytest.raises(ValueError, match="d_vocab=61"):
        model(torch.tensor([[0, 61]]))
    cache = model.make_kv_cache(1)
    model(_tokens(1, 20), cache=cache)
    with pytest.raises(ValueError, match="n_ctx=24"):
        model(_tokens(1, 5), cache=cache)
    with pytest.raises(ValueError, match="must be even"):
        _config(d_model=36, n_heads=4)  # d_head = 9
    with pytest.raises(ValueError, match="rope_base"):
        _config(rope_base=1.0)
    with pytest.raises(ValueError, match="divisible"):
        _config(d_model=30)
    with pytest.raises(ValueError, match="multiple_of"):
        llama_d_ff(64, 0)
    with pytest.raises(ValueError, match="multiple_of"):
        _config(d_ff=64, multiple_of=0)
    with without_annotation_checks(), pytest.raises(ValueError, match="LlamaConfig"):
        Llama(GPTConfig(d_vocab=61, n_ctx=24, d_model=32, n_heads=4, n_layers=2))


def test_replace_rederives_d_ff() -> None:
    """Core bug (``GPTConfig.replace``, inherited): a derived ``d_ff`` is carried over instead of re-derived."""
    cfg = _config()
    assert cfg.replace(d_model=64).d_ff == _config(d_model=64).d_ff


# --- the two GPTs that differ by their positions alone -------------------------------------------------------------------


def _gpt_config(**changes) -> GPTConfig:
    return GPTConfig(**{"d_vocab": 61, "n_ctx": 24, "d_model": 32, "n_heads": 4, "n_layers": 2, **changes})


def test_rotary_gpt_changes_the_positions_and_nothing_else() -> None:
    torch.manual_seed(0)
    gpt, rotary = GPT(_gpt_config()), RotaryGPT(_gpt_config())
    assert rotary.pos_embed is None and all(isinstance(block.attn, RotaryMultiHeadAttention) for block in rotary.blocks)
    assert count_parameters(gpt) - count_parameters(rotary) == 24 * 32  # the position table, and only it
    assert {k for k in gpt.state_dict() if not k.startswith("pos_embed")} == set(rotary.state_dict())
    assert rotary.unembed.weight is rotary.embed.weight
    tokens = _tokens(2, 20)
    cache = rotary.eval().make_kv_cache(2)
    steps = [rotary(tokens[:, :6], cache=cache)] + [rotary(tokens[:, t : t + 1], cache=cache) for t in range(6, 20)]
    torch.testing.assert_close(torch.cat(steps, dim=1), rotary(tokens), atol=1e-5, rtol=1e-5)


def test_sinusoidal_gpt_adds_the_papers_fixed_table_to_scaled_tokens() -> None:
    from tutorial_lib.embeddings import sinusoidal_positional_encoding

    torch.manual_seed(0)
    model = SinusoidalGPT(_gpt_config()).eval()
    assert count_parameters(GPT(_gpt_config())) - count_parameters(model) == 24 * 32
    assert model.state_dict().keys() == RotaryGPT(_gpt_config()).state_dict().keys()  # the table is not a parameter
    tokens = _tokens(2, 10)
    expected_input = model.embed.weight[tokens] * 32**0.5 + sinusoidal_positional_encoding(10, 32)
    captured = {}
    model.blocks[0].register_forward_pre_hook(lambda module, args: captured.setdefault("x", args[0]))
    model(tokens)
    torch.testing.assert_close(captured["x"], expected_input)


# --- chapter 12's recipe additions -----------------------------------------------------------------------------------------


def _small_dataset():
    from tutorial_lib.data.shakespeare import CharDataset

    generator = torch.Generator().manual_seed(0)
    words = ["the ", "king ", "and ", "queen ", "of ", "rome ", "said ", "\n"]
    return CharDataset.from_text("".join(words[i] for i in torch.randint(0, 8, (6000,), generator=generator).tolist()))


def test_a_kept_run_is_the_recipes_run_with_its_curve(tmp_path) -> None:
    from tutorial_lib.recipes import load_or_train_char_run, train_char_gpt
    from tutorial_lib.training import TrainConfig

    dataset = _small_dataset()
    cfg = _gpt_config(d_vocab=dataset.tokenizer.d_vocab, n_ctx=8, n_layers=1)
    short = TrainConfig(max_steps=60, lr=3e-3, warmup_steps=10, eval_interval=20)
    model, record = load_or_train_char_run(dataset, model_cfg=cfg, train_cfg=short, batch_size=4, checkpoint_dir=tmp_path,
                                           progress=False)
    assert record["history"]["eval_steps"] == [20, 40, 60]
    assert record["seconds"] == record["history"]["eval_seconds"][-1] > 0
    plain, _ = train_char_gpt(dataset, model_cfg=cfg, train_cfg=short, batch_size=4, progress=False)
    for ours, theirs in zip(model.state_dict().values(), plain.state_dict().values()):
        torch.testing.assert_close(ours, theirs)  # the recipe's own run
    again, kept = load_or_train_char_run(dataset, model_cfg=cfg, train_cfg=short, batch_size=4, checkpoint_dir=tmp_path)
    assert kept == record and torch.equal(again.embed.weight, model.embed.weight)
    llama, _ = load_or_train_char_run(dataset, model_cfg=_config(d_vocab=dataset.tokenizer.d_vocab, n_ctx=8, n_layers=1),
                                      train_cfg=short, batch_size=4, checkpoint_dir=tmp_path, progress=False)
    assert isinstance(llama, Llama)


def test_the_crossing_of_a_target_is_interpolated_between_evaluations() -> None:
    from tutorial_lib.recipes import val_loss_crossing

    record = {"history": {"eval_steps": [100, 200, 300], "eval_seconds": [10.0, 20.0, 30.0], "val_loss": [2.4, 2.0, 1.8]}}
    assert val_loss_crossing(record, 1.9) == pytest.approx((250.0, 25.0))
    assert val_loss_crossing(record, 2.0) == pytest.approx((200.0, 20.0))
    assert val_loss_crossing(record, 3.0) == (100.0, 10.0)  # already there at the first evaluation
    assert val_loss_crossing(record, 1.5) is None


def test_with_context_extends_rope_and_sinusoidal_but_not_a_learned_table() -> None:
    from tutorial_lib.recipes import loss_by_position, with_context

    dataset = _small_dataset()
    cfg = _gpt_config(d_vocab=dataset.tokenizer.d_vocab, n_ctx=8)
    for cls in (RotaryGPT, SinusoidalGPT):
        torch.manual_seed(0)
        model = cls(cfg).eval()
        longer = with_context(model, 16)
        assert longer.cfg.n_ctx == 16 and not longer.training
        tokens = _tokens(2, 8, d_vocab=cfg.d_vocab)
        torch.testing.assert_close(longer(tokens), model(tokens))  # the first 8 positions are unchanged
        losses = loss_by_position(longer, dataset.val, 16, batch_size=8)
        assert losses.shape == (16,) and torch.isfinite(losses).all()
        torch.testing.assert_close(loss_by_position(longer, dataset.val, 8, batch_size=8),
                                   loss_by_position(model, dataset.val, 8, batch_size=8))
    learned = GPT(cfg)
    with pytest.raises(ValueError, match="learned position table of 8 rows"):
        with_context(learned, 9)
    assert with_context(learned, 8).pos_embed.weight.shape == (8, 32)
    with pytest.raises(ValueError, match="n_ctx=8"):
        loss_by_position(learned, dataset.val, 9)


def test_loss_by_position_with_a_window_equals_the_full_causal_loss_within_the_window() -> None:
    from tutorial_lib.recipes import loss_by_position

    dataset = _small_dataset()
    torch.manual_seed(0)
    model = RotaryGPT(_gpt_config(d_vocab=dataset.tokenizer.d_vocab, n_ctx=16))
    full = loss_by_position(model, dataset.val, 16, batch_size=8)
    windowed = loss_by_position(model, dataset.val, 16, window=4, batch_size=8)
    torch.testing.assert_close(windowed[:4], full[:4])  # the first 4 positions see at most 4 keys either way
    assert not torch.allclose(windowed[8:], full[8:])
    with pytest.raises(ValueError, match="window"):
        loss_by_position(model, dataset.val, 16, window=0)


# --- grouped-query attention (issue 22) ------------------------------------------------------------------------------


def test_n_kv_heads_defaults_to_the_heads_and_is_validated(without_annotation_checks) -> None:
    assert _config().n_kv_heads == 4 and _config(n_kv_heads=1).n_kv_heads == 1
    assert _config().replace(n_heads=8).n_kv_heads == 8  # a derived count follows the heads ...
    assert _config(n_kv_heads=2).replace(n_heads=8).n_kv_heads == 2  # ... a chosen one stays
    for bad, match in ((3, "divisible by n_kv_heads=3"), (0, "n_kv_heads must be a positive int"),
                       (True, "n_kv_heads must be a positive int"), (2.0, "n_kv_heads must be a positive int")):
        with without_annotation_checks(), pytest.raises(ValueError, match=match):
            _config(n_kv_heads=bad)
    with without_annotation_checks(), pytest.raises(ValueError, match="n_rep must be a positive int"):
        repeat_kv(torch.zeros(1, 2, 3, 4), 0)
    with pytest.raises(ValueError, match="n_kv_heads=3"):
        GroupedQueryAttention(32, 4, 8, n_kv_heads=3)


def test_repeat_kv_gives_each_group_of_query_heads_one_key_value_head() -> None:
    x = torch.randn(2, 3, 5, 4)
    repeated = repeat_kv(x, 2)
    assert repeated.shape == (2, 6, 5, 4)
    for h in range(6):
        assert torch.equal(repeated[:, h], x[:, h // 2])  # consecutive query heads share a key/value head
    assert not torch.equal(repeated, x.repeat(1, 2, 1, 1))  # tiling is another grouping
    assert torch.equal(repeat_kv(x, 1), x)


def test_multi_head_llama_is_unchanged_by_n_kv_heads() -> None:
    """n_kv_heads = n_heads builds the model it built before grouped-query attention existed: the same parameter
    names and shapes, and the same random draws (the same weights from the same seed)."""
    torch.manual_seed(0)
    before = Llama(_config())
    torch.manual_seed(0)
    after = Llama(_config(n_kv_heads=4))
    assert before.state_dict().keys() == after.state_dict().keys()
    for name, tensor in before.state_dict().items():
        assert torch.equal(tensor, after.state_dict()[name]), name
    assert before.blocks[0].attn.k_proj.weight.shape == (32, 32)


@pytest.mark.parametrize("n_kv_heads", [2, 1])
def test_grouped_query_attention_is_multi_head_attention_with_shared_key_value_heads(n_kv_heads: int) -> None:
    """The reference: a multi-head layer whose W^K and W^V rows are the grouped layer's, each head's rows written once
    per query head of its group, computes the same output."""
    torch.manual_seed(0)
    grouped = GroupedQueryAttention(32, 4, 16, n_kv_heads=n_kv_heads).eval()
    plain = RotaryMultiHeadAttention(32, 4, 16, bias=False).eval()
    n_rep, d_head = 4 // n_kv_heads, 8

    def spread(weight: torch.Tensor) -> torch.Tensor:  # (n_kv_heads · d_head, d_model) → (n_heads · d_head, d_model)
        return weight.view(n_kv_heads, d_head, 32).repeat_interleave(n_rep, dim=0).reshape(32, 32)

    plain.load_state_dict({"q_proj.weight": grouped.q_proj.weight, "k_proj.weight": spread(grouped.k_proj.weight),
                           "v_proj.weight": spread(grouped.v_proj.weight), "out_proj.weight": grouped.out_proj.weight})
    assert grouped.k_proj.weight.shape == (n_kv_heads * d_head, 32)
    x = torch.randn(2, 10, 32)
    with torch.no_grad():
        torch.testing.assert_close(grouped(x, causal=True), plain(x, causal=True))


@pytest.mark.parametrize("n_kv_heads", [2, 1])
def test_grouped_query_llama_caches_fewer_heads_and_generates_as_without_cache(n_kv_heads: int) -> None:
    model = _model(n_kv_heads=n_kv_heads)
    cache = model.make_kv_cache(2)
    assert cache[0].keys.shape == (2, n_kv_heads, 24, 8)
    assert cache.bytes_per_token() == 2 * 2 * n_kv_heads * 8 * 4  # key and value, 2 layers, float32
    tokens = _tokens(2, 12)
    with torch.no_grad():
        steps = [model(tokens[:, :7], cache=cache)] + [model(tokens[:, t : t + 1], cache=cache) for t in range(7, 12)]
        torch.testing.assert_close(torch.cat(steps, dim=1), model(tokens), atol=1e-5, rtol=1e-5)
    prompt = _tokens(2, 5)
    cached = generate(model, prompt, 15, generator=torch.Generator().manual_seed(1), use_cache=True)
    uncached = generate(model, prompt, 15, generator=torch.Generator().manual_seed(1), use_cache=False)
    assert torch.equal(cached, uncached)


@pytest.mark.parametrize("n_kv_heads", [2, 1])
def test_matches_hugging_face_llama_with_grouped_query_attention(n_kv_heads: int) -> None:
    transformers = pytest.importorskip("transformers")
    cfg = _config(n_kv_heads=n_kv_heads, n_layers=2)
    hf_config = transformers.LlamaConfig(
        vocab_size=cfg.d_vocab, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, num_key_value_heads=n_kv_heads, max_position_embeddings=cfg.n_ctx,
        rms_norm_eps=cfg.layer_norm_eps, rope_theta=cfg.rope_base, tie_word_embeddings=False, attn_implementation="eager",
    )
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(hf_config).eval()
    with torch.no_grad():
        for parameter in hf.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    ours = Llama.from_hf_llama_state_dict(hf.state_dict(), cfg).eval()
    assert count_parameters(ours) == sum(p.numel() for p in hf.parameters())
    tokens = _tokens(3, cfg.n_ctx)
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), hf(tokens).logits, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"k_proj.weight: expected shape \(32, 32\)"):
        Llama.from_hf_llama_state_dict(hf.state_dict(), _config(n_layers=2))  # a config that forgot n_kv_heads


def test_unscaled_sinusoidal_gpt_differs_from_the_scaled_one_by_the_scale_alone() -> None:
    cfg = _gpt_config(n_ctx=8)
    torch.manual_seed(0)
    scaled = SinusoidalGPT(cfg)
    torch.manual_seed(0)
    unscaled = UnscaledSinusoidalGPT(cfg)
    assert scaled.embed.scale == pytest.approx(32**0.5) and unscaled.embed.scale == 1.0
    for (name, a), b in zip(scaled.state_dict().items(), unscaled.state_dict().values()):
        assert torch.equal(a, b), name
