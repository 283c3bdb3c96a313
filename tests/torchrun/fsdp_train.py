"""FSDP2 training of a small transformer on the collc backend and on gloo, side by side; run with torchrun.

``python -m torch.distributed.run --nproc-per-node N fsdp_train.py OUT.json [STEPS]``: the default group is
collc; the same model, data and optimizer are trained once on a device mesh of the default (collc) group and
once on a mesh of a gloo group of the same ranks.  Rank 0 writes both of its loss curves (the loss of its
own batches, which depends on every rank's gradients from the second step on) to OUT.json, with the number
of collectives each route of the collc group ran.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

import collc.torch


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Model(torch.nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x.flatten(0, 1))  # 2-D: on 3-D input a Linear returns a view, which FSDP2 warns about


def train(mesh: DeviceMesh, steps: int) -> list[float]:
    torch.manual_seed(0)
    model = Model(layers=1)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optim = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.Generator().manual_seed(1000 + dist.get_rank())
    losses = []
    for _ in range(steps):
        tokens = torch.randint(0, 64, (8, 16), generator=data)
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), tokens[:, 1:].reshape(-1))
        loss.backward()
        optim.step()
        optim.zero_grad()
        losses.append(float(loss.detach()))  # this rank's loss on its own batch
    return losses


def main() -> None:
    out, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 50
    dist.init_process_group("collc")
    world = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    collc_losses = train(DeviceMesh.from_group(world, "cpu"), steps)
    gloo_losses = train(DeviceMesh.from_group(gloo, "cpu"), steps)
    stats = dict(getattr(world, "stats", {}))
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(
                {
                    "collc": collc_losses,
                    "gloo": gloo_losses,
                    "stats": stats,
                    "backend": dist.get_backend(world),
                    "size": dist.get_world_size(),
                },
                f,
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    assert collc.torch.BACKEND == "collc"
    main()
