"""The correctness checker: well-formedness, matching and data flow of a `Schedule`.

Two passes.  A *fingerprint* pass runs the whole schedule with numpy: slot
(rank, chunk) holds the wrapping uint64 sum of random odd hashes of the origins
it contains, plus an exact "held" flag and, once some reduce has run, a count of
its contributions that cannot wrap around (`collc.verify.fast.count_dtype`: a
slot holding every contribution 2^64 + 1 times has the right sum modulo 2^64,
never the right count); it also does the well-formedness,
matching and statistics work.  Only the chunks that fail the postcondition there
(at most `_MAX_TRACED_CHUNKS`) are then re-traced *exactly* (per rank, a bitset
of origins plus the counts above one, `collc.verify.retrace`) to name the missing or
doubly counted contributions and the op responsible.  The hashes are drawn afresh for every
check: a slot with the right count whose contributions are wrong lacks some
contribution j, so its fingerprint differs from the right one by a sum in which
h_j has the odd coefficient -1, which vanishes modulo 2^64 with a probability of
at most 2^-63 over h_j (docs/verifier.md, "Soundness").  A schedule with
compression points (noticed by the fingerprint pass) also gets the compression
pass of `collc.verify.compression`: slot states, codec matching and error bounds.

The cost follows the work (`collc.verify.columns`): a schedule that names few of its chunks keeps state for
those alone (the others keep their first contents, and the layout decides them); a step of long runs of
chunks moves them with slices; the postcondition is checked a block of chunks at a time and its failing
chunks are summed up as runs (`collc.verify.findings.RunTally`).  A step's ops are merged per pair of ranks
by `collc.verify.matching`.

Semantics (see collc.ir and collc.collectives): per step and (src, dst) pair,
sends and receives are merged into sets and must match; only matched chunks
arrive.  Every send reads the state at the start of the step; copies land
first, then reduces.  Ill-formed ops are reported and skipped (bad rank or
peer) or cut to the valid chunk range; a receive without an action is a copy.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from collc.collectives import EVERY, chunk_origin, layout_error
from collc.ir import Action, Op, OpKind, Schedule
from collc.verify.columns import fails_untouched, layout, move_runs, touched
from collc.verify.compression import ErrorStats, analyse, fmt_bound
from collc.verify.fast import Regular, count_dtype
from collc.verify.findings import CODES, Finding, RunTally
from collc.verify.findings import Collector as _Collector
from collc.verify.findings import bits_ids as _bits_ids
from collc.verify.findings import chunks_word as _chunks_word
from collc.verify.findings import ids_bits as _ids_bits
from collc.verify.findings import lowest as _lowest
from collc.verify.findings import them as _them
from collc.verify.matching import find_op as _find_op
from collc.verify.matching import merge_pairs as _pairs
from collc.verify.races import find_races
from collc.verify.retrace import trace
from collc.verify.stats import Stats, bandwidth_bound, traffic_stats

__all__ = ["CODES", "CheckReport", "Finding", "Stats", "bandwidth_bound", "check", "traffic_stats"]

_MAX_TRACED_CHUNKS = 8
_IDS_CACHE_LIMIT = 1 << 22  # ids kept in the bits -> ids cache before it is cleared
_BATCH_ELEMENTS = 1 << 23  # chunk transfers moved per numpy batch when a step allows batching
_FAST_MIN_OPS = 192  # smaller steps cost less op by op than in numpy calls
_FAST_BATCH_ELEMENTS = 1 << 21  # the same for regular steps (`collc.verify.fast`), whose temporaries are larger
_POST_ELEMENTS = 1 << 22  # slots the postcondition compares at once


@dataclass(frozen=True, slots=True)
class CheckReport:
    """The verdict on one schedule; `omitted` counts findings left out by the cap."""

    algorithm: str
    params: tuple[tuple[str, object], ...]
    nranks: int
    ok: bool
    findings: tuple[Finding, ...]
    stats: Stats
    omitted: int = 0
    compression: ErrorStats | None = None  # for schedules that compress (collc.verify.compression)
    omitted_by_code: tuple[tuple[str, int], ...] = ()  # the `omitted` findings per code, most useful first
    cap: int = 20  # the most findings a report keeps (``max_findings``)

    def omitted_text(self) -> str | None:
        """The findings past the cap, in words (None when there are none): how many, of which codes."""
        if not self.omitted:
            return None
        kinds = ", ".join(f"{n} {code}" for code, n in self.omitted_by_code)
        return f"{self.omitted} more finding(s) not kept: the verifier keeps at most {self.cap} per instance ({kinds})"


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _expand(starts: list[int], offsets: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``starts[k] + cols[i]`` for every element i of segment k (a cumsum beats np.repeat)."""
    out = np.zeros(cols.size, dtype=cols.dtype)
    out[offsets[:-1]] = np.diff(np.array(starts, dtype=cols.dtype), prepend=0)
    np.cumsum(out, out=out)
    out += cols
    return out


# --------------------------------------------------------------------------
# The fingerprint pass
# --------------------------------------------------------------------------

_Seg = tuple[int, int, int]  # (src, dst, chunk bits)


class _Fingerprint:
    """The whole-schedule pass: matching, stats and hashed data flow."""

    def __init__(
        self,
        schedule: Schedule,
        out: _Collector,
        dataflow: bool,
        fast: bool | None = None,
        cols: np.ndarray | None = None,
    ) -> None:
        self.s = schedule
        self.out = out
        self.dataflow = dataflow
        p, n = schedule.nranks, schedule.nchunks
        # the chunks the state keeps (sorted; None: all): the others are never touched (`collc.verify.columns`)
        self.cols = cols
        self.width = w = n if cols is None else int(cols.size)
        self.sent = [0] * p
        self.received = [0] * p
        # regular steps (`collc.verify.fast`) are applied with numpy; their traffic is counted here
        self.regular = Regular(p, n) if fast is not False and cols is None else None
        self.min_ops = 0 if fast else _FAST_MIN_OPS
        self.sent_fast = np.zeros(p, dtype=np.int64)
        self.received_fast = np.zeros(p, dtype=np.int64)
        self.steps = self.messages = self.fan_out = self.fan_in = 0
        self.fan_out_steps: list[int] = []
        self.fan_in_steps: list[int] = []
        self.temp_buffers = 0  # (step, rank) pairs where the rank receives a chunk it also sends
        self.compressed = [False]  # some op is local or carries a codec (set by `_pairs`)
        self.ids_cache: dict[int, np.ndarray] = {}
        self.cached = 0
        # flat slot indices fit in 32 bits up to 2**31 slots: half the memory traffic of int64
        self.index_dtype = np.int32 if p * w < 2**31 else np.int64
        self.all_held = False
        self.held: np.ndarray | None = None  # None: every slot holds data, from the start to the end
        # contributions per slot, made at the first reduce (`counts`): until then a slot holds one or none
        self.count: np.ndarray | None = None
        if dataflow:
            if cols is None:
                origin = chunk_origin(schedule.collective, p, n, schedule.root)
            else:
                origin = layout(schedule.collective, p, n, schedule.root, cols)[0]
            # every slot starts held (reducing collectives): copies and reduces keep it so, skip the flags
            self.all_held = bool((origin == EVERY).all())
            self.h = np.random.default_rng().integers(  # fresh hashes for every check (see the module docstring)
                0, np.iinfo(np.uint64).max, size=p, dtype=np.uint64, endpoint=True
            ) | np.uint64(1)
            every = origin == EVERY
            own = np.flatnonzero(~every)  # columns held by their origin alone
            if own.size == 0:  # every rank holds every chunk (reducing collectives): no held flags
                self.state = np.empty((p, w), dtype=np.uint64)
                self.state[:] = self.h[:, None]
            else:
                self.state = np.zeros((p, w), dtype=np.uint64)
                self.held = np.zeros((p, w), dtype=bool)
                self.state[:, every] = self.h[:, None]
                self.held[:, every] = True
                self.state[origin[own], own] = self.h[origin[own]]
                self.held[origin[own], own] = True

    def counts(self) -> np.ndarray:
        """The counts of contributions (flat), made now if no reduce has run yet: each slot then holds one
        contribution or none, as its held flag says."""
        if self.count is None:
            dtype = count_dtype(self.s.nranks)
            held = self.held
            self.count = np.ones(self.state.shape, dtype=dtype) if held is None else held.astype(dtype)
        return self.count.reshape(-1)

    def ids(self, bits: int) -> np.ndarray:
        got = self.ids_cache.get(bits)
        if got is None:
            if self.cached > _IDS_CACHE_LIMIT:
                self.ids_cache.clear()
                self.cached = 0
            ids = _bits_ids(bits)
            if self.cols is not None:  # the columns of those chunks
                ids = np.searchsorted(self.cols, ids)
            got = self.ids_cache[bits] = ids.astype(self.index_dtype, copy=False)
            self.cached += got.size
        return got

    def run(self, on_progress: Callable[[int, int], None] | None = None) -> None:
        total = len(self.s.steps)
        for done, step in enumerate(self.s.steps, 1):
            if step.ops and not self.fast_step(step.ops):
                self.step(step.index, step.ops)
            if on_progress is not None:
                on_progress(done, total)

    def fast_step(self, ops: Sequence[Op]) -> bool:
        """A regular step (`collc.verify.fast`) with numpy; False, with nothing done, for any other step."""
        if self.regular is None or len(ops) < self.min_ops:
            return False
        plan = self.regular.plan(ops, runs_only=self.min_ops > 0)
        if plan is None:
            return False
        temp = self.regular.temp_buffers(plan)
        if self.dataflow:
            batch = _FAST_BATCH_ELEMENTS if self.all_held and temp == 0 else None
            held = None if self.held is None else self.held.reshape(-1)
            count = self.counts() if self.count is not None or plan.reduce.any() else None
            if not self.regular.apply(plan, self.state.reshape(-1), held, count, batch, self.index_dtype):
                return False
        self.steps += 1
        self.messages += plan.src.size
        np.add.at(self.sent_fast, plan.src, plan.count)
        np.add.at(self.received_fast, plan.dst, plan.count)
        self.fan_out_steps.append(plan.fan_out)
        self.fan_in_steps.append(plan.fan_in)
        self.fan_out = max(self.fan_out, plan.fan_out)
        self.fan_in = max(self.fan_in, plan.fan_in)
        self.temp_buffers += temp
        return True

    def step(self, step: int, ops: Sequence[Op]) -> None:
        """Stats, matching and write conflicts of one step, then its data flow."""
        out, sent, received = self.out, self.sent, self.received
        pairs = _pairs(ops, self.s.nranks, self.s.nchunks, step, out, self.compressed)
        if not pairs and all(op.kind.local for op in ops):
            return  # only compress/decompress: no communication, not counted as a step
        self.steps += 1
        fan_out: dict[int, int] = {}
        seen: dict[int, list[int]] = {}  # dst -> [received, copied, reduced, fan-in]
        segs: tuple[list[_Seg], list[_Seg], list[_Seg]] = ([], [], [])  # copy, reduce, sent but lost
        dups = False
        for (src, dst), (send, copy, red) in pairs.items():
            got = copy | red if copy and red else copy or red
            if send:
                self.messages += 1
                count = send.bit_count()
                sent[src] += count
                fan_out[src] = fan_out.get(src, 0) + 1
                if send == got and not (copy and red):  # the common case, kept cheap
                    segs[1 if red else 0].append((src, dst, send))
                    received[dst] += count
                    entry = seen.get(dst)
                    if entry is None:
                        seen[dst] = [got, copy, red, 1]
                        continue
                    clash = (copy & entry[0]) | (red & entry[1])
                    dups = dups or bool(red & entry[2])
                    entry[0] |= got
                    entry[1] |= copy
                    entry[2] |= red
                    entry[3] += 1
                    if clash:
                        self.conflict(step, ops, src, dst, clash)
                    continue
                for kind, bits in enumerate((send & copy, send & red, send & ~got)):
                    if bits:
                        segs[kind].append((src, dst, bits))
                lost = send & ~got
                if lost and out.room("unmatched-send"):
                    op = _find_op(ops, src, OpKind.SEND, dst, lost)
                    msg = (
                        f"step {step}: rank {src} sends {_chunks_word(lost)} to rank {dst}, "
                        f"but rank {dst} does not receive {_them(lost)} from rank {src} in this step"
                    )
                    out.add(Finding("unmatched-send", msg, op.span, step, src, _lowest(lost), None, None))
            if not got:
                continue
            extra = got & ~send
            if extra and out.room("unmatched-recv"):
                op = _find_op(ops, dst, OpKind.RECV, src, extra)
                msg = (
                    f"step {step}: rank {dst} receives {_chunks_word(extra)} from rank {src}, "
                    f"but rank {src} does not send {_them(extra)} to rank {dst} in this step"
                )
                out.add(Finding("unmatched-recv", msg, op.span, step, dst, _lowest(extra), None, None))
            received[dst] += got.bit_count()
            entry = seen.get(dst)
            if entry is None:
                seen[dst] = [got, copy, red, 1]
                clash = copy & red
            else:
                clash = (copy & entry[0]) | (red & entry[1]) | (copy & red)
                dups = dups or bool(red & entry[2])
                entry[0] |= got
                entry[1] |= copy
                entry[2] |= red
                entry[3] += 1
            if clash:
                self.conflict(step, ops, src, dst, clash)
        step_out = max(fan_out.values(), default=0)
        step_in = max((e[3] for e in seen.values()), default=0)
        self.fan_out_steps.append(step_out)
        self.fan_in_steps.append(step_in)
        self.fan_out = max(self.fan_out, step_out)
        self.fan_in = max(self.fan_in, step_in)
        buffers_before = self.temp_buffers
        sends_of: dict[int, int] = {}
        for (src, _), (send, _, _) in pairs.items():
            if send:
                sends_of[src] = sends_of.get(src, 0) | send
        for rank, entry in seen.items():
            both = sends_of.get(rank, 0) & entry[0]
            if both:  # the executor must receive into a temporary buffer (or send first)
                self.temp_buffers += 1
        if self.dataflow:
            self.flow(step, ops, segs, dups, conflict_free=self.temp_buffers == buffers_before)

    def conflict(self, step: int, ops: Sequence[Op], src: int, dst: int, clash: int) -> None:
        op = _find_op(ops, dst, OpKind.RECV, src, clash)
        msg = (
            f"step {step}: rank {dst} receives {_chunks_word(clash)} more than once in this step "
            f"(last from rank {src}) and at least one receive is a copy, so the result is undefined"
        )
        self.out.add(Finding("write-conflict", msg, op.span, step, dst, _lowest(clash), None, None))

    def flow(
        self, step: int, ops: Sequence[Op], segs: tuple[list[_Seg], ...], dups: bool, conflict_free: bool = False
    ) -> None:
        """Apply one step to the fingerprints and counts: gather every source first, then scatter."""
        flat = segs[0] + segs[1] + segs[2]
        if not flat:
            return
        n = self.width
        count = self.counts() if self.count is not None or segs[1] else None
        if move_runs(segs, self.state, self.count, self.held, self.cols):
            return
        if self.held is None and conflict_free:
            # no slot is both read and written in this step: any order is the step's order, so move the
            # data in batches and keep the index arrays small
            for action, group in ((Action.COPY, segs[0]), (Action.REDUCE, segs[1])):
                for batch in self._batches(group):
                    self._move(batch, action is Action.REDUCE, dups, count)
            return
        ids = [self.ids(bits) for _, _, bits in flat]
        lens = np.fromiter((a.size for a in ids), dtype=np.int64, count=len(ids))
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        cols = np.concatenate(ids)
        src_flat = _expand([s * n for s, _, _ in flat], offsets, cols)
        dst_flat = _expand([d * n for _, d, _ in flat], offsets, cols)
        nc = int(offsets[len(segs[0])])
        nr = int(offsets[len(segs[0]) + len(segs[1])]) - nc
        src_moved, dst_c, dst_r = src_flat[: nc + nr], dst_flat[:nc], dst_flat[nc : nc + nr]
        held = None if self.held is None else self.held.reshape(-1)
        src_held: np.ndarray | None = None
        all_targets_held = True
        if held is not None:
            src_held = held[src_flat]
            dst_r_held = held[dst_r]
            all_targets_held = bool(dst_r_held.all())
            if not src_held.all():
                self.report(step, ops, flat, offsets, cols, np.flatnonzero(~src_held), "send-not-held")
            if not all_targets_held:
                self.report(step, ops, flat, offsets, cols, nc + np.flatnonzero(~dst_r_held), "reduce-into-empty")
        for values in (self.state.reshape(-1), count):
            if values is None:
                continue
            incoming = values[src_moved]  # every source read before any target is written
            values[dst_c] = incoming[:nc]
            if dups:
                np.add.at(values, dst_r, incoming[nc:])
            else:
                values[dst_r] += incoming[nc:]
        if held is not None and src_held is not None:
            held[dst_c] = src_held[:nc]
            if not all_targets_held:  # a reduce target that was held stays held
                held[dst_r[src_held[nc : nc + nr]]] = True

    def _batches(self, group: list[_Seg]) -> Iterator[list[_Seg]]:
        batch: list[_Seg] = []
        size = 0
        for seg in group:
            batch.append(seg)
            size += seg[2].bit_count()
            if size >= _BATCH_ELEMENTS:
                yield batch
                batch, size = [], 0
        if batch:
            yield batch

    def _move(self, segs: list[_Seg], reduce: bool, dups: bool, count: np.ndarray | None) -> None:
        n = self.width
        ids = [self.ids(bits) for _, _, bits in segs]
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(np.fromiter((a.size for a in ids), dtype=np.int64, count=len(ids)), out=offsets[1:])
        cols = np.concatenate(ids)
        src = _expand([s * n for s, _, _ in segs], offsets, cols)
        dst = _expand([d * n for _, d, _ in segs], offsets, cols)
        for values in (self.state.reshape(-1), count):
            if values is None:
                continue
            if not reduce:
                values[dst] = values[src]
            elif dups:
                np.add.at(values, dst, values[src])
            else:
                values[dst] += values[src]

    def report(
        self,
        step: int,
        ops: Sequence[Op],
        flat: list[_Seg],
        offsets: np.ndarray,
        cols: np.ndarray,
        where: np.ndarray,
        code: str,
    ) -> None:
        """Findings for data-flow errors at element indices `where`, one per (src, dst) pair."""
        seg = np.searchsorted(offsets, where, side="right") - 1
        for k in np.unique(seg):
            if not self.out.room(code):
                continue
            src, dst, _ = flat[k]
            at = cols[where[seg == k]]
            bad = _ids_bits(at if self.cols is None else self.cols[at])
            if code == "send-not-held":
                op = _find_op(ops, src, OpKind.SEND, dst, bad)
                what = _chunks_word(bad)
                msg = f"step {step}: rank {src} sends {what} to rank {dst} but holds no data for {_them(bad)}"
                self.out.add(Finding(code, msg, op.span, step, src, _lowest(bad), None, "{}"))
            else:
                op = _find_op(ops, dst, OpKind.RECV, src, bad, Action.REDUCE)
                msg = (
                    f"step {step}: rank {dst} reduces {_chunks_word(bad)} received from rank {src} "
                    f"into a slot that holds nothing yet"
                )
                self.out.add(Finding(code, msg, op.span, step, dst, _lowest(bad), None, "{}"))

    def failing(self) -> RunTally:
        """The chunks whose required slots do not hold the expected fingerprint and count of contributions, a
        block of chunks at a time (no array as long as the vector): the state's columns by their contents, the
        chunks no op touches (when the state keeps the others only) by the layout."""
        tally = RunTally(_MAX_TRACED_CHUNKS)
        for a, bad in self._failing_blocks():
            tally.add_flags(a, bad)
        return tally

    def failing_chunks(self) -> np.ndarray:
        """The ids of all the chunks `failing` sums up."""
        found = [a + np.flatnonzero(bad) for a, bad in self._failing_blocks()]
        return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)

    def _failing_blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        s = self.s
        p, n, cols = s.nranks, s.nchunks, self.cols
        total = self.h.sum(dtype=np.uint64)
        block = max(1, _POST_ELEMENTS // p)
        for a in range(0, n, block):
            b = min(n, a + block)
            origin, dest = layout(s.collective, p, n, s.root, np.arange(a, b))
            if cols is None:
                bad = self._wrong_columns(a, origin, dest, total)
            else:
                bad = fails_untouched(p, origin, dest)
                lo, hi = np.searchsorted(cols, [a, b]).tolist()
                if hi > lo:
                    at = cols[lo:hi] - a
                    bad[at] = self._wrong_columns(lo, origin[at], dest[at], total)
            yield a, bad

    def _wrong_columns(self, lo: int, origin: np.ndarray, dest: np.ndarray, total: np.uint64) -> np.ndarray:
        """Which of the state's columns lo, lo + 1, ... (chunks of ``origin`` and ``dest``) fail."""
        p = self.s.nranks
        prefix = self.s.collective.prefix
        if prefix is not None:  # a scan: rank r holds ranks 0 .. r + prefix - 1, each once (exscan: not rank 0)
            first = 1 - prefix
            upto = np.cumsum(self.h, dtype=np.uint64)
            sums = upto if prefix else np.concatenate([np.zeros(1, dtype=np.uint64), upto[:-1]])
            want_r = (np.arange(p) + prefix).astype(count_dtype(p))
            index = (slice(first, None), slice(lo, lo + origin.size))
            return self._wrong(index, sums[first:, None], want_r[first:, None]).any(axis=0)
        every_origin = origin == EVERY
        expected = np.where(every_origin, total, self.h[np.maximum(origin, 0)])
        # every rank's contribution once, or the origin's once: a count of at least one also says "held"
        want = np.where(every_origin, p, 1).astype(count_dtype(p))
        everyone = dest == EVERY
        if everyone.all():  # every rank needs every chunk: no column gather
            return self._wrong((slice(None), slice(lo, lo + origin.size)), expected, want).any(axis=0)
        bad = np.zeros(origin.size, dtype=bool)
        at = np.flatnonzero(everyone)
        if at.size:
            bad[at] = self._wrong((slice(None), lo + at), expected[at], want[at]).any(axis=0)
        at = np.flatnonzero(~everyone)
        if at.size:
            bad[at] = self._wrong((dest[at], lo + at), expected[at], want[at])
        return bad

    def _wrong(self, index: tuple, expected: np.ndarray, want: np.ndarray) -> np.ndarray:
        """The slots ``index`` whose fingerprint or count differs from ``expected`` and ``want`` (per chunk)."""
        bad = self.state[index] != expected
        if self.count is not None:
            bad |= self.count[index] != want
        elif self.held is not None:  # no reduce has run: a slot holds one contribution if held, else none
            bad |= self.held[index] != want
        else:  # every slot holds its own rank's contribution alone
            bad |= want != 1
        return bad


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------


def check(
    schedule: Schedule,
    *,
    max_findings: int = 20,
    input_bound: float = 1.0,
    tolerance: float | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    fast: bool | None = None,
) -> CheckReport:
    """Check `schedule` against its collective's contract; see the module docstring.

    For a schedule with compression points, also their use and the error of its outputs
    (`collc.verify.compression`), for inputs of magnitude at most ``input_bound``; a
    worst-case error bound above ``tolerance`` is a finding.  ``on_progress(done, total)``,
    when given, is called after each step of the schedule is checked (``total`` its steps).
    Regular steps of at least a few hundred ops, each op one run of chunks, are applied with numpy
    (`collc.verify.fast`), the others op by op (whose per-set caches serve large scattered chunk sets better);
    ``fast=True`` applies every regular step with numpy, ``fast=False`` none (the same report either way).
    """
    p, n = schedule.nranks, schedule.nchunks
    out = _Collector(max(1, max_findings))
    problem = layout_error(schedule.collective, p, n)
    if problem is not None:
        out.add(Finding("layout", problem, schedule.span, None, None, None, None, None))
    elif schedule.collective.prefix is not None and schedule.compresses():
        msg = f"{schedule.collective.value} with compression points: collc bounds their error for other collectives"
        out.add(Finding("layout", msg, schedule.span, None, None, None, None, None))
    elif schedule.collective.has_root and (schedule.root is None or not 0 <= schedule.root < p):
        msg = f"{schedule.collective.value} needs a root in 0..{p - 1}, got {schedule.root}"
        out.add(Finding("root-out-of-range", msg, schedule.span, None, None, None, None, None))
    dataflow = out.total == 0
    fp = _Fingerprint(schedule, out, dataflow, fast, touched(schedule) if dataflow else None)
    # the pass makes no garbage cycles; the cyclic collector would only re-scan the schedule's ops
    collecting = gc.isenabled()
    gc.disable()
    try:
        fp.run(on_progress)
    finally:
        if collecting:
            gc.enable()
    if out.total == 0:  # well-formed and matched: the lanes' steps may overlap only where nothing races
        find_races(schedule, out)
    if dataflow:
        failing = fp.failing()
        traced = failing.first
        origin, dest = layout(schedule.collective, p, n, schedule.root, np.array(traced, dtype=np.int64))
        mask = sum(1 << c for c in traced)
        steps = [(st.index, [op for op in st.ops if op.chunks.bits & mask]) for st in schedule.steps] if mask else []
        for c, o, d in zip(traced, origin.tolist(), dest.tolist(), strict=True):
            trace(schedule, c, o, d, steps, out)
        if failing.count:
            msg = f"{failing.count} more chunks fail the postcondition (not traced): {failing.rest_text()}"
            out.add(Finding("postcondition", msg, schedule.span, None, None, None, None, None))
    errors: ErrorStats | None = None
    if dataflow and fp.compressed[0]:
        analysis = analyse(schedule, out, input_bound=input_bound)
        errors = analysis.stats
        if tolerance is not None and not errors.error_bound <= tolerance:
            where = analysis.worst_op
            msg = (
                f"the worst-case error bound {fmt_bound(errors.error_bound)} exceeds the tolerance {tolerance:g}: "
                f"at rank {errors.worst_rank}, chunk {errors.worst_chunk} "
                f"(at most {int(analysis.hops[errors.worst_rank, errors.worst_chunk])} lossy compressions, "
                f"inputs |x| <= {input_bound:g})"
            )
            span = where.span if where is not None else schedule.span
            out.add(Finding("tolerance", msg, span, None, errors.worst_rank, errors.worst_chunk, None, None))
    findings, omitted = out.select()
    sent = int((np.array(fp.sent, dtype=np.int64) + fp.sent_fast).max(initial=0))
    received = int((np.array(fp.received, dtype=np.int64) + fp.received_fast).max(initial=0))
    stats = traffic_stats(
        schedule.collective,
        p,
        n,
        steps=fp.steps,
        messages=fp.messages,
        most_sent=sent,
        most_received=received,
        fan_out_steps=fp.fan_out_steps,
        fan_in_steps=fp.fan_in_steps,
        temp_buffer_steps=fp.temp_buffers,
    )
    return CheckReport(
        algorithm=schedule.algorithm,
        params=tuple(schedule.params),
        nranks=p,
        ok=out.total == 0,
        findings=findings,
        stats=stats,
        omitted=omitted,
        compression=errors,
        omitted_by_code=out.dropped(findings),
        cap=out.cap,
    )
