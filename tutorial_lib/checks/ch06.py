"""Chapter 06's exercises: LayerNorm and RMSNorm from scratch, and the pre-norm residual block.

- ``06.layer_norm`` and ``06.rms_norm`` are compared with PyTorch's functions. The cases that tell the near misses
  apart: a width of 4 (where the unbiased variance is a third larger) with ε = 0.1 (where ε inside or outside the
  root differ by a lot), a nearly constant row (standard deviation 1e-3, below √ε), and ``batch == d_model`` so that
  statistics over the wrong axis keep every shape.
- ``06.pre_norm_residual`` takes the norm and the sublayer as modules and must return x + Sublayer(Norm(x)).
- ``06.predict_deep_stream`` (predict, then measure, by running a 96-block stack): the length of the pre-norm stream
  leaving the last block at initialisation, given the chapter's measurements at 24 blocks.

As in ``ch03``, the mistakes are written the way a learner would write them and carry no annotations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tutorial_lib.checks.ch04 import _mha_like
from tutorial_lib.checks.ch05 import _feed_forward_like
from tutorial_lib.checks.compound import mistake_builder
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, register
from tutorial_lib.checks.modules import run_module
from tutorial_lib.feed_forward import FeedForward
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction
from tutorial_lib.multi_head import MultiHeadAttention
from tutorial_lib.blocks import Residual, TransformerBlock
from tutorial_lib.normalization import LayerNorm, RMSNorm

# --- 06.layer_norm ------------------------------------------------------------------------------------------------------


def reference_layer_norm(x, weight, bias, eps):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis, with the biased variance (PyTorch's)."""
    return F.layer_norm(x, weight.shape, weight, bias, eps)


def _norm_cases(generator: torch.Generator, *, with_bias: bool) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    def affine(d: int, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
        params = {"weight": 1 + 0.5 * randn(d, dtype=dtype)}
        if with_bias:
            params["bias"] = 0.5 * randn(d, dtype=dtype)
        return params

    nearly_constant = 2.0 + 1e-3 * randn(2, 3, 6, dtype=torch.float64)
    return [
        Case.of(x=3 * randn(2, 5, 8) + 1, **affine(8), eps=1e-5, note="d_model 8"),
        Case.of(x=2 * randn(3, 4) - 1, **affine(4), eps=0.1, note="d_model 4 and ε = 0.1"),
        Case.of(x=nearly_constant, **affine(6, torch.float64), eps=1e-5,
                note="float64, nearly constant rows: standard deviation 1e-3, below √ε"),
        Case.of(x=randn(4, 4) + 0.5, **affine(4), eps=1e-5, note="batch = d_model"),
    ]


@mistake_builder
def _layer_norm_like(*, unbiased=False, eps_outside=False, dim=-1, affine=True):
    """A learner's LayerNorm; each keyword reproduces one way of getting it wrong."""

    def layer_norm(x, weight, bias, eps):
        mean = x.mean(dim=dim, keepdim=True)
        var = x.var(dim=dim, keepdim=True, unbiased=unbiased)
        x_hat = (x - mean) / (var.sqrt() + eps) if eps_outside else (x - mean) / torch.sqrt(var + eps)
        return x_hat * weight + bias if affine else x_hat

    return layer_norm


def _layer_norm_no_eps(x, weight, bias, eps):
    return (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True, unbiased=False) * weight + bias


def _layer_norm_by_variance(x, weight, bias, eps):
    return (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, unbiased=False) + eps) * weight + bias


def _layer_norm_weight_only(x, weight, bias, eps):
    return F.layer_norm(x, weight.shape, weight, None, eps)


LAYER_NORM = Exercise(
    id="06.layer_norm",
    forbidden=(LayerNorm, F.layer_norm, torch.layer_norm, torch.native_layer_norm, nn.LayerNorm),
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    reference=reference_layer_norm,
    cases=lambda generator: _norm_cases(generator, with_bias=True),
    points=1,
    outputs=("the normalized x",),
    axes={"the normalized x": "d_model"},
    tolerance=(1e-5, 1e-5),
    checked=(
        "d_model 8 and 4 (with ε = 0.1), nearly constant rows in float64 and batch = d_model, against F.layer_norm"
    ),
    mistakes=(
        Mistake("unbiased_variance", "used the unbiased variance (divided by d_model - 1)",
                "LayerNorm divides by d_model: pass `unbiased=False` to `var`, or average the squared deviations "
                "yourself. "
                "`torch.var` and `torch.std` are unbiased by default.", (_layer_norm_like(unbiased=True),)),
        Mistake("eps_outside_root", "added ε to the standard deviation instead of to the variance",
                "ε goes inside the square root: add it to the variance, then take the root. Outside, it is a "
                "different function, far "
                "from PyTorch's when the variance is small.", (_layer_norm_like(eps_outside=True),)),
        Mistake("unbiased_std_eps_outside", "used the unbiased standard deviation with ε added outside the root",
                "That is a popular tutorial's LayerNorm, which divides by the unbiased standard deviation plus ε, not "
                "PyTorch's: use the biased variance and put ε inside the root, added to the variance.",
                (_layer_norm_like(unbiased=True, eps_outside=True),)),
        Mistake("wrong_axis", "computed the statistics over another axis than the last",
                "LayerNorm normalizes each position's d_model features: `dim=-1`. Over the batch (or the positions) "
                "it would be a batch norm.", (_layer_norm_like(dim=0), _layer_norm_like(dim=-2))),
        Mistake("forgot_affine", "left out the learned scale and shift (γ and β)",
                "Multiply by `weight` and add `bias` after normalizing: they let the model undo the normalization "
                "where it needs to.", (_layer_norm_like(affine=False),)),
    ),
    mutants=(
        Mutant("no_eps", "divides by the standard deviation without ε", _layer_norm_no_eps),
        Mutant("divided_by_variance", "divides by the variance instead of the standard deviation", _layer_norm_by_variance),
        Mutant("weight_only", "leaves out the bias", _layer_norm_weight_only),
    ),
)


# --- 06.rms_norm --------------------------------------------------------------------------------------------------------


def reference_rms_norm(x, weight, eps):
    """x / sqrt(mean(x²) + eps) * weight over the last axis (PyTorch's F.rms_norm)."""
    return F.rms_norm(x, weight.shape, weight, eps)


@mistake_builder
def _rms_norm_like(*, centre=False, eps_outside=False, dim=-1, scale=True, statistic="mean square"):
    """A learner's RMSNorm; each keyword reproduces one way of getting it wrong."""

    def rms_norm(x, weight, eps):
        if centre:
            x = x - x.mean(dim=dim, keepdim=True)
        square = x.pow(2).mean(dim=dim, keepdim=True) if statistic == "mean square" else x.pow(2).sum(dim=dim, keepdim=True)
        y = x / (square.sqrt() + eps) if eps_outside else x / torch.sqrt(square + eps)
        return y * weight if scale else y

    return rms_norm


def _rms_by_l2_normalize(x, weight, eps):
    return F.normalize(x, dim=-1, eps=eps) * weight


def _rms_mean_absolute(x, weight, eps):
    return x / (x.abs().mean(-1, keepdim=True) + eps) * weight


def _rms_no_eps(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) * weight


RMS_NORM = Exercise(
    id="06.rms_norm",
    forbidden=(RMSNorm, F.rms_norm, torch.rms_norm, nn.RMSNorm),
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    reference=reference_rms_norm,
    cases=lambda generator: _norm_cases(generator, with_bias=False),
    points=1,
    outputs=("the normalized x",),
    axes={"the normalized x": "d_model"},
    tolerance=(1e-5, 1e-5),
    checked="d_model 8 and 4 (with ε = 0.1), nearly constant rows in float64 and batch = d_model, against F.rms_norm",
    mistakes=(
        Mistake("subtracted_mean", "subtracted the mean, as LayerNorm does",
                "RMSNorm does not re-centre: divide x itself by its root mean square. (On nearly constant rows the "
                "difference is everything: the mean is most of the vector.)",
                (_rms_norm_like(centre=True),)),
        Mistake("eps_outside_root", "added ε to the root mean square instead of inside the root",
                "ε goes inside: add it to the mean of the squares, then take the square root.",
                (_rms_norm_like(eps_outside=True),)),
        Mistake("sum_instead_of_mean", "divided by the L2 norm (the root of the sum of squares) instead of the root mean square",
                "The root *mean* square divides the sum of squares by d_model, so that each normalized feature is "
                "about 1 in size; the L2 norm makes the whole vector length 1.",
                (_rms_norm_like(statistic="sum"), _rms_by_l2_normalize)),
        Mistake("wrong_axis", "computed the root mean square over another axis than the last",
                "Each position's d_model features are normalized together: `dim=-1`.",
                (_rms_norm_like(dim=0), _rms_norm_like(dim=-2))),
        Mistake("forgot_weight", "left out the learned scale (weight)",
                "Multiply the normalized x by `weight`.", (_rms_norm_like(scale=False),)),
    ),
    mutants=(
        Mutant("mean_absolute", "divides by the mean absolute value", _rms_mean_absolute),
        Mutant("no_eps", "leaves ε out", _rms_no_eps),
    ),
)


# --- 06.pre_norm_residual -----------------------------------------------------------------------------------------------


def reference_pre_norm_residual(x, norm, sublayer):
    """x + Sublayer(Norm(x)): the pre-norm residual connection (GPT-2 on)."""
    return x + sublayer(norm(x))


def _residual_cases(generator: torch.Generator) -> list[Case]:
    def modules(d: int, dtype: torch.dtype = torch.float32) -> dict[str, nn.Module]:
        norm = nn.LayerNorm(d, dtype=dtype)
        sublayer = nn.Sequential(nn.Linear(d, 4 * d, dtype=dtype), nn.ReLU(), nn.Linear(4 * d, d, dtype=dtype))
        with torch.no_grad():
            for module in (norm, sublayer):
                for p in module.parameters():
                    p.copy_(0.5 * torch.randn(p.shape, generator=generator, dtype=dtype) + (1.0 if p.dim() == 1 and module is norm else 0.0))
        return {"norm": norm.eval(), "sublayer": sublayer.eval()}

    return [
        Case.of(x=3 * torch.randn(2, 5, 8, generator=generator) + 1, **modules(8), note="a LayerNorm and a two-layer FFN"),
        Case.of(x=torch.randn(3, 6, generator=generator), **modules(6), note="one position per row"),
        Case.of(x=torch.randn(1, 4, 4, generator=generator, dtype=torch.float64), **modules(4, torch.float64),
                note="float64"),
    ]


@mistake_builder
def _residual_like(*, arrangement="pre", branch="kept"):
    """A learner's residual block; each keyword reproduces one way of getting it wrong. ``arrangement``: "pre"
    (x + f(norm(x)): right), "post", "stream" (norm(x) + f(norm(x))), "stream_reassigned" (x = norm(x) first),
    "no_residual", "norm_after" or "no_norm"; ``branch``: "detached" or "no_grad" cut the sublayer from the graph."""

    def pre_norm_residual(x, norm, sublayer):
        def f(z):
            if branch == "no_grad":
                with torch.no_grad():
                    return sublayer(z)
            return sublayer(z).detach() if branch == "detached" else sublayer(z)

        if arrangement == "post":
            return norm(x + f(x))
        if arrangement == "stream":
            return norm(x) + f(norm(x))
        if arrangement == "stream_reassigned":
            x = norm(x)
            return x + f(x)
        if arrangement == "no_residual":
            return f(norm(x))
        if arrangement == "norm_after":
            return x + norm(f(x))
        if arrangement == "no_norm":
            return x + f(x)
        return x + f(norm(x))

    return pre_norm_residual


PRE_NORM_RESIDUAL = Exercise(
    id="06.pre_norm_residual",
    forbidden=(Residual, TransformerBlock),
    reference=reference_pre_norm_residual,
    cases=_residual_cases,
    points=1,
    outputs=("the block's output",),
    axes={"the block's output": "d_model"},
    checked="a LayerNorm with random γ and β around a two-layer FFN, on (batch, seq, d_model), (batch, d_model) and float64",
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    mistakes=(
        Mistake("post_norm", "wrote the paper's post-norm block, Norm(x + Sublayer(x))",
                "That is §3.1's arrangement; pre-norm moves the norm inside the branch: the sublayer reads the "
                "normalized x, and its output is added to x itself.",
                (_residual_like(arrangement="post"),)),
        Mistake("normalized_the_stream", "normalized the residual stream itself, x = Norm(x) + Sublayer(Norm(x))",
                "Only the sublayer's input is normalized; the stream x that the branch is added to must pass unchanged, "
                "or nothing travels from the first block to the last untouched.",
                (_residual_like(arrangement="stream"), _residual_like(arrangement="stream_reassigned"))),
        Mistake("no_residual", "left out the residual connection",
                "Add the input back: the output is x plus the sublayer's output. Without it each block replaces the "
                "stream.",
                (_residual_like(arrangement="no_residual"),)),
        Mistake("norm_after_sublayer", "normalized the sublayer's output instead of its input",
                "Pre-norm normalizes what goes *into* the sublayer: apply `norm` to x before the sublayer, not to its "
                "output.",
                (_residual_like(arrangement="norm_after"),)),
        Mistake("no_norm", "left out the norm",
                "Apply `norm` to the sublayer's input: the sublayer reads the normalized x, not x itself.",
                (_residual_like(arrangement="no_norm"),)),
        Mistake("detached_branch", "detached the sublayer's output from the graph",
                "The output is right, but no gradient reaches the sublayer or the norm, so they would never train: "
                "drop the `.detach()` (or `torch.no_grad()`) and keep the branch in the graph.",
                (_residual_like(branch="detached"), _residual_like(branch="no_grad"))),
    ),
    mutants=(
        Mutant("subtracted_branch", "subtracts the branch", lambda x, norm, f: x - f(norm(x))),
        Mutant("sandwich_same_norm", "normalizes the branch's output too, with the same norm",
               lambda x, norm, f: x + norm(f(norm(x)))),
        Mutant("branch_twice", "applies the sublayer twice", lambda x, norm, f: x + f(norm(f(norm(x))))),
    ),
)

# --- 06.pre_norm_block (build) -----------------------------------------------------------------------------------------


def reference_pre_norm_block(x, attention, feed_forward, norm_1, norm_2):
    """A whole pre-norm block from its parts: what ``TransformerBlock(placement="pre")`` computes (tested)."""
    h = x + attention(norm_1(x))
    return h + feed_forward(norm_2(h))


class _SelfAttention(MultiHeadAttention):
    """The package's multi-head self-attention, with a one-line repr for the verdicts."""

    def __repr__(self) -> str:
        return f"MultiHeadAttention(d_model={self.d_model}, n_heads={self.n_heads})"


def _block_cases(generator: torch.Generator) -> list[Case]:
    def parts(d: int, dtype: torch.dtype = torch.float32) -> dict[str, nn.Module]:
        attention = _SelfAttention(d, 2).to(dtype)
        feed_forward = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d)).to(dtype)
        norm_1, norm_2 = LayerNorm(d).to(dtype), LayerNorm(d).to(dtype)
        with torch.no_grad():  # random γ and β, different in the two norms, so that swapping them shows
            for module in (attention, feed_forward, norm_1, norm_2):
                for name, p in module.named_parameters():
                    centre = 1.0 if module in (norm_1, norm_2) and name == "weight" else 0.0
                    p.copy_(centre + 0.5 * torch.randn(p.shape, generator=generator, dtype=dtype))
        return {"attention": attention.eval(), "feed_forward": feed_forward.eval(), "norm_1": norm_1, "norm_2": norm_2}

    return [
        Case.of(x=2 * torch.randn(2, 5, 8, generator=generator) + 1, **parts(8), note="d_model 8, 2 heads"),
        Case.of(x=torch.randn(1, 3, 4, generator=generator, dtype=torch.float64), **parts(4, torch.float64),
                note="float64, d_model 4"),
    ]


@mistake_builder
def _block_like(*, arrangement=None, second_norm="norm_2", attention_residual=True, ffn_residual=True,
                order="attention_first", post_norm="after_the_sum"):
    """A learner's block, composed one of the ways it goes wrong. ``arrangement``: None (right: the block's
    ``placement``, pre-norm unless told), "pre" or "post" whatever the placement, or "parallel" or "stream" (the stream
    itself normalized) in place of pre-norm; ``second_norm="norm_1"`` (one norm for both); a residual left out;
    ``order="ffn_first"``; ``post_norm="on_the_branch"`` (post-norm's norm on the sublayer's output, x + Norm(Sublayer(x))).
    Every arrangement takes the other keywords, so that two mistakes make one block."""

    def pre_norm_block(x, attention, feed_forward, norm_1, norm_2, placement="pre"):
        ffn_norm = norm_2 if second_norm == "norm_2" else norm_1
        steps = [(attention, norm_1, attention_residual), (feed_forward, ffn_norm, ffn_residual)]
        if order == "ffn_first":
            steps.reverse()
        if arrangement == "parallel" and placement == "pre":  # both read x; a residual left out drops x from the sum
            (first, norm_a, _), (second, norm_b, _) = steps
            if attention_residual and ffn_residual:
                return x + first(norm_a(x)) + second(norm_b(x))
            return first(norm_a(x)) + second(norm_b(x))
        wiring = arrangement or placement
        if wiring in ("parallel", "stream") and placement == "post":  # a pre-norm mistake: the post-norm block is right
            wiring = "post"
        for sublayer, norm, residual in steps:
            if wiring == "post" and post_norm == "on_the_branch":
                x = x + norm(sublayer(x)) if residual else norm(sublayer(x))
            elif wiring == "post":
                x = norm(x + sublayer(x) if residual else sublayer(x))
            elif wiring == "stream":
                x = norm(x)
                x = x + sublayer(x) if residual else sublayer(x)
            else:
                x = x + sublayer(norm(x)) if residual else sublayer(norm(x))
        return x

    return pre_norm_block


def _block_without_norms(x, attention, feed_forward, norm_1, norm_2):
    h = x + attention(x)
    return h + feed_forward(h)


def _block_second_residual_from_input(x, attention, feed_forward, norm_1, norm_2):
    h = x + attention(norm_1(x))
    return x + feed_forward(norm_2(h))


PRE_NORM_BLOCK = Exercise(
    id="06.pre_norm_block",
    forbidden=(TransformerBlock, nn.TransformerEncoderLayer),
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    reference=reference_pre_norm_block,
    cases=_block_cases,
    points=3,
    outputs=("the block's output",),
    axes={"the block's output": "d_model"},
    checked="multi-head attention and a two-layer FFN with two LayerNorms of random γ and β, in float32 and float64",
    mistakes=(
        Mistake("post_norm_block", "wrote the paper's post-norm block, Norm(x + Sublayer(x)) twice",
                "That is §3.1's arrangement; pre-norm puts each norm on its sublayer's input and leaves the stream "
                "alone: attention reads x through `norm_1` and adds to x, then the feed-forward network reads that sum "
                "through `norm_2` and adds to it.",
                (_block_like(arrangement="post"),)),
        Mistake("one_norm_for_both", "normalized the feed-forward network's input with norm_1, the attention's norm",
                "Each sublayer has its own norm with its own γ and β: the feed-forward network reads its input through "
                "`norm_2`.",
                (_block_like(second_norm="norm_1"),)),
        Mistake("parallel_branches", "fed both sublayers the block's input x, so the feed-forward network never sees "
                                     "what attention added",
                "The two residuals are in series: first attention adds to x, then the feed-forward network reads that "
                "sum through `norm_2`. (Reading x in both is GPT-J's *parallel* block, a different model.)",
                (_block_like(arrangement="parallel"),)),
        Mistake("normalized_the_stream", "normalized the residual stream itself before each sublayer",
                "Keep the normalized copy for the sublayer only: attention's output is added to x itself. Replacing x by "
                "its normalized copy "
                "takes away the untouched path that makes deep stacks trainable.",
                (_block_like(arrangement="stream"),)),
        Mistake("dropped_a_residual", "left out one of the two residual connections",
                "Both sublayers add to the stream: attention's output to x, and the feed-forward network's output to "
                "that sum.",
                (_block_like(ffn_residual=False), _block_like(attention_residual=False))),
        Mistake("feed_forward_first", "applied the feed-forward network before attention",
                "A block mixes positions first, then works on each position: attention, then the feed-forward network.",
                (_block_like(order="ffn_first"),)),
    ),
    mutants=(
        Mutant("no_norms", "uses neither norm", _block_without_norms),
        Mutant("second_residual_from_input", "adds the feed-forward output to x instead of to h",
               _block_second_residual_from_input),
    ),
)


# --- 06.block (the build track's block: the learner's LayerNorm, attention and FFN in a module) ---------------------


PLACEMENTS = ("pre", "post")


def check_placement(placement: object) -> None:
    """ValueError, naming the argument, unless ``placement`` is "pre" or "post"."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be 'pre' (GPT-2's block) or 'post' (the paper's §3.1), got {placement!r}")


class BookBlock(nn.Module):
    """The package's GPT block with GPT-2's names for its layers (``ln_1``, ``attn``, ``ln_2``, ``ffn``): what
    ``TransformerBlock(placement=placement, activation=kind)`` computes, its norms renamed (tested for both
    placements). ``kind`` is the FFN's, "relu" or "gelu_tanh" (GPT-2's; chapter 09's character GPT uses ReLU);
    ``placement`` "pre" (GPT-2's, the default) or "post" (the paper's, a norm after each residual sum)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, kind: str = "gelu_tanh", placement: str = "pre") -> None:
        super().__init__()
        check_placement(placement)
        self.placement = placement
        self.ln_1, self.ln_2 = LayerNorm(d_model), LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ffn = FeedForward(d_model, d_ff, activation=kind)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.placement == "post":
            h = self.ln_1(x + self.attn(x, mask=mask))
            return self.ln_2(h + self.ffn(h))
        h = x + self.attn(self.ln_1(x), mask=mask)
        return h + self.ffn(self.ln_2(h))


def _block_weights(d_model: int, n_heads: int, d_ff: int, generator: torch.Generator,
                   dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """A book block's parameters drawn afresh: random γ and β (different in the two norms), biases not zero."""
    with torch.device("meta"):  # the FFN's kind does not change the shapes
        shapes = {name: p.shape for name, p in BookBlock(d_model, n_heads, d_ff).named_parameters()}
    weights = {}
    for name, shape in shapes.items():
        centre = 1.0 if name.startswith("ln_") and name.endswith("weight") else 0.0
        scale = 0.5 if name.startswith("ln_") or name.endswith("bias") else 1 / shape[-1] ** 0.5
        weights[name] = centre + scale * torch.randn(shape, generator=generator, dtype=dtype)
    return weights


def _block_module_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return 2 * torch.randn(*shape, generator=generator, dtype=dtype) + 1

    lengths = torch.tensor([5, 3])
    padding = (torch.arange(5)[None, None, :] < lengths[:, None, None]).expand(2, 5, 5)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    return [
        Case.of(d_model=8, n_heads=2, d_ff=32, kind="gelu_tanh", placement="pre",
                weights=_block_weights(8, 2, 32, generator, torch.float32), x=randn(2, 5, 8), mask=causal,
                note="GPT-2's FFN, a causal mask, 2 heads"),
        Case.of(d_model=8, n_heads=4, d_ff=16, kind="relu", placement="pre",
                weights=_block_weights(8, 4, 16, generator, torch.float32), x=randn(2, 5, 8), mask=padding,
                note="a ReLU FFN, a (batch, query_pos, key_pos) padding mask, 4 heads"),
        Case.of(d_model=4, n_heads=1, d_ff=8, kind="gelu_tanh", placement="pre",
                weights=_block_weights(4, 1, 8, generator, torch.float64), x=randn(1, 3, 4, dtype=torch.float64),
                mask=None, note="float64, no mask"),
        Case.of(d_model=8, n_heads=2, d_ff=32, kind="relu", placement="post",
                weights=_block_weights(8, 2, 32, generator, torch.float32), x=randn(2, 5, 8), mask=causal,
                note="post-norm (the paper's block), a ReLU FFN, a causal mask"),
        Case.of(d_model=4, n_heads=2, d_ff=8, kind="gelu_tanh", placement="post",
                weights=_block_weights(4, 2, 8, generator, torch.float64), x=randn(2, 5, 4, dtype=torch.float64),
                mask=padding, note="post-norm, float64, a padding mask"),
        Case.of(d_model=8, n_heads=2, d_ff=32, kind="gelu_tanh", placement="sandwich",
                weights=_block_weights(8, 2, 32, generator, torch.float32), x=randn(2, 5, 8), mask=None,
                note='placement="sandwich", which the block does not offer: a ValueError'),
    ]


def _block_module_call(cls, args):
    d_model, n_heads, d_ff, kind, placement, weights, x, mask = args
    return run_module(cls, (d_model, n_heads, d_ff, kind, placement), weights, (x,), {"mask": mask},
                      what="Block(d_model, n_heads, d_ff, kind, placement)")


class _OwnLayerNorm(nn.Module):
    """A learner's LayerNorm module, written out (the catalogue's blocks may not call the package's)."""

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight, self.bias = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor, *, affine: bool = True) -> torch.Tensor:
        centred = x - x.mean(-1, keepdim=True)
        normalized = centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + self.eps)
        return normalized * self.weight + self.bias if affine else normalized


def _wired(placement, x, attention, feed_forward, norm_1, norm_2):
    """The block's right wiring, pre-norm or post-norm, of the parts it is given."""
    if placement == "post":
        h = norm_1(x + attention(x))
        return norm_2(h + feed_forward(h))
    h = x + attention(norm_1(x))
    return h + feed_forward(norm_2(h))


class _OwnBlock(nn.Module):
    """The right block made of a learner's parts (chapter 04's and 05's catalogues' right answers): the mistakes below
    change its forward. (Not a BookBlock: an answer may not run the package's code, and these are answers.)"""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, kind: str = "gelu_tanh", placement: str = "pre") -> None:
        super().__init__()
        if placement not in ("pre", "post"):
            raise ValueError(f"placement must be 'pre' or 'post', not {placement!r}")
        self.placement = placement
        self.ln_1, self.ln_2 = _OwnLayerNorm(d_model), _OwnLayerNorm(d_model)
        self.attn = _mha_like()(d_model, n_heads)
        self.ffn = _feed_forward_like()(d_model, d_ff, kind)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return _wired(self.placement, x, lambda h: self.attn(h, mask=mask), self.ffn, self.ln_1, self.ln_2)


def _as_block(compose):
    """A learner's Block whose forward composes its parts with ``compose`` (a pre_norm_block-like function)."""

    class Block(_OwnBlock):
        def forward(self, x, mask=None):
            return compose(x, lambda h: self.attn(h, mask=mask), self.ffn, self.ln_1, self.ln_2, placement=self.placement)

    return Block  # without the function's recipe: two block mistakes are not composed into one class


class _MaskIgnored(_OwnBlock):
    def forward(self, x, mask=None):
        return _wired(self.placement, x, self.attn, self.ffn, self.ln_1, self.ln_2)


class _NormsWithoutAffine(_OwnBlock):
    def forward(self, x, mask=None):
        return _wired(self.placement, x, lambda h: self.attn(h, mask=mask), self.ffn,
                      lambda h: self.ln_1(h, affine=False), lambda h: self.ln_2(h, affine=False))


class _EpsOutsideTheRoot(_OwnBlock):
    def forward(self, x, mask=None):
        def norm(module, t):
            mean = t.mean(-1, keepdim=True)
            centred = t - mean
            return centred / (centred.pow(2).mean(-1, keepdim=True).sqrt() + 1e-5) * module.weight + module.bias

        return _wired(self.placement, x, lambda h: self.attn(h, mask=mask), self.ffn,
                      lambda h: norm(self.ln_1, h), lambda h: norm(self.ln_2, h))


class _PlacementNotChecked(_OwnBlock):
    """Any placement but "post" built as pre-norm: the learner's __init__ never refuses a placement it does not offer."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, kind: str = "gelu_tanh", placement: str = "pre") -> None:
        super().__init__(d_model, n_heads, d_ff, kind, "post" if placement == "post" else "pre")


BLOCK = Exercise(
    id="06.block",
    # the package's answers to the pieces: the block is made of the learner's LayerNorm, attention and FFN
    forbidden=(TransformerBlock, nn.TransformerEncoderLayer, nn.LayerNorm, F.layer_norm, LayerNorm, Residual,
               MultiHeadAttention, nn.MultiheadAttention, F.scaled_dot_product_attention, FeedForward),
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    reference=BookBlock,
    call=_block_module_call,
    cases=_block_module_cases,
    points=3,
    outputs=("the block's output",),
    axes={"the block's output": "batch seq d_model"},
    checked=(
        "pre-norm with GPT-2's FFN, a causal mask and 2 heads, with a ReLU FFN, a (batch, query_pos, key_pos) padding "
        "mask and 4 heads, and in float64 without a mask; post-norm with a ReLU FFN and a causal mask, and in float64 "
        "with a padding mask; a placement the block does not offer (\"sandwich\"), which must raise ValueError; random "
        "γ and β in both norms; the weights are the cases' own, put in your layers by name, and the gradients with "
        "respect to them match too"
    ),
    mistakes=(
        Mistake("post_norm_block", "wrote the paper's post-norm block, LayerNorm(x + Sublayer(x)) twice, for "
                                   "placement=\"pre\" too",
                "With placement \"pre\" (GPT-2's block) each norm acts on its sublayer's input and the stream is left "
                "alone: h = x + attn(ln_1(x)), then h + ffn(ln_2(h)). Only \"post\" puts the norm after the sum.",
                (_as_block(_block_like(arrangement="post")),)),
        Mistake("placement_ignored", "built GPT-2's pre-norm block whatever the placement",
                "With placement \"post\" (the paper's §3.1) the norm comes after each residual sum: "
                "h = ln_1(x + attn(x)), then ln_2(h + ffn(h)). Keep the placement in __init__ and branch on it in "
                "forward.", (_as_block(_block_like(arrangement="pre")),)),
        Mistake("post_norm_on_the_branch", "normalized the sublayer's output before adding it, x + LayerNorm(Sublayer(x)), "
                                           "for post-norm",
                "§3.1's post-norm normalizes the *sum*: LayerNorm(x + Sublayer(x)). Normalizing the branch alone leaves "
                "the stream unnormalized, which is neither of the two blocks.",
                (_as_block(_block_like(post_norm="on_the_branch")),)),
        Mistake("placement_not_refused", "accepted a placement the block does not offer and built a block anyway",
                "A placement other than \"pre\" or \"post\" (\"sandwich\", a typo such as \"Pre\") must stop "
                "__init__ with a ValueError that names `placement` and the two it accepts, before any layer is built: "
                "silently building a pre-norm block hides the typo.", (_PlacementNotChecked,)),
        Mistake("one_norm_for_both", "normalized the feed-forward network's input with ln_1, the attention's norm",
                "Each sublayer has its own norm with its own γ and β: the feed-forward network reads its input through "
                "`ln_2`.", (_as_block(_block_like(second_norm="norm_1")),)),
        Mistake("normalized_the_stream", "normalized the residual stream itself before each sublayer",
                "Keep the normalized copy for the sublayer only: attention's output is added to x itself.",
                (_as_block(_block_like(arrangement="stream")),)),
        Mistake("dropped_a_residual", "left out one of the two residual connections",
                "Both sublayers add to the stream: attention's output to x, and the feed-forward network's output to "
                "that sum.", (_as_block(_block_like(ffn_residual=False)), _as_block(_block_like(attention_residual=False)))),
        Mistake("mask_not_passed", "did not pass the mask on to the attention",
                "forward(x, mask) must hand `mask` to `self.attn`: without it a GPT's position reads the positions "
                "after it, and padding is attended to.", (_MaskIgnored,)),
        Mistake("norms_without_gamma_and_beta", "normalized without the norms' learned scale and shift",
                "Your LayerNorm module holds `weight` (γ) and `bias` (β): multiply by the first and add the second "
                "after normalizing.", (_NormsWithoutAffine,)),
    ),
    mutants=(
        Mutant("eps_outside_the_root", "adds ε to the standard deviation instead of the variance", _EpsOutsideTheRoot),
        Mutant("feed_forward_first", "runs the feed-forward network before attention",
               _as_block(_block_like(order="ffn_first"))),
    ),
)


# --- 06.predict_normalized_length (predict, then measure) ---------------------------------------------------------------

PREDICT_D_MODEL = 256


def normalized_length(d_model: int = PREDICT_D_MODEL) -> tuple[float, float]:
    """The length of a vector x = 4·randn + 3 of ``d_model`` features, and of LayerNorm(x) (γ = 1, β = 0), seed 0."""
    x = 4 * torch.randn(d_model, generator=torch.Generator().manual_seed(0)) + 3
    with torch.no_grad():
        return x.norm().item(), LayerNorm(d_model)(x).norm().item()


PREDICT_NORMALIZED_LENGTH = predict_number(
    "06.predict_normalized_length",
    measure=lambda: normalized_length()[1],
    question=f"the length of LayerNorm(x) at d_model = {PREDICT_D_MODEL}",
    within=1.3,
    misconceptions=[
        Misconception("unit_length", 1.0, "expected LayerNorm to give each vector length 1",
                      "Length 1 is what dividing by the L2 norm gives. LayerNorm gives each *feature* mean 0 and "
                      "variance 1, so the squares of the d_model features sum to d_model: the length is √d_model."),
        Misconception("length_d_model", float(PREDICT_D_MODEL), "forgot the square root: the sum of squares is d_model",
                      "The squared length is d_model (d_model features of variance 1); the length is its root."),
        Misconception("kept_the_length", 78.0, "expected LayerNorm to keep the vector's length (about 78 here)",
                      "LayerNorm removes the size: whatever x's scale (here 4·randn + 3, length about 78), every "
                      "normalized vector has length √d_model."),
        Misconception("centred_only", 64.0, "subtracted the mean but kept the spread (4·√256 = 64)",
                      "LayerNorm also divides by the standard deviation, so the spread 4 goes too: the length is "
                      "√d_model."),
        Misconception("unit_per_half", 8.0, "took the length to be √(d_model) / 2 or √(d_model / 4)",
                      "Each of the d_model features has variance 1 after LayerNorm; all of them count: √d_model."),
    ],
    mutants=[
        wrong_prediction("thousand", 1000.0, "far above any length the chapter measures"),
        wrong_prediction("three", 3.0, "x's mean, not a length"),
    ],
    points=1,
)


# --- 06.predict_deep_stream (predict, then measure: the pre-norm stream of a stack four times deeper) ------------------

DEEP_STACK = 96  # four times the chapter's 24 blocks


def pre_norm_stream_lengths(n_layers: int = DEEP_STACK) -> torch.Tensor:
    """The mean length of the residual stream leaving each block of the chapter's pre-norm character model at
    initialisation (Xavier, d_model 64, one seeded batch of random tokens), as the chapter's table measures it."""
    from tutorial_lib.widgets.norms_at_init import norms_at_init  # the chapter's measurement, at another depth

    return norms_at_init("pre-norm", n_layers=n_layers).activation


PREDICT_DEEP_STREAM = predict_number(
    "06.predict_deep_stream",
    measure=lambda: pre_norm_stream_lengths()[-1].item(),
    question=f"the length of the pre-norm stream leaving block {DEEP_STACK}",
    within=1.3,
    points=1,
    misconceptions=[
        Misconception("grows_with_depth", 168.0, "expected the stream to grow in proportion to the number of blocks",
                      "Each block adds a vector that, at initialisation, has little to do with what the stream holds "
                      "already: additions in unrelated directions lengthen a sum far more slowly than additions that "
                      "all point the same way."),
        Misconception("stops_growing", 42.0, "expected the stream to stop growing after 24 blocks",
                      "Nothing in a pre-norm block shrinks the stream: the norm acts on the copy the sublayer reads, "
                      "and every block adds its output to the stream, so a deeper stack keeps lengthening it."),
        Misconception("compounds_per_block", 17000.0,
                      "expected every block to multiply the stream by the same factor, as a stack without norms does",
                      "A block multiplies only when it reads an unnormalized stream. In pre-norm each sublayer reads "
                      "a normalized copy, so what a block adds has about the same size at any depth: the stream "
                      "grows, but nothing compounds."),
        Misconception("normalized_stream", 8.0, "took the stream to be normalized, length √d_model = 8",
                      "That is post-norm, whose last step in each block is a LayerNorm. Pre-norm normalizes only the "
                      "input of each sublayer; the stream itself is never normalized."),
    ],
    mutants=[
        wrong_prediction("a_thousand", 1000.0, "far beyond any length of this stack"),
        wrong_prediction("one", 1.0, "shorter than the embeddings the stream starts from"),
    ],
)

register(LAYER_NORM, RMS_NORM, PRE_NORM_RESIDUAL, PRE_NORM_BLOCK, BLOCK, PREDICT_NORMALIZED_LENGTH, PREDICT_DEEP_STREAM)
