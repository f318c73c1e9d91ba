"""The reference run of chapter 09: a character-level GPT trained on tiny Shakespeare.

One source for the chapter, its exercises and ``benchmarks/train_char_gpt.py``. The recipe was chosen by the time it
needs to reach a validation loss of 1.90 on a 2-core CPU. The shape is nanoGPT's CPU "baby GPT" (4 layers, 4 heads,
d_model 128, 64 characters of context), with PyTorch's fused attention and LayerNorm kernels, a batch of 32 windows
instead of 12, a peak learning rate of 4e-3 instead of 1e-3 (50 warm-up updates, cosine decay to a tenth), no
dropout, and ReLU (the paper's FFN) instead of GPT-2's tanh-GELU.

Measured on the 2-core machine (2 threads). One update: 87 ms with the from-scratch LayerNorm, 76 ms with the fused
one, 66 ms with ReLU as well. Validation loss after 500 / 600 updates of a 600-update run:

* the recipe: 1.894 / 1.855; the same with tanh-GELU: 1.929 / 1.893;
* ReLU with peak lr 6e-3: 1.901 / 1.857; decay to 0: 1.900 / 1.880; beta2 0.95: 1.913 / 1.874;
* 24 windows per batch, 750 updates: 1.895 after 600, 1.857 at the end (the same time as the recipe);
* tanh-GELU, for about 45 s of training each: 32 windows at lr 3e-3, 550 updates: 1.953; 48 windows, lr 4e-3,
  400 updates: 1.955; 64 windows, lr 5e-3, 320 updates: 1.969.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from tutorial_lib.data.shakespeare import CharDataset, default_cache_dir, get_batch
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.training import (
    TrainConfig,
    TrainHistory,
    language_model_loss,
    load_checkpoint,
    save_checkpoint,
    train,
)

CHAR_GPT_CONFIG = GPTConfig(
    d_vocab=65, n_ctx=64, d_model=128, n_heads=4, n_layers=4, activation="relu", fast_attention=True, fast_norm=True
)
CHAR_TRAIN_CONFIG = TrainConfig(
    max_steps=600, lr=4e-3, min_lr=4e-4, warmup_steps=50, weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0,
    eval_interval=100, log_interval=10,
)
CHAR_BATCH_SIZE = 32


def split_batches(data: torch.Tensor, n_ctx: int, batch_size: int = 128) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The whole of ``data`` cut into consecutive, non-overlapping windows of ``n_ctx`` tokens (and their targets), in
    equal batches of ``batch_size`` windows; the remainder that does not fill a batch is dropped (under 5% of tiny
    Shakespeare's validation split at n_ctx = 64). Evaluating on all of them gives the split's loss, not an estimate
    from random windows, and the same number at every evaluation."""
    n_windows = (len(data) - 1) // n_ctx // batch_size * batch_size
    if n_windows == 0:
        raise ValueError(f"data of {len(data)} tokens holds no batch of {batch_size} windows of n_ctx={n_ctx}")
    x = data[: n_windows * n_ctx].view(n_windows, n_ctx)
    y = data[1 : n_windows * n_ctx + 1].view(n_windows, n_ctx)
    return list(zip(x.split(batch_size), y.split(batch_size)))


def train_char_gpt(
    dataset: CharDataset,
    *,
    model_cfg: GPTConfig = CHAR_GPT_CONFIG,
    train_cfg: TrainConfig = CHAR_TRAIN_CONFIG,
    batch_size: int = CHAR_BATCH_SIZE,
    device: torch.device | str = "cpu",
    seed: int = 0,
    callbacks: Iterable[Callable[[str, dict], None]] = (),
    progress: bool = True,
) -> tuple[GPT, TrainHistory]:
    """Build a GPT for ``dataset``'s vocabulary and train it; returns the model and its history."""
    if model_cfg.d_vocab != dataset.tokenizer.d_vocab:
        raise ValueError(f"model_cfg.d_vocab={model_cfg.d_vocab} but the dataset has {dataset.tokenizer.d_vocab} characters")
    torch.manual_seed(seed)
    model = GPT(model_cfg).to(device)
    generator = torch.Generator().manual_seed(seed)
    val_batches = split_batches(dataset.val, model_cfg.n_ctx)
    cycle = itertools.cycle(val_batches)
    # Every evaluation covers the whole validation split, whatever train_cfg.eval_batches says.
    train_cfg = dataclasses.replace(train_cfg, eval_batches=len(val_batches))
    history = train(
        model,
        lambda: get_batch(dataset.train, batch_size, model_cfg.n_ctx, generator),
        language_model_loss,
        train_cfg,
        device=device,
        val_batches=lambda: next(cycle),
        callbacks=callbacks,
        progress=progress,
    )
    return model, history


def char_gpt_checkpoint_path(
    model_cfg: GPTConfig = CHAR_GPT_CONFIG,
    train_cfg: TrainConfig = CHAR_TRAIN_CONFIG,
    batch_size: int = CHAR_BATCH_SIZE,
    *,
    checkpoint_dir: str | Path | None = None,
) -> Path:
    """Where :func:`load_or_train_char_gpt` keeps the model of this recipe: named after a hash of the configurations."""
    recipe = repr((model_cfg, train_cfg, batch_size)).encode()
    return Path(checkpoint_dir or default_cache_dir()) / f"char_gpt_{hashlib.sha256(recipe).hexdigest()[:12]}.pt"


def load_or_train_char_gpt(
    dataset: CharDataset,
    *,
    model_cfg: GPTConfig = CHAR_GPT_CONFIG,
    train_cfg: TrainConfig = CHAR_TRAIN_CONFIG,
    checkpoint_dir: str | Path | None = None,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> GPT:
    """The reference model, trained as by :func:`train_char_gpt`, or loaded from the checkpoint an earlier call
    saved (in the user cache by default). Training is seeded: on one CPU thread both give the same model bit for
    bit (on two threads runs drift apart by ~1e-5). The file name carries a hash of the configurations, so a
    changed recipe never loads a stale model."""
    path = char_gpt_checkpoint_path(model_cfg, train_cfg, checkpoint_dir=checkpoint_dir)
    model = GPT(model_cfg)
    if path.exists():
        load_checkpoint(path, model)
        return model.to(device).eval()
    model, _ = train_char_gpt(dataset, model_cfg=model_cfg, train_cfg=train_cfg, device=device, progress=progress)
    save_checkpoint(path, model, step=train_cfg.max_steps, config=model_cfg)
    return model.eval()
