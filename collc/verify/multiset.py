"""Exact multisets of origins, as the checker's re-trace of a failing chunk keeps them (`collc.verify.check`).

A slot's contents are a bitset of the origins it holds plus, for the origins held more than once, their
counts above one (``None`` when every origin is held at most once, the common case).  Counts are Python
ints: a schedule may count an origin 2^64 + 1 times, which no fixed-width counter tells from once.
"""

from __future__ import annotations

import numpy as np

from collc.verify.findings import bits_ids, fmt_ids

__all__ = ["Extra", "counts_of", "format_counts", "msum"]

Extra = dict[int, int] | None  # origin -> count above one (None: every origin at most once)


def msum(a: int, a_extra: Extra, b: int, b_extra: Extra) -> tuple[int, Extra]:
    """Multiset sum of (origin bitset, extra counts) pairs."""
    overlap = a & b
    if not overlap and a_extra is None and b_extra is None:
        return a | b, None
    extra = dict(a_extra or {})
    for o, m in (b_extra or {}).items():
        extra[o] = extra.get(o, 0) + m
    for o in bits_ids(overlap).tolist():
        extra[o] = extra.get(o, 0) + 1
    return a | b, extra or None


def counts_of(p: int, bits: int, extra: Extra) -> np.ndarray:
    """The count of every origin 0 .. p-1 (int64, or Python ints where a count does not fit)."""
    huge = extra is not None and max(extra.values()) >= 1 << 62
    counts = np.zeros(p, dtype=object if huge else np.int64)
    counts[bits_ids(bits)] = 1
    for o, m in (extra or {}).items():
        counts[o] += m
    return counts


def format_counts(counts: np.ndarray) -> str:
    """A multiset of origins: ``{0..7}`` or ``{0..7} (x2: {1, 2})``."""
    text = fmt_ids(np.flatnonzero(counts > 0))
    extra = [f"x{m}: {fmt_ids(np.flatnonzero(counts == m))}" for m in np.unique(counts[counts > 1])]
    return text + (f" ({', '.join(extra)})" if extra else "")
