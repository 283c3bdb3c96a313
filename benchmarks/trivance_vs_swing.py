"""Trivance against Swing in the flow-level simulator, on bidirectional rings and tori.

The Trivance paper (arXiv 2602.17254) reports 5-30% lower allreduce times than the state of the art
(Swing among it) up to 8 MiB, on rings and tori, at rank counts that are powers of three.  For each
network and vector size the table gives the simulated time of the better of Trivance's two programs
(latency-optimal ``trivance_allreduce``, bandwidth-optimal ``trivance_bw_allreduce``) and of Swing's
(``swing_lat``, ``swing_bw``, and on rings and tori their multiport forms ``torus/swing_lat_torus``,
``torus/swing_bw_torus``, which send both ways in every dimension as Trivance does), and their ratio,
side by side in one run.  Two comparisons:

* the same rank count (a power of three, where Swing needs its steps for other p), and
* each at its natural size: Trivance at 3^k ranks, Swing at the nearest power of two below.

    python benchmarks/trivance_vs_swing.py
    python benchmarks/trivance_vs_swing.py --sizes 32B:128MiB

Networks: one rank per node, 400 Gb/s links, the `collc sim` defaults (lockstep steps).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collc import __version__  # noqa: E402
from collc.diagnostics import CollError  # noqa: E402
from collc.goodput import schedule_for, size_text  # noqa: E402
from collc.simulate import NetworkModel, simulate  # noqa: E402
from collc.topologies import parse_topology  # noqa: E402

EXAMPLES = ROOT / "examples"
TRIVANCE = ("trivance_allreduce", "trivance_bw_allreduce")
SWING = ("swing_lat", "swing_bw", "torus/swing_lat_torus", "torus/swing_bw_torus")  # the torus ones: 2 ports a dim
# (Trivance's network, Swing's network): the same one, or each at its natural size
NETWORKS = (
    ("ring:27", "ring:27"),
    ("ring:81", "ring:81"),
    ("torus:9x9", "torus:9x9"),
    ("torus:3x3x3", "torus:3x3x3"),
    ("ring:27", "ring:32"),
    ("ring:81", "ring:64"),
    ("torus:9x9", "torus:8x8"),
)


def parse_sizes(text: str) -> list[int]:
    def one(t: str) -> int:
        t = t.strip()
        for suffix, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1)):
            if t.endswith(suffix):
                return int(t[: -len(suffix)]) * scale
        return int(t)

    low, _, high = text.partition(":")
    sizes, size = [], one(low)
    while size <= (one(high) if high else size):
        sizes.append(size)
        size *= 2
    return sizes


def best(names: tuple[str, ...], spec: str, sizes: list[int], model: NetworkModel) -> tuple[dict[int, float], str]:
    """The least simulated time at each size over ``names`` on ``spec``, and which programs could run there."""
    topology = parse_topology(spec)
    times: dict[int, float] = {}
    ran = []
    for name in names:
        try:
            schedule, weights = schedule_for(str(EXAMPLES / f"{name}.coll"), topology, {}, False)
            rows = simulate(schedule, topology, sizes, model, weights=weights).rows
        except (CollError, ValueError) as err:
            ran.append(f"{name} refused ({str(err).splitlines()[0][:60]})")
            continue
        ran.append(name)
        for row in rows:
            times[row.size_bytes] = min(times.get(row.size_bytes, float("inf")), row.time_s)
    return times, ", ".join(ran)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="32B:128MiB", help="a doubling LOW:HIGH (default 32B:128MiB)")
    args = parser.parse_args()
    sizes = parse_sizes(args.sizes)
    model = NetworkModel()
    start = time.perf_counter()
    print(f"# collc {__version__} on {platform.machine()}, python {platform.python_version()}")
    print("# lockstep, 400Gb/s links; times: the better of each pair of programs; ratio: Trivance / Swing")
    for t_spec, s_spec in NETWORKS:
        trivance, t_ran = best(TRIVANCE, t_spec, sizes, model)
        swing, s_ran = best(SWING, s_spec, sizes, model)
        print(f"\n## Trivance on {t_spec} ({t_ran}) against Swing on {s_spec} ({s_ran})")
        print(f"{'size':>8}{'trivance us':>13}{'swing us':>11}{'ratio':>8}")
        for size in sizes:
            t, s = trivance.get(size), swing.get(size)
            ratio = f"{t / s:.3f}" if t and s else "-"
            t_text = f"{t * 1e6:.2f}" if t else "-"
            s_text = f"{s * 1e6:.2f}" if s else "-"
            print(f"{size_text(size):>8}{t_text:>13}{s_text:>11}{ratio:>8}")
    print(f"\n# {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
