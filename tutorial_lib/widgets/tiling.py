"""How tiled attention walks the score matrix (chapter 13): which tiles it computes, and the online softmax's state.

:func:`tile_grid` classifies the tiles of a ``query_pos × key_pos`` score matrix cut into ``block_q × block_k`` tiles
(skipped above the causal diagonal, computed and cut by it, computed whole), exactly as
:func:`tutorial_lib.efficient_attention.tiled_attention` visits them; :func:`plot_tile_grid` draws it and
:func:`tile_grid_widget` draws it for a few block sizes, switched in the browser. :func:`online_softmax_trace` records the running maximum and
denominator of :func:`tutorial_lib.efficient_attention.online_softmax` after every block.
:func:`standard_attention_traffic` and :func:`tiled_attention_traffic` count the numbers moved between slow and fast
memory (FlashAttention's Theorem 2), the second by walking the same tiles, in either loop order.
"""

from __future__ import annotations

from dataclasses import dataclass

import ipywidgets as widgets
import numpy as np
import torch
from jaxtyping import Float, Int
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from torch import Tensor

from tutorial_lib.widgets._live import live_states, png_view
from tutorial_lib.widgets._plotting import new_figure

SKIPPED, PARTIAL, FULL = 0, 1, 2  # a tile never computed; computed, cut by the causal diagonal; computed whole


def tile_grid(n_query: int, n_key: int, block_q: int, block_k: int, *, causal: bool = True) -> Int[Tensor, "q_blocks k_blocks"]:
    """Per tile, :data:`SKIPPED`, :data:`PARTIAL` or :data:`FULL`. Causal queries are the last ``n_query`` positions
    of the keys, as in ``tiled_attention``; without ``causal`` every tile is :data:`FULL`."""
    for name, value in (("n_query", n_query), ("n_key", n_key), ("block_q", block_q), ("block_k", block_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if causal and n_query > n_key:
        raise ValueError(f"causal needs n_query <= n_key, got {n_query} and {n_key}")
    q_starts, k_starts = range(0, n_query, block_q), range(0, n_key, block_k)
    grid = torch.full((len(q_starts), len(k_starts)), FULL, dtype=torch.long)
    if not causal:
        return grid
    n_past = n_key - n_query
    for i, q_start in enumerate(q_starts):
        last_query = n_past + min(q_start + block_q, n_query) - 1  # the block's last query sees keys up to here
        first_query = n_past + q_start
        for j, k_start in enumerate(k_starts):
            last_key = min(k_start + block_k, n_key) - 1
            if k_start > last_query:
                grid[i, j] = SKIPPED
            elif last_key > first_query:
                grid[i, j] = PARTIAL
    return grid


@dataclass(frozen=True)
class TileCounts:
    """What a tile walk costs: tiles computed out of all, scores computed out of ``query_pos · key_pos``."""

    computed: int
    total: int
    scores_computed: int
    scores_total: int


def tile_counts(n_query: int, n_key: int, block_q: int, block_k: int, *, causal: bool = True) -> TileCounts:
    grid = tile_grid(n_query, n_key, block_q, block_k, causal=causal)
    rows = torch.tensor([min(block_q, n_query - s) for s in range(0, n_query, block_q)])
    cols = torch.tensor([min(block_k, n_key - s) for s in range(0, n_key, block_k)])
    sizes = rows[:, None] * cols[None, :]
    computed = grid != SKIPPED
    return TileCounts(int(computed.sum()), grid.numel(), int(sizes[computed].sum()), n_query * n_key)


_COLORS = ListedColormap(["#f2f2f2", "#f6b26b", "#6fa8dc"])


def plot_tile_grid(n_query: int = 64, n_key: int = 64, block_q: int = 16, block_k: int = 16, *, causal: bool = True) -> Figure:
    """The score matrix cut into tiles: grey never computed, orange computed and cut by the diagonal (the causal mask
    applies inside it), blue computed whole; the title counts tiles and scores."""
    grid = tile_grid(n_query, n_key, block_q, block_k, causal=causal)
    counts = tile_counts(n_query, n_key, block_q, block_k, causal=causal)
    q_index = torch.arange(n_query) // block_q
    k_index = torch.arange(n_key) // block_k
    picture = grid[q_index[:, None], k_index[None, :]].numpy()
    fig, ax = new_figure(1, 1, figsize=(4.8, 4.8 * n_query / n_key + 0.6))
    ax.imshow(picture, cmap=_COLORS, vmin=0, vmax=2, interpolation="nearest", extent=(0, n_key, n_query, 0))
    for start in range(0, n_query + 1, block_q):
        ax.axhline(start, color="white", linewidth=1.2)
    for start in range(0, n_key + 1, block_k):
        ax.axvline(start, color="white", linewidth=1.2)
    if causal:
        diagonal = np.arange(n_query + 1)
        ax.plot(diagonal + n_key - n_query, diagonal, color="black", linewidth=1)
    ax.set_xlabel("key position", fontsize=11)
    ax.set_ylabel("query position", fontsize=11)
    ax.set_title(f"{counts.computed} of {counts.total} tiles computed, "
                 f"{counts.scores_computed / counts.scores_total:.0%} of the scores\n"
                 f"largest score tensor: {block_q} × {block_k}, not {n_query} × {n_key}", fontsize=10)
    return fig


WIDGET_BLOCKS = (4, 8, 16, 32)  # the block sizes the two sliders offer: 16 states drawn for the book


def tile_grid_widget(n: int = 64, block_q: int = 16, block_k: int = 16, *, causal: bool = True) -> widgets.VBox:
    """Sliders for the two block sizes over :func:`plot_tile_grid` of an ``n × n`` score matrix.

    Every state is drawn now and switched in the browser (:func:`~tutorial_lib.widgets._live.live_states`), so the
    sliders also work in the rendered book, with no kernel.
    """
    _check_sizes(n=n)
    for name, value in (("block_q", block_q), ("block_k", block_k)):
        if value not in WIDGET_BLOCKS or isinstance(value, bool):
            raise ValueError(f"{name} must be one of {WIDGET_BLOCKS}, got {value!r}")
    rows = widgets.SelectionSlider(options=WIDGET_BLOCKS, value=block_q, description="block_q")
    cols = widgets.SelectionSlider(options=WIDGET_BLOCKS, value=block_k, description="block_k")
    return live_states(
        [rows, cols], lambda block_q_, block_k_: png_view(plot_tile_grid(n, n, block_q_, block_k_, causal=causal))
    )


@dataclass(frozen=True)
class OnlineSoftmaxStep:
    """The state of the online softmax after one block: the block's span, the running maximum and denominator."""

    start: int
    stop: int
    block_max: float
    m: float
    l: float


def online_softmax_trace(x: Float[Tensor, " n"], block_size: int) -> list[OnlineSoftmaxStep]:
    """The running ``m`` and ``l = Σ exp(x_j - m)`` of the online softmax of one row, after each block."""
    if x.dim() != 1:
        raise ValueError(f"x must be one row of scores (1-D), got shape {tuple(x.shape)}")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    m, l, steps = float("-inf"), 0.0, []
    for start in range(0, len(x), block_size):
        block = x[start : start + block_size].double()
        m_new = max(m, block.max().item())
        l = l * float(np.exp(m - m_new)) + torch.exp(block - m_new).sum().item()
        m = m_new
        steps.append(OnlineSoftmaxStep(start, start + len(block), block.max().item(), m, l))
    return steps


# --- traffic between slow and fast memory (FlashAttention's Theorem 2) -------------------------------------------------


@dataclass(frozen=True)
class Traffic:
    """Numbers moved between slow memory (a GPU's HBM) and fast memory (its on-chip SRAM) by one attention forward."""

    reads: int
    writes: int

    @property
    def total(self) -> int:
        return self.reads + self.writes


def standard_attention_traffic(n_query: int, n_key: int, d_head: int, d_value: int | None = None) -> Traffic:
    """FlashAttention's Algorithm 0, the standard implementation: read Q and K, write S = QKᵀ; read S, write
    P = softmax(S); read P and V, write O = PV. ``Θ(n·d + n²)``: the ``n × n`` matrices cross twice each."""
    _check_sizes(n_query=n_query, n_key=n_key, d_head=d_head)
    d_value = d_head if d_value is None else d_value
    scores = n_query * n_key
    reads = n_query * d_head + n_key * d_head + scores + scores + n_key * d_value
    writes = scores + scores + n_query * d_value
    return Traffic(reads, writes)


def tiled_attention_traffic(n_query: int, n_key: int, d_head: int, block_q: int, block_k: int, *,
                            order: str = "queries outer", causal: bool = False, d_value: int | None = None) -> Traffic:
    """What a tiled forward moves, walking the tiles that :func:`tile_grid` computes, with fast memory holding one
    block of queries, one tile of keys and values, and the block's running state.

    ``"queries outer"`` (FlashAttention-2, and :func:`~tutorial_lib.efficient_attention.tiled_attention`): a block
    of queries is read once, every tile reads its keys and values, the output and log-sum-exp are written once.
    ``"keys outer"`` (FlashAttention's Algorithm 1): a tile of keys and values is read once, and every tile reads the
    block of queries with its partial output, ``ℓ`` and ``m``, and writes the rescaled output, ``ℓ`` and ``m`` back."""
    _check_sizes(n_query=n_query, n_key=n_key, d_head=d_head, block_q=block_q, block_k=block_k)
    if order not in ("queries outer", "keys outer"):
        raise ValueError(f"order must be 'queries outer' or 'keys outer', got {order!r}")
    d_value = d_head if d_value is None else d_value
    grid = tile_grid(n_query, n_key, block_q, block_k, causal=causal) != SKIPPED
    rows = torch.tensor([min(block_q, n_query - s) for s in range(0, n_query, block_q)])
    cols = torch.tensor([min(block_k, n_key - s) for s in range(0, n_key, block_k)])
    tile_rows = int((rows[:, None] * grid).sum())  # Σ over computed tiles of the tile's queries
    tile_cols = int((cols[None, :] * grid).sum())  # Σ over computed tiles of the tile's keys
    if order == "queries outer":
        reads = n_query * d_head + tile_cols * (d_head + d_value)
        writes = n_query * (d_value + 1)  # O and the log-sum-exp L
    else:
        reads = n_key * (d_head + d_value) + tile_rows * (d_head + d_value + 2)  # Q_i, O_i, ℓ_i, m_i per tile
        writes = tile_rows * (d_value + 2)  # O_i, ℓ_i, m_i per tile
    return Traffic(reads, writes)


def _check_sizes(**sizes: object) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
