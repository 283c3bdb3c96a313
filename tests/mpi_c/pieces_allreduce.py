"""Runs a collc allreduce library at vector sizes around its piece boundaries and checks the results bit for bit.

    mpiexec -n P python pieces_allreduce.py LIBRARY ALGORITHM PIECE_BYTES

PIECE_BYTES is the piece size the library runs with (COLLC_PIECE_BYTES, set by the caller).  Calls
``collc_<algorithm>_allreduce_f`` (through ctypes) on int8 and float32 vectors whose byte sizes are a piece less
one, a piece, a piece and one, three pieces and five, just under and at the largest size that travels in pieces,
and p times each of those (the ring's messages are a p-th of the vector).  Inputs are small integers, so every
sum is exact in any order: the result must equal numpy's sum of every rank's input (gathered with mpi4py) bit
for bit, and the bytes after the vector must stay untouched.  Prints ``ok SIZES`` on rank 0 when every check
passes.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np
from mpi4py import MPI

PIECES_MAX = 4  # runtime/collc_exec.h's COLLC_PIECES_MAX
GUARD = 16


def byte_sizes(piece: int, p: int) -> list[int]:
    base = [piece - 1, piece, piece + 1, 2 * piece, 3 * piece + 5, PIECES_MAX * piece - 1, PIECES_MAX * piece]
    return sorted({n for b in base if b > 0 for n in (b, p * b)})


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    allreduce = getattr(lib, f"collc_{sys.argv[2]}_allreduce_f")
    allreduce.restype = ctypes.c_int
    allreduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    piece = int(sys.argv[3])
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(77 + comm.rank)
    sizes = byte_sizes(piece, comm.size)
    for dtype, mpi_type in ((np.int8, MPI.INT8_T), (np.float32, MPI.FLOAT)):
        item = np.dtype(dtype).itemsize
        for nbytes in sizes:
            count = nbytes // item
            if count * item != nbytes:
                count += 1  # float32: the nearest size above that divides
            x = rng.integers(-30, 31, count).astype(dtype)  # |sum| <= 120 over 4 ranks: exact in int8 and float32
            want = np.sum(np.array(comm.allgather(x)), axis=0, dtype=np.int64).astype(dtype)
            for in_place in (False, True):
                y = np.full(count + GUARD, 99, dtype=dtype)
                if in_place:
                    y[:count] = x
                rc = allreduce(None if in_place else x.ctypes.data, y.ctypes.data, count, mpi_type.py2f(),
                               MPI.SUM.py2f(), comm.py2f())  # fmt: skip
                assert rc == 0, (dtype.__name__, count, rc)
                assert y[:count].tobytes() == want.tobytes(), (dtype.__name__, count, in_place, np.flatnonzero(
                    y[:count] != want)[:10])  # fmt: skip
                assert (y[count:] == 99).all(), (dtype.__name__, count, in_place, "guard overwritten")
    comm.Barrier()
    if comm.rank == 0:
        print("ok", *sizes)


if __name__ == "__main__":
    main()
