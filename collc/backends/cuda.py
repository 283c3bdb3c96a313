"""The ``cuda`` target: CUDA C++ that runs every rank of a schedule on GPUs in one process.

`generate` renders, from the step tables of a verified schedule
(`tables.from_schedule`) and the templates in ``codegen/cuda/``:

``collc_<algorithm>.cu``
    the schedule regrouped by step (one row per message: sender, receiver,
    where it lands, its chunk runs), one host function per phase, and the
    ``extern "C"`` API;
``collc_<algorithm>_cuda.h``
    the API: ``collc_<algorithm>_cuda_run(buffers, count, dtype, op,
    device_of_rank, scratch, stream)`` and its helpers; for an allgather, a
    reduce-scatter or an alltoall also ``..._run_v(buffers, counts, ...)``,
    the counts given at run time (``runtime/collc_cuda_vcoll.cuh``);
``Makefile``
    the same build by hand (``make ARCH=sm_80``).

The rows the templates print come from `cuda_plan.plan`.  The runtime
headers (``runtime/collc_cuda.cuh``: the step executor;
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
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import jinja2
import numpy as np

from collc import collectives
from collc.backends import local, local_codecs, tables
from collc.backends.csource import c_ident, run_compiler, write_sources
from collc.backends.cuda_plan import (
    BASE_FLAGS,
    DEFAULT_ARCH,
    RUNTIME_HEADERS,
    FusedRun,
    Message,
    PhasePlan,
    Plan,
    adds_payloads,
    codec_row,
    fusions,
    nvcc_flags,
    plan,
    step_messages,
)
from collc.diagnostics import CollError
from collc.ir import Collective, Schedule
from collc.resources import data_dir

__all__ = [
    "BASE_FLAGS",
    "DEFAULT_ARCH",
    "DTYPES",
    "ERRORS",
    "OPS",
    "RUNTIME_HEADERS",
    "CudaRow",
    "FusedRun",
    "Library",
    "Message",
    "PhasePlan",
    "Plan",
    "adds_payloads",
    "build",
    "check_run_args",
    "codec_row",
    "compressed_ops",
    "cupy_module",
    "fusions",
    "generate",
    "gpu_arch",
    "library_path",
    "nvcc",
    "nvcc_flags",
    "plan",
    "run",
    "run_library",
    "source_names",
    "step_messages",
]

DTYPES: dict[str, int] = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3, "int32": 4, "int64": 5}
"""The ``dtype`` argument of the C API (``enum collc_cuda_dtype``)."""

OPS: dict[str, int] = {"sum": 0, "prod": 1, "max": 2, "min": 3}
"""The ``op`` argument of the C API (``enum collc_cuda_op``)."""

ERRORS: dict[int, str] = {-1: "bad argument", -2: "CUDA error", -3: "a codec refused a value"}
"""Return values of ``collc_<algorithm>_cuda_run`` other than 0."""

NO_GPU = "the cuda backend needs a GPU and cupy"

Count = int | Sequence[int]
"""One row of a run: an element count, or the counts of a call given at run time (`Library.run_v`)."""


def given_counts(count: Count) -> list[int] | None:
    """The counts of a call given at run time when ``count`` is a sequence of them; None for an element count."""
    return None if isinstance(count, int | np.integer) else [int(c) for c in count]


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
    cu_name, h_name = source_names(schedule)
    files = [(cu_name, "collc.cu.j2"), (h_name, "collc_cuda.h.j2"), ("Makefile", "Makefile.j2")]
    return write_sources(out_dir, _environment(), [(n, t, {"plan": data}) for n, t in files], RUNTIME_HEADERS)


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
    command = [str(nvcc()), *nvcc_flags(arch), *flags, "-I", str(out_dir), "-o", str(lib), str(source)]
    run_compiler(command, out_dir, source)
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
        int64s = ctypes.POINTER(ctypes.c_int64)
        self._run_v = getattr(lib, f"{prefix}_run_v", None)  # allgather, reduce_scatter and alltoall only
        if self._run_v is not None:
            self._run_v.restype = ctypes.c_int
            self._run_v.argtypes = [self._run.argtypes[0], int64s, *self._run.argtypes[2:]]
            self._scratch_v = getattr(lib, f"{prefix}_scratch_bytes_v")
            self._scratch_v.restype = ctypes.c_int64
            self._scratch_v.argtypes = [int64s, ctypes.c_int, ctypes.c_int]
            self._layout_v = getattr(lib, f"{prefix}_layout_v")
            self._layout_v.restype = ctypes.c_int
            self._layout_v.argtypes = [int64s, int64s]

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

    def _counts(self, counts: Sequence[int]) -> np.ndarray:
        """``counts`` as the int64 array the ``_v`` entry points read (p of them, p*p for an alltoall: the C API
        reads that many); CollError when there are not as many, or the library has no such entry points."""
        s = self.schedule
        if self._run_v is None:
            raise CollError(
                f"{self.path.name} has no entry points for counts given at run time: its collective is a "
                f"{s.collective.value}, not an allgather, a reduce_scatter or an alltoall"
            )
        want = s.nranks * s.nranks if s.collective is Collective.ALLTOALL else s.nranks
        if len(counts) != want:
            raise CollError(
                f"{self.path.name}: a {s.collective.value} on {s.nranks} ranks takes {want} counts, got {len(counts)}"
            )
        return np.ascontiguousarray(counts, dtype=np.int64)

    def layout_v(self, counts: Sequence[int]) -> np.ndarray:
        """The chunks' element offsets for counts given at run time (``_layout_v``), as the library cuts them."""
        offsets = np.zeros(self.schedule.nchunks + 1, dtype=np.int64)
        arg = self._counts(counts)
        if self._layout_v(_int64s(arg), _int64s(offsets)) < 0:
            raise CollError(f"{self.path.name}: layout_v({list(counts)}): {self.last_error()}")
        return offsets

    def scratch_bytes_v(self, counts: Sequence[int], dtype: str, rank: int) -> int:
        """The scratch bytes rank ``rank`` needs for a `run_v` with ``counts`` (-1 for bad arguments)."""
        return int(self._scratch_v(_int64s(self._counts(counts)), DTYPES[dtype], rank))

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
        self._launch(self._run, buffers, count, dtype, op, devices, stream, scratch)

    def run_v(
        self,
        buffers: Sequence[int],
        counts: Sequence[int],
        dtype: str,
        op: str,
        devices: Sequence[int] | None = None,
        stream: int = 0,
        scratch: Sequence[int] | None = None,
    ) -> None:
        """`run` with counts given at run time (``_run_v``: p counts, p*p for an alltoall; every buffer holds
        their sum, cut as `layout_v` says); CollError when the library returns an error (a schedule with chunk
        weights or compression points refuses them)."""
        arg = self._counts(counts)
        self._launch(self._run_v, buffers, _int64s(arg), dtype, op, devices, stream, scratch)

    def _launch(
        self,
        entry: Callable[..., int],
        buffers: Sequence[int],
        count: object,
        dtype: str,
        op: str,
        devices: Sequence[int] | None,
        stream: int,
        scratch: Sequence[int] | None,
    ) -> None:
        """Call ``entry`` (``_run`` or ``_run_v``) with ``count`` (an element count, or the counts' pointer) and
        the per-rank arrays; CollError when it returns an error."""
        p = self.schedule.nranks
        ptrs = (ctypes.c_void_p * p)(*buffers)
        devs = None if devices is None else (ctypes.c_int * p)(*devices)
        extra = None if scratch is None else (ctypes.c_void_p * p)(*scratch)
        code = entry(ptrs, count, DTYPES[dtype], OPS[op], devs, extra, ctypes.c_void_p(stream))
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


def _int64s(array: np.ndarray) -> ctypes._Pointer[ctypes.c_int64]:
    """A C pointer to a contiguous int64 array (kept alive by the caller)."""
    return array.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))


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
    counts: Sequence[Count],
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
    check_run_args(dtype, op, iters, warmup, schedule, error_bounds)
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
    counts: Sequence[Count],
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
    when given, is called after each).  A count may be a sequence: the counts of a call given at run time
    (`Library.run_v`; the row's ``count`` is then the logical elements per rank, on average for an alltoall).

    Inputs come from `local.make_inputs` (``seed``); every iteration starts
    from them and is timed with CUDA events on the current stream of rank 0's
    device; the last result is checked with `local.count_wrong`, or for a
    schedule with compression points with `judge_compressed` against
    ``error_bounds``, the verifier's bound per (rank, chunk) slot for inputs of
    magnitude at most 1 (`collc.verify.compression.analyse`).
    """
    check_run_args(dtype, op, iters, warmup, lib.schedule, error_bounds)
    cp = cupy_module()
    placement = _placement(lib.schedule, devices)
    rows = []
    for count in counts:
        rows.append(_run_count(cp, lib, count, dtype, op, iters, warmup, seed, placement, error_bounds))
        if on_progress is not None:
            on_progress(len(rows), len(counts))
    return rows


def compressed_ops(schedule: Schedule) -> tuple[str, ...]:
    """The ops a compressing schedule runs on float32: sum alone where payloads are added, else every local codec op."""
    return ("sum",) if adds_payloads(tables.from_schedule(schedule, compression=True)) else local_codecs.OPS


def check_run_args(
    dtype: str, op: str, iters: int, warmup: int, schedule: Schedule, error_bounds: np.ndarray | None
) -> None:
    """CollError unless the C API takes ``dtype`` and ``op`` and the schedule's codecs can run them."""
    if dtype not in DTYPES or op not in OPS:
        raise CollError(f"unsupported dtype/op {dtype}/{op}; dtypes: {', '.join(DTYPES)}; ops: {', '.join(OPS)}")
    if iters < 1 or warmup < 0:
        raise CollError(f"iters must be >= 1 and warmup >= 0, got {iters} and {warmup}")
    if not schedule.compresses():
        return
    ops = compressed_ops(schedule)
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
    count: Count,
    dtype: str,
    op: str,
    iters: int,
    warmup: int,
    seed: int,
    placement: list[int],
    error_bounds: np.ndarray | None,
) -> CudaRow:
    schedule = lib.schedule
    vcounts = given_counts(count)
    try:
        offsets = None if vcounts is None else local.counts_offsets(schedule, vcounts)
        elements = 0 if vcounts is not None else int(count)  # type: ignore[arg-type]
        inputs = local.make_inputs(schedule, elements, dtype, seed, op=op, offsets=offsets)
    except ValueError as err:
        raise CollError(str(err)) from None
    n = int(count) if vcounts is None else collectives.counts_count(schedule.collective, vcounts)
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
            pointers = [w.data.ptr for w in work]
            if vcounts is None:
                lib.run(pointers, n, dtype, op, placement, stream.ptr)
            else:
                lib.run_v(pointers, vcounts, dtype, op, placement, stream.ptr)
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
    timing = ("cuda", n, n * itemsize, sum(times) / len(times), min(times), max(times), iters)
    if schedule.compresses() and error_bounds is not None:
        wrong, worst, bound = judge_compressed(schedule, result, inputs, op, n, error_bounds)
        return CudaRow(*timing, wrong, worst, bound)
    values, mask = local.expected(schedule, inputs, op, offsets)
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
    offsets = collectives.element_offsets(schedule.collective, p, n, count, schedule.chunk_weights)
    reference = inputs.copy()
    local_codecs.execute(schedule, reference, op, offsets)
    _, mask = local.expected(schedule, inputs, op)
    mask = np.asarray(mask, dtype=bool)
    differ = result.view(np.uint32) != reference.view(np.uint32)
    beyond, worst, bound = local.judge_error_bounds(schedule, result, inputs, op, count, bounds)
    return max(int(np.count_nonzero(differ & mask)), beyond), worst, bound
