"""Tests of collc.verify.check on hand-built schedules and their mutants."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collc.collectives import EVERY, chunk_dest, chunk_origin
from collc.ir import Action, ChunkSet, Collective, Op, OpKind, Schedule, Span, Step
from collc.verify.check import CheckReport, Finding, check

FILE = "t.coll"
HEADER = Span(FILE, 1000000, 1, 1000000, 1)

# --------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------


class Builder:
    """Collects ops per step, each op with its own source line."""

    def __init__(self, distinct_spans: bool = True) -> None:
        self.line = 0
        self.distinct = distinct_spans  # off for the scale tests: a frozen Span costs as much as an Op
        self.shared = Span(FILE, 1, 1, 1, 20)
        self.steps: dict[int, list[Op]] = {}
        self.phases: dict[int, str] = {}

    def op(
        self,
        step: int,
        rank: int,
        kind: OpKind,
        peer: int,
        chunks: Iterable[int] | ChunkSet,
        action: Action | None,
    ) -> Op:
        self.line += 1
        span = Span(FILE, self.line, 1, self.line, 20) if self.distinct else self.shared
        op = Op(rank, kind, peer, chunks if isinstance(chunks, ChunkSet) else ChunkSet.of(chunks), action, span)
        ops = self.steps.get(step)
        if ops is None:
            ops = self.steps[step] = []
        ops.append(op)
        return op

    def xfer(
        self, step: int, src: int, dst: int, chunks: Iterable[int] | ChunkSet, action: Action, phase: str = ""
    ) -> None:
        """A send and its matching receive (sharing one chunk set, as the frontend does)."""
        cs = chunks if isinstance(chunks, ChunkSet) else ChunkSet.of(chunks)
        self.op(step, src, OpKind.SEND, dst, cs, None)
        self.op(step, dst, OpKind.RECV, src, cs, action)
        if phase:
            self.phases.setdefault(step, phase)

    def build(self, collective: Collective, p: int, n: int, root: int | None = None, name: str = "t") -> Schedule:
        last = max(self.steps, default=-1)
        steps = tuple(Step(i, self.phases.get(i, ""), tuple(self.steps.get(i, ()))) for i in range(last + 1))
        params = (("p", p), ("n", n))
        return Schedule(name, collective, params, p, n, root, steps, FILE, HEADER)


def block(b: int, k: int) -> ChunkSet:
    return ChunkSet.interval(b * k, (b + 1) * k)


def ring_allreduce(p: int, k: int = 1, distinct_spans: bool = True) -> Schedule:
    """Reduce-scatter then allgather around the ring; nchunks = p*k."""
    b = Builder(distinct_spans)
    for s in range(p - 1):
        for r in range(p):
            b.xfer(s, r, (r + 1) % p, block((r - s) % p, k), Action.REDUCE, "reduce-scatter")
    for s in range(p - 1):
        for r in range(p):
            b.xfer(p - 1 + s, r, (r + 1) % p, block((r + 1 - s) % p, k), Action.COPY, "allgather")
    return b.build(Collective.ALLREDUCE, p, p * k, name="ring")


def ring_allgather(p: int) -> Schedule:
    b = Builder()
    for s in range(p - 1):
        for r in range(p):
            b.xfer(s, r, (r + 1) % p, [(r - s) % p], Action.COPY)
    return b.build(Collective.ALLGATHER, p, p)


def ring_reduce_scatter(p: int) -> Schedule:
    """Leaves rank r with chunk r fully reduced."""
    b = Builder()
    for s in range(p - 1):
        for r in range(p):
            b.xfer(s, r, (r + 1) % p, [(r - s - 1) % p], Action.REDUCE)
    return b.build(Collective.REDUCE_SCATTER, p, p)


def binomial_broadcast(p: int, root: int, n: int = 4) -> Schedule:
    b = Builder()
    mask, step = 1, 0
    while mask < p:
        for v in range(mask):
            if v + mask < p:
                b.xfer(step, (v + root) % p, (v + mask + root) % p, range(n), Action.COPY)
        mask, step = mask * 2, step + 1
    return b.build(Collective.BROADCAST, p, n, root)


def binomial_reduce(p: int, root: int, n: int = 3) -> Schedule:
    b = Builder()
    mask, step = 1, 0
    while mask < p:
        for v in range(mask, p, 2 * mask):
            b.xfer(step, (v + root) % p, (v - mask + root) % p, range(n), Action.REDUCE)
        mask, step = mask * 2, step + 1
    return b.build(Collective.REDUCE, p, n, root)


def pairwise_alltoall(p: int) -> Schedule:
    b = Builder()
    for s in range(1, p):
        for r in range(p):
            dst = (r + s) % p
            b.xfer(s - 1, r, dst, [r * p + dst], Action.COPY)
    return b.build(Collective.ALLTOALL, p, p * p)


def recursive_doubling(p: int, n: int) -> Schedule:
    b = Builder()
    for step in range(p.bit_length() - 1):
        for r in range(p):
            peer = r ^ (1 << step)
            b.op(step, r, OpKind.SEND, peer, range(n), None)
            b.op(step, r, OpKind.RECV, peer, range(n), Action.REDUCE)
    return b.build(Collective.ALLREDUCE, p, n, name="recursive_doubling")


def rabenseifner(p: int, shuffle: bool = False) -> Schedule:
    """Recursive halving reduce-scatter then recursive doubling allgather; nchunks = p.

    With `shuffle`, chunk ids are permuted (still correct: ids are logical), so the sets are scattered.
    """
    b = Builder()
    perm = np.random.default_rng(1).permutation(p) if shuffle else np.arange(p)
    sets: dict[tuple[int, int], ChunkSet] = {}

    def window(a: int, z: int) -> ChunkSet:
        if (a, z) not in sets:
            mask = np.zeros(p, dtype=bool)
            mask[perm[a:z]] = True
            sets[a, z] = ChunkSet(int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little"))
        return sets[a, z]

    lo, hi = [0] * p, [p] * p
    steps = p.bit_length() - 1
    for k in range(steps):
        d = p >> (k + 1)
        for r in range(p):
            mid = (lo[r] + hi[r]) // 2
            keep, give = ((lo[r], mid), (mid, hi[r])) if r & d == 0 else ((mid, hi[r]), (lo[r], mid))
            b.op(k, r, OpKind.SEND, r ^ d, window(*give), None)
            b.op(k, r, OpKind.RECV, r ^ d, window(*keep), Action.REDUCE)
            lo[r], hi[r] = keep
    for k in range(steps):
        d = 1 << k
        for r in range(p):
            b.op(steps + k, r, OpKind.SEND, r ^ d, window(lo[r], hi[r]), None)
            b.op(steps + k, r, OpKind.RECV, r ^ d, window(lo[r ^ d], hi[r ^ d]), Action.COPY)
        lo = [min(lo[r], lo[r ^ d]) for r in range(p)]
        hi = [max(hi[r], hi[r ^ d]) for r in range(p)]
    return b.build(Collective.ALLREDUCE, p, p, name="rabenseifner")


# --------------------------------------------------------------------------
# Mutation helpers
# --------------------------------------------------------------------------


def find_op(s: Schedule, step: int, rank: int, kind: OpKind) -> Op:
    ops = [op for op in s.steps[step].ops if op.rank == rank and op.kind is kind]
    assert len(ops) == 1, ops
    return ops[0]


def edit(s: Schedule, fn: Callable[[int, Op], Iterable[Op]]) -> Schedule:
    """Replace every op by fn(step, op) (zero, one or more ops)."""
    steps = tuple(
        dataclasses.replace(st, ops=tuple(new for op in st.ops for new in fn(st.index, op))) for st in s.steps
    )
    return dataclasses.replace(s, steps=steps)


def replace_op(s: Schedule, old: Op, **changes: object) -> tuple[Schedule, Op]:
    new = dataclasses.replace(old, **changes)  # type: ignore[arg-type]
    return edit(s, lambda _, op: [new] if op is old else [op]), new


def drop(s: Schedule, *victims: Op) -> Schedule:
    return edit(s, lambda _, op: [] if any(op is v for v in victims) else [op])


def codes(report: CheckReport) -> list[str]:
    return [f.code for f in report.findings]


def only(report: CheckReport, code: str) -> Finding:
    found = [f for f in report.findings if f.code == code]
    assert found, (code, report.findings)
    return found[0]


def assert_ok(s: Schedule) -> CheckReport:
    report = check(s)
    assert report.ok, report.findings
    assert report.findings == () and report.omitted == 0
    return report


# --------------------------------------------------------------------------
# Correct schedules
# --------------------------------------------------------------------------


@pytest.mark.parametrize("p", range(2, 10))
def test_ring_allreduce_passes_with_stats(p: int) -> None:
    report = assert_ok(ring_allreduce(p))
    st = report.stats
    assert report.algorithm == "ring" and report.nranks == p and report.params == (("p", p), ("n", p))
    assert st.steps == 2 * (p - 1)
    assert st.messages == 2 * (p - 1) * p
    assert st.max_chunks_sent == st.max_chunks_received == 2 * (p - 1)
    assert st.max_sent_fraction == pytest.approx(2 * (p - 1) / p)
    assert st.max_received_fraction == pytest.approx(2 * (p - 1) / p)
    assert st.max_fan_out == st.max_fan_in == 1


def test_ring_allreduce_several_chunks_per_block() -> None:
    st = assert_ok(ring_allreduce(5, k=3)).stats
    assert st.max_chunks_sent == 2 * 4 * 3 and st.max_sent_fraction == pytest.approx(8 / 5)


def test_single_rank_needs_nothing() -> None:
    assert assert_ok(Builder().build(Collective.ALLREDUCE, 1, 4)).stats.steps == 0


@pytest.mark.parametrize("p", range(2, 10))
def test_ring_allgather_and_reduce_scatter(p: int) -> None:
    st = assert_ok(ring_allgather(p)).stats
    assert st.steps == p - 1 and st.max_sent_fraction == pytest.approx((p - 1) / p)
    st = assert_ok(ring_reduce_scatter(p)).stats
    assert st.steps == p - 1 and st.max_chunks_received == p - 1


@pytest.mark.parametrize(("p", "root"), [(1, 0), (2, 1), (5, 0), (7, 3), (8, 5), (9, 8)])
def test_binomial_broadcast_and_reduce(p: int, root: int) -> None:
    st = assert_ok(binomial_broadcast(p, root)).stats
    assert st.steps == (p - 1).bit_length()
    assert st.max_fan_out == (1 if p > 1 else 0)
    st = assert_ok(binomial_reduce(p, root)).stats
    assert st.steps == (p - 1).bit_length()
    assert st.max_chunks_sent == (3 if p > 1 else 0)


@pytest.mark.parametrize("p", range(2, 7))
def test_pairwise_alltoall(p: int) -> None:
    st = assert_ok(pairwise_alltoall(p)).stats
    assert st.steps == p - 1 and st.messages == p * (p - 1)
    assert st.max_chunks_sent == p - 1
    assert st.max_sent_fraction == pytest.approx((p - 1) / p)  # of the per-rank send buffer


def test_recursive_doubling_p8() -> None:
    st = assert_ok(recursive_doubling(8, 8)).stats
    assert st.steps == 3 and st.max_chunks_sent == 24 and st.max_sent_fraction == pytest.approx(3.0)


def test_two_reduce_receives_of_one_chunk_in_one_step_are_allowed() -> None:
    b = Builder()
    b.xfer(0, 1, 0, [0], Action.REDUCE)
    b.xfer(0, 2, 0, [0], Action.REDUCE)
    b.xfer(1, 0, 1, [0], Action.COPY)
    b.xfer(1, 0, 2, [0], Action.COPY)
    st = assert_ok(b.build(Collective.ALLREDUCE, 3, 1)).stats
    assert st.max_fan_in == 2 and st.max_fan_out == 2 and st.messages == 4


def test_sends_and_receives_merge_per_pair() -> None:
    b = Builder()
    b.op(0, 0, OpKind.SEND, 1, [0], None)
    b.op(0, 0, OpKind.SEND, 1, [1], None)
    b.op(0, 1, OpKind.RECV, 0, [0, 1], Action.COPY)
    st = assert_ok(b.build(Collective.BROADCAST, 2, 2, root=0)).stats
    assert st.messages == 1 and st.max_chunks_sent == 2


@pytest.mark.parametrize("p", [4, 16, 64])
@pytest.mark.parametrize("shuffle", [False, True])
def test_rabenseifner(p: int, shuffle: bool) -> None:
    st = assert_ok(rabenseifner(p, shuffle)).stats
    assert st.steps == 2 * (p.bit_length() - 1)
    assert st.max_sent_fraction == pytest.approx(2 * (p - 1) / p)


def test_ring_allreduce_p512() -> None:
    assert assert_ok(ring_allreduce(512, distinct_spans=False)).stats.steps == 2 * 511


def test_scale_p1024() -> None:
    assert assert_ok(recursive_doubling(1024, 1024)).stats.max_chunks_sent == 10 * 1024
    assert assert_ok(rabenseifner(1024)).stats.max_chunks_sent == 2 * 1023


@pytest.mark.slow
def test_scale_p4096() -> None:
    """Like Swing allreduce at p=4096: ~200k ops, 33M chunk transfers, scattered chunk sets."""
    assert_ok(rabenseifner(4096, shuffle=True))


# --------------------------------------------------------------------------
# Mutants
# --------------------------------------------------------------------------


def test_wrong_peer() -> None:
    s = ring_allreduce(5)
    send = find_op(s, 2, 1, OpKind.SEND)
    bad, new = replace_op(s, send, peer=3)
    report = check(bad)
    assert not report.ok and codes(report)[:2] == ["unmatched-send", "unmatched-recv"]
    f = only(report, "unmatched-send")
    assert (f.span, f.step, f.rank, f.chunk) == (new.span, 2, 1, send.chunks.max())
    assert "rank 3" in f.message and "step 2" in f.message
    g = only(report, "unmatched-recv")
    assert (g.span, g.step, g.rank) == (find_op(s, 2, 2, OpKind.RECV).span, 2, 2)


def test_peer_and_rank_out_of_range() -> None:
    s = ring_allreduce(4)
    send = find_op(s, 1, 2, OpKind.SEND)
    f = only(check(replace_op(s, send, peer=7)[0]), "peer-out-of-range")
    assert (f.span, f.step, f.rank) == (send.span, 1, 2) and "rank 7" in f.message
    f = only(check(replace_op(s, send, peer=2)[0]), "peer-is-self")
    assert f.span == send.span
    f = only(check(replace_op(s, send, rank=-1)[0]), "rank-out-of-range")
    assert f.span == send.span and f.rank == -1


def test_chunk_out_of_range() -> None:
    s = ring_allreduce(4)
    send, recv = find_op(s, 0, 0, OpKind.SEND), find_op(s, 0, 1, OpKind.RECV)
    extra = ChunkSet.of([9])
    s = edit(s, lambda _, op: [dataclasses.replace(op, chunks=op.chunks | extra) if op in (send, recv) else op])
    report = check(s)
    assert codes(report) == ["chunk-out-of-range", "chunk-out-of-range"]
    assert {f.span for f in report.findings} == {send.span, recv.span}
    assert all(f.chunk == 9 and f.step == 0 for f in report.findings)


def test_dropped_chunk() -> None:
    p, k = 5, 2
    s = ring_allreduce(p, k)
    send, recv = find_op(s, 1, 3, OpKind.SEND), find_op(s, 1, 4, OpKind.RECV)
    lost = send.chunks.max()  # chunk of block (3-1) % 5 = 2
    less = ChunkSet.of([lost])
    s = edit(s, lambda _, op: [dataclasses.replace(op, chunks=op.chunks - less) if op in (send, recv) else op])
    report = check(s)
    assert codes(report) == ["postcondition"]
    f = report.findings[0]
    assert f.chunk == lost and f.rank == 0
    assert f.expected == "{0..4}" and f.actual == "{0..1, 4}"  # ranks 2, 3 had it before the drop
    writer = find_op(s, 2 * (p - 1) - 1, 0, OpKind.RECV)  # rank 0's last allgather receive
    assert f.span == writer.span and f.step == 2 * (p - 1) - 1
    assert "missing {2..3}" in f.message and "4 other ranks" in f.message


def test_copy_instead_of_reduce() -> None:
    s = ring_allreduce(5)
    recv = find_op(s, 1, 3, OpKind.RECV)  # rank 3 gets chunk 1 with {1, 2}
    report = check(replace_op(s, recv, action=Action.COPY)[0])
    assert codes(report) == ["postcondition"]
    f = report.findings[0]
    assert f.chunk == 1 and f.expected == "{0..4}" and f.actual == "{0..2, 4}" and "missing {3}" in f.message


def test_reduce_instead_of_copy_in_allgather() -> None:
    p = 5
    s = ring_allreduce(p)
    recv = find_op(s, p - 1 + 1, 2, OpKind.RECV)  # allgather step 1: rank 2 gets chunk 1
    bad, new = replace_op(s, recv, action=Action.REDUCE)
    report = check(bad)
    assert codes(report) == ["double-count"]
    f = report.findings[0]
    assert (f.span, f.step, f.rank, f.chunk) == (new.span, p, 2, 1)
    assert f.expected == "{0..4}" and f.actual == "{0..4} (x2: {1..2})"
    assert "counted twice" in f.message


@pytest.mark.parametrize("p", [3, 4])
def test_every_single_action_flip_or_drop_is_caught(p: int) -> None:
    s = ring_allreduce(p)
    for _, op in s.ops():
        if op.kind is OpKind.RECV:
            flip = Action.COPY if op.action is Action.REDUCE else Action.REDUCE
            assert not check(replace_op(s, op, action=flip)[0]).ok, op
        assert not check(drop(s, op)).ok, op


def test_send_not_held() -> None:
    s = binomial_broadcast(8, 0)
    b = Builder()
    b.line = 500
    b.xfer(0, 5, 6, [2], Action.COPY)  # rank 5 has nothing at step 0
    extra = list(b.steps[0])
    s = edit(s, lambda i, op: [op, *extra] if i == 0 and op is s.steps[0].ops[0] else [op])
    report = check(s)
    assert codes(report) == ["send-not-held"]
    f = report.findings[0]
    assert (f.span, f.step, f.rank, f.chunk) == (extra[0].span, 0, 5, 2)


def test_reduce_into_empty() -> None:
    s = binomial_broadcast(4, 0)
    recv = find_op(s, 0, 1, OpKind.RECV)
    report = check(replace_op(s, recv, action=Action.REDUCE)[0])
    assert codes(report) == ["reduce-into-empty"]
    f = report.findings[0]
    assert (f.span, f.step, f.rank, f.chunk) == (recv.span, 0, 1, 0)


def test_mismatched_sets() -> None:
    s = ring_allreduce(4, k=2)
    recv = find_op(s, 3, 1, OpKind.RECV)
    report = check(replace_op(s, recv, chunks=recv.chunks - ChunkSet.of([recv.chunks.max()]))[0])
    f = only(report, "unmatched-send")
    assert f.span == find_op(s, 3, 0, OpKind.SEND).span and f.chunk == recv.chunks.max() and f.step == 3
    report = check(replace_op(s, recv, chunks=recv.chunks | ChunkSet.of([0]))[0])
    f = only(report, "unmatched-recv")
    assert (f.span, f.rank, f.chunk) == (recv.span, 1, 0)


def test_write_conflict() -> None:
    b = Builder()
    b.xfer(0, 1, 0, [0], Action.REDUCE)
    b.xfer(0, 2, 0, [0], Action.COPY)
    b.xfer(1, 0, 1, [0], Action.COPY)
    b.xfer(1, 0, 2, [0], Action.COPY)
    report = check(b.build(Collective.ALLREDUCE, 3, 1))
    f = only(report, "write-conflict")
    assert (f.step, f.rank, f.chunk, f.span.line) == (0, 0, 0, 4)


def test_malformed_actions() -> None:
    s = ring_allgather(3)
    recv, send = find_op(s, 0, 1, OpKind.RECV), find_op(s, 0, 0, OpKind.SEND)
    s, _ = replace_op(s, recv, action=None)
    s, _ = replace_op(s, send, action=Action.COPY)
    report = check(s)
    assert codes(report) == ["recv-without-action", "send-with-action"]
    assert [f.span for f in report.findings] == [recv.span, send.span]


def test_alltoall_missing_transfer_never_written() -> None:
    s = pairwise_alltoall(4)
    send, recv = find_op(s, 1, 1, OpKind.SEND), find_op(s, 1, 3, OpKind.RECV)
    report = check(drop(s, send, recv))
    assert codes(report) == ["postcondition"]
    f = report.findings[0]
    dropped = drop(s, send, recv)
    last_recv = [(st.index, op) for st in dropped.steps for op in st.ops if op.rank == 3 and op.kind is OpKind.RECV][-1]
    # never written: the finding points at the last receive of the rank, where the chunk should have come
    assert (f.span, f.step, f.rank, f.chunk) == (last_recv[1].span, last_recv[0], 3, 1 * 4 + 3)
    assert f.expected == "{1}" and f.actual == "{}" and "never written" in f.message
    assert "no receive ever delivers it" in f.message


def test_many_failing_chunks_are_summarised_and_capped() -> None:
    s = ring_allreduce(16)
    s = edit(s, lambda i, op: [] if i == 0 else [op])
    report = check(s)
    assert not report.ok and set(codes(report)) == {"postcondition"}
    assert len(report.findings) == 9 and report.findings[-1].chunk is None
    assert "8 more chunks" in report.findings[-1].message
    s = edit(ring_allreduce(16), lambda i, op: [dataclasses.replace(op, peer=99)] if i < 3 else [op])
    report = check(s, max_findings=5)
    assert len(report.findings) == 5 and report.omitted > 3 * 32 - 5
    assert codes(report) == ["peer-out-of-range"] * 4 + ["postcondition"]


def test_layout_error() -> None:
    s = Builder().build(Collective.ALLGATHER, 4, 6)
    report = check(s)
    assert codes(report) == ["layout"] and report.findings[0].span == HEADER
    report = check(Builder().build(Collective.BROADCAST, 4, 4, root=4))
    assert codes(report) == ["root-out-of-range"]


def test_double_count_blames_the_reduce_that_reaches_the_failing_slot() -> None:
    b = Builder()
    b.xfer(0, 0, 1, [0], Action.REDUCE)  # r1 = {0, 1}
    b.xfer(1, 1, 0, [0], Action.REDUCE)  # r0 = {0, 0, 1}: counted twice, but overwritten below
    b.xfer(2, 1, 0, [0], Action.COPY)  # r0 = {0, 1}
    b.xfer(2, 2, 1, [0], Action.REDUCE)  # r1 = {0, 1, 2}
    b.xfer(3, 1, 0, [0], Action.COPY)
    b.xfer(3, 1, 2, [0], Action.REDUCE)  # r2 = {0, 1, 2, 2}: this one stays
    report = check(b.build(Collective.ALLREDUCE, 3, 1))
    assert codes(report) == ["double-count"]
    f = report.findings[0]
    assert (f.step, f.rank, f.chunk, f.span.line) == (3, 2, 0, 12)
    assert f.actual == "{0..2} (x2: {2})"


def test_two_reduces_bringing_the_same_origin() -> None:
    b = Builder()
    b.xfer(0, 0, 1, [0], Action.REDUCE)
    b.xfer(0, 0, 2, [0], Action.REDUCE)
    b.xfer(1, 1, 0, [0], Action.REDUCE)  # line 6
    b.xfer(1, 2, 0, [0], Action.REDUCE)
    b.xfer(2, 0, 1, [0], Action.COPY)
    b.xfer(2, 0, 2, [0], Action.COPY)
    report = check(b.build(Collective.ALLREDUCE, 3, 1))
    assert codes(report) == ["double-count"]
    f = report.findings[0]
    assert (f.step, f.rank, f.span.line) == (1, 0, 6) and f.actual == "{0..2} (x3: {0})"


def test_mutant_at_scale_is_traced() -> None:
    s = rabenseifner(1024)
    recv = find_op(s, 0, 5, OpKind.RECV)
    report = check(replace_op(s, recv, action=Action.COPY)[0])
    assert set(codes(report)) == {"postcondition"} and len(report.findings) == 9
    f = report.findings[0]
    assert f.chunk == 0 and f.expected == "{0..1023}" and "missing {5}" in f.message
    assert "504 more chunks" in report.findings[-1].message


def test_trace_keeps_actions_apart_per_chunk() -> None:
    b = Builder()
    b.op(0, 0, OpKind.SEND, 1, [0, 1], None)
    b.op(0, 1, OpKind.RECV, 0, [0], Action.COPY)  # line 2: loses rank 1's part of chunk 0
    b.op(0, 1, OpKind.RECV, 0, [1], Action.REDUCE)
    b.xfer(1, 1, 0, [0, 1], Action.COPY)
    report = check(b.build(Collective.ALLREDUCE, 2, 2))
    assert codes(report) == ["postcondition"]
    f = report.findings[0]
    assert (f.chunk, f.rank, f.actual, f.step, f.span.line) == (0, 0, "{0}", 1, 5)


# --------------------------------------------------------------------------
# Against a naive reference simulator, on randomly mutated schedules
# --------------------------------------------------------------------------


def reference_codes(s: Schedule) -> set[str]:
    """The data-flow codes a plain Counter-per-slot simulation finds (matched, well-formed input)."""
    p, n = s.nranks, s.nchunks
    origin = chunk_origin(s.collective, p, n, s.root)
    dest = chunk_dest(s.collective, p, n, s.root)
    slots = {(r, c): Counter([r if origin[c] == EVERY else int(origin[c])]) for r in range(p) for c in range(n)}
    for r in range(p):
        for c in range(n):
            if origin[c] not in (EVERY, r):
                slots[r, c] = Counter()
    found: set[str] = set()
    for step in s.steps:
        sent: dict[tuple[int, int], set[int]] = {}
        got: dict[tuple[int, int, Action], set[int]] = {}
        moved: dict[tuple[OpKind, int, int], set[int]] = {}  # one message per chunk, pair and step
        for op in step.ops:
            seen = moved.setdefault((op.kind, op.rank, op.peer), set())
            if seen & set(op.chunks):
                found.add("duplicate-transfer")
            seen.update(op.chunks)
            if op.kind is OpKind.SEND:
                sent.setdefault((op.rank, op.peer), set()).update(op.chunks)
            else:
                assert op.action is not None
                got.setdefault((op.peer, op.rank, op.action), set()).update(op.chunks)
        writes: list[tuple[int, int, Action, Counter[int]]] = []
        for (src, dst), chunks in sent.items():
            for c in chunks:
                if not slots[src, c]:
                    found.add("send-not-held")
            for action in (Action.COPY, Action.REDUCE):
                for c in chunks & got.get((src, dst, action), set()):
                    writes.append((dst, c, action, Counter(slots[src, c])))
        per_slot: dict[tuple[int, int], list[Action]] = {}
        for dst, c, action, _ in writes:
            per_slot.setdefault((dst, c), []).append(action)
        if any(len(a) > 1 and Action.COPY in a for a in per_slot.values()):
            found.add("write-conflict")
        for dst, c, action, _ in writes:
            if action is Action.REDUCE and not slots[dst, c]:
                found.add("reduce-into-empty")
        for dst, c, action, value in sorted(writes, key=lambda w: w[2] is Action.REDUCE):
            slots[dst, c] = value if action is Action.COPY else slots[dst, c] + value
    for c in range(n):
        want = Counter(range(p)) if origin[c] == EVERY else Counter([int(origin[c])])
        bad = [slots[r, c] for r in range(p) if dest[c] in (EVERY, r) and slots[r, c] != want]
        if any(max(v.values(), default=0) > 1 for v in bad):
            found.add("double-count")
        if any(max(v.values(), default=0) <= 1 for v in bad):
            found.add("postcondition")
    return found


BASES: dict[str, Callable[[], Schedule]] = {
    "ring": lambda: ring_allreduce(4, k=2),
    "rab": lambda: rabenseifner(4, shuffle=True),
    "bcast": lambda: binomial_broadcast(5, 2, n=3),
    "reduce": lambda: binomial_reduce(5, 1, n=2),
    "alltoall": lambda: pairwise_alltoall(3),
    "rs": lambda: ring_reduce_scatter(5),
}


@settings(max_examples=300, deadline=None)
@given(base=st.sampled_from(sorted(BASES)), data=st.data())
def test_agrees_with_reference_on_mutants(base: str, data: st.DataObject) -> None:
    s = BASES[base]()
    for _ in range(data.draw(st.integers(1, 3))):
        pairs = [(st_.index, i) for st_ in s.steps for i, op in enumerate(st_.ops) if op.kind is OpKind.SEND]
        step, i = data.draw(st.sampled_from(pairs))
        send = s.steps[step].ops[i]
        recv = next(
            op
            for op in s.steps[step].ops
            if op.kind is OpKind.RECV and (op.rank, op.peer, op.chunks) == (send.peer, send.rank, send.chunks)
        )
        how = data.draw(st.sampled_from(["flip", "move", "drop-chunk", "other-chunk"]))
        if how == "flip":
            flip = Action.COPY if recv.action is Action.REDUCE else Action.REDUCE
            s, _ = replace_op(s, recv, action=flip)
            continue
        if how == "move":  # the whole transfer happens in another step
            target = data.draw(st.integers(0, len(s.steps) - 1))
            s = drop(s, send, recv)
            steps = list(s.steps)
            steps[target] = dataclasses.replace(steps[target], ops=(*steps[target].ops, send, recv))
            s = dataclasses.replace(s, steps=tuple(steps))
            continue
        c = data.draw(st.integers(0, s.nchunks - 1))
        one = ChunkSet.of([c])
        new = send.chunks - one if how == "drop-chunk" else send.chunks | one
        if not new:
            continue
        s = edit(
            s,
            lambda _, op, a=send, b=recv, x=new: [dataclasses.replace(op, chunks=x) if op in (a, b) else op],
        )
    report = check(s, max_findings=100)
    want = reference_codes(s)
    assert report.ok == (not want)
    assert set(codes(report)) == want
