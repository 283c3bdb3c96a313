"""MPICH's collective conformance cases through every bundled library's PMPI shim, one-p and any-p, at 3 to 8
ranks.

MPICH's own test sources (test/mpi/coll) are not part of this project, and the tests run offline (the
``mpich`` package on PyPI has no source distribution), so ``tests/mpi_c/conformance.c`` rewrites their cases:
allred.c's matrix of every predefined op on every type category with its inputs and exact solutions, in
place and not, every root of a reduce, the same matrix for scan and exscan (scantst.c, exscan.c, exscan2.c;
an exscan's rank 0 unchecked), reduce-scatter with equal and unequal counts, zeros included (redscat.c,
redscat2.c, redscat3.c), a commutative user op and a non-commutative one (allred3.c, red3.c), bcast from every
root of many types and counts, a zero-size type (bcastzerotype.c), a struct (allgather_struct.c), the pair
MPI_DOUBLE_INT's holes, a contiguous root and vector receivers (bcast's DTP cases), allgather and alltoall in
place and not, allgatherv and alltoallv with uneven counts, zeros, displacements with gaps and out of rank
order, in place and not (allgatherv2.c, allgatherv3.c, allgatherv4.c, alltoallv.c, alltoallv0.c), gather and
scatter from every root (gather.c, gather2.c, scatter2.c, scatter3.c, scattern.c) with counts 0, 1 and primes,
in place at the root and not, the root's blocks in a contiguous, vector or resized vector type and the other
ranks' in another type of the same signature (their DTP cases), and barriers that ranks reach at different
times, many in a row, on duplicated and split communicators.  Its header lists the details.

Each run must have no failure; its only differences from the exact solution ("rounding") are floating-point
MPI_SUM and MPI_PROD, which the standard lets an algorithm round in its own order (MPICH's own algorithm
rounds float products too, at these counts: the baseline run without a library).  With
``COLLC_SHIM_EXACT=1`` (or a library generated with ``exact=True``) those pairs go to the MPI library and the
results, rounding included, are MPICH's own.  The shim's log must show every call the driver made, the ranks
agreeing on each, most run on the schedule, and every fallback for a reason the case calls for (another root,
a non-commutative op: as many as the driver made, the exact setting; a barrier on a smaller communicator
with a one-p library); calls with unequal counts run on the schedule; a collective with a root runs every call
at the library's root on the schedule (reduce: but a non-commutative op) and hands every other root to PMPI.

The normal suite runs one library of each collective; ``-m slow`` every library at every rank count.  Planted
runtime bugs show the cases catch what they should (a reduction, gather's and scatter's unpacking,
allgatherv's displacements, alltoallv in place, a scan's result copy).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from shim_libs import (
    ANY_P_RANKS,
    HERE,
    LOGGED,
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
from test_shim_ops import PLANTED_ROOTED

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
    Collective.ALLGATHER: ("allgather", "allgatherv"),
    Collective.ALLTOALL: ("alltoall", "alltoallv"),
    Collective.GATHER: ("gather",),
    Collective.SCATTER: ("scatter",),
    Collective.SCAN: ("scan",),
    Collective.EXSCAN: ("exscan",),
    Collective.BARRIER: ("barrier",),
}
LIBRARIES = examples(*MODES)
FLOATS = ("MPI_FLOAT", "MPI_DOUBLE", "MPI_C_FLOAT_COMPLEX", "MPI_C_DOUBLE_COMPLEX")
ORDER_SENSITIVE = {(op, t) for op in ("MPI_SUM", "MPI_PROD") for t in FLOATS}
# Why a call of each mode may go to PMPI (on every rank alike); unequal counts (allgatherv, alltoallv,
# reduce_scatter) run on the schedule.
ALLOWED = {
    "allreduce": ("not commutative",),
    "reduce": ("not commutative", "compiled for root"),
    "reduce_scatter_block": ("not commutative",),
    "reduce_scatter": ("not commutative",),
    "bcast": ("compiled for root",),
    "allgather": (),
    "allgatherv": (),
    "alltoall": (),
    "alltoallv": (),
    "gather": ("compiled for root",),
    "scatter": ("compiled for root",),
    "scan": ("not commutative",),
    "exscan": ("not commutative",),
    "barrier": ("communicator of size",),  # a one-p library on a sub-communicator
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
    ("hillis_steele_scan", 4, True),
    ("hillis_steele_exscan", 3, False),
    ("dissemination_barrier", 4, True),
}

SUMMARY = re.compile(r"conformance: (\w+): (\d+) cases on (\d+) ranks, (\d+) failures, (\d+) rounding")
# The driver's interposed calls per rank and those of a non-commutative op (every mode but barrier) ...
CALLS = re.compile(r"^conformance: \w+: (\d+) interposed calls per rank, (\d+) of a non-commutative op$", re.M)
# ... and a barrier's calls, all ranks' together, on communicators of P ranks and on smaller ones.
BARRIERS = re.compile(r"^conformance: barrier: (\d+) calls on communicators of \d+ ranks, (\d+) on smaller ones$", re.M)
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


def untracked_fallbacks(run: Run) -> list[str]:
    """The fallback lines of the log that do not name their call (rank, count, datatype): a call logged as run and
    then handed to PMPI after all."""
    return [line for line in run.stderr.splitlines() if "-> PMPI fallback" in line and not LOGGED.match(line)]


def check_barrier_log(run: Run, algorithm: str, any_p: bool) -> None:
    """Every MPI_Barrier call logged: those on communicators of P ranks ran on the schedule; those on smaller ones
    too with an any-p library, and went to PMPI for their size with a one-p library.  (Their log lines carry the
    ranks of sub-communicators, so the calls are counted over all ranks, not matched rank by rank.)"""
    found = BARRIERS.search(run.stdout)
    assert found is not None, "conformance printed no barrier tally\n" + run.tail()
    full, smaller = int(found[1]), int(found[2])
    calls = [call for rank_calls in calls_by_rank(run.stderr).values() for call in rank_calls]
    assert {call.entry for call in calls} == {"MPI_Barrier"}, {call.entry for call in calls}
    assert not untracked_fallbacks(run), untracked_fallbacks(run)[:3]
    assert all(call.algorithm == algorithm for call in calls), run.tail()
    fallbacks = [call.fallback for call in calls if call.fallback is not None]
    for why in fallbacks:
        assert not any_p and "communicator of size" in why, f"barrier: a call went to PMPI: {why}"
    assert len(calls) == full + smaller, f"barrier: {len(calls)} calls logged, the ranks made {full + smaller}"
    assert len(fallbacks) == (0 if any_p else smaller), f"barrier: {len(fallbacks)} of {len(calls)} calls went to PMPI"


def check_log(run: Run, mode: str, p: int, algorithm: str, *, exact: bool = False, root: int = -1) -> int:
    """Every call taken alike by the ranks and logged (as many as the driver made); fallbacks only for the mode's
    reasons, and a non-commutative op's only for the calls that have one (all of them off a rooted collective's
    root); with the library's ``root``, every call at another root handed to PMPI for it and none at that root
    (gather, scatter, bcast: each of those ran on the schedule); returns the calls run on the schedule (per rank)."""
    outcome = assert_ranks_agree(run.stderr, p)
    made = CALLS.search(run.stdout)
    assert made is not None, "conformance printed no tally of its calls\n" + run.tail()
    assert len(outcome) == int(made[1]), f"{mode}: {len(outcome)} calls logged per rank, the driver made {made[1]}"
    assert not untracked_fallbacks(run), f"{mode}: {untracked_fallbacks(run)[:3]}"
    noncommutative = sum(1 for _, reasons in outcome if any("not commutative" in why for why in reasons))
    if mode in ROOTED:
        assert noncommutative <= int(made[2]), f"{mode}: {noncommutative} calls fell back as not commutative"
    else:
        assert noncommutative == int(made[2]), (
            f"{mode}: {noncommutative} calls fell back as not commutative, {made[2]} have such an op"
        )
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


def test_every_library_of_the_eleven_collectives_runs() -> None:
    names = {ex.name for ex in LIBRARIES}
    assert {"binomial_gather", "binomial_scatter"} <= names
    assert {"ring_allreduce", "binomial_reduce", "ring_reduce_scatter", "binomial_broadcast", "ring_allgather"} <= names
    assert {"pairwise_alltoall", "bucket_torus", "hier_allreduce_ring", "swing_bw", "bruck_allgather"} <= names
    assert {"hillis_steele_scan", "hillis_steele_exscan", "dissemination_barrier"} <= names
    assert {name for name, _, _ in FAST} <= names
    assert {mode for ex in LIBRARIES for mode in MODES[ex.collective]} == set(ALLOWED)
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
        if mode == "barrier":
            check_barrier_log(run, example.name, params is None)
            continue
        check_log(run, mode, p, example.name, root=root)
        if mode == "reduce_scatter":  # equal and unequal counts ran, MPI_Reduce_scatter_c's too
            for entry in ("MPI_Reduce_scatter", "MPI_Reduce_scatter_c"):
                assert re.search(rf"^collc: {entry} {example.name} p={p} rank 0 count=\d+ \S+ MPI_SUM$",
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
# layout is copied whole, so only the others show it): the bugs the datatype matrix plants too.
SHORT_UNPACK = PLANTED_ROOTED


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


# A failed allgatherv or alltoallv case: its datatype, count, counts, layout and in place.
V_FAIL = re.compile(
    r"^conformance: rank (\d+): FAIL (allgatherv|alltoallv) (\S+) count (\d+) \((.+?) counts, layout (\d)\) "
    r"in_place ([01]): (.*)$",
    re.M,
)
# A failed scan case of the op matrix: count, in place, op and datatype.
SCAN_FAIL = re.compile(
    r"^conformance: rank (\d+): FAIL scan count (\d+) in_place ([01]) root 0 (\S+) (\S+) element ", re.M
)
HOLED = {"MPI_DOUBLE_INT", "MPI_LONG_INT", "MPI_SHORT_INT"}  # the pairs whose size is below their extent

# Planted runtime bugs of the counts given at run time and of the scans: the example, the file, the code, the bug.
PLANTED_V = {
    # MPI_Allgatherv: block r unpacked at displs[r] elements of the type's size, not of its extent.
    "allgatherv": (
        "ring_allgather",
        "collc_vcoll.h",
        "(char *)recvbuf + collc_displ_at(displs, displs_c, r) * c.dt_extent, n, recvtype,",
        "(char *)recvbuf + collc_displ_at(displs, displs_c, r) * (MPI_Aint)c.type_size, n, recvtype,",
    ),
    # MPI_Alltoallv in place: the blocks to send taken at sdispls, which MPI ignores then, not at rdispls.
    "alltoallv": (
        "pairwise_alltoall",
        "collc_vcoll.h",
        "const MPI_Aint at = in_place ? collc_displ_at(rd, rd_c, d) : collc_displ_at(sd, sd_c, d);",
        "const MPI_Aint at = collc_displ_at(sd, sd_c, d);",
    ),
    # MPI_Scan: the result copied to a receive buffer with holes one element short.
    "scan": (
        "hillis_steele_scan",
        "collc_coll.h",
        "collc_copy_data(&c, (char *)recvbuf, work, count);\n    }\n    if (ref != NULL) {\n"
        "        if (err == MPI_SUCCESS && !(reach",
        "collc_copy_data(&c, (char *)recvbuf, work, count - 1);\n    }\n    if (ref != NULL) {\n"
        "        if (err == MPI_SUCCESS && !(reach",
    ),
}


@pytest.mark.parametrize("mode", sorted(PLANTED_V))
def test_conformance_catches_a_planted_bug_of_the_new_collectives(mode: str, conformance: Path, tmp_path: Path) -> None:
    """A library at 4 ranks with a planted bug: exactly the cases it should break fail, each named.  allgatherv:
    the datatypes whose size is below their extent (the pair, the struct) where the blocks hold data, but not in
    MPI_Allgather's layout (equal counts end to end); alltoallv: the in-place cases whose blocks lie apart (layouts 1
    and 2) at a nonzero count, every datatype with bytes; scan: MINLOC and MAXLOC on the pairs with holes at a
    nonzero count, in place and not."""
    p = 4
    name, header, old, new = PLANTED_V[mode]
    inst = collc.load(HERE.parent / "examples" / f"{name}.coll").instantiate(p=p)
    mpi_c.generate(inst.schedule, tmp_path)
    text = (tmp_path / header).read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{header} no longer has {old!r}"
    (tmp_path / header).write_text(text.replace(old, new), encoding="utf-8")
    lib = mpi_c.build(tmp_path, inst.schedule)
    run = mpirun(p, [conformance, mode], preload=lib, env={"COLLC_TIMEOUT": "120"})
    _, _, failures, _ = summary(run)
    assert run.returncode != 0 and failures > 0, run.tail()
    if mode == "scan":
        fails = SCAN_FAIL.findall(run.stderr)
        assert len(fails) == failures == run.stderr.count(": FAIL "), run.tail()
        assert {(op, t) for _, _, _, op, t in fails} == {(op, t) for op in ("MPI_MAXLOC", "MPI_MINLOC") for t in HOLED}
        assert all(int(count) > 0 for _, count, _, _, _ in fails), run.tail()
        assert {in_place for _, _, in_place, _, _ in fails} == {"0", "1"}, run.tail()
        return
    fails = V_FAIL.findall(run.stderr)
    assert len(fails) == failures == run.stderr.count(": FAIL "), run.tail()
    for _, coll, dtype, count, counts, layout, in_place, why in fails:
        some = int(count) > 0 or counts == "odd ranks none"  # the blocks hold data (m + r on the even ranks)
        assert coll == mode and some, run.tail()
        if mode == "allgatherv":  # the blocks land early: wrong data, and data in the gaps
            assert dtype in ("MPI_DOUBLE_INT", "struct"), run.tail()
            assert (counts, layout) != ("equal", "0"), run.tail()  # MPI_Allgather's layout: its own path
            assert why.startswith(("wrong data", "wrote the receive buffer outside the blocks")), run.tail()
        else:
            assert in_place == "1" and layout in ("1", "2") and why.startswith("wrong data"), run.tail()
    if mode == "allgatherv":
        assert {f[2] for f in fails} == {"MPI_DOUBLE_INT", "struct"}, sorted({f[2] for f in fails})
    else:
        assert {f[2] for f in fails} == {"MPI_INT", "MPI_DOUBLE", "MPI_CHAR", "MPI_DOUBLE_INT", "struct"}
