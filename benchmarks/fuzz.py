"""Fuzz collc's front end: N random and mutated `.coll` inputs through parse, elaborate and check.

    python benchmarks/fuzz.py 20000                 # the default mix, seed 20240611
    python benchmarks/fuzz.py 600 --quick           # the mix of the suite's fast test (tests/test_fuzz.py)
    python benchmarks/fuzz.py 20000 --heavy 8       # and 8 inputs that take collc tens of seconds each

The inputs (tests/coll_fuzz.py): random sentences of the grammar, mutated examples, correct algorithms in
random equivalent forms (templates, which must verify) and pathological inputs aimed at collc's limits.
Each runs under a watchdog (``--budget`` seconds); an input that runs past it is a failure, as is any
traceback, a diagnostic without file:line:col, or a template that does not verify.

The table gives, per kind of input: the count, those accepted (elaborated and verified, correct or not),
those rejected with a located diagnostic, the failures, the time, and the mean time per input against the
baseline measured in the same run: the bundled examples, unmodified, through the same pipeline.  Times
are this process's CPU time (the machine may be shared); the longest wall time of an input is shown too.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import coll_fuzz  # noqa: E402
import fuzz_mutate  # noqa: E402


def _baseline(budget: float) -> float:
    """Mean CPU seconds per bundled example through the pipeline (each at the first p its constraints allow)."""
    times = []
    for path in fuzz_mutate.example_files():
        torus = "torus" in path.parts
        for p in (4, 6, 8):
            params = {"dims": (4, 4)} if torus else {"p": p, "root": 0}
            case = coll_fuzz.Case("baseline", path.read_text(), str(path), params)
            out = coll_fuzz.run_case(case, budget)
            if out.status == "accepted":
                times.append(out.cpu)
                break
    return sum(times) / max(1, len(times))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("n", type=int, help="inputs in the mix")
    parser.add_argument("--seed", type=int, default=coll_fuzz.SEED)
    parser.add_argument("--budget", type=float, default=coll_fuzz.BUDGET_S, help="watchdog seconds per input")
    parser.add_argument("--quick", action="store_true", help="only the stress inputs collc refuses within a second")
    parser.add_argument("--heavy", type=int, default=0, help="heavy inputs to add (tens of seconds each)")
    parser.add_argument("--show", type=int, default=20, help="failures to print in full")
    args = parser.parse_args()

    cpus = os.cpu_count()
    print(f"# collc fuzz: {platform.machine()}, {cpus} cores, python {platform.python_version()}, seed {args.seed}")
    base = _baseline(args.budget)
    print(f"# baseline: the bundled examples through parse, elaborate and check, {base * 1000:.1f} ms each")
    stats: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    failures: list[coll_fuzz.Outcome] = []
    start, start_cpu = time.perf_counter(), time.process_time()
    inputs = list(coll_fuzz.cases(args.n, args.seed, quick=args.quick))
    rng = random.Random(args.seed ^ 0x4EA)
    inputs += [coll_fuzz.make_case("heavy", random.Random(rng.getrandbits(64))) for _ in range(args.heavy)]
    for case in inputs:
        out = coll_fuzz.run_case(case, args.budget)
        row = stats[case.kind]
        row["count"] += 1
        row[out.status] += 1
        row["time"] += out.cpu
        row["wall"] += out.seconds
        row["max"] = max(row["max"], out.seconds)
        if out.status == "failure":
            failures.append(out)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu

    head = f"{'kind':<9} {'count':>7} {'accepted':>9} {'rejected':>9} {'failures':>9} {'cpu (s)':>9}"
    print(head + f" {'mean (ms)':>10} {'max wall (s)':>13} {'mean / baseline':>16}")
    total: dict[str, float] = defaultdict(float)
    for kind in coll_fuzz.KINDS:
        row = stats.get(kind)
        if not row:
            continue
        for key in ("count", "accepted", "rejected", "failure", "time"):
            total[key] += row[key]
        total["max"] = max(total["max"], row["max"])
        _row(kind, row, base)
    _row("all", total, base)
    print(f"# {len(inputs)} inputs in {cpu:.1f} s CPU, {wall:.1f} s wall, {len(failures)} failure(s)")
    for out in failures[: args.show]:
        case = out.case
        print(f"--- {case.kind} {case.origin} params={dict(case.params)} [{out.stage}] {out.detail}")
        print(case.text[:2000])
    return 1 if failures else 0


def _row(kind: str, row: dict[str, float], base: float) -> None:
    mean = row["time"] / max(1, row["count"])
    ratio = f"{mean / base:.2f}x" if base > 0 else "-"
    print(
        f"{kind:<9} {int(row['count']):>7} {int(row['accepted']):>9} {int(row['rejected']):>9} "
        f"{int(row['failure']):>9} {row['time']:>9.1f} {mean * 1000:>10.1f} {row['max']:>13.2f} {ratio:>16}"
    )


if __name__ == "__main__":
    sys.exit(main())
