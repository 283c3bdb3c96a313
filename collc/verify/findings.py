"""Findings: what the verifier reports, the codes it reports them under, and shared formatting."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from collc.ir import ChunkSet, Span, bits_to_runs, format_id_set

__all__ = [
    "CODES",
    "Collector",
    "Finding",
    "bits_ids",
    "chunks_word",
    "contents_note",
    "fmt",
    "fmt_ids",
    "ids_bits",
    "lowest",
    "them",
]

# Codes, most useful first: the order findings are reported in.  The compression codes
# (docs/compression.md) come from collc.verify.compression.
CODES: tuple[str, ...] = (
    "layout",
    "root-out-of-range",
    "rank-out-of-range",
    "peer-out-of-range",
    "peer-is-self",
    "chunk-out-of-range",
    "bad-codec",
    "recv-without-action",
    "send-with-action",
    "unmatched-send",
    "unmatched-recv",
    "codec-mismatch",
    "duplicate-transfer",
    "write-conflict",
    "race",
    "send-not-held",
    "reduce-into-empty",
    "compress-not-held",
    "compress-compressed",
    "decompress-raw",
    "wire-compress-compressed",
    "reduce-compressed",
    "reduce-mixed",
    "codec-range",
    "double-count",
    "postcondition",
    "compressed-output",
    "tolerance",
)


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem found, located at the op responsible."""

    code: str
    message: str
    span: Span
    step: int | None
    rank: int | None
    chunk: int | None
    expected: str | None
    actual: str | None
    related: tuple[tuple[Span, str], ...] = ()  # other places the finding involves, each with what it is


def contents_note(finding: Finding) -> str | None:
    """What the slot a finding is about should hold and holds, in words, or None when there is nothing to add
    to its message: ``expected contributions {0..3}, actual {0..3} (x2: {1})``; ``actual none`` for an empty
    slot; the data's form for an output left compressed.  (A send of a slot that holds nothing says so.)"""
    expected, actual = finding.expected, finding.actual
    if finding.code == "compressed-output" and actual is not None:
        return f"expected raw data, actual data compressed with {actual}"
    actual_text = "none" if actual == "{}" else actual
    if expected is None:
        return None if actual_text in (None, "none") else f"contributions held: {actual_text}"
    if actual is None:
        return f"expected contributions {expected}"
    return f"expected contributions {expected}, actual {actual_text}"


SHOWN_RUNS = 12
"""The most runs a set in a finding's message lists; a longer one shows its first and last runs and its size."""


def fmt_runs(runs: list[tuple[int, int]]) -> str:
    """``{0..3, 7}`` for runs ``[lo, hi)``; past `SHOWN_RUNS` runs, ``{0, 2, 4, ..., 98} (50 in 50 runs)``."""
    if len(runs) <= SHOWN_RUNS:
        return format_id_set(runs)
    head = format_id_set(runs[: SHOWN_RUNS - 2])[:-1]
    tail = format_id_set(runs[-2:])[1:]
    count = sum(hi - lo for lo, hi in runs)
    return f"{head}, ..., {tail} ({count} in {len(runs)} runs)"


def fmt(bits: int) -> str:
    return fmt_runs(bits_to_runs(bits))


def fmt_ids(ids: Sequence[int] | np.ndarray) -> str:
    """`fmt` of the set of ``ids`` (in any order, repeats allowed), without building its bitset."""
    arr = np.asarray(ids, dtype=np.int64).reshape(-1)
    if arr.size == 0:
        return fmt_runs([])
    if np.any(arr[1:] < arr[:-1]):
        arr = np.sort(arr)
    arr = arr[np.concatenate(([True], arr[1:] != arr[:-1]))]
    breaks = np.flatnonzero(np.diff(arr) != 1)
    starts = np.concatenate((arr[:1], arr[breaks + 1]))
    ends = np.concatenate((arr[breaks], arr[-1:])) + 1
    return fmt_runs(list(zip(starts.tolist(), ends.tolist(), strict=True)))


def chunks_word(bits: int) -> str:
    return f"chunk {bits.bit_length() - 1}" if bits.bit_count() == 1 else f"chunks {fmt(bits)}"


def them(bits: int) -> str:
    return "it" if bits.bit_count() == 1 else "them"


def lowest(bits: int) -> int:
    return (bits & -bits).bit_length() - 1


def ids_bits(ids: Sequence[int] | np.ndarray) -> int:
    """The bitset of non-negative ``ids`` (any order, repeats allowed), in one pass: or-ing ``1 << i`` into
    an ever wider int costs its width each time, quadratic for large sets."""
    arr = np.asarray(ids, dtype=np.int64).reshape(-1)
    if arr.size == 0:
        return 0
    flags = np.zeros(int(arr.max()) + 1, dtype=np.uint8)
    flags[arr] = 1
    return int.from_bytes(np.packbits(flags, bitorder="little").tobytes(), "little")


def bits_ids(bits: int) -> np.ndarray:
    low = bits & -bits
    if bits and (bits + low) & bits == 0:  # one run: skip the bit unpacking
        return np.arange(low.bit_length() - 1, bits.bit_length(), dtype=np.int64)
    return ChunkSet(bits).ids()


class Collector:
    """Findings per code, each list capped; counts everything."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.lists: dict[str, list[Finding]] = {code: [] for code in CODES}
        self.unlisted = dict.fromkeys(CODES, 0)  # findings counted but not kept, past the cap of their code
        self.total = 0

    def room(self, code: str) -> bool:
        """Whether a finding of `code` would be kept; counts it as dropped when not."""
        if len(self.lists[code]) < self.cap:
            return True
        self.total += 1
        self.unlisted[code] += 1
        return False

    def add(self, finding: Finding) -> None:
        self.total += 1
        if len(self.lists[finding.code]) < self.cap:
            self.lists[finding.code].append(finding)
        else:
            self.unlisted[finding.code] += 1

    def dropped(self, kept: Sequence[Finding]) -> tuple[tuple[str, int], ...]:
        """Per code, in `CODES` order, how many of its findings are not among ``kept``: (code, count) pairs
        for the codes that lost some."""
        counted = {code: len(self.lists[code]) + self.unlisted[code] for code in CODES}
        for f in kept:
            counted[f.code] -= 1
        return tuple((code, n) for code, n in counted.items() if n > 0)

    def select(self) -> tuple[tuple[Finding, ...], int]:
        """At most `cap` findings: the first of each code, then the rest by priority."""
        chosen: list[tuple[int, int]] = [(p, 0) for p, code in enumerate(CODES) if self.lists[code]][: self.cap]
        for p, code in enumerate(CODES):
            for i in range(1, len(self.lists[code])):
                if len(chosen) >= self.cap:
                    break
                chosen.append((p, i))
        chosen.sort()
        findings = tuple(self.lists[CODES[p]][i] for p, i in chosen)
        return findings, self.total - len(findings)
