"""Widgets of the book: pure functions that return tensors or figures, and thin ipywidgets wrappers over them.

The pure functions are what the tests check and what the rendered book shows as static figures; the wrappers only
wire controls to them, because the book cannot run Python callbacks.
"""

from tutorial_lib.widgets.mask_explorer import (
    MASK_KINDS,
    build_mask,
    mask_explorer_widget,
    masked_attention_weights,
    plot_masks,
)
from tutorial_lib.widgets.softmax_saturation import (
    SoftmaxStats,
    plot_qk_variance,
    plot_saturation_grid,
    qk_variance,
    qk_variance_standard_error,
    random_scores,
    saturation,
    softmax_saturation_widget,
    softmax_stats,
)

__all__ = [
    "MASK_KINDS",
    "SoftmaxStats",
    "build_mask",
    "mask_explorer_widget",
    "masked_attention_weights",
    "plot_masks",
    "plot_qk_variance",
    "plot_saturation_grid",
    "qk_variance",
    "qk_variance_standard_error",
    "random_scores",
    "saturation",
    "softmax_saturation_widget",
    "softmax_stats",
]
