"""Checking MSCCL++ execution plans (`collc.frontend.mscclpp_plan`): structure, signal and wait counts, deadlock,
races, data and the postcondition, under the semantics of the MSCCL++ executor (docs/plans.md).

What the executor does (src/core/include/execution_kernel.hpp, executionKernel; include/mscclpp/*_device.hpp):

* every threadblock runs its ops in order, with all its threads.  Data ops (copy, reduce, memory-channel put and
  get, the packet ops) spread their elements over the threads; signal, wait, flush, semaphore and port-channel
  put ops run on threads 0..n-1, thread k taking the op's k-th channel, semaphore or destination.  Threads meet
  only at ``nop`` (__syncthreads) and ``barrier`` (DeviceSyncer::sync: __syncthreads, the threadblocks that
  share the barrier id, __syncthreads).  So an op is ordered after an earlier op of its threadblock only across
  a nop or barrier, or when both are signal-like ops on the same thread;
* a memory-channel ``signal`` adds one, with release, to the semaphore its channel shares with the peer's
  paired channel (the k-th channel from A to B with the k-th from B to A); ``wait`` takes the next count (ticket)
  and spins, with acquire, until the semaphore reaches it; the ``rlx`` forms count the same, relaxed (below).
  Port channels work the same through the proxy, which also carries the port ``put`` transfers: a transfer reads
  its source and writes the peer some time after the put, before a later signal on its channel reaches the peer
  and before a ``flush`` of its channel (of the ``dst_buff``-many channels a flush names: handleFlush) returns;
* a device semaphore (``sem_release``/``sem_acquire``) counts releases from its initial value; an acquire waits
  for a count above zero;
* a packet read spins until the flag of each packet matches this run's: it waits for the packet's write and sees
  its data.  Packet flags, like relaxed signals, are plain stores: they order the writing op before the reader
  (what LL plans, which have no signals, rely on; taken here to include the ops before it in the writer's
  threadblock) for what the reader then writes, not for what it reads: a write that is read later is ordered
  only by release and acquire (signal and wait, barriers, semaphores).  Two vector clocks track this, one over
  every edge and one over release/acquire edges.

Control is run per threadblock, one op after another, each once everything it waits for has happened.  The
hardware runs the threads of a block independently between nops: a thread that takes no part in a blocked op
runs on to the next nop.  The model therefore waits at least as much as the hardware, so a plan found free of
deadlock is; a deadlock found is certain unless the blocked threadblock has ops for its other threads before the
next nop, which the report then says.

Why one execution decides.  Every blocking condition is monotone (a count of signals or releases reaching a fixed
ticket, all threadblocks of a barrier arriving, a packet having been written) and each threadblock's next op is
fixed by its program: the reader refuses channels and semaphores signalled or waited on from two threadblocks,
which make tickets depend on timing, and two threads of one threadblock doing so with no nop between are
reported.  The ops that run are therefore the same in every execution, and so are the edges between them (the
k-th wait on a semaphore with its first k signals, the k-th barrier of each threadblock
with the others' k-th, a packet read with the write of that packet).  One execution, run until nothing can move,
decides deadlock; vector clocks over it give the happens-before relation every execution shares, so two
accesses to a chunk, one a write, that it leaves unordered are a race in some execution, and without races the
values it computes are every execution's.  The end of each GPU's kernel is an event too: a peer's write to the
GPU, or read of it, must be ordered before it, or the caller may see or change the buffer first.  A port
transfer is placed right after its put, as some execution does.  Values are symbolic: the sorted
contributions (GPU, input chunk, part) a chunk part sums, so a missing or doubled contribution shows.  A chunk is
cut into parts where threadblock groups or pipelines split it; a pipeline is checked with 1 and 3 iterations.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

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

__all__ = ["LIMITS", "MscclppFinding", "MscclppReport", "check_plan"]

# The executor's limits (src/core/include/execution_common.hpp): ops per threadblock (a pipeline counts 1 + its
# ops), channels and remote buffers of a type per threadblock, channel ids and buffers per op, semaphore ids per
# op, barriers per GPU.
LIMITS = {"ops": 64, "channels": 16, "channel_ids": 8, "operands": 10, "semaphore_ids": 16, "barriers": 16}
COPIES = frozenset({"put", "pws", "pwsf", "get", "copy", "cpkt", "upkt", "ppkt", "rppkt"})
REDUCES = frozenset({"re", "res", "rre", "rres", "repkt", "respkt", "recpkt", "recspkt"})
LANE_OPS = frozenset({"signal", "wait", "rlxsignal", "rlxwait", "flush", "sem_acquire", "sem_release", "pws", "pwsf"})
SYNCS = frozenset({"nop", "barrier"})
PIPELINE_ITERATIONS = (1, 3)

Value = tuple[int, ...] | None  # sorted contribution ids; None: never written
Loc = tuple[int, str, int]  # (gpu, buffer after in-place aliasing, or "s#" for scratch packets; part)


@dataclass(frozen=True, slots=True)
class MscclppFinding:
    kind: str  # structure, unmatched, deadlock, race, uninitialized, double-count, read-only, postcondition
    message: str
    path: str  # JSON path of the element
    line: int
    mode: str = ""  # with pipelines: the iteration count it was found at


@dataclass(frozen=True, slots=True)
class MscclppReport:
    plan: MscclppPlan
    findings: tuple[MscclppFinding, ...]
    iterations: tuple[int, ...]  # pipeline iteration counts checked; () without pipelines
    ops: int
    threadblocks: int

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def mode(self) -> str:
        return "in place" if self.plan.inplace else "out of place"


def _port_op(op: PlanOp) -> bool:
    return op.channel_type == "port" and op.name in ("put", "pws", "pwsf", "ppkt", "rppkt")


def _lanes(op: PlanOp) -> set[int] | None:
    """The threads an op runs on; None: all of them."""
    if op.name in SYNCS or op.name in ("pipeline", "rppkt") or (op.name in COPIES | REDUCES and not _port_op(op)):
        return None
    n = op.flushes if op.name == "flush" else len(op.semaphores) or len(op.channels)
    return set(range(n))


def _walk(plan: MscclppPlan) -> Iterator[tuple[PlanGpu, PlanTb, PlanOp]]:
    for g in plan.gpus:
        for tb in g.tbs:
            for op in tb.ops:
                for x in (op, *(op.pipeline[2] if op.pipeline else ())):
                    yield g, tb, x


def _capacity(plan: MscclppPlan, c: Chunks) -> int:
    g = plan.gpus[c.gpu]
    if c.packet:
        return g.scratch_chunks if plan.protocol == "LL" else g.scratch_chunks // 2
    if c.buffer == "o" and plan.inplace and g.output_chunks == 0 and plan.collective in ("allreduce", "alltoall"):
        return g.input_chunks
    return g.chunks(c.buffer)


def _structure(plan: MscclppPlan) -> list[MscclppFinding]:
    out: list[MscclppFinding] = []

    def note(message: str, path: str) -> None:
        out.append(MscclppFinding("structure", message, path, plan.line(path)))

    p = plan.ngpus
    for g in plan.gpus:
        i, o = g.input_chunks, g.output_chunks
        same = i == o or (plan.inplace and o == 0)
        fits = {
            "allreduce": same,
            "allgather": o == p * i,
            "reducescatter": i == p * o,
            "alltoall": same and i % p == 0,
        }[plan.collective]
        if not fits or i + o == 0:
            note(f"gpu {g.id}: input_chunks={i}, output_chunks={o} do not fit a {plan.collective} on {p} GPUs", g.path)
        barriers: dict[int, dict[int, list[int]]] = {}
        for tb in g.tbs:
            count = sum(1 + len(op.pipeline[2]) if op.pipeline else 1 for op in tb.ops)
            if count > LIMITS["ops"]:
                note(
                    f"gpu {g.id}, threadblock {tb.id} has {count} ops (a pipeline counts with its ops): the "
                    f"executor takes at most {LIMITS['ops']}",
                    tb.path,
                )
            for kind, ids in (*tb.channels.items(), *tb.refs.items()):
                if len(ids) > LIMITS["channels"]:
                    note(
                        f"gpu {g.id}, threadblock {tb.id} names {len(ids)} {kind} channels or remote buffers: the "
                        f"executor takes at most {LIMITS['channels']} of a type",
                        tb.path,
                    )
            for step in run_steps(tb, 1):
                op, here = step.op, f"gpu {g.id}, threadblock {tb.id}, {step.label}"
                for message in op.notes:
                    note(f"{here}: {message}", op.path)
                for what, n, most in (
                    ("channel ids", len(op.channels), LIMITS["channel_ids"]),
                    ("buffers", max(len(op.src), len(op.dst)), LIMITS["operands"]),
                    ("semaphore ids", len(op.semaphores), LIMITS["semaphore_ids"]),
                ):
                    if n > most:
                        note(f"{here} names {n} {what}: the executor takes at most {most}", op.path)
                for c in op.src + op.dst:
                    have = _capacity(plan, c)
                    if c.index + c.size > have:
                        kind = "packets" if c.packet else "chunks"
                        note(
                            f"{here}: gpu {c.gpu}'s {c.buffer} {kind} {c.index}..{c.index + c.size - 1} are beyond "
                            f"the {have} it has",
                            op.path,
                        )
                if op.barrier is not None:
                    bid, n = op.barrier
                    if bid >= LIMITS["barriers"]:
                        note(f"{here}: barrier {bid}, but the executor has {LIMITS['barriers']}", op.path)
                    barriers.setdefault(bid, {}).setdefault(n, []).append(tb.id)
        for bid, sizes in barriers.items():
            users = {t for tbs in sizes.values() for t in tbs}
            calls = {t: sum(ts.count(t) for ts in sizes.values()) for t in users}
            if len(sizes) > 1 or (min(sizes) > 1 and (len(users) != min(sizes) or len(set(calls.values())) > 1)):
                note(
                    f"gpu {g.id}: barrier {bid} is called by threadblocks {sorted(users)} "
                    f"({', '.join(f'{t}: {c} time(s)' for t, c in sorted(calls.items()))}) with num_threadblocks "
                    f"{sorted(sizes)}: each of num_threadblocks threadblocks must call it as often",
                    g.path,
                )
    return out


class _State:
    """One threadblock during the run."""

    def __init__(self, g: PlanGpu, tb: PlanTb, t: int, steps: list[RunStep], width: int) -> None:
        self.g, self.tb, self.t, self.steps = g, tb, t, steps
        self.pos = 0
        self.S = np.zeros((2, width), dtype=np.int32)  # what all threads know: release/acquire edges, all edges
        self.lanes: dict[int, np.ndarray] = {}  # what thread k knows beyond S
        self.pending: np.ndarray | None = None  # packets observed since the last nop
        self.epoch = 0
        self.arrived = -1

    def lane(self, k: int) -> np.ndarray:
        return self.lanes.get(k, self.S)

    def joined(self, own: int) -> np.ndarray:
        clock = self.S.copy()
        for c in self.lanes.values():
            np.maximum(clock, c, out=clock)
        if self.pending is not None:
            np.maximum(clock[1], self.pending, out=clock[1])
        clock[:, self.t] = np.maximum(clock[:, self.t], own)
        return clock

    def sync(self, own: int, clock: np.ndarray | None = None) -> None:
        self.S = clock if clock is not None else self.joined(own)
        self.S[:, self.t] = np.maximum(self.S[:, self.t], own)
        self.lanes, self.pending = {}, None
        self.epoch += 1


@dataclass
class _Run:
    plan: MscclppPlan
    iterations: int
    mode: str
    findings: list[MscclppFinding] = field(default_factory=list)

    def __post_init__(self) -> None:
        plan = self.plan
        groups = [op.group[1] for _, _, op in _walk(plan)]
        self.parts = self.iterations * math.lcm(*groups) if groups else self.iterations
        self.n_in = max(g.input_chunks for g in plan.gpus) * self.parts
        self.states = [(g, tb) for g in plan.gpus for tb in g.tbs]
        self.proxy: dict[tuple[int, int], int] = {}
        for g, _, op in _walk(plan):
            if _port_op(op):
                for ch in op.channels:
                    self.proxy.setdefault((g.id, ch.index), len(self.states) + len(self.proxy))
        width = len(self.states) + len(self.proxy)
        self.tbs = [_State(g, tb, t, run_steps(tb, self.iterations), width) for t, (g, tb) in enumerate(self.states)]
        self.puts: dict[int, list[tuple[int, int]]] = {c: [] for c in self.proxy.values()}
        self.count: dict[tuple, int] = {}  # signals and releases per semaphore
        self.taken: dict[tuple, int] = {}  # waits and acquires per semaphore
        self.cum: dict[tuple, list[np.ndarray]] = {}  # the join of the first k signals' clocks (relaxed: row 1)
        self.first: dict[tuple, str] = {}  # a path per semaphore, for messages
        self.thread: dict[tuple, tuple[int, int, str]] = {}  # (threadblock, semaphore) -> thread, epoch, label
        self.arrivals: dict[tuple[int, int, int], dict[int, np.ndarray]] = {}
        self.calls: dict[tuple[int, int, int], int] = {}
        self.values: dict[Loc, Value] = {}
        self.last: dict[Loc, tuple[int, str]] = {}  # last write: event, kind ("w" plain, "pw" packet)
        self.reads: dict[Loc, list[int]] = {}
        self.events: list[tuple[int, int, str, str]] = []  # component, index, description, path
        self.packet_clock: dict[int, np.ndarray] = {}
        self.reported: set[tuple] = set()
        for g in plan.gpus:
            for c in range(g.input_chunks * self.parts):
                self.values[self.loc(g.id, "i", c)] = (g.id * self.n_in + c,)

    # ---- locations, values, findings ---------------------------------------------------------------------------
    def loc(self, gpu: int, buf: str, part: int) -> Loc:
        """Where a part is, after the in-place overlap of input and output as the NCCL API defines it."""
        if self.plan.inplace:
            g, coll = self.plan.gpus[gpu], self.plan.collective
            if coll in ("allreduce", "alltoall") and buf == "o":
                return (gpu, "i", part)
            if coll == "allgather" and buf == "i":
                return (gpu, "o", gpu * g.input_chunks * self.parts + part)
            if coll == "reducescatter" and buf == "o":
                return (gpu, "i", gpu * g.output_chunks * self.parts + part)
        return (gpu, buf, part)

    def parts_of(self, c: Chunks, step: RunStep) -> list[Loc]:
        xs = operand_parts(c, step, self.parts, self.iterations)
        if c.packet:
            return [(c.gpu, "s#", x) for x in xs]
        return [self.loc(c.gpu, c.buffer, x) for x in xs]

    def name(self, key: Loc) -> str:
        g, buf, x = key
        shown, extra = (f"s[{x // self.parts}]", " (packets)") if buf == "s#" else (f"{buf}[{x // self.parts}]", "")
        if self.parts > 1:
            extra = f" (part {x % self.parts + 1} of {self.parts}{', packets' if extra else ''})"
        return f"gpu {g}'s {shown}{extra}"

    def who(self, v: int) -> str:
        g, x = divmod(v, self.n_in)
        part = f" part {x % self.parts + 1}" if self.parts > 1 else ""
        return f"gpu {g} chunk {x // self.parts}{part}"

    def note(self, kind: str, message: str, path: str, key: tuple | None = None) -> None:
        if key is not None:
            if (kind, key) in self.reported:
                return
            self.reported.add((kind, key))
        if len(self.findings) < 200:
            self.findings.append(MscclppFinding(kind, message, path, self.plan.line(path), self.mode))

    def event(self, comp: int, index: int, what: str, path: str) -> int:
        self.events.append((comp, index, what, path))
        return len(self.events) - 1

    def reduce(self, a: Value, b: Value, what: str, path: str, key: Loc) -> Value:
        if a is None or b is None:
            return None
        merged = tuple(heapq.merge(a, b))
        if len(set(merged)) != len(merged):
            twice = sorted({x for x in merged if merged.count(x) > 1})
            self.note(
                "double-count",
                f"{what} counts {', '.join(self.who(x) for x in twice[:4])} twice (into {self.name(key)})",
                path,
                key,
            )
            return tuple(sorted(set(merged)))
        return merged

    # ---- accesses and races --------------------------------------------------------------------------------------
    def ordered(self, eid: int, clock: np.ndarray, row: int) -> bool:
        comp, index, _, _ = self.events[eid]
        return int(clock[row, comp]) > index

    def race(self, key: Loc, eid: int, earlier: int, verbs: tuple[str, str], clock: np.ndarray, path: str) -> None:
        comp, _, what, _ = self.events[eid]
        ecomp, _, ewhat, _ = self.events[earlier]
        if ecomp >= len(self.states):
            why = "a port transfer is ordered only by a later signal on its channel that the peer waits for, or a flush"
        elif ecomp == comp:
            why = "no nop between them: a threadblock's threads run unsynchronized until one"
        elif self.ordered(earlier, clock, 1):
            why = "only packets or relaxed signals order them, and those do not order a write before what follows"
        else:
            why = "no signal and wait, barrier or semaphore orders them"
        self.note(
            "race",
            f"{self.name(key)}: {what} {verbs[0]} it and {ewhat} {verbs[1]} it, with nothing ordering the two ({why})",
            path,
            key,
        )

    def access(self, key: Loc, kind: str, eid: int, clock: np.ndarray, path: str) -> None:
        """kind: r (plain read), pr (packet read: it waits for the write), rr (raw copy of packets), w, pw."""
        last = self.last.get(key)
        verb = "writes" if kind in ("w", "pw") else "reads"
        if last is not None and last[0] != eid and not (last[1] == "pw" and kind == "pr"):
            if not self.ordered(last[0], clock, 0 if last[1] == "w" else 1):
                self.race(key, eid, last[0], (verb, "writes"), clock, path)
        if kind in ("w", "pw"):
            for r in self.reads.get(key, ()):
                if r != eid and not self.ordered(r, clock, 1):
                    self.race(key, eid, r, (verb, "reads"), clock, path)
                    break
            self.last[key] = (eid, kind)
            self.reads[key] = []
        else:
            self.reads.setdefault(key, []).append(eid)

    def read(
        self, c: Chunks, step: RunStep, kind: str, eid: int, clock: np.ndarray, what: str, path: str
    ) -> tuple[list[Value], np.ndarray | None]:
        values, seen = [], None
        for key in self.parts_of(c, step):
            self.access(key, kind, eid, clock, path)
            v = self.values.get(key)
            if v is None and kind != "pr":
                self.note("uninitialized", f"{what} reads {self.name(key)}, which nothing wrote", path, key)
            if kind == "pr":
                w = self.packet_clock[self.last[key][0]]
                seen = w.copy() if seen is None else np.maximum(seen, w)
            values.append(v)
        return values, seen

    def write(
        self, c: Chunks, step: RunStep, values: list[Value], eid: int, clock: np.ndarray, what: str, path: str
    ) -> None:
        for key, v in zip(self.parts_of(c, step), values, strict=True):
            if key[1] == "i" and not self.plan.inplace:
                self.note(
                    "read-only",
                    f"{what} writes {self.name(key)}: out of place, the caller's input is read-only",
                    path,
                    key,
                )
            self.access(key, "pw" if c.packet else "w", eid, clock, path)
            self.values[key] = v

    # ---- ops -----------------------------------------------------------------------------------------------------
    def keys(self, st: _State, op: PlanOp) -> list[tuple]:
        """The semaphore each thread of a signal-like op touches."""
        g = st.g.id
        if op.name.startswith("sem_"):
            return [("sem", g, s) for s in op.semaphores]
        waits = op.name in ("wait", "rlxwait")
        return [(c.kind, c.peer, g, c.nth) if waits else (c.kind, g, c.peer, c.nth) for c in op.channels]

    def ready(self, st: _State, step: RunStep) -> bool:
        op = step.op
        if op.name in ("wait", "rlxwait", "sem_acquire"):
            need: dict[tuple, int] = {}
            for key in self.keys(st, op):
                need[key] = need.get(key, self.taken.get(key, 0)) + 1
            init = st.g.semaphores
            return all(self.count.get(k, 0) + (init[k[2]] if k[0] == "sem" else 0) >= n for k, n in need.items())
        if op.name == "barrier" and op.barrier is not None and op.barrier[1] > 1:
            key = (st.g.id, op.barrier[0], self.calls.get((st.g.id, op.barrier[0], st.t), 0))
            if st.arrived != st.pos:
                self.arrivals.setdefault(key, {})[st.t] = st.joined(st.pos)
                st.arrived = st.pos
            return len(self.arrivals[key]) == op.barrier[1]
        sources = op.src[:1] if op.name == "rppkt" else op.src
        return all(
            self.last.get(k, (0, ""))[1] == "pw"
            for c in sources
            if c.packet and op.name != "ppkt"
            for k in self.parts_of(c, step)
        )

    def run(self) -> None:
        moved = True
        while moved:
            moved = False
            for st in self.tbs:
                while st.pos < len(st.steps) and self.ready(st, st.steps[st.pos]):
                    self.execute(st, st.steps[st.pos])
                    st.pos += 1
                    moved = True

    def execute(self, st: _State, step: RunStep) -> None:
        op = step.op
        what = f"gpu {st.g.id}, threadblock {st.tb.id}, {step.label}"
        eid = self.event(st.t, st.pos, what, op.path)
        if op.name == "nop" or (op.name == "barrier" and op.barrier is not None and op.barrier[1] == 1):
            st.sync(st.pos + 1)
        elif op.name == "barrier" and op.barrier is not None:
            key = (st.g.id, op.barrier[0], self.calls.get((st.g.id, op.barrier[0], st.t), 0))
            clock = np.max(np.stack(list(self.arrivals[key].values())), axis=0)
            st.sync(st.pos + 1, clock)
            self.calls[(*key[:2], st.t)] = key[2] + 1
        elif op.name in COPIES | REDUCES and not _port_op(op):
            self.data(st, step, eid, what)
        elif op.name == "rppkt":  # port: all threads read the packets, __syncthreads, thread k sends the k-th copy
            _, seen = self.read(op.src[0], step, "pr", eid, st.S, what, op.path)
            if seen is not None:
                st.pending = seen if st.pending is None else np.maximum(st.pending, seen)
            st.sync(st.S[0, st.t])
            for k in range(len(op.dst)):
                self.transfer(st, step, k, op.src[0], what)
        else:
            signalling = op.name in ("signal", "wait", "rlxsignal", "rlxwait", "sem_acquire", "sem_release")
            for k, key in enumerate(self.keys(st, op) if signalling else []):
                self.semaphore(st, step, k, key, what)
            for k in range(len(op.dst)) if _port_op(op) else ():
                self.transfer(st, step, k, op.src[k], what)
                if op.name in ("pws", "pwsf"):
                    self.semaphore(st, step, k, ("port", st.g.id, op.channels[k].peer, op.channels[k].nth), what)
                if op.name == "pwsf":
                    self.flush(st, k, op.channels[k].index)
            for k in range(op.flushes):
                self.flush(st, k, op.channels[k].index)

    def data(self, st: _State, step: RunStep, eid: int, what: str) -> None:
        """A data op on all threads: ordered after what all threads know (the last nop)."""
        op, clock = step.op, st.S
        got, seen = [], None
        for c in op.src[:1] if op.name == "rppkt" else op.src:
            values, s = self.read(c, step, "pr" if c.packet else "r", eid, clock, what, op.path)
            got.append(values)
            if s is not None:
                seen = s if seen is None else np.maximum(seen, s)
        if seen is not None:
            clock = clock.copy()
            np.maximum(clock[1], seen, out=clock[1])
            st.pending = seen if st.pending is None else np.maximum(st.pending, seen)
        sent = clock[1].copy()
        sent[st.t] = max(int(sent[st.t]), st.pos + 1)
        self.packet_clock[eid] = sent
        if op.name in REDUCES:
            out = got[0]
            for values in got[1:]:
                keys = self.parts_of(op.dst[0], step)
                out = [self.reduce(a, b, what, op.path, k) for a, b, k in zip(out, values, keys, strict=True)]
            for c in op.dst:
                self.write(c, step, out, eid, clock, what, op.path)
        else:
            for k, c in enumerate(op.dst):
                self.write(c, step, got[0 if op.name == "rppkt" else k], eid, clock, what, op.path)

    def transfer(self, st: _State, step: RunStep, k: int, src: Chunks, what: str) -> None:
        """The proxy's copy for the k-th destination of a port put, issued by thread k."""
        op = step.op
        comp = self.proxy[(st.g.id, op.channels[k].index)]
        n = len(self.puts[comp])
        self.puts[comp].append((st.pos, k))
        clock = st.lane(k).copy()
        clock[:, comp] = np.maximum(clock[:, comp], n + 1)
        desc = f"the transfer of {what} over port channel {op.channels[k].index}"
        eid = self.event(comp, n, desc, op.path)
        values, _ = self.read(src, step, "rr" if src.packet else "r", eid, clock, desc, op.path)
        self.packet_clock[eid] = clock[1].copy()
        self.write(op.dst[k], step, values, eid, clock, desc, op.path)

    def carried(self, st: _State, k: int, index: int) -> tuple[int, int]:
        """The proxy component of a port channel and how many of its transfers thread k's signal or flush
        follows in the proxy's queue (those issued before the last nop, or earlier on thread k)."""
        comp = self.proxy.get((st.g.id, index), -1)
        m = 0
        for pos, lane in self.puts.get(comp, []):
            if pos >= int(st.S[0, st.t]) and lane != k:
                break
            m += 1
        return comp, m

    def flush(self, st: _State, k: int, index: int) -> None:
        comp, m = self.carried(st, k, index)
        if comp >= 0 and m > int(st.lane(k)[0, comp]):
            clock = st.lane(k).copy()
            clock[:, comp] = np.maximum(clock[:, comp], m)
            st.lanes[k] = clock

    def semaphore(self, st: _State, step: RunStep, k: int, key: tuple, what: str) -> None:
        op = step.op
        taking = op.name in ("wait", "rlxwait", "sem_acquire")
        prev = self.thread.get((st.t, key, taking))
        if prev is not None and prev[1] == st.epoch and prev[0] != k:
            self.note(
                "race",
                f"{what} {'waits on' if taking else 'signals'} the semaphore of {self._sem(key)} on "
                f"thread {k}, and {prev[2]} did on thread {prev[0]}, with no nop between: the two may "
                "take effect in either order",
                op.path,
                ("thread", *key),
            )
        self.thread[(st.t, key, taking)] = (k, st.epoch, what)
        self.first.setdefault(key, op.path)
        hist = self.cum.setdefault(key, [])
        relaxed = op.name in ("rlxsignal", "rlxwait") and key[0] != "port"  # relaxed orders no earlier write
        if taking:
            ticket = self.taken.get(key, 0) + 1
            self.taken[key] = ticket
            n = ticket - (st.g.semaphores[key[2]] if key[0] == "sem" else 0)
            if n >= 1:
                clock = st.lane(k).copy()
                np.maximum(
                    clock[1:] if relaxed else clock,
                    hist[n - 1][1:] if relaxed else hist[n - 1],
                    out=clock[1:] if relaxed else clock,
                )
                st.lanes[k] = clock
            return
        self.count[key] = self.count.get(key, 0) + 1
        clock = st.lane(k).copy()
        if key[0] == "port":
            comp, m = self.carried(st, k, op.channels[k].index)
            if comp >= 0:
                clock[:, comp] = np.maximum(clock[:, comp], m)
        if relaxed:
            clock[0] = 0
        hist.append(clock if not hist else np.maximum(hist[-1], clock))

    @staticmethod
    def _sem(key: tuple) -> str:
        if key[0] == "sem":
            return f"gpu {key[1]}'s device semaphore {key[2]}"
        kind, src, dst, nth = key
        return f"the {kind} channel{'' if nth == 0 else f' #{nth + 1}'} from gpu {src} to gpu {dst}"

    # ---- after the run -------------------------------------------------------------------------------------------
    def blocked(self) -> bool:
        stuck = [st for st in self.tbs if st.pos < len(st.steps)]
        for st in stuck[:5]:
            step = st.steps[st.pos]
            op = step.op
            where = f"gpu {st.g.id}, threadblock {st.tb.id}, {step.label}"
            if op.name in ("wait", "rlxwait", "sem_acquire"):
                need: dict[tuple, int] = {}
                for k in self.keys(st, op):
                    need[k] = need.get(k, self.taken.get(k, 0)) + 1
                init = {k: st.g.semaphores[k[2]] if k[0] == "sem" else 0 for k in need}
                why = "; ".join(
                    f"{'release' if k[0] == 'sem' else 'signal'} {n - init[k]} of {self._sem(k)} (there have been "
                    f"{self.count.get(k, 0)})"
                    for k, n in need.items()
                    if self.count.get(k, 0) + init[k] < n
                )
            elif op.name == "barrier" and op.barrier is not None:
                key = (st.g.id, op.barrier[0], self.calls.get((st.g.id, op.barrier[0], st.t), 0))
                why = f"barrier {op.barrier[0]} ({len(self.arrivals.get(key, {}))} of {op.barrier[1]} arrived)"
            else:
                keys = [k for c in op.src if c.packet for k in self.parts_of(c, step) if self.last.get(k) is None]
                why = f"the packets of {self.name(keys[0])}" + (f" and {len(keys) - 1} more" if len(keys) > 1 else "")
            lanes, later = _lanes(op), []
            for nxt in st.steps[st.pos + 1 :]:
                if nxt.op.name in SYNCS:
                    break
                other = _lanes(nxt.op)
                if lanes is not None and (other is None or not other <= lanes):
                    later.append(nxt.label)
            may = (
                (
                    f" (unless its other threads, which run on to {later[0]} before the next nop, unblock it: collc "
                    "runs a threadblock's ops in order)"
                )
                if later
                else ""
            )
            self.note("deadlock", f"{where} waits forever for {why}{may}", op.path)
        if len(stuck) > 5:
            self.note("deadlock", f"and {len(stuck) - 5} more threadblocks wait forever", stuck[5].tb.path)
        return bool(stuck)

    def unmatched(self) -> None:
        for key in sorted(set(self.count) | set(self.taken), key=str):
            given, taken = self.count.get(key, 0), self.taken.get(key, 0)
            if given != taken:
                words = ("releases", "acquires") if key[0] == "sem" else ("signals", "waits")
                self.note(
                    "unmatched",
                    f"{self._sem(key)} gets {given} {words[0]} and {taken} {words[1]}: the "
                    "difference stays in the semaphore for the next run",
                    self.first[key],
                )

    def ends(self) -> None:
        """Every access to a GPU's buffers is ordered before its kernel ends."""
        end = {g.id: np.zeros_like(self.tbs[0].S) for g in self.plan.gpus}
        for st in self.tbs:
            np.maximum(end[st.g.id], st.joined(len(st.steps)), out=end[st.g.id])
        for key, (eid, kind) in self.last.items():
            if not self.ordered(eid, end[key[0]], 0 if kind == "w" else 1):
                _, _, what, path = self.events[eid]
                self.note(
                    "race",
                    f"{what} writes {self.name(key)}, and nothing orders that before gpu {key[0]}'s "
                    "kernel ends (a signal after it that the GPU waits for): the caller may see the "
                    "buffer first",
                    path,
                    ("end", *key),
                )
        for key, reads in self.reads.items():
            for r in reads:
                if not self.ordered(r, end[key[0]], 1):
                    _, _, what, path = self.events[r]
                    self.note(
                        "race",
                        f"{what} reads {self.name(key)}, and nothing orders that before gpu "
                        f"{key[0]}'s kernel ends: the caller may change the buffer first",
                        path,
                        ("end", *key),
                    )

    def postcondition(self) -> None:
        plan, parts, wrong = self.plan, self.parts, 0
        p = plan.ngpus
        for g in plan.gpus:
            n_out = g.output_chunks or g.input_chunks
            for x in range(n_out * parts):
                c, part = divmod(x, parts)
                if plan.collective == "allreduce":
                    want, words = [r * self.n_in + x for r in range(p)], f"every GPU's chunk {c}, reduced"
                elif plan.collective == "allgather":
                    src, j = divmod(c, g.input_chunks)
                    want, words = [src * self.n_in + j * parts + part], f"gpu {src}'s chunk {j}"
                elif plan.collective == "reducescatter":
                    y = (g.id * g.output_chunks + c) * parts + part
                    want, words = [r * self.n_in + y for r in range(p)], f"every GPU's chunk {y // parts}, reduced"
                else:
                    src, j = divmod(c, n_out // p)
                    y = (g.id * (n_out // p) + j) * parts + part
                    want, words = [src * self.n_in + y], f"gpu {src}'s chunk {y // parts}"
                have = self.values.get(self.loc(g.id, "o", x))
                if have == tuple(sorted(want)):
                    continue
                wrong += 1
                if wrong > 5:
                    continue
                said = "nothing (never written)"
                if have is not None:
                    parts_said = [f"missing {self.who(v)}" for v in sorted(set(want) - set(have))[:3]]
                    parts_said += [f"{self.who(v)} that does not belong" for v in sorted(set(have) - set(want))[:3]]
                    said = "; ".join(parts_said) or "the right contributions, counted wrong"
                shown = f"o[{c}]" + (f" (part {part + 1} of {parts})" if parts > 1 else "")
                self.note("postcondition", f"gpu {g.id}'s output {shown} should hold {words}; it holds {said}", g.path)
        if wrong > 5:
            self.note("postcondition", f"and {wrong - 5} more output parts are wrong", plan.gpus[0].path)


def check_plan(plan: MscclppPlan) -> MscclppReport:
    """Every finding of the plan (see the module docstring): structure first, then, if there is none, one run per
    pipeline iteration count checked."""
    findings = _structure(plan)
    piped = any(op.pipeline for _, _, op in _walk(plan))
    iterations = PIPELINE_ITERATIONS if piped else (1,)
    if not findings:
        seen: set[tuple[str, str]] = set()
        for k in iterations:
            run = _Run(plan, k, f"{k} pipeline iteration(s)" if piped else "")
            run.run()
            if not run.blocked():
                run.unmatched()
                run.ends()
                run.postcondition()
            for f in run.findings:
                if (f.kind, f.message) not in seen:
                    seen.add((f.kind, f.message))
                    findings.append(f)
    ops = sum(1 for _ in _walk(plan))
    return MscclppReport(plan, tuple(findings), iterations if piped else (), ops, sum(len(g.tbs) for g in plan.gpus))
