"""Elaboration: a `Program` plus parameter values becomes a concrete `Schedule`.

Expressions and statements are compiled once per instance into Python
closures (fast to run p times), then every rank's program is run to collect
its operations, step by step.

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

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from collc import collectives
from collc.diagnostics import CollError
from collc.frontend import ast
from collc.frontend.program import Program
from collc.ir import Action, ChunkSet, Op, OpKind, ParamValue, Schedule, Span, Step
from collc.values import (
    BUILTINS,
    LangError,
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
# Integer operators that cannot fail except by overflow: a fast path for the common case.
_FAST_INT_OPS: dict[str, Callable[[int, int], int]] = {
    "+": int.__add__,
    "-": int.__sub__,
    "*": int.__mul__,
    "|": int.__or__,
    "&": int.__and__,
    "^": int.__xor__,
}
_FAST_SET_OPS: dict[str, Callable[[int, int], int]] = {
    "|": int.__or__,
    "&": int.__and__,
    "^": int.__xor__,
    "-": lambda a, b: a & ~b,
}
ExprFn = Callable[[Env], Value]


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
        self.counter += 1

    def emit(
        self, kind: OpKind, peer: Value, chunks: Value, action: Action | None, span: Span, peer_span: Span | None = None
    ) -> None:
        rank = self.rank
        where = peer_span or span
        if type(peer) is not int:
            raise CollError(f"a peer must be an int rank, not {a_type(peer)}", where)
        if not 0 <= peer < self.nranks:
            raise CollError(f"peer {peer} is out of range 0..{self.nranks - 1} (at rank {rank})", where)
        if peer == rank:
            raise CollError(f"rank {rank} names itself as its peer", where)
        try:
            cset = as_set(chunks, "the chunks")
        except LangError as err:
            raise CollError(str(err), span) from None
        if cset.bits.bit_length() > self.nchunks:
            raise CollError(
                f"chunk {cset.max()} is out of range 0..{self.nchunks - 1} (at rank {rank}, {kind.value} "
                f"{'to' if kind is OpKind.SEND else 'from'} {peer})",
                span,
            )
        if not cset:
            if self.in_step is None:
                self.open_step(span)
                self.close_step()
            return
        op = Op(rank=rank, kind=kind, peer=peer, chunks=cset, action=action, span=span)
        if self.in_step is not None:
            self.ops.setdefault(self.counter, []).append(op)
        else:
            self.open_step(span)
            self.ops.setdefault(self.counter, []).append(op)
            self.close_step()


class _Compiler:
    """Compiles AST nodes of one program into closures for one instance."""

    def __init__(self, program: Program, globals_: Env, emitter: _Emitter) -> None:
        self.program = program
        self.globals = globals_
        self.emitter = emitter
        self.fns: dict[str, Callable[[tuple[Value, ...], Span], Value]] = {}
        self.procs: dict[str, Callable[[tuple[Value, ...], Span], None]] = {}
        for fn in program.fns.values():
            self.fns[fn.name] = self._fn(fn)
        for proc in program.procs.values():
            self.procs[proc.name] = self._proc(proc)

    # ------------------------------------------------------------ expressions
    def expr(self, node: ast.Expr, local: frozenset[str]) -> ExprFn:
        method = getattr(self, "_e_" + type(node).__name__)
        return method(node, local)  # type: ignore[no-any-return]

    def _e_Num(self, node: ast.Num, local: frozenset[str]) -> ExprFn:
        value = node.value
        if value > (1 << 63) - 1:
            raise CollError(f"integer literal {value} does not fit in 64 bits", node.span)
        return lambda env: value

    def _e_Bool(self, node: ast.Bool, local: frozenset[str]) -> ExprFn:
        value = node.value
        return lambda env: value

    def _e_Name(self, node: ast.Name, local: frozenset[str]) -> ExprFn:
        name, span, globals_ = node.id, node.span, self.globals
        if name in local:

            def get_local(env: Env) -> Value:
                try:
                    return env[name]
                except KeyError:
                    raise CollError(f"{name!r} is used before it is assigned", span) from None

            return get_local

        def get_global(env: Env) -> Value:
            try:
                return globals_[name]
            except KeyError:
                raise CollError(f"{name!r} is used before its definition is evaluated", span) from None

        return get_global

    def _e_BinOp(self, node: ast.BinOp, local: frozenset[str]) -> ExprFn:
        left, right, op, span = self.expr(node.left, local), self.expr(node.right, local), node.op, node.span
        fast = _FAST_INT_OPS.get(op)
        set_op = _FAST_SET_OPS.get(op)
        if op == "mod":

            def run_mod(env: Env) -> Value:
                a, b = left(env), right(env)
                if type(a) is int and type(b) is int and b > 0:
                    return a % b
                try:
                    return binop(op, a, b)
                except LangError as err:
                    raise CollError(str(err), span) from None

            return run_mod
        if fast is not None:

            def run_fast(env: Env) -> Value:
                a, b = left(env), right(env)
                if type(a) is int and type(b) is int:
                    v = fast(a, b)
                    if -_BOUND <= v < _BOUND:
                        return v
                elif set_op is not None and type(a) is ChunkSet and type(b) is ChunkSet:
                    return ChunkSet(set_op(a.bits, b.bits))
                try:
                    return binop(op, a, b)
                except LangError as err:
                    raise CollError(str(err), span) from None

            return run_fast

        def run(env: Env) -> Value:
            try:
                return binop(op, left(env), right(env))
            except LangError as err:
                raise CollError(str(err), span) from None

        return run

    def _e_UnaryOp(self, node: ast.UnaryOp, local: frozenset[str]) -> ExprFn:
        operand, op, span = self.expr(node.operand, local), node.op, node.span

        def run(env: Env) -> Value:
            try:
                return unop(op, operand(env))
            except LangError as err:
                raise CollError(str(err), span) from None

        return run

    def _e_BoolOp(self, node: ast.BoolOp, local: frozenset[str]) -> ExprFn:
        left, right = self.expr(node.left, local), self.expr(node.right, local)
        lspan, rspan, is_and = node.left.span, node.right.span, node.op == "and"

        def run(env: Env) -> Value:
            a = _bool(left(env), lspan, "operand of and/or")
            if a != is_and:
                return a
            return _bool(right(env), rspan, "operand of and/or")

        return run

    def _e_Compare(self, node: ast.Compare, local: frozenset[str]) -> ExprFn:
        operands = [self.expr(o, local) for o in node.operands]
        ops, span = node.ops, node.span

        def run(env: Env) -> Value:
            a = operands[0](env)
            try:
                for op, fn in zip(ops, operands[1:], strict=True):
                    b = fn(env)
                    if not compare(op, a, b):
                        return False
                    a = b
            except LangError as err:
                raise CollError(str(err), span) from None
            return True

        return run

    def _e_IfExp(self, node: ast.IfExp, local: frozenset[str]) -> ExprFn:
        cond, then, orelse = (self.expr(n, local) for n in (node.cond, node.then, node.orelse))
        cspan = node.cond.span
        return lambda env: then(env) if _bool(cond(env), cspan, "condition") else orelse(env)

    def _e_Index(self, node: ast.Index, local: frozenset[str]) -> ExprFn:
        target, idx, span = self.expr(node.target, local), self.expr(node.index, local), node.span

        def run(env: Env) -> Value:
            try:
                return index(target(env), idx(env))
            except LangError as err:
                raise CollError(str(err), span) from None

        return run

    def _e_SetLit(self, node: ast.SetLit, local: frozenset[str]) -> ExprFn:
        elts, span = [self.expr(e, local) for e in node.elts], node.span

        def run(env: Env) -> Value:
            try:
                return make_set([e(env) for e in elts])
            except LangError as err:
                raise CollError(str(err), span) from None

        return run

    def _e_TupleLit(self, node: ast.TupleLit, local: frozenset[str]) -> ExprFn:
        elts = [self.expr(e, local) for e in node.elts]
        return lambda env: tuple(e(env) for e in elts)

    def _e_Comprehension(self, node: ast.Comprehension, local: frozenset[str]) -> ExprFn:
        inner = local | {node.var}
        elt, it = self.expr(node.elt, inner), self.expr(node.iter, local)
        cond = self.expr(node.cond, inner) if node.cond is not None else None
        var, span, func = node.var, node.span, node.func
        cspan = node.cond.span if node.cond is not None else span
        impl = BUILTINS[func][2] if func != "set" else None
        emitter = self.emitter

        def run(env: Env) -> Value:
            scope = dict(env)
            items: list[Value] = []
            try:
                for v in iterate(it(env), "comprehension"):
                    emitter.spend(1, span)
                    scope[var] = v
                    if cond is not None and not _bool(cond(scope), cspan, "comprehension filter"):
                        continue
                    items.append(elt(scope))
                if impl is None:
                    return make_set(items)
                return impl(tuple(items))
            except LangError as err:
                raise CollError(str(err), span) from None

        return run

    def _e_Call(self, node: ast.Call, local: frozenset[str]) -> ExprFn:
        args = [self.expr(a, local) for a in node.args]
        span = node.span
        if node.func in self.program.fns:
            return self._user_call(node.func, args, span)
        impl = BUILTINS[node.func][2]

        def run(env: Env) -> Value:
            try:
                return impl(*(a(env) for a in args))
            except LangError as err:
                raise CollError(str(err), span) from None

        return run

    def _user_call(self, name: str, args: list[ExprFn], span: Span) -> ExprFn:
        fns = self.fns
        if len(args) == 1:
            (a0,) = args
            return lambda env: fns[name]((a0(env),), span)
        if len(args) == 2:
            a0, a1 = args
            return lambda env: fns[name]((a0(env), a1(env)), span)
        if len(args) == 3:
            a0, a1, a2 = args
            return lambda env: fns[name]((a0(env), a1(env), a2(env)), span)
        if len(args) == 4:
            a0, a1, a2, a3 = args
            return lambda env: fns[name]((a0(env), a1(env), a2(env), a3(env)), span)
        return lambda env: fns[name](tuple([a(env) for a in args]), span)

    # ------------------------------------------------------------ functions
    def _fn(self, fn: ast.Fn) -> Callable[[tuple[Value, ...], Span], Value]:
        local = set(fn.params)
        steps: list[Callable[[Env], None]] = []
        for item in fn.body:
            if isinstance(item, ast.Let):
                steps.append(self._let(item, frozenset(local)))
                local.add(item.name)
            else:
                steps.append(self._assert(item, frozenset(local)))
        result = self.expr(fn.result, frozenset(local))
        memo: dict[tuple[object, ...], Value] = {}
        params, name, emitter = fn.params, fn.name, self.emitter

        def call(args: tuple[Value, ...], span: Span) -> Value:
            value = memo.get(args, _MISSING)
            if value is not _MISSING:
                return value
            if emitter.depth >= MAX_CALL_DEPTH:
                raise CollError(f"recursion deeper than {MAX_CALL_DEPTH} calls in {name}()", span)
            emitter.depth += 1
            env = dict(zip(params, args, strict=False))
            try:
                for step in steps:
                    step(env)
                value = result(env)
            except CollError as err:
                if err.span is not None and err.span.file != span.file:
                    err.notes = (*err.notes, f"in {name}() called from {span}")
                raise
            emitter.depth -= 1  # left unbalanced on error: an error ends the elaboration
            memo[args] = value
            return value

        return call

    def _proc(self, proc: ast.Proc) -> Callable[[tuple[Value, ...], Span], None]:
        body_holder: list[Callable[[Env], None]] = []
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
    def block(self, body: tuple[ast.Stmt, ...], local: frozenset[str]) -> Callable[[Env], None]:
        stmts = [self.stmt(s, local) for s in body]

        def run(env: Env) -> None:
            for s in stmts:
                s(env)

        return run

    def stmt(self, node: ast.Stmt, local: frozenset[str]) -> Callable[[Env], None]:
        method = getattr(self, "_s_" + type(node).__name__)
        return method(node, local)  # type: ignore[no-any-return]

    def _let(self, node: ast.Let, local: frozenset[str]) -> Callable[[Env], None]:
        value, name = self.expr(node.value, local), node.name

        def run(env: Env) -> None:
            env[name] = value(env)

        return run

    _s_Let = _let

    def _assert(self, node: ast.Assert, local: frozenset[str]) -> Callable[[Env], None]:
        cond, span = self.expr(node.cond, local), node.span
        text = node.message or _source_text(self.program, node.cond.span)

        def run(env: Env) -> None:
            if not _bool(cond(env), span, "assertion"):
                where = f" at rank {env['rank']}" if "rank" in env else ""
                raise CollError(f"assertion failed{where}: {text}", span)

        return run

    _s_Assert = _assert

    def _s_Pass(self, node: ast.Pass, local: frozenset[str]) -> Callable[[Env], None]:
        return lambda env: None

    def _s_For(self, node: ast.For, local: frozenset[str]) -> Callable[[Env], None]:
        it, body = self.expr(node.iter, local), self.block(node.body, local)
        var, span, is_step, emitter = node.var, node.span, node.is_step, self.emitter
        ispan = node.iter.span

        def run(env: Env) -> None:
            try:
                values = iterate(it(env), "for loop")
            except LangError as err:
                raise CollError(str(err), ispan) from None
            for v in values:
                emitter.spend(1, span)
                env[var] = v
                if is_step:
                    emitter.open_step(span)
                    body(env)
                    emitter.close_step()
                else:
                    body(env)

        return run

    def _s_If(self, node: ast.If, local: frozenset[str]) -> Callable[[Env], None]:
        branches = [(self.expr(c, local), self.block(b, local), c.span) for c, b in node.branches]
        orelse = self.block(node.orelse, local)

        def run(env: Env) -> None:
            for cond, body, cspan in branches:
                if _bool(cond(env), cspan, "condition"):
                    body(env)
                    return
            orelse(env)

        return run

    def _s_StepBlock(self, node: ast.StepBlock, local: frozenset[str]) -> Callable[[Env], None]:
        body, span, emitter = self.block(node.body, local), node.span, self.emitter

        def run(env: Env) -> None:
            emitter.open_step(span)
            body(env)
            emitter.close_step()

        return run

    def _s_Send(self, node: ast.Send, local: frozenset[str]) -> Callable[[Env], None]:
        chunks, peer, span, emitter = (
            self.expr(node.chunks, local),
            self.expr(node.peer, local),
            node.span,
            self.emitter,
        )
        return lambda env: emitter.emit(OpKind.SEND, peer(env), chunks(env), None, span)

    def _s_Recv(self, node: ast.Recv, local: frozenset[str]) -> Callable[[Env], None]:
        chunks, peer, span, emitter = (
            self.expr(node.chunks, local),
            self.expr(node.peer, local),
            node.span,
            self.emitter,
        )
        action = Action(node.action)
        return lambda env: emitter.emit(OpKind.RECV, peer(env), chunks(env), action, span)

    def _s_Exchange(self, node: ast.Exchange, local: frozenset[str]) -> Callable[[Env], None]:
        peer = self.expr(node.peer, local)
        send, recv = self.expr(node.send, local), self.expr(node.recv, local)
        action, emitter = Action(node.action), self.emitter
        span, send_span, recv_span, peer_span = node.span, node.send_span, node.recv_span, node.peer.span

        def run(env: Env) -> None:
            q = peer(env)
            outer = emitter.in_step is None
            if outer:
                emitter.open_step(span)
            emitter.emit(OpKind.SEND, q, send(env), None, send_span, peer_span)
            emitter.emit(OpKind.RECV, q, recv(env), action, recv_span, peer_span)
            if outer:
                emitter.close_step()

        return run

    def _s_Do(self, node: ast.Do, local: frozenset[str]) -> Callable[[Env], None]:
        args, span, procs, name = [self.expr(a, local) for a in node.args], node.span, self.procs, node.proc
        return lambda env: procs[name](tuple(a(env) for a in args), span)


def _bool(v: Value, span: Span, what: str) -> bool:
    try:
        return as_bool(v, what)
    except LangError as err:
        raise CollError(str(err), span) from None


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
    try:
        return _elaborate(program, values)
    except RecursionError:
        raise CollError("the program recurses too deeply to evaluate", program.header.span) from None
    finally:
        sys.setrecursionlimit(old_limit)


def constants(program: Program, values: Mapping[str, ParamValue]) -> dict[str, Value]:
    """The parameters and global constants of an instance (no phases are run)."""
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 20 * MAX_CALL_DEPTH + 2000))
    try:
        _, globals_, _ = _globals(program, values)
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
    )


__all__ = ["MAX_CHUNKS", "MAX_RANKS", "ChunkSet", "bind_params", "constants", "elaborate"]
