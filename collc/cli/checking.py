"""`collc check` and `collc show`: verify a program and print its schedule."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any, NoReturn

import click

from collc import api, report
from collc.cli import progress
from collc.cli.common import (
    EXIT_INPUT,
    EXIT_OK,
    EXIT_WRONG,
    bad_value,
    check_values,
    collect_ranges,
    fail_input,
    instance_options,
    load_algorithm,
    load_instance,
    main,
    range_options,
)
from collc.cli.plan_check import check_plan_file, is_plan
from collc.cli.progress import progress_bar
from collc.diagnostics import CollError, Sources
from collc.elaborate import MAX_SLOTS
from collc.ir import ParamValue, Schedule
from collc.verify.budget import ANY_SLOTS, MODEL, PER_OP, SYMMETRY, Plan
from collc.verify.deadlock import MODELS, check_step
from collc.verify.explain import explain_report
from collc.verify.forall import check_all_p
from collc.verify.sweep import InstanceResult, SweepResult, instance_plan, judge, parameter_sets, sweep, symbolic_for
from collc.verify.symbolic import Model
from collc.verify.symmetry import Orbit, check_symmetric
from collc.verify.vector import check_model


@main.command()
@range_options
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--show", "shown", default=5, show_default=True, type=click.IntRange(min=1), help="Findings to print.")
@click.option(
    "--model", default="step", show_default=True, type=click.Choice(MODELS), help="Execution model for deadlocks."
)
@click.option("--keep-going", is_flag=True, help="Check every instance of a range, not only up to the first failure.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Worker processes for ranges.")
@click.option("--trace", "trace", type=click.IntRange(min=0), default=None, metavar="CHUNK", help="History of a chunk.")
@click.option(
    "--input-bound",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0),
    metavar="A",
    help="Compression: the inputs' magnitude bound |x| <= A that error bounds assume.",
)
@click.option(
    "--tolerance",
    default=None,
    type=click.FloatRange(min=0),
    metavar="T",
    help="Compression: fail when the worst-case error bound of an output exceeds T.",
)
@click.option(
    "--bound",
    default=64,
    show_default=True,
    type=click.IntRange(min=1),
    metavar="N",
    help="With --ranks all: without a proof, check p = 1..N one by one for the smallest failure.",
)
@click.option(
    "--solver-time",
    default=60,
    show_default=True,
    type=click.IntRange(min=1, max=86400),
    metavar="SECONDS",
    help="With --ranks all: the time z3 may spend on each proof obligation before the proof gives up.",
)
@click.option(
    "--time-limit",
    default=600,
    show_default=True,
    type=click.IntRange(min=1, max=86400),
    metavar="SECONDS",
    help="With --ranks all: the time the whole proof may take; then 'not proved' and the check of p = 1..N.",
)
@click.option(
    "--verbose", "-v", is_flag=True, help="With --ranks all: also print the invariants learned for a proof that failed."
)
def check(
    file: str,
    p: str | None,
    params: tuple[str, ...],
    codecs: tuple[str, ...],
    dims: str | None,
    as_json: bool,
    shown: int,
    model: str,
    keep_going: bool,
    jobs: int | None,
    trace: int | None,
    input_bound: float,
    tolerance: float | None,
    bound: int,
    solver_time: int,
    time_limit: int,
    verbose: bool,
) -> None:
    """Verify a schedule, or every instance of a range: matching, deadlock, data flow, postcondition,
    compression points and their error bound.  ``--ranks all`` proves the program for every p, or finds the
    smallest p where it fails, or says up to which p it checked and why there is no proof.  FILE may also be an
    MSCCL-IR XML plan (msccl-tools, TACCL, collc export) or an MSCCL++ execution plan (JSON), checked as the
    runtimes run it (docs/plans.md)."""
    if is_plan(file):
        if p is not None or params or dims is not None or codecs:
            raise click.UsageError("a plan is one instance: -p, --param, --dims and --codec do not apply")
        check_plan_file(file, as_json, shown)
    try:
        if p is not None and p.strip().lower() == "all":
            _check_all_p(file, params, codecs, dims, as_json, shown, model, bound, solver_time, time_limit, verbose)
        _check(file, p, params, codecs, dims, as_json, shown, model, keep_going, jobs, trace, input_bound, tolerance)
    except MemoryError:
        progress.hide()
        why = CollError(
            "collc check ran out of memory: this instance needs more than the machine could give it",
            None,
            ("check a smaller instance, or 'collc check FILE --ranks all' to prove the program for every p",),
        )
        _input_error(why, {}, as_json)


def _check(
    file: str,
    p: str | None,
    params: tuple[str, ...],
    codecs: tuple[str, ...],
    dims: str | None,
    as_json: bool,
    shown: int,
    model: str,
    keep_going: bool,
    jobs: int | None,
    trace: int | None,
    input_bound: float,
    tolerance: float | None,
) -> NoReturn:
    ranges = collect_ranges(p, params, dims)
    alg = _load(file, codecs, as_json)
    _check_values(alg, ranges, p, params, dims, as_json)
    instances = parameter_sets(ranges, alg.program)
    if len(instances) == 1:
        _check_one(file, alg, instances[0], as_json, shown, model, trace, input_bound, tolerance)
    if trace is not None:
        raise click.UsageError("--trace needs a single instance (one value of each parameter)")
    limits = {"input_bound": input_bound, "tolerance": tolerance}
    outcome = _sweep_with_progress(alg, instances, model, keep_going, jobs, quiet=as_json, limits=limits)
    if as_json:
        click.echo(json.dumps(report.sweep_json(alg, outcome), indent=2))
    else:
        click.echo(report.sweep_text(alg, outcome, shown))
    if outcome.total and outcome.skipped == outcome.total:  # nothing was checked: say why, at the constraint
        try:
            alg.instantiate(**instances[0])
        except CollError as err:
            fail_input(err, alg.sources)  # the report (JSON too) is out: the reason goes to stderr
    first = outcome.failures[0] if outcome.failures else None
    sys.exit(EXIT_OK if first is None else EXIT_INPUT if first.status == "error" else EXIT_WRONG)


def _check_one(
    file: str,
    alg: api.Algorithm,
    params: dict[str, ParamValue],
    as_json: bool,
    shown: int,
    model: str,
    trace: int | None,
    input_bound: float,
    tolerance: float | None,
) -> NoReturn:
    """One instance: sized first when large (`collc.verify.budget`), then from its step formulas, through its
    rank symmetry, or op by op, whichever fits and decides first."""
    symbolic = symbolic_for(alg.program, [params], model) if trace is None else None
    chosen = instance_plan(alg.program, params, model if trace is None else "trace", symbolic)
    if chosen is not None and not chosen.paths:
        _input_error(chosen.refusal(alg.program, params, file=file), alg.sources, as_json)
    ran: list[str] = []
    if trace is None:
        fast: tuple[Schedule, InstanceResult] | None = None
        orbit = None
        if symbolic is not None and (chosen is None or MODEL in chosen.paths):
            ran.append(MODEL)
            fast = _from_model(alg, params, symbolic, chosen, as_json)
        if fast is None and model == "step" and (chosen is None or SYMMETRY in chosen.paths):
            fast, orbit = _from_symmetry(alg, params, as_json, chosen)
            if chosen is not None:
                ran.append(SYMMETRY)
        if fast is not None:
            schedule, result = fast
            assert result.report is not None
            if as_json:
                out = report.report_json(schedule, result.report, result.deadlock)
                if orbit is not None:
                    out["symmetry"] = {"shift": orbit.shift, "chunks": orbit.chunks}
                click.echo(json.dumps(out, indent=2))
            else:
                click.echo(report.report_text(schedule, result.report, alg.sources, shown))
                if orbit is not None:
                    click.echo(f"  {report.orbit_text(orbit, schedule.nranks, result.report.ok)}")
            sys.exit(EXIT_OK if result.status == "ok" else EXIT_WRONG)
    if chosen is not None and PER_OP not in chosen.paths:
        handed = " and the ".join(ran) or None
        _input_error(chosen.refusal(alg.program, params, handed, file), alg.sources, as_json)
    with progress_bar(f"elaborating {alg.name}", quiet=as_json) as bar:
        try:
            schedule = alg.instantiate(**params).schedule
        except CollError as err:
            _input_error(err, alg.sources, as_json)
        if trace is None:
            bar.stage(f"checking {alg.name}", len(schedule.steps))
            result = judge(
                schedule, params, model, input_bound=input_bound, tolerance=tolerance, on_progress=bar.on_progress
            )
    if trace is not None:
        try:
            click.echo(report.trace_text(schedule, trace))
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="'--trace'") from None
        sys.exit(EXIT_OK)
    assert result.report is not None
    result = dataclasses.replace(result, report=explain_report(alg.program, schedule, result.report))
    if as_json:
        click.echo(json.dumps(report.report_json(schedule, result.report, result.deadlock), indent=2))
    else:
        click.echo(report.report_text(schedule, result.report, alg.sources, shown))
    sys.exit(EXIT_OK if result.status == "ok" else EXIT_WRONG)


def _input_error(err: CollError, sources: Sources, as_json: bool) -> NoReturn:
    """Bad input (exit 2): the diagnostic as text on stderr, or with ``--json`` as JSON on stdout."""
    if not as_json:
        fail_input(err, sources)
    progress.hide()
    click.echo(json.dumps(report.error_json(err, sources), indent=2))
    sys.exit(EXIT_INPUT)


def _load(file: str, codecs: tuple[str, ...], as_json: bool) -> api.Algorithm:
    """The program with its ``--codec`` overrides (`collc.cli.common.load_algorithm`, with JSON errors)."""

    def fail(err: CollError, sources: Sources) -> NoReturn:
        _input_error(err, sources, as_json)

    return load_algorithm(file, codecs, fail)


def _check_values(
    alg: api.Algorithm,
    ranges: dict[str, list[ParamValue]],
    p: str | None,
    params: tuple[str, ...],
    dims: str | None,
    as_json: bool,
) -> None:
    """`collc.cli.common.check_values`, whose missing-parameter error comes as JSON with ``--json``."""
    if as_json:
        try:
            alg.check_given(ranges)
        except CollError as err:
            _input_error(err, alg.sources, as_json)
    check_values(alg, ranges, p, params, dims)


def _from_model(
    alg: api.Algorithm, params: dict[str, ParamValue], symbolic: Model, chosen: Plan | None, quiet: bool
) -> tuple[Schedule, InstanceResult] | None:
    """A correct instance checked from the program's symbolic model (`collc.verify.vector`), without
    elaborating every rank; None when that path does not find it correct."""
    most = MAX_SLOTS if chosen is None else ANY_SLOTS  # sized: the plan says its state fits
    with progress_bar(f"checking {alg.name} from its step formulas", quiet=quiet):
        fast = check_model(alg.program, symbolic, params, max_slots=most)
    if fast is None:
        return None
    return fast[0], InstanceResult(dict(params), "ok", fast[1], check_step(fast[0], 0), None)


def _from_symmetry(
    alg: api.Algorithm, params: dict[str, ParamValue], quiet: bool, chosen: Plan | None
) -> tuple[tuple[Schedule, InstanceResult] | None, Orbit | None]:
    """A large allreduce instance checked through its rank symmetry (`collc.verify.symmetry`): one orbit of
    chunks at every rank; (None, None) when that path does not apply or leaves it to the per-op checker."""
    with progress_bar(f"checking {alg.name} through its rank symmetry", quiet=quiet) as bar:
        try:
            memory = chosen.budget if chosen is not None else None
            got = check_symmetric(alg.program, params, on_progress=bar.on_progress, memory=memory)
        except CollError as err:  # an error of the program at an instance the per-op checker cannot hold
            _input_error(err, alg.sources, quiet)
    if got is None:
        return None, None
    header, checked, orbit = got
    status = "ok" if checked.ok else "wrong"
    return (header, InstanceResult(dict(params), status, checked, check_step(header, 0), None)), orbit


def _check_all_p(
    file: str,
    params: tuple[str, ...],
    codecs: tuple[str, ...],
    dims: str | None,
    as_json: bool,
    shown: int,
    model: str,
    bound: int,
    solver_time: int = 60,
    time_limit: int = 600,
    verbose: bool = False,
) -> NoReturn:
    if dims is not None:
        raise click.UsageError("--ranks all proves a program over p; --dims fixes the shape (and so p) instead")
    ranges = collect_ranges(None, params, None)
    alg = _load(file, codecs, as_json)
    if alg.program.hierarchy is not None:
        raise click.UsageError(
            f"--ranks all: {alg.name} has a hierarchy, whose p splits over its levels; check a range instead "
            "(-p 2..N, with --param LEVEL=G to fix a level)"
        )
    _check_values(alg, {**ranges, "p": [1]}, "all", params, None, as_json)  # p: any int, to check the rest
    values: dict[str, int] = {}
    for name, given in ranges.items():
        if len(given) != 1 or not isinstance(given[0], int):
            raise bad_value("--param", name, "takes one integer value with --ranks all")
        values[name] = given[0]
    with progress_bar(f"proving {alg.name} for all p", quiet=as_json):
        outcome = check_all_p(
            alg.program, values, bound=bound, model=model, solver_seconds=solver_time, time_limit=time_limit
        )
    if as_json:
        click.echo(json.dumps(report.allp_json(alg, outcome), indent=2))
    else:
        click.echo(report.allp_text(alg, outcome, shown, verbose=verbose))
    failure = outcome.failure
    if failure is None:
        sys.exit(EXIT_OK)
    sys.exit(EXIT_INPUT if failure.status == "error" else EXIT_WRONG)


def _sweep_with_progress(
    alg: api.Algorithm,
    instances: list[dict[str, ParamValue]],
    model: str,
    keep_going: bool,
    jobs: int | None,
    quiet: bool,
    limits: dict[str, Any],
) -> SweepResult:
    with progress_bar(f"checking {alg.name}", len(instances), quiet=quiet, delay=0) as bar:
        return sweep(
            alg.program,
            instances,
            model=model,
            jobs=jobs,
            keep_going=keep_going,
            on_progress=bar.on_progress,
            **limits,
        )


@main.command()
@instance_options
@click.option("--json", "as_json", is_flag=True, help="Print the schedule IR as JSON (docs/ir-json.md).")
@click.option("--rank", "only_rank", type=int, default=None, help="Show only this rank's operations.")
def show(
    file: str,
    p: str | None,
    params: tuple[str, ...],
    codecs: tuple[str, ...],
    dims: str | None,
    as_json: bool,
    only_rank: int | None,
) -> None:
    """Print a schedule step by step (or its IR as JSON)."""
    inst = load_instance(file, p, params, dims, codecs)
    s = inst.schedule
    if only_rank is not None and not 0 <= only_rank < s.nranks:
        raise bad_value("--rank", str(only_rank), f"is not a rank of this schedule (ranks 0..{s.nranks - 1})")
    if as_json:
        click.echo(json.dumps(inst.to_json()))
        return
    click.echo(
        f"{s.algorithm} ({s.collective.value}) {report.params_text(s.params)}: {s.nranks} ranks, {s.nchunks} chunks, "
        f"{len(s.steps)} steps" + "".join(f"; codec {name} = {spec}" for name, spec in s.codecs)
    )
    width = 10 if s.compresses() else 4  # room for "decompress"
    names = max((len(step.phase) for step in s.steps), default=0)
    header = (
        f"{'step':>5}  {'phase':<{names}} {'rank':>5}  {'op':<{width}} {'peer':>5}  {'action':<6} {'line':>5}  chunks"
    )
    click.echo(header)
    click.echo("-" * len(header))
    for step in s.steps:
        for op in step.ops:
            if only_rank is not None and op.rank != only_rank:
                continue
            action = op.action.value if op.action is not None else ""
            peer = "" if op.kind.local else str(op.peer)
            codec = f"  [{op.codec}]" if op.codec is not None else ""
            click.echo(
                f"{step.index:>5}  {step.phase:<{names}} {op.rank:>5}  {op.kind.value:<{width}} {peer:>5}  "
                f"{action:<6} {op.span.line:>5}  {op.chunks}{codec}"
            )
