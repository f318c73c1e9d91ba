"""What attention costs, measured (chapter 13): time, peak memory, their growth with the length, and a memory cap.

- :func:`peak_tensor_memory` runs a function and records every tensor PyTorch allocates while it runs, keeping the
  largest total alive at once: the working memory of the call, beyond its inputs. It sees every operator's outputs; a
  fused kernel's private scratch space is invisible to it (the capped subprocess of :func:`run_under_memory_cap`
  measures the whole process instead).
- :func:`measure_attention_costs` times and measures causal self-attention methods over sequence lengths;
  :func:`fit_exponent` fits ``cost ∝ n^p`` on a log-log scale; :func:`plot_attention_costs` draws both.
- :func:`measure_training_memory` does the same for training, forward and backward together: what autograd keeps
  for the backward counts, and that is where :func:`~tutorial_lib.efficient_attention.flash_attention` differs from
  tiled attention differentiated by autograd.
- :func:`run_under_memory_cap` runs one method in a fresh Python process whose address space is capped (Linux), for
  inference or for one training step.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from tutorial_lib.attention import causal_attention
from tutorial_lib.efficient_attention import banded_attention, flash_attention, linear_attention, tiled_attention
from tutorial_lib.validation import check_positive_int as _check_positive_int
from tutorial_lib.widgets._plotting import new_figure

# --- measuring one call -------------------------------------------------------------------------------------------------


class _LiveTensors(TorchDispatchMode):
    """Counts the bytes of every storage an operator creates while the mode is active, until the storage is freed."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.current = 0
        self.peak = 0

    def _freed(self, key: int) -> None:
        self.current -= self.live.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if not isinstance(tensor, Tensor):
                continue
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key and key not in self.live and storage.nbytes():  # a new storage: not an input, not a view
                self.live[key] = storage.nbytes()
                self.current += storage.nbytes()
                self.peak = max(self.peak, self.current)
                weakref.finalize(storage, self._freed, key)
        return out


class LargestTensor(TorchFunctionMode):
    """Records the largest storage (in elements) behind any tensor a torch function returns while it is active. Views
    share their base's storage, so a broadcast ``expand`` counts as the small tensor it really is. (It answers "was a
    tensor this large ever built?", where :func:`peak_tensor_memory` adds up what is alive at once.)"""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(tensor, Tensor):
                self.largest = max(self.largest, tensor.untyped_storage().nbytes() // max(1, tensor.element_size()))
        return out


def peak_tensor_memory(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """``(fn(*args, **kwargs), peak)``: ``peak`` is the most bytes of tensors created by the call alive at once (its
    output included, its inputs not). Deterministic: the same call gives the same number on any machine."""
    with _LiveTensors() as recorder:
        result = fn(*args, **kwargs)
    return result, recorder.peak


def best_seconds(fn: Callable[[], Any], *, repeats: int = 3, warmup: int = 1) -> float:
    """The shortest wall-clock time of ``repeats`` calls of ``fn()``, after ``warmup`` untimed ones. The minimum, not
    the mean: on a shared machine a call can only be slowed down by others, never sped up."""
    _check_positive_int("repeats", repeats)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative int, got {warmup!r}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def best_seconds_taking_turns(
    fns: dict[str, Callable[[], Any]], *, rounds: int = 5, warmup: int = 1, threads: int | None = None
) -> dict[str, float]:
    """:func:`best_seconds` for several functions compared with each other: each round calls every function once, in
    turn, so that a slow spell of a shared machine falls on all of them alike rather than on one; the shortest time
    of each over ``rounds`` rounds, after ``warmup`` untimed rounds. ``threads`` (default: torch's current count) runs
    them on that many threads, restored afterwards: one thread compares the work itself, not how well each function
    spreads over cores that other programs may be using too."""
    _check_positive_int("rounds", rounds)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative int, got {warmup!r}")
    if threads is not None:
        _check_positive_int("threads", threads)
    if not fns:
        raise ValueError("fns must hold at least one function to time")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads or previous)
    try:
        for _ in range(warmup):
            for fn in fns.values():
                fn()
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(rounds):
            for name, fn in fns.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(previous)
    return {name: min(values) for name, values in times.items()}


class _TorchCalls(TorchFunctionMode):
    """Counts the torch functions and tensor methods called while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def count_torch_calls(fn: Callable[[], Any]) -> int:
    """How many torch functions and tensor methods ``fn()`` calls (``torch.matmul``, ``x.exp()``, ``x[...]``, …): each
    is a trip through the Python interpreter and PyTorch's dispatcher, a cost paid per call whatever the tensors' size.
    Deterministic: the same call gives the same count on any machine."""
    with _TorchCalls() as counter:
        fn()
    return counter.count


def fit_exponent(lengths: Sequence[float], values: Sequence[float]) -> float:
    """The slope ``p`` of the least-squares line through ``(log n, log value)``: the exponent of ``value ∝ n^p``."""
    if len(lengths) != len(values) or len(lengths) < 2:
        raise ValueError(f"lengths and values must be two sequences of the same length >= 2, got {len(lengths)} and {len(values)}")
    if min(lengths) <= 0 or min(values) <= 0:
        raise ValueError("lengths and values must be positive (their logarithms are fitted)")
    xs, ys = [math.log(n) for n in lengths], [math.log(v) for v in values]
    x_mean, y_mean = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - x_mean) ** 2 for x in xs)
    if spread == 0:
        raise ValueError("lengths must not all be equal")
    return sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys)) / spread


# --- the methods of the chapter, side by side ---------------------------------------------------------------------------

AttentionMethod = Callable[[Tensor, Tensor, Tensor], Tensor]


def attention_methods(*, window: int = 256, block: int = 256) -> dict[str, AttentionMethod]:
    """Causal self-attention five ways, each ``(q, k, v) -> out`` on ``(batch, n_heads, seq, d_head)``: the chapter-03
    path with its mask, PyTorch's fused kernel, tiled (``block × block`` tiles), banded (``window`` keys) and linear."""
    return {
        "naive": lambda q, k, v: causal_attention(q, k, v),
        "F.sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "tiled": lambda q, k, v: tiled_attention(q, k, v, causal=True, block_q=block, block_k=block),
        "banded": lambda q, k, v: banded_attention(q, k, v, window),
        "linear": lambda q, k, v: linear_attention(q, k, v, causal=True),
    }


def training_methods(*, block: int = 256) -> dict[str, AttentionMethod]:
    """Causal self-attention four ways for training, each ``(q, k, v) -> out``: the chapter-03 path and tiled
    attention (``block × block`` tiles) differentiated by autograd, PyTorch's fused kernel with its own backward, and
    :func:`~tutorial_lib.efficient_attention.flash_attention` with FlashAttention's backward."""
    return {
        "naive": lambda q, k, v: causal_attention(q, k, v),
        "F.sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "tiled": lambda q, k, v: tiled_attention(q, k, v, causal=True, block_q=block, block_k=block),
        "flash": lambda q, k, v: flash_attention(q, k, v, causal=True, block_size=block),
    }


@dataclass(frozen=True)
class Cost:
    """One method at one length: the best time of a call and its peak tensor memory."""

    seconds: float
    peak_bytes: int


def random_qkv(seq: int, *, n_heads: int = 4, d_head: int = 64, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """Unit-variance ``(1, n_heads, seq, d_head)`` queries, keys and values, float32 on the CPU."""
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, n_heads, seq, d_head, generator=generator) for _ in range(3))  # type: ignore[return-value]


def measure_attention_costs(
    methods: Mapping[str, AttentionMethod],
    lengths: Sequence[int],
    *,
    n_heads: int = 4,
    d_head: int = 64,
    repeats: int = 3,
    seed: int = 0,
) -> dict[str, dict[int, Cost]]:
    """``{method: {length: Cost}}`` for causal self-attention of one sequence with ``n_heads`` heads of ``d_head``.

    Each method runs once under :func:`peak_tensor_memory` (which also warms it up), then is timed ``repeats`` times
    in rounds that visit every length and method in turn, keeping each one's best time (no gradient): a burst of other
    work on the machine then slows one call of each, not every call of one length."""
    if not methods or not lengths:
        raise ValueError("methods and lengths must not be empty")
    for length in lengths:
        _check_positive_int("lengths", length)
    _check_positive_int("repeats", repeats)
    inputs = {length: random_qkv(length, n_heads=n_heads, d_head=d_head, seed=seed) for length in lengths}
    peaks: dict[str, dict[int, int]] = {name: {} for name in methods}
    best: dict[str, dict[int, float]] = {name: {} for name in methods}
    with torch.no_grad():
        for length, (q, k, v) in inputs.items():
            for name, method in methods.items():
                peaks[name][length] = peak_tensor_memory(method, q, k, v)[1]
        for _ in range(repeats):
            for length, (q, k, v) in inputs.items():
                for name, method in methods.items():
                    seconds = best_seconds(lambda: method(q, k, v), repeats=1, warmup=0)
                    best[name][length] = min(seconds, best[name].get(length, math.inf))
    return {name: {length: Cost(best[name][length], peaks[name][length]) for length in lengths} for name in methods}


def training_step_memory(method: AttentionMethod, q: Tensor, k: Tensor, v: Tensor, *, seed: int = 0) -> int:
    """The peak bytes of tensors alive at once during one forward and backward of ``method`` (gradients of q, k and
    v, from a seeded random upstream gradient made beforehand): the activations autograd saves, the backward's
    working memory and the gradients themselves."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    upstream = torch.randn(q.shape[:-1] + v.shape[-1:], generator=torch.Generator().manual_seed(seed), dtype=v.dtype)

    def step() -> None:
        method(q, k, v).backward(upstream)

    return peak_tensor_memory(step)[1]


def measure_training_memory(
    methods: Mapping[str, AttentionMethod],
    lengths: Sequence[int],
    *,
    n_heads: int = 1,
    d_head: int = 64,
    seed: int = 0,
) -> dict[str, dict[int, int]]:
    """``{method: {length: peak bytes}}`` of :func:`training_step_memory` on causal self-attention of one sequence
    with ``n_heads`` heads of ``d_head``. Deterministic, like :func:`peak_tensor_memory`."""
    if not methods or not lengths:
        raise ValueError("methods and lengths must not be empty")
    for length in lengths:
        _check_positive_int("lengths", length)
    peaks: dict[str, dict[int, int]] = {name: {} for name in methods}
    for length in lengths:
        q, k, v = random_qkv(length, n_heads=n_heads, d_head=d_head, seed=seed)
        for name, method in methods.items():
            peaks[name][length] = training_step_memory(method, q, k, v, seed=seed)
    return peaks


_STYLES = {"naive": ("black", "o"), "F.sdpa": ("tab:blue", "s"), "tiled": ("tab:orange", "^"),
           "banded": ("tab:green", "v"), "linear": ("tab:red", "D")}


def plot_attention_costs(costs: Mapping[str, Mapping[int, Cost]]) -> Figure:
    """Time (top) and peak tensor memory (bottom) against the sequence length, log-log, one line per method; a dashed
    grey line of slope 2 (n²) through naive attention's last point for comparison."""
    fig, (top, bottom) = new_figure(2, 1, figsize=(5.5, 7.0), sharex=True)
    for name, by_length in costs.items():
        lengths = sorted(by_length)
        color, marker = _STYLES.get(name, ("tab:purple", "x"))
        top.plot(lengths, [by_length[n].seconds * 1000 for n in lengths], marker=marker, color=color, label=name)
        bottom.plot(lengths, [max(by_length[n].peak_bytes, 1) / 2**20 for n in lengths], marker=marker, color=color)
    if "naive" in costs:
        lengths = sorted(costs["naive"])
        last = lengths[-1]
        for ax, value in ((top, costs["naive"][last].seconds * 1000), (bottom, costs["naive"][last].peak_bytes / 2**20)):
            ax.plot(lengths, [value * (n / last) ** 2 for n in lengths], linestyle="--", color="grey", linewidth=1,
                    label="∝ n²" if ax is top else None)
    for ax in (top, bottom):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.tick_params(labelsize=10)
    top.set_ylabel("time per call (ms)", fontsize=11)
    top.set_title("time (machine-dependent)", fontsize=11)
    bottom.set_ylabel("peak tensor memory (MiB)", fontsize=11)
    bottom.set_title("peak memory of the tensors it creates", fontsize=11)
    bottom.set_xlabel("sequence length n", fontsize=11)
    top.legend(fontsize=9, loc="upper left", ncols=2)
    return fig


# --- a process with a memory cap ----------------------------------------------------------------------------------------

CAPPED_METHODS = ("naive", "F.sdpa", "tiled", "flash")

_CHILD = r"""
import json, resource, sys, time
import torch
from tutorial_lib.widgets.attention_costs import training_methods, random_qkv
method, seq, n_heads, d_head, cap, block = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
train = sys.argv[8] == "train"
fn = training_methods(block=block)[method]
torch.set_num_threads(int(sys.argv[7]))


def run(q, k, v):  # inference: the output; training: the output and the gradients of q, k, v for upstream 1
    if not train:
        with torch.no_grad():
            return [fn(q, k, v)]
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = fn(q, k, v)
    out.backward(torch.ones_like(out))
    return [out.detach(), q.grad, k.grad, v.grad]


run(*random_qkv(2 * block, n_heads=n_heads, d_head=d_head))  # warm up: threads and allocator arenas exist now
q, k, v = random_qkv(seq, n_heads=n_heads, d_head=d_head)
size = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (size + cap, size + cap))
start = time.perf_counter()
try:
    results = run(q, k, v)
    result = {"completed": True, "error": "", "checksum": sum(float(t.double().abs().sum()) for t in results)}
except (RuntimeError, MemoryError) as error:
    result = {"completed": False, "error": f"{type(error).__name__}: {str(error).strip().splitlines()[0]}", "checksum": 0.0}
peak = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
result.update(seconds=time.perf_counter() - start, peak_resident_bytes=peak)
print(json.dumps(result))
"""


@dataclass(frozen=True)
class CappedRun:
    """What one method did in a process allowed ``cap_bytes`` of address space beyond what it had after warming up
    (``train``: one forward and backward, else the forward alone)."""

    method: str
    seq: int
    cap_bytes: int
    train: bool
    completed: bool
    error: str  # the exception's first line when it did not complete
    seconds: float
    peak_resident_bytes: int  # the process's peak resident memory (VmHWM), torch and Python included
    checksum: float  # Σ |out| in float64 (training: plus Σ |grad| of q, k and v), to compare methods that completed


def run_under_memory_cap(method: str, seq: int, *, cap_bytes: int, train: bool = False, n_heads: int = 1,
                         d_head: int = 64, block: int = 512, threads: int | None = None,
                         timeout: float = 300.0) -> CappedRun:
    """Run one of :data:`CAPPED_METHODS` on causal self-attention of ``seq`` positions in a fresh Python process
    whose address space (``RLIMIT_AS``) may grow by ``cap_bytes`` after a warm-up call; with ``train``, one forward
    and backward (upstream gradient 1). Linux only: elsewhere the cap is not enforced the same way, and this raises
    ``RuntimeError``."""
    if method not in CAPPED_METHODS:
        raise ValueError(f"method must be one of {CAPPED_METHODS}, got {method!r}")
    _check_positive_int("seq", seq)
    _check_positive_int("cap_bytes", cap_bytes)
    if not sys.platform.startswith("linux"):
        raise RuntimeError("run_under_memory_cap needs Linux (RLIMIT_AS and /proc/self/status)")
    threads = threads or torch.get_num_threads()
    command = [sys.executable, "-c", _CHILD, method, str(seq), str(n_heads), str(d_head), str(cap_bytes), str(block),
               str(threads), "train" if train else "infer"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if completed.returncode != 0:
        raise RuntimeError(f"the capped process failed: {completed.stderr.strip()[-500:]}")
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    return CappedRun(method=method, seq=seq, cap_bytes=cap_bytes, train=train, **result)
