"""Happens-before for overlapping steps: the lanes of a schedule do not race.

A schedule whose ops carry lanes (`collc.ir.Step.lanes`, the ``lane J:`` blocks
of a program) lets an executor overlap steps: on a rank, an op of step t in
lane j waits only for the rank's earlier ops in lane j and in no lane, and an op
in no lane waits for all of them.  The verifier's other passes check the
schedule in lockstep, where every step waits for the one before; this pass
proves that every execution the lanes allow computes the same thing, by showing
that every two accesses to one buffer slot of which one writes are ordered by
happens-before.

Events are (rank, step, lane) groups of ops; each has a start, where its sends
read the buffer and its compress and decompress ops apply, and an end, where
its receives land.  Happens-before is reachability over

* start(e) -> end(e) for every event;
* end(e) -> start(e') for the next events of the same rank that e' waits for
  (program order, restricted by the lanes);
* start(s) -> end(r) for a message from a send of event s to a receive of
  event r in the same step (a receive lands after its data left).

An access is a read at the start (a send), a write at the end (a receive,
copy or reduce) or a write at the start (a local op).  Two accesses of one slot
(rank, chunk) in different events, at least one a write, race unless a path
leads from the point of the earlier one to the point of the later one.  Two
events of one step never are ordered: accesses of different lanes in one step
that conflict always race.  A schedule without lanes has nothing to check.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from collc.ir import Op, OpKind, Schedule
from collc.verify.findings import Collector, Finding

_READ, _WRITE = "read", "write"
_MAX_KEPT = 200  # races collected before the earliest are reported


@dataclass(frozen=True, slots=True)
class _Access:
    event: int
    kind: str  # read | write
    point: int  # 0: the start of the event, 1: its end
    op: Op
    step: int  # the step's index in the schedule
    lane: int | None


def _lane_text(lane: int | None) -> str:
    return "no lane" if lane is None else f"lane {lane}"


class _Graph:
    """The happens-before graph of a schedule's events (two nodes each: 2e is the start, 2e + 1 the end)."""

    def __init__(self, schedule: Schedule) -> None:
        self.events: dict[tuple[int, int, int | None], int] = {}
        self.of_rank: dict[int, list[tuple[int, int | None, int]]] = defaultdict(list)  # (step, lane, event)
        self.accesses: dict[tuple[int, int], list[_Access]] = defaultdict(list)
        sends: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
        recvs: list[tuple[int, int, int, int, int]] = []
        for i, step in enumerate(schedule.steps):
            for j, op in enumerate(step.ops):
                lane = step.lane(j)
                e = self._event(op.rank, i, lane)
                if op.kind is OpKind.SEND:
                    kind, point = _READ, 0
                    sends[(i, op.rank, op.peer)].append((e, op.chunks.bits))
                elif op.kind is OpKind.RECV:
                    kind, point = _WRITE, 1
                    recvs.append((i, op.rank, op.peer, e, op.chunks.bits))
                else:
                    kind, point = _WRITE, 0
                for c in op.chunks:
                    self.accesses[(op.rank, c)].append(_Access(e, kind, point, op, i, lane))
        self.succ: list[list[int]] = [[] for _ in range(2 * len(self.events))]
        for e in range(len(self.events)):
            self.succ[2 * e].append(2 * e + 1)
        for events in self.of_rank.values():
            self._program_order(events)
        for i, dst, src, e, bits in recvs:
            for s, sbits in sends.get((i, src, dst), ()):
                if sbits & bits:
                    self.succ[2 * s].append(2 * e + 1)
        self.reached: dict[int, set[int]] = {}

    def _event(self, rank: int, step: int, lane: int | None) -> int:
        key = (rank, step, lane)
        e = self.events.get(key)
        if e is None:
            e = self.events[key] = len(self.events)
            self.of_rank[rank].append((step, lane, e))
        return e

    def _program_order(self, events: list[tuple[int, int | None, int]]) -> None:
        """end(e) -> start of the next events of the rank that wait for e (events in step order)."""
        next_in_lane: dict[int, int] = {}  # lane -> the first event of that lane in a later step
        next_unlaned: int | None = None
        k = len(events)
        while k > 0:
            step = events[k - 1][0]
            first = k
            while first > 0 and events[first - 1][0] == step:
                first -= 1
            group = events[first:k]
            for _, lane, e in group:
                targets = list(next_in_lane.values()) if lane is None else [next_in_lane.get(lane)]
                targets.append(next_unlaned)
                self.succ[2 * e + 1].extend(2 * t for t in targets if t is not None)
            for _, lane, e in group:
                if lane is None:
                    next_unlaned = e
                else:
                    next_in_lane[lane] = e
            k = first

    def before(self, a: int, b: int) -> bool:
        """Whether node ``a`` happens before node ``b``."""
        seen = self.reached.get(a)
        if seen is None:
            seen, todo = {a}, [a]
            while todo:
                for n in self.succ[todo.pop()]:
                    if n not in seen:
                        seen.add(n)
                        todo.append(n)
            self.reached[a] = seen
        return b in seen


def _compatible(x: int | None, y: int | None) -> bool:
    """Whether program order alone orders events of lanes x and y in different steps."""
    return x is None or y is None or x == y


def find_races(schedule: Schedule, out: Collector) -> None:
    """Add a ``race`` finding for the earliest conflicting accesses that happens-before leaves unordered."""
    if not schedule.has_lanes():
        return
    graph = _Graph(schedule)
    races: list[tuple[int, int, int, int, _Access, _Access]] = []
    for (rank, chunk), accesses in sorted(graph.accesses.items()):
        for n, b in enumerate(accesses):
            for a in accesses[:n]:
                if a.event == b.event or (a.kind == _READ and b.kind == _READ):
                    continue
                if a.step != b.step and (
                    _compatible(a.lane, b.lane) or graph.before(2 * a.event + a.point, 2 * b.event + b.point)
                ):
                    continue
                races.append((b.step, a.step, rank, chunk, a, b))
                break
            if len(races) >= _MAX_KEPT:
                break
        if len(races) >= _MAX_KEPT:
            break
    for _, _, rank, chunk, a, b in sorted(races, key=lambda r: r[:4]):
        if not out.room("race"):
            continue
        out.add(_finding(schedule, rank, chunk, a, b))


def _finding(schedule: Schedule, rank: int, chunk: int, a: _Access, b: _Access) -> Finding:
    sa, sb = schedule.steps[a.step].index, schedule.steps[b.step].index
    first = f"step {sa} ({_lane_text(a.lane)})"
    second = f"step {sb} ({_lane_text(b.lane)})"
    if a.step == b.step:
        why = f"the two lanes of step {sa} may run in either order"
    else:
        why = f"nothing orders {second} after {first}: their lanes may overlap"
    if a.kind == _WRITE and b.kind == _READ:
        what = f"{second} may read chunk {chunk} of rank {rank} before the write of {first} lands"
    elif a.kind == _WRITE:
        what = f"{first} and {second} both write chunk {chunk} of rank {rank}, in either order"
    else:
        what = f"{second} may overwrite chunk {chunk} of rank {rank} before {first} reads it"
    verb = {OpKind.SEND: "sends", OpKind.RECV: "receives"}.get(a.op.kind, "compresses or decompresses")
    related = ((a.op.span, f"the other step: {first}, where rank {rank} {verb} chunk {chunk}"),)
    return Finding("race", f"lanes race: {what}; {why}", b.op.span, sb, rank, chunk, None, None, related)
