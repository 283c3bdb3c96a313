"""mpi-c libraries with a small-message schedule (`collc compile --small FILE --small-below SIZE`).

A library built from a bandwidth-optimal schedule and a latency-optimal one runs every call whose
count times type size is below the threshold on the second.  Through the PMPI shim, the op matrix
(tests/mpi/op_matrix.c: every predefined op and datatype, in place and not, against the MPI
library's own collective) must pass with the calls split between the two schedules exactly as the
threshold says, read from the shim's log; ``COLLC_SMALL_BYTES`` moves the threshold at run time.
Bad combinations are refused before anything is generated.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from test_cli import cli
from test_shim_ops import CASE, RAN, build_op_matrix, mpirun, summary

import collc
from collc.backends import mpi_c
from collc.diagnostics import CollError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# Counts of 1 and 2 elements are below 128 bytes for every MPI datatype (at most 32 bytes each), 1000 are not.
COUNTS = "1,2,1000"
BELOW = 128


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/mpi/op_matrix.c, built."""
    return build_op_matrix(tmp_path_factory.mktemp("op_matrix"))


def _schedule(name: str, p: int) -> collc.Instance:
    inst = collc.load(EXAMPLES / name).instantiate(p=p)
    assert inst.verify().ok
    return inst


def _library(big: str, small: str, p: int, out: Path, below: int = BELOW) -> Path:
    inst = _schedule(big, p)
    files = inst.compile("mpi-c", out, small=_schedule(small, p), small_below=below)
    assert (out / mpi_c.small_source(inst.schedule)).is_file()
    return files[-1]


def _ran(stderr: str) -> collections.Counter:
    """(algorithm, count) of every call the shim ran on a schedule, over every rank."""
    return collections.Counter((algorithm, int(count)) for _, algorithm, _, _, count, *_ in RAN.findall(stderr))


@pytest.mark.parametrize(
    ("collective", "big", "small", "p"),
    [
        ("allreduce", "ring_allreduce.coll", "recursive_doubling.coll", 4),
        pytest.param("allgather", "ring_allgather.coll", "bruck_allgather.coll", 6, marks=pytest.mark.slow),
    ],
)
def test_calls_below_the_threshold_run_the_small_schedule(
    collective: str, big: str, small: str, p: int, matrix: Path, tmp_path: Path
) -> None:
    lib = _library(big, small, p, tmp_path)
    args = [matrix, collective, "--counts", COUNTS, "--list", "1"]
    run = mpirun(p, args, preload=lib, env={"COLLC_SHIM_LOG": "1"})
    cases, _, nranks, failures = summary(run)
    assert run.returncode == 0 and failures == 0 and nranks == p, run.tail()
    assert "fallback" not in run.stderr, run.tail()
    listed = [(entry, dtype, op, int(count)) for entry, dtype, op, count in CASE.findall(run.stdout)]
    assert len(listed) == cases and cases > 0
    small_name, big_name = small.removesuffix(".coll"), big.removesuffix(".coll")
    want = collections.Counter((small_name if count < 3 else big_name, count) for *_, count in listed for _ in range(p))
    assert _ran(run.stderr) == want, run.tail()


@pytest.mark.parametrize(("setting", "runs"), [("0", "ring_allreduce"), ("1MiB", "recursive_doubling")])
def test_collc_small_bytes_moves_the_threshold(setting: str, runs: str, matrix: Path, tmp_path: Path) -> None:
    lib = _library("ring_allreduce.coll", "recursive_doubling.coll", 4, tmp_path)
    args = [matrix, "allreduce", "--op", "MPI_SUM", "--type", "MPI_FLOAT", "--counts", COUNTS]
    run = mpirun(4, args, preload=lib, env={"COLLC_SHIM_LOG": "1", "COLLC_SMALL_BYTES": setting})
    assert run.returncode == 0 and summary(run)[3] == 0, run.tail()
    algorithms = {algorithm for algorithm, _ in _ran(run.stderr)}
    assert algorithms == {runs}, run.tail()


def test_a_bad_threshold_setting_is_noted_and_ignored(matrix: Path, tmp_path: Path) -> None:
    lib = _library("ring_allreduce.coll", "recursive_doubling.coll", 4, tmp_path)
    args = [matrix, "allreduce", "--op", "MPI_SUM", "--type", "MPI_FLOAT", "--counts", COUNTS]
    run = mpirun(4, args, preload=lib, env={"COLLC_SHIM_LOG": "1", "COLLC_SMALL_BYTES": "lots"})
    assert run.returncode == 0 and summary(run)[3] == 0, run.tail()
    assert "COLLC_SMALL_BYTES=lots is not a byte count" in run.stderr
    assert {a for a, _ in _ran(run.stderr)} == {"ring_allreduce", "recursive_doubling"}


@pytest.mark.parametrize(
    ("big", "small", "p", "message"),
    [
        ("ring_allreduce.coll", "ring_allgather.coll", 4, "ring_allgather is allgather, not allreduce"),
        ("ring_allreduce.coll", "ring_allreduce.coll", 4, "the small-message schedule is ring_allreduce itself"),
        ("pairwise_alltoall.coll", "pairwise_alltoall.coll", 4, "alltoall libraries take no small-message schedule"),
        (
            "ring_allreduce.coll",
            "compression/compressed_ring_allreduce.coll",
            4,
            "has compression points (it must be exact)",
        ),
    ],
)
def test_bad_small_schedules_are_refused(big: str, small: str, p: int, message: str, tmp_path: Path) -> None:
    with pytest.raises(CollError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _schedule(big, p).compile("mpi-c", tmp_path, build=False, small=_schedule(small, p))
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_small_schedule_for_another_p_is_refused(tmp_path: Path) -> None:
    inst, other = _schedule("ring_allreduce.coll", 4), _schedule("recursive_doubling.coll", 8)
    with pytest.raises(CollError, match="recursive_doubling is for p=8, not p=4"):
        inst.compile("mpi-c", tmp_path, build=False, small=other)


def test_cli_compiles_a_library_with_a_small_schedule(tmp_path: Path) -> None:
    out = tmp_path / "lib"
    ring, rd = EXAMPLES / "ring_allreduce.coll", EXAMPLES / "recursive_doubling.coll"
    res = cli("compile", ring, "-p", "4", "--target", "mpi-c", "--small", rd, "--small-below", "4K", "-o", out)
    assert res.code == 0, res.text
    main = (out / "collc_ring_allreduce.c").read_text()
    assert ".small_below = 4096," in main and "collc_ring_allreduce_small.c" in (out / "Makefile").read_text()
    assert (out / "libcollc_ring_allreduce.so").is_file()
    res = cli("compile", ring, "-p", "4", "--target", "cuda", "--small", rd, "-o", tmp_path / "x")
    assert res.code == 2 and "--small applies to the mpi-c target only" in res.text
    res = cli("compile", ring, "-p", "4", "--target", "mpi-c", "--small-below", "4K", "-o", tmp_path / "x")
    assert res.code == 2 and "--small-below needs --small FILE" in res.text
    res = cli("compile", ring, "-p", "6", "--target", "mpi-c", "--small", rd, "-o", tmp_path / "x")
    assert res.code == 2 and "p=6 violates the constraint is_pow2(p)" in res.text
