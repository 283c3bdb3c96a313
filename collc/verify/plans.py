"""Checking MSCCL-IR plans (`collc.frontend.msccl_plan`): structure, matching, deadlock, races, postcondition.

The runtime semantics checked (docs/plans.md):

* each threadblock runs its steps in order; a step also waits for its
  dependency (``depid``/``deps``: that threadblock of its GPU has finished
  that step);
* a connection is (sender GPU, receiver GPU, channel); its one sending
  threadblock (``send`` = peer on that channel) and its one receiving
  threadblock (``recv`` = peer) see its messages in FIFO order, the k-th send
  matching the k-th receive; a connection buffers ``slots`` chunks: 8 FIFO
  steps, a Simple-protocol chunk 4 of them and an LL or LL128 chunk 1 at
  large sizes (where the runtimes send one chunk per primitive call), so 2
  chunks for Simple and 8 for LL and LL128.  A send of ``cnt`` chunks goes
  when they fit beside the chunks its receiver has not taken yet, or, when
  nothing is waiting on the connection, while its receiver is at the
  matching receive (the runtime streams the longer message through a
  receiver that takes it; a receiver that sends on must be able to send, by
  the same rule);
* ``s`` sends its source chunks, ``r`` stores what it receives, ``rcs``
  stores and forwards it, ``rrs`` reduces it with its source chunks and
  forwards the sum, ``rrc`` stores the sum, ``rrcs`` stores and forwards it,
  ``cpy`` copies source to destination, ``re`` reduces source into
  destination, ``nop`` only orders.

Every step's next move is fixed (no wildcard receives, one threadblock per
connection end, waits on monotone conditions), so the plan is a Kahn network
with bounded FIFOs: every execution takes the same messages in the same
order, and either completes or stops in the same blocked state.  One
execution, run until nothing can move, therefore decides deadlock for all of
them; vector clocks over it give the happens-before relation that every
execution shares, so two accesses to one chunk, one a write, that it leaves
unordered are a race in some execution (reported even though this execution
got a value), and without races the values it computes are every
execution's.  Values are symbolic: the sorted contributions (GPU, input chunk)
a chunk sums.  In place, the input and output buffers overlap as the NCCL API
defines it; out of place, the input is read-only.  Both are checked when the
plan says it supports them.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from collc.frontend.msccl_plan import Plan, PlanGpu, PlanStep, PlanTb, buffers_fit

__all__ = ["PlanFinding", "PlanReport", "check_plan"]

SENDS = frozenset({"s", "rcs", "rrs", "rrcs"})
RECVS = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})
READS_SRC = frozenset({"s", "rrs", "rrc", "rrcs", "cpy", "re"})
WRITES_DST = frozenset({"r", "rcs", "rrc", "rrcs", "cpy", "re"})
REDUCES = frozenset({"rrs", "rrc", "rrcs", "re"})
SLOTS = {"Simple": 2, "LL": 8, "LL128": 8}  # chunks a connection buffers, by protocol (large sizes)

Value = tuple[int, ...] | None  # sorted contribution ids (gpu * nchunks + input chunk); None: never written
Loc = tuple[int, str, int]  # (gpu, buffer, chunk) after in-place aliasing


@dataclass(frozen=True, slots=True)
class PlanFinding:
    kind: str  # structure, unmatched, deadlock, race, uninitialized, double-count, read-only, postcondition
    message: str
    line: int
    mode: str = ""  # "in place", "out of place", or "" for both


@dataclass(frozen=True, slots=True)
class PlanReport:
    plan: Plan
    findings: tuple[PlanFinding, ...]
    modes: tuple[str, ...]
    steps: int
    threadblocks: int
    slots: int

    @property
    def ok(self) -> bool:
        return not self.findings


def _where(g: PlanGpu, tb: PlanTb, st: PlanStep) -> str:
    return f"gpu {g.id}, threadblock {tb.id}, step {st.s} ({st.type})"


def _layout(plan: Plan) -> list[PlanFinding]:
    """The buffer sizes the collective needs."""
    out = []
    p = plan.ngpus
    for g in plan.gpus:
        i, o = g.i_chunks, g.o_chunks
        if not buffers_fit(plan.coll, p, i, o):
            out.append(
                PlanFinding(
                    "structure", f"gpu {g.id}: i_chunks={i}, o_chunks={o} do not fit a {plan.coll} on {p} GPUs", g.line
                )
            )
    return out


# What the MSCCL runtimes take at most: steps per threadblock (256 in microsoft/msccl and msccl-executor-nccl; RCCL's
# executor takes 64), threadblocks per GPU (a dependency names one in 8 bits), channels, chunks per buffer (offsets
# are 16-bit).
LIMITS = {"steps": 256, "threadblocks": 128, "channels": 32, "chunks": 32767}


def _limits(plan: Plan) -> list[PlanFinding]:
    out = []
    if plan.nchannels > LIMITS["channels"]:
        out.append(PlanFinding("structure", f"nchannels={plan.nchannels}: runtimes have at most 32", 1))
    for g in plan.gpus:
        if len(g.tbs) > LIMITS["threadblocks"]:
            out.append(
                PlanFinding("structure", f"gpu {g.id} has {len(g.tbs)} threadblocks, runtimes at most 128", g.line)
            )
        if max(g.i_chunks, g.o_chunks, g.s_chunks) > LIMITS["chunks"]:
            out.append(PlanFinding("structure", f"gpu {g.id} has a buffer of more than 32767 chunks", g.line))
        for tb in g.tbs:
            if len(tb.steps) > LIMITS["steps"]:
                out.append(PlanFinding("structure", f"gpu {g.id}, threadblock {tb.id} has {len(tb.steps)} steps: "
                                       "runtimes take at most 256 (RCCL 64)", tb.line))  # fmt: skip
    return out


def _structure(plan: Plan) -> list[PlanFinding]:
    out = _layout(plan) + _limits(plan)
    p = plan.ngpus
    for g in plan.gpus:
        sizes = {"i": g.i_chunks, "o": g.o_chunks, "s": g.s_chunks}
        ends: dict[tuple[str, int, int], int] = {}
        for tb in g.tbs:
            for what, peer in (("send", tb.send), ("recv", tb.recv)):
                if peer >= p or peer == g.id:
                    out.append(
                        PlanFinding(
                            "structure",
                            f"gpu {g.id}, threadblock {tb.id}: {what}={peer} is not another GPU of the {p}",
                            tb.line,
                        )
                    )
                elif peer >= 0:
                    key = (what, peer, tb.chan)
                    if key in ends:
                        out.append(
                            PlanFinding(
                                "structure",
                                f"gpu {g.id}: threadblocks {ends[key]} and {tb.id} both "
                                f"{what} {'to' if what == 'send' else 'from'} gpu {peer} on channel "
                                f"{tb.chan}: a connection has one threadblock at each end",
                                tb.line,
                            )
                        )
                    ends[key] = tb.id
            if tb.chan >= plan.nchannels:
                out.append(
                    PlanFinding(
                        "structure",
                        f"gpu {g.id}, threadblock {tb.id}: channel {tb.chan} but nchannels={plan.nchannels}",
                        tb.line,
                    )
                )
            for st in tb.steps:
                here = _where(g, tb, st)
                if st.type in SENDS and tb.send < 0:
                    out.append(PlanFinding("structure", f"{here} sends, but its threadblock has no send peer", st.line))
                if st.type in RECVS and tb.recv < 0:
                    out.append(
                        PlanFinding("structure", f"{here} receives, but its threadblock has no recv peer", st.line)
                    )
                if st.depid >= 0:
                    if st.depid >= len(g.tbs) or st.deps < 0 or st.deps >= len(g.tbs[st.depid].steps):
                        out.append(
                            PlanFinding(
                                "structure",
                                f"{here} depends on threadblock {st.depid} step "
                                f"{st.deps}, which gpu {g.id} does not have",
                                st.line,
                            )
                        )
                    elif not g.tbs[st.depid].steps[st.deps].hasdep:
                        out.append(
                            PlanFinding(
                                "structure",
                                f"{here} depends on threadblock {st.depid} step {st.deps}, which has hasdep=0: the "
                                "runtime signals only steps with hasdep=1, so the wait ends at a later step of that "
                                "threadblock, or never",
                                st.line,
                            )
                        )
                    elif st.depid == tb.id and st.deps >= st.s:
                        out.append(
                            PlanFinding(
                                "structure",
                                f"{here} depends on its own threadblock's step {st.deps}, which comes after it",
                                st.line,
                            )
                        )
                uses = ([("srcbuf", st.srcbuf, st.srcoff)] if st.type in READS_SRC else []) + (
                    [("dstbuf", st.dstbuf, st.dstoff)] if st.type in WRITES_DST else []
                )
                for name, buf, off in uses:
                    if off < 0 or off + st.cnt > sizes[buf]:
                        out.append(
                            PlanFinding(
                                "structure",
                                f"{here}: {name} {buf}[{off}..{off + st.cnt - 1}] is "
                                f"beyond the {sizes[buf]} chunks of {buf}",
                                st.line,
                            )
                        )
    return out


@dataclass
class _Message:
    values: list[Value]
    clock: np.ndarray
    line: int
    where: str


@dataclass
class _Run:
    """One execution of a plan in one mode."""

    plan: Plan
    inplace: bool
    slots: int
    findings: list[PlanFinding] = field(default_factory=list)

    def __post_init__(self) -> None:
        plan = self.plan
        self.mode = "in place" if self.inplace else "out of place"
        self.n_in = max((g.i_chunks for g in plan.gpus), default=0)
        self.tb_index: dict[tuple[int, int], int] = {}
        for g in plan.gpus:
            for tb in g.tbs:
                self.tb_index[(g.id, tb.id)] = len(self.tb_index)
        self.values: dict[Loc, Value] = {}
        for g in plan.gpus:
            for c in range(g.i_chunks):
                self.values[self.loc(g, "i", c)] = (g.id * self.n_in + c,)
        self.last_write: dict[Loc, tuple[int, int, str]] = {}
        self.reads: dict[Loc, list[tuple[int, int, str]]] = {}
        self.reported: set[tuple[str, Loc]] = set()

    def loc(self, g: PlanGpu, buf: str, c: int) -> Loc:
        """The location a chunk is, after the in-place overlap of the input and output buffers."""
        if self.inplace:
            coll = self.plan.coll
            if coll == "allreduce" and buf == "i":
                return (g.id, "o", c)
            if coll == "allgather" and buf == "i":
                return (g.id, "o", g.id * g.i_chunks + c)
            if coll == "reducescatter" and buf == "o":
                return (g.id, "i", g.id * g.o_chunks + c)
        return (g.id, buf, c)

    def note(self, kind: str, message: str, line: int, key: Loc | None = None) -> None:
        if key is not None:
            if (kind, key) in self.reported:
                return
            self.reported.add((kind, key))
        if len(self.findings) < 200:
            self.findings.append(PlanFinding(kind, message, line, self.mode))

    def access(self, key: Loc, write: bool, t: int, s: int, clock: np.ndarray, where: str, line: int) -> None:
        """Race detection: the access must be ordered after the last write (and, a write, after the reads)."""
        earlier = [self.last_write[key]] if key in self.last_write else []
        if write:
            earlier += self.reads.get(key, [])
        for et, es, ewhere in earlier:
            if (et, es) != (t, s) and clock[et] <= es:
                g, buf, c = key
                self.note(
                    "race",
                    f"gpu {g}'s {buf}[{c}]: {where} {'writes' if write else 'reads'} it, and {ewhere} "
                    "accesses it, with nothing ordering the two (no dependency or message path)",
                    line,
                    key,
                )
        if write:
            self.last_write[key] = (t, s, where)
            self.reads[key] = []
        else:
            self.reads.setdefault(key, []).append((t, s, where))

    def reduce(self, a: Value, b: Value, where: str, line: int, key: Loc) -> Value:
        if a is None or b is None:
            g, buf, c = key
            self.note("uninitialized", f"{where} reduces gpu {g}'s {buf}[{c}] with a chunk nothing wrote", line, key)
            return None
        merged = tuple(heapq.merge(a, b))
        if len(set(merged)) != len(merged):
            twice = sorted({x for x in merged if merged.count(x) > 1})
            names = ", ".join(f"gpu {x // self.n_in} chunk {x % self.n_in}" for x in twice[:4])
            self.note("double-count", f"{where} counts {names} twice", line, key)
            return tuple(sorted(set(merged)))
        return merged


def _execute(run: _Run) -> None:
    plan = run.plan
    ntb = len(run.tb_index)
    pcs = [0] * ntb
    clocks = [np.zeros(ntb, dtype=np.int32) for _ in range(ntb)]
    tbs = [(g, tb) for g in plan.gpus for tb in g.tbs]
    wanted = {(run.tb_index[(g.id, st.depid)], st.deps) for g, tb in tbs for st in tb.steps if st.depid >= 0}
    kept: dict[tuple[int, int], np.ndarray] = {}
    conns: dict[tuple[int, int, int], deque[_Message]] = {}
    held: dict[tuple[int, int, int], int] = {}  # chunks on each connection not taken yet
    taker = {(tb.recv, g.id, tb.chan): t for t, (g, tb) in enumerate(tbs) if tb.recv >= 0}

    def room(conn: tuple[int, int, int], cnt: int, seen: frozenset[int]) -> bool:
        """Whether a send of cnt chunks can go on the connection now (see the module docstring)."""
        queued = held.get(conn, 0)
        if queued + cnt <= run.slots:
            return True
        r = taker.get(conn)
        if queued or r is None or r in seen or pcs[r] >= len(tbs[r][1].steps):
            return False
        rg, rtb = tbs[r]
        nxt = rtb.steps[pcs[r]]
        if nxt.type not in RECVS or (nxt.depid >= 0 and pcs[run.tb_index[(rg.id, nxt.depid)]] <= nxt.deps):
            return False
        return nxt.type not in SENDS or room((rg.id, rtb.send, rtb.chan), nxt.cnt, seen | {r})

    moved = True
    while moved:
        moved = False
        for t, (g, tb) in enumerate(tbs):
            while pcs[t] < len(tb.steps):
                st = tb.steps[pcs[t]]
                clock = clocks[t].copy()
                if st.depid >= 0:
                    d = run.tb_index[(g.id, st.depid)]
                    if pcs[d] <= st.deps:
                        break
                    np.maximum(clock, kept[(d, st.deps)], out=clock)
                inbox = conns.setdefault((tb.recv, g.id, tb.chan), deque()) if st.type in RECVS else None
                outbox = conns.setdefault((g.id, tb.send, tb.chan), deque()) if st.type in SENDS else None
                if inbox is not None and not inbox:
                    break
                if outbox is not None and not room((g.id, tb.send, tb.chan), st.cnt, frozenset()):
                    break
                message = inbox.popleft() if inbox is not None else None
                if message is not None:
                    np.maximum(clock, message.clock, out=clock)
                    held[(tb.recv, g.id, tb.chan)] -= len(message.values)
                clock[t] = st.s + 1
                _step(run, g, tb, st, t, clock, message, outbox)
                if outbox is not None:
                    conn = (g.id, tb.send, tb.chan)
                    held[conn] = held.get(conn, 0) + len(outbox[-1].values)
                clocks[t] = clock
                if (t, st.s) in wanted:
                    kept[(t, st.s)] = clock
                pcs[t] += 1
                moved = True
    _blocked(run, tbs, pcs, conns)


def _step(
    run: _Run,
    g: PlanGpu,
    tb: PlanTb,
    st: PlanStep,
    t: int,
    clock: np.ndarray,
    message: _Message | None,
    outbox: deque[_Message] | None,
) -> None:
    where = f"{_where(g, tb, st)} ({run.plan.where(st.line)})"
    src = [run.loc(g, st.srcbuf, st.srcoff + j) for j in range(st.cnt)]
    dst = [run.loc(g, st.dstbuf, st.dstoff + j) for j in range(st.cnt)]
    got: list[Value] = []
    if message is not None:
        got = list(message.values)
        if len(got) != st.cnt:
            run.note(
                "unmatched",
                f"{where} receives {st.cnt} chunk(s), but the matching send ({message.where}) sends {len(got)}",
                st.line,
            )
            got = (got + [None] * st.cnt)[: st.cnt]
    read: list[Value] = []
    if st.type in READS_SRC:
        for key in src:
            run.access(key, False, t, st.s, clock, where, st.line)
            read.append(run.values.get(key))
    if st.type == "re":
        for key in dst:
            run.access(key, False, t, st.s, clock, where, st.line)
    if st.type in ("s", "cpy"):
        out = read
    elif st.type in ("r", "rcs"):
        out = got
    elif st.type == "re":
        out = [run.reduce(run.values.get(d), v, where, st.line, d) for d, v in zip(dst, read, strict=True)]
    elif st.type in REDUCES:
        out = [run.reduce(a, b, where, st.line, key) for a, b, key in zip(got, read, src, strict=True)]
    else:
        out = []
    if st.type == "s":
        for key, v in zip(src, out, strict=True):
            if v is None:
                gid, buf, c = key
                run.note("uninitialized", f"{where} sends gpu {gid}'s {buf}[{c}], which nothing wrote", st.line, key)
    if st.type in WRITES_DST:
        for key, v in zip(dst, out, strict=True):
            if not run.inplace and key[1] == "i":
                run.note(
                    "read-only",
                    f"{where} writes gpu {key[0]}'s input buffer i[{key[2]}]: out of place, the "
                    "caller's send buffer is read-only",
                    st.line,
                    key,
                )
            run.access(key, True, t, st.s, clock, where, st.line)
            run.values[key] = v
    if outbox is not None:
        outbox.append(_Message(out, clock, st.line, where))


def _blocked(run: _Run, tbs: list[tuple[PlanGpu, PlanTb]], pcs: list[int], conns: dict) -> None:
    stuck = [(t, g, tb) for t, (g, tb) in enumerate(tbs) if pcs[t] < len(tb.steps)]
    for t, g, tb in stuck[:5]:
        st = tb.steps[pcs[t]]
        if st.depid >= 0 and pcs[run.tb_index[(g.id, st.depid)]] <= st.deps:
            why = f"threadblock {st.depid}'s step {st.deps}"
        elif st.type in RECVS and not conns.get((tb.recv, g.id, tb.chan)):
            why = f"a message from gpu {tb.recv} on channel {tb.chan}"
        else:
            why = (
                f"room on its connection to gpu {tb.send} (channel {tb.chan}: its {st.cnt} chunk(s) do not fit "
                f"beside what is not taken yet in a buffer of {run.slots}, and its receiver is not taking them)"
            )
        run.note("deadlock", f"{_where(g, tb, st)} ({run.plan.where(st.line)}) waits forever for {why}", st.line)
    if len(stuck) > 5:
        run.note("deadlock", f"and {len(stuck) - 5} more threadblocks wait forever", stuck[5][2].line)
    if stuck:
        return
    for (src, dst, chan), queue in conns.items():
        if queue:
            run.note(
                "unmatched",
                f"gpu {src} sends gpu {dst} {len(queue)} message(s) on channel {chan} that no step "
                f"receives (the first from {queue[0].where})",
                queue[0].line,
            )


def _expected(plan: Plan, g: PlanGpu, n_in: int) -> list[tuple[int, tuple[int, ...], str]]:
    """Every output chunk of gpu g, its contributions, and what it should hold in words."""
    p, out = plan.ngpus, []
    for c in range(g.o_chunks):
        if plan.coll == "allreduce":
            want = tuple(r * n_in + c for r in range(p))
            words = f"every GPU's chunk {c}, reduced"
        elif plan.coll == "allgather":
            k = g.o_chunks // p
            want = ((c // k) * n_in + c % k,)
            words = f"gpu {c // k}'s chunk {c % k}"
        elif plan.coll == "reducescatter":
            want = tuple(r * n_in + g.id * g.o_chunks + c for r in range(p))
            words = f"every GPU's chunk {g.id * g.o_chunks + c}, reduced"
        else:
            k = g.o_chunks // p
            src, j = divmod(c, k)
            want = (src * n_in + g.id * k + j,)
            words = f"gpu {src}'s chunk {g.id * k + j}"
        out.append((c, want, words))
    return out


def _postcondition(run: _Run) -> None:
    wrong = 0
    for g in run.plan.gpus:
        for c, want, words in _expected(run.plan, g, run.n_in):
            have = run.values.get(run.loc(g, "o", c))
            if have == want:
                continue
            wrong += 1
            if wrong > 5:
                continue
            if have is None:
                said = "nothing (never written)"
            else:
                missing = sorted(set(want) - set(have))
                extra = sorted(set(have) - set(want))
                parts = [f"missing gpu {x // run.n_in} chunk {x % run.n_in}" for x in missing[:3]]
                parts += [f"gpu {x // run.n_in} chunk {x % run.n_in} that does not belong" for x in extra[:3]]
                said = "; ".join(parts) or "the right contributions, counted wrong"
            run.note("postcondition", f"gpu {g.id}'s output o[{c}] should hold {words}; it holds {said}", g.line)
    if wrong > 5:
        run.note("postcondition", f"and {wrong - 5} more output chunks are wrong", run.plan.gpus[0].line)


def check_plan(plan: Plan, slots: int | None = None) -> PlanReport:
    """Every finding of the plan, in each mode it supports (see the module docstring); ``slots``: the chunks a
    connection buffers (default: the plan's protocol's)."""
    slots = slots if slots is not None else SLOTS.get(plan.proto, 2)
    findings = _structure(plan)
    modes = tuple(m for m, on in (("in place", plan.inplace), ("out of place", plan.outofplace)) if on)
    if plan.coll == "alltoall" and "in place" in modes:
        findings.append(
            PlanFinding(
                "structure",
                "an alltoall plan cannot run in place (inplace=1): its output "
                "would overwrite input other GPUs still read",
                plan.gpus[0].line if plan.gpus else 1,
            )
        )
    if not modes:
        findings.append(PlanFinding("structure", "the plan says it runs neither in place nor out of place", 1))
    if not findings:
        for mode in modes:
            run = _Run(plan, mode == "in place", slots)
            _execute(run)
            if not any(f.kind == "deadlock" for f in run.findings):
                _postcondition(run)
            findings.extend(run.findings)
    steps = sum(len(tb.steps) for g in plan.gpus for tb in g.tbs)
    return PlanReport(plan, tuple(findings), modes, steps, sum(len(g.tbs) for g in plan.gpus), slots)
