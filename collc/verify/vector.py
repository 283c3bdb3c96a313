"""Checking one instance from the program's symbolic model: each step once, with the ranks as numpy arrays.

The per-op checker (`collc.verify.check`) needs the elaborated schedule, one Python object per operation:
ring allreduce at p = 16384 has 1.07G of them.  For a program `collc.verify.symbolic` can express, a step
is a handful of formulas in ``rank``; this module evaluates them for all ranks at once and runs the same
checks on the resulting arrays: peers and chunks in range, every send matched by a receive of the same
chunks and every receive by a send, the 64-bit fingerprint of every slot's contributions (the same
fingerprint scheme as the per-op checker), the postcondition, and the same statistics.

It only ever says "correct": any step it cannot take as arrays (chunk ranges of different widths, the same
chunk sent twice to one peer, a send of data the slot does not hold) and any instance it finds wrong return
None, and the caller runs the per-op checker, whose report names the problem.  Before it checks an
instance it elaborates a few of its ranks (0, 1, p/2, p-1) with the elaborator, which also
runs every check of the instance's parameters, and compares their operations with the model's, step by
step; `prepare` compares the model with whole elaborated schedules for p up to 10.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

from collc.diagnostics import CollError
from collc.elaborate import MAX_SLOTS, MAX_STEPS, elaborate
from collc.frontend.program import Program
from collc.ir import Collective, ParamValue, Schedule
from collc.verify.allp import sample_sizes
from collc.verify.check import CheckReport, Stats, traffic_stats
from collc.verify.fast import count_dtype
from collc.verify.symbolic import Model, Refusal, evaluate, evaluate_array, extract, same_steps

__all__ = ["check_model", "prepare"]

_PREPARE_UPTO = 10
_BLOCK_ELEMENTS = 1 << 20  # (iteration, rank) pairs whose formulas are evaluated at once


def prepare(program: Program, values: Mapping[str, ParamValue]) -> Model | None:
    """The symbolic model of ``program`` (other parameters at ``values``) if it has one that equals the
    elaborated schedules of every allowed p up to 10; None otherwise."""
    if program.hierarchy is not None or not all(isinstance(v, int) for v in values.values()):
        return None
    try:
        model = extract(program, {k: int(v) for k, v in values.items()})  # type: ignore[arg-type]
    except Refusal:
        return None
    if any(op.lane is not None for loop in model.loops for op in loop.ops):
        return None  # steps that may overlap: their races are the per-op checker's (`collc.verify.races`)
    for p in sample_sizes(model, _PREPARE_UPTO):
        try:
            schedule = elaborate(program, {**values, "p": p})
        except CollError:
            return None
        if same_steps(model, schedule) is not None:
            return None
    return model


def _spot_ranks(p: int) -> list[int]:
    return sorted({r for r in (0, 1, p // 2, p - 1) if 0 <= r < p})


def _ints(t: Any, env: dict[str, Any], shape: tuple[int, int]) -> np.ndarray:
    return np.broadcast_to(np.asarray(evaluate_array(t, env, strict=True), dtype=np.int64), shape)


def _chunk_columns(chunks: Any, env: dict[str, Any], shape: tuple[int, int]) -> list[np.ndarray] | None:
    """The chunk set of every (iteration, rank) as columns of that shape (None: ranges of unequal widths, sets by
    comprehension)."""
    if chunks[0] == "where":
        return None
    if chunks[0] == "elts":
        return [_ints(t, env, shape) for t in chunks[1]]
    lo = _ints(chunks[1], env, shape)
    hi = _ints(chunks[2], env, shape)
    width = hi - lo
    first = int(width.flat[0]) if width.size else 0
    if width.size and not (width == first).all():
        return None
    return [lo + d for d in range(max(first, 0))]


def check_model(
    program: Program, model: Model, params: Mapping[str, ParamValue], max_slots: int = MAX_SLOTS
) -> tuple[Schedule, CheckReport] | None:
    """Check the instance ``params`` from ``model``: the partly elaborated schedule (a few ranks' steps, for
    its header) and a correct report, or None when the per-op checker must decide.  An instance of more than
    ``max_slots`` (rank, chunk) slots is left to the others; a caller that sized the instance and found that
    its state fits (`collc.verify.budget`) may raise it past the per-op checker's `MAX_SLOTS`."""
    p = params.get("p")
    if not isinstance(p, int) or p < 1:
        return None
    spot = _spot_ranks(p)
    try:
        header = elaborate(program, params, ranks=spot, max_slots=max_slots)
    except CollError:
        return None
    if same_steps(model, header, spot) is not None:
        return None
    n = header.nchunks
    if p * p * n >= 1 << 62:
        return None
    if sum(evaluate(loop.count, {"p": p}) for loop in model.loops) > MAX_STEPS:
        return None  # the elaborator stops there: the per-op path says so
    try:
        stats = _run(model, header, p, n)
    except Refusal:
        return None
    if stats is None:
        return None
    report = CheckReport(
        algorithm=header.algorithm, params=tuple(header.params), nranks=p, ok=True, findings=(), stats=stats
    )
    return header, report


def _initial(
    schedule: Schedule, p: int, n: int, h: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray]:
    """Fingerprints, held flags (None: every slot holds data throughout), counts of contributions (None until
    a reduce: a slot then holds one contribution or none, as its flag says) and each chunk's origin (-1: every
    rank) before the first step."""
    col = schedule.collective
    fp = np.zeros((p, n), dtype=np.uint64)
    if col in (Collective.ALLREDUCE, Collective.REDUCE_SCATTER, Collective.REDUCE):
        fp[:] = h[:, None]
        return fp, None, np.ones((p, n), dtype=count_dtype(p)), np.full(n, -1, dtype=np.int64)
    held = np.zeros((p, n), dtype=bool)
    if col in (Collective.ALLGATHER, Collective.GATHER, Collective.BARRIER):
        origin = np.arange(n, dtype=np.int64) // (n // p)
    elif col in (Collective.BROADCAST, Collective.SCATTER) and schedule.root is not None:
        origin = np.full(n, schedule.root, dtype=np.int64)
    else:
        raise Refusal(f"the {col.value} contract", None)
    cols = np.arange(n)
    fp[origin, cols] = h[origin]
    held[origin, cols] = True
    return fp, held, None, origin


def _postcondition(
    schedule: Schedule,
    fp: np.ndarray,
    held: np.ndarray | None,
    count: np.ndarray | None,
    h: np.ndarray,
    origin: np.ndarray,
) -> bool:
    """Every slot the collective requires holds its data, each contribution once (the fingerprint and the
    count of contributions): checked a block of ranks at a time (no copy of the whole state)."""
    p, n = fp.shape
    col = schedule.collective
    total = np.add.reduce(h, dtype=np.uint64)
    reduced = bool((origin < 0).all())
    expected = np.full(n, total, dtype=np.uint64) if reduced else h[origin]
    want = p if reduced else 1  # contributions per slot: a count of at least one also says "held"

    def holds(index: Any, exp: np.ndarray) -> bool:
        if not (fp[index] == exp).all():
            return False
        if count is not None:
            return bool((count[index] == want).all())
        return held is not None and bool(held[index].all())  # no reduce ran: one contribution where held

    unit = n // p if col in (Collective.REDUCE_SCATTER, Collective.SCATTER) else 0
    block = max(1, _BLOCK_ELEMENTS // max(n, 1))
    for a in range(0, p, block):
        b = min(p, a + block)
        if col in (Collective.REDUCE_SCATTER, Collective.SCATTER):
            rows = np.arange(a, b)
            cols = rows[:, None] * unit + np.arange(unit)[None, :]
            ok = holds((rows[:, None], cols), expected[cols])
        elif col in (Collective.REDUCE, Collective.GATHER):
            root = schedule.root or 0
            ok = not a <= root < b or holds(root, expected)
        else:
            ok = holds(slice(a, b), expected[None, :])
        if not ok:
            return False
    return True


def _run(model: Model, schedule: Schedule, p: int, n: int) -> Stats | None:
    h = np.random.default_rng().integers(0, 1 << 63, size=p, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    fp, held, count, origin = _initial(schedule, p, n, h)
    ranks = np.arange(p, dtype=np.int64)
    sent = np.zeros(p, dtype=np.int64)
    received = np.zeros(p, dtype=np.int64)
    steps = messages = temp = 0
    fan_out_steps: list[int] = []
    fan_in_steps: list[int] = []
    log2p = max(p.bit_length() - 1, 0)
    for _guard, value in model.lets:  # values the elaborator computes (where the guard holds): must not fail
        evaluate_array(value, {"p": p, "rank": ranks, "L": log2p}, strict=True)
    for loop in model.loops:
        iterations = evaluate(loop.count, {"p": p})
        if count is None and held is not None and any(op.kind != "send" and op.action == "reduce" for op in loop.ops):
            count = held.astype(count_dtype(p))  # no reduce so far: one contribution where held, else none
        most = max(1, ((1 << 62) // (p * p * n)) - 1)  # steps of a block whose message keys fit in 63 bits
        block = 1  # the first step alone: its chunks per rank size the blocks after it
        b0 = 0
        while b0 < iterations:
            it = np.arange(b0, min(iterations, b0 + block), dtype=np.int64)[:, None]
            env: dict[str, Any] = {"p": p, "i": it, "rank": ranks[None, :], "L": log2p}
            shape = (it.shape[0], p)
            for _guard, value in loop.lets:  # values the elaborator computes: they must not fail
                evaluate_array(value, env, strict=True)
            evaluated = []
            for op in loop.ops:
                guard = np.broadcast_to(np.asarray(evaluate_array(op.guard, env, strict=True), dtype=bool), shape)
                peer = _ints(op.peer, env, shape)
                columns = _chunk_columns(op.chunks, env, shape)
                if columns is None:
                    return None
                evaluated.append((op, guard, peer, columns))
            b0 += it.shape[0]
            width = max(1, sum(len(columns) for *_, columns in evaluated))  # chunks per (step, rank), at most
            block = max(1, min(most, _BLOCK_ELEMENTS // (p * width)))
            done = _block(evaluated, it.shape[0], fp, held, count, p, n)
            if done is None:
                return None
            msgs, outs, ins, temps, sent_add, received_add = done
            steps += len(msgs)
            messages += sum(msgs)
            fan_out_steps += outs
            fan_in_steps += ins
            temp += sum(temps)
            sent += sent_add
            received += received_add
    if not _postcondition(schedule, fp, held, count, h, origin):
        return None
    return traffic_stats(
        schedule.collective,
        p,
        n,
        steps=steps,
        messages=messages,
        most_sent=int(sent.max(initial=0)),
        most_received=int(received.max(initial=0)),
        fan_out_steps=fan_out_steps,
        fan_in_steps=fan_in_steps,
        temp_buffer_steps=temp,
    )


def _block(
    evaluated: list[tuple[Any, np.ndarray, np.ndarray, list[np.ndarray]]],
    nrows: int,
    fp: np.ndarray,
    held: np.ndarray | None,
    count: np.ndarray | None,
    p: int,
    n: int,
) -> tuple[list[int], list[int], list[int], list[int], np.ndarray, np.ndarray] | None:
    """Check and apply ``nrows`` consecutive steps whose ops are evaluated as [row, rank] arrays: per step
    with ops, its messages, fan-out, fan-in and temporary buffers, and the chunks each rank sent and
    received; None when the per-op checker must look at them.  ``held`` (None: every slot holds data
    throughout) and ``count`` (None while nothing is reduced: given for steps that reduce) as `_initial`."""
    cols_s: list[list[np.ndarray]] = [[], [], [], []]  # row, src, dst, chunk
    cols_r: list[list[np.ndarray]] = [[], [], [], [], []]  # row, dst, src, chunk, reduce
    for op, guard, peer, columns in evaluated:
        rows, me = np.nonzero(guard)
        if rows.size == 0:
            continue
        to = peer[rows, me]
        for col in columns:
            chunk = col[rows, me]
            if op.kind == "send":
                for acc, x in zip(cols_s, (rows, me, to, chunk), strict=True):
                    acc.append(x)
            else:
                for acc, x in zip(
                    cols_r, (rows, me, to, chunk, np.full(rows.size, op.action == "reduce")), strict=True
                ):
                    acc.append(x)
    empty = np.zeros(0, dtype=np.int64)
    s_row, s_src, s_dst, s_chunk = (_joined(c) for c in cols_s)
    r_row, r_dst, r_src, r_chunk = (_joined(c) for c in cols_r[:4])
    r_reduce = np.concatenate(cols_r[4]) if cols_r[4] else np.zeros(0, dtype=bool)
    for peer_, me_, chunk_ in ((s_dst, s_src, s_chunk), (r_src, r_dst, r_chunk)):
        if ((peer_ < 0) | (peer_ >= p) | (peer_ == me_) | (chunk_ < 0) | (chunk_ >= n)).any():
            return None
    s_key = np.sort(((s_row * p + s_src) * p + s_dst) * n + s_chunk)
    r_key = np.sort(((r_row * p + r_src) * p + r_dst) * n + r_chunk)
    if s_key.size != r_key.size or not np.array_equal(s_key, r_key):
        return None  # unmatched
    if _has_duplicates(s_key, presorted=True):
        return None  # a chunk sent twice to one peer: merged by the per-op checker
    in_slot = r_row * p + r_dst  # (row, receiver)
    one_in = in_slot.size == 0 or int(np.bincount(in_slot).max()) <= 1  # at most one chunk into a rank per step
    if not one_in and _has_duplicates(in_slot * n + r_chunk):
        return None  # two receives into one slot in one step: from here on, every slot is written once at most
    # the data, step by step
    order = np.argsort(r_row, kind="stable")
    bounds = np.searchsorted(r_row[order], np.arange(nrows + 1)).tolist()
    spans = [(a, b) for a, b in itertools.pairwise(bounds) if a != b]
    src_slot = (r_src * n + r_chunk)[order]
    dst_slot = (r_dst * n + r_chunk)[order]
    red_sorted = r_reduce[order]
    flat = fp.reshape(-1)
    held_flat = None if held is None else held.reshape(-1)
    count_flat = None if count is None else count.reshape(-1)
    moved = [a for a in (flat, count_flat) if a is not None]  # what a message carries: fingerprint, count
    if not red_sorted.any():  # copies only
        for a, b in spans:
            src = src_slot[a:b]
            if held_flat is not None and not held_flat[src].all():
                return None
            dst = dst_slot[a:b]
            for values in moved:
                values[dst] = values[src]
            if held_flat is not None:
                held_flat[dst] = True
    elif red_sorted.all():  # reductions only
        assert count_flat is not None
        for a, b in spans:
            src, dst = src_slot[a:b], dst_slot[a:b]
            if held_flat is not None and not (held_flat[src].all() and held_flat[dst].all()):
                return None
            for values in moved:
                values[dst] += values[src]
    else:
        assert count_flat is not None
        for a, b in spans:
            src, dst, red = src_slot[a:b], dst_slot[a:b], red_sorted[a:b]
            if held_flat is not None and not held_flat[src].all():
                return None
            cp = ~red
            dst_c, dst_r = dst[cp], dst[red]
            if held_flat is not None:
                held_flat[dst_c] = True
                if not held_flat[dst_r].all():
                    return None  # a reduction into a slot without data
            for values in moved:
                incoming = values[src]  # every source read before any target is written
                values[dst_c] = incoming[cp]
                values[dst_r] += incoming[red]
    # statistics per step
    active = (np.bincount(s_row, minlength=nrows) + np.bincount(r_row, minlength=nrows)) > 0
    pairs = _distinct(s_key // n)  # (row, src, dst)
    pair_row = pairs // (p * p)
    msgs = np.bincount(pair_row, minlength=nrows)
    fan_out = np.bincount(pairs // p, minlength=nrows * p).reshape(nrows, p).max(axis=1)
    fan_in = np.bincount(pair_row * p + pairs % p, minlength=nrows * p).reshape(nrows, p).max(axis=1)
    out_slot = s_row * p + s_src
    if one_in and (out_slot.size == 0 or int(np.bincount(out_slot).max()) <= 1):  # one chunk each way at most
        out_chunk = np.full(nrows * p, -1, dtype=np.int64)
        in_chunk = np.full(nrows * p, -2, dtype=np.int64)
        out_chunk[out_slot], in_chunk[in_slot] = s_chunk, r_chunk
        busy = np.nonzero(out_chunk == in_chunk)[0]  # (row, rank) pairs that receive a chunk they also send
    else:
        out_keys = np.sort(out_slot * n + s_chunk)
        in_keys = np.sort(in_slot * n + r_chunk)
        at = np.minimum(np.searchsorted(out_keys, in_keys), max(out_keys.size - 1, 0))
        both = in_keys[out_keys[at] == in_keys] if out_keys.size else empty
        busy = _distinct(both // n)
    temps = np.bincount(busy // p, minlength=nrows)
    rows = np.nonzero(active)[0]
    return (
        msgs[rows].tolist(),
        fan_out[rows].tolist(),
        fan_in[rows].tolist(),
        temps[rows].tolist(),
        np.bincount(s_src, minlength=p),
        np.bincount(r_dst, minlength=p),
    )


def _has_duplicates(a: np.ndarray, presorted: bool = False) -> bool:
    if a.size < 2:
        return False
    if not presorted:
        a = np.sort(a)
    return bool((a[1:] == a[:-1]).any())


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate(parts).astype(np.int64, copy=False)


def _distinct(a: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted array."""
    if a.size < 2:
        return a
    return a[np.concatenate(([True], a[1:] != a[:-1]))]
