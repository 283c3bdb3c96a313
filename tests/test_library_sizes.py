"""One mpi-c library for many rank counts (`collc compile --target mpi-c -p 3,4,6,8`).

The library holds the verified schedule of every rank count its constraints allow and runs a
call on the one of its communicator's size.  The same compiled library, preloaded as the PMPI
shim, runs the op matrix (tests/mpi/op_matrix.c: every predefined op and datatype, in place and
not, against the MPI library's own collective) at 3, 4, 6 and 8 ranks for an allreduce, an
allgather and a reduce-scatter; the shim's log must show every call run on the schedule of the
right p.  A size it was not compiled for goes to the MPI library, saying which sizes it has.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli import cli
from test_mpi_c import assert_passed, driver  # noqa: F401  (driver: a fixture)
from test_mpi_c import mpirun as mpirun_driver
from test_shim_ops import RAN, assert_every_call_ran, mpirun, summary
from test_small_schedule import matrix  # noqa: F401  (a fixture)

import collc
from collc.diagnostics import CollError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SIZES = (3, 4, 6, 8)
CASES = {
    "allreduce": "ring_allreduce.coll",
    "allgather": "ring_allgather.coll",
    "reduce_scatter_block": "ring_reduce_scatter.coll",
}


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One library per collective, each for every p in SIZES, built when a test first asks for it."""

    class Built(dict):
        def __missing__(self, collective: str) -> Path:
            files, compiled = collc.load(EXAMPLES / CASES[collective]).compile_library(
                SIZES, tmp_path_factory.mktemp(collective)
            )
            assert compiled == list(SIZES)
            self[collective] = files[-1]
            return files[-1]

    return Built()


# The normal suite runs two of the pairs; the slow suite every pair.
FAST = {("allreduce", 3), ("allgather", 6)}


def _params() -> list[object]:
    return [
        pytest.param(c, p, marks=() if (c, p) in FAST else pytest.mark.slow, id=f"{c}-p{p}")
        for c in CASES
        for p in SIZES
    ]


@pytest.mark.parametrize(("collective", "p"), _params())
def test_one_library_runs_every_compiled_size(
    collective: str,
    p: int,
    libraries: dict[str, Path],
    matrix: Path,  # noqa: F811
) -> None:
    run = mpirun(p, [matrix, collective, "--list", "1"], preload=libraries[collective], env={"COLLC_SHIM_LOG": "1"})
    assert_every_call_ran(run, p, CASES[collective].removesuffix(".coll"))


def test_a_size_the_library_lacks_goes_to_the_mpi_library(libraries: dict[str, Path], matrix: Path) -> None:  # noqa: F811
    args = [matrix, "allreduce", "--op", "MPI_SUM", "--type", "MPI_INT", "--counts", "1,100"]
    run = mpirun(5, args, preload=libraries["allreduce"], env={"COLLC_SHIM_LOG": "1"})
    assert run.returncode == 0 and summary(run)[3] == 0, run.tail()
    assert "PMPI fallback (communicator of size 5, compiled for p = 3, 4, 6, 8)" in run.stderr, run.tail()
    assert not RAN.findall(run.stderr)


def test_the_constraints_choose_the_sizes(tmp_path: Path) -> None:
    rd = collc.load(EXAMPLES / "recursive_doubling.coll")
    files, compiled = rd.compile_library(range(2, 10), tmp_path, build=False)
    assert compiled == [2, 4, 8]
    assert {f.name for f in files if f.suffix == ".c"} == {
        "collc_recursive_doubling.c", "collc_recursive_doubling_p4.c", "collc_recursive_doubling_p8.c",
    }  # fmt: skip
    with pytest.raises(CollError, match=r"no rank count in 3, 5, 7 is allowed: p=3 violates the constraint"):
        rd.compile_library([3, 5, 7], tmp_path / "none", build=False)


@pytest.mark.slow
def test_a_small_schedule_joins_the_sizes_it_allows(tmp_path: Path) -> None:
    ring, rd = collc.load(EXAMPLES / "ring_allreduce.coll"), collc.load(EXAMPLES / "recursive_doubling.coll")
    files, compiled = ring.compile_library([3, 4, 6, 8], tmp_path, small=rd, small_below=1024)
    assert compiled == [3, 4, 6, 8]
    names = {f.name for f in files if f.suffix == ".c"}
    assert names == {
        "collc_ring_allreduce.c", "collc_ring_allreduce_p4.c", "collc_ring_allreduce_p4_small.c",
        "collc_ring_allreduce_p6.c", "collc_ring_allreduce_p8.c", "collc_ring_allreduce_p8_small.c",
    }  # fmt: skip
    assert files[-1].name == "libcollc_ring_allreduce.so"


def test_cli_compiles_a_range_for_mpi_c_only(tmp_path: Path) -> None:
    path = EXAMPLES / "swing_bw.coll"
    res = cli("compile", path, "-p", "2..6", "--target", "mpi-c", "--no-build", "-o", tmp_path / "a")
    assert res.code == 0, res.text
    assert "one library for p = 2, 3, 4, 5, 6" in res.stderr
    assert (tmp_path / "a" / "collc_swing_bw_p6.c").is_file()
    res = cli("compile", EXAMPLES / "recursive_doubling.coll", "-p", "2..6", "-t", "mpi-c", "--no-build", "-o",
              tmp_path / "b")  # fmt: skip
    assert res.code == 0 and "one library for p = 2, 4 (3, 5, 6 excluded by the constraints)" in res.stderr, res.text
    res = cli("compile", path, "-p", "2..6", "--target", "mpi-py", "-o", tmp_path / "c")
    assert res.code == 2 and "takes one rank count" in res.text


def test_an_alltoall_library_runs_each_size_on_its_own_schedule(
    tmp_path: Path,
    driver: Path,  # noqa: F811
) -> None:
    """The alltoall entry point takes p, the block size and the segments from the schedule admitted for the
    communicator, not from the library's first size (which crashed the sizes after it)."""
    files, compiled = collc.load(EXAMPLES / "pairwise_alltoall.coll").compile_library((3, 4, 6), tmp_path)
    assert compiled == [3, 4, 6]
    for p in (4, 6):
        run = mpirun_driver(p, [str(driver), "alltoall"], preload=str(files[-1]), env={"COLLC_SHIM_LOG": "1"})
        assert_passed(run)
        ran = [line for line in run.stderr.splitlines() if line.startswith("collc: MPI_Alltoall")]
        assert len(ran) >= 100 * p and all(f"pairwise_alltoall p={p} rank" in line for line in ran), ran[:3]
