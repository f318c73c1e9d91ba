"""A pytest plugin for `make test`'s stages: where the time went, by file (`-p tools.time_report`).

At the end of a run it prints the files (a test module, or a notebook under nbval) whose tests took longest, each
the sum of its tests' set-up, call and tear-down over every worker, and their share of the whole; the environment
variable ``TIME_REPORT_TOP`` sets how many (12). pytest's own ``--durations`` names the slowest single tests or
cells; this names the files to look at first when a stage grows.
"""

from __future__ import annotations

import os
from collections import defaultdict

TOP = int(os.environ.get("TIME_REPORT_TOP", "12"))  # how many files to list


def pytest_terminal_summary(terminalreporter) -> None:
    seconds: dict[str, float] = defaultdict(float)
    counted: set[tuple[str, str]] = set()
    for reports in terminalreporter.stats.values():
        for report in reports:
            nodeid, when = getattr(report, "nodeid", None), getattr(report, "when", None)
            if not nodeid or when is None or (nodeid, when) in counted:
                continue
            counted.add((nodeid, when))
            seconds[nodeid.split("::")[0]] += getattr(report, "duration", 0.0)
    total = sum(seconds.values())
    if not total:
        return
    terminalreporter.write_sep("=", f"seconds by file, the {min(TOP, len(seconds))} slowest of {len(seconds)}")
    for path, spent in sorted(seconds.items(), key=lambda item: -item[1])[:TOP]:
        terminalreporter.write_line(f"{spent:8.1f} s {spent / total:6.1%}  {path}")
    terminalreporter.write_line(f"{total:8.1f} s in all (summed over workers)")
