"""``fp16`` and ``bf16``: casts to a 16-bit float, round to nearest even.

The conversions are integer operations on the float32 bit pattern, the same
ones ``collc_f32_to_f16`` / ``collc_f32_to_bf16`` perform in the CUDA header,
so every bit pattern converts identically on both sides.  They agree with
IEEE round-to-nearest-even (numpy's ``astype(float16)``, ml_dtypes'
``astype(bfloat16)``) on every non-NaN value.

Policy:

* ±Inf passes through; NaN stays NaN with its sign, as the canonical quiet
  NaN (``0x7e00`` / ``0x7fc0``, as ml_dtypes does for bf16): payload bits are
  not kept.
* A finite value that would round to infinity (``|x| >= 65520`` for fp16,
  ``|x| >= 0x1.ffp127`` ≈ 3.39e38 for bf16) is refused with its index, never
  saturated: saturation would have no error bound.
* The error is at most ``u * |x|`` (u = 2**-11 for fp16, 2**-8 for bf16) plus
  half the smallest subnormal (2**-25, 2**-134) for values in the subnormal
  range.  A cast of a cast is the same cast (idempotent).

Payload: one little-endian uint16 per value.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from collc.codecs.base import Codec, CodecValueError, first_index

__all__ = ["Bf16", "Fp16", "bf16_bits_to_f32", "f16_bits_to_f32", "f32_to_bf16_bits", "f32_to_f16_bits"]

_U32 = np.uint32


def f32_to_f16_bits(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """fp16 bit patterns of float32 bit patterns, and the mask of finite values that overflow."""
    u = u.astype(np.uint32)
    sign = (u >> _U32(16)) & _U32(0x8000)
    a = u & _U32(0x7FFFFFFF)
    nan = a > _U32(0x7F800000)
    inf = a == _U32(0x7F800000)
    overflow = ~nan & ~inf & (a >= _U32(0x477FF000))
    normal = a >= _U32(0x38800000)
    sub = (a > _U32(0x33000000)) & ~normal
    # Normal fp16: rebias the exponent and round the 13 dropped bits to nearest even.
    with np.errstate(over="ignore"):
        h_norm = ((a - _U32(0x38000000)) + _U32(0xFFF) + ((a >> _U32(13)) & _U32(1))) >> _U32(13)
    # Subnormal fp16 (2**-25 < |x| < 2**-14): m = M >> (126 - e), rounded to nearest even.
    e = a >> _U32(23)
    shift = np.where(sub, _U32(126) - e, _U32(14))
    mant = (a & _U32(0x7FFFFF)) | _U32(0x800000)
    r = mant >> shift
    rem = mant & ((_U32(1) << shift) - _U32(1))
    half = _U32(1) << (shift - _U32(1))
    r = r + ((rem > half) | ((rem == half) & ((r & _U32(1)) == 1))).astype(np.uint32)
    h = np.where(normal, h_norm, np.where(sub, r, _U32(0)))
    h = np.where(inf, _U32(0x7C00), h)
    h = np.where(nan, _U32(0x7E00), h)
    return (sign | h).astype(np.uint16), overflow


def f16_bits_to_f32(h: np.ndarray) -> np.ndarray:
    """float32 values of fp16 bit patterns (exact)."""
    h = h.astype(np.uint32)
    sign = (h & _U32(0x8000)) << _U32(16)
    e = (h >> _U32(10)) & _U32(0x1F)
    m = h & _U32(0x3FF)
    normal = (sign | ((e + _U32(112)) << _U32(23)) | (m << _U32(13))).view(np.float32)
    special = (sign | _U32(0x7F800000) | (m << _U32(13))).view(np.float32)
    small = m.astype(np.float32) * np.float32(2.0**-24)
    small = np.where(sign != 0, -small, small)
    return np.where(e == 0x1F, special, np.where(e == 0, small, normal)).astype(np.float32)


def f32_to_bf16_bits(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """bf16 bit patterns of float32 bit patterns, and the mask of finite values that overflow."""
    u = u.astype(np.uint32)
    a = u & _U32(0x7FFFFFFF)
    nan = a > _U32(0x7F800000)
    overflow = (a >= _U32(0x7F7F8000)) & (a < _U32(0x7F800000))
    with np.errstate(over="ignore"):
        r = (u + _U32(0x7FFF) + ((u >> _U32(16)) & _U32(1))) >> _U32(16)
    r = np.where(nan, ((u >> _U32(16)) & _U32(0x8000)) | _U32(0x7FC0), r)
    return r.astype(np.uint16), overflow


def bf16_bits_to_f32(h: np.ndarray) -> np.ndarray:
    """float32 values of bf16 bit patterns (exact)."""
    return (h.astype(np.uint32) << _U32(16)).view(np.float32)


@dataclass(frozen=True, slots=True)
class _Cast(Codec):
    """A round-to-nearest-even cast to a 16-bit float format."""

    lossy: ClassVar[bool] = True
    error_model: ClassVar[str] = "cast"
    idempotent: ClassVar[bool] = True
    homomorphic_sum: ClassVar[bool] = False
    static_size: ClassVar[bool] = True
    cuda_kernels: ClassVar[bool] = True

    unit: ClassVar[float]  # unit roundoff u
    tiny: ClassVar[float]  # half the smallest subnormal
    max_finite: ClassVar[float]

    def max_compressed_bytes(self, n: int) -> int:
        return 2 * n

    def _compress(self, x: np.ndarray) -> np.ndarray:
        x = self._as_f32(x)
        h, overflow = self._encode(x.view(np.uint32))
        bad = first_index(overflow)
        if bad is not None:
            message = f"{self.name}: x[{bad}] = {float(x[bad]):.9g} rounds to infinity in {self.name}"
            raise CodecValueError(f"{message} (largest finite {self.max_finite:g})", bad)
        return h.astype("<u2").view(np.uint8)

    def _decompress(self, payload: np.ndarray, n: int, dtype: np.dtype) -> np.ndarray:
        self._payload_size(payload, 2 * n)
        return self._decode(payload.view("<u2")).astype(dtype)

    def _abs_error32(self, a: float) -> float:
        return self.unit * a + self.tiny

    def _rms_error32(self, a: float) -> float:
        return self.unit * a / math.sqrt(3.0)

    @staticmethod
    @abc.abstractmethod
    def _encode(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Half-width bit patterns of float32 bit patterns ``u``, and the mask of values that overflow."""

    @staticmethod
    @abc.abstractmethod
    def _decode(h: np.ndarray) -> np.ndarray:
        """Float32 values of half-width bit patterns ``h``."""


@dataclass(frozen=True, slots=True)
class Fp16(_Cast):
    """IEEE half precision."""

    name: ClassVar[str] = "fp16"
    summary: ClassVar[str] = "cast to IEEE fp16 (round to nearest even); overflow refused"
    example: ClassVar[str] = "fp16"
    unit: ClassVar[float] = 2.0**-11
    tiny: ClassVar[float] = 2.0**-25
    max_finite: ClassVar[float] = 65504.0

    @staticmethod
    def _encode(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return f32_to_f16_bits(u)

    @staticmethod
    def _decode(h: np.ndarray) -> np.ndarray:
        return f16_bits_to_f32(h)


@dataclass(frozen=True, slots=True)
class Bf16(_Cast):
    """bfloat16: float32's exponent range with an 8-bit significand."""

    name: ClassVar[str] = "bf16"
    summary: ClassVar[str] = "cast to bfloat16 (round to nearest even); overflow refused"
    example: ClassVar[str] = "bf16"
    unit: ClassVar[float] = 2.0**-8
    tiny: ClassVar[float] = 2.0**-134
    max_finite: ClassVar[float] = float.fromhex("0x1.fep127")

    @staticmethod
    def _encode(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return f32_to_bf16_bits(u)

    @staticmethod
    def _decode(h: np.ndarray) -> np.ndarray:
        return bf16_bits_to_f32(h)
