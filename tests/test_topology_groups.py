"""The Dragonfly and the oversubscribed fat tree (collc.topology_groups) and the traffic statistic.

Dragonfly routes are checked against a link graph built here from the definition (consecutive
global ports), by brute-force BFS and by walking every route link by link; global-link bytes and
times against hand-computed values on tiny networks.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, deque

import numpy as np
import pytest
from click.testing import CliRunner

from collc.cli import main
from collc.hierarchy import Hierarchical, parse_node
from collc.ir import UNKNOWN_SPAN, Action, ChunkSet, Collective, OpKind, Schedule, Step, make_op
from collc.simulate import NetworkModel, simulate, traffic
from collc.topologies import parse_topology
from collc.topology import FatTree
from collc.topology_groups import Dragonfly, TaperedFatTree, global_link_mask

BW = 50e9
PER_HOP = 400e-9
OVERHEAD = 0.48e-6

# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def dragonfly_edges(g: int, a: int, h: int, t: int) -> list[tuple[int, int]]:
    """Every directed link of the Dragonfly, from its definition: vertices are the nodes, then the
    routers (N + group*a + i); global port k of a group is on router k // h and leads to its
    (k mod (g-1))-th other group, copy k // (g-1), m = a*h // (g-1) copies per pair."""
    n = g * a * t
    edges = []
    for r in range(n):
        edges += [(r, n + r // t), (n + r // t, r)]
    for group in range(g):
        for i in range(a):
            for j in range(a):
                if i != j:
                    edges.append((n + group * a + i, n + group * a + j))
    if g > 1:
        m = a * h // (g - 1)
        others = {group: [x for x in range(g) if x != group] for group in range(g)}
        for group in range(g):
            for k in range(m * (g - 1)):
                peer, copy = others[group][k % (g - 1)], k // (g - 1)
                back = copy * (g - 1) + others[peer].index(group)
                edges.append((n + group * a + k // h, n + peer * a + back // h))
    return edges


def bfs(adjacent: dict[int, set[int]], is_global: set[tuple[int, int]], start: int) -> dict[int, int]:
    """Hop distances from ``start`` over paths with at most one global link (Dragonfly minimal routing:
    a path through two global links can have fewer hops, and is not minimal in that sense)."""
    dist = {(start, 0): 0}
    queue = deque([(start, 0)])
    while queue:
        u, used = queue.popleft()
        for v in adjacent.get(u, ()):
            state = (v, used + ((u, v) in is_global))
            if state[1] <= 1 and state not in dist:
                dist[state] = dist[(u, used)] + 1
                queue.append(state)
    best: dict[int, int] = {}
    for (v, _), d in dist.items():
        best[v] = min(best.get(v, d), d)
    return best


def swap(nranks: int, a: int, b: int, collective: Collective = Collective.ALLREDUCE) -> Schedule:
    """One step: ranks a and b send each other chunk 0 (the whole vector)."""
    chunks = ChunkSet.of([0])
    ops = (
        make_op(a, OpKind.SEND, b, chunks, None, UNKNOWN_SPAN),
        make_op(a, OpKind.RECV, b, chunks, Action.REDUCE, UNKNOWN_SPAN),
        make_op(b, OpKind.SEND, a, chunks, None, UNKNOWN_SPAN),
        make_op(b, OpKind.RECV, a, chunks, Action.REDUCE, UNKNOWN_SPAN),
    )
    return Schedule("swap", collective, (("p", nranks),), nranks, 1, None, (Step(0, "x", ops),), "<test>", UNKNOWN_SPAN)


def sends(nranks: int, pairs: list[tuple[int, int]]) -> Schedule:
    """One step: every (src, dst) sends chunk 0."""
    chunks = ChunkSet.of([0])
    ops = [make_op(s, OpKind.SEND, d, chunks, None, UNKNOWN_SPAN) for s, d in pairs]
    ops += [make_op(d, OpKind.RECV, s, chunks, Action.COPY, UNKNOWN_SPAN) for s, d in pairs]
    return Schedule("sends", Collective.ALLREDUCE, (("p", nranks),), nranks, 1, None, (Step(0, "x", tuple(ops)),),
                    "<test>", UNKNOWN_SPAN)  # fmt: skip


DRAGONFLIES = [(9, 4, 2, 2), (5, 4, 2, 2), (3, 3, 1, 2), (3, 2, 1, 1), (1, 3, 1, 2), (4, 2, 3, 1)]


# --------------------------------------------------------------------------
# Dragonfly
# --------------------------------------------------------------------------


@pytest.mark.parametrize(("g", "a", "h", "t"), DRAGONFLIES)
def test_dragonfly_links_match_the_definition(g: int, a: int, h: int, t: int) -> None:
    topo = Dragonfly(g, a, h, t)
    n, m = g * a * t, (a * h // (g - 1) if g > 1 else 0)
    assert topo.nodes == n
    assert topo.num_links == 2 * n + g * a * (a - 1) + g * m * (g - 1)
    tail, head = topo.link_vertices(np.arange(topo.num_links))
    assert Counter(zip(tail.tolist(), head.tolist(), strict=True)) == Counter(dragonfly_edges(g, a, h, t))
    mask = topo.global_links()
    assert int(mask.sum()) == g * m * (g - 1)
    groups_of = (
        np.where(tail < n, tail // (a * t), (tail - n) // a),
        np.where(head < n, head // (a * t), (head - n) // a),
    )
    assert ((groups_of[0] != groups_of[1]) == mask).all()  # global exactly where the groups differ


@pytest.mark.parametrize(("g", "a", "h", "t"), DRAGONFLIES)
@pytest.mark.parametrize("adaptive", [False, True])
def test_dragonfly_routes_are_minimal_paths(g: int, a: int, h: int, t: int, adaptive: bool) -> None:
    topo = Dragonfly(g, a, h, t)
    n = topo.nodes
    adjacent: dict[int, set[int]] = {}
    is_global = set()
    for u, v in dragonfly_edges(g, a, h, t):
        adjacent.setdefault(u, set()).add(v)
        if u >= n and v >= n and (u - n) // a != (v - n) // a:
            is_global.add((u, v))
    src, dst = (x.ravel() for x in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
    routes = topo.route(src, dst, adaptive=adaptive)
    for s in range(n):
        dist = bfs(adjacent, is_global, s)
        assert [int(x) for x in routes.hops[s * n : (s + 1) * n]] == [dist[d] for d in range(n)]
    tail, head = topo.link_vertices(routes.link)
    mask = topo.global_links()
    for i in range(src.size):
        sel = routes.msg == i
        w = routes.weight[sel]
        # every link's share: the hops in all, one global link in all between groups
        assert w.sum() == pytest.approx(routes.hops[i])
        between = src[i] // (a * t) != dst[i] // (a * t)
        assert w[mask[routes.link[sel]]].sum() == pytest.approx(1.0 if between else 0.0)
        if not adaptive:  # a single path, in order
            assert (w == 1).all()
            path = list(zip(tail[sel].tolist(), head[sel].tolist(), strict=True))
            if src[i] == dst[i]:
                assert path == []
                continue
            assert path[0][0] == src[i] and path[-1][1] == dst[i]
            assert all(x[1] == y[0] for x, y in itertools.pairwise(path))


def test_dragonfly_adaptive_spreads_over_parallel_global_links() -> None:
    topo = Dragonfly(3, 2, 2, 1)  # 4 global ports per group, two links per pair of groups
    assert topo.links_per_pair == 2
    routes = topo.route(np.array([0]), np.array([2]), adaptive=True)  # router 0 of group 0 to group 1
    glob = routes.link[topo.global_links()[routes.link]]
    assert glob.size == 1  # both copies leave from router 0 (ports 0, 1 are on it), one is minimal
    # router 1 of group 0 to router 0 of group 2: each copy needs one local hop, so both are minimal
    routes = topo.route(np.array([1]), np.array([4]), adaptive=True)
    on_global = topo.global_links()[routes.link]
    assert routes.weight[on_global].tolist() == [0.5, 0.5] and np.unique(routes.link[on_global]).size == 2
    assert routes.hops.tolist() == [4] and routes.weight.sum() == 4
    single = topo.route(np.array([1]), np.array([4]), adaptive=False)
    assert single.weight.tolist() == [1.0] * 4


def test_dragonfly_global_bytes_of_a_swap() -> None:
    topo = parse_topology("dragonfly:h=1")  # a=2, t=1, g=3: 6 nodes, one link per pair of groups
    assert isinstance(topo, Dragonfly) and (topo.g, topo.a, topo.t) == (3, 2, 1)
    size = 4096
    (row,) = traffic(swap(6, 0, 2), topo, [size])  # node 0 in group 0, node 2 in group 1
    assert row.global_bytes == 2 * size and row.sent_bytes == 2 * size and row.global_share == 1.0
    (row,) = traffic(swap(6, 0, 1), topo, [size])  # one group
    assert row.global_bytes == 0 and row.link_bytes == 2 * 3 * size  # injection, local, ejection
    # per direction: one global link carries N
    routes = topo.route(np.array([0, 2]), np.array([2, 0]))
    on_global = routes.link[topo.global_links()[routes.link]]
    assert sorted(routes.msg[topo.global_links()[routes.link]].tolist()) == [0, 1] and np.unique(on_global).size == 2
    sim = simulate(swap(6, 0, 2), topo, [size], NetworkModel(), traffic=True)
    assert sim.rows[0].traffic == traffic(swap(6, 0, 2), topo, [size])[0]
    assert simulate(swap(6, 0, 2), topo, [size]).rows[0].traffic is None


def test_dragonfly_spec_defaults_and_text() -> None:
    assert parse_topology("dragonfly:h=4,g=8") == Dragonfly(8, 8, 4, 4)
    assert parse_topology("dragonfly:h=2") == Dragonfly(9, 4, 2, 2)
    assert parse_topology("dragonfly:g=4, a=3, h=1, t=5") == Dragonfly(4, 3, 1, 5)
    for topo in (Dragonfly(8, 8, 4, 4), Dragonfly(4, 3, 1, 5), Dragonfly(9, 4, 2, 2)):
        assert parse_topology(topo.spec) == topo
    assert parse_topology("dragonfly:h=4,g=8").nodes == 256


# --------------------------------------------------------------------------
# Oversubscribed fat tree
# --------------------------------------------------------------------------


def test_tapered_fat_tree_links_hops_and_bandwidths() -> None:
    topo = parse_topology("fattree:8,radix=4,oversub=2")  # 2 nodes per leaf, 3 levels
    assert isinstance(topo, TaperedFatTree) and topo.levels == 3
    assert topo.num_links == 2 * 8 + 2 * 4 + 2 * 2  # injection/ejection, level-1 and level-2 trunks
    bw = topo.link_bandwidths(BW)
    assert bw[:16].tolist() == [BW] * 16
    assert bw[16:24].tolist() == [2 * BW / 2] * 8 and bw[24:].tolist() == [4 * BW / 2] * 4
    src, dst = (x.ravel() for x in np.meshgrid(np.arange(8), np.arange(8), indexing="ij"))
    assert (topo.route(src, dst).hops == FatTree(8, 4).route(src, dst).hops).all()
    sizes = 4096
    for b, crossings in ((1, 0), (2, 2), (7, 4)):  # lowest common level 1, 2, 3
        (row,) = traffic(swap(8, 0, b), topo, [sizes])
        assert row.global_bytes == 2 * crossings * sizes
        assert row.link_bytes == 2 * (2 + crossings) * sizes


@pytest.mark.parametrize(("oversub", "busiest"), [(4.0, 4), (2.0, 2), (1.0, 1)])
def test_tapered_fat_tree_time_of_leaf_uplinks(oversub: float, busiest: int) -> None:
    topo = TaperedFatTree(8, 8, oversub)  # 4 nodes per leaf; a leaf's uplinks carry 4 * BW / oversub
    size = 1 << 20
    sim = simulate(sends(8, [(i, i + 4) for i in range(4)]), topo, [size])
    expect = OVERHEAD + 4 * PER_HOP + max(busiest, 1) * size / BW
    assert sim.rows[0].time_s == pytest.approx(expect)
    dataflow = simulate(sends(8, [(i, i + 4) for i in range(4)]), topo, [size], NetworkModel(execution="dataflow"))
    assert dataflow.rows[0].time_s >= size / BW


def test_fat_tree_without_oversub_is_unchanged() -> None:
    assert parse_topology("fattree:64,radix=16") == FatTree(64, 16)
    assert parse_topology("fattree:64") == FatTree(64)
    assert parse_topology("fattree:256,radix=32,oversub=4") == TaperedFatTree(256, 32, 4.0)
    assert parse_topology("fattree:256,oversub=1.5").spec == "fattree:256,radix=64,oversub=1.5"


# --------------------------------------------------------------------------
# Global links elsewhere, bad specs, the CLI
# --------------------------------------------------------------------------


def test_global_link_mask_of_other_topologies() -> None:
    for spec in ("torus:4x4", "fattree:16", "full:4", "hyperx:2x2"):
        assert global_link_mask(parse_topology(spec)) is None
    (row,) = traffic(swap(16, 0, 5), parse_topology("torus:4x4"), [64])
    assert row.global_bytes is None and row.global_share is None and row.sent_bytes == 128
    nested = Hierarchical(parse_topology("dragonfly:h=1"), parse_node("nvlink:2"))
    mask = global_link_mask(nested)
    assert mask is not None and mask.size == nested.num_links and int(mask.sum()) == 6
    (row,) = traffic(swap(12, 0, 4), nested, [64])  # node 0 (group 0) and node 2 (group 1)
    assert row.global_bytes == 128


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("dragonfly:", "missing h"),
        ("dragonfly:g=8", "missing h"),
        ("dragonfly:h=2,g=10", "at most 9 groups"),
        ("dragonfly:h=0", "h must be a positive integer"),
        ("dragonfly:h=2,a=x", "a must be a positive integer"),
        ("dragonfly:h=2,x=3", "unknown option 'x'"),
        ("dragonfly:h=2,h=3", "given twice"),
        ("dragonfly:h=2,a", "expected NAME=VALUE"),
        ("fattree:64,oversub=0.5", "at least 1"),
        ("fattree:64,oversub=abc", "oversub must be a number"),
        ("fattree:64,radix=16,foo=1", "unknown option 'foo'"),
        ("fattree:64,radix=5,oversub=2", "even integer >= 4"),
        ("fattree:64,radix=0", "radix must be a positive integer"),
    ],
)
def test_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_topology(spec)


def test_route_rejects_nodes_outside() -> None:
    with pytest.raises(ValueError, match="outside"):
        Dragonfly(3, 2, 1, 1).route(np.array([0]), np.array([6]))


def test_cli_traffic() -> None:
    runner = CliRunner()
    args = ["sim", "binomial_broadcast", "--topology", "dragonfly:h=1", "--sizes", "1KiB", "--no-check"]
    out = runner.invoke(main, [*args, "--traffic"])
    assert out.exit_code == 0, out.output
    assert "# bytes on global links (links between groups)" in out.output
    out = runner.invoke(main, [*args, "--traffic", "--json"])
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.output)
    # 0 -> 1 in group 0, then 0 -> 2 and 1 -> 3 into group 1, then 0 -> 4 and 1 -> 5 into group 2
    assert row["global_bytes"] == 4 * 1024 and row["sent_bytes"] == 5 * 1024
    out = runner.invoke(main, [*args[:3], "torus:2x3", *args[4:], "--traffic"])
    assert out.exit_code == 2 and "no global links" in out.output
