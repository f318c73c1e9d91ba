"""Train chapter 09's reference character-level GPT on tiny Shakespeare and time it to a validation loss of 1.90.

Prints one row per evaluation (step, training seconds, train loss, val loss), the throughput in tokens/s and
GFLOP/s with the fraction of a matrix-multiplication ceiling measured on this machine, and last
``time_to_val_1.90_s=<seconds>`` (training time, evaluation excluded; ``nan`` if the target was not reached).

    .venv/bin/python benchmarks/train_char_gpt.py [--eval-interval 25] [--threads N] [--device cpu]

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
from tutorial_lib.recipes import CHAR_BATCH_SIZE, CHAR_GPT_CONFIG, CHAR_TRAIN_CONFIG, train_char_gpt

TARGET = 1.90


def flops_per_token(model: nn.Module, n_layers: int, n_ctx: int, d_model: int) -> float:
    matmul_weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    return 6 * matmul_weights + 12 * n_layers * n_ctx * d_model


def matmul_ceiling_gflops(n_rows: int, d_model: int, device: torch.device, seconds: float = 2.0) -> float:
    """fp32 GFLOP/s of the model's own largest matrix product, (batch·n_ctx, d_model) @ (d_model, 4·d_model)."""
    a = torch.randn(n_rows, d_model, device=device)
    b = torch.randn(d_model, 4 * d_model, device=device)
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
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    dataset = load_shakespeare_char()
    train_cfg = dataclasses.replace(CHAR_TRAIN_CONFIG, eval_interval=args.eval_interval)
    cfg = CHAR_GPT_CONFIG
    print(f"device={device} threads={torch.get_num_threads()} model={cfg} batch={CHAR_BATCH_SIZE}")
    print(f"train={train_cfg}")
    print(f"{'step':>6} {'seconds':>8} {'train':>7} {'val':>7}")
    first_hit: list[float] = []

    def report(event: str, info: dict) -> None:
        if event == "eval":
            print(f"{info['step']:>6} {info['seconds']:>8.1f} {info['train_loss']:>7.3f} {info['val_loss']:>7.3f}", flush=True)
            if info["val_loss"] <= TARGET and not first_hit:
                first_hit.append(info["seconds"])

    model, history = train_char_gpt(dataset, train_cfg=train_cfg, device=device, callbacks=[report], progress=False)
    train_seconds = history.eval_seconds[-1]
    tokens = train_cfg.max_steps * CHAR_BATCH_SIZE * cfg.n_ctx
    achieved = tokens * flops_per_token(model, cfg.n_layers, cfg.n_ctx, cfg.d_model) / train_seconds / 1e9
    ceiling = matmul_ceiling_gflops(CHAR_BATCH_SIZE * cfg.n_ctx, cfg.d_model, device)
    print(f"tokens/s={tokens / train_seconds:.0f} achieved_gflops={achieved:.1f} matmul_ceiling_gflops={ceiling:.1f} "
          f"fraction_of_ceiling={achieved / ceiling:.2f} final_val={history.final_val_loss:.3f}")
    print(f"time_to_val_{TARGET:.2f}_s={first_hit[0] if first_hit else math.nan:.1f}")


if __name__ == "__main__":
    main()
