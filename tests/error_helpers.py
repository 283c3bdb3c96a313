"""Helpers shared by the error tests."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from collc.diagnostics import CollError, format_error
from collc.elaborate import elaborate
from collc.frontend.program import parse_program

FILE = "t.coll"
# Lines 1-3 of most test programs; the interesting line is line 4 or 5.
HEADER = "algorithm t : allreduce\nparam p : int where p >= 1\nchunks 1\n"


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def parse_error(text: str, file: str = FILE) -> CollError:
    """The CollError that parsing/checking ``text`` raises."""
    with pytest.raises(CollError) as info:
        parse_program(text, file)
    return info.value


def elab_error(text: str, params: Mapping[str, Any] | None = None, file: str = FILE) -> CollError:
    """The CollError that elaborating ``text`` (which must parse) raises."""
    program = parse_program(text, file)
    with pytest.raises(CollError) as info:
        elaborate(program, {"p": 4} if params is None else params)
    return info.value


def col(text: str, line: int, needle: str) -> int:
    """1-based column of the first ``needle`` on ``line`` of ``text``."""
    source_line = text.splitlines()[line - 1]
    assert needle in source_line, (needle, source_line)
    return source_line.index(needle) + 1


def assert_at(
    err: CollError,
    phrase: str,
    line: int,
    column: int | None = None,
    *,
    file: str = FILE,
    sources: Mapping[str, str] | None = None,
) -> None:
    """``err`` says ``phrase`` and is located at ``file:line[:column]``; its formatting has a caret."""
    assert phrase in err.message, err.message
    assert err.span is not None, f"no span on {err.message!r}"
    assert err.span.file == file, err.span
    assert err.span.line == line, (err.span, err.message)
    if column is not None:
        assert err.span.column == column, (err.span, err.message)
    if sources is not None:
        text = format_error(err, sources)
        assert f"{file}:{line}:{err.span.column}: error: {err.message}" in text
        assert "^" in text.splitlines()[2]


def src(text: str, file: str = FILE) -> dict[str, str]:
    return {file: text}


class Timeout(Exception):
    """Raised by `deadline` when the code under test runs past its time."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise `Timeout` in the block after ``seconds`` (POSIX, main thread; no limit elsewhere)."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum: int, frame: object) -> None:
        raise Timeout(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def collc_check_subprocess(path: object, p: int = 4) -> subprocess.CompletedProcess[str]:
    """``collc check PATH -p P`` in a fresh interpreter (the installed entry point's code path)."""
    return subprocess.run(
        [sys.executable, "-m", "collc.cli", "check", str(path), "-p", str(p)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
