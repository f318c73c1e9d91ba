"""A figure's text alternative (tutorial_lib.widgets._plotting.figure_alt) says what the figure shows, from its own
title, axes, legend and colour scale, in words a screen reader can say; the book carries it into ``<img alt>``."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tutorial_lib.widgets._plotting import InlineFigure, _plain_math, figure_alt, figure_png, new_figure

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # tools/ holds scripts, not a package


def test_one_panel_says_its_title_and_axes():
    fig, ax = new_figure(1, 1, figsize=(3, 2))
    ax.plot([0, 1], [1, 0])
    ax.set(title="training loss", xlabel="step", ylabel="cross-entropy")
    assert figure_alt(fig) == "Plot: training loss (x axis: step, y axis: cross-entropy)"


def test_figure_title_panels_legend_and_colour_scale():
    fig, (left, right) = new_figure(1, 2, figsize=(6, 2))
    fig.suptitle("Attention with and without scaling")
    left.plot([0, 1], label="unscaled")
    left.plot([1, 0], label="scaled")
    left.legend()
    left.set(title="weights", xlabel="key position")
    image = right.imshow(np.eye(3))
    right.set_title("pattern")
    fig.colorbar(image, ax=right, label="attention weight")
    assert figure_alt(fig) == (
        "Attention with and without scaling. 2 panels: weights (x axis: key position, legend: unscaled, scaled); "
        "pattern. Colour scale: attention weight"
    )


def test_many_panels_are_counted_and_hidden_ones_left_out():
    fig, axes = new_figure(2, 5, figsize=(8, 3))
    for index, ax in enumerate(axes.flat):
        ax.set_title(f"head {index}")
    axes.flat[-1].set_visible(False)
    text = figure_alt(fig)
    assert text.startswith("9 panels: head 0; head 1; head 2; head 3; head 4; head 5; and 3 more panels")
    assert "head 9" not in text


def test_panel_without_title_is_described_by_its_axes():
    fig, ax = new_figure(1, 1, figsize=(3, 2))
    ax.set_xlabel("$d_k$")
    assert figure_alt(fig) == "Plot: x axis: d_k"


def test_figure_that_says_nothing_gets_a_sentence_not_a_file_name():
    fig, _ = new_figure(1, 1, figsize=(3, 2))
    assert figure_alt(fig) == "A figure without a title or axis labels"


@pytest.mark.parametrize(
    ("mathtext", "plain"),
    [
        (r"$q \cdot k / \sqrt{d_k}$", "q · k / √d_k"),
        (r"softmax of $\frac{q \cdot k}{\sqrt{d_k}}$", "softmax of (q · k)/√d_k"),
        (r"$\frac{1}{\sqrt{d_k}}$ scaling", "1/√d_k scaling"),
        (r"$\mathrm{loss}\,(\alpha = 0.1)$", "loss (α = 0.1)"),
        (r"$\log_2 p$ over $\theta \in \Theta$", "log_2 p over θ ∈ Theta"),
        (r"costs \$5 and $\leq 3$", "costs $5 and ≤ 3"),
        ("one $ sign: drawn as written {x}", "one $ sign: drawn as written {x}"),
        ("set {a, b} outside math", "set {a, b} outside math"),
    ],
)
def test_mathtext_reads_as_plain_text(mathtext, plain):
    assert _plain_math(mathtext) == plain


def test_inline_figure_shows_its_png_with_its_alt():
    fig = InlineFigure(figsize=(2, 2), dpi=50)
    fig.add_subplot().set_title("a title")
    data, metadata = fig._repr_png_()
    assert data.startswith(b"\x89PNG") and data == figure_png(fig)
    assert metadata == {"alt": "Plot: a title"}


def test_the_book_carries_the_alt_into_its_image():
    """tools/book_extension.py wraps MyST-NB's image renderer: the output's ``alt`` metadata becomes the node's."""
    import book_extension

    image = {"uri": "figure.png"}
    render = book_extension._render_image_with_alt(lambda self, data: [dict(image)])
    with_alt = SimpleNamespace(mime_type="image/png", output_metadata={"image/png": {"alt": "Plot: loss"}})
    without = SimpleNamespace(mime_type="image/png", output_metadata={})
    assert render(None, with_alt) == [{"uri": "figure.png", "alt": "Plot: loss"}]
    assert render(None, without) == [{"uri": "figure.png"}]
