"""Check reports as text for people and as JSON for tools (single instances, sweeps, chunk traces)."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from collc.api import Algorithm
from collc.diagnostics import CollError, Diagnostic, Sources, format_diagnostic, format_error
from collc.ir import ParamValue, Schedule
from collc.verify.check import CheckReport, Finding
from collc.verify.compression import ErrorStats, fmt_bound
from collc.verify.deadlock import DeadlockReport
from collc.verify.findings import contents_note
from collc.verify.forall import AllP
from collc.verify.sweep import SKIPPED, InstanceResult, SweepResult
from collc.verify.symmetry import Orbit
from collc.verify.trace import trace_chunk


def value_text(value: object) -> str:
    return "x".join(map(str, value)) if isinstance(value, tuple) else str(value)


def params_text(params: tuple[tuple[str, ParamValue], ...] | dict[str, ParamValue]) -> str:
    items = params.items() if isinstance(params, dict) else params
    return " ".join(f"{name}={value_text(value)}" for name, value in items)


def _json_value(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def finding_json(f: Finding) -> dict[str, Any]:
    return {
        "code": f.code,
        "message": f.message,
        "file": f.span.file,
        "line": f.span.line,
        "column": f.span.column,
        "step": f.step,
        "rank": f.rank,
        "chunk": f.chunk,
        "expected": f.expected,
        "actual": f.actual,
        **(
            {"related": [{"file": sp.file, "line": sp.line, "column": sp.column, "message": m} for sp, m in f.related]}
            if f.related
            else {}
        ),
    }


def _finite(value: float) -> float | None:
    """JSON has no infinity: an unbounded figure is null."""
    return value if math.isfinite(value) else None


def compression_json(errors: ErrorStats | None) -> dict[str, Any]:
    """``lossy_hops``, ``error_bound``, ``rms_error`` (0 without compression points; null: unbounded) and details."""
    if errors is None:
        return {"lossy_hops": 0, "error_bound": 0.0, "rms_error": 0.0, "compression": None}
    return {
        "lossy_hops": errors.lossy_hops,
        "error_bound": _finite(errors.error_bound),
        "rms_error": _finite(errors.rms_error),
        "compression": {
            "codecs": list(errors.codecs),
            "input_bound": errors.input_bound,
            "bounded": math.isfinite(errors.error_bound),
            "unbounded_codecs": list(errors.unbounded),
            "worst": {"rank": errors.worst_rank, "chunk": errors.worst_chunk},
            "wire": {
                "max_sent_fraction": errors.max_wire_sent_fraction,
                "max_received_fraction": errors.max_wire_received_fraction,
            },
        },
    }


def compression_text(errors: ErrorStats) -> str:
    """One line on the compression points' error, for people."""
    where = f" (rank {errors.worst_rank}, chunk {errors.worst_chunk})" if errors.worst_rank is not None else ""
    text = (
        f"compression ({', '.join(errors.codecs)}): at most {errors.lossy_hops} lossy compression(s) per output "
        f"element; worst-case error bound {fmt_bound(errors.error_bound)}{where}, rms estimate "
        f"{fmt_bound(errors.rms_error)}, for inputs |x| <= {errors.input_bound:g}"
    )
    if errors.unbounded:
        text += f"; unbounded: {', '.join(errors.unbounded)} has no sound error bound"
    return text


def report_json(schedule: Schedule, report: CheckReport, deadlock: DeadlockReport | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "algorithm": schedule.algorithm,
        "collective": schedule.collective.value,
        "source": schedule.source,
        "params": {k: _json_value(v) for k, v in schedule.params},
        "nranks": schedule.nranks,
        "nchunks": schedule.nchunks,
        "ok": report.ok and (deadlock is None or deadlock.ok),
        "stats": {k: _json_value(v) for k, v in asdict(report.stats).items()},
        **compression_json(report.compression),
        "findings": [finding_json(f) for f in report.findings],
        **_omitted_json(report),
    }
    if deadlock is not None:
        out["deadlock"] = {"model": deadlock.model, "ok": deadlock.ok, "message": deadlock.message}
    return out


def _omitted_json(report: CheckReport) -> dict[str, Any]:
    """The findings past the verifier's cap: how many, per code (absent when none were dropped)."""
    if not report.omitted:
        return {}
    return {"omitted": report.omitted, "omitted_by_code": dict(report.omitted_by_code)}


def orbit_text(orbit: Orbit, nranks: int, ok: bool = True) -> str:
    """How an instance checked through its rank symmetry (`collc.verify.symmetry`) was checked."""
    k, width = orbit.shift, orbit.chunks
    chunks = "chunk 0" if width == 1 else f"chunks 0..{width - 1}"
    text = (
        f"checked through its rank symmetry: every rank r does what rank r mod {k} does, every peer and chunk "
        f"moved by r - r mod {k}; {chunks} (one of each orbit) followed at all {nranks} ranks"
    )
    if not ok:
        text += f"; every chunk c fails as chunk c mod {width} does"
    return text


def summary_text(report: CheckReport) -> str:
    stats, errors = report.stats, report.compression
    traffic = f"{stats.max_sent_fraction:.4g} of the vector sent and {stats.max_received_fraction:.4g} received"
    if errors is not None:  # compressed chunks travel smaller: both figures
        traffic += (
            f" raw, {errors.max_wire_sent_fraction:.4g} and {errors.max_wire_received_fraction:.4g} on the wire "
            f"(compressed chunks at their codec's worst-case size)"
        )
    text = (
        f"{stats.steps} steps, {stats.messages} messages, per rank at most {traffic}; "
        f"deficiency: latency {stats.latency_deficiency:.3g}x, bandwidth {stats.bandwidth_deficiency:.3g}x "
        f"of the lower bounds"
    )
    if stats.temp_buffer_steps:
        text += f"; {stats.temp_buffer_steps} (step, rank) pairs need a temporary receive buffer"
    if report.compression is not None:
        text += f"\n  {compression_text(report.compression)}"
    return text


def _diagnostic(f: Finding) -> Diagnostic:
    note = contents_note(f)
    return Diagnostic("error", f.message, f.span, (note,) if note is not None else ())


def finding_text(f: Finding, sources: Sources) -> str:
    """A finding with its source line and caret, then each related place (the other step of a race) likewise."""
    parts = [format_diagnostic(_diagnostic(f), sources)]
    parts.extend(format_diagnostic(Diagnostic("note", text, span), sources) for span, text in f.related)
    return "\n".join(parts)


def _more_findings(report: CheckReport, shown: int, how: str) -> list[str]:
    """The lines after the ``shown`` findings printed: those listed but not printed, and those not kept."""
    lines = []
    listed = len(report.findings)
    if listed > shown:
        lines.append(f"  ... and {listed - shown} more {how}")
    omitted = report.omitted_text()
    if omitted is not None:
        lines.append(f"  ... and {omitted}")
    return lines


def report_text(schedule: Schedule, report: CheckReport, sources: Sources, shown: int = 5) -> str:
    head = f"{schedule.algorithm} ({schedule.collective.value}) {params_text(schedule.params)}"
    if report.ok:
        return f"{head}: correct\n  {summary_text(report)}"
    total = len(report.findings) + report.omitted
    lines = [f"{head}: WRONG ({total} finding(s))"]
    for f in report.findings[:shown]:
        lines.append(finding_text(f, sources))
    lines.extend(_more_findings(report, shown, "(--show N prints more, --json lists them)"))
    lines.append(f"  {summary_text(report)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Sweeps
# --------------------------------------------------------------------------


def _instance_json(result: InstanceResult) -> dict[str, Any]:
    out: dict[str, Any] = {"params": {k: _json_value(v) for k, v in result.params.items()}, "status": result.status}
    if result.report is not None:
        out["stats"] = {k: _json_value(v) for k, v in asdict(result.report.stats).items()}
        out.update(compression_json(result.report.compression))
        out["findings"] = [finding_json(f) for f in result.report.findings]
        out.update(_omitted_json(result.report))
    if result.error is not None:
        out["error"] = _error_fields(result.error)
    return out


def _error_fields(err: CollError) -> dict[str, Any]:
    span = err.span
    return {
        "message": err.message,
        "file": span.file if span else None,
        "line": span.line if span else None,
        "column": span.column if span else None,
        "notes": list(err.notes),
    }


def error_json(err: CollError, sources: Sources) -> dict[str, Any]:
    """Bad input (a syntax error, an error of the program, an instance too large to check) for ``--json``: the
    diagnostic's fields, and its text as people read it (``text``: with the source line and caret)."""
    return {"ok": False, "status": "error", "error": {**_error_fields(err), "text": format_error(err, sources)}}


def sweep_json(alg: Algorithm, outcome: SweepResult) -> dict[str, Any]:
    first = outcome.failures[0] if outcome.failures else None
    return {
        "algorithm": alg.name,
        "collective": alg.collective.value,
        "ok": outcome.ok,
        "instances": outcome.total,
        "checked": outcome.checked,
        "skipped": outcome.skipped,
        "failed": len(outcome.failures),
        "stopped_early": outcome.stopped_early,
        "smallest_failure": _instance_json(first) if first is not None else None,
        "results": [_instance_json(r) for r in outcome.results],
    }


def _span_of(params: list[dict[str, ParamValue]]) -> str:
    if not params:
        return "no instances"
    if len(params) == 1:
        return params_text(params[0])
    return f"{params_text(params[0])} .. {params_text(params[-1])}"


def sweep_text(alg: Algorithm, outcome: SweepResult, shown: int = 5) -> str:
    checked = [r for r in outcome.results if r.status != SKIPPED]
    head = f"{alg.name} ({alg.collective.value})"
    counts = f"{outcome.checked} instance(s) checked, {outcome.skipped} skipped by the program's constraints"
    if outcome.ok:
        if not checked:
            return f"{head}: no instance in the range satisfies the program's constraints ({outcome.skipped} skipped)"
        last = checked[-1]
        assert last.report is not None
        return (
            f"{head}: correct for every instance, {_span_of([r.params for r in checked])}\n"
            f"  {counts}\n  largest, {params_text(last.params)}: {summary_text(last.report)}"
        )
    first = outcome.failures[0]
    before = sum(1 for r in outcome.results[: outcome.results.index(first)] if r.status == "ok")
    lines = [
        f"{head}: FAILS; the smallest failing instance is {params_text(first.params)} "
        f"({before} smaller instance(s) correct)",
        f"  {counts}" + (", stopped at the first failure" if outcome.stopped_early else ""),
    ]
    if len(outcome.failures) > 1:
        lines.append(f"  failing: {', '.join(params_text(r.params) for r in outcome.failures[:12])}")
    if first.error is not None:
        lines.append(format_error(first.error, alg.sources))
    elif first.report is not None:
        sources = alg.sources
        for f in first.report.findings[:shown]:
            lines.append(finding_text(f, sources))
        lines.extend(_more_findings(first.report, shown, "for this instance (--json lists them)"))
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Chunk traces
# --------------------------------------------------------------------------


def trace_text(schedule: Schedule, chunk: int) -> str:
    events, final = trace_chunk(schedule, chunk)
    lines = [f"history of chunk {chunk} in {schedule.algorithm} {params_text(schedule.params)}"]
    names = max([len("phase")] + [len(e.phase) for e in events])  # phase names whole, aligned
    lines.append(
        f"{'step':>5}  {'phase':<{names}} {'rank':>5} {'from':>5}  {'action':<6} {'line':>5}  contributions after"
    )
    for e in events:
        lines.append(
            f"{e.step:>5}  {e.phase:<{names}} {e.rank:>5} {e.peer:>5}  {e.action:<6} {e.span.line:>5}  "
            f"{e.after}   (was {e.before})"
        )
    lines.append("at the end:")
    for rank, text in enumerate(final):
        lines.append(f"  rank {rank}: {text}")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# For all p (`--ranks all`)
# --------------------------------------------------------------------------


def allp_text(alg: Algorithm, result: AllP, shown: int = 5, verbose: bool = False) -> str:
    """The verdict for every p.  A failure's counterexample comes first, then why there is no proof; the
    invariants learned for a proof that failed or was not found only with ``verbose`` (a proof's are its
    content, and always shown)."""
    head = f"{alg.name} ({alg.collective.value})"
    fixed = ", ".join(f"{k}={v}" for k, v in result.fixed)
    lines = []
    if result.status == "proved":
        lines.append(f"{head}: PROVED for every p the constraints allow")
        lines.append(f"  how: {result.how}")
        if result.every:
            lines.append(f"  for {result.every}")
    elif result.status == "counterexample":
        assert result.failure is not None
        lines.append(f"{head}: FAILS at p={result.failure.params['p']} (counterexample)")
    else:
        lines.append(f"{head}: not proved; correct for every allowed p up to {result.bound} ({result.checked} checked)")
    failure = result.failure
    if failure is not None:
        if failure.error is not None:
            lines.append(format_error(failure.error, alg.sources))
        elif failure.report is not None:
            for f in failure.report.findings[:shown]:
                lines.append(finding_text(f, alg.sources))
            lines.extend(_more_findings(failure.report, shown, "for this instance (--json lists them)"))
    if result.status != "proved" and result.how:
        where = f" ({result.span})" if result.span is not None else ""
        lines.append(f"  no proof for all p: {result.how}{where}")
    if fixed:
        lines.append(f"  other parameters: {fixed} (the result is for these values; --param sets others)")
    if result.status == "proved" or verbose:
        for n, inv in enumerate(result.invariants, 1):
            lines.append(f"  invariant of step loop {n}: holds(r, c, j) <=> {inv}")
    elif result.invariants:
        lines.append(f"  ({len(result.invariants)} learned invariant(s) not shown: --verbose prints them)")
    return "\n".join(lines)


def allp_json(alg: Algorithm, result: AllP) -> dict[str, Any]:
    return {
        "algorithm": alg.name,
        "collective": alg.collective.value,
        "status": result.status,
        "how": result.how,
        "where": str(result.span) if result.span is not None else None,
        "parameters": dict(result.fixed),
        "every": result.every or None,
        "invariants": list(result.invariants),
        "checked_up_to": result.bound if result.status == "checked" else None,
        "checked": result.checked,
        "counterexample": _instance_json(result.failure) if result.failure is not None else None,
    }
