"""Data of the book: tiny Shakespeare (characters for the GPT chapters, speeches and words for chapter 14), and tasks
generated from a seed: date normalisation (chapter 07) and copying (chapter 13)."""

from tutorial_lib.data.copying import copy_accuracy, copy_batch, copy_loss
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
from tutorial_lib.data.dialogue import (
    Speech,
    WordTokenizer,
    nsp_pairs,
    parse_speeches,
    script_lines,
    split_speeches,
    turn_pairs,
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
    "Speech",
    "WordTokenizer",
    "copy_accuracy",
    "copy_batch",
    "copy_loss",
    "default_cache_dir",
    "encode_pairs",
    "get_batch",
    "load_shakespeare_char",
    "load_tiny_shakespeare",
    "make_date_pairs",
    "make_date_splits",
    "nsp_pairs",
    "pad_sequences",
    "parse_speeches",
    "script_lines",
    "split_speeches",
    "train_val_split",
    "turn_pairs",
]
