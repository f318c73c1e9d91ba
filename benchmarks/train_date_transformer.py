"""Train chapter 07's encoder-decoder Transformer on date normalisation and time it to 99% exact match.

Prints one row per evaluation (every ``--eval-interval`` updates): the training seconds so far, the validation loss
of the current weights, and the exact match of greedy decoding on the 2,000 validation dates for the model the
recipe would return if it stopped there (the average of its last checkpoints, §6.1). Then the exact match of the
model it returns on the 1,000 test dates, greedy and with beam search (width 4, α = 0.6), and last
``time_to_exact_match_0.99_s=<seconds>``: the training time (evaluations excluded) at the first evaluation that
reaches 99% on the validation dates (``nan`` if none does).

    .venv/bin/python benchmarks/train_date_transformer.py [--eval-interval 100] [--threads N] [--device cpu]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import time

import torch

from tutorial_lib.environment import pick_device
from tutorial_lib.models.transformer import Transformer
from tutorial_lib.recipes import (
    DATE_AVERAGE_INTERVAL, DATE_AVERAGE_LAST, DATE_BATCH_SIZE, DATE_TRAIN_CONFIG, DATE_TRANSFORMER_CONFIG,
    CheckpointAverage, date_splits, exact_match, train_date_transformer,
)

TARGET = 0.99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-interval", type=int, default=100)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: PyTorch's choice)")
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    if args.eval_interval % DATE_AVERAGE_INTERVAL:
        parser.error(f"--eval-interval must be a multiple of {DATE_AVERAGE_INTERVAL} (a checkpoint is kept every"
                     f" {DATE_AVERAGE_INTERVAL} updates)")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    train_cfg = dataclasses.replace(DATE_TRAIN_CONFIG, eval_interval=args.eval_interval)
    print(f"device={device} threads={torch.get_num_threads()} model={DATE_TRANSFORMER_CONFIG} batch={DATE_BATCH_SIZE}")
    print(f"train={train_cfg} averaging the last {DATE_AVERAGE_LAST} checkpoints, one every {DATE_AVERAGE_INTERVAL}")
    splits = date_splits()
    torch.manual_seed(0)  # as train_date_transformer does for seed 0, so that this is the recipe's run
    model = Transformer(DATE_TRANSFORMER_CONFIG)
    averager = CheckpointAverage(model, DATE_AVERAGE_LAST, DATE_AVERAGE_INTERVAL)  # the recipe's own, mirrored
    averaged = copy.deepcopy(model)
    first_hit: list[float] = []
    evaluating = [0.0, 0.0]  # seconds spent in this script's exact-match evaluations: in all, and the latest

    def report(event: str, info: dict) -> None:
        averager(event, info)  # called first, so that it holds the checkpoint of this very update
        if event != "eval":
            return
        seconds = info["seconds"] - evaluating[0]  # the loop's clock runs through this callback's earlier calls
        start = time.perf_counter()
        averaged.load_state_dict(averager.average())
        match = exact_match(averaged, splits.val)
        evaluating[1] = time.perf_counter() - start
        evaluating[0] += evaluating[1]
        print(f"{info['step']:>6} {seconds:>8.1f} val_loss={info['val_loss']:.4f} exact_match={match:.4f}"
              f" (average of the checkpoints after updates {averager.steps})", flush=True)
        if match >= TARGET and not first_hit:
            first_hit.append(seconds)

    print(f"{'step':>6} {'seconds':>8}")
    model, history = train_date_transformer(train_cfg=train_cfg, model=model, device=device, callbacks=[report],
                                            progress=False)
    # The last evaluation's clock reading was taken before its callback ran: only the earlier callbacks are inside it.
    print(f"training_s={history.eval_seconds[-1] - (evaluating[0] - evaluating[1]):.1f}"
          f" (exact-match evaluations took {evaluating[0]:.1f} s more)")
    greedy = exact_match(model, splits.test)
    start = time.perf_counter()
    beam = exact_match(model, splits.test, beam_width=4)
    print(f"test_exact_match_greedy={greedy:.4f} test_exact_match_beam4={beam:.4f} (beam search took {time.perf_counter() - start:.1f} s)")
    print(f"time_to_exact_match_{TARGET:.2f}_s={first_hit[0] if first_hit else math.nan:.1f}")


if __name__ == "__main__":
    main()
