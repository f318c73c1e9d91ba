"""Chapter 11's figures: the ablation rows' loss curves, the loss by position, and gradient norms per block.

Pure functions take the runs (:class:`~tutorial_lib.recipes.ablation.AblationResult`, or anything with the same curve
fields) and return figures; :func:`ablation_curves_widget` draws :func:`plot_curve_overlay` for each row against the
baseline, switched in the browser.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ipywidgets as widgets
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from torch import Tensor

from tutorial_lib.recipes.ablation import AblationResult
from tutorial_lib.stats import PairedComparison
from tutorial_lib.widgets._live import live_states, png_view
from tutorial_lib.widgets._plotting import new_figure

CURVES = ("validation", "training")
TOGETHER = "all together"  # the widget's first option: every offered row on one pair of axes
BASELINE_COLOR = "0.45"
_PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
            "tab:cyan", "navy", "darkgoldenrod", "teal")


def row_colors(rows: Sequence[str], baseline: str = "baseline") -> dict[str, str]:
    """One colour per row, grey for the baseline, in the order given (the same row keeps its colour everywhere)."""
    colors, others = {}, iter(_PALETTE * (1 + len(rows) // len(_PALETTE)))
    for row in rows:
        colors[row] = BASELINE_COLOR if row == baseline else next(others)
    return colors


def _check_results(results: Mapping[str, AblationResult], rows: Sequence[str]) -> None:
    if not isinstance(results, Mapping) or not results:
        raise ValueError(f"results must be a non-empty mapping from row names to runs, got {type(results).__name__}")
    missing = [row for row in rows if row not in results]
    if missing:
        raise ValueError(f"rows must name runs of results ({sorted(results)}), got unknown {missing}")


def _draw(ax: Axes, result: AblationResult, color: str, label: str, curve: str, *, thin: bool = False) -> None:
    if curve == "training":
        ax.plot(result.steps, result.train_loss, color=color, lw=0.8 if thin else 1.2, label=label)
    else:
        ax.plot(result.eval_steps, result.val_loss, "o-", color=color, ms=3, lw=1.2, label=label)


def plot_ablation_curves(
    results: Mapping[str, AblationResult],
    *,
    baseline: str = "baseline",
    baseline_seeds: Sequence[AblationResult] = (),
    reference_loss: float | None = None,
    reference_label: str = "unigram entropy",
    ncols: int = 2,
) -> Figure:
    """Small multiples: one panel per row other than ``baseline``, its training loss (line) and validation loss
    (dots) over the baseline's in grey, with a dashed ``reference_loss`` line; a last panel overlays the
    ``baseline_seeds`` runs (the noise between seeds), when given. Panels share their axes."""
    _check_results(results, [baseline])
    if isinstance(ncols, bool) or not isinstance(ncols, int) or ncols < 1:
        raise ValueError(f"ncols must be a positive int, got {ncols!r}")
    rows = [row for row in results if row != baseline]
    n_panels = len(rows) + bool(baseline_seeds)
    nrows = max(1, -(-n_panels // ncols))
    fig, axes = new_figure(nrows, ncols, figsize=(3.5 * ncols, 2.4 * nrows), sharex=True, sharey=True, squeeze=False)
    colors = row_colors(list(results), baseline)
    flat = [ax for line in axes for ax in line]
    for ax, row in zip(flat, rows):
        for name, color in ((baseline, BASELINE_COLOR), (row, colors[row])):
            _draw(ax, results[name], color, name, "training", thin=True)
            _draw(ax, results[name], color, f"{name}, validation", "validation")
        ax.set_title(f"{row}: {results[row].final_val_loss:.3f} ({results[baseline].final_val_loss:.3f})", fontsize=9)
    if baseline_seeds:
        ax = flat[len(rows)]
        seed_colors = row_colors([f"seed {r.seed}" for r in baseline_seeds], baseline="")
        for result in baseline_seeds:
            _draw(ax, result, seed_colors[f"seed {result.seed}"], f"seed {result.seed}", "validation")
        ax.set_title(f"{baseline}, {len(baseline_seeds)} seeds (validation)", fontsize=9)
        ax.legend(fontsize=7, ncols=2)
    for ax in flat[:n_panels]:
        if reference_loss is not None:
            ax.axhline(reference_loss, color="k", ls="--", lw=0.8)
        ax.grid(alpha=0.3)
        ax.set_ylim(0, None)
    for ax in flat[n_panels:]:
        ax.set_visible(False)
    for ax in flat[:n_panels][-ncols:]:
        ax.set_xlabel("update")
        ax.tick_params(labelbottom=True)
    for line in axes:
        line[0].set_ylabel("loss (nats)")
    handles = [
        flat[0].plot([], [], color="k", lw=0.8, label="training (one batch)")[0],
        flat[0].plot([], [], "o-", color="k", ms=3, label="validation")[0],
    ]
    if reference_loss is not None:
        handles.append(flat[0].plot([], [], "k--", lw=0.8, label=reference_label)[0])
    fig.legend(handles=handles, loc="outside upper center", ncols=len(handles), fontsize=8,
               title=f"each panel: the row in colour, {baseline} in grey; title: final validation loss (baseline's)",
               title_fontsize=8)
    return fig


def plot_curve_overlay(
    results: Mapping[str, AblationResult], rows: Sequence[str], *, curve: str = "validation",
    reference_loss: float | None = None, ax: Axes | None = None,
) -> Figure:
    """The ``curve`` ("validation" or "training") of each of ``rows`` on one pair of axes."""
    _check_results(results, rows)
    if curve not in CURVES:
        raise ValueError(f"curve must be one of {CURVES}, got {curve!r}")
    if ax is None:
        fig, ax = new_figure(1, 1, figsize=(6.0, 3.8))
    else:
        fig = ax.figure
    colors = row_colors(list(results))
    for row in rows:
        _draw(ax, results[row], colors[row], row, curve)
    if reference_loss is not None:
        ax.axhline(reference_loss, color="k", ls="--", lw=0.8, label="unigram entropy")
    ax.set_xlabel("update")
    ax.set_ylabel(f"{curve} loss (nats)")
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    if rows:
        ax.legend(fontsize=7, ncols=2)
    return fig


def ablation_curves_widget(
    results: Mapping[str, AblationResult], rows: Sequence[str] | None = None, *, curve: str = "validation",
    reference_loss: float | None = None, baseline: str = "baseline",
) -> widgets.VBox:
    """Buttons for ``rows`` all together (the first option) or one other row of ``results`` at a time over the
    ``baseline``, and for the curve; each picture is :func:`plot_curve_overlay`'s.

    Every state is drawn now and switched in the browser (:func:`~tutorial_lib.widgets._live.live_states`), so the
    controls also work in the rendered book, with no kernel.
    """
    rows = list(results) if rows is None else list(rows)
    _check_results(results, [*rows, baseline])
    if curve not in CURVES:
        raise ValueError(f"curve must be one of {CURVES}, got {curve!r}")
    others = [row for row in results if row != baseline]
    if not others:
        raise ValueError(f"results must hold at least one row other than the baseline {baseline!r}, got {list(results)}")
    shown = {TOGETHER: rows, **{row: [baseline, row] for row in others}}
    row_buttons = widgets.ToggleButtons(options=list(shown), value=TOGETHER, description="rows")
    curve_buttons = widgets.ToggleButtons(options=CURVES, value=curve, description="curve")

    def view(row: str, curve_: str) -> widgets.HTML:
        fig = plot_curve_overlay(results, shown[row], curve=curve_, reference_loss=reference_loss)
        what = ", ".join(shown[row]) if row == TOGETHER else f"{row} against {baseline}"
        fig.axes[0].set_title(f"{curve_} loss: {what}", fontsize=9)  # also the picture's alt text
        return png_view(fig)

    return live_states([row_buttons, curve_buttons], view)


def plot_position_losses(curves: Mapping[str, Tensor], *, references: Mapping[str, float] | None = None) -> Figure:
    """The validation loss at each position of the window, one line per entry of ``curves``, on a log scale, with
    horizontal ``references`` (name → loss) dashed."""
    if not isinstance(curves, Mapping) or not curves:
        raise ValueError("curves must be a non-empty mapping from labels to losses by position")
    fig, ax = new_figure(1, 1, figsize=(6.0, 3.8))
    colors = row_colors(list(curves), baseline=next(iter(curves)))
    for label, losses in curves.items():
        ax.plot(range(len(losses)), losses.tolist(), "o-", ms=2.5, color=colors[label], label=label)
    for (label, value), style in zip((references or {}).items(), ("--", ":", "-.")):
        ax.axhline(value, color="k", ls=style, lw=0.8, label=label)
    ax.set_yscale("log")
    ax.set_title("validation loss at each position of the window", fontsize=10)  # also the figure's alt text
    ax.set_xlabel("position t in the window (it has read t + 1 characters)")
    ax.set_ylabel("validation loss (nats)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return fig


def plot_gradient_norms(norms: Mapping[str, Tensor]) -> Figure:
    """The gradient norm reaching each block (block 0 nearest the input), one line per entry, on a log scale.

    Labels of the form "model, when" share a colour per model and a line style and marker per "when" (solid with
    dots for the first one met, then dashed with squares...), so "baseline, trained" and "baseline, at
    initialisation" read as a pair."""
    if not isinstance(norms, Mapping) or not norms:
        raise ValueError("norms must be a non-empty mapping from labels to per-block gradient norms")
    fig, ax = new_figure(1, 1, figsize=(6.0, 3.6))
    models = list(dict.fromkeys(label.split(",")[0] for label in norms))
    whens = list(dict.fromkeys(label.split(",", 1)[1].strip() if "," in label else "" for label in norms))
    colors = row_colors(models, baseline="")
    styles = dict(zip(whens, (("-", "o"), ("--", "s"), (":", "^"), ("-.", "v")) * len(whens)))
    for label, values in norms.items():
        model, when = label.split(",")[0], label.split(",", 1)[1].strip() if "," in label else ""
        line, marker = styles[when]
        ax.plot(range(len(values)), values.tolist(), marker=marker, ls=line, color=colors[model], label=label)
    ax.set_yscale("log")
    n_blocks = max(len(values) for values in norms.values())
    ax.set_xticks(range(n_blocks))
    ax.set_title("the gradient norm reaching each block", fontsize=10)  # also the figure's alt text
    ax.set_xlabel("block (0: nearest the input)")
    ax.set_ylabel("‖∂L/∂θ_block‖")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return fig


def plot_ablation_deltas(comparisons: Mapping[str, PairedComparison], *, split: float = 0.1) -> Figure:
    """Each row's paired difference from the baseline (row minus baseline, seed by seed) as a dot with its confidence
    interval as an error bar, in two panels with their own linear axes: the rows whose |Δ| is below ``split`` nats,
    where hundredths of a nat decide the verdict, and the others. A bar that crosses the zero line is a row the seeds
    cannot tell from the baseline."""
    if not isinstance(comparisons, Mapping) or not comparisons:
        raise ValueError("comparisons must be a non-empty mapping from row names to paired comparisons")
    if not all(all(hasattr(c, a) for a in ("difference", "low", "high", "n", "confidence")) for c in comparisons.values()):
        raise ValueError("comparisons must hold tutorial_lib.stats.PairedComparison values (difference, low, high, n, confidence)")
    if not isinstance(split, (int, float)) or isinstance(split, bool) or not split > 0:
        raise ValueError(f"split must be a positive number of nats, got {split!r}")
    groups = {"small": [r for r, c in comparisons.items() if abs(c.difference) < split],
              "large": [r for r, c in comparisons.items() if abs(c.difference) >= split]}
    groups = {name: rows for name, rows in groups.items() if rows}
    colors = row_colors(["baseline", *comparisons])
    heights = [len(rows) for rows in groups.values()]
    fig, axes = new_figure(len(groups), 1, figsize=(6.0, 1.6 + 0.34 * sum(heights) + 0.5 * len(groups)), squeeze=False,
                           gridspec_kw={"height_ratios": heights})
    for ax, (group, rows) in zip(axes[:, 0], groups.items()):
        for i, row in enumerate(rows):
            c = comparisons[row]
            ax.errorbar(c.difference, i, xerr=[[c.difference - c.low], [c.high - c.difference]], fmt="o",
                        color=colors[row], capsize=4, ms=5)
            ax.annotate(f"{c.difference:+.3f} ± {(c.high - c.low) / 2:.3f} (n = {c.n})", (c.high, i), xytext=(6, 0),
                        textcoords="offset points", va="center", fontsize=7.5)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_yticks(range(len(rows)), rows)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        low = min(min(comparisons[r].low for r in rows), 0)
        high = max(max(comparisons[r].high for r in rows), 0)
        ax.set_xlim(low - 0.1 * (high - low), high + 0.6 * (high - low))  # room for the labels on the right
        ax.grid(alpha=0.3, axis="x")
        what = f"|Δ| < {split:g} nats" if group == "small" else f"|Δ| ≥ {split:g} nats"
        ax.set_title(f"{what}: its own linear axis", fontsize=9)
    confidence = next(iter(comparisons.values())).confidence
    axes[-1, 0].set_xlabel(f"Δ = row minus baseline, paired by seed (nats); bars: {confidence:.0%} interval")
    return fig
