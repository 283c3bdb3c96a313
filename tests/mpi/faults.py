"""faults.py: one rank misbehaves around an allreduce of a generated mpi-py module (tests/mpi/faults.c's modes).

mpiexec -n P python faults.py MODULE_DIR MODULE MODE COUNT
"""

import importlib
import os
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, sys.argv[1])
module = importlib.import_module(sys.argv[2])
mode, count = sys.argv[3], int(sys.argv[4])
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
executor = module.Executor(comm)
x = ((np.arange(count + 16) * 7 + rank * 3) % 11 / 11 - 0.5).astype(np.float32)
if rank == 1:
    if mode == "exit":
        os._exit(3)
    if mode == "stop":
        time.sleep(60)
    count += {"count": 8, "short": -8}.get(mode, 0)
    if mode == "zero":
        count = 0
    if mode == "nan":
        x[count // 2] = np.nan
for _ in range(3):
    y = np.empty(count, dtype=np.float32)
    executor.allreduce(x[:count].copy(), y, "sum")
if rank == 0:
    print("done", flush=True)
executor.free()
