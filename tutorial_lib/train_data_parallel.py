"""Data-parallel training of the book's GPT on Tiny Shakespeare, launched by ``torchrun`` (chapter 15).

    torchrun --standalone --nproc_per_node=2 -m tutorial_lib.train_data_parallel --updates 20 --out runs/ddp

Every rank builds the same model (same seed), wraps it in DDP (or shards it with FSDP2's ``fully_shard``), reads its
own share of each batch through a ``DistributedSampler``, and runs chapter 09's :func:`~tutorial_lib.training.train`
unchanged: DDP's backward leaves every rank with the batch's mean gradient, so the loop needs to know nothing. Rank 0
alone prints and writes ``weights.pt`` and ``result.json`` to ``--out``. Without ``torchrun`` (no ``RANK`` in the
environment) the same code trains in one process on the whole batch: the reference the ranks must match.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from tutorial_lib.data.shakespeare import load_shakespeare_char
from tutorial_lib.distributed import Rank, all_reduce_milliseconds, setup, teardown
from tutorial_lib.models.gpt import GPT, GPTConfig
from tutorial_lib.training import TrainConfig, language_model_loss, make_adamw, save_atomically, train


@dataclass(frozen=True)
class DataParallelConfig:
    """One data-parallel run: the model's size, the batch over all ranks, the updates and how the model is split."""

    updates: int = 20
    global_batch: int = 16  # examples per update, summed over the ranks
    n_ctx: int = 32
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    lr: float = 1e-3
    seed: int = 0
    strategy: str = "ddp"  # "ddp": a full copy per rank; "fsdp": each rank holds a shard of every weight
    # DDP's bucket size in MiB. None is PyTorch's default: about 1 MiB for the first bucket (the last layers'
    # gradients, all-reduced while backward goes on), 25 MiB for the others; a number, even 25, makes every bucket
    # that size, the first included.
    bucket_cap_mb: float | None = None

    def __post_init__(self) -> None:
        for name in ("updates", "global_batch", "n_ctx", "d_model", "n_heads", "n_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.strategy not in ("ddp", "fsdp"):
            raise ValueError(f"strategy must be 'ddp' or 'fsdp', got {self.strategy!r}")
        if self.bucket_cap_mb is not None and not (isinstance(self.bucket_cap_mb, (int, float)) and self.bucket_cap_mb > 0):
            raise ValueError(f"bucket_cap_mb must be None (PyTorch's default) or a number > 0, got {self.bucket_cap_mb!r}")

    def model_config(self, d_vocab: int) -> GPTConfig:
        return GPTConfig(d_vocab=d_vocab, n_ctx=self.n_ctx, d_model=self.d_model, n_heads=self.n_heads,
                         n_layers=self.n_layers, fast_attention=True, fast_norm=True)

    def train_config(self) -> TrainConfig:
        return TrainConfig(max_steps=self.updates, lr=self.lr, min_lr=self.lr / 10, warmup_steps=max(1, self.updates // 10),
                           log_interval=1)


def char_windows(data: Tensor, n_ctx: int, n_windows: int | None = None) -> TensorDataset:
    """Non-overlapping windows of ``n_ctx`` tokens and their next tokens: a map-style dataset a sampler can index."""
    if not isinstance(n_ctx, int) or not 1 <= n_ctx < len(data):
        raise ValueError(f"n_ctx must be an int in [1, len(data)={len(data)}), got {n_ctx!r}")
    count = (len(data) - 1) // n_ctx if n_windows is None else n_windows
    if count * n_ctx + 1 > len(data):
        raise ValueError(f"n_windows={n_windows} windows of {n_ctx} tokens need more than the {len(data)} tokens")
    windows = data[: count * n_ctx + 1]
    return TensorDataset(windows[:-1].view(count, n_ctx), windows[1:].view(count, n_ctx))


def sharded_batches(dataset: TensorDataset, batch_per_rank: int, rank: int, world_size: int, seed: int) -> Callable[[], tuple[Tensor, Tensor]]:
    """A function returning this rank's next batch, forever: a ``DistributedSampler`` gives rank ``r`` the examples
    ``r, r + world_size, …`` of one seeded shuffle (the same on every rank), reshuffled each epoch by ``set_epoch``."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=batch_per_rank, sampler=sampler, drop_last=True)
    state = {"epoch": 0, "batches": iter(())}

    def next_batch() -> tuple[Tensor, Tensor]:
        while True:
            batch = next(state["batches"], None)
            if batch is not None:
                return tuple(batch)
            sampler.set_epoch(state["epoch"])  # without it every epoch repeats the first epoch's order
            state["epoch"] += 1
            state["batches"] = iter(loader)

    return next_batch


def tensor_bytes(tensors) -> int:
    """Bytes this rank holds for ``tensors`` (a sharded DTensor counts its local shard only)."""
    total = 0
    for tensor in tensors:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        total += local.numel() * local.element_size()
    return total


def full_state(model: nn.Module) -> dict[str, Tensor]:
    """The whole model's weights on every rank (FSDP2's shards gathered; every rank must call it)."""
    state = model.module.state_dict() if isinstance(model, DistributedDataParallel) else model.state_dict()
    return {name: (value.full_tensor() if hasattr(value, "full_tensor") else value).detach().clone()
            for name, value in state.items()}


def run(cfg: DataParallelConfig, me: Rank | None = None, *, data: Tensor | None = None, d_vocab: int | None = None,
        progress: bool = False) -> dict:
    """Train ``cfg.updates`` updates as rank ``me`` (None: one process on the whole batch) and return what was
    measured: the final weights, the logged losses, tokens per second, the memory held per rank and, with several
    ranks, the time of one all-reduce of the gradients."""
    rank, world_size = (0, 1) if me is None else (me.rank, me.world_size)
    device = torch.device("cpu") if me is None else me.device
    if cfg.global_batch % world_size:
        raise ValueError(f"global_batch={cfg.global_batch} must be divisible by the {world_size} ranks")
    if data is None:
        chars = load_shakespeare_char()
        data, d_vocab = chars.train, chars.tokenizer.d_vocab
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = GPT(cfg.model_config(d_vocab)).to(device)
    n_parameters = sum(p.numel() for p in model.parameters())
    if me is not None and cfg.strategy == "ddp":
        model = DistributedDataParallel(model, bucket_cap_mb=cfg.bucket_cap_mb)
    elif me is not None:
        for block in model.blocks:
            fully_shard(block)  # each block's weights: one all-gather before its forward, freed after
        fully_shard(model)  # the rest (embeddings, final norm) as one more group
    optimizer = make_adamw(model, lr=cfg.lr, weight_decay=0.1)
    batches = sharded_batches(char_windows(data, cfg.n_ctx), cfg.global_batch // world_size, rank, world_size, cfg.seed)
    history = train(model, batches, language_model_loss, cfg.train_config(), device=device, optimizer=optimizer,
                    progress=progress)
    comm_ms = all_reduce_milliseconds(n_parameters, device=device) if world_size > 1 else 0.0
    return {
        "world_size": world_size,
        "strategy": cfg.strategy,
        "weights": full_state(model),
        "losses": history.train_loss,
        "tokens_per_s": cfg.updates * cfg.global_batch * cfg.n_ctx / history.seconds,
        "seconds": history.seconds,
        "comm_ms_per_step": comm_ms,
        "parameter_bytes": tensor_bytes(model.parameters()),
        "optimizer_bytes": tensor_bytes(t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim()),
        "n_parameters": n_parameters,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    fields = {f.name: f for f in dataclasses.fields(DataParallelConfig)}
    for name, f in fields.items():
        kind = float if name == "bucket_cap_mb" else type(f.default)  # the one field whose default is None
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=f.default)
    parser.add_argument("--out", type=Path, default=None, help="folder for rank 0's weights.pt and result.json")
    args = parser.parse_args(argv)
    cfg = DataParallelConfig(**{name: getattr(args, name) for name in fields})
    me = setup() if "RANK" in os.environ else None
    try:
        result = run(cfg, me)
        if me is None or me.is_main:  # one rank speaks and writes: the others hold the same weights
            summary = {k: v for k, v in result.items() if k != "weights"}
            print(json.dumps(summary))
            if args.out is not None:
                args.out.mkdir(parents=True, exist_ok=True)
                save_atomically({"model": result["weights"]}, args.out / "weights.pt")
                (args.out / "result.json").write_text(json.dumps(summary) + "\n")
        if me is not None:
            dist.barrier()  # nobody leaves while rank 0 still writes
    finally:
        teardown()


if __name__ == "__main__":
    sys.exit(main())
