"""Checking large allreduce instances through their rank symmetry (`collc.verify.symmetry`) against the
op-by-op checker and a naive one.

Every case runs in a fresh process, so its peak resident memory is its own.  Per (algorithm, p):

    symmetry   `check_symmetric`: every rank elaborated in batches and compared with its representative
               shifted, the representatives matched, one orbit of chunks followed at every rank
    op-by-op   elaborating the whole schedule and `check` (the path `collc check` takes without a model or a
               symmetry), up to --op-max-p; "same" says whether its report equals the symmetric one
    naive      the Python-list simulator of check_time.py on the same elaborated schedule (a per-message
               checker: one list of origins per slot), up to --naive-max-p

    python benchmarks/verify_symmetry.py
    python benchmarks/verify_symmetry.py --cases swing_bw:4096 --op-max-p 4096
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

from verify_model import OPS_SCRIPT, run_case  # benchmarks/ is the script's folder

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DEFAULT = "swing_bw:256,1024,4096,16384,65536;ring_allreduce:1024"

_SYMMETRY = """
import dataclasses, json, resource, time
from collc.frontend.program import load_program
from collc.verify.symmetry import check_symmetric
program = load_program({path!r})
t0 = time.perf_counter()
got = check_symmetric(program, {{"p": {p}}}, min_slots=0)
took = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(dict(ok=got is not None and got[1].ok, took=took, rss=rss,
                      orbit=dataclasses.astuple(got[2]) if got else None,
                      report=repr(got[1]) if got else None)))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=DEFAULT, help="ALG:P,P;ALG:P,... (default: %(default)s)")
    parser.add_argument("--op-max-p", type=int, default=16384)
    parser.add_argument("--naive-max-p", type=int, default=256)
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    print(f"# collc symmetric check: {platform.machine()}, python {platform.python_version()}")
    print(
        f"# {'algorithm':<16} {'p':>6} {'orbit':>7} {'symmetry(s)':>12} {'RSS(MB)':>8} {'op-by-op(s)':>12} "
        f"{'RSS(MB)':>8} {'op/sym':>7} {'same':>5} {'naive(s)':>9} {'naive/sym':>10}"
    )
    for case in args.cases.split(";"):
        name, sizes = case.split(":")
        path = str(EXAMPLES / f"{name}.coll")
        for p in (int(x) for x in sizes.split(",")):
            s = run_case(_SYMMETRY.format(path=path, p=p), args.timeout)
            if s is None or not s["ok"]:
                print(f"  {name:<16} {p:>6} symmetric path: no result ({s})", flush=True)
                continue
            orbit = "k={},{}".format(*s["orbit"])
            row = f"  {name:<16} {p:>6} {orbit:>7} {s['took']:>12.2f} {s['rss']:>8.0f}"
            if p <= args.op_max_p:
                naive = p <= args.naive_max_p
                script = OPS_SCRIPT.format(bench=str(ROOT / "benchmarks"), path=path, p=p, naive=naive)
                o = run_case(script, args.timeout)
                if o is None:
                    row += f" {'failed':>12}"
                else:
                    same = "yes" if o["report"] == s["report"] else "NO"
                    row += f" {o['total']:>12.2f} {o['rss']:>8.0f} {o['total'] / s['took']:>6.1f}x {same:>5}"
                    if o["naive"] is not None:
                        row += f" {o['naive']:>9.2f} {o['naive'] / s['took']:>9.1f}x"
            else:
                row += f" {'not run: p > ' + str(args.op_max_p):>27}"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
