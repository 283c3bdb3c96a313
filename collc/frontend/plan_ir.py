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

from collections import deque
from dataclasses import dataclass

import numpy as np

from collc.collectives import layout_error
from collc.diagnostics import CollError
from collc.frontend.msccl_plan import Plan, PlanGpu, PlanStep, PlanTb, buffers_fit
from collc.frontend.plan_schedule import (
    COLLECTIVES,
    NOTHING,
    Constraints,
    Ctx,
    Loc,
    Message,
    Node,
    Nothing,
    Pending,
    PlanConversion,
    Site,
    Value,
    Version,
    Wording,
    refusal,
)
from collc.ir import Action, Schedule

__all__ = ["MODES", "plan_to_schedule"]

MODES = ("in place", "out of place")
SENDS = frozenset({"s", "rcs", "rrs", "rrcs"})
RECVS = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})
READS_SRC = frozenset({"s", "rrs", "rrc", "rrcs", "cpy", "re"})
WRITES_DST = frozenset({"r", "rcs", "rrc", "rrcs", "cpy", "re"})
WORDING = Wording(
    named="{where}",
    writer="the receive",
    lands="receives",
    written="received",
    fellow="receive",
    missent="sends chunk {c} as {sent}, but in the schedule's step {k} gpu {src}'s chunk {c} holds {have}",
    rewrites="its receive writes gpu {g}'s chunk {c} after the other's",
    reads="it sends gpu {src}'s chunk {c} as the other's receive wrote it",
    repeats="both go from gpu {src} to gpu {dst} with chunk {c}",
)


@dataclass(slots=True, kw_only=True)
class _Message(Message):
    """A message of a connection: its send runs at node ``send``, with the sender's vector clock ``clock``; its
    receive sets ``landed`` and the elements' actions."""

    send: Node
    clock: np.ndarray


def _refuse(plan: Plan, line: int, message: str) -> CollError:
    return refusal(plan.file, line, message)


class _Layout:
    """Logical chunks of the input and output locations (see the module docstring)."""

    def __init__(self, plan: Plan, inplace: bool) -> None:
        self.coll, self.p, self.inplace = plan.coll, plan.ngpus, inplace
        g0 = plan.gpus[0]
        self.i, self.o = g0.i_chunks, g0.o_chunks
        self.n = {"allgather": self.o, "alltoall": self.p * self.i}.get(self.coll, self.i)
        self.parts = 1  # a chunk of the plan is one chunk of the schedule
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


class _Converter(PlanConversion[_Message]):
    """One plan in one mode: its execution, then (`PlanConversion`) the steps and the check against its values."""

    def __init__(self, plan: Plan, mode: str) -> None:
        super().__init__(plan.file, plan.name, _Layout(plan, mode == "in place"), WORDING)
        self.plan, self.mode = plan, mode
        self.tbs: list[tuple[PlanGpu, PlanTb]] = [(g, tb) for g in plan.gpus for tb in g.tbs]
        self.tb_index = {(g.id, tb.id): t for t, (g, tb) in enumerate(self.tbs)}
        self.nodes: dict[Node, int] = {}  # every step, numbered in the order it ran
        self.node_msgs: list[tuple[int | None, int | None]] = []  # per step run: (message received, message sent)

    # -- what the format says --------------------------------------------------------------------------------

    def where(self, g: PlanGpu, tb: PlanTb, st: PlanStep) -> str:
        return f"gpu {g.id}, threadblock {tb.id}, step {st.s} ({st.type}, line {st.line})"

    def name(self, at: Loc) -> str:
        return f"gpu {at[0]}'s {at[1]}[{at[2]}]"

    def gpu_at(self, g: int) -> tuple[int, str]:
        return self.plan.gpus[g].line, ""

    def refuse_twice(self, ctx: Ctx, message: str) -> CollError:
        return self.refuse(Site(ctx.where, 1), message)  # at the plan's first line: the plan's values as a whole

    def tangle(self, u: int, v: int, why: str, nm: int) -> CollError:
        def said(x: int) -> str:
            return f"the message sent at {self.messages[x].sent.where}" if x < nm else "a step"

        line = self.messages[v].sent.line if v < nm else 1
        return _refuse(self.plan, line, f"collc's IR steps cannot order the plan's messages: {said(v)} must come "
                       f"in a later step than {said(u)} ({why}), and what it reads, writes or waits for puts it "
                       "no later (a chunk read at an older value after the plan wrote a newer one where collc's IR "
                       "keeps it)")  # fmt: skip

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
                    sent = self.step(g, tb, st, Ctx((t, st.s), clock, self.where(g, tb, st), st.line), got)
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
                raise _refuse(plan, m.sent.line, f"gpu {src} sends gpu {dst} {len(queue)} message(s) on channel "
                              f"{chan} that no step receives (the first: {m.sent.where})")  # fmt: skip
        self.check_used()

    def step(self, g: PlanGpu, tb: PlanTb, st: PlanStep, ctx: Ctx, got: int | None) -> int | None:
        """Runs one step: its accesses, versions and values; the message it sends, if any."""
        lay, kind, where = self.lay, st.type, ctx.where
        src = [lay.loc(g.id, st.srcbuf, st.srcoff + j) for j in range(st.cnt)]
        dst = [lay.loc(g.id, st.dstbuf, st.dstoff + j) for j in range(st.cnt)]
        if kind in WRITES_DST and not lay.inplace and any(at[1] == "i" for at in dst):
            raise _refuse(self.plan, st.line, f"{where} writes gpu {g.id}'s input buffer i out of place, where the "
                          "caller's send buffer is read-only")  # fmt: skip
        for at in src if kind in READS_SRC else []:
            self.access(at, False, ctx)
        for at in dst if kind == "re" else []:
            self.access(at, False, ctx)
        for at in dst if kind in WRITES_DST else []:
            self.access(at, True, ctx)
        m = None
        if got is not None:
            m = self.messages[got]
            if len(m.labels) != st.cnt:
                raise _refuse(self.plan, st.line, f"{where} receives {st.cnt} chunk(s), but the matching send "
                              f"({m.sent.where}) sends {len(m.labels)}")  # fmt: skip
            m.landed = ctx.site
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
                    self.store(dst[j], Pending(got, j), value)
                    self.pending[(got, j)] = dst[j]
                else:
                    k = self.commit(g.id, c, got, j, Action.COPY, None, False, ctx)
                    self.store(dst[j], Version(c, k), value)
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
                value = self.reduced(operand, m.values[j], ctx)
                k = self.commit(g.id, c, got, j, Action.REDUCE, v.index, operand is None, ctx)
                if kind != "rrs":
                    self.place(dst[j], c, "writes", ctx)
                    self.store(dst[j], Version(c, k), value)
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
        self.messages.append(_Message(src=g.id, dst=tb.send, sent=ctx.site, landed=Site("", 0), labels=chunks,
                                      values=[v for _, v, _ in out], reads=[k for _, _, k in out], send=ctx.node,
                                      clock=ctx.clock))  # landed: on its receive  # fmt: skip
        return len(self.messages) - 1

    def copy(self, src: Loc, dst: Loc, ctx: Ctx) -> None:
        """``cpy``: a received value in scratch is written as a version (a copy), which moves to a place of its
        chunk; so does a version."""
        v = self.settle(src, ctx)
        self.place(dst, v.chunk, "copies", ctx)
        self.store(dst, v, self.values.get(src))

    def local_reduce(self, src: Loc, dst: Loc, ctx: Ctx) -> None:
        """``re``: only a received value waiting in scratch, reduced into its chunk's version (a landing)."""
        held = self.content.get(src, NOTHING)
        if isinstance(held, Nothing):
            self.settle(src, ctx)  # refused: nothing to reduce
        if not isinstance(held, Pending):
            raise self.refuse(ctx, f"reduces {self.name(src)} into {self.name(dst)} locally: collc's IR reduces "
                              "only as a chunk is received (here: a received chunk waiting in scratch, reduced into "
                              "its place)")  # fmt: skip
        c = self.messages[held.msg].labels[held.elem]
        self.place(dst, c, "reduces", ctx)
        v = self.settle(dst, ctx)
        self.place(dst, c, "reduces", ctx)
        operand = self.values.get(dst)
        value = self.reduced(operand, self.values.get(src), ctx)
        k = self.commit(dst[0], c, held.msg, held.elem, Action.REDUCE, v.index, operand is None, ctx)
        del self.pending[(held.msg, held.elem)]
        self.content[src] = Nothing(f"whose received value was reduced into {self.name(dst)} at line {ctx.line}: "
                                    "collc's IR keeps no copy of it")  # fmt: skip
        self.store(dst, Version(c, k), value)

    # -- the steps -------------------------------------------------------------------------------------------

    def layers(self, by_waiting: bool) -> list[int]:
        """Each message's step: the longest path over the constraints of the module docstring (without the
        dependencies of sends on the messages before them when ``by_waiting`` is False)."""
        msgs, nm = self.messages, len(self.messages)
        graph = Constraints(nm + len(self.node_msgs))
        edge = graph.edge
        for t, (g, tb) in enumerate(self.tbs if by_waiting else ()):
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
        return self.steps(graph)


def plan_to_schedule(plan: Plan, mode: str, *, earliest: bool = False) -> Schedule:
    """The plan's messages as a `Schedule` in ``mode`` ("in place" or "out of place"), meaning exactly what the
    plan's steps compute; a `CollError` naming the construct, GPU, threadblock, step and line when no schedule
    does (see the module docstring).  ``earliest``: each message in the earliest step that what it reads and
    writes allows, without the dependencies of its send on the messages before it."""
    _structure(plan, mode)
    return _Converter(plan, mode).convert(earliest)
