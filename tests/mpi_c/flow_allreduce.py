"""Runs a collc allreduce library on random inputs, checks the results against numpy, and saves them.

    mpiexec -n P python flow_allreduce.py LIBRARY ALGORITHM OUT_DIR

Calls ``collc_<algorithm>_allreduce_f`` (through ctypes) on float32, float64 and int32
inputs at counts that do and do not divide by the chunks, in place and not; the expected
result is a numpy sum of every rank's input, gathered with mpi4py's pickle-based allgather.
Each rank saves its results to ``OUT_DIR/rank<r>.npz``, so that two runs (step by step and
by dataflow) can be compared bit for bit.  Prints ``ok`` on rank 0 when every check passes.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

COUNTS = (0, 1, 7, 96, 1001, 65536 + 3, 1 << 20)


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    allreduce = getattr(lib, f"collc_{sys.argv[2]}_allreduce_f")
    allreduce.restype = ctypes.c_int
    allreduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    out = Path(sys.argv[3])
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(1000 + comm.rank)
    saved: dict[str, np.ndarray] = {}
    for dtype, mpi_type in ((np.float32, MPI.FLOAT), (np.float64, MPI.DOUBLE), (np.int32, MPI.INT)):
        for count in COUNTS:
            if np.issubdtype(dtype, np.integer):
                x = rng.integers(-(1 << 20), 1 << 20, count).astype(dtype)
            else:
                x = (rng.random(count) * 2 - 1).astype(dtype)
            want = np.sum(comm.allgather(x), axis=0, dtype=np.float64)
            exact = np.issubdtype(dtype, np.integer)
            tol = 0.0 if exact else 2 * comm.size * float(np.finfo(dtype).eps) * comm.size
            for in_place in (False, True):
                y = x.copy() if in_place else np.full(count, -7, dtype=dtype)
                rc = allreduce(None if in_place else x.ctypes.data, y.ctypes.data, count, mpi_type.py2f(),
                               MPI.SUM.py2f(), comm.py2f())  # fmt: skip
                assert rc == 0, rc
                err = np.abs(y.astype(np.float64) - want)
                assert (err <= tol).all(), (dtype.__name__, count, in_place, float(err.max()))
                saved[f"{dtype.__name__}_{count}_{int(in_place)}"] = y
    np.savez(out / f"rank{comm.rank}.npz", **saved)
    comm.Barrier()
    if comm.rank == 0:
        print("ok")


if __name__ == "__main__":
    main()
