"""Chapter 01: the character tokenizer and byte-pair encoding, against analytical values and Hugging Face's
`tokenizers` (its Rust BPE trainer and encoder)."""

from __future__ import annotations

import itertools
import json
import os
import random
from collections import Counter
from pathlib import Path

import pytest
import torch

from tutorial_lib.data import load_tiny_shakespeare
from tutorial_lib.tokenizers import (
    BPETokenizer,
    CharTokenizer,
    MergeStep,
    merge_pair,
    pretokenize,
    train_bpe,
)

SHARED_DATA = Path(os.environ.get("TUTORIAL_LIB_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")

# Hugging Face's NLP course, chapter 6.5: the word counts of the BPE example.
HUG_WORDS = {"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}

PARAGRAPH = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
    "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n\n"
    "Naïve café owners don't say 'we'll' 42 times; they'd rather   sing \u00bd a song_of 2024 bytes.\t\n"
)


def random_unicode(rng: random.Random, length: int) -> str:
    """Characters from ASCII, accented Latin, Greek, CJK, combining marks, emoji and odd whitespace."""
    ranges = [(0x20, 0x7E), (0x00A0, 0x017F), (0x0370, 0x03FF), (0x4E00, 0x4FFF), (0x0300, 0x036F),
              (0x1F300, 0x1F64F), (0x2000, 0x200B)]
    chars = []
    for _ in range(length):
        low, high = rng.choice(ranges)
        chars.append(chr(rng.randint(low, high)) if rng.random() > 0.1 else rng.choice(" \n\t'"))
    return "".join(chars)


@pytest.fixture(scope="module")
def shakespeare() -> str:
    return load_tiny_shakespeare(data_dir=SHARED_DATA)


# ---------------------------------------------------------------------------------------------------------------
# CharTokenizer
# ---------------------------------------------------------------------------------------------------------------


def test_char_tokenizer_vocab_is_sorted_distinct_characters():
    tok = CharTokenizer.from_text("hello world")
    assert tok.vocab == [" ", "d", "e", "h", "l", "o", "r", "w"]
    assert tok.d_vocab == 8
    assert tok.encode("hello") == [3, 2, 4, 4, 5]


def test_char_tokenizer_round_trips_shakespeare(shakespeare):
    tok = CharTokenizer.from_text(shakespeare)
    assert tok.d_vocab == 65  # nanoGPT's shakespeare_char vocabulary
    ids = tok.encode(shakespeare[:5000])
    assert tok.decode(ids) == shakespeare[:5000]
    assert tok.decode(torch.tensor(ids)) == shakespeare[:5000]


def test_char_tokenizer_round_trips_random_unicode():
    text = random_unicode(random.Random(0), 3000)
    tok = CharTokenizer.from_text(text)
    assert tok.decode(tok.encode(text)) == text


def test_char_tokenizer_unknown_character_names_it_and_its_position():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError, match=r"text holds 'z' at position 3"):
        tok.encode("abcz")


@pytest.mark.parametrize("ids", [[0, 3], [-1], torch.tensor([0, 1, 7])])
def test_char_tokenizer_decode_rejects_ids_out_of_range(ids):
    with pytest.raises(ValueError, match=r"ids must lie in \[0, d_vocab=3\)"):
        CharTokenizer.from_text("abc").decode(ids)


@pytest.mark.parametrize(
    ("vocab", "message"),
    [([], "at least one character"), (["a", "bc"], "single characters, got 'bc' at index 1"),
     (["a", "b", "a"], r"duplicates \['a'\]")],
)
def test_char_tokenizer_rejects_bad_vocab(vocab, message):
    with pytest.raises(ValueError, match=f"vocab must.*{message}"):
        CharTokenizer(vocab)


def test_char_tokenizer_from_empty_text():
    with pytest.raises(ValueError, match="text must be a non-empty string"):
        CharTokenizer.from_text("")


# ---------------------------------------------------------------------------------------------------------------
# The merge loop
# ---------------------------------------------------------------------------------------------------------------


def test_train_bpe_textbook_example():
    result = train_bpe(HUG_WORDS, 3)
    assert result.steps == (MergeStep(("u", "g"), 20), MergeStep(("u", "n"), 16), MergeStep(("h", "ug"), 15))
    assert result.merges == [("u", "g"), ("u", "n"), ("h", "ug")]
    assert result.vocab == ("b", "g", "h", "n", "p", "s", "u", "ug", "un", "hug")
    assert result.segmentations == {
        "hug": ("hug",), "pug": ("p", "ug"), "pun": ("p", "un"), "bun": ("b", "un"), "hugs": ("hug", "s"),
    }
    assert str(result.steps[0]) == "'u' + 'g' -> 'ug'  (count 20)"


def naive_train_bpe(word_counts: dict[str, int], n_merges: int) -> list[tuple[tuple[str, str], int]]:
    """The merge loop with every pair recounted from scratch at each step: slow, obviously right."""
    words = {word: list(word) for word in word_counts}
    steps = []
    for _ in range(n_merges):
        counts = Counter()
        for word, symbols in words.items():
            for pair in zip(symbols, symbols[1:]):
                counts[pair] += word_counts[word]
        if not counts:
            break
        best = max(counts.values())
        pair = min(p for p, c in counts.items() if c == best)
        steps.append((pair, best))
        words = {word: merge_pair(symbols, pair, pair[0] + pair[1]) for word, symbols in words.items()}
    return steps


@pytest.mark.parametrize("seed", range(5))
def test_train_bpe_incremental_counts_equal_recounting(seed):
    rng = random.Random(seed)
    word_counts = {"".join(rng.choices("abcd", k=rng.randint(1, 9))): rng.randint(1, 20) for _ in range(40)}
    steps = train_bpe(word_counts, 60).steps
    assert [(step.pair, step.count) for step in steps] == naive_train_bpe(word_counts, 60)


def test_train_bpe_breaks_ties_by_sort_order_not_by_insertion_order():
    forward = train_bpe({"cd": 3, "ab": 3, "ba": 1}, 1)
    backward = train_bpe({"ba": 1, "ab": 3, "cd": 3}, 1)
    assert forward.steps == backward.steps == (MergeStep(("a", "b"), 3),)


def test_train_bpe_stops_when_every_word_is_one_token():
    result = train_bpe({"abc": 2, "ab": 1}, 10)
    assert result.merges == [("a", "b"), ("ab", "c")]
    assert result.segmentations == {"abc": ("abc",), "ab": ("ab",)}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"word_counts": {}, "n_merges": 1}, "word_counts must hold at least one word"),
     ({"word_counts": {"ab": 0}, "n_merges": 1}, "word_counts must map words to positive int counts"),
     ({"word_counts": {"": 2}, "n_merges": 1}, "word_counts must not hold an empty word"),
     ({"word_counts": {"ab": 1}, "n_merges": -1}, "n_merges must be a non-negative int"),
     ({"word_counts": {"ab": 1}, "n_merges": 1, "alphabet": ["a"]}, r"alphabet must hold every symbol.*'b'")],
)
def test_train_bpe_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        train_bpe(**kwargs)


def test_merge_pair_merges_overlapping_occurrences_from_the_left():
    assert merge_pair(list("aaab"), ("a", "a"), "aa") == ["aa", "a", "b"]
    assert merge_pair([1, 2, 1, 2, 2], (1, 2), 9) == [9, 9, 2]


# ---------------------------------------------------------------------------------------------------------------
# Byte-level BPE
# ---------------------------------------------------------------------------------------------------------------


def test_bpe_without_merges_is_utf8_bytes():
    text = "Héllo, 世界 🤗"
    tok = BPETokenizer()
    assert tok.d_vocab == 256
    assert tok.encode(text) == list(text.encode("utf-8"))


def test_bpe_textbook_example_at_byte_level():
    tok = BPETokenizer.train(HUG_WORDS, n_merges=3)
    expected = [((b"u", b"g"), 20), ((b"u", b"n"), 16), ((b"h", b"ug"), 15)]
    assert [(step.pair, step.count) for step in tok.trace] == expected
    assert tok.vocab[256:] == [b"ug", b"un", b"hug"]
    assert tok.encode("hugs") == [258, ord("s")]
    assert tok.encode("bug") == [ord("b"), 256]


@pytest.mark.parametrize("seed", range(3))
def test_bpe_round_trips_random_unicode(seed):
    rng = random.Random(seed)
    tok = BPETokenizer.train(random_unicode(rng, 2000) + PARAGRAPH, n_merges=150)
    text = random_unicode(rng, 2000)  # unseen text, characters the merges never saw included
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.decode(torch.tensor(ids)) == text
    assert "".join(pretokenize(text)) == text


def test_encode_applies_merges_by_rank_not_by_frequency():
    tok = BPETokenizer([(b"a", b"b"), (b"b", b"c")])
    ab, bc = 256, 257
    # In "abcbc" the pair (b, c) occurs twice and (a, b) once. Merging the most frequent pair first would give
    # a|bc|bc; the learned order merges (a, b) first, which uses up the first b: ab|c|bc.
    assert tok.encode("abcbc") == [ab, ord("c"), bc]
    assert tok.encode("bcbc") == [bc, bc]


def test_merges_building_an_existing_token_share_its_id():
    tok = BPETokenizer([(b"a", b"b"), (b"ab", b"c"), (b"b", b"c"), (b"a", b"bc")])
    assert tok.vocab[256:] == [b"ab", b"abc", b"bc"]
    assert tok.encode("abc") == [257]


def test_bpe_merges_must_use_known_tokens():
    with pytest.raises(ValueError, match=r"merges\[1\] uses b'xy'"):
        BPETokenizer([(b"a", b"b"), (b"xy", b"z")])


def test_bpe_decode_of_a_cut_character_is_the_replacement_character():
    tok = BPETokenizer()
    ids = tok.encode("é")  # two UTF-8 bytes
    assert tok.decode(ids[:1]) == "\ufffd"
    with pytest.raises(ValueError, match=r"ids must lie in \[0, d_vocab=256\), got 256 at position 1"):
        tok.decode([0, 256])


def test_bpe_vocab_size_and_sequence_length(shakespeare):
    text, unseen = shakespeare[:100_000], shakespeare[-20_000:]
    lengths = []
    for vocab_size in (256, 300, 500):
        tok = BPETokenizer.train(text, vocab_size=vocab_size)
        assert tok.d_vocab == vocab_size
        counts = [step.count for step in tok.trace]
        assert counts == sorted(counts, reverse=True)  # the best pair's count never grows
        lengths.append(len(tok.encode(unseen)))
    assert lengths[0] == len(unseen.encode("utf-8"))
    assert lengths[0] > lengths[1] > lengths[2]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"corpus": "abc"}, "give exactly one of vocab_size and n_merges"),
     ({"corpus": "abc", "vocab_size": 300, "n_merges": 4}, "give exactly one of vocab_size and n_merges"),
     ({"corpus": "abc", "vocab_size": 255}, "vocab_size must be at least 256"),
     ({"corpus": "", "n_merges": 4}, "corpus must be a non-empty text")],
)
def test_bpe_train_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BPETokenizer.train(**kwargs)


SPECIALS = ["<pad>", "<bos>", "<eos>"]


def test_special_tokens_are_single_ids_after_the_merges_and_round_trip(shakespeare):
    tok = BPETokenizer.train(shakespeare[:50_000], n_merges=200, special_tokens=SPECIALS)
    assert tok.d_vocab == 256 + 200 + 3 and list(tok.special_tokens.values()) == [456, 457, 458]
    pad, bos, eos = tok.special_tokens.values()
    text = "<bos>First Citizen:<eos><bos>Speak, speak.<eos><pad><pad>"
    ids = tok.encode(text)
    assert ids[0] == bos and ids[-3:] == [eos, pad, pad] and ids.count(bos) == 2 and ids.count(eos) == 2
    assert tok.decode(ids) == text
    # Never merged across: the text between special tokens encodes as it does alone.
    assert ids[1 : ids.index(eos)] == tok.encode("First Citizen:")
    # Never produced by merges: no merged token holds a special token's text, even after training on text full of them.
    trained_on_specials = BPETokenizer.train("<eos><bos>" * 500 + "a b", n_merges=20, special_tokens=SPECIALS)
    assert all(b"<" not in left + right and b">" not in left + right for left, right in trained_on_specials.merges)
    assert trained_on_specials.encode("<eos><bos>") == [trained_on_specials.special_tokens["<eos>"],
                                                        trained_on_specials.special_tokens["<bos>"]]


def test_special_tokens_as_plain_text_and_the_longest_match():
    tok = BPETokenizer([(b"<", b"e")], special_tokens=["<e", "<eos>"])
    assert tok.encode("<eos>") == [tok.special_tokens["<eos>"]]  # the longer special wins
    assert tok.encode("<e<eos>") == [tok.special_tokens["<e"], tok.special_tokens["<eos>"]]
    plain = tok.encode("<eos>", allow_special=False)
    assert plain == list(b"<eos>") and tok.decode(plain) == "<eos>"  # the pre-tokenizer cuts "<" from "eos"
    assert BPETokenizer([(b"<", b"e")]).encode("<eos>") == plain  # without special tokens: as before
    assert repr(tok) == "BPETokenizer(d_vocab=259, n_merges=1, special_tokens=['<e', '<eos>'])"


@pytest.mark.parametrize(
    ("special_tokens", "message"),
    [("<eos>", "special_tokens must be a sequence of strings"), (["<eos>", ""], "non-empty strings"),
     (["<eos>", "<eos>"], "must not repeat")],
)
def test_special_tokens_reject_bad_input(special_tokens, message):
    with pytest.raises(ValueError, match=message):
        BPETokenizer(special_tokens=special_tokens)


def test_vocab_size_counts_the_special_tokens():
    tok = BPETokenizer.train("hug pug pun bun hugs " * 5, vocab_size=262, special_tokens=SPECIALS)
    assert tok.d_vocab == 262 and len(tok.merges) == 3
    with pytest.raises(ValueError, match="vocab_size must be at least 256"):
        BPETokenizer.train("abc", vocab_size=258, special_tokens=SPECIALS)


# ---------------------------------------------------------------------------------------------------------------
# Against Hugging Face `tokenizers` and GPT-2's own pre-tokenizer
# ---------------------------------------------------------------------------------------------------------------

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def test_pretokenize_matches_gpt2_on_ascii(shakespeare):
    regex = pytest.importorskip("regex")
    rng = random.Random(0)
    noise = "".join(rng.choice("ab Z09_'-!? \n\t.,") for _ in range(5000)) + "it's we'll they'd I'm you've 're"
    for text in (shakespeare, noise):
        assert pretokenize(text) == regex.findall(GPT2_PATTERN, text)


def hf_bpe_model(tok: BPETokenizer):
    """Hugging Face's BPE model holding our vocabulary and merges; bytes map 1:1 to characters via Latin-1."""
    models = pytest.importorskip("tokenizers.models")
    vocab = {token.decode("latin-1"): i for i, token in enumerate(tok.vocab)}
    merges = [(left.decode("latin-1"), right.decode("latin-1")) for left, right in tok.merges]
    return models.BPE(vocab=vocab, merges=merges)


def hf_encode(model, text: str) -> list[int]:
    return [t.id for word in pretokenize(text) for t in model.tokenize(word.encode("utf-8").decode("latin-1"))]


def test_encode_matches_hugging_face_bpe_model(shakespeare):
    tok = BPETokenizer.train(shakespeare[:200_000], n_merges=300)
    model = hf_bpe_model(tok)
    unseen = shakespeare[-30_000:] + random_unicode(random.Random(1), 2000)
    assert tok.encode(unseen) == hf_encode(model, unseen)
    for text in ("abcbc", "abc", "bcabc"):
        small = BPETokenizer([(b"a", b"b"), (b"b", b"c"), (b"ab", b"c"), (b"a", b"bc")])
        assert small.encode(text) == hf_encode(hf_bpe_model(small), text)


def test_training_matches_hugging_face_trainer(shakespeare):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    n_merges = 300
    hf = tokenizers.Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)  # GPT-2's split
    trainer = trainers.BpeTrainer(
        vocab_size=256 + n_merges, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    hf.train_from_iterator([shakespeare], trainer)
    to_bytes = decoders.ByteLevel()  # undoes GPT-2's byte -> printable-character map (the text is ASCII)
    # Recent versions store a merge as [left, right], older ones as "left right".
    raw_merges = json.loads(hf.to_str())["model"]["merges"]
    pairs = [merge.split(" ") if isinstance(merge, str) else merge for merge in raw_merges]
    hf_merges = [tuple(to_bytes.decode([side]).encode() for side in pair) for pair in pairs]

    tok = BPETokenizer.train(shakespeare, n_merges=n_merges)
    assert len(hf_merges) == len(tok.merges) == n_merges
    # Hugging Face breaks ties by token id, we by sort order: within each run of merges of equal count the
    # order may differ, the merges may not.
    start = 0
    for count, run in itertools.groupby(tok.trace, key=lambda step: step.count):
        pairs = [step.pair for step in run]
        assert set(pairs) == set(hf_merges[start : start + len(pairs)]), f"merges of count {count} differ"
        start += len(pairs)
