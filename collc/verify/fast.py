"""The vectorised step of the fingerprint pass, for regular steps.

Most steps of most schedules are *regular*: plain sends and receives between
valid ranks, every send matched by exactly one receive of the same chunk set
(and the other way round), every receive a copy or a reduce, no slot written
twice.  Such a step produces no finding, and its effect on the fingerprints
does not depend on the order of its ops, so it can be applied with a few numpy
calls over arrays of all its messages instead of a Python loop over its ops.

`Regular.plan` turns a step into a `Plan` (the messages, sorted by (src, dst),
with their chunk sets) or returns None when the step is not regular; the
caller then runs the exact per-op code, which gives every finding.  A plan
whose data flow would read or reduce into a slot that holds nothing is also
refused (`Regular.apply` returns False before changing anything), so findings
always come from the exact code.

Beside its fingerprint a slot may carry a count of its contributions (`count_dtype`): the fingerprint
is a sum modulo 2^64, so a slot that holds every contribution 2^64 + 1 times has the right one; the
count, which cannot wrap around, tells it apart.  A reduce adds counts, a copy copies them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter

import numpy as np

from collc.ir import Action, ChunkSet, Op, OpKind

_rank, _peer, _kind = attrgetter("rank"), attrgetter("peer"), attrgetter("kind")
_action, _chunks = attrgetter("action"), attrgetter("chunks")
_OP_ONLY = {Op}
_KIND = {OpKind.SEND: 0, OpKind.RECV: 1, OpKind.COMPRESS: 2, OpKind.DECOMPRESS: 3}
_ACTION = {None: 0, Action.COPY: 1, Action.REDUCE: 2}


@dataclass(slots=True)
class Plan:
    """The messages of a regular step, sorted by (src, dst); per message its chunk set and action."""

    src: np.ndarray  # int64
    dst: np.ndarray
    reduce: np.ndarray  # bool
    sets: np.ndarray  # int64 indices into `Regular.objs`
    count: np.ndarray  # chunks per message
    fan_out: int
    fan_in: int


class _Sets:
    """The chunk sets seen so far (by object identity): count, first and last chunk + 1, whether contiguous.

    The schedule keeps every set alive while it is checked, so an object's id names it for the whole pass."""

    def __init__(self) -> None:
        self.index: dict[int, int] = {}
        self.objs: list[ChunkSet] = []
        self.lo = np.zeros(64, dtype=np.int64)
        self.hi = np.zeros(64, dtype=np.int64)
        self.count = np.zeros(64, dtype=np.int64)

    def indices(self, keys: list[int], ops: Sequence[Op]) -> np.ndarray:
        """The indices of the chunk sets of ``ops`` (``keys``: their ids), new sets added."""
        index = self.index
        got = np.fromiter(map(index.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
        if got.min() < 0:
            for i in np.flatnonzero(got < 0).tolist():
                got[i] = index.get(keys[i], -1)
                if got[i] < 0:
                    got[i] = self._add(ops[i].chunks)
        return got

    def _add(self, s: ChunkSet) -> int:
        k = len(self.objs)
        if k == self.lo.size:
            self.lo, self.hi, self.count = (np.resize(a, 2 * k) for a in (self.lo, self.hi, self.count))
        bits = s.bits
        self.index[id(s)] = k
        self.objs.append(s)
        self.lo[k] = (bits & -bits).bit_length() - 1
        self.hi[k] = bits.bit_length()
        self.count[k] = bits.bit_count()
        return k


def count_dtype(nranks: int) -> type:
    """The dtype of the per-slot counts of contributions: float32 while it is exact up to the count a
    postcondition asks for (``nranks``), else float64.  Counts are sums of counts; the sum of integers that
    exceeds 2^24 (float32) may round, but never below 2^24, so a count above the largest exact integer stays
    above ``nranks`` (and inf stays inf): a count equal to the expected one is exact."""
    return np.float32 if nranks < 1 << 24 else np.float64


class Regular:
    """Plans and applies regular steps for one schedule (`collc.verify.check._Fingerprint` owns one)."""

    def __init__(self, nranks: int, nchunks: int) -> None:
        self.p, self.n = nranks, nchunks
        self.sets = _Sets()

    def plan(self, ops: Sequence[Op], runs_only: bool = False) -> Plan | None:
        """The step's messages, or None when the step is not regular (the exact code must run it) or, with
        ``runs_only``, when some chunk set is not one run of chunks."""
        m = len(ops)
        if m == 0 or set(map(type, ops)) != _OP_ONLY:
            return None  # codec ops and local ops: the exact code and the compression pass
        p = self.p
        kind = np.fromiter(map(_KIND.__getitem__, map(_kind, ops)), dtype=np.int8, count=m)
        action = np.fromiter(map(_ACTION.__getitem__, map(_action, ops)), dtype=np.int8, count=m)
        send, recv = kind == 0, kind == 1
        # a regular send has no action, a regular receive copies or reduces (else: findings, or local ops)
        if not ((send & (action == 0)) | (recv & (action > 0))).all():
            return None
        ranks = np.fromiter(map(_rank, ops), dtype=np.int64, count=m)
        peers = np.fromiter(map(_peer, ops), dtype=np.int64, count=m)
        if ranks.min() < 0 or peers.min() < 0 or ranks.max() >= p or peers.max() >= p or (ranks == peers).any():
            return None
        sets = self.sets.indices(list(map(id, map(_chunks, ops))), ops)
        count = self.sets.count[sets]
        hi = self.sets.hi[sets]
        if count.min() == 0 or hi.max() > self.n or (runs_only and (hi - self.sets.lo[sets] != count).any()):
            return None
        sends, recvs = np.flatnonzero(send), np.flatnonzero(recv)
        if sends.size != recvs.size:
            return None
        send_key = ranks[sends] * p + peers[sends]
        recv_key = peers[recvs] * p + ranks[recvs]
        so, ro = np.argsort(send_key, kind="stable"), np.argsort(recv_key, kind="stable")
        send_key, recv_key = send_key[so], recv_key[ro]
        if (send_key != recv_key).any() or (send_key[1:] == send_key[:-1]).any():
            return None  # unmatched or duplicate transfers
        sends, recvs = sends[so], recvs[ro]
        send_sets, recv_sets = sets[sends], sets[recvs]
        differ = np.flatnonzero(send_sets != recv_sets)
        if differ.size:
            objs = self.sets.objs
            if any(objs[send_sets[i]].bits != objs[recv_sets[i]].bits for i in differ.tolist()):
                return None  # partly matched: unmatched sends or receives
        src, dst = send_key // p, send_key % p
        reduce = action[recvs] == 2
        fan_out = int(np.bincount(src).max())
        fan_in_of = np.bincount(dst)
        fan_in = int(fan_in_of.max())
        if fan_in > 1 and not self._disjoint(dst, send_sets, fan_in_of):
            return None  # a slot written twice: a write conflict, or a reduce counted twice
        return Plan(src, dst, reduce, send_sets, count[sends], fan_out, fan_in)

    def _disjoint(self, dst: np.ndarray, sets: np.ndarray, fan_in_of: np.ndarray) -> bool:
        """Whether the messages into each rank that receives several carry disjoint chunk sets."""
        take = np.flatnonzero(fan_in_of[dst] > 1)
        objs = self.sets.objs
        got: dict[int, int] = {}
        for d, k in zip(dst[take].tolist(), sets[take].tolist(), strict=True):
            bits = objs[k].bits
            before = got.get(d, 0)
            if before & bits:
                return False
            got[d] = before | bits
        return True

    def columns(self, plan: Plan, take: np.ndarray | slice, dtype: type) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, chunk ids) of the messages ``take`` of ``plan``, chunk ids concatenated message by message."""
        idx = plan.sets[take]
        count = plan.count[take]
        offsets = np.zeros(idx.size + 1, dtype=np.int64)
        np.cumsum(count, out=offsets[1:])
        lo = self.sets.lo[idx]
        if (self.sets.hi[idx] - lo == count).all():  # every set one run of chunks
            return offsets, _runs(lo, count, offsets, dtype)
        objs = self.sets.objs
        nbytes = (self.n + 7) // 8
        total = int(offsets[-1])
        if idx.size * nbytes <= 32 * total + (1 << 22):  # the sets' bytes, one row per message, fit
            raw = b"".join([objs[k].bits.to_bytes(nbytes, "little") for k in idx.tolist()])
            flat = np.frombuffer(raw, dtype=np.uint8)
            where = np.flatnonzero(flat)  # the bytes with some chunk, message by message, ascending
            bits = np.unpackbits(flat[where][:, None], axis=1, bitorder="little")
            byte, bit = np.nonzero(bits)
            cols = (where[byte] % nbytes) * 8 + bit
            return offsets, cols.astype(dtype, copy=False)
        cache: dict[int, np.ndarray] = {}
        parts = []
        for k in idx.tolist():
            got = cache.get(k)
            if got is None:
                got = cache[k] = objs[k].ids().astype(dtype, copy=False)
            parts.append(got)
        return offsets, np.concatenate(parts)

    def temp_buffers(self, plan: Plan) -> int:
        """Ranks that receive, in this step, a chunk they also send in it (they need a temporary buffer)."""
        sets = self.sets
        if plan.fan_out == 1 and plan.fan_in == 1:  # at most one message out of and one into each rank
            out_of = np.full(self.p, -1, dtype=np.int64)
            in_of = np.full(self.p, -1, dtype=np.int64)
            out_of[plan.src] = plan.sets
            in_of[plan.dst] = plan.sets
            both = (out_of >= 0) & (in_of >= 0)
            a, b = out_of[both], in_of[both]
            if ((sets.hi[a] - sets.lo[a] == sets.count[a]) & (sets.hi[b] - sets.lo[b] == sets.count[b])).all():
                return int(np.count_nonzero(np.maximum(sets.lo[a], sets.lo[b]) < np.minimum(sets.hi[a], sets.hi[b])))
            objs = sets.objs
            return sum(1 for x, y in zip(a.tolist(), b.tolist(), strict=True) if objs[x].bits & objs[y].bits)
        sent: dict[int, int] = {}
        got: dict[int, int] = {}
        for s, d, k in zip(plan.src.tolist(), plan.dst.tolist(), plan.sets.tolist(), strict=True):
            bits = sets.objs[k].bits
            sent[s] = sent.get(s, 0) | bits
            got[d] = got.get(d, 0) | bits
        return sum(1 for r, bits in got.items() if sent.get(r, 0) & bits)

    def apply(
        self,
        plan: Plan,
        state: np.ndarray,
        held: np.ndarray | None,
        count: np.ndarray | None,
        batch: int | None,
        dtype: type,
    ) -> bool:
        """Move the fingerprints of a regular step (``state``, ``held`` and ``count`` flat, ``held`` None when
        every slot is held, ``count`` None while no slot has been reduced into: it must be given for a plan
        that reduces); False, with nothing changed, when the step reads or reduces into an empty slot (the
        exact code reports it).  ``batch``: elements per numpy batch when no slot is both read and written in
        the step (any order is then the step's order), else None."""
        n = self.n
        assert count is not None or not plan.reduce.any()
        if batch is not None and held is None:
            for reduce in (False, True):
                take = np.flatnonzero(plan.reduce == reduce)
                ends = np.cumsum(plan.count[take])
                lo = 0
                while lo < take.size:
                    hi = max(lo + 1, int(np.searchsorted(ends, (ends[lo - 1] if lo else 0) + batch, side="right")))
                    part = take[lo:hi]
                    offsets, cols = self.columns(plan, part, dtype)
                    src = expand(plan.src[part] * n, offsets, cols)
                    dst = expand(plan.dst[part] * n, offsets, cols)
                    if reduce:
                        assert count is not None
                        state[dst] += state[src]
                        count[dst] += count[src]
                    else:
                        state[dst] = state[src]
                        if count is not None:
                            count[dst] = count[src]
                    lo = hi
            return True
        offsets, cols = self.columns(plan, slice(None), dtype)
        src = expand(plan.src * n, offsets, cols)
        dst = expand(plan.dst * n, offsets, cols)
        every = plan.reduce.all()
        some = every or plan.reduce.any()
        red = None if every or not some else np.repeat(plan.reduce, plan.count)
        if held is not None:
            if not held[src].all():
                return False
            if some and not held[dst if red is None else dst[red]].all():
                return False
        if red is not None:  # copies and reduces: each part's sources and targets
            cp = ~red
            src_c, dst_c, src_r, dst_r = src[cp], dst[cp], src[red], dst[red]
        for values in (state, count):
            if values is None:
                continue
            if every:
                values[dst] += values[src]
            elif not some:
                values[dst] = values[src]
            else:  # every source is read before any target is written
                copied, reduced = values[src_c], values[src_r]
                values[dst_c] = copied
                values[dst_r] += reduced
        if held is not None:
            held[dst] = True
        return True


def _runs(lo: np.ndarray, count: np.ndarray, offsets: np.ndarray, dtype: type) -> np.ndarray:
    """``lo[k], lo[k] + 1, ..., lo[k] + count[k] - 1`` for every k, concatenated."""
    total = int(offsets[-1])
    out = np.ones(total, dtype=dtype)
    starts = offsets[:-1]
    # at the start of run k the value jumps from the end of run k - 1 (lo[k-1] + count[k-1] - 1) to lo[k]
    jump = lo.astype(np.int64).copy()
    jump[1:] -= lo[:-1] + count[:-1] - 1
    out[starts] = jump.astype(dtype)
    np.cumsum(out, out=out)
    return out


def expand(base: np.ndarray, offsets: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``base[k] + cols[i]`` for every element i of message k."""
    out = np.zeros(cols.size, dtype=cols.dtype)
    out[offsets[:-1]] = np.diff(base.astype(cols.dtype), prepend=cols.dtype.type(0))
    np.cumsum(out, out=out)
    out += cols
    return out
