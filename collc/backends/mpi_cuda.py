"""The ``mpi-cuda`` target: CUDA C++ over MPI, one process per GPU.

`generate` renders, from the same plan as the single-process ``cuda`` target
(`cuda.plan`: the step tables of the verified schedule, regrouped by step,
with its fused decompress → reduce → compress runs) and the templates in
``codegen/mpi_cuda/`` (which include the cuda target's table templates):

``collc_<algorithm>_mpicuda.cu``
    the tables and the ``extern "C"`` API; ``runtime/collc_mpicuda.cuh`` runs
    the rows that name the calling rank, over MPI: by default by dataflow, from
    each rank's messages and what each waits for (`dataflow.rank_ops`, as the
    mpi-c target; ``runtime/collc_mpicuda_flow.cuh``), step by step with
    ``COLLC_ISSUE=steps`` and always for schedules with compression points;
``collc_<algorithm>_mpicuda.h``
    the API: ``collc_<algorithm>_mpicuda_run(buffer, count, dtype, op, comm,
    stream)`` and its helpers; for an allgather, a reduce-scatter or an
    alltoall also ``..._run_v(buffer, counts, ...)``, the counts given at run
    time (``runtime/collc_mpicuda_vcoll.cuh``);
``collc_<algorithm>_mpicuda_main.cu``
    the driver program that ``collc run --backend mpi-cuda`` launches under
    ``mpiexec`` (``runtime/collc_mpicuda_main.h``);
``Makefile``
    the same build by hand, with nvcc and the MPI C++ wrapper as its host
    compiler (``make ARCH=sm_80 MPICXX=...``).

The runtime headers (the cuda target's kernels and table types, and the
mpi-cuda executor) are copied next to them.  `build` compiles the library
and the driver; `run` builds them for the visible GPU, writes every rank's
input, launches the driver on ``schedule.nranks`` processes
(`mpi_launch`'s watched job: a stalled or dead rank ends with an error
naming it) and checks every rank's result against numpy.

Transport (``COLLC_TRANSPORT`` for the ranks, decided at run time, see
docs/mpi-cuda.md): ``auto``, CUDA IPC between the ranks of one host and MPI
between hosts; ``ipc``, every rank on one host; ``mpi``, MPI for every message
(device pointers to a CUDA-aware MPI, else staged through pinned host memory).
NCCL is not implemented: ``--transport nccl`` is refused.
"""

from __future__ import annotations

import ctypes
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import jinja2
import numpy as np

from collc import collectives
from collc.backends import cuda, cuda_plan, dataflow, local, mpi_launch, mpitools, tables
from collc.backends.csource import c_ident, run_compiler, write_sources
from collc.diagnostics import CollError
from collc.ir import Schedule, bits_to_runs, format_id_set
from collc.resources import data_dir

__all__ = [
    "ANYP_MARK",
    "LIBRARY_FLAGS",
    "NO_DEVICE",
    "RUNTIME_HEADERS",
    "TRANSPORTS",
    "FlowBlock",
    "MpiCudaRow",
    "Plan",
    "build",
    "check_transport",
    "driver_link",
    "driver_path",
    "environment",
    "generate",
    "library_path",
    "nvcc_command",
    "plan",
    "run",
    "run_built",
    "source_names",
    "visible_gpus",
]

TRANSPORTS: tuple[str, ...] = ("auto", "ipc", "mpi", "nccl")
"""What ``--transport`` accepts; all but ``nccl`` are implemented."""

RUNTIME_HEADERS: tuple[str, ...] = (
    *cuda.RUNTIME_HEADERS,
    "collc_mpicuda.cuh",
    "collc_mpicuda_wire.cuh",
    "collc_mpicuda_ipc.cuh",
    "collc_mpicuda_flow.cuh",
    "collc_mpicuda_state.cuh",
    "collc_mpicuda_stream.cuh",
    "collc_mpicuda_vcoll.cuh",
    "collc_mpicuda_main.h",
)

NO_DEVICE = "no CUDA device is visible"

LIBRARY_FLAGS = ("-Xcompiler", "-fPIC", "-shared")

ANYP_MARK = '#include "collc_mpicuda_anyp.cuh"'
"""The line by which the .cu of an any-p library (`mpi_cuda_anyp`) is told from one of a single p (they share its
file name)."""


@dataclass(frozen=True, slots=True)
class PhaseRow:
    cells: str  # the struct collc_mpicuda_phase initializer
    note: str


@dataclass(frozen=True, slots=True)
class FlowRow:
    cells: str  # the struct collc_mpicuda_fop initializer: phase, message row, first dep, deps
    note: str


@dataclass(frozen=True, slots=True)
class FlowBlock:
    """One rank's messages in dataflow order (`dataflow.rank_ops`), as rows of the phases' message tables."""

    rank: int
    first: int  # its first row in the flow table
    rows: tuple[FlowRow, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """What the mpi-cuda templates render: the cuda target's plan and what this target adds."""

    tables: cuda.Plan
    phases_with_steps: tuple[cuda.PhasePlan, ...]
    phase_rows: tuple[PhaseRow, ...]
    nphases: int
    library: str
    driver: str
    link_name: str
    runtime_headers: tuple[str, ...]
    nvcc_base: str
    nvcc_flags: str
    library_flags: str
    flow: tuple[FlowBlock, ...] = ()  # dataflow issue: every rank's messages; () with compression points
    flow_deps: tuple[dataflow.DepRow, ...] = ()
    flow_links: tuple[int, ...] = ()  # [rank]: messages its dataflow run may have under way at once

    @property
    def flow_end(self) -> int:
        """The rows of the flow table."""
        return sum(len(b.rows) for b in self.flow)


@dataclass(frozen=True, slots=True)
class MpiCudaRow(cuda.CudaRow):
    """A `cuda.CudaRow` of an mpi-cuda run (times: each rank's mean, then avg / min / max over ranks, OSU
    style), and how its messages travelled."""

    transport: str = ""


def check_transport(transport: str) -> None:
    """CollError for a transport this target does not have."""
    if transport in ("auto", "ipc", "mpi"):
        return
    if transport == "nccl":
        raise CollError(
            "the mpi-cuda target has no NCCL transport: it moves messages by CUDA IPC between the ranks of a host "
            "and over MPI between hosts; use --transport auto, ipc or mpi"
        )
    raise CollError(f"unknown transport {transport!r}; expected one of {', '.join(TRANSPORTS)}")


def _phase_row(ph: cuda.PhasePlan) -> PhaseRow:
    steps = f"{ph.ident}_steps" if ph.steps else "NULL"
    msgs, runs = (f"{ph.ident}_msgs", f"{ph.ident}_runs") if ph.steps and ph.runs else ("NULL", "NULL")
    locals_ = f"{ph.ident}_locals" if ph.steps and ph.has_locals else "NULL"
    cells = f'"{ph.name}", {steps}, {len(ph.steps)}, {msgs}, {runs}, {locals_}'
    what = f"steps {ph.first} .. {ph.last}" if ph.steps else f"steps {ph.first} .. {ph.last} move nothing"
    return PhaseRow(cells, f"{ph.name}: {what}")


def _flow(schedule: Schedule) -> tuple[tuple[FlowBlock, ...], tuple[dataflow.DepRow, ...], tuple[int, ...]]:
    """Dataflow issue's tables: every rank's messages in `dataflow.rank_ops` order, each naming its row in the
    phases' message tables (the cuda target's, `cuda_plan.step_messages`) and the earlier messages it waits for;
    the messages each rank may have under way at once.  Empty for a schedule with compression points: those run
    step by step (their payload store and fused re-encodes are ordered by the steps)."""
    t = tables.from_schedule(schedule, compression=True)
    if t.codecs:
        return (), (), ()
    messages = cuda_plan.step_messages(t)
    row: dict[tuple[int, int, int], tuple[int, int]] = {}  # (step, src, dst) -> (phase, row in its messages)
    for k, phase in enumerate(t.phases):
        at = 0
        for index in range(phase.first, phase.last + 1):
            for m in messages[index]:
                row[(index, m.src, m.dst)] = (k, at)
                at += 1
    blocks: list[FlowBlock] = []
    deps: list[dataflow.DepRow] = []
    first = dep_at = 0
    for rank in range(schedule.nranks):
        rows = []
        for index, op in enumerate(dataflow.rank_ops(t, rank)):
            src, dst = (rank, op.peer) if op.send else (op.peer, rank)
            phase, msg = row[(op.step, src, dst)]
            chunks = format_id_set(bits_to_runs(op.chunks))
            what = f"step {op.step}: {'to' if op.send else 'from'} {op.peer}: {chunks}"
            rows.append(FlowRow(f"{phase}, {msg}, {dep_at}, {len(op.deps)}", dataflow.op_note(index, op.deps, what)))
            if op.deps:
                deps.append(dataflow.dep_row(rank, index, op.deps))
                dep_at += len(op.deps)
        blocks.append(FlowBlock(rank, first, tuple(rows)))
        first += len(rows)
    links = tuple(dataflow.flow_links(steps) for steps in t.ranks)
    return tuple(blocks), tuple(deps), links


def plan(schedule: Schedule, *, arch: str = cuda.DEFAULT_ARCH) -> Plan:
    """The data the templates render for ``schedule`` (which must have passed verification)."""
    tables = cuda.plan(schedule, arch=arch)
    rows = tuple(_phase_row(ph) for ph in tables.phases)
    ident = tables.ident
    base = (cuda.BASE_FLAGS[0],)
    flow, flow_deps, flow_links = _flow(schedule)
    return Plan(
        flow=flow,
        flow_deps=flow_deps,
        flow_links=flow_links,
        tables=tables,
        phases_with_steps=tuple(ph for ph in tables.phases if ph.steps),
        phase_rows=rows or (PhaseRow("NULL, NULL, 0, NULL, NULL, NULL", "no phases"),),
        nphases=len(rows),
        library=f"libcollc_{ident}_mpicuda.so",
        driver=f"collc_{ident}_mpicuda_run",
        link_name=f"collc_{ident}_mpicuda",
        runtime_headers=RUNTIME_HEADERS,
        nvcc_base=" ".join(base),
        nvcc_flags=" ".join((*base, f"-arch={arch}", *LIBRARY_FLAGS)),
        library_flags=" ".join(LIBRARY_FLAGS),
    )


# --------------------------------------------------------------------------
# Generating and building
# --------------------------------------------------------------------------


def environment() -> jinja2.Environment:
    root = data_dir("codegen")
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader([root / "mpi_cuda", root / "cuda", root / "mpi_c"]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def source_names(schedule: Schedule) -> tuple[str, str, str]:
    """The generated library source, its header and the driver source of ``schedule``."""
    ident = c_ident(schedule.algorithm)
    return f"collc_{ident}_mpicuda.cu", f"collc_{ident}_mpicuda.h", f"collc_{ident}_mpicuda_main.cu"


def library_path(out_dir: Path, schedule: Schedule) -> Path:
    return Path(out_dir) / f"libcollc_{c_ident(schedule.algorithm)}_mpicuda.so"


def driver_path(out_dir: Path, schedule: Schedule) -> Path:
    return Path(out_dir) / f"collc_{c_ident(schedule.algorithm)}_mpicuda_run"


def generate(schedule: Schedule, out_dir: Path, *, arch: str = cuda.DEFAULT_ARCH) -> list[Path]:
    """Render the mpi-cuda sources for a VERIFIED schedule into out_dir (created if needed); the written files.

    CollError for a codec without CUDA kernels (as for the cuda target).
    """
    out_dir = Path(out_dir)
    data = plan(schedule, arch=arch)
    env = environment()
    cu_name, h_name, main_name = source_names(schedule)
    templates = (
        (cu_name, "collc_mpicuda.cu.j2"),
        (h_name, "collc_mpicuda.h.j2"),
        (main_name, "main.cu.j2"),
        ("Makefile", "Makefile.j2"),
    )
    context = {"plan": data.tables, "mpi": data}
    return write_sources(out_dir, env, [(n, t, context) for n, t in templates], RUNTIME_HEADERS)


def mpicxx() -> Path:
    """MPI's C++ compiler wrapper, nvcc's host compiler here: ``$COLLC_MPICXX``, else beside this Python, else PATH."""
    return mpitools.tool("mpicxx", "COLLC_MPICXX")


def _compile(command: list[str], out_dir: Path, what: Path) -> None:
    run_compiler(command, out_dir, what)


def build(
    out_dir: Path,
    schedule: Schedule,
    *,
    arch: str = cuda.DEFAULT_ARCH,
    flags: Sequence[str] = (),
    driver: bool = True,
) -> tuple[Path, Path]:
    """Compile the generated sources into the library and the driver; returns both paths.

    ``nvcc -O3 -arch=<arch> -ccbin mpicxx`` (the MPI wrapper adds MPI's
    headers and libraries); ``flags`` go to both commands.  ``driver=False``
    builds the library only (the driver's path is returned all the same).
    CollError with the compiler's output on failure.
    """
    out_dir = Path(out_dir).resolve()
    cu_name, _, main_name = source_names(schedule)
    if not (out_dir / cu_name).is_file():
        raise CollError(f"{out_dir / cu_name} does not exist: generate the sources first (collc.backends.mpi_cuda)")
    if ANYP_MARK in (out_dir / cu_name).read_text(encoding="utf-8"):
        raise CollError(f"{out_dir / cu_name} was generated for any p: build it with mpi_cuda_anyp.build")
    base = nvcc_command(out_dir, arch, flags)
    lib, exe = library_path(out_dir, schedule), driver_path(out_dir, schedule)
    _compile([*base, *LIBRARY_FLAGS, "-o", str(lib), str(out_dir / cu_name)], out_dir, out_dir / cu_name)
    if not driver:
        return lib, exe
    _compile([*base, "-o", str(exe), str(out_dir / main_name), *driver_link(lib)], out_dir, out_dir / main_name)
    return lib, exe


def nvcc_command(out_dir: Path, arch: str, flags: Sequence[str]) -> list[str]:
    """nvcc with MPI's C++ wrapper as host compiler, for ``arch``, ``flags`` and the folder's headers."""
    return [str(cuda.nvcc()), cuda.BASE_FLAGS[0], f"-arch={arch}", "-ccbin", str(mpicxx()), *flags, "-I", str(out_dir)]


def driver_link(lib: Path) -> list[str]:
    """What links a driver with the library ``lib`` beside it (found there at run time too)."""
    return ["-L", str(lib.parent), f"-l{lib.stem[3:]}", "-Xlinker", "-rpath,$ORIGIN"]


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------


def visible_gpus() -> tuple[int, str]:
    """(the CUDA devices this process sees, the ``-arch`` of the first), from the driver API; CollError for none."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        raise CollError(f"{NO_DEVICE}: the NVIDIA driver (libcuda.so.1) is not installed on this machine") from None
    code = libcuda.cuInit(0)
    if code != 0:
        why = " (CUDA_ERROR_NO_DEVICE)" if code == 100 else ""
        raise CollError(f"{NO_DEVICE}: cuInit failed with CUDA error {code}{why}; check CUDA_VISIBLE_DEVICES")
    count, device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        raise CollError(f"{NO_DEVICE}: the driver reports 0 devices; check CUDA_VISIBLE_DEVICES")
    libcuda.cuDeviceGet(ctypes.byref(device), 0)
    libcuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    libcuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)  # ..._MINOR
    return count.value, f"sm_{major.value}{minor.value}"


def run(
    schedule: Schedule,
    counts: Sequence[int],
    dtype: str = "float32",
    op: str = "sum",
    iters: int = 1,
    *,
    warmup: int = 1,
    seed: int = 0,
    timeout: float = 60.0,
    workdir: Path | None = None,
    mpiexec_args: Sequence[str] = (),
    error_bounds: np.ndarray | None = None,
    transport: str = "auto",
    check: bool = True,
    env: Mapping[str, str] | None = None,
) -> list[MpiCudaRow]:
    """Build for the visible GPU and run a VERIFIED schedule on ``schedule.nranks`` MPI processes, once per count.

    CollError, before any build, when no CUDA device is visible.  ``workdir``
    (default: a temporary folder) holds the generated code, the inputs and
    results, and the ranks' status files; on a cluster, a folder every node
    sees.  See `run_built` for the rest.
    """
    check_transport(transport)
    env = {"COLLC_TRANSPORT": transport, **(env or {})}
    _, arch = visible_gpus()
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="collc-mpicuda-") as tmp:
            return run(
                schedule, counts, dtype, op, iters, warmup=warmup, seed=seed, timeout=timeout, workdir=Path(tmp),
                mpiexec_args=mpiexec_args, error_bounds=error_bounds, transport=transport, check=check, env=env,
            )  # fmt: skip
    out = Path(workdir).resolve() / "mpi_cuda"
    generate(schedule, out, arch=arch)
    _, driver = build(out, schedule, arch=arch)
    return run_built(
        schedule, driver, counts, dtype, op, iters, warmup=warmup, seed=seed, timeout=timeout, workdir=workdir,
        mpiexec_args=mpiexec_args, error_bounds=error_bounds, check=check, env=env,
    )  # fmt: skip


def run_built(
    schedule: Schedule,
    driver: Path,
    counts: Sequence[cuda.Count],
    dtype: str = "float32",
    op: str = "sum",
    iters: int = 1,
    *,
    warmup: int = 1,
    seed: int = 0,
    timeout: float = 60.0,
    workdir: Path,
    mpiexec_args: Sequence[str] = (),
    error_bounds: np.ndarray | None = None,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    fault: str | None = None,
) -> list[MpiCudaRow]:
    """Run a built driver (`build`) on ``schedule.nranks`` MPI processes, once per count; one row per count.

    The counts are element counts, or all of them sequences: the counts of calls given at run time (the
    driver's ``--vcounts``, through ``_run_v``; p of them, p*p for an alltoall, `collectives.counts_offsets`),
    each row's ``count`` then the logical elements per rank (on average, for an alltoall).
    Inputs are `local.make_inputs` (``seed``), written to ``workdir``; every
    rank's result is compared with numpy as the cuda target's are
    (`local.count_wrong`, or for a schedule with compression points
    `cuda.judge_compressed` against ``error_bounds``, the verifier's bound per
    slot for inputs in [-1, 1]); ``check`` False skips that.  ``timeout``:
    the job is killed after that long without progress, and each rank's
    watchdog (COLLC_TIMEOUT, default half of it) fails a call that stalls
    first.  ``env`` adds settings for the ranks (COLLC_CUDA_AWARE, ...);
    ``fault`` is the driver's --fault (tests).  CollError for any failure,
    naming the ranks and what they were doing.
    """
    cuda.check_run_args(dtype, op, iters, warmup, schedule, error_bounds if check else _no_bounds(schedule))
    workdir = Path(workdir).resolve()
    io, status = workdir / "io", workdir / "status"
    for folder in (io, status):
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.iterdir():
            stale.unlink()
    given = [cuda.given_counts(count) for count in counts]
    if any(g is None for g in given) and not all(g is None for g in given):
        raise CollError("counts given at run time (sequences) and element counts cannot be mixed in one run")
    inputs, cuts = [], []
    for i, (count, vcounts) in enumerate(zip(counts, given, strict=True)):
        try:
            offsets = None if vcounts is None else local.counts_offsets(schedule, vcounts)
            elements = 0 if vcounts is not None else int(count)  # type: ignore[arg-type]
            data = local.make_inputs(schedule, elements, dtype, seed, op=op, offsets=offsets)
        except ValueError as err:
            raise CollError(str(err)) from None
        data.tofile(io / f"input{i}.bin")
        inputs.append(data)
        cuts.append(offsets)
    if given and given[0] is not None:
        args = ["--vcounts", ",".join(":".join(map(str, g)) for g in given if g is not None)]
    else:
        args = ["--counts", ",".join(map(str, counts))]
    args += ["--dtype", dtype, "--op", op, "--iters", str(iters)]
    args += ["--warmup", str(warmup), "--inputs", str(io), "--status", str(status)]
    if check:
        args += ["--outputs", str(io)]
    if fault is not None:
        args += ["--fault", fault]
    p = schedule.nranks
    cmd = [str(mpitools.mpiexec()), *mpiexec_args, "-n", str(p), str(driver), *args]
    run_env = mpitools.mpi_env(p, {**os.environ, **(env or {})})
    run_env.setdefault("COLLC_TIMEOUT", f"{max(timeout / 2, 0.5):g}")
    job = mpi_launch.Job(cmd, run_env, status, p, timeout, None)
    rows = job.wait()
    said = [json.loads(line)["mpicuda"] for line in job.stdout_other if line.startswith('{"mpicuda"')]
    how = said[0]["transport"] if said else ""
    out_rows = []
    for i, (row, data) in enumerate(zip(rows, inputs, strict=True)):
        count, size = row.count, row.size_bytes
        if (vcounts := given[i]) is not None:  # the driver gives the logical elements per rank
            count = collectives.counts_count(schedule.collective, vcounts)
            size = count * data.dtype.itemsize
        timing = ("mpi-cuda", count, size, row.avg_us, row.min_us, row.max_us, row.iters)
        if not check:
            out_rows.append(MpiCudaRow(*timing, -1, transport=how))
            continue
        result = np.stack([np.fromfile(io / f"output{i}_rank{r}.bin", dtype=data.dtype) for r in range(p)])
        out_rows.append(_judged(schedule, timing, result, data, op, count, error_bounds, how, cuts[i]))
    return out_rows


def _no_bounds(schedule: Schedule) -> np.ndarray | None:
    """Placeholder bounds of the right shape, for an unchecked run of a schedule with compression points."""
    return np.zeros((schedule.nranks, schedule.nchunks)) if schedule.compresses() else None


def _judged(
    schedule: Schedule,
    timing: tuple[str, int, int, float, float, float, int],
    result: np.ndarray,
    inputs: np.ndarray,
    op: str,
    count: int,
    bounds: np.ndarray | None,
    transport: str,
    offsets: np.ndarray | None = None,
) -> MpiCudaRow:
    if result.shape != inputs.shape:
        raise CollError(f"the ranks wrote results of shape {result.shape}, expected {inputs.shape}")
    if schedule.compresses() and bounds is not None:
        wrong, worst, bound = cuda.judge_compressed(schedule, result, inputs, op, count, bounds)
        return MpiCudaRow(*timing, wrong, worst, bound, transport=transport)
    values, mask = local.expected(schedule, inputs, op, offsets)
    dtype = next(name for name, dt in local.DTYPES.items() if dt == inputs.dtype)
    reduces = schedule.collective.reduces
    wrong = local.count_wrong(result, values, mask, dtype, op, schedule.nranks, reduces=reduces)
    return MpiCudaRow(*timing, wrong, transport=transport)
