"""Generated mpi-c allreduce libraries against the MPI library's own, both called from C, 1 KiB .. 16 MiB.

benchmarks/mpi_vs_native.py calls the generated library through ctypes and the MPI library
through mpi4py, so at small sizes it also measures Python's per-call cost, which is larger for
ctypes.  Here a C driver (benchmarks/data/coll_pmpi.c) runs with the library preloaded as the
PMPI shim and times, in the same process, ``MPI_Allreduce`` (the library's schedule) against
``PMPI_Allreduce`` (the MPI library's own algorithm), alternating which goes first, size by size.
``speed`` is native time / collc time (above 1.0 collc is faster); medians over rounds.  Results
are compared bit for bit (small-integer inputs: exact float sums); a wrong element ends the run.

Libraries: the ring, swing_lat (latency-optimal), and the ring with swing_lat as its
small-message schedule below ``--small-below`` (`collc compile --small`).

Each library runs in ``--repeats`` jobs, the libraries taking turns (in reverse order every other
turn): on a machine with fewer cores than ranks, where the ranks land and what else runs moves a
job's figures by 10-20 % at small sizes, and one job per library would compare those placements
rather than the libraries.  The medians are over every round of every job.

    python benchmarks/mpi_small.py                        # 4 ranks, 1 KiB .. 16 MiB, 5 rounds, 3 jobs
    python benchmarks/mpi_small.py --sizes 1K:64K --rounds 3 --repeats 1
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import collc  # noqa: E402
from collc.backends.mpitools import mpi_env, mpicc, mpiexec  # noqa: E402
from collc.cli import parse_size, parse_sizes  # noqa: E402

DRIVER = ROOT / "benchmarks" / "data" / "coll_pmpi.c"
GOAL_SMALL, GOAL_LARGE = 0.9, 1.0  # speed below 1 MiB and from 1 MiB up


def human(nbytes: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes // size}{unit}"
    return f"{nbytes}B"


def build(tmp: Path, ranks: int, below: int) -> dict[str, Path]:
    ring = collc.load("ring_allreduce").instantiate(p=ranks)
    lat = collc.load("swing_lat").instantiate(p=ranks)
    libs = {}
    for label, inst, small in (("ring", ring, None), ("swing_lat", lat, None), ("ring+swing_lat", ring, lat)):
        files = inst.compile("mpi-c", tmp / label.replace("+", "_"), small=small, small_below=below)
        libs[label] = files[-1]
    return libs


def run(driver: Path, lib: Path, ranks: int, rounds: int, budget: int, sizes: list[int]) -> dict[int, list[tuple]]:
    command = [str(mpiexec()), "-n", str(ranks), "-genv", "LD_PRELOAD", str(lib), str(driver), "allreduce", "0",
               str(rounds), str(budget), *map(str, sizes)]  # fmt: skip
    env = mpi_env(ranks, {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"$ {' '.join(command)}\nexit status {proc.returncode}\n{proc.stdout}{proc.stderr}")
    rows: dict[int, list[tuple]] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("row "):
            _, _, size, native, ours, wrong, _ = line.split()
            if int(wrong):
                raise SystemExit(f"{lib.name}: {wrong} wrong elements at {size} bytes")
            rows.setdefault(int(size), []).append((float(native), float(ours)))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", "-p", type=int, default=4)
    parser.add_argument("--sizes", default="1K:16MiB")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="jobs per library, the libraries taking turns")
    parser.add_argument("--budget", type=parse_size, default=64 << 20, help="bytes per (implementation, size)")
    parser.add_argument("--small-below", type=parse_size, default=64 << 10)
    args = parser.parse_args()
    sizes = parse_sizes(args.sizes)
    print(f"# {args.ranks} ranks on {platform.node()} ({os.cpu_count()} cores), float32 sum, C driver, MPICH")
    print(f"# command: python benchmarks/{Path(__file__).name} " + " ".join(sys.argv[1:]))
    print(f"# {args.repeats} job(s) per library, {args.rounds} rounds each, the libraries taking turns")
    speeds: dict[str, dict[int, float]] = {}
    with tempfile.TemporaryDirectory(prefix="collc-small-") as tmp:
        driver = Path(tmp) / "coll_pmpi"
        subprocess.run([str(mpicc()), "-O2", "-o", str(driver), str(DRIVER), "-lm"], check=True)
        libs = build(Path(tmp), args.ranks, args.small_below)
        runs: dict[str, dict[int, list[tuple]]] = {label: {} for label in libs}
        for turn in range(args.repeats):
            for label in list(libs) if turn % 2 == 0 else list(reversed(libs)):
                for n, got in run(driver, libs[label], args.ranks, args.rounds, args.budget, sizes).items():
                    runs[label].setdefault(n, []).extend(got)
        for label, rows in runs.items():
            print(f"\n## {label}")
            print(f"{'size':>8} {'native(us)':>11} {'collc(us)':>10} {'speed':>6}")
            for n in sizes:
                native = statistics.median(r[0] for r in rows[n])
                ours = statistics.median(r[1] for r in rows[n])
                speed = statistics.median(r[0] / r[1] for r in rows[n])
                speeds.setdefault(label, {})[n] = speed
                print(f"{human(n):>8} {native:>11.1f} {ours:>10.1f} {speed:>5.2f}x")
    print("\n## summary (speed = native time / collc time; medians over rounds)")
    for label, cells in speeds.items():
        small = [s for n, s in cells.items() if n < 1 << 20]
        large = [s for n, s in cells.items() if n >= 1 << 20]
        verdict = (min(small, default=1) >= GOAL_SMALL, min(large, default=1) >= GOAL_LARGE)
        print(
            f"{label}: below 1 MiB worst {min(small, default=float('nan')):.2f}x (goal {GOAL_SMALL}x: "
            f"{'met' if verdict[0] else 'NOT met'}); from 1 MiB worst {min(large, default=float('nan')):.2f}x "
            f"(goal {GOAL_LARGE}x: {'met' if verdict[1] else 'NOT met'})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
