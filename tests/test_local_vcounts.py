"""Counts given at run time on the local executor: allgatherv, reduce_scatter with unequal counts, alltoallv.

The schedules are the equal-block collectives' own, their chunks cut by the counts
(`collectives.counts_offsets`).  Results are compared with what the test builds itself from the counts alone:
each block at the prefix sum of the counts before it, whatever the chunks inside it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_cli import EXAMPLES, EXIT_INPUT, EXIT_OK, cli

from collc import api, collectives
from collc.backends import local
from collc.diagnostics import CollError
from collc.ir import Collective, Schedule

CASES = [
    ("ring_allgather.coll", {"k": 2}),
    ("recursive_doubling_allgather.coll", {}),
    ("bruck_allgather.coll", {}),
    ("pat_allgather.coll", {}),
    ("bine_allgather.coll", {}),
    ("ring_reduce_scatter.coll", {"k": 3}),
    ("pairwise_reduce_scatter.coll", {}),
    ("pat_reduce_scatter.coll", {}),
    ("bine_reduce_scatter.coll", {}),
    ("pairwise_alltoall.coll", {}),
    ("bruck_alltoall.coll", {}),
]
POW2_ONLY = {"recursive_doubling_allgather.coll", "bine_allgather.coll", "bine_reduce_scatter.coll"}


def _schedule(name: str, p: int, params: dict[str, int]) -> Schedule:
    return api.load(EXAMPLES / name).instantiate(p=p, **params).schedule


def _counts(rng: np.random.Generator, blocks: int) -> list[int]:
    """Unequal counts with zeros and blocks shorter than the chunks that cut them."""
    counts = rng.integers(0, 9, size=blocks)
    counts[rng.random(blocks) < 0.25] = 0
    counts[rng.integers(blocks)] = 37
    return [int(c) for c in counts]


def _run(s: Schedule, counts: list[int], inputs: np.ndarray, offsets: np.ndarray | None = None) -> np.ndarray:
    cut = local.counts_offsets(s, counts) if offsets is None else offsets
    lowered = local.plan(s, 0, offsets=cut)
    buffers = inputs.copy()
    local.execute(lowered, buffers, "sum")
    return buffers


def _wrong_blocks(s: Schedule, counts: list[int], rng: np.random.Generator, offsets: np.ndarray | None = None) -> int:
    """Blocks whose result differs from the one the test computes from the counts (each block at the prefix sum
    of the counts before it), running ``s`` with its chunks cut by ``offsets`` (default: the counts' cut)."""
    p = s.nranks
    start = np.concatenate([[0], np.cumsum(counts)])
    total = int(start[-1])
    wrong = 0
    if s.collective is Collective.REDUCE_SCATTER:
        inputs = rng.integers(-50, 50, size=(p, total)).astype(np.float64)
        out = _run(s, counts, inputs, offsets)
        want = inputs.sum(axis=0)
        for r in range(p):
            block = slice(start[r], start[r + 1])
            wrong += not np.array_equal(out[r, block], want[block])
        return wrong
    inputs = np.full((p, total), np.nan)
    owner = (lambda b: b) if s.collective is Collective.ALLGATHER else (lambda b: b // p)
    values = rng.integers(-50, 50, size=total).astype(np.float64)
    for b in range(len(counts)):
        inputs[owner(b), start[b] : start[b + 1]] = values[start[b] : start[b + 1]]
    out = _run(s, counts, inputs, offsets)
    for b in range(len(counts)):
        block = slice(start[b], start[b + 1])
        holders = range(p) if s.collective is Collective.ALLGATHER else [b % p]
        wrong += sum(not np.array_equal(out[r, block], values[block]) for r in holders)
    return wrong


@pytest.mark.parametrize(("name", "params"), CASES, ids=[c[0].removesuffix(".coll") for c in CASES])
def test_counts_match_a_reference_built_from_the_counts(name: str, params: dict[str, int]) -> None:
    rng = np.random.default_rng(7)
    for p in (2, 4, 8) if name in POW2_ONLY else (2, 3, 5, 8):
        s = _schedule(name, p, params)
        blocks = p * p if s.collective is Collective.ALLTOALL else p
        for _ in range(3):
            counts = _counts(rng, blocks)
            assert _wrong_blocks(s, counts, rng) == 0, (name, p, counts)


def test_a_wrong_cut_is_caught() -> None:
    """The reference is not the executor's own: chunks cut as if the counts were equal give wrong blocks."""
    rng = np.random.default_rng(3)
    for name in ("ring_allgather.coll", "ring_reduce_scatter.coll", "pairwise_alltoall.coll"):
        s = _schedule(name, 4, {})
        blocks = 16 if s.collective is Collective.ALLTOALL else 4
        counts = [5, 0, 9, 2] * (blocks // 4)
        total = sum(counts)
        equal = np.linspace(0, total, s.nchunks + 1).astype(np.int64)
        assert _wrong_blocks(s, counts, rng, equal) > 0, name


def test_run_with_counts_judges_the_result() -> None:
    """`local.run` with counts: 0 wrong on a verified schedule, wrong elements once its last step is gone."""
    for name in ("ring_allgather.coll", "ring_reduce_scatter.coll", "pairwise_alltoall.coll"):
        s = _schedule(name, 5, {})
        blocks = 25 if s.collective is Collective.ALLTOALL else 5
        counts = list(range(3, 3 + blocks))
        for dtype, op in (("float32", "sum"), ("int64", "max")):
            assert local.run(s, 0, dtype, op, counts=counts).wrong == 0
        broken = dataclasses.replace(s, steps=s.steps[:-1])
        assert local.run(broken, 0, "int32", "sum", counts=counts).wrong > 0, name


def test_cut_is_that_of_the_runtimes() -> None:
    """Rank r's block of counts[r] elements in k chunks, the first ones one element longer, blocks end to end
    (runtime/collc_vcoll.h's collc_vblocks)."""
    offsets = collectives.counts_offsets(Collective.ALLGATHER, 3, 9, [7, 0, 2])
    assert offsets.tolist() == [0, 3, 5, 7, 7, 7, 7, 1 + 7, 2 + 7, 2 + 7]


@pytest.mark.parametrize(
    ("name", "counts", "message"),
    [
        ("ring_allgather.coll", [1, 2], "takes p = 3 counts, got 2"),
        ("pairwise_alltoall.coll", [1, 2, 3], "takes p*p = 9"),
        ("ring_allreduce.coll", [1, 2, 3], "a allreduce has no per-rank blocks"),
        ("ring_allgather.coll", [1, -2, 3], "count 1 is -2"),
        ("weighted_striped_ring_allreduce.coll", [1, 2, 3], "chunk weights"),
    ],
)
def test_counts_that_cannot_cut_the_schedule_are_refused(name: str, counts: list[int], message: str) -> None:
    inst = api.load(EXAMPLES / name).instantiate(p=3)
    with pytest.raises(CollError, match=message.replace("*", r"\*")):
        inst.run(0, counts=counts)


def test_cli_counts() -> None:
    ok = cli("run", str(EXAMPLES / "ring_reduce_scatter.coll"), "-p", "3", "--counts", "4,0,9", "--op", "max")
    assert ok.code == EXIT_OK, ok.text
    assert "all results correct" in ok.text
    both = cli("run", str(EXAMPLES / "ring_allgather.coll"), "-p", "3", "--counts", "1,2,3", "--size", "1K")
    assert both.code == EXIT_INPUT and "not both" in both.text
    bad = cli("run", str(EXAMPLES / "ring_allgather.coll"), "-p", "3", "--counts", "1,x,3")
    assert bad.code == EXIT_INPUT and "count 1 ('x') is not an integer" in bad.text
    mpi = cli("run", str(EXAMPLES / "ring_allgather.coll"), "-p", "3", "--counts", "1,2,3", "--backend", "mpi-c")
    assert mpi.code == EXIT_INPUT and "local, cuda, mpi-cuda, not mpi-c" in mpi.text
    short = cli("run", str(EXAMPLES / "ring_allgather.coll"), "-p", "3", "--counts", "1,2")
    assert short.code == EXIT_INPUT and "takes p = 3 counts, got 2" in short.text
