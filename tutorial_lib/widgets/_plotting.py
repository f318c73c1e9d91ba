"""The figure factory shared by the widgets: pyplot-free figures with one consistent look."""

from __future__ import annotations

import io
import re
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
    """A text alternative for a figure, from what it says about itself: its title, each panel's title, axes and
    legend, and its colour scale.

    Screen readers and the book's accessibility check read it; a file name or "figure" says nothing of what is shown.
    """
    parts = []
    title = fig._suptitle.get_text() if fig._suptitle is not None else ""
    if title:
        parts.append(title)
    panels, scales = [], []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        if ax.get_label() == "<colorbar>":  # a colour bar: its label says what the colours mean
            scales += [label for label in (ax.get_ylabel(), ax.get_xlabel()) if label]
            continue
        details = [f"{name} axis: {label}" for name, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())) if label]
        legend = ax.get_legend()
        entries = [text.get_text() for text in legend.get_texts() if text.get_text()] if legend is not None else []
        if entries:
            details.append("legend: " + ", ".join(entries[:6]) + (", …" if len(entries) > 6 else ""))
        panel_title = ax.get_title() or ax.get_title("left")
        panel = f"{panel_title} ({', '.join(details)})" if panel_title and details else panel_title or ", ".join(details)
        if panel:
            panels.append(panel)
    if panels:
        shown = "; ".join(panels[:6]) + (f"; and {len(panels) - 6} more panels" if len(panels) > 6 else "")
        parts.append(f"{'Plot' if len(panels) == 1 else f'{len(panels)} panels'}: {shown}")
    if scales:
        parts.append("Colour scale: " + ", ".join(dict.fromkeys(scales)))
    text = ". ".join(parts) or "A figure without a title or axis labels"
    return _plain_math(text)


# Matplotlib's mathtext commands, as a screen reader should say them; a command not listed is read as its name
# (\log -> log), and formatting commands vanish.
_MATHTEXT = {"cdot": "·", "sqrt": "√", "times": "×", "ell": "ℓ", "alpha": "α", "beta": "β", "gamma": "γ",
             "epsilon": "ε", "varepsilon": "ε", "eta": "η", "theta": "θ", "lambda": "λ", "mu": "μ", "pi": "π",
             "sigma": "σ", "tau": "τ", "phi": "φ", "Delta": "Δ", "Sigma": "Σ", "leq": "≤", "le": "≤", "geq": "≥",
             "ge": "≥", "neq": "≠", "approx": "≈", "infty": "∞", "to": "→", "rightarrow": "→", "in": "∈",
             "pm": "±", "ldots": "…", "dots": "…", "cdots": "⋯", "sum": "Σ", "prod": "∏", "|": "‖",
             "mathrm": "", "mathbf": "", "mathit": "", "mathcal": "", "text": "", "operatorname": "", "left": "",
             "right": "", "displaystyle": "", ",": " ", ";": " ", ":": " ", "!": "", " ": " ", "%": "%", "$": "$",
             "{": "(", "}": ")", "_": "_"}
_COMMAND = re.compile(r"\\([A-Za-z]+|.)")


def _group(text: str, start: int) -> tuple[str, int]:
    """The brace group (or single character) of a TeX argument at ``start``, and the index after it."""
    while start < len(text) and text[start] == " ":
        start += 1
    if start >= len(text) or text[start] != "{":
        return text[start:start + 1], start + 1
    depth = 0
    for end in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0:
            return text[start + 1:end], end + 1
    return text[start + 1:], len(text)


def _fractions(math: str) -> str:
    """``\\frac{a}{b}`` as ``a/b`` (``(a + 1)/b`` where a part is more than one term), nested ones too."""
    while (at := math.find("\\frac")) >= 0:
        numerator, after = _group(math, at + len("\\frac"))
        denominator, after = _group(math, after)
        numerator, denominator = (f"({part})" if re.search(r"[\s+\-]", part.strip()) else part
                                  for part in (_fractions(numerator), _fractions(denominator)))
        math = f"{math[:at]}{numerator}/{denominator}{math[after:]}"
    return math


def _plain_math(text: str) -> str:
    """Matplotlib's mathtext (``$q \\cdot k / \\sqrt{d_k}$``) as plain text a screen reader can say: only what lies
    between unescaped ``$`` is math (matplotlib shows the rest as written); ``\\$`` is a dollar sign."""
    pieces = re.split(r"(?<!\\)\$", text)
    if len(pieces) % 2 == 0:  # an odd number of $: matplotlib draws the text as it is
        pieces = [text]
    plain = []
    for index, piece in enumerate(pieces):
        if index % 2 == 0:
            plain.append(piece.replace("\\$", "$"))
            continue
        piece = _fractions(piece)
        piece = _COMMAND.sub(lambda match: _MATHTEXT.get(match[1], match[1]), piece)
        plain.append(piece.replace("{", "").replace("}", ""))
    return " ".join("".join(plain).split())
