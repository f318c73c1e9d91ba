"""Sampling: greedy, temperature, top-k, top-p checked by their statistics over many seeded draws; ``generate``."""

from __future__ import annotations

import inspect

import pytest
import torch

from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.sampling import apply_temperature, generate, sample_next_token, top_k_filter, top_p_filter

N_DRAWS = 20_000
# Largest error of an empirical frequency over N_DRAWS draws: its standard error is at most √(0.25 / 20,000) ≈ 0.0035,
# so 0.015 is > 4 standard errors (the seeded draws are fixed anyway); every wrong variant tested differs by > 0.05.
FREQ_TOL = 0.015


def frequencies(logits: torch.Tensor, seed: int = 0, **kwargs) -> torch.Tensor:
    """Empirical distribution of ``N_DRAWS`` draws from one row of logits (drawn as one big batch)."""
    generator = torch.Generator().manual_seed(seed)
    draws = sample_next_token(logits.expand(N_DRAWS, -1).contiguous(), generator=generator, **kwargs)
    return torch.bincount(draws, minlength=logits.shape[-1]).float() / N_DRAWS


def assert_frequencies(observed: torch.Tensor, expected: torch.Tensor) -> None:
    error = (observed - expected).abs().max().item()
    assert error < FREQ_TOL, f"frequencies {observed.tolist()} vs expected {expected.tolist()} (max error {error:.4f})"


LOGITS = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]])


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_temperature_frequencies_match_softmax_of_scaled_logits(temperature):
    assert_frequencies(frequencies(LOGITS, temperature=temperature), torch.softmax(LOGITS[0] / temperature, dim=-1))


def test_temperature_zero_is_exactly_argmax():
    logits = torch.randn(16, 50)
    greedy = sample_next_token(logits, temperature=0.0, top_k=3, top_p=0.1)
    assert torch.equal(greedy, logits.argmax(dim=-1))


def test_integer_temperature_is_accepted():
    """``temperature=0`` (an int) is the documented greedy call; the ``float`` annotation must not reject it in the
    type-checked test run (beartype accepts an int for a float only with ``is_pep484_tower=True``, set in pyproject)."""
    logits = torch.randn(4, 10)
    assert torch.equal(sample_next_token(logits, temperature=0), logits.argmax(dim=-1))


def test_apply_temperature_divides_the_logits():
    torch.testing.assert_close(apply_temperature(LOGITS, 0.5), LOGITS * 2, atol=0.0, rtol=0.0)


def test_top_k_never_samples_outside_the_top_k_and_renormalises():
    logits = torch.randn(1, 10)
    top3 = logits[0].topk(3).indices
    observed = frequencies(logits, top_k=3)
    assert observed[top3].sum().item() == 1.0, "a token outside the top 3 was sampled"
    expected = torch.zeros(10)
    expected[top3] = torch.softmax(logits[0, top3], dim=-1)
    assert_frequencies(observed, expected)


def test_top_k_keeps_every_token_tied_with_the_kth():
    logits = torch.tensor([[2.0, 1.0, 1.0, 0.0]])
    assert torch.isfinite(top_k_filter(logits, 2)).tolist() == [[True, True, True, False]]
    assert_frequencies(frequencies(logits, top_k=2), torch.softmax(torch.tensor([2.0, 1.0, 1.0, -torch.inf]), dim=-1))


def test_top_k_larger_than_the_vocabulary_keeps_everything():
    assert torch.equal(top_k_filter(LOGITS, 100), LOGITS)


PROBS = torch.tensor([[0.5, 0.3, 0.15, 0.05]])


@pytest.mark.parametrize(
    "top_p, kept",
    [
        # ±1e-4 around the cumulative sums 0.5 and 0.8: exactly at them, float rounding of softmax(log p) decides.
        (0.5 - 1e-4, [1, 0, 0, 0]),
        (0.5 + 1e-4, [1, 1, 0, 0]),
        (0.8 - 1e-4, [1, 1, 0, 0]),
        (0.8 + 1e-4, [1, 1, 1, 0]),
        (0.81, [1, 1, 1, 0]),
        (0.2, [1, 0, 0, 0]),  # the most likely token is always kept
        (1.0, [1, 1, 1, 1]),
    ],
)
def test_top_p_keeps_the_smallest_nucleus(top_p, kept):
    assert torch.isfinite(top_p_filter(PROBS.log(), top_p)).int().tolist() == [kept]


@pytest.mark.parametrize("n_vocab, top_p, n_kept", [(4, 0.5, 2), (8, 0.375, 3), (8, 0.125, 1), (8, 0.5 + 1e-6, 5)])
def test_top_p_at_an_exact_boundary(n_vocab, top_p, n_kept):
    """Uniform logits give probabilities 1/n_vocab exactly, and sums of them are exact in float: a nucleus that
    reaches top_p exactly is complete (keeping one more token is the off-by-one)."""
    assert torch.isfinite(top_p_filter(torch.zeros(1, n_vocab), top_p)).sum().item() == n_kept


def test_top_p_frequencies_match_the_renormalised_nucleus():
    observed = frequencies(PROBS.log(), top_p=0.81)
    assert_frequencies(observed, torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95)
    assert observed[3] == 0


def test_top_p_applies_to_the_distribution_left_by_top_k():
    """top-k first, then top-p on the renormalised survivors: 0.4 / 0.7 ≥ 0.5, so only the first token stays."""
    logits = torch.tensor([[0.4, 0.3, 0.2, 0.1]]).log()
    assert frequencies(logits, top_k=2, top_p=0.5)[0].item() == 1.0


def test_the_same_generator_gives_the_same_samples():
    logits = torch.randn(64, 30)
    first = sample_next_token(logits, top_k=10, generator=torch.Generator().manual_seed(7))
    again = sample_next_token(logits, top_k=10, generator=torch.Generator().manual_seed(7))
    other = sample_next_token(logits, top_k=10, generator=torch.Generator().manual_seed(8))
    assert torch.equal(first, again) and not torch.equal(first, other)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"temperature": -1.0}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
    ],
)
def test_bad_arguments(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        sample_next_token(torch.randn(2, 5), **kwargs)


def test_one_dimensional_logits_are_rejected():
    # Unwrapped: as a notebook calls it (the test run's jaxtyping hook would reject the shape first, also naming logits).
    with pytest.raises(ValueError, match=r"logits must be a floating-point tensor of shape \(batch, d_vocab\), got shape \(5,\)"):
        inspect.unwrap(sample_next_token)(torch.randn(5))


# ------------------------------------------------------------------------------ generate


@pytest.fixture(scope="module")
def model() -> GPT:
    """A GPT whose next token depends strongly on the context: at GPT-2's initial scale (std 0.02) the logits are
    nearly those of the last token alone, and a cache that lost the past would go unnoticed."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(d_vocab=20, n_ctx=8, d_model=32, n_heads=4, n_layers=2, dropout=0.1))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    return model


PROMPT = torch.tensor([[1, 2, 3], [4, 5, 6]])


@pytest.mark.parametrize(
    "kwargs", [{"temperature": 0.0}, {"temperature": 1.0}, {"temperature": 0.8, "top_k": 5}, {"top_p": 0.9}]
)
def test_generate_cached_equals_uncached_past_n_ctx(model, kwargs):
    outputs = [
        generate(model, PROMPT, 12, generator=torch.Generator().manual_seed(3), use_cache=use_cache, **kwargs)
        for use_cache in (True, False)
    ]
    assert outputs[0].shape == (2, 3 + 12)  # 15 tokens from a context of 8: the window slides
    assert torch.equal(outputs[0][:, :3], PROMPT)
    assert torch.equal(outputs[0], outputs[1])


def test_greedy_generate_equals_a_plain_argmax_loop(model):
    model.eval()
    tokens = PROMPT
    with torch.no_grad():
        for _ in range(10):
            next_token = model(tokens[:, -model.cfg.n_ctx :])[:, -1].argmax(dim=-1)
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
    assert torch.equal(generate(model, PROMPT, 10, temperature=0.0), tokens)


@pytest.mark.parametrize("training", [True, False])
def test_generate_runs_in_eval_mode_and_restores_the_mode(model, training):
    model.train(training)
    sampled = generate(model, PROMPT, 5, generator=torch.Generator().manual_seed(1))
    assert model.training is training
    model.eval()
    assert torch.equal(sampled, generate(model, PROMPT, 5, generator=torch.Generator().manual_seed(1))), "no dropout"


def test_generate_zero_new_tokens(model):
    assert torch.equal(generate(model, PROMPT, 0), PROMPT)


@pytest.mark.parametrize(
    "tokens, max_new_tokens, argument",
    [(PROMPT, -1, "max_new_tokens"), (torch.zeros(2, 0, dtype=torch.long), 3, "tokens")],
)
def test_generate_bad_arguments(model, tokens, max_new_tokens, argument):
    with pytest.raises(ValueError, match=argument):
        generate(model, tokens, max_new_tokens)


def test_generate_names_a_list_a_float_tensor_and_takes_numpy_integers(model):
    np = pytest.importorskip("numpy")
    run = inspect.unwrap(generate)
    with pytest.raises(ValueError, match=r"tokens must be an integer tensor of shape \(batch, seq\), got \[\[1, 2\]\]: wrap"):
        run(model, [[1, 2]], 3)
    with pytest.raises(ValueError, match="tokens must hold integer token ids, got dtype torch.float32"):
        run(model, PROMPT.float(), 3)
    same_draws = (torch.Generator().manual_seed(0), torch.Generator().manual_seed(0))
    assert torch.equal(run(model, PROMPT, np.int64(2), generator=same_draws[0]),
                       generate(model, PROMPT, 2, generator=same_draws[1]))
    logits = torch.arange(5.0)[None]
    assert torch.equal(inspect.unwrap(top_k_filter)(logits, np.int64(2)), top_k_filter(logits, 2))
