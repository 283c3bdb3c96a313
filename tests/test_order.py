"""Whether every rank gets the same bits of a floating-point allreduce (collc.backends.order), against the
local executor run on inputs that expose the order of the additions (a large value, its negation and small
ones, as MPICH's coll/allred_float has them): where the analysis says the ranks agree, every rank's float32
result is the same, bit for bit, for every placement of the large pair; where it says they do not, some
placement makes two ranks differ.  Through the PMPI shim (tests/mpi_c/same_bits.c): a library whose ranks
combine in different orders hands floating-point sums to the MPI library, so that every rank gets the same
bits."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from shim_libs import HERE, Libraries, build_driver, examples, mpirun

import collc
from collc.backends.local_plan import execute, plan
from collc.backends.order import mixed_orders
from collc.ir import Collective, Schedule

COUNT_PER_CHUNK = 2


def _disagree(schedule: Schedule) -> bool:
    """Whether some placement of (1e6, -1e6) among ranks holding 1e-2 gives two ranks different bits."""
    p, n = schedule.nranks, schedule.nchunks
    count = n * COUNT_PER_CHUNK
    lowered = plan(schedule, count)
    for a, b in itertools.permutations(range(p), 2):
        buffers = np.full((p, count), 1e-2, dtype=np.float32)
        buffers[a], buffers[b] = 1e6, -1e6
        execute(lowered, buffers, "sum")
        if not (buffers.view(np.uint32) == buffers[0].view(np.uint32)).all():
            return True
    return False


CASES = [(name, p) for name in ("swing_lat", "recursive_doubling_any", "ring_allreduce", "rabenseifner", "swing_bw")
         for p in range(3, 11)] + [("recursive_doubling", p) for p in (2, 4, 8, 16)]  # fmt: skip


@pytest.mark.parametrize(("name", "p"), CASES, ids=[f"{n}-p{p}" for n, p in CASES])
def test_the_analysis_agrees_with_the_executor(name: str, p: int) -> None:
    schedule = collc.load(name).instantiate(p=p).schedule
    reason = mixed_orders(schedule)
    assert _disagree(schedule) == (reason is not None), reason


def test_latency_optimal_swing_is_mixed_from_eight_ranks_and_says_where() -> None:
    alg = collc.load("swing_lat")
    assert [p for p in range(2, 17) if mixed_orders(alg.instantiate(p=p).schedule)] == list(range(8, 17))
    reason = mixed_orders(alg.instantiate(p=8).schedule)
    assert reason is not None and "chunk 0" in reason and "different orders" in reason


@pytest.fixture(scope="module")
def same_bits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_driver(HERE / "mpi_c" / "same_bits.c", tmp_path_factory.mktemp("same_bits"))


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> Libraries:
    return Libraries(tmp_path_factory.mktemp("libs"))


@pytest.mark.parametrize("kind", ["one-p", "any-p"])
def test_a_library_whose_ranks_combine_in_other_orders_hands_float_sums_to_pmpi(
    kind: str, same_bits: Path, libraries: Libraries
) -> None:
    """swing_lat at 8 ranks: every rank gets the same bits because its floating-point sums go to PMPI, saying
    why; with COLLC_SHIM_EXACT=0 they run on the schedule and the ranks' bits differ (the reason it must);
    at 6 ranks, where its ranks combine in one order, they run on the schedule."""
    ex = next(e for e in examples(Collective.ALLREDUCE) if e.name == "swing_lat")
    lib = libraries.get(ex, {"p": 8} if kind == "one-p" else None)
    run = mpirun(8, [same_bits], preload=lib, env={"COLLC_SHIM_LOG": "1"})
    assert run.returncode == 0 and "same bits" in run.stdout, run.tail()
    assert "-> PMPI fallback (a floating-point MPI_SUM:" in run.stderr and "different orders" in run.stderr
    run = mpirun(8, [same_bits], preload=lib, env={"COLLC_SHIM_EXACT": "0"})
    assert run.returncode != 0 and "differs from rank 0's" in run.stdout, run.tail()
    if kind == "any-p":
        run = mpirun(6, [same_bits], preload=lib, env={"COLLC_SHIM_LOG": "1"})
        assert run.returncode == 0 and "same bits" in run.stdout, run.tail()
        assert "PMPI fallback" not in run.stderr, run.tail()


def test_a_ring_runs_float_sums_on_the_schedule_with_the_same_bits(same_bits: Path, libraries: Libraries) -> None:
    ex = next(e for e in examples(Collective.ALLREDUCE) if e.name == "ring_allreduce")
    for lib in (libraries.get(ex, {"p": 8}), libraries.get(ex, None)):
        run = mpirun(8, [same_bits], preload=lib, env={"COLLC_SHIM_LOG": "1"})
        assert run.returncode == 0 and "same bits" in run.stdout, run.tail()
        assert "PMPI fallback" not in run.stderr, run.tail()
