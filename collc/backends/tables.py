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

Compression points (docs/compression.md) are static facts too: which slots
are compressed, and with what, follows from the ops alone (the verifier has
checked that every use is legal).  With ``compression=True`` a run also says
how its chunks travel: raw, compressed on the wire by the sender (``codec``)
and decompressed by the receiver, or as the payload of a compressed slot
(``payload``: forwarded unchanged; a copy leaves the receiving slot compressed,
a reduce adds two homomorphic payloads).  Every chunk is a payload of its own.
A rank's local ``compress`` / ``decompress`` ops of a step are `LocalRun`s,
applied at the start of the step.  The cuda, mpi-py and mpi-c targets execute
them.

`transfers` turns tables back into (step, src, dst, chunk, action) facts; the
round-trip test compares them with the IR's ops.
"""

from __future__ import annotations

from dataclasses import dataclass

from collc.diagnostics import CollError
from collc.ir import Action, ChunkSet, Collective, OpKind, ParamValue, Schedule

__all__ = [
    "LocalRun",
    "Message",
    "Phase",
    "RankStep",
    "Run",
    "StepInfo",
    "Tables",
    "adds_payloads",
    "from_schedule",
    "transfers",
]


@dataclass(frozen=True, slots=True)
class Run:
    """Chunks ``lo .. hi-1`` of a message; ``reduce`` tells a receiver what to do with them.

    ``codec`` (a canonical codec spec) is None for raw data; otherwise each
    chunk travels as a payload of that codec: compressed by the sender on the
    wire, or, when ``payload`` is set, the sender's compressed slot forwarded.
    """

    lo: int
    hi: int
    reduce: bool = False
    codec: str | None = None
    payload: bool = False


@dataclass(frozen=True, slots=True)
class LocalRun:
    """A local op of one rank on chunks ``lo .. hi-1``: compress with ``codec``, or decompress
    (``decompress``; ``codec`` is then the codec the slots were compressed with)."""

    lo: int
    hi: int
    codec: str
    decompress: bool


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
    local: tuple[LocalRun, ...] = ()  # compress / decompress at the start of the step, in program order


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
    codecs: tuple[str, ...] = ()  # every codec spec the runs and local ops name, in order of first use
    chunk_weights: tuple[int, ...] | None = None  # the schedule's (`Schedule.chunk_weights`)

    @property
    def max_messages(self) -> int:
        """The most messages (sends + receives) any rank has in one step."""
        return max((len(s.sends) + len(s.recvs) for steps in self.ranks for s in steps), default=0)


_Mode = tuple[str | None, bool]  # (codec, payload) of a chunk in a message
_RAW: _Mode = (None, False)


def _runs(copy: int, reduce: int, modes: dict[int, _Mode] | None = None) -> tuple[Run, ...]:
    """Disjoint ascending runs of ``copy | reduce``, split where the action or the chunk's mode changes."""
    modes = modes or {}
    out: list[Run] = []
    for lo, hi in ChunkSet(copy | reduce).intervals():
        c = lo
        while c < hi:
            red, mode = (reduce >> c) & 1 == 1, modes.get(c, _RAW)
            end = c + 1
            while end < hi and ((reduce >> end) & 1 == 1) == red and modes.get(end, _RAW) == mode:
                end += 1
            out.append(Run(c, end, red, *mode))
            c = end
    return tuple(out)


def _modes(
    state: dict[tuple[int, int], str],
    wire: dict[tuple[int, int, int], str],
    codecs: dict[str, None],
    src: int,
    dst: int,
    bits: int,
) -> dict[int, _Mode]:
    """How each chunk of ``bits`` travels from ``src`` to ``dst``: a compressed slot as its payload, a send
    with a codec compressed on the wire; raw chunks are left out.  Records the codecs in ``codecs``."""
    out: dict[int, _Mode] = {}
    for c in ChunkSet(bits):
        held = state.get((src, c))
        mode: _Mode = (held, True) if held is not None else (wire.get((src, dst, c)), False)
        if mode[0] is not None:
            codecs.setdefault(mode[0], None)
            out[c] = mode
    return out


def _local_runs(ops: list[tuple[int, str, bool]]) -> tuple[LocalRun, ...]:
    """(chunk, codec, decompress) in program order -> runs of consecutive chunks with the same op."""
    out: list[LocalRun] = []
    for c, codec, dec in ops:
        last = out[-1] if out else None
        if last is not None and last.hi == c and last.codec == codec and last.decompress == dec:
            out[-1] = LocalRun(last.lo, c + 1, codec, dec)
        else:
            out.append(LocalRun(c, c + 1, codec, dec))
    return tuple(out)


def _line(file: str, line: int) -> str:
    return f"{file}:{line}"


def from_schedule(schedule: Schedule, *, compression: bool = False) -> Tables:
    """Tables of ``schedule``, which must have passed `collc.verify.check.check`.

    A schedule with compression points needs ``compression=True`` (the
    caller executes codecs); otherwise it is a CollError.
    """
    if schedule.compresses() and not compression:
        raise CollError(
            f"{schedule.algorithm}: these step tables are for an executor without codecs, and the schedule has "
            "compression points"
        )
    p = schedule.nranks
    per_rank: list[list[RankStep]] = [[] for _ in range(p)]
    infos: list[StepInfo] = []
    state: dict[tuple[int, int], str] = {}  # compressed slots (rank, chunk) -> codec
    codecs: dict[str, None] = {}
    for step in schedule.steps:
        sends: dict[tuple[int, int], int] = {}
        wire: dict[tuple[int, int, int], str] = {}  # (src, dst, chunk) -> the send's codec
        copies: dict[tuple[int, int], int] = {}
        reduces: dict[tuple[int, int], int] = {}
        local: dict[int, list[tuple[int, str, bool]]] = {}
        lines: dict[str, None] = {}
        for op in step.ops:
            lines.setdefault(_line(op.span.file, op.span.line), None)
            if op.kind.local:
                for c in op.chunks:
                    key = (op.rank, c)
                    if op.kind is OpKind.COMPRESS and op.codec is not None:
                        state[key] = op.codec
                        local.setdefault(op.rank, []).append((c, op.codec, False))
                    elif op.kind is OpKind.DECOMPRESS and key in state:
                        local.setdefault(op.rank, []).append((c, state.pop(key), True))
            elif op.kind is OpKind.SEND:
                key = (op.rank, op.peer)
                sends[key] = sends.get(key, 0) | op.chunks.bits
                if op.codec is not None:
                    wire.update(((op.rank, op.peer, c), op.codec) for c in op.chunks)
            else:
                key = (op.peer, op.rank)
                table = reduces if op.action is Action.REDUCE else copies
                table[key] = table.get(key, 0) | op.chunks.bits
        for _, codec, _dec in (x for ops in local.values() for x in ops):
            codecs.setdefault(codec, None)
        infos.append(StepInfo(step.index, step.phase, tuple(sorted(lines, key=_line_key))))

        sent_by: dict[int, int] = {}
        for (src, _dst), bits in sends.items():
            sent_by[src] = sent_by.get(src, 0) | bits
        out: dict[int, tuple[list[Message], list[Message]]] = {}
        for (src, dst), bits in sorted(sends.items()):
            if bits:
                runs = _runs(bits, 0, _modes(state, wire, codecs, src, dst, bits))
                out.setdefault(src, ([], []))[0].append(Message(dst, runs))
        landed: dict[tuple[int, int], str | None] = {}  # the receivers' slots after the step
        for src, dst in sorted(set(copies) | set(reduces), key=lambda k: (k[1], k[0])):
            copy, red = copies.get((src, dst), 0), reduces.get((src, dst), 0)
            if not copy | red:
                continue
            chunk_modes = _modes(state, wire, codecs, src, dst, copy | red)
            runs = _runs(copy & ~red, red, chunk_modes)
            direct = (
                len(runs) == 1 and not runs[0].reduce and runs[0].codec is None and (sent_by.get(dst, 0) & copy) == 0
            )
            out.setdefault(dst, ([], []))[1].append(Message(src, runs, direct))
            for c in ChunkSet(copy & ~red):
                codec, payload = chunk_modes.get(c, _RAW)
                landed[dst, c] = codec if payload else None
        for key, codec in landed.items():
            if codec is None:
                state.pop(key, None)
            else:
                state[key] = codec
        for rank in local:
            out.setdefault(rank, ([], []))
        for rank, (s, r) in sorted(out.items()):
            per_rank[rank].append(RankStep(step.index, tuple(s), tuple(r), _local_runs(local.get(rank, []))))
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
        codecs=tuple(codecs),
        chunk_weights=schedule.chunk_weights,
    )


def _line_key(text: str) -> tuple[str, int]:
    file, _, line = text.rpartition(":")
    return (file, int(line))


def adds_payloads(schedule: Schedule) -> bool:
    """Whether some reduce of ``schedule`` adds homomorphic payloads (then its op must be sum)."""
    if not schedule.compresses():
        return False
    t = from_schedule(schedule, compression=True)
    return any(r.payload and r.reduce for ranks in t.ranks for rs in ranks for m in rs.recvs for r in m.runs)


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
