"""Time elaboration (`.coll` program + parameters -> Schedule IR) of the bundled examples.

Every (example, p) case runs in a fresh Python process, so the peak resident
memory reported (``ru_maxrss`` of that process) belongs to that case alone:
loading the program plus elaborating it, keeping the schedule alive. The time
is the best of ``--repeat`` elaborations in that process (the first one
included, which also compiles the closures; elaboration compiles once per
instance anyway).

    python benchmarks/elaborate_speed.py                       # the default cases
    python benchmarks/elaborate_speed.py --cases swing_bw:4096 ring_allreduce:1024
    python benchmarks/elaborate_speed.py --repeat 3
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DEFAULT_CASES = (
    "swing_bw:1024",
    "swing_bw:4096",
    "swing_bw:16384",
    "ring_allreduce:1024",
    "rabenseifner:4096",
    "recursive_doubling:4096",
)


def _one(example: str, p: int, repeat: int) -> dict[str, object]:
    """Elaborate one case in this process; the numbers as a dict."""
    import collc

    alg = collc.load(EXAMPLES / f"{example}.coll")
    best = float("inf")
    ops = steps = 0
    for _ in range(repeat):
        inst = None
        gc.collect()
        t0 = time.perf_counter()
        inst = alg.instantiate(p=p)
        best = min(best, time.perf_counter() - t0)
        steps = len(inst.schedule.steps)
        ops = sum(len(step.ops) for step in inst.schedule.steps)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"example": example, "p": p, "seconds": best, "steps": steps, "ops": ops, "peak_rss_mb": peak_mb}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES), metavar="EXAMPLE:P")
    ap.add_argument("--repeat", type=int, default=1, help="elaborations per case; the best time is shown")
    ap.add_argument("--one", nargs=2, metavar=("EXAMPLE", "P"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(_one(args.one[0], int(args.one[1]), args.repeat)))
        return
    print(
        f"# collc elaboration timing, {platform.processor() or platform.machine()}, python {platform.python_version()}"
    )
    print(f"# {'example':<20} {'p':>6} {'seconds':>9} {'steps':>6} {'ops':>10} {'peak RSS (MB)':>14}")
    for case in args.cases:
        example, _, p = case.partition(":")
        cmd = [sys.executable, __file__, "--one", example, p, "--repeat", str(args.repeat)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(f"  {example:<20} {p:>6} failed: {out.stderr.strip().splitlines()[-1:]}")
            continue
        row = json.loads(out.stdout)
        print(
            f"  {row['example']:<20} {row['p']:>6} {row['seconds']:>9.2f} {row['steps']:>6} {row['ops']:>10} "
            f"{row['peak_rss_mb']:>14.0f}"
        )


if __name__ == "__main__":
    main()
