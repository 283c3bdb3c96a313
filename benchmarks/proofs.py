"""`collc check --ranks all` over every bundled example: what is proved for every p, and how long it takes.

    python benchmarks/proofs.py                       # every example, 600 s per proof at most
    python benchmarks/proofs.py --only bruck_allgather,ring_allreduce --time-limit 120

For each program of examples/ (and its folders): PROVED (for every p its
constraints allow), checked up to the bound (--bound, 12 by default: no proof,
with the reason and the line it is at), or the smallest failing p; and the wall
time of `check_all_p` (model, comparison with the elaborated instances,
invariant learning, z3), one example at a time, on one core.  Programs with a
hierarchy or a torus take their shape as parameters and are refused as a
whole (they are checked over ranges of shapes instead).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collc.diagnostics import CollError  # noqa: E402
from collc.frontend.program import load_program  # noqa: E402
from collc.verify.forall import check_all_p  # noqa: E402

FOLDERS = ("", "compression", "hierarchical", "torus")
# seconds per z3 obligation where the hardest takes z3 minutes (docs/verifier.md)
SLOW = {"swing_bw_pow2": 300, "bruck_alltoall": 600, "scatter_allgather_broadcast": 300}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated example names")
    parser.add_argument("--time-limit", type=float, default=600.0, help="seconds per proof")
    parser.add_argument("--bound", type=int, default=12, help="p checked one by one when there is no proof")
    args = parser.parse_args()
    only = {x for x in args.only.split(",") if x}
    paths = [p for f in FOLDERS for p in sorted((ROOT / "examples" / f).glob("*.coll"))]
    print(f"{'example':<36} {'result':<12} {'time(s)':>8}  reason / method")
    for path in paths:
        name = path.stem
        if only and name not in only:
            continue
        start = time.monotonic()
        try:
            result = check_all_p(load_program(path), {}, bound=args.bound, time_limit=args.time_limit,
                                 solver_seconds=SLOW.get(name, 60))  # fmt: skip
        except CollError as err:
            print(f"{name:<36} {'error':<12} {time.monotonic() - start:>8.1f}  {err}")
            continue
        seconds = time.monotonic() - start
        if result.status == "proved":
            root = dict(result.fixed).get("root")
            roots = ", every root" if result.every else f", root {root}" if root is not None else ""
            status, why = "PROVED", "every p" + roots
        elif result.failure is not None and result.failure.status == "error":  # no instance to check: refused
            status, why = "refused", f"{result.how}; {result.failure.error}"
        elif result.status == "counterexample":
            status, why = "FAILS", f"at p={result.failure.params.get('p') if result.failure else '?'}"
        else:
            status = f"p<={result.bound}"
            line = f" (line {result.span.line})" if result.span is not None else ""
            why = f"{result.how}{line}"
        print(f"{name:<36} {status:<12} {seconds:>8.1f}  {why[:150]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
