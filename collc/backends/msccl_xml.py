"""MSCCL-IR programs as data, the runtimes' limits, and the XML text (docs/msccl.md).

`collc.backends.msccl` builds an `Algo` from a verified schedule; this module
holds what it builds, refuses programs beyond what MSCCL runtimes accept, and
writes the XML those runtimes' small hand-written parsers read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from collc.diagnostics import CollError

__all__ = [
    "BUFFERED",
    "MAX_BYTES",
    "PROTOCOLS",
    "Algo",
    "Gpu",
    "Limits",
    "Step",
    "Threadblock",
    "check_limits",
    "to_xml",
]

PROTOCOLS = ("Simple", "LL", "LL128")
# Chunks a connection buffers for its receiver, by protocol, at large sizes: 8 FIFO steps, a Simple chunk taking
# 4 of them, an LL or LL128 chunk 1 (collc/verify/plans.py models the same).
BUFFERED = {"Simple": 2, "LL": 8, "LL128": 8}
MAX_BYTES = (1 << 63) - 1  # minBytes and maxBytes are int64 in the runtimes


@dataclass(frozen=True, slots=True)
class Limits:
    """What MSCCL runtimes accept.  Steps per threadblock differ between runtimes: 64 in the
    MSCCL executor of RCCL, 256 in microsoft/msccl and msccl-executor-nccl; the default is
    the smaller, which every runtime accepts."""

    steps_per_threadblock: int = 64  # MSCCL_MAX_NUM_STEPS, nops included
    threadblocks_per_channel: int = 32  # MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL, per direction
    threadblocks: int = 128  # a dependency names its threadblock in an int8
    channels: int = 32  # MAXCHANNELS
    count: int = 71  # a step's cnt must stay below MSCCL_MAX_COUNT (72)
    offset: int = 32767  # offsets are int16 in the runtime


@dataclass(frozen=True, slots=True)
class Step:
    """One ``<step>``: ``s`` is its index in the threadblock, nops included."""

    s: int
    type: str  # s r rcs rrs rrc rrcs cpy nop
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: bool
    comment: str  # the schedule step and .coll line it came from


@dataclass(frozen=True, slots=True)
class Threadblock:
    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class Gpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    threadblocks: tuple[Threadblock, ...]


@dataclass(frozen=True, slots=True)
class Algo:
    name: str
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: bool
    outofplace: bool
    min_bytes: int
    max_bytes: int
    gpus: tuple[Gpu, ...]
    source: str  # a one-line description: program and parameters

    def count(self, type_: str) -> int:
        """How many steps of this type the program has."""
        return sum(st.type == type_ for g in self.gpus for tb in g.threadblocks for st in tb.steps)

    def most_steps(self) -> int:
        """The most steps of any threadblock."""
        return max((len(tb.steps) for g in self.gpus for tb in g.threadblocks), default=0)


def check_limits(algo: Algo, limits: Limits) -> None:
    """Refuse programs that MSCCL runtimes would reject or silently ignore."""
    problems = []
    if algo.nchannels > limits.channels:
        problems.append(f"it needs {algo.nchannels} channels; runtimes have at most {limits.channels}")
    for g in algo.gpus:
        if len(g.threadblocks) > limits.threadblocks:
            problems.append(f"rank {g.id} needs {len(g.threadblocks)} threadblocks (at most {limits.threadblocks})")
        for tb in g.threadblocks:
            if len(tb.steps) > limits.steps_per_threadblock:
                problems.append(
                    f"rank {g.id}, threadblock {tb.id} (send {tb.send}, recv {tb.recv}) has {len(tb.steps)} steps "
                    f"(at most {limits.steps_per_threadblock}, nops included)"
                )
        if max(g.i_chunks, g.o_chunks, g.s_chunks) > limits.offset:
            problems.append(f"rank {g.id} has more than {limits.offset} chunks in a buffer")
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise CollError(
            f"the MSCCL-IR program is beyond what MSCCL runtimes accept: {shown}",
            notes=(
                "runtimes that take 256 steps per threadblock (microsoft/msccl, msccl-executor-nccl): --max-steps 256",
                "otherwise fewer chunks, or fewer steps per peer, make the program smaller",
            ),
        )


def _attr(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


def escape_comment(text: str) -> str:
    """Text safe inside ``<!-- -->``: no ``--`` (and no trailing ``-``)."""
    return re.sub(r"-(?=-|$)", "- ", text)


def to_xml(algo: Algo) -> str:
    """The XML text: one element per line, attributes on the element's line, spaces only, no XML
    declaration, every attribute the runtimes read present (their parsers are minimal: docs/msccl.md)."""
    out = [
        f'<algo name="{_attr(algo.name)}" proto="{algo.proto}" nchannels="{algo.nchannels}" '
        f'nchunksperloop="{algo.nchunksperloop}" ngpus="{algo.ngpus}" coll="{algo.coll}" '
        f'inplace="{int(algo.inplace)}" outofplace="{int(algo.outofplace)}" '
        f'minBytes="{algo.min_bytes}" maxBytes="{algo.max_bytes}">',
        f"  <!-- collc: {escape_comment(algo.source)} -->",
    ]
    for g in algo.gpus:
        out.append(f'  <gpu id="{g.id}" i_chunks="{g.i_chunks}" o_chunks="{g.o_chunks}" s_chunks="{g.s_chunks}">')
        for tb in g.threadblocks:
            out.append(f'    <tb id="{tb.id}" send="{tb.send}" recv="{tb.recv}" chan="{tb.chan}">')
            for st in tb.steps:
                if st.comment:
                    out.append(f"      <!-- {escape_comment(st.comment)} -->")
                out.append(
                    f'      <step s="{st.s}" type="{st.type}" srcbuf="{st.srcbuf}" srcoff="{st.srcoff}" '
                    f'dstbuf="{st.dstbuf}" dstoff="{st.dstoff}" cnt="{st.cnt}" depid="{st.depid}" '
                    f'deps="{st.deps}" hasdep="{int(st.hasdep)}"/>'
                )
            out.append("    </tb>")
        out.append("  </gpu>")
    out.append("</algo>")
    return "\n".join(out) + "\n"
