"""Execute notebooks in place, each in a fresh kernel, and store their outputs and widget state (``make execute``).

    python tools/execute_notebooks.py                  # every notebook of chapters/, solutions/, exercises/
    python tools/execute_notebooks.py chapters/03_scaled_dot_product_attention.ipynb
    python tools/execute_notebooks.py --jobs 1         # one notebook at a time (default: 2 side by side)

The kernel runs in the notebook's folder on the CPU (``TUTORIAL_LIB_DEVICE=cpu``), so the stored outputs are the
ones ``make test`` (nbval) reproduces on any machine, with matplotlib's inline backend so figures are stored as PNG.
Widget model ids are renumbered in order of creation, so executing an unchanged notebook changes nothing.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tutorial_lib.checks.prediction import PREDICTIONS_ENV

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIRS = ("chapters", "solutions", "exercises")
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
KERNEL_ENV = {
    "TUTORIAL_LIB_DEVICE": "cpu",
    # The Makefile exports MPLBACKEND=agg for scripts and tests; in a kernel it would swallow every figure.
    "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    # Never download model weights while executing: chapter 08's real-GPT-2 cell must take its offline branch.
    "HF_HUB_OFFLINE": "1",
    # Stored outputs must be what nbval reproduces, so the thread count (which decides how matmuls split their sums)
    # is pinned: one thread per kernel, as `make test-notebooks` runs them, two notebooks side by side on the CI
    # machine's 2 cores (two kernels of 2 threads each would fight over the cores). Runs are bit-identical
    # (tests/test_determinism.py), so a model in the shared cache is the same whichever notebook trained it.
    "OMP_NUM_THREADS": "1",
}


def renumber_widgets(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Replace the random widget model ids by 1, 2, 3, … (as 32 hex digits) everywhere in the notebook."""
    state = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    text = json.dumps(notebook)
    for number, model_id in enumerate(list(state), start=1):
        text = text.replace(model_id, f"{number:032x}")
    return nbformat.from_dict(json.loads(text))


def execute(path: Path, timeout: int) -> None:
    """Run every cell of ``path`` top to bottom in a fresh kernel and write the notebook back with its outputs."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name=notebook.metadata.get("kernelspec", {}).get("name", "python3"),
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
        record_timing=False,  # no timestamps in the stored notebook
        coalesce_streams=True,  # one stream output per cell, however the kernel happened to flush it
    )
    with tempfile.TemporaryDirectory() as records:  # the stored outputs show the predictions recorded in this run
        client.execute(env={**os.environ, **KERNEL_ENV, PREDICTIONS_ENV: str(Path(records) / "predictions.json")})
    nbformat.write(renumber_widgets(notebook), path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="notebooks (default: chapters/, solutions/, exercises/)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds allowed per cell (default: 900)")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks executed side by side (default: 2)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    paths = [Path(p).resolve() for p in args.paths] or sorted(
        p for folder in NOTEBOOK_DIRS for p in (ROOT / folder).glob("*.ipynb")
    )
    # Each notebook runs in a kernel process of its own; the threads here only wait for them. Two notebooks that
    # need the same cached model do not both train it: the recipes' cache lock makes the second wait and load it.
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        failed = [path for path in pool.map(lambda path: execute_and_report(path, args.timeout), paths) if path]
    return 1 if failed else 0


def execute_and_report(path: Path, timeout: int) -> Path | None:
    """Execute ``path`` and print how long it took; on a failing cell print the error and return ``path``."""
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    start = time.perf_counter()
    try:
        execute(path, timeout)
    except CellExecutionError as error:
        # Leave the file as it was: a half-executed notebook must not be committed.
        print(f"FAILED {name}\n{error}", file=sys.stderr, flush=True)
        return path
    print(f"executed {name} in {time.perf_counter() - start:.1f} s", flush=True)
    return None


if __name__ == "__main__":
    sys.exit(main())
