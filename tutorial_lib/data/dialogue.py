"""Tiny Shakespeare as dialogue, for the encoder-only BERT (chapter 14).

The corpus is a sequence of **speeches**: a speaker's name on a line of its own (``"ROMEO:"``), then the lines of
what they say, then a blank line. This module turns it into what BERT trains on:

* :func:`parse_speeches` reads the speeches; :func:`split_speeches` keeps the first 90% for training and the last
  10% (other plays) for evaluation, as the GPT chapters split the characters;
* :class:`WordTokenizer`: lower-cased words and punctuation marks, the most frequent ones of the training speeches,
  after BERT's five special tokens ``[PAD] [UNK] [CLS] [SEP] [MASK]``;
* :func:`script_lines`: the lines as printed, headings included; :func:`nsp_pairs` makes the pairs of next-sentence
  prediction from consecutive lines: half of them the line that follows, half a random line from elsewhere;
* :func:`encode_pair` and :func:`collate_pairs`: ``[CLS] A [SEP] B [SEP]`` with segment ids, padded into a batch;
* :func:`turn_pairs`: the fine-tuning task, *does line B begin another speech (a reply), or does the speaker go on?*
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import torch
from jaxtyping import Int
from torch import Tensor

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
WORD_PATTERN = re.compile(r"[a-z]+(?:'[a-z]+)*|[^\sa-z]")  # a word (with inner apostrophes), or one other character
_HEADER = re.compile(r"^([A-Z][A-Za-z' ,&-]*):$")  # "ROMEO:", "First Citizen:", "Senators, &C:"
_NO_SPACE_BEFORE = re.compile(r" ([,.;:!?])")

T = TypeVar("T")


# --- speeches ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Speech:
    """One turn of the dialogue: who speaks, and the lines they say (as printed, one verse or prose line each)."""

    speaker: str
    lines: tuple[str, ...]


def parse_speeches(text: str) -> list[Speech]:
    """The speeches of ``text``, in order. A speech is a block between blank lines whose first line is a name followed
    by a colon; blocks with no such name, and names with no lines (a character who enters without a word), are
    skipped."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must be a non-empty string")
    speeches = []
    for block in text.split("\n\n"):
        header, *lines = block.strip("\n").split("\n")
        match = _HEADER.match(header)
        lines = [line for line in lines if line.strip()]
        if match and lines:
            speeches.append(Speech(match.group(1), tuple(lines)))
    if not speeches:
        raise ValueError("text holds no speech (a line 'NAME:' followed by the lines spoken)")
    return speeches


def split_speeches(speeches: Sequence[Speech], train_fraction: float = 0.9) -> tuple[list[Speech], list[Speech]]:
    """The first ``train_fraction`` of the speeches, and the rest: the evaluation speeches come from later plays."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must lie strictly between 0 and 1, got {train_fraction!r}")
    n_train = int(train_fraction * len(speeches))
    if not 0 < n_train < len(speeches):
        raise ValueError(f"speeches must be enough for both splits: {len(speeches)} speeches at train_fraction={train_fraction}")
    return list(speeches[:n_train]), list(speeches[n_train:])


def dialogue_lines(speeches: Iterable[Speech]) -> list[str]:
    """Every line of every speech, in order, without the speakers' names: the running text of the dialogue."""
    return [line for speech in speeches for line in speech.lines]


def script_lines(speeches: Iterable[Speech]) -> list[str]:
    """The lines as the plays print them: each speech's heading (``"ROMEO:"``), then the lines spoken."""
    return [line for speech in speeches for line in (f"{speech.speaker}:", *speech.lines)]


# --- the tokenizer -----------------------------------------------------------------------------------------------------


class WordTokenizer:
    """Lower-cased words and punctuation marks, one id each; ids 0 to 4 are ``[PAD] [UNK] [CLS] [SEP] [MASK]``.

    A word outside the vocabulary becomes ``[UNK]``. BERT itself splits rare words into WordPiece subwords (a
    vocabulary of 30,522); whole words keep this chapter's fill-in-the-blank examples readable.

    >>> tok = WordTokenizer(["the", ",", "king"])
    >>> tok.encode("The king, the queen"), tok.decode(tok.encode("The king, the queen"))
    ([5, 7, 6, 5, 1], 'the king, the [UNK]')
    """

    pad_id, unk_id, cls_id, sep_id, mask_id = range(len(SPECIAL_TOKENS))

    def __init__(self, words: Sequence[str]) -> None:
        if isinstance(words, str) or len(words) == 0:
            raise ValueError("words must be a non-empty sequence of words")
        for i, word in enumerate(words):
            if not isinstance(word, str) or WORD_PATTERN.fullmatch(word) is None:
                raise ValueError(f"words must hold lower-case words or single punctuation marks, got {word!r} at index {i}")
        if len(set(words)) != len(words):
            raise ValueError(f"words must not repeat a word, got duplicates {sorted(w for w, n in Counter(words).items() if n > 1)}")
        self.vocab: list[str] = [*SPECIAL_TOKENS, *words]
        self._ids: dict[str, int] = {word: i for i, word in enumerate(self.vocab)}

    @staticmethod
    def split(text: str) -> list[str]:
        """``"Thou art, Romeo!"`` → ``["thou", "art", ",", "romeo", "!"]``."""
        return WORD_PATTERN.findall(text.lower())

    @classmethod
    def from_texts(cls, texts: Iterable[str], *, min_count: int = 1) -> WordTokenizer:
        """The words that occur at least ``min_count`` times in ``texts``, most frequent first (ties alphabetical)."""
        if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
            raise ValueError(f"min_count must be a positive int, got {min_count!r}")
        counts = Counter(word for text in texts for word in cls.split(text))
        words = sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
        if not words:
            raise ValueError(f"texts hold no word that occurs min_count={min_count} times")
        return cls(words)

    @property
    def d_vocab(self) -> int:
        return len(self.vocab)

    @property
    def special_ids(self) -> tuple[int, ...]:
        """The ids MLM never chooses: padding, separators, ``[MASK]`` itself, and ``[UNK]`` (nothing to learn)."""
        return tuple(range(len(SPECIAL_TOKENS)))

    def encode(self, text: str) -> list[int]:
        return [self._ids.get(word, self.unk_id) for word in self.split(text)]

    def decode(self, ids: Sequence[int] | Int[Tensor, " seq"], *, skip_padding: bool = True) -> str:
        """The words joined by spaces, with no space before punctuation; ``[PAD]`` left out unless asked for."""
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.d_vocab:
                raise ValueError(f"ids must be ints in [0, d_vocab={self.d_vocab}), got {i!r}")
        words = [self.vocab[i] for i in ids if not (skip_padding and i == self.pad_id)]
        return _NO_SPACE_BEFORE.sub(r"\1", " ".join(words))

    def __repr__(self) -> str:
        return f"WordTokenizer(d_vocab={self.d_vocab})"


# --- next-sentence prediction ------------------------------------------------------------------------------------------


def nsp_pairs(lines: Sequence[T], generator: torch.Generator) -> list[tuple[T, T, int]]:
    """The pairs ``(A, B, is_random_next)`` of next-sentence prediction: one per line that has a next line.

    For line ``i`` (``i < n - 1``, ``n = len(lines)``) a coin ``torch.rand(n - 1, generator=generator)[i]`` decides:
    below 0.5, B is the line that follows (``lines[i + 1]``, label 0, *IsNext*); otherwise B is a random line (label
    1, *NotNext*), drawn uniformly from the ``n - 2`` lines that are neither A nor its next line: an index
    ``j = torch.randint(n - 2, (n - 1,), generator=generator)[i]`` (drawn after the coins), moved past A and its next
    line when ``j >= i`` (so ``j + 2``). Labels follow Hugging Face's ``BertForPreTraining``: 0 = B follows A.
    """
    if isinstance(lines, (str, bytes)) or not isinstance(lines, Sequence):
        raise ValueError(f"lines must be a sequence (a list of lines), got {type(lines).__name__}")
    if len(lines) < 3:
        raise ValueError(f"lines must hold at least 3 lines (a pair and another line to draw from), got {len(lines)}")
    n = len(lines)
    is_random = (torch.rand(n - 1, generator=generator) >= 0.5).tolist()
    other = torch.randint(n - 2, (n - 1,), generator=generator).tolist()
    pairs = []
    for i, (random_next, j) in enumerate(zip(is_random, other)):
        if random_next:
            pairs.append((lines[i], lines[j + 2 if j >= i else j], 1))
        else:
            pairs.append((lines[i], lines[i + 1], 0))
    return pairs


# --- the fine-tuning task ----------------------------------------------------------------------------------------------


def turn_pairs(speeches: Sequence[Speech]) -> list[tuple[str, str, int]]:
    """Every pair of consecutive lines of the dialogue, ``(A, B, label)``: label 1 when B begins the next speech (A
    ended a turn and someone replies), 0 when B continues A's speech. No speaker's name is shown."""
    pairs = []
    for index, speech in enumerate(speeches):
        pairs += [(a, b, 0) for a, b in zip(speech.lines, speech.lines[1:])]
        if index + 1 < len(speeches):
            pairs.append((speech.lines[-1], speeches[index + 1].lines[0], 1))
    return pairs


def balanced_sample(pairs: Sequence[tuple[T, T, int]], n_per_class: int | None, generator: torch.Generator) -> list[tuple[T, T, int]]:
    """``n_per_class`` pairs of each label (all of the rarer label's when None), drawn without replacement from
    ``generator`` and shuffled together."""
    by_label = {label: [p for p in pairs if p[2] == label] for label in (0, 1)}
    available = min(len(group) for group in by_label.values())
    n = available if n_per_class is None else n_per_class
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= available:
        raise ValueError(f"n_per_class must be an int in [1, {available}] (the rarer label's count) or None, got {n_per_class!r}")
    chosen = [group[i] for group in by_label.values() for i in torch.randperm(len(group), generator=generator)[:n].tolist()]
    return [chosen[i] for i in torch.randperm(len(chosen), generator=generator).tolist()]


# --- encoding pairs ----------------------------------------------------------------------------------------------------


class PairBatch(NamedTuple):
    """A batch of ``[CLS] A [SEP] B [SEP]`` sequences, padded on the right."""

    tokens: Int[Tensor, "batch seq"]
    segments: Int[Tensor, "batch seq"]  # 0 for [CLS], A and the first [SEP]; 1 for B and the last [SEP]
    lengths: Int[Tensor, " batch"]  # real tokens per sequence; the rest is [PAD]


def encode_pair(a: Sequence[int], b: Sequence[int], *, cls_id: int, sep_id: int, n_ctx: int) -> tuple[list[int], list[int]]:
    """``[CLS] a [SEP] b [SEP]`` and its segment ids. When it exceeds ``n_ctx`` tokens, the longer of ``a`` and ``b``
    loses a token until it fits (as BERT's ``truncate_seq_pair``): ``a`` its first, ``b`` its last, so that what
    stays is the text on either side of the boundary between them."""
    if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 5:
        raise ValueError(f"n_ctx must be an int >= 5 ([CLS], [SEP], [SEP] and a token of each segment), got {n_ctx!r}")
    a, b = list(a), list(b)
    while len(a) + len(b) + 3 > n_ctx:
        if len(a) >= len(b):
            a.pop(0)
        else:
            b.pop()
    tokens = [cls_id, *a, sep_id, *b, sep_id]
    segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    return tokens, segments


def collate_pairs(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, cls_id: int, sep_id: int, pad_id: int,
                  n_ctx: int) -> PairBatch:
    """Encode each ``(a, b)`` with :func:`encode_pair` and pad them to the longest."""
    if len(pairs) == 0:
        raise ValueError("pairs must hold at least one pair")
    encoded = [encode_pair(a, b, cls_id=cls_id, sep_id=sep_id, n_ctx=n_ctx) for a, b in pairs]
    seq = max(len(tokens) for tokens, _ in encoded)
    tokens = torch.full((len(encoded), seq), pad_id, dtype=torch.long)
    segments = torch.zeros((len(encoded), seq), dtype=torch.long)
    for row, (ids, segs) in enumerate(encoded):
        tokens[row, : len(ids)] = torch.tensor(ids)
        segments[row, : len(segs)] = torch.tensor(segs)
    lengths = torch.tensor([len(ids) for ids, _ in encoded])
    return PairBatch(tokens, segments, lengths)
