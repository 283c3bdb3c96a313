"""Findings made plainer with the program in hand: the checker sees only the schedule, so a slot never written
because a rank receives nothing at all (a schedule of no steps, say, from a loop one iteration short at a
small p) is found at the `algorithm` line; here it moves to the step loop that ran no iteration, or to the
phase that produced no step, and says so."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from collc.frontend import ast
from collc.frontend.program import Program
from collc.ir import Schedule, Span
from collc.verify.check import CheckReport, Finding
from collc.verify.retrace import NO_STEPS, NOTHING_RECEIVED
from collc.verify.symbolic import evaluate, extract

__all__ = ["explain_report", "idle_parts"]


def explain_report(program: Program, schedule: Schedule, report: CheckReport) -> CheckReport:
    """``report`` with each finding of a slot never written because its rank receives nothing located at the
    loop or phase that produced no step (unchanged when none is found)."""
    targets = [i for i, f in enumerate(report.findings) if _receives_nothing(f, schedule)]
    if not targets:
        return report
    idle = idle_parts(program, schedule)
    if not idle:
        return report
    text, span = idle[0]
    more = f" (and {len(idle) - 1} more)" if len(idle) > 1 else ""
    findings = list(report.findings)
    for i in targets:
        f = findings[i]
        findings[i] = dataclasses.replace(f, message=f"{f.message} ({text}{more})", span=span)
    return dataclasses.replace(report, findings=tuple(findings))


def _receives_nothing(f: Finding, schedule: Schedule) -> bool:
    return (
        f.code == "postcondition"
        and f.step is None
        and f.span == schedule.span
        and (f.message.endswith(NO_STEPS) or NOTHING_RECEIVED in f.message)
    )


def idle_parts(program: Program, schedule: Schedule) -> list[tuple[str, Span]]:
    """The step loops that run no iteration at this instance (from the program's symbolic model), else the
    phases that produced no step: what each says, and where it is."""
    p = schedule.nranks
    values = {name: v for name, v in schedule.params if name != "p" and type(v) is int}
    try:
        model = extract(program, values)
    except Exception:  # no model (a construct it cannot express, or any failure): the phases say it instead
        model = None
    out: list[tuple[str, Span]] = []
    if model is not None:
        for loop in model.loops:
            try:
                count = evaluate(loop.count, {"p": p})
            except Exception:  # a count the model cannot evaluate here says nothing about the loop
                continue
            if count == 0:
                out.append(
                    (
                        f"at p={p} the step loop of phase {loop.phase} at line {loop.span.line} runs no iteration",
                        loop.span,
                    )
                )
        if out:
            return out
    busy = {st.phase for st in schedule.steps}
    for phase in program.phases:
        if phase.name in busy:
            continue
        first = next(_communication(phase.body), None)
        span = first.span if first is not None else phase.span
        kind = "step loop" if isinstance(first, ast.For) else "statement"
        where = f"whose first {kind} is at line {span.line}" if first is not None else "which communicates nothing"
        out.append((f"at p={p} phase {phase.name}, {where}, produces no step", span))
    return out


def _communication(body: tuple[ast.Stmt, ...]) -> Iterator[ast.Stmt]:
    """The statements of a block that make steps (step loops, step blocks, sends, receives, exchanges), in
    order, looking inside other loops, branches and procedures' calls as written (not into procedures)."""
    for stmt in body:
        if (isinstance(stmt, ast.For) and stmt.is_step) or isinstance(stmt, ast.StepBlock):
            yield stmt
        elif isinstance(stmt, ast.For):
            yield from _communication(stmt.body)
        elif isinstance(stmt, ast.If):
            for _, branch in stmt.branches:
                yield from _communication(branch)
            yield from _communication(stmt.orelse)
        elif isinstance(stmt, ast.Send | ast.Recv | ast.Exchange | ast.Do | ast.Lane):
            yield stmt
