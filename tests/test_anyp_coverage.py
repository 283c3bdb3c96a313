"""An any-p library runs no unverified instance: it serves only the communicator sizes covered at compile time.

The issue: a ring allreduce whose rank 16 sends the wrong block at one allgather step (wrong from p = 17 on),
compiled with ``-p any`` when compile time verified p <= 16 only, ran silently wrong at 17 ranks inside an
unmodified MPI program.  Now ``collc compile -p any`` verifies the sizes of ``--verify-ranks`` (1..64 unless told
otherwise; the issue's program fails there, at p = 17) or proves every p (``--verify-ranks all``), the library
embeds what it covers, and a call on a communicator of another size goes to the MPI library, with the reason in
the log.  ``tests/data/anyp/ring_fault_allreduce.coll`` plants the fault at rank ``bad`` (4 by default: wrong from
p = 5), so that the uncovered size runs on this machine's two cores; ``tests/mpi_c/allreduce_ints.c`` is the
issue's MPI program (an MPI_Allreduce of 1700 ints, counting wrong elements).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from test_cli import cli
from test_mpi_c import mpirun

import collc
from collc.backends import mpi_c_anyp
from collc.backends.mpitools import mpicc
from collc.diagnostics import CollError

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
FAULT = HERE / "data" / "anyp" / "ring_fault_allreduce.coll"
DRIVER = HERE / "mpi_c" / "allreduce_ints.c"
RESULT = re.compile(r"allreduce_ints: p=(\d+) count=(\d+) wrong=(\d+)")
OUTSIDE = "p=5 is outside the sizes verified at compile time (1..4); recompile with --verify-ranks 1..5"


@pytest.fixture(scope="module")
def ints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/mpi_c/allreduce_ints.c, built with mpicc."""
    exe = tmp_path_factory.mktemp("ints") / "allreduce_ints"
    cmd = [str(mpicc()), "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(DRIVER)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return exe


def _run(p: int, library: Path, exe: Path) -> tuple[int, list[str]]:
    """The program at p ranks with ``library`` preloaded: its wrong elements and the shim's log lines."""
    proc = mpirun(p, [str(exe)], preload=str(library), env={"COLLC_SHIM_LOG": "1"})
    found = RESULT.search(proc.stdout)
    assert proc.returncode == 0 and found is not None, proc.stdout + proc.stderr[-3000:]
    assert (int(found[1]), int(found[2])) == (p, 1700)
    return int(found[3]), [line for line in proc.stderr.splitlines() if line.startswith("collc: MPI_Allreduce")]


def _ran(lines: list[str], name: str, p: int) -> None:
    """Every rank logged its call as run on the schedule of ``name`` at p, none as a fallback."""
    want = {f"collc: MPI_Allreduce {name} p={p} rank {r} count=1700 MPI_INT MPI_SUM" for r in range(p)}
    assert sorted(lines) == sorted(want), lines


def test_an_uncovered_size_goes_to_the_mpi_library(tmp_path: Path, ints: Path) -> None:
    """The issue's reproduction at a size two cores run: verified at 1..4, the library runs its schedule at 4 ranks
    and hands the call at 5 ranks (where the program is wrong) to PMPI on every rank, with the reason; 0 wrong
    elements at both."""
    res = cli("compile", FAULT, "-p", "any", "--target", "mpi-c", "--verify-ranks", "1..4", "-o", tmp_path / "lib")
    assert res.code == 0, res.text
    assert "ring_fault: one library for any p: it serves p = 1..4, each verified at compile time" in res.stderr
    library = tmp_path / "lib" / "libcollc_ring_fault.so"
    assert "static const int cover_runs[] = { 1, 4 };" in (tmp_path / "lib" / "collc_ring_fault.c").read_text()
    wrong, lines = _run(4, library, ints)
    assert wrong == 0
    _ran(lines, "ring_fault", 4)
    wrong, lines = _run(5, library, ints)
    assert wrong == 0
    assert sorted(lines) == sorted(
        f"collc: MPI_Allreduce ring_fault p=5 rank {r} count=1700 MPI_INT MPI_SUM -> PMPI fallback ({OUTSIDE}, or "
        "--verify-ranks all to prove every p)"
        for r in range(5)
    ), lines


def test_the_planted_fault_is_real_at_5_ranks(tmp_path: Path, ints: Path) -> None:
    """The control: the same program, generated with a coverage that claims p = 5 without verifying it (the backend
    called directly, as nothing in collc does), computes wrong elements there: the fallback above is what keeps the
    result right."""
    alg = collc.load(FAULT)
    forged = mpi_c_anyp.Coverage.of_sizes(range(1, 6), range(1, 6))
    mpi_c_anyp.generate(alg.program, tmp_path, {}, forged)
    library = mpi_c_anyp.build(tmp_path, alg.program)
    wrong, lines = _run(5, library, ints)
    assert wrong > 0
    _ran(lines, "ring_fault", 5)


def test_a_range_with_a_wrong_size_fails_the_compile(tmp_path: Path) -> None:
    """Any wrong instance of the range fails the compile, naming it and the line; the default range (1..64) catches
    the issue's own program (rank 16 wrong, from p = 17 on)."""
    res = cli("compile", FAULT, "-p", "any", "-t", "mpi-c", "--verify-ranks", "2..8", "--no-build",
              "-o", tmp_path / "a")  # fmt: skip
    assert res.code != 0 and not (tmp_path / "a").exists(), res.text
    assert "-p any: the schedule fails verification at p=5: step 5: rank 4 sends chunk 4 to rank 0" in res.stderr
    assert "ring_fault_allreduce.coll:15:5: error:" in res.stderr
    res = cli("compile", FAULT, "-p", "any", "-t", "mpi-c", "--param", "bad=16", "--no-build", "-o", tmp_path / "b")
    assert res.code != 0 and "the schedule fails verification at p=17: step 17: rank 16 sends" in res.stderr, res.text
    with pytest.raises(CollError, match=r"fails verification at p=5: step 5"):
        collc.load(FAULT).compile_any_p(tmp_path / "c", target="mpi-cuda", verify_ranks=[4, 5], build=False)


def test_verify_ranks_all_covers_sizes_beyond_any_range(tmp_path: Path, ints: Path) -> None:
    """Proved for every p, the ring serves 5 ranks though no range was verified: the log shows the schedule run."""
    res = cli("compile", EXAMPLES / "ring_allreduce.coll", "-p", "any", "-t", "mpi-c", "--verify-ranks", "all",
              "-o", tmp_path / "lib")  # fmt: skip
    assert res.code == 0, res.text
    assert "it serves every p up to 268435456 the constraints allow, proved for all p (" in res.stderr
    text = (tmp_path / "lib" / "collc_ring_allreduce.c").read_text()
    assert 'static const struct collc_cover cover = { 1, cover_runs, "1..268435456", 1 };' in text
    wrong, lines = _run(5, tmp_path / "lib" / "libcollc_ring_allreduce.so", ints)
    assert wrong == 0
    _ran(lines, "ring_allreduce", 5)


def test_verify_ranks_all_without_a_proof_fails(tmp_path: Path) -> None:
    """No proof, no library: the faulty ring fails with the prover's counterexample, a program the prover cannot
    express with its reason, at the construct, and the suggestion of a range."""
    res = cli("compile", FAULT, "-p", "any", "-t", "mpi-c", "--verify-ranks", "all", "--no-build", "-o", tmp_path)
    assert res.code != 0 and "-p any --verify-ranks all: the schedule fails verification at p=5:" in res.stderr
    res = cli("compile", EXAMPLES / "swing_bw.coll", "-p", "any", "-t", "mpi-c", "--verify-ranks", "all",
              "--no-build", "-o", tmp_path)  # fmt: skip
    assert res.code != 0 and "-p any --verify-ranks all: no proof for every p: " in res.stderr, res.text
    assert "verify a range instead (--verify-ranks 1..N; without the option, 1..64)" in res.stderr
    assert not list(tmp_path.iterdir())


def test_coverage_of_sizes_and_its_c_data(tmp_path: Path) -> None:
    """Sizes become runs; those the constraints exclude stay covered (the program refuses them at run time with
    its constraint); the generated program carries the runs, for mpi-cuda too, where the rows check them."""
    alg = collc.load(EXAMPLES / "recursive_doubling.coll")
    _, coverage = alg.compile_any_p(tmp_path / "c", verify_ranks=[1, 2, 3, 4, 8, 9, 10], build=False)
    assert coverage.runs == ((1, 4), (8, 10)) and coverage.verified == (1, 2, 4, 8)
    assert 3 in coverage and 5 not in coverage and coverage.text() == "1..4, 8..10"
    assert coverage.how() == "p = 1..4, 8..10, each verified at compile time (the constraints allow 1, 2, 4, 8 of them)"
    text = (tmp_path / "c" / "collc_recursive_doubling.c").read_text()
    assert "static const int cover_runs[] = { 1, 4, 8, 10 };" in text
    alg.compile_any_p(tmp_path / "g", target="mpi-cuda", verify_up_to=4, build=False)
    program = (tmp_path / "g" / "collc_recursive_doubling_program.c").read_text()
    assert 'static const struct collc_cover cover = { 1, cover_runs, "1..4", 0 };' in program
    assert "return collc_av_rows(build, &cover, p, rank, out, why, len);" in program
    with pytest.raises(CollError, match=r"no rank count in 5\.\.7 is allowed: .*p=5 violates the constraint"):
        alg.compile_any_p(tmp_path / "n", verify_ranks=range(5, 8), build=False)
    res = cli("compile", EXAMPLES / "ring_allreduce.coll", "-p", "any", "-t", "mpi-c", "--verify-ranks", "0..3",
              "-o", tmp_path / "z")  # fmt: skip
    assert res.code == 2 and "rank counts start at 1, not 0" in res.text, res.text
    res = cli("compile", EXAMPLES / "ring_allreduce.coll", "-p", "4", "-t", "mpi-c", "--verify-ranks", "1..4",
              "-o", tmp_path / "z")  # fmt: skip
    assert res.code == 2 and "--verify-ranks applies to -p any only" in res.text, res.text
