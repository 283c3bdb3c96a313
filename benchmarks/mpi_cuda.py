"""The mpi-cuda target on this machine's GPUs: codec kernels against a copy, allreduce against cuda and NCCL.

    python benchmarks/mpi_cuda.py                          # 4 ranks, 1 MiB .. 64 MiB of float32
    python benchmarks/mpi_cuda.py --ranks 8 --sizes 1MiB:256MiB --iters 20

Sections, one table each, every figure measured side by side in this run:

codecs
    each codec's compress and decompress kernels (runtime/collc_codecs.cuh
    through CuPy, as benchmarks/gpu.py runs them) on --codec-size bytes of
    N(0, 1) float32, against a device-to-device copy of the same bytes:
    "vs copy" = t_copy / t_kernel (the goal is >= 0.60).  Every payload is
    first checked bit for bit against the numpy reference.
allreduce
    ring_allreduce, swing_bw and compressed_ring_allreduce at p = --ranks,
    for each size (bytes of float32 per rank):
      mpi-cuda  the generated mpi-cuda executor, p MPI processes (ranks share
                the GPUs round robin), each rank's mean wall time per call,
                averaged over ranks (the driver's OSU-style row), with the
                default transport (CUDA IPC, stream-ordered where it can be);
      staged    the same library with COLLC_TRANSPORT=mpi: every message over
                MPI, staged through pinned host memory (pip's MPICH is not
                CUDA-aware), the transport of earlier releases;
      cuda      the single-process cuda target, p virtual ranks, CUDA events;
      nccl      ncclAllReduce through CuPy, one communicator per GPU in one
                process (NCCL puts one rank on each GPU: measured only with
                at least p GPUs).
    "cuda/mpi", "nccl/mpi" and "staged/mpi" are time ratios: above 1, mpi-cuda
    is faster.
    #wrong counts elements that differ from numpy (compressed: from the numpy
    executor, or beyond the verified error bound).

Without a GPU it prints why nothing was measured and exits 0.  Without CuPy
only the mpi-cuda column is measured.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import collc  # noqa: E402
from collc.backends import cuda, mpi_cuda  # noqa: E402
from collc.cli import parse_size, parse_sizes  # noqa: E402
from collc.codecs import parse_codec  # noqa: E402
from collc.diagnostics import CollError  # noqa: E402
from collc.verify.compression import analyse  # noqa: E402

ALGORITHMS = ("ring_allreduce", "swing_bw", "compressed_ring_allreduce")
CODECS = "ebq(eb=1e-3);fwq(bits=8, block=32);hq(eb=1e-3);fp16;bf16;lossless"
GOAL = 0.60


def codec_section(cp: ModuleType, specs: list[str], size: int, iters: int) -> None:
    import gpu as gpu_bench  # benchmarks/gpu.py: the codec kernels through CuPy

    n = size // 4
    k = gpu_bench.Kernels(cp)
    x = cp.random.default_rng(0).standard_normal(n, dtype=np.float32)
    copy = cp.empty_like(x)
    t_copy = gpu_bench.timed(cp, lambda: copy.data.copy_from_device_async(x.data, size), iters)
    print(
        f"\n# codecs: {size / 2**20:.0f} MiB of N(0, 1) float32; a device-to-device copy of it: {t_copy * 1e6:.1f} us"
    )
    print(f"  {'codec':<24} {'ratio':>7} {'comp(us)':>9} {'vs copy':>8} {'decomp(us)':>11} {'vs copy':>8}  numpy-exact")
    for spec in specs:
        codec = parse_codec(spec)
        if not codec.cuda_kernels:
            print(f"  {codec.spec:<24} (no CUDA kernels)")
            continue
        sample = x[: min(n, 1 << 20)]
        exact = gpu_bench.check_bit_exact(cp, gpu_bench.GpuCodec(k, codec, sample.size), sample)
        g = gpu_bench.GpuCodec(k, codec, n)
        g.compress(x)
        ratio = size / g.payload_bytes()
        tc = gpu_bench.timed(cp, lambda g=g: g.compress(x), iters)
        td = gpu_bench.timed(cp, g.decompress, iters)
        flags = "" if min(t_copy / tc, t_copy / td) >= GOAL else f"  (below the {GOAL:.2f} goal)"
        print(
            f"  {codec.spec:<24} {ratio:>7.2f} {tc * 1e6:>9.1f} {t_copy / tc:>8.2f} {td * 1e6:>11.1f} "
            f"{t_copy / td:>8.2f}  {'yes' if exact else 'NO: MISMATCH'}{flags}"
        )


def nccl_us(cp: ModuleType | None, p: int, count: int, iters: int) -> float | None:
    """Mean wall time of ncclAllReduce (float32, sum) over p GPUs, one per rank; None when it cannot run."""
    if cp is None or cp.cuda.runtime.getDeviceCount() < p:
        return None
    try:
        from cupy.cuda import nccl
    except ImportError:
        return None
    if not getattr(nccl, "available", True):
        return None
    comms = nccl.NcclCommunicator.initAll(list(range(p)))
    bufs, streams = [], []
    for d in range(p):
        with cp.cuda.Device(d):
            bufs.append(cp.ones(max(count, 1), dtype=np.float32))
            streams.append(cp.cuda.Stream(non_blocking=True))

    def once() -> None:
        nccl.groupStart()
        for d in range(p):
            with cp.cuda.Device(d):
                ptr = bufs[d].data.ptr
                comms[d].allReduce(ptr, ptr, count, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, streams[d].ptr)
        nccl.groupEnd()
        for s in streams:
            s.synchronize()

    once()
    start = time.perf_counter()
    for _ in range(iters):
        once()
    return (time.perf_counter() - start) / iters * 1e6


def allreduce_section(cp: ModuleType | None, p: int, sizes: list[int], iters: int, ngpus: int, arch: str) -> None:
    counts = [size // 4 for size in sizes]
    print(f"\n# allreduce: p={p} ranks on {ngpus} GPU(s), float32 sum, {iters} timed iterations")
    print(
        f"  {'algorithm':<26} {'size':>10} {'mpi-cuda(us)':>13} {'cuda(us)':>10} {'nccl(us)':>10} "
        f"{'staged(us)':>11} {'cuda/mpi':>9} {'nccl/mpi':>9} {'staged/mpi':>11} {'#wrong':>7}"
    )
    transport = ""
    nccl_times = {count: nccl_us(cp, p, count, iters) for count in counts}
    for name in ALGORITHMS:
        instance = collc.load(name).instantiate(p=p)
        schedule = instance.schedule
        bounds = analyse(schedule, input_bound=1.0).bound if schedule.compresses() else None
        with tempfile.TemporaryDirectory(prefix="collc-bench-") as tmp:
            out = Path(tmp) / "build"
            mpi_cuda.generate(schedule, out, arch=arch)
            _, driver = mpi_cuda.build(out, schedule, arch=arch)
            runs = {}
            for k in ("auto", "mpi"):
                runs[k] = mpi_cuda.run_built(
                    schedule, driver, counts, "float32", "sum", iters, warmup=2, workdir=Path(tmp) / k,
                    error_bounds=bounds, env={"COLLC_TRANSPORT": k},
                )  # fmt: skip
            rows, staged_rows = runs["auto"], runs["mpi"]
        transport = rows[0].transport
        staged = {r.count: r for r in staged_rows}
        single = {}
        if cp is not None:
            single = {r.count: r for r in cuda.run(schedule, counts, "float32", "sum", iters, error_bounds=bounds)}
        for row in rows:
            base = single.get(row.count)
            ref = nccl_times[row.count] if not schedule.compresses() else None
            st = staged[row.count]
            cols = [
                f"{base.avg_us:>10.1f}" if base else f"{'-':>10}",
                f"{ref:>10.1f}" if ref else f"{'-':>10}",
                f"{st.avg_us:>11.1f}",
                f"{base.avg_us / row.avg_us:>9.2f}" if base else f"{'-':>9}",
                f"{ref / row.avg_us:>9.2f}" if ref else f"{'-':>9}",
                f"{st.avg_us / row.avg_us:>11.2f}",
            ]
            wrong = row.wrong + st.wrong + (base.wrong if base else 0)
            print(f"  {name:<26} {row.size_bytes:>10} {row.avg_us:>13.1f} {' '.join(cols)} {wrong:>7}")
    print(f"  mpi-cuda transport: {transport}")
    if all(t is None for t in nccl_times.values()):
        print(f"  nccl: not measured (needs CuPy with NCCL and at least p={p} GPUs; this machine has {ngpus})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", "-p", type=int, default=4)
    parser.add_argument("--sizes", default="1MiB:64MiB", help="bytes of float32 per rank, a doubling sweep LOW:HIGH")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--codec-size", default="64MiB")
    parser.add_argument("--codecs", default=CODECS, help="codec specs separated by ';'")
    args = parser.parse_args()
    try:
        ngpus, arch = mpi_cuda.visible_gpus()
    except CollError as err:
        print(f"no GPU: nothing measured ({err})")
        return 0
    try:
        cp: ModuleType | None = cuda.cupy_module()
    except CollError as err:
        cp = None
        print(f"# {err}: only the mpi-cuda column is measured")
    print(f"# {ngpus} GPU(s), {arch}" + (f", {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}" if cp else ""))
    if cp is not None:
        specs = [s.strip() for s in args.codecs.split(";") if s.strip()]
        codec_section(cp, specs, parse_size(args.codec_size), args.iters)
    allreduce_section(cp, args.ranks, parse_sizes(args.sizes), args.iters, ngpus, arch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
