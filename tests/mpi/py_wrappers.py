"""Run under mpiexec: every generated mpi-py module's MPI-style call against the MPI library's own collective.

Usage: mpiexec -n 4 python py_wrappers.py MODULE.py...  Prints "ok <algorithm>" per module on rank 0 and
exits 1 on the first difference.
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
from mpi4py import MPI


def load(path: str):
    spec = importlib.util.spec_from_file_location(path.rsplit("/", 1)[-1][:-3], path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def same(a: np.ndarray, b: np.ndarray, what: str) -> None:
    if not np.array_equal(a, b):
        bad = int(np.flatnonzero(a != b)[0])
        raise AssertionError(f"{what}: element {bad}: got {a[bad]}, MPI gives {b[bad]}")


def uneven(m: int, p: int) -> list[int]:
    """Counts that differ between ranks, some 0 (m 0: all 0)."""
    return [(m + 7 * r) % (m + 2) if m else 0 for r in range(p)]


def mpi_type(dtype: type) -> MPI.Datatype:
    return MPI.INT32_T if np.dtype(dtype) == np.int32 else MPI.DOUBLE


def check(module, comm: MPI.Comm) -> None:
    rank, p = comm.Get_rank(), comm.Get_size()
    ex = module.Executor(comm)
    rng = np.random.default_rng(rank)
    for m in (0, 1, 5, 257):
        for dtype in (np.int32, np.float64):
            name = f"{module.ALGORITHM} m={m} {np.dtype(dtype).name}"
            if module.COLLECTIVE == "allreduce":
                x = rng.integers(-50, 50, size=m * p + 3).astype(dtype)
                for op, mpi_op in (("sum", MPI.SUM), (MPI.MAX, MPI.MAX), ("min", MPI.MIN)):
                    ours, ref = np.empty_like(x), np.empty_like(x)
                    ex.allreduce(x, ours, op)
                    comm.Allreduce(x, ref, mpi_op)
                    same(ours, ref, f"{name} allreduce {op}")
                    inplace = x.copy()
                    ex.allreduce(MPI.IN_PLACE, inplace, op)
                    same(inplace, ref, f"{name} allreduce in place {op}")
            elif module.COLLECTIVE == "allgather":
                x = rng.integers(-50, 50, size=m).astype(dtype)
                ours, ref = np.zeros(m * p, dtype), np.zeros(m * p, dtype)
                ex.allgather(x, ours)
                comm.Allgather(x, ref)
                same(ours, ref, f"{name} allgather")
                inplace = np.zeros(m * p, dtype)
                inplace[rank * m : (rank + 1) * m] = x
                ex.allgather(MPI.IN_PLACE, inplace)
                same(inplace, ref, f"{name} allgather in place")
                counts = uneven(m, p)
                displs = [sum(counts[:r]) + 2 * r for r in range(p)]  # gaps between the blocks
                x = rng.integers(-50, 50, size=counts[rank]).astype(dtype)
                ours, ref = np.full(sum(counts) + 2 * p, -7, dtype), np.full(sum(counts) + 2 * p, -7, dtype)
                ex.allgatherv(x, ours, counts, displs)
                comm.Allgatherv(x, [ref, counts, displs, mpi_type(dtype)])
                same(ours, ref, f"{name} allgatherv {counts}")
            elif module.COLLECTIVE == "reduce_scatter":
                x = rng.integers(-50, 50, size=m * p).astype(dtype)
                ours, ref = np.zeros(m, dtype), np.zeros(m, dtype)
                ex.reduce_scatter(x, ours, "sum")
                comm.Reduce_scatter_block(x, ref, MPI.SUM)
                same(ours, ref, f"{name} reduce_scatter")
                counts = uneven(m, p)
                x = rng.integers(-50, 50, size=sum(counts)).astype(dtype)
                ours, ref = np.zeros(counts[rank], dtype), np.zeros(counts[rank], dtype)
                ex.reduce_scatter_v(x, ours, counts, "sum")
                comm.Reduce_scatter(x, ref, counts, MPI.SUM)
                same(ours, ref, f"{name} reduce_scatter_v {counts}")
            elif module.COLLECTIVE == "broadcast":
                x = rng.integers(-50, 50, size=m * p + 1).astype(dtype)
                ours, ref = x.copy(), x.copy()
                ex.broadcast(ours, module.ROOT)
                comm.Bcast(ref, module.ROOT)
                same(ours, ref, f"{name} broadcast")
            elif module.COLLECTIVE == "reduce":
                x = rng.integers(-50, 50, size=m * p + 2).astype(dtype)
                ours, ref = np.zeros_like(x), np.zeros_like(x)
                before = x.copy()
                ex.reduce(x, ours, "sum", module.ROOT)
                comm.Reduce(x, ref, MPI.SUM, module.ROOT)
                same(x, before, f"{name} reduce leaves sendbuf alone")
                if rank == module.ROOT:
                    same(ours, ref, f"{name} reduce")
            elif module.COLLECTIVE == "alltoall":
                x = rng.integers(-50, 50, size=m * p).astype(dtype)
                ours, ref = np.zeros_like(x), np.zeros_like(x)
                ex.alltoall(x, ours)
                comm.Alltoall(x, ref)
                same(ours, ref, f"{name} alltoall")
                sc = [(m + 3 * rank + d) % (m + 2) for d in range(p)]  # rank s sends d (m + 3s + d) mod (m + 2)
                rc = [(m + 3 * s + rank) % (m + 2) for s in range(p)]
                x = rng.integers(-50, 50, size=sum(sc)).astype(dtype)
                ours, ref = np.zeros(sum(rc), dtype), np.zeros(sum(rc), dtype)
                ex.alltoallv(x, sc, ours, rc)
                comm.Alltoallv([x, sc], [ref, rc])
                same(ours, ref, f"{name} alltoallv")
            elif module.COLLECTIVE == "gather":
                x = rng.integers(-50, 50, size=m).astype(dtype)
                ours, ref = np.zeros(m * p, dtype), np.zeros(m * p, dtype)
                ex.gather(x, ours if rank == module.ROOT else None, module.ROOT)
                comm.Gather(x, ref, module.ROOT)
                if rank == module.ROOT:
                    same(ours, ref, f"{name} gather")
            elif module.COLLECTIVE == "scatter":
                x = rng.integers(-50, 50, size=m * p).astype(dtype)
                ours, ref = np.zeros(m, dtype), np.zeros(m, dtype)
                ex.scatter(x if rank == module.ROOT else None, ours, module.ROOT)
                comm.Scatter(x, ref, module.ROOT)
                same(ours, ref, f"{name} scatter")
            elif module.COLLECTIVE in ("scan", "exscan"):
                x = rng.integers(-50, 50, size=m * p + 1).astype(dtype)
                ours, ref = np.zeros_like(x), np.zeros_like(x)
                getattr(ex, module.COLLECTIVE)(x, ours, "sum")
                (comm.Scan if module.COLLECTIVE == "scan" else comm.Exscan)(x, ref, MPI.SUM)
                if module.COLLECTIVE == "scan" or rank > 0:  # an exscan's rank 0 result is undefined
                    same(ours, ref, f"{name} {module.COLLECTIVE}")
            elif module.COLLECTIVE == "barrier":
                ex.barrier()
    ex.free()


def main() -> int:
    comm = MPI.COMM_WORLD
    status = 0
    for path in sys.argv[1:]:
        module = load(path)
        try:
            check(module, comm)
        except Exception as err:  # the other ranks may be in the next call already: end the job
            print(f"rank {comm.Get_rank()}: FAIL {err}", flush=True)
            comm.Abort(1)
        status = comm.allreduce(status, op=MPI.MAX)
        if comm.Get_rank() == 0:
            print(("ok " if status == 0 else "FAIL ") + module.ALGORITHM, flush=True)
        if status:
            break
    return status


if __name__ == "__main__":
    sys.exit(main())
