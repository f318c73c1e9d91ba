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

    def _repr_png_(self) -> tuple[bytes, dict[str, str]]:
        # With its text alternative as the output's metadata: the book's <img alt> (tools/book_extension.py).
        return figure_png(self), {"alt": figure_alt(self)}


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


def figure_alt(fig: Figure) -> str:
    """A text alternative for a figure, from what it says about itself: its title, each panel's title and axes.

    Screen readers and the book's accessibility check read it; a file name or "figure" says nothing of what is shown.
    """
    parts = []
    title = fig._suptitle.get_text() if fig._suptitle is not None else ""
    if title:
        parts.append(title)
    panels = []
    for ax in fig.axes:
        if not ax.get_visible() or ax.get_label() == "<colorbar>":
            continue
        words = [ax.get_title() or ax.get_title("left")]
        axes_words = [f"{name} axis: {label}" for name, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())) if label]
        if axes_words:
            words.append(", ".join(axes_words))
        panels.append(" (".join(w for w in words if w) + (")" if len([w for w in words if w]) == 2 else ""))
    panels = [p for p in panels if p]
    if panels:
        shown = "; ".join(panels[:6]) + (f"; and {len(panels) - 6} more panels" if len(panels) > 6 else "")
        parts.append(f"{'Plot' if len(panels) == 1 else f'{len(panels)} panels'}: {shown}")
    text = ". ".join(parts) or "A figure without a title or axis labels"
    return _plain_math(text)


_MATHTEXT = {r"\cdot": "·", r"\sqrt": "√", r"\times": "×", r"\ell": "ℓ", r"\alpha": "α", r"\theta": "θ",
             r"\Delta": "Δ", r"\sigma": "σ", r"\mu": "μ", r"\leq": "≤", r"\geq": "≥", r"\approx": "≈",
             r"\mathrm": "", r"\mathbf": "", r"\text": "", r"\,": " ", r"\;": " ", r"\!": ""}


def _plain_math(text: str) -> str:
    """Matplotlib's mathtext (``$q \\cdot k / \\sqrt{d_k}$``) as plain text a screen reader can say."""
    for command, plain in _MATHTEXT.items():
        text = text.replace(command, plain)
    return " ".join(text.replace("$", "").replace("{", "").replace("}", "").replace("\\", "").split())
