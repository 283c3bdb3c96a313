"""The shared quantization grid, and ``hq``: the homomorphic integer quantizer.

Every value is mapped to an integer on the grid of spacing ``step``::

    q  = floor(x * inv2eb + 0.5)      float32 multiply, float32 add, floor
    x' = float32(q) * step            float32 multiply

with ``step = float32(2 * eb_i)`` and ``inv2eb = float32(1 / (2 * eb_i))``
computed once from ``eb_i = eb * (1 - 2**-6)``.  ``ebq`` (``collc.codecs.ebq``)
and ``hq`` with the same ``eb`` use the same grid, and the CUDA kernels
evaluate exactly these float32 operations.

Why the internal bound is 1/64 below ``eb``: float32 rounds ``x * inv2eb``,
``+ 0.5`` (for ``|t| < 1``), the constants and ``q * step``, each by a
relative 2**-24.  For ``|q| <= 2**14 - 1`` these add at most
``|q| * 2**-22 * step <= 2**-8 * step`` to the ideal ``step / 2``, which the
1/64 shrink covers for one compression, and for the decoded sum of up to
``2**16`` ``hq`` payloads (``docs/codecs.md`` has the derivation).  Values
further than ``2**14 - 1`` steps from zero are refused: beyond that float32
can no longer hold ``|x - x'| <= eb`` (its spacing near ``x`` approaches
``2 * eb``), and ``|q| < 2**14`` keeps a block quantizer's width <= 14 bits.
NaN and Inf are refused.  The rms estimate per compression is
``step / sqrt(12)`` (uniform error on ``[-step/2, step/2]``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from collc.codecs.base import Codec, CodecValueError, first_index

__all__ = ["EB_MAX", "EB_MIN", "GRID_QMAX", "GRID_SHRINK", "Hq", "check_eb", "dequantize", "grid_constants", "quantize"]

GRID_QMAX = 2**14 - 1
GRID_SHRINK = 1.0 - 2.0**-6
EB_MIN = 1e-30
EB_MAX = 1e30
HQ_MAX_TERMS = 2**16  # sums of this many payloads cannot overflow int32


def check_eb(name: str, eb: object) -> float:
    """``eb`` as a float, or a ValueError saying what is wrong with it."""
    if isinstance(eb, bool) or not isinstance(eb, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name}: eb must be a number, got {eb!r}")
    value = float(eb)
    if math.isnan(value) or value <= 0:
        raise ValueError(f"{name}: eb must be positive, got {value:g}")
    if not EB_MIN <= value <= EB_MAX:
        raise ValueError(f"{name}: eb must be between {EB_MIN:g} and {EB_MAX:g}, got {value:g}")
    return value


def grid_constants(eb: float) -> tuple[np.float32, np.float32]:
    """``(step, inv2eb)`` of the grid for error bound ``eb``, as the kernels receive them."""
    half = eb * GRID_SHRINK
    return np.float32(2.0 * half), np.float32(1.0 / (2.0 * half))


def quantize(name: str, x: np.ndarray, inv2eb: np.float32) -> np.ndarray:
    """Grid integers (int32) of float32 values; refuses NaN, Inf and ``|q| > GRID_QMAX``."""
    with np.errstate(over="ignore", invalid="ignore"):
        t = x * inv2eb
        t = t + np.float32(0.5)
        f = np.floor(t)
        ok = np.abs(f) <= np.float32(GRID_QMAX)
    bad = first_index(~ok)
    if bad is not None:
        value = x[bad]
        if not np.isfinite(value):
            raise CodecValueError(f"{name}: x[{bad}] = {float(value):.9g} is not finite", bad)
        need = float(abs(value)) / (2 * GRID_QMAX * GRID_SHRINK)
        raise CodecValueError(
            f"{name}: x[{bad}] = {float(value):.9g} is more than {GRID_QMAX} grid steps from 0, where float32 "
            f"cannot keep the error bound; use eb >= {need:.3g}",
            bad,
        )
    return f.astype(np.int32)


def dequantize(q: np.ndarray, step: np.float32) -> np.ndarray:
    """Float32 values of grid integers: ``float32(q) * step``."""
    return q.astype(np.float32) * step


@dataclass(frozen=True, slots=True)
class GridCodec(Codec):
    """A codec on the shared quantization grid of bound ``eb``: decoded values are within ``eb``."""

    eb: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "eb", check_eb(self.name, self.eb))

    @property
    def step(self) -> np.float32:
        """Grid spacing passed to the decode kernels."""
        return grid_constants(self.eb)[0]

    @property
    def inv2eb(self) -> np.float32:
        """Inverse spacing passed to the encode kernels."""
        return grid_constants(self.eb)[1]

    @property
    def max_magnitude(self) -> float:
        """Every ``|x| <= max_magnitude`` is accepted by `compress`."""
        return float(GRID_QMAX * self.step)

    def _abs_error32(self, a: float) -> float:
        return self.eb

    def _rms_error32(self, a: float) -> float:
        return float(self.step) / math.sqrt(12.0)


@dataclass(frozen=True, slots=True)
class Hq(GridCodec):
    """Homomorphic grid quantizer: one little-endian int32 grid integer per value."""

    name: ClassVar[str] = "hq"
    summary: ClassVar[str] = "shared-grid integer quantizer; payloads add without decoding"
    example: ClassVar[str] = "hq(eb=1e-3)"
    lossy: ClassVar[bool] = True
    error_model: ClassVar[str] = "abs"
    idempotent: ClassVar[bool] = True
    homomorphic_sum: ClassVar[bool] = True
    static_size: ClassVar[bool] = True
    cuda_kernels: ClassVar[bool] = True

    def max_compressed_bytes(self, n: int) -> int:
        return 4 * n

    def add_payloads(self, a: ArrayLike, b: ArrayLike) -> np.ndarray:
        """The payload of the sum: grid integers added exactly; decodes within ``k * eb`` of a sum of k inputs.

        Raises `CodecValueError` at the first element whose sum leaves int32
        (impossible for sums of up to 2**16 compressed payloads).
        """
        qa = self._ints(a)
        qb = self._ints(b)
        if qa.size != qb.size:
            raise ValueError(f"hq: payloads of different sizes ({4 * qa.size} and {4 * qb.size} bytes)")
        s = qa.astype(np.int64) + qb.astype(np.int64)
        bad = first_index((s > np.iinfo(np.int32).max) | (s < np.iinfo(np.int32).min))
        if bad is not None:
            raise CodecValueError(f"hq: the sum overflows int32 at element {bad}", bad)
        return s.astype("<i4").view(np.uint8)

    def _ints(self, payload: ArrayLike) -> np.ndarray:
        data = np.frombuffer(payload, dtype=np.uint8) if isinstance(payload, bytes) else np.asarray(payload).ravel()
        if data.dtype != np.uint8 or data.size % 4:
            raise ValueError("hq: a payload is a uint8 array of 4 bytes per value")
        return data.view("<i4")

    def _compress(self, x: np.ndarray) -> np.ndarray:
        q = quantize(self.name, self._as_f32(x), self.inv2eb)
        return q.astype("<i4").view(np.uint8)

    def _decompress(self, payload: np.ndarray, n: int, dtype: np.dtype) -> np.ndarray:
        self._payload_size(payload, 4 * n)
        q = payload.view("<i4")
        return dequantize(q, self.step).astype(dtype)
