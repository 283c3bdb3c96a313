"""The correctness checker: well-formedness, matching and data flow of a `Schedule`.

Two passes.  A *fingerprint* pass runs the whole schedule with numpy: slot
(rank, chunk) holds the wrapping uint64 sum of random odd hashes of the origins
it contains, plus a "held" flag.  Only the chunks that fail the postcondition
there are then re-traced *exactly* (a count vector of origins per rank) to name
the missing or doubly counted contributions and the op responsible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from collc.collectives import EVERY, chunk_dest, chunk_origin, layout_error
from collc.ir import Action, ChunkSet, Collective, Op, OpKind, Schedule, Span, bits_to_runs, format_id_set

__all__ = ["CheckReport", "Finding", "Stats", "check"]

# Codes, most useful first: the order findings are reported in.
CODES: tuple[str, ...] = (
    "layout",
    "root-out-of-range",
    "rank-out-of-range",
    "peer-out-of-range",
    "peer-is-self",
    "chunk-out-of-range",
    "recv-without-action",
    "send-with-action",
    "unmatched-send",
    "unmatched-recv",
    "write-conflict",
    "send-not-held",
    "reduce-into-empty",
    "double-count",
    "postcondition",
)
_PRIORITY = {code: i for i, code in enumerate(CODES)}
_SEED = 0x5EED_C011C
_MAX_TRACED_CHUNKS = 8
_COUNT_CAP = 1 << 20  # exact counts saturate here (only pathological schedules get close)
_IDS_CACHE_LIMIT = 1 << 22  # ids kept in the bits -> ids cache before it is cleared


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem found, located at the op responsible."""

    code: str
    message: str
    span: Span
    step: int | None
    rank: int | None
    chunk: int | None
    expected: str | None
    actual: str | None


@dataclass(frozen=True, slots=True)
class Stats:
    """Traffic statistics (sends merged per (src, dst) pair per step)."""

    steps: int
    messages: int
    max_chunks_sent: int
    max_chunks_received: int
    max_sent_fraction: float
    max_received_fraction: float
    max_fan_out: int
    max_fan_in: int


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


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _fmt(bits: int) -> str:
    return format_id_set(bits_to_runs(bits))


def _fmt_ids(ids: Sequence[int] | np.ndarray) -> str:
    bits = 0
    for i in ids:
        bits |= 1 << int(i)
    return _fmt(bits)


def _chunks_word(bits: int) -> str:
    return f"chunk {bits.bit_length() - 1}" if bits.bit_count() == 1 else f"chunks {_fmt(bits)}"


def _format_counts(counts: np.ndarray) -> str:
    """A multiset of origins: ``{0..7}`` or ``{0..7} (x2: {1, 2})``."""
    text = _fmt_ids(np.flatnonzero(counts > 0))
    extra = [f"x{m}: {_fmt_ids(np.flatnonzero(counts == m))}" for m in np.unique(counts[counts > 1])]
    return text + (f" ({', '.join(extra)})" if extra else "")


class _Collector:
    """Findings per code, each list capped; counts everything."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.lists: dict[str, list[Finding]] = {code: [] for code in CODES}
        self.total = 0

    def room(self, code: str) -> bool:
        """Whether a finding of `code` would be kept; counts it as dropped when not."""
        if len(self.lists[code]) < self.cap:
            return True
        self.total += 1
        return False

    def add(self, finding: Finding) -> None:
        self.total += 1
        if len(self.lists[finding.code]) < self.cap:
            self.lists[finding.code].append(finding)

    def select(self) -> tuple[tuple[Finding, ...], int]:
        """At most `cap` findings: the first of each code, then the rest by priority."""
        chosen: list[tuple[int, int]] = [(p, 0) for p, code in enumerate(CODES) if self.lists[code]][
            : self.cap
        ]
        for p, code in enumerate(CODES):
            for i in range(1, len(self.lists[code])):
                if len(chosen) >= self.cap:
                    break
                chosen.append((p, i))
        chosen.sort()
        findings = tuple(self.lists[CODES[p]][i] for p, i in chosen)
        return findings, self.total - len(findings)


@dataclass(slots=True)
class _Pair:
    """What one (src, dst) pair exchanges in one step, merged over ops."""

    send: int = 0
    copy: int = 0
    reduce: int = 0
    send_ops: list[Op] = field(default_factory=list)
    recv_ops: list[tuple[Op, Action]] = field(default_factory=list)

    def send_op(self, bits: int) -> Op:
        return next((op for op in self.send_ops if op.chunks.bits & bits), self.send_ops[0])

    def recv_op(self, bits: int, action: Action | None = None) -> Op:
        for op, act in self.recv_ops:
            if op.chunks.bits & bits and (action is None or act is action):
                return op
        return self.recv_ops[0][0]


def _pairs(
    ops: Sequence[Op], nranks: int, nchunks: int, step: int, out: _Collector | None
) -> dict[tuple[int, int], _Pair]:
    """Merge a step's ops per (src, dst); ill-formed ops are reported to `out` and skipped/repaired."""
    pairs: dict[tuple[int, int], _Pair] = {}
    mask = (1 << nchunks) - 1
    for op in ops:
        rank, peer, bits = op.rank, op.peer, op.chunks.bits
        verb = "sends to" if op.kind is OpKind.SEND else "receives from"
        if not 0 <= rank < nranks:
            if out is not None:
                msg = f"step {step}: an op of rank {rank} {verb} rank {peer}, but ranks are 0..{nranks - 1}"
                out.add(Finding("rank-out-of-range", msg, op.span, step, rank, None, None, None))
            continue
        if not 0 <= peer < nranks or peer == rank:
            if out is not None:
                code = "peer-is-self" if peer == rank else "peer-out-of-range"
                why = "itself" if peer == rank else f"rank {peer}, but ranks are 0..{nranks - 1}"
                out.add(Finding(code, f"step {step}: rank {rank} {verb} {why}", op.span, step, rank, None, None, None))
            continue
        if bits >> nchunks:
            if out is not None:
                bad = bits & ~mask
                msg = (
                    f"step {step}: rank {rank} {verb} rank {peer} {_chunks_word(bad)}, "
                    f"but chunks are 0..{nchunks - 1}"
                )
                out.add(
                    Finding("chunk-out-of-range", msg, op.span, step, rank, bad.bit_length() - 1, None, None)
                )
            bits &= mask
        if op.kind is OpKind.SEND:
            if op.action is not None and out is not None:
                msg = f"step {step}: rank {rank} sends to rank {peer} with action {op.action.value!r}"
                out.add(Finding("send-with-action", msg, op.span, step, rank, None, None, None))
            pair = pairs.get((rank, peer))
            if pair is None:
                pair = pairs[rank, peer] = _Pair()
            pair.send |= bits
            pair.send_ops.append(op)
        else:
            action = op.action
            if action is None:
                if out is not None:
                    msg = f"step {step}: rank {rank} receives from rank {peer} without an action (copy assumed)"
                    out.add(Finding("recv-without-action", msg, op.span, step, rank, None, None, None))
                action = Action.COPY
            pair = pairs.get((peer, rank))
            if pair is None:
                pair = pairs[peer, rank] = _Pair()
            if action is Action.COPY:
                pair.copy |= bits
            else:
                pair.reduce |= bits
            pair.recv_ops.append((op, action))
    return pairs


# --------------------------------------------------------------------------
# The fingerprint pass
# --------------------------------------------------------------------------


class _Fingerprint:
    """The whole-schedule pass: matching, stats and hashed data flow."""

    def __init__(self, schedule: Schedule, out: _Collector, dataflow: bool) -> None:
        self.s = schedule
        self.out = out
        self.dataflow = dataflow
        p, n = schedule.nranks, schedule.nchunks
        self.sent = [0] * p
        self.received = [0] * p
        self.steps = self.messages = self.fan_out = self.fan_in = 0
        self.ids_cache: dict[int, np.ndarray] = {}
        self.cached = 0
        if dataflow:
            origin = chunk_origin(schedule.collective, p, n, schedule.root)
            self.origin = origin
            self.h = np.random.default_rng(_SEED).integers(
                0, np.iinfo(np.uint64).max, size=p, dtype=np.uint64, endpoint=True
            ) | np.uint64(1)
            every = origin == EVERY
            cols = np.flatnonzero(~every)
            self.state = np.zeros((p, n), dtype=np.uint64)
            self.held = np.zeros((p, n), dtype=bool)
            self.state[:, every] = self.h[:, None]
            self.held[:, every] = True
            self.state[origin[cols], cols] = self.h[origin[cols]]
            self.held[origin[cols], cols] = True
            self.mark = np.zeros(p * n, dtype=bool)

    def ids(self, bits: int) -> np.ndarray:
        got = self.ids_cache.get(bits)
        if got is None:
            if self.cached > _IDS_CACHE_LIMIT:
                self.ids_cache.clear()
                self.cached = 0
            got = self.ids_cache[bits] = _bits_ids(bits)
            self.cached += got.size
        return got

    def run(self) -> None:
        for step in self.s.steps:
            if not step.ops:
                continue
            self.steps += 1
            pairs = _pairs(step.ops, self.s.nranks, self.s.nchunks, step.index, self.out)
            self.match(step.index, pairs)
            if self.dataflow:
                self.flow(step.index, pairs)

    def match(self, step: int, pairs: dict[tuple[int, int], _Pair]) -> None:
        """Stats, unmatched sends and receives, write conflicts."""
        out = self.out
        fan_out: dict[int, int] = {}
        fan_in: dict[int, int] = {}
        seen_any: dict[int, int] = {}
        seen_copy: dict[int, int] = {}
        for (src, dst), pr in pairs.items():
            got = pr.copy | pr.reduce
            if pr.send:
                self.messages += 1
                self.sent[src] += pr.send.bit_count()
                fan_out[src] = fan_out.get(src, 0) + 1
            if got:
                self.received[dst] += got.bit_count()
                fan_in[dst] = fan_in.get(dst, 0) + 1
            lost = pr.send & ~got
            if lost and out.room("unmatched-send"):
                op = pr.send_op(lost)
                msg = (
                    f"step {step}: rank {src} sends {_chunks_word(lost)} to rank {dst}, "
                    f"but rank {dst} does not receive them from rank {src} in this step"
                )
                chunk = (lost & -lost).bit_length() - 1
                out.add(Finding("unmatched-send", msg, op.span, step, src, chunk, _fmt(got), _fmt(pr.send)))
            extra = got & ~pr.send
            if extra and out.room("unmatched-recv"):
                op = pr.recv_op(extra)
                msg = (
                    f"step {step}: rank {dst} receives {_chunks_word(extra)} from rank {src}, "
                    f"but rank {src} does not send them to rank {dst} in this step"
                )
                chunk = (extra & -extra).bit_length() - 1
                out.add(Finding("unmatched-recv", msg, op.span, step, dst, chunk, _fmt(pr.send), _fmt(got)))
            if got:
                before_any, before_copy = seen_any.get(dst, 0), seen_copy.get(dst, 0)
                clash = (pr.copy & before_any) | (pr.reduce & before_copy) | (pr.copy & pr.reduce)
                if clash:
                    op = pr.recv_op(clash)
                    chunk = (clash & -clash).bit_length() - 1
                    msg = (
                        f"step {step}: rank {dst} receives {_chunks_word(clash)} more than once in this step "
                        f"(last from rank {src}) and at least one receive is a copy, so the result is undefined"
                    )
                    out.add(Finding("write-conflict", msg, op.span, step, dst, chunk, None, None))
                seen_any[dst] = before_any | got
                seen_copy[dst] = before_copy | pr.copy
        self.fan_out = max(self.fan_out, *fan_out.values(), 0)
        self.fan_in = max(self.fan_in, *fan_in.values(), 0)

    def flow(self, step: int, pairs: dict[tuple[int, int], _Pair]) -> None:
        """Apply one step to the fingerprints: gather every source first, then scatter."""
        n = self.s.nchunks
        segs: tuple[list[tuple[int, int, int]], ...] = ([], [], [])  # copy, reduce, sent but not received
        for (src, dst), pr in pairs.items():
            if not pr.send:
                continue
            for kind, bits in enumerate((pr.send & pr.copy, pr.send & pr.reduce, pr.send & ~(pr.copy | pr.reduce))):
                if bits:
                    segs[kind].append((src, dst, bits))
        flat = segs[0] + segs[1] + segs[2]
        if not flat:
            return
        ids = [self.ids(bits) for _, _, bits in flat]
        lens = np.fromiter((a.size for a in ids), dtype=np.int64, count=len(ids))
        offsets = np.concatenate(([0], np.cumsum(lens)))
        cols = np.concatenate(ids)
        src_flat = np.repeat(np.fromiter((s * n for s, _, _ in flat), np.int64, len(flat)), lens) + cols
        dst_flat = np.repeat(np.fromiter((d * n for _, d, _ in flat), np.int64, len(flat)), lens) + cols
        nc = int(offsets[len(segs[0])])
        nr = int(offsets[len(segs[0]) + len(segs[1])]) - nc
        state, held = self.state.reshape(-1), self.held.reshape(-1)
        src_held = held[src_flat]
        incoming = state[src_flat[: nc + nr]]
        dst_c, dst_r = dst_flat[:nc], dst_flat[nc : nc + nr]
        dst_r_held = held[dst_r]
        if not src_held.all():
            self.report(step, pairs, flat, offsets, cols, np.flatnonzero(~src_held), "send-not-held")
        if not dst_r_held.all():
            self.report(step, pairs, flat, offsets, cols, nc + np.flatnonzero(~dst_r_held), "reduce-into-empty")
        state[dst_c] = incoming[:nc]
        held[dst_c] = src_held[:nc]
        self.mark[dst_r] = True
        unique = int(np.count_nonzero(self.mark[dst_r])) if nr else 0
        self.mark[dst_r] = False
        if unique == nr:
            state[dst_r] += incoming[nc:]
        else:
            np.add.at(state, dst_r, incoming[nc:])
        held[dst_r[src_held[nc : nc + nr]]] = True

    def report(
        self,
        step: int,
        pairs: dict[tuple[int, int], _Pair],
        flat: list[tuple[int, int, int]],
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
            bad = 0
            for c in cols[where[seg == k]]:
                bad |= 1 << int(c)
            pr = pairs[src, dst]
            chunk = (bad & -bad).bit_length() - 1
            if code == "send-not-held":
                op = pr.send_op(bad)
                msg = f"step {step}: rank {src} sends {_chunks_word(bad)} to rank {dst} but holds no data for it"
                self.out.add(Finding(code, msg, op.span, step, src, chunk, None, "{}"))
            else:
                op = pr.recv_op(bad, Action.REDUCE)
                msg = (
                    f"step {step}: rank {dst} reduces {_chunks_word(bad)} received from rank {src} "
                    f"into a slot that holds nothing yet"
                )
                self.out.add(Finding(code, msg, op.span, step, dst, chunk, None, "{}"))

    def failing_chunks(self) -> np.ndarray:
        """Chunks whose required slots do not hold the expected fingerprint."""
        p, n = self.s.nranks, self.s.nchunks
        dest = chunk_dest(self.s.collective, p, n, self.s.root)
        every_origin = self.origin == EVERY
        expected = np.where(every_origin, self.h.sum(dtype=np.uint64), self.h[np.maximum(self.origin, 0)])
        bad = np.zeros(n, dtype=bool)
        cols = np.flatnonzero(dest == EVERY)
        if cols.size:
            sub = (self.state[:, cols] != expected[cols]) | ~self.held[:, cols]
            bad[cols] = sub.any(axis=0)
        cols = np.flatnonzero(dest != EVERY)
        if cols.size:
            rows = dest[cols]
            bad[cols] = (self.state[rows, cols] != expected[cols]) | ~self.held[rows, cols]
        return np.flatnonzero(bad)


def _bits_ids(bits: int) -> np.ndarray:
    return ChunkSet(bits).ids()


# --------------------------------------------------------------------------
# The exact re-trace of one chunk
# --------------------------------------------------------------------------


def _trace(schedule: Schedule, chunk: int, origin: int, dest: int, out: _Collector) -> None:
    """Follow one chunk exactly (origin counts per rank) and report why it fails."""
    p = schedule.nranks
    counts = np.zeros((p, p), dtype=np.int32)
    if origin == EVERY:
        counts[np.arange(p), np.arange(p)] = 1
    else:
        counts[origin, origin] = 1
    last: list[tuple[int, Op] | None] = [None] * p
    first_dup: tuple[int, int, Op, np.ndarray] | None = None
    for step in schedule.steps:
        ops = [op for op in step.ops if op.chunks.bits >> chunk & 1]
        if not ops:
            continue
        pairs = _pairs(ops, p, schedule.nchunks, step.index, None)
        copies = [(s, d, pr.recv_op(1 << chunk, Action.COPY)) for (s, d), pr in pairs.items() if pr.send & pr.copy]
        reduces = [
            (s, d, pr.recv_op(1 << chunk, Action.REDUCE)) for (s, d), pr in pairs.items() if pr.send & pr.reduce
        ]
        inc_c = counts[[s for s, _, _ in copies]]
        inc_r = counts[[s for s, _, _ in reduces]]
        rd = np.array([d for _, d, _ in reduces], dtype=np.int64)
        old_r = counts[rd]
        counts[[d for _, d, _ in copies]] = inc_c
        if reduces:
            np.add.at(counts, rd, inc_r)
            counts[rd] = np.minimum(counts[rd], _COUNT_CAP)
        for _, d, op in copies + reduces:
            last[d] = (step.index, op)
        if first_dup is None and reduces:
            dup_rows = np.flatnonzero((counts[rd] > 1).any(axis=1))
            if dup_rows.size:
                j = int(dup_rows[0])
                rank = int(rd[j])
                dup = np.flatnonzero(counts[rank] > 1)
                into = [i for i in range(len(reduces)) if reduces[i][1] == rank]
                hit = [i for i in into if (inc_r[i][dup] > 0).any() and (old_r[i][dup] > 0).any()]
                first_dup = (step.index, rank, reduces[(hit or into)[0]][2], dup)
    required = np.arange(p) if dest == EVERY else np.array([dest])
    expected = np.ones(p, dtype=np.int32) if origin == EVERY else np.eye(1, p, origin, dtype=np.int32)[0]
    failing = required[(counts[required] != expected).any(axis=1)]
    if failing.size == 0:
        return
    exp_text = _format_counts(expected)
    doubled = failing[(counts[failing] > 1).any(axis=1)]
    short = failing[~(counts[failing] > 1).any(axis=1)]
    if doubled.size:
        r = int(doubled[0])
        final = _format_counts(counts[r])
        more = f"; {doubled.size - 1} other ranks also end with it counted twice" if doubled.size > 1 else ""
        if first_dup is not None:
            st, rank, op, dup = first_dup
            msg = (
                f"step {st}: rank {rank} reduces chunk {chunk} received from rank {op.peer} into a slot that "
                f"already holds the contributions of ranks {_fmt_ids(dup)}, so they are counted twice "
                f"(at the end rank {r} holds {final}, expected {exp_text}{more})"
            )
            out.add(Finding("double-count", msg, op.span, st, rank, chunk, exp_text, final))
        else:  # cannot happen: counts only grow past 1 through a reduce
            msg = f"after the last step rank {r} holds chunk {chunk} as {final}, expected {exp_text}{more}"
            out.add(Finding("double-count", msg, schedule.span, None, r, chunk, exp_text, final))
    if short.size:
        r = int(short[0])
        row = counts[r]
        actual = _format_counts(row)
        missing = np.flatnonzero((expected > 0) & (row == 0))
        extra = np.flatnonzero((expected == 0) & (row > 0))
        what = "nothing" if not row.any() else f"the contributions of ranks {actual}"
        diff = []
        if missing.size:
            diff.append(f"missing {_fmt_ids(missing)}")
        if extra.size:
            diff.append(f"unexpected {_fmt_ids(extra)}")
        more = f"; {short.size - 1} other ranks also fail for this chunk" if short.size > 1 else ""
        writer = last[r]
        if writer is None:
            where, span, st = "it is never written", schedule.span, None
        else:
            st, op = writer
            where, span = f"last written at step {st} by its receive from rank {op.peer}", op.span
        msg = (
            f"after the last step rank {r} holds {what} for chunk {chunk}, expected {exp_text} "
            f"({', '.join(diff)}); {where}{more}"
        )
        out.add(Finding("postcondition", msg, span, st, r, chunk, exp_text, actual))


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------


def check(schedule: Schedule, *, max_findings: int = 20) -> CheckReport:
    """Check `schedule` against its collective's contract; see the module docstring."""
    p, n = schedule.nranks, schedule.nchunks
    out = _Collector(max(1, max_findings))
    problem = layout_error(schedule.collective, p, n)
    if problem is not None:
        out.add(Finding("layout", problem, schedule.span, None, None, None, None, None))
    elif schedule.collective.has_root and (schedule.root is None or not 0 <= schedule.root < p):
        msg = f"{schedule.collective.value} needs a root in 0..{p - 1}, got {schedule.root}"
        out.add(Finding("root-out-of-range", msg, schedule.span, None, None, None, None, None))
    dataflow = out.total == 0
    fp = _Fingerprint(schedule, out, dataflow)
    fp.run()
    if dataflow:
        failing = fp.failing_chunks()
        dest = chunk_dest(schedule.collective, p, n, schedule.root)
        for c in failing[:_MAX_TRACED_CHUNKS].tolist():
            _trace(schedule, c, int(fp.origin[c]), int(dest[c]), out)
        rest = failing[_MAX_TRACED_CHUNKS:]
        if rest.size:
            msg = f"{rest.size} more chunks fail the postcondition (not traced): {_fmt_ids(rest)}"
            out.add(Finding("postcondition", msg, schedule.span, None, None, None, None, None))
    findings, omitted = out.select()
    vector = max(1, n // p if schedule.collective is Collective.ALLTOALL else n)
    sent, received = max(fp.sent, default=0), max(fp.received, default=0)
    stats = Stats(
        steps=fp.steps,
        messages=fp.messages,
        max_chunks_sent=sent,
        max_chunks_received=received,
        max_sent_fraction=sent / vector,
        max_received_fraction=received / vector,
        max_fan_out=fp.fan_out,
        max_fan_in=fp.fan_in,
    )
    return CheckReport(
        algorithm=schedule.algorithm,
        params=tuple(schedule.params),
        nranks=p,
        ok=out.total == 0,
        findings=findings,
        stats=stats,
        omitted=omitted,
    )
