"""What checking one instance costs, before any path starts: the memory of each path, the memory this machine
can give, and the refusal that names both when no path fits.

An instance is sized from two of its ranks (0 and p - 1, `survey`): their operations, the memory their
elaborated schedule takes, the loop iterations they run and the most chunks one of them moves in a step,
each scaled to all p ranks.  From that, `plan` estimates what each path would keep in memory at once (and
`hopeless`, for a program with a symbolic model, rules every path out before any rank is elaborated when the
instance's header and step loops already do):

* from the step formulas (`collc.verify.vector`): the data-flow state, 12 bytes a (rank, chunk) slot for a
  reduction (a 64-bit fingerprint and a float32 count; 9, or 13 once something is reduced, for a collective
  that copies), and the arrays of a block of steps;
* through the rank symmetry (`collc.verify.symmetry`): the elaborated operations of a batch of ranks and of
  its first 65 ranks, and the schedule cut to one orbit of chunks; it elaborates every rank, so it cannot go
  past the loop iterations one elaboration runs (`collc.elaborate.MAX_LOOP_ITERATIONS`);
* one operation at a time (`collc.verify.check`): the whole elaborated schedule, about 100 bytes an
  operation, the data-flow state (about 16 bytes a slot with its masks) and the index arrays of the largest
  step; it keeps state for at most `collc.elaborate.MAX_SLOTS` slots.

Estimates choose and refuse; they never decide a verdict: a path that runs still says "correct" only from
its own exact argument.  The memory available is the kernel's MemAvailable (or a cgroup's limit, when
lower), less a tenth for headroom; ``COLLC_MEMORY`` (``8G``, ``512M``) sets it instead.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from collc.diagnostics import CollError
from collc.elaborate import MAX_LOOP_ITERATIONS, MAX_SLOTS, Carry, elaborate
from collc.frontend.program import Program
from collc.ir import Collective, OpKind, ParamValue
from collc.verify.terms import Refusal, evaluate

if TYPE_CHECKING:
    from collc.verify.symbolic import Model

__all__ = [
    "ANY_SLOTS",
    "MODEL",
    "PER_OP",
    "SURVEY_MIN_SLOTS",
    "SYMMETRY",
    "Plan",
    "Survey",
    "fmt_bytes",
    "hopeless",
    "memory_available",
    "memory_budget",
    "model_bytes",
    "per_op_bytes",
    "plan",
    "reduces",
    "survey",
    "symmetry_bytes",
]

MODEL, SYMMETRY, PER_OP = "step formulas", "rank symmetry", "per-op"
SURVEY_MIN_SLOTS = 1 << 22  # ranks x chunks from which an instance is sized before it is checked
ANY_SLOTS = 1 << 44  # no slot limit: the survey sizes instances the per-op checker cannot hold
OP_BYTES = 100  # an elaborated operation, its chunk set shared (measured: 97 bytes for the ring)
SIG_BYTES = 160  # what the symmetric path keeps beside an operation of a batch (its signature, its rank's lists)
SLOT_BYTES = 16  # per slot in the per-op checker: fingerprint, count, held flag and the postcondition's masks
MOVE_BYTES = 48  # per chunk one step moves, in the per-op checker's numpy pass (indices, gathered values)
ELEMENT_BYTES = 160  # per (step, rank, chunk) of a block of the step-formula path (keys, sorts, gathers)
BLOCK_ELEMENTS = 1 << 20  # (step, rank, chunk) triples the step-formula path evaluates at once, at least
_SAMPLED_STEPS = 4096  # steps whose chunk sets a survey counts
PROBE_RANKS = 65  # the ranks the symmetric path elaborates first (`collc.verify.symmetry`: shifts up to 64)
_HEADROOM = 0.1  # of the memory available, left to the rest of the machine
_FALLBACK = 4 << 30  # when the machine does not say


def _parse_size(text: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if m is None:
        return None
    return int(float(m.group(1)) * (1 << (10 * " kmgt".index(m.group(2) or " "))))


def _meminfo() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup() -> int | None:
    """What the cgroup (v2) this process runs in lets it add, when it has a limit."""
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open("/sys/fs/cgroup/memory.current") as f:
            return max(0, int(limit) - int(f.read().strip()))
    except (OSError, ValueError):
        return None


def memory_available() -> tuple[int, str]:
    """The memory a check may take now, before headroom, and where the figure comes from."""
    given = os.environ.get("COLLC_MEMORY")
    if given:
        size = _parse_size(given)
        if size is not None:
            return size, "COLLC_MEMORY"
    found = [(v, why) for v, why in ((_meminfo(), "available"), (_cgroup(), "left to this cgroup")) if v is not None]
    if not found:
        try:
            pages, size = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
            found.append((pages * size, "available"))
        except (OSError, ValueError, AttributeError):
            return _FALLBACK, "assumed"
    return min(found)


def memory_budget() -> int:
    """The memory one check may plan to use: what is available, less headroom."""
    got, why = memory_available()
    return got if why == "COLLC_MEMORY" else int(got * (1 - _HEADROOM))


def fmt_bytes(n: float) -> str:
    """``3.5 GB``, ``192 GB``, ``48 MB`` (powers of 1024, as ``free -h`` shows them)."""
    for unit, scale in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20)):
        if n >= scale:
            value = n / scale
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{max(n, 0) / 1024:.3g} KB"


def _fmt_count(n: float) -> str:
    return f"{n:.2g}" if n >= 1e6 else str(int(n))


def _power(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else str(n)


@dataclass(frozen=True, slots=True)
class Survey:
    """One instance, sized from a few of its ranks (scaled to all p) before any path runs."""

    p: int
    n: int
    collective: Collective
    ops: int  # operations of the whole schedule
    schedule_bytes: int  # the elaborated schedule in memory
    op_bits_bytes: int  # the chunk sets of all operations, each counted (the symmetric path copies them)
    iterations: int  # loop iterations of an elaboration of every rank
    moves: int  # the most chunks one step moves (received, summed over the ranks)
    bounds: bool = False  # from the symbolic model alone: ``ops`` at most, ``iterations`` at least, no bytes

    @property
    def slots(self) -> int:
        return self.p * self.n


def survey(program: Program, params: Mapping[str, ParamValue], min_slots: int = 0) -> Survey | None:
    """The instance sized from its ranks 0 and p - 1; None when it has fewer than
    ``min_slots`` slots (its header, which costs no rank's elaboration, says so), when it cannot be elaborated
    (the paths then report the error as they do) or has no integer p."""
    p = params.get("p")
    if type(p) is not int or p < 1:
        return None
    if min_slots > 0:
        try:
            if elaborate(program, params, ranks=(), max_slots=ANY_SLOTS).nchunks * p < min_slots:
                return None
        except CollError:
            return None
    ranks = sorted({0, p - 1})
    carry = Carry()
    try:
        sample = elaborate(program, params, ranks=ranks, max_slots=ANY_SLOTS, carry=carry)
    except CollError:
        return None
    steps = sample.steps
    ops = sum(len(st.ops) for st in steps)
    # the chunk sets' sizes from at most `_SAMPLED_STEPS` steps, spread over the schedule (a set of a large
    # instance is a large int: counting the chunks of every one would cost more than elaborating it)
    seen = steps[:: max(1, len(steps) // _SAMPLED_STEPS)]
    seen_ops = sum(len(st.ops) for st in seen)
    bits_bytes = shared = own = 0
    counts: dict[int, int] = {}  # id of a chunk set -> its chunks
    most = 0
    for st in seen:
        per_rank: dict[int, int] = {}
        for op in st.ops:
            chunks = op.chunks
            bits = chunks.bits
            size = bits.bit_length() // 8
            bits_bytes += size
            got = counts.get(id(chunks))
            if got is None:
                got = counts[id(chunks)] = bits.bit_count()
                # a run of chunks (an int, a range) is one object for every rank that names it; other sets are
                # built by each rank
                if (bits + (bits & -bits)) & bits:
                    own += size + 32
                else:
                    shared += size + 32
            if op.kind is OpKind.RECV:
                per_rank[op.rank] = per_rank.get(op.rank, 0) + got
        most = max(most, *per_rank.values()) if per_rank else most
    scale = p / len(ranks)
    share = ops / max(1, seen_ops)  # the sample's chunk-set bytes scaled to all of the ranks' ops
    spent = MAX_LOOP_ITERATIONS - carry.iterations_left
    return Survey(
        p=p,
        n=sample.nchunks,
        collective=sample.collective,
        ops=math.ceil(ops * scale),
        schedule_bytes=math.ceil((ops * OP_BYTES + own * share) * scale + shared * share),
        op_bits_bytes=math.ceil(bits_bytes * share * scale),
        iterations=math.ceil(spent * scale),
        moves=p * most,
    )


def reduces(model: Model) -> bool:
    """Whether a program's symbolic model reduces anything (the step-formula path then keeps counts)."""
    return any(op.kind != "send" and op.action == "reduce" for loop in model.loops for op in loop.ops)


def model_bytes(s: Survey, reduces: bool) -> int:
    """The step-formula path: the data-flow state, a block's arrays, the sampled ranks' schedule."""
    per_slot = _slot_bytes(s.collective, reduces)
    block = max(BLOCK_ELEMENTS, s.moves)  # a block holds one step at least
    return s.slots * per_slot + block * ELEMENT_BYTES + s.schedule_bytes * 4 // s.p  # + its 4 ranks' ops


def symmetry_bytes(s: Survey, budget: int) -> int:
    """The symmetric path: its first ranks, a batch of ranks (as many as a third of ``budget`` holds, 2048 at
    most; each rank's operations grouped, and one rank's signatures at a time), the orbit's cut schedule and
    state (shifts up to 64)."""
    per_rank = (s.schedule_bytes + s.ops * 40) / s.p
    signatures = (s.ops * SIG_BYTES + 2 * s.op_bits_bytes) / s.p
    batch = max(1, min(2048, int(budget / 3 / max(per_rank, 1))))
    ranks = min(s.p, PROBE_RANKS) + min(s.p, batch + 64)
    m = max(1, s.n // s.p)
    orbit = s.p * min(s.n, 64 * m)
    return math.ceil(ranks * per_rank + signatures) + min(s.ops, orbit * 4) * OP_BYTES + orbit * SLOT_BYTES


def per_op_bytes(s: Survey) -> int:
    """The per-op checker: the whole schedule, the state and the largest step's index arrays."""
    return s.schedule_bytes + s.slots * SLOT_BYTES + min(s.moves, s.slots) * MOVE_BYTES + s.n * 40


def symmetry_applies(s: Survey, min_slots: int) -> bool:
    """The symmetric path's own conditions that the survey can see: an allreduce of a multiple of p chunks,
    large enough (``min_slots``)."""
    return s.collective is Collective.ALLREDUCE and s.n % s.p == 0 and s.p >= 2 and s.slots >= min_slots


@dataclass(frozen=True, slots=True)
class Plan:
    """The paths that fit, in the order they are tried, and for every path left out, why."""

    survey: Survey
    budget: int
    paths: tuple[str, ...]
    estimates: dict[str, int] = field(default_factory=dict)  # path -> bytes
    why_not: dict[str, str] = field(default_factory=dict)  # path -> why it is not tried
    reduces: bool = False  # the program's symbolic model reduces (its state: 12 or 13 bytes a slot)

    def refusal(
        self, program: Program, params: Mapping[str, ParamValue], handed: str | None = None, file: str | None = None
    ) -> CollError:
        """The error that says the instance is not checked here: its size, every path's estimate or reason,
        and what to do instead (``file``: the program as the command line named it).  ``handed``: the paths
        that ran and left it to the per-op checker (which would say what is wrong, and does not fit)."""
        s = self.survey
        shown = " ".join(f"{k}={v}" for k, v in params.items())
        size = (
            f"{s.p} ranks x {s.n} chunks make {_power(s.slots)} (rank, chunk) slots, "
            f"{'up to' if s.bounds else 'about'} {_fmt_count(s.ops)} operations"
        )
        room = f"{fmt_bytes(self.budget)} of memory can be used"
        if handed is None:
            head = f"{program.name} {shown} is too large to check on this machine: {size}; {room}"
        else:
            head = (
                f"{program.name} {shown}: the {handed} did not show it correct, and the per-op checker, which "
                f"would say what is wrong, does not fit this machine: {size}; {room}"
            )
        notes = [f"{path}: {why}" for path, why in self.why_not.items()]
        instead = [f"'collc check {file or program.path} --ranks all' proves a program for every p (or finds its "
                   "smallest failing p) without any instance's state"]  # fmt: skip
        smaller = _smaller_fit(program, params, self.reduces, self.budget) if MODEL in self.estimates else None
        if smaller is not None:
            instead.append(f"p up to {smaller[0]} fits from its step formulas (about {fmt_bytes(smaller[1])})")
        else:
            instead.append("a smaller p may fit")
        instead.append("COLLC_MEMORY=SIZE sets the memory collc may use")
        notes.append("instead: " + "; ".join(instead))
        return CollError(head, None, tuple(notes))


def _smaller_fit(
    program: Program, params: Mapping[str, ParamValue], reduces: bool, budget: int
) -> tuple[int, int] | None:
    """The largest p / 2^k that the step-formula path fits in ``budget`` (its state and a block's arrays), with
    its estimate; None when none of them does (or each is refused by the program)."""
    p = params.get("p")
    if type(p) is not int:
        return None
    q = p // 2
    while q >= 1:
        try:
            n = elaborate(program, {**params, "p": q}, ranks=(), max_slots=ANY_SLOTS).nchunks
        except CollError:
            n = None
        if n is not None:
            need = q * n * _slot_bytes(program.collective, reduces) + BLOCK_ELEMENTS * ELEMENT_BYTES
            if need <= budget:
                return q, need
        q //= 2
    return None


def hopeless(
    program: Program,
    params: Mapping[str, ParamValue],
    model: Model | None,
    *,
    step_model: bool,
    symmetry_min_slots: int,
    budget: int | None = None,
    nchunks: int | None = None,
) -> Plan | None:
    """A plan without a path, from the instance's header (``nchunks``, when the caller has it) and its
    symbolic ``model`` alone (no rank is elaborated), when they already rule every path out: the step
    formulas' state alone, the iterations of the step loops alone (the symmetric path runs all of them and
    more), the per-op checker's slots; None when some path may fit (`survey` then sizes it), or the header
    cannot be elaborated."""
    p = params.get("p")
    if model is None or type(p) is not int or p < 1:
        return None
    try:
        n = nchunks if nchunks is not None else elaborate(program, params, ranks=(), max_slots=ANY_SLOTS).nchunks
        counts = [(evaluate(loop.count, {"p": p}), len(loop.ops)) for loop in model.loops]
    except (CollError, Refusal, ArithmeticError, TypeError, ValueError):
        return None
    budget = memory_budget() if budget is None else budget
    steps = sum(c for c, _ in counts if c > 1)  # `for step` loops (a `step:` block has 1 and costs none)
    ops = p * sum(c * k for c, k in counts)
    s = Survey(p, n, program.collective, ops, ops * OP_BYTES, 0, p * steps, 0, bounds=True)
    state = s.slots * _slot_bytes(s.collective, reduces(model))
    if state <= budget or s.slots <= MAX_SLOTS:
        return None
    if step_model and symmetry_applies(s, symmetry_min_slots) and s.iterations <= MAX_LOOP_ITERATIONS:
        return None
    return plan(s, symbolic=True, reduces=reduces(model), step_model=step_model, symmetry_min_slots=symmetry_min_slots,
                budget=budget)  # fmt: skip


def plan(
    s: Survey,
    *,
    symbolic: bool,
    reduces: bool,
    step_model: bool,
    symmetry_min_slots: int,
    budget: int | None = None,
) -> Plan:
    """The paths that fit ``budget`` bytes (default `memory_budget`), in order: the step formulas (when the
    program has a ``symbolic`` model), the rank symmetry (under the ``step_model``, for an allreduce of at
    least ``symmetry_min_slots`` slots), the per-op checker."""
    budget = memory_budget() if budget is None else budget
    paths: list[str] = []
    estimates: dict[str, int] = {}
    why: dict[str, str] = {}
    if symbolic:
        need = estimates[MODEL] = model_bytes(s, reduces)
        if need <= budget:
            paths.append(MODEL)
        else:
            per_slot = _slot_bytes(s.collective, reduces)
            why[MODEL] = f"about {fmt_bytes(need)} (its data-flow state, {per_slot} bytes a slot)"
    if step_model and symmetry_applies(s, symmetry_min_slots):
        need = estimates[SYMMETRY] = symmetry_bytes(s, budget)
        if s.iterations > MAX_LOOP_ITERATIONS:
            why[SYMMETRY] = (
                f"it elaborates every rank: {'at least' if s.bounds else 'about'} {_fmt_count(s.iterations)} loop "
                f"iterations, beyond the {_power(MAX_LOOP_ITERATIONS)} of one elaboration"
            )
        elif need > budget:
            why[SYMMETRY] = f"about {fmt_bytes(need)} (the elaborated operations of its batches of ranks)"
        else:
            paths.append(SYMMETRY)
    need = estimates[PER_OP] = per_op_bytes(s)
    if s.slots > MAX_SLOTS:
        why[PER_OP] = f"beyond the {_power(MAX_SLOTS)} slots it keeps state for"
    elif need > budget:  # (a schedule past the elaborator's loop budget gets the elaborator's own error)
        why[PER_OP] = f"about {fmt_bytes(need)} (the elaborated schedule and its data-flow state)"
    else:
        paths.append(PER_OP)
    return Plan(s, budget, tuple(paths), estimates, why, reduces)


def _slot_bytes(collective: Collective, reduces: bool) -> int:
    """The step-formula path's state per slot: a fingerprint, a count (reductions), a held flag (copies)."""
    reducing = collective.reduces
    return 12 if reducing else 13 if reduces else 9
