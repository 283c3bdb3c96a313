"""`collc check PLAN.xml` / `collc check PLAN.json`: another tool's MSCCL-IR plan (XML) or MSCCL++ execution plan
(JSON), checked (docs/plans.md)."""

from __future__ import annotations

import json
import sys
import time
from typing import NoReturn

from collc.cli.common import EXIT_INPUT, EXIT_OK, EXIT_WRONG
from collc.diagnostics import CollError
from collc.frontend import mscclpp_plan
from collc.frontend.msccl_plan import read_plan
from collc.verify import mscclpp_plans
from collc.verify.plans import PlanReport, check_plan

__all__ = ["check_plan_file", "is_plan"]

KINDS = {
    "structure": "the plan breaks a rule of the format or the runtimes",
    "unmatched": "a send and a receive do not match",
    "deadlock": "some threadblock waits forever",
    "race": "two accesses to a chunk are unordered, one a write",
    "uninitialized": "a chunk nothing wrote is read",
    "double-count": "a contribution is reduced twice",
    "read-only": "the input buffer is written out of place",
    "postcondition": "an output chunk is wrong",
}


def is_plan(file: str) -> bool:
    """Whether ``file`` names an MSCCL-IR plan (XML) or an MSCCL++ execution plan (JSON) rather than a .coll
    program."""
    return file.lower().endswith((".xml", ".json"))


def _text(r: PlanReport, seconds: float, shown: int) -> str:
    plan = r.plan
    head = (
        f"{plan.file}: {plan.name} ({plan.coll}, {plan.ngpus} GPUs, {plan.nchannels} channel(s), "
        f"{r.threadblocks} threadblocks, {r.steps} steps)"
    )
    modes = " and ".join(r.modes) or "no mode"
    if r.ok:
        return (
            f"{head}: correct ({modes}, {seconds:.2f} s)\n"
            f"  checked: matching, deadlock freedom with {r.slots} chunks buffered per connection ({plan.proto}), "
            f"races (happens-before), the {plan.coll} postcondition\n"
        )
    lines = [f"{head}: WRONG ({len(r.findings)} finding(s), {modes})"]
    for f in r.findings[:shown]:
        mode = f" [{f.mode}]" if f.mode and len(r.modes) > 1 else ""
        lines.append(f"  error[{f.kind}]{mode} {plan.where(f.line)}: {f.message}")
    if len(r.findings) > shown:
        lines.append(f"  ... and {len(r.findings) - shown} more (--show N)")
    return "\n".join(lines) + "\n"


def _unreadable(err: CollError, as_json: bool) -> NoReturn:
    if as_json:
        print(json.dumps({"ok": False, "status": "error", "error": {"message": str(err)}}))
    else:
        print(f"error: {err}", file=sys.stderr)
    sys.exit(EXIT_INPUT)


def _mscclpp_text(r: mscclpp_plans.MscclppReport, seconds: float, shown: int) -> str:
    plan = r.plan
    head = (
        f"{plan.file}: {plan.name} ({plan.collective}, {plan.ngpus} GPUs, {plan.protocol}, {r.threadblocks} "
        f"threadblocks, {r.ops} ops)"
    )
    piped = f", pipelines with {' and '.join(map(str, r.iterations))} iterations" if r.iterations else ""
    if r.ok:
        return (
            f"{head}: correct ({r.mode}{piped}, {seconds:.2f} s)\n"
            "  checked: channels and semaphores, signal and wait counts, deadlock freedom, races (happens-before, "
            f"per thread), the end of each GPU's kernel, the {plan.collective} postcondition\n"
        )
    lines = [f"{head}: WRONG ({len(r.findings)} finding(s), {r.mode}{piped})"]
    for f in r.findings[:shown]:
        mode = f" [{f.mode}]" if f.mode else ""
        lines.append(f"  error[{f.kind}]{mode} {plan.file}:{f.line} ({f.path or 'top'}): {f.message}")
    if len(r.findings) > shown:
        lines.append(f"  ... and {len(r.findings) - shown} more (--show N)")
    return "\n".join(lines) + "\n"


def _check_mscclpp(file: str, as_json: bool, shown: int) -> NoReturn:
    """An MSCCL++ execution plan (JSON): read, checked, reported."""
    start = time.monotonic()
    try:
        plan = mscclpp_plan.read_plan(file)
    except CollError as err:
        _unreadable(err, as_json)
    report = mscclpp_plans.check_plan(plan)
    seconds = time.monotonic() - start
    if not as_json:
        sys.stdout.write(_mscclpp_text(report, seconds, shown))
        sys.exit(EXIT_OK if report.ok else EXIT_WRONG)
    findings = [
        {"kind": f.kind, "message": f.message, "line": f.line, "path": f.path, "mode": f.mode} for f in report.findings
    ]
    out = {
        "ok": report.ok,
        "status": "correct" if report.ok else "wrong",
        "file": file,
        "format": "mscclpp",
        "name": plan.name,
        "collective": plan.collective,
        "gpus": plan.ngpus,
        "protocol": plan.protocol,
        "modes": [report.mode],
        "pipeline_iterations": list(report.iterations),
        "threadblocks": report.threadblocks,
        "ops": report.ops,
        "findings": findings,
        "seconds": round(seconds, 3),
    }
    print(json.dumps(out))
    sys.exit(EXIT_OK if report.ok else EXIT_WRONG)


def check_plan_file(file: str, as_json: bool, shown: int) -> NoReturn:
    """Reads, checks and reports the plan (MSCCL++ JSON by its .json suffix, otherwise MSCCL-IR XML); exits 0
    (correct), 1 (findings) or 2 (unreadable)."""
    if file.lower().endswith(".json"):
        _check_mscclpp(file, as_json, shown)
    start = time.monotonic()
    try:
        plan = read_plan(file)
    except CollError as err:
        _unreadable(err, as_json)
    report = check_plan(plan)
    seconds = time.monotonic() - start
    if as_json:
        findings = [{"kind": f.kind, "message": f.message, "line": f.line, "mode": f.mode} for f in report.findings]
        print(
            json.dumps(
                {
                    "ok": report.ok,
                    "status": "correct" if report.ok else "wrong",
                    "file": file,
                    "name": plan.name,
                    "collective": plan.coll,
                    "gpus": plan.ngpus,
                    "channels": plan.nchannels,
                    "modes": list(report.modes),
                    "threadblocks": report.threadblocks,
                    "steps": report.steps,
                    "slots": report.slots,
                    "findings": findings,
                    "seconds": round(seconds, 3),
                }
            )
        )
    else:
        sys.stdout.write(_text(report, seconds, shown))
    sys.exit(EXIT_OK if report.ok else EXIT_WRONG)
