"""Data of the book: Tiny Shakespeare for the GPT chapters, a generated date-normalisation task for chapter 07."""

from tutorial_lib.data.dates import (
    DATE_FORMATS,
    DateSplits,
    DateVocab,
    Seq2SeqBatch,
    encode_pairs,
    make_date_pairs,
    make_date_splits,
    pad_sequences,
)
from tutorial_lib.data.shakespeare import (
    TINY_SHAKESPEARE_SHA256,
    TINY_SHAKESPEARE_URL,
    CharDataset,
    ChecksumError,
    default_cache_dir,
    get_batch,
    load_shakespeare_char,
    load_tiny_shakespeare,
    train_val_split,
)

__all__ = [
    "DATE_FORMATS",
    "TINY_SHAKESPEARE_SHA256",
    "TINY_SHAKESPEARE_URL",
    "CharDataset",
    "ChecksumError",
    "DateSplits",
    "DateVocab",
    "Seq2SeqBatch",
    "default_cache_dir",
    "encode_pairs",
    "get_batch",
    "load_shakespeare_char",
    "load_tiny_shakespeare",
    "make_date_pairs",
    "make_date_splits",
    "pad_sequences",
    "train_val_split",
]
