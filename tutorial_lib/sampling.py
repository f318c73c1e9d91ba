"""Choosing the next token: greedy, temperature, top-k, top-p, and ``generate`` with the KV cache (chapter 10).

Every function is pure and takes an optional ``torch.Generator``, so a seeded run is reproducible.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from tutorial_lib.validation import check_non_negative_int, check_positive_int, check_real, shortened


def apply_temperature(logits: Float[Tensor, "batch d_vocab"], temperature: float) -> Float[Tensor, "batch d_vocab"]:
    """softmax(logits / T): T < 1 sharpens the distribution, T > 1 flattens it. Divide the *logits*, not the
    probabilities."""
    if not check_real("temperature", temperature) > 0:
        raise ValueError(f"temperature must be > 0 here (0 means greedy: use argmax), got {temperature!r}")
    return logits / temperature


def top_k_filter(logits: Float[Tensor, "batch d_vocab"], top_k: int) -> Float[Tensor, "batch d_vocab"]:
    """Keep the ``top_k`` largest logits (and any tied with the k-th), set the rest to -inf."""
    top_k = min(check_positive_int("top_k", top_k), logits.shape[-1])
    kth_largest = torch.topk(logits, top_k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth_largest, float("-inf"))


def top_p_filter(logits: Float[Tensor, "batch d_vocab"], top_p: float) -> Float[Tensor, "batch d_vocab"]:
    """Nucleus sampling: keep the smallest set of most likely tokens whose probability reaches ``top_p``."""
    if not 0.0 < check_real("top_p", top_p) <= 1.0:
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
    if not isinstance(logits, Tensor) or logits.dim() != 2 or not logits.dtype.is_floating_point:
        got = f"shape {tuple(logits.shape)} and dtype {logits.dtype}" if isinstance(logits, Tensor) else shortened(logits)
        raise ValueError(f"logits must be a floating-point tensor of shape (batch, d_vocab), got {got}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or None, got {shortened(generator)}")
    if check_real("temperature", temperature) < 0:
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
    if not isinstance(model, nn.Module) or not isinstance(getattr(getattr(model, "cfg", None), "n_ctx", None), int):
        raise ValueError(f"model must be a language model (an nn.Module whose cfg gives n_ctx, such as GPT), got "
                         f"{shortened(model)}")
    if not isinstance(tokens, Tensor):
        raise ValueError(f"tokens must be an integer tensor of shape (batch, seq), got {shortened(tokens)}: "
                         f"wrap a list of lists in torch.tensor(...)")
    if tokens.dim() != 2 or tokens.shape[1] < 1:
        raise ValueError(f"tokens must have shape (batch, seq) with seq >= 1, got {tuple(tokens.shape)}")
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must hold integer token ids, got dtype {tokens.dtype}")
    d_vocab = getattr(model.cfg, "d_vocab", None)
    if isinstance(d_vocab, int) and tokens.numel() and (tokens.min() < 0 or tokens.max() >= d_vocab):
        raise ValueError(f"tokens must hold ids in [0, d_vocab={d_vocab}), got ids from {tokens.min().item()} to "
                         f"{tokens.max().item()}")
    max_new_tokens = check_non_negative_int("max_new_tokens", max_new_tokens)
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
