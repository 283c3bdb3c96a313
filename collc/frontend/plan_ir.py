"""MSCCL-IR plans (`collc.frontend.msccl_plan`) as collc schedules (`collc.ir`), exactly or not at all.

A plan runs as threadblocks; a schedule is a list of steps in which every send
reads its rank's chunks as they were at the start of the step and every
receive lands at its end (copies first, then reductions).  `plan_to_schedule`
turns each message of the plan (the k-th send of a connection with its k-th
receive) into a send and a receive of one step, in one mode (in place, out of
place), and refuses, with a `CollError` naming the construct, GPU,
threadblock, step and line, any plan whose steps the schedule cannot mean
exactly (docs/plans.md, "Into collc's IR").

Chunks.  A schedule has one slot per (rank, logical chunk).  A location of
the input ``i`` or output ``o`` names a logical chunk by the collective's
layout (`collc.collectives`: allreduce ``i[c]``, ``o[c]``: chunk c;
allgather rank r's ``i[c]``: chunk ``r*k + c``; reduce-scatter rank r's
``o[c]``: chunk ``r*k + c``; alltoall rank r's ``i[d*k + j]``: chunk
``(r*p + d)*k + j`` and ``o[s*k + j]``: chunk ``(s*p + r)*k + j``), after the
in-place overlap of ``i`` and ``o``.  A scratch location names the chunk of
the value it holds: a received chunk, a chunk copied there.  A slot has a
sequence of *versions*: its input (or nothing), then one per receive that
writes it.  The plan is executed once (every threadblock in order, waiting for
its dependencies and its messages, connections unbounded) with, for each
location, the version it holds:

* ``r``/``rcs`` into ``i``/``o`` write a version (a copy); into scratch the
  value waits there: a later ``cpy`` to its chunk's place writes the version
  there (a copy), a later ``re`` into its chunk's place writes it as a
  reduction (the landing of a receive, put in place later), a send or
  reduction that reads it writes it where it is (a relay);
* ``rrc``/``rrcs``/``rrs`` write a version that reduces the received chunk
  into the version their source holds, which must be the slot's latest;
* ``cpy`` moves a version to another place of the same chunk (nothing in the
  schedule); ``nop`` only orders.

Refused: a message or a copy whose chunks differ on its two ends, a local
reduction of anything but a received chunk, a read of a location that holds
no version (an output before it is written, a scratch chunk nothing wrote or
whose value was reduced away), a received value never used, two writes of one
slot that the plan does not order, two accesses to one location, one a write,
that it does not order (a race), a write of the input out of place, steps that
wait for each other forever, and whatever breaks the format's rules that
decide what the steps mean (peers, connections, offsets, dependencies).

Steps.  A message's step is one more than the latest step of the messages
its send waits for (through its threadblock's order, its dependencies and
the messages those sent and received; with ``earliest``, none), and what the
steps mean constrains it further (a send reads its step's start, a receive
lands at its end): a send that reads a version comes after the receive that
wrote it and no later than the receive that writes the next one, wherever
the plan keeps the two (a receive landed in scratch and put in place later
goes where the values say); a write of a slot comes a step after a copy into
it, a copy a step after any write (reductions may share a step); two
messages between the same GPUs with a chunk in common take different steps.
Where waiting as the plan does contradicts these (a send that waits for a
receive reads an older value than the one it wrote), the steps are the
earliest; where nothing satisfies them, the plan is refused.  Finally the schedule is run
against the plan's values (symbolic sums of contributions): every send must
carry what the plan sends, every output end as the plan's, a reduction into an
empty slot happen where the plan's does, and no step write a slot twice; a
contribution the plan counts twice must reach an output, where collc's
verifier counts it.  The runtimes' limits and their connections' bounded
buffering are no part of a schedule: `collc.verify.plans` checks those.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from collc.collectives import EVERY, chunk_origin, layout_error
from collc.diagnostics import CollError
from collc.frontend.msccl_plan import Plan, PlanGpu, PlanStep, PlanTb, buffers_fit
from collc.ir import Action, ChunkSet, Collective, Op, OpKind, Schedule, Span, Step

__all__ = ["MODES", "plan_to_schedule"]

MODES = ("in place", "out of place")
COLLECTIVES = {
    "allreduce": Collective.ALLREDUCE,
    "allgather": Collective.ALLGATHER,
    "reducescatter": Collective.REDUCE_SCATTER,
    "alltoall": Collective.ALLTOALL,
}
SENDS = frozenset({"s", "rcs", "rrs", "rrcs"})
RECVS = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})
READS_SRC = frozenset({"s", "rrs", "rrc", "rrcs", "cpy", "re"})
WRITES_DST = frozenset({"r", "rcs", "rrc", "rrcs", "cpy", "re"})

Loc = tuple[int, str, int]  # (gpu, buffer, offset) after the in-place overlap
Value = tuple[int, ...] | None  # sorted contributions (gpu * nchunks + chunk), repeats kept; None: nothing
Node = tuple[int, int]  # (threadblock index over the plan, step)


@dataclass(frozen=True, slots=True)
class _Version:
    """A location holds version ``index`` of its GPU's slot for ``chunk``."""

    chunk: int
    index: int


@dataclass(frozen=True, slots=True)
class _Pending:
    """A scratch location holds element ``elem`` of message ``msg``, received and not yet a version."""

    msg: int
    elem: int


@dataclass(frozen=True, slots=True)
class _Nothing:
    """A location holds nothing the schedule can name; ``why`` says so in words."""

    why: str


Content = _Version | _Pending | _Nothing
_NOTHING = _Nothing("which nothing wrote: collc's IR has no value for it")


@dataclass(slots=True)
class _Message:
    src: int
    dst: int
    send: Node
    send_line: int
    send_where: str
    labels: list[int]
    values: list[Value]
    reads: list[int]  # per element: the version of the sender's slot it reads
    clock: np.ndarray  # the sender's vector clock when it sent
    recv: Node | None = None
    recv_line: int = 0
    recv_where: str = ""
    actions: list[Action | None] = field(default_factory=list)  # per element, once its version is written
    empty: list[bool] = field(default_factory=list)  # per element: a reduction into nothing, in the plan


@dataclass(frozen=True, slots=True)
class _Write:
    msg: int
    action: Action
    node: Node


def _refuse(plan: Plan, line: int, message: str) -> CollError:
    return CollError(f"{plan.where(line)}: {message}", Span(plan.file, line, 1, line, 1))


class _Layout:
    """Logical chunks of the input and output locations (see the module docstring)."""

    def __init__(self, plan: Plan, inplace: bool) -> None:
        self.coll, self.p, self.inplace = plan.coll, plan.ngpus, inplace
        g0 = plan.gpus[0]
        self.i, self.o = g0.i_chunks, g0.o_chunks
        self.n = {"allgather": self.o, "alltoall": self.p * self.i}.get(self.coll, self.i)
        self.collective = COLLECTIVES[self.coll]

    def loc(self, g: int, buf: str, off: int) -> Loc:
        if self.inplace:
            if self.coll == "allreduce" and buf == "i":
                return (g, "o", off)
            if self.coll == "allgather" and buf == "i":
                return (g, "o", g * self.i + off)
            if self.coll == "reducescatter" and buf == "o":
                return (g, "i", g * self.o + off)
        return (g, buf, off)

    def label(self, loc: Loc) -> int | None:
        g, buf, off = loc
        if buf == "i":
            return g * self.i + off if self.coll in ("allgather", "alltoall") else off
        if buf == "o":
            if self.coll == "reducescatter":
                return g * self.o + off
            if self.coll == "alltoall":
                k = self.o // self.p
                return (off // k * self.p + g) * k + off % k
            return off
        return None


def _merge(a: Value, b: Value) -> Value:
    """A reduction's value: the contributions of both (an empty operand adds nothing, as in collc's verifier)."""
    if a is None or b is None:
        return a if b is None else b
    return tuple(sorted(a + b))  # two sorted runs: merged in linear time


def _twice(v: Value) -> bool:
    return v is not None and len(set(v)) != len(v)


def _structure(plan: Plan, mode: str) -> None:
    """What decides what the steps mean: the mode, the buffers, peers, connections, offsets, dependencies."""
    if mode not in MODES:
        raise CollError(f"mode {mode!r}: a plan runs {' or '.join(MODES)}")
    if not (plan.inplace if mode == "in place" else plan.outofplace):
        raise _refuse(plan, 1, f"the plan does not say it runs {mode}")
    if plan.coll == "alltoall" and mode == "in place":
        raise _refuse(plan, 1, "an alltoall cannot run in place (its output would overwrite input others read)")
    if not plan.gpus:
        raise _refuse(plan, 1, "the plan has no GPUs")
    p, g0 = plan.ngpus, plan.gpus[0]
    i, o = g0.i_chunks, g0.o_chunks
    n = {"allgather": o, "alltoall": p * i}.get(plan.coll, i)
    problem = (
        None if buffers_fit(plan.coll, p, i, o) else f"i_chunks={i}, o_chunks={o} do not fit a {plan.coll} on {p} GPUs"
    )
    problem = problem or layout_error(COLLECTIVES[plan.coll], p, n)
    if problem:
        raise _refuse(plan, g0.line, f"gpu 0: {problem}")
    for g in plan.gpus:
        if (g.i_chunks, g.o_chunks) != (i, o):
            raise _refuse(plan, g.line, f"gpu {g.id} has i_chunks={g.i_chunks}, o_chunks={g.o_chunks}, gpu 0 "
                          f"{i} and {o}: collc's IR gives every rank the same chunks")  # fmt: skip
        sizes = {"i": i, "o": o, "s": g.s_chunks}
        ends: set[tuple[str, int, int]] = set()
        for tb in g.tbs:
            here = f"gpu {g.id}, threadblock {tb.id}"
            if tb.chan >= plan.nchannels:
                raise _refuse(plan, tb.line, f"{here}: channel {tb.chan} but nchannels={plan.nchannels}")
            for what, peer in (("send", tb.send), ("recv", tb.recv)):
                if peer >= p or peer == g.id:
                    raise _refuse(plan, tb.line, f"{here}: {what}={peer} is not another GPU of the {p}")
                if peer >= 0 and (what, peer, tb.chan) in ends:
                    raise _refuse(plan, tb.line, f"{here}: a second threadblock at gpu {g.id}'s end of the "
                                  f"connection {what} gpu {peer}, channel {tb.chan}")  # fmt: skip
                ends.add((what, peer, tb.chan))
            for st in tb.steps:
                at = f"{here}, step {st.s} ({st.type})"
                if (st.type in SENDS and tb.send < 0) or (st.type in RECVS and tb.recv < 0):
                    raise _refuse(plan, st.line, f"{at} needs a peer its threadblock does not have")
                if st.depid >= 0:
                    if st.depid >= len(g.tbs) or not 0 <= st.deps < len(g.tbs[st.depid].steps):
                        raise _refuse(plan, st.line, f"{at} depends on a step gpu {g.id} does not have")
                    if not g.tbs[st.depid].steps[st.deps].hasdep:
                        raise _refuse(plan, st.line, f"{at} depends on threadblock {st.depid}'s step {st.deps}, "
                                      "which has hasdep=0: the runtimes do not signal it")  # fmt: skip
                    if st.depid == tb.id and st.deps >= st.s:
                        raise _refuse(plan, st.line, f"{at} depends on a later step of its own threadblock")
                uses = ([(st.srcbuf, st.srcoff)] if st.type in READS_SRC else []) + (
                    [(st.dstbuf, st.dstoff)] if st.type in WRITES_DST or st.type == "re" else []
                )
                for buf, off in uses:
                    if off < 0 or off + st.cnt > sizes[buf]:
                        raise _refuse(plan, st.line, f"{at}: {buf}[{off}..{off + st.cnt - 1}] is beyond the "
                                      f"{sizes[buf]} chunks of {buf}")  # fmt: skip


class _Converter:
    """One plan in one mode: its execution, the versions, the steps and the check against the plan's values."""

    def __init__(self, plan: Plan, mode: str) -> None:
        self.plan, self.mode = plan, mode
        self.lay = lay = _Layout(plan, mode == "in place")
        self.tbs: list[tuple[PlanGpu, PlanTb]] = [(g, tb) for g in plan.gpus for tb in g.tbs]
        self.tb_index = {(g.id, tb.id): t for t, (g, tb) in enumerate(self.tbs)}
        self.messages: list[_Message] = []
        self.content: dict[Loc, Content] = {}
        self.values: dict[Loc, Value] = {}
        self.writes: dict[tuple[int, int], list[_Write]] = {}  # (gpu, chunk) -> its writes; version k is [k - 1]
        self.nodes: dict[Node, int] = {}  # every step, numbered in the order it ran
        self.node_msgs: list[tuple[int | None, int | None]] = []  # per step run: (message received, message sent)
        self.pending: dict[tuple[int, int], Loc] = {}  # (message, element) received into scratch, not a version yet
        self.last_write: dict[Loc, tuple[Node, str]] = {}
        self.reads_of: dict[Loc, list[tuple[Node, str]]] = {}
        self.twice: str | None = None  # where the plan first counts a contribution twice
        origin = chunk_origin(lay.collective, lay.p, lay.n, None)
        self.held = [[int(origin[c]) in (EVERY, g) for c in range(lay.n)] for g in range(lay.p)]
        for g in plan.gpus:
            for off in range(lay.i):
                at = lay.loc(g.id, "i", off)
                c = self.chunk(at)
                self.content[at] = _Version(c, 0)
                self.values[at] = (g.id * lay.n + c,)
            for off in range(lay.o):
                at = lay.loc(g.id, "o", off)
                c = self.chunk(at)
                if at not in self.content:  # out of place: empty, as the slot is when the rank has no input for it
                    held = self.held[g.id][c]
                    why = f"which nothing wrote yet, where collc's IR holds chunk {c}'s input"
                    self.content[at] = _Nothing(why) if held else _Version(c, 0)

    # -- locations, versions ---------------------------------------------------------------------------------

    def chunk(self, at: Loc) -> int:
        c = self.lay.label(at)
        assert c is not None
        return c

    def where(self, g: PlanGpu, tb: PlanTb, st: PlanStep) -> str:
        return f"gpu {g.id}, threadblock {tb.id}, step {st.s} ({st.type}, line {st.line})"

    @staticmethod
    def name(at: Loc) -> str:
        return f"gpu {at[0]}'s {at[1]}[{at[2]}]"

    def access(self, at: Loc, write: bool, node: Node, clock: np.ndarray, where: str, line: int) -> None:
        """Two accesses to one location, one a write, must be ordered by the plan (the schedule's steps would
        order them, the runtimes do not)."""
        earlier = [self.last_write[at]] if at in self.last_write else []
        if write:
            earlier += self.reads_of.get(at, [])
        for (t, s), other in earlier:
            if (t, s) != node and clock[t] <= s:
                raise _refuse(self.plan, line, f"{where} {'writes' if write else 'reads'} {self.name(at)} and "
                              f"{other} accesses it, with nothing ordering the two (a race): collc's IR would "
                              "put them in steps one after the other")  # fmt: skip
        if write:
            self.last_write[at] = (node, where)
            self.reads_of[at] = []
        else:
            self.reads_of.setdefault(at, []).append((node, where))

    def commit(self, g: int, c: int, msg: int, elem: int, action: Action, operand: int | None, empty: bool,
               ctx: tuple[Node, np.ndarray, str, int]) -> int:  # fmt: skip
        """A new version of gpu g's slot for chunk c, written by element ``elem`` of message ``msg`` as a copy or a
        reduction into version ``operand``: its index."""
        node, clock, where, line = ctx
        writes = self.writes.setdefault((g, c), [])
        if writes:
            last = writes[-1]
            t, s = last.node
            if last.node != node and clock[t] <= s:
                raise _refuse(self.plan, line, f"{where} writes gpu {g}'s chunk {c}, and so does the receive at "
                              f"line {self.messages[last.msg].recv_line}, with nothing ordering the two: "
                              "collc's IR holds one value per chunk and would order them")  # fmt: skip
        if action is Action.REDUCE and operand != len(writes):
            raise _refuse(self.plan, line, f"{where} reduces into an older value of gpu {g}'s chunk {c} than the "
                          f"latest (written at line {self.messages[writes[-1].msg].recv_line}): collc's "
                          "IR reduces into a chunk's one value")  # fmt: skip
        writes.append(_Write(msg, action, node))
        m = self.messages[msg]
        m.actions[elem], m.empty[elem] = action, empty
        return len(writes)

    def settle(self, at: Loc, ctx: tuple[Node, np.ndarray, str, int]) -> _Version:
        """The version a location holds; a received value waiting in scratch becomes one where it is (a relay)."""
        held = self.content.get(at, _NOTHING)
        if isinstance(held, _Pending):
            c = self.messages[held.msg].labels[held.elem]
            k = self.commit(at[0], c, held.msg, held.elem, Action.COPY, None, False, ctx)
            del self.pending[(held.msg, held.elem)]
            held = self.content[at] = _Version(c, k)
        if isinstance(held, _Nothing):
            raise _refuse(self.plan, ctx[3], f"{ctx[2]} reads {self.name(at)}, {held.why}")
        return held

    def place(self, at: Loc, c: int, what: str, ctx: tuple[Node, np.ndarray, str, int]) -> None:
        """Chunk c may go to ``at``: scratch, or the place of chunk c (a scratch location's version too)."""
        own = self.lay.label(at)
        held = self.content.get(at)
        if own is None and isinstance(held, _Version) and what == "reduces":
            own = held.chunk
        if own is not None and own != c:
            raise _refuse(self.plan, ctx[3], f"{ctx[2]} {what} chunk {c} into {self.name(at)}, which holds chunk "
                          f"{own}: collc's IR moves and reduces a chunk into the same chunk only")  # fmt: skip

    def store(self, at: Loc, content: Content, value: Value) -> None:
        old = self.content.get(at)
        if isinstance(old, _Pending) and (old.msg, old.elem) in self.pending:
            m = self.messages[old.msg]
            raise _refuse(self.plan, m.recv_line, f"{m.recv_where} receives chunk {m.labels[old.elem]} into "
                          f"{self.name(at)}, which is overwritten before anything uses it: collc's IR puts every "
                          "received chunk in its place")  # fmt: skip
        self.content[at] = content
        self.values[at] = value

    def reduced(self, a: Value, b: Value, where: str) -> Value:
        out = _merge(a, b)
        if self.twice is None and _twice(out):
            self.twice = where
        return out

    # -- the execution ---------------------------------------------------------------------------------------

    def execute(self) -> None:
        plan, tbs = self.plan, self.tbs
        ntb = len(tbs)
        pcs = [0] * ntb
        clocks = [np.zeros(ntb, dtype=np.int32) for _ in range(ntb)]
        wanted = {(self.tb_index[(g.id, st.depid)], st.deps) for g, tb in tbs for st in tb.steps if st.depid >= 0}
        kept: dict[Node, np.ndarray] = {}
        queues: dict[tuple[int, int, int], deque[int]] = {}
        moved = True
        while moved:
            moved = False
            for t, (g, tb) in enumerate(tbs):
                while pcs[t] < len(tb.steps):
                    st = tb.steps[pcs[t]]
                    clock = clocks[t].copy()
                    if st.depid >= 0:
                        d = self.tb_index[(g.id, st.depid)]
                        if pcs[d] <= st.deps:
                            break
                        np.maximum(clock, kept[(d, st.deps)], out=clock)
                    got = None
                    if st.type in RECVS:
                        inbox = queues.get((tb.recv, g.id, tb.chan))
                        if not inbox:
                            break
                        got = inbox.popleft()
                        np.maximum(clock, self.messages[got].clock, out=clock)
                    clock[t] = st.s + 1
                    self.nodes[(t, st.s)] = len(self.node_msgs)
                    sent = self.step(g, tb, st, (t, st.s), clock, got)
                    self.node_msgs.append((got, sent))
                    if sent is not None:
                        queues.setdefault((g.id, tb.send, tb.chan), deque()).append(sent)
                    clocks[t] = clock
                    if (t, st.s) in wanted:
                        kept[(t, st.s)] = clock
                    pcs[t] += 1
                    moved = True
        stuck = [(g, tb, tb.steps[pcs[t]]) for t, (g, tb) in enumerate(tbs) if pcs[t] < len(tb.steps)]
        if stuck:
            g, tb, st = stuck[0]
            raise _refuse(plan, st.line, f"{self.where(g, tb, st)} waits forever, even with connections that buffer "
                          f"everything ({len(stuck)} threadblock(s) wait): the plan deadlocks")  # fmt: skip
        for (src, dst, chan), queue in queues.items():
            if queue:
                m = self.messages[queue[0]]
                raise _refuse(plan, m.send_line, f"gpu {src} sends gpu {dst} {len(queue)} message(s) on channel "
                              f"{chan} that no step receives (the first: {m.send_where})")  # fmt: skip
        if self.pending:
            (msg, elem), at = next(iter(self.pending.items()))
            m = self.messages[msg]
            raise _refuse(plan, m.recv_line, f"{m.recv_where} receives chunk {m.labels[elem]} into {self.name(at)} "
                          "and nothing uses it: collc's IR puts every received chunk in its place")  # fmt: skip

    def step(self, g: PlanGpu, tb: PlanTb, st: PlanStep, node: Node, clock: np.ndarray, got: int | None) -> int | None:
        """Runs one step: its accesses, versions and values; the message it sends, if any."""
        lay, kind = self.lay, st.type
        where = self.where(g, tb, st)
        ctx = (node, clock, where, st.line)
        src = [lay.loc(g.id, st.srcbuf, st.srcoff + j) for j in range(st.cnt)]
        dst = [lay.loc(g.id, st.dstbuf, st.dstoff + j) for j in range(st.cnt)]
        if kind in WRITES_DST and not lay.inplace and any(at[1] == "i" for at in dst):
            raise _refuse(self.plan, st.line, f"{where} writes gpu {g.id}'s input buffer i out of place, where the "
                          "caller's send buffer is read-only")  # fmt: skip
        for at in src if kind in READS_SRC else []:
            self.access(at, False, node, clock, where, st.line)
        for at in dst if kind == "re" else []:
            self.access(at, False, node, clock, where, st.line)
        for at in dst if kind in WRITES_DST else []:
            self.access(at, True, node, clock, where, st.line)
        m = None
        if got is not None:
            m = self.messages[got]
            if len(m.labels) != st.cnt:
                raise _refuse(self.plan, st.line, f"{where} receives {st.cnt} chunk(s), but the matching send "
                              f"({m.send_where}) sends {len(m.labels)}")  # fmt: skip
            m.recv, m.recv_line, m.recv_where = node, st.line, where
            m.actions, m.empty = [None] * st.cnt, [False] * st.cnt
        out: list[tuple[int, Value, int]] = []  # what the step sends: (chunk, value, version read)
        for j in range(st.cnt):
            if kind == "s":
                v = self.settle(src[j], ctx)
                out.append((v.chunk, self.values.get(src[j]), v.index))
            elif kind in ("r", "rcs"):
                assert m is not None and got is not None
                c, value = m.labels[j], m.values[j]
                self.place(dst[j], c, "receives", ctx)
                if dst[j][1] == "s":
                    self.store(dst[j], _Pending(got, j), value)
                    self.pending[(got, j)] = dst[j]
                else:
                    k = self.commit(g.id, c, got, j, Action.COPY, None, False, ctx)
                    self.store(dst[j], _Version(c, k), value)
                if kind == "rcs":
                    out.append((c, value, self.settle(dst[j], ctx).index))
            elif kind in ("rrc", "rrcs", "rrs"):
                assert m is not None and got is not None
                c = m.labels[j]
                v = self.settle(src[j], ctx)
                if v.chunk != c:
                    raise _refuse(self.plan, st.line, f"{where} reduces chunk {c}, received from gpu {m.src}, with "
                                  f"{self.name(src[j])}, which holds chunk {v.chunk}: collc's IR reduces a chunk "
                                  "into the same chunk only")  # fmt: skip
                operand = self.values.get(src[j])
                value = self.reduced(operand, m.values[j], where)
                k = self.commit(g.id, c, got, j, Action.REDUCE, v.index, operand is None, ctx)
                if kind != "rrs":
                    self.place(dst[j], c, "writes", ctx)
                    self.store(dst[j], _Version(c, k), value)
                if kind != "rrc":
                    out.append((c, value, k))
            elif kind == "cpy":
                self.copy(src[j], dst[j], ctx)
            elif kind == "re":
                self.local_reduce(src[j], dst[j], ctx)
        if kind not in SENDS:
            return None
        chunks = [c for c, _, _ in out]
        if len(set(chunks)) != len(chunks):
            raise _refuse(self.plan, st.line, f"{where} sends chunk {chunks[0]} twice in one message")
        self.messages.append(_Message(g.id, tb.send, node, st.line, where, chunks, [v for _, v, _ in out],
                                      [k for _, _, k in out], clock))  # fmt: skip
        return len(self.messages) - 1

    def copy(self, src: Loc, dst: Loc, ctx: tuple[Node, np.ndarray, str, int]) -> None:
        """``cpy``: a received value in scratch is written as a version (a copy), which moves to a place of its
        chunk; so does a version."""
        v = self.settle(src, ctx)
        self.place(dst, v.chunk, "copies", ctx)
        self.store(dst, v, self.values.get(src))

    def local_reduce(self, src: Loc, dst: Loc, ctx: tuple[Node, np.ndarray, str, int]) -> None:
        """``re``: only a received value waiting in scratch, reduced into its chunk's version (a landing)."""
        held = self.content.get(src, _NOTHING)
        if isinstance(held, _Nothing):
            self.settle(src, ctx)  # refused: nothing to reduce
        if not isinstance(held, _Pending):
            raise _refuse(self.plan, ctx[3], f"{ctx[2]} reduces {self.name(src)} into {self.name(dst)} locally: "
                          "collc's IR reduces only as a chunk is received (here: a received chunk waiting in "
                          "scratch, reduced into its place)")  # fmt: skip
        c = self.messages[held.msg].labels[held.elem]
        self.place(dst, c, "reduces", ctx)
        v = self.settle(dst, ctx)
        self.place(dst, c, "reduces", ctx)
        operand = self.values.get(dst)
        value = self.reduced(operand, self.values.get(src), ctx[2])
        k = self.commit(dst[0], c, held.msg, held.elem, Action.REDUCE, v.index, operand is None, ctx)
        del self.pending[(held.msg, held.elem)]
        self.content[src] = _Nothing(f"whose received value was reduced into {self.name(dst)} at line {ctx[3]}: "
                                     "collc's IR keeps no copy of it")  # fmt: skip
        self.store(dst, _Version(c, k), value)

    # -- the steps -------------------------------------------------------------------------------------------

    def layers(self, by_dependencies: bool) -> list[int]:
        """Each message's step: the longest path over the constraints of the module docstring (without the
        dependencies of sends on the messages before them when ``by_dependencies`` is False)."""
        msgs, nm = self.messages, len(self.messages)
        adj: list[list[tuple[int, int, str]]] = [[] for _ in range(nm + len(self.node_msgs))]

        def edge(u: int, v: int, w: int, why: str) -> None:
            adj[u].append((v, w, why))

        for t, (g, tb) in enumerate(self.tbs if by_dependencies else ()):
            for st in tb.steps:  # vertex nm + x: the latest step of a message of step x or one it waits for
                x = nm + self.nodes[(t, st.s)]
                before = [nm + self.nodes[(t, st.s - 1)]] if st.s > 0 else []
                if st.depid >= 0:
                    before.append(nm + self.nodes[(self.tb_index[(g.id, st.depid)], st.deps)])
                for m in self.node_msgs[x - nm]:
                    if m is not None:
                        edge(m, x, 0, "")
                got, sent = self.node_msgs[x - nm]
                if got is not None:
                    before.append(nm + self.nodes[msgs[got].send])
                for b in before:
                    edge(b, x, 0, "")
                    if sent is not None:
                        edge(b, sent, 1, "its send waits for the other's step")
                if got is not None and sent is not None:
                    edge(got, sent, 1, "it sends on what the other brought")
        for (g, c), writes in self.writes.items():
            for a, b in itertools.pairwise(writes):
                both = a.action is Action.REDUCE and b.action is Action.REDUCE
                edge(a.msg, b.msg, 0 if both else 1, f"its receive writes gpu {g}'s chunk {c} after the other's")
        pairs: dict[tuple[int, int, int], int] = {}
        for i, m in enumerate(msgs):
            for c, k in zip(m.labels, m.reads, strict=True):
                writes = self.writes.get((m.src, c), [])
                if k >= 1:
                    edge(writes[k - 1].msg, i, 1, f"it sends gpu {m.src}'s chunk {c} as the other's receive wrote it")
                if k < len(writes):
                    edge(i, writes[k].msg, 0, "")
                prev = pairs.get((m.src, m.dst, c))
                if prev is not None:
                    edge(prev, i, 1, f"both go from gpu {m.src} to gpu {m.dst} with chunk {c}")
                pairs[(m.src, m.dst, c)] = i
        comp, ncomp = _components(adj)
        for u, out in enumerate(adj):
            for v, w, why in out:
                if w and comp[u] == comp[v]:
                    raise self.tangle(u, v, why, nm)
        layer = [0] * ncomp
        for u in sorted(range(len(adj)), key=lambda u: -comp[u]):
            for v, w, _ in adj[u]:
                if comp[v] != comp[u] and layer[comp[u]] + w > layer[comp[v]]:
                    layer[comp[v]] = layer[comp[u]] + w
        used = sorted({layer[comp[i]] for i in range(nm)})
        rank = {x: k for k, x in enumerate(used)}
        return [rank[layer[comp[i]]] for i in range(nm)]

    def tangle(self, u: int, v: int, why: str, nm: int) -> CollError:
        def said(x: int) -> str:
            return f"the message sent at {self.messages[x].send_where}" if x < nm else "a step"

        line = self.messages[v].send_line if v < nm else 1
        return _refuse(self.plan, line, f"collc's IR steps cannot order the plan's messages: {said(v)} must come "
                       f"in a later step than {said(u)} ({why}), and what it reads, writes or waits for puts it "
                       "no later (a chunk read at an older value after the plan wrote a newer one where collc's IR "
                       "keeps it)")  # fmt: skip

    def schedule(self, layers: list[int]) -> Schedule:
        plan, lay = self.plan, self.lay
        nsteps = max(layers, default=-1) + 1
        by_step: list[list[int]] = [[] for _ in range(nsteps)]
        for i, k in enumerate(layers):
            by_step[k].append(i)
        self.run(by_step)

        def span(line: int) -> Span:
            return Span(plan.file, line, 1, line, 1)

        steps = []
        for k, ids in enumerate(by_step):
            ops: list[Op] = []
            for i in ids:
                m = self.messages[i]
                ops.append(Op(m.src, OpKind.SEND, m.dst, ChunkSet.of(m.labels), None, span(m.send_line)))
                for action in (Action.COPY, Action.REDUCE):
                    chunks = [c for c, a in zip(m.labels, m.actions, strict=True) if a is action]
                    if chunks:
                        ops.append(Op(m.dst, OpKind.RECV, m.src, ChunkSet.of(chunks), action, span(m.recv_line)))
            steps.append(Step(k, "plan", tuple(ops)))
        return Schedule(plan.name, lay.collective, (("p", lay.p),), lay.p, lay.n, None, tuple(steps), plan.file,
                        span(1))  # fmt: skip

    def run(self, by_step: list[list[int]]) -> None:
        """The schedule's steps against the plan's values (see the module docstring)."""
        lay = self.lay
        n = lay.n
        state: dict[tuple[int, int], Value] = {}

        def value(g: int, c: int) -> Value:
            return state[(g, c)] if (g, c) in state else ((g * n + c,) if self.held[g][c] else None)

        for k, ids in enumerate(by_step):
            for i in ids:
                m = self.messages[i]
                for c, sent in zip(m.labels, m.values, strict=True):
                    have = value(m.src, c)
                    if have != sent:
                        raise _refuse(self.plan, m.send_line, f"{m.send_where} sends chunk {c} as {self.said(sent)}, "
                                      f"but in the schedule's step {k} gpu {m.src}'s chunk {c} holds "
                                      f"{self.said(have)}")  # fmt: skip
            copied: dict[tuple[int, int], int] = {}
            reduced: dict[tuple[int, int], list[tuple[int, int]]] = {}
            for i in ids:
                m = self.messages[i]
                for j, (c, a) in enumerate(zip(m.labels, m.actions, strict=True)):
                    assert a is not None
                    slot = (m.dst, c)
                    if slot in copied or (a is Action.COPY and slot in reduced):
                        raise _refuse(
                            self.plan,
                            m.recv_line,
                            f"{m.recv_where} writes gpu {m.dst}'s chunk {c} in the "
                            f"schedule's step {k}, as another receive of that step does (a conflict)",
                        )
                    if a is Action.COPY:
                        copied[slot] = i
                        state[slot] = m.values[j]
                    else:
                        reduced.setdefault(slot, []).append((i, j))
            for (g, c), got in reduced.items():
                empty = value(g, c) is None
                for i, j in got:
                    m = self.messages[i]
                    if m.empty[j] != empty and (empty or not any(self.messages[x].empty[y] for x, y in got)):
                        raise _refuse(self.plan, m.recv_line, f"{m.recv_where} reduces into gpu {g}'s chunk {c}, "
                                      f"which {'holds nothing' if empty else 'holds a value'} in the schedule's "
                                      f"step {k} but {'a value' if empty else 'nothing'} in the plan")  # fmt: skip
                    state[(g, c)] = _merge(value(g, c), m.values[j])
        outputs_twice = False
        for g in range(lay.p):
            for off in range(lay.o):
                at = lay.loc(g, "o", off)
                c = self.chunk(at)
                mine, theirs = self.values.get(at), value(g, c)
                outputs_twice = outputs_twice or _twice(mine)
                if mine != theirs:
                    raise _refuse(self.plan, self.plan.gpus[g].line, f"gpu {g}'s output o[{off}] ends as "
                                  f"{self.said(mine)} in the plan, but its chunk {c} as {self.said(theirs)} in the "
                                  f"schedule: {self.why_apart(at, c)}")  # fmt: skip
        if self.twice is not None and not outputs_twice:
            raise _refuse(self.plan, 1, f"{self.twice} counts a contribution twice in a value no output keeps: "
                          "collc's verifier counts contributions at the outputs")  # fmt: skip

    def said(self, v: Value) -> str:
        if v is None:
            return "nothing"
        n = self.lay.n
        parts = [f"gpu {x // n} chunk {x % n}" for x in v[:3]]
        return "{" + ", ".join(parts) + (f", ... ({len(v)})" if len(v) > 3 else "") + "}"

    def why_apart(self, at: Loc, c: int) -> str:
        held = self.content.get(at)
        last = len(self.writes.get((at[0], c), []))
        if isinstance(held, _Nothing):
            return f"the plan never writes it, and collc's IR keeps chunk {c}'s input there"
        if isinstance(held, _Version) and held.index < last:
            w = self.messages[self.writes[(at[0], c)][-1].msg]
            return (f"it keeps an older value of chunk {c} than the one received at line {w.recv_line}, "
                    "and collc's IR keeps one value per chunk")  # fmt: skip
        return "collc's IR keeps one value per chunk"


def _components(adj: list[list[tuple[int, int, str]]]) -> tuple[list[int], int]:
    """Strongly connected components (Tarjan's, iteratively), numbered sinks first."""
    n = len(adj)
    index, low, comp = [-1] * n, [0] * n, [-1] * n
    on = [False] * n
    stack: list[int] = []
    counter = ncomp = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on[root] = True
        work = [(root, 0)]
        while work:
            v, i = work[-1]
            if i < len(adj[v]):
                work[-1] = (v, i + 1)
                u = adj[v][i][0]
                if index[u] < 0:
                    index[u] = low[u] = counter
                    counter += 1
                    stack.append(u)
                    on[u] = True
                    work.append((u, 0))
                elif on[u]:
                    low[v] = min(low[v], index[u])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                while True:
                    x = stack.pop()
                    on[x] = False
                    comp[x] = ncomp
                    if x == v:
                        break
                ncomp += 1
    return comp, ncomp


def plan_to_schedule(plan: Plan, mode: str, *, earliest: bool = False) -> Schedule:
    """The plan's messages as a `Schedule` in ``mode`` ("in place" or "out of place"), meaning exactly what the
    plan's steps compute; a `CollError` naming the construct, GPU, threadblock, step and line when no schedule
    does (see the module docstring).  ``earliest``: each message in the earliest step that what it reads and
    writes allows, without the dependencies of its send on the messages before it."""
    _structure(plan, mode)
    conv = _Converter(plan, mode)
    conv.execute()
    try:
        layers = conv.layers(not earliest)
    except CollError:  # a send that waits for a receive reads an older value than the one it wrote
        layers = conv.layers(False)
    return conv.schedule(layers)
