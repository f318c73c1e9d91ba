"""What a long cell is doing, how long it should take, and how far it has got (every chapter that trains).

A cell that trains for more than a few seconds opens a :class:`Progress` before it starts. It shows one line: what
runs, how long it takes on the CI machine (an estimate from measured seconds per update) and on this machine (the
same, scaled by :mod:`tutorial_lib.machine_speed`'s timing of one small update here), and, in Jupyter, the same
line extended in place with the progress (update, loss, seconds) at most once a second. The time "here" differs
from machine to machine; ``nbval_sanitize.cfg`` normalises it when a notebook's outputs are compared.

Why a display and not a progress bar. A bar (tqdm's widget) sends a message per refresh; a fresh run under nbval
received thousands and timed out. Here the line is one ``display_data`` output whose live refreshes are
``update_display_data`` messages, which nbval does not compare, and the last refresh puts back the first text. So
the stored output and a fresh run's are the same line whether the model was trained or loaded from the cache, and
the check of a cell's output does not depend on how long its training took. Outside Jupyter (scripts, tests) the
line is printed, and the progress goes to stderr every ``TERMINAL_INTERVAL`` seconds.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tutorial_lib.machine_speed import REFERENCE_MACHINE, expected_seconds_here

CI_MACHINE = REFERENCE_MACHINE  # where the stored times were measured
REFRESH_SECONDS = 1.0  # at most one refresh of the Jupyter line a second
TERMINAL_INTERVAL = 10.0  # seconds between two progress lines on stderr outside Jupyter

_open: list[Progress] = []  # the announcements in force, outermost first: only the first shows a line


def describe_seconds(seconds: float) -> str:
    """A duration as a reader wants it: "about 40 s", "about 3 min"."""
    if seconds < 10:
        return f"about {max(1, round(seconds))} s"
    if seconds < 90:
        return f"about {round(seconds / 5) * 5} s"
    return f"about {round(seconds / 60)} min"


class _Line:
    """The plain-text object shown in Jupyter (its ``text/plain`` is the line)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _in_jupyter() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class Progress:
    """One line that says what runs and, while it runs, how far it has got. Use :func:`announce`."""

    def __init__(self, what: str, expected_seconds: float | None = None) -> None:
        if not isinstance(what, str) or not what:
            raise ValueError(f"what must be a non-empty string, got {what!r}")
        if expected_seconds is not None and not expected_seconds >= 0:
            raise ValueError(f"expected_seconds must be >= 0 or None, got {expected_seconds!r}")
        if expected_seconds is None:
            self.line = what
        else:  # the reference's time, and the same scaled to this machine's measured speed (nbval_sanitize.cfg)
            here = describe_seconds(expected_seconds_here(expected_seconds))
            self.line = f"{what}: {describe_seconds(expected_seconds)} on {CI_MACHINE}, {here} here."
        self._handle = None
        self._last = 0.0
        self._start = 0.0

    def open(self) -> None:
        self._start = time.perf_counter()
        if _in_jupyter():
            from IPython.display import display

            self._handle = display(_Line(self.line), display_id=True)
        else:
            print(self.line, flush=True)

    def update(self, text: str) -> None:
        """Show ``text`` after the line (throttled; nothing is stored)."""
        now = time.perf_counter()
        interval = REFRESH_SECONDS if self._handle is not None else TERMINAL_INTERVAL
        if now - self._last < interval:
            return
        self._last = now
        elapsed = f"{now - self._start:.0f} s"
        if self._handle is not None:
            self._handle.update(_Line(f"{self.line} Now: {text}, {elapsed}."))
        else:
            print(f"  {text}, {elapsed}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.update(_Line(self.line))  # the stored output is the first line again


@contextmanager
def announce(what: str, expected_seconds: float | None = None) -> Iterator[Progress]:
    """Show what runs and its expected time on the CI machine; inside, :func:`report` refreshes the line.

    Nested announcements (one training run inside a sweep) show nothing of their own: the outermost line reports."""
    progress = Progress(what, expected_seconds)
    if not _open:
        progress.open()
    _open.append(progress)
    try:
        yield _open[0]
    finally:
        _open.pop()
        if not _open:
            progress.close()


def report(text: str) -> None:
    """Refresh the shown (outermost) line with ``text``; nothing happens outside :func:`announce`."""
    if _open:
        _open[0].update(text)
