"""The ``cuda`` target: CUDA C++ that runs every rank of a schedule on GPUs in one process.

`generate` renders, from the step tables of a verified schedule
(`tables.from_schedule`) and the templates in ``codegen/cuda/``:

``collc_<algorithm>.cu``
    the schedule regrouped by step (one row per message: sender, receiver,
    where it lands, its chunk runs), one host function per phase, and the
    ``extern "C"`` API;
``collc_<algorithm>_cuda.h``
    the API: ``collc_<algorithm>_cuda_run(buffers, count, dtype, op,
    device_of_rank, scratch, stream)`` and its helpers;
``Makefile``
    the same build by hand (``make ARCH=sm_80``).

The runtime headers (``runtime/collc_cuda.cuh``: the step executor;
``runtime/collc_cuda_reduce.cuh``: the reduction kernels of every dtype and
op) are copied next to them, so that the folder builds on its own.  `build`
compiles it with nvcc into ``libcollc_<algorithm>_cuda.so``; `run` loads that
library with ctypes and runs it on CuPy arrays, p "virtual ranks" on one GPU
by default, checking every result against numpy (`local.expected`).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import jinja2
import numpy as np

from collc import collectives
from collc.backends import local, local_codecs, tables
from collc.backends.csource import SourceLine, Sources, c_ident, runs_text
from collc.codecs import parse_codec
from collc.codecs.fwq import Fwq
from collc.codecs.grid import GridCodec, grid_constants
from collc.diagnostics import CollError
from collc.ir import Schedule, format_id_set
from collc.resources import data_dir

__all__ = [
    "BASE_FLAGS",
    "DTYPES",
    "ERRORS",
    "OPS",
    "CudaRow",
    "Library",
    "build",
    "cupy_module",
    "generate",
    "gpu_arch",
    "library_path",
    "nvcc",
    "plan",
    "run",
    "run_library",
    "source_names",
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
)

DTYPES: dict[str, int] = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3, "int32": 4, "int64": 5}
"""The ``dtype`` argument of the C API (``enum collc_cuda_dtype``)."""

OPS: dict[str, int] = {"sum": 0, "prod": 1, "max": 2, "min": 3}
"""The ``op`` argument of the C API (``enum collc_cuda_op``)."""

ERRORS: dict[int, str] = {-1: "bad argument", -2: "CUDA error", -3: "a codec refused a value"}
"""Return values of ``collc_<algorithm>_cuda_run`` other than 0."""

NO_GPU = "the cuda backend needs a GPU and cupy"


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
        nvcc_flags=" ".join(_flags(arch)),
    )


# --------------------------------------------------------------------------
# Generating and building
# --------------------------------------------------------------------------


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(data_dir("codegen") / "cuda"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def _flags(arch: str) -> tuple[str, ...]:
    return (BASE_FLAGS[0], f"-arch={arch}", *BASE_FLAGS[1:])


def source_names(schedule: Schedule) -> tuple[str, str]:
    """The generated CUDA file and header of ``schedule``."""
    ident = c_ident(schedule.algorithm)
    return f"collc_{ident}.cu", f"collc_{ident}_cuda.h"


def library_path(out_dir: Path, schedule: Schedule) -> Path:
    return Path(out_dir) / f"libcollc_{c_ident(schedule.algorithm)}_cuda.so"


def generate(schedule: Schedule, out_dir: Path) -> list[Path]:
    """Render the CUDA sources for a VERIFIED schedule into out_dir (created if needed); returns the written files.

    Schedules with compression points are refused by `tables.from_schedule` (CollError).
    """
    out_dir = Path(out_dir)
    data = plan(schedule)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = _environment()
    cu_name, h_name = source_names(schedule)
    written = []
    for name, template in ((cu_name, "collc.cu.j2"), (h_name, "collc_cuda.h.j2"), ("Makefile", "Makefile.j2")):
        path = out_dir / name
        path.write_text(env.get_template(template).render(plan=data), encoding="utf-8")
        written.append(path)
    runtime = data_dir("runtime")
    for header in RUNTIME_HEADERS:
        written.append(Path(shutil.copyfile(runtime / header, out_dir / header)))
    return written


def nvcc() -> Path:
    """The nvcc to build with: ``$COLLC_NVCC``, else ``nvcc`` on PATH, else ``$CUDA_HOME/bin/nvcc``."""
    candidates = [os.environ.get("COLLC_NVCC"), shutil.which("nvcc")]
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home:
            candidates.append(str(Path(home) / "bin" / "nvcc"))
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise CollError("nvcc not found: put the CUDA toolkit's bin folder on PATH or set COLLC_NVCC")


def build(out_dir: Path, schedule: Schedule, *, arch: str = DEFAULT_ARCH, flags: Sequence[str] = ()) -> Path:
    """Compile the generated sources with nvcc into out_dir/libcollc_<algorithm>_cuda.so and return it.

    ``nvcc -O3 -arch=<arch> -Xcompiler -fPIC -shared``; CollError with the
    compiler's output on failure.
    """
    out_dir = Path(out_dir).resolve()
    source = out_dir / source_names(schedule)[0]
    if not source.is_file():
        raise CollError(f"{source} does not exist: generate the sources first (collc.backends.cuda.generate)")
    lib = library_path(out_dir, schedule)
    command = [str(nvcc()), *_flags(arch), *flags, "-I", str(out_dir), "-o", str(lib), str(source)]
    try:
        proc = subprocess.run(command, cwd=out_dir, capture_output=True, text=True, check=False)
    except OSError as err:
        raise CollError(f"cannot run {command[0]}: {err}") from None
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        raise CollError(f"nvcc failed on {source} (exit status {proc.returncode}):\n$ {' '.join(command)}\n{output}")
    return lib


# --------------------------------------------------------------------------
# Loading and running
# --------------------------------------------------------------------------


class Library:
    """The entry points of a built ``libcollc_<algorithm>_cuda.so``, through ctypes.

    `layout` and `scratch_bytes` need no GPU; `run` does.
    """

    def __init__(self, path: Path, schedule: Schedule) -> None:
        self.schedule = schedule
        self.path = Path(path)
        lib = ctypes.CDLL(str(self.path))
        prefix = f"collc_{c_ident(schedule.algorithm)}_cuda"
        self._run = getattr(lib, f"{prefix}_run")
        self._run.restype = ctypes.c_int
        self._run.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_int64,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_int),
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_void_p,
        ]
        self._scratch = getattr(lib, f"{prefix}_scratch_bytes")
        self._scratch.restype = ctypes.c_int64
        self._scratch.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.c_int]
        self._layout = getattr(lib, f"{prefix}_layout")
        self._layout.restype = ctypes.c_int
        self._layout.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)]
        self._release = getattr(lib, f"{prefix}_release")
        self._release.restype = None
        self._error = getattr(lib, f"{prefix}_last_error")
        self._error.restype = ctypes.c_char_p
        self._check = getattr(lib, f"{prefix}_check")
        self._check.restype = ctypes.c_int

    def last_error(self) -> str:
        return (self._error() or b"").decode("utf-8", "replace")

    def layout(self, count: int) -> np.ndarray:
        """The chunks' element offsets for ``count`` elements, as the library computes them."""
        offsets = np.zeros(self.schedule.nchunks + 1, dtype=np.int64)
        got = self._layout(count, offsets.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)))
        if got < 0:
            raise CollError(f"{self.path.name}: layout({count}): {self.last_error()}")
        return offsets

    def scratch_bytes(self, count: int, dtype: str, rank: int) -> int:
        return int(self._scratch(count, DTYPES[dtype], rank))

    def run(
        self,
        buffers: Sequence[int],
        count: int,
        dtype: str,
        op: str,
        devices: Sequence[int] | None = None,
        stream: int = 0,
        scratch: Sequence[int] | None = None,
    ) -> None:
        """Run on device pointers ``buffers`` (one per rank); CollError when the library returns an error.

        ``devices``: each rank's device (None: the current one); ``stream``: a
        ``cudaStream_t`` (0: the legacy default stream); ``scratch``: device
        pointers of `scratch_bytes` each (None: the library's own).
        """
        p = self.schedule.nranks
        ptrs = (ctypes.c_void_p * p)(*buffers)
        devs = None if devices is None else (ctypes.c_int * p)(*devices)
        extra = None if scratch is None else (ctypes.c_void_p * p)(*scratch)
        code = self._run(ptrs, count, DTYPES[dtype], OPS[op], devs, extra, ctypes.c_void_p(stream))
        if code != 0:
            raise CollError(f"{self.path.name}: {ERRORS.get(code, f'error {code}')}: {self.last_error()}")

    def check(self) -> None:
        """Wait for the last run; CollError when a codec refused a value in it (or the GPU work failed)."""
        code = self._check()
        if code != 0:
            raise CollError(f"{self.path.name}: {ERRORS.get(code, f'error {code}')}: {self.last_error()}")

    def release(self) -> None:
        """Free the streams, events and scratch space the library keeps between calls."""
        self._release()


@dataclass(frozen=True, slots=True)
class CudaRow:
    """One size: CUDA-event times of the timed iterations and the wrong elements of the last one.

    For a schedule with compression points, ``wrong`` counts the elements that
    differ from the numpy executor (`local_codecs.execute`: the codecs are
    bit-exact, so the results must be identical) or that exceed the verifier's
    error bound, whichever is more; ``max_abs_error`` and ``error_bound`` are
    as in `local.RunResult`.
    """

    impl: str
    count: int
    size_bytes: int
    avg_us: float
    min_us: float
    max_us: float
    iters: int
    wrong: int
    max_abs_error: float | None = None
    error_bound: float | None = None


def cupy_module() -> ModuleType:
    """CuPy, when it is installed and sees a GPU; otherwise CollError."""
    try:
        import cupy
    except ImportError:
        raise CollError(f"{NO_GPU}: cupy is not installed (pip install cupy-cuda13x)") from None
    if not cupy.cuda.is_available():
        raise CollError(f"{NO_GPU}: cupy.cuda.is_available() is False")
    return cupy


def gpu_arch(device: int = 0) -> str:
    """The ``-arch`` of ``device`` (``sm_90`` on an H100), from CuPy; CollError without a GPU."""
    return f"sm_{cupy_module().cuda.Device(device).compute_capability}"


def run(
    schedule: Schedule,
    counts: Sequence[int],
    dtype: str = "float32",
    op: str = "sum",
    iters: int = 1,
    *,
    warmup: int = 1,
    seed: int = 0,
    devices: Sequence[int] | None = None,
    workdir: Path | None = None,
    error_bounds: np.ndarray | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[CudaRow]:
    """Generate, build and run a VERIFIED schedule on CuPy arrays, once per count; one row per count.

    Rank r's buffer lives on ``devices[r]`` (default: every rank on device 0).
    The library is built for the architecture of rank 0's device, in
    ``workdir`` (default: a temporary folder).  See `run_library`.
    """
    _check_run_args(dtype, op, iters, warmup, schedule, error_bounds)
    placement = _placement(schedule, devices)
    arch = gpu_arch(placement[0])
    with tempfile.TemporaryDirectory(prefix="collc-cuda-") as tmp:
        out = Path(workdir) if workdir is not None else Path(tmp)
        generate(schedule, out)
        lib = Library(build(out, schedule, arch=arch), schedule)
        try:
            return run_library(
                lib, counts, dtype, op, iters, warmup=warmup, seed=seed, devices=placement,
                error_bounds=error_bounds, on_progress=on_progress,
            )  # fmt: skip
        finally:
            lib.release()


def run_library(
    lib: Library,
    counts: Sequence[int],
    dtype: str = "float32",
    op: str = "sum",
    iters: int = 1,
    *,
    warmup: int = 1,
    seed: int = 0,
    devices: Sequence[int] | None = None,
    error_bounds: np.ndarray | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[CudaRow]:
    """Run a built library on CuPy arrays, once per count; one row per count (``on_progress(done, total)``,
    when given, is called after each).

    Inputs come from `local.make_inputs` (``seed``); every iteration starts
    from them and is timed with CUDA events on the current stream of rank 0's
    device; the last result is checked with `local.count_wrong`, or for a
    schedule with compression points with `judge_compressed` against
    ``error_bounds``, the verifier's bound per (rank, chunk) slot for inputs of
    magnitude at most 1 (`collc.verify.compression.analyse`).
    """
    _check_run_args(dtype, op, iters, warmup, lib.schedule, error_bounds)
    cp = cupy_module()
    placement = _placement(lib.schedule, devices)
    rows = []
    for count in counts:
        rows.append(_run_count(cp, lib, count, dtype, op, iters, warmup, seed, placement, error_bounds))
        if on_progress is not None:
            on_progress(len(rows), len(counts))
    return rows


def _check_run_args(
    dtype: str, op: str, iters: int, warmup: int, schedule: Schedule, error_bounds: np.ndarray | None
) -> None:
    if dtype not in DTYPES or op not in OPS:
        raise CollError(f"unsupported dtype/op {dtype}/{op}; dtypes: {', '.join(DTYPES)}; ops: {', '.join(OPS)}")
    if iters < 1 or warmup < 0:
        raise CollError(f"iters must be >= 1 and warmup >= 0, got {iters} and {warmup}")
    if not schedule.compresses():
        return
    ops = ("sum",) if adds_payloads(tables.from_schedule(schedule, compression=True)) else local_codecs.OPS
    if dtype != "float32" or op not in ops:
        raise CollError(
            f"{schedule.algorithm} compresses: the cuda backend runs it on float32 data with the op(s) "
            f"{', '.join(ops)}, not {dtype}/{op}"
        )
    shape = (schedule.nranks, schedule.nchunks)
    if error_bounds is None or error_bounds.shape != shape:
        got = "none" if error_bounds is None else f"shape {error_bounds.shape}"
        raise CollError(
            f"{schedule.algorithm} has compression points: its result is judged by the verifier's error bounds "
            f"(collc.verify.compression.analyse), one per (rank, chunk) slot of shape {shape}; got {got}"
        )


def _placement(schedule: Schedule, devices: Sequence[int] | None) -> list[int]:
    placement = [0] * schedule.nranks if devices is None else [int(d) for d in devices]
    if len(placement) != schedule.nranks:
        raise CollError(f"devices names {len(placement)} devices, the schedule has {schedule.nranks} ranks")
    return placement


def _run_count(
    cp: ModuleType,
    lib: Library,
    count: int,
    dtype: str,
    op: str,
    iters: int,
    warmup: int,
    seed: int,
    placement: list[int],
    error_bounds: np.ndarray | None,
) -> CudaRow:
    schedule = lib.schedule
    try:
        inputs = local.make_inputs(schedule, count, dtype, seed, op=op)
    except ValueError as err:
        raise CollError(str(err)) from None
    raw = inputs.view(np.uint8)  # the library sees bytes: CuPy has no bfloat16
    pristine, work = [], []
    for rank, device in enumerate(placement):
        with cp.cuda.Device(device):
            pristine.append(cp.asarray(raw[rank]))
            work.append(cp.empty_like(pristine[-1]))
    times: list[float] = []
    with cp.cuda.Device(placement[0]):
        stream = cp.cuda.get_current_stream()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        for i in range(warmup + iters):
            for rank, device in enumerate(placement):
                with cp.cuda.Device(device):
                    work[rank][...] = pristine[rank]
            for device in sorted(set(placement)):
                cp.cuda.Device(device).synchronize()
            start.record(stream)
            lib.run([w.data.ptr for w in work], count, dtype, op, placement, stream.ptr)
            stop.record(stream)
            try:
                stop.synchronize()
            except cp.cuda.runtime.CUDARuntimeError as err:
                raise CollError(f"{lib.path.name}: the GPU work failed: {err}") from None
            lib.check()
            if i >= warmup:
                times.append(cp.cuda.get_elapsed_time(start, stop) * 1e3)
    result = np.stack([cp.asnumpy(w) for w in work]).view(inputs.dtype)
    itemsize = inputs.dtype.itemsize
    timing = ("cuda", count, count * itemsize, sum(times) / len(times), min(times), max(times), iters)
    if schedule.compresses() and error_bounds is not None:
        wrong, worst, bound = judge_compressed(schedule, result, inputs, op, count, error_bounds)
        return CudaRow(*timing, wrong, worst, bound)
    values, mask = local.expected(schedule, inputs, op)
    p = schedule.nranks
    wrong = local.count_wrong(result, values, mask, dtype, op, p, reduces=schedule.collective.reduces)
    return CudaRow(*timing, wrong)


def judge_compressed(
    schedule: Schedule, result: np.ndarray, inputs: np.ndarray, op: str, count: int, bounds: np.ndarray
) -> tuple[int, float, float]:
    """(wrong elements, the largest absolute error, the largest bound) of a compressed schedule's result.

    Wrong: the elements of the output that differ bit for bit from the numpy
    executor's (`local_codecs.execute` on the same inputs), or that are
    further from the exact result than ``bounds`` (the verifier's bound per
    (rank, chunk) slot for inputs in [-1, 1]; `local.judge_error_bounds`),
    whichever count is larger.
    """
    p, n = schedule.nranks, schedule.nchunks
    offsets = collectives.element_offsets(schedule.collective, p, n, count)
    reference = inputs.copy()
    local_codecs.execute(schedule, reference, op, offsets)
    _, mask = local.expected(schedule, inputs, op)
    mask = np.asarray(mask, dtype=bool)
    differ = result.view(np.uint32) != reference.view(np.uint32)
    beyond, worst, bound = local.judge_error_bounds(schedule, result, inputs, op, count, bounds)
    return max(int(np.count_nonzero(differ & mask)), beyond), worst, bound
