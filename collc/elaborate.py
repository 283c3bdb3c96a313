"""Elaboration: a `Program` plus parameter values becomes a concrete `Schedule`.

Expressions and statements are compiled once per instance into Python
functions (fast to run p times), then every rank's program is run to collect
its operations, step by step.  The functions are generated source (`_Code`):
a statement block, a function body or an expression becomes straight-line
Python with the fast path of every operator inline and the general one
(`collc.values`) behind it, so that running a rank's program makes few calls.

Execution model of the language:

* a ``step:`` block, every iteration of ``for step x in ...`` and every
  communication statement outside a step is one step; the step counter is per
  rank and every rank's program is expected to count the same steps;
* functions are pure: they see their arguments, the parameters and the global
  constants, never ``rank``, so their results are memoised per instance;
* ``do proc(...)`` runs a procedure's statements in place (inside the current
  step when there is one).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from collc import collectives
from collc.diagnostics import CollError
from collc.elaborate_codecs import codec_table, emit_local
from collc.frontend import ast
from collc.frontend.program import Program
from collc.ir import Action, ChunkSet, CodecOp, Op, OpKind, ParamValue, Schedule, Span, Step, make_op
from collc.values import (
    BUILTINS,
    MAX_SET_ELEMENT,
    LangError,
    Range,
    Value,
    a_type,
    as_bool,
    as_int,
    as_set,
    binop,
    compare,
    index,
    iterate,
    make_set,
    unop,
)

MAX_RANKS = 1 << 17
MAX_CHUNKS = 1 << 26
MAX_CALL_DEPTH = 400
MAX_LOOP_ITERATIONS = 1 << 26  # loop and comprehension iterations in one elaboration, all ranks together

Env = dict[str, Value]
_MISSING = object()
_BOUND = 1 << 63
_INT_MIN = -_BOUND
ExprFn = Callable[[Any], Value]
StmtFn = Callable[[Any], None]

# Constructing the frozen IR dataclasses through their slot descriptors gives the very objects
# `ChunkSet(bits)` and `Op(...)` give, without the frozen dataclass __init__ (a third of the cost).
_new_set = ChunkSet.__new__
_set_bits = ChunkSet.bits.__set__  # type: ignore[attr-defined]
_new_op = Op.__new__
_op_fields = tuple(getattr(Op, name).__set__ for name in ("rank", "kind", "peer", "chunks", "action", "span"))
_op_codec = CodecOp.codec.__set__  # type: ignore[attr-defined]


def _op(
    rank: int,
    kind: OpKind,
    peer: int,
    chunks: ChunkSet,
    action: Action | None,
    span: Span,
    _set: tuple[Callable[[Op, Any], None], ...] = _op_fields,
) -> Op:
    """``Op(rank, kind, peer, chunks, action, span)``, faster."""
    op = _new_op(Op)
    _set[0](op, rank)
    _set[1](op, kind)
    _set[2](op, peer)
    _set[3](op, chunks)
    _set[4](op, action)
    _set[5](op, span)
    return op


@dataclass(slots=True)
class _Emitter:
    """Collects the ops of all ranks, step by step (mutable state of one elaboration)."""

    nranks: int
    nchunks: int
    rank: int = 0
    counter: int = 0
    in_step: Span | None = None
    phase: str = ""
    ops: dict[int, list[Op]] = field(default_factory=dict)
    phase_of: dict[int, tuple[str, Span]] = field(default_factory=dict)
    depth: int = 0
    iterations_left: int = MAX_LOOP_ITERATIONS
    current: list[Op] | None = None  # ops[counter] while a step is open and has ops
    sets: dict[object, ChunkSet] = field(default_factory=dict)  # the chunk sets of ints and ranges, shared

    def chunks(self, v: Value, span: Span) -> ChunkSet:
        """``as_set(v)`` for the chunks of an op; ops with the same int or range share one set."""
        t = type(v)
        key: object
        if t is int:
            key = v
        elif t is Range and v.step == 1:  # type: ignore[union-attr]
            key = (v.lo, v.hi)  # type: ignore[union-attr]
        else:
            key = None
        cset = self.sets.get(key) if key is not None else None
        if cset is None:
            try:
                cset = as_set(v, "the chunks")
            except LangError as err:
                raise CollError(str(err), span) from None
            if key is not None:
                self.sets[key] = cset
        return cset

    def spend(self, n: int, span: Span) -> None:
        """Account for ``n`` loop iterations; a runaway program stops with an error, not a hang."""
        self.iterations_left -= n
        if self.iterations_left < 0:
            raise CollError(
                f"the program runs more than {MAX_LOOP_ITERATIONS} loop iterations in total; is a loop bound wrong?",
                span,
            )

    def open_step(self, span: Span) -> None:
        if self.in_step is not None:
            raise CollError(
                f"a step cannot contain another step (the enclosing step starts at line {self.in_step.line})", span
            )
        self.in_step = span
        self.current = None
        known = self.phase_of.get(self.counter)
        if known is None:
            self.phase_of[self.counter] = (self.phase, span)
        elif known[0] != self.phase:
            raise CollError(
                f"rank {self.rank} reaches step {self.counter} in phase {self.phase!r}, but another rank reaches "
                f"it in phase {known[0]!r} (line {known[1].line}); every rank must count the same steps",
                span,
            )

    def close_step(self) -> None:
        self.in_step = None
        self.current = None
        self.counter += 1

    def emit(
        self,
        kind: OpKind,
        peer: Value,
        chunks: Value,
        action: Action | None,
        span: Span,
        peer_span: Span | None = None,
        codec: str | None = None,
    ) -> None:
        rank = self.rank
        if type(peer) is not int or not 0 <= peer < self.nranks or peer == rank:
            where = peer_span or span
            if type(peer) is not int:
                raise CollError(f"a peer must be an int rank, not {a_type(peer)}", where)
            if not 0 <= peer < self.nranks:
                raise CollError(f"peer {peer} is out of range 0..{self.nranks - 1} (at rank {rank})", where)
            raise CollError(f"rank {rank} names itself as its peer", where)
        cset = chunks if type(chunks) is ChunkSet else self.chunks(chunks, span)
        bits = cset.bits
        if bits.bit_length() > self.nchunks:
            raise CollError(
                f"chunk {cset.max()} is out of range 0..{self.nchunks - 1} (at rank {rank}, {kind.value} "
                f"{'to' if kind is OpKind.SEND else 'from'} {peer})",
                span,
            )
        if not bits:
            if self.in_step is None:
                self.open_step(span)
                self.close_step()
            return
        if codec is None:
            op = _op(rank, kind, peer, cset, action, span)
        else:
            op = make_op(rank, kind, peer, cset, action, span, codec)
        if self.in_step is not None:
            current = self.current
            if current is None:
                current = self.current = self.ops.setdefault(self.counter, [])
            current.append(op)
        else:
            self.open_step(span)
            self.ops.setdefault(self.counter, []).append(op)
            self.close_step()


# --------------------------------------------------------------------------
# Code generation
# --------------------------------------------------------------------------


class _Slots:
    """The scope of a function body: its names live at fixed positions of the environment.

    A function's environment is its argument tuple itself when the body binds no
    names, else a list: the arguments, then one position per ``let`` and per
    comprehension variable (a fresh position for each, so that nothing needs
    copying and an inner name never clobbers an outer one).  Phases, procedures
    and global expressions keep dict environments (a ``frozenset`` scope).
    """

    __slots__ = ("names", "size")

    def __init__(self, names: dict[str, int], size: list[int]) -> None:
        self.names = names
        self.size = size  # [positions used], shared by all the scopes of one function body

    def bind(self, name: str) -> tuple[_Slots, int]:
        """This scope with ``name`` at a fresh position, and that position."""
        i = self.size[0]
        self.size[0] += 1
        return _Slots({**self.names, name: i}, self.size), i


Scope = frozenset[str] | _Slots


def _is_local(name: str, local: Scope) -> bool:
    return name in (local.names if isinstance(local, _Slots) else local)


def _unassigned(name: str, span: Span) -> None:
    raise CollError(f"{name!r} is used before it is assigned", span) from None


def _undefined(name: str, span: Span) -> None:
    raise CollError(f"{name!r} is used before its definition is evaluated", span) from None


def _bool(v: Value, span: Span, what: str) -> bool:
    try:
        return as_bool(v, what)
    except LangError as err:
        raise CollError(str(err), span) from None


def _at(span: Span, fn: Callable[..., Value], *args: Any) -> Value:
    """``fn(*args)``, a `LangError` becoming an error at ``span``."""
    try:
        return fn(*args)
    except LangError as err:
        raise CollError(str(err), span) from None


def _note_call(err: CollError, span: Span, name: str) -> None:
    """An error inside a function called from another file says from where."""
    if err.span is not None and err.span.file != span.file:
        err.notes = (*err.notes, f"in {name}() called from {span}")


# The names generated code may use besides its closure variables.
_CODE_GLOBALS: dict[str, Any] = {
    "_MISSING": _MISSING,
    "_BOUND": _BOUND,
    "_INT_MIN": _INT_MIN,
    "_MAX_SET_ELEMENT": MAX_SET_ELEMENT,
    "ChunkSet": ChunkSet,
    "CollError": CollError,
    "LangError": LangError,
    "Op": Op,
    "Range": Range,
    "_at": _at,
    "_bool": _bool,
    "_new_op": _new_op,
    "_new_set": _new_set,
    "_note_call": _note_call,
    "_op_action": _op_fields[4],
    "_op_chunks": _op_fields[3],
    "_op_codec": _op_codec,
    "CodecOp": CodecOp,
    "_op_kind": _op_fields[1],
    "_op_peer": _op_fields[2],
    "_op_rank": _op_fields[0],
    "_op_span": _op_fields[5],
    "_set_bits": _set_bits,
    "_unassigned": _unassigned,
    "_undefined": _undefined,
    "binop": binop,
    "compare": compare,
    "index": index,
    "iterate": iterate,
    "make_set": make_set,
    "unop": unop,
}
_FACTORIES: dict[str, Callable[..., Any]] = {}  # generated source -> its compiled factory
_MAX_FACTORIES = 4096
_MAX_INLINE = 64  # AST nodes inlined into one generated function; the rest get functions of their own
_MAX_INDENT = 14  # nesting of the generated code (Python allows 100 levels and 20 nested blocks)

# Integer fast paths of the binary operators: (condition besides both being ints, result), on
# operands {a} and {b}; anything else goes to `binop`, which computes the result or the error.
_CHECKED_INT_OPS = {  # the result may not fit in 64 bits
    "+": ("", "{a} + {b}"),
    "-": ("", "{a} - {b}"),
    "*": ("", "{a} * {b}"),
    "<<": (" and 0 <= {b} <= 64", "{a} << {b}"),
}
_EXACT_INT_OPS = {  # the result fits, under the condition
    "|": ("", "{a} | {b}"),
    "&": ("", "{a} & {b}"),
    "^": ("", "{a} ^ {b}"),
    "mod": (" and {b} > 0", "{a} % {b}"),
    "%": (" and {b} > 0", "{a} % {b}"),
    "//": (" and {b} > 0", "{a} // {b}"),
    ">>": (" and {b} >= 0", "{a} >> {b}"),
    "..": ("", "Range({a}, {b})"),
}
_SET_OPS = {
    "|": "{a}.bits | {b}.bits",
    "&": "{a}.bits & {b}.bits",
    "^": "{a}.bits ^ {b}.bits",
    "-": "{a}.bits & ~{b}.bits",
}
# Comparisons: (types of both operands, result) for the fast path.
_COMPARE_FAST = {op: ((int, int), f"{{a}} {op} {{b}}") for op in ("<", "<=", ">", ">=", "==", "!=")}
_COMPARE_FAST["in"] = ((int, ChunkSet), "{a} >= 0 and ({b}.bits >> {a}) & 1 == 1")
_COMPARE_FAST["not in"] = ((int, ChunkSet), "not ({a} >= 0 and ({b}.bits >> {a}) & 1 == 1)")

# Builtins cheap enough to evaluate at compile time when their arguments are constants.
_FOLDABLE_BUILTINS = frozenset({"log2", "ceil_log2", "is_pow2", "abs", "popcount", "bitreverse"})
_FOLDABLE_NODES = (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Index, ast.SetLit, ast.TupleLit)


class _Code:
    """The source of one generated Python function, evaluating expressions inline.

    Every expression becomes straight-line statements leaving its value in a
    temporary (``t0``, ``t1``, ...), in the evaluation order of the language,
    with the fast path of each operator inline and the general one (`binop`,
    `compare`, ...: the same results and errors) behind it.  Values the code
    needs (spans, constants, closures, memos) are its closure variables
    ``v0``, ``v1``, ...; the source itself names no value, so one program gives
    the same sources for every ``p`` and each is compiled once per process.
    """

    def __init__(self, compiler: _Compiler, fold: bool = True) -> None:
        self.compiler = compiler
        self.fold = fold  # evaluate constant sub-expressions once, now
        self.lines: list[str] = []
        self.values: list[Any] = []
        self.ids: dict[int, str] = {}
        self.types: dict[str, type] = {}  # of the closure variables
        self.temps = 0
        self.indent = 2
        self.size = 0

    # -------------------------------------------------------- the function
    def value(self, v: Any) -> str:
        """The closure variable holding ``v``."""
        name = self.ids.get(id(v))
        if name is None:
            name = self.ids[id(v)] = f"v{len(self.values)}"
            self.values.append(v)
            self.types[name] = type(v)
        return name

    def of_types(self, *checks: tuple[str, type]) -> str:
        """The test that each ``(atom, type)`` holds (nothing for constants known to)."""
        tests = [f"type({a}) is {t.__name__}" for a, t in checks if self.types.get(a) is not t]
        return " and ".join(tests) or "True"

    def temp(self) -> str:
        self.temps += 1
        return f"t{self.temps - 1}"

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def nested(self, header: str) -> _Nested:
        """``with code.nested("if x:"):`` puts the lines written inside under ``if x:``."""
        self.line(header)
        return _Nested(self)

    def full(self) -> bool:
        return self.size >= _MAX_INLINE or self.indent >= _MAX_INDENT

    def raise_at(self, call: str, target: str, span: Span) -> None:
        """``target = call``, a `LangError` becoming an error at ``span``."""
        with self.nested("try:"):
            self.line(f"{target} = {call}")
        with self.nested("except LangError as err:"):
            self.line(f"raise CollError(str(err), {self.value(span)}) from None")

    def general(self, fn: str, args: str, target: str, span: Span) -> None:
        """``target = fn(args)`` as `raise_at` does, in a line (for the slow paths)."""
        self.line(f"{target} = _at({self.value(span)}, {fn}, {args})")

    def build(self, signature: str = "env", head: tuple[str, ...] = (), tail: tuple[str, ...] = ()) -> Any:
        """The generated function: ``head`` lines, the body (inside ``try`` when there is a tail), ``tail``."""
        body = self.lines or ["    " * self.indent + "pass"]
        params = ", ".join(f"v{k}" for k in range(len(self.values)))
        source = "\n".join(
            (f"def make({params}):", f"    def run({signature}):", *head, *body, *tail, "    return run")
        )
        make = _FACTORIES.get(source)
        if make is None:
            if len(_FACTORIES) >= _MAX_FACTORIES:
                _FACTORIES.clear()
            namespace = dict(_CODE_GLOBALS)
            exec(source, namespace)  # the source is made here, from the AST, and names no value
            make = _FACTORIES[source] = namespace["make"]
        return make(*self.values)

    # -------------------------------------------------------- expressions
    def expr(self, node: ast.Expr, local: Scope) -> str:
        """Code computing ``node``; the name (or literal) holding its value."""
        t = type(node)
        if t is ast.Num or t is ast.Bool:
            return self._literal(node)  # type: ignore[arg-type]
        compiler = self.compiler
        if self.fold and (t in _FOLDABLE_NODES or t is ast.Call):
            value = compiler.constant(node, local)
            if value is not _MISSING:
                return self.value(value)
        if self.full():
            return self.call(compiler.expr(node, local, self.fold))
        self.size += 1
        return getattr(self, "_" + t.__name__)(node, local)  # type: ignore[no-any-return]

    def call(self, fn: Callable[[Any], Any]) -> str:
        """Run a function of its own on the environment."""
        t = self.temp()
        self.line(f"{t} = {self.value(fn)}(env)")
        return t

    def _literal(self, node: ast.Num | ast.Bool) -> str:
        if type(node) is ast.Num:
            _check_literal(node)
        return self.value(node.value)

    def _Name(self, node: ast.Name, local: Scope) -> str:
        name, globals_ = node.id, self.compiler.globals
        if isinstance(local, _Slots) and name in local.names:
            t = self.temp()
            self.line(f"{t} = env[{local.names[name]}]")
            return t
        if isinstance(local, frozenset) and name in local:
            env, missing = "env", "_unassigned"
        elif name in globals_:  # globals are never reassigned
            return self.value(globals_[name])
        else:
            env, missing = self.value(globals_), "_undefined"
        t = self.temp()
        with self.nested("try:"):
            self.line(f"{t} = {env}[{name!r}]")
        with self.nested("except KeyError:"):
            self.line(f"{missing}({name!r}, {self.value(node.span)})")
        return t

    def _BinOp(self, node: ast.BinOp, local: Scope) -> str:
        a, b = self.expr(node.left, local), self.expr(node.right, local)
        op, t = node.op, self.temp()
        general = ("binop", f"{op!r}, {a}, {b}", t, node.span)
        if op in _CHECKED_INT_OPS or op in _EXACT_INT_OPS:
            cond, result = _CHECKED_INT_OPS.get(op) or _EXACT_INT_OPS[op]
            with self.nested(f"if {self.of_types((a, int), (b, int))}{cond.format(a=a, b=b)}:"):
                self.line(f"{t} = {result.format(a=a, b=b)}")
                if op in _CHECKED_INT_OPS:
                    with self.nested(f"if not -_BOUND <= {t} < _BOUND:"):
                        self.general(*general)
            if op in _SET_OPS:  # a result equal to an operand is that operand (immutable): memos share it
                with self.nested(f"elif {self.of_types((a, ChunkSet), (b, ChunkSet))}:"):
                    self.line(f"{t} = {_SET_OPS[op].format(a=a, b=b)}")
                    with self.nested(f"if {t} == {a}.bits:"):
                        self.line(f"{t} = {a}")
                    if op != "-":
                        with self.nested(f"elif {t} == {b}.bits:"):
                            self.line(f"{t} = {b}")
                    with self.nested("else:"):
                        self.line(f"{t}_set = _new_set(ChunkSet)")
                        self.line(f"_set_bits({t}_set, {t})")
                        self.line(f"{t} = {t}_set")
            with self.nested("else:"):
                self.general(*general)
        else:
            self.general(*general)
        return t

    def _UnaryOp(self, node: ast.UnaryOp, local: Scope) -> str:
        a, op, t = self.expr(node.operand, local), node.op, self.temp()
        fast = {
            "-": (f"type({a}) is int and {a} != _INT_MIN", f"-{a}"),
            "~": (f"type({a}) is int", f"~{a}"),
            "not": (f"{a} is True or {a} is False", f"not {a}"),
        }.get(op)
        if fast is None:
            self.general("unop", f"{op!r}, {a}", t, node.span)
            return t
        with self.nested(f"if {fast[0]}:"):
            self.line(f"{t} = {fast[1]}")
        with self.nested("else:"):
            self.general("unop", f"{op!r}, {a}", t, node.span)
        return t

    def check_bool(self, a: str, span: Span, what: str) -> None:
        with self.nested(f"if {a} is not True and {a} is not False:"):
            self.line(f"_bool({a}, {self.value(span)}, {what!r})")

    def _BoolOp(self, node: ast.BoolOp, local: Scope) -> str:
        a = self.expr(node.left, local)
        self.check_bool(a, node.left.span, "operand of and/or")
        t = self.temp()
        self.line(f"{t} = {a}")
        with self.nested(f"if {a} is {node.op == 'and'}:"):
            b = self.expr(node.right, local)
            self.check_bool(b, node.right.span, "operand of and/or")
            self.line(f"{t} = {b}")
        return t

    def compare(self, op: str, a: str, b: str, t: str, span: Span) -> None:
        """``t = compare(op, a, b)``, always a bool."""
        if op in _COMPARE_FAST:
            (ta, tb), result = _COMPARE_FAST[op]
            with self.nested(f"if {self.of_types((a, ta), (b, tb))}:"):
                self.line(f"{t} = {result.format(a=a, b=b)}")
            with self.nested("else:"):
                self.general("compare", f"{op!r}, {a}, {b}", t, span)
        else:
            self.general("compare", f"{op!r}, {a}, {b}", t, span)

    def _Compare(self, node: ast.Compare, local: Scope) -> str:
        if len(node.ops) > 4:  # a long chain: a loop, not deeper and deeper code
            return self.call(self.compiler.chain(node, local))
        a, t = self.expr(node.operands[0], local), self.temp()
        self._chain(node, local, 0, a, t)
        return t

    def _chain(self, node: ast.Compare, local: Scope, k: int, a: str, t: str) -> None:
        """Comparisons k, k+1, ... of a chain, each only when the ones before held."""
        b = self.expr(node.operands[k + 1], local)
        self.compare(node.ops[k], a, b, t, node.span)
        if k + 1 < len(node.ops):
            with self.nested(f"if {t}:"):
                self._chain(node, local, k + 1, b, t)

    def _IfExp(self, node: ast.IfExp, local: Scope) -> str:
        compiler = self.compiler
        cond = compiler.constant(node.cond, local) if self.fold else _MISSING
        if type(cond) is bool:  # only the branch taken runs (the other is compiled, for its errors)
            if not cond:
                compiler.expr(node.then, local)
            taken = self.expr(node.then if cond else node.orelse, local)
            if cond:
                compiler.expr(node.orelse, local)
            return taken
        c, t = self.expr(node.cond, local), self.temp()
        known = type(node.cond) is ast.Compare  # a comparison is a bool
        with self.nested(f"if {c}:" if known else f"if {c} is True:"):
            self.line(f"{t} = {self.expr(node.then, local)}")
        with self.nested("else:" if known else f"elif {c} is False:"):
            self.line(f"{t} = {self.expr(node.orelse, local)}")
        if not known:
            with self.nested("else:"):
                self.line(f"{t} = _bool({c}, {self.value(node.cond.span)}, 'condition')")
        return t

    def _Index(self, node: ast.Index, local: Scope) -> str:
        a, b, t = self.expr(node.target, local), self.expr(node.index, local), self.temp()
        self.raise_at(f"index({a}, {b})", t, node.span)
        return t

    def _SetLit(self, node: ast.SetLit, local: Scope) -> str:
        elts = [self.expr(e, local) for e in node.elts]
        t = self.temp()
        if len(elts) == 1:
            (a,) = elts
            with self.nested(f"if {self.of_types((a, int))} and 0 <= {a} < _MAX_SET_ELEMENT:"):
                self.line(f"{t} = _new_set(ChunkSet)")
                self.line(f"_set_bits({t}, 1 << {a})")
            with self.nested("else:"):
                self.general("make_set", f"[{a}]", t, node.span)
        else:
            self.raise_at(f"make_set([{', '.join(elts)}])", t, node.span)
        return t

    def _TupleLit(self, node: ast.TupleLit, local: Scope) -> str:
        elts, t = [self.expr(e, local) for e in node.elts], self.temp()
        self.line(f"{t} = ({''.join(e + ', ' for e in elts)})")
        return t

    def _Comprehension(self, node: ast.Comprehension, local: Scope) -> str:
        return self.call(self.compiler.comprehension(node, local))

    def _Call(self, node: ast.Call, local: Scope) -> str:
        args = [self.expr(a, local) for a in node.args]
        compiler, t = self.compiler, self.temp()
        if node.func in compiler.program.fns:  # the memo first; on a miss, the function
            self.line(f"{t}_args = ({''.join(a + ', ' for a in args)})")
            self.line(f"{t} = {self.value(compiler.memos[node.func].get)}({t}_args, _MISSING)")
            with self.nested(f"if {t} is _MISSING:"):
                fns = self.value(compiler.fns)
                self.line(f"{t} = {fns}[{node.func!r}]({t}_args, {self.value(node.span)})")
        else:
            self.raise_at(f"{self.value(BUILTINS[node.func][2])}({', '.join(args)})", t, node.span)
        return t

    # -------------------------------------------------------- statements
    def block(self, body: tuple[ast.Stmt, ...], local: Scope) -> None:
        start = len(self.lines)
        for s in body:
            self.stmt(s, local)
        if len(self.lines) == start:
            self.line("pass")

    def stmt(self, node: ast.Stmt, local: Scope) -> None:
        if self.full():
            self.line(f"{self.value(self.compiler.stmt(node, local))}(env)")
            return
        self.size += 1
        getattr(self, "_s_" + type(node).__name__)(node, local)

    def _s_Let(self, node: ast.Let, local: Scope) -> None:
        self.line(f"env[{node.name!r}] = {self.expr(node.value, local)}")

    def _s_Assert(self, node: ast.Assert, local: Scope) -> None:
        c = self.expr(node.cond, local)
        with self.nested(f"if {c} is not True:"):
            self.line(f"{self.value(self.compiler.assertion_failure(node, local))}(env, {c})")

    def _s_Pass(self, node: ast.Pass, local: Scope) -> None:
        self.line("pass")

    def _s_For(self, node: ast.For, local: Scope) -> None:
        values, v, left = self.expr(node.iter, local), self.temp(), self.temp()
        emitter, span = self.value(self.compiler.emitter), self.value(node.span)
        self.raise_at(f'iterate({values}, "for loop")', f"{v}_values", node.iter.span)
        with self.nested(f"for {v} in {v}_values:"):
            self.line(f"{left} = {emitter}.iterations_left - 1")
            self.line(f"{emitter}.iterations_left = {left}")
            with self.nested(f"if {left} < 0:"):
                self.line(f"{emitter}.spend(0, {span})")
            self.line(f"env[{node.var!r}] = {v}")
            if node.is_step:
                self.open_step(node.span)
            self.block(node.body, local)
            if node.is_step:
                self.close_step()

    def _s_If(self, node: ast.If, local: Scope) -> None:
        self._branches(node, local, 0)

    def _branches(self, node: ast.If, local: Scope, k: int) -> None:
        """Branch k of an if/elif/else chain, and the ones after it."""
        if k == len(node.branches):
            self.block(node.orelse, local)
            return
        if k > 0 and self.full():  # the rest of a long chain: a function of its own
            rest = ast.If(branches=node.branches[k:], orelse=node.orelse, span=node.span)
            self.line(f"{self.value(self.compiler.stmt(rest, local))}(env)")
            return
        cond, body = node.branches[k]
        c = self.expr(cond, local)
        known = type(cond) is ast.Compare  # a comparison is a bool
        with self.nested(f"if {c}:" if known else f"if {c} is True:"):
            self.block(body, local)
        with self.nested("else:" if known else f"elif {c} is False:"):
            self._branches(node, local, k + 1)
        if not known:
            with self.nested("else:"):
                self.line(f"_bool({c}, {self.value(cond.span)}, 'condition')")

    def _s_StepBlock(self, node: ast.StepBlock, local: Scope) -> None:
        self.open_step(node.span)
        self.block(node.body, local)
        self.close_step()

    def open_step(self, span: Span) -> None:
        """`_Emitter.open_step`, inline when the step is known to be in this phase (from another rank)."""
        e, known = self.value(self.compiler.emitter), self.temp()
        self.line(f"{known} = {self.value(self.compiler.emitter.phase_of)}.get({e}.counter)")
        with self.nested(f"if {e}.in_step is None and {known} is not None and {known}[0] == {e}.phase:"):
            self.line(f"{e}.in_step = {self.value(span)}")
            self.line(f"{e}.current = None")
        with self.nested("else:"):
            self.line(f"{e}.open_step({self.value(span)})")

    def close_step(self) -> None:
        """`_Emitter.close_step`, inline."""
        e = self.value(self.compiler.emitter)
        self.line(f"{e}.in_step = {e}.current = None")
        self.line(f"{e}.counter += 1")

    def emit(
        self,
        kind: OpKind,
        peer: str,
        chunks: str,
        action: Action | None,
        span: Span,
        peer_span: Span | None,
        codec: ast.CodecRef | None = None,
    ) -> None:
        """A valid peer, in a step, with a valid non-empty chunk set: the op goes straight to the step's list.
        Anything else goes to `_Emitter.emit`, which does the same or raises the error (peer errors first)."""
        compiler = self.compiler
        spec = compiler.codecs[codec.name] if codec is not None else None
        e, k, a, s, c = (self.value(v) for v in (compiler.emitter, kind, action, span, spec))
        ps = self.value(peer_span) if peer_span is not None else "None"
        in_step = "" if peer_span is not None else f" and {e}.in_step is not None"  # an exchange opened one
        cs, current, op = self.temp(), self.temp(), self.temp()
        with self.nested(f"if type({peer}) is int and 0 <= {peer} < {e}.nranks and {peer} != {e}.rank{in_step}:"):
            with self.nested(f"if type({chunks}) is ChunkSet:"):
                self.line(f"{cs} = {chunks}")
            with self.nested(f"elif type({chunks}) is Range and {chunks}.step == 1:"):  # the shared set, if made
                self.line(f"{cs} = {self.value(compiler.emitter.sets)}.get(({chunks}.lo, {chunks}.hi))")
                with self.nested(f"if {cs} is None:"):
                    self.line(f"{cs} = {e}.chunks({chunks}, {s})")
            with self.nested("else:"):
                self.line(f"{cs} = {e}.chunks({chunks}, {s})")
            with self.nested(f"if 0 < {cs}.bits.bit_length() <= {e}.nchunks:"):
                self.line(f"{current} = {e}.current")
                with self.nested(f"if {current} is None:"):
                    self.line(f"{current} = {e}.current = {e}.ops.setdefault({e}.counter, [])")
                self.line(f"{op} = _new_op({'Op' if spec is None else 'CodecOp'})")
                for field_, v in (("rank", f"{e}.rank"), ("kind", k), ("peer", peer), ("chunks", cs)):
                    self.line(f"_op_{field_}({op}, {v})")
                self.line(f"_op_action({op}, {a})")
                self.line(f"_op_span({op}, {s})")
                if spec is not None:
                    self.line(f"_op_codec({op}, {c})")
                self.line(f"{current}.append({op})")
            with self.nested("else:"):
                self.line(f"{e}.emit({k}, {peer}, {cs}, {a}, {s}, {ps}, {c})")
        with self.nested("else:"):
            self.line(f"{e}.emit({k}, {peer}, {chunks}, {a}, {s}, {ps}, {c})")

    def _s_Send(self, node: ast.Send, local: Scope) -> None:
        _check_literals(node.chunks)  # compiled first, then the peer: its compile error comes first
        peer, chunks = self.expr(node.peer, local), self.expr(node.chunks, local)
        self.emit(OpKind.SEND, peer, chunks, None, node.span, None, node.codec)

    def _s_Recv(self, node: ast.Recv, local: Scope) -> None:
        _check_literals(node.chunks)  # compiled first, then the peer: its compile error comes first
        peer, chunks = self.expr(node.peer, local), self.expr(node.chunks, local)
        self.emit(OpKind.RECV, peer, chunks, Action(node.action), node.span, None, node.codec)

    def _s_Compress(self, node: ast.Compress, local: Scope) -> None:
        self.local_op(OpKind.COMPRESS, node.chunks, self.compiler.codecs[node.codec.name], node.span, local)

    def _s_Decompress(self, node: ast.Decompress, local: Scope) -> None:
        self.local_op(OpKind.DECOMPRESS, node.chunks, None, node.span, local)

    def local_op(self, kind: OpKind, chunks: ast.Expr, spec: str | None, span: Span, local: Scope) -> None:
        """`emit_local`: a compress or decompress op (rare enough for a call per op)."""
        cs = self.expr(chunks, local)
        e, k, c, s = (self.value(v) for v in (self.compiler.emitter, kind, spec, span))
        self.line(f"{self.value(emit_local)}({e}, {k}, {cs}, {c}, {s})")

    def _s_Exchange(self, node: ast.Exchange, local: Scope) -> None:
        peer, outer = self.expr(node.peer, local), self.temp()
        emitter = self.value(self.compiler.emitter)
        self.line(f"{outer} = {emitter}.in_step is None")
        with self.nested(f"if {outer}:"):
            self.open_step(node.span)
        send_codec, recv_codec = node.send_codec or node.recv_codec, node.recv_codec or node.send_codec
        send = self.expr(node.send, local)
        self.emit(OpKind.SEND, peer, send, None, node.send_span, node.peer.span, send_codec)
        recv = self.expr(node.recv, local)
        self.emit(OpKind.RECV, peer, recv, Action(node.action), node.recv_span, node.peer.span, recv_codec)
        with self.nested(f"if {outer}:"):
            self.close_step()

    def _s_Do(self, node: ast.Do, local: Scope) -> None:
        args = [self.expr(a, local) for a in node.args]
        proc = self.value(self.compiler.procs)
        self.line(f"{proc}[{node.proc!r}](({''.join(a + ', ' for a in args)}), {self.value(node.span)})")


class _Nested:
    def __init__(self, code: _Code) -> None:
        self.code = code

    def __enter__(self) -> None:
        self.code.indent += 1

    def __exit__(self, *exc: object) -> None:
        self.code.indent -= 1


class _Compiler:
    """Compiles AST nodes of one program into Python functions for one instance.

    Sub-expressions whose value cannot depend on the environment (literals,
    globals already defined, and cheap pure operations on them) are evaluated
    once, when compiled, if that succeeds; one that fails is left to fail when
    (and if) it is run, as before.  Function bodies are compiled when the
    compiler is made (so that compile-time errors show up then) and once more
    when all the globals are known (`specialise`), with the globals folded.
    """

    def __init__(self, program: Program, globals_: Env, emitter: _Emitter) -> None:
        self.program = program
        self.globals = globals_
        self.emitter = emitter
        self.codecs = codec_table(program)  # codec name -> canonical spec
        self.memos: dict[str, dict[tuple[object, ...], Value]] = {name: {} for name in program.fns}
        self.fns: dict[str, Callable[[tuple[Value, ...], Span], Value]] = {}
        self.procs: dict[str, Callable[[tuple[Value, ...], Span], None]] = {}
        self.constness: dict[tuple[int, int], bool] = {}
        self.folded: dict[tuple[int, int], Any] = {}
        for fn in program.fns.values():  # compiled at their first call; their compile errors show now
            for item in fn.body:
                _check_literals(item.value if isinstance(item, ast.Let) else item.cond)
            _check_literals(fn.result)
            self.fns[fn.name] = self._first_call(fn)
        for proc in program.procs.values():
            self.procs[proc.name] = self._proc(proc)

    def specialise(self) -> None:
        """Every global is now defined: functions compiled before compile again (their memos are kept)."""
        for fn in self.program.fns.values():
            self.fns[fn.name] = self._first_call(fn)

    def release(self) -> None:
        """Drop the compiled code and the memos now: they refer to one another (a cycle for the collector)."""
        self.fns.clear()
        self.procs.clear()
        self.memos.clear()

    def _first_call(self, fn: ast.Fn) -> Callable[[tuple[Value, ...], Span], Value]:
        def first_call(args: tuple[Value, ...], span: Span) -> Value:
            compiled = self.fns[fn.name] = self._fn(fn)
            return compiled(args, span)

        return first_call

    # ------------------------------------------------------------ expressions
    def expr(self, node: ast.Expr, local: Scope, fold: bool = True) -> ExprFn:
        code = _Code(self, fold)
        code.line(f"return {code.expr(node, local)}")
        return code.build()  # type: ignore[no-any-return]

    def constant(self, node: ast.Expr, local: Scope) -> Any:
        """The value of ``node`` if it is a constant whose evaluation succeeds, else `_MISSING`."""
        if not self._is_constant(node, local):
            return _MISSING
        key = (id(node), len(self.globals))  # globals are only ever added
        value = self.folded.get(key, self)
        if value is self:
            code = _Code(self, fold=False)
            code.line(f"return {code.expr(node, local)}")
            try:
                value = code.build()(None)
            except Exception:  # it fails again, at run time, where it used to
                value = _MISSING
            self.folded[key] = value
        return value

    def _is_constant(self, node: ast.Expr, local: Scope) -> bool:
        key = (id(node), len(self.globals))
        known = self.constness.get(key)
        if known is None:
            t = type(node)
            if t is ast.Num or t is ast.Bool:
                known = True
            elif t is ast.Name:
                known = not _is_local(node.id, local) and node.id in self.globals  # type: ignore[union-attr]
            elif t is ast.Call or t in _FOLDABLE_NODES:
                known = t is not ast.Call or node.func in _FOLDABLE_BUILTINS  # type: ignore[union-attr]
                for child in node.args if t is ast.Call else _children(node):  # type: ignore[union-attr]
                    if not known:
                        break
                    known = self._is_constant(child, local)  # (a frame a level: no all() and generator)
            else:
                known = False
            self.constness[key] = known
        return known

    def chain(self, node: ast.Compare, local: Scope) -> ExprFn:
        """A chain of comparisons ``a < b <= c ...``, each operand evaluated only when the ones before held."""
        ops, span = node.ops, node.span
        fns = [self.expr(o, local) for o in node.operands]

        def run(env: Any) -> Value:
            a = fns[0](env)
            try:
                for op, fn in zip(ops, fns[1:], strict=True):
                    b = fn(env)
                    if not compare(op, a, b):
                        return False
                    a = b
            except LangError as err:
                raise CollError(str(err), span) from None
            return True

        return run

    def comprehension(self, node: ast.Comprehension, local: Scope) -> ExprFn:
        var, span, func = node.var, node.span, node.func
        if isinstance(local, _Slots):
            inner, slot = local.bind(var)
        else:
            inner, slot = local | {var}, -1
        elt = self.expr(node.elt, inner)  # (compiled in this order, for which compile error comes first)
        it = self.expr(node.iter, local)
        cond = self.expr(node.cond, inner) if node.cond is not None else None
        cspan = node.cond.span if node.cond is not None else span
        impl = BUILTINS[func][2] if func != "set" else None
        emitter = self.emitter

        def run(env: Any) -> Value:
            if slot < 0:
                scope = dict(env)
                key: Any = var
            else:
                scope, key = env, slot  # a position of its own in the function's environment
            items: list[Value] = []
            try:
                for v in iterate(it(env), "comprehension"):
                    left = emitter.iterations_left - 1
                    emitter.iterations_left = left
                    if left < 0:
                        emitter.spend(0, span)
                    scope[key] = v
                    if cond is not None and not _bool(cond(scope), cspan, "comprehension filter"):
                        continue
                    items.append(elt(scope))
                if impl is None:
                    return make_set(items)
                return impl(tuple(items))
            except LangError as err:
                raise CollError(str(err), span) from None

        return run

    # ------------------------------------------------------------ functions
    def _fn(self, fn: ast.Fn) -> Callable[[tuple[Value, ...], Span], Value]:
        """The body of ``fn``, run on a memo miss (the call sites look the memo up)."""
        scope = _Slots({name: i for i, name in enumerate(fn.params)}, [len(fn.params)])
        code = _Code(self)
        code.indent = 3  # in a try
        for item in fn.body:
            if isinstance(item, ast.Let):
                value = code.expr(item.value, scope)
                scope, slot = scope.bind(item.name)
                code.line(f"env[{slot}] = {value}")
            else:
                code._s_Assert(item, scope)
        result = code.expr(fn.result, scope)
        extra = scope.size[0] - len(fn.params)  # known now, comprehensions included
        emitter, memo = code.value(self.emitter), code.value(self.memos[fn.name])
        message = code.value(f"recursion deeper than {MAX_CALL_DEPTH} calls in {fn.name}()")
        head = (
            f"        if {emitter}.depth >= {MAX_CALL_DEPTH}:",
            f"            raise CollError({message}, span)",
            f"        {emitter}.depth += 1",
            "        try:",
            f"            env = [*args{', None' * extra}]" if extra else "            env = args",
        )
        tail = (
            "        except CollError as err:",
            f"            _note_call(err, span, {fn.name!r})",
            "            raise",
            f"        {emitter}.depth -= 1  # left unbalanced on error: an error ends the elaboration",
            f"        {memo}[args] = {result}",
            f"        return {result}",
        )
        return code.build("args, span", head, tail)  # type: ignore[no-any-return]

    def _proc(self, proc: ast.Proc) -> Callable[[tuple[Value, ...], Span], None]:
        body_holder: list[StmtFn] = []
        params, name, emitter = proc.params, proc.name, self.emitter

        def call(args: tuple[Value, ...], span: Span) -> None:
            if not body_holder:  # compiled lazily: procedures may call each other
                local = frozenset({"rank", *params, *_assigned(proc.body)})
                body_holder.append(self.block(proc.body, local))
            if emitter.depth >= MAX_CALL_DEPTH:
                raise CollError(f"recursion deeper than {MAX_CALL_DEPTH} calls in {name}", span)
            emitter.depth += 1
            try:
                env: Env = dict(zip(params, args, strict=True))
                env["rank"] = emitter.rank
                body_holder[0](env)
            finally:
                emitter.depth -= 1

        return call

    # ------------------------------------------------------------ statements
    def block(self, body: tuple[ast.Stmt, ...], local: Scope) -> StmtFn:
        code = _Code(self)
        code.block(body, local)
        return code.build()  # type: ignore[no-any-return]

    def stmt(self, node: ast.Stmt, local: Scope) -> StmtFn:
        code = _Code(self)
        code.stmt(node, local)
        return code.build()  # type: ignore[no-any-return]

    def _assert(self, node: ast.Assert, local: Scope) -> StmtFn:
        return self.stmt(node, local)

    def assertion_failure(self, node: ast.Assert, local: Scope) -> Callable[[Any, Value], None]:
        """What a failing assertion raises, given the environment and the condition's value."""
        span = node.span
        text = node.message or _source_text(self.program, node.cond.span)
        # where a name `rank` is bound: the key of a dict environment, a position of a function's
        rank_key: Any = local.names.get("rank") if isinstance(local, _Slots) else "rank"

        def fail(env: Any, value: Value) -> None:
            _bool(value, span, "assertion")
            if isinstance(local, _Slots):
                where = f" at rank {env[rank_key]}" if rank_key is not None else ""
            else:
                where = f" at rank {env['rank']}" if "rank" in env else ""
            raise CollError(f"assertion failed{where}: {text}", span)

        return fail


def _check_literal(node: ast.Num) -> None:
    if node.value > (1 << 63) - 1:
        raise CollError(f"integer literal {node.value} does not fit in 64 bits", node.span)


def _check_literals(node: ast.Expr) -> None:
    """Raise the error compiling ``node`` raises (an integer literal beyond 64 bits), without compiling it.

    (Two frames a level, as compiling takes: an absurdly deep expression is too deep for both.)
    """
    if type(node) is ast.Num:
        _check_literal(node)  # type: ignore[arg-type]
    else:
        _check_children(node)


def _check_children(node: ast.Expr) -> None:
    if type(node) is ast.Comprehension:  # compiled in this order
        assert isinstance(node, ast.Comprehension)
        children: tuple[ast.Expr | None, ...] = (node.elt, node.iter, node.cond)
    elif type(node) is ast.Call:
        assert isinstance(node, ast.Call)
        children = node.args
    else:
        children = _children(node)
    for child in children:
        if child is not None:
            _check_literals(child)


def _children(node: ast.Expr) -> tuple[ast.Expr, ...]:
    if isinstance(node, ast.BinOp | ast.BoolOp):
        return (node.left, node.right)
    if isinstance(node, ast.UnaryOp):
        return (node.operand,)
    if isinstance(node, ast.Compare):
        return node.operands
    if isinstance(node, ast.IfExp):
        return (node.cond, node.then, node.orelse)
    if isinstance(node, ast.Index):
        return (node.target, node.index)
    if isinstance(node, ast.SetLit | ast.TupleLit):
        return node.elts
    return ()


def _assigned(body: tuple[ast.Stmt, ...]) -> set[str]:
    """Names a statement list may assign (lets and loop variables, at any depth)."""
    out: set[str] = set()
    for s in body:
        if isinstance(s, ast.Let):
            out.add(s.name)
        elif isinstance(s, ast.For):
            out.add(s.var)
            out |= _assigned(s.body)
        elif isinstance(s, ast.If):
            for _, b in s.branches:
                out |= _assigned(b)
            out |= _assigned(s.orelse)
        elif isinstance(s, ast.StepBlock):
            out |= _assigned(s.body)
    return out


def _source_text(program: Program, span: Span) -> str:
    text = program.sources.get(span.file, "")
    lines = text.splitlines()
    if not 1 <= span.line <= len(lines):
        return "<condition>"
    line = lines[span.line - 1]
    end = span.end_column - 1 if span.end_line == span.line else len(line)
    return line[span.column - 1 : end].strip() or "<condition>"


# --------------------------------------------------------------------------
# Parameters and the driver
# --------------------------------------------------------------------------


def bind_params(program: Program, values: Mapping[str, ParamValue]) -> dict[str, ParamValue]:
    """Check the given values against the declared parameters; fill in defaults."""
    declared = {p.name: p for p in program.params}
    for name in values:
        if name not in declared:
            names = ", ".join(declared) or "none"
            raise CollError(
                f"unknown parameter {name!r} for {program.name} (its parameters: {names})", program.header.span
            )
    return dict(values)


def _bind(program: Program, values: Mapping[str, ParamValue], compiler_for: Callable[[Env], _Compiler]) -> Env:
    bind_params(program, values)
    globals_: Env = {}
    compiler = compiler_for(globals_)
    for param in program.params:
        if param.name in values:
            value = values[param.name]
            if param.type == "int" and type(value) is not int:
                raise CollError(f"parameter {param.name} is an int, got {value!r}", param.span)
            if param.type == "dims":
                if type(value) is int:
                    value = (value,)
                if not isinstance(value, tuple) or not value or not all(type(d) is int and d >= 1 for d in value):
                    raise CollError(
                        f"parameter {param.name} needs torus dimensions like 4x4, got {value!r}", param.span
                    )
        elif param.default is not None:
            value = compiler.expr(param.default, frozenset())(globals_)  # type: ignore[assignment]
        else:
            flag = "-p N" if param.name == "p" else f"--param {param.name}=VALUE"
            raise CollError(f"missing value for parameter {param.name} (pass {flag})", param.span)
        globals_[param.name] = value
    for param in program.params:
        if param.constraint is not None:
            _check_constraint(program, compiler, param, globals_)
    return globals_


def _conjuncts(node: ast.Expr) -> list[ast.Expr]:
    if isinstance(node, ast.BoolOp) and node.op == "and":
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _check_constraint(program: Program, compiler: _Compiler, param: ast.Param, globals_: Env) -> None:
    assert param.constraint is not None
    for part in _conjuncts(param.constraint):
        if not _bool(compiler.expr(part, frozenset())(globals_), part.span, "constraint"):
            value = globals_[param.name]
            shown = "x".join(map(str, value)) if isinstance(value, tuple) else str(value)
            raise CollError(
                f"{param.name}={shown} violates the constraint {_source_text(program, part.span)}", part.span
            )


def elaborate(program: Program, values: Mapping[str, ParamValue]) -> Schedule:
    """Instantiate ``program`` with parameter ``values`` and collect every rank's steps."""
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 20 * MAX_CALL_DEPTH + 2000))
    # Elaboration makes millions of objects that live on (memos, ops) and no garbage cycles to speak
    # of (the compiled closures are one per instance): the cyclic collector would only re-scan them.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _elaborate(program, values)
    except RecursionError:
        raise CollError("the program recurses too deeply to evaluate", program.header.span) from None
    finally:
        sys.setrecursionlimit(old_limit)
        if collecting:
            gc.enable()


def constants(program: Program, values: Mapping[str, ParamValue]) -> dict[str, Value]:
    """The parameters and global constants of an instance (no phases are run)."""
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 20 * MAX_CALL_DEPTH + 2000))
    try:
        compiler, globals_, _ = _globals(program, values)
        compiler.release()
    except RecursionError:
        raise CollError("the program recurses too deeply to evaluate", program.header.span) from None
    finally:
        sys.setrecursionlimit(old_limit)
    return dict(globals_)


def _globals(program: Program, values: Mapping[str, ParamValue]) -> tuple[_Compiler, Env, _Emitter]:
    emitter = _Emitter(nranks=0, nchunks=0)
    compilers: list[_Compiler] = []

    def make(globals_: Env) -> _Compiler:
        compilers.append(_Compiler(program, globals_, emitter))
        return compilers[-1]

    globals_ = _bind(program, values, make)
    compiler = compilers[0]
    for let in program.lets:
        globals_[let.name] = compiler.expr(let.value, frozenset())(globals_)
    compiler.specialise()
    return compiler, globals_, emitter


def _elaborate(program: Program, values: Mapping[str, ParamValue]) -> Schedule:
    compiler, globals_, emitter = _globals(program, values)

    p = globals_["p"]
    pspan = (program.param("p") or program.header).span
    if type(p) is not int:
        raise CollError(f"p must be an int, got {a_type(p)}", pspan)
    if not 1 <= p <= MAX_RANKS:
        raise CollError(f"p={p} is out of the supported range 1..{MAX_RANKS}", pspan)
    for a in program.asserts:
        compiler._assert(a, frozenset())(globals_)

    nchunks_v = compiler.expr(program.chunks.count, frozenset())(globals_)
    try:
        nchunks = as_int(nchunks_v, "the number of chunks")
    except LangError as err:
        raise CollError(str(err), program.chunks.span) from None
    if not 1 <= nchunks <= MAX_CHUNKS:
        raise CollError(f"the number of chunks ({nchunks}) must be in 1..{MAX_CHUNKS}", program.chunks.span)
    layout = collectives.layout_error(program.collective, p, nchunks)
    if layout is not None:
        raise CollError(layout, program.chunks.span)

    root: int | None = None
    if program.collective.has_root:
        root_v = globals_["root"]
        if type(root_v) is not int or not 0 <= root_v < p:
            rspan = (program.param("root") or program.header).span
            raise CollError(f"root={root_v} must be a rank in 0..{p - 1}", rspan)
        root = root_v

    emitter.nranks, emitter.nchunks = p, nchunks
    phases = []
    for phase in program.phases:
        local = frozenset({"rank", *_assigned(phase.body)})
        phases.append((phase.name, compiler.block(phase.body, local)))
    for rank in range(p):
        emitter.rank, emitter.counter, emitter.in_step = rank, 0, None
        try:
            for name, body in phases:
                emitter.phase = name
                body({"rank": rank})
        except CollError as err:
            raise CollError(err.message, err.span, (*err.notes, f"while elaborating rank {rank}")) from None

    compiler.release()
    steps = []
    for counter in sorted(emitter.ops):
        steps.append(Step(index=len(steps), phase=emitter.phase_of[counter][0], ops=tuple(emitter.ops[counter])))
    params = tuple((p_.name, globals_[p_.name]) for p_ in program.params)
    return Schedule(
        algorithm=program.name,
        collective=program.collective,
        params=params,  # type: ignore[arg-type]
        nranks=p,
        nchunks=nchunks,
        root=root,
        steps=tuple(steps),
        source=program.path,
        span=program.header.span,
        codecs=tuple(compiler.codecs.items()),
    )


__all__ = ["MAX_CHUNKS", "MAX_RANKS", "ChunkSet", "bind_params", "constants", "elaborate"]
