"""Every predefined reduction op on every datatype MPI defines it for, through the PMPI shim
(``LD_PRELOAD=libcollc_<algorithm>.so``) of every allreduce, allgather, reduce-scatter, scan and
exscan example, at 4, 6 and 8 ranks, against the MPI library's own algorithm (an exscan's rank 0,
whose result MPI leaves undefined, unchecked); and every datatype
through the shim of every gather and scatter example (no op), compiled for the last rank as
the root, in place at the root and not.

``tests/mpi/op_matrix.c`` runs the matrix (the MPI standard's table of predefined ops
and datatypes for C, pair types and ``MPI_IN_PLACE`` included; see its header) and
compares each interposed call with the ``PMPI_`` collective on the same input; its tally
uses PMPI too.  Here each (example, ranks) pair is built once and runs the whole matrix
in one ``mpiexec``; the shim's log (``COLLC_SHIM_LOG=1``) must show every call of the
matrix run on the schedule, on every rank, and none handed to PMPI (a gather's or scatter's at
the library's root), so that a shim that fell back for everything could not pass.

The pairs come from the examples' declared collectives and constraints: a rank count
(or torus shape) that an example's constraints exclude is listed by
`test_excluded_pairs_are_excluded_by_the_examples_constraints`, not run; an example that
allows none of 4, 6 and 8 ranks runs at the smallest rank count it allows.  Schedules
with compression points run in the shim only on float and double sums, when
``COLLC_SHIM_COMPRESS=1`` asks for them (tests/test_shim_compress.py), and are listed too.

Planted bugs (the element size taken for the extent, the holes of pair types written,
the PMPI_Reduce_local fallback one element short; a gather's or scatter's result unpacked
one element short) show that the matrix catches what it is meant to catch.
"""

from __future__ import annotations

import collections
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from shim_libs import Run, mpirun

import collc
from collc.backends import mpi_c
from collc.backends.mpitools import mpicc
from collc.backends.order import mixed_orders
from collc.diagnostics import CollError
from collc.ir import Collective, ParamValue

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
OP_MATRIX = HERE / "mpi" / "op_matrix.c"
RANKS = (4, 6, 8)
MORE_RANKS = range(9, 17)  # for an example that allows none of RANKS
TIMEOUT = 300

# The matrix's collective for each collective an example may declare.
MATRIX = {
    Collective.ALLREDUCE: "allreduce",
    Collective.ALLGATHER: "allgather",
    Collective.REDUCE_SCATTER: "reduce_scatter_block",
    Collective.GATHER: "gather",
    Collective.SCATTER: "scatter",
    Collective.SCAN: "scan",
    Collective.EXSCAN: "exscan",
}
ROOTED = ("gather", "scatter")
# The fewest cases a full run of each matrix makes (fewer: the program lost part of it).
MIN_CASES = {
    "allreduce": 2400,
    "allgather": 300,
    "reduce_scatter_block": 1600,
    "gather": 300,
    "scatter": 300,
    "scan": 2400,
    "exscan": 2400,
}

# The pair types whose size is below their extent (holes between or after the fields).
HOLED_PAIRS = ("MPI_DOUBLE_INT", "MPI_LONG_INT", "MPI_SHORT_INT", "MPI_LONG_DOUBLE_INT")


# --------------------------------------------------------------------------
# Which (example, ranks) pairs run
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    """One example at one rank count (torus examples: one shape)."""

    path: Path
    name: str
    collective: str
    params: tuple[tuple[str, ParamValue], ...]
    nranks: int

    @property
    def id(self) -> str:
        shape = dict(self.params).get("dims")
        dims = "x".join(map(str, shape)) if isinstance(shape, tuple) else None
        root = dict(self.params).get("root")
        return (
            f"{self.name}-p{self.nranks}" + (f"-{dims}" if dims else "") + (f"-root{root}" if root is not None else "")
        )


@dataclass(frozen=True)
class Excluded:
    name: str
    params: str
    reason: str


def _shapes(p: int) -> list[dict[str, ParamValue]]:
    """Torus shapes of p ranks: two dimensions a x b (2 <= a <= b), then one."""
    two = [{"dims": (a, p // a)} for a in range(2, p) if p % a == 0 and a <= p // a]
    return [*two, {"dims": (p,)}]


def _candidates(alg: collc.Algorithm, p: int) -> list[dict[str, ParamValue]]:
    if "dims" in alg.param_names:
        return _shapes(p)
    if {"nodes", "local"} <= set(alg.param_names):  # a hierarchy: several nodes of several ranks first
        splits = [(n, p // n) for n in range(2, p) if p % n == 0]
        return [{"nodes": n, "local": g} for n, g in splits] + [{"nodes": 1, "local": p}, {"nodes": p, "local": 1}]
    if "root" in alg.param_names and alg.collective.value in ROOTED:  # the last rank, then the default root
        return [{"p": p, "root": p - 1}, {"p": p}]
    return [{"p": p}]


def _try(alg: collc.Algorithm, params: dict[str, ParamValue]) -> collc.Instance | str:
    """The instance, or why the example's constraints exclude these parameters."""
    try:
        return alg.instantiate(**params)
    except CollError as err:
        if "violates the constraint" in err.message:
            return f"{err.message} ({err.span})" if err.span else err.message
        raise


def _first_allowed(
    alg: collc.Algorithm, p: int, excluded: list[Excluded] | None
) -> tuple[dict[str, ParamValue], collc.Instance] | None:
    """The first parameters of p ranks the constraints allow (torus: two dimensions before one);
    the others are added to ``excluded`` (when given) with the constraint they violate."""
    for params in _candidates(alg, p):
        inst = _try(alg, params)
        if not isinstance(inst, str):
            return params, inst
        if excluded is not None:
            excluded.append(Excluded(alg.name, ", ".join(f"{k}={v}" for k, v in params.items()), inst))
    return None


def _plan() -> tuple[list[Pair], list[Excluded]]:
    pairs: list[Pair] = []
    excluded: list[Excluded] = []
    for path in sorted(EXAMPLES.rglob("*.coll")):
        if path.parent.name == "lib" or (alg := collc.load(path)).collective not in MATRIX:
            continue
        allowed = [(p, found) for p in RANKS if (found := _first_allowed(alg, p, excluded)) is not None]
        if not allowed:  # the smallest rank count it allows
            allowed = [(p, found) for p in MORE_RANKS if (found := _first_allowed(alg, p, None)) is not None][:1]
        for p, (params, inst) in allowed:
            if inst.schedule.compresses():
                excluded.append(Excluded(alg.name, "any p", "compression points: lossy, float and double sums only"))
                break
            pairs.append(Pair(path, alg.name, MATRIX[alg.collective], tuple(params.items()), p))
    return pairs, excluded


PAIRS, EXCLUDED = _plan()


def _marked(pairs: list[Pair]) -> list[object]:
    """Every pair; the normal suite runs one rank count of each example (-m slow: the others), the
    smallest for every other example and the next one, up to 6 ranks, for the rest, so that it runs 4 and 6
    ranks (8 ranks and more on a 2-core machine only in the slow suite, where an example has fewer)."""
    counts: dict[str, list[int]] = {}
    for pair in pairs:
        counts.setdefault(pair.name, []).append(pair.nranks)
    fast = {}
    for k, (name, ps) in enumerate(sorted(counts.items())):
        ps = sorted(set(ps))
        fast[name] = ps[1] if k % 2 and len(ps) > 1 and ps[1] <= 6 else ps[0]
    fast_pairs = [pair for pair in pairs if pair.nranks == fast[pair.name] and pair.name not in SLOW_ONLY]
    return [pair if pair in fast_pairs else pytest.param(pair, marks=pytest.mark.slow) for pair in pairs]


# Examples whose matrix runs in the slow suite only: their collective's matrix runs in the normal suite through
# another example of their family, and their schedules through the mpi-c driver and MPICH's cases.  The allreduce
# matrix runs there through the ring, Swing (any p), the weighted striped ring (chunk weights), Rabenseifner,
# recursive doubling, Bine, Trivance, IBing, the double binary tree, the hierarchical programs and a torus Swing.
SLOW_ONLY = ("bine_allgather", "bine_reduce_scatter", "bine_gather", "bine_scatter", "trivance_bw",
             "pat_allgather", "bidir_ring_allreduce", "bucket_torus", "hamiltonian_torus", "swing_bw_pow2",
             "striped_ring_allreduce", "swing_lat_torus", "recdoub_bw_torus", "recdoub_lat_torus", "swing_lat",
             "recursive_doubling_any", "pipelined_ring_allreduce")  # fmt: skip


def test_every_example_of_the_seven_collectives_is_covered() -> None:
    """Each allreduce, allgather, reduce-scatter, gather, scatter, scan and exscan example runs, unless it has
    compression points; a gather or scatter from the last rank where its constraints allow it."""
    names = {p.name for p in PAIRS}
    refused = {e.name for e in EXCLUDED if "compression" in e.reason}
    declared = {
        collc.load(path).name
        for path in EXAMPLES.rglob("*.coll")
        if path.parent.name != "lib" and collc.load(path).collective in MATRIX
    }
    assert declared == names | refused, sorted(declared - names - refused)
    assert set(SLOW_ONLY) <= names, sorted(set(SLOW_ONLY) - names)  # each names an example's matrix
    assert {"swing_bw", "ring_allreduce", "ring_allgather", "ring_reduce_scatter"} <= names
    assert {"binomial_gather", "binomial_scatter", "hillis_steele_scan", "hillis_steele_exscan"} <= names
    for pair in PAIRS:
        if pair.name in ("binomial_gather", "binomial_scatter"):
            assert dict(pair.params).get("root") == pair.nranks - 1, pair.id
    powers_of_two = {
        "recursive_doubling", "swing_bw_pow2", "recdoub_bw_torus", "recdoub_lat_torus", "recursive_doubling_allgather",
        "bine_allreduce", "bine_allgather", "bine_reduce_scatter",
    }  # fmt: skip
    for name in names - powers_of_two - {"hamiltonian_torus"}:
        assert {p.nranks for p in PAIRS if p.name == name} == set(RANKS), name


def test_excluded_pairs_are_excluded_by_the_examples_constraints() -> None:
    for e in EXCLUDED:
        assert "violates the constraint" in e.reason or "compression" in e.reason, e
    recursive = {e.params for e in EXCLUDED if e.name == "recursive_doubling"}
    assert recursive == {"p=6"}
    assert any(p.name == "hamiltonian_torus" and p.nranks == 9 for p in PAIRS)


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------


# `mpirun` and its `Run`: tests/shim_libs.py.


SUMMARY = re.compile(r"op_matrix: (\w+): (\d+) cases, (\d+) interposed calls per rank, on (\d+) ranks, (\d+) failures")
CASE = re.compile(r"^case (\S+) (\S+) (\S+) (\d+)$", re.M)
# One interposed call that ran on the schedule (a fallback line goes on with " -> PMPI fallback (...)").
RAN = re.compile(
    r"^collc: (MPI_\w+) (\S+) p=(\d+) rank (\d+) count=(\d+) (\S+)(?: (MPI_[A-Z]+))?(?: root=(\d+))?$", re.M
)


def summary(run: Run) -> tuple[int, int, int, int]:
    """(cases, interposed calls per rank, ranks, failures) from the matrix's last line."""
    found = SUMMARY.search(run.stdout)
    assert found is not None, "op_matrix printed no summary\n" + run.tail()
    return int(found[2]), int(found[3]), int(found[4]), int(found[5])


def failing(run: Run) -> set[tuple[str, str]]:
    """The (op, type) of every FAIL line."""
    return set(re.findall(r"^FAIL coll=\S+ entry=\S+ op=(\S+) type=(\S+) ", run.stderr, re.M))


def build_op_matrix(folder: Path) -> Path:
    """tests/mpi/op_matrix.c, built in ``folder``."""
    exe = folder / "op_matrix"
    cmd = [str(mpicc()), "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(OP_MATRIX)]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert proc.returncode == 0, f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
    return exe


def assert_every_call_ran(run: Run, nranks: int, algorithm: str, root: int | None = None) -> None:
    """The matrix (run with --list 1 and COLLC_SHIM_LOG=1) passed, and the log shows every listed call run on
    ``algorithm`` at p = ``nranks`` (and at ``root``, for a collective that has one) on every rank, none handed to
    PMPI."""
    cases, calls, ranks, failures = summary(run)
    assert run.returncode == 0 and failures == 0 and ranks == nranks and calls > 0, run.tail()
    assert "fallback" not in run.stderr, run.tail()
    listed = CASE.findall(run.stdout)
    assert len(listed) == cases, run.tail()
    want = collections.Counter((str(r), *case) for case in listed for r in range(nranks))
    ran: collections.Counter = collections.Counter()
    for entry, logged, p, rank, count, dtype, op, at in RAN.findall(run.stderr):
        assert logged == algorithm and int(p) == nranks, run.tail()
        assert (int(at) if at else None) == root, f"{entry} at root {at or 'none'}, not {root}"
        ran[(rank, entry, dtype, op or "-", count)] += 1
    missing = want - ran
    assert not missing, f"{sum(missing.values())} calls not logged as run on the schedule, e.g. {min(missing)}"
    assert ran == want


@pytest.fixture(scope="module")
def op_matrix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_op_matrix(tmp_path_factory.mktemp("op_matrix"))


def library_root(pair: Pair) -> int | None:
    """The root the pair's library is compiled for (a gather or scatter), or None."""
    if pair.collective not in ROOTED:
        return None
    return collc.load(pair.path).instantiate(**dict(pair.params)).schedule.root


def build(pair: Pair, out: Path, patch: tuple[str, str, str] | None = None) -> Path:
    """The pair's library, built in ``out``; ``patch`` (header, old, new) edits a runtime header first."""
    inst = collc.load(pair.path).instantiate(**dict(pair.params))
    assert inst.verify().ok
    mpi_c.generate(inst.schedule, out)
    if patch is not None:
        header, old, new = patch
        text = (out / header).read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{header} no longer has {old!r}"
        (out / header).write_text(text.replace(old, new), encoding="utf-8")
    return mpi_c.build(out, inst.schedule)


@pytest.mark.parametrize("pair", _marked(PAIRS), ids=lambda p: p.id)
def test_op_matrix_through_the_shim(pair: Pair, op_matrix: Path, tmp_path: Path) -> None:
    lib = build(pair, tmp_path)
    root = library_root(pair)
    args = [op_matrix, pair.collective, "--list", "1"] + (["--root", str(root)] if root is not None else [])
    env = {"COLLC_SHIM_LOG": "1"}
    if mixed_orders(collc.load(pair.path).instantiate(**dict(pair.params)).schedule):
        env["COLLC_SHIM_EXACT"] = "0"  # ranks that round float sums in their own orders: run them anyway
    run = mpirun(pair.nranks, args, preload=lib, env=env)
    assert summary(run)[0] >= MIN_CASES[pair.collective], run.tail()
    # Every call of the matrix ran on the schedule, on every rank: none went to PMPI.
    assert_every_call_ran(run, pair.nranks, pair.name, root)


# --------------------------------------------------------------------------
# The matrix catches planted bugs
# --------------------------------------------------------------------------

# The (op, datatype) pairs that run inline loops (collc_reduce.h), never PMPI_Reduce_local.
INLINE_TYPES = {
    "MPI_FLOAT", "MPI_DOUBLE", "MPI_SIGNED_CHAR", "MPI_UNSIGNED_CHAR", "MPI_SHORT", "MPI_UNSIGNED_SHORT", "MPI_INT",
    "MPI_UNSIGNED", "MPI_LONG", "MPI_UNSIGNED_LONG", "MPI_LONG_LONG", "MPI_LONG_LONG_INT", "MPI_UNSIGNED_LONG_LONG",
    "MPI_INT8_T", "MPI_INT16_T", "MPI_INT32_T", "MPI_INT64_T", "MPI_UINT8_T", "MPI_UINT16_T", "MPI_UINT32_T",
    "MPI_UINT64_T",
}  # fmt: skip
INLINE = {(op, t) for op in ("MPI_SUM", "MPI_PROD", "MPI_MIN", "MPI_MAX") for t in INLINE_TYPES}
HOLED_PAIR_CASES = {(op, t) for op in ("MPI_MINLOC", "MPI_MAXLOC") for t in HOLED_PAIRS}

PLANTED: dict[str, tuple[str, str, str]] = {
    # Element offsets computed with the datatype's size instead of its extent.
    "size_for_extent": ("collc_shim.h", "ctx->extent = c->extent;", "ctx->extent = (MPI_Aint)c->type_size;"),
    # Results copied to the caller's buffer as whole elements, holes included.
    "holes_written": ("collc_shim.h", "if (!c->holes) {", "if (1) {"),
    # The PMPI_Reduce_local fallback one element short.
    "reduce_local_short": (
        "collc_reduce.h",
        "return PMPI_Reduce_local_c(src, dst, n, dt, op);",
        "return PMPI_Reduce_local_c(src, dst, n - 1, dt, op);",
    ),
}


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_op_matrix_catches_a_planted_bug(bug: str, op_matrix: Path, tmp_path: Path) -> None:
    pair = next(p for p in PAIRS if p.name == "swing_bw" and p.nranks == 6)
    lib = build(pair, tmp_path, PLANTED[bug])
    run = mpirun(pair.nranks, [op_matrix, "allreduce"], preload=lib)
    _, _, _, failures = summary(run)
    assert run.returncode != 0 and failures > 0, run.tail()
    bad = failing(run)
    if bug == "reduce_local_short":  # every pair without an inline loop, and no other
        assert not bad & INLINE, sorted(bad & INLINE)
        wanted = {("MPI_MINLOC", "MPI_DOUBLE_INT"), ("MPI_MAXLOC", "MPI_2INT"), ("MPI_SUM", "MPI_LONG_DOUBLE"),
                  ("MPI_PROD", "MPI_C_DOUBLE_COMPLEX"), ("MPI_LXOR", "MPI_C_BOOL"), ("MPI_BAND", "MPI_BYTE"),
                  ("MPI_LAND", "MPI_INT"), ("MPI_SUM", "MPI_AINT")}  # fmt: skip
        assert wanted <= bad, sorted(wanted - bad)
    else:  # the pair types with holes, and nothing else
        assert bad == HOLED_PAIR_CASES, sorted(bad ^ HOLED_PAIR_CASES)


# A gather's or scatter's result unpacked one element short (only a datatype whose packed bytes are not its layout
# is unpacked: the others are copied whole).
PLANTED_ROOTED: dict[str, tuple[str, str, str]] = {
    "gather": (
        "collc_coll.h",
        "at_root)\n            err = collc_unpack(work, block * c.size, recvbuf, recvcount * c.size, recvtype",
        "at_root)\n            err = collc_unpack(work, block * c.size, recvbuf, recvcount * c.size - 1, recvtype",
    ),
    "scatter": (
        "collc_coll.h",
        "collc_unpack(work + c.rank * block, block, recvbuf, recvcount, recvtype, collc_dense(recvtype));",
        "collc_unpack(work + c.rank * block, block, recvbuf, recvcount - 1, recvtype, collc_dense(recvtype));",
    ),
}


@pytest.mark.parametrize("collective", sorted(PLANTED_ROOTED))
def test_op_matrix_catches_a_result_unpacked_short(collective: str, op_matrix: Path, tmp_path: Path) -> None:
    """The pair types with holes fail (their results are unpacked), every other datatype passes."""
    pair = next(p for p in PAIRS if p.collective == collective and p.name == f"binomial_{collective}" and p.nranks == 6)
    lib = build(pair, tmp_path, PLANTED_ROOTED[collective])
    run = mpirun(pair.nranks, [op_matrix, collective, "--root", str(library_root(pair))], preload=lib)
    _, _, _, failures = summary(run)
    assert run.returncode != 0 and failures > 0, run.tail()
    assert failing(run) == {("none", t) for t in HOLED_PAIRS}, run.tail()
    assert re.search(rf"^FAIL coll={collective} entry=MPI_{collective.title()}(_c)? op=none type=MPI_DOUBLE_INT "
                     r"count=\d+ in_place=[01] rank=\d+: element \d+: got ", run.stderr, re.M), run.tail()  # fmt: skip
