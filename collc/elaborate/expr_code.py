"""Generated source for expressions: `_ExprCode`, its operator fast paths, and the function cache.

`_ExprCode` writes one Python function: each expression as straight-line
statements with the fast path of each operator inline and the general one
(`collc.values`) behind it.  It builds the function from its source, compiling
each distinct source once per process (`_FACTORIES`); the names the source may
use besides its closure variables are `_CODE_GLOBALS`.  Statements are added
by its subclass `collc.elaborate.stmt_code._Code`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from collc.diagnostics import CollError
from collc.elaborate.emitter import _Emitter, _new_op, _new_set, _op_codec, _op_fields, _set_bits
from collc.elaborate.scope import (
    _BOUND,
    _INT_MIN,
    _MISSING,
    Env,
    ExprFn,
    Scope,
    StmtFn,
    _at,
    _bool,
    _note_call,
    _Slots,
    _unassigned,
    _undefined,
)
from collc.elaborate.syntax import _check_literal
from collc.frontend import ast
from collc.frontend.program import Program
from collc.ir import ChunkSet, CodecOp, Op, Span
from collc.values import (
    BUILTINS,
    MAX_SET_ELEMENT,
    LangError,
    Range,
    Value,
    binop,
    compare,
    index,
    iterate,
    make_set,
    unop,
)

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


class _Compiles(Protocol):
    """What generated code asks of the compiler it writes for (`collc.elaborate.compiler._Compiler`).

    The functions of sub-nodes compiled on their own (a nested expression,
    statement, comparison chain, comprehension, failing assertion), constant
    folding, and the state of the instance its code refers to.
    """

    program: Program
    globals: Env
    emitter: _Emitter
    codecs: dict[str, str]  # codec name -> canonical spec
    memos: dict[str, dict[tuple[object, ...], Value]]
    fns: dict[str, Callable[[tuple[Value, ...], Span], Value]]
    procs: dict[str, Callable[[tuple[Value, ...], Span], None]]

    def constant(self, node: ast.Expr, local: Scope) -> Any: ...

    def fold_failed(self, node: ast.Expr, local: Scope) -> bool: ...

    def expr(self, node: ast.Expr, local: Scope, fold: bool = True) -> ExprFn: ...

    def chain(self, node: ast.Compare, local: Scope) -> ExprFn: ...

    def comprehension(self, node: ast.Comprehension, local: Scope) -> ExprFn: ...

    def stmt(self, node: ast.Stmt, local: Scope) -> StmtFn: ...

    def assertion_failure(self, node: ast.Assert, local: Scope) -> Callable[[Any, Value], None]: ...


class _ExprCode:
    """The source of one generated Python function, evaluating expressions inline.

    Every expression becomes straight-line statements leaving its value in a
    temporary (``t0``, ``t1``, ...), in the evaluation order of the language,
    with the fast path of each operator inline and the general one (`binop`,
    `compare`, ...: the same results and errors) behind it.  Values the code
    needs (spans, constants, closures, memos) are its closure variables
    ``v0``, ``v1``, ...; the source itself names no value, so one program gives
    the same sources for every ``p`` and each is compiled once per process.
    """

    def __init__(self, compiler: _Compiles, fold: bool = True) -> None:
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
            if compiler.fold_failed(node, local):
                # it fails when run, and so would every attempt to fold the constants inside it (an attempt
                # per level: quadratic in its depth); its code folds nothing
                return self.call(compiler.expr(node, local, False))
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


class _Nested:
    def __init__(self, code: _ExprCode) -> None:
        self.code = code

    def __enter__(self) -> None:
        self.code.indent += 1

    def __exit__(self, *exc: object) -> None:
        self.code.indent -= 1
