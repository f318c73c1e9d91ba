"""Chapter 11's figures and widget: they draw what they are given, refuse what they cannot draw, and leave no side output."""

from __future__ import annotations

import pytest
import torch
from matplotlib.figure import Figure

from tutorial_lib.recipes.ablation import AblationResult
from tutorial_lib.stats import compare_paired
from tutorial_lib.widgets._live import live_views, view_label
from tutorial_lib.widgets.ablation_curves import (
    BASELINE_COLOR,
    TOGETHER,
    ablation_curves_widget,
    plot_ablation_curves,
    plot_ablation_deltas,
    plot_curve_overlay,
    plot_gradient_norms,
    plot_position_losses,
    row_colors,
)


def fake_run(name: str, level: float, seed: int = 0) -> AblationResult:
    steps = list(range(0, 100, 10)) + [99]
    return AblationResult(
        change=name, seed=seed, steps=steps, train_loss=[level + 4.0 / (1 + s) for s in steps],
        eval_steps=[50, 100], val_loss=[level + 0.5, level + 0.1], final_val_loss=level + 0.1, seconds=1.0,
        n_parameters=10, model=torch.nn.Linear(1, 1),
    )


COMPARISONS = {
    "no_ffn": compare_paired([2.04, 2.05, 2.03], [2.33, 2.36, 2.31]),
    "no_scaling": compare_paired([2.04, 2.05, 2.03, 2.06, 2.04], [2.03, 2.037, 2.018, 2.049, 2.027]),
    "one_head": compare_paired([2.04, 2.05, 2.03, 2.06, 2.04], [2.05, 2.054, 2.047, 2.065, 2.06]),
}
RUNS = {"baseline": fake_run("baseline", 2.0), "no_ffn": fake_run("no_ffn", 2.3), "no_norm": fake_run("no_norm", 2.2),
        "no_positions": fake_run("no_positions", 2.1)}


def visible_axes(fig: Figure) -> list:
    return [ax for ax in fig.axes if ax.get_visible()]


def test_row_colors_are_stable_and_grey_for_the_baseline():
    colors = row_colors(list(RUNS))
    assert colors["baseline"] == BASELINE_COLOR and len(set(colors.values())) == len(RUNS)
    assert row_colors(list(RUNS)) == colors


def test_small_multiples_have_a_panel_per_row_and_one_for_the_seeds():
    fig = plot_ablation_curves(RUNS, reference_loss=3.3)
    assert len(visible_axes(fig)) == 3  # three rows besides the baseline
    seeds = [fake_run("baseline", 2.0 + 0.01 * s, seed=s) for s in range(3)]
    fig = plot_ablation_curves(RUNS, baseline_seeds=seeds, reference_loss=3.3)
    panels = visible_axes(fig)
    assert len(panels) == 4 and len(panels[-1].lines) == 3 + 1  # three seeds and the reference line
    first = panels[0]
    assert first.get_title().startswith("no_ffn: 2.400") and len(first.lines) >= 4  # the row and the baseline, twice


def test_the_overlay_draws_the_chosen_rows_and_curve():
    fig = plot_curve_overlay(RUNS, ["baseline", "no_norm"], curve="training")
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.lines] == ["baseline", "no_norm"]
    assert list(ax.lines[1].get_ydata()) == RUNS["no_norm"].train_loss
    fig = plot_curve_overlay(RUNS, ["no_ffn"], reference_loss=3.3)
    assert list(fig.axes[0].lines[0].get_ydata()) == RUNS["no_ffn"].val_loss


@pytest.mark.parametrize(("call", "message"), [
    (lambda: plot_ablation_curves({}), "results must be a non-empty mapping"),
    (lambda: plot_ablation_curves(RUNS, baseline="reference"), "unknown"),
    (lambda: plot_ablation_curves(RUNS, ncols=0), "ncols must be a positive int"),
    (lambda: plot_curve_overlay(RUNS, ["no_such_row"]), "rows must name runs"),
    (lambda: plot_curve_overlay(RUNS, ["baseline"], curve="test"), "curve must be one of"),
    (lambda: ablation_curves_widget(RUNS, curve="test"), "curve must be one of"),
    (lambda: ablation_curves_widget(RUNS, ["no_such_row"]), "rows must name runs"),
    (lambda: plot_position_losses({}), "curves must be a non-empty mapping"),
    (lambda: plot_gradient_norms({}), "norms must be a non-empty mapping"),
    (lambda: plot_ablation_deltas({}), "comparisons must be a non-empty mapping"),
    (lambda: plot_ablation_deltas(COMPARISONS, split=0), "split must be a positive number"),
])
def test_bad_input_is_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_deltas_refuse_plain_numbers(without_annotation_checks):
    with without_annotation_checks(), pytest.raises(ValueError, match="PairedComparison"):
        plot_ablation_deltas({"a": 0.1})


def test_the_widget_draws_each_row_against_the_baseline_and_every_curve_for_the_browser():
    box = ablation_curves_widget(RUNS, ["baseline", "no_ffn", "no_norm"], reference_loss=3.3)
    controls, views = live_views(box)
    rows, curve = controls
    others = [row for row in RUNS if row != "baseline"]
    assert list(rows.options) == [TOGETHER, *others] and (rows.value, curve.value) == (TOGETHER, "validation")
    assert list(curve.options) == ["validation", "training"] and len(views) == len(RUNS) * 2
    pictures = {view.children[1].value for view in views.values()}
    assert len(pictures) == len(views) and all('src="data:image/png;base64,' in p for p in pictures)
    index = 1 + others.index("no_ffn")
    assert view_label(views[(index, 1)]) == "rows = no_ffn · curve = training"
    assert 'alt="Plot: training loss: no_ffn against baseline' in views[(index, 1)].children[1].value
    assert 'alt="Plot: validation loss: baseline, no_ffn, no_norm' in views[(0, 0)].children[1].value
    with pytest.raises(ValueError, match="other than the baseline"):
        ablation_curves_widget({"baseline": RUNS["baseline"]})


def test_position_losses_and_gradient_norms_are_drawn_on_log_scales():
    fig = plot_position_losses({"baseline": torch.linspace(2.6, 2.0, 8), "cheat": torch.full((8,), 0.01)},
                               references={"uniform": 4.17})
    (ax,) = fig.axes
    assert ax.get_yscale() == "log" and len(ax.lines) == 3
    fig = plot_gradient_norms({"a, init": torch.tensor([1.0, 0.5, 0.2]), "a, trained": torch.tensor([1e-9, 1e-6, 1e-2]),
                               "b, init": torch.tensor([2.0, 1.0, 0.5])})
    (ax,) = fig.axes
    assert ax.get_yscale() == "log" and [line.get_label() for line in ax.lines] == ["a, init", "a, trained", "b, init"]
    first, second, third = ax.lines
    assert first.get_color() == second.get_color() != third.get_color()  # one colour per model
    assert first.get_linestyle() == third.get_linestyle() != second.get_linestyle()  # one style per moment


def test_the_deltas_are_drawn_with_their_intervals_on_two_axes_small_and_large():
    fig = plot_ablation_deltas(COMPARISONS, split=0.1)
    small, large = fig.axes
    assert [t.get_text() for t in small.get_yticklabels()] == ["no_scaling", "one_head"]
    assert [t.get_text() for t in large.get_yticklabels()] == ["no_ffn"]
    assert small.get_xscale() == large.get_xscale() == "linear"
    low, high = small.get_xlim()
    assert high - low < 0.1  # hundredths of a nat fill the small panel
    # each row: a dot at Δ and an error bar from the interval's low end to its high end
    (dot, _caps, (bar,)) = small.containers[0].lines
    assert list(dot.get_xdata()) == [COMPARISONS["no_scaling"].difference]
    segment = bar.get_segments()[0]
    assert segment[0][0] == pytest.approx(COMPARISONS["no_scaling"].low)
    assert segment[1][0] == pytest.approx(COMPARISONS["no_scaling"].high)
    assert "95% interval" in large.get_xlabel()
    only_large = plot_ablation_deltas({"no_ffn": COMPARISONS["no_ffn"]})
    assert len(only_large.axes) == 1
