"""A rank's threadblocks while `collc.backends.msccl` emits them: steps, dependencies, nops, channels (docs/msccl.md).

The emitter decides which threadblock performs which operation, in which
order; `RankProgram` appends each operation to its threadblock with the
dependencies it needs.  Accesses are tracked per *key*: a logical chunk (an
int), wherever the rank keeps it, or a landing slot (``(layer, chunk)``), the
scratch chunk where a receive-only threadblock stores a received value before
it is put in place.  A step that reads a key waits for the step that last wrote
it, a step that writes a key waits for the steps that read or wrote it before;
dependencies implied by others (program order, a dependency's own
dependencies) are dropped, and a step left with more than one gets one ``nop``
in front of it per extra dependency.  Because a chunk's input and home
locations are the same key, this also orders the accesses that overlap when
the call is in place.

`stalled` runs every rank's threadblocks against the runtimes' buffering, so
that the emitter can tell which connections need receive-only threadblocks;
`assign_channels` gives each threadblock its channel and `freeze` turns it into
the `Threadblock` the XML is written from.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from collc.backends.msccl_xml import Limits, Step, Threadblock
from collc.diagnostics import CollError

Loc = tuple[str, int]  # (buffer, offset); buffer "L": a landing slot, numbered by `landing_index`
Key = int | tuple[int, int]  # a logical chunk, or a landing slot (layer, chunk)

LANDING = "L"


def landing_index(n: int, layer: int, c: int) -> int:
    """The offset of landing slot (layer, chunk ``c``) in the placeholder buffer ``L``, ``n`` chunks a layer."""
    return layer * n + c


@dataclass(eq=False, slots=True)
class Op:
    """A step while its threadblock is being built (`Step` once it is done)."""

    type: str
    cnt: int
    dep: tuple[int, int] | None
    comment: str
    step: float  # the schedule step it belongs to (inf after the last)
    src: Loc | None = None
    dst: Loc | None = None
    hasdep: bool = False


@dataclass(eq=False, slots=True)
class TB:
    id: int
    send: int
    recv: int
    landing: bool = False  # receive-only; a receive that would wait for its step lands in scratch
    chan: int = 0
    steps: list[Op] = field(default_factory=list)
    clocks: list[dict[int, int]] = field(default_factory=list)  # per step: what it knows completed


class RankProgram:
    """One rank's threadblocks while its operations are emitted in the global order."""

    def __init__(
        self, rank: int, tbs: list[TB], home: Callable[[int], Loc], initial: Callable[[int], Loc | None]
    ) -> None:
        self.rank, self.tbs, self.home, self.initial = rank, tbs, home, initial
        self.by_send = {tb.send: tb for tb in tbs if tb.send >= 0}
        self.by_recv = {tb.recv: tb for tb in tbs if tb.recv >= 0}
        self.local: TB | None = None
        self.loc: dict[int, Loc] = {}
        self.writer: dict[Key, tuple[int, int]] = {}
        self.readers: dict[Key, list[tuple[int, int]]] = {}
        self.landed: set[tuple[int, int]] = set()  # the landing slots used

    def where(self, c: int) -> Loc:
        got = self.loc.get(c) or self.initial(c)
        if got is None:
            raise CollError(f"rank {self.rank} reads chunk {c}, which it does not hold (the schedule is unverified?)")
        return got

    def local_tb(self) -> TB:
        if self.local is None:
            self.local = TB(len(self.tbs), send=-1, recv=-1)
            self.tbs.append(self.local)
        return self.local

    def emit_chunks(
        self, tb: TB, type_: str, chunks: range, comment: str, step: float, *, reads: bool, writes: bool
    ) -> None:
        """Append an operation on ``chunks``, read where the rank keeps them and written to their homes."""
        src = self.where(chunks[0]) if reads else None
        dst = self.home(chunks[0]) if writes else None
        for i, c in enumerate(chunks):
            if (src is not None and self.where(c) != (src[0], src[1] + i)) or (
                dst is not None and self.home(c) != (dst[0], dst[1] + i)
            ):
                raise CollError(f"internal error (please report): rank {self.rank}: {comment}: chunks not contiguous")
        keys = list(chunks)
        self.emit(tb, type_, len(chunks), comment, step, src, dst, keys if reads else [], keys if writes else [])

    def emit(
        self,
        tb: TB,
        type_: str,
        cnt: int,
        comment: str,
        step: float,
        src: Loc | None,
        dst: Loc | None,
        reads: Sequence[Key],
        writes: Sequence[Key],
    ) -> None:
        """Append one operation: its dependencies, nops, and what it reads and writes."""
        deps, known = self._dependencies(tb, reads, writes)
        for t, i in deps[:-1]:
            self._append(tb, Op("nop", 0, (t, i), "", step), known)
        self._append(tb, Op(type_, cnt, deps[-1] if deps else None, comment, step, src, dst), known)
        me = (tb.id, len(tb.steps) - 1)
        for k in reads:
            self.readers.setdefault(k, []).append(me)
        for k in writes:
            self.writer[k] = me
            self.readers[k] = []
            if isinstance(k, int):
                self.loc[k] = self.home(k)
            else:
                self.landed.add(k)

    def _hazards(self, reads: Sequence[Key], writes: Sequence[Key]) -> list[tuple[int, int]]:
        """The earlier steps an access must follow: the last write of what it reads or writes, and the reads
        since of what it writes."""
        out = [self.writer[k] for k in (*reads, *writes) if k in self.writer]
        for k in writes:
            out += self.readers.get(k, [])
        return out

    def waits_in_step(self, tb: TB, reads: Sequence[Key], writes: Sequence[Key], step: int) -> bool:
        """Whether the access would wait for another threadblock's operation of the same schedule step."""
        return any(t != tb.id and self.tbs[t].steps[i].step == step for t, i in self._hazards(reads, writes))

    def _dependencies(
        self, tb: TB, reads: Sequence[Key], writes: Sequence[Key]
    ) -> tuple[list[tuple[int, int]], dict[int, int]]:
        """The steps of other threadblocks this one must wait for, less those already implied,
        and what the threadblock then knows completed."""
        wanted: dict[int, int] = {}
        for t, i in self._hazards(reads, writes):
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
        return deps, known

    @staticmethod
    def _append(tb: TB, op: Op, known: dict[int, int]) -> None:
        tb.steps.append(op)
        clock = dict(known)
        clock[tb.id] = len(tb.steps) - 1
        tb.clocks.append(clock)

    def landing_slots(self, n: int, base: int) -> dict[int, int]:
        """Scratch offsets from ``base`` for the landing slots used, layer by layer, in chunk order (so that the
        slots of a transfer, consecutive chunks of one layer, stay consecutive): placeholder offset -> offset."""
        out: dict[int, int] = {}
        for layer, c in sorted(self.landed):
            out[landing_index(n, layer, c)] = base + len(out)
        return out


def freeze(tb: TB, landing: dict[int, int]) -> Threadblock:
    """The finished threadblock, landing slots placed in scratch."""

    def place(where: Loc | None) -> Loc | None:
        return ("s", landing[where[1]]) if where is not None and where[0] == LANDING else where

    steps = []
    for s, op in enumerate(tb.steps):
        src, dst = place(op.src), place(op.dst)
        src, dst = src or dst or ("i", -1), dst or src or ("o", -1)  # a buffer the parsers accept where none is used
        depid, deps = op.dep if op.dep is not None else (-1, -1)
        steps.append(Step(s, op.type, src[0], src[1], dst[0], dst[1], op.cnt, depid, deps, op.hasdep, op.comment))
    return Threadblock(tb.id, tb.send, tb.recv, tb.chan, tuple(steps))


def assign_channels(tbs: list[list[TB]], limits: Limits) -> int:
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
    used: Counter[tuple[int, int, str]] = Counter()  # (rank, channel, "send"|"recv") -> threadblocks
    nchannels = 1
    for members in sorted(groups.values()):
        need: Counter[tuple[int, str]] = Counter()
        for r, i in members:
            tb = tbs[r][i]
            need.update((r, side) for side, peer in (("send", tb.send), ("recv", tb.recv)) if peer >= 0)
        (r, side), most = max(need.items(), key=lambda kv: kv[1]) if need else ((0, "send"), 0)
        if most > limits.threadblocks_per_channel:
            raise CollError(
                f"rank {r} has {most} {side} threadblocks linked through their connections, which must share "
                f"one channel; MSCCL runtimes take at most {limits.threadblocks_per_channel} per channel"
            )
        chan = next(
            c
            for c in range(limits.channels + 1)
            if c == limits.channels
            or all(used[(r, c, side)] + n <= limits.threadblocks_per_channel for (r, side), n in need.items())
        )
        for (r, side), n in need.items():
            used[(r, chan, side)] += n
        for r, i in members:
            tbs[r][i].chan = chan
        nchannels = max(nchannels, chan + 1)
    return nchannels  # more than limits.channels is refused by check_limits


SENDS = frozenset({"s", "rcs", "rrs", "rrcs"})
RECVS = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})


def stalled(tbs: list[list[TB]], slots: int) -> set[tuple[int, int]]:
    """Run the threadblocks of every rank (``tbs[rank]``) as the runtimes do, counting only chunks: a step waits
    for its predecessor and dependency, a receive for its message, a send for room on its connection, which
    buffers ``slots`` chunks, or, with nothing waiting there, for its receiver to be at the matching receive (the
    runtime then streams the message through).  This is the buffering `collc check` models, and one run decides
    whether every run completes (docs/plans.md).  Returns the connections (sender, receiver) whose sends wait
    forever for room; none when the program completes."""
    pcs = {(r, tb.id): 0 for r, ts in enumerate(tbs) for tb in ts}
    taker = {(tb.recv, r): tb for r, ts in enumerate(tbs) for tb in ts if tb.recv >= 0}
    fifo: dict[tuple[int, int], deque[int]] = {conn: deque() for conn in taker}
    held: Counter[tuple[int, int]] = Counter()

    def ready(r: int, op: Op) -> bool:
        return op.dep is None or pcs[(r, op.dep[0])] > op.dep[1]

    def room(conn: tuple[int, int], cnt: int, seen: frozenset[tuple[int, int]]) -> bool:
        if held[conn] + cnt <= slots:
            return True
        tb, r = taker[conn], conn[1]
        if held[conn] or (r, tb.id) in seen or pcs[(r, tb.id)] >= len(tb.steps):
            return False
        op = tb.steps[pcs[(r, tb.id)]]
        if op.type not in RECVS or not ready(r, op):
            return False
        return op.type not in SENDS or room((r, tb.send), op.cnt, seen | {(r, tb.id)})

    moved = True
    while moved:
        moved = False
        for r, ts in enumerate(tbs):
            for tb in ts:
                key = (r, tb.id)
                while pcs[key] < len(tb.steps):
                    op = tb.steps[pcs[key]]
                    if not ready(r, op) or (op.type in RECVS and not fifo[(tb.recv, r)]):
                        break
                    if op.type in SENDS and not room((r, tb.send), op.cnt, frozenset()):
                        break
                    if op.type in RECVS:
                        held[(tb.recv, r)] -= fifo[(tb.recv, r)].popleft()
                    if op.type in SENDS:
                        fifo[(r, tb.send)].append(op.cnt)
                        held[(r, tb.send)] += op.cnt
                    pcs[key] += 1
                    moved = True
    out = set()
    for r, ts in enumerate(tbs):
        for tb in ts:
            op = tb.steps[pcs[(r, tb.id)]] if pcs[(r, tb.id)] < len(tb.steps) else None
            if op is not None and op.type in SENDS and ready(r, op) and (op.type not in RECVS or fifo[(tb.recv, r)]):
                out.add((r, tb.send))
    if not out and any(pcs[(r, tb.id)] < len(tb.steps) for r, ts in enumerate(tbs) for tb in ts):
        raise CollError("internal error (please report): the MSCCL-IR program waits forever, with room to send")
    return out
