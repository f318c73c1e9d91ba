"""The static figures with several panels stay readable on a phone: at most two columns, at most 7 inches wide.

The book shows each figure shrunk to the width of the page; at 390 px a figure wider than about 650 px (7.2 inches at
the figures' 90 dpi) shrinks its text below 7 px (tests/test_book_pages.py measures the stored figures, and the
browser suite the pages). Small multiples therefore go one above the other, or in two columns.
"""

from __future__ import annotations

import pytest
import torch

from tutorial_lib.widgets import plot_masks, plot_saturation_grid
from tutorial_lib.widgets.lr_schedule import LRSchedule, plot_lr_schedules, schedule_view
from tutorial_lib.widgets.mask_explorer import mask_view
from tutorial_lib.widgets.norms_at_init import depth_profiles, plot_norms_at_init
from tutorial_lib.widgets.positions import positions_view
from tutorial_lib.widgets.residual_growth import depth_sweep, plot_residual_growth, residual_growth_view
from tutorial_lib.widgets.ring import plot_ring_step
from tutorial_lib.widgets.rope import rope_similarity_view
from tutorial_lib.widgets.sampling_distribution import plot_nucleus_sizes, plot_sampling_grid

MAX_WIDTH_INCHES = 7.2


def _columns(fig) -> int:
    """How many columns of panels the figure's grid has (colour bars aside)."""
    return max(ax.get_subplotspec().get_geometry()[1] for ax in fig.axes if ax.get_subplotspec() is not None)


SCHEDULE = LRSchedule("warmup_cosine", 100, 10, 1e-3, 1e-4, 64)
FIGURES = {
    "saturation grid, three sizes": lambda: plot_saturation_grid((4, 64, 512)),
    "five masks": lambda: plot_masks(seq_len=6),
    "three schedules": lambda: plot_lr_schedules([SCHEDULE, SCHEDULE, SCHEDULE]),
    "norms at init": lambda: plot_norms_at_init(depth_profiles(("pre-norm", "post-norm"), n_layers=2, batch=2)),
    "residual growth": lambda: plot_residual_growth(depth_sweep((1, 2), d_model=32, seq_len=8)),
    "sampling grid, three filters": lambda: plot_sampling_grid(torch.randn(20), [chr(97 + i) for i in range(20)], n_shown=10),
    "mask explorer, one state": lambda: mask_view("causal + padding", seq_len=8, length=5),
    "positions widget, one state": lambda: positions_view(20, 64, 100.0),
    "schedule widget, one state": lambda: schedule_view(SCHEDULE),
    "residual growth widget, one state": lambda: residual_growth_view(3, 64),
    "RoPE widget, one state": lambda: rope_similarity_view(32, 100.0, max_offset=64),
    "ring widget, 8 ranks": lambda: plot_ring_step(8, 7),
    "nucleus sizes of 70 positions": lambda: plot_nucleus_sizes(torch.randint(1, 9, (70,)), "x" * 70, top_p=0.9, top_k=5),
}


@pytest.mark.parametrize("name", list(FIGURES))
def test_small_multiples_fit_a_phone(name):
    fig = FIGURES[name]()
    assert fig.get_figwidth() <= MAX_WIDTH_INCHES
    assert _columns(fig) <= (3 if name.startswith("sampling grid") else 2)  # three narrow columns at most


def test_a_long_text_of_nucleus_sizes_wraps_onto_rows():
    sizes = torch.arange(1, 71)
    fig = plot_nucleus_sizes(sizes, "".join(chr(97 + i % 26) for i in range(70)), top_p=0.9, per_row=32)
    assert len(fig.axes) == 3  # 32 + 32 + 6 positions
    heights = [[patch.get_height() for patch in ax.patches] for ax in fig.axes]
    assert [len(row) for row in heights] == [32, 32, 6] and sum(heights, []) == sizes.tolist()
    assert [tick.get_text() for tick in fig.axes[2].get_xticklabels()] == list("mnopqr")  # positions 64-69
    with pytest.raises(ValueError, match="per_row must be a positive int"):
        plot_nucleus_sizes(sizes, "a" * 70, top_p=0.9, per_row=0)
