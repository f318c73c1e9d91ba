"""The feed-forward network's nonlinearities and their slopes (chapter 05): ReLU, GELU (exact and tanh), SiLU and the
SwiGLU gate.

:func:`activation_curves` evaluates each function and its derivative (by autograd, so the slope is the one training
sees) on a grid; :func:`plot_activations` draws them, values above and slopes below; :func:`activation_widget` is a
thin ipywidgets wrapper over the two (every state drawn when the notebook runs, so it works in the rendered book too).

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

from tutorial_lib.widgets._live import live_states, png_view
from tutorial_lib.widgets._plotting import new_figure

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


X_MAX_CHOICES = (2.0, 4.0, 8.0)  # the x range's stops, a control only when the gate is not drawn
GATE_CHOICES = (-1.0, 0.0, 0.5, 1.0, 2.0)  # the gate's stops: 5 states drawn for the book


def activation_widget(
    names: Sequence[str] = ACTIVATION_NAMES, *, x_max: float = 4.0, gate_value: float = 1.0
) -> widgets.VBox:
    """The functions ``names``, with the SwiGLU gate's other branch ``b`` as a control (the x range when the gate is
    not drawn, since ``b`` then changes nothing).

    Every state is drawn now and switched in the browser (:func:`~tutorial_lib.widgets._live.live_states`), so the
    control also works in the rendered book, with no kernel. Other functions or another range: call it again.
    """
    activation_curves(names, n_points=2)  # validate the names before building any control
    if "SwiGLU gate" not in names:
        if x_max not in X_MAX_CHOICES:
            raise ValueError(f"x_max must be one of {X_MAX_CHOICES}, got {x_max!r}")
        range_slider = widgets.SelectionSlider(options=[(f"{x:g}", x) for x in X_MAX_CHOICES], value=x_max,
                                               description="x range ±")
        return live_states([range_slider], lambda x_max_: png_view(plot_activations(names, x_max=x_max_)))
    if not x_max > 0:
        raise ValueError(f"x_max must be > 0, got {x_max!r}")
    if gate_value not in GATE_CHOICES:
        raise ValueError(f"gate_value must be one of {GATE_CHOICES}, got {gate_value!r}")
    gate_slider = widgets.SelectionSlider(options=[(f"{b:g}", b) for b in GATE_CHOICES], value=gate_value,
                                          description="gate: b")
    return live_states(
        [gate_slider], lambda gate_: png_view(plot_activations(names, x_max=x_max, gate_value=gate_)),
    )
