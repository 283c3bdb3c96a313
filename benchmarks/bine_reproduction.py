"""Bine trees against their baselines on a Dragonfly and an oversubscribed fat tree (flow-level simulator).

For every collective with a Bine program (examples/bine_*.coll) and each of its baselines, at each
node count and vector size, the table gives the simulated time and the bytes put on the
topology's global links (a Dragonfly's links between groups, an oversubscribed fat tree's links
above the leaf switches; `collc.simulate.traffic`), and the ratios Bine / baseline side by side.
The Bine-trees paper (arXiv 2508.17311) reports up to 33% less global-link traffic and lower
times than binomial trees and recursive doubling on such networks.

Programs that are not there are named in the header and their columns left as ``-``; a program
that fails to elaborate is named with its error.  Long step loops are sampled as `collc sim`
samples them (``--exact`` elaborates every step).

    python benchmarks/bine_reproduction.py                        # p = 64, 256; 32KiB, 1MiB, 64MiB
    python benchmarks/bine_reproduction.py --p 64,256,1024 --sizes 32KiB,1MiB,64MiB
    python benchmarks/bine_reproduction.py --routing dor --oversub 2
    python benchmarks/bine_reproduction.py --p 64 --shift 0,3       # also with the job 3 nodes into a group

Networks (one rank per node, 400 Gb/s links, the `collc sim` defaults): ``dragonfly:h=H,g=G``
(a = 2h routers per group, h nodes per router, G groups: h=2, g=8 at p=64; h=4, g=8 at p=256;
h=4, g=32 at p=1024) and ``fattree:P,radix=K,oversub=X`` (radix 16 at p=64, 32 above; leaf
uplinks at 1/X of the bandwidth below them).
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collc import __version__  # noqa: E402
from collc.diagnostics import CollError  # noqa: E402
from collc.goodput import schedule_for, size_text  # noqa: E402
from collc.ir import Op, Schedule  # noqa: E402
from collc.simulate import NetworkModel, simulate  # noqa: E402
from collc.topologies import parse_topology  # noqa: E402
from collc.topology import Topology  # noqa: E402

EXAMPLES = ROOT / "examples"
DATA = Path(__file__).resolve().parent / "data"  # baselines that are not bundled examples

COMPARISONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "allreduce": ("bine_allreduce", ("recursive_doubling", "rabenseifner", "ring_allreduce", "swing_bw_pow2")),
    "allgather": ("bine_allgather", ("recursive_doubling_allgather", "ring_allgather")),
    "reduce_scatter": ("bine_reduce_scatter", ("ring_reduce_scatter", "pairwise_reduce_scatter")),
    "broadcast": ("bine_broadcast", ("binomial_broadcast", "binomial_broadcast_halving")),
    "reduce": ("bine_reduce", ("binomial_reduce",)),
    "alltoall": ("bine_alltoall", ("bruck_alltoall", "pairwise_alltoall")),
}
"""Per collective: its Bine program and the baselines it is compared with."""

DRAGONFLY = {64: "dragonfly:h=2,g=8", 256: "dragonfly:h=4,g=8", 1024: "dragonfly:h=4,g=32"}
RADIX = {64: 16, 256: 32, 1024: 32}


@dataclass(frozen=True)
class Figures:
    """A program's time and global-link bytes at each size, or why there are none."""

    times: dict[int, float]
    global_bytes: dict[int, float]
    share: dict[int, float]
    seconds: float
    problem: str | None = None


def parse_size(text: str) -> int:
    units = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}
    t = text.strip().lower()
    digits = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = t[len(digits) :]
    if not digits.isdigit() or unit not in units:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (32KiB, 1MiB, 64MiB)")
    return int(digits) * units[unit]


Elaborated = dict[tuple[str, int], tuple[Schedule, tuple[int, ...], float] | str]
"""Per (program, node count): its schedule, step weights and elaboration seconds, or why there is none."""


def first_line(err: Exception) -> str:
    text = str(err).strip()
    return (text.splitlines()[0] if text else type(err).__name__)[:110]


def program_path(name: str) -> Path:
    """A bundled example, or a baseline kept with the benchmarks."""
    bundled = EXAMPLES / f"{name}.coll"
    return bundled if bundled.is_file() else DATA / f"{name}.coll"


def shifted(schedule: Schedule, shift: int) -> Schedule:
    """The schedule with every rank r on node (r + shift) mod p: a job whose first rank sits ``shift`` nodes into
    a group (a Dragonfly's) or a leaf switch (a fat tree's), as allocations that are not aligned are."""
    if shift == 0:
        return schedule
    p = schedule.nranks

    def move(op: Op) -> Op:
        return dataclasses.replace(op, rank=(op.rank + shift) % p, peer=(op.peer + shift) % p)

    steps = tuple(dataclasses.replace(st, ops=tuple(move(op) for op in st.ops)) for st in schedule.steps)
    return dataclasses.replace(schedule, steps=steps)


def run(
    name: str,
    topology: Topology,
    sizes: list[int],
    model: NetworkModel,
    exact: bool,
    elaborated: Elaborated,
    shift: int = 0,
) -> Figures:
    """Simulate one program with its traffic (elaborated once per node count, for both networks)."""
    key = (name, topology.nodes)
    if key not in elaborated:
        start = time.perf_counter()
        try:
            schedule, weights = schedule_for(str(program_path(name)), topology, {}, exact)
            elaborated[key] = (schedule, weights, time.perf_counter() - start)
        except (CollError, ValueError) as err:
            elaborated[key] = first_line(err)
    found = elaborated[key]
    if isinstance(found, str):
        return Figures({}, {}, {}, 0.0, found)
    schedule, weights, seconds = found
    start = time.perf_counter()
    try:
        sim = simulate(shifted(schedule, shift), topology, sizes, model, weights=weights, traffic=True)
    except ValueError as err:
        return Figures({}, {}, {}, time.perf_counter() - start, first_line(err))
    times, glob, share = {}, {}, {}
    for row in sim.rows:
        assert row.traffic is not None
        times[row.size_bytes] = row.time_s
        glob[row.size_bytes] = row.traffic.global_bytes or 0.0
        share[row.size_bytes] = row.traffic.global_share or 0.0
    return Figures(times, glob, share, seconds + time.perf_counter() - start)


def bytes_text(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}B"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "-"
    if b == 0:
        return "-" if a else "1.000"
    return f"{a / b:.3f}"


HEADER = (
    f"{'collective':<15}{'baseline':<30}{'size':>7}{'base us':>11}{'bine us':>11}{'time b/b':>9}"
    f"{'base global':>13}{'bine global':>13}{'glob b/b':>9}{'base sh':>8}{'bine sh':>8}"
)


def table(
    topology: Topology,
    sizes: list[int],
    model: NetworkModel,
    exact: bool,
    present: set[str],
    elaborated: Elaborated,
    shift: int = 0,
) -> list[str]:
    """The rows of one network, and a line per program that could not be simulated."""
    lines, notes = [], []
    cache: dict[str, Figures] = {}

    def figures(name: str) -> Figures | None:
        if name not in present:
            return None
        if name not in cache:
            cache[name] = run(name, topology, sizes, model, exact, elaborated, shift)
            if cache[name].problem is not None:
                notes.append(f"# {name}: not simulated: {cache[name].problem}")
        found = cache[name]
        return None if found.problem is not None else found

    for collective, (bine_name, baselines) in COMPARISONS.items():
        bine = figures(bine_name)
        for base_name in baselines:
            base = figures(base_name)
            if base is None and bine is None:
                continue
            for size in sizes:
                bt = base.times[size] if base else None
                nt = bine.times[size] if bine else None
                bg = base.global_bytes[size] if base else None
                ng = bine.global_bytes[size] if bine else None
                lines.append(
                    f"{collective:<15}{base_name if base else base_name + ' (missing)':<30}{size_text(size):>7}"
                    f"{'-' if bt is None else f'{bt * 1e6:.1f}':>11}{'-' if nt is None else f'{nt * 1e6:.1f}':>11}"
                    f"{ratio(nt, bt):>9}{'-' if bg is None else bytes_text(bg):>13}"
                    f"{'-' if ng is None else bytes_text(ng):>13}{ratio(ng, bg):>9}"
                    f"{'-' if base is None else f'{base.share[size]:.3f}':>8}"
                    f"{'-' if bine is None else f'{bine.share[size]:.3f}':>8}"
                )
    seconds = sum(f.seconds for f in cache.values())
    return [*notes, HEADER, *lines, f"# {len(cache)} programs, {seconds:.1f} s elaborating and simulating"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--p", default="64,256", help="node counts, of 64, 256, 1024 (default 64,256)")
    parser.add_argument("--sizes", default="32KiB,1MiB,64MiB", help="vector sizes (default 32KiB,1MiB,64MiB)")
    parser.add_argument("--oversub", type=float, default=4.0, help="fat-tree oversubscription (default 4)")
    parser.add_argument("--routing", choices=("adaptive", "dor"), default="adaptive")
    parser.add_argument("--execution", choices=("lockstep", "dataflow"), default="lockstep")
    parser.add_argument("--exact", action="store_true", help="elaborate every step (no sampling of long loops)")
    parser.add_argument("--skip", default="", help="programs to leave out, comma-separated (e.g. bruck_alltoall)")
    parser.add_argument("--shift", default="0", help="rank r on node (r + S) mod p, for each S listed (default 0)")
    args = parser.parse_args()
    counts = [int(x) for x in args.p.split(",")]
    for p in counts:
        if p not in DRAGONFLY:
            parser.error(f"--p: {p} is not one of {', '.join(map(str, DRAGONFLY))}")
    sizes = [parse_size(x) for x in args.sizes.split(",")]
    model = NetworkModel(adaptive=args.routing == "adaptive", execution=args.execution)
    exact = args.exact or args.execution == "dataflow"
    wanted = {name for bine, bases in COMPARISONS.values() for name in (bine, *bases)}
    skipped = {x.strip() for x in args.skip.split(",") if x.strip()}
    present = {name for name in wanted - skipped if program_path(name).is_file()}
    missing = sorted(wanted - present - skipped)
    print(f"# collc {__version__} on {platform.machine()}, python {platform.python_version()}")
    print(f"# {args.execution}, routing {args.routing}, 400Gb/s links, sizes {', '.join(map(size_text, sizes))}")
    print(f"# missing programs: {', '.join(f'examples/{m}.coll' for m in missing) or 'none'}")
    if skipped:
        print(f"# skipped: {', '.join(sorted(skipped))}")
    print(
        "# time b/b, glob b/b: Bine / baseline (time, global-link bytes); "
        "sh: global-link bytes per byte sent; us: simulated time"
    )
    elaborated: Elaborated = {}
    shifts = [int(x) for x in args.shift.split(",")]
    for p in counts:
        for spec in (DRAGONFLY[p], f"fattree:{p},radix={RADIX[p]},oversub={args.oversub:g}"):
            topology = parse_topology(spec)
            what = getattr(topology, "global_what", "global links")
            for shift in shifts:
                placed = f"; rank r on node (r + {shift}) mod {p}" if shift else ""
                print(f"\n## {spec}: {topology.nodes} nodes; global links: {what}{placed}")
                for line in table(topology, sizes, model, exact, present, elaborated, shift):
                    print(line)


if __name__ == "__main__":
    main()
