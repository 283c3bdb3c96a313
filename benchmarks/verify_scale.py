"""How `collc check` scales: time and peak memory per algorithm and rank count, and full sweeps.

Every (algorithm, p) runs in a fresh process, so its peak resident memory is its own (the exact
baseline runs after the default path, in the same process, so the peak is the larger of the two).
Cases whose schedule would exceed `--max-ops` operations are not run and say so (a ring at p=16384
has 1.07G operations: its IR alone would not fit in memory). Two baselines run side by side for the
ratio columns: the verifier's exact per-op path (``check(fast=False)``, the same report without the
vectorised regular steps of `collc.verify.fast`) up to `--exact-max-ops`, and a naive exact
simulator (a Python list of origins per slot) up to `--baseline-max-p`. The sweep rows run
`collc check` over a range with 2 workers, and the same sweep with the exact path.

    python benchmarks/verify_scale.py                       # the full table and the sweeps
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
ALGORITHMS = ("ring_allreduce", "swing_bw")
SWEEPS = ("ring_allreduce:even:2..512", "swing_bw:2..512")

_CASE = """
import json, resource, sys, time
sys.path.insert(0, {bench!r})
import collc
from collc.verify.check import check
alg = collc.load({path!r})
warm = alg.instantiate(p=4).schedule  # the first check imports and warms up what both paths use
check(warm), check(warm, fast=False)
t0 = time.perf_counter()
inst = alg.instantiate(p={p})
t1 = time.perf_counter()
report = check(inst.schedule)
t2 = time.perf_counter()
ops = sum(len(s.ops) for s in inst.schedule.steps)
exact = None
if {exact}:
    t3 = time.perf_counter()
    assert check(inst.schedule, fast=False) == report
    exact = time.perf_counter() - t3
naive = None
if {baseline}:
    from check_time import naive_check
    t3 = time.perf_counter()
    assert naive_check(inst.schedule)
    naive = time.perf_counter() - t3
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(dict(
    ok=report.ok, elaborate=t1 - t0, check=t2 - t1, ops=ops, steps=report.stats.steps, rss=rss, naive=naive, exact=exact
)))
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


_SWEEP = """
import functools, sys, time
import collc
import collc.verify.sweep as sweep_module
from collc.verify.check import check
from collc.verify.sweep import parameter_sets, sweep
from collc.verify.sweep import parse_int_spec
sweep_module.check = functools.partial(check, fast=False)  # the workers are forked: they see it too
alg = collc.load({path!r})
t0 = time.perf_counter()
result = sweep(alg.program, parameter_sets({{"p": parse_int_spec({spec!r})}}, alg.program), jobs=2)
print(time.perf_counter() - t0, result.ok)
"""


def run_case(name: str, p: int, baseline: bool, exact: bool, timeout: float) -> dict[str, object]:
    code = _CASE.format(
        bench=str(ROOT / "benchmarks"), path=str(EXAMPLES / f"{name}.coll"), p=p, baseline=baseline, exact=exact
    )
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


def run_sweep(name: str, spec: str, exact: bool, timeout: float) -> str:
    """Seconds for `collc check` over ``spec`` with 2 workers (the exact path: the API with ``fast=False``)."""
    t0 = time.perf_counter()
    if exact:
        cmd = [sys.executable, "-c", _SWEEP.format(path=str(EXAMPLES / f"{name}.coll"), spec=spec)]
    else:
        cmd = [sys.executable, "-m", "collc.cli", "check", str(EXAMPLES / f"{name}.coll"), "-p", spec, "-j", "2"]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, check=False, cwd=ROOT, stdin=subprocess.DEVNULL, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return f"over {timeout:.0f} s"
    seconds = time.perf_counter() - t0
    return f"{seconds:.1f} s (exit {proc.returncode})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    ap.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS))
    ap.add_argument("--max-ops", type=int, default=40_000_000)
    ap.add_argument("--exact-max-ops", type=int, default=20_000_000)
    ap.add_argument("--baseline-max-p", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--sweeps", nargs="*", default=list(SWEEPS), help="ALGORITHM:RANGE, e.g. swing_bw:2..512")
    ap.add_argument("--no-exact-sweep", action="store_true", help="skip the sweeps' exact-path baseline")
    args = ap.parse_args()

    print(
        f"# collc verify scale: {platform.machine()}, {__import__('os').cpu_count()} cores, "
        f"python {platform.python_version()}"
    )
    print(
        f"# {'algorithm':<16} {'p':>6} {'steps':>6} {'ops':>10} {'elaborate(s)':>13} {'check(s)':>9} "
        f"{'peakRSS(MB)':>12} {'exact(s)':>9} {'exact/check':>12} {'naive(s)':>9} {'naive/check':>12}"
    )
    for name in args.algorithms:
        for p in args.ranks:
            ops = estimated_ops(name, p)
            if ops > args.max_ops:
                print(f"  {name:<16} {p:>6} {'':>6} {ops:>10}   not run: more than {args.max_ops} ops")
                continue
            r = run_case(name, p, p <= args.baseline_max_p, ops <= args.exact_max_ops, args.timeout)
            if "note" in r:
                print(f"  {name:<16} {p:>6} {'':>6} {'':>10}   {r['note']}")
                continue
            cols = []
            for key in ("exact", "naive"):
                base = r[key]
                cols += ["-", "-"] if base is None else [f"{base:.2f}", f"{base / r['check']:.1f}x"]  # type: ignore[operator]
            print(
                f"  {name:<16} {p:>6} {r['steps']:>6} {r['ops']:>10} {r['elaborate']:>13.2f} {r['check']:>9.2f} "
                f"{r['rss']:>12.0f} {cols[0]:>9} {cols[1]:>12} {cols[2]:>9} {cols[3]:>12}"
            )
    if not args.no_sweep:
        for item in args.sweeps:
            name, spec = item.split(":", 1)
            line = f"# sweep: collc check {name} -p {spec} -j 2: {run_sweep(name, spec, False, args.timeout)}"
            if not args.no_exact_sweep:
                line += f"; exact path: {run_sweep(name, spec, True, args.timeout)}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
