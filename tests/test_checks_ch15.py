"""Chapter 15's checks: answers written as learners write them, right and wrong (independently of the catalogue)."""

from __future__ import annotations

import contextlib
import math

import torch
from torch.utils.data import DistributedSampler

from tutorial_lib.checks import check

# --- 15.ring_all_reduce -----------------------------------------------------------------------------------------------


def ring_with_explicit_messages(tensors):
    """Correct, written differently: each step builds a dict of messages {receiver: (chunk index, data)}."""
    n = len(tensors)
    chunks = [[c.clone() for c in t.tensor_split(n)] for t in tensors]
    for phase in ("reduce", "gather"):
        for step in range(n - 1):
            index_of = (lambda r: (r - step) % n) if phase == "reduce" else (lambda r: (r + 1 - step) % n)
            messages = {(r + 1) % n: (index_of(r), chunks[r][index_of(r)].clone()) for r in range(n)}
            for receiver, (index, data) in messages.items():
                chunks[receiver][index] = chunks[receiver][index] + data if phase == "reduce" else data
    return [torch.cat(c) / n for c in chunks]


def ring_to_rank_zero(tensors):
    """Not a ring at all (everything to rank 0, then broadcast), but the values are right: the check grades values."""
    total = tensors[0].clone()
    for t in tensors[1:]:
        total += t
    return [total / len(tensors) for _ in tensors]


def ring_only_reduce_scatter(tensors):
    n = len(tensors)
    chunks = [list(t.clone().tensor_split(n)) for t in tensors]
    for step in range(n - 1):
        sent = [chunks[r][(r - step) % n].clone() for r in range(n)]
        for r in range(n):
            chunks[r][(r - step - 1) % n] = chunks[r][(r - step - 1) % n] + sent[(r - 1) % n]
    return [torch.cat(c) / n for c in chunks]


def test_ring_answers_right_and_wrong():
    assert check("15.ring_all_reduce", ring_with_explicit_messages).points == 2
    assert check("15.ring_all_reduce", ring_to_rank_zero).points == 2
    assert check("15.ring_all_reduce", ring_only_reduce_scatter).mistake == "no_all_gather"


# --- 15.rank_indices ----------------------------------------------------------------------------------------------------


def indices_with_a_loop(n_examples, rank, world_size, epoch, seed):
    """Correct, written differently: a loop over positions and modular padding."""
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    order = torch.randperm(n_examples, generator=generator)
    total = math.ceil(n_examples / world_size) * world_size
    return [int(order[position % n_examples]) for position in range(rank, total, world_size)]


def indices_from_the_sampler_without_set_epoch(n_examples, rank, world_size, epoch, seed):
    return list(DistributedSampler(range(n_examples), num_replicas=world_size, rank=rank, seed=seed))


def test_rank_indices_answers_right_and_wrong():
    assert check("15.rank_indices", indices_with_a_loop).points == 1
    assert check("15.rank_indices", indices_from_the_sampler_without_set_epoch).kind == "calls_the_work"
    assert check("15.rank_indices", lambda *args: "0, 2, 4").points == 0


# --- 15.accumulate_gradients ----------------------------------------------------------------------------------------------


def accumulate_by_example_sums(model, micro_batches, loss_fn):
    """Correct, written differently: sum losses weighted by size, backward, then divide the gradients at the end."""
    for p in model.parameters():
        p.grad = None
    total = sum(x.shape[0] for x, _ in micro_batches)
    summed = 0.0
    *early, last = micro_batches
    with model.no_sync():
        for x, y in early:
            loss = loss_fn(model, (x, y)) * x.shape[0]
            loss.backward()
            summed += loss.item()
    loss = loss_fn(model, last) * last[0].shape[0]
    loss.backward()
    summed += loss.item()
    for p in model.parameters():
        p.grad /= total
    return summed / total


def accumulate_forward_outside_no_sync(model, micro_batches, loss_fn):
    """Right values, but the forward runs outside no_sync: DDP decides there, so every backward all-reduces."""
    model.zero_grad()
    total = sum(len(x) for x, _ in micro_batches)
    result = 0.0
    for i, (x, y) in enumerate(micro_batches):
        loss = loss_fn(model, (x, y)) * len(x) / total
        with model.no_sync() if i < len(micro_batches) - 1 else contextlib.nullcontext():
            loss.backward()
        result += loss.item()
    return result


def test_accumulation_answers_right_and_wrong():
    assert check("15.accumulate_gradients", accumulate_by_example_sums).points == 2
    assert check("15.accumulate_gradients", accumulate_forward_outside_no_sync).mistake == "synced_every_micro_batch"


def test_an_exercise_not_attempted_scores_zero_without_a_mistake():
    def ring_all_reduce(tensors):
        raise NotImplementedError("write your solution here")

    result = check("15.ring_all_reduce", ring_all_reduce)
    assert result.points == 0 and result.mistake is None
