"""Chapter 07's exercises: the paper's encoder and decoder layers, label smoothing, Eq. (3)'s rate and the beam's score.

- ``07.encoder_layer`` and ``07.decoder_layer`` are the course's capstone: the learner writes the forward of a
  post-norm layer from its parts (the package's attention and FFN, PyTorch's LayerNorm and Dropout) and the check
  runs PyTorch's ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` holding the same weights. The cases
  pad some sources, so a padding mask left out changes the values, and run with dropout in evaluation mode: dropout
  left on is caught because every answer runs from the same seed of the global generator, so a learner's dropout
  and the catalogued one draw the same masks.
- ``07.label_smoothed_loss`` is compared with ``F.cross_entropy(label_smoothing=ε, ignore_index=pad)``.
- ``07.noam_lr`` and ``07.beam_score`` are the formulas of Eq. (3) and of GNMT's length penalty (§6.1's α = 0.6).
- ``07.predict_decoding_flops`` (predict, then measure, with PyTorch's FLOP counter): greedy decoding without a cache
  against one teacher-forced forward of the date Transformer on the same 100 dates.
- ``07.transformer_module`` (the build track's encoder-decoder) is the learner's ``Transformer`` module, made of their
  embeddings, attention, FFN and LayerNorm of chapters 02-06: it loads the chapter's trained date model (renamed by
  :func:`tutorial_lib.build_track.my_transformer_state_dict`) and must give its logits and gradients.

As in ``ch03``, the mistakes are written the way a learner would write them and carry no annotations.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tutorial_lib.checks.ch04 import _mha_like
from tutorial_lib.checks.ch05 import _feed_forward_like
from tutorial_lib.checks.ch06 import _OwnLayerNorm
from tutorial_lib.checks.compound import mistake_builder
from tutorial_lib.attention import padding_mask
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, register
from tutorial_lib.checks.modules import build_module, first_module_that_differs, same_parameters
from tutorial_lib.embeddings import SinusoidalPositionalEncoding, TokenEmbedding, sinusoidal_positional_encoding
from tutorial_lib.models.transformer import Transformer
from tutorial_lib.normalization import LayerNorm
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction
from tutorial_lib.blocks import DecoderBlock, TransformerBlock
from tutorial_lib.decoding import beam_search, beam_search_batch, greedy_decode, length_penalty
from tutorial_lib.feed_forward import FeedForward
from tutorial_lib.multi_head import MultiHeadAttention
from tutorial_lib.training import label_smoothing_loss, noam_lr

# --- the parts a learner's layer is built from ----------------------------------------------------------------------------


@dataclass(repr=False)
class EncoderLayerParts:
    """What an encoder layer holds: ``self_attn`` (called as ``self_attn(x, mask=...)``), ``ffn``, ``norm1`` (after
    attention), ``norm2`` (after the FFN) and ``dropout`` (on each sublayer's output, before the residual sum)."""

    self_attn: MultiHeadAttention
    ffn: FeedForward
    norm1: nn.LayerNorm
    norm2: nn.LayerNorm
    dropout: nn.Dropout

    def __repr__(self) -> str:
        return f"{type(self).__name__}(d_model={self.self_attn.d_model}, n_heads={self.self_attn.n_heads})"


@dataclass(repr=False)
class DecoderLayerParts:
    """A decoder layer: ``self_attn`` (masked), ``cross_attn`` (called as ``cross_attn(x, memory, mask=...)``),
    ``ffn``, ``norm1``, ``norm2``, ``norm3`` (after each sublayer in that order) and ``dropout``."""

    self_attn: MultiHeadAttention
    cross_attn: MultiHeadAttention
    ffn: FeedForward
    norm1: nn.LayerNorm
    norm2: nn.LayerNorm
    norm3: nn.LayerNorm
    dropout: nn.Dropout

    def __repr__(self) -> str:
        return f"{type(self).__name__}(d_model={self.self_attn.d_model}, n_heads={self.self_attn.n_heads})"


def _random_(module: nn.Module, generator: torch.Generator, dtype: torch.dtype) -> nn.Module:
    """Random weights everywhere (norms around γ = 1, β = 0) so that no part can be left out unnoticed."""
    module = module.to(dtype)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=generator, dtype=dtype)
            if isinstance(module, nn.LayerNorm):
                p.copy_((1.0 if name == "weight" else 0.0) + 0.3 * noise)
            else:
                p.copy_(noise / math.sqrt(p.shape[-1]))
    return module.eval()


def _parts(kind: str, d_model: int, n_heads: int, d_ff: int, generator: torch.Generator, dtype: torch.dtype,
           training: bool = False):
    attn = lambda: _random_(MultiHeadAttention(d_model, n_heads), generator, dtype)  # noqa: E731
    norm = lambda: _random_(nn.LayerNorm(d_model), generator, dtype)  # noqa: E731
    ffn = _random_(FeedForward(d_model, d_ff), generator, dtype)
    dropout = nn.Dropout(0.1).train(training)
    if kind == "encoder":
        return EncoderLayerParts(attn(), ffn, norm(), norm(), dropout)
    return DecoderLayerParts(attn(), attn(), ffn, norm(), norm(), norm(), dropout)


def _torch_weights(layer: EncoderLayerParts | DecoderLayerParts) -> dict[str, torch.Tensor]:
    """The layer's own parameters under the names of PyTorch's ``nn.TransformerEncoderLayer`` and
    ``nn.TransformerDecoderLayer``, for ``torch.func.functional_call``: computed from them (PyTorch stacks W^Q, W^K,
    W^V into one ``in_proj_weight``), so that gradients flow back to the layer's parameters."""
    weights = {}
    attentions = {"self_attn": layer.self_attn, "multihead_attn": getattr(layer, "cross_attn", None)}
    for name, attn in attentions.items():
        if attn is not None:
            weights[f"{name}.in_proj_weight"] = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
            weights[f"{name}.in_proj_bias"] = torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias])
            weights[f"{name}.out_proj.weight"], weights[f"{name}.out_proj.bias"] = attn.out_proj.weight, attn.out_proj.bias
    for ours, theirs in (("up", "linear1"), ("down", "linear2")):
        weights[f"{theirs}.weight"], weights[f"{theirs}.bias"] = getattr(layer.ffn, ours).weight, getattr(layer.ffn, ours).bias
    for i in (1, 2, 3):
        norm = getattr(layer, f"norm{i}", None)
        if norm is not None:
            weights[f"norm{i}.weight"], weights[f"norm{i}.bias"] = norm.weight, norm.bias
    return weights


def _post_norm_sublayers(x: torch.Tensor, layer, sublayers) -> torch.Tensor:
    """§5.4 in training mode: each sublayer's output dropped out, added to its input, normalised (``x = norm(x +
    dropout(sublayer(x)))``), the dropout masks drawn in that order from the seeded global generator."""
    for sublayer, norm in sublayers:
        x = norm(x + layer.dropout(sublayer(x)))
    return x


def _padding(lengths: list[int], seq: int) -> torch.Tensor:
    """The package's source mask: (batch, 1, seq), True on real tokens."""
    return (torch.arange(seq)[None, :] < torch.tensor(lengths)[:, None])[:, None, :]


def _seeded_call(obj, args):
    """Every answer runs from the same global seed, so that dropout left on draws the same masks in each."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return obj(*args)


# --- 07.encoder_layer -----------------------------------------------------------------------------------------------------


def reference_encoder_layer(x, src_mask, layer):
    """In evaluation mode, PyTorch's post-norm ``nn.TransformerEncoderLayer`` computing with the layer's parameters;
    in training mode, §5.4's dropout on each sublayer's output (PyTorch's layer drops inside its FFN too)."""
    if layer.dropout.training:
        return _post_norm_sublayers(x, layer, [(lambda h: layer.self_attn(h, mask=src_mask), layer.norm1),
                                               (layer.ffn, layer.norm2)])
    d_model, n_heads, d_ff = layer.self_attn.d_model, layer.self_attn.n_heads, layer.ffn.up.out_features
    ref = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=layer.dropout.p, batch_first=True,
                                     norm_first=False, dtype=x.dtype).eval()
    with torch.enable_grad():  # PyTorch's inference fast path would zero the outputs at padded positions
        return torch.func.functional_call(ref, _torch_weights(layer), (x,), {"src_key_padding_mask": ~src_mask[:, 0, :]})


def _encoder_cases(generator: torch.Generator) -> list[Case]:
    def case(batch, seq, d_model, n_heads, lengths, dtype=torch.float32, note="", training=False):
        x = torch.randn(batch, seq, d_model, generator=generator, dtype=dtype)
        return Case.of(x=x, src_mask=_padding(lengths, seq), layer=_parts("encoder", d_model, n_heads, 2 * d_model,
                                                                            generator, dtype, training), note=note)

    return [
        case(2, 6, 16, 4, [6, 3], note="the second source padded after 3 tokens"),
        case(3, 5, 8, 2, [5, 5, 1], note="a source of one token"),
        case(1, 4, 8, 2, [4], torch.float64, note="float64, no padding"),
        case(2, 5, 8, 2, [5, 4], note="training mode: dropout on, from the same seed", training=True),
    ]


@mistake_builder
def _encoder_like(*, norm="post", residual=(True, True), mask=True, causal=False, dropout_on=False):
    """A learner's encoder layer; each keyword reproduces one way of getting it wrong."""

    def encoder_layer(x, src_mask, layer):
        drop = (lambda h: F.dropout(h, layer.dropout.p)) if dropout_on else layer.dropout

        def sublayer(x, f, norm_module, keep_residual):
            if norm == "pre":
                return (x if keep_residual else 0) + drop(f(norm_module(x)))
            return norm_module((x if keep_residual else 0) + drop(f(x)))

        x = sublayer(x, lambda h: layer.self_attn(h, mask=src_mask if mask else None, causal=causal), layer.norm1,
                     residual[0])
        return sublayer(x, layer.ffn, layer.norm2, residual[1])

    return encoder_layer


def _encoder_norms_swapped(x, src_mask, layer):
    x = layer.norm2(x + layer.dropout(layer.self_attn(x, mask=src_mask)))
    return layer.norm1(x + layer.dropout(layer.ffn(x)))


def _encoder_one_norm(x, src_mask, layer):
    x = layer.norm1(x + layer.dropout(layer.self_attn(x, mask=src_mask)))
    return layer.norm1(x + layer.dropout(layer.ffn(x)))


def _encoder_no_ffn_norm(x, src_mask, layer):
    x = layer.norm1(x + layer.dropout(layer.self_attn(x, mask=src_mask)))
    return x + layer.dropout(layer.ffn(x))


ENCODER_LAYER = Exercise(
    id="07.encoder_layer",
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    forbidden=(nn.TransformerEncoderLayer, nn.TransformerEncoder, TransformerBlock),
    reference=reference_encoder_layer,
    cases=_encoder_cases,
    call=_seeded_call,
    points=2,
    outputs=("the layer's output",),
    axes={"the layer's output": "d_model"},
    tolerance=(1e-4, 1e-5),
    checked=("against nn.TransformerEncoderLayer (post-norm, evaluation mode) computing with the same weights, with "
             "padded sources, gradients included; and in training mode, dropout on each sublayer's output"),
    mistakes=(
        Mistake("no_residual", "left out a residual connection",
                "Each sublayer's output is *added* to its input before the norm: `layer.norm1` normalizes that sum.",
                (_encoder_like(residual=(False, True)), _encoder_like(residual=(True, False)),
                 _encoder_like(residual=(False, False)))),
        Mistake("pre_norm", "wrote a pre-norm layer, x + Sublayer(Norm(x))",
                "The paper normalizes *after* the residual sum (post-norm): the sublayer reads x itself, and "
                "`layer.norm1` normalizes x plus the sublayer's output.",
                (_encoder_like(norm="pre"),)),
        Mistake("padding_mask_missing", "left out the source padding mask",
                "Pass `mask=src_mask` to the self-attention, or the real tokens attend to the padding.",
                (_encoder_like(mask=False),)),
        Mistake("causal_encoder", "made the encoder's self-attention causal",
                "The encoder reads the whole source in both directions: no causal mask, only the padding mask.",
                (_encoder_like(causal=True),)),
        Mistake("dropout_left_on", "applied dropout that stays on in evaluation mode",
                "Use the module `layer.dropout`, which is off after `.eval()`; `F.dropout` is on unless "
                "you pass `training=...`.", (_encoder_like(dropout_on=True),)),
    ),
    mutants=(
        Mutant("norms_swapped", "uses norm2 after attention and norm1 after the FFN", _encoder_norms_swapped),
        Mutant("one_norm", "uses norm1 after both sublayers", _encoder_one_norm),
        Mutant("no_ffn_norm", "leaves out the norm after the FFN", _encoder_no_ffn_norm),
    ),
)


# --- 07.decoder_layer -----------------------------------------------------------------------------------------------------


def reference_decoder_layer(x, memory, src_mask, layer):
    """In evaluation mode, PyTorch's post-norm ``nn.TransformerDecoderLayer`` computing with the layer's parameters;
    in training mode, §5.4's dropout on each sublayer's output (PyTorch's layer drops inside its FFN too)."""
    if layer.dropout.training:
        return _post_norm_sublayers(x, layer, [(lambda h: layer.self_attn(h, causal=True), layer.norm1),
                                               (lambda h: layer.cross_attn(h, memory, mask=src_mask), layer.norm2),
                                               (layer.ffn, layer.norm3)])
    d_model, n_heads, d_ff = layer.self_attn.d_model, layer.self_attn.n_heads, layer.ffn.up.out_features
    ref = nn.TransformerDecoderLayer(d_model, n_heads, d_ff, dropout=layer.dropout.p, batch_first=True,
                                     norm_first=False, dtype=x.dtype).eval()
    seq = x.shape[1]
    future = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # PyTorch's boolean masks: True = may NOT attend
    with torch.enable_grad():
        return torch.func.functional_call(ref, _torch_weights(layer), (x, memory), {
            "tgt_mask": future, "tgt_is_causal": True, "memory_key_padding_mask": ~src_mask[:, 0, :]})


def _decoder_cases(generator: torch.Generator) -> list[Case]:
    def case(batch, tgt, src, d_model, n_heads, lengths, dtype=torch.float32, note="", training=False):
        x = torch.randn(batch, tgt, d_model, generator=generator, dtype=dtype)
        memory = torch.randn(batch, src, d_model, generator=generator, dtype=dtype)
        return Case.of(x=x, memory=memory, src_mask=_padding(lengths, src),
                       layer=_parts("decoder", d_model, n_heads, 2 * d_model, generator, dtype, training), note=note)

    return [
        case(2, 5, 7, 16, 4, [7, 3], note="5 target positions, 7 source positions, the second source padded"),
        case(3, 4, 4, 8, 2, [4, 2, 1], note="target and source of equal length"),
        case(1, 3, 6, 8, 2, [6], torch.float64, note="float64, no padding"),
        case(2, 4, 5, 8, 2, [5, 3], note="training mode: dropout on, from the same seed", training=True),
    ]


@mistake_builder
def _decoder_like(*, norm="post", residual=(True, True, True), causal=True, cross="memory", src_mask_on=True,
                  dropout_on=False):
    """A learner's decoder layer; each keyword reproduces one way of getting it wrong."""

    def decoder_layer(x, memory, src_mask, layer):
        drop = (lambda h: F.dropout(h, layer.dropout.p)) if dropout_on else layer.dropout

        def sublayer(x, f, norm_module, keep_residual):
            if norm == "pre":
                return (x if keep_residual else 0) + drop(f(norm_module(x)))
            return norm_module((x if keep_residual else 0) + drop(f(x)))

        def cross_attention(h):
            if cross == "decoder":
                return layer.cross_attn(h)
            return layer.cross_attn(h, memory, mask=src_mask if src_mask_on else None)

        x = sublayer(x, lambda h: layer.self_attn(h, causal=causal), layer.norm1, residual[0])
        x = sublayer(x, cross_attention, layer.norm2, residual[1])
        return sublayer(x, layer.ffn, layer.norm3, residual[2])

    return decoder_layer


def _decoder_cross_before_self(x, memory, src_mask, layer):
    x = layer.norm1(x + layer.dropout(layer.cross_attn(x, memory, mask=src_mask)))
    x = layer.norm2(x + layer.dropout(layer.self_attn(x, causal=True)))
    return layer.norm3(x + layer.dropout(layer.ffn(x)))


def _decoder_shared_attention(x, memory, src_mask, layer):
    x = layer.norm1(x + layer.dropout(layer.self_attn(x, causal=True)))
    x = layer.norm2(x + layer.dropout(layer.self_attn(x, memory, mask=src_mask)))
    return layer.norm3(x + layer.dropout(layer.ffn(x)))


def _decoder_norm_inside_cross(x, memory, src_mask, layer):
    x = layer.norm1(x + layer.dropout(layer.self_attn(x, causal=True)))
    x = x + layer.norm2(layer.dropout(layer.cross_attn(x, memory, mask=src_mask)))
    return layer.norm3(x + layer.dropout(layer.ffn(x)))


DECODER_LAYER = Exercise(
    id="07.decoder_layer",
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    forbidden=(nn.TransformerDecoderLayer, nn.TransformerDecoder, DecoderBlock),
    reference=reference_decoder_layer,
    cases=_decoder_cases,
    call=_seeded_call,
    points=2,
    outputs=("the layer's output",),
    axes={"the layer's output": "d_model"},
    tolerance=(1e-4, 1e-5),
    checked=("against nn.TransformerDecoderLayer (post-norm, causal, evaluation mode) computing with the same weights, "
             "with padded sources, gradients included; and in training mode, dropout on each sublayer's output"),
    mistakes=(
        Mistake("no_residual", "left out a residual connection",
                "Each sublayer's output is *added* to its input before the norm: `layer.norm1` normalizes that sum.",
                (_decoder_like(residual=(False, True, True)), _decoder_like(residual=(True, False, True)),
                 _decoder_like(residual=(True, True, False)))),
        Mistake("pre_norm", "wrote a pre-norm layer, x + Sublayer(Norm(x))",
                "The paper normalizes *after* the residual sum (post-norm): the sublayer reads x itself, and "
                "`layer.norm1` normalizes x plus the sublayer's output.",
                (_decoder_like(norm="pre"),)),
        Mistake("cross_keys_from_decoder", "took the cross-attention's keys and values from the decoder, not the encoder",
                "Cross-attention reads the encoder's output: pass `memory` to `layer.cross_attn` after x; its queries "
                "come from the decoder, its keys and values from `memory`.", (_decoder_like(cross="decoder"),)),
        Mistake("causal_mask_missing", "left out the causal mask in the decoder's self-attention",
                "Pass `causal=True` to `layer.self_attn`: without it each position reads the later target tokens, which "
                "teacher forcing hands it during training and generation does not have.",
                (_decoder_like(causal=False),)),
        Mistake("source_padding_mask_missing", "left out the source padding mask in the cross-attention",
                "Pass `mask=src_mask` to the cross-attention, or the decoder reads the source's padding.",
                (_decoder_like(src_mask_on=False),)),
        Mistake("dropout_left_on", "applied dropout that stays on in evaluation mode",
                "Use the module `layer.dropout`, which is off after `.eval()`; `F.dropout` is on unless "
                "you pass `training=...`.", (_decoder_like(dropout_on=True),)),
    ),
    mutants=(
        Mutant("cross_before_self", "runs cross-attention before self-attention", _decoder_cross_before_self),
        Mutant("self_attn_for_cross", "uses self_attn's weights for the cross-attention", _decoder_shared_attention),
        Mutant("norm_inside_cross", "normalizes the cross-attention's output instead of the sum",
               _decoder_norm_inside_cross),
    ),
)


# --- 07.label_smoothed_loss -----------------------------------------------------------------------------------------------


def reference_label_smoothed_loss(logits, targets, smoothing, pad_id):
    """Cross-entropy against (1 - ε)·one_hot + ε/d_vocab, averaged over the non-padding positions."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), label_smoothing=smoothing, ignore_index=pad_id)


def _smoothing_cases(generator: torch.Generator) -> list[Case]:
    def case(batch, seq, d_vocab, smoothing, pad_id, n_pad, dtype=torch.float32, note=""):
        logits = 2 * torch.randn(batch, seq, d_vocab, generator=generator, dtype=dtype)
        targets = torch.randint(0, d_vocab, (batch, seq), generator=generator)
        targets[targets == pad_id] = (pad_id + 1) % d_vocab
        if n_pad:
            targets[-1, -n_pad:] = pad_id
        return Case.of(logits=logits, targets=targets, smoothing=smoothing, pad_id=pad_id, note=note)

    return [
        case(2, 6, 7, 0.1, 0, 3, note="3 padded positions"),
        case(3, 4, 5, 0.3, 0, 2, torch.float64, note="ε = 0.3, float64"),
        case(2, 5, 11, 0.2, 4, 1, note="the padding id is 4"),
    ]


@mistake_builder
def _smoothing_like(*, spread="all", ignore_pad=True, denominator="kept", keep_nll_weight=True):
    """A learner's label-smoothed loss; each keyword reproduces one way of getting it wrong."""

    def label_smoothed_loss(logits, targets, smoothing, pad_id):
        log_probs = torch.log_softmax(logits, dim=-1)
        d_vocab = logits.shape[-1]
        if spread == "all":
            target = torch.full_like(log_probs, smoothing / d_vocab)
            target.scatter_(-1, targets[..., None], 1 - smoothing + smoothing / d_vocab)
        else:  # the ε spread over the d_vocab - 1 wrong classes only
            target = torch.full_like(log_probs, smoothing / (d_vocab - 1))
            target.scatter_(-1, targets[..., None], 1 - smoothing)
        if not keep_nll_weight:
            target.scatter_(-1, targets[..., None], 1.0 + smoothing / d_vocab)
        loss = -(target * log_probs).sum(-1)
        keep = targets != pad_id if ignore_pad else torch.ones_like(targets, dtype=torch.bool)
        total = (loss * keep).sum()
        return total / (keep.sum() if denominator == "kept" else targets.numel())

    return label_smoothed_loss


def _smoothing_sum(logits, targets, smoothing, pad_id):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), label_smoothing=smoothing, ignore_index=pad_id,
                           reduction="sum")


def _smoothing_none(logits, targets, smoothing, pad_id):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=pad_id)


LABEL_SMOOTHED_LOSS = Exercise(
    id="07.label_smoothed_loss",
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    forbidden=(label_smoothing_loss, F.cross_entropy, nn.CrossEntropyLoss),
    reference=reference_label_smoothed_loss,
    cases=_smoothing_cases,
    points=1,
    outputs=("the loss",),
    tolerance=(1e-5, 1e-6),
    checked="with padded targets, ε of 0.1 to 0.3 and a padding id that is not 0, against F.cross_entropy(label_smoothing=ε)",
    mistakes=(
        Mistake("smoothed_over_other_classes", "spread ε over the d_vocab - 1 wrong classes only",
                "§5.4's (and PyTorch's) label smoothing spreads ε over every class, the right one included: "
                "ε/d_vocab each, and 1 - ε + ε/d_vocab on the target.", (_smoothing_like(spread="others"),)),
        Mistake("padding_counted", "counted the padded positions in the loss",
                "Mask the positions whose target is `pad_id` out of the sum *and* out of the count.",
                (_smoothing_like(ignore_pad=False),)),
        Mistake("divided_by_all_positions", "averaged over every position, padding included",
                "The padded positions are out of the sum; leave them out of the count too: divide by "
                "the number of targets that are not `pad_id`.", (_smoothing_like(denominator="all"),)),
        Mistake("target_weight_not_reduced", "kept weight 1 on the right class and added ε on top",
                "The smoothed target sums to 1: the right class gets 1 - ε + ε/d_vocab, not 1 + ε/d_vocab.",
                (_smoothing_like(keep_nll_weight=False),)),
    ),
    mutants=(
        Mutant("summed", "sums over positions instead of averaging", _smoothing_sum),
        Mutant("no_smoothing", "ignores ε", _smoothing_none),
    ),
)


# --- 07.noam_lr -----------------------------------------------------------------------------------------------------------


def _noam_cases(generator: torch.Generator) -> list[Case]:
    del generator  # the cases are the schedule's landmarks, not random draws
    return [
        Case.of(step=1, d_model=512, warmup=4000, note="the first update"),
        Case.of(step=2000, d_model=512, warmup=4000, note="half-way through the warm-up"),
        Case.of(step=4000, d_model=512, warmup=4000, note="the peak"),
        Case.of(step=16000, d_model=512, warmup=4000, note="after the warm-up"),
        Case.of(step=30, d_model=128, warmup=200, note="a small model"),
        Case.of(step=800, d_model=128, warmup=200, note="a small model, decaying"),
    ]


@mistake_builder
def _noam_like(*, scale=True, offset=0, warmup_offset=0, decay_power=-0.5, use_max=False):
    """A learner's Eq. (3); each keyword reproduces one way of getting it wrong."""

    def noam_rate(step, d_model, warmup):
        s = step + offset
        w = warmup + warmup_offset
        branch = max if use_max else min
        rate = branch(s**decay_power, s * w**-1.5)
        return d_model**-0.5 * rate if scale else rate

    return noam_rate


NOAM_LR = Exercise(
    id="07.noam_lr",
    reference=noam_lr,
    cases=_noam_cases,
    points=1,
    outputs=("the learning rate",),
    tolerance=(1e-9, 0.0),
    checked="at the first update, half-way through the warm-up, the peak and after it, for the base model and a small one",
    mistakes=(
        Mistake("forgot_d_model_scale", "left out the d_model^-0.5 factor",
                "Eq. (3) multiplies the whole by d_model^-0.5, one over its square root: wider models take smaller steps.",
                (_noam_like(scale=False),)),
        Mistake("step_off_by_one", "counted the steps one ahead (step + 1)",
                "The paper's `step_num` starts at 1 on the first update; use `step` as given, without adding or "
                "subtracting 1.", (_noam_like(offset=1),)),
        Mistake("warmup_off_by_one", "made the warm-up one step longer or shorter than warmup_steps",
                "The warm-up branch is step · warmup^-1.5 with `warmup` as given: the two branches then meet "
                "exactly when `step` equals `warmup`, the peak.", (_noam_like(warmup_offset=1), _noam_like(warmup_offset=-1))),
        Mistake("max_instead_of_min", "took the larger of the two branches instead of the smaller",
                "Eq. (3) takes the smaller of the two branches (`min`): the linear warm-up is the smaller one before "
                "`warmup`, "
                "the decay after.", (_noam_like(use_max=True),)),
        Mistake("decay_without_root", "decayed as 1/step instead of 1/√step",
                "After the warm-up the rate falls as step^-0.5, the inverse square root.",
                (_noam_like(decay_power=-1.0),)),
    ),
    mutants=(
        Mutant("positive_exponent", "multiplies by √d_model", lambda step, d_model, warmup: d_model**0.5 * min(step**-0.5, step * warmup**-1.5)),
        Mutant("warmup_root", "uses warmup^-0.5 in the warm-up branch", lambda step, d_model, warmup: d_model**-0.5 * min(step**-0.5, step * warmup**-0.5)),
    ),
)


# --- 07.beam_score --------------------------------------------------------------------------------------------------------


def reference_beam_score(log_prob, length, alpha):
    """GNMT's length-normalised score: log P(Y | X) / lp(Y), lp(Y) = ((5 + |Y|) / 6)^α."""
    return log_prob / ((5 + length) / 6) ** alpha


def _beam_cases(generator: torch.Generator) -> list[Case]:
    del generator
    return [
        Case.of(log_prob=-2.5, length=10, alpha=0.6, note="the paper's α = 0.6"),
        Case.of(log_prob=-0.7, length=3, alpha=0.6, note="a short output"),
        Case.of(log_prob=-4.0, length=25, alpha=1.0, note="α = 1"),
        Case.of(log_prob=-1.2, length=1, alpha=0.6, note="a one-token output, where lp = 1"),
        Case.of(log_prob=-3.3, length=7, alpha=0.0, note="α = 0: no length penalty"),
    ]


@mistake_builder
def _beam_like(*, length_offset=0, normalise=True, form="gnmt", multiply=False):
    """A learner's beam score; each keyword reproduces one way of getting it wrong."""

    def beam_score(log_prob, length, alpha):
        n = length + length_offset
        penalty = ((5 + n) / 6) ** alpha if form == "gnmt" else n**alpha
        if not normalise:
            return log_prob
        return log_prob * penalty if multiply else log_prob / penalty

    return beam_score


BEAM_SCORE = Exercise(
    id="07.beam_score",
    forbidden=(length_penalty,),
    reference=reference_beam_score,
    cases=_beam_cases,
    points=1,
    outputs=("the score",),
    tolerance=(1e-9, 0.0),
    checked="α of 0, 0.6 and 1 and lengths from 1 to 25",
    mistakes=(
        Mistake("no_normalisation", "ranked by the log-probability alone",
                "Divide by GNMT's length penalty lp(Y), as the chapter defines it: without it beam search prefers short "
                "outputs, whose log-probability has fewer negative terms.", (_beam_like(normalise=False),)),
        Mistake("wrong_length", "computed the penalty for the wrong length (counting <bos>, or not counting <eos>)",
                "`length` is already the number of generated tokens; use it as given.",
                (_beam_like(length_offset=1), _beam_like(length_offset=-1))),
        Mistake("plain_length_power", "divided by a plain power of the length instead of GNMT's length penalty",
                "Use GNMT's penalty as the exercise states it (the one §6.1's α = 0.6 belongs to): its constants soften "
                "the penalty for short outputs, which a plain power of the length does not.",
                (_beam_like(form="plain"),)),
        Mistake("multiplied_by_penalty", "multiplied by the length penalty instead of dividing",
                "The log-probability is divided by lp(Y) ≥ 1, which makes long outputs' scores less negative.",
                (_beam_like(multiply=True),)),
    ),
    mutants=(
        Mutant("penalty_on_probability", "applies the penalty to the probability, not its log",
               lambda log_prob, length, alpha: math.log(math.exp(log_prob) / ((5 + length) / 6) ** alpha)),
        Mutant("exponent_outside", "raises only the numerator to α",
               lambda log_prob, length, alpha: log_prob / ((5 + length) ** alpha / 6)),
    ),
)

# --- 07.greedy_decode (build) ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ReverserConfig:
    n_ctx: int
    tgt_vocab: int


class Reverser(nn.Module):
    """A stand-in for a trained seq2seq model whose greedy output is known: the source's real tokens reversed, then
    EOS. It has a :class:`Transformer`'s interface (``encode``, ``decode``, ``cfg``) and reads what a real one reads:
    the position of the query (from the length of the target prefix), the memory, and the source mask (which says
    where the source ends)."""

    def __init__(self, d_vocab: int, eos: int) -> None:
        super().__init__()
        self.cfg, self.eos = _ReverserConfig(n_ctx=32, tgt_vocab=d_vocab), eos

    def encode(self, src, src_mask=None):
        memory = F.one_hot(src, self.cfg.tgt_vocab).float()
        return memory if src_mask is None else memory * src_mask.transpose(-1, -2)

    def decode(self, tgt, memory, src_mask=None, *, cache=None):
        batch, n_query = tgt.shape
        lengths = torch.full((batch,), memory.shape[1]) if src_mask is None else src_mask[:, 0].sum(-1)
        logits = torch.zeros(batch, n_query, self.cfg.tgt_vocab)
        for b in range(batch):
            for i in range(n_query):  # after i generated tokens, emit the (i+1)-th from the end of the source
                j = int(lengths[b]) - 1 - i
                token = int(memory[b, j].argmax()) if j >= 0 else self.eos
                logits[b, i, token] = 10.0
        return logits

    def __repr__(self) -> str:
        return f"Reverser(d_vocab={self.cfg.tgt_vocab}, eos={self.eos})"


class _TinyTransformer(nn.Module):
    """A random one-layer encoder-decoder Transformer, with a one-line repr for the verdicts."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        from tutorial_lib.models.transformer import Transformer, TransformerConfig

        config = TransformerConfig(n_ctx=16, d_vocab=10, d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0)
        with torch.random.fork_rng(devices=[]):  # the notebook's random state is not the check's business
            torch.manual_seed(seed)
            self.model = Transformer(config).eval()
        with torch.no_grad():
            for p in self.model.parameters():
                p.mul_(3.0)  # sharper logits: rows that end at different steps
        self.cfg = self.model.cfg

    def encode(self, src, src_mask=None):
        return self.model.encode(src, src_mask)

    def decode(self, tgt, memory, src_mask=None, *, cache=None):
        return self.model.decode(tgt, memory, src_mask, cache=cache)

    def __repr__(self) -> str:
        return "Transformer(1 layer, d_model 16, random weights)"


def reference_greedy_decode(model, src, src_mask, bos, eos, max_len):
    """Greedy decoding as the package's :func:`~tutorial_lib.decoding.greedy_decode` does it without its KV cache
    (tests/test_checks_ch07.py holds the two equal), for any model with ``encode`` and ``decode``: the generated tokens
    without BOS, finished rows filled with EOS."""
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long)
        done = torch.zeros(src.shape[0], dtype=torch.bool)
        for _ in range(max_len):
            next_token = model.decode(tokens, memory, src_mask)[:, -1].argmax(dim=-1).masked_fill(done, eos)
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
            done |= next_token == eos
            if done.all():
                break
    return tokens[:, 1:]


def _decode_cases(generator: torch.Generator) -> list[Case]:
    from tutorial_lib.attention import padding_mask

    def source(lengths: list[int], seq: int) -> dict[str, torch.Tensor]:
        src = torch.randint(3, 10, (len(lengths), seq), generator=generator)
        mask = padding_mask(torch.tensor(lengths), seq)
        return {"src": src.masked_fill(~mask[:, 0], 0), "src_mask": mask}

    return [
        Case.of(model=Reverser(10, eos=2), **source([5, 3, 1], 6), bos=1, eos=2, max_len=8,
                note="a model that reverses its source: rows end after 6, 4 and 2 tokens"),
        Case.of(model=Reverser(10, eos=2), **source([6, 2], 6), bos=1, eos=2, max_len=4,
                note="max_len 4 cuts the first row before its EOS"),
        Case.of(model=_TinyTransformer(35), **source([6, 4, 2], 6), bos=1, eos=4, max_len=8,
                note="a random Transformer whose rows end after 4, 1 and 2 tokens"),
    ]


@mistake_builder
def _greedy_like(*, keep_bos=False, fill=True, stop="all", feed="prefix", position=-1, mask_in=("encode", "decode"),
                 steps=0):
    """A learner's greedy decoding; each keyword reproduces one way of getting it wrong."""

    def greedy_decode(model, src, src_mask, bos, eos, max_len):
        memory = model.encode(src, src_mask if "encode" in mask_in else None)
        tokens = torch.full((src.shape[0], 1), bos)
        done = torch.zeros(src.shape[0], dtype=torch.bool)
        for _ in range(max_len + steps):
            inputs = tokens if feed == "prefix" else tokens[:, -1:]
            logits = model.decode(inputs, memory, src_mask if "decode" in mask_in else None)
            next_token = logits[:, position].argmax(dim=-1)
            if fill:
                next_token = next_token.masked_fill(done, eos)
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
            done = done | (next_token == eos)
            if stop == "all" and done.all() or stop == "any" and done.any():
                break
        return tokens if keep_bos else tokens[:, 1:]

    return greedy_decode


def _greedy_never_stops(model, src, src_mask, bos, eos, max_len):
    memory = model.encode(src, src_mask)
    tokens = torch.full((src.shape[0], 1), bos)
    for _ in range(max_len):
        next_token = model.decode(tokens, memory, src_mask)[:, -1].argmax(-1)
        next_token = torch.where(tokens[:, 1:].eq(eos).any(-1), torch.full_like(next_token, eos), next_token)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
    return tokens[:, 1:]


GREEDY_DECODE = Exercise(
    id="07.greedy_decode",
    forbidden=(greedy_decode, beam_search, beam_search_batch),
    reference=reference_greedy_decode,
    cases=_decode_cases,
    points=3,
    outputs=("the generated tokens",),
    axes={"the generated tokens": "step"},
    checked="a model that reverses its source (rows of different lengths, one cut by max_len) and a random one-layer "
            "Transformer, against the package's greedy_decode",
    mistakes=(
        Mistake("kept_bos", "returned the tokens with the BOS token in front",
                "BOS is the decoder's first input, not something the model generated: leave its column out of what you "
                "return.",
                (_greedy_like(keep_bos=True),)),
        Mistake("no_fill_after_eos", "kept generating in rows that had already produced EOS",
                "A row that has produced EOS is finished: fill its later steps with EOS "
                "(`masked_fill` with the rows that are `done`), or the text after its end counts as output.",
                (_greedy_like(fill=False),)),
        Mistake("stopped_at_first_eos", "stopped the whole batch as soon as one row produced EOS",
                "Stop when *every* row is finished: break when all of `done` is true, not when any of it is.",
                (_greedy_like(stop="any"),)),
        Mistake("fed_only_the_last_token", "fed the decoder only the newest token at each step, without a KV cache",
                "Without a cache the decoder must see the whole prefix (BOS and every token so far) to know where it "
                "is; feeding one token is what the cached path does, and only because the cache holds the rest.",
                (_greedy_like(feed="last"),)),
        Mistake("first_position_logits", "took the logits of the first target position instead of the last",
                "The decoder returns logits for every position of the prefix; the next token is predicted at the "
                "last one, so take the logits of the last position.", (_greedy_like(position=0),)),
        Mistake("forgot_the_source_mask", "left out the source's padding mask",
                "Pass `src_mask` to both `model.encode` and `model.decode`, or the padding tokens at the end of the "
                "shorter sources are read as if they were text.",
                (_greedy_like(mask_in=()), _greedy_like(mask_in=("encode",)))),
    ),
    mutants=(
        Mutant("one_step_short", "stops one step before max_len", _greedy_like(steps=-1)),
        Mutant("never_stops_early", "runs max_len steps even after every row has finished", _greedy_never_stops),
    ),
)


# --- 07.predict_smoothing_floor (predict, then measure) ----------------------------------------------------------------

PREDICT_VOCAB, PREDICT_SMOOTHING = 1000, 0.1


def smoothed_loss_floor(d_vocab: int = PREDICT_VOCAB, smoothing: float = PREDICT_SMOOTHING) -> tuple[float, float]:
    """The label-smoothed loss of the best possible prediction (the smoothed target itself) and of a confident, right
    one (probability 0.999 on the right token), as ``F.cross_entropy(label_smoothing=smoothing)`` computes it."""
    target = torch.tensor([0])
    smoothed = torch.full((1, d_vocab), smoothing / d_vocab)
    smoothed[0, 0] += 1 - smoothing
    confident = torch.full((1, d_vocab), 0.001 / (d_vocab - 1))
    confident[0, 0] = 0.999
    return tuple(F.cross_entropy(p.log(), target, label_smoothing=smoothing).item() for p in (smoothed, confident))


PREDICT_SMOOTHING_FLOOR = predict_number(
    "07.predict_smoothing_floor",
    measure=lambda: smoothed_loss_floor()[0],
    question=f"the lowest smoothed loss (ε = {PREDICT_SMOOTHING}, {PREDICT_VOCAB} tokens)",
    within=1.3,
    misconceptions=[
        Misconception("zero", 0.0, "expected a perfect model to reach a loss of zero",
                      "With label smoothing the target is no longer one-hot: it keeps ε spread over the whole "
                      "vocabulary, and the cross-entropy against a spread-out target is at least its entropy."),
        Misconception("epsilon", PREDICT_SMOOTHING, "took the floor to be ε itself",
                      "ε is the probability mass that is spread, not the loss: each of the d_vocab tokens gets "
                      "ε / d_vocab, and each costs -log(ε / d_vocab), about 9.2 nats here."),
        Misconception("right_token_only", -math.log(1 - PREDICT_SMOOTHING),
                      "counted only the right token's share, -log(1 - ε)",
                      "The ε spread over the other tokens is in the target too, and it costs the most: ε · "
                      "(-log(ε / d_vocab)) dominates the floor."),
        Misconception("uniform", math.log(PREDICT_VOCAB), "took the floor to be the loss of a uniform guess, log d_vocab",
                      "The best prediction is the smoothed target itself (0.9 on the right token), far better than "
                      "uniform: the floor is the entropy of that target."),
    ],
    mutants=[
        wrong_prediction("huge", 30.0, "more than any prediction on 1000 tokens costs"),
        wrong_prediction("tiny", 0.01, "a tenth of ε"),
    ],
    points=1,
)


# --- 07.predict_decoding_flops (predict, then measure: what decoding one token at a time costs) ------------------------

DECODING_DATES = 100  # the first 100 test dates, as one batch


def decoding_flops() -> tuple[int, int]:
    """The floating-point operations, as torch.utils.flop_counter.FlopCounterMode counts them, of the chapter's date
    Transformer (untrained, seed 0) on the first ``DECODING_DATES`` test dates: one teacher-forced forward (the
    training step's, all 11 target positions at once) and greedy decoding of 11 tokens that re-reads the whole prefix
    at every step (``greedy_decode(..., use_cache=False)``, exercise 6's algorithm). An untrained model never ends
    every row early, so all 11 steps run."""
    from torch.utils.flop_counter import FlopCounterMode

    from tutorial_lib.data.dates import encode_pairs
    from tutorial_lib.models.transformer import Transformer
    from tutorial_lib.recipes.date_transformer import DATE_MAX_LEN, DATE_TRANSFORMER_CONFIG, DATE_VOCAB, date_splits

    with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
        torch.manual_seed(0)
        model = Transformer(DATE_TRANSFORMER_CONFIG).eval()
    batch = encode_pairs(date_splits().test[:DECODING_DATES], DATE_VOCAB)
    counts = []
    for run in (
        lambda: model(batch.src, batch.tgt_in, src_lengths=batch.src_lengths),
        lambda: greedy_decode(model, batch.src, bos=DATE_VOCAB.bos_id, eos=DATE_VOCAB.eos_id, max_len=DATE_MAX_LEN,
                              src_lengths=batch.src_lengths, use_cache=False),
    ):
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            run()
        counts.append(counter.get_total_flops())
    return counts[0], counts[1]


def decoding_flop_ratio() -> float:
    """FLOPs of greedy decoding without a cache over those of one teacher-forced forward (:func:`decoding_flops`)."""
    teacher_forced, greedy = decoding_flops()
    return greedy / teacher_forced


PREDICT_DECODING_FLOPS = predict_number(
    "07.predict_decoding_flops",
    measure=decoding_flop_ratio,
    question="the FLOPs of greedy decoding over those of a teacher-forced forward",
    within=1.3,
    points=1,
    misconceptions=[
        Misconception("same_work", 1.0, "expected decoding to cost what one teacher-forced forward costs",
                      "Teacher forcing reads all 11 target positions in one pass. Decoding cannot: each step needs "
                      "the token the step before produced, and without a cache it reads the whole prefix again."),
        Misconception("full_forward_per_token", 11.0,
                      "counted a whole forward, encoder included, for each of the 11 tokens",
                      "The encoder runs once, before the loop: the source does not change while the output grows. "
                      "Only the decoder runs at every step, and early steps read short prefixes."),
        Misconception("decoder_prefixes_only", 6.0,
                      "compared the decoder's prefix positions with its 11 positions and left the encoder out",
                      "Both runs include the encoder's pass over the source, the same in each, and it is a large "
                      "share of the teacher-forced forward: it pulls the ratio down."),
        Misconception("decoding_cheaper", 1 / 11, "expected one token at a time to be cheaper than the whole forward",
                      "The teacher-forced forward already computes every position once; decoding computes each "
                      "prefix again at every step, so it can only cost more."),
    ],
    mutants=[
        wrong_prediction("hundred", 100.0, "far more than re-reading 11 prefixes can cost"),
        wrong_prediction("half", 0.5, "less than the forward it repeats"),
    ],
)

# --- 07.transformer_module (the build track's encoder-decoder: the learner's modules, the book's date model) ----------


class _BookEncoderLayer(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.attn, self.ln_1 = MultiHeadAttention(d_model, n_heads), LayerNorm(d_model)
        self.ffn, self.ln_2 = FeedForward(d_model, d_ff), LayerNorm(d_model)

    def forward(self, x, mask=None):
        x = self.ln_1(x + self.attn(x, mask=mask))
        return self.ln_2(x + self.ffn(x))


class _BookDecoderLayer(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.self_attn, self.ln_1 = MultiHeadAttention(d_model, n_heads), LayerNorm(d_model)
        self.cross_attn, self.ln_2 = MultiHeadAttention(d_model, n_heads), LayerNorm(d_model)
        self.ffn, self.ln_3 = FeedForward(d_model, d_ff), LayerNorm(d_model)

    def forward(self, x, memory, src_mask=None):
        x = self.ln_1(x + self.self_attn(x, causal=True))
        x = self.ln_2(x + self.cross_attn(x, memory, mask=src_mask))
        return self.ln_3(x + self.ffn(x))


class BookTransformer(nn.Module):
    """The package's encoder-decoder (post-norm, one shared embedding matrix scaled by √d_model, sinusoidal positions,
    a ReLU FFN) under the build track's names (:func:`tutorial_lib.build_track.my_transformer_state_dict` renames the
    book's weights to them): equal to ``Transformer`` (tested)."""

    def __init__(self, d_vocab: int, n_ctx: int, d_model: int, n_heads: int, n_layers: int, d_ff: int) -> None:
        super().__init__()
        self.n_ctx = n_ctx
        self.embed = TokenEmbedding(d_vocab, d_model, scale=True)
        self.register_buffer("pe", sinusoidal_positional_encoding(n_ctx, d_model), persistent=False)
        self.encoder_layers = nn.ModuleList(_BookEncoderLayer(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.decoder_layers = nn.ModuleList(_BookDecoderLayer(d_model, n_heads, d_ff) for _ in range(n_layers))

    def _embedded(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        if seq > self.n_ctx:
            raise ValueError(f"{seq} positions, more than n_ctx={self.n_ctx}")
        return self.embed(tokens) + self.pe[:seq]

    def encode(self, src, src_mask=None):
        x = self._embedded(src)
        for layer in self.encoder_layers:
            x = layer(x, mask=src_mask)
        return x

    def decode(self, tgt, memory, src_mask=None):
        x = self._embedded(tgt)
        for layer in self.decoder_layers:
            x = layer(x, memory, src_mask)
        return x @ self.embed.weight.T

    def forward(self, src, tgt, src_mask=None):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@dataclass(frozen=True)
class TransformerSizes:
    """The arguments of the learner's ``Transformer(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff)``."""

    d_vocab: int
    n_ctx: int
    d_model: int
    n_heads: int
    n_layers: int
    d_ff: int

    def args(self) -> tuple:
        return (self.d_vocab, self.n_ctx, self.d_model, self.n_heads, self.n_layers, self.d_ff)

    def __repr__(self) -> str:
        return f"Transformer{self.args()}"


SMALL_TRANSFORMER = TransformerSizes(d_vocab=11, n_ctx=8, d_model=16, n_heads=2, n_layers=2, d_ff=32)
TRANSFORMER_SIGNATURE = "Transformer(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff)"


def _random_transformer_weights(sizes: TransformerSizes, generator: torch.Generator) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        shapes = {name: p.shape for name, p in BookTransformer(*sizes.args()).state_dict().items()}
    return {name: (1.0 if name.endswith("weight") and ".ln_" in name else 0.0)
            + 0.3 * torch.randn(shape, generator=generator) for name, shape in shapes.items()}


@functools.lru_cache(maxsize=1)
def book_date_transformer_case() -> tuple[TransformerSizes, dict[str, torch.Tensor], tuple[torch.Tensor, ...]]:
    """Chapter 07's trained date model (the recipe's, from the cache or trained once), its weights in the build
    track's names, and 4 validation dates: sources, teacher-forced targets, the source padding mask."""
    from tutorial_lib.build_track import my_transformer_state_dict
    from tutorial_lib.recipes.date_transformer import date_validation_batches, load_or_train_date_transformer

    book, _ = load_or_train_date_transformer(progress=False)
    cfg = book.cfg
    sizes = TransformerSizes(cfg.src_vocab, cfg.n_ctx, cfg.d_model, cfg.n_heads, cfg.n_encoder_layers, cfg.d_ff)
    weights = {name: t.detach().clone() for name, t in my_transformer_state_dict(book.state_dict()).items()}
    batch = date_validation_batches()[0]
    src, lengths, tgt = batch.src[:4], batch.src_lengths[:4], batch.tgt_in[:4]
    return sizes, weights, (src[:, : int(lengths.max())], tgt, padding_mask(lengths, int(lengths.max())))


def _transformer_module_cases(generator: torch.Generator) -> list[Case]:
    book_sizes, book_weights, (book_src, book_tgt, book_mask) = book_date_transformer_case()
    lengths = torch.tensor([8, 5, 2])
    return [
        Case.of(sizes=SMALL_TRANSFORMER, weights=_random_transformer_weights(SMALL_TRANSFORMER, generator),
                src=torch.randint(0, 11, (2, 8), generator=generator), tgt=torch.randint(0, 11, (2, 6), generator=generator),
                src_mask=None, note="every weight random, no padding"),
        Case.of(sizes=SMALL_TRANSFORMER, weights=_random_transformer_weights(SMALL_TRANSFORMER, generator),
                src=torch.randint(0, 11, (3, 8), generator=generator), tgt=torch.randint(0, 11, (3, 7), generator=generator),
                src_mask=padding_mask(lengths, 8), note="three padded sources, with their padding mask"),
        Case.of(sizes=SMALL_TRANSFORMER, weights=_random_transformer_weights(SMALL_TRANSFORMER, generator),
                src=torch.randint(0, 11, (1, 9), generator=generator), tgt=torch.randint(0, 11, (1, 3), generator=generator),
                src_mask=None, note="a source of 9 positions for n_ctx = 8: a ValueError"),
        Case.of(sizes=book_sizes, weights={name: t.double() for name, t in book_weights.items()}, src=book_src.clone(),
                tgt=book_tgt.clone(), src_mask=book_mask.clone(),
                note="chapter 07's trained date model, in float64, on 4 validation dates, teacher-forced"),
    ]


def _transformer_module_call(cls, args):
    sizes, weights, src, tgt, src_mask = args
    module = build_module(cls, sizes.args(), TRANSFORMER_SIGNATURE)
    same_parameters(module, weights, TRANSFORMER_SIGNATURE)
    # not strict: the sinusoidal table is a buffer outside the state dict (same_parameters has checked every name)
    return torch.func.functional_call(module.eval(), weights, (src, tgt), {"src_mask": src_mask}, strict=False)


def locate_first_transformer_difference(cls, args) -> str | None:
    sizes, weights, src, tgt, src_mask = args
    return first_module_that_differs(build_module(cls, sizes.args(), "Transformer"), BookTransformer(*sizes.args()),
                                     weights, (src, tgt), {"src_mask": src_mask})


def _sinusoid(n_ctx, d_model):
    position = torch.arange(n_ctx, dtype=torch.float64)[:, None]
    frequency = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(n_ctx, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: d_model // 2])
    return table.float()


@mistake_builder
def _transformer_module_like(*, scale=True, positions=True, placement="post", causal=True, cross_mask=True,
                             cross_from="memory", encoder_mask=True):
    """A learner's encoder-decoder made of a learner's parts; each keyword reproduces one way of getting it wrong."""

    class EncoderLayer(nn.Module):
        def __init__(self, d_model, n_heads, d_ff):
            super().__init__()
            self.attn, self.ln_1 = _mha_like()(d_model, n_heads), _OwnLayerNorm(d_model)
            self.ffn, self.ln_2 = _feed_forward_like()(d_model, d_ff, "relu"), _OwnLayerNorm(d_model)

        def forward(self, x, mask=None):
            mask = mask if encoder_mask else None
            if placement == "pre":
                x = x + self.attn(self.ln_1(x), mask=mask)
                return x + self.ffn(self.ln_2(x))
            x = self.ln_1(x + self.attn(x, mask=mask))
            return self.ln_2(x + self.ffn(x))

    class DecoderLayer(nn.Module):
        def __init__(self, d_model, n_heads, d_ff):
            super().__init__()
            self.self_attn, self.ln_1 = _mha_like()(d_model, n_heads), _OwnLayerNorm(d_model)
            self.cross_attn, self.ln_2 = _mha_like()(d_model, n_heads), _OwnLayerNorm(d_model)
            self.ffn, self.ln_3 = _feed_forward_like()(d_model, d_ff, "relu"), _OwnLayerNorm(d_model)

        def forward(self, x, memory, src_mask=None):
            mask = src_mask if cross_mask else None
            seq = x.shape[1]
            causal_mask = torch.ones(seq, seq, dtype=torch.bool).tril() if causal else None
            if placement == "pre":
                x = x + self.self_attn(self.ln_1(x), mask=causal_mask)
                x = x + self.cross_attn(self.ln_2(x), memory, mask=mask)
                return x + self.ffn(self.ln_3(x))
            x = self.ln_1(x + self.self_attn(x, mask=causal_mask))
            if cross_from == "memory":
                x = self.ln_2(x + self.cross_attn(x, memory, mask=mask))
            else:  # queries from memory, keys and values from the decoder
                x = self.ln_2(x + self.cross_attn(memory, x)[:, : x.shape[1]])
            return self.ln_3(x + self.ffn(x))

    class MyTransformer(nn.Module):
        def __init__(self, d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff):
            super().__init__()
            self.n_ctx = n_ctx
            self.embed = nn.Embedding(d_vocab, d_model)
            self.register_buffer("pe", _sinusoid(n_ctx, d_model), persistent=False)
            self.encoder_layers = nn.ModuleList(EncoderLayer(d_model, n_heads, d_ff) for _ in range(n_layers))
            self.decoder_layers = nn.ModuleList(DecoderLayer(d_model, n_heads, d_ff) for _ in range(n_layers))

        def embedded(self, tokens):
            seq = tokens.shape[1]
            if seq > self.n_ctx:
                raise ValueError(f"{seq} positions, more than n_ctx={self.n_ctx}")
            x = self.embed(tokens) * (math.sqrt(self.embed.weight.shape[1]) if scale else 1.0)
            return x + self.pe[:seq] if positions else x

        def encode(self, src, src_mask=None):
            x = self.embedded(src)
            for layer in self.encoder_layers:
                x = layer(x, mask=src_mask)
            return x

        def decode(self, tgt, memory, src_mask=None):
            x = self.embedded(tgt)
            for layer in self.decoder_layers:
                x = layer(x, memory, src_mask)
            return x @ self.embed.weight.T

        def forward(self, src, tgt, src_mask=None):
            return self.decode(tgt, self.encode(src, src_mask), src_mask)

    return MyTransformer


class _LastEncoderLayerOnly(_transformer_module_like()):
    def encode(self, src, src_mask=None):
        return self.encoder_layers[-1](self.embedded(src), mask=src_mask)


class _DecoderReadsFirstLayer(_transformer_module_like()):
    def forward(self, src, tgt, src_mask=None):
        memory = self.encoder_layers[0](self.embedded(src), mask=src_mask)
        return self.decode(tgt, memory, src_mask)


TRANSFORMER_MODULE = Exercise(
    id="07.transformer_module",
    gradients=True,  # trained in the chapter: a detached or no_grad path must not pass
    # the package's models and torch's ready-made layers are not the learner's; their own modules of chapters 02-06 are
    forbidden=(Transformer, BookTransformer, TransformerBlock, DecoderBlock, MultiHeadAttention, FeedForward, LayerNorm,
               nn.LayerNorm, F.layer_norm, nn.MultiheadAttention, F.scaled_dot_product_attention, nn.Transformer,
               nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, sinusoidal_positional_encoding,
               SinusoidalPositionalEncoding),
    reference=BookTransformer,
    call=_transformer_module_call,
    localize=locate_first_transformer_difference,
    cases=_transformer_module_cases,
    points=4,
    outputs=("the logits",),
    checked=(
        "Transformers with every weight random (sources with and without padding, a source of 9 positions for n_ctx = "
        "8: a ValueError), and chapter 07's trained date model, its weights put in your layers by name (in float64), "
        "teacher-forced on 4 validation dates: the logits and the gradients of every weight equal to the book's model's"
    ),
    mistakes=(
        Mistake("unscaled_embeddings", "did not multiply the embeddings by √d_model",
                "§3.4: the embedding's rows are multiplied by √d_model before the positions are added (your "
                "TokenEmbedding of chapter 02 does it with `scale=True`).", (_transformer_module_like(scale=False),)),
        Mistake("no_positions", "left out the sinusoidal positions",
                "Both sides add the sinusoidal encoding of each position (§3.5) to the scaled embeddings.",
                (_transformer_module_like(positions=False),)),
        Mistake("pre_norm_layers", "normalised before each sublayer, as GPT does, instead of after the residual sum",
                "The paper's layers are post-norm: add each sublayer's output to its input first, then normalise the "
                "sum.", (_transformer_module_like(placement="pre"),)),
        Mistake("decoder_not_causal", "ran the decoder's self-attention without the causal mask",
                "A target position must not read the positions after it: the decoder's self-attention is causal.",
                (_transformer_module_like(causal=False),)),
        Mistake("cross_attention_sees_padding", "did not hand the source's padding mask to cross-attention",
                "The decoder's cross-attention reads the source, so its padding must stay hidden there too.",
                (_transformer_module_like(cross_mask=False),)),
        Mistake("encoder_sees_padding", "did not hand the source's padding mask to the encoder's self-attention",
                "The encoder's self-attention must not read the source's padding either.",
                (_transformer_module_like(encoder_mask=False),)),
        Mistake("cross_attention_reversed", "took cross-attention's queries from the memory and its keys and values from "
                "the decoder", "In cross-attention the decoder asks (queries) and the encoder's output answers (keys "
                "and values).", (_transformer_module_like(cross_from="decoder"),)),
    ),
    mutants=(
        Mutant("last_encoder_layer_only", "runs only the last encoder layer", _LastEncoderLayerOnly),
        Mutant("decoder_reads_first_layer", "hands the decoder the first encoder layer's output", _DecoderReadsFirstLayer),
    ),
)


register(ENCODER_LAYER, DECODER_LAYER, LABEL_SMOOTHED_LOSS, NOAM_LR, BEAM_SCORE, GREEDY_DECODE, PREDICT_SMOOTHING_FLOOR,
         PREDICT_DECODING_FLOPS, TRANSFORMER_MODULE)
