"""Multi-level topologies, dataflow execution and compression credit, against closed forms and brute force.

Times are checked against formulas derived by hand from the model of docs/simulate.md (a ring
on a crossbar, a ring pipelined over k sub-chunks, compressed rings), and traffic against
counts made message by message from the placement of ranks on nodes.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import collc
from collc.cli import EXIT_INPUT, EXIT_OK, main
from collc.codecs import parse_codec
from collc.hierarchy import Hierarchical, NodeSpec, parse_node
from collc.simulate import NetworkModel, link_message_counts, simulate
from collc.topologies import parse_topology
from collc.topology import FatTree, FullyConnected, Torus

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

PIPELINED_RING = """\
# A ring allreduce pipelined over k sub-chunks: ring step i of the plain ring becomes k steps,
# one per sub-chunk, so that a rank forwards a sub-chunk as soon as it has it.
algorithm pipelined_ring_allreduce : allreduce
param p : int where p >= 1
param k : int = 4 where k >= 1
chunks k * p

phase reduce_scatter:
  for step s in 0 .. (p - 1) * k:
    send ((rank - s // k - 1) mod p) * k + s % k to ring_next(rank)
    recv ((rank - s // k - 2) mod p) * k + s % k from ring_prev(rank) reduce
phase allgather:
  for step s in 0 .. (p - 1) * k:
    send ((rank - s // k) mod p) * k + s % k to ring_next(rank)
    recv ((rank - s // k - 1) mod p) * k + s % k from ring_prev(rank) copy
"""


@pytest.fixture(scope="module")
def pipelined(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("coll") / "pipelined_ring_allreduce.coll"
    path.write_text(PIPELINED_RING)
    return path


def ring(p: int):
    return collc.load(EXAMPLES / "ring_allreduce.coll").instantiate(p=p).schedule


def crossbar(p: int, bw: float, lat: float) -> Hierarchical:
    """One node of p ranks on a crossbar."""
    return Hierarchical(FullyConnected(1), NodeSpec("nvlink", p, bandwidth=bw, latency=lat))


# --------------------------------------------------------------------------
# Placement and routes: counts made message by message
# --------------------------------------------------------------------------


@pytest.mark.parametrize("placement", ["block", "cyclic"])
@pytest.mark.parametrize(
    ("network", "node"),
    [
        (FatTree(4, 4), "nvlink:4,nics=2"),
        (Torus((2, 3)), "pcie:4,fanout=2"),
        (Torus((4,)), "pcie:3"),
        (FullyConnected(3), "nvlink:2"),
    ],
)
def test_links_of_every_pair_follow_the_placement(network, node: str, placement: str) -> None:
    spec = parse_node(node)
    topo = Hierarchical(network, spec, placement)
    g, n = spec.ranks, network.nodes
    r = topo.nodes
    src, dst = (a.ravel() for a in np.meshgrid(np.arange(r), np.arange(r), indexing="ij"))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    routes = topo.route(src, dst)
    inner = network.route(np.arange(n).repeat(n), np.tile(np.arange(n), n))
    inner_hops = inner.hops.reshape(n, n)
    off = topo.network_offset
    for i, (s, d) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
        node_s, node_d = (s // g, d // g) if placement == "block" else (s % n, d % n)
        loc_s, loc_d = (s % g, d % g) if placement == "block" else (s // n, d // n)
        links = routes.link[routes.msg == i]
        k = spec.nics
        nic_up0 = off - 2 * n * k  # NIC up links, then NIC down links, then the network's
        nic = links[(links >= nic_up0) & (links < off)]
        rank_links = sorted(links[links < 2 * r].tolist())
        net = links[links >= off]
        if node_s == node_d:
            assert nic.size == 0 and net.size == 0
            assert rank_links[0] == s and rank_links[-1] == r + d  # up from the sender, down to the receiver
            leaves = spec.leaves > 1 and loc_s // spec.fanout != loc_d // spec.fanout
            assert routes.hops[i] == links.size == (4 if leaves else 2)
        else:
            # one NIC up on the sender's node, one NIC down on the receiver's, chosen by local index
            k = spec.nics
            nic_up0 = off - 2 * n * k
            assert sorted(nic.tolist()) == [
                nic_up0 + node_s * k + loc_s * k // g,
                nic_up0 + n * k + node_d * k + loc_d * k // g,
            ]
            assert (rank_links == [s, r + d]) == (spec.fabric == "pcie")
            if isinstance(network, FatTree):
                assert net.size == 0
                assert routes.hops[i] == links.size + inner_hops[node_s, node_d] - 2
            else:
                assert net.size == inner_hops[node_s, node_d]
                tails, heads = network.link_ends(net - off)
                assert set(tails.tolist()) | set(heads.tolist()) >= {node_s, node_d}
                assert routes.hops[i] == links.size


@pytest.mark.parametrize("placement", ["block", "cyclic"])
def test_ring_traffic_through_nics_counted_message_by_message(placement: str) -> None:
    g, n = 4, 4
    topo = Hierarchical(Torus((n,)), parse_node(f"pcie:{g},nics=2"), placement)
    sched = ring(g * n)
    step = 0
    counts = link_message_counts(sched, topo, step, adaptive=False)
    ops = [op for op in sched.steps[step].ops if op.kind.value == "send"]
    node = (lambda x: x // g) if placement == "block" else (lambda x: x % n)
    crossing = sum(1 for op in ops if node(op.rank) != node(op.peer))
    off = topo.network_offset
    nic_up = counts[off - 2 * n * 2 : off - n * 2]
    assert nic_up.sum() == crossing == (n if placement == "block" else g * n)
    # every rank's up link carries its own message (pcie: intra and inter traffic both)
    assert (counts[: g * n] == 1).all()
    # the network ring carries each crossing message once per hop
    hops = sum(min((node(op.peer) - node(op.rank)) % n, (node(op.rank) - node(op.peer)) % n) for op in ops)
    assert counts[off:].sum() == hops


def test_link_bandwidths_and_latencies() -> None:
    spec = NodeSpec("nvlink", 4, nics=2, bandwidth=100e9, latency=1e-6, nic_bandwidth=20e9, nic_latency=2e-6)
    topo = Hierarchical(Torus((3,)), spec)
    bw = topo.link_bandwidths(50e9)
    assert (bw[: 2 * 12] == 100e9).all()
    assert (bw[2 * 12 : topo.network_offset] == 20e9).all() and topo.network_offset == 2 * 12 + 2 * 3 * 2
    assert (bw[topo.network_offset :] == 50e9).all() and bw.size == topo.num_links
    lat = topo.message_latency(np.array([0, 0, 0]), np.array([1, 4, 8]), per_hop=0.5e-6)
    assert lat.tolist() == pytest.approx([1e-6, 2 * 2e-6 + 0.5e-6, 2 * 2e-6 + 0.5e-6])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nvlink", "expected nvlink:G or pcie:G"),
        ("mesh:4", "expected nvlink:G or pcie:G"),
        ("nvlink:0", "integer >= 1"),
        ("nvlink:8,nics=9", "9 NICs for 8 ranks"),
        ("nvlink:8,fanout=2", "fanout is an option of pcie only"),
        ("pcie:8,bw=fast", "bw='fast' is not a rate"),
        ("pcie:8,latency=3", "latency='3' is not a duration"),
        ("pcie:8,colour=red", "unknown option 'colour'"),
        ("pcie:8,nics", "has no value"),
        ("pcie:8,nics=2,nics=3", "given twice"),
    ],
)
def test_bad_node_specs(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_node(text)


# --------------------------------------------------------------------------
# Times: closed forms
# --------------------------------------------------------------------------


@pytest.mark.parametrize("execution", ["lockstep", "dataflow"])
@pytest.mark.parametrize("p", [2, 5, 8])
def test_ring_on_a_crossbar(p: int, execution: str) -> None:
    bw, lat, o = 200e9, 0.7e-6, 0.3e-6
    sizes = [4 * p * m for m in (0, 1, 1000, 1 << 18)]
    sim = simulate(ring(p), crossbar(p, bw, lat), sizes, NetworkModel(step_overhead=o, execution=execution))
    for row, n in zip(sim.rows, sizes, strict=True):
        assert row.time_s == pytest.approx(2 * (p - 1) * (o + lat + n / (p * bw)), rel=1e-12)
        assert sum(row.parts) == pytest.approx(row.time_s, rel=1e-12)
        overhead, latency, transfer, codec = row.parts
        assert overhead == pytest.approx(2 * (p - 1) * o) and latency == pytest.approx(2 * (p - 1) * lat)
        assert transfer == pytest.approx(2 * (p - 1) * n / (p * bw)) and codec == 0


def pipelined_time(p: int, k: int, n: float, o: float, lat: float, bw: float) -> float:
    """The pipelined ring on a crossbar: the busier of the link (or the engine) over all S steps,
    and one sub-chunk's chain through 2(p-1) stages with the k-1 others behind it."""
    s = 2 * (p - 1) * k
    tau = n / (p * k * bw)
    busy = max(o, tau)
    return max(o + (s - 1) * busy + tau + lat, 2 * (p - 1) * (o + lat + tau) + (k - 1) * busy)


@pytest.mark.parametrize(("p", "k"), [(2, 3), (4, 4), (6, 2), (5, 1)])
@pytest.mark.parametrize(
    ("o", "lat"),
    [(0.0, 2e-6), (0.0, 1e-9), (0.5e-6, 2e-6), (2e-6, 0.1e-6)],  # latency-bound, link-bound, mixed, engine-bound
)
def test_pipelined_ring_on_a_crossbar_matches_its_closed_form(pipelined: Path, p: int, k: int, o: float, lat: float):
    bw = 100e9
    sizes = [4 * p * k * m for m in (1, 256, 1 << 16)]
    # the ring with k steps per ring step, and the bundled example: p - 1 steps per phase, k lanes each
    for source in (pipelined, "pipelined_ring_allreduce"):
        sched = collc.load(source).instantiate(p=p, k=k).schedule
        sim = simulate(sched, crossbar(p, bw, lat), sizes, NetworkModel(step_overhead=o, execution="dataflow"))
        for row, n in zip(sim.rows, sizes, strict=True):
            assert row.time_s == pytest.approx(pipelined_time(p, k, n, o, lat, bw), rel=1e-12), source


def test_pipelining_hides_latency_where_the_formula_says(pipelined: Path) -> None:
    p, k, bw, lat, o = 8, 4, 100e9, 2e-6, 0.1e-6
    topo = crossbar(p, bw, lat)
    pipe = collc.load(pipelined).instantiate(p=p, k=k).schedule
    n = 4 * p * k * 4096  # a sub-chunk takes 0.16 us, a block 0.66 us, the latency 2 us
    model = NetworkModel(step_overhead=o, execution="dataflow")
    (plain_row,) = simulate(ring(p), topo, [n], model).rows
    (pipe_row,) = simulate(pipe, topo, [n], model).rows
    assert pipe_row.time_s < plain_row.time_s
    # the plain ring's critical path holds 2(p-1) latencies; the pipeline's as many, but a quarter of the transfers
    assert plain_row.breakdown()["latency"] == pytest.approx(2 * (p - 1) * lat)
    assert pipe_row.breakdown()["transfer"] == pytest.approx((2 * (p - 1) + k - 1) * n / (p * k * bw))
    assert pipe_row.breakdown()["overhead"] == pytest.approx(2 * (p - 1) * o)
    # lockstep charges every one of the 2(p-1)k steps its latency: no gain there
    (lock_row,) = simulate(pipe, topo, [n], NetworkModel(step_overhead=o)).rows
    assert lock_row.time_s == pytest.approx(2 * (p - 1) * k * (o + lat + n / (p * k * bw)))


def test_dataflow_on_a_flat_ring_equals_lockstep_when_every_link_carries_one_message_per_step() -> None:
    p = 12
    topo = parse_topology(f"ring:{p}")
    sizes = [0, 4 * p, 4 * p * 1000]
    lock = simulate(ring(p), topo, sizes, NetworkModel(adaptive=False))
    flow = simulate(ring(p), topo, sizes, NetworkModel(adaptive=False, execution="dataflow"))
    assert np.allclose(flow.times, lock.times, rtol=1e-12)


@pytest.mark.parametrize(("g", "nodes"), [(4, 2), (3, 3), (8, 2)])
def test_dataflow_pays_the_nic_latency_only_where_a_chain_crosses_nodes(g: int, nodes: int) -> None:
    # Lockstep charges every ring step the slowest message's latency, a NIC crossing.  In dataflow a
    # rank's step waits only for its left neighbour's previous step, so the time is the longest chain
    # of 2(p-1) messages, sent by ranks x, x+1, ..., of which those leaving a node pay the NICs.
    lat_intra, lat_nic = 0.3e-6, 2e-6
    topo = Hierarchical(FullyConnected(nodes), NodeSpec("nvlink", g, latency=lat_intra, nic_latency=lat_nic))
    p = g * nodes
    steps = 2 * (p - 1)
    model = NetworkModel(step_overhead=0, link_latency=0, hop_latency=0)
    (lock,) = simulate(ring(p), topo, [0], model).rows
    assert lock.time_s == pytest.approx(steps * 2 * lat_nic)
    (flow,) = simulate(ring(p), topo, [0], dataclasses.replace(model, execution="dataflow")).rows
    crossings = max(sum(1 for r in range(x, x + steps) if r % g == g - 1) for x in range(p))
    assert flow.time_s == pytest.approx(crossings * 2 * lat_nic + (steps - crossings) * lat_intra)
    assert flow.breakdown()["latency"] == pytest.approx(flow.time_s)


# --------------------------------------------------------------------------
# Compression: both styles charged at the compressed size, plus codec time
# --------------------------------------------------------------------------


@pytest.mark.parametrize("execution", ["lockstep", "dataflow"])
def test_collective_level_compression_forwards_compressed_payloads(execution: str) -> None:
    p, enc, dec, bw, o = 4, 20e9, 40e9, 50e9, 0.5e-6
    sched = collc.load(EXAMPLES / "compression/compressed_ring_allgather.coll").instantiate(p=p).schedule
    codec = parse_codec("ebq(eb=1e-3)")
    n = 4 * p * 4096
    model = NetworkModel(link_bandwidth=bw, step_overhead=o, adaptive=False, encode_bandwidth=enc,
                         decode_bandwidth=dec, execution=execution)  # fmt: skip
    (row,) = simulate(sched, parse_topology(f"ring:{p}"), [n], model).rows
    block = n // p
    wire = codec.max_compressed_bytes(block // 4)
    assert wire < block / 2
    per_hop = model.per_hop
    # compress one's own block, p-1 ring steps of compressed payloads (no codec work), decompress all
    expected = (o + block / enc) + (p - 1) * (o + per_hop + wire / bw) + (o + n / dec)
    assert row.time_s == pytest.approx(expected, rel=1e-12)
    assert row.breakdown()["codec"] == pytest.approx(block / enc + n / dec)


@pytest.mark.parametrize("execution", ["lockstep", "dataflow"])
def test_point_to_point_compression_pays_every_hop(execution: str) -> None:
    p, enc, dec, bw, o = 4, 20e9, 40e9, 50e9, 0.5e-6
    sched = collc.load(EXAMPLES / "compression/compressed_ring_allgather_p2p.coll").instantiate(p=p).schedule
    codec = parse_codec("ebq(eb=1e-3)")
    n = 4 * p * 4096
    model = NetworkModel(link_bandwidth=bw, step_overhead=o, adaptive=False, encode_bandwidth=enc,
                         decode_bandwidth=dec, execution=execution)  # fmt: skip
    (row,) = simulate(sched, parse_topology(f"ring:{p}"), [n], model).rows
    block = n // p
    wire = codec.max_compressed_bytes(block // 4)
    expected = (p - 1) * (o + block / enc + model.per_hop + wire / bw + block / dec)
    assert row.time_s == pytest.approx(expected, rel=1e-12)


def test_encode_and_decode_rates_are_checked() -> None:
    with pytest.raises(ValueError, match="encode_bandwidth"):
        NetworkModel(encode_bandwidth=0)
    with pytest.raises(ValueError, match="execution"):
        NetworkModel(execution="async")
    assert NetworkModel(codec_bandwidth=7e9).decode_rate == 7e9


def test_dataflow_refuses_sampled_weights() -> None:
    with pytest.raises(ValueError, match="dataflow execution runs every step"):
        simulate(ring(4), parse_topology("ring:4"), [64], NetworkModel(execution="dataflow"), weights=[2] * 6)


# --------------------------------------------------------------------------
# The CLI
# --------------------------------------------------------------------------


def sim(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["sim", *args])
    return result.exit_code, result.output


def test_cli_node_and_execution_equal_a_direct_simulation(pipelined: Path) -> None:
    code, out = sim(str(pipelined), "--topology", "fattree:2", "--node", "nvlink:4,bw=300GB/s,latency=1us",
                    "--execution", "dataflow", "--sizes", "64KiB", "--json")  # fmt: skip
    assert code == EXIT_OK, out
    (row,) = json.loads(out)
    sched = collc.load(pipelined).instantiate(p=8).schedule
    topo = Hierarchical(FatTree(2), NodeSpec("nvlink", 4, bandwidth=300e9, latency=1e-6))
    (direct,) = simulate(sched, topo, [65536], NetworkModel(execution="dataflow")).rows
    assert row["time_us"] == pytest.approx(direct.time_s * 1e6)
    code, out = sim(str(pipelined), "--topology", "fattree:2", "--node", "nvlink:4", "--execution", "dataflow",
                    "--sizes", "64KiB")  # fmt: skip
    assert code == EXIT_OK and "8 ranks on 2 nodes" in out and "execution dataflow" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--node", "nvlink:4,nics=5"), "--node"),
        (("--node", "gpu:4"), "expected nvlink:G or pcie:G"),
        (("--placement", "cyclic"), "needs --node"),
        (("--node", "nvlink:3"), "12 ranks (4 nodes of 3 ranks)"),
        (("--encode-bw", "0GB/s"), "--encode-bw"),
        (("--execution", "eager"), "'eager' is not one of"),
    ],
)
def test_cli_bad_levels_are_clear_errors(args: tuple[str, ...], message: str) -> None:
    extra = ("--param", "p=8") if "nvlink:3" in args else ()
    code, out = sim("ring_allreduce", "--topology", "ring:4", *extra, *args)
    assert code == EXIT_INPUT, out
    assert message in out
    assert "Traceback" not in out
