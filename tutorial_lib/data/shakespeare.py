"""Tiny Shakespeare and the character-level language-modelling data of the GPT chapters (08-11).

The corpus is Karpathy's ``tinyshakespeare/input.txt`` from the char-rnn repository: 1,115,394 bytes of plays.
:func:`load_tiny_shakespeare` finds a verified copy or downloads one; :class:`CharDataset` splits and encodes it as
nanoGPT's ``shakespeare_char`` does; :func:`get_batch` draws training windows from it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.request
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from jaxtyping import Int
from torch import Tensor

from tutorial_lib.tokenizers import CharTokenizer

TINY_SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TINY_SHAKESPEARE_FILENAME = "tinyshakespeare.txt"
DATA_DIR_ENV = "TUTORIAL_LIB_DATA"


class ChecksumError(RuntimeError):
    """A copy of a data file is not the expected file (truncated, edited, or another file by that name)."""


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/tutorial_lib``, or ``~/.cache/tutorial_lib`` when ``XDG_CACHE_HOME`` is unset."""
    cache_home = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache_home) / "tutorial_lib"


def load_tiny_shakespeare(
    *,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    url: str = TINY_SHAKESPEARE_URL,
    opener: Callable = urllib.request.urlopen,
    timeout: float = 30.0,
) -> str:
    """The text of Tiny Shakespeare, from the first of these that has it, each copy checked against its sha256:

    1. ``data_dir`` (default: the directory named by the environment variable ``TUTORIAL_LIB_DATA``),
    2. ``cache_dir`` (default: :func:`default_cache_dir`),
    3. a download of ``url`` with ``opener(url, timeout=timeout)``, saved into ``cache_dir``.

    A copy with the wrong hash raises :class:`ChecksumError` (it is never silently replaced). With no copy and no
    download, raises ``FileNotFoundError`` saying where it looked, why the download failed and how to fix it.
    """
    if data_dir is None and os.environ.get(DATA_DIR_ENV):
        data_dir = os.environ[DATA_DIR_ENV]
    cache_path = Path(cache_dir if cache_dir is not None else default_cache_dir()) / TINY_SHAKESPEARE_FILENAME
    looked_in = []
    for path in ([Path(data_dir) / TINY_SHAKESPEARE_FILENAME] if data_dir is not None else []) + [cache_path]:
        looked_in.append(str(path))
        if path.is_file():
            content = path.read_bytes()
            _verify(content, str(path))
            return content.decode("utf-8")

    try:
        with opener(url, timeout=timeout) as response:
            content = response.read()
    except (OSError, ValueError) as err:  # URLError, timeouts and refused connections are OSErrors
        raise FileNotFoundError(
            f"Tiny Shakespeare was not found and could not be downloaded.\n"
            f"  looked in: {', '.join(looked_in)}\n"
            f"  download of {url} failed: {err!r}\n"
            f"Fix: set {DATA_DIR_ENV} to a directory holding {TINY_SHAKESPEARE_FILENAME}, or download {url} by hand "
            f"and save it as {cache_path}."
        ) from err
    _verify(content, url)
    _save(content, cache_path)
    return content.decode("utf-8")


def _verify(content: bytes, source: str) -> None:
    digest = hashlib.sha256(content).hexdigest()
    if digest != TINY_SHAKESPEARE_SHA256:
        raise ChecksumError(
            f"{source} is not Tiny Shakespeare: sha256 {digest} ({len(content):,} bytes), expected "
            f"{TINY_SHAKESPEARE_SHA256} (1,115,394 bytes). Replace or delete it."
        )


def _save(content: bytes, path: Path) -> None:
    """Write through a temporary file and rename, so an interrupted write never leaves a partial copy behind."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, suffix=".part", delete=False) as tmp:
            tmp.write(content)
        os.replace(tmp.name, path)
    except OSError as err:  # a read-only home still gets the text, only without the cache
        warnings.warn(f"could not cache Tiny Shakespeare at {path}: {err}", stacklevel=3)


# ---------------------------------------------------------------------------------------------------------------
# Character-level language modelling
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CharDataset:
    """A text encoded character by character and split in two: the first ``train_fraction`` trains, the rest
    validates (nanoGPT's ``shakespeare_char``: 90/10, so the validation text is unseen plays, not a random sample).

    The vocabulary comes from the whole text, so the validation split holds no unknown character.
    """

    tokenizer: CharTokenizer
    train: Int[Tensor, " n_train"]
    val: Int[Tensor, " n_val"]

    @classmethod
    def from_text(cls, text: str, train_fraction: float = 0.9) -> CharDataset:
        tokenizer = CharTokenizer.from_text(text)
        # tokenizer.encode(text) in one step: the vocabulary is the text's characters sorted by code point, so a
        # character's id is the rank of its code point among them (a million characters in 30 ms instead of 240 ms,
        # which every recipe that loads the corpus pays).
        codes = torch.frombuffer(bytearray(text.encode("utf-32-le")), dtype=torch.int32)
        points = torch.tensor([ord(char) for char in tokenizer.vocab], dtype=torch.int32)
        train, val = train_val_split(torch.searchsorted(points, codes).long(), train_fraction)
        return cls(tokenizer, train, val)


def load_shakespeare_char(train_fraction: float = 0.9, **load_kwargs) -> CharDataset:
    """Tiny Shakespeare as a :class:`CharDataset` (65 characters; 1,003,854 train and 111,540 val tokens at 0.9).

    ``load_kwargs`` go to :func:`load_tiny_shakespeare`.
    """
    return CharDataset.from_text(load_tiny_shakespeare(**load_kwargs), train_fraction)


def train_val_split(
    data: Int[Tensor, " n_tokens"], train_fraction: float = 0.9
) -> tuple[Int[Tensor, " n_train"], Int[Tensor, " n_val"]]:
    """The first ``int(train_fraction * len(data))`` tokens, and the rest. Both parts must be non-empty."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must lie strictly between 0 and 1, got {train_fraction!r}")
    n_train = int(train_fraction * len(data))
    if n_train == 0:  # the validation part is then non-empty too, as train_fraction < 1
        raise ValueError(
            f"data must be long enough for both splits: train_fraction={train_fraction} of {len(data)} tokens "
            f"leaves {n_train} for training and {len(data) - n_train} for validation"
        )
    return data[:n_train], data[n_train:]


def get_batch(
    data: Int[Tensor, " n_tokens"],
    batch_size: int,
    n_ctx: int,
    generator: torch.Generator,
    device: torch.device | str | None = None,
) -> tuple[Int[Tensor, "batch seq"], Int[Tensor, "batch seq"]]:
    """``batch_size`` windows of ``n_ctx`` tokens at random offsets, and the same windows one token later.

    ``y[b, t] = x[b, t + 1]`` for ``t < n_ctx - 1``, and ``y[b, -1]`` is the token after the window: position
    ``t`` learns to predict token ``t + 1``. Offsets come from ``generator`` only, so a generator seeded the same
    gives the same batches. Returned on ``device`` (default: the device of ``data``).
    """
    for name, value in (("batch_size", batch_size), ("n_ctx", n_ctx)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if data.ndim != 1 or data.dtype.is_floating_point or data.dtype == torch.bool:
        raise ValueError(f"data must be a 1-D integer tensor of token ids, got shape {tuple(data.shape)} {data.dtype}")
    if n_ctx >= len(data):
        raise ValueError(f"n_ctx must be less than len(data)={len(data)} (a window needs one more token), got {n_ctx}")
    # Any start from 0 to len(data) - n_ctx - 1 leaves room for the n_ctx + 1 tokens that x and y span.
    starts = torch.randint(len(data) - n_ctx, (batch_size,), generator=generator, device=generator.device)
    windows = data[starts.to(data.device)[:, None] + torch.arange(n_ctx + 1, device=data.device)]
    x, y = windows[:, :-1], windows[:, 1:]
    if device is not None:
        x, y = x.to(device), y.to(device)
    return x, y
