"""Chapter 09's character-level GPT on tiny Shakespeare, the reference model the chapters share (trained once and
cached), and its runs kept with their curves (the GPT's, or its LLaMA variant's, to compare them by their curves).

One source for the chapter, its exercises and ``benchmarks/train_char_gpt.py``. The recipe was chosen by the time it
needs to reach a validation loss of 1.90 on a 2-core CPU. The shape is nanoGPT's CPU "baby GPT" (4 layers, 4 heads,
d_model 128, 64 characters of context), with PyTorch's fused attention and LayerNorm kernels, a batch of 32 windows
instead of 12, a peak learning rate of 4e-3 instead of 1e-3 (50 warm-up updates, cosine decay to a tenth), no
dropout, and ReLU (the paper's FFN) instead of GPT-2's tanh-GELU.

How the settings were chosen (runs of one seed each, a tuning record rather than a comparison the book concludes
from) is in ``benchmarks/README.md``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from tutorial_lib.data.shakespeare import CharDataset, get_batch
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.models.llama import Llama, LlamaConfig
from tutorial_lib.recipes.cache import cached_model_path, load_or_train
from tutorial_lib.training import TrainConfig, TrainHistory, language_model_loss, make_adamw, train

CHAR_GPT_CONFIG = GPTConfig(
    d_vocab=65, n_ctx=64, d_model=128, n_heads=4, n_layers=4, activation="relu", fast_attention=True, fast_norm=True
)
CHAR_TRAIN_CONFIG = TrainConfig(
    max_steps=600, lr=4e-3, min_lr=4e-4, warmup_steps=50, weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0,
    eval_interval=100, log_interval=10,
)
CHAR_BATCH_SIZE = 32
# Seconds an update takes on the CI machine (the 2-core AMD EPYC, where each notebook kernel runs on one thread and
# two notebooks run side by side), evaluations included: the time a cell announces before it trains
# (tutorial_lib.progress). Measured with short runs of each recipe, 2026-11-25.
CI_SECONDS_PER_UPDATE = {"GPT": 0.18, "Llama": 0.21}


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


class CharGPTRun:
    """Chapter 09's reference run, trained in as many parts as one likes: the model (seeded, or ``model``, a GPT or a
    variant such as chapter 12's Llama), its optimizer, the batch generator and the history, kept between the calls of
    :meth:`train_until`. Each call goes on where the last one stopped, so the parts give the model and the history of
    one run bit for bit (chapter 09 trains in two cells of about a minute). ``precision`` is
    :func:`~tutorial_lib.training.train`'s (the chapters and the cache use fp32)."""

    def __init__(
        self,
        dataset: CharDataset,
        *,
        model_cfg: GPTConfig = CHAR_GPT_CONFIG,
        train_cfg: TrainConfig = CHAR_TRAIN_CONFIG,
        batch_size: int = CHAR_BATCH_SIZE,
        device: torch.device | str = "cpu",
        seed: int = 0,
        model: GPT | None = None,
        precision: str = "fp32",
    ) -> None:
        model_cfg = model_cfg if model is None else model.cfg
        if model_cfg.d_vocab != dataset.tokenizer.d_vocab:
            raise ValueError(f"model_cfg.d_vocab={model_cfg.d_vocab} but the dataset has {dataset.tokenizer.d_vocab} characters")
        if model is None:
            torch.manual_seed(seed)
            model = GPT(model_cfg)
        self.model = model.to(device)
        self.dataset, self.batch_size, self.device, self.precision = dataset, batch_size, device, precision
        self.generator = torch.Generator().manual_seed(seed)
        self.val_batches = split_batches(dataset.val, model_cfg.n_ctx)
        # Every evaluation covers the whole validation split, whatever train_cfg.eval_batches says.
        self.train_cfg = dataclasses.replace(train_cfg, eval_batches=len(self.val_batches))
        self.optimizer = make_adamw(self.model, lr=train_cfg.lr, weight_decay=train_cfg.weight_decay, betas=train_cfg.betas)
        self.history = TrainHistory()
        self.updates = 0

    def train_until(self, updates: int | None = None, *, callbacks: Iterable[Callable[[str, dict], None]] = (),
                    progress: bool = True) -> TrainHistory:
        """Train until ``updates`` updates are done (default: all of ``train_cfg.max_steps``); returns the history."""
        updates = self.train_cfg.max_steps if updates is None else updates
        cycle = itertools.cycle(self.val_batches)
        seconds_per_update = CI_SECONDS_PER_UPDATE.get(type(self.model).__name__, CI_SECONDS_PER_UPDATE["GPT"])
        train(
            self.model,
            lambda: get_batch(self.dataset.train, self.batch_size, self.model.cfg.n_ctx, self.generator),
            language_model_loss,
            self.train_cfg,
            device=self.device,
            val_batches=lambda: next(cycle),
            optimizer=self.optimizer,
            callbacks=callbacks,
            progress=progress,
            precision=self.precision,
            expected_seconds=(updates - self.updates) * seconds_per_update,
            start_step=self.updates,
            stop_at=updates,
            history=self.history,
        )
        self.updates = updates
        return self.history


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
    model: GPT | None = None,
    precision: str = "fp32",
) -> tuple[GPT, TrainHistory]:
    """Build a GPT for ``dataset``'s vocabulary and train it in one go (a :class:`CharGPTRun` to the end); returns the
    model and its history."""
    run = CharGPTRun(dataset, model_cfg=model_cfg, train_cfg=train_cfg, batch_size=batch_size, device=device, seed=seed,
                     model=model, precision=precision)
    return run.model, run.train_until(callbacks=callbacks, progress=progress)


def char_gpt_checkpoint_path(
    model_cfg: GPTConfig = CHAR_GPT_CONFIG,
    train_cfg: TrainConfig = CHAR_TRAIN_CONFIG,
    batch_size: int = CHAR_BATCH_SIZE,
    *,
    checkpoint_dir: str | Path | None = None,
) -> Path:
    """Where :func:`load_or_train_char_gpt` keeps the model of this recipe: named after a hash of the configurations."""
    return cached_model_path("char_gpt", (model_cfg, train_cfg, batch_size), checkpoint_dir)


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

    def train_model() -> dict:
        # Trained as a kept run (the same training, its record kept as well), so that chapter 12 finds its curve too.
        trained, _ = load_or_train_char_run(dataset, model_cfg=model_cfg, train_cfg=train_cfg,
                                            checkpoint_dir=checkpoint_dir, device=device, progress=progress)
        # training.save_checkpoint's payload: the weights, the step, the configuration as a plain dict
        config = {k: getattr(v, "value", v) for k, v in dataclasses.asdict(model_cfg).items()}
        return {"model": trained.state_dict(), "step": train_cfg.max_steps, "config": config}

    saved = load_or_train(path, train_model, what="chapter 09's character GPT",
                          expected_seconds=train_cfg.max_steps * CI_SECONDS_PER_UPDATE["GPT"])
    model.load_state_dict(saved["model"], strict=True)
    return model.to(device).eval()


# --- the recipe's runs kept with their curves ----------------------------------------------------------------------
#
# The LLaMA variant of the reference model: the same sizes, RoPE, RMSNorm, SwiGLU (d_ff = 8/3 · 128 rounded up to a
# multiple of 32: 352), no biases, untied head. Chapter 12 counts its parameters and checks it against Hugging Face's
# LlamaForCausalLM; its training comparisons run three seeds at a smaller scale (tutorial_lib.recipes.positions).
# CHAR_LLAMA_TRAIN_CONFIG trains it with the recipe's optimiser and schedule for as many updates as fit in the time of
# the GPT's 600: one LLaMA update cost 1.08, 1.13 and 1.19 times a GPT update in three measurements on the 2-core
# machine (2 threads, the two models timed alternately; 1.13: 97 ms against 86 ms), so 530 updates, with the cosine
# schedule fitted to them.
CHAR_LLAMA_CONFIG = LlamaConfig(
    d_vocab=65, n_ctx=64, d_model=128, n_heads=4, n_layers=4, fast_attention=True, fast_norm=True
)
CHAR_LLAMA_TRAIN_CONFIG = dataclasses.replace(CHAR_TRAIN_CONFIG, max_steps=530)


def char_run_path(
    model_cfg: GPTConfig = CHAR_GPT_CONFIG,
    train_cfg: TrainConfig = CHAR_TRAIN_CONFIG,
    batch_size: int = CHAR_BATCH_SIZE,
    *,
    seed: int = 0,
    checkpoint_dir: str | Path | None = None,
) -> Path:
    """Where :func:`load_or_train_char_run` keeps a run: named after a hash of everything that decides it."""
    return cached_model_path("char_run", (model_cfg, train_cfg, batch_size, seed), checkpoint_dir)


def load_or_train_char_run(
    dataset: CharDataset,
    *,
    model_cfg: GPTConfig = CHAR_GPT_CONFIG,
    train_cfg: TrainConfig = CHAR_TRAIN_CONFIG,
    batch_size: int = CHAR_BATCH_SIZE,
    seed: int = 0,
    checkpoint_dir: str | Path | None = None,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> tuple[GPT, dict]:
    """A run of the character recipe kept with its record, so that runs can be compared by their curves.

    ``model_cfg`` is a :class:`GPTConfig` (a GPT, exactly the model :func:`train_char_gpt` trains) or a
    :class:`LlamaConfig` (a :class:`Llama`). The validation loss is measured on the whole validation split every
    ``train_cfg.eval_interval`` updates. Returns the model and its record: ``history`` (the :class:`TrainHistory` as a
    dict, with the seconds of training at each evaluation) and ``seconds``. Trained once, then read back from the user
    cache, under a name that hashes the settings."""
    path = char_run_path(model_cfg, train_cfg, batch_size, seed=seed, checkpoint_dir=checkpoint_dir)
    build = Llama if isinstance(model_cfg, LlamaConfig) else GPT
    trained = []  # the model, when this call trains it

    def train_run() -> dict:
        torch.manual_seed(seed)
        model, history = train_char_gpt(
            dataset, train_cfg=train_cfg, batch_size=batch_size, device=device, seed=seed, progress=progress,
            model=build(model_cfg),
        )
        trained.append(model)
        record = {"history": dataclasses.asdict(history), "seconds": history.eval_seconds[-1]}
        return {"model": model.state_dict(), "record": record}

    saved = load_or_train(path, train_run, what=f"the character {build.__name__} run of seed {seed}",
                          expected_seconds=train_cfg.max_steps * CI_SECONDS_PER_UPDATE[build.__name__])
    if trained:
        return trained[0].eval(), saved["record"]
    model = build(model_cfg)
    model.load_state_dict(saved["model"], strict=True)
    return model.to(device).eval(), saved["record"]


def val_loss_crossing(record: dict, target: float) -> tuple[float, float] | None:
    """Where a kept run's validation loss first reaches ``target``: ``(update, seconds of training)``, interpolated
    linearly between the last evaluation above it and the first at or below it (the first evaluation itself when it is
    already there); None when the run never gets there."""
    history = record["history"]
    points = list(zip(history["eval_steps"], history["eval_seconds"], history["val_loss"]))
    for index, (step, seconds, loss) in enumerate(points):
        if loss <= target:
            if index == 0:
                return float(step), seconds
            step0, seconds0, loss0 = points[index - 1]
            fraction = (loss0 - target) / (loss0 - loss)
            return step0 + fraction * (step - step0), seconds0 + fraction * (seconds - seconds0)
    return None

