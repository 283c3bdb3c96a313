"""Checking from the symbolic model (`collc.verify.vector`) against the op-by-op checker and a naive one.

Every case runs in a fresh process, so its peak resident memory is its own.  Per (algorithm, p):

    model      `prepare` (the model, compared with the elaborated schedules of p <= 12) and
               `check_model` (a few ranks elaborated and compared, then every step once, as arrays)
    op-by-op   elaborating the whole schedule and `check` (collc's default path before the model path),
               run up to --op-max-ops operations
    naive      the Python-list simulator of check_time.py on the same elaborated schedule (a per-message
               checker: one list of origins per slot), up to --naive-max-p

and a sweep row: `collc check ALG -p even:2..512 -j 2` as a user runs it (the model path where it applies).

    python benchmarks/verify_model.py
    python benchmarks/verify_model.py --cases ring_allreduce:256,1024 --no-sweep
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
DEFAULT = "ring_allreduce:256,512,1024,4096,16384;recursive_doubling:256,4096,65536;ring_allgather:1024"

_MODEL = """
import json, resource, time
from collc.frontend.program import load_program
from collc.verify.vector import prepare, check_model
program = load_program({path!r})
t0 = time.perf_counter()
model = prepare(program, {{}})
t1 = time.perf_counter()
got = check_model(program, model, {{"p": {p}}}) if model is not None else None
t2 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(dict(ok=got is not None and got[1].ok, prepare=t1 - t0, check=t2 - t1, rss=rss,
                      steps=got[1].stats.steps if got else None)))
"""

OPS_SCRIPT = """  # elaborate, check op by op, the naive checker (its JSON's last line)
import gc, json, resource, sys, time
sys.path.insert(0, {bench!r})
from collc.frontend.program import load_program
from collc.elaborate import elaborate
from collc.verify.check import check
program = load_program({path!r})
t0 = time.perf_counter()
schedule = elaborate(program, {{"p": {p}}})
report = check(schedule)
t1 = time.perf_counter()
naive = None
if {naive}:
    from check_time import naive_check
    t2 = time.perf_counter()
    assert naive_check(schedule)
    naive = time.perf_counter() - t2
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
ops = sum(len(s.ops) for s in schedule.steps)
print(json.dumps(dict(ok=report.ok, total=t1 - t0, naive=naive, rss=rss, ops=ops, report=repr(report))))
"""


def run_case(code: str, timeout: float) -> dict | None:
    """Run ``code`` in a fresh Python process; the JSON of its last line (None on a timeout or an error)."""
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return None
    if out.returncode != 0:
        print(out.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ops_estimate(name: str, p: int) -> int:
    steps = {"ring_allreduce": 2 * (p - 1), "ring_allgather": p - 1, "recursive_doubling": max(p.bit_length() - 1, 0)}
    return 2 * p * steps.get(name, 2 * p)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=DEFAULT, help="ALG:P,P;ALG:P,... (default: %(default)s)")
    parser.add_argument("--op-max-ops", type=int, default=20_000_000)
    parser.add_argument("--naive-max-p", type=int, default=512)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--sweep", default="ring_allreduce:even:2..512")
    args = parser.parse_args()
    print(f"# collc model check: {platform.machine()}, python {platform.python_version()}")
    head = (
        f"# {'algorithm':<20} {'p':>6} {'model(s)':>9} {'prep(s)':>8} {'RSS(MB)':>8} {'op-by-op(s)':>12} "
        f"{'RSS(MB)':>8} {'op/model':>9} {'naive(s)':>9} {'naive/model':>12}"
    )
    print(head)
    for case in args.cases.split(";"):
        name, sizes = case.split(":")
        path = str(EXAMPLES / f"{name}.coll")
        for p in (int(x) for x in sizes.split(",")):
            m = run_case(_MODEL.format(path=path, p=p), args.timeout)
            if m is None or not m["ok"]:
                print(f"  {name:<20} {p:>6} model path: no result ({m})")
                continue
            model_s = m["prepare"] + m["check"]
            row = f"  {name:<20} {p:>6} {model_s:>9.2f} {m['prepare']:>8.2f} {m['rss']:>8.0f}"
            if _ops_estimate(name, p) <= args.op_max_ops:
                naive = p <= args.naive_max_p
                script = OPS_SCRIPT.format(bench=str(ROOT / "benchmarks"), path=path, p=p, naive=naive)
                o = run_case(script, args.timeout)
                if o is None:
                    row += f" {'failed':>12}"
                else:
                    row += f" {o['total']:>12.2f} {o['rss']:>8.0f} {o['total'] / model_s:>8.1f}x"
                    if o["naive"] is not None:
                        row += f" {o['naive']:>9.2f} {o['naive'] / model_s:>11.1f}x"
            else:
                row += f" {'not run: more than ' + str(args.op_max_ops) + ' ops':>40}"
            print(row, flush=True)
    if not args.no_sweep:
        name, spec = args.sweep.split(":", 1)
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "collc.cli", "check", str(EXAMPLES / f"{name}.coll"), "-p", spec, "-j", "2"]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        took = time.perf_counter() - t0
        first = out.stdout.strip().splitlines()[0] if out.stdout.strip() else out.stderr.strip()[-300:]
        print(f"# sweep: collc check {name} -p {spec} -j 2: {took:.1f} s, exit {out.returncode}: {first}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
