"""Tokens (chapter 01): a character tokenizer and byte-pair encoding (BPE).

A model sees integers, not text. A tokenizer is the pair of maps ``encode: str -> list[int]`` and
``decode: list[int] -> str`` with ``decode(encode(s)) == s``. Two ways to choose the units:

* :class:`CharTokenizer`: one id per character of a fixed alphabet (nanoGPT's ``shakespeare_char``).
  Tiny vocabulary, long sequences.
* :class:`BPETokenizer`: byte-level byte-pair encoding as in GPT-2 (Sennrich et al., 2016; Radford et al.,
  2019). Start from the 256 byte values, so every string can be encoded, then repeatedly merge the most frequent
  adjacent pair of tokens into a new token. Larger vocabulary, shorter sequences. Special tokens (``<bos>``,
  ``<eos>``, ``<pad>``) can be added: one id each, after the merged tokens, never merged with the text around them.

:func:`train_bpe` is the merge loop itself, on any symbols that concatenate with ``+`` (characters or bytes):
the textbook example of the chapter runs it on characters, :class:`BPETokenizer` runs it on bytes.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
from jaxtyping import Int
from torch import Tensor

from tutorial_lib.validation import check_non_negative_int as _check_non_negative_int
from tutorial_lib.validation import is_int, shortened

Symbol = TypeVar("Symbol")  # what BPE merges: a character, a byte string, or a token id


class CharTokenizer:
    """One token per character: id ``i`` is ``vocab[i]``.

    >>> tok = CharTokenizer.from_text("hello")
    >>> tok.vocab, tok.encode("hole")
    (['e', 'h', 'l', 'o'], [1, 3, 2, 0])
    """

    def __init__(self, vocab: Sequence[str]) -> None:
        if len(vocab) == 0:
            raise ValueError("vocab must hold at least one character, got an empty sequence")
        for i, char in enumerate(vocab):
            if not isinstance(char, str) or len(char) != 1:
                raise ValueError(f"vocab must hold single characters, got {char!r} at index {i}")
        if len(set(vocab)) != len(vocab):
            duplicates = sorted(char for char, n in Counter(vocab).items() if n > 1)
            raise ValueError(f"vocab must not repeat a character, got duplicates {duplicates}")
        self.vocab: list[str] = list(vocab)
        self._ids: dict[str, int] = {char: i for i, char in enumerate(self.vocab)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The vocabulary of ``text``: its distinct characters, sorted by code point (so ids do not depend on order)."""
        if len(text) == 0:
            raise ValueError("text must be a non-empty string to build a vocabulary from")
        return cls(sorted(set(text)))

    @property
    def d_vocab(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        _check_text(text)
        ids = []
        for position, char in enumerate(text):
            if char not in self._ids:
                raise ValueError(f"text holds {char!r} at position {position}, which is not in the vocabulary")
            ids.append(self._ids[char])
        return ids

    def decode(self, ids: Sequence[int] | Int[Tensor, " seq"]) -> str:
        ids = _as_id_list(ids, self.d_vocab)
        return "".join(self.vocab[i] for i in ids)

    def __repr__(self) -> str:
        return f"CharTokenizer(d_vocab={self.d_vocab})"


# ---------------------------------------------------------------------------------------------------------------
# Byte-pair encoding: the merge loop
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MergeStep:
    """One merge of training: the pair merged and how often it occurred (weighted by word counts) when chosen."""

    pair: tuple[str, str] | tuple[bytes, bytes]
    count: int

    @property
    def token(self) -> str | bytes:
        return self.pair[0] + self.pair[1]

    def __str__(self) -> str:
        return f"{self.pair[0]!r} + {self.pair[1]!r} -> {self.token!r}  (count {self.count})"


@dataclass(frozen=True)
class BPETrainingResult:
    """What :func:`train_bpe` learned.

    ``steps``: the merges in the order learned, with their counts (the trace the chapter prints).
    ``vocab``: the start alphabet, then each new token in order of creation.
    ``segmentations``: every training word as the tokens it ends up split into.
    """

    steps: tuple[MergeStep, ...]
    vocab: tuple[str, ...] | tuple[bytes, ...]
    segmentations: dict

    @property
    def merges(self) -> list[tuple[str, str]] | list[tuple[bytes, bytes]]:
        return [step.pair for step in self.steps]


def merge_pair(symbols: Sequence[Symbol], pair: tuple[Symbol, Symbol], new: Symbol) -> list[Symbol]:
    """Replace every occurrence of ``pair`` in ``symbols`` by ``new``, scanning left to right.

    Occurrences that overlap (``a a a`` with the pair ``a a``) are merged from the left: ``aa a``.
    """
    merged = []
    i = 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == pair[0] and symbols[i + 1] == pair[1]:
            merged.append(new)
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return merged


def train_bpe(
    word_counts: Mapping[str, int] | Mapping[tuple[bytes, ...], int],
    n_merges: int,
    *,
    alphabet: Sequence[str] | Sequence[bytes] | None = None,
) -> BPETrainingResult:
    """Learn ``n_merges`` byte-pair-encoding merges from words and their counts.

    Each word starts as its sequence of symbols: the characters of a ``str`` key, or the one-byte ``bytes`` of a
    tuple key (what :class:`BPETokenizer` passes). Repeat: count every adjacent pair of tokens, weighted by the
    word's count; merge the most frequent pair everywhere into one new token. Merges never cross word boundaries.

    Ties: among pairs with the same count, the one that sorts first wins (compared as ``(left, right)`` by code
    point or byte value), so the result does not depend on the order of ``word_counts``.

    Stops early, with fewer merges, once every word is a single token. ``alphabet`` is the start vocabulary
    (default: the symbols of the words, sorted).
    """
    _check_non_negative_int("n_merges", n_merges)
    if len(word_counts) == 0:
        raise ValueError("word_counts must hold at least one word, got an empty mapping")
    for word, count in word_counts.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"word_counts must map words to positive int counts, got {count!r} for {word!r}")
        if len(word) == 0:
            raise ValueError("word_counts must not hold an empty word")

    words = [list(word) for word in word_counts]  # each word as a list of symbols; merges shorten the lists
    counts = list(word_counts.values())
    symbols = {symbol for word in words for symbol in word}
    if alphabet is None:
        alphabet = sorted(symbols)
    elif not symbols <= set(alphabet):
        raise ValueError(f"alphabet must hold every symbol of the words, missing {sorted(symbols - set(alphabet))!r}")

    pair_counts: Counter = Counter()
    words_with = defaultdict(set)  # pair -> indices of the words that contain it
    for i, word in enumerate(words):
        for pair in zip(word, word[1:]):
            pair_counts[pair] += counts[i]
            words_with[pair].add(i)

    steps = []
    while pair_counts and len(steps) < n_merges:
        pair, count = min(pair_counts.items(), key=lambda item: (-item[1], item[0]))
        new = pair[0] + pair[1]
        steps.append(MergeStep(pair, count))
        # Only the words holding the pair change: update their pairs' counts instead of recounting every word.
        for i in words_with.pop(pair):
            old, merged = words[i], merge_pair(words[i], pair, new)
            if len(merged) == len(old):  # an earlier merge already consumed this word's occurrence
                continue
            for p in zip(old, old[1:]):
                pair_counts[p] -= counts[i]
                if pair_counts[p] == 0:
                    del pair_counts[p]
            for p in zip(merged, merged[1:]):
                pair_counts[p] += counts[i]
                words_with[p].add(i)
            words[i] = merged

    vocab = (*alphabet, *(step.token for step in steps))
    segmentations = {key: tuple(word) for key, word in zip(word_counts, words)}
    return BPETrainingResult(tuple(steps), vocab, segmentations)


# ---------------------------------------------------------------------------------------------------------------
# Byte-level BPE, as in GPT-2
# ---------------------------------------------------------------------------------------------------------------

# GPT-2's pre-tokenizer, written for Python's `re` (GPT-2 uses the `regex` module's \p{L} and \p{N}): an English
# contraction; an optional space then a run of letters, of digits, or of other symbols; a run of whitespace that
# leaves its last space to the word after it. It cuts text into words, so merges never cross a word boundary.
# It agrees with GPT-2's on ASCII text; `re` counts a few numeric symbols (², ½) as letters.
PRETOKENIZE_PATTERN = re.compile(r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


def pretokenize(text: str) -> list[str]:
    """Split ``text`` into the words BPE works within; ``"".join(pretokenize(text)) == text``."""
    _check_text(text)
    return PRETOKENIZE_PATTERN.findall(text)


class BPETokenizer:
    """Byte-level BPE: ids 0-255 are the single bytes, each later id a token built by a learned merge, then the
    special tokens, if any.

    Any string round-trips, whatever its characters, because every string is a sequence of UTF-8 bytes.
    Build one with :meth:`train`, or from a list of merges (pairs of ``bytes``) learned before.

    ``special_tokens`` (such as ``"<bos>"``, ``"<eos>"``, ``"<pad>"``) get one id each, after the merges' tokens. In a
    text, each occurrence of one is cut out before the pre-tokenizer runs and encoded as its single id, so no merge
    ever crosses it or produces it (``encode(..., allow_special=False)`` treats them as plain text instead).
    """

    def __init__(self, merges: Iterable[tuple[bytes, bytes]] = (), special_tokens: Sequence[str] = ()) -> None:
        self.vocab: list[bytes] = [bytes([b]) for b in range(256)]
        self.merges: list[tuple[bytes, bytes]] = []
        self.trace: tuple[MergeStep, ...] = ()  # filled by `train`: each merge with its count
        self._ids: dict[bytes, int] = {token: i for i, token in enumerate(self.vocab)}
        self._ranks: dict[tuple[int, int], int] = {}  # (left id, right id) -> position in `merges`
        self._cache: dict[str, list[int]] = {}  # word -> ids; text repeats its words, so this saves most of the work
        for rank, (left, right) in enumerate(merges):
            for token in (left, right):
                if token not in self._ids:
                    raise ValueError(f"merges[{rank}] uses {token!r}, which no earlier merge or byte produces")
            if left + right not in self._ids:
                self._ids[left + right] = len(self.vocab)
                self.vocab.append(left + right)
            self._ranks.setdefault((self._ids[left], self._ids[right]), rank)
            self.merges.append((left, right))
        if isinstance(special_tokens, str):
            raise ValueError(f"special_tokens must be a sequence of strings, got the string {special_tokens!r}")
        self.special_tokens: dict[str, int] = {}  # special token -> its id, after every merged token
        for token in special_tokens:
            if not isinstance(token, str) or token == "":
                raise ValueError(f"special_tokens must hold non-empty strings, got {token!r}")
            if token in self.special_tokens:
                raise ValueError(f"special_tokens must not repeat a token, got {token!r} twice")
            self.special_tokens[token] = len(self.vocab)
            self.vocab.append(token.encode("utf-8"))  # what decode writes for it
        # Longest first, so that a special token that contains another one wins.
        alternatives = sorted(self.special_tokens, key=len, reverse=True)
        self._special_pattern = re.compile("(" + "|".join(map(re.escape, alternatives)) + ")") if alternatives else None

    @classmethod
    def train(
        cls,
        corpus: str | Mapping[str, int],
        *,
        vocab_size: int | None = None,
        n_merges: int | None = None,
        special_tokens: Sequence[str] = (),
    ) -> BPETokenizer:
        """Learn merges from ``corpus``: a text (split with :func:`pretokenize`) or a mapping word -> count.

        Give ``vocab_size`` (at least 256, the bytes, plus the special tokens) or ``n_merges``. Special tokens in a
        text corpus are cut out before counting, so no merge learns from them. The merges and their counts are in
        ``tokenizer.trace``.
        """
        if (vocab_size is None) == (n_merges is None):
            raise ValueError(f"give exactly one of vocab_size and n_merges, got {vocab_size=}, {n_merges=}")
        specials = cls((), special_tokens)  # validates special_tokens; its pattern cuts them out of the corpus
        if vocab_size is not None:
            _check_non_negative_int("vocab_size", vocab_size)
            if vocab_size < specials.d_vocab:
                raise ValueError(f"vocab_size must be at least 256 (the byte alphabet) + {len(specials.special_tokens)} "
                                 f"(the special tokens) = {specials.d_vocab}, got {vocab_size}")
            n_merges = vocab_size - specials.d_vocab  # each merge adds one token
        if isinstance(corpus, str):
            if len(corpus) == 0:
                raise ValueError("corpus must be a non-empty text")
            pieces = specials._special_pattern.split(corpus)[::2] if specials._special_pattern else [corpus]
            word_counts = Counter(word for piece in pieces for word in pretokenize(piece))
        else:
            word_counts = corpus
        byte_words = {tuple(bytes([b]) for b in word.encode("utf-8")): count for word, count in word_counts.items()}
        result = train_bpe(byte_words, n_merges, alphabet=[bytes([b]) for b in range(256)])
        tokenizer = cls(result.merges, special_tokens)
        tokenizer.trace = result.steps
        return tokenizer

    @property
    def d_vocab(self) -> int:
        return len(self.vocab)

    def encode(self, text: str, *, allow_special: bool = True) -> list[int]:
        """The ids of ``text``. Each special token in it becomes its one id, unless ``allow_special`` is False (text
        from a user, say, where ``"<eos>"`` should not end the sequence): then it is encoded as the plain text it is."""
        _check_text(text)
        if self._special_pattern is None or not allow_special:
            return self._encode_ordinary(text)
        ids = []
        # A capturing split alternates: text, special token, text, ..., so the odd pieces are the special tokens.
        for i, piece in enumerate(self._special_pattern.split(text)):
            ids.extend([self.special_tokens[piece]] if i % 2 else self._encode_ordinary(piece))
        return ids

    def _encode_ordinary(self, text: str) -> list[int]:
        ids = []
        for word in pretokenize(text):
            if word not in self._cache:
                self._cache[word] = self._encode_word(word.encode("utf-8"))
            ids.extend(self._cache[word])
        return ids

    def _encode_word(self, word: bytes) -> list[int]:
        ids = list(word)  # byte b is token id b
        while len(ids) > 1:
            # GPT-2's rule: apply the merge learned *first* among the pairs present (lowest rank), which replays
            # training's order. Merging the pair most frequent in this text instead gives other tokens.
            pair = min(zip(ids, ids[1:]), key=lambda p: self._ranks.get(p, math.inf))
            if pair not in self._ranks:
                break
            ids = merge_pair(ids, pair, self._ids[self.vocab[pair[0]] + self.vocab[pair[1]]])
        return ids

    def decode(self, ids: Sequence[int] | Int[Tensor, " seq"]) -> str:
        """The text of ``ids``. A slice can cut a character's UTF-8 bytes apart; such bytes decode to U+FFFD."""
        ids = _as_id_list(ids, self.d_vocab)
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        specials = f", special_tokens={list(self.special_tokens)}" if self.special_tokens else ""
        return f"BPETokenizer(d_vocab={self.d_vocab}, n_merges={len(self.merges)}{specials})"


def _check_text(text: object) -> None:
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {shortened(text)}")


def _as_id_list(ids: Sequence[int] | Tensor, d_vocab: int) -> list[int]:
    if isinstance(ids, Tensor):
        if ids.ndim != 1 or ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise ValueError(f"ids must be a 1-D integer tensor, got shape {tuple(ids.shape)} and dtype {ids.dtype}")
        ids = ids.tolist()
    elif hasattr(ids, "tolist") and getattr(ids, "ndim", None) == 1:  # a NumPy array of ids
        ids = ids.tolist()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise ValueError(f"ids must be a list or 1-D tensor of token ids, got {shortened(ids)}")
    for position, i in enumerate(ids):
        if not is_int(i) or not 0 <= i < d_vocab:
            raise ValueError(f"ids must lie in [0, d_vocab={d_vocab}), got {shortened(i)} at position {position}")
    return [int(i) for i in ids]
