"""Time and peak memory of causal self-attention five ways, against the sequence length (chapter 13).

Naive (chapter 03's path with its mask), PyTorch's fused `F.scaled_dot_product_attention`, tiled attention with the
online softmax, banded (sliding-window) attention and causal linear attention, on one sequence with --heads heads of
--d-head, float32 on the CPU. Time: the best of --repeats calls after a warm-up. Memory: the peak of the tensors a
call creates (`peak_tensor_memory`, the same on any machine). Prints both tables with the exponents fitted on the
three longest lengths, then (Linux, unless --cap-length 0) the memory-cap run: each of naive, F.sdpa and tiled in a
fresh process whose address space may grow by --cap-mib after warming up.

    .venv/bin/python benchmarks/attention_memory.py [--lengths 256 512 1024 2048 4096] [--repeats 3]
        [--window 256] [--block 256] [--cap-length 16384] [--cap-mib 512]
"""

from __future__ import annotations

import argparse
import sys

import torch

from tutorial_lib.widgets.attention_costs import (
    CAPPED_METHODS,
    attention_methods,
    fit_exponent,
    measure_attention_costs,
    run_under_memory_cap,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-head", type=int, default=64)
    parser.add_argument("--window", type=int, default=256, help="banded attention's window")
    parser.add_argument("--block", type=int, default=256, help="tiled attention's block_q = block_k")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cap-length", type=int, default=16384, help="sequence length of the capped run (0: skip it)")
    parser.add_argument("--cap-mib", type=int, default=512)
    args = parser.parse_args()
    lengths = sorted(args.lengths)
    if len(lengths) < 3:
        parser.error("--lengths needs at least three lengths (the exponents are fitted on the three longest)")

    costs = measure_attention_costs(attention_methods(window=args.window, block=args.block), lengths,
                                    n_heads=args.heads, d_head=args.d_head, repeats=args.repeats)
    print(f"threads={torch.get_num_threads()} torch={torch.__version__}; causal self-attention, batch 1, "
          f"{args.heads} heads of {args.d_head}, float32; tiled {args.block}×{args.block}, banded window {args.window}; "
          f"best of {args.repeats}")
    for title, value, unit in (("time", lambda c: c.seconds * 1000, "ms"), ("peak tensor memory", lambda c: c.peak_bytes / 2**20, "MiB")):
        print(f"\n{title} ({unit})")
        print(f"{'method':<8}", "".join(f"{n:>10}" for n in lengths), f"{'exponent':>10}")
        for name, by_length in costs.items():
            values = [value(by_length[n]) for n in lengths]
            exponent = fit_exponent(lengths[-3:], values[-3:])
            print(f"{name:<8}", "".join(f"{v:>10.1f}" for v in values), f"{exponent:>10.2f}")

    if args.cap_length and sys.platform.startswith("linux"):
        cap = args.cap_mib * 2**20
        print(f"\n{args.cap_length} positions, 1 head of {args.d_head}, address space capped at +{args.cap_mib} MiB "
              f"(naive's score matrix: {args.cap_length**2 * 4 / 2**20:,.0f} MiB)")
        print(f"{'method':<8} {'completed':>9} {'seconds':>8} {'peak resident (MiB)':>20}   error")
        for method in CAPPED_METHODS:
            run = run_under_memory_cap(method, args.cap_length, cap_bytes=cap, d_head=args.d_head, block=512)
            print(f"{method:<8} {str(run.completed):>9} {run.seconds:>8.2f} {run.peak_resident_bytes / 2**20:>20.0f}   "
                  f"{run.error[:70]}")


if __name__ == "__main__":
    main()
