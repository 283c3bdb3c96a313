"""The local (numpy) executor: reference semantics of a Schedule, checked against numpy."""

from __future__ import annotations

import dataclasses
import importlib
import re
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli import EXAMPLES, EXIT_WRONG, REPO, cli

import collc
from collc import api, collectives
from collc.backends import local
from collc.backends.local import DTYPES, OPS, count_wrong, execute, expected, make_inputs, plan, run
from collc.diagnostics import CollError
from collc.elaborate import elaborate
from collc.frontend.program import parse_program
from collc.ir import UNKNOWN_SPAN, Action, ChunkSet, Collective, Op, OpKind, Schedule, Step
from collc.verify.check import check

# --------------------------------------------------------------------------
# Schedules built by hand
# --------------------------------------------------------------------------

COPY, REDUCE = Action.COPY, Action.REDUCE


def send(rank: int, peer: int, chunks: Iterable[int]) -> Op:
    return Op(rank, OpKind.SEND, peer, ChunkSet.of(chunks), None, UNKNOWN_SPAN)


def recv(rank: int, peer: int, chunks: Iterable[int], action: Action) -> Op:
    return Op(rank, OpKind.RECV, peer, ChunkSet.of(chunks), action, UNKNOWN_SPAN)


def xfer(src: int, dst: int, chunks: Iterable[int], action: Action) -> list[Op]:
    ids = list(chunks)
    return [send(src, dst, ids), recv(dst, src, ids, action)]


def make_schedule(
    name: str,
    collective: Collective,
    p: int,
    nchunks: int,
    steps: list[list[Op]],
    root: int | None = None,
) -> Schedule:
    return Schedule(
        algorithm=name,
        collective=collective,
        params=(("p", p),),
        nranks=p,
        nchunks=nchunks,
        root=root,
        steps=tuple(Step(i, "main", tuple(ops)) for i, ops in enumerate(steps)),
        source="<test>",
        span=UNKNOWN_SPAN,
    )


def block(b: int, k: int) -> range:
    return range(b * k, (b + 1) * k)


def ring_steps(p: int, k: int, first: int, action: Action, nsteps: int) -> list[list[Op]]:
    """Step s: rank r sends block (r + first - s) to r+1, which applies ``action``."""
    steps = []
    for s in range(nsteps):
        ops: list[Op] = []
        for r in range(p):
            ops += xfer(r, (r + 1) % p, block((r + first - s) % p, k), action)
        steps.append(ops)
    return steps


def ring_allreduce(p: int, k: int = 1) -> Schedule:
    steps = ring_steps(p, k, 0, REDUCE, p - 1) + ring_steps(p, k, 1, COPY, p - 1)
    return make_schedule("ring_allreduce", Collective.ALLREDUCE, p, p * k, steps)


def ring_allgather(p: int, k: int = 1) -> Schedule:
    return make_schedule("ring_allgather", Collective.ALLGATHER, p, p * k, ring_steps(p, k, 0, COPY, p - 1))


def ring_reduce_scatter(p: int, k: int = 1) -> Schedule:
    steps = ring_steps(p, k, -1, REDUCE, p - 1)
    return make_schedule("ring_reduce_scatter", Collective.REDUCE_SCATTER, p, p * k, steps)


def binomial_broadcast(p: int, root: int, nchunks: int) -> Schedule:
    steps = []
    for s in range((p - 1).bit_length()):
        ops: list[Op] = []
        for v in range(min(1 << s, p - (1 << s))):
            ops += xfer((v + root) % p, (v + (1 << s) + root) % p, range(nchunks), COPY)
        steps.append(ops)
    return make_schedule("binomial_broadcast", Collective.BROADCAST, p, nchunks, steps, root)


def binomial_reduce(p: int, root: int, nchunks: int) -> Schedule:
    steps = []
    for s in range((p - 1).bit_length()):
        ops: list[Op] = []
        for v in range(1 << s, p, 1 << (s + 1)):
            ops += xfer((v + root) % p, (v - (1 << s) + root) % p, range(nchunks), REDUCE)
        steps.append(ops)
    return make_schedule("binomial_reduce", Collective.REDUCE, p, nchunks, steps, root)


def pairwise_alltoall(p: int, k: int = 1) -> Schedule:
    steps = []
    for s in range(1, p):
        ops: list[Op] = []
        for r in range(p):
            ops += xfer(r, (r + s) % p, block(r * p + (r + s) % p, k), COPY)
        steps.append(ops)
    return make_schedule("pairwise_alltoall", Collective.ALLTOALL, p, p * p * k, steps)


def recursive_doubling(p: int, nchunks: int = 1) -> Schedule:
    steps = []
    for s in range(p.bit_length() - 1):
        ops: list[Op] = []
        for r in range(p):
            ops += [send(r, r ^ (1 << s), range(nchunks)), recv(r, r ^ (1 << s), range(nchunks), REDUCE)]
        steps.append(ops)
    return make_schedule("recursive_doubling", Collective.ALLREDUCE, p, nchunks, steps)


def with_action(schedule: Schedule, step: int, action: Action) -> Schedule:
    """``schedule`` with every receive of ``step`` turned into ``action``."""
    old = schedule.steps[step]
    ops = tuple(dataclasses.replace(o, action=action) if o.kind is OpKind.RECV else o for o in old.ops)
    steps = list(schedule.steps)
    steps[step] = dataclasses.replace(old, ops=ops)
    return dataclasses.replace(schedule, steps=tuple(steps))


def without_step(schedule: Schedule, step: int) -> Schedule:
    return dataclasses.replace(schedule, steps=schedule.steps[:step] + schedule.steps[step + 1 :])


# --------------------------------------------------------------------------
# Results against the numpy reference, every dtype and op
# --------------------------------------------------------------------------


def counts_for(nchunks: int, unit: int = 1) -> list[int]:
    """0, fewer elements than chunks, a multiple of nchunks, and sizes that do not divide."""
    return sorted({0, unit, unit * max(nchunks - 1, 1), unit * nchunks, unit * (3 * nchunks + 1), unit * 37})


def check_all(schedule: Schedule, counts: list[int]) -> None:
    for count in counts:
        for dtype in DTYPES:
            for op in OPS:
                result = run(schedule, count, dtype, op, seed=count)
                assert result.wrong == 0, (schedule.algorithm, schedule.nranks, count, dtype, op)


@pytest.mark.parametrize("p", range(2, 10))
def test_ring_allreduce(p: int) -> None:
    check_all(ring_allreduce(p), counts_for(p))


@pytest.mark.parametrize("p", [3, 4])
def test_ring_allreduce_two_chunks_per_rank(p: int) -> None:
    check_all(ring_allreduce(p, 2), counts_for(2 * p))


@pytest.mark.parametrize(("p", "k"), [(2, 1), (3, 2), (5, 1), (4, 3)])
def test_ring_allgather(p: int, k: int) -> None:
    check_all(ring_allgather(p, k), counts_for(p * k))


@pytest.mark.parametrize(("p", "k"), [(2, 1), (2, 2), (4, 1), (4, 2), (5, 1), (5, 2)])
def test_ring_reduce_scatter(p: int, k: int) -> None:
    check_all(ring_reduce_scatter(p, k), counts_for(p * k))


@pytest.mark.parametrize(("p", "root"), [(2, 1), (5, 2), (7, 6), (8, 3)])
def test_binomial_broadcast(p: int, root: int) -> None:
    check_all(binomial_broadcast(p, root, 3), counts_for(3))


@pytest.mark.parametrize(("p", "root"), [(2, 1), (5, 2), (7, 6), (8, 3)])
def test_binomial_reduce(p: int, root: int) -> None:
    check_all(binomial_reduce(p, root, 3), counts_for(3))


@pytest.mark.parametrize(("p", "k"), [(2, 1), (3, 1), (4, 1), (3, 2)])
def test_pairwise_alltoall(p: int, k: int) -> None:
    check_all(pairwise_alltoall(p, k), [p * c for c in (0, 1, 2, 5, 2 * k + 1)])


@pytest.mark.parametrize("nchunks", [1, 3])
def test_recursive_doubling_allreduce(nchunks: int) -> None:
    check_all(recursive_doubling(8, nchunks), counts_for(nchunks))


def test_single_rank() -> None:
    assert run(ring_allreduce(1), 5).wrong == 0
    assert run(ring_allgather(1, 2), 5).wrong == 0


@settings(max_examples=25, deadline=None)
@given(p=st.integers(2, 12), count=st.integers(0, 200), seed=st.integers(0, 2**16))
def test_ring_allreduce_any_size(p: int, count: int, seed: int) -> None:
    assert run(ring_allreduce(p), count, "float32", "sum", seed).wrong == 0
    assert run(ring_allreduce(p), count, "int64", "prod", seed).wrong == 0


# --------------------------------------------------------------------------
# Wrong schedules are caught
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "int32", "bfloat16"])
@pytest.mark.parametrize("op", OPS)
def test_copy_instead_of_reduce_is_caught(dtype: str, op: str) -> None:
    for schedule in (ring_allreduce(4), recursive_doubling(8), binomial_reduce(5, 2, 2)):
        assert run(schedule, 100, dtype, op).wrong == 0
        assert run(with_action(schedule, 0, COPY), 100, dtype, op).wrong > 0, schedule.algorithm


@pytest.mark.parametrize("dtype", ["float64", "int64", "float16"])
def test_dropped_step_is_caught(dtype: str) -> None:
    cases = [ring_allreduce(4), ring_allgather(4), ring_reduce_scatter(3, 2), binomial_broadcast(6, 1, 2)]
    cases += [pairwise_alltoall(3), binomial_reduce(6, 5, 1)]
    for schedule in cases:
        for step in (0, len(schedule.steps) - 1):
            assert run(without_step(schedule, step), 48, dtype, "sum").wrong > 0, (schedule.algorithm, step)


def test_reduce_instead_of_copy_is_caught() -> None:
    schedule = ring_allreduce(3)
    assert run(with_action(schedule, len(schedule.steps) - 1, REDUCE), 30, "int32", "sum").wrong > 0
    assert run(with_action(ring_allgather(3), 0, REDUCE), 30, "float32", "max").wrong > 0


def test_misplaced_chunk_is_caught() -> None:
    # rank 2 sends rank 0 the wrong rank's block in an alltoall (rank 1's, which rank 2 does not hold), and
    # rank 0 receives it: sends and receives match, the data are wrong
    good = pairwise_alltoall(3)
    step = good.steps[0]

    def misplaced(o: Op) -> bool:
        return (o.kind is OpKind.RECV and o.rank == 0) or (o.kind is OpKind.SEND and (o.rank, o.peer) == (2, 0))

    ops = tuple(dataclasses.replace(o, chunks=ChunkSet.of([1 * 3 + 0])) if misplaced(o) else o for o in step.ops)
    bad = dataclasses.replace(good, steps=(dataclasses.replace(step, ops=ops), *good.steps[1:]))
    assert run(bad, 30, "int32", "sum").wrong > 0
    assert run(bad, 30, "float32", "sum").wrong > 0


# --------------------------------------------------------------------------
# Snapshot semantics
# --------------------------------------------------------------------------


def test_exchange_reduce_reads_old_values() -> None:
    # both ranks send chunk 0 and receive chunk 0 reduce in the same step
    schedule = make_schedule(
        "exchange",
        Collective.ALLREDUCE,
        2,
        1,
        [[send(0, 1, [0]), recv(0, 1, [0], REDUCE), send(1, 0, [0]), recv(1, 0, [0], REDUCE)]],
    )
    lowered = plan(schedule, 2)
    assert all(t.snapshot for step in lowered.steps for t in step)
    buffers = np.array([[1.0, 2.0], [10.0, 20.0]], dtype=np.float32)
    execute(lowered, buffers, "sum")
    np.testing.assert_array_equal(buffers, [[11.0, 22.0], [11.0, 22.0]])
    buffers = np.array([[3, 2], [5, 7]], dtype=np.int64)
    execute(lowered, buffers, "prod")
    np.testing.assert_array_equal(buffers, [[15, 14], [15, 14]])


@pytest.mark.parametrize("descending", [False, True])
def test_copy_shift_reads_old_values(descending: bool) -> None:
    # rank r copies chunk 0 of rank r+1: a rotation by one, not a propagation
    p = 5
    order = range(p - 1, -1, -1) if descending else range(p)
    ops = [op for r in order for op in xfer((r + 1) % p, r, [0], COPY)]
    lowered = plan(make_schedule("shift", Collective.ALLREDUCE, p, 1, [ops]), 3)
    buffers = np.arange(p * 3, dtype=np.int32).reshape(p, 3)
    before = buffers.copy()
    execute(lowered, buffers, "sum")
    np.testing.assert_array_equal(buffers, np.roll(before, -1, axis=0))


def test_reduce_chain_reads_old_values() -> None:
    # rank r reduces rank r+1's chunk in the same step as r+1 reduces r+2's
    p = 4
    ops = [op for r in range(p - 1) for op in xfer(r + 1, r, [0, 1], REDUCE)]
    lowered = plan(make_schedule("chain", Collective.ALLREDUCE, p, 2, [ops[::-1]]), 4)
    buffers = np.arange(p * 4, dtype=np.float64).reshape(p, 4)
    before = buffers.copy()
    execute(lowered, buffers, "sum")
    np.testing.assert_array_equal(buffers[: p - 1], before[: p - 1] + before[1:])
    np.testing.assert_array_equal(buffers[p - 1], before[p - 1])


def test_ring_needs_no_snapshot() -> None:
    lowered = plan(ring_allreduce(6), 60)
    assert not any(t.snapshot for step in lowered.steps for t in step)


def test_two_reduces_into_one_chunk_accumulate() -> None:
    # a multi-port reduce: rank 0 receives from ranks 1 and 2 in the same step
    schedule = make_schedule(
        "star", Collective.REDUCE, 3, 1, [[*xfer(1, 0, [0], REDUCE), *xfer(2, 0, [0], REDUCE)]], root=0
    )
    assert run(schedule, 10, "int32", "sum").wrong == 0
    assert run(schedule, 10, "float32", "max").wrong == 0


# --------------------------------------------------------------------------
# Layout, inputs, reference
# --------------------------------------------------------------------------


def test_uneven_chunks() -> None:
    lowered = plan(ring_allreduce(4), 10)
    np.testing.assert_array_equal(lowered.offsets, [0, 3, 6, 8, 10])
    sizes = {t.region.size for step in lowered.steps for t in step}
    assert sizes == {2, 3}
    # fewer elements than chunks: empty chunks move nothing
    lowered = plan(ring_allreduce(5), 2)
    assert all(t.region.size > 0 for step in lowered.steps for t in step)
    assert plan(ring_allreduce(5), 0).steps == ()
    # alltoall splits every (src, dst) block on its own: 2 + 1 elements
    lowered = plan(pairwise_alltoall(2, 2), 6)
    np.testing.assert_array_equal(np.diff(lowered.offsets), [2, 1] * 4)
    assert run(pairwise_alltoall(2, 2), 6, "int32").wrong == 0


def test_scattered_chunks_use_an_index_array() -> None:
    p, nchunks = 2, 64
    every_other = range(0, nchunks, 2)
    schedule = make_schedule("odd", Collective.ALLREDUCE, p, nchunks, [xfer(0, 1, every_other, REDUCE)])
    lowered = plan(schedule, 200)
    (transfer,) = lowered.steps[0]
    assert transfer.region.index is not None and transfer.region.size == 100
    buffers = np.arange(400, dtype=np.int64).reshape(2, 200)
    before = buffers.copy()
    execute(lowered, buffers, "sum")
    sent = np.concatenate([np.arange(lowered.offsets[c], lowered.offsets[c + 1]) for c in every_other])
    want = before[1].copy()
    want[sent] += before[0][sent]
    np.testing.assert_array_equal(buffers[1], want)
    np.testing.assert_array_equal(buffers[0], before[0])


def test_make_inputs_poison_and_values() -> None:
    schedule = ring_allgather(3, 2)
    inputs = make_inputs(schedule, 12, "float32")
    assert inputs.shape == (3, 12) and inputs.dtype == np.float32
    for r in range(3):
        held = np.zeros(12, dtype=bool)
        held[4 * r : 4 * r + 4] = True
        assert not np.isnan(inputs[r, held]).any()
        assert np.isnan(inputs[r, ~held]).all()
    ints = make_inputs(binomial_broadcast(4, 2, 2), 9, "int32")
    assert (ints[[0, 1, 3]] == local.INT_POISON).all() and (ints[2] != local.INT_POISON).all()
    assert make_inputs(ring_allgather(3), 12, "bfloat16").dtype == DTYPES["bfloat16"]
    floats = make_inputs(ring_allreduce(4), 1000, "float64")
    assert np.abs(floats).max() <= 1 and len({row.tobytes() for row in floats}) == 4
    np.testing.assert_array_equal(floats, make_inputs(ring_allreduce(4), 1000, "float64"))
    prods = make_inputs(ring_allreduce(4), 1000, "int64", op="prod")
    assert set(np.unique(prods)) <= {-1, 1, 2}


def test_expected_from_definition() -> None:
    inputs = np.arange(12, dtype=np.int32).reshape(3, 4)
    values, mask = expected(ring_allreduce(3), inputs, "max")
    np.testing.assert_array_equal(values, np.broadcast_to([8, 9, 10, 11], (3, 4)))
    assert mask.all()
    values, mask = expected(binomial_reduce(3, 1, 2), inputs, "sum")
    np.testing.assert_array_equal(values[1], [12, 15, 18, 21])
    np.testing.assert_array_equal(mask, [[False] * 4, [True] * 4, [False] * 4])
    values, mask = expected(ring_reduce_scatter(2), inputs[:2], "prod")
    np.testing.assert_array_equal(values[0], [0, 5, 12, 21])
    np.testing.assert_array_equal(mask, [[True, True, False, False], [False, False, True, True]])
    values, mask = expected(ring_allgather(2), inputs[:2].astype(np.float16), "sum")
    assert values.dtype == np.float64 and mask.all()
    np.testing.assert_array_equal(values[1], [0, 1, 6, 7])
    # alltoall, count 4 per rank: element (src, dst, j) lands at rank dst
    a2a = np.arange(16, dtype=np.int64).reshape(2, 8)
    values, mask = expected(pairwise_alltoall(2), a2a, "sum")
    np.testing.assert_array_equal(values[0], [0, 1, 2, 3, 12, 13, 14, 15])
    np.testing.assert_array_equal(mask[0], [1, 1, 0, 0, 1, 1, 0, 0])


def test_count_wrong_tolerances() -> None:
    exp = np.broadcast_to(np.array([1.0, -2.0, 0.0, np.nan, np.inf]), (2, 5))
    mask = np.ones((2, 5), dtype=bool)
    res = exp.astype(np.float32)
    # NaN expected never counts as right, equal infinities do
    assert count_wrong(res, exp, mask, "float32", "sum", 2) == 2
    assert count_wrong(res, exp, mask, "float32", "max", 2) == 2
    near = exp.copy()
    near[:, :3] += np.finfo(np.float32).eps
    assert count_wrong(near, exp, mask, "float32", "sum", 2) == 2
    assert count_wrong(near, exp, mask, "float32", "max", 2) == 8
    assert count_wrong(near, exp, mask, "float32", "sum", 2, reduces=False) == 8
    assert count_wrong(near, exp, mask & (np.arange(5) != 3), "float32", "sum", 2) == 0
    # the bound grows with the number of ranks
    nearer = exp.copy()
    nearer[:, :3] += 6 * np.finfo(np.float32).eps
    assert count_wrong(nearer, exp, mask, "float32", "sum", 2) == 8
    assert count_wrong(nearer, exp, mask, "float32", "sum", 4) == 2
    far = exp.copy()
    far[:, :3] += 1e-3
    assert count_wrong(far, exp, mask, "float32", "sum", 2) == 8
    assert count_wrong(far, exp, mask, "bfloat16", "sum", 2) == 2
    ints = np.array([[1, 2], [3, 4]], dtype=np.int32)
    assert count_wrong(ints + np.array([[0, 1], [0, 0]]), ints, np.ones((2, 2), bool), "int32", "sum", 2) == 1


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_sum_within_tolerance(dtype: str) -> None:
    for schedule in (ring_allreduce(8), recursive_doubling(8, 2), binomial_reduce(8, 3, 4)):
        for op in ("sum", "prod"):
            assert run(schedule, 4096, dtype, op, seed=7).wrong == 0
    # the tolerance still catches a wrong sum
    assert run(with_action(ring_allreduce(8), 3, COPY), 4096, dtype, "sum").wrong > 100


# --------------------------------------------------------------------------
# Errors and the run record
# --------------------------------------------------------------------------


def test_refusals() -> None:
    schedule = ring_allreduce(2)
    with pytest.raises(ValueError, match="unknown dtype 'complex64'"):
        run(schedule, 10, "complex64")
    with pytest.raises(ValueError, match="unknown reduction op 'avg'"):
        run(schedule, 10, "float32", "avg")
    with pytest.raises(ValueError, match="non-negative"):
        plan(schedule, -1)
    with pytest.raises(ValueError, match="non-negative"):
        run(schedule, -5)
    with pytest.raises(ValueError, match="divisible by p=3"):
        plan(pairwise_alltoall(3), 10)
    with pytest.raises(ValueError, match="iters"):
        run(schedule, 10, iters=0)
    with pytest.raises(ValueError, match="divisible by p"):
        plan(dataclasses.replace(ring_allgather(3), nchunks=4), 10)
    with pytest.raises(ValueError, match="shape"):
        execute(plan(schedule, 10), np.zeros((2, 11), np.float32), "sum")
    bad = make_schedule("bad", Collective.ALLREDUCE, 2, 2, [xfer(0, 1, [2], COPY)])
    with pytest.raises(ValueError, match="chunk 2 out of range"):
        plan(bad, 10)
    bad = make_schedule("bad", Collective.ALLREDUCE, 2, 2, [xfer(0, 2, [1], COPY)])
    with pytest.raises(ValueError, match="out of range"):
        plan(bad, 10)


def test_memory_budget() -> None:
    with pytest.raises(ValueError, match=r"budget of 4\.00 GiB; use a smaller count"):
        run(ring_allreduce(2), 2**30, "float32")
    with pytest.raises(ValueError, match=r"at most 125 elements"):
        run(ring_allreduce(2), 1000, "float32", max_bytes=1000)
    with pytest.raises(ValueError, match="budget"):
        make_inputs(pairwise_alltoall(4), 2**28, "float64")
    assert run(ring_allreduce(2), 125, "float32", max_bytes=1000).wrong == 0


def test_run_record() -> None:
    result = run(ring_allreduce(3), 300, "float64", "min", iters=3)
    assert (result.count, result.nbytes, result.dtype, result.op) == (300, 2400, "float64", "min")
    assert result.iters == 3 and result.time_us > 0 and result.wrong == 0
    assert run(pairwise_alltoall(2), 0).nbytes == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.wrong = 1  # type: ignore[misc]


def test_ring_allreduce_p64_large_vector() -> None:
    # small integers in float32 sum exactly in any order, so the check needs no tolerance
    p, count = 64, 1 << 20
    lowered = plan(ring_allreduce(p), count)
    buffers = np.random.default_rng(0).integers(-100, 100, (p, count), dtype=np.int16).astype(np.float32)
    want = np.add.reduce(buffers, axis=0)
    execute(lowered, buffers, "sum")
    assert all(np.array_equal(row, want) for row in buffers)


# --------------------------------------------------------------------------
# Sends must match receives (check_matching): the executor is an independent witness
# --------------------------------------------------------------------------

# A ring allreduce in which rank 5 sends the wrong block at step 0 (when p > 6: the ranks exist); rank 6
# still receives the block it expects.  The receive-driven data flow alone would come out right.
WRONG_BLOCK = """\
algorithm wrong_block : allreduce
param p : int where p >= 1
chunks p

phase reduce_scatter:
  for step s in 0 .. p - 1:
    if p > 6 and rank == 5 and s == 0:
      send (rank - s - 2) mod p to ring_next(rank)
    else:
      send (rank - s - 1) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
phase allgather:
  for step s in 0 .. p - 1:
    send (rank - s) mod p to ring_next(rank)
    recv (rank - s - 1) mod p from ring_prev(rank) copy
"""

# Every rank also sends chunk 0 at the second gather step, which nobody receives.
SEND_WITHOUT_RECV = """\
algorithm extra_send : allgather
param p : int where p >= 2
chunks p

phase gather:
  for step s in 0 .. p - 1:
    send (rank - s) mod p to ring_next(rank)
    if s == 1:
      send {0} to ring_prev(rank)
    recv (rank - s - 1) mod p from ring_prev(rank) copy
"""

# Rank 1 also receives its own chunk from rank 2 at the last step (when p > 2), which rank 2 does not send.
RECV_WITHOUT_SEND = """\
algorithm extra_recv : allgather
param p : int where p >= 2
chunks p

phase gather:
  for step s in 0 .. p - 1:
    send (rank - s) mod p to ring_next(rank)
    recv (rank - s - 1) mod p from ring_prev(rank) copy
    if p > 2 and rank == 1 and s == p - 2:
      recv {1} from 2 copy
"""


def _load(tmp_path: Path, name: str, text: str, **params: int) -> Schedule:
    path = tmp_path / f"{name}.coll"
    path.write_text(text)
    return collc.load(path).instantiate(**params).schedule


def test_wrong_block_is_a_mismatch(tmp_path: Path) -> None:
    schedule = _load(tmp_path, "wrong_block", WRONG_BLOCK, p=8)
    with pytest.raises(local.MismatchError) as caught:
        plan(schedule, 64)
    err = caught.value
    assert (err.step, err.phase, err.sender, err.receiver) == (0, "reduce_scatter", 5, 6)
    assert (err.sent, err.expected) == (ChunkSet.of([3]), ChunkSet.of([4]))
    assert (err.span.file, err.span.line) == (str(tmp_path / "wrong_block.coll"), 8)
    text = str(err)
    assert text.startswith(f"{tmp_path / 'wrong_block.coll'}:8:7: step 0 (phase reduce_scatter): ")
    assert "rank 5 sends chunks {3} to rank 6, but rank 6 receives chunks {4} from rank 5" in text
    assert f"the receive is at {tmp_path / 'wrong_block.coll'}:11:5" in text
    for count_dtype in (("float32", "sum"), ("int64", "max")):
        with pytest.raises(local.MismatchError, match="step 0"):
            run(schedule, 64, *count_dtype)
    # for p <= 6 the program is a correct ring allreduce: no false alarm
    assert run(_load(tmp_path, "wrong_block", WRONG_BLOCK, p=6), 60).wrong == 0


def test_send_without_receive_is_a_mismatch(tmp_path: Path) -> None:
    schedule = _load(tmp_path, "extra_send", SEND_WITHOUT_RECV, p=4)
    assert without_unmatched(schedule) == 0  # the receive-driven data flow alone is right
    with pytest.raises(local.MismatchError) as caught:
        run(schedule, 40)
    err = caught.value
    assert (err.step, err.sender, err.receiver, err.sent, err.expected) == (1, 0, 3, ChunkSet.of([0]), ChunkSet())
    assert "step 1 (phase gather): rank 0 sends chunks {0} to rank 3, but rank 3 receives nothing" in str(err)
    assert (err.span.line, err.span.column) == (9, 7)


def test_receive_without_send_is_a_mismatch(tmp_path: Path) -> None:
    schedule = _load(tmp_path, "extra_recv", RECV_WITHOUT_SEND, p=4)
    with pytest.raises(local.MismatchError) as caught:
        plan(schedule, 40)
    err = caught.value
    assert (err.step, err.sender, err.receiver, err.sent, err.expected) == (2, 2, 1, ChunkSet(), ChunkSet.of([1]))
    text = str(err)
    assert "step 2 (phase gather): rank 2 sends nothing to rank 1, but rank 1 receives chunks {1} from rank 2" in text
    assert (err.span.line, err.span.column) == (10, 7)  # the receive: there is no send to point at
    with pytest.raises(CollError, match="rank 2 sends nothing to rank 1"):
        collc.load(tmp_path / "extra_recv.coll").instantiate(p=4).run(40)


def without_unmatched(schedule: Schedule) -> int:
    """Wrong elements of ``schedule`` run without its sends that nobody receives (the old, receive-driven run)."""
    steps = []
    for step in schedule.steps:
        wanted = {(o.peer, o.rank) for o in step.ops if o.kind is OpKind.RECV}
        ops = tuple(o for o in step.ops if o.kind is not OpKind.SEND or (o.rank, o.peer) in wanted)
        steps.append(dataclasses.replace(step, ops=ops))
    return run(dataclasses.replace(schedule, steps=tuple(steps)), 40).wrong


def test_what_one_message_is() -> None:
    """One message per (step, sender, receiver): the union of the sends against the union of the receives."""
    ok = [
        # a set split over several ops on either side; a chunk sent twice; a chunk received twice
        [send(0, 1, [0]), send(0, 1, [1]), recv(1, 0, [0, 1], COPY)],
        [send(0, 1, [0, 1]), send(0, 1, [1]), recv(1, 0, [1], COPY), recv(1, 0, [0], COPY)],
        [send(0, 1, [0]), recv(1, 0, [0], COPY), recv(1, 0, [0], COPY)],
        # copies and reduces both count; empty ops and ops with the rank itself are no messages
        [send(0, 1, [0, 1]), recv(1, 0, [0], COPY), recv(1, 0, [1], REDUCE), send(1, 0, []), recv(0, 0, [1], COPY)],
    ]
    for ops in ok:
        local.check_matching(make_schedule("ok", Collective.ALLREDUCE, 2, 2, [ops]))
    bad = [
        (
            [send(0, 1, [0, 1]), recv(1, 0, [0], COPY)],
            "rank 0 sends chunks {0..1} to rank 1, but rank 1 receives chunks {0}",
        ),
        ([send(0, 1, [0]), recv(0, 1, [0], COPY)], "rank 0 sends chunks {0} to rank 1, but rank 1 receives nothing"),
        ([*xfer(0, 1, [0], COPY), recv(0, 1, [1], REDUCE)], "rank 1 sends nothing to rank 0, but rank 0 receives"),
    ]
    for ops, message in bad:
        schedule = make_schedule("bad", Collective.ALLREDUCE, 2, 2, [xfer(1, 0, [0], COPY), ops])
        with pytest.raises(local.MismatchError, match=re.escape(f"step 1 (phase main): {message}")):
            plan(schedule, 10)


def test_compressed_schedules_are_matched_too(tmp_path: Path) -> None:
    text = (EXAMPLES / "compression" / "compressed_ring_allgather_p2p.coll").read_text()
    extra = "    send block(rank, k) to ring_next(rank) compress q\n"
    last = text.splitlines(keepends=True)[-1]
    assert last.lstrip().startswith("recv block(")
    path = tmp_path / "bad_compressed.coll"
    path.write_text(text.replace(last, f"    if s == 1:\n    {extra}{last}"))
    inst = collc.load(path).instantiate(p=4)
    assert inst.schedule.compresses()
    bounds = np.zeros((4, 4))
    with pytest.raises(local.MismatchError, match=r"step 1 \(phase allgather\): rank 0 sends chunks \{0, 3\}"):
        run(inst.schedule, 40, error_bounds=bounds)
    out = cli("run", path, "-p", 4, "--size", "1K", "--no-check", "--backend", "local")
    assert out.code == EXIT_WRONG, out.text
    assert "all results" not in out.stdout and "rank 0 sends chunks {0, 3} to rank 1" in out.stderr


@pytest.mark.parametrize(
    ("name", "text", "p"),
    [("wrong_block", WRONG_BLOCK, 8), ("extra_send", SEND_WITHOUT_RECV, 4), ("extra_recv", RECV_WITHOUT_SEND, 4)],
)
def test_cli_run_without_check_reports_a_mismatch(tmp_path: Path, name: str, text: str, p: int) -> None:
    path = tmp_path / f"{name}.coll"
    path.write_text(text)
    for extra in ((), ("--json",)):
        out = cli("run", path, "-p", p, "--sizes", "1K:2K", "--no-check", "--backend", "local", *extra)
        assert out.code == EXIT_WRONG, out.text
        assert "all results correct" not in out.text and "Traceback" not in out.text
        assert out.stdout == ""  # no rows
        assert f"{path}:" in out.stderr and ": error: step " in out.stderr and "note: an MPI run" in out.stderr
    # where the mismatch is not there (wrong_block at p=6, the others at p=2) the run is right
    ok = cli("run", path, "-p", 6 if name == "wrong_block" else 2, "--size", "1K", "--no-check")
    assert ok.code == 0 and "all results correct" in ok.stdout, ok.text


def _example_instances(path: Path) -> list[collc.Instance]:
    """Instances of a bundled example at a few sizes its constraints allow (p 3, 4, 8, or the like)."""
    alg = collc.load(path)
    names = alg.param_names
    if "dims" in names:
        choices: list[dict[str, Any]] = [{"dims": d} for d in ((2, 2), (3, 3), (4, 4), (2, 4), (2, 2, 2))]
    elif "nodes" in names:
        choices = [{"nodes": n, "local": k} for n, k in ((2, 2), (2, 3), (4, 2), (3, 1))]
    else:
        choices = [{"p": p, **({"root": (3 * p) // 4} if "root" in names else {})} for p in (3, 4, 8)]
    out = []
    for params in choices:
        try:
            out.append(alg.instantiate(**params))
        except CollError as err:
            if "violates the constraint" not in err.message:
                raise
    return out


@pytest.mark.parametrize("path", api.list_examples(), ids=lambda path: path.stem)
def test_every_example_matches_and_runs_correctly(path: Path) -> None:
    instances = _example_instances(path)
    assert len(instances) >= 2, path.stem
    for inst in instances:
        s = inst.schedule
        local.check_matching(s)
        p = s.nranks
        count = 3 * p * p if s.collective is Collective.ALLTOALL else 7 * p
        result = inst.run(count, "float64", "sum", seed=p)
        assert result.wrong == 0, f"{path.stem} {s.params}: {result.wrong} wrong"


def test_mismatches_are_the_verifiers_unmatched_findings(tmp_path: Path) -> None:
    """On mutants of the example library (benchmarks/mutants.py) the executor refuses exactly the schedules the
    verifier reports unmatched sends or receives for."""
    benchmarks = str(REPO / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    mutants = importlib.import_module("mutants")
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    seen = {True: 0, False: 0}
    for m in mutants.select(mutants.generate_mutants(), 160, seed=5):
        program, mutated = tmp_path / m.program, tmp_path / m.file
        original = mutated.read_text()
        mutated.write_text(m.text)
        try:
            parsed = parse_program(program.read_text(), str(program))
        except CollError:
            continue
        finally:
            mutated.write_text(original)
        names = {param.name for param in parsed.params}
        for p in (3, 4, 8):
            try:
                s = elaborate(parsed, {"p": p, **({"root": p - 1} if "root" in names else {})})
            except CollError:
                continue
            unmatched = {f.code for f in check(s).findings} & {"unmatched-send", "unmatched-recv"}
            try:
                local.check_matching(s)
                refused = False
            except local.MismatchError:
                refused = True
            assert refused == bool(unmatched), (m.key, m.description, p)
            seen[refused] += 1
            layout_ok = collectives.layout_error(s.collective, s.nranks, s.nchunks) is None
            if refused and layout_ok:  # plan checks the layout first, then the matching
                with pytest.raises(local.MismatchError):
                    plan(s, 3 * s.nranks * s.nchunks)
    assert seen[True] >= 20 and seen[False] >= 50, seen
