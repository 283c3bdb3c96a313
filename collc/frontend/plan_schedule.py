"""A plan's messages as a collc `Schedule`: what the two plan importers share.

`collc.frontend.plan_ir` (MSCCL-IR plans) and `collc.frontend.mscclpp_ir` (MSCCL++ execution plans) each run a
plan once in the terms of its format (threadblocks, connections, dependencies, semaphores, packets) and record
every movement of data between two GPUs as a `Message` whose elements are logical chunks.  A `PlanConversion`
holds what a schedule makes of those messages, the same for both formats:

* slots and their versions: a slot (GPU, logical chunk) holds its input (or nothing), then one version per
  receive that writes it; a location holds a version (`Version`), a received value waiting in scratch
  (`Pending`) or nothing the schedule can name (`Nothing`), and the value the plan computes there (symbolic sums
  of contributions, `Value`); two writes of one slot, and two accesses to one location (one a write), must be
  ordered by the plan's vector clocks;
* the steps: each message's step is the longest path over the constraints between messages (`Constraints`: the
  format's own waits, then what the values need), and a constraint of a step or more on a cycle is refused;
* the schedule: its steps run against the plan's values, then assembled into a `Schedule`.

A format supplies its layout of chunks (`Layout`), the words its refusals use where they differ (`Wording`), how it
names a location, a GPU's place in the plan and a cycle of constraints.  Every refusal is a `CollError` at the
plan's file and line, with a JSON path where the format has one.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import numpy as np

from collc.collectives import EVERY, chunk_origin
from collc.diagnostics import CollError
from collc.ir import Action, ChunkSet, Collective, Op, OpKind, Schedule, Span, Step

__all__ = [
    "COLLECTIVES",
    "NOTHING",
    "Constraints",
    "Content",
    "Ctx",
    "Layout",
    "Loc",
    "Message",
    "Node",
    "Nothing",
    "Pending",
    "PlanConversion",
    "Site",
    "Value",
    "Version",
    "Wording",
    "Write",
    "components",
    "merge",
    "refusal",
    "twice",
]

COLLECTIVES = {
    "allreduce": Collective.ALLREDUCE,
    "allgather": Collective.ALLGATHER,
    "reducescatter": Collective.REDUCE_SCATTER,
    "alltoall": Collective.ALLTOALL,
}
"""The plans' names of the collectives collc converts."""

Loc = tuple[int, str, int]  # (gpu, buffer after the in-place overlap, offset or part): a place of the plan
Value = tuple[int, ...] | None  # sorted contributions (gpu * nchunks + chunk), repeats kept; None: nothing
Node = tuple[int, int]  # (threadblock over the plan, position of a step or op in its run)


@dataclass(frozen=True, slots=True)
class Version:
    """A location holds version ``index`` of its GPU's slot for ``chunk``."""

    chunk: int
    index: int


@dataclass(frozen=True, slots=True)
class Pending:
    """A scratch location holds element ``elem`` of message ``msg``, received and not yet a version."""

    msg: int
    elem: int


@dataclass(frozen=True, slots=True)
class Nothing:
    """A location holds nothing the schedule can name; ``why`` says so in words."""

    why: str


Content = Version | Pending | Nothing
NOTHING = Nothing("which nothing wrote: collc's IR has no value for it")


@dataclass(frozen=True, slots=True)
class Write:
    """A version of a slot: written by message ``msg`` (as a copy or a reduction) at ``node``."""

    msg: int
    action: Action
    node: Node


@dataclass(frozen=True, slots=True)
class Site:
    """A step or op of a plan: the words that name it in a refusal, its line and its JSON path ("" for none)."""

    where: str
    line: int
    path: str = ""


@dataclass(frozen=True, slots=True)
class Ctx:
    """The step or op being run: its node, its threadblock's vector clock, and its `Site` (words, line, path)."""

    node: Node
    clock: np.ndarray
    where: str
    line: int
    path: str = ""

    @property
    def site(self) -> Site:
        return Site(self.where, self.line, self.path)


@dataclass(slots=True, kw_only=True)
class Message:
    """A movement of data between two GPUs: its elements (chunks), with what each carries and how it lands."""

    src: int
    dst: int
    sent: Site  # the step or op that sends it
    landed: Site  # the step or op that receives it
    labels: list[int] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    reads: list[int] = field(default_factory=list)  # per element: the version of the sender's slot it reads
    actions: list[Action | None] = field(default_factory=list)  # per element, once its version is written
    empty: list[bool] = field(default_factory=list)  # per element: a reduction into nothing, in the plan


@dataclass(frozen=True, slots=True)
class Wording:
    """How a format's refusals word what differs between formats; templates are filled by `str.format`."""

    named: str  # a step or op, as another's race names it: {where}, {line}
    writer: str  # what wrote a slot before, in "and so does {writer} at line N"
    lands: str  # what a message does where it lands: "{lands} chunk c into ..."
    written: str  # how an output's newer value came, in "than the one {written} at line N"
    fellow: str  # another message of a step, in "as another {fellow} of that step does (a conflict)"
    missent: str  # a send that carries another value than the schedule's: {c}, {src}, {k}, {sent}, {have}
    rewrites: str  # why a write of a slot comes a step after the other: {g}, {c}
    reads: str  # why a send comes a step after the write it reads: {src}, {c}
    repeats: str  # why two messages with a chunk in common between two GPUs take different steps: {src}, {dst}, {c}


class Layout(Protocol):
    """Logical chunks of a plan's locations: ``parts`` schedule chunks per plan chunk of the input and output."""

    collective: Collective
    p: int
    n: int
    i: int
    o: int
    parts: int
    inplace: bool

    def loc(self, g: int, buf: str, x: int) -> Loc: ...

    def label(self, at: Loc) -> int | None: ...


def refusal(file: str, line: int, message: str, path: str = "") -> CollError:
    """A `CollError` at ``file``'s line ``line`` (and JSON path ``path``, if any)."""
    return CollError(f"{file}:{line}: {path + ': ' if path else ''}{message}", Span(file, line, 1, line, 1))


def merge(a: Value, b: Value) -> Value:
    """A reduction's value: the contributions of both (an empty operand adds nothing, as in collc's verifier)."""
    if a is None or b is None:
        return a if b is None else b
    return tuple(sorted(a + b))  # two sorted runs: merged in linear time


def twice(v: Value) -> bool:
    """Whether ``v`` counts a contribution more than once."""
    return v is not None and len(set(v)) != len(v)


def components(adj: list[list[tuple[int, int, str]]]) -> tuple[list[int], int]:
    """Strongly connected components (Tarjan's, iteratively), numbered sinks first."""
    n = len(adj)
    index, low, comp = [-1] * n, [0] * n, [-1] * n
    on = [False] * n
    stack: list[int] = []
    counter = ncomp = 0

    def enter(v: int) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on[v] = True

    for root in range(n):
        if index[root] >= 0:
            continue
        enter(root)
        work = [(root, 0)]
        while work:
            v, i = work[-1]
            if i < len(adj[v]):
                work[-1] = (v, i + 1)
                u = adj[v][i][0]
                if index[u] < 0:
                    enter(u)
                    work.append((u, 0))
                elif on[u]:
                    low[v] = min(low[v], index[u])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                while True:
                    x = stack.pop()
                    on[x] = False
                    comp[x] = ncomp
                    if x == v:
                        break
                ncomp += 1
    return comp, ncomp


class Constraints:
    """Constraints between the steps of vertices: the messages (0 .. number of messages - 1), then any vertices a
    format adds.  An edge (u, v, w, why): v's step is at least w after u's; ``why`` says so where w is 1."""

    def __init__(self, vertices: int) -> None:
        self.adj: list[list[tuple[int, int, str]]] = [[] for _ in range(vertices)]

    def edge(self, u: int, v: int, w: int, why: str) -> None:
        self.adj[u].append((v, w, why))


M = TypeVar("M", bound=Message)


class PlanConversion(ABC, Generic[M]):
    """One plan's conversion: its messages, the versions of its slots, what its locations hold, its steps and the
    check of the schedule against the plan's values.  A format's converter runs the plan and calls `access`,
    `settle`, `place`, `store`, `commit` and `reduced` as its steps or ops touch locations."""

    def __init__(self, file: str, title: str, lay: Layout, wording: Wording) -> None:
        self.file, self.title, self.lay, self.wording = file, title, lay, wording
        self.messages: list[M] = []
        self.content: dict[Loc, Content] = {}
        self.values: dict[Loc, Value] = {}
        self.writes: dict[tuple[int, int], list[Write]] = {}  # (gpu, chunk) -> its writes; version k is [k - 1]
        self.pending: dict[tuple[int, int], Loc] = {}  # (message, element) received into scratch, not a version yet
        self.last_write: dict[Loc, tuple[Node, str]] = {}
        self.reads_of: dict[Loc, list[tuple[Node, str]]] = {}
        self.twice: Ctx | None = None  # where the plan first counts a contribution twice
        origin = chunk_origin(lay.collective, lay.p, lay.n, None)
        self.held = [[int(origin[c]) in (EVERY, g) for c in range(lay.n)] for g in range(lay.p)]
        for g in range(lay.p):
            for x in range(lay.i * lay.parts):
                at = lay.loc(g, "i", x)
                c = self.chunk(at)
                self.content[at], self.values[at] = Version(c, 0), (g * lay.n + c,)
            for x in range(lay.o * lay.parts):
                at = lay.loc(g, "o", x)
                if at not in self.content:  # out of place: empty, as the slot is when the rank has no input for it
                    c = self.chunk(at)
                    why = f"which nothing wrote yet, where collc's IR holds chunk {c}'s input"
                    self.content[at] = Nothing(why) if self.held[g][c] else Version(c, 0)

    # -- what a format says ----------------------------------------------------------------------------------

    @abstractmethod
    def execute(self) -> None:
        """Runs the plan once, recording its messages, versions and values; refuses what a schedule cannot mean."""

    @abstractmethod
    def layers(self, by_waiting: bool) -> list[int]:
        """Each message's step (`steps`), with the format's waits between messages when ``by_waiting``."""

    @abstractmethod
    def name(self, at: Loc) -> str:
        """A location in words."""

    @abstractmethod
    def gpu_at(self, g: int) -> tuple[int, str]:
        """The line and JSON path ("" for none) of gpu g in the plan."""

    @abstractmethod
    def tangle(self, u: int, v: int, why: str, nm: int) -> CollError:
        """The refusal of constraint (u, v) of a step or more, on a cycle (vertices from ``nm`` on: the format's)."""

    def refuse_twice(self, ctx: Ctx, message: str) -> CollError:
        """The refusal of a contribution counted twice (first at ``ctx``) in a value no output keeps."""
        return self.refuse(ctx, message)

    # -- locations, versions ---------------------------------------------------------------------------------

    def refuse(self, at: Ctx | Site, message: str) -> CollError:
        return refusal(self.file, at.line, f"{at.where} {message}", at.path)

    def chunk(self, at: Loc) -> int:
        c = self.lay.label(at)
        assert c is not None
        return c

    def access(self, at: Loc, write: bool, ctx: Ctx) -> None:
        """Two accesses to one location, one a write, must be ordered by the plan (the schedule's steps would
        order them)."""
        earlier = [self.last_write[at]] if at in self.last_write else []
        if write:
            earlier += self.reads_of.get(at, [])
        for (t, s), other in earlier:
            if (t, s) != ctx.node and ctx.clock[t] <= s:
                raise self.refuse(ctx, f"{'writes' if write else 'reads'} {self.name(at)} and {other} accesses it, "
                                  "with nothing ordering the two (a race): collc's IR would put them in steps one "
                                  "after the other")  # fmt: skip
        named = self.wording.named.format(where=ctx.where, line=ctx.line)
        if write:
            self.last_write[at] = (ctx.node, named)
            self.reads_of[at] = []
        else:
            self.reads_of.setdefault(at, []).append((ctx.node, named))

    def commit(self, g: int, c: int, msg: int, elem: int, action: Action, operand: int | None, empty: bool,
               ctx: Ctx) -> int:  # fmt: skip
        """A new version of gpu g's slot for chunk c, written by element ``elem`` of message ``msg`` as a copy or a
        reduction into version ``operand``: its index."""
        writes = self.writes.setdefault((g, c), [])
        if writes:
            last = writes[-1]
            t, s = last.node
            if last.node != ctx.node and ctx.clock[t] <= s:
                raise self.refuse(ctx, f"writes gpu {g}'s chunk {c}, and so does {self.wording.writer} at line "
                                  f"{self.messages[last.msg].landed.line}, with nothing ordering the two: collc's IR "
                                  "holds one value per chunk and would order them")  # fmt: skip
        if action is Action.REDUCE and operand != len(writes):
            raise self.refuse(ctx, f"reduces into an older value of gpu {g}'s chunk {c} than the latest (written "
                              f"at line {self.messages[writes[-1].msg].landed.line}): collc's IR reduces into a "
                              "chunk's one value")  # fmt: skip
        writes.append(Write(msg, action, ctx.node))
        m = self.messages[msg]
        m.actions[elem], m.empty[elem] = action, empty
        return len(writes)

    def settle(self, at: Loc, ctx: Ctx) -> Version:
        """The version a location holds; a received value waiting in scratch becomes one where it is (a relay)."""
        held = self.content.get(at, NOTHING)
        if isinstance(held, Pending):
            c = self.messages[held.msg].labels[held.elem]
            k = self.commit(at[0], c, held.msg, held.elem, Action.COPY, None, False, ctx)
            del self.pending[(held.msg, held.elem)]
            held = self.content[at] = Version(c, k)
        if isinstance(held, Nothing):
            raise self.refuse(ctx, f"reads {self.name(at)}, {held.why}")
        return held

    def place(self, at: Loc, c: int, what: str, ctx: Ctx) -> None:
        """Chunk c may go to ``at``: scratch, or the place of chunk c (for a reduction, a scratch location that
        holds a version of chunk c too)."""
        own = self.lay.label(at)
        held = self.content.get(at)
        if own is None and isinstance(held, Version) and what == "reduces":
            own = held.chunk
        if own is not None and own != c:
            raise self.refuse(ctx, f"{what} chunk {c} into {self.name(at)}, which holds chunk {own}: collc's IR "
                              "moves and reduces a chunk into the same chunk only")  # fmt: skip

    def store(self, at: Loc, content: Content, value: Value) -> None:
        old = self.content.get(at)
        if isinstance(old, Pending) and (old.msg, old.elem) in self.pending:
            m = self.messages[old.msg]
            raise self.refuse(m.landed, f"{self.wording.lands} chunk {m.labels[old.elem]} into {self.name(at)}, "
                              "which is overwritten before anything uses it: collc's IR puts every received chunk "
                              "in its place")  # fmt: skip
        self.content[at], self.values[at] = content, value

    def reduced(self, a: Value, b: Value, ctx: Ctx) -> Value:
        out = merge(a, b)
        if self.twice is None and twice(out):
            self.twice = ctx
        return out

    def check_used(self) -> None:
        """After the run: every received value waiting in scratch was used."""
        if self.pending:
            (msg, elem), at = next(iter(self.pending.items()))
            m = self.messages[msg]
            raise self.refuse(m.landed, f"{self.wording.lands} chunk {m.labels[elem]} into {self.name(at)} and "
                              "nothing uses it: collc's IR puts every received chunk in its place")  # fmt: skip

    # -- the steps -------------------------------------------------------------------------------------------

    def convert(self, earliest: bool) -> Schedule:
        """The plan's schedule: each message in the step that waiting as the plan does gives it, or, when
        ``earliest`` or where that contradicts what the values need, in the earliest step the values allow."""
        self.execute()
        try:
            layers = self.layers(not earliest)
        except CollError:  # waiting as the plan does contradicts what its values need
            layers = self.layers(False)
        return self.schedule(layers)

    def steps(self, graph: Constraints) -> list[int]:
        """Each message's step: the longest path over the format's constraints in ``graph`` and those of the values
        (a send comes after the write it reads and no later than the next write of its slot; a write of a slot comes
        a step after a copy into it, a copy a step after any write; two messages between the same GPUs with a chunk
        in common take different steps); `tangle` refuses a constraint of a step or more on a cycle."""
        msgs, nm, edge, words = self.messages, len(self.messages), graph.edge, self.wording
        for (g, c), writes in self.writes.items():
            for a, b in itertools.pairwise(writes):
                both = a.action is Action.REDUCE and b.action is Action.REDUCE
                edge(a.msg, b.msg, 0 if both else 1, words.rewrites.format(g=g, c=c))
        pairs: dict[tuple[int, int, int], int] = {}
        for i, m in enumerate(msgs):
            for c, k in zip(m.labels, m.reads, strict=True):
                writes = self.writes.get((m.src, c), [])
                if k >= 1:
                    edge(writes[k - 1].msg, i, 1, words.reads.format(src=m.src, c=c))
                if k < len(writes):
                    edge(i, writes[k].msg, 0, "")
                prev = pairs.get((m.src, m.dst, c))
                if prev is not None and prev != i:
                    edge(prev, i, 1, words.repeats.format(src=m.src, dst=m.dst, c=c))
                pairs[(m.src, m.dst, c)] = i
        adj = graph.adj
        comp, ncomp = components(adj)
        for u, out in enumerate(adj):
            for v, w, why in out:
                if w and comp[u] == comp[v]:
                    raise self.tangle(u, v, why, nm)
        layer = [0] * ncomp
        for u in sorted(range(len(adj)), key=lambda u: -comp[u]):
            for v, w, _ in adj[u]:
                if comp[v] != comp[u] and layer[comp[u]] + w > layer[comp[v]]:
                    layer[comp[v]] = layer[comp[u]] + w
        used = sorted({layer[comp[i]] for i in range(nm)})
        rank = {x: k for k, x in enumerate(used)}
        return [rank[layer[comp[i]]] for i in range(nm)]

    def schedule(self, layers: list[int]) -> Schedule:
        """The schedule of the messages in steps ``layers``, once it computes what the plan does."""
        lay = self.lay
        by_step: list[list[int]] = [[] for _ in range(max(layers, default=-1) + 1)]
        for i, k in enumerate(layers):
            by_step[k].append(i)
        self.check_values(by_step)

        def span(line: int) -> Span:
            return Span(self.file, line, 1, line, 1)

        steps = []
        for k, ids in enumerate(by_step):
            ops: list[Op] = []
            for i in ids:
                m = self.messages[i]
                ops.append(Op(m.src, OpKind.SEND, m.dst, ChunkSet.of(m.labels), None, span(m.sent.line)))
                for action in (Action.COPY, Action.REDUCE):
                    chunks = [c for c, a in zip(m.labels, m.actions, strict=True) if a is action]
                    if chunks:
                        ops.append(Op(m.dst, OpKind.RECV, m.src, ChunkSet.of(chunks), action, span(m.landed.line)))
            steps.append(Step(k, "plan", tuple(ops)))
        return Schedule(self.title, lay.collective, (("p", lay.p),), lay.p, lay.n, None, tuple(steps), self.file,
                        span(1))  # fmt: skip

    def check_values(self, by_step: list[list[int]]) -> None:
        """The schedule's steps against the plan's values: every send carries what the plan's does, every output
        ends as the plan's, a reduction into an empty slot happens where the plan's does, no step writes a slot
        twice, and a contribution the plan counts twice reaches an output."""
        lay, n, words = self.lay, self.lay.n, self.wording
        state: dict[tuple[int, int], Value] = {}

        def value(g: int, c: int) -> Value:
            return state[(g, c)] if (g, c) in state else ((g * n + c,) if self.held[g][c] else None)

        for k, ids in enumerate(by_step):
            for i in ids:
                m = self.messages[i]
                for c, sent in zip(m.labels, m.values, strict=True):
                    have = value(m.src, c)
                    if have != sent:
                        raise self.refuse(m.sent, words.missent.format(c=c, src=m.src, k=k, sent=self.said(sent),
                                                                       have=self.said(have)))  # fmt: skip
            copied: set[tuple[int, int]] = set()
            reduced: dict[tuple[int, int], list[tuple[int, int]]] = {}
            for i in ids:
                m = self.messages[i]
                for j, (c, a) in enumerate(zip(m.labels, m.actions, strict=True)):
                    assert a is not None
                    slot = (m.dst, c)
                    if slot in copied or (a is Action.COPY and slot in reduced):
                        raise self.refuse(m.landed, f"writes gpu {m.dst}'s chunk {c} in the schedule's step {k}, as "
                                          f"another {words.fellow} of that step does (a conflict)")  # fmt: skip
                    if a is Action.COPY:
                        copied.add(slot)
                        state[slot] = m.values[j]
                    else:
                        reduced.setdefault(slot, []).append((i, j))
            for (g, c), got in reduced.items():
                empty = value(g, c) is None
                for i, j in got:
                    m = self.messages[i]
                    if m.empty[j] != empty and (empty or not any(self.messages[x].empty[y] for x, y in got)):
                        holds = ("holds nothing", "a value") if empty else ("holds a value", "nothing")
                        raise self.refuse(m.landed, f"reduces into gpu {g}'s chunk {c}, which {holds[0]} in the "
                                          f"schedule's step {k} but {holds[1]} in the plan")  # fmt: skip
                    state[(g, c)] = merge(value(g, c), m.values[j])
        outputs_twice = False
        for g in range(lay.p):
            for x in range(lay.o * lay.parts):
                at = lay.loc(g, "o", x)
                c = self.chunk(at)
                mine, theirs = self.values.get(at), value(g, c)
                outputs_twice = outputs_twice or twice(mine)
                if mine != theirs:
                    shown = f"o[{x // lay.parts}]{self.name(at).partition(']')[2]}"  # with the part, if any
                    line, path = self.gpu_at(g)
                    raise refusal(self.file, line, f"gpu {g}'s output {shown} ends as {self.said(mine)} in the "
                                  f"plan, but its chunk {c} as {self.said(theirs)} in the schedule: "
                                  f"{self.why_apart(at, c)}", path)  # fmt: skip
        if self.twice is not None and not outputs_twice:
            raise self.refuse_twice(self.twice, "counts a contribution twice in a value no output keeps: collc's "
                                    "verifier counts contributions at the outputs")  # fmt: skip

    def said(self, v: Value) -> str:
        if v is None:
            return "nothing"
        n = self.lay.n
        parts = [f"gpu {x // n} chunk {x % n}" for x in v[:3]]
        return "{" + ", ".join(parts) + (f", ... ({len(v)})" if len(v) > 3 else "") + "}"

    def why_apart(self, at: Loc, c: int) -> str:
        held = self.content.get(at)
        last = len(self.writes.get((at[0], c), []))
        if isinstance(held, Nothing):
            return f"the plan never writes it, and collc's IR keeps chunk {c}'s input there"
        if isinstance(held, Version) and held.index < last:
            w = self.messages[self.writes[(at[0], c)][-1].msg]
            return (f"it keeps an older value of chunk {c} than the one {self.wording.written} at line "
                    f"{w.landed.line}, and collc's IR keeps one value per chunk")  # fmt: skip
        return "collc's IR keeps one value per chunk"
