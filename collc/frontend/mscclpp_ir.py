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

import math

import numpy as np

from collc.collectives import layout_error
from collc.diagnostics import CollError
from collc.frontend.msccl_plan import buffers_fit
from collc.frontend.mscclpp_plan import (
    Chunks,
    MscclppPlan,
    PlanGpu,
    PlanOp,
    PlanTb,
    RunStep,
    operand_parts,
    run_steps,
)
from collc.frontend.plan_schedule import (
    COLLECTIVES,
    NOTHING,
    Constraints,
    Ctx,
    Loc,
    Message,
    Nothing,
    Pending,
    PlanConversion,
    Version,
    Wording,
    refusal,
)
from collc.ir import Action, Schedule

__all__ = ["ITERATIONS", "plan_to_schedule"]

ITERATIONS = 3  # pipeline iterations unrolled (the larger count `collc.verify.mscclpp_plans` checks)
PUTS = frozenset({"put", "pws", "pwsf", "ppkt", "rppkt"})
LOCAL_COPIES = frozenset({"copy", "upkt", "cpkt"})
REDUCES = frozenset({"re", "res", "rre", "rres", "repkt", "respkt", "recpkt", "recspkt"})
WAITS = frozenset({"wait", "rlxwait", "sem_acquire"})
SIGNALS = frozenset({"signal", "rlxsignal", "sem_release", "pws", "pwsf"})
WORDING = Wording(
    named="{where} (line {line})",
    writer="the op",
    lands="writes",
    written="written",
    fellow="message",
    missent="moves gpu {src}'s chunk {c} as {sent}, but in the schedule's step {k} that chunk holds {have}",
    rewrites="it writes gpu {g}'s chunk {c} after the other",
    reads="it sends gpu {src}'s chunk {c} as the other wrote it",
    repeats="both move chunk {c} from gpu {src} to gpu {dst}",
)


def _refuse(plan: MscclppPlan, path: str, message: str, line: int | None = None) -> CollError:
    return refusal(plan.file, plan.line(path) if line is None else line, message, path)


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


class _Converter(PlanConversion[Message]):
    """One plan: its execution, then (`PlanConversion`) the steps and the check against the plan's values."""

    def __init__(self, plan: MscclppPlan, iterations: int) -> None:
        ops = [x for g in plan.gpus for tb in g.tbs for op in tb.ops for x in (op, *(op.pipeline or (0, 0, ()))[2])]
        self.iterations = iterations if any(op.pipeline for op in ops) else 1
        self.parts = self.iterations * math.lcm(*(op.group[1] for op in ops)) if ops else 1
        lay = _Layout(plan, self.parts)
        _structure(plan, lay)
        super().__init__(plan.file, plan.name, lay, WORDING)
        self.plan = plan
        self.tbs: list[tuple[PlanGpu, PlanTb]] = [(g, tb) for g in plan.gpus for tb in g.tbs]
        self.runs = [run_steps(tb, self.iterations) for _, tb in self.tbs]
        self.preds: list[list[int]] = []  # per event, in the order run: the other threadblocks' events it waits for
        self.prev: list[int] = []  # per event: the previous event of its threadblock (-1: none)
        self.event_msgs: list[list[int]] = []  # per event: the messages of its op
        self.packets: dict[Loc, tuple[np.ndarray, int]] = {}  # packets written: the writer's clock and event

    # -- what the format says --------------------------------------------------------------------------------

    def locs(self, c: Chunks, st: RunStep) -> list[Loc]:
        """The locations of an operand: its chunks' parts, the op's share of them in a group or an iteration."""
        xs = operand_parts(c, st, self.parts, self.iterations)
        if c.packet:
            return [(c.gpu, "s#", x) for x in xs]
        return [self.lay.loc(c.gpu, c.buffer, x) for x in xs]

    def name(self, at: Loc) -> str:
        g, buf, x = at
        part = f" (part {x % self.parts + 1} of {self.parts})" if self.parts > 1 else ""
        shown = f"s[{x // self.parts}] (packets)" if buf == "s#" else f"{buf}[{x // self.parts}]"
        return f"gpu {g}'s {shown}{part}"

    def gpu_at(self, g: int) -> tuple[int, str]:
        path = self.plan.gpus[g].path
        return self.plan.line(path), path

    def tangle(self, u: int, v: int, why: str, nm: int) -> CollError:
        msgs = self.messages
        m = msgs[v] if v < nm else msgs[u]
        said = [f"the message of {msgs[x].sent.where} (line {msgs[x].sent.line})" if x < nm else "an op"
                for x in (v, u)]  # fmt: skip
        return refusal(self.file, m.sent.line, f"collc's IR steps cannot order the plan's messages: {said[0]} must "
                       f"come in a later step than {said[1]} ({why}), and what it reads, writes or waits for puts it "
                       "no later", m.sent.path)  # fmt: skip

    def place(self, at: Loc, c: int, what: str, ctx: Ctx) -> None:
        """Chunk c may go to ``at`` (`PlanConversion.place`), and the input is read-only out of place."""
        super().place(at, c, what, ctx)
        if at[1] == "i" and not self.lay.inplace:
            raise self.refuse(ctx, f"writes {self.name(at)} out of place, where the caller's input is read-only")

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
                    self.run_op(g.id, st, Ctx((t, pcs[t]), clock, where, plan.line(op.path), op.path), eid)
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
        self.check_used()

    def message(self, src: int, dst: int, eid: int, ctx: Ctx) -> int:
        self.messages.append(Message(src=src, dst=dst, sent=ctx.site, landed=ctx.site))
        self.event_msgs[eid].append(len(self.messages) - 1)
        return len(self.messages) - 1

    def send(self, msg: int, at: Loc, ctx: Ctx) -> None:
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

    def land(self, msg: int, j: int, at: Loc, ctx: Ctx) -> None:
        """Element j of message ``msg`` arrives at ``at``: a version, or a value waiting in scratch."""
        m = self.messages[msg]
        c = m.labels[j]
        self.place(at, c, "writes", ctx)
        if at[1] in ("s", "s#"):
            self.store(at, Pending(msg, j), m.values[j])
            self.pending[(msg, j)] = at
        else:
            self.store(at, Version(c, self.commit(at[0], c, msg, j, Action.COPY, None, False, ctx)), m.values[j])

    def run_op(self, g: int, st: RunStep, ctx: Ctx, eid: int) -> None:
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

    def reduce(self, g: int, op: PlanOp, src: list[list[Loc]], dst: list[list[Loc]], eid: int, ctx: Ctx) -> None:
        """A reduction: received values (waiting in scratch, or read from peers) reduced into the version that its
        one other source holds, written to its local destinations and sent to its remote ones."""
        ins = {k: self.message(c.gpu, g, eid, ctx) for k, c in enumerate(op.src) if c.gpu != g}
        outs = {k: self.message(g, c.gpu, eid, ctx) for k, c in enumerate(op.dst) if c.gpu != g}
        for j in range(len(src[0])):
            held: list[Loc] = []
            landing: list[tuple[int, int, Loc | None]] = []
            for k, locs in enumerate(src):
                content = self.content.get(locs[j], NOTHING)
                if any(other[j] == locs[j] for other in src[:k]):
                    raise self.refuse(ctx, f"reduces {self.name(locs[j])} twice: collc's IR reduces each received "
                                      "chunk once")  # fmt: skip
                if k in ins:
                    self.send(ins[k], locs[j], ctx)
                    landing.append((ins[k], j, None))
                elif isinstance(content, Pending):
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
                    self.content[at] = Nothing(f"whose received value was reduced at line {ctx.line}: collc's IR "
                                                "keeps no copy of it")  # fmt: skip
            assert base is not None
            for k, locs in enumerate(dst):
                if k not in outs:
                    self.place(locs[j], c, "writes", ctx)
                    self.store(locs[j], Version(c, base), acc)
            for k, msg in outs.items():
                self.send(msg, dst[0][j], ctx)
                self.land(msg, j, dst[k][j], ctx)

    # -- the steps -------------------------------------------------------------------------------------------

    def layers(self, by_waiting: bool) -> list[int]:
        """Each message's step: the longest path over the constraints of the module docstring (without the waits
        of ops for the messages before them when ``by_waiting`` is False)."""
        nm, ne = len(self.messages), len(self.preds)
        graph = Constraints(nm + 2 * ne)
        edge = graph.edge
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
        return self.steps(graph)


def plan_to_schedule(plan: MscclppPlan, *, earliest: bool = False, iterations: int = ITERATIONS) -> Schedule:
    """The plan's data movements as a `Schedule` in the plan's mode, meaning exactly what its ops compute; a
    `CollError` naming the construct, GPU, threadblock, op, line and JSON path when no schedule does (see the module
    docstring).  ``earliest``: each message in the earliest step that what it reads and writes allows, without the
    waits of its op for the messages before it; ``iterations``: how many times each pipeline runs."""
    if iterations < 1:
        raise CollError(f"iterations={iterations}: a pipeline runs at least once")
    return _Converter(plan, iterations).convert(earliest)
