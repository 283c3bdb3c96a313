"""The step tables that the MPI executors embed are exactly the verified IR, regrouped per rank."""

from __future__ import annotations

import itertools

import pytest

import collc
from collc.backends import tables
from collc.ir import Action, OpKind, Schedule

CASES = [
    ("ring_allreduce", {"p": 5}),
    ("ring_allgather", {"p": 4, "k": 2}),
    ("ring_reduce_scatter", {"p": 3}),
    ("swing_bw", {"p": 16}),
    ("swing_bw", {"p": 6}),
    ("swing_lat", {"p": 8}),
    ("rabenseifner", {"p": 12}),
    ("recursive_doubling_any", {"p": 7}),
    ("binomial_broadcast", {"p": 9, "root": 4}),
    ("binomial_reduce", {"p": 6, "root": 1}),
    ("bruck_allgather", {"p": 5}),
    ("pairwise_alltoall", {"p": 4}),
]


def ir_facts(schedule: Schedule) -> set[tuple[int, int, int, int, str]]:
    """(step, src, dst, chunk, action) straight from the IR's ops, chunk by chunk."""
    facts = set()
    for step in schedule.steps:
        for op in step.ops:
            for c in op.chunks.ids().tolist():
                if op.kind is OpKind.SEND:
                    facts.add((step.index, op.rank, op.peer, c, "send"))
                else:
                    action = "reduce" if op.action is Action.REDUCE else "copy"
                    facts.add((step.index, op.peer, op.rank, c, action))
    return facts


@pytest.mark.parametrize(("name", "params"), CASES, ids=[f"{n}-{p}" for n, p in CASES])
def test_tables_round_trip(name: str, params: dict[str, int]) -> None:
    inst = collc.load(name).instantiate(**params)
    assert inst.verify().ok
    t = tables.from_schedule(inst.schedule)
    assert tables.transfers(t) == ir_facts(inst.schedule)
    assert t.nranks == inst.schedule.nranks and t.nchunks == inst.schedule.nchunks
    for rank, steps in enumerate(t.ranks):
        assert [s.step for s in steps] == sorted({s.step for s in steps})
        for rs in steps:
            assert [m.peer for m in rs.sends] == sorted({m.peer for m in rs.sends})
            assert [m.peer for m in rs.recvs] == sorted({m.peer for m in rs.recvs})
            for m in rs.sends + rs.recvs:
                assert m.peer != rank
                bounds = [(r.lo, r.hi) for r in m.runs]
                assert all(lo < hi for lo, hi in bounds)
                assert all(a[1] <= b[0] for a, b in itertools.pairwise(bounds))


def test_every_message_is_received_with_the_same_layout() -> None:
    """Both ends of every message agree on its chunks, so the payload needs no header."""
    t = tables.from_schedule(collc.load("swing_bw").instantiate(p=12).schedule)
    sent = {
        (rs.step, r, m.peer): [(x.lo, x.hi) for x in m.runs]
        for r, steps in enumerate(t.ranks)
        for rs in steps
        for m in rs.sends
    }
    got = {}
    for r, steps in enumerate(t.ranks):
        for rs in steps:
            for m in rs.recvs:
                ids = [c for x in m.runs for c in range(x.lo, x.hi)]
                got[(rs.step, m.peer, r)] = ids
    assert set(sent) == set(got)
    for key, runs in sent.items():
        assert [c for lo, hi in runs for c in range(lo, hi)] == got[key]


def test_direct_receives_do_not_overlap_the_ranks_own_sends() -> None:
    t = tables.from_schedule(collc.load("ring_allreduce").instantiate(p=4).schedule)
    directs = 0
    for steps in t.ranks:
        for rs in steps:
            sent = {c for m in rs.sends for x in m.runs for c in range(x.lo, x.hi)}
            for m in rs.recvs:
                if m.direct:
                    directs += 1
                    assert len(m.runs) == 1 and not m.runs[0].reduce
                    assert sent.isdisjoint(range(m.runs[0].lo, m.runs[0].hi))
    assert directs == 4 * 3  # the allgather phase: p ranks, p - 1 steps


def test_phases_cover_the_steps_in_order() -> None:
    t = tables.from_schedule(collc.load("ring_allreduce").instantiate(p=4).schedule)
    assert [(ph.name, ph.first, ph.last) for ph in t.phases] == [("reduce_scatter", 0, 2), ("allgather", 3, 5)]
    assert all(line.rsplit(":", 1)[0].endswith("ring.coll") for ph in t.phases for line in ph.lines)
