"""An MSCCL-IR XML simulator for the tests, independent of collc's exporter.

It reads the XML with the standard library, checks it against the rules MSCCL
runtimes enforce, and executes it symbolically: every threadblock is a program
counter over its steps; a step runs when the previous step of its threadblock
has, its dependency (``depid``/``deps``) has, and, for a receive, the message
at the head of its connection's FIFO (sender, receiver, channel) is there.
Which runnable step goes next is drawn at random, so different seeds give
different interleavings.

Values are symbolic: a chunk holds the sorted tuple of the (rank, input chunk)
contributions it sums, so a missing or doubly counted contribution shows.
Every access to a buffer location is stamped with a vector clock (program
order within a threadblock, dependencies, send -> receive); two accesses to
the same location, one of them a write, that neither happens before the
other are a data race, reported as an error even if this interleaving got
lucky.  An in-place run makes the input and output buffers overlap the way
the NCCL API defines it.
"""

from __future__ import annotations

import random
import xml.etree.ElementTree as ET
from collections import deque
from dataclasses import dataclass, field

Value = tuple[tuple[int, int], ...]
STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")
TYPES = {"s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop"}
SENDS = {"s", "rcs", "rrs", "rrcs"}
RECVS = {"r", "rcs", "rrs", "rrc", "rrcs"}
READS_SRC = {"s", "rrs", "rrc", "rrcs", "cpy", "re"}
WRITES_DST = {"r", "rcs", "rrc", "rrcs", "cpy", "re"}


class XmlError(AssertionError):
    """The XML breaks a rule, deadlocks, races or leaves a wrong result."""


@dataclass
class Step:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int


@dataclass
class TB:
    id: int
    send: int
    recv: int
    chan: int
    steps: list[Step] = field(default_factory=list)


@dataclass
class Gpu:
    id: int
    i: int
    o: int
    s: int
    tbs: list[TB] = field(default_factory=list)


@dataclass
class Program:
    attrs: dict[str, str]
    gpus: list[Gpu]

    @property
    def coll(self) -> str:
        return self.attrs["coll"]

    @property
    def ngpus(self) -> int:
        return int(self.attrs["ngpus"])


def parse(text: str, *, max_steps: int = 64) -> Program:
    """Parse and check the structure the runtimes require (at most ``max_steps`` per threadblock)."""
    if text.lstrip().startswith("<?"):
        raise XmlError("an XML declaration: the MSCCL parsers cannot read it")
    if "\t" in text:
        raise XmlError("a tab: the MSCCL parsers skip only spaces and newlines between elements")
    root = ET.fromstring(text)
    if root.tag != "algo":
        raise XmlError(f"the root element is {root.tag}, not algo")
    for key in ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
                "minBytes", "maxBytes"):  # fmt: skip
        if key not in root.attrib:
            raise XmlError(f"algo lacks {key}")
    if root.attrib["proto"] not in ("Simple", "LL", "LL128"):
        raise XmlError(f"unknown proto {root.attrib['proto']}")
    gpus = []
    for g in root.findall("gpu"):
        gpu = Gpu(int(g.attrib["id"]), int(g.attrib["i_chunks"]), int(g.attrib["o_chunks"]), int(g.attrib["s_chunks"]))
        for t in g.findall("tb"):
            tb = TB(int(t.attrib["id"]), int(t.attrib["send"]), int(t.attrib["recv"]), int(t.attrib["chan"]))
            for st in t.findall("step"):
                missing = [a for a in STEP_ATTRS if a not in st.attrib]
                if missing:
                    raise XmlError(f"gpu {gpu.id} tb {tb.id}: a step lacks {missing}")
                a = st.attrib
                tb.steps.append(Step(int(a["s"]), a["type"], a["srcbuf"], int(a["srcoff"]), a["dstbuf"],
                                     int(a["dstoff"]), int(a["cnt"]), int(a["depid"]), int(a["deps"]),
                                     int(a["hasdep"])))  # fmt: skip
            gpu.tbs.append(tb)
        gpus.append(gpu)
    prog = Program(dict(root.attrib), gpus)
    _check_structure(prog, max_steps)
    return prog


def _check_structure(prog: Program, max_steps: int) -> None:
    n = prog.ngpus
    if sorted(g.id for g in prog.gpus) != list(range(n)):
        raise XmlError("gpu ids are not 0..ngpus-1")
    nchannels = int(prog.attrs["nchannels"])
    targets: set[tuple[int, int, int]] = set()
    for g in prog.gpus:
        if [tb.id for tb in g.tbs] != list(range(len(g.tbs))):
            raise XmlError(f"gpu {g.id}: threadblock ids are not 0..n-1 in order")
        seen_send: set[tuple[int, int]] = set()
        seen_recv: set[tuple[int, int]] = set()
        for tb in g.tbs:
            if tb.send == g.id or tb.recv == g.id or not -1 <= tb.send < n or not -1 <= tb.recv < n:
                raise XmlError(f"gpu {g.id} tb {tb.id}: bad peers send={tb.send} recv={tb.recv}")
            if not 0 <= tb.chan < nchannels:
                raise XmlError(f"gpu {g.id} tb {tb.id}: channel {tb.chan} outside 0..{nchannels - 1}")
            for key, peer, seen in (("send", tb.send, seen_send), ("recv", tb.recv, seen_recv)):
                if peer >= 0:
                    if (peer, tb.chan) in seen:
                        raise XmlError(f"gpu {g.id}: two threadblocks {key} to/from {peer} on channel {tb.chan}")
                    seen.add((peer, tb.chan))
            if len(tb.steps) > max_steps:
                raise XmlError(f"gpu {g.id} tb {tb.id}: {len(tb.steps)} steps, more than {max_steps}")
            for i, st in enumerate(tb.steps):
                where = f"gpu {g.id} tb {tb.id} step {i}"
                if st.s != i:
                    raise XmlError(f"{where}: s={st.s}, steps must be numbered 0.. in order")
                if st.type not in TYPES:
                    raise XmlError(f"{where}: unknown type {st.type}")
                if st.type != "nop" and not 1 <= st.cnt <= 71:
                    raise XmlError(f"{where}: cnt {st.cnt} outside 1..71")
                if st.type in SENDS and tb.send < 0:
                    raise XmlError(f"{where}: a {st.type} on a threadblock without a send peer")
                if st.type in RECVS and tb.recv < 0:
                    raise XmlError(f"{where}: a {st.type} on a threadblock without a receive peer")
                for used, buf, off in ((st.type in READS_SRC, st.srcbuf, st.srcoff),
                                       (st.type in WRITES_DST, st.dstbuf, st.dstoff)):  # fmt: skip
                    size = {"i": g.i, "o": g.o, "s": g.s}.get(buf)
                    if size is None:
                        raise XmlError(f"{where}: unknown buffer {buf}")
                    if used and not (0 <= off and off + st.cnt <= size):
                        raise XmlError(f"{where}: {buf}[{off}:{off + st.cnt}] outside its {size} chunks")
                if st.depid >= 0:
                    if st.depid == tb.id or st.depid >= len(g.tbs) or not 0 <= st.deps < len(g.tbs[st.depid].steps):
                        raise XmlError(f"{where}: dependency on tb {st.depid} step {st.deps} does not exist")
                    targets.add((g.id, st.depid, st.deps))
                elif st.type == "nop":
                    raise XmlError(f"{where}: a nop without a dependency")
            for i in range(1, len(tb.steps)):
                if tb.steps[i - 1].type == "nop" and tb.steps[i].depid < 0:
                    raise XmlError(f"gpu {g.id} tb {tb.id} step {i}: nops must lead to a step with a dependency")
    for g in prog.gpus:
        for tb in g.tbs:
            for st in tb.steps:
                if (g.id, tb.id, st.s) in targets and not st.hasdep:
                    raise XmlError(f"gpu {g.id} tb {tb.id} step {st.s}: a step depends on it, but hasdep=0")


# --------------------------------------------------------------------------
# Execution
# --------------------------------------------------------------------------


def storage(coll: str, rank: int, gpu: Gpu, buf: str, off: int, inplace: bool) -> tuple[str, int]:
    """The memory a (buffer, offset) names; in place, ``i`` and ``o`` overlap as in the NCCL API."""
    if not inplace or buf == "s":
        return buf, off
    if coll == "allgather" and buf == "i":
        return "o", rank * gpu.i + off
    if coll == "reducescatter" and buf == "o":
        return "i", rank * gpu.o + off
    if coll in ("allreduce", "broadcast", "reduce") and buf == "i":
        return "o", off
    return buf, off


def initial(coll: str, rank: int, gpu: Gpu, inplace: bool) -> dict[tuple[str, int], Value | None]:
    mem: dict[tuple[str, int], Value | None] = {}
    for j in range(gpu.i):
        mem[storage(coll, rank, gpu, "i", j, inplace)] = ((rank, j),)
    return mem


def expected(coll: str, p: int, rank: int, gpu: Gpu) -> list[Value]:
    """The output buffer the collective must leave on ``rank``, in terms of (rank, input chunk) contributions."""
    if coll == "allreduce":
        return [tuple((q, j) for q in range(p)) for j in range(gpu.o)]
    if coll == "allgather":
        k = gpu.i
        return [((j // k, j % k),) for j in range(gpu.o)]
    if coll == "reducescatter":
        k = gpu.o
        return [tuple((q, rank * k + j) for q in range(p)) for j in range(k)]
    if coll == "alltoall":
        k = gpu.o // p
        return [((j // k, rank * k + j % k),) for j in range(gpu.o)]
    raise XmlError(f"no postcondition for {coll}")


def _leq(a: dict[tuple[int, int], int], b: dict[tuple[int, int], int]) -> bool:
    return all(b.get(key, -1) >= v for key, v in a.items())


def run(prog: Program, *, inplace: bool, seed: int, capacity: int | None = None) -> None:
    """Execute ``prog``; raise XmlError on a deadlock, a race, a bad receive or a wrong output.

    ``capacity``: the messages a connection holds; a step that sends waits for room (a fused
    step for room and its incoming message together).  None: unbounded."""
    rng = random.Random(seed)
    coll, p = prog.coll, prog.ngpus
    mem = {g.id: initial(coll, g.id, g, inplace) for g in prog.gpus}
    pc = {(g.id, tb.id): 0 for g in prog.gpus for tb in g.tbs}
    clocks: dict[tuple[int, int, int], dict[tuple[int, int], int]] = {}  # executed step -> its vector clock
    fifo: dict[tuple[int, int, int], deque[tuple[list[Value], dict[tuple[int, int], int]]]] = {}
    accesses: dict[tuple[int, str, int], list[tuple[bool, tuple[int, int], dict[tuple[int, int], int]]]] = {}
    tbs = {(g.id, tb.id): (g, tb) for g in prog.gpus for tb in g.tbs}

    def ready(key: tuple[int, int]) -> bool:
        g, tb = tbs[key]
        st = tb.steps[pc[key]]
        if st.depid >= 0 and (g.id, st.depid, st.deps) not in clocks:
            return False
        if st.type in SENDS and capacity is not None and len(fifo.get((g.id, tb.send, tb.chan), ())) >= capacity:
            return False
        if st.type in RECVS:
            queue = fifo.get((tb.recv, g.id, tb.chan))
            return bool(queue)
        return True

    def touch(g: Gpu, key: tuple[int, int], buf: str, off: int, write: bool, clock: dict) -> None:
        where = storage(coll, g.id, g, buf, off, inplace)
        log = accesses.setdefault((g.id, *where), [])
        for was_write, who, when in log:
            if (write or was_write) and who != key and not _leq(when, clock):
                raise XmlError(f"race on gpu {g.id} {where[0]}[{where[1]}]: tb {who[1]} and tb {key[1]} "
                               f"access it unordered, one of them writing")  # fmt: skip
        log.append((write, key, clock))

    def read(g: Gpu, key, buf: str, off: int, cnt: int, clock: dict) -> list[Value]:
        out = []
        for j in range(cnt):
            touch(g, key, buf, off + j, False, clock)
            value = mem[g.id].get(storage(coll, g.id, g, buf, off + j, inplace))
            if value is None:
                raise XmlError(f"gpu {g.id} tb {key[1]} reads {buf}[{off + j}] before anything is written there")
            out.append(value)
        return out

    def write(g: Gpu, key, buf: str, off: int, values: list[Value], clock: dict) -> None:
        if buf == "i" and not inplace:
            raise XmlError(f"gpu {g.id} tb {key[1]} writes the input buffer, which is the caller's (const) send buffer")
        for j, v in enumerate(values):
            touch(g, key, buf, off + j, True, clock)
            mem[g.id][storage(coll, g.id, g, buf, off + j, inplace)] = v

    def add(a: list[Value], b: list[Value]) -> list[Value]:
        return [tuple(sorted(x + y)) for x, y in zip(a, b, strict=True)]

    while True:
        live = [key for key, (g, tb) in tbs.items() if pc[key] < len(tb.steps)]
        if not live:
            break
        runnable = [key for key in live if ready(key)]
        if not runnable:
            stuck = ", ".join(f"gpu {k[0]} tb {k[1]} at step {pc[k]} ({tbs[k][1].steps[pc[k]].type})" for k in live[:6])
            raise XmlError(f"deadlock: {stuck}")
        key = rng.choice(runnable)
        g, tb = tbs[key]
        st = tb.steps[pc[key]]
        clock: dict[tuple[int, int], int] = dict(clocks[(g.id, tb.id, pc[key] - 1)]) if pc[key] else {}
        if st.depid >= 0:
            for k, v in clocks[(g.id, st.depid, st.deps)].items():
                clock[k] = max(clock.get(k, -1), v)
        incoming: list[Value] | None = None
        if st.type in RECVS:
            incoming, sent_clock = fifo[(tb.recv, g.id, tb.chan)].popleft()
            if len(incoming) != st.cnt:
                raise XmlError(f"gpu {g.id} tb {tb.id} step {st.s}: receives {st.cnt} chunks, the message has "
                               f"{len(incoming)}")  # fmt: skip
            for k, v in sent_clock.items():
                clock[k] = max(clock.get(k, -1), v)
        clock[key] = st.s
        out: list[Value] | None = None
        t = st.type
        if t == "s":
            out = read(g, key, st.srcbuf, st.srcoff, st.cnt, clock)
        elif t in ("r", "rcs"):
            assert incoming is not None
            write(g, key, st.dstbuf, st.dstoff, incoming, clock)
            out = incoming if t == "rcs" else None
        elif t in ("rrc", "rrs", "rrcs"):
            assert incoming is not None
            total = add(read(g, key, st.srcbuf, st.srcoff, st.cnt, clock), incoming)
            if t != "rrs":
                write(g, key, st.dstbuf, st.dstoff, total, clock)
            out = total if t != "rrc" else None
        elif t == "cpy":
            write(g, key, st.dstbuf, st.dstoff, read(g, key, st.srcbuf, st.srcoff, st.cnt, clock), clock)
        elif t == "re":
            mine = read(g, key, st.dstbuf, st.dstoff, st.cnt, clock)
            write(g, key, st.dstbuf, st.dstoff, add(mine, read(g, key, st.srcbuf, st.srcoff, st.cnt, clock)), clock)
        if out is not None:
            fifo.setdefault((g.id, tb.send, tb.chan), deque()).append((out, dict(clock)))
        clocks[(g.id, tb.id, st.s)] = clock
        pc[key] += 1
    left = {k: len(q) for k, q in fifo.items() if q}
    if left:
        raise XmlError(f"messages nobody received: {left}")
    for g in prog.gpus:
        want = expected(coll, p, g.id, g)
        for j, value in enumerate(want):
            got = mem[g.id].get(storage(coll, g.id, g, "o", j, inplace))
            if got != value:
                raise XmlError(f"gpu {g.id} o[{j}] holds {got}, the {coll} needs {value}")


def simulate(text: str, *, seeds: int = 3, capacity: int | None = 2, max_steps: int = 64) -> Program:
    """Parse, then run in every mode the XML claims (in place, out of place) with a few interleavings,
    connections holding ``capacity`` messages (2 by default: NCCL's buffer of 8 slices holds two
    chunks of 4 slices), and once more with unbounded connections."""
    prog = parse(text, max_steps=max_steps)
    modes = [m for m, key in ((True, "inplace"), (False, "outofplace")) if prog.attrs[key] == "1"]
    if not modes:
        raise XmlError("neither inplace nor outofplace")
    for inplace in modes:
        for seed in range(seeds):
            run(prog, inplace=inplace, seed=seed, capacity=capacity)
        run(prog, inplace=inplace, seed=seeds, capacity=None)
    return prog
