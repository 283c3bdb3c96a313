"""Calling a compiled mpi-c library on tensor memory (ctypes, raw pointers: no copy, any dtype MPI has).

`collc.backends.mpi_c_binding.Library` takes numpy arrays; tensors of dtypes
numpy lacks (bfloat16) have no numpy view, so this binding passes addresses.
It calls the same ``collc_<algorithm>_<collective>_f`` entry points (Fortran
handles, 64-bit counts, a NULL send buffer for MPI_IN_PLACE), and those with
counts given at run time (``_allgatherv_f``, ``_reduce_scatter_f``,
``_alltoallv_f``: int64 arrays of one count or displacement per rank).

A generated library is not thread-safe (its header says so), and every group
runs its collectives from a thread of its own: each group therefore loads a
private copy of the library file (`GroupLibrary`), so that two groups never
share a library's state.
"""

from __future__ import annotations

import atexit
import ctypes
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from collc.backends.csource import c_ident
from collc.torch.schedules import Compiled

__all__ = ["DeviceLibrary", "GroupLibrary", "LibraryError", "mpi_datatype", "mpi_op"]

_API = {"allreduce": "allreduce", "allgather": "allgather", "reduce_scatter": "reduce_scatter_block",
        "broadcast": "bcast", "gather": "gather", "scatter": "scatter", "barrier": "barrier",
        "alltoall": "alltoall"}  # fmt: skip
_COUNTED_API = {"allgather": "allgatherv", "reduce_scatter": "reduce_scatter", "alltoall": "alltoallv"}
"""The entry point with counts given at run time of each collective that has one."""

_MPI_TYPES = {
    "float32": "FLOAT",
    "float64": "DOUBLE",
    "float16": "FLOAT16_T",
    "int8": "INT8_T",
    "uint8": "UINT8_T",
    "int16": "INT16_T",
    "int32": "INT32_T",
    "int64": "INT64_T",
}
"""MPI datatype (mpi4py name) of each element type the libraries move and reduce as itself."""

_MPI_OPS = {"sum": "SUM", "product": "PROD", "max": "MAX", "min": "MIN"}


class LibraryError(RuntimeError):
    """A library call that failed: the message has the library's own reason."""


def mpi_datatype(name: str) -> int | None:
    """The Fortran handle of the MPI datatype for element type ``name`` (a dtype name), or None."""
    from mpi4py import MPI

    attr = _MPI_TYPES.get(name)
    if attr is None:
        return None
    dt = getattr(MPI, attr, MPI.DATATYPE_NULL)
    if dt == MPI.DATATYPE_NULL:
        return None
    return int(dt.py2f())


def mpi_op(name: str) -> int:
    from mpi4py import MPI

    return int(getattr(MPI, _MPI_OPS[name]).py2f())


_copies_lock = threading.Lock()
_copies_dir: Path | None = None
_copies = 0


def _private_copy(library: Path) -> Path:
    """A copy of ``library`` under a name of its own, in a folder removed when the process ends."""
    global _copies_dir, _copies
    with _copies_lock:
        if _copies_dir is None:
            _copies_dir = Path(tempfile.mkdtemp(prefix="collc-torch-"))
            atexit.register(shutil.rmtree, _copies_dir, True)
        _copies += 1
        target = _copies_dir / f"{library.stem}.{_copies}{library.suffix}"
    shutil.copyfile(library, target)
    return target


class GroupLibrary:
    """One group's private instance of a compiled library, bound to the group's communicator."""

    def __init__(self, compiled: Compiled, comm: Any) -> None:
        self.compiled = compiled
        self.lib = ctypes.CDLL(str(_private_copy(compiled.library)))  # RTLD_LOCAL: MPI_* stay unchanged
        ident = c_ident(compiled.algorithm)
        self.fn = getattr(self.lib, f"collc_{ident}_{_API[compiled.collective]}_f")
        self.fn.restype = ctypes.c_int
        self.last_error = getattr(self.lib, f"collc_{ident}_last_error")
        self.last_error.restype = ctypes.c_char_p
        self.comm_object = comm
        self.comm = ctypes.c_int(int(comm.py2f()))
        counted = _COUNTED_API.get(compiled.collective)
        self.counted_name = f"collc_{ident}_{counted}_f" if counted is not None else ""
        self.counted = getattr(self.lib, self.counted_name, None) if counted is not None else None
        if self.counted is not None:
            self.counted.restype = ctypes.c_int

    def _check(self, code: int) -> None:
        if code != 0:
            reason = self.last_error()
            text = reason.decode(errors="replace") if reason else f"MPI error {code}"
            raise LibraryError(f"collc: {self.compiled.describe()}: {text}")

    def allreduce(self, send: int | None, recv: int, count: int, dtype: int, op: int) -> None:
        self._check(self.fn(ctypes.c_void_p(send), ctypes.c_void_p(recv), ctypes.c_int64(count), ctypes.c_int(dtype),
                            ctypes.c_int(op), self.comm))  # fmt: skip

    def allgather(self, send: int | None, recv: int, count: int, dtype: int) -> None:
        self._check(self.fn(ctypes.c_void_p(send), ctypes.c_void_p(recv), ctypes.c_int64(count), ctypes.c_int(dtype),
                            self.comm))  # fmt: skip

    def reduce_scatter(self, send: int | None, recv: int, count: int, dtype: int, op: int) -> None:
        self._check(self.fn(ctypes.c_void_p(send), ctypes.c_void_p(recv), ctypes.c_int64(count), ctypes.c_int(dtype),
                            ctypes.c_int(op), self.comm))  # fmt: skip

    def broadcast(self, buf: int, count: int, dtype: int, root: int) -> None:
        self._check(self.fn(ctypes.c_void_p(buf), ctypes.c_int64(count), ctypes.c_int(dtype), ctypes.c_int(root),
                            self.comm))  # fmt: skip

    def gather(self, send: int | None, recv: int | None, count: int, dtype: int, root: int) -> None:
        """``count`` elements a block; ``send`` None (the root only): its block is in ``recv`` already; ``recv``
        is read at the root only."""
        self._check(self.fn(ctypes.c_void_p(send), ctypes.c_void_p(recv), ctypes.c_int64(count), ctypes.c_int(dtype),
                            ctypes.c_int(root), self.comm))  # fmt: skip

    def scatter(self, send: int | None, recv: int | None, count: int, dtype: int, root: int) -> None:
        """``count`` elements a block; ``recv`` None (the root only): its block stays in ``send``; ``send`` is
        read at the root only."""
        self._check(self.fn(ctypes.c_void_p(send), ctypes.c_void_p(recv), ctypes.c_int64(count), ctypes.c_int(dtype),
                            ctypes.c_int(root), self.comm))  # fmt: skip

    def barrier(self) -> None:
        self._check(self.fn(self.comm))

    def alltoall(self, send: int | None, recv: int, count: int, dtype: int) -> None:
        """``count`` elements a block; ``send`` None: the blocks are in ``recv`` (MPI_IN_PLACE)."""
        self._check(self.fn(ctypes.c_void_p(send), ctypes.c_void_p(recv), ctypes.c_int64(count), ctypes.c_int(dtype),
                            self.comm))  # fmt: skip

    def _counted_fn(self) -> Any:
        if self.counted is None:
            raise LibraryError(f"collc: {self.compiled.library} has no {self.counted_name or 'entry point'} "
                               "with counts given at run time")  # fmt: skip
        return self.counted

    def allgatherv(self, send: int, sendcount: int, recv: int, counts: Sequence[int], displs: Sequence[int],
                   dtype: int) -> None:  # fmt: skip
        """Rank r's ``counts[r]`` elements land at ``recv + displs[r]`` elements."""
        self._check(self._counted_fn()(ctypes.c_void_p(send), ctypes.c_int64(sendcount), ctypes.c_void_p(recv),
                                       _int64s(counts), _int64s(displs), ctypes.c_int(dtype), self.comm))  # fmt: skip

    def reduce_scatter_v(self, send: int, recv: int, counts: Sequence[int], dtype: int, op: int) -> None:
        """Rank r receives ``counts[r]`` elements of the reduction (the blocks end to end in ``send``)."""
        self._check(self._counted_fn()(ctypes.c_void_p(send), ctypes.c_void_p(recv), _int64s(counts),
                                       ctypes.c_int(dtype), ctypes.c_int(op), self.comm))  # fmt: skip

    def alltoallv(self, send: int, send_counts: Sequence[int], send_displs: Sequence[int], recv: int,
                  recv_counts: Sequence[int], recv_displs: Sequence[int], dtype: int) -> None:  # fmt: skip
        """``send_counts[d]`` elements from ``send + send_displs[d]`` to rank d; ``recv_counts[s]`` from rank s
        to ``recv + recv_displs[s]``."""
        self._check(self._counted_fn()(ctypes.c_void_p(send), _int64s(send_counts), _int64s(send_displs),
                                       ctypes.c_void_p(recv), _int64s(recv_counts), _int64s(recv_displs),
                                       ctypes.c_int(dtype), self.comm))  # fmt: skip


def _int64s(values: Sequence[int]) -> Any:
    return (ctypes.c_int64 * len(values))(*values)


class DeviceLibrary:
    """One group's private instance of a compiled mpi-cuda library (CUDA tensors), bound to the group's communicator.

    Its one entry point runs the collective in place on a buffer in collc's
    logical element space (`collc.torch.device` lays tensors out in it):
    ``collc_<algorithm>_mpicuda_run_f(buffer, count, dtype, op, comm, stream)``.
    """

    def __init__(self, compiled: Compiled, comm: Any) -> None:
        self.compiled = compiled
        self.lib = ctypes.CDLL(str(_private_copy(compiled.library)))
        ident = c_ident(compiled.algorithm)
        self.fn = getattr(self.lib, f"collc_{ident}_mpicuda_run_f")
        self.fn.restype = ctypes.c_int
        self.fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        self.wait = getattr(self.lib, f"collc_{ident}_mpicuda_check")
        self.wait.restype = ctypes.c_int
        self.last_error = getattr(self.lib, f"collc_{ident}_mpicuda_last_error")
        self.last_error.restype = ctypes.c_char_p
        self.comm_object = comm
        self.comm = int(comm.py2f())

    def _check(self, code: int) -> None:
        if code != 0:
            reason = self.last_error()
            text = reason.decode(errors="replace") if reason else f"error {code}"
            raise LibraryError(f"collc: {self.compiled.describe()}: {text}")

    def run(self, buffer: int, count: int, dtype: int, op: int, stream: int = 0) -> None:
        """Run the collective in place on ``count`` elements at ``buffer`` (device memory); wait for its kernels."""
        self._check(self.fn(buffer, count, dtype, op, self.comm, stream or None))
        self._check(self.wait())
