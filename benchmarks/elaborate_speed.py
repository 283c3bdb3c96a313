"""Time elaboration (`.coll` program + parameters -> Schedule IR) of the bundled examples.

Every (example, p) case runs in a fresh Python process, so that the peak
resident memory reported (``ru_maxrss`` of that process) belongs to that case
alone: loading the program and elaborating it, the schedule kept. Times are
the best of ``--repeat`` elaborations in that process, wall clock and CPU (the
machines this runs on are shared: CPU time is the steadier figure).

``--baseline DIR`` runs every case a second time with the collc package found
in DIR (another checkout, e.g. ``git worktree add /tmp/base HEAD`` or
``git archive HEAD | tar -x -C /tmp/base``) and prints both side by side.

    python benchmarks/elaborate_speed.py                       # the default cases
    python benchmarks/elaborate_speed.py --cases swing_bw:4096 ring_allreduce:1024
    python benchmarks/elaborate_speed.py --baseline /tmp/base --repeat 3
"""

from __future__ import annotations

import argparse
import gc
import json
import os
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
    """Elaborate one case in this process; the figures as a dict."""
    import collc

    alg = collc.load(EXAMPLES / f"{example}.coll")
    wall = cpu = float("inf")
    ops = steps = 0
    for _ in range(repeat):
        inst = None
        gc.collect()
        w0, c0 = time.perf_counter(), time.process_time()
        inst = alg.instantiate(p=p)
        wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
        steps = len(inst.schedule.steps)
        ops = sum(len(step.ops) for step in inst.schedule.steps)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"example": example, "p": p, "wall": wall, "cpu": cpu, "steps": steps, "ops": ops, "rss": peak_mb}


def _measure(example: str, p: str, repeat: int, collc_dir: str | None) -> dict[str, object] | str:
    """One case in a fresh process (with the collc of ``collc_dir`` when given); an error as text."""
    env = dict(os.environ)
    if collc_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (collc_dir, env.get("PYTHONPATH"))))
    cmd = [sys.executable, __file__, "--one", example, p, "--repeat", str(repeat)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        return (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES), metavar="EXAMPLE:P")
    ap.add_argument("--repeat", type=int, default=1, help="elaborations per case; the best time is shown")
    ap.add_argument("--baseline", metavar="DIR", help="also run each case with the collc package in DIR")
    ap.add_argument("--one", nargs=2, metavar=("EXAMPLE", "P"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(_one(args.one[0], int(args.one[1]), args.repeat)))
        return
    print(f"# collc elaboration, {platform.processor() or platform.machine()}, python {platform.python_version()}")
    head = f"# {'example':<19} {'p':>6} {'steps':>6} {'ops':>9} {'wall(s)':>8} {'cpu(s)':>7} {'RSS(MB)':>8}"
    if args.baseline:
        head += f" | {'base wall':>9} {'base cpu':>8} {'base RSS':>8} {'speedup':>7}"
    print(head)
    for case in args.cases:
        example, _, p = case.partition(":")
        row = _measure(example, p, args.repeat, None)
        if isinstance(row, str):
            print(f"  {example:<19} {p:>6} failed: {row}")
            continue
        line = (
            f"  {example:<19} {p:>6} {row['steps']:>6} {row['ops']:>9} {row['wall']:>8.2f} {row['cpu']:>7.2f} "
            f"{row['rss']:>8.0f}"
        )
        if args.baseline:
            base = _measure(example, p, args.repeat, args.baseline)
            if isinstance(base, str):
                line += f" | baseline failed: {base}"
            else:
                speedup = float(base["cpu"]) / max(float(row["cpu"]), 1e-9)  # type: ignore[arg-type]
                line += f" | {base['wall']:>9.2f} {base['cpu']:>8.2f} {base['rss']:>8.0f} {speedup:>6.1f}x"
                if base["ops"] != row["ops"] or base["steps"] != row["steps"]:
                    line += " (schedules differ!)"
        print(line, flush=True)


if __name__ == "__main__":
    main()
