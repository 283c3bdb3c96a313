"""A step's operations merged per ordered pair of ranks, as the checker matches them (`collc.verify.check`),
with the findings of ill-formed and duplicated operations."""

from __future__ import annotations

from collections.abc import Sequence

from collc.ir import Action, Op, OpKind
from collc.verify.findings import Collector, Finding, chunks_word, lowest, them

__all__ = ["Pairs", "find_op", "merge_pairs"]


Pairs = dict[tuple[int, int], list[int]]  # (src, dst) -> [sent, copied, reduced] chunk bits


def merge_pairs(
    ops: Sequence[Op], nranks: int, nchunks: int, step: int, out: Collector | None, codecs: list[bool] | None = None
) -> Pairs:
    """Merge a step's ops per (src, dst); ill-formed ops are reported to `out` and skipped or repaired.

    Local ops (compress, decompress) are skipped; when some op is local or carries a codec,
    ``codecs[0]`` becomes True (the compression pass, `collc.verify.compression`, checks them).
    """
    pairs: Pairs = {}
    get = pairs.get
    send_kind, recv_kind, reduce_action = OpKind.SEND, OpKind.RECV, Action.REDUCE
    compressed = False
    for op in ops:
        rank, peer, bits = op.rank, op.peer, op.chunks.bits
        if op.codec is not None:
            compressed = True
        if not (0 <= rank < nranks and 0 <= peer < nranks and rank != peer) or bits.bit_length() > nchunks:
            if op.kind is not send_kind and op.kind is not recv_kind:
                compressed = True
                continue
            bits = _repair(op, nranks, nchunks, step, out)
            if bits < 0:
                continue
        if op.kind is send_kind:
            if op.action is not None and out is not None:
                msg = f"step {step}: rank {rank} sends to rank {peer} with action {op.action.value!r}"
                out.add(Finding("send-with-action", msg, op.span, step, rank, None, None, None))
            entry = get((rank, peer))
            if entry is None:
                pairs[rank, peer] = [bits, 0, 0]
            else:
                if entry[0] & bits and out is not None:
                    _duplicate(out, op, step, entry[0] & bits)
                entry[0] |= bits
        elif op.kind is recv_kind:
            entry = get((peer, rank))
            if entry is None:
                entry = pairs[peer, rank] = [0, 0, 0]
            elif (entry[1] | entry[2]) & bits and out is not None:
                _duplicate(out, op, step, (entry[1] | entry[2]) & bits)
            if op.action is reduce_action:
                entry[2] |= bits
            else:
                entry[1] |= bits
                if op.action is None and out is not None:
                    msg = f"step {step}: rank {rank} receives from rank {peer} without an action (copy assumed)"
                    out.add(Finding("recv-without-action", msg, op.span, step, rank, None, None, None))
        else:
            compressed = True
    if compressed and codecs is not None:
        codecs[0] = True
    return pairs


def _duplicate(out: Collector, op: Op, step: int, bits: int) -> None:
    """The same chunk twice between one pair in one step: one message cannot be sent or received twice."""
    if op.kind is OpKind.SEND:
        msg = (
            f"step {step}: rank {op.rank} sends {chunks_word(bits)} to rank {op.peer} twice in this step, "
            f"but one message per chunk arrives"
        )
    else:
        msg = (
            f"step {step}: rank {op.rank} receives {chunks_word(bits)} from rank {op.peer} twice in this step, "
            f"but rank {op.peer} sends {them(bits)} once"
        )
    out.add(Finding("duplicate-transfer", msg, op.span, step, op.rank, lowest(bits), None, None))


def _repair(op: Op, nranks: int, nchunks: int, step: int, out: Collector | None) -> int:
    """Report an ill-formed op; its chunk bits cut to range, or -1 when it must be skipped."""
    rank, peer, bits = op.rank, op.peer, op.chunks.bits
    verb = "sends to" if op.kind is OpKind.SEND else "receives from"
    if not 0 <= rank < nranks:
        if out is not None:
            msg = f"step {step}: an op of rank {rank} {verb} rank {peer}, but ranks are 0..{nranks - 1}"
            out.add(Finding("rank-out-of-range", msg, op.span, step, rank, None, None, None))
        return -1
    if not 0 <= peer < nranks or peer == rank:
        if out is not None:
            code = "peer-is-self" if peer == rank else "peer-out-of-range"
            why = "itself" if peer == rank else f"rank {peer}, but ranks are 0..{nranks - 1}"
            out.add(Finding(code, f"step {step}: rank {rank} {verb} {why}", op.span, step, rank, None, None, None))
        return -1
    mask = (1 << nchunks) - 1
    if out is not None:
        bad = bits & ~mask
        what = chunks_word(bad)
        msg = f"step {step}: rank {rank} {verb} rank {peer} {what}, but chunks are 0..{nchunks - 1}"
        out.add(Finding("chunk-out-of-range", msg, op.span, step, rank, bad.bit_length() - 1, None, None))
    return bits & mask


def find_op(ops: Sequence[Op], rank: int, kind: OpKind, peer: int, bits: int, action: Action | None = None) -> Op:
    """The first op of a step that moves some of `bits` (with `action`), to locate a finding."""
    fallback: Op | None = None
    for op in ops:
        if op.rank == rank and op.kind is kind and op.peer == peer:
            fallback = fallback or op
            if op.chunks.bits & bits and (action is None or (op.action or Action.COPY) is action):
                return op
    assert fallback is not None
    return fallback
