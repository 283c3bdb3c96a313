"""Topologies of groups joined by scarce upper links: the Dragonfly and the oversubscribed fat tree.

Both model every link a message crosses, with the links between groups (a Dragonfly's global
links, a fat tree's links above the leaf switches) marked as *global* (`global_link_mask`), so
that a simulator can count the bytes a schedule puts on them (`collc.simulate.traffic`).
`collc.topologies.parse_topology` reads their text forms through `parse_dragonfly` and
`parse_fattree`.

``Dragonfly(g, a, h, t)`` (``dragonfly:h=4``, ``dragonfly:h=4,g=8``, ``dragonfly:g=8,a=8,h=4,t=4``)
    ``g`` groups of ``a`` routers, ``t`` nodes (terminals) per router and ``h`` global links
    per router (Kim et al.'s a, p, h).  The balanced defaults are ``a = 2h``, ``t = h`` and
    ``g = a*h + 1`` (one global link between every pair of groups); fewer groups are allowed,
    and then every pair of groups gets ``m = (a*h) // (g - 1)`` global links (the ports left
    over stay unused).  Node r is on router ``r // t`` (router ``i = (r // t) % a`` of group
    ``r // (a*t)``).  The routers of a group are all-to-all (local links).  Global ports are
    arranged *consecutively*: port k of a group (``0 <= k < m*(g-1)``) is on router ``k // h``
    and leads to the group's ``(k mod (g-1))``-th other group, in increasing order skipping
    itself; ``k // (g-1)`` is the copy of that pair's link.  Port ``c*(g-1) + j`` of group G
    and port ``c*(g-1) + j'`` of group G' are the two ends of one link when j and j' name each
    other's group.

    Minimal routing: injection link, a local link to the router holding the global port (if it
    is another router), the global link, a local link to the destination's router (if it is
    another router), ejection link; two to five hops.  Where a pair of groups has several
    global links, the route takes the copy with the fewest hops, ties going to copy
    ``(src + dst) mod m`` or the first after it; ``adaptive`` splits the flow evenly over
    every copy with the fewest hops.  Non-minimal (Valiant, UGAL) paths are not modelled.

    Link indices: injection ``r`` and ejection ``N + r`` (N nodes), then local links
    ``2N + G*a*(a-1) + i*(a-1) + j'`` (router i to router j of group G, j' = j minus one when
    j > i), then global links ``2N + g*a*(a-1) + G*m*(g-1) + k`` (out of group G by port k).
    ``num_links = 2N + g*a*(a-1) + g*m*(g-1)``.
``TaperedFatTree(p, radix, oversub)`` (``fattree:256,radix=32,oversub=4``)
    The tree of `collc.topology.FatTree` (``h = radix/2`` nodes per leaf switch, a level-l
    subtree of ``h**l`` nodes, L levels) with its switch links modelled: every subtree at
    levels ``1 .. L-1`` has an up trunk and a down trunk, the aggregate of its switches'
    links to the level above, of bandwidth ``h**l * link_bandwidth / oversub``.  A message
    whose lowest common subtree is at level l crosses its injection link, the up trunks of its
    source's subtrees at levels 1 .. l-1, the down trunks of its destination's subtrees at
    levels l-1 .. 1, and its ejection link: ``2*l`` hops, as on `FatTree`.  A trunk stands for
    its links with the load spread perfectly over them (the flow-level stand-in for adaptive
    routing over the uplinks).  ``oversub=1`` is the non-blocking tree with its switch links
    modelled.

    Link indices: injection ``r``, ejection ``p + r``, then per level l = 1 .. L-1 the up trunks
    of its ``ceil(p / h**l)`` subtrees, then their down trunks.

With `collc.hierarchy` (``--node``) both keep their injection and ejection links behind the
nodes' NIC links.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from collc.topology import FatTree, Intervals, Routes, Topology, _Named, _nodes_arrays, intervals_of

__all__ = [
    "DRAGONFLY_FORM",
    "Dragonfly",
    "TaperedFatTree",
    "global_link_mask",
    "parse_dragonfly",
    "parse_fattree",
]

_I64 = np.int64

DRAGONFLY_FORM = "dragonfly:h=H[,g=G][,a=A][,t=T]"
"""The text form of a Dragonfly (options in any order; h is required)."""


def _positive(kind: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{kind}: {name} must be an integer >= 1, got {value!r}")
    return int(value)


# --------------------------------------------------------------------------
# Dragonfly
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Dragonfly(_Named):
    """A Dragonfly of ``g`` groups, ``a`` routers per group, ``h`` global links per router and ``t``
    nodes per router (see the module docstring for the arrangement, routing and link indices)."""

    g: int
    a: int
    h: int
    t: int

    def __post_init__(self) -> None:
        for name in ("g", "a", "h", "t"):
            object.__setattr__(self, name, _positive("dragonfly", name, getattr(self, name)))
        most = self.a * self.h + 1
        if self.g > most:
            raise ValueError(
                f"dragonfly: g={self.g} groups need {self.g - 1} global links per group, but a group has "
                f"a*h = {self.a}*{self.h} = {self.a * self.h}: at most {most} groups"
            )

    # ---- sizes

    @property
    def nodes(self) -> int:
        return self.g * self.a * self.t

    @property
    def per_group(self) -> int:
        """Nodes per group."""
        return self.a * self.t

    @property
    def links_per_pair(self) -> int:
        """Global links between every pair of groups (m); 0 with a single group."""
        return (self.a * self.h) // (self.g - 1) if self.g > 1 else 0

    @property
    def _local0(self) -> int:
        return 2 * self.nodes

    @property
    def _global0(self) -> int:
        return self._local0 + self.g * self.a * (self.a - 1)

    @property
    def num_links(self) -> int:
        return self._global0 + self.g * self.links_per_pair * (self.g - 1)

    @property
    def ports(self) -> int:
        return 1

    @property
    def spec(self) -> str:
        text = f"dragonfly:h={self.h}"
        if self.g != self.a * self.h + 1:
            text += f",g={self.g}"
        if self.a != 2 * self.h:
            text += f",a={self.a}"
        if self.t != self.h:
            text += f",t={self.t}"
        return text

    def __str__(self) -> str:
        return self.spec

    # ---- links

    @property
    def global_what(self) -> str:
        """What the global links are, in words."""
        return "links between groups"

    def global_links(self) -> np.ndarray:
        """Which links are global (between groups), one bool per link index."""
        mask = np.zeros(self.num_links, dtype=bool)
        mask[self._global0 :] = True
        return mask

    def _other(self, group: np.ndarray, peer: np.ndarray) -> np.ndarray:
        """The index j of group ``peer`` among the other groups of ``group`` (increasing, itself skipped)."""
        return peer - (peer > group)

    def global_port(self, group: np.ndarray, peer: np.ndarray, copy: np.ndarray) -> np.ndarray:
        """The port of ``group`` whose global link, copy ``copy``, leads to ``peer``."""
        return copy * (self.g - 1) + self._other(group, peer)

    def local_link(self, group: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """The index of the local link from router i to router j (i != j) of ``group``."""
        a = self.a
        return self._local0 + group * a * (a - 1) + i * (a - 1) + j - (j > i)

    def link_vertices(self, links: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(tail, head) of each link in a graph whose vertices are the nodes ``0 .. N-1`` and the
        routers ``N + R`` (R = ``group*a + i``, the router ``r // t`` of node r)."""
        lk = np.asarray(links, dtype=_I64).ravel()
        n, a, t = self.nodes, self.a, self.t
        tail = np.zeros(lk.size, dtype=_I64)
        head = np.zeros(lk.size, dtype=_I64)
        inj = lk < n
        tail[inj], head[inj] = lk[inj], n + lk[inj] // t
        ej = (lk >= n) & (lk < 2 * n)
        tail[ej], head[ej] = n + (lk[ej] - n) // t, lk[ej] - n
        loc = (lk >= self._local0) & (lk < self._global0)
        rest = lk[loc] - self._local0
        group, rest = rest // (a * (a - 1)), rest % (a * (a - 1))
        i, j = rest // (a - 1), rest % (a - 1)
        j = j + (j >= i)
        tail[loc], head[loc] = n + group * a + i, n + group * a + j
        glb = lk >= self._global0
        if glb.any():
            per = self.links_per_pair * (self.g - 1)
            rest = lk[glb] - self._global0
            group, k = rest // per, rest % per
            j, copy = k % (self.g - 1), k // (self.g - 1)
            peer = j + (j >= group)
            back = self.global_port(peer, group, copy)
            tail[glb] = n + group * a + k // self.h
            head[glb] = n + peer * a + back // self.h
        return tail, head

    def link_ends(self, links: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(tail node, head node) of each link, -1 for a router end."""
        tail, head = self.link_vertices(links)
        n = self.nodes
        return np.where(tail < n, tail, -1), np.where(head < n, head, -1)

    # ---- routing

    def route(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Routes:
        s, d = _nodes_arrays(self.nodes, src, dst)
        n, a, t, h = self.nodes, self.a, self.t, self.h
        hops = np.zeros(s.size, dtype=_I64)
        moving = np.flatnonzero(s != d)
        rs, rd = s[moving] // t, d[moving] // t  # routers
        gs, gd = rs // a, rd // a
        is_, id_ = rs % a, rd % a
        same_router = rs == rd
        same_group = (gs == gd) & ~same_router
        between = gs != gd
        msgs: list[np.ndarray] = [moving]
        links: list[np.ndarray] = [s[moving]]
        weights: list[np.ndarray] = [np.ones(moving.size)]
        hops[moving] = 2
        # inside a group: one local link
        sg = np.flatnonzero(same_group)
        msgs.append(moving[sg])
        links.append(self.local_link(gs[sg], is_[sg], id_[sg]))
        weights.append(np.ones(sg.size))
        hops[moving[sg]] += 1
        # between groups: [local], global, [local] on the copies with the fewest hops
        bg = np.flatnonzero(between)
        if bg.size:
            m = self.links_per_pair
            copies = np.arange(m, dtype=_I64)[None, :]
            g0, g1 = gs[bg, None], gd[bg, None]
            ports = self.global_port(g0, g1, copies)
            backs = self.global_port(g1, g0, copies)
            out_router, in_router = ports // h, backs // h
            extra = (out_router != is_[bg, None]).astype(_I64) + (in_router != id_[bg, None])
            fewest = extra.min(axis=1)
            best = extra == fewest[:, None]
            if adaptive:
                take = best
            else:  # the first best copy from (src + dst) mod m on
                start = ((s[moving[bg]] + d[moving[bg]]) % m)[:, None]
                order = np.where(best, (copies - start) % m, m)
                take = np.zeros_like(best)
                take[np.arange(bg.size), order.argmin(axis=1)] = True
            row, col = np.nonzero(take)
            share = 1.0 / take.sum(axis=1)[row]
            msg = moving[bg][row]
            g0, g1 = gs[bg][row], gd[bg][row]
            i0, i1 = is_[bg][row], id_[bg][row]
            o, q = out_router[row, col], in_router[row, col]
            first, last = o != i0, q != i1
            msgs += [msg[first], msg, msg[last]]
            links += [
                self.local_link(g0[first], i0[first], o[first]),
                self._global0 + g0 * m * (self.g - 1) + ports[row, col],
                self.local_link(g1[last], q[last], i1[last]),
            ]
            weights += [share[first], share, share[last]]
            hops[moving[bg]] += 1 + fewest
        msgs.append(moving)
        links.append(n + d[moving])
        weights.append(np.ones(moving.size))
        cat = np.concatenate
        return Routes(hops, cat(msgs), cat(links), cat(weights))

    def route_intervals(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Intervals:
        return intervals_of(self.route(src, dst, adaptive))


# --------------------------------------------------------------------------
# Oversubscribed fat tree
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class TaperedFatTree(_Named):
    """`collc.topology.FatTree`'s tree with its switch links modelled as trunks of ``1/oversub`` of
    the bandwidth below them (see the module docstring)."""

    p: int
    radix: int = 64
    oversub: float = 1.0

    def __post_init__(self) -> None:
        FatTree(self.p, self.radix)  # the same checks of p and radix
        x = self.oversub
        if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) or not math.isfinite(x):
            raise ValueError(f"fattree: oversub must be a number >= 1, got {x!r}")
        if x < 1:
            raise ValueError(f"fattree: oversub must be at least 1 (uplinks at 1/oversub of the bandwidth), got {x:g}")
        object.__setattr__(self, "p", int(self.p))
        object.__setattr__(self, "radix", int(self.radix))
        object.__setattr__(self, "oversub", float(x))

    @property
    def nodes(self) -> int:
        return self.p

    @property
    def ports(self) -> int:
        return 1

    @property
    def levels(self) -> int:
        """Switch levels (as `FatTree.levels`)."""
        return FatTree(self.p, self.radix).levels

    @property
    def _h(self) -> int:
        return self.radix // 2

    def subtrees(self, level: int) -> int:
        """Subtrees (switches' spans) at ``level``: ``ceil(p / h**level)``."""
        return -(-self.p // self._h**level)

    def _trunk0(self, level: int) -> int:
        """The index of the first up trunk of ``level`` (its down trunks follow its up trunks)."""
        return 2 * self.p + sum(2 * self.subtrees(k) for k in range(1, level))

    @property
    def num_links(self) -> int:
        return self._trunk0(self.levels)

    @property
    def spec(self) -> str:
        return f"fattree:{self.p},radix={self.radix},oversub={self.oversub:g}"

    def __str__(self) -> str:
        return self.spec

    @property
    def global_what(self) -> str:
        """What the global links are, in words."""
        return "links above the leaf switches"

    def global_links(self) -> np.ndarray:
        """Which links are global (above the leaf switches), one bool per link index."""
        mask = np.zeros(self.num_links, dtype=bool)
        mask[2 * self.p :] = True
        return mask

    def link_bandwidths(self, link_bandwidth: float) -> np.ndarray:
        """Injection and ejection links at ``link_bandwidth``; a level-l trunk ``h**l`` times it over ``oversub``."""
        bw = np.full(self.num_links, float(link_bandwidth))
        for level in range(1, self.levels):
            lo = self._trunk0(level)
            bw[lo : lo + 2 * self.subtrees(level)] = self._h**level * float(link_bandwidth) / self.oversub
        return bw

    def link_ends(self, links: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(tail node, head node) of each link, -1 for a switch end."""
        lk = np.asarray(links, dtype=_I64).ravel()
        p = self.p
        return np.where(lk < p, lk, -1), np.where((lk >= p) & (lk < 2 * p), lk - p, -1)

    def route(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Routes:
        s, d = _nodes_arrays(self.nodes, src, dst)
        h = self._h
        level = np.zeros(s.size, dtype=_I64)
        x, y = s.copy(), d.copy()
        pending = x != y
        while pending.any():
            level += pending
            x //= h
            y //= h
            pending = x != y
        idx = np.flatnonzero(level > 0)
        msgs, links = [idx], [s[idx]]
        top = int(level.max()) if level.size else 0
        for lv in range(1, top):  # up trunks, lowest first
            up = idx[level[idx] > lv]
            msgs.append(up)
            links.append(self._trunk0(lv) + s[up] // h**lv)
        for lv in range(top - 1, 0, -1):  # down trunks, highest first
            down = idx[level[idx] > lv]
            msgs.append(down)
            links.append(self._trunk0(lv) + self.subtrees(lv) + d[down] // h**lv)
        msgs.append(idx)
        links.append(self.p + d[idx])
        msg = np.concatenate(msgs)
        return Routes(2 * level, msg, np.concatenate(links), np.ones(msg.size))

    def route_intervals(self, src: np.ndarray, dst: np.ndarray, adaptive: bool = False) -> Intervals:
        return intervals_of(self.route(src, dst, adaptive))


# --------------------------------------------------------------------------
# Global links of any topology
# --------------------------------------------------------------------------


def global_link_mask(topology: Topology) -> np.ndarray | None:
    """Which of ``topology``'s links are global (one bool per link index), or None where it has none
    (a torus, HyperX, the non-blocking fat tree, a fully connected network).  On nodes of several
    ranks (`collc.hierarchy.Hierarchical`) the network's global links, at their offset."""
    own = getattr(topology, "global_links", None)
    if callable(own):
        return np.asarray(own(), dtype=bool)
    network = getattr(topology, "network", None)
    offset = getattr(topology, "network_offset", None)
    if network is None or offset is None:
        return None
    inner = global_link_mask(network)
    if inner is None or topology.num_links != offset + inner.size:
        return None
    return np.concatenate((np.zeros(offset, dtype=bool), inner))


# --------------------------------------------------------------------------
# Text forms
# --------------------------------------------------------------------------


def _options(kind: str, text: str, allowed: tuple[str, ...]) -> dict[str, str]:
    """``name=value`` items separated by commas, each name once and one of ``allowed``."""
    out: dict[str, str] = {}
    for item in text.split(","):
        item = item.strip()
        match = re.fullmatch(r"([A-Za-z_]+)\s*=\s*(\S+)", item)
        if match is None:
            raise ValueError(f"{kind}: expected NAME=VALUE, got {item!r} (options: {', '.join(allowed)})")
        name, value = match.group(1).lower(), match.group(2)
        if name not in allowed:
            raise ValueError(f"{kind}: unknown option {name!r} (options: {', '.join(allowed)})")
        if name in out:
            raise ValueError(f"{kind}: option {name} given twice")
        out[name] = value
    return out


def _int_option(kind: str, name: str, text: str) -> int:
    if not re.fullmatch(r"\d+", text) or int(text) < 1:
        raise ValueError(f"{kind}: {name} must be a positive integer, got {text!r}")
    return int(text)


def parse_dragonfly(text: str) -> Dragonfly:
    """A Dragonfly from the text after ``dragonfly:``: ``h=H[,g=G][,a=A][,t=T]``, defaults
    ``a = 2h``, ``t = h``, ``g = a*h + 1``."""
    kind = "dragonfly"
    if not text.strip():
        raise ValueError(f"{kind}: missing h, the global links per router (e.g. dragonfly:h=4 or dragonfly:h=4,g=8)")
    opts = {k: _int_option(kind, k, v) for k, v in _options(kind, text, ("g", "a", "h", "t")).items()}
    if "h" not in opts:
        raise ValueError(f"{kind}: missing h, the global links per router (e.g. dragonfly:h=4 or dragonfly:h=4,g=8)")
    h = opts["h"]
    a = opts.get("a", 2 * h)
    return Dragonfly(opts.get("g", a * h + 1), a, h, opts.get("t", h))


def parse_fattree(p: int, text: str | None) -> FatTree | TaperedFatTree:
    """A fat tree of ``p`` nodes from its options (the text after ``fattree:P,``): ``radix=K`` and
    ``oversub=X``; without ``oversub`` the non-blocking `FatTree`, with it a `TaperedFatTree`."""
    kind = "fattree"
    if text is None:
        return FatTree(p)
    opts = _options(kind, text, ("radix", "oversub"))
    radix = _int_option(kind, "the radix", opts["radix"]) if "radix" in opts else 64
    if "oversub" not in opts:
        return FatTree(p, radix)
    value = opts["oversub"]
    if not re.fullmatch(r"\d+(?:\.\d+)?", value):
        raise ValueError(f"{kind}: oversub must be a number >= 1 (e.g. oversub=4), got {value!r}")
    return TaperedFatTree(p, radix, float(value))
