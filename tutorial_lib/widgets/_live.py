"""Widgets that stay live in the rendered book: every state drawn at execution time, switched in the browser.

The book has no kernel, so a Python callback cannot redraw anything there. Instead each widget renders one view per
control value with its pure function when the notebook runs, puts the views in an ipywidgets ``Stack``, and ties the
control's ``index`` to the stack's ``selected_index`` with ``jslink``: a link that the browser's widget manager runs on
its own, in Jupyter with a kernel and in the book's offline html-manager alike. The controls are selection widgets
(``SelectionSlider``, ``ToggleButtons``) because their ``index`` is what can be linked (a ``Dropdown``'s or a float
slider's value cannot be mapped to a view without Python).

Two controls make a stack of stacks: the outer stack follows the first control, and each inner stack follows the
second (one ``jslink`` per inner stack). Every view carries a label naming its state (``d_k = 64 · scaled``), which is
what the browser suite reads to check that the view shown is the one the controls select.

The DOM hooks the browser suite relies on: the outer box has the class ``tfs-live``, each view's label the class
``tfs-state-label``.
"""

from __future__ import annotations

import base64
import html
import itertools
import math
from collections.abc import Callable, Sequence

import ipywidgets as widgets
from ipywidgets.widgets.widget import _instances  # every live widget (Widget.widgets is deprecated)
from ipywidgets.widgets.widget_link import Link
from matplotlib.figure import Figure

from tutorial_lib.widgets._plotting import figure_alt, figure_png

LIVE_CLASS = "tfs-live"
LABEL_CLASS = "tfs-state-label"
MAX_STATES = 48  # each state is a PNG inside the page's HTML: keep a page well under 2 MB


def _options(control: widgets.Widget) -> tuple:
    """The (label, value) pairs of a selection widget, as ipywidgets normalises its ``options``."""
    options = getattr(control, "_options_labels", None)
    if options is None or not hasattr(control, "index"):
        raise ValueError(f"controls must be selection widgets with an index (SelectionSlider, ToggleButtons), "
                         f"got {type(control).__name__}")
    return tuple(zip(control._options_labels, control._options_values))


def state_label(controls: Sequence[widgets.Widget], indices: Sequence[int]) -> str:
    """``description = option`` for each control, joined by " · " (the text each view shows above its picture)."""
    parts = []
    for control, index in zip(controls, indices):
        label = _options(control)[index][0]
        parts.append(f"{control.description} = {label}" if control.description else label)
    return " · ".join(parts)


def state_view(label: str, content: widgets.Widget) -> widgets.VBox:
    """One state: its label (HTML, read by the browser suite) above what the widget draws for it."""
    caption = widgets.HTML(f"<span>{html.escape(label)}</span>")
    caption.add_class(LABEL_CLASS)
    return widgets.VBox([caption, content])


def png_view(fig: Figure, alt: str | None = None) -> widgets.HTML:
    """A figure as an ``<img>`` in an HTML widget: the PNG lives in the widget state (the book needs no kernel) and
    the image has a text alternative (``alt``, by default :func:`figure_alt`: its title and axes)."""
    text = figure_alt(fig) if alt is None else alt
    data = base64.b64encode(figure_png(fig)).decode("ascii")
    return widgets.HTML(f'<img src="data:image/png;base64,{data}" alt="{html.escape(text, quote=True)}" '
                        f'style="max-width: 100%; height: auto">')


def live_states(
    controls: Sequence[widgets.Widget],
    render: Callable[..., widgets.Widget],
    *,
    header: Sequence[widgets.Widget] = (),
    footer: Sequence[widgets.Widget] = (),
) -> widgets.VBox:
    """The controls above a stack of every state's view, linked in the browser.

    ``render(*values)`` is called once per combination of the controls' option values (the first control varies
    slowest) and returns that state's widget (usually :func:`png_view` of the pure function's figure). ``header`` and
    ``footer`` are extra widgets shown above the controls and below the views (a legend, a note).
    """
    if not 1 <= len(controls) <= 2:
        raise ValueError(f"controls must hold one or two selection widgets, got {len(controls)}")
    options = [_options(control) for control in controls]
    count = math.prod(len(o) for o in options)
    if count > MAX_STATES:
        raise ValueError(f"the controls select {count} states; at most {MAX_STATES} fit in a page (fewer options)")

    views = {
        indices: state_view(state_label(controls, indices), render(*(options[i][j][1] for i, j in enumerate(indices))))
        for indices in itertools.product(*(range(len(o)) for o in options))
    }

    def stack(prefix: tuple[int, ...]) -> widgets.Stack:
        level = len(prefix)
        children = [views[prefix + (i,)] if level == len(controls) - 1 else stack(prefix + (i,))
                    for i in range(len(options[level]))]
        box = widgets.Stack(children, selected_index=controls[level].index)
        widgets.jslink((controls[level], "index"), (box, "selected_index"))
        return box

    live = widgets.VBox([*header, *controls, stack(()), *footer])
    live.add_class(LIVE_CLASS)
    return live


def live_views(live: widgets.VBox) -> tuple[list[widgets.Widget], dict[tuple[int, ...], widgets.VBox]]:
    """The controls of a :func:`live_states` widget and its views by index tuple, following its jslinks.

    What the browser would show for given control indices, found from the widget's own links, so that a test checks
    the wiring (each control linked to the stacks of its level) and not only the pictures.
    """
    if LIVE_CLASS not in live._dom_classes:
        raise ValueError(f"live must be a widget made by live_states (class {LIVE_CLASS!r}), got {type(live).__name__}")
    links = [w for w in _instances.values() if isinstance(w, Link)]
    source_of = {id(link.target[0]): link.source[0] for link in links
                 if link.source[1] == "index" and link.target[1] == "selected_index"}
    root = next(child for child in live.children if isinstance(child, widgets.Stack))
    controls: list[widgets.Widget] = []
    views: dict[tuple[int, ...], widgets.VBox] = {}

    def walk(node: widgets.Widget, prefix: tuple[int, ...]) -> None:
        if not isinstance(node, widgets.Stack):
            views[prefix] = node
            return
        control = source_of.get(id(node))
        if control is None:
            raise AssertionError(f"the stack at {prefix} follows no control (no jslink to its selected_index)")
        if len(prefix) == len(controls):
            controls.append(control)
        elif controls[len(prefix)] is not control:
            raise AssertionError(f"the stack at {prefix} follows another control than its level's")
        if len(node.children) != len(_options(control)):
            raise AssertionError(f"the stack at {prefix} has {len(node.children)} views for "
                                 f"{len(_options(control))} options")
        for index, child in enumerate(node.children):
            walk(child, prefix + (index,))

    walk(root, ())
    return controls, views


def view_label(view: widgets.VBox) -> str:
    """The text of a view's label (its first child, made by :func:`state_view`)."""
    caption = view.children[0]
    return html.unescape(caption.value.removeprefix("<span>").removesuffix("</span>"))
