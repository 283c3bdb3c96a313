"""Network topologies and their minimal routing, vectorised with numpy.

A topology has ``nodes`` nodes (one rank per node, rank r on node r) and a space of
``num_links`` directed link indices; `route` maps a batch of messages
``src[i] -> dst[i]`` to their hop counts and to the links they load, as incidence triples
``(message, link, weight)`` (`Routes`).  A weight is the share of the message's bytes the
link carries: 1 on a deterministic route, a fraction where ``adaptive`` spreads a flow.
`route_intervals` gives the same loads as runs of consecutive link indices, which keeps a
long run along a torus line to one entry (what the simulator uses); ``link_ends`` maps
link indices back to nodes, ``peak_bandwidth`` is the allreduce peak the paper plots.
``link_bandwidths`` is None here (every link at the model's bandwidth) and
``message_latency`` is hops times the per-hop latency; `collc.hierarchy` puts several ranks
on a node, with links of their own bandwidths and latencies.

Topologies (`parse_topology` reads their text form):

``Torus(dims)`` (``torus:4x4x4``, ``ring:16``)
    Nodes in row-major order, the last dimension fastest (as MPI_Cart and the language's
    ``coords``).  Each node has ``2*D`` ports, one outgoing link per (dimension,
    direction); in a dimension of size 2 the + and - links are two distinct links to the
    same neighbour, and a dimension of size 1 has none.  Minimal routing, dimension 0
    first; each dimension goes the short way, and a tie (distance exactly d/2) goes the
    + way.
``HyperX(dims)`` (``hyperx:8x8``)
    Every dimension fully connected: a link between any two nodes that differ in one
    coordinate.  Minimal routing takes one hop per differing dimension, dimension 0 first.
``FatTree(p, radix)`` (``fattree:256``, ``fattree:256,radix=32``)
    A non-blocking (full-bisection) k-ary tree of switches with ``radix/2`` ports down:
    the switches never limit bandwidth, so only each node's injection link (index ``r``)
    and ejection link (index ``p + r``) are modelled.  Two nodes whose lowest common
    subtree is at level ``l`` (``l >= 1``, the smallest with ``src // h**l == dst // h**l``
    where ``h = radix/2``) are ``2*l`` hops apart: 2 under one leaf switch, 4 under one
    level-2 switch, and so on.
``FullyConnected(p)`` (``full:16``)
    A direct link per ordered pair (index ``src*p + dst``), one hop.
``Dragonfly`` (``dragonfly:h=4,g=8``) and ``TaperedFatTree`` (``fattree:256,radix=32,oversub=4``)
    In `collc.topology_groups`, with their global links marked.

``adaptive=True`` is the flow-level stand-in for the minimal adaptive routing of the
Swing paper's packet simulator: a flow is split evenly over minimal paths where there is
a choice.  On a torus a dimension at distance exactly d/2 is crossed half each way
(weight 1/2 per direction), and a flow that moves in several dimensions is split over the
D rotations of the dimension order (0, 1, .., D-1), (1, 2, .., 0), ... (weight 1/D each).
HyperX splits over the rotations in the same way; the fat tree and the fully connected
network have a single minimal path per message in this model.

Routes never depend on message sizes, so a simulator routes each step once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = [
    "FatTree",
    "FullyConnected",
    "HyperX",
    "Intervals",
    "Routes",
    "Topology",
    "Torus",
    "intervals_of",
]


@dataclass(frozen=True, eq=False)
class Routes:
    """The routes of a batch of messages.

    ``hops[i]``: hop count of message i (the same on every minimal path).
    ``msg``, ``link``, ``weight``: incidence triples; message ``msg[j]`` puts the share
    ``weight[j]`` of its bytes on link ``link[j]``.  On a deterministic route the weights
    are 1, and the triples of one message, in array order, are the links of its path in
    order (the triples of different messages interleave).
    """

    hops: np.ndarray
    msg: np.ndarray
    link: np.ndarray
    weight: np.ndarray

    @property
    def size(self) -> int:
        """The number of incidence triples."""
        return int(self.link.size)


@dataclass(frozen=True, eq=False)
class Intervals:
    """The routes of a batch of messages as runs of consecutive link indices: message
    ``msg[j]`` puts the share ``weight[j]`` of its bytes on every link ``lo[j] .. hi[j]-1``.
    The compact form a simulator sums link loads from (a run along a torus line is one
    interval however long); ``hops`` as in `Routes`."""

    hops: np.ndarray
    msg: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    weight: np.ndarray


def intervals_of(routes: Routes) -> Intervals:
    """Every triple of ``routes`` as an interval of one link."""
    return Intervals(routes.hops, routes.msg, routes.link, routes.link + 1, routes.weight)


@runtime_checkable
class Topology(Protocol):
    """What every topology provides (see the module docstring)."""

    @property
    def nodes(self) -> int: ...

    @property
    def num_links(self) -> int: ...

    @property
    def ports(self) -> int: ...

    @property
    def spec(self) -> str: ...

    @property
    def name(self) -> str: ...

    def peak_bandwidth(self, link_bandwidth: float) -> float: ...

    def route(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Routes: ...

    def route_intervals(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Intervals: ...

    def link_ends(self, links: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def link_bandwidths(self, link_bandwidth: float) -> np.ndarray | None: ...

    def message_latency(self, src: np.ndarray, dst: np.ndarray, per_hop: float) -> np.ndarray: ...


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------

_I64 = np.int64


def _nodes_arrays(nodes: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(src, dtype=_I64).ravel()
    d = np.asarray(dst, dtype=_I64).ravel()
    if s.shape != d.shape:
        raise ValueError(f"route: {s.size} sources but {d.size} destinations")
    for name, a in (("source", s), ("destination", d)):
        if a.size and (a.min() < 0 or a.max() >= nodes):
            bad = int(a[(a < 0) | (a >= nodes)][0])
            raise ValueError(f"route: {name} node {bad} is outside 0..{nodes - 1}")
    return s, d


def _empty_routes(m: int) -> Routes:
    return Routes(np.zeros(m, _I64), np.zeros(0, _I64), np.zeros(0, _I64), np.zeros(0, np.float64))


def _expand(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For segments of the given lengths: the segment of every element and its offset in it."""
    seg = np.repeat(np.arange(lengths.size, dtype=_I64), lengths)
    starts = np.cumsum(lengths) - lengths
    offset = np.arange(seg.size, dtype=_I64) - starts[seg]
    return seg, offset


def _check_dims(kind: str, dims: tuple[int, ...]) -> tuple[int, ...]:
    if not isinstance(dims, tuple) or not dims:
        raise ValueError(f"{kind}: dimensions must be a non-empty tuple of sizes, got {dims!r}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
            raise ValueError(f"{kind}: every dimension size must be an integer >= 1, got {dims!r}")
    return tuple(int(d) for d in dims)


class _Named:
    """What every topology derives from its ``spec`` and ``ports``."""

    spec: str
    ports: int

    @property
    def name(self) -> str:
        """The text form (`parse_topology` reads it back)."""
        return self.spec

    def peak_bandwidth(self, link_bandwidth: float) -> float:
        """The peak allreduce goodput in bytes/s: half the injection bandwidth, ``ports *
        link_bandwidth / 2`` (an allreduce sends and receives about twice the vector per
        rank); on a D-dimensional torus ``D * link_bandwidth``, the Swing paper's peak."""
        return self.ports * link_bandwidth / 2

    def link_bandwidths(self, link_bandwidth: float) -> np.ndarray | None:
        """The bandwidth of every link, or None where every link has ``link_bandwidth`` (here)."""
        return None

    def message_latency(self, src: np.ndarray, dst: np.ndarray, per_hop: float) -> np.ndarray:
        """Seconds of latency of every message: ``per_hop`` per hop of its minimal route."""
        return self.route_intervals(src, dst).hops * float(per_hop)  # type: ignore[attr-defined]


class _Cartesian(_Named):
    """Shared by `Torus` and `HyperX`: row-major coordinates and dimension-ordered segments."""

    dims: tuple[int, ...]

    @property
    def nodes(self) -> int:
        return math.prod(self.dims)

    @property
    def strides(self) -> np.ndarray:
        """Node-index stride of each dimension (the last dimension has stride 1)."""
        out = np.ones(len(self.dims), dtype=_I64)
        for k in range(len(self.dims) - 2, -1, -1):
            out[k] = out[k + 1] * self.dims[k + 1]
        return out

    def coords(self, nodes: np.ndarray) -> np.ndarray:
        """Coordinates, shape (n, D), row-major with the last dimension fastest."""
        n = np.asarray(nodes, dtype=_I64).ravel()
        return (n[:, None] // self.strides[None, :]) % np.asarray(self.dims, dtype=_I64)[None, :]

    def node_of(self, coords: np.ndarray) -> np.ndarray:
        """Inverse of `coords` (coordinates taken modulo the dimension sizes)."""
        c = np.asarray(coords, dtype=_I64) % np.asarray(self.dims, dtype=_I64)
        return c @ self.strides

    def _segments(
        self, cs: np.ndarray, cd: np.ndarray, moving: np.ndarray, adaptive: bool
    ) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """Per (rotation, dimension k): the messages that move in k, the node index of their
        path's position with coordinate k zeroed (dimensions earlier in the order already at
        the destination, later ones still at the source) and their weight share.

        Rotation r orders the dimensions r, r+1, ..., r-1; without ``adaptive`` only rotation
        0 is used, with it every message moving in several dimensions uses all D rotations
        (weight 1/D each)."""
        dcount = len(self.dims)
        strides = self.strides
        multi = moving.sum(axis=1) > 1
        rotations = range(dcount) if adaptive and dcount > 1 else range(1)
        out = []
        for r in rotations:
            for k in range(dcount):
                sel = moving[:, k] if r == 0 else moving[:, k] & multi
                idx = np.flatnonzero(sel)
                if idx.size == 0:
                    continue
                base = np.zeros(idx.size, dtype=_I64)
                pos_k = (k - r) % dcount
                for j in range(dcount):
                    if j == k:
                        continue
                    before = (j - r) % dcount < pos_k
                    base += (cd[idx, j] if before else cs[idx, j]) * strides[j]
                if adaptive and dcount > 1:
                    weight = np.where(multi[idx], 1.0 / dcount, 1.0)
                else:
                    weight = np.ones(idx.size)
                out.append((k, idx, base, weight))
        return out


# --------------------------------------------------------------------------
# Torus
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Torus(_Cartesian):
    """A D-dimensional torus; ``Torus((p,))`` is a ring.

    Link indices run along *lines*: the links of dimension k, direction b (0: +, 1: -),
    between the nodes that share every coordinate but k, are consecutive, indexed by the
    coordinate x of the node they leave: ``k*2*nodes + b*nodes + line*dims[k] + x``, where
    ``line`` is the node index with coordinate k removed.  A route's run of hops in one
    dimension is then one cyclic interval of link indices (`route_intervals`)."""

    dims: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", _check_dims("torus", self.dims))

    @property
    def num_links(self) -> int:
        return self.nodes * 2 * len(self.dims)

    @property
    def ports(self) -> int:
        return 2 * sum(1 for d in self.dims if d > 1)

    @property
    def spec(self) -> str:
        if len(self.dims) == 1:
            return f"ring:{self.dims[0]}"
        return "torus:" + "x".join(map(str, self.dims))

    def __str__(self) -> str:
        return self.spec

    def _line(self, node: np.ndarray, k: np.ndarray) -> np.ndarray:
        """The line of ``node`` in dimension k: its index with coordinate k removed."""
        sk = self.strides[k]
        dk = np.asarray(self.dims, dtype=_I64)[k]
        return (node // (sk * dk)) * sk + node % sk

    def link(self, node: int, dim: int, direction: int) -> int:
        """The index of the link leaving ``node`` in dimension ``dim``, ``direction`` +1 or -1."""
        n = np.asarray([node], dtype=_I64)
        k = np.asarray([dim], dtype=_I64)
        x = int(self.coords(n)[0, dim])
        line = int(self._line(n, k)[0])
        return dim * 2 * self.nodes + (0 if direction > 0 else 1) * self.nodes + line * self.dims[dim] + x

    def link_ends(self, links: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(tail node, head node) of each link."""
        lk = np.asarray(links, dtype=_I64).ravel()
        n = self.nodes
        k = lk // (2 * n)
        b = (lk // n) % 2
        sizes = np.asarray(self.dims, dtype=_I64)[k]
        sk = self.strides[k]
        rest = lk % n
        line, x = rest // sizes, rest % sizes
        lowbase = (line // sk) * (sk * sizes) + line % sk
        new = (x + np.where(b == 0, 1, -1)) % sizes
        return lowbase + x * sk, lowbase + new * sk

    def _runs(self, src: np.ndarray, dst: np.ndarray, adaptive: bool) -> tuple[np.ndarray, ...]:
        """Every run of hops in one dimension: (hops per message; per run: message, first
        link index of its line, line length, first position, hop count (+ way) or minus the
        hop count (- way), weight)."""
        sizes = np.asarray(self.dims, dtype=_I64)
        cs, cd = self.coords(src), self.coords(dst)
        fwd = (cd - cs) % sizes
        back = (sizes - fwd) % sizes
        length = np.minimum(fwd, back)
        hops = length.sum(axis=1)
        plus = fwd <= back  # a tie goes the + way
        tie = (fwd == back) & (fwd > 0)
        n = self.nodes
        msgs, origin, dlen, start, signed, weights = [], [], [], [], [], []
        for k, idx, base, w in self._segments(cs, cd, length > 0, adaptive):
            first = k * 2 * n + self._line(base, np.full(idx.size, k, dtype=_I64)) * self.dims[k]
            steps = np.where(plus[idx, k], length[idx, k], -length[idx, k])
            ti = np.flatnonzero(tie[idx, k]) if adaptive else np.zeros(0, dtype=_I64)
            if ti.size:  # half of a tie goes each way
                w = w.copy()
                w[ti] /= 2
                idx, first, steps, w = (np.concatenate((a, a[ti])) for a in (idx, first, steps, w))
                steps[-ti.size :] *= -1
            msgs.append(idx)
            origin.append(first)
            dlen.append(np.full(idx.size, self.dims[k], dtype=_I64))
            start.append(cs[idx, k])
            signed.append(steps)
            weights.append(w)
        if not msgs:
            z = np.zeros(0, dtype=_I64)
            return hops, z, z, z, z, z, np.zeros(0)
        cat = np.concatenate
        return hops, cat(msgs), cat(origin), cat(dlen), cat(start), cat(signed), cat(weights)

    def route(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Routes:
        s, d = _nodes_arrays(self.nodes, src, dst)
        hops, msg, first, dlen, start, signed, weight = self._runs(s, d, adaptive)
        seg, off = _expand(np.abs(signed))
        sign = np.sign(signed[seg])
        x = (start[seg] + sign * off) % dlen[seg]
        link = first[seg] + (sign < 0) * self.nodes + x
        return Routes(hops, msg[seg], link, weight[seg])

    def route_intervals(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Intervals:
        s, d = _nodes_arrays(self.nodes, src, dst)
        hops, msg, first, dlen, start, signed, weight = self._runs(s, d, adaptive)
        steps = np.abs(signed)
        minus = signed < 0
        # positions a .. a+L-1 on the line, cyclic: + runs start at the source coordinate,
        # - runs cover start-L+1 .. start (the link at x leads from x to x-1)
        a = np.where(minus, (start - steps + 1) % dlen, start)
        first = first + minus * self.nodes
        end = a + steps
        wrap = end > dlen
        lo = np.concatenate((first + a, first[wrap]))
        hi = np.concatenate((first + np.minimum(end, dlen), first[wrap] + end[wrap] - dlen[wrap]))
        return Intervals(hops, np.concatenate((msg, msg[wrap])), lo, hi, np.concatenate((weight, weight[wrap])))


# --------------------------------------------------------------------------
# HyperX
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class HyperX(_Cartesian):
    """Every dimension fully connected.  Link ``(node*D + k)*dmax + t`` goes from ``node`` to
    the node with coordinate k replaced by ``t`` (dmax: the largest dimension)."""

    dims: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", _check_dims("hyperx", self.dims))

    @property
    def _dmax(self) -> int:
        return max(self.dims)

    @property
    def num_links(self) -> int:
        return self.nodes * len(self.dims) * self._dmax

    @property
    def ports(self) -> int:
        return sum(d - 1 for d in self.dims)

    @property
    def spec(self) -> str:
        return "hyperx:" + "x".join(map(str, self.dims))

    def __str__(self) -> str:
        return self.spec

    def link_ends(self, links: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lk = np.asarray(links, dtype=_I64).ravel()
        dcount, dmax = len(self.dims), self._dmax
        t = lk % dmax
        k = (lk // dmax) % dcount
        tail = lk // (dmax * dcount)
        coord = (tail // self.strides[k]) % np.asarray(self.dims, dtype=_I64)[k]
        return tail, tail + (t - coord) * self.strides[k]

    def route(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Routes:
        s, d = _nodes_arrays(self.nodes, src, dst)
        if s.size == 0:
            return _empty_routes(0)
        cs, cd = self.coords(s), self.coords(d)
        moving = cs != cd
        hops = moving.sum(axis=1).astype(_I64)
        dcount, dmax = len(self.dims), self._dmax
        msgs, links, weights = [], [], []
        for k, idx, base, w in self._segments(cs, cd, moving, adaptive):
            node = base + cs[idx, k] * self.strides[k]
            msgs.append(idx)
            links.append((node * dcount + k) * dmax + cd[idx, k])
            weights.append(w)
        if not msgs:
            return _empty_routes(s.size)
        return Routes(hops, np.concatenate(msgs), np.concatenate(links), np.concatenate(weights))

    def route_intervals(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Intervals:
        return intervals_of(self.route(src, dst, adaptive))


# --------------------------------------------------------------------------
# Fat tree and fully connected
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class FatTree(_Named):
    """A non-blocking fat tree; only injection (``r``) and ejection (``p + r``) links are modelled.
    ``link_ends`` gives -1 for the switch end of a link."""

    p: int
    radix: int = 64

    def __post_init__(self) -> None:
        if isinstance(self.p, bool) or not isinstance(self.p, (int, np.integer)) or self.p < 1:
            raise ValueError(f"fattree: the number of nodes must be an integer >= 1, got {self.p!r}")
        if isinstance(self.radix, bool) or not isinstance(self.radix, (int, np.integer)):
            raise ValueError(f"fattree: the radix must be an integer, got {self.radix!r}")
        if self.radix < 4 or self.radix % 2:
            raise ValueError(f"fattree: the switch radix must be an even integer >= 4, got {self.radix}")

    @property
    def nodes(self) -> int:
        return int(self.p)

    @property
    def num_links(self) -> int:
        return 2 * self.nodes

    @property
    def ports(self) -> int:
        return 1

    @property
    def levels(self) -> int:
        """Switch levels needed to connect every node (at least 1)."""
        h, lv, span = self.radix // 2, 1, self.radix // 2
        while span < self.nodes:
            span *= h
            lv += 1
        return lv

    @property
    def spec(self) -> str:
        return f"fattree:{self.nodes}" + ("" if self.radix == 64 else f",radix={self.radix}")

    def __str__(self) -> str:
        return self.spec

    def link_ends(self, links: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lk = np.asarray(links, dtype=_I64).ravel()
        inj = lk < self.nodes
        tail = np.where(inj, lk, -1)
        head = np.where(inj, -1, lk - self.nodes)
        return tail, head

    def route(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Routes:
        s, d = _nodes_arrays(self.nodes, src, dst)
        h = self.radix // 2
        level = np.zeros(s.size, dtype=_I64)
        a, b = s.copy(), d.copy()
        pending = a != b
        while pending.any():
            level += pending
            a //= h
            b //= h
            pending = a != b
        hops = 2 * level
        idx = np.flatnonzero(level > 0)
        msg = np.concatenate((idx, idx))
        link = np.concatenate((s[idx], self.nodes + d[idx]))
        return Routes(hops, msg, link, np.ones(msg.size))

    def route_intervals(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Intervals:
        return intervals_of(self.route(src, dst, adaptive))


@dataclass(frozen=True)
class FullyConnected(_Named):
    """A direct link per ordered pair of nodes (index ``src*p + dst``)."""

    p: int

    def __post_init__(self) -> None:
        if isinstance(self.p, bool) or not isinstance(self.p, (int, np.integer)) or self.p < 1:
            raise ValueError(f"full: the number of nodes must be an integer >= 1, got {self.p!r}")

    @property
    def nodes(self) -> int:
        return int(self.p)

    @property
    def num_links(self) -> int:
        return self.nodes * self.nodes

    @property
    def ports(self) -> int:
        return self.nodes - 1

    @property
    def spec(self) -> str:
        return f"full:{self.nodes}"

    def __str__(self) -> str:
        return self.spec

    def link_ends(self, links: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lk = np.asarray(links, dtype=_I64).ravel()
        return lk // self.nodes, lk % self.nodes

    def route(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Routes:
        s, d = _nodes_arrays(self.nodes, src, dst)
        idx = np.flatnonzero(s != d)
        hops = (s != d).astype(_I64)
        return Routes(hops, idx, s[idx] * self.nodes + d[idx], np.ones(idx.size))

    def route_intervals(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Intervals:
        return intervals_of(self.route(src, dst, adaptive))
