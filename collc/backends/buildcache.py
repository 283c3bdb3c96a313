"""A content-addressed cache of compiler outputs, for runs that build the same generated library many times
(a test suite, CI). It is off unless ``COLLC_BUILD_CACHE`` names a folder.

The key covers everything the output can depend on: the command (with the build folder written as ``@`` so
that two folders with the same files share an entry), the bytes of every file in the build folder that the
compiler can read (its sources and headers), the compiler's own file, and the environment variables that
steer C compilers and MPICH's wrappers. A command that names the build folder anywhere but in ``-I``, after
``-o`` or as an input file (an rpath, ``-L``) is not cached: its output would remember the folder it was
first built in."""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["ENV_VAR", "cache_dir", "fetch", "key", "store"]

ENV_VAR = "COLLC_BUILD_CACHE"
_SOURCE_SUFFIXES = frozenset({".c", ".h", ".cu", ".cuh", ".o", ".cc", ".hpp"})
_STEERING = (
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "LIBRARY_PATH",
    "CC",
    "CFLAGS",
    "LDFLAGS",
    "MPICH_CC",
    "MPICH_CCC",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
)


def cache_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """The cache folder named by ``COLLC_BUILD_CACHE``, or None when caching is off."""
    value = (os.environ if env is None else env).get(ENV_VAR, "")
    return Path(value) if value else None


def _output(command: Sequence[str], cwd: Path) -> Path | None:
    for flag, value in itertools.pairwise(command):
        if flag == "-o":
            return Path(cwd) / value
    return None


def key(command: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None) -> str | None:
    """The cache key of ``command`` run in ``cwd``, or None when its output cannot be shared (no ``-o``, the
    folder named where the output would remember it, an input missing)."""
    env = os.environ if env is None else env
    out = _output(command, cwd)
    if out is None:
        return None
    folder = str(Path(cwd).resolve())
    digest = hashlib.sha256()
    compiler = shutil.which(command[0])
    if compiler is None:
        return None
    stat = Path(compiler).resolve().stat()
    digest.update(f"{Path(compiler).resolve()}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    previous = ""
    for arg in command[1:]:
        if folder in arg:
            allowed = previous in ("-I", "-o") or (arg.startswith(folder + os.sep) and Path(arg).is_file())
            if not allowed:
                return None
            arg = arg.replace(folder, "@")
        digest.update(arg.encode() + b"\0")
        previous = arg
    for name in _STEERING:
        digest.update(f"{name}={env.get(name, '')}\n".encode())
    for path in sorted(Path(folder).iterdir()):
        if path.suffix in _SOURCE_SUFFIXES and path.is_file() and path != out.resolve():
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def fetch(cache: Path, entry: str, command: Sequence[str], cwd: Path) -> bool:
    """Copy the cached output of ``entry`` to the command's ``-o`` path; False when there is none."""
    cached = cache / entry
    out = _output(command, cwd)
    if out is None or not cached.is_file():
        return False
    shutil.copy2(cached, out)
    return True


def store(cache: Path, entry: str, command: Sequence[str], cwd: Path) -> None:
    """Keep the command's fresh output under ``entry``; written beside and renamed, so that concurrent builds
    (pytest-xdist workers) never see half a file. A cache that cannot be written is skipped."""
    out = _output(command, cwd)
    if out is None or not out.is_file():
        return
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=".part-")
        os.close(fd)
        shutil.copy2(out, tmp)
        os.replace(tmp, cache / entry)
    except OSError:
        return
