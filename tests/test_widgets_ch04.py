"""Chapter 04's attention-pattern widget: every head of the model drawn, switched in the browser."""

from __future__ import annotations

import pytest
import torch

from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.widgets._live import live_views, view_label
from tutorial_lib.widgets.attention_patterns import attention_pattern_widget, attention_patterns


@pytest.fixture(scope="module")
def model_and_text():
    torch.manual_seed(0)
    model = GPT(GPTConfig(d_vocab=65, n_ctx=16, d_model=16, n_heads=2, n_layers=3)).eval()
    text = "to be or not"
    return model, torch.randint(0, 65, (len(text),), generator=torch.Generator().manual_seed(1)), text


def test_the_attention_pattern_widget_draws_every_head_for_the_browser(model_and_text):
    model, tokens, text = model_and_text
    widget = attention_pattern_widget(model, tokens, text, layer=1, head=1)
    (layer, head), views = live_views(widget)
    assert (layer.value, head.value) == (1, 1) and len(views) == 3 * 2
    pictures = {view.children[1].value for view in views.values()}
    assert len(pictures) == len(views) and all('src="data:image/png;base64,' in p for p in pictures)  # each its own
    assert view_label(views[(2, 0)]) == "layer = 2 · head = 0"
    assert 'alt="Plot: layer 2, head 0 (x axis: key (what is read), y axis: query (who reads))"' in views[(2, 0)].children[1].value
    assert attention_patterns(model, tokens[None]).shape == (1, 3, 2, len(text), len(text))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"layer": 3}, r"layer must be an int in \[0, 2\]"),
    ({"head": -1}, r"head must be an int in \[0, 1\]"),
    ({"text": "to be"}, "tokens must be 1-D with one token per character"),
])
def test_the_attention_pattern_widget_refuses_bad_input(model_and_text, kwargs, message):
    model, tokens, text = model_and_text
    with pytest.raises(ValueError, match=message):
        attention_pattern_widget(model, tokens, **{"text": text, **kwargs})
