"""Runtime values of the `.coll` language, their operators and the builtin functions.

Values are: ``int`` (64-bit checked), ``bool``, sets of non-negative integers
(`collc.ir.ChunkSet`, a bitset), ranges (`Range`, ordered, half-open) and
tuples.  Operators raise `ValueError_` with a message; the elaborator adds the
source span.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Union

import numpy as np

from collc.ir import ChunkSet

INT_MIN = -(1 << 63)
INT_MAX = (1 << 63) - 1
MAX_SET_ELEMENT = 1 << 26  # sets are bitsets: elements stay below this
MAX_ITERATION = 1 << 26  # values one loop or comprehension may run over


class LangError(Exception):
    """An evaluation error without a location (the caller knows where it happened)."""


@dataclass(frozen=True, slots=True)
class Range:
    """``lo .. hi`` (``hi`` excluded), optionally with a step; iterates in order."""

    lo: int
    hi: int
    step: int = 1

    def __iter__(self) -> Iterator[int]:
        if self.size() > MAX_ITERATION:
            raise LangError(f"iterating over {self.size()} values is beyond the limit of {MAX_ITERATION}")
        return iter(range(self.lo, self.hi, self.step))

    def size(self) -> int:
        """The number of values (``len`` would overflow for huge ranges)."""
        if self.step > 0:
            return max(0, (self.hi - self.lo + self.step - 1) // self.step)
        return max(0, (self.lo - self.hi - self.step - 1) // -self.step)

    def __len__(self) -> int:
        return self.size()

    def __contains__(self, x: object) -> bool:
        return type(x) is int and x in range(self.lo, self.hi, self.step)


Value = Union[int, bool, ChunkSet, Range, tuple]  # noqa: UP007  (tuple of Value)


def type_name(v: object) -> str:
    if type(v) is bool:
        return "bool"
    if type(v) is int:
        return "int"
    if isinstance(v, ChunkSet):
        return "set"
    if isinstance(v, Range):
        return "range"
    if isinstance(v, tuple):
        return "tuple"
    return type(v).__name__


def show_value(v: Value) -> str:
    """A value as the language writes it, for messages: ``true``, ``(4, 4)``, ``{0..3}``, ``0 .. 8``."""
    if type(v) is bool:
        return "true" if v else "false"
    if isinstance(v, tuple):
        inner = ", ".join(show_value(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, Range):
        return f"{v.lo} .. {v.hi}" if v.step == 1 else f"range({v.lo}, {v.hi}, {v.step})"
    return str(v)


def a_type(v: object) -> str:
    """``an int``, ``a set``: the type of ``v`` with its article, for messages."""
    name = type_name(v)
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def check_int(v: int) -> int:
    if v < INT_MIN or v > INT_MAX:
        raise LangError(f"integer {_short(v)} does not fit in 64 bits")
    return v


def _short(v: int) -> str:
    text = str(v)
    return text if len(text) <= 24 else f"{text[:10]}...{text[-6:]} ({len(text)} digits)"


def as_int(v: Value, what: str = "value") -> int:
    if type(v) is int:
        return v
    raise LangError(f"{what} must be an int, not {a_type(v)}")


def as_bool(v: Value, what: str = "condition") -> bool:
    if type(v) is bool:
        return v
    raise LangError(f"{what} must be a bool (true or false), not {a_type(v)}")


def as_set(v: Value, what: str = "value") -> ChunkSet:
    """A set from a set, a range, a tuple of ints or a single int."""
    if isinstance(v, ChunkSet):
        return v
    if type(v) is int:
        _check_element(v)
        return ChunkSet(1 << v)
    if isinstance(v, Range):
        if v.step == 1:
            if v.hi <= v.lo:
                return ChunkSet(0)
            _check_element(v.lo)
            _check_element(v.hi - 1)
            return ChunkSet.interval(v.lo, v.hi)
        return _set_of(iter(v))
    if isinstance(v, tuple):
        return _set_of(as_int(x, "a set element") for x in v)
    raise LangError(f"{what} must be a set, a range or an int, not {a_type(v)}")


_SMALL_SET = 64  # sets of more elements are built in one pass over a byte array, not one int per element


def _set_of(items: Iterator[int] | Iterator[Value]) -> ChunkSet:
    ids: list[int] = []
    for x in items:
        i = as_int(x, "a set element")
        _check_element(i)
        ids.append(i)
    if len(ids) <= _SMALL_SET:
        bits = 0
        for i in ids:
            bits |= 1 << i
        return ChunkSet(bits)
    # or-ing 1 << i into an ever wider int costs its width each time: quadratic for large sets
    flags = np.zeros(max(ids) + 1, dtype=np.uint8)
    flags[ids] = 1
    return ChunkSet(int.from_bytes(np.packbits(flags, bitorder="little").tobytes(), "little"))


def _check_element(i: int) -> None:
    if i < 0:
        raise LangError(f"sets hold non-negative integers; {i} is negative")
    if i >= MAX_SET_ELEMENT:
        raise LangError(f"set element {i} is beyond the limit {MAX_SET_ELEMENT}")


def iterate(v: Value, what: str = "loop") -> Iterator[Value]:
    if isinstance(v, Range):
        return iter(v)
    if isinstance(v, ChunkSet):
        return iter(v.ids().tolist())
    if isinstance(v, tuple):
        return iter(v)
    raise LangError(f"cannot iterate over {a_type(v)} in a {what}; use a range, a set or a tuple")


def make_set(items: list[Value]) -> ChunkSet:
    return _set_of(iter(items))


# --------------------------------------------------------------------------
# Operators
# --------------------------------------------------------------------------


def _is_setlike(v: object) -> bool:
    return isinstance(v, ChunkSet | Range)


def binop(op: str, a: Value, b: Value) -> Value:
    ta, tb = type(a), type(b)
    if ta is int and tb is int:
        return _int_binop(op, a, b)  # type: ignore[arg-type]
    if op in ("|", "&", "^", "-") and _is_setlike(a) and (_is_setlike(b) or tb is int):
        sa, sb = as_set(a), as_set(b)
        if op == "|":
            return ChunkSet(sa.bits | sb.bits)
        if op == "&":
            return ChunkSet(sa.bits & sb.bits)
        if op == "^":
            return ChunkSet(sa.bits ^ sb.bits)
        return ChunkSet(sa.bits & ~sb.bits)
    if op == "|" and ta is int and _is_setlike(b):
        return ChunkSet(as_set(a).bits | as_set(b).bits)
    if op == "+" and isinstance(a, tuple) and isinstance(b, tuple):
        return a + b
    if op == "..":
        raise LangError(f"a range needs int bounds, not {type_name(a)} .. {type_name(b)}")
    raise LangError(f"unsupported operand types for {op}: {type_name(a)} and {type_name(b)}")


def _int_binop(op: str, a: int, b: int) -> Value:
    if op == "+":
        return check_int(a + b)
    if op == "-":
        return check_int(a - b)
    if op == "*":
        return check_int(a * b)
    if op in ("//", "%", "mod", "/"):
        if b == 0:
            raise LangError("division by zero" if op in ("/", "//") else "modulo by zero")
        if op == "//":
            return check_int(a // b)
        if op == "%":
            return a % b
        if op == "mod":
            return a % abs(b)
        q, r = divmod(a, b)
        if r:
            raise LangError(f"{a} / {b} is not exact; use // for floor division")
        return check_int(q)
    if op == "**":
        if b < 0:
            raise LangError(f"negative exponent {b}")
        if abs(a) > 1 and b > 64:
            raise LangError(f"{a} ** {b} does not fit in 64 bits")
        return check_int(a**b)
    if op == "<<":
        if b < 0:
            raise LangError(f"negative shift count {b}")
        if a != 0 and b > 64:
            raise LangError(f"{a} << {b} does not fit in 64 bits")
        return check_int(a << b)
    if op == ">>":
        if b < 0:
            raise LangError(f"negative shift count {b}")
        return a >> b
    if op == "|":
        return a | b
    if op == "&":
        return a & b
    if op == "^":
        return a ^ b
    if op == "..":
        return Range(a, b)
    raise LangError(f"unknown operator {op}")


def unop(op: str, a: Value) -> Value:
    if op == "not":
        return not as_bool(a, "operand of not")
    if type(a) is not int:
        raise LangError(f"unsupported operand type for unary {op}: {type_name(a)}")
    if op == "-":
        return check_int(-a)
    if op == "+":
        return a
    if op == "~":
        return ~a
    raise LangError(f"unknown operator {op}")


def compare(op: str, a: Value, b: Value) -> bool:
    if op in ("in", "not in"):
        if type(a) is not int:
            raise LangError(f"'{op}' needs an int on the left, not {a_type(a)}")
        if isinstance(b, ChunkSet | Range | tuple):
            found = a in b
        else:
            raise LangError(f"'{op}' needs a set, a range or a tuple on the right, not {a_type(b)}")
        return found if op == "in" else not found
    if op in ("==", "!="):
        equal = _equal(a, b)
        return equal if op == "==" else not equal
    if type(a) is int and type(b) is int:
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    if _is_setlike(a) and _is_setlike(b) and op in ("<=", ">="):
        sa, sb = as_set(a), as_set(b)
        return sa.issubset(sb) if op == "<=" else sb.issubset(sa)
    raise LangError(f"cannot compare {type_name(a)} {op} {type_name(b)}")


def _equal(a: Value, b: Value) -> bool:
    if _is_setlike(a) and _is_setlike(b):
        return as_set(a) == as_set(b)
    if type(a) is not type(b):
        return False
    return a == b


def index(target: Value, i: Value) -> Value:
    if not isinstance(target, tuple):
        raise LangError(f"only tuples can be indexed, not {a_type(target)}")
    k = as_int(i, "an index")
    if not -len(target) <= k < len(target):
        raise LangError(f"index {k} out of range for a tuple of length {len(target)}")
    return target[k]


# --------------------------------------------------------------------------
# Builtin functions
# --------------------------------------------------------------------------


def _log2(x: Value) -> int:
    n = as_int(x, "the argument of log2")
    if n < 1:
        raise LangError(f"log2 of {n} is undefined")
    return n.bit_length() - 1


def _ceil_log2(x: Value) -> int:
    n = as_int(x, "the argument of ceil_log2")
    if n < 1:
        raise LangError(f"ceil_log2 of {n} is undefined")
    return (n - 1).bit_length()


def _is_pow2(x: Value) -> bool:
    n = as_int(x, "the argument of is_pow2")
    return n > 0 and n & (n - 1) == 0


def _minmax(name: str, pick: Callable[..., int]) -> Callable[..., Value]:
    def impl(*args: Value) -> Value:
        items: list[Value]
        if len(args) == 1 and isinstance(args[0], Range):
            r = range(args[0].lo, args[0].hi, args[0].step)
            if not r:
                raise LangError(f"{name}() of an empty range")
            return pick(r[0], r[-1])
        if len(args) == 1:
            items = list(iterate(args[0], f"{name}()"))
        else:
            items = list(args)
        if not items:
            raise LangError(f"{name}() of an empty collection")
        return pick(as_int(x, f"an argument of {name}") for x in items)

    return impl


def _len(x: Value) -> int:
    if isinstance(x, Range):
        return check_int(x.size())
    if isinstance(x, ChunkSet | tuple):
        return len(x)
    raise LangError(f"len() needs a set, a range or a tuple, not {a_type(x)}")


def _sum(x: Value) -> int:
    total = 0
    for v in iterate(x, "sum()"):
        total = check_int(total + as_int(v, "an element of sum()"))
    return total


def _prod(x: Value) -> int:
    total = 1
    for v in iterate(x, "prod()"):
        total = check_int(total * as_int(v, "an element of prod()"))
    return total


def _union(x: Value) -> ChunkSet:
    bits = 0
    for v in iterate(x, "union()"):
        bits |= as_set(v, "an element of union()").bits
    return ChunkSet(bits)


def _reversed(x: Value) -> Value:
    if isinstance(x, Range):
        r = range(x.lo, x.hi, x.step)[::-1]
        return Range(r.start, r.stop, r.step)
    return tuple(reversed(list(iterate(x, "reversed()"))))


def _range(*args: Value) -> Range:
    ints = [as_int(a, "an argument of range") for a in args]
    if len(ints) == 3 and ints[2] == 0:
        raise LangError("range() step must not be zero")
    r = range(*ints)
    return Range(r.start, r.stop, r.step)


def _bitreverse(x: Value, n: Value) -> int:
    v, bits = as_int(x), as_int(n, "the bit width")
    if not 0 <= bits <= 63:
        raise LangError(f"bit width {bits} must be in 0..63")
    out = 0
    for _ in range(bits):
        out = (out << 1) | (v & 1)
        v >>= 1
    return out


def _dims(d: Value) -> tuple[int, ...]:
    if not isinstance(d, tuple) or not d or not all(type(k) is int and k >= 1 for k in d):
        raise LangError(f"torus dimensions must be a non-empty tuple of positive ints, not {show_value(d)}")
    return d


def _coords(r: Value, dims: Value) -> tuple[int, ...]:
    """Row-major coordinates (last dimension fastest, as MPI_Cart)."""
    shape = _dims(dims)
    rank = as_int(r, "a rank")
    size = 1
    for k in shape:
        size *= k
    if not 0 <= rank < size:
        raise LangError(f"rank {rank} is outside a torus of {size} nodes")
    out = []
    for k in reversed(shape):
        out.append(rank % k)
        rank //= k
    return tuple(reversed(out))


def _rank_of(c: Value, dims: Value) -> int:
    shape = _dims(dims)
    if not isinstance(c, tuple) or len(c) != len(shape):
        raise LangError(f"coordinates must be a tuple of {len(shape)} ints")
    rank = 0
    for x, k in zip(c, shape, strict=True):
        rank = rank * k + (as_int(x, "a coordinate") % k)
    return rank


def _move(r: Value, dims: Value, k: Value, delta: Value) -> int:
    shape = _dims(dims)
    coords = list(_coords(r, dims))
    dim = as_int(k, "a dimension")
    if not 0 <= dim < len(shape):
        raise LangError(f"dimension {dim} out of range 0..{len(shape) - 1}")
    coords[dim] = (coords[dim] + as_int(delta, "a displacement")) % shape[dim]
    return _rank_of(tuple(coords), dims)


def _popcount(x: Value) -> int:
    v = as_int(x)
    if v < 0:
        raise LangError(f"popcount of negative {v}")
    return v.bit_count()


def _shift(x: Value, k: Value) -> ChunkSet:
    """``{e + k for e in x}`` on the bitset (a shift, not a loop over the elements)."""
    s, by = as_set(x, "the first argument of shift"), as_int(k, "the offset of shift")
    if not s.bits or by == 0:
        return s
    if by > 0:
        top = s.bits.bit_length() - 1 + by
        if top >= MAX_SET_ELEMENT:
            raise LangError(f"set element {top} is beyond the limit {MAX_SET_ELEMENT}")
        return ChunkSet(s.bits << by)
    low = (s.bits & -s.bits).bit_length() - 1
    if low + by < 0:
        raise LangError(f"sets hold non-negative integers; shifting {low} by {by} gives {low + by}")
    return ChunkSet(s.bits >> -by)


def _set(x: Value) -> ChunkSet:
    return as_set(x, "the argument of set()")


def _tuple(x: Value) -> tuple:
    return tuple(iterate(x, "tuple()"))


def _all(x: Value) -> bool:
    return all(as_bool(v, "an element of all()") for v in iterate(x, "all()"))


def _any(x: Value) -> bool:
    return any(as_bool(v, "an element of any()") for v in iterate(x, "any()"))


# name -> (min args, max args, implementation, one-line help)
BUILTINS: dict[str, tuple[int, int, Callable[..., Value], str]] = {
    "log2": (1, 1, _log2, "floor of log2(x), x >= 1"),
    "ceil_log2": (1, 1, _ceil_log2, "ceiling of log2(x), x >= 1"),
    "is_pow2": (1, 1, _is_pow2, "true when x is a power of two"),
    "abs": (1, 1, lambda x: check_int(abs(as_int(x))), "absolute value"),
    "min": (1, 64, _minmax("min", min), "smallest of the arguments, or of one set/range/tuple"),
    "max": (1, 64, _minmax("max", max), "largest of the arguments, or of one set/range/tuple"),
    "len": (1, 1, _len, "number of elements of a set, range or tuple"),
    "sum": (1, 1, _sum, "sum of the elements"),
    "prod": (1, 1, _prod, "product of the elements"),
    "union": (1, 1, _union, "union of a collection of sets"),
    "all": (1, 1, _all, "true when every element is true"),
    "any": (1, 1, _any, "true when some element is true"),
    "set": (1, 1, _set, "the set of a range, tuple or int"),
    "shift": (2, 2, _shift, "shift(S, k): the set {x + k for x in S} (no element may become negative)"),
    "tuple": (1, 1, _tuple, "the elements in order, as a tuple"),
    "reversed": (1, 1, _reversed, "the elements in reverse order"),
    "range": (1, 3, _range, "range(hi), range(lo, hi) or range(lo, hi, step)"),
    "bitreverse": (2, 2, _bitreverse, "the low n bits of x in reverse order"),
    "popcount": (1, 1, _popcount, "number of one bits"),
    "coords": (2, 2, _coords, "torus coordinates of a rank (row-major, last dimension fastest)"),
    "rank_of": (2, 2, _rank_of, "rank of torus coordinates (wrapping each coordinate)"),
    "move": (4, 4, _move, "move(r, dims, k, d): the rank d steps from r along dimension k"),
}

COMPREHENSION_FUNCS = ("set", "union", "sum", "prod", "min", "max", "all", "any", "tuple", "len")
