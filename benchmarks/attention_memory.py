"""Time and peak memory of causal self-attention five ways, against the sequence length (chapter 13).

Naive (chapter 03's path with its mask), PyTorch's fused `F.scaled_dot_product_attention`, tiled attention with the
online softmax, banded (sliding-window) attention and causal linear attention, on one sequence with --heads heads of
--d-head, float32 on the CPU. Time: the best of --repeats calls after a warm-up. Memory: the peak of the tensors a
call creates (`peak_tensor_memory`, the same on any machine). Prints both tables with the exponents fitted on the
three longest lengths, then (Linux, unless --cap-length 0) the memory-cap run: each of naive, F.sdpa and tiled in a
fresh process whose address space may grow by --cap-mib after warming up.

Training (unless --train-heads 0): the peak tensor memory of one forward and backward for naive and tiled attention
differentiated by autograd, F.sdpa with its fused backward and `flash_attention` with FlashAttention's backward, with
--train-heads heads, and (Linux, unless --train-cap-length 0) one training step of each in a capped process.

    .venv/bin/python benchmarks/attention_memory.py [--lengths 256 512 1024 2048 4096] [--repeats 3]
        [--window 256] [--block 256] [--cap-length 16384] [--cap-mib 512]
        [--train-heads 1] [--train-cap-length 8192] [--train-cap-mib 128]
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
    measure_training_memory,
    run_under_memory_cap,
    training_methods,
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
    parser.add_argument("--train-heads", type=int, default=1, help="heads of the training-memory table (0: skip it)")
    parser.add_argument("--train-cap-length", type=int, default=8192, help="length of the capped training step (0: skip)")
    parser.add_argument("--train-cap-mib", type=int, default=128)
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

    if args.train_heads:
        peaks = measure_training_memory(training_methods(block=args.block), lengths, n_heads=args.train_heads,
                                        d_head=args.d_head)
        print(f"\ntraining: peak tensor memory of one forward + backward (MiB), {args.train_heads} head(s) of "
              f"{args.d_head}; naive and tiled differentiated by autograd, F.sdpa and flash with their own backward")
        print(f"{'method':<8}", "".join(f"{n:>10}" for n in lengths), f"{'exponent':>10}")
        for name, by_length in peaks.items():
            values = [by_length[n] for n in lengths]
            exponent = fit_exponent(lengths[-3:], values[-3:])
            print(f"{name:<8}", "".join(f"{v / 2**20:>10.1f}" for v in values), f"{exponent:>10.2f}")
        print(f"naive ÷ flash at n = {lengths[-1]}: {peaks['naive'][lengths[-1]] / peaks['flash'][lengths[-1]]:.1f}")

    if args.train_cap_length and sys.platform.startswith("linux"):
        cap = args.train_cap_mib * 2**20
        print(f"\none training step at {args.train_cap_length} positions, 1 head of {args.d_head}, address space capped "
              f"at +{args.train_cap_mib} MiB")
        print(f"{'method':<8} {'completed':>9} {'seconds':>8} {'peak resident (MiB)':>20}   error")
        for method in CAPPED_METHODS:
            run = run_under_memory_cap(method, args.train_cap_length, cap_bytes=cap, train=True, d_head=args.d_head,
                                       block=512)
            print(f"{method:<8} {str(run.completed):>9} {run.seconds:>8.2f} {run.peak_resident_bytes / 2**20:>20.0f}   "
                  f"{run.error[:70]}")


if __name__ == "__main__":
    main()
