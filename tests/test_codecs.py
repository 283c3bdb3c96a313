"""Codecs: round trips, declared properties checked for real, independent formulas, the CUDA header.

The CUDA header is checked three ways: it compiles for sm_90 with nvcc; its
per-item functions, run on the CPU by ``tests/cuda/codecs_host.cpp`` exactly
as the kernels call them, produce payloads bit-identical to the numpy
references; and, where a GPU and CuPy are present (``-m gpu``), the kernels
themselves are compared with numpy.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from collc.codecs import (
    CODECS,
    Bf16,
    CodecValueError,
    Ebq,
    Fp16,
    Fwq,
    Hq,
    Lossless,
    Zfp,
    describe,
    parse_codec,
)
from collc.codecs.bits import transpose32
from collc.codecs.grid import GRID_QMAX, GRID_SHRINK

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "runtime"
HOST_SRC = ROOT / "tests" / "cuda" / "codecs_host.cpp"
KERNELS_SRC = ROOT / "tests" / "cuda" / "codecs_kernels.cu"
PROPS = settings(max_examples=60, deadline=None)


# ---------------------------------------------------------------------------- strategies


@st.composite
def blocky(draw: st.DrawFn, elements: st.SearchStrategy[float], max_len: int = 300) -> np.ndarray:
    """float32 arrays of 0..max_len values, with runs of zeros or of one repeated value."""
    x = draw(arrays(np.float32, st.integers(0, max_len), elements=elements))
    for _ in range(draw(st.integers(0, 3))):
        if x.size == 0:
            break
        start = draw(st.integers(0, x.size - 1))
        length = draw(st.integers(1, 70))
        x[start : start + length] = draw(st.sampled_from([0.0, -0.0])) if draw(st.booleans()) else x[start]
    return x


def any_floats() -> st.SearchStrategy[float]:
    return st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)


def finite_floats(bound: float | None = None) -> st.SearchStrategy[float]:
    if bound is None:
        return st.floats(width=32, allow_nan=False, allow_infinity=False)
    b = float(np.nextafter(np.float32(bound), np.float32(0)))
    return st.floats(min_value=-b, max_value=b, width=32)


ebs = st.one_of(st.sampled_from([1e-6, 1e-3, 0.1, 1.0, 3.7, 1e4]), st.floats(1e-8, 1e8))


def err64(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.abs(x.astype(np.float64) - y.astype(np.float64))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# ---------------------------------------------------------------------------- lossless


@PROPS
@given(words=arrays(np.uint32, st.integers(0, 300)))
def test_lossless_round_trips_every_bit_pattern(words: np.ndarray) -> None:
    x = words.view(np.float32)
    c = Lossless()
    payload = c.compress(x)
    assert payload.size <= c.max_compressed_bytes(x.size)
    assert same_bits(c.decompress(payload, x.size), x)


@PROPS
@given(x=blocky(any_floats()))
def test_lossless_round_trips_floats(x: np.ndarray) -> None:
    assert same_bits(Lossless().roundtrip(x), x)
    x64 = x.astype(np.float64)
    assert same_bits(Lossless().roundtrip(x64), x64)


def test_lossless_ratios() -> None:
    rng = np.random.default_rng(0)
    g = rng.standard_normal(1 << 16).astype(np.float32)
    as_bf16 = g.astype(ml_dtypes.bfloat16).astype(np.float32)
    c = Lossless()
    assert 1.05 < g.nbytes / c.compress(g).size < 1.2  # measured 1.105 on 2**20 values
    assert 2.2 < g.nbytes / c.compress(as_bf16).size < 2.7  # measured 2.47
    assert c.compress(np.zeros(1024, np.float32)).size == 4 * 32  # only the bitmaps


def test_transpose_is_the_bit_transpose() -> None:
    rng = np.random.default_rng(1)
    words = rng.integers(0, 2**32, size=(3, 32), dtype=np.uint64).astype(np.uint32)
    bits = np.unpackbits(words.view(np.uint8).reshape(3, 32, 4), axis=2, bitorder="little")
    expected = np.packbits(bits.transpose(0, 2, 1), axis=2, bitorder="little").view("<u4").reshape(3, 32)
    assert np.array_equal(transpose32(words), expected)


# ---------------------------------------------------------------------------- ebq and the grid


@PROPS
@given(data=st.data(), eb=ebs)
def test_ebq_bound_idempotence_and_grid(data: st.DataObject, eb: float) -> None:
    c = Ebq(eb)
    x = data.draw(blocky(finite_floats(c.max_magnitude)))
    payload = c.compress(x)
    y = c.decompress(payload, x.size)
    assert payload.size <= c.max_compressed_bytes(x.size)
    assert (err64(x, y) <= eb).all()
    assert same_bits(c.compress(y), payload)  # idempotent
    # Independent: the float64 grid; float32 may differ by one step only next to a midpoint.
    step = float(c.step)
    t = x.astype(np.float64) / step
    q64 = np.floor(t + 0.5)
    q = np.rint(y.astype(np.float64) / step)
    off = q != q64
    assert (np.abs(q - q64) <= 1).all()
    assert (np.abs(np.abs(t - np.floor(t)) - 0.5)[off] < 1e-5 * np.maximum(1, np.abs(t[off]))).all()
    assert np.array_equal(c.decompress(payload, x.size, np.float64), y.astype(np.float64))


@pytest.mark.parametrize("codec", [Ebq, Hq])
def test_grid_bound_at_midpoints(codec: type) -> None:
    """Values within a few ulps of every kind of grid midpoint, for many eb: the bound holds."""
    rng = np.random.default_rng(2)
    for eb in np.exp(rng.uniform(np.log(1e-25), np.log(1e25), 300)):
        c = codec(float(eb))
        k = rng.integers(-GRID_QMAX, GRID_QMAX, 64)
        k = np.concatenate([k, [0, -1, GRID_QMAX - 1, -GRID_QMAX]])
        mid = ((k + 0.5) * float(c.step)).astype(np.float32)
        x = np.concatenate([mid + d * np.spacing(mid) for d in range(-4, 5)]).astype(np.float32)
        x = x[np.abs(x) <= c.max_magnitude]
        y = c.roundtrip(x)
        assert (err64(x, y) <= eb).all(), eb
        assert same_bits(c.roundtrip(y), y)


def test_grid_constants() -> None:
    c = Ebq(1e-3)
    assert c.step == np.float32(2e-3 * GRID_SHRINK)
    assert c.inv2eb == np.float32(1 / (2e-3 * GRID_SHRINK))
    assert c.max_compressed_bytes(64) == 4 + 2 * 4 * 15


@pytest.mark.parametrize("codec", [Ebq(1e-3), Hq(1e-3), Fwq(8, 32)])
def test_quantizers_refuse_nan_and_inf_with_the_first_index(codec: object) -> None:
    x = np.linspace(-1, 1, 200, dtype=np.float32)
    x[150] = np.nan
    x[77] = -np.inf
    with pytest.raises(CodecValueError, match=r"x\[77\]") as info:
        codec.compress(x)  # type: ignore[attr-defined]
    assert info.value.index == 77


@pytest.mark.parametrize("codec", [Ebq, Hq])
def test_grid_refuses_values_too_far_from_zero(codec: type) -> None:
    c = codec(1e-3)
    x = np.zeros(100, np.float32)
    x[40] = np.float32(c.max_magnitude)
    c.compress(x)
    x[60] = 40.0
    with pytest.raises(CodecValueError, match=r"x\[60\].*use eb >=") as info:
        c.compress(x)
    assert info.value.index == 60


def test_ebq_ratios_on_gaussian() -> None:
    g = np.random.default_rng(3).standard_normal(1 << 16).astype(np.float32)
    span = float(g.max() - g.min())
    ratios = [g.nbytes / Ebq(rel * span).compress(g).size for rel in (1e-2, 1e-3, 1e-4)]
    # measured on 2**20 values: 5.99 / 3.70 / 2.65 (reference targets 6.07 / 3.77 / 2.68)
    assert 5.5 < ratios[0] < 6.5 and 3.4 < ratios[1] < 4.0 and 2.4 < ratios[2] < 2.9


def test_ebq_layout() -> None:
    c = Ebq(0.5)  # step 0.984375: these values quantize to their own integers
    x = np.zeros(40, np.float32)
    x[1], x[2] = 3 * c.step, -5 * c.step
    payload = c.compress(x)
    assert list(payload[:4]) == [3, 0, 0, 0]  # widths of the two blocks, padded
    words = payload[4:].view("<u4")
    assert list(words) == [0b100, 0b110, 0b010, 0b100]  # signs, planes 0..2 of (0, 3, 5, 0...)


@PROPS
@given(data=st.data(), eb=ebs)
def test_ebq_fused_reduce_is_decode_add_encode(data: st.DataObject, eb: float) -> None:
    c = Ebq(eb)
    half = c.max_magnitude / 2.5
    x = data.draw(blocky(finite_floats(half)))
    local = data.draw(arrays(np.float32, x.size, elements=finite_floats(half)))
    payload = c.compress(x)
    fused = c.decompress_add_compress(payload, local)
    assert same_bits(fused, c.compress(c.decompress(payload, x.size) + local))
    assert (err64(x + local.astype(np.float64), c.decompress(fused, x.size)) <= 2 * eb).all()


# ---------------------------------------------------------------------------- hq


@PROPS
@given(data=st.data(), eb=ebs, k=st.integers(2, 6))
def test_hq_sums_payloads_exactly(data: st.DataObject, eb: float, k: int) -> None:
    c = Hq(eb)
    n = data.draw(st.integers(0, 200))
    xs = [data.draw(arrays(np.float32, n, elements=finite_floats(c.max_magnitude / k))) for _ in range(k)]
    payloads = [c.compress(x) for x in xs]
    total = payloads[0]
    for p in payloads[1:]:
        total = c.add_payloads(total, p)
    ints = sum(p.view("<i4").astype(np.int64) for p in payloads)
    assert np.array_equal(total.view("<i4"), ints)
    reverse = payloads[-1]
    for p in reversed(payloads[:-1]):
        reverse = c.add_payloads(reverse, p)
    assert same_bits(reverse, total)  # order-independent, bit for bit
    exact = np.sum([x.astype(np.float64) for x in xs], axis=0)
    decoded = c.decompress(total, n)
    assert (np.abs(decoded - exact) <= k * eb).all()
    if (np.abs(ints) <= GRID_QMAX).all():
        assert same_bits(c.compress(decoded), total)  # the payload of the sum's grid value


def test_hq_sum_of_many_large_payloads_stays_within_n_eb() -> None:
    c = Hq(0.37)
    rng = np.random.default_rng(4)
    xs = rng.uniform(-c.max_magnitude, c.max_magnitude, (64, 512)).astype(np.float32)
    xs[:, :8] = np.float32(c.max_magnitude)  # all terms at the top of the range
    total = c.compress(xs[0])
    for x in xs[1:]:
        total = c.add_payloads(total, c.compress(x))
    assert (np.abs(c.decompress(total, 512) - xs.astype(np.float64).sum(axis=0)) <= 64 * 0.37).all()


def test_hq_add_refuses_int32_overflow() -> None:
    c = Hq(1.0)
    big = np.full(3, 2**31 - 10, "<i4").view(np.uint8)
    with pytest.raises(CodecValueError, match="overflows int32 at element 0"):
        c.add_payloads(big, big)


# ---------------------------------------------------------------------------- fwq


fwqs = st.builds(Fwq, bits=st.integers(2, 11), block=st.sampled_from([32, 64, 96, 256]))


@PROPS
@given(data=st.data(), c=fwqs)
def test_fwq_bound_static_size_and_idempotence(data: st.DataObject, c: Fwq) -> None:
    x = data.draw(blocky(finite_floats(2.0**126)))
    payload = c.compress(x)
    assert payload.size == c.max_compressed_bytes(x.size)  # static size
    y = c.decompress(payload, x.size)
    a = float(np.abs(x).max()) if x.size else 0.0
    assert (err64(x, y) <= c.abs_error(a)).all()
    assert same_bits(c.compress(y), payload)
    # Independent: each value is within (half a step + rounding) of the block maximum over L.
    nb = -(-x.size // c.block)
    xp = np.zeros(nb * c.block, np.float64)
    xp[: x.size] = x
    amax = np.repeat(np.abs(xp.reshape(nb, c.block)).max(axis=1), c.block)[: x.size]
    assert (err64(x, y) <= amax / c.levels * (0.5 + 2.0**-10) + c.levels * 2.0**-125).all()


def test_fwq_int8_payload_is_int8_bytes() -> None:
    x = np.random.default_rng(5).standard_normal(100).astype(np.float32)
    c = Fwq(8, 32)
    rows = np.zeros(4 * c.block_bytes, np.uint8)
    rows[: c.compress(x).size] = c.compress(x)
    rows = rows.reshape(4, c.block_bytes)
    scale = rows[:, :4].copy().view("<f4")
    q = rows[:, 4:].view(np.int8).astype(np.float64)
    assert np.abs(q).max() == 127
    assert np.allclose((q * scale).ravel()[:100], x, atol=np.abs(x).max() / 127)


def test_fwq_refuses_huge_values() -> None:
    x = np.ones(70, np.float32)
    x[65] = 2.0**127
    with pytest.raises(CodecValueError, match=r"x\[65\].*too large.*2\*\*127"):
        Fwq(4, 32).compress(x)


# ---------------------------------------------------------------------------- casts


@PROPS
@given(x=blocky(any_floats()))
def test_bf16_matches_ml_dtypes_bit_for_bit(x: np.ndarray) -> None:
    finite = np.abs(x) < 3.3e38
    x = x[finite | ~np.isfinite(x)]
    c = Bf16()
    payload = c.compress(x)
    assert same_bits(payload.view("<u2"), x.astype(ml_dtypes.bfloat16).view(np.uint16))
    y = c.decompress(payload, x.size)
    assert same_bits(c.compress(y), payload)
    ok = np.isfinite(x)
    assert (err64(x[ok], y[ok]) <= 2.0**-8 * np.abs(x[ok].astype(np.float64)) + 2.0**-134).all()


@PROPS
@given(x=blocky(any_floats()))
def test_fp16_matches_numpy_and_passes_nan_inf(x: np.ndarray) -> None:
    x = x[~(np.isfinite(x) & (np.abs(x) >= 65520))]
    c = Fp16()
    payload = c.compress(x)
    h = payload.view("<u2")
    nan = np.isnan(x)
    assert same_bits(h[~nan], x[~nan].astype(np.float16).view(np.uint16))
    assert np.array_equal(h[nan], np.where(np.signbit(x[nan]), 0xFE00, 0x7E00).astype(np.uint16))
    y = c.decompress(payload, x.size)
    assert same_bits(y[~nan], x[~nan].astype(np.float16).astype(np.float32))
    assert np.isnan(y[nan]).all() and np.array_equal(np.signbit(y[nan]), np.signbit(x[nan]))
    assert same_bits(c.compress(y), payload)
    ok = np.isfinite(x)
    assert (err64(x[ok], y[ok]) <= c.abs_error(float(np.abs(x[ok]).max()) if ok.any() else 0)).all()


@pytest.mark.parametrize(("codec", "value"), [(Fp16(), 65520.0), (Bf16(), float.fromhex("0x1.ffp127"))])
def test_casts_refuse_overflow(codec: object, value: float) -> None:
    x = np.ones(10, np.float32)
    x[4] = np.float32(np.inf)
    x[6] = -value
    with pytest.raises(CodecValueError, match=r"x\[6\].*rounds to infinity") as info:
        codec.compress(x)  # type: ignore[attr-defined]
    assert info.value.index == 6


# ---------------------------------------------------------------------------- zfp


def test_zfp_reference_figures() -> None:
    pytest.importorskip("zfpy")
    g = np.random.default_rng(6).standard_normal(1 << 16).astype(np.float32)
    for rate, ratio, max_err in ((8, 4.0, 0.6), (16, 2.0, 0.0025)):
        c = Zfp(rate)
        payload = c.compress(g)
        assert payload.size <= c.max_compressed_bytes(g.size)
        assert g.nbytes / payload.size == pytest.approx(ratio, rel=0.01)
        y = c.decompress(payload, g.size)
        assert err64(g, y).max() < max_err
        assert np.sqrt(np.mean(err64(g, y) ** 2)) < c.rms_error(float(np.abs(g).max()))
        assert c.compress(np.roll(g, 7)).size == payload.size  # static size
    again = Zfp(8).compress(Zfp(8).roundtrip(g))
    assert not same_bits(again, Zfp(8).compress(g))  # declared not idempotent: it is not
    assert Zfp(8).abs_error(1.0) == math.inf
    assert Zfp(8).compress(np.zeros(0, np.float32)).size == 0
    with pytest.raises(CodecValueError, match=r"x\[3\]"):
        Zfp(8).compress(np.array([0, 1, 2, np.nan], np.float32))


# ---------------------------------------------------------------------------- registry and declarations


@pytest.mark.parametrize(
    "spec",
    [
        "ebq(eb=1e-3)",
        "ebq(1e-3)",
        "fwq",
        "fwq(bits=4, block=64)",
        "hq(eb=0.25)",
        "fp16",
        "bf16",
        "lossless",
        "zfp(rate=8)",
        " zfp( 12.5 ) ",
    ],
)
def test_specs_round_trip(spec: str) -> None:
    c = parse_codec(spec)
    assert parse_codec(c.spec) == c
    assert parse_codec(c) is c


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("ebq(eb=-1)", "ebq: eb must be positive"),
        ("ebq(eb=0)", "ebq: eb must be positive"),
        ("ebq", "ebq: missing parameter 'eb'"),
        ("ebq(e=1)", "ebq: unknown parameter 'e' (parameters: eb)"),
        ("ebq(1, 2)", "ebq takes 1 parameter"),
        ("ebq(eb=x)", "ebq: eb must be a number"),
        ("ebq(eb=1, eb=2)", "given twice"),
        ("nope(1)", "unknown codec 'nope' (known: bf16, ebq, fp16, fwq, hq, lossless, zfp)"),
        ("bf16(1)", "bf16 takes no parameters"),
        ("fwq(bits=12)", "fwq: bits must be between 2 and 11"),
        ("fwq(bits=4.5)", "fwq: bits must be an integer"),
        ("fwq(block=48)", "fwq: block must be a positive multiple of 32"),
        ("zfp(rate=2)", "zfp: rate must be between 4 and 64"),
        ("ebq(eb=1e-3", "bad codec spec"),
        ("", "bad codec spec"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_codec(spec)


def test_describe_and_declarations() -> None:
    rows = {row["name"]: row for row in describe()}
    assert set(rows) == set(CODECS)
    assert rows["hq"]["homomorphic_sum"] and not rows["ebq"]["homomorphic_sum"]
    assert rows["fwq"]["static_size"] and not rows["ebq"]["static_size"]
    assert not rows["zfp"]["cuda"] and not rows["zfp"]["idempotent"]
    assert rows["lossless"]["error_model"] == "none" and not rows["lossless"]["lossy"]
    for row in rows.values():
        assert parse_codec(row["spec"]).name == row["name"]
    assert Ebq(1e-3).abs_error(1e9) == 1e-3
    assert Ebq(1e-3).rms_error(1.0) == pytest.approx(1e-3 * GRID_SHRINK / math.sqrt(3), rel=1e-6)
    assert Lossless().abs_error(1e30) == 0
    assert Bf16().abs_error(1.0) == pytest.approx(2.0**-8)
    assert Bf16().abs_error(1.0, np.float64) > Bf16().abs_error(1.0)
    with pytest.raises(ValueError, match="magnitude bound"):
        Ebq(1).abs_error(-1)


@pytest.mark.parametrize("spec", ["ebq(eb=1e-2)", "fwq(bits=6, block=64)", "hq(eb=1e-2)", "fp16", "bf16"])
def test_float64_inputs_stay_within_the_float64_bound(spec: str) -> None:
    c = parse_codec(spec)
    x = np.random.default_rng(7).standard_normal(1000) * 3
    y = c.roundtrip(x)
    assert y.dtype == np.float64
    assert (np.abs(y - x) <= c.abs_error(float(np.abs(x).max()), np.float64)).all()


def test_payload_checks() -> None:
    with pytest.raises(ValueError, match="expected"):
        Fwq().decompress(np.zeros(3, np.uint8), 10)
    with pytest.raises(ValueError, match="unsupported dtype int64"):
        Ebq(1).compress(np.arange(3))
    payload = Ebq(0.5).compress(np.arange(40, dtype=np.float32))
    payload[0] = 15
    with pytest.raises(ValueError, match="corrupt payload: block 0 has bit width 15"):
        Ebq(0.5).decompress(payload, 40)


# ---------------------------------------------------------------------------- CUDA header: compile, CPU harness


def test_kernels_compile_with_nvcc(tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found")
    cmd = [nvcc, "-arch=sm_90", "-c", "-I", str(RUNTIME), str(KERNELS_SRC), "-o", str(tmp_path / "k.o")]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    exe = tmp_path_factory.mktemp("codecs_host") / "codecs_host"
    cmd = [cxx, "-std=c++17", "-O2", "-Wall", "-Werror", "-ffp-contract=off", "-fno-strict-aliasing",
           "-I", str(RUNTIME), str(HOST_SRC), "-o", str(exe)]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return exe


def hexf(v: np.float32) -> str:
    return f"{int(np.float32(v).view(np.uint32)):08x}"


def harness(exe: Path, tmp: Path, op: str, n: int, params: list[str], inputs: list[np.ndarray]) -> tuple[str, bytes]:
    paths = []
    for i, arr in enumerate(inputs):
        path = tmp / f"in{i}.bin"
        np.ascontiguousarray(arr).tofile(path)
        paths.append(str(path))
    out = tmp / "out.bin"
    out.unlink(missing_ok=True)
    run = subprocess.run([str(exe), op, str(n), *params, *paths, str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip(), out.read_bytes() if out.exists() else b""


def check_codec(exe: Path, tmp: Path, enc: str, dec: str, params: list[str], c: object, x: np.ndarray) -> None:
    """Encode with the harness and numpy, compare; decode numpy's payload with both, compare.

    For the grid codecs ``params`` is ``[inv2eb]`` and decoding gets ``[step]``.
    """
    dec_params = [hexf(c.step)] if isinstance(c, (Ebq, Hq)) else params
    try:
        expected = c.compress(x)  # type: ignore[attr-defined]
    except CodecValueError as err:
        status, _ = harness(exe, tmp, enc, x.size, params, [x])
        assert status == f"bad {err.index}"
        return
    status, payload = harness(exe, tmp, enc, x.size, params, [x])
    assert status == "ok" and payload == expected.tobytes()
    status, decoded = harness(exe, tmp, dec, x.size, dec_params, [expected])
    assert decoded == c.decompress(expected, x.size).tobytes()  # type: ignore[attr-defined]


def vectors() -> list[np.ndarray]:
    rng = np.random.default_rng(8)
    g = rng.standard_normal(4099).astype(np.float32)
    sub = (rng.standard_normal(300) * 1e-40).astype(np.float32)
    steps = np.repeat(rng.standard_normal(9), 37).astype(np.float32)
    mixed = np.concatenate([g[:100], np.zeros(64), sub[:50], np.full(40, 2.5), -g[:77] * 1e-3]).astype(np.float32)
    return [np.zeros(0, np.float32), g[:1], g[:31], g[:33], g, g * 1e-3, sub, steps, mixed, np.zeros(100, np.float32)]


def test_harness_ebq_hq_match_numpy(host: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    for x in vectors():
        for eb in (1e-30, 1e-4, 0.05, 0.7):
            c = Ebq(eb)
            x = x[np.abs(x) <= c.max_magnitude / 2]
            check_codec(host, tmp_path, "ebq_enc", "ebq_dec", [hexf(c.inv2eb)], c, x)
            check_codec(host, tmp_path, "hq_enc", "hq_dec", [hexf(c.inv2eb)], Hq(eb), x)
            local = rng.uniform(-c.max_magnitude / 4, c.max_magnitude / 4, x.size).astype(np.float32)
            params = [hexf(c.step), hexf(c.inv2eb)]
            status, fused = harness(host, tmp_path, "ebq_reduce", x.size, params, [c.compress(x), local])
            assert fused == c.decompress_add_compress(c.compress(x), local).tobytes()
    midpoints = ((np.arange(-300, 300) + 0.5) * float(Ebq(0.01).step)).astype(np.float32)
    x = np.concatenate([midpoints + d * np.spacing(midpoints) for d in (-1, 0, 1)])
    check_codec(host, tmp_path, "ebq_enc", "ebq_dec", [hexf(Ebq(0.01).inv2eb)], Ebq(0.01), x)
    bad = np.ones(100, np.float32)
    bad[[41, 70]] = [np.inf, np.nan]
    check_codec(host, tmp_path, "ebq_enc", "ebq_dec", [hexf(Ebq(0.01).inv2eb)], Ebq(0.01), bad)
    bad[41] = 1e6
    check_codec(host, tmp_path, "ebq_enc", "ebq_dec", [hexf(Ebq(0.01).inv2eb)], Ebq(0.01), bad)
    a = np.array([2**31 - 5, 7, -(2**31) + 3], "<i4")
    b = np.array([3, -9, -1], "<i4")
    status, out = harness(host, tmp_path, "hq_add", 3, [], [a, b])
    assert status == "ok" and out == Hq(1.0).add_payloads(a.view(np.uint8), b.view(np.uint8)).tobytes()
    over = np.array([1, 0, -5], "<i4")
    status, _ = harness(host, tmp_path, "hq_add", 3, [], [a, over])
    with pytest.raises(CodecValueError) as info:
        Hq(1.0).add_payloads(a.view(np.uint8), over.view(np.uint8))
    assert status == f"bad {info.value.index}" == "bad 2"


def test_harness_fwq_matches_numpy(host: Path, tmp_path: Path) -> None:
    tiny = np.array([2.0**-126 * 3, -(2.0**-127), 2.0**-149, 0.0, 1e-40], np.float32)
    edge = np.concatenate([np.tile(tiny, 13), np.full(32, 1.7e38, np.float32), -np.ones(31, np.float32)])
    with np.errstate(over="ignore"):
        scaled = edge * np.float32(7.3)  # subnormals become normal, 1.7e38 becomes Inf
    top = np.full(64, 1.7e38, np.float32)
    top[[3, 40]] = 1.70141e38  # decoded maximum reaches 2**127: refused in some widths
    for bits, block in ((2, 32), (3, 64), (4, 32), (5, 96), (7, 32), (8, 32), (8, 256), (11, 64)):
        c = Fwq(bits, block)
        for x in [*vectors(), edge, scaled, top]:
            check_codec(host, tmp_path, "fwq_enc", "fwq_dec", [str(bits), str(block)], c, x)


def test_harness_casts_and_lossless_match_numpy(host: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    edges = [0, 0x33000000, 0x38000000, 0x38800000, 0x477FF000, 0x7F7F8000, 0x7F800000, 0x7FC00000]
    near = np.concatenate([np.arange(e - 4100, e + 4100) for e in edges]) & 0x7FFFFFFF
    patterns = np.concatenate([near, rng.integers(0, 2**32, 60000)]).astype(np.uint32)
    patterns = np.concatenate([patterns, patterns | np.uint32(0x80000000)]).view(np.float32)
    for c, enc, dec in ((Fp16(), "fp16_enc", "fp16_dec"), (Bf16(), "bf16_enc", "bf16_dec")):
        _, overflow = c._encode(patterns.view(np.uint32))
        check_codec(host, tmp_path, enc, dec, [], c, patterns[~overflow])
        check_codec(host, tmp_path, enc, dec, [], c, patterns)  # refused at the first overflow
        every = np.arange(2**16, dtype=np.uint16)
        _, decoded = harness(host, tmp_path, dec, every.size, [], [every])
        assert decoded == c.decompress(every.view(np.uint8), every.size).tobytes()
    g = rng.standard_normal(5000).astype(np.float32)
    for x in [*vectors(), patterns, g.astype(ml_dtypes.bfloat16).astype(np.float32)]:
        check_codec(host, tmp_path, "lossless_enc", "lossless_dec", [], Lossless(), x)


# ---------------------------------------------------------------------------- the kernels on a GPU


@pytest.fixture(scope="module")
def gpu() -> object:
    cupy = pytest.importorskip("cupy")
    if not cupy.cuda.is_available():
        pytest.skip("no GPU")
    module = cupy.RawModule(code='#include "collc_codecs.cuh"\n', options=("-I" + str(RUNTIME), "--std=c++17"))
    return cupy, module


class Gpu:
    """Launches the header's kernels as a generated driver would."""

    THREADS = 256
    TILE = 256 * 16

    def __init__(self, cupy: object, module: object) -> None:
        self.cp = cupy
        self.mod = module

    def launch(self, name: str, items: int, *args: object) -> None:
        blocks = max(1, -(-items // self.THREADS))
        self.mod.get_function(name)((blocks,), (self.THREADS,), args)  # type: ignore[attr-defined]

    def scan(self, kind: str, data: object, count: int) -> None:
        cp = self.cp
        tiles = max(1, -(-count // self.TILE))
        partials = cp.zeros(tiles, dtype=np.uint64 if kind == "u64" else np.uint32)  # type: ignore[attr-defined]
        n = np.uint64(count)
        self.mod.get_function(f"collc_scan_{kind}_reduce")((tiles,), (self.THREADS,), (data, n, partials))  # type: ignore[attr-defined]
        self.mod.get_function(f"collc_scan_{kind}_spine")((1,), (self.THREADS,), (partials, np.uint64(tiles)))  # type: ignore[attr-defined]
        self.mod.get_function(f"collc_scan_{kind}_apply")((tiles,), (self.THREADS,), (data, n, partials))  # type: ignore[attr-defined]

    def bad(self) -> object:
        return self.cp.full(1, np.iinfo(np.uint64).max, dtype=np.uint64)  # type: ignore[attr-defined]


@pytest.mark.gpu
def test_gpu_kernels_match_numpy(gpu: tuple[object, object]) -> None:
    cp, module = gpu
    g = Gpu(cp, module)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(300_007).astype(np.float32)
    x[1000:1100] = 0
    n = np.uint64(x.size)
    dx = cp.asarray(x)  # type: ignore[attr-defined]
    none = np.iinfo(np.uint64).max

    c = Ebq(1e-3)
    nb = -(-x.size // 32)
    payload = cp.zeros(c.max_compressed_bytes(x.size), dtype=np.uint8)  # type: ignore[attr-defined]
    sizes = cp.zeros(nb + 1, dtype=np.uint64)  # type: ignore[attr-defined]
    bad = g.bad()
    g.launch("collc_ebq_encode_sizes", nb + 1, dx, n, c.inv2eb, payload, sizes, bad)
    assert int(bad[0]) == none
    g.scan("u64", sizes, nb + 1)
    g.launch("collc_ebq_encode_body", nb, dx, n, c.inv2eb, payload, sizes)
    total = (nb + 3) // 4 * 4 + int(sizes[nb])
    expected = c.compress(x)
    assert cp.asnumpy(payload[:total]).tobytes() == expected.tobytes()  # type: ignore[attr-defined]
    out = cp.zeros_like(dx)  # type: ignore[attr-defined]
    g.launch("collc_ebq_decode_body", nb, payload, n, c.step, sizes, out)
    assert cp.asnumpy(out).tobytes() == c.decompress(expected, x.size).tobytes()  # type: ignore[attr-defined]
    local = rng.standard_normal(x.size).astype(np.float32)
    fused = cp.zeros_like(payload)  # type: ignore[attr-defined]
    out_sizes = cp.zeros_like(sizes)  # type: ignore[attr-defined]
    dl = cp.asarray(local)  # type: ignore[attr-defined]
    g.launch("collc_ebq_reduce_sizes", nb + 1, payload, sizes, dl, n, c.step, c.inv2eb, fused, out_sizes, bad)
    g.scan("u64", out_sizes, nb + 1)
    g.launch("collc_ebq_reduce_body", nb, payload, sizes, dl, n, c.step, c.inv2eb, fused, out_sizes, out)
    want = c.decompress_add_compress(expected, local)
    assert cp.asnumpy(fused[: want.size]).tobytes() == want.tobytes()  # type: ignore[attr-defined]

    f = Fwq(4, 64)
    fp = cp.zeros(f.max_compressed_bytes(x.size), dtype=np.uint8)  # type: ignore[attr-defined]
    g.launch("collc_fwq_encode", -(-x.size // 64), dx, n, np.int32(4), np.int32(64), fp, bad)
    assert cp.asnumpy(fp).tobytes() == f.compress(x).tobytes()  # type: ignore[attr-defined]
    g.launch("collc_fwq_decode", -(-x.size // 64), fp, n, np.int32(4), np.int32(64), out)
    assert cp.asnumpy(out).tobytes() == f.roundtrip(x).tobytes()  # type: ignore[attr-defined]

    h = Hq(1e-2)
    q = cp.zeros(x.size, dtype=np.int32)  # type: ignore[attr-defined]
    g.launch("collc_hq_encode", x.size, dx, n, h.inv2eb, q, bad)
    assert cp.asnumpy(q).tobytes() == h.compress(x).tobytes()  # type: ignore[attr-defined]
    g.launch("collc_hq_add", x.size, q, q, q, n, bad)
    twice = h.add_payloads(h.compress(x), h.compress(x))
    assert cp.asnumpy(q).tobytes() == twice.tobytes()  # type: ignore[attr-defined]
    g.launch("collc_hq_decode", x.size, q, n, h.step, out)
    assert cp.asnumpy(out).tobytes() == h.decompress(twice, x.size).tobytes()  # type: ignore[attr-defined]

    for cast in (Fp16(), Bf16()):
        half = cp.zeros(x.size, dtype=np.uint16)  # type: ignore[attr-defined]
        g.launch(f"collc_{cast.name}_encode", x.size, dx, n, half, bad)
        assert cp.asnumpy(half).tobytes() == cast.compress(x).tobytes()  # type: ignore[attr-defined]
        g.launch(f"collc_{cast.name}_decode", x.size, half, n, out)
        assert cp.asnumpy(out).tobytes() == cast.roundtrip(x).tobytes()  # type: ignore[attr-defined]
    assert int(bad[0]) == none

    groups = -(-x.size // 32)
    lp = cp.zeros(Lossless().max_compressed_bytes(x.size), dtype=np.uint8)  # type: ignore[attr-defined]
    gs = cp.zeros(groups + 1, dtype=np.uint64)  # type: ignore[attr-defined]
    words = dx.view(np.uint32)  # type: ignore[attr-defined]
    g.launch("collc_lossless_encode_sizes", groups + 1, words, n, lp, gs)
    g.scan("u64", gs, groups + 1)
    g.launch("collc_lossless_encode_body", groups, words, n, lp, gs)
    want = Lossless().compress(x)
    assert cp.asnumpy(lp[: want.size]).tobytes() == want.tobytes()  # type: ignore[attr-defined]
    deltas = cp.zeros(x.size, dtype=np.uint32)  # type: ignore[attr-defined]
    g.launch("collc_lossless_decode_deltas", groups, lp, n, gs, deltas)
    g.scan("u32", deltas, x.size)
    assert cp.asnumpy(deltas).tobytes() == x.tobytes()  # type: ignore[attr-defined]
