"""A flow-level simulator of a Schedule on a topology: the time and goodput per vector size.

The model (``docs/simulate.md`` describes it, with the Swing paper's parameters):

* Every SEND op of a step is one message ``op.rank -> op.peer`` carrying its chunks.  A
  message's size in elements is the sum of its chunks' sizes for the vector being
  simulated (`collc.collectives.element_offsets`); its bytes are ``elements * itemsize``,
  or ``max_compressed_bytes(elements)`` of its codec when it travels compressed: a send
  with a codec, or the chunks the sender holds compressed (collective-level compression:
  their payloads are forwarded, at no codec cost).  A send of both kinds of chunks counts
  as one message per kind.
* Messages are routed by `collc.topology` (minimal, dimension-ordered; ``adaptive``
  splits flows evenly over minimal paths, the flow-level stand-in for minimal adaptive
  routing), or by `collc.hierarchy` on nodes of several ranks, where links differ in
  bandwidth and a message's latency is the sum of what it crosses.  A link's load is the
  bytes of all the messages crossing it, weighted by their share.
* ``execution="lockstep"`` (the default): the messages of a step all run concurrently and
  the time of a step is::

      step_overhead
      + max over messages of latency (hops * (link_latency + hop_latency) on one level)
      + max over links of load / link bandwidth
      + max over ranks of encoded bytes / encode rate + decoded bytes / decode rate

  where a rank's encoded bytes are the raw bytes of its sends with a codec and its local
  COMPRESS ops, its decoded bytes those of its receives with a codec and its DECOMPRESS
  ops.  A step with local ops only costs the overhead and its codec time; a message of
  zero bytes still costs its latency.  The schedule's time is the sum over steps, step i
  counted ``weights[i]`` times (a caller may sample a long loop and let a step stand for
  others).
* ``execution="dataflow"``: no barrier; a rank starts a step's sends when the data they
  read is there, links serve messages first come first served (`collc.eventsim`).

Routes and link loads do not depend on the size: every step is routed once.  Chunk sizes
are ``base`` or ``base + 1`` (`collc.collectives.chunk_offsets`), so a chunk set S holds
``base*|S| + |S & E|`` elements, E the chunks holding an extra element; the load of a link
is then ``base * (its chunk-count load) + (its extra-element load)``, and the second term
is only computed for sizes where some chunk holds an extra element.  A schedule with chunk
weights (``Schedule.chunk_weights``) has chunks in proportion to them, and its sets' sizes are
summed exactly from `collc.collectives.element_offsets`, so that message bytes follow the weights
in both executions.

``simulate(..., traffic=True)`` and `traffic` also count the bytes a schedule moves, in all and over
the topology's global links (`collc.traffic`).

What is not modelled: packets, buffers and flow control (in lockstep a link shares its
bandwidth fairly and instantly), reduction arithmetic, and overlap of a rank's codec work
with its communication.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from collc import eventsim
from collc.codecs import Codec, parse_codec
from collc.collectives import count_error, element_offsets
from collc.ir import Action, ChunkSet, Op, OpKind, Schedule
from collc.topology import Topology
from collc.topology_groups import global_link_mask
from collc.traffic import Traffic, count_traffic

__all__ = [
    "EXECUTIONS",
    "PARTS",
    "STEP_OVERHEAD",
    "NetworkModel",
    "SimRow",
    "Simulation",
    "StepFigures",
    "Traffic",
    "congestion_deficiency",
    "link_message_counts",
    "simulate",
    "trace",
    "traffic",
]

STEP_OVERHEAD = 0.48e-6
"""Seconds every step costs on top of latency and bandwidth (software and synchronisation).
Calibrated once, not per topology: the least-squares fit (on relative error) of the Swing paper's
32-byte runtimes on a 64x64 torus (Swing, recursive doubling, bucket, Hamiltonian rings), which
``python benchmarks/swing_paper.py --calibrate`` recomputes (0.484 us)."""

EXECUTIONS = ("lockstep", "dataflow")
"""How steps follow each other: ``lockstep`` (every step starts when the previous one has finished
everywhere) or ``dataflow`` (a rank starts a send when its data is there, `collc.eventsim`)."""

PARTS = eventsim.PARTS
"""The components of `SimRow.parts`: overhead, latency, transfer, codec (seconds)."""


@dataclass(frozen=True)
class NetworkModel:
    """The parameters of the flow-level model (defaults: the Swing paper's SST setup)."""

    link_bandwidth: float = 50e9  # bytes/s per directed link: 400 Gb/s
    link_latency: float = 100e-9  # s per hop on the wire
    hop_latency: float = 300e-9  # s per hop of router processing (input + output)
    step_overhead: float = STEP_OVERHEAD  # s per step
    codec_bandwidth: float = 100e9  # bytes/s of raw data a rank encodes or decodes
    adaptive: bool = True  # split flows over minimal paths (see collc.topology)
    itemsize: int = 4  # bytes per element (float32)
    execution: str = "lockstep"  # or "dataflow" (EXECUTIONS)
    encode_bandwidth: float | None = None  # bytes/s of raw data encoded; None: codec_bandwidth
    decode_bandwidth: float | None = None  # bytes/s of raw data decoded; None: codec_bandwidth

    def __post_init__(self) -> None:
        for name in ("link_bandwidth", "codec_bandwidth", "encode_bandwidth", "decode_bandwidth"):
            value = getattr(self, name)
            if value is None and name != "link_bandwidth" and name != "codec_bandwidth":
                continue
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"NetworkModel: {name} must be a positive number, got {value!r}")
        if self.execution not in EXECUTIONS:
            raise ValueError(f"NetworkModel: execution must be one of {', '.join(EXECUTIONS)}, got {self.execution!r}")
        for name in ("link_latency", "hop_latency", "step_overhead"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"NetworkModel: {name} must be a non-negative number, got {value!r}")
        if isinstance(self.itemsize, bool) or not isinstance(self.itemsize, int) or self.itemsize < 1:
            raise ValueError(f"NetworkModel: itemsize must be a positive integer, got {self.itemsize!r}")

    @property
    def per_hop(self) -> float:
        """Seconds per hop: wire plus router."""
        return self.link_latency + self.hop_latency

    @property
    def encode_rate(self) -> float:
        """Raw bytes per second a rank encodes."""
        return self.encode_bandwidth if self.encode_bandwidth is not None else self.codec_bandwidth

    @property
    def decode_rate(self) -> float:
        """Raw bytes per second a rank decodes."""
        return self.decode_bandwidth if self.decode_bandwidth is not None else self.codec_bandwidth


@dataclass(frozen=True)
class SimRow:
    """The simulated time of one vector size."""

    size_bytes: int
    time_s: float
    goodput_bytes_per_s: float  # size / time
    parts: tuple[float, ...] = ()  # the time split as PARTS: overhead, latency, transfer, codec
    traffic: Traffic | None = None  # with simulate(..., traffic=True)

    def breakdown(self) -> dict[str, float]:
        """`parts` by name (lockstep: summed over steps; dataflow: along the critical path)."""
        return dict(zip(PARTS, self.parts, strict=True))


@dataclass(frozen=True)
class StepFigures:
    """Size-independent figures of one step, and its time at every simulated size."""

    index: int  # position in schedule.steps
    phase: str
    messages: int
    max_hops: int
    max_link_chunks: float  # the most chunks (weighted by route share) on one link
    weight: float  # how many steps this one stands for
    times_s: tuple[float, ...]  # one per row, unweighted; the lockstep time, whatever the execution


@dataclass(frozen=True)
class Simulation:
    """The result of `simulate`: one row per size, and per-step figures."""

    algorithm: str
    topology: str
    nranks: int
    model: NetworkModel
    rows: tuple[SimRow, ...]
    steps: tuple[StepFigures, ...]

    @property
    def sizes(self) -> np.ndarray:
        return np.array([r.size_bytes for r in self.rows], dtype=np.int64)

    @property
    def times(self) -> np.ndarray:
        return np.array([r.time_s for r in self.rows])

    @property
    def goodputs(self) -> np.ndarray:
        return np.array([r.goodput_bytes_per_s for r in self.rows])


# --------------------------------------------------------------------------
# The schedule, flattened once
# --------------------------------------------------------------------------


@dataclass
class _Tables:
    """Distinct chunk sets and message kinds of a schedule.

    A *set* is a distinct chunk bitset.  A *kind* is what a message's byte count depends
    on: kind ``u < len(set_bits)`` is a raw message carrying set u, kind
    ``len(set_bits) + j`` a compressed one, ``codec_kinds[j] = (set, codec index)``."""

    set_bits: list[int] = field(default_factory=list)
    codec_kinds: list[tuple[int, int]] = field(default_factory=list)
    codecs: list[Codec] = field(default_factory=list)
    _set_of_bits: dict[bytes, int] = field(default_factory=dict)
    _set_of_id: dict[int, int] = field(default_factory=dict)
    _codec_kind_of: dict[tuple[int, int], int] = field(default_factory=dict)
    _codec_of: dict[str, int] = field(default_factory=dict)

    def set_index(self, chunks: ChunkSet) -> int:
        u = self._set_of_id.get(id(chunks))  # ops often share one ChunkSet object
        if u is None:
            bits = chunks.bits
            # keyed by bytes, not by the int: int hashes are residues mod 2**61 - 1, which
            # collide for shifted intervals and would make the dict quadratic
            key = bits.to_bytes((bits.bit_length() + 7) // 8, "little")
            u = self._set_of_bits.get(key)
            if u is None:
                u = self._set_of_bits[key] = len(self.set_bits)
                self.set_bits.append(bits)
            self._set_of_id[id(chunks)] = u
        return u

    def codec_kind(self, u: int, codec: str) -> int:
        """``j`` of the compressed kind (set u, codec): message kind ``len(set_bits) + j``."""
        c = self._codec_of.get(codec)
        if c is None:
            c = self._codec_of[codec] = len(self.codecs)
            self.codecs.append(parse_codec(codec))
        j = self._codec_kind_of.get((u, c))
        if j is None:
            j = self._codec_kind_of[(u, c)] = len(self.codec_kinds)
            self.codec_kinds.append((u, c))
        return j


@dataclass
class _StepMessages:
    src: np.ndarray
    dst: np.ndarray
    kind: np.ndarray  # kind index per message
    codec_rank: np.ndarray  # ranks doing codec work, one entry per codec op
    codec_set: np.ndarray  # the chunk set that codec op encodes or decodes
    codec_decode: np.ndarray  # whether that codec op decodes (else it encodes)
    msg_op: np.ndarray  # the index in step.ops of each message's send
    op_set: np.ndarray  # the chunk set of every op of the step


class _Held:
    """Which chunks each rank holds compressed, and with what (schedules with compression points only)."""

    def __init__(self) -> None:
        self.codec: dict[tuple[int, int], str] = {}  # (rank, chunk) -> codec
        self.parts: list[ChunkSet] = []  # the sets `split` made, kept alive: _Tables caches sets by id

    def split(self, rank: int, chunks: ChunkSet) -> list[tuple[ChunkSet, str | None]]:
        """``chunks`` of ``rank`` grouped by how they are held: raw (None) or compressed with a codec."""
        groups: dict[str | None, list[int]] = {}
        for c in chunks:
            groups.setdefault(self.codec.get((rank, c)), []).append(c)
        if len(groups) == 1:
            return [(chunks, next(iter(groups)))]
        out = [(ChunkSet.of(cs), codec) for codec, cs in groups.items()]
        self.parts.extend(part for part, _ in out)
        return out

    def local(self, ops: Sequence[Op]) -> None:
        """A step's local ops, which run at its start, before its sends read the chunks."""
        for op in ops:
            if op.kind is OpKind.COMPRESS and op.codec is not None:
                self.codec.update(((op.rank, c), op.codec) for c in op.chunks)
            elif op.kind is OpKind.DECOMPRESS:
                for c in op.chunks:
                    self.codec.pop((op.rank, c), None)

    def land(self, ops: Sequence[Op]) -> None:
        """A step's receives, at its end: a copy of a compressed chunk (not compressed on the wire) stays compressed."""
        wire = {(op.rank, op.peer, c) for op in ops if op.kind is OpKind.SEND and op.codec for c in op.chunks}
        before = dict(self.codec)
        landed: dict[tuple[int, int], str | None] = {}
        for op in ops:
            if op.kind is OpKind.RECV and op.action is Action.COPY:
                for c in op.chunks:
                    held = before.get((op.peer, c)) if (op.peer, op.rank, c) not in wire else None
                    landed[(op.rank, c)] = held
        for key, codec in landed.items():
            if codec is None:
                self.codec.pop(key, None)
            else:
                self.codec[key] = codec


def _flatten(schedule: Schedule) -> tuple[_Tables, list[_StepMessages]]:
    tables = _Tables()
    raw: list[tuple[list[int], ...]] = []
    send, recv = OpKind.SEND, OpKind.RECV
    set_index, codec_kind = tables.set_index, tables.codec_kind
    held = _Held() if schedule.compresses() else None
    for step in schedule.steps:
        src: list[int] = []
        dst: list[int] = []
        sets: list[int] = []  # the set of each message
        ckind: list[int] = []  # its compressed kind j, or -1
        mop: list[int] = []  # its op
        crank: list[int] = []
        cset: list[int] = []
        cdec: list[int] = []
        opset: list[int] = []
        if held is not None:
            held.local(step.ops)
        for i, op in enumerate(step.ops):
            kind = op.kind
            codec = op.codec
            u = set_index(op.chunks)
            opset.append(u)
            if kind is send and codec is None and held is not None and held.codec:
                for part, payload in held.split(op.rank, op.chunks):  # forwarded payloads: no codec work
                    v = set_index(part)
                    src.append(op.rank)
                    dst.append(op.peer)
                    sets.append(v)
                    mop.append(i)
                    ckind.append(-1 if payload is None else codec_kind(v, payload))
            elif kind is send:
                src.append(op.rank)
                dst.append(op.peer)
                sets.append(u)
                mop.append(i)
                if codec is None:
                    ckind.append(-1)
                else:
                    ckind.append(codec_kind(u, codec))
                    crank.append(op.rank)
                    cset.append(u)
                    cdec.append(0)
            elif kind is recv:
                if codec is not None:
                    crank.append(op.rank)
                    cset.append(u)
                    cdec.append(1)
            else:  # COMPRESS / DECOMPRESS
                crank.append(op.rank)
                cset.append(u)
                cdec.append(int(kind is OpKind.DECOMPRESS))
        if held is not None:
            held.land(step.ops)
        raw.append((src, dst, sets, ckind, crank, cset, cdec, mop, opset))
    nsets = len(tables.set_bits)
    steps = []
    for src, dst, sets, ckind, crank, cset, cdec, mop, opset in raw:
        u, j = np.array(sets, dtype=np.int64), np.array(ckind, dtype=np.int64)
        steps.append(
            _StepMessages(
                np.array(src, dtype=np.int64),
                np.array(dst, dtype=np.int64),
                np.where(j < 0, u, nsets + j),
                np.array(crank, dtype=np.int64),
                np.array(cset, dtype=np.int64),
                np.array(cdec, dtype=bool),
                np.array(mop, dtype=np.int64),
                np.array(opset, dtype=np.int64),
            )
        )
    return tables, steps


# --------------------------------------------------------------------------
# Routing each step once
# --------------------------------------------------------------------------


@dataclass
class _StepPlan:
    """A routed step: its link intervals on compressed coordinates, and size-independent figures.

    The link loads of a step are piecewise constant between the distinct interval ends
    (``points``), so an interval ``[lo, hi)`` becomes ``[lo_c, hi_c)`` over those points and
    a load profile is a cumulative sum of ``+w`` at ``lo_c`` and ``-w`` at ``hi_c``.  Where
    links differ in bandwidth, ``inv_bw`` holds the seconds per byte of each such segment (one
    interval never mixes bandwidths, so neither does a segment that carries load)."""

    messages: int
    max_hops: int
    kinds: np.ndarray  # the distinct kinds of the step's messages
    lo: np.ndarray  # compressed interval starts
    hi: np.ndarray  # compressed interval ends
    kind: np.ndarray  # the kind of each interval's message
    weight: np.ndarray  # the route share of each interval
    points: int
    chunk_load_max: float  # the most chunks on one link
    raw_only: bool  # no message of the step travels compressed
    codec_rank: np.ndarray
    codec_set: np.ndarray
    codec_decode: np.ndarray
    latency: float  # the largest message latency in seconds
    inv_bw: np.ndarray | None = None  # seconds per byte of each segment; None: every link alike
    chunk_time_max: float = 0.0  # with inv_bw: the most chunks x seconds per byte on one link
    events: eventsim.StepInput | None = None  # what dataflow execution reads
    msg_kind: np.ndarray | None = None  # with traffic: the kind of every message
    span: np.ndarray | None = None  # with traffic: the links in every interval
    global_span: np.ndarray | None = None  # with traffic: the global links in every interval

    def max_load(self, per_kind: np.ndarray) -> float:
        """The most loaded link's load when a message of kind k weighs ``per_kind[k]``."""
        if self.lo.size == 0:
            return 0.0
        return float(self._profile(per_kind).max())

    def max_time(self, per_kind: np.ndarray) -> float:
        """The busiest link's time (load x seconds per byte), for links of different bandwidths."""
        if self.lo.size == 0:
            return 0.0
        assert self.inv_bw is not None
        return float((self._profile(per_kind) * self.inv_bw).max())

    def _profile(self, per_kind: np.ndarray) -> np.ndarray:
        w = self.weight * per_kind[self.kind]
        diff = np.bincount(self.lo, weights=w, minlength=self.points)
        diff -= np.bincount(self.hi, weights=w, minlength=self.points)
        return np.cumsum(diff)


def _plan_step(
    msgs: _StepMessages,
    topology: Topology,
    model: NetworkModel,
    kind_count: np.ndarray,
    kind_codec: np.ndarray,
    bandwidths: np.ndarray | None,
    global_prefix: np.ndarray | None = None,
    traffic: bool = False,
) -> _StepPlan:
    """Route one step.  With ``traffic``, also what `collc.traffic.count_traffic` reads; ``global_prefix`` is the
    running count of global links (``global_prefix[i]``: those below link i), None where there are none."""
    m = msgs.src.size
    empty_i = np.zeros(0, np.int64)
    codec = (msgs.codec_rank, msgs.codec_set, msgs.codec_decode)
    events = None
    if m == 0:
        if model.execution == "dataflow":
            none = np.zeros(0)
            events = eventsim.StepInput(empty_i, empty_i, empty_i, empty_i, empty_i, none, none, msgs.op_set)
        return _StepPlan(0, 0, empty_i, empty_i, empty_i, empty_i, np.zeros(0), 0, 0.0, True, *codec, 0.0, None, 0.0,
                         events, empty_i if traffic else None, empty_i if traffic else None)  # fmt: skip
    iv = topology.route_intervals(msgs.src, msgs.dst, adaptive=model.adaptive)
    if bandwidths is None:
        latency = iv.hops * model.per_hop
    else:
        latency = np.asarray(topology.message_latency(msgs.src, msgs.dst, model.per_hop), dtype=np.float64)
    points = np.unique(np.concatenate((iv.lo, iv.hi)))
    kinds = np.unique(msgs.kind)
    if model.execution == "dataflow":
        events = eventsim.StepInput(msgs.msg_op, msgs.kind, iv.msg, iv.lo, iv.hi, iv.weight.astype(np.float64), latency,
                                    msgs.op_set)  # fmt: skip
    plan = _StepPlan(
        messages=m,
        max_hops=int(iv.hops.max()),
        kinds=kinds,
        lo=np.searchsorted(points, iv.lo),
        hi=np.searchsorted(points, iv.hi),
        kind=msgs.kind[iv.msg],
        weight=iv.weight.astype(np.float64),
        points=int(points.size),
        chunk_load_max=0.0,
        raw_only=bool((kind_codec[kinds] < 0).all()),
        codec_rank=msgs.codec_rank,
        codec_set=msgs.codec_set,
        codec_decode=msgs.codec_decode,
        latency=float(iv.hops.max()) * model.per_hop if bandwidths is None else float(latency.max()),
        events=events,
    )
    if traffic:
        plan.msg_kind = msgs.kind
        plan.span = (iv.hi - iv.lo).astype(np.float64)
        if global_prefix is not None:
            plan.global_span = (global_prefix[iv.hi] - global_prefix[iv.lo]).astype(np.float64)
    count = kind_count.astype(np.float64)
    plan.chunk_load_max = plan.max_load(count)
    if bandwidths is not None:
        plan.inv_bw = 1.0 / bandwidths[np.minimum(points, bandwidths.size - 1)]
        plan.chunk_time_max = plan.max_time(count)
    return plan


# --------------------------------------------------------------------------
# Sizes
# --------------------------------------------------------------------------


@dataclass
class _Prepared:
    tables: _Tables
    set_count: np.ndarray  # chunks in each set
    set_low: np.ndarray  # lowest chunk of each set (-1 for the empty set)
    kind_set: np.ndarray
    kind_codec: np.ndarray
    plans: list[_StepPlan]
    bandwidths: np.ndarray | None  # per link; None: every link at the model's link_bandwidth
    graph: eventsim.EventGraph | None  # dataflow execution only
    has_global: bool = False  # prepared with traffic on a topology with global links


def _prepare(schedule: Schedule, topology: Topology, model: NetworkModel, traffic: bool = False) -> _Prepared:
    _check_fit(schedule, topology)
    global_prefix = None
    has_global = False
    if traffic:
        mask = global_link_mask(topology)
        has_global = mask is not None
        if mask is not None:
            global_prefix = np.concatenate(([0], np.cumsum(mask, dtype=np.int64)))
    tables, steps = _flatten(schedule)
    nsets = len(tables.set_bits)
    set_count = np.fromiter((b.bit_count() for b in tables.set_bits), dtype=np.int64, count=nsets)
    set_low = np.fromiter(((b & -b).bit_length() - 1 for b in tables.set_bits), dtype=np.int64, count=nsets)
    ck = np.array(tables.codec_kinds, dtype=np.int64).reshape(-1, 2)
    kind_set = np.concatenate((np.arange(nsets, dtype=np.int64), ck[:, 0]))
    kind_codec = np.concatenate((np.full(nsets, -1, dtype=np.int64), ck[:, 1]))
    kind_count = set_count[kind_set]
    bandwidths = topology.link_bandwidths(model.link_bandwidth)
    if bandwidths is not None:
        bandwidths = np.asarray(bandwidths, dtype=np.float64)
    plans = [_plan_step(s, topology, model, kind_count, kind_codec, bandwidths, global_prefix, traffic) for s in steps]
    graph = None
    if model.execution == "dataflow":
        links = bandwidths if bandwidths is not None else np.full(topology.num_links, model.link_bandwidth)
        graph = eventsim.build(schedule, [p.events for p in plans if p.events is not None], links)
    return _Prepared(tables, set_count, set_low, kind_set, kind_codec, plans, bandwidths, graph, has_global)


@dataclass
class _SizeEval:
    """Element and byte counts of every set and kind for one vector size."""

    base: int  # elements of the smallest chunk
    uniform: bool  # every chunk holds exactly ``base`` elements
    set_elems: np.ndarray
    kind_bytes: np.ndarray


def _bitmask(mask: np.ndarray) -> int:
    return int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")


def _evaluate_size(schedule: Schedule, prep: _Prepared, count: int, itemsize: int) -> _SizeEval:
    """Elements of every chunk set, bytes of every message kind, at ``count`` elements."""
    tables, kind_set, kind_codec = prep.tables, prep.kind_set, prep.kind_codec
    offsets = element_offsets(schedule.collective, schedule.nranks, schedule.nchunks, count, schedule.chunk_weights)
    sizes = np.diff(offsets)
    base = int(sizes.min()) if sizes.size else 0
    extra = sizes - base
    uniform = not extra.any()
    set_elems = base * prep.set_count
    if not uniform:
        if int(extra.max()) == 1:
            mask = _bitmask(extra.astype(bool))
            # only the sets whose lowest chunk is in E's range can meet E
            hit = np.flatnonzero(prep.set_low <= mask.bit_length() - 1)
            bits = tables.set_bits
            set_elems = set_elems.copy()
            set_elems[hit] += np.fromiter(((bits[u] & mask).bit_count() for u in hit.tolist()), np.int64, hit.size)
        else:  # not produced by chunk_offsets; kept exact all the same
            set_elems = np.array([int(sizes[ChunkSet(b).ids()].sum()) for b in tables.set_bits], dtype=np.int64)
    kind_elems = set_elems[kind_set]
    kind_bytes = (kind_elems * itemsize).astype(np.float64)
    for k in np.flatnonzero(kind_codec >= 0):
        codec = tables.codecs[int(kind_codec[k])]
        kind_bytes[k] = float(codec.max_compressed_bytes(int(kind_elems[k])))
    return _SizeEval(base, uniform, set_elems, kind_bytes)


def _max_link_bytes(plan: _StepPlan, ev: _SizeEval, itemsize: int) -> float:
    if ev.uniform and plan.raw_only:  # the load is linear in the chunk count
        return itemsize * ev.base * plan.chunk_load_max
    return plan.max_load(ev.kind_bytes)


def _transfer_time(plan: _StepPlan, ev: _SizeEval, model: NetworkModel) -> float:
    """The busiest link's time in the step."""
    if plan.inv_bw is None:
        return _max_link_bytes(plan, ev, model.itemsize) / model.link_bandwidth
    if ev.uniform and plan.raw_only:
        return model.itemsize * ev.base * plan.chunk_time_max
    return plan.max_time(ev.kind_bytes)


def _codec_time(plan: _StepPlan, ev: _SizeEval, model: NetworkModel) -> float:
    """The busiest rank's codec time in the step: raw bytes encoded and decoded at their rates."""
    if plan.codec_rank.size == 0:
        return 0.0
    raw = (ev.set_elems[plan.codec_set] * model.itemsize).astype(np.float64)
    if model.encode_rate == model.decode_rate:
        return float(np.bincount(plan.codec_rank, weights=raw).max()) / model.codec_bandwidth
    rate = np.where(plan.codec_decode, model.decode_rate, model.encode_rate)
    return float(np.bincount(plan.codec_rank, weights=raw / rate).max())


def _counts(sizes_bytes: Iterable[int], schedule: Schedule, itemsize: int) -> list[tuple[int, int]]:
    out = []
    for size in sizes_bytes:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise ValueError(f"simulate: a size is a non-negative number of bytes, got {size!r}")
        size = int(size)
        if size % itemsize:
            raise ValueError(f"simulate: size {size} B is not a whole number of {itemsize}-byte elements")
        count = size // itemsize
        problem = count_error(schedule.collective, schedule.nranks, count)
        if problem is not None:
            raise ValueError(f"simulate: size {size} B ({count} elements): {problem}")
        out.append((size, count))
    return out


def _weights(schedule: Schedule, weights: Sequence[float] | None) -> np.ndarray:
    n = len(schedule.steps)
    if weights is None:
        return np.ones(n)
    w = np.asarray(weights, dtype=np.float64).ravel()
    if w.size != n:
        raise ValueError(f"simulate: {w.size} step weights for a schedule of {n} steps")
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError("simulate: step weights must be finite and non-negative")
    return w


def _check_fit(schedule: Schedule, topology: Topology) -> None:
    if topology.nodes != schedule.nranks:
        machines = getattr(topology, "machines", None)
        where = "one rank per node" if machines is None else f"{machines} nodes of {topology.nodes // machines} ranks"
        has = "nodes" if machines is None else "ranks"
        raise ValueError(
            f"topology {topology.spec} has {topology.nodes} {has} but the schedule "
            f"{schedule.algorithm} runs on {schedule.nranks} ranks ({where})"
        )


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def simulate(
    schedule: Schedule,
    topology: Topology,
    sizes_bytes: Iterable[int],
    model: NetworkModel | None = None,
    weights: Sequence[float] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    traffic: bool = False,
) -> Simulation:
    """The simulated time of ``schedule`` on ``topology`` for each vector size in bytes.

    A size is the collective's ``count`` times the model's itemsize (`collc.collectives.
    logical_count`: the whole vector for allreduce, the gathered output for allgather, the
    send buffer for alltoall).  ``weights[i]`` (default 1) is how many steps
    ``schedule.steps[i]`` stands for.  A ValueError says what does not fit: the topology's
    node count, a size, the weights.  ``on_progress(done, total)``, when given, is called
    after each size is simulated (``total``: the sizes).  With ``traffic``, every row also carries
    the bytes the schedule moves at its size (`SimRow.traffic`, `Traffic`).
    """
    model = model if model is not None else NetworkModel()
    sizes = _counts(sizes_bytes, schedule, model.itemsize)
    w = _weights(schedule, weights)
    if model.execution == "dataflow" and (w != 1).any():
        raise ValueError("simulate: dataflow execution runs every step: the step weights must all be 1")
    prep = _prepare(schedule, topology, model, traffic)
    nsteps = len(prep.plans)
    counted: list[Traffic | None] = [None] * len(sizes)
    step_times = np.zeros((nsteps, len(sizes)))
    step_parts = np.zeros((nsteps, len(sizes), len(PARTS)))
    latency = np.array([p.latency for p in prep.plans])
    totals = np.zeros(len(sizes))
    row_parts = np.zeros((len(sizes), len(PARTS)))
    for j, (_, count) in enumerate(sizes):
        ev = _evaluate_size(schedule, prep, count, model.itemsize)
        for i, plan in enumerate(prep.plans):
            transfer = _transfer_time(plan, ev, model)
            codec = _codec_time(plan, ev, model) if plan.codec_rank.size else 0.0
            step_parts[i, j] = (model.step_overhead, latency[i], transfer, codec)
            t = model.step_overhead + latency[i] + transfer
            step_times[i, j] = t + codec if plan.codec_rank.size else t
        if traffic:
            counted[j] = count_traffic(prep, ev.kind_bytes, w, sizes[j][0])
        if prep.graph is not None:
            set_bytes = (ev.set_elems * model.itemsize).astype(np.float64)
            total, parts = eventsim.run(
                prep.graph, ev.kind_bytes, set_bytes, model.step_overhead, model.encode_rate, model.decode_rate
            )
            totals[j], row_parts[j] = total, parts
        if on_progress is not None:
            on_progress(j + 1, len(sizes))
    if prep.graph is None:
        totals = w @ step_times if nsteps else np.zeros(len(sizes))
        row_parts = np.einsum("i,ijk->jk", w, step_parts) if nsteps else row_parts
    rows = tuple(
        SimRow(size, float(t), size / float(t) if t > 0 else math.inf, tuple(float(x) for x in parts), tc)
        for (size, _), t, parts, tc in zip(sizes, totals, row_parts, counted, strict=True)
    )
    figures = tuple(
        StepFigures(
            index=i,
            phase=step.phase,
            messages=plan.messages,
            max_hops=plan.max_hops,
            max_link_chunks=plan.chunk_load_max,
            weight=float(w[i]),
            times_s=tuple(float(t) for t in step_times[i]),
        )
        for i, (step, plan) in enumerate(zip(schedule.steps, prep.plans, strict=True))
    )
    return Simulation(schedule.algorithm, topology.spec, schedule.nranks, model, rows, figures)


def trace(schedule: Schedule, topology: Topology, size_bytes: int, model: NetworkModel | None = None) -> eventsim.Trace:
    """The dataflow run of ``schedule`` at one vector size with every event's time (`collc.eventsim.Trace`),
    whatever ``model.execution`` says.  A ValueError says what does not fit, as `simulate`."""
    model = dataclasses.replace(model if model is not None else NetworkModel(), execution="dataflow")
    ((_, count),) = _counts([size_bytes], schedule, model.itemsize)
    prep = _prepare(schedule, topology, model)
    assert prep.graph is not None
    ev = _evaluate_size(schedule, prep, count, model.itemsize)
    set_bytes = (ev.set_elems * model.itemsize).astype(np.float64)
    return eventsim.trace(prep.graph, ev.kind_bytes, set_bytes, model.step_overhead, model.encode_rate,
                          model.decode_rate)  # fmt: skip


def link_message_counts(schedule: Schedule, topology: Topology, step: int, adaptive: bool = False) -> np.ndarray:
    """How many messages of ``schedule.steps[step]`` cross each directed link (index: the
    topology's link index, length ``topology.num_links``).  With ``adaptive`` a message
    counts by its share of the link (fractions).  The Swing paper's Fig. 1 compares the
    maximum of this over links."""
    _check_fit(schedule, topology)
    if not -len(schedule.steps) <= step < len(schedule.steps):
        raise ValueError(f"step {step} is outside the schedule's {len(schedule.steps)} steps")
    ops = [op for op in schedule.steps[step].ops if op.kind is OpKind.SEND]
    src = np.array([op.rank for op in ops], dtype=np.int64)
    dst = np.array([op.peer for op in ops], dtype=np.int64)
    routes = topology.route(src, dst, adaptive=adaptive)
    return np.bincount(routes.link, weights=routes.weight, minlength=topology.num_links)


def congestion_deficiency(
    schedule: Schedule,
    topology: Topology,
    size_bytes: int,
    model: NetworkModel | None = None,
    weights: Sequence[float] | None = None,
) -> float:
    """Ξ, the congestion deficiency of the Swing paper (§2.2), measured at one vector size.

    Definition used here: the step-summed bandwidth time of the most loaded link,
    ``Σ_i w_i * max_link_bytes_i``, divided by the step-summed bandwidth time the same
    messages would take if no two shared a link, ``Σ_i w_i * max_message_bytes_i``.  It is
    1 when no link carries more than the largest message of its step, and grows with the
    number of messages that share a link.  1.0 for a schedule that moves no bytes.
    """
    model = model if model is not None else NetworkModel()
    ((_, count),) = _counts([size_bytes], schedule, model.itemsize)
    w = _weights(schedule, weights)
    prep = _prepare(schedule, topology, dataclasses.replace(model, execution="lockstep"))
    ev = _evaluate_size(schedule, prep, count, model.itemsize)
    shared = alone = 0.0
    for wi, plan in zip(w, prep.plans, strict=True):
        if plan.messages == 0:
            continue
        shared += wi * _max_link_bytes(plan, ev, model.itemsize)
        alone += wi * float(ev.kind_bytes[plan.kinds].max())
    return float(shared / alone) if alone > 0 else 1.0


def traffic(
    schedule: Schedule,
    topology: Topology,
    sizes_bytes: Iterable[int],
    model: NetworkModel | None = None,
    weights: Sequence[float] | None = None,
) -> tuple[Traffic, ...]:
    """The bytes ``schedule`` moves on ``topology`` at each vector size (`Traffic`): sent, summed over
    the links, and over the global links (None where the topology has none).  Routing follows
    ``model.adaptive``; ``weights[i]`` (default 1) is how many steps ``schedule.steps[i]`` stands for,
    as in `collc.simulate.simulate`.  A ValueError says what does not fit.  The times are not
    computed (``simulate(..., traffic=True)`` gives both)."""
    model = dataclasses.replace(model if model is not None else NetworkModel(), execution="lockstep")
    sizes = _counts(sizes_bytes, schedule, model.itemsize)
    w = _weights(schedule, weights)
    prep = _prepare(schedule, topology, model, traffic=True)
    return tuple(
        count_traffic(prep, _evaluate_size(schedule, prep, count, model.itemsize).kind_bytes, w, size)
        for size, count in sizes
    )
