"""Checking a large allreduce instance through its rank symmetry: one orbit of chunks, every rank.

Many schedules look alike from every rank, up to a rotation: rank r + d does what rank r does with every
peer moved by d and every chunk by d * m (m = chunks / p).  In an allreduce every chunk starts at every rank
and must end at every rank as the sum of all of them, so such a shift maps the life of chunk c onto that of
chunk c + d * m: its messages and their matching, where it is copied and reduced, whether each rank ends
with the sum.  When an instance is invariant under the shifts by multiples of k, the chunks 0 .. k*m - 1
(one of each orbit) stand for all of them, and the fingerprint state is p x k*m slots instead of p x chunks:
swing_bw at p = 65536 has 2^32 slots (32 GiB of fingerprints), its orbit 2^17.

`check_symmetric` proves the invariance and checks the orbit:

* it elaborates the ranks in batches (each batch's memos and ops freed with it), every batch together with
  the representatives 0 .. k-1, and compares every rank's operations, step by step and in order, with those
  of its representative r mod k shifted by r - r mod k (a batch whose steps are not exactly the
  representatives' is not invariant);
* it checks the form of the representatives' operations (plain sends and receives between valid ranks,
  chunks in range, a copy or reduce on every receive, no chunk twice between a pair in a step) and matches
  them against their peers' (shifted representatives), so every message of every rank is matched;
* the schedule cut to the orbit's chunks (every rank's operations on chunks 0 .. k*m - 1) goes through
  `collc.verify.check.check`, which follows the data of those chunks at every rank;
* the statistics are the representatives' (totals times p / k), as the per-op checker counts them.

Like `collc.verify.vector` it says "correct" or leaves the instance to the per-op checker: one that is not
invariant, not an allreduce, compresses, has lanes, or whose orbit is wrong gives None, and the caller runs
the per-op checker, whose report names the problem.  Only where the per-op checker cannot run (more than
2^28 slots) does an invariant instance whose orbit is wrong get the orbit's findings: real ranks, steps and
chunks (0 .. k*m - 1), each standing for its orbit.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from collc.diagnostics import CollError
from collc.elaborate import MAX_SLOTS, Carry, elaborate
from collc.frontend.program import Program
from collc.ir import Action, ChunkSet, Collective, Op, OpKind, ParamValue, Schedule, Step
from collc.verify.budget import OP_BYTES, memory_budget
from collc.verify.check import CheckReport, Stats, check, traffic_stats

__all__ = ["MIN_SLOTS", "WRONG_ABOVE", "Orbit", "check_symmetric"]

MIN_SLOTS = 1 << 24  # ranks x chunks below which the per-op checker is as fast (this path is not tried)
WRONG_ABOVE = MAX_SLOTS  # ranks x chunks above which a wrong orbit is reported (the per-op checker cannot run)
_BATCH_RANKS = 2048  # ranks elaborated at once: swing_bw at p = 65536 takes about 1.4 GB per batch
_MAX_SHIFT = 64  # the largest k tried
_STREAM_SLOTS = 1 << 36  # ranks x chunks this check streams through (its state is p x k*m of them)

_Ops = tuple[tuple[OpKind, int, int, Action | None], ...]  # one rank's ops in one step: kind, peer, bits, action
_Steps = tuple[tuple[int, _Ops], ...]  # one rank's steps: (step index, its ops)
_Pairs = dict[int, tuple[dict[int, int], dict[int, int]]]  # step -> (peer -> bits sent, peer -> bits received)


@dataclass(frozen=True, slots=True)
class Orbit:
    """How an instance was checked: invariant under the rank shifts by multiples of ``shift``, its chunks
    0 .. ``chunks`` - 1 checked at every rank."""

    shift: int
    chunks: int


def check_symmetric(
    program: Program,
    params: Mapping[str, ParamValue],
    *,
    min_slots: int | None = None,
    wrong_above: int | None = None,
    batch: int = _BATCH_RANKS,
    on_progress: Callable[[int, int], None] | None = None,
    memory: int | None = None,
) -> tuple[Schedule, CheckReport, Orbit] | None:
    """Check the allreduce instance ``params`` through its rank symmetry: the representatives' schedule (for
    its header), a correct report and the orbit checked; None when this path does not apply or does not find
    the instance correct, or smaller than ``min_slots`` ranks x chunks (default `MIN_SLOTS`).  An invariant
    instance of more than ``wrong_above`` slots (default `WRONG_ABOVE`: those the per-op checker keeps no
    state for) whose orbit is wrong gets the orbit's findings instead: they name real ranks, chunks and
    steps, and by the symmetry every chunk c fails as chunk c mod the orbit's width does; and an error of the
    program at some rank (a failed assertion, ranks that reach a step in different phases) is raised as the
    CollError a whole elaboration would raise, since the per-op checker cannot elaborate it to say so.
    ``on_progress(done, total)`` is called after each batch of ranks.  A batch holds ``batch`` ranks at most,
    and fewer where their operations would take more than a third of ``memory`` bytes (default: the memory
    available, `collc.verify.budget.memory_budget`)."""
    # the pass makes no garbage cycles; the cyclic collector would only re-scan the ops of each batch
    collecting = gc.isenabled()
    gc.disable()
    try:
        least = MIN_SLOTS if min_slots is None else min_slots
        most = WRONG_ABOVE if wrong_above is None else wrong_above
        room = (memory_budget() if memory is None else memory) // 3
        return _check(program, params, least, most, batch, on_progress, room)
    finally:
        if collecting:
            gc.enable()


def _check(
    program: Program,
    params: Mapping[str, ParamValue],
    min_slots: int,
    wrong_above: int,
    batch: int,
    on_progress: Callable[[int, int], None] | None,
    room: int,
) -> tuple[Schedule, CheckReport, Orbit] | None:
    p = params.get("p")
    # chunks are a multiple of p on this path: below p * p slots, nothing to elaborate
    if not isinstance(p, int) or p < 2 or p * p < min_slots or program.hierarchy is not None:
        return None
    try:
        probe = elaborate(program, params, ranks=range(min(p, _MAX_SHIFT + 1)), max_slots=_STREAM_SLOTS)
    except CollError:
        if _slots(program, params) > wrong_above:  # an error at one of the first ranks: the caller cannot say it
            raise
        return None
    n = probe.nchunks
    if probe.collective is not Collective.ALLREDUCE or probe.codecs or n % p or p * n < min_slots:
        return None
    m = n // p
    shift = _find_shift(probe, p, m)
    if shift is None or p * shift * m > MAX_SLOTS:
        return None
    reps = _batch(program, params, range(shift), shift)
    if reps is None or any(st.lanes is not None for st in reps.steps):
        return None
    own = _by_rank(reps)
    if set(own) != set(range(shift)):
        return None
    canon = {r: _sig(own[r], p, n, 0, 0) for r in own}
    rep_pairs: dict[int, _Pairs] = {}
    for r in own:
        merged = _pairs_of(own[r], r, p, n)
        if merged is None:
            return None
        rep_pairs[r] = merged
    if not _matched(rep_pairs, p, n, m, shift):
        return None
    width = shift * m
    cut: dict[int, list[Op]] = {st.index: [] for st in reps.steps}
    # what a batch keeps per rank: its ops (at most a chunk set of their own each), grouped by rank (`_by_rank`)
    per_rank = sum(OP_BYTES + 40 + op.chunks.bits.bit_length() // 8 for st in probe.steps for op in st.ops) // max(
        1, min(p, _MAX_SHIFT + 1)
    )
    step_size = max(shift, min(batch, room // max(1, per_rank)) // shift * shift)
    total = -(-p // step_size)
    carry = Carry()
    for done, start in enumerate(range(0, p, step_size), 1):
        ranks = range(start, min(p, start + step_size))
        part = _batch(program, params, ranks, shift, carry, loud=p * n > wrong_above)
        if part is None or [(st.index, st.phase) for st in part.steps] != [(st.index, st.phase) for st in reps.steps]:
            return None
        if any(st.lanes is not None for st in part.steps):
            return None
        if not _invariant(part, ranks, canon, p, n, m, shift):
            return None
        _cut(part, ranks, width, cut)
        del part
        if on_progress is not None:
            on_progress(done, total)
    orbit = Schedule(
        algorithm=reps.algorithm,
        collective=reps.collective,
        params=reps.params,
        nranks=p,
        nchunks=width,
        root=None,
        steps=tuple(Step(index=st.index, phase=st.phase, ops=tuple(cut[st.index])) for st in reps.steps),
        source=reps.source,
        span=reps.span,
    )
    verdict = check(orbit)
    if not verdict.ok and p * n <= wrong_above:
        return None
    stats = _stats(reps, rep_pairs, p, n, shift)
    if not verdict.ok:
        return reps, dataclasses.replace(verdict, stats=stats), Orbit(shift, width)
    report = CheckReport(
        algorithm=reps.algorithm, params=tuple(reps.params), nranks=p, ok=True, findings=(), stats=stats
    )
    return reps, report, Orbit(shift, width)


def _slots(program: Program, params: Mapping[str, ParamValue]) -> int:
    """The instance's (rank, chunk) slots, 0 when the instance itself is refused (its parameters, its chunks)."""
    try:
        header = elaborate(program, params, ranks=(), max_slots=_STREAM_SLOTS)
    except CollError:
        return 0
    return header.nranks * header.nchunks


def _batch(
    program: Program,
    params: Mapping[str, ParamValue],
    ranks: range,
    shift: int,
    carry: Carry | None = None,
    loud: bool = False,
) -> Schedule | None:
    """The steps of ``ranks`` and of the representatives 0 .. shift-1 (whose steps number the batch's); None
    when the elaboration fails, or its error when ``loud``.  The batches of one check share ``carry``: the
    phase of every step and the loop-iteration budget are checked across all of them, as one elaboration
    checks them across all ranks (the representatives' iterations count once per batch)."""
    wanted = sorted({*range(shift), *ranks})
    try:
        return elaborate(program, params, ranks=wanted, max_slots=_STREAM_SLOTS, carry=carry)
    except CollError:
        if loud:
            raise
        return None


def _by_rank(schedule: Schedule) -> dict[int, list[tuple[int, list[Op]]]]:
    """Each rank's steps in ``schedule``: (step index, its ops in order)."""
    out: dict[int, list[tuple[int, list[Op]]]] = {}
    for st in schedule.steps:
        for op in st.ops:
            steps = out.setdefault(op.rank, [])
            if not steps or steps[-1][0] != st.index:
                steps.append((st.index, []))
            steps[-1][1].append(op)
    return out


def _rotate(bits: int, by: int, n: int) -> int:
    """Chunk set ``bits`` with every chunk c moved to (c + by) mod n (0 <= by < n)."""
    if not by:
        return bits
    return ((bits << by) | (bits >> (n - by))) & ((1 << n) - 1)


def _sig(steps: list[tuple[int, list[Op]]], p: int, n: int, d: int, by: int) -> _Steps | None:
    """A rank's steps with every peer moved by -d and every chunk by -by (None for an op outside the
    ranks or chunks, or one with a codec: such a rank is not a shifted representative)."""
    out = []
    back = (n - by) % n
    for index, ops in steps:
        row = []
        for op in ops:
            bits = op.chunks.bits
            if op.codec is not None or bits >> n or not 0 <= op.peer < p:
                return None
            row.append((op.kind, (op.peer - d) % p, _rotate(bits, back, n), op.action))
        out.append((index, tuple(row)))
    return tuple(out)


def _find_shift(probe: Schedule, p: int, m: int) -> int | None:
    """The smallest k dividing p (k <= 64) whose rank does what rank 0 does, shifted by k."""
    own = _by_rank(probe)
    if 0 not in own:
        return None
    n = p * m
    zero = _sig(own[0], p, n, 0, 0)
    for k in range(1, min(p - 1, _MAX_SHIFT) + 1):
        if p % k == 0 and k in own and _sig(own[k], p, n, k, k * m) == zero:
            return k
    return None


def _invariant(part: Schedule, ranks: range, canon: dict[int, _Steps | None], p: int, n: int, m: int, k: int) -> bool:
    """Every rank of ``ranks`` does what its representative does, shifted."""
    own = _by_rank(part)
    for r in ranks:
        rep = r % k
        d = r - rep
        if _sig(own.get(r, []), p, n, d, d * m) != canon[rep]:
            return False
    return True


def _pairs_of(steps: list[tuple[int, list[Op]]], rank: int, p: int, n: int) -> _Pairs | None:
    """A representative's sends and receives merged per step and peer; None for an op of the wrong form."""
    out: _Pairs = {}
    for index, ops in steps:
        sent: dict[int, int] = {}
        got: dict[int, int] = {}
        for op in ops:
            bits, peer = op.chunks.bits, op.peer
            if op.codec is not None or not 0 <= peer < p or peer == rank or bits >> n or not bits:
                return None
            if op.kind is OpKind.SEND and op.action is None:
                into = sent
            elif op.kind is OpKind.RECV and op.action in (Action.COPY, Action.REDUCE):
                into = got
            else:
                return None
            old = into.get(peer, 0)
            if old & bits:
                return None
            into[peer] = old | bits
        out[index] = (sent, got)
    return out


def _matched(pairs: dict[int, _Pairs], p: int, n: int, m: int, k: int) -> bool:
    """Every send of a representative is received by its peer, and every receive sent, chunk for chunk
    (the peer's ops: its representative's, shifted); by the symmetry, so is every message of every rank."""

    def of(q: int, index: int, side: int, peer: int) -> int:
        rep = q % k
        d = q - rep
        entry = pairs[rep].get(index)
        if entry is None:
            return 0
        return _rotate(entry[side].get((peer - d) % p, 0), d * m % n, n)

    for r, steps in pairs.items():
        for index, (sent, got) in steps.items():
            if any(of(q, index, 1, r) != bits for q, bits in sent.items()):
                return False
            if any(of(q, index, 0, r) != bits for q, bits in got.items()):
                return False
    return True


def _cut(part: Schedule, ranks: range, width: int, cut: dict[int, list[Op]]) -> None:
    """Append the ops of ``ranks`` on chunks 0 .. width-1 (cut to them) to their steps in ``cut``."""
    mask = (1 << width) - 1
    lo, hi = ranks.start, ranks.stop
    for st in part.steps:
        into = cut[st.index]
        for op in st.ops:
            bits = op.chunks.bits & mask
            if bits and lo <= op.rank < hi:
                into.append(Op(op.rank, op.kind, op.peer, ChunkSet(bits), op.action, op.span))


def _stats(reps: Schedule, pairs: dict[int, _Pairs], p: int, n: int, k: int) -> Stats:
    """The per-op checker's statistics, from the representatives: each rank's are its representative's."""
    copies = p // k
    messages = temp = 0
    sent = dict.fromkeys(pairs, 0)
    received = dict.fromkeys(pairs, 0)
    fan_out: list[int] = []
    fan_in: list[int] = []
    for st in reps.steps:
        if not st.ops:
            continue
        step_out = step_in = 0
        for r, steps in pairs.items():
            entry = steps.get(st.index)
            if entry is None:
                continue
            out, into = entry
            messages += len(out) * copies
            sent[r] += sum(b.bit_count() for b in out.values())
            received[r] += sum(b.bit_count() for b in into.values())
            step_out, step_in = max(step_out, len(out)), max(step_in, len(into))
            both = 0
            for b in out.values():
                both |= b
            if any(both & b for b in into.values()):
                temp += copies
        fan_out.append(step_out)
        fan_in.append(step_in)
    return traffic_stats(
        reps.collective,
        p,
        n,
        steps=len(fan_out),
        messages=messages,
        most_sent=max(sent.values(), default=0),
        most_received=max(received.values(), default=0),
        fan_out_steps=fan_out,
        fan_in_steps=fan_in,
        temp_buffer_steps=temp,
    )
