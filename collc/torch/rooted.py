"""Gather, scatter and barrier of the collc group (`RootedCollectives`, a base of `ProcessGroupCollc`).

* ``gather`` and ``scatter`` run the configured gather and scatter schedules
  (``configure(gather=..., scatter=...)``), compiled for the schedule's
  default root; another root runs the same library on the group's ranks
  renumbered so that the caller's root is the schedule's (as broadcasts do),
  the root's blocks permuted to match.  Chunk c of such a schedule is rank
  ``c // k``'s block (k chunks a rank); the library moves bytes, so any dtype
  goes (a compressed schedule: the dtypes its codecs encode).
* ``barrier`` runs the configured barrier schedule (an allgather of one flag
  per rank): no rank leaves before every rank has come.

Every rank must pass the same element count and dtype (the agreement check
says which rank differs), the root one tensor per rank of that count and
dtype; anything else is a `CollcError` on every rank.  CUDA tensors and
``"gloo"`` settings go to the inner gloo group.  torch.distributed has no scan
or exscan, so collc's scan schedules serve nothing here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from collc.torch import config, ops
from collc.torch.plan import ROUTE_COLLC, ROUTE_LOCAL, CollcError, Planned, Step, dtype_name, op_code

if TYPE_CHECKING:
    from collc.torch.library import DeviceLibrary, GroupLibrary
    from collc.torch.schedules import Compiled

__all__ = ["RootedCollectives"]


class RootedCollectives:
    """torch's ``gather``, ``scatter`` and ``barrier`` on collc schedules, for `ProcessGroupCollc`."""

    _rank: int
    _size: int
    _settings: config.Settings

    if TYPE_CHECKING:  # provided by ProcessGroupCollc

        def _library(
            self, collective: str, t: torch.Tensor | None
        ) -> tuple[Compiled, GroupLibrary | DeviceLibrary] | None: ...

        def _rooted(
            self, compiled: Compiled, lib: GroupLibrary | DeviceLibrary, root: int
        ) -> GroupLibrary | DeviceLibrary: ...

        def _gloo_step(self, method: str, args: tuple[Any, ...], describe: str, count: int = 0,
                       dtype: torch.dtype | None = None, why: str | None = None) -> Planned: ...  # fmt: skip

        def _compressed_dtype(self, compiled: Compiled, dtype: torch.dtype, what: str) -> None: ...

        def _single(self, tensors: Sequence[torch.Tensor], what: str) -> torch.Tensor: ...

        def _rank_list(
            self, lists: list[list[torch.Tensor]], like: torch.Tensor, name: str, role: str, other: str
        ) -> list[torch.Tensor]: ...

        def _submit(self, name: str, steps: list[Step], result: Any = None, opts: Any = None) -> Any: ...

        def _guard(self, build: Callable[[], Step]) -> Step: ...

    # ------------------------------------------------------------------ torch's ProcessGroup API

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        root = int(opts.rootRank) if opts is not None else 0

        def build() -> Step:
            inp = self._single(inputs, "gather")
            outs = self._rank_list(outputs, inp, "gather", "output", "input") if self._rank == root else None
            return self._gather_step(outs, inp, root)

        return self._submit("gather", [self._guard(build)], outputs, opts)

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        root = int(opts.rootRank) if opts is not None else 0

        def build() -> Step:
            out = self._single(outputs, "scatter")
            ins = self._rank_list(inputs, out, "scatter", "input", "output") if self._rank == root else None
            return self._scatter_step(ins, out, root)

        return self._submit("scatter", [self._guard(build)], outputs, opts)

    def barrier(self, opts: Any = None) -> Any:
        return self._submit("barrier", [self._barrier_step], None, opts)

    # ------------------------------------------------------------------ steps

    def _check_root(self, root: int, desc: str) -> None:
        if not 0 <= root < self._size:
            raise CollcError(f"collc: {desc}: the root must be a rank of the group (0..{self._size - 1})")

    def _same_device(self, tensors: Sequence[torch.Tensor], like: torch.Tensor, desc: str) -> None:
        for t in tensors:
            if t.device != like.device:
                raise CollcError(f"collc: {desc}: the tensors are on {like.device} and {t.device}: one device")

    def _gather_step(self, outs: list[torch.Tensor] | None, inp: torch.Tensor, root: int) -> Step:
        def step() -> Planned:
            n = inp.numel()
            desc = f"gather of {n} {dtype_name(inp.dtype)} elements to rank {root}"
            self._check_root(root, desc)
            self._same_device(outs or [], inp, desc)
            code = ops.dtype_code(inp.dtype)
            if self._size == 1:
                assert outs is not None
                return Planned((op_code("trivial"), ROUTE_LOCAL, code, n, 0, root, 0),
                               lambda: _copy(outs[0], inp), desc)  # fmt: skip
            args = ([outs] if outs is not None else [], [inp], _gather_opts(root))
            if inp.is_cuda:
                return self._gloo_step("gather", args, desc, n, inp.dtype, "gather of CUDA tensors")
            entry = self._library("gather", inp)
            if entry is None:
                return self._gloo_step("gather", args, desc, n, inp.dtype)
            compiled, lib = entry
            self._compressed_dtype(compiled, inp.dtype, desc)
            sig = (op_code("gather"), ROUTE_COLLC, code, n, 0, root, compiled.key)
            home, shift = self._home(compiled, root)

            def run() -> None:
                rooted = self._rooted(compiled, lib, root)
                ops.gather_into(rooted, outs, inp, home, shift, compiled.compressed)  # type: ignore[arg-type]

            return Planned(sig, run, desc, compiled.describe())

        return step

    def _scatter_step(self, ins: list[torch.Tensor] | None, out: torch.Tensor, root: int) -> Step:
        def step() -> Planned:
            n = out.numel()
            desc = f"scatter of {n} {dtype_name(out.dtype)} elements from rank {root}"
            self._check_root(root, desc)
            self._same_device(ins or [], out, desc)
            code = ops.dtype_code(out.dtype)
            if self._size == 1:
                assert ins is not None
                return Planned((op_code("trivial"), ROUTE_LOCAL, code, n, 0, root, 0),
                               lambda: _copy(out, ins[0]), desc)  # fmt: skip
            args = ([out], [ins] if ins is not None else [], _scatter_opts(root))
            if out.is_cuda:
                return self._gloo_step("scatter", args, desc, n, out.dtype, "scatter of CUDA tensors")
            entry = self._library("scatter", out)
            if entry is None:
                return self._gloo_step("scatter", args, desc, n, out.dtype)
            compiled, lib = entry
            self._compressed_dtype(compiled, out.dtype, desc)
            sig = (op_code("scatter"), ROUTE_COLLC, code, n, 0, root, compiled.key)
            home, shift = self._home(compiled, root)

            def run() -> None:
                rooted = self._rooted(compiled, lib, root)
                ops.scatter_from(rooted, ins, out, home, shift, compiled.compressed)  # type: ignore[arg-type]

            return Planned(sig, run, desc, compiled.describe())

        return step

    def _home(self, compiled: Compiled, root: int) -> tuple[int, int]:
        """The schedule's root, and the shift of the blocks between the caller's ranks and the library's."""
        if compiled.root is None:
            raise CollcError(f"collc: {compiled.describe()} has no root: it cannot serve {compiled.collective}")
        return compiled.root, (compiled.root - root) % self._size

    def _barrier_step(self) -> Planned:
        if self._size == 1:
            return Planned((op_code("barrier"), ROUTE_LOCAL, 0, 0, 0, 0, 0), lambda: None, "barrier")
        entry = self._library("barrier", None)
        if entry is None:
            return self._gloo_step("barrier", (_barrier_opts(),), "barrier")
        compiled, lib = entry
        sig = (op_code("barrier"), ROUTE_COLLC, 0, 0, 0, 0, compiled.key)
        return Planned(sig, lib.barrier, "barrier", compiled.describe())  # type: ignore[union-attr]


def _copy(out: torch.Tensor, inp: torch.Tensor) -> None:
    if out.data_ptr() != inp.data_ptr():
        out.view(-1).copy_(inp.view(-1))


def _gather_opts(root: int) -> Any:
    from torch._C._distributed_c10d import GatherOptions

    opts = GatherOptions()
    opts.rootRank = root
    return opts


def _scatter_opts(root: int) -> Any:
    from torch._C._distributed_c10d import ScatterOptions

    opts = ScatterOptions()
    opts.rootRank = root
    return opts


def _barrier_opts() -> Any:
    from torch._C._distributed_c10d import BarrierOptions

    return BarrierOptions()
