"""mpi-c: dataflow issue against step-by-step issue, side by side, for a plain ring, a pipelined ring, Swing and
the hierarchical allreduces of examples/hierarchical/ (ring or Swing between nodes).

The same generated library runs twice per algorithm and repeat, in two ``mpiexec`` jobs
one after the other: with ``COLLC_ISSUE=steps`` (post a step's messages, wait for all of
them, apply, next step) and by dataflow (the default: each message issued as soon as the
messages it depends on are done).  Times are OSU-style (mean over iterations on each rank,
averaged over ranks), the median over repeats; ``speedup`` is the step-by-step time over
the dataflow time (above 1.0 dataflow is faster).  A last table puts every algorithm's
best issue order against the plain ring run step by step.  Every job checks its results
against numpy; a wrong element ends the benchmark.

The ranks are read as ``--nodes`` nodes of p / nodes ranks (rank r on node r // G), as
collc/hierarchy.py places them; on one machine every message goes through shared memory
whatever the node, so the placement only labels the table.

    python benchmarks/mpi_dataflow.py                       # 4 ranks, 1 KiB .. 64 MiB, 3 repeats
    python benchmarks/mpi_dataflow.py --sizes 1K:1MiB --repeats 1
    python benchmarks/mpi_dataflow.py --only "hier ring,hier swing"  # with the plain ring as baseline
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import collc  # noqa: E402
from collc.backends import mpi_launch  # noqa: E402
from collc.cli import parse_sizes  # noqa: E402

PIPELINED = ROOT / "benchmarks" / "data" / "pipelined_ring_allreduce.coll"
HIERARCHICAL = ROOT / "examples" / "hierarchical"
ORDERS = ("steps", "dataflow")


def algorithms(k: int, per_node: int) -> dict[str, tuple[str, dict[str, int]]]:
    """Label -> (program, parameters besides p); the hierarchical ones take ``per_node`` ranks per node."""
    return {
        "ring": ("ring_allreduce", {}),
        f"pipelined ring k={k}": (str(PIPELINED), {"k": k}),
        "swing_bw": ("swing_bw", {}),
        "hier ring": (str(HIERARCHICAL / "hier_allreduce_ring.coll"), {"local": per_node}),
        "hier swing": (str(HIERARCHICAL / "hier_allreduce_swing.coll"), {"local": per_node}),
    }


def iterations(nbytes: int, budget: float) -> int:
    """Enough iterations for ~``budget`` bytes per (algorithm, order, size), at least 5."""
    return max(5, min(500, int(budget // max(nbytes, 1))))


def human(nbytes: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes // size}{unit}"
    return f"{nbytes}B"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", "-p", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=2, help="nodes the ranks are read as (labels only)")
    parser.add_argument("--k", type=int, default=4, help="the pipelined ring's sub-chunks per block")
    parser.add_argument("--sizes", default="1K:64MiB")
    parser.add_argument("--budget", type=float, default=128e6, help="bytes per (algorithm, order, size)")
    parser.add_argument("--repeats", type=int, default=3, help="job pairs per algorithm; medians are kept")
    parser.add_argument("--only", default=None, help="comma-separated labels to run (the ring always runs)")
    args = parser.parse_args()

    sizes = parse_sizes(args.sizes)
    counts = [n // 4 for n in sizes]  # float32
    iters = [iterations(n, args.budget) for n in sizes]
    per_node = args.ranks // args.nodes
    print(
        f"# mpi-c, {args.ranks} ranks as {args.nodes} nodes x {per_node} (all on {platform.node()}, "
        f"{os.cpu_count()} cores), float32 sum, MPICH via mpi4py"
    )
    print(f"# command: python benchmarks/{Path(__file__).name} " + " ".join(sys.argv[1:]))
    times: dict[tuple[str, str, int], float] = {}
    chosen = algorithms(args.k, per_node)
    if args.only:
        wanted = {"ring", *(label.strip() for label in args.only.split(","))}
        unknown = wanted - set(chosen)
        if unknown:
            parser.error(f"--only: unknown {', '.join(sorted(unknown))} (known: {', '.join(chosen)})")
        chosen = {label: value for label, value in chosen.items() if label in wanted}
    for label, (name, params) in chosen.items():
        inst = collc.load(name).instantiate(p=args.ranks, **params)
        assert inst.verify().ok
        with tempfile.TemporaryDirectory(prefix="collc-dataflow-") as tmp:
            workdir = Path(tmp)
            prepared = mpi_launch.prepare(inst.schedule, ["mpi-c"], workdir)
            runs: dict[str, list[dict[int, float]]] = {order: [] for order in ORDERS}
            for repeat in range(args.repeats):
                for order in ORDERS if repeat % 2 == 0 else ORDERS[::-1]:
                    rows = mpi_launch.run(
                        inst.schedule, counts, kinds=["mpi-c"], iters=iters, warmup=2, check=True, timeout=600,
                        workdir=workdir, prepared=prepared, env={"COLLC_ISSUE": order},
                    )  # fmt: skip
                    bad = [r for r in rows if r.wrong]
                    if bad:
                        print(f"error: {label}, {order}: wrong results: {bad}", file=sys.stderr)
                        return 1
                    runs[order].append({r.size_bytes: r.avg_us for r in rows})
        for order in ORDERS:
            for nbytes in sizes:
                times[(label, order, nbytes)] = statistics.median(run[nbytes] for run in runs[order])
        print(f"\n## {label} ({len(inst.schedule.steps)} steps)")
        print(f"{'size':>8} {'steps(us)':>11} {'dataflow(us)':>13} {'speedup':>8}")
        for nbytes in sizes:
            step, flow = times[(label, "steps", nbytes)], times[(label, "dataflow", nbytes)]
            print(f"{human(nbytes):>8} {step:>11.1f} {flow:>13.1f} {step / flow:>7.2f}x")

    labels = list(chosen)
    print("\n## against the plain ring run step by step (its time / each time; above 1.0 is faster)")
    print(f"{'size':>8} " + " ".join(f"{f'{lab}, {o}':>28}" for lab in labels for o in ORDERS))
    for nbytes in sizes:
        base = times[("ring", "steps", nbytes)]
        cells = " ".join(f"{base / times[(lab, o, nbytes)]:>27.2f}x" for lab in labels for o in ORDERS)
        print(f"{human(nbytes):>8} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
