"""Every collective of the collc backend against gloo's result on the same inputs; run with torchrun.

``python -m torch.distributed.run --nproc-per-node N ops_vs_gloo.py OUT_DIR [quick]``: the default group is
collc, a second group of the same ranks is gloo.  Inputs are integers (or values whose every partial
sum is exact), so that any order of reduction gives the same bits: results must be equal, bit for bit.
Each rank writes OUT_DIR/rank<r>.json: the number of cases, the cases that differ, the warnings collc
printed, and the collectives the collc group ran by route.  With ``COLLC_TEST_DEVICE=cuda`` the collc
group's tensors of the cases are CUDA tensors (gloo's stay on the CPU).
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from typing import Any

import torch
import torch.distributed as dist

import collc.torch

R = dist.ReduceOp
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.float64)
QUICK_DTYPES = DTYPES[:3]


def values(n: int, dtype: torch.dtype, op: Any, seed: int) -> torch.Tensor:
    """Rank-dependent inputs whose reductions are exact in ``dtype`` in any order."""
    g = torch.Generator().manual_seed(seed * 7919 + dist.get_rank())
    if op == R.PRODUCT:
        return torch.tensor([-1, 1, 2])[torch.randint(0, 3, (n,), generator=g)].to(dtype)
    if op in (R.MAX, R.MIN):
        return (torch.randn(n, generator=g) * 100).to(dtype)
    return torch.randint(-8, 9, (n,), generator=g).to(dtype)


def all_reduce(t: torch.Tensor, group: Any, op: Any, n: int, p: int, rank: int) -> torch.Tensor:
    dist.all_reduce(t, op=op, group=group)
    return t


def reduce_scatter_tensor(t: torch.Tensor, group: Any, op: Any, n: int, p: int, rank: int) -> torch.Tensor:
    out = torch.empty(n, dtype=t.dtype, device=t.device)
    dist.reduce_scatter_tensor(out, t, op=op, group=group)
    return out


def reduce_scatter_list(t: torch.Tensor, group: Any, op: Any, n: int, p: int, rank: int) -> torch.Tensor:
    out = torch.empty(n, dtype=t.dtype, device=t.device)
    dist.reduce_scatter(out, [t[k * n : (k + 1) * n] for k in range(p)], op=op, group=group)
    return out


def all_gather_into_tensor(t: torch.Tensor, group: Any, op: Any, n: int, p: int, rank: int) -> torch.Tensor:
    out = torch.empty(n * p, dtype=t.dtype, device=t.device)
    dist.all_gather_into_tensor(out, t, group=group)
    return out


def all_gather_in_place(t: torch.Tensor, group: Any, op: Any, n: int, p: int, rank: int) -> torch.Tensor:
    out = torch.full((n * p,), -1, device=t.device).to(t.dtype)
    out[rank * n : (rank + 1) * n] = t
    dist.all_gather_into_tensor(out, out[rank * n : (rank + 1) * n], group=group)
    return out


def all_gather_list(t: torch.Tensor, group: Any, op: Any, n: int, p: int, rank: int) -> torch.Tensor:
    outs = [torch.empty(n, dtype=t.dtype, device=t.device) for _ in range(p)]
    dist.all_gather(outs, t, group=group)
    return torch.cat(outs)


def broadcast(t: torch.Tensor, group: Any, root: int, n: int, p: int, rank: int) -> torch.Tensor:
    dist.broadcast(t, group=group, group_src=root)
    return t


def cases(p: int, quick: bool) -> list[tuple[Any, torch.dtype, int, Any, int]]:
    """(function, dtype, n, op or root, input length) of every case."""
    sizes = (5, 4099) if quick else (0, 7, 65539)
    out = []
    for dtype in QUICK_DTYPES if quick else DTYPES:
        for n in sizes:
            reduce_ops = [R.SUM, R.MAX, R.MIN] + ([R.AVG] if dtype.is_floating_point else [])
            if not quick and n < 100:
                reduce_ops.append(R.PRODUCT)
            for op in reduce_ops:
                out.append((all_reduce, dtype, n, op, n))
                if not quick or op in (R.SUM, R.AVG):
                    out.append((reduce_scatter_tensor, dtype, n, op, n * p))
            out.append((reduce_scatter_list, dtype, n, R.SUM, n * p))
            for fn in (all_gather_into_tensor, all_gather_in_place, all_gather_list):
                out.append((fn, dtype, n, R.MAX, n))
            for root in (p - 1,) if quick else range(p):
                out.append((broadcast, dtype, n, root, n))
    return out


def main() -> None:
    out_dir, quick = sys.argv[1], len(sys.argv) > 2 and sys.argv[2] == "quick"
    dist.init_process_group("collc")
    world = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    rank, p = dist.get_rank(), dist.get_world_size()
    count = 0
    wrong: list[str] = []

    def same(name: str, a: torch.Tensor, b: torch.Tensor) -> None:
        nonlocal count
        count += 1
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
            diff = (a.double() - b.double()).abs().max().item() if a.shape == b.shape and a.numel() else "shape"
            wrong.append(f"rank {rank}: {name}: collc and gloo differ (max |diff| {diff})")

    dev = os.environ.get("COLLC_TEST_DEVICE", "cpu")
    if dev == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k, (fn, dtype, n, arg, length) in enumerate(cases(p, quick)):
            results = [fn(values(length, dtype, arg, k).to(dev if group is world else "cpu"), group, arg, n, p, rank)
                       for group in (world, gloo)]  # fmt: skip
            same(f"{fn.__name__} {dtype} n={n} {arg}", results[0].cpu(), results[1])
        # asynchronous collectives: several in flight, waited for together, as FSDP2 issues them
        works, pending = [], []
        for k in range(6):
            t = values(3000 + k, torch.float32, R.SUM, 50 + k)
            ref = t.clone()
            works.append(dist.all_reduce(t, async_op=True))
            gathered = torch.empty((3000 + k) * p)
            works.append(dist.all_gather_into_tensor(gathered, ref.clone(), async_op=True))
            pending.append((t, ref, gathered))
        for work in works:
            work.wait()
        for k, (t, ref, gathered) in enumerate(pending):
            expected = torch.empty_like(gathered)
            dist.all_gather_into_tensor(expected, ref, group=gloo)
            dist.all_reduce(ref, group=gloo)
            same(f"async all_reduce #{k}", t, ref)
            same(f"async all_gather #{k}", gathered, expected)
        # a subgroup of the first and the last rank (an MPI communicator of its own)
        members = [0, p - 1] if p > 2 else [p - 1]
        sub, sub_gloo = dist.new_group(members, backend="collc"), dist.new_group(members, backend="gloo")
        sub_cases = 0
        if rank in members:
            for k, (fn, dtype, n, arg, length) in enumerate(cases(len(members), True)[:12]):
                sub_cases += 1
                results = [fn(values(length, dtype, arg, k), g, arg, n, len(members), members.index(rank))
                           for g in (sub, sub_gloo)]  # fmt: skip
                same(f"subgroup {members}: {fn.__name__} {dtype} n={n} {arg}", *results)
        dist.barrier()
    notes = [str(w.message) for w in caught if str(w.message).startswith("collc")]
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump({"cases": count, "wrong": wrong, "warnings": notes, "stats": dict(world.stats),
                   "subgroup": {"members": members, "cases": sub_cases, "stats": dict(sub.stats) if rank in members
                                else {}}}, f)  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    assert collc.torch.BACKEND == "collc"
    main()
