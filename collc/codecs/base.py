"""The codec protocol: what every codec declares and the checks they share.

A configured codec is a frozen dataclass (``Ebq(eb=1e-3)``); its fields are its
parameters and its class attributes are its declared properties, which the
verifier's static error propagation reads (``docs/codecs.md``):

* ``lossy`` and ``error_model``: ``"abs"`` (absolute bound), ``"rel"``
  (relative to a block's maximum), ``"cast"`` (relative to each value),
  ``"fixed_rate"`` (no sound bound) or ``"none"`` (lossless);
* ``idempotent``: ``compress(decompress(compress(x))) == compress(x)``, so
  re-compressing forwarded data adds no error;
* ``homomorphic_sum``: payloads can be summed without decoding;
* ``static_size``: the payload size depends only on ``n``, so forwarded
  payloads need no size header.

Payloads are uint8 arrays with no header: the codec, ``n`` and the dtype are
enough to decode them.  Values a codec cannot encode within its contract
(NaN or Inf for the quantizers, magnitudes outside their range) raise
`CodecValueError` naming the first offending index; nothing is silently
corrupted.

Lossy codecs work in float32.  A float64 input is first rounded to float32,
which adds at most ``2**-24 * A`` to the error; ``abs_error(A, "float64")``
includes that term.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import Any, ClassVar, Literal

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

__all__ = [
    "Codec",
    "CodecValueError",
    "ErrorModel",
    "first_index",
    "format_param",
]

ErrorModel = Literal["abs", "rel", "cast", "fixed_rate", "none"]

F32_EPS_HALF = 2.0**-24  # unit roundoff of float32 round-to-nearest
F32_TINY = 2.0**-150  # half the smallest float32 subnormal
SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class CodecValueError(ValueError):
    """A value the codec refuses to encode; ``index`` is the first such element (flat index)."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


def first_index(mask: np.ndarray) -> int | None:
    """The first True position of a boolean mask, or None."""
    if not mask.any():
        return None
    return int(np.argmax(mask))


def format_param(value: int | float) -> str:
    """A short spelling of a parameter that parses back to the same value."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return str(int(value))
    text = f"{value:g}"
    if float(text) != value:
        text = repr(float(value))
    return text.replace("e-0", "e-").replace("e+0", "e").replace("e+", "e")


class Codec(abc.ABC):
    """Base of every configured codec (subclasses are frozen, slotted dataclasses)."""

    __slots__ = ()

    name: ClassVar[str]
    summary: ClassVar[str]
    example: ClassVar[str]
    lossy: ClassVar[bool]
    error_model: ClassVar[ErrorModel]
    idempotent: ClassVar[bool]
    homomorphic_sum: ClassVar[bool]
    static_size: ClassVar[bool]
    cuda_kernels: ClassVar[bool]

    # ---------------------------------------------------------------- identity

    @property
    def params(self) -> dict[str, Any]:
        """The codec's parameters, in declaration order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @property
    def spec(self) -> str:
        """The text `parse_codec` reads back to this codec, e.g. ``fwq(bits=8, block=32)``."""
        params = self.params
        if not params:
            return self.name
        inner = ", ".join(f"{k}={format_param(v)}" for k, v in params.items())
        return f"{self.name}({inner})"

    def __str__(self) -> str:
        return self.spec

    @property
    def available(self) -> bool:
        """Whether the codec can run here (an external library may be missing)."""
        return True

    # ---------------------------------------------------------------- interface

    def compress(self, x: ArrayLike) -> np.ndarray:
        """Encode the values of ``x`` (flattened, C order) into a uint8 payload."""
        arr = self._input(x)
        return self._compress(arr)

    def decompress(self, payload: ArrayLike | bytes, n: int, dtype: DTypeLike = np.float32) -> np.ndarray:
        """Decode ``n`` values of ``dtype`` from a payload made by `compress`."""
        if n < 0:
            raise ValueError(f"{self.name}: n must be >= 0, got {n}")
        out_dtype = _check_dtype(self.name, dtype)
        if isinstance(payload, (bytes, bytearray, memoryview)):
            data = np.frombuffer(payload, dtype=np.uint8)
        else:
            data = np.asarray(payload)
            if data.dtype != np.uint8:
                raise ValueError(f"{self.name}: payload must be uint8, got {data.dtype}")
            data = data.ravel()
        return self._decompress(data, int(n), out_dtype)

    def roundtrip(self, x: ArrayLike) -> np.ndarray:
        """``decompress(compress(x))`` with the shape and dtype of ``x``."""
        arr = np.asarray(x)
        out = self.decompress(self.compress(arr), arr.size, arr.dtype)
        return out.reshape(arr.shape)

    @abc.abstractmethod
    def max_compressed_bytes(self, n: int) -> int:
        """An upper bound on the payload size of ``n`` values (exact when ``static_size``)."""

    def payload_size(self, data: np.ndarray, n: int, dtype: DTypeLike = np.float32) -> int:
        """The size in bytes of the payload of ``n`` values of ``dtype`` at the start of ``data`` (uint8).

        Payloads carry no length: a static-size codec's follows from ``n``, a
        variable-size codec's from its own header, so payloads placed end to end
        in one message can be taken apart.  ValueError when ``data`` is too short
        to hold that header or payload.
        """
        size = self.max_compressed_bytes(n)
        if data.size < size:
            raise ValueError(f"{self.name}: {data.size} bytes left, the payload of {n} values has {size}")
        return size

    def abs_error(self, magnitude_bound: float, dtype: DTypeLike = np.float32) -> float:
        """Worst-case absolute error of one compression of values with ``|x| <= magnitude_bound``.

        ``inf`` when the codec has no sound bound (zfp fixed rate).
        """
        a = _check_bound(self.name, magnitude_bound)
        if not self.lossy:
            return 0.0
        if np.dtype(dtype) == np.float64:
            return self._abs_error32(a * (1 + F32_EPS_HALF)) + a * F32_EPS_HALF + F32_TINY
        return self._abs_error32(a)

    def rms_error(self, magnitude_bound: float) -> float:
        """The per-compression rms error estimate (uniform error model), for probabilistic propagation."""
        a = _check_bound(self.name, magnitude_bound)
        if not self.lossy:
            return 0.0
        return self._rms_error32(a)

    # ---------------------------------------------------------------- hooks

    @abc.abstractmethod
    def _compress(self, x: np.ndarray) -> np.ndarray: ...

    @abc.abstractmethod
    def _decompress(self, payload: np.ndarray, n: int, dtype: np.dtype) -> np.ndarray: ...

    def _abs_error32(self, a: float) -> float:
        return 0.0

    def _rms_error32(self, a: float) -> float:
        return 0.0

    # ---------------------------------------------------------------- helpers for subclasses

    def _input(self, x: ArrayLike) -> np.ndarray:
        arr = np.asarray(x)
        _check_dtype(self.name, arr.dtype)
        return np.ascontiguousarray(arr).ravel()

    def _as_f32(self, x: np.ndarray) -> np.ndarray:
        """``x`` rounded to float32; a finite float64 that overflows float32 is refused."""
        if x.dtype == np.float32:
            return x
        with np.errstate(over="ignore"):
            y = x.astype(np.float32)
        bad = first_index(np.isfinite(x) & ~np.isfinite(y))
        if bad is not None:
            raise CodecValueError(f"{self.name}: x[{bad}] = {float(x[bad]):.9g} overflows float32", bad)
        return y

    def _payload_size(self, payload: np.ndarray, expected: int) -> None:
        if payload.size != expected:
            raise ValueError(f"{self.name}: payload is {payload.size} bytes, expected {expected}")


def _check_dtype(name: str, dtype: DTypeLike) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in SUPPORTED_DTYPES:
        raise ValueError(f"{name}: unsupported dtype {dt} (float32 or float64)")
    return dt


def _check_bound(name: str, magnitude_bound: float) -> float:
    a = float(magnitude_bound)
    if not (a >= 0) or math.isnan(a):
        raise ValueError(f"{name}: magnitude bound must be >= 0, got {magnitude_bound!r}")
    return a
