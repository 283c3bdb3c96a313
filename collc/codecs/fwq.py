"""``fwq``: the fixed-width block quantizer (int8/int4 with a per-block scale, as in ZeRO++).

Per block of ``block`` values (the last one padded with zeros), with
``L = 2**(bits-1) - 1``::

    amax  = max |x|                                    (float32)
    s0    = float32(amax / L)                          (IEEE division)
    scale = 0                 if s0 < 2**-126 (the block holds only values below L * 2**-126)
            s0 rounded up to 25 - bits significant bits, otherwise
    q     = rint(x / scale)   (IEEE division, round half to even; |q| <= L)
    x'    = q * scale         (exact: q has bits-1 bits, scale 25-bits)

Payload: the blocks one after the other, each a little-endian float32 scale
followed by ``block`` two's-complement ``bits``-bit fields, packed LSB first
into little-endian 32-bit words (for ``bits=8`` these are plain int8 bytes).
The size, ``ceil(n / block) * (4 + block * bits / 8)``, depends only on ``n``.

Because ``x'`` is exact and the block maximum maps to ``±L``, re-quantizing
``x'`` reproduces the same scale and integers: the codec is idempotent (this
needs ``bits <= 11``).  The error is at most ``scale * (1/2 + L * 2**-24)``,
about half a step of the block's maximum over ``L`` (`Fwq.abs_error`).

Refused, with the first offending index: NaN and Inf (per block, its first
one), and blocks whose largest decoded value ``L * scale`` would reach
``2**127`` (values within about 2**-12 of 2**127; the index is the block's
first maximum).  Refusing on the decoded maximum, not on ``|x|``, keeps
everything a payload decodes to acceptable again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from collc.codecs.base import Codec, CodecValueError

__all__ = ["FWQ_MAX_BITS", "FWQ_MIN_BITS", "Fwq"]

FWQ_MIN_BITS = 2
FWQ_MAX_BITS = 11
FWQ_MAX_BLOCK = 1 << 16
_F32_MIN_NORMAL = np.float32(2.0**-126)
_LIMIT = np.float32(2.0**127)


@dataclass(frozen=True, slots=True)
class Fwq(Codec):
    """Fixed-width quantizer: ``bits``-bit integers and one float32 scale per ``block`` values."""

    bits: int = 8
    block: int = 32

    name: ClassVar[str] = "fwq"
    summary: ClassVar[str] = "fixed-width block quantizer: per-block fp32 scale, bits-wide integers"
    example: ClassVar[str] = "fwq(bits=8, block=32)"
    lossy: ClassVar[bool] = True
    error_model: ClassVar[str] = "rel"
    idempotent: ClassVar[bool] = True
    homomorphic_sum: ClassVar[bool] = False
    static_size: ClassVar[bool] = True
    cuda_kernels: ClassVar[bool] = True

    def __post_init__(self) -> None:
        bits = _integer("bits", self.bits)
        block = _integer("block", self.block)
        if not FWQ_MIN_BITS <= bits <= FWQ_MAX_BITS:
            raise ValueError(f"fwq: bits must be between {FWQ_MIN_BITS} and {FWQ_MAX_BITS}, got {bits}")
        if block <= 0 or block % 32 or block > FWQ_MAX_BLOCK:
            raise ValueError(f"fwq: block must be a positive multiple of 32 up to {FWQ_MAX_BLOCK}, got {block}")
        object.__setattr__(self, "bits", bits)
        object.__setattr__(self, "block", block)

    @property
    def levels(self) -> int:
        """``L``: integers run over ``-L .. L``."""
        return (1 << (self.bits - 1)) - 1

    @property
    def block_bytes(self) -> int:
        return 4 + self.block * self.bits // 8

    def max_compressed_bytes(self, n: int) -> int:
        return -(-n // self.block) * self.block_bytes

    # ------------------------------------------------------------------ codec

    def _compress(self, x: np.ndarray) -> np.ndarray:
        x = self._as_f32(x)
        n = x.size
        nb = -(-n // self.block)
        if nb == 0:
            return np.zeros(0, dtype=np.uint8)
        vals = np.zeros(nb * self.block, dtype=np.float32)
        vals[:n] = x
        vals = vals.reshape(nb, self.block)
        mags = np.abs(vals)
        finite = np.isfinite(vals)
        amax = np.where(finite, mags, np.float32(0)).max(axis=1)
        scale = self._scales(amax)
        self._refuse(x, finite, mags, amax, scale)
        safe = np.where(scale > 0, scale, np.float32(1))[:, None]
        q = np.rint(vals / safe)
        q[scale == 0] = 0
        q = np.clip(q, -self.levels, self.levels).astype(np.int64)
        fields = (q & ((1 << self.bits) - 1)).astype("<u2")
        planes = np.unpackbits(fields.view(np.uint8).reshape(nb, self.block, 2), axis=2, bitorder="little")
        packed = np.packbits(planes[:, :, : self.bits].reshape(nb, -1), axis=1, bitorder="little")
        out = np.concatenate([scale.astype("<f4")[:, None].view(np.uint8), packed], axis=1)
        return out.ravel()

    def _refuse(self, x: np.ndarray, finite: np.ndarray, mags: np.ndarray, amax: np.ndarray, scale: np.ndarray) -> None:
        """Per block, the first NaN/Inf, else (if ``L * scale >= 2**127``) the first maximum; raise at the first."""
        nonfinite = ~finite.all(axis=1)
        with np.errstate(over="ignore"):
            huge = ~nonfinite & (np.float32(self.levels) * scale >= _LIMIT)
        if not (nonfinite.any() or huge.any()):
            return
        lane = np.where(nonfinite, np.argmax(~finite, axis=1), np.argmax(mags == amax[:, None], axis=1))
        index = np.flatnonzero(nonfinite | huge)[0] * self.block + lane[nonfinite | huge][0]
        value = x[index]
        if nonfinite[index // self.block]:
            raise CodecValueError(f"fwq: x[{index}] = {float(value):.9g} is not finite", int(index))
        raise CodecValueError(
            f"fwq: x[{index}] = {float(value):.9g} is too large: its block's scale reaches 2**127", int(index)
        )

    def _decompress(self, payload: np.ndarray, n: int, dtype: np.dtype) -> np.ndarray:
        self._payload_size(payload, self.max_compressed_bytes(n))
        nb = -(-n // self.block)
        if nb == 0:
            return np.zeros(0, dtype=dtype)
        rows = payload.reshape(nb, self.block_bytes)
        scale = rows[:, :4].copy().view("<f4")
        planes = np.zeros((nb, self.block, 16), dtype=np.uint8)
        planes[:, :, : self.bits] = np.unpackbits(rows[:, 4:], axis=1, bitorder="little").reshape(nb, self.block, -1)
        fields = np.packbits(planes, axis=2, bitorder="little").view("<u2")[:, :, 0].astype(np.int32)
        q = fields - ((fields >> (self.bits - 1)) << self.bits)
        return (q.astype(np.float32) * scale).ravel()[:n].astype(dtype)

    def _scales(self, amax: np.ndarray) -> np.ndarray:
        """Per-block scales: ``amax / L`` rounded up to ``25 - bits`` significant bits, or 0."""
        s0 = amax / np.float32(self.levels)
        mask = np.uint32((1 << (self.bits - 1)) - 1)
        with np.errstate(over="ignore"):
            rounded = ((s0.view(np.uint32) + mask) & ~mask).view(np.float32)
        return np.where(s0 < _F32_MIN_NORMAL, np.float32(0), rounded).astype(np.float32)

    def _abs_error32(self, a: float) -> float:
        lv = self.levels
        scale = a / lv * (1 + 2.0**-24) * (1 + 2.0 ** (self.bits - 24))
        return scale * (0.5 + lv * 2.0**-24) + lv * 2.0**-125

    def _rms_error32(self, a: float) -> float:
        return a / self.levels / math.sqrt(12.0)


def _integer(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float, np.floating)):
        raise ValueError(f"fwq: {what} must be an integer, got {value!r}")
    if isinstance(value, (float, np.floating)):
        if not float(value).is_integer():
            raise ValueError(f"fwq: {what} must be an integer, got {float(value):g}")
        if abs(float(value)) >= 2.0**63:
            raise ValueError(f"fwq: {what} is out of range, got {float(value):g}")
    return int(value)
