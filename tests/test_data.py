"""The data modules: finding and verifying Tiny Shakespeare, character-level batches, the generated date task."""

from __future__ import annotations

import calendar
import datetime
import hashlib
import io
import os
import random
import re
import shutil
import urllib.error
from pathlib import Path

import pytest
import torch

from tutorial_lib.attention import padding_mask
from tutorial_lib.data import (
    DATE_FORMATS,
    TINY_SHAKESPEARE_URL,
    CharDataset,
    ChecksumError,
    DateVocab,
    default_cache_dir,
    encode_pairs,
    get_batch,
    load_shakespeare_char,
    load_tiny_shakespeare,
    make_date_pairs,
    make_date_splits,
    pad_sequences,
    train_val_split,
)
from tutorial_lib.data.dates import FIRST_DATE, LAST_DATE, N_DATES

SHARED_DATA = Path(os.environ.get("TUTORIAL_LIB_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
REAL_COPY = SHARED_DATA / "tinyshakespeare.txt"
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"  # the course plan's published hash


def no_download(url, timeout):
    raise AssertionError(f"the loader tried to download {url} although a copy was available")


@pytest.fixture(scope="module")
def real_bytes() -> bytes:
    return REAL_COPY.read_bytes()


# ---------------------------------------------------------------------------------------------------------------
# Finding and verifying Tiny Shakespeare
# ---------------------------------------------------------------------------------------------------------------


def test_loads_the_real_copy_from_the_data_dir_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("TUTORIAL_LIB_DATA", str(SHARED_DATA))
    text = load_tiny_shakespeare(cache_dir=tmp_path, opener=no_download)
    content = text.encode("utf-8")
    assert len(content) == 1_115_394
    assert hashlib.sha256(content).hexdigest() == SHA256
    assert text.startswith("First Citizen:\nBefore we proceed any further, hear me speak.")


def test_rejects_a_corrupted_copy_in_the_data_dir(monkeypatch, tmp_path, real_bytes):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    corrupted = real_bytes[:-1] + b"?"
    (data_dir / "tinyshakespeare.txt").write_bytes(corrupted)
    monkeypatch.setenv("TUTORIAL_LIB_DATA", str(data_dir))
    with pytest.raises(ChecksumError) as err:
        load_tiny_shakespeare(cache_dir=tmp_path / "cache", opener=no_download)
    message = str(err.value)
    assert str(data_dir / "tinyshakespeare.txt") in message
    assert hashlib.sha256(corrupted).hexdigest() in message and SHA256 in message


def test_default_cache_dir_honours_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "tutorial_lib"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "tutorial_lib"


def test_loads_from_the_cache_when_no_data_dir_is_set(monkeypatch, tmp_path, real_bytes):
    monkeypatch.delenv("TUTORIAL_LIB_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "tutorial_lib").mkdir()
    shutil.copyfile(REAL_COPY, tmp_path / "tutorial_lib" / "tinyshakespeare.txt")
    assert load_tiny_shakespeare(opener=no_download).encode("utf-8") == real_bytes


def test_a_data_dir_without_the_file_falls_back_to_the_cache(tmp_path, real_bytes):
    (tmp_path / "cache").mkdir()
    shutil.copyfile(REAL_COPY, tmp_path / "cache" / "tinyshakespeare.txt")
    text = load_tiny_shakespeare(data_dir=tmp_path / "empty", cache_dir=tmp_path / "cache", opener=no_download)
    assert text.encode("utf-8") == real_bytes


def test_rejects_a_corrupted_copy_in_the_cache(tmp_path):
    (tmp_path / "tinyshakespeare.txt").write_text("To be, or not to be")
    with pytest.raises(ChecksumError, match=re.escape(str(tmp_path / "tinyshakespeare.txt"))):
        load_tiny_shakespeare(data_dir=tmp_path / "nothing here", cache_dir=tmp_path, opener=no_download)


def test_downloads_from_a_file_url_into_the_cache(tmp_path, real_bytes):
    cache_dir = tmp_path / "new" / "cache"
    text = load_tiny_shakespeare(data_dir=tmp_path, cache_dir=cache_dir, url=REAL_COPY.as_uri())
    assert text.encode("utf-8") == real_bytes
    assert (cache_dir / "tinyshakespeare.txt").read_bytes() == real_bytes
    assert [p.name for p in cache_dir.iterdir()] == ["tinyshakespeare.txt"]  # no temporary file left behind
    # The second call finds the cached copy.
    assert load_tiny_shakespeare(data_dir=tmp_path, cache_dir=cache_dir, opener=no_download) == text


def test_downloads_through_the_opener_with_url_and_timeout(tmp_path, real_bytes):
    calls = []

    def fake_opener(url, timeout):
        calls.append((url, timeout))
        return io.BytesIO(real_bytes)

    text = load_tiny_shakespeare(data_dir=tmp_path, cache_dir=tmp_path / "cache", opener=fake_opener, timeout=7.5)
    assert calls == [(TINY_SHAKESPEARE_URL, 7.5)]
    assert text.encode("utf-8") == real_bytes


def test_rejects_a_wrong_download_and_caches_nothing(tmp_path):
    wrong = b"<html>404: Not Found</html>"
    with pytest.raises(ChecksumError) as err:
        load_tiny_shakespeare(
            data_dir=tmp_path, cache_dir=tmp_path / "cache", opener=lambda url, timeout: io.BytesIO(wrong)
        )
    assert TINY_SHAKESPEARE_URL in str(err.value) and hashlib.sha256(wrong).hexdigest() in str(err.value)
    assert not (tmp_path / "cache" / "tinyshakespeare.txt").exists()


def test_offline_without_a_copy_says_where_it_looked_and_how_to_fix_it(monkeypatch, tmp_path):
    def offline(url, timeout):
        raise urllib.error.URLError("Temporary failure in name resolution")

    monkeypatch.setenv("TUTORIAL_LIB_DATA", str(tmp_path / "data"))
    with pytest.raises(FileNotFoundError) as err:
        load_tiny_shakespeare(cache_dir=tmp_path / "cache", opener=offline)
    message = str(err.value)
    assert str(tmp_path / "data" / "tinyshakespeare.txt") in message  # where it looked
    assert str(tmp_path / "cache" / "tinyshakespeare.txt") in message
    assert "Temporary failure in name resolution" in message  # why the download failed
    assert "set TUTORIAL_LIB_DATA" in message and TINY_SHAKESPEARE_URL in message  # how to fix it


def test_an_unwritable_cache_still_returns_the_text(tmp_path, real_bytes):
    blocker = tmp_path / "a file, not a directory"
    blocker.write_text("")
    with pytest.warns(UserWarning, match="could not cache Tiny Shakespeare"):
        text = load_tiny_shakespeare(data_dir=tmp_path, cache_dir=blocker, url=REAL_COPY.as_uri())
    assert text.encode("utf-8") == real_bytes


# ---------------------------------------------------------------------------------------------------------------
# Character-level language modelling
# ---------------------------------------------------------------------------------------------------------------


def test_shakespeare_char_matches_nanogpt(real_bytes):
    dataset = load_shakespeare_char(data_dir=SHARED_DATA, opener=no_download)
    # nanoGPT's data/shakespeare_char/prepare.py prints these three numbers.
    assert dataset.tokenizer.d_vocab == 65
    assert (len(dataset.train), len(dataset.val)) == (1_003_854, 111_540)
    assert dataset.train.dtype == dataset.val.dtype == torch.long
    text = real_bytes.decode("utf-8")
    assert dataset.tokenizer.decode(dataset.val) == text[1_003_854:]
    assert dataset.tokenizer.decode(dataset.train[:1000]) == text[:1000]


def test_char_dataset_split_fraction():
    dataset = CharDataset.from_text("abcdefghij" * 10, train_fraction=0.75)
    assert (len(dataset.train), len(dataset.val)) == (75, 25)
    assert dataset.tokenizer.decode(torch.cat([dataset.train, dataset.val])) == "abcdefghij" * 10


@pytest.mark.parametrize("text", ["abcdefghij" * 10, "Ça va? Ünïcödé, 東京 and 🙂 too: ÇÇ🙂 " * 5, "x\ny\tz" * 7])
def test_char_dataset_ids_are_the_tokenizers(text):
    # from_text encodes the whole text at once (ranks of code points); the tokenizer's encode, character by character,
    # is the definition.
    dataset = CharDataset.from_text(text, train_fraction=0.5)
    assert torch.equal(torch.cat([dataset.train, dataset.val]), torch.tensor(dataset.tokenizer.encode(text)))


@pytest.mark.parametrize(
    ("n_tokens", "fraction", "message"),
    [(100, 1.0, "train_fraction must lie strictly between 0 and 1"), (100, 0.0, "train_fraction must lie"),
     (5, 0.1, "data must be long enough for both splits"), (0, 0.5, "data must be long enough")],
)
def test_train_val_split_rejects_bad_arguments(n_tokens, fraction, message):
    with pytest.raises(ValueError, match=message):
        train_val_split(torch.arange(n_tokens), fraction)


def test_get_batch_windows_and_targets_shifted_by_one():
    data = torch.arange(1000)  # token i at position i: a window's first token is its offset
    x, y = get_batch(data, batch_size=16, n_ctx=32, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (16, 32) and x.dtype == y.dtype == torch.long
    starts = x[:, :1]
    assert torch.equal(x, starts + torch.arange(32))  # contiguous windows of the data
    assert torch.equal(y, x + 1)  # y is x one token later, its last token the one after the window
    assert 0 <= starts.min() and starts.max() <= 1000 - 33


def test_get_batch_reaches_every_offset_and_no_further():
    data = torch.arange(10)
    x, y = get_batch(data, batch_size=2000, n_ctx=3, generator=torch.Generator().manual_seed(1))
    assert set(x[:, 0].tolist()) == set(range(7))  # windows of 3 + 1 tokens start at 0..6
    x, y = get_batch(data, batch_size=4, n_ctx=9, generator=torch.Generator().manual_seed(1))
    assert torch.equal(x, data[:-1].expand(4, 9)) and torch.equal(y, data[1:].expand(4, 9))


def test_get_batch_is_deterministic_per_generator():
    data = torch.randint(65, (5000,), generator=torch.Generator().manual_seed(0))

    def batch(seed):
        return get_batch(data, 8, 64, torch.Generator().manual_seed(seed), device="cpu")

    assert all(torch.equal(a, b) for a, b in zip(batch(3), batch(3)))
    assert not torch.equal(batch(3)[0], batch(4)[0])
    generator = torch.Generator().manual_seed(3)
    first, second = get_batch(data, 8, 64, generator), get_batch(data, 8, 64, generator)
    assert not torch.equal(first[0], second[0])  # the generator advances between batches


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"n_ctx": 100}, r"n_ctx must be less than len\(data\)=100"), ({"n_ctx": 0}, "n_ctx must be a positive int"),
     ({"batch_size": 0}, "batch_size must be a positive int")],
)
def test_get_batch_rejects_bad_arguments(kwargs, message):
    arguments = {"data": torch.arange(100), "batch_size": 2, "n_ctx": 8, "generator": torch.Generator()} | kwargs
    with pytest.raises(ValueError, match=message):
        get_batch(**arguments)


# ---------------------------------------------------------------------------------------------------------------
# The date task
# ---------------------------------------------------------------------------------------------------------------

# The same formats in `strptime`'s language (after ordinal suffixes are removed): an independent reading.
STRPTIME_FORMATS = ["%d of %B %Y", "%b %d, %Y", "%B %d, %Y", "%d %B %Y", "%d %b %Y", "%A, %B %d %Y", "%a %d %b %Y",
                    "%m/%d/%y", "%m/%d/%Y", "%d.%m.%Y", "%Y-%m-%d", "%Y/%m/%d", "%d-%b-%y"]


def read_date(source: str) -> datetime.date:
    """The one date that every matching strptime format reads in ``source``."""
    plain = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", source)
    readings = set()
    for fmt in STRPTIME_FORMATS:
        try:
            readings.add(datetime.datetime.strptime(plain, fmt).date())
        except ValueError:
            continue
    assert len(readings) == 1, f"{source!r} reads as {readings}"
    return readings.pop()


def test_every_format_names_its_date():
    rng = random.Random(0)
    edge_cases = [FIRST_DATE, LAST_DATE, datetime.date(2000, 2, 29), datetime.date(1999, 12, 31),
                  datetime.date(2000, 1, 1)]
    dates = edge_cases + [FIRST_DATE + datetime.timedelta(days=rng.randrange(N_DATES)) for _ in range(200)]
    for name, render in DATE_FORMATS.items():
        for date in dates:
            source = render(date)
            assert read_date(source) == date, f"format {name!r}: {source!r}"
            # strptime does not check a weekday against the date; check it here.
            assert {day for day in calendar.day_abbr if day in source} <= {calendar.day_abbr[date.weekday()]}


def test_date_pairs_are_valid():
    pairs = make_date_pairs(2000, seed=0)
    assert len(pairs) == 2000
    for source, target in pairs:
        date = datetime.date.fromisoformat(target)
        assert target == f"{date.year:04}-{date.month:02}-{date.day:02}"
        assert FIRST_DATE <= date <= LAST_DATE
        assert read_date(source) == date
    assert len({target for _, target in pairs}) == 2000  # distinct dates
    assert len({target[:4] for _, target in pairs}) > 90  # the whole range of years is used


def test_date_pairs_use_every_format():
    pairs = make_date_pairs(1000, seed=1)
    used = {
        name
        for source, target in pairs
        for name, render in DATE_FORMATS.items()
        if render(datetime.date.fromisoformat(target)) == source
    }
    assert used == set(DATE_FORMATS)


def test_date_pairs_are_deterministic_per_seed():
    assert make_date_pairs(300, seed=7) == make_date_pairs(300, seed=7)
    assert make_date_pairs(300, seed=7) != make_date_pairs(300, seed=8)


@pytest.mark.parametrize(("n", "seed", "message"), [(-1, 0, "n must be an int in"), (N_DATES + 1, 0, "n must be"),
                                                    (5, -3, "seed must be a non-negative int")])
def test_make_date_pairs_rejects_bad_arguments(n, seed, message):
    with pytest.raises(ValueError, match=message):
        make_date_pairs(n, seed)


def test_date_splits_share_no_date():
    splits = make_date_splits(3000, 500, 500, seed=0)
    assert tuple(map(len, splits)) == (3000, 500, 500)
    dates = [{target for _, target in split} for split in splits]
    sources = [{source for source, _ in split} for split in splits]
    for i in range(3):
        for j in range(i + 1, 3):
            assert not dates[i] & dates[j] and not sources[i] & sources[j]
    assert make_date_splits(3000, 500, 500, seed=0) == splits
    with pytest.raises(ValueError, match="n_val must be a non-negative int"):
        make_date_splits(10, -1, 10, seed=0)


def test_date_vocab_encodes_every_source_and_decodes_to_the_first_eos():
    vocab = DateVocab()
    assert vocab.tokens[:3] == ["<pad>", "<bos>", "<eos>"]
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2)
    assert vocab.d_vocab == len(set(vocab.tokens))
    for source, target in make_date_pairs(500, seed=2):
        for text in (source, target):
            ids = vocab.encode(text)
            assert min(ids) >= 3
            assert vocab.decode(ids) == text
            assert vocab.decode([vocab.bos_id, *ids, vocab.eos_id, *ids, vocab.pad_id]) == text
    with pytest.raises(ValueError, match="text holds '#' at position 2"):
        vocab.encode("12#")
    with pytest.raises(ValueError, match=r"ids must lie in \[0, d_vocab="):
        vocab.decode(torch.tensor([5, vocab.d_vocab]))


def test_encode_pairs_pads_for_teacher_forcing():
    vocab = DateVocab()
    pairs = [("3 MAR 1997", "1997-03-03"), ("Monday, March 3 1997", "1997-3"), ("1/2/1970", "")]
    batch = encode_pairs(pairs, vocab)
    src, src_lengths, tgt_in, tgt_out = batch  # unpacks as a 4-tuple
    assert src.shape == (3, 20) and tgt_in.shape == tgt_out.shape == (3, 11)
    assert src_lengths.tolist() == [10, 20, 8]
    for row, (source, target) in enumerate(pairs):
        n_src, n_tgt = len(source), len(target)
        assert vocab.decode(src[row, :n_src]) == source
        assert (src[row, n_src:] == vocab.pad_id).all()
        assert tgt_in[row, 0] == vocab.bos_id and tgt_out[row, n_tgt] == vocab.eos_id
        assert torch.equal(tgt_in[row, 1 : n_tgt + 1], tgt_out[row, :n_tgt])  # shifted by one
        assert vocab.decode(tgt_out[row]) == target
        assert (tgt_in[row, n_tgt + 1 :] == vocab.pad_id).all() and (tgt_out[row, n_tgt + 1 :] == vocab.pad_id).all()
    # src_lengths is what the padding mask of chapter 03 expects.
    assert torch.equal(padding_mask(src_lengths, src.shape[1])[:, 0], src != vocab.pad_id)


def test_pad_sequences():
    padded = pad_sequences([[5, 6, 7], [], [8]], pad_id=0)
    assert padded.tolist() == [[5, 6, 7], [0, 0, 0], [8, 0, 0]] and padded.dtype == torch.long
    with pytest.raises(ValueError, match="sequences must hold at least one sequence"):
        pad_sequences([], pad_id=0)
    with pytest.raises(ValueError, match="pad_id must be a non-negative int"):
        pad_sequences([[1]], pad_id=-1)
    with pytest.raises(ValueError, match="pairs must not hold an empty source string"):
        encode_pairs([("", "1997-03-03")], DateVocab())
