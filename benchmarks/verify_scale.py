"""How `collc check` scales: time and peak memory per algorithm and rank count, and a full sweep.

Every (algorithm, p) runs in a fresh process, so its peak resident memory is its own. Cases whose
schedule would exceed `--max-ops` operations are not run and say so (a ring at p=16384 has 537M
operations: its IR alone would not fit in memory). A naive exact simulator (a Python list of origins
per slot) is run side by side up to `--baseline-max-p` for the ratio column.

    python benchmarks/verify_scale.py                       # the full table and the 2..512 sweep
    python benchmarks/verify_scale.py --ranks 256 1024 --no-sweep
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
ALGORITHMS = ("ring_allreduce", "recursive_doubling", "rabenseifner", "swing_bw")

_CASE = """
import json, resource, sys, time
sys.path.insert(0, {bench!r})
import collc
from collc.verify.check import check
alg = collc.load({path!r})
t0 = time.perf_counter()
inst = alg.instantiate(p={p})
t1 = time.perf_counter()
report = check(inst.schedule)
t2 = time.perf_counter()
ops = sum(len(s.ops) for s in inst.schedule.steps)
naive = None
if {baseline}:
    from check_time import naive_check
    t3 = time.perf_counter()
    assert naive_check(inst.schedule)
    naive = time.perf_counter() - t3
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(dict(ok=report.ok, elaborate=t1 - t0, check=t2 - t1, ops=ops, rss=rss, naive=naive)))
"""


def estimated_ops(name: str, p: int) -> int:
    """Operations in the schedule (send + receive per transfer), from the algorithms' step counts."""
    lg = max(1, (p - 1).bit_length())
    return {
        "ring_allreduce": 2 * (p - 1) * 2 * p,
        "recursive_doubling": lg * 2 * p,
        "rabenseifner": 2 * lg * 2 * p,
        "swing_bw": 2 * lg * 2 * p,
    }[name]


def run_case(name: str, p: int, baseline: bool, timeout: float) -> dict[str, object]:
    code = _CASE.format(bench=str(ROOT / "benchmarks"), path=str(EXAMPLES / f"{name}.coll"), p=p, baseline=baseline)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, check=False, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        return {"note": f"over {timeout:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"note": f"failed: {tail[:60]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[256, 1024, 4096, 16384])
    ap.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS))
    ap.add_argument("--max-ops", type=int, default=40_000_000)
    ap.add_argument("--baseline-max-p", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--sweep", default="2..512", help="the --ranks range of the sweep row (swing_bw)")
    args = ap.parse_args()

    print(
        f"# collc verify scale: {platform.machine()}, {__import__('os').cpu_count()} cores, "
        f"python {platform.python_version()}"
    )
    print(
        f"# {'algorithm':<20} {'p':>6} {'ops':>10} {'elaborate(s)':>13} {'check(s)':>9} {'total(s)':>9} "
        f"{'peakRSS(MB)':>12} {'naive(s)':>9} {'naive/check':>12}"
    )
    for name in args.algorithms:
        for p in args.ranks:
            if estimated_ops(name, p) > args.max_ops:
                print(f"  {name:<20} {p:>6} {estimated_ops(name, p):>10}   not run: more than {args.max_ops} ops")
                continue
            r = run_case(name, p, p <= args.baseline_max_p, args.timeout)
            if "note" in r:
                print(f"  {name:<20} {p:>6} {'':>10}   {r['note']}")
                continue
            naive = r["naive"]
            naive_text = "-" if naive is None else f"{naive:.2f}"
            ratio = "-" if naive is None else f"{naive / r['check']:.1f}x"
            total = r["elaborate"] + r["check"]
            print(
                f"  {name:<20} {p:>6} {r['ops']:>10} {r['elaborate']:>13.2f} {r['check']:>9.2f} "
                f"{total:>9.2f} {r['rss']:>12.0f} {naive_text:>9} {ratio:>12}"
            )
    if not args.no_sweep:
        cmd = [sys.executable, "-m", "collc.cli", "check", str(EXAMPLES / "swing_bw.coll"), "--ranks", args.sweep]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT, stdin=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        first = (proc.stdout.strip().splitlines() or ["?"])[0]
        print(f"# sweep: collc check swing_bw --ranks {args.sweep}: {seconds:.1f} s, exit {proc.returncode}: {first}")


if __name__ == "__main__":
    main()
