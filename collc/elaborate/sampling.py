"""Step sampling: elaborating only some iterations of long step loops, for the simulator.

A ring allreduce on a 64x64 torus has 2·(p-1) = 8190 steps of 4096 ranks
each: far too many operations to build, and all alike.  With a `StepSampler`
in the emitter, a ``for step`` loop of more than ``limit`` iterations runs only
some of them; every skipped iteration is *stood in for* by the run iteration
before it, and the simulator charges the stand-in once per step it stands for
(its weight).

The iterations run are the first and last few, evenly spaced ones between, and
every iteration where rank 0's step differs from its previous one (other peers,
other chunk counts: a bucket algorithm moving on to its next dimension).  Those
*changes* come from a first, cheap pass that elaborates rank 0 alone
(``probing``), so that a stand-in is a step rank 0 performs alike.

Sampling is sound only when every rank meets the same long loops at the same
step counters; whenever a rank does something else there (a loop of another
length at that counter, a loop that overlaps one already sampled, or an op in a
skipped step), `SamplingConflict` is raised and the caller elaborates exactly.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from collc.ir import Op, Span
from collc.values import Range, Value, iterate

SKIPPED = "\x00skipped"
"""The phase recorded for a skipped step counter: any rank that opens that step conflicts."""

EDGE = 4
"""Iterations always run at each end of a sampled loop."""


class SamplingConflict(Exception):
    """The ranks do not meet a sampled loop the same way; elaborate exactly instead."""


class _Steps(Protocol):
    """What a sampler reads and marks of the emitter that owns it (`collc.elaborate.emitter._Emitter`):
    its step counter, the ops so far by step counter, and the phase recorded for each counter."""

    counter: int
    ops: dict[int, list[Op]]
    phase_of: dict[int, tuple[str, Span]]


def picks(n: int, limit: int) -> list[int]:
    """The iterations of an ``n``-iteration loop that run: all when ``n <= limit``, else the first and
    last `EDGE` and evenly spaced ones between, ``limit`` in all."""
    if n <= limit:
        return list(range(n))
    inner = max(limit - 2 * EDGE, 0)
    chosen = set(range(EDGE)) | set(range(n - EDGE, n))
    span = n - 2 * EDGE
    chosen |= {EDGE + (i * span) // inner for i in range(inner)}
    return sorted(chosen)


@dataclass(slots=True)
class StepSampler:
    """The sampled loops of one elaboration (mutable, owned by one `_Emitter`)."""

    limit: int
    probing: bool = False  # the first pass: rank 0 alone, every iteration run
    changes: frozenset[int] = frozenset()  # step counters where rank 0's step differs from the one before
    starts: list[int] = field(default_factory=list)  # sorted first counters of the sampled loops
    loops: dict[int, tuple[int, tuple[int, ...]]] = field(default_factory=dict)  # start -> (n, picked counters)
    stand_in: dict[int, int] = field(default_factory=dict)  # skipped counter -> the counter standing in for it

    def loop(self, emitter: _Steps, values: Value, span: Span) -> tuple[Iterable[tuple[int, Value]], int]:
        """The (counter, value) pairs of the iterations to run, and the counter after the loop."""
        base = emitter.counter
        items: Range | list[Value] = values if type(values) is Range else list(iterate(values, "for loop"))
        n = len(items)
        if n <= self.limit or self.probing:
            return zip(range(base, base + n), items, strict=True), base + n
        changed = [c - base for c in self.changes if base < c < base + n]
        at = (
            sorted(set(picks(n, self.limit)).union(changed)) if len(changed) <= 4 * self.limit else picks(n, self.limit)
        )
        if type(items) is Range:
            chosen = [(base + i, items.lo + i * items.step) for i in at]
        else:
            chosen = [(base + i, items[i]) for i in at]
        self._record(emitter, base, n, tuple(base + i for i in at), span)
        return chosen, base + n

    @staticmethod
    def changes_of(ops: dict[int, list[Op]], steps: int) -> frozenset[int]:
        """The counters (of ``0 .. steps-1``) where a probe's step differs from the one before: other peers,
        kinds or chunk counts."""

        def signature(c: int) -> tuple[tuple[str, int, int], ...]:
            return tuple(sorted((op.kind.value, op.peer, len(op.chunks)) for op in ops.get(c, ())))

        out, before = set(), signature(0)
        for c in range(1, steps):
            now = signature(c)
            if now != before:
                out.add(c)
            before = now
        return frozenset(out)

    def _record(self, emitter: _Steps, base: int, n: int, run: tuple[int, ...], span: Span) -> None:
        known = self.loops.get(base)
        if known is not None:
            if known != (n, run):
                raise SamplingConflict(f"ranks meet loops of different lengths at step {base}")
            return
        k = bisect.bisect_right(self.starts, base)
        if k > 0:
            before = self.starts[k - 1]
            if before + self.loops[before][0] > base:
                raise SamplingConflict(f"a loop at step {base} overlaps the loop sampled at step {before}")
        if k < len(self.starts) and self.starts[k] < base + n:
            raise SamplingConflict(f"a loop at step {base} overlaps the loop sampled at step {self.starts[k]}")
        for c in range(base, base + n):
            if c in emitter.ops or c in emitter.phase_of:
                if c not in run:
                    raise SamplingConflict(f"step {c}, skipped in a sampled loop, is reached by another rank")
        self.starts.insert(k, base)
        self.loops[base] = (n, run)
        marker = (SKIPPED, span)
        runs = set(run)
        last = base
        for c in range(base, base + n):
            if c in runs:
                last = c
            else:
                self.stand_in[c] = last
                emitter.phase_of[c] = marker

    def weights(self, counters: list[int]) -> tuple[int, ...]:
        """How many steps each of ``counters`` (the steps with ops, in order) stands for."""
        count = dict.fromkeys(counters, 1)
        for stand in self.stand_in.values():
            if stand in count:
                count[stand] += 1
        return tuple(count[c] for c in counters)
