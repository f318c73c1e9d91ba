"""Where the norm goes, measured at initialisation (chapter 06): activation and gradient norms per layer of a deep stack.

:func:`norms_at_init` builds a GPT of ``n_layers`` blocks with one arrangement of residuals and norms (post-norm,
pre-norm, sandwich, pre-norm without the residual connections, pre-norm without any norm), initialises it, runs one
batch of random tokens forward and backward, and returns per block: the mean norm of the residual stream leaving it,
the norm of the gradient of the loss with respect to its parameters, and how alike the positions of a sequence have
become (mean cosine similarity between them). :func:`plot_norms_at_init` draws the first two against depth;
:func:`norms_at_init_widget` is a thin ipywidgets wrapper over them (every state drawn when the notebook runs, so it
works in the rendered book too).

The arrangements are the ablation runner's changes (:mod:`tutorial_lib.recipes.ablation`) applied to a deeper model, so the
model measured here is the one chapters 06 and 11 train, at another depth.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import ipywidgets as widgets
import torch
import torch.nn.functional as F
from jaxtyping import Float
from matplotlib.figure import Figure
from torch import Tensor, nn

from tutorial_lib.recipes.ablation import ABLATION_GPT_CONFIG, CHANGES, Change, build_ablated_model
from tutorial_lib.training import language_model_loss
from tutorial_lib.widgets._live import live_states, png_view
from tutorial_lib.widgets._plotting import new_figure

# Each arrangement is a change of the ablation runner's reference model (pre-norm GPT).
ARRANGEMENTS: dict[str, Change] = {
    "post-norm": CHANGES["post_norm"],
    "pre-norm": CHANGES["baseline"],
    "sandwich": Change("sandwich_norm", "x + Norm(Sublayer(Norm(x)))", model={"placement": "sandwich"}),
    "no residuals": CHANGES["no_residuals"],
    "no norms": CHANGES["no_norm"],
}
INITS = ("xavier", "gpt2")
_COLORS = dict(zip(ARRANGEMENTS, ("tab:red", "tab:blue", "tab:purple", "tab:grey", "tab:olive")))
_STYLES = dict(zip(ARRANGEMENTS, ("-", "-", "--", ":", "-.")))
DEPTH_CHOICES = (6, 12, 24)  # the widget's stops: with the two initialisations, 6 states drawn for the book


@dataclass(frozen=True)
class DepthStats:
    """Per block of one freshly initialised model, on one batch: what leaves it and what reaches its parameters."""

    activation: Float[Tensor, " n_layers"]  # mean over tokens of ‖x‖ leaving the block (the residual stream)
    gradient: Float[Tensor, " n_layers"]  # ‖∂loss/∂θ‖ over all of the block's parameters
    similarity: Float[Tensor, " n_layers"]  # mean cosine similarity between two positions' vectors leaving the block
    loss: float


def xavier_init_(model: nn.Module) -> None:
    """Every ``nn.Linear`` weight (the unembedding, tied to the token embedding, included) drawn by Glorot and
    Bengio's uniform rule, variance 2 / (fan_in + fan_out); biases zero. The initialisation Xiong et al. (2020)
    analyse, and the Annotated Transformer's."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def norms_at_init(
    arrangement: str,
    *,
    n_layers: int = 24,
    init: str = "xavier",
    d_model: int = 64,
    batch: int = 16,
    seed: int = 0,
) -> DepthStats:
    """Activation, gradient and similarity per block of a freshly initialised ``n_layers``-block GPT.

    The model is the ablation runner's (``d_model`` 64, 4 heads, ReLU, 32 positions, 65 characters) with
    ``arrangement`` (a key of :data:`ARRANGEMENTS`) and ``n_layers`` blocks, initialised by ``init``: ``"xavier"``
    (:func:`xavier_init_`) or ``"gpt2"`` (the package's GPT-2 initialisation, chapter 08). The batch is ``batch``
    sequences of random tokens with random targets, so the loss is about ln 65 for every arrangement. The same
    ``seed`` draws the same weights (where the arrangements share them) and the same tokens; the caller's random
    state is left as it was.
    """
    if arrangement not in ARRANGEMENTS:
        raise ValueError(f"arrangement must be one of {list(ARRANGEMENTS)}, got {arrangement!r}")
    if init not in INITS:
        raise ValueError(f"init must be one of {list(INITS)}, got {init!r}")
    for name, value in (("n_layers", n_layers), ("d_model", d_model), ("batch", batch)):
        _positive_int(name, value)
    cfg = ABLATION_GPT_CONFIG.replace(n_layers=n_layers, d_model=d_model)
    with torch.random.fork_rng(devices=[]):
        model = build_ablated_model(ARRANGEMENTS[arrangement], seed=seed, model_cfg=cfg)
        if init == "xavier":
            torch.manual_seed(seed)
            xavier_init_(model)
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, cfg.d_vocab, (batch, cfg.n_ctx + 1), generator=generator)
    outputs: list[Tensor] = []
    handles = [block.register_forward_hook(lambda module, args, output: outputs.append(output)) for block in model.blocks]
    try:
        loss = language_model_loss(model, (tokens[:, :-1], tokens[:, 1:]))
    finally:
        for handle in handles:
            handle.remove()
    loss.backward()
    activation = torch.stack([x.detach().norm(dim=-1).mean() for x in outputs])
    gradient = torch.stack([
        torch.sqrt(sum(p.grad.pow(2).sum() for p in block.parameters() if p.grad is not None)) for block in model.blocks
    ])
    similarity = torch.stack([_mean_cosine(x.detach()) for x in outputs])
    return DepthStats(activation, gradient, similarity, loss.item())


def _mean_cosine(x: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, ""]:
    """The mean cosine similarity between the vectors of two different positions of the same sequence."""
    unit = F.normalize(x, dim=-1)
    cosines = unit @ unit.transpose(-1, -2)  # (batch, seq, seq), ones on the diagonal
    seq = x.shape[1]
    return (cosines.sum(dim=(-1, -2)) - seq).mean() / (seq * (seq - 1))


def depth_profiles(
    arrangements: Sequence[str] = ("post-norm", "pre-norm", "no residuals"), **kwargs: object
) -> dict[str, DepthStats]:
    """:func:`norms_at_init` for each arrangement, with the same keyword arguments."""
    return {arrangement: norms_at_init(arrangement, **kwargs) for arrangement in arrangements}


def plot_norms_at_init(profiles: Mapping[str, DepthStats], *, title: str = "") -> Figure:
    """Gradient norm (top) and activation norm (bottom) per block, one line per arrangement, log scales.

    Stacked, so that the figure stays readable on a phone."""
    if not profiles:
        raise ValueError("profiles must hold at least one arrangement")
    fig, (left, right) = new_figure(2, 1, figsize=(6.2, 6.8))
    for arrangement, stats in profiles.items():
        layers = range(1, len(stats.gradient) + 1)
        style = {"color": _COLORS.get(arrangement, "black"), "linestyle": _STYLES.get(arrangement, "-"), "linewidth": 2}
        left.plot(layers, stats.gradient.tolist(), label=arrangement, **style)
        right.plot(layers, stats.activation.tolist(), label=arrangement, **style)
    for ax, what in ((left, "‖∂loss/∂θ‖ of the block"), (right, "‖x‖ leaving the block")):
        ax.set_yscale("log")
        ax.set_xlabel("block (1 = nearest the input)", fontsize=11)
        ax.set_ylabel(what, fontsize=11)
        ax.grid(alpha=0.3, which="both")
        ax.tick_params(labelsize=10)
    left.set_title("gradient per block", fontsize=12)
    right.set_title("activation per block", fontsize=12)
    left.legend(fontsize=10)
    if title:
        fig.suptitle(title, fontsize=12)
    return fig


_INIT_LABELS = {"xavier": "Xavier", "gpt2": "GPT-2 (0.02)"}


def norms_at_init_widget(
    n_layers: int = 24,
    arrangements: Sequence[str] = ("post-norm", "pre-norm", "no residuals"),
    *,
    init: str = "xavier",
    seed: int = 0,
) -> widgets.VBox:
    """Depth and initialisation as controls over :func:`plot_norms_at_init` of ``arrangements``.

    Every state is drawn now and switched in the browser (:func:`~tutorial_lib.widgets._live.live_states`), so the
    controls also work in the rendered book, with no kernel. Other arrangements: call the function again.
    """
    if n_layers not in DEPTH_CHOICES:
        raise ValueError(f"n_layers must be one of {DEPTH_CHOICES}, got {n_layers!r}")
    if init not in INITS:
        raise ValueError(f"init must be one of {list(INITS)}, got {init!r}")
    unknown = [a for a in arrangements if a not in ARRANGEMENTS]
    if unknown or not arrangements:
        raise ValueError(f"arrangements must be a non-empty selection of {list(ARRANGEMENTS)}, got {list(arrangements)}")
    depth_slider = widgets.SelectionSlider(options=DEPTH_CHOICES, value=n_layers, description="n_layers")
    init_toggle = widgets.ToggleButtons(options=[(label, name) for name, label in _INIT_LABELS.items()], value=init,
                                        description="init")

    def view(n_layers_: int, init_: str) -> widgets.Widget:
        profiles = depth_profiles(arrangements, n_layers=n_layers_, init=init_, seed=seed)
        return png_view(plot_norms_at_init(profiles, title=f"{n_layers_} blocks at initialisation ({_INIT_LABELS[init_]})"))

    return live_states([depth_slider, init_toggle], view)
