"""The CUDA-tensor path of the collc backend (collc.torch.device over mpi-cuda libraries) against numpy.

``mpiexec -n P python device_ops.py CACHE OUT_DIR [quick]``, with ``LD_LIBRARY_PATH`` on the CPU stand-in
for the CUDA runtime (tests/mpi_cuda_mock.py) and ``COLLC_NVCC_FLAGS='-cudart shared'``: the mpi-cuda
libraries are built with nvcc as for a GPU and run on host memory, so the tensors here are CPU tensors.
Every rank's input is a function of (seed, rank), so each rank computes the expected result of every case
itself with numpy (float64, or exact integers).  Values are small integers wherever the result must be
exact in every dtype (bfloat16 sums of p values up to 4 are exact).  Each rank writes OUT_DIR/rank<r>.json:
the cases run and the ones that failed.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

from collc.torch import device, schedules
from collc.torch.library import DeviceLibrary
from collc.torch.ops import ReduceKind

COMM = MPI.COMM_WORLD
RANK, P = COMM.Get_rank(), COMM.Get_size()
FLAGS = tuple(shlex.split(os.environ.get("COLLC_NVCC_FLAGS", "")))


def library(collective: str, source: str, cache: Path, codecs: dict[str, str] | None = None) -> DeviceLibrary:
    compiled = schedules.prepare(collective, source, P, cache_dir=cache, codecs=codecs, target="mpi-cuda",
                                 nvcc_flags=FLAGS)  # fmt: skip
    assert compiled.target == "mpi-cuda" and compiled.library.name.endswith("_mpicuda.so"), compiled
    return DeviceLibrary(compiled, COMM)


def inputs(seed: int, n: int, dtype: torch.dtype) -> list[np.ndarray]:
    """Every rank's input (small integers), as float64 or int64 numpy arrays."""
    out = []
    for r in range(P):
        rng = np.random.default_rng(seed * 1000 + r)
        values = rng.integers(-4, 5, n)
        out.append(values.astype(np.float64) if dtype.is_floating_point else values.astype(np.int64))
    return out


def tensor(values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(values.copy()).to(dtype)


def reduce(arrays: list[np.ndarray], op: str) -> np.ndarray:
    """The reduction of every rank's input (avg: of float32 inputs)."""
    stack = np.stack(arrays)
    if op == "avg":  # a float32 sum (exact: small integers) divided by p in float32, as torch does
        return (stack.sum(0).astype(np.float32) / np.float32(P)).astype(np.float64)
    return {"sum": stack.sum(0), "max": stack.max(0), "min": stack.min(0),
            "product": stack.prod(0), "premul_sum": 3.0 * stack.sum(0)}[op]  # fmt: skip


def kind(op: str) -> ReduceKind:
    return ReduceKind("premul_sum", 3.0) if op == "premul_sum" else ReduceKind(op)


def main() -> None:
    cache, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    quick = len(sys.argv) > 3 and sys.argv[3] == "quick"
    failures: list[str] = []
    cases = 0

    def check(name: str, got: torch.Tensor, want: np.ndarray, tol: float = 0.0) -> None:
        nonlocal cases
        cases += 1
        g = got.to(torch.float64).numpy() if got.dtype.is_floating_point else got.to(torch.int64).numpy()
        if g.shape != want.shape or not np.all(np.abs(g - want) <= tol):
            bad = int(np.argmax(np.abs(g.reshape(-1) - want.reshape(-1)) > tol)) if g.shape == want.shape else -1
            failures.append(f"{name}: element {bad}: got {g.reshape(-1)[bad]}, expected {want.reshape(-1)[bad]}")

    allreduce = library("allreduce", "swing_bw", cache)
    allgather = library("allgather", "ring_allgather", cache)
    seed = 0
    reduce_cases = [(torch.float32, "sum"), (torch.float64, "max"), (torch.bfloat16, "sum"), (torch.float16, "min"),
                    (torch.int32, "sum"), (torch.int64, "product"), (torch.float32, "avg"),
                    (torch.float32, "premul_sum")]  # fmt: skip
    for n in (1, 7, 1000) if not quick else (7, 1000):
        for dtype, op in reduce_cases:
            seed += 1
            xs = inputs(seed, n, dtype)
            t = tensor(xs[RANK], dtype)
            device.all_reduce(allreduce, t, kind(op), P)
            check(f"all_reduce {op} {dtype} n={n}", t, reduce(xs, op))
        for dtype in (torch.float32, torch.int8, torch.bfloat16):
            seed += 1
            xs = inputs(seed, n * 4, dtype)
            inp = tensor(xs[RANK], dtype)
            out = torch.full((P * n * 4,), 99, dtype=dtype)
            device.all_gather_into(allgather, out, inp, RANK)
            check(f"all_gather {dtype} n={n * 4}", out, np.concatenate(xs))
            seed += 1  # in place, as FSDP2 gathers
            xs = inputs(seed, n * 4, dtype)
            out = torch.full((P * n * 4,), 99, dtype=dtype)
            out[RANK * n * 4 : (RANK + 1) * n * 4] = tensor(xs[RANK], dtype)
            device.all_gather_into(allgather, out, out[RANK * n * 4 : (RANK + 1) * n * 4], RANK)
            check(f"all_gather in place {dtype} n={n * 4}", out, np.concatenate(xs))
    if not quick:
        reduce_scatter = library("reduce_scatter", "ring_reduce_scatter", cache)
        broadcast = library("broadcast", "binomial_broadcast", cache)
        for n in (1, 250):
            for dtype, op in ((torch.float32, "sum"), (torch.float32, "avg"), (torch.int64, "max")):
                seed += 1
                xs = inputs(seed, P * n, dtype)
                inp = tensor(xs[RANK], dtype)
                before = inp.clone()
                out = torch.zeros(n, dtype=dtype)
                device.reduce_scatter_into(reduce_scatter, out, inp, kind(op), P, RANK)
                check(f"reduce_scatter {op} {dtype} n={n}", out, reduce(xs, op)[RANK * n : (RANK + 1) * n])
                check(f"reduce_scatter input unchanged {dtype} n={n}", inp, before.to(torch.float64).numpy()
                      if dtype.is_floating_point else before.numpy())  # fmt: skip
            for dtype in (torch.float32, torch.int16):
                seed += 1
                xs = inputs(seed, 2 * n, dtype)
                t = tensor(xs[RANK], dtype)
                device.broadcast(broadcast, t)
                check(f"broadcast {dtype} n={2 * n}", t, xs[0])
        eb = 1e-3
        compressed = library("allgather", "compressed_ring_allgather", cache, {"q": f"ebq(eb={eb})"})
        for n in (1, 1000):
            rng = np.random.default_rng(500 + RANK)
            mine = rng.uniform(-1, 1, n)
            everyone = COMM.allgather(mine)
            out = torch.zeros(P * n, dtype=torch.float32)
            device.all_gather_into(compressed, out, torch.from_numpy(mine).to(torch.float32), RANK)
            want = np.concatenate(everyone).astype(np.float32).astype(np.float64)
            check(f"compressed all_gather ebq n={n}", out, want, tol=eb * (1 + 1e-6))
    (out_dir / f"rank{RANK}.json").write_text(json.dumps({"cases": cases, "failures": failures[:20]}))


if __name__ == "__main__":
    main()
