"""The learning-rate schedule widget (chapters 07 and 09): curves against PyTorch's schedulers and Eq. (3) by hand."""

from __future__ import annotations

import math

import ipywidgets as widgets
import pytest
import torch

from tutorial_lib.training import TrainConfig
from tutorial_lib.widgets._live import live_views, view_label
from tutorial_lib.widgets.lr_schedule import (
    SCHEDULE_KINDS,
    LRSchedule,
    lr_schedule_widget,
    plot_lr_schedules,
    plot_steps,
    warmup_choices,
)


def _pytorch_rates(scheduler_factory, n_steps: int, lr: float) -> torch.Tensor:
    """The learning rate a PyTorch scheduler gives each of ``n_steps`` updates."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = scheduler_factory(optimizer)
    rates = []
    for _ in range(n_steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return torch.tensor(rates, dtype=torch.float64)


@pytest.mark.parametrize(("warmup", "total"), [(10, 100), (50, 1000), (1, 7)])
def test_warmup_cosine_is_pytorchs_linear_then_cosine_annealing(warmup, total):
    schedule = LRSchedule("warmup_cosine", total, warmup, peak_lr=2e-3, min_lr=2e-4)

    def linear_then_cosine(optimizer):
        return torch.optim.lr_scheduler.SequentialLR(optimizer, [
            torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1 / warmup, end_factor=1.0, total_iters=warmup - 1),
            torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total - warmup, eta_min=2e-4),
        ], milestones=[warmup])

    torch.testing.assert_close(schedule.curve(), _pytorch_rates(linear_then_cosine, total, 2e-3), rtol=1e-9, atol=0)


def test_constant_is_pytorchs_linear_warmup():
    schedule = LRSchedule("constant", 300, 30, peak_lr=1e-3)
    rates = _pytorch_rates(
        lambda optimizer: torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1 / 30, end_factor=1.0, total_iters=29),
        300, 1e-3,
    )
    torch.testing.assert_close(schedule.curve(), rates, rtol=1e-9, atol=0)
    assert schedule.peak == 1e-3 and schedule.lr_at(299) == 1e-3


@pytest.mark.parametrize(("d_model", "warmup"), [(512, 4000), (64, 10), (256, 0)])
def test_noam_is_equation_3_as_printed(d_model, warmup):
    total = 3 * max(warmup, 10)
    schedule = LRSchedule("noam", total, warmup, peak_lr=None, d_model=d_model)
    # Eq. (3) with the paper's steps counted from 1; a warm-up of 0 behaves as 1.
    w = max(warmup, 1)
    expected = torch.tensor(
        [d_model**-0.5 * min(s**-0.5, s * w**-1.5) for s in range(1, total + 1)], dtype=torch.float64
    )
    curve = schedule.curve()
    torch.testing.assert_close(curve, expected, rtol=1e-12, atol=0)
    assert schedule.peak == pytest.approx(curve.max().item(), rel=1e-12)
    assert curve.argmax().item() == w - 1  # the last warm-up update


def test_noam_of_d_model_512_and_warmup_4000_peaks_at_7e_4():
    schedule = LRSchedule("noam", 100_000, 4000, peak_lr=None, d_model=512)
    assert schedule.peak == pytest.approx(6.9877e-4, rel=1e-4)
    assert schedule.lr_at(4 * 4000 - 1) == pytest.approx(schedule.peak / 2)  # 1/√step: four times later, half


def test_noam_with_a_peak_is_eq_3_rescaled_and_forgets_d_model():
    unscaled = LRSchedule("noam", 200, 20, peak_lr=None, d_model=128).curve()
    for d_model in (64, 1024):
        scaled = LRSchedule("noam", 200, 20, peak_lr=1e-3, d_model=d_model).curve()
        torch.testing.assert_close(scaled, unscaled * (1e-3 / unscaled.max()), rtol=1e-12, atol=0)
        assert scaled.max().item() == pytest.approx(1e-3, rel=1e-12)


def test_a_train_config_gives_the_schedule_train_uses():
    cosine = TrainConfig(max_steps=120, lr=3e-3, min_lr=3e-4, warmup_steps=12)
    noam = TrainConfig(max_steps=120, lr=2.0, warmup_steps=12, schedule="noam")  # lr is Eq. (3)'s factor
    for cfg, d_model in ((cosine, 512), (noam, 64)):
        schedule = LRSchedule.from_train_config(cfg, d_model=d_model)
        expected = torch.tensor([cfg.lr_at(step, d_model) for step in range(120)], dtype=torch.float64)
        torch.testing.assert_close(schedule.curve(), expected, rtol=1e-12, atol=0)
    noam_peak = LRSchedule.from_train_config(noam, d_model=64).peak
    assert noam_peak == pytest.approx(2.0 * (64 * 12) ** -0.5)


def test_warmup_cosine_ends_at_min_lr_and_stays_there():
    schedule = LRSchedule("warmup_cosine", 50, 5, peak_lr=1.0, min_lr=0.1)
    curve = schedule.curve(range(60))
    assert curve[4].item() == 1.0 and curve[5].item() == 1.0  # the last warm-up update and the cosine's start
    assert torch.all(curve[5:50].diff() < 0) and torch.all(curve[50:] == 0.1)
    assert curve[49].item() == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 44 / 45)))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "linear"}, "kind"),
        ({"warmup_steps": 11}, "warmup_steps"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"total_steps": 0}, "total_steps"),
        ({"peak_lr": 0.0}, "peak_lr"),
        ({"peak_lr": None}, "peak_lr"),
        ({"min_lr": 2e-3}, "min_lr"),
        ({"kind": "noam", "d_model": 0}, "d_model"),
    ],
)
def test_bad_settings_are_refused(kwargs, match):
    settings = {"kind": "warmup_cosine", "total_steps": 10, "warmup_steps": 2, "peak_lr": 1e-3, "min_lr": 1e-4, **kwargs}
    with pytest.raises(ValueError, match=match):
        LRSchedule(**settings)


def test_plot_steps_are_few_sorted_and_hold_the_peak():
    schedule = LRSchedule("noam", 100_000, 4000, peak_lr=None)
    steps = plot_steps(schedule, n_points=500)
    assert steps == sorted(set(steps)) and steps[0] == 0 and steps[-1] == 99_999
    assert {3999, 4000} <= set(steps) and len(steps) <= 502
    assert plot_steps(LRSchedule("constant", 1, 0)) == [0]
    with pytest.raises(ValueError, match="n_points"):
        plot_steps(schedule, n_points=1)


def test_the_figure_has_one_panel_per_schedule():
    schedules = [LRSchedule(kind, 100, 10, peak_lr=None if kind == "noam" else 1e-3) for kind in SCHEDULE_KINDS]
    fig = plot_lr_schedules(schedules)
    assert len(fig.axes) == 3
    assert all(ax.get_title() for ax in fig.axes)
    with pytest.raises(ValueError, match="schedules"):
        plot_lr_schedules([])


def test_the_widget_draws_every_warmup_for_the_browser():
    widget = lr_schedule_widget("warmup_cosine", total_steps=1000, warmup_steps=100, peak_lr=1e-3, min_lr=1e-4)
    assert isinstance(widget, widgets.VBox)
    (warmup,), views = live_views(widget)
    assert warmup.value == 100 and [v for _, v in warmup.options] == [0, 10, 40, 100, 300] and len(views) == 5
    pictures = {view.children[1].value for view in views.values()}
    assert len(pictures) == len(views) and all('src="data:image/png;base64,' in p for p in pictures)  # each its own
    assert view_label(views[(1,)]) == "warm-up = 10"
    assert "warm-up + cosine: warmup 10, min 1.0e-04" in views[(1,)].children[1].value  # the alt text names it
    (warmup,), views = live_views(lr_schedule_widget("noam", total_steps=100_000, warmup_steps=4000, d_model=512))
    assert [label for label, _ in warmup.options] == ["0", "1,000", "4,000", "10,000", "30,000"]
    assert "Noam, Eq. (3): warmup 4,000, d_model 512" in views[(2,)].children[1].value


def test_the_widget_accepts_any_length_and_refuses_bad_settings():
    (warmup,), _ = live_views(lr_schedule_widget(total_steps=1234, warmup_steps=10))
    assert tuple(v for _, v in warmup.options) == warmup_choices(1234, 10) == (0, 10, 12, 49, 123, 370)
    with pytest.raises(ValueError, match="d_model"):
        lr_schedule_widget("noam", d_model=0)
    with pytest.raises(ValueError, match="warmup_steps"):
        lr_schedule_widget(total_steps=100, warmup_steps=200)
    with pytest.raises(ValueError, match="kind must be one of"):
        lr_schedule_widget("linear")
