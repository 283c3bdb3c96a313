"""gather, scatter and barrier of the collc backend against values every rank computes itself; run with torchrun.

``python -m torch.distributed.run --nproc-per-node N rooted_vs_reference.py OUT_DIR [SCHEDULE ...]``: every rank's
input is a function of its rank and the case, so each rank knows what the root must gather and what it must
receive from a scatter, bit for bit, without asking another backend.  Cases: every root, dtypes from bool to
complex64, empty to large tensors, and the output (gather) or input (scatter) lists as separate tensors, as
views of one buffer, and with the root's own block in place.  Each SCHEDULE is a ``gather.coll:scatter.coll``
pair run after the defaults.  Then asynchronous gathers in flight together, a subgroup, the ``gloo`` setting,
bad input (an error on every rank, the group usable after it) and the barrier (no rank leaves before every rank
has come).  Each rank writes OUT_DIR/rank<r>.json.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

import collc.torch

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int16,
          torch.uint8, torch.int8, torch.bool, torch.complex64)  # fmt: skip
BIG = 40_003  # elements: blocks of odd byte counts too


def values(shape: tuple[int, ...], dtype: torch.dtype, owner: int, seed: int) -> torch.Tensor:
    """The block of rank ``owner`` (or block ``owner`` of a root's scatter list) in case ``seed``."""
    g = torch.Generator().manual_seed(seed * 1009 + owner)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex or dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.complex64 if dtype.is_complex else torch.float32).to(dtype)
    low = 0 if dtype is torch.uint8 else -100
    return torch.randint(low, 100, shape, generator=g).to(dtype)


def cases(p: int, quick: bool) -> list[tuple[torch.dtype, tuple[int, ...], int, str]]:
    out = []
    for root in range(p):
        for dtype in DTYPES[:3] if quick else DTYPES:
            shapes: list[tuple[int, ...]] = [(0,), (13,), (3, 5)]
            if dtype in (torch.float32, torch.bfloat16, torch.uint8):
                shapes.append((BIG,))
            for shape in shapes:
                for layout in ("list", "views", "in place"):
                    out.append((dtype, shape, root, layout))
    return out


def gather_case(dtype: torch.dtype, shape: tuple[int, ...], root: int, layout: str, seed: int,
                group: Any = None) -> str | None:  # fmt: skip
    """Run one gather; what is wrong with it, or None."""
    rank, p = dist.get_rank(group), dist.get_world_size(group)
    n = torch.Size(shape).numel()
    mine = values(shape, dtype, rank, seed)
    outs: list[torch.Tensor] | None = None
    inp = mine.clone()
    if rank == root:
        if layout == "list":
            outs = [torch.zeros(shape, dtype=dtype) for _ in range(p)]
        else:
            buf = torch.zeros(p * n, dtype=dtype)
            outs = [buf[k * n : (k + 1) * n].view(shape) for k in range(p)]
            if layout == "in place":
                outs[root].copy_(mine)
                inp = outs[root]
    dist.gather(inp, outs, group_dst=root, group=group)
    if not torch.equal(inp, mine):
        return "the input changed"
    if outs is not None:
        for k, got in enumerate(outs):
            if not torch.equal(got, values(shape, dtype, k, seed)):
                return f"block {k} differs"
    return None


def scatter_case(dtype: torch.dtype, shape: tuple[int, ...], root: int, layout: str, seed: int,
                 group: Any = None) -> str | None:  # fmt: skip
    rank, p = dist.get_rank(group), dist.get_world_size(group)
    n = torch.Size(shape).numel()
    blocks = [values(shape, dtype, 100 + k, seed) for k in range(p)]  # what the root sends to rank k
    ins: list[torch.Tensor] | None = None
    out = torch.zeros(shape, dtype=dtype)
    if rank == root:
        if layout == "list":
            ins = [b.clone() for b in blocks]
        else:
            buf = torch.cat([b.reshape(-1) for b in blocks])
            ins = [buf[k * n : (k + 1) * n].view(shape) for k in range(p)]
            if layout == "in place":
                out = ins[root]
    dist.scatter(out, ins, group_src=root, group=group)
    if not torch.equal(out, blocks[rank]):
        return "the output differs"
    if ins is not None and any(not torch.equal(i, b) for i, b in zip(ins, blocks, strict=True)):
        return "the input changed"
    return None


def main() -> None:
    out_dir, schedules = sys.argv[1], sys.argv[2:]
    dist.init_process_group("collc")
    world = dist.group.WORLD
    rank, p = dist.get_rank(), dist.get_world_size()
    wrong: list[str] = []
    count = 0

    def check(name: str, problem: str | None) -> None:
        nonlocal count
        count += 1
        if problem is not None:
            wrong.append(f"rank {rank}: {name}: {problem}")

    def run_cases(label: str, quick: bool) -> None:
        for k, (dtype, shape, root, layout) in enumerate(cases(p, quick)):
            what = f"{label} {dtype} {shape} root {root} {layout}"
            check(f"gather {what}", gather_case(dtype, shape, root, layout, k))
            check(f"scatter {what}", scatter_case(dtype, shape, root, layout, k))

    errors: dict[str, str] = {}
    healthy: dict[str, bool] = {}

    def error_case(name: str, body: Callable[[], None]) -> None:
        try:
            body()
            errors[name] = "no error"
        except Exception as err:
            errors[name] = f"{type(err).__name__}: {err}"
        healthy[name] = gather_case(torch.float32, (5,), p - 1, "list", 99) is None

    barrier_ok: list[bool] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_cases("default", quick=False)
        for pair in schedules:
            gather, scatter = pair.split(":")
            collc.torch.configure(gather=gather, scatter=scatter)
            run_cases(pair, quick=True)
            collc.torch.reset()
        # asynchronous gathers and scatters, several in flight, waited for together
        works, pending = [], []
        for k in range(4):
            root = k % p
            outs = [torch.empty(1000 + k) for _ in range(p)] if rank == root else None
            works.append(dist.gather(values((1000 + k,), torch.float32, rank, 500 + k), outs, group_dst=root,
                                     async_op=True))  # fmt: skip
            got = torch.empty(700 + k)
            ins = [values((700 + k,), torch.float32, j, 600 + k) for j in range(p)] if rank == root else None
            works.append(dist.scatter(got, ins, group_src=root, async_op=True))
            pending.append((k, outs, got))
        for work in works:
            work.wait()
        for k, outs, got in pending:
            ok = outs is None or all(torch.equal(o, values((1000 + k,), torch.float32, j, 500 + k))
                                     for j, o in enumerate(outs))  # fmt: skip
            check(f"async gather #{k}", None if ok else "differs")
            check(f"async scatter #{k}", None if torch.equal(got, values((700 + k,), torch.float32, rank, 600 + k))
                  else "differs")  # fmt: skip
        # a subgroup of the last and the first rank: a communicator of its own, roots 0 and 1 of it
        members = [0, p - 1]
        sub = dist.new_group(members, backend="collc")
        if rank in members:
            for root in (0, 1):
                check(f"subgroup gather root {root}", gather_case(torch.int64, (9,), root, "list", 700 + root, sub))
                check(f"subgroup scatter root {root}", scatter_case(torch.int64, (9,), root, "views", 710 + root, sub))
        # the gloo setting: the same results, on the inner gloo group
        collc.torch.configure(gather="gloo", scatter="gloo", barrier="gloo")
        check("gloo gather", gather_case(torch.float64, (33,), 0, "list", 800))
        check("gloo scatter", scatter_case(torch.float64, (33,), p - 1, "list", 801))
        dist.barrier()
        collc.torch.reset()
        # bad input: an error on every rank, and the group goes on
        error_case(
            "uneven gather list",
            lambda: dist.gather(
                torch.ones(4), [torch.empty(4 + (k == 1)) for k in range(p)] if rank == 0 else None, group_dst=0
            ),
        )
        error_case(
            "uneven scatter list",
            lambda: dist.scatter(
                torch.empty(4), [torch.ones(4 + (k == 1)) for k in range(p)] if rank == p - 1 else None, group_src=p - 1
            ),
        )
        error_case(
            "sizes differ",
            lambda: dist.gather(
                torch.ones(4 + rank), [torch.empty(4) for _ in range(p)] if rank == 0 else None, group_dst=0
            ),
        )
        error_case(
            "short gather list",
            lambda: dist.gather(
                torch.ones(4), [torch.empty(4) for _ in range(p - 1)] if rank == 0 else None, group_dst=0
            ),
        )

        def wrong_collective() -> None:
            collc.torch.configure(scatter="ring_allgather")
            try:
                dist.scatter(torch.empty(4), [torch.ones(4)] * p if rank == 0 else None, group_src=0)
            finally:
                collc.torch.reset()

        error_case("schedule of another collective", wrong_collective)
        # barrier: every rank arrives later than the one before; none leaves before the last arrived
        for k in range(3):
            time.sleep(0.05 * ((rank + k) % p))
            arrived = time.time()
            dist.barrier()
            left = time.time()
            table = torch.empty(2 * p, dtype=torch.float64)
            dist.all_gather_into_tensor(table, torch.tensor([arrived, left], dtype=torch.float64))
            barrier_ok.append(bool(table[1::2].min() >= table[0::2].max()))
    notes = [str(w.message) for w in caught if str(w.message).startswith("collc")]
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump({"cases": count, "wrong": wrong[:20], "warnings": notes, "stats": dict(world.stats),
                   "errors": errors, "healthy": healthy, "barrier": barrier_ok,
                   "sub_stats": dict(sub.stats) if rank in members else {}}, f)  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
