"""The mpi-c runtime's codecs (``runtime/collc_zcodec.h``, plain C) against the numpy references.

``tests/mpi_c/codecs_c.c`` exposes them through ctypes, built as C99 with the
mpi-c target's flags, once as the target builds it and once with
``COLLC_ZCODEC_PORTABLE`` (the plain-C paths that replace the SSE2 ones).  For
every codec, on random data and on the edge values (NaN, ±Inf, subnormals, ±0,
runs of zeros and constants, values at the codecs' limits, huge ranges), and
for ebq and fwq at every bit width with tails of every length: the C encoder
gives numpy's payload byte for byte, or refuses the same first element; the C
decoder gives numpy's values bit for bit; the payload size read back from a
payload's header is its size, and the largest size is numpy's
``max_compressed_bytes``.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from collc.backends import mpi_c
from collc.codecs import Codec, CodecValueError, Ebq, Fwq, Hq, Lossless, parse_codec
from collc.codecs.ebq import EBQ_MAX_BITS
from collc.codecs.fwq import FWQ_MAX_BITS, FWQ_MIN_BITS

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "mpi_c" / "codecs_c.c"
KINDS = {"ebq": 1, "fwq": 2, "hq": 3, "fp16": 4, "bf16": 5, "lossless": 6}
SPECS = (
    "ebq(eb=1e-3)",
    "ebq(eb=0.5)",
    "ebq(eb=1e-30)",
    "ebq(eb=1e30)",
    "fwq(bits=8, block=32)",
    "fwq(bits=2, block=32)",
    "fwq(bits=3, block=96)",
    "fwq(bits=4, block=64)",
    "fwq(bits=11, block=128)",
    "hq(eb=1e-3)",
    "hq(eb=7.5)",
    "fp16",
    "bf16",
    "lossless",
)
U64 = ctypes.c_uint64
PTR = ctypes.c_void_p
F32 = ctypes.c_float
INT = ctypes.c_int


@pytest.fixture(scope="module", params=["default", "portable"])
def lib(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """The codecs as the mpi-c target builds them, and with COLLC_ZCODEC_PORTABLE (no SSE2 code: plain C only)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("codecs_c") / "libcodecs_c.so"
    flags = ["-DCOLLC_ZCODEC_PORTABLE"] if request.param == "portable" else []
    cmd = [cc, "-std=c99", "-pedantic", *mpi_c.CFLAGS, *flags, "-I", str(ROOT / "runtime"), "-o", str(out)]
    cmd += [str(SOURCE), "-lm"]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    lib = ctypes.CDLL(str(out))
    head = [INT, F32, F32, INT, INT]
    lib.zmax.argtypes, lib.zmax.restype = [*head, U64, INT], U64
    lib.zsize.argtypes, lib.zsize.restype = [*head, PTR, U64, U64, INT], U64
    lib.zenc.argtypes, lib.zenc.restype = [*head, PTR, U64, PTR, PTR], U64
    lib.zdec.argtypes, lib.zdec.restype = [*head, PTR, U64, PTR], None
    lib.zenc_words.argtypes, lib.zenc_words.restype = [PTR, U64, INT, PTR], U64
    lib.zdec_words.argtypes, lib.zdec_words.restype = [PTR, U64, INT, PTR], None
    lib.zhq_add.argtypes, lib.zhq_add.restype = [PTR, PTR, U64], U64
    return lib


NONE = 2**64 - 1


def head(c: Codec) -> list[object]:
    step = inv2eb = np.float32(0)
    bits = block = 0
    if isinstance(c, (Ebq, Hq)):
        step, inv2eb = c.step, c.inv2eb
    if isinstance(c, Fwq):
        bits, block = c.bits, c.block
    return [KINDS[c.name], float(step), float(inv2eb), bits, block]


def c_encode(lib: ctypes.CDLL, c: Codec, x: np.ndarray) -> tuple[np.ndarray | None, int]:
    """(payload, -1) or (None, index of the first refused value)."""
    x = np.ascontiguousarray(x)
    dim = x.dtype.itemsize // 4
    room = int(lib.zmax(*head(c), x.size, dim)) + 4
    out = np.full(room, 0xAB, dtype=np.uint8)
    if isinstance(c, Lossless):
        size = lib.zenc_words(x.ctypes.data, x.size * dim, dim, out.ctypes.data)
        return out[:size], -1
    bad = np.zeros(1, dtype=np.uint64)
    values = x.astype(np.float32)  # kept alive through the call
    size = lib.zenc(*head(c), values.ctypes.data, x.size, out.ctypes.data, bad.ctypes.data)
    if size == NONE:
        return None, int(bad[0])
    assert out[size:].tolist() == [0xAB] * (room - size)  # nothing written beyond the payload
    return out[:size], -1


def c_decode(lib: ctypes.CDLL, c: Codec, payload: np.ndarray, n: int, dtype: np.dtype) -> np.ndarray:
    data = np.ascontiguousarray(payload)
    if isinstance(c, Lossless):
        dim = dtype.itemsize // 4
        words = np.zeros(n * dim, dtype=np.uint32)
        lib.zdec_words(data.ctypes.data, n * dim, dim, words.ctypes.data)
        return words.view(dtype)
    out = np.zeros(n, dtype=np.float32)
    lib.zdec(*head(c), data.ctypes.data, n, out.ctypes.data)
    return out


def same(c_lib: ctypes.CDLL, c: Codec, x: np.ndarray) -> None:
    """The C codec and the numpy one agree on x: payload bytes, refusal, decoded bits, sizes."""
    dim = x.dtype.itemsize // 4
    assert int(c_lib.zmax(*head(c), x.size, dim)) == (
        c.max_compressed_bytes(x.size, x.dtype) if isinstance(c, Lossless) else c.max_compressed_bytes(x.size)
    )
    try:
        want = c.compress(x)
    except CodecValueError as err:
        got, bad = c_encode(c_lib, c, x)
        assert got is None and bad == err.index, (bad, err.index)
        return
    got, _ = c_encode(c_lib, c, x)
    assert got is not None and got.tobytes() == want.tobytes()
    decoded = c_decode(c_lib, c, want, x.size, x.dtype)
    reference = c.decompress(want, x.size, np.float32 if not isinstance(c, Lossless) else x.dtype)
    assert decoded.view(np.uint8).tobytes() == reference.view(np.uint8).tobytes()
    tail = np.concatenate([want, np.full(9, 0x0E, dtype=np.uint8)])  # the next payload's bytes after it
    size = int(c_lib.zsize(*head(c), tail.ctypes.data, tail.size, x.size, dim))
    assert size == want.size == c.payload_size(tail, x.size, x.dtype)
    if want.size:
        assert int(c_lib.zsize(*head(c), tail.ctypes.data, want.size - 1, x.size, dim)) == NONE  # cut short


def edge_values() -> np.ndarray:
    tiny = np.float32(2.0**-149)
    values = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, tiny, -tiny, 2.0**-126, 1e-40, -3e-39,
              np.finfo(np.float32).max, -np.finfo(np.float32).max, 65504.0, 65519.0, 65520.0, 3.3e38, 2.0**127,
              1e30, -1e30, 16.383, 16.3835, 32.25, 1e-3, 0.5, 0.4999, 1.5]  # fmt: skip
    return np.array(values, dtype=np.float32)


@st.composite
def data_for(draw: st.DrawFn) -> np.ndarray:
    """float32 arrays mixing edge values, wide ranges and runs of zeros or one value."""
    n = draw(st.integers(0, 300))
    kind = draw(st.sampled_from(["unit", "wide", "edges", "any"]))
    if kind == "any":
        x = draw(arrays(np.float32, n, elements=st.floats(width=32, allow_nan=True, allow_infinity=True)))
    else:
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        if kind == "unit":
            x = (rng.random(n) * 2 - 1).astype(np.float32)
        elif kind == "wide":
            x = (rng.standard_normal(n) * 10.0 ** rng.integers(-40, 38, n)).astype(np.float32)
        else:
            x = rng.choice(edge_values(), n)
    for _ in range(draw(st.integers(0, 2))):
        if n:
            at, length = draw(st.integers(0, n - 1)), draw(st.integers(1, 70))
            x[at : at + length] = 0.0 if draw(st.booleans()) else x[at]
    return x


@settings(max_examples=150, deadline=None)
@given(spec=st.sampled_from(SPECS), x=data_for())
def test_c_codecs_match_numpy_on_float32(lib: ctypes.CDLL, spec: str, x: np.ndarray) -> None:
    same(lib, parse_codec(spec), x)


@settings(max_examples=40, deadline=None)
@given(x=data_for(), scale=st.sampled_from([1.0, 1e200, 1e-300]))
def test_lossless_float64_matches_numpy(lib: ctypes.CDLL, x: np.ndarray, scale: float) -> None:
    same(lib, Lossless(), x.astype(np.float64) * scale)


@pytest.mark.parametrize("spec", SPECS)
def test_every_codec_on_the_edge_values_and_large_data(lib: ctypes.CDLL, spec: str) -> None:
    c = parse_codec(spec)
    rng = np.random.default_rng(3)
    edges = edge_values()
    finite = edges[np.isfinite(edges)]
    cases = [np.zeros(0, np.float32), edges, finite, finite[np.abs(finite) < 60000], np.zeros(1000, np.float32)]
    cases += [rng.standard_normal(100_003).astype(np.float32), (rng.random(4097) * 2 - 1).astype(np.float32)]
    if isinstance(c, (Ebq, Hq)):  # values up to the grid's limit, which both sides refuse beyond
        top = np.float32(c.max_magnitude)
        cases += [np.linspace(-top, top, 5001, dtype=np.float32), np.array([np.nextafter(top, np.inf)] * 3, np.float32)]
    for x in cases:
        same(lib, c, x)


def test_hq_payloads_add_as_numpy_does(lib: ctypes.CDLL) -> None:
    hq = parse_codec("hq(eb=1e-3)")
    rng = np.random.default_rng(5)
    a = hq.compress((rng.random(1001) * 30 - 15).astype(np.float32))
    b = hq.compress((rng.random(1001) * 30 - 15).astype(np.float32))
    acc = a.copy()
    assert lib.zhq_add(acc.ctypes.data, b.ctypes.data, 1001) == NONE
    assert acc.tobytes() == hq.add_payloads(a, b).tobytes()
    big = np.array([5, 2**31 - 1, -(2**31)], dtype="<i4").view(np.uint8)
    for other in ([0, 1, 0], [0, 0, -1]):  # element 1 overflows upwards, element 2 downwards
        addend = np.array(other, dtype="<i4").view(np.uint8)
        with pytest.raises(CodecValueError) as err:
            hq.add_payloads(big, addend)
        acc = big.copy()
        assert lib.zhq_add(acc.ctypes.data, addend.ctypes.data, 3) == err.value.index


def test_corrupt_headers_are_refused(lib: ctypes.CDLL) -> None:
    ebq = parse_codec("ebq(eb=1e-3)")
    payload = ebq.compress(np.linspace(-1, 1, 64, dtype=np.float32)).copy()
    payload[1] = 15  # a width above 14
    assert lib.zsize(*head(ebq), payload.ctypes.data, payload.size, 64, 1) == NONE
    with pytest.raises(ValueError, match="bit width 15"):
        ebq.payload_size(payload, 64)


@pytest.mark.parametrize("eb", [1e-3, 0.5])
def test_ebq_every_block_width(lib: ctypes.CDLL, eb: float) -> None:
    """Blocks of every width 0..14 side by side, with random signs and tails of every length 0..31."""
    c = parse_codec(f"ebq(eb={eb})")
    rng = np.random.default_rng(11)
    blocks = []
    for width in range(EBQ_MAX_BITS + 1):
        for _ in range(4):
            top = (1 << width) - 1
            q = rng.integers(-top, top + 1, 32)
            q[rng.integers(0, 32)] = top * rng.choice([-1, 1])  # the block's width is exactly `width`
            blocks.append(q)
    order = rng.permutation(len(blocks))  # widths in no particular order, as real data has them
    x = (np.concatenate([blocks[i] for i in order]) * c.step).astype(np.float32)
    x += (rng.random(x.size).astype(np.float32) - np.float32(0.5)) * np.float32(0.9) * c.step  # off the grid points
    for tail in range(32):
        same(lib, c, x[: x.size - 32 + tail])


@pytest.mark.parametrize("bits", range(FWQ_MIN_BITS, FWQ_MAX_BITS + 1))
def test_fwq_every_bit_width(lib: ctypes.CDLL, bits: int) -> None:
    """Every bit width, blocks of 32 to 160 values, random tails; zero blocks and blocks below 2**-126 * levels."""
    rng = np.random.default_rng(bits)
    for block in (32, 64, 96, 160):
        c = Fwq(bits=bits, block=block)
        for _ in range(3):
            n = int(rng.integers(2, 6)) * block + int(rng.integers(0, block))
            x = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4)).astype(np.float32)
            x[: block // 2] = 0.0
            x[block : block + 7] = np.float32(1e-39) * rng.random(7).astype(np.float32)
            x[-(n % block or block) :] *= np.float32(rng.choice([1.0, 1e30, 1e-30]))
            same(lib, c, x)
            same(lib, c, np.round(x * 3) / 3)  # ties and exact levels


def test_refusals_in_late_blocks(lib: ctypes.CDLL) -> None:
    """The first refused index when it lies past many accepted blocks, in a tail, or in several blocks."""
    rng = np.random.default_rng(7)
    for spec in ("ebq(eb=1e-3)", "fwq(bits=8, block=32)", "fwq(bits=5, block=96)"):
        c = parse_codec(spec)
        for _ in range(20):
            n = int(rng.integers(1, 2000))
            x = (rng.random(n) * 2 - 1).astype(np.float32)
            for at in rng.integers(0, n, int(rng.integers(1, 4))):
                x[at] = rng.choice([np.nan, np.inf, -np.inf, 3.4e38, 1e5])
            same(lib, c, x)
