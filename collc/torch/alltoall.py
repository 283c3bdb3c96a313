"""All-to-all, and all_gather and reduce_scatter of uneven lists (`CountedCollectives`, a base of `ProcessGroupCollc`).

* ``all_to_all_single`` (``alltoall_base``) without split sizes runs the
  configured alltoall schedule (``configure(alltoall=...)``) on p equal blocks
  of the input: the library's ``collc_<algorithm>_alltoall_f``, bytes moved
  unchanged (any dtype).
* With split sizes (rows of the first dimension, as torch counts them; a list
  left empty means equal splits) it runs the same schedule with counts given at
  run time: ``collc_<algorithm>_alltoallv_f``, whose blocks are cut by the
  counts (runtime/collc_vcoll.h).  ``all_to_all`` (lists of tensors) does the
  same on the inputs concatenated, one block per tensor (a copy in and out).
* ``all_gather`` whose output list holds tensors of different sizes (rank r's
  input has the size of the list's tensor r) runs the allgather schedule with
  counts (``collc_<algorithm>_allgatherv_f``); ``reduce_scatter`` whose input
  list does (rank r's output has the size of tensor r) runs the reduce_scatter
  schedule with counts (``collc_<algorithm>_reduce_scatter_f``).  Lists of one
  size are the plain collectives.

The counts of these calls are compared after the signature (operation, route,
dtype, ...): the ranks exchange them in one more small allgather (`_agree_counts`),
so that a rank that sends b elements to a rank expecting another number, or
lists that differ between ranks, end in an error on every rank naming both
ranks, before any data moves.  Without the agreement check the library gathers
the send counts of an all-to-all itself, and a receive count that differs ends
the job.

CUDA tensors, schedules with chunk weights of their own or compression points
(counts given at run time cut the chunks themselves), and ``"gloo"`` settings go
to the inner gloo group, with a warning where it was not asked for (gloo takes
no all_gather or all_to_all lists of tensors of different sizes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
import torch.distributed as dist

from collc.torch import config, ops
from collc.torch.gloo_options import allgather_opts, alltoall_opts, reduce_scatter_opts
from collc.torch.plan import ROUTE_COLLC, ROUTE_LOCAL, CollcError, Planned, Step, dtype_name, op_code

if TYPE_CHECKING:
    from collc.torch.library import DeviceLibrary, GroupLibrary
    from collc.torch.schedules import Compiled

__all__ = ["CountedCollectives"]

_SHOWN = 4
"""How many disagreeing pairs of ranks an error lists."""


class CountedCollectives:
    """torch's ``alltoall``, ``alltoall_base`` and the ``allgather`` and ``reduce_scatter`` of tensor lists, for
    `ProcessGroupCollc`."""

    _rank: int
    _size: int
    _settings: config.Settings
    _comm: Any

    if TYPE_CHECKING:  # provided by ProcessGroupCollc

        def _library(
            self, collective: str, t: torch.Tensor | None
        ) -> tuple[Compiled, GroupLibrary | DeviceLibrary] | None: ...

        def _gloo_step(self, method: str, args: tuple[Any, ...], describe: str, count: int = 0,
                       dtype: torch.dtype | None = None, why: str | None = None,
                       operation: int | None = None) -> Planned: ...  # fmt: skip

        def _compressed_dtype(self, compiled: Compiled, dtype: torch.dtype, what: str) -> None: ...

        def _tensor(self, t: Any, what: str) -> torch.Tensor: ...

        def _single(self, tensors: Sequence[torch.Tensor], what: str) -> torch.Tensor: ...

        def _submit(self, name: str, steps: list[Step], result: Any = None, opts: Any = None) -> Any: ...

        def _guard(self, build: Callable[[], Step]) -> Step: ...

        def _all_gather_step(self, out: torch.Tensor, inp: torch.Tensor) -> Step: ...

        def _reduce_scatter_step(self, out: torch.Tensor, inp: torch.Tensor, op: Any) -> Step: ...

    # ------------------------------------------------------------------ torch's ProcessGroup API

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: Sequence[int],
                      input_split_sizes: Sequence[int], opts: Any = None) -> Any:  # fmt: skip
        def build() -> Step:
            out = self._tensor(output, "the output of all_to_all_single")
            inp = self._tensor(input, "the input of all_to_all_single")
            out_splits = [int(s) for s in output_split_sizes or ()]
            in_splits = [int(s) for s in input_split_sizes or ()]
            return partial(self._single_a2a, out, inp, out_splits, in_splits)

        return self._submit("all_to_all", [self._guard(build)], [output], opts)

    all_to_all_single = alltoall_base

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        def build() -> Step:
            outs = self._one_per_rank(outputs, "all_to_all", "output")
            ins = self._one_per_rank(inputs, "all_to_all", "input")
            return partial(self._list_a2a, outs, ins, list(outputs), list(inputs))

        return self._submit("all_to_all", [self._guard(build)], outputs, opts)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        def build() -> Step:
            inp = self._single(inputs, "all_gather")
            if len(outputs) != 1:
                raise CollcError(f"collc: all_gather needs one output list of {self._size} tensors")
            outs = self._one_per_rank(outputs[0], "all_gather", "output", like=inp)
            sizes = [t.numel() for t in outs]
            if outs[self._rank].numel() != inp.numel():
                raise CollcError(
                    f"collc: all_gather: output tensor {self._rank} (this rank's block) has {sizes[self._rank]} "
                    f"elements and the input {inp.numel()}: they must be equal"
                )
            if len(set(sizes)) > 1:
                return partial(self._uneven_all_gather, outs, inp, sizes, outputs)
            flat = torch.empty(inp.numel() * self._size, dtype=inp.dtype, device=inp.device)
            return _copied_out(self._all_gather_step(flat, inp), flat, outs)

        return self._submit("all_gather", [self._guard(build)], outputs, opts)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM

        def build() -> Step:
            out = self._single(outputs, "reduce_scatter")
            if len(inputs) != 1:
                raise CollcError(f"collc: reduce_scatter needs one input list of {self._size} tensors")
            parts = self._one_per_rank(inputs[0], "reduce_scatter", "input", like=out)
            sizes = [t.numel() for t in parts]
            if sizes[self._rank] != out.numel():
                raise CollcError(
                    f"collc: reduce_scatter: input tensor {self._rank} (this rank's block) has {sizes[self._rank]} "
                    f"elements and the output {out.numel()}: they must be equal"
                )
            flat = torch.cat([t.reshape(-1) for t in parts])
            if len(set(sizes)) > 1:
                return partial(self._uneven_reduce_scatter, out, flat, sizes, op, (outputs, inputs))
            return self._reduce_scatter_step(out, flat, op)

        return self._submit("reduce_scatter", [self._guard(build)], outputs, opts)

    # ------------------------------------------------------------------ argument checks

    def _one_per_rank(
        self, tensors: Sequence[torch.Tensor], name: str, role: str, like: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """A list of one tensor per rank, of one dtype and device (``like``'s, when given); CollcError otherwise."""
        if len(tensors) != self._size:
            raise CollcError(f"collc: {name} needs {self._size} {role} tensors, one per rank; got {len(tensors)}")
        checked = [self._tensor(t, f"an {role} of {name}") for t in tensors]
        first = like if like is not None else checked[0]
        other = ("the output" if role == "input" else "the input") if like is not None else f"{role} tensor 0"
        for k, t in enumerate(checked):
            if t.dtype != first.dtype or t.device != first.device:
                raise CollcError(
                    f"collc: {name}: {role} tensor {k} is {dtype_name(t.dtype)} on {t.device}, {other} "
                    f"{dtype_name(first.dtype)} on {first.device}: every tensor of the call must have one dtype "
                    "and device"
                )
        return checked

    # ------------------------------------------------------------------ steps

    def _single_a2a(self, out: torch.Tensor, inp: torch.Tensor, out_splits: list[int], in_splits: list[int]) -> Planned:
        p = self._size
        split = out_splits or in_splits
        desc = f"all_to_all_single of {inp.numel()} {dtype_name(inp.dtype)} elements"
        if split:
            desc += " with split sizes"
        if out.dtype != inp.dtype or out.device != inp.device:
            raise CollcError(
                f"collc: {desc}: the input is {dtype_name(inp.dtype)} on {inp.device}, the output "
                f"{dtype_name(out.dtype)} on {out.device}: one dtype and device"
            )
        send = _split_counts(in_splits, inp, p, "input", desc)
        recv = _split_counts(out_splits, out, p, "output", desc)
        gloo_args = (out, inp, out_splits, in_splits, alltoall_opts())
        if split:
            return self._counted_a2a(out, inp, send, recv, desc, "alltoall_base", gloo_args, None)
        n = inp.numel()
        code = ops.dtype_code(inp.dtype)
        if out.numel() != n:
            raise CollcError(f"collc: {desc}: the output has {out.numel()} elements; without split sizes it must "
                             f"have the input's {n}")  # fmt: skip
        if p == 1:
            return Planned((op_code("trivial"), ROUTE_LOCAL, code, n, 0, 0, 0), lambda: ops.copy_into(out, inp), desc)
        operation = op_code("all_to_all")
        if inp.is_cuda:
            return self._gloo_step("alltoall_base", gloo_args, desc, n, inp.dtype, "all_to_all of CUDA tensors",
                                   operation)  # fmt: skip
        entry = self._library("alltoall", inp)
        if entry is None:
            return self._gloo_step("alltoall_base", gloo_args, desc, n, inp.dtype, operation=operation)
        compiled, lib = entry
        self._compressed_dtype(compiled, inp.dtype, desc)
        sig = (operation, ROUTE_COLLC, code, n, 0, 0, compiled.key)
        run = partial(ops.all_to_all_into, cast("GroupLibrary", lib), out, inp, p, compiled.compressed)
        return Planned(sig, run, desc, compiled.describe())

    def _list_a2a(self, outs: list[torch.Tensor], ins: list[torch.Tensor], outputs: list[torch.Tensor],
                  inputs: list[torch.Tensor]) -> Planned:  # fmt: skip
        send, recv = [t.numel() for t in ins], [t.numel() for t in outs]
        like = ins[0]
        desc = f"all_to_all of {sum(send)} {dtype_name(like.dtype)} elements in {self._size} tensors"
        if outs[0].dtype != like.dtype or outs[0].device != like.device:
            raise CollcError(
                f"collc: {desc}: the inputs are {dtype_name(like.dtype)} on {like.device}, the outputs "
                f"{dtype_name(outs[0].dtype)} on {outs[0].device}: one dtype and device"
            )
        flat_in = torch.cat([t.reshape(-1) for t in ins])
        flat_out = torch.empty(sum(recv), dtype=like.dtype, device=like.device)
        return self._counted_a2a(flat_out, flat_in, send, recv, desc, "alltoall", (outputs, inputs, alltoall_opts()),
                                 partial(_scatter_flat, flat_out, outs))  # fmt: skip

    def _counted_a2a(self, out: torch.Tensor, inp: torch.Tensor, send: list[int], recv: list[int], desc: str,
                     method: str, gloo_args: tuple[Any, ...], after: Callable[[], None] | None) -> Planned:  # fmt: skip
        """An all-to-all with counts given at run time: ``send[d]`` elements of ``inp`` to rank d, ``recv[s]``
        elements from rank s into ``out`` (then ``after``, which copies ``out`` where it belongs)."""
        p = self._size
        code = ops.dtype_code(inp.dtype)
        operation = op_code("all_to_all_v")
        if p == 1:
            if send[0] != recv[0]:
                raise CollcError(f"collc: {desc}: this rank sends itself {send[0]} elements and expects {recv[0]}")
            return Planned((op_code("trivial"), ROUTE_LOCAL, code, send[0], 0, 0, 0),
                           _then(lambda: ops.copy_into(out, inp), after), desc)  # fmt: skip
        found = self._counted_entry("alltoall", "all_to_all", inp, desc, method, gloo_args, operation)
        if isinstance(found, Planned):
            planned = found
        else:
            compiled, lib = found
            sig = (operation, ROUTE_COLLC, code, 0, 0, 0, compiled.key)
            run = _then(lambda: ops.all_to_all_v(lib, out, inp, send, recv), after)
            planned = Planned(sig, run, desc, compiled.describe())
        return replace(planned, counts=(*send, *recv), counts_problem=partial(_a2a_problem, desc, p),
                       label="all_to_all_v")  # fmt: skip

    def _uneven_all_gather(self, outs: list[torch.Tensor], inp: torch.Tensor, sizes: list[int],
                           outputs: list[list[torch.Tensor]]) -> Planned:  # fmt: skip
        total = sum(sizes)
        desc = f"all_gather of {inp.numel()} {dtype_name(inp.dtype)} elements (uneven blocks, {total} in all)"
        operation = op_code("all_gather_v")
        found = self._counted_entry("allgather", "all_gather", inp, desc, "allgather",
                                    (outputs, [inp], allgather_opts()), operation, total)  # fmt: skip
        if isinstance(found, Planned):
            planned = found
        else:
            compiled, lib = found
            flat = torch.empty(total, dtype=inp.dtype, device=inp.device)
            sig = (operation, ROUTE_COLLC, ops.dtype_code(inp.dtype), total, 0, 0, compiled.key)
            gather = partial(ops.all_gather_v, lib, flat, inp, sizes, self._rank)
            run = _then(gather, partial(_scatter_flat, flat, outs))
            planned = Planned(sig, run, desc, compiled.describe())
        return replace(planned, counts=tuple(sizes), counts_problem=partial(_list_problem, desc, "all_gather"),
                       label="all_gather_v")  # fmt: skip

    def _uneven_reduce_scatter(self, out: torch.Tensor, flat: torch.Tensor, sizes: list[int], op: Any,
                               gloo_lists: tuple[Any, Any]) -> Planned:  # fmt: skip
        total = sum(sizes)
        desc = f"reduce_scatter into {out.numel()} {dtype_name(out.dtype)} elements (uneven blocks, {total} in all)"
        operation = op_code("reduce_scatter_v")
        code = ops.dtype_code(out.dtype)
        gloo_args = (*gloo_lists, reduce_scatter_opts(op))
        kind = ops.reduce_kind(op)
        why = None
        if kind is None:
            why = f"reduce_scatter with {ops.op_name(op)}"
        elif out.is_cuda:
            why = "reduce_scatter of CUDA tensors of uneven sizes"
        elif (problem := ops.reduce_problem(out.dtype, kind)) is not None:
            why = f"reduce_scatter: {problem}"
        found: Planned | tuple[Compiled, GroupLibrary]
        if why is not None:
            found = self._gloo_step("reduce_scatter", gloo_args, desc, total, out.dtype, why, operation)
        else:
            found = self._counted_entry("reduce_scatter", "reduce_scatter", out, desc, "reduce_scatter", gloo_args,
                                        operation, total)  # fmt: skip
        if isinstance(found, Planned):
            planned = found
        else:
            assert kind is not None
            compiled, lib = found
            sig = (operation, ROUTE_COLLC, code, total, kind.code, 0, compiled.key)
            run = partial(ops.reduce_scatter_v, lib, out, flat, sizes, kind, self._size)
            planned = Planned(sig, run, desc, compiled.describe())
        return replace(planned, counts=tuple(sizes), counts_problem=partial(_list_problem, desc, "reduce_scatter"),
                       label="reduce_scatter_v")  # fmt: skip

    def _counted_entry(self, collective: str, name: str, t: torch.Tensor, desc: str, method: str,
                       gloo_args: tuple[Any, ...], operation: int,
                       count: int = 0) -> Planned | tuple[Compiled, GroupLibrary]:  # fmt: skip
        """The schedule and library of ``collective`` where they run the call with counts given at run time; else
        the step that runs it (torch's ``name``) on gloo, with a warning saying why unless the setting asked
        for gloo."""
        if t.is_cuda:
            why = f"{name} of CUDA tensors with counts given at run time"
            return self._gloo_step(method, gloo_args, desc, count, t.dtype, why, operation)
        entry = self._library(collective, t)
        if entry is None:
            return self._gloo_step(method, gloo_args, desc, count, t.dtype, operation=operation)
        compiled, lib = entry
        if not compiled.counts:
            fixed = "chunk weights" if compiled.weighted else "compression points"
            why = f"{name} with counts given at run time on {compiled.algorithm} (its {fixed} fix the chunks' sizes)"
            return self._gloo_step(method, gloo_args, desc, count, t.dtype, why, operation)
        lib = cast("GroupLibrary", lib)
        if lib.counted is None:
            raise CollcError(f"collc: {desc}: {compiled.library} has no {lib.counted_name}")
        return compiled, lib

    def _agree_counts(self, planned: Planned) -> None:
        """Every rank's counts of the call, compared (collective: every rank of the group calls it for the same
        operation, whose counts have one length on every rank); CollcError naming the disagreement."""
        assert planned.counts is not None and planned.counts_problem is not None
        mine = np.asarray(planned.counts, dtype=np.int64)
        table = np.empty((self._size, mine.size), dtype=np.int64)
        self._comm.Allgather(mine, table)
        problem = planned.counts_problem(table)
        if problem is not None:
            raise CollcError(problem)


def _split_counts(splits: list[int], t: torch.Tensor, p: int, role: str, desc: str) -> list[int]:
    """The elements of each rank's block of ``t`` for torch's split sizes (rows of the first dimension; none:
    p equal blocks)."""
    rows = t.shape[0] if t.dim() else 1
    row = math.prod(t.shape[1:]) if t.dim() else 1
    if not splits:
        if rows % p:
            raise CollcError(f"collc: {desc}: the {role}'s first dimension ({rows}) is not a multiple of the group "
                             f"size {p}: pass its split sizes")  # fmt: skip
        return [rows // p * row] * p
    if len(splits) != p or min(splits) < 0:
        raise CollcError(f"collc: {desc}: {role} split sizes {splits}: one per rank ({p}), none negative")
    if sum(splits) != rows:
        raise CollcError(f"collc: {desc}: the {role} split sizes {splits} add up to {sum(splits)}, and the "
                         f"{role}'s first dimension is {rows}")  # fmt: skip
    return [s * row for s in splits]


def _elements(n: int) -> str:
    return f"{n} element{'' if n == 1 else 's'}"


def _pairs(bad: list[str]) -> str:
    more = f"; and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else ""
    return "; ".join(bad[:_SHOWN]) + more


def _a2a_problem(desc: str, p: int, table: np.ndarray) -> str | None:
    """Row r of ``table``: what rank r sends each rank, then what it expects from each (elements)."""
    bad = [f"rank {a} sends {_elements(table[a, b])} to rank {b}, which expects {table[b, p + a]}"
           for a in range(p) for b in range(p) if table[a, b] != table[b, p + a]]  # fmt: skip
    if not bad:
        return None
    return (f"collc: {desc}: the ranks' split sizes disagree: {_pairs(bad)}; what a rank expects from each rank "
            "(its output split sizes) must be what that rank sends it")  # fmt: skip


def _list_problem(desc: str, name: str, table: np.ndarray) -> str | None:
    """Row r of ``table``: the sizes of rank r's list; tensor a of rank a's list is its own block."""
    p = table.shape[0]
    verb = "sends" if name == "all_gather" else "receives"
    bad = [f"rank {a} {verb} {_elements(table[a, a])}, and rank {b}'s list has {table[b, a]} for it"
           for a in range(p) for b in range(p) if table[b, a] != table[a, a]]  # fmt: skip
    if not bad:
        return None
    own = "input" if name == "all_gather" else "output"
    return (f"collc: {desc}: the ranks' {name} lists disagree: {_pairs(bad)}; tensor r of every rank's list must "
            f"have the size of rank r's {own}")  # fmt: skip


def _scatter_flat(flat: torch.Tensor, outs: list[torch.Tensor]) -> None:
    at = 0
    for t in outs:
        t.view(-1).copy_(flat[at : at + t.numel()])
        at += t.numel()


def _then(first: Callable[[], None], after: Callable[[], None] | None) -> Callable[[], None]:
    if after is None:
        return first

    def both() -> None:
        first()
        after()

    return both


def _copied_out(inner: Step, flat: torch.Tensor, outs: list[torch.Tensor]) -> Step:
    """``inner`` (an all_gather into ``flat``), then ``flat``'s blocks copied into ``outs``."""

    def step() -> Planned:
        planned = inner()
        return replace(planned, run=_then(planned.run, lambda: _scatter_flat(flat, outs)))

    return step
