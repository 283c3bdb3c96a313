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
    "RunTally",
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


class RunTally:
    """Ids given in increasing order, a block of flags at a time, summed up without keeping them all: the first
    ``keep`` ids, then of the rest their count, their number of runs and the runs `fmt_runs` shows (the first
    `SHOWN_RUNS` and the last two), so that ``rest_text()`` is ``fmt_ids`` of the rest."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.first: list[int] = []
        self.count = 0  # ids after the first ``keep``
        self.runs = 0
        self.head: list[tuple[int, int]] = []
        self.tail: list[tuple[int, int]] = []  # the last two runs (the last one may still grow)

    def add_flags(self, offset: int, flags: np.ndarray) -> None:
        """Add the ids ``offset + i`` for which ``flags[i]`` is true (after every id added so far)."""
        if not flags.any():
            return
        edges = np.flatnonzero(np.diff(flags.astype(np.int8), prepend=0, append=0))
        starts, ends = edges[0::2] + offset, edges[1::2] + offset
        self._add_runs(starts, ends)

    def _add_runs(self, starts: np.ndarray, ends: np.ndarray) -> None:
        i = 0
        while len(self.first) < self.keep and i < starts.size:  # peel the first ids off the first runs
            lo, hi = int(starts[i]), int(ends[i])
            take = min(hi - lo, self.keep - len(self.first))
            self.first.extend(range(lo, lo + take))
            if lo + take == hi:
                i += 1
            else:
                starts = starts.copy()
                starts[i] = lo + take
        if i >= starts.size:
            return
        starts, ends = starts[i:], ends[i:]
        self.count += int((ends - starts).sum())
        if self.tail and self.tail[-1][1] == int(starts[0]):  # continues the last run
            lo = self.tail[-1][0]
            self.tail[-1] = (lo, int(ends[0]))
            if len(self.head) <= SHOWN_RUNS and self.head and self.head[-1][0] == lo:
                self.head[-1] = (lo, int(ends[0]))
            starts, ends = starts[1:], ends[1:]
        room = SHOWN_RUNS + 1 - len(self.head)
        self.head.extend(zip(starts[:room].tolist(), ends[:room].tolist(), strict=True))
        self.runs += int(starts.size)
        if starts.size:
            self.tail = (self.tail + list(zip(starts[-2:].tolist(), ends[-2:].tolist(), strict=True)))[-2:]

    def rest_text(self) -> str:
        """`fmt_ids` of the ids after the first ``keep``."""
        if self.runs <= SHOWN_RUNS:
            return format_id_set(self.head[: self.runs])
        head = format_id_set(self.head[: SHOWN_RUNS - 2])[:-1]
        tail = format_id_set(self.tail)[1:]
        return f"{head}, ..., {tail} ({self.count} in {self.runs} runs)"


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
