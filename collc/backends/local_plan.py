"""Plans of the ``local`` executor (`collc.backends.local`): a schedule lowered to element ranges.

`check_matching` checks, before anything runs, that in every step the chunks
each rank sends to each peer are exactly those the peer receives from it.
`plan` lowers a schedule to per-step receives over element ranges for one
element count, and `execute` runs a plan on the buffers of every rank (one
``(nranks, logical)`` array), in place.

In a step every send reads the sender's buffer as it was at the start of the
step and every receive lands at its end.  A step whose receives write disjoint
elements (what verified schedules do) and has many of them is moved in
*batches*: the element runs of its receives are grouped by length and each
group moves with one gather and one scatter over flat indices, so that a ring
step of p small receives costs a few numpy calls, not p of them.  Runs longer
than `BATCH_MAX_RUN` elements, and steps where two receives write the same
element (a multi-port reduce), move receive by receive.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from collc import collectives
from collc.ir import Action, ChunkSet, Collective, Op, OpKind, Schedule, Span, Step

__all__ = [
    "Batch", "Batched", "MismatchError", "Moves", "Plan", "Region", "Transfer", "check_matching", "execute", "plan",
]  # fmt: skip

ProgressFn = Callable[[int, int], None]

_UFUNCS: dict[str, np.ufunc] = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
OPS: tuple[str, ...] = tuple(_UFUNCS)

# A chunk set whose element ranges are many short runs is moved with one index
# array (fancy indexing) rather than one numpy call per run.
_MAX_SLICES = 4
_MIN_RUN = 256

BATCH_MIN = 8
"""Receives in a step before its receives move in batches."""
BATCH_MAX_RUN = 64
"""Element runs at most this long move in batches (a longer one costs more to copy than to call numpy for)."""
_BATCH_MAX_ELEMENTS = 1 << 21
"""Elements one gather moves at most (its index array takes 8 bytes per element)."""
_OFFSETS = np.arange(BATCH_MAX_RUN, dtype=np.intp)


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------


@contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector off for a loop that makes millions of small objects and no cycles: it would
    only re-scan the schedule's ops on every pass (as elaboration, which turns it off too)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def ufunc_of(op: str) -> np.ufunc:
    """The numpy ufunc of a reduction op, or ValueError."""
    try:
        return _UFUNCS[op]
    except KeyError:
        raise ValueError(f"unknown reduction op {op!r}; expected one of {', '.join(OPS)}") from None


def check_layout(schedule: Schedule) -> None:
    error = collectives.layout_error(schedule.collective, schedule.nranks, schedule.nchunks)
    if error is not None:
        raise ValueError(f"schedule {schedule.algorithm!r}: {error}")


def logical_of(schedule: Schedule, count: int) -> int:
    """The logical element count for ``count``, or ValueError when ``count`` does not fit."""
    error = collectives.count_error(schedule.collective, schedule.nranks, count)
    if error is not None:
        raise ValueError(f"{schedule.algorithm}: {error}")
    return collectives.logical_count(schedule.collective, schedule.nranks, count)


# --------------------------------------------------------------------------
# Matching sends with receives
# --------------------------------------------------------------------------


class MismatchError(ValueError):
    """In step ``step``, what ``sender`` sends to ``receiver`` differs from what ``receiver`` receives from it.

    ``sent`` and ``expected`` are the two chunk sets (either may be empty: a send
    nobody receives, a receive nobody sends); ``span`` locates the send (or the
    receive when there is no send); ``message`` is the text without the location
    and ``notes`` what it means for an MPI run.
    """

    def __init__(
        self,
        message: str,
        *,
        step: int,
        phase: str,
        sender: int,
        receiver: int,
        sent: ChunkSet,
        expected: ChunkSet,
        span: Span,
        notes: tuple[str, ...] = (),
    ) -> None:
        super().__init__("; ".join((f"{span}: {message}", *notes)))
        self.message = message
        self.notes = notes
        self.step = step
        self.phase = phase
        self.sender = sender
        self.receiver = receiver
        self.sent = sent
        self.expected = expected
        self.span = span


def check_matching(schedule: Schedule) -> None:
    """`MismatchError` unless, in every step, each rank sends each peer exactly the chunks the peer receives.

    For every ordered pair (sender, receiver) of a step, the union of the
    sender's sends to the receiver must equal the union of the receiver's
    receives from the sender (copies and reduces alike; compression points and
    their codecs do not matter here): that union is the one message the MPI
    executors exchange (`collc.backends.tables`), so a chunk sent or received
    twice is no mismatch (the verifier reports it as a duplicate transfer).  Ops
    the verifier reports as ill-formed (a rank or peer out of range, a peer that
    is the rank itself) are left out, and chunks beyond the last are ignored, as
    the verifier does; the differences are exactly its ``unmatched-send`` /
    ``unmatched-recv`` findings.  Linear in the ops.
    """
    send_kind, recv_kind = OpKind.SEND, OpKind.RECV
    for step in schedule.steps:
        sends: dict[tuple[int, int], int] = {}
        recvs: dict[tuple[int, int], int] = {}
        for op in step.ops:
            kind = op.kind
            if kind is send_kind:
                key = (op.rank, op.peer)
                got = sends.get(key)
                sends[key] = op.chunks.bits if got is None else got | op.chunks.bits
            elif kind is recv_kind:
                key = (op.peer, op.rank)
                got = recvs.get(key)
                recvs[key] = op.chunks.bits if got is None else got | op.chunks.bits
        if sends != recvs:
            _check_step(schedule, step)


def _check_step(schedule: Schedule, step: Step) -> None:
    """`check_matching` of one step whose quick comparison failed: raise for the first pair that really differs."""
    p, mask = schedule.nranks, (1 << schedule.nchunks) - 1
    sends: dict[tuple[int, int], int] = {}
    recvs: dict[tuple[int, int], int] = {}
    for op in step.ops:
        if op.kind is not OpKind.SEND and op.kind is not OpKind.RECV:
            continue
        if not (0 <= op.rank < p and 0 <= op.peer < p) or op.rank == op.peer:
            continue
        table, key = (sends, (op.rank, op.peer)) if op.kind is OpKind.SEND else (recvs, (op.peer, op.rank))
        table[key] = table.get(key, 0) | (op.chunks.bits & mask)
    for src, dst in sorted(sends.keys() | recvs.keys()):
        sent, want = sends.get((src, dst), 0), recvs.get((src, dst), 0)
        if sent == want:
            continue
        send_op = _first_op(step.ops, src, OpKind.SEND, dst, sent & ~want)
        recv_op = _first_op(step.ops, dst, OpKind.RECV, src, want & ~sent)
        where = f"step {step.index}" + (f" (phase {step.phase})" if step.phase else "")
        sends_text = f"sends chunks {ChunkSet(sent)} to" if sent else "sends nothing to"
        recvs_text = f"receives chunks {ChunkSet(want)} from" if want else "receives nothing from"
        message = f"{where}: rank {src} {sends_text} rank {dst}, but rank {dst} {recvs_text} rank {src}"
        if send_op is not None and recv_op is not None:
            message += f" (the receive is at {recv_op.span})"
        note = (
            "an MPI run would exchange a message of the wrong size, or one that never arrives; "
            "collc check reports it as unmatched-send / unmatched-recv"
        )
        op = send_op if send_op is not None else recv_op
        assert op is not None
        raise MismatchError(
            message,
            step=step.index,
            phase=step.phase,
            sender=src,
            receiver=dst,
            sent=ChunkSet(sent),
            expected=ChunkSet(want),
            span=op.span,
            notes=(note,),
        )


def _first_op(ops: tuple[Op, ...], rank: int, kind: OpKind, peer: int, bits: int) -> Op | None:
    """The first op of ``rank`` of ``kind`` with ``peer`` that moves some of ``bits``, else the first such op at all."""
    fallback: Op | None = None
    for op in ops:
        if op.rank == rank and op.kind is kind and op.peer == peer:
            if op.chunks.bits & bits:
                return op
            fallback = fallback or op
    return fallback


# --------------------------------------------------------------------------
# Plans
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Region:
    """The elements of one chunk set: contiguous ``slices``, or one ``index`` array when not None.

    ``runs`` are the same elements as (start, length) runs, ``longest`` the longest run's length."""

    slices: tuple[slice, ...]
    index: np.ndarray | None
    size: int
    runs: tuple[tuple[int, int], ...] = ()
    longest: int = 0


class Transfer(NamedTuple):
    """One receive: ``dst`` takes ``region`` of ``src``'s start-of-step buffer and copies or reduces it.

    ``snapshot`` is set when another receive of the same step writes into the
    source region, so that the incoming data must be copied out before any
    receive of the step is applied.
    """

    dst: int
    src: int
    region: Region
    reduce: bool
    snapshot: bool


_REDUCE, _SNAPSHOT = 1, 2  # bits of `Moves.flags`


@dataclass(frozen=True, slots=True, eq=False)
class Moves:
    """The receives of one step, as arrays (a few bytes per receive, not an object each): receive i takes region
    ``region[i]`` (an index into `Plan.regions`) of rank ``src[i]`` into rank ``dst[i]``; ``flags[i]`` has bit 1
    for a reduce and bit 2 for a snapshot (`Transfer`)."""

    dst: np.ndarray
    src: np.ndarray
    region: np.ndarray
    flags: np.ndarray

    def __len__(self) -> int:
        return int(self.dst.size)


@dataclass(frozen=True, slots=True, eq=False)
class Batch:
    """Element runs of ``length`` that move together: run i from flat offset ``src[i]`` of the buffers to ``dst[i]``
    (flat offsets into the C-ordered ``(nranks, logical)`` array), copied or reduced.  ``snapshot``: some run's
    source is written in the same step, so the batch is read before any receive of the step lands."""

    src: np.ndarray
    dst: np.ndarray
    length: int
    reduce: bool
    snapshot: bool


@dataclass(frozen=True, slots=True, eq=False)
class Batched:
    """A step whose receives write disjoint elements: its ``batches``, and the receives ``rest`` (positions in the
    step's `Moves`, those with long runs) that move one by one."""

    batches: tuple[Batch, ...]
    rest: np.ndarray


@dataclass(frozen=True, slots=True, eq=False)
class Plan:
    """A schedule lowered to element ranges for one element count.

    ``moves`` holds the receives of every step that has some (``steps``: the same as `Transfer` s), over the
    chunk sets' ``regions``; ``batched[i]`` is those of ``moves[i]`` in batches, or None where they move receive
    by receive (`execute`)."""

    algorithm: str
    collective: Collective
    nranks: int
    nchunks: int
    root: int | None
    count: int
    logical: int
    offsets: np.ndarray  # element offsets of the chunks, length nchunks + 1
    regions: tuple[Region, ...]
    moves: tuple[Moves, ...]
    batched: tuple[Batched | None, ...]

    @property
    def shape(self) -> tuple[int, int]:
        """The shape of the buffers `execute` takes: (nranks, logical)."""
        return (self.nranks, self.logical)

    @property
    def steps(self) -> tuple[tuple[Transfer, ...], ...]:
        """The receives of every step that has some, as `Transfer` s."""
        return tuple(_transfers(moves, self.regions) for moves in self.moves)


def _transfers(moves: Moves, regions: tuple[Region, ...]) -> tuple[Transfer, ...]:
    items = zip(moves.dst.tolist(), moves.src.tolist(), moves.region.tolist(), moves.flags.tolist(), strict=True)
    return tuple(Transfer(d, s, regions[r], bool(f & _REDUCE), bool(f & _SNAPSHOT)) for d, s, r, f in items)


def _region(bits: int, offsets: np.ndarray) -> Region:
    runs: list[list[int]] = []
    for lo, hi in ChunkSet(bits).intervals():
        a, b = int(offsets[lo]), int(offsets[hi])
        if a == b:
            continue
        if runs and runs[-1][1] == a:
            runs[-1][1] = b
        else:
            runs.append([a, b])
    size = sum(b - a for a, b in runs)
    pieces = tuple((a, b - a) for a, b in runs)
    longest = max((n for _, n in pieces), default=0)
    if len(runs) > _MAX_SLICES and size < _MIN_RUN * len(runs):
        index = np.concatenate([np.arange(a, b, dtype=np.intp) for a, b in runs])
        return Region((), index, size, pieces, longest)
    return Region(tuple(slice(a, b) for a, b in runs), None, size, pieces, longest)


def plan(
    schedule: Schedule,
    count: int,
    *,
    checked: bool = False,
    on_progress: ProgressFn | None = None,
    offsets: np.ndarray | None = None,
) -> Plan:
    """Lower ``schedule`` to per-step element transfers for a ``count``-element collective.

    The transfers are the receives (a receive of rank r from q for chunks C
    takes chunks C of q's start-of-step buffer), but first `check_matching`
    checks that every step's sends and receives agree pair by pair: a send
    nobody receives, a receive nobody sends, or a rank that sends other chunks
    than its peer receives is a `MismatchError` (a ValueError), as it is an
    error on the MPI executors.  ``checked``: the caller has run
    `check_matching` already.  ``on_progress(done, total)``, when given, is
    called after each step.  ``offsets``: the chunks' element offsets of a call whose counts are given at run
    time (`collectives.counts_offsets`), which then replace ``count``.
    """
    check_layout(schedule)
    if not checked:
        check_matching(schedule)
    if offsets is None:
        logical = logical_of(schedule, count)
        offsets = collectives.element_offsets(
            schedule.collective, schedule.nranks, schedule.nchunks, count, schedule.chunk_weights
        )
    else:
        logical = int(offsets[-1])
    with no_gc():
        return _plan(schedule, count, offsets, logical, on_progress)


def _plan(schedule: Schedule, count: int, offsets: np.ndarray, logical: int, on_progress: ProgressFn | None) -> Plan:
    p, nchunks = schedule.nranks, schedule.nchunks
    sizes = np.diff(offsets)
    nonempty = sum(1 << int(c) for c in np.flatnonzero(sizes))
    beyond = 1 << nchunks  # chunk sets at least this large name a chunk past the last
    region_ids: dict[int, int] = {}
    regions: list[Region] = []
    shorts: list[bool] = []  # per region: its runs are short enough to move in batches
    all_moves: list[Moves] = []
    batched: list[Batched | None] = []
    recv_kind, send_kind, reduce_action, plain = OpKind.RECV, OpKind.SEND, Action.REDUCE, Op
    total = len(schedule.steps)
    for done, step in enumerate(schedule.steps, 1):
        dsts: list[int] = []
        srcs: list[int] = []
        chunk_sets: list[int] = []
        reduces: list[bool] = []
        written: dict[int, int] = {}
        overlapping = False
        for op in step.ops:
            rank, peer, bits = op.rank, op.peer, op.chunks.bits
            if not (0 <= rank < p and 0 <= peer < p):
                raise ValueError(f"{op.span}: step {step.index}: rank {rank} / peer {peer} out of range 0..{p - 1}")
            if bits >= beyond:
                raise ValueError(f"{op.span}: step {step.index}: chunk {op.chunks.max()} out of range 0..{nchunks - 1}")
            kind = op.kind
            coded = type(op) is not plain and op.codec is not None
            if kind is not recv_kind or coded:
                if coded or kind is not send_kind:
                    raise ValueError(
                        f"{op.span}: {schedule.algorithm} has compression points, which plans do not model; "
                        "run it with local.run"
                    )
                continue
            action = op.action
            if action is None:
                raise ValueError(f"{op.span}: step {step.index}: receive of rank {rank} has no action")
            bits &= nonempty
            if bits:
                dsts.append(rank)
                srcs.append(peer)
                chunk_sets.append(bits)
                reduces.append(action is reduce_action)
                old = written.get(rank, 0)
                overlapping = overlapping or (old & bits) != 0
                written[rank] = old | bits
        if dsts:
            ids, flags = [], []
            short = False  # some receive has runs short enough to move in a batch
            for src, bits, reduce in zip(srcs, chunk_sets, reduces, strict=True):
                rid = region_ids.get(bits)
                if rid is None:
                    rid = region_ids[bits] = len(regions)
                    regions.append(_region(bits, offsets))
                    shorts.append(regions[-1].longest <= BATCH_MAX_RUN)
                short = short or shorts[rid]
                ids.append(rid)
                flags.append((_REDUCE if reduce else 0) | (_SNAPSHOT if written.get(src, 0) & bits else 0))
            moves = Moves(
                np.array(dsts, dtype=np.int32), np.array(srcs, dtype=np.int32), np.array(ids, dtype=np.int32),
                np.array(flags, dtype=np.uint8),
            )  # fmt: skip
            all_moves.append(moves)
            batchable = short and not overlapping and len(dsts) >= BATCH_MIN
            batched.append(_batch(moves, regions, logical) if batchable else None)
        if on_progress is not None:
            on_progress(done, total)
    return Plan(
        algorithm=schedule.algorithm,
        collective=schedule.collective,
        nranks=p,
        nchunks=nchunks,
        root=schedule.root,
        count=count,
        logical=logical,
        offsets=offsets,
        regions=tuple(regions),
        moves=tuple(all_moves),
        batched=tuple(batched),
    )


def _batch(moves: Moves, regions: list[Region], logical: int) -> Batched | None:
    """The receives of a step that write disjoint elements, grouped into `Batch` es by run length and kind (None
    when no receive has runs short enough)."""
    groups: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
    rest = []
    items = zip(moves.dst.tolist(), moves.src.tolist(), moves.region.tolist(), moves.flags.tolist(), strict=True)
    for i, (dst, src, rid, flags) in enumerate(items):
        region = regions[rid]
        if region.longest > BATCH_MAX_RUN:
            rest.append(i)
            continue
        src_row, dst_row = src * logical, dst * logical
        for start, length in region.runs:
            group = groups.get((length, flags))
            if group is None:
                group = groups[(length, flags)] = ([], [])
            group[0].append(src_row + start)
            group[1].append(dst_row + start)
    if not groups:
        return None
    batches = []
    for (length, flags), (srcs, dsts) in groups.items():
        src, dst = np.array(srcs, dtype=np.intp), np.array(dsts, dtype=np.intp)
        rows = max(1, _BATCH_MAX_ELEMENTS // length)
        for at in range(0, len(srcs), rows):
            piece = slice(at, at + rows)
            batches.append(Batch(src[piece], dst[piece], length, bool(flags & _REDUCE), bool(flags & _SNAPSHOT)))
    return Batched(tuple(batches), np.array(rest, dtype=np.intp))


# --------------------------------------------------------------------------
# Execution
# --------------------------------------------------------------------------


def _read(row: np.ndarray, region: Region) -> np.ndarray | list[np.ndarray]:
    if region.index is not None:
        return row[region.index]
    return [row[s].copy() for s in region.slices]


def execute(plan: Plan, buffers: np.ndarray, op: str, *, on_progress: ProgressFn | None = None) -> None:
    """Run every step of ``plan`` on ``buffers`` (shape ``plan.shape``), in place; ``on_progress(done, total)``,
    when given, is called after each step."""
    ufunc = ufunc_of(op)
    if buffers.ndim != 2 or buffers.shape != plan.shape:
        raise ValueError(f"buffers have shape {buffers.shape}, the plan needs {plan.shape}")
    rows = list(buffers)
    flat = buffers.reshape(-1) if buffers.flags.c_contiguous else None
    total = len(plan.moves)
    with np.errstate(all="ignore"):
        for done, (moves, batch) in enumerate(zip(plan.moves, plan.batched, strict=True), 1):
            if batch is None or flat is None:
                _apply(moves, None, plan.regions, rows, ufunc)
            else:
                _apply_batched(moves, batch, plan.regions, flat, rows, ufunc)
            if on_progress is not None:
                on_progress(done, total)


def _apply(
    moves: Moves, only: np.ndarray | None, regions: tuple[Region, ...], rows: list[np.ndarray], ufunc: np.ufunc
) -> None:
    """The receives of a step (those at positions ``only``, or all), one by one: what a receive of the step
    overwrites is copied out before any lands."""
    dsts, srcs, ids, flags = moves.dst, moves.src, moves.region, moves.flags
    if only is not None:
        dsts, srcs, ids, flags = dsts[only], srcs[only], ids[only], flags[only]
    items = list(zip(dsts.tolist(), srcs.tolist(), ids.tolist(), flags.tolist(), strict=True))
    snaps = [_read(rows[s], regions[r]) if f & _SNAPSHOT else None for _, s, r, f in items]
    for (d, s, r, f), snap in zip(items, snaps, strict=True):
        dst, region = rows[d], regions[r]
        reduce = f & _REDUCE
        if region.index is not None:
            incoming = snap if snap is not None else rows[s][region.index]
            if reduce:
                dst[region.index] = ufunc(dst[region.index], incoming)
            else:
                dst[region.index] = incoming
            continue
        src = rows[s]
        for j, piece in enumerate(region.slices):
            data = snap[j] if snap is not None else src[piece]
            if reduce:
                view = dst[piece]
                ufunc(view, data, out=view)
            else:
                dst[piece] = data


def _apply_batched(
    moves: Moves, batch: Batched, regions: tuple[Region, ...], flat: np.ndarray, rows: list[np.ndarray],
    ufunc: np.ufunc,
) -> None:  # fmt: skip
    """A step whose receives write disjoint elements: the batches whose sources the step writes are read before
    anything lands; then the batches land, and the other receives one by one (whose snapshots are their own)."""
    early = [_gather(flat, b.src, b.length) if b.snapshot else None for b in batch.batches]
    for b, incoming in zip(batch.batches, early, strict=True):
        if incoming is None:
            incoming = _gather(flat, b.src, b.length)
        where = b.dst[:, None] + _OFFSETS[: b.length]
        if b.reduce:
            flat[where] = ufunc(flat[where], incoming)
        else:
            flat[where] = incoming
    if batch.rest.size:
        _apply(moves, batch.rest, regions, rows, ufunc)


def _gather(flat: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    return flat[starts[:, None] + _OFFSETS[:length]]
