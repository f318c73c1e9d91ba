"""Memory and traffic per rank in one training update, measured (chapter 15's FSDP2 section).

    torchrun --standalone --nproc_per_node=2 -m tutorial_lib.memory_per_rank --strategy fsdp ddp --out FOLDER

:func:`measure_step` builds the chapter's GPT as one process, a DDP rank or an FSDP2 rank (wrapped as
:func:`~tutorial_lib.train_data_parallel.run` wraps it), trains warm-up updates so that gradients and AdamW's moments
exist, then measures one more update of chapter 09's loop (:func:`update`) under ``torch.profiler`` with
``profile_memory=True`` and ``record_shapes=True``. It returns, for this rank (:class:`StepMemory`):

- the bytes held in parameters, gradients and AdamW's moments, counted from the tensors (a sharded DTensor counts
  its local slice), and the full bytes of each FSDP group: a group's gathered weights exist on a rank only from its
  all-gather to its reshard;
- the **peak** of the bytes allocated by PyTorch's CPU allocator during the update, what was live before it
  included, replayed from the profiler's allocation and free events by address. It has to be the allocator's count:
  FSDP2 frees a gathered block by shrinking its storage to nothing (``untyped_storage().resize_(0)``), which no
  Python object's lifetime shows;
- what was live at that peak, by kind, and in which phase of the update the peak fell;
- the **collectives** the update asked for (the profiler's ``c10d::`` operators) and what gloo ran for them
  (``gloo:`` events), with the elements of each from the recorded shapes, and the bytes a rank sends for them with
  ring algorithms. Gloo has no reduce-scatter of its own: it copies the input, all-reduces the copy and keeps its
  rank's slice, so FSDP2 on gloo sends twice what a reduce-scatter needs.

The whole run is profiled from before the model is built, so every block live at the measured update was allocated
while the profiler watched. The profiler records the allocations that gloo's worker threads make while they run a
collective (the profiler's thread-local state travels with the work), but not what a gloo thread frees after the
work has run: when a gloo thread drops the last reference to a collective's tensor (a race with the calling thread),
its free goes unseen. :func:`_replay` then takes it as freed where the calling thread let go of it (and counts these
frees in ``unseen_frees``). Gloo's internal buffers, allocated outside PyTorch's allocator, are never counted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, record_function

from tutorial_lib.data.shakespeare import load_shakespeare_char
from tutorial_lib.distributed import Rank, setup, teardown
from tutorial_lib.models.gpt import GPT
from tutorial_lib.train_data_parallel import DataParallelConfig, char_windows, sharded_batches, tensor_bytes
from tutorial_lib.training import TrainConfig, language_model_loss, make_adamw

# Chapter 09's model size (4 blocks, d_model = 128; 805,760 parameters) on the chapter's batch (16 windows of 32
# characters). Its parameters, gradients and AdamW state (12.9 MB) are of the order of its activations (17.6 MB in
# one process): sharding the state and the batch both show in the peak. The chapter's default 2-layer model
# (d_model = 64) would be all activations.
MEMORY_CONFIG = DataParallelConfig(global_batch=16, n_ctx=32, d_model=128, n_layers=4)
STEP_LABEL = "memory_per_rank: measured update"
PHASES = ("forward", "zero_grad", "backward", "clip", "optimizer step")  # the profiler ranges of one update
# Bytes one rank sends for a collective on a tensor of B bytes over N ranks with a ring: RING_FACTOR · B · (N-1)/N.
RING_FACTOR = {"all_gather": 1, "reduce_scatter": 1, "all_reduce": 2}
# The profiler's names of the collectives counted: what an update asks for under DDP and FSDP2 (FSDP2's
# all-gathers and reduce-scatters, DDP's bucket all-reduces, the all-reduce of the norms that clipping sharded
# gradients needs), and what gloo runs for them. Any other c10d operator is named in StepMemory.uncounted.
C10D_OPS = {"c10d::_allgather_base_": "all_gather", "c10d::_reduce_scatter_base_": "reduce_scatter",
            "c10d::allreduce_": "all_reduce"}
GLOO_OPS = {"gloo:all_gather": "all_gather", "gloo:all_reduce": "all_reduce"}
DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
               "unsigned char": 1, "signed char": 1, "bool": 1}
# The FSDP2 ranges in which the calling thread waits for a group's collective and lets go of its tensors.
FSDP_WAITS = ("FSDP::pre_forward", "FSDP::pre_backward", "FSDP::post_backward_reduce")
# The FSDP2 ranges that gather a group's weights (with one rank, FSDP2 copies them without an all-gather).
FSDP_GATHERS = ("FSDP::all_gather", "FSDP::pre_forward", "FSDP::pre_backward", "FSDP::backward_prefetch",
                "FSDP::root_pre_forward")
KINDS = ("parameters", "gradients", "AdamW state", "other, held between updates", "gathered weights",
         "communication buffers", "activations and temporaries")  # what was live at the peak, in this order


@dataclass(frozen=True)
class Collective:
    """The calls of one kind of collective in the update: how many, the elements and bytes of the whole tensors they
    are about (the gathered output of an all-gather, the input of a reduce-scatter, the all-reduced tensor), and the
    bytes each rank sends for them with ring algorithms: ``(N - 1) / N`` of the tensor for an all-gather or a
    reduce-scatter, twice that for an all-reduce (a reduce-scatter, then an all-gather)."""

    count: int
    elements: int
    bytes: int
    bytes_sent: float


@dataclass(frozen=True)
class StepMemory:
    """One rank's memory and traffic in one training update (bytes, this rank's own)."""

    strategy: str  # "one process", "ddp" or "fsdp"
    rank: int
    world_size: int
    n_parameters: int  # of the whole model
    parameter_bytes: int  # this rank's parameters (its local shards under FSDP2)
    gradient_bytes: int  # this rank's gradients after the update (local shards under FSDP2)
    optimizer_bytes: int  # AdamW's two moments of this rank's parameters
    group_bytes: tuple[int, ...]  # each FSDP group's weights, gathered: the blocks', then the root's; () without FSDP
    before_bytes: int  # allocated, and still live, when the update starts
    peak_bytes: int  # the most allocated at once during the update, what was live before it included
    peak_in: str  # the phase of the update the peak fell in, and the innermost profiler range there
    at_peak: dict[str, int]  # what was live at the peak, by kind (KINDS); the values add up to peak_bytes
    requested: dict[str, Collective]  # the collectives the update asked for (c10d operators), by kind
    executed: dict[str, Collective]  # what gloo ran for them (gloo runs a reduce-scatter as an all-reduce)
    gloo_thread_allocations: int  # allocations the profiler saw on gloo's threads during the update
    unseen_frees: int  # collectives' blocks freed where the profiler could not see it (see _replay)
    uncounted: tuple[str, ...] = ()  # the names of other collectives the update ran: none under DDP or FSDP2
    config: dict = field(default_factory=dict)

    @property
    def gathered_block_bytes(self) -> int:
        """The largest FSDP group's full weights: what one all-gather adds to a rank, for a while (0 without FSDP)."""
        return max(self.group_bytes, default=0)

    @property
    def counted_bytes(self) -> int:
        """Parameters + gradients + AdamW state + the largest gathered block."""
        return self.parameter_bytes + self.gradient_bytes + self.optimizer_bytes + self.gathered_block_bytes

    @property
    def rest_bytes(self) -> int:
        """The peak minus the counted parts: activations and temporaries, and under FSDP2 what more is gathered at
        the peak (the root's weights, FSDP's all-gather buffer). ``at_peak`` splits the peak as it was."""
        return self.peak_bytes - self.counted_bytes

    @property
    def traffic_bytes(self) -> float:
        """Bytes this rank sends per update for the collectives the update asked for, with ring algorithms."""
        return sum(c.bytes_sent for c in self.requested.values())

    @property
    def gloo_traffic_bytes(self) -> float:
        """The same for what gloo ran: more than asked under FSDP2, whose reduce-scatters gloo runs as all-reduces."""
        return sum(c.bytes_sent for c in self.executed.values())

    def to_json(self) -> dict:
        """The fields as JSON values, with the derived figures (``gathered_block_bytes``, ``counted_bytes``,
        ``rest_bytes``, ``traffic_bytes``, ``gloo_traffic_bytes``) added."""
        out = dataclasses.asdict(self)
        out["group_bytes"], out["uncounted"] = list(self.group_bytes), list(self.uncounted)
        for name in ("gathered_block_bytes", "counted_bytes", "rest_bytes", "traffic_bytes", "gloo_traffic_bytes"):
            out[name] = getattr(self, name)
        return out


def group_bytes(model: nn.Module) -> tuple[int, ...]:
    """The full bytes of each FSDP group's weights (a module given to ``fully_shard`` holds the parameters that no
    sharded submodule holds), innermost groups first, the root's last; ``()`` when nothing is sharded."""
    groups = [m for m in model.modules() if isinstance(m, FSDPModule)]
    sizes = []
    for module in reversed(groups):  # modules() lists the root first
        nested = {id(p) for m in module.modules() if m is not module and isinstance(m, FSDPModule)
                  for p in m.parameters()}
        own = [p for p in module.parameters() if id(p) not in nested]
        sizes.append(sum(p.numel() * p.element_size() for p in own))  # a DTensor's numel is the whole tensor's
    return tuple(sizes)


def _local(tensor: Tensor) -> Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _storage_addresses(tensors) -> set[int]:
    return {_local(t).untyped_storage().data_ptr() for t in tensors if _local(t).untyped_storage().nbytes()}


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[Tensor]:
    """AdamW's moments (``step`` counters, one number each, left out: as in ``run``'s ``optimizer_bytes``)."""
    return [t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t) and t.dim()]


def _collectives(events: list[dict], names: dict[str, str], world_size: int,
                 element_size: int) -> dict[str, Collective]:
    """Count the collectives among the trace's ``events`` (``names`` maps the profiler's names to kinds), with the
    elements of the whole tensor each call is about, from the shapes the profiler recorded.

    A ``c10d::`` operator records its arguments: the first is the output (the gathered tensor of an all-gather, or
    a list of tensors to all-reduce), the second the input (the full tensor of a reduce-scatter). A ``gloo:`` event
    records its input only: this rank's shard for an all-gather, multiplied here by the number of ranks. A list of
    tensors records no element type; ``element_size`` (the parameters') is used for it."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for event in events:
        kind, name = names[event["name"]], event["name"]
        dims, types = event["args"]["Input Dims"], event["args"]["Input type"]
        index = 1 if name.startswith("c10d::") and kind == "reduce_scatter" else 0
        shapes = dims[index] if types[index] == "TensorList" else [dims[index]]
        numel = sum(math.prod(shape) for shape in shapes)
        if kind == "all_gather" and name.startswith("gloo:"):
            numel *= world_size
        total = totals[kind]
        total[0] += 1
        total[1] += numel
        total[2] += numel * DTYPE_BYTES.get(types[index], element_size)
    return {kind: Collective(count, elements, size, RING_FACTOR[kind] * size * (world_size - 1) / world_size)
            for kind, (count, elements, size) in sorted(totals.items())}


@dataclass
class _Block:
    """One allocation the profiler recorded: its size and address, from when to when (``(ts, order)`` keys), on which
    thread, and what made it."""

    size: int
    address: int
    start: tuple[float, int]
    end: tuple[float, int]
    thread: int
    seen_free: bool = False
    collective: dict | None = None  # the c10d operator (gloo's copy of a reduce-scatter input) that allocated it
    group: str | None = None  # "(blocks.3)", "" for the root: the FSDP group whose collective used it, if one did
    gathering: bool = False  # allocated while FSDP gathered weights: its all-gather output, or the weights


def _enclosing(ranges: list[dict], ts: float) -> list[dict]:
    """The ranges that contain the instant ``ts``, outermost first."""
    return sorted((r for r in ranges if r["ts"] <= ts <= r["ts"] + r["dur"]), key=lambda r: r["ts"])


def _group_of(name: str) -> str:
    """``"FSDP::all_gather (blocks.3)"`` → ``"(blocks.3)"``; the root's ranges carry no group: ``""``."""
    return name[name.index(" ("):] if " (" in name else ""


def _replay(trace: dict, kinds_of: dict[str, set[int]]) -> dict:
    """Replay a trace's allocations and frees; return the bytes live when the measured update starts, the peak
    during it, where it fell, what was live then by kind, and the update's collectives.

    Blocks are matched by address: a free counts only when this trace saw the allocation it frees (the profiler also
    reports frees of blocks it saw in an earlier session), and a new block at a live block's address ends the old
    one. One kind of free is not seen: the last reference to a collective's tensor is sometimes dropped by a gloo
    thread after its work ran, where the profiler no longer records. Those tensors are gloo's copy of a
    reduce-scatter input and FSDP's all-gather output. When such a block's free was not seen, it is taken as freed
    at the end of the first FSDP range of its group in which the calling thread waits for collectives and lets go of
    their tensors (``FSDP_WAITS``), where the seen frees of the same blocks happen.

    ``kinds_of`` gives the storage addresses of the parameters, the gradients before (``"old gradients"``) and
    after (``"new gradients"``) the update, and AdamW's state. A block live before the update is of the kind its
    address names; one allocated during the update is ``gradients`` if it outlives the update at a gradient's
    address, ``gathered weights`` if FSDP made it while gathering weights (``FSDP_GATHERS``), ``communication
    buffers`` if a collective or a gloo thread did, and ``activations and temporaries`` otherwise."""
    events = trace["traceEvents"]
    step = next(e for e in events if e.get("name") == STEP_LABEL and e.get("ph") == "X")
    start, end, main_thread = step["ts"], step["ts"] + step["dur"], step["tid"]
    ranges = [e for e in events if e.get("ph") == "X" and e.get("tid") == main_thread]
    collectives = [r for r in ranges if r["name"] in C10D_OPS]
    fsdp_ranges = [r for r in ranges if r["name"].startswith("FSDP::")]
    waits = [r for r in fsdp_ranges if r["name"].split(" (")[0] in FSDP_WAITS]
    memory = sorted((e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
                    key=lambda e: e["ts"])
    never = (math.inf, 0)
    blocks: list[_Block] = []
    open_blocks: dict[int, _Block] = {}
    for order, event in enumerate(memory):
        address, size, key = event["args"]["Addr"], event["args"]["Bytes"], (event["ts"], order)
        if address in open_blocks:  # its free, or a new block where it was freed unseen
            old = open_blocks.pop(address)
            old.end, old.seen_free = key, size < 0
        if size <= 0:
            continue
        block = _Block(size, address, key, never, event["tid"])
        if event["tid"] == main_thread:
            made_by = _enclosing(collectives, event["ts"])
            fsdp = _enclosing(fsdp_ranges, event["ts"])
            gather = [r for r in fsdp if r["name"].startswith("FSDP::all_gather")]
            block.collective = made_by[-1] if made_by else None
            block.gathering = any(r["name"].startswith(FSDP_GATHERS) for r in fsdp)
            if block.collective is not None and fsdp:
                block.group = _group_of(fsdp[-1]["name"])
            elif gather and not gather[-1]["name"].startswith("FSDP::all_gather_copy_out"):
                block.group = _group_of(gather[-1]["name"])
        blocks.append(block)
        open_blocks[address] = block
    unseen = 0
    for block in blocks:
        if block.seen_free or (block.group is None and block.collective is None):
            continue
        ends = [(r["ts"] + r["dur"], len(memory)) for r in waits
                if _group_of(r["name"]) == block.group and r["ts"] + r["dur"] > block.start[0]]
        if block.group is None:  # a collective outside FSDP: its copy dies with the call
            ends = [(block.collective["ts"] + block.collective["dur"], len(memory))]
        if ends and min(ends) < block.end:
            block.end, unseen = min(ends), unseen + 1
    timeline = sorted([(b.start, b.size) for b in blocks] + [(b.end, -b.size) for b in blocks if b.end != never])
    total = before = peak = 0
    peak_key = None
    for key, delta in timeline:  # at one instant, frees (negative) come before allocations
        if peak_key is None and key[0] >= start:
            before = peak = total
            peak_key = (start, -1)
        if peak_key is not None and key[0] > end:
            break
        total += delta
        if peak_key is not None and total > peak:
            peak, peak_key = total, key
    if peak_key is None:
        raise RuntimeError("the profiler recorded no allocation during the measured update")
    at_peak = dict.fromkeys(KINDS, 0)
    for block in blocks:
        if not block.start <= peak_key < block.end:
            continue
        if block.start[0] < start:
            kind = next((k for k in ("parameters", "old gradients", "AdamW state") if block.address in kinds_of[k]),
                        "other, held between updates")
            kind = "gradients" if kind == "old gradients" else kind
        elif block.address in kinds_of["new gradients"] and block.end[0] > end:
            kind = "gradients"
        elif block.gathering:
            kind = "gathered weights"
        elif block.collective is not None or block.thread != main_thread:
            kind = "communication buffers"
        else:
            kind = "activations and temporaries"
        at_peak[kind] += block.size
    around = [r for r in _enclosing(ranges, peak_key[0]) if r is not step]
    phase = next((r["name"] for r in around if r["name"] in PHASES), "between phases")
    innermost = around[-1]["name"] if around else phase
    window = [e for e in events if e.get("ph") == "X" and start <= e["ts"] <= end]
    return {"before": before, "peak": peak, "at_peak": at_peak, "unseen": unseen,
            "peak_in": phase if innermost == phase else f"{phase}: {innermost}",
            "gloo_threads": sum(1 for b in blocks if start <= b.start[0] <= end and b.thread != main_thread),
            "c10d": [e for e in window if e["name"] in C10D_OPS and e["tid"] == main_thread],
            "gloo": [e for e in window if e["name"] in GLOO_OPS],
            "uncounted": tuple(sorted({e["name"] for e in window if e["name"].startswith(("c10d::", "gloo:"))
                                       and e["name"] not in C10D_OPS and e["name"] not in GLOO_OPS}))}


def update(model: nn.Module, optimizer: torch.optim.Optimizer, batch: tuple[Tensor, Tensor], step: int,
           schedule: TrainConfig) -> float:
    """One update of chapter 09's loop (:func:`~tutorial_lib.training.train` in fp32), in its order: the learning
    rate of ``step``, forward, ``zero_grad(set_to_none=True)``, backward, clipping, AdamW's step; returns the loss.
    Each phase is a profiler range (``PHASES``).

    The order decides what is live at once: the previous update's gradients are freed only after this forward, so
    the forward's activations and a full set of gradients are held together. (``train`` itself is not called: its
    ``model.to(device)`` makes FSDP2 swap its parameters, which fails while the profiler, recording shapes, holds
    references to them.)"""
    for group in optimizer.param_groups:
        group["lr"] = schedule.lr_at(step)
    with record_function(PHASES[0]):
        loss = language_model_loss(model, batch)
    with record_function(PHASES[1]):
        optimizer.zero_grad(set_to_none=True)
    with record_function(PHASES[2]):
        loss.backward()
    with record_function(PHASES[3]):
        if schedule.grad_clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), schedule.grad_clip)
    with record_function(PHASES[4]):
        optimizer.step()
    return loss.item()


@contextlib.contextmanager
def _quiet_profiler(prof: profile) -> Iterator[profile]:
    """``prof`` started and stopped with the C++ side's standard error closed: the profiler's library prints a
    "profiler_start" and a "profiler_stop" line there, which a notebook's output would keep. Only those two calls are
    silenced; whatever runs in between writes where it always does."""
    def silently(call: Callable[[], object]) -> None:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            with open(os.devnull, "w") as devnull:
                os.dup2(devnull.fileno(), 2)
                call()
        finally:
            os.dup2(saved, 2)
            os.close(saved)

    silently(prof.start)
    try:
        yield prof
    finally:
        silently(prof.stop)


def measure_step(cfg: DataParallelConfig = MEMORY_CONFIG, me: Rank | None = None, *, data: Tensor | None = None,
                 d_vocab: int | None = None, warmup_updates: int = 2,
                 trace: str | os.PathLike | None = None) -> StepMemory:
    """Train ``warmup_updates`` updates, then measure one more, as rank ``me`` with ``cfg.strategy`` (``"ddp"`` or
    ``"fsdp"``), or, with ``me=None``, as one process on the whole batch (the strategy is then ignored, as ``run``
    ignores it). Every rank of the group must call it. ``data`` and ``d_vocab`` default to Tiny Shakespeare's
    characters; ``trace`` keeps the profiler's trace at that path (open it in https://ui.perfetto.dev).

    The warm-up matters: the first update creates AdamW's moments and DDP builds its buckets anew after it, so only
    a later update shows what training holds from one update to the next."""
    if not isinstance(cfg, DataParallelConfig):
        raise ValueError(f"cfg must be a DataParallelConfig, got {type(cfg).__name__}")
    if isinstance(warmup_updates, bool) or not isinstance(warmup_updates, int) or warmup_updates < 1:
        raise ValueError(f"warmup_updates must be a positive int (the first update creates AdamW's state), "
                         f"got {warmup_updates!r}")
    if warmup_updates >= cfg.updates:
        raise ValueError(f"warmup_updates={warmup_updates} and the measured update must fit in "
                         f"cfg.updates={cfg.updates}")
    rank, world_size = (0, 1) if me is None else (me.rank, me.world_size)
    device = torch.device("cpu") if me is None else me.device
    if device.type != "cpu":
        raise ValueError(f"me.device must be the CPU (the allocations counted are the CPU allocator's), got {device}")
    if cfg.global_batch % world_size:
        raise ValueError(f"global_batch={cfg.global_batch} must be divisible by the {world_size} ranks")
    if (data is None) != (d_vocab is None):
        raise ValueError("data and d_vocab go together: give both, or neither for Tiny Shakespeare")
    if data is None:
        chars = load_shakespeare_char()
        data, d_vocab = chars.train, chars.tokenizer.d_vocab
    batches = sharded_batches(char_windows(data, cfg.n_ctx), cfg.global_batch // world_size, rank, world_size, cfg.seed)
    schedule = cfg.train_config()
    with tempfile.TemporaryDirectory(prefix="memory_per_rank_") as folder:
        with _quiet_profiler(profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True)) as prof:
            torch.manual_seed(cfg.seed)  # the same initial weights on every rank
            model = GPT(cfg.model_config(d_vocab)).to(device)
            if me is not None and cfg.strategy == "ddp":
                model = DistributedDataParallel(model, bucket_cap_mb=cfg.bucket_cap_mb)
            elif me is not None:
                for block in model.blocks:
                    fully_shard(block)  # each block's weights: gathered before its forward, freed after
                fully_shard(model)  # the rest (embeddings, final norm) as one more group
            optimizer = make_adamw(model, lr=cfg.lr, weight_decay=0.1)
            for step in range(warmup_updates):
                update(model, optimizer, batches(), step, schedule)
            parameters = list(model.parameters())
            old_gradients = _storage_addresses(p.grad for p in parameters if p.grad is not None)
            with record_function(STEP_LABEL):
                update(model, optimizer, batches(), warmup_updates, schedule)
        path = Path(folder) / "trace.json" if trace is None else Path(trace)
        prof.export_chrome_trace(str(path))
        recorded = json.loads(path.read_text())
    gradients = [p.grad for p in parameters if p.grad is not None]
    replay = _replay(recorded, {"parameters": _storage_addresses(parameters), "old gradients": old_gradients,
                                "AdamW state": _storage_addresses(_optimizer_tensors(optimizer)),
                                "new gradients": _storage_addresses(gradients)})
    element_size = parameters[0].element_size()
    return StepMemory(
        strategy="one process" if me is None else cfg.strategy,
        rank=rank,
        world_size=world_size,
        n_parameters=sum(p.numel() for p in parameters),
        parameter_bytes=tensor_bytes(parameters),
        gradient_bytes=tensor_bytes(gradients),
        optimizer_bytes=tensor_bytes(_optimizer_tensors(optimizer)),
        group_bytes=group_bytes(model),
        before_bytes=replay["before"],
        peak_bytes=replay["peak"],
        peak_in=replay["peak_in"],
        at_peak=replay["at_peak"],
        requested=_collectives(replay["c10d"], C10D_OPS, world_size, element_size),
        executed=_collectives(replay["gloo"], GLOO_OPS, world_size, element_size),
        gloo_thread_allocations=replay["gloo_threads"],
        unseen_frees=replay["unseen"],
        uncounted=replay["uncounted"],
        config=dataclasses.asdict(cfg),
    )


def _figures(row: StepMemory | dict) -> dict:
    return row.to_json() if isinstance(row, StepMemory) else row


def memory_table(rows: dict[str, StepMemory | dict]) -> str:
    """A table of ``rows`` (a name → a :class:`StepMemory` or its ``to_json()``), one line per row, in MB
    (10⁶ bytes): the counted parts, the measured peak, the rest, and the bytes sent per update."""
    columns = ("parameters", "gradients", "AdamW", "gathered block", "peak", "peak − counted", "sent (ring)",
               "sent (gloo)")
    keys = ("parameter_bytes", "gradient_bytes", "optimizer_bytes", "gathered_block_bytes", "peak_bytes",
            "rest_bytes", "traffic_bytes", "gloo_traffic_bytes")
    width = max(len("per rank, MB"), *(len(name) for name in rows))
    lines = [f"{'per rank, MB':<{width}} " + " ".join(f"{c:>14}" for c in columns)]
    for name, row in rows.items():
        figures = _figures(row)
        lines.append(f"{name:<{width}} " + " ".join(f"{figures[k] / 1e6:>14.2f}" for k in keys))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sizes = ("global_batch", "n_ctx", "d_model", "n_heads", "n_layers", "seed")
    parser.add_argument("--strategy", choices=("ddp", "fsdp"), nargs="+", default=[MEMORY_CONFIG.strategy],
                        help="one or more, measured one after the other in this launch (starting ranks is the slow part)")
    for name in sizes:
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(MEMORY_CONFIG, name))
    parser.add_argument("--warmup-updates", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for memory.json (memory_<strategy>.json for several): rank 0's figures, and "
                             "every rank's under 'ranks'")
    parser.add_argument("--keep-traces", action="store_true",
                        help="also write each rank's profiler trace to --out (trace_rank0.json, …)")
    args = parser.parse_args(argv)
    if args.keep_traces and args.out is None:
        parser.error("--keep-traces needs --out, the folder the traces go to")
    me = setup() if "RANK" in os.environ else None
    try:
        rank = 0 if me is None else me.rank
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
        for strategy in args.strategy:
            cfg = dataclasses.replace(MEMORY_CONFIG, strategy=strategy, **{name: getattr(args, name) for name in sizes})
            suffix = "" if len(args.strategy) == 1 else f"_{strategy}"
            trace = args.out / f"trace{suffix}_rank{rank}.json" if args.keep_traces else None
            result = measure_step(cfg, me, warmup_updates=args.warmup_updates, trace=trace).to_json()
            everyone = [result]
            if me is not None:
                everyone = [None] * me.world_size
                dist.all_gather_object(everyone, result)  # after the measured update: not in its traffic
            if rank == 0:  # one rank speaks and writes
                print(json.dumps({k: v for k, v in result.items() if k != "config"}))
                if args.out is not None:
                    (args.out / f"memory{suffix}.json").write_text(json.dumps({**result, "ranks": everyone}) + "\n")
        if me is not None:
            dist.barrier()  # nobody leaves while rank 0 still writes
    finally:
        teardown()


if __name__ == "__main__":
    sys.exit(main())
