"""Fuzzing collc's front end: random and mutated `.coll` inputs through parse, elaborate and check.

Every input goes the way ``collc check`` takes one instance (`collc.api`: parse
and name checks, the parameters, elaboration; then `collc.verify.sweep.judge`:
the verifier and the deadlock check, under the step model or, for a fifth of
the inputs, the blocking one; the report as text and as JSON) under a
per-input watchdog, and ends in one of:

* ``accepted``: it elaborated and was judged (correct or not; every finding
  must be located, and a template, written to be correct, must verify);
* ``rejected``: a `CollError` located at ``file:line:col`` inside the file it
  names, whose formatted form (`collc.diagnostics.format_error`) shows that
  line, with a message of reasonable length that leaks no Python internals;
* ``failure``: anything else: another exception (a traceback for the user), a
  diagnostic without a location or with a bad one, no result within the
  watchdog's budget, a correct template that does not verify.

Inputs come from four generators, each seeded (`cases`):

* ``grammar``: random sentences of ``grammar/coll.lark`` (`fuzz_grammar`);
* ``mutated``: the bundled examples, mutated as text (`fuzz_mutate`);
* ``template``: correct algorithms written in random equivalent forms (`fuzz_templates`);
* ``stress``: pathological inputs aimed at the limits: deep nesting, runaway
  loops and recursion, huge numbers, odd line ends (`fuzz_mutate.stress_case`).

``python tests/coll_fuzz.py N`` runs N inputs and prints the failures;
``benchmarks/fuzz.py`` prints the table by kind.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import signal
import sys
import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from collc import api
from collc.diagnostics import CollError, format_error, source_line, source_lines
from collc.ir import ParamValue, Span
from collc.report import report_json, report_text
from collc.verify.sweep import judge

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuzz_grammar
import fuzz_mutate
import fuzz_templates

KINDS = ("grammar", "mutated", "template", "stress", "heavy")
MIX = {"grammar": 0.3, "mutated": 0.4, "template": 0.2, "stress": 0.1}
"""The default mix; ``heavy`` inputs (each tens of seconds, see `fuzz_mutate.HEAVY`) are asked for apart."""
SEED = 20240611
BUDGET_S = 60.0
"""The watchdog: an input without a result after this long is a failure (a hang or a limit missing). No input
the generators make needs more than a few seconds; the budget only keeps one bad input from stalling a run."""
MAX_MESSAGE = 800
"""The longest message a diagnostic may have (the caret line and notes aside)."""
_LEAKS = re.compile(
    r"Traceback|object has no attribute|NoneType|invalid literal for|"
    r"Numerical result out of range|Exceeds the limit|maximum recursion depth|int too large|"
    r"cannot convert float|OverflowError|ValueError|TypeError|KeyError|IndexError|RecursionError|"
    r"<class |<function |\bobject at 0x"
)


@dataclass(frozen=True, slots=True)
class Case:
    """One input: the text, the file name it is parsed under (includes resolve next to it), the
    parameter values, and whether it is written to be correct (a template)."""

    kind: str
    text: str
    file: str
    params: Mapping[str, ParamValue] = field(default_factory=dict)
    correct: bool = False
    origin: str = ""
    model: str = "step"  # the execution model of the deadlock check (collc check --model)


@dataclass(frozen=True, slots=True)
class Outcome:
    case: Case
    status: str  # accepted | rejected | failure
    stage: str  # parse | params | elaborate | check
    detail: str
    seconds: float  # wall clock
    cpu: float  # this process's CPU time (steadier than the wall clock on a shared machine)


class WatchdogExpired(BaseException):
    """Raised in the main thread when an input runs past its budget (a BaseException, so that no
    ``except Exception`` in the code under test can swallow it)."""


@contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise `WatchdogExpired` in this (main) thread after ``seconds``."""

    def expire(signum: int, frame: object) -> None:
        raise WatchdogExpired

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def location_problem(span: Span | None, sources: Mapping[str, str]) -> str | None:
    """What is wrong with where a diagnostic points, or None when it names a line and column of its file."""
    if span is None:
        return "no location"
    if span.line < 1 or span.column < 1:
        return f"location {span.file}:{span.line}:{span.column} is not a line and column"
    text = sources.get(span.file)
    if text is None:
        return f"location in {span.file!r}, a file whose text is unknown"
    lines = source_lines(text)
    if span.line > max(1, len(lines)):
        return f"line {span.line} is past the end of {span.file} ({len(lines)} lines)"
    line = lines[span.line - 1] if lines else ""
    if span.column > len(line) + 2:
        return f"column {span.column} is past the end of line {span.line} ({len(line)} characters)"
    return None


def diagnostic_problem(err: CollError, sources: Mapping[str, str]) -> str | None:
    """What is wrong with a diagnostic (location, length, wording), or None."""
    problem = location_problem(err.span, sources)
    if problem is not None:
        return problem
    if not err.message.strip():
        return "an empty message"
    if len(err.message) > MAX_MESSAGE:
        return f"a message of {len(err.message)} characters"
    leak = _LEAKS.search(err.message)
    if leak is not None:
        return f"the message shows Python internals ({leak.group(0)!r})"
    text = format_error(err, sources)
    assert err.span is not None
    head = f"{err.span.file}:{err.span.line}:{err.span.column}: error: "
    if not text.startswith(head):
        return "its formatted form does not start with file:line:col"
    if source_line(sources, err.span) and "^" not in text:
        return "its formatted form lacks the caret under the source line"
    return None


def _where(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "collc" in f.filename]
    if not frames:
        return ""
    last = frames[-1]
    return f" at {Path(last.filename).name}:{last.lineno} ({last.name})"


def run_case(case: Case, budget: float = BUDGET_S) -> Outcome:
    """Parse, elaborate and check one input, as the CLI does; the outcome says how it ended."""
    start, start_cpu = time.perf_counter(), time.process_time()
    stage = "parse"
    sources: dict[str, str] = {case.file: case.text}

    def outcome(status: str, detail: str) -> Outcome:
        return Outcome(case, status, stage, detail, time.perf_counter() - start, time.process_time() - start_cpu)

    try:
        with watchdog(budget):
            try:
                alg = api.parse(case.text, case.file)
            except CollError as err:
                sources.update(err.sources)
                raise
            sources.update(alg.sources)
            stage = "params"
            params = {k: v for k, v in case.params.items() if alg.param_problem(k, v) is None}
            alg.check_given(params)
            stage = "elaborate"
            inst = alg.instantiate(**params)
            stage = "check"
            result = judge(inst.schedule, params, case.model)  # what collc check does with one instance
            report = result.report
            assert report is not None
            for finding in report.findings:
                problem = location_problem(finding.span, sources)
                if problem is not None:
                    return outcome("failure", f"finding {finding.code} ({finding.message[:200]}): {problem}")
            report_text(inst.schedule, report, sources)
            json.dumps(report_json(inst.schedule, report, result.deadlock))
            if case.correct and result.status != "ok":
                first = report.findings[0].message if report.findings else result.deadlock.message
                return outcome("failure", f"a correct program does not verify: {first[:300]}")
            return outcome("accepted", "correct" if result.status == "ok" else "WRONG")
    except CollError as err:
        problem = diagnostic_problem(err, sources)
        if problem is not None:
            return outcome("failure", f"diagnostic with {problem}: {err.message[:300]!r}")
        return outcome("rejected", err.message[:200])
    except WatchdogExpired:
        return outcome("failure", f"no result within {budget:g} s")
    except (Exception, RecursionError, MemoryError) as err:
        return outcome("failure", f"{type(err).__name__}: {str(err)[:300]}{_where(err)}")


# --------------------------------------------------------------------------
# The inputs
# --------------------------------------------------------------------------


def make_case(kind: str, rng: random.Random, quick: bool = False) -> Case:
    """One input of ``kind``; ``quick`` leaves out the stress inputs that take collc seconds.  A fifth of
    the inputs that need not verify are checked under the blocking model of deadlocks."""
    case = _make_case(kind, rng, quick)
    if not case.correct and rng.random() < 0.2:
        case = dataclasses.replace(case, model="blocking")
    return case


def _make_case(kind: str, rng: random.Random, quick: bool) -> Case:
    if kind == "grammar":
        return Case(
            "grammar", fuzz_grammar.random_program(rng), fuzz_mutate.scratch_file(), fuzz_mutate.random_params(rng)
        )
    if kind == "mutated":
        return fuzz_mutate.mutated_case(rng)
    if kind == "template":
        text, params, origin = fuzz_templates.random_template(rng)
        return Case("template", text, fuzz_mutate.scratch_file(), params, correct=True, origin=origin)
    if kind == "stress":
        return fuzz_mutate.stress_case(rng, "quick" if quick else "full")
    if kind == "heavy":
        return fuzz_mutate.stress_case(rng, "heavy")
    raise ValueError(f"unknown kind {kind!r}")


def cases(n: int, seed: int = SEED, kinds: Mapping[str, float] = MIX, quick: bool = False) -> Iterator[Case]:
    """``n`` inputs, the kinds mixed in the proportions given; the same ``seed`` gives the same inputs."""
    rng = random.Random(seed)
    names, weights = list(kinds), list(kinds.values())
    for i in range(n):
        kind = rng.choices(names, weights)[0]
        yield make_case(kind, random.Random(rng.getrandbits(64) ^ i), quick)


def run(n: int, seed: int = SEED, budget: float = BUDGET_S, quick: bool = False) -> list[Outcome]:
    return [run_case(case, budget) for case in cases(n, seed, quick=quick)]


def main(argv: list[str]) -> int:
    n = int(argv[1]) if len(argv) > 1 else 500
    seed = int(argv[2]) if len(argv) > 2 else SEED
    failures = 0
    for i, case in enumerate(cases(n, seed)):
        out = run_case(case)
        if out.status == "failure":
            failures += 1
            print(f"--- #{i} {case.kind} {case.origin} params={dict(case.params)} [{out.stage}] {out.detail}")
            print(case.text[:1500])
    print(f"{n} inputs, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
