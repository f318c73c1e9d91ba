"""Turning a sequence-to-sequence model into outputs: greedy decoding and beam search (chapter 07, §6.1).

Greedy decoding takes the most likely token at every step. Beam search keeps the ``beam_size`` most likely
prefixes instead, and ranks the finished hypotheses by GNMT's length-normalised score (Wu et al. 2016)

    s(Y) = log P(Y | X) / lp(Y),    lp(Y) = ((5 + |Y|) / 6)^α,

because log P only falls as a hypothesis grows, so without it the search prefers short outputs. §6.1 uses a beam
of 4 and α = 0.6. Here |Y| counts the generated tokens, EOS included, BOS not.

:func:`beam_search` knows nothing about the model: it calls ``log_probs_fn(prefixes)`` for the next-token
log-probabilities of each prefix; :func:`transformer_log_probs_fn` builds that function for a :class:`Transformer`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from tutorial_lib.attention import padding_mask
from tutorial_lib.models.transformer import Transformer

LogProbsFn = Callable[[Tensor], Tensor]  # prefixes (beam, t) -> next-token log-probabilities (beam, d_vocab)


@torch.no_grad()
def greedy_decode(
    model: Transformer,
    src: Int[Tensor, "batch key_pos"],
    *,
    bos: int,
    eos: int,
    max_len: int,
    src_lengths: Int[Tensor, " batch"] | None = None,
    pad: int | None = None,
    use_cache: bool = True,
) -> Int[Tensor, "batch seq"]:
    """The most likely next token, again and again, for a batch of (padded) sources.

    Returns the generated tokens (BOS not included), at most ``max_len`` per row; a row that has produced ``eos``
    is finished and filled with ``pad`` (default ``eos``) until every row is finished or ``max_len`` is reached.
    ``use_cache=True`` feeds the decoder one new token per step and keeps the earlier keys and values in a KV cache;
    ``False`` re-reads the whole prefix every step. Both give the same tokens. The model runs in eval mode.
    """
    tgt_vocab = model.cfg.tgt_vocab
    pad = eos if pad is None else pad
    for name, value in (("bos", bos), ("eos", eos), ("pad", pad)):
        _check_token_id(name, value, tgt_vocab)
    _check_max_len(max_len, model.cfg.n_ctx)
    if src.dim() != 2:
        raise ValueError(f"src must have shape (batch, seq), got {tuple(src.shape)}")
    batch = src.shape[0]
    if src_lengths is not None and src_lengths.shape != (batch,):
        raise ValueError(f"src_lengths must have shape (batch,) = ({batch},), got {tuple(src_lengths.shape)}")
    with eval_mode(model):
        src_mask = None if src_lengths is None else padding_mask(src_lengths, src.shape[1])
        memory = model.encode(src, src_mask)  # once: the source does not change while we decode
        tokens = torch.full((batch, 1), bos, dtype=torch.long, device=src.device)
        done = torch.zeros(batch, dtype=torch.bool, device=src.device)
        cache = model.make_kv_cache(batch, device=src.device) if use_cache else None
        for _ in range(max_len):
            feed = tokens if cache is None else tokens[:, -1:]  # with the cache, only the newest token is new
            logits = model.decode(feed, memory, src_mask, cache=cache)[:, -1]
            next_token = logits.argmax(dim=-1).masked_fill(done, pad)
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
            done |= next_token == eos
            if done.all():
                break
    return tokens[:, 1:]


@dataclass(frozen=True)
class Hypothesis:
    """One output of beam search: the generated ``tokens`` (BOS excluded; ending in EOS unless cut at ``max_len``),
    their ``log_prob`` = log P(Y | X) and ``score`` = log_prob / lp(Y), by which hypotheses are ranked."""

    tokens: list[int]
    log_prob: float
    score: float


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^α; 1 for a one-token output, and for every length when α = 0."""
    return ((5 + length) / 6) ** alpha


def beam_search(
    log_probs_fn: LogProbsFn,
    *,
    bos: int,
    eos: int,
    max_len: int,
    beam_size: int = 4,
    alpha: float = 0.6,
    n_best: int = 1,
    device: torch.device | str | None = None,
    refill: bool = False,
) -> list[Hypothesis]:
    """Beam search for one source; returns the ``n_best`` hypotheses with the highest score, best first.

    Each step extends every prefix in the beam by every token and keeps the ``beam_size`` extensions of highest
    log-probability. An extension that ends in ``eos``, or reaches ``max_len`` tokens, is finished: it is set
    aside with its length-normalised score and leaves the beam, so the next step extends fewer prefixes. The
    search stops when the beam is empty, at ``max_len``, or as soon as no prefix left in the beam can beat the
    ``n_best``-th finished hypothesis (its log-probability can only fall, and its lp is at most lp(max_len)), which
    never changes the result. ``beam_size=1`` is greedy decoding.

    ``refill=True`` keeps ``beam_size`` unfinished prefixes at every step instead, as Tensor2Tensor's beam search
    (the paper's code) does: each step takes the ``2 · beam_size`` best extensions, sets aside those that end, and
    refills the beam with the best of the others. A beam of 1 is then no longer greedy decoding.
    """
    _check_beam_args(bos, eos, max_len, beam_size, n_best, alpha)
    prefixes = torch.tensor([[bos]], dtype=torch.long, device=device)  # (beam, t): the beam, each BOS first
    log_p = torch.zeros(1, device=device)  # (beam,): log P of each prefix
    finished: list[Hypothesis] = []
    for length in range(1, max_len + 1):
        step_log_probs = _checked_log_probs(log_probs_fn(prefixes), len(prefixes), eos)
        candidates = log_p[:, None] + step_log_probs.to(log_p.device)  # log P of every one-token extension
        d_vocab = candidates.shape[1]
        width = 2 * beam_size if refill else beam_size  # at most beam_size of 2 · beam_size end: the rest refill
        top_log_p, flat_index = candidates.flatten().topk(min(width, candidates.numel()))
        possible = top_log_p > float("-inf")  # an impossible token (probability 0) is never an extension
        top_log_p, flat_index = top_log_p[possible], flat_index[possible]
        parent, token = flat_index // d_vocab, flat_index % d_vocab
        extended = torch.cat([prefixes[parent], token[:, None]], dim=1)
        ends = (token == eos) | (length == max_len)
        for row in ends.nonzero().flatten().tolist():
            lp = top_log_p[row].item()
            finished.append(Hypothesis(extended[row, 1:].tolist(), lp, lp / length_penalty(length, alpha)))
        alive = (~ends).nonzero().flatten()[:beam_size]  # all of them without refill: at most beam_size were kept
        prefixes, log_p = extended[alive], top_log_p[alive]
        finished.sort(key=lambda h: h.score, reverse=True)
        if len(prefixes) == 0:
            break
        best_possible = log_p.max().item() / length_penalty(max_len, alpha)
        if len(finished) >= n_best and finished[n_best - 1].score >= best_possible:
            break
    return finished[:n_best]


BatchLogProbsFn = Callable[[Tensor, Tensor], Tensor]  # (prefixes (n, t), owners (n,)) -> log-probabilities (n, d_vocab)


def beam_search_batch(
    log_probs_fn: BatchLogProbsFn,
    n_sources: int,
    *,
    bos: int,
    eos: int,
    max_len: int,
    beam_size: int = 4,
    alpha: float = 0.6,
    n_best: int = 1,
    device: torch.device | str | None = None,
) -> list[list[Hypothesis]]:
    """:func:`beam_search` for ``n_sources`` sources at once, the same search step for step: the fast path.

    ``log_probs_fn(prefixes, owners)`` returns the next-token log-probabilities of every prefix, where ``owners[i]``
    is the index of the source prefix ``i`` belongs to. The beams live side by side in ``(n_sources, beam_size)``
    slots, a slot whose prefix has finished or was never filled holding log-probability -inf; each step makes one
    call for every live prefix of every source. Returns each source's ``n_best`` hypotheses, best first, as
    :func:`beam_search` would (tests check that they agree).
    """
    _check_beam_args(bos, eos, max_len, beam_size, n_best, alpha)
    if isinstance(n_sources, bool) or not isinstance(n_sources, int) or n_sources < 1:
        raise ValueError(f"n_sources must be a positive int, got {n_sources!r}")
    prefixes = torch.full((n_sources, beam_size, 1), bos, dtype=torch.long, device=device)
    log_p = torch.full((n_sources, beam_size), float("-inf"), device=device)
    log_p[:, 0] = 0.0  # one live prefix per source to start: BOS
    finished: list[list[Hypothesis]] = [[] for _ in range(n_sources)]
    for length in range(1, max_len + 1):
        live = log_p > float("-inf")
        owners, slots = live.nonzero(as_tuple=True)
        step_log_probs = _checked_log_probs(log_probs_fn(prefixes[owners, slots], owners), len(owners), eos)
        d_vocab = step_log_probs.shape[1]
        candidates = torch.full((n_sources, beam_size, d_vocab), float("-inf"), device=log_p.device)
        candidates[owners, slots] = log_p[owners, slots, None] + step_log_probs.to(log_p.device)
        top_log_p, flat_index = candidates.flatten(1).topk(beam_size, dim=1)  # (n_sources, beam_size), best first
        parent, token = flat_index // d_vocab, flat_index % d_vocab
        extended = torch.cat([prefixes.gather(1, parent[..., None].expand_as(prefixes)), token[..., None]], dim=2)
        possible = top_log_p > float("-inf")
        ends = possible & ((token == eos) | (length == max_len))
        for source, rank in ends.nonzero().tolist():  # in rank order within each source, as beam_search appends
            lp = top_log_p[source, rank].item()
            finished[source].append(Hypothesis(extended[source, rank, 1:].tolist(), lp, lp / length_penalty(length, alpha)))
        keep = possible & ~ends
        # The kept extensions move to the first slots, in rank order (a stable sort), like beam_search's extended[~ends].
        order = (~keep).to(torch.int8).argsort(dim=1, stable=True)
        prefixes = extended.gather(1, order[..., None].expand_as(extended))
        log_p = top_log_p.gather(1, order).masked_fill(~keep.gather(1, order), float("-inf"))
        best_possible = log_p.max(dim=1).values / length_penalty(max_len, alpha)
        for source in range(n_sources):
            finished[source].sort(key=lambda h: h.score, reverse=True)
            done = len(finished[source]) >= n_best and finished[source][n_best - 1].score >= best_possible[source].item()
            if done:
                log_p[source] = float("-inf")
        if not (log_p > float("-inf")).any():
            break
    return [hypotheses[:n_best] for hypotheses in finished]


def transformer_log_probs_fn(
    model: Transformer, src: Int[Tensor, " key_pos"]
) -> Callable[[Int[Tensor, "beam seq"]], Float[Tensor, "beam d_vocab"]]:
    """The step function of :func:`beam_search` for one source sentence ``src`` (no padding).

    The source is encoded once; each call decodes every prefix in full (no KV cache: the beam reorders and shrinks
    its prefixes between steps) and returns the last position's log-softmax. The model runs in eval mode.
    """
    if src.dim() != 1 or src.shape[0] < 1:
        raise ValueError(f"src must be one unpadded sentence of shape (key_pos,), got {tuple(src.shape)}")
    with eval_mode(model), torch.no_grad():
        memory = model.encode(src[None])

    def log_probs_fn(prefixes: Int[Tensor, "beam seq"]) -> Float[Tensor, "beam d_vocab"]:
        with eval_mode(model), torch.no_grad():
            logits = model.decode(prefixes, memory.expand(prefixes.shape[0], -1, -1))[:, -1]
        return torch.log_softmax(logits, dim=-1)

    return log_probs_fn


def transformer_batch_log_probs_fn(
    model: Transformer, src: Int[Tensor, "batch key_pos"], src_lengths: Int[Tensor, " batch"] | None = None
) -> BatchLogProbsFn:
    """The step function of :func:`beam_search_batch` for a batch of (right-padded) sources.

    The sources are encoded once; each call decodes every prefix in full against its own source's memory and
    padding mask, and returns the last position's log-softmax. The model runs in eval mode.
    """
    if src.dim() != 2:
        raise ValueError(f"src must have shape (batch, key_pos), got {tuple(src.shape)}")
    if src_lengths is not None and src_lengths.shape != (src.shape[0],):
        raise ValueError(f"src_lengths must have shape (batch,) = ({src.shape[0]},), got {tuple(src_lengths.shape)}")
    src_mask = None if src_lengths is None else padding_mask(src_lengths, src.shape[1])
    with eval_mode(model), torch.no_grad():
        memory = model.encode(src, src_mask)

    def log_probs_fn(prefixes: Int[Tensor, "n seq"], owners: Int[Tensor, " n"]) -> Float[Tensor, "n d_vocab"]:
        mask = None if src_mask is None else src_mask[owners]
        with eval_mode(model), torch.no_grad():
            logits = model.decode(prefixes, memory[owners], mask)[:, -1]
        return torch.log_softmax(logits, dim=-1)

    return log_probs_fn


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Run ``model`` in eval mode (no dropout) and put it back in the mode it was in."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def _checked_log_probs(step_log_probs: Tensor, n_prefixes: int, eos: int) -> Tensor:
    if step_log_probs.dim() != 2 or step_log_probs.shape[0] != n_prefixes:
        raise ValueError(
            f"log_probs_fn must return shape (n_prefixes={n_prefixes}, d_vocab), got {tuple(step_log_probs.shape)}"
        )
    if eos >= step_log_probs.shape[1]:
        raise ValueError(f"eos must be a token id in [0, d_vocab={step_log_probs.shape[1]}), got {eos}")
    total = torch.logsumexp(step_log_probs.double(), dim=-1)
    if not torch.allclose(total, torch.zeros_like(total), atol=1e-3):
        raise ValueError("log_probs_fn must return log-probabilities (each row's logsumexp is 0): apply log_softmax to logits")
    return step_log_probs


def _check_beam_args(bos: object, eos: object, max_len: object, beam_size: object, n_best: object, alpha: float) -> None:
    for name, value in (("bos", bos), ("eos", eos)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative int (a token id), got {value!r}")
    for name, value in (("max_len", max_len), ("beam_size", beam_size), ("n_best", n_best)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if n_best > beam_size:
        raise ValueError(f"n_best={n_best} must be <= beam_size={beam_size}")
    if not (alpha >= 0 and math.isfinite(alpha)):
        raise ValueError(f"alpha must be a finite number >= 0 (0: no length penalty; §6.1 uses 0.6), got {alpha!r}")


def _check_token_id(name: str, value: object, d_vocab: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < d_vocab:
        raise ValueError(f"{name} must be a token id in [0, tgt_vocab={d_vocab}), got {value!r}")


def _check_max_len(max_len: object, n_ctx: int) -> None:
    if isinstance(max_len, bool) or not isinstance(max_len, int) or not 1 <= max_len <= n_ctx:
        raise ValueError(f"max_len must be an int in [1, n_ctx={n_ctx}], got {max_len!r}")
