"""tutorial_lib.data.dialogue (chapter 14): speeches, the word tokenizer, NSP pairs, the turn task, encoding pairs."""

from __future__ import annotations

import collections

import pytest
import torch

from tutorial_lib.data.dialogue import (
    SPECIAL_TOKENS,
    Speech,
    WordTokenizer,
    balanced_sample,
    collate_pairs,
    dialogue_lines,
    encode_pair,
    nsp_pairs,
    parse_speeches,
    script_lines,
    split_speeches,
    turn_pairs,
)
from tutorial_lib.data.shakespeare import load_tiny_shakespeare

TEXT = """First Citizen:
Before we proceed any further, hear me speak.

All:
Speak, speak.

TITUS:

Senators, &C:
We'll surety him.
Away!

no heading here
so this block is skipped
"""


def test_parse_speeches_reads_headings_and_skips_empty_or_headless_blocks():
    speeches = parse_speeches(TEXT)
    assert speeches == [
        Speech("First Citizen", ("Before we proceed any further, hear me speak.",)),
        Speech("All", ("Speak, speak.",)),
        Speech("Senators, &C", ("We'll surety him.", "Away!")),
    ]
    assert dialogue_lines(speeches) == ["Before we proceed any further, hear me speak.", "Speak, speak.",
                                        "We'll surety him.", "Away!"]
    assert script_lines(speeches)[:3] == ["First Citizen:", "Before we proceed any further, hear me speak.", "All:"]
    for bad in ("", "   \n", "no speech at all"):
        with pytest.raises(ValueError, match="text"):
            parse_speeches(bad)


def test_the_corpus_splits_by_speeches_into_later_plays():
    speeches = parse_speeches(load_tiny_shakespeare())
    train, val = split_speeches(speeches)
    assert len(train) == int(0.9 * len(speeches)) and train + val == speeches
    assert train[0].speaker == "First Citizen" and val[-1] == Speech(  # the corpus's last speech
        "ANTONIO", ("Noble Sebastian,", "Thou let'st thy fortune sleep--die, rather; wink'st", "Whiles thou art waking."))
    with pytest.raises(ValueError, match="train_fraction"):
        split_speeches(speeches, 1.0)
    with pytest.raises(ValueError, match="enough for both splits"):
        split_speeches(speeches[:1])


def test_word_tokenizer_round_trip_unknown_words_and_specials():
    tok = WordTokenizer.from_texts(["The king, the king!", "A queen."], min_count=1)
    assert tok.vocab[: len(SPECIAL_TOKENS)] == list(SPECIAL_TOKENS)
    assert tok.vocab[5:8] == ["king", "the", "!"]  # by count (2, 2, then 1s), ties alphabetical
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert tok.special_ids == (0, 1, 2, 3, 4)
    ids = tok.encode("The KING's queen?")
    assert tok.decode(ids) == "the [UNK] queen [UNK]"  # "king's" is one unseen word, "?" unseen
    assert tok.decode([tok.cls_id, 6, 5, tok.pad_id]) == "[CLS] the king"  # padding left out
    assert tok.decode(torch.tensor([5, 7])) == "king!"
    assert WordTokenizer.split("O'er the hills, o' the moor") == ["o'er", "the", "hills", ",", "o", "'", "the", "moor"]
    rare = WordTokenizer.from_texts(["a a b"], min_count=2)
    assert rare.vocab[5:] == ["a"]


@pytest.mark.parametrize(("words", "message"), [([], "non-empty"), (["Upper"], "lower-case"), (["two words"], "lower-case"),
                                                (["a", "a"], "duplicates")])
def test_word_tokenizer_refuses_a_bad_vocabulary(words, message):
    with pytest.raises(ValueError, match=message):
        WordTokenizer(words)


def test_word_tokenizer_refuses_bad_arguments():
    tok = WordTokenizer(["a"])
    with pytest.raises(ValueError, match=r"d_vocab=6"):
        tok.decode([6])
    with pytest.raises(ValueError, match="min_count"):
        WordTokenizer.from_texts(["a"], min_count=0)
    with pytest.raises(ValueError, match="min_count=5"):
        WordTokenizer.from_texts(["a"], min_count=5)


LINES = [f"line {i}" for i in range(40)]


def test_nsp_pairs_follow_the_rule():
    pairs = nsp_pairs(LINES, torch.Generator().manual_seed(0))
    assert len(pairs) == len(LINES) - 1
    assert [a for a, _, _ in pairs] == LINES[:-1]  # A is every line that has a next one, in order
    for i, (a, b, label) in enumerate(pairs):
        if label == 0:
            assert b == LINES[i + 1]
        else:
            assert b not in (LINES[i], LINES[i + 1])  # never A itself, never its true next line
    assert 10 < sum(label for _, _, label in pairs) < 29


def test_nsp_pairs_draw_the_coins_then_the_indices_from_the_generator():
    n = len(LINES)
    generator = torch.Generator().manual_seed(3)
    coins = torch.rand(n - 1, generator=generator)
    others = torch.randint(n - 2, (n - 1,), generator=generator)
    pairs = nsp_pairs(LINES, torch.Generator().manual_seed(3))
    for i, (_, b, label) in enumerate(pairs):
        j = int(others[i])
        assert label == int(coins[i] >= 0.5)
        assert b == (LINES[j + 2 if j >= i else j] if label else LINES[i + 1])
    assert pairs != nsp_pairs(LINES, torch.Generator().manual_seed(4))


def test_nsp_random_lines_are_uniform_over_the_others():
    """Over many draws, the random B of line i is each of the n - 2 other lines equally often."""
    lines, hits = list(range(6)), collections.Counter()
    generator = torch.Generator().manual_seed(0)
    for _ in range(3000):
        for a, b, label in nsp_pairs(lines, generator):
            if label and a == 2:
                hits[b] += 1
    assert set(hits) == {0, 1, 4, 5}
    assert max(hits.values()) / min(hits.values()) < 1.2


def test_nsp_pairs_refuse_bad_input():
    with pytest.raises(ValueError, match="at least 3 lines"):
        nsp_pairs(["a", "b"], torch.Generator())
    with pytest.raises(ValueError, match="sequence"):
        nsp_pairs("abcdef", torch.Generator())


def test_turn_pairs_label_the_first_line_of_each_speech():
    speeches = [Speech("A", ("a1", "a2")), Speech("B", ("b1",)), Speech("A", ("a3", "a4", "a5"))]
    assert turn_pairs(speeches) == [("a1", "a2", 0), ("a2", "b1", 1), ("b1", "a3", 1), ("a3", "a4", 0), ("a4", "a5", 0)]


def test_balanced_sample_draws_each_label_without_replacement():
    pairs = [(i, i, int(i % 3 == 0)) for i in range(30)]  # 10 of label 1, 20 of label 0
    sample = balanced_sample(pairs, 4, torch.Generator().manual_seed(0))
    assert sorted(label for _, _, label in sample) == [0] * 4 + [1] * 4 and len(set(sample)) == 8
    everything = balanced_sample(pairs, None, torch.Generator().manual_seed(0))
    assert len(everything) == 20 and sum(label for _, _, label in everything) == 10
    assert sample != balanced_sample(pairs, 4, torch.Generator().manual_seed(1))
    for n in (0, 11):
        with pytest.raises(ValueError, match=r"n_per_class must be an int in \[1, 10\]"):
            balanced_sample(pairs, n, torch.Generator())


def test_encode_pair_segments_and_truncation():
    tokens, segments = encode_pair([10, 11, 12], [20, 21], cls_id=2, sep_id=3, n_ctx=16)
    assert tokens == [2, 10, 11, 12, 3, 20, 21, 3] and segments == [0, 0, 0, 0, 0, 1, 1, 1]
    # Too long: the longer segment loses a token (A on a tie), A from its start and B from its end, until it fits.
    tokens, segments = encode_pair(list(range(10, 20)), [20, 21, 22, 23], cls_id=2, sep_id=3, n_ctx=10)
    assert tokens == [2, 17, 18, 19, 3, 20, 21, 22, 23, 3] and segments == [0] * 5 + [1] * 5
    tokens, _ = encode_pair([10, 11], list(range(20, 30)), cls_id=2, sep_id=3, n_ctx=8)
    assert tokens == [2, 10, 11, 3, 20, 21, 22, 3]
    with pytest.raises(ValueError, match="n_ctx must be an int >= 5"):
        encode_pair([1], [1], cls_id=2, sep_id=3, n_ctx=4)


def test_collate_pairs_pads_on_the_right():
    batch = collate_pairs([([10], [20]), ([10, 11, 12], [20, 21])], cls_id=2, sep_id=3, pad_id=0, n_ctx=16)
    assert batch.tokens.tolist() == [[2, 10, 3, 20, 3, 0, 0, 0], [2, 10, 11, 12, 3, 20, 21, 3]]
    assert batch.segments.tolist() == [[0, 0, 0, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 1, 1, 1]]
    assert batch.lengths.tolist() == [5, 8]
    with pytest.raises(ValueError, match="at least one pair"):
        collate_pairs([], cls_id=2, sep_id=3, pad_id=0, n_ctx=16)
