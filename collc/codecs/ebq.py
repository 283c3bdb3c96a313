"""``ebq``: the error-bounded block quantizer (cuSZp's "fixed" layout).

Values are quantized on the shared grid (`collc.codecs.grid`), so
``|x - x'| <= eb`` for every element, and cut into blocks of 32.  Payload::

    header   nb bytes: the bit width of each block (0..14), zero-padded to a multiple of 4
    bodies   block 0, block 1, ... concatenated; a block of width 0 (all zero) has no body,
             otherwise 1 + width little-endian uint32 words:
               word 0        sign bitmap: bit j set when q[j] < 0
               word 1 + b    bit-plane b: bit j is bit b of |q[j]|

with ``nb = ceil(n / 32)`` (the last block is padded with zeros).  A block's
body starts at ``align4(nb)`` plus the prefix sum of the sizes of the blocks
before it, which the header alone determines, so decoders compute all offsets
with one scan.  The bit width is that of the block's largest ``|q|``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from collc.codecs.bits import align4, bit_length, transpose32
from collc.codecs.grid import GRID_QMAX, GridCodec, dequantize, quantize

__all__ = ["EBQ_BLOCK", "EBQ_MAX_BITS", "Ebq"]

EBQ_BLOCK = 32
EBQ_MAX_BITS = int(GRID_QMAX).bit_length()  # 14
_LANES = np.arange(EBQ_BLOCK, dtype=np.uint32)
_SLOTS = np.arange(1 + 32)


@dataclass(frozen=True, slots=True)
class Ebq(GridCodec):
    """Error-bounded block quantizer: ``|x - x'| <= eb``, 32-value blocks of bit-planes."""

    name: ClassVar[str] = "ebq"
    summary: ClassVar[str] = "error-bounded block quantizer, cuSZp layout (sign bitmap + bit-planes)"
    example: ClassVar[str] = "ebq(eb=1e-3)"
    lossy: ClassVar[bool] = True
    error_model: ClassVar[str] = "abs"
    idempotent: ClassVar[bool] = True
    homomorphic_sum: ClassVar[bool] = False
    static_size: ClassVar[bool] = False
    cuda_kernels: ClassVar[bool] = True

    def max_compressed_bytes(self, n: int) -> int:
        nb = -(-n // EBQ_BLOCK)
        return align4(nb) + nb * 4 * (1 + EBQ_MAX_BITS)

    def payload_size(self, data: np.ndarray, n: int, dtype: DTypeLike = np.float32) -> int:
        """The header's widths give the size: ``align4(nb) + 4 * sum(1 + w for w > 0)``."""
        nb = -(-n // EBQ_BLOCK)
        start = align4(nb)
        if data.size < start:
            raise ValueError(f"ebq: {data.size} bytes left, shorter than the {start}-byte header of {n} values")
        widths = data[:nb].astype(np.int64)
        if nb and int(widths.max()) > EBQ_MAX_BITS:
            b = int(np.argmax(widths > EBQ_MAX_BITS))
            raise ValueError(f"ebq: corrupt payload: block {b} has bit width {widths[b]} > {EBQ_MAX_BITS}")
        size = start + 4 * int(np.where(widths > 0, widths + 1, 0).sum())
        if data.size < size:
            raise ValueError(f"ebq: {data.size} bytes left, the payload of {n} values has {size}")
        return size

    def decompress_add_compress(self, payload: ArrayLike, local: ArrayLike) -> np.ndarray:
        """The fused reduce step: decode ``payload``, add ``local`` in float32, encode the sum.

        The numpy reference of ``collc_ebq_reduce_*`` in the CUDA header.
        """
        addend = self._as_f32(self._input(local))
        decoded = self.decompress(payload, addend.size, np.float32)
        return self._compress(decoded + addend)

    # ------------------------------------------------------------------ codec

    def _compress(self, x: np.ndarray) -> np.ndarray:
        q = quantize(self.name, self._as_f32(x), self.inv2eb)
        n = q.size
        nb = -(-n // EBQ_BLOCK)
        blocks = np.zeros(nb * EBQ_BLOCK, dtype=np.int32)
        blocks[:n] = q
        blocks = blocks.reshape(nb, EBQ_BLOCK)
        mag = np.abs(blocks).astype(np.uint32)
        widths = bit_length(mag.max(axis=1)) if nb else np.zeros(0, np.int32)
        signs = np.packbits(blocks < 0, axis=1, bitorder="little").view("<u4")
        words = np.concatenate([signs, transpose32(mag)], axis=1)
        body = words[_keep(widths)]
        header = np.zeros(align4(nb), dtype=np.uint8)
        header[:nb] = widths
        return np.concatenate([header, body.astype("<u4").view(np.uint8)])

    def _decompress(self, payload: np.ndarray, n: int, dtype: np.dtype) -> np.ndarray:
        nb = -(-n // EBQ_BLOCK)
        start = align4(nb)
        if payload.size < start:
            raise ValueError(f"ebq: payload is {payload.size} bytes, shorter than its {start}-byte header")
        widths = payload[:nb].astype(np.int32)
        too_wide = np.flatnonzero(widths > EBQ_MAX_BITS)
        if too_wide.size:
            b = int(too_wide[0])
            raise ValueError(f"ebq: corrupt payload: block {b} has bit width {widths[b]} > {EBQ_MAX_BITS}")
        keep = _keep(widths)
        self._payload_size(payload, start + 4 * int(keep.sum()))
        words = np.zeros((nb, 1 + 32), dtype=np.uint32)
        words[keep] = payload[start:].view("<u4")
        mag = transpose32(words[:, 1:]).astype(np.int32)
        negative = ((words[:, :1] >> _LANES) & 1).astype(bool)
        q = np.where(negative, -mag, mag).ravel()[:n]
        return dequantize(q, self.step).astype(dtype)


def _keep(widths: np.ndarray) -> np.ndarray:
    """Which of each block's 33 candidate words (sign, 32 planes) are stored."""
    return (_SLOTS[None, :] <= widths[:, None]) & (widths[:, None] > 0)
