"""``collc check --ranks all``: prove a program for every p, or find the smallest p where it fails.

Three outcomes, each plain:

- **proved** for every p the constraints allow (`collc.verify.allp`: an inductive proof over the step
  formulas, checked by z3), after the symbolic model was compared op by op with the elaborated schedules
  of the small instances it learns from;
- a **counterexample** p: the smallest p at which the per-p checker finds the program wrong (a p z3
  reports is tried first, then p = 1 .. bound in order, below it where it failed), with that instance's
  usual report;
- **checked up to** the bound: every allowed p up to it is correct, and the reason no proof was found
  (a construct the symbolic model cannot express, with its line, or an obligation z3 did not discharge).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from collc.diagnostics import CollError
from collc.elaborate import elaborate
from collc.frontend.program import Program
from collc.ir import ParamValue, Span
from collc.verify.allp import Proof, prove, sample_sizes
from collc.verify.roots import Rotation, rotation
from collc.verify.sweep import SKIPPED, InstanceResult, check_instance
from collc.verify.symbolic import Model, Refusal, extract, same_steps

__all__ = ["AllP", "check_all_p"]

_COMPARE_UPTO = 12  # instances whose elaborated ops are compared with the symbolic model
_CONFIRM_LIMIT = 4096  # largest p a z3 counterexample is confirmed at by the per-p checker


@dataclass(frozen=True, slots=True)
class AllP:
    """What ``--ranks all`` found (see the module docstring)."""

    status: str  # proved | counterexample | checked
    how: str  # proved: the method; otherwise why there is no proof
    span: Span | None  # where the reason is, when it is at a construct
    invariants: tuple[str, ...]
    fixed: tuple[tuple[str, int], ...]  # the other parameters, at the values the proof is for
    bound: int  # checked: every allowed p up to here was checked
    checked: int  # instances checked one by one
    failure: InstanceResult | None  # counterexample: the failing instance
    every: str = ""  # proved: a parameter the proof covers every value of too, and how (`collc.verify.roots`)


def check_all_p(
    program: Program,
    values: Mapping[str, int],
    *,
    bound: int = 64,
    model: str = "step",
    on_note: Callable[[str], None] | None = None,
    solver_seconds: int = 60,
    time_limit: float | None = None,
) -> AllP:
    """Prove ``program`` for every p, or check p = 1 .. ``bound``; other parameters at ``values`` or defaults;
    z3 spends at most ``solver_seconds`` on each obligation, and the proof at most ``time_limit`` seconds in
    all (then: not proved, and the bounded check)."""
    note = on_note or (lambda _: None)
    deadline = None if time_limit is None else time.monotonic() + time_limit
    fixed: tuple[tuple[str, int], ...] = ()
    proof: Proof | None = None
    reason, span = "", None
    try:
        sym = extract(program, values)
        fixed = sym.fixed
    except Refusal as err:
        sym, reason, span = None, f"the symbolic model cannot express {err.reason}", err.span
    rot = rotation(program, values) if sym is not None else None
    if rot is not None:  # the proof runs on the free model at the base root, which the rotation argument needs
        sym = rot.base
    checked = 0
    if sym is not None:
        mismatch = _compare(program, sym, values)
        if isinstance(mismatch, InstanceResult):
            return AllP("counterexample", "", None, (), fixed, 0, 1, mismatch)
        if mismatch is not None:
            reason = mismatch
        else:
            try:
                proof = prove(sym, on_note=note, timeout_ms=1000 * solver_seconds, deadline=deadline)
            except Refusal as err:
                reason, span = f"the proof cannot handle {err.reason}", err.span or sym.span
    if proof is not None and proof.proved:
        how, every = proof.method, ""
        if rot is not None:
            every, why = _every_root(rot, solver_seconds)
            if why:
                how += f"; for root={rot.root} only: {why}"
            else:
                fixed = tuple((k, v) for k, v in fixed if k != "root")
        return AllP("proved", how, None, proof.invariants, fixed, 0, 0, None, every)
    if proof is not None:
        reason, span = proof.reason, proof.span
        if proof.counterexample is not None and proof.counterexample <= _CONFIRM_LIMIT:
            result = _instance(program, values, proof.counterexample, model)
            checked += 1
            if result.status not in ("ok", SKIPPED):
                for p in range(1, min(bound + 1, proof.counterexample)):  # a smaller one, if there is
                    smaller = _instance(program, values, p, model)
                    checked += smaller.status != SKIPPED
                    if smaller.status not in ("ok", SKIPPED):
                        result = smaller
                        break
                return AllP("counterexample", reason, span, proof.invariants, fixed, 0, checked, result)
    for p in range(1, bound + 1):
        result = _instance(program, values, p, model)
        if result.status == SKIPPED:
            continue
        checked += 1
        if result.status != "ok":
            return AllP("counterexample", reason, span, proof.invariants if proof else (), fixed, p, checked, result)
    invariants = proof.invariants if proof else ()
    return AllP("checked", reason, span, invariants, fixed, bound, checked, None)


def _every_root(rot: Rotation, solver_seconds: int) -> tuple[str, str]:
    """(how every root is covered, "") when the schedule at every root is the base root's rotated, else ("",
    why not)."""
    problem = rot.compare()
    if problem is not None:
        return "", f"the model with the root free differs from the schedule {problem}"
    ok, text, where = rot.prove(1000 * solver_seconds)
    if not ok:
        return "", text + (f" ({where})" if where is not None else "")
    return (
        f"every root 0 <= root < p: the schedule at root R is the one at root {rot.root} with {text} (proved "
        "with z3 for every p; collc.verify.roots)"
    ), ""


def _instance(program: Program, values: Mapping[str, int], p: int, model: str) -> InstanceResult:
    params: dict[str, ParamValue] = {**values, "p": p}
    return check_instance(program, params, model)


def _compare(program: Program, sym: Model, values: Mapping[str, int]) -> str | InstanceResult | None:
    """The model against the elaborated schedules of p = 1 .. 12: a message if they differ, the failing
    instance if an allowed p does not elaborate, None if they agree."""
    for p in sample_sizes(sym, _COMPARE_UPTO):
        params: dict[str, ParamValue] = {**values, "p": p}
        try:
            schedule = elaborate(program, params)
        except CollError as err:
            if "violates the constraint" in err.message:
                return f"the symbolic model allows p={p}, which the program's constraints refuse"
            return InstanceResult(params, "error", None, None, err)
        problem = same_steps(sym, schedule)
        if problem is not None:
            return problem
    return None
