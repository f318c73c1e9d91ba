"""One process on the whole batch against 2 gloo ranks on half a batch each (chapter 15).

Both runs are ``torchrun -m tutorial_lib.train_data_parallel`` with the same settings and seed, one thread per rank:
``--nproc_per_node=1`` and ``--nproc_per_node=2``. Prints the largest difference between their final weights (the
same data is seen, so only the order of float32 additions differs), the tokens per second of each, and the time of
one all-reduce of the gradients on 2 ranks:

    max_weight_diff=…  tokens_per_s_1=…  tokens_per_s_2=…  comm_ms_per_step=…

    .venv/bin/python benchmarks/data_parallel.py [--updates 40] [--global-batch 32] [--d-model 128] [--strategy ddp]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

SETTINGS = ("updates", "global_batch", "n_ctx", "d_model", "n_heads", "n_layers")


def launch(nproc: int, out: Path, args: argparse.Namespace) -> dict:
    """Run the entry point under torchrun with ``nproc`` ranks at one thread each; rank 0's result and weights."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "tutorial_lib.train_data_parallel", "--out", str(out), "--strategy", args.strategy]
    for name in SETTINGS:
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(out.parent)}  # torchrun's logs go to the temporary folder
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    result = json.loads((out / "result.json").read_text())
    result["weights"] = torch.load(out / "weights.pt", weights_only=True)["model"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in zip(SETTINGS, (40, 32, 64, 128, 4, 4)):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    parser.add_argument("--strategy", choices=("ddp", "fsdp"), default="ddp")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        one = launch(1, Path(folder) / "one", args)
        two = launch(2, Path(folder) / "two", args)
    difference = max((one["weights"][k] - two["weights"][k]).abs().max().item() for k in one["weights"])
    print(f"{args.strategy}, {args.updates} updates of {args.global_batch} × {args.n_ctx} tokens, "
          f"{one['n_parameters']:,} parameters, one thread per rank, torch {torch.__version__}")
    print(f"max_weight_diff={difference:.2e}")
    print(f"tokens_per_s_1={one['tokens_per_s']:.0f}")
    print(f"tokens_per_s_2={two['tokens_per_s']:.0f}")
    print(f"comm_ms_per_step={two['comm_ms_per_step']:.2f}")


if __name__ == "__main__":
    main()
