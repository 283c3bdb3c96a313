"""Compression points: slot states, their misuse, and the error a schedule's outputs can carry.

Runs only on schedules that compress (docs/compression.md).  Every buffer slot
(rank, chunk) is either *raw* or *compressed* with one codec.  Per step, the
local ops (``compress``, ``decompress``) apply first, in program order; then
every send reads the buffer, and the receives land (copies, then reduces), as in
the rest of the verifier.  A send may compress the message on the wire (its
``codec``): the receiver gets raw data that went through one compression; a
send of a compressed slot forwards its payload and the receiver's slot is
compressed with the same codec.

Misuse is reported as findings: a send and its receive naming different codecs
(``codec-mismatch``), compressing compressed data (``compress-compressed``,
``wire-compress-compressed``), decompressing raw data (``decompress-raw``),
compressing or decompressing a slot that holds nothing (``compress-not-held``),
a reduce of compressed data unless both sides hold the same homomorphic codec
(``reduce-compressed``) or of raw with compressed data (``reduce-mixed``), an
output still compressed at the end (``compressed-output``), and op codecs that
are not codec specs (``bad-codec``).

Error propagation (compression.md §3.3), per slot: ``E`` the worst-case absolute
error, ``V`` its variance estimate, ``A`` a bound on the magnitude of the data
(inputs ``|x| <= input_bound``) and ``H`` the lossy compressions in the data's
dataflow tree.  Copies and sends keep them; a lossy compression adds
``abs_error(A)`` to ``E`` and ``A``, ``rms_error(A)**2`` to ``V`` and 1 to ``H``,
except when the codec is idempotent and the data is already on its grid
(decompressed from that codec and not changed since); a reduce adds them up.
A codec without a sound bound makes ``E`` infinite.

Traffic on the wire: a chunk a rank sends travels raw, or compressed when the send
names a codec or the slot it reads is compressed; a compressed chunk counts as the
codec's worst-case size (`Codec.max_compressed_bytes`, for large messages of float32
data, as the simulator charges it) over its raw size.  The most a rank sends and
receives this way, as fractions of the vector, go with the error figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from collc.codecs import Codec, parse_codec
from collc.collectives import EVERY, chunk_dest, chunk_origin, vector_chunks
from collc.diagnostics import shorten
from collc.ir import Action, Op, OpKind, Schedule, Step
from collc.verify.findings import Collector, Finding, bits_ids, chunks_word, ids_bits, lowest, them

__all__ = ["ErrorAnalysis", "ErrorStats", "analyse", "fmt_bound", "wire_ratio"]

_RAW = 0  # slot state: raw; k > 0: compressed with codec k
_WIRE_ELEMENTS = 1 << 20  # a large message: the compressed size per raw byte of a codec is taken at this size


def wire_ratio(codec: Codec) -> float:
    """The worst-case compressed size of a large message of float32 data over its raw size."""
    return codec.max_compressed_bytes(_WIRE_ELEMENTS) / (4 * _WIRE_ELEMENTS)


@dataclass(frozen=True, slots=True)
class ErrorStats:
    """The compression summary of a schedule, over its output slots (rank, chunk)."""

    lossy_hops: int  # the most lossy compressions in an output element's dataflow tree
    error_bound: float  # the largest worst-case absolute error of an output element (inf: unbounded)
    rms_error: float  # the largest rms error estimate of an output element
    worst_rank: int | None  # where error_bound is reached
    worst_chunk: int | None
    input_bound: float  # the inputs' magnitude bound the figures assume
    codecs: tuple[str, ...]  # the codecs the schedule uses, canonical specs
    unbounded: tuple[str, ...]  # codecs without a sound bound that some output went through
    max_wire_sent_fraction: float = 0.0  # the most a rank sends on the wire, compressed chunks at their codec's size
    max_wire_received_fraction: float = 0.0  # ... and receives (fractions of the vector, as Stats)


@dataclass(frozen=True, slots=True, eq=False)
class ErrorAnalysis:
    """Per-slot figures at the end of the schedule, shape (nranks, nchunks), and their summary."""

    bound: np.ndarray  # E
    rms: np.ndarray  # sqrt(V)
    hops: np.ndarray  # H
    compressed: np.ndarray  # bool: the slot ends compressed
    stats: ErrorStats
    worst_op: Op | None  # the last op that added error to the slot where stats.error_bound is reached


def _is(bits: int) -> str:
    return "is" if bits.bit_count() == 1 else "are"


@dataclass(frozen=True, slots=True)
class _Seg:
    """Matched chunks moving from ``src`` to ``dst`` in one step, with the sender's wire codec."""

    src: int
    dst: int
    bits: int
    wire: int  # codec index, 0 for none
    reduce: bool
    op: Op  # the receive
    send: Op


class _Pass:
    def __init__(self, schedule: Schedule, out: Collector | None, input_bound: float, dtype: str) -> None:
        self.s = schedule
        self.out = out
        self.dtype = dtype
        p, n = schedule.nranks, schedule.nchunks
        self.p, self.n = p, n
        self.specs: list[str] = [""]
        self.codecs: list[Codec | None] = [None]
        self.ratios: list[float] = [1.0]  # per codec index: on-wire size over raw size (raw: 1)
        self.wire_sent = np.zeros(p)  # chunks on the wire per rank, a compressed chunk counting its ratio
        self.wire_received = np.zeros(p)
        self.index: dict[str, int] = {}
        self.errors: dict[tuple[int, float], tuple[float, float]] = {}
        self.unbounded: set[int] = set()
        origin = chunk_origin(schedule.collective, p, n, schedule.root)
        held = (origin[None, :] == EVERY) | (origin[None, :] == np.arange(p)[:, None])
        self.held = held.reshape(-1).copy()
        self.state = np.zeros(p * n, dtype=np.int16)
        self.grid = np.zeros(p * n, dtype=np.int16)  # raw data on the grid of this idempotent codec (0: none)
        self.E = np.zeros(p * n)
        self.V = np.zeros(p * n)
        self.A = np.where(self.held, float(input_bound), 0.0)
        self.H = np.zeros(p * n, dtype=np.int64)
        self.writer = np.full(p * n, -1, dtype=np.int64)  # index into self.writers: the op that last set the slot
        self.blame = np.full(p * n, -1, dtype=np.int64)  # ... the last op that added error to the slot's data
        self.writers: list[Op] = []

    # ------------------------------------------------------------ codecs
    def codec_index(self, spec: str | None, op: Op, step: int) -> int:
        """The index of ``spec`` in the codec table (0 when it is None or not a codec, reported)."""
        if spec is None:
            return 0
        k = self.index.get(spec)
        if k is None:
            try:
                codec = parse_codec(spec)
            except (ValueError, TypeError) as err:
                msg = f"step {step}: rank {op.rank} names codec {shorten(spec)!r}: {err}"
                self.add("bad-codec", msg, op, step, None)
                self.index[spec] = 0
                return 0
            k = self.index[spec] = len(self.specs)
            self.specs.append(spec)
            self.codecs.append(codec)
            self.ratios.append(wire_ratio(codec))
        return k

    def is_idempotent(self, k: np.ndarray) -> np.ndarray:
        table = np.array([c is not None and c.idempotent for c in self.codecs])
        return table[k]

    def compress(self, k: int, idx: np.ndarray, grid: np.ndarray, E: np.ndarray, V: np.ndarray,
                 A: np.ndarray, H: np.ndarray) -> np.ndarray:  # fmt: skip
        """One compression with codec ``k`` of the data at positions ``idx`` of the given arrays.

        The positions where it adds error (a lossy codec, the data not already on its grid)."""
        codec = self.codecs[k]
        assert codec is not None
        if not codec.lossy or idx.size == 0:
            return idx[:0]
        if codec.idempotent:
            idx = idx[grid[idx] != k]  # already on the grid: re-compressing changes nothing
            if idx.size == 0:
                return idx
        bounds, inverse = np.unique(A[idx], return_inverse=True)
        figures = np.array([self.error(k, float(a)) for a in bounds]).reshape(-1, 2)
        e, r = figures[inverse, 0], figures[inverse, 1]
        if np.isinf(e).any():
            self.unbounded.add(k)
        E[idx] += e
        V[idx] += r * r
        A[idx] += e
        H[idx] += 1
        return idx

    def in_range(
        self,
        k: int,
        idx: np.ndarray,
        A: np.ndarray,
        grid: np.ndarray,
        where: Callable[[int], tuple[Op, int]],
        step: int,
        cols: np.ndarray | None = None,
    ) -> None:
        """Report data at ``idx`` that codec ``k`` may refuse: magnitudes beyond what it encodes."""
        codec = self.codecs[k]
        limit = getattr(codec, "max_magnitude", math.inf)
        over = idx[(A[idx] > limit) & (grid[idx] != k)]
        if not over.size or not self.room("codec-range"):
            return
        first = int(over[np.argmax(A[over])])
        op, rank = where(first)
        chunk = int(cols[first]) if cols is not None else first % self.n
        msg = (
            f"step {step}: rank {rank} compresses chunk {chunk} with {self.name(k)}, but its values may reach "
            f"{fmt_bound(float(A[first]))} in magnitude, beyond the {limit:.4g} the codec encodes "
            f"(a larger error bound, or smaller inputs: --input-bound)"
        )
        self.add("codec-range", msg, op, step, chunk)

    def error(self, k: int, a: float) -> tuple[float, float]:
        key = (k, a)
        got = self.errors.get(key)
        if got is None:
            codec = self.codecs[k]
            assert codec is not None
            e = codec.abs_error(a, self.dtype) if math.isfinite(a) else math.inf
            r = codec.rms_error(a) if math.isfinite(a) else math.inf
            got = self.errors[key] = (float(e), float(r))
        return got

    # ------------------------------------------------------------ findings
    def add(self, code: str, message: str, op: Op, step: int | None, chunk: int | None) -> None:
        if self.out is not None:
            self.out.add(Finding(code, message, op.span, step, op.rank, chunk, None, None))

    def room(self, code: str) -> bool:
        return self.out is not None and self.out.room(code)

    def name(self, k: int) -> str:
        return self.specs[k] if k else "raw"

    # ------------------------------------------------------------ the pass
    def run(self) -> None:
        for step in self.s.steps:
            self.step(step)

    def step(self, step: Step) -> None:
        local = [op for op in step.ops if op.kind.local]
        for op in local:
            self.local(op, step.index)
        segs = self.match([op for op in step.ops if not op.kind.local], step.index)
        if segs:
            self.transfer(segs, step.index)

    def slots(self, op: Op, step: int) -> np.ndarray | None:
        """The flat slot indices a local op touches (None when it is ill-formed, reported)."""
        if not 0 <= op.rank < self.p:
            msg = f"step {step}: a {op.kind.value} op of rank {op.rank}, but ranks are 0..{self.p - 1}"
            self.add("rank-out-of-range", msg, op, step, None)
            return None
        bits = op.chunks.bits
        if bits.bit_length() > self.n:
            bad = bits & ~((1 << self.n) - 1)
            msg = f"step {step}: rank {op.rank} {op.kind.value}es {chunks_word(bad)}, but chunks are 0..{self.n - 1}"
            self.add("chunk-out-of-range", msg, op, step, bad.bit_length() - 1)
            bits &= (1 << self.n) - 1
        return op.rank * self.n + bits_ids(bits)

    def local(self, op: Op, step: int) -> None:
        idx = self.slots(op, step)
        if idx is None or idx.size == 0:
            return
        verb = op.kind.value
        empty = ~self.held[idx]
        if empty.any() and self.room("compress-not-held"):
            bad = self.bits(idx[empty])
            msg = f"step {step}: rank {op.rank} {verb}es {chunks_word(bad)} but holds no data for {them(bad)}"
            self.add("compress-not-held", msg, op, step, lowest(bad))
        state = self.state[idx]
        if op.kind is OpKind.COMPRESS:
            k = self.codec_index(op.codec, op, step)
            if op.codec is None:
                self.add("bad-codec", f"step {step}: rank {op.rank} compresses without naming a codec", op, step, None)
            already = ~empty & (state != _RAW)
            if already.any() and self.room("compress-compressed"):
                bad = self.bits(idx[already])
                first = int(state[already][0])
                msg = (
                    f"step {step}: rank {op.rank} compresses {chunks_word(bad)}, which {_is(bad)} "
                    f"already compressed with {self.name(first)}; decompress first"
                )
                self.add("compress-compressed", msg, op, step, lowest(bad))
            if not k:
                return
            ok = idx[~empty & (state == _RAW)]
            self.in_range(k, ok, self.A, self.grid, lambda _: (op, op.rank), step)
            lossy = self.compress(k, ok, self.grid, self.E, self.V, self.A, self.H)
            if lossy.size:
                self.blame[lossy] = self.op_index(op)
            self.state[ok] = k
            self.grid[ok] = k
        else:
            raw = ~empty & (state == _RAW)
            if raw.any() and self.room("decompress-raw"):
                bad = self.bits(idx[raw])
                msg = f"step {step}: rank {op.rank} decompresses {chunks_word(bad)}, which {_is(bad)} not compressed"
                self.add("decompress-raw", msg, op, step, lowest(bad))
            ok = idx[~empty & (state != _RAW)]
            ks = self.state[ok]
            self.grid[ok] = np.where(self.is_idempotent(ks), ks, 0)
            self.state[ok] = _RAW
        self.written(op, idx[~empty])

    def bits(self, idx: np.ndarray) -> int:
        return ids_bits(idx % self.n)

    def written(self, op: Op, idx: np.ndarray) -> None:
        if idx.size:
            self.writer[idx] = self.op_index(op)

    def op_index(self, op: Op) -> int:
        """``op``'s index in ``self.writers`` (ops are added as they are needed)."""
        self.writers.append(op)
        return len(self.writers) - 1

    def match(self, ops: Sequence[Op], step: int) -> list[_Seg]:
        """The matched transfers of a step, each with the codec the sender puts on the wire."""
        p, mask = self.p, (1 << self.n) - 1
        sends: dict[tuple[int, int], list[tuple[int, int, Op]]] = {}
        recvs: list[tuple[Op, int, int]] = []
        for op in ops:
            if not (0 <= op.rank < p and 0 <= op.peer < p and op.rank != op.peer):
                continue  # reported by the fingerprint pass
            k = self.codec_index(op.codec, op, step)
            bits = op.chunks.bits & mask
            if op.kind is OpKind.SEND:
                sends.setdefault((op.rank, op.peer), []).append((bits, k, op))
            else:
                recvs.append((op, bits, k))
        for (src, dst), sent in sends.items():
            self.count_wire(src, dst, sent)
        segs: list[_Seg] = []
        for op, bits, k in recvs:
            for sent, wire, send_op in sends.get((op.peer, op.rank), ()):
                both = bits & sent
                if not both:
                    continue
                if wire != k and self.room("codec-mismatch"):
                    msg = (
                        f"step {step}: rank {op.peer} sends {chunks_word(both)} to rank {op.rank} "
                        f"{'compressed with ' + self.name(wire) if wire else 'uncompressed'}, but rank {op.rank} "
                        f"receives {them(both)} {'compressed with ' + self.name(k) if k else 'uncompressed'} "
                        f"(line {send_op.span.line})"
                    )
                    self.add("codec-mismatch", msg, op, step, lowest(both))
                segs.append(_Seg(op.peer, op.rank, both, wire, op.action is Action.REDUCE, op, send_op))
        return segs

    def count_wire(self, src: int, dst: int, sent: list[tuple[int, int, Op]]) -> None:
        """The chunks ``src`` sends ``dst`` in a step (merged over its sends), at their size on the wire."""
        covered, weight = 0, 0.0
        for bits, k, _ in sent:  # a chunk carried twice counts once, with the codec of its first send
            new = bits & ~covered
            if not new:
                continue
            covered |= new
            if k:  # compressed on the wire
                weight += new.bit_count() * self.ratios[k]
                continue
            slots = src * self.n + bits_ids(new)
            state = self.state[slots][self.held[slots]]  # a compressed slot travels compressed
            weight += new.bit_count() - state.size + float(np.asarray(self.ratios)[state].sum())
        self.wire_sent[src] += weight
        self.wire_received[dst] += weight

    def transfer(self, segs: list[_Seg], step: int) -> None:
        n = self.n
        ids = [bits_ids(seg.bits) for seg in segs]
        sizes = np.array([a.size for a in ids])
        seg_of = np.repeat(np.arange(len(segs)), sizes)
        cols = np.concatenate(ids)
        src = np.repeat([seg.src * n for seg in segs], sizes) + cols
        dst = np.repeat([seg.dst * n for seg in segs], sizes) + cols
        # every send reads the buffer as it is now (after the step's local ops), before any receive lands
        held, state, grid = self.held[src], self.state[src], self.grid[src]
        E, V, A, H, blame = self.E[src], self.V[src], self.A[src], self.H[src], self.blame[src]
        wire = np.repeat([seg.wire for seg in segs], sizes).astype(np.int16)
        if wire.any():
            on_wire = np.flatnonzero(wire)
            twice = on_wire[held[on_wire] & (state[on_wire] != _RAW)]
            if twice.size:
                self.report(segs, seg_of, cols, twice, state, "wire-compress-compressed", step)
            for k in np.unique(wire[on_wire]).tolist():
                at = on_wire[(wire[on_wire] == k) & (state[on_wire] == _RAW)]
                self.in_range(k, at, A, grid, lambda i: (segs[seg_of[i]].send, segs[seg_of[i]].src), step, cols)
                lossy = self.compress(k, at, grid, E, V, A, H)  # the step's own copies of the senders' figures
                if lossy.size:
                    first = len(self.writers)
                    self.writers.extend(seg.send for seg in segs)
                    blame[lossy] = first + seg_of[lossy]
                codec = self.codecs[k]
                assert codec is not None
                if codec.lossy:
                    grid[at] = k if codec.idempotent else 0
        reduce = np.repeat([seg.reduce for seg in segs], sizes)
        c = np.flatnonzero(~reduce)
        if c.size:
            d = dst[c]
            self.held[d], self.state[d], self.grid[d] = held[c], state[c], grid[c]
            self.E[d], self.V[d], self.A[d], self.H[d], self.blame[d] = E[c], V[c], A[c], H[c], blame[c]
        r = np.flatnonzero(reduce)
        if r.size:
            d = dst[r]
            mine, theirs = self.state[d], state[r]
            both = held[r] & self.held[d]
            bad = both & ((mine != theirs) | ((mine != _RAW) & ~self.homomorphic(mine)))
            if bad.any():
                self.report(segs, seg_of, cols, r[bad], state, "reduce", step, mine[bad])
            self.state[d] = np.where(self.held[d], mine, theirs)
            self.grid[d] = np.where(self.state[d] != _RAW, self.state[d], 0)
            self.blame[d] = np.where(blame[r] >= 0, blame[r], self.blame[d])
            for mine_arr, theirs_arr in ((self.E, E), (self.V, V), (self.A, A), (self.H, H)):
                np.add.at(mine_arr, d, theirs_arr[r])
            self.held[d] |= held[r]
        self.writer[dst] = len(self.writers) + seg_of
        self.writers.extend(seg.op for seg in segs)

    def homomorphic(self, k: np.ndarray) -> np.ndarray:
        table = np.array([c is not None and c.homomorphic_sum for c in self.codecs])
        return table[k]

    def report(
        self,
        segs: list[_Seg],
        seg_of: np.ndarray,
        cols: np.ndarray,
        where: np.ndarray,
        state: np.ndarray,
        kind: str,
        step: int,
        mine: np.ndarray | None = None,
    ) -> None:
        """One finding per transfer with bad elements at ``where`` (``kind``: wire-compress-compressed or reduce)."""
        for k in np.unique(seg_of[where]).tolist():
            at = where[seg_of[where] == k]
            seg = segs[k]
            bad = ids_bits(cols[at])
            theirs = int(state[at[0]])
            if kind == "wire-compress-compressed":
                if not self.room(kind):
                    continue
                msg = (
                    f"step {step}: rank {seg.src} sends {chunks_word(bad)} to rank {seg.dst} compressed with "
                    f"{self.name(seg.wire)}, but {them(bad)} {_is(bad)} already "
                    f"compressed with {self.name(theirs)}: a compressed payload is forwarded as it is"
                )
                self.add(kind, msg, seg.op, step, lowest(bad))
                continue
            assert mine is not None
            ours = int(mine[np.searchsorted(where, at[0])])
            if ours == theirs or (ours and theirs):
                code = "reduce-compressed"
                what = (
                    f"both compressed with {self.name(ours)}, which is not homomorphic"
                    if ours == theirs
                    else f"compressed with {self.name(ours)} and {self.name(theirs)}"
                )
            else:
                code = "reduce-mixed"
                what = (
                    f"received compressed with {self.name(theirs)} into raw data"
                    if theirs
                    else f"received raw into data compressed with {self.name(ours)}"
                )
            if self.room(code):
                msg = (
                    f"step {step}: rank {seg.dst} reduces {chunks_word(bad)} from rank {seg.src}, {what}; "
                    f"decompress first (a reduce on compressed data needs both sides compressed with the same "
                    f"homomorphic codec)"
                )
                self.add(code, msg, seg.op, step, lowest(bad))

    # ------------------------------------------------------------ the end
    def finish(self, input_bound: float) -> ErrorAnalysis:
        p, n = self.p, self.n
        vector = vector_chunks(self.s.collective, p, n)
        dest = chunk_dest(self.s.collective, p, n, self.s.root)
        out = ((dest[None, :] == EVERY) | (dest[None, :] == np.arange(p)[:, None])).reshape(-1) & self.held
        left = np.flatnonzero(out & (self.state != _RAW))
        for rank in np.unique(left // n).tolist():
            if not self.room("compressed-output"):
                continue
            at = left[left // n == rank]
            bad = self.bits(at)
            k = int(self.state[at[0]])
            w = int(self.writer[at[0]])
            op = self.writers[w] if w >= 0 else None
            msg = (
                f"after the last step rank {rank} still holds {chunks_word(bad)} compressed with {self.name(k)}; "
                f"an output must be decompressed"
                + (f" (last written by line {op.span.line})" if op is not None else "")
            )
            if self.out is not None:
                span = op.span if op is not None else self.s.span
                self.out.add(Finding("compressed-output", msg, span, None, rank, lowest(bad), "raw", self.name(k)))
        outputs = np.flatnonzero(out)
        if outputs.size:
            worst = outputs[int(np.argmax(self.E[outputs]))]
            stats_figures = (int(self.H[outputs].max()), float(self.E[worst]), math.sqrt(float(self.V[outputs].max())))
            where: tuple[int | None, int | None] = (int(worst // n), int(worst % n))
        else:
            stats_figures, where = (0, 0.0, 0.0), (None, None)
        stats = ErrorStats(
            lossy_hops=stats_figures[0],
            error_bound=stats_figures[1],
            rms_error=stats_figures[2],
            worst_rank=where[0],
            worst_chunk=where[1],
            input_bound=input_bound,
            codecs=tuple(self.specs[1:]),
            unbounded=tuple(self.specs[k] for k in sorted(self.unbounded)),
            max_wire_sent_fraction=float(self.wire_sent.max(initial=0.0)) / vector,
            max_wire_received_fraction=float(self.wire_received.max(initial=0.0)) / vector,
        )
        w = int(self.blame[worst]) if outputs.size else -1
        shape = (p, n)
        return ErrorAnalysis(
            bound=self.E.reshape(shape),
            rms=np.sqrt(self.V).reshape(shape),
            hops=self.H.reshape(shape),
            compressed=(self.state != _RAW).reshape(shape),
            stats=stats,
            worst_op=self.writers[w] if w >= 0 else None,
        )


def analyse(
    schedule: Schedule, out: Collector | None = None, *, input_bound: float = 1.0, dtype: str = "float32"
) -> ErrorAnalysis:
    """Run the compression pass over ``schedule``; its findings go to ``out``.

    ``input_bound`` bounds the inputs' magnitudes; ``dtype`` is the data's (float64 data
    is rounded to float32 by the lossy codecs, which they count).  The schedule's layout
    must be valid (`collc.collectives.layout_error`).
    """
    if math.isnan(input_bound) or not input_bound >= 0:
        raise ValueError(f"the input bound must be a number >= 0, got {input_bound!r}")
    run = _Pass(schedule, out, input_bound, dtype)
    run.run()
    return run.finish(input_bound)


def fmt_bound(value: float) -> str:
    """An error figure for people: ``0.007``, ``1.5e-05``, or ``unbounded``."""
    return "unbounded" if math.isinf(value) else f"{value:.4g}"
