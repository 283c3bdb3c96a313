"""An ordinary mpi4py program: it calls MPI_Allreduce and knows nothing of collc (docs/tutorial.md)."""

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
n = 1 << 16
x = np.random.default_rng(comm.rank).integers(-100, 100, size=n)
y = np.empty_like(x)
comm.Allreduce(x, y, op=MPI.SUM)
expected = sum(np.random.default_rng(r).integers(-100, 100, size=n) for r in range(comm.size))
if not np.array_equal(y, expected):
    raise SystemExit(f"rank {comm.rank}: wrong result")
if comm.rank == 0:
    print(f"{comm.size} ranks: MPI_Allreduce of {n} {x.dtype} elements is correct")
