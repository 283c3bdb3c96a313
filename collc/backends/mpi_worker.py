"""The program every rank runs under ``mpiexec`` for ``collc run --backend mpi`` and the MPI benchmarks.

``python -m collc.backends.mpi_worker SPEC.json``: for every size and every
implementation in the spec (the generated mpi-py module, the generated mpi-c
library through ctypes, or the MPI library's own collective), each rank fills
its input, runs warm-up and timed iterations (a barrier before each), checks
its own result against a numpy reduction of every rank's input (regenerated
from the seed, rank by rank), and sends its timings and error count to rank 0,
which prints one JSON row per (implementation, size) on stdout.  A schedule
with compression points is judged by the verifier's error bounds in the spec
(`judge_row`); the rows add the largest error and bound, and every row the
bytes the ranks sent (``wire_bytes``).  With ``dump_dir`` in the spec each
rank also saves its last result there (``rank<r>_count<n>.npy``).

Progress goes to one small JSON file per rank in the spec's ``status_dir``
(pid, state, implementation, size), so that the launcher can tell which rank
stopped and where.  Any exception on a rank is written there and aborts the
whole job, so that no rank is left waiting in a collective.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from collc import collectives
from collc.backends import local
from collc.collectives import EVERY
from collc.ir import Collective

__all__ = ["expected_row", "input_row", "judge_row", "main"]


class Status:
    """This rank's progress file, rewritten atomically at every change."""

    def __init__(self, folder: str, rank: int) -> None:
        self.path = Path(folder) / f"rank{rank}.json"
        self.rank = rank
        self.fields: dict[str, Any] = {"rank": rank, "pid": os.getpid(), "state": "starting"}
        self.write()

    def update(self, **fields: Any) -> None:
        self.fields.update(fields)
        self.write()

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.fields))
        tmp.replace(self.path)


# --------------------------------------------------------------------------
# Inputs and the reference, one rank at a time
# --------------------------------------------------------------------------


def _layout(spec: dict[str, Any], count: int) -> tuple[np.ndarray, np.ndarray]:
    """Per logical element: the rank that contributes it (or EVERY) and the rank that must hold it (or EVERY)."""
    coll = Collective(spec["collective"])
    p, nchunks, root = spec["nranks"], spec["nchunks"], spec["root"]
    offsets = collectives.element_offsets(coll, p, nchunks, count, spec.get("chunk_weights"))
    chunk_of = np.repeat(np.arange(nchunks, dtype=np.int64), np.diff(offsets))
    origin = collectives.chunk_origin(coll, p, nchunks, root)[chunk_of]
    dest = collectives.chunk_dest(coll, p, nchunks, root)[chunk_of]
    return origin, dest


def input_row(spec: dict[str, Any], count: int, rank: int, origin: np.ndarray) -> np.ndarray:
    """Rank ``rank``'s initial logical buffer: random values where it contributes, poison elsewhere.

    The distributions are those of `local.make_inputs`, drawn from a generator
    seeded with (seed, rank) so that any rank can regenerate any other's row.
    """
    dt = local.DTYPES[spec["dtype"]]
    op = spec["op"]
    rng = np.random.default_rng([spec["seed"], rank])
    n = origin.size
    if np.issubdtype(dt, np.integer):
        if op == "prod":
            two = min(0.5, 8.0 / spec["nranks"])
            row = rng.choice(np.array([-1, 1, 2], dtype=dt), size=n, p=[(1 - two) / 2, (1 - two) / 2, two])
        else:
            bound = 100 if op == "sum" else 10**6
            row = rng.integers(-bound, bound, size=n, dtype=dt, endpoint=True)
        poison: float | int = local.INT_POISON
    else:
        work = np.float64 if dt == np.float64 else np.float32
        values = rng.random(n, dtype=work)
        if op == "prod":
            values += 0.5
            values *= rng.choice(np.array([-1, 1], dtype=work), size=n)
        else:
            values *= 2
            values -= 1
        row = values.astype(dt, copy=False)
        poison = np.nan
    row[(origin != EVERY) & (origin != rank)] = poison
    return row


def expected_row(spec: dict[str, Any], count: int, origin: np.ndarray, upto: int | None = None) -> np.ndarray:
    """The collective's result for every element, from every rank's regenerated input (float64 for floats);
    ``upto``: reduce ranks ``0 .. upto - 1`` only (scans, `collectives.contributors`)."""
    dt = local.DTYPES[spec["dtype"]]
    floating = not np.issubdtype(dt, np.integer)
    out_dtype = np.dtype(np.float64) if floating else dt
    ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[spec["op"]]
    result = np.zeros(origin.size, dtype=out_dtype)
    every = origin == EVERY
    with np.errstate(all="ignore"):
        for r in range(spec["nranks"] if upto is None else upto):
            row = input_row(spec, count, r, origin)
            if every.any():
                part = row[every].astype(out_dtype)
                result[every] = part if r == 0 else ufunc(result[every], part)
            mine = origin == r
            if mine.any():
                result[mine] = row[mine].astype(out_dtype)
    return result


# --------------------------------------------------------------------------
# Implementations: one object per way of running the collective
# --------------------------------------------------------------------------


def _load_module(path: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class Native:
    """The MPI library's own collective, through mpi4py."""

    def __init__(self, comm: Any, spec: dict[str, Any]) -> None:
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = comm
        self.root = spec["root"]

    def op(self, name: str) -> Any:
        return {"sum": self.MPI.SUM, "prod": self.MPI.PROD, "max": self.MPI.MAX, "min": self.MPI.MIN}[name]

    def allreduce(self, send: np.ndarray, recv: np.ndarray, op: str) -> None:
        self.comm.Allreduce(send, recv, self.op(op))

    def allgather(self, send: np.ndarray, recv: np.ndarray) -> None:
        self.comm.Allgather(send, recv)

    def reduce_scatter(self, send: np.ndarray, recv: np.ndarray, op: str) -> None:
        self.comm.Reduce_scatter_block(send, recv, self.op(op))

    def broadcast(self, buf: np.ndarray, root: int) -> None:
        self.comm.Bcast(buf, root)

    def reduce(self, send: np.ndarray, recv: np.ndarray | None, op: str, root: int) -> None:
        self.comm.Reduce(send, recv, self.op(op), root)

    def alltoall(self, send: np.ndarray, recv: np.ndarray) -> None:
        self.comm.Alltoall(send, recv)


def _implementation(kind: str, entry: dict[str, Any], comm: Any, spec: dict[str, Any]) -> Any:
    if kind == "native":
        return Native(comm, spec)
    if kind == "mpi-py":
        return _load_module(entry["module"]).Executor(comm)
    if kind == "mpi-c":
        from collc.backends.mpi_c_binding import Library

        return Library(entry["library"], spec["algorithm"], spec["collective"], comm)
    raise ValueError(f"unknown implementation kind {kind!r}")


def _call(
    impl: Any, coll: Collective, buf: np.ndarray, inputs: np.ndarray, rank: int, p: int, op: str, root: int
) -> None:
    """Run the collective once through ``impl``'s MPI-style API; the result lands in ``buf`` (logical layout)."""
    if coll is Collective.ALLREDUCE:
        impl.allreduce(inputs, buf, op)
    elif coll is Collective.ALLGATHER:
        m = buf.size // p
        impl.allgather(inputs[rank * m : (rank + 1) * m], buf)
    elif coll is Collective.REDUCE_SCATTER:
        m = buf.size // p
        impl.reduce_scatter(inputs, buf[rank * m : (rank + 1) * m], op)
    elif coll is Collective.BROADCAST:
        buf[...] = inputs
        impl.broadcast(buf, root)
    elif coll is Collective.REDUCE:
        impl.reduce(inputs, buf if rank == root else None, op, root)
    elif coll in (Collective.SCAN, Collective.EXSCAN):
        out = np.empty_like(buf)
        getattr(impl, coll.value)(inputs, out, op)
        if coll is Collective.SCAN or rank > 0:
            buf[...] = out
    elif coll is Collective.BARRIER:
        impl.barrier()
    elif coll is Collective.GATHER:
        m = buf.size // p
        impl.gather(inputs[rank * m : (rank + 1) * m], buf if rank == root else None, root)
    elif coll is Collective.SCATTER:
        m = buf.size // p
        impl.scatter(inputs if rank == root else None, buf[rank * m : (rank + 1) * m], root)
    elif coll is Collective.ALLTOALL:
        count = buf.size // p
        m = count // p
        recv = np.empty(count, dtype=buf.dtype)
        impl.alltoall(inputs[rank * count : (rank + 1) * count], recv)
        for i in range(p):
            at = (i * p + rank) * m
            buf[at : at + m] = recv[i * m : (i + 1) * m]


def _barrier_wrong(impl: Any, comm: Any, rank: int, p: int) -> int:
    """1 when this rank left the barrier before the last rank came to it, else 0: the last rank comes 50 ms
    late (the ranks share one clock on one host)."""
    import time

    from mpi4py import MPI

    comm.Barrier()
    if rank == p - 1:
        time.sleep(0.05)
    came = MPI.Wtime()
    impl.barrier()
    left = MPI.Wtime()
    return int(left < max(comm.allgather(came)))


def run_size(spec: dict[str, Any], impl: Any, comm: Any, count: int) -> dict[str, Any]:
    """Warm-up, timed iterations and the check of one size; returns this rank's figures."""
    from mpi4py import MPI

    coll = Collective(spec["collective"])
    rank, p = comm.Get_rank(), comm.Get_size()
    origin, dest = _layout(spec, count)
    inputs = input_row(spec, count, rank, origin)
    buf = inputs.copy()
    iters = spec["iters"] if isinstance(spec["iters"], int) else spec["iters"][spec["counts"].index(count)]
    times = []
    for i in range(spec["warmup"] + iters):
        buf[...] = inputs
        comm.Barrier()
        start = MPI.Wtime()
        _call(impl, coll, buf, inputs, rank, p, spec["op"], spec["root"])
        elapsed = MPI.Wtime() - start
        if i >= spec["warmup"]:
            times.append(elapsed)
    if spec.get("dump_dir"):
        np.save(Path(spec["dump_dir"]) / f"rank{rank}_count{count}.npy", buf)
    wrong = -1
    figures: dict[str, Any] = {"wire_bytes": int(getattr(impl, "wire_bytes", -1))}
    if spec["check"] and coll is Collective.BARRIER:
        wrong = _barrier_wrong(impl, comm, rank, p)
    elif spec["check"]:
        expected = expected_row(spec, count, origin, collectives.contributors(coll, p, rank))
        mask = (dest == EVERY) | (dest == rank)
        if coll.prefix == 0 and rank == 0:
            mask[:] = False  # an exscan's rank 0 receives nothing
        if spec.get("error_bounds") is not None:
            wrong, worst, bound = judge_row(spec, count, rank, buf, expected, mask)
            figures.update(max_abs_error=worst, error_bound=bound)
        else:
            wrong = local.count_wrong(
                buf[None, :], expected[None, :], mask[None, :], spec["dtype"], spec["op"], p, reduces=coll.reduces
            )
    return {"time_us": float(np.mean(times)) * 1e6, "wrong": wrong, "iters": iters, **figures}


def judge_row(
    spec: dict[str, Any], count: int, rank: int, result: np.ndarray, expected: np.ndarray, mask: np.ndarray
) -> tuple[int, float, float]:
    """(wrong elements, the largest error, the largest bound) of this rank's result of a compressed schedule.

    As `local.judge_error_bounds`: against the exact float64 reduction, each
    element within its (rank, chunk) slot's verified bound (``spec["error_bounds"]``)
    plus the rounding allowance of the reduction order.
    """
    p, nchunks = spec["nranks"], spec["nchunks"]
    offsets = collectives.element_offsets(Collective(spec["collective"]), p, nchunks, count, spec.get("chunk_weights"))
    chunk_of = np.repeat(np.arange(nchunks), np.diff(offsets))
    bounds = np.asarray(spec["error_bounds"][rank], dtype=np.float64)[chunk_of][mask]
    if bounds.size == 0:
        return 0, 0.0, 0.0
    exact = expected[mask]
    with np.errstate(invalid="ignore"):
        err = np.abs(result[mask].astype(np.float64) - exact)
    err[np.isnan(err)] = np.inf
    allowed = bounds + local.rounding_allowance(spec["dtype"], spec["op"], p) * (np.abs(exact) + p)
    return int(np.count_nonzero(~(err <= allowed))), float(err.max()), float(bounds.max())


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    status = Status(spec["status_dir"], rank)
    try:
        if comm.Get_size() != spec["nranks"]:
            raise ValueError(f"launched on {comm.Get_size()} ranks, the schedule has {spec['nranks']}")
        dt = local.DTYPES[spec["dtype"]]
        impls = [(e["name"], _implementation(e["kind"], e, comm, spec)) for e in spec["impls"]]
        for count in spec["counts"]:
            for name, impl in impls:
                status.update(state="running", impl=name, count=count)
                mine = run_size(spec, impl, comm, count)
                gathered = comm.gather(mine, root=0)
                if rank == 0:
                    times = [g["time_us"] for g in gathered]
                    wire = [g["wire_bytes"] for g in gathered]
                    row = {
                        "impl": name,
                        "count": count,
                        "size_bytes": count * dt.itemsize,
                        "avg_us": float(np.mean(times)),
                        "min_us": float(np.min(times)),
                        "max_us": float(np.max(times)),
                        "wrong": sum(g["wrong"] for g in gathered) if spec["check"] else -1,
                        "iters": gathered[0]["iters"],
                        "wire_bytes": sum(wire) if min(wire) >= 0 else -1,
                    }
                    if "max_abs_error" in gathered[0]:
                        row["max_abs_error"] = max(g["max_abs_error"] for g in gathered)
                        row["error_bound"] = max(g["error_bound"] for g in gathered)
                    print(json.dumps(row), flush=True)
        for _, impl in impls:
            if hasattr(impl, "free"):
                impl.free()
        status.update(state="done")
    except BaseException as err:  # any failure on one rank must end every rank
        status.update(state="error", error=f"{type(err).__name__}: {err}", traceback=traceback.format_exc())
        sys.stderr.write(f"collc: rank {rank}: {type(err).__name__}: {err}\n")
        sys.stderr.flush()
        comm.Abort(3)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
