"""CUDA tensors through an mpi-cuda library: the tensors laid out in collc's logical element space.

An mpi-cuda library runs its collective in place on one buffer per rank
(`collc.torch.library.DeviceLibrary`); the functions here give it that buffer:

* all_reduce: the tensor itself;
* all_gather: the output, with this rank's input copied into its block first
  (unless it is there already, as FSDP2 gathers);
* reduce_scatter: a copy of the input (the input stays as it was), whose block
  ``rank`` becomes the output;
* broadcast: the tensor itself.

The library reduces float32, float64, float16, bfloat16 (each in its own
dtype, as NCCL does), int32 and int64, with sum, product, max and min; AVG and
PREMUL_SUM scale before or after.  Data movement of other dtypes moves the
bytes as int32 words when the byte count allows (`movement_dtype`).  Before a
call the tensor's device is synchronized (the producers of the data may be on
any stream), the library gets the current stream (a stream-ordered call is
enqueued on it, docs/mpi-cuda.md), and the call returns once the library's
kernels are done (its watched wait), so the result is ready for every stream
when the Work completes.

The functions take any tensor whose memory the library can address: CUDA
tensors on a GPU, and CPU tensors when the library runs on a CPU stand-in for
the CUDA runtime (as the tests do).
"""

from __future__ import annotations

import torch

from collc.torch.library import DeviceLibrary
from collc.torch.ops import ReduceKind

__all__ = [
    "DTYPES",
    "OPS",
    "all_gather_into",
    "all_reduce",
    "broadcast",
    "movement_dtype",
    "reduce_problem",
    "reduce_scatter_into",
]

DTYPES: dict[torch.dtype, int] = {
    torch.float32: 0,
    torch.float64: 1,
    torch.float16: 2,
    torch.bfloat16: 3,
    torch.int32: 4,
    torch.int64: 5,
}
"""The ``dtype`` argument of the mpi-cuda API for each tensor dtype it reduces."""

OPS: dict[str, int] = {"sum": 0, "product": 1, "max": 2, "min": 3}
"""The ``op`` argument of the mpi-cuda API."""


def reduce_problem(dtype: torch.dtype, kind: ReduceKind) -> str | None:
    """Why an mpi-cuda library cannot reduce ``dtype`` with ``kind`` (the op then runs on gloo), or None."""
    if dtype not in DTYPES:
        return f"reductions of {dtype} CUDA tensors"
    if kind.name in ("avg", "premul_sum") and not dtype.is_floating_point:
        return f"{kind.name.upper()} of {dtype} tensors"
    return None


def movement_dtype(t: torch.Tensor) -> torch.dtype | None:
    """The dtype that moves ``t`` (one rank's block) and every block of its size: its own dtype when the
    library knows it, else int32 words when the block's bytes and address allow, else None."""
    if t.dtype in DTYPES:
        return t.dtype
    if (t.numel() * t.element_size()) % 4 == 0 and t.data_ptr() % 4 == 0:
        return torch.int32
    return None


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` (contiguous) as a flat tensor of ``dtype`` (its own, or int32 words of its bytes)."""
    flat = t.reshape(-1)
    return flat if dtype is t.dtype else flat.view(torch.uint8).view(dtype)


def _run(lib: DeviceLibrary, t: torch.Tensor, op: str = "sum") -> None:
    if t.numel() == 0:
        return
    if t.is_cuda:
        with torch.cuda.device(t.device):
            torch.cuda.synchronize()
            stream = torch.cuda.current_stream(t.device).cuda_stream
            lib.run(t.data_ptr(), t.numel(), DTYPES[t.dtype], OPS[op], stream)
    else:
        lib.run(t.data_ptr(), t.numel(), DTYPES[t.dtype], OPS[op])


def all_reduce(lib: DeviceLibrary, t: torch.Tensor, kind: ReduceKind, p: int) -> None:
    """``t`` becomes the reduction of every rank's ``t`` (in place)."""
    if kind.name == "premul_sum":
        t.mul_(kind.factor)
    _run(lib, t.reshape(-1), kind.base)
    if kind.name == "avg":
        t.div_(p)


def all_gather_into(lib: DeviceLibrary, out: torch.Tensor, inp: torch.Tensor, rank: int) -> None:
    """``out`` becomes every rank's ``inp``, in rank order."""
    n = inp.numel()
    if n == 0:
        return
    dtype = movement_dtype(inp)
    if dtype is None:
        raise ValueError(f"no mpi-cuda dtype moves blocks of {n} {inp.dtype} elements")
    block = out.reshape(-1)[rank * n : (rank + 1) * n]
    if block.data_ptr() != inp.data_ptr():
        block.copy_(inp.reshape(-1))
    _run(lib, _as(out, dtype))


def reduce_scatter_into(
    lib: DeviceLibrary, out: torch.Tensor, inp: torch.Tensor, kind: ReduceKind, p: int, rank: int
) -> None:
    """``out`` becomes block ``rank`` of the reduction of every rank's ``inp`` (p blocks of ``out.numel()``)."""
    n = out.numel()
    if n == 0:
        return
    work = inp.reshape(-1).clone()
    if kind.name == "premul_sum":
        work.mul_(kind.factor)
    _run(lib, work, kind.base)
    out.copy_(work[rank * n : (rank + 1) * n].view(out.shape))
    if kind.name == "avg":
        out.div_(p)


def broadcast(lib: DeviceLibrary, t: torch.Tensor) -> None:
    """``t`` becomes the schedule's root's ``t`` (the library was bound to a communicator ranked for the root)."""
    dtype = movement_dtype(t)
    if dtype is None:
        raise ValueError(f"no mpi-cuda dtype moves {t.numel()} {t.dtype} elements")
    _run(lib, _as(t, dtype))
