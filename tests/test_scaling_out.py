"""Chapter 15's "What changes on 8 GPUs", measured on 2 gloo ranks (tutorial_lib.scaling_out).

One spawn of two ranks runs the five measurements (starting processes is the slow part), on synthetic tokens; each
claim then has its own test. The sharded checkpoint is loaded back here, in the test's own process, which has no
process group. Ranks meet through a ``file://`` store in the test's temporary folder: no port.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tutorial_lib.distributed import Rank, process_group
from tutorial_lib.models.gpt import GPT
from tutorial_lib.scaling_out import (
    CHECKPOINT_FOLDER,
    FULL_WEIGHTS_FILE,
    RESULT_FILE,
    ScalingOutConfig,
    batch_at,
    check_reload,
    global_mean_loss,
    load_sharded_checkpoint,
    main,
    measure_all,
    mixed_precision_gradients,
    save_sharded_checkpoint,
    seed_effects,
    uneven_inputs_with_join,
)
from tutorial_lib.training import language_model_loss

CFG = ScalingOutConfig()  # the chapter's sizes: the measurements take about 3 s
D_VOCAB = 11


def synthetic_text() -> torch.Tensor:
    return torch.randint(D_VOCAB, (4_000,), generator=torch.Generator().manual_seed(1))


def _worker(rank: int, world_size: int, init_method: str, out: str) -> None:
    torch.set_num_threads(1)
    with process_group(init_method=init_method, rank=rank, world_size=world_size) as me:
        measure_all(CFG, me, out, data=synthetic_text(), d_vocab=D_VOCAB)
        # A folder with someone else's file: every rank refuses it alike, so none is left waiting for the others.
        foreign = Path(out) / "foreign"
        if me.is_main:
            (foreign / CHECKPOINT_FOLDER).mkdir(parents=True)
            (foreign / CHECKPOINT_FOLDER / "notes.txt").write_text("mine\n")
        dist.barrier()
        try:
            save_sharded_checkpoint(CFG, me, synthetic_text(), D_VOCAB, foreign)
            refused = ""
        except ValueError as error:
            refused = str(error)
        refusals = [None] * world_size
        dist.all_gather_object(refusals, refused)
        if me.is_main:
            (Path(out) / "refusals.json").write_text(json.dumps(refusals))


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("scaling_out")
    mp.start_processes(_worker, args=(2, f"file://{out / 'store'}", str(out)), nprocs=2, join=True,
                       start_method="spawn")
    return out, json.loads((out / RESULT_FILE).read_text())


# --- the five measurements on two ranks ----------------------------------------------------------------------------------


def test_bf16_autocast_computes_in_bf16_but_reduces_fp32_gradients(two_ranks):
    mixed = two_ranks[1]["mixed_precision"]
    assert mixed["autocast_logits_dtype"] == "torch.bfloat16" and mixed["fp32_logits_dtype"] == "torch.float32"
    assert mixed["parameter_dtype"] == "torch.float32"
    assert mixed["autocast_gradient_dtypes"] == ["torch.float32"]
    assert mixed["autocast_reduced_dtypes"] == ["torch.float32"]  # what DDP's buckets held under autocast
    assert 0 < mixed["autocast_gradient_relative_error"] < 0.1
    # bf16 keeps 8 significant bits: about 2⁻⁹ relative per rounding, against float32's 2⁻²⁴
    assert 0 < mixed["bf16_reduction_relative_error"] < 0.01
    assert mixed["bf16_reduction_relative_error"] > 100 * mixed["fp32_reduction_relative_error"]


def test_one_seed_for_weights_seed_plus_rank_for_dropout_one_shuffle_for_data(two_ranks):
    seeds = two_ranks[1]["seeds"]
    p = CFG.dropout
    assert seeds["initial_weights_max_abs_difference"] == 0.0
    assert seeds["same_seed_mask_agreement"] == 1.0  # every rank drops the same units
    assert seeds["independent_mask_agreement"] == pytest.approx(p ** 2 + (1 - p) ** 2)
    # 16 384 entries: the agreement of independent masks has a standard deviation of 0.003
    assert abs(seeds["rank_seed_mask_agreement"] - seeds["independent_mask_agreement"]) < 0.02
    assert seeds["examples_per_rank"] == CFG.sampler_examples // 2
    assert seeds["shared_sampler_seed_read_twice"] == 0 and seeds["shared_sampler_seed_unread"] == 0
    assert seeds["per_rank_sampler_seed_read_twice"] > 0 and seeds["per_rank_sampler_seed_unread"] > 0


def test_join_lets_uneven_ranks_finish_with_equal_weights(two_ranks):
    join = two_ranks[1]["join"]
    assert join["batches_per_rank"] == [5, 3] and join["steps_per_rank"] == [5, 3]
    assert join["weights_max_abs_difference"] == 0.0


def test_all_reduced_loss_is_the_whole_batch_loss_and_rank0_alone_is_not(two_ranks):
    logged = two_ranks[1]["logged_loss"]
    assert logged["rank_tokens"] == [CFG.global_batch // 2 * CFG.n_ctx] * 2
    assert logged["global_minus_whole_abs"] <= 1e-6
    # one process, here, on the whole batch: the number a single-process log would show
    torch.manual_seed(CFG.seed)
    model = GPT(CFG.model_config(D_VOCAB)).eval()
    with torch.no_grad():
        one_process = language_model_loss(model, batch_at(synthetic_text(), CFG, 0)).item()
    assert abs(logged["global_mean_loss"] - one_process) <= 1e-6
    assert logged["rank0_minus_whole_abs"] > 100 * max(logged["global_minus_whole_abs"], 1e-7)
    assert logged["rank_losses"][0] != logged["rank_losses"][1]


def test_sharded_checkpoint_each_rank_writes_its_file_and_one_process_loads_it(two_ranks):
    out, result = two_ranks
    checkpoint = result["checkpoint"]
    assert "__0_0.distcp" in checkpoint["files_by_rank"]["0"] and checkpoint["files_by_rank"]["1"] == ["__1_0.distcp"]
    assert set(checkpoint["files"]) == {".metadata", "__0_0.distcp", "__1_0.distcp"}
    assert all(size > 0 for size in checkpoint["files"].values())
    held, full_bytes = checkpoint["weight_bytes_held_per_rank"], checkpoint["full_weight_bytes"]
    assert sum(held) == full_bytes and all(0.45 < h / full_bytes < 0.55 for h in held)  # FSDP2: half each
    assert not dist.is_initialized()  # this process never joined a process group
    full = torch.load(out / FULL_WEIGHTS_FILE, weights_only=True)
    torch.manual_seed(CFG.seed + 1)
    model = GPT(CFG.model_config(D_VOCAB))
    assert max((model.state_dict()[k] - full[k]).abs().max().item() for k in full) > 0  # not the trained weights yet
    loaded = load_sharded_checkpoint(out / CHECKPOINT_FOLDER, model).state_dict()
    assert loaded.keys() == full.keys()
    assert max((loaded[k] - full[k]).abs().max().item() for k in full) == 0.0
    assert check_reload(out) == 0.0


def test_rank0_writes_every_measurement_to_the_result_file(two_ranks):
    result = two_ranks[1]
    assert set(result) == {"world_size", "torch_version", "config", "d_vocab", "mixed_precision", "seeds", "join",
                           "logged_loss", "checkpoint", "seconds"}
    assert result["world_size"] == 2 and result["d_vocab"] == D_VOCAB and ScalingOutConfig(**result["config"]) == CFG
    assert set(result["seconds"]) == {"mixed_precision", "seeds", "join", "logged_loss", "checkpoint", "total"}


def test_a_folder_with_foreign_files_is_refused_on_every_rank(two_ranks):
    refusals = json.loads((two_ranks[0] / "refusals.json").read_text())
    assert len(refusals) == 2 and all("not a checkpoint's" in r for r in refusals)


# --- argument validation, in one process ---------------------------------------------------------------------------------


@pytest.mark.parametrize("field, value", [("global_batch", 0), ("n_layers", 1.5), ("checkpoint_steps", True),
                                          ("dropout", 0.0), ("dropout", 1.0), ("lr", 0.0), ("seed", -1),
                                          ("sampler_examples", 0)])
def test_config_refuses_bad_values(field, value, without_annotation_checks):
    with without_annotation_checks(), pytest.raises(ValueError, match=field):
        ScalingOutConfig(**{field: value})


def test_config_refuses_heads_that_do_not_divide_the_width():
    with pytest.raises(ValueError, match="n_heads"):
        ScalingOutConfig(d_model=64, n_heads=5)


@pytest.mark.parametrize("measure", [mixed_precision_gradients, seed_effects, global_mean_loss])
def test_measurements_need_two_ranks_and_a_divisible_batch(measure):
    data = synthetic_text()
    with pytest.raises(ValueError, match="at least 2"):
        measure(CFG, Rank(0, 1, torch.device("cpu")), data, D_VOCAB)
    with pytest.raises(ValueError, match="divisible"):
        measure(ScalingOutConfig(global_batch=15), Rank(0, 2, torch.device("cpu")), data, D_VOCAB)


def test_join_needs_one_positive_batch_count_per_rank(without_annotation_checks):
    me = Rank(0, 2, torch.device("cpu"))
    with without_annotation_checks():
        for batches in ((5,), (5, 0), (5, 3, 1), (5, 2.0)):
            with pytest.raises(ValueError, match="batches_per_rank"):
                uneven_inputs_with_join(CFG, me, synthetic_text(), D_VOCAB, batches)


def test_batches_need_enough_tokens_and_a_valid_index(without_annotation_checks):
    with pytest.raises(ValueError, match="too few"):
        batch_at(synthetic_text()[:600], CFG, 1)  # 18 windows of 32 tokens: not 2 batches of 16
    with without_annotation_checks(), pytest.raises(ValueError, match="index"):
        batch_at(synthetic_text(), CFG, -1)
    x, y = batch_at(synthetic_text(), CFG, 1)
    assert x.shape == y.shape == (CFG.global_batch, CFG.n_ctx) and torch.equal(x[0, 1:], y[0, :-1])


def test_loading_needs_a_checkpoint_folder(tmp_path):
    with pytest.raises(ValueError, match="metadata"):
        load_sharded_checkpoint(tmp_path, GPT(CFG.model_config(D_VOCAB)))


def test_measure_all_needs_d_vocab_with_data(tmp_path):
    with pytest.raises(ValueError, match="d_vocab"):
        measure_all(CFG, Rank(0, 2, torch.device("cpu")), tmp_path, data=synthetic_text())


def test_entry_point_needs_torchrun_and_two_ranks(tmp_path, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ValueError, match="torchrun"):
        main(["--out", str(tmp_path)])
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(ValueError, match="2 ranks"):
        main(["--out", str(tmp_path)])
    with pytest.raises(ValueError, match="dropout"):
        main(["--out", str(tmp_path), "--dropout", "0"])
    with pytest.raises(SystemExit):
        main([])  # --out is required
