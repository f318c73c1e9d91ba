"""Chapter 15's checks: answers written as learners write them, right and wrong (independently of the catalogue)."""

from __future__ import annotations

import contextlib
import copy
import math

import pytest
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


# --- 15.accumulate_gradients (one data-parallel update) ------------------------------------------------------------


def update_by_example_sums(model, micro_batches, loss_fn, optimizer, max_norm):
    """Correct, written differently: losses weighted by size, gradients divided at the end, the norm by torch.cat."""
    if len(micro_batches) < 1:
        raise ValueError("micro_batches: give at least one micro-batch")
    if max_norm <= 0:
        raise ValueError(f"max_norm must be > 0, not {max_norm}")
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
    params = [p for p in model.parameters() if p.grad is not None]
    for p in params:
        p.grad /= total
    norm = torch.cat([p.grad.flatten() for p in params]).norm().item()
    factor = min(1.0, max_norm / (norm + 1e-6))
    for p in params:
        p.grad *= factor
    optimizer.step()
    for p in model.parameters():
        p.grad = None
    return summed / total, norm


class MyUpdate:
    """A learner's update, right unless ``wrong`` names what it gets wrong (written without the catalogue)."""

    def __init__(self, wrong=None):
        self.wrong = wrong

    def __call__(self, model, micro_batches, loss_fn, optimizer, max_norm):
        wrong = self.wrong
        if max_norm <= 0 and wrong != "max_norm let through":
            raise ValueError("max_norm must be positive")
        if not micro_batches and wrong != "empty let through":
            raise ValueError("micro_batches is empty")
        sizes = [len(x) for x, _ in micro_batches]
        if wrong != "stale":
            optimizer.zero_grad()
        losses = []
        for i, (x, y) in enumerate(micro_batches):
            if wrong == "zero each":
                optimizer.zero_grad()
            is_last = i + 1 == len(micro_batches)
            if wrong == "clip early" and is_last:
                self.clip(model, max_norm)
            in_no_sync = {"sync each": False, "never sync": True}.get(wrong, not is_last)
            with model.no_sync() if in_no_sync else contextlib.nullcontext():
                mean = loss_fn(model, (x, y))
                share = {"sum": 1.0, "equal": 1 / len(sizes)}.get(wrong, len(x) / sum(sizes))
                (mean * share).backward()
            losses.append(mean.item() * share)
            if wrong == "clip each":
                self.clip(model, max_norm)
            if wrong == "step each" and not is_last:
                optimizer.step()
        norm = self.clip(model, max_norm) if wrong not in ("clip early", "clip each") else self.last_norm
        optimizer.step()
        if wrong != "no zero after":
            optimizer.zero_grad()
        if wrong == "clipped norm":
            norm = min(norm, max_norm)
        return (sum(losses) / len(losses) if wrong == "sum" else sum(losses)), norm

    def clip(self, model, max_norm):
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        self.last_norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
        for g in grads:
            own = g.norm().item() if self.wrong == "per parameter" else self.last_norm
            g *= min(1.0, max_norm / (own + 1e-6))
        return self.last_norm


UPDATE_MISTAKES = [("sum", "no_scaling"), ("equal", "equal_weights"), ("zero each", "zeroed_each_micro_batch"),
                   ("stale", "kept_stale_gradients"), ("sync each", "synced_every_micro_batch"),
                   ("never sync", "never_synced"), ("clip each", "clipped_each_micro_batch"),
                   ("clip early", "clipped_before_the_last_backward"), ("per parameter", "clipped_each_parameter"),
                   ("clipped norm", "returned_the_clipped_norm"), ("step each", "stepped_every_micro_batch"),
                   ("no zero after", "no_zero_grad_after_the_step"),
                   ("empty let through", "empty_micro_batches_not_refused"),
                   ("max_norm let through", "max_norm_not_refused")]


def update_forward_outside_no_sync(model, micro_batches, loss_fn, optimizer, max_norm):
    """Right values, but the forward runs outside no_sync: DDP decides there, so every backward all-reduces."""
    if max_norm <= 0 or not micro_batches:
        raise ValueError("max_norm must be positive and micro_batches not empty")
    optimizer.zero_grad()
    total = sum(len(x) for x, _ in micro_batches)
    result = 0.0
    for i, (x, y) in enumerate(micro_batches):
        loss = loss_fn(model, (x, y)) * len(x) / total
        with model.no_sync() if i < len(micro_batches) - 1 else contextlib.nullcontext():
            loss.backward()
        result += loss.item()
    norm = MyUpdate().clip(model, max_norm)
    optimizer.step()
    optimizer.zero_grad()
    return result, norm


def update_with_torchs_clip(model, micro_batches, loss_fn, optimizer, max_norm):
    if max_norm <= 0 or not micro_batches:
        raise ValueError("max_norm must be positive and micro_batches not empty")
    optimizer.zero_grad()
    total = sum(len(x) for x, _ in micro_batches)
    result = 0.0
    for i, (x, y) in enumerate(micro_batches):
        with model.no_sync() if i < len(micro_batches) - 1 else contextlib.nullcontext():
            loss = loss_fn(model, (x, y)) * len(x) / total
            loss.backward()
        result += loss.item()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad()
    return result, norm.item()


def test_update_answers_right_and_wrong():
    assert check("15.accumulate_gradients", update_by_example_sums).points == 2
    assert check("15.accumulate_gradients", MyUpdate()).points == 2
    assert check("15.accumulate_gradients", update_with_torchs_clip).kind == "calls_the_work"
    assert check("15.accumulate_gradients", update_forward_outside_no_sync).mistake == "synced_every_micro_batch"


@pytest.mark.parametrize(("wrong", "mistake"), UPDATE_MISTAKES, ids=[m for _, m in UPDATE_MISTAKES])
def test_each_update_mistake_is_named(wrong, mistake):
    result = check("15.accumulate_gradients", MyUpdate(wrong))
    assert result.points == 0 and result.mistake == mistake, result.verdict


def test_the_reference_update_is_one_step_on_the_concatenated_batch_with_torchs_clip():
    """The reference (accumulation, torch's clip_grad_norm_, step, zero_grad) leaves the parameters that one forward and
    backward of the concatenated batch, torch's clip_grad_norm_ and the same optimizer leave (float64), for SGD with
    momentum and AdamW, clipping or not; and it refuses bad arguments naming them."""
    from tutorial_lib.checks.ch15 import DDPStandIn, reference_data_parallel_update
    from tutorial_lib.models.gpt import GPT, GPTConfig
    from tutorial_lib.training import language_model_loss

    generator = torch.Generator().manual_seed(0)
    for make_optimizer, max_norm in ((lambda ps: torch.optim.SGD(ps, lr=0.5, momentum=0.9), 0.3),
                                     (lambda ps: torch.optim.AdamW(ps, lr=0.01), 0.2),
                                     (lambda ps: torch.optim.SGD(ps, lr=0.5), 100.0)):
        torch.manual_seed(1)
        ours = DDPStandIn(GPT(GPTConfig(d_vocab=7, n_ctx=6, d_model=8, n_heads=2, n_layers=1)).double())
        theirs = copy.deepcopy(ours.module)
        tokens = torch.randint(7, (6, 7), generator=generator)
        micro_batches = [(tokens[:1, :-1], tokens[:1, 1:]), (tokens[1:4, :-1], tokens[1:4, 1:]),
                         (tokens[4:, :-1], tokens[4:, 1:])]
        loss, norm = reference_data_parallel_update(ours, micro_batches, language_model_loss,
                                                    make_optimizer(ours.parameters()), max_norm)
        optimizer = make_optimizer(theirs.parameters())
        whole = language_model_loss(theirs, (tokens[:, :-1], tokens[:, 1:]))
        whole.backward()
        torch_norm = torch.nn.utils.clip_grad_norm_(theirs.parameters(), max_norm)
        optimizer.step()
        assert ours.synced == [False, False, True]
        torch.testing.assert_close(loss, whole.item())
        torch.testing.assert_close(norm, torch_norm.item())
        for (name, mine), theirs_parameter in zip(ours.module.named_parameters(), theirs.parameters()):
            torch.testing.assert_close(mine, theirs_parameter, msg=name)
            assert mine.grad is None
    with pytest.raises(ValueError, match="max_norm must be a positive number"):
        reference_data_parallel_update(ours, micro_batches, language_model_loss, optimizer, 0.0)
    with pytest.raises(ValueError, match="micro_batches must hold at least one"):
        reference_data_parallel_update(ours, [], language_model_loss, optimizer, 1.0)


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
