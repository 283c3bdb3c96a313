"""The history of one chunk through a schedule, tracked exactly (``collc check --trace CHUNK``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collc.collectives import EVERY, chunk_origin
from collc.ir import Action, OpKind, Schedule, Span, format_id_set

MAX_TRACE_RANKS = 8192  # a p x p count matrix of int32


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """Rank ``rank`` received ``chunk`` from ``peer`` at ``step``; contributions before and after."""

    step: int
    phase: str
    rank: int
    peer: int
    action: str
    before: str
    after: str
    span: Span


def describe(counts: np.ndarray) -> str:
    """``{0..7}``, ``{}`` or ``{0..7} (x2: {3})`` for a vector of counts per origin rank."""
    held = np.flatnonzero(counts > 0)
    text = _runs(held)
    twice = np.flatnonzero(counts > 1)
    return f"{text} (x2+: {_runs(twice)})" if twice.size else text


def _runs(ids: np.ndarray) -> str:
    if ids.size == 0:
        return "{}"
    breaks = np.flatnonzero(np.diff(ids) != 1)
    starts = np.concatenate(([ids[0]], ids[breaks + 1]))
    ends = np.concatenate((ids[breaks], [ids[-1]])) + 1
    return format_id_set([(int(a), int(b)) for a, b in zip(starts, ends, strict=True)])


def trace_chunk(schedule: Schedule, chunk: int) -> tuple[list[TraceEvent], list[str]]:
    """Every receive of ``chunk`` in order, and every rank's contributions at the end."""
    p = schedule.nranks
    if not 0 <= chunk < schedule.nchunks:
        raise ValueError(f"chunk {chunk} is out of range 0..{schedule.nchunks - 1}")
    if p > MAX_TRACE_RANKS:
        raise ValueError(f"--trace supports up to {MAX_TRACE_RANKS} ranks, this schedule has {p}")
    origin = int(chunk_origin(schedule.collective, p, schedule.nchunks, schedule.root)[chunk])
    counts = np.zeros((p, p), dtype=np.int32)
    if origin == EVERY:
        counts[np.arange(p), np.arange(p)] = 1
    else:
        counts[origin, origin] = 1
    events: list[TraceEvent] = []
    for step in schedule.steps:
        recvs = [
            op
            for op in step.ops
            if op.kind is OpKind.RECV and chunk in op.chunks and 0 <= op.peer < p and 0 <= op.rank < p
        ]
        if not recvs:
            continue
        incoming = [counts[op.peer].copy() for op in recvs]  # every send reads the start of the step
        for op, data in zip(recvs, incoming, strict=True):
            before = describe(counts[op.rank])
            if op.action is Action.REDUCE:
                counts[op.rank] += data
            else:
                counts[op.rank] = data
            action = op.action.value if op.action is not None else "copy"
            events.append(
                TraceEvent(step.index, step.phase, op.rank, op.peer, action, before, describe(counts[op.rank]), op.span)
            )
    return events, [describe(counts[r]) for r in range(p)]
