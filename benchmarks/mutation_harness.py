"""Differential testing of the verifier against the local executor, on mutants of the example library.

Every ``examples/*.coll`` program, and every ``examples/lib/*.coll`` file it
includes, is mutated *as text*, one mutation per mutant, by the operators of
``benchmarks/mutants.py`` (int literals, copy <-> reduce, chunks dropped from or
added to sends and receives, peers, loop order, statements and phases swapped,
deleted or duplicated, operators, conditions, step structure, ...).

Each mutant is elaborated for a few parameter values (p in {2, 3, 4, 5, 6, 8}
as the *original* program allows, roots 0, p // 2 and p - 1 when it declares a
root, k = 2 at p = 3 and 4 when it declares k), and the verifier's verdict
(``check(schedule).ok``) is compared with the local executor's outcome on random
data, distinct per rank, with every chunk at least 3 elements long (uneven sizes):

* verifier accepts, executor right (int64 sum and float64 max)  -> agree
* verifier rejects, executor wrong                              -> agree
* verifier accepts, executor wrong                              -> FALSE ACCEPT
* verifier rejects with a structural, matching or hazard finding the executor
  does not model (HAZARD_CODES), executor right                 -> rejected for a hazard (agreement)
* verifier rejects on data flow only (postcondition, double count, lost data),
  executor right, and still right on two more runs (float64 sum,
  int64 sum with values near 2**40)                             -> FALSE REJECT

Mutants that do not parse or elaborate (`collc.CollError`) are counted as
"bad input" per instance and take no part in the agreement rate.  Any other
exception raised by collc is a "crash" (a collc bug) and is listed.

    python benchmarks/mutation_harness.py                    # every mutant, 2 workers
    python benchmarks/mutation_harness.py --limit 200 --seed 7 --jobs 1
    python benchmarks/mutation_harness.py --ranks 7,9,12,16  # other rank counts
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import numpy as np
from mutants import EXAMPLES, ROOT, Mutant, diff, generate_mutants, select

from collc.backends import local
from collc.collectives import element_offsets
from collc.diagnostics import CollError
from collc.elaborate import elaborate
from collc.frontend.program import Program, parse_program
from collc.ir import Collective, ParamValue, Schedule
from collc.verify import check as check_module
from collc.verify.check import CheckReport, check

P_VALUES: tuple[int, ...] = (2, 3, 4, 5, 6, 8)
EXTRA_PARAM_P: tuple[int, ...] = (3, 4)  # p values at which a declared extra int parameter (k) also gets 2
MUTANT_TIMEOUT_S = 60

# ---------------------------------------------------------------------------
# Finding codes: which rejections are hazards the executor does not model
# ---------------------------------------------------------------------------

# Findings about the data a rank ends with: the executor sees these on random data.
DATA_CODES: frozenset[str] = frozenset({"postcondition", "double-count", "lost-data"})
# Structural, matching and hazard findings: every other code of the verifier.
LISTED_HAZARD_CODES: frozenset[str] = frozenset(code for code in check_module.CODES if code not in DATA_CODES)
_HAZARD_WORDS = re.compile(r"deadlock|hazard|race|cycle|conflict|unmatched|blocking")


def classify_codes(codes: Iterable[str]) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(hazard, data, unclassified) codes among ``codes``; unclassified ones are treated as data codes."""
    hazard, data, other = set(), set(), set()
    for code in codes:
        if code in LISTED_HAZARD_CODES or _HAZARD_WORDS.search(code):
            hazard.add(code)
        elif code in DATA_CODES:
            data.add(code)
        else:
            other.add(code)
    return frozenset(hazard), frozenset(data), frozenset(other)


HAZARD_CODES, DATA_CODES_NOW, UNCLASSIFIED_CODES = classify_codes(check_module.CODES)


# ---------------------------------------------------------------------------
# Parameter values
# ---------------------------------------------------------------------------

Params = dict[str, ParamValue]


def candidate_params(program: Program, p_values: Sequence[int] = P_VALUES) -> list[Params]:
    """p in ``p_values``; roots 0, p // 2 and p - 1 when declared; another int parameter = 2 at p in (3, 4)."""
    names = [p.name for p in program.params]
    extras = [p.name for p in program.params if p.name not in ("p", "root") and p.type == "int"]
    out: list[Params] = []
    for p in p_values:
        roots = sorted({0, p // 2, p - 1}) if "root" in names else [None]
        for root in roots:
            params: Params = {"p": p}
            if root is not None:
                params["root"] = root
            out.append(params)
        if p in EXTRA_PARAM_P:
            for name in extras:
                out.append({"p": p, name: 2})
    return out


def count_for(schedule: Schedule) -> int:
    """An element count that gives every chunk at least 3 elements, in uneven sizes where it can."""
    n, p = schedule.nchunks, schedule.nranks
    if schedule.collective is Collective.ALLTOALL:
        k = max(1, n // (p * p))
        count = p * (3 * k + max(1, k // 2))
    else:
        count = 3 * n + max(1, n // 2)
    if schedule.chunk_weights is not None:  # chunks in proportion to their weights: the lightest needs 3 too
        while True:
            sizes = np.diff(element_offsets(schedule.collective, p, n, count, schedule.chunk_weights))
            if sizes.min() >= 3:
                break
            count *= 2
    return count


# ---------------------------------------------------------------------------
# Running one instance
# ---------------------------------------------------------------------------

AGREE_ACCEPT = "agree-accept"
AGREE_REJECT = "agree-reject"
HAZARD = "hazard-reject"
FALSE_ACCEPT = "FALSE-ACCEPT"
FALSE_REJECT = "FALSE-REJECT"
BAD_INPUT = "bad-input"
CRASH = "crash"
TIMEOUT = "timeout"
CATEGORIES = (AGREE_ACCEPT, AGREE_REJECT, HAZARD, FALSE_ACCEPT, FALSE_REJECT, BAD_INPUT, CRASH, TIMEOUT)


@dataclass(frozen=True, slots=True)
class Outcome:
    params: Params
    category: str
    wrong: int = 0  # wrong elements found by the executor (-1: the executor refused the schedule)
    codes: tuple[str, ...] = ()
    detail: str = ""
    retried: bool = False  # the data-flow rejection was confirmed only by the extra runs
    same: bool = False  # the schedule is the original program's (same ops, chunks and root)


@dataclass(slots=True)
class MutantResult:
    mutant: Mutant
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0


class _Timeout(BaseException):
    """Raised by SIGALRM: a mutant ran too long (a BaseException so that collc cannot swallow it)."""


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise _Timeout()


def _run(schedule: Schedule, count: int, dtype: str, op: str, seed: int) -> int:
    return local.run(schedule, count, dtype=dtype, op=op, seed=seed).wrong


def _run_large_ints(schedule: Schedule, count: int, seed: int) -> int:
    """int64 sum with values up to 2**40 in magnitude (no cancellation, no wrapping for p <= 2**20)."""
    inputs = local.make_inputs(schedule, count, "int64", seed, op="sum")
    held = inputs != local.INT_POISON
    rng = np.random.default_rng(seed ^ 0xB16)
    inputs[held] = rng.integers(1 << 39, 1 << 40, size=int(held.sum()), dtype=np.int64) * rng.choice(
        np.array([-1, 1], dtype=np.int64), size=int(held.sum())
    )
    buffers = inputs.copy()
    local.execute(local.plan(schedule, count), buffers, "sum")
    values, mask = local.expected(schedule, inputs, "sum")
    return local.count_wrong(
        buffers, values, mask, "int64", "sum", schedule.nranks, reduces=schedule.collective.reduces
    )


def executor_wrong(schedule: Schedule, count: int, seed: int, *, extra: bool = False) -> tuple[int, str]:
    """Wrong elements over the primary runs (int64 sum, float64 max), or the two extra runs; -1 if refused."""
    runs: tuple[Callable[[], int], ...]
    if extra:
        runs = (
            lambda: _run(schedule, count, "float64", "sum", seed + 2),
            lambda: _run_large_ints(schedule, count, seed + 3),
        )
    else:
        runs = (
            lambda: _run(schedule, count, "int64", "sum", seed),
            lambda: _run(schedule, count, "float64", "max", seed + 1),
        )
    total = 0
    for run in runs:
        try:
            total += run()
        except ValueError as err:  # the executor refuses an ill-formed schedule
            return -1, str(err)
    return total, ""


def instance_seed(mutant_key: str, params: Params, seed: int) -> int:
    return (zlib.crc32(f"{mutant_key}|{sorted(params.items())}".encode()) ^ (seed * 0x9E3779B1)) & 0x7FFFFFFF


def judge(schedule: Schedule, seed: int, verifier: Callable[[Schedule], CheckReport] = check) -> Outcome:
    """Compare the verifier with the executor on one elaborated schedule."""
    params: Params = dict(schedule.params)
    report = verifier(schedule)
    codes = tuple(sorted({f.code for f in report.findings}))
    count = count_for(schedule)
    wrong, refused = executor_wrong(schedule, count, seed)
    if report.ok:
        if wrong == 0:
            return Outcome(params, AGREE_ACCEPT)
        detail = refused or f"{wrong} wrong elements (count={count}, int64 sum + float64 max, seed={seed})"
        return Outcome(params, FALSE_ACCEPT, wrong, codes, detail)
    if wrong != 0:
        return Outcome(params, AGREE_REJECT, wrong, codes)
    hazard, _, _ = classify_codes(codes)
    if hazard:
        return Outcome(params, HAZARD, 0, codes)
    wrong2, refused2 = executor_wrong(schedule, count, seed, extra=True)
    if wrong2 != 0:
        return Outcome(params, AGREE_REJECT, wrong2, codes, refused2, retried=True)
    detail = "; ".join(f"{f.code}: {f.message}" for f in report.findings[:3])
    return Outcome(params, FALSE_REJECT, 0, codes, detail)


# ---------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------

_WORKDIR: Path | None = None
_SEED = 0
_P_VALUES: tuple[int, ...] = P_VALUES


def _init_worker(workdir: str, seed: int, p_values: tuple[int, ...]) -> None:
    global _WORKDIR, _SEED, _P_VALUES
    _WORKDIR = Path(workdir) / f"w{os.getpid()}"
    _SEED = seed
    if p_values != _P_VALUES:
        _P_VALUES = p_values
        _PARAMS_CACHE.clear()
        _ORIGINALS.clear()
    if not _WORKDIR.exists():
        shutil.copytree(EXAMPLES, _WORKDIR / "examples")


def _parse(mutant: Mutant) -> Program:
    """Parse the mutant; a mutated library file is written into this worker's copy of examples/."""
    assert _WORKDIR is not None
    prog_path = ROOT / mutant.program
    if mutant.file == mutant.program:
        return parse_program(mutant.text, str(prog_path))
    copy = _WORKDIR / mutant.program
    lib = _WORKDIR / mutant.file
    original = (ROOT / mutant.file).read_text()
    lib.write_text(mutant.text)
    try:
        return parse_program(prog_path.read_text(), str(copy))
    finally:
        lib.write_text(original)


_PARAMS_CACHE: dict[str, list[Params]] = {}
_ORIGINALS: dict[tuple[str, str], object] = {}


def signature(schedule: Schedule) -> object:
    """The schedule without source locations: what the verifier and the executor see."""
    steps = tuple(
        tuple(sorted((op.rank, op.kind.value, op.peer, op.chunks.bits, op.action and op.action.value) for op in st.ops))
        for st in schedule.steps
    )
    return (schedule.collective, schedule.nranks, schedule.nchunks, schedule.root, steps)


def params_of(program_rel: str) -> list[Params]:
    """The parameter values the original program accepts (and verifies and runs correctly for)."""
    got = _PARAMS_CACHE.get(program_rel)
    if got is None:
        path = ROOT / program_rel
        original = parse_program(path.read_text(), str(path))
        got = []
        for params in candidate_params(original, _P_VALUES):
            try:
                elaborate(original, params)
            except CollError as err:
                if "violates the constraint" in err.message:
                    continue
                raise
            got.append(params)
            _ORIGINALS[program_rel, repr(sorted(params.items()))] = signature(elaborate(original, params))
        _PARAMS_CACHE[program_rel] = got
    return got


def evaluate(mutant: Mutant) -> MutantResult:
    """Every instance of one mutant (worker entry point)."""
    result = MutantResult(mutant)
    start = time.perf_counter()
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(MUTANT_TIMEOUT_S)
    plist = params_of(mutant.program)
    try:
        try:
            program = _parse(mutant)
        except CollError as err:
            result.outcomes = [Outcome(p, BAD_INPUT, detail=err.message) for p in plist]
            return result
        except Exception as err:
            result.outcomes = [Outcome(p, CRASH, detail=_crash_text(err, "parse")) for p in plist]
            return result
        for params in plist:
            try:
                schedule = elaborate(program, params)
            except CollError as err:
                result.outcomes.append(Outcome(params, BAD_INPUT, detail=err.message))
                continue
            except Exception as err:
                result.outcomes.append(Outcome(params, CRASH, detail=_crash_text(err, "elaborate")))
                continue
            try:
                outcome = judge(schedule, instance_seed(mutant.key, params, _SEED))
            except Exception as err:
                outcome = Outcome(params, CRASH, detail=_crash_text(err, "check/run"))
            same = _ORIGINALS.get((mutant.program, repr(sorted(params.items())))) == signature(schedule)
            result.outcomes.append(dataclasses.replace(outcome, same=same))
    except _Timeout:
        done = len(result.outcomes)
        result.outcomes += [Outcome(p, TIMEOUT, detail=f"over {MUTANT_TIMEOUT_S} s") for p in plist[done:]]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        result.seconds = time.perf_counter() - start
    return result


def _crash_text(err: BaseException, stage: str) -> str:
    tb = traceback.extract_tb(err.__traceback__)
    where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"
    return f"{stage}: {type(err).__name__}: {err} (at {where})"


def run_all(mutants: Sequence[Mutant], jobs: int, seed: int, p_values: Sequence[int] = P_VALUES) -> list[MutantResult]:
    """Evaluate every mutant, in ``jobs`` worker processes (inline when jobs is 1)."""
    init = (tuple(p_values),)
    with tempfile.TemporaryDirectory(prefix="collc-mut-") as workdir:
        if jobs <= 1:
            _init_worker(workdir, seed, *init)
            return [evaluate(m) for m in mutants]
        ctx = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")
        with ctx.Pool(jobs, initializer=_init_worker, initargs=(workdir, seed, *init)) as pool:
            return list(pool.imap(evaluate, mutants, chunksize=4))


# ---------------------------------------------------------------------------
# Summary and report
# ---------------------------------------------------------------------------


@dataclass(slots=True)
class Summary:
    mutants: int = 0
    elaborating: int = 0  # mutants that elaborate for at least one parameter set
    all_bad: int = 0  # mutants rejected as bad input for every parameter set
    killed: int = 0  # elaborating mutants the verifier rejects for at least one parameter set
    equivalent: int = 0  # elaborating mutants whose every schedule is the original's
    instances: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    retried: int = 0
    accepted_changed: int = 0  # instances the verifier accepts whose schedule is not the original's
    per_operator: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    operators: set[str] = field(default_factory=set)
    false_accepts: list[tuple[Mutant, Outcome]] = field(default_factory=list)
    false_rejects: list[tuple[Mutant, Outcome]] = field(default_factory=list)
    crashes: list[tuple[Mutant, Outcome]] = field(default_factory=list)
    timeouts: list[tuple[Mutant, Outcome]] = field(default_factory=list)
    hazard_codes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def compared(self) -> int:
        return sum(self.counts[c] for c in (AGREE_ACCEPT, AGREE_REJECT, HAZARD, FALSE_ACCEPT, FALSE_REJECT))

    @property
    def agree(self) -> int:
        return sum(self.counts[c] for c in (AGREE_ACCEPT, AGREE_REJECT, HAZARD))

    @property
    def rate(self) -> float:
        return self.agree / self.compared if self.compared else 1.0


def summarize(results: Sequence[MutantResult]) -> Summary:
    s = Summary()
    for r in results:
        m = r.mutant
        s.mutants += 1
        s.operators.add(m.operator)
        op = s.per_operator[m.operator]
        op["mutants"] += 1
        cats = [o.category for o in r.outcomes]
        if any(c != BAD_INPUT for c in cats):
            s.elaborating += 1
            op["elaborating"] += 1
            if all(o.same for o in r.outcomes if o.category != BAD_INPUT):
                s.equivalent += 1
                op["equivalent"] += 1
        elif cats:
            s.all_bad += 1
        if any(c in (AGREE_REJECT, HAZARD, FALSE_REJECT) for c in cats):
            s.killed += 1
            op["killed"] += 1
        for o in r.outcomes:
            s.instances += 1
            op["instances"] += 1
            s.counts[o.category] += 1
            op[o.category] += 1
            s.retried += o.retried
            s.accepted_changed += o.category == AGREE_ACCEPT and not o.same
            if o.category == HAZARD:
                s.hazard_codes.update(c for c in o.codes if c in classify_codes(o.codes)[0])
            target = {
                FALSE_ACCEPT: s.false_accepts,
                FALSE_REJECT: s.false_rejects,
                CRASH: s.crashes,
                TIMEOUT: s.timeouts,
            }
            if o.category in target:
                target[o.category].append((m, o))
    return s


_COLUMNS = (
    ("mutants", "mutants"),
    ("elaborating", "elab."),
    ("equivalent", "same sched."),
    ("instances", "instances"),
    (AGREE_ACCEPT, "agree ok"),
    (AGREE_REJECT, "agree wrong"),
    (HAZARD, "hazard"),
    (FALSE_ACCEPT, "false acc."),
    (FALSE_REJECT, "false rej."),
    (BAD_INPUT, "bad input"),
    (CRASH, "crash"),
    (TIMEOUT, "timeout"),
)


def table(s: Summary) -> str:
    """A Markdown table, one row per operator and a total."""
    head = "| operator | " + " | ".join(title for _, title in _COLUMNS) + " | agreement |"
    rule = "|---|" + "---:|" * (len(_COLUMNS) + 1)
    rows = [head, rule]

    def row(name: str, c: Counter[str]) -> str:
        compared = sum(c[k] for k in (AGREE_ACCEPT, AGREE_REJECT, HAZARD, FALSE_ACCEPT, FALSE_REJECT))
        agree = sum(c[k] for k in (AGREE_ACCEPT, AGREE_REJECT, HAZARD))
        rate = f"{100 * agree / compared:.2f}%" if compared else "–"
        return f"| {name} | " + " | ".join(str(c[k]) for k, _ in _COLUMNS) + f" | {rate} |"

    total: Counter[str] = Counter()
    for name in sorted(s.per_operator):
        rows.append(row(name, s.per_operator[name]))
        total.update(s.per_operator[name])
    rows.append(row("**total**", total))
    return "\n".join(rows)


def _fmt_params(params: Params) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def report(s: Summary, *, limit: int = 20) -> str:
    lines = [
        table(s),
        "",
        f"mutants: {s.mutants} ({s.elaborating} elaborate for at least one parameter set, {s.all_bad} rejected as "
        f"bad input for all, {s.killed} rejected by the verifier for at least one, {s.equivalent} elaborating to "
        f"the original schedules for every parameter set)",
        f"instances: {s.instances}; compared {s.compared}; agree {s.agree} "
        f"(verifier accepts and executor right {s.counts[AGREE_ACCEPT]}, verifier rejects and executor wrong "
        f"{s.counts[AGREE_REJECT]} [{s.retried} of them seen wrong only by the extra runs], rejected for a hazard "
        f"{s.counts[HAZARD]}; {s.accepted_changed} accepted instances differ from the original schedule); "
        f"false accepts {s.counts[FALSE_ACCEPT]} (in {len({m.key for m, _ in s.false_accepts})} mutants); "
        f"false rejects {s.counts[FALSE_REJECT]}",
        f"bad input (instances): {s.counts[BAD_INPUT]}; crashes: {s.counts[CRASH]}; timeouts: {s.counts[TIMEOUT]}",
        f"agreement rate: {100 * s.rate:.3f}% ({s.agree}/{s.compared})",
        f"hazard codes behind 'rejected for a hazard': {dict(s.hazard_codes.most_common())}",
        f"codes treated as hazards: {', '.join(sorted(HAZARD_CODES))}",
    ]
    if UNCLASSIFIED_CODES:
        lines.append(
            f"codes neither hazard nor known data codes (treated as data): {', '.join(sorted(UNCLASSIFIED_CODES))}"
        )
    for title, items in (
        ("FALSE ACCEPTS", s.false_accepts),
        ("FALSE REJECTS", s.false_rejects),
        ("CRASHES", s.crashes),
        ("TIMEOUTS", s.timeouts),
    ):
        if not items:
            continue
        lines += ["", f"=== {title} ({len(items)}) ==="]
        for m, o in items[:limit]:
            lines += [
                f"--- {m.key} [{m.operator}] {m.program} ({m.file}:{m.line}: {m.description}) {_fmt_params(o.params)}",
                f"    codes={list(o.codes)} wrong={o.wrong} {o.detail}",
                diff(m).rstrip(),
            ]
        if len(items) > limit:
            lines.append(f"... and {len(items) - limit} more")
    return "\n".join(lines)


def harness(limit: int | None = None, seed: int = 0, jobs: int = 2, p_values: Sequence[int] = P_VALUES) -> Summary:
    """Generate, select and run the mutants; the summary of the run."""
    start = time.perf_counter()
    mutants = select(generate_mutants(), limit, seed)
    summary = summarize(run_all(mutants, jobs, seed, p_values))
    summary.seconds = time.perf_counter() - start
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="mutants to run (round-robin over operators)")
    ap.add_argument("--seed", type=int, default=0, help="sampling and data seed (default 0)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--show", type=int, default=20, help="disagreements listed per kind (default 20)")
    ap.add_argument(
        "--ranks",
        default=",".join(map(str, P_VALUES)),
        help="comma-separated p values, filtered by each program's constraints (default %(default)s)",
    )
    args = ap.parse_args(argv)
    p_values = tuple(int(x) for x in args.ranks.split(",") if x.strip())
    start = time.perf_counter()
    everything = generate_mutants()
    mutants = select(everything, args.limit, args.seed)
    print(
        f"{len(everything)} distinct mutants generated from {len(list(EXAMPLES.glob('*.coll')))} programs; "
        f"running {len(mutants)} with {args.jobs} job(s), seed {args.seed}, p in {{{', '.join(map(str, p_values))}}}",
        flush=True,
    )
    results = run_all(mutants, args.jobs, args.seed, p_values)
    summary = summarize(results)
    summary.seconds = time.perf_counter() - start
    print(report(summary, limit=args.show))
    print(
        f"\nwall time {summary.seconds:.1f} s; {platform.machine()} {platform.system()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, numpy {np.__version__}"
    )
    bad = summary.counts[FALSE_ACCEPT] + summary.counts[FALSE_REJECT] + summary.counts[CRASH]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
