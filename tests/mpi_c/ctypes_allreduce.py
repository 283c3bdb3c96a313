"""Calls a collc allreduce library from Python: through ctypes, and through mpi4py under LD_PRELOAD.

    mpiexec -n P python ctypes_allreduce.py LIBRARY ALGORITHM

``collc_<algorithm>_allreduce_f`` takes Fortran handles (``.py2f()``), and
``comm.Allreduce`` reaches the library's ``MPI_Allreduce_c`` when the library
is preloaded.  Inputs are random; the expected sum comes from every rank's
input gathered with mpi4py's pickle-based allgather (no allreduce involved).
Prints ``ok`` on rank 0 when every check passes, else raises.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np
from mpi4py import MPI


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    algorithm = sys.argv[2]
    allreduce_f = getattr(lib, f"collc_{algorithm}_allreduce_f")
    allreduce_f.restype = ctypes.c_int
    allreduce_f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(comm.rank)
    types = [(np.float32, MPI.FLOAT), (np.float64, MPI.DOUBLE), (np.int32, MPI.INT)]
    for dtype, mpi_type in types:
        for count in (0, 1, 5, 1000, 100003):
            if np.issubdtype(dtype, np.integer):
                x = rng.integers(-1000, 1000, count).astype(dtype)
            else:
                x = (rng.random(count) * 2 - 1).astype(dtype)
            everything = np.array(comm.allgather(x)).reshape(comm.size, count)
            want = everything.astype(np.float64).sum(axis=0)
            tol = 0 if np.issubdtype(dtype, np.integer) else 4 * comm.size * np.finfo(dtype).eps * comm.size
            for mode in ("ctypes", "ctypes in place", "mpi4py", "mpi4py in place"):
                y = np.full(count, -7, dtype=dtype)
                if mode == "ctypes":
                    rc = allreduce_f(x.ctypes.data, y.ctypes.data, count, mpi_type.py2f(), MPI.SUM.py2f(), comm.py2f())
                    assert rc == 0, rc
                elif mode == "ctypes in place":
                    y[:] = x
                    rc = allreduce_f(None, y.ctypes.data, count, mpi_type.py2f(), MPI.SUM.py2f(), comm.py2f())
                    assert rc == 0, rc
                elif mode == "mpi4py":
                    comm.Allreduce(x, y, op=MPI.SUM)
                else:
                    y[:] = x
                    comm.Allreduce(MPI.IN_PLACE, y, op=MPI.SUM)
                err = np.abs(y.astype(np.float64) - want)
                assert (err <= tol).all(), (mode, dtype.__name__, count, float(err.max()))
    comm.Barrier()
    if comm.rank == 0:
        print("ok")


if __name__ == "__main__":
    main()
