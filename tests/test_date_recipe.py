"""Chapter 07's recipe: the date splits, the training helper, the cache and ``normalise_dates``'s refusals."""

from __future__ import annotations

import dataclasses
import datetime

import pytest
import torch

from tutorial_lib.recipes import (
    DATE_AVERAGE_INTERVAL,
    DATE_TRAIN_CONFIG,
    DATE_TRANSFORMER_CONFIG,
    CheckpointAverage,
    DecoderBlockWithoutCausalMask,
    date_splits,
    exact_match,
    load_or_train_date_transformer,
    normalise_dates,
    seq2seq_loss,
    train_date_transformer,
)
from tutorial_lib.data.dates import DATE_FORMATS, encode_pairs, field_spans, make_date_pairs, make_labelled_date_pairs
from tutorial_lib.models.transformer import Transformer
from tutorial_lib.recipes import DATE_VOCAB, date_transformer
from tutorial_lib.recipes.date_transformer import NoamWithoutWarmup, load_or_train_date_snapshots

TINY = DATE_TRANSFORMER_CONFIG.replace(d_model=16, n_heads=2, n_layers=1, d_ff=32)
SHORT = dataclasses.replace(DATE_TRAIN_CONFIG, max_steps=4, warmup_steps=2, eval_interval=2, log_interval=1)


def test_the_splits_cover_every_date_once():
    splits = date_splits()
    dates = [t for part in splits for _, t in part]
    assert len(dates) == len(set(dates)) == 36_525 and len(splits.test) == 1_000


def test_training_is_seeded_and_the_cache_gives_back_the_same_model(tmp_path):
    first, history = train_date_transformer(model_cfg=TINY, train_cfg=SHORT, batch_size=8, average_last=1, progress=False)
    again, _ = train_date_transformer(model_cfg=TINY, train_cfg=SHORT, batch_size=8, average_last=1, progress=False)
    assert history.eval_steps == [2, 4] and len(history.val_loss) == 2
    for a, b in zip(first.state_dict().values(), again.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    trained, record = load_or_train_date_transformer(model_cfg=TINY, train_cfg=SHORT, batch_size=8, average_last=1,
                                                     checkpoint_dir=tmp_path, progress=False)
    loaded, record_again = load_or_train_date_transformer(model_cfg=TINY, train_cfg=SHORT, batch_size=8, average_last=1,
                                                          checkpoint_dir=tmp_path)
    assert len(list(tmp_path.glob("*.pt"))) == 1 and record == record_again  # one file (and its lock)
    assert set(record) == {"history", "seconds", "val_loss", "val_exact_match", "last_val_exact_match"}
    assert record["val_loss"] > 0 and record["val_exact_match"] == record["last_val_exact_match"]  # nothing averaged
    for a, b in zip(trained.state_dict().values(), loaded.state_dict().values()):
        assert torch.equal(a, b)
    for a, b in zip(trained.state_dict().values(), first.state_dict().values()):  # the cached run is the same run
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_without_the_causal_mask_the_decoder_reads_later_targets_and_the_cache_key_differs(tmp_path):
    model, _ = load_or_train_date_transformer(model_cfg=TINY, train_cfg=SHORT, batch_size=8, causal_decoder=False,
                                              average_last=1, checkpoint_dir=tmp_path, progress=False)
    assert all(isinstance(layer, DecoderBlockWithoutCausalMask) for layer in model.decoder.layers)
    batch = encode_pairs([("3 March 1997", "1997-03-03")], DATE_VOCAB)
    changed = batch.tgt_in.clone()
    changed[0, -1] = DATE_VOCAB.encode("9")[0]
    with torch.no_grad():
        before = model(batch.src, batch.tgt_in, src_lengths=batch.src_lengths)
        after = model(batch.src, changed, src_lengths=batch.src_lengths)
    assert not torch.allclose(before[0, 0], after[0, 0])  # position 0 saw the last target token
    load_or_train_date_transformer(model_cfg=TINY, train_cfg=SHORT, batch_size=8, average_last=1, checkpoint_dir=tmp_path,
                                   progress=False)
    assert len(list(tmp_path.glob("*.pt"))) == 2


def test_the_loss_ignores_padding_and_smoothing_raises_it():
    torch.manual_seed(0)
    model = Transformer(TINY).eval()
    batch = encode_pairs([("3 March 1997", "1997-03-03"), ("Mar 3, 1997", "1997-03-03")], DATE_VOCAB)
    assert seq2seq_loss(model, batch, smoothing=0.1) != seq2seq_loss(model, batch, smoothing=0.0)
    assert (batch.tgt_out == DATE_VOCAB.pad_id).sum() == 0  # same-length targets: no padding in this batch


def test_normalise_dates_decodes_greedy_and_beam_alike_in_shape():
    torch.manual_seed(0)
    model = Transformer(TINY).eval()
    texts = ["3 March 1997", "1/1/2000"]
    assert len(normalise_dates(model, texts)) == 2 and len(normalise_dates(model, texts, beam_width=2)) == 2
    assert 0.0 <= exact_match(model, [("3 March 1997", "1997-03-03")]) <= 1.0


@pytest.mark.parametrize(("texts", "message"), [
    ("3 March 1997", "texts must be a non-empty list of strings"),
    ([], "texts must be a non-empty list of strings"),
    (["3 March 1997", ""], r"texts\[1\] must be a non-empty string"),
    (["March 3rd, 1997!"], r"texts\[0\] = 'March 3rd, 1997!' holds characters outside the date vocabulary: \['!'\]"),
    (["x" * 40], r"has 40 characters; the model reads at most n_ctx=32"),
])
def test_normalise_dates_names_the_offending_input(texts, message):
    model = Transformer(TINY)
    with pytest.raises(ValueError, match=message):
        normalise_dates(model, texts)


def test_normalise_dates_refuses_a_bad_beam_width_or_batch_size():
    with pytest.raises(ValueError, match="beam_width must be a positive int"):
        normalise_dates(Transformer(TINY), ["3 March 1997"], beam_width=0)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        normalise_dates(Transformer(TINY), ["3 March 1997"], batch_size=0)


def test_normalise_dates_gives_the_same_outputs_in_any_batch_size():
    torch.manual_seed(0)
    model = Transformer(TINY).eval()
    with torch.no_grad():  # decisive logits, so that rounding differences between batch shapes cannot flip a token
        model.unembed.weight.mul_(8.0)
    texts = [source for source, _ in date_splits().test[:7]]
    for beam_width in (1, 3):
        assert normalise_dates(model, texts, beam_width=beam_width, batch_size=3) == normalise_dates(
            model, texts, beam_width=beam_width)


def test_labelled_pairs_are_the_pairs_with_their_formats():
    labelled = make_labelled_date_pairs(3_000, seed=0)
    assert [(source, iso) for source, iso, _ in labelled] == make_date_pairs(3_000, seed=0)
    assert {name for *_, name in labelled} == set(DATE_FORMATS)
    assert all(DATE_FORMATS[name](datetime.date.fromisoformat(iso)) == source for source, iso, name in labelled)


@pytest.mark.parametrize(("source", "iso", "spans"), [
    ("3rd of March 1997", "1997-03-03", {"month": (7, 12), "year": (13, 17)}),
    ("Mon 3 Mar 1997", "1997-03-03", {"month": (6, 9), "year": (10, 14)}),
    ("3 MAR 1997", "1997-03-03", {"month": (2, 5), "year": (6, 10)}),
    ("03/03/03", "2003-03-03", {"year": (6, 8)}),  # the last "03" is the year
    ("3-Mar-97", "1997-03-03", {"month": (2, 5), "year": (6, 8)}),
    ("2020-2-20", "2020-02-20", {"year": (0, 4)}),
])
def test_field_spans_find_the_month_name_and_the_year(source, iso, spans):
    assert field_spans(source, iso) == spans


def test_field_spans_refuse_a_source_without_the_year():
    with pytest.raises(ValueError, match="does not write the year of 1997-03-03"):
        field_spans("3 March", "1997-03-03")


def test_checkpoint_average_keeps_the_last_n_checkpoints_of_every_interval():
    layer = torch.nn.Linear(1, 1, bias=False)
    average = CheckpointAverage(layer, n=3, interval=50)
    for step in range(300):  # the update of 0-based index `step` leaves the weight at step + 1
        layer.weight.data.fill_(step + 1)
        average("step", {"step": step, "loss": 0.0, "lr": 0.0})
        average("eval", {"step": step + 1})  # other events are ignored
    assert average.steps == [200, 250, 300]
    assert average.average()["weight"].item() == pytest.approx(250.0)
    with pytest.raises(ValueError, match="no checkpoint yet"):
        CheckpointAverage(layer, n=2, interval=50).average()
    with pytest.raises(ValueError, match="interval must be a positive int"):
        CheckpointAverage(layer, n=2, interval=0)


def test_the_recipe_returns_the_average_of_its_last_checkpoints():
    seen = {}

    def record_weights(event, info):
        if event == "step" and (info["step"] + 1) % DATE_AVERAGE_INTERVAL == 0:
            seen[info["step"] + 1] = {k: v.clone() for k, v in model_ref["model"].state_dict().items()}

    torch.manual_seed(0)
    model_ref = {"model": Transformer(TINY)}
    steps = 2 * DATE_AVERAGE_INTERVAL
    cfg = dataclasses.replace(SHORT, max_steps=steps, eval_interval=steps)
    averaged, _ = train_date_transformer(model_cfg=TINY, train_cfg=cfg, batch_size=8, average_last=2,
                                         model=model_ref["model"], callbacks=[record_weights], progress=False)
    assert sorted(seen) == [DATE_AVERAGE_INTERVAL, steps]
    for name, value in averaged.state_dict().items():
        torch.testing.assert_close(value, (seen[DATE_AVERAGE_INTERVAL][name] + seen[steps][name]) / 2)


@pytest.mark.parametrize(("changes", "message"), [
    ({"max_steps": 120}, "needs max_steps a multiple of 50 and >= 250"),
    ({"max_steps": 200}, "needs max_steps a multiple of 50 and >= 250"),
    ({"max_steps": 250, "log_interval": 10}, "log_interval=1"),
])
def test_averaging_refuses_a_run_it_cannot_average(changes, message):
    with pytest.raises(ValueError, match=message):
        train_date_transformer(model_cfg=TINY, train_cfg=dataclasses.replace(SHORT, **changes), progress=False)


def test_noam_without_warmup_starts_at_the_recipes_peak_and_then_follows_it():
    recipe = dataclasses.replace(DATE_TRAIN_CONFIG, max_steps=300)
    no_warmup = NoamWithoutWarmup(**dataclasses.asdict(recipe))
    peak = max(recipe.lr_at(step, 64) for step in range(300))
    assert peak == recipe.lr_at(recipe.warmup_steps - 1, 64)  # Eq. (3) peaks at update warmup_steps
    for step in range(recipe.warmup_steps - 1):
        assert no_warmup.lr_at(step, 64) == peak > recipe.lr_at(step, 64)
    for step in range(recipe.warmup_steps - 1, 300):
        assert no_warmup.lr_at(step, 64) == recipe.lr_at(step, 64)
    assert repr(no_warmup) != repr(recipe)  # a cache key of its own
    with pytest.raises(ValueError, match="schedule must be 'noam'"):
        NoamWithoutWarmup(max_steps=10, schedule="constant")


def test_a_snapshot_of_a_longer_run_is_the_shorter_run(tmp_path, monkeypatch):
    monkeypatch.setattr(date_transformer, "DATE_SNAPSHOT_STEPS", (2, 4))
    longer = dataclasses.replace(SHORT, max_steps=6, eval_interval=3)
    snapshots = load_or_train_date_snapshots(model_cfg=TINY, train_cfg=longer, batch_size=8, average_last=1,
                                             checkpoint_dir=tmp_path, progress=False)
    assert sorted(snapshots) == [2, 4] and not any(m.training for m in snapshots.values())
    shorter, record = load_or_train_date_transformer(model_cfg=TINY, train_cfg=SHORT, batch_size=8, average_last=1,
                                                     checkpoint_dir=tmp_path, progress=False)
    for a, b in zip(snapshots[4].state_dict().values(), shorter.state_dict().values()):
        assert torch.equal(a, b)  # Eq. (3) does not depend on max_steps: the first 4 updates are the same
    assert load_or_train_date_snapshots(model_cfg=TINY, train_cfg=SHORT, batch_size=8, average_last=1,
                                        checkpoint_dir=tmp_path, progress=False).keys() == {2, 4}
    assert len(list(tmp_path.glob("*.pt"))) == 2
    # With average_last=1 the record's validation numbers are those of the run's last evaluation and weights.
    assert record["val_loss"] == record["history"]["val_loss"][-1]
    assert record["val_exact_match"] == record["last_val_exact_match"]


def test_the_causal_shortcut_gives_the_greedy_exact_match():
    torch.manual_seed(0)
    model = Transformer(TINY).eval()
    with torch.no_grad():  # decisive logits, so that rounding cannot flip a token between the two computations
        model.unembed.weight.mul_(8.0)
    sources = [source for source, _ in date_splits().test[:40]]
    written = normalise_dates(model, sources)
    # Targets the model writes itself (where they are a string of the date vocabulary), and others it does not.
    pairs = [(s, w) for s, w in zip(sources, written) if w and len(w) <= 10] + date_splits().test[:20]
    assert 0 < exact_match(model, pairs) < 1
    assert date_transformer._causal_exact_match(model, pairs) == exact_match(model, pairs)
