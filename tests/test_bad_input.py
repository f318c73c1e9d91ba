"""Bad input to the public functions a learner calls: a ValueError that names the argument, before torch's own.

Integers may be Python's or NumPy's (``np.int64(5)``), never bools; a long argument is shortened in the message.
``normalise_dates`` refuses what its model cannot know: a year outside 1969-2068, a date the calendar lacks, a text
with no date.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tutorial_lib.attention import causal_mask, padding_mask, scaled_dot_product_attention, sliding_window_mask
from tutorial_lib.data.dates import DATE_FORMATS, date_text_problem, make_labelled_date_pairs
from tutorial_lib.efficient_attention import flash_attention
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.models.transformer import TransformerConfig
from tutorial_lib.sampling import generate, sample_next_token, top_k_filter
from tutorial_lib.tokenizers import BPETokenizer, CharTokenizer, pretokenize
from tutorial_lib.validation import check_non_negative_int, check_positive_int, shortened


@pytest.fixture(autouse=True)
def _as_a_notebook_calls_them(without_annotation_checks):
    """Notebooks run without the test run's annotation checks, which would refuse these inputs first."""
    with without_annotation_checks():
        yield


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


# --- the shared checks ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [5, np.int64(5), np.int32(5), torch.tensor(5).item()])
def test_integers_may_be_python_or_numpy_and_come_back_as_int(value):
    assert check_positive_int("n", value) == 5 and type(check_positive_int("n", value)) is int


@pytest.mark.parametrize(("value", "quoted"), [(True, "True"), (5.0, "5.0"), (0, "0"), (np.int64(-1), "-1"), ("5", "'5'"),
                                               (None, "None")])
def test_a_bad_integer_is_named_and_quoted(value, quoted):
    with pytest.raises(ValueError, match=rf"^n must be a positive int, got {quoted}$"):
        check_positive_int("n", value)


def test_non_negative_accepts_zero_and_long_values_are_shortened():
    assert check_non_negative_int("n", np.int64(0)) == 0
    text = shortened("x" * 1000)
    assert len(text) < 100 and text.endswith("(1002 characters)")


# --- attention --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    ((randn(6), randn(2, 6), randn(2, 6)), r"^q must have shape \(batch axes, positions, features\), at least 2-D"),
    ((randn(2, 3, 4), randn(3, 5, 4), randn(3, 5, 4)), r"^the batch axes of q, k and v do not broadcast"),
    ((randn(3, 4), randn(5, 6), randn(5, 6)), r"^k's last axis \(d_head\) must equal q's"),
    ((randn(3, 4), randn(5, 4), randn(6, 4)), r"^v must have one row per key"),
    ((randn(3, 4).long(), randn(5, 4), randn(5, 4)), r"^q must be a floating-point tensor"),
    ((randn(3, 4), randn(5, 4).double(), randn(5, 4)), r"^q, k and v must share one dtype"),
    ((randn(3, 4).numpy(), randn(5, 4), randn(5, 4)), r"^q must be a tensor, got ndarray"),
    ((randn(3, 4), randn(5, 4), randn(5, 4), torch.ones(3, 5)), r"^mask must be a bool tensor"),
    ((randn(3, 4), randn(5, 4), randn(5, 4), torch.ones(5, 3, dtype=torch.bool)), r"^mask must broadcast to the scores"),
])
def test_attention_names_the_argument_that_is_wrong(args, message):
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(*args)


def test_masks_take_numpy_integers_and_lists_of_lengths():
    assert torch.equal(causal_mask(np.int64(4)), causal_mask(4))
    assert torch.equal(sliding_window_mask(np.int64(5), np.int32(2)), sliding_window_mask(5, 2))
    assert torch.equal(padding_mask([2, 3], 5), padding_mask(torch.tensor([2, 3]), 5))
    assert torch.equal(padding_mask(torch.tensor([2, 3]), np.int64(5)), padding_mask(torch.tensor([2, 3]), 5))
    with pytest.raises(ValueError, match=r"^lengths must be a 1-D integer tensor or list .* got \[True, 3\]"):
        padding_mask([True, 3], 5)
    with pytest.raises(ValueError, match=r"^lengths must lie in \[0, seq_len=5\], got \[2, 6\]"):
        padding_mask([2, 6], 5)
    with pytest.raises(ValueError, match=r"^seq_len must be a positive int, got 5.0"):
        causal_mask(5.0)
    with pytest.raises(ValueError, match=r"^block_size must be a positive int, got 0"):
        flash_attention(randn(1, 4, 8), randn(1, 4, 8), randn(1, 4, 8), block_size=0)


def test_configs_store_numpy_integers_as_int():
    cfg = TransformerConfig(d_vocab=np.int64(10), n_ctx=8, d_model=8, n_heads=2, n_layers=1, d_ff=np.int64(16))
    assert type(cfg.d_vocab) is int and type(cfg.d_ff) is int


# --- sampling -----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(d_vocab=10, n_ctx=8, d_model=8, n_heads=2, n_layers=1))


@pytest.mark.parametrize(("call", "message"), [
    (lambda m: generate(m, [[1, 2]], 3), r"^tokens must be an integer tensor of shape \(batch, seq\), got \[\[1, 2\]\]"),
    (lambda m: generate(m, torch.tensor([1, 2]), 3), r"^tokens must have shape \(batch, seq\)"),
    (lambda m: generate(m, torch.tensor([[1, 12]]), 3), r"^tokens must hold ids in \[0, d_vocab=10\)"),
    (lambda m: generate(m, torch.tensor([[1.0]]), 3), r"^tokens must hold integer token ids"),
    (lambda m: generate(m, torch.tensor([[1]]), -1), r"^max_new_tokens must be a non-negative int, got -1"),
    (lambda m: generate(None, torch.tensor([[1]]), 3), r"^model must be a language model"),
    (lambda m: generate(m, torch.tensor([[1]]), 3, temperature="hot"), r"^temperature must be a number, got 'hot'"),
    (lambda m: generate(m, torch.tensor([[1]]), 3, top_k=0), r"^top_k must be a positive int, got 0"),
    (lambda m: generate(m, torch.tensor([[1]]), 3, generator=0), r"^generator must be a torch.Generator or None"),
    (lambda m: sample_next_token(torch.zeros(3)), r"^logits must be a floating-point tensor of shape \(batch, d_vocab\)"),
])
def test_generate_names_the_argument_that_is_wrong(model, call, message):
    with pytest.raises(ValueError, match=message):
        call(model)


def test_generate_takes_numpy_integers(model):
    tokens = torch.tensor([[1, 2]])
    out = generate(model, tokens, np.int64(3), top_k=np.int64(2), generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 5)
    assert torch.equal(top_k_filter(torch.zeros(1, 4), np.int64(2)), top_k_filter(torch.zeros(1, 4), 2))


# --- tokenizers ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tokenizer", [CharTokenizer.from_text("abc"), BPETokenizer()], ids=["char", "bpe"])
def test_tokenizers_name_bad_text_and_bad_ids(tokenizer):
    with pytest.raises(ValueError, match=r"^text must be a string, got None$"):
        tokenizer.encode(None)
    with pytest.raises(ValueError, match=r"^ids must be a list or 1-D tensor of token ids, got None$"):
        tokenizer.decode(None)
    with pytest.raises(ValueError, match=r"^ids must be a list or 1-D tensor of token ids, got 'ab'$"):
        tokenizer.decode("ab")
    with pytest.raises(ValueError, match=r"^ids must lie in \[0, d_vocab=\d+\), got 9999 at position 1$"):
        tokenizer.decode([0, 9999])
    assert tokenizer.decode(np.array([0, 1])) == tokenizer.decode([0, 1]) == tokenizer.decode([np.int64(0), 1])
    with pytest.raises(ValueError, match=r"^text must be a string"):
        pretokenize(b"bytes")


# --- normalise_dates ------------------------------------------------------------------------------------------------------


def test_every_format_of_the_task_is_read_as_its_date():
    pairs = make_labelled_date_pairs(3000, seed=7)
    assert {name for _, _, name in pairs} == set(DATE_FORMATS)
    assert [source for source, _, _ in pairs if date_text_problem(source) is not None] == []


@pytest.mark.parametrize(("text", "reason"), [
    ("3 March 2150", "its year 2150 lies outside the dates the model learned (1969-2068)"),
    ("3/3/1492", "its year 1492 lies outside the dates the model learned (1969-2068)"),
    ("31 February 1997", "it is not a date of the calendar (day is out of range for month)"),
    ("29.02.2001", "it is not a date of the calendar (day is out of range for month)"),
    ("13/01/97", "it is not a date of the calendar (month must be in 1..12)"),
    ("hello there", "it names no date the model can read (a day, a month and a year)"),
    ("March 3", "it names no date the model can read (a day, a month and a year)"),
])
def test_dates_the_model_cannot_know_are_refused_with_the_reason(text, reason):
    assert date_text_problem(text) == reason


def test_normalise_dates_refuses_before_decoding():
    from tutorial_lib.recipes.date_transformer import DATE_TRANSFORMER_CONFIG, normalise_dates
    from tutorial_lib.models.transformer import Transformer

    model = Transformer(DATE_TRANSFORMER_CONFIG)
    for text, reason in [("3 March 2150", "year 2150 lies outside"), ("31 February 1997", "not a date of the calendar"),
                         ("hello there", "names no date")]:
        with pytest.raises(ValueError, match=rf"^texts\[1\] = {text!r} cannot be normalised: .*{reason}"):
            normalise_dates(model, ["3 March 1997", text])
    with pytest.raises(ValueError, match=r"^texts\[0\] = '1{65}… \(202 characters\) holds characters|^texts\[0\] = .*characters"):
        normalise_dates(model, ["1" * 200])
    with pytest.raises(ValueError, match=r"^beam_width must be a positive int, got 0"):
        normalise_dates(model, ["3 March 1997"], beam_width=0)


@pytest.mark.parametrize("shapes", [((2, 3), (3,)), ((2, 1), (1, 4)), ((2, 3), (4,)), ((), (5,)), ((1,), ()),
                                    ((2, 0), (1,)), ((2, 0), (3,)), ((4, 1, 3), (5, 1), (1,))])
def test_the_attention_checks_broadcast_as_torch_does(shapes):
    from tutorial_lib.validation import broadcast_shapes

    try:
        expected = tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:
        expected = None
    assert broadcast_shapes(*shapes) == expected
