"""Chapter 07's checks: answers written as learners write them, right and wrong (independently of the catalogue)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.checks import check, get_exercise

from conftest import check_recorded  # a prediction's answer is recorded before its check, as in a notebook


def encoder_right(x, src_mask, layer):
    attended = layer.self_attn(x, mask=src_mask)
    x = layer.norm1(layer.dropout(attended) + x)
    return layer.norm2(layer.dropout(layer.ffn(x)) + x)


def encoder_wrong(**wrong):
    def encoder_layer(x, src_mask, layer):
        mask = None if wrong.get("no_mask") else src_mask
        if wrong.get("pre"):
            x = x + layer.dropout(layer.self_attn(layer.norm1(x), mask=mask))
            return x + layer.dropout(layer.ffn(layer.norm2(x)))
        h = layer.self_attn(x, mask=mask, causal=bool(wrong.get("causal")))
        h = F.dropout(h, p=layer.dropout.p) if wrong.get("dropout") else layer.dropout(h)
        x = layer.norm1(h if wrong.get("no_residual") else x + h)
        h = layer.ffn(x)
        h = F.dropout(h, p=layer.dropout.p) if wrong.get("dropout") else layer.dropout(h)
        return layer.norm2(x + h)

    return encoder_layer


def decoder_right(x, memory, src_mask, layer):
    x = layer.norm1(x + layer.dropout(layer.self_attn(x, causal=True)))
    x = layer.norm2(x + layer.dropout(layer.cross_attn(x, context=memory, mask=src_mask)))
    return layer.norm3(x + layer.dropout(layer.ffn(x)))


def decoder_wrong(**wrong):
    def decoder_layer(x, memory, src_mask, layer):
        drop = (lambda h: F.dropout(h, layer.dropout.p)) if wrong.get("dropout") else layer.dropout
        if wrong.get("pre"):
            x = x + drop(layer.self_attn(layer.norm1(x), causal=True))
            x = x + drop(layer.cross_attn(layer.norm2(x), memory, mask=src_mask))
            return x + drop(layer.ffn(layer.norm3(x)))
        x = layer.norm1(x + drop(layer.self_attn(x, causal=not wrong.get("no_causal"))))
        if wrong.get("keys_from_decoder"):
            cross = layer.cross_attn(x, x)
        else:
            cross = layer.cross_attn(x, memory, mask=None if wrong.get("no_src_mask") else src_mask)
        x = layer.norm2(x + drop(cross))
        h = drop(layer.ffn(x))
        return layer.norm3(h if wrong.get("no_residual") else x + h)

    return decoder_layer


def smoothed_right(logits, targets, smoothing, pad_id):
    log_probs = logits.log_softmax(-1)
    nll = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    loss = (1 - smoothing) * nll - smoothing * log_probs.mean(-1)
    return loss[targets != pad_id].mean()


def smoothed_wrong(**wrong):
    def label_smoothed_loss(logits, targets, smoothing, pad_id):
        vocab = logits.shape[-1]
        log_probs = F.log_softmax(logits, dim=-1)
        if wrong.get("others"):
            dist = torch.full_like(log_probs, smoothing / (vocab - 1))
            dist.scatter_(-1, targets.unsqueeze(-1), 1 - smoothing)
        else:
            dist = F.one_hot(targets, vocab).to(logits.dtype) * (1 - smoothing) + smoothing / vocab
        if wrong.get("plus"):
            dist = F.one_hot(targets, vocab).to(logits.dtype) + smoothing / vocab
        per_position = (-dist * log_probs).sum(-1)
        if wrong.get("with_pad"):
            return per_position.mean()
        mask = (targets != pad_id).to(logits.dtype)
        return (per_position * mask).sum() / (mask.numel() if wrong.get("all_positions") else mask.sum())

    return label_smoothed_loss


def noam_right(step, d_model, warmup):
    return min(1 / step**0.5, step / warmup**1.5) / d_model**0.5


LEARNER_MISTAKES = [
    ("07.encoder_layer", encoder_wrong(no_residual=True), "no_residual"),
    ("07.encoder_layer", encoder_wrong(pre=True), "pre_norm"),
    ("07.encoder_layer", encoder_wrong(no_mask=True), "padding_mask_missing"),
    ("07.encoder_layer", encoder_wrong(causal=True), "causal_encoder"),
    ("07.encoder_layer", encoder_wrong(dropout=True), "dropout_left_on"),
    ("07.decoder_layer", decoder_wrong(no_residual=True), "no_residual"),
    ("07.decoder_layer", decoder_wrong(pre=True), "pre_norm"),
    ("07.decoder_layer", decoder_wrong(keys_from_decoder=True), "cross_keys_from_decoder"),
    ("07.decoder_layer", decoder_wrong(no_causal=True), "causal_mask_missing"),
    ("07.decoder_layer", decoder_wrong(no_src_mask=True), "source_padding_mask_missing"),
    ("07.decoder_layer", decoder_wrong(dropout=True), "dropout_left_on"),
    ("07.label_smoothed_loss", smoothed_wrong(others=True), "smoothed_over_other_classes"),
    ("07.label_smoothed_loss", smoothed_wrong(with_pad=True), "padding_counted"),
    ("07.label_smoothed_loss", smoothed_wrong(all_positions=True), "divided_by_all_positions"),
    ("07.label_smoothed_loss", smoothed_wrong(plus=True), "target_weight_not_reduced"),
    ("07.noam_lr", lambda step, d_model, warmup: min(step**-0.5, step * warmup**-1.5), "forgot_d_model_scale"),
    ("07.noam_lr", lambda step, d_model, warmup: noam_right(step + 1, d_model, warmup), "step_off_by_one"),
    ("07.noam_lr", lambda step, d_model, warmup: noam_right(step, d_model, warmup + 1), "warmup_off_by_one"),
    ("07.noam_lr", lambda step, d_model, warmup: max(step**-0.5, step * warmup**-1.5) / d_model**0.5, "max_instead_of_min"),
    ("07.noam_lr", lambda step, d_model, warmup: min(1 / step, step / warmup**1.5) / d_model**0.5, "decay_without_root"),
    ("07.beam_score", lambda log_prob, length, alpha: log_prob, "no_normalisation"),
    ("07.beam_score", lambda log_prob, length, alpha: log_prob / ((6 + length) / 6) ** alpha, "wrong_length"),
    ("07.beam_score", lambda log_prob, length, alpha: log_prob / length**alpha, "plain_length_power"),
    ("07.beam_score", lambda log_prob, length, alpha: log_prob * ((5 + length) / 6) ** alpha, "multiplied_by_penalty"),
]


@pytest.mark.parametrize(("exercise_id", "learner", "mistake"), LEARNER_MISTAKES,
                         ids=[f"{e}-{m}" for e, _, m in LEARNER_MISTAKES])
def test_a_learners_mistake_is_named(exercise_id, learner, mistake, assert_mistake_named):
    assert_mistake_named(exercise_id, learner, mistake)


def test_every_catalogued_mistake_has_a_learner_version_here():
    exercises = ("07.encoder_layer", "07.decoder_layer", "07.label_smoothed_loss", "07.noam_lr", "07.beam_score")
    catalogued = {(e, m.name) for e in exercises for m in get_exercise(e).mistakes}
    assert catalogued == {(e, m) for e, _, m in LEARNER_MISTAKES}


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("07.encoder_layer", encoder_right), ("07.encoder_layer", encoder_wrong()), ("07.decoder_layer", decoder_right),
    ("07.decoder_layer", decoder_wrong()), ("07.label_smoothed_loss", smoothed_right),
    ("07.label_smoothed_loss", smoothed_wrong()), ("07.noam_lr", noam_right),
    ("07.beam_score", lambda log_prob, length, alpha: log_prob * (6 / (5 + length)) ** alpha),
])
def test_a_correct_answer_written_differently_passes(exercise_id, answer):
    assert check_recorded(exercise_id, answer).passed


def test_the_layer_references_are_pytorchs_layers_and_agree_with_the_package_blocks():
    """The package's post-norm blocks, given the same parts, give PyTorch's numbers (the references are not ours)."""
    from tutorial_lib.blocks import DecoderBlock, TransformerBlock
    from tutorial_lib.checks.ch07 import (
        ENCODER_LAYER, DECODER_LAYER, reference_decoder_layer, reference_encoder_layer,
    )

    x, src_mask, parts = ENCODER_LAYER.make_cases()[0].args
    block = TransformerBlock(16, 4, 32, placement="post").eval()
    block.attn.load_state_dict(parts.self_attn.state_dict())
    block.ffn.load_state_dict(parts.ffn.state_dict())
    block.attn_residual.norm.load_state_dict(parts.norm1.state_dict())
    block.ffn_residual.norm.load_state_dict(parts.norm2.state_dict())
    torch.testing.assert_close(block(x, mask=src_mask), reference_encoder_layer(x, src_mask, parts), atol=1e-5, rtol=1e-4)

    x, memory, src_mask, parts = DECODER_LAYER.make_cases()[0].args
    block = DecoderBlock(16, 4, 32, placement="post").eval()
    block.self_attn.load_state_dict(parts.self_attn.state_dict())
    block.cross_attn.load_state_dict(parts.cross_attn.state_dict())
    block.ffn.load_state_dict(parts.ffn.state_dict())
    for ours, norm in ((block.self_attn_residual, parts.norm1), (block.cross_attn_residual, parts.norm2),
                       (block.ffn_residual, parts.norm3)):
        ours.norm.load_state_dict(norm.state_dict())
    torch.testing.assert_close(block(x, memory, memory_mask=src_mask), reference_decoder_layer(x, memory, src_mask, parts),
                               atol=1e-5, rtol=1e-4)


def encoder_layer_with(dropout_at: str):
    """A post-norm encoder layer with its dropout where ``dropout_at`` says: on each sublayer's output (right), after
    the norm, or nowhere."""

    def encoder_layer(x, src_mask, layer):
        for sublayer, norm in ((lambda h: layer.self_attn(h, mask=src_mask), layer.norm1), (layer.ffn, layer.norm2)):
            if dropout_at == "sublayer":
                x = norm(x + layer.dropout(sublayer(x)))
            elif dropout_at == "after the norm":
                x = layer.dropout(norm(x + sublayer(x)))
            else:
                x = norm(x + sublayer(x))
        return x

    return encoder_layer


def test_dropout_is_checked_in_training_mode():
    assert check("07.encoder_layer", encoder_layer_with("sublayer")).passed
    for wrong in ("after the norm", "nowhere"):
        result = check("07.encoder_layer", encoder_layer_with(wrong))
        assert result.points == 0 and "training mode: dropout on" in result.verdict, result.verdict


def test_the_layers_gradients_reach_every_parameter_of_its_parts():
    def detached_ffn(x, src_mask, layer):  # right values, but the FFN's parameters would never train
        x = layer.norm1(x + layer.dropout(layer.self_attn(x, mask=src_mask)))
        return layer.norm2(x + layer.dropout(layer.ffn(x).detach()))

    result = check("07.encoder_layer", detached_ffn)
    assert result.kind == "wrong_gradients" and "the output is right, but the gradient" in result.verdict, result.verdict

    def frozen_final_norm(x, src_mask, layer):  # right values and input gradients; norm2's gain would never train
        x = layer.norm1(x + layer.dropout(layer.self_attn(x, mask=src_mask)))
        h = x + layer.dropout(layer.ffn(x))
        return F.layer_norm(h, h.shape[-1:], layer.norm2.weight.detach(), layer.norm2.bias, layer.norm2.eps)

    result = check("07.encoder_layer", frozen_final_norm)
    assert result.kind == "wrong_gradients" and "gradient with respect to layer.norm2.weight" in result.verdict


# --- the build exercise (greedy decoding) and the prediction -------------------------------------------------------------


def greedy_right(model, src, src_mask, bos, eos, max_len):
    memory = model.encode(src, src_mask)
    rows = [[bos] for _ in range(src.shape[0])]
    for _ in range(max_len):
        logits = model.decode(torch.tensor(rows), memory, src_mask)[:, -1]
        for row, scores in zip(rows, logits):
            row.append(eos if eos in row[1:] else int(scores.argmax()))
        if all(eos in row[1:] for row in rows):
            break
    return torch.tensor(rows)[:, 1:]


def greedy_any_stop(model, src, src_mask, bos, eos, max_len):
    memory = model.encode(src, src_mask)
    tokens = torch.full((src.shape[0], 1), bos)
    for _ in range(max_len):
        next_token = model.decode(tokens, memory, src_mask)[:, -1].argmax(-1)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        if (next_token == eos).any():
            break
    return tokens[:, 1:]


def greedy_with_bos(model, src, src_mask, bos, eos, max_len):
    return torch.cat([torch.full((src.shape[0], 1), bos), greedy_right(model, src, src_mask, bos, eos, max_len)], 1)


@pytest.mark.parametrize(("learner", "mistake"), [(greedy_any_stop, "stopped_at_first_eos"),
                                                  (greedy_with_bos, "kept_bos")])
def test_a_learners_decoding_mistake_is_named(learner, mistake, assert_mistake_named):
    assert_mistake_named("07.greedy_decode", learner, mistake)


def test_a_correct_decoder_passes_and_the_reference_is_the_packages_greedy_decode():
    from tutorial_lib.checks.ch07 import _TinyTransformer, reference_greedy_decode
    from tutorial_lib.decoding import greedy_decode

    assert check("07.greedy_decode", greedy_right).passed
    model = _TinyTransformer(35).model
    src = torch.randint(3, 10, (4, 6), generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([6, 5, 3, 1])
    mask = torch.arange(6)[None, None, :] < lengths[:, None, None]
    for eos in range(2, 10):
        ours = reference_greedy_decode(model, src, mask, 1, eos, 8)
        torch.testing.assert_close(ours, greedy_decode(model, src, bos=1, eos=eos, max_len=8, src_lengths=lengths))


def test_the_smoothing_floor_is_the_entropy_of_the_smoothed_target(predict):
    from tutorial_lib.checks.ch07 import smoothed_loss_floor

    best, confident = smoothed_loss_floor()
    p_right, p_other = 0.9 + 0.1 / 1000, 0.1 / 1000
    entropy = -p_right * math.log(p_right) - 999 * p_other * math.log(p_other)
    assert abs(best - entropy) < 1e-4 and confident > best
    assert predict("07.predict_smoothing_floor", lambda: 1.0).passed
    assert predict("07.predict_smoothing_floor", lambda: 0.1).mistake == "epsilon"


def test_decoding_without_a_cache_costs_a_few_teacher_forced_forwards(predict):
    from tutorial_lib.checks.ch07 import decoding_flops

    teacher_forced, greedy = decoding_flops()
    assert 3.3 < greedy / teacher_forced < 3.7  # the encoder once; the decoder on 66 prefix positions instead of 11
    assert predict("07.predict_decoding_flops", lambda: 3.0).passed  # the solution's estimate
    assert predict("07.predict_decoding_flops", lambda: 1).mistake == "same_work"
    assert predict("07.predict_decoding_flops", lambda: 11).mistake == "full_forward_per_token"
    assert predict("07.predict_decoding_flops", lambda: 6).mistake == "decoder_prefixes_only"
    assert predict("07.predict_decoding_flops", lambda: 1 / 11).mistake == "decoding_cheaper"


# --- 07.transformer_module (the build track's encoder-decoder) --------------------------------------------------------


def test_the_transformer_reference_is_the_packages_model_with_renamed_weights():
    from tutorial_lib.build_track import my_transformer_state_dict
    from tutorial_lib.checks.ch07 import BookTransformer
    from tutorial_lib.models.transformer import Transformer, TransformerConfig

    torch.manual_seed(0)
    cfg = TransformerConfig(d_vocab=13, n_ctx=10, d_model=16, n_heads=2, n_layers=2, d_ff=24, dropout=0.0)
    package = Transformer(cfg).eval()
    with torch.no_grad():
        for p in package.parameters():
            p.add_(0.2 * torch.randn_like(p))
    book = BookTransformer(13, 10, 16, 2, 2, 24).eval()
    book.load_state_dict(my_transformer_state_dict(package.state_dict()), strict=True)
    src, tgt = torch.randint(0, 13, (3, 10)), torch.randint(0, 13, (3, 7))
    mask = (torch.arange(10) < torch.tensor([10, 6, 3])[:, None])[:, None, :]
    torch.testing.assert_close(book(src, tgt, mask), package(src, tgt, src_mask=mask))


def test_a_right_transformer_passes_and_a_gpt_habit_is_named():
    from tutorial_lib.checks.ch07 import _transformer_module_like

    right, pre_norm = _transformer_module_like(), _transformer_module_like(placement="pre")
    right.__module__ = pre_norm.__module__ = __name__  # written in a notebook, not in the package's catalogue
    assert check("07.transformer_module", right).passed
    result = check("07.transformer_module", pre_norm)
    assert result.mistake == "pre_norm_layers" and result.points == 0
