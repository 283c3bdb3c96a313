"""The chunks a check keeps state for, and the collectives' layout for any chunks (`collc.verify.check`).

A schedule may name few of its chunks: a one-step program that moves 2 chunks of 2^26.  A chunk no operation
names keeps its initial contents to the end, so whether it meets the postcondition follows from the layout
alone (who holds it first, who must hold what at the end): the checker keeps fingerprints for the chunks the
operations name (`touched`) and decides the others from `layout`, a block of chunks at a time, without
arrays as long as the vector.
"""

from __future__ import annotations

import numpy as np

from collc.collectives import EVERY, chunks_per_rank
from collc.ir import Collective, Schedule
from collc.verify.findings import bits_ids

__all__ = ["fails_untouched", "layout", "move_runs", "touched"]

_MIN_SLOTS = 1 << 20  # ranks x chunks below which a dense state costs too little to be worth avoiding
_OPS_PER_SLOT = 1 / 16  # ops per slot above which the schedule names most chunks anyway (not looked at)


def layout(collective: Collective, p: int, n: int, root: int | None, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``chunk_origin(...)[ids]`` and ``chunk_dest(...)[ids]`` (`collc.collectives`) for the chunks ``ids``."""
    k = chunks_per_rank(collective, p, n)
    ids = np.asarray(ids, dtype=np.int64)
    every = np.full(ids.shape, EVERY, dtype=np.int64)
    if collective in (Collective.ALLGATHER, Collective.GATHER, Collective.BARRIER):
        origin = ids // k
    elif collective is Collective.ALLTOALL:
        origin = ids // (p * k)
    elif collective in (Collective.BROADCAST, Collective.SCATTER):
        origin = np.full(ids.shape, _root(root), dtype=np.int64)
    else:
        origin = every
    if collective in (Collective.REDUCE_SCATTER, Collective.SCATTER):
        dest = ids // k
    elif collective is Collective.ALLTOALL:
        dest = (ids // k) % p
    elif collective in (Collective.REDUCE, Collective.GATHER):
        dest = np.full(ids.shape, _root(root), dtype=np.int64)
    else:
        dest = every
    return origin, dest


def _root(root: int | None) -> int:
    if root is None:
        raise ValueError("this collective needs a root")
    return root


def fails_untouched(p: int, origin: np.ndarray, dest: np.ndarray) -> np.ndarray:
    """Which chunks fail the postcondition when no operation touches them: each rank holds what it held
    first, which is right only for a single rank, or where the one rank that must hold a chunk is its origin."""
    if p == 1:
        return np.zeros(origin.shape, dtype=bool)
    return ~((origin != EVERY) & (dest == origin))


def touched(schedule: Schedule) -> np.ndarray | None:
    """The chunks (sorted ids, in 0 .. n-1) some operation of ``schedule`` names, when they are few enough to
    be worth keeping state for them alone (at most a quarter of the chunks); None otherwise, or when looking
    would cost too much (a large schedule names most chunks anyway)."""
    p, n = schedule.nranks, schedule.nchunks
    if p * n < _MIN_SLOTS:
        return None
    if sum(len(st.ops) for st in schedule.steps) > p * n * _OPS_PER_SLOT:
        return None
    limit = n // 4
    mask = (1 << n) - 1
    seen: set[int] = set()
    parts: list[np.ndarray] = []
    size = 0
    for st in schedule.steps:
        for op in st.ops:
            key = id(op.chunks)
            if key in seen:
                continue
            seen.add(key)
            ids = bits_ids(op.chunks.bits & mask)
            size += ids.size
            if size > limit:
                return None
            parts.append(ids)
    if not parts:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.concatenate(parts))


_RUN_ELEMENTS = 64  # chunks per message from which slices beat index arrays
_COLUMN_BLOCK = 1 << 20  # columns moved at once


def move_runs(
    segs: tuple[list[tuple[int, int, int]], ...],
    state: np.ndarray,
    count: np.ndarray | None,
    held: np.ndarray | None,
    cols: np.ndarray | None,
) -> bool:
    """Apply one step's messages (``segs``: copies, reduces, sends nobody receives; each (src, dst, chunk
    bits)) with slices of the [rank, column] arrays, when every message is one run of at least
    `_RUN_ELEMENTS` chunks on average; False, with nothing changed, otherwise, or when some source or reduce
    target holds nothing (the caller's index arrays then find and report it).  Every source is read before
    any target is written; copies land first, then reductions, one message after another (so a slot reduced
    twice gets both)."""
    runs: list[list[tuple[int, int, int, int]]] = [[], [], []]  # per kind: (src, dst, first column, width)
    total = 0
    for kind, group in enumerate(segs):
        for src, dst, bits in group:
            low = bits & -bits
            if (bits + low) & bits:
                return False  # not one run
            lo, width = low.bit_length() - 1, bits.bit_length() - low.bit_length() + 1
            at = lo if cols is None else int(np.searchsorted(cols, lo))  # a run's columns are consecutive
            runs[kind].append((src, dst, at, width))
            total += width
    if total < _RUN_ELEMENTS * sum(len(r) for r in runs):
        return False
    if held is not None:
        if not all(held[src, at : at + width].all() for group in runs for src, _, at, width in group):
            return False
        if not all(held[dst, at : at + width].all() for _, dst, at, width in runs[1]):
            return False
    moved = runs[0] + runs[1]
    copies = len(runs[0])
    # a message moves each chunk between the same columns of two ranks: the columns are independent, and a
    # block of them at a time bounds the copies of the sources (read before any target is written)
    end = max(at + width for _, _, at, width in moved) if moved else 0
    for x in range(0, end, _COLUMN_BLOCK):
        y = x + _COLUMN_BLOCK
        parts = [(i, max(at, x), min(at + width, y)) for i, (_, _, at, width) in enumerate(moved)]
        parts = [(i, a, b) for i, a, b in parts if a < b]
        for values in (state, count):
            if values is None:
                continue
            incoming = [values[moved[i][0], a:b].copy() for i, a, b in parts]
            for (i, a, b), data in zip(parts, incoming, strict=True):
                if i < copies:
                    values[moved[i][1], a:b] = data
                else:
                    values[moved[i][1], a:b] += data
            del incoming
    if held is not None:
        for _, dst, at, width in runs[0]:
            held[dst, at : at + width] = True
    return True
