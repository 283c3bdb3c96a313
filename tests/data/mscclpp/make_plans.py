"""Writes the MSCCL++ execution plans of this folder: the kinds of plans the MSCCL++ DSL (`mscclpp.language`)
produces, written here from the format.

    python tests/data/mscclpp/make_plans.py        # rewrites every *.json next to this file

Each plan is built as the DSL lays plans out (channels created in pairs, a threadblock's channels and remote
buffers named by position, a nop (__syncthreads) around signals and waits and between ops that touch the same
chunks, fields in the DSL's order; one op per line) and is correct; tests/test_mscclpp_plans.py checks each and
plants a mistake in each.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
Span = tuple[str, int, int]  # buffer, index, size


@dataclass(frozen=True)
class Ch:
    kind: str
    src: int
    dst: int
    gid: int  # index among the source GPU's channels of the kind


@dataclass
class Tb:
    ops: list[dict] = field(default_factory=list)
    channels: dict[str, list[int]] = field(default_factory=dict)
    refs: dict[str, list[int]] = field(default_factory=dict)

    def ch(self, ch: Ch) -> int:
        ids = self.channels.setdefault(ch.kind, [])
        if ch.gid not in ids:
            ids.append(ch.gid)
        return ids.index(ch.gid)

    def ref(self, kind: str, rid: int) -> int:
        ids = self.refs.setdefault(kind, [])
        if rid not in ids:
            ids.append(rid)
        return ids.index(rid)


@dataclass
class Gpu:
    rank: int
    i: int
    o: int
    s: int
    tbs: list[Tb] = field(default_factory=list)
    channels: dict[str, list[int]] = field(default_factory=dict)
    remote: list[list] = field(default_factory=list)  # [rank, buffer, access types]
    sems: list[int] = field(default_factory=list)

    def tb(self, k: int) -> Tb:
        while len(self.tbs) <= k:
            self.tbs.append(Tb())
        return self.tbs[k]

    def remote_id(self, rank: int, buf: str, kind: str) -> int:
        for k, rb in enumerate(self.remote):
            if rb[:2] == [rank, buf]:
                if kind not in rb[2]:
                    rb[2].append(kind)
                return k
        self.remote.append([rank, buf, [kind]])
        return len(self.remote) - 1


class Prog:
    def __init__(
        self, name: str, coll: str, p: int, i: int, o: int, s: int = 0, protocol: str = "Simple", inplace: bool = True
    ) -> None:
        self.name, self.coll, self.protocol, self.inplace = name, coll, protocol, inplace
        self.gpus = [Gpu(r, i, o, s) for r in range(p)]
        self.into: list[dict] | None = None  # ops of a pipeline being built

    def pair(self, kind: str, a: int, b: int) -> tuple[Ch, Ch]:
        """A channel from a to b and its pair from b to a."""
        out = []
        for x, y in ((a, b), (b, a)):
            peers = self.gpus[x].channels.setdefault(kind, [])
            peers.append(y)
            out.append(Ch(kind, x, y, len(peers) - 1))
        return out[0], out[1]

    def add(self, rank: int, tb: int, op: dict) -> None:
        (self.into if self.into is not None else self.gpus[rank].tb(tb).ops).append(op)

    @staticmethod
    def local(span: Span) -> dict:
        return {"type": span[0], "index": span[1], "size": span[2]}

    def remote(self, rank: int, tb: int, kind: str, peer: int, span: Span) -> dict:
        rid = self.gpus[rank].remote_id(peer, span[0], kind)
        return {"buffer_id": self.gpus[rank].tb(tb).ref(kind, rid), "index": span[1], "size": span[2]}

    def nop(self, rank: int, tb: int) -> None:
        self.add(rank, tb, {"name": "nop"})

    def sync(self, name: str, tb: int, chans: list[Ch]) -> None:
        """signal, wait, rlxsignal, rlxwait or flush over channels of one GPU."""
        t = self.gpus[chans[0].src].tb(tb)
        self.add(
            chans[0].src, tb, {"name": name, "channel_ids": [t.ch(c) for c in chans], "channel_type": chans[0].kind}
        )

    def put(
        self, tb: int, moves: list[tuple[Ch, Span, Span]], name: str = "put", group: tuple[int, int] | None = None
    ) -> None:
        """put (or pws, pwsf, ppkt) of each source to its destination on the channel's peer; `group`: this
        threadblock's part of a threadblock group (tb_id, tbg_size)."""
        rank, kind = moves[0][0].src, moves[0][0].kind
        t = self.gpus[rank].tb(tb)
        op = {
            "name": name,
            "src_buff": [self.local(s) for _, s, _ in moves],
            "dst_buff": [self.remote(rank, tb, kind, c.dst, d) for c, _, d in moves],
        }
        if kind == "port":
            op["channel_ids"] = [t.ch(c) for c, _, _ in moves]
        else:
            for c, _, _ in moves:
                t.ch(c)
        op["channel_type"] = kind
        if group is not None:
            op["tbg_info"] = {"tb_id": group[0], "tbg_size": group[1]}
        self.add(rank, tb, op)

    def get(self, tb: int, moves: list[tuple[Ch, Span, Span]]) -> None:
        rank = moves[0][0].src
        t = self.gpus[rank].tb(tb)
        self.add(
            rank,
            tb,
            {
                "name": "get",
                "src_buff": [self.remote(rank, tb, "memory", c.dst, s) for c, s, _ in moves],
                "dst_buff": [self.local(d) for _, _, d in moves],
                "channel_ids": [t.ch(c) for c, _, _ in moves],
                "channel_type": "memory",
            },
        )

    def copy(self, rank: int, tb: int, src: Span, dst: Span, name: str = "copy") -> None:
        self.add(rank, tb, {"name": name, "src_buff": [self.local(src)], "dst_buff": [self.local(dst)]})

    def reduce(
        self,
        rank: int,
        tb: int,
        name: str,
        srcs: list[Span],
        dst: Span,
        remote_src: list[tuple[Ch, Span]] = (),
        remote_dst: list[tuple[Ch, Span]] = (),
    ) -> None:
        """re, res, rre, rres and the packet reductions: the local sources (and the peers'), into dst (and the
        peers')."""
        kind = (list(remote_src) + list(remote_dst))[0][0].kind if remote_src or remote_dst else ""
        t = self.gpus[rank].tb(tb)
        for c, _ in list(remote_src) + list(remote_dst):
            t.ch(c)
        op = {
            "name": name,
            "src_buff": [self.local(s) for s in srcs] + [self.remote(rank, tb, kind, c.dst, s) for c, s in remote_src],
            "dst_buff": [self.local(dst)] + [self.remote(rank, tb, kind, c.dst, d) for c, d in remote_dst],
        }
        if kind:
            op["channel_type"] = kind
        op["reduce_op"] = "sum"
        self.add(rank, tb, op)

    def barrier(self, rank: int, tb: int, bid: int, n: int) -> None:
        self.add(rank, tb, {"name": "barrier", "barrier_id": bid, "num_threadblocks": n})

    def sem(self, rank: int, tb: int, name: str, ids: list[int]) -> None:
        self.add(rank, tb, {"name": name, "semaphore_ids": ids})

    def pipeline(self, rank: int, tb: int, unit: int, nchunks: int, body: Callable[[], None]) -> None:
        self.into = []
        body()
        ops, self.into = self.into, None
        self.add(rank, tb, {"name": "pipeline", "iter_context": {"unit_size": unit, "num_chunks": nchunks}, "ops": ops})

    def json(self) -> str:
        """The plan, in the DSL's field order, one op per line."""

        def one(x: object) -> str:
            return json.dumps(x, separators=(", ", ": "))

        top = {
            "name": self.name,
            "collective": self.coll,
            "protocol": self.protocol,
            "inplace": self.inplace,
            "reuse_resources": False,
        }
        out = ["{"] + [f"  {one(k)}: {one(v)}," for k, v in top.items()] + ['  "gpus": [']
        for r, g in enumerate(self.gpus):
            out.append(f'    {{"id": {r}, "input_chunks": {g.i}, "output_chunks": {g.o}, "scratch_chunks": {g.s},')
            out.append('     "threadblocks": [')
            for k, t in enumerate(g.tbs):
                out.append(f'      {{"id": {k}, "ops": [')
                out += [f"        {one(op)}," for op in t.ops]
                out[-1] = out[-1].rstrip(",")
                chans = [{"channel_type": c, "channel_ids": v} for c, v in t.channels.items()]
                refs = [{"access_channel_type": c, "remote_buffer_ids": v} for c, v in t.refs.items()]
                out.append(f'       ], "channels": {one(chans)}, "remote_buffer_refs": {one(refs)}}},')
            out[-1] = out[-1].rstrip(",")
            chans = [{"channel_type": c, "connected_to": v} for c, v in g.channels.items()]
            rbs = [{"rank": r2, "type": b, "access_channel_types": a} for r2, b, a in g.remote]
            sems = [{"init_value": v} for v in g.sems]
            out.append(f'     ], "channels": {one(chans)},')
            out.append(f'     "remote_buffers": {one(rbs)}, "semaphores": {one(sems)}}},')
        out[-1] = out[-1].rstrip(",")
        tail = {
            "num_threads_per_block": 1024,
            "use_double_scratch_buffer": self.protocol == "LL",
            "buffer_alignment": 16,
            "min_message_size": 0,
            "max_message_size": 2**64 - 1,
        }
        out += ["  ],"] + [f"  {one(k)}: {one(v)}," for k, v in tail.items()]
        out[-1] = out[-1].rstrip(",")
        return "\n".join([*out, "}"]) + "\n"


def ring_allreduce(p: int) -> str:
    """Reduce-scatter around the ring on threadblock 0 (put into the next GPU's scratch, then reduce-and-send,
    `res`), a semaphore to threadblock 1, which runs the allgather (put into the next GPU's buffer)."""
    prog = Prog(f"ring allreduce {p} GPUs", "allreduce", p, p, p, p - 1)
    rs, ag = {}, {}
    for r in range(p):  # one channel pair per neighbour and phase, made in the same order on every GPU
        for phase in (rs, ag):
            phase[r] = prog.pair("memory", r, (r + 1) % p)
    for r in range(p):
        prog.gpus[r].sems.append(0)
        nxt, prv = rs[r][0], rs[(r - 1) % p][1]
        prog.put(0, [(nxt, ("i", r, 1), ("s", 0, 1))])
        prog.nop(r, 0)
        prog.sync("signal", 0, [nxt])
        for s in range(1, p):
            c = (r - s) % p
            prog.sync("wait", 0, [prv])
            prog.nop(r, 0)
            if s < p - 1:
                prog.reduce(r, 0, "res", [("i", c, 1), ("s", s - 1, 1)], ("i", c, 1), remote_dst=[(nxt, ("s", s, 1))])
                prog.nop(r, 0)
                prog.sync("signal", 0, [nxt])
            else:
                prog.reduce(r, 0, "re", [("i", c, 1), ("s", s - 1, 1)], ("i", c, 1))
                prog.nop(r, 0)
                prog.sem(r, 0, "sem_release", [0])
        nxt, prv = ag[r][0], ag[(r - 1) % p][1]
        prog.sem(r, 1, "sem_acquire", [0])
        prog.nop(r, 1)
        for t in range(p - 1):
            c = (r + 1 - t) % p
            if t:
                prog.sync("wait", 1, [prv])
                prog.nop(r, 1)
            prog.put(1, [(nxt, ("i", c, 1), ("i", c, 1))])
            prog.nop(r, 1)
            prog.sync("signal", 1, [nxt])
        prog.sync("wait", 1, [prv])
        prog.nop(r, 1)
    return prog.json()


def ring_allreduce_packets(p: int) -> str:
    """LL: around the ring in packets, no signal or wait.  Reduce-scatter: reduce the packets from the previous GPU
    into the output (`repkt`) and send it on (`ppkt`); allgather: forward the packets (`rppkt`) and unpack them."""
    prog = Prog(f"ring allreduce in packets {p} GPUs", "allreduce", p, p, p, 2 * p - 2, "LL", inplace=False)
    chans = {r: prog.pair("memory", r, (r + 1) % p) for r in range(p)}
    for r in range(p):
        nxt = chans[r][0]
        prog.put(0, [(nxt, ("i", r, 1), ("s", 0, 1))], "ppkt")
        for s in range(1, p):
            c = (r - s) % p
            prog.reduce(r, 0, "repkt", [("i", c, 1), ("s", s - 1, 1)], ("o", c, 1))
            if s < p - 1:
                prog.nop(r, 0)
                prog.put(0, [(nxt, ("o", c, 1), ("s", s, 1))], "ppkt")
        prog.nop(r, 0)
        prog.put(0, [(nxt, ("o", (r + 1) % p, 1), ("s", p - 1, 1))], "ppkt")
        for t in range(1, p):
            slot, c = p - 2 + t, (r + 1 - t) % p
            if t < p - 1:
                prog.add(
                    r,
                    0,
                    {
                        "name": "rppkt",
                        "src_buff": [prog.local(("s", slot, 1))],
                        "dst_buff": [prog.remote(r, 0, "memory", nxt.dst, ("s", slot + 1, 1))],
                        "channel_type": "memory",
                    },
                )
            prog.copy(r, 0, ("s", slot, 1), ("o", c, 1), "upkt")
    return prog.json()


def allpairs_allreduce_packets(p: int) -> str:
    """LL one-shot, in place: threadblock j sends chunk q to peer q (the j-th); threadblock p - 1 reduces its own
    chunk with the peers' packets and sends the sum to every peer (`respkt`); threadblock j unpacks peer q's sum."""
    prog = Prog(f"all-pairs allreduce in packets {p} GPUs", "allreduce", p, p, p, 2 * (p - 1), "LL")
    ch = {}
    for r in range(p):
        for q in range(r + 1, p):
            ch[(r, q)], ch[(q, r)] = prog.pair("memory", r, q)
    for r in range(p):
        peers = [q for q in range(p) if q != r]

        def slot(q: int, of: int) -> int:  # the slot of q among of's peers
            return q if q < of else q - 1

        for j, q in enumerate(peers):
            prog.put(j, [(ch[(r, q)], ("i", q, 1), ("s", slot(r, q), 1))], "ppkt")
        prog.reduce(
            r,
            p - 1,
            "respkt",
            [("i", r, 1)] + [("s", slot(q, r), 1) for q in peers],
            ("i", r, 1),
            remote_dst=[(ch[(r, q)], ("s", p - 1 + slot(r, q), 1)) for q in peers],
        )
        for j, q in enumerate(peers):
            prog.copy(r, j, ("s", p - 1 + slot(q, r), 1), ("i", q, 1), "upkt")
    return prog.json()


def allpairs_allreduce_read(p: int) -> str:
    """One threadblock per GPU, in place: a relaxed signal and wait with every peer, then `rres` reads the peers'
    chunk r, reduces it with its own and writes the sum back to every peer; a signal and wait end it."""
    prog = Prog(f"all-pairs allreduce by reads {p} GPUs", "allreduce", p, p, p)
    ch = {}
    for r in range(p):
        for q in range(r + 1, p):
            ch[(r, q)], ch[(q, r)] = prog.pair("memory", r, q)
    for r in range(p):
        mine = [ch[(r, q)] for q in range(p) if q != r]
        prog.sync("rlxsignal", 0, mine)
        prog.sync("rlxwait", 0, mine)
        prog.nop(r, 0)
        prog.reduce(
            r,
            0,
            "rres",
            [("i", r, 1)],
            ("i", r, 1),
            remote_src=[(c, ("i", r, 1)) for c in mine],
            remote_dst=[(c, ("i", r, 1)) for c in mine],
        )
        prog.nop(r, 0)
        prog.sync("signal", 0, mine)
        prog.sync("wait", 0, mine)
        prog.nop(r, 0)
    return prog.json()


def allgather_groups(p: int, group: int = 2) -> str:
    """Out of place: threadblock 0 copies the input to the output; for each peer a group of threadblocks puts a
    slice each (`tbg_info`) between two barriers, and the group's first threadblock signals and waits."""
    prog = Prog(f"all-pairs allgather by threadblock groups {p} GPUs", "allgather", p, 1, p, inplace=False)
    ch = {}
    for r in range(p):
        for q in range(r + 1, p):
            ch[(r, q)], ch[(q, r)] = prog.pair("memory", r, q)
    for r in range(p):
        prog.copy(r, 0, ("i", 0, 1), ("o", r, 1))
        for j, q in enumerate(q for q in range(p) if q != r):
            tbs = [1 + group * j + k for k in range(group)]
            for k, tb in enumerate(tbs):
                prog.barrier(r, tb, j, group)
                prog.put(tb, [(ch[(r, q)], ("i", 0, 1), ("o", r, 1))], group=(k, group))
                prog.barrier(r, tb, j, group)
            prog.sync("signal", tbs[0], [ch[(r, q)]])
            prog.sync("wait", tbs[0], [ch[(r, q)]])
            prog.nop(r, tbs[0])
    return prog.json()


def reducescatter_allpairs(p: int) -> str:
    """Out of place: threadblock j puts chunk q into peer q's scratch and signals; threadblock p - 1 waits for all
    peers (one thread each), then reduces its chunk with theirs into the output."""
    prog = Prog(f"all-pairs reduce-scatter {p} GPUs", "reducescatter", p, p, 1, p - 1, inplace=False)
    ch = {}
    for r in range(p):
        for q in range(r + 1, p):
            ch[(r, q)], ch[(q, r)] = prog.pair("memory", r, q)
    for r in range(p):
        peers = [q for q in range(p) if q != r]
        for j, q in enumerate(peers):
            prog.put(j, [(ch[(r, q)], ("i", q, 1), ("s", r if r < q else r - 1, 1))])
            prog.nop(r, j)
            prog.sync("signal", j, [ch[(r, q)]])
        prog.sync("wait", p - 1, [ch[(r, q)] for q in peers])
        prog.nop(r, p - 1)
        prog.reduce(r, p - 1, "re", [("i", r, 1)] + [("s", k, 1) for k in range(p - 1)], ("o", 0, 1))
    return prog.json()


def alltoall_two_nodes(nodes: int, local: int) -> str:
    """Out of place: a memory channel to each peer in the node, a port channel to each peer in other nodes; per
    peer a threadblock puts the peer's chunk into its output (over a port channel `pws`, put with signal), waits
    for the peer's, and signals once more (so that the peer knows the copy from its input is done)."""
    p = nodes * local
    prog = Prog(f"alltoall {nodes} nodes x {local} GPUs", "alltoall", p, p, p, inplace=False)
    ch = {}
    for r in range(p):
        for q in range(r + 1, p):
            ch[(r, q)], ch[(q, r)] = prog.pair("memory" if r // local == q // local else "port", r, q)
    for r in range(p):
        prog.copy(r, 0, ("i", r, 1), ("o", r, 1))
        for j, q in enumerate(q for q in range(p) if q != r):
            c, tb = ch[(r, q)], j + 1
            if c.kind == "port":
                prog.put(tb, [(c, ("i", q, 1), ("o", r, 1))], "pws")
            else:
                prog.put(tb, [(c, ("i", q, 1), ("o", r, 1))])
                prog.nop(r, tb)
                prog.sync("signal", tb, [c])
            prog.sync("wait", tb, [c])
            prog.sync("signal", tb, [c])
            prog.sync("wait", tb, [c])
            prog.nop(r, tb)
    return prog.json()


def hierarchical_allreduce(nodes: int, local: int) -> str:
    """In place, chunk j of a GPU is the local rank j's.  In the node: put chunk k into peer k's scratch and
    signal (threadblock per peer), reduce the peers' (last threadblock); across nodes: `pwsf` (put, signal, flush)
    the partial sum into the same local rank of every other node over port channels, wait, reduce; a barrier of
    all threadblocks; in the node: put the sum into every peer's chunk j over a second channel, signal, wait."""
    p = nodes * local
    prog = Prog(
        f"hierarchical allreduce {nodes} nodes x {local} GPUs", "allreduce", p, local, local, (local - 1) + (nodes - 1)
    )
    rs, ag, x = {}, {}, {}
    for r in range(p):
        for q in range(r + 1, p):
            if r // local == q // local:
                rs[(r, q)], rs[(q, r)] = prog.pair("memory", r, q)
    for r in range(p):
        for q in range(r + 1, p):
            if r // local == q // local:
                ag[(r, q)], ag[(q, r)] = prog.pair("memory", r, q)
            elif r % local == q % local:
                x[(r, q)], x[(q, r)] = prog.pair("port", r, q)
    for r in range(p):
        node, j = divmod(r, local)
        peers = [node * local + k for k in range(local) if k != j]
        far = [m * local + j for m in range(nodes) if m != node]
        red = local - 1
        for t, q in enumerate(peers):
            prog.put(t, [(rs[(r, q)], ("i", q % local, 1), ("s", j if j < q % local else j - 1, 1))])
            prog.nop(r, t)
            prog.sync("signal", t, [rs[(r, q)]])
        prog.sync("wait", red, [rs[(r, q)] for q in peers])
        prog.nop(r, red)
        prog.reduce(r, red, "re", [("i", j, 1)] + [("s", k, 1) for k in range(local - 1)], ("i", j, 1))
        prog.nop(r, red)
        if far:
            slots = {q: local - 1 + (node if node < q // local else node - 1) for q in far}
            prog.put(red, [(x[(r, q)], ("i", j, 1), ("s", slots[q], 1)) for q in far], "pwsf")
            prog.sync("wait", red, [x[(r, q)] for q in far])
            prog.nop(r, red)
            mine = [local - 1 + k for k in range(nodes - 1)]
            prog.reduce(r, red, "re", [("i", j, 1)] + [("s", k, 1) for k in mine], ("i", j, 1))
        for t in range(local):
            prog.barrier(r, t, 0, local)
        for t, q in enumerate(peers):
            prog.put(t, [(ag[(r, q)], ("i", j, 1), ("i", j, 1))])
            prog.nop(r, t)
            prog.sync("signal", t, [ag[(r, q)]])
            prog.sync("wait", t, [ag[(r, q)]])
            prog.nop(r, t)
    return prog.json()


def tree_allreduce(p: int, n: int = 4) -> str:
    """A binary tree in heap order, in place, one threadblock: wait for the children's sums in scratch, reduce,
    put the sum into the parent's scratch and signal; then wait for the parent's total and put it into the
    children."""
    prog = Prog(f"binary tree allreduce {p} GPUs", "allreduce", p, n, n, 2 * n)
    up, down = {}, {}
    for c in range(1, p):
        up[c], down[c] = prog.pair("memory", c, (c - 1) // 2)
    for r in range(p):
        kids = [c for c in (2 * r + 1, 2 * r + 2) if c < p]
        if kids:
            prog.sync("wait", 0, [down[c] for c in kids])
            prog.nop(r, 0)
            prog.reduce(r, 0, "re", [("i", 0, n)] + [("s", n * k, n) for k in range(len(kids))], ("i", 0, n))
            prog.nop(r, 0)
        if r:
            prog.put(0, [(up[r], ("i", 0, n), ("s", n * ((r - 1) % 2), n))])
            prog.nop(r, 0)
            prog.sync("signal", 0, [up[r]])
            prog.sync("wait", 0, [up[r]])
            prog.nop(r, 0)
        if kids:
            prog.put(0, [(down[c], ("i", 0, n), ("i", 0, n)) for c in kids])
            prog.nop(r, 0)
            prog.sync("signal", 0, [down[c] for c in kids])
    return prog.json()


def pipelined_allgather(p: int, halves: int = 2) -> str:
    """Out of place, a `pipeline` per threadblock: for each peer, `halves` threadblocks each move their part of
    the input over a channel of their own, one unit at a time, signalling and waiting each iteration."""
    n = 2 * halves
    prog = Prog(f"pipelined allgather {p} GPUs", "allgather", p, n, n * p, inplace=False)
    ch = {}
    for r in range(p):
        for q in range(r + 1, p):
            for h in range(halves):
                ch[(r, q, h)], ch[(q, r, h)] = prog.pair("memory", r, q)
    for r in range(p):
        prog.copy(r, 0, ("i", 0, n), ("o", n * r, n))
        for j, q in enumerate(q for q in range(p) if q != r):
            for h in range(halves):
                tb, c = 1 + halves * j + h, ch[(r, q, h)]

                def body(tb: int = tb, c: Ch = c, h: int = h, r: int = r) -> None:
                    prog.put(tb, [(c, ("i", 2 * h, 2), ("o", n * r + 2 * h, 2))])
                    prog.nop(r, tb)
                    prog.sync("signal", tb, [c])
                    prog.sync("wait", tb, [c])
                    prog.nop(r, tb)

                prog.pipeline(r, tb, 1 << 20, 2, body)
    return prog.json()


def allgather_get(p: int, per: int = 8) -> str:
    """In place: each GPU reads the peers' chunks (`get`, up to `per` peers an op and threadblock), then signals
    them that it is done and waits for their signal."""
    prog = Prog(f"all-pairs allgather by gets {p} GPUs", "allgather", p, 1, p)
    ch = {}
    for r in range(p):
        for q in range(r + 1, p):
            ch[(r, q)], ch[(q, r)] = prog.pair("memory", r, q)
    for r in range(p):
        peers = [q for q in range(p) if q != r]
        for tb in range(0, len(peers), per):
            some = peers[tb : tb + per]
            prog.get(tb // per, [(ch[(r, q)], ("o", q, 1), ("o", q, 1)) for q in some])
            prog.nop(r, tb // per)
            prog.sync("signal", tb // per, [ch[(r, q)] for q in some])
            prog.sync("wait", tb // per, [ch[(r, q)] for q in some])
            prog.nop(r, tb // per)
    return prog.json()


PLANS = {
    "ring_allreduce_8": lambda: ring_allreduce(8),
    "ring_allreduce_packets_8": lambda: ring_allreduce_packets(8),
    "allpairs_allreduce_packets_8": lambda: allpairs_allreduce_packets(8),
    "allpairs_allreduce_read_8": lambda: allpairs_allreduce_read(8),
    "allgather_groups_16": lambda: allgather_groups(16),
    "allgather_get_32": lambda: allgather_get(32),
    "reducescatter_allpairs_8": lambda: reducescatter_allpairs(8),
    "alltoall_2x8": lambda: alltoall_two_nodes(2, 8),
    "hierarchical_allreduce_2x8": lambda: hierarchical_allreduce(2, 8),
    "hierarchical_allreduce_8x8": lambda: hierarchical_allreduce(8, 8),
    "tree_allreduce_16": lambda: tree_allreduce(16),
    "pipelined_allgather_8": lambda: pipelined_allgather(8),
}


def main() -> None:
    for name, make in PLANS.items():
        (HERE / f"{name}.json").write_text(make())
        print(f"wrote {name}.json")


if __name__ == "__main__":
    main()
