"""BERT (chapter 14): shapes, the padding mask, bidirectionality, MLM masking statistics, parity with Hugging Face."""

from __future__ import annotations

import pytest
import torch

from tutorial_lib.attention import padding_mask
from tutorial_lib.counting import count_parameters
from tutorial_lib.models.bert import (
    IGNORE_INDEX,
    BERTConfig,
    BERTForPreTraining,
    BERTForSequenceClassification,
    mask_tokens,
    pretraining_loss,
)

D_VOCAB = 97


def _config(**changes) -> BERTConfig:
    return BERTConfig(**{"d_vocab": D_VOCAB, "n_ctx": 32, "d_model": 32, "n_heads": 4, "n_layers": 2, "d_ff": 48, **changes})


def _tokens(batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, D_VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


def _pretraining_model(**changes) -> BERTForPreTraining:
    torch.manual_seed(0)
    return BERTForPreTraining(_config(**changes)).eval()


def test_config_defaults_and_validation() -> None:
    cfg = BERTConfig(d_vocab=100, n_ctx=16, d_model=32, n_heads=4, n_layers=1)
    assert (cfg.d_ff, cfg.n_segments, cfg.eps, cfg.activation, cfg.dropout) == (128, 2, 1e-12, "gelu", 0.1)
    assert cfg.replace(n_layers=3).n_layers == 3
    for changes, name in [
        ({"d_model": 30}, "divisible"), ({"n_segments": 0}, "n_segments"), ({"dropout": 1.0}, "dropout"),
        ({"eps": 0.0}, "eps"), ({"activation": "swish"}, "activation"), ({"d_ff": 0}, "d_ff"), ({"n_ctx": 0}, "n_ctx"),
    ]:
        with pytest.raises(ValueError, match=name):
            _config(**changes)
    with pytest.raises(ValueError, match="size"):
        BERTConfig.bert("huge")


def test_parameter_counts_match_hugging_face_bert_base_and_large() -> None:
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):  # no memory: the counts only
        for size, hf_config, published in [
            ("base", transformers.BertConfig(), 110e6),
            ("large", transformers.BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096), 340e6),
        ]:
            ours = count_parameters(BERTForPreTraining(BERTConfig.bert(size)))
            assert ours == sum(p.numel() for p in transformers.BertForPreTraining(hf_config).parameters())
            assert ours == pytest.approx(published, rel=0.03)  # the paper's rounded "110M" and "340M"


def test_shapes() -> None:
    model = _pretraining_model()
    tokens, segments = _tokens(3, 20), torch.randint(0, 2, (3, 20), generator=torch.Generator().manual_seed(1))
    mlm_logits, nsp_logits = model(tokens, segments, mask=padding_mask(torch.tensor([20, 12, 3]), 20))
    assert mlm_logits.shape == (3, 20, D_VOCAB) and nsp_logits.shape == (3, 2)
    assert model.bert(tokens).shape == (3, 20, 32)
    assert model.mlm.decoder.weight is model.bert.embed.weight  # tied
    classifier = BERTForSequenceClassification(_config(), n_classes=5).eval()
    assert classifier(tokens, segments).shape == (3, 5)


def test_padding_mask_hides_padding_from_the_real_tokens() -> None:
    model = _pretraining_model()
    tokens = _tokens(2, 16)
    mask = padding_mask(torch.tensor([16, 9]), 16)
    changed = tokens.clone()
    changed[1, 9:] = (changed[1, 9:] + 1) % D_VOCAB  # rewrite the padding of the second sequence
    hidden, hidden_changed = model.bert(tokens, mask=mask), model.bert(changed, mask=mask)
    torch.testing.assert_close(hidden_changed[1, :9], hidden[1, :9], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(hidden_changed[0], hidden[0], atol=0, rtol=0)
    torch.testing.assert_close(model(changed, mask=mask)[1][1], model(tokens, mask=mask)[1][1], atol=1e-5, rtol=1e-5)
    # ... and without the mask the padding leaks into every position
    assert not torch.allclose(model.bert(changed)[1, :9], model.bert(tokens)[1, :9], atol=1e-4)


def test_attention_is_bidirectional() -> None:
    model = _pretraining_model()
    tokens = _tokens(1, 10)
    changed = tokens.clone()
    changed[0, -1] = (changed[0, -1] + 1) % D_VOCAB  # the last token changes the first position's output
    assert not torch.allclose(model.bert(changed)[0, 0], model.bert(tokens)[0, 0], atol=1e-4)


def test_segments_change_the_output() -> None:
    model = _pretraining_model()
    tokens = _tokens(1, 10)
    segments = torch.tensor([[0] * 5 + [1] * 5])
    assert torch.equal(model.bert(tokens), model.bert(tokens, torch.zeros_like(tokens)))  # default: all sentence A
    assert not torch.allclose(model.bert(tokens, segments), model.bert(tokens), atol=1e-4)


@pytest.mark.parametrize("fast", ["fast_attention", "fast_norm"])
def test_fast_kernels_equal_the_readable_path(fast: str) -> None:
    tokens, mask = _tokens(2, 12), padding_mask(torch.tensor([12, 7]), 12)
    fast_mlm, fast_nsp = _pretraining_model(**{fast: True})(tokens, mask=mask)
    mlm, nsp = _pretraining_model()(tokens, mask=mask)
    torch.testing.assert_close(fast_mlm, mlm, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast_nsp, nsp, atol=1e-5, rtol=1e-5)


def test_dropout_only_in_training_mode() -> None:
    model = _pretraining_model(dropout=0.5)
    tokens = _tokens(2, 12)
    assert torch.equal(model(tokens)[0], model(tokens)[0])
    model.train()
    assert not torch.equal(model(tokens)[0], model(tokens)[0])


def test_fine_tuning_starts_from_the_pretrained_encoder_and_pooler() -> None:
    pretrained = _pretraining_model()
    classifier = BERTForSequenceClassification.from_pretraining(pretrained, n_classes=3).eval()
    tokens = _tokens(2, 12)
    torch.testing.assert_close(classifier.bert(tokens), pretrained.bert(tokens), atol=0, rtol=0)
    assert torch.equal(classifier.head.pooler.weight, pretrained.nsp.pooler.weight)
    assert classifier.head.classifier.weight.shape == (3, 32)


# -------------------------------------------------------------------------------------------------- mask_tokens

MASK_ID, SPECIAL = 4, [0, 1, 2, 3, 4]  # [PAD], [UNK], [CLS], [SEP], [MASK]


def _corpus(batch: int = 64, seq: int = 512) -> torch.Tensor:
    tokens = torch.randint(5, 1000, (batch, seq), generator=torch.Generator().manual_seed(11))
    tokens[:, 0], tokens[:, seq // 2], tokens[:, -40:] = 2, 3, 0  # [CLS], a [SEP], then padding
    return tokens


def test_mask_tokens_statistics() -> None:
    tokens = _corpus()
    inputs, labels = mask_tokens(tokens, MASK_ID, 1000, SPECIAL, torch.Generator().manual_seed(0))
    ordinary = tokens >= 5
    chosen = labels != IGNORE_INDEX
    assert torch.equal(labels[chosen], tokens[chosen])
    assert torch.equal(inputs[~chosen], tokens[~chosen])  # what is not predicted is not touched
    assert not chosen[~ordinary].any()  # special tokens are never chosen
    assert chosen[ordinary].float().mean().item() == pytest.approx(0.15, abs=0.01)  # ~4,500 chosen: 5σ ≈ 0.01
    masked = (inputs[chosen] == MASK_ID).float().mean().item()
    kept = (inputs[chosen] == tokens[chosen]).float().mean().item()
    replaced = inputs[chosen][(inputs[chosen] != MASK_ID) & (inputs[chosen] != tokens[chosen])]
    assert masked == pytest.approx(0.8, abs=0.03)
    # a random replacement is one of the 995 ordinary ids, so it is the original with probability 1/995
    assert kept == pytest.approx(0.1 + 0.1 / 995, abs=0.02)
    assert replaced.numel() / chosen.sum().item() == pytest.approx(0.1 * (1 - 1 / 995), abs=0.02)
    assert replaced.min() >= 5 and replaced.max() < 1000  # replacements are ordinary tokens
    assert len(replaced.unique()) > 200  # drawn from the whole vocabulary, not a few ids


def test_mask_tokens_probability_argument() -> None:
    tokens = _corpus()
    _, labels = mask_tokens(tokens, MASK_ID, 1000, SPECIAL, torch.Generator().manual_seed(0), p=0.4)
    assert (labels != IGNORE_INDEX)[tokens >= 5].float().mean().item() == pytest.approx(0.4, abs=0.01)


def test_mask_tokens_is_deterministic_per_generator() -> None:
    tokens = _corpus(8, 64)
    first = mask_tokens(tokens, MASK_ID, 1000, SPECIAL, torch.Generator().manual_seed(3))
    again = mask_tokens(tokens, MASK_ID, 1000, SPECIAL, torch.Generator().manual_seed(3))
    other = mask_tokens(tokens, MASK_ID, 1000, SPECIAL, torch.Generator().manual_seed(4))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[1], other[1])
    assert torch.equal(tokens, _corpus(8, 64))  # the input is not modified in place


def test_mask_tokens_bad_input_raises() -> None:
    tokens, g = _corpus(2, 16), torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="d_vocab=1000"):
        mask_tokens(tokens + 1000, MASK_ID, 1000, SPECIAL, g)
    with pytest.raises(ValueError, match="mask_id"):
        mask_tokens(tokens, 1000, 1000, SPECIAL, g)
    with pytest.raises(ValueError, match="special_ids"):
        mask_tokens(tokens, MASK_ID, 1000, [0, -1], g)
    with pytest.raises(ValueError, match="special_ids"):
        mask_tokens(tokens % 5, MASK_ID, 5, SPECIAL, g)  # nothing left to draw replacements from
    for p in (0.0, 1.5):
        with pytest.raises(ValueError, match="p must be"):
            mask_tokens(tokens, MASK_ID, 1000, SPECIAL, g, p=p)


# --------------------------------------------------------------------------------------------- Hugging Face


def _hugging_face_pair():
    transformers = pytest.importorskip("transformers")
    cfg = _config(n_layers=3)
    hf_config = transformers.BertConfig(
        vocab_size=cfg.d_vocab, hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
        intermediate_size=cfg.d_ff, max_position_embeddings=cfg.n_ctx, type_vocab_size=cfg.n_segments,
        hidden_act=cfg.activation, layer_norm_eps=cfg.eps, attn_implementation="eager",
    )
    torch.manual_seed(0)
    hf = transformers.BertForPreTraining(hf_config).eval()
    with torch.no_grad():  # move every weight off its initial value (norms start at 1, biases at 0)
        for parameter in hf.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return hf, BERTForPreTraining.from_hf_state_dict(hf.state_dict(), cfg).eval()


def test_matches_hugging_face_bert_for_pretraining() -> None:
    hf, ours = _hugging_face_pair()
    tokens = _tokens(3, 32)
    segments = (torch.arange(32) >= torch.tensor([[10], [16], [4]])).long()
    lengths = torch.tensor([32, 20, 9])
    with torch.no_grad():
        expected = hf(tokens, attention_mask=padding_mask(lengths, 32)[:, 0].long(), token_type_ids=segments)
    mlm_logits, nsp_logits = ours(tokens, segments, mask=padding_mask(lengths, 32))
    torch.testing.assert_close(mlm_logits, expected.prediction_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(nsp_logits, expected.seq_relationship_logits, atol=1e-5, rtol=1e-5)


def test_pretraining_loss_matches_hugging_face() -> None:
    hf, ours = _hugging_face_pair()
    inputs, labels = mask_tokens(_tokens(4, 32), 3, D_VOCAB, [0, 1, 2, 3], torch.Generator().manual_seed(0))
    is_random_next = torch.tensor([0, 1, 1, 0])
    with torch.no_grad():
        expected = hf(inputs, labels=labels, next_sentence_label=is_random_next).loss
    assert pretraining_loss(*ours(inputs), labels, is_random_next).item() == pytest.approx(expected.item(), abs=1e-5)


def test_hf_key_map_is_strict() -> None:
    hf, _ = _hugging_face_pair()
    state = dict(hf.state_dict())
    state["cls.predictions.decoder.bias"] = state["cls.predictions.decoder.bias"] + 1  # no longer the tied bias
    with pytest.raises(ValueError, match="decoder.bias"):
        BERTForPreTraining.from_hf_state_dict(state, _config(n_layers=3))
    state = dict(hf.state_dict(), extra=torch.zeros(1))
    with pytest.raises(KeyError, match="extra"):
        BERTForPreTraining.from_hf_state_dict(state, _config(n_layers=3))
    with pytest.raises(ValueError, match="expected shape"):
        BERTForPreTraining.from_hf_state_dict(hf.state_dict(), _config(n_layers=3, d_ff=40))


def test_bad_input_raises(without_annotation_checks) -> None:
    model = _pretraining_model()
    with pytest.raises(ValueError, match="n_ctx=32"):
        model(_tokens(1, 33))
    with pytest.raises(ValueError, match=f"d_vocab={D_VOCAB}"):
        model(torch.tensor([[0, D_VOCAB]]))
    with pytest.raises(ValueError, match="segments"):
        model(_tokens(1, 4), torch.tensor([[0, 1, 2, 0]]))
    with without_annotation_checks(), pytest.raises(ValueError, match="segments"):
        model(_tokens(1, 4), torch.tensor([[0, 1, 1]]))
    with pytest.raises(ValueError, match="n_classes"):
        BERTForSequenceClassification(_config(), n_classes=1)
