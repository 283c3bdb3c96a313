"""Topologies and the flow-level simulator, against independent references.

Routes are checked against brute-force BFS distances and walked link by link; link
loads are checked for conservation and against the paper's Fig. 1 counts; simulated
times against hand-computed ones and against a brute-force re-implementation of the
cost model (element counts summed chunk by chunk, loads summed triple by triple).
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np
import pytest

import collc
from collc.codecs import parse_codec
from collc.collectives import element_offsets
from collc.ir import UNKNOWN_SPAN, Action, ChunkSet, Collective, Op, OpKind, Schedule, Step, make_op
from collc.simulate import (
    STEP_OVERHEAD,
    NetworkModel,
    congestion_deficiency,
    link_message_counts,
    simulate,
)
from collc.topologies import parse_topology
from collc.topology import FatTree, FullyConnected, HyperX, Torus

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PER_HOP = 100e-9 + 300e-9
BW = 50e9

# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def schedule(
    nranks: int,
    nchunks: int,
    steps: list[list[Op]],
    collective: Collective = Collective.ALLREDUCE,
) -> Schedule:
    return Schedule(
        algorithm="test",
        collective=collective,
        params=(("p", nranks),),
        nranks=nranks,
        nchunks=nchunks,
        root=None,
        steps=tuple(Step(i, f"phase{i % 2}", tuple(ops)) for i, ops in enumerate(steps)),
        source="<test>",
        span=UNKNOWN_SPAN,
    )


def exchange(a: int, b: int, chunks: ChunkSet, codec: str | None = None) -> list[Op]:
    """Both directions of a swap of ``chunks`` between ranks a and b."""
    return [
        make_op(a, OpKind.SEND, b, chunks, None, UNKNOWN_SPAN, codec),
        make_op(a, OpKind.RECV, b, chunks, Action.REDUCE, UNKNOWN_SPAN, codec),
        make_op(b, OpKind.SEND, a, chunks, None, UNKNOWN_SPAN, codec),
        make_op(b, OpKind.RECV, a, chunks, Action.REDUCE, UNKNOWN_SPAN, codec),
    ]


def neighbours_torus(dims: tuple[int, ...], node: int) -> set[int]:
    c = np.unravel_index(node, dims)
    out = set()
    for k, d in enumerate(dims):
        for delta in (1, -1):
            if d > 1:
                n = list(c)
                n[k] = (n[k] + delta) % d
                out.add(int(np.ravel_multi_index(n, dims)))
    return out


def neighbours_hyperx(dims: tuple[int, ...], node: int) -> set[int]:
    c = np.unravel_index(node, dims)
    out = set()
    for k, d in enumerate(dims):
        for t in range(d):
            if t != c[k]:
                n = list(c)
                n[k] = t
                out.add(int(np.ravel_multi_index(n, dims)))
    return out


def bfs_distances(nodes: int, neighbours) -> np.ndarray:
    dist = np.full((nodes, nodes), -1, dtype=np.int64)
    for s in range(nodes):
        dist[s, s] = 0
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for v in neighbours(u):
                if dist[s, v] < 0:
                    dist[s, v] = dist[s, u] + 1
                    queue.append(v)
    return dist


def all_pairs(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    src, dst = np.meshgrid(np.arange(nodes), np.arange(nodes), indexing="ij")
    return src.ravel(), dst.ravel()


TORI = [(16,), (7,), (2,), (1,), (4, 4), (3, 5), (2, 6), (1, 4), (2, 2, 2), (3, 1, 4)]
HYPERX = [(4,), (3, 4), (2, 3, 2)]

# --------------------------------------------------------------------------
# Topologies
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ring:16", Torus((16,))),
        ("torus:64x64", Torus((64, 64))),
        ("torus:4x4x4", Torus((4, 4, 4))),
        ("hyperx:8x8", HyperX((8, 8))),
        ("fattree:256", FatTree(256)),
        ("fattree:256,radix=16", FatTree(256, 16)),
        ("full:16", FullyConnected(16)),
        (" Torus : 2x3 ", Torus((2, 3))),
    ],
)
def test_parse_topology(text: str, expected: object) -> None:
    topo = parse_topology(text)
    assert topo == expected
    assert parse_topology(topo.spec) == topo


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mesh:4", "unknown topology kind 'mesh'"),
        ("torus", "expected one of"),
        ("torus:", "missing dimensions"),
        ("torus:4x0", "at least 1"),
        ("torus:4xa", "positive integer"),
        ("ring:-3", "positive integer"),
        ("fattree:64,radix=5", "even integer >= 4"),
        ("fattree:64,k=4", "unknown option"),
        ("ring:8,radix=4", "takes no options"),
    ],
)
def test_parse_topology_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_topology(text)


def test_ports_and_peak_bandwidth() -> None:
    # the paper's peak allreduce goodput on a D-dimensional torus is D x the link bandwidth
    assert parse_topology("torus:64x64").peak_bandwidth(50e9) == 100e9
    assert parse_topology("torus:4x4x4").peak_bandwidth(50e9) == 150e9
    assert parse_topology("ring:16").peak_bandwidth(50e9) == 50e9
    assert [parse_topology(t).ports for t in ("torus:2x1x3", "hyperx:4x3", "fattree:8", "full:5")] == [4, 5, 1, 4]
    assert parse_topology("hyperx:8x8").name == "hyperx:8x8"


def test_torus_coordinates_are_row_major_last_fastest() -> None:
    topo = Torus((3, 4, 5))
    nodes = np.arange(topo.nodes)
    expected = np.stack(np.unravel_index(nodes, (3, 4, 5)), axis=1)
    assert (topo.coords(nodes) == expected).all()
    assert (topo.node_of(expected) == nodes).all()
    # the language's coords builtin agrees
    from collc.values import _coords

    assert all(tuple(topo.coords(np.array([r]))[0]) == _coords(r, (3, 4, 5)) for r in range(0, 60, 7))


@pytest.mark.parametrize("dims", TORI)
@pytest.mark.parametrize("adaptive", [False, True])
def test_torus_hops_are_bfs_distances(dims: tuple[int, ...], adaptive: bool) -> None:
    topo = Torus(dims)
    dist = bfs_distances(topo.nodes, lambda u: neighbours_torus(dims, u))
    src, dst = all_pairs(topo.nodes)
    assert (topo.route(src, dst, adaptive).hops == dist[src, dst]).all()
    assert (topo.route_intervals(src, dst, adaptive).hops == dist[src, dst]).all()


@pytest.mark.parametrize("dims", HYPERX)
@pytest.mark.parametrize("adaptive", [False, True])
def test_hyperx_hops_are_bfs_distances(dims: tuple[int, ...], adaptive: bool) -> None:
    topo = HyperX(dims)
    dist = bfs_distances(topo.nodes, lambda u: neighbours_hyperx(dims, u))
    src, dst = all_pairs(topo.nodes)
    assert (topo.route(src, dst, adaptive).hops == dist[src, dst]).all()


def walk_ok(topo, src: np.ndarray, dst: np.ndarray, neighbours) -> None:
    """Deterministic routes: each message's links, in order, walk from src to dst over real links."""
    routes = topo.route(src, dst)
    assert (routes.weight == 1).all()
    tail, head = topo.link_ends(routes.link)
    for i in range(src.size):
        sel = np.flatnonzero(routes.msg == i)
        assert sel.size == routes.hops[i]
        at = int(src[i])
        for j in sel:
            assert tail[j] == at
            assert head[j] in neighbours(at)
            at = int(head[j])
        assert at == dst[i]


@pytest.mark.parametrize("dims", [(8,), (4, 4), (2, 3), (3, 1, 4), (2, 2, 2)])
def test_torus_routes_walk_from_src_to_dst(dims: tuple[int, ...]) -> None:
    topo = Torus(dims)
    walk_ok(topo, *all_pairs(topo.nodes), lambda u: neighbours_torus(dims, u))


@pytest.mark.parametrize("dims", HYPERX)
def test_hyperx_routes_walk_from_src_to_dst(dims: tuple[int, ...]) -> None:
    topo = HyperX(dims)
    walk_ok(topo, *all_pairs(topo.nodes), lambda u: neighbours_hyperx(dims, u))


def test_full_routes_walk() -> None:
    topo = FullyConnected(5)
    walk_ok(topo, *all_pairs(5), lambda u: set(range(5)) - {u})


@pytest.mark.parametrize(
    "topo", [Torus((4, 4)), Torus((6, 5)), Torus((2, 2, 4)), Torus((8,)), HyperX((3, 4)), HyperX((2, 2, 3))]
)
def test_adaptive_routes_are_unit_flows(topo) -> None:
    """Every adaptive route is a unit flow from src to dst: conservation at every node, total weight = hops."""
    src, dst = all_pairs(topo.nodes)
    routes = topo.route(src, dst, adaptive=True)
    tail, head = topo.link_ends(routes.link)
    n = topo.nodes
    net = np.zeros((src.size, n))
    np.add.at(net, (routes.msg, tail), routes.weight)
    np.add.at(net, (routes.msg, head), -routes.weight)
    expected = np.zeros((src.size, n))
    moving = src != dst
    expected[np.flatnonzero(moving), src[moving]] += 1
    expected[np.flatnonzero(moving), dst[moving]] -= 1
    assert np.allclose(net, expected)
    per_msg = np.bincount(routes.msg, weights=routes.weight, minlength=src.size)
    assert np.allclose(per_msg, routes.hops)


def test_torus_tie_goes_plus_way_and_adaptive_splits() -> None:
    ring = Torus((8,))
    routes = ring.route(np.array([0]), np.array([4]))
    assert ring.link_ends(routes.link)[1].tolist() == [1, 2, 3, 4]
    adaptive = ring.route(np.array([0]), np.array([4]), adaptive=True)
    heads = dict(zip(ring.link_ends(adaptive.link)[1].tolist(), adaptive.weight.tolist(), strict=True))
    assert heads == {1: 0.5, 2: 0.5, 3: 0.5, 4: 0.5, 7: 0.5, 6: 0.5, 5: 0.5}
    assert len(set(adaptive.link.tolist())) == 8


def test_size_two_dimension_has_two_distinct_links() -> None:
    topo = Torus((2, 3))
    plus, minus = topo.link(0, 0, +1), topo.link(0, 0, -1)
    assert plus != minus
    tails, heads = topo.link_ends(np.array([plus, minus]))
    assert tails.tolist() == [0, 0] and heads.tolist() == [3, 3]
    routes = topo.route(np.array([0]), np.array([3]), adaptive=True)
    assert sorted(routes.link.tolist()) == sorted([plus, minus])
    assert routes.weight.tolist() == [0.5, 0.5]


def test_dimension_order() -> None:
    topo = Torus((4, 4))
    # (0,0) -> (1,1): dimension 0 first, through (1,0) = node 4
    routes = topo.route(np.array([0]), np.array([5]))
    assert topo.link_ends(routes.link)[1].tolist() == [4, 5]
    # adaptive: half through node 4, half through node 1 (the other rotation)
    adaptive = topo.route(np.array([0]), np.array([5]), adaptive=True)
    first_hops = {}
    tails, heads = topo.link_ends(adaptive.link)
    for t, h, w in zip(tails.tolist(), heads.tolist(), adaptive.weight.tolist(), strict=True):
        if t == 0:
            first_hops[h] = first_hops.get(h, 0) + w
    assert first_hops == {4: 0.5, 1: 0.5}


@pytest.mark.parametrize("topo", [Torus((16,)), Torus((4, 4)), Torus((3, 5)), Torus((2, 2, 4)), HyperX((4, 4))])
@pytest.mark.parametrize("adaptive", [False, True])
def test_intervals_load_the_same_links_as_triples(topo, adaptive: bool) -> None:
    rng = np.random.default_rng(1)
    src = rng.integers(0, topo.nodes, 300)
    dst = rng.integers(0, topo.nodes, 300)
    nbytes = rng.integers(0, 1000, 300).astype(float)
    routes = topo.route(src, dst, adaptive)
    by_triples = np.bincount(routes.link, weights=routes.weight * nbytes[routes.msg], minlength=topo.num_links)
    iv = topo.route_intervals(src, dst, adaptive)
    assert ((iv.lo >= 0) & (iv.lo < iv.hi) & (iv.hi <= topo.num_links)).all()
    diff = np.zeros(topo.num_links + 1)
    np.add.at(diff, iv.lo, iv.weight * nbytes[iv.msg])
    np.add.at(diff, iv.hi, -iv.weight * nbytes[iv.msg])
    assert np.allclose(np.cumsum(diff)[:-1], by_triples)
    # conservation: the links carry each message's bytes once per hop
    assert np.isclose(by_triples.sum(), (nbytes * routes.hops).sum())


def test_fat_tree_hops_and_links() -> None:
    topo = FatTree(16, radix=4)  # 2 nodes per leaf, 2 down-ports per switch
    routes = topo.route(np.array([0, 0, 0, 0, 5]), np.array([1, 2, 4, 8, 5]))
    assert routes.hops.tolist() == [2, 4, 6, 8, 0]
    assert topo.levels == 4
    tails, heads = topo.link_ends(routes.link)
    assert sorted(zip(routes.msg.tolist(), routes.link.tolist(), strict=True)) == sorted(
        [(i, 0) for i in range(4)] + [(0, 17), (1, 18), (2, 20), (3, 24)]
    )
    assert set(tails.tolist()) == {0, -1} and set(heads.tolist()) == {-1, 1, 2, 4, 8}
    assert FatTree(256).route(np.array([0, 0]), np.array([31, 32])).hops.tolist() == [2, 4]


def test_route_rejects_bad_nodes() -> None:
    with pytest.raises(ValueError, match=r"outside 0\.\.15"):
        Torus((4, 4)).route(np.array([0]), np.array([16]))


# --------------------------------------------------------------------------
# The paper's Fig. 1 link loads
# --------------------------------------------------------------------------


def test_fig1_recursive_doubling_link_loads() -> None:
    sched = collc.load(EXAMPLES / "recursive_doubling.coll").instantiate(p=16).schedule
    ring = parse_topology("ring:16")
    loads = [link_message_counts(sched, ring, s).max() for s in (1, 2, 3)]
    assert loads == [2, 4, 8]


def test_fig1_swing_link_loads() -> None:
    sched = collc.load(EXAMPLES / "swing_bw.coll").instantiate(p=16).schedule
    ring = parse_topology("ring:16")
    loads = [link_message_counts(sched, ring, s).max() for s in (1, 2, 3)]
    assert loads == [1, 2, 3]
    # the allgather phase mirrors the reduce-scatter
    assert [link_message_counts(sched, ring, s).max() for s in (4, 5, 6)] == [3, 2, 1]


def test_link_message_counts_sum_to_hops() -> None:
    sched = collc.load(EXAMPLES / "swing_bw.coll").instantiate(p=16).schedule
    topo = Torus((4, 4))
    for s in range(len(sched.steps)):
        sends = [op for op in sched.steps[s].ops if op.kind is OpKind.SEND]
        hops = topo.route(np.array([o.rank for o in sends]), np.array([o.peer for o in sends])).hops.sum()
        assert link_message_counts(sched, topo, s, adaptive=True).sum() == pytest.approx(hops)


# --------------------------------------------------------------------------
# Times
# --------------------------------------------------------------------------


def two_rank(codec: str | None = None) -> Schedule:
    return schedule(2, 1, [exchange(0, 1, ChunkSet.of([0]), codec)])


@pytest.mark.parametrize("topo", [parse_topology("ring:2"), parse_topology("full:2")])
def test_two_rank_exchange_hand_computed(topo) -> None:
    sizes = [0, 4, 4000, 1 << 20]
    model = NetworkModel(adaptive=False)
    sim = simulate(two_rank(), topo, sizes, model)
    for row, n in zip(sim.rows, sizes, strict=True):
        expected = STEP_OVERHEAD + PER_HOP + n / BW
        assert row.time_s == pytest.approx(expected, rel=1e-12)
        assert row.goodput_bytes_per_s == pytest.approx(n / expected)
    assert sim.steps[0].messages == 2 and sim.steps[0].max_hops == 1 and sim.steps[0].max_link_chunks == 1


def test_two_rank_ring_adaptive_uses_both_links() -> None:
    # a dimension of size 2: the + and - links both reach the peer, the flow splits over them
    sim = simulate(two_rank(), parse_topology("ring:2"), [4000])
    assert sim.rows[0].time_s == pytest.approx(STEP_OVERHEAD + PER_HOP + 2000 / BW, rel=1e-12)


def test_model_parameters_are_used() -> None:
    model = NetworkModel(
        link_bandwidth=1e9, link_latency=1e-6, hop_latency=2e-6, step_overhead=5e-6, adaptive=False, itemsize=8
    )
    sim = simulate(two_rank(), parse_topology("full:2"), [8000], model)
    assert sim.rows[0].time_s == pytest.approx(5e-6 + 3e-6 + 8000 / 1e9)
    with pytest.raises(ValueError, match="link_bandwidth"):
        NetworkModel(link_bandwidth=0)


def test_zero_bytes_cost_latency() -> None:
    sched = collc.load(EXAMPLES / "recursive_doubling.coll").instantiate(p=16).schedule
    sim = simulate(sched, parse_topology("ring:16"), [0], NetworkModel(adaptive=False))
    assert [s.max_hops for s in sim.steps] == [1, 2, 4, 8]
    assert sim.rows[0].time_s == pytest.approx(4 * STEP_OVERHEAD + 15 * PER_HOP)


def test_recursive_doubling_ring_time() -> None:
    sched = collc.load(EXAMPLES / "recursive_doubling.coll").instantiate(p=16).schedule
    n = 4 << 20
    sim = simulate(sched, parse_topology("ring:16"), [n], NetworkModel(adaptive=False))
    # the whole vector at every step; 1, 2, 4, 8 messages share the busiest link
    assert sim.rows[0].time_s == pytest.approx(4 * STEP_OVERHEAD + 15 * PER_HOP + 15 * n / BW)
    assert congestion_deficiency(sched, parse_topology("ring:16"), n, NetworkModel(adaptive=False)) == 3.75
    # adaptive routing splits the distance-8 step over both directions
    assert congestion_deficiency(sched, parse_topology("ring:16"), n) == pytest.approx(11 / 4)


def test_congestion_free_exchange() -> None:
    assert congestion_deficiency(two_rank(), parse_topology("full:2"), 4096) == 1.0


def test_time_is_monotone_in_size() -> None:
    sched = collc.load(EXAMPLES / "swing_bw.coll").instantiate(p=12).schedule
    sizes = [*range(0, 4 * 300, 4), 4 * 12345, 4 * 100003]
    for topo in (parse_topology("ring:12"), parse_topology("torus:3x4"), parse_topology("fattree:12,radix=4")):
        times = simulate(sched, topo, sizes).times
        assert (np.diff(times) >= -1e-18).all()


def test_weights_scale_steps() -> None:
    sched = collc.load(EXAMPLES / "swing_bw.coll").instantiate(p=16).schedule
    topo = parse_topology("torus:4x4")
    plain = simulate(sched, topo, [64, 4096])
    w = np.arange(len(sched.steps)) % 3
    weighted = simulate(sched, topo, [64, 4096], weights=w.tolist())
    per_step = np.array([s.times_s for s in plain.steps])
    assert np.allclose(weighted.times, w @ per_step)
    assert np.allclose(plain.times, per_step.sum(axis=0))
    with pytest.raises(ValueError, match="step weights"):
        simulate(sched, topo, [64], weights=[1, 2])


def test_node_count_mismatch_is_a_clear_error() -> None:
    sched = collc.load(EXAMPLES / "swing_bw.coll").instantiate(p=16).schedule
    with pytest.raises(ValueError, match=r"torus:4x8 has 32 nodes but the schedule swing_bw runs on 16 ranks"):
        simulate(sched, parse_topology("torus:4x8"), [1024])
    with pytest.raises(ValueError, match="32 nodes"):
        link_message_counts(sched, parse_topology("ring:32"), 0)


def test_bad_sizes() -> None:
    with pytest.raises(ValueError, match="whole number of 4-byte elements"):
        simulate(two_rank(), parse_topology("full:2"), [6])
    with pytest.raises(ValueError, match="non-negative"):
        simulate(two_rank(), parse_topology("full:2"), [-4])


# --------------------------------------------------------------------------
# Exact element counts and codecs, against a brute-force cost model
# --------------------------------------------------------------------------

CODEC_SPECS = ["fp16", "ebq(eb=1e-3)", "fwq(bits=8, block=32)"]


def random_schedule(rng: np.random.Generator, p: int, nchunks: int, nsteps: int, collective: Collective) -> Schedule:
    steps: list[list[Op]] = []
    for s in range(nsteps):
        ops: list[Op] = []
        if s == 2:  # local ops only
            for r in range(0, p, 3):
                ops.append(make_op(r, OpKind.COMPRESS, r, ChunkSet.of([r % nchunks]), None, UNKNOWN_SPAN, "fp16"))
            steps.append(ops)
            continue
        for r in range(p):
            peer = int(rng.integers(0, p - 1))
            peer += peer >= r
            ids = rng.choice(nchunks, size=int(rng.integers(0, nchunks + 1)), replace=False)
            codec = CODEC_SPECS[int(rng.integers(0, 3))] if rng.random() < 0.3 else None
            chunks = ChunkSet.of(ids.tolist())
            ops.append(make_op(r, OpKind.SEND, peer, chunks, None, UNKNOWN_SPAN, codec))
            ops.append(make_op(peer, OpKind.RECV, r, chunks, Action.COPY, UNKNOWN_SPAN, codec))
            if rng.random() < 0.1:
                ops.append(make_op(r, OpKind.DECOMPRESS, r, ChunkSet.of([0, 1]), None, UNKNOWN_SPAN, "fp16"))
        steps.append(ops)
    return schedule(p, nchunks, steps, collective)


def reference_step_times(sched: Schedule, topo, count: int, model: NetworkModel) -> list[float]:
    """The cost model written out the slow way: chunk by chunk, message by message.  A send without a codec of
    chunks its sender holds compressed (after the step's local ops) carries their payloads, one message per codec."""
    offsets = element_offsets(sched.collective, sched.nranks, sched.nchunks, count)
    chunk_elems = np.diff(offsets)
    held: dict[tuple[int, int], str] = {}
    times = []
    for step in sched.steps:
        for op in step.ops:
            for c in op.chunks if op.kind.local else ():
                if op.kind is OpKind.COMPRESS:
                    held[(op.rank, c)] = op.codec  # type: ignore[assignment]
                else:
                    held.pop((op.rank, c), None)
        sends = []
        nbytes = []
        codec_raw = np.zeros(sched.nranks)
        for op in step.ops:
            elems = int(sum(chunk_elems[c] for c in op.chunks))
            if op.kind is OpKind.SEND and op.codec:
                sends.append(op)
                nbytes.append(parse_codec(op.codec).max_compressed_bytes(elems))
            elif op.kind is OpKind.SEND:
                groups: dict[str | None, int] = {}
                for c in op.chunks:
                    key = held.get((op.rank, c))
                    groups[key] = groups.get(key, 0) + int(chunk_elems[c])
                for codec, n in groups.items():
                    sends.append(op)
                    nbytes.append(parse_codec(codec).max_compressed_bytes(n) if codec else n * model.itemsize)
            if op.codec is not None or op.kind.local:
                codec_raw[op.rank] += elems * model.itemsize
        before = dict(held)
        wired = {(op.rank, op.peer, c) for op in step.ops if op.kind is OpKind.SEND and op.codec for c in op.chunks}
        for op in step.ops:
            if op.kind is OpKind.RECV and op.action is Action.COPY:
                for c in op.chunks:
                    codec = None if (op.peer, op.rank, c) in wired else before.get((op.peer, c))
                    if codec is None:
                        held.pop((op.rank, c), None)
                    else:
                        held[(op.rank, c)] = codec
        t = model.step_overhead + codec_raw.max() / model.codec_bandwidth
        if sends:
            routes = topo.route(np.array([o.rank for o in sends]), np.array([o.peer for o in sends]), model.adaptive)
            load = np.zeros(topo.num_links)
            for m, link, w in zip(routes.msg, routes.link, routes.weight, strict=True):
                load[link] += w * nbytes[m]
            t += routes.hops.max() * model.per_hop + load.max() / model.link_bandwidth
        times.append(t)
    return times


@pytest.mark.parametrize(
    ("collective", "p", "nchunks", "topo"),
    [
        (Collective.ALLREDUCE, 16, 37, "torus:4x4"),
        (Collective.ALLREDUCE, 12, 100, "hyperx:3x4"),
        (Collective.ALLGATHER, 8, 24, "ring:8"),
        (Collective.REDUCE_SCATTER, 8, 16, "fattree:8,radix=4"),
        (Collective.ALLREDUCE, 6, 7, "full:6"),
    ],
)
@pytest.mark.parametrize("adaptive", [False, True])
def test_simulation_matches_brute_force(
    collective: Collective, p: int, nchunks: int, topo: str, adaptive: bool
) -> None:
    rng = np.random.default_rng(p * 1000 + nchunks)
    sched = random_schedule(rng, p, nchunks, 5, collective)
    topology = parse_topology(topo)
    model = NetworkModel(adaptive=adaptive)
    # uneven chunks, fewer elements than chunks, counts divisible by p (per-rank groups) and not
    counts = [0, 1, 5, nchunks - 1, nchunks, nchunks + 3, 3 * nchunks + 11, p * 13, p * nchunks * 7 + 5, 1000003]
    sim = simulate(sched, topology, [c * model.itemsize for c in counts], model)
    for j, count in enumerate(counts):
        ref = reference_step_times(sched, topology, count, model)
        got = [s.times_s[j] for s in sim.steps]
        assert got == pytest.approx(ref, rel=1e-12, abs=1e-18)
        assert sim.rows[j].time_s == pytest.approx(sum(ref), rel=1e-12)


def test_element_counts_are_exact_for_uneven_chunks() -> None:
    # one message carrying chunks {0, 2, 5} of 7 uneven chunks, on a 2-node full network
    chunks = ChunkSet.of([0, 2, 5])
    sched = schedule(2, 7, [[make_op(0, OpKind.SEND, 1, chunks, None, UNKNOWN_SPAN)]])
    model = NetworkModel(adaptive=False, step_overhead=0.0, link_latency=0.0, hop_latency=0.0)
    for count in (3, 10, 23, 701):
        off = element_offsets(Collective.ALLREDUCE, 2, 7, count)
        elems = sum(int(off[c + 1] - off[c]) for c in (0, 2, 5))
        sim = simulate(sched, parse_topology("full:2"), [4 * count], model)
        assert sim.rows[0].time_s * BW == pytest.approx(4 * elems)


@pytest.mark.parametrize("spec", CODEC_SPECS)
def test_compressed_exchange_uses_max_compressed_bytes(spec: str) -> None:
    count = 1000
    sim = simulate(two_rank(spec), parse_topology("full:2"), [4 * count])
    payload = parse_codec(spec).max_compressed_bytes(count)
    # each rank encodes what it sends and decodes what it receives
    codec_time = 2 * 4 * count / 100e9
    assert sim.rows[0].time_s == pytest.approx(STEP_OVERHEAD + PER_HOP + payload / BW + codec_time)


def test_forwarded_payloads_travel_at_their_compressed_size() -> None:
    """Collective-level compression: a send of a compressed chunk carries its payload (the codec's worst-case
    size) and costs no codec work; compressing once and decompressing at the end cost their codec time."""
    count, p = 4000, 4
    sched = collc.load(EXAMPLES / "compression" / "compressed_ring_allgather.coll").instantiate(p=p).schedule
    sim = simulate(sched, parse_topology(f"ring:{p}"), [4 * count])
    payload = parse_codec("ebq(eb=1e-3)").max_compressed_bytes(count // p)
    hops = (p - 1) * (STEP_OVERHEAD + PER_HOP + payload / BW)
    local = 2 * STEP_OVERHEAD + (4 * count // p + 4 * count) / 100e9  # compress its block; decompress all
    assert sim.rows[0].time_s == pytest.approx(hops + local)
    raw = simulate(collc.load(EXAMPLES / "ring_allgather.coll").instantiate(p=p).schedule, parse_topology(f"ring:{p}"),
                   [4 * count])  # fmt: skip
    assert raw.rows[0].time_s == pytest.approx((p - 1) * (STEP_OVERHEAD + PER_HOP + 4 * count // p / BW))


def test_local_ops_cost_overhead_and_codec_time() -> None:
    ops = [make_op(r, OpKind.COMPRESS, r, ChunkSet.of([0, 1]), None, UNKNOWN_SPAN, "fp16") for r in range(4)]
    sim = simulate(schedule(4, 4, [ops]), parse_topology("ring:4"), [4 * 400])
    assert sim.steps[0].messages == 0
    assert sim.rows[0].time_s == pytest.approx(STEP_OVERHEAD + 4 * 200 / 100e9)


def test_figures_of_swing_on_a_ring() -> None:
    sched = collc.load(EXAMPLES / "swing_bw.coll").instantiate(p=16).schedule
    sim = simulate(sched, parse_topology("ring:16"), [4 << 20], NetworkModel(adaptive=False))
    assert [s.max_hops for s in sim.steps] == [1, 1, 3, 5, 5, 3, 1, 1]
    assert [s.phase for s in sim.steps] == ["reduce_scatter"] * 4 + ["allgather"] * 4
    assert all(s.messages == 16 for s in sim.steps)
    # chunks per message halve each step (8, 4, 2, 1); 1, 1, 2, 3 messages share a link
    assert [s.max_link_chunks for s in sim.steps[:4]] == [8, 4, 4, 3]
