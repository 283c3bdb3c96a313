"""The Schedule IR: the contract between every stage of collc.

A `Schedule` is one concrete instance of a `.coll` program (one set of parameter
values).  It is a list of global steps; each step holds the point-to-point
operations every rank performs in it.  Semantics of a step: every send reads
the rank's buffer as it was at the start of the step, and every receive lands
at its end.

Chunk ids are *logical*: the same id names the same piece of the vector on
both ends of a transfer.  Chunk sets are stored as Python integers used as
bitsets (bit ``c`` set means chunk ``c``), which keeps them immutable, hashable
and compact, and lets ops that carry the same set share one object.

This module imports nothing else from collc.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

# --------------------------------------------------------------------------
# Source spans
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Span:
    """A region of a source file, 1-based lines and columns (end inclusive-ish, as lark)."""

    file: str
    line: int
    column: int
    end_line: int
    end_column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


UNKNOWN_SPAN = Span("<unknown>", 0, 0, 0, 0)

# --------------------------------------------------------------------------
# Enumerations
# --------------------------------------------------------------------------


class Collective(str, Enum):
    ALLREDUCE = "allreduce"
    ALLGATHER = "allgather"
    REDUCE_SCATTER = "reduce_scatter"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    ALLTOALL = "alltoall"
    GATHER = "gather"
    SCATTER = "scatter"
    SCAN = "scan"
    EXSCAN = "exscan"
    BARRIER = "barrier"

    @property
    def has_root(self) -> bool:
        return self in (Collective.BROADCAST, Collective.REDUCE, Collective.GATHER, Collective.SCATTER)

    @property
    def rank_blocks(self) -> bool:
        """Whether each rank contributes or receives its own block of ``nchunks / p`` chunks."""
        return self in (
            Collective.ALLGATHER, Collective.REDUCE_SCATTER, Collective.GATHER, Collective.SCATTER, Collective.BARRIER
        )  # fmt: skip

    @property
    def prefix(self) -> int | None:
        """Scans: rank r must hold the reduction of ranks ``0 .. r + prefix - 1`` (1: inclusive, 0: exclusive,
        where rank 0 is exempt); None for every other collective."""
        return 1 if self is Collective.SCAN else 0 if self is Collective.EXSCAN else None

    @property
    def reduces(self) -> bool:
        return self in (
            Collective.ALLREDUCE, Collective.REDUCE_SCATTER, Collective.REDUCE, Collective.SCAN, Collective.EXSCAN
        )  # fmt: skip


class OpKind(str, Enum):
    SEND = "send"
    RECV = "recv"
    COMPRESS = "compress"  # local: the rank's slots become compressed with ``Op.codec``
    DECOMPRESS = "decompress"  # local: the rank's compressed slots become raw again

    @property
    def local(self) -> bool:
        """A local op touches only the rank's own buffer (its ``peer`` is the rank itself)."""
        return self is OpKind.COMPRESS or self is OpKind.DECOMPRESS


class Action(str, Enum):
    """What a receive does with the incoming data."""

    COPY = "copy"
    REDUCE = "reduce"


# --------------------------------------------------------------------------
# Chunk sets
# --------------------------------------------------------------------------

_BYTE_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")


@dataclass(frozen=True, slots=True)
class ChunkSet:
    """An immutable set of non-negative chunk ids, stored as a bitset."""

    bits: int = 0

    @staticmethod
    def of(ids: Iterable[int]) -> ChunkSet:
        bits = 0
        for i in ids:
            if i < 0:
                raise ValueError(f"negative chunk id {i}")
            bits |= 1 << i
        return ChunkSet(bits)

    @staticmethod
    def interval(lo: int, hi: int) -> ChunkSet:
        """Chunks ``lo, lo+1, ..., hi-1`` (empty when ``hi <= lo``)."""
        if hi <= lo:
            return ChunkSet(0)
        if lo < 0:
            raise ValueError(f"negative chunk id {lo}")
        return ChunkSet(((1 << (hi - lo)) - 1) << lo)

    def __len__(self) -> int:
        return self.bits.bit_count()

    def __bool__(self) -> bool:
        return self.bits != 0

    def __contains__(self, chunk: object) -> bool:
        return isinstance(chunk, int) and chunk >= 0 and (self.bits >> chunk) & 1 == 1

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids().tolist())

    def __or__(self, other: ChunkSet) -> ChunkSet:
        return ChunkSet(self.bits | other.bits)

    def __and__(self, other: ChunkSet) -> ChunkSet:
        return ChunkSet(self.bits & other.bits)

    def __sub__(self, other: ChunkSet) -> ChunkSet:
        return ChunkSet(self.bits & ~other.bits)

    def isdisjoint(self, other: ChunkSet) -> bool:
        return self.bits & other.bits == 0

    def issubset(self, other: ChunkSet) -> bool:
        return self.bits & ~other.bits == 0

    def max(self) -> int:
        """The largest id; -1 for the empty set."""
        return self.bits.bit_length() - 1

    def ids(self) -> np.ndarray:
        """The ids in ascending order as an int64 array."""
        if self.bits == 0:
            return np.zeros(0, dtype=np.int64)
        nbytes = (self.bits.bit_length() + 7) // 8
        raw = np.frombuffer(self.bits.to_bytes(nbytes, "little"), dtype=np.uint8)
        return np.flatnonzero(_BYTE_BITS[raw].reshape(-1)).astype(np.int64)

    def intervals(self) -> list[tuple[int, int]]:
        """Maximal runs ``[lo, hi)`` in ascending order."""
        ids = self.ids()
        if ids.size == 0:
            return []
        breaks = np.flatnonzero(np.diff(ids) != 1)
        starts = np.concatenate(([ids[0]], ids[breaks + 1]))
        ends = np.concatenate((ids[breaks], [ids[-1]])) + 1
        return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]

    def __str__(self) -> str:
        return format_id_set(self.intervals())


def format_id_set(runs: list[tuple[int, int]]) -> str:
    """``{0..3, 7}`` style text for runs ``[lo, hi)`` (``a..b`` inclusive here, for people)."""
    parts = [str(a) if b - a == 1 else f"{a}..{b - 1}" for a, b in runs]
    return "{" + ", ".join(parts) + "}"


def bits_to_runs(bits: int) -> list[tuple[int, int]]:
    return ChunkSet(bits).intervals()


# --------------------------------------------------------------------------
# Operations, steps, schedules
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of one rank in one step.

    ``kind`` SEND: ``rank`` sends ``chunks`` to ``peer``.
    ``kind`` RECV: ``rank`` receives ``chunks`` from ``peer`` and applies ``action``.
    ``kind`` COMPRESS / DECOMPRESS: local ops on ``rank``'s own slots (``peer == rank``).

    An op that names a codec is a `CodecOp`; ``codec`` is None on every other op
    (which keeps the ops of schedules without compression as small as they were).
    """

    rank: int
    kind: OpKind
    peer: int
    chunks: ChunkSet
    action: Action | None
    span: Span

    @property
    def codec(self) -> str | None:
        """The op's codec: None here, a canonical codec spec on a `CodecOp`."""
        return None


@dataclass(frozen=True, slots=True)
class CodecOp(Op):
    """An op with a codec, a canonical spec (``"ebq(eb=0.001)"``, `collc.codecs`): on a send or
    a receive, the message travels compressed with it (the receiver gets the decoded data);
    on a COMPRESS op, the codec the chunks are compressed with."""

    codec: str  # type: ignore[assignment]  # a field here, the base's None elsewhere


def make_op(
    rank: int, kind: OpKind, peer: int, chunks: ChunkSet, action: Action | None, span: Span, codec: str | None = None
) -> Op:
    """An `Op`, or a `CodecOp` when ``codec`` is given."""
    if codec is None:
        return Op(rank, kind, peer, chunks, action, span)
    return CodecOp(rank, kind, peer, chunks, action, span, codec)


@dataclass(frozen=True, slots=True)
class Step:
    """One global step.  ``lanes``, when not None, gives the lane of each op (``lanes[i]`` is the lane of
    ``ops[i]``, None for an op in no lane).  Lanes are dependencies: on a rank, an op in lane j depends only
    on the rank's ops of earlier steps in lane j or in no lane (and, through messages, on what those depend
    on); an op in no lane depends on all of the rank's earlier ops.  A lockstep schedule has no lanes."""

    index: int
    phase: str
    ops: tuple[Op, ...]
    lanes: tuple[int | None, ...] | None = None

    def lane(self, i: int) -> int | None:
        """The lane of ``ops[i]`` (None: no lane)."""
        return None if self.lanes is None else self.lanes[i]


ParamValue = int | tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Schedule:
    """One concrete, elaborated instance of a `.coll` program."""

    algorithm: str
    collective: Collective
    params: tuple[tuple[str, ParamValue], ...]
    nranks: int
    nchunks: int
    root: int | None
    steps: tuple[Step, ...]
    source: str
    span: Span  # the `algorithm` header
    codecs: tuple[tuple[str, str], ...] = ()  # the program's codec declarations: (name, canonical spec)
    chunk_weights: tuple[int, ...] | None = None  # each chunk's relative size (`chunks N weight(c) = ...`); None: equal

    def weighted(self) -> bool:
        """Whether the chunks have declared relative sizes (else they are as equal as possible)."""
        return self.chunk_weights is not None

    def param(self, name: str) -> ParamValue:
        for key, value in self.params:
            if key == name:
                return value
        raise KeyError(name)

    @property
    def param_dict(self) -> dict[str, ParamValue]:
        return dict(self.params)

    def ops(self) -> Iterator[tuple[Step, Op]]:
        for step in self.steps:
            for op in step.ops:
                yield step, op

    def has_lanes(self) -> bool:
        """Whether some op is in a lane (steps of different lanes may overlap)."""
        return any(step.lanes is not None for step in self.steps)

    def compresses(self) -> bool:
        """Whether some op compresses or decompresses data (a local op, or a send or receive with a codec)."""
        local = (OpKind.COMPRESS, OpKind.DECOMPRESS)
        return any(op.codec is not None or op.kind in local for step in self.steps for op in step.ops)

    @property
    def phases(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for step in self.steps:
            seen.setdefault(step.phase, None)
        return tuple(seen)


def params_text(params: tuple[tuple[str, ParamValue], ...] | dict[str, ParamValue]) -> str:
    """``p=16 dims=4x4``: parameter values as people write them."""
    items = params.items() if isinstance(params, dict) else params
    return " ".join(f"{name}={'x'.join(map(str, v)) if isinstance(v, tuple) else v}" for name, v in items)


# --------------------------------------------------------------------------
# The stable JSON form (documented in docs/ir-json.md)
# --------------------------------------------------------------------------

IR_JSON_VERSION = 3
"""The newest version written.  Version 2 added compression points (the ``compress`` and
``decompress`` kinds and ``codec``), version 3 chunk weights (``chunk_weights``).  A schedule
is written with the oldest version that holds it (1 without either, 2 with compression points
only), exactly as before, so that older readers keep reading what they can read right."""


def _param_to_json(value: ParamValue) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _param_from_json(value: Any) -> ParamValue:
    return tuple(int(v) for v in value) if isinstance(value, list) else int(value)


def schedule_to_json(schedule: Schedule) -> dict[str, Any]:
    """The IR as plain JSON data: the contract with tools and tests."""
    steps = []
    for step in schedule.steps:
        ops = []
        for i, op in enumerate(step.ops):
            entry: dict[str, Any] = {
                "rank": op.rank,
                "kind": op.kind.value,
                "peer": op.peer,
                "chunks": op.chunks.ids().tolist(),
            }
            if op.action is not None:
                entry["action"] = op.action.value
            if op.codec is not None:
                entry["codec"] = op.codec
            if step.lanes is not None and step.lanes[i] is not None:
                entry["lane"] = step.lanes[i]
            entry["line"] = op.span.line
            entry["column"] = op.span.column
            if op.span.file != schedule.source:
                entry["file"] = op.span.file
            ops.append(entry)
        steps.append({"index": step.index, "phase": step.phase, "ops": ops})
    out: dict[str, Any] = {
        "version": 3 if schedule.weighted() else 2 if schedule.compresses() else 1,
        "algorithm": schedule.algorithm,
        "collective": schedule.collective.value,
        "source": schedule.source,
        "params": {k: _param_to_json(v) for k, v in schedule.params},
        "nranks": schedule.nranks,
        "nchunks": schedule.nchunks,
        "root": schedule.root,
    }
    if schedule.chunk_weights is not None:
        out["chunk_weights"] = list(schedule.chunk_weights)
    if schedule.codecs:
        out["codecs"] = dict(schedule.codecs)
    out["steps"] = steps
    return out


def schedule_from_json(data: dict[str, Any]) -> Schedule:
    """Inverse of `schedule_to_json` (spans keep only file, line and column)."""
    version = data.get("version", 1)
    if version not in range(1, IR_JSON_VERSION + 1):
        raise ValueError(f"unsupported IR JSON version {version!r} (this collc reads 1 to {IR_JSON_VERSION})")
    source = str(data.get("source", "<json>"))
    steps = []
    for step in data["steps"]:
        ops = []
        lanes: list[int | None] = []
        for op in step["ops"]:
            lanes.append(int(op["lane"]) if op.get("lane") is not None else None)
            line = int(op.get("line", 0))
            column = int(op.get("column", 0))
            action = op.get("action")
            codec = op.get("codec")
            ops.append(
                make_op(
                    rank=int(op["rank"]),
                    kind=OpKind(op["kind"]),
                    peer=int(op.get("peer", op["rank"])),
                    chunks=ChunkSet.of(int(c) for c in op["chunks"]),
                    action=Action(action) if action is not None else None,
                    span=Span(str(op.get("file", source)), line, column, line, column),
                    codec=str(codec) if codec is not None else None,
                )
            )
        has_lanes = any(lane is not None for lane in lanes)
        steps.append(
            Step(
                index=int(step["index"]),
                phase=str(step["phase"]),
                ops=tuple(ops),
                lanes=tuple(lanes) if has_lanes else None,
            )
        )
    root = data.get("root")
    weights = data.get("chunk_weights")
    if weights is not None and (
        not isinstance(weights, list)
        or len(weights) != int(data["nchunks"])
        or any(type(w) is not int or w < 1 for w in weights)
        or sum(weights) > 1 << 32
    ):
        raise ValueError("chunk_weights must list one int >= 1 per chunk, adding up to at most 2^32")
    return Schedule(
        algorithm=str(data["algorithm"]),
        collective=Collective(data["collective"]),
        params=tuple((str(k), _param_from_json(v)) for k, v in data["params"].items()),
        nranks=int(data["nranks"]),
        nchunks=int(data["nchunks"]),
        root=int(root) if root is not None else None,
        steps=tuple(steps),
        source=source,
        span=Span(source, 1, 1, 1, 1),
        codecs=tuple((str(k), str(v)) for k, v in data.get("codecs", {}).items()),
        chunk_weights=tuple(int(w) for w in weights) if weights is not None else None,
    )
