"""All-to-all and the collectives with counts given at run time on the collc backend; run with torchrun.

``python -m torch.distributed.run --nproc-per-node N alltoall_ranks.py OUT_DIR [full]``: the default
group is collc, a second group of the same ranks is gloo.  Every value a rank sends is a function of the
sending rank, the receiving rank and the element's index (`value`), so each rank computes what it must
receive by itself; where gloo takes the call too (all_to_all_single, even lists, reduce_scatter of uneven
lists), its result must be equal as well, bit for bit.  Then planted faults (split sizes that disagree
between ranks, lists that disagree, bad split sizes on one rank) must end in an error on every rank, after
which the group must still work; and the C API with MPI's own handles (``collc_<algorithm>_alltoallv`` and
co.) is called on the group's libraries directly.  ``full`` adds dtypes, Bruck's alltoall (whose blocks
travel through other ranks) and a compressed reduce_scatter schedule, which runs uneven lists on gloo.
Each rank writes OUT_DIR/rank<r>.json.
"""

from __future__ import annotations

import ctypes
import json
import random
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

import collc.torch
from collc.torch.schedules import prepare

R = dist.ReduceOp


def value(src: int, dst: int, index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """What rank ``src`` sends rank ``dst`` at ``index`` (exact in every dtype, bool included)."""
    v = (src * 31 + dst * 7 + index * 3 + 1) % 101
    return (v % 2 == 1) if dtype is torch.bool else v.to(dtype)


def block(src: int, dst: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    return value(src, dst, torch.arange(n), dtype)


def split_matrix(p: int, seed: int, zeros: float = 0.3) -> list[list[int]]:
    """Rows each rank sends each rank (the same on every rank: one seed), zeros included."""
    rng = random.Random(seed)
    return [[0 if rng.random() < zeros else rng.randint(1, 4) for _ in range(p)] for _ in range(p)]


def main() -> None:
    out_dir = sys.argv[1]
    full = len(sys.argv) > 2 and sys.argv[2] == "full"
    dist.init_process_group("collc")
    rank, p = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    pg = dist.group.WORLD
    caught = warnings.catch_warnings(record=True)
    seen = caught.__enter__()
    warnings.simplefilter("always")
    dtypes = [torch.float32, torch.int64, torch.bfloat16, torch.bool]
    if full:
        dtypes += [torch.float16, torch.int8, torch.complex64, torch.float64]
    wrong: list[str] = []
    cases = 0

    def expect(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
        nonlocal cases
        cases += 1
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            wrong.append(f"{name}: got {got.flatten()[:12].tolist()}, want {want.flatten()[:12].tolist()}")

    # --- all_to_all_single without split sizes: p equal blocks of the first dimension
    def single_even(tag: str, dtype: torch.dtype, rows: int, width: int) -> None:
        n = rows * width
        inp = torch.cat([block(rank, d, n, dtype) for d in range(p)]).view(p * rows, width)
        got = torch.empty_like(inp)
        dist.all_to_all_single(got, inp)
        want = torch.cat([block(s, rank, n, dtype) for s in range(p)]).view(p * rows, width)
        expect(f"{tag} even {dtype} {rows}x{width}", got, want)
        ref = torch.empty_like(inp)
        dist.all_to_all_single(ref, inp, group=gloo)
        expect(f"{tag} even {dtype} {rows}x{width} vs gloo", got, ref)

    for dtype in dtypes:
        single_even("all_to_all_single", dtype, 3, 2)
    in_place = torch.cat([block(rank, d, 4, torch.float32) for d in range(p)])
    dist.all_to_all_single(in_place, in_place)
    expect("all_to_all_single in place", in_place, torch.cat([block(s, rank, 4, torch.float32) for s in range(p)]))
    single_even("all_to_all_single", torch.float32, 0, 2)
    single_even("all_to_all_single", torch.float32, 1000, 1)

    # --- all_to_all_single with split sizes (rows of width elements), zeros included
    def single_split(tag: str, matrix: list[list[int]], dtype: torch.dtype, width: int, one_sided: bool = False,
                     group: Any = None) -> None:  # fmt: skip
        send = matrix[rank]
        recv = [matrix[s][rank] for s in range(p)]
        inp = torch.cat([block(rank, d, send[d] * width, dtype) for d in range(p)]).view(-1, width)
        got = torch.full((sum(recv), width), 7).to(dtype)
        out_splits = [] if one_sided else recv
        dist.all_to_all_single(got, inp, out_splits, send, group=group)
        want = torch.cat([block(s, rank, recv[s] * width, dtype) for s in range(p)]).view(-1, width)
        expect(f"{tag} {dtype} {matrix}", got, want)
        if group is None:
            ref = torch.full((sum(recv), width), 7).to(dtype)
            dist.all_to_all_single(ref, inp, out_splits, send, group=gloo)
            expect(f"{tag} {dtype} {matrix} vs gloo", got, ref)

    for seed, dtype in enumerate(dtypes):
        single_split("splits", split_matrix(p, seed), dtype, 2)
    single_split("splits, wide", split_matrix(p, 100, zeros=0.2), torch.float32, 257)
    single_split("all zero", [[0] * p for _ in range(p)], torch.float32, 3)
    single_split("only to the next rank", [[2 if d == (s + 1) % p else 0 for d in range(p)] for s in range(p)],
                 torch.int64, 1)  # fmt: skip
    single_split("input splits only", [[2] * p for _ in range(p)], torch.float32, 3, one_sided=True)

    # --- all_to_all of lists: one tensor per rank, of any sizes
    def lists(tag: str, matrix: list[list[int]], dtype: torch.dtype, compare_gloo: bool = False) -> None:
        ins = [block(rank, d, matrix[rank][d], dtype) for d in range(p)]
        outs = [torch.full((matrix[s][rank],), 5).to(dtype) for s in range(p)]
        dist.all_to_all(outs, ins)
        for s in range(p):
            expect(f"{tag} {dtype} {matrix} from {s}", outs[s], block(s, rank, matrix[s][rank], dtype))
        if compare_gloo:
            refs = [torch.empty_like(t) for t in outs]
            dist.all_to_all(refs, ins, group=gloo)
            expect(f"{tag} {dtype} {matrix} vs gloo", torch.cat(outs), torch.cat(refs))

    for seed, dtype in enumerate(dtypes[:2]):
        lists("all_to_all lists", split_matrix(p, 10 + seed), dtype)
    lists("all_to_all even lists", [[3] * p for _ in range(p)], torch.float32, compare_gloo=True)

    # --- all_gather of uneven lists
    def gather_uneven(tag: str, sizes: list[int], dtype: torch.dtype) -> None:
        outs = [torch.full((n,), 9).to(dtype) for n in sizes]
        dist.all_gather(outs, block(rank, 0, sizes[rank], dtype))
        for s in range(p):
            expect(f"{tag} {dtype} {sizes} from {s}", outs[s], block(s, 0, sizes[s], dtype))

    for seed, dtype in enumerate(dtypes):
        sizes = [row[0] * 3 for row in split_matrix(p, 20 + seed)]
        if len(set(sizes)) == 1:
            sizes[0] += 1
        gather_uneven("all_gather uneven", sizes, dtype)
    gather_uneven("all_gather, one rank empty", [0] + [5] * (p - 1), torch.float32)

    # --- reduce_scatter of uneven lists
    def reduced(op: Any, dtype: torch.dtype, sizes: list[int]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Every rank's input list, and the reduction of them all (computed here, in float64)."""
        total = sum(sizes)
        j = torch.arange(total, dtype=torch.float64)
        if op == R.PRODUCT:
            each = [torch.tensor([-1.0, 1.0, 2.0], dtype=torch.float64)[((j + r) % 3).long()] for r in range(p)]
        else:
            each = [(r + 1) * (j % 13) - 6 for r in range(p)]
        stacked = torch.stack(each)
        if op in (R.SUM, R.AVG):
            result = stacked.sum(0)
        elif op == R.MAX:
            result = stacked.max(0).values
        elif op == R.MIN:
            result = stacked.min(0).values
        else:
            result = stacked.prod(0)
        if op == R.AVG:
            result = (result.to(dtype) / p).to(torch.float64)
        mine = list(each[rank].to(dtype).split(sizes))
        return mine, result

    def scatter_uneven(tag: str, sizes: list[int], dtype: torch.dtype, op: Any, compare_gloo: bool) -> None:
        parts, result = reduced(op, dtype, sizes)
        at = sum(sizes[:rank])
        want = result[at : at + sizes[rank]].to(dtype)
        got = torch.full((sizes[rank],), 11).to(dtype)
        dist.reduce_scatter(got, [t.clone() for t in parts], op=op)
        expect(f"{tag} {dtype} {op} {sizes}", got, want)
        if compare_gloo:
            ref = torch.full((sizes[rank],), 11).to(dtype)
            dist.reduce_scatter(ref, [t.clone() for t in parts], op=op, group=gloo)
            expect(f"{tag} {dtype} {op} {sizes} vs gloo", got, ref)

    rs_cases = [(torch.float32, R.SUM, True), (torch.int64, R.SUM, True), (torch.float64, R.MAX, True),
                (torch.bfloat16, R.SUM, False), (torch.float32, R.AVG, False),
                (torch.int32, R.PRODUCT, False)]  # fmt: skip
    if full:
        rs_cases += [(torch.float16, R.MIN, False), (torch.int8, R.SUM, True)]
    for seed, (dtype, op, compare) in enumerate(rs_cases):
        sizes = [row[1] * 2 + (1 if r == seed % p else 0) for r, row in enumerate(split_matrix(p, 30 + seed))]
        if len(set(sizes)) == 1:
            sizes[-1] += 2
        scatter_uneven("reduce_scatter uneven", sizes, dtype, op, compare)

    # --- Bruck's alltoall: blocks that travel through other ranks
    if full:
        collc.torch.configure(alltoall="bruck_alltoall")
        for seed in range(3):
            single_split("bruck splits", split_matrix(p, 40 + seed), torch.float32, 2)
        single_even("bruck", torch.int64, 2, 3)
        lists("bruck lists", split_matrix(p, 50), torch.bfloat16)
        collc.torch.reset()

    # --- without the agreement check: the library gathers the send counts itself
    collc.torch.configure(check=False)
    single_split("splits, no check", split_matrix(p, 60), torch.float32, 2)
    gather_uneven("all_gather uneven, no check", [r + 1 for r in range(p)], torch.int64)
    collc.torch.reset()

    # --- a group of one (rank 0 alone): copies
    alone = dist.new_group([0], backend="collc")
    alone_stats: dict[str, int] = {}
    if rank == 0:
        got1 = torch.empty(3, 2)
        dist.all_to_all_single(got1, torch.arange(6.0).view(3, 2), [3], [3], group=alone)
        expect("alone, split sizes", got1, torch.arange(6.0).view(3, 2))
        got = [torch.empty(4)]
        dist.all_to_all(got, [torch.arange(4.0)], group=alone)
        expect("alone, lists", got[0], torch.arange(4.0))
        got = [torch.empty(3)]
        dist.all_gather(got, torch.arange(3.0), group=alone)
        expect("alone, all_gather", got[0], torch.arange(3.0))
        alone_stats = dict(alone.stats)

    stats = dict(pg.stats)
    notes = [str(w.message) for w in seen if str(w.message).startswith("collc")]
    caught.__exit__(None, None, None)

    # --- the setting "gloo", and (full) a compressed schedule, on which uneven lists go to gloo
    collc.torch.configure(alltoall="gloo")
    single_split("splits on gloo", split_matrix(p, 70), torch.float32, 2)
    collc.torch.reset()
    compressed_warning: list[str] = []
    if full:
        with warnings.catch_warnings(record=True) as compressed:
            warnings.simplefilter("always")
            collc.torch.configure(reduce_scatter="compressed_ring_reduce_scatter")
            scatter_uneven("reduce_scatter uneven, compressed schedule", [1, 0, *range(3, p + 1)], torch.float32,
                           R.SUM, True)  # fmt: skip
            collc.torch.reset()
        compressed_warning = [str(w.message) for w in compressed if str(w.message).startswith("collc")]

    # --- faults: every rank must end in an error, and the group must go on
    errors: dict[str, str] = {}
    healthy: dict[str, bool] = {}

    def fault(name: str, body: Callable[[], None]) -> None:
        try:
            body()
            errors[name] = "no error"
        except Exception as err:
            errors[name] = f"{type(err).__name__}: {err}"
        inp = torch.arange(2 * p, dtype=torch.float32) + 100 * rank
        got = torch.empty(2 * p)
        dist.all_to_all_single(got, inp)
        want = torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * s for s in range(p)])
        healthy[name] = bool(torch.equal(got, want))

    base = [[2] * p for _ in range(p)]

    def disagreeing_splits() -> None:
        send = list(base[rank])
        if rank == 0:
            send[1] += 1  # rank 1 expects 2 rows from rank 0: it gets 3
        recv = [base[s][rank] for s in range(p)]
        dist.all_to_all_single(torch.empty(sum(recv), 4), torch.zeros(sum(send), 4), recv, send)

    fault("splits disagree", disagreeing_splits)

    def splits_on_some_ranks() -> None:
        inp, out = torch.zeros(2 * p), torch.empty(2 * p)
        if rank == p - 1:
            dist.all_to_all_single(out, inp, [2] * p, [2] * p)
        else:
            dist.all_to_all_single(out, inp)

    fault("split sizes on one rank only", splits_on_some_ranks)

    def bad_splits_on_one_rank() -> None:
        send = [2] * p if rank != 1 else [2] * (p - 1) + [5]  # adds up to more than the input holds
        dist.all_to_all_single(torch.empty(2 * p), torch.zeros(2 * p), [2] * p, send)

    fault("bad splits on rank 1", bad_splits_on_one_rank)

    def gather_lists_disagree() -> None:
        sizes = [1 + r for r in range(p)]
        mine = list(sizes)
        if rank == 1:
            mine[0] = 3  # rank 0 sends 1 element
        dist.all_gather([torch.empty(n) for n in mine], torch.zeros(sizes[rank]))

    fault("all_gather lists disagree", gather_lists_disagree)

    def scatter_lists_disagree() -> None:
        sizes = [2 + r for r in range(p)]
        mine = list(sizes)
        if rank == 0:
            mine[p - 1] = 1
        dist.reduce_scatter(torch.empty(sizes[rank]), [torch.ones(n) for n in mine])

    fault("reduce_scatter lists disagree", scatter_lists_disagree)

    # --- the C API with MPI's handles, on the libraries the group compiled
    c_api = c_api_calls(rank, p, expect)

    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump({"cases": cases, "wrong": wrong, "stats": stats, "warnings": notes, "errors": errors,
                   "healthy": healthy,
                   "gloo_stats": {k: n for k, n in pg.stats.items() if k.startswith("gloo")},
                   "compressed_warning": compressed_warning, "c_api": c_api, "alone": alone_stats}, f)  # fmt: skip
    dist.destroy_process_group()


def c_api_calls(rank: int, p: int, expect: Callable[[str, torch.Tensor, torch.Tensor], None]) -> list[str]:
    """``collc_<algorithm>_alltoallv``, ``_allgatherv`` and ``_reduce_scatter`` with MPI_Count arrays and MPI's
    handles (MPICH's are ints), on MPI_COMM_WORLD; the entry points called."""
    from mpi4py import MPI

    cache = collc.torch.current().cache_dir
    world = ctypes.c_int(MPI._handleof(MPI.COMM_WORLD))
    counts = ctypes.c_longlong * p
    called = []

    def entry(collective: str, source: str, name: str) -> Any:
        lib = ctypes.CDLL(str(prepare(collective, source, p, cache_dir=cache).library))
        fn = getattr(lib, f"collc_{source}_{name}")
        fn.restype = ctypes.c_int
        called.append(fn.__name__)
        return fn

    matrix = split_matrix(p, 80)
    send, recv = matrix[rank], [matrix[s][rank] for s in range(p)]
    inp = torch.cat([block(rank, d, send[d], torch.int32) for d in range(p)])
    out = torch.full((sum(recv),), -1, dtype=torch.int32)
    code = entry("alltoall", "pairwise_alltoall", "alltoallv")(
        ctypes.c_void_p(inp.data_ptr()), counts(*send), counts(*np.cumsum([0, *send[:-1]]).tolist()),
        ctypes.c_void_p(out.data_ptr()), counts(*recv), counts(*np.cumsum([0, *recv[:-1]]).tolist()),
        ctypes.c_int(MPI._handleof(MPI.INT32_T)), world)  # fmt: skip
    expect(f"C API alltoallv returned {code}", out, torch.cat([block(s, rank, recv[s], torch.int32) for s in range(p)]))

    sizes = [r % 3 + 1 for r in range(p)]
    got = torch.zeros(sum(sizes), dtype=torch.float64)
    own = block(rank, 0, sizes[rank], torch.float64)
    code = entry("allgather", "ring_allgather", "allgatherv")(
        ctypes.c_void_p(own.data_ptr()), ctypes.c_longlong(sizes[rank]),
        ctypes.c_void_p(got.data_ptr()), counts(*sizes), counts(*np.cumsum([0, *sizes[:-1]]).tolist()),
        ctypes.c_int(MPI._handleof(MPI.DOUBLE)), world)  # fmt: skip
    want = torch.cat([block(s, 0, sizes[s], torch.float64) for s in range(p)])
    expect(f"C API allgatherv returned {code}", got, want)

    sizes = [2 * r + 1 for r in range(p)]
    total = sum(sizes)
    mine = (torch.arange(total, dtype=torch.float64) + 1) * (rank + 1)
    got = torch.zeros(sizes[rank], dtype=torch.float64)
    code = entry("reduce_scatter", "ring_reduce_scatter", "reduce_scatter")(
        ctypes.c_void_p(mine.data_ptr()), ctypes.c_void_p(got.data_ptr()), counts(*sizes),
        ctypes.c_int(MPI._handleof(MPI.DOUBLE)), ctypes.c_int(MPI._handleof(MPI.SUM)), world)  # fmt: skip
    at = sum(sizes[:rank])
    want = (torch.arange(at, at + sizes[rank], dtype=torch.float64) + 1) * (p * (p + 1) // 2)
    expect(f"C API reduce_scatter returned {code}", got, want)
    return called


if __name__ == "__main__":
    main()
