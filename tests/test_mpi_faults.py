"""Faults on the MPI targets end every rank with a clear error, within a time limit, never a hang.

One rank of four misbehaves around an allreduce (``tests/mpi/faults.c`` through the
preloaded mpi-c library, ``tests/mpi/faults.py`` through the generated mpi-py module),
on a plain and on a compressed ring: it exits before the call (MPICH's launcher ends
the job), stops elsewhere, or never calls (``COLLC_TIMEOUT`` ends the job and names the
step and the peers waited for), passes more or fewer elements than the others (the
message sizes give it away), or hands the codec a value it refuses.  Each job must end
with a nonzero status well before the test's own limit, and leave no process behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import collc
from collc.backends import mpi_py
from collc.backends.mpitools import mpi_env, mpicc, mpiexec
from collc.diagnostics import CollError

HERE = Path(__file__).resolve().parent
LIMIT = 90  # seconds a faulty job may take before the test calls it a hang
COUNT = 1000
SCHEDULES = ("ring_allreduce", "compressed_ring_allreduce")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    try:
        cc, _ = mpicc(), mpiexec()
    except CollError as err:
        pytest.skip(str(err))
    root = tmp_path_factory.mktemp("faults")
    out = {"program": root / "faults"}
    subprocess.run([str(cc), "-O1", "-Wall", "-Werror", "-o", str(out["program"]), str(HERE / "mpi" / "faults.c")],
                   check=True, capture_output=True, text=True, timeout=LIMIT)  # fmt: skip
    for name in SCHEDULES:
        inst = collc.load(name).instantiate(p=4)
        out[f"mpi-c/{name}"] = inst.compile("mpi-c", root / name)[-1]
        inst.compile("mpi-py", root / "py")
    out["py"] = root / "py"
    return out


def job(
    built: dict[str, Path],
    backend: str,
    name: str,
    mode: str,
    timeout: float | None = 3,
    count: int = COUNT,
    env: dict[str, str] | None = None,
) -> tuple[int, str, float]:
    extra = {"COLLC_SHIM_COMPRESS": "1", **(env or {})}  # the compressed library runs the schedule only when asked
    if timeout:
        extra["COLLC_TIMEOUT"] = str(timeout)
    env = mpi_env(4, {**os.environ, **extra})
    env.pop("LD_PRELOAD", None)
    if backend == "mpi-c":
        cmd = [str(mpiexec()), "-n", "4", "-genv", "LD_PRELOAD", str(built[f"mpi-c/{name}"]), str(built["program"]),
               mode, str(count)]  # fmt: skip
    else:
        module = mpi_py.module_name(name)
        cmd = [str(mpiexec()), "-n", "4", sys.executable, str(HERE / "mpi" / "faults.py"), str(built["py"]), module,
               mode, str(count)]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=LIMIT)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start


CASES = [(b, n) for b in ("mpi-c", "mpi-py") for n in SCHEDULES]
# a rank that never calls: every case on mpi-c, the plain ring on mpi-py (its compressed ring with -m slow)
NEVER_CALLS = [pytest.param(b, n, marks=pytest.mark.slow if (b, n) == ("mpi-py", SCHEDULES[1]) else ())
               for b, n in CASES]  # fmt: skip


@pytest.mark.parametrize(("backend", "name"), CASES)
def test_a_good_run_passes(built: dict[str, Path], backend: str, name: str) -> None:
    rc, out, _ = job(built, backend, name, "ok")
    assert rc == 0 and "done" in out, out[-3000:]


@pytest.mark.parametrize(("backend", "name"), CASES)
def test_a_rank_that_exits_early_ends_the_job(built: dict[str, Path], backend: str, name: str) -> None:
    rc, out, seconds = job(built, backend, name, "exit", timeout=None)  # no timeout needed: MPICH sees the exit
    assert rc != 0 and "done" not in out, out[-3000:]
    assert rc == 3 or "BAD TERMINATION" in out  # mpiexec passes the rank's status on, or reports the ranks it ended
    assert seconds < LIMIT / 2


@pytest.mark.parametrize("mode", ["stop", "zero"])
@pytest.mark.parametrize(("backend", "name"), NEVER_CALLS)
def test_a_rank_that_never_calls_ends_the_job_within_the_timeout(
    built: dict[str, Path], backend: str, name: str, mode: str
) -> None:
    rc, out, seconds = job(built, backend, name, mode)
    assert rc != 0 and "done" not in out
    assert "collc: " in out and "no progress for 3 s" in out, out[-3000:]
    assert "a rank died or stopped, or did not call the collective with the same count" in out
    assert seconds < LIMIT / 2


@pytest.mark.parametrize("mode", ["count", "short"])
@pytest.mark.parametrize(("backend", "name"), CASES)
def test_a_rank_with_another_count_ends_the_job(built: dict[str, Path], backend: str, name: str, mode: str) -> None:
    rc, out, seconds = job(built, backend, name, mode)
    assert rc != 0 and "done" not in out
    assert "the ranks called the collective with different counts or datatypes" in out, out[-3000:]
    # the rank receiving a longer message than it expects says so too, rather than MPICH ending it silently
    # (its Waitsome/Testsome errors go to MPI_COMM_WORLD's handler unless the runtime returns them)
    assert "Fatal error in internal_" not in out, out[-3000:]
    assert seconds < LIMIT / 2


# Messages in pieces (runtime/collc_exec.h) of 1000 bytes: the ring's messages are `count` bytes (float32, p=4), and
# rank 1's are 8 bytes longer ("count") or shorter ("short").  2008 = 1000 + 1000 + 8, 2000 = 1000 + 1000 + an empty
# last piece, 1992 = 1000 + 992, 2016 = 1000 + 1000 + 16: every way the pieces of two sizes can part, among them
# one size a whole number of pieces.  No COLLC_TIMEOUT: the first piece that differs must end the job by itself.
# Step by step every rank names the fault; by dataflow, a rank whose MPI_Waitsome meets a truncated piece is ended
# by MPICH itself (it reports the error to MPI_COMM_WORLD's handler), possibly before another rank's line is out.
@pytest.mark.parametrize("issue", ["dataflow", "steps"])
@pytest.mark.parametrize(("mode", "count"), [("count", 2008), ("short", 2008), ("count", 2000), ("short", 2000)])
def test_a_rank_with_another_count_in_pieces_ends_the_job(
    built: dict[str, Path], mode: str, count: int, issue: str
) -> None:
    env = {"COLLC_PIECE_BYTES": "1000", "COLLC_ISSUE": issue}
    rc, out, seconds = job(built, "mpi-c", "ring_allreduce", "ok", timeout=None, count=count, env=env)
    assert rc == 0 and "done" in out, out[-3000:]  # the same sizes in pieces pass
    rc, out, seconds = job(built, "mpi-c", "ring_allreduce", mode, timeout=None, count=count, env=env)
    assert rc != 0 and "done" not in out
    assert seconds < LIMIT / 2
    named = "the ranks called the collective with different counts or datatypes" in out
    assert named or (issue == "dataflow" and "Fatal error in internal_Waitsome" in out), out[-3000:]
    if named:
        assert "received a piece of" in out or "Message truncated" in out, out[-3000:]


@pytest.mark.parametrize("backend", ["mpi-c", "mpi-py"])
def test_a_value_the_codec_refuses_ends_the_job(built: dict[str, Path], backend: str) -> None:
    rc, out, _ = job(built, backend, "compressed_ring_allreduce", "nan")
    assert rc != 0 and "done" not in out
    assert "ebq" in out and "not finite" in out, out[-3000:]
    rc, out, _ = job(built, backend, "ring_allreduce", "nan")  # raw data: a NaN is a value like any other
    assert rc == 0 and "done" in out
