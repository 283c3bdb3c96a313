"""Program text for the soundness campaign (`soundness_gen`): correct base algorithms written through the
language's scoping and control constructs, some with a planted deviation that shows only at some rank or p.

A base algorithm (ring, recursive doubling, binomial broadcast, Swing, pairwise exchange, a striped ring in
lanes, a compressed ring, a hierarchical ring with ``do ... on``) names *sites*: the expressions of its
operations that a rewrite may route through a construct (a chunk offset, a peer).  `Ctx.use` writes a site:
inline, or bound to a fresh name by one of `CONSTRUCTS` (a ``let`` overridden in an ``if`` whose value
escapes the branch, a loop's variable or ``let`` read after the loop, a procedure that reads a global its
caller shadows, an ``if``/``elif`` chain around lets at the phase level, a block-form function, ...).  A
*decoy* uses a construct with no deviation (or the "default, then override in a branch" idiom, equal to the
site everywhere); the *planted* site takes another value where its trigger holds (``rank == 21``,
``p > 12``, ``p % 3 == 1 and p > 12``, ...).  What the program computes is never assumed: the campaign
takes the per-op checker's verdict at every p as the truth.

Each program is written twice from the same random stream: a first pass records the loops and sites, a
plan picks the planted site and the construct it can take there, and the second pass writes the text.
The spellings come from `fuzz_templates` (``mod``, next and previous rank, chunk sets, loop ranges).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from fuzz_templates import _Forms, _Writer

Lines = list[tuple[int, str]]


@dataclass(frozen=True, slots=True)
class Site:
    """An expression of an operation that a construct may compute: ``e0`` is the base algorithm's."""

    key: str
    e0: str
    faults: tuple[str, ...]  # other values, each a deviation where a planted trigger holds
    idiom: tuple[str, str, str] | None = None  # (cond, a, b): ``a if cond else b`` equals e0 everywhere
    const: bool = False  # e0 is an int literal (its binding may be global)
    stepfree: bool = True  # e0 does not use the step variable or a step's locals
    pure: bool = True  # e0 uses only rank, p, the step variable and globals (a function can compute it)


@dataclass(slots=True)
class Loop:
    """A step loop as written: where its parts went, so that lines can be added to them later."""

    index: int
    phase: str
    var: str
    last: str  # the step variable's value after the loop (when it ran)
    mode: str  # inline | body (its step body is a procedure) | loop (the whole loop is in a procedure)
    head: tuple[int, int, int]  # (target, index, level): where lines just before the `for` go
    outer: tuple[int, int, int]  # where the caller's lines go (before the `do`; the head when inline)
    body: tuple[int, int, int] = (0, 0, 0)  # where lines at the start of its step body go
    sites: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Plan:
    loop: int  # the loop of the planted site (-1: nothing planted)
    key: str
    construct: str
    trigger: str
    kind: str  # the trigger's kind
    fault: int  # the index of the deviating value in the site's faults (-1 - i: ERROR_FAULTS[i])
    reverse: bool  # the model-visible value deviates, the elaborated one does not


@dataclass(frozen=True, slots=True)
class Generated:
    """One program of the campaign."""

    name: str
    text: str
    libs: tuple[tuple[str, str], ...]  # (file name, text): written next to the program
    family: str
    p_kind: str  # any | pow2 | hier | a2a
    fixed: tuple[tuple[str, int], ...]  # other parameters
    constructs: tuple[str, ...]  # every construct used (planted and decoys)
    plan: Plan | None  # the planted deviation


S_CONSTRUCTS = ("let_if", "let_if_else", "let_elif", "let_nested", "ifexp", "for_let", "for_var", "fn_block")
P_CONSTRUCTS = ("phase_chain", "phase_let_if", "phase_shadow", "stepblock_let")
X_CONSTRUCTS = ("proc_global", "steploop_let", "steploop_var")
CONSTRUCTS = S_CONSTRUCTS + P_CONSTRUCTS + X_CONSTRUCTS
# where the symbolic model and the elaborator are known to part: the planted site prefers these
SCOPING = ("let_if", "let_elif", "let_nested", "for_let", "for_var", "phase_chain", "proc_global", "steploop_let",
           "steploop_var", "stepblock_let")  # fmt: skip

RANK_HIGH = ("rank == 21", "rank == 20 + 3", "rank == p - 3 and p >= 24", "rank > 19 and rank % 5 == 2",
             "rank in {21, 27}", "rank // 8 == 3", "abs(rank - 23) == 0", "min(rank, 40) == 25",
             "rank >= 20 and rank < 22", "rank == 41", "rank == p - 2 and p > 40")  # fmt: skip
RANK_LOW_P = ("rank == 5 and p > 12", "rank == 1 and p >= 13", "rank == 0 and p > 64", "rank == p - 1 and p > 20",
              "rank == p // 2 and p > 12", "rank == 3 and p % 3 == 1 and p > 12", "rank == 2 and not (p <= 12)",
              "rank == 1 and p > 64")  # fmt: skip
P_ONLY = ("p > 12", "p >= 13", "p > 64", "p % 3 == 1 and p > 12", "p % 5 == 0 and p > 12", "p > 12 and p % 2 == 1",
          "p == 13", "p >= 100", "p // 16 == 4", "p - 12 > 0", "12 < p", "p > 20 and not is_pow2(p)")  # fmt: skip
P_ONLY_POW2 = ("p > 16", "p >= 64", "p == 32", "p > 8 and p < 64", "p >= 128")
# the same kinds of trigger through operators whose semantics the model must match (negative // and %, shifts,
# bit operations, chained comparisons, min/max/abs, ``not in``, a conditional expression)
RANK_EXPR = ("(rank - 30) % 7 == 5 and rank > 20", "(rank - 40) // 8 == -2 and rank > 20", "rank >> 3 == 3",
             "(rank & 24) == 24 and rank < 32", "rank ^ 21 == 0", "(rank | 1) == 23", "20 < rank < 23",
             "rank not in 0 .. 21 and rank < 23", "max(rank, 21) == rank and rank < 22", "2 ** 4 + 5 == rank",
             "-rank % p == p - 21 and p > 21", "rank * 3 // 4 == 15", "(rank - 21) mod p == 0 and p > 21",
             "(rank if rank > 20 else 0) == 22", "-(rank // -4) == 6 and rank % 4 == 1")  # fmt: skip
P_EXPR = ("p mod 7 == 6 and p > 12", "(p - 13) // 3 == 2", "p >> 4 == 1", "(p & 3) == 1 and p > 12",
          "p % -5 == -2 and p > 12", "-p // 4 == -4", "(1 << (p % 8)) == 32 and p > 12", "abs(p - 20) < 3",
          "min(p, 30) == 30", "max(p - 12, 0) > 0", "p in {13, 21, 29, 65}", "not (p < 13)",
          "(p if p > 12 else 0) > 0", "p - (p >> 1) * 2 == 1 and p > 12", "(p ^ 1) == p + 1 and p > 12")  # fmt: skip
STEP = ("{s} == 3 and p > 12", "{s} == p - 2 and p > 20", "{s} > 12", "{s} == 13 and rank == 2", "{s} == 20")
STEP_POW2 = ("{s} == 4 and p > 16", "{s} >= 5", "{s} == 4 and rank == 21")
VISIBLE = ("rank == 2", "p == 5", "rank == 1 and p >= 3", "p % 2 == 0 and p > 2", "rank == p - 1 and p > 1")
# values that cannot be computed: the program does not elaborate where the trigger holds
ERROR_FAULTS = ("({e0}) + 0 * (1 << (rank - p))", "({e0}) + 0 * (1 << (p + 70))", "({e0}) + 0 * ((1 << 62) * (p + 3))",
                "({e0}) + ((p + rank) / 2) * 0", "({e0}) + 0 * (rank // (p - p))")  # fmt: skip
ROOT_TRIGGERS = ("root == 3", "root > 0 and rank == 2", "root == p - 1 and p > 12", "rank == root + 5",
                 "root % 2 == 1 and p > 12", "rank == 1 and root >= 2", "(rank + root) % 7 == 3")  # fmt: skip
CONST_TRUE = ("true", "1 == 1", "2 > 1", "not false")


def _rank_free(cond: str) -> bool:
    return re.search(r"\brank\b", cond) is None


class Ctx:
    """Writes a program: the base algorithm asks for its sites through `use` and its loops through `loop`."""

    PHASES, TOP, LIB, GEN = 0, 1, 2, 3  # the targets lines go to (GEN: definitions made by constructs)

    def __init__(self, rng: random.Random, crng: random.Random, plan: Plan | None, recording: bool) -> None:
        self.w = _Writer(rng)
        self.f = _Forms(self.w)
        self.rng, self.crng = rng, crng
        self.plan, self.recording = plan, recording
        self.use_lib = not recording and crng.random() < 0.3
        self.targets: list[Lines] = [self.w.lines, [], [], []]
        self.target = self.PHASES
        self.loops: list[Loop] = []
        self.sites: dict[tuple[int, str], Site] = {}
        self.inserts: list[tuple[int, int, int, Lines]] = []  # (target, index, order, lines)
        self.used: list[str] = []  # constructs written
        self.planted = False
        self.counter = 0
        self.phase = ""
        self.modes: dict[int, str] = {}  # loop index -> mode (from the plan)
        self.current: Loop | None = None

    # ---- writing
    def add(self, level: int, text: str) -> None:
        self.targets[self.target].append((level, text))

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}" if self.crng.random() < 0.5 else f"{stem}_{self.counter}"

    def defs(self) -> int:
        """Where procedures go: the included file or the program."""
        return self.LIB if self.use_lib else self.TOP

    def here(self, level: int) -> tuple[int, int, int]:
        return (self.target, len(self.targets[self.target]), level)

    def insert(self, where: tuple[int, int, int], lines: Lines) -> None:
        target, index, level = where
        self.inserts.append((target, index, len(self.inserts), [(level + d, t) for d, t in lines]))

    def define(self, lines: Lines) -> None:
        self.targets[self.GEN].extend(lines)

    @contextmanager
    def into(self, target: int) -> Iterator[None]:
        saved, self.target = self.target, target
        try:
            yield
        finally:
            self.target = saved

    def phase_start(self, name: str) -> None:
        self.phase = name
        self.add(0, f"phase {name}:")

    # ---- loops
    def loop(self, level: int, var: str, values: str, last: str, body: Callable[[int, str], None]) -> None:
        """A loop of steps whose variable ``var`` ends at ``last``; ``body(level, var)`` writes one step."""
        mode = "inline" if self.recording else self.modes.get(len(self.loops), "inline")
        if mode == "loop":  # the whole loop in a procedure, run with `do` from here
            outer = self.here(level)
            name = self.fresh("loop")
            with self.into(self.defs()):
                self.add(0, f"proc {name}():")
                self._loop(1, var, values, last, body, mode, outer)
            self.add(level, f"do {name}()")
        else:
            self._loop(level, var, values, last, body, mode, None)

    def _loop(self, level: int, var: str, values: str, last: str, body: Callable[[int, str], None], mode: str,
              outer: tuple[int, int, int] | None) -> None:  # fmt: skip
        head = self.here(level)
        if not self.recording and self.crng.random() < 0.06:
            self.add(level, f"for {var} in {values}:")
            self.add(level + 1, "step:")
            inner = level + 2
        else:
            self.add(level, f"for step {var} in {values}:")
            inner = level + 1
        info = Loop(len(self.loops), self.phase, var, last, mode, head, outer or head, self.here(inner))
        self.loops.append(info)
        self.current = info
        if mode == "body":  # the step body is a procedure of the step variable
            info.outer = self.here(inner)
            param = var if self.crng.random() < 0.5 else self.fresh("t")
            name = self.fresh("step_of")
            with self.into(self.defs()):
                self.add(0, f"proc {name}({param}):")
                info.body = self.here(1)
                body(1, param)
            self.add(inner, f"do {name}({var})")
        else:
            body(inner, var)
        self.current = None

    # ---- sites
    def use(self, site: Site, level: int, var: str) -> str:
        """The expression to write for ``site`` in the step body at ``level`` (step variable ``var``)."""
        loop = self.current
        assert loop is not None
        if self.recording:
            loop.sites.append(site.key)
            self.sites.setdefault((loop.index, site.key), site)
            return site.e0
        plan = self.plan
        if plan is not None and not self.planted and plan.loop == loop.index and plan.key == site.key:
            self.planted = True
            self.used.append(plan.construct)
            trig = plan.trigger.replace("{s}", var)
            if plan.fault < 0:
                fault = ERROR_FAULTS[-1 - plan.fault].format(e0=site.e0)
            else:
                fault = site.faults[plan.fault % len(site.faults)] if site.faults else site.e0
            return self.bind(site, plan.construct, fault, trig, level, var, plan.reverse)
        if self.crng.random() < 0.35:
            options = [c for c in S_CONSTRUCTS if c != "fn_block" or site.pure]
            if loop.mode != "body" and site.stepfree:
                options += ["phase_chain", "phase_shadow", "stepblock_let"]
                options += ["phase_let_if"] if self.crng.random() < 0.3 else []
            construct = self.crng.choice(options)
            self.used.append(construct)
            if site.idiom is not None and construct in ("let_if", "let_if_else", "ifexp") and self.crng.random() < 0.6:
                cond, a, b = site.idiom
                return self.bind(Site(site.key, b, ()), construct, a, cond, level, var, False)
            trig = self.crng.choice(RANK_HIGH + P_ONLY[:-1] + RANK_EXPR + P_EXPR)
            return self.bind(site, construct, site.e0, trig, level, var, False)
        return site.e0

    def bind(self, site: Site, construct: str, e1: str, trig: str, level: int, var: str, reverse: bool) -> str:
        """Bind a fresh name to ``e1 if trig else e0`` (as the elaborator reads it) through ``construct``."""
        x = self.fresh("x")
        e0 = site.e0
        loop = self.current
        assert loop is not None
        if reverse:  # the model keeps the default, which deviates; the elaborator always overrides it
            self.add(level, f"let {x} = ({e1}) if {trig} else ({e0})")
            if construct == "for_let":
                j = self.fresh("j")
                self.add(level, f"for {j} in 0 .. 1:")
                self.add(level + 1, f"let {x} = {e0}")
            else:
                self.add(level, "if rank >= 0:")
                self.add(level + 1, f"let {x} = {e0}")
            return x
        if construct == "let_if":
            self.add(level, f"let {x} = {e0}")
            self.add(level, f"if {trig}:")
            self.add(level + 1, f"let {x} = {e1}")
        elif construct == "let_if_else":
            self.add(level, f"if {trig}:")
            self.add(level + 1, f"let {x} = {e1}")
            self.add(level, "else:")
            self.add(level + 1, f"let {x} = {e0}")
        elif construct == "let_elif":
            self.add(level, f"let {x} = {e0}")
            self.add(level, f"if {self.crng.choice(('rank == 0 and p == 1', 'p < 1', 'rank == 1 and p == 2'))}:")
            self.add(level + 1, f"let {x} = {e0}")
            self.add(level, f"elif {trig}:")
            self.add(level + 1, f"let {x} = {e1}")
            if self.crng.random() < 0.5:
                self.add(level, "else:")
                self.add(level + 1, "pass")
        elif construct == "let_nested":
            parts = trig.split(" and ", 1)
            self.add(level, f"let {x} = {e0}")
            self.add(level, f"if {parts[0]}:")
            if len(parts) == 2:
                self.add(level + 1, f"if {parts[1]}:")
                self.add(level + 2, f"let {x} = {e1}")
            else:
                self.add(level + 1, f"let {x} = {e1}")
        elif construct == "ifexp":
            self.add(level, f"let {x} = ({e1}) if {trig} else ({e0})")
        elif construct == "for_let":
            j, n = self.fresh("j"), self.crng.randint(1, 3)
            self.add(level, f"let {x} = {e0}")
            self.add(level, f"for {j} in 0 .. {n}:")
            self.add(level + 1, f"if {trig} and {j} == {n - 1}:")
            self.add(level + 2, f"let {x} = {e1}")
        elif construct == "for_var":
            j, n = self.fresh("j"), self.crng.randint(2, 4)
            outside = self.crng.choice((-1, 0, n))  # what the name holds before the loop (never n - 1)
            if self.crng.random() < 0.4:
                self.define([(0, f"let {j} = {outside}")])
            else:
                self.add(level, f"let {j} = {outside}")
            values = self.crng.choice((f"0 .. {n}", f"0 .. {n}", f"range({n})", f"(0, {n - 1})"))
            self.add(level, f"for {j} in {values}:")
            self.add(level + 1, self.crng.choice(("pass", f"let {self.fresh('y')} = {j}")))
            self.add(level, f"let {x} = ({e1}) if {trig} and {j} == {n - 1} else ({e0})")
        elif construct == "fn_block":
            fn, r, t = self.fresh("pick"), self.fresh("r"), self.fresh("t")

            def sub(e: str) -> str:
                return re.sub(rf"\b{re.escape(var)}\b", t, re.sub(r"\brank\b", r, e))

            self.define([(0, f"fn {fn}({r}, {t}):"), (1, f"let {x} = ({sub(e1)}) if {sub(trig)} else ({sub(e0)})"),
                         (1, f"return {x}")])  # fmt: skip
            return f"{fn}(rank, {var})"
        elif construct in P_CONSTRUCTS:
            lines: Lines
            if construct == "phase_chain":
                lines = [(0, f"if {trig}:"), (1, f"let {x} = {e1}"), (0, f"elif {self.crng.choice(CONST_TRUE)}:"),
                         (1, f"let {x} = {e0}")]  # fmt: skip
                if self.crng.random() < 0.4:
                    lines += [(0, "else:"), (1, f"let {x} = {e0}")]
            elif construct == "stepblock_let":  # a let in a `step:` block (with no operation) before the loop
                lines = [(0, f"let {x} = {e0}"), (0, "step:"), (1, f"let {x} = ({e1}) if {trig} else ({e0})")]
            elif construct == "phase_let_if":
                lines = [(0, f"let {x} = {e0}"), (0, f"if {trig}:"), (1, f"let {x} = {e1}")]
            else:  # a global shadowed by a phase-level local
                self.define([(0, f"let {x} = {e0 if site.const else 0}")])
                lines = [(0, f"let {x} = ({e1}) if {trig} else ({e0})")]
            self.insert(loop.head, lines)
        elif construct == "proc_global":  # the procedure reads the global; its caller shadows it
            self.define([(0, f"let {x} = ({e1}) if {trig} else ({e0})")])
            self.insert(loop.outer, [(0, f"let {x} = {e0}")])
        elif construct in ("steploop_let", "steploop_var"):
            prev = self.loops[loop.index - 1]
            if construct == "steploop_let":
                if site.const:
                    self.define([(0, f"let {x} = {e0}")])
                else:
                    self.insert(prev.head, [(0, f"let {x} = {e0}")])
                self.insert(prev.body, [(0, f"let {x} = ({e1}) if {trig} else ({e0})")])
            else:
                v = prev.var
                self.define([(0, f"let {v} = -1")])
                self.add(level, f"let {x} = ({e1}) if {trig} and {v} == {prev.last} else ({e0})")
        else:
            raise ValueError(construct)
        return x

    # ---- the finished text
    def finish(self, header: Lines) -> tuple[str, tuple[tuple[str, str], ...]]:
        for target, index, _, lines in sorted(self.inserts, key=lambda t: (t[0], -t[1], -t[2])):
            self.targets[target][index:index] = lines
        phases, top, lib, gen = self.targets
        defs = [(0, h) for h in self.w.helpers] + top
        libs: tuple[tuple[str, str], ...] = ()
        if self.use_lib:
            lib_name = self.fresh("lib") + ".coll"
            lw = _Writer(self.crng)
            lw.lines = gen + lib
            libs = ((lib_name, lw.render()),)
            defs = [(0, f'include "{lib_name}"'), *defs]
        else:
            defs = gen + defs
        self.w.lines = header + defs + list(phases)
        return self.w.render(), libs


# --------------------------------------------------------------------------
# Base algorithms: each writes its program through a Ctx, returning (header, family, p_kind, fixed)
# --------------------------------------------------------------------------

Base = tuple[Lines, str, str, tuple[tuple[str, int], ...]]


def _offset(key: str, value: int, stepfree: bool = True) -> Site:
    return Site(key, str(value), (str(value + 1), str(value - 1), str(value + 2)), None, True, stepfree, True)


def _next_site(f: _Forms) -> Site:
    return Site("nxt", f.nxt(), ("(rank + 2) mod p", "(rank - 1) mod p", "ring_next(ring_next(rank))"),
                ("rank == p - 1", "0", "rank + 1"))  # fmt: skip


def _prev_site(f: _Forms) -> Site:
    return Site("prv", f.prv(), ("(rank - 2) mod p", "(rank + 1) mod p"), ("rank == 0", "p - 1", "rank - 1"))


def _steps(c: Ctx, lo: str, hi: str) -> str:
    """The step range ``lo .. hi``, now and then in a spelling the symbolic model refuses."""
    return f"{lo} .. {hi}" if c.rng.random() < 0.85 else c.f.steps(lo, hi)


def _chunk(c: Ctx, e: str, k: str | None) -> str:
    if c.rng.random() < 0.6:
        return e if k is None else f"block({e}, {k})"
    return c.f.chunk(e, k)


def _pair(c: Ctx, level: int, first: str, second: str) -> None:
    if c.rng.random() < 0.6:
        c.add(level, first)
        c.add(level, second)
    else:
        c.add(level, second)
        c.add(level, first)


def _ring_step(c: Ctx, level: int, v: str, reduce: bool, k: str | None, codec: str = "", lane: str = "") -> None:
    a, b = (1, 2) if reduce else (0, 1)
    off_a = c.use(_offset("send_off" + lane, a), level, v)
    off_b = c.use(_offset("recv_off" + lane, b), level, v)
    nxt, prv = c.use(_next_site(c.f), level, v), c.use(_prev_site(c.f), level, v)
    send = _chunk(c, c.f.mod(f"rank - {v} - {off_a}"), k)
    recv = _chunk(c, c.f.mod(f"rank - {v} - {off_b}"), k)
    wire = f" compress {codec}" if codec else ""
    _pair(c, level, f"send {send} to {nxt}{wire}", f"recv {recv} from {prv} {'reduce' if reduce else 'copy'}{wire}")


def ring(c: Ctx, kind: str) -> Base:
    rng = c.rng
    k = "k" if rng.random() < 0.3 else None
    collective = {"ag": "allgather", "rs": "reduce_scatter", "ar": "allreduce"}[kind]
    header = [(0, f"algorithm ring_{kind} : {collective}"), (0, "param p : int where p >= 1")]
    fixed: tuple[tuple[str, int], ...] = ()
    if k:
        header.append((0, "param k : int = 1 where k >= 1"))
        fixed = (("k", rng.choice((1, 2))),)
    header.append((0, f"chunks {'k * p' if k else 'p'}"))
    one_phase = rng.random() < 0.5
    v = ""
    parts = [("reduce_scatter", True)] if kind in ("rs", "ar") else []
    parts += [("allgather", False)] if kind in ("ag", "ar") else []
    for n, (name, reduce) in enumerate(parts):
        if n == 0 or not one_phase:
            c.phase_start(name if not one_phase else "ring")
        v = c.f.var() if n == 0 else rng.choice([x for x in ("s", "t", "u") if x != v])
        c.loop(1, v, _steps(c, "0", "p - 1"), "p - 2", lambda lv, var, r=reduce: _ring_step(c, lv, var, r, k))
    return header, f"ring_{kind}", "any", fixed


def recursive_doubling(c: Ctx) -> Base:
    rng = c.rng
    chunks = rng.choice(("1", "2", "4"))
    header = [(0, "algorithm recdoub : allreduce"),
              (0, f"param p : int where {rng.choice(('is_pow2(p)', 'p >= 1 and is_pow2(p)'))}"),
              (0, f"chunks {chunks}")]  # fmt: skip
    every = f"0 .. {chunks}" if chunks != "1" else rng.choice(("0", "{0}"))

    def body(level: int, v: str) -> None:
        peer = c.use(
            Site(
                "peer",
                f"rank ^ (1 << {v})",
                (f"(rank + (1 << {v})) mod p", f"(rank ^ (1 << {v})) ^ 1", f"rank ^ (3 << {v})"),
                None,
                False,
                False,
                True,
            ),
            level,
            v,
        )
        if rng.random() < 0.5:
            c.add(level, f"exchange with {peer}: send {every}; recv {every} reduce")
        else:
            _pair(c, level, f"send {every} to {peer}", f"recv {every} from {peer} reduce")

    c.phase_start("allreduce")
    c.loop(1, c.f.var(), _steps(c, "0", "log2(p)"), "log2(p) - 1", body)
    if rng.random() < 0.3:  # a second pass (the sums are then p times the contributions: wrong by design)
        c.loop(1, "t", "0 .. 0", "-1", body)
    return header, "recursive_doubling", "pow2", ()


def binomial(c: Ctx) -> Base:
    rng = c.rng
    header = [(0, "algorithm binomial : broadcast"), (0, "param p : int where p >= 1"),
              (0, "param root : int = 0 where 0 <= root < p"), (0, "chunks 1")]  # fmt: skip
    c.targets[c.TOP] += [(0, "fn vrank(r) = (r - root) mod p"), (0, "fn real(v) = (v + root) mod p")]

    def body(level: int, s: str) -> None:
        d = c.use(Site("dist", f"1 << {s}", (f"2 << {s}", f"(1 << {s}) + 1"), None, False, False, True), level, s)
        c.add(level, f"let d = {d}")
        c.add(level, "let v = vrank(rank)")
        to = c.use(Site("to", "real(v + d)", ("real(v + d + 1)", "real(v + 2 * d)"), None, False, False, False),
                   level, s)  # fmt: skip
        c.add(level, "if v < d and v + d < p:")
        c.add(level + 1, f"send 0 to {to}")
        c.add(level, "elif d <= v < 2 * d:")
        c.add(level + 1, "recv 0 from real(v - d) copy")

    c.phase_start("broadcast")
    c.loop(1, c.f.var(), _steps(c, "0", "ceil_log2(p)"), "ceil_log2(p) - 1", body)
    return header, "binomial_broadcast", "any", (("root", rng.choice((0, 0, 1, 3))),)


def _fold(c: Ctx, returning: bool) -> None:
    """The fold (or unfold) of ranks q .. p-1 onto 0 .. p-q-1, as a step block in a procedure."""
    name = "unfold" if returning else "fold"

    def body() -> None:
        c.add(1, "step:")
        c.add(2, "if rank >= q:")
        c.add(3, "recv 0 from rank - q copy" if returning else "send 0 to rank - q")
        c.add(2, "elif rank < p - q:")
        c.add(3, "send 0 to rank + q" if returning else "recv 0 from rank + q reduce")

    with c.into(c.defs()):
        c.add(0, f"proc {name}():")
        body()


def folded(c: Ctx, swing: bool) -> Base:
    """Swing (latency-optimal) or recursive doubling for any p: fold onto q = pow2_floor(p), run, unfold."""
    name = "swing_lat" if swing else "rd_any"
    header = [(0, f"algorithm {name} : allreduce"), (0, "param p : int where p >= 1"), (0, "chunks 1")]
    c.targets[c.TOP].append((0, "let q = pow2_floor(p)"))
    _fold(c, False)
    _fold(c, True)

    def body(level: int, s: str) -> None:
        e0 = f"swing_peer_n(rank, {s}, q)" if swing else f"rank ^ (1 << {s})"
        peer = c.use(Site("peer", e0, (f"swing_peer_n(rank, {s} + 1, q)", f"(rank + (1 << {s})) mod q", "rank ^ 1"),
                          None, False, False, True), level, s)  # fmt: skip
        c.add(level, "if rank < q:")
        c.add(level + 1, f"exchange with {peer}: send 0; recv 0 reduce")

    c.phase_start("fold")
    c.add(1, "do fold()")
    c.phase_start("allreduce")
    c.loop(1, c.f.var(), _steps(c, "0", "log2(q)"), "log2(q) - 1", body)
    c.phase_start("unfold")
    c.add(1, "do unfold()")
    return header, name, "any", ()


def swing_bw_pow2(c: Ctx) -> Base:
    header = [(0, "algorithm swing_bw_pow2 : allreduce"), (0, "param p : int where p >= 2 and is_pow2(p)"),
              (0, "chunks p")]  # fmt: skip
    c.targets[c.TOP] += [
        (0, "let L = log2(p)"),
        (0, "fn negabinary(y) = ((y + 2863311530) ^ 2863311530) & (p - 1)"),
        (0, "fn leaving(r, c):"),
        (1, "let d = negabinary(c - r if r % 2 == 0 else r - c)"),
        (1, "return (d ^ (p - 1) if d % 2 == 1 else d) | p"),
        (0, "fn blocks(r, s) = {c for c in 0 .. p if c != r and (leaving(r, c) & ((4 << s) - 1)) == (2 << s)}"),
    ]

    def part(reduce: bool) -> Callable[[int, str], None]:
        def body(level: int, s: str) -> None:
            z = c.use(_offset("step_off" if reduce else "step_off_ag", 0), level, s)
            c.add(level, f"let q = swing_peer(rank, {s})")
            mine, theirs = f"blocks(rank, {s} + {z})", f"blocks(q, {s})"
            if reduce:
                c.add(level, f"exchange with q: send {mine}; recv {theirs} reduce")
            else:
                c.add(level, f"exchange with q: send {theirs}; recv {mine} copy")

        return body

    one_phase = c.rng.random() < 0.4
    c.phase_start("reduce_scatter")
    c.loop(1, "s", "0 .. L", "L - 1", part(True))
    if not one_phase:
        c.phase_start("allgather")
    c.loop(1, "t" if one_phase else "s", "reversed(0 .. L)", "0", part(False))
    return header, "swing_bw_pow2", "pow2", ()


def pairwise(c: Ctx, alltoall: bool) -> Base:
    name = "pairwise" if alltoall else "direct"
    header = [(0, f"algorithm {name} : {'alltoall' if alltoall else 'allgather'}"), (0, "param p : int where p >= 1"),
              (0, f"chunks {'p * p' if alltoall else 'p'}")]  # fmt: skip
    if alltoall:
        c.targets[c.TOP].append((0, "fn cid(src, dst) = src * p + dst"))

    def body(level: int, s: str) -> None:
        z = c.use(_offset("dist_off", 0), level, s)
        to, frm = c.f.mod(f"rank + {s} + {z}"), c.f.mod(f"rank - {s}")
        if alltoall:
            _pair(c, level, f"send cid(rank, {to}) to {to}", f"recv cid({frm}, rank) from {frm} copy")
        else:
            _pair(c, level, f"send {_chunk(c, 'rank', None)} to {to}", f"recv {_chunk(c, frm, None)} from {frm} copy")

    c.phase_start(name)
    c.loop(1, c.f.var(), _steps(c, "1", "p"), "p - 1", body)
    return header, name, "a2a" if alltoall else "any", ()


def bruck(c: Ctx) -> Base:
    """Bruck's allgather: at step k the 2^k blocks after the rank (fewer at the last step) go to rank - 2^k, as
    rotations {(rank + i) mod p for i in lo .. lo + n}, which the symbolic model takes as sets."""
    header = [(0, "algorithm bruck : allgather"), (0, "param p : int where p >= 1"), (0, "chunks p")]

    def body(level: int, k: str) -> None:
        lo = c.use(_offset("bruck_lo", 0), level, k)
        d, n = f"(1 << {k})", f"min(1 << {k}, p - (1 << {k}))"
        _pair(c, level, f"send {{(rank + i) mod p for i in {lo} .. {lo} + {n}}} to (rank - {d}) mod p",
              f"recv {{(i + rank) mod p for i in {d} .. {d} + {n}}} from (rank + {d}) mod p copy")  # fmt: skip

    c.phase_start("allgather")
    c.loop(1, c.f.var(), _steps(c, "0", "ceil_log2(p)"), "ceil_log2(p) - 1", body)
    return header, "bruck", "any", ()


def striped(c: Ctx) -> Base:
    """Two rings in lanes 0 and 1, one each way, on the two halves of the vector."""
    header = [(0, "algorithm striped : allreduce"), (0, "param p : int where p >= 1"), (0, "chunks 2 * p")]

    def part(reduce: bool) -> Callable[[int, str], None]:
        a, b = (1, 2) if reduce else (0, 1)
        act = "reduce" if reduce else "copy"

        def body(level: int, s: str) -> None:
            c.add(level, "lane 0:")
            _ring_step(c, level + 1, s, reduce, None, lane="0")
            c.add(level, "lane 1:")
            off = c.use(_offset("lane1_off", a), level + 1, s)
            _pair(c, level + 1, f"send p + (rank + {s} + {off}) mod p to ring_prev(rank)",
                  f"recv p + (rank + {s} + {b}) mod p from ring_next(rank) {act}")  # fmt: skip

        return body

    one_phase = c.rng.random() < 0.4
    c.phase_start("reduce_scatter")
    c.loop(1, "s", "0 .. p - 1", "p - 2", part(True))
    if not one_phase:
        c.phase_start("allgather")
    c.loop(1, "t" if one_phase else "s", "0 .. p - 1", "p - 2", part(False))
    return header, "striped_lanes", "any", ()


def compressed(c: Ctx) -> Base:
    """A ring allgather whose blocks are compressed once (collective level) or on every hop."""
    p2p = c.rng.random() < 0.5
    header = [(0, "algorithm cring : allgather"), (0, "param p : int where p >= 1"),
              (0, f"codec q = {c.rng.choice(('ebq(eb=1e-3)', 'fp16', 'ebq(eb=1e-2)'))}"), (0, "chunks p")]  # fmt: skip
    if not p2p:
        c.phase_start("compress")
        c.add(1, "compress rank with q")
    c.phase_start("gather")
    c.loop(1, c.f.var(), _steps(c, "0", "p - 1"), "p - 2",
           lambda lv, v: _ring_step(c, lv, v, False, None, codec="q" if p2p else ""))  # fmt: skip
    if not p2p:
        c.phase_start("decompress")
        c.add(1, "decompress 0 .. p")
    return header, "compressed_ring", "any", ()


def hierarchical(c: Ctx) -> Base:
    """A ring reduce-scatter in every node, a ring allreduce across nodes, a ring allgather in every node."""
    header = [(0, "algorithm hier : allreduce"), (0, "param nodes : int where nodes >= 1"),
              (0, "param local : int where local >= 1"), (0, "hierarchy nodes * local"), (0, "chunks p")]  # fmt: skip

    def ring_proc(reduce: bool) -> str:
        name = c.fresh("rs_at" if reduce else "ag_at")
        with c.into(c.defs()):
            c.add(0, f"proc {name}(kk, base):")
            c.loop(1, "s", "0 .. p - 1", "p - 2", lambda lv, v: _hier_step(c, lv, v, reduce))
        return name

    rs, ag = ring_proc(True), ring_proc(False)
    c.phase_start("intra_rs")
    c.add(1, f"do {rs}(nodes, 0) on node_ranks(node_of(rank))")
    c.phase_start("inter")
    c.add(1, "let share = local_of(rank) * nodes")
    c.add(1, f"do {rs}(1, share) on local_ranks(local_of(rank))")
    c.add(1, f"do {ag}(1, share) on local_ranks(local_of(rank))")
    c.phase_start("intra_ag")
    c.add(1, f"do {ag}(nodes, 0) on node_ranks(node_of(rank))")
    return header, "hier_ring", "hier", ()


def _hier_step(c: Ctx, level: int, v: str, reduce: bool) -> None:
    a, b = (1, 2) if reduce else (0, 1)
    off_a = c.use(_offset("send_off", a), level, v)
    nxt = c.use(_next_site(c.f), level, v)
    _pair(c, level, f"send shift(block((rank - {v} - {off_a}) mod p, kk), base) to {nxt}",
          f"recv shift(block((rank - {v} - {b}) mod p, kk), base) from ring_prev(rank) "
          f"{'reduce' if reduce else 'copy'}")  # fmt: skip


FAMILIES: tuple[tuple[float, Callable[[Ctx], Base]], ...] = (
    (3.0, lambda c: ring(c, "ar")), (1.0, lambda c: ring(c, "ag")), (1.0, lambda c: ring(c, "rs")),
    (1.2, recursive_doubling), (1.0, binomial), (0.8, lambda c: folded(c, True)), (0.6, lambda c: folded(c, False)),
    (0.3, swing_bw_pow2), (0.4, lambda c: pairwise(c, True)), (0.6, lambda c: pairwise(c, False)),
    (0.5, striped), (0.5, compressed), (0.5, hierarchical), (0.6, bruck),
)  # fmt: skip


# --------------------------------------------------------------------------
# Planning and writing
# --------------------------------------------------------------------------


def _trigger(crng: random.Random, p_kind: str, kind: str, global_: bool, log: bool) -> str:
    pow2 = p_kind == "pow2"
    if global_ or kind == "p_only":
        return crng.choice(P_ONLY_POW2 if pow2 else P_ONLY)
    if kind == "p_expr":
        return crng.choice(P_ONLY_POW2 if pow2 else P_EXPR)
    pools = {"rank_high": RANK_HIGH, "rank_low_p": RANK_LOW_P, "step": STEP_POW2 if pow2 or log else STEP,
             "visible": VISIBLE, "rank_expr": RANK_EXPR}  # fmt: skip
    return crng.choice(pools[kind])


def _plan(loops: list[Loop], sites: dict[tuple[int, str], Site], crng: random.Random, p_kind: str) -> tuple[
        Plan, dict[int, str]]:  # fmt: skip
    modes = {loop.index: crng.choice(("inline", "inline", "inline", "body", "loop")) for loop in loops}
    if p_kind == "hier":
        modes = {loop.index: "inline" for loop in loops}  # the loops already are procedures run on groups
    candidates = [(loop, key) for loop in loops for key in dict.fromkeys(loop.sites)]
    chained = [(loop, key) for loop, key in candidates if loop.index > 0 and p_kind != "hier"
               and loops[loop.index - 1].phase == loop.phase and loops[loop.index - 1].var != loop.var
               and (sites[(loop.index, key)].const or sites[(loop.index, key)].stepfree)]  # fmt: skip
    loop, key = crng.choice(chained if chained and crng.random() < 0.3 else candidates)
    site = sites[(loop.index, key)]
    prev = loops[loop.index - 1] if loop.index > 0 else None
    chain = prev is not None and prev.phase == loop.phase and prev.var != loop.var
    options = [c for c in S_CONSTRUCTS if c != "fn_block" or site.pure]
    if site.stepfree:
        options += list(P_CONSTRUCTS)
    hier = p_kind == "hier"  # its loops are procedures run on groups already
    if site.const and not hier:
        options.append("proc_global")
    if chain and (site.const or site.stepfree) and not hier:
        options += ["steploop_let", "steploop_var"]
    groups = [[c for c in options if c in SCOPING and c in group] for group in (S_CONSTRUCTS, P_CONSTRUCTS,
                                                                                 X_CONSTRUCTS)]  # fmt: skip
    groups = [g for g in groups if g]
    construct = crng.choice(crng.choice(groups) if crng.random() < 0.8 else options)
    if "steploop_let" in options and crng.random() < 0.6:  # rarely possible: take it when it is
        construct = crng.choice(("steploop_let", "steploop_var"))
    if construct in P_CONSTRUCTS and not hier:
        modes[loop.index] = crng.choice(("inline", "loop"))
    elif construct == "proc_global":
        modes[loop.index] = crng.choice(("body", "loop"))
    elif construct in ("steploop_let", "steploop_var"):
        modes[loop.index] = modes[loop.index - 1] = "inline"
    kinds = ("rank_high", "rank_low_p", "p_only", "step", "visible", "rank_expr", "p_expr")
    kind = crng.choices(kinds, (3, 2, 2.5, 1, 1, 1.5, 1.5))[0]
    if construct in (*P_CONSTRUCTS, "steploop_let", "steploop_var") and kind == "step":
        kind = "rank_low_p"
    if construct == "proc_global" and kind not in ("p_only", "p_expr"):
        kind = "p_only"
    trig = _trigger(crng, p_kind, kind, construct == "proc_global", "log" in loop.last)
    if p_kind == "rooted" and construct != "proc_global" and crng.random() < 0.5:  # the root left free
        trig = crng.choice(ROOT_TRIGGERS)
    if p_kind == "hier":  # ranks and p in a procedure run on a group are the group's
        trig = crng.choice(("rank == 2 and p > 3", "p > 4", "rank == p - 1 and p >= 5", "p % 3 == 2 and p > 3",
                            "rank == 4"))  # fmt: skip
    reverse = construct in ("let_if", "for_let") and crng.random() < 0.15
    fault = crng.randrange(max(len(site.faults), 1)) if crng.random() < 0.8 else -1 - crng.randrange(len(ERROR_FAULTS))
    if construct == "proc_global" and fault < 0:  # its value is a global: no rank in it
        fault = -1 - crng.choice((1, 2))
    return Plan(loop.index, key, construct, trig, kind, fault, reverse), modes


def generate(rng: random.Random, planted: bool, only: Callable[[Ctx], Base] | None = None) -> Generated:
    """One program: a base algorithm chosen at random (``only``: that one), rewritten, with a planted deviation
    when ``planted``."""
    family = rng.choices([f for _, f in FAMILIES], [w for w, _ in FAMILIES])[0]
    family = only or family
    crng = random.Random(rng.getrandbits(64))
    base_seed = rng.getrandbits(64)
    rec = Ctx(random.Random(base_seed), random.Random(0), None, True)  # pass 1: the loops and sites
    _, _, p_kind, _ = family(rec)
    plan: Plan | None = None
    if planted and rec.sites:
        plan, modes = _plan(rec.loops, rec.sites, crng, p_kind)
    else:
        modes = {loop.index: crng.choice(("inline", "inline", "inline", "body", "loop")) for loop in rec.loops}
        if p_kind == "hier":
            modes = {}
    c = Ctx(random.Random(base_seed), crng, plan, False)  # pass 2: the text
    c.modes = modes
    header, name, p_kind, fixed = family(c)
    text, libs = c.finish(header)
    tags = list(c.used) + [f"mode:{m}" for m in sorted(set(modes.values())) if m != "inline"]
    if libs:
        tags.append("include")
    return Generated(name, text, libs, name, p_kind, fixed, tuple(tags), plan)
