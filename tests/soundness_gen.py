"""The soundness campaign: generated programs through every path of the verifier, judged by the per-op checker.

A *case* is (program, path, instance).  The truth at an instance is the per-op checker's verdict on the fully
elaborated schedule (`collc.verify.check.check(schedule, fast=False)`): ``ok``, ``wrong``, or ``error`` when
the program does not elaborate there (an evaluation error; a constraint violation is a skip, not a case).
The paths, each asked at every instance (the all-p prover once per program, its verdict projected on every
instance tested):

* ``fast``: the same checker with its numpy fast path, ``check(schedule)``;
* ``vector``: the step formulas, ``vector.prepare`` once, then ``vector.check_model`` per instance (None:
  handed over);
* ``symmetry``: ``symmetry.check_symmetric(program, params, min_slots=0, batch=4)`` (None: handed over);
* ``sweep``: ``sweep.sweep(program, instances, jobs=1, keep_going=True)``, which picks its paths itself;
* ``allp``: ``forall.check_all_p``: ``proved`` claims every instance correct, ``checked`` up to its bound
  claims every instance up to the bound correct, ``counterexample`` claims its p wrong.

A path's claim at a case is ``correct``, ``wrong``, ``refused`` (no verdict), ``timeout`` or ``crash`` (an
exception other than a `CollError`).  A claim ``correct`` where the truth is ``wrong`` or ``error`` is
UNSOUND; ``wrong`` where the truth is ``ok`` is a false alarm.

`run_program(index, seed, options)` generates program ``index`` of campaign ``seed`` (deterministic) and
runs it; `benchmarks/soundness.py` runs many in worker processes and prints the table.
"""

from __future__ import annotations

import random
import signal
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import soundness_families
import soundness_programs
from soundness_programs import Generated

from collc import api
from collc.diagnostics import CollError
from collc.elaborate import elaborate
from collc.frontend.program import Program
from collc.ir import ParamValue
from collc.verify import forall, sweep, symmetry, vector
from collc.verify.check import check

PATHS = ("fast", "vector", "symmetry", "sweep", "allp")
CLAIMS = ("correct", "wrong", "refused", "timeout", "crash")

ANY_SMALL = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
ANY_MID = (*range(13, 32), 33, 40, 41, 42, 48)
ANY_BIG = (63, 64, 65, 96, 100, 127, 128)
POW2 = (1, 2, 4, 8, 16, 32, 64, 128)
HIER = ((1, 1), (1, 4), (2, 3), (3, 2), (2, 5), (4, 4), (3, 7), (5, 5), (2, 12), (4, 8), (8, 8), (3, 11), (6, 5))

Params = dict[str, ParamValue]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Options:
    """How much to run: instances per program, watchdogs, the prover's limits."""

    small: int = 4  # p values drawn from ANY_SMALL (any-p programs)
    mid: int = 6  # from ANY_MID (plus one of 22 .. 30, so that rank 21 exists)
    big: int = 2  # from ANY_BIG
    max_p: int = 128
    bound: int = 16  # check_all_p's bound
    solver_seconds: int = 10
    allp: bool = True
    allp_every: int = 1  # the prover runs on the programs whose index is a multiple of this
    allp_skip: tuple[str, ...] = ("swing_bw_pow2",)  # families whose proof takes minutes
    extra: float = 0.15  # programs of the mixed campaign drawn from `soundness_families`
    path_timeout: int = 60  # seconds per path call
    allp_timeout: int = 150
    planted: float = 0.5  # the share of programs with a planted deviation
    family: str = ""  # only that base algorithm: bruck, roots, rabenseifner, bruck_alltoall (benchmarks/soundness.py)
    templates: float = 0.08  # the share written by fuzz_templates.random_template, as is


@dataclass(frozen=True, slots=True)
class Truth:
    label: str  # p, or nodes x local
    params: Params
    status: str  # ok | wrong | error
    message: str = ""


@dataclass(frozen=True, slots=True)
class Case:
    path: str
    label: str
    truth: str  # ok | wrong | error
    claim: str  # correct | wrong | refused | timeout | crash
    detail: str = ""

    @property
    def verdict(self) -> str:
        """unsound | false_alarm | agreed | refused | timeout | crash"""
        if self.claim == "correct":
            return "agreed" if self.truth == "ok" else "unsound"
        if self.claim == "wrong":
            return "false_alarm" if self.truth == "ok" else "agreed"
        return self.claim


@dataclass(slots=True)
class Result:
    index: int
    seed: int
    program: Generated
    truths: list[Truth] = field(default_factory=list)
    cases: list[Case] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    skipped: str = ""  # why the program has no cases (the reference timed out, it does not parse)

    def unsound(self) -> list[Case]:
        return [c for c in self.cases if c.verdict == "unsound"]


# --------------------------------------------------------------------------
# Programs and instances
# --------------------------------------------------------------------------


def program_rng(seed: int, index: int) -> random.Random:
    return random.Random(seed * 1_000_003 + index)


def make_program(seed: int, index: int, options: Options = Options()) -> Generated:
    """Program ``index`` of campaign ``seed``."""
    rng = program_rng(seed, index)
    if rng.random() < options.templates and not options.family:
        import fuzz_templates

        text, params, name = fuzz_templates.random_template(rng)
        fixed = tuple((k, int(v)) for k, v in params.items() if k not in ("p",) and isinstance(v, int))
        kind = "pow2" if name == "recursive_doubling" else "a2a" if "alltoall" in name else "any"
        kind = "even" if name == "swing_even" else kind
        return Generated(name, text, (), f"template:{name}", kind, fixed, ("template",), None)
    only = {"bruck": soundness_programs.bruck, "roots": soundness_families.rooted,
            "rabenseifner": soundness_families.rabenseifner,
            "bruck_alltoall": soundness_families.bruck_alltoall}.get(options.family)  # fmt: skip
    if only is None and rng.random() < options.extra:
        only = rng.choice(soundness_families.EXTRA)
    return soundness_programs.generate(rng, rng.random() < options.planted, only)


def instances(program: Generated, rng: random.Random, options: Options) -> list[tuple[str, Params]]:
    """The instances to test, smallest first: (label, parameters)."""
    fixed: Params = dict(program.fixed)
    if program.p_kind == "hier":
        shapes = sorted(rng.sample(HIER, 7), key=lambda s: (s[0] * s[1], s))
        return [(f"{n}x{m}", {"nodes": n, "local": m}) for n, m in shapes]
    if program.p_kind == "pow2":
        ps = [p for p in POW2 if p <= options.max_p]
    else:
        ps = rng.sample(ANY_SMALL, options.small) + rng.sample(ANY_MID, options.mid)
        ps += [rng.choice(range(22, 31)), *rng.sample(ANY_BIG, options.big)]
        if program.p_kind == "even":
            ps = [p + p % 2 for p in ps]
        if program.p_kind == "a2a":
            ps = [p for p in ps if p <= 64]
        ps = sorted({p for p in ps if p <= options.max_p})
    out = []
    for p in ps:
        params = {**fixed, "p": p}
        if "root" in params and isinstance(params["root"], int) and params["root"] >= p:
            params["root"] = 0
        if program.p_kind == "rooted":  # the root left free: another one at every p, the default now and then
            params["root"] = rng.choice((0, rng.randrange(p), rng.randrange(p), p - 1))
        out.append((_label(params), params))
    return out


# --------------------------------------------------------------------------
# Watchdog
# --------------------------------------------------------------------------


class Timeout(BaseException):
    """Raised by SIGALRM (a BaseException, so that nothing in collc swallows it)."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Timeout()


@contextmanager
def watchdog(seconds: int) -> Iterator[None]:
    """Raise `Timeout` after ``seconds`` (main thread only; a no-op elsewhere)."""
    try:
        previous = signal.signal(signal.SIGALRM, _alarm)
    except ValueError:  # not the main thread
        yield
        return
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def guarded(fn: Callable[[], T], seconds: int) -> tuple[str, T | None, str]:
    """("ok", value, "") or ("timeout" | "crash" | "collerror", None, detail)."""
    try:
        with watchdog(seconds):
            return "ok", fn(), ""
    except Timeout:
        return "timeout", None, f"over {seconds} s"
    except CollError as err:
        return "collerror", None, err.message
    except RecursionError:
        return "crash", None, "RecursionError"
    except Exception as err:  # a crash of a path is a finding of its own
        tb = traceback.format_exception(type(err), err, err.__traceback__)
        return "crash", None, f"{type(err).__name__}: {err} | {tb[-2].strip() if len(tb) > 1 else ''}"


# --------------------------------------------------------------------------
# Running the paths
# --------------------------------------------------------------------------


def load(program: Generated, folder: Path) -> Program:
    """Write the program (and its library files) to ``folder`` and parse it."""
    for name, text in program.libs:
        (folder / name).write_text(text)
    path = folder / f"{program.name}.coll"
    path.write_text(program.text)
    return api.parse(program.text, str(path)).program


def run_generated(program: Generated, rng: random.Random, options: Options, result: Result) -> Result:
    with tempfile.TemporaryDirectory(prefix="soundness_") as tmp:
        try:
            prog = load(program, Path(tmp))
        except CollError as err:
            result.skipped = f"does not parse: {err.message}"
            return result
        _run(prog, program, instances(program, rng, options), options, result)
    return result


def run_program(index: int, seed: int, options: Options = Options()) -> Result:
    """Generate program ``index`` of campaign ``seed`` and run every path on it."""
    program = make_program(seed, index, options)
    rng = random.Random(program_rng(seed, index).random() + index)
    return run_generated(program, rng, options, Result(index, seed, program))


def _clock(result: Result, path: str, started: float) -> None:
    result.seconds[path] = result.seconds.get(path, 0.0) + time.perf_counter() - started


def _run(prog: Program, program: Generated, cases: list[tuple[str, Params]], options: Options, result: Result) -> None:
    limit = options.path_timeout
    for label, params in cases:  # the truth, and the fast path on the same schedule
        t0 = time.perf_counter()
        status, schedule, detail = guarded(lambda params=params: elaborate(prog, params), limit)
        if status == "collerror":
            if "violates the constraint" not in detail:
                result.truths.append(Truth(label, params, "error", detail))
            _clock(result, "reference", t0)
            continue
        if status != "ok":
            _clock(result, "reference", t0)
            result.skipped = f"the elaboration at {label}: {status} {detail}"
            return
        status, report, detail = guarded(lambda s=schedule: check(s, fast=False), limit)
        _clock(result, "reference", t0)
        if status != "ok" or report is None:
            result.skipped = f"the per-op check at {label}: {status} {detail}"
            return
        truth = Truth(label, params, "ok" if report.ok else "wrong", "" if report.ok else _first(report))
        result.truths.append(truth)
        t0 = time.perf_counter()
        status, fast, detail = guarded(lambda s=schedule: check(s), limit)
        _clock(result, "fast", t0)
        claim = _claim(status, None if fast is None else fast.ok)
        result.cases.append(Case("fast", label, truth.status, claim, detail))
    truths = result.truths
    _vector(prog, program, truths, options, result)
    _symmetry(prog, truths, options, result)
    _sweep(prog, truths, options, result)
    if (options.allp and result.index % options.allp_every == 0 and program.p_kind != "hier"
            and program.family not in options.allp_skip):  # fmt: skip
        _allp(prog, program, truths, options, result)


def _first(report: Any) -> str:
    return report.findings[0].message[:200] if report.findings else "not ok"


def _claim(status: str, ok: bool | None) -> str:
    if status == "ok":
        return "refused" if ok is None else "correct" if ok else "wrong"
    if status == "collerror":
        return "wrong"  # the path says the program is bad here
    return status


def _vector(prog: Program, program: Generated, truths: list[Truth], options: Options, result: Result) -> None:
    t0 = time.perf_counter()
    status, model, detail = guarded(lambda: vector.prepare(prog, dict(program.fixed)), options.path_timeout)
    for truth in truths:
        if status != "ok" or model is None:
            result.cases.append(Case("vector", truth.label, truth.status, _claim(status, None), detail))
            continue
        st, got, det = guarded(lambda t=truth: vector.check_model(prog, model, t.params), options.path_timeout)
        claim = _claim(st, None if got is None else bool(got[1].ok))
        result.cases.append(Case("vector", truth.label, truth.status, claim, det))
    _clock(result, "vector", t0)


def _symmetry(prog: Program, truths: list[Truth], options: Options, result: Result) -> None:
    t0 = time.perf_counter()
    for truth in truths:
        st, got, det = guarded(
            lambda t=truth: symmetry.check_symmetric(prog, t.params, min_slots=0, batch=4), options.path_timeout
        )
        claim = _claim(st, None if got is None else bool(got[1].ok))
        result.cases.append(Case("symmetry", truth.label, truth.status, claim, det))
    _clock(result, "symmetry", t0)


def _sweep(prog: Program, truths: list[Truth], options: Options, result: Result) -> None:
    t0 = time.perf_counter()
    todo = [dict(t.params) for t in truths]
    st, got, det = guarded(lambda: sweep.sweep(prog, todo, jobs=1, keep_going=True), 2 * options.path_timeout)
    by_label: dict[str, str] = {}
    if st == "ok" and got is not None:
        for r in got.results:
            by_label[_label(r.params)] = {"ok": "correct", "wrong": "wrong", "error": "wrong"}.get(r.status, "refused")
    for truth in truths:
        claim = by_label.get(truth.label, "refused") if st == "ok" else _claim(st, None)
        result.cases.append(Case("sweep", truth.label, truth.status, claim, det))
    _clock(result, "sweep", t0)


def _label(params: Mapping[str, ParamValue]) -> str:
    if "nodes" in params and "local" in params and "p" not in params:
        return f"{params['nodes']}x{params['local']}"
    if "root" in params:
        return f"{params.get('p')}/root={params['root']}"
    return str(params.get("p"))


def _allp(prog: Program, program: Generated, truths: list[Truth], options: Options, result: Result) -> None:
    t0 = time.perf_counter()
    values = {k: int(v) for k, v in program.fixed}
    st, got, det = guarded(
        lambda: forall.check_all_p(prog, values, bound=options.bound, solver_seconds=options.solver_seconds),
        options.allp_timeout,
    )
    _clock(result, "allp", t0)
    if st != "ok" or got is None:
        for truth in truths:
            result.cases.append(Case("allp", truth.label, truth.status, _claim(st, None), det))
        return
    how = f"{got.status}{' for every root' if got.every else ''}: {got.how}"[:300]
    failing = None
    if got.status == "counterexample" and got.failure is not None:
        failing = _label(got.failure.params)
        if failing not in {t.label for t in truths}:  # the truth at the prover's p, to judge its claim
            params = dict(got.failure.params)
            st2, schedule, det2 = guarded(lambda: elaborate(prog, params), options.path_timeout)
            if st2 == "ok" and schedule is not None:
                report = check(schedule, fast=False)
                truths = [*truths, Truth(failing, params, "ok" if report.ok else "wrong")]
            elif st2 == "collerror" and "violates the constraint" not in det2:
                truths = [*truths, Truth(failing, params, "error", det2)]
    root = values.get("root", 0)  # the root proved or checked (the generated defaults are 0), unless every root
    for truth in truths:
        if not got.every and truth.params.get("root", root) != root:  # says nothing of the other roots
            claim = "refused"
        elif got.status == "proved":
            claim = "correct"
        elif got.status == "checked":
            p = truth.params.get("p")
            claim = "correct" if isinstance(p, int) and p <= got.bound else "refused"
        else:
            claim = "wrong" if truth.label == failing else "refused"
        result.cases.append(Case("allp", truth.label, truth.status, claim, how))


# --------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------


@dataclass(slots=True)
class Row:
    cases: int = 0
    took: int = 0
    refused: int = 0
    agreed: int = 0
    unsound: int = 0
    false_alarm: int = 0
    timeout: int = 0
    crash: int = 0
    seconds: float = 0.0


def table(results: list[Result]) -> dict[str, Row]:
    rows = {path: Row() for path in ("reference", *PATHS)}
    for res in results:
        for path, secs in res.seconds.items():
            rows.setdefault(path, Row()).seconds += secs
        rows["reference"].cases += len(res.truths)
        for case in res.cases:
            row = rows[case.path]
            row.cases += 1
            v = case.verdict
            row.took += case.claim in ("correct", "wrong")
            row.refused += v == "refused"
            row.agreed += v == "agreed"
            row.unsound += v == "unsound"
            row.false_alarm += v == "false_alarm"
            row.timeout += v == "timeout"
            row.crash += v == "crash"
    return rows


def format_table(results: list[Result]) -> str:
    rows = table(results)
    head = f"{'path':<10} {'cases':>7} {'took':>7} {'refused':>7} {'agreed':>7} {'UNSOUND':>7} {'false+':>7} " \
           f"{'timeout':>7} {'crash':>6} {'time s':>8}"  # fmt: skip
    out = [head, "-" * len(head)]
    for path, r in rows.items():
        out.append(f"{path:<10} {r.cases:>7} {r.took:>7} {r.refused:>7} {r.agreed:>7} {r.unsound:>7} "
                   f"{r.false_alarm:>7} {r.timeout:>7} {r.crash:>6} {r.seconds:>8.1f}")  # fmt: skip
    truths = [t.status for res in results for t in res.truths]
    total = sum(r.cases for p, r in rows.items() if p != "reference")
    out.append(f"programs {len(results)} ({sum(1 for r in results if r.program.plan)} planted, "
               f"{sum(1 for r in results if r.skipped)} skipped); instances: {truths.count('ok')} ok, "
               f"{truths.count('wrong')} wrong, {truths.count('error')} error; cases (program x path x p): "
               f"{total}")  # fmt: skip
    every = [c for res in results for c in res.cases
             if c.path == "allp" and c.detail.startswith("proved for every root")]  # fmt: skip
    if every:
        out.append(f"allp cases judged under a proof for every root: {len(every)} "
                   f"({sum(c.truth != 'ok' for c in every)} of them at a wrong instance)")  # fmt: skip
    return "\n".join(out)
