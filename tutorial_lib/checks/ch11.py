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

As in ``ch03``, the mistakes are written the way a learner would write them, unannotated.
"""

from __future__ import annotations

import math
import numbers
import statistics
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tutorial_lib.recipes.ablation import Skip, block_gradient_norms, build_ablated_model, within_noise
from tutorial_lib.stats import compare_paired, t_quantile
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, WrongOutput, register
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


def _attention_returns_input(model):
    for block in model.blocks:
        block.attn = _PassThrough()


def _attention_is_identity(model):
    for block in model.blocks:
        block.attn = nn.Identity()


def _first_block_only(model):
    model.blocks[0].attn = nn.Identity()
    model.blocks[0].attn_residual = Skip()


def _first_block_by_early_return(model):
    for block in model.blocks:
        block.attn, block.attn_residual = nn.Identity(), Skip()
        return


def _zeroed_projection(model):
    with torch.no_grad():
        for block in model.blocks:
            block.attn.out_proj.weight.zero_()
            block.attn.out_proj.bias.zero_()


def _zeroed_projection_by_fill(model):
    for block in model.blocks:
        nn.init.zeros_(block.attn.out_proj.weight)
        nn.init.zeros_(block.attn.out_proj.bias)


def _removed_ffn(model):
    for block in model.blocks:
        block.ffn, block.ffn_residual = nn.Identity(), Skip()


def _removed_blocks(model):
    model.blocks = nn.ModuleList()


def _skip_only(model):
    for block in model.blocks:
        block.attn_residual = Skip()


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
    hint=(
        "as `_no_ffn` does for the feed-forward network: in every block, replace the attention by `nn.Identity()` and "
        "its residual connection by `Skip()`, so that nothing of the sublayer computes, counts or learns."
    ),
    mistakes=(
        Mistake("identity_inside_residual", "replaced the attention by a module that returns its input, inside its "
                "residual connection",
                "The residual connection is still there: a pre-norm block then computes x + Norm(x), a post-norm one "
                "Norm(x + x). Replace the residual connection too (`block.attn_residual = Skip()`), so the stream "
                "passes unchanged.", (_attention_returns_input, _attention_is_identity)),
        Mistake("first_block_only", "removed the attention of the first block only",
                "Loop over every block of `model.blocks`, and do not `return` inside the loop.",
                (_first_block_only, _first_block_by_early_return)),
        Mistake("zeroed_output_projection", "zeroed the attention's output projection instead of removing the attention",
                "A zeroed layer computes nothing today but still counts in the parameters, and its gradient is not "
                "zero: the first update grows it back. Remove the modules themselves.",
                (_zeroed_projection, _zeroed_projection_by_fill)),
        Mistake("removed_ffn_instead", "removed the feed-forward network instead of the attention",
                "The attention lives in `block.attn` and `block.attn_residual`; `block.ffn` is the other sublayer.",
                (_removed_ffn,)),
        Mistake("removed_whole_blocks", "removed the whole blocks, feed-forward networks included",
                "Keep the blocks and their feed-forward networks: only the attention sublayer goes.", (_removed_blocks,)),
        Mistake("left_attention_parameters", "bypassed the attention but left its weights in the model",
                "The output is right, but the attention's weights still count in the parameters (and in the ablation "
                "table). Replace `block.attn` by `nn.Identity()` as well.", (_skip_only,)),
    ),
    mutants=(
        Mutant("all_but_last", "removes the attention of every block but the last", _all_but_last),
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
    hint=(
        "`model.zero_grad()`, then the mean next-token cross-entropy of (tokens, targets) and `backward()`; for each "
        "block of `model.blocks`, the square root of the sum of `(p.grad ** 2).sum()` over `block.parameters()` that "
        "have a gradient, biases and norm gains included; return them stacked, block 0 first."
    ),
    mistakes=(
        Mistake("stale_gradients", "kept the gradients the model already held, so the old ones were added to the new",
                "`backward()` adds to `.grad`: call `model.zero_grad()` before it, since a model handed over after a "
                "training step still holds that step's gradients.", (_probe_like(zero_grad=False),)),
        Mistake("norm_of_weights", "measured the norm of the parameters instead of the norm of their gradients",
                "Read `p.grad`, not `p`: the probe asks how much each block would change, not how large it is.",
                (_probe_like(what="weights"),)),
        Mistake("sum_of_norms", "added up the norms of the block's tensors instead of taking the norm of all of them",
                "The norm over all the block's parameters is the square root of the sum of their squared entries: "
                "`sqrt(sum((g ** 2).sum() for g in grads))`, not `sum(g.norm() for g in grads)`.",
                (_probe_like(combine="sum_of_norms"),)),
        Mistake("mean_absolute_gradient", "averaged the absolute gradient entries instead of taking their norm",
                "A mean depends on how many parameters the block has; ‖g‖₂ = sqrt(Σ g²) does not divide by it.",
                (_probe_like(combine="mean_abs"),)),
        Mistake("weight_matrices_only", "left out the biases and norm gains, measuring the weight matrices only",
                "Every parameter of the block counts: iterate over `block.parameters()` without filtering on `p.dim()`.",
                (_probe_like(matrices_only=True),)),
        Mistake("summed_loss", "used the summed cross-entropy instead of the mean",
                "`F.cross_entropy(..., reduction='sum')` multiplies every gradient by batch · seq; the probe uses the "
                "mean loss, as training does.", (_probe_like(reduction="sum"),)),
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
    reference=reference_within_noise,
    cases=_noise_cases,
    points=1,
    call=_noise_call,
    outputs=("the dict of marks",),
    checked=(
        "baselines of five and three seeds with a large seed effect, rows of three and five seeds better and worse "
        "than the baseline, 95% and 90% intervals, and a row of one seed refused with a ValueError"
    ),
    hint=(
        "for each row of n seeds: the differences `row[i] - baseline_losses[i]` for i < n, their mean and "
        "`statistics.stdev` (n − 1), the margin `t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)`, and "
        "True when `mean - margin <= 0 <= mean + margin`; raise a ValueError for a row of fewer than two seeds."
    ),
    mistakes=(
        Mistake("baseline_sigma", "compared the row's mean with k·σ of the baseline's seeds, not the paired differences "
                "with their interval",
                "σ of the baseline holds the seed effect that the row shares; a row and the baseline trained with the "
                "same seed move together. Subtract seed by seed, `row[i] - baseline_losses[i]`, and build the interval "
                "of those differences.", (_noise_baseline_sigma,)),
        Mistake("unpaired", "compared the two sets of runs as independent samples instead of pairing them by seed",
                "Seed i of the row and seed i of the baseline share their initial weights and batches: their "
                "difference cancels what the seed does. Take the differences seed by seed and one interval of them; "
                "an unpaired interval keeps the seed effect and comes out far wider.",
                (_noise_like(paired=False), _noise_like(centre="mean"))),
        Mistake("z_quantile", "used the normal quantile 1.96 instead of Student's t on n − 1 degrees of freedom",
                "With 3 or 5 seeds the standard deviation is itself uncertain: the 95% quantile is 4.30 (n = 3) or 2.78 "
                "(n = 5), `t_quantile(0.5 + confidence / 2, n - 1)`, not 1.96.", (_noise_like(quantile="z"),)),
        Mistake("one_sided_quantile", "took the t quantile at `confidence` instead of (1 + confidence) / 2",
                "A two-sided 95% interval leaves 2.5% in each tail: the quantile is `t_quantile(0.5 + confidence / 2, "
                "n - 1)`.", (_noise_like(sides="one"),)),
        Mistake("degrees_of_freedom_n", "gave the t quantile n degrees of freedom instead of n − 1",
                "The standard deviation of n differences uses up one degree of freedom for their mean: n − 1.",
                (_noise_like(df_offset=0),)),
        Mistake("forgot_sqrt_n", "used the standard deviation of the differences instead of the standard error s / √n",
                "The interval is about the *mean* difference, whose spread is s / √n.", (_noise_like(sqrt_n=False),)),
        Mistake("population_std", "took the population standard deviation of the differences (n in the denominator)",
                "From a few seeds, dividing by n underestimates the spread: use `statistics.stdev` (n − 1), not "
                "`statistics.pstdev` or `np.std` with its default ddof=0.", (_noise_like(spread="population"),)),
        Mistake("whole_baseline", "paired a row of fewer seeds with all of the baseline's seeds",
                "A row of 3 seeds pairs with the baseline's seeds 0, 1 and 2: `baseline_losses[:len(row)]`. `zip` "
                "stops at the shorter sequence, but a mean or a spread of the whole baseline does not.",
                (_noise_like(centre="mean", cap_row=False), _noise_like(paired=False, cap_row=False))),
    ),
    mutants=(
        Mutant("inverted", "returns True for the rows that the interval separates from the baseline", _noise_inverted),
        Mutant("strict_inequality", "uses < where the definition has <=", _noise_strict),
        Mutant("fixed_confidence", "ignores the confidence argument", _noise_fixed_confidence),
    ),
)


register(REMOVE_ATTENTION, BLOCK_GRADIENT_NORMS, WITHIN_NOISE)
