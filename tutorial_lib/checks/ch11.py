"""Chapter 11's exercises: an ablation written as surgery, the gradient-flow probe, and reading an ablation table.

- ``11.remove_attention`` is the counterpart of the chapter's ``_no_ffn``: the learner's function edits a built GPT in
  place so that every block's attention sublayer is gone, its residual connection and norm included. The check builds
  tiny seeded GPTs (float64, pre-norm and post-norm), applies the learner's surgery and compares three things with the
  reference's: the logits, the parameter count, and the logits after one SGD update. A removed part neither computes,
  nor counts, nor learns: a zeroed projection computes nothing but counts and learns back; weights left in place count.
- ``11.block_gradient_norms`` is the chapter's probe: ‖∂L/∂θ‖₂ over each block's parameters for one batch. Some cases
  hand over a model that still holds the gradients of an earlier batch, as a model does after a training step.
- ``11.within_noise`` marks the rows of an ablation table that the noise between seeds can explain, by the paired
  rule: each row's runs minus the baseline's runs of the same seeds, and the row is within the noise when the Student-t
  interval of those differences holds 0. A row of fewer than two seeds is bad input (ValueError). The catalogue names
  the classic mistakes: k·σ of the baseline alone, an unpaired comparison, 1.96 instead of t, a one-sided quantile, n
  degrees of freedom, no √n, the population standard deviation, a short row paired with the whole baseline.
- ``11.build_ablated_model`` (the build exercise) composes a Change's configuration fields, model class and surgery
  into the model of a row, seeded just before its weights are drawn; the check calls it from a global random state
  that is not the seed's, so an answer that seeds too late (or never) is caught.
- ``11.ablated_gpt`` (the second build exercise) subclasses the learner's own GPT of chapter 08 into
  ``AblatedGPT(..., remove=...)``, the chapter's removals made on the learner's model: attention or the FFN (each with
  its norm), the positions, every norm, the causal mask. The check puts random weights in by name and compares the
  logits and the parameter count with :class:`ReferenceAblatedGPT`, whose removals compute what the runner's changes
  compute on the package's GPT (tested): a part kept but unused still counts.
- ``11.predict_no_attention_loss`` (predict, then measure): the loss floor of a model without attention, the bigram
  cross-entropy of the text (:func:`bigram_cross_entropy`).

As in ``ch03``, the mistakes are written the way a learner would write them, unannotated.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import statistics
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tutorial_lib.recipes.ablation import (
    Change,
    Skip,
    bigram_cross_entropy,
    bigram_probabilities,
    block_gradient_norms,
    build_ablated_model,
    within_noise,
)
from tutorial_lib.stats import compare_paired, t_quantile
from tutorial_lib.blocks import TransformerBlock
from tutorial_lib.checks.ch06 import BookBlock
from tutorial_lib.checks.ch08 import SMALL_GPT, BookGPT, GPTSizes, _gpt_module_like, _random_gpt_weights
from tutorial_lib.checks.modules import build_module
from tutorial_lib.feed_forward import FeedForward
from tutorial_lib.multi_head import MultiHeadAttention
from tutorial_lib.normalization import LayerNorm
from tutorial_lib.checks.compound import mistake_builder
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, WrongOutput, register
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.training import language_model_loss

# --- 11.remove_attention ----------------------------------------------------------------------------------------------

_TINY = GPTConfig(d_vocab=13, n_ctx=8, d_model=16, n_heads=2, n_layers=2, activation="relu")
_SGD_LR = 0.5


@dataclass(frozen=True)
class _Model:
    """How a case builds its model: a fresh seeded float64 GPT (or ablated GPT) per call; verdicts show the text."""

    description: str
    cfg: GPTConfig
    seed: int = 0
    change: str = "baseline"
    stale_gradients: bool = False  # hand it over holding the gradients of another batch

    def build(self) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            model = build_ablated_model(self.change, seed=self.seed, model_cfg=self.cfg).double()
            if self.stale_gradients:
                other = torch.randint(self.cfg.d_vocab, (2, self.cfg.n_ctx + 1), generator=torch.Generator().manual_seed(99))
                language_model_loss(model, (other[:, :-1], other[:, 1:])).backward()
        return model

    def __repr__(self) -> str:
        return f"<{self.description}>"


def _surgery_call(obj, args) -> tuple[torch.Tensor, int, torch.Tensor]:
    spec, tokens = args
    model = spec.build()
    returned = obj(model)
    if isinstance(returned, nn.Module):
        model = returned  # a learner who returns the edited model is understood too
    elif returned is not None:
        raise WrongOutput("wrong_type", f"remove_attention should edit the model in place (and return None), got a "
                                        f"value of type {type(returned).__name__}")
    batch = (tokens[:, :-1], tokens[:, 1:])
    model.eval()
    with torch.no_grad():
        logits = model(batch[0])
    n_parameters = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=_SGD_LR)
    optimizer.zero_grad(set_to_none=True)
    language_model_loss(model, batch).backward()
    optimizer.step()
    with torch.no_grad():
        after = model(batch[0])
    return logits, n_parameters, after


def _surgery_cases(generator: torch.Generator) -> list[Case]:
    def tokens(cfg: GPTConfig, batch: int = 3) -> torch.Tensor:
        return torch.randint(cfg.d_vocab, (batch, cfg.n_ctx + 1), generator=generator)

    three = _TINY.replace(n_layers=3)
    post = _TINY.replace(placement="post")
    return [
        Case.of(model=_Model("a pre-norm GPT of 2 blocks", _TINY), tokens=tokens(_TINY)),
        Case.of(model=_Model("a pre-norm GPT of 3 blocks", three, seed=1), tokens=tokens(three)),
        Case.of(model=_Model("a post-norm GPT of 2 blocks", post, seed=2), tokens=tokens(post)),
    ]


def reference_remove_attention(model: GPT) -> None:
    """Every block's attention sublayer gone: the stream passes it unchanged (no attention, no norm, no residual)."""
    for block in model.blocks:
        block.attn, block.attn_residual = nn.Identity(), Skip()


class _PassThrough(nn.Module):
    def forward(self, x, **kwargs):
        return x


class _Zeros(nn.Module):
    def forward(self, x, **kwargs):
        return torch.zeros_like(x)


@mistake_builder
def _surgery_like(*, blocks="all", sublayer="attention", how="remove"):
    """A learner's remove_attention; each keyword reproduces one way of getting it wrong.

    ``blocks="first"``: only the first block is edited. ``sublayer="ffn"``: the feed-forward sublayer is edited
    instead. ``how``: "pass_through_in_residual" or "identity_in_residual" (the sublayer replaced by a module that
    returns its input, the residual connection kept; ``nn.Identity`` refuses the attention's keywords),
    "zero_projection" (the sublayer's output projection zeroed in place) or "skip_only" (the residual connection
    replaced by a ``Skip``, the sublayer's weights left in the model).
    """
    module, residual = ("attn", "attn_residual") if sublayer == "attention" else ("ffn", "ffn_residual")

    def remove_attention(model):
        for block in model.blocks[:1] if blocks == "first" else model.blocks:
            if how == "remove":
                setattr(block, module, nn.Identity())
                setattr(block, residual, Skip())
            elif how == "pass_through_in_residual":
                setattr(block, module, _PassThrough())
            elif how == "identity_in_residual":
                setattr(block, module, nn.Identity())
            elif how == "zero_projection":
                projection = block.attn.out_proj if sublayer == "attention" else block.ffn.down
                with torch.no_grad():
                    projection.weight.zero_()
                    projection.bias.zero_()
            elif how == "skip_only":
                setattr(block, residual, Skip())

    return remove_attention


def _removed_blocks(model):
    model.blocks = nn.ModuleList()


def _all_but_last(model):
    for block in model.blocks[:-1]:
        block.attn, block.attn_residual = nn.Identity(), Skip()


def _also_final_norm(model):
    reference_remove_attention(model)
    model.ln_final = nn.Identity()


def _zeros_kept_norm(model):
    for block in model.blocks:
        block.attn = _Zeros()


REMOVE_ATTENTION = Exercise(
    id="11.remove_attention",
    forbidden=(build_ablated_model,),
    reference=reference_remove_attention,
    cases=_surgery_cases,
    points=1,
    call=_surgery_call,
    outputs=("the logits", "the parameter count", "the logits after one SGD update"),
    axes={"the logits": "batch seq d_vocab", "the logits after one SGD update": "batch seq d_vocab"},
    checked=(
        "tiny GPTs of 2 and 3 pre-norm blocks and 2 post-norm blocks, in float64: the same logits, the same number of "
        "parameters and the same logits after one SGD update as with the attention removed"
    ),
    mistakes=(
        Mistake("identity_inside_residual", "replaced the attention by a module that returns its input, inside its "
                "residual connection",
                "The residual connection is still there: a pre-norm block then computes x + Norm(x), a post-norm one "
                "Norm(x + x). Replace the residual connection `block.attn_residual` too, by a `Skip`, so the stream "
                "passes unchanged.",
                (_surgery_like(how="pass_through_in_residual"), _surgery_like(how="identity_in_residual"))),
        Mistake("first_block_only", "removed the attention of the first block only",
                "Loop over every block of `model.blocks`, and do not `return` inside the loop.",
                (_surgery_like(blocks="first"),)),
        Mistake("zeroed_output_projection", "zeroed the attention's output projection instead of removing the attention",
                "A zeroed layer computes nothing today but still counts in the parameters, and its gradient is not "
                "zero: the first update grows it back. Remove the modules themselves.",
                (_surgery_like(how="zero_projection"),)),
        Mistake("removed_ffn_instead", "removed the feed-forward network instead of the attention",
                "The attention lives in `block.attn` and `block.attn_residual`; `block.ffn` is the other sublayer.",
                (_surgery_like(sublayer="ffn"),)),
        Mistake("left_attention_parameters", "bypassed the attention but left its weights in the model",
                "The output is right, but the attention's weights still count in the parameters (and in the ablation "
                "table). Replace `block.attn` by `nn.Identity()` as well.", (_surgery_like(how="skip_only"),)),
    ),
    mutants=(
        Mutant("all_but_last", "removes the attention of every block but the last", _all_but_last),
        # Not catalogued: no learner asked to remove a sublayer deletes the blocks (an answer that does is described).
        Mutant("removed_whole_blocks", "removes the whole blocks, feed-forward networks included", _removed_blocks),
        Mutant("also_final_norm", "removes the final LayerNorm as well", _also_final_norm),
        Mutant("zeros_kept_norm", "replaces the attention by zeros and keeps its norm", _zeros_kept_norm),
    ),
)


# --- 11.block_gradient_norms ------------------------------------------------------------------------------------------


def _probe_call(obj, args) -> torch.Tensor:
    spec, tokens, targets = args
    model = spec.build()
    norms = obj(model, tokens, targets)
    if isinstance(norms, (list, tuple)) and all(isinstance(n, (numbers.Real, torch.Tensor)) for n in norms):
        norms = torch.tensor([float(n) for n in norms], dtype=torch.float64)  # a list of numbers is understood too
    if not isinstance(norms, torch.Tensor):
        raise WrongOutput("wrong_type", f"block_gradient_norms should return a tensor of one norm per block, got a value "
                                        f"of type {type(norms).__name__}")
    return norms.detach()


def _probe_cases(generator: torch.Generator) -> list[Case]:
    def batch(cfg: GPTConfig, size: int = 4) -> dict[str, torch.Tensor]:
        tokens = torch.randint(cfg.d_vocab, (size, cfg.n_ctx + 1), generator=generator)
        return {"tokens": tokens[:, :-1], "targets": tokens[:, 1:]}

    three = _TINY.replace(n_layers=3)
    return [
        Case.of(model=_Model("a pre-norm GPT of 3 blocks", three), **batch(three)),
        Case.of(model=_Model("the same GPT, still holding the gradients of another batch", three, stale_gradients=True),
                **batch(three)),
        Case.of(model=_Model("a GPT of 3 blocks without residual connections, holding old gradients", three, seed=1,
                             change="no_residuals", stale_gradients=True), **batch(three)),
        Case.of(model=_Model("a GPT of 2 blocks without feed-forward networks", _TINY, seed=2, change="no_ffn"),
                **batch(_TINY, 2)),
    ]


def reference_block_gradient_norms(model, tokens, targets):
    """The package's probe, :func:`tutorial_lib.recipes.ablation.block_gradient_norms`."""
    return block_gradient_norms(model, tokens, targets)


@mistake_builder
def _probe_like(*, zero_grad=True, what="grad", combine="norm", matrices_only=False, reduction="mean"):
    """A learner's probe; each keyword reproduces one way of getting it wrong."""

    def block_gradient_norms(model, tokens, targets):
        if zero_grad:
            model.zero_grad()
        logits = model(tokens)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction=reduction)
        loss.backward()
        norms = []
        for block in model.blocks:
            tensors = [p.grad if what == "grad" else p.detach() for p in block.parameters()
                       if p.grad is not None and (p.dim() >= 2 or not matrices_only)]
            if combine == "norm":
                norms.append(torch.sqrt(sum((t**2).sum() for t in tensors)))
            elif combine == "sum_of_norms":
                norms.append(sum(t.norm() for t in tensors))
            else:  # the mean absolute entry
                norms.append(torch.cat([t.flatten() for t in tensors]).abs().mean())
        return torch.stack(norms)

    return block_gradient_norms


def _probe_reversed(model, tokens, targets):
    return block_gradient_norms(model, tokens, targets).flip(0)


def _probe_squared(model, tokens, targets):
    return block_gradient_norms(model, tokens, targets) ** 2


def _probe_with_embedding(model, tokens, targets):
    norms = block_gradient_norms(model, tokens, targets)
    return torch.cat([model.embed.weight.grad.norm()[None], norms])


BLOCK_GRADIENT_NORMS = Exercise(
    id="11.block_gradient_norms",
    forbidden=(block_gradient_norms,),
    reference=reference_block_gradient_norms,
    cases=_probe_cases,
    points=2,
    call=_probe_call,
    outputs=("the norm per block",),
    axes={"the norm per block": "n_layers"},
    checked=(
        "tiny float64 GPTs of 3 blocks (one fresh, one still holding old gradients), without residual connections, "
        "and of 2 blocks without feed-forward networks: one norm per block, ‖∂L/∂θ‖₂ over all its parameters"
    ),
    mistakes=(
        Mistake("stale_gradients", "kept the gradients the model already held, so the old ones were added to the new",
                "`backward()` adds to `.grad`: call `model.zero_grad()` before it, since a model handed over after a "
                "training step still holds that step's gradients.", (_probe_like(zero_grad=False),)),
        Mistake("norm_of_weights", "measured the norm of the parameters instead of the norm of their gradients",
                "Read `p.grad`, not `p`: the probe asks how much each block would change, not how large it is.",
                (_probe_like(what="weights"),)),
        Mistake("sum_of_norms", "added up the norms of the block's tensors instead of taking the norm of all of them",
                "The norm over all the block's parameters is the square root of the sum of all their squared "
                "entries, pooled over every tensor; adding up each tensor's own norm gives a larger number.",
                (_probe_like(combine="sum_of_norms"),)),
        Mistake("mean_absolute_gradient", "averaged the absolute gradient entries instead of taking their norm",
                "A mean depends on how many parameters the block has; ‖g‖₂ = sqrt(Σ g²) does not divide by it.",
                (_probe_like(combine="mean_abs"),)),
        Mistake("weight_matrices_only", "left out the biases and norm gains, measuring the weight matrices only",
                "Every parameter of the block counts: iterate over `block.parameters()` without filtering on `p.dim()`.",
                (_probe_like(matrices_only=True),)),
        Mistake("summed_loss", "used the summed cross-entropy instead of the mean",
                "With `reduction='sum'` every gradient is multiplied by batch · seq; the probe uses "
                "`F.cross_entropy`'s default mean loss, as training does.", (_probe_like(reduction="sum"),)),
    ),
    mutants=(
        Mutant("reversed_blocks", "lists the blocks from the last to the first", _probe_reversed),
        Mutant("squared_norms", "returns ‖g‖² instead of ‖g‖", _probe_squared),
        Mutant("with_embedding", "puts the embedding's gradient norm first", _probe_with_embedding),
    ),
)


# --- 11.within_noise --------------------------------------------------------------------------------------------------


def reference_within_noise(baseline_losses, row_losses, confidence=0.95):
    """The package's :func:`tutorial_lib.recipes.ablation.within_noise`."""
    return within_noise(baseline_losses, row_losses, confidence=confidence)


def _noise_call(obj, args) -> dict:
    baseline_losses, row_losses, confidence = args
    marks = obj(baseline_losses, row_losses, confidence=confidence)
    if not isinstance(marks, dict):
        raise WrongOutput("wrong_type", f"within_noise should return a dict from row name to True or False, got a value "
                                        f"of type {type(marks).__name__}")
    def plain(value):  # numpy and 0-d tensor booleans are understood as the bools they hold
        if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype == torch.bool:
            return bool(value.item())
        if isinstance(value, np.bool_):
            return bool(value)
        return value

    return {name: plain(value) for name, value in marks.items()}


def _rows(baseline: list[float], differences: dict[str, list[float]]) -> dict[str, list[float]]:
    """Rows built seed by seed from the baseline's runs: row_i = baseline_i + d_i (rounded as a table prints them)."""
    return {name: [round(b + d, 4) for b, d in zip(baseline, ds)] for name, ds in differences.items()}


# Each baseline has a large seed effect (its losses spread by a few hundredths) that the rows share, as real rows do:
# paired, the effect cancels; against the baseline's own spread, or unpaired, it does not. The rows' paired t
# statistics lie between the thresholds that the catalogued mistakes use instead of Student's t on n - 1 degrees of
# freedom (1.96, a one-sided quantile, n degrees of freedom, s without 1/√n, n in the denominator of s); the five-seed
# baseline's last two seeds land higher than its first three, so that a row of three seeds compared with all five
# differs from one compared with the first three.
_FIVE = [2.041, 2.012, 2.066, 2.080, 2.075]
_THREE = [3.110, 3.162, 3.131]


def _noise_cases(generator: torch.Generator) -> list[Case]:
    five = _rows(_FIVE, {
        "a": [0.030, 0.034, 0.027, 0.031, 0.029],
        "b": [-0.012, -0.010, -0.014, -0.011, -0.013],
        "c": [0.010, -0.002, 0.006, 0.014, 0.002],
        "d": [-0.010, 0.002, -0.006, -0.014, -0.002],
        "e": [0.012, -0.001, 0.007, 0.016, 0.006],
        "f": [0.008, -0.004, 0.005, 0.013, 0.001],
        "g": [0.008, -0.010, 0.004, 0.012, -0.004],
        "h": [0.010, 0.005, 0.008, 0.013, 0.006],
        "i (three seeds)": [0.012, 0.005, 0.016],
        "j (three seeds)": [0.010, 0.006, 0.014],
        "k (three seeds)": [0.020, 0.018, 0.022],
        "l (three seeds)": [-0.056, -0.054, -0.055],
        "m": [0.0, 0.0, 0.0, 0.0, 0.0],
        "s": [0.049, 0.051, 0.050, 0.052, 0.048],
    })
    three = _rows(_THREE, {
        "n": [-0.012, -0.005, -0.016],
        "o": [0.010, 0.006, 0.014],
        "p": [0.021, 0.014, 0.017],
        "q": [0.021, 0.016, 0.018],
        "r": [0.300, 0.290, 0.310],
    })
    return [
        Case.of(baseline_losses=_FIVE, row_losses=five, confidence=0.95, note="five seeds, rows of three and five"),
        Case.of(baseline_losses=_THREE, row_losses=three, confidence=0.95, note="three seeds"),
        Case.of(baseline_losses=_FIVE, row_losses=five, confidence=0.9, note="five seeds, a 90% interval"),
        Case.of(baseline_losses=_FIVE, row_losses={"one seed": [2.05]}, confidence=0.95,
                note="a row of one seed: bad input"),
    ]


@mistake_builder
def _noise_like(*, paired=True, centre="same_seed", quantile="t", df_offset=1, spread="sample", sqrt_n=True,
                sides="two", cap_row=True):
    """A learner's within_noise; each keyword reproduces one way of getting it wrong."""

    def within_noise(baseline_losses, row_losses, confidence=0.95):
        marks = {}
        for name, losses in row_losses.items():
            n = len(losses)
            if n < 2:
                raise ValueError(f"row {name!r} needs at least two seeds")
            base = baseline_losses[:n] if cap_row else baseline_losses
            if paired:
                reference = [statistics.mean(base)] * n if centre == "mean" else base
                values = [x - b for x, b in zip(losses, reference)]
                mean = statistics.mean(values)
                sd = statistics.pstdev(values) if spread == "population" else statistics.stdev(values)
                se = sd / math.sqrt(n) if sqrt_n else sd
                df = n - df_offset
            else:  # two independent samples (Welch's standard error)
                mean = statistics.mean(losses) - statistics.mean(base)
                se = math.sqrt(statistics.variance(losses) / n + statistics.variance(base) / len(base))
                df = n + len(base) - 2
            if quantile == "t":
                level = confidence if sides == "one" else 0.5 + confidence / 2
                q = t_quantile(level, df)
            else:
                q = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
            marks[name] = mean - q * se <= 0 <= mean + q * se
        return marks

    return within_noise


def _noise_baseline_sigma(baseline_losses, row_losses, confidence=0.95):
    # The old rule: the row's mean against two standard deviations of the baseline's seeds.
    if any(len(losses) < 2 for losses in row_losses.values()):
        raise ValueError("every row needs two seeds")
    mean, sigma = statistics.mean(baseline_losses), statistics.stdev(baseline_losses)
    return {name: abs(statistics.mean(losses) - mean) <= 2 * sigma for name, losses in row_losses.items()}


def _noise_inverted(baseline_losses, row_losses, confidence=0.95):
    return {name: not mark for name, mark in within_noise(baseline_losses, row_losses, confidence=confidence).items()}


def _noise_strict(baseline_losses, row_losses, confidence=0.95):
    marks = {}
    for name, losses in row_losses.items():
        c = compare_paired(baseline_losses[: len(losses)], losses, confidence=confidence)
        marks[name] = c.low < 0 < c.high
    return marks


def _noise_fixed_confidence(baseline_losses, row_losses, confidence=0.95):
    return within_noise(baseline_losses, row_losses, confidence=0.95)


WITHIN_NOISE = Exercise(
    id="11.within_noise",
    forbidden=(within_noise,),
    reference=reference_within_noise,
    cases=_noise_cases,
    points=1,
    call=_noise_call,
    outputs=("the dict of marks",),
    checked=(
        "baselines of five and three seeds with a large seed effect, rows of three and five seeds better and worse "
        "than the baseline, 95% and 90% intervals, and a row of one seed refused with a ValueError"
    ),
    mistakes=(
        Mistake("baseline_sigma", "compared the row's mean with k·σ of the baseline's seeds, not the paired differences "
                "with their interval",
                "σ of the baseline holds the seed effect that the row shares; a row and the baseline trained with the "
                "same seed move together. Subtract seed by seed, each loss of the row minus the baseline's loss of the "
                "same seed, and build the interval of those differences.", (_noise_baseline_sigma,)),
        Mistake("unpaired", "compared the two sets of runs as independent samples instead of pairing them by seed",
                "Seed i of the row and seed i of the baseline share their initial weights and batches: their "
                "difference cancels what the seed does. Take the differences seed by seed and one interval of them; "
                "an unpaired interval keeps the seed effect and comes out far wider.",
                (_noise_like(paired=False), _noise_like(centre="mean"))),
        Mistake("z_quantile", "used the normal quantile 1.96 instead of Student's t on n − 1 degrees of freedom",
                "With 3 or 5 seeds the standard deviation is itself uncertain: the 95% quantile is 4.30 (n = 3) or 2.78 "
                "(n = 5), from `t_quantile` with n − 1 degrees of freedom, not 1.96.", (_noise_like(quantile="z"),)),
        Mistake("one_sided_quantile", "took the t quantile at `confidence` instead of (1 + confidence) / 2",
                "A two-sided 95% interval leaves 2.5% in each tail: ask `t_quantile` for the 97.5% point, "
                "(1 + confidence) / 2, not for `confidence` itself.", (_noise_like(sides="one"),)),
        Mistake("degrees_of_freedom_n", "gave the t quantile n degrees of freedom instead of n − 1",
                "The standard deviation of n differences uses up one degree of freedom for their mean: n − 1.",
                (_noise_like(df_offset=0),)),
        Mistake("forgot_sqrt_n", "used the standard deviation of the differences instead of the standard error s / √n",
                "The interval is about the *mean* difference, whose spread is s / √n.", (_noise_like(sqrt_n=False),)),
        Mistake("population_std", "took the population standard deviation of the differences (n in the denominator)",
                "From a few seeds, dividing by n underestimates the spread: use `statistics.stdev` (n − 1), not "
                "`statistics.pstdev` or `np.std` with its default ddof=0.", (_noise_like(spread="population"),)),
        Mistake("whole_baseline", "paired a row of fewer seeds with all of the baseline's seeds",
                "A row of 3 seeds pairs with the baseline's seeds 0, 1 and 2 only, as many as the row has. `zip` "
                "stops at the shorter sequence, but a mean or a spread of the whole baseline does not.",
                (_noise_like(centre="mean", cap_row=False), _noise_like(paired=False, cap_row=False))),
    ),
    mutants=(
        Mutant("inverted", "returns True for the rows that the interval separates from the baseline", _noise_inverted),
        Mutant("strict_inequality", "uses < where the definition has <=", _noise_strict),
        Mutant("fixed_confidence", "ignores the confidence argument", _noise_fixed_confidence),
    ),
)



# --- 11.build_ablated_model (build) ------------------------------------------------------------------------------------
# The runner's first half, composed from a Change's three parts: the configuration fields it replaces, the model class
# it builds (GPT unless it says), and the surgery it performs on the built model, all initialised from the run's seed
# so that a row and the baseline of the same seed start from the same draws.

_NOTEBOOK_SEED = 1234  # the global RNG as a notebook leaves it: an answer that does not seed builds from this state


class _ShownChange(Change):
    """A Change that verdicts show by its name and description."""

    def __repr__(self) -> str:
        return f"<the change {self.name}: {self.description}>"


def _untied_gpt(cfg: GPTConfig) -> GPT:
    return GPT(cfg.replace(tie_embeddings=False))


def _drop_positions(model: GPT) -> None:
    model.pos_embed = None


def _drop_ffn(model: GPT) -> None:
    for block in model.blocks:
        block.ffn, block.ffn_residual = nn.Identity(), Skip()


def _build_call(obj, args) -> tuple[torch.Tensor, int]:
    change, seed, model_cfg, tokens = args
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_NOTEBOOK_SEED)
        model = obj(change, seed=seed, model_cfg=model_cfg)
    if not isinstance(model, nn.Module):
        raise WrongOutput("wrong_type", f"build_ablated_model should return the built model (an nn.Module), got a "
                                        f"value of type {type(model).__name__}")
    model.eval()
    with torch.no_grad():
        logits = model(tokens)
    return logits, sum(p.numel() for p in model.parameters())


def _build_cases(generator: torch.Generator) -> list[Case]:
    def tokens() -> torch.Tensor:
        return torch.randint(_TINY.d_vocab, (2, _TINY.n_ctx), generator=generator)

    return [
        Case.of(change=_ShownChange("baseline", "nothing changed"), seed=4, model_cfg=_TINY, tokens=tokens()),
        Case.of(change=_ShownChange("one_head", "one head instead of two", model={"n_heads": 1}), seed=0,
                model_cfg=_TINY, tokens=tokens()),
        Case.of(change=_ShownChange("no_ffn", "no feed-forward network", surgery=_drop_ffn), seed=1, model_cfg=_TINY,
                tokens=tokens()),
        Case.of(change=_ShownChange("post_norm_no_positions", "post-norm, without positions",
                                    model={"placement": "post"}, surgery=_drop_positions),
                seed=2, model_cfg=_TINY, tokens=tokens()),
        Case.of(change=_ShownChange("untied_wide", "untied embeddings, d_ff 24", model={"d_ff": 24}, build=_untied_gpt),
                seed=3, model_cfg=_TINY, tokens=tokens()),
    ]


def reference_build_ablated_model(change, *, seed=0, model_cfg=_TINY):
    """The package's :func:`tutorial_lib.recipes.ablation.build_ablated_model`."""
    return build_ablated_model(change, seed=seed, model_cfg=model_cfg)


@mistake_builder
def _build_like(*, replace=True, replace_for_build=True, seed_when="before", surgery="apply", builder=True,
                seed_offset=0, fixed_seed=None, base_cfg=None):
    """A learner's build_ablated_model; each keyword reproduces one way of getting it wrong."""

    def build_ablated_model(change, *, seed=0, model_cfg=_TINY):
        base = model_cfg if base_cfg is None else base_cfg
        cfg = base.replace(**change.model) if replace else base
        if seed_when == "before":
            torch.manual_seed(seed + seed_offset if fixed_seed is None else fixed_seed)
        elif seed_when == "generator":
            torch.Generator().manual_seed(seed)  # a generator of its own, which GPT's initialisation never reads
        if builder and change.build is not None:
            model = change.build(cfg if replace_for_build else base)
        else:
            model = GPT(cfg)
        if seed_when == "after":
            torch.manual_seed(seed)
        if change.surgery is not None:
            if surgery == "apply":
                change.surgery(model)
            elif surgery == "assign":
                model = change.surgery(model)
        return model

    return build_ablated_model


BUILD_ABLATED_MODEL = Exercise(
    id="11.build_ablated_model",
    forbidden=(build_ablated_model,),
    reference=reference_build_ablated_model,
    cases=_build_cases,
    points=3,
    call=_build_call,
    outputs=("the logits", "the parameter count"),
    axes={"the logits": "batch seq d_vocab"},
    checked=(
        "five changes to a tiny GPT (nothing, a configuration field, a surgery, both, and a model class of its own "
        "with a field), each from its own seed: the same logits and the same number of parameters as the runner's model"
    ),
    mistakes=(
        Mistake("config_change_ignored", "built the model from `model_cfg` without the change's configuration fields",
                "A change such as one_head is nothing but its fields: apply `change.model` to `model_cfg` with its "
                "`replace` method, and hand that configuration to the change's own builder too.",
                (_build_like(replace=False), _build_like(replace_for_build=False))),
        Mistake("surgery_skipped", "never applied the change's surgery",
                "A change such as no_ffn edits the built model: call `change.surgery` on it when it is not None.",
                (_build_like(surgery="skip"),)),
        Mistake("seeded_after_building", "drew the initial weights before seeding the global generator (or never "
                "seeded it)",
                "GPT's initialisation draws from torch's global generator when the model is built: seed it with "
                "`torch.manual_seed` and the run's seed just before building, so that a row and the baseline of one "
                "seed start from the same draws. A `torch.Generator` of your own is never read by `nn.Linear`.",
                (_build_like(seed_when="after"), _build_like(seed_when="never"), _build_like(seed_when="generator"))),
        Mistake("builder_ignored", "built a GPT even when the change brings its own model class",
                "`change.build`, when it is not None, replaces `GPT`: call it with the configuration to get the model.",
                (_build_like(builder=False),)),
        Mistake("surgery_result_assigned", "assigned what the surgery returns to the model",
                "A surgery edits the model in place and returns None: call `change.surgery` without assigning its "
                "result, and keep `model`.", (_build_like(surgery="assign"),)),
    ),
    mutants=(
        Mutant("seed_fixed_zero", "seeds with 0 whatever the seed", _build_like(fixed_seed=0)),
        Mutant("seed_off_by_one", "seeds with seed + 1", _build_like(seed_offset=1)),
        Mutant("default_config", "builds from a fixed configuration of its own instead of `model_cfg`",
               _build_like(base_cfg=_TINY.replace(d_model=24, n_heads=2))),
    ),
)


# --- 11.ablated_gpt (build: the chapter's removals, made on the learner's own GPT of chapter 08) ----------------------
# The learner subclasses their GPT: AblatedGPT(..., remove=...) builds it without the parts named, each removal the
# one the chapter's table trains (a removed sublayer adds nothing and takes its norm with it; "norms" removes the final
# one too; the causal mask goes from every block). The check puts random weights in by name, runs the tokens and
# compares the logits and the number of parameters: a part left in place but unused still counts.

ABLATABLE_PARTS = ("attention", "ffn", "positions", "norms", "causal_mask")


def _check_remove(remove) -> frozenset:
    unknown = sorted(set(remove) - set(ABLATABLE_PARTS))
    if unknown:
        raise ValueError(f"remove must name parts among {ABLATABLE_PARTS}, got {unknown}")
    return frozenset(remove)


class _Nothing(nn.Module):
    """A removed sublayer: whatever it is handed, it adds nothing to the stream."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return torch.zeros_like(x)


class ReferenceAblatedGPT(BookGPT):
    """Chapter 08's GPT without the parts named in ``remove``; each removal computes what the runner's change of the
    same row computes on the package's GPT (``no_ffn``, ``no_positions``, ``no_norm``, ``no_causal_mask``, and
    exercise 1's attention removal; tested with the weights copied across)."""

    def __init__(self, d_vocab: int, n_ctx: int, d_model: int, n_heads: int, n_layers: int, d_ff: int,
                 kind: str = "gelu_tanh", remove=()) -> None:
        super().__init__(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind)
        self.remove = _check_remove(remove)
        for block in self.blocks:
            if "attention" in self.remove:
                block.ln_1, block.attn = nn.Identity(), _Nothing()
            if "ffn" in self.remove:
                block.ln_2, block.ffn = nn.Identity(), _Nothing()
            if "norms" in self.remove:
                block.ln_1, block.ln_2 = nn.Identity(), nn.Identity()
        if "norms" in self.remove:
            self.ln_final = nn.Identity()
        if "positions" in self.remove:
            self.pos_embed = None

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        if seq > self.n_ctx:
            raise ValueError(f"tokens has {seq} positions, more than n_ctx={self.n_ctx}")
        x = self.embed(tokens)
        if self.pos_embed is not None:
            x = x + self.pos_embed.weight[:seq]
        causal = torch.ones(seq, seq, dtype=torch.bool, device=tokens.device).tril()
        mask = None if "causal_mask" in self.remove else causal
        for block in self.blocks:
            x = block(x, mask=mask)
        return self.unembed(self.ln_final(x))


def _ablated_weights(sizes: GPTSizes, remove, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random weights for the parts the reference keeps (the unembedding tied to the token embedding)."""
    with torch.device("meta"):
        kept = ReferenceAblatedGPT(*sizes.args(), remove=remove).state_dict().keys()
    weights = _random_gpt_weights(sizes, generator)
    return {name: tensor for name, tensor in weights.items() if name in kept}


def _ablated_cases(generator: torch.Generator) -> list[Case]:
    relu = dataclasses.replace(SMALL_GPT, n_layers=3, kind="relu")

    def case(remove, sizes=SMALL_GPT, seq=8, note=""):
        valid = set(remove) <= set(ABLATABLE_PARTS)
        return Case.of(sizes=sizes, remove=remove,
                       weights=_ablated_weights(sizes, remove if valid else (), generator),
                       tokens=torch.randint(0, sizes.d_vocab, (2, seq), generator=generator), note=note)

    return [
        case(("attention",), note="the attention sublayers removed"),
        case(("ffn",), sizes=relu, seq=6, note="the feed-forward networks removed, a ReLU GPT of 3 blocks"),
        case(("positions",), note="the position embedding removed"),
        case(("norms",), sizes=relu, note="every LayerNorm removed"),
        case(("causal_mask",), seq=5, note="the causal mask removed"),
        case(("attention", "positions"), note="attention and positions removed: what chapter 11's exercise 2 trains"),
        case(["ffn", "norms", "causal_mask"], sizes=relu, note="three parts removed, named in a list"),
        case((), note="nothing removed: your GPT of chapter 08"),
        case(("heads",), note="a part the exercise does not offer: a ValueError"),
    ]


def _ablated_call(cls, args) -> tuple[torch.Tensor, int]:
    sizes, remove, weights, tokens = args
    what = "AblatedGPT(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind, remove)"
    module = build_module(functools.partial(cls, remove=remove), sizes.args(), what).eval()
    own = module.state_dict()
    weights = {**weights, "unembed.weight": weights["embed.weight"]}
    missing = sorted(weights.keys() - own.keys())
    if missing:
        raise WrongOutput("wrong_type", f"{what} lacks {', '.join(missing[:4])}: removing {sorted(remove)} keeps "
                                        "those, under the names of your GPT of chapter 08")
    # a part the reference removes but the answer keeps keeps its own initial values: it still counts
    state = {name: weights.get(name, tensor) for name, tensor in own.items()}
    with torch.no_grad():
        logits = torch.func.functional_call(module, state, (tokens,), strict=True)
    return logits, sum(p.numel() for p in module.parameters())


class _PassesItsInput(nn.Module):
    def forward(self, x, mask=None):
        return x


@mistake_builder
def _ablated_like(*, sublayer="nothing", its_norm="removed", final_norm="removed", positions="removed",
                  mask="removed", blocks="all", refuse=True):
    """A learner's AblatedGPT on a learner's GPT; each keyword reproduces one way of getting it wrong."""

    class MyAblatedGPT(_gpt_module_like()):
        def __init__(self, d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind="gelu_tanh", remove=()):
            super().__init__(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind)
            if refuse and not set(remove) <= set(ABLATABLE_PARTS):
                raise ValueError(f"unknown parts in remove: {remove}")
            self.remove = set(remove)
            gone = _Nothing if sublayer == "nothing" else _PassesItsInput
            for block in self.blocks if blocks == "all" else self.blocks[:1]:
                if "attention" in remove:
                    block.attn = gone()
                    if its_norm == "removed":
                        block.ln_1 = nn.Identity()
                if "ffn" in remove:
                    block.ffn = gone()
                    if its_norm == "removed":
                        block.ln_2 = nn.Identity()
                if "norms" in remove:
                    block.ln_1, block.ln_2 = nn.Identity(), nn.Identity()
            if "norms" in remove and final_norm == "removed":
                self.ln_final = nn.Identity()
            if "positions" in remove and positions == "removed":
                self.pos_embed = None
            elif "positions" in remove and positions == "zeroed":
                with torch.no_grad():
                    self.pos_embed.weight.zero_()

        def forward(self, tokens):
            seq = tokens.shape[1]
            if seq > self.n_ctx:
                raise ValueError(f"{seq} positions, more than n_ctx={self.n_ctx}")
            x = self.embed(tokens)
            if "positions" not in self.remove or positions != "removed":
                x = x + self.pos_embed.weight[:seq]
            mask_ = torch.ones(seq, seq, dtype=torch.bool).tril()
            if "causal_mask" in self.remove and mask == "removed":
                mask_ = None
            for block in self.blocks:
                x = block(x, mask=mask_)
            return self.unembed(self.ln_final(x))

    return MyAblatedGPT


def _removes_attention_too():
    """An answer that removes the parts named, and the attention whenever anything is removed."""

    class Overreaching(_ablated_like()):
        def __init__(self, *args, remove=(), **kwargs):
            super().__init__(*args, remove=tuple(remove) + (("attention",) if remove else ()), **kwargs)

    return Overreaching


def _removes_the_first_part_only():
    """An answer written for one part at a time: it removes the first part named and ignores the others."""

    class OnePart(_ablated_like()):
        def __init__(self, *args, remove=(), **kwargs):
            super().__init__(*args, remove=tuple(remove)[:1], **kwargs)

    return OnePart


ABLATED_GPT = Exercise(
    id="11.ablated_gpt",
    # the package's models and the modules the learner built in chapters 03 to 08 are the learner's to use, not these
    forbidden=(GPT, BookGPT, ReferenceAblatedGPT, BookBlock, TransformerBlock, MultiHeadAttention, FeedForward, LayerNorm,
               nn.LayerNorm, F.layer_norm, nn.MultiheadAttention, F.scaled_dot_product_attention,
               nn.TransformerDecoderLayer, nn.TransformerEncoderLayer, build_ablated_model),
    reference=ReferenceAblatedGPT,
    call=_ablated_call,
    cases=_ablated_cases,
    points=4,
    outputs=("the logits", "the number of parameters"),
    axes={"the logits": "batch seq d_vocab"},
    checked=(
        "tiny GPTs (GPT-2's FFN and a ReLU one) with every weight random, put in your layers by name, each part removed "
        "on its own, two and three parts together, nothing removed, and a part the exercise does not offer (a "
        "ValueError): the same logits and the same number of parameters as the book's removals"
    ),
    mistakes=(
        Mistake("sublayer_passes_its_input", "replaced a removed sublayer with one that hands its input on",
                "In a residual block the sublayer's output is added to the stream: a removed sublayer must add "
                "nothing, not its input, which adds the normed stream to itself.",
                (_ablated_like(sublayer="identity"),)),
        Mistake("norm_left_behind", "removed a sublayer but kept the norm in front of it",
                "The norm before a sublayer feeds only that sublayer: with it gone the norm computes nothing the "
                "model uses, yet its γ and β still count and would still be trained. Remove it with its sublayer.",
                (_ablated_like(its_norm="kept"),)),
        Mistake("final_norm_kept", "removed the blocks' norms but kept the final LayerNorm",
                "The chapter's no_norm row has no LayerNorm anywhere: the one before the unembedding goes too.",
                (_ablated_like(final_norm="kept"),)),
        Mistake("positions_kept", "left the position embedding in the forward pass",
                "Without positions the stream starts from the token embeddings alone: the forward pass must not add "
                "the position table, and the table should go from the model.",
                (_ablated_like(positions="kept"),)),
        Mistake("position_table_kept", "stopped adding the positions but kept their table in the model",
                "A removed part counts for nothing: a zeroed table, or one the forward pass no longer reads, still "
                "holds n_ctx × d_model parameters. Take it out of the model.",
                (_ablated_like(positions="zeroed"),)),
        Mistake("still_causal", "kept the causal mask when asked to remove it",
                "Without the causal mask every position attends to every other, the future included: hand the "
                "blocks no mask at all.", (_ablated_like(mask="kept"),)),
        Mistake("first_block_only", "removed the parts from the first block only",
                "Each removal is made in every block of `self.blocks`.", (_ablated_like(blocks="first"),)),
        Mistake("unknown_part_accepted", "built a model when `remove` named a part the exercise does not offer",
                "A misspelt part would silently train the full model: raise a ValueError that names `remove` and the "
                "parts it may hold, before building anything.", (_ablated_like(refuse=False),)),
    ),
    mutants=(
        Mutant("removes_attention_too", "removes the attention whenever it removes anything", _removes_attention_too()),
        Mutant("first_part_only", "removes the first part named and ignores the others", _removes_the_first_part_only()),
    ),
)


# --- 11.predict_no_attention_loss (predict, then measure) -------------------------------------------------------------


def _measure_bigram_bound() -> float:
    from tutorial_lib.data.shakespeare import load_shakespeare_char

    dataset = load_shakespeare_char()
    return bigram_cross_entropy(bigram_probabilities(dataset), dataset.val)


PREDICT_NO_ATTENTION_LOSS = predict_number(
    "11.predict_no_attention_loss",
    measure=_measure_bigram_bound,
    question="the lowest loss without attention",
    within=1.2,
    points=1,
    misconceptions=[
        Misconception("learns_nothing", math.log(65),
                      "expected a model without attention to learn nothing, so that it stays at the uniform loss ln 65",
                      "Attention is gone, but each position still reads its own character through the embedding: "
                      "the model learns which character tends to follow it, the bigram statistics."),
        Misconception("frequencies_only", 3.3,
                      "expected it to know only how often each character occurs (the unigram entropy, about 3.3 nats)",
                      "That is a model that sees nothing at all. Position t still sees its own character, and the next "
                      "character depends on it strongly (after 'q' comes 'u'): the floor is the bigram cross-entropy."),
        Misconception("bits_not_nats", 3.58,
                      "gave the bigram bound in bits (about 3.6) where the losses are in nats",
                      "The cross-entropy the book reports uses the natural log: divide a value in bits by log2(e) ≈ 1.44."),
        Misconception("memorises", 0.0,
                      "expected the feed-forward networks to memorise the text and reach a loss near zero",
                      "Without attention no position reads another: whatever its layers compute, the prediction at t "
                      "is a function of the character at t (and t itself), so it cannot beat the bigram statistics."),
    ],
    mutants=[
        wrong_prediction("ten_nats", 10.0, "a loss far above the uniform one"),
        wrong_prediction("one_nat", 1.0, "a loss below what a bigram model can reach, no misconception's value"),
    ],
)


register(REMOVE_ATTENTION, PREDICT_NO_ATTENTION_LOSS, BLOCK_GRADIENT_NORMS, WITHIN_NOISE, BUILD_ABLATED_MODEL,
         ABLATED_GPT)
