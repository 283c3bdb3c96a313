"""``lossless``: an MPC-style lossless float codec (delta, bit-shuffle, zero-word elimination).

The values are taken as little-endian 32-bit words (a float64 is two words)
and transformed in four steps, each a bijection:

1. delta: ``d[i] = w[i] - w[i - dim]`` mod 2**32 (``w[-k] = 0``), with
   ``dim`` = words per value (1 for float32, 2 for float64);
2. bit-shuffle: the deltas, zero-padded to groups of 32 words, are
   bit-transposed per group (word ``b`` holds bit ``b`` of the 32 deltas);
3. plane delta: each transposed word minus the one before it in its group
   (the first is kept), so runs of all-ones planes from small negative
   deltas become zeros;
4. zero elimination: per group, a 32-bit bitmap of the non-zero words, and
   those words in order.

Payload: the ``G = ceil(n * dim / 32)`` bitmaps (little-endian uint32), then
each group's non-zero words, group after group.  A group's words start at
``4 * G`` bytes plus 4 times the popcounts of the bitmaps before it.  Every
bit pattern round-trips exactly (NaN payloads, -0.0, subnormals).  The worst
case is ``4 * (G + 32 * G)`` bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import DTypeLike

from collc.codecs.base import Codec
from collc.codecs.bits import transpose32

__all__ = ["Lossless"]


@dataclass(frozen=True, slots=True)
class Lossless(Codec):
    """Bit-exact float codec: delta + 32x32 bit transpose + zero-word elimination."""

    name: ClassVar[str] = "lossless"
    summary: ClassVar[str] = "MPC-style lossless: word delta, bit-shuffle, zero-word elimination"
    example: ClassVar[str] = "lossless"
    lossy: ClassVar[bool] = False
    error_model: ClassVar[str] = "none"
    idempotent: ClassVar[bool] = True
    homomorphic_sum: ClassVar[bool] = False
    static_size: ClassVar[bool] = False
    cuda_kernels: ClassVar[bool] = True  # float32 (one word per value)

    def max_compressed_bytes(self, n: int, dtype: np.dtype | type = np.float32) -> int:
        groups = -(-n * _dim(np.dtype(dtype)) // 32)
        return 4 * 33 * groups

    def payload_size(self, data: np.ndarray, n: int, dtype: DTypeLike = np.float32) -> int:
        """The bitmaps give the size: ``4 * G`` plus 4 bytes per set bit."""
        groups = -(-n * _dim(np.dtype(dtype)) // 32)
        if data.size < 4 * groups:
            raise ValueError(f"lossless: {data.size} bytes left, shorter than the {4 * groups}-byte bitmaps")
        bitmaps = data[: 4 * groups]
        size = 4 * (groups + int(np.unpackbits(bitmaps).sum()))
        if data.size < size:
            raise ValueError(f"lossless: {data.size} bytes left, the payload of {n} values has {size}")
        return size

    def _compress(self, x: np.ndarray) -> np.ndarray:
        dim = _dim(x.dtype)
        w = x.view("<u4")
        prev = np.zeros_like(w)
        prev[dim:] = w[:-dim]
        deltas = w - prev
        groups = -(-w.size // 32)
        padded = np.zeros(groups * 32, dtype=np.uint32)
        padded[: w.size] = deltas
        planes = transpose32(padded.reshape(groups, 32))
        planes[:, 1:] -= planes[:, :-1].copy()
        nonzero = planes != 0
        bitmaps = np.packbits(nonzero, axis=1, bitorder="little").view("<u4").ravel()
        return np.concatenate([bitmaps, planes[nonzero]]).astype("<u4").view(np.uint8)

    def _decompress(self, payload: np.ndarray, n: int, dtype: np.dtype) -> np.ndarray:
        dim = _dim(dtype)
        nwords = n * dim
        groups = -(-nwords // 32)
        if payload.size < 4 * groups:
            raise ValueError(f"lossless: payload is {payload.size} bytes, shorter than its {4 * groups}-byte bitmaps")
        bitmap_bytes = payload[: 4 * groups].reshape(groups, 4)
        nonzero = np.unpackbits(bitmap_bytes, axis=1, bitorder="little").astype(bool)
        self._payload_size(payload, 4 * (groups + int(nonzero.sum())))
        planes = np.zeros((groups, 32), dtype=np.uint32)
        planes[nonzero] = payload[4 * groups :].view("<u4")
        planes = np.cumsum(planes, axis=1, dtype=np.uint32)
        deltas = transpose32(planes).ravel()[:nwords]
        words = np.cumsum(deltas.reshape(-1, dim), axis=0, dtype=np.uint32).ravel()
        return words.astype("<u4").view(dtype)


def _dim(dtype: np.dtype) -> int:
    return dtype.itemsize // 4
