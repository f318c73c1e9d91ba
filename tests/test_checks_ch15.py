"""Chapter 15's checks: answers written as learners write them, right and wrong (independently of the catalogue)."""

from __future__ import annotations

import contextlib
import math

import torch
from torch.utils.data import DistributedSampler

from tutorial_lib.checks import check

# --- 15.ring_all_reduce -----------------------------------------------------------------------------------------------


def ring_with_phases(rank, world_size, tensor, send, recv):
    """Correct, written differently: one loop over both phases, chunk indices from a table."""
    n = world_size
    chunks = [chunk.clone() for chunk in tensor.tensor_split(n)]
    for phase in ("reduce", "gather"):
        for step in range(n - 1):
            out = (rank - step) % n if phase == "reduce" else (rank + 1 - step) % n
            send((rank + 1) % n, chunks[out])
            into = (out - 1) % n
            data = recv((rank - 1) % n)
            chunks[into] = chunks[into] + data if phase == "reduce" else data
    return torch.cat(chunks) / n


def mean_through_rank_zero(rank, world_size, tensor, send, recv):
    """Right values, no ring: every rank sends its whole tensor to rank 0, which sends the mean back."""
    if rank != 0:
        send(0, tensor)
        return recv(0)
    mean = (tensor + sum(recv(other) for other in range(1, world_size))) / world_size
    for other in range(1, world_size):
        send(other, mean)
    return mean


def ring_only_reduce_scatter(rank, world_size, tensor, send, recv):
    n = world_size
    chunks = list(tensor.tensor_split(n))
    for step in range(n - 1):
        send((rank + 1) % n, chunks[(rank - step) % n])
        chunks[(rank - step - 1) % n] = chunks[(rank - step - 1) % n] + recv((rank - 1) % n)
    return torch.cat(chunks) / n


def waits_before_sending(rank, world_size, tensor, send, recv):
    received = recv((rank - 1) % world_size)  # every rank waits for its left neighbour, who waits too
    send((rank + 1) % world_size, tensor)
    return received


def test_ring_answers_right_and_wrong():
    assert check("15.ring_all_reduce", ring_with_phases).points == 2
    assert check("15.ring_all_reduce", ring_only_reduce_scatter).mistake == "no_all_gather"


def ring_with_a_note_to_itself(rank, world_size, tensor, send, recv):
    """Right values, but each rank also sends a chunk to itself (and reads it back) before the ring starts."""
    send(rank, tensor.tensor_split(world_size)[0])
    recv(rank)
    return ring_with_phases(rank, world_size, tensor, send, recv)


def test_the_ring_is_checked_on_its_messages_not_only_its_result():
    result = check("15.ring_all_reduce", mean_through_rank_zero)
    assert result.points == 0 and "the ring sends one chunk of tensor_split(2) at a time" in result.verdict
    result = check("15.ring_all_reduce", ring_with_a_note_to_itself)
    assert result.points == 0 and "rank 0 sent a message to rank 0: in a ring each rank sends to its right" in result.verdict
    result = check("15.ring_all_reduce", ring_only_reduce_scatter)
    assert "a ring all-reduce sends 2(n - 1) = 2 per rank" in result.verdict, result.verdict


def test_a_deadlock_is_named_with_the_line_that_waited():
    result = check("15.ring_all_reduce", waits_before_sending)
    assert result.kind == "raised" and "never sent (a deadlock" in result.verdict, result.verdict
    assert "of your code: `received = recv((rank - 1) % world_size)" in result.verdict


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
    def ring_all_reduce(rank, world_size, tensor, send, recv):
        raise NotImplementedError("write your solution here")

    result = check("15.ring_all_reduce", ring_all_reduce)
    assert result.points == 0 and result.mistake is None


# --- 15.predict_ring_bytes --------------------------------------------------------------------------------------------


def test_the_ring_bytes_are_counted_from_the_messages_and_misconceptions_named(predict):
    from tutorial_lib.checks.ch15 import CHAPTER_MODEL_PARAMETERS, chapter_model_parameters, ring_bytes_sent

    assert chapter_model_parameters() == CHAPTER_MODEL_PARAMETERS  # the misconceptions' values are computed from it
    gradient_bytes = 4 * CHAPTER_MODEL_PARAMETERS
    sent = ring_bytes_sent()
    assert len(sent) == 8 and len(set(sent)) == 1  # 8 ranks dividing the size: every rank sends the same
    assert gradient_bytes < sent[0] < 2 * gradient_bytes  # more than the gradient once, less than twice
    assert predict("15.predict_ring_bytes", lambda: 2 * 7 / 8 * gradient_bytes).passed  # the solution's reasoning
    assert predict("15.predict_ring_bytes", lambda: 7 * gradient_bytes).mistake == "everyone_to_everyone"
    assert predict("15.predict_ring_bytes", lambda: gradient_bytes).mistake == "whole_gradient_once"
    assert predict("15.predict_ring_bytes", lambda: 2 * 7 / 8 * CHAPTER_MODEL_PARAMETERS).mistake == "numbers_not_bytes"
    assert predict("15.predict_ring_bytes", lambda: gradient_bytes / 8).mistake == "one_chunk"
