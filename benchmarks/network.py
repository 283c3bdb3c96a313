"""collc's generated MPI libraries across an emulated network, against MPICH's own collectives and the simulator.

Every job runs on an emulated cluster (`collc.netemu`, docs/network.md): HOSTS network namespaces of
RANKS_PER_HOST ranks each, links shaped to a rate with tc, MPICH's OFI tcp provider between hosts and shared
memory inside one.  A C driver (benchmarks/data/coll_pmpi.c) runs with a generated library preloaded as the
PMPI shim and times, in the same process and size by size, ``MPI_<coll>`` (the library's schedule) against
``PMPI_<coll>`` (MPICH's own algorithm), alternating which goes first; results are compared element by element
(bit for bit for the exact libraries, within the verified error bound for the compressed ones).  ``speed`` is
MPICH's time / collc's time: above 1.0 collc is faster.  Medians over every round of every job; the libraries
take turns job by job, so each ratio compares runs made seconds apart.

Tables:

* ``exact``: the uncompressed libraries (ring, Swing, Rabenseifner, Bruck; with more than one rank per host the
  hierarchical programs too) for allreduce, allgather and reduce-scatter;
* ``compression``: allgather and reduce-scatter uncompressed (raw), compressed at every hop (p2p: MVAPICH's
  point-to-point design) and compressed once per contribution (coll: compressed_ring_allgather, which
  compresses each block once and forwards the bytes, and compressed_direct_reduce_scatter, which sends each
  contribution straight to its owner in one step), and the two compressed allreduces (per hop:
  compressed_ring_allreduce; collective-level: compressed_direct_allreduce), all with ebq(eb=1e-3) and
  COLLC_SHIM_COMPRESS=1
  (homomorphic_allreduce is left out: its hq payloads are int32, as large as the floats);
* beside each measured time, the flow-level simulator's prediction (collc/simulate.py) for the same schedule on
  the same shape (``fattree:HOSTS``: one link per host to a switch, as the emulation's bridge) at the links'
  nominal rate, and at the rate the hosts actually reach (``calibrated``: MPICH's own allgather at the largest
  size, the bytes each host sends over its time; on a machine with fewer cores than ranks the kernel's TCP work
  and the ranks share the cores, so a host sends below its link's rate), with the machine's C codec speed.

    python benchmarks/network.py                                   # 4 hosts x 1 rank, 1 and 10 Gbit/s
    python benchmarks/network.py --hosts 2 --ranks-per-host 2 --rates 10gbit --tables exact
    python benchmarks/network.py --write-results                  # also put the tables into RESULTS.md

Needs root (network namespaces); ``python -m collc.netemu`` says whether this machine can run a cluster.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from mpi_compression import CODECS, codec_speed, instance  # noqa: E402

import collc  # noqa: E402
from collc import netemu  # noqa: E402
from collc.backends.mpitools import mpicc  # noqa: E402
from collc.cli import parse_size, parse_sizes  # noqa: E402
from collc.goodput import size_text as human  # noqa: E402
from collc.simulate import NetworkModel, simulate  # noqa: E402
from collc.topologies import parse_topology  # noqa: E402
from collc.verify.compression import analyse  # noqa: E402

DRIVER = ROOT / "benchmarks" / "data" / "coll_pmpi.c"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
SECTION = "## Across an emulated network, {shape}, {rates} ({tables}): collc against MPICH (`benchmarks/network.py`)"
EXACT = {
    "allreduce": ["ring_allreduce", "rabenseifner", "swing_bw"],
    "allgather": ["ring_allgather", "direct_allgather", "bruck_allgather", "recursive_doubling_allgather"],
    "reduce_scatter": ["ring_reduce_scatter", "pairwise_reduce_scatter"],
}
TORUS = ["swing_bw_torus", "swing_lat_torus", "bucket_torus", "recdoub_bw_torus"]  # allreduces given the dims
HIERARCHICAL = {
    "allreduce": ["hier_allreduce_ring", "hier_allreduce_swing"],
    "allgather": ["hier_allgather", "node_aware_allgather"],
    "reduce_scatter": ["node_aware_reduce_scatter"],
}
COMPRESSED = {
    "allgather": {"raw": "ring_allgather", "p2p": "compressed_ring_allgather_p2p", "coll": "compressed_ring_allgather"},
    "reduce_scatter": {
        "raw": "ring_reduce_scatter",
        "p2p": "compressed_ring_reduce_scatter",
        "coll": "compressed_direct_reduce_scatter",
    },
    "allreduce": {"raw": "ring_allreduce", "p2p": "compressed_ring_allreduce", "coll": "compressed_direct_allreduce"},
}
CODEC = "ebq"  # the error-bounded codec of the compressed designs
GOAL = 1.0  # the best exact library's speed at >= 1 MiB
GOAL_SMALL = 0.9  # and below 1 MiB


@dataclass
class Lib:
    """One generated library and what its rows are judged by."""

    label: str  # algorithm name, or collective/role for the compression table
    collective: str
    inst: collc.Instance
    tol: float = 0.0  # 0: bit for bit
    compress: bool = False
    path: Path | None = None
    rows: dict[int, list[tuple[float, float, float]]] = field(default_factory=dict)  # size -> (native, ours, err)


def tolerance(inst: collc.Instance, p: int) -> float:
    """The verified float32 error bound of a compressed schedule (inputs in [-1, 1]) plus the rounding of MPICH's
    own float32 sum the result is compared with."""
    return analyse(inst.schedule, input_bound=1.0).stats.error_bound + 2.0 * p * p * 2.0**-23


def libraries(tables: list[str], hosts: int, per: int, dims: tuple[int, ...] | None) -> list[Lib]:
    p = hosts * per
    libs: list[Lib] = []
    if "exact" in tables:
        for coll, names in EXACT.items():
            for name in names:
                try:
                    libs.append(Lib(name, coll, instance(name, p, None)))
                except collc.CollError as err:  # e.g. a power-of-two program at another p
                    print(f"# {name} left out at p={p}: {err.message}", file=sys.stderr)
        if dims is not None and len(dims) > 1 and per == 1:
            for name in TORUS:
                try:
                    libs.append(Lib(name, "allreduce", instance(name, p, None, {"dims": dims})))
                except collc.CollError as err:
                    print(f"# {name} left out on {'x'.join(map(str, dims))}: {err.message}", file=sys.stderr)
        if per > 1:
            for coll, names in HIERARCHICAL.items():
                libs += [Lib(name, coll, instance(name, p, None, {"nodes": hosts, "local": per})) for name in names]
    if "compression" in tables:
        for coll, roles in COMPRESSED.items():
            for role, source in roles.items():
                inst = instance(source, p, None if role == "raw" else CODEC)
                lossy = inst.schedule.compresses()
                libs.append(Lib(f"{coll}/{role}", coll, inst, tolerance(inst, p) if lossy else 0.0, lossy))
    return libs


def run_job(cluster: netemu.Cluster, driver: Path, lib: Lib, args: argparse.Namespace, sizes: list[int]) -> None:
    assert lib.path is not None
    argv = ["-genv", "LD_PRELOAD", str(lib.path), str(driver), lib.collective, repr(lib.tol), str(args.rounds),
            str(args.budget), *map(str, sizes)]  # fmt: skip
    env = dict(kv.split("=", 1) for kv in args.env)
    if lib.compress:
        env["COLLC_SHIM_COMPRESS"] = "1"
    proc = cluster.mpiexec(argv, env=env, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"error: {lib.label}: the job failed (exit {proc.returncode})\n{proc.stdout}{proc.stderr}")
    for line in proc.stdout.splitlines():
        if line.startswith("row "):
            _, _, size, native, ours, wrong, err = line.split()
            if int(wrong):
                raise SystemExit(f"error: {lib.label}: {wrong} wrong elements at {size} bytes (largest error {err})")
            lib.rows.setdefault(int(size), []).append((float(native), float(ours), float(err)))


def med(rows: list[tuple[float, float, float]], k: int) -> float:
    return statistics.median(r[k] for r in rows)


def speed(rows: list[tuple[float, float, float]]) -> float:
    return statistics.median(r[0] / r[1] for r in rows)


def calibrated_rate(libs: list[Lib], hosts: int, nominal: float) -> float:
    """Bytes/s a host sends in MPICH's own allgather at the largest size (at most the nominal rate)."""
    rows = [(n, med(r, 0)) for lib in libs if lib.collective == "allgather" for n, r in lib.rows.items()]
    if not rows:
        return nominal
    n, us = max(rows)
    per_host = n * (hosts - 1) / hosts  # what leaves each host (its ranks' blocks to every other host)
    return min(nominal, per_host / (us * 1e-6))


def predict(inst: collc.Instance, topology: str, sizes: list[int], rate: float, codec_bw: float) -> list[float]:
    """Simulated seconds per size on ``topology`` (one rank per host) at ``rate`` bytes/s per link."""
    execution = "lockstep" if inst.schedule.compresses() else "dataflow"  # as the mpi-c runtime issues them
    model = NetworkModel(link_bandwidth=rate, link_latency=5e-6, hop_latency=0.0, codec_bandwidth=codec_bw,
                         execution=execution)  # fmt: skip
    return list(simulate(inst.schedule, parse_topology(topology), sizes, model).times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--ranks-per-host", type=int, default=1)
    parser.add_argument("--rates", default="1gbit,10gbit", help="link rates, one cluster each (unshaped: none)")
    parser.add_argument("--shape", default="star", help="the hosts' links: star (one switch), ring, torus:AxB")
    parser.add_argument(
        "--sizes",
        default="1MiB,4MiB,16MiB,64MiB",
        help="bytes of the whole float32 vector: a list or a range (1MiB:64MiB)",
    )
    parser.add_argument("--tables", default="exact,compression", help="exact, compression")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every size in one job")
    parser.add_argument("--repeats", type=int, default=2, help="jobs per library, the libraries taking turns")
    parser.add_argument("--budget", type=parse_size, default=64 << 20, help="bytes per (implementation, size, round)")
    parser.add_argument("--collectives", default="allreduce,allgather,reduce_scatter", help="which to run")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="for the ranks (repeatable)")
    parser.add_argument("--write-results", action="store_true", help=f"replace the section of {RESULTS.name}")
    args = parser.parse_args()
    tables = [t for t in args.tables.split(",") if t]
    sizes = [n for part in args.sizes.split(",") for n in parse_sizes(part)]
    hosts, per = args.hosts, args.ranks_per_host
    p = hosts * per
    dims = netemu.parse_shape(args.shape, hosts)
    topology = f"fattree:{hosts}" if dims is None else netemu.shape_text(dims).replace("ring", f"ring:{hosts}")
    started = time.monotonic()
    out: list[str] = []

    def say(line: str = "") -> None:
        print(line, flush=True)
        out.append(line)

    say(f"# {p} ranks on {hosts} emulated hosts x {per} ranks, on {platform.node()} ({os.cpu_count()} cores, "
        f"{platform.machine()}), float32 sum, MPICH over OFI tcp between hosts, C driver")  # fmt: skip
    say(f"# command: python benchmarks/{Path(__file__).name} " + " ".join(sys.argv[1:]))
    if args.env:
        say(f"# the ranks' environment adds: {' '.join(args.env)}")
    with tempfile.TemporaryDirectory(prefix="collc-network-") as tmp:
        work = Path(tmp)
        driver = work / "coll_pmpi"
        subprocess.run([str(mpicc()), "-O2", "-o", str(driver), str(DRIVER), "-lm"], check=True)
        codec_bw = 2 / sum(1 / s for s in codec_speed(CODEC, work)[:2])
        say(f"# this machine's C codec {CODECS[CODEC]} (one core): {codec_bw / 1e9:.2f} GB/s encode+decode average")
        for rate_text in args.rates.split(","):
            libs = [lib for lib in libraries(tables, hosts, per, dims) if lib.collective in args.collectives]
            for i, lib in enumerate(libs):
                lib.path = lib.inst.compile("mpi-c", work / f"lib{i}")[-1]
            rate = None if rate_text == "unshaped" else rate_text
            with netemu.Cluster(hosts, per, rate, shape=dims) as cluster:
                for turn in range(args.repeats):
                    for lib in libs if turn % 2 == 0 else list(reversed(libs)):
                        run_job(cluster, driver, lib, args, sizes)
                        elapsed = time.monotonic() - started
                        print(
                            f"  [{elapsed:.0f} s] {rate_text} job {turn + 1}/{args.repeats}: {lib.label}",
                            file=sys.stderr,
                        )
                describe = cluster.describe()
            nominal = None if rate is None else netemu.parse_rate(rate) / 8
            real = None if nominal is None else calibrated_rate(libs, hosts, nominal)
            report(say, libs, sizes, topology, per, describe, nominal, real, codec_bw)
    say(f"\n# total {time.monotonic() - started:.0f} s")
    if args.write_results:
        shape = f"{hosts} hosts x {per} ranks" + (f", {args.shape}" if dims else "")
        what = ", ".join(tables) + ("" if set(EXACT) <= set(args.collectives.split(",")) else f"; {args.collectives}")
        what += "" if args.sizes == parser.get_default("sizes") else f"; {args.sizes}"  # a section per size list
        write_results(out, SECTION.format(shape=shape, rates=args.rates, tables=what))
    return 0


def report(say, libs: list[Lib], sizes: list[int], topology: str, per: int, describe: str, nominal: float | None,
           real: float | None, codec_bw: float) -> None:  # fmt: skip
    """The tables of one cluster (beside the simulator's predictions where each host runs one rank on shaped
    links)."""
    say(f"\n=== {describe}")
    sim = per == 1 and nominal is not None and real is not None
    if sim:
        say(f"# simulator: {topology}, links at {nominal * 8 / 1e9:g} Gbit/s nominal and at "
            f"{real * 8 / 1e9:.2f} Gbit/s calibrated (MPICH's allgather at {human(max(sizes))})")  # fmt: skip
    exact = [lib for lib in libs if not lib.compress and "/" not in lib.label]
    if exact:
        say("\n--- exact libraries against MPICH (times in ms; sim: predicted ms, nominal / calibrated links)")
        say(f"{'collective':<15}{'algorithm':<22}{'size':>6} {'MPICH':>8} {'collc':>8} {'speed':>6}"
            + (f" {'sim nom':>8} {'sim cal':>8} {'meas/cal':>8}" if sim else ""))  # fmt: skip
        for lib in exact:
            pred = [predict(lib.inst, topology, sizes, r, codec_bw) for r in (nominal, real)] if sim else []
            for j, n in enumerate(sizes):
                rows = lib.rows[n]
                line = (f"{lib.collective:<15}{lib.label:<22}{human(n):>6} {med(rows, 0) / 1e3:>8.2f} "
                        f"{med(rows, 1) / 1e3:>8.2f} {speed(rows):>5.2f}x")  # fmt: skip
                if sim:
                    ratio = med(rows, 1) * 1e-6 / pred[1][j]
                    line += f" {pred[0][j] * 1e3:>8.2f} {pred[1][j] * 1e3:>8.2f} {ratio:>7.2f}x"
                say(line)
        say("\n--- best exact library per collective and size (speed = MPICH's time / collc's)")
        for coll in (c for c in EXACT if any(lib.collective == c for lib in exact)):
            cells = {n: max((speed(lib.rows[n]), lib.label) for lib in exact if lib.collective == coll) for n in sizes}
            goals = []
            for label, goal, part in (
                ("from 1 MiB", GOAL, lambda n: n >= 1 << 20),
                ("below", GOAL_SMALL, lambda n: n < 1 << 20),
            ):
                got = [s for n, (s, _) in cells.items() if part(n)]
                if got:
                    goals.append(f"goal >= {goal:.1f}x {label}: {'met' if min(got) >= goal else 'NOT met'}")
            say(f"{coll}: " + ", ".join(f"{human(n)} {s:.2f}x ({a})" for n, (s, a) in cells.items())
                + "; " + "; ".join(goals))  # fmt: skip
    lossy = [lib for lib in libs if "/" in lib.label]
    if lossy:
        say("\n--- compression (times in ms; ratios: x faster; err: the largest error, bound: the verified one)")
        say(f"{'collective':<15}{'size':>6} {'MPICH':>8} {'raw':>8} {'p2p':>8} {'coll':>8} | {'raw/coll':>8} "
            f"{'p2p/coll':>8} {'MPICH/coll':>10} | {'err coll':>9} {'bound':>8}"
            + (f" | {'sim raw/coll':>12} {'sim p2p/coll':>12}" if sim else ""))  # fmt: skip
        for coll in COMPRESSED:
            by = {lib.label.split("/")[1]: lib for lib in lossy if lib.collective == coll}
            if len(by) < 3:
                continue
            pred = {r: predict(by[r].inst, topology, sizes, real, codec_bw) for r in by} if sim else {}
            for j, n in enumerate(sizes):
                t = {r: med(by[r].rows[n], 1) / 1e3 for r in by}
                native = statistics.median(x[0] for r in by for x in by[r].rows[n]) / 1e3
                line = (f"{coll:<15}{human(n):>6} {native:>8.2f} {t['raw']:>8.2f} {t['p2p']:>8.2f} {t['coll']:>8.2f} | "
                        f"{t['raw'] / t['coll']:>7.2f}x {t['p2p'] / t['coll']:>7.2f}x {native / t['coll']:>9.2f}x | "
                        f"{max(x[2] for x in by['coll'].rows[n]):>9.2e} {by['coll'].tol:>8.1e}")  # fmt: skip
                if sim:
                    line += f" | {pred['raw'][j] / pred['coll'][j]:>11.2f}x {pred['p2p'][j] / pred['coll'][j]:>11.2f}x"
                say(line)


def write_results(lines: list[str], title: str) -> None:
    """Replace (or append) this benchmark's section of RESULTS.md: its command, machine and tables."""
    text = RESULTS.read_text()
    body = f"{title}\n\nMachine: {platform.node()}, {os.cpu_count()} cores, {platform.platform()}, " \
        f"{time.strftime('%Y-%m-%d')}.\n\n```\n" + "\n".join(lines) + "\n```\n"  # fmt: skip
    start = text.find(title)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + body
    else:
        fence = text.find("\n```\n", text.find("```", start) + 3)  # the end of the section's table
        text = text[:start] + body + text[fence + 5 :]
    RESULTS.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
