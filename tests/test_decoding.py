"""Greedy decoding and beam search (chapter 07, §6.1).

Beam search is checked against brute-force enumeration of every possible output of a tiny model whose next-token
log-probabilities are a fixed table indexed by the prefix: vocabulary {0, 1, 2} + EOS (3), plus BOS (4), which the
table never generates (probability 0), and at most 4 generated tokens.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from tutorial_lib.data.dates import DateVocab, Seq2SeqBatch, encode_pairs, make_date_pairs
from tutorial_lib.decoding import Hypothesis, beam_search, greedy_decode, length_penalty, transformer_log_probs_fn
from tutorial_lib.models.transformer import Transformer, TransformerConfig

SYMBOLS, EOS, BOS, D_VOCAB, MAX_LEN = (0, 1, 2), 3, 4, 5, 4
WIDE_BEAM = 3 ** (MAX_LEN - 1) * D_VOCAB  # every extension of the 27 longest prefixes fits: nothing is pruned


class PrefixTable:
    """A model-agnostic step function: ``rule(prefix) -> probabilities`` of the next token, prefix without BOS."""

    def __init__(self, rule) -> None:
        self.rule = rule
        self.calls = 0

    def __call__(self, prefixes: Tensor) -> Tensor:
        self.calls += 1
        assert (prefixes[:, 0] == BOS).all()
        return torch.stack([self.log_probs(tuple(row[1:].tolist())) for row in prefixes])

    def log_probs(self, prefix: tuple[int, ...]) -> Tensor:
        return torch.as_tensor(self.rule(prefix), dtype=torch.float32).log()

    def log_prob(self, output: tuple[int, ...]) -> float:
        return sum(self.log_probs(output[:t])[token].item() for t, token in enumerate(output))


def random_table(seed: int) -> PrefixTable:
    """Fixed random distributions (a softmax of scaled Gaussians, BOS excluded), one per prefix."""
    g = torch.Generator().manual_seed(seed)
    table = {}
    for length in range(MAX_LEN):
        for prefix in itertools.product(SYMBOLS, repeat=length):
            logits = 2.0 * torch.randn(D_VOCAB, generator=g)
            logits[BOS] = float("-inf")
            table[prefix] = torch.softmax(logits, dim=-1)
    return PrefixTable(table.__getitem__)


def every_output() -> list[tuple[int, ...]]:
    """Every output beam search may return: EOS only at the end; ending in EOS, or cut at MAX_LEN tokens."""
    outputs = []
    for length in range(1, MAX_LEN + 1):
        outputs += [(*body, EOS) for body in itertools.product(SYMBOLS, repeat=length - 1)]
    outputs += list(itertools.product(SYMBOLS, repeat=MAX_LEN))
    return outputs


def brute_force(model: PrefixTable, alpha: float, n_best: int) -> list[tuple[tuple[int, ...], float]]:
    scored = [(y, model.log_prob(y) / ((5 + len(y)) / 6) ** alpha) for y in every_output()]
    return sorted(scored, key=lambda pair: pair[1], reverse=True)[:n_best]


def greedy_reference(model: PrefixTable) -> tuple[int, ...]:
    output: tuple[int, ...] = ()
    while len(output) < MAX_LEN and (not output or output[-1] != EOS):
        output += (int(model.log_probs(output).argmax()),)
    return output


# ------------------------------------------------------------------------------------------- beam search


def test_every_output_is_enumerated_once() -> None:
    outputs = every_output()
    assert len(outputs) == len(set(outputs)) == 1 + 3 + 9 + 27 + 81


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_wide_beam_finds_the_exhaustive_optimum(seed: int, alpha: float) -> None:
    model = random_table(seed)
    expected = brute_force(model, alpha, n_best=5)
    found = beam_search(model, bos=BOS, eos=EOS, max_len=MAX_LEN, beam_size=WIDE_BEAM, alpha=alpha, n_best=5)
    assert [tuple(h.tokens) for h in found] == [y for y, _ in expected]
    for hypothesis, (_, score) in zip(found, expected):
        assert hypothesis.score == pytest.approx(score, abs=1e-5)
        assert hypothesis.log_prob == pytest.approx(model.log_prob(tuple(hypothesis.tokens)), abs=1e-5)
        assert hypothesis.score == pytest.approx(hypothesis.log_prob / length_penalty(len(hypothesis.tokens), alpha))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_of_one_is_greedy(seed: int, alpha: float) -> None:
    model = random_table(seed)
    (found,) = beam_search(model, bos=BOS, eos=EOS, max_len=MAX_LEN, beam_size=1, alpha=alpha)
    assert tuple(found.tokens) == greedy_reference(model)


class CountingTable(PrefixTable):
    """A PrefixTable that records how many prefixes each step extends (the beam's width at that step)."""

    def __init__(self, table: PrefixTable) -> None:
        super().__init__(table.rule)
        self.widths: list[int] = []

    def __call__(self, prefixes: Tensor) -> Tensor:
        self.widths.append(len(prefixes))
        return super().__call__(prefixes)


@pytest.mark.parametrize("seed", range(6))
def test_a_refilled_beam_keeps_its_width_and_a_plain_one_shrinks(seed: int) -> None:
    widths = {}
    for refill in (False, True):
        model = CountingTable(random_table(seed))
        beam_search(model, bos=BOS, eos=EOS, max_len=MAX_LEN, beam_size=3, alpha=0.0, n_best=3, refill=refill)
        widths[refill] = model.widths
    assert widths[True][1:] == [3] * len(widths[True][1:])  # after the first step (one prefix): always 3
    assert all(width <= 3 for width in widths[False])


def test_the_plain_beam_shrinks_where_a_hypothesis_ends() -> None:
    narrowed = []
    for seed in range(20):
        model = CountingTable(random_table(seed))
        beam_search(model, bos=BOS, eos=EOS, max_len=MAX_LEN, beam_size=3, alpha=0.0, n_best=3)
        narrowed.append(min(model.widths[1:]) < 3)
    assert any(narrowed)  # on some tables an extension ends before max_len and the next step extends fewer prefixes


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_a_wide_refilled_beam_finds_the_exhaustive_optimum_too(seed: int, alpha: float) -> None:
    model = random_table(seed)
    expected = brute_force(model, alpha, n_best=5)
    found = beam_search(model, bos=BOS, eos=EOS, max_len=MAX_LEN, beam_size=WIDE_BEAM, alpha=alpha, n_best=5,
                        refill=True)
    assert [tuple(h.tokens) for h in found] == [y for y, _ in expected]


def constructed_table(prefix: tuple[int, ...]) -> list[float]:
    """Stop now (0.5) or start 0 (0.45), and after a 0 almost surely 0, 0, then EOS: [0, 0, 0, EOS] has
    P = 0.45 · 0.98³ ≈ 0.42 < 0.5, so it loses without a length penalty and wins with α = 0.6."""
    if prefix == ():
        return [0.45, 0.03, 0.02, 0.5, 0.0]
    if prefix in ((0,), (0, 0)):
        return [0.98, 0.01, 0.005, 0.005, 0.0]
    if prefix == (0, 0, 0):
        return [0.005, 0.005, 0.01, 0.98, 0.0]
    return [0.25, 0.25, 0.25, 0.25, 0.0]


def test_length_penalty_changes_the_winner() -> None:
    model = PrefixTable(constructed_table)
    short, long = (EOS,), (0, 0, 0, EOS)
    assert model.log_prob(short) > model.log_prob(long)
    assert model.log_prob(long) / length_penalty(4, 0.6) > model.log_prob(short) / length_penalty(1, 0.6)
    for alpha, winner in ((0.0, short), (0.6, long)):
        (found,) = beam_search(model, bos=BOS, eos=EOS, max_len=MAX_LEN, beam_size=4, alpha=alpha)
        assert tuple(found.tokens) == winner == brute_force(model, alpha, n_best=1)[0][0]


def test_wider_beam_beats_greedy_when_the_best_start_is_not_the_likeliest() -> None:
    """Greedy takes 0 (0.6), after which every token is 1/4; 1 (0.4) is followed by a sure EOS: P = 0.4 > 0.15."""

    def rule(prefix: tuple[int, ...]) -> list[float]:
        if prefix == ():
            return [0.6, 0.4, 0.0, 0.0, 0.0]
        if prefix == (1,):
            return [0.0, 0.0, 0.0, 1.0, 0.0]
        return [0.25, 0.25, 0.25, 0.25, 0.0]

    model = PrefixTable(rule)
    (greedy,) = beam_search(model, bos=BOS, eos=EOS, max_len=MAX_LEN, beam_size=1, alpha=0.0)
    (beam,) = beam_search(model, bos=BOS, eos=EOS, max_len=MAX_LEN, beam_size=2, alpha=0.0)
    assert greedy.tokens[0] == 0 and beam.tokens == [1, EOS]
    assert beam.log_prob == pytest.approx(math.log(0.4)) and beam.log_prob > greedy.log_prob


def test_search_stops_once_nothing_in_the_beam_can_win() -> None:
    """A model that says EOS with probability 0.99: after one step no prefix can catch up, even at max_len 50."""
    model = PrefixTable(lambda prefix: [0.004, 0.003, 0.003, 0.99, 0.0])
    (found,) = beam_search(model, bos=BOS, eos=EOS, max_len=50, beam_size=4, alpha=0.6)
    assert found.tokens == [EOS]
    assert model.calls == 1


def test_beam_search_returns_hypotheses_best_first() -> None:
    found = beam_search(random_table(0), bos=BOS, eos=EOS, max_len=MAX_LEN, beam_size=4, alpha=0.6, n_best=4)
    assert len(found) == 4 and all(isinstance(h, Hypothesis) for h in found)
    assert [h.score for h in found] == sorted((h.score for h in found), reverse=True)


# ------------------------------------------------------------------------------------- with a Transformer


@pytest.fixture(scope="module")
def date_model() -> tuple[Transformer, Seq2SeqBatch]:
    """A small Transformer trained for 60 steps on date normalisation (~2 s), and 8 held-out sources.

    Half-trained on purpose: its outputs vary from row to row, mostly end in EOS, and are not all right, which
    is what the decoders must handle. (An untrained model only repeats one token.)
    """
    vocab = DateVocab()
    pairs = make_date_pairs(60 * 32 + 8, seed=0)
    torch.manual_seed(0)
    cfg = TransformerConfig(d_vocab=vocab.d_vocab, n_ctx=32, d_model=64, n_heads=4, n_layers=2, d_ff=128, dropout=0.1)
    model = Transformer(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    for step in range(60):
        batch = encode_pairs(pairs[32 * step : 32 * (step + 1)], vocab)
        logits = model(batch.src, batch.tgt_in, src_lengths=batch.src_lengths)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=vocab.pad_id)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model, encode_pairs(pairs[-8:], vocab)


BOS_ID, EOS_ID, PAD_ID = DateVocab.bos_id, DateVocab.eos_id, DateVocab.pad_id


def greedy_one_by_one(model: Transformer, src: Tensor, max_len: int) -> list[int]:
    """Greedy decoding by its definition: one unpadded source, the whole prefix re-read at every step."""
    model.eval()
    prefix = [BOS_ID]
    with torch.no_grad():
        while len(prefix) <= max_len and prefix[-1] != EOS_ID:
            prefix.append(model(src[None], torch.tensor([prefix]))[0, -1].argmax().item())
    return prefix[1:]


def test_greedy_decode_matches_its_definition(date_model) -> None:
    """Batched, padded sources with the KV cache give what one-by-one, unpadded, uncached decoding gives; finished
    rows are filled with ``pad``; decoding stops once every row has its EOS."""
    model, batch = date_model
    model.train()
    decoded = greedy_decode(model, batch.src, src_lengths=batch.src_lengths, bos=BOS_ID, eos=EOS_ID, max_len=16, pad=PAD_ID)
    assert model.training  # put back in the mode it was in
    expected = [greedy_one_by_one(model, src[:length], max_len=16) for src, length in zip(batch.src, batch.src_lengths)]
    assert all(row[-1] == EOS_ID for row in expected)  # the premise of the early stop below
    assert decoded.shape == (8, max(len(row) for row in expected)) and decoded.shape[1] < 16
    for row, tokens in zip(decoded.tolist(), expected):
        assert row == tokens + [PAD_ID] * (len(row) - len(tokens))


def test_greedy_with_cache_equals_without(date_model) -> None:
    model, batch = date_model
    arguments = {"src_lengths": batch.src_lengths, "bos": BOS_ID, "eos": EOS_ID, "max_len": 16}
    assert torch.equal(greedy_decode(model, batch.src, **arguments), greedy_decode(model, batch.src, use_cache=False, **arguments))


def test_beam_of_one_is_greedy_decode_on_a_transformer(date_model) -> None:
    model, batch = date_model
    greedy = greedy_decode(model, batch.src, src_lengths=batch.src_lengths, bos=BOS_ID, eos=EOS_ID, max_len=16)
    for src, length, row in zip(batch.src, batch.src_lengths, greedy.tolist()):
        (found,) = beam_search(transformer_log_probs_fn(model, src[:length]), bos=BOS_ID, eos=EOS_ID, max_len=16, beam_size=1)
        assert found.tokens == row[: row.index(EOS_ID) + 1]


def test_transformer_beam_search_scores_are_its_log_probabilities(date_model) -> None:
    """Each hypothesis' log-probability is what teacher forcing gives the same tokens."""
    model, batch = date_model
    src = batch.src[0, : batch.src_lengths[0]]
    found = beam_search(transformer_log_probs_fn(model, src), bos=BOS_ID, eos=EOS_ID, max_len=16, beam_size=4, n_best=3)
    assert len({tuple(h.tokens) for h in found}) == 3
    model.eval()
    for hypothesis in found:
        tokens = torch.tensor([[BOS_ID, *hypothesis.tokens]])
        log_probs = torch.log_softmax(model(src[None], tokens[:, :-1]), dim=-1)[0]
        expected = log_probs.gather(-1, tokens[0, 1:, None]).sum().item()
        assert hypothesis.log_prob == pytest.approx(expected, abs=1e-4)  # float32 sums of ~11 terms, two ways
        assert hypothesis.score == pytest.approx(expected / length_penalty(len(hypothesis.tokens), 0.6), abs=1e-4)


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"beam_size": 0}, "beam_size must be a positive int, got 0"),
        ({"max_len": 0}, "max_len must be a positive int, got 0"),
        ({"n_best": 5, "beam_size": 4}, "n_best=5 must be <= beam_size=4"),
        ({"alpha": -0.5}, "alpha must be a finite number >= 0"),
        ({"alpha": float("nan")}, "alpha must be a finite number >= 0"),
        ({"bos": -1}, "bos must be a non-negative int"),
        ({"eos": 7}, r"eos must be a token id in \[0, d_vocab=5\), got 7"),
    ],
)
def test_beam_search_rejects_bad_arguments(changes: dict, message: str) -> None:
    arguments = {"bos": BOS, "eos": EOS, "max_len": MAX_LEN, "beam_size": 4, "alpha": 0.6, **changes}
    with pytest.raises(ValueError, match=message):
        beam_search(random_table(0), **arguments)


def test_beam_search_rejects_a_bad_step_function() -> None:
    with pytest.raises(ValueError, match=r"log_probs_fn must return shape \(n_prefixes=1, d_vocab\)"):
        beam_search(lambda prefixes: torch.zeros(2, 5), bos=BOS, eos=EOS, max_len=3)
    with pytest.raises(ValueError, match="log_probs_fn must return log-probabilities"):
        beam_search(lambda prefixes: torch.randn(len(prefixes), 5), bos=BOS, eos=EOS, max_len=3)


def test_greedy_decode_rejects_bad_arguments() -> None:
    model = Transformer(TransformerConfig(d_vocab=11, n_ctx=16, d_model=16, n_heads=4, n_layers=1, d_ff=32))
    src = torch.randint(3, 11, (3, 7), generator=torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match=r"eos must be a token id in \[0, tgt_vocab=11\), got 11"):
        greedy_decode(model, src, bos=1, eos=11, max_len=5)
    with pytest.raises(ValueError, match=r"pad must be a token id in \[0, tgt_vocab=11\), got -1"):
        greedy_decode(model, src, bos=1, eos=2, max_len=5, pad=-1)
    with pytest.raises(ValueError, match=r"max_len must be an int in \[1, n_ctx=16\], got 17"):
        greedy_decode(model, src, bos=1, eos=2, max_len=17)
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, seq_len=7\]"):
        greedy_decode(model, src, src_lengths=torch.tensor([8, 1, 1]), bos=1, eos=2, max_len=5)
