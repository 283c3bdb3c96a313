"""Verified IR -> flat per-rank step tables: what the generated executors embed.

Every executor that runs on real MPI processes (``mpi-py``, ``mpi-c``) executes
these tables and nothing else.  They are the `Schedule` regrouped the way one
rank sees it: for each step in which the rank takes part, the messages it sends
and the messages it receives.

One *message* per (step, sender, receiver) pair: the IR's sends from ``src`` to
``dst`` in a step are merged into one chunk set, sent in ascending chunk order,
and the receives of ``dst`` from ``src`` are merged the same way, each chunk
tagged with the receive's action (copy or reduce).  The verifier checks that
both merged sets are equal (``unmatched-send`` / ``unmatched-recv``) and that no
chunk is both copied and reduced (``write-conflict``), so both ends agree on the
message's layout without any run-time negotiation.

Semantics, as in the IR: every send reads the buffer as it was at the start of
the step, every receive lands at its end.  A receive is *direct* when it is one
contiguous copy that the rank does not also send in that step: it may then be
received straight into the buffer; every other receive goes through scratch
space and is applied after the step's messages complete.

`transfers` turns tables back into (step, src, dst, chunk, action) facts; the
round-trip test compares them with the IR's ops.
"""

from __future__ import annotations

from dataclasses import dataclass

from collc.diagnostics import CollError
from collc.ir import Action, ChunkSet, Collective, OpKind, ParamValue, Schedule

__all__ = [
    "Message",
    "Phase",
    "RankStep",
    "Run",
    "StepInfo",
    "Tables",
    "from_schedule",
    "transfers",
]


@dataclass(frozen=True, slots=True)
class Run:
    """Chunks ``lo .. hi-1`` of a message; ``reduce`` tells a receiver what to do with them."""

    lo: int
    hi: int
    reduce: bool = False


@dataclass(frozen=True, slots=True)
class Message:
    """One message of one step between this rank and ``peer``.

    ``runs`` are disjoint, ascending chunk intervals: the message's payload is
    their elements, in that order.  Adjacent runs with the same action are
    merged.  ``direct`` (receives only): one copy run that the rank does not
    send in the same step, so it may be received in place.
    """

    peer: int
    runs: tuple[Run, ...]
    direct: bool = False

    @property
    def chunks(self) -> int:
        return sum(r.hi - r.lo for r in self.runs)


@dataclass(frozen=True, slots=True)
class RankStep:
    """What one rank does in global step ``step``: sends and receives, each sorted by peer."""

    step: int
    sends: tuple[Message, ...]
    recvs: tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class StepInfo:
    """A global step: its index, phase, and the source lines its ops came from (``file:line``)."""

    index: int
    phase: str
    lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Phase:
    """A phase: its name and the global steps ``first .. last`` (inclusive) it spans."""

    name: str
    first: int
    last: int
    lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Tables:
    """The step tables of one verified schedule, for every rank."""

    algorithm: str
    collective: Collective
    params: tuple[tuple[str, ParamValue], ...]
    nranks: int
    nchunks: int
    root: int | None
    source: str  # the main .coll file
    steps: tuple[StepInfo, ...]
    phases: tuple[Phase, ...]
    ranks: tuple[tuple[RankStep, ...], ...]  # ranks[r]: the steps rank r takes part in, in order

    @property
    def max_messages(self) -> int:
        """The most messages (sends + receives) any rank has in one step."""
        return max((len(s.sends) + len(s.recvs) for steps in self.ranks for s in steps), default=0)


def _runs(copy: int, reduce: int) -> tuple[Run, ...]:
    """Disjoint ascending runs of ``copy | reduce``, split where the action changes."""
    out: list[Run] = []
    for lo, hi in ChunkSet(copy | reduce).intervals():
        c = lo
        while c < hi:
            red = (reduce >> c) & 1 == 1
            end = c + 1
            while end < hi and ((reduce >> end) & 1 == 1) == red:
                end += 1
            out.append(Run(c, end, red))
            c = end
    return tuple(out)


def _line(file: str, line: int) -> str:
    return f"{file}:{line}"


def from_schedule(schedule: Schedule) -> Tables:
    """Tables of ``schedule``, which must have passed `collc.verify.check.check`."""
    if schedule.compresses():
        raise CollError(
            f"{schedule.algorithm}: compression points are not supported by the mpi-py/mpi-c targets yet; "
            "run it with --backend local"
        )
    p = schedule.nranks
    per_rank: list[list[RankStep]] = [[] for _ in range(p)]
    infos: list[StepInfo] = []
    for step in schedule.steps:
        sends: dict[tuple[int, int], int] = {}
        copies: dict[tuple[int, int], int] = {}
        reduces: dict[tuple[int, int], int] = {}
        lines: dict[str, None] = {}
        for op in step.ops:
            lines.setdefault(_line(op.span.file, op.span.line), None)
            if op.kind is OpKind.SEND:
                key = (op.rank, op.peer)
                sends[key] = sends.get(key, 0) | op.chunks.bits
            else:
                key = (op.peer, op.rank)
                table = reduces if op.action is Action.REDUCE else copies
                table[key] = table.get(key, 0) | op.chunks.bits
        infos.append(StepInfo(step.index, step.phase, tuple(sorted(lines, key=_line_key))))
        sent_by: dict[int, int] = {}
        for (src, _dst), bits in sends.items():
            sent_by[src] = sent_by.get(src, 0) | bits
        out: dict[int, tuple[list[Message], list[Message]]] = {}
        for (src, dst), bits in sorted(sends.items()):
            if bits:
                out.setdefault(src, ([], []))[0].append(Message(dst, _runs(bits, 0)))
        for src, dst in sorted(set(copies) | set(reduces), key=lambda k: (k[1], k[0])):
            copy, red = copies.get((src, dst), 0), reduces.get((src, dst), 0)
            if not copy | red:
                continue
            runs = _runs(copy & ~red, red)
            direct = len(runs) == 1 and not runs[0].reduce and (sent_by.get(dst, 0) & copy) == 0
            out.setdefault(dst, ([], []))[1].append(Message(src, runs, direct))
        for rank, (s, r) in sorted(out.items()):
            per_rank[rank].append(RankStep(step.index, tuple(s), tuple(r)))
    phases: list[Phase] = []
    for info in infos:
        if phases and phases[-1].name == info.phase:
            last = phases[-1]
            merged = tuple(sorted(set(last.lines) | set(info.lines), key=_line_key))
            phases[-1] = Phase(last.name, last.first, info.index, merged)
        else:
            phases.append(Phase(info.phase, info.index, info.index, info.lines))
    return Tables(
        algorithm=schedule.algorithm,
        collective=schedule.collective,
        params=schedule.params,
        nranks=p,
        nchunks=schedule.nchunks,
        root=schedule.root,
        source=schedule.span.file,
        steps=tuple(infos),
        phases=tuple(phases),
        ranks=tuple(tuple(steps) for steps in per_rank),
    )


def _line_key(text: str) -> tuple[str, int]:
    file, _, line = text.rpartition(":")
    return (file, int(line))


def transfers(tables: Tables) -> set[tuple[int, int, int, int, str]]:
    """Every (step, src, dst, chunk, action) the tables move; sends give action ``"send"``."""
    facts: set[tuple[int, int, int, int, str]] = set()
    for rank, steps in enumerate(tables.ranks):
        for rs in steps:
            for m in rs.sends:
                for run in m.runs:
                    facts.update((rs.step, rank, m.peer, c, "send") for c in range(run.lo, run.hi))
            for m in rs.recvs:
                for run in m.runs:
                    action = "reduce" if run.reduce else "copy"
                    facts.update((rs.step, m.peer, rank, c, action) for c in range(run.lo, run.hi))
    return facts
