"""tutorial_lib.recipes.bert (chapter 14): pre-training batches and loss, measurements and baselines, the cached runs,
fine-tuning, the bag-of-words baseline, filling in blanks, and a pre-trained BERT loaded from a saved checkpoint."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from tutorial_lib.attention import padding_mask
from tutorial_lib.recipes import bert
from tutorial_lib.recipes.bert import (
    BERT_TRAIN_CONFIG,
    TURN_TRAIN_CONFIG,
    BagOfWords,
    ClassificationBatch,
    ScriptData,
    accuracy,
    all_mask,
    bert_config_from_hf,
    bert_pretraining_loss,
    choose_bag_of_words,
    class_probabilities,
    encode_labelled_pairs,
    evaluation_batches,
    fill_mask,
    fine_tune,
    fine_tune_hub_bert,
    load_or_train_tiny_bert,
    make_pretraining_batch,
    accuracy_hiding_from_cls,
    mlm_baselines,
    model_from_snapshot,
    pair_positions,
    pretraining_batches,
    pretraining_metrics,
    random_text_positions,
    tiny_bert_checkpoint_path,
    train_bag_of_words,
    TinyBERTInParts,
    train_tiny_bert,
    turn_task,
)
from tutorial_lib.data.dialogue import WordTokenizer, nsp_pairs, parse_speeches, script_lines, split_speeches
from tutorial_lib.data.shakespeare import load_tiny_shakespeare
from tutorial_lib.models.bert import (
    IGNORE_INDEX,
    BERTConfig,
    BERTForPreTraining,
    BERTForSequenceClassification,
    mask_tokens,
    pretraining_loss,
)


@pytest.fixture(scope="module")
def data() -> ScriptData:
    """The first 300 speeches of the corpus, split and tokenized as the recipe does."""
    train, val = split_speeches(parse_speeches(load_tiny_shakespeare())[:300])
    tokenizer = WordTokenizer.from_texts(script_lines(train), min_count=2)

    def encode(speeches):
        return [tokenizer.encode(line) for line in script_lines(speeches)]

    return ScriptData(tokenizer, train, val, encode(train), encode(val))


def _config(data: ScriptData, **changes) -> BERTConfig:
    return BERTConfig(**{"d_vocab": data.tokenizer.d_vocab, "n_ctx": 48, "d_model": 16, "n_heads": 2, "n_layers": 1,
                         "d_ff": 32, "dropout": 0.0, **changes})


SHORT = dataclasses.replace(BERT_TRAIN_CONFIG, max_steps=6, warmup_steps=2)


def test_pretraining_batches_hold_masked_pairs_and_new_pairs_every_pass(data):
    tok = data.tokenizer
    lines = data.train_lines[:20]
    next_batch = pretraining_batches(lines, tok, batch_size=8, n_ctx=48, generator=torch.Generator().manual_seed(0))
    batches = [next_batch() for _ in range(4)]  # 19 pairs a pass: the third batch starts a new pass
    batch = batches[0]
    assert batch.inputs.shape == batch.segments.shape == batch.labels.shape and batch.is_random_next.shape == (8,)
    chosen = batch.labels != IGNORE_INDEX
    assert chosen.any() and not torch.isin(batch.labels[chosen], torch.tensor(tok.special_ids)).any()
    assert (batch.inputs[:, 0] == tok.cls_id).all() and set(batch.is_random_next.tolist()) <= {0, 1}
    first_pass = nsp_pairs(lines, torch.Generator().manual_seed(0))
    assert len(first_pass) == 19
    with pytest.raises(ValueError, match="masking must be one of"):
        make_pretraining_batch(first_pass[:2], tok, 48, torch.Generator(), masking="90/10")


def test_all_mask_chooses_the_same_tokens_and_shows_them_all_as_mask():
    tokens = torch.randint(5, 60, (6, 30), generator=torch.Generator().manual_seed(0))
    inputs, labels = all_mask(tokens, 4, 60, [0, 1, 2, 3, 4], torch.Generator().manual_seed(1))
    _, reference_labels = mask_tokens(tokens, 4, 60, [0, 1, 2, 3, 4], torch.Generator().manual_seed(1))
    chosen = labels != IGNORE_INDEX
    assert torch.equal(labels, reference_labels) and (inputs[chosen] == 4).all()
    assert torch.equal(inputs[~chosen], tokens[~chosen])


def test_the_chosen_positions_loss_equals_the_full_pretraining_loss(data):
    torch.manual_seed(0)
    model = BERTForPreTraining(_config(data)).eval()
    (batch,) = evaluation_batches(data.val_lines[:40], data.tokenizer, n_ctx=48)[:1]
    mask = padding_mask(batch.lengths, batch.inputs.shape[1])
    full = pretraining_loss(*model(batch.inputs, batch.segments, mask=mask), batch.labels, batch.is_random_next)
    assert bert_pretraining_loss(model, batch).item() == pytest.approx(full.item(), abs=1e-5)


def test_pretraining_metrics_agree_with_a_direct_computation(data):
    torch.manual_seed(0)
    model = BERTForPreTraining(_config(data)).eval()
    batches = evaluation_batches(data.val_lines, data.tokenizer, n_ctx=48)
    metrics = pretraining_metrics(model, batches, data.tokenizer.mask_id)
    right, shown, losses, nsp_right = [], [], [], []
    with torch.no_grad():
        for b in batches:
            mlm, nsp = model(b.inputs, b.segments, mask=padding_mask(b.lengths, b.inputs.shape[1]))
            chosen = b.labels != IGNORE_INDEX
            right.append((mlm.argmax(-1) == b.labels)[chosen])
            shown.append(b.inputs[chosen] == data.tokenizer.mask_id)
            losses.append(F.cross_entropy(mlm[chosen], b.labels[chosen], reduction="none"))
            nsp_right.append(nsp.argmax(-1) == b.is_random_next)
    right, shown = torch.cat(right).float(), torch.cat(shown)
    assert metrics.n_chosen == len(right) and metrics.n_pairs == len(torch.cat(nsp_right))
    assert metrics.mlm_accuracy == pytest.approx(right.mean().item())
    assert metrics.mask_accuracy == pytest.approx(right[shown].mean().item())
    assert metrics.mlm_loss == pytest.approx(torch.cat(losses).mean().item(), rel=1e-5)
    assert metrics.nsp_accuracy == pytest.approx(torch.cat(nsp_right).float().mean().item())
    shares = (metrics.mask_accuracy, metrics.random_accuracy, metrics.kept_accuracy)
    assert all(0 <= share <= 1 for share in shares) and model.training is False


def test_mlm_baselines_are_the_word_frequencies(data):
    tok = WordTokenizer(["a", "b", "c"])  # ids 5, 6, 7
    train_lines = [[5, 5, 5, 6, 2, 3], [5, 7, 0]]  # special ids do not count: a 4, b 1, c 1
    labels = torch.full((1, 6), IGNORE_INDEX)
    labels[0, :3] = torch.tensor([5, 6, 6])
    batch = bert.PretrainingBatch(labels.clamp(min=0), torch.zeros_like(labels), torch.tensor([6]), labels,
                                  torch.tensor([0]))
    baselines = mlm_baselines(train_lines, [batch], tok)
    assert baselines.most_frequent == "a" and baselines.most_frequent_accuracy == pytest.approx(1 / 3)
    assert baselines.unigram_cross_entropy == pytest.approx(-(math.log(4 / 6) + 2 * math.log(1 / 6)) / 3, rel=1e-6)


def test_training_measures_stops_and_is_seeded(data, monkeypatch):
    monkeypatch.setattr(bert, "EVAL_EVERY", 2)
    cfg = _config(data)
    model, record = train_tiny_bert(data, model_cfg=cfg, train_cfg=SHORT, batch_size=8, progress=False)
    assert record["updates"] == 6 and [m["updates"] for m in record["metrics"]] == [2, 4, 6]
    assert record["steps"][0] == 0 and record["steps"][-1] == 5 and record["seconds"] > 0
    again, _ = train_tiny_bert(data, model_cfg=cfg, train_cfg=SHORT, batch_size=8, progress=False)
    for (name, p), q in zip(model.state_dict().items(), again.state_dict().values()):
        assert torch.equal(p, q), name
    stopped, short_record = train_tiny_bert(data, model_cfg=cfg, train_cfg=SHORT, batch_size=8, stop_after=3,
                                            progress=False)
    assert short_record["updates"] == 3 and [m["updates"] for m in short_record["metrics"]] == [2, 3]
    assert short_record["metrics"][0] == record["metrics"][0]  # the same run, cut short
    for bad in (0, 7, True):
        with pytest.raises(ValueError, match="stop_after"):
            train_tiny_bert(data, model_cfg=cfg, train_cfg=SHORT, stop_after=bad, progress=False)
    with pytest.raises(ValueError, match="d_vocab"):
        train_tiny_bert(data, model_cfg=cfg.replace(d_vocab=7), train_cfg=SHORT, progress=False)


def test_the_cache_gives_back_the_same_model_and_record(data, tmp_path):
    cfg = _config(data)
    kwargs = {"model_cfg": cfg, "train_cfg": SHORT, "batch_size": 8, "checkpoint_dir": tmp_path, "progress": False}
    model, record = load_or_train_tiny_bert(data, **kwargs)
    loaded, loaded_record = load_or_train_tiny_bert(data, **kwargs)
    assert loaded_record == record
    for p, q in zip(model.state_dict().values(), loaded.state_dict().values()):
        assert torch.equal(p, q)
    paths = {tiny_bert_checkpoint_path(cfg, SHORT, 8, masking, seed, stop, checkpoint_dir=tmp_path)
             for masking, seed, stop in [("80/10/10", 0, None), ("all [MASK]", 0, None), ("80/10/10", 1, None),
                                         ("80/10/10", 0, 3)]}
    assert len(paths) == 4  # every setting has its own file


def test_a_run_trained_in_parts_is_the_cached_run_of_one_call(data, tmp_path, monkeypatch):
    monkeypatch.setattr(bert, "EVAL_EVERY", 2)
    cfg = _config(data)
    settings = {"model_cfg": cfg, "train_cfg": SHORT, "batch_size": 8, "snapshot_at": 3}
    one_call, record = train_tiny_bert(data, **settings, progress=False)
    parts = TinyBERTInParts(data, **settings, checkpoint_dir=tmp_path)
    parts.train_until(3, progress=False)
    assert parts.run.record["updates"] == 3 and not parts.path.exists()
    model, parts_record = parts.finish(progress=False)
    assert parts.path.exists() and parts.lock is None
    assert {k: v for k, v in parts_record.items() if k not in ("seconds", "snapshot")} == \
        {k: v for k, v in record.items() if k not in ("seconds", "snapshot")}
    for p, q in zip(model.state_dict().values(), one_call.state_dict().values(), strict=True):
        assert torch.equal(p, q)
    assert torch.equal(parts_record["snapshot"]["bert.embed.weight"], record["snapshot"]["bert.embed.weight"])
    cached = TinyBERTInParts(data, **settings, checkpoint_dir=tmp_path)  # now in the cache: nothing trains
    cached.train_until(3, progress=False)
    assert cached.run is None
    loaded, loaded_record = cached.finish(progress=False)
    assert loaded_record["metrics"] == parts_record["metrics"]
    assert all(torch.equal(p, q) for p, q in zip(loaded.state_dict().values(), model.state_dict().values()))
    with pytest.raises(ValueError, match="settings must be load_or_train_tiny_bert's arguments"):
        TinyBERTInParts(data, steps=3)


def test_a_snapshot_is_the_model_a_run_stopped_there_gives(data, tmp_path):
    cfg = _config(data)
    _, record = train_tiny_bert(data, model_cfg=cfg, train_cfg=SHORT, batch_size=8, snapshot_at=3, progress=False)
    stopped, _ = train_tiny_bert(data, model_cfg=cfg, train_cfg=SHORT, batch_size=8, stop_after=3, progress=False)
    snapshot = model_from_snapshot(record, cfg)
    for (name, p), q in zip(stopped.state_dict().items(), snapshot.state_dict().values()):
        assert torch.equal(p, q), name
    _, last = train_tiny_bert(data, model_cfg=cfg, train_cfg=SHORT, batch_size=8, snapshot_at=6, progress=False)
    assert torch.equal(last["snapshot"]["bert.embed.weight"], last_model_weight(data, cfg))
    for bad in (0, 7, True):
        with pytest.raises(ValueError, match="snapshot_at"):
            train_tiny_bert(data, model_cfg=cfg, train_cfg=SHORT, snapshot_at=bad, progress=False)
    with pytest.raises(ValueError, match="snapshot"):
        model_from_snapshot({"metrics": []}, cfg)
    kwargs = {"model_cfg": cfg, "train_cfg": SHORT, "batch_size": 8, "checkpoint_dir": tmp_path, "progress": False}
    _, saved = load_or_train_tiny_bert(data, snapshot_at=3, **kwargs)
    _, loaded = load_or_train_tiny_bert(data, snapshot_at=3, **kwargs)
    assert torch.equal(saved["snapshot"]["bert.embed.weight"], loaded["snapshot"]["bert.embed.weight"])
    assert tiny_bert_checkpoint_path(cfg, SHORT, 8, snapshot_at=3) != tiny_bert_checkpoint_path(cfg, SHORT, 8)


def last_model_weight(data: ScriptData, cfg: BERTConfig) -> torch.Tensor:
    model, _ = train_tiny_bert(data, model_cfg=cfg, train_cfg=SHORT, batch_size=8, progress=False)
    return model.state_dict()["bert.embed.weight"]


def test_knocking_a_token_out_of_cls_view(data):
    tok = data.tokenizer
    pairs = [("and so it is", "so it is", 1), ("so", "and so", 0), ("it is so and", "it", 1)]
    batch = encode_labelled_pairs(pairs, tok, 48)
    places = pair_positions(batch.segments, batch.lengths)
    assert places["end of A"].tolist() == [4, 1, 4] and places["start of B"].tolist() == [6, 3, 6]
    assert places["first [SEP]"].tolist() == [5, 2, 5]
    draws = torch.stack([random_text_positions(batch.segments, batch.lengths, avoid=[places["end of A"]],
                                               generator=torch.Generator().manual_seed(s)) for s in range(200)])
    assert set(draws[:, 0].tolist()) == {1, 2, 3, 6, 7, 8} and set(draws[:, 1].tolist()) == {3, 4}
    assert set(draws[:, 2].tolist()) == {1, 2, 3, 6}  # never [CLS], a [SEP], padding or what is avoided
    two_words = encode_labelled_pairs([("so", "it", 0)], tok, 48)  # nothing left once both places are avoided
    two_places = pair_positions(two_words.segments, two_words.lengths)
    with pytest.raises(ValueError, match="outside avoid"):
        random_text_positions(two_words.segments, two_words.lengths, generator=torch.Generator().manual_seed(0),
                              avoid=[two_places["end of A"], two_places["start of B"]])
    torch.manual_seed(0)
    model = BERTForSequenceClassification(_config(data), 2).eval()
    # Hiding a token from [CLS] equals running with that key masked in [CLS]'s row, by hand, pair by pair.
    hidden = torch.tensor([4, 1, 4])
    with torch.no_grad():
        for row in range(3):
            seq = int(batch.lengths[row])
            tokens, segments = batch.tokens[row : row + 1, :seq], batch.segments[row : row + 1, :seq]
            mask = torch.ones(1, seq, seq, dtype=torch.bool)
            mask[0, 0, hidden[row]] = False
            by_hand, untouched = model(tokens, segments, mask=mask), model(tokens, segments)
            assert not torch.allclose(by_hand, untouched)  # the knockout changes what [CLS] computes
            right = float(by_hand.argmax(-1).item() == batch.labels[row].item())
            assert accuracy_hiding_from_cls(model, batch[row : row + 1], hidden[row : row + 1]) == right
    for bad in (torch.tensor([0, 1, 1]), torch.tensor([4, 1, 40]), torch.tensor([4, 1])):
        with pytest.raises(ValueError, match="hidden"):
            accuracy_hiding_from_cls(model, batch, bad)


def test_turn_task_trains_on_the_training_plays_and_tests_on_the_others(data):
    task = turn_task(data, n_train_per_class=20, seed=0)
    train_lines = {line for speech in data.train_speeches for line in speech.lines}
    val_lines = {line for speech in data.val_speeches for line in speech.lines}
    assert len(task.train) == 40 and sum(label for _, _, label in task.train) == 20
    assert all(a in train_lines and b in train_lines for a, b, _ in task.train)
    assert all(a in val_lines and b in val_lines for a, b, _ in task.test)
    assert sum(label for _, _, label in task.test) * 2 == len(task.test)


def test_fine_tuning_learns_a_separable_task_and_probabilities_are_chunked_alike(data):
    tok = data.tokenizer
    word = tok.vocab[7]
    pairs = [(f"{word} and so", "so it is", 1) if i % 2 else ("and so", "so it is", 0) for i in range(64)]
    batch = encode_labelled_pairs(pairs, tok, 48)
    torch.manual_seed(0)
    model = BERTForSequenceClassification(_config(data), 2)
    history = fine_tune(model, batch, train_cfg=dataclasses.replace(TURN_TRAIN_CONFIG, max_steps=60, warmup_steps=4, lr=1e-2),
                        batch_size=16)
    assert len(history.train_loss) >= 4 and not model.training
    assert accuracy(model, batch) == 1.0
    assert torch.allclose(class_probabilities(model, batch, chunk=5), class_probabilities(model, batch), atol=1e-6)
    assert torch.allclose(class_probabilities(model, batch).sum(-1), torch.ones(64))


def test_bag_of_words_is_a_logistic_regression_on_word_counts():
    model = BagOfWords(10, [0, 1, 2, 3, 4])
    with torch.no_grad():
        model.weights.weight.copy_(torch.arange(20.0)[:, None])
        model.bias.fill_(0.5)
    tokens = torch.tensor([[2, 5, 5, 3, 7, 3, 0]])
    segments = torch.tensor([[0, 0, 0, 0, 1, 1, 0]])
    # A holds 5 twice (weight 5 each), B holds 7 (weight 10 + 7); [CLS], [SEP] and [PAD] weigh nothing.
    assert model(tokens, segments).tolist() == [[0.0, 0.5 + 5 + 5 + 17]]


def test_the_bag_of_words_fits_a_separable_task_and_its_strength_is_chosen_on_held_out_pairs():
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(2, (200,), generator=generator)
    tokens = torch.randint(7, 30, (200, 6), generator=generator)
    tokens[:, 0], tokens[:, 3], tokens[:, 5] = 2, 3, 3
    tokens[:, 4] = torch.where(labels == 1, 5, 6)  # B's first word gives the label away
    segments = torch.tensor([[0, 0, 0, 0, 1, 1]]).expand(200, 6)
    batch = ClassificationBatch(tokens, segments, torch.full((200,), 6), labels)
    assert accuracy(train_bag_of_words(batch, 30, [0, 1, 2, 3, 4], weight_decay=1e-3), batch) == 1.0
    model, chosen, scores = choose_bag_of_words(batch, 30, [0, 1, 2, 3, 4], weight_decays=(1e-3, 100.0))
    assert chosen == 1e-3 and scores[1e-3] > scores[100.0] and accuracy(model, batch) == 1.0
    with pytest.raises(ValueError, match="held_out"):
        choose_bag_of_words(batch, 30, [0, 1, 2, 3, 4], held_out=1.0)


def test_fill_mask_ranks_words_at_each_mask(data):
    torch.manual_seed(0)
    model = BERTForPreTraining(_config(data)).eval()
    guesses = fill_mask(model, data.tokenizer, "the [MASK] of", "[MASK] lord", k=3)
    assert len(guesses) == 2 and all(len(g) == 3 for g in guesses)
    probabilities = [p for _, p in guesses[0]]
    assert probabilities == sorted(probabilities, reverse=True) and 0 < sum(probabilities) <= 1
    with pytest.raises(ValueError, match="at least one"):
        fill_mask(model, data.tokenizer, "no blank", "here")


def _saved_hf_bert(folder, words):
    transformers = pytest.importorskip("transformers")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=32)
    torch.manual_seed(0)
    hf = transformers.BertForPreTraining(config)
    hf.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return config


def test_a_saved_hugging_face_bert_loads_into_ours_and_fine_tunes(tmp_path):
    words = ["good", "bad", "film", "a", "very"]
    config = _saved_hf_bert(tmp_path, words)
    assert bert_config_from_hf(config) == BERTConfig(d_vocab=10, n_ctx=32, d_model=16, n_heads=2, n_layers=2, d_ff=32,
                                                     n_segments=2, dropout=0.1, eps=1e-12)
    texts = ["a good film", "a bad film", "very good", "very bad"] * 8
    labels = [1, 0, 1, 0] * 8
    result = fine_tune_hub_bert(str(tmp_path), texts, labels, texts[:8], labels[:8], epochs=3, batch_size=8, lr=3e-3)
    assert result["parity"] < 1e-5 and result["n_train"] == 32 and result["updates"] == 12
    assert 0.0 <= result["accuracy"] <= 1.0
    with pytest.raises(ValueError, match="hidden_act"):
        bert_config_from_hf(type(config)(hidden_act="relu"))
