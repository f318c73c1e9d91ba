"""Chapter 01's figures: one word merged step by step, and how the length of a text shrinks as merges grow.

:func:`merge_trace` is the pure function (the segmentation of a word after each merge that applies to it, in the order
:meth:`~tutorial_lib.tokenizers.BPETokenizer.encode` applies them); :func:`plot_merge_trace` draws every step as a row
of boxes, the static rendering the book shows; :func:`bpe_step_widget` lets a reader move through the steps, in the
rendered book too (every step is drawn when the notebook runs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import ipywidgets as widgets
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from tutorial_lib.tokenizers import merge_pair
from tutorial_lib.widgets._live import MAX_STATES, live_states, png_view
from tutorial_lib.widgets._plotting import new_figure


@dataclass(frozen=True)
class TraceStep:
    """The word's tokens after one merge: ``rank`` is the merge's position in the list (None for the start)."""

    rank: int | None
    pair: tuple[bytes, bytes] | None
    tokens: tuple[bytes, ...]


def merge_trace(merges: Sequence[tuple[bytes, bytes]], word: str) -> list[TraceStep]:
    """Every step of encoding ``word`` (one pre-tokenized word) by merge rank: its bytes, then one row per merge."""
    if not isinstance(word, str) or not word:
        raise ValueError(f"word must be a non-empty string, got {word!r}")
    ranks: dict[tuple[bytes, bytes], int] = {}
    for rank, pair in enumerate(merges):
        ranks.setdefault(tuple(pair), rank)
    tokens = [bytes([b]) for b in word.encode("utf-8")]
    steps = [TraceStep(None, None, tuple(tokens))]
    while len(tokens) > 1:
        pair = min(zip(tokens, tokens[1:]), key=lambda p: ranks.get(p, math.inf))
        if pair not in ranks:
            break
        tokens = merge_pair(tokens, pair, pair[0] + pair[1])
        steps.append(TraceStep(ranks[pair], pair, tuple(tokens)))
    return steps


def show_token(token: bytes) -> str:
    """A token as a reader can see it: spaces as ␣, newlines as ↵, bytes that are not a whole character as <xx>."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        return "".join(f"<{b:02x}>" for b in token)
    return text.replace(" ", "␣").replace("\n", "↵")


def plot_merge_trace(trace: Sequence[TraceStep], *, current: int | None = None, width: float = 6.4) -> Figure:
    """One row per step, each token a box; the token a merge just made is highlighted (and the ``current`` row)."""
    if not trace:
        raise ValueError("trace must hold at least the starting step")
    fig, ax = new_figure(1, 1, figsize=(width, 0.5 + 0.42 * len(trace)))
    longest = max(sum(len(show_token(t)) + 1.2 for t in step.tokens) for step in trace)
    for row, step in enumerate(trace):
        y = len(trace) - 1 - row
        x = 0.0
        made = step.pair[0] + step.pair[1] if step.pair else None
        for token in step.tokens:
            label = show_token(token)
            box_width = len(label) + 0.8
            colour = "#f6c85f" if token == made else "#d9e6f2"
            edge = "black" if current is not None and row == current else "#6b7b8c"
            ax.add_patch(FancyBboxPatch((x, y + 0.12), box_width, 0.76, boxstyle="round,pad=0.02",
                                        facecolor=colour, edgecolor=edge, linewidth=1.4 if edge == "black" else 0.8))
            ax.text(x + box_width / 2, y + 0.5, label, ha="center", va="center", family="monospace", fontsize=11)
            x += box_width + 0.4
        caption = "bytes" if step.rank is None else f"merge #{step.rank}"
        ax.text(-0.6, y + 0.5, caption, ha="right", va="center", fontsize=10, color="#333333")
    ax.set_xlim(-0.5, longest + 0.5)
    ax.set_ylim(-0.1, len(trace))
    ax.axis("off")
    # The title is also the figure's text alternative (figure_alt): what the rows do, in words.
    word = "".join(show_token(t) for t in trace[0].tokens)
    ax.set_title(f"{word}: {len(trace) - 1} merge(s) turn {len(trace[0].tokens)} bytes into "
                 f"{len(trace[-1].tokens)} token(s), " + " ".join(show_token(t) for t in trace[-1].tokens),
                 fontsize="medium", loc="left")
    return fig


def merge_step_view(trace: Sequence[TraceStep], step: int) -> Figure:
    """The widget's picture for one step: the word's rows up to ``step``, that row framed."""
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < len(trace):
        raise ValueError(f"step must be an int in [0, {len(trace) - 1}], got {step!r}")
    return plot_merge_trace(trace[: step + 1], current=step)


def _step_label(step: TraceStep, index: int) -> str:
    return f"{index} (bytes)" if step.rank is None else f"{index} (merge #{step.rank})"


def bpe_step_widget(merges: Sequence[tuple[bytes, bytes]], word: str = " thousand") -> widgets.VBox:
    """A step slider over the merges that encode ``word`` (one pre-tokenized word); every merge up to it drawn.

    Every step is drawn now and switched in the browser (:func:`~tutorial_lib.widgets._live.live_states`), so the
    slider also works in the rendered book; it starts at the last step. Another word: call the function again.
    """
    trace = merge_trace(merges, word)
    if len(trace) > MAX_STATES:
        raise ValueError(f"word must take at most {MAX_STATES - 1} merges to draw every step, "
                         f"{word!r} takes {len(trace) - 1}")
    step = widgets.SelectionSlider(
        options=[(_step_label(s, i), i) for i, s in enumerate(trace)], value=len(trace) - 1, description="step"
    )
    return live_states([step], lambda index: png_view(merge_step_view(trace, index)))


def plot_tokens_per_character(vocab_sizes: Sequence[int], tokens_per_character: Sequence[float], *,
                              pretokens_per_character: float | None = None) -> Figure:
    """Tokens per character of a held-out text against the vocabulary size (bytes at 256, each merge adds one);
    ``pretokens_per_character`` draws BPE's floor: merges never cross a pre-token, so no vocabulary goes below one
    token per pre-token."""
    if len(vocab_sizes) != len(tokens_per_character) or not vocab_sizes:
        raise ValueError("vocab_sizes and tokens_per_character must be non-empty and of equal length")
    fig, ax = new_figure(1, 1, figsize=(5.6, 3.6))
    ax.plot(vocab_sizes, tokens_per_character, marker="o", label="byte-level BPE")
    ax.axhline(1.0, color="grey", linestyle=":", label="characters (65 symbols)")
    if pretokens_per_character is not None:
        ax.axhline(pretokens_per_character, color="tab:red", linestyle="--", label="one token per pre-token (BPE's floor)")
    ax.set_xscale("log")
    ticks = [t for t in (256, 512, 1024, 2048, 4096, 8192) if min(vocab_sizes) <= t <= max(vocab_sizes) * 1.05]
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("vocabulary size (log scale)")
    ax.set_ylabel("tokens per character")
    ax.set_ylim(0, 1.1)
    ax.set_title("Tokens per character of held-out text, by vocabulary size", fontsize="medium")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return fig
