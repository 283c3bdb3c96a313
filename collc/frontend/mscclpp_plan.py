"""Reading MSCCL++ execution plans (JSON) into frozen dataclasses, each element with its JSON path and line.

The format is what the MSCCL++ executor loads (src/core/executor/execution_plan.cc, `ExecutionPlan::Impl`) and
what the `mscclpp.language` DSL writes (python/mscclpp/language/program.py, `CollectiveProgram.to_json`): a
top-level object (``name``, ``collective``, ``protocol``, ``inplace``, optional ``reuse_resources``,
``num_threads_per_block``, ``use_double_scratch_buffer``, ``buffer_alignment``, ``min_message_size``,
``max_message_size``) whose ``gpus`` list holds, for rank k at position k, ``input_chunks``, ``output_chunks``,
``scratch_chunks``, ``channels`` (per type, the peers each channel connects to), ``remote_buffers`` (a peer's
buffer and the channel types that access it), optional ``semaphores`` (initial values) and ``threadblocks``.  A
threadblock names the GPU's channels it uses (``channels``: type and global ids) and the remote buffers
(``remote_buffer_refs``); its ``ops`` refer to both by position in those lists.

The reader resolves every reference the way the executor does: an op's k-th ``channel_ids`` entry to the
GPU's channel (its peer, and which of the channels to that peer it is: the k-th memory channel from A to B
shares its semaphore with the k-th from B to A, executor.cc ``setupConnections``), a ``buffer_id`` to the peer's
buffer through the threadblock's references for the op's channel type, and each operand to the buffer, chunks
and format (plain or LL packets) the kernel addresses (src/core/include/execution_kernel.hpp).  Executor rules
that make an op do other than it says (a get with different source and destination indices, a put whose sources
have different buffer types, operands of different sizes) become ``notes``, reported by the checker.

Anything malformed (not JSON, a missing key, a value of the wrong type, an unknown op, an id or index out of
range, a channel or remote buffer a threadblock does not have) is a `CollError` with the file, line and JSON
path.  So is what collc does not model exactly, named where it occurs: switch (NVLS) channels and multimem ops,
``reuse_resources`` with a scratch buffer, packets outside the scratch buffer or overlapping plain use of it,
nested pipelines or pipelines of different shapes, packet ops or threadblock groups inside a pipeline, and a
channel or device semaphore whose signals (releases) or waits (acquires) come from more than one threadblock
(which wait a signal ends then depends on timing).  Semantics are `collc.verify.mscclpp_plans`'.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collc.diagnostics import CollError

__all__ = [
    "COLLECTIVES",
    "OPS",
    "Chunks",
    "MscclppPlan",
    "PlanChannel",
    "PlanGpu",
    "PlanOp",
    "PlanTb",
    "RunStep",
    "operand_parts",
    "parse_plan",
    "read_plan",
    "run_steps",
]

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall")

# Operand roles: L local plain chunks, P local packets (the buffer it names), S local packets the kernel reads from
# the scratch buffer whatever the type, R a peer's plain chunks, Q a peer's packets.  A pattern is the roles of the
# first operands, then the role of any further ones ("" : none allowed).
_SIG = tuple[frozenset[str], tuple[str, ...], str, tuple[str, ...], str]  # channel types, src, src rest, dst, dst rest
_NONE, _MEM, _PORT, _BOTH = (
    frozenset({"none"}),
    frozenset({"memory"}),
    frozenset({"port"}),
    frozenset({"memory", "port"}),
)
OPS: dict[str, _SIG] = {
    "nop": (_NONE, (), "", (), ""),
    "barrier": (_NONE, (), "", (), ""),
    "signal": (_BOTH, (), "", (), ""),
    "wait": (_BOTH, (), "", (), ""),
    "rlxsignal": (_BOTH, (), "", (), ""),
    "rlxwait": (_BOTH, (), "", (), ""),
    "flush": (_PORT, (), "", (), "-"),  # "-": dst_buff entries only counted (handleFlush flushes nOutputs channels)
    "sem_acquire": (_NONE, (), "", (), ""),
    "sem_release": (_NONE, (), "", (), ""),
    "put": (_BOTH, ("L",), "L", ("R",), "R"),
    "pws": (_PORT, ("L",), "L", ("R",), "R"),
    "pwsf": (_PORT, ("L",), "L", ("R",), "R"),
    "get": (_MEM, ("R",), "R", ("L",), "L"),
    "copy": (_NONE, ("L",), "", ("L",), ""),
    "cpkt": (_NONE, ("L",), "", ("P",), ""),
    "upkt": (_NONE, ("S",), "", ("L",), ""),
    "re": (_NONE, ("L",), "L", ("L",), ""),
    "res": (_MEM, ("L",), "L", ("L",), "R"),
    "rre": (_MEM, ("L",), "R", ("L",), ""),
    "rres": (_MEM, ("L",), "R", ("L",), "R"),
    "ppkt": (_BOTH, ("L",), "L", ("Q",), "Q"),  # over a port channel the sources are packets already (P)
    "rppkt": (_BOTH, ("S",), "", ("Q",), "Q"),
    "repkt": (_NONE, ("L",), "S", ("L",), ""),
    "respkt": (_MEM, ("L",), "S", ("L",), "Q"),
    "recpkt": (_NONE, ("L",), "S", ("L", "P"), ""),
    "recspkt": (_MEM, ("L",), "S", ("L", "P"), "Q"),
    "pipeline": (_NONE, (), "", (), ""),
}
SWITCH_OPS = ("glres", "gstore", "gstorepkt")  # multimem over switch (NVLS) channels: refused
PACKET_OPS = frozenset({"cpkt", "upkt", "ppkt", "rppkt", "repkt", "respkt", "recpkt", "recspkt"})


@dataclass(frozen=True, slots=True)
class Chunks:
    """An operand: chunks index .. index + size - 1 of a GPU's buffer ("i", "o", "s"), plain or LL packets."""

    gpu: int
    buffer: str
    index: int
    size: int
    packet: bool


@dataclass(frozen=True, slots=True)
class PlanChannel:
    """A channel an op names: its type, index among the GPU's channels of that type, peer, and which of the GPU's
    channels of that type to that peer it is (the k-th pairs with the peer's k-th back)."""

    kind: str
    index: int
    peer: int
    nth: int


@dataclass(frozen=True, slots=True)
class PlanOp:
    name: str
    channel_type: str
    src: tuple[Chunks, ...]
    dst: tuple[Chunks, ...]
    channels: tuple[PlanChannel, ...]
    semaphores: tuple[int, ...]
    barrier: tuple[int, int] | None  # (barrier_id, num_threadblocks)
    group: tuple[int, int]  # threadblock group (tb_id, tbg_size): the op does that slice of its chunks
    pipeline: tuple[int, int, tuple[PlanOp, ...]] | None  # (unit_size, num_chunks, ops)
    flushes: int  # flush: the number of channels it flushes (its dst_buff entries)
    notes: tuple[str, ...]  # where the executor does other than the op says
    path: str


@dataclass(frozen=True, slots=True)
class PlanTb:
    id: int
    ops: tuple[PlanOp, ...]
    channels: dict[str, tuple[int, ...]]  # type -> the GPU's channel ids, in the threadblock's order
    refs: dict[str, tuple[int, ...]]  # access type -> the GPU's remote buffer ids, in the threadblock's order
    path: str


@dataclass(frozen=True, slots=True)
class RunStep:
    """One op of a threadblock's run: a pipeline's ops once per iteration ``it`` (-1 outside pipelines)."""

    op: PlanOp
    it: int
    label: str  # "op k (name)", "op k.j (name, iteration i of n)"


def operand_parts(c: Chunks, step: RunStep, parts: int, iterations: int) -> range:
    """The part indices an operand ``c`` of ``step`` covers, each chunk cut into ``parts``: the op's share of its
    chunks in a threadblock group, and of that share in an iteration of a pipeline (``step.it >= 0``)."""
    lo, n = c.index * parts, c.size * parts
    part, of = step.op.group
    lo, n = lo + part * n // of, n // of
    if step.it >= 0:
        lo, n = lo + step.it * n // iterations, n // iterations
    return range(lo, lo + n)


def run_steps(tb: PlanTb, iterations: int) -> list[RunStep]:
    """The ops ``tb`` runs, in order, with each pipeline's ops repeated ``iterations`` times."""
    out = []
    for k, op in enumerate(tb.ops):
        if op.pipeline is None:
            out.append(RunStep(op, -1, f"op {k} ({op.name})"))
            continue
        for it in range(iterations):
            for j, inner in enumerate(op.pipeline[2]):
                out.append(RunStep(inner, it, f"op {k}.{j} ({inner.name}, iteration {it + 1} of {iterations})"))
    return out


@dataclass(frozen=True, slots=True)
class PlanGpu:
    id: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int
    tbs: tuple[PlanTb, ...]
    memory: tuple[int, ...]  # the peer of each memory channel
    port: tuple[int, ...]  # the peer of each port channel
    remote: tuple[tuple[int, str, tuple[str, ...]], ...]  # remote buffers: (rank, buffer, access channel types)
    semaphores: tuple[int, ...]  # initial values of the device semaphores
    path: str

    def chunks(self, buffer: str) -> int:
        return {"i": self.input_chunks, "o": self.output_chunks, "s": self.scratch_chunks}[buffer]


class _Lines:
    """The line of each JSON object or list, by path, computed on first use."""

    _TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],:]')

    def __init__(self, text: str) -> None:
        self.text = text
        self.index: dict[str, int] | None = None

    def __call__(self, path: str) -> int:
        if self.index is None:
            self.index = self._scan()
        while path not in self.index and path:
            path = re.sub(r"(\.[^.\[]*|\[\d+\])$", "", path)
        return self.index.get(path, 1)

    def _scan(self) -> dict[str, int]:
        starts = [m.start() for m in re.finditer("\n", self.text)]
        out: dict[str, int] = {}
        stack: list[list[Any]] = []  # [path, is_object, key or index, expecting a key]
        for m in self._TOKEN.finditer(self.text):
            tok = m.group()
            top = stack[-1] if stack else None
            if tok in "{[":
                path = ""
                if top is not None:
                    path = f"{top[0]}.{top[2]}" if top[1] else f"{top[0]}[{top[2]}]"
                    path = path.lstrip(".")
                out[path] = bisect_right(starts, m.start()) + 1
                stack.append([path, tok == "{", "" if tok == "{" else 0, tok == "{"])
            elif tok in "}]":
                stack.pop()
            elif top is None:
                continue
            elif tok == ",":
                if top[1]:
                    top[3] = True
                else:
                    top[2] += 1
            elif tok == ":":
                top[3] = False
            elif top[1] and top[3]:
                top[2] = json.loads(tok)
        return out


@dataclass(frozen=True, slots=True)
class MscclppPlan:
    name: str
    collective: str
    protocol: str
    inplace: bool
    reuse_resources: bool
    gpus: tuple[PlanGpu, ...]
    file: str
    lines: _Lines = field(compare=False, repr=False)

    @property
    def ngpus(self) -> int:
        return len(self.gpus)

    def line(self, path: str) -> int:
        return self.lines(path)

    def where(self, path: str) -> str:
        """``file:line`` of the element at ``path``."""
        return f"{self.file}:{self.lines(path)}"


class _Reader:
    def __init__(self, text: str, file: str) -> None:
        self.file, self.lines = file, _Lines(text)
        self.protocol, self.ngpus = "", 0
        self.pipes: set[tuple[int, int]] = set()

    def fail(self, path: str, message: str) -> CollError:
        at = f"{self.file}:{self.lines(path)}: {path}" if path else f"{self.file}:1"
        return CollError(f"{at}: {message}")

    def get(self, obj: Any, path: str, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if not isinstance(obj, dict):
            raise self.fail(path, f"should be an object, not {type(obj).__name__}")
        if key not in obj:
            if default is ...:
                raise self.fail(path, f"has no {key!r}")
            return default
        value = obj[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(
                {int: "an integer", str: "a string", bool: "true or false", list: "a list", dict: "an object"}[k]
                for k in kinds
            )
            raise self.fail(path, f"{key!r} should be {names}, not {json.dumps(value)[:40]}")
        return value

    def count(self, obj: Any, path: str, key: str, least: int = 0, default: Any = ...) -> int:
        value = self.get(obj, path, key, int, default)
        if value < least:
            raise self.fail(path, f"{key!r} is {value}, below {least}")
        return value

    def items(self, obj: Any, path: str, key: str, default: Any = ...) -> list[tuple[str, Any]]:
        return [(f"{path}.{key}[{k}]".lstrip("."), v) for k, v in enumerate(self.get(obj, path, key, list, default))]

    def ints(self, obj: Any, path: str, key: str, default: Any = ...) -> list[int]:
        out = []
        for p, v in self.items(obj, path, key, default):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise self.fail(p, f"should be an index (an integer from 0), not {json.dumps(v)[:40]}")
            out.append(v)
        return out

    def kind(self, obj: Any, path: str, key: str, allowed: tuple[str, ...]) -> str:
        return self.choice(self.get(obj, path, key, str), path, key, allowed)

    def choice(self, value: Any, path: str, key: str, allowed: tuple[str, ...]) -> str:
        if value == "switch":
            raise self.fail(
                path,
                f"{key} {value!r}: switch (NVLS) channels and multimem ops are not modelled "
                "by collc; plans with them are not checked",
            )
        if value not in allowed:
            raise self.fail(path, f"{key} {json.dumps(value)[:40]} is not one of {', '.join(allowed)}")
        return value

    # ---- the plan -------------------------------------------------------------------------------------------
    def plan(self, obj: Any) -> MscclppPlan:
        name = self.get(obj, "", "name", str)
        coll = self.get(obj, "", "collective", str)
        if coll not in COLLECTIVES:
            raise self.fail("", f"collective {coll!r}: collc checks {', '.join(COLLECTIVES)} plans")
        self.protocol = self.get(obj, "", "protocol", str)
        inplace = self.get(obj, "", "inplace", bool)
        reuse = self.get(obj, "", "reuse_resources", bool, False)
        for key in ("num_threads_per_block", "buffer_alignment", "min_message_size", "max_message_size"):
            self.count(obj, "", key, 0, 0)
        self.get(obj, "", "use_double_scratch_buffer", bool, False)
        entries = self.items(obj, "", "gpus")
        if not entries:
            raise self.fail("", "'gpus' is empty")
        self.ngpus = len(entries)
        heads = [self.gpu_head(p, g, k) for k, (p, g) in enumerate(entries)]
        gpus = tuple(self.gpu(p, g, head) for (p, g), head in zip(entries, heads, strict=True))
        if reuse and any(g.scratch_chunks for g in gpus):
            raise self.fail(
                "",
                "reuse_resources with a scratch buffer: the executor then wraps scratch offsets "
                "by a chunk size that depends on the message size, which collc does not model",
            )
        if len(self.pipes) > 1:
            raise self.fail(
                "",
                f"pipelines of different shapes (unit_size, num_chunks) {sorted(self.pipes)}: "
                "their iteration counts differ by message size, which collc does not model",
            )
        plan = MscclppPlan(name, coll, self.protocol, inplace, reuse, gpus, self.file, self.lines)
        _owners(self, plan)
        _packet_overlaps(self, plan)
        return plan

    def gpu_head(self, path: str, g: Any, k: int) -> PlanGpu:
        gid = self.count(g, path, "id")
        if gid != k:
            raise self.fail(path, f"gpu id {gid} at position {k}: the executor finds rank k at position k")
        sizes = [self.count(g, path, key) for key in ("input_chunks", "output_chunks", "scratch_chunks")]
        peers: dict[str, list[int]] = {"memory": [], "port": []}
        for p, ch in self.items(g, path, "channels"):
            kind = self.kind(ch, p, "channel_type", ("memory", "port"))
            for q, peer in zip(self.items(ch, p, "connected_to"), self.ints(ch, p, "connected_to"), strict=True):
                if peer >= self.ngpus or peer == k:
                    raise self.fail(q[0], f"connected_to {peer} is not another GPU of the {self.ngpus}")
                peers[kind].append(peer)
        remote = []
        for p, rb in self.items(g, path, "remote_buffers"):
            rank = self.count(rb, p, "rank")
            if rank >= self.ngpus or rank == k:
                raise self.fail(p, f"rank {rank} is not another GPU of the {self.ngpus}")
            buf = self.kind(rb, p, "type", ("i", "o", "s"))
            access = tuple(
                self.choice(v, q, "access channel type", ("memory", "port"))
                for q, v in self.items(rb, p, "access_channel_types")
            )
            remote.append((rank, buf, access))
        sems = tuple(self.count(s, p, "init_value") for p, s in self.items(g, path, "semaphores", []))
        return PlanGpu(k, *sizes, (), tuple(peers["memory"]), tuple(peers["port"]), tuple(remote), sems, path)

    def gpu(self, path: str, g: Any, head: PlanGpu) -> PlanGpu:
        tbs = []
        for k, (p, t) in enumerate(self.items(g, path, "threadblocks")):
            tid = self.count(t, p, "id")
            if tid != k:
                raise self.fail(p, f"threadblock id {tid} at position {k}: ids are 0, 1, ... in order")
            channels: dict[str, list[int]] = {"memory": [], "port": []}
            for q, ch in self.items(t, p, "channels"):
                kind = self.kind(ch, q, "channel_type", ("memory", "port"))
                for r, cid in zip(self.items(ch, q, "channel_ids"), self.ints(ch, q, "channel_ids"), strict=True):
                    have = len(head.memory if kind == "memory" else head.port)
                    if cid >= have:
                        raise self.fail(r[0], f"{kind} channel {cid}: gpu {head.id} has {have}")
                    channels[kind].append(cid)
            refs: dict[str, list[int]] = {"memory": [], "port": []}
            for q, ref in self.items(t, p, "remote_buffer_refs", []):
                kind = self.kind(ref, q, "access_channel_type", ("memory", "port"))
                for r, bid in zip(
                    self.items(ref, q, "remote_buffer_ids"), self.ints(ref, q, "remote_buffer_ids"), strict=True
                ):
                    if bid >= len(head.remote):
                        raise self.fail(r[0], f"remote buffer {bid}: gpu {head.id} has {len(head.remote)}")
                    refs[kind].append(bid)
            tb = PlanTb(k, (), {c: tuple(v) for c, v in channels.items()}, {c: tuple(v) for c, v in refs.items()}, p)
            ops = tuple(self.op(q, o, head, tb, False) for q, o in self.items(t, p, "ops"))
            tbs.append(PlanTb(k, ops, tb.channels, tb.refs, p))
        return PlanGpu(
            head.id,
            head.input_chunks,
            head.output_chunks,
            head.scratch_chunks,
            tuple(tbs),
            head.memory,
            head.port,
            head.remote,
            head.semaphores,
            path,
        )

    # ---- ops --------------------------------------------------------------------------------------------------
    def op(self, path: str, o: Any, g: PlanGpu, tb: PlanTb, inner: bool) -> PlanOp:
        name = self.get(o, path, "name", str)
        if name in SWITCH_OPS:
            raise self.fail(
                path,
                f"op {name!r}: switch (NVLS) multimem ops are not modelled by collc; plans with them are not checked",
            )
        if name not in OPS:
            raise self.fail(path, f"op {name!r} is not one the executor knows ({', '.join(OPS)})")
        kinds, src0, src_rest, dst0, dst_rest = OPS[name]
        ctype = self.get(o, path, "channel_type", str, "none")
        if ctype == "switch":
            raise self.fail(path, "channel_type 'switch': switch (NVLS) channels are not modelled by collc")
        if ctype not in kinds and kinds != _NONE:
            raise self.fail(
                path,
                f"op {name!r} over a {ctype!r} channel: the executor runs it over "
                f"{' or '.join(sorted(kinds))} channels",
            )
        ctype = ctype if kinds != _NONE else "none"
        notes: list[str] = []
        channels: tuple[PlanChannel, ...] = ()
        if name in ("signal", "wait", "rlxsignal", "rlxwait", "flush", "pws", "pwsf") or (
            ctype == "port" and name in ("put", "ppkt", "rppkt")
        ):
            channels = self.channels(path, o, g, tb, ctype)
        group = (0, 1)
        if "tbg_info" in o:
            info = self.get(o, path, "tbg_info", dict)
            size = self.count(info, f"{path}.tbg_info", "tbg_size", 1)
            group = (self.count(info, f"{path}.tbg_info", "tb_id"), size)
            if group[0] >= size:
                raise self.fail(f"{path}.tbg_info", f"tb_id {group[0]} of a group of {size}")
        if ctype == "port" and name == "ppkt":
            src0, src_rest = ("P",), "P"
        src = self.operands(path, o, "src_buff", src0, src_rest, g, tb, ctype, notes)
        dst = () if dst_rest == "-" else self.operands(path, o, "dst_buff", dst0, dst_rest, g, tb, ctype, notes)
        flushes = len(self.get(o, path, "dst_buff", list, [])) if name == "flush" else 0
        if flushes > len(channels):
            raise self.fail(path, f"a flush of {flushes} channels (its dst_buff entries) names {len(channels)}")
        src, dst = _executor_view(name, ctype, src, dst, notes)
        if ctype == "port" and name in ("put", "pws", "pwsf", "ppkt", "rppkt") and len(channels) != len(dst):
            raise self.fail(
                path,
                f"{len(dst)} dst_buff entries but {len(channels)} channel_ids: a port {name} "
                "sends each on its own channel",
            )
        sems = tuple(self.ints(o, path, "semaphore_ids")) if name.startswith("sem_") else ()
        for s in sems:
            if s >= len(g.semaphores):
                raise self.fail(path, f"semaphore {s}: gpu {g.id} has {len(g.semaphores)}")
        barrier = None
        if name == "barrier":
            barrier = (self.count(o, path, "barrier_id"), self.count(o, path, "num_threadblocks", 1))
        pipeline = None
        if name == "pipeline":
            if inner:
                raise self.fail(path, "a pipeline inside a pipeline: the executor does not nest them")
            ctx = self.get(o, path, "iter_context", dict)
            unit, nchunks = (self.count(ctx, f"{path}.iter_context", k, 1) for k in ("unit_size", "num_chunks"))
            self.pipes.add((unit, nchunks))
            ops = tuple(self.op(q, x, g, tb, True) for q, x in self.items(o, path, "ops"))
            for x in ops:
                if x.name in PACKET_OPS or x.group != (0, 1):
                    what = "packet op" if x.name in PACKET_OPS else "threadblock-group op"
                    raise self.fail(
                        x.path,
                        f"{what} {x.name!r} inside a pipeline: not modelled by collc (packet "
                        "ops ignore the iteration offset)",
                    )
                if any(c.size != nchunks for c in x.src + x.dst):
                    raise self.fail(
                        x.path,
                        f"{x.name!r} inside a pipeline of num_chunks={nchunks} moves other "
                        "sizes: the iterations would not cover its chunks as collc models",
                    )
            pipeline = (unit, nchunks, ops)
        return PlanOp(name, ctype, src, dst, channels, sems, barrier, group, pipeline, flushes, tuple(notes), path)

    def channels(self, path: str, o: Any, g: PlanGpu, tb: PlanTb, ctype: str) -> tuple[PlanChannel, ...]:
        ids = self.ints(o, path, "channel_ids")
        mine = tb.channels[ctype]
        peers = g.memory if ctype == "memory" else g.port
        out = []
        for k in ids:
            if k >= len(mine):
                raise self.fail(
                    path, f"channel_ids has {k}, but threadblock {tb.id} has {len(mine)} {ctype} channel(s)"
                )
            index = mine[k]
            peer = peers[index]
            out.append(PlanChannel(ctype, index, peer, peers[:index].count(peer)))
        return tuple(out)

    def operands(
        self,
        path: str,
        o: Any,
        key: str,
        first: tuple[str, ...],
        rest: str,
        g: PlanGpu,
        tb: PlanTb,
        ctype: str,
        notes: list[str],
    ) -> tuple[Chunks, ...]:
        entries = self.items(o, path, key, [])
        if len(entries) < len(first) or (not rest and len(entries) > len(first)):
            want = f"{len(first)}" + (" or more" if rest else "")
            raise self.fail(path, f"{key} has {len(entries)} entries; {o.get('name')!r} takes {want}")
        out = []
        for k, (p, b) in enumerate(entries):
            role = first[k] if k < len(first) else rest
            index, size = self.count(b, p, "index"), self.count(b, p, "size", 1)
            if "switch_channel_id" in b:
                raise self.fail(p, "switch_channel_id: switch (NVLS) channels are not modelled by collc")
            if role in "RQ":
                if "buffer_id" not in b:
                    raise self.fail(p, f"{key}[{k}] of {o.get('name')!r} is a peer's buffer: it needs buffer_id")
                bid = self.count(b, p, "buffer_id")
                refs = tb.refs[ctype]
                if bid >= len(refs):
                    raise self.fail(
                        p,
                        f"buffer_id {bid}, but threadblock {tb.id} refers to {len(refs)} remote "
                        f"buffer(s) over {ctype} channels",
                    )
                rank, buf, access = g.remote[refs[bid]]
                if ctype not in access:
                    raise self.fail(
                        p,
                        f"remote buffer {refs[bid]} (gpu {rank}'s {buf}) is not accessed over "
                        f"{ctype} channels (access_channel_types {list(access)})",
                    )
                out.append(Chunks(rank, buf, index, size, role == "Q"))
            else:
                if "buffer_id" in b:
                    raise self.fail(
                        p, f"{key}[{k}] of {o.get('name')!r} is a local buffer: it needs type, not buffer_id"
                    )
                buf = self.kind(b, p, "type", ("i", "o", "s"))
                if role == "S" and buf != "s":
                    notes.append(
                        f"{key}[{k}] of {o.get('name')!r} says buffer {buf}, but the executor reads these "
                        "packets from the scratch buffer"
                    )
                out.append(Chunks(g.id, "s" if role == "S" else buf, index, size, role in "PS"))
        for c in out:
            if c.packet and c.buffer != "s":
                raise self.fail(
                    path, f"packets in gpu {c.gpu}'s {c.buffer} buffer: collc models packets in the scratch buffer only"
                )
        return tuple(out)


def _executor_view(
    name: str, ctype: str, src: tuple[Chunks, ...], dst: tuple[Chunks, ...], notes: list[str]
) -> tuple[tuple[Chunks, ...], tuple[Chunks, ...]]:
    """The chunks the kernel touches (execution_kernel.hpp), with a note where that is not what the op says."""
    if not src and not dst:
        return src, dst
    if name == "get" and any(s.index != d.index for s, d in zip(src, dst, strict=False)):
        notes.append(
            "get with different source and destination indices: the executor (handleGet) swaps them, "
            "copying the peer's chunks at the destination index to the local source index"
        )
    if ctype == "memory" and name in ("put", "ppkt") and any(s.buffer != src[0].buffer for s in src):
        notes.append(
            f"{name} over memory channels reads every source from the buffer of src_buff[0] "
            f"({src[0].buffer}; handlePut / handlePutPackets)"
        )
        src = tuple(Chunks(s.gpu, src[0].buffer, s.index, s.size, s.packet) for s in src)
    pairs = name in ("put", "pws", "pwsf", "get", "ppkt")
    if pairs and len(src) != len(dst):
        notes.append(
            f"{len(src)} src_buff but {len(dst)} dst_buff entries: a {name} moves each source to its destination"
        )
    # the size each operand moves: put's destination's, get's and ppkt's source's, otherwise the first source's
    sizes = [d.size for d in dst] if name in ("put", "pws", "pwsf") else [s.size for s in src]
    if pairs:
        n = min(len(src), len(dst))
        src, dst, sizes = src[:n], dst[:n], sizes[:n]
        if any(s.size != d.size for s, d in zip(src, dst, strict=True)):
            notes.append(
                f"{name} with sources and destinations of different sizes: the executor moves "
                f"{'the destinations' if name in ('put', 'pws', 'pwsf') else 'the sources'}' sizes"
            )
        return (
            tuple(_sized(s, z) for s, z in zip(src, sizes, strict=True)),
            tuple(_sized(d, z) for d, z in zip(dst, sizes, strict=True)),
        )
    size = src[0].size if src else dst[0].size
    if any(c.size != size for c in src + dst):
        notes.append(f"{name} with operands of different sizes: the executor takes src_buff[0]'s ({size})")
    return tuple(_sized(s, size) for s in src), tuple(_sized(d, size) for d in dst)


def _sized(c: Chunks, size: int) -> Chunks:
    return c if c.size == size else Chunks(c.gpu, c.buffer, c.index, size, c.packet)


def _walk(plan: MscclppPlan) -> Iterator[tuple[PlanGpu, PlanTb, PlanOp]]:  # every op, pipelines' included
    for g in plan.gpus:
        for tb in g.tbs:
            for op in tb.ops:
                yield g, tb, op
                for inner in op.pipeline[2] if op.pipeline else ():
                    yield g, tb, inner


def _owners(reader: _Reader, plan: MscclppPlan) -> None:
    """Refuses a channel (or port channel) or device semaphore used from two threadblocks where that makes the
    matching of signals to waits depend on timing."""
    users: dict[tuple[str, str], tuple[int, str]] = {}
    for g, tb, op in _walk(plan):
        keys: list[tuple[str, str]] = []
        if op.name in ("signal", "rlxsignal", "pws", "pwsf", "wait", "rlxwait"):
            verb = "wait on" if "wait" in op.name else "signal"
            keys = [(verb, f"gpu {g.id}'s {c.kind} channel {c.index}") for c in op.channels]
        elif op.name.startswith("sem_"):
            keys = [(op.name[4:], f"gpu {g.id}'s device semaphore {s}") for s in op.semaphores]
        if op.channel_type == "port" and op.channels and op.name not in ("wait", "rlxwait"):
            keys += [("use", f"gpu {g.id}'s port channel {c.index}") for c in op.channels]  # puts, signals, flushes
        for key in keys:
            first = users.setdefault(key, (tb.id, op.path))
            if first[0] != tb.id:
                raise reader.fail(
                    op.path,
                    f"threadblocks {first[0]} and {tb.id} both {key[0]} {key[1]} (also at "
                    f"{first[1]}): which signal or release a wait takes then depends on "
                    "timing, and collc checks plans where one threadblock does each",
                )


def _packet_overlaps(reader: _Reader, plan: MscclppPlan) -> None:
    """Refuses plain and packet use of the same scratch bytes (packet chunk c takes plain chunks 2c and 2c + 1)."""
    spans: dict[tuple[int, bool], list[tuple[int, int, str]]] = {}
    for _, _, op in _walk(plan):
        for c in op.src + op.dst:
            if c.buffer == "s":
                lo = 2 * c.index if c.packet else c.index
                spans.setdefault((c.gpu, c.packet), []).append((lo, lo + (2 if c.packet else 1) * c.size, op.path))
    for (gpu, packet), plain in spans.items():
        if packet:
            continue
        for lo, hi, path in plain:
            for plo, phi, ppath in spans.get((gpu, True), []):
                if lo < phi and plo < hi:
                    raise reader.fail(
                        path,
                        f"plain use of gpu {gpu}'s scratch chunks {lo}..{hi - 1}, which "
                        f"packets at {ppath} also take: collc does not model that overlap",
                    )


def parse_plan(text: str, file: str = "<plan>") -> MscclppPlan:
    """The plan in ``text`` (MSCCL++ execution plan JSON); CollError with the line and JSON path for anything
    malformed or not modelled."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise CollError(f"{file}:{err.lineno}: not valid JSON: {err.msg}") from None
    except RecursionError:
        raise CollError(f"{file}: not a plan: nested too deeply") from None
    if not isinstance(obj, dict):
        raise CollError(f"{file}:1: an MSCCL++ execution plan is a JSON object, not {type(obj).__name__}")
    return _Reader(text, file).plan(obj)


def read_plan(path: str | Path) -> MscclppPlan:
    """The plan in the file ``path``."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise CollError(f"cannot read {path}: {err}") from None
    return parse_plan(text, str(path))
