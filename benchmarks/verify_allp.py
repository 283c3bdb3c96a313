"""Proofs for every p (`collc check --ranks all`) next to the per-p checks they replace.

Every case runs in a fresh process, so its peak resident memory is its own.  Per example:

    proof      `check_all_p`: the symbolic model, invariants learned from small instances, every
               obligation proved with z3 (the result: proved, a counterexample, or checked up to --bound)
    per-p      the per-p checker (`check_instance`, what `--ranks all` falls back to) for every allowed p
               up to --upto, one instance at a time: the cost of covering only those p without a proof

The proof covers every p the constraints allow (up to 2^28 ranks); the per-p column covers p <= --upto.

    python benchmarks/verify_allp.py
    python benchmarks/verify_allp.py --cases swing_lat,ring_allreduce --upto 32
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DEFAULT = (
    "ring_allreduce,ring_allgather,ring_reduce_scatter,recursive_doubling,binomial_broadcast:root=0,"
    "binomial_broadcast:root=3,swing_lat,swing_bw_pow2"
)

_PROOF = """
import json, resource, time
from collc.frontend.program import load_program
from collc.verify.forall import check_all_p
program = load_program({path!r})
t0 = time.perf_counter()
result = check_all_p(program, {values!r}, bound={bound}, solver_seconds={solver})
t1 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(dict(status=result.status, seconds=t1 - t0, rss=rss)))
"""

_PER_P = """
import json, resource, time
from collc.frontend.program import load_program
from collc.verify.allp import sample_sizes
from collc.verify.sweep import check_instance
from collc.verify.symbolic import extract
program = load_program({path!r})
values = {values!r}
model = extract(program, values)
t0 = time.perf_counter()
sizes = sample_sizes(model, {upto})
bad = [p for p in sizes if check_instance(program, {{**values, "p": p}}).status != "ok"]
t1 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(dict(n=len(sizes), bad=bad, seconds=t1 - t0, rss=rss)))
"""


def _run(code: str) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _case(text: str) -> tuple[str, dict[str, int]]:
    name, _, rest = text.partition(":")
    values = {}
    for item in filter(None, rest.split(";")):
        key, _, value = item.partition("=")
        if not value.lstrip("-").isdigit():
            raise SystemExit(f"--cases: {item!r} is not NAME=INT")
        values[key] = int(value)
    if not (EXAMPLES / f"{name}.coll").is_file():
        raise SystemExit(f"--cases: no example {name!r} in {EXAMPLES}")
    return name, values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=DEFAULT, help="NAME[:PARAM=V;...],... (default: %(default)s)")
    parser.add_argument("--upto", type=int, default=64, help="per-p checks for p up to this (default 64)")
    parser.add_argument("--bound", type=int, default=4, help="the proof's fallback bound (default 4)")
    parser.add_argument("--solver-time", type=int, default=300, help="z3 seconds per obligation (default 300)")
    args = parser.parse_args()
    if args.upto < 1 or args.bound < 1 or args.solver_time < 1:
        parser.error("--upto, --bound and --solver-time take positive numbers")
    cases = [_case(c) for c in args.cases.split(",") if c]
    print(f"# proofs for every p: {platform.machine()} {platform.system()}, python {platform.python_version()}; "
          f"per-p: every allowed p up to {args.upto}")  # fmt: skip
    print(f"{'example':<34} {'proof':>8} {'s':>8} {'MB':>6}   {'per-p n':>7} {'s':>8} {'MB':>6} "
          f"{'per-p s / proof s':>18}")  # fmt: skip
    for name, values in cases:
        path = str(EXAMPLES / f"{name}.coll")
        proof = _run(_PROOF.format(path=path, values=values, bound=args.bound, solver=args.solver_time))
        per_p = _run(_PER_P.format(path=path, values=values, upto=args.upto))
        label = name + "".join(f" {k}={v}" for k, v in values.items())
        ratio = float(per_p["seconds"]) / float(proof["seconds"])  # type: ignore[arg-type]
        wrong = f" (wrong at {per_p['bad']})" if per_p["bad"] else ""
        print(f"{label:<34} {proof['status']:>8} {proof['seconds']:8.1f} {proof['rss']:6.0f}   {per_p['n']:>7} "
              f"{per_p['seconds']:8.1f} {per_p['rss']:6.0f} {ratio:17.2f}x{wrong}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
