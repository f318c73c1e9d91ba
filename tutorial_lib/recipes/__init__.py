"""The trained models the chapters share: each recipe trained once, then read back from the user cache.

======================  ==  ===========================================================================
``cache``               --  a recipe's file name (a hash of its settings), and ``load_or_train``: one process
                            trains under a file lock, any other waits, then loads what it saved
``date_transformer``    07  the encoder-decoder Transformer on date normalisation, checkpoint averaging
``char_gpt``            09  the character-level GPT on tiny Shakespeare; its runs kept with their curves
                            (chapter 12: the GPT and its LLaMA variant)
``ablation``            11  the ablation runner: one component removed per run
``positions``           12  learned, rotary and sinusoidal positions compared; a model at a longer context
``bert``                14  tiny-BERT pre-training and fine-tuning
======================  ==  ===========================================================================

The public names of ``cache``, ``char_gpt``, ``date_transformer`` and ``positions`` are importable from here too
(``from tutorial_lib.recipes import load_or_train_char_gpt``); those of ``ablation`` and ``bert`` from their modules.
The modules import one another directly (``from tutorial_lib.recipes.char_gpt import split_batches``), never through
this package, so that importing it makes no cycle.
"""

from tutorial_lib.recipes.cache import cached_model_path, load_or_train
from tutorial_lib.recipes.char_gpt import (
    CHAR_BATCH_SIZE,
    CHAR_GPT_CONFIG,
    CHAR_LLAMA_CONFIG,
    CHAR_LLAMA_TRAIN_CONFIG,
    CHAR_TRAIN_CONFIG,
    CharGPTRun,
    char_gpt_checkpoint_path,
    char_run_path,
    load_or_train_char_gpt,
    load_or_train_char_run,
    split_batches,
    train_char_gpt,
    val_loss_crossing,
)
from tutorial_lib.recipes.date_transformer import (
    DATE_AVERAGE_INTERVAL,
    DATE_AVERAGE_LAST,
    DATE_BATCH_SIZE,
    DATE_LABEL_SMOOTHING,
    DATE_MAX_LEN,
    DATE_SPLIT_SEED,
    DATE_SPLIT_SIZES,
    DATE_TRAIN_CONFIG,
    DATE_TRANSFORMER_CONFIG,
    DATE_VOCAB,
    CheckpointAverage,
    DecoderBlockWithoutCausalMask,
    date_splits,
    date_transformer_checkpoint_path,
    date_validation_batches,
    exact_match,
    load_or_train_date_transformer,
    normalise_dates,
    remove_decoder_causal_mask,
    seq2seq_loss,
    train_date_transformer,
)
from tutorial_lib.recipes.positions import POSITION_CHANGES, loss_by_position, with_context
