"""Tokens per second of `generate` with and without the KV cache (chapter 10).

Batch 1, 500 new tokens after prompts of 64, 256 and 1024 tokens, on the chapter-09 model shape with a context
long enough for the longest run. The weights are random: speed does not depend on them. Prints one table; each
figure is the median of --repeats runs.

    .venv/bin/python benchmarks/generate_speed.py [--repeats 3] [--new-tokens 500] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tutorial_lib.environment import pick_device
from tutorial_lib.models.gpt import GPT
from tutorial_lib.recipes import CHAR_GPT_CONFIG
from tutorial_lib.sampling import generate


def tokens_per_second(model: GPT, prompt_len: int, new_tokens: int, use_cache: bool, device: torch.device) -> float:
    prompt = torch.randint(model.cfg.d_vocab, (1, prompt_len), generator=torch.Generator().manual_seed(prompt_len)).to(device)
    generator = torch.Generator(device=device).manual_seed(0)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    generate(model, prompt, new_tokens, generator=generator, use_cache=use_cache)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return new_tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--new-tokens", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default=None, help="default: the fastest present (TUTORIAL_LIB_DEVICE overrides)")
    args = parser.parse_args()
    device = pick_device(args.device)
    torch.manual_seed(0)
    cfg = CHAR_GPT_CONFIG.replace(n_ctx=max(args.contexts) + args.new_tokens)
    model = GPT(cfg).to(device).eval()
    generate(model, torch.zeros(1, 8, dtype=torch.long, device=device), 8)  # warm-up
    print(f"device={device} threads={torch.get_num_threads()} model: n_layers={cfg.n_layers} d_model={cfg.d_model} "
          f"n_heads={cfg.n_heads} n_ctx={cfg.n_ctx}; batch 1, {args.new_tokens} new tokens, median of {args.repeats}")
    print(f"{'context':>8} {'no cache tok/s':>15} {'cache tok/s':>12} {'speed-up':>9}")
    for context in args.contexts:
        plain = statistics.median(tokens_per_second(model, context, args.new_tokens, False, device) for _ in range(args.repeats))
        cached = statistics.median(tokens_per_second(model, context, args.new_tokens, True, device) for _ in range(args.repeats))
        print(f"{context:>8} {plain:>15.0f} {cached:>12.0f} {cached / plain:>8.1f}x")


if __name__ == "__main__":
    main()
