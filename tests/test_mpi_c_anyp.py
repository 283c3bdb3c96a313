"""One mpi-c library for any communicator size (`collc compile --target mpi-c -p any`).

The library carries the program in C and computes a rank's step tables at the first call on a
communicator of p ranks.  The tables it computes, for every rank at many p, must be the tables
`collc.backends.tables` builds from the verified schedule of that p, message by message (step order,
peer, send or receive, chunk runs, copy or reduce, direct receives) with the scratch space and the
messages per step.  The step numbers of the library are the program's step counter: the Python
tables drop the steps in which no rank does anything, so the library's steps are compared after
numbering the steps some rank uses 0, 1, 2, ...  One compiled library, preloaded as the PMPI shim,
runs the op matrix (tests/mpi/op_matrix.c, every predefined op and datatype against the MPI library's
own collective) at several communicator sizes; a size the constraints exclude goes to the MPI
library with the constraint named.  Programs the any-p target does not support are refused at
compile time, at the construct.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest
from test_cli import cli
from test_mpi_c import assert_passed, driver  # noqa: F401  (driver: a fixture)
from test_mpi_c import mpirun as mpirun_driver
from test_shim_ops import RAN, assert_every_call_ran, mpirun, summary
from test_small_schedule import matrix  # noqa: F401  (a fixture)

import collc
from collc.backends import dataflow, mpi_c, mpi_c_anyp, mpi_launch, tables
from collc.collectives import element_offsets
from collc.diagnostics import CollError
from collc.ir import Collective, OpKind

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# Each supported example, the rank counts the normal suite compares, and those the slow suite adds.
FAST_P = range(1, 13)
SLOW_P = [*range(13, 41)]
TABLE_CASES = {
    "ring_allreduce": [100, 257],  # (1024: the Python tables alone take minutes)
    "ring_allgather": [100],
    "ring_reduce_scatter": [100],
    "recursive_doubling": [64, 256],
    "recursive_doubling_any": [100],
    "swing_bw": [64, 100, 101],
    "swing_lat": [100],
    "rabenseifner": [100],
    "bruck_allgather": [100],
    "binomial_broadcast": [100],
    "pipelined_ring_allreduce": [64],
    "weighted_striped_ring_allreduce": [64],
    "pairwise_alltoall": [100],
}


# The examples whose tables the normal suite compares (the slow suite compares them all).
FAST_TABLES = ("ring_allreduce", "swing_bw", "recursive_doubling", "pipelined_ring_allreduce", "pairwise_alltoall")


class _Libraries(dict[str, Path]):
    """Each supported example's any-p library, built at its first use (verified at p up to 8 here, the sizes the
    shim runs below; the tables are compared at many more, through the debugging entry point, which serves any p)."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def __missing__(self, name: str) -> Path:
        files, verified = collc.load(EXAMPLES / f"{name}.coll").compile_any_p(self.root / name, verify_up_to=8)
        assert files[-1].name == f"libcollc_{name}.so" and verified.runs == ((1, 8),)
        self[name] = files[-1]
        return files[-1]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _Libraries(tmp_path_factory.mktemp("anyp"))


def _compare(alg: collc.Algorithm, library: Path, p: int, **params: int) -> None:
    """The library's tables at p equal the Python tables of the verified schedule, rank by rank."""
    inst = alg.instantiate(p=p, **params)
    want = tables.from_schedule(inst.schedule)
    nchunks, got = mpi_c_anyp.anyp_tables(library, alg.name, p)
    assert nchunks == want.nchunks
    used = sorted({rs.step for rank in got for rs in rank.steps})
    dense = {step: k for k, step in enumerate(used)}
    assert len(used) == len(want.steps)
    for rank in range(p):
        steps = [tables.RankStep(dense[rs.step], rs.sends, rs.recvs) for rs in got[rank].steps]
        assert steps == list(want.ranks[rank]), f"{alg.name} p={p} rank {rank}"
        assert got[rank].scratch == max((dataflow.step_scratch(rs) for rs in want.ranks[rank]), default=0)
        most = max((len(rs.sends) + len(rs.recvs) for rs in want.ranks[rank]), default=0)
        assert got[rank].max_messages == most
        # Dataflow issue: what each message waits for, and the run's scratch space.
        assert got[rank].deps == tuple(op.deps for op in dataflow.rank_ops(want, rank)), f"{alg.name} p={p} {rank}"
        assert got[rank].flow_scratch == dataflow.flow_scratch(want.ranks[rank])
    if inst.schedule.collective is Collective.ALLTOALL:  # the chunk runs each rank's work buffer holds
        segments = mpi_c._segments(inst.schedule, want)
        assert [got[r].segments for r in range(p)] == [b.segments for b in segments], f"{alg.name} p={p}"


def _same_error(alg: collc.Algorithm, library: Path, p: int) -> CollError:
    """The elaborator's error at p; the library refuses p with the same message at the same place."""
    with pytest.raises(CollError) as python:
        alg.instantiate(p=p)
    with pytest.raises(CollError) as c:
        mpi_c_anyp.anyp_tables(library, alg.name, p)
    span = python.value.span
    assert span is not None
    assert str(c.value) == f"{Path(span.file).name}:{span.line}:{span.column}: {python.value.args[0]}"
    return python.value


def _table_params() -> list[object]:
    out: list[object] = [
        pytest.param(name, "fast", id=f"{name}-fast", marks=() if name in FAST_TABLES else pytest.mark.slow)
        for name in TABLE_CASES
    ]
    out += [pytest.param(name, "slow", id=f"{name}-slow", marks=pytest.mark.slow) for name in TABLE_CASES]
    return out


@pytest.mark.parametrize(("name", "which"), _table_params())
def test_tables_equal_the_verified_schedules(name: str, which: str, built: dict[str, Path]) -> None:
    alg = collc.load(EXAMPLES / f"{name}.coll")
    sizes = list(FAST_P) if which == "fast" else [*SLOW_P, *TABLE_CASES[name]]
    kept, excluded = alg.allowed(sizes)
    assert kept
    for inst in kept:
        _compare(alg, built[name], inst.nranks)
    for p in excluded:  # the library refuses them with the constraint, as the Python side does
        with pytest.raises(CollError, match="violates the constraint"):
            mpi_c_anyp.anyp_tables(built[name], alg.name, p)


def test_an_excluded_size_names_its_constraint(built: dict[str, Path]) -> None:
    with pytest.raises(CollError, match=r"recursive_doubling\.coll:4:\d+: p=6 violates the constraint is_pow2\(p\)"):
        mpi_c_anyp.anyp_tables(built["recursive_doubling"], "recursive_doubling", 6)
    with pytest.raises(CollError, match=r"p=1 violates the constraint p >= 2"):
        mpi_c_anyp.anyp_tables(built["swing_bw"], "swing_bw", 1)


# ---------------------------------------------------------------------------- the shim


SHIM_CASES = [  # (MPI collective, example, p, in the normal suite)
    ("allreduce", "ring_allreduce", 3, True),
    ("allreduce", "ring_allreduce", 4, False),
    ("allreduce", "ring_allreduce", 6, False),
    ("allreduce", "ring_allreduce", 8, False),
    ("allreduce", "swing_bw", 3, False),
    ("allreduce", "swing_bw", 4, True),
    ("allreduce", "swing_bw", 6, False),
    ("allreduce", "swing_bw", 8, False),
    ("allgather", "ring_allgather", 4, True),
    ("allgather", "ring_allgather", 7, False),
    ("reduce_scatter_block", "ring_reduce_scatter", 4, True),
    ("reduce_scatter_block", "ring_reduce_scatter", 5, False),
    ("reduce_scatter_block", "ring_reduce_scatter", 8, False),
    ("allreduce", "pipelined_ring_allreduce", 5, False),
    ("allreduce", "weighted_striped_ring_allreduce", 5, True),
]


def _shim_params() -> list[object]:
    """Every case by dataflow (the default) and step by step (COLLC_ISSUE=steps); step order in the normal suite
    for swing_bw at 4 ranks only."""
    out: list[object] = []
    for c, n, p, fast in SHIM_CASES:
        for issue in ("dataflow", "steps"):
            normal = fast and (issue == "dataflow" or (n, p) == ("swing_bw", 4))
            out.append(pytest.param(c, n, p, issue, marks=() if normal else pytest.mark.slow, id=f"{n}-p{p}-{issue}"))
    return out


@pytest.mark.parametrize(("collective", "name", "p", "issue"), _shim_params())
def test_one_library_runs_the_op_matrix_at_any_size(
    collective: str,
    name: str,
    p: int,
    issue: str,
    built: dict[str, Path],
    matrix: Path,  # noqa: F811
) -> None:
    """Both issue orders (the dependencies the library computes are compared with the Python ones above)."""
    env = {"COLLC_SHIM_LOG": "1", "COLLC_ISSUE": issue}
    run = mpirun(p, [matrix, collective, "--list", "1"], preload=built[name], env=env)
    assert_every_call_ran(run, p, name)


def test_a_size_the_constraints_exclude_goes_to_the_mpi_library(built: dict[str, Path], matrix: Path) -> None:  # noqa: F811
    args = [matrix, "allreduce", "--op", "MPI_SUM", "--type", "MPI_INT", "--counts", "1,100"]
    run = mpirun(6, args, preload=built["recursive_doubling"], env={"COLLC_SHIM_LOG": "1"})
    assert run.returncode == 0 and summary(run)[3] == 0, run.tail()
    assert "PMPI fallback (recursive_doubling.coll:4:" in run.stderr, run.tail()
    assert "p=6 violates the constraint is_pow2(p))" in run.stderr, run.tail()
    assert "recursive_doubling p=6 rank 5" in run.stderr
    assert not RAN.findall(run.stderr)


@pytest.mark.parametrize(
    ("p", "flags"),
    [
        (3, ("--split", "--dup")),
        (8, ()),
        pytest.param(4, (), marks=pytest.mark.slow),
        pytest.param(6, ("--split",), marks=pytest.mark.slow),
    ],
)
def test_one_alltoall_library_at_any_size(
    built: dict[str, Path],
    driver: Path,  # noqa: F811
    p: int,
    flags: tuple[str, ...],
) -> None:
    """Every datatype and count of the mpi-c driver (tests/mpi_c/driver.c) against the MPI library's alltoall; with
    --split, its sub-communicators too: each size gets its own tables and segments."""
    run = mpirun_driver(p, [str(driver), "alltoall", *flags], preload=str(built["pairwise_alltoall"]),
                        env={"COLLC_SHIM_LOG": "1"})  # fmt: skip
    assert_passed(run)
    lines = run.stderr.splitlines()
    ran = [line for line in lines if line.startswith("collc: MPI_Alltoall") and "->" not in line]
    assert len(ran) >= 100 * p and not [line for line in lines if "PMPI fallback" in line], run.stderr[-2000:]
    assert any(f"pairwise_alltoall p={p} rank " in line for line in ran)
    if flags:  # sub-communicators of other sizes ran on their own schedules
        assert {m.group(1) for line in ran if (m := re.search(r" p=(\d+) ", line))} - {str(p)}


@pytest.mark.parametrize(
    ("name", "mode"),
    [("binomial_gather", "gather"), ("binomial_scatter", "scatter"), ("hillis_steele_scan", "scan"),
     ("hillis_steele_exscan", "exscan"), ("dissemination_barrier", "barrier"), ("bine_gather", "gather"),
     ("ring_allgather", "allgatherv"), ("ring_reduce_scatter", "reduce_scatter"), ("bruck_alltoall", "alltoallv")],
)  # fmt: skip
def test_the_newer_collectives_at_any_size(built: dict[str, Path], driver: Path, name: str, mode: str) -> None:  # noqa: F811
    """Gather, scatter, scans, barriers and the counts given at run time from one any-p library: the mpi-c driver's
    cases at 3 and 7 ranks and on the halves of 7 (3 and 4 ranks), every call run on a schedule built for its
    communicator's size."""
    for p in (3, 7):
        run = mpirun_driver(p, [str(driver), mode, "--quick", *(("--split",) if p == 7 else ())],
                            preload=str(built[name]), env={"COLLC_SHIM_LOG": "1"})  # fmt: skip
        assert_passed(run)
        calls = [line for line in run.stderr.splitlines() if line.startswith("collc: MPI_")]
        ran = [line for line in calls if "->" not in line]
        sizes = {m.group(1) for line in ran if (m := re.search(r" p=(\d+) ", line))}
        assert ran and sizes == ({"3", "4", "7"} if p == 7 else {"3"}), (sizes, calls[:3])
        fallbacks = [line for line in calls if "->" in line]
        assert all("not commutative" in line for line in fallbacks), fallbacks[:3]


# ---------------------------------------------------------------------------- refusals


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prog.coll"
    path.write_text(text)
    return path


def test_compression_points_are_refused(tmp_path: Path) -> None:
    alg = collc.load(EXAMPLES / "compression" / "compressed_ring_allreduce.coll")
    with pytest.raises(CollError, match=r"any-p compilation .* does not support compression points") as err:
        alg.compile_any_p(tmp_path, build=False)
    assert err.value.span is not None and err.value.span.line > 0
    path = _write(tmp_path, "algorithm w : allreduce\nparam p : int where p >= 2\ncodec h = fp16\nchunks 1\n"
                  "phase a:\n  exchange with (rank + 1) mod p: send 0 compress h; recv 0 reduce\n")  # fmt: skip
    with pytest.raises(CollError, match=r"does not support compression points \(codec h, line 3\)"):
        collc.load(path).compile_any_p(tmp_path / "w", build=False)


def test_a_hierarchy_is_refused(tmp_path: Path) -> None:
    alg = collc.load(EXAMPLES / "hierarchical" / "hier_allgather.coll")
    with pytest.raises(CollError, match=r"does not support a hierarchy \(line \d+\)"):
        alg.compile_any_p(tmp_path, params={"nodes": 2, "local": 2}, build=False)


def test_chunk_weights_are_computed_for_any_p(tmp_path: Path) -> None:
    """Unequal weights (share=30): the library's prefix sums are the elaborator's at every p, its tables Python's;
    a weight the elaborator refuses (from p = 20 on only) is refused with the same message at the same place."""
    alg = collc.load(EXAMPLES / "weighted_striped_ring_allreduce.coll")
    files, _ = alg.compile_any_p(tmp_path / "w", params={"share": 30}, verify_up_to=4)
    for p in range(1, 13):
        weights = alg.instantiate(p=p, share=30).schedule.chunk_weights
        assert weights is not None and set(weights) == {30, 70}
        assert mpi_c_anyp.anyp_prefix(files[-1], alg.name, p) == tuple(itertools.accumulate(weights, initial=0))
    for p in (3, 8):
        _compare(alg, files[-1], p, share=30)
    path = _write(tmp_path, "algorithm w : allgather\nparam p : int where p >= 1\nchunks p weight(c) = 1 if p < 20 "
                  "else c\nphase g:\n  for step s in 0 .. p - 1:\n    send (rank - s) mod p to ring_next(rank)\n"
                  "    recv (rank - s - 1) mod p from ring_prev(rank) copy\n")  # fmt: skip
    bad = collc.load(path)
    files, _ = bad.compile_any_p(tmp_path / "b", verify_up_to=4)
    assert mpi_c_anyp.anyp_prefix(files[-1], "w", 5) == (0, 1, 2, 3, 4, 5)
    error = _same_error(bad, files[-1], 20)
    assert error.args[0] == "the weight of chunk 0 is 0; a chunk's weight must be an int >= 1"


def test_the_library_cuts_the_vector_by_the_weights(tmp_path: Path) -> None:
    """At 3 and 5 ranks (share=30: unequal chunks) every rank's result is numpy's and, bit for bit, that of the
    library compiled for that p (float32 sums: an element reduced in another chunk's order would differ), and the
    bytes sent are those of the schedule's sends with the chunks cut by the weights."""
    alg = collc.load(EXAMPLES / "weighted_striped_ring_allreduce.coll")
    files, _ = alg.compile_any_p(tmp_path / "w", params={"share": 30}, verify_up_to=5)
    entry = {"name": "mpi-c", "kind": "mpi-c", "library": str(files[-1])}
    count = 10007
    for p in (3, 5):
        schedule = alg.instantiate(p=p, share=30).schedule
        results = []
        for which, prepared in (("any", [entry]), ("one", None)):
            dump = tmp_path / f"{which}{p}"
            dump.mkdir()
            (row,) = mpi_launch.run(schedule, [count], kinds=("mpi-c",), prepared=prepared, workdir=tmp_path / which,
                                    dump_dir=dump, seed=3)  # fmt: skip
            assert row.wrong == 0
            results.append([np.load(dump / f"rank{r}_count{count}.npy").tobytes() for r in range(p)])
        assert results[0] == results[1]
        sizes = np.diff(element_offsets(schedule.collective, p, schedule.nchunks, count, schedule.chunk_weights)) * 4
        sends = [c for step in schedule.steps for op in step.ops if op.kind is OpKind.SEND for c in op.chunks]
        assert row.wire_bytes == sum(int(sizes[c]) for c in sends)


@pytest.mark.parametrize(
    ("chunks", "root", "message"),
    [  # refused from p = 17 on only (compile time verifies p <= 4); the message the elaborator gives there
        ("chunks 2 weight(c) = 1 if p < 17 else 0", "0", "the weight of chunk 0 is 0; a chunk's weight must be"),
        ("chunks 2 weight(c) = 1 if p < 17 else c == 0", "0", "the weight of chunk 0 must be an int, not a bool "
         "(true)"),
        ("chunks 2 weight(c) = 1 if p < 17 else 2147483649", "0", "the chunk weights add up to more than 2^32 (chunk 1 "
         "brings the sum to 4294967298)"),
        ("chunks 2 weight(c) = 1 if p < 17 else 0", "0 if p < 17 else 30", "the weight of chunk 0 is 0"),
        ("chunks 2 weight(c) = 1", "0 if p < 17 else 30", "root=30 must be a rank in 0..16"),
    ],
)  # fmt: skip
def test_instance_errors_follow_the_elaborator(tmp_path: Path, chunks: str, root: str, message: str) -> None:
    """Weights (checked before the root, as the elaborator checks them), the 2^32 bound, a bool weight."""
    path = _write(tmp_path, f"algorithm b : broadcast\nparam p : int where p >= 1\nparam root : int = {root}\n"
                  f"{chunks}\nphase g:\n  for step s in 0 .. p - 1:\n    if rank == root and s == 0:\n"
                  "      for r in 0 .. p:\n        if r != root:\n          send {0, 1} to r\n"
                  "    elif s == 0:\n      recv {0, 1} from root copy\n")  # fmt: skip
    alg = collc.load(path)
    files, _ = alg.compile_any_p(tmp_path / "b", verify_up_to=4)
    assert message in _same_error(alg, files[-1], 17).args[0]


def test_weights_up_to_2_to_the_32_are_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path, "algorithm w : allgather\nparam p : int where p >= 1\nchunks p weight(c) = 1 if p < 17 "
                  "else (4294967296 - 16 if c == 0 else 1)\nphase g:\n  for step s in 0 .. p - 1:\n"
                  "    send (rank - s) mod p to ring_next(rank)\n"
                  "    recv (rank - s - 1) mod p from ring_prev(rank) copy\n")  # fmt: skip
    alg = collc.load(path)
    files, _ = alg.compile_any_p(tmp_path / "w", verify_up_to=4)
    weights = alg.instantiate(p=17).schedule.chunk_weights
    assert weights is not None and sum(weights) == 1 << 32
    assert mpi_c_anyp.anyp_prefix(files[-1], "w", 17) == tuple(itertools.accumulate(weights, initial=0))


def test_groups_are_refused(tmp_path: Path) -> None:
    groups = _write(tmp_path, "algorithm g : allreduce\nparam p : int where p >= 2\nchunks 1\nproc ex():\n"
                    "  step:\n    pass\nphase a:\n  do ex() on {r for r in 0 .. p if r % 2 == 0}\n")  # fmt: skip
    with pytest.raises(CollError, match=r"does not support do \.\.\. on GROUP \(line 8\)"):
        collc.load(groups).compile_any_p(tmp_path / "g", build=False)


def test_a_lane_is_checked_as_the_elaborator_checks_it(tmp_path: Path) -> None:
    """Lanes run as part of their step; a lane value the elaborator refuses (here only from p = 20 on, past what
    compile time verifies) is refused by the library with the same message at the same place."""
    path = _write(tmp_path, "algorithm l : allgather\nparam p : int where p >= 1\nchunks p\nphase g:\n"
                  "  for step s in 0 .. p - 1:\n    lane 0 if p < 20 else -1:\n"
                  "      send (rank - s) mod p to ring_next(rank)\n"
                  "      recv (rank - s - 1) mod p from ring_prev(rank) copy\n")  # fmt: skip
    alg = collc.load(path)
    files, _ = alg.compile_any_p(tmp_path / "l", verify_up_to=4)
    _compare(alg, files[-1], 7)
    error = _same_error(alg, files[-1], 20)
    assert "a lane is an int in 0..1048575, got -1" in str(error)
    assert error.span is not None and (error.span.line, error.span.column) == (6, 10)


def test_a_parameter_without_a_value_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "algorithm k : allgather\nparam p : int where p >= 1\nparam k : int where k >= 1\n"
                  "chunks k * p\nphase g:\n  pass\n")  # fmt: skip
    with pytest.raises(CollError, match=r"parameter k needs a value at compile time \(--param k=VALUE\)"):
        collc.load(path).compile_any_p(tmp_path / "k", build=False)
    with pytest.raises(CollError, match="takes p from the communicator"):
        collc.load(EXAMPLES / "ring_allreduce.coll").compile_any_p(tmp_path / "r", params={"p": 4}, build=False)


def test_cli_compiles_any_p_for_mpi_targets_only(tmp_path: Path) -> None:
    res = cli("compile", EXAMPLES / "ring_allreduce.coll", "-p", "any", "--param", "k=2", "--target", "mpi-c",
              "--no-build", "-o", tmp_path / "a")  # fmt: skip
    assert res.code == 0, res.text
    assert "ring_allreduce: one library for any p: it serves p = 1..64, each verified at compile time" in res.stderr
    text = (tmp_path / "a" / "collc_ring_allreduce.c").read_text()
    assert "k=2, given at compile time" in text and "static void phase_reduce_scatter(struct collc_av *X)" in text
    res = cli("compile", EXAMPLES / "ring_allreduce.coll", "-p", "any", "--target", "mpi-py", "-o", tmp_path / "b")
    assert res.code == 2 and "-p any applies to the mpi-c and mpi-cuda targets only, not mpi-py" in res.text
    res = cli("compile", EXAMPLES / "hierarchical" / "hier_allgather.coll", "-p", "any", "-t", "mpi-c",
              "--param", "nodes=2", "--param", "local=2", "-o", tmp_path / "c")  # fmt: skip
    assert res.code != 0 and "does not support a hierarchy" in res.text and "hier_allgather.coll:" in res.text
