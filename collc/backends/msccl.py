"""Verified IR -> MSCCL-IR: the threadblock programs that MSCCL runtimes execute (docs/msccl.md).

A rank's buffer of logical chunks becomes the runtime's three buffers: the
input ``i``, the output ``o`` and a scratch ``s``.  A chunk a rank holds at the
start lives in ``i``; the first time the rank receives it, it moves to its
*home*: its place in ``o`` when the collective leaves it on that rank, a
scratch chunk otherwise.  Chunks that end in ``o`` without being received
(an allgather's own block) are copied there at the end.

Every (step, sender, receiver) message of the schedule (`collc.backends.tables`)
is cut into *transfers*: runs of consecutive chunks, contiguous in every buffer
they are read from or written to, of one action, at most `Limits.count` chunks.
Each transfer is one send on the sender and one receive on the receiver.  A
receive whose chunks the rank sends on, unchanged, in the next step is fused
with that send (``rcs``, ``rrcs``, or ``rrs`` when the received value is never
read again).

Threadblocks: one per peer the rank sends to or receives from, pairing a
receive peer with a send peer when that allows fusions, a receive peer with the
same send peer otherwise; local copies go to a threadblock of their own.

Order: every rank's operations are emitted in one global order, step by step,
a step's sends before its receives, so that every wait (on the previous
operation of the threadblock, on a dependency, on the matching send) points
backwards and the program cannot deadlock while the runtime has room for the
messages in flight.  The receives of a connection follow the order in which
its sender emits them.  Dependencies between threadblocks are computed per
logical chunk (read after write, write after read, write after write), which
also makes the program correct when the call is in place and ``i`` overlaps
``o``; dependencies already implied by others are dropped, and an operation
left with more than one gets ``nop`` steps in front of it, one per extra
dependency.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePath

from collc.backends import tables
from collc.collectives import EVERY, chunk_dest, chunk_origin, chunks_per_rank
from collc.diagnostics import CollError
from collc.ir import Collective, Schedule, params_text

__all__ = ["COLL_NAMES", "Algo", "Gpu", "Limits", "Step", "Threadblock", "lower", "to_xml"]

COLL_NAMES = {
    Collective.ALLREDUCE: "allreduce",
    Collective.ALLGATHER: "allgather",
    Collective.REDUCE_SCATTER: "reducescatter",
    Collective.ALLTOALL: "alltoall",
}
PROTOCOLS = ("Simple", "LL", "LL128")
_NAME_MAX = 63  # MSCCL_MAX_ALGO_NAME


@dataclass(frozen=True, slots=True)
class Limits:
    """What MSCCL runtimes accept (microsoft/msccl ``msccl.h`` and the RCCL MSCCL parser)."""

    steps_per_threadblock: int = 256  # MSCCL_MAX_NUM_STEPS, nops included
    threadblocks_per_channel: int = 32  # MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL, per direction
    threadblocks: int = 216  # MSCCL_MAX_NUM_THREAD_BLOCKS
    channels: int = 32  # MAXCHANNELS
    count: int = 71  # a step's cnt must stay below MSCCL_MAX_COUNT (72)
    offset: int = 32767  # offsets are int16 in the runtime


# --------------------------------------------------------------------------
# The lowered program (what to_xml writes)
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    """One ``<step>``: ``s`` is its index in the threadblock, nops included."""

    s: int
    type: str  # s r rcs rrs rrc rrcs cpy nop
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: bool
    comment: str  # the schedule step and .coll line it came from


@dataclass(frozen=True, slots=True)
class Threadblock:
    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class Gpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    threadblocks: tuple[Threadblock, ...]


@dataclass(frozen=True, slots=True)
class Algo:
    name: str
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: bool
    outofplace: bool
    min_bytes: int
    max_bytes: int
    gpus: tuple[Gpu, ...]
    source: str  # a one-line description: program, parameters, layout

    def count(self, type_: str) -> int:
        """How many steps of this type the program has."""
        return sum(st.type == type_ for g in self.gpus for tb in g.threadblocks for st in tb.steps)


# --------------------------------------------------------------------------
# Buffers: where a logical chunk lives on a rank
# --------------------------------------------------------------------------

Loc = tuple[str, int]  # (buffer, offset)


class _Layout:
    """Input, output and home locations of logical chunks (see the module docstring)."""

    def __init__(self, s: Schedule, written: list[set[int]]) -> None:
        self.p, self.n, self.coll = s.nranks, s.nchunks, s.collective
        self.k = chunks_per_rank(s.collective, s.nranks, s.nchunks)
        self.origin = chunk_origin(s.collective, s.nranks, s.nchunks, s.root)
        self.dest = chunk_dest(s.collective, s.nranks, s.nchunks, s.root)
        p, n, k = self.p, self.n, self.k
        self.i_chunks = {Collective.ALLGATHER: k, Collective.ALLTOALL: p * k}.get(self.coll, n)
        self.o_chunks = {Collective.REDUCE_SCATTER: k, Collective.ALLTOALL: p * k}.get(self.coll, n)
        self.scratch: list[dict[int, int]] = []
        for r in range(p):
            spill = sorted(c for c in written[r] if self.output(r, c) is None)
            self.scratch.append({c: i for i, c in enumerate(spill)})

    def input(self, r: int, c: int) -> int | None:
        """Offset in ``i`` of a chunk rank ``r`` holds at the start; None if it does not."""
        if self.origin[c] not in (EVERY, r):
            return None
        if self.coll is Collective.ALLGATHER:
            return c - r * self.k
        if self.coll is Collective.ALLTOALL:
            return c - r * self.p * self.k
        return c

    def output(self, r: int, c: int) -> int | None:
        """Offset in ``o`` of a chunk the collective leaves on rank ``r``; None otherwise."""
        if self.dest[c] not in (EVERY, r):
            return None
        if self.coll is Collective.REDUCE_SCATTER:
            return c - r * self.k
        if self.coll is Collective.ALLTOALL:
            src, j = divmod(c, self.p * self.k)[0], c % self.k
            return src * self.k + j
        return c

    def home(self, r: int, c: int) -> Loc:
        out = self.output(r, c)
        return ("o", out) if out is not None else ("s", self.scratch[r][c])

    def initial(self, r: int, c: int) -> Loc | None:
        off = self.input(r, c)
        return None if off is None else ("i", off)


# --------------------------------------------------------------------------
# Transfers
# --------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Transfer:
    """``cnt`` consecutive chunks from ``lo`` sent from ``src`` to ``dst`` in schedule step ``step``."""

    step: int
    src: int
    dst: int
    lo: int
    cnt: int
    reduce: bool
    line: str
    seq: int = -1  # its place among the sends of the connection src -> dst, once emitted
    fused_with: _Transfer | None = None  # on a receive: the next step's send it is fused with
    fused_into: _Transfer | None = None  # on a send: the receive it is fused into
    dead: bool = False  # a fused reduce whose result is never read again: rrs


class _Facts:
    """What the emitter needs to know about the whole schedule before emitting anything."""

    def __init__(self, s: Schedule, t: tables.Tables) -> None:
        self.p = s.nranks
        self.lines = {info.index: info for info in t.steps}
        # (step, src, dst) -> the message's runs, from the receiver's table (which knows the actions)
        self.messages: dict[tuple[int, int, int], tuple[tables.Run, ...]] = {}
        self.first_write: list[dict[int, int]] = [{} for _ in range(self.p)]
        self.sources: dict[tuple[int, int, int], list[int]] = {}  # (step, rank, chunk) -> senders
        # per rank and chunk: (step, order, kind) events, kind "send", "copy" or "reduce"
        self.events: list[dict[int, list[tuple[int, int, str]]]] = [{} for _ in range(self.p)]
        for r, steps in enumerate(t.ranks):
            for rs in steps:
                for m in rs.recvs:
                    self.messages[(rs.step, m.peer, r)] = m.runs
                    for run in m.runs:
                        for c in range(run.lo, run.hi):
                            self.first_write[r].setdefault(c, rs.step)
                            self.sources.setdefault((rs.step, r, c), []).append(m.peer)
                            kind = "reduce" if run.reduce else "copy"
                            self.events[r].setdefault(c, []).append((rs.step, 1, kind))
                for m in rs.sends:
                    for run in m.runs:
                        for c in range(run.lo, run.hi):
                            self.events[r].setdefault(c, []).append((rs.step, 0, "send"))
        for per_rank in self.events:
            for ev in per_rank.values():
                ev.sort()

    def written(self) -> list[set[int]]:
        return [set(fw) for fw in self.first_write]


class _Locator:
    """Where chunks are read and written at each point of the schedule."""

    def __init__(self, layout: _Layout, facts: _Facts) -> None:
        self.layout, self.facts = layout, facts

    def at_start(self, r: int, c: int, step: int) -> Loc | None:
        """The chunk's location on ``r`` at the start of ``step``."""
        if self.facts.first_write[r].get(c, math.inf) < step:
            return self.layout.home(r, c)
        return self.layout.initial(r, c)

    def operand(self, r: int, c: int, step: int, src: int) -> Loc | None:
        """The local operand of a reduce of ``c`` from ``src``: receives land in ascending sender order."""
        if any(q < src for q in self.facts.sources.get((step, r, c), ())):
            return self.layout.home(r, c)
        return self.at_start(r, c, step)


def _next(a: Loc | None, b: Loc | None) -> bool:
    """Whether ``b`` directly follows ``a`` in the same buffer."""
    return a is not None and b is not None and a[0] == b[0] and b[1] == a[1] + 1


def _short(line: str) -> str:
    """``/path/to/ring.coll:7`` -> ``ring.coll:7``: the comments name files as people know them."""
    return PurePath(line).name


def _transfers(facts: _Facts, loc: _Locator, limit: int) -> dict[tuple[int, int, int], list[_Transfer]]:
    """Every message cut into transfers (see the module docstring)."""
    out: dict[tuple[int, int, int], list[_Transfer]] = {}
    for (step, src, dst), runs in facts.messages.items():
        info = facts.lines.get(step)
        line = _short(info.lines[0]) if info is not None and info.lines else ""
        pieces: list[_Transfer] = []
        for run in runs:
            lo = run.lo
            for c in range(run.lo + 1, run.hi + 1):
                split = c == run.hi or c - lo == limit
                if not split:
                    reads = [(loc.at_start(src, c - 1, step), loc.at_start(src, c, step))]
                    writes = [(loc.layout.home(dst, c - 1), loc.layout.home(dst, c))]
                    if run.reduce:
                        reads.append((loc.operand(dst, c - 1, step, src), loc.operand(dst, c, step, src)))
                    split = not all(_next(a, b) for a, b in reads + writes)
                if split:
                    pieces.append(_Transfer(step, src, dst, lo, c - lo, run.reduce, line))
                    lo = c
        out[(step, src, dst)] = pieces
    return out


def _fusions(
    facts: _Facts, pieces: dict[tuple[int, int, int], list[_Transfer]]
) -> list[dict[_Transfer, list[_Transfer]]]:
    """Per rank: each receive -> the next step's sends of exactly its chunks that it may be fused with.

    Fusable when the receive is the only one of the step that writes those chunks
    on that rank, so the value sent in the next step is the value received."""
    by_sender: dict[tuple[int, int], list[_Transfer]] = {}
    for (step, src, _dst), ts in pieces.items():
        by_sender.setdefault((step, src), []).extend(ts)
    out: list[dict[_Transfer, list[_Transfer]]] = [{} for _ in range(facts.p)]
    for (step, _src, dst), ts in pieces.items():
        nxt = by_sender.get((step + 1, dst), [])
        for t in ts:
            if any(len(facts.sources[(step, dst, c)]) > 1 for c in range(t.lo, t.lo + t.cnt)):
                continue
            same = [u for u in nxt if u.lo == t.lo and u.cnt == t.cnt]
            if same:
                out[dst][t] = same
    return out


def _dead(facts: _Facts, layout: _Layout, t: _Transfer, onward: _Transfer) -> bool:
    """Whether the value ``t`` leaves on its receiver is never read except by ``onward``."""
    r = t.dst
    for c in range(t.lo, t.lo + t.cnt):
        skipped = False
        overwritten = False
        for step, _order, kind in facts.events[r].get(c, ()):
            if step <= t.step:
                continue
            if kind == "send" and step == onward.step and not skipped:
                skipped = True  # onward itself (one send of c to each peer per step)
                continue
            if kind == "copy":
                overwritten = True
            break
        else:
            if layout.output(r, c) is not None:
                return False
            continue
        if not overwritten:
            return False
    return True


# --------------------------------------------------------------------------
# Threadblocks
# --------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Op:
    """A step while its threadblock is being built (`Step` once it is done)."""

    type: str
    cnt: int
    dep: tuple[int, int] | None
    comment: str
    src: Loc | None = None
    dst: Loc | None = None
    hasdep: bool = False


@dataclass(eq=False, slots=True)
class _TB:
    id: int
    send: int
    recv: int
    chan: int = 0
    steps: list[_Op] = field(default_factory=list)
    clocks: list[dict[int, int]] = field(default_factory=list)  # per step: what it knows completed


def _pair_threadblocks(
    rank: int, sends_to: set[int], recvs_from: set[int], fusable: dict[_Transfer, list[_Transfer]]
) -> list[_TB]:
    """One threadblock per peer and direction: receive peers paired with send peers (see the module docstring)."""
    weight: dict[tuple[int, int], int] = {}
    for t, onward in fusable.items():
        for u in onward:
            weight[(t.src, u.dst)] = weight.get((t.src, u.dst), 0) + 1
    pairs: list[tuple[int, int]] = []
    free_recv, free_send = set(recvs_from), set(sends_to)
    for (a, b), _w in sorted(weight.items(), key=lambda kv: (-kv[1], kv[0])):
        if a in free_recv and b in free_send:
            pairs.append((a, b))
            free_recv.discard(a)
            free_send.discard(b)
    for q in sorted(free_recv & free_send):
        pairs.append((q, q))
    free_recv -= {a for a, _ in pairs}
    free_send -= {b for _, b in pairs}
    pairs += [(a, -1) for a in sorted(free_recv)] + [(-1, b) for b in sorted(free_send)]
    pairs.sort(key=lambda ab: (ab[1] if ab[1] >= 0 else 1 << 30, ab[0]))
    return [_TB(i, send=b, recv=a) for i, (a, b) in enumerate(pairs)]


def _assign_channels(tbs: list[list[_TB]], limits: Limits) -> int:
    """A channel per threadblock: both ends of a connection share it, and no rank has more than
    ``limits.threadblocks_per_channel`` send (or receive) threadblocks on one channel."""
    parent: dict[tuple[int, int], tuple[int, int]] = {}

    def find(x: tuple[int, int]) -> tuple[int, int]:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    by_send = {(r, tb.send): tb.id for r, ts in enumerate(tbs) for tb in ts if tb.send >= 0}
    for r, ts in enumerate(tbs):
        for tb in ts:
            find((r, tb.id))
            if tb.recv >= 0:
                parent[find((r, tb.id))] = find((tb.recv, by_send[(tb.recv, r)]))
    groups: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for key in parent:
        groups.setdefault(find(key), []).append(key)
    used: dict[tuple[int, int, str], int] = {}  # (rank, channel, "send"|"recv") -> threadblocks
    nchannels = 1
    for members in sorted(groups.values()):
        need: dict[tuple[int, str], int] = {}
        for r, i in members:
            tb = tbs[r][i]
            for side, peer in (("send", tb.send), ("recv", tb.recv)):
                if peer >= 0:
                    need[(r, side)] = need.get((r, side), 0) + 1
        chan = 0
        while any(used.get((r, chan, side), 0) + n > limits.threadblocks_per_channel for (r, side), n in need.items()):
            chan += 1
        for (r, side), n in need.items():
            used[(r, chan, side)] = used.get((r, chan, side), 0) + n
        for r, i in members:
            tbs[r][i].chan = chan
        nchannels = max(nchannels, chan + 1)
    return nchannels


# --------------------------------------------------------------------------
# Emission
# --------------------------------------------------------------------------


class _Rank:
    """One rank's threadblocks while its operations are emitted in the global order."""

    def __init__(self, rank: int, tbs: list[_TB], locate: _Locator) -> None:
        self.rank, self.tbs, self.locate = rank, tbs, locate
        self.by_send = {tb.send: tb for tb in tbs if tb.send >= 0}
        self.by_recv = {tb.recv: tb for tb in tbs if tb.recv >= 0}
        self.local: _TB | None = None
        self.loc: dict[int, Loc] = {}
        self.writer: dict[int, tuple[int, int]] = {}
        self.readers: dict[int, list[tuple[int, int]]] = {}

    def where(self, c: int) -> Loc:
        got = self.loc.get(c) or self.locate.layout.initial(self.rank, c)
        if got is None:
            raise CollError(f"rank {self.rank} reads chunk {c}, which it does not hold (the schedule is unverified?)")
        return got

    def local_tb(self) -> _TB:
        if self.local is None:
            self.local = _TB(len(self.tbs), send=-1, recv=-1)
            self.tbs.append(self.local)
        return self.local

    def emit(self, tb: _TB, type_: str, lo: int, cnt: int, reads: bool, writes: bool, comment: str) -> None:
        """Append one operation on chunks ``lo .. lo+cnt-1``: its buffers, dependencies and nops."""
        chunks = range(lo, lo + cnt)
        src = self.where(lo) if reads else None
        dst = self.locate.layout.home(self.rank, lo) if writes else None
        for i, c in enumerate(chunks):
            if (src is not None and self.where(c) != (src[0], src[1] + i)) or (
                dst is not None and self.locate.layout.home(self.rank, c) != (dst[0], dst[1] + i)
            ):
                where = f"rank {self.rank}, chunks {lo}..{lo + cnt - 1}"
                raise CollError(f"internal: {where} are not contiguous in a buffer ({comment})")
        wanted: dict[int, int] = {}
        for c in chunks:
            hazards = [self.writer[c]] if c in self.writer else []
            if writes:
                hazards += self.readers.get(c, [])
            for t, i in hazards:
                if t != tb.id:
                    wanted[t] = max(wanted.get(t, -1), i)
        known = dict(tb.clocks[-1]) if tb.clocks else {}
        deps = [(t, i) for t, i in wanted.items() if known.get(t, -1) < i]
        deps = [d for d in deps if not any(e != d and self.tbs[e[0]].clocks[e[1]].get(d[0], -1) >= d[1] for e in deps)]
        deps.sort()
        for t, i in deps:
            self.tbs[t].steps[i].hasdep = True
            for key, value in self.tbs[t].clocks[i].items():
                known[key] = max(known.get(key, -1), value)
        for t, i in deps[:-1]:
            self._append(tb, _Op("nop", 0, (t, i), ""), known)
        self._append(tb, _Op(type_, cnt, deps[-1] if deps else None, comment, src, dst), known)
        me = (tb.id, len(tb.steps) - 1)
        for c in chunks:
            if reads:
                self.readers.setdefault(c, []).append(me)
            if writes:
                self.writer[c] = me
                self.readers[c] = []
                self.loc[c] = self.locate.layout.home(self.rank, c)

    @staticmethod
    def _append(tb: _TB, op: _Op, known: dict[int, int]) -> None:
        tb.steps.append(op)
        clock = dict(known)
        clock[tb.id] = len(tb.steps) - 1
        tb.clocks.append(clock)


def _comment(t: _Transfer, what: str, lines: dict[int, tables.StepInfo]) -> str:
    info = lines.get(t.step)
    phase = f" ({info.phase})" if info is not None and info.phase else ""
    where = f", {t.line}" if t.line else ""
    return f"step {t.step}{phase}{where}: {what}"


def _chunks_text(lo: int, cnt: int) -> str:
    return f"chunk {lo}" if cnt == 1 else f"chunks {lo}..{lo + cnt - 1}"


def lower(
    schedule: Schedule,
    *,
    proto: str = "Simple",
    min_bytes: int = 0,
    max_bytes: int = 1 << 40,
    limits: Limits | None = None,
) -> Algo:
    """The MSCCL-IR program of ``schedule``, which must have passed `collc.verify.check.check`."""
    limits = limits or Limits()
    _require(schedule, proto, min_bytes, max_bytes)
    facts = _Facts(schedule, tables.from_schedule(schedule))
    layout = _Layout(schedule, facts.written())
    locate = _Locator(layout, facts)
    pieces = _transfers(facts, locate, limits.count)
    fusable = _fusions(facts, pieces)
    p = schedule.nranks
    sends_to: list[set[int]] = [set() for _ in range(p)]
    recvs_from: list[set[int]] = [set() for _ in range(p)]
    for _step, src, dst in pieces:
        sends_to[src].add(dst)
        recvs_from[dst].add(src)
    ranks = []
    for r in range(p):
        tbs = _pair_threadblocks(r, sends_to[r], recvs_from[r], fusable[r])
        ranks.append(_Rank(r, tbs, locate))
        paired = {(tb.recv, tb.send) for tb in tbs}
        for t, onward in fusable[r].items():
            for u in onward:
                if (t.src, u.dst) in paired and u.fused_into is None:
                    t.fused_with, u.fused_into = u, t
                    t.dead = t.reduce and _dead(facts, layout, t, u)
                    break
    _emit(schedule, facts, pieces, ranks)
    for rank in ranks:
        _final_copies(rank, layout, limits.count)
    nchannels = _assign_channels([rank.tbs for rank in ranks], limits)
    gpus = tuple(
        Gpu(
            id=rank.rank,
            i_chunks=layout.i_chunks,
            o_chunks=layout.o_chunks,
            s_chunks=len(layout.scratch[rank.rank]),
            threadblocks=tuple(_frozen(tb) for tb in rank.tbs),
        )
        for rank in ranks
    )
    algo = Algo(
        name=_name(schedule),
        proto=proto,
        nchannels=nchannels,
        nchunksperloop=max(layout.i_chunks, layout.o_chunks),
        ngpus=p,
        coll=COLL_NAMES[schedule.collective],
        inplace=schedule.collective is not Collective.ALLTOALL,
        outofplace=True,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        gpus=gpus,
        source=f"{PurePath(schedule.source).name} {params_text(schedule.params)}",
    )
    _check_limits(algo, limits)
    return algo


def _require(schedule: Schedule, proto: str, min_bytes: int, max_bytes: int) -> None:
    if schedule.collective not in COLL_NAMES:
        names = ", ".join(c.value for c in COLL_NAMES)
        raise CollError(
            f"{schedule.algorithm} is a {schedule.collective.value}; MSCCL-IR export supports {names}", schedule.span
        )
    if schedule.compresses():
        raise CollError(f"{schedule.algorithm} has compression points, which MSCCL-IR cannot express", schedule.span)
    if proto not in PROTOCOLS:
        raise CollError(f"unknown protocol {proto!r}; MSCCL runtimes know {', '.join(PROTOCOLS)}")
    if not 0 <= min_bytes <= max_bytes:
        raise CollError(f"the size range needs 0 <= minBytes <= maxBytes, got {min_bytes} and {max_bytes}")


def _emit(
    schedule: Schedule,
    facts: _Facts,
    pieces: dict[tuple[int, int, int], list[_Transfer]],
    ranks: list[_Rank],
) -> None:
    """Every transfer, in the global order: per step, every rank's sends, then every rank's receives."""
    seq: dict[tuple[int, int], int] = {}

    def sent(t: _Transfer) -> None:
        t.seq = seq.get((t.src, t.dst), 0)
        seq[(t.src, t.dst)] = t.seq + 1

    by_step: dict[int, list[_Transfer]] = {}
    for (step, _src, _dst), ts in pieces.items():
        by_step.setdefault(step, []).extend(ts)
    for step in sorted(by_step):
        ts = by_step[step]
        for t in sorted((t for t in ts if t.fused_into is None), key=lambda t: (t.src, t.dst, t.lo)):
            rank = ranks[t.src]
            what = f"send {_chunks_text(t.lo, t.cnt)} to rank {t.dst}"
            rank.emit(rank.by_send[t.dst], "s", t.lo, t.cnt, True, False, _comment(t, what, facts.lines))
            sent(t)
        for t in sorted(ts, key=lambda t: (t.dst, t.src, t.seq)):
            rank = ranks[t.dst]
            act = "reduce" if t.reduce else "copy"
            what = f"receive {_chunks_text(t.lo, t.cnt)} from rank {t.src} ({act})"
            onward = t.fused_with
            if onward is None:
                type_, writes = ("rrc", True) if t.reduce else ("r", True)
                tb = rank.by_recv[t.src]
            else:
                type_ = "rcs" if not t.reduce else ("rrs" if t.dead else "rrcs")
                writes = type_ != "rrs"
                tb = rank.by_send[onward.dst]
                what += f", then send {'them' if t.cnt > 1 else 'it'} to rank {onward.dst} for step {onward.step}"
                sent(onward)
            rank.emit(tb, type_, t.lo, t.cnt, t.reduce, writes, _comment(t, what, facts.lines))


def _final_copies(rank: _Rank, layout: _Layout, limit: int) -> None:
    """Copy the chunks the collective leaves on the rank and that never moved to ``o``."""
    todo = [c for c in range(layout.n) if layout.output(rank.rank, c) is not None and rank.where(c)[0] != "o"]
    for lo, cnt in _runs(todo, lambda c: (rank.where(c), layout.home(rank.rank, c)), limit):
        what = f"copy {_chunks_text(lo, cnt)} from the input to the output"
        rank.emit(rank.local_tb(), "cpy", lo, cnt, True, True, f"after the last step: {what}")


def _runs(chunks: list[int], places: Callable[[int], tuple[Loc, ...]], limit: int) -> Iterator[tuple[int, int]]:
    """(lo, cnt) runs of ``chunks`` consecutive in id and in every buffer ``places(c)`` names."""
    start = 0
    for i in range(1, len(chunks) + 1):
        if i < len(chunks) and chunks[i] == chunks[i - 1] + 1 and i - start < limit:
            before, after = places(chunks[i - 1]), places(chunks[i])
            if all(_next(a, b) for a, b in zip(before, after, strict=True)):
                continue
        yield chunks[start], i - start
        start = i


def _frozen(tb: _TB) -> Threadblock:
    steps = []
    for s, op in enumerate(tb.steps):
        src = op.src or op.dst or ("i", -1)  # a buffer the parsers accept where the type has none
        dst = op.dst or op.src or ("o", -1)
        depid, deps = op.dep if op.dep is not None else (-1, -1)
        steps.append(Step(s, op.type, src[0], src[1], dst[0], dst[1], op.cnt, depid, deps, op.hasdep, op.comment))
    return Threadblock(tb.id, tb.send, tb.recv, tb.chan, tuple(steps))


def _name(schedule: Schedule) -> str:
    text = f"{schedule.algorithm} {params_text(schedule.params)}".strip()
    return text if len(text) <= _NAME_MAX else text[: _NAME_MAX - 3] + "..."


def _check_limits(algo: Algo, limits: Limits) -> None:
    """Refuse programs that MSCCL runtimes would reject or silently ignore."""
    problems = []
    if algo.nchannels > limits.channels:
        problems.append(f"it needs {algo.nchannels} channels; runtimes have at most {limits.channels}")
    for g in algo.gpus:
        if len(g.threadblocks) > limits.threadblocks:
            problems.append(f"rank {g.id} needs {len(g.threadblocks)} threadblocks (at most {limits.threadblocks})")
        for tb in g.threadblocks:
            if len(tb.steps) > limits.steps_per_threadblock:
                problems.append(
                    f"rank {g.id}, threadblock {tb.id} (send {tb.send}, recv {tb.recv}) has {len(tb.steps)} steps "
                    f"(at most {limits.steps_per_threadblock}, nops included)"
                )
        if max(g.i_chunks, g.o_chunks, g.s_chunks) > limits.offset:
            problems.append(f"rank {g.id} has more than {limits.offset} chunks in a buffer")
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise CollError(
            f"the MSCCL-IR program is beyond what MSCCL runtimes accept: {shown}",
            notes=("fewer chunks or fewer steps per rank make the program smaller",),
        )


# --------------------------------------------------------------------------
# XML text
# --------------------------------------------------------------------------


def _attr(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


def _comment_text(text: str) -> str:
    return text.replace("--", "- -")


def to_xml(algo: Algo) -> str:
    """The XML text: one element per line, attributes on the element's line, spaces only, no XML
    declaration, every attribute the runtimes read present (their parsers are minimal: docs/msccl.md)."""
    out = [
        f'<algo name="{_attr(algo.name)}" proto="{algo.proto}" nchannels="{algo.nchannels}" '
        f'nchunksperloop="{algo.nchunksperloop}" ngpus="{algo.ngpus}" coll="{algo.coll}" '
        f'inplace="{int(algo.inplace)}" outofplace="{int(algo.outofplace)}" '
        f'minBytes="{algo.min_bytes}" maxBytes="{algo.max_bytes}">',
        f"  <!-- collc: {_comment_text(algo.source)} -->",
    ]
    for g in algo.gpus:
        out.append(f'  <gpu id="{g.id}" i_chunks="{g.i_chunks}" o_chunks="{g.o_chunks}" s_chunks="{g.s_chunks}">')
        for tb in g.threadblocks:
            out.append(f'    <tb id="{tb.id}" send="{tb.send}" recv="{tb.recv}" chan="{tb.chan}">')
            for st in tb.steps:
                if st.comment:
                    out.append(f"      <!-- {_comment_text(st.comment)} -->")
                out.append(
                    f'      <step s="{st.s}" type="{st.type}" srcbuf="{st.srcbuf}" srcoff="{st.srcoff}" '
                    f'dstbuf="{st.dstbuf}" dstoff="{st.dstoff}" cnt="{st.cnt}" depid="{st.depid}" '
                    f'deps="{st.deps}" hasdep="{int(st.hasdep)}"/>'
                )
            out.append("    </tb>")
        out.append("  </gpu>")
    out.append("</algo>")
    return "\n".join(out) + "\n"
