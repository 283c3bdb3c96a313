"""Dataflow execution of a schedule on a network: ranks start sends when their data is there, not at a barrier.

`collc.simulate` builds an `EventGraph` once per schedule and topology (`build`), and `run`
gives the time of one vector size.  The model (``docs/simulate.md``, "Dataflow execution"):

* **Groups.**  The ops of one rank in one step that do work (its sends and its local
  compress/decompress ops) form a group; in a step with lanes (``Step.lanes``), those of
  one rank and one lane, so that lane j's sends wait only for lane j's data.  A rank runs
  its groups in step order on one engine: a group starts when the engine is free and every
  chunk it reads has been written there (the last receive or local op on that chunk at that
  rank in an earlier step), and holds the engine for ``step_overhead`` plus its codec work
  (raw bytes encoded by its sends with a codec and its compress ops at ``encode_bandwidth``,
  raw bytes its decompress ops decode at ``decode_bandwidth``).  Then its messages enter the
  network together.
* **Links.**  Every link serves the messages that cross it one after the other in the order
  they enter the network (first come, first served; a fluid server of its bandwidth): a
  message's share ``w`` of its ``b`` bytes occupies the link ``w*b/bandwidth`` seconds from
  the later of its entry and the link's last release.  A message has crossed the network when
  every link of its route has served it, and arrives its route's latency later.
* **Landings.**  A receive lands when its message has arrived, after the earlier writes of
  its chunks at that rank (a reduce needs the value it adds to) and after the groups that
  read those chunks before (a send reads its data when it enters the network), plus the time
  to decode it when it travelled with a codec.  Receives are posted ahead: a message is never
  held back by its receiver.

The time of the schedule is the last group's or landing's time (`run`); `trace` keeps the time
of every group, message and landing as well (a `Trace`, what `collc viz --timeline` draws).  Along the way every time
keeps the breakdown of the chain of events that determined it (the critical path): engine
overhead, latency, link transfer (its own message's or those it queued behind) and codec work.

When every group of step s depends on every landing of step s-1 and each link carries one
message per step, this is the lockstep model's time (``collc.simulate``); it differs where
ranks proceed at their own pace, which is what lets a pipeline overlap its stages.
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from collc.ir import ChunkSet, OpKind, Schedule

__all__ = ["PARTS", "EventGraph", "StepInput", "Trace", "build", "run", "trace"]

PARTS = ("overhead", "latency", "transfer", "codec")
"""The names of the components of a time's breakdown, in order."""

_Parts = tuple[float, float, float, float]
_ZERO: _Parts = (0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class StepInput:
    """One step's messages, routes and sets, as `collc.simulate` flattens them.

    ``msg_*``: one entry per message (a send of chunks held in several ways is several messages):
    its op (index in ``step.ops``) and kind (what its byte count depends on).  ``iv_*``: its
    route as runs of links ``[lo, hi)`` carrying the share ``w`` (``iv_msg`` names the message).
    ``latency``: seconds per message.  ``op_set``: the chunk-set index of every op."""

    msg_op: np.ndarray
    msg_kind: np.ndarray
    iv_msg: np.ndarray
    iv_lo: np.ndarray
    iv_hi: np.ndarray
    iv_w: np.ndarray
    latency: np.ndarray
    op_set: np.ndarray


@dataclass
class EventGraph:
    """The size-independent part of a dataflow run (see the module)."""

    ngroups: int
    group_rank_prev: list[int]  # the rank's previous group, or -1
    group_deps: list[list[int]]  # node ids (groups: 0..G-1, landings: G..) it waits for
    group_enc: list[list[int]]  # chunk sets encoded on the engine
    group_dec: list[list[int]]  # chunk sets decoded on the engine (decompress ops)
    group_msgs: list[list[int]]
    msg_kind: list[int]
    msg_links: list[list[tuple[int, float]]]  # (link, share)
    msg_latency: list[float]
    msg_landing: list[int]  # the landing node the message feeds (a node id)
    landing_deps: list[list[int]]  # node ids it waits for besides its messages
    landing_msgs: list[int]  # how many messages it waits for
    landing_dec: list[int]  # chunk set decoded at landing, or -1
    inv_bw: list[float]  # seconds per byte of every link
    succ: list[list[int]]  # the nodes waiting for each node (not counting messages)
    preds: list[list[int]]  # the nodes each node waits for (not counting messages)
    coded_groups: list[int]  # the groups with codec work
    waiting: list[int]  # how many predecessors each node has (messages and the engine included)
    group_rank: list[int] = field(default_factory=list)  # the rank of every group
    group_step: list[int] = field(default_factory=list)  # its step's position in schedule.steps
    msg_op: list[int] = field(default_factory=list)  # the op (index in its step's ops) of every message

    @property
    def nodes(self) -> int:
        return self.ngroups + len(self.landing_deps)


_T = TypeVar("_T")


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cycle collector: building and running allocate many small lists and tuples, none cyclic."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _paused(fn: Callable[..., _T]) -> Callable[..., _T]:
    def wrapper(*args: object, **kwargs: object) -> _T:
        with _no_gc():
            return fn(*args, **kwargs)

    wrapper.__doc__, wrapper.__name__, wrapper.__wrapped__ = fn.__doc__, fn.__name__, fn  # type: ignore[attr-defined]
    return wrapper


@_paused
def build(schedule: Schedule, steps: Sequence[StepInput], link_bandwidths: np.ndarray) -> EventGraph:
    """The event graph of ``schedule`` (``steps``: one `StepInput` per step of the schedule)."""
    send, recv, compress, decompress = OpKind.SEND, OpKind.RECV, OpKind.COMPRESS, OpKind.DECOMPRESS
    group_prev: list[int] = []
    group_deps: list[list[int]] = []
    group_enc: list[list[int]] = []
    group_dec: list[list[int]] = []
    group_msgs: list[list[int]] = []
    group_rank: list[int] = []
    group_step: list[int] = []
    msg_op: list[int] = []
    msg_kind: list[int] = []
    msg_links: list[list[tuple[int, float]]] = []
    msg_latency: list[float] = []
    msg_target: list[tuple[int, int]] = []  # (message, landing index)
    landings: list[tuple[list[int], list[int], int]] = []  # (deps, incoming message ids, decode set)
    last_group: dict[int, int] = {}
    writer: dict[tuple[int, int], tuple[str, int]] = {}  # (rank, chunk) -> ("g"|"l", index)
    readers: dict[tuple[int, int], list[int]] = {}  # groups that read the chunk since its last write
    pending: dict[tuple[int, int, int, int], list[int]] = {}  # (step, src, dst, chunk bits) -> message ids
    id_cache: dict[int, list[int]] = {}

    def chunk_ids(chunks: ChunkSet) -> list[int]:
        out = id_cache.get(id(chunks))  # the schedule keeps every set alive, and ops share them
        if out is None:
            out = id_cache[id(chunks)] = chunks.ids().tolist()
        return out

    for s, (step, inp) in enumerate(zip(schedule.steps, steps, strict=True)):
        op_msgs: dict[int, list[int]] = {}
        base = len(msg_kind)
        for i, (op_i, kind) in enumerate(zip(inp.msg_op.tolist(), inp.msg_kind.tolist(), strict=True)):
            op_msgs.setdefault(op_i, []).append(base + i)
            msg_op.append(op_i)
            msg_kind.append(kind)
            msg_links.append([])
            msg_latency.append(float(inp.latency[i]))
        for m, lo, hi, w in zip(inp.iv_msg.tolist(), inp.iv_lo.tolist(), inp.iv_hi.tolist(), inp.iv_w.tolist(),
                                strict=True):  # fmt: skip
            if hi - lo == 1:
                msg_links[base + m].append((lo, w))
            else:
                msg_links[base + m].extend([(link, w) for link in range(lo, hi)])
        # groups: the sends and local ops of each rank (of each rank and lane, in a step with lanes)
        by_rank: dict[tuple[int, int | None], list[int]] = {}
        for i, op in enumerate(step.ops):
            if op.kind is not recv:
                by_rank.setdefault((op.rank, step.lane(i)), []).append(i)
        for (rank, _), idx in by_rank.items():
            g = len(group_prev)
            group_rank.append(rank)
            group_step.append(s)
            group_prev.append(last_group.get(rank, -1))
            last_group[rank] = g
            deps: set[tuple[str, int]] = set()
            enc: list[int] = []
            dec: list[int] = []
            msgs: list[int] = []
            ops = [step.ops[i] for i in idx]
            for i, op in zip(idx, ops, strict=True):  # local ops first: they run before the sends read
                if op.kind is compress or op.kind is decompress:
                    (enc if op.kind is compress else dec).append(int(inp.op_set[i]))
                    for c in chunk_ids(op.chunks):
                        w = writer.get((rank, c))
                        if w is not None:
                            deps.add(w)
                        writer[(rank, c)] = ("g", g)
                        readers[(rank, c)] = []
            for i, op in zip(idx, ops, strict=True):
                if op.kind is not send:
                    continue
                if op.codec is not None:
                    enc.append(int(inp.op_set[i]))
                ids = op_msgs.get(i, [])
                msgs.extend(ids)
                pending.setdefault((s, op.rank, op.peer, op.chunks.bits), []).extend(ids)
                for c in chunk_ids(op.chunks):
                    w = writer.get((rank, c))
                    if w is not None and w != ("g", g):
                        deps.add(w)
                    readers.setdefault((rank, c), []).append(g)
            group_deps.append([_node(d) for d in deps])  # landing ids fixed up below
            group_enc.append(enc)
            group_dec.append(dec)
            group_msgs.append(msgs)
        # landings: the receives, in op order
        for i, op in enumerate(step.ops):
            if op.kind is not recv:
                continue
            ids = pending.pop((s, op.peer, op.rank, op.chunks.bits), None)
            if ids is None:
                raise ValueError(
                    f"step {step.index}: rank {op.rank} receives {op.chunks} from rank {op.peer}, "
                    "which sends no such message in that step"
                )
            lnd = len(landings)
            ldeps: set[tuple[str, int]] = set()
            for c in chunk_ids(op.chunks):
                key = (op.rank, c)
                w = writer.get(key)
                if w is not None:
                    ldeps.add(w)
                ldeps.update(("g", g) for g in readers.get(key, ()))
                writer[key] = ("l", lnd)
                readers[key] = []
            landings.append(([_node(d) for d in ldeps], ids, int(inp.op_set[i]) if op.codec else -1))
            msg_target.extend((m, lnd) for m in ids)
    if pending:
        (s, src, dst, _), _ = next(iter(pending.items()))
        raise ValueError(f"step {schedule.steps[s].index}: rank {src} sends to rank {dst}, which receives nothing")
    ngroups = len(group_prev)
    fix = [[d if d >= 0 else ngroups + (-d - 1) for d in deps] for deps in group_deps]
    msg_landing = [0] * len(msg_kind)
    for m, lnd in msg_target:
        msg_landing[m] = ngroups + lnd
    inv = (1.0 / np.asarray(link_bandwidths, dtype=np.float64)).tolist()
    landing_deps = [[d if d >= 0 else ngroups + (-d - 1) for d in deps] for deps, _, _ in landings]
    n = ngroups + len(landings)
    succ: list[list[int]] = [[] for _ in range(n)]
    for g, (deps, prev) in enumerate(zip(fix, group_prev, strict=True)):
        for d in deps:
            succ[d].append(g)
        if prev >= 0:
            succ[prev].append(g)
    for j, deps in enumerate(landing_deps):
        for d in deps:
            succ[d].append(ngroups + j)
    preds = [deps + ([prev] if prev >= 0 else []) for deps, prev in zip(fix, group_prev, strict=True)]
    preds += landing_deps
    waiting = [len(d) + (p >= 0) for d, p in zip(fix, group_prev, strict=True)]
    waiting += [len(d) + len(ids) for d, (_, ids, _) in zip(landing_deps, landings, strict=True)]
    return EventGraph(
        ngroups=ngroups,
        group_rank_prev=group_prev,
        group_deps=fix,
        group_enc=group_enc,
        group_dec=group_dec,
        group_msgs=group_msgs,
        msg_kind=msg_kind,
        msg_links=msg_links,
        msg_latency=msg_latency,
        msg_landing=msg_landing,
        landing_deps=landing_deps,
        landing_msgs=[len(ids) for _, ids, _ in landings],
        landing_dec=[dec for _, _, dec in landings],
        inv_bw=inv,
        succ=succ,
        preds=preds,
        coded_groups=[g for g in range(ngroups) if group_enc[g] or group_dec[g]],
        waiting=waiting,
        group_rank=group_rank,
        group_step=group_step,
        msg_op=msg_op,
    )


def _node(ref: tuple[str, int]) -> int:
    """A group keeps its index; a landing is encoded as ``-(index + 1)`` until the group count is known."""
    kind, index = ref
    return index if kind == "g" else -(index + 1)


@dataclass(frozen=True)
class Trace:
    """When everything happened in one dataflow run (seconds from the start; `trace`).

    Groups (a rank's sends and local ops of one step, see the module): ``group_rank``,
    ``group_step`` (the step's position in ``schedule.steps``), ``group_start`` (the engine
    takes it up) and ``group_end`` (overhead and codec work done: its messages enter the
    network).  Messages: ``msg_group``, ``msg_op`` (the SEND op, an index in its step's ops;
    a send of chunks held in several ways is several messages), ``msg_arrival`` (every link
    has served it and its latency has passed).  ``landing_time``: every receive, in the order
    of the steps and of their ops, when its chunks are written."""

    time: float
    group_rank: np.ndarray
    group_step: np.ndarray
    group_start: np.ndarray
    group_end: np.ndarray
    msg_group: np.ndarray
    msg_op: np.ndarray
    msg_arrival: np.ndarray
    landing_time: np.ndarray


@_paused
def run(
    graph: EventGraph,
    kind_bytes: np.ndarray,
    set_bytes: np.ndarray,
    step_overhead: float,
    encode_bandwidth: float,
    decode_bandwidth: float,
) -> tuple[float, _Parts]:
    """The time of the schedule and its critical path's breakdown (`PARTS`) for one vector size:
    ``kind_bytes[k]`` the bytes of a message of kind k, ``set_bytes[u]`` the raw bytes of set u."""
    total, parts, _, _, _ = _execute(graph, kind_bytes, set_bytes, step_overhead, encode_bandwidth, decode_bandwidth)
    return total, parts


@_paused
def trace(
    graph: EventGraph,
    kind_bytes: np.ndarray,
    set_bytes: np.ndarray,
    step_overhead: float,
    encode_bandwidth: float,
    decode_bandwidth: float,
) -> Trace:
    """`run`, keeping the time of every group, message and landing (a `Trace`)."""
    arrival = [0.0] * len(graph.msg_kind)
    total, _, time, codec, _ = _execute(
        graph, kind_bytes, set_bytes, step_overhead, encode_bandwidth, decode_bandwidth, arrival
    )
    ng = graph.ngroups
    end = np.asarray(time[:ng], dtype=np.float64)
    msg_group = np.zeros(len(graph.msg_kind), dtype=np.int64)
    for g, msgs in enumerate(graph.group_msgs):
        msg_group[msgs] = g
    return Trace(
        time=total,
        group_rank=np.asarray(graph.group_rank, dtype=np.int64),
        group_step=np.asarray(graph.group_step, dtype=np.int64),
        group_start=end - step_overhead - np.asarray(codec[:ng], dtype=np.float64),
        group_end=end,
        msg_group=msg_group,
        msg_op=np.asarray(graph.msg_op, dtype=np.int64),
        msg_arrival=np.asarray(arrival, dtype=np.float64),
        landing_time=np.asarray(time[ng:], dtype=np.float64),
    )


def _execute(
    graph: EventGraph,
    kind_bytes: np.ndarray,
    set_bytes: np.ndarray,
    step_overhead: float,
    encode_bandwidth: float,
    decode_bandwidth: float,
    arrival: list[float] | None = None,
) -> tuple[float, _Parts, list[float], list[float], list[_Parts]]:
    """The run: the total and its breakdown, then the time and the codec seconds of every node and
    their breakdowns; ``arrival``, when given, gets every message's arrival time."""
    ng = graph.ngroups
    n = graph.nodes
    if n == 0:
        return 0.0, _ZERO, [], [], []
    time = [0.0] * n
    parts: list[_Parts] = [_ZERO] * n
    waiting = graph.waiting.copy()  # predecessors still to resolve
    succ, preds = graph.succ, graph.preds
    arrived = [0.0] * n  # landings: the latest arrival of their messages
    arrived_parts: list[_Parts] = [_ZERO] * n
    free = [0.0] * len(graph.inv_bw)
    free_parts: list[_Parts] = [_ZERO] * len(graph.inv_bw)
    inv_bw = graph.inv_bw
    kb = kind_bytes.tolist()
    sb = set_bytes.tolist()
    # seconds of codec work of every node: groups on the engine, landings decoding
    codec = [0.0] * n
    for g in graph.coded_groups:
        codec[g] = (
            sum(sb[u] for u in graph.group_enc[g]) / encode_bandwidth
            + sum(sb[u] for u in graph.group_dec[g]) / decode_bandwidth
        )
    for j, u in enumerate(graph.landing_dec):
        if u >= 0:
            codec[ng + j] = sb[u] / decode_bandwidth
    msg_kind, msg_links, msg_latency = graph.msg_kind, graph.msg_links, graph.msg_latency
    msg_landing = graph.msg_landing
    group_msgs = graph.group_msgs
    heap: list[tuple[float, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    stack = [v for v in range(n) if waiting[v] == 0]
    done = 0
    while True:
        while stack:  # evaluate nodes whose predecessors are all resolved
            v = stack.pop()
            t, p = arrived[v], arrived_parts[v]
            for d in preds[v]:
                if time[d] > t:
                    t, p = time[d], parts[d]
            c = codec[v]
            if v < ng:
                t += step_overhead + c
                p = (p[0] + step_overhead, p[1], p[2], p[3] + c)
                time[v], parts[v] = t, p
                push(heap, (t, v))
                continue
            if c:
                t += c
                p = (p[0], p[1], p[2], p[3] + c)
            time[v], parts[v] = t, p
            done += 1
            for u in succ[v]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    stack.append(u)
        if not heap:
            break
        entry, g = pop(heap)  # a group enters the network: its messages take the links in this order
        pg = parts[g]
        for m in group_msgs[g]:
            size = kb[msg_kind[m]]
            t, p = entry, pg
            for link, w in msg_links[m]:
                cost = w * size * inv_bw[link]
                f = free[link]
                if f > entry:
                    c, cp = f + cost, free_parts[link]
                else:
                    c, cp = entry + cost, pg
                cp = (cp[0], cp[1], cp[2] + cost, cp[3])
                free[link], free_parts[link] = c, cp
                if c > t:
                    t, p = c, cp
            lat = msg_latency[m]
            t += lat
            if arrival is not None:
                arrival[m] = t
            v = msg_landing[m]
            if t >= arrived[v]:
                arrived[v], arrived_parts[v] = t, (p[0], p[1] + lat, p[2], p[3])
            waiting[v] -= 1
            if waiting[v] == 0:
                stack.append(v)
        done += 1
        for u in succ[g]:
            waiting[u] -= 1
            if waiting[u] == 0:
                stack.append(u)
    if done != n:
        raise ValueError("dataflow: the schedule's dependencies form a cycle")  # steps are ordered: cannot happen
    last = max(range(n), key=time.__getitem__)
    return time[last], parts[last], time, codec, parts
