"""The reference runs the chapters share, trained once and cached: chapter 09's character-level GPT on tiny
Shakespeare, and (at the end of the module) chapter 07's encoder-decoder Transformer on date normalisation.

The character GPT.

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

import collections
import dataclasses
import hashlib
import itertools
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch

from tutorial_lib.ablation import CHANGES, Change
from tutorial_lib.attention import sliding_window_mask
from tutorial_lib.blocks import DecoderBlock
from tutorial_lib.data.dates import DateSplits, DateVocab, Seq2SeqBatch, encode_pairs, make_date_splits, pad_sequences
from tutorial_lib.data.shakespeare import CharDataset, default_cache_dir, get_batch
from tutorial_lib.decoding import beam_search_batch, greedy_decode, transformer_batch_log_probs_fn
from tutorial_lib.embeddings import LearnedPositionalEmbedding, check_sequence_fits
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.models.llama import Llama, LlamaConfig, RotaryGPT, SinusoidalGPT
from tutorial_lib.models.transformer import Transformer, TransformerConfig
from tutorial_lib.training import (
    TrainConfig,
    TrainHistory,
    evaluate,
    label_smoothing_loss,
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
    model: GPT | None = None,
) -> tuple[GPT, TrainHistory]:
    """Build a GPT for ``dataset``'s vocabulary and train it; returns the model and its history. A ``model`` passed in
    (a GPT or a variant such as chapter 12's Llama, built by the caller) is trained instead, on the same batches."""
    model_cfg = model_cfg if model is None else model.cfg
    if model_cfg.d_vocab != dataset.tokenizer.d_vocab:
        raise ValueError(f"model_cfg.d_vocab={model_cfg.d_vocab} but the dataset has {dataset.tokenizer.d_vocab} characters")
    if model is None:
        torch.manual_seed(seed)
        model = GPT(model_cfg)
    model = model.to(device)
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


def cached_model_path(kind: str, settings: tuple, checkpoint_dir: str | Path | None = None) -> Path:
    """``<checkpoint_dir or the user cache>/<kind>_<hash>.pt``, the hash of ``repr(settings)``: a recipe whose settings
    change never loads a stale model. Every ``load_or_train_*`` of the package names its file this way."""
    digest = hashlib.sha256(repr(settings).encode()).hexdigest()[:12]
    return Path(checkpoint_dir or default_cache_dir()) / f"{kind}_{digest}.pt"


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
    if path.exists():
        load_checkpoint(path, model)
        return model.to(device).eval()
    # Trained as a kept run (the same training, its record kept as well), so that chapter 12 finds its curve too.
    model, _ = load_or_train_char_run(dataset, model_cfg=model_cfg, train_cfg=train_cfg, checkpoint_dir=checkpoint_dir,
                                      device=device, progress=progress)
    save_checkpoint(path, model, step=train_cfg.max_steps, config=model_cfg)
    return model.eval()


# --- chapter 12: the recipe's runs kept with their curves; positions compared at the ablation scale ----------------
#
# The LLaMA variant of the reference model: the same sizes, RoPE, RMSNorm, SwiGLU (d_ff = 8/3 · 128 rounded up to a
# multiple of 32: 352), no biases, untied head. Trained with the recipe's optimiser and schedule for as many updates
# as fit in the time of the GPT's 600. One LLaMA update cost 1.08, 1.13 and 1.19 times a GPT update in three
# measurements on the 2-core machine (2 threads, the two models timed alternately; 1.13: 97 ms against 86 ms), so
# 530 updates, with the cosine schedule fitted to them. Chapter 12 measures the ratio again when it runs.
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
    if path.exists():
        saved = torch.load(path, map_location="cpu", weights_only=True)
        model = build(model_cfg)
        model.load_state_dict(saved["model"], strict=True)
        return model.to(device).eval(), saved["record"]
    torch.manual_seed(seed)
    model, history = train_char_gpt(
        dataset, train_cfg=train_cfg, batch_size=batch_size, device=device, seed=seed, progress=progress,
        model=build(model_cfg),
    )
    record = {"history": dataclasses.asdict(history), "seconds": history.eval_seconds[-1]}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict(), "record": record}, path)
    return model.eval(), record


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


POSITION_CHANGES = {  # chapter 12's comparison of positions, at the ablation runner's scale (n_ctx = 32)
    "learned": CHANGES["baseline"],
    "rope": Change("rope", "RoPE in every attention layer instead of learned positions", build=RotaryGPT),
    "sinusoidal": Change("sinusoidal", "the paper's sinusoidal encoding (tokens × √d_model) instead of learned positions",
                         build=SinusoidalGPT),
}


def with_context(model: GPT, n_ctx: int) -> GPT:
    """The same weights in a model built for ``n_ctx`` positions (evaluation beyond the training length).

    RoPE's and the sinusoidal encoding's tables are functions of the position, rebuilt for any ``n_ctx``; a learned
    position table has a row per trained position only, so a GPT with learned positions cannot be extended: that is a
    ``ValueError``."""
    if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 1:
        raise ValueError(f"n_ctx must be a positive int, got {n_ctx!r}")
    table = model.pos_embed.weight if isinstance(model.pos_embed, LearnedPositionalEmbedding) else None
    if table is not None and n_ctx > table.shape[0]:
        raise ValueError(f"n_ctx={n_ctx} exceeds the learned position table of {table.shape[0]} rows: positions "
                         f"{table.shape[0]} and beyond have no embedding to look up")
    extended = type(model)(model.cfg.replace(n_ctx=n_ctx))
    extended.load_state_dict(model.state_dict() if table is None else {**model.state_dict(), "pos_embed.weight": table[:n_ctx]},
                             strict=True)
    return extended.to(next(model.parameters()).device).eval()


@torch.no_grad()
def loss_by_position(
    model: GPT, data: torch.Tensor, seq_len: int, *, window: int | None = None, batch_size: int = 64
) -> torch.Tensor:
    """The mean next-token loss at each position ``0 .. seq_len - 1`` over ``data`` cut into consecutive windows
    (:func:`split_batches`). ``window`` restricts attention to the last ``window`` keys (a sliding window): positions
    beyond it are still computed, but no query sees a key more than ``window - 1`` positions back."""
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"window must be a positive int or None, got {window!r}")
    check_sequence_fits(seq_len, model.cfg.n_ctx)
    mask = None if window is None else sliding_window_mask(seq_len, window)
    total, count = torch.zeros(seq_len, dtype=torch.float64), 0
    was_training = model.training
    model.eval()
    for x, y in split_batches(data, seq_len, batch_size):
        h = model.embed(x)
        if model.pos_embed is not None:
            h = h + model.pos_embed(seq_len)
        for block in model.blocks:
            h = block(h, mask=mask, causal=mask is None)
        logits = model.unembed(model.ln_final(h))
        losses = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none")
        total += losses.view(x.shape).sum(dim=0).double()
        count += x.shape[0]
    model.train(was_training)
    return (total / count).float()


# --- chapter 07: the paper's encoder-decoder Transformer, on date normalisation ----------------------------------------
#
# The task of ``tutorial_lib.data.dates``: "3rd of March 1997" -> "1997-03-03". Every one of the 36,525 dates lies in
# exactly one split, so the test dates are dates the model never saw, in any format.

DATE_SPLIT_SIZES = (33_525, 2_000, 1_000)  # train, validation, test: all 36,525 dates
DATE_SPLIT_SEED = 0
DATE_VOCAB = DateVocab()
# Chosen for chapter 07: >= 99% exact match (greedy, the whole ISO string) on the 1,000 test dates within 120 s of
# training on the 2-core machine. Earlier sweep (greedy exact match on validation dates, the last weights):
#   d_model 128, 2+2 layers, dropout 0.1, Noam lr x1, warm-up 200, batch 64: 94.2% after 1,500 updates (153 s)
#   d_model 64, 2+2 layers, no dropout, Noam x0.5, warm-up 100, batch 64: 97.5% after 800, 96.5% after 1,000
#   d_model 64, 2+2, no dropout, Noam x1, warm-up 200, batch 128: 99.1% after 1,000, 97.8% after 1,500
#   d_model 64, 3+3, no dropout, Noam x0.5, warm-up 100, batch 64: 99.5% after 1,250, 98.7% after 1,750
# The last weights swing by several points between evaluations (Eq. (3) decays slowly): with this recipe, seeds 0, 1, 2,
# greedy exact match on the 2,000 validation dates after 600 / 800 / 1,000 / 1,250 updates:
#   last weights:                      96.10 95.85 89.45 / 97.00 94.90 97.75 / 97.80 96.35 93.00 / 98.95 97.65 99.20
#   mean of the last 5 checkpoints:    98.25 98.75 98.85 / 99.90 99.75 99.50 / 99.70 99.95 99.95 / 100.0 99.95 100.0
# (2 threads, one run at a time: about 4.5 s per 100 updates on the AMD EPYC machine). Hence 1,000 updates, averaged.
DATE_TRANSFORMER_CONFIG = TransformerConfig(
    d_vocab=DATE_VOCAB.d_vocab, n_ctx=32, d_model=64, n_heads=4, n_layers=3, d_ff=256, dropout=0.0,
    fast_attention=True, fast_norm=True,
)
# Eq. (3)'s schedule (``lr`` scales it), the paper's Adam betas, no weight decay (the paper has none).
DATE_TRAIN_CONFIG = TrainConfig(
    max_steps=1000, lr=0.5, warmup_steps=100, schedule="noam", weight_decay=0.0, betas=(0.9, 0.98), grad_clip=1.0,
    eval_interval=250, eval_batches=4, log_interval=1,
)
DATE_BATCH_SIZE = 64
DATE_LABEL_SMOOTHING = 0.1  # §5.4's ε_ls
DATE_MAX_LEN = 11  # ten ISO characters and <eos>


DATE_AVERAGE_LAST = 5  # §6.1: "a single model obtained by averaging the last 5 checkpoints"
DATE_AVERAGE_INTERVAL = 50  # updates between two of those checkpoints (the paper wrote one every 10 minutes)


class CheckpointAverage:
    """§6.1's checkpoint averaging, as a :func:`~tutorial_lib.training.train` callback: keeps the weights after every
    ``interval``-th update (the last ``n`` of them) and gives their mean, the model the recipe returns.

    It reads the ``"step"`` events, so the training config's ``log_interval`` must be 1 (an event after every
    update; with 10, the events come after updates 1, 11, 21, ..., never after a multiple of 50). Averaging
    weights that lie along the last stretch of the optimiser's path smooths the noise of its last steps, which a
    learning rate that decays as slowly as Eq. (3)'s leaves large.
    """

    def __init__(self, model: torch.nn.Module, n: int, interval: int) -> None:
        for name, value in (("n", n), ("interval", interval)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.model, self.n, self.interval = model, n, interval
        self.checkpoints: collections.deque[tuple[int, dict[str, torch.Tensor]]] = collections.deque(maxlen=n)

    def __call__(self, event: str, info: dict) -> None:
        updates = info["step"] + 1  # "step" events carry the 0-based index of the update just made
        if event == "step" and updates % self.interval == 0:
            self.checkpoints.append((updates, {k: v.detach().clone() for k, v in self.model.state_dict().items()}))

    @property
    def steps(self) -> list[int]:
        """After how many updates each kept checkpoint was written."""
        return [updates for updates, _ in self.checkpoints]

    def average(self) -> dict[str, torch.Tensor]:
        """The mean of the kept checkpoints, as a state dict."""
        if not self.checkpoints:
            raise ValueError(f"no checkpoint yet: one is written every {self.interval} updates")
        states = [state for _, state in self.checkpoints]
        return {k: sum(state[k] for state in states) / len(states) for k in states[0]}


class DecoderBlockWithoutCausalMask(DecoderBlock):
    """A decoder layer whose self-attention may read later target positions (what the causal mask forbids)."""

    def forward(self, x, memory, *, self_mask=None, memory_mask=None, cache=None):
        x = self.self_attn_residual(x, lambda h: self.self_attn(h, mask=self_mask, cache=cache))
        x = self.cross_attn_residual(x, lambda h: self.cross_attn(h, memory, mask=memory_mask))
        return self.ffn_residual(x, self.ffn)


def remove_decoder_causal_mask(model: Transformer) -> None:
    """Turn every decoder layer of ``model`` into a :class:`DecoderBlockWithoutCausalMask` (same weights)."""
    for layer in model.decoder.layers:
        layer.__class__ = DecoderBlockWithoutCausalMask


def date_splits() -> DateSplits:
    """The recipe's train / validation / test pairs (deterministic)."""
    return make_date_splits(*DATE_SPLIT_SIZES, seed=DATE_SPLIT_SEED)


def seq2seq_loss(
    model: Transformer, batch: Seq2SeqBatch, *, smoothing: float = DATE_LABEL_SMOOTHING, pad_id: int = DateVocab.pad_id
) -> torch.Tensor:
    """Teacher forcing: the decoder reads ``tgt_in`` and is scored on ``tgt_out``; padding is masked in the source
    (attention) and ignored in the loss. ``smoothing`` is §5.4's label smoothing."""
    logits = model(batch.src, batch.tgt_in, src_lengths=batch.src_lengths)
    return label_smoothing_loss(logits, batch.tgt_out, smoothing, ignore_index=pad_id)


def train_date_transformer(
    *,
    model_cfg: TransformerConfig = DATE_TRANSFORMER_CONFIG,
    train_cfg: TrainConfig = DATE_TRAIN_CONFIG,
    batch_size: int = DATE_BATCH_SIZE,
    smoothing: float = DATE_LABEL_SMOOTHING,
    seed: int = 0,
    causal_decoder: bool = True,
    average_last: int = DATE_AVERAGE_LAST,
    model: Transformer | None = None,
    device: torch.device | str = "cpu",
    callbacks: Iterable[Callable[[str, dict], None]] = (),
    progress: bool = True,
) -> tuple[Transformer, TrainHistory]:
    """Train a Transformer (a fresh one of ``model_cfg``, or ``model`` as given) on the recipe's training dates, in
    batches of ``batch_size`` pairs drawn at random; the validation loss is measured on the validation dates.
    The model returned is the average of the last ``average_last`` checkpoints, one every ``DATE_AVERAGE_INTERVAL``
    updates (§6.1; 1: the last weights as they are); the history is the run's. ``causal_decoder=False`` removes the
    causal mask from the decoder's self-attention (chapter 07's "what if"). Seeded: the initialisation and the
    batches depend on ``seed`` only."""
    if model_cfg.d_vocab != DATE_VOCAB.d_vocab:
        raise ValueError(f"model_cfg.d_vocab={model_cfg.d_vocab} but the date vocabulary has {DATE_VOCAB.d_vocab} tokens")
    if isinstance(average_last, bool) or not isinstance(average_last, int) or average_last < 1:
        raise ValueError(f"average_last must be a positive int, got {average_last!r}")
    if average_last > 1 and (
        train_cfg.max_steps % DATE_AVERAGE_INTERVAL or train_cfg.max_steps < average_last * DATE_AVERAGE_INTERVAL
        or train_cfg.log_interval != 1
    ):
        raise ValueError(
            f"averaging {average_last} checkpoints written every {DATE_AVERAGE_INTERVAL} updates needs max_steps a "
            f"multiple of {DATE_AVERAGE_INTERVAL} and >= {average_last * DATE_AVERAGE_INTERVAL}, and log_interval=1 "
            f"(a step event after every update); got max_steps={train_cfg.max_steps}, log_interval={train_cfg.log_interval}"
        )
    splits = date_splits()
    if model is None:  # a model given was built by the caller, after torch.manual_seed(seed) for the same run
        torch.manual_seed(seed)
        model = Transformer(model_cfg)
    model = model.to(device)
    if not causal_decoder:
        remove_decoder_causal_mask(model)
    generator = torch.Generator().manual_seed(seed)

    def train_batch() -> Seq2SeqBatch:
        rows = torch.randint(0, len(splits.train), (batch_size,), generator=generator).tolist()
        return encode_pairs([splits.train[i] for i in rows], DATE_VOCAB)

    val_batches = date_validation_batches()
    cycle = itertools.cycle(val_batches)
    averager = CheckpointAverage(model, average_last, DATE_AVERAGE_INTERVAL)
    history = train(
        model,
        train_batch,
        lambda m, batch: seq2seq_loss(m, batch, smoothing=smoothing),
        dataclasses.replace(train_cfg, eval_batches=len(val_batches)),
        device=device,
        val_batches=lambda: next(cycle),
        d_model=model.cfg.d_model,
        callbacks=[*callbacks, averager] if average_last > 1 else callbacks,
        progress=progress,
    )
    if average_last > 1:
        model.load_state_dict(averager.average())
    return model.eval(), history


def date_validation_batches() -> list[Seq2SeqBatch]:
    """The 2,000 validation pairs in four batches of 500."""
    val = date_splits().val
    return [encode_pairs(val[i : i + 500], DATE_VOCAB) for i in range(0, len(val), 500)]


def date_transformer_checkpoint_path(
    model_cfg: TransformerConfig = DATE_TRANSFORMER_CONFIG,
    train_cfg: TrainConfig = DATE_TRAIN_CONFIG,
    batch_size: int = DATE_BATCH_SIZE,
    smoothing: float = DATE_LABEL_SMOOTHING,
    seed: int = 0,
    causal_decoder: bool = True,
    average_last: int = DATE_AVERAGE_LAST,
    *,
    checkpoint_dir: str | Path | None = None,
) -> Path:
    """Where :func:`load_or_train_date_transformer` keeps the model of these settings (a hash of all of them)."""
    settings = (model_cfg, train_cfg, batch_size, smoothing, seed, DATE_SPLIT_SIZES, DATE_SPLIT_SEED,
                (average_last, DATE_AVERAGE_INTERVAL))
    return cached_model_path("date_transformer", settings if causal_decoder else (*settings, "no decoder causal mask"),
                             checkpoint_dir)


def load_or_train_date_transformer(
    *,
    model_cfg: TransformerConfig = DATE_TRANSFORMER_CONFIG,
    train_cfg: TrainConfig = DATE_TRAIN_CONFIG,
    batch_size: int = DATE_BATCH_SIZE,
    smoothing: float = DATE_LABEL_SMOOTHING,
    seed: int = 0,
    causal_decoder: bool = True,
    average_last: int = DATE_AVERAGE_LAST,
    checkpoint_dir: str | Path | None = None,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> tuple[Transformer, dict]:
    """The model of these settings, trained by :func:`train_date_transformer` or loaded from the checkpoint an
    earlier call saved (user cache), and its training record: ``history`` (the run's, as a dict), ``seconds`` of
    training (evaluations excluded), and on the validation dates ``val_loss`` and ``val_exact_match`` (greedy) of the
    returned model and ``last_val_exact_match`` of the run's last weights (the same model when ``average_last=1``)."""
    path = date_transformer_checkpoint_path(model_cfg, train_cfg, batch_size, smoothing, seed, causal_decoder,
                                            average_last, checkpoint_dir=checkpoint_dir)
    if path.exists():
        model = Transformer(model_cfg)
        if not causal_decoder:
            remove_decoder_causal_mask(model)
        saved = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(saved["model"], strict=True)
        return model.to(device).eval(), saved["record"]
    torch.manual_seed(seed)
    model = Transformer(model_cfg)  # built here, as train_date_transformer would, so that the callback can read it
    last_weights = {}

    def keep_last_weights(event: str, info: dict) -> None:
        if event == "step" and info["step"] == train_cfg.max_steps - 1:
            last_weights.update({k: v.detach().clone() for k, v in model.state_dict().items()})

    model, history = train_date_transformer(
        model_cfg=model_cfg, train_cfg=train_cfg, batch_size=batch_size, smoothing=smoothing, seed=seed,
        causal_decoder=causal_decoder, average_last=average_last, model=model, device=device,
        callbacks=[keep_last_weights], progress=progress,
    )
    val = date_splits().val
    val_batches = date_validation_batches()
    val_loss = evaluate(model, iter(val_batches).__next__, lambda m, b: seq2seq_loss(m, b, smoothing=smoothing),
                        len(val_batches), device)
    record = {"history": dataclasses.asdict(history), "seconds": history.eval_seconds[-1], "val_loss": val_loss,
              "val_exact_match": exact_match(model, val)}
    averaged = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(last_weights)
    record["last_val_exact_match"] = exact_match(model, val)
    model.load_state_dict(averaged)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict(), "record": record}, path)
    return model, record


def _check_texts(texts: Sequence[str], n_ctx: int) -> None:
    if isinstance(texts, str) or not isinstance(texts, Sequence) or not texts:
        raise ValueError(f"texts must be a non-empty list of strings, got {texts!r}")
    allowed = set(DATE_VOCAB.chars.vocab)
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text:
            raise ValueError(f"texts[{i}] must be a non-empty string, got {text!r}")
        unknown = sorted(set(text) - allowed)
        if unknown:
            raise ValueError(f"texts[{i}] = {text!r} holds characters outside the date vocabulary: {unknown}")
        if len(text) > n_ctx:
            raise ValueError(f"texts[{i}] = {text!r} has {len(text)} characters; the model reads at most n_ctx={n_ctx}")


def _encode_texts(texts: Sequence[str], device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded source ids and their lengths."""
    sources = [DATE_VOCAB.encode(text) for text in texts]
    return pad_sequences(sources, DATE_VOCAB.pad_id, device), torch.tensor([len(s) for s in sources], device=device)


def normalise_dates(model: Transformer, texts: Sequence[str], *, beam_width: int = 1, batch_size: int = 250) -> list[str]:
    """Each human-written date of ``texts`` in ISO form ("3rd of March 1997" -> "1997-03-03"), as ``model`` writes it:
    greedy decoding (``beam_width=1``) or beam search with the paper's length penalty α = 0.6, ``batch_size`` texts
    at a time. A text with a character outside the date vocabulary, or longer than the model's context, is refused."""
    _check_texts(texts, model.cfg.n_ctx)
    for name, value in (("beam_width", beam_width), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    device = model.unembed.weight.device
    outputs: list[str] = []
    for start in range(0, len(texts), batch_size):
        src, lengths = _encode_texts(texts[start : start + batch_size], device)
        if beam_width == 1:
            tokens = greedy_decode(model, src, bos=DATE_VOCAB.bos_id, eos=DATE_VOCAB.eos_id, max_len=DATE_MAX_LEN,
                                   src_lengths=lengths)
            outputs += [DATE_VOCAB.decode(row) for row in tokens.cpu()]
        else:
            step = transformer_batch_log_probs_fn(model, src, lengths)
            beams = beam_search_batch(step, len(src), bos=DATE_VOCAB.bos_id, eos=DATE_VOCAB.eos_id,
                                      max_len=DATE_MAX_LEN, beam_size=beam_width, alpha=0.6, device=device)
            outputs += [DATE_VOCAB.decode(best.tokens) for (best,) in beams]
    return outputs


def exact_match(model: Transformer, pairs: Sequence[tuple[str, str]], *, beam_width: int = 1) -> float:
    """The share of ``(source, ISO date)`` pairs whose whole ISO string the model writes right."""
    predictions = normalise_dates(model, [source for source, _ in pairs], beam_width=beam_width)
    return sum(p == target for p, (_, target) in zip(predictions, pairs)) / len(pairs)
