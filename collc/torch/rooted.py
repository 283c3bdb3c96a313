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
from collc.torch.gloo_options import barrier_opts, gather_opts, scatter_opts
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
            return self._rooted_step("gather", outs, inp, root)

        return self._submit("gather", [self._guard(build)], outputs, opts)

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        root = int(opts.rootRank) if opts is not None else 0

        def build() -> Step:
            out = self._single(outputs, "scatter")
            ins = self._rank_list(inputs, out, "scatter", "input", "output") if self._rank == root else None
            return self._rooted_step("scatter", ins, out, root)

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

    def _rooted_step(self, kind: str, blocks: list[torch.Tensor] | None, own: torch.Tensor, root: int) -> Step:
        """A gather (``own`` this rank's input, ``blocks`` the root's outputs) or a scatter (``own`` this rank's
        output, ``blocks`` the root's inputs)."""
        gather = kind == "gather"

        def step() -> Planned:
            n = own.numel()
            desc = f"{kind} of {n} {dtype_name(own.dtype)} elements {'to' if gather else 'from'} rank {root}"
            self._check_root(root, desc)
            self._same_device(blocks or [], own, desc)
            code = ops.dtype_code(own.dtype)
            if self._size == 1:
                assert blocks is not None
                dst, src = (blocks[0], own) if gather else (own, blocks[0])
                return Planned(
                    (op_code("trivial"), ROUTE_LOCAL, code, n, 0, root, 0), lambda: ops.copy_into(dst, src), desc
                )
            listed = [blocks] if blocks is not None else []
            args = (listed, [own], gather_opts(root)) if gather else ([own], listed, scatter_opts(root))
            if own.is_cuda:
                return self._gloo_step(kind, args, desc, n, own.dtype, f"{kind} of CUDA tensors")
            entry = self._library(kind, own)
            if entry is None:
                return self._gloo_step(kind, args, desc, n, own.dtype)
            compiled, lib = entry
            self._compressed_dtype(compiled, own.dtype, desc)
            sig = (op_code(kind), ROUTE_COLLC, code, n, 0, root, compiled.key)
            home, shift = self._home(compiled, root)
            move = ops.gather_into if gather else ops.scatter_from

            def run() -> None:
                rooted = self._rooted(compiled, lib, root)
                move(rooted, blocks, own, home, shift, compiled.compressed)  # type: ignore[arg-type]

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
            return self._gloo_step("barrier", (barrier_opts(),), "barrier")
        compiled, lib = entry
        sig = (op_code("barrier"), ROUTE_COLLC, 0, 0, 0, 0, compiled.key)
        return Planned(sig, lib.barrier, "barrier", compiled.describe())  # type: ignore[union-attr]
