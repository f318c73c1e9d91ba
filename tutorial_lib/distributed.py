"""Data parallelism (chapter 15): joining a process group, sharding a batch, and an all-reduce written by hand.

Each of ``world_size`` processes (ranks) holds a full copy of the model, computes the gradient of its own shard of the
batch, and the ranks average their gradients before every update, so all copies take the same step. ``torchrun``
starts the processes and tells each its rank through environment variables; :func:`setup` reads them (or takes a
``file://`` store, as the tests do). The backend is the one choice that depends on the hardware: ``nccl`` between
CUDA devices, ``gloo`` between CPU processes.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.profiler import ProfilerActivity, profile


def choose_backend(device: torch.device | str) -> str:
    """``"nccl"`` for CUDA devices (NVIDIA's collectives over NVLink/InfiniBand), ``"gloo"`` for CPU processes."""
    device_type = torch.device(device).type
    if device_type == "cuda":
        return "nccl"
    if device_type == "cpu":
        return "gloo"
    raise ValueError(f"device must be a 'cpu' or 'cuda' device, got {device!r}")


@dataclass(frozen=True)
class Rank:
    """Where this process stands: its rank among ``world_size`` processes and the device it computes on."""

    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0 alone logs and writes checkpoints: the other ranks hold the same weights."""
        return self.rank == 0


def setup(*, init_method: str | None = None, rank: int | None = None, world_size: int | None = None,
          device: torch.device | str | None = None) -> Rank:
    """Join the default process group and return this process's :class:`Rank`.

    Under ``torchrun`` pass nothing: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous address come from
    the environment. Otherwise pass ``init_method`` (e.g. ``"file:///tmp/x/store"``, which needs no port) with
    ``rank`` and ``world_size``. The device is ``cuda:LOCAL_RANK`` when CUDA is present, else the CPU; the backend
    follows it (:func:`choose_backend`).
    """
    if init_method is None:
        missing = [name for name in ("RANK", "WORLD_SIZE") if name not in os.environ]
        if missing:
            raise ValueError(f"init_method is needed outside torchrun (no {', '.join(missing)} in the environment)")
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    elif rank is None or world_size is None:
        raise ValueError("rank and world_size must be given with init_method")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, world_size={world_size}), got {rank!r}")
    if device is None:
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(choose_backend(device), init_method=init_method, rank=rank, world_size=world_size)
    return Rank(rank, world_size, device)


def teardown() -> None:
    """Leave the process group (every rank must, or the others' last collective waits for it)."""
    if dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def process_group(**setup_kwargs) -> Iterator[Rank]:
    """``with process_group() as me:`` joins (:func:`setup`) and always leaves (:func:`teardown`), even on error."""
    me = setup(**setup_kwargs)
    try:
        yield me
    finally:
        teardown()


def shard_batch(batch: Tensor | tuple[Tensor, ...], rank: int, world_size: int) -> Tensor | tuple[Tensor, ...]:
    """Rank ``rank``'s contiguous share of a batch: rows ``rank · b/world_size`` up to the next rank's first row.

    Every tensor of the batch is split along its first axis, which must divide evenly: the mean of equal shards'
    means is the mean of the batch, and only then is the average of the ranks' gradients the batch's gradient.
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, world_size={world_size}), got {rank!r}")
    tensors = batch if isinstance(batch, tuple) else (batch,)
    size = tensors[0].shape[0]
    if size % world_size or any(t.shape[0] != size for t in tensors):
        raise ValueError(f"batch must have the same first axis in every tensor, divisible by world_size={world_size}; "
                         f"got {[tuple(t.shape) for t in tensors]}")
    per_rank = size // world_size
    shards = tuple(t[rank * per_rank:(rank + 1) * per_rank] for t in tensors)
    return shards if isinstance(batch, tuple) else shards[0]


def ring_all_reduce_(tensor: Tensor, *, average: bool = True) -> Tensor:
    """All-reduce by hand, in place: every rank ends with the sum (or mean) of every rank's ``tensor``.

    The ring algorithm with point-to-point sends. The tensor is cut into ``world_size`` chunks. Reduce-scatter: for
    ``world_size - 1`` steps each rank sends one chunk to its right neighbour and adds the chunk it receives from its
    left one; afterwards rank ``r`` holds the complete sum of chunk ``r + 1``. All-gather: ``world_size - 1`` more
    steps pass the complete chunks around the ring. Each rank sends ``2 (world_size - 1) / world_size`` times the
    tensor, whatever the number of ranks: why the ring is what NCCL and gloo use for large tensors.
    """
    world_size, rank = dist.get_world_size(), dist.get_rank()
    if not tensor.is_contiguous():
        raise ValueError("tensor must be contiguous (its chunks are sent as views of its memory)")
    chunks = list(tensor.view(-1).tensor_split(world_size))
    right, left = (rank + 1) % world_size, (rank - 1) % world_size

    def pass_along(send_index: int, receive_index: int, add: bool) -> None:
        received = torch.empty_like(chunks[receive_index])
        sending = dist.isend(chunks[send_index], right)  # isend: both neighbours send before either receives
        dist.recv(received, left)
        sending.wait()
        if add:
            chunks[receive_index].add_(received)
        else:
            chunks[receive_index].copy_(received)

    for step in range(world_size - 1):  # reduce-scatter: partial sums travel right
        pass_along((rank - step) % world_size, (rank - step - 1) % world_size, add=True)
    for step in range(world_size - 1):  # all-gather: complete chunks travel right
        pass_along((rank + 1 - step) % world_size, (rank - step) % world_size, add=False)
    if average:
        tensor.div_(world_size)
    return tensor


def average_gradients(model: nn.Module, *, one_message: bool = False) -> None:
    """After ``backward()``: replace every gradient by its mean over the ranks.

    By default with one ``dist.all_reduce`` per gradient tensor; with ``one_message`` the gradients are copied into
    one flat buffer, all-reduced as a single message and copied back (one fixed cost instead of one per tensor). DDP
    does the second with buckets of a few MB, and starts a bucket's all-reduce while backward is still computing the
    earlier layers' gradients.
    """
    world_size = dist.get_world_size()
    gradients = [parameter.grad for parameter in model.parameters() if parameter.grad is not None]
    if one_message:
        flat = torch.cat([gradient.flatten() for gradient in gradients])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat.div_(world_size)
        for gradient, averaged in zip(gradients, flat.split([g.numel() for g in gradients])):
            gradient.copy_(averaged.view_as(gradient))
        return
    for gradient in gradients:
        dist.all_reduce(gradient, op=dist.ReduceOp.SUM)
        gradient.div_(world_size)


@dataclass(frozen=True)
class StepTimeline:
    """When one training step's parts ran on this rank, in ms from the step's start (from a ``torch.profiler`` trace).

    ``backward`` spans the autograd engine's computation (its first to its last function that computes a gradient,
    AccumulateGrad aside); ``launches`` are the moments each all-reduce was called (``c10d::allreduce_``, by DDP's hook
    or after backward); ``all_reduces`` are when gloo ran them, on its own threads, so they can overlap the computation
    on the main thread. A launch depends only on when the gradients were ready; when gloo runs it also depends on its
    threads getting a core and on the other rank reaching the same all-reduce. A JSON round trip
    (``dataclasses.asdict``, then ``from_dict``) keeps it whole.
    """

    step: tuple[float, float]
    forward: tuple[float, float]
    backward: tuple[float, float]
    launches: tuple[float, ...]
    all_reduces: tuple[tuple[float, float], ...]

    def milliseconds_overlapped(self) -> float:
        """The all-reduce time that ran while backward was still computing."""
        start, end = self.backward
        return sum(max(0.0, min(b, end) - max(a, start)) for a, b in self.all_reduces)

    def milliseconds_communicating(self) -> float:
        return sum(b - a for a, b in self.all_reduces)

    def all_reduces_launched_during_backward(self) -> int:
        return sum(launch < self.backward[1] for launch in self.launches)

    @classmethod
    def from_dict(cls, fields: dict) -> StepTimeline:
        return cls(step=tuple(fields["step"]), forward=tuple(fields["forward"]), backward=tuple(fields["backward"]),
                   launches=tuple(fields["launches"]), all_reduces=tuple(tuple(span) for span in fields["all_reduces"]))


def step_timeline(step: Callable[[], object]) -> StepTimeline:
    """Run ``step()`` once under ``torch.profiler`` and return when its forward, its backward and each all-reduce ran.

    ``step`` must wrap its whole work in ``record_function("step")`` and its forward in ``record_function("forward")``
    (the profiler cannot tell a forward from other work by itself). A call of ``dist.all_reduce`` is recorded as
    ``c10d::allreduce_`` on the calling thread, and its run as ``gloo:all_reduce`` on one of gloo's threads.
    """
    with profile(activities=[ProfilerActivity.CPU]) as trace:
        step()
    events = trace.events()

    def spans(keep: Callable[[str], bool]) -> list[tuple[float, float]]:
        return sorted((e.time_range.start, e.time_range.end) for e in events if keep(e.name))

    marked = {name: spans(lambda event, name=name: event == name) for name in ("step", "forward")}
    missing = [name for name, found in marked.items() if len(found) != 1]
    if missing:
        raise ValueError(f"step must run record_function({missing[0]!r}) exactly once; found "
                         f"{len(marked[missing[0]])} such ranges")
    # The backward's computation: the autograd functions, but not the last AccumulateGrad, which under DDP can last
    # until the last bucket's all-reduce has finished (its hook launches it and DDP waits at the end of backward).
    backward = spans(lambda name: name.startswith("autograd::engine::evaluate_function") and "AccumulateGrad" not in name)
    if not backward:
        raise ValueError("step ran no backward: the profiler saw no autograd function")
    origin = marked["step"][0][0]

    def ms(span: tuple[float, float]) -> tuple[float, float]:
        return ((span[0] - origin) / 1000, (span[1] - origin) / 1000)

    return StepTimeline(step=ms(marked["step"][0]), forward=ms(marked["forward"][0]),
                        backward=ms((backward[0][0], max(end for _, end in backward))),
                        launches=tuple(ms(span)[0] for span in spans(lambda name: name == "c10d::allreduce_")),
                        all_reduces=tuple(ms(span) for span in spans(lambda name: name == "gloo:all_reduce")))


def all_reduce_milliseconds(numel: int, *, repeats: int = 10, device: torch.device | str = "cpu") -> float:
    """The median time of one ``dist.all_reduce`` of ``numel`` float32 numbers (after one warm-up), in ms.

    Every rank must call it, with the same arguments: it times the communication of one step's gradients."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    buffer = torch.ones(numel, device=device)
    dist.all_reduce(buffer)
    times = []
    for _ in range(repeats):
        dist.barrier()  # every rank starts together: the time is the transfer, not the wait for a late rank
        start = time.perf_counter()
        dist.all_reduce(buffer)
        if buffer.is_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 1000 * sorted(times)[len(times) // 2]


def accumulate_gradients(model: nn.Module, micro_batches: list, loss_fn) -> float:
    """Gradient accumulation: leave in ``.grad`` the gradient of the whole batch's mean loss, computed one
    micro-batch at a time (a batch too large for one forward), and return that mean loss.

    Each micro-batch's mean loss is weighted by its share of the examples, so micro-batches of unequal sizes add up to
    the mean over all examples. Under DDP (a model with ``no_sync``) every micro-batch but the last runs inside
    ``no_sync()``: its backward only adds into ``.grad``, and the last backward all-reduces the sum once.
    """
    if not micro_batches:
        raise ValueError("micro_batches must hold at least one batch")
    total = sum(len(batch[0]) for batch in micro_batches)
    model.zero_grad(set_to_none=True)
    mean_loss = 0.0
    for index, batch in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        with contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync():
            loss = loss_fn(model, batch) * (len(batch[0]) / total)
            loss.backward()
        mean_loss += loss.item()
    return mean_loss
