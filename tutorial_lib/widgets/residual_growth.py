"""Why GPT-2 scales its residual projections by 1/√(2·n_layers) (chapter 08): the residual stream's size with depth.

Each of a pre-norm GPT's ``2·n_layers`` residual branches (attention, feed-forward) reads a normalised input and adds
its output to the stream, so at initialisation the stream's variance grows by about the same amount per branch:
linearly with depth, unless each branch's last matrix is scaled down by ``1/√(2·n_layers)``.

Pure functions measure the stream's standard deviation after every block of a freshly initialised GPT and plot it;
:func:`residual_growth_widget` draws :func:`residual_growth_view` for a few depths and widths, switched in the browser.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ipywidgets as widgets
import torch
from jaxtyping import Float, Int
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter
from torch import Tensor

from tutorial_lib.models.gpt import GPT, GPTConfig, gpt2_init_
from tutorial_lib.widgets._live import live_states, png_view
from tutorial_lib.widgets._plotting import new_figure

LABELS = {True: "scaled: 0.02/√(2·n_layers)", False: "unscaled: 0.02"}
COLORS = {True: "tab:blue", False: "tab:red"}
# The controls' stops: 12 states drawn for the book, each from two fresh GPTs (a 48-layer one the slowest): few stops.
WIDGET_DEPTHS = (1, 3, 6, 12, 24, 48)
WIDGET_WIDTHS = (64, 128)


@torch.no_grad()
def residual_stream_stds(model: GPT, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, " n_points"]:
    """The standard deviation of the residual stream entering the first block and leaving each block.

    ``n_layers + 1`` values, read by forward hooks on ``model.blocks`` while the model runs on ``tokens`` (its
    output, the logits, is not needed).
    """
    stds: list[Tensor] = []
    handles = [model.blocks[0].register_forward_pre_hook(lambda module, args: stds.append(args[0].std()))]
    for block in model.blocks:
        handles.append(block.register_forward_hook(lambda module, args, output: stds.append(output.std())))
    try:
        model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack(stds)


def residual_growth(
    n_layers: int,
    *,
    scale_residual: bool,
    d_model: int = 128,
    n_heads: int = 4,
    d_vocab: int = 256,
    seq_len: int = 64,
    batch: int = 4,
    seed: int = 0,
) -> Float[Tensor, " n_points"]:
    """:func:`residual_stream_stds` of a GPT initialised by ``gpt2_init_(scale_residual=...)``, on random tokens.

    The same ``seed`` draws the same tokens and the same weights (before the residual projections are rescaled), so
    the two initialisations are compared on equal terms. The caller's random state is left as it was.
    """
    for name, value in (("n_layers", n_layers), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    cfg = GPTConfig(d_vocab=d_vocab, n_ctx=seq_len, d_model=d_model, n_heads=n_heads, n_layers=n_layers)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT(cfg).eval()
        torch.manual_seed(seed)
        gpt2_init_(model, scale_residual=scale_residual)
    tokens = torch.randint(0, d_vocab, (batch, seq_len), generator=torch.Generator().manual_seed(seed))
    return residual_stream_stds(model, tokens)


def final_stds(growth: Mapping[tuple[int, bool], Tensor], scale_residual: bool) -> dict[int, float]:
    """``{n_layers: std after the last block}`` for one initialisation, from :func:`residual_growth`'s curves."""
    return {n_layers: stds[-1].item() for (n_layers, scaled), stds in sorted(growth.items())
            if scaled == scale_residual}


def depth_sweep(depths: Sequence[int], **kwargs: object) -> dict[tuple[int, bool], Tensor]:
    """:func:`residual_growth` for every depth, with and without the scaling: ``{(n_layers, scaled): stds}``."""
    return {
        (n_layers, scaled): residual_growth(n_layers, scale_residual=scaled, **kwargs)
        for n_layers in depths
        for scaled in (True, False)
    }


def _draw_curves(ax: Axes, curves: Mapping[bool, Tensor]) -> None:
    for scaled, stds in curves.items():
        ax.plot(range(len(stds)), stds.tolist(), color=COLORS[scaled], label=LABELS[scaled])
    ax.set_xlabel("after block (0: the embeddings)")
    ax.set_ylabel("std of the residual stream")
    ax.set_ylim(bottom=0)
    ax.legend(title="W^O and W_2 drawn with std", fontsize=8, title_fontsize=8)


def plot_residual_growth(growth: Mapping[tuple[int, bool], Tensor]) -> Figure:
    """Two panels from ``{(n_layers, scale_residual): stds}`` as :func:`residual_growth` returns them.

    Top: the stream's std after every block of the deepest model, with and without the scaling. Bottom: the std
    after the last block against the depth, on log-log axes, with the √depth slope of a variance that grows linearly.
    Stacked, so that the figure stays readable on a phone.
    """
    depths = sorted({n_layers for n_layers, _ in growth})
    if not depths or any((n_layers, scaled) not in growth for n_layers in depths for scaled in (True, False)):
        raise ValueError("growth must hold a curve with and without scaling for every depth")
    fig, (left, right) = new_figure(2, 1, figsize=(6.2, 7.0))
    deepest = depths[-1]
    _draw_curves(left, {scaled: growth[deepest, scaled] for scaled in (True, False)})
    left.set_title(f"{deepest} layers at initialisation")
    for scaled in (True, False):
        last = [growth[n_layers, scaled][-1].item() for n_layers in depths]
        right.plot(depths, last, "o-", color=COLORS[scaled], label=LABELS[scaled])
    unscaled_first = growth[depths[0], False][-1].item()
    guide = [unscaled_first * (n_layers / depths[0]) ** 0.5 for n_layers in depths]
    right.plot(depths, guide, ":", color="grey", label="∝ √n_layers")
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))  # 0.05, 0.1, 0.2, 0.5 rather than 5×10⁻², 10⁻¹
    right.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    right.yaxis.set_minor_formatter(NullFormatter())
    right.set_xticks(depths, [str(n_layers) for n_layers in depths])
    right.set_xlabel("n_layers")
    right.set_ylabel("std after the last block")
    right.set_title("the last block's output against depth")
    right.legend(fontsize=8)
    return fig


def residual_growth_view(n_layers: int, d_model: int, *, seed: int = 0) -> Figure:
    """The widget's picture for one state: the stream's std after every block, with and without the scaling."""
    curves = {scaled: residual_growth(n_layers, scale_residual=scaled, d_model=d_model, seed=seed)
              for scaled in (True, False)}
    fig, ax = new_figure(1, 1, figsize=(5.5, 3.6))
    _draw_curves(ax, curves)
    ax.set_title(f"n_layers = {n_layers}, d_model = {d_model}")
    return fig


def residual_growth_widget(n_layers: int = 48, *, d_model: int = 128, seed: int = 0) -> widgets.VBox:
    """Depth and width as controls over :func:`residual_growth_view`.

    Every state is drawn now and switched in the browser (:func:`~tutorial_lib.widgets._live.live_states`), so the
    controls also work in the rendered book, with no kernel.
    """
    if n_layers not in WIDGET_DEPTHS or isinstance(n_layers, bool):
        raise ValueError(f"n_layers must be one of {WIDGET_DEPTHS}, got {n_layers!r}")
    if d_model not in WIDGET_WIDTHS or isinstance(d_model, bool):
        raise ValueError(f"d_model must be one of {WIDGET_WIDTHS}, got {d_model!r}")
    width_buttons = widgets.ToggleButtons(options=WIDGET_WIDTHS, value=d_model, description="d_model")
    depth_slider = widgets.SelectionSlider(options=WIDGET_DEPTHS, value=n_layers, description="n_layers")
    return live_states(
        [width_buttons, depth_slider],
        lambda width, depth: png_view(residual_growth_view(depth, width, seed=seed)),
    )
