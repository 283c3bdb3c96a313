"""`collc check PLAN.xml` on the MSCCL-IR plans of tests/data/msccl and on exported examples: time per plan.

    python benchmarks/plans.py

For each plan: GPUs, threadblocks, steps, the verdict, the checker's time
(parse + every mode the plan supports) and, side by side in the same run, the
time of tests/msccl_sim.py (the tests' independent simulator: one random
interleaving per mode, no structure checks beyond the runtimes' rules) on the
same text; "sim/check" above 1 means the checker is the faster.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import msccl_sim  # noqa: E402

import collc  # noqa: E402
from collc.backends import msccl  # noqa: E402
from collc.frontend.msccl_plan import parse_plan  # noqa: E402
from collc.verify.plans import check_plan  # noqa: E402

EXPORTED = [("swing_bw", {"p": 64}), ("ring_allreduce", {"p": 32}), ("bruck_allgather", {"p": 16})]


def best(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    texts = [(p.stem, p.read_text()) for p in sorted((ROOT / "tests" / "data" / "msccl").glob("*.xml"))]
    for name, params in EXPORTED:
        schedule = collc.load(name).instantiate(**params).schedule
        algo = msccl.lower(schedule, limits=msccl.Limits(steps_per_threadblock=256))
        texts.append((f"export {name} p={params['p']}", msccl.to_xml(algo)))
    head = f"{'plan':<34} {'gpus':>5} {'tbs':>5} {'steps':>6} {'verdict':>8} {'check(s)':>9} {'sim(s)':>8}"
    print(f"{head} {'sim/check':>10}")
    for name, text in texts:
        report = check_plan(parse_plan(text, name))
        t_check = best(lambda text=text, name=name: check_plan(parse_plan(text, name)))
        t_sim = best(lambda text=text: msccl_sim.simulate(text, seeds=1, max_steps=256))
        verdict = "correct" if report.ok else "WRONG"
        print(f"{name:<34} {report.plan.ngpus:>5} {report.threadblocks:>5} {report.steps:>6} {verdict:>8} "
              f"{t_check:>9.3f} {t_sim:>8.3f} {t_sim / t_check:>10.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
