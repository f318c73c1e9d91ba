"""The figure factory shared by the widgets: pyplot-free figures with one consistent look."""

from __future__ import annotations

import io
from typing import Any

from matplotlib.figure import Figure


class InlineFigure(Figure):
    """A :class:`Figure` that shows itself as a PNG in Jupyter even when ``pyplot`` was never imported.

    Only importing ``pyplot`` loads matplotlib's inline backend, which teaches IPython to draw figures; these
    figures are built without pyplot (so nothing is shown twice or kept alive), so they carry their own ``_repr_png_``.
    """

    def _repr_png_(self) -> bytes:
        return figure_png(self)


def figure_png(fig: Figure) -> bytes:
    """The figure as PNG bytes, as Jupyter shows it, for ``_repr_png_`` and for the widgets' image."""
    buffer = io.BytesIO()
    # No "Software: matplotlib x.y" entry: re-executing a notebook leaves unchanged figures byte-identical.
    fig.savefig(buffer, format="png", bbox_inches="tight", metadata={"Software": None})
    return buffer.getvalue()


def new_figure(nrows: int, ncols: int, *, figsize: tuple[float, float], **subplot_kw: Any) -> tuple[Figure, Any]:
    """A constrained-layout :class:`InlineFigure` and its axes, as ``Figure.subplots`` returns them."""
    fig = InlineFigure(figsize=figsize, dpi=90, layout="constrained")
    return fig, fig.subplots(nrows, ncols, **subplot_kw)
