"""How fast this machine multiplies matrices, and so how long a chapter will take on it (chapter 00).

The book's stored times were measured on one machine, the *reference*: the 2-core CI machine, each notebook's kernel
on one thread, two notebooks side by side. A reader's laptop, or another CI machine, can be three times slower or
twice as fast. Almost all of a training cell's time is spent in float32 matrix products, so one short probe of this
machine's matmul throughput, on the thread count the kernel uses, scales every stored time to this machine:

    expected here = seconds on the reference × (reference throughput / throughput here).

:func:`matmul_gflops` is the probe (a fraction of a second, kept per process: :func:`measured_gflops`);
:func:`expected_seconds_here` does the scaling, and :func:`tutorial_lib.progress.announce` prints both times before a
long cell starts. :data:`CHAPTER_SECONDS` holds each notebook's stored time on the reference, which chapter 00 scales
for the reader. :func:`kernel_isas` reports which instruction set each of PyTorch's three CPU back ends (ATen,
oneDNN, MKL) actually runs: the emulation of an older CPU that ``make test-notebooks CPU=avx2`` sets up is checked
with it.

The probe measures matmul only. A small model also spends time in Python and in element-wise kernels, which more
cores and wider vectors speed up less, so the estimate errs toward optimism on a machine with many cores.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import torch

from tutorial_lib.validation import check_positive_int

# The reference machine: where the stored times were measured, and its probe on one thread (the notebooks' count).
REFERENCE_MACHINE = "the 2-core CI machine"
REFERENCE_GFLOPS = 95.0  # matmul_gflops() with one thread there: AMD EPYC with AVX512-BF16 (see CHAPTER_SECONDS)

# Each notebook's time on the reference (the sum of its cells under nbval with an empty model cache, one thread per
# kernel, two notebooks side by side). The README's chapter table gives the same figures.
CHAPTER_SECONDS: dict[str, float] = {
    "00_how_to_use": 2, "01_tokens": 13, "02_embeddings_and_positions": 23, "03_scaled_dot_product_attention": 8,
    "04_multi_head_attention": 26, "05_feed_forward": 184, "06_residuals_and_normalization": 157,
    "07_encoder_decoder_transformer": 296, "08_gpt": 12, "09_training_a_tiny_gpt": 124, "10_sampling": 15,
    "11_what_if_we_remove_it": 213, "12_modern_variants": 304, "13_efficient_attention": 134,
    "14_encoder_only_bert": 216, "15_data_parallel": 50,
}

PROBE_SIZE = 256  # square matrices of the width the book's models multiply (64 to 512)
PROBE_SECONDS = 0.25  # how long the probe measures, after a warm-up

_measured: dict[int, float] = {}  # threads -> GFLOP/s, measured once per process


def matmul_gflops(threads: int | None = None, seconds: float = PROBE_SECONDS, size: int = PROBE_SIZE) -> float:
    """float32 matmul throughput in GFLOP/s on ``threads`` threads (default: torch's current count).

    Multiplies two ``size × size`` matrices for about ``seconds`` after a warm-up, in five rounds, and returns the
    best round: the machine's speed, not what another process took from it at one moment."""
    if threads is not None:
        check_positive_int("threads", threads)
    check_positive_int("size", size)
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds!r}")
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        generator = torch.Generator().manual_seed(0)
        a = torch.randn(size, size, generator=generator)
        b = torch.randn(size, size, generator=generator)
        for _ in range(3):  # warm-up: thread pool, caches, the kernel's first call
            a @ b
        best = float("inf")
        calls = 1
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(calls):
                a @ b
            elapsed = time.perf_counter() - start
            best = min(best, elapsed / calls)
            calls = max(1, int(seconds / 5 / max(best, 1e-9)))  # later rounds fill their share of `seconds`
        return 2 * size**3 / best / 1e9
    finally:
        torch.set_num_threads(previous)


def measured_gflops() -> float:
    """:func:`matmul_gflops` on torch's current thread count, measured once per process and thread count."""
    threads = torch.get_num_threads()
    if threads not in _measured:
        _measured[threads] = matmul_gflops()
    return _measured[threads]


def speed_factor(gflops: float | None = None) -> float:
    """How many times longer this machine takes than the reference: ``REFERENCE_GFLOPS / gflops`` (measured when
    ``gflops`` is None). Above 1 on a slower machine."""
    gflops = measured_gflops() if gflops is None else gflops
    if not gflops > 0:
        raise ValueError(f"gflops must be > 0, got {gflops!r}")
    return REFERENCE_GFLOPS / gflops


def expected_seconds_here(reference_seconds: float, gflops: float | None = None) -> float:
    """``reference_seconds`` (a time measured on the reference machine) scaled to this machine's throughput."""
    if not reference_seconds >= 0:
        raise ValueError(f"reference_seconds must be >= 0, got {reference_seconds!r}")
    return reference_seconds * speed_factor(gflops)


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


def describe_machine() -> str:
    """One line: the CPU's model name, torch's thread count and the measured throughput."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            if match := re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read(), re.M):
                model = match.group(1).strip()
    except OSError:
        pass
    return f"{model}, {torch.get_num_threads()} thread(s): {measured_gflops():.0f} GFLOP/s (float32 matmul)"


if __name__ == "__main__":  # python -m tutorial_lib.machine_speed [THREADS]: the probe, for the README's tables
    n_threads = int(sys.argv[1]) if len(sys.argv) > 1 else None
    if n_threads:
        torch.set_num_threads(n_threads)
    print(json.dumps({"machine": describe_machine(), "gflops": round(measured_gflops(), 1), "isas": kernel_isas()}))
