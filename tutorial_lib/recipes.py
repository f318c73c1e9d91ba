"""The reference run of chapter 09: a character-level GPT trained on tiny Shakespeare.

One source for the chapter, its exercises and ``benchmarks/train_char_gpt.py``. The shapes were chosen for speed on
a 2-core CPU: ``d_model`` wide enough that the matrix multiplications run near the machine's peak, a context of
128 characters, and a short warm-up with a high peak learning rate, decayed by a cosine schedule.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Callable, Iterable

import torch

from tutorial_lib.data.shakespeare import CharDataset, default_cache_dir, get_batch
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.training import TrainConfig, TrainHistory, language_model_loss, load_checkpoint, save_checkpoint, train

CHAR_GPT_CONFIG = GPTConfig(d_vocab=65, n_ctx=128, d_model=192, n_heads=6, n_layers=4, fast_attention=True)
CHAR_TRAIN_CONFIG = TrainConfig(
    max_steps=1000, lr=2e-3, min_lr=2e-4, warmup_steps=50, weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0,
    eval_interval=100, eval_batches=8, log_interval=10,
)
CHAR_BATCH_SIZE = 32


def fixed_val_batches(dataset: CharDataset, n_batches: int, batch_size: int, n_ctx: int, seed: int = 1234) -> Callable[[], tuple]:
    """A callable cycling through ``n_batches`` validation batches drawn once: every evaluation sees the same text,
    so successive validation losses are comparable."""
    generator = torch.Generator().manual_seed(seed)
    batches = [get_batch(dataset.val, batch_size, n_ctx, generator) for _ in range(n_batches)]
    cycle = itertools.cycle(batches)
    return lambda: next(cycle)


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
    history = train(
        model,
        lambda: get_batch(dataset.train, batch_size, model_cfg.n_ctx, generator),
        language_model_loss,
        train_cfg,
        device=device,
        val_batches=fixed_val_batches(dataset, train_cfg.eval_batches, batch_size, model_cfg.n_ctx),
        callbacks=callbacks,
        progress=progress,
    )
    return model, history


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
    saved (in the user cache by default). Training is seeded, so both give the same model on the same machine; the
    file name carries a hash of the configurations, so a changed recipe never loads a stale model."""
    recipe = repr((model_cfg, train_cfg, CHAR_BATCH_SIZE)).encode()
    name = f"char_gpt_{hashlib.sha256(recipe).hexdigest()[:12]}.pt"
    path = Path(checkpoint_dir or default_cache_dir()) / name
    model = GPT(model_cfg)
    if path.exists():
        load_checkpoint(path, model)
        return model.to(device).eval()
    model, _ = train_char_gpt(dataset, model_cfg=model_cfg, train_cfg=train_cfg, device=device, progress=progress)
    save_checkpoint(path, model, step=train_cfg.max_steps, config=model_cfg)
    return model.eval()
