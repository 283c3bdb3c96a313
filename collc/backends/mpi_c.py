"""The ``mpi-c`` target: C over MPI, built with ``mpicc`` into a shared library.

`generate` renders three files from the step tables of a verified schedule
(`tables.from_schedule`) with the templates in ``codegen/mpi_c/``:

``collc_<algorithm>.c``
    the tables of every rank as static arrays, one C function per phase, and
    the entry points: ``collc_<algorithm>_<collective>`` (plus a variant taking
    Fortran handles, for ctypes callers), and the MPI entry points of the
    collective (``MPI_Allreduce`` and ``MPI_Allreduce_c`` for an allreduce), so
    that ``LD_PRELOAD=libcollc_<algorithm>.so`` runs an unmodified MPI program on
    the schedule, falling back to PMPI for calls it was not compiled for;
``collc_<algorithm>.h``
    the public API;
``Makefile``
    the same build by hand (``make MPICC=...``), e.g. on a cluster.

The runtime headers (``runtime/collc_*.h``: kernels, the step executor, the
shim logic; the same for every schedule) are copied next to them, so that the
folder builds on its own.  `build` compiles the folder with `mpitools.mpicc`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import numpy as np

from collc import collectives
from collc.backends import dataflow, tables
from collc.backends.csource import (
    SourceLine,
    Sources,
    c_ident,
    c_string,
    prefix_lines,
    run_compiler,
    runs_text,
    write_sources,
)
from collc.backends.mpi_c_dispatch import (
    Band,
    band_stem,
    bands_of,
    check_bands,
    small_problem,
    small_source,
    table_lines,
)
from collc.backends.mpitools import mpicc
from collc.backends.order import mixed_orders
from collc.codecs import parse_codec
from collc.codecs.fwq import Fwq
from collc.codecs.grid import GridCodec, grid_constants
from collc.diagnostics import CollError
from collc.ir import Collective, Schedule, bits_to_runs, format_id_set
from collc.resources import data_dir

__all__ = [
    "API_NAMES",
    "CFLAGS",
    "CFLAGS_ENV",
    "C_CODECS",
    "MPI_NAMES",
    "SANITIZE_FLAGS",
    "SMALL_BELOW",
    "Band",
    "SizeVariant",
    "build",
    "compressed_bound",
    "extra_cflags",
    "generate",
    "library_path",
    "plan",
    "small_problem",
    "small_source",
    "source_names",
]

CFLAGS: tuple[str, ...] = (
    "-O3", "-fPIC", "-shared", "-Wall", "-Wextra", "-ffp-contract=off", "-fno-strict-aliasing",
)  # fmt: skip
"""Flags of every build (portable: no ``-march=native``).  The codecs need IEEE float arithmetic as written (no
FMA contraction: bit-exact payloads on every machine) and read float buffers as words.  Warnings do not stop a
build: another compiler's new warning must not break a user's library (the test suite adds ``-Werror`` through
``COLLC_CFLAGS``)."""

CFLAGS_ENV = "COLLC_CFLAGS"
"""Extra compiler flags for every mpi-c build, split like a shell would (e.g. ``-Werror -march=native``)."""


def extra_cflags(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The flags ``$COLLC_CFLAGS`` adds (CollError when it does not parse)."""
    text = (os.environ if env is None else env).get(CFLAGS_ENV, "")
    try:
        return tuple(shlex.split(text))
    except ValueError as err:
        raise CollError(f"{CFLAGS_ENV}={text!r}: {err}") from None


SANITIZE_FLAGS: tuple[str, ...] = ("-fsanitize=address", "-fno-omit-frame-pointer", "-g")

SMALL_BELOW = 64 * 1024
"""Calls of fewer bytes run a library's small-message schedule when it has one (`generate`)."""

RUNTIME_HEADERS: tuple[str, ...] = (
    "collc_mpi.h", "collc_comm.h", "collc_reduce.h", "collc_exec.h", "collc_flow.h", "collc_dtype.h", "collc_shim.h",
    "collc_check.h", "collc_coll.h", "collc_vcoll.h", "collc_codecs.h", "collc_zcodec.h", "collc_zexec.h",
)  # fmt: skip

C_CODECS: dict[str, str] = {
    "ebq": "COLLC_CODEC_EBQ",
    "fwq": "COLLC_CODEC_FWQ",
    "hq": "COLLC_CODEC_HQ",
    "fp16": "COLLC_CODEC_FP16",
    "bf16": "COLLC_CODEC_BF16",
    "lossless": "COLLC_CODEC_LOSSLESS",
}
"""The codecs the mpi-c runtime implements (runtime/collc_zcodec.h); zfp is not among them."""

MPI_NAMES: dict[Collective, str] = {
    Collective.ALLREDUCE: "MPI_Allreduce",
    Collective.ALLGATHER: "MPI_Allgather",
    Collective.REDUCE_SCATTER: "MPI_Reduce_scatter_block",
    Collective.BROADCAST: "MPI_Bcast",
    Collective.REDUCE: "MPI_Reduce",
    Collective.ALLTOALL: "MPI_Alltoall",
    Collective.GATHER: "MPI_Gather",
    Collective.SCATTER: "MPI_Scatter",
    Collective.SCAN: "MPI_Scan",
    Collective.EXSCAN: "MPI_Exscan",
    Collective.BARRIER: "MPI_Barrier",
}
"""The MPI collective each schedule's library interposes."""

MPI_ALSO: dict[Collective, tuple[str, ...]] = {
    Collective.REDUCE_SCATTER: ("MPI_Reduce_scatter",),
    Collective.ALLGATHER: ("MPI_Allgatherv",),
    Collective.ALLTOALL: ("MPI_Alltoallv",),
}
"""Other MPI collectives a library interposes (and their ``_c`` twins), with counts given at run time: the
schedule's chunks are cut by them (runtime/collc_vcoll.h)."""

API_NAMES: dict[Collective, str] = {
    Collective.ALLREDUCE: "allreduce",
    Collective.ALLGATHER: "allgather",
    Collective.REDUCE_SCATTER: "reduce_scatter_block",
    Collective.BROADCAST: "bcast",
    Collective.REDUCE: "reduce",
    Collective.ALLTOALL: "alltoall",
    Collective.GATHER: "gather",
    Collective.SCATTER: "scatter",
    Collective.SCAN: "scan",
    Collective.EXSCAN: "exscan",
    Collective.BARRIER: "barrier",
}

_KIND = {"send": "COLLC_SEND", "recv": "COLLC_RECV", "direct": "COLLC_RECV_DIRECT"}


# --------------------------------------------------------------------------
# What the templates render
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunRow:
    lo: int
    hi: int
    action: str  # COLLC_COPY | COLLC_REDUCE
    how: str  # COLLC_RAW | COLLC_WIRE | COLLC_PAYLOAD
    codec: int  # index into the plan's codecs, -1 for raw runs
    fresh: int = 0  # read from the caller's input (dataflow.input_reads)


@dataclass(frozen=True, slots=True)
class LocalRow:
    cells: str  # "step, lo, hi, codec, decompress", aligned
    note: str


@dataclass(frozen=True, slots=True)
class LocalBlock:
    rank: int
    first: int
    rows: tuple[LocalRow, ...]


@dataclass(frozen=True, slots=True)
class CodecRow:
    cells: str  # the struct collc_codec initializer
    spec: str


@dataclass(frozen=True, slots=True)
class MsgRow:
    cells: str  # "step, kind, peer, first run, runs, first dep, deps", aligned
    note: str  # what the message moves and waits for, for people


@dataclass(frozen=True, slots=True)
class StepBlock:
    index: int
    where: str  # the .coll lines the step came from
    msgs: tuple[MsgRow, ...]


@dataclass(frozen=True, slots=True)
class RankBlock:
    rank: int
    first: int
    count: int
    steps: tuple[StepBlock, ...]


@dataclass(frozen=True, slots=True)
class PhasePlan:
    name: str
    ident: str
    first: int
    last: int
    sources: tuple[SourceLine, ...]
    runs: tuple[RunRow, ...]
    ranks: tuple[RankBlock, ...]
    locals: tuple[LocalBlock, ...]  # compression points: each rank's local ops; () without
    deps: tuple[dataflow.DepRow, ...]  # without compression points: what the messages wait for (dataflow issue)


@dataclass(frozen=True, slots=True)
class SegmentBlock:
    rank: int
    first: int
    segments: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything the templates of one schedule need, fully resolved."""

    algorithm: str
    ident: str  # the algorithm as a C identifier
    collective: str
    collective_enum: str  # COLLC_COLL_ALLREDUCE, ...
    mpi_name: str
    api_name: str
    source: str
    params: str
    nranks: int
    nchunks: int
    root: int
    max_messages: int
    scratch_chunks: tuple[int, ...]
    receives: tuple[int, ...]
    segments: tuple[SegmentBlock, ...]  # alltoall only
    phases: tuple[PhasePlan, ...]
    runtime_headers: tuple[str, ...]
    cflags: str
    sanitize_flags: str
    flow_ops: tuple[int, ...] = ()  # [rank]: its messages over every phase; () with compression points
    flow_scratch: tuple[int, ...] = ()  # [rank]: chunks of scratch space its dataflow run uses
    codecs: tuple[CodecRow, ...] = ()  # compression points: the codecs the runs and local ops name
    adds_payloads: int = 0
    error_bound: str = "0.0"  # the verifier's worst-case bound for inputs |x| <= 1, float32 data (C literal)
    error_bound64: str = "0.0"  # ... float64 data
    bound_scales: int = 0  # the bound grows with |x| (relative codecs, casts)
    bound_text: str = ""  # the float32 bound, for people
    sources: tuple[str, ...] = ()  # the C files of the library
    small_name: str = ""  # the small-message schedule's symbol; "" without one
    small_file: str = ""  # ... and the .coll file it came from
    small_below: int = 0  # calls of fewer bytes run it
    small_chained: bool = False  # ... and it has a smaller band of its own (mpi_c_dispatch)
    bands: tuple[str, ...] = ()  # more than one band: the main file's table of them, a line per schedule
    part_name: str = ""  # this schedule as a part of another library (another p, small calls): its symbol
    part_of: str = ""  # ... that library's identifier
    part_note: str = ""  # ... and what the part is, for the file's header
    file_name: str = ""  # the C file
    sizes: tuple[str, ...] = ()  # the symbols of the library's schedules for other rank counts
    sizes_text: str = ""  # every rank count of the library ("" for one)
    chunk_prefix: tuple[str, ...] = ()  # chunk weights: their prefix sums, as lines of C literals; () without
    exact: bool = False  # floating-point MPI_SUM and MPI_PROD go to PMPI unless COLLC_SHIM_EXACT=0 (`generate`)
    reads_input: bool = False  # runs read the caller's input in place (dataflow.input_reads)
    input_copy: tuple[SegmentBlock, ...] = ()  # ... and each rank's output chunks to copy from it
    mixed_orders: str = ""  # a C string: why the ranks' floating-point sums may differ in their last bits ("": they
    # agree; `collc.backends.order`)


def _run_row(r: tables.Run, codecs: dict[str, int], fresh: bool = False) -> RunRow:
    action = "COLLC_REDUCE" if r.reduce else "COLLC_COPY"
    if r.codec is None:
        return RunRow(r.lo, r.hi, action, "COLLC_RAW", -1, int(fresh))
    return RunRow(r.lo, r.hi, action, "COLLC_PAYLOAD" if r.payload else "COLLC_WIRE", codecs[r.codec])


def _note(msg: tables.Message, recv: bool) -> str:
    """What a message moves, for people: its chunks and, for compressed runs, how they travel."""
    text = runs_text(msg.runs, recv)
    how = sorted({f"payload of {r.codec}" if r.payload else f"compressed with {r.codec}" for r in msg.runs if r.codec})
    return f"{text} ({'; '.join(how)})" if how else text


def _phase_plan(
    t: tables.Tables,
    phase: tables.Phase,
    ident: str,
    sources: Sources,
    where: dict[int, str],
    codecs: dict[str, int],
    flow: list[tuple[dataflow.FlowOp, ...]] | None,
    cursor: list[int],
    reads: dataflow.InputReads | None = None,
) -> PhasePlan:
    """The tables of one phase; ``where[step]`` names the .coll lines of each step.  ``flow[rank]`` (None with
    compression points) are the rank's ops over every phase, ``cursor[rank]`` the first of them in this phase
    (advanced past the phase's); ``reads`` the runs that read the caller's input."""
    runs: list[RunRow] = []
    deps: list[dataflow.DepRow] = []
    dep_at = 0  # entries of the phase's deps array so far
    seen: dict[tuple[tuple[tables.Run, ...], tuple[bool, ...]], int] = {}
    ranks: list[RankBlock] = []
    local_blocks: list[LocalBlock] = []
    first = first_local = 0
    for rank, rank_steps in enumerate(t.ranks):
        steps: list[StepBlock] = []
        local_rows: list[LocalRow] = []
        for rs in rank_steps:
            if not phase.first <= rs.step <= phase.last:
                continue
            for op in rs.local:
                verb = f"decompress {op.codec}" if op.decompress else f"compress with {op.codec}"
                cells = f"{rs.step}, {op.lo}, {op.hi}, {codecs[op.codec]}, {int(op.decompress)}"
                local_rows.append(LocalRow(cells, f"step {rs.step}: {verb} {format_id_set([(op.lo, op.hi)])}"))
            rows: list[MsgRow] = []
            for kind, msg in [("send", m) for m in rs.sends] + [("recv", m) for m in rs.recvs]:
                fresh = (False,) * len(msg.runs) if reads is None else reads.fresh[rank][cursor[rank]]
                key = (msg.runs, fresh)
                if key not in seen:
                    seen[key] = len(runs)
                    runs.extend(_run_row(r, codecs, f) for r, f in zip(msg.runs, fresh, strict=True))
                c_kind = _KIND["direct" if msg.direct else kind]
                cells = f"{rs.step}, {c_kind + ',':<19} {msg.peer}, {seen[key]}, {len(msg.runs)}"
                arrow = f"to {msg.peer}" if kind == "send" else f"from {msg.peer}"
                note = f"{arrow}: {_note(msg, kind == 'recv')}"
                if any(fresh):
                    note += ", from the input" if kind == "send" else ", reduced with the input"
                if flow is None:
                    cells += ", 0, 0"
                else:
                    index = cursor[rank]
                    cursor[rank] += 1
                    waits = flow[rank][index].deps
                    cells += f", {dep_at}, {len(waits)}"
                    dep_at += len(waits)
                    note = dataflow.op_note(index, waits, note)
                    if waits:
                        deps.append(dataflow.dep_row(rank, index, waits))
                rows.append(MsgRow(cells, note))
            if rows:
                steps.append(StepBlock(rs.step, where[rs.step], tuple(rows)))
        count = sum(len(s.msgs) for s in steps)
        ranks.append(RankBlock(rank, first, count, tuple(steps)))
        first += count
        if codecs:
            local_blocks.append(LocalBlock(rank, first_local, tuple(local_rows)))
            first_local += len(local_rows)
    return PhasePlan(
        phase.name, ident, phase.first, phase.last, sources.quote(phase.lines), tuple(runs), tuple(ranks),
        tuple(local_blocks), tuple(deps),
    )  # fmt: skip


def _c_float(value: float | np.floating) -> str:
    """A float as an exact C hexadecimal literal (a float32 gets the f suffix)."""
    if isinstance(value, np.float32):
        mantissa, _, exponent = float(value).hex().partition("p")
        return f"{mantissa.rstrip('0').rstrip('.')}p{exponent}f"
    return float(value).hex() if math.isfinite(value) else "HUGE_VAL"


def _codec_row(spec: str, schedule: Schedule) -> CodecRow:
    """The ``struct collc_codec`` of a codec spec; CollError, at the first op naming it, for a codec the mpi-c
    runtime does not implement."""
    codec = parse_codec(spec)
    if codec.name not in C_CODECS:
        op = next(op for step in schedule.steps for op in step.ops if op.codec == spec)
        raise CollError(
            f"the codec {spec} has no C implementation: the mpi-c target cannot run it (the mpi-py target and "
            "--backend local run it with zfpy)",
            op.span,
        )
    step = inv2eb = np.float32(0.0)
    bits = block = 0
    if isinstance(codec, GridCodec):
        step, inv2eb = grid_constants(codec.eb)
    if isinstance(codec, Fwq):
        bits, block = codec.bits, codec.block
    kind = C_CODECS[codec.name] + ","
    return CodecRow(f'{kind:<24} {_c_float(step)}, {_c_float(inv2eb)}, {bits}, {block}, "{spec}"', spec)


def compressed_bound(schedule: Schedule, bounds: tuple[float, float] | None) -> tuple[float, float]:
    """The worst-case error bounds a library with compression points reports (float32 and float64 data, inputs
    |x| <= 1): the verifier's, which the caller passes; CollError when it does not."""
    if bounds is None:
        raise CollError(
            f"{schedule.algorithm} has compression points: generating its mpi-c library needs the verifier's error "
            "bound (collc.verify.compression.analyse(...).stats.error_bound, for float32 and float64 data)"
        )
    return bounds


def _scratch_chunks(rank_steps: Sequence[tables.RankStep]) -> int:
    """The most chunks one step of a rank moves through scratch: receives not direct, sends of several runs."""
    return max((dataflow.step_scratch(rs) for rs in rank_steps), default=0)


def _blocks(per_rank: Sequence[Sequence[tuple[int, int]]]) -> tuple[SegmentBlock, ...]:
    """Each rank's chunk intervals, numbered end to end."""
    blocks: list[SegmentBlock] = []
    first = 0
    for rank, segs in enumerate(per_rank):
        blocks.append(SegmentBlock(rank, first, tuple(segs)))
        first += len(segs)
    return tuple(blocks)


def _segments(schedule: Schedule, t: tables.Tables) -> tuple[SegmentBlock, ...]:
    """For alltoall: the chunk runs each rank touches (holds, must hold, sends or receives)."""
    if schedule.collective is not Collective.ALLTOALL:
        return ()
    p, n = schedule.nranks, schedule.nchunks
    origin = collectives.chunk_origin(schedule.collective, p, n, schedule.root)
    dest = collectives.chunk_dest(schedule.collective, p, n, schedule.root)
    per_rank: list[tuple[tuple[int, int], ...]] = []
    for rank in range(p):
        held = collectives.initially_held(origin, rank) | collectives.finally_required(dest, rank)
        bits = sum(1 << int(c) for c in held.nonzero()[0])
        for rs in t.ranks[rank]:
            for m in rs.sends + rs.recvs:
                for r in m.runs:
                    bits |= ((1 << (r.hi - r.lo)) - 1) << r.lo
        per_rank.append(tuple(bits_to_runs(bits)))
    return _blocks(per_rank)


def plan(schedule: Schedule, error_bound: tuple[float, float] | None = None, **extra: Any) -> Plan:
    """The data the templates render for ``schedule`` (which must have passed verification).

    A schedule with compression points needs ``error_bound``: the verifier's
    worst-case bound for float32 and float64 data (`compressed_bound`).  ``extra``
    sets the fields of a library with a small-message schedule (`generate`).
    """
    t = tables.from_schedule(schedule, compression=True)
    codecs = {spec: k for k, spec in enumerate(t.codecs)}
    codec_rows = tuple(_codec_row(spec, schedule) for spec in t.codecs)
    bound32, bound64 = compressed_bound(schedule, error_bound) if codecs else (0.0, 0.0)
    sources = Sources(t.source)
    where = {info.index: sources.where(info.lines) for info in t.steps}
    idents: dict[str, int] = {}
    phases = []
    p = schedule.nranks
    # Dataflow issue (runtime/collc_flow.h) runs schedules without compression points only.
    flow = None if codecs else [dataflow.rank_ops(t, rank) for rank in range(p)]
    reads = None if flow is None else dataflow.input_reads(t)
    cursor = [0] * p
    for phase in t.phases:
        ident = c_ident(phase.name)
        idents[ident] = idents.get(ident, 0) + 1
        if idents[ident] > 1:
            ident = f"{ident}_{idents[ident]}"
        phases.append(_phase_plan(t, phase, ident, sources, where, codecs, flow, cursor, reads))
    params = ", ".join(f"{k}={'x'.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in schedule.params)
    return Plan(
        algorithm=schedule.algorithm,
        ident=c_ident(schedule.algorithm),
        collective=schedule.collective.value,
        collective_enum=f"COLLC_COLL_{schedule.collective.name}",
        mpi_name=MPI_NAMES[schedule.collective],
        api_name=API_NAMES[schedule.collective],
        source=sources.label(t.source),
        params=params,
        nranks=p,
        nchunks=schedule.nchunks,
        root=schedule.root if schedule.root is not None else -1,
        max_messages=max(t.max_messages, 1),
        scratch_chunks=tuple(_scratch_chunks(steps) for steps in t.ranks),
        receives=tuple(int(any(rs.recvs for rs in steps)) for steps in t.ranks),
        segments=_segments(schedule, t),
        phases=tuple(phases),
        flow_ops=() if flow is None else tuple(len(ops) for ops in flow),
        flow_scratch=() if flow is None else tuple(dataflow.flow_scratch(steps) for steps in t.ranks),
        runtime_headers=RUNTIME_HEADERS,
        cflags=" ".join(CFLAGS),
        sanitize_flags=" ".join(SANITIZE_FLAGS),
        codecs=codec_rows,
        adds_payloads=int(any(r.payload and r.reduce for rk in t.ranks for rs in rk for m in rs.recvs for r in m.runs)),
        error_bound=_c_float(bound32),
        error_bound64=_c_float(bound64),
        bound_scales=int(any(parse_codec(spec).error_model in ("rel", "cast") for spec in t.codecs)),
        bound_text=f"{bound32:.3g}",
        chunk_prefix=prefix_lines(schedule.chunk_weights),
        reads_input=reads is not None,
        input_copy=() if reads is None else _blocks(reads.copy),
        mixed_orders=c_string(reason) if (reason := mixed_orders(schedule)) else "",
        **({"sources": (source_names(schedule)[0],), "file_name": source_names(schedule)[0]} | extra),
    )


# --------------------------------------------------------------------------
# Generating and building
# --------------------------------------------------------------------------


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(data_dir("codegen") / "mpi_c"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def source_names(schedule: Schedule) -> tuple[str, str]:
    """The generated C file and header of ``schedule``."""
    ident = c_ident(schedule.algorithm)
    return f"collc_{ident}.c", f"collc_{ident}.h"


def library_path(out_dir: Path, schedule: Schedule) -> Path:
    return Path(out_dir) / f"libcollc_{c_ident(schedule.algorithm)}.so"


@dataclass(frozen=True, slots=True)
class SizeVariant:
    """Another rank count in a library: a verified schedule of the same algorithm for that p, the worst-case error
    bound it needs with compression points (`plan`), and its small-message schedule, if any (below `generate`'s
    ``small_below``), or its bands of schedules for smaller calls (`Band`, smallest first; not both)."""

    schedule: Schedule
    error_bound: tuple[float, float] | None = None
    small: Schedule | None = None
    bands: tuple[Band, ...] = ()


def _variant_problem(first: Schedule, other: Schedule, seen: set[int]) -> str | None:
    if other.algorithm != first.algorithm or other.collective is not first.collective:
        return f"a library holds one algorithm: {other.algorithm} ({other.collective.value}) next to {first.algorithm}"
    if other.nranks in seen:
        return f"p={other.nranks} is given twice"
    return None


def generate(
    schedule: Schedule,
    out_dir: Path,
    *,
    error_bound: tuple[float, float] | None = None,
    small: Schedule | None = None,
    small_below: int = SMALL_BELOW,
    bands: Sequence[Band] = (),
    sizes: Sequence[SizeVariant] = (),
    exact: bool = False,
) -> list[Path]:
    """Render the C sources for a VERIFIED schedule into out_dir (created if needed); returns the written files.

    A schedule with compression points needs ``error_bound`` (`plan`); one with a
    codec the C runtime lacks (zfp) is a CollError at the first op naming it.  With
    ``small`` (a verified schedule of the same collective and p), calls whose count times
    type size is below ``small_below`` bytes run it instead (`COLLC_SMALL_BYTES` overrides).
    ``bands`` generalises it to several (`Band`, smallest calls first, thresholds ascending;
    `collc.backends.mpi_c_dispatch`): a call runs the first band whose threshold it is below,
    ``schedule`` when it is below none (`COLLC_BAND_BYTES` overrides the thresholds).
    ``sizes`` adds the same algorithm at other rank counts: the library runs a call on the
    schedule of its communicator's size (files ``collc_<algorithm>_p<N>.c``).
    ``exact`` makes the interposed calls hand floating-point ``MPI_SUM`` and ``MPI_PROD``, whose last bits depend
    on the order in which ranks are combined, to the MPI library (as ``COLLC_SHIM_EXACT=1`` does; ``=0`` at run
    time turns it off), so that results are the MPI library's bit for bit.
    """
    out_dir = Path(out_dir)
    if small_below < 0:
        raise CollError(f"the small-message threshold must be at least 0 bytes, got {small_below}")
    ident = c_ident(schedule.algorithm)
    h_name = source_names(schedule)[1]
    variants = [SizeVariant(schedule, error_bound, None, bands_of(small, small_below, bands)), *sizes]
    seen: set[int] = set()
    for v in variants:
        problem = _variant_problem(schedule, v.schedule, seen)
        if problem is not None:
            raise CollError(problem, v.schedule.span)
        seen.add(v.schedule.nranks)
        check_bands(v.schedule, _bands(v, small_below))
    stems = [f"collc_{ident}"] + [f"collc_{ident}_p{v.schedule.nranks}" for v in sizes]
    sources = tuple(f for stem, v in zip(stems, variants, strict=True) for f in _files(stem, v, small_below))
    parts: list[tuple[str, Plan]] = []
    first: Plan | None = None
    for k, (stem, v) in enumerate(zip(stems, variants, strict=True)):
        p = v.schedule.nranks
        extra: dict[str, Any] = {"file_name": f"{stem}.c"}
        if k > 0:
            extra |= {
                "part_name": f"{stem}_schedule",
                "part_of": ident,
                "part_note": f"The p={p} schedule of libcollc_{ident}.so: it has no entry points of its own; "
                f"collc_{ident}.c runs it on communicators of {p} ranks.",
            }
        at = f" at p={p}" if sizes else ""
        chain = _bands(v, small_below)
        band_parts = _band_parts(ident, stem, at, chain)
        if chain:
            extra |= _link(stem, chain, len(chain))
            if len(chain) > 1:
                extra["bands"] = table_lines(stem, v.schedule, chain)
        if k == 0:
            extra |= {
                "sources": sources,
                "sizes": tuple(f"{s}_schedule" for s in stems[1:]),
                "sizes_text": ", ".join(map(str, sorted(seen))) if sizes else "",
                "exact": exact,
            }
            first = plan(v.schedule, v.error_bound, **extra)
            parts[:0] = [(f"{stem}.c", first), *band_parts]
        else:
            parts += [(f"{stem}.c", plan(v.schedule, v.error_bound, **extra)), *band_parts]
    assert first is not None
    pieces = [(name, "collc.c.j2", data) for name, data in parts]
    pieces += [(h_name, "collc.h.j2", first), ("Makefile", "Makefile.j2", first)]
    return write_sources(out_dir, _environment(), [(n, t, {"plan": d}) for n, t, d in pieces], RUNTIME_HEADERS)


def _bands(v: SizeVariant, small_below: int) -> tuple[Band, ...]:
    return bands_of(v.small, small_below, v.bands)


def _link(stem: str, chain: Sequence[Band], k: int) -> dict[str, Any]:
    """The `Plan` fields of the schedule above band ``k - 1`` of ``chain``: its link to that band."""
    below = chain[k - 1]
    return {
        "small_name": f"{band_stem(stem, k - 1, len(chain))}_schedule",
        "small_file": Sources(below.schedule.source).label(below.schedule.source),
        "small_below": below.below,
        "small_chained": k > 1,
    }


def _band_parts(ident: str, stem: str, at: str, chain: Sequence[Band]) -> list[tuple[str, Plan]]:
    """The files of the bands of the library part ``stem`` (``at``: its rank count, for the notes) and their
    plans, smallest calls first."""
    parts = []
    for k, band in enumerate(chain):
        band_name = band_stem(stem, k, len(chain))
        if len(chain) == 1:
            note = f"The small-message schedule of libcollc_{ident}.so{at}: it has no entry points of its own; "
            note += f"collc_{ident}.c runs it for calls below its threshold."
        else:
            low = f"of {chain[k - 1].below} bytes up to" if k > 0 else "below"
            note = f"Band {k} of libcollc_{ident}.so{at}: it has no entry points of its own; collc_{ident}.c runs "
            note += f"it for calls {low} {band.below} bytes (count times type size)."
        extra = _link(stem, chain, k) if k > 0 else {}
        part = plan(band.schedule, None, part_name=f"{band_name}_schedule", part_of=ident, part_note=note, **extra)
        parts.append((f"{band_name}.c", dataclasses.replace(part, file_name=f"{band_name}.c")))
    return parts


def _files(stem: str, v: SizeVariant, small_below: int) -> tuple[str, ...]:
    chain = _bands(v, small_below)
    return (f"{stem}.c", *(f"{band_stem(stem, k, len(chain))}.c" for k in range(len(chain))))


def _library_sources(out_dir: Path, main: Path) -> list[Path]:
    """``main`` and the generated parts it runs (directly or through another part), in a stable order: a part
    ``collc_X_Y.c`` belongs when a file already in names its schedule ``collc_X_Y_schedule``."""
    candidates = sorted(out_dir.glob(f"{main.stem}_*.c"))
    chosen, text = [main], main.read_text(encoding="utf-8")
    changed = True
    while changed:
        changed = False
        for part in candidates:
            if part not in chosen and f"{part.stem}_schedule" in text:
                chosen.append(part)
                text += part.read_text(encoding="utf-8")
                changed = True
    return chosen


def build(out_dir: Path, schedule: Schedule, *, cflags: Sequence[str] = (), sanitize: bool = False) -> Path:
    """Compile the generated sources with mpicc (mpitools.mpicc()) into out_dir/libcollc_<algorithm>.so and return it.

    Raise collc.diagnostics.CollError with the compiler's output on failure.
    With ``sanitize`` the library is built with AddressSanitizer; a program that
    is not built with it must then load the ASan runtime first:
    ``LD_PRELOAD="$(mpicc -print-file-name=libasan.so) libcollc_<algorithm>.so"``.
    """
    out_dir = Path(out_dir).resolve()
    source = out_dir / source_names(schedule)[0]
    if not source.is_file():
        raise CollError(f"{source} does not exist: generate the sources first (collc.backends.mpi_c.generate)")
    lib = library_path(out_dir, schedule)
    command = [str(mpicc()), *CFLAGS, *(SANITIZE_FLAGS if sanitize else ()), *extra_cflags(), *cflags]
    command += ["-I", str(out_dir), "-o", str(lib), *map(str, _library_sources(out_dir, source)), "-lm"]
    run_compiler(command, out_dir, source)
    return lib
