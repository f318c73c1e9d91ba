"""Learning-rate schedules as curves and figures (chapters 07 and 09): warm-up + cosine, Noam's Eq. (3), constant.

A :class:`LRSchedule` names a schedule and its settings; its curve comes from :meth:`TrainConfig.lr_at`, the very
function :func:`~tutorial_lib.training.train` calls before each update, so a figure shows what training does.
:func:`plot_lr_schedules` draws schedules side by side for the static book and :func:`lr_schedule_widget` is a thin
ipywidgets wrapper over the same functions (every warm-up it offers drawn when the notebook runs, so that its slider
works in the rendered book too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import ipywidgets as widgets
import torch
from jaxtyping import Float
from matplotlib.figure import Figure
from torch import Tensor

from tutorial_lib.training import TrainConfig
from tutorial_lib.widgets._live import live_states, png_view
from tutorial_lib.widgets._plotting import new_figure

SCHEDULE_KINDS = ("warmup_cosine", "noam", "constant")  # TrainConfig.schedule's names
_KIND_LABELS = {"warmup_cosine": "warm-up + cosine", "noam": "Noam, Eq. (3)", "constant": "constant"}
WARMUP_FRACTIONS = (0.0, 0.01, 0.04, 0.1, 0.3)  # the widget's warm-up stops, as fractions of the run


@dataclass(frozen=True)
class LRSchedule:
    """The learning rate of every update of a run of ``total_steps`` updates.

    - ``"warmup_cosine"``: linear warm-up over ``warmup_steps`` to ``peak_lr``, then half a cosine down to
      ``min_lr`` at ``total_steps``.
    - ``"constant"``: the same warm-up, then ``peak_lr``.
    - ``"noam"``: Eq. (3), ``d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)``, which peaks at
      ``(d_model · warmup)^-0.5``. With ``peak_lr=None`` it is the paper's, as printed; with a number it is rescaled
      to peak there, and ``d_model`` no longer matters (it only sets Eq. (3)'s scale). ``min_lr`` is not used.
    """

    kind: str
    total_steps: int
    warmup_steps: int
    peak_lr: float | None = 1e-3
    min_lr: float = 0.0
    d_model: int = 512

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULE_KINDS:
            raise ValueError(f"kind must be one of {SCHEDULE_KINDS}, got {self.kind!r}")
        for name, minimum in (("total_steps", 1), ("warmup_steps", 0), ("d_model", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
        if self.warmup_steps > self.total_steps:
            raise ValueError(f"warmup_steps={self.warmup_steps} must be <= total_steps={self.total_steps}")
        if self.peak_lr is None:
            if self.kind != "noam":
                raise ValueError(f"peak_lr must be a number for the {self.kind!r} schedule (None is for 'noam' only)")
        elif not self.peak_lr > 0:
            raise ValueError(f"peak_lr must be > 0, got {self.peak_lr!r}")
        if self.kind == "warmup_cosine" and not 0 <= self.min_lr <= self.peak_lr:
            raise ValueError(f"min_lr must lie in [0, peak_lr={self.peak_lr}], got {self.min_lr!r}")

    @classmethod
    def from_train_config(cls, cfg: TrainConfig, *, d_model: int = 512) -> LRSchedule:
        """The schedule a :class:`TrainConfig` trains with (``d_model`` is only used by ``"noam"``)."""
        if cfg.schedule == "noam":  # TrainConfig's lr multiplies Eq. (3); the peak is that factor times Eq. (3)'s
            peak = cfg.lr * _noam_peak(d_model, cfg.warmup_steps)
            return cls("noam", cfg.max_steps, cfg.warmup_steps, peak, d_model=d_model)
        return cls(cfg.schedule, cfg.max_steps, cfg.warmup_steps, cfg.lr, cfg.min_lr if cfg.schedule == "warmup_cosine" else 0.0)

    @cached_property
    def train_config(self) -> TrainConfig:
        """Training settings whose ``lr_at`` is this schedule."""
        lr = self.peak_lr
        if self.kind == "noam":
            lr = 1.0 if self.peak_lr is None else self.peak_lr / _noam_peak(self.d_model, self.warmup_steps)
        return TrainConfig(
            max_steps=self.total_steps, lr=lr, min_lr=self.min_lr, warmup_steps=self.warmup_steps, schedule=self.kind
        )

    def lr_at(self, step: int) -> float:
        """The learning rate of update ``step`` (0-based), as :func:`~tutorial_lib.training.train` sets it."""
        return self.train_config.lr_at(step, self.d_model)

    def curve(self, steps: Sequence[int] | None = None) -> Float[Tensor, " n_steps"]:
        """The learning rates of the updates ``steps`` (default: every update, 0 to ``total_steps - 1``), float64."""
        steps = range(self.total_steps) if steps is None else steps
        return torch.tensor([self.lr_at(step) for step in steps], dtype=torch.float64)

    @property
    def peak(self) -> float:
        """The largest learning rate of the run; Noam's is reached at the last warm-up update."""
        if self.kind == "noam" and self.peak_lr is None:
            return _noam_peak(self.d_model, self.warmup_steps)
        return self.peak_lr

    def describe(self) -> str:
        """A one-line description of the settings beyond the peak, for titles."""
        text = f"{_KIND_LABELS[self.kind]}: warmup {self.warmup_steps:,}"
        if self.kind == "noam" and self.peak_lr is None:
            return text + f", d_model {self.d_model}"
        return text + (f", min {self.min_lr:.1e}" if self.kind == "warmup_cosine" else "")


def _noam_peak(d_model: int, warmup_steps: int) -> float:
    # TrainConfig.lr_at counts Eq. (3)'s steps from 1 and treats a warm-up of 0 as 1: the peak is at step = warmup.
    return (d_model * max(1, warmup_steps)) ** -0.5


def plot_steps(schedule: LRSchedule, n_points: int = 1_000) -> list[int]:
    """At most ``n_points`` evenly spaced updates, plus those around the end of the warm-up (where the peak is)."""
    if isinstance(n_points, bool) or not isinstance(n_points, int) or n_points < 2:
        raise ValueError(f"n_points must be an int >= 2, got {n_points!r}")
    last = schedule.total_steps - 1
    spaced = {round(i * last / (n_points - 1)) for i in range(n_points)} if last else {0}
    corners = {step for step in (schedule.warmup_steps - 1, schedule.warmup_steps) if 0 <= step <= last}
    return sorted(spaced | corners)


def _draw(ax, schedule: LRSchedule, *, others: Sequence[LRSchedule] = ()) -> None:
    """The schedule as a line, its warm-up shaded, its peak and last learning rate in the title."""
    for i, other in enumerate(others):  # faint context: the other kinds at the same settings
        steps = plot_steps(other)
        ax.plot(steps, other.curve(steps).numpy(), color="0.6", linestyle=("--", ":")[i % 2], linewidth=1.2,
                label=_KIND_LABELS[other.kind])
    steps = plot_steps(schedule)
    ax.plot(steps, schedule.curve(steps).numpy(), color="C0", linewidth=1.8, label=_KIND_LABELS[schedule.kind])
    if schedule.warmup_steps:
        ax.axvspan(0, schedule.warmup_steps, color="C1", alpha=0.12, linewidth=0)
    ax.set_xlim(0, schedule.total_steps)
    ax.set_ylim(bottom=0)
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    last = schedule.lr_at(schedule.total_steps - 1)
    ax.set_title(f"{schedule.describe()}\npeak {schedule.peak:.2e}, last update {last:.2e}", fontsize="medium")
    ax.set_xlabel("update step")
    if others:
        ax.legend(fontsize="small", loc="best")


def plot_lr_schedules(schedules: Sequence[LRSchedule]) -> Figure:
    """Small multiples: each schedule in its own panel (its own scale), the warm-up shaded; one panel per row, so
    that the figure stays readable on a phone."""
    if not schedules:
        raise ValueError("schedules must hold at least one LRSchedule")
    fig, axes = new_figure(len(schedules), 1, figsize=(6.0, 2.9 * len(schedules)), squeeze=False)
    for ax, schedule in zip(axes[:, 0], schedules):
        _draw(ax, schedule)
        ax.set_ylabel("learning rate")
    return fig


def warmup_choices(total_steps: int, warmup_steps: int) -> tuple[int, ...]:
    """The widget's warm-up stops for a run of ``total_steps`` updates: no warm-up, fixed fractions of the run, and
    ``warmup_steps`` itself."""
    return tuple(sorted({round(total_steps * f) for f in WARMUP_FRACTIONS} | {warmup_steps}))


def schedule_view(schedule: LRSchedule) -> Figure:
    """The widget's picture for one schedule: its curve, with the two other kinds at the same peak drawn in grey (so
    that only the shapes differ)."""
    others = [
        LRSchedule(name, schedule.total_steps, schedule.warmup_steps, schedule.peak,
                   schedule.min_lr if schedule.kind == "warmup_cosine" else 0.0, schedule.d_model)
        for name in SCHEDULE_KINDS if name != schedule.kind
    ]
    fig, ax = new_figure(1, 1, figsize=(6.0, 3.4))
    _draw(ax, schedule, others=others)
    ax.set_ylabel("learning rate")
    return fig


def lr_schedule_widget(
    kind: str = "warmup_cosine",
    *,
    total_steps: int = 1_000,
    warmup_steps: int = 100,
    peak_lr: float = 1e-3,
    min_lr: float = 1e-4,
    d_model: int = 512,
) -> widgets.VBox:
    """The warm-up of one schedule as a slider (none, 1 %, 4 %, 10 % and 30 % of the run, and ``warmup_steps``); its
    curve as a figure, the other kinds at the same peak in grey.

    ``"noam"`` follows Eq. (3) as printed, so its peak comes from ``d_model`` and the warm-up; the other two kinds
    take ``peak_lr``, and the cosine ends at ``min_lr``. Every warm-up is drawn now and switched in the browser
    (:func:`~tutorial_lib.widgets._live.live_states`), so the slider also works in the rendered book, with no kernel.
    Other settings: call the function again.
    """
    peak = None if kind == "noam" else peak_lr
    final = min_lr if kind == "warmup_cosine" else 0.0
    LRSchedule(kind, total_steps, warmup_steps, peak, final, d_model)  # validate before building any control
    warmup_slider = widgets.SelectionSlider(
        options=[(f"{w:,}", w) for w in warmup_choices(total_steps, warmup_steps)], value=warmup_steps,
        description="warm-up",
    )
    return live_states(
        [warmup_slider],
        lambda warmup_: png_view(schedule_view(LRSchedule(kind, total_steps, warmup_, peak, final, d_model))),
    )
