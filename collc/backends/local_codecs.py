"""The ``local`` executor for schedules with compression points: real codec round trips.

The semantics of `collc.backends.local`, with the codecs of `collc.codecs`
(docs/compression.md).  Every chunk is compressed as a payload of its own.
Each rank's buffer holds, for a compressed slot, the values its payload
decodes to, and a table records which slots are compressed and with what:

* ``compress`` (a local op, at the start of its step): a raw slot's values
  become the decoded values of their payload; the slot is compressed;
* ``decompress``: the slot is raw again (its values are already the decoded ones);
* a send with a codec (wire compression): the receiver gets the decoded values
  of the sent data's payload, raw; a send of a compressed slot forwards its
  payload (the values, unchanged) and the receiving slot is compressed too;
* a reduce of two slots compressed with the same homomorphic codec adds their
  payloads (the codec's ``add_payloads``: op sum only) and stays compressed;
  any other reduce works on the (decoded) values.

`collc.backends.local.run` runs a schedule that compresses with `execute` and
judges its result by the verifier's error bound for each (rank, chunk) slot
(`local.judge_error_bounds`).  Only float32 and float64 data and the ops sum,
max and min are supported (`check_args`): the codecs encode floating-point
values, and the error bounds assume a sum (which also bounds max and min).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from collc.codecs import Codec, parse_codec
from collc.ir import Action, Op, OpKind, Schedule

__all__ = ["DTYPES", "OPS", "check_args", "execute"]

OPS: tuple[str, ...] = ("sum", "max", "min")
DTYPES: tuple[str, ...] = ("float32", "float64")


@cache
def _codec(spec: str) -> Codec:
    return parse_codec(spec)


@dataclass(frozen=True, slots=True)
class _Move:
    """Chunk ``chunk`` of ``src``'s buffer goes to ``dst``, through ``wire`` if not None."""

    src: int
    dst: int
    chunk: int
    wire: Codec | None
    reduce: bool


def check_args(schedule: Schedule, dtype: str, op: str) -> None:
    """ValueError unless ``schedule`` (it compresses) can run on ``dtype`` data with ``op``."""
    if dtype not in DTYPES:
        raise ValueError(
            f"{schedule.algorithm} has compression points: it runs on {' or '.join(DTYPES)} data (codecs encode "
            f"floating-point values), not {dtype}"
        )
    if op not in OPS:
        raise ValueError(
            f"{schedule.algorithm} has compression points: its error bounds cover the ops {', '.join(OPS)}, not {op}"
        )


def _moves(schedule: Schedule, ops: Sequence[Op], nonempty: int) -> list[_Move]:
    """A step's receives, chunk by chunk, each with the codec its sender puts on the wire."""
    p = schedule.nranks
    wire: dict[tuple[int, int, int], str | None] = {}  # what travels is the sender's choice
    for op in ops:
        if op.kind is OpKind.SEND:
            for c in op.chunks:
                wire[op.rank, op.peer, c] = op.codec
    moves = []
    for op in ops:
        if op.kind is not OpKind.RECV:
            continue
        if not (0 <= op.rank < p and 0 <= op.peer < p) or op.action is None:
            raise ValueError(f"{op.span}: an ill-formed receive (rank {op.rank}, peer {op.peer}, {op.action})")
        for c in op.chunks:
            if not (nonempty >> c) & 1:
                continue
            spec = wire.get((op.peer, op.rank, c), op.codec)
            moves.append(_Move(op.peer, op.rank, c, _codec(spec) if spec else None, op.action is Action.REDUCE))
    return moves


def execute(
    schedule: Schedule, buffers: np.ndarray, op: str, offsets: np.ndarray, wire: np.ndarray | None = None
) -> None:
    """Run ``schedule`` on ``buffers`` (nranks, logical elements) in place, with the codecs.

    ``wire`` (one integer per rank), when given, adds up the bytes each rank
    sends: a raw chunk's elements, a compressed one's payload (empty chunks
    are not sent).
    """
    ufunc = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
    nonempty = sum(1 << int(c) for c in np.flatnonzero(np.diff(offsets)))
    dt = buffers.dtype
    # the compressed slots: (rank, chunk) -> (codec, payload); their values in `buffers` are the decoded ones
    payloads: dict[tuple[int, int], tuple[Codec, np.ndarray]] = {}

    def region(c: int) -> slice:
        return slice(int(offsets[c]), int(offsets[c + 1]))

    with np.errstate(all="ignore"):
        for step in schedule.steps:
            for lop in step.ops:
                if not lop.kind.local:
                    continue
                for c in lop.chunks:
                    key = (lop.rank, c)
                    if not (nonempty >> c) & 1:
                        continue
                    if lop.kind is OpKind.DECOMPRESS:
                        payloads.pop(key, None)
                    elif lop.codec is not None and key not in payloads:
                        codec = _codec(lop.codec)
                        row, at = buffers[lop.rank], region(c)
                        payload = codec.compress(row[at])
                        row[at] = codec.decompress(payload, at.stop - at.start, dt)
                        payloads[key] = (codec, payload)
            moves = _moves(schedule, step.ops, nonempty)
            incoming = []  # every send reads the buffer as it is now
            for m in moves:
                data, held = buffers[m.src, region(m.chunk)].copy(), payloads.get((m.src, m.chunk))
                sent = data.nbytes if held is None else held[1].size
                if m.wire is not None and held is None:
                    payload = m.wire.compress(data)
                    data, sent = m.wire.decompress(payload, data.size, dt), payload.size
                if wire is not None:
                    wire[m.src] += sent
                incoming.append((data, held))
            for reduce in (False, True):  # copies land first, then reduces
                for m, (data, held) in zip(moves, incoming, strict=True):
                    if m.reduce is not reduce:
                        continue
                    key, at = (m.dst, m.chunk), region(m.chunk)
                    if not reduce:
                        buffers[m.dst, at] = data
                        if held is None:
                            payloads.pop(key, None)
                        else:
                            payloads[key] = held
                        continue
                    mine = payloads.get(key)
                    if held is not None and mine is not None and held[0] == mine[0] and held[0].homomorphic_sum:
                        codec = held[0]
                        if op != "sum":
                            raise ValueError(
                                f"{schedule.algorithm}: a reduce of {codec.spec} payloads adds them; run it with op sum"
                            )
                        total = codec.add_payloads(mine[1], held[1])  # type: ignore[attr-defined]
                        buffers[m.dst, at] = codec.decompress(total, data.size, dt)
                        payloads[key] = (codec, total)
                    else:  # raw data (a misuse the verifier reports also lands here, on the decoded values)
                        buffers[m.dst, at] = ufunc(buffers[m.dst, at], data)
