"""The figure factory shared by the widgets: pyplot-free figures with one consistent look."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure


def new_figure(nrows: int, ncols: int, *, figsize: tuple[float, float], **subplot_kw: Any) -> tuple[Figure, Any]:
    """A constrained-layout :class:`Figure` (not registered with pyplot) and its axes, as ``Figure.subplots`` returns."""
    fig = Figure(figsize=figsize, dpi=90, layout="constrained")
    return fig, fig.subplots(nrows, ncols, **subplot_kw)
