"""Compressed collectives of the collc backend against gloo, within the verifier's error bound; run with torchrun.

``python -m torch.distributed.run --nproc-per-node N compressed_vs_gloo.py OUT_DIR``: the allgather and the
reduce-scatter run the bundled compressed ring schedules with ``q=ebq(eb=1e-4)``; inputs are uniform in
[-1, 1].  The bound of each case comes from collc's verifier for the same program, codec and p (the
reference), plus the rounding of a float32 sum in another order.  Each rank writes OUT_DIR/rank<r>.json.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

import collc
import collc.torch

CODEC = {"q": "ebq(eb=1e-4)"}
SCHEDULES = {"allgather": "compressed_ring_allgather", "reduce_scatter": "compressed_ring_reduce_scatter"}


def bound(name: str, p: int) -> float:
    report = collc.load(name).with_codecs(CODEC).instantiate(p=p).verify(input_bound=1.0)
    assert report.ok and report.compression is not None
    return report.compression.error_bound


def main() -> None:
    out_dir = sys.argv[1]
    collc.torch.configure(codec=CODEC, **SCHEDULES)
    dist.init_process_group("collc")
    world = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    rank, p = dist.get_rank(), dist.get_world_size()
    bounds = {coll: bound(name, p) for coll, name in SCHEDULES.items()}
    rounding = 4 * p * 2.0**-24 * p  # a float32 sum of p terms of magnitude <= 1, in another order
    cases, beyond = 0, []
    for n in (1, 1000, 65537):
        g = torch.Generator().manual_seed(n * 31 + rank)
        x = torch.rand(n * p, generator=g) * 2 - 1
        for coll in SCHEDULES:
            got = torch.empty(n * p if coll == "allgather" else n)
            ref = torch.empty_like(got)
            if coll == "allgather":
                dist.all_gather_into_tensor(got, x[:n], group=world)
                dist.all_gather_into_tensor(ref, x[:n], group=gloo)
            else:
                dist.reduce_scatter_tensor(got, x, group=world)
                dist.reduce_scatter_tensor(ref, x, group=gloo)
            error = (got - ref).abs().max().item()
            cases += 1
            if not error <= bounds[coll] + rounding:
                beyond.append(f"{coll} n={n}: |collc - gloo| = {error} > bound {bounds[coll]}")
    try:
        dist.all_gather_into_tensor(torch.empty(4 * p, dtype=torch.bfloat16), torch.ones(4, dtype=torch.bfloat16))
        bf16_error = "no error"
    except Exception as err:
        bf16_error = str(err)
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump({"cases": cases, "beyond_bound": beyond, "bounds": bounds, "bf16_error": bf16_error,
                   "stats": dict(world.stats)}, f)  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
