"""Multi-level topologies: nodes of several ranks on an intra-node fabric, joined by NICs to a network.

`Hierarchical(network, node)` puts ``node.ranks`` ranks (GPUs) on every node of ``network``
(any `collc.topology` topology; its nodes are the machines).  Rank r lives on node
``r // G`` (``placement="block"``, the default) or ``r % N`` (``"cyclic"``), G ranks per
node, N nodes; its local index on the node is the other part of the division.

Inside a node (`NodeSpec.fabric`):

``nvlink``
    A full crossbar (an NVSwitch): every rank has an up link into the switch and a down link
    out of it, each ``node.bandwidth`` per direction.  A message between two ranks of a node
    crosses ``up[src]`` and ``down[dst]`` and one switch (``node.latency``).  Traffic to the
    NICs does not cross the crossbar (GPUDirect over PCIe, not modelled).
``pcie``
    A PCIe tree: ranks in groups of ``node.fanout`` under leaf switches (one leaf holding every
    rank when ``fanout`` is 0 or at least G), the leaves under a root switch to which the NICs
    attach.  Rank links up/down and, where there are several leaves, leaf links up/down, all at
    ``node.bandwidth``; every switch crossed costs ``node.latency``.

Between nodes: rank g of a node uses NIC ``g * K // G`` of its node (K NICs per node); a
message leaves through its NIC's up link (``node.nic_bandwidth``, the network's link
bandwidth when None), follows the network's minimal route between the two nodes, and enters
through the destination NIC's down link; each NIC crossed costs ``node.nic_latency``.  On a
fat tree, whose model has only injection and ejection links, the NIC links are those links:
the tree adds its hops (latency) and no links of its own.

Link indices: rank up ``[0, R)``, rank down ``[R, 2R)`` (R = N*G), then leaf up and leaf down
(N*S each, S leaves per node, pcie with S > 1 only), NIC up and NIC down (N*K each), then the
network's links shifted by the offset `network_offset`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from collc.topology import FatTree, Intervals, Routes, Topology

__all__ = ["FABRICS", "NODE_FORMS", "PLACEMENTS", "Hierarchical", "NodeSpec", "parse_node"]

FABRICS = {"nvlink": (450e9, 250e-9), "pcie": (32e9, 500e-9)}
"""Default (bandwidth per direction in bytes/s, latency per switch in s) of each intra-node fabric."""
NIC_LATENCY = 500e-9
"""Default seconds a message spends in each NIC it crosses."""
PLACEMENTS = ("block", "cyclic")
NODE_FORMS = (
    "nvlink:G or pcie:G, then options ,bw=RATE ,latency=TIME ,nics=K ,nic-bw=RATE ,nic-latency=TIME "
    "(pcie also ,fanout=F)"
)

_I64 = np.int64


@dataclass(frozen=True)
class NodeSpec:
    """The inside of a node: ``ranks`` ranks on a ``fabric`` and ``nics`` NICs (rates in bytes/s, times in s)."""

    fabric: str
    ranks: int
    nics: int = 1
    fanout: int = 0  # pcie: ranks per leaf switch (0: one switch for all)
    bandwidth: float | None = None  # per direction of a rank's (or leaf's) link; None: the fabric's default
    latency: float | None = None  # per switch crossed; None: the fabric's default
    nic_bandwidth: float | None = None  # per direction of a NIC; None: the network's link bandwidth
    nic_latency: float = NIC_LATENCY

    def __post_init__(self) -> None:
        if self.fabric not in FABRICS:
            raise ValueError(f"node: unknown fabric {self.fabric!r} (known: {', '.join(FABRICS)})")
        for name in ("ranks", "nics"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"node: {name} must be an integer >= 1, got {value!r}")
        if self.nics > self.ranks:
            raise ValueError(f"node: {self.nics} NICs for {self.ranks} ranks (at most one NIC per rank)")
        if isinstance(self.fanout, bool) or not isinstance(self.fanout, int) or self.fanout < 0:
            raise ValueError(f"node: fanout must be an integer >= 0, got {self.fanout!r}")
        if self.fanout and self.fabric != "pcie":
            raise ValueError("node: fanout is an option of pcie only")
        for name in ("bandwidth", "nic_bandwidth"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"node: {name} must be a positive number, got {value!r}")
        for name in ("latency", "nic_latency"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"node: {name} must be a non-negative number, got {value!r}")

    @property
    def link_bandwidth(self) -> float:
        return self.bandwidth if self.bandwidth is not None else FABRICS[self.fabric][0]

    @property
    def switch_latency(self) -> float:
        return self.latency if self.latency is not None else FABRICS[self.fabric][1]

    @property
    def leaves(self) -> int:
        """Leaf switches per node (1 on a crossbar)."""
        if self.fabric != "pcie" or self.fanout == 0 or self.fanout >= self.ranks:
            return 1
        return -(-self.ranks // self.fanout)

    @property
    def spec(self) -> str:
        out = f"{self.fabric}:{self.ranks}"
        if self.fanout and self.leaves > 1:
            out += f",fanout={self.fanout}"
        if self.nics != 1:
            out += f",nics={self.nics}"
        return out


@dataclass(frozen=True)
class Hierarchical:
    """Nodes of ``node.ranks`` ranks on an intra-node fabric, joined by NICs to ``network`` (see the module)."""

    network: Topology
    node: NodeSpec
    placement: str = "block"

    def __post_init__(self) -> None:
        if isinstance(self.network, Hierarchical):
            raise ValueError("hierarchy: the network between nodes cannot itself be hierarchical")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"hierarchy: placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}")

    # ---- sizes and names

    @property
    def machines(self) -> int:
        """Nodes (N)."""
        return self.network.nodes

    @property
    def nodes(self) -> int:
        """Ranks, N*G: what a schedule's rank count must match."""
        return self.machines * self.node.ranks

    @property
    def _leaf_links(self) -> int:
        s = self.node.leaves
        return self.machines * s if s > 1 else 0

    @property
    def network_offset(self) -> int:
        """The index of the network's link 0."""
        return 2 * self.nodes + 2 * self._leaf_links + 2 * self.machines * self.node.nics

    @property
    def num_links(self) -> int:
        inner = 0 if isinstance(self.network, FatTree) else self.network.num_links
        return self.network_offset + inner

    @property
    def ports(self) -> int:
        return self.node.nics

    @property
    def spec(self) -> str:
        place = "" if self.placement == "block" else f", {self.placement}"
        return f"{self.network.spec} x {self.node.spec}{place}"

    @property
    def name(self) -> str:
        return self.spec

    def __str__(self) -> str:
        return self.spec

    def peak_bandwidth(self, link_bandwidth: float) -> float:
        """Half a node's NIC bandwidth, ``nics * nic_bandwidth / 2``: an allreduce over nodes sends and
        receives about twice the vector per node through its NICs."""
        nic = self.node.nic_bandwidth if self.node.nic_bandwidth is not None else link_bandwidth
        return self.node.nics * nic / 2

    # ---- placement

    def place(self, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(node, local index) of every rank."""
        r = np.asarray(ranks, dtype=_I64)
        g, n = self.node.ranks, self.machines
        if self.placement == "block":
            return r // g, r % g
        return r % n, r // n

    def _check(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = np.asarray(src, dtype=_I64).ravel()
        d = np.asarray(dst, dtype=_I64).ravel()
        if s.shape != d.shape:
            raise ValueError(f"route: {s.size} sources but {d.size} destinations")
        for what, a in (("source", s), ("destination", d)):
            if a.size and (a.min() < 0 or a.max() >= self.nodes):
                bad = int(a[(a < 0) | (a >= self.nodes)][0])
                raise ValueError(f"route: {what} rank {bad} is outside 0..{self.nodes - 1}")
        return s, d

    # ---- links

    def link_bandwidths(self, link_bandwidth: float) -> np.ndarray:
        """Bandwidth of every link in bytes/s; the network's links at ``link_bandwidth``."""
        bw = np.full(self.num_links, float(link_bandwidth))
        intra = 2 * self.nodes + 2 * self._leaf_links
        bw[:intra] = self.node.link_bandwidth
        if self.node.nic_bandwidth is not None:
            bw[intra : self.network_offset] = self.node.nic_bandwidth
        return bw

    def _segments(self, s: np.ndarray, d: np.ndarray) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
        """The intra-node and NIC links of every message, as (message, link) pairs, and the switch
        count per message (intra-node switches crossed)."""
        ns, gs = self.place(s)
        nd, gd = self.place(d)
        g, k, s_leaves = self.node.ranks, self.node.nics, self.node.leaves
        r_all = self.nodes
        leaf_up0 = 2 * r_all
        leaf_dn0 = leaf_up0 + self._leaf_links
        nic_up0 = leaf_dn0 + self._leaf_links
        nic_dn0 = nic_up0 + self.machines * k
        fan = self.node.fanout if s_leaves > 1 else g
        ls, ld = gs // fan, gd // fan
        same_node = (ns == nd) & (s != d)
        other = ns != nd
        pcie = self.node.fabric == "pcie"
        pairs: list[tuple[np.ndarray, np.ndarray]] = []
        switches = np.zeros(s.size, dtype=_I64)

        def add(mask: np.ndarray, links: np.ndarray) -> None:
            idx = np.flatnonzero(mask)
            pairs.append((idx, links[idx]))

        # inside one node: up, [leaf up, leaf down], down
        add(same_node, s)
        add(same_node, r_all + d)
        cross_leaf = same_node & (ls != ld)
        if s_leaves > 1:
            add(cross_leaf, leaf_up0 + ns * s_leaves + ls)
            add(cross_leaf, leaf_dn0 + nd * s_leaves + ld)
        switches += np.where(same_node, np.where(cross_leaf, 3, 1), 0)
        # between nodes: [up, leaf up], NIC up, ..network.., NIC down, [leaf down, down]
        if pcie:
            add(other, s)
            add(other, r_all + d)
            if s_leaves > 1:
                add(other, leaf_up0 + ns * s_leaves + ls)
                add(other, leaf_dn0 + nd * s_leaves + ld)
            switches += np.where(other, 2 * (2 if s_leaves > 1 else 1), 0)
        add(other, nic_up0 + ns * k + gs * k // g)
        add(other, nic_dn0 + nd * k + gd * k // g)
        return pairs, switches

    def _levels(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]],
                                                                  np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """What `route` and `route_intervals` share: the hops of the links inside nodes and to the NICs,
        those links as (messages, link) pairs, and the messages between nodes with their two nodes."""
        s, d = self._check(src, dst)
        pairs, _ = self._segments(s, d)
        hops = np.zeros(s.size, dtype=_I64)
        for m, _ in pairs:
            np.add.at(hops, m, 1)
        ns, _ = self.place(s)
        nd, _ = self.place(d)
        other = np.flatnonzero(ns != nd)
        return hops, pairs, other, ns[other], nd[other]

    def _network_hops(self, inner_hops: np.ndarray) -> np.ndarray:
        """The network's hops of messages between nodes (a fat tree's injection links are the NICs')."""
        return inner_hops - (2 if isinstance(self.network, FatTree) else 0)

    def route(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Routes:
        hops, pairs, other, ns, nd = self._levels(src, dst)
        msgs = [m for m, _ in pairs]
        links = [lk for _, lk in pairs]
        weights = [np.ones(m.size) for m in msgs]
        if other.size:
            inner = self.network.route(ns, nd, adaptive=adaptive)
            hops[other] += self._network_hops(inner.hops)
            if not isinstance(self.network, FatTree):
                msgs.append(other[inner.msg])
                links.append(inner.link + self.network_offset)
                weights.append(inner.weight)
        cat = np.concatenate
        return Routes(hops, cat(msgs), cat(links), cat(weights))

    def route_intervals(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Intervals:
        hops, pairs, other, ns, nd = self._levels(src, dst)
        msgs = [m for m, _ in pairs]
        lo = [lk for _, lk in pairs]
        hi = [lk + 1 for _, lk in pairs]
        weights = [np.ones(m.size) for m in msgs]
        if other.size:
            inner = self.network.route_intervals(ns, nd, adaptive=adaptive)
            hops[other] += self._network_hops(inner.hops)
            if not isinstance(self.network, FatTree):
                msgs.append(other[inner.msg])
                lo.append(inner.lo + self.network_offset)
                hi.append(inner.hi + self.network_offset)
                weights.append(inner.weight)
        cat = np.concatenate
        return Intervals(hops, cat(msgs), cat(lo), cat(hi), cat(weights))

    def message_latency(self, src: np.ndarray, dst: np.ndarray, per_hop: float) -> np.ndarray:
        """Seconds of latency of every message: switches inside the nodes, NICs, and ``per_hop`` per
        hop of the network (a fat tree's hops counted between the two NICs)."""
        s, d = self._check(src, dst)
        _, switches = self._segments(s, d)
        lat = switches * self.node.switch_latency
        ns, _ = self.place(s)
        nd, _ = self.place(d)
        other = np.flatnonzero(ns != nd)
        if other.size:
            inner = self.network.route_intervals(ns[other], nd[other])
            lat = lat.astype(np.float64)
            lat[other] += 2 * self.node.nic_latency + inner.hops * per_hop
        return np.asarray(lat, dtype=np.float64)

    def link_ends(self, links: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(tail, head) rank of each rank link, -1 for a switch, a NIC or a link of the network."""
        lk = np.asarray(links, dtype=_I64).ravel()
        r = self.nodes
        tail = np.where(lk < r, lk, -1)
        head = np.where((lk >= r) & (lk < 2 * r), lk - r, -1)
        return tail, head


# --------------------------------------------------------------------------
# Text form
# --------------------------------------------------------------------------

_RATE = re.compile(r"\s*(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*([A-Za-z]+/s)\s*")
_RATES = {"b/s": 1 / 8, "Kb/s": 1e3 / 8, "Mb/s": 1e6 / 8, "Gb/s": 1e9 / 8, "Tb/s": 1e12 / 8}
_BYTE_RATES = {"B/s": 1, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12, "GiB/s": 1 << 30}
_TIMES = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def _rate(key: str, text: str) -> float:
    m = _RATE.fullmatch(text)
    if m:
        value, unit = float(m.group(1)), m.group(2)
        scale = _BYTE_RATES.get(unit, _RATES.get(unit))
        if scale is not None and value > 0 and math.isfinite(value):
            return value * scale
    raise ValueError(f"node: {key}={text!r} is not a rate above zero (examples: 450GB/s, 400Gb/s)")


def _duration(key: str, text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*([a-zµ]+)\s*", text)
    if not m or m.group(2) not in _TIMES or not math.isfinite(float(m.group(1))):
        raise ValueError(f"node: {key}={text!r} is not a duration (examples: 250ns, 1us)")
    return float(m.group(1)) * _TIMES[m.group(2)]


def _count(key: str, text: str, least: int) -> int:
    if not re.fullmatch(r"\s*\d+\s*", text) or int(text) < least:
        raise ValueError(f"node: {key} must be an integer >= {least}, got {text.strip()!r}")
    return int(text)


def parse_node(text: str) -> NodeSpec:
    """A node from its text form: ``nvlink:8``, ``pcie:8,fanout=4``, ``nvlink:8,nics=8,nic-bw=400Gb/s``
    (options ``bw``, ``latency``, ``nics``, ``nic-bw``, ``nic-latency``, ``fanout``; see `NODE_FORMS`)."""
    if not isinstance(text, str):
        raise ValueError(f"a node is text such as 'nvlink:8', got {text!r}")
    head, _, rest = text.partition(",")
    kind, colon, count = head.partition(":")
    kind = kind.strip().lower()
    if not colon or kind not in FABRICS:
        raise ValueError(f"bad node {text!r}: expected {NODE_FORMS}")
    values: dict[str, object] = {"fabric": kind, "ranks": _count("the number of ranks per node", count, 1)}
    seen: set[str] = set()
    for item in rest.split(",") if rest.strip() else []:
        key, eq, value = item.partition("=")
        key = key.strip().lower()
        if not eq:
            raise ValueError(f"node: option {item.strip()!r} has no value (write KEY=VALUE)")
        if key in seen:
            raise ValueError(f"node: option {key} given twice")
        seen.add(key)
        if key == "bw":
            values["bandwidth"] = _rate(key, value)
        elif key == "latency":
            values["latency"] = _duration(key, value)
        elif key == "nics":
            values["nics"] = _count(key, value, 1)
        elif key == "nic-bw":
            values["nic_bandwidth"] = _rate(key, value)
        elif key == "nic-latency":
            values["nic_latency"] = _duration(key, value)
        elif key == "fanout":
            values["fanout"] = _count(key, value, 1)
        else:
            raise ValueError(f"node: unknown option {key!r} (known: bw, latency, nics, nic-bw, nic-latency, fanout)")
    return NodeSpec(**values)  # type: ignore[arg-type]
