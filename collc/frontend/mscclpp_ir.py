"""MSCCL++ execution plans (`collc.frontend.mscclpp_plan`) as collc schedules (`collc.ir`), exactly or not at all.

An MSCCL++ plan moves data one-sidedly: a ``put`` (over a memory or port channel, ``pws``, ``pwsf``, ``ppkt``,
``rppkt``, and the remote destinations of ``res``, ``rres``, ``respkt``, ``recspkt``) writes a peer's buffer from a
local one; a ``get`` (and the remote sources of ``rre``, ``rres``) reads a peer's buffer into a local one.
`plan_to_schedule` turns each such movement of one operand into a message of one step of a schedule, a send on the
GPU whose buffer is read and a receive (a copy or a reduction) on the GPU whose buffer is written, both at the line
of the op; it refuses, with a `CollError` naming the construct, GPU, threadblock, op, line and JSON path, any plan
whose ops a schedule cannot mean exactly (docs/plans.md, "Into collc's IR" under "MSCCL++ execution plans").

Execution.  The plan is run once as `collc.verify.mscclpp_plans` runs it: each threadblock's ops in order, each
once what it waits for has happened (the k-th wait of a semaphore its first k signals, an acquire a release, a
barrier its threadblocks, a packet read the packet's write).  A vector clock per threadblock orders the ops by a
coarser happens-before than the executor's: a threadblock's ops in program order (as if a nop separated each), a
port channel's transfer at its put, relaxed signals and packets like the others.  Two accesses to one location,
one a write, that it leaves unordered are refused (a race, which the schedule's steps would order).  What it orders
and the executor does not (a threadblock's threads between nops, a port transfer until a signal or flush, relaxed
ordering, the end of a GPU's kernel), and signal counts and the executor's limits, the plan check reports; a
schedule does not model them.

Chunks, as `collc.frontend.plan_ir`.  A location of the input ``i`` or output ``o`` names the logical chunk the
collective's layout puts there, after the in-place overlap of the NCCL API; a scratch location (plain, or LL
packets) names the chunk of the value it holds.  Where threadblock groups or pipelines cut chunks into parts, each
part is a chunk of the schedule (a pipeline runs ``iterations`` times).  A slot (GPU, chunk) has versions: its
input (or nothing), then one per receive that writes it.  A message into ``i`` or ``o`` writes a version (a copy);
into scratch its value waits until an op uses it: a copy elsewhere (``copy``, ``upkt``) writes it as a copy, a
reduction (``re``, ``res``, ``repkt``, ...) as a reduction into the version that the reduction's one other source
holds, which must be the slot's latest (with no such source, the first waiting value is a copy), and a send of it
(``put``, ``rppkt``) writes it where it is (a relay).  A remote source of ``rre`` or ``rres`` is a message received
as such a reduction.  A local copy of a version to another place of its chunk, or into scratch, is nothing in the
schedule.

Refused: an op the executor runs other than it says, a chunk beyond its buffer, buffer sizes that do not fit the
collective or differ between GPUs, an alltoall in place, barriers not called alike, a message or copy that puts a
chunk in another chunk's place, a reduction of two values already held (only received chunks are reduced), a read
of a location that holds no version, a received value never used or overwritten first, two writes of one slot or
two accesses to one location that the plan does not order, a write of the input out of place, a deadlock, a
contribution counted twice in a value no output keeps, and steps that nothing satisfies.

Steps, as `collc.frontend.plan_ir`.  A message's step is one more than the latest step of the messages its op
waits for: those of the ops that happen before a wait, an acquire, a barrier or a packet read that its op is or
follows in its threadblock (a put does not wait for the puts before it).  What steps mean constrains it further
(a send reads its step's start, a receive lands at its end): a send that reads a version comes after the receive
that wrote it and no later than the one that writes the next; a write of a slot comes a step after a copy into
it, a copy a step after any write (reductions may share a step); two messages between the same GPUs with a chunk
in common take different steps.  Where waiting as the plan does contradicts these, the steps are the earliest
the values allow; where nothing satisfies them, the plan is refused.  Finally the schedule is run against the
plan's values (symbolic sums of contributions): every send must carry what the plan's op moves, every output end
as the plan's, a reduction into an empty slot happen where the plan's does, and no step write a slot twice.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from collc.collectives import EVERY, chunk_origin, layout_error
from collc.diagnostics import CollError
from collc.frontend.msccl_plan import buffers_fit
from collc.frontend.mscclpp_plan import Chunks, MscclppPlan, PlanGpu, PlanOp, PlanTb, RunStep, run_steps
from collc.frontend.plan_ir import COLLECTIVES, _components, _merge, _Nothing, _Pending, _twice, _Version, _Write
from collc.ir import Action, ChunkSet, Op, OpKind, Schedule, Span, Step

__all__ = ["ITERATIONS", "plan_to_schedule"]

ITERATIONS = 3  # pipeline iterations unrolled (the larger count `collc.verify.mscclpp_plans` checks)
PUTS = frozenset({"put", "pws", "pwsf", "ppkt", "rppkt"})
LOCAL_COPIES = frozenset({"copy", "upkt", "cpkt"})
REDUCES = frozenset({"re", "res", "rre", "rres", "repkt", "respkt", "recpkt", "recspkt"})
WAITS = frozenset({"wait", "rlxwait", "sem_acquire"})
SIGNALS = frozenset({"signal", "rlxsignal", "sem_release", "pws", "pwsf"})

Loc = tuple[int, str, int]  # (gpu, buffer after the in-place overlap or "s#" for packets, part)
Value = tuple[int, ...] | None  # sorted contributions (gpu * nchunks + chunk), repeats kept; None: nothing
Event = tuple[int, int]  # (threadblock over the plan, position in its run)
Content = _Version | _Pending | _Nothing
_NOTHING = _Nothing("which nothing wrote: collc's IR has no value for it")


@dataclass(frozen=True, slots=True)
class _Ctx:
    """The op being run: its event, clock, words for messages, line and JSON path."""

    node: Event
    clock: np.ndarray
    where: str
    line: int
    path: str


@dataclass(slots=True)
class _Message:
    """A data movement between two GPUs: one op's operand, its elements (chunks) with what each carries."""

    src: int
    dst: int
    line: int
    path: str
    where: str
    labels: list[int] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    reads: list[int] = field(default_factory=list)  # per element: the version of the sender's slot it reads
    actions: list[Action | None] = field(default_factory=list)  # per element, once its version is written
    empty: list[bool] = field(default_factory=list)  # per element: a reduction into nothing, in the plan


def _refuse(plan: MscclppPlan, path: str, message: str, line: int | None = None) -> CollError:
    line = plan.line(path) if line is None else line
    return CollError(f"{plan.file}:{line}: {path + ': ' if path else ''}{message}", Span(plan.file, line, 1, line, 1))


class _Layout:
    """Logical chunks of the input and output locations (see the module docstring), ``parts`` per plan chunk."""

    def __init__(self, plan: MscclppPlan, parts: int) -> None:
        self.coll, self.p, self.inplace, self.parts = plan.collective, plan.ngpus, plan.inplace, parts
        g0 = plan.gpus[0]
        self.i = g0.input_chunks
        self.o = g0.output_chunks or (self.i if self.inplace and self.coll == "allreduce" else 0)
        self.k = max(1, {"allgather": self.i, "reducescatter": self.o, "alltoall": self.i // self.p}.get(self.coll, 1))
        self.n = {"allgather": self.o, "alltoall": self.p * self.i}.get(self.coll, self.i) * parts
        self.collective = COLLECTIVES[self.coll]

    def loc(self, g: int, buf: str, x: int) -> Loc:
        if self.inplace:
            if self.coll == "allreduce" and buf == "o":
                return (g, "i", x)
            if self.coll == "allgather" and buf == "i":
                return (g, "o", g * self.i * self.parts + x)
            if self.coll == "reducescatter" and buf == "o":
                return (g, "i", g * self.o * self.parts + x)
        return (g, buf, x)

    def label(self, at: Loc) -> int | None:
        g, buf, x = at
        c, part = divmod(x, self.parts)
        k, p = self.k, self.p
        if buf == "i":
            c = {"allgather": g * self.i + c, "alltoall": (g * p + c // k) * k + c % k}.get(self.coll, c)
        elif buf == "o":
            c = {"reducescatter": g * self.o + c, "alltoall": (c // k * p + g) * k + c % k}.get(self.coll, c)
        else:
            return None
        return c * self.parts + part


def _capacity(plan: MscclppPlan, c: Chunks) -> int:
    g = plan.gpus[c.gpu]
    if c.packet:
        return g.scratch_chunks if plan.protocol == "LL" else g.scratch_chunks // 2
    if c.buffer == "o" and plan.inplace and g.output_chunks == 0 and plan.collective == "allreduce":
        return g.input_chunks
    return g.chunks(c.buffer)


def _structure(plan: MscclppPlan, lay: _Layout) -> None:
    """What decides what the ops mean: sizes, the executor's reading of each op, chunk ranges, barriers."""
    p, g0 = plan.ngpus, plan.gpus[0]
    if plan.collective == "alltoall" and plan.inplace:
        raise _refuse(plan, "", "an alltoall in place: its output would name other chunks than the input it overlaps")
    i, o = lay.i, lay.o
    problem = None if buffers_fit(plan.collective, p, i, o) and i + o else f"do not fit a {plan.collective} on {p} GPUs"
    problem = problem or layout_error(lay.collective, p, lay.n)
    if problem:
        sizes = f"input_chunks={g0.input_chunks}, output_chunks={g0.output_chunks}"
        raise _refuse(plan, g0.path, f"gpu 0: {sizes}: {problem}")
    for g in plan.gpus:
        if (g.input_chunks, g.output_chunks) != (g0.input_chunks, g0.output_chunks):
            raise _refuse(plan, g.path, f"gpu {g.id} has input_chunks={g.input_chunks}, output_chunks="
                          f"{g.output_chunks}, gpu 0 {g0.input_chunks} and {g0.output_chunks}: collc's IR gives "
                          "every rank the same chunks")  # fmt: skip
        barriers: dict[int, list[tuple[int, int]]] = {}
        for tb in g.tbs:
            for st in run_steps(tb, 1):
                op, here = st.op, f"gpu {g.id}, threadblock {tb.id}, {st.label}"
                if op.notes:
                    raise _refuse(plan, op.path, f"{here}: {op.notes[0]}: collc's IR would mean what the op says")
                for c in op.src + op.dst:
                    if c.index + c.size > _capacity(plan, c):
                        raise _refuse(plan, op.path, f"{here}: gpu {c.gpu}'s {c.buffer} chunks {c.index}.."
                                      f"{c.index + c.size - 1} are beyond the {_capacity(plan, c)} it has")  # fmt: skip
                if op.barrier is not None and op.barrier[1] > 1:
                    barriers.setdefault(op.barrier[0], []).append((tb.id, op.barrier[1]))
        for bid, calls in barriers.items():
            sizes, users = {n for _, n in calls}, {t for t, _ in calls}
            counts = {sum(1 for u, _ in calls if u == t) for t in users}
            if len(sizes) > 1 or len(users) != min(sizes) or len(counts) > 1:
                raise _refuse(plan, g.path, f"gpu {g.id}: barrier {bid} is called by threadblocks {sorted(users)} "
                              f"with num_threadblocks {sorted(sizes)}: each of them must call it as often")  # fmt: skip


class _Converter:
    """One plan: its execution, the versions, the steps and the check against the plan's values."""

    def __init__(self, plan: MscclppPlan, iterations: int) -> None:
        self.plan = plan
        ops = [x for g in plan.gpus for tb in g.tbs for op in tb.ops for x in (op, *(op.pipeline or (0, 0, ()))[2])]
        self.iterations = iterations if any(op.pipeline for op in ops) else 1
        self.parts = self.iterations * math.lcm(*(op.group[1] for op in ops)) if ops else 1
        self.lay = lay = _Layout(plan, self.parts)
        _structure(plan, lay)
        self.tbs: list[tuple[PlanGpu, PlanTb]] = [(g, tb) for g in plan.gpus for tb in g.tbs]
        self.runs = [run_steps(tb, self.iterations) for _, tb in self.tbs]
        self.messages: list[_Message] = []
        self.content: dict[Loc, Content] = {}
        self.values: dict[Loc, Value] = {}
        self.writes: dict[tuple[int, int], list[_Write]] = {}  # (gpu, chunk) -> its writes; version k is [k - 1]
        self.pending: dict[tuple[int, int], Loc] = {}  # (message, element) received into scratch, not a version yet
        self.last_write: dict[Loc, tuple[Event, str]] = {}
        self.reads_of: dict[Loc, list[tuple[Event, str]]] = {}
        self.preds: list[list[int]] = []  # per event, in the order run: the other threadblocks' events it waits for
        self.prev: list[int] = []  # per event: the previous event of its threadblock (-1: none)
        self.event_msgs: list[list[int]] = []  # per event: the messages of its op
        self.packets: dict[Loc, tuple[np.ndarray, int]] = {}  # packets written: the writer's clock and event
        self.twice: _Ctx | None = None  # the op where the plan first counts a contribution twice
        origin = chunk_origin(lay.collective, lay.p, lay.n, None)
        self.held = [[int(origin[c]) in (EVERY, g) for c in range(lay.n)] for g in range(lay.p)]
        for g in range(lay.p):
            for x in range(lay.i * self.parts):
                at = lay.loc(g, "i", x)
                c = self.chunk(at)
                self.content[at], self.values[at] = _Version(c, 0), (g * lay.n + c,)
            for x in range(lay.o * self.parts):
                at = lay.loc(g, "o", x)
                if at not in self.content:  # out of place: empty, as the slot is when the rank has no input for it
                    c = self.chunk(at)
                    why = f"which nothing wrote yet, where collc's IR holds chunk {c}'s input"
                    self.content[at] = _Nothing(why) if self.held[g][c] else _Version(c, 0)

    # -- locations, versions ---------------------------------------------------------------------------------

    def chunk(self, at: Loc) -> int:
        c = self.lay.label(at)
        assert c is not None
        return c

    def locs(self, c: Chunks, st: RunStep) -> list[Loc]:
        """The locations of an operand: its chunks' parts, the op's share of them in a group or an iteration."""
        lo, n = c.index * self.parts, c.size * self.parts
        part, of = st.op.group
        lo, n = lo + part * n // of, n // of
        if st.it >= 0:
            lo, n = lo + st.it * n // self.iterations, n // self.iterations
        if c.packet:
            return [(c.gpu, "s#", x) for x in range(lo, lo + n)]
        return [self.lay.loc(c.gpu, c.buffer, x) for x in range(lo, lo + n)]

    def name(self, at: Loc) -> str:
        g, buf, x = at
        part = f" (part {x % self.parts + 1} of {self.parts})" if self.parts > 1 else ""
        shown = f"s[{x // self.parts}] (packets)" if buf == "s#" else f"{buf}[{x // self.parts}]"
        return f"gpu {g}'s {shown}{part}"

    def refuse(self, ctx: _Ctx, message: str) -> CollError:
        return _refuse(self.plan, ctx.path, f"{ctx.where} {message}", ctx.line)

    def access(self, at: Loc, write: bool, ctx: _Ctx) -> None:
        """Two accesses to one location, one a write, must be ordered by the plan (the schedule's steps would
        order them)."""
        earlier = [self.last_write[at]] if at in self.last_write else []
        if write:
            earlier += self.reads_of.get(at, [])
        for (t, s), other in earlier:
            if (t, s) != ctx.node and ctx.clock[t] <= s:
                raise self.refuse(ctx, f"{'writes' if write else 'reads'} {self.name(at)} and {other} accesses it, "
                                  "with nothing ordering the two (a race): collc's IR would put them in steps one "
                                  "after the other")  # fmt: skip
        if write:
            self.last_write[at] = (ctx.node, f"{ctx.where} (line {ctx.line})")
            self.reads_of[at] = []
        else:
            self.reads_of.setdefault(at, []).append((ctx.node, f"{ctx.where} (line {ctx.line})"))

    def commit(self, g: int, c: int, msg: int, elem: int, action: Action, operand: int | None, empty: bool,
               ctx: _Ctx) -> int:  # fmt: skip
        """A new version of gpu g's slot for chunk c, written by element ``elem`` of message ``msg`` as a copy or a
        reduction into version ``operand``: its index."""
        writes = self.writes.setdefault((g, c), [])
        if writes:
            last = writes[-1]
            t, s = last.node
            if last.node != ctx.node and ctx.clock[t] <= s:
                raise self.refuse(ctx, f"writes gpu {g}'s chunk {c}, and so does the op at line "
                                  f"{self.messages[last.msg].line}, with nothing ordering the two: collc's IR holds "
                                  "one value per chunk and would order them")  # fmt: skip
        if action is Action.REDUCE and operand != len(writes):
            raise self.refuse(ctx, f"reduces into an older value of gpu {g}'s chunk {c} than the latest (written "
                              f"at line {self.messages[writes[-1].msg].line}): collc's IR reduces into a chunk's "
                              "one value")  # fmt: skip
        writes.append(_Write(msg, action, ctx.node))
        m = self.messages[msg]
        m.actions[elem], m.empty[elem] = action, empty
        return len(writes)

    def settle(self, at: Loc, ctx: _Ctx) -> _Version:
        """The version a location holds; a received value waiting in scratch becomes one where it is (a relay)."""
        held = self.content.get(at, _NOTHING)
        if isinstance(held, _Pending):
            c = self.messages[held.msg].labels[held.elem]
            k = self.commit(at[0], c, held.msg, held.elem, Action.COPY, None, False, ctx)
            del self.pending[(held.msg, held.elem)]
            held = self.content[at] = _Version(c, k)
        if isinstance(held, _Nothing):
            raise self.refuse(ctx, f"reads {self.name(at)}, {held.why}")
        return held

    def place(self, at: Loc, c: int, what: str, ctx: _Ctx) -> None:
        """Chunk c may go to ``at``: scratch, or the place of chunk c."""
        own = self.lay.label(at)
        if own is not None and own != c:
            raise self.refuse(ctx, f"{what} chunk {c} into {self.name(at)}, which holds chunk {own}: collc's IR "
                              "moves and reduces a chunk into the same chunk only")  # fmt: skip
        if at[1] == "i" and not self.lay.inplace:
            raise self.refuse(ctx, f"writes {self.name(at)} out of place, where the caller's input is read-only")

    def store(self, at: Loc, content: Content, value: Value) -> None:
        old = self.content.get(at)
        if isinstance(old, _Pending) and (old.msg, old.elem) in self.pending:
            m = self.messages[old.msg]
            raise _refuse(self.plan, m.path, f"{m.where} writes chunk {m.labels[old.elem]} into {self.name(at)}, "
                          "which is overwritten before anything uses it: collc's IR puts every received chunk in "
                          "its place", m.line)  # fmt: skip
        self.content[at], self.values[at] = content, value

    def reduced(self, a: Value, b: Value, ctx: _Ctx) -> Value:
        out = _merge(a, b)
        if self.twice is None and _twice(out):
            self.twice = ctx
        return out

    # -- the execution ---------------------------------------------------------------------------------------

    def keys(self, g: int, op: PlanOp) -> list[tuple]:
        """The semaphore each thread of a signal-like op touches (`collc.verify.mscclpp_plans`' keys)."""
        if op.name.startswith("sem_"):
            return [("sem", g, s) for s in op.semaphores]
        if op.name in ("wait", "rlxwait"):
            return [(c.kind, c.peer, g, c.nth) for c in op.channels]
        if op.name in SIGNALS:
            return [(c.kind, g, c.peer, c.nth) for c in op.channels[: len(op.dst) or None]]
        return []

    def execute(self) -> None:
        plan, ntb = self.plan, len(self.tbs)
        pcs, last = [0] * ntb, [-1] * ntb
        clocks = [np.zeros(ntb, dtype=np.int32) for _ in range(ntb)]
        signals: dict[tuple, list[tuple[np.ndarray, int]]] = {}  # per semaphore: each signal's clock and event
        taken: dict[tuple, int] = {}
        arrivals: dict[tuple[int, int, int], dict[int, tuple[np.ndarray, int]]] = {}
        calls: dict[tuple[int, int, int], int] = {}
        moved = True
        while moved:
            moved = False
            for t, (g, tb) in enumerate(self.tbs):
                while pcs[t] < len(self.runs[t]):
                    st = self.runs[t][pcs[t]]
                    op, clock = st.op, clocks[t].copy()
                    preds: list[int] = []
                    joined: list[tuple[np.ndarray, int]] = []
                    if op.name in WAITS:
                        need: dict[tuple, int] = {}
                        for key in self.keys(g.id, op):
                            need[key] = need.get(key, taken.get(key, 0)) + 1
                        init = {k: plan.gpus[k[1]].semaphores[k[2]] if k[0] == "sem" else 0 for k in need}
                        if any(len(signals.get(k, ())) + init[k] < n for k, n in need.items()):
                            break
                        taken.update(need)
                        joined = [signals[k][n - init[k] - 1] for k, n in need.items() if n > init[k]]
                    elif op.barrier is not None and op.barrier[1] > 1:
                        key = (g.id, op.barrier[0], calls.get((g.id, op.barrier[0], t), 0))
                        came = arrivals.setdefault(key, {})
                        came.setdefault(t, (clocks[t], last[t]))
                        if len(came) < op.barrier[1]:
                            break
                        joined = list(came.values())
                        calls[(g.id, op.barrier[0], t)] = key[2] + 1
                    elif op.name != "ppkt":  # a packet read waits for the packet's write (ppkt reads plain data)
                        keys = [at for c in op.src[: 1 if op.name == "rppkt" else None] if c.packet
                                for at in self.locs(c, st)]  # fmt: skip
                        if any(at not in self.packets for at in keys):
                            break
                        joined = [self.packets[at] for at in keys]
                    for other, e in joined:
                        np.maximum(clock, other, out=clock)
                        preds.append(e)
                    eid = len(self.preds)
                    clock[t] = pcs[t] + 1
                    self.preds.append(sorted({e for e in preds if e >= 0}))
                    self.prev.append(last[t])
                    self.event_msgs.append([])
                    where = f"gpu {g.id}, threadblock {tb.id}, {st.label}"
                    self.run_op(g.id, st, _Ctx((t, pcs[t]), clock, where, plan.line(op.path), op.path), eid)
                    if op.name in SIGNALS:
                        for key in self.keys(g.id, op):
                            signals.setdefault(key, []).append((clock, eid))
                    for c in op.dst:
                        for at in self.locs(c, st) if c.packet else ():
                            self.packets[at] = (clock, eid)
                    clocks[t], last[t] = clock, eid
                    pcs[t] += 1
                    moved = True
        stuck = [(t, self.runs[t][pcs[t]]) for t in range(ntb) if pcs[t] < len(self.runs[t])]
        if stuck:
            t, st = stuck[0]
            raise _refuse(plan, st.op.path, f"gpu {self.tbs[t][0].id}, threadblock {self.tbs[t][1].id}, {st.label} "
                          f"waits forever ({len(stuck)} threadblock(s) wait): the plan deadlocks")  # fmt: skip
        if self.pending:
            (msg, elem), at = next(iter(self.pending.items()))
            m = self.messages[msg]
            raise _refuse(plan, m.path, f"{m.where} writes chunk {m.labels[elem]} into {self.name(at)} and nothing "
                          "uses it: collc's IR puts every received chunk in its place", m.line)  # fmt: skip

    def message(self, src: int, dst: int, eid: int, ctx: _Ctx) -> int:
        self.messages.append(_Message(src, dst, ctx.line, ctx.path, ctx.where))
        self.event_msgs[eid].append(len(self.messages) - 1)
        return len(self.messages) - 1

    def send(self, msg: int, at: Loc, ctx: _Ctx) -> None:
        """Element ``at`` of message ``msg``: the version it reads."""
        m = self.messages[msg]
        v = self.settle(at, ctx)
        if v.chunk in m.labels:
            raise self.refuse(ctx, f"moves chunk {v.chunk} twice from gpu {m.src} to gpu {m.dst} in one op")
        m.labels.append(v.chunk)
        m.values.append(self.values.get(at))
        m.reads.append(v.index)
        m.actions.append(None)
        m.empty.append(False)

    def land(self, msg: int, j: int, at: Loc, ctx: _Ctx) -> None:
        """Element j of message ``msg`` arrives at ``at``: a version, or a value waiting in scratch."""
        m = self.messages[msg]
        c = m.labels[j]
        self.place(at, c, "writes", ctx)
        if at[1] in ("s", "s#"):
            self.store(at, _Pending(msg, j), m.values[j])
            self.pending[(msg, j)] = at
        else:
            self.store(at, _Version(c, self.commit(at[0], c, msg, j, Action.COPY, None, False, ctx)), m.values[j])

    def run_op(self, g: int, st: RunStep, ctx: _Ctx, eid: int) -> None:
        """One op's accesses, messages, versions and values."""
        op, name = st.op, st.op.name
        if name not in PUTS | LOCAL_COPIES | REDUCES | {"get"}:
            return
        src = [self.locs(c, st) for c in op.src]
        dst = [self.locs(c, st) for c in op.dst]
        for at in (at for locs in src[: 1 if name == "rppkt" else None] for at in locs):
            self.access(at, False, ctx)
        for at in (at for locs in dst for at in locs):
            self.access(at, True, ctx)
        if name in LOCAL_COPIES:
            for a, b in zip(src[0], dst[0], strict=True):
                v = self.settle(a, ctx)
                self.place(b, v.chunk, "copies", ctx)
                self.store(b, v, self.values.get(a))
        elif name in PUTS or name == "get":
            for k, c in enumerate(op.dst if name != "get" else op.src):
                a, b = (src[0] if name == "rppkt" else src[k]), dst[k]
                m = self.message(g, c.gpu, eid, ctx) if name != "get" else self.message(c.gpu, g, eid, ctx)
                for j, (x, y) in enumerate(zip(a, b, strict=True)):
                    self.send(m, x, ctx)
                    self.land(m, j, y, ctx)
        else:
            self.reduce(g, op, src, dst, eid, ctx)

    def reduce(self, g: int, op: PlanOp, src: list[list[Loc]], dst: list[list[Loc]], eid: int, ctx: _Ctx) -> None:
        """A reduction: received values (waiting in scratch, or read from peers) reduced into the version that its
        one other source holds, written to its local destinations and sent to its remote ones."""
        ins = {k: self.message(c.gpu, g, eid, ctx) for k, c in enumerate(op.src) if c.gpu != g}
        outs = {k: self.message(g, c.gpu, eid, ctx) for k, c in enumerate(op.dst) if c.gpu != g}
        for j in range(len(src[0])):
            held: list[Loc] = []
            landing: list[tuple[int, int, Loc | None]] = []
            for k, locs in enumerate(src):
                content = self.content.get(locs[j], _NOTHING)
                if any(other[j] == locs[j] for other in src[:k]):
                    raise self.refuse(ctx, f"reduces {self.name(locs[j])} twice: collc's IR reduces each received "
                                      "chunk once")  # fmt: skip
                if k in ins:
                    self.send(ins[k], locs[j], ctx)
                    landing.append((ins[k], j, None))
                elif isinstance(content, _Pending):
                    landing.append((content.msg, content.elem, locs[j]))
                else:
                    held.append(locs[j])
            if len(held) > 1:
                raise self.refuse(ctx, f"reduces {self.name(held[0])} and {self.name(held[1])} locally: collc's IR "
                                  "reduces only received chunks, each into the one value of its chunk")  # fmt: skip
            base: int | None = None
            if held:
                v = self.settle(held[0], ctx)
                c, acc, base = v.chunk, self.values.get(held[0]), v.index
            else:
                c, acc = self.messages[landing[0][0]].labels[landing[0][1]], None
            for msg, elem, at in landing:
                m = self.messages[msg]
                if m.labels[elem] != c:
                    raise self.refuse(ctx, f"reduces chunk {m.labels[elem]} (from gpu {m.src}) with chunk {c}: "
                                      "collc's IR reduces a chunk into the same chunk only")  # fmt: skip
                if base is None:
                    base, acc = self.commit(g, c, msg, elem, Action.COPY, None, False, ctx), m.values[elem]
                else:
                    base = self.commit(g, c, msg, elem, Action.REDUCE, base, acc is None, ctx)
                    acc = self.reduced(acc, m.values[elem], ctx)
                if at is not None:
                    del self.pending[(msg, elem)]
                    self.content[at] = _Nothing(f"whose received value was reduced at line {ctx.line}: collc's IR "
                                                "keeps no copy of it")  # fmt: skip
            assert base is not None
            for k, locs in enumerate(dst):
                if k not in outs:
                    self.place(locs[j], c, "writes", ctx)
                    self.store(locs[j], _Version(c, base), acc)
            for k, msg in outs.items():
                self.send(msg, dst[0][j], ctx)
                self.land(msg, j, dst[k][j], ctx)

    # -- the steps -------------------------------------------------------------------------------------------

    def layers(self, by_waiting: bool) -> list[int]:
        """Each message's step: the longest path over the constraints of the module docstring (without the waits
        of ops for the messages before them when ``by_waiting`` is False)."""
        msgs, nm = self.messages, len(self.messages)
        ne = len(self.preds)
        adj: list[list[tuple[int, int, str]]] = [[] for _ in range(nm + 2 * ne)]

        def edge(u: int, v: int, w: int, why: str) -> None:
            adj[u].append((v, w, why))

        # vertex nm + x: the latest step of the messages of event x and before it; nm + ne + x: of those it waits for
        # (through a wait, an acquire, a barrier or a packet, and what its threadblock waited for before)
        for x, preds in enumerate(self.preds if by_waiting else ()):
            done, waited = nm + x, nm + ne + x
            edge(waited, done, 0, "")
            if self.prev[x] >= 0:
                edge(nm + self.prev[x], done, 0, "")
                edge(nm + ne + self.prev[x], waited, 0, "")
            for b in preds:
                edge(nm + b, waited, 0, "")
            for m in self.event_msgs[x]:
                edge(m, done, 0, "")
                edge(waited, m, 1, "its op waits for the other's")
        for (g, c), writes in self.writes.items():
            for a, b in itertools.pairwise(writes):
                both = a.action is Action.REDUCE and b.action is Action.REDUCE
                edge(a.msg, b.msg, 0 if both else 1, f"it writes gpu {g}'s chunk {c} after the other")
        pairs: dict[tuple[int, int, int], int] = {}
        for i, m in enumerate(msgs):
            for c, k in zip(m.labels, m.reads, strict=True):
                writes = self.writes.get((m.src, c), [])
                if k >= 1:
                    edge(writes[k - 1].msg, i, 1, f"it sends gpu {m.src}'s chunk {c} as the other wrote it")
                if k < len(writes):
                    edge(i, writes[k].msg, 0, "")
                prev = pairs.get((m.src, m.dst, c))
                if prev is not None and prev != i:
                    edge(prev, i, 1, f"both move chunk {c} from gpu {m.src} to gpu {m.dst}")
                pairs[(m.src, m.dst, c)] = i
        comp, ncomp = _components(adj)
        for u, out in enumerate(adj):
            for v, w, why in out:
                if w and comp[u] == comp[v]:
                    m = msgs[v] if v < nm else msgs[u]
                    said = [f"the message of {msgs[x].where} (line {msgs[x].line})" if x < nm else "an op"
                            for x in (v, u)]  # fmt: skip
                    raise _refuse(self.plan, m.path, f"collc's IR steps cannot order the plan's messages: {said[0]} "
                                  f"must come in a later step than {said[1]} ({why}), and what it reads, writes or "
                                  "waits for puts it no later", m.line)  # fmt: skip
        layer = [0] * ncomp
        for u in sorted(range(len(adj)), key=lambda u: -comp[u]):
            for v, w, _ in adj[u]:
                if comp[v] != comp[u] and layer[comp[u]] + w > layer[comp[v]]:
                    layer[comp[v]] = layer[comp[u]] + w
        used = sorted({layer[comp[i]] for i in range(nm)})
        rank = {x: k for k, x in enumerate(used)}
        return [rank[layer[comp[i]]] for i in range(nm)]

    def schedule(self, layers: list[int]) -> Schedule:
        plan, lay = self.plan, self.lay
        by_step: list[list[int]] = [[] for _ in range(max(layers, default=-1) + 1)]
        for i, k in enumerate(layers):
            by_step[k].append(i)
        self.check_values(by_step)
        steps = []
        for k, ids in enumerate(by_step):
            ops: list[Op] = []
            for i in ids:
                m = self.messages[i]
                span = Span(plan.file, m.line, 1, m.line, 1)
                ops.append(Op(m.src, OpKind.SEND, m.dst, ChunkSet.of(m.labels), None, span))
                for action in (Action.COPY, Action.REDUCE):
                    chunks = [c for c, a in zip(m.labels, m.actions, strict=True) if a is action]
                    if chunks:
                        ops.append(Op(m.dst, OpKind.RECV, m.src, ChunkSet.of(chunks), action, span))
            steps.append(Step(k, "plan", tuple(ops)))
        return Schedule(plan.name, lay.collective, (("p", lay.p),), lay.p, lay.n, None, tuple(steps), plan.file,
                        Span(plan.file, 1, 1, 1, 1))  # fmt: skip

    def check_values(self, by_step: list[list[int]]) -> None:
        """The schedule's steps against the plan's values (see the module docstring)."""
        plan, lay, n = self.plan, self.lay, self.lay.n
        state: dict[tuple[int, int], Value] = {}

        def value(g: int, c: int) -> Value:
            return state[(g, c)] if (g, c) in state else ((g * n + c,) if self.held[g][c] else None)

        def wrong(m: _Message, message: str) -> CollError:
            return _refuse(plan, m.path, f"{m.where} {message}", m.line)

        for k, ids in enumerate(by_step):
            for i in ids:
                m = self.messages[i]
                for c, sent in zip(m.labels, m.values, strict=True):
                    if value(m.src, c) != sent:
                        raise wrong(m, f"moves gpu {m.src}'s chunk {c} as {self.said(sent)}, but in the schedule's "
                                    f"step {k} that chunk holds {self.said(value(m.src, c))}")  # fmt: skip
            copied: set[tuple[int, int]] = set()
            reduced: dict[tuple[int, int], list[tuple[int, int]]] = {}
            for i in ids:
                m = self.messages[i]
                for j, (c, a) in enumerate(zip(m.labels, m.actions, strict=True)):
                    assert a is not None
                    slot = (m.dst, c)
                    if slot in copied or (a is Action.COPY and slot in reduced):
                        raise wrong(m, f"writes gpu {m.dst}'s chunk {c} in the schedule's step {k}, as another "
                                    "message of that step does (a conflict)")  # fmt: skip
                    if a is Action.COPY:
                        copied.add(slot)
                        state[slot] = m.values[j]
                    else:
                        reduced.setdefault(slot, []).append((i, j))
            for (g, c), got in reduced.items():
                empty = value(g, c) is None
                for i, j in got:
                    m = self.messages[i]
                    if m.empty[j] != empty and (empty or not any(self.messages[x].empty[y] for x, y in got)):
                        holds = ("holds nothing", "a value") if empty else ("holds a value", "nothing")
                        raise wrong(m, f"reduces into gpu {g}'s chunk {c}, which {holds[0]} in the schedule's step "
                                    f"{k} but {holds[1]} in the plan")  # fmt: skip
                    state[(g, c)] = _merge(value(g, c), m.values[j])
        outputs_twice = False
        for g in range(lay.p):
            for x in range(lay.o * self.parts):
                at = lay.loc(g, "o", x)
                c = self.chunk(at)
                mine, theirs = self.values.get(at), value(g, c)
                outputs_twice = outputs_twice or _twice(mine)
                if mine != theirs:
                    shown = f"o[{x // self.parts}]{self.name(at).partition(']')[2]}"
                    raise _refuse(plan, plan.gpus[g].path, f"gpu {g}'s output {shown} "
                                  f"ends as {self.said(mine)} in the plan, but its chunk {c} as {self.said(theirs)} in "
                                  f"the schedule: {self.why_apart(at, c)}")  # fmt: skip
        if self.twice is not None and not outputs_twice:
            raise self.refuse(self.twice, "counts a contribution twice in a value no output keeps: collc's verifier "
                              "counts contributions at the outputs")  # fmt: skip

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
            return (f"it keeps an older value of chunk {c} than the one written at line {w.line}, and collc's IR "
                    "keeps one value per chunk")  # fmt: skip
        return "collc's IR keeps one value per chunk"


def plan_to_schedule(plan: MscclppPlan, *, earliest: bool = False, iterations: int = ITERATIONS) -> Schedule:
    """The plan's data movements as a `Schedule` in the plan's mode, meaning exactly what its ops compute; a
    `CollError` naming the construct, GPU, threadblock, op, line and JSON path when no schedule does (see the module
    docstring).  ``earliest``: each message in the earliest step that what it reads and writes allows, without the
    waits of its op for the messages before it; ``iterations``: how many times each pipeline runs."""
    if iterations < 1:
        raise CollError(f"iterations={iterations}: a pipeline runs at least once")
    conv = _Converter(plan, iterations)
    conv.execute()
    try:
        layers = conv.layers(not earliest)
    except CollError:  # waiting as the plan does contradicts what its values need
        layers = conv.layers(False)
    return conv.schedule(layers)
