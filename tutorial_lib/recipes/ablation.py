"""The ablation runner of chapter 11: one component removed, everything else the same; a loss curve out.

:func:`run_ablation` builds the reference model (:data:`ABLATION_GPT_CONFIG`, a smaller chapter-09 GPT), applies one
:class:`Change` to the model or to its training, and trains it on character-level tiny Shakespeare with the same data
order, seed and number of updates as every other run. It returns an :class:`AblationResult`: the training and validation
curves, the final validation loss, the training time, and the trained model. Results are cached in the user cache under
a name that hashes every setting that decides them (the configurations, the change and its code, the seed, the data),
so a row trained by one chapter is read back by the next one in the same run.

The changes of chapter 11 are registered in :data:`CHANGES` under their names (``"no_ffn"``, ``"post_norm"``, …); a
reader's own ablation is a :class:`Change` passed directly, or registered with :func:`register_change`:

    run_ablation(Change("wide_ffn", "d_ff = 8 · d_model", model={"d_ff": 512}))

A change edits the configurations (``model``, ``train``), operates on the built model (``surgery``, after the
initialisation), or builds another model altogether (``build``). Removing a component by surgery keeps the rest of the
model, parameters and initialisation included, exactly as the baseline has them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from tutorial_lib import __version__
from tutorial_lib.blocks import NormPlacement, Residual
from tutorial_lib.data.shakespeare import CharDataset, default_cache_dir, get_batch, load_shakespeare_char
from tutorial_lib.kv_cache import LayerKVCache
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.multi_head import MultiHeadAttention
from tutorial_lib.recipes.cache import load_or_train
from tutorial_lib.recipes.char_gpt import split_batches
from tutorial_lib.stats import compare_paired
from tutorial_lib.training import TrainConfig, TrainHistory, evaluate, language_model_loss, train

# Chapter 09's model at half the width and half the context, with its optimiser settings and a 30-update warm-up: the
# reference run that chapters 05, 06, 12 and 13 share through the cache.
ABLATION_GPT_CONFIG = GPTConfig(
    d_vocab=65, n_ctx=32, d_model=64, n_heads=4, n_layers=4, activation="relu", fast_attention=True, fast_norm=True
)
ABLATION_TRAIN_CONFIG = TrainConfig(
    max_steps=600, lr=4e-3, min_lr=4e-4, warmup_steps=30, weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0,
    eval_interval=100, log_interval=10,
)
ABLATION_BATCH_SIZE = 32
# Seconds an update takes on the CI machine (the 2-core AMD EPYC, where each notebook kernel runs on one thread and
# two notebooks run side by side), evaluations included: the time a cell announces before it trains
# (tutorial_lib.progress). Measured with short runs of each recipe, 2026-11-25.
ABLATION_CI_SECONDS_PER_UPDATE = 0.03
# Chapter 11's table: every row over 5 seeds, paired with the baseline's. At the reference run's size (600 updates)
# its fifty runs would take about seventeen minutes on the CI machine; the table's run keeps the reference model's width, heads,
# context and optimiser but has two blocks, 16 windows a batch and 400 updates (chapter 11 measures what each costs).
# Chapters 05 (the FFN and its activations), 06 (residuals and norms removed) and 13 (linear attention) compare at
# this size too, through run_table_row: the rows they share with the table are its runs, trained once. Chapter 06's
# warm-up comparison keeps the reference run, whose four blocks its post-norm result needs (at two blocks post-norm
# trains; at four it stalls).
TABLE_GPT_CONFIG = ABLATION_GPT_CONFIG.replace(n_layers=2)
TABLE_BATCH_SIZE = 16
TABLE_STEPS = 400
# Seconds an update of the table's run takes on the CI machine, evaluations included, as for the reference run: whole
# runs of both sizes timed interleaved on one thread, a table run took 0.24 and 0.28 of a reference run (2026-11-25),
# so about a quarter of the reference run's 18 s, spread over 400 updates.
TABLE_CI_SECONDS_PER_UPDATE = 0.012
EVAL_BATCH_SIZE = 64  # validation windows per batch; the curve reads the first EVAL_BATCHES batches of the split
EVAL_BATCHES = 8


# --- the changes ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One change to the reference run: configuration fields to replace, surgery on the built model, or a builder."""

    name: str
    description: str
    model: Mapping[str, Any] = field(default_factory=dict)  # GPTConfig fields
    train: Mapping[str, Any] = field(default_factory=dict)  # TrainConfig fields
    surgery: Callable[[GPT], None] | None = None  # applied to the built, initialised model
    build: Callable[[GPTConfig], nn.Module] | None = None  # another model class (default: GPT)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"name must be an identifier such as 'no_ffn', got {self.name!r}")
        unknown = set(self.model) - {f.name for f in dataclasses.fields(GPTConfig)}
        if unknown:
            raise ValueError(f"model changes must name GPTConfig fields, got {sorted(unknown)}")
        unknown = set(self.train) - {f.name for f in dataclasses.fields(TrainConfig)}
        if unknown:
            raise ValueError(f"train changes must name TrainConfig fields, got {sorted(unknown)}")

    def fingerprint(self) -> str:
        """What decides this change's result: its settings and the source code of its functions."""
        code = [inspect.getsource(fn) if fn is not None else "" for fn in (self.surgery, self.build)]
        return repr((self.name, sorted(self.model.items()), sorted(self.train.items()), code))


class UnscaledMultiHeadAttention(MultiHeadAttention):
    """Main difference with :class:`MultiHeadAttention`: the scores are q·k, not q·k/√d_k. The queries are multiplied
    by √d_head before the package's attention divides the scores by it, so both attention paths stay usable."""

    def _heads(self, x: Tensor, context: Tensor | None, cache: LayerKVCache | None) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = super()._heads(x, context, cache)
        return q * math.sqrt(self.d_head), k, v


class WithoutCausalMask(nn.Module):
    """A block whose attention ignores the causal mask while ``causal`` is False (switch it on to evaluate honestly)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block
        self.causal = False

    def forward(
        self, x: Float[Tensor, "batch seq d_model"], *, mask: Bool[Tensor, "..."] | None = None, causal: bool = False,
        cache: LayerKVCache | None = None,
    ) -> Float[Tensor, "batch seq d_model"]:
        return self.block(x, mask=mask, causal=causal and self.causal, cache=cache)


class WithoutResidual(Residual):
    """Main difference with :class:`Residual`: no skip connection, the sublayer's output replaces x."""

    def forward(self, x: Float[Tensor, "batch seq d_model"], sublayer: Callable[[Tensor], Tensor]) -> Float[Tensor, "batch seq d_model"]:
        if self.placement is NormPlacement.POST:
            return self.norm(self.dropout(sublayer(x)))
        out = self.dropout(sublayer(self.norm(x)))
        return self.norm_out(out) if self.norm_out is not None else out


class Skip(nn.Module):
    """A residual sublayer that is not there: the stream passes through unchanged."""

    def forward(self, x: Float[Tensor, "batch seq d_model"], sublayer: Callable[[Tensor], Tensor]) -> Float[Tensor, "batch seq d_model"]:
        return x


def _unscaled_attention(model: GPT) -> None:
    for block in model.blocks:
        unscaled = UnscaledMultiHeadAttention(block.attn.d_model, block.attn.n_heads, bias=block.attn.q_proj.bias is not None,
                                              fast=block.attn.fast)
        unscaled.load_state_dict(block.attn.state_dict())
        block.attn = unscaled


def _no_causal_mask(model: GPT) -> None:
    model.blocks = nn.ModuleList(WithoutCausalMask(block) for block in model.blocks)


def _no_positions(model: GPT) -> None:
    model.pos_embed = None  # GPT.forward adds positions only when it has them


def _no_residuals(model: GPT) -> None:
    for block in model.blocks:
        for name in ("attn_residual", "ffn_residual"):
            old = getattr(block, name)
            new = WithoutResidual(model.cfg.d_model, old.placement, eps=model.cfg.layer_norm_eps, fast_norm=model.cfg.fast_norm)
            new.load_state_dict(old.state_dict())
            setattr(block, name, new)


def _no_norm(model: GPT) -> None:
    for block in model.blocks:
        for residual in (block.attn_residual, block.ffn_residual):
            residual.norm = nn.Identity()
            if residual.norm_out is not None:
                residual.norm_out = nn.Identity()
    model.ln_final = nn.Identity()


def _no_ffn(model: GPT) -> None:
    for block in model.blocks:
        block.ffn, block.ffn_residual = nn.Identity(), Skip()


CHANGES: dict[str, Change] = {}


def register_change(change: Change) -> Change:
    """Make ``change`` known to :func:`run_ablation` by its name (a name is registered once)."""
    if change.name in CHANGES and CHANGES[change.name] != change:
        raise ValueError(f"a different change named {change.name!r} is already registered")
    CHANGES[change.name] = change
    return change


for _change in (
    Change("baseline", "the reference model, nothing removed"),
    Change("no_scaling", "scores q·k without the 1/√d_k of Eq. (1)", surgery=_unscaled_attention),
    Change("no_causal_mask", "attention may read the future (trained and evaluated that way)", surgery=_no_causal_mask),
    Change("no_positions", "no position embeddings at all", surgery=_no_positions),
    Change("no_residuals", "x = Sublayer(Norm(x)) instead of x + Sublayer(Norm(x))", surgery=_no_residuals),
    Change("no_norm", "no LayerNorm anywhere, the final one included", surgery=_no_norm),
    Change("no_ffn", "no position-wise feed-forward network", surgery=_no_ffn),
    Change("one_head", "a single head of d_model = 64 instead of 4 heads of 16", model={"n_heads": 1}),
    Change("post_norm", "the paper's Norm(x + Sublayer(x)) instead of pre-norm", model={"placement": "post"}),
    Change("no_warmup", "the full learning rate from the first update", train={"warmup_steps": 0}),
    Change("post_norm_long_warmup", "post-norm with 150 warm-up updates instead of 30",
           model={"placement": "post"}, train={"warmup_steps": 150}),
    Change("gelu", "exact GELU instead of ReLU in the feed-forward network", model={"activation": "gelu"}),
    # int(8/3 · 64) = 170 hidden units: three matrices of 64 × 170 hold about as much as two of 64 × 256 (chapter 05)
    Change("swiglu", "SwiGLU feed-forward with d_ff 170 (matched parameters) instead of ReLU with 256",
           model={"activation": "swiglu", "d_ff": 170}),
):
    register_change(_change)

# Chapter 11's table: the reference and one removal per row, in the order of issue 13.
CHAPTER_ROWS: tuple[str, ...] = (
    "baseline", "no_scaling", "no_causal_mask", "no_positions", "no_residuals", "no_norm", "no_ffn", "one_head",
    "post_norm", "no_warmup",
)


def set_causal(model: nn.Module, causal: bool) -> None:
    """Switch the causal mask of a ``no_causal_mask`` model on (the honest evaluation) or off (as it was trained)."""
    wrapped = [m for m in model.modules() if isinstance(m, WithoutCausalMask)]
    if not wrapped:
        raise ValueError("model has no block without a causal mask: it was not built by the 'no_causal_mask' change")
    for module in wrapped:
        module.causal = causal


# --- running ----------------------------------------------------------------------------------------------------------


@dataclass
class AblationResult:
    """One run: the change, its curves, its final validation loss, its training time, and the trained model."""

    change: str
    seed: int
    steps: list[int]
    train_loss: list[float]
    eval_steps: list[int]
    val_loss: list[float]
    final_val_loss: float  # on the whole validation split
    seconds: float  # training time, evaluations excluded (measured when it was trained; cached runs keep theirs)
    n_parameters: int
    model: nn.Module = field(repr=False)

    def final_train_loss(self, last: int = 5) -> float:
        """The mean of the last ``last`` logged training losses (one logged update is noisy)."""
        return sum(self.train_loss[-last:]) / len(self.train_loss[-last:])


def resolve_change(change: str | Change) -> Change:
    """A registered change by its name, or the change itself. Any object with a Change's fields is one: a notebook
    that redefines the class (a build cell, or a reloaded module) still runs the changes registered here."""
    if isinstance(change, str) and change in CHANGES:
        return CHANGES[change]
    if isinstance(change, Change) or all(hasattr(change, a) for a in ("name", "model", "train", "surgery", "build", "fingerprint")):
        return change
    raise ValueError(f"change must be a Change or one of {sorted(CHANGES)}, got {change!r}")


def build_ablated_model(change: str | Change = "baseline", *, seed: int = 0,
                        model_cfg: GPTConfig = ABLATION_GPT_CONFIG) -> nn.Module:
    """The reference model with ``change`` applied, initialised from ``seed`` (the same draws as the baseline's)."""
    change = resolve_change(change)
    cfg = model_cfg.replace(**change.model)
    torch.manual_seed(seed)
    model = change.build(cfg) if change.build is not None else GPT(cfg)
    if change.surgery is not None:
        change.surgery(model)
    return model


def ablation_cache_path(change: Change, *, seed: int, steps: int, dataset: CharDataset,
                        model_cfg: GPTConfig = ABLATION_GPT_CONFIG, train_cfg: TrainConfig = ABLATION_TRAIN_CONFIG,
                        batch_size: int = ABLATION_BATCH_SIZE, cache_dir: str | Path | None = None) -> Path:
    """Where a run is kept: named after a hash of everything that decides its result."""
    # The key names no module: a change's code enters as its source text, so moving a function (or this runner,
    # from tutorial_lib/ablation.py to tutorial_lib/recipes/ablation.py) leaves every cached run's name as it was.
    data = hashlib.sha256(dataset.train.numpy().tobytes() + dataset.val.numpy().tobytes()).hexdigest()[:16]
    key = repr((__version__, model_cfg, train_cfg, batch_size, change.fingerprint(), seed, steps, data,
                EVAL_BATCH_SIZE, EVAL_BATCHES))
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Path(cache_dir or default_cache_dir()) / "ablations" / f"{change.name}_seed{seed}_{digest}.pt"


def validation_batches(dataset: CharDataset, n_ctx: int) -> list[tuple[Tensor, Tensor]]:
    """The validation split cut into consecutive windows, in batches of EVAL_BATCH_SIZE (the same for every run)."""
    return split_batches(dataset.val, n_ctx, EVAL_BATCH_SIZE)


def validation_loss(model: nn.Module, dataset: CharDataset, *, n_batches: int | None = None) -> float:
    """The model's mean loss over the first ``n_batches`` validation batches (default: all of them)."""
    batches = validation_batches(dataset, model.cfg.n_ctx)[:n_batches]
    cycle = itertools.cycle(batches)
    return evaluate(model, lambda: next(cycle), language_model_loss, len(batches), "cpu")


def run_ablation(
    change: str | Change = "baseline",
    *,
    seed: int = 0,
    steps: int | None = None,
    dataset: CharDataset | None = None,
    model_cfg: GPTConfig = ABLATION_GPT_CONFIG,
    train_cfg: TrainConfig = ABLATION_TRAIN_CONFIG,
    batch_size: int = ABLATION_BATCH_SIZE,
    cache: bool = True,
    cache_dir: str | Path | None = None,
    progress: bool = False,
) -> AblationResult:
    """Train the reference model with ``change`` for ``steps`` updates (default: the reference budget), or read the run
    back from the cache. Same data order and initialisation for every change with the same ``seed``; ``model_cfg``,
    ``train_cfg`` and ``batch_size`` set another reference run."""
    change = resolve_change(change)
    train_cfg = dataclasses.replace(train_cfg, **change.train)
    if steps is not None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be a positive int, got {steps!r}")
        warmup = min(train_cfg.warmup_steps, steps)
        train_cfg = dataclasses.replace(train_cfg, max_steps=steps, warmup_steps=warmup)
    dataset = dataset or load_shakespeare_char()
    path = ablation_cache_path(change, seed=seed, steps=train_cfg.max_steps, dataset=dataset, model_cfg=model_cfg,
                               train_cfg=train_cfg, batch_size=batch_size, cache_dir=cache_dir)
    model = build_ablated_model(change, seed=seed, model_cfg=model_cfg)

    def train_run() -> dict:
        generator = torch.Generator().manual_seed(seed)
        curve = validation_batches(dataset, model.cfg.n_ctx)[:EVAL_BATCHES]
        cycle = itertools.cycle(curve)
        history: TrainHistory = train(
            model,
            lambda: get_batch(dataset.train, batch_size, model.cfg.n_ctx, generator),
            language_model_loss,
            dataclasses.replace(train_cfg, eval_batches=len(curve)),
            device="cpu",
            val_batches=lambda: next(cycle),
            progress=progress,
        )
        result = {
            "change": change.name,
            "seed": seed,
            "steps": history.steps,
            "train_loss": history.train_loss,
            "eval_steps": history.eval_steps,
            "val_loss": history.val_loss,
            "final_val_loss": validation_loss(model, dataset),
            "seconds": history.eval_seconds[-1],
            "n_parameters": sum(p.numel() for p in model.parameters()),
        }
        return {"model": model.state_dict(), "result": result}

    what = f"the ablation row {change.name}, seed {seed}"
    table = model_cfg == TABLE_GPT_CONFIG and batch_size == TABLE_BATCH_SIZE
    expected = train_cfg.max_steps * (TABLE_CI_SECONDS_PER_UPDATE if table else ABLATION_CI_SECONDS_PER_UPDATE)
    saved = load_or_train(path, train_run, what=what, expected_seconds=expected) if cache else train_run()
    model.load_state_dict(saved["model"], strict=True)  # the weights read back (its own, when this call trained it)
    return AblationResult(model=model.eval(), **saved["result"])


def run_table_row(change: str | Change = "baseline", *, seed: int = 0, steps: int = TABLE_STEPS,
                  dataset: CharDataset | None = None, progress: bool = False) -> AblationResult:
    """:func:`run_ablation` at the size of chapter 11's table (:data:`TABLE_GPT_CONFIG`, :data:`TABLE_BATCH_SIZE`,
    ``steps`` updates, :data:`TABLE_STEPS` by default): the runs chapters 05, 11 and 13 share through the cache."""
    return run_ablation(change, seed=seed, steps=steps, dataset=dataset, model_cfg=TABLE_GPT_CONFIG,
                        batch_size=TABLE_BATCH_SIZE, progress=progress)


# --- reading the results ----------------------------------------------------------------------------------------------


def within_noise(baseline_losses: Sequence[float], row_losses: Mapping[str, Sequence[float]], *,
                 confidence: float = 0.95) -> dict[str, bool]:
    """Which rows of an ablation table the noise between seeds can explain, each compared with the baseline seed by seed.

    ``baseline_losses[i]`` is the baseline's final loss with seed i; each row of ``row_losses`` holds its own runs with
    seeds 0, 1, … (at least two, at most as many as the baseline's), and is paired with the baseline's runs of the same
    seeds: the differences d_i = row_i - baseline_i, their mean d̄, their sample standard deviation s (n - 1 in the
    denominator) and Student's t-interval d̄ ± t · s / √n, with t the (1 + confidence) / 2 quantile on n - 1 degrees
    of freedom (``tutorial_lib.stats.compare_paired``). A row is within the noise (True) when its interval holds 0:
    these seeds cannot tell it from the baseline. A row with a loss that is not a finite number (a diverged run) is
    never within the noise.
    """
    if not _is_losses(baseline_losses) or len(baseline_losses) < 2 or not all(map(math.isfinite, baseline_losses)):
        raise ValueError(f"baseline_losses must be a sequence of at least two finite losses (one per seed), got {baseline_losses!r}")
    if not isinstance(row_losses, Mapping):
        raise ValueError(f"row_losses must map row names to sequences of losses (one per seed), got {row_losses!r}")
    if not (_is_number(confidence) and 0 < confidence < 1):
        raise ValueError(f"confidence must be a number in (0, 1), got {confidence!r}")
    marks = {}
    for name, losses in row_losses.items():
        if not _is_losses(losses) or not 2 <= len(losses) <= len(baseline_losses):
            raise ValueError(f"row_losses[{name!r}] must hold between 2 and {len(baseline_losses)} losses (seeds 0, 1, "
                             f"…, paired with the baseline's), got {losses!r}")
        if not all(math.isfinite(loss) for loss in losses):
            marks[name] = False
            continue
        comparison = compare_paired(baseline_losses[: len(losses)], losses, confidence=confidence)
        marks[name] = comparison.low <= 0 <= comparison.high
    return marks


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_losses(values: object) -> bool:
    """A sequence of numbers (one loss per seed), not a string."""
    return isinstance(values, Sequence) and not isinstance(values, (str, bytes)) and all(map(_is_number, values))


def block_gradient_norms(
    model: nn.Module, tokens: Int[Tensor, "batch seq"], targets: Int[Tensor, "batch seq"]
) -> Float[Tensor, " n_layers"]:
    """The gradient-flow probe: for each block of ``model``, the norm ‖∂L/∂θ‖₂ over all of that block's parameters,
    where L is the mean next-token cross-entropy of one batch. Gradients the model already holds are cleared first;
    afterwards the model holds this batch's."""
    if tokens.dim() != 2 or tokens.shape != targets.shape:
        raise ValueError(f"tokens and targets must both have shape (batch, seq), got {tuple(tokens.shape)} and "
                         f"{tuple(targets.shape)}")
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or len(blocks) == 0:
        raise ValueError(f"model must hold its layers in a non-empty ModuleList `blocks`, got {type(model).__name__}")
    model.zero_grad(set_to_none=True)
    logits = model(tokens)
    F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
    norms = []
    for block in blocks:
        squares = [p.grad.pow(2).sum() for p in block.parameters() if p.grad is not None]
        norms.append(torch.stack(squares).sum().sqrt() if squares else torch.zeros(()))
    return torch.stack(norms).detach()


def bigram_probabilities(dataset: CharDataset) -> Float[Tensor, "d_vocab d_vocab"]:
    """P(next | current) by the training text's character pairs (row: the current character, column: the next), one
    count added to every pair so that no pair has probability zero: the model that sees only the current character."""
    d_vocab = dataset.tokenizer.d_vocab
    pairs = torch.zeros(d_vocab, d_vocab, dtype=torch.float64)
    pairs.index_put_((dataset.train[:-1], dataset.train[1:]), torch.ones(len(dataset.train) - 1, dtype=torch.float64),
                     accumulate=True)
    return (pairs + 1) / (pairs + 1).sum(dim=1, keepdim=True)


def bigram_cross_entropy(bigram: Float[Tensor, "d_vocab d_vocab"], tokens: Int[Tensor, "*batch seq"]) -> float:
    """How surprising each character of ``tokens`` is after the one before it under ``bigram``
    (:func:`bigram_probabilities`): the mean of -log P(next | current), in nats a character."""
    return -bigram[tokens[..., :-1], tokens[..., 1:]].log().mean().item()


@torch.no_grad()
def validation_loss_by_position(model: nn.Module, dataset: CharDataset, *, n_batches: int | None = None) -> Float[Tensor, " seq"]:
    """The mean next-token loss at each position of the validation windows (the first ``n_batches`` batches, default
    all): position t has read t + 1 characters of its window."""
    if n_batches is not None and (isinstance(n_batches, bool) or not isinstance(n_batches, int) or n_batches < 1):
        raise ValueError(f"n_batches must be a positive int or None, got {n_batches!r}")
    was_training = model.training
    model.eval()
    try:
        batches = validation_batches(dataset, model.cfg.n_ctx)[:n_batches]
        total = sum(F.cross_entropy(model(x).transpose(1, 2), y, reduction="none").sum(dim=0) for x, y in batches)
        return total / sum(len(x) for x, _ in batches)
    finally:
        model.train(was_training)
