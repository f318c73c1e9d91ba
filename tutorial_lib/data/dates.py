"""A generated translation task for the encoder-decoder chapter (07): normalise a date to ISO 8601.

    "3rd of March 1997", "Mar 3, 1997", "03/03/97", "Monday, March 3 1997", "1997-3-3"  ->  "1997-03-03"

It is small enough to learn on a CPU in minutes, yet a real sequence-to-sequence problem: the output is not a
character-by-character copy, month names must become numbers, and the order of the fields moves.

Conventions, so that every source names exactly one date:

* dates lie from 1969-01-01 to 2068-12-31, every calendar date equally likely (so 29 February only in leap
  years); a two-digit year follows POSIX ``strptime``'s ``%y``: 69-99 are 19xx, 00-68 are 20xx;
* numbers with slashes are month first (US: ``03/04/97`` is 4 March), numbers with dots day first
  (``04.03.1997`` is 4 March);
* names are English, in the case each format shows.

One character vocabulary, with ``<pad>``, ``<bos>`` and ``<eos>``, serves source and target alike, so the model
can share its embeddings between encoder, decoder and output layer (§3.4 of the paper).
"""

from __future__ import annotations

import datetime
import random
import re
import string
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from jaxtyping import Int
from torch import Tensor

from tutorial_lib.tokenizers import CharTokenizer

FIRST_DATE = datetime.date(1969, 1, 1)
LAST_DATE = datetime.date(2068, 12, 31)
N_DATES = (LAST_DATE - FIRST_DATE).days + 1  # 36,525 distinct dates

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")  # date.weekday() order


def ordinal(day: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, ..., 21st, 22nd, 23rd, ..., 31st."""
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _month(d: datetime.date) -> str:
    return MONTHS[d.month - 1]


def _weekday(d: datetime.date) -> str:
    return WEEKDAYS[d.weekday()]


# Each human format, by name; the examples are 3 March 1997.
DATE_FORMATS: dict[str, Callable[[datetime.date], str]] = {
    "ordinal of month": lambda d: f"{ordinal(d.day)} of {_month(d)} {d.year}",  # 3rd of March 1997
    "short month": lambda d: f"{_month(d)[:3]} {d.day}, {d.year}",  # Mar 3, 1997
    "long month": lambda d: f"{_month(d)} {d.day}, {d.year}",  # March 3, 1997
    "long month ordinal": lambda d: f"{_month(d)} {ordinal(d.day)}, {d.year}",  # March 3rd, 1997
    "lower case": lambda d: f"{_month(d).lower()} {d.day}, {d.year}",  # march 3, 1997
    "day month": lambda d: f"{d.day} {_month(d)} {d.year}",  # 3 March 1997
    "upper case": lambda d: f"{d.day} {_month(d)[:3].upper()} {d.year}",  # 3 MAR 1997
    "weekday": lambda d: f"{_weekday(d)}, {_month(d)} {d.day} {d.year}",  # Monday, March 3 1997
    "short weekday": lambda d: f"{_weekday(d)[:3]} {d.day} {_month(d)[:3]} {d.year}",  # Mon 3 Mar 1997
    "US short": lambda d: f"{d.month:02}/{d.day:02}/{d.year % 100:02}",  # 03/03/97
    "US long": lambda d: f"{d.month}/{d.day}/{d.year}",  # 3/3/1997
    "European": lambda d: f"{d.day:02}.{d.month:02}.{d.year}",  # 03.03.1997
    "ISO unpadded": lambda d: f"{d.year}-{d.month}-{d.day}",  # 1997-3-3
    "year first": lambda d: f"{d.year}/{d.month:02}/{d.day:02}",  # 1997/03/03
    "day-month-year": lambda d: f"{d.day}-{_month(d)[:3]}-{d.year % 100:02}",  # 3-Mar-97
}


def make_date_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` pairs ``(human date, ISO date)`` of ``n`` *distinct* dates, each in a format drawn at random.

    Deterministic per ``seed`` (Python's ``random.Random``, whose ``sample`` and ``choice`` are stable across
    versions). Because the dates are distinct, any partition of the list shares no date between its parts.
    """
    return [(source, iso) for source, iso, _ in make_labelled_date_pairs(n, seed)]


def make_labelled_date_pairs(n: int, seed: int) -> list[tuple[str, str, str]]:
    """The pairs of :func:`make_date_pairs` (the same, for the same ``n`` and ``seed``), each with the name of
    its format in :data:`DATE_FORMATS`: ``(human date, ISO date, format name)``."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= N_DATES:
        raise ValueError(f"n must be an int in [0, {N_DATES}] (there are {N_DATES} dates in range), got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    rng = random.Random(seed)
    names = list(DATE_FORMATS)
    triples = []
    for offset in rng.sample(range(N_DATES), n):
        date = FIRST_DATE + datetime.timedelta(days=offset)
        name = rng.choice(names)
        triples.append((DATE_FORMATS[name](date), date.isoformat(), name))
    return triples


def field_spans(source: str, iso: str) -> dict[str, tuple[int, int]]:
    """Where the year and, when it is written as a name, the month stand in ``source``: ``{"year": (start, end),
    "month": (start, end)}`` as character slices (``"month"`` only for a name such as "March", "Mar" or "MAR").

    The year is the last occurrence of its four digits, or else of its last two (``03/03/97``, ``3-Mar-97``).
    """
    date = datetime.date.fromisoformat(iso)
    lower = source.lower()
    spans = {}
    year = str(date.year)
    start = lower.rfind(year)
    if start < 0:
        year = year[2:]
        start = lower.rfind(year)
    if start < 0:
        raise ValueError(f"source={source!r} does not write the year of {iso}")
    spans["year"] = (start, start + len(year))
    name = _month(date).lower()
    for candidate in (name, name[:3]):
        start = lower.find(candidate)
        if start >= 0:
            spans["month"] = (start, start + len(candidate))
            break
    return spans


_MONTH_WORD = re.compile(r"\b(" + "|".join(name.lower() for name in MONTHS) + "|"
                         + "|".join(name[:3].lower() for name in MONTHS) + r")\b")
_NUMERIC = re.compile(r"^\s*(\d{1,4})([/.-])(\d{1,2})\2(\d{1,4})\s*$")
_NAMED_NUMBERS = re.compile(r"\d+")


def _full_year(digits: str) -> int:
    """A four-digit year as it is; a two-digit one by POSIX ``%y`` (69-99 are 19xx, 00-68 are 20xx)."""
    year = int(digits)
    return year if len(digits) > 2 else year + (1900 if year >= 69 else 2000)


def _fields(text: str) -> tuple[int, int, int] | None:
    """(year, month, day) as the task's formats write them, or None for a format it does not recognise."""
    numeric = _NUMERIC.match(text)
    if numeric:
        first, separator, middle, last = numeric.groups()
        if len(first) == 4 and separator in "/-":  # 1997/03/03, 1997-3-3
            return int(first), int(middle), int(last) if len(last) <= 2 else -1
        if len(last) not in (2, 4) or len(first) > 2:
            return None
        if separator == "/":  # month first (US)
            return _full_year(last), int(first), int(middle)
        if separator == ".":  # day first (European)
            return _full_year(last), int(middle), int(first)
        return None
    month = _MONTH_WORD.search(text.lower())
    numbers = _NAMED_NUMBERS.findall(text)
    if month is None or len(numbers) != 2 or len(numbers[0]) > 2 or len(numbers[1]) not in (2, 4):
        return None
    return _full_year(numbers[1]), [name.lower()[:3] for name in MONTHS].index(month.group(1)[:3]) + 1, int(numbers[0])


def date_text_problem(text: str) -> str | None:
    """Why a model trained on this task cannot know the ISO form of ``text``, or None when it can.

    Refused: a text with no date in it (no year), an impossible date ("31 February 1997"), a year outside the dates
    the task draws (1969-2068). A text in a format the task does not write, with a year in range, is not refused:
    the model may still read it, and its answer is its guess.
    """
    fields = _fields(text)
    if fields is None:
        years = [int(digits) for digits in re.findall(r"(?<!\d)\d{4}(?!\d)", text)]
        outside = [year for year in years if not FIRST_DATE.year <= year <= LAST_DATE.year]
        if outside:
            return (f"its year {outside[0]} lies outside the dates the model learned "
                    f"({FIRST_DATE.year}-{LAST_DATE.year})")
        if not years:
            return "it names no date the model can read (a day, a month and a year)"
        return None
    year, month, day = fields
    if not FIRST_DATE.year <= year <= LAST_DATE.year:
        return f"its year {year} lies outside the dates the model learned ({FIRST_DATE.year}-{LAST_DATE.year})"
    try:
        datetime.date(year, month, day)
    except ValueError as error:
        return f"it is not a date of the calendar ({error})"
    return None


class DateSplits(NamedTuple):
    train: list[tuple[str, str]]
    val: list[tuple[str, str]]
    test: list[tuple[str, str]]


def make_date_splits(n_train: int, n_val: int, n_test: int, seed: int) -> DateSplits:
    """Train, validation and test pairs with no date in common (so no source string in common either): the
    model is scored on dates it never saw, in any format."""
    for name, value in (("n_train", n_train), ("n_val", n_val), ("n_test", n_test)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    pairs = make_date_pairs(n_train + n_val + n_test, seed)
    return DateSplits(pairs[:n_train], pairs[n_train : n_train + n_val], pairs[n_train + n_val :])


class DateVocab:
    """Characters of every format and of ISO dates, after three special tokens.

    ``<pad>`` (id 0) fills sequences up to the batch's longest; ``<bos>`` (1) starts the decoder's input;
    ``<eos>`` (2) ends the target, so the decoder learns when to stop.
    """

    specials = ("<pad>", "<bos>", "<eos>")
    pad_id, bos_id, eos_id = 0, 1, 2

    def __init__(self) -> None:
        self.chars = CharTokenizer(sorted(string.digits + string.ascii_letters + " ,-./"))
        self.tokens: list[str] = [*self.specials, *self.chars.vocab]

    @property
    def d_vocab(self) -> int:
        return len(self.tokens)

    def encode(self, text: str) -> list[int]:
        """The characters' ids (no special token added)."""
        return [i + len(self.specials) for i in self.chars.encode(text)]

    def decode(self, ids: Sequence[int] | Int[Tensor, " seq"]) -> str:
        """The text up to the first ``<eos>``, skipping ``<pad>`` and ``<bos>`` (what a decoder's output means)."""
        if isinstance(ids, Tensor):
            if ids.ndim != 1:
                raise ValueError(f"ids must be 1-D, got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        text = []
        for position, i in enumerate(ids):
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.d_vocab:
                raise ValueError(f"ids must lie in [0, d_vocab={self.d_vocab}), got {i!r} at position {position}")
            if i == self.eos_id:
                break
            if i >= len(self.specials):
                text.append(self.tokens[i])
        return "".join(text)


class Seq2SeqBatch(NamedTuple):
    """Tensors for teacher forcing: the decoder reads ``tgt_in`` and is trained to output ``tgt_out``."""

    src: Int[Tensor, "batch src_seq"]  # source characters, then <pad>
    src_lengths: Int[Tensor, " batch"]  # real source tokens per row (for the padding mask)
    tgt_in: Int[Tensor, "batch tgt_seq"]  # <bos>, target characters, then <pad>
    tgt_out: Int[Tensor, "batch tgt_seq"]  # target characters, <eos>, then <pad>: tgt_in shifted left by one


def pad_sequences(
    sequences: Sequence[Sequence[int]], pad_id: int, device: torch.device | str | None = None
) -> Int[Tensor, "batch seq"]:
    """Stack sequences of different lengths into one ``(len(sequences), longest)`` tensor, padding on the right."""
    if len(sequences) == 0:
        raise ValueError("sequences must hold at least one sequence")
    if isinstance(pad_id, bool) or not isinstance(pad_id, int) or pad_id < 0:
        raise ValueError(f"pad_id must be a non-negative int, got {pad_id!r}")
    longest = max(len(sequence) for sequence in sequences)
    padded = torch.full((len(sequences), longest), pad_id, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        padded[row, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
    return padded.to(device)


def encode_pairs(
    pairs: Sequence[tuple[str, str]], vocab: DateVocab, device: torch.device | str | None = None
) -> Seq2SeqBatch:
    """Encode ``(source, target)`` pairs into padded tensors for teacher forcing (see :class:`Seq2SeqBatch`)."""
    if len(pairs) == 0:
        raise ValueError("pairs must hold at least one (source, target) pair")
    sources = [vocab.encode(source) for source, _ in pairs]
    targets = [vocab.encode(target) for _, target in pairs]
    if any(len(source) == 0 for source in sources):
        raise ValueError("pairs must not hold an empty source string")
    return Seq2SeqBatch(
        src=pad_sequences(sources, vocab.pad_id, device),
        src_lengths=torch.tensor([len(source) for source in sources], dtype=torch.long, device=device),
        tgt_in=pad_sequences([[vocab.bos_id, *target] for target in targets], vocab.pad_id, device),
        tgt_out=pad_sequences([[*target, vocab.eos_id] for target in targets], vocab.pad_id, device),
    )
