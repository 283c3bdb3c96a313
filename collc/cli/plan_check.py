"""`collc check PLAN.xml` / `collc check PLAN.json`: another tool's MSCCL-IR plan (XML) or MSCCL++ execution plan
(JSON), checked (docs/plans.md)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, NoReturn

from collc.cli.common import EXIT_INPUT, EXIT_OK, EXIT_WRONG
from collc.diagnostics import CollError
from collc.frontend import mscclpp_ir, mscclpp_plan
from collc.frontend.msccl_plan import Plan, read_plan
from collc.frontend.plan_ir import plan_to_schedule
from collc.verify import mscclpp_plans
from collc.verify.check import check
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
    ir = _mscclpp_ir_checks(plan, report)
    ok = report.ok and all(e["status"] != "wrong" for e in ir)
    if not as_json:
        sys.stdout.write(_mscclpp_text(report, seconds, shown) + _ir_text(ir, shown, _MSCCLPP_UNMODELLED))
        sys.exit(EXIT_OK if ok else EXIT_WRONG)
    findings = [
        {"kind": f.kind, "message": f.message, "line": f.line, "path": f.path, "mode": f.mode} for f in report.findings
    ]
    out = {
        "ok": ok,
        "status": "correct" if ok else "wrong",
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
        "ir": ir,
    }
    print(json.dumps(out))
    sys.exit(EXIT_OK if ok else EXIT_WRONG)


# Kinds of findings of the MSCCL++ plan check about what a schedule does not model.  `mscclpp_ir.plan_to_schedule`
# orders a threadblock's ops in program order, a port transfer at its put and relaxed signals and packets like the
# others, and refuses every race left under that order, every deadlock and every op the executor runs other than
# it says; so on a plan it converts, the plan check's races are between a threadblock's threads, port transfers and
# their flushes, relaxed orderings or the end of a kernel, its structure findings are the executor's limits, and
# its unmatched semaphores change no data.
_MSCCLPP_NOT_MODELLED = frozenset({"structure", "race", "unmatched"})
_MSCCLPP_UNMODELLED = (
    "about the threads of a threadblock between nops, port transfers until a signal or flush, relaxed signals and "
    "packets, the end of each GPU's kernel, signal counts or the executor's limits"
)


def _mscclpp_ir_checks(plan: mscclpp_plan.MscclppPlan, report: mscclpp_plans.MscclppReport) -> list[dict[str, Any]]:
    """The MSCCL++ plan as a schedule of collc's IR (`collc.frontend.mscclpp_ir`), checked by collc's verifier: one
    entry, in the plan's mode (``status`` correct, wrong or not converted)."""
    start = time.monotonic()
    entry: dict[str, Any] = {"mode": report.mode}
    try:
        schedule = mscclpp_ir.plan_to_schedule(plan)
    except CollError as err:
        entry.update(status="not converted", reason=str(err))
    else:
        result = check(schedule)
        found = [
            {"code": f.code, "message": f.message, "file": f.span.file, "line": f.span.line} for f in result.findings
        ]
        entry.update(status="correct" if result.ok else "wrong", steps=len(schedule.steps), findings=found)
        entry["agrees"] = result.ok == report.ok
        if not entry["agrees"]:
            entry["explained"] = result.ok and all(f.kind in _MSCCLPP_NOT_MODELLED for f in report.findings)
    entry["seconds"] = round(time.monotonic() - start, 3)
    return [entry]


# Kinds of findings of the plan check about what a schedule does not model.  A plan that converts satisfies every
# rule of the format that `plan_to_schedule` needs, so its structure findings are the runtimes' limits, and its
# deadlocks come from their connections' bounded buffering (a plan whose steps wait for each other in a cycle is not
# converted).  Where these are all the plan check finds, collc's verifier finding the schedule correct is no
# disagreement.
_NOT_MODELLED = frozenset({"structure", "deadlock"})


def _ir_checks(plan: Plan, report: PlanReport) -> list[dict[str, Any]]:
    """The plan as a schedule of collc's IR (`collc.frontend.plan_ir`), checked by collc's verifier, in each mode
    the plan runs: one entry per mode (``status`` correct, wrong or not converted)."""
    out: list[dict[str, Any]] = []
    for mode in report.modes or ("",):
        start = time.monotonic()
        entry: dict[str, Any] = {"mode": mode}
        mine = [f for f in report.findings if f.mode in ("", mode)]
        try:
            if not mode:
                raise CollError("the plan says it runs neither in place nor out of place")
            schedule = plan_to_schedule(plan, mode)
        except CollError as err:
            entry.update(status="not converted", reason=str(err))
        else:
            result = check(schedule)
            found = [
                {"code": f.code, "message": f.message, "file": f.span.file, "line": f.span.line}
                for f in result.findings
            ]
            entry.update(status="correct" if result.ok else "wrong", steps=len(schedule.steps), findings=found)
            if result.ok == (not mine):
                entry["agrees"] = True
            else:
                entry["agrees"] = False
                entry["explained"] = result.ok and all(f.kind in _NOT_MODELLED for f in mine)
        entry["seconds"] = round(time.monotonic() - start, 3)
        out.append(entry)
    return out


_UNMODELLED = "about the runtimes' limits or their connections' bounded buffering"


def _ir_text(entries: list[dict[str, Any]], shown: int, unmodelled: str = _UNMODELLED) -> str:
    lines = []
    for e in entries:
        mode = f", {e['mode']}" if len(entries) > 1 else ""
        if e["status"] == "not converted":
            where = f" ({e['mode']})" if mode else ""
            lines.append(f"  not converted to collc's IR{where}: {e['reason']}")
            continue
        head = f"  collc's verifier on the plan as a schedule ({e['steps']} steps{mode}): "
        if e["status"] == "correct":
            lines.append(head + "correct")
        else:
            lines.append(head + f"WRONG ({len(e['findings'])} finding(s))")
            for f in e["findings"][:shown]:
                lines.append(f"    error[{f['code']}] {f['file']}:{f['line']}: {f['message']}")
            if len(e["findings"]) > shown:
                lines.append(f"    ... and {len(e['findings']) - shown} more (--show N)")
        if e.get("explained"):
            lines.append(
                f"  (the plan check's findings{mode} are {unmodelled}, which a schedule does not model; the verdict "
                "is WRONG)"
            )
        elif e.get("agrees") is False:
            said = "correct" if e["status"] == "correct" else "WRONG"
            other = "WRONG" if said == "correct" else "correct"
            lines.append(
                f"  the two checks disagree{mode}: the plan check finds the plan {other}, collc's verifier finds "
                f"its schedule {said}; the verdict is WRONG"
            )
    return "\n".join(lines) + "\n" if lines else ""


def check_plan_file(file: str, as_json: bool, shown: int) -> NoReturn:
    """Reads, checks and reports the plan (MSCCL++ JSON by its .json suffix, otherwise MSCCL-IR XML), also as a
    schedule checked by collc's verifier; exits 0 (correct), 1 (findings of either check) or 2 (unreadable)."""
    if file.lower().endswith(".json"):
        _check_mscclpp(file, as_json, shown)
    start = time.monotonic()
    try:
        plan = read_plan(file)
    except CollError as err:
        _unreadable(err, as_json)
    report = check_plan(plan)
    seconds = time.monotonic() - start
    ir = _ir_checks(plan, report)
    ok = report.ok and all(e["status"] != "wrong" for e in ir)
    if as_json:
        findings = [{"kind": f.kind, "message": f.message, "line": f.line, "mode": f.mode} for f in report.findings]
        print(
            json.dumps(
                {
                    "ok": ok,
                    "status": "correct" if ok else "wrong",
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
                    "ir": ir,
                }
            )
        )
    else:
        sys.stdout.write(_text(report, seconds, shown) + _ir_text(ir, shown))
    sys.exit(EXIT_OK if ok else EXIT_WRONG)
