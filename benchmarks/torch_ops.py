"""The collc torch.distributed backend against gloo, side by side in the same processes.

One torchrun job: the default group is collc, a second group of the same ranks is gloo.  For each
collective and size, the two run alternately (a barrier, warm-up calls, then timed calls), so that each
ratio compares runs made seconds apart on the same processes.  Times are the mean per call on the slowest
rank; bus bandwidth as nccl-tests defines it (allreduce: 2(p-1)/p x size / time; allgather and
reduce-scatter: (p-1)/p x the full vector / time; broadcast: size / time).  ``speed`` = gloo time / collc
time: above 1.0 collc is faster.  ``unchecked`` is collc without the agreement check that precedes every
collective (``configure(check=False)``).  Then FSDP2 steps of a small transformer on each backend, and on collc
with compressed allgather and reduce-scatter (`COMPRESSED`); ``speed`` there is gloo's step time / the run's.

    python benchmarks/torch_ops.py                       # 4 ranks, 1 KiB .. 64 MiB, float32
    python benchmarks/torch_ops.py --sizes 1K:1MiB --ranks 2 --fsdp-steps 10
    python benchmarks/torch_ops.py --network 4x1gbit --sizes 1MiB:64MiB   # on an emulated cluster (root)

``--network HOSTS[xRATE][,...]`` runs the job under ``mpiexec`` on an emulated cluster (`collc.netemu`,
docs/network.md) instead of torchrun: the ranks in blocks over HOSTS network namespaces, MPI and gloo both
over TCP between hosts on links shaped to RATE.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def human(nbytes: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes // size}{unit}"
    return f"{nbytes}B"


def bus_factor(op: str, p: int) -> float:
    return {"all_reduce": 2 * (p - 1) / p, "all_gather": (p - 1) / p, "reduce_scatter": (p - 1) / p}.get(op, 1.0)


def launch(args: argparse.Namespace) -> int:
    from collc.backends.mpitools import mpi_env

    worker = [__file__, "--worker", "--sizes", args.sizes, "--step", str(args.step), "--budget", str(args.budget),
              "--fsdp-steps", str(args.fsdp_steps)]  # fmt: skip
    env = mpi_env(args.ranks)
    env.setdefault("OMP_NUM_THREADS", "1")
    load = os.getloadavg()[0]
    where = f", on an emulated cluster {args.network}" if args.network else ""
    print(f"# {args.ranks} ranks on {platform.node()} ({os.cpu_count()} cores, load {load:.1f}){where}, float32, sum")
    print(f"# command: python benchmarks/{Path(__file__).name} " + " ".join(sys.argv[1:]))
    sys.stdout.flush()
    if args.network:
        return on_cluster(args, worker)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.ranks}",
               *worker]  # fmt: skip
    return subprocess.run(command, env=env, cwd=ROOT).returncode


def on_cluster(args: argparse.Namespace, worker: list[str]) -> int:
    """The job under mpiexec on an emulated cluster: torch's store on host 0's address, gloo on the hosts'
    links (GLOO_SOCKET_IFNAME), so that both backends cross the shaped network."""
    from collc import netemu

    network = netemu.parse_network(args.network)
    if args.ranks % network.hosts:
        print(f"error: --network: {network.hosts} hosts do not divide {args.ranks} ranks", file=sys.stderr)
        return 2
    with netemu.Cluster.of(network, args.ranks // network.hosts) as cluster:
        print(f"# {cluster.describe()}", flush=True)
        env = {"OMP_NUM_THREADS": "1", "MASTER_ADDR": cluster.addresses[0], "MASTER_PORT": "29511",
               "GLOO_SOCKET_IFNAME": cluster.iface}  # fmt: skip
        done = cluster.mpiexec([sys.executable, *worker], env=env, timeout=3600)
    print(done.stdout, end="")
    if done.returncode != 0:
        print(done.stderr[-4000:], file=sys.stderr)
    return done.returncode


def operation(op: str, n: int, p: int, group: object) -> Callable[[], None]:
    """One call of ``op`` on ``n`` float32 elements (the full vector) in ``group``, on buffers made here."""
    import torch
    import torch.distributed as dist

    x = torch.rand(n)
    if op == "all_reduce":
        return lambda: dist.all_reduce(x, group=group)
    if op == "all_gather":
        out, part = torch.empty(n), x[: n // p].clone()
        return lambda: dist.all_gather_into_tensor(out, part, group=group)
    if op == "reduce_scatter":
        out = torch.empty(n // p)
        return lambda: dist.reduce_scatter_tensor(out, x, group=group)
    return lambda: dist.broadcast(x, 0, group=group)


def timed(fn: Callable[[], None], iters: int, barrier: Callable[[], None]) -> float:
    barrier()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    import collc.torch
    from collc.cli import parse_sizes

    dist.init_process_group("collc")
    rank, p = dist.get_rank(), dist.get_world_size()
    collc_group = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    groups = {"collc": collc_group, "gloo": gloo}

    def slowest(seconds: float) -> float:
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
        return float(t)

    if rank == 0:
        print(f"# torch {torch.__version__}; torch's mpi backend: "
              f"{'available' if dist.is_mpi_available() else 'not in this torch build'}")  # fmt: skip
        print(f"\n{'op':<15} {'size':>7} {'collc(us)':>10} {'unchecked':>10} {'gloo(us)':>10} {'speed':>6} "
              f"{'collc busbw':>12} {'gloo busbw':>11}")  # fmt: skip
    for op in OPS:
        for nbytes in parse_sizes(args.sizes)[:: args.step]:
            n = max(nbytes // 4, p)
            n -= n % p
            iters = max(3, min(200, int(args.budget // max(nbytes, 1))))
            results = {}
            for name in ("collc", "unchecked", "gloo") * 2:  # twice each, alternating; the better of two
                group = groups["gloo" if name == "gloo" else "collc"]
                collc.torch.configure(check=name != "unchecked")
                call = operation(op, n, p, group)
                call()
                call()  # warm-up (the first collc call of a kind also compiles its schedule)
                seconds = slowest(timed(call, iters, lambda g=group: dist.barrier(group=g)))
                results[name] = min(results.get(name, seconds), seconds)
            if rank == 0:
                size = n * 4
                bus = {k: bus_factor(op, p) * size / v / 1e9 for k, v in results.items()}
                print(f"{op:<15} {human(size):>7} {results['collc'] * 1e6:>10.1f} {results['unchecked'] * 1e6:>10.1f} "
                      f"{results['gloo'] * 1e6:>10.1f} "
                      f"{results['gloo'] / results['collc']:>5.2f}x {bus['collc']:>8.3f}GB/s {bus['gloo']:>7.3f}GB/s",
                      flush=True)  # fmt: skip
    collc.torch.configure(check=True)
    if args.fsdp_steps:
        fsdp(args.fsdp_steps, groups, rank)
    dist.destroy_process_group()


FSDP_RUNS = ("collc", "collc ebq", "gloo")
"""The FSDP2 runs: collc's default schedules, collc with compressed allgather and reduce-scatter, gloo."""

COMPRESSED = {
    "allgather": "compressed_ring_allgather",
    "reduce_scatter": "compressed_ring_reduce_scatter",
    "codec": "q=ebq(eb=1e-3)",
}


def fsdp(steps: int, groups: dict, rank: int) -> None:  # type: ignore[type-arg]
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    import collc.torch
    from collc.torch import config

    sys.path.insert(0, str(ROOT / "tests" / "torchrun"))
    from fsdp_train import Model

    times: dict[str, float] = {}
    losses: dict[str, float] = {}
    for name in FSDP_RUNS:
        config.reset()
        if name == "collc ebq":
            collc.torch.configure(**COMPRESSED)
        mesh = DeviceMesh.from_group(groups["gloo" if name == "gloo" else "collc"], "cpu")
        torch.manual_seed(0)
        model = Model(vocab=256, dim=128, heads=4, layers=4)
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
        per_step = []
        data = torch.Generator().manual_seed(1)
        for step in range(steps + 2):
            tokens = torch.randint(0, 256, (8, 64), generator=data)
            dist.barrier(group=groups["gloo"])
            start = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(tokens[:, :-1]).reshape(-1, 256), tokens[:, 1:].reshape(-1))
            loss.backward()
            optim.step()
            optim.zero_grad()
            if step >= 2:  # the first steps compile and warm up
                per_step.append(time.perf_counter() - start)
        t = torch.tensor([statistics.median(per_step)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=groups["gloo"])
        times[name] = float(t)
        losses[name] = float(loss.detach())
    config.reset()
    if rank == 0:
        params = sum(p.numel() for p in Model(vocab=256, dim=128, heads=4, layers=4).parameters())
        print(f"\nFSDP2 step (transformer, {params / 1e6:.2f}M parameters, 4 blocks, batch 8x63 tokens), "
              f"median of {steps} steps on the slowest rank; 'collc ebq': compressed ring allgather and "
              f"reduce-scatter, {COMPRESSED['codec']}:")  # fmt: skip
        print(f"  {'run':<10} {'step(ms)':>9} {'speed':>6} {'last loss':>10}")
        for name in FSDP_RUNS:
            print(f"  {name:<10} {times[name] * 1e3:>9.1f} {times['gloo'] / times[name]:>5.2f}x {losses[name]:>10.5f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", "-p", type=int, default=4)
    parser.add_argument("--sizes", default="1K:64MiB")
    parser.add_argument("--step", type=int, default=2, help="every STEP-th size of the doubling sweep (2: x4)")
    parser.add_argument("--budget", type=float, default=64e6, help="bytes per (op, size, backend) timing")
    parser.add_argument("--fsdp-steps", type=int, default=10)
    parser.add_argument("--network", default=None, help="HOSTS[xRATE][,...]: run on an emulated cluster (root)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return 0
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
