"""What a collective of the collc group is planned as: the shared vocabulary of `process_group` and `rooted`.

A collective runs as steps; each step, when the group's thread reaches it,
returns a `Planned`: the integers the ranks compare before any data moves
(operation, route, dtype, element count, reduction op, root, schedule digest)
and the call that moves the data.  A collective with counts given at run time
(all-to-all with split sizes, uneven all_gather and reduce_scatter lists) also
carries its counts, which the ranks compare next (`Planned.counts`).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "OPERATIONS",
    "ROUTE_COLLC",
    "ROUTE_DEVICE",
    "ROUTE_GLOO",
    "ROUTE_LOCAL",
    "CollcError",
    "Planned",
    "Step",
    "dtype_name",
    "op_code",
    "warn_once",
]

OPERATIONS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier", "gloo", "trivial", "gather",
              "scatter", "all_to_all", "all_to_all_v", "all_gather_v", "reduce_scatter_v")  # fmt: skip
"""The operations ranks compare, numbered from 1 in this order (the first integer of a signature)."""

ROUTE_COLLC, ROUTE_GLOO, ROUTE_LOCAL, ROUTE_DEVICE = 1, 2, 3, 4
"""Where a step runs: a compiled mpi-c library, the inner gloo group, this process alone, an mpi-cuda library."""


def op_code(name: str) -> int:
    """The number of operation ``name`` in `OPERATIONS`."""
    return OPERATIONS.index(name) + 1


class CollcError(RuntimeError):
    """A collective that the collc backend refused or could not run; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Planned:
    """What a step will do: the integers ranks agree on, and the call."""

    signature: tuple[int, int, int, int, int, int, int]  # operation, route, dtype, count, op, root, schedule
    run: Callable[[], None]
    describe: str  # for errors: "all_reduce of 1024 float32 elements"
    schedule: str = ""  # the schedule that runs it, for errors
    counts: tuple[int, ...] | None = None  # counts given at run time: as many on every rank of the operation
    counts_problem: Callable[[np.ndarray], str | None] | None = None  # every rank's counts (a row each) -> error
    label: str = ""  # the name it is counted under in the group's stats (default: the collective's)


Step = Callable[[], Planned]


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(key: str, text: str) -> None:
    """Warn with ``text`` the first time this process sees ``key``."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(text, RuntimeWarning, stacklevel=3)


def dtype_name(dtype: torch.dtype) -> str:
    """``float32`` for torch.float32."""
    return str(dtype).removeprefix("torch.")
