"""Seconds per notebook when a teacher grades a folder: one kernel at a time vs several side by side (issue 9).

Copies a solutions notebook --copies times into a temporary folder and grades the folder three ways with
``tutorial_lib.grade.grade_all``: one notebook at a time with every core's threads; one notebook per core with each
kernel's thread pools limited to its share (what the grader does); and one notebook per core with every kernel
starting a full thread pool (what happened before: the cores are oversubscribed). Prints one table and, last,
``seconds_per_notebook_parallel=<seconds>``.

    .venv/bin/python benchmarks/grade_folder.py [--copies 20] [--notebook solutions/03_scaled_dot_product_attention.ipynb]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tutorial_lib import grade

ROOT = Path(__file__).resolve().parents[1]


def seconds_per_notebook(paths: list[Path], jobs: int, threads: int | None) -> tuple[float, int, list[str]]:
    """Wall-clock seconds per notebook, the total score and one line per lost point's reason, grading ``paths``
    ``jobs`` at a time, each kernel with ``threads`` threads (None: the grader's own sharing of the cores)."""
    start = time.perf_counter()
    if threads is None:
        grades = grade.grade_all(paths, jobs=jobs)
    else:  # fresh worker processes, as grade_all makes them, but with the thread count forced
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            grades = list(pool.map(grade.grade_notebook, paths, [grade.DEFAULT_TIMEOUT] * len(paths),
                                   [threads] * len(paths)))
    seconds = (time.perf_counter() - start) / len(paths)
    lost = [f"  {Path(g.path).name} {e.exercise_id} {e.points}/{e.max_points}: {e.summary}"
            for g in grades for e in g.exercises if e.points < e.max_points]
    return seconds, sum(g.points for g in grades), lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=20)
    parser.add_argument("--notebook", type=Path, default=ROOT / "solutions" / "03_scaled_dot_product_attention.ipynb")
    args = parser.parse_args()
    args.notebook = args.notebook.resolve()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for index in range(args.copies):
            path = Path(folder) / f"{args.notebook.stem}_{index:02d}.ipynb"
            shutil.copy(args.notebook, path)
            paths.append(path)
        runs = [
            ("one notebook at a time", 1, None, f"{cores} threads"),
            ("one notebook per core, thread pools shared out", cores, None, "1 thread each"),
            ("one notebook per core, full thread pools", cores, cores, f"{cores} threads each"),
        ]
        print(f"{args.copies} copies of {args.notebook.relative_to(ROOT)}, {cores} cores")
        print(f"{'how':<48} {'kernels':>7} {'threads':>16} {'s / notebook':>13} {'score':>9}")
        results = {}
        for name, jobs, threads, thread_text in runs:
            per_notebook, score, lost = seconds_per_notebook(paths, jobs, threads)
            results[name] = per_notebook
            print(f"{name:<48} {jobs:>7} {thread_text:>16} {per_notebook:>13.2f} {score:>9}")
            for line in lost:  # a copy of a solution that lost points says why
                print(line)
    print(f"seconds_per_notebook_parallel={results[runs[1][0]]:.2f}")


if __name__ == "__main__":
    main()
