"""The mpi-c runtime's CPU codecs, ebq and fwq, against a baseline build of them: GB/s per core, side by side.

A C driver (benchmarks/data/codecs_cpu.c) is linked with two builds of ``runtime/collc_zcodec.h`` and
``runtime/collc_codecs.h``: the working tree's ("new") and a baseline ("old", by default the headers of
git ``HEAD``, copied into a temporary directory).  Both are compiled with the mpi-c target's flags
(``collc.backends.mpi_c.CFLAGS``: ``-O3 -ffp-contract=off``, no ``-march``).  In one process and one
thread, every round times old encode, new encode, old decode and new decode of the same input,
rotating their order from round to round; the table gives the medians.  Before timing, the driver
checks that both builds give the same payload bytes and the same decoded values (it stops otherwise).

GB/s counts float32 bytes (4 per element) on both directions, per core: one thread.  Inputs: random
values in [-1, 1] ("uniform") and a smooth signal of slow sines ("smooth").

    python benchmarks/codecs_cpu.py                          # 64 MiB, 7 rounds, ebq(eb=1e-3), fwq(bits=8, block=32)
    python benchmarks/codecs_cpu.py --mib 16 --rounds 3
    python benchmarks/codecs_cpu.py --baseline HEAD~3        # another git revision as "old"
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collc.backends import mpi_c  # noqa: E402
from collc.codecs import Ebq, Fwq, parse_codec  # noqa: E402

DRIVER = ROOT / "benchmarks" / "data" / "codecs_cpu.c"
HEADERS = ("collc_codecs.h", "collc_zcodec.h")
SPECS = ("ebq(eb=1e-3)", "fwq(bits=8, block=32)")
SIGNALS = ("uniform", "smooth")
KINDS = {"ebq": 1, "fwq": 2}


@dataclass(frozen=True)
class Row:
    spec: str
    signal: str
    direction: str
    old: float  # median seconds
    new: float
    ratio: float  # payload bytes / input bytes


def compiler() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("no C compiler (cc or gcc) on PATH")
    return cc


def baseline_headers(revision: str, into: Path) -> Path:
    """The codec headers of a git revision, written to `into`."""
    into.mkdir(parents=True, exist_ok=True)
    for name in HEADERS:
        show = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{revision}:runtime/{name}"], capture_output=True, text=True
        )
        if show.returncode != 0:
            sys.exit(f"git show {revision}:runtime/{name} failed: {show.stderr.strip()}")
        (into / name).write_text(show.stdout)
    return into


def build(tmp: Path, old_dir: Path) -> Path:
    """The driver linked with the old codecs (from old_dir) and the new ones (runtime/)."""
    cc = compiler()
    flags = [f for f in mpi_c.CFLAGS if f != "-shared"]
    objects = []
    for side, include in (("0", old_dir), ("1", ROOT / "runtime"), (None, None)):
        obj = tmp / f"side{side}.o"
        defines = [f"-DCODECS_SIDE={side}", "-I", str(include)] if side is not None else []
        cmd = [cc, *flags, *defines, "-c", "-o", str(obj), str(DRIVER)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{' '.join(cmd)}\n{done.stderr}")
        objects.append(str(obj))
    exe = tmp / "codecs_cpu"
    done = subprocess.run([cc, "-o", str(exe), *objects, "-lm"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(done.stderr)
    return exe


def f32_bits(value: np.float32) -> str:
    return f"{int(np.float32(value).view(np.uint32)):08x}"


def measure(exe: Path, spec: str, signal: str, n: int, rounds: int) -> list[Row]:
    codec = parse_codec(spec)
    step = inv2eb = np.float32(0)
    bits = block = 0
    if isinstance(codec, Ebq):
        step, inv2eb = codec.step, codec.inv2eb
    if isinstance(codec, Fwq):
        bits, block = codec.bits, codec.block
    args = [str(n), str(rounds), str(KINDS[codec.name]), f32_bits(step), f32_bits(inv2eb), str(bits), str(block)]
    done = subprocess.run([str(exe), *args, signal], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{spec} on {signal}: {done.stderr.strip()} (exit {done.returncode})")
    times: dict[tuple[str, str], list[float]] = {}
    payload = 0
    for line in done.stdout.splitlines():
        words = line.split()
        if words[0] == "payload":
            payload = int(words[1])
        else:
            times.setdefault((words[0], words[1]), []).append(float(words[2]))
    return [
        Row(
            spec,
            signal,
            direction,
            statistics.median(times[direction, "old"]),
            statistics.median(times[direction, "new"]),
            payload / (4 * n),
        )
        for direction in ("encode", "decode")
    ]


def table(rows: list[Row], n: int) -> str:
    gb = 4 * n / 1e9
    lines = [
        f"{'codec':<22} {'signal':<8} {'direction':<9} {'old GB/s':>9} {'new GB/s':>9} {'speedup':>8} {'ratio':>6}",
    ]
    for r in rows:
        lines.append(
            f"{r.spec:<22} {r.signal:<8} {r.direction:<9} {gb / r.old:>9.2f} {gb / r.new:>9.2f} "
            f"{r.old / r.new:>7.2f}x {r.ratio:>6.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=64, help="input size in MiB of float32 (default 64)")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per codec and signal (default 7)")
    parser.add_argument("--baseline", default="HEAD", help="git revision of the old headers (default HEAD)")
    parser.add_argument("--specs", nargs="+", default=list(SPECS), help="codec specs (ebq and fwq)")
    parser.add_argument("--signals", nargs="+", default=list(SIGNALS), choices=SIGNALS)
    args = parser.parse_args(argv)
    n = args.mib * (1 << 20) // 4
    with tempfile.TemporaryDirectory(prefix="codecs_cpu_") as tmp:
        old_dir = baseline_headers(args.baseline, Path(tmp) / "old")
        exe = build(Path(tmp), old_dir)
        rows = [
            row for spec in args.specs for signal in args.signals for row in measure(exe, spec, signal, n, args.rounds)
        ]
    print(f"# {platform.machine()}, {platform.processor() or platform.system()}, one thread; {args.mib} MiB float32; "
          f"medians of {args.rounds} rounds; old = {args.baseline}, new = working tree; payloads and decoded values "
          "equal byte for byte")  # fmt: skip
    print(table(rows, n))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
