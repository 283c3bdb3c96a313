"""The ``collc`` torch.distributed backend: a Python ProcessGroup that runs verified schedules.

Every collective a group is asked for becomes a job on the group's queue; a
thread of the group runs the jobs one after the other, in the order the
program issued them (the order torch requires to be the same on every rank),
and completes each job's future, which the returned Work waits on.  The
library calls release the GIL, so computation goes on while a collective runs
(FSDP2 overlaps its all-gathers and reduce-scatters this way).

A job runs in three parts on the thread:

1. plan: choose the route (the collective's schedule, compiled for the group's
   size, or the inner gloo group) and check what can be checked locally;
2. agree (unless ``configure(check=False)``): the ranks exchange a few
   integers (operation, route, dtype, element count, reduction op, root,
   schedule digest, and whether planning failed) with one small MPI allgather,
   so that a rank with bad input, sizes that differ between ranks, or ranks
   that chose different schedules end in an error on every rank instead of a
   hang or wrong data;
3. run: call the library (or gloo) on the tensors' memory.

Ops that no schedule covers (reduce, send/recv, bitwise reductions, dtypes
that MPI does not reduce) run on an inner gloo group created on first need;
the first use of each prints a warning.  Gather, scatter and barrier are in
`collc.torch.rooted`; all-to-all and the all_gather and reduce_scatter of
uneven lists (counts given at run time, which the ranks compare after the
signature) in `collc.torch.alltoall`.
"""

from __future__ import annotations

import queue
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.futures import Future

from collc.torch import config, device, mpi, ops
from collc.torch.alltoall import CountedCollectives
from collc.torch.gloo_options import allgather_opts, allreduce_opts, broadcast_opts, reduce_scatter_opts
from collc.torch.library import DeviceLibrary, GroupLibrary
from collc.torch.plan import (
    OPERATIONS,
    ROUTE_COLLC,
    ROUTE_DEVICE,
    ROUTE_GLOO,
    ROUTE_LOCAL,
    CollcError,
    Planned,
    Step,
    dtype_name,
    op_code,
    warn_once,
)
from collc.torch.rooted import RootedCollectives
from collc.torch.schedules import CODEC_DTYPES, Compiled, prepare

__all__ = ["CollcError", "CollcWork", "ProcessGroupCollc"]

_GLOO_OPS = {method: op_code(name) for method, name in (
    ("allreduce", "all_reduce"), ("_allgather_base", "all_gather"), ("_reduce_scatter_base", "reduce_scatter"),
    ("broadcast", "broadcast"), ("barrier", "barrier"), ("gather", "gather"), ("scatter", "scatter"))}  # fmt: skip
_FIELDS = ("operation", "route", "dtype", "element count", "reduction op", "root", "schedule", "failed")


@dataclass
class _Job:
    name: str
    steps: list[Step]
    future: Future[Any] = field(default_factory=Future)
    result: Any = None


class CollcWork(dist._Work):
    """The Work of a queued collective: ``wait()`` blocks until the group's thread ran it, and raises its error."""

    def __init__(self, future: Future[Any]) -> None:
        super().__init__()
        self._future = future

    def wait(self, timeout: timedelta | None = None) -> bool:
        self._future.wait()  # raises what the collective raised
        return True

    def is_completed(self) -> bool:
        return bool(self._future.done())

    def get_future(self) -> Future[Any]:
        return self._future


class ProcessGroupCollc(RootedCollectives, CountedCollectives, dist.ProcessGroup):
    """A process group whose collectives run collc schedules through compiled mpi-c libraries."""

    def __init__(
        self, store: Any, rank: int, size: int, timeout: timedelta, global_ranks: Sequence[int] | None = None
    ) -> None:
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self._store = store
        self._timeout = timeout
        self._group_name = ""
        self._group_desc = ""
        ranks = list(global_ranks) if global_ranks else list(range(size))
        mpi.init_world(store, rank, size, ranks, timeout)
        self._comm = mpi.group_comm(ranks, rank)
        self._libs: dict[tuple[Any, ...], tuple[Compiled, GroupLibrary]] = {}
        self._rotated: dict[tuple[Any, ...], GroupLibrary] = {}
        self._settings_seen = -1
        self._settings = config.current()
        self._gloo: Any = None
        self.stats: Counter[str] = Counter()  # collectives run, by route and operation ("collc all_reduce")
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # held while a job runs
        self._pending = 0  # jobs queued and not finished
        self._thread = threading.Thread(target=self._serve, name=f"collc-group-{rank}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ naming

    def getBackendName(self) -> str:
        return "collc"

    def getGroupName(self) -> str:
        return self._group_name

    def setGroupName(self, name: str) -> None:
        self._group_name = name

    def getGroupDesc(self) -> str:
        return self._group_desc

    def setGroupDesc(self, desc: str) -> None:
        self._group_desc = desc

    def __repr__(self) -> str:
        return f"ProcessGroupCollc(rank={self._rank}, size={self._size})"

    # ------------------------------------------------------------------ the worker

    def _submit(self, name: str, steps: list[Step], result: Any = None, opts: Any = None) -> Any:
        """Queue a job; a synchronous call (``opts.asyncOp`` false) with nothing queued runs in the caller's thread."""
        job = _Job(name, steps, result=result)
        inline = opts is not None and getattr(opts, "asyncOp", True) is False
        with self._lock:
            if inline and self._pending == 0:  # the thread is idle and stays so while the lock is held
                self._execute(job)
                return CollcWork(job.future)
            self._pending += 1
        self._queue.put(job)
        return CollcWork(job.future)

    def _serve(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            with self._lock:
                self._execute(job)
                self._pending -= 1

    def _execute(self, job: _Job) -> None:
        try:
            with torch.no_grad():
                for step in job.steps:
                    self._run_step(job.name, step)
        except Exception as err:  # the waiting thread re-raises it
            job.future.set_exception(err)
        except BaseException as err:  # an interrupt: the call fails, and the interrupt goes on
            job.future.set_exception(CollcError(f"collc: {job.name} interrupted ({type(err).__name__})"))
            raise
        else:
            job.future.set_result(job.result)

    def _run_step(self, name: str, step: Step) -> None:
        if config.generation() != self._settings_seen:  # before anything else, on every rank alike
            self._settings = config.current()
            self._settings_seen = config.generation()
        failure: Exception | None = None
        try:
            planned: Planned | None = step()
        except Exception as err:
            planned, failure = None, err
        if self._settings.check and self._size > 1:
            self._agree(name, planned, failure)
        if failure is not None:
            raise failure
        assert planned is not None
        planned.run()
        route = {ROUTE_COLLC: "collc", ROUTE_DEVICE: "collc", ROUTE_GLOO: "gloo"}.get(planned.signature[1], "local")
        self.stats[f"{route} {planned.label or name}"] += 1

    def _agree(self, name: str, planned: Planned | None, failure: Exception | None) -> None:
        mine = np.zeros(8, dtype=np.int64)
        if planned is not None:
            mine[:7] = planned.signature
        mine[7] = failure is not None
        table = np.empty((self._size, 8), dtype=np.int64)
        self._comm.Allgather(mine, table)
        failed = [r for r in range(self._size) if table[r, 7]]
        if failed:
            if failure is not None:
                raise failure
            raise CollcError(
                f"collc: {name}: rank{'s' if len(failed) > 1 else ''} {', '.join(map(str, failed))} refused "
                "the call (see the error there); no data was exchanged"
            )
        if planned is not None and planned.counts is not None and (table[:, 0] == table[0, 0]).all():
            self._agree_counts(planned)  # every rank is in this operation, and has counts of its length
        for column in range(7):
            values = table[:, column]
            if (values != values[0]).any():
                raise CollcError(self._disagreement(name, column, values, planned))

    def _disagreement(self, name: str, column: int, values: np.ndarray, planned: Planned | None) -> str:
        per_rank = ", ".join(f"rank {r}: {self._field_text(column, int(v))}" for r, v in enumerate(values))
        hint = {
            3: "every rank must pass tensors of the same size",
            1: "call collc.torch.configure(...) with the same arguments on every rank",
            6: "call collc.torch.configure(...) with the same arguments on every rank",
            0: _order_hint(values),
        }.get(column, "every rank must make the same call")
        what = planned.describe if planned is not None else name
        mine = ""
        if column == 6 and planned is not None and planned.schedule:
            mine = f" (this rank runs {planned.schedule})"
        return f"collc: {what}: the ranks disagree on the {_FIELDS[column]} ({per_rank}){mine}; {hint}"

    @staticmethod
    def _field_text(column: int, value: int) -> str:
        if column == 0:
            return OPERATIONS[value - 1] if 0 < value <= len(OPERATIONS) else str(value)
        if column == 1:
            names = {ROUTE_COLLC: "collc", ROUTE_DEVICE: "collc (CUDA)", ROUTE_GLOO: "gloo", ROUTE_LOCAL: "local"}
            return names.get(value, str(value))
        if column == 2:
            return ops.dtype_name(value)
        if column == 6:
            return f"{value:016x}"
        return str(value)

    # ------------------------------------------------------------------ schedules and gloo

    def _library(self, collective: str, t: torch.Tensor | None) -> tuple[Compiled, Library] | None:
        """The group's library for ``collective`` on tensors like ``t``: mpi-c for CPU tensors (and for no tensor,
        a barrier), mpi-cuda for CUDA tensors (None: the collective is configured to run on gloo)."""
        settings = self._settings
        source = settings.schedule(collective)
        if source == config.GLOO:
            return None
        key: tuple[Any, ...] = (collective, source, tuple(sorted(settings.codecs.items())), str(settings.cache_dir))
        cuda = t is not None and t.is_cuda
        if cuda:
            assert t is not None
            key += (settings.cuda_arch or _arch(t.device), settings.nvcc_flags)
        found = self._libs.get(key)
        if found is None:
            if cuda:
                compiled = prepare(collective, source, self._size, codecs=settings.codecs,
                                   cache_dir=settings.cache_dir, target="mpi-cuda", arch=key[4],
                                   nvcc_flags=settings.nvcc_flags)  # fmt: skip
                found = self._libs[key] = (compiled, DeviceLibrary(compiled, self._comm))
            else:
                compiled = prepare(collective, source, self._size, codecs=settings.codecs,
                                   cache_dir=settings.cache_dir)  # fmt: skip
                found = self._libs[key] = (compiled, GroupLibrary(compiled, self._comm))
        return found

    def _rooted(self, compiled: Compiled, lib: Library, root: int) -> Library:
        """The library for a broadcast, gather or scatter at ``root``: the ranks renumbered so that ``root`` is the
        schedule's root (rank r is rank ``(r - root + schedule's root) mod p`` of the library's communicator).

        Collective over the group (a communicator split): call it only after the ranks agreed on the call.
        """
        if compiled.root is None or compiled.root == root:
            return lib
        key = ("rooted", compiled.library, root)
        found = self._rotated.get(key)
        if found is None:
            order = (self._rank - root + compiled.root) % self._size
            comm = self._comm.Split(0, order)
            found = self._rotated[key] = type(lib)(compiled, comm)
        return found

    def _gloo_backend(self) -> Any:
        if self._gloo is None:
            self._gloo = dist.ProcessGroupGloo(
                dist.PrefixStore("collc/gloo", self._store), self._rank, self._size, self._timeout
            )
        return self._gloo

    def _gloo_step(self, method: str, args: tuple[Any, ...], describe: str, count: int = 0,
                   dtype: torch.dtype | None = None, why: str | None = None,
                   operation: int | None = None) -> Planned:  # fmt: skip
        """Run ``method`` of the inner gloo group; ``why`` (the first time) says why in a warning; ``operation``
        the operation the ranks compare (default: the method's)."""
        if why is not None:
            warn_once(f"{method}:{why}", f"collc: {why} run on the inner gloo group (collc has no schedule for it)")

        def run() -> None:
            getattr(self._gloo_backend(), method)(*args).wait()

        code = ops.dtype_code(dtype) if dtype is not None else 0
        if operation is None:
            operation = _GLOO_OPS.get(method, op_code("gloo"))
        return Planned((operation, ROUTE_GLOO, code, count, 0, 0, 0), run, describe)

    # ------------------------------------------------------------------ argument checks

    def _tensor(self, t: Any, what: str) -> torch.Tensor:
        problem = ops.check_tensor(t, what)
        if problem is not None:
            raise CollcError(f"collc: {problem}")
        return t

    def _compressed_dtype(self, compiled: Compiled, dtype: torch.dtype, what: str) -> None:
        name = dtype_name(dtype)
        if compiled.compressed and name not in CODEC_DTYPES:
            raise CollcError(
                f"collc: {what}: {name} tensors cannot be compressed by {', '.join(compiled.codecs)} "
                f"(the schedule {compiled.describe()}); collc codecs encode {' and '.join(CODEC_DTYPES)}"
            )

    def _single(self, tensors: Sequence[torch.Tensor], what: str) -> torch.Tensor:
        if len(tensors) != 1:
            raise CollcError(f"collc: {what} takes one tensor per process, got {len(tensors)}")
        return self._tensor(tensors[0], f"the tensor of {what}")

    # ------------------------------------------------------------------ steps

    def _all_reduce_step(self, t: torch.Tensor, op: Any) -> Step:
        def step() -> Planned:
            desc = f"all_reduce of {t.numel()} {dtype_name(t.dtype)} elements"
            kind = ops.reduce_kind(op)
            why = None
            if kind is None:
                why = f"all_reduce with {ops.op_name(op)}"
            elif (problem := _reduce_problem(t, kind)) is not None:
                why = f"all_reduce: {problem}"
            if why is not None:
                return self._gloo_step("allreduce", ([t], allreduce_opts(op)), desc, t.numel(), t.dtype, why)
            assert kind is not None
            if self._size == 1:
                return Planned((7, ROUTE_LOCAL, ops.dtype_code(t.dtype), t.numel(), 0, 0, 0),
                               lambda: _local_reduce(t, t, kind), desc)  # fmt: skip
            entry = self._library("allreduce", t)
            if entry is None:
                return self._gloo_step("allreduce", ([t], allreduce_opts(op)), desc, t.numel(), t.dtype)
            compiled, lib = entry
            self._compressed_dtype(compiled, t.dtype, desc)
            if compiled.compressed and kind.base != "sum":
                return self._gloo_step("allreduce", ([t], allreduce_opts(op)), desc, t.numel(), t.dtype,
                                       f"all_reduce {kind.name.upper()} with a compressed schedule")  # fmt: skip
            if compiled.mixed_orders is not None and t.is_floating_point() and kind.base in ("sum", "product"):
                return self._gloo_step("allreduce", ([t], allreduce_opts(op)), desc, t.numel(), t.dtype,
                                       f"all_reduce {kind.name.upper()} of {dtype_name(t.dtype)} tensors: every rank "
                                       f"must get the same bits, and {compiled.mixed_orders}")  # fmt: skip
            sig = (1, _route(t), ops.dtype_code(t.dtype), t.numel(), kind.code, 0, compiled.key)
            if isinstance(lib, DeviceLibrary):
                return Planned(sig, lambda: device.all_reduce(lib, t, kind, self._size), desc, compiled.describe())
            return Planned(sig, lambda: ops.all_reduce(lib, t, kind, self._size), desc, compiled.describe())

        return step

    def _reduce_scatter_step(self, out: torch.Tensor, inp: torch.Tensor, op: Any) -> Step:
        def step() -> Planned:
            n = out.numel()
            desc = f"reduce_scatter into {n} {dtype_name(out.dtype)} elements"
            _same_device(out, inp, desc)
            if inp.numel() != n * self._size or inp.dtype != out.dtype:
                raise CollcError(
                    f"collc: {desc}: the input has {inp.numel()} {dtype_name(inp.dtype)} elements; it must have "
                    f"{self._size} x {n} = {n * self._size} of the output's dtype"
                )
            kind = ops.reduce_kind(op)
            why = None
            if kind is None:
                why = f"reduce_scatter with {ops.op_name(op)}"
            elif (problem := _reduce_problem(out, kind)) is not None:
                why = f"reduce_scatter: {problem}"
            if self._size == 1 and why is None:
                assert kind is not None
                return Planned((7, ROUTE_LOCAL, ops.dtype_code(out.dtype), n, 0, 0, 0),
                               lambda: _local_reduce(out, inp, kind), desc)  # fmt: skip
            args = (out, inp, reduce_scatter_opts(op))
            if why is not None:
                return self._gloo_step("_reduce_scatter_base", args, desc, n, out.dtype, why)
            assert kind is not None
            entry = self._library("reduce_scatter", out)
            if entry is None:
                return self._gloo_step("_reduce_scatter_base", args, desc, n, out.dtype)
            compiled, lib = entry
            self._compressed_dtype(compiled, out.dtype, desc)
            if compiled.compressed and kind.base != "sum":
                return self._gloo_step("_reduce_scatter_base", args, desc, n, out.dtype,
                                       f"reduce_scatter {kind.name.upper()} with a compressed schedule")  # fmt: skip
            sig = (3, _route(out), ops.dtype_code(out.dtype), n, kind.code, 0, compiled.key)
            if isinstance(lib, DeviceLibrary):
                return Planned(sig, lambda: device.reduce_scatter_into(lib, out, inp, kind, self._size, self._rank),
                               desc, compiled.describe())  # fmt: skip
            return Planned(sig, lambda: ops.reduce_scatter_into(lib, out, inp, kind, self._size), desc,
                           compiled.describe())  # fmt: skip

        return step

    def _all_gather_step(self, out: torch.Tensor, inp: torch.Tensor) -> Step:
        def step() -> Planned:
            n = inp.numel()
            desc = f"all_gather of {n} {dtype_name(inp.dtype)} elements"
            _same_device(out, inp, desc)
            if out.numel() != n * self._size or out.dtype != inp.dtype:
                raise CollcError(
                    f"collc: {desc}: the output has {out.numel()} {dtype_name(out.dtype)} elements; it must have "
                    f"{self._size} x {n} = {n * self._size} of the input's dtype"
                )
            if self._size == 1:
                return Planned((7, ROUTE_LOCAL, ops.dtype_code(inp.dtype), n, 0, 0, 0),
                               lambda: ops.copy_into(out, inp), desc)  # fmt: skip
            args = (out, inp, allgather_opts())
            if inp.is_cuda and device.movement_dtype(inp) is None:
                return self._gloo_step("_allgather_base", args, desc, n, inp.dtype,
                                       f"all_gather of {inp.dtype} CUDA tensors not a multiple of 4 bytes")  # fmt: skip
            entry = self._library("allgather", inp)
            if entry is None:
                return self._gloo_step("_allgather_base", args, desc, n, inp.dtype)
            compiled, lib = entry
            self._compressed_dtype(compiled, inp.dtype, desc)
            sig = (2, _route(inp), ops.dtype_code(inp.dtype), n, 0, 0, compiled.key)
            if isinstance(lib, DeviceLibrary):
                return Planned(sig, lambda: device.all_gather_into(lib, out, inp, self._rank), desc,
                               compiled.describe())  # fmt: skip
            return Planned(sig, lambda: ops.all_gather_into(lib, out, inp, self._rank, compiled.compressed), desc,
                           compiled.describe())  # fmt: skip

        return step

    def _broadcast_step(self, t: torch.Tensor, root: int) -> Step:
        def step() -> Planned:
            desc = f"broadcast of {t.numel()} {dtype_name(t.dtype)} elements from rank {root}"
            if not 0 <= root < self._size:
                raise CollcError(f"collc: {desc}: the root must be a rank of the group (0..{self._size - 1})")
            if self._size == 1:
                return Planned((7, ROUTE_LOCAL, ops.dtype_code(t.dtype), t.numel(), 0, root, 0), lambda: None, desc)
            if t.is_cuda and device.movement_dtype(t) is None:
                return self._gloo_step("broadcast", ([t], broadcast_opts(root)), desc, t.numel(), t.dtype,
                                       f"broadcast of {t.dtype} CUDA tensors not a multiple of 4 bytes")  # fmt: skip
            entry = self._library("broadcast", t)
            if entry is None:
                return self._gloo_step("broadcast", ([t], broadcast_opts(root)), desc, t.numel(), t.dtype)
            compiled, lib = entry
            self._compressed_dtype(compiled, t.dtype, desc)
            sig = (4, _route(t), ops.dtype_code(t.dtype), t.numel(), 0, root, compiled.key)
            if isinstance(lib, DeviceLibrary):
                return Planned(sig, lambda: device.broadcast(self._rooted(compiled, lib, root), t), desc,
                               compiled.describe())  # fmt: skip
            schedule_root = compiled.root if compiled.root is not None else root
            return Planned(
                sig, lambda: ops.broadcast(self._rooted(compiled, lib, root), t, schedule_root, compiled.compressed),
                desc, compiled.describe(),
            )  # fmt: skip

        return step

    # ------------------------------------------------------------------ torch's ProcessGroup API

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        step = self._guard(lambda: self._all_reduce_step(self._single(tensors, "all_reduce"), op))
        return self._submit("all_reduce", [step], tensors, opts)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        steps = [self._guard(lambda t=t: self._all_reduce_step(self._tensor(t, "a tensor of all_reduce"), op))
                 for t in tensors]  # fmt: skip
        return self._submit("all_reduce", steps, tensors, opts)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        return self._submit("all_gather", [self._guard(lambda: self._all_gather_step(
            self._tensor(output, "the output of all_gather"), self._tensor(input, "the input of all_gather")))],
            output, opts)  # fmt: skip

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                    opts: Any = None) -> Any:  # fmt: skip
        steps = [self._guard(lambda o=o, i=i: self._all_gather_step(
            self._tensor(o, "an output of all_gather"), self._tensor(i, "an input of all_gather")))
            for o, i in zip(outputs, inputs, strict=True)]  # fmt: skip
        return self._submit("all_gather", steps, outputs, opts)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def _rank_list(
        self, lists: list[list[torch.Tensor]], like: torch.Tensor, name: str, role: str, other: str
    ) -> list[torch.Tensor]:
        """The one list of a tensor per rank, each with ``like``'s elements and dtype; CollcError otherwise."""
        if len(lists) != 1 or len(lists[0]) != self._size:
            raise CollcError(f"collc: {name} needs one {role} list of {self._size} tensors")
        tensors = [self._tensor(t, f"an {role} of {name}") for t in lists[0]]
        if any(t.numel() != like.numel() or t.dtype != like.dtype for t in tensors):
            raise CollcError(
                f"collc: {name}: every {role} tensor must have the {other}'s {like.numel()} elements "
                f"and dtype {dtype_name(like.dtype)}"
            )
        return tensors

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        return self._submit("reduce_scatter", [self._guard(lambda: self._reduce_scatter_step(
            self._tensor(output, "the output of reduce_scatter"), self._tensor(input, "the input of reduce_scatter"),
            op))], output, opts)  # fmt: skip

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> Any:  # fmt: skip
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        steps = [self._guard(lambda o=o, i=i: self._reduce_scatter_step(
            self._tensor(o, "an output of reduce_scatter"), self._tensor(i, "an input of reduce_scatter"), op))
            for o, i in zip(outputs, inputs, strict=True)]  # fmt: skip
        return self._submit("reduce_scatter", steps, outputs, opts)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        root = int(opts.rootRank) if opts is not None else 0
        return self._submit("broadcast", [self._guard(lambda: self._broadcast_step(
            self._single(tensors, "broadcast"), root))], tensors, opts)  # fmt: skip

    def _guard(self, build: Callable[[], Step]) -> Step:
        """A step built when it runs, so that an argument error reaches every rank through the agreement."""

        def step() -> Planned:
            return build()()

        return step

    # ops without schedules: gloo, with a one-time warning

    def _on_gloo(self, name: str, method: str, *args: Any) -> Any:
        def step() -> Planned:
            return self._gloo_step(method, args, name, why=name)

        return self._submit("gloo", [step], None)

    def reduce(self, tensors: Any, opts: Any = None) -> Any:
        return self._on_gloo("reduce", "reduce", tensors, opts)

    def send(self, tensors: Any, dst: int, tag: int) -> Any:
        return self._on_gloo("send", "send", tensors, dst, tag)

    def recv(self, tensors: Any, src: int, tag: int) -> Any:
        return self._on_gloo("recv", "recv", tensors, src, tag)

    def shutdown(self) -> None:
        """Stop the group's thread (after the jobs already queued), its inner gloo group and its communicators.

        torch calls it from ``destroy_process_group``: everything goes while the store and MPI are still
        there, not at interpreter exit in whatever order objects happen to be freed.
        """
        if not self._thread.is_alive():
            return
        self._queue.put(None)
        self._thread.join()
        if self._gloo is not None:
            self._gloo.shutdown()
            self._gloo = None
        for lib in self._rotated.values():
            lib.comm_object.Free()
        self._libs.clear()
        self._rotated.clear()
        self._comm.Free()


Library = GroupLibrary | DeviceLibrary


def _order_hint(operations: np.ndarray) -> str:
    """The hint of a disagreement on the operation: uneven lists or split sizes on some ranks only show as one."""
    names = {OPERATIONS[v - 1] for v in operations.tolist() if 0 < v <= len(OPERATIONS)}
    if names == {"all_to_all", "all_to_all_v"}:
        return "some ranks passed split sizes (or lists of tensors) and others none: every rank must pass them, or none"
    for plain in ("all_gather", "reduce_scatter"):
        if names == {plain, f"{plain}_v"}:
            return (
                f"some ranks' {plain} lists hold tensors of one size and others' of several: every rank's list "
                "must hold the blocks of the same sizes"
            )
    return "every rank must issue the same collectives in the same order"


def _route(t: torch.Tensor) -> int:
    return ROUTE_DEVICE if t.is_cuda else ROUTE_COLLC


def _reduce_problem(t: torch.Tensor, kind: ops.ReduceKind) -> str | None:
    return device.reduce_problem(t.dtype, kind) if t.is_cuda else ops.reduce_problem(t.dtype, kind)


def _arch(where: torch.device) -> str:
    """The nvcc ``-arch`` of a CUDA device (``sm_90`` for an H100)."""
    major, minor = torch.cuda.get_device_capability(where)
    return f"sm_{major}{minor}"


def _same_device(out: torch.Tensor, inp: torch.Tensor, desc: str) -> None:
    if out.device != inp.device:
        raise CollcError(f"collc: {desc}: the input is on {inp.device} and the output on {out.device}")


def _local_reduce(out: torch.Tensor, inp: torch.Tensor, kind: ops.ReduceKind) -> None:
    ops.copy_into(out, inp)
    if kind.name == "premul_sum":
        out.mul_(kind.factor)
