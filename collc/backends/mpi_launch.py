"""Launching generated executors on real MPI processes and watching them.

`run` writes a job spec, starts ``mpiexec -n p python -m collc.backends.mpi_worker
SPEC`` with the MPICH found by `mpitools` (stdin closed, the oversubscription
settings when ranks outnumber cores), and collects the JSON rows rank 0 prints.
A job that makes no progress (no row printed, no rank's status file changed)
for ``timeout`` seconds is killed, and so is one whose rank dies: either way
the error says which ranks were where, never a silent hang.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from collc import collectives
from collc.backends import local, mpi_c, mpi_py, mpitools
from collc.diagnostics import CollError
from collc.ir import Schedule

__all__ = ["IMPLEMENTATIONS", "Job", "MpiRow", "buffer_bytes", "check_budget", "host_memory", "prepare", "run"]

IMPLEMENTATIONS = ("mpi-py", "mpi-c", "native")
"""The ways a job can run the collective: the generated module, the generated C library, MPI's own."""


@dataclass(frozen=True, slots=True)
class MpiRow:
    """One (implementation, size): timings over ranks (OSU style) and wrong elements summed over ranks."""

    impl: str
    count: int
    size_bytes: int
    avg_us: float
    min_us: float
    max_us: float
    iters: int
    wrong: int  # -1 when not checked
    wire_bytes: int = -1  # bytes every rank together sent in one call (compressed payloads at their size); -1: unknown
    max_abs_error: float | None = None  # compression points: the largest error against the float64 reduction
    error_bound: float | None = None  # compression points: the largest verified bound of an output (inf: unbounded)


def host_memory() -> int:
    """This machine's physical memory in bytes (0 when the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def buffer_bytes(schedule: Schedule, count: int, dtype: str) -> int:
    """Bytes the ranks' buffers of one call take together: an input and a result per rank, each over the
    collective's logical element space (`collectives.logical_count`), as the worker allocates them."""
    logical = collectives.logical_count(schedule.collective, schedule.nranks, count)
    itemsize = local.DTYPES[dtype].itemsize if dtype in local.DTYPES else 8
    return 2 * schedule.nranks * logical * itemsize


def check_budget(schedule: Schedule, counts: Sequence[int], dtype: str, max_bytes: int | None = None) -> None:
    """CollError for a count whose buffers (`buffer_bytes`) exceed ``max_bytes`` (default: this machine's memory,
    `host_memory`), before any rank starts to allocate them."""
    budget = host_memory() if max_bytes is None else max_bytes
    if budget <= 0 or not counts:
        return
    count = max(counts)
    need = buffer_bytes(schedule, count, dtype)
    if need > budget:
        per = max(1, buffer_bytes(schedule, 1, dtype))
        what = "this machine's memory" if max_bytes is None else "the budget"
        raise CollError(
            f"{schedule.algorithm}: count={count} needs {need / 2**30:.2f} GiB of buffers across {schedule.nranks} "
            f"ranks (an input and a result each), above {what} of {budget / 2**30:.2f} GiB; use a smaller count "
            f"(at most {budget // per} elements of {dtype})"
        )


def prepare(
    schedule: Schedule,
    kinds: Sequence[str],
    workdir: Path,
    c_error_bound: tuple[float, float] | None = None,
    *,
    small: Schedule | None = None,
    small_below: int = mpi_c.SMALL_BELOW,
) -> list[dict[str, Any]]:
    """Generate (and build) what each implementation in ``kinds`` needs; the spec entries for the worker.

    ``c_error_bound``: the worst-case bound an mpi-c library of a schedule with
    compression points reports; ``small``, ``small_below``: the mpi-c library's
    small-message schedule and threshold (`mpi_c.generate`)."""
    entries: list[dict[str, Any]] = []
    for kind in kinds:
        if kind == "mpi-py":
            (module,) = mpi_py.generate(schedule, workdir / "mpi_py")
            entries.append({"name": "mpi-py", "kind": kind, "module": str(module)})
        elif kind == "mpi-c":
            out = workdir / "mpi_c"
            mpi_c.generate(schedule, out, error_bound=c_error_bound, small=small, small_below=small_below)
            library = mpi_c.build(out, schedule)
            entries.append({"name": "mpi-c", "kind": kind, "library": str(library)})
        elif kind == "native":
            entries.append({"name": "native", "kind": kind})
        else:
            raise CollError(f"unknown MPI implementation {kind!r}; expected one of {', '.join(IMPLEMENTATIONS)}")
    return entries


def run(
    schedule: Schedule,
    counts: Sequence[int],
    *,
    kinds: Sequence[str] = ("mpi-py",),
    dtype: str = "float32",
    op: str = "sum",
    iters: int | Sequence[int] = 1,
    warmup: int = 0,
    seed: int = 0,
    check: bool = True,
    timeout: float = 60.0,
    workdir: Path | None = None,
    mpiexec_args: Sequence[str] = (),
    mpiexec_prefix: Sequence[str] = (),
    on_row: Callable[[MpiRow], None] | None = None,
    error_bounds: np.ndarray | None = None,
    env: Mapping[str, str] | None = None,
    dump_dir: Path | None = None,
    c_error_bound: tuple[float, float] | None = None,
    prepared: list[dict[str, Any]] | None = None,
    max_bytes: int | None = None,
) -> list[MpiRow]:
    """Run ``schedule`` on ``schedule.nranks`` MPI processes for every count and implementation.

    ``workdir`` holds the generated code, the job spec and the ranks' status
    files (a temporary folder by default; on a cluster, a folder every node
    sees).  ``mpiexec_args`` go to mpiexec before the program (``-f hosts``);
    ``mpiexec_prefix`` is a command mpiexec runs under (``ip netns exec NS``, as
    `collc.netemu.Cluster.mpiexec_prefix` gives it).
    A schedule with compression points needs ``error_bounds``, the verifier's
    bound per (rank, chunk) slot for inputs in [-1, 1]: each rank judges its
    result by them.  ``env`` adds variables to the ranks' environment; with
    ``dump_dir`` every rank saves its last result there (``rank<r>_count<n>.npy``).
    ``c_error_bound`` is what an mpi-c library reports as its bound (`prepare`).
    ``prepared``: the entries `prepare` returned for this schedule and ``kinds`` in
    an earlier run, to run the code it built again without rebuilding it.
    ``max_bytes``: the most the ranks' buffers may take together (`check_budget`;
    default: this machine's memory, unless ``mpiexec_args`` may place ranks on
    other hosts, when there is no default).
    """
    if schedule.compresses() and check and error_bounds is None:
        raise CollError(f"{schedule.algorithm} has compression points: its results are judged by error bounds")
    if max_bytes is not None or not mpiexec_args:
        check_budget(schedule, counts, dtype, max_bytes)
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="collc-mpi-") as tmp:
            return run(
                schedule, counts, kinds=kinds, dtype=dtype, op=op, iters=iters, warmup=warmup, seed=seed,
                check=check, timeout=timeout, workdir=Path(tmp), mpiexec_args=mpiexec_args,
                mpiexec_prefix=mpiexec_prefix, on_row=on_row,
                error_bounds=error_bounds, env=env, dump_dir=dump_dir, c_error_bound=c_error_bound,
                prepared=prepared, max_bytes=max_bytes,
            )  # fmt: skip
    workdir.mkdir(parents=True, exist_ok=True)
    status_dir = workdir / "status"
    status_dir.mkdir(exist_ok=True)
    for stale in status_dir.glob("rank*.json"):
        stale.unlink()
    spec = {
        "algorithm": schedule.algorithm,
        "collective": schedule.collective.value,
        "nranks": schedule.nranks,
        "nchunks": schedule.nchunks,
        "chunk_weights": None if schedule.chunk_weights is None else list(schedule.chunk_weights),
        "root": schedule.root,
        "counts": list(counts),
        "dtype": dtype,
        "op": op,
        "iters": iters if isinstance(iters, int) else list(iters),
        "warmup": warmup,
        "seed": seed,
        "check": check,
        "status_dir": str(status_dir),
        "impls": prepared if prepared is not None else prepare(schedule, kinds, workdir, c_error_bound),
        "error_bounds": None if error_bounds is None or not schedule.compresses() else error_bounds.tolist(),
        "dump_dir": None if dump_dir is None else str(dump_dir),
    }
    spec_path = workdir / "job.json"
    spec_path.write_text(json.dumps(spec, indent=1))
    cmd = [
        *mpiexec_prefix, str(mpitools.mpiexec()), *mpiexec_args, "-n", str(schedule.nranks),
        sys.executable, "-m", "collc.backends.mpi_worker", str(spec_path),
    ]  # fmt: skip
    job_env = mpitools.mpi_env(schedule.nranks, {**os.environ, **(env or {})})
    return Job(cmd, job_env, status_dir, schedule.nranks, timeout, on_row).wait()


class Job:
    """One mpiexec process, its output and its ranks' status files."""

    def __init__(
        self,
        cmd: list[str],
        env: dict[str, str],
        status_dir: Path,
        nranks: int,
        timeout: float,
        on_row: Callable[[MpiRow], None] | None,
    ) -> None:
        self.status_dir, self.nranks, self.timeout, self.on_row = status_dir, nranks, timeout, on_row
        self.rows: list[MpiRow] = []
        self.stderr: list[str] = []
        self.stdout_other: list[str] = []
        self.lock = threading.Lock()
        self.deaths: dict[int, float] = {}  # rank -> when its process was first seen gone (monotonic s)
        self.watches: dict[int, int] = {}  # rank -> pidfd (-1: polled instead)
        self.last_progress = time.monotonic()
        self.proc = subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for t in self.readers:
            t.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            text = line.strip()
            if text.startswith("{"):
                try:
                    data = json.loads(text)
                except json.JSONDecodeError:
                    data = None
                if isinstance(data, dict) and "impl" in data:
                    row = MpiRow(
                        data["impl"], data["count"], data["size_bytes"], data["avg_us"], data["min_us"],
                        data["max_us"], data["iters"], data["wrong"], data.get("wire_bytes", -1),
                        data.get("max_abs_error"), data.get("error_bound"),
                    )  # fmt: skip
                    with self.lock:
                        self.rows.append(row)
                        self.last_progress = time.monotonic()
                    if self.on_row is not None:
                        self.on_row(row)
                    continue
            with self.lock:
                self.stdout_other.append(line.rstrip("\n"))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self.lock:
                self.stderr.append(line.rstrip("\n"))

    def _statuses(self) -> dict[int, dict[str, Any]]:
        found: dict[int, dict[str, Any]] = {}
        for path in self.status_dir.glob("rank*.json"):
            try:
                data = json.loads(path.read_text())
                data["mtime"] = path.stat().st_mtime
            except (OSError, json.JSONDecodeError):
                continue
            found[int(data["rank"])] = data
        return found

    def wait(self) -> list[MpiRow]:
        seen_mtime = 0.0
        last_scan = 0.0
        statuses: dict[int, dict[str, Any]] = {}
        while True:
            self._watch_exits(statuses)
            if self.proc.poll() is not None:
                break
            now = time.monotonic()
            if now - last_scan > 0.25:
                last_scan = now
                statuses = self._statuses()
                newest = max((s["mtime"] for s in statuses.values()), default=0.0)
                if newest > seen_mtime:
                    seen_mtime = newest
                    with self.lock:
                        self.last_progress = now
            with self.lock:
                idle = now - self.last_progress
            if idle > self.timeout:
                statuses = self._statuses()
                message = self._hang_message(statuses)
                self._kill(statuses)
                raise CollError(message)
        self._close_watches()
        for t in self.readers:
            t.join(timeout=5)
        statuses = self._statuses()
        done = [r for r, s in statuses.items() if s.get("state") == "done"]
        if self.proc.returncode != 0 or len(done) != self.nranks:
            self._kill(statuses)
            raise CollError(self._failure_message(statuses))
        return self.rows

    def _watch_exits(self, statuses: dict[int, dict[str, Any]]) -> None:
        """Wait up to 20 ms for a rank's process to exit, noting the first ranks to go.

        With pidfds (Linux) the wait wakes the moment a rank exits, before
        mpiexec has reacted by ending the others; elsewhere, liveness is polled.
        """
        for rank, s in statuses.items():
            if rank in self.watches or rank in self.deaths or s.get("state") in ("done", "error"):
                continue
            try:
                self.watches[rank] = os.pidfd_open(int(s["pid"]))
            except ProcessLookupError:
                self.deaths[rank] = time.monotonic()
            except (AttributeError, OSError, KeyError, ValueError):
                self.watches[rank] = -1
        fds = {fd: rank for rank, fd in self.watches.items() if fd >= 0 and rank not in self.deaths}
        if fds:
            ready, _, _ = select.select(list(fds), [], [], 0.02)
            for fd in ready:
                rank = fds[fd]
                if statuses.get(rank, {}).get("state") not in ("done", "error"):
                    self.deaths[rank] = time.monotonic()
        else:
            time.sleep(0.02)
        for rank, fd in self.watches.items():
            if fd < 0 and rank not in self.deaths:
                try:
                    os.kill(int(statuses[rank]["pid"]), 0)
                except ProcessLookupError:
                    self.deaths[rank] = time.monotonic()
                except (PermissionError, KeyError, ValueError):
                    pass

    def _close_watches(self) -> None:
        for fd in self.watches.values():
            if fd >= 0:
                os.close(fd)
        self.watches.clear()

    # ----------------------------------------------------------------------
    # Failures
    # ----------------------------------------------------------------------

    def _kill(self, statuses: dict[int, dict[str, Any]]) -> None:
        self._close_watches()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for s in statuses.values():
            try:
                os.kill(int(s["pid"]), signal.SIGKILL)
            except (ProcessLookupError, PermissionError, KeyError, ValueError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _where(self, s: dict[str, Any]) -> str:
        if s.get("state") == "running":
            return f"in the {s.get('impl')} collective at count {s.get('count')}"
        return str(s.get("state"))

    def _hang_message(self, statuses: dict[int, dict[str, Any]]) -> str:
        lines = [f"the MPI job made no progress for {self.timeout:g} s and was killed"]
        for rank in range(self.nranks):
            s = statuses.get(rank)
            if s is None:
                lines.append(f"  rank {rank}: never started")
                continue
            state = _process_state(int(s["pid"]))
            if state is None:
                lines.append(f"  rank {rank} (pid {s['pid']}): exited while {self._where(s)}")
            elif state.startswith("T"):
                lines.append(f"  rank {rank} (pid {s['pid']}): stopped (by a signal) while {self._where(s)}")
            else:
                lines.append(f"  rank {rank} (pid {s['pid']}): {self._where(s)}")
        return "\n".join(lines + self._tail())

    def _failure_message(self, statuses: dict[int, dict[str, Any]]) -> str:
        text = "\n".join(self.stderr + self.stdout_other)
        lines = [f"the MPI job failed (mpiexec exit status {self.proc.returncode})"]
        errors = [(r, s) for r, s in sorted(statuses.items()) if s.get("state") == "error"]
        for rank, s in errors:
            lines.append(f"  rank {rank}: {s.get('error')}")
        how = _EXIT_STRING.search(text)
        cause = f" ({how.group(1).strip()})" if how else ""
        # Ranks gone within _SAME_MOMENT of the first are reported together: on a loaded machine mpiexec
        # may end a neighbour before this process is scheduled to see the first exit.
        earliest = min(self.deaths.values(), default=0.0)
        first = sorted((t, rank) for rank, t in self.deaths.items() if t - earliest <= _SAME_MOMENT)
        if not errors and first:
            for _, rank in first:
                s = statuses[rank]
                lines.append(f"  rank {rank} (pid {s['pid']}) died{cause} while {self._where(s)}")
            others = [r for r in range(self.nranks) if r not in {rank for _, rank in first}]
            if others:
                lines.append(f"  mpiexec then ended the other ranks ({_ranks_text(others)})")
        elif not errors:
            for rank in range(self.nranks):
                s = statuses.get(rank)
                if s is None:
                    lines.append(f"  rank {rank}: never started")
                elif s.get("state") != "done":
                    lines.append(f"  rank {rank} (pid {s['pid']}): ended{cause} while {self._where(s)}")
            if all(s.get("state") == "done" for s in statuses.values()):
                lines.append("  every rank finished, but mpiexec reported an error")
        return "\n".join(lines + self._tail())

    def _tail(self) -> list[str]:
        with self.lock:
            tail = [line for line in self.stderr + self.stdout_other if line.strip()][-12:]
        return ["mpiexec output (last lines):", *("  " + t for t in tail)] if tail else []


_SAME_MOMENT = 0.1  # seconds

_EXIT_STRING = re.compile(r"EXIT STRING: ([^\n]*)")


def _ranks_text(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) <= 8 else f"{len(ranks)} ranks"


def _process_state(pid: int) -> str | None:
    """The state letter and name from /proc (``S (sleeping)``, ``T (stopped)``), None when gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                state = line.split(":", 1)[1].strip()
                return None if state.startswith("Z") else state
    except OSError:
        return None
    return None
