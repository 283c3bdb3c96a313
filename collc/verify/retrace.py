"""The exact re-trace of one failing chunk (`collc.verify.check`): per rank, the multiset of contributions
it holds, step by step, to say what the end lacks or counts twice and which operation is responsible.

A slot that is never written points at what should have written it: a receive that names the chunk but gets
nothing (its peer does not send it), else the rank's last receive (which names other chunks), else the fact
that the rank receives nothing at all (a schedule with no steps says so; `collc.verify.explain` then names
the loop that produced none).  A copy that overwrote contributions the end lacks is named too, with what it
brought instead: nothing when its sender held no data, and a reduce is suggested only in a reducing
collective, where it would have kept both.
"""

from __future__ import annotations

import numpy as np

from collc.collectives import EVERY, contributors
from collc.ir import Action, Op, OpKind, Schedule, Span
from collc.verify.findings import Collector, Finding, chunks_word, fmt, fmt_ids
from collc.verify.matching import merge_pairs
from collc.verify.multiset import Extra, counts_of, format_counts, msum

__all__ = ["NOTHING_RECEIVED", "NO_STEPS", "trace"]

NO_STEPS = "the schedule has no steps"  # the reason a slot is never written, when the schedule is empty
NOTHING_RECEIVED = "receives nothing in the whole schedule"

_DupEvent = tuple[int, int, Op, list[int]]  # step, rank, reduce op, origins it counted twice
_Loss = tuple[int, int, Op, int, int]  # step, rank, copy op, origins it overwrote, origins it brought


def trace(
    schedule: Schedule,
    chunk: int,
    origin: int,
    dest: int,
    steps: list[tuple[int, list[Op]]],
    out: Collector,
) -> None:
    """Follow one chunk exactly (a multiset of origins per rank) and report why it fails.

    `steps` holds, per step, the ops that may carry `chunk` (a prefilter shared by the traced chunks).
    """
    p = schedule.nranks
    sets = [1 << r for r in range(p)] if origin == EVERY else [0] * p
    if origin != EVERY:
        sets[origin] = 1 << origin
    extras: list[Extra] = [None] * p
    last: list[tuple[int, Op] | None] = [None] * p
    # dup[r]: the reduce that first counted some origin twice in what slot r holds now
    dup: list[_DupEvent | None] = [None] * p
    undelivered: dict[int, tuple[int, Op]] = {}  # rank -> its last receive of the chunk that got nothing
    bit = 1 << chunk
    losses: list[_Loss] = []  # copies that overwrote contributions
    for index, candidates in steps:
        ops = [op for op in candidates if op.chunks.bits >> chunk & 1]
        if not ops:
            continue
        pairs = merge_pairs(ops, p, schedule.nchunks, index, None)
        flows = [(s, d, Action.COPY) for (s, d), e in pairs.items() if e[0] & e[1] & bit]
        flows += [(s, d, Action.REDUCE) for (s, d), e in pairs.items() if e[0] & e[2] & bit]
        recv_op: dict[tuple[int, int, Action], Op] = {}
        for op in ops:
            if op.kind is OpKind.RECV:
                recv_op.setdefault((op.rank, op.peer, op.action or Action.COPY), op)
                entry = pairs.get((op.peer, op.rank))
                if 0 <= op.rank < p and (entry is None or not entry[0] & bit):
                    undelivered[op.rank] = (index, op)  # its peer does not send the chunk in this step
        incoming = [(sets[s], extras[s], dup[s]) for s, _, _ in flows]  # read before any write
        for (s, d, action), (bits, extra, event) in zip(flows, incoming, strict=True):
            op = recv_op[d, s, action]
            last[d] = (index, op)
            if action is Action.REDUCE:
                bits, extra = msum(sets[d], extras[d], bits, extra)
                event = dup[d] or event
                if event is None and extra is not None:
                    event = (index, d, op, sorted(extra))
            elif sets[d] and not sets[d] & bits:  # a copy over disjoint data (or over data, of nothing)
                losses.append((index, d, op, sets[d], bits))
            sets[d], extras[d], dup[d] = bits, extra, event

    def want(r: int) -> int:  # the contributions rank r must hold (scans: ranks 0 .. r + prefix - 1)
        return ((1 << contributors(schedule.collective, p, r)) - 1) if origin == EVERY else 1 << origin

    required = range(p) if dest == EVERY else [dest]
    if schedule.collective.prefix == 0:
        required = range(1, p)  # an exscan's rank 0 holds nothing it must
    failing = [r for r in required if sets[r] != want(r) or extras[r] is not None]
    if not failing:
        return
    doubled = [r for r in failing if extras[r] is not None]
    short = [r for r in failing if extras[r] is None]
    if doubled:
        r = doubled[0]
        exp_text = format_counts(counts_of(p, want(r), None))
        final = format_counts(counts_of(p, sets[r], extras[r]))
        others = "1 other rank also ends" if len(doubled) == 2 else f"{len(doubled) - 1} other ranks also end"
        more = f"; {others} with it counted twice" if len(doubled) > 1 else ""
        event = dup[r]
        assert event is not None  # a count only grows past one through a reduce, which records it
        st, rank, op, twice = event
        msg = (
            f"step {st}: rank {rank} reduces chunk {chunk} received from rank {op.peer} into a slot that "
            f"already holds the contributions of ranks {fmt_ids(twice)}, so they are counted twice "
            f"(at the end rank {r} holds {final}, expected {exp_text}{more})"
        )
        out.add(Finding("double-count", msg, op.span, st, rank, chunk, exp_text, final))
    if short:
        r = short[0]
        expected = counts_of(p, want(r), None)
        exp_text = format_counts(expected)
        row = counts_of(p, sets[r], extras[r])
        actual = format_counts(row)
        missing = np.flatnonzero((expected > 0) & (row == 0))
        extra = np.flatnonzero((expected == 0) & (row > 0))
        what = "nothing" if not row.any() else f"the contributions of ranks {actual}"
        diff = []
        if missing.size:
            diff.append(f"missing {fmt_ids(missing)}")
        if extra.size:
            diff.append(f"unexpected {fmt_ids(extra)}")
        others = "1 other rank also fails" if len(short) == 2 else f"{len(short) - 1} other ranks also fail"
        more = f"; {others} for this chunk" if len(short) > 1 else ""
        missing_bits = sum(1 << int(m) for m in missing)
        loss = next((e for e in losses if e[3] & missing_bits), None)
        lost_note = "" if loss is None else _loss_note(loss, missing_bits, chunk, origin == EVERY)
        writer = last[r]
        if writer is None:
            where, span, st = _never_written(schedule, r, chunk, undelivered.get(r))
        else:
            st, op = writer
            where, span = f"last written at step {st} by its receive from rank {op.peer}", op.span
        msg = (
            f"after the last step rank {r} holds {what} for chunk {chunk}, expected {exp_text} "
            f"({', '.join(diff)}); {where}{more}{lost_note}"
        )
        out.add(Finding("postcondition", msg, span, st, r, chunk, exp_text, actual))


def _loss_note(loss: _Loss, missing: int, chunk: int, reducing: bool) -> str:
    """The first copy that destroyed contributions the end lacks, and what it brought instead."""
    st, rank, op, lost, brought = loss
    head = (
        f"; ranks {fmt(lost & missing)} were overwritten at step {st} by rank {rank}'s copy from rank {op.peer} "
        f"(line {op.span.line})"
    )
    if not brought:
        return f"{head}, which brought nothing: rank {op.peer} held no data for chunk {chunk}"
    if reducing:
        return f"{head}, whose data were disjoint: a reduce would keep both"
    return f"{head}, which brought the contributions of ranks {fmt(brought)} instead"


def _never_written(
    schedule: Schedule, rank: int, chunk: int, undelivered: tuple[int, Op] | None
) -> tuple[str, Span, int | None]:
    """Why slot (rank, chunk) was never written, where to point, and the step: a receive of it that got
    nothing, the rank's last receive, or no receive at all."""
    if undelivered is not None:
        st, op = undelivered
        where = (
            f"it is never written: its receive at step {st} from rank {op.peer} names it, but rank {op.peer} "
            f"does not send it to rank {rank} in that step"
        )
        return where, op.span, st
    last_recv = _last_receive(schedule, rank)
    if last_recv is not None:
        st, op = last_recv
        where = (
            f"it is never written: no receive ever delivers it, none of rank {rank}'s names it (its last receive, "
            f"at step {st} from rank {op.peer}, takes {chunks_word(op.chunks.bits)})"
        )
        return where, op.span, st
    if not schedule.steps:
        return f"it is never written: {NO_STEPS}", schedule.span, None
    return f"it is never written: rank {rank} {NOTHING_RECEIVED}", schedule.span, None


def _last_receive(schedule: Schedule, rank: int) -> tuple[int, Op] | None:
    """The last receive op of ``rank``: where a chunk it never gets should have arrived."""
    for step in reversed(schedule.steps):
        for op in step.ops:
            if op.rank == rank and op.kind is OpKind.RECV:
                return step.index, op
    return None
