"""Chapter 01's exercises: the pieces of byte-pair encoding, with the mistakes learners make.

- ``01.count_pairs`` counts adjacent pairs in a table of words (each a tuple of symbols) weighted by the words' counts.
  Besides single tables, one case runs the three merges of the classic "aaabdaaabac" example with the learner's counts
  deciding each merge (ties broken by the reference's rule), so a counting mistake shows as the wrong merges.
- ``01.best_pair`` picks the pair to merge: the most frequent, ties broken by the smallest pair in sort order, so the
  result does not depend on the order of the table. The cases hold the same ties in different insertion orders.
- ``01.merge`` applies one merge to a list of symbols, left to right, overlapping occurrences merged from the left.
- ``01.encode_word`` encodes one word's bytes by merge *rank* (GPT-2's rule: the pair learned first, among those
  present, is merged first), which is not the most frequent pair of the word.
- ``01.decode`` turns token ids back into text through the bytes of the whole sequence, so that a character whose
  UTF-8 bytes fall in two tokens survives, and an incomplete character becomes U+FFFD instead of an error.
- ``01.train_merges`` (the build exercise) composes the pieces into a byte-level BPE trainer on a text: GPT-2's
  pre-split, the 256 bytes as the start, ``vocab_size - 256`` merges; its merges must equal the package's
  ``BPETokenizer.train``'s, in order, and bad input (a non-str or empty text, a vocab_size below 256 or not an int)
  must raise ``ValueError``. The catalogue holds the composition mistakes (no pre-split, spaces dropped, characters
  instead of bytes, counting once, never rewriting the words, ties by table order, no early stop, the bytes left out
  of the vocabulary size) and the refusals left out.
- ``01.predict_length`` (predict, then measure) asks how many tokens the hug table takes after its three merges: each
  merge saves as many tokens as its count.
- ``01.predict_capitals`` (predict, then measure, by training and running a tokenizer): ids per character of the
  held-out text in capitals, under a BPE whose merges were learned on the text as written.

As in ``ch03``, the mistakes are written the way a learner would write them and carry no annotations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import torch

from tutorial_lib import tokenizers as reference
from tutorial_lib.checks.compound import mistake_builder
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, WrongOutput, register, uses_earlier_answer
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction
from tutorial_lib.validation import check_int, shortened

# --- 01.count_pairs -----------------------------------------------------------------------------------------------------

HUG_WORDS = {"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}


def _table(words: Mapping[str, int] | Mapping[tuple[str, ...], int]) -> dict[tuple[str, ...], int]:
    return {tuple(word): count for word, count in words.items()}


def reference_count_pairs(word_counts):
    """Every adjacent pair of symbols, counted once per occurrence and weighted by the count of its word."""
    counts: dict[tuple[str, str], int] = {}
    for word, count in word_counts.items():
        for pair in zip(word, word[1:]):
            counts[pair] = counts.get(pair, 0) + count
    return counts


def _as_counts(value, what: str) -> dict:
    if not isinstance(value, Mapping):
        raise WrongOutput("wrong_type", f"{what} should return a dict from pair to count, got {type(value).__name__}")
    return dict(value)


def _count_call(count_pairs, args):
    """Count the table; or, with ``n_merges``, let the counts decide ``n_merges`` merges and return them."""
    word_counts, n_merges = args
    if n_merges == 0:
        return _as_counts(count_pairs(word_counts), "count_pairs")
    words, merges = dict(word_counts), []
    for _ in range(n_merges):
        counts = _as_counts(count_pairs(words), "count_pairs")
        if not counts:
            break
        pair, count = min(counts.items(), key=lambda item: (-item[1], item[0]))
        merges.append((pair, count))
        words = {tuple(reference.merge_pair(list(word), pair, pair[0] + pair[1])): n for word, n in words.items()}
    return merges


def _count_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(word_counts=_table(HUG_WORDS), n_merges=0, note="hug, pug, pun, bun, hugs with counts 10, 5, 12, 4, 5"),
        Case.of(word_counts=_table({"aaabdaaabac": 1}), n_merges=3,
                note="the three merges of 'aaabdaaabac', decided by your counts"),
        Case.of(word_counts=_table({"aaa": 2, "aaaa": 1, "ba": 3}), n_merges=0, note="overlapping pairs"),
        Case.of(word_counts={("h", "ug"): 10, ("p", "ug"): 5, ("p", "un"): 12, ("b", "un"): 4, ("h", "ug", "s"): 5},
                n_merges=0, note="after two merges"),
        Case.of(word_counts=_table({"a": 7, "low": 5, "lower": 2, "newest": 6, "widest": 3}), n_merges=0,
                note="a one-symbol word"),
    ]


@mistake_builder
def _count_like(*, weight="count", scope="word", positions="all"):
    """A learner's count_pairs; each keyword reproduces one way of getting it wrong. ``weight="one"`` counts each word
    once; ``scope="stream"`` runs the words together into one stream of symbols; ``positions``: "all" (right),
    "distinct" (each pair once per word), "without_last" (the loop stops one pair early), "step_two" (non-overlapping)."""

    def count_pairs(word_counts):
        words = {word: (count if weight == "count" else 1) for word, count in word_counts.items()}
        if scope == "stream":
            words = {tuple(symbol for word, count in words.items() for _ in range(count) for symbol in word): 1}
        counts = Counter()
        for word, count in words.items():
            pairs = list(zip(word, word[1:]))
            if positions == "distinct":
                pairs = list(dict.fromkeys(pairs))
            elif positions == "without_last":
                pairs = pairs[:-1]
            elif positions == "step_two":
                pairs = pairs[::2]
            for pair in pairs:
                counts[pair] += count
        return dict(counts)

    return count_pairs


def _every_other_symbol(word_counts):
    counts = Counter()
    for word, count in word_counts.items():
        for pair in zip(word, word[2:]):
            counts[pair] += count
    return dict(counts)


def _count_squared(word_counts):
    counts = Counter()
    for word, count in word_counts.items():
        for pair in zip(word, word[1:]):
            counts[pair] += count * count
    return dict(counts)


COUNT_PAIRS = Exercise(
    id="01.count_pairs",
    reference=reference_count_pairs,
    cases=_count_cases,
    points=1,
    call=_count_call,
    outputs=("the pair counts",),
    checked=(
        "the hug/pug/pun/bun/hugs table, overlapping pairs (aaa), a table after two merges, a one-symbol word, and the "
        "three merges of 'aaabdaaabac' (as your counts decide them)"
    ),
    mistakes=(
        Mistake("ignored_word_counts", "counted each word once instead of weighting it by its count",
                "A word that occurs 10 times contributes its pairs 10 times: add `count`, not 1.", (_count_like(weight="one"),)),
        Mistake("across_word_boundaries", "counted pairs across word boundaries",
                "The words were split apart on purpose: a pair made of the end of one word and the start of the next "
                "never occurs in text. Count within each word only.", (_count_like(scope="stream"),)),
        Mistake("once_per_word", "counted a pair once per word however often it occurs in it",
                "A set of a word's pairs drops repeats: aaa holds (a, a) twice. Count every occurrence.",
                (_count_like(positions="distinct"),)),
        Mistake("missed_the_last_pair", "missed the last pair of each word",
                "A word of n symbols has n - 1 adjacent pairs: the last one starts at position n - 2, so let the loop "
                "reach it.",
                (_count_like(positions="without_last"),)),
        Mistake("non_overlapping_only", "stepped two symbols at a time, so half the pairs were never counted",
                "Every position i < n - 1 starts a pair: step by 1, pairing each symbol with the next.",
                (_count_like(positions="step_two"),)),
    ),
    mutants=(
        Mutant("every_other_symbol", "pairs a symbol with the one two places later", _every_other_symbol),
        Mutant("count_squared", "weights each word by its count squared", _count_squared),
    ),
)


# --- 01.best_pair -------------------------------------------------------------------------------------------------------


def reference_best_pair(pair_counts):
    """The most frequent pair; among equally frequent ones, the smallest in sort order (independent of dict order)."""
    return min(pair_counts.items(), key=lambda item: (-item[1], item[0]))[0]


def _best_pair_cases(generator: torch.Generator) -> list[Case]:
    counts = reference_count_pairs(_table(HUG_WORDS))
    tie = {("u", "n"): 16, ("h", "u"): 15, ("u", "g"): 20, ("g", "s"): 5, ("p", "u"): 17, ("a", "g"): 20}
    return [
        Case.of(pair_counts=counts, note="the hug table: (u, g) 20"),
        Case.of(pair_counts=tie, note="(u, g) and (a, g) both 20, (u, g) inserted first"),
        Case.of(pair_counts=dict(reversed(list(tie.items()))), note="the same counts inserted in the opposite order"),
        Case.of(pair_counts={("b", "c"): 3, ("b", "a"): 3, ("c", "a"): 1}, note="a tie decided by the second symbol"),
        Case.of(pair_counts={("b", "y"): 2, ("a", "z"): 2, ("c", "x"): 1}, note="a tie decided by the first symbol"),
        Case.of(pair_counts={("z", "z"): 1}, note="a single pair"),
        Case.of(pair_counts={("ab", "c"): 4, ("a", "bc"): 4}, note="two pairs that both make abc"),
    ]


@mistake_builder
def _best_like(*, ties="smallest", frequency="most", returns="pair"):
    """A learner's best_pair; each keyword reproduces one way of getting it wrong. ``ties``: "smallest" pair (right),
    "first_seen" or "last_seen" (dict order), "sorted_last" (the last of a stable sort by count), "largest" pair;
    ``frequency``: "most" (right), "least", or "ignored" (sorted by the pair alone); ``returns="count"``."""

    def best_pair(pair_counts):
        items = list(pair_counts.items())
        sign = -1 if frequency == "most" else 1  # smaller keys first: -count for the most frequent
        if frequency == "ignored":
            best = min(items, key=lambda item: item[0])
        elif ties == "smallest":
            best = min(items, key=lambda item: (sign * item[1], item[0]))
        elif ties == "largest":
            best = max(items, key=lambda item: (-sign * item[1], item[0]))
        elif ties == "first_seen":
            best = min(items, key=lambda item: sign * item[1])
        elif ties == "sorted_last":
            best = sorted(items, key=lambda item: -sign * item[1])[-1]
        else:  # last_seen
            best = None
            for item in items:
                if best is None or sign * item[1] <= sign * best[1]:
                    best = item
        return best[1] if returns == "count" else best[0]

    return best_pair


def _concatenation_order(pair_counts):  # ties by the merged string: ('a', 'bc') vs ('ab', 'c') compare equal
    return min(pair_counts.items(), key=lambda item: (-item[1], item[0][0] + item[0][1]))[0]


def _best_item(pair_counts):
    return min(pair_counts.items(), key=lambda item: (-item[1], item[0]))


BEST_PAIR = Exercise(
    id="01.best_pair",
    reference=reference_best_pair,
    cases=_best_pair_cases,
    points=1,
    outputs=("the pair",),
    checked=(
        "the hug table, a tie of two pairs inserted in both orders, ties decided by the first and by the second symbol, "
        "a single pair, "
        "and two tied pairs that both make abc: the most frequent pair, ties broken by the smallest pair in sort order"
    ),
    mistakes=(
        Mistake("tie_by_dict_order", "broke ties by the order of the dict, so the result depends on the input's order",
                "`max` keyed on the count alone returns the *first* maximum met: insert the same counts in "
                "another order and another pair wins. Break ties by the pair itself: key (-count, pair).",
                (_best_like(ties="first_seen"), _best_like(ties="last_seen"), _best_like(ties="sorted_last"))),
        Mistake("largest_pair_of_the_tie", "broke ties towards the pair that sorts last",
                "`max` with key (count, pair) prefers the largest pair among equal counts; the rule is the smallest: "
                "`min` with key (-count, pair).", (_best_like(ties="largest"),)),
        Mistake("least_frequent", "picked the least frequent pair",
                "BPE merges the *most* frequent pair: sort by -count (or use `max` on the count).",
                (_best_like(frequency="least"),)),
        Mistake("ignored_the_counts", "sorted by the pairs alone and ignored their counts",
                "The count decides; the pair only breaks ties: key (-count, pair).", (_best_like(frequency="ignored"),)),
        Mistake("returned_the_count", "returned the highest count instead of its pair",
                "Return the pair (a tuple of two symbols), the first element of the best (pair, count) item.",
                (_best_like(returns="count"),)),
    ),
    mutants=(
        Mutant("concatenation_order", "breaks ties by the merged string, so (a, bc) and (ab, c) tie",
               _concatenation_order),
        Mutant("returns_the_item", "returns the (pair, count) item", _best_item),
    ),
)


# --- 01.merge -----------------------------------------------------------------------------------------------------------


def _merge_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(symbols=list("hugs"), pair=("u", "g"), new="ug"),
        Case.of(symbols=list("aaabdaaabac"), pair=("a", "a"), new="aa", note="overlapping occurrences: aaa"),
        Case.of(symbols=["aa", "a", "b", "d", "aa", "a", "b", "a", "c"], pair=("aa", "a"), new="aaa",
                note="the second merge of aaabdaaabac"),
        Case.of(symbols=["a", "ab", "c", "ab", "c"], pair=("ab", "c"), new="abc", note="a match across symbols: a+ab"),
        Case.of(symbols=list("aaaa"), pair=("a", "a"), new="aa", note="aaaa becomes aa aa"),
        Case.of(symbols=list("pun"), pair=("u", "g"), new="ug", note="no occurrence"),
        Case.of(symbols=["ba", "a", "ab"], pair=("a", "a"), new="aa", note="a, a only across the symbols ba|a|ab"),
    ]


@mistake_builder
def _merge_like(*, overlaps="skipped", every=True, scan="left", in_place=False, joined=False):
    """A learner's merge; each keyword reproduces one way of getting it wrong. ``overlaps="reused"`` lets both symbols
    of a merged pair start another one; ``every=False`` merges the first occurrence only; ``scan="right"`` scans from
    the right; ``in_place=True`` writes the result into the caller's list; ``joined=True`` joins the symbols into a
    string and replaces the pair's characters there."""

    def from_the_left(symbols, pair, new):
        out, taken, i = [], set(), 0
        while i < len(symbols):
            if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair and (every or not taken):
                out.append(new)
                taken.add(i)
                i += 2 if overlaps == "skipped" else 1
            else:
                if not (overlaps == "reused" and i - 1 in taken):  # the second symbol of a pair just merged
                    out.append(symbols[i])
                i += 1
        return out

    def merge(symbols, pair, new):
        if joined:
            return [new if char == "\0" else char for char in "".join(symbols).replace(pair[0] + pair[1], "\0")]
        if scan == "right":
            out = from_the_left(list(symbols)[::-1], pair[::-1], new)[::-1]
        else:
            out = from_the_left(list(symbols), pair, new)
        if in_place:
            symbols[:] = out
            return symbols
        return out

    return merge


def _string_replace(symbols, pair, new):  # joins the symbols, so a match may straddle two of them
    text = " ".join(symbols).replace(f"{pair[0]} {pair[1]}", new)
    return text.split(" ")


def _pair_as_tuple(symbols, pair, new):
    return reference.merge_pair(symbols, pair, pair)


def _last_symbol_dropped(symbols, pair, new):
    out, i = [], 0
    while i < len(symbols) - 1:
        if (symbols[i], symbols[i + 1]) == pair:
            out.append(new)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


MERGE = Exercise(
    id="01.merge",
    reference=reference.merge_pair,
    cases=_merge_cases,
    points=1,
    outputs=("the merged symbols",),
    checked=(
        "a merge in hugs, overlapping occurrences (aaa, aaaa), the merges of aaabdaaabac, a match that straddles two "
        "symbols, and a list without the pair"
    ),
    mistakes=(
        Mistake("overlaps_merged_twice", "merged overlapping occurrences twice",
                "After a merge, both symbols are used: jump to i + 2, so aaa becomes aa a, not aa aa.", (_merge_like(overlaps="reused"),)),
        Mistake("first_occurrence_only", "merged only the first occurrence of the pair",
                "A merge replaces every occurrence in the word: keep scanning after the first.",
                (_merge_like(every=False),)),
        Mistake("merged_across_symbols", "joined the symbols into a string and replaced the pair's characters in it",
                "In the string a+ab+c the characters 'abc' straddle two symbols: a match must be two whole, adjacent "
                "symbols. Compare list elements, not characters.", (_merge_like(joined=True),)),
        Mistake("right_to_left", "scanned from the right, so overlapping occurrences merge from the right",
                "BPE merges from the left: aaa becomes aa a. Scan i = 0, 1, 2 and so on.", (_merge_like(scan="right"),)),
        Mistake("edited_the_argument", "edited the caller's list in place",
                "Assigning into a slice of `symbols` changes the list the caller passed (and shifts the indices under "
                "the loop): build a new list instead.", (_merge_like(in_place=True),)),
    ),
    mutants=(
        Mutant("new_symbol_as_a_tuple", "appends the pair itself instead of the new symbol", _pair_as_tuple),
        Mutant("last_symbol_dropped", "stops one symbol early and drops the last", _last_symbol_dropped),
        Mutant("space_joined_replace", "replaces 'l r' in the space-joined string", _string_replace),
    ),
)


# --- 01.encode_word -----------------------------------------------------------------------------------------------------


def reference_encode_word(word, merges):
    """The tokens of one word's bytes: repeatedly merge the adjacent pair learned first among those present."""
    ranks = {pair: rank for rank, pair in reversed(list(enumerate(merges)))}
    tokens = [bytes([b]) for b in word]
    while len(tokens) > 1:
        pair = min(zip(tokens, tokens[1:]), key=lambda p: ranks.get(p, len(merges)))
        if pair not in ranks:
            break
        tokens = reference.merge_pair(tokens, pair, pair[0] + pair[1])
    return tokens


_HUG_MERGES = [(b"u", b"g"), (b"u", b"n"), (b"h", b"ug")]


def _encode_cases(generator: torch.Generator) -> list[Case]:
    rank_vs_frequency = [(b"a", b"b"), (b"b", b"c"), (b"bc", b"bc")]  # bcbc's pair (b, c) is frequent but learned later
    return [
        Case.of(word=b"hugs", merges=_HUG_MERGES),
        Case.of(word=b"abcbc", merges=rank_vs_frequency,
                note="(a, b) was learned first; (b, c) occurs twice in the word"),
        Case.of(word=b"bcbc", merges=rank_vs_frequency, note="two merges in a row"),
        Case.of(word=b"aaab", merges=[(b"a", b"b"), (b"a", b"a"), (b"aa", b"ab")],
                note="(a, b) first, although (a, a) comes first in the word"),
        Case.of(word="café".encode(), merges=[(b"\xc3", b"\xa9"), (b"f", b"\xc3\xa9"), (b"a", b"f")],
                note="the two UTF-8 bytes of é"),
        Case.of(word="é!".encode(), merges=[(b"\xa9", b"!"), (b"\xc3", b"\xa9!")],
                note="a merge of é's second byte with the next character"),
        Case.of(word=b"ababx", merges=[(b"a", b"b"), (b"b", b"a")], note="(a, b) learned before (b, a)"),
        Case.of(word=b"abc", merges=[(b"b", b"c"), (b"a", b"b")], note="(b, c) learned first, (a, b) is leftmost"),
        Case.of(word=b"xyz", merges=_HUG_MERGES, note="no merge applies"),
    ]


@mistake_builder
def _encode_like(*, choose="lowest_rank", repeat=True, start="bytes"):
    """A learner's encode_word; each keyword reproduces one way of getting it wrong. ``choose`` picks the next pair to
    merge among the learned pairs present: "lowest_rank" (right), "most_frequent" in the word, "leftmost", or
    "highest_rank"; ``repeat=False`` stops after one merge; ``start="characters"`` starts from UTF-8 characters."""

    def encode_word(word, merges):
        ranks = {pair: rank for rank, pair in reversed(list(enumerate(merges)))}
        tokens = ([char.encode("utf-8") for char in word.decode("utf-8")] if start == "characters"
                  else [bytes([b]) for b in word])
        while True:
            present = [pair for pair in zip(tokens, tokens[1:]) if pair in ranks]
            if not present:
                return tokens
            if choose == "most_frequent":
                counts = Counter(present)
                pair = max(counts, key=counts.get)
            elif choose == "leftmost":
                pair = present[0]
            else:
                pair = (min if choose == "lowest_rank" else max)(present, key=ranks.get)
            tokens = reference.merge_pair(tokens, pair, pair[0] + pair[1])
            if not repeat:
                return tokens

    return encode_word


def _ids_instead_of_tokens(word, merges):
    return [int.from_bytes(token, "big") for token in reference_encode_word(word, merges)]


def _merged_string_back(word, merges):
    return [b"".join(reference_encode_word(word, merges))]


ENCODE_WORD = Exercise(
    id="01.encode_word",
    precondition=uses_earlier_answer("merge", "01.merge", 3),  # your merge of exercise 3, graded there
    forbidden=(reference.BPETokenizer,),
    reference=reference_encode_word,
    cases=_encode_cases,
    points=2,
    outputs=("the tokens",),
    checked=(
        "hugs, words where the most frequent or leftmost pair is not the one learned first, two merges in a row, "
        "the two UTF-8 bytes of é and a merge of one of them with the next character, and a word no merge applies to"
    ),
    mistakes=(
        Mistake("most_frequent_in_word", "merged the pair most frequent in the word instead of the merge learned first",
                "Encoding replays training's order: the pair with the lowest rank (index in merges) goes first, "
                "however often another pair occurs in this word.", (_encode_like(choose="most_frequent"),)),
        Mistake("leftmost_pair_first", "merged the leftmost known pair instead of the merge learned first",
                "The position in the word does not matter, the rank does: merge the pair of lowest rank first.",
                (_encode_like(choose="leftmost"),)),
        Mistake("latest_merge_first", "applied the merge learned last first",
                "Rank 0 is the first merge learned, and it goes first: take the *lowest* rank.",
                (_encode_like(choose="highest_rank"),)),
        Mistake("stopped_after_one_merge", "stopped after one merge",
                "Keep merging while any adjacent pair is a learned merge: bcbc needs (b, c) and then (bc, bc).",
                (_encode_like(repeat=False),)),
        Mistake("started_from_characters", "started from the word's characters instead of its bytes",
                "Byte-level BPE starts from single bytes: é is two bytes, 0xC3 0xA9, and the merges work on them.",
                (_encode_like(start="characters"),)),
    ),
    mutants=(
        Mutant("ids_instead_of_tokens", "returns integers built from each token's bytes", _ids_instead_of_tokens),
        Mutant("merged_string_back", "returns the word's bytes joined into one token", _merged_string_back),
    ),
)


# --- 01.decode ----------------------------------------------------------------------------------------------------------


def reference_decode(ids, vocab):
    """The text of ``ids``: the bytes of every token joined, then decoded once; an incomplete character -> U+FFFD."""
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")


def _decode_cases(generator: torch.Generator) -> list[Case]:
    tokenizer = reference.BPETokenizer([(b"\xc3", b"\xa9"), (b"h", b"e"), (b" ", b"c"), (b"\xf0", b"\x9f"),
                                        (b"\xf0\x9f", b"\x99")])
    vocab = tokenizer.vocab
    return [
        Case.of(ids=tokenizer.encode("hello"), vocab=vocab),
        Case.of(ids=tokenizer.encode("naïve café"), vocab=vocab, note="é is one token, ï two single bytes"),
        Case.of(ids=[0xF0, 0x9F, 0x99, 0x82], vocab=vocab, note="🙂 as four single bytes"),
        Case.of(ids=tokenizer.encode("🙂")[:1], vocab=vocab, note="the first three bytes of 🙂: an incomplete character"),
        Case.of(ids=tokenizer.encode("A 中文 w"), vocab=vocab, note="CJK, three bytes a character"),
        Case.of(ids=tokenizer.encode("  to be,\n or not \n"), vocab=vocab,
                note="leading and trailing spaces and line breaks, which are text too"),
    ]


@mistake_builder
def _decode_like(*, per_token=False, codec="utf-8", errors="replace", joiner="", strip=False, convert="decode"):
    """A learner's decode; each keyword reproduces one way of getting it wrong. ``per_token=True`` decodes each token
    on its own (as does a ``joiner`` between tokens); ``codec``, ``errors`` as ``bytes.decode`` takes them;
    ``strip=True`` strips the ends; ``convert="str"`` turns each token into text with ``str()``."""

    def decode(ids, vocab):
        if convert == "str":
            text = joiner.join(str(vocab[i]) for i in ids)
        elif per_token or joiner:
            text = joiner.join(vocab[i].decode(codec, errors=errors) for i in ids)
        else:
            text = b"".join(vocab[i] for i in ids).decode(codec, errors=errors)
        return text.strip() if strip else text

    return decode


def _ids_as_code_points(ids, vocab):
    return "".join(chr(i) for i in ids)


def _ignore_errors(ids, vocab):
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="ignore")


DECODE = Exercise(
    id="01.decode",
    forbidden=(reference.BPETokenizer, reference.CharTokenizer),
    reference=reference_decode,
    cases=_decode_cases,
    points=1,
    outputs=("the text",),
    checked=(
        "ASCII, accented letters in one token or in two, an emoji as four single bytes, an emoji cut after three of its "
        "four bytes (U+FFFD), CJK characters, and spaces and line breaks at both ends, compared as exact strings"
    ),
    mistakes=(
        Mistake("token_by_token", "decoded each token on its own, so a character split over two tokens breaks",
                "A character's UTF-8 bytes may sit in several tokens (ï as 0xC3 then 0xAF): join all the bytes first, "
                "then decode once.", (_decode_like(per_token=True), _decode_like(per_token=True, errors="ignore"))),
        Mistake("latin1", "decoded the bytes as Latin-1 instead of UTF-8",
                "Latin-1 maps each byte to one character, so é (two bytes) becomes 'Ã©': decode with 'utf-8'.",
                (_decode_like(codec="latin-1"),)),
        Mistake("strict_decoding", "decoded strictly, so an incomplete character raises",
                "A slice of ids can end in the middle of a character: `errors='replace'` turns the incomplete bytes "
                "into U+FFFD instead of raising UnicodeDecodeError.", (_decode_like(errors="strict"),)),
        Mistake("joined_with_spaces", "joined the tokens with spaces",
                "Tokens carry their own spaces (' c' is one token): join with the empty string.",
                (_decode_like(joiner=" "),)),
        Mistake("stripped_whitespace", "stripped the spaces and line breaks at the ends of the text",
                "Decoding gives back the text exactly, spaces and line breaks included (a prompt that ends in ' ' "
                "differs from one that does not): drop the `.strip()`.", (_decode_like(strip=True),)),
        Mistake("repr_of_bytes", "converted each token with str(), which gives its repr such as b'he'",
                "`str()` of the bytes b'he' is their repr, \"b'he'\", not 'he': turn bytes into text with their "
                "`decode` method and 'utf-8'.", (_decode_like(convert="str"),)),
    ),
    mutants=(
        Mutant("ids_as_code_points", "turns each id into the character of that code point", _ids_as_code_points),
        Mutant("ignore_errors", "drops incomplete characters (errors='ignore')", _ignore_errors),
    ),
)


# --- 01.train_merges (build: the pieces above, composed into a byte-level BPE trainer on text) -----------------------

N_BYTES = 256  # byte-level BPE's base alphabet: every vocabulary holds the 256 single bytes before any merge


def reference_train_merges(text, vocab_size):
    """The merges the package's byte-level ``BPETokenizer.train(text, vocab_size=...)`` learns (GPT-2's pre-split, the
    256 bytes, no special tokens), in order; ``text`` refused unless a non-empty ``str``, ``vocab_size`` unless an int
    of at least 256 (here, before the tokenizer's annotations turn a float into a type-check error)."""
    if not isinstance(text, str) or text == "":
        raise ValueError(f"text must be a non-empty string, got {shortened(text)}")
    check_int("vocab_size", vocab_size, minimum=N_BYTES)
    return reference.BPETokenizer.train(text, vocab_size=vocab_size).merges


_HUG_TEXT = " ".join(["hug"] * 10 + ["pug"] * 5 + ["pun"] * 12 + ["bun"] * 4 + ["hugs"] * 5)
_CAT_TEXT = "the cat sat on the mat; the cat ate the rat."


def _train_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(text=_HUG_TEXT, vocab_size=N_BYTES + 6, note="hug, pug, pun, bun, hugs 10, 5, 12, 4, 5 times: merges "
                                                              "that build on merges"),
        Case.of(text=_CAT_TEXT, vocab_size=N_BYTES + 8, note="a sentence: spaces belong to the word after them"),
        Case.of(text="café naïve café, déjà vu", vocab_size=N_BYTES + 5, note="é and ï: two UTF-8 bytes each"),
        Case.of(text="ab ab ab ab", vocab_size=N_BYTES + 5,
                note="more merges than the words allow: stop when every word is one token"),
        Case.of(text="zy yz zy yz", vocab_size=N_BYTES + 3, note="three pairs tie, (z, y) seen first"),
        Case.of(text=_CAT_TEXT, vocab_size=N_BYTES, note="vocab_size 256: the bytes alone, no merge"),
        Case.of(text=_CAT_TEXT, vocab_size=N_BYTES - 1, note="vocab_size 255, fewer than the bytes: a ValueError"),
        Case.of(text=_CAT_TEXT, vocab_size=float(N_BYTES + 4), note="vocab_size 260.0, not an int: a ValueError"),
        Case.of(text=_CAT_TEXT.encode(), vocab_size=N_BYTES + 4, note="text as bytes, not a str: a ValueError"),
        Case.of(text="", vocab_size=N_BYTES + 4, note="an empty text: a ValueError"),
    ]


def _recount(words):
    pairs = {}
    for word, count in words.items():
        for pair in zip(word, word[1:]):
            pairs[pair] = pairs.get(pair, 0) + count
    return pairs


@mistake_builder
def _trainer(*, split="gpt2", start="bytes", weighted=True, recount=True, update_words=True, pick="smallest",
             stop=True, returns="pairs", budget="vocab_size - 256", refuse_small=True, refuse_float=True,
             refuse_empty=True):
    """The learner's trainer with one choice made wrongly (their own versions of count, pick, merge). ``split``:
    "gpt2" (right: ``pretokenize``), "none" (the text as one word) or "whitespace" (``str.split``, spaces dropped);
    ``start="characters"`` (each character's UTF-8 bytes as one symbol); ``budget="vocab_size"`` (the 256 bytes
    forgotten); a refusal left out."""

    def train_merges(text, vocab_size):
        if refuse_empty and (not isinstance(text, str) or text == ""):
            raise ValueError(f"text must be a non-empty string, got {text!r}")
        if refuse_float and not isinstance(vocab_size, int):
            raise ValueError(f"vocab_size must be an int, got {vocab_size!r}")
        if refuse_small and vocab_size < 256:
            raise ValueError(f"vocab_size must be at least 256, got {vocab_size}")
        pieces = {"gpt2": reference.pretokenize, "none": lambda t: [t], "whitespace": str.split}[split](text)
        words = {}
        for piece in pieces:
            if start == "bytes":
                word = tuple(bytes([b]) for b in piece.encode("utf-8"))
            else:
                word = tuple(char.encode("utf-8") for char in piece)
            words[word] = words.get(word, 0) + 1 if weighted else 1
        n_merges = vocab_size - 256 if budget == "vocab_size - 256" else vocab_size
        pairs, merges = _recount(words), []
        while len(merges) < n_merges:
            if recount:
                pairs = _recount(words)
            if stop and not pairs:
                break
            if pick == "smallest":
                pair = min(pairs.items(), key=lambda item: (-item[1], item[0]))[0]
            elif pick == "sorted":  # the same pair, but the first of an empty list is an IndexError
                pair = sorted(pairs.items(), key=lambda item: (-item[1], item[0]))[0][0]
            else:  # max over the counts alone: the first of the tied pairs in the table's order
                pair = max(pairs.items(), key=lambda item: item[1])[0]
            if not recount:
                del pairs[pair]
            merges.append(pair if returns == "pairs" else pair[0] + pair[1])
            if update_words:
                words = {tuple(reference.merge_pair(list(w), pair, pair[0] + pair[1])): n for w, n in words.items()}
        return merges

    return train_merges


def _byte_words(text):
    words = Counter(tuple(bytes([b]) for b in piece.encode("utf-8")) for piece in reference.pretokenize(text))
    return list(words), list(words.values())


def _one_merge_short(text, vocab_size):
    return _trainer()(text, vocab_size)[:-1]


def _least_frequent(text, vocab_size):
    words, counts = _byte_words(text)
    merges = []
    for _ in range(vocab_size - 256):
        pairs = _recount(dict(zip(map(tuple, words), counts)))
        if not pairs:
            break
        pair = min(pairs.items(), key=lambda item: (item[1], item[0]))[0]
        merges.append(pair)
        words = [reference.merge_pair(list(word), pair, pair[0] + pair[1]) for word in words]
    return merges


def _first_word_only(text, vocab_size):
    words, counts = _byte_words(text)
    merges = []
    for _ in range(vocab_size - 256):
        pairs = _recount(dict(zip(map(tuple, words), counts)))
        if not pairs:
            break
        pair = min(pairs.items(), key=lambda item: (-item[1], item[0]))[0]
        merges.append(pair)
        for i, word in enumerate(words):  # applies the merge to the first word that holds the pair, then stops
            merged = reference.merge_pair(list(word), pair, pair[0] + pair[1])
            if len(merged) < len(word):
                words[i] = merged
                break
    return merges


def _as_merges(value):
    if not isinstance(value, (list, tuple)):
        raise WrongOutput("wrong_type", f"train_merges should return a list of pairs, got {type(value).__name__}")
    return [tuple(pair) if isinstance(pair, (list, tuple)) else pair for pair in value]


TRAIN_MERGES = Exercise(
    id="01.train_merges",
    forbidden=(reference.train_bpe, reference.BPETokenizer),
    reference=reference_train_merges,
    cases=_train_cases,
    call=lambda train_merges, args: _as_merges(train_merges(*args)),
    points=3,
    outputs=("the list of merges",),
    checked=(
        "the hug words as a text (merges that build on merges), a sentence, accented letters (two UTF-8 bytes each), "
        "a text that runs out of pairs before vocab_size, a three-way tie whose pairs were first seen in another "
        "order, vocab_size 256 (no merge), and four bad inputs that must raise ValueError: vocab_size 255 and 260.0, "
        "text as bytes, an empty text; the same merges as the package's byte-level BPETokenizer.train, in the same "
        "order (its encode then decode gives every text back)"
    ),
    mistakes=(
        Mistake("no_pre_split", "counted pairs over the whole text as one word, so merges cross word boundaries",
                "GPT-2 cuts the text into words first (`pretokenize`) and merges only within each: a pair made of the "
                "end of one word and the start of the next never becomes a token.", (_trainer(split="none"),)),
        Mistake("split_on_whitespace", "split the text with str.split, which throws the spaces away",
                "The tokenizer must give the text back, spaces included: `pretokenize` keeps each space with the word "
                "after it (' cat' is one word), so spaces take part in the merges.", (_trainer(split="whitespace"),)),
        Mistake("started_from_characters", "started each word from its characters' UTF-8 bytes, one symbol a character",
                "Byte-level BPE starts from single bytes: é is two symbols, 0xC3 and 0xA9, and merging them is a "
                "merge to learn like any other.", (_trainer(start="characters"),)),
        Mistake("unweighted_counts", "counted each distinct word once, however often the text holds it",
                "A word that occurs 12 times contributes its pairs 12 times: count the words as you split the text.",
                (_trainer(weighted=False),)),
        Mistake("counted_once", "counted the pairs once, before the first merge, and took the most frequent ones",
                "Merges build on merges: after u + g, the word hugs holds (h, ug), a pair the first count never saw. "
                "Count the pairs again in every round, on the words as the merges left them.",
                (_trainer(recount=False),)),
        Mistake("words_not_updated", "never applied the chosen merge to the words, so every round picks the same pair",
                "After choosing a pair, rewrite every word with it (your `merge` from exercise 3) before counting "
                "again.", (_trainer(update_words=False),)),
        Mistake("ties_by_table_order", "broke ties by the order of the pair table (max over the counts only)",
                "Among pairs of equal count the smallest pair wins (your `best_pair` from exercise 2), so the result "
                "does not depend on the order in which the pairs were first seen.", (_trainer(pick="max_builtin"),)),
        Mistake("no_early_stop", "kept looping after every word had become one token, and raised on an empty table",
                "When the pair table is empty there is nothing left to merge: stop with fewer merges than asked for.",
                (_trainer(stop=False), _trainer(stop=False, pick="max_builtin"), _trainer(stop=False, pick="sorted"))),
        Mistake("new_tokens_returned", "returned the new tokens (b'ug') instead of the pairs ((b'u', b'g'))",
                "A merge is the pair that was joined: record `pair` itself, not the token its two symbols make (the "
                "encoder needs both halves).", (_trainer(returns="tokens"),)),
        Mistake("bytes_left_out_of_the_vocabulary", "learned vocab_size merges, as if the vocabulary held merges only",
                "The vocabulary starts with the 256 single bytes and each merge adds one token: vocab_size - 256 "
                "merges.", (_trainer(budget="vocab_size"),)),
        Mistake("small_vocabulary_not_refused", "returned no merges for a vocab_size below 256 instead of refusing it",
                "A vocabulary smaller than the byte alphabet cannot encode every text: raise a ValueError that names "
                "`vocab_size` and the 256 it needs.", (_trainer(refuse_small=False),)),
        Mistake("float_vocab_size_accepted", "accepted a vocab_size that is not an int, such as 260.0",
                "A vocabulary holds a whole number of tokens: refuse anything but an int (a bool is not one either) "
                "with a ValueError that names `vocab_size`.", (_trainer(refuse_float=False),)),
        Mistake("empty_text_not_refused", "returned no merges for an empty text instead of refusing it",
                "There is nothing to learn from an empty text: raise a ValueError that names `text`, as for a text "
                "that is not a str.", (_trainer(refuse_empty=False),)),
    ),
    mutants=(
        Mutant("one_merge_short", "learns vocab_size - 257 merges", _one_merge_short),
        Mutant("least_frequent", "merges the least frequent pair each round", _least_frequent),
        Mutant("first_word_only", "applies each merge to the first word that holds the pair only", _first_word_only),
    ),
)


# --- 01.predict_length (predict, then measure: how much the merges shorten the text) --------------------------------


def tokens_after_merges(word_counts, n_merges):
    """How many tokens the whole table takes (each word's tokens times its count) after ``n_merges`` merges."""
    learned = reference.train_bpe(word_counts, n_merges)
    return sum(len(learned.segmentations[word]) * count for word, count in word_counts.items())


PREDICT_LENGTH = predict_number(
    "01.predict_length",
    measure=lambda: tokens_after_merges(HUG_WORDS, 3),
    question="tokens of the hug table after 3 merges",
    within=1.25,
    points=1,
    misconceptions=[
        Misconception("no_shortening", 113,
                      "expected the merges to leave the text as long as it was (113 tokens)",
                      "A merge adds a token to the vocabulary *and* replaces each occurrence of its pair, two tokens, "
                      "by one: the text gets shorter."),
        Misconception("one_per_merge", 110,
                      "expected each merge to save one token (113 - 3)",
                      "A merge replaces every occurrence of its pair, weighted by the words' counts: the first merge, "
                      "(u, g) with count 20, alone saves 20 tokens. Each merge saves its count."),
        Misconception("one_per_word", 36,
                      "expected every word to end as one token (36 word occurrences)",
                      "Three merges make hug one token, but pug, pun, bun and hugs still take two each: only the "
                      "merges learned turn into tokens."),
        Misconception("unweighted", 9,
                      "counted each distinct word once (9 tokens in the 5 words)",
                      "The table holds hug 10 times and pun 12 times: multiply each word's tokens by its count."),
    ],
    mutants=[
        wrong_prediction("far_too_long", 300, "more tokens than the text has characters"),
        wrong_prediction("far_too_short", 20, "fewer tokens than words in the text, yet no misconception"),
    ],
)


# --- 01.predict_capitals (predict, then measure: a tokenizer meets text unlike its training text) ----------------------

CAPITALS_MERGES = 500


def ids_per_character(n_merges: int = CAPITALS_MERGES) -> tuple[float, float]:
    """Ids per character of the chapter's held-out split (the last 10% of Tiny Shakespeare) under the package's
    ``BPETokenizer`` trained with ``n_merges`` merges on the first 90%: as written, and in capitals (``str.upper``)."""
    from tutorial_lib.data.shakespeare import load_tiny_shakespeare  # the corpus, loaded only when measured

    text = load_tiny_shakespeare()
    n_train = int(0.9 * len(text))
    train_text, heldout_text = text[:n_train], text[n_train:]
    bpe = reference.BPETokenizer.train(train_text, n_merges=n_merges)
    return tuple(len(bpe.encode(t)) / len(heldout_text) for t in (heldout_text, heldout_text.upper()))


PREDICT_CAPITALS = predict_number(
    "01.predict_capitals",
    measure=lambda: ids_per_character()[1],
    question=f"ids per character of the held-out text in capitals, {CAPITALS_MERGES} merges",
    within=1.15,
    points=1,
    misconceptions=[
        Misconception("case_ignored", 0.474, "expected capitals to compress as well as the text as written (0.474)",
                      "A merge joins two particular bytes: 't' and 'h' are not 'T' and 'H'. Merges learned on "
                      "lower-case text do not apply to the same words in capitals."),
        Misconception("no_merge_applies", 1.0, "expected no merge at all to apply to capitals",
                      "The training text is not all lower case: the speakers' names stand in capitals at the start "
                      "of every speech, and spaces and punctuation merge whatever the case of the letters."),
        Misconception("two_bytes_per_capital", 2.0, "expected each capital to take two bytes, as an accented letter does",
                      "Capital Latin letters are ASCII, one byte each in UTF-8, as the lower-case ones are; the byte "
                      "count does not change, only which merges fit."),
        Misconception("characters_per_id", 1.25, "gave characters per id instead of ids per character",
                      "The question asks for ids per character, the chapter's measure: the number of ids divided by "
                      "the number of characters, at most 1 for this text."),
    ],
    mutants=[
        wrong_prediction("a_tenth", 0.1, "ten characters per id, more than any merge table this size gives"),
        wrong_prediction("five", 5.0, "more ids than bytes"),
    ],
)

register(COUNT_PAIRS, BEST_PAIR, MERGE, ENCODE_WORD, DECODE, TRAIN_MERGES, PREDICT_LENGTH, PREDICT_CAPITALS)
