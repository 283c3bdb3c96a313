"""Step assembly: the limits of one elaboration and `_Emitter`, which collects the ops of all ranks.

The emitter holds the mutable state of one elaboration: the rank being run,
its step counter, the open step and the phase, and every op so far keyed by
step.  It checks that every rank reaches a step in the same phase, and the
peer and chunks of every op (the generated code appends valid ops to the
open step itself and leaves the rest, and every error, to `_Emitter.emit`).
The IR's frozen dataclasses are built here through their slot descriptors,
which the generated code uses too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from collc.diagnostics import CollError
from collc.elaborate.sampling import SKIPPED, SamplingConflict, StepSampler
from collc.ir import Action, ChunkSet, CodecOp, Op, OpKind, Span, make_op
from collc.values import LangError, Range, Value, a_type, as_set

# Limits of one elaboration.
MAX_RANKS = 1 << 17
MAX_CHUNKS = 1 << 26
MAX_SLOTS = 1 << 28  # ranks x chunks: the (rank, chunk) slots the verifier and the executors keep state for
MAX_CALL_DEPTH = 400
MAX_LOOP_ITERATIONS = 1 << 26  # loop and comprehension iterations in one elaboration, all ranks together
MAX_STEPS = 1 << 20  # steps one rank may count (empty steps included): a step loop without a sane bound stops here

# Constructing the frozen IR dataclasses through their slot descriptors gives the very objects
# `ChunkSet(bits)` and `Op(...)` give, without the frozen dataclass __init__ (a third of the cost).
_new_set = ChunkSet.__new__
_set_bits = ChunkSet.bits.__set__  # type: ignore[attr-defined]
_new_op = Op.__new__
_op_fields = tuple(getattr(Op, name).__set__ for name in ("rank", "kind", "peer", "chunks", "action", "span"))
_op_codec = CodecOp.codec.__set__  # type: ignore[attr-defined]


def _op(
    rank: int,
    kind: OpKind,
    peer: int,
    chunks: ChunkSet,
    action: Action | None,
    span: Span,
    _set: tuple[Callable[[Op, Any], None], ...] = _op_fields,
) -> Op:
    """``Op(rank, kind, peer, chunks, action, span)``, faster."""
    op = _new_op(Op)
    _set[0](op, rank)
    _set[1](op, kind)
    _set[2](op, peer)
    _set[3](op, chunks)
    _set[4](op, action)
    _set[5](op, span)
    return op


@dataclass(slots=True)
class Carry:
    """What one elaboration hands the next when a caller elaborates the ranks of one instance in parts
    (`collc.verify.symmetry`): the phase each step counter was first reached in and the loop iterations
    left, so that the parts together make the checks of one elaboration across all their ranks."""

    phase_of: dict[int, tuple[str, Span]] = field(default_factory=dict)
    iterations_left: int = MAX_LOOP_ITERATIONS
    started: bool = False  # the first part has run (the global constants' iterations are counted once)


@dataclass(slots=True)
class _Emitter:
    """Collects the ops of all ranks, step by step (mutable state of one elaboration)."""

    nranks: int
    nchunks: int
    rank: int = 0
    counter: int = 0
    in_step: Span | None = None
    phase: str = ""
    ops: dict[int, list[Op]] = field(default_factory=dict)
    phase_of: dict[int, tuple[str, Span]] = field(default_factory=dict)
    depth: int = 0
    iterations_left: int = MAX_LOOP_ITERATIONS
    current: list[Op] | None = None  # ops[counter] while a step is open and has ops
    sets: dict[object, ChunkSet] = field(default_factory=dict)  # the chunk sets of ints and ranges, shared
    sampler: StepSampler | None = None  # long step loops run only in part (`collc.elaborate.sampling`)
    lane: int | None = None  # the open lane (`lane J:`), whose ops take the slow path of `emit`
    lanes: dict[int, int] = field(default_factory=dict)  # id(op) -> its lane, for the ops in a lane

    def chunks(self, v: Value, span: Span) -> ChunkSet:
        """``as_set(v)`` for the chunks of an op; ops with the same int or range share one set."""
        t = type(v)
        key: object
        if t is int:
            key = v
        elif t is Range and v.step == 1:  # type: ignore[union-attr]
            key = (v.lo, v.hi)  # type: ignore[union-attr]
        else:
            key = None
        cset = self.sets.get(key) if key is not None else None
        if cset is None:
            try:
                cset = as_set(v, "the chunks")
            except LangError as err:
                raise CollError(str(err), span) from None
            if key is not None:
                self.sets[key] = cset
        return cset

    def spend(self, n: int, span: Span) -> None:
        """Account for ``n`` loop iterations; a runaway program stops with an error, not a hang."""
        self.iterations_left -= n
        if self.iterations_left < 0:
            raise CollError(
                f"the program runs more than {MAX_LOOP_ITERATIONS} loop iterations in total; is a loop bound wrong?",
                span,
            )

    def reserve_steps(self, values: object, span: Span) -> None:
        """A step loop over ``values`` counts one step per value: past `MAX_STEPS` it stops here, before it runs
        (a bound that is wrong by orders of magnitude would otherwise take minutes to reach the limit)."""
        try:
            n = len(values)  # type: ignore[arg-type]
        except TypeError:
            return
        if self.counter + n > MAX_STEPS:
            raise CollError(
                f"rank {self.rank} would count {self.counter + n} steps with the step loop at line {span.line} "
                f"({n} iterations), beyond the limit of {MAX_STEPS} steps (2^{MAX_STEPS.bit_length() - 1}); is the "
                "loop's bound wrong?",
                span,
            )

    def open_step(self, span: Span) -> None:
        if self.in_step is not None:
            raise CollError(
                f"a step cannot contain another step (the enclosing step starts at line {self.in_step.line})", span
            )
        self.in_step = span
        self.current = None
        known = self.phase_of.get(self.counter)
        if known is None:
            if self.counter >= MAX_STEPS:
                raise CollError(
                    f"rank {self.rank} reaches step {self.counter} in the step at line {span.line}, beyond the limit "
                    f"of {MAX_STEPS} steps (2^{MAX_STEPS.bit_length() - 1}); is a step loop's bound wrong?",
                    span,
                )
            self.phase_of[self.counter] = (self.phase, span)
        elif known[0] == SKIPPED:
            raise SamplingConflict(f"rank {self.rank} reaches step {self.counter}, which a sampled loop skips")
        elif known[0] != self.phase:
            raise CollError(
                f"rank {self.rank} reaches step {self.counter} in phase {self.phase!r}, but another rank reaches "
                f"it in phase {known[0]!r} (line {known[1].line}); every rank must count the same steps",
                span,
            )

    def close_step(self) -> None:
        self.in_step = None
        self.lane = None
        self.current = None
        self.counter += 1

    def emit(
        self,
        kind: OpKind,
        peer: Value,
        chunks: Value,
        action: Action | None,
        span: Span,
        peer_span: Span | None = None,
        codec: str | None = None,
    ) -> None:
        rank = self.rank
        if type(peer) is not int or not 0 <= peer < self.nranks or peer == rank:
            where = peer_span or span
            if type(peer) is not int:
                raise CollError(f"a peer must be an int rank, not {a_type(peer)}", where)
            if not 0 <= peer < self.nranks:
                raise CollError(f"peer {peer} is out of range 0..{self.nranks - 1} (at rank {rank})", where)
            raise CollError(f"rank {rank} names itself as its peer", where)
        cset = chunks if type(chunks) is ChunkSet else self.chunks(chunks, span)
        bits = cset.bits
        if bits.bit_length() > self.nchunks:
            raise CollError(
                f"chunk {cset.max()} is out of range 0..{self.nchunks - 1} (at rank {rank}, {kind.value} "
                f"{'to' if kind is OpKind.SEND else 'from'} {peer})",
                span,
            )
        if not bits:
            if self.in_step is None:
                self.open_step(span)
                self.close_step()
            return
        if codec is None:
            op = _op(rank, kind, peer, cset, action, span)
        else:
            op = make_op(rank, kind, peer, cset, action, span, codec)
        if self.lane is not None:
            self.lanes[id(op)] = self.lane
        if self.in_step is not None:
            current = self.current
            if current is None:
                current = self.current = self.ops.setdefault(self.counter, [])
            current.append(op)
        else:
            self.open_step(span)
            self.ops.setdefault(self.counter, []).append(op)
            self.close_step()
