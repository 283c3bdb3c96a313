"""Reading MSCCL-IR XML plans (msccl-tools, TACCL, `collc export`) into frozen dataclasses, with their lines.

The format (docs/msccl.md): one ``<algo>`` element with ``<gpu>`` elements,
each holding ``<tb>`` threadblocks (``send`` and ``recv`` peers, ``chan``)
whose ``<step>`` elements run in order.  The reader accepts what the MSCCL
runtimes' parsers accept and the attributes in any order; a missing or
malformed attribute, an unknown step type, threadblock ids with gaps or a
step numbering out of order is a `CollError` naming the file and line.
Semantics (what the steps do) are `collc.verify.plans`'.
"""

from __future__ import annotations

import xml.parsers.expat
from dataclasses import dataclass
from pathlib import Path

from collc.diagnostics import CollError

__all__ = [
    "COLLECTIVES", "STEP_TYPES", "Plan", "PlanGpu", "PlanStep", "PlanTb", "buffers_fit", "parse_plan", "read_plan",
]  # fmt: skip

STEP_TYPES = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop")
"""Send, receive, receive-copy-send, receive-reduce-send, receive-reduce-copy, receive-reduce-copy-send,
local copy, local reduce, no operation."""

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall")

BUFFERS = ("i", "o", "s")


def buffers_fit(coll: str, p: int, i: int, o: int) -> bool:
    """Whether input and output buffers of ``i`` and ``o`` chunks per GPU fit collective ``coll`` (MSCCL's name
    for it) on ``p`` GPUs: one buffer's chunks are p times the other's where the collective gathers or scatters,
    and an alltoall's are p blocks."""
    return {
        "allreduce": i == o,
        "allgather": o == p * i,
        "reducescatter": i == p * o,
        "alltoall": i == o and i % p == 0,
    }[coll]


@dataclass(frozen=True, slots=True)
class PlanStep:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: bool
    line: int


@dataclass(frozen=True, slots=True)
class PlanTb:
    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[PlanStep, ...]
    line: int


@dataclass(frozen=True, slots=True)
class PlanGpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: tuple[PlanTb, ...]
    line: int


@dataclass(frozen=True, slots=True)
class Plan:
    name: str
    coll: str
    ngpus: int
    nchunksperloop: int
    nchannels: int
    proto: str
    inplace: bool
    outofplace: bool
    gpus: tuple[PlanGpu, ...]
    file: str

    def where(self, line: int) -> str:
        """``file:line`` of an element."""
        return f"{self.file}:{line}"


class _Element:
    __slots__ = ("attrs", "children", "line", "tag")

    def __init__(self, tag: str, attrs: dict[str, str], line: int) -> None:
        self.tag, self.attrs, self.line = tag, attrs, line
        self.children: list[_Element] = []


def _tree(text: str, file: str) -> _Element:
    parser = xml.parsers.expat.ParserCreate()
    stack: list[_Element] = []
    root: list[_Element] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        element = _Element(tag, attrs, parser.CurrentLineNumber)
        (stack[-1].children if stack else root).append(element)
        stack.append(element)

    def end(tag: str) -> None:
        stack.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(text, True)
    except xml.parsers.expat.ExpatError as err:
        raise CollError(
            f"{file}:{err.lineno}: not well-formed XML: {xml.parsers.expat.ErrorString(err.code)}"
        ) from None
    if len(root) != 1 or root[0].tag != "algo":
        raise CollError(f"{file}: an MSCCL-IR plan has one <algo> element at its top")
    return root[0]


def _int(file: str, e: _Element, name: str, default: int | None = None, least: int | None = None) -> int:
    text = e.attrs.get(name)
    if text is None:
        if default is not None:
            return default
        raise CollError(f"{file}:{e.line}: <{e.tag}> has no {name} attribute")
    try:
        value = int(text.strip())
    except ValueError:
        raise CollError(f"{file}:{e.line}: <{e.tag}> {name}={text!r} is not an integer") from None
    if least is not None and value < least:
        raise CollError(f"{file}:{e.line}: <{e.tag}> {name}={value} is below {least}")
    return value


def _step(file: str, e: _Element, index: int) -> PlanStep:
    kind = e.attrs.get("type", "")
    if kind not in STEP_TYPES:
        raise CollError(f"{file}:{e.line}: step type {kind!r} is not one of {', '.join(STEP_TYPES)}")
    bufs = [e.attrs.get(b, "i") for b in ("srcbuf", "dstbuf")]
    for name, buf in zip(("srcbuf", "dstbuf"), bufs, strict=True):
        if buf not in BUFFERS:
            raise CollError(f"{file}:{e.line}: {name}={buf!r} is not a buffer (i, o or s)")
    s = _int(file, e, "s")
    if s != index:
        raise CollError(f"{file}:{e.line}: step s={s} is the threadblock's step {index}: steps are numbered 0, 1, ...")
    return PlanStep(
        s,
        kind,
        bufs[0],
        _int(file, e, "srcoff", 0, -1),
        bufs[1],
        _int(file, e, "dstoff", 0, -1),
        _int(file, e, "cnt", 1, 1 if kind != "nop" else 0),
        _int(file, e, "depid", -1, -1),
        _int(file, e, "deps", -1, -1),
        _int(file, e, "hasdep", 0, 0) != 0,
        e.line,
    )


def parse_plan(text: str, file: str = "<plan>") -> Plan:
    """The plan in ``text`` (MSCCL-IR XML); CollError with the line for anything malformed."""
    algo = _tree(text, file)
    coll = algo.attrs.get("coll", "")
    if coll not in COLLECTIVES:
        raise CollError(f"{file}:{algo.line}: coll={coll!r}: collc checks {', '.join(COLLECTIVES)} plans")
    gpus = []
    for g in (c for c in algo.children if c.tag == "gpu"):
        tbs = []
        for t in (c for c in g.children if c.tag == "tb"):
            steps = tuple(_step(file, e, k) for k, e in enumerate(c for c in t.children if c.tag == "step"))
            tb = PlanTb(
                _int(file, t, "id", least=0),
                _int(file, t, "send", -1, -1),
                _int(file, t, "recv", -1, -1),
                _int(file, t, "chan", 0, 0),
                steps,
                t.line,
            )
            if tb.id != len(tbs):
                raise CollError(f"{file}:{t.line}: threadblock id {tb.id} should be {len(tbs)}: ids are 0, 1, ...")
            tbs.append(tb)
        gpu = PlanGpu(
            _int(file, g, "id", least=0),
            _int(file, g, "i_chunks", 0, 0),
            _int(file, g, "o_chunks", 0, 0),
            _int(file, g, "s_chunks", 0, 0),
            tuple(tbs),
            g.line,
        )
        if gpu.id != len(gpus):
            raise CollError(f"{file}:{g.line}: gpu id {gpu.id} should be {len(gpus)}: gpus are listed 0, 1, ...")
        gpus.append(gpu)
    ngpus = _int(file, algo, "ngpus", len(gpus), 1)
    if ngpus != len(gpus):
        raise CollError(f"{file}:{algo.line}: ngpus={ngpus} but the plan lists {len(gpus)} <gpu> elements")
    return Plan(
        algo.attrs.get("name", Path(file).stem),
        coll,
        ngpus,
        _int(file, algo, "nchunksperloop", 0, 0),
        _int(file, algo, "nchannels", 1, 1),
        algo.attrs.get("proto", "Simple"),
        _int(file, algo, "inplace", 1, 0) != 0,
        _int(file, algo, "outofplace", 1, 0) != 0,
        tuple(gpus),
        file,
    )


def read_plan(path: str | Path) -> Plan:
    """The plan in the file ``path``."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise CollError(f"cannot read {path}: {err}") from None
    return parse_plan(text, str(path))
