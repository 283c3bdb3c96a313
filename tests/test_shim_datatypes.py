"""Ranks that pass different datatypes of one type signature, through every bundled bcast, allgather and
alltoall library's PMPI shim, one-p and any-p, at 3 to 8 ranks.

MPI requires only the type signatures of a collective's ranks to match: a root may broadcast 8 contiguous
``MPI_INT`` that the other ranks receive as one ``MPI_Type_vector(8, 1, 2, MPI_INT)``; an allgather may send
a matrix column and receive contiguous doubles.  A shim that decided per rank whether to take such a call
split the ranks (some on the schedule, some in PMPI) and the job hung.  Now the decision depends on the
signature's bytes only (``runtime/collc_dtype.h``), and a rank whose layout is not its packed bytes packs
into collc's work buffer.

``tests/mpi_c/datatypes.c`` runs the cases (its header lists them: seven layouts of MPI_INT, MPI_DOUBLE and
MPI_DOUBLE_INT, the same on every rank, rank-dependent, and the issue's root-contiguous / others-vector
pair and its mirror; counts 0 to 2500; bcast from two roots, allgather and alltoall in place and not) and
compares every call's whole buffer span, holes and guards included, with the PMPI collective's, byte for
byte.  Here the shim's log (``COLLC_SHIM_LOG=1``) must show every call run on the schedule on every rank
(a bcast from a root the library was not compiled for: on PMPI on every rank), so that a shim that gave up
on datatypes could not pass.  Planted bugs: the old per-rank decision (the job hangs), and a shim that
takes every layout for its packed bytes (wrong data).  ``allreduce`` mode: user-defined ops, whose ranks
agree on their datatypes, and predefined ops on derived datatypes, which MPICH refuses.

The normal suite runs each library at one rank count (one-p at 3 ranks, any-p at 5), except those of
`SLOW_ONLY`; ``-m slow`` the rest.
"""

from __future__ import annotations

import re
import subprocess
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
    examples,
    mpirun,
)

import collc
from collc.backends import mpi_c
from collc.backends.mpitools import mpi_env, mpiexec
from collc.ir import Collective

DATATYPES = HERE / "mpi_c" / "datatypes.c"
RANKS = range(3, 9)
MODE = {Collective.BROADCAST: "bcast", Collective.ALLGATHER: "allgather", Collective.ALLTOALL: "alltoall"}
MOVES = examples(*MODE)
# The fewest cases a full run of each mode makes (fewer: the program lost part of it).
MIN_CASES = {"bcast": 3 * 16 * 6 * 2, "allgather": 3 * 16 * 6 * 2, "alltoall": 3 * 16 * 6 * 2, "allreduce": 50}

# Examples whose datatypes run in the slow suite only: the normal suite moves every datatype through an allgather
# relayed around a ring (one-p and any-p), an alltoall direct (pairwise) and relayed (Bruck, Bine), and broadcast
# trees (binomial, Bine, scatter-allgather); these differ from those in their peers only, not in what the shim packs.
SLOW_ONLY = ("bine_allgather", "bruck_allgather", "direct_allgather", "hier_allgather", "node_aware_allgather",
             "pat_allgather", "recursive_doubling_allgather")  # fmt: skip
SLOW_ONLY_ANY_P = ("bine_broadcast", "bruck_alltoall", "scatter_allgather_broadcast")

SUMMARY = re.compile(r"datatypes: (\w+): (\d+) cases on (\d+) ranks, (\d+) failures")
CASE = re.compile(r"^case (\d+) (.*)$", re.M)


def _cases() -> list[object]:
    cases: list[object] = []
    for ex in MOVES:
        for p in RANKS:
            params = ex.params_at(p)
            if params is not None:
                fast = p == min(q for q in RANKS if ex.params_at(q) is not None) and ex.name not in SLOW_ONLY
                mark = () if fast else (pytest.mark.slow,)
                cases.append(pytest.param(ex, p, params, id=f"{ex.name}-p{p}", marks=mark))
            if params is not None and any_p_refusal(ex) is None and p in ANY_P_RANKS:
                fast = p == 5 and ex.name not in SLOW_ONLY + SLOW_ONLY_ANY_P
                mark = () if fast else (pytest.mark.slow,)
                cases.append(pytest.param(ex, p, None, id=f"{ex.name}-any-p{p}", marks=mark))
    return cases


@pytest.fixture(scope="module")
def datatypes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_driver(DATATYPES, tmp_path_factory.mktemp("datatypes"))


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> Libraries:
    return Libraries(tmp_path_factory.mktemp("libs"))


def summary(run: Run) -> tuple[int, int, int]:
    """(cases, ranks, failures) from the driver's last line."""
    found = SUMMARY.search(run.stdout)
    assert found is not None, "datatypes printed no summary\n" + run.tail()
    return int(found[2]), int(found[3]), int(found[4])


def run_driver(driver: Path, mode: str, p: int, lib: Path, **env: str) -> tuple[Run, list[str]]:
    """The driver in ``mode`` at p ranks through ``lib``, logged; it passed, and its listed cases."""
    run = mpirun(p, [driver, mode, "--list", "1"], preload=lib, env={"COLLC_SHIM_LOG": "1", **env})
    cases, ranks, failures = summary(run)
    assert run.returncode == 0 and failures == 0 and ranks == p, run.tail()
    assert cases >= MIN_CASES[mode], run.tail()
    listed = [text for _, text in CASE.findall(run.stdout)]
    assert len(listed) == cases, run.tail()
    return run, listed


def test_the_libraries_of_every_data_movement_example_run() -> None:
    names = {ex.name for ex in MOVES}
    assert {"binomial_broadcast", "ring_allgather", "bruck_allgather", "pairwise_alltoall", "hier_allgather"} <= names
    refused = {ex.name: why for ex in MOVES if (why := any_p_refusal(ex)) is not None}
    hierarchical = {"hier_allgather", "node_aware_allgather"}
    assert set(refused) == hierarchical and all("hierarchy" in refused[n] for n in hierarchical), refused
    assert set(SLOW_ONLY + SLOW_ONLY_ANY_P) <= names, sorted(set(SLOW_ONLY + SLOW_ONLY_ANY_P) - names)


@pytest.mark.parametrize(("example", "p", "params"), _cases())
def test_datatypes_through_the_shim(
    example: Example, p: int, params: dict | None, datatypes: Path, libraries: Libraries
) -> None:
    lib = libraries.get(example, params)
    mode = MODE[example.collective]
    run, listed = run_driver(datatypes, mode, p, lib, COLLC_TIMEOUT="120")
    outcome = assert_ranks_agree(run.stderr, p)
    assert len(outcome) == len(listed), run.tail()
    root = dict(params or {}).get("root", 0)
    for (ran, reasons), case in zip(outcome, listed, strict=True):
        other_root = mode == "bcast" and f"root={root}" not in case
        if other_root:  # the library has root 0: every rank goes to PMPI, for that reason only
            assert not ran and len(reasons) == 1 and "compiled for root" in reasons.pop(), case
        else:
            assert ran, f"{case}: went to PMPI ({reasons})"


def _patched(example: Example, p: int, out: Path, old: str, new: str) -> Path:
    """The one-p library with a runtime header edited (a planted bug)."""
    params = example.params_at(p)
    assert params is not None
    inst = collc.load(example.path).instantiate(**params)
    mpi_c.generate(inst.schedule, out)
    header = out / "collc_shim.h"
    text = header.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"collc_shim.h no longer has {old!r}"
    header.write_text(text.replace(old, new), encoding="utf-8")
    return mpi_c.build(out, inst.schedule)


DENSE = "c->dense = collc_dense(c->dt);"


def test_a_per_rank_decision_hangs_and_is_caught(datatypes: Path, tmp_path: Path) -> None:
    """The decision of the old shim (a layout that is not its packed bytes goes to PMPI, on that rank only):
    the ranks part ways and the job makes no progress, as the issue reported."""
    bcast = next(ex for ex in MOVES if ex.name == "binomial_broadcast")
    planted = DENSE + ' if (!c->dense) return collc_reason_set(COLLC_DATATYPE, "planted: a layout with holes");'
    lib = _patched(bcast, 3, tmp_path, DENSE, planted)
    command = ["timeout", "-s", "KILL", "20", str(mpiexec()), "-n", "3", "-genv", "LD_PRELOAD", str(lib)]
    proc = subprocess.run(
        [*command, str(datatypes), "bcast"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=mpi_env(3),
    )
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "0 failures" not in proc.stdout


def test_taking_every_layout_for_its_packed_bytes_is_caught(
    datatypes: Path, libraries: Libraries, tmp_path: Path
) -> None:
    gather = next(ex for ex in MOVES if ex.name == "ring_allgather")
    lib = _patched(gather, 4, tmp_path, DENSE, "c->dense = 1;")
    run = mpirun(4, [datatypes, "allgather"], preload=lib, env={"COLLC_TIMEOUT": "60"})
    cases, _, failures = summary(run)
    assert run.returncode != 0 and failures > cases // 10, run.tail()
    assert re.search(r"FAIL allgather \w+ shift \d+ count [1-9]\d* in_place [01] \(send \w+, receive (vector|spaced)",
                     run.stderr), run.tail()  # fmt: skip


ALLREDUCE = next(ex for ex in examples(Collective.ALLREDUCE) if ex.name == "ring_allreduce")


@pytest.mark.parametrize("p", [pytest.param(p, marks=() if p in (3, 6) else (pytest.mark.slow,)) for p in RANKS])
@pytest.mark.parametrize("any_p", [False, True], ids=["one-p", "any-p"])
def test_reductions_on_derived_datatypes(p: int, any_p: bool, datatypes: Path, libraries: Libraries) -> None:
    """User-defined ops on every layout: a predefined or dense datatype runs on the schedule, any other goes to PMPI,
    on every rank alike (they agree); MPI_SUM on a derived datatype goes to PMPI, which refuses it."""
    lib = libraries.get(ALLREDUCE, None if any_p else ALLREDUCE.params_at(p))
    run, listed = run_driver(datatypes, "allreduce", p, lib, COLLC_TIMEOUT="120")
    outcome = assert_ranks_agree(run.stderr, p)
    assert len(outcome) == len(listed)
    seen = set()
    for (ran, reasons), case in zip(outcome, listed, strict=True):
        found = re.fullmatch(r"allreduce (\w+) shift=(\d) count=(\d+)", case)
        assert found is not None, case
        user, layout, count = found[1] == "user", int(found[2]), int(found[3])
        if count == 0 or layout == 0 or (user and layout == 3):  # MPI_INT; a contiguous derived type
            assert ran, f"{case}: {reasons}"
        elif layout == 2 or (layout in (1, 4) and count > 1):  # spaced elements, a vector, reversed blocks
            assert not ran, case
            why = "user-defined op on datatypes" if user else "predefined op on a derived datatype"
            assert any(why in r for r in reasons), f"{case}: {reasons}"
        seen.add((user, ran))
    assert seen == {(True, True), (True, False), (False, True), (False, False)}
