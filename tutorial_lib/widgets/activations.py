"""The feed-forward network's nonlinearities and their slopes (chapter 05): ReLU, GELU (exact and tanh), SiLU and the
SwiGLU gate.

:func:`activation_curves` evaluates each function and its derivative (by autograd, so the slope is the one training
sees) on a grid; :func:`plot_activations` draws them, values above and slopes below; :func:`activation_widget` is a
thin ipywidgets wrapper over the two.

The SwiGLU "gate" is the map ``(a, b) ↦ SiLU(a)·b`` of two projections of the same input: drawn as a function of the
gate's input ``a`` for a fixed value ``b`` of the other branch, it is SiLU scaled by ``b``, and its slope in ``a`` is
SiLU's slope scaled by ``b``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import ipywidgets as widgets
import torch
import torch.nn.functional as F
from jaxtyping import Float
from matplotlib.figure import Figure
from torch import Tensor

from tutorial_lib.widgets._plotting import figure_png, new_figure

ACTIVATION_NAMES = ("ReLU", "GELU (exact)", "GELU (tanh)", "SiLU", "SwiGLU gate")
_COLORS = dict(zip(ACTIVATION_NAMES, ("black", "tab:blue", "tab:orange", "tab:green", "tab:red")))
_STYLES = dict(zip(ACTIVATION_NAMES, ("-", "-", "--", "-", "-.")))


def _functions(gate_value: float) -> dict[str, Callable[[Tensor], Tensor]]:
    return {
        "ReLU": F.relu,
        "GELU (exact)": F.gelu,
        "GELU (tanh)": lambda x: F.gelu(x, approximate="tanh"),
        "SiLU": F.silu,
        "SwiGLU gate": lambda a: F.silu(a) * gate_value,
    }


@dataclass(frozen=True)
class ActivationCurve:
    """One function on a grid: its values and its derivative at every point."""

    x: Float[Tensor, " n_points"]
    value: Float[Tensor, " n_points"]
    slope: Float[Tensor, " n_points"]


def activation_curves(
    names: Sequence[str] = ACTIVATION_NAMES, *, x_max: float = 4.0, n_points: int = 801, gate_value: float = 1.0
) -> dict[str, ActivationCurve]:
    """``{name: ActivationCurve}`` on ``n_points`` evenly spaced points of ``[-x_max, x_max]`` (float64).

    ``gate_value`` is the other branch's value ``b`` in the SwiGLU gate ``SiLU(a)·b``. The slopes come from autograd:
    ReLU's at 0 is PyTorch's choice, 0.
    """
    unknown = [name for name in names if name not in ACTIVATION_NAMES]
    if unknown or not names:
        raise ValueError(f"names must be a non-empty selection of {list(ACTIVATION_NAMES)}, got {list(names)}")
    if not x_max > 0:
        raise ValueError(f"x_max must be > 0, got {x_max!r}")
    if isinstance(n_points, bool) or not isinstance(n_points, int) or n_points < 2:
        raise ValueError(f"n_points must be an int >= 2, got {n_points!r}")
    functions = _functions(gate_value)
    curves = {}
    for name in names:
        x = torch.linspace(-x_max, x_max, n_points, dtype=torch.float64, requires_grad=True)
        y = functions[name](x)
        (slope,) = torch.autograd.grad(y.sum(), x)  # each y_i depends on x_i alone: the sum's gradient is the slope
        curves[name] = ActivationCurve(x.detach(), y.detach(), slope)
    return curves


def plot_activations(
    names: Sequence[str] = ACTIVATION_NAMES, *, x_max: float = 4.0, gate_value: float = 1.0
) -> Figure:
    """Values (top) and slopes (bottom) of the chosen functions, stacked so that the figure reads at phone width."""
    curves = activation_curves(names, x_max=x_max, gate_value=gate_value)
    fig, (top, bottom) = new_figure(2, 1, figsize=(5.5, 6.4), sharex=True)
    for name, curve in curves.items():
        label = f"SiLU(a)·{gate_value:g}" if name == "SwiGLU gate" else name
        style = {"color": _COLORS[name], "linestyle": _STYLES[name], "linewidth": 2}
        top.plot(curve.x, curve.value, label=label, **style)
        bottom.plot(curve.x, curve.slope, **style)
    for ax in (top, bottom):
        ax.axhline(0, color="grey", linewidth=0.6)
        ax.axvline(0, color="grey", linewidth=0.6)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=11)
    top.set_ylabel("f(x)", fontsize=12)
    top.set_title("the activation", fontsize=12)
    bottom.set_ylabel("f ′(x)", fontsize=12)
    bottom.set_title("its slope (what the gradient is multiplied by)", fontsize=12)
    bottom.set_xlabel("x (for the gate: a)", fontsize=12)
    top.legend(fontsize=10, loc="upper left")
    return fig


def activation_widget(
    names: Sequence[str] = ACTIVATION_NAMES, *, x_max: float = 4.0, gate_value: float = 1.0
) -> widgets.VBox:
    """Which functions to draw, the x range and the SwiGLU gate's other branch ``b`` as controls."""
    selector = widgets.SelectMultiple(options=ACTIVATION_NAMES, value=tuple(names), description="functions", rows=5)
    range_slider = widgets.FloatSlider(value=x_max, min=0.5, max=10.0, step=0.5, description="x range ±")
    gate_slider = widgets.FloatSlider(value=gate_value, min=-2.0, max=2.0, step=0.25, description="gate: b")
    # An image, not an Output widget: its PNG lives in the widget state, so the book and nbval see no side output.
    image = widgets.Image(format="png")

    def redraw(_change: object = None) -> None:
        chosen = selector.value or ("ReLU",)
        image.value = figure_png(plot_activations(chosen, x_max=range_slider.value, gate_value=gate_slider.value))

    for control in (selector, range_slider, gate_slider):
        control.observe(redraw, names="value")
    redraw()
    return widgets.VBox([selector, range_slider, gate_slider, image])
