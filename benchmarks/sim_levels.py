"""Simulated allreduce on 16 nodes x 8 GPUs: hierarchical and flat Swing, a pipelined ring, against the ring.

The machine: 16 nodes of 8 ranks on an NVLink-like crossbar (450 GB/s per direction, 250 ns),
8 NICs per node (one per GPU, 400 Gb/s, 500 ns each) into a non-blocking fat tree (400 Gb/s
links, the Swing paper's 100 ns + 300 ns per hop), rank r on node r // 8.  Every program is
simulated with dataflow execution (a rank sends when its data is there; docs/simulate.md),
one size at a time from 1 KiB to 1 GiB:

* ``ring``: examples/ring_allreduce.coll, the baseline;
* ``swing``: the better of examples/swing_lat.coll and swing_bw.coll at each size, flat (ranks
  numbered as the ring's, no knowledge of the nodes);
* ``hier``: examples/hierarchical/hier_allreduce_swing.coll with nodes=16, local=8: a ring
  reduce-scatter inside every node, Swing between the nodes on each local rank's share, a ring
  allgather inside every node (its nodes are those of the block placement: under the cyclic one
  its "intra-node" rings cross the network);
* ``pipe``: benchmarks/data/pipelined_ring_allreduce.coll, the ring with every block cut into
  k sub-chunks, one step each.

Columns: predicted times in µs, ratios against the ring (below 1: faster than the ring), and
for the ring and the pipelined ring the share of their critical path spent in latency and
per-step overhead (what pipelining hides), plus the lockstep prediction of the pipelined ring.

    python benchmarks/sim_levels.py              # k = 4, about a minute on 2 cores
    python benchmarks/sim_levels.py --k 8 --max 256MiB
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import time
from pathlib import Path

import collc
from collc.goodput import size_text
from collc.hierarchy import Hierarchical, parse_node
from collc.simulate import NetworkModel, Simulation, simulate
from collc.topology import FatTree

ROOT = Path(__file__).resolve().parent.parent
NODE = "nvlink:8,nics=8"
NODES = 16


def sizes(low: int, high: int) -> list[int]:
    out, n = [], low
    while n <= high:
        out.append(n)
        n *= 2
    return out


def parse_size(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for unit, scale in units.items():
        if text.endswith(unit):
            return int(text[: -len(unit)]) * scale
    return int(text)


def run(name: str, path: Path, params: dict[str, int], topo: Hierarchical, sz: list[int], model: NetworkModel):
    start = time.perf_counter()
    schedule = collc.load(path).instantiate(**params).schedule
    sim = simulate(schedule, topo, sz, model)
    print(f"# {name}: {path.relative_to(ROOT)} {params}, {len(schedule.steps)} steps, "
          f"{time.perf_counter() - start:.1f} s")  # fmt: skip
    return sim


def waiting_share(sim: Simulation, i: int) -> float:
    parts = sim.rows[i].breakdown()
    return (parts["latency"] + parts["overhead"]) / sim.rows[i].time_s


def table(placement: str, k: int, sz: list[int]) -> None:
    topo = Hierarchical(FatTree(NODES), parse_node(NODE), placement)
    p = topo.nodes
    model = NetworkModel(execution="dataflow")
    print(f"\n## {topo.spec}: {p} ranks, rank r on node {'r // 8' if placement == 'block' else 'r % 16'}")
    ring = run("ring", ROOT / "examples/ring_allreduce.coll", {"p": p}, topo, sz, model)
    swing_lat = run("swing", ROOT / "examples/swing_lat.coll", {"p": p}, topo, sz, model)
    swing_bw = run("swing", ROOT / "examples/swing_bw.coll", {"p": p}, topo, sz, model)
    hier = run("hier", ROOT / "examples/hierarchical/hier_allreduce_swing.coll", {"nodes": NODES, "local": p // NODES},
               topo, sz, model)  # fmt: skip
    pipe_path = ROOT / "benchmarks/data/pipelined_ring_allreduce.coll"
    pipe = run("pipe", pipe_path, {"p": p, "k": k}, topo, sz, model)
    lock = run("pipe lockstep", pipe_path, {"p": p, "k": k}, topo, sz,
               dataclasses.replace(model, execution="lockstep"))  # fmt: skip
    print(f"# k = {k}; wait: share of the critical path in latency and step overhead")
    print(f"{'size':>8} {'ring us':>10} {'swing us':>10} {'swing/ring':>10} {'hier us':>10} {'hier/ring':>9} "
          f"{'pipe us':>10} {'pipe/ring':>9} "
          f"{'ring wait':>9} {'pipe wait':>9} {'pipe lockstep/ring':>18}")  # fmt: skip
    for i, n in enumerate(sz):
        t_ring = ring.rows[i].time_s
        t_swing = min(swing_lat.rows[i].time_s, swing_bw.rows[i].time_s)
        t_pipe = pipe.rows[i].time_s
        t_hier = hier.rows[i].time_s
        print(
            f"{size_text(n):>8} {t_ring * 1e6:>10.2f} {t_swing * 1e6:>10.2f} {t_swing / t_ring:>10.3f} "
            f"{t_hier * 1e6:>10.2f} {t_hier / t_ring:>9.3f} {t_pipe * 1e6:>10.2f} {t_pipe / t_ring:>9.3f} "
            f"{waiting_share(ring, i):>9.0%} {waiting_share(pipe, i):>9.0%} {lock.rows[i].time_s / t_ring:>18.3f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=4, help="sub-chunks per block of the pipelined ring")
    ap.add_argument("--min", default="1KiB")
    ap.add_argument("--max", default="1GiB")
    ap.add_argument("--placement", choices=["block", "cyclic", "both"], default="both")
    args = ap.parse_args()
    sz = sizes(parse_size(args.min), parse_size(args.max))
    model = NetworkModel()
    print(f"# collc {collc.__version__} on {platform.machine()}, python {platform.python_version()}")
    print(f"# fat tree of {NODES} nodes x {NODE}; network links 400Gb/s, {model.per_hop * 1e9:.0f} ns per hop; "
          f"step overhead {model.step_overhead * 1e6:g} us; execution dataflow")  # fmt: skip
    for placement in ("block", "cyclic") if args.placement == "both" else (args.placement,):
        table(placement, args.k, sz)


if __name__ == "__main__":
    main()
