"""A program's steps as formulas in ``p``, ``rank`` and the step variable: the input of the proof for all p.

`extract` evaluates a `.coll` program with ``p`` left as a symbol.  Every phase must be a sequence of
``for step`` loops (and ``step:`` blocks) whose bounds are formulas in ``p``, and whose bodies are sends,
receives and exchanges under conditions; functions and procedures are inlined, loops that are not step
loops are unrolled when their bounds are numbers.  The result, a `Model`, holds per loop the ops of one
iteration as terms over ``rank`` and the loop's iteration ``i``.  What it cannot express (a recursive
function of ``rank``, a set computed by a comprehension other than a filter of a range, compression, lanes,
groups, a hierarchy, a parameter other than ``p`` without a default) stops extraction with a `Refusal`
naming the construct and its line.

Terms are tuples: ``("num", v)``, ``("var", name)``, ``("bin", op, a, b)``, ``("un", op, a)``,
``("ite", c, a, b)``, ``("cmp", op, a, b)``, ``("and", a, b)``, ``("or", a, b)``, ``("not", a)``,
``("log2p",)`` (floor(log2 p)).  Chunk sets are ``("range", lo, hi)`` (``lo .. hi``),
``("elts", (t, ...))`` or ``("where", x, lo, hi, cond)`` (``{x for x in lo .. hi if cond}``, the
variable ``("var", x)`` bound in ``cond``).  `evaluate` gives a term's value at concrete ``p``, ``rank`` and ``i``, with
the language's integer semantics (floor division, modulo with the divisor's sign).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collc.frontend import ast
from collc.frontend.program import Program
from collc.ir import Action, Collective, OpKind, Schedule, Span

__all__ = ["Loop", "Model", "Refusal", "SymOp", "evaluate", "evaluate_array", "extract", "members", "same_steps"]

Term = tuple[Any, ...]
_MAX_DEPTH = 40  # nested function calls while inlining: deeper means recursion on a symbol
_MAX_NODES = 20000  # distinct nodes of one op's formulas: beyond, the model refuses the program
_MAX_SHIFT = 62
_LIMIT = 1 << 62  # |values| the model and its proof allow (the elaborator's limit is 2^63)


class Refusal(Exception):
    """A construct the symbolic model cannot express, with where it is."""

    def __init__(self, reason: str, span: Span | None) -> None:
        super().__init__(reason)
        self.reason, self.span = reason, span


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
        return self.pow2 or any(_has_bits(t) for loop in self.loops for op in loop.ops for t in _terms(op))


def _terms(op: SymOp) -> tuple[Term, ...]:
    return (op.guard, op.peer, op.chunks)


def _has_bits(t: Any) -> bool:
    if not isinstance(t, tuple):
        return False
    if t[0] in ("bin", "un") and t[1] in ("^", "&", "|", "<<", ">>", "~"):
        return True
    if t[0] == "log2p":
        return True
    return any(_has_bits(x) for x in t[1:])


# --------------------------------------------------------------------------
# Terms
# --------------------------------------------------------------------------


def num(v: int) -> Term:
    return ("num", int(v))


def _is_num(t: Any) -> bool:
    return isinstance(t, tuple) and t[0] == "num"


def _is_bool(t: Any) -> bool:
    return isinstance(t, tuple) and (t[0] in ("cmp", "and", "or", "not") or (t[0] == "bool"))


TRUE: Term = ("bool", True)
FALSE: Term = ("bool", False)

_ARITH = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": lambda a, b: a // b,
    "/": lambda a, b: _exact(a, b),
    "%": lambda a, b: a % b,
    "mod": lambda a, b: a % abs(b),
    "^": lambda a, b: a ^ b,
    "&": lambda a, b: a & b,
    "|": lambda a, b: a | b,
    "<<": lambda a, b: a << b,
    ">>": lambda a, b: a >> b,
}
_CMP = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def _exact(a: int, b: int) -> int:
    q, r = divmod(a, b)
    if r:
        raise Refusal(f"{a} / {b} is not exact", None)
    return q


def binop(op: str, a: Term, b: Term) -> Term:
    if _is_num(a) and _is_num(b):
        if op in ("//", "%", "mod") and b[1] == 0:
            raise Refusal("division by zero", None)
        if op in ("<<", ">>") and not 0 <= b[1] <= _MAX_SHIFT:
            raise Refusal("a shift count outside 0..62", None)
        value = _ARITH[op](a[1], b[1])
        if not -_LIMIT <= value < _LIMIT:
            raise Refusal("a constant beyond 62 bits", None)
        return num(value)
    if op in ("//", "%", "mod") and _is_num(b) and b[1] <= 0:
        raise Refusal(f"{op!r} by a constant that is not positive", None)
    if op == "+" and _is_num(b) and b[1] == 0:
        return a
    if op == "*" and _is_num(b) and b[1] == 1:
        return a
    return ("bin", "mod" if op == "%" else op, a, b)


def cmp(op: str, a: Term, b: Term) -> Term:
    if _is_num(a) and _is_num(b):
        return TRUE if _CMP[op](a[1], b[1]) else FALSE
    return ("cmp", op, a, b)


def conj(a: Term, b: Term) -> Term:
    if a == FALSE or b == FALSE:
        return FALSE
    if a == TRUE:
        return b
    if b == TRUE:
        return a
    return ("and", a, b)


def disj(a: Term, b: Term) -> Term:
    if a == TRUE or b == TRUE:
        return TRUE
    if a == FALSE:
        return b
    if b == FALSE:
        return a
    return ("or", a, b)


def neg(a: Term) -> Term:
    if a == TRUE:
        return FALSE
    if a == FALSE:
        return TRUE
    return ("not", a)


def ite(c: Term, a: Any, b: Any) -> Any:
    if c == TRUE:
        return a
    if c == FALSE:
        return b
    if _is_set(a) or _is_set(b):
        raise Refusal("a set chosen by a condition on the rank or the step", None)
    return ("ite", c, a, b)


def _is_set(v: Any) -> bool:
    return isinstance(v, tuple) and v[0] in ("range", "elts", "where")


def substitute(t: Any, name: str, value: Term) -> Any:
    """``t`` with the variable ``name`` replaced by ``value``."""
    if not isinstance(t, tuple):
        return t
    if t == ("var", name):
        return value
    if t[0] in ("num", "bool", "var", "log2p"):
        return t
    return (t[0], *(substitute(x, name, value) for x in t[1:]))


def evaluate(t: Any, env: Mapping[str, int]) -> Any:
    """The value of term ``t`` with the variables of ``env`` (``p``, ``rank``, ``i``, ...)."""
    kind = t[0]
    if kind == "num" or kind == "bool":
        return t[1]
    if kind == "var":
        return env[t[1]]
    if kind == "log2p":
        return env["p"].bit_length() - 1
    if kind == "bin":
        a, b = evaluate(t[2], env), evaluate(t[3], env)
        if t[1] in ("<<", ">>") and not 0 <= b <= _MAX_SHIFT:
            raise Refusal(f"a shift count of {b}", None)
        value = _ARITH[t[1]](a, b)
        if not -_LIMIT <= value < _LIMIT:
            raise Refusal(f"a value beyond 62 bits ({value})", None)
        return value
    if kind == "un":
        a = evaluate(t[2], env)
        return -a if t[1] == "-" else ~a
    if kind == "ite":
        return evaluate(t[2], env) if evaluate(t[1], env) else evaluate(t[3], env)
    if kind == "cmp":
        return _CMP[t[1]](evaluate(t[2], env), evaluate(t[3], env))
    if kind == "and":
        return evaluate(t[1], env) and evaluate(t[2], env)
    if kind == "or":
        return evaluate(t[1], env) or evaluate(t[2], env)
    if kind == "not":
        return not evaluate(t[1], env)
    raise AssertionError(kind)


def evaluate_array(t: Any, env: Mapping[str, Any], strict: bool = False) -> Any:
    """`evaluate` with numpy arrays for variables (``L`` is log2 p): one value per element.  With ``strict``,
    a shift count outside 0..62 or a value beyond 62 bits anywhere (both branches of a condition included)
    raises `Refusal`; without, shift counts are clipped (for learning, where any value will do)."""
    kind = t[0]
    if kind in ("num", "bool"):
        return t[1]
    if kind == "var":
        return env[t[1]]
    if kind == "log2p":
        return env["L"]
    if kind == "bin":
        a, b = evaluate_array(t[2], env, strict), evaluate_array(t[3], env, strict)
        op = t[1]
        if op in ("<<", ">>"):
            if strict and np.any((np.asarray(b) < 0) | (np.asarray(b) > _MAX_SHIFT)):
                raise Refusal("a shift count outside 0..62", None)
            b = np.clip(b, 0, _MAX_SHIFT)
        if strict and op in ("*", "<<"):
            big = np.asarray(a).astype(np.float64) * (np.exp2(b) if op == "<<" else np.asarray(b, dtype=np.float64))
            if np.any(np.abs(big) >= _LIMIT):
                raise Refusal("a value beyond 62 bits", None)
        if strict and op == "/" and np.any(np.mod(a, b) != 0):
            raise Refusal("an exact division '/' that is not exact", None)
        out = {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide, "/": np.floor_divide,
               "mod": np.mod, "^": np.bitwise_xor, "&": np.bitwise_and, "|": np.bitwise_or, "<<": np.left_shift,
               ">>": np.right_shift}[op](a, b)  # fmt: skip
        if strict and op in ("+", "-") and np.any(np.abs(out) >= _LIMIT):  # operands are within 62 bits
            raise Refusal("a value beyond 62 bits", None)
        return out
    if kind == "cmp":
        a, b = evaluate_array(t[2], env, strict), evaluate_array(t[3], env, strict)
        return {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal,
                "!=": np.not_equal}[t[1]](a, b)  # fmt: skip
    if kind == "and":
        return np.logical_and(evaluate_array(t[1], env, strict), evaluate_array(t[2], env, strict))
    if kind == "or":
        return np.logical_or(evaluate_array(t[1], env, strict), evaluate_array(t[2], env, strict))
    if kind == "not":
        return np.logical_not(evaluate_array(t[1], env, strict))
    if kind == "un":
        a = evaluate_array(t[2], env, strict)
        if strict and t[1] == "-" and np.any(np.abs(a) >= _LIMIT):
            raise Refusal("a value beyond 62 bits", None)
        return -a if t[1] == "-" else ~a
    if kind == "ite":
        c = evaluate_array(t[1], env, strict)
        return np.where(c, evaluate_array(t[2], env, strict), evaluate_array(t[3], env, strict))
    if kind == "where":
        raise Refusal("a set by comprehension, as an array", None)
    raise AssertionError(kind)


def members(chunks: Term, env: Mapping[str, int]) -> set[int]:
    """The chunk ids of a chunk set at concrete values."""
    if chunks[0] == "range":
        return set(range(evaluate(chunks[1], env), evaluate(chunks[2], env)))
    if chunks[0] == "where":
        _, name, lo, hi, cond = chunks
        return {x for x in range(evaluate(lo, env), evaluate(hi, env)) if evaluate(cond, {**env, name: x})}
    return {evaluate(x, env) for x in chunks[1]}


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

    def note(self, value: Any) -> None:
        """``value`` is computed by the elaborator where the model now stands (a let, an argument): it must not
        fail (an inexact '/', a shift count out of range, 62 bits), even when nothing uses it."""
        where = id(self.outer if self.guard is None else self.inner)
        for t in _value_terms(value):
            if _is_num(t) or t[0] in ("bool", "var", "log2p"):
                continue
            for name, lo, hi in reversed(self.binders):  # computed for every element of a comprehension
                t = ("where", name, lo, hi, t)
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
        if _is_set(a) or _is_set(b):
            raise Refusal(f"set arithmetic ({node.op!r})", node.span)
        if node.op == "**":
            if _is_num(a) and _is_num(b):
                if b[1] < 0 or (abs(a[1]) > 1 and b[1] > _MAX_SHIFT):  # the elaborator refuses or overflows
                    raise Refusal(f"the constant power {a[1]} ** {b[1]}", node.span)
                if not -_LIMIT <= a[1] ** b[1] < _LIMIT:
                    raise Refusal(f"the constant power {a[1]} ** {b[1]} beyond 62 bits", node.span)
                return num(a[1] ** b[1])
            return _power(a, b, node.span)
        if node.op == "/":  # exact division by a constant; the proof obliges the dividend to be a multiple
            if not _is_num(b) or b[1] <= 0:
                raise Refusal("exact division '/' by something other than a positive constant", node.span)
            if _is_num(a):
                if a[1] % b[1]:
                    raise Refusal(f"{a[1]} / {b[1]} is not exact", node.span)
                return num(a[1] // b[1])
            return a if b[1] == 1 else ("bin", "/", a, b)
        if node.op not in _ARITH:
            raise Refusal(f"the operator {node.op!r}", node.span)
        if node.op in ("//", "%", "mod") and not _is_num(b) and b != ("var", "p"):
            e = _log2_of(b)
            if e is None:
                raise Refusal(f"{node.op!r} by a symbol other than p or a power of two", node.span)
            if node.op == "//":  # floor division by 2^e is an arithmetic shift
                return ("bin", ">>", a, e)
            return ("bin", "&", a, ("bin", "-", ("bin", "<<", num(1), e), num(1)))
        return binop(node.op, a, b)

    def _UnaryOp(self, node: ast.UnaryOp, env: Mapping[str, Any]) -> Any:
        a = self.expr(node.operand, env)
        if node.op == "not":
            return neg(a)
        if node.op == "+":
            return a
        if _is_num(a):
            return num(-a[1] if node.op == "-" else ~a[1])
        return ("un", node.op, a)

    def _BoolOp(self, node: ast.BoolOp, env: Mapping[str, Any]) -> Term:
        a, b = self.expr(node.left, env), self.expr(node.right, env)
        return conj(a, b) if node.op == "and" else disj(a, b)

    def _Compare(self, node: ast.Compare, env: Mapping[str, Any]) -> Term:
        values = [self.expr(x, env) for x in node.operands]
        out = TRUE
        for op, a, b in zip(node.ops, values, values[1:], strict=False):
            if op in ("in", "not in"):
                if not _is_set(b):
                    raise Refusal("'in' with something that is not a set", node.span)
                term = _member(a, b)
                out = conj(out, term if op == "in" else neg(term))
            elif op in _CMP:
                if _is_set(a) or _is_set(b) or _is_bool(a) != _is_bool(b):
                    raise Refusal("a comparison of sets or of a condition with a number", node.span)
                out = conj(out, cmp(op, a, b))
            else:
                raise Refusal(f"the comparison {op!r}", node.span)
        return out

    def _IfExp(self, node: ast.IfExp, env: Mapping[str, Any]) -> Any:
        c = self.expr(node.cond, env)
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
        self.bound += 1
        name = f"{clause.var}#{self.bound}"
        local = {**env, clause.var: ("var", name)}
        cond = TRUE
        self.binders.append((name, bounds[1], bounds[2]))
        try:
            for c in clause.conds:
                term = self.expr(c, local)
                if not _is_bool(term):
                    raise Refusal("a comprehension's condition that is not a comparison", c.span)
                cond = conj(cond, term)
        finally:
            self.binders.pop()
        if cond == FALSE:
            return ("elts", ())
        return ("where", name, bounds[1], bounds[2], cond)

    def _SetLit(self, node: ast.SetLit, env: Mapping[str, Any]) -> Term:
        elts = [self.expr(x, env) for x in node.elts]
        if any(_is_set(x) for x in elts):
            raise Refusal("a set of sets", node.span)
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
            return self.expr(fn.result, local)
        finally:
            self.depth -= 1

    def builtin(self, name: str, args: list[Any], span: Span) -> Any:
        if name in ("min", "max") and len(args) >= 1 and not any(_is_set(a) for a in args):
            out = args[0]
            for a in args[1:]:
                if _is_num(out) and _is_num(a):
                    out = num(min(out[1], a[1]) if name == "min" else max(out[1], a[1]))
                else:
                    out = ite(cmp("<=" if name == "min" else ">=", out, a), out, a)
            return out
        if name == "abs" and len(args) == 1 and not _is_set(args[0]):
            a = args[0]
            return num(abs(a[1])) if _is_num(a) else ite(cmp(">=", a, num(0)), a, ("un", "-", a))
        if name in ("log2", "ceil_log2") and len(args) == 1:
            a = args[0]
            if _is_num(a) and a[1] >= 1:
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
            if _is_num(a):
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
        count = ite(cmp(">=", count, num(0)), count, num(0)) if not _is_num(count) else num(max(count[1], 0))
        i = ("var", "i")
        s = binop("-", binop("-", hi, num(1)), i) if backwards else binop("+", lo, i)
        local = dict(env)
        local[node.var] = s
        ops: list[SymOp] = []
        self.note(bounds)
        self.outer.append(count)
        self.inner = []
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
                    c = self.expr(cond, env)
                    if _is_set(c):
                        raise Refusal("a set as a condition", cond.span)
                    self.note(c)
                    self.step_body(branch, dict(env), conj(rest, c), ops)
                    rest = conj(rest, neg(c))
                self.step_body(stmt.orelse, dict(env), rest, ops)
            elif isinstance(stmt, ast.For) and not stmt.is_step:
                values = self.expr(stmt.iter, env)
                self.note(values)
                if not _is_set(values):
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
        if _is_set(v) or _is_bool(v):
            raise Refusal("a peer that is not an integer", node.span)
        return v

    def chunks(self, node: ast.Expr, env: Mapping[str, Any]) -> Term:
        v = self.expr(node, env)
        if _is_bool(v):
            raise Refusal("chunks that are not an integer or a set", node.span)
        return v if _is_set(v) else ("elts", (v,))


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


def _power(a: Term, b: Term, span: Span) -> Term:
    """``a ** b`` for a constant base +-2^k (k >= 1) and an exponent that is a formula: a shift, with the sign of
    an odd power of a negative base.  The shift's count k * b must be in 0..62 (the proof's safety obligation),
    which also excludes the negative exponents the elaborator refuses."""
    if not _is_num(a) or abs(a[1]) < 2 or abs(a[1]) & (abs(a[1]) - 1):
        raise Refusal("a power of a symbol (only constant bases +-2^k, k >= 1, with a symbolic exponent)", span)
    k = abs(a[1]).bit_length() - 1
    magnitude = ("bin", "<<", num(1), b if k == 1 else ("bin", "*", num(k), b))
    if a[1] > 0:
        return magnitude
    odd = cmp("==", ("bin", "mod", b, num(2)), num(1))
    return ("ite", odd, ("un", "-", magnitude), magnitude)


def _log2_of(t: Term) -> Term | None:
    """e where t is 2^e written as ``1 << e`` (times a power of two), else None."""
    if t[0] == "bin" and t[1] == "<<" and t[2] == num(1):
        return t[3]
    if t[0] == "bin" and t[1] == "*":
        for x, y in ((t[2], t[3]), (t[3], t[2])):
            if _is_num(x) and x[1] >= 1 and x[1] & (x[1] - 1) == 0:
                e = _log2_of(y)
                if e is not None:
                    return binop("+", e, num(x[1].bit_length() - 1))
    return None


def _concrete(values: Term, span: Span) -> list[int]:
    if values[0] == "range":
        if not (_is_num(values[1]) and _is_num(values[2])):
            raise Refusal("a loop inside a step with bounds that depend on the rank or p", span)
        return list(range(values[1][1], values[2][1]))
    if not all(_is_num(x) for x in values[1]):
        raise Refusal("a loop inside a step over a set that depends on the rank or p", span)
    return sorted({x[1] for x in values[1]})


def _member(x: Term, s: Term) -> Term:
    if s[0] == "range":
        return conj(cmp("<=", s[1], x), cmp("<", x, s[2]))
    if s[0] == "where":
        _, name, lo, hi, cond = s
        return conj(conj(cmp("<=", lo, x), cmp("<", x, hi)), substitute(cond, name, x))
    out = FALSE
    for e in s[1]:
        out = disj(out, cmp("==", x, e))
    return out


def member(x: Term, s: Term) -> Term:
    """The term ``x in s`` for a chunk set ``s``."""
    return _member(x, s)


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
            if not _is_num(d):
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
    if _is_set(nchunks) or _is_bool(nchunks):
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
        root=root if isinstance(root, tuple) and not _is_set(root) else None,
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
