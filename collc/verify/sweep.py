"""Checking a program over ranges of parameter values, in parallel, stopping at the smallest failure.

Instances are checked in increasing order of their parameter values (p first).
Instances that violate the program's own constraints are skipped and counted.
The first failing instance in that order is the smallest counterexample of the
range: the sweep stops there unless asked to keep going.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass

from collc.diagnostics import CollError
from collc.elaborate import MAX_SLOTS, elaborate, level_splits
from collc.frontend.program import Program
from collc.ir import ParamValue, Schedule
from collc.verify import symmetry
from collc.verify.budget import (
    ANY_SLOTS,
    MODEL,
    PER_OP,
    SURVEY_MIN_SLOTS,
    SYMMETRY,
    Plan,
    hopeless,
    memory_budget,
    plan,
    reduces,
    survey,
)
from collc.verify.check import CheckReport, Finding, check
from collc.verify.deadlock import DeadlockReport, check_blocking, check_step
from collc.verify.explain import explain_report
from collc.verify.symbolic import Model
from collc.verify.symmetry import check_symmetric
from collc.verify.vector import check_model, prepare

SKIPPED = "skipped"  # violates the program's constraints
MODEL_MIN_P = 64  # the model path for instances from this p, or for ranges of this many instances
MODEL_MIN_INSTANCES = 32
UNMATCHED = ("unmatched-send", "unmatched-recv")

# --------------------------------------------------------------------------
# Range specifications
# --------------------------------------------------------------------------

_RANGE = re.compile(r"^(?:(pow2|even|odd):)?(-?\d+)\.\.(-?\d+)$")


def parse_int_spec(text: str, *, limit: int = 1 << 20) -> list[int]:
    """``16``, ``2..1024`` (inclusive), ``pow2:2..16384``, ``even:2..512``, ``odd:3..99``, ``4,6,12``, mixes."""
    values: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            raise ValueError(f"empty item in {text!r}")
        m = _RANGE.match(part)
        if m:
            kind, lo, hi = m.group(1), int(m.group(2)), int(m.group(3))
            if hi < lo:
                raise ValueError(f"{part!r}: the range is empty ({hi} < {lo})")
            if hi - lo > limit:
                raise ValueError(f"{part!r}: more than {limit} values")
            if kind == "pow2":
                values += [v for v in (1 << k for k in range(hi.bit_length() + 1)) if lo <= v <= hi]
            elif kind == "even":
                values += [v for v in range(lo, hi + 1) if v % 2 == 0]
            elif kind == "odd":
                values += [v for v in range(lo, hi + 1) if v % 2 == 1]
            else:
                values += list(range(lo, hi + 1))
        elif re.fullmatch(r"-?\d+", part):
            values.append(int(part))
        else:
            raise ValueError(
                f"{part!r} is not an int, a range LO..HI or pow2:/even:/odd:LO..HI (ranges include both ends)"
            )
    return sorted(set(values))


def parse_dims_spec(text: str) -> list[tuple[int, ...]]:
    """``4x4,8x8,4x4x4`` -> [(4, 4), (8, 8), (4, 4, 4)]."""
    shapes = []
    for part in text.replace(" ", "").split(","):
        if not re.fullmatch(r"\d+(x\d+)*", part):
            raise ValueError(f"{part!r} is not a torus shape like 4x4 or 4x4x4")
        shapes.append(tuple(int(d) for d in part.split("x")))
    return shapes


def parameter_sets(
    ranges: Mapping[str, Sequence[ParamValue]], program: Program | None = None
) -> list[dict[str, ParamValue]]:
    """The cartesian product of the given values, smallest first (p first, then the others by name).

    For a ``program`` with a hierarchy, a total ``p`` becomes every split of it over the levels
    (`collc.elaborate.level_splits`); values of ``p`` that split in no way are left out, unless none splits
    (then the instances stay as given, for elaboration to say why)."""
    names = sorted(ranges, key=lambda n: (n != "p", n))
    combos = itertools.product(*(sorted(ranges[n], key=_order) for n in names))
    sets = [dict(zip(names, combo, strict=True)) for combo in combos]
    if program is None or program.hierarchy is None or "p" not in ranges:
        return sets
    split = [s for values in sets for s in level_splits(program, values)]
    return split or sets


def _order(v: ParamValue) -> tuple[int, ...]:
    return (len(v), *v) if isinstance(v, tuple) else (1, v)


# --------------------------------------------------------------------------
# Checking one instance and many
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InstanceResult:
    params: dict[str, ParamValue]
    status: str  # ok | wrong | error | skipped
    report: CheckReport | None
    deadlock: DeadlockReport | None
    error: CollError | None  # an evaluation error of this instance (bad input for these values)


def check_instance(
    program: Program,
    params: Mapping[str, ParamValue],
    model: str = "step",
    *,
    input_bound: float = 1.0,
    tolerance: float | None = None,
    symbolic: Model | None = None,
    memory: int | None = None,
) -> InstanceResult:
    """Elaborate and check one instance under execution ``model`` (``input_bound``, ``tolerance``: see `check`).
    With the program's ``symbolic`` model (`collc.verify.vector.prepare`), a step-model check runs from the
    model first, and the schedule is elaborated and checked op by op only when that does not find it correct;
    so does a large allreduce instance through its rank symmetry (`collc.verify.symmetry`).  A large instance
    is sized first (`instance_plan`): only the paths that fit in ``memory`` bytes (default: what the machine
    has) run, and an instance no path can check in it is an error that gives the estimates."""
    chosen = instance_plan(program, params, model, symbolic, memory)
    if chosen is not None and not chosen.paths:
        return InstanceResult(dict(params), "error", None, None, chosen.refusal(program, params))
    ran: list[str] = []
    if symbolic is not None and model == "step" and (chosen is None or MODEL in chosen.paths):
        ran.append(MODEL)
        fast = check_model(program, symbolic, params, max_slots=MAX_SLOTS if chosen is None else ANY_SLOTS)
        if fast is not None:
            return InstanceResult(dict(params), "ok", fast[1], check_step(fast[0], 0), None)
    if model == "step" and (chosen is None or SYMMETRY in chosen.paths):
        try:
            orbit = check_symmetric(program, params, memory=None if chosen is None else chosen.budget)
        except CollError as err:  # an error of the program at an instance the per-op checker cannot hold
            return InstanceResult(dict(params), "error", None, None, err)
        if orbit is not None:
            status = "ok" if orbit[1].ok else "wrong"
            return InstanceResult(dict(params), status, orbit[1], check_step(orbit[0], 0), None)
        if chosen is not None:
            ran.append(SYMMETRY)
    if chosen is not None and PER_OP not in chosen.paths:
        refusal = chosen.refusal(program, params, handed=" and the ".join(ran) or None)
        return InstanceResult(dict(params), "error", None, None, refusal)
    try:
        schedule = elaborate(program, params)
    except CollError as err:
        if "violates the constraint" in err.message:
            return InstanceResult(dict(params), SKIPPED, None, None, None)
        return InstanceResult(dict(params), "error", None, None, err)
    result = judge(schedule, dict(params), model, input_bound=input_bound, tolerance=tolerance)
    if result.report is None or result.report.ok:
        return result
    return dataclasses.replace(result, report=explain_report(program, schedule, result.report))


def instance_plan(
    program: Program,
    params: Mapping[str, ParamValue],
    model: str,
    symbolic: Model | None,
    memory: int | None = None,
) -> Plan | None:
    """The paths that fit ``memory`` bytes (default: `collc.verify.budget.memory_budget`) for an instance of
    at least `SURVEY_MIN_SLOTS` slots (`collc.verify.budget.plan`), ruled out from its header and ``symbolic``
    model alone where they suffice (`collc.verify.budget.hopeless`); None for a smaller instance (every path
    fits) or one that cannot be sized (the paths report its error)."""
    p = params.get("p")
    if type(p) is not int:
        return None
    try:  # the header alone: p and the chunks, no rank's steps
        n = elaborate(program, params, ranks=(), max_slots=ANY_SLOTS).nchunks
    except CollError:
        return None
    if p * n < SURVEY_MIN_SLOTS:
        return None
    step_model = model == "step"
    symbolic = symbolic if step_model else None
    least = symmetry.MIN_SLOTS
    refused = hopeless(
        program, params, symbolic, step_model=step_model, symmetry_min_slots=least, budget=memory, nchunks=n
    )
    if refused is not None:  # decided without elaborating a rank
        return refused
    sized = survey(program, params)
    if sized is None:
        return None
    reducing = symbolic is not None and reduces(symbolic)
    return plan(
        sized,
        symbolic=symbolic is not None,
        reduces=reducing,
        step_model=step_model,
        symmetry_min_slots=least,
        budget=memory,
    )


def judge(
    schedule: Schedule,
    params: dict[str, ParamValue],
    model: str = "step",
    *,
    input_bound: float = 1.0,
    tolerance: float | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> InstanceResult:
    """Check one elaborated instance and its deadlock freedom under ``model``; ``on_progress``: see `check`."""
    report = check(schedule, input_bound=input_bound, tolerance=tolerance, on_progress=on_progress)
    unmatched = sum(1 for f in report.findings if f.code in UNMATCHED)
    deadlock = check_step(schedule, unmatched) if model == "step" else check_blocking(schedule)
    if not deadlock.ok and model == "blocking":
        first = next((w for w in deadlock.cycle if w.span is not None), None)
        finding = Finding(
            "deadlock",
            deadlock.message,
            first.span if first is not None and first.span is not None else schedule.span,
            first.step if first is not None else None,
            first.rank if first is not None else None,
            None,
            None,
            None,
        )
        report = _with_finding(report, finding)
    ok = report.ok and deadlock.ok
    return InstanceResult(params, "ok" if ok else "wrong", report, deadlock, None)


def _with_finding(report: CheckReport, finding: Finding) -> CheckReport:
    return dataclasses.replace(report, ok=False, findings=(finding, *report.findings))


@dataclass(frozen=True, slots=True)
class SweepResult:
    results: tuple[InstanceResult, ...]  # in order, up to and including the first failure unless keep_going
    total: int  # instances in the range
    stopped_early: bool

    @property
    def checked(self) -> int:
        return sum(1 for r in self.results if r.status != SKIPPED)

    @property
    def skipped(self) -> int:
        return sum(1 for r in self.results if r.status == SKIPPED)

    @property
    def failures(self) -> list[InstanceResult]:
        return [r for r in self.results if r.status in ("wrong", "error")]

    @property
    def ok(self) -> bool:
        return not self.failures


_Limits = dict[str, float | None]  # input_bound and tolerance, as `check` takes them


def _worker(args: tuple[Program, dict[str, ParamValue], str, _Limits, Model | None, int | None]) -> InstanceResult:
    program, params, model, limits, symbolic, memory = args
    return check_instance(program, params, model, symbolic=symbolic, memory=memory, **limits)  # type: ignore[arg-type]


def symbolic_for(program: Program, instances: Sequence[Mapping[str, ParamValue]], model: str) -> Model | None:
    """The symbolic model the instances can be checked from (`collc.verify.vector`): only under the step
    model, only when they differ in p alone, and only for enough work (some p >= 64, or 32 instances)."""
    if model != "step" or not instances:
        return None
    sizes = [params.get("p") for params in instances]
    if not all(isinstance(x, int) for x in sizes):
        return None
    if max(sizes) < MODEL_MIN_P and len(instances) < MODEL_MIN_INSTANCES:  # type: ignore[type-var]
        return None  # small work: the per-op path costs less than comparing the model with small instances
    others = [{k: v for k, v in params.items() if k != "p"} for params in instances]
    if any(o != others[0] for o in others) or any("p" not in params for params in instances):
        return None
    return prepare(program, others[0])


def sweep(
    program: Program,
    instances: Sequence[dict[str, ParamValue]],
    *,
    model: str = "step",
    jobs: int | None = None,
    keep_going: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    input_bound: float = 1.0,
    tolerance: float | None = None,
) -> SweepResult:
    """Check every instance in order; stop at the first (smallest) failure unless ``keep_going``.

    ``on_progress(done, total)``, when given, is called in this process after each instance's result
    (``total``: the instances of the range; a sweep that stops early ends below it)."""
    jobs = jobs if jobs is not None else min(len(instances), os.cpu_count() or 1)
    results: list[InstanceResult] = []
    stopped = False
    limits: _Limits = {"input_bound": input_bound, "tolerance": tolerance}
    symbolic = symbolic_for(program, instances, model) if len(instances) > 1 else None
    memory = memory_budget() // jobs if jobs > 1 and len(instances) > 1 else None  # the workers share the machine
    for result in _results(program, instances, model, jobs, limits, symbolic, memory):
        results.append(result)
        if on_progress is not None:
            on_progress(len(results), len(instances))
        if result.status in ("wrong", "error") and not keep_going:
            stopped = len(results) < len(instances)
            break
    return SweepResult(tuple(results), len(instances), stopped)


def _results(
    program: Program,
    instances: Sequence[dict[str, ParamValue]],
    model: str,
    jobs: int,
    limits: _Limits,
    symbolic: Model | None,
    memory: int | None = None,
) -> Iterator[InstanceResult]:
    if jobs <= 1 or len(instances) <= 1:
        for params in instances:
            yield _worker((program, params, model, limits, symbolic, memory))
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        window = 2 * jobs  # instances in flight: results come back in order, failures stop the rest
        pending: list[Future[InstanceResult]] = []
        it = iter(instances)
        try:
            for params in it:
                pending.append(pool.submit(_worker, (program, params, model, limits, symbolic, memory)))
                if len(pending) >= window:
                    yield pending.pop(0).result()
            while pending:
                yield pending.pop(0).result()
        finally:
            for fut in pending:
                fut.cancel()
