"""Calling a generated mpi-c library from Python (ctypes), with the mpi-py executor's method names.

The library's ``collc_<alg>_<collective>_f`` entry points take Fortran handles
(mpi4py's ``.py2f()``) and a 64-bit count, and read ``sendbuf == NULL`` as
``MPI_IN_PLACE``; see the generated header.  `Library` gives them the same
methods as the generated mpi-py ``Executor`` (``allreduce(sendbuf, recvbuf,
op)``, ...), so the MPI worker drives both the same way.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from collc.backends.csource import c_ident

__all__ = ["Library"]

_DTYPES = {"float32": "FLOAT", "float64": "DOUBLE", "int32": "INT32_T", "int64": "INT64_T"}
_OPS = {"sum": "SUM", "prod": "PROD", "max": "MAX", "min": "MIN"}
_API = {
    "allreduce": "allreduce",
    "allgather": "allgather",
    "reduce_scatter": "reduce_scatter_block",
    "broadcast": "bcast",
    "reduce": "reduce",
    "alltoall": "alltoall",
    "gather": "gather",
    "scatter": "scatter",
    "scan": "scan",
    "exscan": "exscan",
    "barrier": "barrier",
}


def _ptr(buf: np.ndarray | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(None if buf is None else buf.ctypes.data)


class Library:
    """A loaded ``libcollc_<algorithm>.so`` and the communicator its calls run on."""

    def __init__(self, path: str, algorithm: str, collective: str, comm: Any) -> None:
        from mpi4py import MPI

        self.MPI = MPI
        self.lib = ctypes.CDLL(path)
        ident = c_ident(algorithm)
        self.fn = getattr(self.lib, f"collc_{ident}_{_API[collective]}_f")
        self.fn.restype = ctypes.c_int
        self.last_error = getattr(self.lib, f"collc_{ident}_last_error")
        self.last_error.restype = ctypes.c_char_p
        self._wire_bytes = getattr(self.lib, f"collc_{ident}_wire_bytes")
        self._wire_bytes.restype = ctypes.c_int64
        self.comm = comm.py2f()
        self.size = comm.Get_size()

    @property
    def wire_bytes(self) -> int:
        """The bytes this rank sent in its last call (compressed payloads at their size)."""
        return int(self._wire_bytes())

    def _dtype(self, buf: np.ndarray) -> int:
        name = _DTYPES.get(buf.dtype.name)
        if name is None:
            raise ValueError(f"the mpi-c library has no MPI datatype for {buf.dtype.name}")
        return getattr(self.MPI, name).py2f()

    def _op(self, op: str) -> int:
        return getattr(self.MPI, _OPS[op]).py2f()

    def _check(self, code: int) -> None:
        if code != 0:
            reason = self.last_error()
            raise RuntimeError(f"mpi-c call failed with {code}: {reason.decode() if reason else 'MPI error'}")

    def allreduce(self, send: np.ndarray | None, recv: np.ndarray, op: str) -> None:
        self._check(self.fn(_ptr(send), _ptr(recv), ctypes.c_int64(recv.size), self._dtype(recv), self._op(op),
                            self.comm))  # fmt: skip

    def allgather(self, send: np.ndarray | None, recv: np.ndarray) -> None:
        count = recv.size // self.size
        self._check(self.fn(_ptr(send), _ptr(recv), ctypes.c_int64(count), self._dtype(recv), self.comm))

    def reduce_scatter(self, send: np.ndarray | None, recv: np.ndarray, op: str) -> None:
        self._check(self.fn(_ptr(send), _ptr(recv), ctypes.c_int64(recv.size), self._dtype(recv), self._op(op),
                            self.comm))  # fmt: skip

    def broadcast(self, buf: np.ndarray, root: int) -> None:
        self._check(self.fn(_ptr(buf), ctypes.c_int64(buf.size), self._dtype(buf), ctypes.c_int(root), self.comm))

    def reduce(self, send: np.ndarray, recv: np.ndarray | None, op: str, root: int) -> None:
        self._check(self.fn(_ptr(send), _ptr(recv), ctypes.c_int64(send.size), self._dtype(send), self._op(op),
                            ctypes.c_int(root), self.comm))  # fmt: skip

    def alltoall(self, send: np.ndarray, recv: np.ndarray) -> None:
        count = recv.size // self.size
        self._check(self.fn(_ptr(send), _ptr(recv), ctypes.c_int64(count), self._dtype(recv), self.comm))

    def gather(self, send: np.ndarray, recv: np.ndarray | None, root: int) -> None:
        self._check(self.fn(_ptr(send), _ptr(recv), ctypes.c_int64(send.size), self._dtype(send), ctypes.c_int(root),
                            self.comm))  # fmt: skip

    def scatter(self, send: np.ndarray | None, recv: np.ndarray, root: int) -> None:
        self._check(self.fn(_ptr(send), _ptr(recv), ctypes.c_int64(recv.size), self._dtype(recv), ctypes.c_int(root),
                            self.comm))  # fmt: skip

    def scan(self, send: np.ndarray | None, recv: np.ndarray, op: str) -> None:
        self.allreduce(send, recv, op)  # the same arguments

    def exscan(self, send: np.ndarray | None, recv: np.ndarray, op: str) -> None:
        self.allreduce(send, recv, op)

    def barrier(self) -> None:
        self._check(self.fn(self.comm))
