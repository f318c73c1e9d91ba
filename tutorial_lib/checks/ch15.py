"""Chapter 15's exercises: a ring all-reduce, the indices a ``DistributedSampler`` gives each rank, and gradient
accumulation under DDP's ``no_sync``.

- ``15.ring_all_reduce`` is one rank's program, run for ``N`` simulated ranks at once (:func:`simulate_ranks`, a
  thread each): it sees its own tensor only and reaches the others through ``send(to_rank, tensor)`` and
  ``recv(from_rank)``, and returns what it holds after the ring's reduce-scatter and all-gather, the mean of all the
  tensors. The check looks at the messages as well as the result: 2(N - 1) per rank, each one chunk, each to the right
  neighbour. The cases have 2, 3 and 4 ranks and lengths that no rank count divides: averaging at every hop, or sending
  the wrong chunk, only shows with more than 2 ranks.
- ``15.rank_indices`` is PyTorch's own ``DistributedSampler`` (shuffle on, ``drop_last`` off) after ``set_epoch``:
  one permutation drawn from ``seed + epoch``, padded with its first indices to a multiple of ``world_size``, and every
  ``world_size``-th index from position ``rank``. The reference *is* the sampler, code nobody here wrote.
- ``15.accumulate_gradients`` (the build) is one whole update of a data-parallel rank: a tiny GPT (float64) wrapped in
  a stand-in for DDP that records, at each forward, whether DDP would all-reduce that backward (DDP decides it at
  forward time, from ``no_sync``), holding stale gradients; micro-batches of unequal sizes accumulated, the gradient
  clipped by its global norm (written by the learner), the optimizer's step and its ``zero_grad``. The returned loss and
  norm, the parameters after the update, the gradients left and the record of synchronised forwards are compared with
  :func:`reference_data_parallel_update` (the package's :func:`~tutorial_lib.distributed.accumulate_gradients`, torch's
  ``clip_grad_norm_``), which a test holds equal to one forward and backward of the concatenated batch. An empty list
  of micro-batches and ``max_norm=0`` must raise ``ValueError``.
- ``15.predict_ring_bytes`` (predict, then measure): the bytes one rank sends to average the gradient of the chapter's
  model (float32) over 8 ranks with the ring, counted from the messages of :func:`simulate_ranks` running the ring's
  recipe.

As in ``ch03``, the mistakes are written the way a learner would write them and carry no annotations.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import DistributedSampler

from tutorial_lib.checks.compound import mistake_builder
from tutorial_lib.checks.core import Case, Exercise, Mistake, Mutant, WrongOutput, register
from tutorial_lib.checks.prediction import Misconception, predict_number, wrong_prediction
from tutorial_lib.distributed import accumulate_gradients, average_gradients, ring_all_reduce_
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.training import language_model_loss

# --- 15.ring_all_reduce -------------------------------------------------------------------------------------------------


RECV_TIMEOUT = 1.0  # seconds a rank waits for a message before the check calls it a deadlock (a rank computes
# for microseconds between two messages)


class Deadlock(RuntimeError):
    """A rank waited for a message that never came."""


@dataclass
class _Network:
    """``n`` simulated ranks joined by point-to-point channels: ``send(to_rank, tensor)`` (non-blocking, as
    ``dist.isend``; the tensor is copied when sent) and ``recv(from_rank)`` (blocking, as ``dist.recv``). Every message
    is logged by its sender, in the order that rank sent them."""

    n: int
    channels: dict[tuple[int, int], queue.Queue] = field(default_factory=dict)
    sent: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # rank -> [(to_rank, numbers sent)]

    def __post_init__(self) -> None:
        self.channels = {(a, b): queue.Queue() for a in range(self.n) for b in range(self.n)}
        self.sent = {rank: [] for rank in range(self.n)}

    def _rank(self, name: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value < self.n:
            raise ValueError(f"{name} must be a rank from 0 to {self.n - 1}, got {value!r}")
        return int(value)

    def endpoints(self, rank: int) -> tuple[Callable[[int, torch.Tensor], None], Callable[[int], torch.Tensor]]:
        def send(to_rank: int, tensor: torch.Tensor) -> None:
            to_rank = self._rank("to_rank", to_rank)
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"send takes a tensor, got {type(tensor).__name__}")
            self.sent[rank].append((to_rank, tensor.numel()))
            self.channels[rank, to_rank].put(tensor.detach().clone())

        def recv(from_rank: int) -> torch.Tensor:
            from_rank = self._rank("from_rank", from_rank)
            try:
                return self.channels[from_rank, rank].get(timeout=RECV_TIMEOUT)
            except queue.Empty:
                raise Deadlock(f"rank {rank} waited {RECV_TIMEOUT:g} s for a message from rank {from_rank} that was "
                                   f"never sent (a deadlock: does every rank send before it receives?)") from None

        return send, recv


def simulate_ranks(program: Callable[..., Any], tensors: Sequence[torch.Tensor]) -> tuple[list[Any], _Network]:
    """Run ``program(rank, world_size, tensor, send, recv)`` for every rank at once, each in its own thread with a
    copy of its own tensor only; the ranks' return values and the network (its log of messages) come back. A rank's
    exception is raised here: the lowest rank's that is not a deadlock (a rank that crashed leaves its neighbour
    waiting: the crash is the cause), else the lowest rank's deadlock. Each rank sends before it receives in a step, so
    which ranks fail, and how, does not depend on how the threads are scheduled; which fails first would."""
    n = len(tensors)
    network = _Network(n)
    results: list[Any] = [None] * n
    errors: dict[int, BaseException] = {}

    def run(rank: int) -> None:
        try:
            results[rank] = program(rank, n, tensors[rank].clone(), *network.endpoints(rank))
        except BaseException as error:  # handed to the caller below
            errors[rank] = error

    threads = [threading.Thread(target=run, args=(rank,), daemon=True) for rank in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        causes = [errors[rank] for rank in sorted(errors) if not isinstance(errors[rank], Deadlock)]
        raise causes[0] if causes else errors[min(errors)]
    return results, network


def _check_ring_messages(network: _Network, length: int) -> None:
    """The messages of a ring all-reduce: each to the right neighbour, each one chunk of ``tensor_split(n)``, and
    2(n - 1) per rank (n - 1 in the reduce-scatter, n - 1 in the all-gather), so that each rank sends about
    2(n - 1)/n of its tensor whatever n is."""
    n = network.n
    sizes = sorted({chunk.numel() for chunk in torch.empty(length).tensor_split(n)})
    for rank, messages in network.sent.items():
        for to_rank, numel in messages:
            if to_rank != (rank + 1) % n:
                raise WrongOutput("wrong_values", f"rank {rank} sent a message to rank {to_rank}: in a ring each rank "
                                                  f"sends to its right neighbour, rank {(rank + 1) % n}, only")
            if numel not in sizes:
                raise WrongOutput("wrong_values", f"rank {rank} sent {numel} numbers in one message: the ring sends "
                                                  f"one chunk of tensor_split({n}) at a time "
                                                  f"({' or '.join(map(str, sizes))} numbers here)")
        if len(messages) != 2 * (n - 1):
            raise WrongOutput("wrong_values", f"rank {rank} sent {len(messages)} message(s): a ring all-reduce sends "
                                              f"2(n - 1) = {2 * (n - 1)} per rank, n - 1 in the reduce-scatter and "
                                              f"n - 1 in the all-gather")


def _ring_call(obj, args):
    tensors = args[0]
    results, network = simulate_ranks(obj, tensors)
    _check_ring_messages(network, tensors[0].numel())
    return results


@mistake_builder
def _ring_like(*, divide=True, gather=True, reduce_steps=lambda n: n - 1, hop_average=False, send_offset=-1):
    """A learner's rank program; each keyword reproduces one way of getting it wrong."""

    def ring_all_reduce(rank, world_size, tensor, send, recv):
        n = world_size
        chunks = list(tensor.tensor_split(n))
        right, left = (rank + 1) % n, (rank - 1) % n
        for step in range(reduce_steps(n)):
            send(right, chunks[(rank + send_offset * step) % n])
            index = (rank - step - 1) % n
            received = recv(left)
            chunks[index] = (chunks[index] + received) / 2 if hop_average else chunks[index] + received
        if gather:
            for step in range(n - 1):
                send(right, chunks[(rank + 1 - step) % n])
                chunks[(rank - step) % n] = recv(left)
        return torch.cat(chunks) / n if divide and not hop_average else torch.cat(chunks)

    return ring_all_reduce


reference_ring_all_reduce = _ring_like()
reference_ring_all_reduce.__doc__ = "Rank ``rank``'s part of a ring all-reduce that averages (the recipe of the exercise)."


def _ring_with_left_neighbour(rank, world_size, tensor, send, recv):
    send((rank + 1) % world_size, tensor)  # the whole tensor, once: the mean of two ranks, not of all
    return (tensor + recv((rank - 1) % world_size)) / 2


def _ring_even_chunks_only(rank, world_size, tensor, send, recv):
    size = len(tensor) // world_size  # the remainder is dropped
    return _ring_like()(rank, world_size, tensor[: size * world_size], send, recv)


def _ring_gather_adds(rank, world_size, tensor, send, recv):
    n = world_size
    chunks = list(tensor.tensor_split(n))
    for step in range(n - 1):
        send((rank + 1) % n, chunks[(rank - step) % n])
        chunks[(rank - step - 1) % n] = chunks[(rank - step - 1) % n] + recv((rank - 1) % n)
    for step in range(n - 1):  # adds the complete sums again instead of copying them
        send((rank + 1) % n, chunks[(rank + 1 - step) % n])
        chunks[(rank - step) % n] = chunks[(rank - step) % n] + recv((rank - 1) % n)
    return torch.cat(chunks) / n


def _ring_cases(generator: torch.Generator) -> list[Case]:
    def ranks(n: int, length: int) -> list[torch.Tensor]:
        return [torch.randn(length, generator=generator, dtype=torch.float64) for _ in range(n)]

    return [
        Case.of(tensors=ranks(2, 6), note="2 ranks, 6 numbers each"),
        Case.of(tensors=ranks(3, 7), note="3 ranks, 7 numbers each (chunks of 3, 2 and 2)"),
        Case.of(tensors=ranks(4, 10), note="4 ranks, 10 numbers each"),
        Case.of(tensors=ranks(3, 12), note="3 ranks, 12 numbers each"),
    ]


RING_ALL_REDUCE = Exercise(
    id="15.ring_all_reduce",
    forbidden=(torch.distributed.all_reduce, ring_all_reduce_, average_gradients),
    reference=reference_ring_all_reduce,
    cases=_ring_cases,
    points=2,
    call=_ring_call,
    outputs=("the tensors of the ranks",),
    checked=("2, 3 and 4 ranks, tensors of 6 to 12 numbers (float64) that the number of ranks does not always divide: "
             "every rank ends with the mean, having sent 2(n - 1) messages, each one chunk, to its right neighbour"),
    mistakes=(
        Mistake("summed_not_averaged", "returned the sum of the ranks' tensors instead of their mean",
                "The all-reduce adds; the mean needs one more division: each rank's result by n, the number of "
                "ranks (DDP's default hook divides before it adds).", (_ring_like(divide=False),)),
        Mistake("no_all_gather", "stopped after the reduce-scatter, so each rank holds only one complete chunk",
                "After n - 1 reduce-scatter steps rank r has the full sum of chunk (r + 1) % n only: n - 1 more steps "
                "must pass the complete chunks around the ring (copying, not adding).", (_ring_like(gather=False),)),
        Mistake("one_step_short", "ran the reduce-scatter for n - 2 steps instead of n - 1",
                "A chunk must visit every rank: it needs n - 1 hops.", (_ring_like(reduce_steps=lambda n: n - 2),)),
        Mistake("averaged_at_every_hop", "averaged the received chunk with your own at every hop instead of adding",
                "(a + b) / 2, then ((a + b) / 2 + c) / 2 weights the ranks unequally as soon as there are more than "
                "two: add along the ring, and divide once, by n, at the end.", (_ring_like(hop_average=True),)),
        Mistake("sent_the_wrong_chunk", "sent chunk (r + step) instead of chunk (r - step) in the reduce-scatter",
                "Each step passes along the partial sum you just completed: the chunk you added into at the previous "
                "step. With 2 ranks both are the same, which hides the mistake.", (_ring_like(send_offset=1),)),
    ),
    mutants=(
        Mutant("left_neighbour_only", "averages with its left neighbour's whole tensor", _ring_with_left_neighbour),
        Mutant("even_chunks_only", "drops the numbers that do not fill n equal chunks", _ring_even_chunks_only),
        Mutant("gather_adds", "adds the complete chunks again in the all-gather", _ring_gather_adds),
    ),
)

# --- 15.rank_indices ----------------------------------------------------------------------------------------------------


def reference_rank_indices(n_examples, rank, world_size, epoch, seed):
    """The indices PyTorch's ``DistributedSampler`` gives ``rank`` in ``epoch`` (shuffled, padded, not dropped)."""
    sampler = DistributedSampler(range(n_examples), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    sampler.set_epoch(epoch)
    return list(sampler)


def _as_index_tensor(fn, args) -> torch.Tensor:
    indices = fn(*args)
    if isinstance(indices, torch.Tensor):
        indices = indices.tolist()
    try:
        values = list(indices)
    except TypeError:
        raise WrongOutput("wrong_type", f"rank_indices should return a list of ints, got {type(indices).__name__}") from None
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values):
        raise WrongOutput("wrong_type", "rank_indices should return a list of ints (indices of examples)")
    return torch.tensor(values, dtype=torch.long)


def _indices_cases(generator: torch.Generator) -> list[Case]:
    return [
        Case.of(n_examples=10, rank=0, world_size=2, epoch=0, seed=0, note="10 examples, rank 0 of 2"),
        Case.of(n_examples=10, rank=1, world_size=2, epoch=3, seed=0, note="rank 1 of 2, epoch 3"),
        Case.of(n_examples=10, rank=2, world_size=3, epoch=1, seed=7, note="rank 2 of 3: padded to 12"),
        Case.of(n_examples=7, rank=1, world_size=4, epoch=2, seed=1, note="7 examples, rank 1 of 4: padded to 8"),
        Case.of(n_examples=24, rank=3, world_size=4, epoch=1, seed=5),
    ]


@mistake_builder
def _indices_like(*, seed_of=lambda seed, epoch, rank: seed + epoch, shuffle=True, pad=True, stride=True,
                  ignore_rank=False):
    """A learner's rank_indices; each keyword reproduces one way of getting it wrong."""

    def rank_indices(n_examples, rank, world_size, epoch, seed):
        if shuffle:
            g = torch.Generator()
            g.manual_seed(seed_of(seed, epoch, rank))
            order = torch.randperm(n_examples, generator=g).tolist()
        else:
            order = list(range(n_examples))
        per_rank = math.ceil(n_examples / world_size)
        if pad:
            order += order[: per_rank * world_size - n_examples]
        r = 0 if ignore_rank else rank
        if stride:
            return order[r::world_size]
        return order[r * per_rank:(r + 1) * per_rank]

    return rank_indices


def _indices_pad_with_last(n_examples, rank, world_size, epoch, seed):
    g = torch.Generator().manual_seed(seed + epoch)
    order = torch.randperm(n_examples, generator=g).tolist()
    padding = math.ceil(n_examples / world_size) * world_size - n_examples
    order += order[len(order) - padding:] if padding else []
    return order[rank::world_size]


RANK_INDICES = Exercise(
    id="15.rank_indices",
    forbidden=(DistributedSampler,),
    reference=reference_rank_indices,
    cases=_indices_cases,
    points=1,
    call=_as_index_tensor,
    outputs=("the indices",),
    checked="2, 3 and 4 ranks, 7 to 24 examples, epochs 0 to 3, against PyTorch's DistributedSampler",
    mistakes=(
        Mistake("same_shard_on_every_rank", "gave every rank the same indices, whatever its rank",
                "Each rank must read its own examples: start at position `rank` of the order and take every "
                "`world_size`-th one; otherwise all ranks compute the same gradient.",
                (_indices_like(ignore_rank=True),)),
        Mistake("same_order_every_epoch", "seeded the shuffle with the seed alone, so every epoch repeats the same order",
                "Seed the generator with the seed plus the epoch: that is what `set_epoch` changes.",
                (_indices_like(seed_of=lambda seed, epoch, rank: seed),)),
        Mistake("own_shuffle_per_rank", "let each rank draw its own shuffle (a seed that depends on the rank)",
                "Every rank must draw the **same** permutation, or the shards overlap and miss examples: seed the "
                "generator from the seed and the epoch only, never the rank, then split by rank.",
                (_indices_like(seed_of=lambda seed, epoch, rank: seed + epoch + rank),
                 _indices_like(seed_of=lambda seed, epoch, rank: seed + rank))),
        Mistake("no_padding", "did not pad, so the ranks get different numbers of examples",
                "Pad the order with its first indices up to a multiple of world_size: a rank with one step fewer than "
                "the others leaves them waiting in their last all-reduce.", (_indices_like(pad=False),)),
        Mistake("not_shuffled", "split the examples in their original order, without shuffling",
                "Draw a random permutation of the examples first, with `torch.randperm` and the seeded generator; "
                "DistributedSampler shuffles by default.",
                (_indices_like(shuffle=False),)),
    ),
    mutants=(
        Mutant("contiguous_blocks", "gives each rank a contiguous block of the order instead of every world_size-th index",
               _indices_like(stride=False)),
        Mutant("pad_with_last", "pads with the last indices instead of the first", _indices_pad_with_last),
    ),
)

# --- 15.accumulate_gradients (the build: one whole data-parallel update) ---------------------------------------


class DDPStandIn(nn.Module):
    """What the check hands over instead of DistributedDataParallel, in one process: the same ``no_sync`` and
    ``module``, and a record, at each forward, of whether DDP would all-reduce the backward that follows."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.require_backward_grad_sync = True
        self.synced: list[bool] = []

    @contextlib.contextmanager
    def no_sync(self):
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    def forward(self, tokens):
        self.synced.append(self.require_backward_grad_sync)
        return self.module(tokens)


def reference_data_parallel_update(model, micro_batches, loss_fn, optimizer, max_norm):
    """One update of a data-parallel rank: the package's :func:`~tutorial_lib.distributed.accumulate_gradients` (all
    micro-batches but the last under ``no_sync``), torch's own ``clip_grad_norm_`` on the accumulated gradient, the
    optimizer's step and its ``zero_grad``; returns the mean loss and the gradient's norm before clipping. Tested equal
    to one forward and backward of the concatenated batch (tests/test_checks_ch15.py)."""
    if isinstance(max_norm, bool) or not isinstance(max_norm, numbers.Real) or not max_norm > 0:
        raise ValueError(f"max_norm must be a positive number, got {max_norm!r}")
    if not micro_batches:
        raise ValueError("micro_batches must hold at least one (x, y) micro-batch, got none")
    mean_loss = accumulate_gradients(model, micro_batches, loss_fn)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad()
    return mean_loss, norm.item()


def _as_number(value: object, what: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise WrongOutput("wrong_type", f"data_parallel_update should return {what} as a float, got "
                                        f"{type(value).__name__}")
    return float(value)


def _run_update(fn, args):
    seed, sizes, optimizer_kind, max_norm = args
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = DDPStandIn(GPT(GPTConfig(d_vocab=7, n_ctx=6, d_model=8, n_heads=2, n_layers=1)).double())
    for parameter in model.parameters():  # stale gradients, as after an evaluation that ran backward
        parameter.grad = torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype)
    if optimizer_kind == "adamw":
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    else:  # momentum's buffer starts at the first step: stepping twice shows in the parameters
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    micro_batches = []
    for size in sizes:
        tokens = torch.randint(7, (size, 7), generator=generator)
        micro_batches.append((tokens[:, :-1], tokens[:, 1:]))
    returned = fn(model, micro_batches, language_model_loss, optimizer, max_norm)
    if not isinstance(returned, tuple) or len(returned) != 2:
        raise WrongOutput("wrong_type", "data_parallel_update should return a pair (mean loss, gradient norm before "
                                        f"clipping), got {type(returned).__name__}")
    loss, norm = _as_number(returned[0], "the mean loss"), _as_number(returned[1], "the gradient's norm")
    parameters = torch.cat([p.detach().flatten() for p in model.parameters()])
    left = torch.cat([(torch.zeros_like(p) if p.grad is None else p.grad).flatten() for p in model.parameters()])
    return (torch.tensor(loss, dtype=torch.float64), torch.tensor(norm, dtype=torch.float64), parameters, left,
            torch.tensor(model.synced, dtype=torch.long))


def _update_cases(generator: torch.Generator) -> list[Case]:
    import torch._dynamo  # noqa: F401  (torch.optim's first use imports it, seconds: here, before the timed calls)

    return [
        Case.of(seed=0, sizes=[2, 2], optimizer="sgd", max_norm=0.5, note="2 micro-batches of 2, clipped"),
        Case.of(seed=1, sizes=[1, 3], optimizer="sgd", max_norm=0.3, note="micro-batches of 1 and 3, clipped"),
        Case.of(seed=2, sizes=[2, 1, 3], optimizer="sgd", max_norm=0.4, note="3 micro-batches of 2, 1 and 3, clipped"),
        Case.of(seed=3, sizes=[3, 1], optimizer="adamw", max_norm=0.2, note="AdamW, micro-batches of 3 and 1"),
        Case.of(seed=4, sizes=[4], optimizer="sgd", max_norm=100.0,
                note="one micro-batch of 4, a norm too small to clip"),
        Case.of(seed=5, sizes=[], optimizer="sgd", max_norm=1.0,
                note="no micro-batch at all, which must raise ValueError"),
        Case.of(seed=6, sizes=[2, 1], optimizer="sgd", max_norm=0.0, note="max_norm=0, which must raise ValueError"),
    ]


@mistake_builder
def _update_like(*, weight="share", zero="start", sync="last", clip="global", steps="once", zero_after=True,
                 norm_returned="before", refuse_empty=True, refuse_max_norm=True):
    """A learner's data_parallel_update; each keyword reproduces one way of getting it wrong."""

    def clip_(parameters, max_norm):
        grads = [p.grad for p in parameters if p.grad is not None]
        if clip == "per_parameter":
            norms = [g.norm() for g in grads]
            for g, n in zip(grads, norms):
                g.mul_(min(1.0, max_norm / (n.item() + 1e-6)))
            return torch.stack(norms).norm().item()
        total_norm = math.sqrt(sum((g ** 2).sum().item() for g in grads))
        for g in grads:
            g.mul_(min(1.0, max_norm / (total_norm + 1e-6)))
        return total_norm

    def data_parallel_update(model, micro_batches, loss_fn, optimizer, max_norm):
        if refuse_max_norm and max_norm <= 0:
            raise ValueError("max_norm must be positive")
        if refuse_empty and len(micro_batches) == 0:
            raise ValueError("micro_batches is empty")
        total = sum(len(x) for x, _ in micro_batches)
        if zero == "start":
            model.zero_grad()
        loss_sum = 0.0
        norm = 0.0
        for i, (x, y) in enumerate(micro_batches):
            if zero == "each":
                model.zero_grad()
            last = i == len(micro_batches) - 1
            if clip == "before_last_backward" and last:
                norm = clip_(model.parameters(), max_norm)
            skip_sync = {"last": not last, "never": False, "always": True}[sync]
            with model.no_sync() if skip_sync else contextlib.nullcontext():
                loss = loss_fn(model, (x, y))
                if weight == "share":
                    loss = loss * len(x) / total
                elif weight == "equal":
                    loss = loss / len(micro_batches)
                loss.backward()
            loss_sum += loss.item()
            if clip == "each_micro_batch":
                norm = clip_(model.parameters(), max_norm)
            if steps == "each" and not last:
                optimizer.step()
        if clip in ("global", "per_parameter"):
            norm = clip_(model.parameters(), max_norm)
        if norm_returned == "after":
            norm = min(norm, max_norm)
        optimizer.step()
        if zero_after:
            optimizer.zero_grad()
        return (loss_sum / len(micro_batches) if weight == "none" else loss_sum), norm

    return data_parallel_update


def _update_skipping_last(model, micro_batches, loss_fn, optimizer, max_norm):
    if max_norm <= 0 or not micro_batches:
        raise ValueError("max_norm must be positive and micro_batches not empty")
    model.zero_grad()
    total = sum(len(x) for x, _ in micro_batches)
    loss_sum = 0.0
    for x, y in micro_batches[:-1]:
        with model.no_sync():
            loss = loss_fn(model, (x, y)) * len(x) / total
            loss.backward()
        loss_sum += loss.item()
    x, y = micro_batches[-1]
    loss_sum += (loss_fn(model, (x, y)) * len(x) / total).item()  # the last one's loss, but no backward
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.sqrt(sum((g ** 2).sum() for g in grads)).item() if grads else 0.0
    for g in grads:
        g.mul_(min(1.0, max_norm / (norm + 1e-6)))
    optimizer.step()
    optimizer.zero_grad()
    return loss_sum, norm


def _accumulate_with_no_sync(model, micro_batches, loss_fn):
    model.zero_grad()
    total = sum(len(x) for x, _ in micro_batches)
    loss_sum = 0.0
    for i, (x, y) in enumerate(micro_batches):
        with model.no_sync() if i < len(micro_batches) - 1 else contextlib.nullcontext():
            loss = loss_fn(model, (x, y)) * len(x) / total
            loss.backward()
        loss_sum += loss.item()
    return loss_sum


def _update_clipped_to_exactly_max_norm(model, micro_batches, loss_fn, optimizer, max_norm):
    """Scales the gradient to norm max_norm even when it is shorter (a normalisation, not a clip)."""
    if max_norm <= 0 or not micro_batches:
        raise ValueError("max_norm must be positive and micro_batches not empty")
    loss = _accumulate_with_no_sync(model, micro_batches, loss_fn)
    grads = [p.grad for p in model.parameters()]
    norm = torch.sqrt(sum((g ** 2).sum() for g in grads)).item()
    for g in grads:
        g.mul_(max_norm / (norm + 1e-6))
    optimizer.step()
    optimizer.zero_grad()
    return loss, norm


ACCUMULATE_GRADIENTS = Exercise(
    id="15.accumulate_gradients",
    forbidden=(accumulate_gradients, nn.utils.clip_grad_norm_, nn.utils.clip_grad_norm, nn.utils.clip_grads_with_norm_,
               nn.utils.get_total_norm),
    reference=reference_data_parallel_update,
    cases=_update_cases,
    points=2,
    call=_run_update,
    outputs=("the returned loss", "the returned norm", "the parameters after the update", "the gradients left after it",
             "which forwards synchronise (1) or not (0)"),
    checked=(
        "a 1-layer GPT in float64 wrapped like DDP, holding stale gradients, with 1 to 3 micro-batches of 1 to 4 "
        "windows, SGD with momentum or AdamW, max_norm from 0.2 (clipping) to 100 (not): the loss and norm returned, "
        "every parameter after the update, the gradients left behind, and which forwards ran outside no_sync; and no "
        "micro-batch, or max_norm=0, which must raise ValueError"
    ),
    mistakes=(
        Mistake("no_scaling", "added the micro-batches' gradients without weighting them, so the gradient is their sum",
                "Each micro-batch's loss is a mean over its own examples: multiply it by len(batch) / total before "
                "backward, so that the added gradients make the mean over the whole batch.",
                (_update_like(weight="none"),)),
        Mistake("equal_weights", "divided every micro-batch's loss by the number of micro-batches, whatever its size",
                "With micro-batches of unequal sizes, 1 / n_micro gives a small micro-batch's examples more weight: "
                "weight each by its share of the examples, len(batch) / total.", (_update_like(weight="equal"),)),
        Mistake("zeroed_each_micro_batch", "cleared the gradients before every micro-batch, so only the last one counts",
                "Accumulating means letting backward add into .grad: zero the gradients once, before the first "
                "micro-batch.", (_update_like(zero="each"),)),
        Mistake("kept_stale_gradients", "did not clear the gradients the model held before the first micro-batch",
                "backward adds to whatever .grad holds: clear the gradients before the first micro-batch too.",
                (_update_like(zero="never"),)),
        Mistake("synced_every_micro_batch", "ran every micro-batch outside no_sync, so DDP all-reduces after each one",
                "The values come out right, but each backward pays a full all-reduce: run all but the last "
                "micro-batch's forward and backward inside the `model.no_sync()` context.",
                (_update_like(sync="never"),)),
        Mistake("never_synced", "ran the last micro-batch inside no_sync too, so the gradients are never all-reduced",
                "Each rank would step with its own gradient and the copies drift apart: leave the last micro-batch "
                "outside no_sync, so its backward all-reduces the accumulated sum.", (_update_like(sync="always"),)),
        Mistake("clipped_each_micro_batch", "clipped the gradient after every micro-batch instead of once, on the sum",
                "Clipping is not linear: clipping the running sum along the way shrinks the early micro-batches more "
                "than the late ones. Clip once, after the last backward, the whole batch's gradient.",
                (_update_like(clip="each_micro_batch"),)),
        Mistake("clipped_before_the_last_backward",
                "clipped the gradient before the last micro-batch had added its part",
                "The last micro-batch's gradient arrived after the clip and went in unclipped: clip after the last "
                "backward, when .grad holds the whole batch's gradient (and, under DDP, the all-reduced one).",
                (_update_like(clip="before_last_backward"),)),
        Mistake("clipped_each_parameter", "clipped each parameter's gradient by its own norm",
                "clip_grad_norm_ measures one norm, over all the parameters' gradients together (the square root of "
                "the sum of every entry's square), and scales every gradient by the same factor.",
                (_update_like(clip="per_parameter"),)),
        Mistake("returned_the_clipped_norm", "returned the gradient's norm after clipping instead of before",
                "The norm to log is the one measured before clipping (what clip_grad_norm_ returns): after clipping it "
                "is max_norm whenever the clip acts, which says nothing about the gradient.",
                (_update_like(norm_returned="after"),)),
        Mistake("stepped_every_micro_batch", "called the optimizer's step after every micro-batch",
                "Accumulation exists to take one step on the whole batch: step once, after the last backward and the "
                "clip.", (_update_like(steps="each"),)),
        Mistake("no_zero_grad_after_the_step", "left the used gradients in .grad after the optimizer's step",
                "After the step the gradients are spent: clear them (the optimizer's zero_grad), or whatever runs "
                "backward next adds onto them.", (_update_like(zero_after=False),)),
        Mistake("empty_micro_batches_not_refused", "let an empty list of micro-batches through",
                "No micro-batch means no gradient and no mean loss: raise ValueError naming `micro_batches` before "
                "anything else runs.", (_update_like(refuse_empty=False),)),
        Mistake("max_norm_not_refused", "accepted max_norm=0, which scales every gradient to zero",
                "A clip at a norm of 0 or less is a caller's bug: raise ValueError naming `max_norm` and saying it "
                "must be positive.", (_update_like(refuse_max_norm=False),)),
    ),
    mutants=(
        Mutant("last_micro_batch_skipped", "never runs backward on the last micro-batch", _update_skipping_last),
        Mutant("normalised_not_clipped", "scales the gradient to norm max_norm even when it is shorter",
               _update_clipped_to_exactly_max_norm),
    ),
)

# --- 15.predict_ring_bytes (predict, then measure) --------------------------------------------------------------------

RING_RANKS = 8  # the paper's eight GPUs
CHAPTER_MODEL_PARAMETERS = 106_304  # chapter_model_parameters(), for the misconceptions' values (a test pins it)


def chapter_model_parameters() -> int:
    """The parameters of the chapter's model, ``GPT(DataParallelConfig().model_config(65))`` (65 characters), counted
    on PyTorch's ``meta`` device: shapes only, no memory and no draw from the random state."""
    from tutorial_lib.recipes import CHAR_GPT_CONFIG
    from tutorial_lib.train_data_parallel import DataParallelConfig

    with torch.device("meta"):
        model = GPT(DataParallelConfig().model_config(CHAR_GPT_CONFIG.d_vocab))
    return sum(parameter.numel() for parameter in model.parameters())


def ring_bytes_sent(world_size: int = RING_RANKS, seed: int = 0) -> list[int]:
    """The bytes each rank sends in one ring all-reduce of a float32 gradient the size of the chapter's model, one
    entry per rank: every rank runs the ring's recipe on its own (seeded, random) gradient in :func:`simulate_ranks`,
    and the numbers of each message its network logged are counted, 4 bytes each."""
    generator = torch.Generator().manual_seed(seed)
    n_parameters = chapter_model_parameters()
    gradients = [torch.randn(n_parameters, generator=generator) for _ in range(world_size)]
    _, network = simulate_ranks(reference_ring_all_reduce, gradients)
    bytes_per_number = gradients[0].element_size()
    return [sum(numel for _to_rank, numel in network.sent[rank]) * bytes_per_number for rank in range(world_size)]


def ring_bytes_per_rank() -> float:
    """The mean over the ranks of :func:`ring_bytes_sent` (the ranks send the same when the ranks divide the size)."""
    sent = ring_bytes_sent()
    return sum(sent) / len(sent)


PREDICT_RING_BYTES = predict_number(
    "15.predict_ring_bytes",
    measure=ring_bytes_per_rank,
    question="the bytes one rank sends in the ring all-reduce of the model's gradient on 8 ranks",
    within=1.3,
    points=1,
    misconceptions=[
        Misconception("everyone_to_everyone", 7 * CHAPTER_MODEL_PARAMETERS * 4.0,
                      "had every rank send its whole gradient to each of the 7 others",
                      "That is the obvious all-reduce the ring replaces. In the ring a rank only ever talks to its "
                      "right neighbour, one chunk of an eighth of the gradient per step."),
        Misconception("whole_gradient_once", CHAPTER_MODEL_PARAMETERS * 4.0,
                      "expected each rank to send its gradient once, about 425 kB",
                      "The ring has two phases: the reduce-scatter passes partial sums until each rank holds one "
                      "complete chunk, then the all-gather passes the complete chunks around again. Count the chunks "
                      "a rank sends in both."),
        Misconception("numbers_not_bytes", 2 * 7 / 8 * CHAPTER_MODEL_PARAMETERS,
                      "counted the numbers sent rather than the bytes",
                      "Each float32 number takes 4 bytes on the wire."),
        Misconception("one_chunk", CHAPTER_MODEL_PARAMETERS * 4.0 / 8,
                      "counted a single chunk, an eighth of the gradient",
                      "A rank sends one chunk per step, and the ring takes more than one step: count the steps of "
                      "the reduce-scatter and of the all-gather."),
    ],
    mutants=[
        wrong_prediction("ten_megabytes", 10e6, "thirteen times too large, no misconception's value"),
        wrong_prediction("one_kilobyte", 1e3, "seven hundred times too small, no misconception's value"),
    ],
)


register(RING_ALL_REDUCE, RANK_INDICES, ACCUMULATE_GRADIENTS, PREDICT_RING_BYTES)
