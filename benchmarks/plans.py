"""`collc check` on the plans of other tools: the MSCCL-IR plans of tests/data/msccl and exported examples, and
the MSCCL++ execution plans of tests/data/mscclpp; time per plan.

    python benchmarks/plans.py

For each MSCCL-IR plan: GPUs, threadblocks, steps, the verdict, the checker's
time (parse + every mode the plan supports) and, side by side in the same run,
the time of tests/msccl_sim.py (the tests' independent simulator: one random
interleaving per mode, no structure checks beyond the runtimes' rules) on the
same text ("sim/check" above 1 means the checker is the faster); then the
plan turned into collc's schedule IR and checked by collc's verifier (its
steps, verdict and time, every mode).  For each MSCCL++ plan: GPUs,
threadblocks, ops, the verdict and the checker's time (read + check).
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
from collc.diagnostics import CollError  # noqa: E402
from collc.frontend import mscclpp_ir, mscclpp_plan  # noqa: E402
from collc.frontend.msccl_plan import parse_plan  # noqa: E402
from collc.frontend.plan_ir import plan_to_schedule  # noqa: E402
from collc.verify import mscclpp_plans  # noqa: E402
from collc.verify.check import check  # noqa: E402
from collc.verify.plans import check_plan  # noqa: E402

EXPORTED = [("swing_bw", {"p": 64}), ("ring_allreduce", {"p": 32}), ("bruck_allgather", {"p": 16}),
            ("bruck_allgather", {"p": 32}), ("rabenseifner", {"p": 16})]  # fmt: skip


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
    print(f"{head} {'sim/check':>10} {'ir steps':>9} {'ir':>8} {'ir(s)':>7}")
    for name, text in texts:
        report = check_plan(parse_plan(text, name))
        t_check = best(lambda text=text, name=name: check_plan(parse_plan(text, name)))
        t_sim = best(lambda text=text: msccl_sim.simulate(text, seeds=1, max_steps=256))
        verdict = "correct" if report.ok else "WRONG"
        ir_steps, ir = _ir(text, name, report.modes)
        t_ir = best(lambda text=text, name=name, modes=report.modes: _ir(text, name, modes), 1)
        print(f"{name:<34} {report.plan.ngpus:>5} {report.threadblocks:>5} {report.steps:>6} {verdict:>8} "
              f"{t_check:>9.3f} {t_sim:>8.3f} {t_sim / t_check:>10.1f} {ir_steps:>9} {ir:>8} {t_ir:>7.3f}")  # fmt: skip
    print()
    print(f"{'MSCCL++ plan':<34} {'gpus':>5} {'tbs':>5} {'ops':>6} {'verdict':>8} {'check(s)':>9} {'ir steps':>9} "
          f"{'ir':>8} {'ir(s)':>7}")  # fmt: skip
    for path in sorted((ROOT / "tests" / "data" / "mscclpp").glob("*.json")):
        plan = mscclpp_plan.read_plan(str(path))
        result = mscclpp_plans.check_plan(plan)
        t_check = best(lambda path=path: mscclpp_plans.check_plan(mscclpp_plan.read_plan(str(path))))
        verdict = "correct" if result.ok else "WRONG"
        ir_steps, ir = _ir_json(plan)
        t_ir = best(lambda plan=plan: _ir_json(plan), 1)
        print(f"{path.stem:<34} {plan.ngpus:>5} {result.threadblocks:>5} {result.ops:>6} {verdict:>8} {t_check:>9.3f} "
              f"{ir_steps:>9} {ir:>8} {t_ir:>7.3f}")  # fmt: skip
    return 0


def _ir_json(plan: mscclpp_plan.MscclppPlan) -> tuple[str, str]:
    try:
        schedule = mscclpp_ir.plan_to_schedule(plan)
    except CollError:
        return "-", "refused"
    return str(len(schedule.steps)), "correct" if check(schedule).ok else "WRONG"


def _ir(text: str, name: str, modes: tuple[str, ...]) -> tuple[str, str]:
    """The plan as a schedule, checked by collc's verifier in every mode: (steps, verdict)."""
    plan = parse_plan(text, name)
    steps, verdicts = [], []
    for mode in modes:
        try:
            schedule = plan_to_schedule(plan, mode)
        except CollError:
            return "-", "refused"
        steps.append(str(len(schedule.steps)))
        verdicts.append(check(schedule).ok)
    return "/".join(steps), "correct" if all(verdicts) else "WRONG"


if __name__ == "__main__":
    sys.exit(main())
