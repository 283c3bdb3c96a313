"""Initialisation cost of an any-p library: the time one rank takes to compute its step tables.

A library compiled with ``collc compile --target mpi-c -p any`` runs the program for the calling
rank at the first call on a communicator of p ranks.  This measures that (the library's debugging
entry point ``collc_<alg>_anyp_tables(p, rank, ...)``: the instance, the rank's phases and its
tables, through ctypes, without MPI) for a few ranks at each p, and the size of the rank's tables.
Where nvcc is found, the same for the ``--target mpi-cuda -p any`` library (its
``collc_<alg>_mpicuda_scratch_bytes(count, dtype, p, rank)``, which builds the rank's schedule on
first use: the program, its rows turned into the executor's, and the executor's sizing pass for
1 Mi float32 elements; no GPU is touched).
The baseline, measured in the same run, is what the Python side does for a library of one p: the
elaboration of every rank and `collc.backends.tables.from_schedule`, divided by p for a per-rank
figure; it is run only up to --python-max (it holds every rank's ops in memory).

    python benchmarks/anyp_init.py --ranks 1024 4096 16384
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import tempfile
import time
from pathlib import Path

import collc
from collc.backends import cuda, mpi_c_anyp, mpi_cuda_anyp, tables
from collc.backends.csource import c_ident
from collc.diagnostics import CollError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MSG_BYTES, RUN_BYTES, DEP_BYTES = 28, 20, 4  # sizeof(struct collc_msg), sizeof(struct collc_run), a dependency


def c_rank_ms(library: Path, algorithm: str, p: int, rank: int) -> tuple[float, int]:
    """Milliseconds for one rank's tables at p, and their size in bytes (messages and runs)."""
    fn = getattr(ctypes.CDLL(str(library)), f"collc_{c_ident(algorithm)}_anyp_tables")
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int64]
    fn.restype = ctypes.c_int
    buf = ctypes.create_string_buffer(1 << 24)
    start = time.perf_counter()
    n = fn(p, rank, buf, len(buf))
    elapsed = (time.perf_counter() - start) * 1e3
    if n < 0 or n > len(buf):
        raise SystemExit(f"{algorithm} p={p} rank {rank}: {buf.value.decode()}")
    lines = [line.split() for line in buf.raw[:n].decode().splitlines()[1:]]
    msgs = [parts for parts in lines if parts[1] not in ("scratch", "max_messages", "flow_scratch")]
    runs = sum(len(parts) - 6 for parts in msgs)  # "rank step kind peer RUN ... after DEPS"
    deps = sum(0 if parts[-1] == "-" else parts[-1].count(",") + 1 for parts in msgs)
    return elapsed, len(msgs) * MSG_BYTES + runs * RUN_BYTES + deps * DEP_BYTES


def cuda_rank_ms(library: Path, algorithm: str, p: int, rank: int) -> float:
    """Milliseconds for the mpi-cuda library's first sizing of one rank at p (building its schedule)."""
    fn = getattr(ctypes.CDLL(str(library)), f"collc_{c_ident(algorithm)}_mpicuda_scratch_bytes")
    fn.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int64
    start = time.perf_counter()
    need = fn(1 << 20, 0, p, rank)
    elapsed = (time.perf_counter() - start) * 1e3
    if need < 0:
        raise SystemExit(f"{algorithm} p={p} rank {rank}: the mpi-cuda library could not size the call")
    return elapsed


def cuda_library(alg: collc.Algorithm, out: Path, ranks: list[int]) -> Path | None:
    """The algorithm's any-p mpi-cuda library, or None without nvcc.  It serves only the sizes covered at compile
    time: proved for every p where the all-p proof succeeds, else verified at ``ranks``."""
    try:
        cuda.nvcc()
    except CollError:
        return None
    try:
        alg.compile_any_p(out, target="mpi-cuda", verify_ranks="all", build=False)
    except CollError:
        alg.compile_any_p(out, target="mpi-cuda", verify_ranks=ranks, build=False)
    return mpi_cuda_anyp.build(out, alg.program, driver=False)[0]


def python_s(alg: collc.Algorithm, p: int) -> float:
    start = time.perf_counter()
    tables.from_schedule(alg.instantiate(p=p).schedule)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithms", nargs="+", default=["ring_allreduce", "swing_bw"])
    parser.add_argument("--ranks", nargs="+", type=int, default=[1024, 4096, 16384])
    parser.add_argument("--python-max", nargs="+", default=["ring_allreduce=1024", "swing_bw=4096"],
                        help="ALG=P: the largest p the Python baseline runs for ALG")  # fmt: skip
    args = parser.parse_args()
    python_max: dict[str, int] = {}
    for item in args.python_max:
        name, _, value = item.partition("=")
        if not value.isdigit():
            parser.error(f"--python-max takes ALG=P with P a number, not {item!r}")
        python_max[name] = int(value)
    print(f"# any-p init: {sys.platform}, python {sys.version.split()[0]}; C: one rank's tables (median of ranks "
          "0, p/2, p-1); Python: elaboration + tables of all ranks, and that / p")  # fmt: skip
    print(f"{'algorithm':<16} {'p':>6} {'C ms/rank':>10} {'mpi-cuda ms':>12} {'table bytes':>12} "
          f"{'Python s (all)':>15} {'Python ms/rank':>15} {'Python/C':>9}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.algorithms:
            alg = collc.load(EXAMPLES / f"{name}.coll")
            library = alg.compile_any_p(Path(tmp) / name, verify_up_to=8)[0][-1]  # its tables: any p
            assert library == mpi_c_anyp.library_path(Path(tmp) / name, alg.program)
            gpu_library = cuda_library(alg, Path(tmp) / f"{name}_mpicuda", args.ranks)
            for p in args.ranks:
                runs = [c_rank_ms(library, name, p, r) for r in (0, p // 2, p - 1)]
                c_ms = statistics.median(ms for ms, _ in runs)
                if gpu_library is None:
                    gpu = f"{'no nvcc':>12}"
                else:
                    gpu_ms = statistics.median(cuda_rank_ms(gpu_library, name, p, r) for r in (0, p // 2, p - 1))
                    gpu = f"{gpu_ms:12.3f}"
                size = runs[0][1]
                if p <= python_max.get(name, 0):
                    total = python_s(alg, p)
                    per = total * 1e3 / p
                    py = f"{total:15.2f} {per:15.3f} {per / c_ms:8.1f}x"
                else:
                    py = f"{'not run':>15} {'-':>15} {'-':>9}"
                print(f"{name:<16} {p:>6} {c_ms:10.3f} {gpu} {size:12d} {py}", flush=True)


if __name__ == "__main__":
    main()
