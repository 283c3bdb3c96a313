"""Generated MPI executors against the MPI library's own allreduce, side by side in the same jobs.

For every algorithm, one ``mpiexec`` job runs, size by size, MPICH's native
``MPI_Allreduce`` (through mpi4py's ``comm.Allreduce``), the generated mpi-c
library (called through ctypes, as ``comm.Allreduce`` is called through
mpi4py) and the generated mpi-py module, so that each ratio compares runs
made seconds apart on the same processes.  Times are OSU-style: the mean over
iterations on each rank, averaged over ranks.  ``speed`` is native time / our
time: above 1.0 the generated code is faster.

    python benchmarks/mpi_vs_native.py                          # 4 ranks, 1 KiB .. 64 MiB
    python benchmarks/mpi_vs_native.py --sizes 1K:1MiB --impls mpi-py
    python benchmarks/mpi_vs_native.py --algorithms ring_allreduce --impls mpi-c --small swing_lat --small-below 64KiB
    python benchmarks/mpi_vs_native.py --network 2x10gbit --impls mpi-c   # across 2 emulated hosts (root)

``--network HOSTS[xRATE]`` runs every job on an emulated cluster (`collc.netemu`, docs/network.md): the
ranks in blocks over HOSTS network namespaces, MPI over TCP between them, links shaped to RATE.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import collc  # noqa: E402
from collc import netemu  # noqa: E402
from collc.backends import mpi_launch  # noqa: E402
from collc.cli import parse_size, parse_sizes  # noqa: E402

ALGORITHMS = ("ring_allreduce", "rabenseifner", "swing_bw", "swing_lat")
SMALL = "mpi-c+small"  # the mpi-c library with a small-message schedule (--small)
GOALS = {"mpi-c": 1.0, "mpi-py": 1 / 1.2, SMALL: 1.0}  # speed at >= 1 MiB: best mpi-c >= 1.0x, mpi-py within 1.2x
SMALL_GOAL = 0.9  # mpi-c+small below 1 MiB


def iterations(nbytes: int, budget: float) -> int:
    """Enough iterations for ~``budget`` bytes moved per implementation and size (at least 5)."""
    return max(5, min(1000, int(budget // max(nbytes, 1))))


def human(nbytes: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes // size}{unit}"
    return f"{nbytes}B"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", "-p", type=int, default=4)
    parser.add_argument("--sizes", default="1K:64MiB")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS))
    parser.add_argument("--impls", default="mpi-c,mpi-py", help="generated implementations to compare")
    parser.add_argument("--budget", type=float, default=256e6, help="bytes per (implementation, size)")
    parser.add_argument("--repeats", type=int, default=1, help="jobs per algorithm; the median ratio is kept")
    parser.add_argument(
        "--small", default=None, help="also run mpi-c libraries with this small-message schedule (column mpi-c+small)"
    )
    parser.add_argument("--small-below", default="64KiB", help="the small-message threshold (with --small)")
    parser.add_argument("--network", default=None, help="HOSTS[xRATE]: run on an emulated cluster (collc.netemu)")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        cluster = None
        if args.network:
            cluster = stack.enter_context(
                netemu.Cluster.of(
                    netemu.parse_network(args.network), args.ranks // netemu.parse_network(args.network).hosts
                )
            )
        return _main(args, cluster)


def _main(args: argparse.Namespace, cluster: netemu.Cluster | None) -> int:
    """The jobs and the tables (on ``cluster`` when given)."""
    launch: dict[str, object] = {}
    if cluster is not None:
        launch = {"mpiexec_prefix": cluster.mpiexec_prefix, "mpiexec_args": cluster.mpiexec_args, "env": cluster.env()}

    sizes = parse_sizes(args.sizes)
    counts = [n // 4 for n in sizes]  # float32
    iters = [iterations(n, args.budget) for n in sizes]
    impls = [k for k in args.impls.split(",") if k]
    kinds = ["native", *impls]
    small = collc.load(args.small).instantiate(p=args.ranks) if args.small else None
    if small is not None:
        assert small.verify().ok
        impls.append(SMALL)
    below = parse_size(args.small_below)
    where = f", on {cluster.describe()} (MPI over TCP between hosts)" if cluster is not None else ""
    print(f"# {args.ranks} ranks on {platform.node()} ({os.cpu_count()} cores){where}, float32 sum, MPICH via mpi4py")
    print(f"# command: python benchmarks/{Path(__file__).name} " + " ".join(sys.argv[1:]))
    speeds: dict[tuple[str, str], dict[int, float]] = {}
    for name in args.algorithms.split(","):
        inst = collc.load(name).instantiate(p=args.ranks)
        assert inst.verify().ok
        runs: list[dict[tuple[str, int], float]] = []
        with tempfile.TemporaryDirectory(prefix="collc-native-") as tmp:
            prepared = mpi_launch.prepare(inst.schedule, kinds, Path(tmp) / "plain")
            if small is not None:
                (entry,) = mpi_launch.prepare(
                    inst.schedule, ["mpi-c"], Path(tmp) / "small", small=small.schedule, small_below=below
                )
                prepared.append({**entry, "name": SMALL})
            for _ in range(args.repeats):
                rows = mpi_launch.run(
                    inst.schedule, counts, kinds=kinds, iters=iters, warmup=2, check=True, timeout=300,
                    workdir=Path(tmp), prepared=prepared, **launch,  # type: ignore[arg-type]
                )  # fmt: skip
                bad = [r for r in rows if r.wrong]
                if bad:
                    print(f"error: {name}: wrong results: {bad}", file=sys.stderr)
                    return 1
                runs.append({(r.impl, r.size_bytes): r.avg_us for r in rows})
        print(f"\n## {name}")
        header = f"{'size':>8} {'native(us)':>11}"
        for impl in impls:
            header += f" {impl + '(us)':>11} {'speed':>6}"
        print(header)
        for nbytes in sizes:
            native = statistics.median(run[("native", nbytes)] for run in runs)
            line = f"{human(nbytes):>8} {native:>11.1f}"
            for impl in impls:
                ours = statistics.median(run[(impl, nbytes)] for run in runs)
                speed = statistics.median(run[("native", nbytes)] / run[(impl, nbytes)] for run in runs)
                speeds.setdefault((name, impl), {})[nbytes] = speed
                line += f" {ours:>11.1f} {speed:>5.2f}x"
            print(line)

    if small is not None:
        small_sizes = [n for n in sizes if n < 1 << 20]
        print(f"\n## summary below 1 MiB, {SMALL} ({args.small} below {args.small_below})")
        for name in args.algorithms.split(","):
            cells = speeds[(name, SMALL)]
            worst = min((cells[n] for n in small_sizes), default=float("nan"))
            verdict = "met" if worst >= SMALL_GOAL else "NOT met"
            print(f"{name}: worst speed {worst:.2f}x; goal >= {SMALL_GOAL:.2f}x at every size below 1 MiB: {verdict}")

    print("\n## summary at >= 1 MiB (speed = native time / generated time)")
    big = [n for n in sizes if n >= 1 << 20]
    for impl in impls:
        best = {n: max(speeds[(a, impl)][n] for a in args.algorithms.split(",")) for n in big}
        if not best:
            continue
        worst_best = min(best.values())
        goal = GOALS[impl]
        verdict = "met" if worst_best >= goal else "NOT met"
        print(
            f"{impl}: best algorithm's speed per size: "
            + ", ".join(f"{human(n)} {s:.2f}x" for n, s in best.items())
            + f"; goal >= {goal:.2f}x at every size: {verdict}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
