"""How fast this machine trains the book's small models, and so how long a chapter will take on it (chapter 00).

The book's stored times were measured on one machine, the *reference*: the 2-core CI machine, each notebook's kernel
on one thread, two notebooks side by side. A reader's laptop, or another CI machine, can be three times slower or
twice as fast. Most of a chapter's time goes into training small models, so one short probe that times the update of
a small GPT on this machine, on the thread count the kernel uses, scales every stored time to this machine:

    expected here = seconds on the reference × (an update's time here / an update's time on the reference).

Why an update and not a matrix product alone: at the book's widths (64 to 256) an update spends as much time in
PyTorch's dispatch, element-wise kernels and the optimizer as in matmuls, so a machine with more matmul throughput
but a slower core is not faster here: an Intel Xeon whose matmul probe reads about 155 GFLOP/s a thread ran the
notebooks 12% slower than an AMD EPYC measured at about 95 (190 on two threads). :func:`matmul_gflops` is still printed:
it is what the instruction set (AVX2 or AVX-512) changes most.

:func:`update_milliseconds` is the probe (about a third of a second, kept per process:
:func:`measured_update_milliseconds`); :func:`expected_seconds_here` does the scaling, and
:func:`tutorial_lib.progress.announce` prints both times before a long cell starts. :data:`CHAPTER_SECONDS` holds each
notebook's stored time on the reference, which chapter 00 scales for the reader. :func:`kernel_isas` reports which
instruction set each of PyTorch's three CPU back ends (ATen, oneDNN, MKL) actually runs: the emulation of an older CPU
that ``make test CPU_ISA=avx2`` sets up is checked with it. The probe runs on as many threads as the
kernel, as the chapters' training does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from tutorial_lib.validation import check_positive_int

# The reference machine: where the stored times were measured, and its probe on one thread (the notebooks' count).
REFERENCE_MACHINE = "the 2-core CI machine"
REFERENCE_UPDATE_MS = 14.0  # update_milliseconds(), one thread, the other core busy: an Intel Xeon, 2026-11-28

# Each notebook's time on the reference (the sum of its cells under nbval in a fresh clone's `.ci/run`, the model cache
# empty, one thread per kernel, two notebooks side by side; the twelve longest from the run of 2026-11-29, the rest
# from 2026-11-28's). The README's chapter table gives the same.
CHAPTER_SECONDS: dict[str, float] = {
    "00_how_to_use": 5, "01_tokens": 13, "02_embeddings_and_positions": 41, "03_scaled_dot_product_attention": 9,
    "04_multi_head_attention": 45, "05_feed_forward": 74, "06_residuals_and_normalization": 176,
    "07_encoder_decoder_transformer": 422, "08_gpt": 15, "09_training_a_tiny_gpt": 151, "10_sampling": 29,
    "11_what_if_we_remove_it": 280, "12_modern_variants": 444, "13_efficient_attention": 217,
    "14_encoder_only_bert": 248, "15_data_parallel": 88,
}

PROBE_SIZE = 256  # square matrices of the width the book's models multiply (64 to 512)
PROBE_SECONDS = 0.3  # how long a probe measures, after a warm-up

_measured: dict[int, float] = {}  # threads -> milliseconds an update, measured once per process


@contextmanager
def _probing(threads: int | None, seconds: float) -> Iterator[None]:
    """Check a probe's arguments; run it on ``threads`` threads (default: torch's current count), then restore the
    thread count and the global random state, so that a notebook does not depend on whether it probed."""
    if threads is not None:
        check_positive_int("threads", threads)
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds!r}")
    previous, state = torch.get_num_threads(), torch.random.get_rng_state()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.random.set_rng_state(state)
        torch.set_num_threads(previous)


def matmul_gflops(threads: int | None = None, seconds: float = PROBE_SECONDS, size: int = PROBE_SIZE) -> float:
    """float32 matmul throughput in GFLOP/s on ``threads`` threads (default: torch's current count): two ``size ×
    size`` matrices multiplied for about ``seconds`` after a warm-up, the best of five rounds."""
    check_positive_int("size", size)
    with _probing(threads, seconds):
        generator = torch.Generator().manual_seed(0)
        a = torch.randn(size, size, generator=generator)
        b = torch.randn(size, size, generator=generator)
        return 2 * size**3 / _best_seconds(lambda: a @ b, seconds) / 1e9


def _best_seconds(step, seconds: float) -> float:
    """The fastest of five rounds of ``step`` calls filling about ``seconds``, after a warm-up, per call."""
    for _ in range(3):  # warm-up: thread pool, caches, the kernel's first call
        step()
    best, calls = float("inf"), 1
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            step()
        best = min(best, (time.perf_counter() - start) / calls)
        calls = max(1, int(seconds / 5 / max(best, 1e-9)))  # later rounds fill their share of `seconds`
    return best


def update_milliseconds(threads: int | None = None, seconds: float = PROBE_SECONDS) -> float:
    """Milliseconds of one training update of a small GPT (2 blocks of width 64, 16 windows of 32 characters; forward,
    backward and AdamW) on ``threads`` threads (default: torch's current count): the best of five rounds filling about
    ``seconds``, the machine's speed rather than what another process took from it at one moment."""
    from tutorial_lib.models.gpt import GPT, GPTConfig  # here: the package's modules import this one

    # The loss is written out, not training.language_model_loss: training announces its runs through progress,
    # which imports this module, and the package keeps its imports free of cycles.

    with _probing(threads, seconds):
        torch.manual_seed(0)
        model = GPT(GPTConfig(d_vocab=65, n_ctx=32, d_model=64, n_heads=4, n_layers=2))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        generator = torch.Generator().manual_seed(0)
        batch = tuple(torch.randint(65, (16, 32), generator=generator) for _ in range(2))

        def update() -> None:
            optimizer.zero_grad()
            x, y = batch
            torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
            optimizer.step()

        return 1000 * _best_seconds(update, seconds)


def measured_update_milliseconds() -> float:
    """:func:`update_milliseconds` on torch's current thread count, measured once per process and thread count."""
    threads = torch.get_num_threads()
    if threads not in _measured:
        _measured[threads] = update_milliseconds()
    return _measured[threads]


def speed_factor(update_ms: float | None = None) -> float:
    """How many times longer this machine takes than the reference: ``update_ms / REFERENCE_UPDATE_MS`` (measured
    when ``update_ms`` is None). Above 1 on a slower machine."""
    update_ms = measured_update_milliseconds() if update_ms is None else update_ms
    if not update_ms > 0:
        raise ValueError(f"update_ms must be > 0, got {update_ms!r}")
    return update_ms / REFERENCE_UPDATE_MS


def expected_seconds_here(reference_seconds: float, update_ms: float | None = None) -> float:
    """``reference_seconds`` (a time measured on the reference machine) scaled to this machine's measured speed."""
    if not reference_seconds >= 0:
        raise ValueError(f"reference_seconds must be >= 0, got {reference_seconds!r}")
    return reference_seconds * speed_factor(update_ms)


_ISA_PROBE = """
import torch
x = torch.randn(64, 64)
x @ x                                             # MKL's sgemm: MKL_VERBOSE names the instruction set
torch.randn(1, 16, 8, 8).to_mkldnn()             # a oneDNN primitive: ONEDNN_VERBOSE names the ISA
print("ATEN", torch.backends.cpu.get_cpu_capability())
"""


def kernel_isas() -> dict[str, str]:
    """The instruction sets PyTorch's CPU back ends run here, as each reports it: ``{"aten": "AVX512", "onednn":
    "Intel AVX-512 ...", "mkl": "Intel(R) Advanced Vector Extensions 512 ..."}``.

    Runs a short child process with MKL's and oneDNN's verbose modes on (they print their instruction set once);
    the environment's ``ATEN_CPU_CAPABILITY``, ``ONEDNN_MAX_CPU_ISA`` and ``MKL_ENABLE_INSTRUCTIONS`` apply to it as
    to this process. A back end that reports nothing (a build without it) is missing from the dict."""
    env = dict(os.environ, MKL_VERBOSE="1", ONEDNN_VERBOSE="1")
    out = subprocess.run([sys.executable, "-c", _ISA_PROBE], env=env, capture_output=True, text=True, timeout=120,
                         check=True).stdout
    isas = {}
    if match := re.search(r"^ATEN (\S+)", out, re.M):
        isas["aten"] = match.group(1)
    if match := re.search(r"onednn_verbose,[^\n]*?cpu,isa:([^\n]+)", out):
        isas["onednn"] = match.group(1).strip()
    if match := re.search(r"MKL_VERBOSE[^\n]*?(Intel\(R\)[^\n]*?(?:enabled processors|instructions))", out):
        isas["mkl"] = match.group(1).strip()
    return isas


def describe_machine(gflops: float | None = None) -> str:
    """One line: the CPU's model name, torch's thread count, the probe's update time and the matmul throughput
    (``gflops``, measured when None)."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            if match := re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read(), re.M):
                model = match.group(1).strip()
    except OSError:
        pass
    return (f"{model}, {torch.get_num_threads()} thread(s): an update of the probe's GPT in "
            f"{measured_update_milliseconds():.1f} ms, float32 matmul at {gflops or matmul_gflops():.0f} GFLOP/s")


if __name__ == "__main__":  # python -m tutorial_lib.machine_speed [THREADS]: the probes, for the README's tables
    n_threads = int(sys.argv[1]) if len(sys.argv) > 1 else None
    if n_threads:
        torch.set_num_threads(n_threads)
    throughput = matmul_gflops()
    print(json.dumps({"machine": describe_machine(throughput), "update_ms": round(measured_update_milliseconds(), 2),
                      "gflops": round(throughput, 1), "isas": kernel_isas()}))
