"""GPU numbers for the cuda target and the codec kernels, on one GPU (compression.md §6: R1, R2/R3, R8).

    python benchmarks/gpu.py                        # every section, default sizes
    python benchmarks/gpu.py --ranks 8 --size 256MiB --iters 20 --codecs "ebq(eb=1e-3),fp16"
    python benchmarks/gpu.py --sections codecs,r8   # skip the allreduce table (copy is always measured)

Sections, one table each:

copy (R1)
    a device-to-device copy of --copy-size (1 GiB).  B_copy = (bytes read +
    bytes written) / time = 2 * size / time: the memory roofline everything
    else is compared with.
allreduce
    the generated cuda library of ring_allreduce and swing_bw at p = --ranks,
    all ranks on this GPU (virtual ranks), each with --size bytes of float32,
    then the compressed allreduces (compressed_ring_allreduce: ebq on every
    reduce-scatter hop, fused decompress + reduce + compress, then a
    collective-level allgather; homomorphic_allreduce: hq payloads added),
    whose results must match the numpy executor bit for bit ("#wrong") and
    whose error ("max|err|") must stay within the verifier's bound.
    floor = 2 * p * size / B_copy: every rank must read its input and write
    its result once, and the p ranks share one memory.  %floor = floor / time.
    %model = (bytes the executor moves) / B_copy / time, where a transfer
    counts its bytes twice (read, write) and applying a scratch message
    twice more for a copy, three times for a reduction (read both, write).
codecs (R2, R3)
    each codec's kernels (runtime/collc_codecs.cuh, through CuPy's RawModule)
    on --size bytes of N(0, 1) float32: compress and decompress rate (float32
    bytes in or out per second) as % of B_copy, and the compression ratio.
    Every payload is first checked bit for bit against the numpy reference.
R8
    ring allgather and reduce-scatter on N = --ranks ranks with a modeled wire
    (latency alpha, bandwidth B) and the measured times of --r8-codec's
    kernels on one chunk (size / N): t_C compress, t_D decompress, t_R the
    float32 reduction, t_F the fused decompress + add + compress.
        p2p allgather           (N-1) (alpha + t_C + w + t_D)
        collective allgather    t_C + (N-1) (alpha + w) + t_D
        p2p reduce-scatter      (N-1) (alpha + t_C + w + t_D + t_R)
        collective r-s (fused)  t_C + (N-1) (alpha + w) + (N-2) t_F + t_D + t_R
    with w = chunk / (CR * B); "vs p2p" is the p2p time over the collective
    one (the seed reports 1.43x for allgather, 1.68x for reduce-scatter).

Without a GPU (or without CuPy) it prints "no GPU: nothing measured" and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import collc  # noqa: E402
from collc import collectives  # noqa: E402
from collc.backends import cuda, tables  # noqa: E402
from collc.cli import parse_size  # noqa: E402
from collc.diagnostics import CollError  # noqa: E402
from collc.ir import Schedule  # noqa: E402
from collc.resources import data_dir  # noqa: E402

THREADS = 256
SCAN_TILE = 256 * 16  # COLLC_SCAN_TILE
SEED_SPEEDUP = {"allgather": 1.43, "reduce-scatter": 1.68}


def timed(cp: ModuleType, fn: Callable[[], object], iters: int) -> float:
    """Mean seconds of ``fn`` on the current stream (CUDA events), after one warm-up call."""
    fn()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / 1e3 / iters


def gbps(nbytes: float, seconds: float) -> float:
    return nbytes / seconds / 1e9


# --------------------------------------------------------------------------
# R1 and the allreduce
# --------------------------------------------------------------------------


def copy_bandwidth(cp: ModuleType, size: int, iters: int) -> float:
    src = cp.ones(size, dtype=np.uint8)
    dst = cp.empty_like(src)
    t = timed(cp, lambda: dst.data.copy_from_device_async(src.data, size), iters)
    print(f"# copy (R1): {size / 2**30:.2f} GiB device to device in {t * 1e3:.3f} ms")
    b_copy = 2 * size / t
    print(f"  B_copy = 2 * size / time = {b_copy / 1e9:.1f} GB/s")
    return b_copy


def executor_bytes(schedule: Schedule, count: int, itemsize: int) -> int:
    """Bytes of memory traffic the cuda executor generates for one call (see the module docstring)."""
    off = collectives.element_offsets(
        schedule.collective, schedule.nranks, schedule.nchunks, count, schedule.chunk_weights
    )
    total = 0
    for msgs in cuda.step_messages(tables.from_schedule(schedule)).values():
        for m in msgs:
            for r in m.runs:
                b = int(off[r.hi] - off[r.lo]) * itemsize
                total += 2 * b + (0 if m.direct else (3 if r.reduce else 2) * b)
    return total


def allreduce(b_copy: float, ranks: int, size: int, iters: int) -> None:
    count = size // 4
    print(f"\n# allreduce: {ranks} virtual ranks on one GPU, {size / 2**20:.0f} MiB of float32 per rank")
    header = f"{'algorithm':<26} {'time(ms)':>10} {'busbw(GB/s)':>12} {'%floor':>7} {'%model':>7} {'#wrong':>7}"
    print(f"  {header} {'max|err|':>10} {'bound':>10}")
    floor = 2 * ranks * size / b_copy
    for name in ("ring_allreduce", "swing_bw", "compressed_ring_allreduce", "homomorphic_allreduce"):
        instance = collc.load(name).instantiate(p=ranks)
        schedule = instance.schedule
        (row,) = instance.run_cuda([count], "float32", "sum", iters=iters)  # with the verifier's error bounds
        t = row.avg_us * 1e-6
        model = "-" if schedule.compresses() else f"{100 * executor_bytes(schedule, count, 4) / b_copy / t:.1f}%"
        busbw = gbps(size, t) * collectives.busbw_factor(schedule.collective, ranks)
        errors = "" if row.error_bound is None else f" {row.max_abs_error:>10.3g} {row.error_bound:>10.3g}"
        print(
            f"  {name:<26} {t * 1e3:>10.3f} {busbw:>12.1f} {100 * floor / t:>6.1f}% {model:>7} {row.wrong:>7}{errors}"
        )


# --------------------------------------------------------------------------
# Codec kernels (the launch protocol is documented at the top of collc_codecs.cuh)
# --------------------------------------------------------------------------


class Kernels:
    """runtime/collc_codecs.cuh through CuPy's RawModule."""

    def __init__(self, cp: ModuleType) -> None:
        self.cp = cp
        options = ("-I" + str(data_dir("runtime")), "--std=c++17")
        self.module = cp.RawModule(code='#include "collc_codecs.cuh"\n', options=options)
        self.bad = cp.full(1, np.iinfo(np.uint64).max, dtype=np.uint64)

    def launch(self, name: str, items: int, *args: Any) -> None:
        blocks = max(1, -(-items // THREADS))
        self.module.get_function(name)((blocks,), (THREADS,), args)

    def scan(self, kind: str, data: Any, count: int) -> None:
        """In place: exclusive for u64 (sizes -> offsets), inclusive wrapping for u32 (deltas -> words)."""
        tiles = max(1, -(-count // SCAN_TILE))
        partials = self.cp.zeros(tiles, dtype=np.uint64 if kind == "u64" else np.uint32)
        n = np.uint64(count)
        self.module.get_function(f"collc_scan_{kind}_reduce")((tiles,), (THREADS,), (data, n, partials))
        self.module.get_function(f"collc_scan_{kind}_spine")((1,), (THREADS,), (partials, np.uint64(tiles)))
        self.module.get_function(f"collc_scan_{kind}_apply")((tiles,), (THREADS,), (data, n, partials))


class GpuCodec:
    """compress(x) -> payload bytes and decompress(payload) -> x for one configured codec, on the GPU."""

    def __init__(self, k: Kernels, codec: Any, n: int) -> None:
        self.k, self.codec, self.n = k, codec, n
        cp = k.cp
        self.payload = cp.zeros(codec.max_compressed_bytes(n), dtype=np.uint8)
        self.out = cp.zeros(n, dtype=np.float32)
        self.items = -(-n // 32)  # ebq blocks, lossless groups
        self.sizes = cp.zeros(self.items + 1, dtype=np.uint64)
        self.words = cp.zeros(n, dtype=np.uint32)

    def compress(self, x: Any) -> None:
        """Encode x into self.payload (enqueued on the current stream; `payload_bytes` gives its size)."""
        k, c, n, un = self.k, self.codec, self.n, np.uint64(self.n)
        if c.name == "ebq":
            k.launch("collc_ebq_encode_sizes", self.items + 1, x, un, c.inv2eb, self.payload, self.sizes, k.bad)
            k.scan("u64", self.sizes, self.items + 1)
            k.launch("collc_ebq_encode_body", self.items, x, un, c.inv2eb, self.payload, self.sizes)
        elif c.name == "lossless":
            w = x.view(np.uint32)
            k.launch("collc_lossless_encode_sizes", self.items + 1, w, un, self.payload, self.sizes)
            k.scan("u64", self.sizes, self.items + 1)
            k.launch("collc_lossless_encode_body", self.items, w, un, self.payload, self.sizes)
        elif c.name == "fwq":
            bits, block = np.int32(c.bits), np.int32(c.block)
            k.launch("collc_fwq_encode", -(-n // c.block), x, un, bits, block, self.payload, k.bad)
        elif c.name == "hq":
            k.launch("collc_hq_encode", n, x, un, c.inv2eb, self.payload.view(np.int32), k.bad)
        else:  # fp16, bf16
            k.launch(f"collc_{c.name}_encode", n, x, un, self.payload.view(np.uint16), k.bad)

    def payload_bytes(self) -> int:
        """The size of the payload the last `compress` wrote (waits for it)."""
        if self.codec.name == "ebq":  # the widths header, then the bodies
            return (self.items + 3) // 4 * 4 + int(self.sizes[self.items])
        if self.codec.name == "lossless":  # the bitmaps, then the words
            return 4 * self.items + int(self.sizes[self.items])
        return int(self.codec.max_compressed_bytes(self.n))

    def decompress(self) -> Any:
        """Decode self.payload into self.out (a float32 array)."""
        k, c, n, un = self.k, self.codec, self.n, np.uint64(self.n)
        if c.name == "ebq":
            k.launch("collc_ebq_decode_sizes", self.items + 1, self.payload, un, self.sizes)
            k.scan("u64", self.sizes, self.items + 1)
            k.launch("collc_ebq_decode_body", self.items, self.payload, un, c.step, self.sizes, self.out)
        elif c.name == "lossless":
            k.launch("collc_lossless_decode_sizes", self.items + 1, self.payload, un, self.sizes)
            k.scan("u64", self.sizes, self.items + 1)
            k.launch("collc_lossless_decode_deltas", self.items, self.payload, un, self.sizes, self.words)
            k.scan("u32", self.words, n)
            return self.words.view(np.float32)
        elif c.name == "fwq":
            bits, block = np.int32(c.bits), np.int32(c.block)
            k.launch("collc_fwq_decode", -(-n // c.block), self.payload, un, bits, block, self.out)
        elif c.name == "hq":
            k.launch("collc_hq_decode", n, self.payload.view(np.int32), un, c.step, self.out)
        else:
            k.launch(f"collc_{c.name}_decode", n, self.payload.view(np.uint16), un, self.out)
        return self.out

    def fused(self, local: Any, out_payload: Any, out_sizes: Any) -> None:
        """ebq only: out_payload = ebq(decode(self.payload) + local); self.sizes must hold the input's offsets."""
        k, c, un = self.k, self.codec, np.uint64(self.n)
        args = (self.payload, self.sizes, local, un, c.step, c.inv2eb, out_payload)
        k.launch("collc_ebq_reduce_sizes", self.items + 1, *args, out_sizes, k.bad)
        k.scan("u64", out_sizes, self.items + 1)
        k.launch("collc_ebq_reduce_body", self.items, *args, out_sizes, self.out)


def check_bit_exact(cp: ModuleType, g: GpuCodec, x: Any) -> bool:
    """Whether the GPU payload and decoded values are the numpy reference's, byte for byte."""
    host = cp.asnumpy(x)
    g.compress(x)
    size = g.payload_bytes()
    payload = cp.asnumpy(g.payload[:size])
    if payload.tobytes() != g.codec.compress(host).tobytes():
        return False
    return cp.asnumpy(g.decompress()).tobytes() == g.codec.decompress(payload, host.size).tobytes()


def codec_table(cp: ModuleType, k: Kernels, specs: list[str], b_copy: float, size: int, iters: int) -> None:
    n = size // 4
    x = cp.random.default_rng(0).standard_normal(n, dtype=np.float32)
    print(f"\n# codecs (R2, R3): {size / 2**20:.0f} MiB of N(0, 1) float32, rates as % of B_copy")
    print(f"  {'codec':<24} {'ratio':>7} {'comp(GB/s)':>11} {'%B':>6} {'decomp(GB/s)':>13} {'%B':>6}  numpy-exact")
    for spec in specs:
        codec = collc.codecs.parse_codec(spec)
        if not codec.cuda_kernels:
            print(f"  {codec.spec:<24} (no CUDA kernels)")
            continue
        sample = x[: min(n, 1 << 20)]
        exact = check_bit_exact(cp, GpuCodec(k, codec, sample.size), sample)
        g = GpuCodec(k, codec, n)
        g.compress(x)
        nbytes = g.payload_bytes()
        tc = timed(cp, lambda g=g: g.compress(x), iters)
        td = timed(cp, g.decompress, iters)
        rc, rd = gbps(size, tc), gbps(size, td)
        print(
            f"  {codec.spec:<24} {size / nbytes:>7.2f} {rc:>11.1f} {100 * rc * 1e9 / b_copy:>5.1f}% "
            f"{rd:>13.1f} {100 * rd * 1e9 / b_copy:>5.1f}%  {'yes' if exact else 'NO: MISMATCH'}"
        )


# --------------------------------------------------------------------------
# R8: collective-level against point-to-point compression, modeled wire
# --------------------------------------------------------------------------


def r8(cp: ModuleType, k: Kernels, spec: str, ranks: int, size: int, iters: int, alphas: list[float]) -> None:
    codec = collc.codecs.parse_codec(spec)
    n = size // 4 // ranks  # one chunk
    chunk = 4 * n
    rng = cp.random.default_rng(1)
    x, local = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    g = GpuCodec(k, codec, n)
    g.compress(x)
    cr = chunk / g.payload_bytes()
    t_c = timed(cp, lambda: g.compress(x), iters)
    t_d = timed(cp, g.decompress, iters)
    acc = cp.zeros_like(local)
    t_r = timed(cp, lambda: cp.add(acc, local, out=acc), iters)
    if codec.name == "ebq":
        g.compress(x)  # self.sizes: the input's offsets
        out_payload, out_sizes = cp.zeros_like(g.payload), cp.zeros_like(g.sizes)
        t_f = timed(cp, lambda: g.fused(local, out_payload, out_sizes), iters)
        fused = "fused kernel"
    else:
        t_f = t_d + t_r + t_c
        fused = "no fused kernel: t_F = t_D + t_R + t_C"
    print(f"\n# R8: ring on N={ranks} ranks, {codec.spec}, chunk {chunk / 2**20:.2f} MiB, CR {cr:.2f} ({fused})")
    print(f"  t_C {t_c * 1e6:.1f} us, t_D {t_d * 1e6:.1f} us, t_R {t_r * 1e6:.1f} us, t_F {t_f * 1e6:.1f} us")
    head = f"{'allgather vs p2p':>17} {'vs raw':>7} {'reduce-scatter vs p2p':>22} {'vs raw':>7}"
    print(f"  {'alpha(us)':>9} {'B(GB/s)':>8} {head}")
    steps = ranks - 1
    for alpha in alphas:
        for bw in (12.5e9, 25e9, 50e9):
            w, raw_w = chunk / cr / bw, chunk / bw
            ag_p2p = steps * (alpha + t_c + w + t_d)
            ag_coll = t_c + steps * (alpha + w) + t_d
            ag_raw = steps * (alpha + raw_w)
            rs_p2p = steps * (alpha + t_c + w + t_d + t_r)
            rs_coll = t_c + steps * (alpha + w) + max(steps - 1, 0) * t_f + t_d + t_r
            rs_raw = steps * (alpha + raw_w + t_r)
            print(
                f"  {alpha * 1e6:>9.1f} {bw / 1e9:>8.1f} {ag_p2p / ag_coll:>16.2f}x {ag_raw / ag_coll:>6.2f}x "
                f"{rs_p2p / rs_coll:>21.2f}x {rs_raw / rs_coll:>6.2f}x"
            )
    seed = ", ".join(f"{k} {v}x" for k, v in SEED_SPEEDUP.items())
    print(f"  (seed, vs p2p: {seed})")


# --------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copy-size", default="1GiB")
    parser.add_argument("--size", default="256MiB", help="bytes per rank (allreduce), per codec input, R8 total")
    parser.add_argument("--ranks", "-p", type=int, default=8)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--codecs", default="ebq(eb=1e-3);ebq(eb=1e-2);fwq(bits=8, block=32);fwq(bits=4, block=64);"
                        "hq(eb=1e-3);fp16;bf16;lossless", help="codec specs separated by ';'")  # fmt: skip
    parser.add_argument("--r8-codec", default="ebq(eb=1e-3)")
    parser.add_argument("--alpha", default="2e-6,5e-6", help="modeled latencies in seconds, comma-separated")
    parser.add_argument("--sections", default="allreduce,codecs,r8",
                        help="which of allreduce, codecs, r8 to run, comma-separated (copy always runs)")  # fmt: skip
    args = parser.parse_args()
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    unknown = sections - {"allreduce", "codecs", "r8"}
    if unknown:
        parser.error(f"--sections: unknown section(s) {', '.join(sorted(unknown))}; known: allreduce, codecs, r8")

    try:
        cp = cuda.cupy_module()
    except CollError:
        print("no GPU: nothing measured")
        return 2
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"# {props['name'].decode()}, CuPy {cp.__version__}")
    size = parse_size(args.size)
    b_copy = copy_bandwidth(cp, parse_size(args.copy_size), args.iters)
    if "allreduce" in sections:
        allreduce(b_copy, args.ranks, size, args.iters)
    if not sections & {"codecs", "r8"}:
        return 0
    try:
        import collc.codecs  # noqa: F401

        if not (data_dir("runtime") / "collc_codecs.cuh").is_file():
            raise ImportError("runtime/collc_codecs.cuh is missing")
        kernels = Kernels(cp)
    except ImportError as err:
        print(f"\n# codecs: not available ({err}): nothing measured")
        return 0
    if "codecs" in sections:
        specs = [s.strip() for s in args.codecs.split(";") if s.strip()]
        codec_table(cp, kernels, specs, b_copy, size, args.iters)
    if "r8" not in sections:
        return 0
    alphas = [float(a) for a in args.alpha.split(",")]
    r8(cp, kernels, args.r8_codec, args.ranks, size, args.iters, alphas)
    return 0


if __name__ == "__main__":
    sys.exit(main())
