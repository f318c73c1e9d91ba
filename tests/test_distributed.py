"""Chapter 15's data parallelism: sharding, the hand-written ring all-reduce against ``dist.all_reduce``, and the
training entry point on 2 gloo ranks against one process on the whole batch.

Ranks are spawned processes that meet through a ``file://`` store in the test's own temporary folder: no port, so
tests running side by side (pytest-xdist) cannot collide. Every worker leaves its process group in a ``finally``.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import pytest

from torch.nn.parallel import DistributedDataParallel
from torch.profiler import record_function

from tutorial_lib.distributed import (
    StepTimeline,
    accumulate_gradients,
    average_gradients,
    choose_backend,
    process_group,
    ring_all_reduce_,
    setup,
    shard_batch,
    step_timeline,
)
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.train_data_parallel import DataParallelConfig, char_windows, main, run
from tutorial_lib.training import language_model_loss

SMALL = DataParallelConfig(updates=6, global_batch=8, n_ctx=16, d_model=32, n_heads=2, n_layers=2)
D_VOCAB = 11


def synthetic_text() -> torch.Tensor:
    return torch.randint(D_VOCAB, (4_000,), generator=torch.Generator().manual_seed(1))


def spawn(worker, world_size: int, tmp_path, *args) -> None:
    """Run ``worker(rank, world_size, init_method, *args)`` in ``world_size`` processes; a failure in any raises."""
    init_method = f"file://{tmp_path / 'store'}"
    mp.start_processes(worker, args=(world_size, init_method, *args), nprocs=world_size, join=True, start_method="spawn")


# --- one process ---------------------------------------------------------------------------------------------------------


def test_shard_batch_splits_every_tensor_into_contiguous_equal_shares():
    x, y = torch.arange(12).view(6, 2), torch.arange(6)
    shards = [shard_batch((x, y), rank, 3) for rank in range(3)]
    assert torch.equal(torch.cat([s[0] for s in shards]), x) and torch.equal(torch.cat([s[1] for s in shards]), y)
    assert torch.equal(shard_batch(y, 1, 2), torch.tensor([3, 4, 5]))


def test_shard_batch_refuses_uneven_batches_and_bad_ranks(without_annotation_checks):
    with without_annotation_checks():
        with pytest.raises(ValueError, match="world_size=4"):
            shard_batch(torch.zeros(6), 0, 4)
        with pytest.raises(ValueError, match="rank"):
            shard_batch(torch.zeros(6), 2, 2)
        with pytest.raises(ValueError, match="world_size"):
            shard_batch(torch.zeros(6), 0, 0)


def test_backend_follows_the_device():
    assert choose_backend("cpu") == "gloo" and choose_backend(torch.device("cuda", 1)) == "nccl"
    with pytest.raises(ValueError, match="device"):
        choose_backend("meta")


def test_setup_outside_torchrun_needs_an_init_method(monkeypatch, without_annotation_checks):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ValueError, match="init_method"):
        setup()
    with without_annotation_checks(), pytest.raises(ValueError, match="rank"):
        setup(init_method="file:///nonexistent", rank=2, world_size=2)


def test_half_batch_gradients_average_to_the_full_batch_gradient():
    """The chapter's first principle, in one process: the loss is a mean, so its gradient is the mean of halves'."""
    torch.manual_seed(0)
    model = GPT(SMALL.model_config(D_VOCAB))
    x, y = char_windows(synthetic_text(), 16)[:8]

    def gradients(batch):
        model.zero_grad()
        language_model_loss(model, batch).backward()
        return [p.grad.clone() for p in model.parameters()]

    full = gradients((x, y))
    halves = [gradients(shard_batch((x, y), rank, 2)) for rank in range(2)]
    assert max((f - (a + b) / 2).abs().max().item() for f, a, b in zip(full, *halves)) < 1e-6


def test_entry_point_trains_in_one_process_without_torchrun(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    main(["--updates", "2", "--global-batch", "4", "--n-ctx", "8", "--d-model", "16", "--n-heads", "2",
          "--n-layers", "1", "--out", str(tmp_path)])
    assert '"world_size": 1' in capsys.readouterr().out
    assert (tmp_path / "weights.pt").exists() and (tmp_path / "result.json").exists()


# --- two and three ranks -------------------------------------------------------------------------------------------------


def _ring_differences(world_size: int, rank: int) -> float:
    """max |Δ| between the hand-written ring (sum and mean) and ``dist.all_reduce``, over three lengths."""
    worst = 0.0
    for numel in (1, 7, 64):  # fewer numbers than ranks, a length no world size divides, an even one
        mine = torch.randn(numel, generator=torch.Generator().manual_seed(rank)) * (rank + 1)
        expected = mine.clone()
        dist.all_reduce(expected)  # PyTorch's own collective: the reference
        worst = max(worst, (ring_all_reduce_(mine.clone(), average=False) - expected).abs().max().item(),
                    (ring_all_reduce_(mine.clone()) - expected / world_size).abs().max().item())
    return worst


def _ring_worker(rank: int, world_size: int, init_method: str, out: str) -> None:
    torch.set_num_threads(1)
    with process_group(init_method=init_method, rank=rank, world_size=world_size):
        worst = _ring_differences(world_size, rank)
        if rank == 0:
            torch.save({"ring": worst}, out)


def _two_rank_worker(rank: int, world_size: int, init_method: str, out: str) -> None:
    """Everything the two-rank tests examine, in one spawn (starting processes is the slow part)."""
    torch.set_num_threads(1)
    with process_group(init_method=init_method, rank=rank, world_size=world_size) as me:
        results = {"ring": _ring_differences(world_size, rank)}
        try:
            ring_all_reduce_(torch.zeros(4, 4).t())
        except ValueError as error:
            results["non_contiguous"] = str(error)
        torch.manual_seed(0)
        model = GPT(SMALL.model_config(D_VOCAB))
        batch = char_windows(synthetic_text(), 16)[:8]
        language_model_loss(model, shard_batch(batch, rank, world_size)).backward()
        average_gradients(model)
        mine = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        language_model_loss(model, batch).backward()  # every rank also computes the whole batch's gradient
        results["gradients"] = max((a - p.grad).abs().max().item() for a, p in zip(mine, model.parameters()))
        model.zero_grad()
        language_model_loss(model, shard_batch(batch, rank, world_size)).backward()
        average_gradients(model, one_message=True)
        results["one_message"] = max((a - p.grad).abs().max().item() for a, p in zip(mine, model.parameters()))
        results["timelines"] = _timelines(model, shard_batch(batch, rank, world_size))
        for strategy in ("ddp", "fsdp"):
            results[strategy] = run(dataclasses.replace(SMALL, strategy=strategy), me, data=synthetic_text(), d_vocab=D_VOCAB)
        if me.is_main:
            torch.save(results, out)


def _timelines(model, batch) -> dict:
    """Profiled steps: DDP with small buckets (and how many it made), and one message after backward."""
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.01)
    sizes = []

    def recording(state, bucket):
        sizes.append(bucket.buffer().numel())
        return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda done: done.value()[0])

    ddp.register_comm_hook(None, recording)

    def step(module, after=None):
        with record_function("step"):
            module.zero_grad(set_to_none=True)
            with record_function("forward"):
                loss = language_model_loss(module, batch)
            loss.backward()
            if after is not None:
                after(module)

    step(ddp)  # DDP's first step: one bucket, rebuilt afterwards
    sizes.clear()
    timelines = {"ddp": dataclasses.asdict(step_timeline(lambda: step(ddp))), "buckets": len(sizes),
                 "one_message": dataclasses.asdict(
                     step_timeline(lambda: step(model, lambda m: average_gradients(m, one_message=True))))}
    try:
        step_timeline(lambda: language_model_loss(model, batch).backward())
    except ValueError as error:
        timelines["unmarked"] = str(error)
    return timelines


def test_two_gloo_ranks(tmp_path):
    """One spawn of two ranks (starting processes is the slow part), then every claim it measured: the ring by hand
    equals ``dist.all_reduce``; averaged shard gradients equal the whole batch's; DDP and FSDP2 on two ranks end with
    the weights of one process on the whole batch; DDP keeps a full copy per rank and FSDP2 half."""
    spawn(_two_rank_worker, 2, tmp_path, str(tmp_path / "rank0.pt"))
    two_ranks = torch.load(tmp_path / "rank0.pt", weights_only=True)
    assert two_ranks["ring"] < 1e-6
    assert "contiguous" in two_ranks["non_contiguous"]
    assert two_ranks["gradients"] < 1e-6 and two_ranks["one_message"] < 1e-6
    timelines = two_ranks["timelines"]
    ddp, one_message = (StepTimeline.from_dict(timelines[way]) for way in ("ddp", "one_message"))
    assert timelines["buckets"] > 1 and len(ddp.all_reduces) == timelines["buckets"]  # gloo's events, one per bucket
    for timeline in (ddp, one_message):
        assert 0 <= timeline.forward[0] < timeline.forward[1] <= timeline.backward[0] < timeline.backward[1]
        # gloo's thread may record an all-reduce's end a little after the main thread saw it finish and left the step
        assert all(0 < start < min(end, timeline.step[1]) for start, end in timeline.all_reduces)
        assert len(timeline.launches) == len(timeline.all_reduces)  # each call of all_reduce, and its run
        assert all(launch <= start for launch, (start, _) in zip(timeline.launches, timeline.all_reduces))
    assert len(one_message.all_reduces) == 1 and one_message.all_reduces_launched_during_backward() == 0
    # small buckets: all but the last (the embeddings', whose gradients are ready last) leave during backward
    assert ddp.all_reduces_launched_during_backward() == timelines["buckets"] - 1
    assert one_message.milliseconds_overlapped() == 0 < one_message.milliseconds_communicating()
    assert "record_function('step')" in timelines["unmarked"]
    one = run(SMALL, None, data=synthetic_text(), d_vocab=D_VOCAB)
    assert one["comm_ms_per_step"] == 0
    for strategy in ("ddp", "fsdp"):
        two = two_ranks[strategy]
        assert one["weights"].keys() == two["weights"].keys()
        difference = max((one["weights"][k] - two["weights"][k]).abs().max().item() for k in one["weights"])
        assert difference < 1e-4, (strategy, difference)
        assert two["comm_ms_per_step"] > 0
    ddp, fsdp = two_ranks["ddp"], two_ranks["fsdp"]
    # DDP: a full copy of the weights and of Adam's two moments per rank
    assert ddp["parameter_bytes"] == one["parameter_bytes"] and ddp["optimizer_bytes"] == one["optimizer_bytes"]
    # FSDP2: half of every weight and of its moments (a dim-0 shard, rounded up per tensor)
    assert 0.45 < fsdp["parameter_bytes"] / one["parameter_bytes"] < 0.56
    assert 0.45 < fsdp["optimizer_bytes"] / one["optimizer_bytes"] < 0.56


def test_ring_all_reduce_by_hand_matches_dist_all_reduce_on_three_ranks(tmp_path):
    spawn(_ring_worker, 3, tmp_path, str(tmp_path / "rank0.pt"))
    assert torch.load(tmp_path / "rank0.pt", weights_only=True)["ring"] < 1e-6


def test_config_refuses_unknown_strategies_and_bucket_sizes():
    with pytest.raises(ValueError, match="strategy"):
        DataParallelConfig(strategy="zero")
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        DataParallelConfig(bucket_cap_mb=0)
    assert DataParallelConfig().bucket_cap_mb is None  # PyTorch's default: a small first bucket


def test_accumulated_micro_batches_of_unequal_sizes_give_the_whole_batch_gradient():
    torch.manual_seed(0)
    model = GPT(SMALL.model_config(D_VOCAB))
    x, y = char_windows(synthetic_text(), 16)[:8]
    model.zero_grad()
    whole_loss = language_model_loss(model, (x, y))
    whole_loss.backward()
    whole = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():  # stale gradients must not count
        p.grad = torch.ones_like(p)
    loss = accumulate_gradients(model, [(x[:3], y[:3]), (x[3:], y[3:])], language_model_loss)
    assert abs(loss - whole_loss.item()) < 1e-6
    assert max((w - p.grad).abs().max().item() for w, p in zip(whole, model.parameters())) < 1e-6
    with pytest.raises(ValueError, match="micro_batches"):
        accumulate_gradients(model, [], language_model_loss)
