"""Chapter 15's memory and traffic per rank in one update (tutorial_lib.memory_per_rank).

One spawn of two gloo ranks measures an update under FSDP2 and under DDP (starting processes is the slow part); this
process measures one process on the whole batch and FSDP2 on a group of one. Every measurement is on synthetic tokens
with the chapter's model (MEMORY_CONFIG). Sizes of allocations do not depend on the CPU, so the margins below are
those of the arithmetic: the rounding of odd first axes under sharding, FSDP2's padding, and what is live at the peak.
Ranks meet through a ``file://`` store in the test's temporary folder: no port.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.multiprocessing as mp

from tutorial_lib.distributed import Rank, process_group
from tutorial_lib.memory_per_rank import (
    KINDS,
    MEMORY_CONFIG,
    STEP_LABEL,
    StepMemory,
    _replay,
    main,
    measure_step,
    memory_table,
    update,
)
from tutorial_lib.models.gpt import GPT
from tutorial_lib.train_data_parallel import DataParallelConfig, char_windows, sharded_batches
from tutorial_lib.training import language_model_loss, make_adamw, train

D_VOCAB = 65  # Tiny Shakespeare's characters: the chapter's parameter count
N_GROUPS = MEMORY_CONFIG.n_layers + 1  # a group per block, and the root's (embeddings, final norm)


def synthetic_text() -> torch.Tensor:
    return torch.randint(D_VOCAB, (4_000,), generator=torch.Generator().manual_seed(1))


def _worker(rank: int, world_size: int, init_method: str, out: str) -> None:
    torch.set_num_threads(1)
    with process_group(init_method=init_method, rank=rank, world_size=world_size) as me:
        results = {strategy: measure_step(dataclasses.replace(MEMORY_CONFIG, strategy=strategy), me,
                                          data=synthetic_text(), d_vocab=D_VOCAB).to_json()
                   for strategy in ("fsdp", "ddp")}
    with open(f"{out}/rank{rank}.json", "w") as file:
        json.dump(results, file)


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> dict:
    """Every measurement the tests examine: one process, FSDP2 on 1 rank, and both ranks of FSDP2 and of DDP."""
    out = tmp_path_factory.mktemp("memory_per_rank")
    mp.start_processes(_worker, args=(2, f"file://{out / 'store'}", str(out)), nprocs=2, join=True,
                       start_method="spawn")
    ranks = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]
    one = measure_step(MEMORY_CONFIG, None, data=synthetic_text(), d_vocab=D_VOCAB)
    with process_group(init_method=f"file://{out / 'store_one'}", rank=0, world_size=1) as me:
        fsdp_one = measure_step(dataclasses.replace(MEMORY_CONFIG, strategy="fsdp"), me, data=synthetic_text(),
                                d_vocab=D_VOCAB).to_json()
    return {"one": one.to_json(), "one, measured": one, "fsdp1": fsdp_one,
            "fsdp2": [r["fsdp"] for r in ranks], "ddp2": [r["ddp"] for r in ranks]}


def every_row(rows: dict) -> list[dict]:
    return [rows["one"], rows["fsdp1"], *rows["fsdp2"], *rows["ddp2"]]


# --- what is counted from the tensors ---------------------------------------------------------------------------------


def test_counted_parts_follow_the_arithmetic(rows):
    one = rows["one"]
    assert one["n_parameters"] == 805_760 and one["parameter_bytes"] == 4 * one["n_parameters"]  # float32
    for row in every_row(rows):
        assert row["optimizer_bytes"] == 2 * row["parameter_bytes"]  # AdamW: two moments per parameter
        assert row["gradient_bytes"] == row["parameter_bytes"]  # a gradient per parameter (a shard's under FSDP2)
    for row in [rows["fsdp1"], *rows["ddp2"]]:  # a full copy: DDP by design, FSDP2 with nobody to share with
        assert row["parameter_bytes"] == one["parameter_bytes"]
    shards = [row["parameter_bytes"] for row in rows["fsdp2"]]
    assert sum(shards) == one["parameter_bytes"]  # the two slices of every weight make the weight
    assert all(0.5 <= share / one["parameter_bytes"] < 0.502 for share in shards[:1])  # rank 0 takes the odd row
    assert all(0.498 < share / one["parameter_bytes"] <= 0.5 for share in shards[1:])
    for row in [rows["fsdp1"], *rows["fsdp2"]]:
        assert len(row["group_bytes"]) == N_GROUPS and sum(row["group_bytes"]) == one["parameter_bytes"]
        assert row["gathered_block_bytes"] == max(row["group_bytes"][:-1])  # a block: the root group is smaller
    assert one["group_bytes"] == [] and one["gathered_block_bytes"] == 0


# --- what the allocator held ------------------------------------------------------------------------------------------


def test_the_peak_holds_at_least_the_counted_parts(rows):
    for row in every_row(rows):
        assert sum(row["at_peak"].values()) == row["peak_bytes"] and list(row["at_peak"]) == list(KINDS)
        assert row["peak_bytes"] >= row["before_bytes"] >= row["parameter_bytes"] + row["optimizer_bytes"]
        assert row["rest_bytes"] == row["peak_bytes"] - row["counted_bytes"] >= 0, row["strategy"]
        # the storages: FSDP2 pads a rank's slices to the size of the largest (rank 0's)
        assert 0 <= row["at_peak"]["parameters"] - row["parameter_bytes"] < 0.001 * row["parameter_bytes"]
        assert row["at_peak"]["AdamW state"] == row["optimizer_bytes"]
        assert row["at_peak"]["activations and temporaries"] > 0
        assert row["peak_in"].startswith("forward")  # the previous gradients are freed only after the forward
        assert 0 <= row["at_peak"]["gradients"] - row["gradient_bytes"] < 0.001 * row["gradient_bytes"]
    for row in [rows["fsdp1"], *rows["fsdp2"]]:  # at the peak a block is gathered, and the root's weights are too
        assert row["at_peak"]["gathered weights"] >= row["gathered_block_bytes"] + row["group_bytes"][-1]
    for row in rows["fsdp2"]:
        # with 2 ranks, FSDP's all-gather buffer of that block as well (kept until the next group's all-gather)
        assert row["at_peak"]["gathered weights"] >= 2 * row["gathered_block_bytes"] + row["group_bytes"][-1]
        assert row["gloo_thread_allocations"] > 0  # the allocations of gloo's threads are seen
    for row in [rows["one"], *rows["ddp2"]]:
        assert row["at_peak"]["gathered weights"] == row["at_peak"]["communication buffers"] == 0
    for row in rows["ddp2"]:  # DDP's buckets: a second copy of the gradients, held from one update to the next
        assert row["at_peak"]["other, held between updates"] >= row["gradient_bytes"]


def test_sharding_lowers_the_peak(rows):
    one, fsdp1 = rows["one"], rows["fsdp1"]
    for fsdp2, ddp2 in zip(rows["fsdp2"], rows["ddp2"]):
        assert fsdp2["peak_bytes"] < ddp2["peak_bytes"] < one["peak_bytes"]
        # half the batch per rank: half the activations, under either strategy
        for row in (fsdp2, ddp2):
            ratio = row["at_peak"]["activations and temporaries"] / one["at_peak"]["activations and temporaries"]
            assert 0.45 < ratio < 0.55, ratio
    assert fsdp1["peak_bytes"] >= one["peak_bytes"]  # alone, FSDP2 saves nothing and gathers copies
    assert fsdp1["traffic_bytes"] == 0 and one["traffic_bytes"] == 0


def test_measurements_repeat(rows):
    """Allocation sizes do not depend on timing: the two ranks of DDP hold the same, and one process's figures are
    the same when measured again."""
    again = measure_step(MEMORY_CONFIG, None, data=synthetic_text(), d_vocab=D_VOCAB).to_json()
    for key in ("before_bytes", "peak_bytes", "at_peak", "parameter_bytes", "gradient_bytes", "optimizer_bytes"):
        assert again[key] == rows["one"][key], key
    first, second = rows["ddp2"]
    assert abs(first["peak_bytes"] - second["peak_bytes"]) < 4096  # a few small tensors come and go with timing


# --- what was sent ----------------------------------------------------------------------------------------------------


def test_traffic_of_fsdp2_is_three_halves_of_ddp(rows):
    one = rows["one"]
    n, parameter_bytes = one["n_parameters"], one["parameter_bytes"]
    for fsdp, ddp in zip(rows["fsdp2"], rows["ddp2"]):
        # DDP: one all-reduce of every gradient (in buckets), 2 (N-1)/N of them sent per rank
        assert set(ddp["requested"]) == {"all_reduce"} and ddp["requested"]["all_reduce"]["elements"] == n
        assert ddp["traffic_bytes"] == parameter_bytes
        # FSDP2: an all-gather per group before forward, again before backward but for the root (not resharded
        # after forward), a reduce-scatter per group; the clipping adds one all-reduce of a few norms
        calls = fsdp["requested"]
        assert calls["all_gather"]["count"] == 2 * N_GROUPS - 1 and calls["reduce_scatter"]["count"] == N_GROUPS
        assert calls["all_reduce"]["count"] == 1 and calls["all_reduce"]["elements"] < 100
        root = fsdp["group_bytes"][-1]
        # padding: each weight's first axis is rounded up to a multiple of the 2 ranks
        assert 0 <= calls["reduce_scatter"]["bytes"] - parameter_bytes < 0.001 * parameter_bytes
        assert 0 <= calls["all_gather"]["bytes"] - (2 * parameter_bytes - root) < 0.001 * parameter_bytes
        expected = (3 * parameter_bytes - root) / (2 * parameter_bytes)  # (3 - root's share) (N-1)/N against 2 (N-1)/N
        assert fsdp["traffic_bytes"] / ddp["traffic_bytes"] == pytest.approx(expected, rel=0.002)
        assert 1.45 < expected < 1.5
        # gloo runs each reduce-scatter as an all-reduce of the whole tensor: twice the bytes a ring needs
        ran = fsdp["executed"]
        assert "reduce_scatter" not in ran
        assert ran["all_reduce"]["elements"] == calls["reduce_scatter"]["elements"] + calls["all_reduce"]["elements"]
        assert ran["all_gather"] == calls["all_gather"]
        assert fsdp["uncounted"] == [] and ddp["uncounted"] == []
        assert fsdp["gloo_traffic_bytes"] / ddp["traffic_bytes"] == pytest.approx(expected + 0.5, rel=0.002)


# --- the replay of the profiler's events, on a trace written by hand --------------------------------------------------


def memory_event(ts: float, address: int, size: int, tid: int = 1) -> dict:
    return {"ph": "i", "name": "[memory]", "ts": ts, "tid": tid,
            "args": {"Addr": address, "Bytes": size, "Device Type": 0}}


def span(name: str, ts: float, dur: float, tid: int = 1) -> dict:
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "tid": tid, "args": {}}


def test_replay_counts_by_address_and_frees_collectives_copies_where_the_caller_let_go():
    events = [
        memory_event(0, 0xA, 100),  # a parameter, live throughout
        memory_event(1, 0xB, 40),  # a gradient of the previous update, freed by zero_grad
        memory_event(2, 0xC, 999, tid=7),  # a gloo thread's block, freed there
        memory_event(3, 0xC, -999, tid=7),
        memory_event(4, 0xF, -5000),  # the free of a block allocated before this trace: ignored
        span(STEP_LABEL, 10, 90),
        span("forward", 11, 20),
        memory_event(12, 0xD, 300),  # an activation
        span("FSDP::post_backward_reduce (blocks.0)", 40, 20),
        span("c10d::_reduce_scatter_base_", 41, 2),
        memory_event(42, 0xE, 50),  # gloo's copy of the reduce-scatter input: its free is never seen
        memory_event(45, 0xB, -40),
        memory_event(70, 0xD, -300),
        memory_event(80, 0xD, 20),  # a new block where the activation was
    ]
    kinds = {"parameters": {0xA}, "old gradients": {0xB}, "AdamW state": set(), "new gradients": set()}
    replay = _replay({"traceEvents": events}, kinds)
    assert replay["before"] == 140 and replay["peak"] == 490  # 100 + 40 + 300 + 50 at t = 42
    assert replay["at_peak"]["parameters"] == 100 and replay["at_peak"]["gradients"] == 40
    assert replay["at_peak"]["communication buffers"] == 50
    assert replay["at_peak"]["activations and temporaries"] == 300
    assert replay["unseen"] == 1 and replay["peak_in"] == "between phases: c10d::_reduce_scatter_base_"
    assert replay["gloo_threads"] == 0  # the gloo thread's block came before the update


# --- the loop, the arguments, the entry point -------------------------------------------------------------------------


def test_update_is_an_update_of_chapter_09s_loop():
    cfg = DataParallelConfig(global_batch=4, n_ctx=8, d_model=16, n_heads=2, n_layers=1, updates=3)
    weights = []
    for by_hand in (True, False):
        torch.manual_seed(cfg.seed)
        model = GPT(cfg.model_config(D_VOCAB))
        optimizer = make_adamw(model, lr=cfg.lr, weight_decay=0.1)
        batches = sharded_batches(char_windows(synthetic_text(), cfg.n_ctx), cfg.global_batch, 0, 1, cfg.seed)
        if by_hand:
            for step in range(cfg.updates):
                update(model, optimizer, batches(), step, cfg.train_config())
        else:
            train(model, batches, language_model_loss, cfg.train_config(), device="cpu", optimizer=optimizer,
                  progress=False)
        weights.append(model.state_dict())
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_measure_step_refuses_bad_arguments(without_annotation_checks):
    data = synthetic_text()
    with without_annotation_checks(), pytest.raises(ValueError, match="cfg"):
        measure_step({"d_model": 128}, data=data, d_vocab=D_VOCAB)  # what a notebook, unchecked, would see
    with pytest.raises(ValueError, match="warmup_updates"):
        measure_step(MEMORY_CONFIG, data=data, d_vocab=D_VOCAB, warmup_updates=0)
    with pytest.raises(ValueError, match="warmup_updates"):
        measure_step(MEMORY_CONFIG, data=data, d_vocab=D_VOCAB, warmup_updates=True)
    with pytest.raises(ValueError, match="cfg.updates=3"):
        measure_step(dataclasses.replace(MEMORY_CONFIG, updates=3), data=data, d_vocab=D_VOCAB, warmup_updates=3)
    with pytest.raises(ValueError, match="global_batch=16"):
        measure_step(MEMORY_CONFIG, Rank(0, 3, torch.device("cpu")), data=data, d_vocab=D_VOCAB)
    with pytest.raises(ValueError, match="device"):
        measure_step(MEMORY_CONFIG, Rank(0, 1, torch.device("cuda", 0)), data=data, d_vocab=D_VOCAB)
    with pytest.raises(ValueError, match="d_vocab"):
        measure_step(MEMORY_CONFIG, data=data)
    with pytest.raises(SystemExit):
        main(["--keep-traces"])  # the traces need a folder


def test_entry_point_without_torchrun_writes_one_process_figures(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    main(["--global-batch", "4", "--n-ctx", "8", "--d-model", "16", "--n-heads", "2", "--n-layers", "1",
          "--out", str(tmp_path), "--keep-traces"])
    written = json.loads((tmp_path / "memory.json").read_text())
    assert written["strategy"] == "one process" and written["ranks"][0]["peak_bytes"] == written["peak_bytes"]
    assert written["peak_bytes"] >= written["counted_bytes"] > 0 and written["config"]["d_model"] == 16
    assert '"strategy": "one process"' in capsys.readouterr().out
    assert (tmp_path / "trace_rank0.json").exists()


def test_memory_table_has_a_line_per_row(rows):
    assert isinstance(rows["one, measured"], StepMemory)
    table = memory_table({"1 process": rows["one, measured"], "FSDP2, 2 ranks": rows["fsdp2"][0]})
    lines = table.splitlines()
    assert len(lines) == 3 and lines[1].startswith("1 process") and "peak" in lines[0]
    assert f"{rows['one']['peak_bytes'] / 1e6:.2f}" in lines[1]
    assert f"{rows['fsdp2'][0]['peak_bytes'] / 1e6:.2f}" in lines[2]
