"""Time `collc check` on Swing-bw (elaboration + verification) for growing p.

Prints one row per p: elaboration and verification seconds, the process's
peak resident memory so far (rows go in increasing p), and,
where it is affordable, a naive baseline run side by side in the same process:
an exact simulator keeping a Python set of origins for every (rank, chunk)
slot.  The ratio column is baseline time / collc verification time.

    python benchmarks/check_time.py                 # p = 256 1024 4096
    python benchmarks/check_time.py --ranks 64 256 --example ring_allreduce
"""

from __future__ import annotations

import argparse
import platform
import resource
import time
from pathlib import Path

import collc
from collc.collectives import EVERY, chunk_dest, chunk_origin
from collc.ir import Action, OpKind, Schedule
from collc.verify.check import check

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BASELINE_MAX_P = 512


def naive_check(schedule: Schedule) -> bool:
    """Exact, slot-by-slot symbolic execution with Python sets: the obvious implementation."""
    p, n = schedule.nranks, schedule.nchunks
    origin = chunk_origin(schedule.collective, p, n, schedule.root)
    dest = chunk_dest(schedule.collective, p, n, schedule.root)
    state: list[list[list[int] | None]] = [
        [[r] if origin[c] in (EVERY, r) else None for c in range(n)] for r in range(p)
    ]
    for step in schedule.steps:
        arriving = []
        for op in step.ops:
            if op.kind is OpKind.RECV:
                for c in op.chunks:
                    arriving.append((op.rank, c, op.action, state[op.peer][c]))
        for rank, c, action, data in arriving:
            if data is None:
                return False
            if action is Action.REDUCE:
                mine = state[rank][c]
                if mine is None:
                    return False
                state[rank][c] = mine + data
            else:
                state[rank][c] = list(data)
    for c in range(n):
        want = list(range(p)) if origin[c] == EVERY else [int(origin[c])]
        for r in range(p) if dest[c] == EVERY else [int(dest[c])]:
            got = state[r][c]
            if got is None or sorted(got) != want:
                return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--example", default="swing_bw")
    args = ap.parse_args()
    alg = collc.load(EXAMPLES / f"{args.example}.coll")
    print(
        f"# collc check timing: {args.example}, {platform.processor() or platform.machine()}, "
        f"python {platform.python_version()}"
    )
    print(
        f"# {'p':>6} {'elaborate(s)':>13} {'verify(s)':>10} {'total(s)':>9} {'maxrss(MB)':>11} "
        f"{'naive(s)':>9} {'naive/verify':>13}"
    )
    rows = []
    for p in sorted(args.ranks):  # increasing p: the high-water mark is this p's peak
        t0 = time.perf_counter()
        inst = alg.instantiate(p=p)
        t1 = time.perf_counter()
        report = check(inst.schedule)
        t2 = time.perf_counter()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        assert report.ok, report.findings[0].message
        rows.append((p, inst.schedule, t1 - t0, t2 - t1, peak))
    for p, schedule, elab, verify, peak in rows:  # the baseline runs after all collc rows
        naive, ratio = "-", "-"
        if p <= BASELINE_MAX_P:
            t3 = time.perf_counter()
            assert naive_check(schedule)
            seconds = time.perf_counter() - t3
            naive, ratio = f"{seconds:.2f}", f"{seconds / verify:.1f}x"
        print(f"  {p:>6} {elab:>13.2f} {verify:>10.2f} {elab + verify:>9.2f} {peak:>11.0f} {naive:>9} {ratio:>13}")


if __name__ == "__main__":
    main()
