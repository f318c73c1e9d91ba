"""What changes on 8 GPUs (chapter 15), measured where it can be: on CPU processes that talk through gloo.

    torchrun --standalone --nproc_per_node=2 -m tutorial_lib.scaling_out --out runs/scaling_out

Five small measurements on a small GPT, one function each, every rank calling each in turn (they all use
collectives):

1. :func:`mixed_precision_gradients`: a forward and backward under bf16 autocast still hands DDP float32 gradients to
   all-reduce; reducing them in bf16 instead costs accuracy.
2. :func:`seed_effects`: one seed for the weights (equal on every rank), seed + rank for dropout (independent masks),
   one shared seed for the data order (disjoint shards).
3. :func:`uneven_inputs_with_join`: ranks with different numbers of batches finish together under DDP's ``join()``.
4. :func:`global_mean_loss`: the loss a log should show is the all-reduced mean over every rank's tokens, not rank 0's.
5. :func:`save_sharded_checkpoint`: each FSDP2 rank writes its own shard with ``torch.distributed.checkpoint``;
   :func:`load_sharded_checkpoint` reads them into a plain model in one process, without a process group.

Rank 0 alone writes ``scaling_out.json`` (:func:`measure_all`) to ``--out``, beside the checkpoint's folder and
``full_weights.pt``, the gathered weights the checkpoint must reproduce.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from tutorial_lib.distributed import Rank, setup, shard_batch, teardown
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.train_data_parallel import char_windows, full_state
from tutorial_lib.training import language_model_loss, make_adamw, save_atomically

RESULT_FILE = "scaling_out.json"
CHECKPOINT_FOLDER = "checkpoint"  # torch.distributed.checkpoint's folder, inside --out
FULL_WEIGHTS_FILE = "full_weights.pt"  # the gathered weights, for comparing with what the checkpoint loads
_SHARD_FILE = re.compile(r"__(\d+)_\d+\.distcp")  # FileSystemWriter's name for rank r's files: __r_i.distcp


@dataclass(frozen=True)
class ScalingOutConfig:
    """The small GPT and the batches every measurement uses (sizes that keep the whole launch to seconds)."""

    global_batch: int = 16  # sequences per step, summed over the ranks
    n_ctx: int = 32
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    dropout: float = 0.1  # only the seeds' measurement turns dropout on: its masks are what it compares
    lr: float = 1e-3
    seed: int = 0
    checkpoint_steps: int = 2  # updates before the sharded checkpoint is written (so it is not the initialisation)
    sampler_examples: int = 64  # the small dataset whose epoch the DistributedSampler deals out

    def __post_init__(self) -> None:
        for name in ("global_batch", "n_ctx", "d_model", "n_heads", "n_layers", "checkpoint_steps", "sampler_examples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")
        if not 0.0 < self.dropout < 1.0:  # with p = 0 there is no mask to compare
            raise ValueError(f"dropout must be in (0, 1), got {self.dropout!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        self.model_config(2)  # d_model divisible by n_heads: refused now rather than inside a rank

    def model_config(self, d_vocab: int, *, dropout: float = 0.0) -> GPTConfig:
        return GPTConfig(d_vocab=d_vocab, n_ctx=self.n_ctx, d_model=self.d_model, n_heads=self.n_heads,
                         n_layers=self.n_layers, dropout=dropout, fast_attention=True, fast_norm=True)


# --- helpers -------------------------------------------------------------------------------------------------------------


def _check_ranks(me: Rank, cfg: ScalingOutConfig) -> None:
    if not isinstance(me, Rank):
        raise ValueError(f"me must be the Rank that setup() returned, got {me!r}")
    if me.world_size < 2:
        raise ValueError(f"these measurements compare ranks: they need a world_size of at least 2, got {me.world_size}")
    if cfg.global_batch % me.world_size:
        raise ValueError(f"global_batch={cfg.global_batch} must be divisible by the {me.world_size} ranks")


def batch_at(data: Tensor, cfg: ScalingOutConfig, index: int) -> tuple[Tensor, Tensor]:
    """The ``index``-th batch of ``cfg.global_batch`` consecutive windows of ``data``: the same on every rank, which
    then takes its shard (:func:`~tutorial_lib.distributed.shard_batch`)."""
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"index must be a non-negative int, got {index!r}")
    n_windows = (index + 1) * cfg.global_batch
    if (len(data) - 1) // cfg.n_ctx < n_windows:
        raise ValueError(f"data holds {len(data)} tokens: too few for {index + 1} batches of {cfg.global_batch} "
                         f"windows of {cfg.n_ctx} tokens")
    x, y = char_windows(data, cfg.n_ctx, n_windows)[index * cfg.global_batch:]
    return x, y


def _flat(tensors) -> Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def _relative_error(value: Tensor, reference: Tensor) -> float:
    """‖value − reference‖ / ‖reference‖ in float64: one number for a whole gradient (an element's own relative
    error is meaningless where the reference is near 0)."""
    value, reference = value.double(), reference.double()
    return ((value - reference).norm() / reference.norm()).item()


def _gather(tensor: Tensor) -> list[Tensor]:
    """Every rank's ``tensor`` (same shape on each), in rank order."""
    gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, tensor.contiguous())
    return gathered


def _max_spread(tensor: Tensor) -> float:
    """max |Δ| between rank 0's ``tensor`` and any other rank's: 0.0 when every rank holds the same numbers."""
    gathered = _gather(tensor)
    return max((t - gathered[0]).abs().max().item() for t in gathered[1:])


# --- 1. bf16 compute, fp32 reduction -------------------------------------------------------------------------------------


def bf16_allreduce_hook(state, bucket):  # no annotations: DDP compares them with the real classes, not strings
    """A DDP communication hook that averages a bucket of gradients in bfloat16: cast, divide by the world size,
    all-reduce, cast back into the float32 bucket. What PyTorch's ``bf16_compress_hook`` does, which DDP accepts only
    with NCCL (or XCCL); gloo sums bfloat16 tensors too. ``state`` is the process group (None: all ranks),
    ``bucket`` a ``dist.GradBucket``; returns a ``torch.futures.Future`` of the averaged bucket."""
    group = state if state is not None else dist.group.WORLD
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(group.size())

    def decompress(future: torch.futures.Future) -> Tensor:
        buffer.copy_(future.value()[0])
        return buffer

    return dist.all_reduce(compressed, group=group, async_op=True).get_future().then(decompress)


def mixed_precision_gradients(cfg: ScalingOutConfig, me: Rank, data: Tensor, d_vocab: int) -> dict:
    """What bf16 autocast changes in a DDP step, and what reducing the gradients in bf16 would add.

    Autocast runs the matrix products in bfloat16 (8 significant bits) but the parameters stay float32, and so do
    their gradients: a hook on DDP's buckets records the dtype DDP all-reduces. Reducing in bf16 instead
    (:func:`bf16_allreduce_hook`: cast each bucket, all-reduce, cast back) rounds every gradient once more, and a
    ring's sum over many ranks in bf16 rounds again at every addition. Hence the rule: compute in bf16, keep the
    weights, the gradients' reduction and the optimizer in fp32. FSDP2 writes it as
    ``fully_shard(module, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))``
    (``torch.distributed.fsdp.MixedPrecisionPolicy``, present in torch 2.13).

    The errors are ‖g − g_ref‖ / ‖g_ref‖ over all parameters, against the average of the ranks' float32 gradients
    computed in float64 (the exact fp32 average) or, for autocast, against the float32 step's averaged gradient.
    Autocast runs here whatever the CPU: without native bf16 it is slow, not different in its numbers' dtypes.
    """
    _check_ranks(me, cfg)
    shard = shard_batch(batch_at(data, cfg, 0), me.rank, me.world_size)

    def fresh_model() -> GPT:
        torch.manual_seed(cfg.seed)  # identical weights for every variant below, on every rank
        return GPT(cfg.model_config(d_vocab))

    # The reference: each rank's own float32 gradient (no DDP), averaged over the ranks in float64.
    plain = fresh_model()
    language_model_loss(plain, shard).backward()
    exact = _flat(p.grad for p in plain.parameters()).double()
    dist.all_reduce(exact)
    exact /= me.world_size

    reduced_dtypes: list[torch.dtype] = []

    def recording_allreduce(state, bucket):  # DDP's default hook, after noting what it is handed
        reduced_dtypes.append(bucket.buffer().dtype)
        return default_hooks.allreduce_hook(state, bucket)

    model = DistributedDataParallel(fresh_model())
    model.register_comm_hook(None, recording_allreduce)

    def averaged_gradient(autocast: bool) -> tuple[Tensor, torch.dtype]:
        model.zero_grad(set_to_none=True)
        x, y = shard
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(x)
        F.cross_entropy(logits.float().flatten(0, 1), y.flatten()).backward()  # the loss itself in fp32
        return _flat(p.grad for p in model.parameters()), logits.dtype

    fp32_gradient, fp32_logits_dtype = averaged_gradient(autocast=False)
    reduced_dtypes.clear()
    autocast_gradient, autocast_logits_dtype = averaged_gradient(autocast=True)
    gradient_dtypes = {str(p.grad.dtype) for p in model.parameters()}

    bf16_model = DistributedDataParallel(fresh_model())
    bf16_model.register_comm_hook(None, bf16_allreduce_hook)
    language_model_loss(bf16_model, shard).backward()  # float32 compute, bf16 reduction
    bf16_reduced = _flat(p.grad for p in bf16_model.parameters())

    return {
        "fp32_logits_dtype": str(fp32_logits_dtype),
        "autocast_logits_dtype": str(autocast_logits_dtype),
        "parameter_dtype": str(next(model.parameters()).dtype),
        "autocast_gradient_dtypes": sorted(gradient_dtypes),
        "autocast_reduced_dtypes": sorted({str(d) for d in reduced_dtypes}),  # what DDP all-reduced under autocast
        "autocast_gradient_relative_error": _relative_error(autocast_gradient, fp32_gradient),
        "fp32_reduction_relative_error": _relative_error(fp32_gradient, exact),
        "bf16_reduction_relative_error": _relative_error(bf16_reduced, exact),
    }


# --- 2. seeds per rank ---------------------------------------------------------------------------------------------------


def _dropout_mask(model: GPT, tokens: Tensor) -> Tensor:
    """The mask the model's first dropout (on the embeddings) draws in one training forward: True where kept."""
    masks = []
    handle = model.dropout.register_forward_hook(lambda module, inputs, output: masks.append(output != 0))
    try:
        model.train()
        with torch.no_grad():
            model(tokens)
    finally:
        handle.remove()
    return masks[0]


def _sampler_indices(cfg: ScalingOutConfig, me: Rank, seed: int) -> Tensor:
    sampler = DistributedSampler(range(cfg.sampler_examples), num_replicas=me.world_size, rank=me.rank,
                                 shuffle=True, seed=seed, drop_last=True)
    return torch.tensor(list(sampler))


def _read_twice_and_unread(indices: list[Tensor], n_examples: int) -> tuple[int, int]:
    reads = torch.bincount(torch.cat(indices), minlength=n_examples)
    return int((reads > 1).sum()), int((reads == 0).sum())


def seed_effects(cfg: ScalingOutConfig, me: Rank, data: Tensor, d_vocab: int) -> dict:
    """Which randomness must agree across ranks and which must not.

    The initial weights: one seed on every rank, or each rank trains a different model (DDP happens to broadcast
    rank 0's weights when it wraps the model; FSDP2's ``fully_shard`` does not, each rank keeping its slice of its own
    initialisation). Dropout: reseeded with seed + rank once the model is built, or every rank drops the same units
    and the ranks' noise is one noise repeated, not averaged out. The data order: one shuffle for all ranks (the
    sampler's seed shared), each taking its disjoint share; a per-rank sampler seed deals overlapping shares, some
    examples read twice per epoch and others never.

    Mask agreement is the fraction of mask entries equal on every rank; independent masks of drop probability p
    agree on p² + (1 − p)² of them (2 ranks).
    """
    _check_ranks(me, cfg)
    model_config = cfg.model_config(d_vocab, dropout=cfg.dropout)
    tokens = batch_at(data, cfg, 0)[0][: cfg.global_batch // me.world_size]  # the same tokens on every rank

    torch.manual_seed(cfg.seed)
    model = GPT(model_config)
    weights_spread = _max_spread(_flat(model.parameters()))
    same_seed_mask = _dropout_mask(model, tokens)  # the generator just went on from the same state everywhere

    torch.manual_seed(cfg.seed)
    model = GPT(model_config)
    torch.manual_seed(cfg.seed + me.rank)  # after the weights: they stay equal, the masks part ways
    rank_seed_mask = _dropout_mask(model, tokens)

    def agreement(mask: Tensor) -> float:
        masks = _gather(mask.to(torch.uint8))
        return torch.stack([m == masks[0] for m in masks]).all(dim=0).float().mean().item()

    p = cfg.dropout
    shared = _gather(_sampler_indices(cfg, me, cfg.seed))
    per_rank = _gather(_sampler_indices(cfg, me, cfg.seed + me.rank))
    shared_twice, shared_unread = _read_twice_and_unread(shared, cfg.sampler_examples)
    per_rank_twice, per_rank_unread = _read_twice_and_unread(per_rank, cfg.sampler_examples)
    return {
        "initial_weights_max_abs_difference": weights_spread,
        "dropout_p": p,
        "mask_entries": same_seed_mask.numel(),
        "same_seed_mask_agreement": agreement(same_seed_mask),
        "rank_seed_mask_agreement": agreement(rank_seed_mask),
        "independent_mask_agreement": p ** me.world_size + (1 - p) ** me.world_size,
        "sampler_examples": cfg.sampler_examples,
        "examples_per_rank": len(shared[0]),
        "shared_sampler_seed_read_twice": shared_twice,
        "shared_sampler_seed_unread": shared_unread,
        "per_rank_sampler_seed_read_twice": per_rank_twice,
        "per_rank_sampler_seed_unread": per_rank_unread,
    }


# --- 3. uneven inputs ----------------------------------------------------------------------------------------------------


def uneven_inputs_with_join(cfg: ScalingOutConfig, me: Rank, data: Tensor, d_vocab: int,
                            batches_per_rank: Sequence[int]) -> dict:
    """Rank r trains on ``batches_per_rank[r]`` batches inside DDP's ``join()`` and every rank finishes.

    Without ``join()`` the rank with batches left would wait forever in an all-reduce the finished rank never
    joins. Inside it, a finished rank answers the others' all-reduces with zero gradients (still divided by the
    initial world size, so those steps are half steps with 2 ranks), and when the last rank finishes DDP broadcasts
    its weights to all: the weights end equal (the optimizers' states need not: plain SGD here has none).
    """
    _check_ranks(me, cfg)
    if (not isinstance(batches_per_rank, (tuple, list)) or len(batches_per_rank) != me.world_size
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in batches_per_rank)):
        raise ValueError(f"batches_per_rank must hold one positive int per rank ({me.world_size}), "
                         f"got {batches_per_rank!r}")
    torch.manual_seed(cfg.seed)
    model = DistributedDataParallel(GPT(cfg.model_config(d_vocab)))
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    steps = 0
    with model.join():
        for index in range(batches_per_rank[me.rank]):
            optimizer.zero_grad(set_to_none=True)
            language_model_loss(model, shard_batch(batch_at(data, cfg, index), me.rank, me.world_size)).backward()
            optimizer.step()
            steps += 1
    return {
        "batches_per_rank": list(batches_per_rank),
        "steps_per_rank": [int(s) for s in _gather(torch.tensor([steps]))],
        "weights_max_abs_difference": _max_spread(_flat(model.module.parameters())),
    }


# --- 4. a logged metric --------------------------------------------------------------------------------------------------


def global_mean_loss(cfg: ScalingOutConfig, me: Rank, data: Tensor, d_vocab: int) -> dict:
    """The batch's mean loss from the ranks' shards: all-reduce Σ(loss × tokens) and Σ tokens, then divide.

    Rank 0's own loss is the loss of its shard only; a log that prints it reports 1/world_size of the batch. The
    sums are kept in float64, so the mean does not depend on how the tokens were split. Every rank also computes the
    whole batch's loss itself, the number one process would log.
    """
    _check_ranks(me, cfg)
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.model_config(d_vocab)).eval()
    batch = batch_at(data, cfg, 0)

    def summed_loss(x: Tensor, y: Tensor) -> Tensor:
        with torch.no_grad():
            return F.cross_entropy(model(x).flatten(0, 1).double(), y.flatten(), reduction="sum")

    x, y = shard_batch(batch, me.rank, me.world_size)
    own_sum = summed_loss(x, y)
    totals = torch.stack([own_sum, torch.tensor(float(y.numel()), dtype=torch.float64)])
    dist.all_reduce(totals)  # [Σ loss × tokens, Σ tokens] over the ranks
    global_mean = (totals[0] / totals[1]).item()
    whole = (summed_loss(*batch) / batch[1].numel()).item()
    own_losses = _gather((own_sum / y.numel()).reshape(1))
    return {
        "rank_losses": [t.item() for t in own_losses],
        "rank_tokens": [int(t) for t in _gather(torch.tensor([y.numel()]))],
        "global_mean_loss": global_mean,
        "whole_batch_loss": whole,
        "global_minus_whole_abs": abs(global_mean - whole),
        "rank0_minus_whole_abs": abs(own_losses[0].item() - whole),
    }


# --- 5. a sharded checkpoint ---------------------------------------------------------------------------------------------


def save_sharded_checkpoint(cfg: ScalingOutConfig, me: Rank, data: Tensor, d_vocab: int, out: str | Path) -> dict:
    """Train a GPT sharded by FSDP2 for ``cfg.checkpoint_steps`` updates, then write it with
    ``torch.distributed.checkpoint`` to ``out/checkpoint``: each rank writes the shards it holds, in parallel, and
    no rank ever holds the whole model (a 70B model's bf16 weights, 140 GB, do not fit one 80 GB GPU, so gathering
    them on rank 0 to ``torch.save`` them is not an option). Rank 0 also writes the gathered weights to
    ``out/full_weights.pt`` here, only because this model is small and the test compares with them.

    Returns the files of the checkpoint with their bytes, which rank wrote each (``__r_i.distcp``: rank r; the
    ``.metadata`` file, which maps every tensor's pieces to their files, is the coordinator's, rank 0's) and the
    bytes of weights each rank held.
    """
    _check_ranks(me, cfg)
    out = Path(out)
    folder = out / CHECKPOINT_FOLDER
    old_files = sorted(folder.iterdir()) if folder.is_dir() else []
    # Every rank decides alike (one raising alone would leave the others waiting at the barrier below).
    if any(not (p.name == ".metadata" or _SHARD_FILE.fullmatch(p.name)) for p in old_files):
        raise ValueError(f"{folder} holds files that are not a checkpoint's: refusing to write a checkpoint among them")
    if me.is_main:
        for old in old_files:  # an earlier run's checkpoint: replaced whole (a stale __2_0.distcp would linger)
            old.unlink()
        folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.model_config(d_vocab))
    for block in model.blocks:
        fully_shard(block)  # each block's weights split over the ranks, as train_data_parallel.py does
    fully_shard(model)
    optimizer = make_adamw(model, lr=cfg.lr, weight_decay=0.1)
    for index in range(cfg.checkpoint_steps):
        optimizer.zero_grad(set_to_none=True)
        language_model_loss(model, shard_batch(batch_at(data, cfg, index), me.rank, me.world_size)).backward()
        optimizer.step()
    dist.barrier()  # the folder exists before anyone writes into it
    state = model.state_dict()  # DTensors: each rank's values are its shards only
    metadata = dcp.save({"model": state}, checkpoint_id=folder)
    local_bytes = sum(p.to_local().numel() * p.element_size() for p in model.parameters())  # the shards held here
    full = full_state(model)  # a collective: every rank takes part, rank 0 keeps it
    held = [int(b) for b in _gather(torch.tensor([local_bytes]))]
    dist.barrier()  # every rank's files are complete before rank 0 lists them
    result: dict = {}
    if me.is_main:
        save_atomically(full, out / FULL_WEIGHTS_FILE)
        files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
        by_rank: dict[str, list[str]] = {}
        for name in files:
            match = _SHARD_FILE.fullmatch(name)
            by_rank.setdefault(match.group(1) if match else "0", []).append(name)
        tensors_per_file: dict[str, int] = {}
        for info in metadata.storage_data.values():
            tensors_per_file[info.relative_path] = tensors_per_file.get(info.relative_path, 0) + 1
        result = {
            "folder": CHECKPOINT_FOLDER,
            "full_weights_file": FULL_WEIGHTS_FILE,
            "steps": cfg.checkpoint_steps,
            "files": files,
            "files_by_rank": by_rank,
            "tensor_pieces_per_file": tensors_per_file,
            "weight_bytes_held_per_rank": held,
            "full_weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),  # DTensor: global
        }
    dist.barrier()
    return result


def load_sharded_checkpoint(folder: str | Path, model: nn.Module) -> nn.Module:
    """Load a checkpoint that :func:`save_sharded_checkpoint`'s ranks wrote into ``model``, a plain (unsharded) model
    of the same configuration, in this process alone: no process group, no ranks. Each weight is assembled from the
    pieces the ranks wrote, wherever ``.metadata`` says they lie. Returns ``model``."""
    folder = Path(folder)
    if not (folder / ".metadata").is_file():
        raise ValueError(f"folder must hold a torch.distributed.checkpoint (a .metadata file), got {str(folder)!r}")
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be an nn.Module to load into, got {type(model).__name__}")
    state = {"model": model.state_dict()}
    with warnings.catch_warnings():  # dcp warns that it assumes one process: here that is the intent
        warnings.filterwarnings("ignore", message=".*assuming the intent is to load in a single process")
        dcp.load(state, checkpoint_id=folder, no_dist=True)
    model.load_state_dict(state["model"])
    return model


# --- all five, and the entry point ---------------------------------------------------------------------------------------


def measure_all(cfg: ScalingOutConfig, me: Rank, out: str | Path, *, data: Tensor | None = None,
                d_vocab: int | None = None) -> dict:
    """Run the five measurements as rank ``me`` (every rank must call it, in the same order: they all use
    collectives) and return them; only rank 0's result describes the checkpoint's files (the others' is empty).
    Rank 0 writes ``out/scaling_out.json``. Without ``data``, the tokens of Tiny Shakespeare's characters."""
    _check_ranks(me, cfg)
    if data is None:
        from tutorial_lib.data.shakespeare import load_shakespeare_char  # the corpus only when no tokens are given

        chars = load_shakespeare_char()
        data, d_vocab = chars.train, chars.tokenizer.d_vocab
    elif d_vocab is None:
        raise ValueError("d_vocab must be given with data")
    out = Path(out)
    uneven = tuple(2 * (me.world_size - r) + 1 for r in range(me.world_size))  # 5 and 3 batches on 2 ranks
    measurements = {
        "mixed_precision": lambda: mixed_precision_gradients(cfg, me, data, d_vocab),
        "seeds": lambda: seed_effects(cfg, me, data, d_vocab),
        "join": lambda: uneven_inputs_with_join(cfg, me, data, d_vocab, uneven),
        "logged_loss": lambda: global_mean_loss(cfg, me, data, d_vocab),
        "checkpoint": lambda: save_sharded_checkpoint(cfg, me, data, d_vocab, out),
    }
    result: dict = {"world_size": me.world_size, "torch_version": torch.__version__,
                    "config": dataclasses.asdict(cfg), "d_vocab": d_vocab}
    seconds = {}
    for name, measure in measurements.items():
        start = time.perf_counter()
        result[name] = measure()
        seconds[name] = time.perf_counter() - start
    result["seconds"] = {**seconds, "total": sum(seconds.values())}
    if me.is_main:
        (out / RESULT_FILE).write_text(json.dumps(result, indent=1) + "\n")
    return result


def check_reload(out: str | Path) -> float:
    """In one process: load ``out``'s sharded checkpoint into a freshly initialised GPT and return the max |Δ| from
    the gathered weights in ``out/full_weights.pt`` (0.0: the ranks' shards add up to the model)."""
    out = Path(out)
    summary = json.loads((out / RESULT_FILE).read_text())
    cfg = ScalingOutConfig(**summary["config"])
    torch.manual_seed(cfg.seed + 1)  # different weights from the checkpoint's, so equality means they were loaded
    model = load_sharded_checkpoint(out / CHECKPOINT_FOLDER, GPT(cfg.model_config(summary["d_vocab"])))
    full = torch.load(out / FULL_WEIGHTS_FILE, weights_only=True)
    loaded = model.state_dict()
    if loaded.keys() != full.keys():
        raise ValueError(f"the checkpoint's keys differ from {FULL_WEIGHTS_FILE}'s")
    return max((loaded[k] - full[k]).abs().max().item() for k in full)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    fields = {f.name: f for f in dataclasses.fields(ScalingOutConfig)}
    for name, f in fields.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(f.default), default=f.default)
    parser.add_argument("--out", type=Path, required=True, help=f"folder for rank 0's {RESULT_FILE} and the checkpoint")
    args = parser.parse_args(argv)
    cfg = ScalingOutConfig(**{name: getattr(args, name) for name in fields})
    if "RANK" not in os.environ:
        raise ValueError("run under torchrun, e.g. torchrun --standalone --nproc_per_node=2 -m tutorial_lib.scaling_out "
                         "--out FOLDER: the measurements compare ranks")
    if int(os.environ.get("WORLD_SIZE", "1")) < 2:
        raise ValueError("run with at least 2 ranks (--nproc_per_node=2): the measurements compare ranks")
    me = setup()
    try:
        result = measure_all(cfg, me, args.out)
        dist.barrier()  # nobody leaves while rank 0 still writes
    finally:
        teardown()
    if me.is_main:  # the process group is gone: this is a plain process, the case load_sharded_checkpoint is for
        result["checkpoint"]["reloaded_without_process_group_max_abs_difference"] = check_reload(args.out)
        (args.out / RESULT_FILE).write_text(json.dumps(result, indent=1) + "\n")
        print(f"scaling_out: 5 measurements on {me.world_size} ranks in {result['seconds']['total']:.1f} s -> "
              f"{args.out / RESULT_FILE}")


if __name__ == "__main__":
    sys.exit(main())
