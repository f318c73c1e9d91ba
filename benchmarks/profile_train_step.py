"""Where one training update of chapter 09's character GPT spends its time, by kind of operator.

Runs the recipe's update (batch, forward, loss, backward, clipping, fused AdamW) under ``torch.profiler`` and prints
one row per kind: matrix multiplications, attention, softmax and cross-entropy, layer norm, activation, element-wise
and copies, optimizer, data loading, and what is left of the wall time (Python and the dispatcher). The profiler
slows each operator a little; the first line gives the unprofiled time of an update for scale.

    .venv/bin/python benchmarks/profile_train_step.py [--precision fp32|bf16] [--steps 20] [--threads N]
"""

from __future__ import annotations

import argparse
import collections
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from tutorial_lib.data import load_shakespeare_char
from tutorial_lib.data.shakespeare import get_batch
from tutorial_lib.models.gpt import GPT
from tutorial_lib.recipes.char_gpt import CHAR_BATCH_SIZE, CHAR_GPT_CONFIG, CHAR_TRAIN_CONFIG
from tutorial_lib.training import language_model_loss, make_adamw, precision_context

KINDS = (  # (kind, substrings of the aten operator's name), first match wins
    ("attention", ("scaled_dot_product", "flash_attention")),
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")),
    ("softmax, cross-entropy", ("softmax", "nll_loss", "cross_entropy")),
    ("layer norm", ("layer_norm",)),
    ("activation", ("relu", "threshold", "clamp", "gelu")),
    ("optimizer", ("adam", "zero_", "norm", "foreach", "clip")),
    ("embedding", ("embedding", "index_select")),
)


def kind_of(name: str) -> str:
    for kind, needles in KINDS:
        if any(needle in name for needle in needles):
            return kind
    return "element-wise, copies, other ops"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dataset = load_shakespeare_char()
    torch.manual_seed(0)
    model = GPT(CHAR_GPT_CONFIG)
    cfg = CHAR_TRAIN_CONFIG
    optimizer = make_adamw(model, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas)
    generator = torch.Generator().manual_seed(0)

    def update() -> None:
        with record_function("data loading"):
            batch = get_batch(dataset.train, CHAR_BATCH_SIZE, CHAR_GPT_CONFIG.n_ctx, generator)
        with precision_context(args.precision, "cpu"):
            loss = language_model_loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()

    for _ in range(10):
        update()
    start = time.perf_counter()
    for _ in range(args.steps):
        update()
    wall_ms = (time.perf_counter() - start) / args.steps * 1e3
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(args.steps):
            update()
        profiled_ms = (time.perf_counter() - start) / args.steps * 1e3
    by_kind: dict[str, float] = collections.defaultdict(float)
    data_ms = 0.0
    for event in prof.key_averages():
        if event.key == "data loading":
            data_ms = event.cpu_time_total / 1e3 / args.steps
        elif event.key.startswith("aten::"):
            by_kind[kind_of(event.key)] += event.self_cpu_time_total / 1e3 / args.steps
    by_kind["data loading"] = data_ms
    by_kind["element-wise, copies, other ops"] -= min(data_ms, by_kind["element-wise, copies, other ops"])
    by_kind["Python and dispatch (the rest)"] = max(0.0, profiled_ms - sum(by_kind.values()))
    print(f"precision={args.precision} threads={torch.get_num_threads()} update_ms={wall_ms:.1f} "
          f"(profiled: {profiled_ms:.1f} ms)")
    print(f"{'kind':<34} {'ms/update':>9} {'share':>6}")
    for kind, ms in sorted(by_kind.items(), key=lambda item: -item[1]):
        print(f"{kind:<34} {ms:>9.1f} {ms / profiled_ms:>6.1%}")


if __name__ == "__main__":
    main()
