"""Verified IR -> MSCCL-IR: the threadblock programs that MSCCL runtimes execute (docs/msccl.md).

A rank's buffer of logical chunks becomes the runtime's three buffers: the
input ``i``, the output ``o`` and a scratch ``s``.  A chunk a rank holds at the
start lives in ``i``; the first time the rank stores a received value of it,
the chunk moves to its *home*: its place in ``o`` when the collective leaves it
on that rank, a scratch chunk otherwise.  Chunks that end in ``o`` without
being received (an allgather's own block) are copied there at the end.

Every (step, sender, receiver) message of the schedule (`collc.backends.tables`)
is cut into *transfers*: runs of consecutive chunks, contiguous in every buffer
they are read from or written to, of one action, at most `Limits.count` chunks.
Each transfer is one send on the sender and one receive on the receiver.  A
receive whose chunks the rank sends on, unchanged, in the next step is fused
with that send (``rcs``, ``rrcs``, or ``rrs`` when the received value is never
read again) when both are the only transfer between their ranks in their steps
and the fused send fits the connection's buffer (`BUFFERED` chunks for the
protocol) beside what the rank sent that peer in the step before.

Threadblocks: one per peer the rank sends to or receives from, pairing a
receive peer with a send peer when that allows fusions, a receive peer with the
same send peer otherwise; local copies go to a threadblock of their own.  A
peer that sends the rank a transfer longer than a connection buffers is
received on a receive-only threadblock, which is at its next receive whenever
the sender streams the transfer.  The lowering then runs the program against
the runtimes' buffering (`stalled`) and gives receive-only threadblocks to the
receivers of any sends that would wait forever, until none does (with every
peer received so, no send waits forever).

Order: schedule step by schedule step, each threadblock alternates its sends
and receives of the step (a receive waits while a send of the step still has to
read the chunks it writes, and a fused receive waits for its threadblock's
sends of the step), so that a connection holds few messages in flight.  A
receive on a receive-only threadblock waits for nothing of its step instead:
when it would, it *lands* in scratch and a ``cpy`` (or ``re`` for a reduce
whose operand the step writes first) on the local threadblock puts it in place
once the step allows.  Every wait (on the previous step of the threadblock, on
a dependency, on the matching send) points backwards in this order.  The
receives of a connection follow the order in which its sender emits the sends.
Dependencies between threadblocks are computed per logical chunk
(`collc.backends.msccl_threadblocks`), which also makes the program correct when
the call is in place and ``i`` overlaps ``o``.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import PurePath

from collc.backends import tables
from collc.backends.msccl_threadblocks import (
    LANDING,
    TB,
    RankProgram,
    assign_channels,
    freeze,
    landing_index,
    stalled,
)
from collc.backends.msccl_xml import BUFFERED, MAX_BYTES, PROTOCOLS, Algo, Gpu, Limits, check_limits, to_xml
from collc.collectives import EVERY, chunk_dest, chunk_origin, chunks_per_rank
from collc.diagnostics import CollError
from collc.ir import Collective, OpKind, Schedule, params_text

__all__ = ["COLL_NAMES", "PROTOCOLS", "Algo", "Limits", "check_options", "lower", "to_xml"]

COLL_NAMES = {
    Collective.ALLREDUCE: "allreduce",
    Collective.ALLGATHER: "allgather",
    Collective.REDUCE_SCATTER: "reducescatter",
    Collective.ALLTOALL: "alltoall",
}
_NAME_MAX = 63  # MSCCL_MAX_ALGO_NAME

Loc = tuple[str, int]  # (buffer, offset)


# --------------------------------------------------------------------------
# Buffers: where a logical chunk lives on a rank
# --------------------------------------------------------------------------


class _Layout:
    """Input, output and home locations of logical chunks (see the module docstring)."""

    def __init__(self, s: Schedule, spilled: list[set[int]]) -> None:
        self.p, self.n, self.coll = s.nranks, s.nchunks, s.collective
        self.k = chunks_per_rank(s.collective, s.nranks, s.nchunks)
        self.origin = chunk_origin(s.collective, s.nranks, s.nchunks, s.root)
        self.dest = chunk_dest(s.collective, s.nranks, s.nchunks, s.root)
        p, n, k = self.p, self.n, self.k
        self.i_chunks = {Collective.ALLGATHER: k, Collective.ALLTOALL: p * k}.get(self.coll, n)
        self.o_chunks = {Collective.REDUCE_SCATTER: k, Collective.ALLTOALL: p * k}.get(self.coll, n)
        self.scratch: list[dict[int, int]] = []
        self.spill(spilled)

    def spill(self, chunks: list[set[int]]) -> None:
        """Give scratch chunks, in chunk order, to the chunks each rank stores but does not keep."""
        self.scratch = []
        for r, mine in enumerate(chunks):
            spill = sorted(c for c in mine if self.output(r, c) is None)
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
            return c // (self.p * self.k) * self.k + c % self.k
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
    send_line: str  # file:line of the send and of the receive
    recv_line: str
    seq: int = -1  # its place among the sends of the connection src -> dst, once emitted
    onward: _Transfer | None = None  # on a receive: the next step's send it is fused with
    fused: bool = False  # on a send: sent by the receive it is fused with
    dead: bool = False  # a fused reduce whose result is never read again: rrs

    @property
    def chunks(self) -> range:
        return range(self.lo, self.lo + self.cnt)


class _Facts:
    """What the emitter needs to know about the whole schedule before emitting anything."""

    def __init__(self, s: Schedule, t: tables.Tables) -> None:
        self.p = s.nranks
        self.phases = {info.index: info.phase for info in t.steps}
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
        # (step, rank, peer, kind) -> [(chunk bits, "file:line")] of the schedule's ops
        self.op_lines: dict[tuple[int, int, int, OpKind], list[tuple[int, str]]] = {}
        for step in s.steps:
            for op in step.ops:
                where = f"{PurePath(op.span.file).name}:{op.span.line}"
                self.op_lines.setdefault((step.index, op.rank, op.peer, op.kind), []).append((op.chunks.bits, where))

    def line(self, step: int, rank: int, peer: int, kind: OpKind, chunk: int) -> str:
        """``file:line`` of the op that moves ``chunk``."""
        found = self.op_lines.get((step, rank, peer, kind), [])
        return next((where for bits, where in found if (bits >> chunk) & 1), found[0][1] if found else "")


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


def _runs(chunks: list[int], places: Callable[[int], tuple[Loc | None, ...]], limit: int) -> Iterator[tuple[int, int]]:
    """(lo, cnt) runs of ``chunks``, consecutive in id and in every buffer ``places(c)`` names, at most ``limit``."""
    start = 0
    for i in range(1, len(chunks) + 1):
        if i < len(chunks) and chunks[i] == chunks[i - 1] + 1 and i - start < limit:
            if all(_next(a, b) for a, b in zip(places(chunks[i - 1]), places(chunks[i]), strict=True)):
                continue
        yield chunks[start], i - start
        start = i


def _transfers(facts: _Facts, loc: _Locator, limit: int) -> dict[tuple[int, int, int], list[_Transfer]]:
    """Every message cut into transfers (see the module docstring)."""
    out: dict[tuple[int, int, int], list[_Transfer]] = {}
    for (step, src, dst), runs in facts.messages.items():
        pieces: list[_Transfer] = []
        for run in runs:
            places = _places(loc, step, src, dst, run.reduce)
            for lo, cnt in _runs(list(range(run.lo, run.hi)), places, limit):
                send_line = facts.line(step, src, dst, OpKind.SEND, lo)
                recv_line = facts.line(step, dst, src, OpKind.RECV, lo)
                pieces.append(_Transfer(step, src, dst, lo, cnt, run.reduce, send_line, recv_line))
        out[(step, src, dst)] = pieces
    return out


def _places(loc: _Locator, step: int, src: int, dst: int, reduce: bool) -> Callable[[int], tuple[Loc | None, ...]]:
    """Where a chunk of a message is read on the sender, written on the receiver and, for a
    reduce, read as the receiver's operand."""

    def places(c: int) -> tuple[Loc | None, ...]:
        where = (loc.at_start(src, c, step), loc.layout.home(dst, c))
        return (*where, loc.operand(dst, c, step, src)) if reduce else where

    return places


Pieces = dict[tuple[int, int, int], list[_Transfer]]  # (step, src, dst) -> the message's transfers
_Fusable = dict[_Transfer, list[_Transfer]]  # a receive -> the sends it may be fused with


def _fusable(facts: _Facts, pieces: Pieces) -> list[_Fusable]:
    """Per rank: each receive -> the next step's sends of exactly its chunks that it may be fused with.

    Fusable when the receive is the only one of the step that writes those chunks
    on that rank, so the value sent in the next step is the value received, and
    when it is the only transfer from its sender in the step and the send the only
    transfer to its peer in the step and the next: a fused send leaves a step
    early, and a connection must not fill up with messages its receiver takes only
    later.  Whether the send also fits the connection's buffer (`_fits`) is asked
    when fusions are chosen: threadblocks pair peers for every fusable receive, so
    that a ring whose sends are too long to fuse keeps one threadblock per rank."""
    by_sender: dict[tuple[int, int], list[_Transfer]] = {}
    for (step, src, _dst), ts in pieces.items():
        by_sender.setdefault((step, src), []).extend(ts)
    out: list[_Fusable] = [{} for _ in range(facts.p)]
    for (step, _src, dst), ts in pieces.items():
        if len(ts) != 1:
            continue
        t = ts[0]
        if any(len(facts.sources[(step, dst, c)]) > 1 for c in t.chunks):
            continue
        same = [
            u
            for u in by_sender.get((step + 1, dst), [])
            if u.lo == t.lo and u.cnt == t.cnt
            and len(pieces[(step + 1, dst, u.dst)]) == 1 and len(pieces.get((step, dst, u.dst), ())) <= 1
        ]  # fmt: skip
        if same:
            out[dst][t] = same
    return out


def _fits(pieces: Pieces, u: _Transfer, slots: int) -> bool:
    """Whether the onward send ``u``, fused, fits its connection's buffer (``slots`` chunks) beside what the rank
    sends its peer in the step before: a fused send leaves a step early, before the peer has taken that."""
    return u.cnt + sum(x.cnt for x in pieces.get((u.step - 1, u.src, u.dst), ())) <= slots


def _dead(facts: _Facts, layout: _Layout, t: _Transfer, onward: _Transfer) -> bool:
    """Whether the value ``t`` leaves on its receiver is never read except by ``onward``."""
    r = t.dst
    for c in t.chunks:
        skipped = False
        overwritten = False
        for step, _order, kind in facts.events[r].get(c, ()):
            if step <= t.step:
                continue
            if kind == "send" and step == onward.step and not skipped:
                skipped = True  # onward itself (one send of c to each peer per step)
                continue
            overwritten = kind == "copy"
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


def _pair_threadblocks(sends_to: set[int], recvs_from: set[int], fusable: _Fusable, landing: set[int]) -> list[TB]:
    """One threadblock per peer and direction: receive peers paired with send peers (see the module docstring),
    except the peers in ``landing``, each received on a threadblock that only receives."""
    weight: Counter[tuple[int, int]] = Counter(
        (t.src, u.dst) for t, onward in fusable.items() for u in onward if t.src not in landing
    )
    pairs: list[tuple[int, int]] = []
    free_recv, free_send = set(recvs_from) - landing, set(sends_to)
    for (a, b), _w in sorted(weight.items(), key=lambda kv: (-kv[1], kv[0])):
        if a in free_recv and b in free_send:
            pairs.append((a, b))
            free_recv.discard(a)
            free_send.discard(b)
    for q in sorted(free_recv & free_send):
        pairs.append((q, q))
    free_recv -= {a for a, _ in pairs}
    free_send -= {b for _, b in pairs}
    pairs += [(a, -1) for a in sorted(free_recv | (recvs_from & landing))] + [(-1, b) for b in sorted(free_send)]
    pairs.sort(key=lambda ab: (ab[1] if ab[1] >= 0 else 1 << 30, ab[0]))
    return [TB(i, send=b, recv=a, landing=a in landing) for i, (a, b) in enumerate(pairs)]


def _choose_fusions(
    facts: _Facts, layout: _Layout, pieces: Pieces, tbs: list[TB], fusable: _Fusable, slots: int
) -> None:
    """Fuse each receive with an onward send that fits (`_fits`) and whose (receive peer, send peer) has a
    threadblock."""
    paired = {(tb.recv, tb.send) for tb in tbs}
    for t, onward in fusable.items():
        u = next((u for u in onward if (t.src, u.dst) in paired and _fits(pieces, u, slots)), None)
        if u is not None:
            t.onward, u.fused = u, True
            t.dead = t.reduce and _dead(facts, layout, t, u)


# --------------------------------------------------------------------------
# Emission
# --------------------------------------------------------------------------


def _chunks_text(chunks: range) -> str:
    return f"chunk {chunks[0]}" if len(chunks) == 1 else f"chunks {chunks[0]}..{chunks[-1]}"


@dataclass(eq=False, slots=True)
class _Landed:
    """A receive stored in landing slots, to be put in place once its step allows."""

    t: _Transfer
    layer: int
    reduced: bool  # the landing slots hold the sum already (an rrc read the operand)


class _Emitter:
    """Emits every transfer into its threadblocks, step by step (see the module docstring)."""

    def __init__(self, facts: _Facts, ranks: list[RankProgram], n: int) -> None:
        self.facts, self.ranks, self.n = facts, ranks, n
        self.seq: Counter[tuple[int, int]] = Counter()

    def sent(self, t: _Transfer) -> None:
        t.seq = self.seq[(t.src, t.dst)]
        self.seq[(t.src, t.dst)] += 1

    def comment(self, t: _Transfer, line: str, what: str) -> str:
        phase = self.facts.phases.get(t.step, "")
        return f"step {t.step}{f' ({phase})' if phase else ''}, {line}: {what}"

    def run(self, pieces: Pieces) -> None:
        by_step: dict[int, list[_Transfer]] = {}
        for (step, _src, _dst), ts in pieces.items():
            by_step.setdefault(step, []).extend(ts)
        for step in sorted(by_step):
            sends = sorted((t for t in by_step[step] if not t.fused), key=lambda t: (t.src, t.dst, t.lo))
            for t in sends:
                self.sent(t)  # a threadblock emits its sends of a step in this order
            recvs = sorted(by_step[step], key=lambda t: (t.dst, t.src, t.seq))
            for rank in self.ranks:
                self.step(rank, [t for t in sends if t.src == rank.rank], [t for t in recvs if t.dst == rank.rank])

    def step(self, rank: RankProgram, sends: list[_Transfer], recvs: list[_Transfer]) -> None:
        """One rank's sends and receives of a step, each threadblock alternating between them; a receive-only
        threadblock's receive that would wait for the step lands in scratch and is put in place later."""
        out: dict[int, deque[_Transfer]] = {}
        into: dict[int, deque[_Transfer]] = {}
        for t in sends:
            out.setdefault(rank.by_send[t.dst].id, deque()).append(t)
        for t in recvs:
            into.setdefault(rank.by_recv[t.src].id, deque()).append(t)
        unread = Counter(c for t in sends for c in t.chunks)  # chunks sends of the step have still to read
        writers: dict[int, list[int]] = {}  # chunk -> the senders of the receives still to write it, ascending
        for t in recvs:
            for c in t.chunks:
                writers.setdefault(c, []).append(t.src)
        layers: Counter[int] = Counter()  # chunk -> the landing slots it has taken in this step
        landed: list[_Landed] = []

        def first(t: _Transfer) -> bool:  # a receive from a lower rank writes these chunks first
            return any(min(writers[c]) < t.src for c in t.chunks)

        def waits(t: _Transfer) -> bool:  # or a send of the step still reads them
            return first(t) or any(unread[c] > 0 for c in t.chunks)

        def done(t: _Transfer) -> None:
            for c in t.chunks:
                writers[c].remove(t.src)

        while out or into or landed:
            moved = False
            for tb_id in sorted(out):
                t = out[tb_id].popleft()
                what = f"send {_chunks_text(t.chunks)} to rank {t.dst}"
                comment = self.comment(t, t.send_line, what)
                rank.emit_chunks(rank.tbs[tb_id], "s", t.chunks, comment, t.step, reads=True, writes=False)
                unread.subtract(t.chunks)
                moved = True
                if not out[tb_id]:
                    del out[tb_id]
            for tb_id in sorted(into):
                t, tb = into[tb_id][0], rank.tbs[tb_id]
                chunks = list(t.chunks)
                if tb.landing and (waits(t) or rank.waits_in_step(tb, chunks if t.reduce else [], chunks, t.step)):
                    landed.append(self.land(rank, tb, t, layers, first(t)))  # frees the connection at once
                elif waits(t) or (t.onward is not None and tb_id in out):
                    continue  # waits for the step's sends of these chunks, a receive from a lower rank (the
                    # order _Locator.operand assumes), or, fused, for the sends of its threadblock
                else:
                    done(t)
                    self.receive(rank, tb, t)
                into[tb_id].popleft()
                moved = True
                if not into[tb_id]:
                    del into[tb_id]
            for item in list(landed):
                if not waits(item.t):
                    landed.remove(item)
                    done(item.t)
                    self.settle(rank, item)
                    moved = True
            if not moved:
                raise CollError(f"internal error (please report): rank {rank.rank}: the step's receives wait forever")

    def receive(self, rank: RankProgram, tb: TB, t: _Transfer) -> None:
        act = "reduce" if t.reduce else "copy"
        what = f"receive {_chunks_text(t.chunks)} from rank {t.src} ({act})"
        if t.onward is None:
            type_ = "rrc" if t.reduce else "r"
        else:
            type_ = "rcs" if not t.reduce else ("rrs" if t.dead else "rrcs")
            what += f", then send {'them' if t.cnt > 1 else 'it'} to rank {t.onward.dst} for step {t.onward.step}"
            self.sent(t.onward)
        comment = self.comment(t, t.recv_line, what)
        rank.emit_chunks(tb, type_, t.chunks, comment, t.step, reads=t.reduce, writes=type_ != "rrs")

    def land(self, rank: RankProgram, tb: TB, t: _Transfer, layers: Counter[int], first: bool) -> _Landed:
        """Receive ``t`` into landing slots at once, so that it waits for nothing of its step (see the module
        docstring); a reduce reads its operand then unless the step writes it first."""
        layer = max(layers[c] for c in t.chunks)
        for c in t.chunks:
            layers[c] = layer + 1
        chunks, slots = list(t.chunks), [(layer, c) for c in t.chunks]
        reduced = t.reduce and not first and not rank.waits_in_step(tb, chunks, [], t.step)
        src = rank.where(t.lo) if reduced else None
        if src is not None and any(rank.where(c) != (src[0], src[1] + i) for i, c in enumerate(chunks)):
            raise CollError(f"internal error (please report): rank {rank.rank}: operands not contiguous")
        later = "copied" if reduced or not t.reduce else "reduced"
        what = f"receive {_chunks_text(t.chunks)} from rank {t.src} ({'reduce' if t.reduce else 'copy'}) into "
        what += f"scratch, to be {later} into place after the step's other accesses to {'them' if t.cnt > 1 else 'it'}"
        dst = (LANDING, landing_index(self.n, layer, t.lo))
        reads = chunks if reduced else []
        rank.emit(tb, "rrc" if reduced else "r", t.cnt, self.comment(t, t.recv_line, what), t.step, src, dst, reads,
                  slots)  # fmt: skip
        return _Landed(t, layer, reduced)

    def settle(self, rank: RankProgram, item: _Landed) -> None:
        """Put a landed receive in place: copy it, or reduce it into the value the step left there."""
        t, chunks = item.t, list(item.t.chunks)
        src, dst = (LANDING, landing_index(self.n, item.layer, t.lo)), rank.home(t.lo)
        slots = [(item.layer, c) for c in chunks]
        if t.reduce and not item.reduced:
            if any(rank.where(c) != rank.home(c) for c in chunks):
                raise CollError(f"internal error (please report): rank {rank.rank}: a reduce lands before its operand")
            type_, what, reads = "re", "reduce", [*slots, *chunks]
        else:
            type_, what, reads = "cpy", "copy", slots
        what = f"{what} {_chunks_text(t.chunks)} received from rank {t.src} from scratch into place"
        rank.emit(rank.local_tb(), type_, t.cnt, self.comment(t, t.recv_line, what), t.step, src, dst, reads, chunks)


def _final_copies(rank: RankProgram, layout: _Layout, limit: int) -> None:
    """Copy the chunks the collective leaves on the rank and that never moved to ``o``."""
    todo = [c for c in range(layout.n) if layout.output(rank.rank, c) is not None and rank.where(c)[0] != "o"]
    for lo, cnt in _runs(todo, lambda c: (rank.where(c), layout.home(rank.rank, c)), limit):
        what = f"copy {_chunks_text(range(lo, lo + cnt))} from the input to the output"
        comment = f"after the last step: {what}"
        rank.emit_chunks(rank.local_tb(), "cpy", range(lo, lo + cnt), comment, math.inf, reads=True, writes=True)


def _program(
    facts: _Facts,
    layout: _Layout,
    pieces: Pieces,
    fusable: list[_Fusable],
    landing: list[set[int]],
    slots: int,
    limit: int,
) -> list[RankProgram]:
    """Every rank's threadblocks, with the receives from the peers in ``landing[rank]`` on receive-only ones."""
    p = facts.p
    sends_to: list[set[int]] = [set() for _ in range(p)]
    recvs_from: list[set[int]] = [set() for _ in range(p)]
    for ts in pieces.values():
        for t in ts:
            t.seq, t.onward, t.fused, t.dead = -1, None, False, False
            sends_to[t.src].add(t.dst)
            recvs_from[t.dst].add(t.src)
    ranks = []
    for r in range(p):
        tbs = _pair_threadblocks(sends_to[r], recvs_from[r], fusable[r], landing[r])
        _choose_fusions(facts, layout, pieces, tbs, fusable[r], slots)
        ranks.append(RankProgram(r, tbs, partial(layout.home, r), partial(layout.initial, r)))
    stored: list[set[int]] = [set() for _ in range(p)]
    for ts in pieces.values():
        for t in ts:
            if not t.dead:
                stored[t.dst].update(t.chunks)
    layout.spill(stored)  # scratch only for the chunks a step stores
    _Emitter(facts, ranks, layout.n).run(pieces)
    for rank in ranks:
        _final_copies(rank, layout, limit)
    return ranks


# --------------------------------------------------------------------------
# The whole lowering
# --------------------------------------------------------------------------


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
    p, slots = schedule.nranks, BUFFERED[proto]
    facts = _Facts(schedule, tables.from_schedule(schedule))
    layout = _Layout(schedule, [set(fw) for fw in facts.first_write])
    pieces = _transfers(facts, _Locator(layout, facts), limits.count)
    fusable = _fusable(facts, pieces)
    landing: list[set[int]] = [set() for _ in range(p)]  # per rank: the peers received on receive-only threadblocks
    for (_step, src, dst), ts in pieces.items():
        if any(t.cnt > slots for t in ts):
            landing[dst].add(src)
    while True:  # give receive-only threadblocks to the connections whose sends wait forever, until none does
        ranks = _program(facts, layout, pieces, fusable, landing, slots, limits.count)
        waiting = stalled([rank.tbs for rank in ranks], slots)
        if not waiting:
            break
        more = {(src, dst) for src, dst in waiting if src not in landing[dst]}
        if not more:  # only sends to receive-only threadblocks wait: give every connection one
            more = {(src, dst) for _step, src, dst in pieces if src not in landing[dst]}
        if not more:
            raise CollError("internal error (please report): the MSCCL-IR program waits forever")
        for src, dst in more:
            landing[dst].add(src)
    nchannels = assign_channels([rank.tbs for rank in ranks], limits)
    gpus = []
    for rank in ranks:
        spilled = len(layout.scratch[rank.rank])
        places = rank.landing_slots(layout.n, spilled)
        tbs = tuple(freeze(tb, places) for tb in rank.tbs)
        gpus.append(Gpu(rank.rank, layout.i_chunks, layout.o_chunks, spilled + len(places), tbs))
    name = f"{schedule.algorithm} {params_text(schedule.params)}".strip()
    algo = Algo(
        name=name if len(name) <= _NAME_MAX else name[: _NAME_MAX - 3] + "...",
        proto=proto,
        nchannels=nchannels,
        nchunksperloop=max(layout.i_chunks, layout.o_chunks),
        ngpus=p,
        coll=COLL_NAMES[schedule.collective],
        inplace=schedule.collective is not Collective.ALLTOALL,
        outofplace=True,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        gpus=tuple(gpus),
        source=f"{PurePath(schedule.source).name} {params_text(schedule.params)}",
    )
    check_limits(algo, limits)
    return algo


def _require(schedule: Schedule, proto: str, min_bytes: int, max_bytes: int) -> None:
    if schedule.collective not in COLL_NAMES:
        names = ", ".join(c.value for c in COLL_NAMES)
        raise CollError(
            f"{schedule.algorithm} is a {schedule.collective.value}; MSCCL-IR export supports {names}", schedule.span
        )
    if schedule.compresses():
        raise CollError(f"{schedule.algorithm} has compression points, which MSCCL-IR cannot express", schedule.span)
    if schedule.weighted():
        raise CollError(
            f"{schedule.algorithm} declares chunk weights (chunks of unequal sizes); MSCCL-IR cuts a buffer into "
            "equal chunks and cannot express them",
            schedule.span,
        )
    check_options(proto, min_bytes, max_bytes)


def check_options(proto: str, min_bytes: int, max_bytes: int) -> None:
    """The ``algo`` element's options, as the runtimes take them."""
    if proto not in PROTOCOLS:
        raise CollError(f"unknown protocol {proto!r}; MSCCL runtimes know {', '.join(PROTOCOLS)}")
    if not 0 <= min_bytes <= max_bytes <= MAX_BYTES:
        raise CollError(f"the size range needs 0 <= minBytes <= maxBytes < 2^63, got {min_bytes} and {max_bytes}")
