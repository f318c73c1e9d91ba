"""Chapter 01's checks: answers written as learners write them, right and wrong.

The learner functions below are written independently of the catalogue's implementations in
``tutorial_lib/checks/ch01.py``: a mistake must be recognised by what it does, not by how it is spelt.
``tests/test_check_catalogue.py`` checks, for every chapter, that each catalogue variant is named and that the mutants
lose their points; this file checks learners' own spellings and some uncatalogued mistakes.
"""

from __future__ import annotations

import collections
import itertools
import random

import pytest

from tutorial_lib.checks import check, get_exercise
from tutorial_lib.tokenizers import pretokenize

from conftest import check_recorded  # a prediction's answer is recorded before its check, as in a notebook

# --- right answers, written differently from the reference -------------------------------------------------------------


def count_pairs_counter(word_counts):
    counter = collections.Counter()
    for word, n in word_counts.items():
        counter.update({pair: n for pair in []})
        for i in range(len(word) - 1):
            counter[(word[i], word[i + 1])] += n
    return counter


def best_pair_sorted(pair_counts):
    return sorted(pair_counts, key=lambda pair: (-pair_counts[pair], pair))[0]


def merge_with_for_loop(symbols, pair, new):
    out, skip = [], False
    for i, symbol in enumerate(symbols):
        if skip:
            skip = False
            continue
        if i + 1 < len(symbols) and symbol == pair[0] and symbols[i + 1] == pair[1]:
            out.append(new)
            skip = True
        else:
            out.append(symbol)
    return out


def encode_by_replaying_merges(word, merges):  # apply every merge in learned order: the same tokens
    tokens = [word[i : i + 1] for i in range(len(word))]
    for left, right in merges:
        tokens = merge_with_for_loop(tokens, (left, right), left + right)
    return tokens


def decode_bytearray(ids, vocab):
    buffer = bytearray()
    for i in ids:
        buffer.extend(vocab[i])
    return bytes(buffer).decode(errors="replace")


RIGHT = [
    ("01.count_pairs", count_pairs_counter),
    ("01.best_pair", best_pair_sorted),
    ("01.merge", merge_with_for_loop),
    ("01.encode_word", encode_by_replaying_merges),
    ("01.decode", decode_bytearray),
]


@pytest.mark.parametrize(("exercise_id", "answer"), RIGHT, ids=[e for e, _ in RIGHT])
def test_a_correct_answer_written_differently_passes(exercise_id, answer):
    result = check_recorded(exercise_id, answer)
    assert result.passed, result.verdict


# --- learners' mistakes -------------------------------------------------------------------------------------------------


def pairs_unweighted(word_counts):
    return dict(collections.Counter(p for word in word_counts for p in zip(word, word[1:])))


def pairs_over_the_whole_text(word_counts):
    text = list(itertools.chain.from_iterable(list(word) * 1 for word, n in word_counts.items() for _ in range(n)))
    counts = {}
    for pair in zip(text, text[1:]):
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def pairs_as_set(word_counts):
    counts = {}
    for word, n in word_counts.items():
        for pair in {(a, b) for a, b in zip(word, word[1:])}:
            counts[pair] = counts.get(pair, 0) + n
    return counts


def pairs_off_by_one(word_counts):
    counts = collections.defaultdict(int)
    for word, n in word_counts.items():
        for i in range(1, len(word) - 1):
            counts[word[i - 1], word[i]] += n
    return dict(counts)


def pairs_stride_two(word_counts):
    counts = {}
    for word, n in word_counts.items():
        for pair in zip(word[::2], word[1::2]):
            counts[pair] = counts.get(pair, 0) + n
    return counts


def best_by_max_get(pair_counts):
    return max(pair_counts.keys(), key=lambda p: pair_counts[p])


def best_sorted_descending(pair_counts):
    return sorted(pair_counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[0][0]


def best_least(pair_counts):
    return sorted(pair_counts.items(), key=lambda kv: (kv[1], kv[0]))[0][0]


def best_alphabetical(pair_counts):
    return min(pair_counts)


def best_count(pair_counts):
    return sorted(pair_counts.values())[-1]


def merge_overlapping(symbols, pair, new):
    out = []
    for i in range(len(symbols)):
        if i + 1 < len(symbols) and symbols[i] == pair[0] and symbols[i + 1] == pair[1]:
            out.append(new)
        elif i > 0 and symbols[i - 1] == pair[0] and symbols[i] == pair[1]:
            continue
        else:
            out.append(symbols[i])
    return out


def merge_once(symbols, pair, new):
    out = list(symbols)
    for i in range(len(out) - 1):
        if (out[i], out[i + 1]) == pair:
            out[i : i + 2] = [new]
            break
    return out


def merge_by_string(symbols, pair, new):
    joined = "".join(symbols).replace(pair[0] + pair[1], "|")
    return [new if char == "|" else char for char in joined]


def merge_from_the_right(symbols, pair, new):
    reversed_out = merge_with_for_loop(symbols[::-1], (pair[1], pair[0]), new)
    return reversed_out[::-1]


def merge_in_place(symbols, pair, new):
    i = 0
    while i + 1 < len(symbols):
        if symbols[i] == pair[0] and symbols[i + 1] == pair[1]:
            symbols[i] = new
            del symbols[i + 1]
        i += 1
    return symbols


def encode_most_frequent(word, merges):
    tokens = [bytes([b]) for b in word]
    merges = set(merges)
    while True:
        candidates = collections.Counter(p for p in zip(tokens, tokens[1:]) if p in merges)
        if not candidates:
            return tokens
        (pair, _), = candidates.most_common(1)
        tokens = merge_with_for_loop(tokens, pair, pair[0] + pair[1])


def encode_leftmost(word, merges):
    tokens = [bytes([b]) for b in word]
    changed = True
    while changed:
        changed = False
        for i in range(len(tokens) - 1):
            if (tokens[i], tokens[i + 1]) in merges:
                tokens = merge_with_for_loop(tokens, (tokens[i], tokens[i + 1]), tokens[i] + tokens[i + 1])
                changed = True
                break
    return tokens


def encode_reverse_ranks(word, merges):
    tokens = [bytes([b]) for b in word]
    while True:
        present = [p for p in merges if p in set(zip(tokens, tokens[1:]))]
        if not present:
            return tokens
        pair = present[-1]
        tokens = merge_with_for_loop(tokens, pair, pair[0] + pair[1])


def encode_single_merge(word, merges):
    tokens = [bytes([b]) for b in word]
    pairs = set(zip(tokens, tokens[1:]))
    for pair in merges:
        if pair in pairs:
            return merge_with_for_loop(tokens, pair, pair[0] + pair[1])
    return tokens


def encode_from_characters(word, merges):
    tokens = [c.encode() for c in word.decode()]
    for pair in merges:
        tokens = merge_with_for_loop(tokens, pair, pair[0] + pair[1])
    return tokens


def decode_each(ids, vocab):
    return "".join(vocab[i].decode("utf-8", "replace") for i in ids)


def decode_latin(ids, vocab):
    return "".join(vocab[i].decode("latin-1") for i in ids)


def decode_strict(ids, vocab):
    return b"".join([vocab[i] for i in ids]).decode()


def decode_stripped(ids, vocab):
    text = b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")
    return text.strip()


def decode_spaced(ids, vocab):
    return " ".join(vocab[i].decode(errors="replace") for i in ids)


def decode_str(ids, vocab):
    return "".join(map(str, (vocab[i] for i in ids)))


LEARNER_MISTAKES = [
    ("01.count_pairs", pairs_unweighted, "ignored_word_counts"),
    ("01.count_pairs", pairs_over_the_whole_text, "across_word_boundaries"),
    ("01.count_pairs", pairs_as_set, "once_per_word"),
    ("01.count_pairs", pairs_off_by_one, "missed_the_last_pair"),
    ("01.count_pairs", pairs_stride_two, "non_overlapping_only"),
    ("01.best_pair", best_by_max_get, "tie_by_dict_order"),
    ("01.best_pair", best_sorted_descending, "largest_pair_of_the_tie"),
    ("01.best_pair", best_least, "least_frequent"),
    ("01.best_pair", best_alphabetical, "ignored_the_counts"),
    ("01.best_pair", best_count, "returned_the_count"),
    ("01.merge", merge_overlapping, "overlaps_merged_twice"),
    ("01.merge", merge_once, "first_occurrence_only"),
    ("01.merge", merge_by_string, "merged_across_symbols"),
    ("01.merge", merge_from_the_right, "right_to_left"),
    ("01.merge", merge_in_place, "edited_the_argument"),
    ("01.encode_word", encode_most_frequent, "most_frequent_in_word"),
    ("01.encode_word", encode_leftmost, "leftmost_pair_first"),
    ("01.encode_word", encode_reverse_ranks, "latest_merge_first"),
    ("01.encode_word", encode_single_merge, "stopped_after_one_merge"),
    ("01.encode_word", encode_from_characters, "started_from_characters"),
    ("01.decode", decode_each, "token_by_token"),
    ("01.decode", decode_latin, "latin1"),
    ("01.decode", decode_strict, "strict_decoding"),
    ("01.decode", decode_spaced, "joined_with_spaces"),
    ("01.decode", decode_str, "repr_of_bytes"),
    ("01.decode", decode_stripped, "stripped_whitespace"),
]


@pytest.mark.parametrize(("exercise_id", "learner", "mistake"), LEARNER_MISTAKES,
                         ids=[learner.__name__ for _, learner, _ in LEARNER_MISTAKES])
def test_a_learners_mistake_is_named(exercise_id, learner, mistake, assert_mistake_named):
    assert_mistake_named(exercise_id, learner, mistake)


def test_every_catalogued_mistake_has_a_learner_version_here():
    catalogued = {(e, m.name) for e in {e for e, _, _ in LEARNER_MISTAKES} for m in get_exercise(e).mistakes}
    assert catalogued == {(e, m) for e, _, m in LEARNER_MISTAKES}


def test_the_classic_example_shows_the_merges_a_wrong_count_makes():
    result = check("01.count_pairs", pairs_as_set)
    assert "aaabdaaabac" in result.verdict or "hug" in result.verdict


def test_a_tie_broken_by_insertion_order_is_caught_on_the_reordered_table():
    result = check("01.best_pair", best_by_max_get)
    assert "inserted first" in result.verdict and "another order and another pair wins" in result.verdict


# --- the build exercise (01.train_merges) and the prediction (01.predict_length) ---------------------------------------


def words_of(text):  # GPT-2's pre-split, each word as its single bytes, with its count
    return collections.Counter(tuple(bytes([b]) for b in w.encode()) for w in pretokenize(text))


def rewrite(word, pair):
    out, i = [], 0
    while i < len(word):
        if word[i : i + 2] == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def train_merges_with_counter(text, vocab_size):
    if type(text) is not str or not text:
        raise ValueError("text: a non-empty str, please")
    if type(vocab_size) is not int or vocab_size < 256:
        raise ValueError(f"vocab_size={vocab_size!r}: an int >= 256")
    words, merges = words_of(text), []
    for _ in range(vocab_size - 256):
        pairs = collections.Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += n
        if not pairs:
            return merges
        top = max(pairs.values())
        pair = sorted(p for p, n in pairs.items() if n == top)[0]
        merges.append(pair)
        merged = collections.Counter()
        for word, n in words.items():
            merged[rewrite(word, pair)] += n
        words = merged
    return merges


def trainer_learning(change):
    """The trainer above with one step replaced: ``change(text, vocab_size)`` returns its (words, n_merges)."""
    def train(text, vocab_size):
        words, n_merges = change(text, vocab_size)
        merges = []
        for _ in range(n_merges):
            pairs = collections.Counter()
            for word, n in words.items():
                for pair in zip(word, word[1:]):
                    pairs[pair] += n
            if not pairs:
                break
            top = max(pairs.values())
            pair = sorted(p for p, n in pairs.items() if n == top)[0]
            merges.append(pair)
            words = collections.Counter({rewrite(w, pair): n for w, n in words.items()})
        return merges
    return train


def checked(text, vocab_size):
    if not isinstance(text, str) or not text or not isinstance(vocab_size, int) or vocab_size < 256:
        raise ValueError(f"bad text or vocab_size: {text!r}, {vocab_size!r}")


def train_on_the_whole_text(text, vocab_size):
    checked(text, vocab_size)
    return trainer_learning(lambda t, v: (collections.Counter({tuple(bytes([b]) for b in t.encode()): 1}), v - 256))(
        text, vocab_size)


def train_on_split_words(text, vocab_size):
    checked(text, vocab_size)
    return trainer_learning(lambda t, v: (collections.Counter(tuple(bytes([b]) for b in w.encode()) for w in t.split()),
                                          v - 256))(text, vocab_size)


def train_on_characters(text, vocab_size):
    checked(text, vocab_size)
    return trainer_learning(lambda t, v: (collections.Counter(tuple(c.encode() for c in w) for w in pretokenize(t)),
                                          v - 256))(text, vocab_size)


def train_on_distinct_words(text, vocab_size):
    checked(text, vocab_size)
    return trainer_learning(lambda t, v: (dict.fromkeys(words_of(t), 1), v - 256))(text, vocab_size)


def train_with_vocab_size_merges(text, vocab_size):
    checked(text, vocab_size)
    return trainer_learning(lambda t, v: (words_of(t), v))(text, vocab_size)


def train_merges_first_table_only(text, vocab_size):  # one count, then the top pairs of that count
    checked(text, vocab_size)
    pairs = collections.Counter()
    for word, n in words_of(text).items():
        for i in range(len(word) - 1):
            pairs[(word[i], word[i + 1])] += n
    ranked = sorted(pairs.items(), key=lambda item: (-item[1], item[0]))
    return [pair for pair, _ in ranked[: vocab_size - 256]]


def train_never_merging(text, vocab_size):
    checked(text, vocab_size)
    words, merges = words_of(text), []
    for _ in range(vocab_size - 256):
        pairs = collections.Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += n
        if not pairs:
            break
        merges.append(min(pairs, key=lambda p: (-pairs[p], p)))
    return merges


def train_by_max_get(text, vocab_size):
    checked(text, vocab_size)
    words, merges = words_of(text), []
    for _ in range(vocab_size - 256):
        pairs = {}
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] = pairs.get(pair, 0) + n
        if not pairs:
            break
        pair = max(pairs, key=pairs.get)
        merges.append(pair)
        words = {rewrite(w, pair): n for w, n in words.items()}
    return merges


def train_without_a_stop(text, vocab_size):
    checked(text, vocab_size)
    words, merges = words_of(text), []
    for _ in range(vocab_size - 256):
        pairs = collections.Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += n
        pair = sorted(pairs.items(), key=lambda item: (-item[1], item[0]))[0][0]
        merges.append(pair)
        words = collections.Counter({rewrite(w, pair): n for w, n in words.items()})
    return merges


def train_merges_joined_tokens(text, vocab_size):
    return [left + right for left, right in train_merges_with_counter(text, vocab_size)]


def train_without_the_size_check(text, vocab_size):
    if not isinstance(text, str) or not text or not isinstance(vocab_size, int):
        raise ValueError("text must be a non-empty str, vocab_size an int")
    return trainer_learning(lambda t, v: (words_of(t), max(v - 256, 0)))(text, vocab_size)


def train_accepting_floats(text, vocab_size):
    if not isinstance(text, str) or not text or vocab_size < 256:
        raise ValueError("bad text or vocab_size")
    return trainer_learning(lambda t, v: (words_of(t), int(v) - 256))(text, vocab_size)


def train_without_the_text_check(text, vocab_size):
    if not isinstance(vocab_size, int) or vocab_size < 256:
        raise ValueError("vocab_size must be an int of at least 256")
    return trainer_learning(lambda t, v: (words_of(t), v - 256))(text, vocab_size)


TRAIN_MISTAKES = [
    (train_on_the_whole_text, "no_pre_split"),
    (train_on_split_words, "split_on_whitespace"),
    (train_on_characters, "started_from_characters"),
    (train_on_distinct_words, "unweighted_counts"),
    (train_merges_first_table_only, "counted_once"),
    (train_never_merging, "words_not_updated"),
    (train_by_max_get, "ties_by_table_order"),
    (train_without_a_stop, "no_early_stop"),
    (train_merges_joined_tokens, "new_tokens_returned"),
    (train_with_vocab_size_merges, "bytes_left_out_of_the_vocabulary"),
    (train_without_the_size_check, "small_vocabulary_not_refused"),
    (train_accepting_floats, "float_vocab_size_accepted"),
    (train_without_the_text_check, "empty_text_not_refused"),
]


def test_the_build_exercise_passes_a_trainer_written_differently():
    result = check("01.train_merges", train_merges_with_counter)
    assert result.passed, result.verdict


# A trainer that skips its own text check hands bytes on to the package's pretokenize: in a notebook its ValueError
# answers, under pytest (whose run-time annotation checks instrument the package, depending on import order) a
# TypeCheckError would. The verdicts are what is tested here, as in tests/test_check_catalogue.py.
@pytest.mark.usefixtures("annotation_checks_off")
@pytest.mark.parametrize(("learner", "mistake"), TRAIN_MISTAKES,
                         ids=[learner.__name__ for learner, _ in TRAIN_MISTAKES])
def test_a_learners_trainer_mistake_is_named(learner, mistake, assert_mistake_named):
    assert_mistake_named("01.train_merges", learner, mistake)


def test_every_catalogued_trainer_mistake_has_a_learner_version_here():
    assert {m.name for m in get_exercise("01.train_merges").mistakes} == {m for _, m in TRAIN_MISTAKES}


def test_a_trainer_built_on_the_packages_tokenizer_scores_nothing():
    from tutorial_lib.tokenizers import BPETokenizer

    result = check("01.train_merges", lambda text, vocab_size: BPETokenizer.train(text, vocab_size=vocab_size).merges)
    assert result.kind == "calls_the_work" and result.points == 0


BRUTE_FORCE_TEXTS = ["the cat sat on the mat; the cat ate the rat.", "café naïve café, déjà vu 🙂🙂",
                     "aaaa aaa  aa\n\na", "zy yz zy yz xx x"]


@pytest.mark.parametrize("seed", range(4))
def test_the_trainer_reference_is_the_brute_force_merge_loop_and_round_trips(seed):
    """The reference (the package's BPETokenizer.train, which updates pair counts incrementally) against a loop written
    here from the definition: every pair of the text's words recounted from scratch each round, the tie by sorting;
    on fixed texts and random ones over a small alphabet (many ties, overlaps, runs of spaces)."""
    from tutorial_lib.checks.ch01 import reference_train_merges
    from tutorial_lib.tokenizers import BPETokenizer

    rng = random.Random(seed)
    texts = BRUTE_FORCE_TEXTS + ["".join(rng.choice("ab é\n") for _ in range(rng.randint(1, 80))) for _ in range(20)]
    for text in texts:
        for n_merges in (0, 1, 7, 40):
            merges = reference_train_merges(text, 256 + n_merges)
            assert merges == train_merges_with_counter(text, 256 + n_merges), (text, n_merges)
            tokenizer = BPETokenizer(merges)
            assert tokenizer.decode(tokenizer.encode(text)) == text
    for text, vocab_size in (("ab", 255), ("ab", 260.0), ("ab", True), (b"ab", 260), ("", 260), (["ab"], 260)):
        with pytest.raises(ValueError, match="vocab_size|text"):
            reference_train_merges(text, vocab_size)


def test_the_prediction_is_graded_against_the_merges_counts(predict):
    assert predict("01.predict_length", lambda: 113 - (20 + 16 + 15)).passed
    assert predict("01.predict_length", lambda: 110).mistake == "one_per_merge"
    missed = predict("01.predict_length", lambda: 200)
    assert not missed.passed and missed.mistake is None and "too large" in missed.verdict


def test_capitals_defeat_most_merges_learned_on_the_text_as_written(predict):
    from tutorial_lib.checks.ch01 import ids_per_character

    as_written, capitals = ids_per_character()
    assert abs(as_written - 0.474) < 0.002  # the chapter's table, 500 merges
    assert 0.72 < capitals < 0.86  # the speakers' names, spaces and punctuation still merge
    assert predict("01.predict_capitals", lambda: 0.8).passed  # the solution's reasoning
    assert predict("01.predict_capitals", lambda: 0.474).mistake == "case_ignored"
    assert predict("01.predict_capitals", lambda: 1).mistake == "no_merge_applies"
    assert predict("01.predict_capitals", lambda: 2).mistake == "two_bytes_per_capital"
    assert predict("01.predict_capitals", lambda: 1.25).mistake == "characters_per_id"
