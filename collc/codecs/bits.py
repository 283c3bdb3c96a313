"""Bit-level helpers shared by the codecs, written as the CUDA header computes them.

`transpose32` is the 32x32 bit transpose of the block quantizer's bit-planes
and of the lossless codec's bit-shuffle: output word ``b`` holds bit ``b`` of
each input word, word ``j`` at bit ``j``.  It is the same five-round
mask-and-swap network as ``collc_transpose32`` in ``runtime/collc_codecs.cuh``,
vectorised over groups.
"""

from __future__ import annotations

import numpy as np

__all__ = ["align4", "bit_length", "transpose32"]

_ROUNDS = (
    (16, 0x0000FFFF),
    (8, 0x00FF00FF),
    (4, 0x0F0F0F0F),
    (2, 0x33333333),
    (1, 0x55555555),
)
# Row pairs (k, k + j) with (k & j) == 0, per round.
_PAIRS = {j: np.array([k for k in range(32) if not k & j]) for j, _ in _ROUNDS}


def transpose32(words: np.ndarray) -> np.ndarray:
    """Bit-transpose each row of a ``(G, 32)`` uint32 array: ``out[g, b] >> j & 1 == words[g, j] >> b & 1``."""
    a = np.array(words, dtype=np.uint32, copy=True)
    if a.ndim != 2 or a.shape[1] != 32:
        raise ValueError(f"transpose32 needs a (G, 32) array, got shape {a.shape}")
    for j, mask in _ROUNDS:
        lo = _PAIRS[j]
        hi = lo + j
        m = np.uint32(mask)
        t = ((a[:, lo] >> np.uint32(j)) ^ a[:, hi]) & m
        a[:, hi] ^= t
        a[:, lo] ^= t << np.uint32(j)
    return a


def bit_length(m: np.ndarray) -> np.ndarray:
    """Bits needed for each non-negative integer below 2**31 (0 for 0), as int32."""
    m = np.asarray(m, dtype=np.int64)
    _, exp = np.frexp(m.astype(np.float64))
    return np.where(m > 0, exp, 0).astype(np.int32)


def align4(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of 4."""
    return (nbytes + 3) & ~3
