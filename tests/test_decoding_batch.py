"""The batched beam search (the fast path of ``normalise_dates``) is :func:`beam_search`, source by source."""

from __future__ import annotations

import pytest
import torch

from test_decoding import BOS, EOS, MAX_LEN, WIDE_BEAM, PrefixTable, brute_force, random_table
from tutorial_lib.data.dates import DateVocab, encode_pairs, make_date_pairs
from tutorial_lib.decoding import (
    beam_search,
    beam_search_batch,
    transformer_batch_log_probs_fn,
    transformer_log_probs_fn,
)
from tutorial_lib.models.transformer import Transformer, TransformerConfig


def tables_side_by_side(seeds):
    """One random prefix table per source: the batched step function asks each prefix's own table."""
    tables = [random_table(seed) for seed in seeds]

    def step(prefixes, owners):
        return torch.cat([tables[owner](prefix[None]) for prefix, owner in zip(prefixes, owners.tolist())])

    return tables, step


@pytest.mark.parametrize("beam_size", [1, 2, 4, WIDE_BEAM])
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_each_source_gets_what_beam_search_gives_it(beam_size: int, alpha: float) -> None:
    tables, step = tables_side_by_side(range(5))
    n_best = min(beam_size, 3)
    batched = beam_search_batch(step, len(tables), bos=BOS, eos=EOS, max_len=MAX_LEN, beam_size=beam_size,
                                alpha=alpha, n_best=n_best)
    for table, found in zip(tables, batched):
        alone = beam_search(table, bos=BOS, eos=EOS, max_len=MAX_LEN, beam_size=beam_size, alpha=alpha, n_best=n_best)
        assert [h.tokens for h in found] == [h.tokens for h in alone]
        assert [h.score for h in found] == pytest.approx([h.score for h in alone], abs=1e-6)


def test_a_wide_batched_beam_finds_each_sources_exhaustive_optimum() -> None:
    tables, step = tables_side_by_side(range(3))
    batched = beam_search_batch(step, 3, bos=BOS, eos=EOS, max_len=MAX_LEN, beam_size=WIDE_BEAM, alpha=0.6, n_best=2)
    for table, found in zip(tables, batched):
        assert [tuple(h.tokens) for h in found] == [y for y, _ in brute_force(table, 0.6, n_best=2)]


def test_sources_that_stop_early_leave_the_others_searching() -> None:
    """Source 0 is sure to say EOS at once; source 1 is a random table that needs every step."""
    tables = [PrefixTable(lambda prefix: [0.004, 0.003, 0.003, 0.99, 0.0]), random_table(1)]

    def step(prefixes, owners):
        return torch.cat([tables[owner](prefix[None]) for prefix, owner in zip(prefixes, owners.tolist())])

    first, second = beam_search_batch(step, 2, bos=BOS, eos=EOS, max_len=MAX_LEN, beam_size=4, alpha=0.6)
    assert first[0].tokens == [EOS]
    assert second[0].tokens == beam_search(random_table(1), bos=BOS, eos=EOS, max_len=MAX_LEN, beam_size=4)[0].tokens


def test_on_a_transformer_the_batch_equals_one_source_at_a_time() -> None:
    vocab = DateVocab()
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(d_vocab=vocab.d_vocab, n_ctx=32, d_model=32, n_heads=4, n_layers=2, d_ff=64,
                                          dropout=0.0)).eval()
    with torch.no_grad():  # sharper than at initialisation, so that the beams differ from source to source
        model.unembed.weight.mul_(4.0)
    batch = encode_pairs(make_date_pairs(6, seed=3), vocab)
    step = transformer_batch_log_probs_fn(model, batch.src, batch.src_lengths)
    batched = beam_search_batch(step, 6, bos=vocab.bos_id, eos=vocab.eos_id, max_len=11, beam_size=4, alpha=0.6, n_best=2)
    for row, found in enumerate(batched):
        src = batch.src[row, : batch.src_lengths[row]]
        alone = beam_search(transformer_log_probs_fn(model, src), bos=vocab.bos_id, eos=vocab.eos_id, max_len=11,
                            beam_size=4, alpha=0.6, n_best=2)
        assert [h.tokens for h in found] == [h.tokens for h in alone]
        assert [h.log_prob for h in found] == pytest.approx([h.log_prob for h in alone], abs=1e-4)


@pytest.mark.parametrize(("changes", "message"), [
    ({"n_sources": 0}, "n_sources must be a positive int"),
    ({"beam_size": 0}, "beam_size must be a positive int"),
    ({"n_best": 5}, "n_best=5 must be <= beam_size=4"),
    ({"alpha": -1.0}, "alpha must be a finite number >= 0"),
])
def test_beam_search_batch_rejects_bad_arguments(changes: dict, message: str) -> None:
    _, step = tables_side_by_side([0])
    kwargs = {"n_sources": 1, "bos": BOS, "eos": EOS, "max_len": MAX_LEN, "beam_size": 4, **changes}
    with pytest.raises(ValueError, match=message):
        beam_search_batch(step, **kwargs)


def test_the_transformer_step_function_rejects_bad_shapes(without_annotation_checks) -> None:
    model = Transformer(TransformerConfig(d_vocab=10, n_ctx=8, d_model=16, n_heads=2, n_layers=1, d_ff=32))
    with without_annotation_checks(), pytest.raises(ValueError, match="src must have shape"):
        transformer_batch_log_probs_fn(model, torch.zeros(5, dtype=torch.long))
    with without_annotation_checks(), pytest.raises(ValueError, match="src_lengths must have shape"):
        transformer_batch_log_probs_fn(model, torch.zeros(2, 5, dtype=torch.long), torch.tensor([5]))
