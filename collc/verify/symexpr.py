"""Expressions of the symbolic model: a `.coll` expression evaluated to a term in ``p``, ``rank`` and the step.

`Expressions` evaluates an expression as the elaborator does (`collc.elaborate.expr_code`), with the same
rules for names, types and errors, except that its values are terms (`collc.verify.terms`) rather than numbers.
It mirrors the elaborator construct by construct:

* a name is a local of the phase or procedure when the elaborator's scope says so (the names a body may assign,
  `collc.elaborate.syntax._assigned`, and ``rank`` and the procedure's parameters), else a global; a local whose
  value the model does not know exactly (not yet assigned on some path, or carried from an earlier iteration of
  a step loop) is an `Unknown`, and reading it refuses the program with its reason;
* types are the elaborator's: an int, a condition (bool) or a set; a mix the elaborator refuses (arithmetic on a
  bool, a bool in a set, an int as a condition) is refused, so that the model never gives a value where the
  elaborator stops with an error;
* functions are inlined (the elaborator memoises them: the same value), their asserts must hold for every p;
* every value the elaborator computes is noted (`note`), with the condition under which it is computed, so that
  the checks that use the model can require that it does not fail (an inexact ``/``, a shift count out of
  range, 62 bits, a set element out of range).

What it cannot express exactly raises `Refusal` with the construct's span.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collc.frontend import ast
from collc.frontend.program import Program
from collc.ir import Span
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
    is_bool,
    is_num,
    is_set,
    ite,
    log2_of,
    member,
    neg,
    num,
    power,
)

__all__ = ["MAX_DEPTH", "MAX_NODES", "Expressions", "Partial", "Unknown", "choose", "tree_size"]

MAX_DEPTH = 40  # nested function and procedure calls while inlining: deeper means recursion on a symbol
MAX_NODES = 20000  # distinct nodes of one op's formulas: beyond, the model refuses the program


class Unknown:
    """The value of a local the model cannot state exactly at this point; reading it refuses the program.

    ``gap``: the model only lacks this value (the name is not assigned yet, or holds what an earlier iteration
    of a step loop left), so that where it is chosen by a condition (`choose`), the other side's value stands
    wherever that side applies (`Partial`); a value the model cannot state on any path (a set chosen by a
    condition) is no gap."""

    __slots__ = ("gap", "reason")

    def __init__(self, reason: str, gap: bool = False) -> None:
        self.reason, self.gap = reason, gap

    def __repr__(self) -> str:
        return f"Unknown({self.reason!r})"


class Partial:
    """A local the model knows on some paths only: ``value`` where ``defined`` holds; elsewhere it is a gap (the
    elaborator's "used before it is assigned", or an earlier iteration's value).  Reading it gives ``value``
    and notes that ``defined`` must hold wherever it is read (an obligation, as for every value the elaborator
    computes), so that the model never uses a value it does not know."""

    __slots__ = ("defined", "reason", "value")

    def __init__(self, value: Any, defined: Term, reason: str) -> None:
        self.value, self.defined, self.reason = value, defined, reason

    def __repr__(self) -> str:
        return f"Partial({self.value!r}, {self.defined!r})"


def choose(c: Term, a: Any, b: Any, what: str) -> Any:
    """The value that is ``a`` where condition ``c`` holds and ``b`` elsewhere (``what``: the name, for the
    reasons of an `Unknown`)."""
    if c == TRUE or a is b or a == b:
        return a
    if c == FALSE:
        return b
    for x in (a, b):
        if isinstance(x, Unknown) and not x.gap:
            return x
    (va, da), (vb, db) = _defined(a), _defined(b)
    if va is None and vb is None:
        return a
    if va is None or vb is None:
        value, defined = (vb, conj(neg(c), db)) if va is None else (va, conj(c, da))
        return Partial(value, defined, a.reason if va is None else b.reason)
    value = _either(c, va, vb, what)
    defined = da if da == db else disj(conj(c, da), conj(neg(c), db))
    if isinstance(value, Unknown) or defined == TRUE:
        return value
    return Partial(value, defined, a.reason if isinstance(a, Partial) else b.reason)


def _defined(v: Any) -> tuple[Any, Term]:
    """(the value where it is defined or None, the condition under which it is)."""
    if isinstance(v, Unknown):
        return None, FALSE
    if isinstance(v, Partial):
        return v.value, v.defined
    return v, TRUE


def _either(c: Term, a: Any, b: Any, what: str) -> Any:
    if a == b:
        return a
    if is_bool(a) and is_bool(b):
        return disj(conj(c, a), conj(neg(c), b))
    if is_bool(a) or is_bool(b):
        return Unknown(f"{what} is a condition on one path and an int on another")
    if is_set(a) or is_set(b):
        return Unknown(f"{what} is a set chosen by a condition on the rank or the step")
    return ite(c, a, b)


def tree_size(t: Any, memo: dict[int, int] | None = None) -> int:
    """Nodes of ``t`` as a tree (shared subterms counted each time they occur)."""
    memo = {} if memo is None else memo
    if not isinstance(t, tuple):
        return 1
    got = memo.get(id(t))
    if got is None:
        got = memo[id(t)] = 1 + sum(tree_size(x, memo) for x in t[1:] if isinstance(x, tuple))
    return got


class Expressions:
    """The expression half of the model's interpreter (`collc.verify.symbolic` adds the statements)."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.globals: dict[str, Any] = {"p": ("var", "p")}
        self.pow2 = False
        self.depth = 0
        self.outer: list[tuple[Term, Term]] = []  # (guard, value) outside step loops (and loop counts)
        self.inner: list[tuple[Term, Term]] = []  # the current loop's values, with their guards
        self.bound = 0  # comprehension variables named so far
        self.guard: Term = TRUE  # the condition under which the expressions evaluated now are computed
        self.in_loop = False  # inside a step (its values may use the iteration i)
        self.noted: set[Any] = set()  # (loop, guard, term) already in `inner` or `outer`
        self.binders: list[tuple[str, Term, Term]] = []  # the comprehensions being evaluated: variable, range
        self.loop = 0  # counts the steps and step loops entered, for `noted`

    def note(self, value: Any) -> None:
        """``value`` is computed by the elaborator where the model now stands (a let, an argument), under
        `guard`: it must not fail (an inexact '/', a shift count out of range, 62 bits), even when nothing
        uses it."""
        where = self.loop if self.in_loop else -1
        for t in _value_terms(value) + _element_checks(value):
            if is_num(t) or t[0] in ("bool", "var", "log2p"):
                continue
            for name, lo, hi in reversed(self.binders):  # computed for every element of a comprehension
                t = ("where", name, lo, hi, t)
            if tree_size(t) > MAX_NODES or tree_size(self.guard) > MAX_NODES:
                raise Refusal("formulas too large for the symbolic model", None)  # (before hashing them)
            if (where, self.guard, t) in self.noted:
                continue
            self.noted.add((where, self.guard, t))
            (self.inner if self.in_loop else self.outer).append((self.guard, t))

    # ---- expressions
    def expr(self, node: ast.Expr, env: Mapping[str, Any]) -> Any:
        handler = getattr(self, f"_{type(node).__name__}", None)
        if handler is None:
            raise Refusal(f"a {type(node).__name__.lower()} expression", node.span)
        try:
            return handler(node, env)
        except Refusal as err:
            if err.span is None:
                raise Refusal(err.reason, node.span) from None
            raise

    def _Num(self, node: ast.Num, env: Mapping[str, Any]) -> Term:
        if node.value > (1 << 63) - 1:  # the elaborator refuses to compile the program
            raise Refusal("an integer literal beyond 64 bits", node.span)
        return num(node.value)

    def _Bool(self, node: ast.Bool, env: Mapping[str, Any]) -> Term:
        return TRUE if node.value else FALSE

    def _Name(self, node: ast.Name, env: Mapping[str, Any]) -> Any:
        if node.id in env:  # a local of the scope (the elaborator decides this from the body, not the path)
            value = env[node.id]
        elif node.id in self.globals:
            value = self.globals[node.id]
        else:
            raise Refusal(f"the name {node.id!r}", node.span)
        if isinstance(value, Unknown):
            raise Refusal(f"{node.id}: {value.reason}", node.span)
        if isinstance(value, Partial):  # where it is read, it must have been assigned
            self.note(("holds", disj(neg(self.guard), value.defined)))
            return value.value
        return value

    def integer(self, v: Any, what: str) -> Term:
        """``v``, which the elaborator needs to be an int, or a refusal."""
        if is_set(v) or is_bool(v):
            raise Refusal(f"{what} that is not an int", None)
        return v  # type: ignore[no-any-return]

    def _BinOp(self, node: ast.BinOp, env: Mapping[str, Any]) -> Any:
        a, b = self.expr(node.left, env), self.expr(node.right, env)
        if node.op == "..":
            return ("range", self.integer(a, "a range bound"), self.integer(b, "a range bound"))
        if is_set(a) and is_set(b) and node.op in ("-", "&", "|"):
            return self.set_op(node.op, a, b)
        if is_set(a) or is_set(b):
            raise Refusal(f"set arithmetic ({node.op!r})", node.span)
        a, b = self.integer(a, f"an operand of {node.op!r}"), self.integer(b, f"an operand of {node.op!r}")
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
            self.note(b)  # the divisor is computed too (the model below keeps only its exponent)
            e = log2_of(b)
            if e is None:
                raise Refusal(f"{node.op!r} by a symbol other than p or a power of two", node.span)
            if node.op == "//":  # floor division by 2^e is an arithmetic shift
                return ("bin", ">>", a, e)
            return ("bin", "&", a, ("bin", "-", ("bin", "<<", num(1), e), num(1)))
        return binop(node.op, a, b)

    def set_op(self, op: str, a: Term, b: Term) -> Term:
        """``a - b``, ``a & b``, ``a | b`` of two sets as a set by condition over a range that holds the result:
        membership is exact.  The elaborator makes bitsets of both (a range's elements must then be in 0 ..
        MAX_SET_ELEMENT - 1 unless it is empty), which the model notes."""
        for x in (a, b):
            if x[0] == "range":
                inside = conj(cmp(">=", x[1], num(0)), cmp("<=", x[2], num(MAX_SET_ELEMENT)))
                self.note(("holds", disj(cmp("<=", x[2], x[1]), inside)))
            else:
                self.note(x)
        self.bound += 1
        v = ("var", f"set#{self.bound}")
        inside_a, inside_b = member(v, a), member(v, b)
        if op == "|":
            lo, hi = _bounds(a), _bounds(b)
            if lo is None or hi is None:
                raise Refusal("a union of sets given by a condition and listed elements", None)
            span = (ite(cmp("<=", lo[0], hi[0]), lo[0], hi[0]), ite(cmp(">=", lo[1], hi[1]), lo[1], hi[1]))
            return ("where", v[1], *span, disj(inside_a, inside_b))
        bounds = _bounds(a)
        if bounds is None:
            raise Refusal(f"set arithmetic ({op!r}) on listed elements", None)
        return ("where", v[1], *bounds, conj(inside_a, neg(inside_b) if op == "-" else inside_b))

    def _UnaryOp(self, node: ast.UnaryOp, env: Mapping[str, Any]) -> Any:
        a = self.expr(node.operand, env)
        if node.op == "not":
            return neg(self.condition(a, node.span))
        a = self.integer(a, f"the operand of unary {node.op!r}")
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
        return c  # type: ignore[no-any-return]

    def _Compare(self, node: ast.Compare, env: Mapping[str, Any]) -> Term:
        values = [self.expr(x, env) for x in node.operands]
        for v in values:
            self.note(v)
        out = TRUE
        for op, a, b in zip(node.ops, values, values[1:], strict=False):
            if op in ("in", "not in"):
                if not is_set(b):
                    raise Refusal("'in' with something that is not a set", node.span)
                term = member(self.integer(a, "the left of 'in'"), b)
                out = conj(out, term if op == "in" else neg(term))
            elif op in CMP:
                if is_set(a) or is_set(b) or is_bool(a) != is_bool(b):
                    raise Refusal("a comparison of sets or of a condition with a number", node.span)
                if is_bool(a) and op not in ("==", "!="):  # the elaborator orders ints only
                    raise Refusal(f"the comparison {op!r} of conditions", node.span)
                if is_bool(a):
                    same = disj(conj(a, b), conj(neg(a), neg(b)))
                    out = conj(out, same if op == "==" else neg(same))
                else:
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
        then, orelse = self.expr(node.then, env), self.expr(node.orelse, env)
        value = choose(c, then, orelse, "the value of a conditional expression")
        if isinstance(value, Unknown | Partial):
            raise Refusal(value.reason, node.span)
        return value

    def _Comprehension(self, node: ast.Comprehension, env: Mapping[str, Any]) -> Term:
        """``{x for x in lo .. hi if cond ...}``: a range filtered by a condition on its element."""
        if len(node.clauses) != 1 or node.func != "set":
            raise Refusal("a comprehension other than {x for x in lo .. hi if ...}", node.span)
        clause = node.clauses[0]
        if not (isinstance(node.elt, ast.Name) and node.elt.id == clause.var):
            rotated = self._rotation(node, env)
            if rotated is None:
                why = "a comprehension whose elements are not its variable (nor (e + x) mod m of it"
                raise Refusal(why + ", without a condition)", node.span)
            return rotated
        bounds = self.expr(clause.iter, env)
        if not (isinstance(bounds, tuple) and bounds[0] == "range"):
            raise Refusal("a comprehension over something other than a range lo .. hi", clause.iter.span)
        self.note(bounds)
        self.bound += 1
        name = f"{clause.var}#{self.bound}"
        local = {**env, clause.var: ("var", name)}  # (the elaborator copies a dict environment, too)
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

    def _rotation(self, node: ast.Comprehension, env: Mapping[str, Any]) -> Term | None:
        """``{(a + x) mod m for x in lo .. hi}`` (a, m free of x; m p or a positive constant), as the set it is:
        ``{c for c in 0 .. m if (c - a - lo) mod m < hi - lo}``.  The image of a run of hi - lo consecutive
        integers mod m is the run of that many residues from (a + lo) mod m, all of them once hi - lo >= m, none
        when hi <= lo; exact for every m >= 1 (the elaborator refuses m <= 0)."""
        clause, elt = node.clauses[0], node.elt
        if clause.conds or not (isinstance(elt, ast.BinOp) and elt.op == "mod" and isinstance(elt.left, ast.BinOp)):
            return None
        if elt.left.op != "+":
            return None
        left, right = elt.left.left, elt.left.right
        if isinstance(right, ast.Name) and right.id == clause.var:
            other = left
        elif isinstance(left, ast.Name) and left.id == clause.var:
            other = right
        else:
            return None
        if _mentions(other, clause.var) or _mentions(elt.right, clause.var):
            return None
        bounds = self.expr(clause.iter, env)
        if not (isinstance(bounds, tuple) and bounds[0] == "range"):
            return None
        a = self.integer(self.expr(other, env), "an operand of '+'")
        m = self.integer(self.expr(elt.right, env), "an operand of 'mod'")
        if not ((is_num(m) and m[1] >= 1) or m == ("var", "p")):
            return None
        for t in (bounds, a, m):
            self.note(t)
        self.bound += 1
        name = f"{clause.var}#{self.bound}"
        offset = binop("mod", binop("-", binop("-", ("var", name), a), bounds[1]), m)
        return ("where", name, num(0), m, cmp("<", offset, binop("-", bounds[2], bounds[1])))

    def _SetLit(self, node: ast.SetLit, env: Mapping[str, Any]) -> Term:
        elts = [self.integer(self.expr(x, env), "a set element") for x in node.elts]
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
        """A function, inlined: its parameters and lets, then the globals (never ``rank`` or a caller's local)."""
        if self.depth >= MAX_DEPTH:
            raise Refusal(f"the recursion of {fn.name}() on a symbol", span)
        self.depth += 1
        try:
            local: dict[str, Any] = dict(zip(fn.params, args, strict=True))
            for stmt in fn.body:
                if isinstance(stmt, ast.Let):
                    local[stmt.name] = self.expr(stmt.value, local)
                    self.note(local[stmt.name])
                elif isinstance(stmt, ast.Assert):
                    self.assertion(stmt, local)
            return self.expr(fn.result, local)
        finally:
            self.depth -= 1

    def assertion(self, stmt: ast.Assert, env: Mapping[str, Any]) -> None:
        c = self.expr(stmt.cond, env)
        if c != TRUE:
            raise Refusal("an assert that is not true for every p (proved per p only)", stmt.span)

    def builtin(self, name: str, args: list[Any], span: Span) -> Any:
        ints = all(not is_set(a) and not is_bool(a) for a in args)
        if name in ("min", "max") and len(args) >= 2 and ints:
            out = args[0]
            for a in args[1:]:
                if is_num(out) and is_num(a):
                    out = num(min(out[1], a[1]) if name == "min" else max(out[1], a[1]))
                else:
                    out = ite(cmp("<=" if name == "min" else ">=", out, a), out, a)
            return out
        if name == "abs" and len(args) == 1 and ints:
            a = args[0]
            return num(abs(a[1])) if is_num(a) else ite(cmp(">=", a, num(0)), a, ("un", "-", a))
        if name in ("log2", "ceil_log2") and len(args) == 1 and ints:
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
        if name == "is_pow2" and len(args) == 1 and ints:
            a = args[0]
            if is_num(a):
                return TRUE if a[1] >= 1 and a[1] & (a[1] - 1) == 0 else FALSE
            if a == ("var", "p") and self.pow2:
                return TRUE
        if name == "shift" and len(args) == 2 and is_set(args[0]) and not is_set(args[1]) and not is_bool(args[1]):
            return self.shift(args[0], args[1], span)
        raise Refusal(f"{name}() on these arguments", span)

    def shift(self, s: Any, k: Any, span: Span) -> Any:
        """``shift(S, k)``, ``{x + k for x in S}``, for a range or listed elements; the elaborator fails where an
        element of a non-empty S would leave 0 .. MAX_SET_ELEMENT - 1, so the model notes that it must not."""
        if self.binders:
            raise Refusal("shift() inside a comprehension", span)
        if s[0] == "elts":
            return ("elts", tuple(binop("+", x, k) for x in s[1]))  # their range is checked with the set's value
        if s[0] != "range":
            raise Refusal("shift() of a set given by a condition", span)
        lo, hi = s[1], s[2]
        fits = conj(cmp(">=", binop("+", lo, k), num(0)), cmp("<=", binop("+", hi, k), num(MAX_SET_ELEMENT)))
        check = ("holds", disj(cmp("<=", hi, lo), fits))
        (self.inner if self.in_loop else self.outer).append((self.guard, check))
        return ("range", binop("+", lo, k), binop("+", hi, k))


def _bounds(s: Term) -> tuple[Term, Term] | None:
    """lo, hi with every element of the set ``s`` in lo .. hi (a range's or a comprehension's own)."""
    if s[0] == "range":
        return s[1], s[2]
    if s[0] == "where":
        return s[2], s[3]
    return None


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


def _mentions(node: Any, name: str) -> bool:
    """Whether the expression ``node`` reads the name."""
    if isinstance(node, ast.Name):
        return node.id == name
    if isinstance(node, tuple | list):
        return any(_mentions(x, name) for x in node)
    if hasattr(node, "__dataclass_fields__"):
        return any(_mentions(getattr(node, f), name) for f in node.__dataclass_fields__ if f != "span")
    return False
