"""The Swing paper's torus results (De Sensi et al., NSDI'24, §5), reproduced with `collc sim`.

With the paper's network (400 Gb/s links, 100 ns link latency, 300 ns per hop,
one rank per node, 2·D ports per node) and collc's one calibrated per-step
software overhead, this prints the paper's figures next to collc's with the
relative error:

* 64x64 torus: the 32-byte runtimes of Swing, recursive doubling (single port
  and over 2·D ports, "M"), bucket and Hamiltonian rings; Swing's gain over the best other
  algorithm at 2 MiB; the first size where bucket beats Swing; Swing's share of
  the peak at 512 MiB;
* 8x8 torus: goodput at 400 Gb/s, and the median gain over 100 Gb/s .. 3.2 Tb/s;
* model quantities: the congestion deficiency of Swing-bw on 64x64, and the
  maximum messages per link on a 16-node ring at steps 1-3;
* the time the whole 64x64 study takes (algorithms x 25 sizes);
* ``--calibrate``: the per-step overhead that best fits the four 32-byte runtimes
  (least squares on the relative error), the value `collc.simulate.STEP_OVERHEAD` holds.

    python benchmarks/swing_paper.py               # everything (about a minute on 2 cores)
    python benchmarks/swing_paper.py --calibrate   # the overhead fit only
    python benchmarks/swing_paper.py --plot out.png
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
import time
from pathlib import Path

import numpy as np

import collc
from collc.goodput import Entry, Study, plot, size_text, study
from collc.simulate import STEP_OVERHEAD, NetworkModel, congestion_deficiency, link_message_counts
from collc.topology import Torus

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TORUS = EXAMPLES / "torus"
SIZES = [32 << k for k in range(25)]  # 32 B .. 512 MiB
MiB = 1 << 20


def _files(*names: str) -> tuple[str, ...]:
    return tuple(str(TORUS / f"{n}.coll") for n in names)


SWING = Entry("swing", _files("swing_lat_torus", "swing_bw_torus"))
RECDOUB = Entry("recdoub", _files("recdoub_lat_torus", "recdoub_bw_torus"))
BUCKET = Entry("bucket", _files("bucket_torus"))
RINGS = Entry("rings", _files("hamiltonian_torus"))

# The paper's Fig. 6, 64x64 torus, 32-byte runtimes
PAPER_32B_US = {"swing": 40.0, "recdoub": 57.0, "multiport recdoub": 57.0, "bucket": 230.0, "rings": 7000.0}
PAPER_GAIN_2MIB = 2.2  # "about +120% over the best algorithm at 2 MiB"
PAPER_SWING_PEAK_512MIB = 0.77  # "at 512MiB Swing reaches about 77% of peak"
PAPER_MEDIAN_GAIN_8X8 = 1.25  # Fig. 8: "median gain about 25%" over 100 Gb/s .. 3.2 Tb/s
PAPER_XI_64X64 = 1.184  # the paper's §4.1 expression for Swing-bw's Xi, evaluated for 64x64
PAPER_RING16_LOADS = {"recursive_doubling": [2, 4, 8], "swing_bw": [1, 2, 3]}  # the paper's Fig. 1


def rel(ours: float, paper: float) -> str:
    return f"{(ours - paper) / paper:+.1%}"


def torus_study(dims: tuple[int, ...], model: NetworkModel, sizes: list[int], multiport: bool) -> Study:
    entries = [SWING, RECDOUB, BUCKET] + ([RINGS] if len(dims) == 2 and dims[0] == dims[1] else [])
    result = study(entries, Torus(dims), sizes, model)
    if not multiport:
        return result
    extra = study([dataclasses.replace(RECDOUB, name="multiport recdoub")], Torus(dims), sizes, model,
                  {"ports": 2 * len(dims)})  # fmt: skip
    return dataclasses.replace(result, points=result.points + extra.points, variants=result.variants + extra.variants)


def gain(result: Study, size: int, name: str = "swing") -> tuple[float, str]:
    """Swing's goodput over the best other algorithm's at ``size``, and that algorithm."""
    ours = result.point(name, size).time_s
    others = [result.point(n, size) for n in result.names() if n != name]
    best = min(others, key=lambda p: p.time_s)
    return best.time_s / ours, best.algorithm


def calibrate(sizes32: Study, steps: dict[str, int]) -> float:
    """The overhead alpha minimising sum(((T0 + N*alpha - P) / P)^2) over the 32-byte runtimes."""
    num = den = 0.0
    for name, paper_us in PAPER_32B_US.items():
        if name not in steps:
            continue
        t0 = sizes32.point(name, 32).time_s * 1e6
        n = steps[name]
        num += (n / paper_us) * (paper_us - t0) / paper_us
        den += (n / paper_us) ** 2
    return num / den * 1e-6


def steps_at_32(result: Study) -> dict[str, int]:
    """The steps of the variant each entry uses at 32 bytes."""
    out = {}
    for name in result.names():
        variant = result.point(name, 32).variant
        out[name] = next(v.steps for v in result.variants if v.entry == name and v.algorithm == variant)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibrate", action="store_true", help="fit the per-step overhead only")
    ap.add_argument("--plot", default=None, help="write the 64x64 goodput curves here (.png or .svg)")
    args = ap.parse_args()
    print(f"# collc {collc.__version__ if hasattr(collc, '__version__') else ''} on {platform.machine()}, "
          f"python {platform.python_version()}; step overhead {STEP_OVERHEAD * 1e6:g} us")  # fmt: skip

    if args.calibrate:
        zero = NetworkModel(step_overhead=0.0)
        base = torus_study((64, 64), zero, [32], multiport=False)
        alpha = calibrate(base, steps_at_32(base))
        print(
            f"# calibrated step overhead: {alpha * 1e6:.3f} us "
            f"(collc.simulate.STEP_OVERHEAD = {STEP_OVERHEAD * 1e6:g} us)"
        )
        return

    model = NetworkModel()
    start = time.perf_counter()
    big = torus_study((64, 64), model, SIZES, multiport=True)
    elapsed = time.perf_counter() - start
    if args.plot:
        plot(big, args.plot, peak_gbps=2 * 400)

    print("\n## 64x64 torus, 32-byte runtimes (us)")
    print(f"| {'algorithm':<17} | {'paper':>8} | {'collc':>9} | {'error':>7} | variant | steps |")
    print("|---|---:|---:|---:|---|---:|")
    steps = steps_at_32(big)
    for name, paper in PAPER_32B_US.items():
        p = big.point(name, 32)
        us = p.time_s * 1e6
        print(f"| {name:<17} | {paper:>8.0f} | {us:>9.1f} | {rel(us, paper):>7} | {p.variant} | {steps[name]} |")

    g, other = gain(big, 2 * MiB)
    without_m = dataclasses.replace(big, points=tuple(p for p in big.points if p.algorithm != "multiport recdoub"))
    g_dbh, other_dbh = gain(without_m, 2 * MiB)
    print("\n## 64x64 torus, larger vectors")
    print(f"| {'figure':<44} | {'paper':>12} | {'collc':>12} | {'error':>7} |")
    print("|---|---:|---:|---:|")
    print(f"| {'Swing gain over the best other at 2 MiB':<44} | {PAPER_GAIN_2MIB:>11.2f}x | {g:>11.2f}x | "
          f"{rel(g, PAPER_GAIN_2MIB):>7} |  (best other: {other})")  # fmt: skip
    print(f"| {'Swing gain over the best of D, B, H at 2 MiB':<44} | {PAPER_GAIN_2MIB:>11.2f}x | {g_dbh:>11.2f}x | "
          f"{rel(g_dbh, PAPER_GAIN_2MIB):>7} |  (best other: {other_dbh})")  # fmt: skip
    cross = next((s for s in SIZES if big.point("bucket", s).time_s < big.point("swing", s).time_s), None)
    best_to = max((s for s in SIZES if cross is None or s < cross), default=None)
    print(f"| {'first size where bucket beats Swing':<44} | {'64-128 MiB':>12} | "
          f"{size_text(cross) if cross else 'none':>12} |         |  (Swing best up to {size_text(best_to or 0)}; "
          "paper: best to 32 MiB, bucket better from 128 MiB)")  # fmt: skip
    peak = 2 * 400e9 / 8
    share = 512 * MiB / big.point("swing", 512 * MiB).time_s / peak
    print(f"| {'Swing share of peak at 512 MiB':<44} | {PAPER_SWING_PEAK_512MIB:>12.0%} | {share:>12.0%} | "
          f"{rel(share, PAPER_SWING_PEAK_512MIB):>7} |")  # fmt: skip
    small = [s for s in SIZES if s <= 32 << 10]
    rd_gain = max(big.point("recdoub", s).time_s / big.point("swing", s).time_s for s in small)
    print(f"| {'Swing gain over recursive doubling, <= 32 KiB':<44} | {'up to 1.50x':>12} | {rd_gain:>11.2f}x |"
          f" {rel(rd_gain, 1.5):>7} |")  # fmt: skip

    print("\n## 8x8 torus")
    gains = []
    rows = []
    for gbps in (100, 200, 400, 800, 1600, 3200):
        m = dataclasses.replace(model, link_bandwidth=gbps * 1e9 / 8)
        r = torus_study((8, 8), m, SIZES, multiport=False)
        per = [gain(r, s)[0] for s in SIZES]
        gains += per
        rows.append((gbps, r, per))
    print("| link | Swing goodput 32 B / 2 MiB / 512 MiB (Gb/s) | gain at 2 MiB | median gain | best at 512 MiB |")
    print("|---:|---|---:|---:|---|")
    for gbps, r, per in rows:
        sw = [r.point("swing", s).goodput_gbps for s in (32, 2 * MiB, 512 * MiB)]
        best512 = min(r.names(), key=lambda n: r.point(n, 512 * MiB).time_s)
        print(f"| {gbps} Gb/s | {sw[0]:.2f} / {sw[1]:.1f} / {sw[2]:.1f} | {gain(r, 2 * MiB)[0]:.2f}x | "
              f"{statistics.median(per):.2f}x | {best512} |")  # fmt: skip
    med = statistics.median(gains)
    print(
        f"\nmedian gain over 100 Gb/s .. 3.2 Tb/s and 32 B .. 512 MiB: paper {PAPER_MEDIAN_GAIN_8X8:.2f}x, "
        f"collc {med:.2f}x ({rel(med, PAPER_MEDIAN_GAIN_8X8)}); paper: at 3.2 Tb/s Swing is best even at 512 MiB"
    )

    print("\n## Model quantities")
    bw = collc.load(TORUS / "swing_bw_torus.coll").instantiate(dims=(64, 64)).schedule
    xi = congestion_deficiency(bw, Torus((64, 64)), 512 * MiB, model)
    print(
        f"congestion deficiency of Swing-bw on 64x64: paper {PAPER_XI_64X64}, "
        f"collc {xi:.4f} ({rel(xi, PAPER_XI_64X64)})"
    )
    ring = Torus((16,))
    for example, paper in PAPER_RING16_LOADS.items():
        s = collc.load(EXAMPLES / f"{example}.coll").instantiate(p=16).schedule
        loads = [int(np.max(link_message_counts(s, ring, k, adaptive=False))) for k in (1, 2, 3)]
        print(f"max messages per link, 16-node ring, steps 1-3, {example}: paper {paper}, collc {loads}")

    print(f"\n## Speed: the 64x64 study ({len(big.names())} algorithms from {len(big.variants)} programs x "
          f"{len(SIZES)} sizes): {elapsed:.1f} s")  # fmt: skip
    for v in big.variants:
        sampled = "" if v.elaborated == v.steps else f", {v.elaborated} elaborated"
        print(f"  {v.entry:<17} {v.algorithm:<20} {v.steps:>6} steps{sampled}: {v.seconds:.1f} s")


if __name__ == "__main__":
    main()
