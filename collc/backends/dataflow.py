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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from collc.backends.tables import Message, RankStep, Tables

__all__ = [
    "SCRATCH_WINDOW",
    "DepRow",
    "FlowOp",
    "dep_row",
    "flow_links",
    "flow_scratch",
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
