"""The term language of the symbolic model (`collc.verify.symbolic`): formulas in ``p``, ``rank`` and the
step variable, their constructors, and their values at concrete points.

Terms are tuples: ``("num", v)``, ``("var", name)``, ``("bin", op, a, b)``, ``("un", op, a)``,
``("ite", c, a, b)``, ``("cmp", op, a, b)``, ``("and", a, b)``, ``("or", a, b)``, ``("not", a)``,
``("log2p",)`` (floor(log2 p)), ``("holds", c)`` (a condition the elaborator needs true, among the values
it computes).  Chunk sets are ``("range", lo, hi)`` (``lo .. hi``),
``("elts", (t, ...))`` or ``("where", x, lo, hi, cond)`` (``{x for x in lo .. hi if cond}``, the
variable ``("var", x)`` bound in ``cond``).  `evaluate` gives a term's value at concrete ``p``, ``rank`` and
``i`` with the language's integer semantics (floor division, modulo with the divisor's sign, exact ``/``,
62-bit values); `evaluate_array` the same over numpy arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from collc.ir import Span

__all__ = [
    "ARITH", "CMP", "FALSE", "LIMIT", "MAX_SHIFT", "TRUE", "Refusal", "Term", "binop", "cmp", "conj", "disj",
    "evaluate", "evaluate_array", "has_bits", "is_bool", "is_num", "is_set", "ite", "log2_of", "member", "members",
    "neg", "num", "power", "substitute",
]  # fmt: skip

Term = tuple[Any, ...]

MAX_SHIFT = 62
LIMIT = 1 << 62  # |values| the model and its proof allow (the elaborator's limit is 2^63)


class Refusal(Exception):
    """A construct the symbolic model cannot express, with where it is."""

    def __init__(self, reason: str, span: Span | None) -> None:
        super().__init__(reason)
        self.reason, self.span = reason, span


def has_bits(t: Any) -> bool:
    if not isinstance(t, tuple):
        return False
    if t[0] in ("bin", "un") and t[1] in ("^", "&", "|", "<<", ">>", "~"):
        return True
    if t[0] == "log2p":
        return True
    return any(has_bits(x) for x in t[1:])


# --------------------------------------------------------------------------
# Terms
# --------------------------------------------------------------------------


def num(v: int) -> Term:
    return ("num", int(v))


def is_num(t: Any) -> bool:
    return isinstance(t, tuple) and t[0] == "num"


def is_bool(t: Any) -> bool:
    return isinstance(t, tuple) and (t[0] in ("cmp", "and", "or", "not") or (t[0] == "bool"))


TRUE: Term = ("bool", True)
FALSE: Term = ("bool", False)

ARITH = {
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
CMP = {
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
    if is_num(a) and is_num(b):
        if op in ("//", "%", "mod") and b[1] == 0:
            raise Refusal("division by zero", None)
        if op in ("<<", ">>") and not 0 <= b[1] <= MAX_SHIFT:
            raise Refusal("a shift count outside 0..62", None)
        value = ARITH[op](a[1], b[1])
        if not -LIMIT <= value < LIMIT:
            raise Refusal("a constant beyond 62 bits", None)
        return num(value)
    if op in ("//", "%", "mod") and is_num(b) and b[1] <= 0:
        raise Refusal(f"{op!r} by a constant that is not positive", None)
    if op == "+" and is_num(b) and b[1] == 0:
        return a
    if op == "*" and is_num(b) and b[1] == 1:
        return a
    return ("bin", "mod" if op == "%" else op, a, b)


def cmp(op: str, a: Term, b: Term) -> Term:
    if is_num(a) and is_num(b):
        return TRUE if CMP[op](a[1], b[1]) else FALSE
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
    if is_set(a) or is_set(b):
        raise Refusal("a set chosen by a condition on the rank or the step", None)
    return ("ite", c, a, b)


def is_set(v: Any) -> bool:
    return isinstance(v, tuple) and v[0] in ("range", "elts", "where")


def substitute(t: Any, name: str, value: Term) -> Any:
    """``t`` with the variable ``name`` replaced by ``value``."""
    if not isinstance(t, tuple):
        return t
    kind = t[0]
    if t == ("var", name):
        return value
    if kind in ("num", "bool", "var", "log2p"):
        return t
    if kind == "elts":  # ("elts", (term, ...))
        return ("elts", tuple(substitute(x, name, value) for x in t[1]))
    if kind == "where" and t[1] == name:  # the set's own variable: bound inside its condition
        return ("where", t[1], substitute(t[2], name, value), substitute(t[3], name, value), t[4])
    return (kind, *(substitute(x, name, value) for x in t[1:]))


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
        if t[1] in ("<<", ">>") and not 0 <= b <= MAX_SHIFT:
            raise Refusal(f"a shift count of {b}", None)
        value = ARITH[t[1]](a, b)
        if not -LIMIT <= value < LIMIT:
            raise Refusal(f"a value beyond 62 bits ({value})", None)
        return value
    if kind == "un":
        a = evaluate(t[2], env)
        return -a if t[1] == "-" else ~a
    if kind == "ite":
        return evaluate(t[2], env) if evaluate(t[1], env) else evaluate(t[3], env)
    if kind == "cmp":
        return CMP[t[1]](evaluate(t[2], env), evaluate(t[3], env))
    if kind == "and":
        return evaluate(t[1], env) and evaluate(t[2], env)
    if kind == "or":
        return evaluate(t[1], env) or evaluate(t[2], env)
    if kind == "not":
        return not evaluate(t[1], env)
    if kind == "holds":
        if not evaluate(t[1], env):
            raise Refusal("a set element out of range", None)
        return True
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
            if strict and np.any((np.asarray(b) < 0) | (np.asarray(b) > MAX_SHIFT)):
                raise Refusal("a shift count outside 0..62", None)
            b = np.clip(b, 0, MAX_SHIFT)
        if strict and op in ("*", "<<"):
            big = np.asarray(a).astype(np.float64) * (np.exp2(b) if op == "<<" else np.asarray(b, dtype=np.float64))
            if np.any(np.abs(big) >= LIMIT):
                raise Refusal("a value beyond 62 bits", None)
        if strict and op == "/" and np.any(np.mod(a, b) != 0):
            raise Refusal("an exact division '/' that is not exact", None)
        out = {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide, "/": np.floor_divide,
               "mod": np.mod, "^": np.bitwise_xor, "&": np.bitwise_and, "|": np.bitwise_or, "<<": np.left_shift,
               ">>": np.right_shift}[op](a, b)  # fmt: skip
        if strict and op in ("+", "-") and np.any(np.abs(out) >= LIMIT):  # operands are within 62 bits
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
        if strict and t[1] == "-" and np.any(np.abs(a) >= LIMIT):
            raise Refusal("a value beyond 62 bits", None)
        return -a if t[1] == "-" else ~a
    if kind == "ite":
        c = evaluate_array(t[1], env, strict)
        return np.where(c, evaluate_array(t[2], env, strict), evaluate_array(t[3], env, strict))
    if kind == "where":
        raise Refusal("a set by comprehension, as an array", None)
    if kind == "holds":  # a condition the elaborator needs true (a set's elements in range)
        if strict and not np.all(evaluate_array(t[1], env, strict)):
            raise Refusal("a set element out of range", None)
        return True
    raise AssertionError(kind)


def members(chunks: Term, env: Mapping[str, int]) -> set[int]:
    """The chunk ids of a chunk set at concrete values."""
    if chunks[0] == "range":
        return set(range(evaluate(chunks[1], env), evaluate(chunks[2], env)))
    if chunks[0] == "where":
        _, name, lo, hi, cond = chunks
        return {x for x in range(evaluate(lo, env), evaluate(hi, env)) if evaluate(cond, {**env, name: x})}
    return {evaluate(x, env) for x in chunks[1]}


def power(a: Term, b: Term, span: Span) -> Term:
    """``a ** b`` for a constant base +-2^k (k >= 1) and an exponent that is a formula: a shift, with the sign of
    an odd power of a negative base.  The shift's count k * b must be in 0..62 (the proof's safety obligation),
    which also excludes the negative exponents the elaborator refuses."""
    if not is_num(a) or abs(a[1]) < 2 or abs(a[1]) & (abs(a[1]) - 1):
        raise Refusal("a power of a symbol (only constant bases +-2^k, k >= 1, with a symbolic exponent)", span)
    k = abs(a[1]).bit_length() - 1
    magnitude = ("bin", "<<", num(1), b if k == 1 else ("bin", "*", num(k), b))
    if a[1] > 0:
        return magnitude
    odd = cmp("==", ("bin", "mod", b, num(2)), num(1))
    return ("ite", odd, ("un", "-", magnitude), magnitude)


def log2_of(t: Term) -> Term | None:
    """e where t is 2^e written as ``1 << e`` (times a power of two), else None."""
    if t[0] == "bin" and t[1] == "<<" and t[2] == num(1):
        return t[3]
    if t[0] == "bin" and t[1] == ">>":  # (2^a) >> b is 2^(a - b) where a >= b: the shift by a - b says so
        a = log2_of(t[2])
        if a is not None:
            return binop("-", a, t[3])
    if t[0] == "bin" and t[1] == "*":
        for x, y in ((t[2], t[3]), (t[3], t[2])):
            if is_num(x) and x[1] >= 1 and x[1] & (x[1] - 1) == 0:
                e = log2_of(y)
                if e is not None:
                    return binop("+", e, num(x[1].bit_length() - 1))
    return None


def member(x: Term, s: Term) -> Term:
    """The term ``x in s`` for a chunk set ``s``."""
    if s[0] == "range":
        return conj(cmp("<=", s[1], x), cmp("<", x, s[2]))
    if s[0] == "where":
        _, name, lo, hi, cond = s
        return conj(conj(cmp("<=", lo, x), cmp("<", x, hi)), substitute(cond, name, x))
    out = FALSE
    for e in s[1]:
        out = disj(out, cmp("==", x, e))
    return out
