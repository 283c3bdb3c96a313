"""Writes the MSCCL-IR plans of this folder: the kinds of programs msccl-tools and TACCL produce, written here.

    python tests/data/msccl/make_plans.py        # rewrites every *.xml next to this file

Each plan is built step by step as those tools lay programs out (one
threadblock per peer or per ring and channel, ``s``/``r``/``rrc``/fused
steps, dependencies between threadblocks of a GPU, attributes in the order
msccl-tools writes them) and is correct; tests/test_plans.py checks each and
plants a mistake in each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass
class Tb:
    send: int = -1
    recv: int = -1
    chan: int = 0
    steps: list[dict] = field(default_factory=list)

    def add(self, kind: str, src: tuple[str, int] = ("i", -1), dst: tuple[str, int] = ("i", -1), cnt: int = 1,
            dep: tuple[int, int] = (-1, -1)) -> int:  # fmt: skip
        """Appends a step; returns its index (for dependencies: (threadblock, index))."""
        self.steps.append({"type": kind, "src": src, "dst": dst, "cnt": cnt, "dep": dep})
        return len(self.steps) - 1


@dataclass
class Gpu:
    i: int
    o: int
    s: int = 0
    tbs: list[Tb] = field(default_factory=list)

    def tb(self, send: int = -1, recv: int = -1, chan: int = 0) -> int:
        """The index of the threadblock with these peers and channel, made when new."""
        for k, t in enumerate(self.tbs):
            if (t.send, t.recv, t.chan) == (send, recv, chan):
                return k
        self.tbs.append(Tb(send, recv, chan))
        return len(self.tbs) - 1


def write(name: str, coll: str, gpus: list[Gpu], nchannels: int = 1, inplace: int = 1, outofplace: int = 1,
          proto: str = "Simple") -> str:  # fmt: skip
    """The XML text, msccl-tools' attribute order, with hasdep set on the steps others wait for."""
    for gpu in gpus:  # a dependency on the step's own threadblock is program order already
        for k, t in enumerate(gpu.tbs):
            for st in t.steps:
                if st["dep"][0] == k:
                    st["dep"] = (-1, -1)
    waited = set()
    for g, gpu in enumerate(gpus):
        waited |= {(g, *st["dep"]) for t in gpu.tbs for st in t.steps if st["dep"][0] >= 0}
    nchunks = max(max(g.i, g.o) for g in gpus)
    out = [f'<algo name="{name}" nchunksperloop="{nchunks}" nchannels="{nchannels}" inplace="{inplace}" '
           f'outofplace="{outofplace}" ngpus="{len(gpus)}" proto="{proto}" coll="{coll}" minBytes="0" '
           f'maxBytes="0">']  # fmt: skip
    for g, gpu in enumerate(gpus):
        out.append(f'  <gpu id="{g}" i_chunks="{gpu.i}" o_chunks="{gpu.o}" s_chunks="{gpu.s}">')
        for k, t in enumerate(gpu.tbs):
            out.append(f'    <tb id="{k}" send="{t.send}" recv="{t.recv}" chan="{t.chan}">')
            for s, st in enumerate(t.steps):
                (sb, so), (db, do), (di, ds) = st["src"], st["dst"], st["dep"]
                out.append(f'      <step s="{s}" type="{st["type"]}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" '
                           f'dstoff="{do}" cnt="{st["cnt"]}" depid="{di}" deps="{ds}" '
                           f'hasdep="{int((g, k, s) in waited)}"/>')  # fmt: skip
            out.append("    </tb>")
        out.append("  </gpu>")
    out.append("</algo>")
    return "\n".join(out) + "\n"


def ring_steps(t: Tb, r: int, p: int, base: int, first_dep: tuple[int, int] = (-1, -1)) -> None:
    """Position r of a ring allreduce over p members on threadblock t, on chunks base .. base + p - 1 of i: s,
    p - 2 rrs, rrcs, p - 2 rcs, r."""

    def at(c: int) -> tuple[str, int]:
        return ("i", base + c % p)

    t.add("s", at(r - 1), at(r - 1), dep=first_dep)
    for s in range(1, p - 1):
        t.add("rrs", at(r - 1 - s), at(r - 1 - s))
    t.add("rrcs", at(r), at(r))
    for s in range(1, p - 1):
        t.add("rcs", at(r - s), at(r - s))
    t.add("r", at(r + 1), at(r + 1))


def ring_allreduce(p: int, channels: int = 1) -> str:
    """The hand-written MSCCL ring: per channel a ring over its own p chunks, s, rrs..., rrcs, rcs..., r."""
    n = p * channels
    gpus = [Gpu(n, n) for _ in range(p)]
    for ch in range(channels):
        for r in range(p):
            nxt, prv = (r + 1) % p, (r - 1) % p
            t = gpus[r].tbs[gpus[r].tb(nxt, prv, ch)]
            base = ch * p

            ring_steps(t, r, p, base)
    return write(f"ring allreduce {p} GPUs x {channels} channels", "allreduce", gpus, channels, outofplace=0)


def ring_allgather(p: int) -> str:
    """Copy the own block to the output, then forward around the ring from the output."""
    gpus = [Gpu(1, p) for _ in range(p)]
    for r in range(p):
        g = gpus[r]
        t = g.tbs[g.tb(-1, -1)]
        done = t.add("cpy", ("i", 0), ("o", r))
        ring = g.tbs[g.tb((r + 1) % p, (r - 1) % p)]
        ring.add("s", ("o", r), ("o", r), dep=(0, done))
        for s in range(1, p - 1):
            c = (r - s) % p
            ring.add("rcs", ("o", c), ("o", c))
        ring.add("r", ("o", (r + 1) % p), ("o", (r + 1) % p))
    return write(f"ring allgather {p} GPUs", "allgather", gpus)


def ring_reducescatter(p: int) -> str:
    gpus = [Gpu(p, 1) for _ in range(p)]
    for r in range(p):
        g = gpus[r]
        t = g.tbs[g.tb((r + 1) % p, (r - 1) % p)]
        t.add("s", ("i", (r - 1) % p), ("i", (r - 1) % p))
        for s in range(1, p - 1):
            c = (r - 1 - s) % p
            t.add("rrs", ("i", c), ("i", c))
        t.add("rrc", ("i", r), ("o", 0))
    return write(f"ring reduce-scatter {p} GPUs", "reducescatter", gpus, inplace=0)


def allpairs_allreduce(p: int) -> str:
    """Every GPU sends chunk c to GPU c, reduces what it gets into scratch, then sends the sum to every GPU."""
    gpus = [Gpu(p, p, p + 1) for _ in range(p)]
    for r in range(p):
        g = gpus[r]
        local = g.tb(-1, -1)
        first = g.tbs[local].add("cpy", ("i", r), ("s", p))
        peers = [q for q in range(p) if q != r]
        for q in peers:
            g.tbs[g.tb(q, q)].add("s", ("i", q), ("i", q))
            g.tbs[g.tb(q, q)].add("r", ("s", q), ("s", q))
        last = first
        for q in peers:  # the sums, in GPU order
            k = g.tb(q, q)
            last = g.tbs[local].add("re", ("s", q), ("s", p), dep=(k, 1))
        last = g.tbs[local].add("cpy", ("s", p), ("o", r))
        for q in peers:
            k = g.tb(q, q)
            g.tbs[k].add("s", ("o", r), ("o", r), dep=(local, last))
            g.tbs[k].add("r", ("o", q), ("o", q))
    return write(f"all-pairs allreduce {p} GPUs", "allreduce", gpus, inplace=0)


def allpairs_alltoall(p: int, k: int = 2) -> str:
    gpus = [Gpu(p * k, p * k) for _ in range(p)]
    for r in range(p):
        g = gpus[r]
        g.tbs[g.tb(-1, -1)].add("cpy", ("i", r * k), ("o", r * k), cnt=k)
        for q in range(p):
            if q != r:
                t = g.tbs[g.tb(q, q)]
                t.add("s", ("i", q * k), ("i", q * k), cnt=k)
                t.add("r", ("o", q * k), ("o", q * k), cnt=k)
    return write(f"all-pairs alltoall {p} GPUs", "alltoall", gpus, inplace=0)


def hierarchical_allreduce(nodes: int, local: int) -> str:
    """A ring reduce-scatter inside each node, a ring allreduce of each owned chunk across the nodes (one channel
    per local index), a ring allgather inside each node.  Chunk c = j * nodes + m: local part j, node part m."""
    p, n = nodes * local, nodes * local
    gpus = [Gpu(n, n) for _ in range(p)]

    def chunks_of(j: int) -> range:
        return range(j * nodes, (j + 1) * nodes)

    for r in range(p):
        node, j = divmod(r, local)
        g = gpus[r]
        nxt, prv = node * local + (j + 1) % local, node * local + (j - 1) % local
        intra = g.tb(nxt, prv, 0)
        t = g.tbs[intra]
        # reduce-scatter inside the node: local part (j - 1 - s) moves on, j ends here
        t.add("s", ("i", chunks_of((j - 1) % local)[0]), ("i", chunks_of((j - 1) % local)[0]), cnt=nodes)
        for s in range(1, local):
            part = (j - 1 - s) % local
            c = chunks_of(part)[0]
            t.add("rrc" if s == local - 1 else "rrs", ("i", c), ("i", c), cnt=nodes)
        done_rs = len(t.steps) - 1
        # across the nodes: a ring over the nodes for each chunk of local part j, on channel 1
        up, down = ((node + 1) % nodes) * local + j, ((node - 1) % nodes) * local + j
        last = (intra, done_rs)
        if nodes > 1:
            x = g.tbs[g.tb(up, down, 1)]
            xk = g.tb(up, down, 1)
            base = j * nodes

            ring_steps(x, node, nodes, base, first_dep=(intra, done_rs))
            last = (xk, len(x.steps) - 1)
        # allgather inside the node
        c = chunks_of(j)[0]
        t.add("s", ("i", c), ("i", c), cnt=nodes, dep=last)
        for s in range(1, local):
            part = (j - s) % local
            c = chunks_of(part)[0]
            t.add("rcs" if s < local - 1 else "r", ("i", c), ("i", c), cnt=nodes)
    channels = 2 if nodes > 1 else 1
    # messages of `nodes` chunks around the rings: LL's buffer (8 chunks) holds a send and the next one
    return write(f"hierarchical allreduce {nodes} nodes x {local} GPUs", "allreduce", gpus, channels, outofplace=0,
                 proto="LL")  # fmt: skip


def _tree(p: int, shift: int) -> dict[int, int]:
    """A binary tree over the GPUs (heap order over the GPUs rotated by `shift`): parent of each but the root."""
    order = [(i + shift) % p for i in range(p)]
    return {order[i]: order[(i - 1) // 2] for i in range(1, p)}


def tree_allreduce(p: int, trees: int = 1) -> str:
    """Reduce up a binary tree, broadcast down it; with two trees (NCCL's double binary tree), each tree takes
    half of the chunks on a channel of its own and the second tree is the first rotated by half the GPUs."""
    per = 4
    n = per * trees
    gpus = [Gpu(n, n) for _ in range(p)]
    for tr in range(trees):
        parent = _tree(p, tr * (p // 2))
        kids: dict[int, list[int]] = {r: [] for r in range(p)}
        for c, par in parent.items():
            kids[par].append(c)
        base = tr * per
        for r in range(p):
            g = gpus[r]
            last = (-1, -1)
            for c in kids[r]:  # the children's sums, one after the other
                k = g.tb(-1, c, tr)
                st = g.tbs[k].add("rrc", ("i", base), ("i", base), cnt=per, dep=last)
                last = (k, st)
            if r in parent:
                k = g.tb(parent[r], parent[r], tr)
                g.tbs[k].add("s", ("i", base), ("i", base), cnt=per, dep=last)
                st = g.tbs[k].add("r", ("i", base), ("i", base), cnt=per)
                last = (k, st)
            for c in kids[r]:
                k = g.tb(c, -1, tr)
                g.tbs[k].add("s", ("i", base), ("i", base), cnt=per, dep=last)
    name = "double binary tree" if trees == 2 else "binary tree"
    return write(f"{name} allreduce {p} GPUs", "allreduce", gpus, trees, outofplace=0)


def halving_doubling_allreduce(p: int) -> str:
    """Recursive halving (reduce-scatter) then doubling (allgather) over p = 2^m GPUs: at step s the partner is
    r xor 2^(m-1-s), and r keeps the half of the span holding its own block (blocks ordered by GPU).  Sends and
    receives of a partner are on two threadblocks, so that both ends receive while they send: the halves are
    longer than a connection buffers."""
    m = p.bit_length() - 1
    gpus = [Gpu(p, p) for _ in range(p)]
    for r in range(p):
        g = gpus[r]
        lo, hi = 0, p
        last: tuple[int, int] = (-1, -1)
        spans = []
        for s in range(m):
            q = r ^ (1 << (m - 1 - s))
            mid = (lo + hi) // 2
            keep, give = ((lo, mid), (mid, hi)) if r < mid else ((mid, hi), (lo, mid))
            out, inn = g.tb(q, -1), g.tb(-1, q)
            sent = g.tbs[out].add("s", ("i" if s == 0 else "o", give[0]), ("o", give[0]), cnt=give[1] - give[0],
                                  dep=last)  # fmt: skip
            got = g.tbs[inn].add("rrc", ("i" if s == 0 else "o", keep[0]), ("o", keep[0]), cnt=keep[1] - keep[0],
                                 dep=last)  # fmt: skip
            last = (inn, got)
            spans.append((q, keep, give, (out, sent)))
            lo, hi = keep
        for q, keep, give, halving_send in reversed(spans):
            out, inn = g.tb(q, -1), g.tb(-1, q)
            g.tbs[out].add("s", ("o", keep[0]), ("o", keep[0]), cnt=keep[1] - keep[0], dep=last)
            if last[0] == inn:  # the previous receive is this threadblock's own: program order
                got = g.tbs[inn].add("r", ("o", give[0]), ("o", give[0]), cnt=give[1] - give[0], dep=halving_send)
            else:
                g.tbs[inn].add("nop", dep=halving_send)  # the halving send of these chunks has read them
                got = g.tbs[inn].add("r", ("o", give[0]), ("o", give[0]), cnt=give[1] - give[0], dep=last)
            last = (inn, got)
    return write(f"halving-doubling allreduce {p} GPUs", "allreduce", gpus, inplace=0)


PLANS = {
    "ring_allreduce_8": lambda: ring_allreduce(8),
    "ring_allreduce_64": lambda: ring_allreduce(64),
    "ring_allreduce_16_4ch": lambda: ring_allreduce(16, 4),
    "ring_allgather_8": lambda: ring_allgather(8),
    "ring_reducescatter_12": lambda: ring_reducescatter(12),
    "allpairs_allreduce_8": lambda: allpairs_allreduce(8),
    "allpairs_alltoall_8": lambda: allpairs_alltoall(8),
    "hierarchical_allreduce_2x4": lambda: hierarchical_allreduce(2, 4),
    "hierarchical_allreduce_4x8": lambda: hierarchical_allreduce(4, 8),
    "tree_allreduce_16": lambda: tree_allreduce(16),
    "double_binary_tree_allreduce_32": lambda: tree_allreduce(32, 2),
    "halving_doubling_allreduce_64": lambda: halving_doubling_allreduce(64),
}


def main() -> None:
    for name, make in PLANS.items():
        (HERE / f"{name}.xml").write_text(make())
        print(f"wrote {name}.xml")


if __name__ == "__main__":
    main()
