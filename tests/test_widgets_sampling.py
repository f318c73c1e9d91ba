"""Chapter 10's sampling-distribution widget: its pure functions against analytical values and against the sampler
itself; the figures and the ipywidgets wrapper construct and redraw."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from matplotlib.figure import Figure

from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.sampling import sample_next_token
from tutorial_lib.widgets._live import live_views, view_label
from tutorial_lib.widgets.sampling_distribution import (
    WIDGET_TEMPERATURES,
    entropy,
    filtered_distribution,
    next_token_logits,
    plot_sampling_distribution,
    plot_sampling_grid,
    sampling_distribution_widget,
    visible_label,
)

PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05])
LOGITS = PROBS.log()
LABELS = ["a", " ", "\n", "z"]


# --- the distribution ---------------------------------------------------------------------------------------------


def test_temperature_one_without_filters_is_the_softmax():
    torch.testing.assert_close(filtered_distribution(LOGITS), PROBS)


@pytest.mark.parametrize("temperature", [0.25, 0.5, 2.0, 10.0])
def test_temperature_raises_the_probabilities_to_the_power_one_over_t(temperature):
    """softmax(log p / T) = p^(1/T) / Σ p^(1/T): computed here from the probabilities alone."""
    powered = PROBS.double() ** (1 / temperature)
    expected = (powered / powered.sum()).float()
    torch.testing.assert_close(filtered_distribution(LOGITS, temperature=temperature), expected)


def test_temperature_zero_puts_all_the_mass_on_the_argmax():
    logits = torch.tensor([0.3, 2.5, -1.0, 2.4])
    assert filtered_distribution(logits, temperature=0, top_k=3, top_p=0.1).tolist() == [0.0, 1.0, 0.0, 0.0]


def test_top_k_renormalises_the_k_most_likely():
    torch.testing.assert_close(filtered_distribution(LOGITS, top_k=2), torch.tensor([0.625, 0.375, 0.0, 0.0]))


@pytest.mark.parametrize(
    ("top_p", "expected"),
    [
        (0.45, [1.0, 0.0, 0.0, 0.0]),  # the most likely token alone exceeds top_p: it stays, alone
        (0.7, [0.625, 0.375, 0.0, 0.0]),
        (0.9, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0]),
    ],
)
def test_top_p_renormalises_the_smallest_nucleus(top_p, expected):
    torch.testing.assert_close(filtered_distribution(LOGITS, top_p=top_p), torch.tensor(expected))


def test_the_widget_shows_what_the_sampler_draws():
    """Temperature, then top-k, then top-p, in the sampler's order: the frequencies of 40,000 seeded draws agree
    with the distribution drawn (the standard error of each frequency is below 0.0025)."""
    logits = torch.randn(12, generator=torch.Generator().manual_seed(0)) * 2
    settings = {"temperature": 0.7, "top_k": 6, "top_p": 0.8}
    rows = logits.expand(40_000, -1).contiguous()
    draws = sample_next_token(rows, generator=torch.Generator().manual_seed(1), **settings)
    frequencies = torch.bincount(draws, minlength=12).float() / 40_000
    torch.testing.assert_close(frequencies, filtered_distribution(logits, **settings), atol=0.01, rtol=0.0)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [({"logits": torch.zeros(2, 4)}, "logits"), ({"logits": LOGITS, "temperature": -0.5}, "temperature")],
)
def test_filtered_distribution_rejects_bad_arguments(kwargs, argument):
    logits = kwargs.pop("logits")
    with pytest.raises(ValueError, match=argument):
        inspect.unwrap(filtered_distribution)(logits, **kwargs)  # unwrapped: past jaxtyping's own shape check


@pytest.mark.parametrize("n", [1, 2, 65])
def test_entropy_of_uniform_and_one_hot(n):
    torch.testing.assert_close(entropy(torch.full((n,), 1 / n)), torch.tensor(math.log(n)))
    assert entropy(torch.nn.functional.one_hot(torch.tensor(0), n).float()).item() == 0.0


def test_visible_label_shows_whitespace():
    assert [visible_label(t) for t in LABELS] == ["a", "␣", "↵", "z"]


# --- the model's distribution -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(d_vocab=7, n_ctx=6, d_model=16, n_heads=2, n_layers=1))


def test_next_token_logits_are_the_last_position_of_the_last_n_ctx_tokens(model):
    tokens = torch.tensor([1, 2, 3, 4, 5, 6, 0, 1, 2])
    model.train()
    logits = next_token_logits(model, tokens)
    assert model.training, "the model's mode is restored"
    model.eval()
    with torch.no_grad():
        expected = model(tokens[None, -6:])[0, -1]
    torch.testing.assert_close(logits, expected)


def test_next_token_logits_rejects_a_batch(model):
    with pytest.raises(ValueError, match="tokens"):
        inspect.unwrap(next_token_logits)(model, torch.zeros(2, 3, dtype=torch.long))


# --- figures and the widget ---------------------------------------------------------------------------------------


def test_one_panel_and_a_grid_of_small_multiples():
    assert len(plot_sampling_distribution(LOGITS, LABELS, temperature=0.5, top_k=2).axes) == 1
    grid = plot_sampling_grid(LOGITS, LABELS, temperatures=(0.5, 1.0), n_shown=3)
    assert isinstance(grid, Figure) and len(grid.axes) == 2 * 3
    assert isinstance(plot_sampling_distribution(LOGITS, LABELS, temperature=0), Figure)  # greedy draws too


@pytest.mark.parametrize(
    ("labels", "kwargs", "argument"),
    [(LABELS[:3], {}, "labels"), (LABELS, {"n_shown": 0}, "n_shown")],
)
def test_figures_reject_bad_arguments(labels, kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        plot_sampling_distribution(LOGITS, labels, **kwargs)


def test_the_widget_draws_every_temperature_and_filter_for_the_browser():
    filters = (("no filter", None, None), ("top-k = 2", 2, None), ("top-p = 0.7", None, 0.7))
    widget = sampling_distribution_widget(LOGITS, LABELS, filters=filters, n_shown=4)
    controls, views = live_views(widget)
    filter_buttons, temperature = controls
    assert (filter_buttons.value, temperature.value) == ("no filter", 1.0)
    assert [value for _, value in temperature.options] == list(WIDGET_TEMPERATURES)
    assert len(views) == 3 * len(WIDGET_TEMPERATURES)
    pictures = {view.children[1].value for view in views.values()}
    assert len(pictures) == len(views)  # greedy too: its title names the selected filter
    assert view_label(views[(1, 0)]) == "filter = top-k = 2 · temperature = 0"
    assert 'alt="Plot: greedy (T = 0), top-k = 2' in views[(1, 0)].children[1].value


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [({"temperature": 0.7}, "temperature"), ({"filters": (("no filter", None, None),), "filter_name": "top-k = 9"}, "filter_name"),
     ({"filters": (("top-k = 5", 5, None),), "filter_name": "top-k = 5"}, "top_k"),
     ({"filters": (("top-p = 0", None, 0.0),), "filter_name": "top-p = 0"}, "top_p"), ({"filters": ()}, "filters")],
)
def test_the_widget_rejects_settings_its_controls_cannot_show(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        sampling_distribution_widget(LOGITS, LABELS, **kwargs)
