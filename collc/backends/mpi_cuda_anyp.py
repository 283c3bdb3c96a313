"""The ``mpi-cuda`` target for any communicator size (``collc compile --target mpi-cuda -p any``).

The library carries the program instead of the step tables of one p, as the any-p mpi-c
library does (`collc.backends.mpi_c_anyp`): ``collc_<algorithm>_program.c`` holds the program
translated to C with the mpi-c runtime's evaluator (``runtime/collc_anyp.h``), built with
mpicc; ``collc_<algorithm>_mpicuda.cu`` (nvcc) asks it for the calling rank's tables at the
first call on a communicator of p ranks and runs them with the mpi-cuda runtime
(``runtime/collc_mpicuda_anyp.cuh``).  `generate` writes both, the header, the driver and a
Makefile; `build` compiles them.  Like the mpi-c library, it serves only the sizes of its
`mpi_c_anyp.Coverage` (a call on a communicator of another size fails on every rank with the
reason).  The same constructs as for mpi-c are supported (no
compression points, levels, groups, tori: refused with the place in the .coll file).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from collc import collectives
from collc.backends import cuda, mpi_c, mpi_c_anyp, mpi_cuda
from collc.backends.csource import c_ident, run_compiler, write_sources
from collc.backends.mpitools import mpicc
from collc.diagnostics import CollError
from collc.frontend.program import Program
from collc.ir import ParamValue

__all__ = ["RUNTIME_HEADERS", "build", "driver_path", "generate", "library_path"]

RUNTIME_HEADERS: tuple[str, ...] = tuple(
    dict.fromkeys((*mpi_cuda.RUNTIME_HEADERS, "collc_mpicuda_anyp.cuh", *mpi_c_anyp.RUNTIME_HEADERS))
)


PROGRAM_CFLAGS: tuple[str, ...] = tuple(flag for flag in mpi_c.CFLAGS if flag != "-shared")
"""mpicc's flags for the program file: the mpi-c target's, for an object instead of a shared library."""


@dataclass(frozen=True, slots=True)
class CollectiveText:
    """What the shared collective description of a header names (`collective_text.j2`)."""

    collective: str
    root: str
    nranks: str = "p"


@dataclass(frozen=True, slots=True)
class MpiCudaAnyp:
    """What the any-p mpi-cuda templates render besides the program (`mpi_c_anyp.AnypPlan`)."""

    collective_enum: str
    text: CollectiveText
    arch: str
    library: str
    driver: str
    link_name: str
    runtime_headers: tuple[str, ...]
    cflags: str
    nvcc_base: str
    nvcc_flags: str
    library_flags: str
    vcounts: bool  # the entry points for counts given at run time (allgatherv, reduce_scatter, alltoallv)


def library_path(out_dir: Path, program: Program) -> Path:
    return Path(out_dir) / f"libcollc_{c_ident(program.name)}_mpicuda.so"


def driver_path(out_dir: Path, program: Program) -> Path:
    return Path(out_dir) / f"collc_{c_ident(program.name)}_mpicuda_run"


def _plan(program: Program, params: Mapping[str, ParamValue], arch: str) -> MpiCudaAnyp:
    ident = c_ident(program.name)
    root = params.get("root")
    base = (cuda.BASE_FLAGS[0],)
    return MpiCudaAnyp(
        collective_enum=f"COLLC_CUDA_COLL_{program.collective.name}",
        text=CollectiveText(program.collective.value, str(root) if type(root) is int else "the root"),
        arch=arch,
        library=f"libcollc_{ident}_mpicuda.so",
        driver=f"collc_{ident}_mpicuda_run",
        link_name=f"collc_{ident}_mpicuda",
        runtime_headers=RUNTIME_HEADERS,
        cflags=" ".join(PROGRAM_CFLAGS),
        nvcc_base=" ".join(base),
        nvcc_flags=" ".join((*base, f"-arch={arch}", *mpi_cuda.LIBRARY_FLAGS)),
        library_flags=" ".join(mpi_cuda.LIBRARY_FLAGS),
        vcounts=program.collective in collectives.VCOUNT_COLLECTIVES,
    )


def generate(
    program: Program,
    out_dir: Path,
    params: Mapping[str, ParamValue],
    coverage: mpi_c_anyp.Coverage,
    *,
    arch: str = cuda.DEFAULT_ARCH,
) -> list[Path]:
    """Write the any-p mpi-cuda library's sources, header, driver, Makefile and runtime headers into ``out_dir``
    (CollError at the first construct any-p compilation does not support); the library serves the sizes of
    ``coverage`` and fails a call on a communicator of another size with the reason."""
    data = mpi_c_anyp.plan(program, params, coverage)
    mpi = _plan(program, params, arch)
    ident = data.ident
    files = [
        (f"collc_{ident}_program.c", "collc_anyp_program.c.j2"),
        (f"collc_{ident}_mpicuda.cu", "collc_mpicuda_anyp.cu.j2"),
        (f"collc_{ident}_mpicuda.h", "collc_mpicuda_anyp.h.j2"),
        (f"collc_{ident}_mpicuda_main.cu", "main_anyp.cu.j2"),
        ("Makefile", "Makefile_anyp.j2"),
    ]
    context = {"plan": data, "mpi": mpi}
    return write_sources(Path(out_dir), mpi_cuda.environment(), [(n, t, context) for n, t in files], RUNTIME_HEADERS)


def build(
    out_dir: Path,
    program: Program,
    *,
    arch: str = cuda.DEFAULT_ARCH,
    flags: Sequence[str] = (),
    driver: bool = True,
) -> tuple[Path, Path]:
    """Compile the generated folder: the program with mpicc, then the library and the driver with nvcc (``flags``
    go to both nvcc commands); returns the library's and the driver's paths (``driver=False``: the library only).
    CollError with the compiler's output on failure."""
    out_dir = Path(out_dir).resolve()
    ident = c_ident(program.name)
    program_c, cu = out_dir / f"collc_{ident}_program.c", out_dir / f"collc_{ident}_mpicuda.cu"
    if not cu.is_file() or not program_c.is_file():
        raise CollError(f"{out_dir} holds no any-p mpi-cuda sources of {program.name}: generate them first "
                        "(collc.backends.mpi_cuda_anyp)")  # fmt: skip
    if mpi_cuda.ANYP_MARK not in cu.read_text(encoding="utf-8"):
        raise CollError(f"{cu} was generated for one p: build it with collc.backends.mpi_cuda.build")
    obj = out_dir / f"collc_{ident}_program.o"
    run_compiler([str(mpicc()), *PROGRAM_CFLAGS, *mpi_c.extra_cflags(), "-c", "-I", str(out_dir), "-o", str(obj),
                  str(program_c)], out_dir, program_c)  # fmt: skip
    nvcc = mpi_cuda.nvcc_command(out_dir, arch, flags)
    lib, exe = library_path(out_dir, program), driver_path(out_dir, program)
    run_compiler([*nvcc, *mpi_cuda.LIBRARY_FLAGS, "-o", str(lib), str(cu), str(obj)], out_dir, cu)
    if driver:
        main = out_dir / f"collc_{ident}_mpicuda_main.cu"
        run_compiler([*nvcc, "-o", str(exe), str(main), *mpi_cuda.driver_link(lib)], out_dir, main)
    return lib, exe
