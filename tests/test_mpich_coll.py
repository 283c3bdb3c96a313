"""MPICH's collective conformance cases through every bundled library's PMPI shim, one-p and any-p, at 3 to 8
ranks.

MPICH's own test sources (test/mpi/coll) are not part of this project, and the tests run offline (the
``mpich`` package on PyPI has no source distribution), so ``tests/mpi_c/conformance.c`` rewrites their cases:
allred.c's matrix of every predefined op on every type category with its inputs and exact solutions, in
place and not, every root of a reduce, reduce-scatter with equal and unequal counts (redscat.c), a
commutative user op and a non-commutative one (allred3.c, red3.c), bcast from every root of many types and
counts, a zero-size type (bcastzerotype.c), a struct (allgather_struct.c), the pair MPI_DOUBLE_INT's holes,
a contiguous root and vector receivers (bcast's DTP cases), allgather and alltoall in place and not, gather and
scatter from every root (gather.c, gather2.c, scatter2.c, scatter3.c, scattern.c) with counts 0, 1 and primes,
in place at the root and not, the root's blocks in a contiguous, vector or resized vector type and the other
ranks' in another type of the same signature (their DTP cases).  Its header lists the details.

Each run must have no failure; its only differences from the exact solution ("rounding") are floating-point
MPI_SUM and MPI_PROD, which the standard lets an algorithm round in its own order (MPICH's own algorithm
rounds float products too, at these counts: the baseline run without a library).  With
``COLLC_SHIM_EXACT=1`` (or a library generated with ``exact=True``) those pairs go to the MPI library and the
results, rounding included, are MPICH's own.  The shim's log must show the ranks agreeing on every call, most
calls run on the schedule, and every fallback for a reason the case calls for (another root, a
non-commutative op, unequal receive counts, the exact setting); a collective with a root runs every call at the
library's root on the schedule (reduce: but a non-commutative op) and hands every other root to PMPI.

The normal suite runs one library of each collective; ``-m slow`` every library at every rank count.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from shim_libs import (
    ANY_P_RANKS,
    HERE,
    Example,
    Libraries,
    Run,
    any_p_refusal,
    assert_ranks_agree,
    build_driver,
    calls_by_rank,
    examples,
    mpirun,
)

import collc
from collc.backends import mpi_c, mpi_c_anyp
from collc.ir import Collective

CONFORMANCE = HERE / "mpi_c" / "conformance.c"
RANKS = range(3, 9)
MODES = {
    Collective.ALLREDUCE: ("allreduce",),
    Collective.REDUCE: ("reduce",),
    Collective.REDUCE_SCATTER: ("reduce_scatter_block", "reduce_scatter"),
    Collective.BROADCAST: ("bcast",),
    Collective.ALLGATHER: ("allgather",),
    Collective.ALLTOALL: ("alltoall",),
    Collective.GATHER: ("gather",),
    Collective.SCATTER: ("scatter",),
}
LIBRARIES = examples(*MODES)
FLOATS = ("MPI_FLOAT", "MPI_DOUBLE", "MPI_C_FLOAT_COMPLEX", "MPI_C_DOUBLE_COMPLEX")
ORDER_SENSITIVE = {(op, t) for op in ("MPI_SUM", "MPI_PROD") for t in FLOATS}
# Why a call of each mode may go to PMPI (on every rank alike).
ALLOWED = {
    "allreduce": ("not commutative",),
    "reduce": ("not commutative", "compiled for root"),
    "reduce_scatter_block": ("not commutative",),
    "reduce_scatter": ("not commutative", "the receive counts differ"),
    "bcast": ("compiled for root",),
    "allgather": (),
    "alltoall": (),
    "gather": ("compiled for root",),
    "scatter": ("compiled for root",),
}
ROOTED = ("bcast", "reduce", "gather", "scatter")
# Representatives that the normal suite runs: (example, p, any-p).
FAST = {
    ("ring_allreduce", 5, True),
    ("swing_bw", 6, False),
    ("binomial_reduce", 3, False),
    ("ring_reduce_scatter", 4, True),
    ("binomial_broadcast", 4, False),
    ("ring_allgather", 3, False),
    ("pairwise_alltoall", 5, True),
    ("binomial_gather", 5, False),
    ("binomial_scatter", 4, True),
}

SUMMARY = re.compile(r"conformance: (\w+): (\d+) cases on (\d+) ranks, (\d+) failures, (\d+) rounding")
ROUNDING = re.compile(r"^ROUNDING (\S+) (\S+)$", re.M)
# A failed gather or scatter case: its root's view of the blocks, the others' view, count, root and in place.
ROOTED_FAIL = re.compile(
    r"^conformance: rank (\d+): FAIL (gather|scatter) (.+?)(?: to (.+?))? count (\d+) root (\d+) "
    r"in_place ([01]): (.*)$",
    re.M,
)
NOT_DENSE = {"MPI_DOUBLE_INT", "struct", "vector", "resized vector"}  # their packed bytes are not their layout


def one_p_params(ex: Example, p: int) -> dict | None:
    """The parameters of a one-p library of ``ex`` at p ranks: a gather's or scatter's root in the middle (p // 2),
    so that the root's relative ranks wrap around; the any-p libraries keep the default root."""
    params = ex.params_at(p)
    if params is not None and ex.collective in (Collective.GATHER, Collective.SCATTER):
        if "root" in collc.load(ex.path).param_names:
            params = {**params, "root": p // 2}
    return params


def _cases() -> list[object]:
    cases: list[object] = []
    for ex in LIBRARIES:
        for p in RANKS:
            for any_p in (False, True):
                if ex.params_at(p) is None:  # the constraints exclude p (the any-p library refuses it too)
                    continue
                if any_p and (any_p_refusal(ex) is not None or p not in ANY_P_RANKS):
                    continue
                params = None if any_p else one_p_params(ex, p)
                mark = () if (ex.name, p, any_p) in FAST else (pytest.mark.slow,)
                root = f"-root{params['root']}" if params and "root" in params else ""
                name = f"{ex.name}-{'any-' if any_p else ''}p{p}{root}"
                cases.append(pytest.param(ex, p, params, id=name, marks=mark))
    return cases


@pytest.fixture(scope="module")
def conformance(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_driver(CONFORMANCE, tmp_path_factory.mktemp("conformance"))


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> Libraries:
    return Libraries(tmp_path_factory.mktemp("libs"))


def summary(run: Run) -> tuple[int, int, int, int]:
    """(cases, ranks, failures, rounding) from the driver's last line."""
    found = SUMMARY.search(run.stdout)
    assert found is not None, "conformance printed no summary\n" + run.tail()
    return int(found[2]), int(found[3]), int(found[4]), int(found[5])


def compiled_root(example: Example, p: int, params: dict | None) -> int:
    """The root a library of ``example`` runs on its schedule at p ranks (-1: the collective has none); an any-p
    library (``params`` None) has the default one."""
    inst = collc.load(example.path).instantiate(**(params if params is not None else example.params_at(p) or {}))
    return inst.schedule.root if example.collective.has_root else -1


def conform(driver: Path, mode: str, p: int, lib: Path | None, root: int = -1, **env: str) -> tuple[Run, int]:
    """The driver in ``mode`` at p ranks (through ``lib``, whose schedule runs at ``root``, logged): it passed;
    its rounding differences."""
    args = [driver, mode] + ([str(root)] if root >= 0 else [])
    run = mpirun(p, args, preload=lib, env={"COLLC_SHIM_LOG": "1", "COLLC_TIMEOUT": "120", **env})
    cases, ranks, failures, rounding = summary(run)
    assert run.returncode == 0 and failures == 0 and ranks == p and cases > 50, run.tail()
    bad = set(ROUNDING.findall(run.stderr)) - ORDER_SENSITIVE
    assert not bad, f"rounding differences outside floating-point sums and products: {sorted(bad)}\n" + run.tail()
    return run, rounding


_BASELINE: dict[tuple[str, int], int] = {}


def baseline(driver: Path, mode: str, p: int) -> int:
    """The rounding differences of MPICH's own algorithm (no library), once per (mode, p)."""
    if (mode, p) not in _BASELINE:
        _BASELINE[(mode, p)] = conform(driver, mode, p, None)[1]
    return _BASELINE[(mode, p)]


def check_log(run: Run, mode: str, p: int, algorithm: str, *, exact: bool = False, root: int = -1) -> int:
    """Every call taken alike by the ranks; fallbacks only for the mode's reasons; with the library's ``root``,
    every call at another root handed to PMPI for it and none at that root (gather, scatter, bcast: each of those
    ran on the schedule); returns the calls run on the schedule (per rank)."""
    outcome = assert_ranks_agree(run.stderr, p)
    if root >= 0:
        for call in calls_by_rank(run.stderr)[0]:
            at = re.search(r" root=(\d+)$", call.text)
            assert at is not None, f"{mode}: a call logged without its root: {call.entry} {call.text}"
            where = f"{mode}: {call.entry} {call.text} on a library of root {root}: {call.fallback or 'schedule'}"
            if int(at[1]) != root:
                assert call.fallback is not None and "compiled for root" in call.fallback, where
            elif mode != "reduce":
                assert call.fallback is None, where
            else:
                assert call.fallback is None or "compiled for root" not in call.fallback, where
    allowed = ALLOWED[mode] + (("COLLC_SHIM_EXACT",) if exact else ())
    ran = sum(1 for r, _ in outcome if r)
    for _, reasons in outcome:
        for why in reasons:
            assert any(a in why for a in allowed), f"{mode}: a call went to PMPI: {why}"
    assert algorithm in run.stderr
    rooted = mode in ROOTED  # every root: the library's one on the schedule
    assert ran > len(outcome) // (p + 1 if rooted else 2), f"{ran} of {len(outcome)} calls ran on the schedule"
    return ran


def test_every_library_of_the_eight_collectives_runs() -> None:
    names = {ex.name for ex in LIBRARIES}
    assert {"binomial_gather", "binomial_scatter"} <= names
    assert {"ring_allreduce", "binomial_reduce", "ring_reduce_scatter", "binomial_broadcast", "ring_allgather"} <= names
    assert {"pairwise_alltoall", "bucket_torus", "hier_allreduce_ring", "swing_bw", "bruck_allgather"} <= names
    assert {name for name, _, _ in FAST} <= names
    for ex in LIBRARIES:  # the any-p refusals: the constructs docs/mpi.md names
        why = any_p_refusal(ex)
        assert why is None or "hierarchy" in why or "needs p as a parameter" in why, (ex.name, why)


@pytest.mark.parametrize(("example", "p", "params"), _cases())
def test_conformance_through_the_shim(
    example: Example, p: int, params: dict | None, conformance: Path, libraries: Libraries
) -> None:
    lib = libraries.get(example, params)
    root = compiled_root(example, p, params)
    for mode in MODES[example.collective]:
        run, _ = conform(conformance, mode, p, lib, root)
        check_log(run, mode, p, example.name, root=root)
        if mode == "reduce_scatter":  # equal counts ran as MPI_Reduce_scatter_block does
            assert re.search(rf"^collc: MPI_Reduce_scatter {example.name} p={p} rank 0 count=\d+ \S+ MPI_SUM$",
                             run.stderr, re.M), run.tail()  # fmt: skip


@pytest.mark.parametrize(
    "example", [pytest.param(ex, id=ex.name) for ex in LIBRARIES if ex.name in ("binomial_gather", "binomial_scatter")]
)
def test_gather_and_scatter_under_the_shims_self_check(
    example: Example, conformance: Path, libraries: Libraries
) -> None:
    """COLLC_SHIM_CHECK=1 (the normal suite's libraries): each call at the library's root runs the PMPI collective
    too and compares; every rank takes part in the check, the root in place included, and the cases pass."""
    p, any_p = next((p, any_p) for name, p, any_p in FAST if name == example.name)
    params = None if any_p else one_p_params(example, p)
    root = compiled_root(example, p, params)
    mode = MODES[example.collective][0]
    run, _ = conform(conformance, mode, p, libraries.get(example, params), root, COLLC_SHIM_CHECK="1")
    check_log(run, mode, p, example.name, root=root)


EXACT_LIBS = [ex for ex in LIBRARIES if ex.name in ("ring_allreduce", "swing_bw", "ring_reduce_scatter")]


@pytest.mark.parametrize(
    ("example", "p"),
    [
        pytest.param(
            ex, p, id=f"{ex.name}-p{p}", marks=() if (ex.name, p) == ("ring_allreduce", 5) else (pytest.mark.slow,)
        )
        for ex in EXACT_LIBS
        for p in RANKS
    ],
)
def test_exact_hands_floating_point_sums_and_products_to_pmpi(
    example: Example, p: int, conformance: Path, libraries: Libraries
) -> None:
    """COLLC_SHIM_EXACT=1 on an any-p library, and a one-p library generated with exact=True: the floating-point
    sums and products are MPICH's own, rounding and all; COLLC_SHIM_EXACT=0 runs them on the schedule again."""
    mode = MODES[example.collective][0]
    if any_p_refusal(example) is None:
        run, rounding = conform(conformance, mode, p, libraries.get(example, None), COLLC_SHIM_EXACT="1")
        check_log(run, mode, p, example.name, exact=True)
        assert rounding == baseline(conformance, mode, p), run.tail()
    params = example.params_at(p)
    if params is None:
        return
    lib = libraries.get(example, params, exact=True)
    run, rounding = conform(conformance, mode, p, lib)
    check_log(run, mode, p, example.name, exact=True)
    assert rounding == baseline(conformance, mode, p), run.tail()
    assert re.search(r"-> PMPI fallback \(COLLC_SHIM_EXACT: a floating-point MPI_PROD", run.stderr), run.tail()
    run, _ = conform(conformance, mode, p, lib, COLLC_SHIM_EXACT="0")
    assert "COLLC_SHIM_EXACT" not in run.stderr
    check_log(run, mode, p, example.name)


def test_exact_is_generated_into_both_kinds_of_library(tmp_path: Path) -> None:
    alg = collc.load(HERE.parent / "examples" / "ring_allreduce.coll")
    define = "#define COLLC_DEFAULT_EXACT 1"
    for exact in (False, True):
        out = tmp_path / f"one-{exact}"
        mpi_c.generate(alg.instantiate(p=4).schedule, out, exact=exact)
        assert (define in (out / "collc_ring_allreduce.c").read_text()) == exact
        out = tmp_path / f"any-{exact}"
        coverage = mpi_c_anyp.Coverage.of_sizes(range(1, 9), range(1, 9))
        mpi_c_anyp.generate(alg.program, out, {}, coverage, exact=exact)
        assert (define in (out / "collc_ring_allreduce.c").read_text()) == exact


def test_conformance_catches_a_wrong_reduction(conformance: Path, tmp_path: Path) -> None:
    """A library whose PMPI_Reduce_local fallback is one element short: the pairs without an inline loop fail."""
    inst = collc.load(HERE.parent / "examples" / "ring_allreduce.coll").instantiate(p=4)
    mpi_c.generate(inst.schedule, tmp_path)
    header = tmp_path / "collc_reduce.h"
    old = "return PMPI_Reduce_local_c(src, dst, n, dt, op);"
    text = header.read_text(encoding="utf-8")
    assert text.count(old) == 1
    header.write_text(text.replace(old, old.replace("n, dt", "n - 1, dt")), encoding="utf-8")
    lib = mpi_c.build(tmp_path, inst.schedule)
    run = mpirun(4, [conformance, "allreduce"], preload=lib, env={"COLLC_TIMEOUT": "120"})
    _, _, failures, _ = summary(run)
    assert run.returncode != 0 and failures > 0, run.tail()
    assert re.search(r"FAIL allreduce count \d+ in_place [01] root 0 MPI_(MAXLOC|MINLOC|LAND|BXOR) ", run.stderr)


# An element short in the unpacking of a gather's or scatter's blocks (a datatype whose packed bytes are its
# layout is copied whole, so only the others show it): the file, the code, the planted bug.
SHORT_UNPACK = {
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


@pytest.mark.parametrize("mode", sorted(SHORT_UNPACK))
def test_conformance_catches_a_block_unpacked_one_element_short(mode: str, conformance: Path, tmp_path: Path) -> None:
    """A library of root 1 at 4 ranks that leaves the last element of the result unpacked: every case at root 1 whose
    result lies in a datatype that is not dense fails (gather: the root's blocks; scatter: each rank's block, not
    at a root in place), named by its datatypes, count and root; no other case does."""
    p, root = 4, 1
    inst = collc.load(HERE.parent / "examples" / f"binomial_{mode}.coll").instantiate(p=p, root=root)
    mpi_c.generate(inst.schedule, tmp_path)
    header, old, new = SHORT_UNPACK[mode]
    text = (tmp_path / header).read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{header} no longer has {old!r}"
    (tmp_path / header).write_text(text.replace(old, new), encoding="utf-8")
    lib = mpi_c.build(tmp_path, inst.schedule)
    run = mpirun(p, [conformance, mode, str(root)], preload=lib, env={"COLLC_TIMEOUT": "120"})
    _, _, failures, _ = summary(run)
    assert run.returncode != 0 and failures > 0, run.tail()
    fails = ROOTED_FAIL.findall(run.stderr)
    assert len(fails) == failures == run.stderr.count(": FAIL "), run.tail()
    results: set[str] = set()
    for rank, coll, at_root, own, count, at, in_place, why in fails:
        result = at_root if mode == "gather" else own or at_root
        assert coll == mode and int(at) == root and int(count) > 0 and why.startswith("wrong data"), run.tail()
        assert result in NOT_DENSE, f"a dense result failed: {run.tail()}"
        assert mode == "scatter" or int(rank) == root, run.tail()
        assert mode == "gather" or not (int(rank) == root and in_place == "1"), run.tail()
        results.add(result)
    assert results == NOT_DENSE, sorted(results)
