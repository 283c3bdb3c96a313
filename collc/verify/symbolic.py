"""A program's steps as formulas in ``p``, ``rank`` and the step variable: the input of the proof for all p.

`extract` evaluates a `.coll` program with ``p`` left as a symbol.  Every phase must be a sequence of
``for step`` loops (and ``step:`` blocks) whose bounds are formulas in ``p``, and whose bodies are sends,
receives and exchanges under conditions; functions and procedures are inlined, loops that are not step
loops are unrolled when their bounds are numbers.  The result, a `Model`, holds per loop the ops of one
iteration as terms over ``rank`` and the loop's iteration ``i``.  What it cannot express (a recursive
function of ``rank``, a set computed by a comprehension other than a filter of a range, compression, lanes,
groups, a hierarchy, a parameter other than ``p`` without a default) stops extraction with a `Refusal`
naming the construct and its line.

The terms and their evaluation are in `collc.verify.terms`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collc.frontend import ast
from collc.frontend.program import Program
from collc.ir import Action, Collective, OpKind, Schedule, Span
from collc.values import MAX_SET_ELEMENT
from collc.verify.terms import (
    ARITH,
    CMP,
    FALSE,
    LIMIT,
    MAX_SHIFT,
    TRUE,
    Refusal,
    Term,
    binop,
    cmp,
    conj,
    disj,
    evaluate,
    evaluate_array,
    has_bits,
    is_bool,
    is_num,
    is_set,
    ite,
    log2_of,
    member,
    members,
    neg,
    num,
    power,
)

__all__ = [
    "Loop", "Model", "Refusal", "SymOp", "evaluate", "evaluate_array", "extract", "member", "members", "same_steps",
]  # fmt: skip
_MAX_DEPTH = 40  # nested function calls while inlining: deeper means recursion on a symbol
_MAX_NODES = 20000  # distinct nodes of one op's formulas: beyond, the model refuses the program


@dataclass(frozen=True, slots=True)
class SymOp:
    """One send or receive of every rank in one iteration, when ``guard`` holds for the rank."""

    kind: str  # send | recv
    guard: Term
    peer: Term
    chunks: Term  # a chunk set
    action: str | None  # recv: copy | reduce
    span: Span


@dataclass(frozen=True, slots=True)
class Loop:
    """A step loop: iteration ``i`` (0 .. count-1) is one step; ``ops`` are formulas in rank and i."""

    phase: str
    count: Term
    ops: tuple[SymOp, ...]
    span: Span
    lets: tuple[tuple[Term, Term], ...] = ()  # (guard, value) of every `let` in the body: evaluated, must not fail


@dataclass(frozen=True, slots=True)
class Model:
    """The program with ``p`` symbolic: its loops in order, its constraints and its chunk count."""

    name: str
    collective: Collective
    pow2: bool  # the constraints say p is a power of two
    constraints: tuple[Term, ...]  # other constraints on p, as terms
    nchunks: Term
    root: Term | None
    loops: tuple[Loop, ...]
    fixed: tuple[tuple[str, int], ...]  # parameters other than p, at their values
    span: Span
    lets: tuple[Term, ...] = ()  # global and phase-level values (in p and rank), loop counts: must not fail

    def bits(self) -> bool:
        """Whether any term uses bit operations (the proof then works on machine integers)."""
        return self.pow2 or any(has_bits(t) for loop in self.loops for op in loop.ops for t in _terms(op))


def _terms(op: SymOp) -> tuple[Term, ...]:
    return (op.guard, op.peer, op.chunks)


# --------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------


class _Extractor:
    def __init__(self, program: Program, fixed: Mapping[str, int]) -> None:
        self.program = program
        self.globals: dict[str, Any] = {"p": ("var", "p")}
        self.fixed = dict(fixed)
        self.pow2 = False
        self.depth = 0
        self.outer: list[Term] = []  # values outside step loops (and loop counts) that must evaluate
        self.inner: list[tuple[Term, Term]] = []  # the current loop's lets, with their guards
        self.bound = 0  # comprehension variables named so far
        self.guard: Term | None = None  # inside a step: the condition the expressions evaluated now hold under
        self.noted: set[Any] = set()  # (list, guard, term) already in `inner` or `outer`
        self.binders: list[tuple[str, Term, Term]] = []  # the comprehensions being evaluated: variable, range
        self.loop = 0  # counts the step loops (and step blocks) entered, for `noted`

    def note(self, value: Any) -> None:
        """``value`` is computed by the elaborator where the model now stands (a let, an argument): it must not
        fail (an inexact '/', a shift count out of range, 62 bits), even when nothing uses it."""
        where = -1 if self.guard is None else self.loop
        for t in _value_terms(value) + _element_checks(value):
            if is_num(t) or t[0] in ("bool", "var", "log2p"):
                continue
            for name, lo, hi in reversed(self.binders):  # computed for every element of a comprehension
                t = ("where", name, lo, hi, t)
            if _tree_size(t) > _MAX_NODES or (self.guard is not None and _tree_size(self.guard) > _MAX_NODES):
                raise Refusal("formulas too large for the symbolic model", None)  # (before hashing them)
            if (where, self.guard, t) in self.noted:
                continue
            self.noted.add((where, self.guard, t))
            if self.guard is None:
                self.outer.append(t)
            else:
                self.inner.append((self.guard, t))

    # ---- expressions
    def expr(self, node: ast.Expr, env: Mapping[str, Any]) -> Any:
        try:
            return getattr(self, f"_{type(node).__name__}")(node, env)
        except Refusal as err:
            if err.span is None:
                raise Refusal(err.reason, node.span) from None
            raise
        except AttributeError:
            raise Refusal(f"a {type(node).__name__.lower()} expression", node.span) from None

    def _Num(self, node: ast.Num, env: Mapping[str, Any]) -> Term:
        return num(node.value)

    def _Bool(self, node: ast.Bool, env: Mapping[str, Any]) -> Term:
        return TRUE if node.value else FALSE

    def _Name(self, node: ast.Name, env: Mapping[str, Any]) -> Any:
        if node.id in env:
            value = env[node.id]
        elif node.id in self.globals:
            value = self.globals[node.id]
        else:
            raise Refusal(f"the name {node.id!r}", node.span)
        if isinstance(value, Refusal):
            raise Refusal(f"{node.id} ({value.reason})", node.span)
        return value

    def _BinOp(self, node: ast.BinOp, env: Mapping[str, Any]) -> Any:
        a, b = self.expr(node.left, env), self.expr(node.right, env)
        if node.op == "..":
            return ("range", a, b)
        if is_set(a) or is_set(b):
            raise Refusal(f"set arithmetic ({node.op!r})", node.span)
        if node.op == "**":
            if is_num(a) and is_num(b):
                if b[1] < 0 or (abs(a[1]) > 1 and b[1] > MAX_SHIFT):  # the elaborator refuses or overflows
                    raise Refusal(f"the constant power {a[1]} ** {b[1]}", node.span)
                if not -LIMIT <= a[1] ** b[1] < LIMIT:
                    raise Refusal(f"the constant power {a[1]} ** {b[1]} beyond 62 bits", node.span)
                return num(a[1] ** b[1])
            return power(a, b, node.span)
        if node.op == "/":  # exact division by a constant; the proof obliges the dividend to be a multiple
            if not is_num(b) or b[1] <= 0:
                raise Refusal("exact division '/' by something other than a positive constant", node.span)
            if is_num(a):
                if a[1] % b[1]:
                    raise Refusal(f"{a[1]} / {b[1]} is not exact", node.span)
                return num(a[1] // b[1])
            return a if b[1] == 1 else ("bin", "/", a, b)
        if node.op not in ARITH:
            raise Refusal(f"the operator {node.op!r}", node.span)
        if node.op in ("//", "%", "mod") and not is_num(b) and b != ("var", "p"):
            e = log2_of(b)
            if e is None:
                raise Refusal(f"{node.op!r} by a symbol other than p or a power of two", node.span)
            if node.op == "//":  # floor division by 2^e is an arithmetic shift
                return ("bin", ">>", a, e)
            return ("bin", "&", a, ("bin", "-", ("bin", "<<", num(1), e), num(1)))
        return binop(node.op, a, b)

    def _UnaryOp(self, node: ast.UnaryOp, env: Mapping[str, Any]) -> Any:
        a = self.expr(node.operand, env)
        if node.op == "not":
            return neg(self.condition(a, node.span))
        if node.op == "+":
            return a
        if is_num(a):
            return num(-a[1] if node.op == "-" else ~a[1])
        return ("un", node.op, a)

    def _BoolOp(self, node: ast.BoolOp, env: Mapping[str, Any]) -> Term:
        a = self.condition(self.expr(node.left, env), node.left.span)
        b = self.condition(self.expr(node.right, env), node.right.span)
        self.note(a)  # the elaborator computes them even where the result is a constant
        self.note(b)
        return conj(a, b) if node.op == "and" else disj(a, b)

    def condition(self, c: Any, span: Span) -> Term:
        """``c``, which the elaborator needs to be a bool, or a refusal."""
        if not is_bool(c):
            raise Refusal("a condition that is not a comparison or a combination of them", span)
        return c

    def _Compare(self, node: ast.Compare, env: Mapping[str, Any]) -> Term:
        values = [self.expr(x, env) for x in node.operands]
        for v in values:
            self.note(v)
        out = TRUE
        for op, a, b in zip(node.ops, values, values[1:], strict=False):
            if op in ("in", "not in"):
                if not is_set(b):
                    raise Refusal("'in' with something that is not a set", node.span)
                term = member(a, b)
                out = conj(out, term if op == "in" else neg(term))
            elif op in CMP:
                if is_set(a) or is_set(b) or is_bool(a) != is_bool(b):
                    raise Refusal("a comparison of sets or of a condition with a number", node.span)
                out = conj(out, cmp(op, a, b))
            else:
                raise Refusal(f"the comparison {op!r}", node.span)
        return out

    def _IfExp(self, node: ast.IfExp, env: Mapping[str, Any]) -> Any:
        c = self.condition(self.expr(node.cond, env), node.cond.span)
        self.note(c)
        if c == TRUE:
            return self.expr(node.then, env)
        if c == FALSE:
            return self.expr(node.orelse, env)
        return ite(c, self.expr(node.then, env), self.expr(node.orelse, env))

    def _Comprehension(self, node: ast.Comprehension, env: Mapping[str, Any]) -> Term:
        """``{x for x in lo .. hi if cond ...}``: a range filtered by a condition on its element."""
        if len(node.clauses) != 1 or node.func != "set":
            raise Refusal("a comprehension other than {x for x in lo .. hi if ...}", node.span)
        clause = node.clauses[0]
        if not (isinstance(node.elt, ast.Name) and node.elt.id == clause.var):
            raise Refusal("a comprehension whose elements are not its variable", node.span)
        bounds = self.expr(clause.iter, env)
        if not (isinstance(bounds, tuple) and bounds[0] == "range"):
            raise Refusal("a comprehension over something other than a range lo .. hi", clause.iter.span)
        self.note(bounds)
        self.bound += 1
        name = f"{clause.var}#{self.bound}"
        local = {**env, clause.var: ("var", name)}
        cond = TRUE
        self.binders.append((name, bounds[1], bounds[2]))
        try:
            for c in clause.conds:
                term = self.condition(self.expr(c, local), c.span)
                self.note(term)
                cond = conj(cond, term)
        finally:
            self.binders.pop()
        if cond == FALSE:
            return ("elts", ())
        return ("where", name, bounds[1], bounds[2], cond)

    def _SetLit(self, node: ast.SetLit, env: Mapping[str, Any]) -> Term:
        elts = [self.expr(x, env) for x in node.elts]
        if any(is_set(x) for x in elts):
            raise Refusal("a set of sets", node.span)
        if any(is_num(x) and not 0 <= x[1] < MAX_SET_ELEMENT for x in elts):
            raise Refusal(f"a set element outside 0 .. {MAX_SET_ELEMENT - 1}", node.span)
        return ("elts", tuple(elts))

    def _Call(self, node: ast.Call, env: Mapping[str, Any]) -> Any:
        args = [self.expr(a, env) for a in node.args]
        for a in args:
            self.note(a)
        fn = self.program.fns.get(node.func)
        if fn is not None:
            return self.call(fn, args, node.span)
        return self.builtin(node.func, args, node.span)

    def call(self, fn: ast.Fn, args: list[Any], span: Span) -> Any:
        if self.depth >= _MAX_DEPTH:
            raise Refusal(f"the recursion of {fn.name}() on a symbol", span)
        self.depth += 1
        try:
            local: dict[str, Any] = dict(zip(fn.params, args, strict=True))
            for stmt in fn.body:
                if isinstance(stmt, ast.Let):
                    local[stmt.name] = self.expr(stmt.value, local)
                    self.note(local[stmt.name])
                elif isinstance(stmt, ast.Assert):
                    self.assertion(stmt, local, TRUE)
            return self.expr(fn.result, local)
        finally:
            self.depth -= 1

    def builtin(self, name: str, args: list[Any], span: Span) -> Any:
        if name in ("min", "max") and len(args) >= 2 and not any(is_set(a) or is_bool(a) for a in args):
            out = args[0]
            for a in args[1:]:
                if is_num(out) and is_num(a):
                    out = num(min(out[1], a[1]) if name == "min" else max(out[1], a[1]))
                else:
                    out = ite(cmp("<=" if name == "min" else ">=", out, a), out, a)
            return out
        if name == "abs" and len(args) == 1 and not is_set(args[0]):
            a = args[0]
            return num(abs(a[1])) if is_num(a) else ite(cmp(">=", a, num(0)), a, ("un", "-", a))
        if name in ("log2", "ceil_log2") and len(args) == 1:
            a = args[0]
            if is_num(a) and a[1] >= 1:
                v = a[1].bit_length() - 1
                return num(v if name == "log2" or a[1] == 1 << v else v + 1)
            if a == ("var", "p"):  # floor(log2 p); ceil adds one where p is not a power of two
                if name == "log2" or self.pow2:
                    return ("log2p",)
                exact = cmp("==", ("var", "p"), ("bin", "<<", num(1), ("log2p",)))
                return ("bin", "+", ("log2p",), ("ite", exact, num(0), num(1)))
            if a[0] == "bin" and a[1] == "<<" and a[2] == num(1):  # log2(1 << e) = e
                return a[3]
        if name == "is_pow2" and len(args) == 1:
            a = args[0]
            if is_num(a):
                return TRUE if a[1] >= 1 and a[1] & (a[1] - 1) == 0 else FALSE
            if a == ("var", "p") and self.pow2:
                return TRUE
        raise Refusal(f"{name}() on these arguments", span)

    # ---- statements
    def phase_body(self, phase: ast.Phase, body: tuple[ast.Stmt, ...], env: dict[str, Any], loops: list[Loop]) -> None:
        for stmt in body:
            self.guard = None
            if isinstance(stmt, ast.Let):
                env[stmt.name] = self.expr(stmt.value, env)
                self.note(env[stmt.name])
            elif isinstance(stmt, ast.Pass):
                continue
            elif isinstance(stmt, ast.Assert):
                self.assertion(stmt, env, TRUE)
            elif isinstance(stmt, ast.For) and stmt.is_step:
                loops.append(self.step_loop(phase, stmt, env))
            elif isinstance(stmt, ast.StepBlock):
                ops: list[SymOp] = []
                self.inner = []
                self.loop += 1
                self.step_body(stmt.body, dict(env), TRUE, ops)
                self.guard = None
                loops.append(Loop(phase.name, num(1), tuple(ops), stmt.span, tuple(self.inner)))
            elif isinstance(stmt, ast.Do) and stmt.group is None:
                proc = self.program.procs[stmt.proc]
                local = dict(env)
                local.update(zip(proc.params, [self.expr(a, env) for a in stmt.args], strict=True))
                for name in proc.params:
                    self.note(local[name])
                self.phase_body(phase, proc.body, local, loops)
            elif isinstance(stmt, ast.If):
                conds = [self.expr(c, env) for c, _ in stmt.branches]
                taken = next((b for c, (_, b) in zip(conds, stmt.branches, strict=True) if c == TRUE), None)
                if taken is None and all(c == FALSE for c in conds):
                    taken = stmt.orelse
                if taken is None:
                    raise Refusal("a condition around whole steps that depends on the rank or p", stmt.span)
                self.phase_body(phase, taken, env, loops)
            else:
                raise Refusal(f"a {_stmt_word(stmt)} outside a step loop", stmt.span)

    def assertion(self, stmt: ast.Assert, env: Mapping[str, Any], guard: Term) -> None:
        c = self.expr(stmt.cond, env)
        if c != TRUE:
            raise Refusal("an assert that is not true for every p (proved per p only)", stmt.span)

    def step_loop(self, phase: ast.Phase, node: ast.For, env: dict[str, Any]) -> Loop:
        it = node.iter
        backwards = False
        if isinstance(it, ast.Call) and it.func == "reversed" and len(it.args) == 1:
            backwards, it = True, it.args[0]
        bounds = self.expr(it, env)
        if not (isinstance(bounds, tuple) and bounds[0] == "range"):
            raise Refusal("a step loop over something other than a range lo .. hi", node.iter.span)
        lo, hi = bounds[1], bounds[2]
        count = binop("-", hi, lo)
        count = ite(cmp(">=", count, num(0)), count, num(0)) if not is_num(count) else num(max(count[1], 0))
        i = ("var", "i")
        s = binop("-", binop("-", hi, num(1)), i) if backwards else binop("+", lo, i)
        local = dict(env)
        local[node.var] = s
        ops: list[SymOp] = []
        self.note(bounds)
        self.outer.append(count)
        self.inner = []
        self.loop += 1
        self.step_body(node.body, local, TRUE, ops)
        self.guard = None
        return Loop(phase.name, count, tuple(ops), node.span, tuple(self.inner))

    def step_body(self, body: tuple[ast.Stmt, ...], env: dict[str, Any], guard: Term, ops: list[SymOp]) -> None:
        for stmt in body:
            self.guard = guard
            if isinstance(stmt, ast.Let):
                env[stmt.name] = self.expr(stmt.value, env)
                self.note(env[stmt.name])
            elif isinstance(stmt, ast.Pass):
                continue
            elif isinstance(stmt, ast.Assert):
                self.assertion(stmt, env, guard)
            elif isinstance(stmt, ast.Send):
                self.no_codec(stmt.codec, stmt.span)
                ops.append(
                    SymOp("send", guard, self.int_(stmt.peer, env), self.chunks(stmt.chunks, env), None, stmt.span)
                )
            elif isinstance(stmt, ast.Recv):
                self.no_codec(stmt.codec, stmt.span)
                peer = self.int_(stmt.peer, env)
                ops.append(SymOp("recv", guard, peer, self.chunks(stmt.chunks, env), stmt.action, stmt.span))
            elif isinstance(stmt, ast.Exchange):
                self.no_codec(stmt.send_codec or stmt.recv_codec, stmt.span)
                peer = self.int_(stmt.peer, env)
                ops.append(SymOp("send", guard, peer, self.chunks(stmt.send, env), None, stmt.send_span))
                ops.append(SymOp("recv", guard, peer, self.chunks(stmt.recv, env), stmt.action, stmt.recv_span))
            elif isinstance(stmt, ast.If):
                rest = guard
                for cond, branch in stmt.branches:
                    self.guard = rest  # each condition is evaluated where the ones before it are false
                    c = self.condition(self.expr(cond, env), cond.span)
                    self.note(c)
                    self.step_body(branch, dict(env), conj(rest, c), ops)
                    rest = conj(rest, neg(c))
                self.step_body(stmt.orelse, dict(env), rest, ops)
            elif isinstance(stmt, ast.For) and not stmt.is_step:
                values = self.expr(stmt.iter, env)
                self.note(values)
                if not is_set(values):
                    raise Refusal("a loop inside a step over something that is not a set", stmt.iter.span)
                for v in _concrete(values, stmt.iter.span):
                    local = dict(env)
                    local[stmt.var] = num(v)
                    self.step_body(stmt.body, local, guard, ops)
            elif isinstance(stmt, ast.Do) and stmt.group is None:
                proc = self.program.procs[stmt.proc]
                local = dict(env)
                local.update(zip(proc.params, [self.expr(a, env) for a in stmt.args], strict=True))
                for name in proc.params:
                    self.note(local[name])
                self.step_body(proc.body, local, guard, ops)
            else:
                raise Refusal(f"a {_stmt_word(stmt)} inside a step", stmt.span)

    def no_codec(self, codec: ast.CodecRef | None, span: Span) -> None:
        if codec is not None:
            raise Refusal("a compressed message", span)

    def int_(self, node: ast.Expr, env: Mapping[str, Any]) -> Term:
        v = self.expr(node, env)
        if is_set(v) or is_bool(v):
            raise Refusal("a peer that is not an integer", node.span)
        return v

    def chunks(self, node: ast.Expr, env: Mapping[str, Any]) -> Term:
        v = self.expr(node, env)
        if is_bool(v):
            raise Refusal("chunks that are not an integer or a set", node.span)
        return v if is_set(v) else ("elts", (v,))


def _element_checks(v: Any) -> list[Term]:
    """What must hold of a set's elements for the elaborator to build it: each in 0 .. MAX_SET_ELEMENT - 1."""
    def ok(x: Term) -> Term:
        return conj(cmp(">=", x, num(0)), cmp("<", x, num(MAX_SET_ELEMENT)))

    if isinstance(v, tuple) and v[0] == "elts":
        return [("holds", ok(x)) for x in v[1] if not is_num(x)]
    if isinstance(v, tuple) and v[0] == "where":
        _, name, lo, hi, cond = v
        return [("where", name, lo, hi, ("holds", disj(neg(cond), ok(("var", name)))))]
    return []


def _value_terms(v: Any) -> list[Term]:
    """The integer and condition terms of a value (a set's bounds or elements)."""
    if not isinstance(v, tuple):
        return []
    if v[0] == "range":
        return [v[1], v[2]]
    if v[0] == "elts":
        return list(v[1])
    if v[0] == "where":  # its bounds, and the set itself for the condition (with its variable bound)
        return [v[2], v[3], v]
    return [v]


def _tree_size(t: Any, memo: dict[int, int] | None = None) -> int:
    """Nodes of ``t`` as a tree (shared subterms counted each time they occur)."""
    memo = {} if memo is None else memo
    if not isinstance(t, tuple):
        return 1
    got = memo.get(id(t))
    if got is None:
        got = memo[id(t)] = 1 + sum(_tree_size(x, memo) for x in t[1:] if isinstance(x, tuple))
    return got


def _concrete(values: Term, span: Span) -> list[int]:
    if values[0] == "range":
        if not (is_num(values[1]) and is_num(values[2])):
            raise Refusal("a loop inside a step with bounds that depend on the rank or p", span)
        return list(range(values[1][1], values[2][1]))
    if not all(is_num(x) for x in values[1]):
        raise Refusal("a loop inside a step over a set that depends on the rank or p", span)
    return sorted({x[1] for x in values[1]})


def _stmt_word(stmt: ast.Stmt) -> str:
    words = {"Do": "do ... on a group", "Lane": "lane block", "Compress": "compress", "Decompress": "decompress"}
    name = type(stmt).__name__
    return words.get(name, name.lower())


def _conjuncts(node: ast.Expr) -> list[ast.Expr]:
    if isinstance(node, ast.BoolOp) and node.op == "and":
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def extract(program: Program, values: Mapping[str, int] | None = None) -> Model:
    """The symbolic model of ``program`` with ``p`` free; other parameters at ``values`` or their defaults."""
    if program.hierarchy is not None:
        raise Refusal("a hierarchy (levels of ranks)", program.hierarchy.span)
    if program.chunks.weight is not None:
        raise Refusal("chunk weights", program.chunks.span)
    values = dict(values or {})
    ex = _Extractor(program, values)
    constraints: list[Term] = []
    fixed: list[tuple[str, int]] = []
    p_param = program.param("p")
    if p_param is None:
        raise Refusal("a program whose p is not a parameter", program.header.span)
    for param in program.params:
        if param.type != "int":
            raise Refusal(f"the parameter {param.name} of type {param.type}", param.type_span)
        if param.name == "p":
            continue
        if param.name in values:
            v = values[param.name]
        elif param.default is not None:
            d = ex.expr(param.default, {})
            if not is_num(d):
                raise Refusal(f"the default of {param.name}, which depends on p", param.default.span)
            v = d[1]
        else:
            raise Refusal(f"the parameter {param.name} has no default: give it with --param", param.span)
        ex.globals[param.name] = num(v)
        fixed.append((param.name, v))
    for param in program.params:
        if param.constraint is None:
            continue
        for c in _conjuncts(param.constraint):
            if isinstance(c, ast.Call) and c.func == "is_pow2" and len(c.args) == 1 and isinstance(c.args[0], ast.Name):
                if c.args[0].id == "p":
                    ex.pow2 = True
                    continue
            term = ex.expr(c, {})
            if term == FALSE:
                raise Refusal(f"the constraint of {param.name} is false", c.span)
            if term != TRUE:
                constraints.append(term)
    for let in program.lets:  # the elaborator evaluates every one of them: so must the model
        ex.globals[let.name] = ex.expr(let.value, {})
        ex.note(ex.globals[let.name])
    for a in program.asserts:
        ex.assertion(a, {}, TRUE)
    nchunks = ex.expr(program.chunks.count, {})
    if is_set(nchunks) or is_bool(nchunks):
        raise Refusal("a chunk count that is not an integer", program.chunks.span)
    ex.note(nchunks)
    loops: list[Loop] = []
    for phase in program.phases:
        ex.phase_body(phase, phase.body, {"rank": ("var", "rank")}, loops)
    root = ex.globals.get("root")
    for t in [*ex.outer, *(x for loop in loops for op in loop.ops for x in _terms(op)),
              *(x for loop in loops for pair in loop.lets for x in pair)]:  # fmt: skip
        if _tree_size(t) > _MAX_NODES:
            raise Refusal("formulas too large for the symbolic model", program.header.span)
    return Model(
        name=program.name,
        collective=program.collective,
        pow2=ex.pow2,
        constraints=tuple(constraints),
        nchunks=nchunks,
        root=root if isinstance(root, tuple) and not is_set(root) else None,
        loops=tuple(loops),
        fixed=tuple(fixed),
        span=program.header.span,
        lets=tuple(ex.outer),
    )


def same_steps(model: Model, schedule: Schedule, ranks: Sequence[int] | None = None) -> str | None:
    """None when the model's ops of ``ranks`` (default: every rank) are the (partially) elaborated schedule's,
    step by step; otherwise a message saying where they differ."""
    p = schedule.nranks
    ranks = list(range(p)) if ranks is None else list(ranks)
    spot = np.asarray(ranks, dtype=np.int64)[None, :]
    mine = []
    for loop in model.loops:
        count = evaluate(loop.count, {"p": p})
        if count == 0:
            continue
        it = np.arange(count, dtype=np.int64)[:, None]
        env: dict[str, Any] = {"p": p, "i": it, "rank": spot, "L": max(p.bit_length() - 1, 0)}
        shape = (count, spot.shape[1])
        rows = []
        for op in loop.ops:
            guard = np.broadcast_to(np.asarray(evaluate_array(op.guard, env), dtype=bool), shape)
            peer = _ints(op.peer, env, shape)
            sparse = op.chunks[0] == "where"  # every candidate a column of its own, -1 where it is not in the set
            if op.chunks[0] == "range":
                lo = _ints(op.chunks[1], env, shape)
                hi = _ints(op.chunks[2], env, shape)
                cols = None
            elif sparse:
                cols = _where_columns(op.chunks, env, shape)
            else:
                cols = [_ints(t, env, shape) for t in op.chunks[1]]
            action = (op.action or "copy") if op.kind == "recv" else None
            rows.append(
                (op.kind, action, guard, peer, cols, lo if cols is None else None, hi if cols is None else None,
                 sparse)
            )  # fmt: skip
        for i in range(count):
            ops = []
            for kind, action, guard, peer, cols, lo, hi, sparse in rows:
                for k, r in enumerate(ranks):
                    if guard[i, k]:
                        if cols is None:
                            a, b = int(lo[i, k]), int(hi[i, k])
                            bits = ((1 << b) - 1) ^ ((1 << a) - 1) if b > a >= 0 else (0 if b <= a else -1)
                        elif sparse:
                            bits = sum(1 << int(c[i, k]) for c in cols if c[i, k] >= 0)
                        else:
                            cs = [int(c[i, k]) for c in cols]
                            bits = sum(1 << c for c in set(cs)) if min(cs) >= 0 else -1
                        ops.append((r, kind, int(peer[i, k]), bits, action))
            if ops:
                mine.append(sorted(ops))
    theirs = [sorted(_op_row(o) for o in step.ops) for step in schedule.steps]
    if mine != theirs:
        return f"the symbolic model and the elaborated schedule differ at p={p}"
    return None


def _ints(t: Any, env: Mapping[str, Any], shape: tuple[int, int]) -> np.ndarray:
    return np.broadcast_to(np.asarray(evaluate_array(t, env), dtype=np.int64), shape)


def _where_columns(chunks: Term, env: Mapping[str, Any], shape: tuple[int, int]) -> list[np.ndarray]:
    """A set by comprehension as columns: column x holds x where x is in the set, -1 where it is not."""
    _, name, lo_t, hi_t, cond = chunks
    lo, hi = _ints(lo_t, env, shape), _ints(hi_t, env, shape)
    out = []
    for x in range(int(lo.min(initial=0)), int(hi.max(initial=0))):
        inside = np.broadcast_to(np.asarray(evaluate_array(cond, {**env, name: x}), dtype=bool), shape)
        out.append(np.where(inside & (lo <= x) & (x < hi), x, -1))
    return out


def _op_row(o: Any) -> tuple[int, str, int, int, str | None]:
    if o.kind is OpKind.SEND:
        return (o.rank, "send", o.peer, o.chunks.bits, None)
    action = "reduce" if o.action is Action.REDUCE else "copy" if o.action is Action.COPY else None
    return (o.rank, "recv", o.peer, o.chunks.bits, action)
