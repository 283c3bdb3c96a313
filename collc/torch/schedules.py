"""Schedules for the torch backend: loaded, verified for a group's size, compiled to mpi-c, cached.

`prepare` turns a configured schedule (a ``.coll`` path or a bundled example)
into a `Compiled` library for one group size (and root, for a broadcast, gather or
scatter; the torch backend compiles these for their schedule's default root and serves
other roots by renumbering the ranks):

1. load the program (`collc.api.load`) and check that it implements the
   collective it was configured for;
2. instantiate it for ``p`` (and ``root``), with the configured codec settings:
   a size that the program's constraints exclude is an error naming the file and p;
3. verify it (`collc.api.Instance.verify`): a finding is an error naming the file and p;
4. compile it with the mpi-c target (CPU tensors) or the mpi-cuda target (CUDA
   tensors, for one GPU architecture) into the cache folder, once per machine:
   the folder's name is a digest of the program's text, the parameters and
   the codecs, and a file lock makes the ranks of one machine wait for one
   compiler run instead of each running their own.

Each process keeps what it prepared (`_memo`), so that a group size is
verified once per process.  Compressed schedules run on the mpi-c target's
compression points; a value beyond what a codec encodes stops the job with a
message naming the codec, the rank and the element.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import collc
from collc import api
from collc.backends import mpi_c, mpi_cuda
from collc.backends.order import mixed_orders
from collc.codecs.base import SUPPORTED_DTYPES
from collc.diagnostics import CollError, format_error
from collc.ir import Collective

__all__ = [
    "CODEC_DTYPES",
    "TARGETS",
    "Build",
    "Compiled",
    "ScheduleError",
    "prepare",
]

COLLECTIVE_OF: dict[str, Collective] = {
    "allreduce": Collective.ALLREDUCE,
    "allgather": Collective.ALLGATHER,
    "reduce_scatter": Collective.REDUCE_SCATTER,
    "broadcast": Collective.BROADCAST,
    "gather": Collective.GATHER,
    "scatter": Collective.SCATTER,
    "barrier": Collective.BARRIER,
    "alltoall": Collective.ALLTOALL,
}


TARGETS: tuple[str, ...] = ("mpi-c", "mpi-cuda")
"""The targets libraries are compiled with: mpi-c for CPU tensors, mpi-cuda for CUDA tensors."""


@dataclass(frozen=True, slots=True)
class Build:
    """How a library is built: its target, and for mpi-cuda the GPU architecture and extra nvcc flags."""

    target: str
    arch: str = ""
    nvcc_flags: tuple[str, ...] = ()


class ScheduleError(ValueError):
    """A configured schedule that cannot serve a group: the message names the file and the group size."""


@dataclass(frozen=True, slots=True)
class Compiled:
    """A verified schedule compiled into an mpi-c library for one group size."""

    collective: str  # allreduce | allgather | reduce_scatter | broadcast | gather | scatter | barrier | alltoall
    source: str  # the schedule as configured (a path or an example name)
    path: Path  # the .coll file
    algorithm: str
    nranks: int
    root: int | None  # the schedule's root (broadcast, gather, scatter), else None
    codecs: tuple[str, ...]  # canonical specs of the codecs the schedule uses; () without compression
    library: Path
    key: int  # a 63-bit digest of what was compiled: ranks compare it before every collective
    target: str = "mpi-c"  # mpi-c (CPU tensors) or mpi-cuda (CUDA tensors)
    mixed_orders: str | None = None  # why its ranks' floating-point sums may differ in the last bits (None: equal)
    weighted: bool = False  # chunks of unequal sizes of its own (`chunks N weight(c) = ...`)

    @property
    def counts(self) -> bool:
        """Whether the library runs counts given at run time (allgatherv, reduce_scatter with unequal counts,
        alltoallv): not with chunk weights of its own or compression points (runtime/collc_vcoll.h)."""
        return not self.weighted and not self.codecs

    @property
    def compressed(self) -> bool:
        return bool(self.codecs)

    def describe(self) -> str:
        root = f", root {self.root}" if self.root is not None else ""
        return f"{self.path} ({self.algorithm}, p={self.nranks}{root})"


MPI_C_ENTRY_POINTS = 2
"""The generation of the mpi-c entry points the backend calls (2: those with counts given at run time,
``collc_<algorithm>_allgatherv_f`` and co.); part of a library's digest, so that the cache never serves a library
without them."""

CODEC_DTYPES: tuple[str, ...] = tuple(dt.name for dt in SUPPORTED_DTYPES)
"""The dtypes every collc codec encodes (`collc.codecs.base.SUPPORTED_DTYPES`): a compressed schedule takes
tensors of these dtypes only."""


_memo: dict[tuple[str, str, int, int | None, tuple[tuple[str, str], ...], str], Compiled] = {}
_memo_lock = threading.Lock()


def prepare(
    collective: str,
    source: str,
    p: int,
    *,
    root: int | None = None,
    codecs: Mapping[str, str] | None = None,
    cache_dir: Path,
    target: str = "mpi-c",
    arch: str = mpi_cuda.cuda.DEFAULT_ARCH,
    nvcc_flags: tuple[str, ...] = (),
) -> Compiled:
    """The library that runs ``collective`` with schedule ``source`` on ``p`` ranks; raises `ScheduleError`.

    ``target`` mpi-c, or mpi-cuda (built for ``arch`` with ``nvcc_flags`` on top of the target's own)."""
    if target not in TARGETS:
        raise ValueError(f"collc.torch: target {target!r}; expected one of {', '.join(TARGETS)}")
    build = Build(target, arch, tuple(nvcc_flags)) if target == "mpi-cuda" else Build(target)
    overrides = tuple(sorted((codecs or {}).items()))
    memo_key = (collective, source, p, root, overrides, str(cache_dir), build)
    with _memo_lock:
        found = _memo.get(memo_key)
    if found is not None:
        return found
    compiled = _prepare(collective, source, p, root, dict(overrides), Path(cache_dir), build)
    with _memo_lock:
        _memo[memo_key] = compiled
    return compiled


def _error(path: str, err: CollError, sources: Mapping[str, str]) -> str:
    return format_error(err, {**sources, **err.sources})


def _prepare(
    collective: str, source: str, p: int, root: int | None, overrides: dict[str, str], cache_dir: Path, build: Build
) -> Compiled:
    want = COLLECTIVE_OF[collective]
    try:
        path = api.resolve_path(source)
        alg = api.load(path)
    except CollError as err:
        raise ScheduleError(f"collc.torch: the {collective} schedule {source!r}: {_error(source, err, {})}") from None
    where = f"collc.torch: {path}"
    if alg.collective is not want:
        raise ScheduleError(
            f"{where} implements {alg.collective.value}, not {want.value}: it cannot serve {collective}"
        )
    mine = {name: spec for name, spec in overrides.items() if name in alg.codecs}
    params: dict[str, int] = {"p": p}
    if root is not None:
        if "root" not in alg.param_names:
            raise ScheduleError(f"{where} has no parameter 'root': it cannot broadcast from rank {root}")
        params["root"] = root
    try:
        if mine:
            alg = alg.with_codecs(mine)
        inst = alg.instantiate(**params)
    except CollError as err:
        text = _error(str(path), err, alg.sources)
        raise ScheduleError(f"{where}: no {collective} schedule for a group of p={p}: {text}") from None
    report = inst.verify()
    if not report.ok:
        first = report.findings[0]
        text = _error(str(path), CollError(first.message, first.span), alg.sources)
        raise ScheduleError(f"{where}: the schedule fails verification for p={p}: {text}")
    schedule = inst.schedule
    specs = tuple(dict.fromkeys(op.codec for step in schedule.steps for op in step.ops if op.codec is not None))
    digest = _digest(alg.sources, params, tuple(sorted(alg.codecs.items())), build)
    stem = f"{schedule.algorithm}-p{p}" + (f"-root{root}" if root is not None else "")
    if build.target == "mpi-cuda":
        stem += f"-{build.arch}"
    library = _build(inst, cache_dir, stem, digest, build)
    return Compiled(
        collective=collective,
        source=source,
        path=Path(path),
        algorithm=schedule.algorithm,
        nranks=p,
        root=schedule.root,
        codecs=specs,
        library=library,
        key=int(digest[:16], 16) & ((1 << 63) - 1),
        target=build.target,
        mixed_orders=mixed_orders(schedule),
        weighted=schedule.weighted(),
    )


def _digest(
    sources: Mapping[str, str], params: Mapping[str, int], codecs: tuple[tuple[str, str], ...], build: Build
) -> str:
    h = hashlib.sha256()
    h.update(f"collc {collc.__version__}\n".encode())
    for name, text in sorted(sources.items()):
        h.update(f"file {len(text)}\n".encode())
        h.update(text.encode())
        del name  # the text decides, not where it was read from
    h.update(repr(sorted(params.items())).encode())
    h.update(repr(codecs).encode())
    if build.target != "mpi-c":
        h.update(repr(build).encode())
    else:  # a library built before the entry points the backend calls now is not taken from the cache
        h.update(f"mpi-c entry points {MPI_C_ENTRY_POINTS}\n".encode())
    return h.hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _build(inst: api.Instance, cache_dir: Path, stem: str, digest: str, build: Build) -> Path:
    """Compile ``inst`` into ``cache_dir/<stem>-<digest>/`` unless a finished build is there; its library."""
    target = cache_dir / f"{stem}-{digest[:16]}"
    if build.target == "mpi-cuda":
        library = mpi_cuda.library_path(target, inst.schedule)
    else:
        library = mpi_c.library_path(target, inst.schedule)
    if library.is_file():
        return library
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ScheduleError(f"collc.torch: cannot create the cache folder {cache_dir}: {err}") from None
    with _locked(cache_dir / f".{stem}-{digest[:16]}.lock"):
        if library.is_file():
            return library
        work = Path(tempfile.mkdtemp(prefix=f".{stem}-", dir=cache_dir))
        try:
            if build.target == "mpi-cuda":
                mpi_cuda.generate(inst.schedule, work)
                mpi_cuda.build(work, inst.schedule, arch=build.arch, flags=build.nvcc_flags, driver=False)
            else:
                inst.compile("mpi-c", work, verify=False)  # verified by the caller
            if target.exists():  # an unfinished build of an earlier run
                shutil.rmtree(target)
            os.replace(work, target)
        except CollError as err:
            shutil.rmtree(work, ignore_errors=True)
            what = f"{inst.schedule.algorithm} for p={inst.nranks}"
            raise ScheduleError(f"collc.torch: compiling {what}: {err}") from None
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    if not library.is_file():
        raise ScheduleError(f"collc.torch: the build in {target} has no {library.name}")
    return library
