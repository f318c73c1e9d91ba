"""Choosing the next token: greedy, temperature, top-k, top-p, and ``generate`` with the KV cache (chapter 10).

Every function is pure and takes an optional ``torch.Generator``, so a seeded run is reproducible.
"""

from __future__ import annotations

import numbers

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn


def apply_temperature(logits: Float[Tensor, "batch d_vocab"], temperature: float) -> Float[Tensor, "batch d_vocab"]:
    """softmax(logits / T): T < 1 sharpens the distribution, T > 1 flattens it. Divide the *logits*, not the
    probabilities."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 here (0 means greedy: use argmax), got {temperature!r}")
    return logits / temperature


def top_k_filter(logits: Float[Tensor, "batch d_vocab"], top_k: int) -> Float[Tensor, "batch d_vocab"]:
    """Keep the ``top_k`` largest logits (and any tied with the k-th), set the rest to -inf."""
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:
        raise ValueError(f"top_k must be a positive int, got {top_k!r}")
    top_k = min(top_k, logits.shape[-1])
    kth_largest = torch.topk(logits, top_k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth_largest, float("-inf"))


def top_p_filter(logits: Float[Tensor, "batch d_vocab"], top_p: float) -> Float[Tensor, "batch d_vocab"]:
    """Nucleus sampling: keep the smallest set of most likely tokens whose probability reaches ``top_p``."""
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above each one
    drop_sorted = mass_before >= top_p  # the set already reached top_p without this token (the first is always kept)
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def sample_next_token(
    logits: Float[Tensor, "batch d_vocab"],
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Int[Tensor, " batch"]:
    """One token id per row. ``temperature=0`` is greedy (argmax, ``top_k``/``top_p`` irrelevant); otherwise the
    logits are divided by the temperature, filtered by top-k then top-p, and sampled."""
    if logits.dim() != 2:
        raise ValueError(f"logits must have shape (batch, d_vocab), got {tuple(logits.shape)}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = apply_temperature(logits.float(), temperature)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = torch.softmax(logits, dim=-1)
    if generator is not None and generator.device != probs.device:
        return torch.multinomial(probs.to(generator.device), 1, generator=generator).squeeze(-1).to(logits.device)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    model: nn.Module,
    tokens: Int[Tensor, "batch seq"],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> Int[Tensor, "batch new_seq"]:
    """Extend ``tokens`` by ``max_new_tokens`` sampled tokens; returns ``(batch, seq + max_new_tokens)``.

    ``model(tokens, cache=...)`` must return logits ``(batch, seq, d_vocab)`` and ``model.make_kv_cache(batch)`` an
    empty cache (as :class:`~tutorial_lib.models.gpt.GPT` does). Without the cache, every step re-reads the whole
    sequence; with it, only the new token. Past ``n_ctx`` the context slides (only the last ``n_ctx`` tokens are
    read); a cache cannot slide under learned positions, so it is then rebuilt. The same generator gives the same
    tokens either way. The model runs in eval mode (no dropout) and is put back in its previous mode.
    """
    if not isinstance(tokens, Tensor):
        raise ValueError(f"tokens must be an integer tensor of shape (batch, seq), got {type(tokens).__name__}: "
                         f"wrap a list in torch.tensor(...)")
    if tokens.dim() != 2 or tokens.shape[1] < 1:
        raise ValueError(f"tokens must have shape (batch, seq) with seq >= 1, got {tuple(tokens.shape)}")
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must hold integer token ids, got dtype {tokens.dtype}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a non-negative int, got {max_new_tokens!r}")
    n_ctx = model.cfg.n_ctx
    was_training = model.training
    model.eval()
    try:
        cache = model.make_kv_cache(tokens.shape[0], device=tokens.device) if use_cache else None
        feed = tokens[:, -n_ctx:]
        for _ in range(max_new_tokens):
            if cache is None:
                logits = model(tokens[:, -n_ctx:])[:, -1]
            else:
                if cache.length + feed.shape[1] > n_ctx:  # full: restart from the last n_ctx tokens
                    cache.reset()
                    feed = tokens[:, -n_ctx:]
                logits = model(feed, cache=cache)[:, -1]
            next_token = sample_next_token(logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
            feed = next_token[:, None]
    finally:
        model.train(was_training)
    return tokens
