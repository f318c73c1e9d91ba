"""Train chapter 09's reference character-level GPT on tiny Shakespeare and time it to a validation loss of 1.90.

Prints one row per evaluation (step, training seconds, train loss, val loss), the throughput in tokens/s and
GFLOP/s with the fraction of the fp32 matrix-multiplication ceiling measured on this machine (and, for a bf16 run,
of the bf16 one too), and last ``time_to_val_1.90_s=<seconds>`` (training time, evaluation excluded; ``nan`` if
the target was not reached). ``--target`` sets another loss (nanoGPT's final validation loss, to compare with it).

    .venv/bin/python benchmarks/train_char_gpt.py [--eval-interval 25] [--threads N] [--device cpu]
                                                  [--precision auto|fp32|bf16] [--target 1.90]

``--precision auto`` (the default) trains in bfloat16 where the device multiplies it natively (an AVX512-BF16 or AMX
CPU, a GPU) and in fp32 elsewhere; the first line says which. The chapters train in fp32 (``--precision fp32``).

FLOPs per token are counted as 6 × (weights of every matrix multiplication, the unembedding included) plus
12 × n_layers × n_ctx × d_model for the attention scores and their use (Kaplan et al. 2020; causal masking's
skipped half is not subtracted).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time

import torch
from torch import nn

from tutorial_lib.data import load_shakespeare_char
from tutorial_lib.environment import pick_device
from tutorial_lib.recipes.char_gpt import CHAR_BATCH_SIZE, CHAR_GPT_CONFIG, CHAR_TRAIN_CONFIG, train_char_gpt

TARGET = 1.90


def flops_per_token(model: nn.Module, n_layers: int, n_ctx: int, d_model: int) -> float:
    matmul_weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    return 6 * matmul_weights + 12 * n_layers * n_ctx * d_model


def matmul_ceiling_gflops(
    n_rows: int, d_model: int, device: torch.device, seconds: float = 2.0, dtype: torch.dtype = torch.float32
) -> float:
    """GFLOP/s of the model's own largest matrix product, (batch·n_ctx, d_model) @ (d_model, 4·d_model), in ``dtype``."""
    a = torch.randn(n_rows, d_model, device=device, dtype=dtype)
    b = torch.randn(d_model, 4 * d_model, device=device, dtype=dtype)
    for _ in range(5):
        a @ b
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        count += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    return count * 2 * n_rows * d_model * 4 * d_model / (time.perf_counter() - start) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-interval", type=int, default=25)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: PyTorch's choice)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"),
                        help="bf16: the forward under torch.autocast (CPUs with native bfloat16 only); auto (default): "
                             "bf16 where the device has it natively, else fp32 (the chapters' precision)")
    parser.add_argument("--target", type=float, default=TARGET, help="the validation loss to time (default: 1.90)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    if args.precision == "auto":
        native = device.type == "cuda" or (device.type == "cpu" and torch.ops.mkldnn._is_mkldnn_bf16_supported())
        args.precision = "bf16" if native else "fp32"
    dataset = load_shakespeare_char()
    train_cfg = dataclasses.replace(CHAR_TRAIN_CONFIG, eval_interval=args.eval_interval)
    cfg = CHAR_GPT_CONFIG
    print(f"device={device} threads={torch.get_num_threads()} precision={args.precision} model={cfg} "
          f"batch={CHAR_BATCH_SIZE}")
    print(f"train={train_cfg}")
    print(f"{'step':>6} {'seconds':>8} {'train':>7} {'val':>7}")
    first_hit: list[float] = []

    def report(event: str, info: dict) -> None:
        if event == "eval":
            print(f"{info['step']:>6} {info['seconds']:>8.1f} {info['train_loss']:>7.3f} {info['val_loss']:>7.3f}", flush=True)
            if info["val_loss"] <= args.target and not first_hit:
                first_hit.append(info["seconds"])

    model, history = train_char_gpt(dataset, train_cfg=train_cfg, device=device, callbacks=[report], progress=False,
                                    precision=args.precision)
    train_seconds = history.eval_seconds[-1]
    tokens = train_cfg.max_steps * CHAR_BATCH_SIZE * cfg.n_ctx
    achieved = tokens * flops_per_token(model, cfg.n_layers, cfg.n_ctx, cfg.d_model) / train_seconds / 1e9
    ceiling = matmul_ceiling_gflops(CHAR_BATCH_SIZE * cfg.n_ctx, cfg.d_model, device)
    line = (f"tokens/s={tokens / train_seconds:.0f} achieved_gflops={achieved:.1f} matmul_ceiling_gflops={ceiling:.1f} "
            f"fraction_of_ceiling={achieved / ceiling:.2f}")
    if args.precision == "bf16":  # the same work against what the cores do in bfloat16
        bf16_ceiling = matmul_ceiling_gflops(CHAR_BATCH_SIZE * cfg.n_ctx, cfg.d_model, device, dtype=torch.bfloat16)
        line += f" bf16_matmul_ceiling_gflops={bf16_ceiling:.1f} fraction_of_bf16_ceiling={achieved / bf16_ceiling:.2f}"
    print(f"{line} final_val={history.final_val_loss:.3f}")
    target = f"{args.target:.2f}" if round(args.target, 2) == args.target else f"{args.target:g}"
    print(f"time_to_val_{target}_s={first_hit[0] if first_hit else math.nan:.1f}")


if __name__ == "__main__":
    main()
