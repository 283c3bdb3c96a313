"""Bad input to the collc backend: every rank must end in a clear error, and the group must stay usable.

``python -m torch.distributed.run --nproc-per-node N bad_input.py OUT_DIR SCHEDULES_DIR``: each case makes
one collective that some or all ranks cannot run; every rank records the error it saw (type and message).
After each case, a correct all_reduce must still give the right sum.  SCHEDULES_DIR holds needs4.coll
(an allreduce whose constraints exclude p < 4) and broken.coll (an allgather that fails verification).
Each rank writes OUT_DIR/rank<r>.json.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable

import torch
import torch.distributed as dist

import collc.torch


def main() -> None:
    out_dir, schedules = sys.argv[1], sys.argv[2]
    dist.init_process_group("collc")
    rank, p = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    seen: dict[str, str] = {}
    healthy: dict[str, bool] = {}

    def case(name: str, body: Callable[[], None], reset: bool = False) -> None:
        print(f"rank {rank}: case {name}", file=sys.stderr, flush=True)
        try:
            body()
            seen[name] = "no error"
        except Exception as err:
            seen[name] = f"{type(err).__name__}: {err}"
        if reset:
            collc.torch.reset()
        t = torch.full((5,), float(rank + 1))
        dist.all_reduce(t)
        healthy[name] = bool(torch.equal(t, torch.full((5,), p * (p + 1) / 2)))

    case("non-contiguous on rank 1", lambda: dist.all_reduce(torch.ones(4, 6).t() if rank == 1 else torch.ones(6, 4)))
    case("non-contiguous everywhere", lambda: dist.all_gather_into_tensor(torch.empty(4 * p, 3).t(), torch.ones(3, 4)))
    case("sizes differ", lambda: dist.all_reduce(torch.ones(10 + rank)))
    case("dtypes differ", lambda: dist.all_reduce(torch.ones(10, dtype=torch.float32 if rank else torch.float64)))

    def wrong_output() -> None:
        dist.all_gather_into_tensor(torch.empty(3 * p + 1), torch.ones(3))

    case("all_gather output of the wrong size", wrong_output)

    def excluded() -> None:
        collc.torch.configure(allreduce=f"{schedules}/needs4.coll")
        dist.all_reduce(torch.ones(8))

    case("constraints exclude p", excluded, reset=True)

    def unverified() -> None:
        collc.torch.configure(allgather=f"{schedules}/broken.coll")
        dist.all_gather_into_tensor(torch.empty(8 * p), torch.ones(8))

    case("schedule fails verification", unverified, reset=True)

    def wrong_collective() -> None:
        collc.torch.configure(reduce_scatter="swing_bw")
        dist.reduce_scatter_tensor(torch.empty(4), torch.ones(4 * p))

    case("schedule of another collective", wrong_collective, reset=True)

    def configured_differently() -> None:
        collc.torch.configure(allreduce="gloo" if rank == 0 else "swing_bw")
        dist.all_reduce(torch.ones(8))

    case("ranks configured differently", configured_differently, reset=True)

    def compressed() -> None:
        collc.torch.configure(allgather="compressed_ring_allgather")
        dist.all_gather_into_tensor(torch.empty(8 * p), torch.ones(8))

    case("compressed schedule", compressed, reset=True)

    def compressed_bf16() -> None:
        collc.torch.configure(allgather="compressed_ring_allgather")
        dist.all_gather_into_tensor(torch.empty(8 * p, dtype=torch.bfloat16), torch.ones(8, dtype=torch.bfloat16))

    case("compressed schedule, bfloat16", compressed_bf16, reset=True)

    # a bitwise reduction has no schedule: gloo runs it (a warning the first time), with gloo's result;
    # all_to_all_single runs on the alltoall schedule and must agree with gloo's
    fallback: dict[str, bool] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(2):
            a = torch.tensor([rank + 3, 12, 7 + k])
            b = a.clone()
            dist.all_reduce(a, op=dist.ReduceOp.BAND)
            dist.all_reduce(b, op=dist.ReduceOp.BAND, group=gloo)
            fallback[f"BAND #{k}"] = bool(torch.equal(a, b))
        a = torch.arange(4 * p, dtype=torch.float32) * (rank + 1)
        got, want = torch.empty(4 * p), torch.empty(4 * p)
        dist.all_to_all_single(got, a)
        dist.all_to_all_single(want, a, group=gloo)
        fallback["all_to_all_single"] = bool(torch.equal(got, want))
    notes = [str(w.message) for w in caught if str(w.message).startswith("collc")]
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump({"errors": seen, "healthy": healthy, "fallback": fallback, "warnings": notes}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
