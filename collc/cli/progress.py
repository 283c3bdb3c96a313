"""Progress bars of the commands that can run long: `collc check` (a range, or one large instance),
`collc sim` and `collc run`.

A bar is drawn by rich on stderr and erased when the work ends (a transient display), so that
what a command prints on stdout is the same with a bar and without one.  The library below
`collc.cli` knows nothing of bars: it takes an ``on_progress(done, total)`` callback, and `Bar`
turns those calls into the display.

Whether a bar is drawn is the environment variable ``COLLC_PROGRESS``'s to say:

* ``auto`` (the default): when stdout and stderr are both terminals, and not with ``--json``;
* ``always``: as if they were terminals (still not with ``--json``);
* ``never``: no bar.

A bar appears only once its work has run for ``delay`` seconds (`DELAY_S`, so that a short
command prints nothing extra; a range of instances shows its bar at once).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

ENV = "COLLC_PROGRESS"
MODES = ("auto", "always", "never")
DELAY_S = 2.0
"""How long the work of a command runs before its bar appears."""

ProgressFn = Callable[[int, int], None]

_active: list[Bar] = []  # the bars on display or waiting for their delay, innermost last


def mode() -> str:
    """``COLLC_PROGRESS``: auto, always or never (a usage error otherwise)."""
    value = os.environ.get(ENV, "").strip().lower() or "auto"
    if value not in MODES:
        raise click.UsageError(f"environment variable {ENV}={os.environ[ENV]!r}: expected one of {', '.join(MODES)}")
    return value


def _terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def wanted(quiet: bool = False) -> bool:
    """Whether a command draws a bar: never when ``quiet`` (``--json``), else as `mode` says."""
    chosen = mode()
    if quiet or chosen == "never":
        return False
    return chosen == "always" or (_terminal(sys.stdout) and _terminal(sys.stderr))


class Bar:
    """One command's bar.  `on_progress` is the callback to hand the library (None when no bar is drawn);
    `stage` starts a new piece of work under a new description."""

    def __init__(self, progress: Progress | None, description: str, total: int | None = None) -> None:
        self._progress = progress
        self._task: TaskID | None = None
        self._lock = threading.Lock()
        self._shown = self._closed = False
        if progress is not None:
            self._task = progress.add_task(description, total=total)

    @property
    def on_progress(self) -> ProgressFn | None:
        return self._update if self._progress is not None else None

    def _update(self, done: int, total: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=done, total=total)

    def stage(self, description: str, total: int) -> None:
        """A new piece of work of ``total`` units: the bar starts again from zero."""
        if self._progress is not None and self._task is not None:
            self._progress.reset(self._task, total=total, description=description)

    def show(self) -> None:
        """Draw the bar now (unless it is closed already)."""
        with self._lock:
            if self._progress is not None and not self._shown and not self._closed:
                self._progress.start()
                self._shown = True

    def close(self) -> None:
        """Erase the bar for good (before anything else is printed)."""
        with self._lock:
            if self._progress is not None and self._shown and not self._closed:
                self._progress.stop()
            self._closed = True


@contextmanager
def progress_bar(
    description: str, total: int | None = None, *, quiet: bool = False, delay: float | None = None
) -> Iterator[Bar]:
    """A bar for the work done inside the block (``total`` units, or unknown until `Bar.stage` or the first
    progress call says), drawn after ``delay`` seconds (default `DELAY_S`) when `wanted`; erased on leaving.

    Print nothing on stdout or stderr inside the block: `hide` (which `fail_input` calls) erases the bar first."""
    if not wanted(quiet):
        yield Bar(None, description, total)
        return
    console = Console(stderr=True, force_terminal=True if mode() == "always" else None)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    )
    bar = Bar(progress, description, total)
    delay = DELAY_S if delay is None else delay
    timer = threading.Timer(delay, bar.show)
    timer.daemon = True
    _active.append(bar)
    try:
        if delay <= 0:
            bar.show()
        else:
            timer.start()
        yield bar
    finally:
        timer.cancel()
        bar.close()
        _active.remove(bar)


def hide() -> None:
    """Erase every bar on display, for a message about to be printed."""
    for bar in reversed(_active):
        bar.close()
