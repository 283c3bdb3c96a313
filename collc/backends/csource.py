"""What the C-family generators (mpi-c, cuda) share: identifiers, `.coll` lines for comments, chunk-run notes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from collc import collectives
from collc.backends import buildcache, tables
from collc.diagnostics import CollError
from collc.ir import format_id_set
from collc.resources import data_dir

__all__ = ["SourceLine", "Sources", "c_ident", "c_string", "run_compiler", "runs_text", "write_sources"]


@dataclass(frozen=True, slots=True)
class SourceLine:
    """One `.coll` line quoted in a generated comment: ``file:line`` and its text."""

    where: str
    text: str


def prefix_lines(weights: tuple[int, ...] | None, per_line: int = 12) -> tuple[str, ...]:
    """The prefix sums of chunk weights (`collectives.chunk_prefix`) as lines of C unsigned literals; () for None."""
    if weights is None:
        return ()
    values = [f"{v}ull" for v in collectives.chunk_prefix(weights)]
    return tuple(", ".join(values[i : i + per_line]) for i in range(0, len(values), per_line))


def c_string(text: str) -> str:
    """``text`` as a C string literal (backslashes, quotes and trigraph question marks escaped)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("?", "\\?")
    return f'"{escaped}"'


def c_ident(name: str) -> str:
    ident = re.sub(r"\W", "_", name)
    return ident if ident and not ident[0].isdigit() else f"_{ident}"


class Sources:
    """The text of ``.coll`` lines, for comments; paths shown relative to the main file's folder."""

    def __init__(self, main: str) -> None:
        self.root = Path(main).parent if Path(main).is_absolute() else None
        self.texts: dict[str, list[str] | None] = {}

    def label(self, file: str) -> str:
        if self.root is None or not Path(file).is_absolute():
            return file
        return os.path.relpath(file, self.root)

    def text(self, file: str, line: int) -> str:
        if file not in self.texts:
            try:
                self.texts[file] = Path(file).read_text(encoding="utf-8").splitlines()
            except OSError:
                self.texts[file] = None
        lines = self.texts[file]
        if lines is None or not 1 <= line <= len(lines):
            return ""
        return lines[line - 1].strip().replace("*/", "* /")

    def where(self, refs: Sequence[str]) -> str:
        """``lib/ring.coll:7, 8`` for ``[".../lib/ring.coll:7", ".../lib/ring.coll:8"]``."""
        by_file: dict[str, list[str]] = {}
        for ref in refs:
            file, _, line = ref.rpartition(":")
            by_file.setdefault(self.label(file), []).append(line)
        return "; ".join(f"{f}:{', '.join(lines)}" for f, lines in by_file.items())

    def quote(self, refs: Sequence[str]) -> tuple[SourceLine, ...]:
        """Each ``file:line`` of ``refs`` with its text."""
        out = []
        for ref in refs:
            file, _, line = ref.rpartition(":")
            out.append(SourceLine(f"{self.label(file)}:{line}", self.text(file, int(line))))
        return tuple(out)


def runs_text(runs: Sequence[tables.Run], recv: bool) -> str:
    if not recv:
        return format_id_set([(r.lo, r.hi) for r in runs])
    parts = []
    for r in runs:
        action = "reduce" if r.reduce else "copy"
        if parts and parts[-1][0] == action:
            parts[-1][1].append((r.lo, r.hi))
        else:
            parts.append((action, [(r.lo, r.hi)]))
    return ", ".join(f"{action} {format_id_set(ids)}" for action, ids in parts)


def write_sources(
    out_dir: Path, env: jinja2.Environment, files: Sequence[tuple[str, str, Mapping[str, Any]]], headers: Sequence[str]
) -> list[Path]:
    """Render each (file name, template, context) into ``out_dir`` (created if needed), then copy the runtime
    ``headers`` beside them, so that the folder builds on its own; the written paths, in that order."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, template, context in files:
        path = out_dir / name
        path.write_text(env.get_template(template).render(**context), encoding="utf-8")
        written.append(path)
    runtime = data_dir("runtime")
    written += [Path(shutil.copyfile(runtime / header, out_dir / header)) for header in headers]
    return written


def run_compiler(command: Sequence[str], cwd: Path, source: Path) -> None:
    """Run a compiler (mpicc, nvcc) in ``cwd``; a CollError with the command and its output when it fails.
    With ``COLLC_BUILD_CACHE`` set, an output built before from the same command and files is copied instead
    (collc.backends.buildcache)."""
    name = Path(command[0]).name
    cache = buildcache.cache_dir()
    entry = buildcache.key(command, cwd) if cache is not None else None
    if cache is not None and entry is not None and buildcache.fetch(cache, entry, command, cwd):
        return
    try:
        proc = subprocess.run(list(command), cwd=cwd, capture_output=True, text=True, check=False)
    except OSError as err:
        raise CollError(f"cannot run {command[0]}: {err}") from None
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        raise CollError(f"{name} failed on {source} (exit status {proc.returncode}):\n$ {' '.join(command)}\n{output}")
    if cache is not None and entry is not None:
        buildcache.store(cache, entry, command, cwd)
