"""What the collc backend does with tensors: checks, reduction ops, dtypes, and the calls into a library.

Everything here runs on a group's worker thread, except the checks of the
arguments (`contiguous_cpu`), which callers make before queueing.

Dtypes:

* reductions run in the tensor's own dtype for float32, float64, float16 (MPI's
  ``MPIX_C_FLOAT16``, rounded at every step as gloo does) and the integer types;
* bfloat16 reductions are accumulated in float32 (a float32 copy in and out, the
  wire carries float32) and rounded to bfloat16 once, at the end; MPI's own
  bfloat16 arithmetic does not round to nearest-even;
* data movement (allgather, broadcast, gather, scatter, alltoall) moves any
  dtype's bytes unchanged, in place where the tensors allow;
* the calls with counts given at run time (`all_gather_v`, `reduce_scatter_v`,
  `all_to_all_v`) take counts in elements and pass them to the library in bytes
  (reductions: in elements of the MPI datatype).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from collc.torch.library import GroupLibrary, mpi_datatype, mpi_op

__all__ = [
    "ReduceKind",
    "all_gather_into",
    "all_gather_v",
    "all_reduce",
    "all_to_all_into",
    "all_to_all_v",
    "broadcast",
    "check_tensor",
    "dtype_code",
    "gather_into",
    "reduce_kind",
    "reduce_scatter_into",
    "reduce_scatter_v",
    "scatter_from",
]

_R = dist.ReduceOp.RedOpType
_KINDS = {_R.SUM: "sum", _R.AVG: "avg", _R.MAX: "max", _R.MIN: "min", _R.PRODUCT: "product",
          _R.PREMUL_SUM: "premul_sum"}  # fmt: skip

_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_INTS = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)

_OTHERS = (torch.bool, torch.complex64, torch.complex128, torch.uint16, torch.uint32, torch.uint64)
_DTYPE_CODES: dict[torch.dtype, int] = {dt: k + 1 for k, dt in enumerate((*_FLOATS, *_INTS, *_OTHERS))}


def dtype_code(dtype: torch.dtype) -> int:
    """A number for ``dtype`` that ranks compare (the same in every process)."""
    code = _DTYPE_CODES.get(dtype)
    if code is None:
        code = 1000 + sum(ord(c) for c in str(dtype))
    return code


def dtype_name(code: int) -> str:
    """The dtype of a `dtype_code`, for messages."""
    for dt, c in _DTYPE_CODES.items():
        if c == code:
            return str(dt).removeprefix("torch.")
    return f"dtype #{code}"


@dataclass(frozen=True, slots=True)
class ReduceKind:
    """A reduction op: its name (sum, avg, max, min, product, premul_sum) and premul_sum's factor."""

    name: str
    factor: float = 1.0
    code: int = 0

    @property
    def base(self) -> str:
        """The op the library runs (avg and premul_sum run as sum)."""
        return "sum" if self.name in ("avg", "premul_sum") else self.name


def op_name(op: dist.ReduceOp | _R) -> str:
    """``BAND`` for ReduceOp.BAND (and for a ReduceOp holding it)."""
    kind = getattr(op, "op", op)
    return str(getattr(kind, "name", kind)).rsplit(".", 1)[-1]


def reduce_kind(op: dist.ReduceOp | _R) -> ReduceKind | None:
    """The `ReduceKind` of a torch op, or None for one the libraries cannot run (bitwise ops, ...)."""
    kind = getattr(op, "op", op)  # a ReduceOp holds its RedOpType; ReduceOp.SUM and co. are RedOpTypes
    name = _KINDS.get(kind)
    if name is None:
        return None
    code = 1 + list(_KINDS).index(kind)
    if name != "premul_sum":
        return ReduceKind(name, code=code)
    try:
        factor = float(op.factor)  # type: ignore[union-attr]
    except (AttributeError, TypeError, RuntimeError):
        return None  # a factor held in a tensor: not readable here
    return ReduceKind(name, factor, code)


def reduce_problem(dtype: torch.dtype, kind: ReduceKind) -> str | None:
    """Why the libraries cannot reduce ``dtype`` with ``kind`` (the op then runs on gloo), or None."""
    if dtype in _FLOATS:
        return None
    if dtype in _INTS:
        if kind.name in ("avg", "premul_sum"):
            return f"{kind.name.upper()} of {dtype} tensors"
        return None
    return f"reductions of {dtype} tensors"


def check_tensor(t: torch.Tensor, what: str) -> str | None:
    """Why tensor ``t`` cannot be an argument of a collc collective, or None."""
    if not isinstance(t, torch.Tensor):
        return f"{what} is a {type(t).__name__}, not a tensor"
    if t.device.type not in ("cpu", "cuda"):
        return f"{what} is on {t.device}: the collc backend runs CPU tensors (mpi-c) and CUDA tensors (mpi-cuda)"
    if t.is_sparse or t.layout != torch.strided:
        return f"{what} has layout {t.layout}: collc collectives take dense tensors"
    if not t.is_contiguous():
        return f"{what} is not contiguous (shape {tuple(t.shape)}, strides {t.stride()}): pass t.contiguous()"
    return None


def _span(t: torch.Tensor) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.numel() == 0 or b.numel() == 0:
        return False
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def _byte_type() -> int:
    from mpi4py import MPI

    return int(MPI.BYTE.py2f())


def _native(dtype: torch.dtype) -> int | None:
    """The MPI datatype the library reduces ``dtype`` in, or None when it goes through float32."""
    if dtype is torch.bfloat16:
        return None
    return mpi_datatype(str(dtype).removeprefix("torch."))


def _finish(t: torch.Tensor, kind: ReduceKind, p: int) -> None:
    if kind.name == "avg":
        t.div_(p)


def _start(t: torch.Tensor, kind: ReduceKind) -> None:
    if kind.name == "premul_sum":
        t.mul_(kind.factor)


def all_reduce(lib: GroupLibrary, t: torch.Tensor, kind: ReduceKind, p: int) -> None:
    """``t`` becomes the reduction of every rank's ``t`` (in place)."""
    n = t.numel()
    dt = _native(t.dtype)
    if dt is None:
        work = t.to(torch.float32)
        _start(work, kind)
        all_reduce(lib, work, ReduceKind(kind.base), p)
        _finish(work, kind, p)
        t.copy_(work)
        return
    _start(t, kind)
    if n:
        lib.allreduce(None, t.data_ptr(), n, dt, mpi_op(kind.base))
    _finish(t, kind, p)


def reduce_scatter_into(lib: GroupLibrary, out: torch.Tensor, inp: torch.Tensor, kind: ReduceKind, p: int) -> None:
    """``out`` becomes block ``rank`` of the reduction of every rank's ``inp`` (p blocks of ``out.numel()``)."""
    n = out.numel()
    dt = _native(out.dtype)
    if dt is None:
        work_in = inp.to(torch.float32)
        work_out = torch.empty(n, dtype=torch.float32, device=out.device)
        _start(work_in, kind)
        reduce_scatter_into(lib, work_out, work_in, ReduceKind(kind.base), p)
        _finish(work_out, kind, p)
        out.copy_(work_out.view(out.shape))
        return
    if kind.name == "premul_sum" or overlaps(out, inp):
        inp = inp.clone()  # premul_sum scales a copy; MPI forbids aliased buffers
        _start(inp, kind)
    if n:
        lib.reduce_scatter(inp.data_ptr(), out.data_ptr(), n, dt, mpi_op(kind.base))
    _finish(out, kind, p)


def _movement(t: torch.Tensor, typed: bool) -> tuple[int, int]:
    """(count, MPI datatype) that moves ``t``: its bytes, or its elements when a codec must see them."""
    if typed:
        dt = _native(t.dtype)
        if dt is None:
            raise ValueError(f"no MPI datatype for {t.dtype}")
        return t.numel(), dt
    return t.numel() * t.element_size(), _byte_type()


def all_gather_into(lib: GroupLibrary, out: torch.Tensor, inp: torch.Tensor, rank: int, typed: bool = False) -> None:
    """``out`` becomes every rank's ``inp``, in rank order.

    The bytes move unchanged, whatever the dtype; ``typed`` (a compressed schedule, whose codec
    encodes values) passes the elements with their MPI datatype instead.
    """
    if not inp.numel():
        return
    count, dt = _movement(inp, typed)
    if inp.data_ptr() == out.data_ptr() + rank * inp.numel() * inp.element_size():
        lib.allgather(None, out.data_ptr(), count, dt)  # in place, as FSDP2 gathers
        return
    if overlaps(out, inp):
        inp = inp.clone()
    lib.allgather(inp.data_ptr(), out.data_ptr(), count, dt)


def broadcast(lib: GroupLibrary, t: torch.Tensor, root: int, typed: bool = False) -> None:
    """``t`` becomes ``root``'s ``t`` (bytes, or elements when ``typed``, as for `all_gather_into`)."""
    if t.numel():
        count, dt = _movement(t, typed)
        lib.broadcast(t.data_ptr(), count, dt, root)


def _blocks(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """One flat tensor over ``tensors`` when they lie one after the other in one allocation (the views of
    ``t.chunk(p)``, say), else None."""
    first = tensors[0]
    size = first.numel() * first.element_size()
    storage = first.untyped_storage()
    for k, t in enumerate(tensors):
        if t.dtype != first.dtype or t.untyped_storage().data_ptr() != storage.data_ptr():
            return None
        if t.data_ptr() != first.data_ptr() + k * size:
            return None
    flat = torch.empty(0, dtype=first.dtype, device=first.device)
    return flat.set_(storage, first.storage_offset(), (first.numel() * len(tensors),))


def gather_into(
    lib: GroupLibrary, outs: list[torch.Tensor] | None, inp: torch.Tensor, root: int, shift: int, typed: bool = False
) -> None:
    """The root's ``outs[k]`` becomes rank k's ``inp`` (``outs`` None on the other ranks).

    ``lib`` runs on a communicator renumbered for the schedule's root ``root``: the library's block j is
    ``outs[(j - shift) mod p]``.  Without a shift, and with ``outs`` the consecutive blocks of one buffer, the
    library writes into ``outs`` directly (in place when ``inp`` is the root's own block); otherwise it
    writes a buffer of its own, copied out.  Bytes move unchanged, or elements when ``typed``.
    """
    n = inp.numel()
    if not n:
        return
    count, dt = _movement(inp, typed)
    if outs is None:
        lib.gather(inp.data_ptr(), None, count, dt, root)
        return
    p = len(outs)
    flat = _blocks(outs) if shift == 0 else None
    work = flat if flat is not None else torch.empty(n * p, dtype=inp.dtype, device=inp.device)
    if inp.data_ptr() == work.data_ptr() + root * n * inp.element_size():
        lib.gather(None, work.data_ptr(), count, dt, root)
    else:
        send = inp.clone() if overlaps(work, inp) else inp
        lib.gather(send.data_ptr(), work.data_ptr(), count, dt, root)
    if flat is None:
        for j in range(p):
            outs[(j - shift) % p].view(-1).copy_(work[j * n : (j + 1) * n])


def scatter_from(
    lib: GroupLibrary, ins: list[torch.Tensor] | None, out: torch.Tensor, root: int, shift: int, typed: bool = False
) -> None:
    """``out`` becomes the root's ``ins[rank]`` (``ins`` None on the other ranks).

    As `gather_into`: the library's block j is ``ins[(j - shift) mod p]``; ``ins`` that are the consecutive
    blocks of one buffer are read in place when there is no shift, else copied into one buffer first.
    """
    n = out.numel()
    if not n:
        return
    count, dt = _movement(out, typed)
    if ins is None:
        lib.scatter(None, out.data_ptr(), count, dt, root)
        return
    p = len(ins)
    flat = _blocks(ins) if shift == 0 else None
    if flat is None:
        flat = torch.cat([ins[(j - shift) % p].reshape(-1) for j in range(p)])
    if out.data_ptr() == flat.data_ptr() + root * n * out.element_size():
        lib.scatter(flat.data_ptr(), None, count, dt, root)  # its block stays where it is
    elif overlaps(flat, out):
        work = torch.empty_like(out)
        lib.scatter(flat.data_ptr(), work.data_ptr(), count, dt, root)
        out.copy_(work)
    else:
        lib.scatter(flat.data_ptr(), out.data_ptr(), count, dt, root)


def all_to_all_into(lib: GroupLibrary, out: torch.Tensor, inp: torch.Tensor, p: int, typed: bool = False) -> None:
    """Block d of ``inp`` (p equal blocks) goes to rank d, block s of ``out`` comes from rank s.

    Bytes move unchanged, or elements when ``typed`` (as for `all_gather_into`); ``out`` and ``inp`` one
    tensor runs in place."""
    if not inp.numel():
        return
    count, dt = _movement(inp, typed)
    if inp.data_ptr() == out.data_ptr():
        lib.alltoall(None, out.data_ptr(), count // p, dt)
        return
    if overlaps(out, inp):
        inp = inp.clone()
    lib.alltoall(inp.data_ptr(), out.data_ptr(), count // p, dt)


_EMPTY = torch.zeros(8, dtype=torch.uint8)
"""The address an empty buffer gets: never NULL, which the entry points take for MPI_IN_PLACE."""


def _address(t: torch.Tensor) -> int:
    return t.data_ptr() if t.numel() else _EMPTY.data_ptr()


def _offsets(counts: list[int]) -> list[int]:
    out, at = [], 0
    for c in counts:
        out.append(at)
        at += c
    return out


def all_to_all_v(lib: GroupLibrary, out: torch.Tensor, inp: torch.Tensor, send: list[int], recv: list[int]) -> None:
    """``send[d]`` elements of ``inp`` go to rank d (the blocks end to end in rank order), ``recv[s]`` elements
    from rank s to ``out`` (likewise); bytes move unchanged.  Every rank calls it, whatever its counts."""
    size = inp.element_size()
    send_bytes, recv_bytes = [c * size for c in send], [c * size for c in recv]
    if overlaps(out, inp):
        inp = inp.clone()
    lib.alltoallv(_address(inp), send_bytes, _offsets(send_bytes), _address(out), recv_bytes, _offsets(recv_bytes),
                  _byte_type())  # fmt: skip


def all_gather_v(lib: GroupLibrary, out: torch.Tensor, inp: torch.Tensor, counts: list[int], rank: int) -> None:
    """``out`` (``sum(counts)`` elements) becomes every rank's ``inp`` end to end in rank order, rank r's of
    ``counts[r]`` elements; bytes move unchanged."""
    if not sum(counts):
        return
    size = inp.element_size()
    counts_bytes = [c * size for c in counts]
    lib.allgatherv(_address(inp), counts_bytes[rank], _address(out), counts_bytes, _offsets(counts_bytes),
                   _byte_type())  # fmt: skip


def reduce_scatter_v(
    lib: GroupLibrary, out: torch.Tensor, inp: torch.Tensor, counts: list[int], kind: ReduceKind, p: int
) -> None:
    """``out`` becomes block ``rank`` of the reduction of every rank's ``inp``: the blocks end to end in rank
    order, rank r's of ``counts[r]`` elements.  ``inp`` may be scaled in place (pass a tensor of the caller's)."""
    if not sum(counts):
        return
    dt = _native(out.dtype)
    if dt is None:
        work_in = inp.to(torch.float32)
        work_out = torch.empty(out.numel(), dtype=torch.float32, device=out.device)
        _start(work_in, kind)
        reduce_scatter_v(lib, work_out, work_in, counts, ReduceKind(kind.base), p)
        _finish(work_out, kind, p)
        out.copy_(work_out.view(out.shape))
        return
    if overlaps(out, inp):
        inp = inp.clone()
    _start(inp, kind)
    lib.reduce_scatter_v(_address(inp), _address(out), counts, dt, mpi_op(kind.base))
    _finish(out, kind, p)


Runner = Callable[[], None]


def copy_into(out: torch.Tensor, inp: torch.Tensor) -> None:
    """``inp``'s elements into ``out`` (nothing when they are one tensor)."""
    if out.data_ptr() != inp.data_ptr():
        out.view(-1).copy_(inp.view(-1))
