"""Chapter 05's exercises: the position-wise feed-forward network, GELU's tanh form, SwiGLU and its hidden size.

- ``05.feed_forward`` is Eq. (2) with weights given as matrices (``x @ w1 + b1``), ReLU or exact GELU, and dropout on
  the hidden layer drawn from the case's generator; cases with ``training=False`` and a dropout rate check that
  evaluation applies none.
- ``05.gelu_tanh`` is GPT-2's approximation, compared in float64 so that the exact GELU (a few 1e-4 away) fails.
- ``05.swiglu`` is LLaMA's gated feed-forward without biases.
- ``05.swiglu_hidden_size`` is LLaMA's ``d_ff``: two thirds of 4·d_model, rounded *up* to a multiple.
- ``05.ffn`` (the build exercise, a piece of the learner's own transformer) composes them into a ``FeedForward``
  module of the learner's own for three families: the paper's ReLU, GPT-2's GELU (tanh form) and LLaMA's SwiGLU, with
  the package's layer names so that trained weights load into it, with what a real model of each family sets (``bias``
  on or off, ``dropout`` on the hidden layer, checked in training with seeded masks, LLaMA's ``multiple_of`` rounding)
  and bad arguments refused; the catalogue holds the composition mistakes (the exact GELU, the SiLU on the up branch, a
  sigmoid gate, the activation on the output), the options' (``bias`` ignored, the rounding down, skipped or left out,
  dropout on the output or at evaluation) and the bad arguments let through.
- ``05.predict_ffn_share`` (predict, then measure) asks for the FFN's share of a base block's parameters, about 2/3.
- ``05.predict_dead_share`` (predict, then measure, by running the FFN) asks which share of the hidden ReLU units are
  exactly 0 at initialisation on inputs shifted by +3: still about half, since the weights are as often negative.

As in ``ch03``, the mistakes are written the way a learner would write them and carry no annotations.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from tutorial_lib.blocks import TransformerBlock
from tutorial_lib.feed_forward import FeedForward, SwiGLU
from tutorial_lib.models.llama import llama_d_ff
from tutorial_lib.checks.compound import mistake_builder
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, register
from tutorial_lib.checks.modules import build_module, same_parameters
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction

# --- 05.feed_forward ----------------------------------------------------------------------------------------------------


def reference_feed_forward(x, w1, b1, w2, b2, activation="relu", dropout=0.0, training=False, generator=None):
    """act(x W1 + b1) W2 + b2; in training, each hidden unit kept where ``rand >= dropout`` and rescaled by 1/(1 - p)."""
    if activation not in ("relu", "gelu"):
        raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
    hidden = F.relu(x @ w1 + b1) if activation == "relu" else F.gelu(x @ w1 + b1)
    if training and dropout > 0:
        keep = torch.rand(hidden.shape, generator=generator, dtype=hidden.dtype) >= dropout
        hidden = hidden * keep / (1 - dropout)
    return hidden @ w2 + b2


def _ffn_cases(generator: torch.Generator) -> list[Case]:
    def weights(d_model: int, d_ff: int, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
        return {
            "w1": torch.randn(d_model, d_ff, generator=generator, dtype=dtype) / math.sqrt(d_model),
            "b1": torch.randn(d_ff, generator=generator, dtype=dtype) * 0.5,
            "w2": torch.randn(d_ff, d_model, generator=generator, dtype=dtype) / math.sqrt(d_ff),
            "b2": torch.randn(d_model, generator=generator, dtype=dtype) * 0.5,
        }

    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    def seeded(seed: int) -> torch.Generator:
        return torch.Generator().manual_seed(seed)

    return [
        Case.of(x=randn(2, 5, 8), **weights(8, 32), activation="relu", dropout=0.0, training=False, generator=None,
                note="ReLU, the paper's"),
        Case.of(x=randn(3, 8), **weights(8, 24), activation="gelu", dropout=0.0, training=False, generator=None,
                note="exact GELU, GPT's"),
        Case.of(x=randn(2, 4, 8), **weights(8, 32), activation="relu", dropout=0.1, training=False,
                generator=seeded(1), note="evaluation: no dropout"),
        Case.of(x=randn(2, 4, 8), **weights(8, 32), activation="relu", dropout=0.5, training=True,
                generator=seeded(2), note="training with dropout 0.5"),
        Case.of(x=randn(1, 3, 6, dtype=torch.float64), **weights(6, 12, torch.float64), activation="gelu",
                dropout=0.25, training=True, generator=seeded(3), note="float64, training with dropout 0.25"),
    ]


@mistake_builder
def _ffn_like(*, activation_at="hidden", gelu="exact", use_name=True, dropout_when="training", rescale=True):
    """A learner's FFN; each keyword reproduces one way of getting it wrong."""

    def act(z, activation):
        if activation == "relu" or not use_name:
            return torch.relu(z)
        return F.gelu(z) if gelu == "exact" else F.gelu(z, approximate="tanh")

    def feed_forward(x, w1, b1, w2, b2, activation="relu", dropout=0.0, training=False, generator=None):
        h = x @ w1 + b1
        if activation_at in ("hidden", "both"):
            h = act(h, activation)
        if dropout > 0 and (training or dropout_when == "always"):
            mask = (torch.rand(h.shape, generator=generator, dtype=h.dtype) >= dropout).to(h.dtype)
            h = h * mask / (1 - dropout) if rescale else h * mask
        out = h @ w2 + b2
        if activation_at in ("output", "both"):
            out = act(out, activation)
        return out

    return feed_forward


def _ffn_dropout_on_output(x, w1, b1, w2, b2, activation="relu", dropout=0.0, training=False, generator=None):
    out = reference_feed_forward(x, w1, b1, w2, b2, activation)
    if training and dropout > 0:
        out = out * (torch.rand(out.shape, generator=generator, dtype=out.dtype) >= dropout) / (1 - dropout)
    return out


def _ffn_keep_below_p(x, w1, b1, w2, b2, activation="relu", dropout=0.0, training=False, generator=None):
    hidden = F.relu(x @ w1 + b1) if activation == "relu" else F.gelu(x @ w1 + b1)
    if training and dropout > 0:
        hidden = hidden * (torch.rand(hidden.shape, generator=generator, dtype=hidden.dtype) < dropout) / (1 - dropout)
    return hidden @ w2 + b2


def _ffn_no_biases(x, w1, b1, w2, b2, activation="relu", dropout=0.0, training=False, generator=None):
    return reference_feed_forward(x, w1, torch.zeros_like(b1), w2, torch.zeros_like(b2), activation, dropout, training,
                                  generator)


FEED_FORWARD = Exercise(
    id="05.feed_forward",
    forbidden=(FeedForward,),
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    reference=reference_feed_forward,
    cases=_ffn_cases,
    points=2,
    outputs=("the output",),
    axes={"the output": "d_model"},
    checked=(
        "ReLU and exact GELU without dropout, evaluation with a dropout rate (no dropout), training with dropout 0.5 "
        "and 0.25 (float64), the keep mask drawn from the generator"
    ),
    mistakes=(
        Mistake("activation_after_second_linear", "applied the activation after the second linear layer",
                "Eq. (2) is max(0, x W1 + b1) W2 + b2: the nonlinearity sits between the two layers, and the output "
                "goes back into the residual stream unbounded, negative values included.",
                (_ffn_like(activation_at="output"), _ffn_like(activation_at="both"))),
        Mistake("tanh_gelu_for_exact", "used GELU's tanh approximation where the exact GELU was asked for",
                "`F.gelu` without an `approximate` argument is the exact x·Φ(x); `approximate='tanh'` is GPT-2's "
                "approximation, a few 1e-4 away.",
                (_ffn_like(gelu="tanh"),)),
        Mistake("ignored_activation", "used ReLU whatever `activation` says",
                "Read the argument: 'relu' → `torch.relu`, 'gelu' → `F.gelu`.", (_ffn_like(use_name=False),)),
        Mistake("dropout_at_evaluation", "applied dropout at evaluation",
                "Dropout is a training-time regulariser: when `training` is False the hidden layer passes unchanged "
                "(what `model.eval()` switches off in `nn.Dropout`).", (_ffn_like(dropout_when="always"),)),
        Mistake("dropout_not_rescaled", "dropped hidden units without rescaling the ones kept",
                "Divide the kept units by 1 - dropout, so that the expected value in training equals the value at "
                "evaluation (inverted dropout).", (_ffn_like(rescale=False),)),
    ),
    mutants=(
        Mutant("dropout_on_output", "drops units of the output instead of the hidden layer", _ffn_dropout_on_output),
        Mutant("keeps_below_p", "keeps the units where rand < p, a keep rate of p", _ffn_keep_below_p),
        Mutant("no_biases", "leaves out b1 and b2", _ffn_no_biases),
    ),
)


# --- 05.gelu_tanh -------------------------------------------------------------------------------------------------------


def reference_gelu_tanh(x):
    """GELU(x) ≈ 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))) (Hendrycks and Gimpel, 2016; GPT-2)."""
    return F.gelu(x, approximate="tanh")


def _gelu_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(x=torch.linspace(-6, 6, 121, dtype=torch.float64), note="a grid from -6 to 6"),
        Case.of(x=torch.randn(3, 4, 8, generator=generator, dtype=torch.float64), note="a batch of activations"),
        Case.of(x=torch.tensor([-30.0, -8.0, 0.0, 8.0, 30.0], dtype=torch.float64), note="large inputs"),
        Case.of(x=torch.randn(2, 16, generator=generator), note="float32"),
    ]


@mistake_builder
def _gelu_with(*, half=0.5, coefficient=0.044715, power=3, root=True):
    def gelu_tanh(x):
        c = math.sqrt(2 / math.pi) if root else 2 / math.pi
        return half * x * (1 + torch.tanh(c * (x + coefficient * x**power)))

    return gelu_tanh


def _gelu_exact(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def _gelu_sigmoid(x):
    return x * torch.sigmoid(1.702 * x)


GELU_TANH = Exercise(
    id="05.gelu_tanh",
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    forbidden=(F.gelu, nn.GELU),
    reference=reference_gelu_tanh,
    cases=_gelu_cases,
    points=1,
    outputs=("GELU(x)",),
    checked="a grid from -6 to 6, random activations and large inputs in float64, and float32",
    tolerance=(1e-7, 1e-9),
    mistakes=(
        Mistake("exact_gelu", "computed the exact GELU (with erf) instead of the tanh approximation",
                "The exact GELU is 0.5·x·(1 + erf(x/√2)); GPT-2's form replaces erf by "
                "tanh(√(2/π)·(x + 0.044715·x³)), a few 1e-4 away, and it is what GPT-2's weights were trained with.",
                (_gelu_exact, F.gelu)),
        Mistake("missing_half", "left out the factor 0.5",
                "1 + tanh(…) runs from 0 to 2: the 0.5 makes it a gate from 0 to 1, so that GELU(x) ≈ x for large x.",
                (_gelu_with(half=1.0),)),
        Mistake("square_instead_of_cube", "used x² where the formula has x³",
                "The correction term is 0.044715·x³ (odd, like the rest of the argument of tanh).",
                (_gelu_with(power=2),)),
        Mistake("no_square_root", "used 2/π where the formula has √(2/π)",
                "The constant is the square root of 2/π, √(2/π) ≈ 0.7979, not 2/π itself.",
                (_gelu_with(root=False),)),
        Mistake("sigmoid_approximation", "used the sigmoid approximation x·σ(1.702x)",
                "That is GELU's other approximation (and SiLU's shape); the exercise asks for the tanh form.",
                (_gelu_sigmoid,)),
    ),
    mutants=(
        Mutant("no_cubic_term", "leaves out 0.044715·x³", _gelu_with(coefficient=0.0)),
        Mutant("rounded_coefficient", "uses 0.0447 for 0.044715", _gelu_with(coefficient=0.0447)),
    ),
)


# --- 05.swiglu ----------------------------------------------------------------------------------------------------------


def reference_swiglu(x, w_gate, w_up, w_down):
    """SwiGLU(x) = (SiLU(x W_gate) ⊙ x W_up) W_down (Shazeer 2020; LLaMA's feed-forward)."""
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down


def _swiglu_cases(generator: torch.Generator) -> list[Case]:
    def weights(d_model: int, d_ff: int, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
        return {
            "w_gate": torch.randn(d_model, d_ff, generator=generator, dtype=dtype) / math.sqrt(d_model),
            "w_up": torch.randn(d_model, d_ff, generator=generator, dtype=dtype) / math.sqrt(d_model),
            "w_down": torch.randn(d_ff, d_model, generator=generator, dtype=dtype) / math.sqrt(d_ff),
        }

    return [
        Case.of(x=torch.randn(2, 5, 12, generator=generator), **weights(12, 32), note="d_ff = 8/3 · d_model"),
        Case.of(x=torch.randn(3, 8, generator=generator) * 3, **weights(8, 8), note="d_ff = d_model, large inputs"),
        Case.of(x=torch.randn(1, 4, 6, generator=generator, dtype=torch.float64), **weights(6, 16, torch.float64),
                note="float64"),
    ]


@mistake_builder
def _swiglu_like(*, gate=F.silu, branch="gate", combine="product", order="inside"):
    """A learner's SwiGLU; each keyword reproduces one way of getting it wrong."""

    def swiglu(x, w_gate, w_up, w_down):
        a, b = (x @ w_gate, x @ w_up) if branch == "gate" else (x @ w_up, x @ w_gate)
        if order == "outside":
            return gate(a * b) @ w_down
        return (gate(a) * b if combine == "product" else gate(a) + b) @ w_down

    return swiglu


SWIGLU = Exercise(
    id="05.swiglu",
    forbidden=(SwiGLU,),
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    reference=reference_swiglu,
    cases=_swiglu_cases,
    points=1,
    outputs=("the output",),
    axes={"the output": "d_model"},
    checked="d_ff = 8/3 · d_model, d_ff = d_model with large inputs, and float64",
    mistakes=(
        Mistake("gate_on_wrong_branch", "applied SiLU to x @ w_up instead of x @ w_gate",
                "The gate is the branch that goes through SiLU: apply SiLU to the projection by `w_gate`, then multiply "
                "by the plain projection by `w_up`. The two branches "
                "are not interchangeable once weights are loaded from a trained model.",
                (_swiglu_like(branch="up"),)),
        Mistake("sigmoid_gate", "gated with a sigmoid instead of SiLU",
                "σ(a)·b is the original GLU; Swi-GLU uses Swish = SiLU: a·σ(a).", (_swiglu_like(gate=torch.sigmoid),)),
        Mistake("relu_gate", "gated with ReLU instead of SiLU",
                "ReLU(a)·b is ReGLU; SwiGLU uses SiLU(a) = a·σ(a), smooth and slightly negative below zero.",
                (_swiglu_like(gate=torch.relu),)),
        Mistake("activation_after_product", "applied SiLU to the product of the two branches",
                "Only the gate branch goes through SiLU, before the product: SiLU(x W_gate) ⊙ (x W_up).",
                (_swiglu_like(order="outside"),)),
        Mistake("added_branches", "added the two branches instead of multiplying them",
                "The gate multiplies the other branch elementwise (⊙): it decides how much of each unit passes.",
                (_swiglu_like(combine="sum"),)),
    ),
    mutants=(
        Mutant("gelu_gate", "gates with GELU (GEGLU)", _swiglu_like(gate=F.gelu)),
        Mutant("silu_on_both", "applies SiLU to both branches", lambda x, g, u, d: (F.silu(x @ g) * F.silu(x @ u)) @ d),
    ),
)


# --- 05.swiglu_hidden_size ----------------------------------------------------------------------------------------------


def reference_swiglu_hidden_size(d_model, multiple_of):
    """LLaMA's d_ff: ⌊2/3 · 4·d_model⌋, rounded up to a multiple of ``multiple_of`` (11,008 for d_model 4,096)."""
    hidden = int(2 * (4 * d_model) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _size_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(d_model=4096, multiple_of=256, note="LLaMA 7B"),
        Case.of(d_model=5120, multiple_of=256, note="LLaMA 13B"),
        Case.of(d_model=512, multiple_of=64),
        Case.of(d_model=96, multiple_of=32, note="two thirds of 4 · 96 is already a multiple of 32"),
        Case.of(d_model=64, multiple_of=1, note="no rounding"),
    ]


@mistake_builder
def _size_like(*, factor=lambda d: int(2 * (4 * d) / 3), rounding="up"):
    def swiglu_hidden_size(d_model, multiple_of):
        hidden = factor(d_model)
        if rounding == "up":
            return multiple_of * math.ceil(hidden / multiple_of)
        if rounding == "down":
            return multiple_of * (hidden // multiple_of)
        if rounding == "nearest":
            return multiple_of * round(hidden / multiple_of)
        return hidden

    return swiglu_hidden_size


SWIGLU_HIDDEN_SIZE = Exercise(
    id="05.swiglu_hidden_size",
    forbidden=(llama_d_ff,),
    reference=reference_swiglu_hidden_size,
    cases=_size_cases,
    points=1,
    outputs=("d_ff",),
    checked="LLaMA 7B and 13B (11,008 and 13,824), d_model 512 and 96, and multiple_of 1",
    mistakes=(
        Mistake("kept_four_d_model", "kept the plain FFN's 4 · d_model",
                "SwiGLU has three matrices instead of two: with 4 · d_model it has 1.5x the parameters. Take two thirds "
                "of it.", (_size_like(factor=lambda d: 4 * d),)),
        Mistake("two_thirds_of_d_model", "took two thirds of d_model instead of two thirds of 4 · d_model",
                "The starting point is the plain FFN's hidden size 4 · d_model: int(2 · 4 · d_model / 3).",
                (_size_like(factor=lambda d: int(2 * d / 3)),)),
        Mistake("rounded_down", "rounded down to the multiple",
                "Round up, so that the FFN never has fewer units than two thirds of 4 · d_model: take the next multiple "
                "of `multiple_of` at or above it (`math.ceil`).", (_size_like(rounding="down"),)),
        Mistake("rounded_to_nearest", "rounded to the nearest multiple",
                "LLaMA rounds up to the next multiple, with `math.ceil` (for d_model 512, 1,365 → 1,408, not 1,344).",
                (_size_like(rounding="nearest"), _size_like(factor=lambda d: 8 * d / 3, rounding="nearest"))),
        Mistake("not_rounded", "did not round to a multiple of multiple_of",
                "The hidden size is rounded up to a multiple of `multiple_of` (256 in LLaMA) so that the matrices "
                "tile well on the hardware.", (_size_like(rounding="none"),)),
    ),
    mutants=(
        Mutant("off_by_one", "adds 1 to the hidden size before rounding", _size_like(factor=lambda d: int(8 * d / 3) + 1, rounding="up")),
        Mutant("rounded_eight_thirds", "rounds 8/3 · d_model to nearest instead of down",
               _size_like(factor=lambda d: round(8 * d / 3))),
    ),
)


# --- 05.ffn (build: the learner's FeedForward module, for the paper, GPT-2 and LLaMA) ----------------------------------

FFN_KINDS = ("relu", "gelu_tanh", "swiglu")


def rounded_hidden_size(d_ff: int, multiple_of: int) -> int:
    """LLaMA's ``FeedForward(dim, hidden_dim=4·dim, multiple_of)``: two thirds of ``d_ff``, truncated, rounded *up* to a
    multiple of ``multiple_of`` (``llama_d_ff`` when ``d_ff = 4·d_model``, tested; 4·4096, 256 → 11008)."""
    return multiple_of * math.ceil(int(2 * d_ff / 3) / multiple_of)


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def reference_feed_forward_module(d_model: int, d_ff: int, kind: str, *, bias: bool | None = None,
                                  dropout: float = 0.0, multiple_of: int | None = None) -> nn.Module:
    """The package's feed-forward of three model families: the paper's ReLU FFN and GPT-2's GELU (tanh form), with the
    layers ``up`` and ``down`` and their biases, or LLaMA's SwiGLU, ``gate``, ``up`` and ``down`` without biases.
    ``bias`` overrides the family's choice; ``dropout`` acts on the hidden layer (the package's ``nn.Dropout``);
    ``multiple_of`` (SwiGLU only) rounds ``d_ff`` as LLaMA does. Bad arguments raise a ValueError naming them."""
    if kind not in FFN_KINDS:
        raise ValueError(f"kind must be one of {FFN_KINDS}, got {kind!r}")
    _positive_int("d_model", d_model)
    _positive_int("d_ff", d_ff)
    if not 0 <= dropout < 1:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
    if multiple_of is not None:
        if kind != "swiglu":
            raise ValueError(f"multiple_of rounds SwiGLU's hidden size: only for kind 'swiglu', got kind {kind!r}")
        _positive_int("multiple_of", multiple_of)
        d_ff = rounded_hidden_size(d_ff, multiple_of)
    if kind == "swiglu":
        return SwiGLU(d_model, d_ff, bias=bool(bias), dropout=dropout)
    return FeedForward(d_model, d_ff, activation=kind, bias=bias is None or bias, dropout=dropout)


def _ffn_weights(d_model: int, d_ff: int, kind: str, generator: torch.Generator,
                 dtype: torch.dtype = torch.float32, bias: bool | None = None) -> dict[str, torch.Tensor]:
    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    layers = {"gate": (d_ff, d_model), "up": (d_ff, d_model), "down": (d_model, d_ff)}
    if kind != "swiglu":
        del layers["gate"]
    weights = {}
    for name, (rows, columns) in layers.items():
        weights[f"{name}.weight"] = randn(rows, columns) / math.sqrt(max(columns, 1))
        if bias or (bias is None and kind != "swiglu"):
            weights[f"{name}.bias"] = randn(rows)
    return weights


def _ffn_module_cases(generator: torch.Generator) -> list[Case]:
    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    def case(d_model, d_ff, kind, x, note, *, dtype=torch.float32, training=False, weights_d_ff=None, **options):
        weights = _ffn_weights(d_model, weights_d_ff or d_ff, kind, generator, dtype, options.get("bias"))
        return Case.of(d_model=d_model, d_ff=d_ff, kind=kind, options=options, weights=weights, x=x, training=training,
                       note=note)

    return [
        case(8, 32, "relu", randn(2, 3, 8), "the paper's ReLU FFN"),
        case(6, 24, "gelu_tanh", randn(4, 6, dtype=torch.float64), "GPT-2's GELU in its tanh form, float64",
             dtype=torch.float64),
        case(8, 12, "swiglu", randn(2, 5, 8), "LLaMA's SwiGLU"),
        case(6, 4, "swiglu", randn(3, 6, dtype=torch.float64), "SwiGLU in float64, d_ff = 4", dtype=torch.float64),
        case(8, 16, "relu", randn(2, 3, 8), "bias=False: a ReLU FFN without biases", bias=False),
        case(6, 8, "swiglu", randn(2, 6), "bias=True: SwiGLU with a bias in each of its three layers", bias=True),
        case(8, 32, "swiglu", randn(2, 3, 8), "multiple_of=8 with d_ff = 4 · d_model = 32: LLaMA's rounding",
             weights_d_ff=rounded_hidden_size(32, 8), multiple_of=8),
        case(6, 24, "swiglu", randn(4, 6, dtype=torch.float64), "multiple_of=5 with d_ff = 24, float64",
             dtype=torch.float64, weights_d_ff=rounded_hidden_size(24, 5), multiple_of=5),
        case(8, 16, "gelu_tanh", randn(2, 5, 8), "dropout=0.25 at evaluation (module.eval())", dropout=0.25),
        case(8, 16, "gelu_tanh", randn(2, 5, 8), "dropout=0.5 in training (module.train(), torch.manual_seed(0) "
                                                 "before the forward)", training=True, dropout=0.5),
        case(6, 12, "swiglu", randn(3, 6), "SwiGLU with dropout=0.3 in training (torch.manual_seed(0))", training=True,
             dropout=0.3),
        case(8, 16, "gelu", randn(1, 8), "an unknown kind: a ValueError"),
        case(8, 0, "relu", randn(1, 8), "d_ff=0: a ValueError"),
        case(8, 16, "gelu_tanh", randn(1, 8), "dropout=1.0, which drops every unit: a ValueError", dropout=1.0),
        case(8, 32, "relu", randn(1, 8), "multiple_of=8 for the ReLU FFN, which has no gate to round for: a ValueError",
             multiple_of=8),
    ]


def _ffn_module_call(cls, args):
    d_model, d_ff, kind, options, weights, x, training = args
    what = "FeedForward(d_model, d_ff, kind" + "".join(f", {name}={value!r}" for name, value in options.items()) + ")"
    module = build_module(functools.partial(cls, **options), (d_model, d_ff, kind), what)
    same_parameters(module, weights, what)
    module.train(training)
    with torch.random.fork_rng(devices=[]):  # the same dropout masks for the answer and the reference
        torch.manual_seed(0)
        return torch.func.functional_call(module, dict(weights), (x,), strict=True)


@mistake_builder
def _feed_forward_like(*, gelu="tanh", gate_from="gate", gate=F.silu, activate="hidden", bias_from="argument",
                       rounding="up", dropout_at="hidden", dropout_in_eval=False, refuses_sizes=True,
                       refuses_dropout=True, refuses_multiple_of=True):
    """A learner's FeedForward module with one choice made wrongly: the activation or gate (``gelu``, ``gate_from``,
    ``gate``, ``activate``); ``bias_from="kind"`` (the family's biases whatever ``bias`` says); ``rounding`` of
    ``multiple_of`` "down", "of_d_ff" (no two thirds) or "none"; ``dropout_at="output"``; ``dropout_in_eval``
    (``F.dropout`` without ``training``); a bad argument not refused."""

    class FeedForwardModule(nn.Module):
        def __init__(self, d_model, d_ff, kind, *, bias=None, dropout=0.0, multiple_of=None):
            super().__init__()
            if kind not in FFN_KINDS:
                raise ValueError(f"unknown kind {kind!r}")
            if refuses_sizes and (d_model < 1 or d_ff < 1):
                raise ValueError(f"d_model and d_ff must be positive, got {d_model}, {d_ff}")
            if refuses_dropout and not 0 <= dropout < 1:
                raise ValueError(f"dropout must be in [0, 1), got {dropout}")
            if refuses_multiple_of and multiple_of is not None and kind != "swiglu":
                raise ValueError("multiple_of is for swiglu only")
            if multiple_of is not None and kind == "swiglu":
                two_thirds = int(2 * d_ff / 3)
                if rounding == "up":
                    d_ff = math.ceil(two_thirds / multiple_of) * multiple_of
                elif rounding == "down":
                    d_ff = two_thirds // multiple_of * multiple_of
                elif rounding == "of_d_ff":
                    d_ff = math.ceil(d_ff / multiple_of) * multiple_of
            self.kind, self.p = kind, dropout
            if bias is None or bias_from == "kind":
                bias = kind != "swiglu"
            if kind == "swiglu":
                self.gate = nn.Linear(d_model, d_ff, bias=bias)
            self.up = nn.Linear(d_model, d_ff, bias=bias)
            self.down = nn.Linear(d_ff, d_model, bias=bias)

        def drop(self, h):
            return F.dropout(h, self.p, training=self.training or dropout_in_eval)

        def forward(self, x):
            if self.kind == "swiglu":
                g, u = (self.gate(x), self.up(x)) if gate_from == "gate" else (self.up(x), self.gate(x))
                hidden = gate(g) * u
            else:
                act = torch.relu if self.kind == "relu" else (
                    (lambda h: F.gelu(h, approximate="tanh")) if gelu == "tanh" else F.gelu)
                if activate == "output":
                    return act(self.down(self.drop(self.up(x))))
                hidden = act(self.up(x))
            if dropout_at == "output":
                return self.drop(self.down(hidden))
            return self.down(self.drop(hidden))

    return FeedForwardModule


class _ReluForEveryKind(_feed_forward_like()):
    def forward(self, x):
        return super().forward(x) if self.kind == "swiglu" else self.down(self.drop(torch.relu(self.up(x))))


class _Bilinear(_feed_forward_like()):  # the gate without its SiLU
    def forward(self, x):
        return self.down(self.drop(self.gate(x) * self.up(x))) if self.kind == "swiglu" else super().forward(x)


class _OutputBiasDropped(_feed_forward_like()):
    def forward(self, x):
        out = super().forward(x)
        return out if self.kind == "swiglu" or self.down.bias is None else out - self.down.bias


class _DropoutIgnored(_feed_forward_like()):
    def drop(self, h):
        return h


FFN = Exercise(
    id="05.ffn",
    gradients=True,  # trained in the book: a detached or no_grad path must not pass
    forbidden=(FeedForward, SwiGLU),
    reference=reference_feed_forward_module,
    call=_ffn_module_call,
    cases=_ffn_module_cases,
    points=3,
    outputs=("the output",),
    checked=(
        "the paper's ReLU FFN, GPT-2's GELU in its tanh form (float64), LLaMA's SwiGLU in float32 and float64; "
        "bias=False for ReLU and bias=True for SwiGLU; LLaMA's rounding with multiple_of 8 and 5; dropout at evaluation "
        "and in training (seeded, GELU and SwiGLU); and four bad arguments (an unknown kind, d_ff=0, dropout=1.0, "
        "multiple_of for ReLU), each a ValueError; the weights are the cases' own, put in your layers by name, and the "
        "gradients with respect to them match too"
    ),
    mistakes=(
        Mistake("exact_gelu", "used the exact GELU where GPT-2 uses the tanh form",
                "`F.gelu` on its own is the erf form; GPT-2's is your `gelu_tanh` (or `F.gelu` with "
                "`approximate='tanh'`): they differ by up to a few 1e-4.", (_feed_forward_like(gelu="exact"),)),
        Mistake("gate_and_up_swapped", "put the SiLU on the up branch instead of the gate",
                "SwiGLU(x) = (SiLU(x W_gate) ⊙ x W_up) W_down: SiLU acts on the output of the `gate` layer, and the "
                "`up` layer's output multiplies it as it is.", (_feed_forward_like(gate_from="up"),)),
        Mistake("sigmoid_gate", "gated with a sigmoid (GLU) instead of SiLU",
                "SwiGLU's gate is SiLU(a) = a·σ(a), `F.silu`; σ(a) alone is the original GLU.",
                (_feed_forward_like(gate=torch.sigmoid),)),
        Mistake("activation_on_the_output", "applied the activation after the second layer instead of the first",
                "Eq. (2) is act(x W_1 + b_1) W_2 + b_2: the activation acts on the hidden layer, and the output stays "
                "linear.", (_feed_forward_like(activate="output"),)),
        Mistake("bias_ignored", "gave each family its own biases whatever `bias` said",
                "`bias=None` means the family's choice (biases for ReLU and GPT-2, none for LLaMA); `True` or `False` "
                "overrides it for all the layers, as PaLM drops GPT-2's biases.",
                (_feed_forward_like(bias_from="kind"),)),
        Mistake("multiple_of_ignored", "built SwiGLU's layers with d_ff as given when multiple_of was set",
                "With `multiple_of`, LLaMA does not use `d_ff` as it comes: it takes two thirds of it first, then "
                "rounds; the layers' shapes follow that size.", (_feed_forward_like(rounding="none"),)),
        Mistake("rounded_down", "rounded two thirds of d_ff down to the multiple instead of up",
                "Round up, so that the gate never has fewer units than two thirds of `d_ff` (exercise 4's rule): the "
                "next multiple at or above the size.", (_feed_forward_like(rounding="down"),)),
        Mistake("two_thirds_skipped", "rounded d_ff itself to the multiple, without taking two thirds first",
                "SwiGLU has three matrices where the plain FFN has two: LLaMA keeps the parameter count by taking "
                "two thirds of `d_ff` (truncated to an int) before rounding it up.",
                (_feed_forward_like(rounding="of_d_ff"),)),
        Mistake("dropout_on_the_output", "dropped units of the output instead of the hidden layer",
                "The book's FFN drops hidden units, between the activation (or SwiGLU's product) and `down`, as "
                "exercise 1 does; the block's residual takes care of the rest.",
                (_feed_forward_like(dropout_at="output"),)),
        Mistake("dropout_at_evaluation", "dropped units at evaluation too (`F.dropout` without `training`)",
                "`F.dropout` drops by default; dropout must follow the module's mode, `self.training`, which "
                "`module.eval()` switches off (an `nn.Dropout` layer does this for you).",
                (_feed_forward_like(dropout_in_eval=True),)),
        Mistake("size_not_refused", "built layers of size 0 instead of refusing d_ff=0",
                "`nn.Linear` accepts a size of 0 and the module then outputs its bias alone: check that `d_model` and "
                "`d_ff` are positive ints in `__init__` and raise a ValueError naming the one that is not.",
                (_feed_forward_like(refuses_sizes=False),)),
        Mistake("dropout_not_refused", "accepted dropout=1.0, a rate that drops every unit",
                "A dropout rate must lie in [0, 1): at 1 nothing is kept and the rescaling divides by 0. Raise a "
                "ValueError naming `dropout` before any layer is built.", (_feed_forward_like(refuses_dropout=False),)),
        Mistake("multiple_of_not_refused", "accepted multiple_of for a kind without a gate and ignored it",
                "`multiple_of` is LLaMA's rounding of SwiGLU's hidden size; for \"relu\" or \"gelu_tanh\" it would be "
                "silently ignored, so refuse it with a ValueError naming `multiple_of`.",
                (_feed_forward_like(refuses_multiple_of=False),)),
    ),
    mutants=(
        Mutant("relu_for_every_kind", "uses ReLU for gelu_tanh too", _ReluForEveryKind),
        Mutant("bilinear", "multiplies the gate and up branch with no SiLU", _Bilinear),
        Mutant("output_bias_dropped", "drops the output layer's bias", _OutputBiasDropped),
        Mutant("dropout_ignored", "never drops a unit, in training either", _DropoutIgnored),
    ),
)


# --- 05.predict_ffn_share (predict, then measure: where a block's parameters are) ------------------------------------------


def ffn_share(d_model=512, n_heads=8, d_ff=2048):
    """The FFN's share of the parameters of the package's TransformerBlock (attention, FFN, two LayerNorms)."""
    with torch.device("meta"):  # shapes without numbers: nothing is drawn from the random generator
        block = TransformerBlock(d_model, n_heads, d_ff)
    return sum(p.numel() for p in block.ffn.parameters()) / sum(p.numel() for p in block.parameters())


PREDICT_FFN_SHARE = predict_number(
    "05.predict_ffn_share",
    measure=ffn_share,
    question="the FFN's share of a block",
    within=1.15,
    points=1,
    misconceptions=[
        Misconception("as_large_as_attention", 1 / 2, "expected the FFN and the attention to hold as many parameters",
                      "Attention holds four d_model × d_model matrices, 4·d_model²; the FFN two of d_model × 4·d_model, "
                      "8·d_model²: twice as many."),
        Misconception("counted_matrices", 1 / 3, "counted matrices instead of their sizes (2 of the 6)",
                      "The FFN's matrices are four times larger than attention's: d_model × d_ff with d_ff = 4·d_model."),
        Misconception("one_ffn_matrix_per_attention_matrix", 4 / 5,
                      "compared one FFN matrix (4·d_model²) with one attention matrix (d_model²)",
                      "Count all of them: two FFN matrices, 8·d_model², against four attention projections, 4·d_model²."),
        Misconception("forgot_three_projections", 8 / 9,
                      "compared the FFN (8·d_model²) with a single attention matrix",
                      "Attention has W^Q, W^K, W^V and W^O: 4·d_model², so the FFN holds 8 of every 12 parameters."),
    ],
    mutants=[
        wrong_prediction("a_tenth", 0.1, "a small add-on, explained by no misconception"),
        wrong_prediction("a_quarter", 0.25, "a quarter, explained by no misconception"),
    ],
)


# --- 05.predict_dead_share (predict, then measure: how many ReLU units are off at initialisation) --------------------------

DEAD_SHARE_SHIFT = 3.0  # every input coordinate is drawn from N(3, 1): almost all of them are positive


def ffn_hidden_units(shift: float = DEAD_SHARE_SHIFT, d_model: int = 64, d_ff: int = 256, n_inputs: int = 512) -> torch.Tensor:
    """The hidden units of the package's ReLU FeedForward(d_model, d_ff) (initialised with seed 0) after the ReLU, on
    ``n_inputs`` inputs x ~ N(shift, 1) (seed 0), caught by a forward hook as the input of the second layer (dropout
    is 0, so that is the ReLU's output): (n_inputs, d_ff)."""
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
        torch.manual_seed(0)
        ffn = FeedForward(d_model, d_ff)
    x = shift + torch.randn(n_inputs, d_model, generator=torch.Generator().manual_seed(0))
    caught = []
    hook = ffn.down.register_forward_hook(lambda module, inputs, output: caught.append(inputs[0]))
    try:
        with torch.no_grad():
            ffn(x)
    finally:
        hook.remove()
    return caught[0]


def dead_share() -> float:
    """The share of the hidden activations that are exactly 0 after the ReLU, inputs shifted by +3."""
    return (ffn_hidden_units() == 0).float().mean().item()


PREDICT_DEAD_SHARE = predict_number(
    "05.predict_dead_share",
    measure=dead_share,
    question="the share of hidden ReLU activations that are 0 on inputs around +3",
    within=1.25,
    points=1,
    misconceptions=[
        Misconception("positive_inputs_pass", 0.0, "expected positive inputs to switch every hidden unit on",
                      "The ReLU acts on the hidden pre-activations, not on the inputs: each is a weighted sum of the "
                      "inputs, and at initialisation about as many weights are negative as positive."),
        Misconception("share_of_negative_inputs", 0.00135,
                      "took the share of input coordinates below zero (the tail of N(3, 1))",
                      "A hidden unit is off when its weighted sum is negative, whatever the sign of each input: "
                      "with weights of both signs, a large shared input pushes some units up and others down."),
        Misconception("shift_only_switches_off", 0.75,
                      "expected the shift to switch units off and never on",
                      "The shift moves each unit's pre-activation by an amount set by the sum of its weights, which "
                      "is as often negative as positive: as many units are pushed on as off."),
        Misconception("shift_only_switches_on", 0.25,
                      "expected the shift to switch units on and never off",
                      "The shift moves each unit's pre-activation by an amount set by the sum of its weights, which "
                      "is as often negative as positive: as many units are pushed off as on."),
    ],
    mutants=[
        wrong_prediction("a_tenth", 0.1, "a few units off, explained by no misconception"),
        wrong_prediction("all_off", 1.0, "every unit off, explained by no misconception"),
    ],
)

register(FEED_FORWARD, GELU_TANH, SWIGLU, SWIGLU_HIDDEN_SIZE, FFN, PREDICT_FFN_SHARE, PREDICT_DEAD_SHARE)
