"""Compressed ring allgather and reduce-scatter on the mpi-c target, against the uncompressed rings.

Designs, each the generated mpi-c library of a verified schedule, run on real MPI
processes (float32, uniform in [-1, 1]):

  allgather       raw    examples/ring_allgather.coll
                  p2p    compressed_ring_allgather_p2p: compress at every send, decompress at
                         every receive (MVAPICH's point-to-point compression)
                  coll   compressed_ring_allgather: each rank compresses its block once, the
                         ring forwards the bytes, every rank decompresses at the end
  reduce-scatter  raw    examples/ring_reduce_scatter.coll
                  p2p    compressed_ring_reduce_scatter: decompress-reduce-compress on every hop
                  coll   a leaf-only reduce-scatter (LEAF_ONLY below): every contribution is
                         compressed once where it originates and decompressed once where it is
                         used, sent straight to its owner (ZeRO++'s qgZ)

with an error-bounded codec (ebq) and a fixed-rate one (fwq, 8 bits).  Every design is
built once; then each repeat runs every design, size by size, one job after another, so
that the ratios compare runs made seconds apart; the medians over repeats are printed.
Times are OSU-style (each rank's mean over iterations, averaged over ranks); wire is the
bytes all ranks sent in one call (compressed payloads at their size); err is the largest
error against the exact float64 result, bound the verifier's.

The second table is the flow-level simulator's prediction (collc/simulate.py) for the same
schedules on a 16-node ring of 100 Gb/s links, with codecs as fast as this machine's C
codecs (measured here, one core) and as fast as a GPU's (300 GB/s).

    python benchmarks/mpi_compression.py                    # 4 ranks, 1..64 MiB, ebq and fwq
    python benchmarks/mpi_compression.py --sizes 1MiB:4MiB --repeats 1
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
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import collc  # noqa: E402
from collc.backends import mpi_launch, mpitools  # noqa: E402
from collc.cli import parse_sizes  # noqa: E402
from collc.ir import ParamValue  # noqa: E402
from collc.resources import data_dir  # noqa: E402
from collc.simulate import NetworkModel, simulate  # noqa: E402
from collc.topologies import parse_topology  # noqa: E402
from collc.verify.compression import analyse  # noqa: E402

CODECS = {"ebq": "ebq(eb=1e-3)", "fwq": "fwq(bits=8, block=32)"}

LEAF_ONLY = """\
# Reduce-scatter with leaf-only compression: at step s every rank sends its contribution to
# block rank + s straight to that block's owner, compressed once; the owner decompresses it
# and adds it.  Every contribution goes through one compression (p - 1 per output element,
# as the ring), but no partial sum is ever re-compressed.
algorithm leafonly_reduce_scatter : reduce_scatter
param p : int where p >= 1
codec q = ebq(eb=1e-3)
chunks p

phase reduce_scatter:
  for step s in 1 .. p:
    send (rank + s) mod p to (rank + s) mod p compress q
    recv rank from (rank - s) mod p reduce compress q
"""

DESIGNS = {
    "allgather": {"raw": "ring_allgather", "p2p": "compressed_ring_allgather_p2p", "coll": "compressed_ring_allgather"},
    "reduce_scatter": {"raw": "ring_reduce_scatter", "p2p": "compressed_ring_reduce_scatter", "coll": LEAF_ONLY},
}

CODEC_TIMER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "collc_zcodec.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
    struct collc_codec c = {(enum collc_codec_kind)atoi(argv[1]), (float)atof(argv[2]), (float)atof(argv[3]),
                            atoi(argv[4]), atoi(argv[5]), "x"};
    const collc_u64 n = 1u << 22;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    collc_u8 *out = malloc(collc_zmax_bytes(&c, n, 1));
    collc_u64 bad, bytes = 0;
    double enc = 1e9, dec = 1e9;
    srand(1);
    for (collc_u64 i = 0; i < n; i++) x[i] = 2.0f * rand() / RAND_MAX - 1.0f;
    for (int k = 0; k < 5; k++) {
        double t0 = now(), t1, t2;
        bytes = collc_zencode(&c, x, n, out, &bad);
        t1 = now();
        collc_zdecode(&c, out, n, y);
        t2 = now();
        if (t1 - t0 < enc) enc = t1 - t0;
        if (t2 - t1 < dec) dec = t2 - t1;
    }
    printf("%g %g %llu\n", 4.0 * n / enc, 4.0 * n / dec, bytes);
    return 0;
}
"""


@dataclass
class Design:
    collective: str
    role: str  # raw | p2p | coll
    codec: str | None  # key of CODECS; None for raw
    schedule: collc.Instance
    entries: list[dict[str, object]]


def instance(source: str, p: int, codec: str | None, params: dict[str, ParamValue] | None = None) -> collc.Instance:
    """The verified instance of ``source`` (a bundled name, or program text such as `LEAF_ONLY`) at ``p`` ranks, or
    at ``params``; ``codec``: a key of `CODECS` for its codec ``q``."""
    alg = collc.parse(source, "leafonly_reduce_scatter.coll") if "\n" in source else collc.load(source)
    if codec is not None:
        alg = alg.with_codecs({"q": CODECS[codec]})
    inst = alg.instantiate(**(params or {"p": p}))
    if not inst.verify().ok:
        raise SystemExit(f"error: {inst.schedule.algorithm} at {params or {'p': p}} does not verify")
    return inst


def bounds(inst: collc.Instance) -> tuple[float, float] | None:
    s = inst.schedule
    if not s.compresses():
        return None
    return (
        analyse(s, input_bound=1.0).stats.error_bound,
        analyse(s, input_bound=1.0, dtype="float64").stats.error_bound,
    )


def codec_speed(codec: str, workdir: Path) -> tuple[float, float, float]:
    """This machine's C codec: (encode, decode) raw bytes per second on one core, and the compression ratio."""
    from collc.codecs import parse_codec
    from collc.codecs.fwq import Fwq
    from collc.codecs.grid import GridCodec, grid_constants

    c = parse_codec(CODECS[codec])
    step = inv2eb = 0.0
    bits = block = 0
    if isinstance(c, GridCodec):
        step, inv2eb = (float(v) for v in grid_constants(c.eb))
    if isinstance(c, Fwq):
        bits, block = c.bits, c.block
    src, exe = workdir / "codec_timer.c", workdir / "codec_timer"
    src.write_text(CODEC_TIMER)
    if not exe.exists():
        flags = ["-O3", "-ffp-contract=off", "-fno-strict-aliasing", "-I", str(data_dir("runtime"))]
        cmd = [str(mpitools.mpicc()), *flags, "-o", str(exe), str(src), "-lm"]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    kind = {"ebq": 1, "fwq": 2}[codec]
    out = subprocess.run([str(exe), str(kind), repr(step), repr(inv2eb), str(bits), str(block)], check=True,
                         capture_output=True, text=True).stdout.split()  # fmt: skip
    enc, dec, nbytes = float(out[0]), float(out[1]), int(out[2])
    return enc, dec, 4.0 * (1 << 22) / nbytes


def human(nbytes: int) -> str:
    return f"{nbytes >> 20}MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10}KiB"


def iterations(nbytes: int) -> int:
    return max(2, min(20, (96 << 20) // max(nbytes, 1)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", "-p", type=int, default=4)
    parser.add_argument("--sizes", default="1MiB:64MiB", help="vector sizes: allgather output, reduce-scatter input")
    parser.add_argument("--repeats", type=int, default=2, help="runs of every design; the medians are printed")
    parser.add_argument("--sim-nodes", type=int, default=16)
    args = parser.parse_args()
    p = args.ranks
    sizes = parse_sizes(args.sizes)
    counts = [n // 4 - (n // 4) % p for n in sizes]
    iters = [iterations(n) for n in sizes]
    started = time.monotonic()
    print(f"# {p} ranks (MPICH {mpitools.mpiexec().name}, shared memory) on {platform.machine()} {platform.node()} "
          f"({os.cpu_count()} cores), mpi-c target, float32 uniform in [-1, 1]")  # fmt: skip
    print(f"# command: python benchmarks/{Path(__file__).name} " + " ".join(sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="collc-bench-") as tmp:
        work = Path(tmp)
        designs: list[Design] = []
        for coll, roles in DESIGNS.items():
            for role, source in roles.items():
                for codec in [None] if role == "raw" else list(CODECS):
                    inst = instance(source, p, codec)
                    folder = work / f"{coll}_{role}_{codec}"
                    entries = mpi_launch.prepare(inst.schedule, ("mpi-c",), folder, bounds(inst))
                    designs.append(Design(coll, role, codec, inst, entries))
        results: dict[tuple[str, str, str | None, int], list[mpi_launch.MpiRow]] = {}
        for _ in range(args.repeats):
            for d in designs:
                s = d.schedule.schedule
                error_bounds = analyse(s, input_bound=1.0).bound if s.compresses() else None
                rows = mpi_launch.run(
                    s, counts, kinds=("mpi-c",), iters=iters, warmup=1, timeout=600, workdir=work / "job",
                    error_bounds=error_bounds, prepared=d.entries,
                )  # fmt: skip
                for row in rows:
                    if row.wrong:
                        print(
                            f"error: {s.algorithm} ({d.codec}): {row.wrong} elements beyond the bound", file=sys.stderr
                        )
                        return 1
                    results.setdefault((d.collective, d.role, d.codec, row.size_bytes), []).append(row)
        speeds = {codec: codec_speed(codec, work) for codec in CODECS}
    measured(results, sizes)
    print()
    for c, (e, d, r) in speeds.items():
        print(f"# this machine's C codec {CODECS[c]}, one core: encode {e / 1e9:.2f} GB/s, decode {d / 1e9:.2f} GB/s, "
              f"ratio {r:.2f} on the benchmark's data")  # fmt: skip
    predicted(args.sim_nodes, sizes, speeds)
    print(f"\n# total {time.monotonic() - started:.0f} s")
    return 0


def median(rows: list[mpi_launch.MpiRow], field: str) -> float:
    return statistics.median(getattr(r, field) for r in rows)


def measured(results: dict, sizes: list[int]) -> None:
    print("\n## Measured: time (ms), ratios of times (x faster), wire bytes, max error against the bound")
    for coll in DESIGNS:
        for codec in CODECS:
            print(f"\n### {coll}, {CODECS[codec]}")
            print(f"{'size':>6} {'raw':>8} {'p2p':>8} {'coll':>8} | {'raw/p2p':>7} {'raw/coll':>8} {'p2p/coll':>8} | "
                  f"{'wire raw/p2p':>12} {'raw/coll':>8} | {'err p2p':>9} {'err coll':>9} {'bound':>7}")  # fmt: skip
            for nbytes in sizes:
                raw = results[(coll, "raw", None, nbytes)]
                p2p = results[(coll, "p2p", codec, nbytes)]
                col = results[(coll, "coll", codec, nbytes)]
                t = {k: median(v, "avg_us") / 1e3 for k, v in (("raw", raw), ("p2p", p2p), ("coll", col))}
                w = {k: median(v, "wire_bytes") for k, v in (("raw", raw), ("p2p", p2p), ("coll", col))}
                print(
                    f"{human(nbytes):>6} {t['raw']:>8.2f} {t['p2p']:>8.2f} {t['coll']:>8.2f} | "
                    f"{t['raw'] / t['p2p']:>6.2f}x {t['raw'] / t['coll']:>7.2f}x {t['p2p'] / t['coll']:>7.2f}x | "
                    f"{w['raw'] / w['p2p']:>11.2f}x {w['raw'] / w['coll']:>7.2f}x | "
                    f"{max(r.max_abs_error for r in p2p):>9.2e} {max(r.max_abs_error for r in col):>9.2e} "
                    f"{col[0].error_bound:>7.1e}"
                )


def predicted(nodes: int, sizes: list[int], speeds: dict[str, tuple[float, float, float]]) -> None:
    ring = parse_topology(f"ring:{nodes}")
    print(f"\n## Simulated: {nodes}-node ring, 100 Gb/s links (collc/simulate.py), ratios of times (x faster)")
    for coll in DESIGNS:
        for codec in CODECS:
            enc, dec, _ = speeds[codec]
            cpu = 2 / (1 / enc + 1 / dec)
            print(f"\n### {coll}, {CODECS[codec]}: codecs at {cpu / 1e9:.2f} GB/s (this CPU) | at 300 GB/s (GPU-class)")
            ratios = f"{'raw/p2p':>8} {'raw/coll':>8} {'p2p/coll':>8}"
            print(f"{'size':>6} {ratios} | {ratios}")
            times = {}
            for bandwidth in (cpu, 300e9):
                model = NetworkModel(link_bandwidth=12.5e9, codec_bandwidth=bandwidth)
                for role, source in DESIGNS[coll].items():
                    inst = instance(source, nodes, None if role == "raw" else codec)
                    times[(bandwidth, role)] = simulate(inst.schedule, ring, sizes, model).times
            for i, nbytes in enumerate(sizes):
                line = f"{human(nbytes):>6}"
                for bandwidth in (cpu, 300e9):
                    raw, p2p, col = (times[(bandwidth, r)][i] for r in ("raw", "p2p", "coll"))
                    line += f" {raw / p2p:>7.2f}x {raw / col:>7.2f}x {p2p / col:>7.2f}x" + (
                        " |" if bandwidth == cpu else ""
                    )
                print(line)


if __name__ == "__main__":
    sys.exit(main())
