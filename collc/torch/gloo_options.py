"""The option objects of the inner gloo group's calls (torch's ``*Options``), one builder per collective."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

__all__ = [
    "allgather_opts",
    "allreduce_opts",
    "alltoall_opts",
    "barrier_opts",
    "broadcast_opts",
    "gather_opts",
    "reduce_scatter_opts",
    "scatter_opts",
]


def allreduce_opts(op: Any) -> Any:
    opts = dist.AllreduceOptions()
    opts.reduceOp = op
    return opts


def reduce_scatter_opts(op: Any) -> Any:
    from torch._C._distributed_c10d import ReduceScatterOptions

    opts = ReduceScatterOptions()
    opts.reduceOp = op
    return opts


def allgather_opts() -> Any:
    from torch._C._distributed_c10d import AllgatherOptions

    return AllgatherOptions()


def broadcast_opts(root: int) -> Any:
    from torch._C._distributed_c10d import BroadcastOptions

    opts = BroadcastOptions()
    opts.rootRank = root
    opts.rootTensor = 0
    return opts


def alltoall_opts() -> Any:
    from torch._C._distributed_c10d import AllToAllOptions

    return AllToAllOptions()


def gather_opts(root: int) -> Any:
    from torch._C._distributed_c10d import GatherOptions

    opts = GatherOptions()
    opts.rootRank = root
    return opts


def scatter_opts(root: int) -> Any:
    from torch._C._distributed_c10d import ScatterOptions

    opts = ScatterOptions()
    opts.rootRank = root
    return opts


def barrier_opts() -> Any:
    from torch._C._distributed_c10d import BarrierOptions

    return BarrierOptions()
