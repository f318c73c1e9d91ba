"""Chapter 08's exercises: counting a GPT's parameters, GPT-2's initialisation and the forward pass.

The three exercises take a model, whose ``repr`` is pages long, so each case holds a :class:`_Model`: a short
description and a function that builds the model afresh for every call (the learner's, the reference's, and every
catalogued mistake's), seeded, so all of them see the same weights and no call sees another's changes.

Each mistake is written the way a learner would write it: the reference with exactly one thing wrong. The mistakes
carry no annotations on purpose (see ``ch03.py``).

``08.predict_own_token_share`` (predict, then measure, by running the untrained character GPT on the corpus): how
often the tied model's top prediction is the character it reads, the echo that weight tying gives at initialisation.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tutorial_lib.blocks import TransformerBlock
from tutorial_lib.checks.ch06 import BookBlock, _OwnBlock, _OwnLayerNorm
from tutorial_lib.checks.compound import mistake_builder
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, WrongOutput, register
from tutorial_lib.checks.modules import build_module, first_module_that_differs, same_parameters
from tutorial_lib.feed_forward import FeedForward
from tutorial_lib.multi_head import MultiHeadAttention
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction
from tutorial_lib.counting import count_parameters, parameters_by_module
from tutorial_lib.embeddings import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, TokenEmbedding
from tutorial_lib.models.gpt import GPT, GPTConfig, gpt2_init_
from tutorial_lib.normalization import LayerNorm

TINY = GPTConfig(d_vocab=50, n_ctx=16, d_model=32, n_heads=4, n_layers=2)


@dataclass(frozen=True)
class _Model:
    """A model built on demand: ``build()`` gives a fresh one each time; verdicts show ``<description>``."""

    description: str
    make: Callable[[], nn.Module]
    seed: int = 0

    def build(self) -> nn.Module:
        with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
            torch.manual_seed(self.seed)
            return self.make()

    def fresh_copy(self) -> _Built:
        """What each run of a check gets (checks.running.fresh_copy): the model, built once for that run, as a module
        whose parameters the gradient comparison reaches."""
        return _Built(self.description, self.build(), self.seed)

    def __repr__(self) -> str:
        return f"<{self.description}>"


class _Built(nn.Module):
    """One run's model: ``build()`` gives the same module every time within the run."""

    def __init__(self, description: str, model: nn.Module, seed: int) -> None:
        super().__init__()
        self.description, self.model, self.seed = description, model, seed

    def build(self) -> nn.Module:
        return self.model

    def __repr__(self) -> str:
        return f"<{self.description}>"


def _describe(cfg: GPTConfig) -> str:
    tying = "tied embeddings" if cfg.tie_embeddings else "untied unembedding"
    biases = "" if cfg.bias else ", no biases"
    return (
        f"a GPT with d_vocab={cfg.d_vocab}, n_ctx={cfg.n_ctx}, d_model={cfg.d_model}, n_heads={cfg.n_heads}, "
        f"n_layers={cfg.n_layers}, {tying}{biases}"
    )


def _gpt_case(cfg: GPTConfig, seed: int = 0) -> _Model:
    return _Model(_describe(cfg), lambda: GPT(cfg).eval(), seed)


# --- 08.count_parameters ----------------------------------------------------------------------------------------------


def _frozen_embedding_and_buffers() -> nn.Module:
    model = nn.ModuleDict({
        "embed": nn.Embedding(20, 8),
        "positions": SinusoidalPositionalEncoding(16, 8),  # a buffer that is not saved (persistent=False)
        "norm": nn.BatchNorm1d(8),  # running mean and variance: buffers that are saved in the state_dict
        "head": nn.Linear(8, 5),
    })
    model["embed"].weight.requires_grad_(False)  # frozen, as pretrained embeddings often are
    return model


def _gpt2_small_on_meta() -> nn.Module:
    with torch.device("meta"):  # shapes without memory
        return GPT(GPTConfig.gpt2("small"))


def _count_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(model=_Model(
            "a frozen nn.Embedding, sinusoidal positions (a buffer), a BatchNorm1d (more buffers) and a Linear head",
            _frozen_embedding_and_buffers,
        )),
        Case.of(model=_gpt_case(TINY)),
        Case.of(model=_gpt_case(TINY.replace(tie_embeddings=False, n_layers=3))),
        Case.of(model=_Model("GPT-2 small on the meta device", _gpt2_small_on_meta)),
    ]


def _count_call(obj, args):
    return obj(args[0].build())


@mistake_builder
def _count_like(*, source="parameters", buffers=False, trainable_only=False, counted="numbers"):
    """A learner's count_parameters; each keyword reproduces one way of getting it wrong. ``source``: the tensors
    counted, "parameters" (right), "state_dict", "with_repeats" (``named_parameters(remove_duplicate=False)``) or
    "per_module" (each module's own, so a shared matrix twice); ``buffers=True`` adds the buffers;
    ``trainable_only=True`` skips frozen parameters; ``counted="tensors"`` counts tensors, not numbers."""

    def count_parameters(model):
        tensors = {
            "parameters": lambda: list(model.parameters()),
            "state_dict": lambda: list(model.state_dict().values()),
            "with_repeats": lambda: [p for _, p in model.named_parameters(remove_duplicate=False)],
            "per_module": lambda: [p for module in model.modules() for p in module.parameters(recurse=False)],
        }[source]()
        if trainable_only:
            tensors = [t for t in tensors if t.requires_grad]
        if buffers:
            tensors += list(model.buffers())
        return len(tensors) if counted == "tensors" else sum(t.numel() for t in tensors)

    return count_parameters


def _non_embedding(model):  # the "non-embedding" count of scaling-law papers, not the model's size
    return sum(p.numel() for p in model.parameters()) - model.embed.weight.numel()


def _matrices_only(model):
    return sum(p.numel() for p in model.parameters() if p.dim() > 1)


def _first_dimensions(model):
    return sum(len(p) for p in model.parameters())


COUNT_PARAMETERS = Exercise(
    id="08.count_parameters",
    forbidden=(parameters_by_module,),
    reference=count_parameters,
    cases=_count_cases,
    points=1,
    call=_count_call,
    outputs=("the count",),
    checked=(
        "a module with a frozen embedding and buffers, GPTs with tied and untied embeddings, and GPT-2 small on the "
        "meta device (124,439,808 parameters)"
    ),
    mistakes=(
        Mistake("summed_state_dict", "summed over `model.state_dict()`",
                "The state dict lists a tied matrix under each of its names and holds buffers (BatchNorm's running "
                "statistics) that are not parameters: sum over `model.parameters()` instead.",
                (_count_like(source="state_dict"),)),
        Mistake("counted_tied_matrix_twice", "counted the tied embedding matrix twice",
                "`model.parameters()` (and `named_parameters()` with its default `remove_duplicate=True`) yields "
                "a parameter shared by two modules once; going module by module, or with "
                "`remove_duplicate=False`, counts it for each module that holds it.",
                (_count_like(source="with_repeats"), _count_like(source="per_module"))),
        Mistake("counted_buffers", "counted the buffers as well",
                "Buffers (`model.buffers()`: BatchNorm's running statistics, a fixed sinusoidal table) are state, "
                "not parameters: nothing trains them. Count `model.parameters()` only.", (_count_like(buffers=True),)),
        Mistake("trainable_only", "counted only the parameters that require gradients",
                "A frozen parameter (`requires_grad=False`) is still a parameter of the model: count every one.",
                (_count_like(trainable_only=True),)),
        Mistake("counted_tensors", "counted the parameter tensors instead of the numbers in them",
                "The length of the list of `model.parameters()` is the number of tensors; add up each tensor's "
                "`numel()` instead.",
                (_count_like(counted="tensors"),)),
    ),
    mutants=(
        Mutant("non_embedding", "leaves out the token embedding (the scaling-law papers' count)", _non_embedding),
        Mutant("matrices_only", "counts the matrices and skips biases and norm weights", _matrices_only),
        Mutant("first_dimensions", "adds up len(p), the size of each tensor's first axis", _first_dimensions),
    ),
)


# --- 08.gpt2_init ---------------------------------------------------------------------------------------------------


def _pytorch_defaults_(model: nn.Module) -> None:
    """Replace the GPT-2 initialisation that ``GPT()`` applied by PyTorch's defaults (``nn.Embedding``'s N(0, 1))."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.reset_parameters()
        elif isinstance(module, (TokenEmbedding, LearnedPositionalEmbedding)):
            nn.init.normal_(module.weight)


def _rms(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Root mean square of each tensor, float64: the std of a zero-mean initialisation, 0 for zeros, 1 for ones."""
    return torch.tensor([t.detach().double().pow(2).mean().sqrt().item() for t in tensors], dtype=torch.float64)


INIT_OUTPUTS = (
    "the token embedding's RMS",
    "the position embedding's RMS",
    "the RMS of W^Q, W^K, W^V",
    "the RMS of W^O",
    "the RMS of the FFN's first matrix",
    "the RMS of the FFN's second matrix",
    "the biases' RMS",
    "the norm weights' RMS",
    "the unembedding's RMS",
)


def _init_summary(model: GPT) -> tuple[torch.Tensor, ...]:
    """One tensor per kind of parameter (one value per layer for the blocks), in the order of ``INIT_OUTPUTS``."""
    blocks = list(model.blocks)
    return (
        _rms([model.embed.weight]),
        _rms([model.pos_embed.weight]),
        _rms([getattr(b.attn, name).weight for b in blocks for name in ("q_proj", "k_proj", "v_proj")]).view(-1, 3),
        _rms([b.attn.out_proj.weight for b in blocks]),
        _rms([b.ffn.up.weight for b in blocks]),
        _rms([b.ffn.down.weight for b in blocks]),
        _rms([p for name, p in model.named_parameters() if name.endswith(".bias")]),
        _rms([m.weight for m in model.modules() if isinstance(m, LayerNorm)]),
        _rms([model.unembed.weight]),
    )


def _init_cases(generator: torch.Generator) -> list[Case]:
    # d_model = 64: the smallest matrix has 2,048 entries, so a correct answer's RMS is within ~2% of its std
    # (sampling error 1/√(2n)) and the 10% tolerance is never reached, while 1/√n_layers and 1/√(2·n_layers)
    # differ by 41%.
    cfg = GPTConfig(d_vocab=100, n_ctx=32, d_model=64, n_heads=4, n_layers=4)
    return [
        Case.of(model=_gpt_case(cfg)),
        Case.of(model=_gpt_case(cfg.replace(n_layers=2, tie_embeddings=False), seed=1)),
        Case.of(model=_gpt_case(cfg.replace(n_layers=6, bias=False), seed=2)),
    ]


def _init_call(obj, args):
    spec = args[0]
    model = spec.build()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        _pytorch_defaults_(model)
        torch.manual_seed(spec.seed + 1)
        obj(model)
    _check_random_draws(model)
    return _init_summary(model)


def _check_random_draws(model: GPT) -> None:
    """Each weight matrix and embedding table must be a fresh draw centred on 0: not a constant (a fill of 0.02 has the
    right RMS), not one draw copied into every block. With at least 2,048 entries a zero-mean draw's mean is within
    0.1 of its std by more than 4 standard errors, and two independent draws correlate by less than 0.2 by 9."""
    blocks = list(model.blocks)
    matrices = {"the token embedding": model.embed.weight, "the position embedding": model.pos_embed.weight}
    for i, block in enumerate(blocks):
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            matrices[f"block {i}'s attn.{name}.weight"] = getattr(block.attn, name).weight
        for name in ("up", "down"):
            matrices[f"block {i}'s ffn.{name}.weight"] = getattr(block.ffn, name).weight
    for where, weight in matrices.items():
        w = weight.detach().double()
        if w.std() <= 1e-3 * w.pow(2).mean().sqrt():
            raise WrongOutput("wrong_values", f"{where} holds one value, {w.flatten()[0].item():.4g}, in every entry: "
                                              f"the RMS may be right, but an initialisation draws each entry at random")
        if w.mean().abs() > 0.1 * w.std():
            raise WrongOutput("wrong_values", f"{where} has mean {w.mean().item():.3g} for std {w.std().item():.3g}: "
                                              f"GPT-2's draws are centred on 0")
    same_shape = {}
    for where, weight in matrices.items():
        for other, other_weight in same_shape.get(weight.shape, []):
            pair = torch.stack([weight.detach().double().flatten(), other_weight.detach().double().flatten()])
            if torch.corrcoef(pair)[0, 1].abs() > 0.2:
                raise WrongOutput("wrong_values", f"{where} and {other} are the same draw (correlation "
                                                  f"{torch.corrcoef(pair)[0, 1].item():.2f}): each matrix needs a draw "
                                                  f"of its own")
        same_shape.setdefault(weight.shape, []).append((where, weight))


@mistake_builder
def _gpt2_init_like(*, residual_std=lambda n_layers: 0.02 / math.sqrt(2 * n_layers),
                    residual_layers=("out_proj", "down"), every_linear=False, zero_biases=True,
                    embeddings=(TokenEmbedding, LearnedPositionalEmbedding), scale_first=False):
    """A learner's GPT-2 initialisation; each keyword reproduces one way of getting it wrong."""

    def gpt2_init_(model):
        std = residual_std(model.cfg.n_layers)
        if scale_first:  # the scaled draw comes first, and the loop below draws every linear layer again
            for block in model.blocks:
                nn.init.normal_(block.attn.out_proj.weight, std=std)
                nn.init.normal_(block.ffn.down.weight, std=std)
        for module in model.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=std if every_linear else 0.02)
                if module.bias is not None and zero_biases:
                    nn.init.zeros_(module.bias)
            elif embeddings and isinstance(module, embeddings):
                nn.init.normal_(module.weight, std=0.02)
        if not every_linear and not scale_first:
            for block in model.blocks:
                for name in residual_layers:
                    layer = block.attn.out_proj if name == "out_proj" else getattr(block.ffn, name)
                    nn.init.normal_(layer.weight, std=std)

    return gpt2_init_


def _uniform_init_(model):
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.uniform_(module.weight, -0.02, 0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, (TokenEmbedding, LearnedPositionalEmbedding)):
            nn.init.uniform_(module.weight, -0.02, 0.02)
    std = 0.02 / math.sqrt(2 * model.cfg.n_layers)
    for block in model.blocks:
        nn.init.uniform_(block.attn.out_proj.weight, -std, std)
        nn.init.uniform_(block.ffn.down.weight, -std, std)


def _every_parameter_normal_(model):
    for parameter in model.parameters():
        nn.init.normal_(parameter, std=0.02)
    std = 0.02 / math.sqrt(2 * model.cfg.n_layers)
    for block in model.blocks:
        nn.init.normal_(block.attn.out_proj.weight, std=std)
        nn.init.normal_(block.ffn.down.weight, std=std)


GPT2_INIT = Exercise(
    id="08.gpt2_init",
    reference=gpt2_init_,
    cases=_init_cases,
    points=2,
    call=_init_call,
    outputs=INIT_OUTPUTS,
    tolerance=(0.1, 1e-4),  # RMS of random draws: 10% is ≥ 5 sampling standard errors, yet far from every mistake
    checked=(
        "tied and untied GPTs of 2, 4 and 6 layers, one without biases: N(0, 0.02) embeddings and weights, "
        "W^O and the FFN's second matrix at 0.02/√(2·n_layers), zero biases, unit norms (each measured as the RMS "
        "of the parameter after your call, starting from PyTorch's default initialisation), every matrix a draw of its "
        "own, centred on 0"
    ),
    mistakes=(
        Mistake("no_residual_scaling",
                "left the residual projections at std 0.02: the scaling is missing, or a later loop over every "
                "linear layer drew them again",
                "GPT-2 draws W^O and the FFN's second matrix with std 0.02/√(2·n_layers), so the 2·n_layers "
                "branches that add to the residual stream sum to a variance that does not grow with depth. Scale "
                "them after the loop that initialises every linear layer, or the loop undoes it.",
                (_gpt2_init_like(residual_std=lambda n_layers: 0.02), _gpt2_init_like(scale_first=True))),
        Mistake("scaled_by_sqrt_n_layers", "scaled by 1/√n_layers instead of 1/√(2·n_layers)",
                "Each block adds *two* branches to the residual stream (attention and feed-forward): N = "
                "2·n_layers residual layers, std 0.02/√(2·n_layers).",
                (_gpt2_init_like(residual_std=lambda n_layers: 0.02 / math.sqrt(n_layers)),)),
        Mistake("forgot_square_root", "divided the std by 2·n_layers instead of its square root",
                "Scaling the *variance* by 1/N means scaling the std by 1/√N: divide 0.02 by the square root of "
                "2·n_layers.",
                (_gpt2_init_like(residual_std=lambda n_layers: 0.02 / (2 * n_layers)),)),
        Mistake("scaled_every_linear", "scaled every linear layer's weights, not only the residual projections",
                "Only the two matrices that write into the residual stream, `attn.out_proj` and `ffn.down`, get "
                "0.02/√(2·n_layers); every other weight keeps std 0.02.", (_gpt2_init_like(every_linear=True),)),
        Mistake("scaled_ffn_up", "scaled the FFN's first matrix instead of its second",
                "The FFN writes into the residual stream through its *second* matrix, `ffn.down` (W_2): that one, "
                "with `attn.out_proj`, gets the smaller std.", (_gpt2_init_like(residual_layers=("out_proj", "up")),)),
        Mistake("biases_not_zeroed", "left the biases at PyTorch's default values",
                "GPT-2 starts every bias at zero: fill each linear layer's `bias` with zeros (`nn.init.zeros_`), "
                "skipping the layers built without one.",
                (_gpt2_init_like(zero_biases=False),)),
        Mistake("embeddings_not_initialised", "left an embedding table at its previous values",
                "The package's `TokenEmbedding` and `LearnedPositionalEmbedding` are not `nn.Embedding`s: test for "
                "them (or reach them as `model.embed` and `model.pos_embed`) and draw both with std 0.02.",
                (_gpt2_init_like(embeddings=(nn.Embedding,)), _gpt2_init_like(embeddings=()))),
    ),
    mutants=(
        Mutant("uniform", "draws from U(-0.02, 0.02), whose std is 0.0115, not N(0, 0.02)", _uniform_init_),
        Mutant("every_parameter_normal", "draws every parameter from N(0, 0.02), norms and biases included",
               _every_parameter_normal_),
    ),
)


# --- 08.gpt_module (the build track's milestone: the learner's GPT, with the book's trained weights) -------------------


class BookGPT(nn.Module):
    """The package's GPT (pre-norm, tied unembedding, the readable attention path) with GPT-2's names for the blocks'
    norms (``blocks.i.ln_1``, ``blocks.i.ln_2``), as the build track's modules name them: equal to ``GPT`` with the
    same weights, renamed by :func:`tutorial_lib.build_track.my_gpt_state_dict` (tested)."""

    def __init__(self, d_vocab: int, n_ctx: int, d_model: int, n_heads: int, n_layers: int, d_ff: int,
                 kind: str = "gelu_tanh") -> None:
        super().__init__()
        self.n_ctx = n_ctx
        self.embed = nn.Embedding(d_vocab, d_model)
        self.pos_embed = nn.Embedding(n_ctx, d_model)
        self.blocks = nn.ModuleList(BookBlock(d_model, n_heads, d_ff, kind) for _ in range(n_layers))
        self.ln_final = LayerNorm(d_model)
        self.unembed = nn.Linear(d_model, d_vocab, bias=False)
        self.unembed.weight = self.embed.weight  # tied, as GPT-2 and the book's character GPT are

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        if seq > self.n_ctx:
            raise ValueError(f"tokens has {seq} positions, more than n_ctx={self.n_ctx}")
        x = self.embed(tokens) + self.pos_embed.weight[:seq]
        mask = torch.ones(seq, seq, dtype=torch.bool, device=tokens.device).tril()
        for block in self.blocks:
            x = block(x, mask=mask)
        return self.unembed(self.ln_final(x))


@dataclass(frozen=True)
class GPTSizes:
    """The arguments of the learner's ``GPT(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind)``."""

    d_vocab: int
    n_ctx: int
    d_model: int
    n_heads: int
    n_layers: int
    d_ff: int
    kind: str

    def args(self) -> tuple:
        return (self.d_vocab, self.n_ctx, self.d_model, self.n_heads, self.n_layers, self.d_ff, self.kind)

    def __repr__(self) -> str:
        return f"GPT{self.args()}"


SMALL_GPT = GPTSizes(d_vocab=11, n_ctx=8, d_model=16, n_heads=2, n_layers=2, d_ff=32, kind="gelu_tanh")


def _random_gpt_weights(sizes: GPTSizes, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Every parameter drawn afresh (random γ and β too), the unembedding the token embedding's own tensor (tied)."""
    with torch.device("meta"):
        shapes = {name: p.shape for name, p in BookGPT(*sizes.args()).state_dict().items()}
    weights = {}
    for name, shape in shapes.items():
        if name == "unembed.weight":
            continue
        centre = 1.0 if name.endswith("weight") and ("ln_" in name) else 0.0
        weights[name] = centre + 0.3 * torch.randn(shape, generator=generator)
    weights["unembed.weight"] = weights["embed.weight"]
    return weights


@functools.lru_cache(maxsize=1)
def book_char_gpt_case() -> tuple[GPTSizes, dict[str, torch.Tensor], torch.Tensor]:
    """Chapter 09's trained character GPT (the recipe's, from the cache or trained once), its weights in the build
    track's names, and 4 windows of 64 validation characters."""
    from tutorial_lib.build_track import my_gpt_state_dict
    from tutorial_lib.data.shakespeare import load_shakespeare_char
    from tutorial_lib.recipes import load_or_train_char_gpt

    dataset = load_shakespeare_char()
    book = load_or_train_char_gpt(dataset, progress=False)
    cfg = book.cfg
    sizes = GPTSizes(cfg.d_vocab, cfg.n_ctx, cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.d_ff, cfg.activation)
    weights = {name: t.detach().clone() for name, t in my_gpt_state_dict(book.state_dict()).items()}
    weights["unembed.weight"] = weights["embed.weight"]
    return sizes, weights, dataset.val[: 4 * cfg.n_ctx].view(4, cfg.n_ctx)


def _gpt_module_cases(generator: torch.Generator) -> list[Case]:
    book_sizes, book_weights, book_tokens = book_char_gpt_case()
    relu = dataclasses.replace(SMALL_GPT, n_layers=3, kind="relu")
    return [
        Case.of(sizes=SMALL_GPT, weights=_random_gpt_weights(SMALL_GPT, generator),
                tokens=torch.randint(0, 11, (2, 8), generator=generator), note="a full context, every weight random"),
        Case.of(sizes=relu, weights=_random_gpt_weights(relu, generator),
                tokens=torch.randint(0, 11, (3, 5), generator=generator), note="a ReLU FFN, a shorter sequence"),
        Case.of(sizes=SMALL_GPT, weights=_random_gpt_weights(SMALL_GPT, generator),
                tokens=torch.randint(0, 11, (1, 9), generator=generator), note="9 positions for n_ctx = 8: a ValueError"),
        # in float64: float32's rounding moves the embedding's gradient (a sum over 256 positions, entries up to
        # about 55) by up to 5e-4, where a wrong answer moves it by far more
        Case.of(sizes=book_sizes, weights={name: t.double() for name, t in book_weights.items()},
                tokens=book_tokens.clone(),
                note="chapter 09's trained character GPT, in float64, on 4 × 64 validation characters"),
    ]


def _tied(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The weights with the unembedding the token embedding's own tensor (a case's copy clones the two apart)."""
    return {**weights, "unembed.weight": weights["embed.weight"]}


def _gpt_module_call(cls, args):
    sizes, weights, tokens = args
    weights = _tied(weights)
    module = build_module(cls, sizes.args(), "GPT(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind)")
    same_parameters(module, weights, "GPT(d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind)")
    unembed, embed = getattr(module, "unembed", None), getattr(module, "embed", None)
    if getattr(unembed, "weight", None) is not getattr(embed, "weight", 0):
        raise WrongOutput("wrong_type", "your unembed.weight is not embed.weight: tie them (make the unembedding's "
                                        "weight the token embedding's own Parameter), as the book's GPT does")
    return torch.func.functional_call(module.eval(), weights, (tokens,), strict=True)


def locate_first_difference(cls, args) -> str | None:
    """The learner's first module (in the order the book's model runs them) whose output differs from the book's."""
    sizes, weights, tokens = args
    return first_module_that_differs(build_module(cls, sizes.args(), "GPT"), BookGPT(*sizes.args()), _tied(weights),
                                     (tokens,))


@mistake_builder
def _gpt_module_like(*, scale=False, positions="before", causal="tril", final_norm=True, output="logits"):
    """A learner's GPT module made of a learner's parts; each keyword reproduces one way of getting it wrong."""

    class MyGPT(nn.Module):
        def __init__(self, d_vocab, n_ctx, d_model, n_heads, n_layers, d_ff, kind="gelu_tanh"):
            super().__init__()
            self.n_ctx = n_ctx
            self.embed = nn.Embedding(d_vocab, d_model)
            self.pos_embed = nn.Embedding(n_ctx, d_model)
            self.blocks = nn.ModuleList(_OwnBlock(d_model, n_heads, d_ff, kind) for _ in range(n_layers))
            self.ln_final = _OwnLayerNorm(d_model)
            self.unembed = nn.Linear(d_model, d_vocab, bias=False)
            self.unembed.weight = self.embed.weight

        def forward(self, tokens):
            batch, seq = tokens.shape
            if seq > self.n_ctx:
                raise ValueError(f"{seq} positions, more than n_ctx={self.n_ctx}")
            x = self.embed(tokens)
            if scale:
                x = x * math.sqrt(x.shape[-1])
            if positions == "before":
                x = x + self.pos_embed.weight[:seq]
            elif positions == "batch axis":
                x = x + self.pos_embed.weight[:batch, None]
            mask = {"tril": torch.ones(seq, seq, dtype=torch.bool).tril(), "none": None,
                    "triu": torch.ones(seq, seq, dtype=torch.bool).triu()}[causal]
            for block in self.blocks:
                x = block(x, mask=mask)
            if positions == "after":
                x = x + self.pos_embed.weight[:seq]
            if final_norm:
                x = self.ln_final(x)
            logits = self.unembed(x)
            if output == "probabilities":
                return torch.softmax(logits, dim=-1)
            return logits[:, -1] if output == "last" else logits

    return MyGPT


class _SkipsTheBlocks(_gpt_module_like()):
    def forward(self, tokens):
        seq = tokens.shape[1]
        return self.unembed(self.ln_final(self.embed(tokens) + self.pos_embed.weight[:seq]))


class _NormBeforeTheLastBlock(_gpt_module_like()):
    def forward(self, tokens):
        seq = tokens.shape[1]
        mask = torch.ones(seq, seq, dtype=torch.bool).tril()
        x = self.embed(tokens) + self.pos_embed.weight[:seq]
        for block in self.blocks[:-1]:
            x = block(x, mask=mask)
        return self.unembed(self.blocks[-1](self.ln_final(x), mask=mask))


GPT_MODULE = Exercise(
    id="08.gpt_module",
    gradients=True,  # trained in chapter 09: a detached or no_grad path must not pass
    # the package's models and the modules the learner built in chapters 03 to 06 are the learner's to use, not these
    forbidden=(GPT, BookGPT, BookBlock, TransformerBlock, MultiHeadAttention, FeedForward, LayerNorm, nn.LayerNorm,
               F.layer_norm, nn.MultiheadAttention, F.scaled_dot_product_attention, nn.TransformerDecoderLayer,
               nn.TransformerEncoderLayer),
    reference=BookGPT,
    call=_gpt_module_call,
    localize=locate_first_difference,
    cases=_gpt_module_cases,
    points=4,
    outputs=("the logits tensor",),
    checked=(
        "GPTs with every weight random (GPT-2's and a ReLU FFN, a full context and a shorter one), 9 positions for "
        "n_ctx = 8 (a ValueError), and chapter 09's trained character GPT, its weights put in your layers by name (in "
        "float64), on 4 × 64 validation characters: the logits and the gradients of every weight equal to the book's "
        "model's"
    ),
    mistakes=(
        Mistake("no_final_norm", "left out the final LayerNorm",
                "Pre-norm blocks leave the residual stream un-normalised: apply `ln_final` before `unembed`.",
                (_gpt_module_like(final_norm=False),)),
        Mistake("no_positions", "left out the position embeddings",
                "Without them the model cannot tell positions apart: add the rows of `pos_embed` for positions 0 to "
                "seq - 1 to the token embeddings.", (_gpt_module_like(positions="none"),)),
        Mistake("positions_after_blocks", "added the position embeddings after the blocks",
                "Positions go in at the bottom, before the first block, so that attention can use them.",
                (_gpt_module_like(positions="after"),)),
        Mistake("not_causal", "ran the blocks without a causal mask",
                "Hand every block the (seq, seq) mask that is True on and below the diagonal: without it each "
                "position reads the tokens it is meant to predict.", (_gpt_module_like(causal="none"),)),
        Mistake("mask_upside_down", "masked with the upper triangle, so each position reads the future and not the past",
                "A position may read itself and the positions before it: True on and *below* the diagonal.",
                (_gpt_module_like(causal="triu"),)),
        Mistake("scaled_embeddings", "multiplied the token embeddings by √d_model",
                "That is the paper's §3.4, for its encoder-decoder; GPT-2 adds the embeddings unscaled.",
                (_gpt_module_like(scale=True),)),
        Mistake("returned_probabilities", "returned probabilities instead of logits",
                "Return the unembedding's output as it is: the loss (`F.cross_entropy`) and the samplers apply "
                "the softmax themselves.", (_gpt_module_like(output="probabilities"),)),
        Mistake("last_position_only", "returned the logits of the last position only",
                "Training predicts the next token at every position: return all of them, (batch, seq, d_vocab); "
                "generation picks out the last position itself.", (_gpt_module_like(output="last"),)),
    ),
    mutants=(
        Mutant("skips_the_blocks", "goes from the embeddings straight to the unembedding", _SkipsTheBlocks),
        Mutant("norm_before_the_last_block", "applies the final norm before the last block", _NormBeforeTheLastBlock),
        Mutant("positions_from_batch_axis", "takes the positions from the batch axis",
               _gpt_module_like(positions="batch axis")),
    ),
)


# --- 08.predict_gpt2_parameters (predict, then measure) ----------------------------------------------------------------


def gpt2_small_parameters() -> int:
    """The number of distinct parameters of the package's GPT-2 small (built on the meta device: shapes, no values)."""
    with torch.device("meta"):
        return count_parameters(GPT(GPTConfig.gpt2("small")))


PREDICT_GPT2_PARAMETERS = predict_number(
    "08.predict_gpt2_parameters",
    measure=gpt2_small_parameters,
    question="the number of parameters of GPT-2 small",
    within=1.2,
    misconceptions=[
        Misconception("tied_counted_twice", 163_037_184, "counted the tied unembedding as a second 50257 × 768 matrix",
                      "GPT-2 ties the unembedding to the token embedding: one matrix, used twice, counted once."),
        Misconception("blocks_only", 85_054_464, "counted the 12 blocks and forgot the embeddings",
                      "The token embedding alone is 50257 × 768, about 38.6 million numbers: nearly a third of the model."),
        Misconception("attention_only", 28_311_552, "counted only the attention's four d_model × d_model matrices per block",
                      "Each block also holds the feed-forward network, 2 × d_model × 4·d_model: twice the attention's "
                      "4 × d_model²."),
        Misconception("gpt2_xl", 1_500_000_000, "took the largest GPT-2's size, 1.5 billion",
                      "GPT-2 came in four sizes; small has 12 layers of width 768."),
    ],
    mutants=[
        wrong_prediction("a_million", 1_000_000, "a model a hundred times smaller"),
        wrong_prediction("fifty_million", 50_000_000, "no count of GPT-2 small's parts gives it"),
    ],
    points=1,
)


# --- 08.predict_own_token_share (predict, then measure: what an untrained, tied GPT predicts) --------------------------


def top_prediction_is_input_share(*, tie_embeddings: bool = True, seed: int = 0) -> float:
    """The share of positions at which the untrained character GPT (chapter 09's reference configuration, built after
    ``torch.manual_seed(seed)``, GPT-2's initialisation, run in float64) ranks the character it reads first among the
    65, on a batch of 32 × 64 characters of Tiny Shakespeare's training text (generator seed 0)."""
    import dataclasses

    from tutorial_lib.data.shakespeare import get_batch, load_shakespeare_char
    from tutorial_lib.recipes import CHAR_GPT_CONFIG

    cfg = dataclasses.replace(CHAR_GPT_CONFIG, tie_embeddings=tie_embeddings)
    tokens, _ = get_batch(load_shakespeare_char().train, 32, cfg.n_ctx, torch.Generator().manual_seed(0))
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
        torch.manual_seed(seed)
        model = GPT(cfg).eval().double()  # float64: no near tie is ranked differently by another CPU's rounding
    with torch.no_grad():
        return (model(tokens).argmax(dim=-1) == tokens).double().mean().item()


PREDICT_OWN_TOKEN_SHARE = predict_number(
    "08.predict_own_token_share",
    measure=top_prediction_is_input_share,
    question="the share of positions where the untrained, tied model's top prediction is the character it reads",
    within=1.3,
    points=1,
    misconceptions=[
        Misconception("random_guess", 1 / 65, "expected an untrained model's top character to be a random one of the 65",
                      "The unembedding is the token embedding itself: each logit is the dot product of the final "
                      "stream with a character's embedding. Ask what the stream still holds of the input's own "
                      "embedding at initialisation, and how that dot product compares with the others."),
        Misconception("never_itself", 0.0, "expected the model never to rank the input character first",
                      "Nothing at initialisation pushes the input's own character down; the tied matrix favours it, "
                      "since a vector's dot product with itself is large and positive."),
        Misconception("one_favourite_character", 0.15,
                      "expected the untrained model to favour one character everywhere, so to be right only where "
                      "the text holds it (the space, about a sixth of the text)",
                      "Each position's logits are computed from its own stream, which starts as its own character's "
                      "embedding: the favourite changes with the input."),
        Misconception("coin_flip", 0.5, "took the input's own character to come first as often as not",
                      "Compare sizes: the input's own logit is the squared length of its embedding (seen through the "
                      "final norm), while the others are dot products of unrelated random vectors, far smaller."),
    ],
    mutants=[
        wrong_prediction("a_quarter", 0.25, "no picture of the model gives it"),
        wrong_prediction("one_in_a_thousand", 0.001, "below even a random guess"),
    ],
)

register(COUNT_PARAMETERS, GPT2_INIT, GPT_MODULE, PREDICT_GPT2_PARAMETERS, PREDICT_OWN_TOKEN_SHARE)
