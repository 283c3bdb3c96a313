"""The data the ``cuda`` and ``mpi-cuda`` templates render: a verified schedule's step tables regrouped by step.

`plan` turns the tables of `tables.from_schedule` into rows the templates
print as they are: one row per message (sender, receiver, where it lands,
its chunk runs), one per local compression op, one per codec, with the
fusions of decompress -> reduce -> compress (`fusions`) marked on the runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from collc import collectives
from collc.backends import tables
from collc.backends.csource import SourceLine, Sources, c_ident, prefix_lines, runs_text
from collc.codecs import parse_codec
from collc.codecs.fwq import Fwq
from collc.codecs.grid import GridCodec, grid_constants
from collc.diagnostics import CollError
from collc.ir import Schedule, format_id_set

__all__ = [
    "BASE_FLAGS",
    "DEFAULT_ARCH",
    "RUNTIME_HEADERS",
    "CodecRow",
    "FusedRun",
    "LocalRow",
    "Message",
    "MsgRow",
    "PhasePlan",
    "Plan",
    "RunRow",
    "StepBlock",
    "adds_payloads",
    "codec_row",
    "fusions",
    "nvcc_flags",
    "plan",
    "step_messages",
]

BASE_FLAGS: tuple[str, ...] = ("-O3", "-Xcompiler", "-fPIC", "-shared")
"""Flags of every build; the architecture comes on top (``-arch=sm_90`` by default)."""

DEFAULT_ARCH = "sm_90"

RUNTIME_HEADERS: tuple[str, ...] = (
    "collc_cuda.cuh",
    "collc_cuda_slots.cuh",
    "collc_cuda_state.cuh",
    "collc_cuda_codec.cuh",
    "collc_codecs.cuh",
    "collc_codecs.h",
    "collc_cuda_reduce.cuh",
    "collc_cuda_vcoll.cuh",
)


def nvcc_flags(arch: str) -> tuple[str, ...]:
    """The nvcc flags of a build for ``arch``."""
    return (BASE_FLAGS[0], f"-arch={arch}", *BASE_FLAGS[1:])


# --------------------------------------------------------------------------
# What the templates render
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunRow:
    lo: int
    hi: int
    action: str  # COLLC_CUDA_COPY | COLLC_CUDA_REDUCE
    how: str  # COLLC_CUDA_VALUES | COLLC_CUDA_WIRE | COLLC_CUDA_PAYLOAD
    codec: int  # index into the plan's codecs (0 for raw values)
    fuse: str  # 0, or COLLC_CUDA_ENCODED and / or COLLC_CUDA_REENCODE (FusedRun)
    note: str  # the codec, for people


@dataclass(frozen=True, slots=True)
class LocalRow:
    cells: str  # "step, rank, lo, hi, what, codec", aligned
    note: str


@dataclass(frozen=True, slots=True)
class CodecRow:
    cells: str  # the struct collc_cuda_codec initializer
    spec: str


@dataclass(frozen=True, slots=True)
class MsgRow:
    cells: str  # "step, src, dst, landing, first run, runs", aligned
    note: str  # what the message moves, for people


@dataclass(frozen=True, slots=True)
class StepBlock:
    index: int
    where: str  # the .coll lines the step came from
    first: int  # its first row in the phase's message table
    msgs: tuple[MsgRow, ...]
    first_local: int  # its first row in the phase's local-op table
    locals: tuple[LocalRow, ...]


@dataclass(frozen=True, slots=True)
class PhasePlan:
    name: str
    ident: str
    first: int
    last: int
    sources: tuple[SourceLine, ...]
    runs: tuple[RunRow, ...]
    steps: tuple[StepBlock, ...]

    @property
    def has_locals(self) -> bool:
        return any(step.locals for step in self.steps)


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything the templates of one schedule need, fully resolved."""

    algorithm: str
    ident: str  # the algorithm as a C identifier
    collective: str
    collective_enum: str  # COLLC_CUDA_COLL_ALLREDUCE, ...
    source: str
    params: str
    nranks: int
    nchunks: int
    root: int
    max_step_messages: int
    phases: tuple[PhasePlan, ...]
    codecs: tuple[CodecRow, ...]
    stores: bool  # some local op compresses
    adds_payloads: bool  # some reduce adds homomorphic payloads (op sum only)
    runtime_headers: tuple[str, ...]
    arch: str
    base_flags: str
    nvcc_flags: str
    chunk_prefix: tuple[str, ...] = ()  # chunk weights: their prefix sums, as lines of C literals; () without
    vcounts: bool = False  # the entry points for counts given at run time (allgatherv, reduce_scatter, alltoallv)


@dataclass(frozen=True, slots=True)
class FusedRun(tables.Run):
    """A run of wire-compressed chunks with the fusion of decompress + reduce + compress.

    ``reencode``: the receiver reduces the chunk and sends the result on, with
    the same codec, before anything else touches it: the arrival re-encodes
    the reduced values into the receiver's payload store (for ebq and op sum
    in the same kernels as the decompress and the reduction).
    ``encoded``: the sender's payload store holds the chunk's payload already
    (its arrival was a ``reencode``): the transfer sends it without encoding.
    """

    encoded: bool = False
    reencode: bool = False


@dataclass(frozen=True, slots=True)
class Message:
    """One message of one step, as the virtual-rank driver moves it: ``src``'s runs to ``dst``.

    ``direct``: the sender copies the runs straight into the receiver's
    buffer.  That is the tables' rule (only copies, none of them of a chunk
    the receiver sends in the same step) without its single-run condition,
    which only MPI's contiguous receive buffers need: a transfer here is one
    copy per run anyway.
    """

    src: int
    dst: int
    runs: tuple[tables.Run, ...]
    direct: bool


def _chunk_bits(runs: tuple[tables.Run, ...]) -> int:
    return sum(((1 << (r.hi - r.lo)) - 1) << r.lo for r in runs)


def step_messages(t: tables.Tables) -> dict[int, list[Message]]:
    """Every step's messages, sorted by receiver then sender (the runtime lays out scratch in that order).

    A message is the receiving end's row of the tables: the verifier has
    checked that the sender sends exactly the same chunks.  Wire-compressed
    runs are split into `FusedRun`s where `fusions` finds a fusion.
    """
    reencode, encoded = fusions(t)
    steps: dict[int, list[Message]] = {info.index: [] for info in t.steps}
    for dst, rank_steps in enumerate(t.ranks):
        for rs in rank_steps:
            sent = 0
            for m in rs.sends:
                sent |= _chunk_bits(m.runs)
            for m in rs.recvs:
                raw_copies = not any(r.reduce or r.codec is not None for r in m.runs)
                direct = raw_copies and _chunk_bits(m.runs) & sent == 0
                runs = _fuse(
                    m.runs, lambda c, s=rs.step, a=m.peer, b=dst: ((s, a, c) in encoded, (s, b, c) in reencode)
                )
                steps[rs.step].append(Message(m.peer, dst, runs, direct))
    return {index: sorted(msgs, key=lambda m: (m.dst, m.src)) for index, msgs in steps.items()}


def fusions(t: tables.Tables) -> tuple[set[tuple[int, int, int]], set[tuple[int, int, int]]]:
    """(step, rank, chunk) facts: where an arrival re-encodes a reduced chunk, and where its send then uses it.

    A wire-compressed reduce of chunk c at rank r in step s, the only write
    of (r, c) in s, is re-encoded when the next step in which r touches c
    sends c with the same codec (as a wire payload) and does nothing else to
    it: no local op, no receive landing before that send reads it.
    """
    reencode: set[tuple[int, int, int]] = set()
    encoded: set[tuple[int, int, int]] = set()
    for rank, rank_steps in enumerate(t.ranks):
        pending: dict[int, tuple[str, int]] = {}  # chunk -> (codec, step of its wire reduce)
        for rs in rank_steps:
            for op in rs.local:
                for c in range(op.lo, op.hi):
                    pending.pop(c, None)
            sent = [(c, r) for m in rs.sends for r in m.runs for c in range(r.lo, r.hi)]
            for c, r in sent:
                if c in pending and r.codec == pending[c][0] and not r.payload:
                    encoded.add((rs.step, rank, c))
                    reencode.add((pending[c][1], rank, c))
            for c, _ in sent:
                pending.pop(c, None)
            writes: dict[int, list[tables.Run]] = {}
            for m in rs.recvs:
                for r in m.runs:
                    for c in range(r.lo, r.hi):
                        writes.setdefault(c, []).append(r)
            for c, runs in writes.items():
                pending.pop(c, None)
                (r, *more) = runs
                if not more and r.reduce and r.codec is not None and not r.payload:
                    pending[c] = (r.codec, rs.step)
    return reencode, encoded


def _fuse(runs: tuple[tables.Run, ...], flags: Callable[[int], tuple[bool, bool]]) -> tuple[tables.Run, ...]:
    """``runs`` split where the (encoded, reencode) flags of their wire-compressed chunks change."""
    out: list[tables.Run] = []
    for r in runs:
        if r.codec is None or r.payload:
            out.append(r)
            continue
        lo = r.lo
        for c in range(r.lo, r.hi + 1):
            if c == r.hi or flags(c) != flags(lo):
                encoded, reencode = flags(lo)
                out.append(FusedRun(lo, c, r.reduce, r.codec, r.payload, encoded, reencode) if encoded or reencode
                           else tables.Run(lo, c, r.reduce, r.codec, r.payload))  # fmt: skip
                lo = c
    return tuple(out)


def _phase_plan(
    phase: tables.Phase,
    ident: str,
    messages: dict[int, list[Message]],
    locals_: dict[int, list[tuple[int, tables.LocalRun]]],
    codecs: dict[str, int],
    sources: Sources,
    where: dict[int, str],
) -> PhasePlan:
    runs: list[RunRow] = []
    seen: dict[tuple[tables.Run, ...], int] = {}
    steps: list[StepBlock] = []
    first = first_local = 0
    for index in range(phase.first, phase.last + 1):
        rows: list[MsgRow] = []
        for m in messages[index]:
            if m.runs not in seen:
                seen[m.runs] = len(runs)
                runs.extend(_run_row(r, codecs) for r in m.runs)
            landing = "COLLC_CUDA_DIRECT," if m.direct else "COLLC_CUDA_SCRATCH,"
            cells = f"{index}, {m.src}, {m.dst}, {landing:<19} {seen[m.runs]}, {len(m.runs)}"
            note = f"{m.src} -> {m.dst}: {runs_text(m.runs, True)}{' (direct)' if m.direct else ''}"
            rows.append(MsgRow(cells, note))
        local_rows = []
        for rank, op in locals_.get(index, []):
            what = "COLLC_CUDA_DECOMPRESS," if op.decompress else "COLLC_CUDA_COMPRESS,"
            cells = f"{index}, {rank}, {op.lo}, {op.hi}, {what:<22} {codecs[op.codec]}"
            verb = "decompress" if op.decompress else f"compress with {op.codec}"
            local_rows.append(LocalRow(cells, f"rank {rank}: {verb} {format_id_set([(op.lo, op.hi)])}"))
        if rows or local_rows:
            steps.append(StepBlock(index, where[index], first, tuple(rows), first_local, tuple(local_rows)))
            first += len(rows)
            first_local += len(local_rows)
    return PhasePlan(phase.name, ident, phase.first, phase.last, sources.quote(phase.lines), tuple(runs), tuple(steps))


def _run_row(run: tables.Run, codecs: dict[str, int]) -> RunRow:
    action = "COLLC_CUDA_REDUCE" if run.reduce else "COLLC_CUDA_COPY"
    if run.codec is None:
        return RunRow(run.lo, run.hi, action, "COLLC_CUDA_VALUES", 0, "0", "")
    how = "COLLC_CUDA_PAYLOAD" if run.payload else "COLLC_CUDA_WIRE"
    note = f"payload of {run.codec}" if run.payload else f"compressed with {run.codec}"
    fuse = []
    if isinstance(run, FusedRun) and run.encoded:
        fuse.append("COLLC_CUDA_ENCODED")
        note += ", encoded when it arrived"
    if isinstance(run, FusedRun) and run.reencode:
        fuse.append("COLLC_CUDA_REENCODE")
        note += ", re-encoded for the next hop"
    return RunRow(run.lo, run.hi, action, how, codecs[run.codec], " | ".join(fuse) or "0", note)


def adds_payloads(t: tables.Tables) -> bool:
    """Whether some reduce adds homomorphic payloads (then the op must be sum)."""
    return any(r.payload and r.reduce for ranks in t.ranks for rs in ranks for m in rs.recvs for r in m.runs)


def _c_float(value: np.float32) -> str:
    """A float32 as an exact C hexadecimal literal."""
    mantissa, _, exponent = float(value).hex().partition("p")
    return f"{mantissa.rstrip('0').rstrip('.')}p{exponent}f"


def codec_row(spec: str) -> CodecRow:
    """The ``struct collc_cuda_codec`` of a codec spec; CollError for a codec without CUDA kernels."""
    codec = parse_codec(spec)
    if not codec.cuda_kernels:
        raise CollError(f"the codec {spec} has no CUDA kernels: the cuda target cannot run it (use --backend local)")
    step = inv2eb = np.float32(0.0)
    bits = block = 0
    if isinstance(codec, GridCodec):
        step, inv2eb = grid_constants(codec.eb)
    if isinstance(codec, Fwq):
        bits, block = codec.bits, codec.block
    kind = f"COLLC_CUDA_{codec.name.upper()},"
    return CodecRow(f"{kind:<21} {_c_float(step)}, {_c_float(inv2eb)}, {bits}, {block}", spec)


def plan(schedule: Schedule, *, arch: str = DEFAULT_ARCH) -> Plan:
    """The data the templates render for ``schedule`` (which must have passed verification)."""
    t = tables.from_schedule(schedule, compression=True)
    sources = Sources(t.source)
    where = {info.index: sources.where(info.lines) for info in t.steps}
    messages = step_messages(t)
    codecs = {spec: k for k, spec in enumerate(t.codecs)}
    codec_rows = tuple(codec_row(spec) for spec in t.codecs)
    locals_: dict[int, list[tuple[int, tables.LocalRun]]] = {}
    for rank, rank_steps in enumerate(t.ranks):
        for rs in rank_steps:
            locals_.setdefault(rs.step, []).extend((rank, op) for op in rs.local)
    idents: dict[str, int] = {}
    phases = []
    for phase in t.phases:
        ident = c_ident(phase.name)
        idents[ident] = idents.get(ident, 0) + 1
        if idents[ident] > 1:
            ident = f"{ident}_{idents[ident]}"
        phases.append(_phase_plan(phase, ident, messages, locals_, codecs, sources, where))
    params = ", ".join(f"{k}={'x'.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in schedule.params)
    return Plan(
        algorithm=schedule.algorithm,
        ident=c_ident(schedule.algorithm),
        collective=schedule.collective.value,
        collective_enum=f"COLLC_CUDA_COLL_{schedule.collective.name}",
        source=sources.label(t.source),
        params=params,
        nranks=schedule.nranks,
        nchunks=schedule.nchunks,
        root=schedule.root if schedule.root is not None else -1,
        max_step_messages=max((len(m) for m in messages.values()), default=0),
        phases=tuple(phases),
        codecs=codec_rows,
        stores=any(not op.decompress for ops in locals_.values() for _, op in ops)
        or any(isinstance(r, FusedRun) and r.reencode for msgs in messages.values() for m in msgs for r in m.runs),
        adds_payloads=adds_payloads(t),
        runtime_headers=RUNTIME_HEADERS,
        arch=arch,
        base_flags=" ".join(BASE_FLAGS),
        nvcc_flags=" ".join(nvcc_flags(arch)),
        chunk_prefix=prefix_lines(schedule.chunk_weights),
        vcounts=schedule.collective in collectives.VCOUNT_COLLECTIVES,
    )
