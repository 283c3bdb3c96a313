"""What each message of a rank waits for: the dependencies that let the mpi-c runtime issue by dataflow.

The step tables (`collc.backends.tables`) order a rank's messages step by step.  The
schedule's semantics (every send reads the buffer as it was at the start of its step, every
receive lands at its end) only order accesses to the same chunk, so a rank may issue a
message as soon as the accesses it conflicts with are over, whatever step they belong to.

A rank's *ops* are its messages in table order: step by step, its sends (by peer) before
its receives (by peer).  Op ``j`` must wait for an earlier op ``i`` when both touch a common
chunk and at least one of them writes it (a receive): a send waits for the receive that last
wrote each of its chunks (read after write); a receive waits for the last write of its
chunks (write after write: a reduce adds to the value before it) and for every send of them
since (write after read, sends of the same step included: they read the value from before
the step).  Each op lists only the last writer and the readers since, per chunk: the other
orderings follow by transitivity, along ops that all touch that chunk.

What a dependency gates depends on the op: a send is posted when its dependencies are done;
a receive that lands straight in the buffer (``direct``) is posted then; any other receive is
posted at once into scratch space and *applied* (copied or reduced into the buffer) when its
dependencies are done.  An op is done when it no longer touches the buffer: a send when MPI
completes it, a direct receive when it has arrived, any other receive once applied.

`rank_ops` computes the ops of one rank; `flow_scratch` the scratch space its dataflow run
uses.  Tags carry the step (modulo 32768), so messages issued out of step order still match.

Reading the input in place (`input_reads`).  An allreduce, reduce-scatter or reduce starts with
the rank's input in its buffer, an allgather with the rank's own block.  Rather than copy the input
into the work buffer first, the runtime reads a chunk from the caller's input for as long as no
receive has written it: a send of such a *fresh* chunk leaves from the input, and the first
reduce into it writes ``input op received`` to the work buffer (the same operands in the same
order as reducing into a copy).  Only the rank's output chunks that stay fresh to the end (an
allgather's own block; a rank that receives none of its result) are copied, once the first
messages are on their way.  Which chunks are fresh is a static fact of the tables, in the order
of the steps, which both issue orders keep for every chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from collc.backends.tables import Message, RankStep, Tables
from collc.collectives import chunk_dest, chunk_origin, finally_required, initially_held
from collc.ir import Collective

__all__ = [
    "SCRATCH_WINDOW",
    "DepRow",
    "FlowOp",
    "dep_row",
    "flow_links",
    "flow_scratch",
    "input_reads",
    "op_note",
    "rank_ops",
    "step_scratch",
]

SCRATCH_WINDOW = 8
"""Consecutive steps of a rank whose scratch space a dataflow run may hold at once (`flow_scratch`)."""


@dataclass(frozen=True, slots=True)
class FlowOp:
    """One message of one rank, in table order: what it moves and the earlier ops (indices) it waits for."""

    step: int
    send: bool
    peer: int
    chunks: int  # bitset of the chunks it reads (send) or writes (receive)
    deps: tuple[int, ...]  # ascending indices of earlier ops of the rank


@dataclass(frozen=True, slots=True)
class InputReads:
    """Which runs of a rank read the caller's input in place of the work buffer (`input_reads`).

    ``fresh[rank][i]`` holds one flag per run of the rank's op ``i`` (table order, as `rank_ops`): a send's run
    that leaves from the input, or a receive's reduce run whose destination still holds the input.
    ``copy[rank]`` are the chunk intervals of the rank's output that stay fresh to the end.
    """

    fresh: tuple[tuple[tuple[bool, ...], ...], ...]
    copy: tuple[tuple[tuple[int, int], ...], ...]


@dataclass(frozen=True, slots=True)
class DepRow:
    """The ops one op waits for, as a generated C array renders them: cells ``"i, j, "`` and a comment."""

    cells: str
    note: str


def dep_row(rank: int, index: int, deps: Sequence[int]) -> DepRow:
    """The row of op ``index`` of ``rank`` in a generated dependency array (the op must wait for something)."""
    return DepRow("".join(f"{d}, " for d in deps), f"rank {rank} #{index}")


def op_note(index: int, deps: Sequence[int], what: str) -> str:
    """The comment of op ``index`` in a generated table: ``#index what``, then the ops it waits for."""
    note = f"#{index} {what}"
    return f"{note}; after {', '.join(f'#{d}' for d in deps)}" if deps else note


def _bits(msg: Message) -> int:
    bits = 0
    for r in msg.runs:
        bits |= ((1 << (r.hi - r.lo)) - 1) << r.lo
    return bits


def rank_ops(t: Tables, rank: int) -> tuple[FlowOp, ...]:
    """The ops of ``rank`` in table order (every phase), each with the ops it waits for."""
    ops: list[FlowOp] = []
    writer: dict[int, int] = {}  # chunk -> the op that last wrote it
    readers: dict[int, list[int]] = {}  # chunk -> the sends that read it since
    for rs in t.ranks[rank]:
        for send, msgs in ((True, rs.sends), (False, rs.recvs)):
            for msg in msgs:
                index = len(ops)
                deps: set[int] = set()
                for r in msg.runs:
                    for c in range(r.lo, r.hi):
                        if c in writer:
                            deps.add(writer[c])
                        if send:
                            readers.setdefault(c, []).append(index)
                        else:
                            deps.update(readers.pop(c, ()))
                            writer[c] = index
                ops.append(FlowOp(rs.step, send, msg.peer, _bits(msg), tuple(sorted(deps))))
    return tuple(ops)


def step_scratch(rs: RankStep) -> int:
    """Chunks one step of a rank moves through scratch: its receives that are not direct, its sends of several
    runs (packed)."""
    return sum(m.chunks for m in rs.recvs if not m.direct) + sum(m.chunks for m in rs.sends if len(m.runs) > 1)


def flow_scratch(rank_steps: Sequence[RankStep], window: int = SCRATCH_WINDOW) -> int:
    """Chunks of scratch space a rank's dataflow run uses: the most that ``window`` consecutive steps of it move
    through scratch, plus the most one step does.

    The runtime hands scratch out first come, first served in table order and takes it back in the same order;
    with at least twice the busiest step's need, the earliest unfinished step always finds room, so the run never
    deadlocks for want of scratch, and ranks run ahead by up to about ``window`` steps.
    """
    needs = [step_scratch(rs) for rs in rank_steps]
    if not needs:
        return 0
    most = max(needs)
    windowed = max(sum(needs[i : i + window]) for i in range(max(1, len(needs) - window + 1)))
    return windowed + most


def flow_links(rank_steps: Sequence[RankStep], window: int = SCRATCH_WINDOW) -> int:
    """Messages a rank's dataflow run on mpi-cuda may have under way at once: the most that ``window`` consecutive
    steps of it have, plus the most one step has.

    The runtime keeps the busiest step's count for the earliest unfinished step (a message of a later step takes
    a place only while more than that many are free), so that step always finds room and the run never deadlocks
    for want of places; the rest lets a rank run ahead.
    """
    counts = [len(rs.sends) + len(rs.recvs) for rs in rank_steps]
    if not counts:
        return 0
    windowed = max(sum(counts[i : i + window]) for i in range(max(1, len(counts) - window + 1)))
    return windowed + max(counts)


_READS_INPUT = (Collective.ALLREDUCE, Collective.REDUCE_SCATTER, Collective.REDUCE, Collective.ALLGATHER)


def input_reads(t: Tables) -> InputReads | None:
    """Where the runs of an allreduce, reduce-scatter, reduce or allgather may read the caller's input in place
    (module docstring).

    None for other collectives, for tables with codecs, when some run holds both fresh chunks and chunks a
    receive has written (one run is one piece of memory), and for an allgather that receives into its own block.
    """
    if t.collective not in _READS_INPUT or t.codecs:
        return None
    origin = chunk_origin(t.collective, t.nranks, t.nchunks, t.root)
    dest = chunk_dest(t.collective, t.nranks, t.nchunks, t.root)
    fresh_out: list[tuple[tuple[bool, ...], ...]] = []
    copy_out: list[tuple[tuple[int, int], ...]] = []
    for rank in range(t.nranks):
        held = initially_held(origin, rank)
        fresh = [bool(h) for h in held]  # an allgather's input is the rank's own block
        ops: list[tuple[bool, ...]] = []
        for rs in t.ranks[rank]:
            for msg in rs.sends:  # they read the buffer as it was at the start of the step
                flags = [_all_or_none(fresh[r.lo : r.hi]) for r in msg.runs]
                if None in flags:
                    return None
                ops.append(tuple(bool(f) for f in flags))
            for msg in rs.recvs:  # applied in this order, which both issue orders keep per chunk
                flags = []
                for r in msg.runs:
                    was = _all_or_none(fresh[r.lo : r.hi])
                    if was is None or (was and t.collective is Collective.ALLGATHER):
                        return None  # an allgather's input lands in place, so no receive may write it
                    flags.append(was and r.reduce)
                    fresh[r.lo : r.hi] = [False] * (r.hi - r.lo)
                ops.append(tuple(flags))
        mine = finally_required(dest, rank)
        kept = [c for c in range(t.nchunks) if fresh[c] and mine[c]]
        copy_out.append(_intervals(kept))
        fresh_out.append(tuple(ops))
    return InputReads(tuple(fresh_out), tuple(copy_out))


def _all_or_none(flags: Sequence[bool]) -> bool | None:
    """True when every flag is set, False when none is, None when they differ."""
    return True if all(flags) else False if not any(flags) else None


def _intervals(chunks: Sequence[int]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for c in chunks:
        if out and out[-1][1] == c:
            out[-1] = (out[-1][0], c + 1)
        else:
            out.append((c, c + 1))
    return tuple(out)
