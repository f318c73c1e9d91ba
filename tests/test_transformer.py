"""The encoder-decoder Transformer (chapter 07) against PyTorch's own ``nn.Transformer*`` modules.

Weights are copied across with an explicit key map (every reference key used, every shape asserted, loaded with
``strict=True``). float32, tolerance 1e-5. PyTorch's boolean masks mean True = *masked*, the opposite of ours, so
every mask is inverted on the way.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tutorial_lib.attention import causal_mask, padding_mask
from tutorial_lib.blocks import DecoderBlock, NormPlacement, TransformerBlock
from tutorial_lib.counting import count_parameters
from tutorial_lib.data.dates import DateVocab, encode_pairs, make_date_pairs
from tutorial_lib.embeddings import sinusoidal_positional_encoding
from tutorial_lib.models.transformer import Transformer, TransformerConfig

D_MODEL, N_HEADS, D_FF = 16, 4, 32
PLACEMENTS = [pytest.param(NormPlacement.POST, id="post-norm"), pytest.param(NormPlacement.PRE, id="pre-norm")]


def assert_close(actual: Tensor, expected: Tensor) -> None:
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------------ key maps


class KeyMap:
    """Builds our state dict from a reference one; ``check_all_used`` fails if a reference tensor was left out."""

    def __init__(self, ref: dict[str, Tensor]) -> None:
        self.ref, self.used, self.out = ref, set(), {}

    def take(self, key: str, shape: tuple[int, ...]) -> Tensor:
        tensor = self.ref[key]
        assert tuple(tensor.shape) == shape, f"{key}: expected {shape}, got {tuple(tensor.shape)}"
        self.used.add(key)
        return tensor

    def linear(self, ref: str, ours: str, d_in: int, d_out: int) -> None:
        self.out[ours + ".weight"] = self.take(ref + ".weight", (d_out, d_in))
        self.out[ours + ".bias"] = self.take(ref + ".bias", (d_out,))

    def norm(self, ref: str, ours: str, d: int) -> None:
        self.out[ours + ".weight"] = self.take(ref + ".weight", (d,))
        self.out[ours + ".bias"] = self.take(ref + ".bias", (d,))

    def attention(self, ref: str, ours: str, d: int) -> None:
        """``nn.MultiheadAttention`` stacks W^Q, W^K, W^V in one ``in_proj_weight`` of shape (3·d_model, d_model)."""
        weight = self.take(ref + ".in_proj_weight", (3 * d, d))
        bias = self.take(ref + ".in_proj_bias", (3 * d,))
        for j, name in enumerate(("q_proj", "k_proj", "v_proj")):
            self.out[f"{ours}.{name}.weight"] = weight[j * d : (j + 1) * d]
            self.out[f"{ours}.{name}.bias"] = bias[j * d : (j + 1) * d]
        self.linear(ref + ".out_proj", ours + ".out_proj", d, d)

    def encoder_layer(self, ref: str, ours: str, d: int, d_ff: int) -> None:
        self.attention(ref + "self_attn", ours + "attn", d)
        self.norm(ref + "norm1", ours + "attn_residual.norm", d)
        self.linear(ref + "linear1", ours + "ffn.up", d, d_ff)
        self.linear(ref + "linear2", ours + "ffn.down", d_ff, d)
        self.norm(ref + "norm2", ours + "ffn_residual.norm", d)

    def decoder_layer(self, ref: str, ours: str, d: int, d_ff: int) -> None:
        self.attention(ref + "self_attn", ours + "self_attn", d)
        self.norm(ref + "norm1", ours + "self_attn_residual.norm", d)
        self.attention(ref + "multihead_attn", ours + "cross_attn", d)
        self.norm(ref + "norm2", ours + "cross_attn_residual.norm", d)
        self.linear(ref + "linear1", ours + "ffn.up", d, d_ff)
        self.linear(ref + "linear2", ours + "ffn.down", d_ff, d)
        self.norm(ref + "norm3", ours + "ffn_residual.norm", d)

    def check_all_used(self) -> dict[str, Tensor]:
        unused = set(self.ref) - self.used
        assert not unused, f"reference tensors not mapped: {sorted(unused)}"
        return self.out


def encoder_layer_state(ref: dict[str, Tensor], d: int = D_MODEL, d_ff: int = D_FF) -> dict[str, Tensor]:
    keys = KeyMap(ref)
    keys.encoder_layer("", "", d, d_ff)
    return keys.check_all_used()


def decoder_layer_state(ref: dict[str, Tensor], d: int = D_MODEL, d_ff: int = D_FF) -> dict[str, Tensor]:
    keys = KeyMap(ref)
    keys.decoder_layer("", "", d, d_ff)
    return keys.check_all_used()


def stacks_state(ref: dict[str, Tensor], cfg: TransformerConfig, *, final_norm: bool) -> tuple[dict, dict]:
    """``nn.Transformer``'s encoder/decoder → our ``model.encoder`` / ``model.decoder`` state dicts."""
    d, d_ff = cfg.d_model, cfg.d_ff
    encoder, decoder = KeyMap({k: v for k, v in ref.items() if k.startswith("encoder.")}), KeyMap({k: v for k, v in ref.items() if k.startswith("decoder.")})
    for i in range(cfg.n_encoder_layers):
        encoder.encoder_layer(f"encoder.layers.{i}.", f"layers.{i}.", d, d_ff)
    for i in range(cfg.n_decoder_layers):
        decoder.decoder_layer(f"decoder.layers.{i}.", f"layers.{i}.", d, d_ff)
    if final_norm:
        encoder.norm("encoder.norm", "norm", d)
        decoder.norm("decoder.norm", "norm", d)
    return encoder.check_all_used(), decoder.check_all_used()


def padded_inputs(seed: int, lengths: list[int], d: int = D_MODEL) -> tuple[Tensor, Tensor]:
    """Random ``(batch, max(lengths), d)`` activations and our padding mask ``(batch, 1, key_pos)``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(lengths), max(lengths), d, generator=g)
    return x, padding_mask(torch.tensor(lengths), max(lengths))


def torch_padding(mask: Tensor) -> Tensor:
    """Our (batch, 1, key_pos) mask, True = real token → PyTorch's key_padding_mask (batch, key_pos), True = pad."""
    return ~mask[:, 0, :]


# ------------------------------------------------------------------------------------------ single layers


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_encoder_block_matches_nn_transformer_encoder_layer(placement: NormPlacement) -> None:
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.0, batch_first=True, norm_first=placement is NormPlacement.PRE).eval()
    ours = TransformerBlock(D_MODEL, N_HEADS, D_FF, placement=placement).eval()
    ours.load_state_dict(encoder_layer_state(ref.state_dict()), strict=True)
    x, mask = padded_inputs(1, [6, 4, 1])
    # Gradients stay on: PyTorch's inference fast path would zero the padded rows' outputs (nested tensors).
    expected = ref(x, src_key_padding_mask=torch_padding(mask))
    assert_close(ours(x, mask=mask), expected)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_decoder_block_matches_nn_transformer_decoder_layer(placement: NormPlacement) -> None:
    torch.manual_seed(0)
    ref = nn.TransformerDecoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.0, batch_first=True, norm_first=placement is NormPlacement.PRE).eval()
    ours = DecoderBlock(D_MODEL, N_HEADS, D_FF, placement=placement).eval()
    ours.load_state_dict(decoder_layer_state(ref.state_dict()), strict=True)
    memory, memory_mask = padded_inputs(1, [6, 3])
    tgt = torch.randn(2, 5, D_MODEL, generator=torch.Generator().manual_seed(2))
    expected = ref(
        tgt, memory, tgt_mask=~causal_mask(5), tgt_is_causal=True, memory_key_padding_mask=torch_padding(memory_mask)
    )
    assert_close(ours(tgt, memory, memory_mask=memory_mask), expected)


def test_decoder_block_gradients_match_nn_transformer_decoder_layer() -> None:
    """Pre-norm with both masks: gradients of the inputs and of every parameter (mapped back through in_proj)."""
    torch.manual_seed(0)
    ref = nn.TransformerDecoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.0, batch_first=True, norm_first=True)
    ours = DecoderBlock(D_MODEL, N_HEADS, D_FF, placement=NormPlacement.PRE)
    ours.load_state_dict(decoder_layer_state(ref.state_dict()), strict=True)
    memory, memory_mask = padded_inputs(3, [4, 2])
    tgt = torch.randn(2, 3, D_MODEL, generator=torch.Generator().manual_seed(4))
    weights = torch.randn(2, 3, D_MODEL, generator=torch.Generator().manual_seed(5))  # a loss that weighs every output

    inputs_ref = [t.clone().requires_grad_() for t in (tgt, memory)]
    out_ref = ref(*inputs_ref, tgt_mask=~causal_mask(3), tgt_is_causal=True, memory_key_padding_mask=torch_padding(memory_mask))
    (out_ref * weights).sum().backward()
    inputs_ours = [t.clone().requires_grad_() for t in (tgt, memory)]
    (ours(*inputs_ours, memory_mask=memory_mask) * weights).sum().backward()

    for a, b in zip(inputs_ours, inputs_ref):
        assert_close(a.grad, b.grad)
    expected_grads = decoder_layer_state({name: p.grad for name, p in ref.named_parameters()})
    for name, p in ours.named_parameters():
        assert_close(p.grad, expected_grads[name])


# ------------------------------------------------------------------------------------------- whole model


def small_config(**changes) -> TransformerConfig:
    base = dict(d_vocab=13, n_ctx=12, d_model=D_MODEL, n_heads=N_HEADS, n_encoder_layers=2, n_decoder_layers=3, d_ff=D_FF, dropout=0.0)
    return TransformerConfig(**{**base, **changes})


@pytest.mark.parametrize(
    ("placement", "final_norm"),
    [
        pytest.param(NormPlacement.POST, False, id="post-norm, the paper (nn.Transformer's final norms -> identity)"),
        pytest.param(NormPlacement.POST, True, id="post-norm with final norms (nn.Transformer as shipped)"),
        pytest.param(NormPlacement.PRE, None, id="pre-norm (final norms by default)"),
    ],
)
def test_stacks_and_forward_match_nn_transformer(placement: NormPlacement, final_norm: bool | None) -> None:
    cfg = small_config(placement=placement, final_norm=final_norm)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "enable_nested_tensor is True, but ..." (pre-norm)
        ref = nn.Transformer(
            D_MODEL, N_HEADS, cfg.n_encoder_layers, cfg.n_decoder_layers, D_FF, dropout=0.0, batch_first=True,
            norm_first=placement is NormPlacement.PRE,
        ).eval()
    if not cfg.final_norm:
        ref.encoder.norm = nn.Identity()
        ref.decoder.norm = nn.Identity()
    model = Transformer(cfg).eval()
    encoder_state, decoder_state = stacks_state(ref.state_dict(), cfg, final_norm=cfg.final_norm)
    model.encoder.load_state_dict(encoder_state, strict=True)
    model.decoder.load_state_dict(decoder_state, strict=True)

    src_x, src_mask = padded_inputs(1, [7, 5, 2])
    tgt_x = torch.randn(3, 6, D_MODEL, generator=torch.Generator().manual_seed(2))
    # Gradients stay on: PyTorch's inference fast path would zero the padded rows of the memory (nested tensors).
    expected = ref(
        src_x, tgt_x, tgt_mask=~causal_mask(6), tgt_is_causal=True,
        src_key_padding_mask=torch_padding(src_mask), memory_key_padding_mask=torch_padding(src_mask),
    )
    assert_close(model.decoder(tgt_x, model.encoder(src_x, mask=src_mask), memory_mask=src_mask), expected)

    # The whole forward: the reference stacks fed §3.4's embedding (×√d_model) plus §3.5's sinusoids, written out.
    lengths = torch.tensor([7, 5, 2])
    src = torch.randint(0, cfg.d_vocab, (3, 7), generator=torch.Generator().manual_seed(3))
    tgt = torch.randint(0, cfg.d_vocab, (3, 6), generator=torch.Generator().manual_seed(4))
    table, pe = model.src_embed.weight, sinusoidal_positional_encoding(cfg.n_ctx, D_MODEL)
    embedded = [F.embedding(tokens, table) * math.sqrt(D_MODEL) + pe[: tokens.shape[1]] for tokens in (src, tgt)]
    key_padding = lengths[:, None] <= torch.arange(7)
    hidden = ref(*embedded, tgt_mask=~causal_mask(6), tgt_is_causal=True, src_key_padding_mask=key_padding, memory_key_padding_mask=key_padding)
    assert_close(model(src, tgt, src_lengths=lengths), hidden @ table.T)


@pytest.mark.parametrize("fast_flag", ["fast_attention", "fast_norm"])
def test_fast_kernels_match_readable_path(fast_flag: str) -> None:
    torch.manual_seed(0)
    readable = Transformer(small_config()).eval()
    fast = Transformer(small_config(**{fast_flag: True})).eval()
    fast.load_state_dict(readable.state_dict(), strict=True)
    src = torch.randint(0, 13, (3, 7), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(0, 13, (3, 5), generator=torch.Generator().manual_seed(2))
    lengths = torch.tensor([7, 3, 1])
    assert_close(fast(src, tgt, src_lengths=lengths), readable(src, tgt, src_lengths=lengths))


def test_padding_does_not_change_real_positions() -> None:
    """A padded source gives the same logits as the unpadded one, whatever the padding tokens are."""
    torch.manual_seed(0)
    model = Transformer(small_config()).eval()
    src = torch.randint(0, 13, (1, 4), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(0, 13, (1, 5), generator=torch.Generator().manual_seed(2))
    padded = torch.cat([src, torch.randint(0, 13, (1, 3), generator=torch.Generator().manual_seed(3))], dim=1)
    assert_close(model(padded, tgt, src_lengths=torch.tensor([4])), model(src, tgt))
    assert_close(model(padded, tgt, src_mask=padding_mask(torch.tensor([4]), 7)), model(src, tgt))


def test_decode_with_kv_cache_matches_full_decode() -> None:
    torch.manual_seed(0)
    model = Transformer(small_config(placement=NormPlacement.PRE)).eval()
    src = torch.randint(0, 13, (2, 6), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(0, 13, (2, 7), generator=torch.Generator().manual_seed(2))
    src_mask = padding_mask(torch.tensor([6, 4]), 6)
    memory = model.encode(src, src_mask)
    full = model.decode(tgt, memory, src_mask)
    cache = model.make_kv_cache(2)
    prefill = model.decode(tgt[:, :3], memory, src_mask, cache=cache)  # several tokens at once, then one by one
    steps = [model.decode(tgt[:, t : t + 1], memory, src_mask, cache=cache) for t in range(3, 7)]
    assert cache.length == 7
    assert_close(torch.cat([prefill, *steps], dim=1), full)


def test_shared_embeddings_are_one_matrix() -> None:
    model = Transformer(small_config())
    assert model.src_embed.weight is model.tgt_embed.weight is model.unembed.weight
    unshared = Transformer(small_config(d_vocab=None, src_vocab=11, tgt_vocab=13, share_embeddings=False))
    assert unshared.src_embed.weight.shape == (11, D_MODEL) and unshared.unembed.weight.shape == (13, D_MODEL)
    shared_matrix = 13 * D_MODEL
    assert count_parameters(unshared) - count_parameters(model) == 11 * D_MODEL + shared_matrix


def test_learned_positions_are_one_table_for_both_sides() -> None:
    torch.manual_seed(0)
    learned = Transformer(small_config(positional="learned")).eval()
    sinusoidal = Transformer(small_config())
    assert count_parameters(learned) - count_parameters(sinusoidal) == 12 * D_MODEL  # n_ctx × d_model
    src = torch.randint(0, 13, (2, 5), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(0, 13, (2, 4), generator=torch.Generator().manual_seed(2))
    memory = learned.encode(src)
    cache = learned.make_kv_cache(2)
    steps = [learned.decode(tgt[:, t : t + 1], memory, cache=cache) for t in range(4)]
    assert_close(torch.cat(steps, dim=1), learned(src, tgt))


def test_init_is_xavier_uniform_on_the_stacks_and_seeded() -> None:
    torch.manual_seed(0)
    model = Transformer(small_config(d_vocab=1000))
    for name, p in [*model.encoder.named_parameters(), *model.decoder.named_parameters()]:
        if p.dim() > 1:
            fan_out, fan_in = p.shape
            bound = math.sqrt(6 / (fan_in + fan_out))
            assert p.abs().max() <= bound, name
            assert p.abs().max() > 0.9 * bound, name  # uniform on [-bound, bound] fills the interval
    # TokenEmbedding's N(0, 1/d_model): unit variance after the ×√d_model scale
    assert abs(model.src_embed.weight.std().item() * math.sqrt(D_MODEL) - 1) < 0.1
    torch.manual_seed(0)
    again = Transformer(small_config(d_vocab=1000))
    for (name, a), b in zip(model.state_dict().items(), again.state_dict().values()):
        assert torch.equal(a, b), name


def test_dropout_on_embedding_sums_is_active_only_in_training() -> None:
    """§5.4: dropout on the sums of embeddings and positions. The stacks' own dropouts are switched off, so any
    difference between two training-mode calls comes from there."""
    torch.manual_seed(0)
    model = Transformer(small_config(dropout=0.5))
    for module in [*model.encoder.modules(), *model.decoder.modules()]:
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    src = torch.randint(0, 13, (2, 5), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(0, 13, (2, 4), generator=torch.Generator().manual_seed(2))
    model.eval()
    assert torch.equal(model(src, tgt), model(src, tgt))
    model.train()
    assert not torch.equal(model(src, tgt), model(src, tgt))


# -------------------------------------------------------------------------------------- parameter count


def test_base_model_parameter_count() -> None:
    """Table 3 reports 65M parameters for the base model; the architecture as described has 63,082,496.

    Per layer (d = 512, d_ff = 2048, biases everywhere, LayerNorm with gain and bias):
      attention 4·(d² + d) = 1,050,624; feed-forward 2·d·d_ff + d_ff + d = 2,099,712; LayerNorm 2·d = 1,024
      encoder layer = 1 attention + FFN + 2 norms = 3,152,384    (× 6 = 18,914,304)
      decoder layer = 2 attentions + FFN + 3 norms = 4,204,032   (× 6 = 25,224,192)
    one shared 37,000 × 512 embedding (source, target, pre-softmax; §3.4) = 18,944,000.
    Total 63,082,496 ≈ 63.1M, 3% under 65M. Other readings: an output bias adds only 37,000 (63.12M); a 32k
    vocabulary gives 60.5M; unshared source/target embeddings 82.0M; all three matrices unshared 101.0M. None reaches
    65M exactly; the paper's own reading (one shared 37k matrix, with or without an output bias) is the closest, and
    65M would need ~40.7k vocabulary rows (or some implementation detail the paper does not state). The same formula gives 214.2M for
    the big model, against Table 3's 213M.
    """
    cfg = TransformerConfig.base()
    with torch.device("meta"):  # no memory: only shapes
        model = Transformer(cfg)
    d, d_ff, v, n = cfg.d_model, cfg.d_ff, cfg.d_vocab, cfg.n_layers
    attention, ffn, norm = 4 * (d * d + d), 2 * d * d_ff + d_ff + d, 2 * d
    expected = v * d + n * (attention + ffn + 2 * norm) + n * (2 * attention + ffn + 3 * norm)
    assert expected == 63_082_496
    assert count_parameters(model) == expected
    with torch.device("meta"):
        big = Transformer(TransformerConfig.big())
    d, d_ff = 1024, 4096
    attention, ffn, norm = 4 * (d * d + d), 2 * d * d_ff + d_ff + d, 2 * d
    assert count_parameters(big) == v * d + n * (attention + ffn + 2 * norm) + n * (2 * attention + ffn + 3 * norm) == 214_245_376


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"d_vocab": None}, "give d_vocab"),
        ({"d_vocab": None, "src_vocab": 10}, "give d_vocab"),
        ({"d_vocab": None, "src_vocab": 10, "tgt_vocab": 12}, "share_embeddings=True"),
        ({"src_vocab": 12}, "src_vocab=12 must equal d_vocab=13"),
        ({"d_vocab": 0}, "d_vocab must be a positive int"),
        ({"n_ctx": 0}, "n_ctx must be a positive int"),
        ({"n_heads": 3}, "d_model=16 must be divisible by n_heads=3"),
        ({"n_encoder_layers": 0}, "n_encoder_layers must be a positive int"),
        ({"d_ff": -1}, "d_ff must be a positive int"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
        ({"eps": 0.0}, "eps must be > 0"),
        ({"activation": "tanh"}, "activation must be"),
        ({"positional": "rope"}, "positional must be 'sinusoidal' or 'learned'"),
        ({"placement": "middle"}, "placement must be one of"),
    ],
)
def test_config_rejects_bad_values(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        small_config(**changes)


def test_config_derives_and_replace_rederives() -> None:
    cfg = TransformerConfig.base()
    assert (cfg.src_vocab, cfg.tgt_vocab, cfg.n_encoder_layers, cfg.n_decoder_layers) == (37000, 37000, 6, 6)
    assert cfg.placement is NormPlacement.POST and cfg.final_norm is False and cfg.share_embeddings
    small = cfg.replace(n_layers=2, d_vocab=100, placement="pre")
    assert (small.n_encoder_layers, small.n_decoder_layers, small.src_vocab, small.tgt_vocab) == (2, 2, 100, 100)
    assert small.placement is NormPlacement.PRE and small.final_norm is True
    two_vocabularies = cfg.replace(src_vocab=100, tgt_vocab=120, share_embeddings=False)
    assert (two_vocabularies.d_vocab, two_vocabularies.src_vocab, two_vocabularies.tgt_vocab) == (None, 100, 120)


def test_forward_rejects_bad_input() -> None:
    model = Transformer(small_config()).eval()
    src, tgt = torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long)
    lengths = torch.tensor([4, 2])
    with pytest.raises(ValueError, match="give src_lengths or src_mask, not both"):
        model(src, tgt, src_lengths=lengths, src_mask=padding_mask(lengths, 4))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, seq_len=4\]"):
        model(src, tgt, src_lengths=torch.tensor([5, 2]))
    with pytest.raises(ValueError, match=r"tokens must be ids in \[0, d_vocab=13\), got 13"):
        model(src, tgt.masked_fill(tgt == 0, 13))
    with pytest.raises(ValueError, match="exceeds the context n_ctx=12"):
        model(torch.zeros(2, 13, dtype=torch.long), tgt)
    cache = model.make_kv_cache(2)
    memory = model.encode(src)
    model.decode(torch.zeros(2, 12, dtype=torch.long), memory, cache=cache)
    with pytest.raises(ValueError, match="exceeds the context n_ctx=12"):
        model.decode(tgt[:, :1], memory, cache=cache)
    with pytest.raises(ValueError, match="batch must be a positive int"):
        model.make_kv_cache(0)


# ------------------------------------------------------------------------------------------ end to end


def test_tiny_model_learns_the_date_task() -> None:
    """100 Adam steps of the paper's post-norm model on date normalisation: the loss falls below a quarter of its
    start (measured: 4.47 -> 0.74 over the last ten steps; about 3 s on one CPU thread)."""
    vocab = DateVocab()
    pairs = make_date_pairs(3200, seed=0)
    torch.manual_seed(0)
    model = Transformer(small_config(d_vocab=vocab.d_vocab, n_ctx=32, n_encoder_layers=2, n_decoder_layers=2, d_model=64, d_ff=128))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)  # §5.3's betas and eps
    losses = []
    for step in range(100):
        batch = encode_pairs(pairs[32 * step : 32 * (step + 1)], vocab)
        logits = model(batch.src, batch.tgt_in, src_lengths=batch.src_lengths)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=vocab.pad_id)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-10:]) / 10 < 0.25 * losses[0], losses[::10]
