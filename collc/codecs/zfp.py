"""``zfp``: ZFP fixed-rate mode through ``zfpy`` (CPU only), as an external reference.

This is the compressor of the MVAPICH work that collc's quantizers are
measured against.  The payload is zfpy's stream, header included; its size
depends only on ``n`` and the rate (fixed rate).  ZFP's error scales with
each 4-value block's largest magnitude and has no user-set bound, so
`Zfp.abs_error` is ``inf`` (error model ``fixed_rate``: a verifier flags it
unbounded) and `Zfp.rms_error` is an empirical estimate, ``3 * 2**-rate *
A``, measured on Gaussian data (rms/max is 2.8 * 2**-rate for rates 4..24);
it is not a bound.  ZFP is not idempotent: re-compressing a decoded block
changes it again.

NaN and Inf are refused (ZFP's transform has no defined result for them).
zfpy 1.0.1 crashes for rates below 4 and for empty arrays, so rates must be
in ``[4, 64]`` and ``n = 0`` gives an empty payload.  When ``zfpy`` is not
installed the codec can still be parsed and described, and using it raises a
RuntimeError saying so.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar

import numpy as np

from collc.codecs.base import Codec, CodecValueError, first_index

__all__ = ["ZFP_RMS_FACTOR", "Zfp", "zfpy_module"]

ZFP_MIN_RATE = 4.0
ZFP_MAX_RATE = 64.0
ZFP_RMS_FACTOR = 3.0
_HEADER_BITS = 96  # magic, field metadata, 12-bit fixed-rate mode


def zfpy_module() -> ModuleType | None:
    """The ``zfpy`` module, or None when it is not installed."""
    try:
        return importlib.import_module("zfpy")
    except ImportError:
        return None


@dataclass(frozen=True, slots=True)
class Zfp(Codec):
    """ZFP fixed rate, ``rate`` bits per value (zfpy)."""

    rate: float = 16.0

    name: ClassVar[str] = "zfp"
    summary: ClassVar[str] = "ZFP fixed-rate via zfpy (CPU reference; error not bounded)"
    example: ClassVar[str] = "zfp(rate=16)"
    lossy: ClassVar[bool] = True
    error_model: ClassVar[str] = "fixed_rate"
    idempotent: ClassVar[bool] = False
    homomorphic_sum: ClassVar[bool] = False
    static_size: ClassVar[bool] = True
    cuda_kernels: ClassVar[bool] = False

    def __post_init__(self) -> None:
        rate = self.rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float, np.integer, np.floating)):
            raise ValueError(f"zfp: rate must be a number, got {rate!r}")
        value = float(rate)
        if not ZFP_MIN_RATE <= value <= ZFP_MAX_RATE:
            raise ValueError(f"zfp: rate must be between {ZFP_MIN_RATE:g} and {ZFP_MAX_RATE:g} bits, got {value:g}")
        object.__setattr__(self, "rate", int(value) if value.is_integer() else value)

    @property
    def available(self) -> bool:
        return zfpy_module() is not None

    def max_compressed_bytes(self, n: int) -> int:
        """The exact stream size: a 96-bit header, ``floor(4 * rate + 0.5)`` bits per block of 4 values,
        padded to 64-bit words (zfp's fixed-rate mode in one dimension, as zfpy writes it)."""
        if n == 0:
            return 0
        block_bits = math.floor(4 * float(self.rate) + 0.5)
        return 8 * -(-(_HEADER_BITS + -(-n // 4) * block_bits) // 64)

    def _zfpy(self) -> ModuleType:
        module = zfpy_module()
        if module is None:
            raise RuntimeError("zfp: the zfpy package is not installed (pip install zfpy)")
        return module

    def _compress(self, x: np.ndarray) -> np.ndarray:
        zfpy = self._zfpy()
        bad = first_index(~np.isfinite(x))
        if bad is not None:
            raise CodecValueError(f"zfp: x[{bad}] = {float(x[bad]):.9g} is not finite", bad)
        if x.size == 0:
            return np.zeros(0, dtype=np.uint8)
        stream = zfpy.compress_numpy(np.ascontiguousarray(x), rate=float(self.rate))
        return np.frombuffer(stream, dtype=np.uint8).copy()

    def _decompress(self, payload: np.ndarray, n: int, dtype: np.dtype) -> np.ndarray:
        zfpy = self._zfpy()
        if n == 0:
            self._payload_size(payload, 0)
            return np.zeros(0, dtype=dtype)
        if payload.size < 16:
            raise ValueError(f"zfp: payload of {payload.size} bytes is too short for a zfp stream")
        values = np.asarray(zfpy.decompress_numpy(payload.tobytes())).ravel()
        if values.size != n:
            raise ValueError(f"zfp: the stream holds {values.size} values, expected {n}")
        return values.astype(dtype)

    def _abs_error32(self, a: float) -> float:
        return math.inf

    def _rms_error32(self, a: float) -> float:
        return ZFP_RMS_FACTOR * 2.0 ** -float(self.rate) * a
