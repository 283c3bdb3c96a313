"""Simulated striped ring allreduce on two interfaces of unequal bandwidth: equal shares against weighted ones.

The schedule is examples/weighted_striped_ring_allreduce.coll: the vector is cut into two stripes,
stripe 0 goes round a ring forwards (rank -> rank + 1) and stripe 1 backwards (rank -> rank - 1),
each a lane of its own; ``share`` is stripe 0's percentage of the vector (the chunk weights).

The machine: p = 8 ranks on a ring (`collc.topology.Torus((8,))`), whose forward and backward
links are distinct.  The simulator's own topologies give every link the same bandwidth, so that
the two rings of a striped schedule are symmetric and equal shares are right (the ``equal links``
rows below show it).  This benchmark subclasses the ring to give the backward links a fraction
``r`` of the forward links' 400 Gb/s: each rank's two interfaces then differ (an NVLink bridge one
way and a NIC the other, or two rails of different speeds).  Each step of a ring moves one chunk of
each stripe at once, so a step lasts as long as the slower stripe's message: with equal shares
the backward stripe is the bottleneck, and shares in the ratio of the bandwidths, 1 : r, finish
both stripes together.

Columns: the predicted time of the equal split (share 50, the baseline, µs) and, for each other
share, its time as a ratio against it (below 1: faster), for lockstep and dataflow execution.

    python benchmarks/sim_weights.py            # a few seconds
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import collc
from collc.goodput import size_text
from collc.simulate import NetworkModel, simulate
from collc.topology import Torus

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "weighted_striped_ring_allreduce.coll"
SHARES = (50, 60, 67, 75, 80, 90)
SIZES = tuple(1 << k for k in range(20, 31, 2))  # 1 MiB .. 1 GiB


@dataclass(frozen=True)
class TwoRateRing(Torus):
    """A ring whose backward links run at ``backward`` times the forward links' bandwidth."""

    backward: float = 1.0

    def link_bandwidths(self, link_bandwidth: float) -> np.ndarray | None:
        bw = np.full(self.num_links, link_bandwidth, dtype=np.float64)
        bw[self.nodes :] *= self.backward  # links [0, p) go forwards, [p, 2p) backwards (Torus's numbering)
        return bw


def table(p: int, backward: float, execution: str) -> list[str]:
    alg = collc.load(EXAMPLE)
    model = dataclasses.replace(NetworkModel(), execution=execution)
    topo = TwoRateRing((p,), backward=backward)
    times = {}
    for share in SHARES:
        s = alg.instantiate(p=p, share=share).schedule
        times[share] = simulate(s, topo, SIZES, model).times
    head = f"{'size':>9} {'equal µs':>10}" + "".join(f" {f'share {s}':>9}" for s in SHARES[1:])
    lines = [f"r = {backward:g} ({'equal links' if backward == 1 else 'backward links slower'}), {execution}", head]
    for i, size in enumerate(SIZES):
        base = times[50][i]
        cells = "".join(f" {times[s][i] / base:>9.3f}" for s in SHARES[1:])
        lines.append(f"{size_text(size):>9} {base * 1e6:>10.1f}{cells}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-p", type=int, default=8, help="ranks on the ring (default 8)")
    args = parser.parse_args()
    print(f"# {platform.node()} ({platform.processor() or platform.machine()}), p = {args.p}, shares: stripe 0's %")
    for backward in (1.0, 0.5, 0.25):
        for execution in ("lockstep", "dataflow"):
            print()
            print("\n".join(table(args.p, backward, execution)))


if __name__ == "__main__":
    main()
