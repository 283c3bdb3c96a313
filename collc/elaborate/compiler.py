"""The compiler of one instance: `_Compiler` turns AST nodes into Python functions.

It folds constant sub-expressions, compiles comparison chains and
comprehensions as closures, functions (memoised per instance, compiled at
their first call and again once all the globals are known) and procedures
(compiled lazily), and the failure of an assertion.  The source of each
function is written by `collc.elaborate.stmt_code._Code`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from collc.diagnostics import CollError
from collc.elaborate.codec_ops import codec_table
from collc.elaborate.emitter import MAX_CALL_DEPTH, _Emitter
from collc.elaborate.expr_code import _FOLDABLE_BUILTINS, _FOLDABLE_NODES
from collc.elaborate.scope import _MISSING, Env, ExprFn, Scope, StmtFn, _bool, _is_local, _Slots
from collc.elaborate.stmt_code import _Code
from collc.elaborate.syntax import _assigned, _check_literals, _children, _source_text
from collc.frontend import ast
from collc.frontend.program import Program
from collc.ir import Span
from collc.values import BUILTINS, LangError, Value, compare, iterate, make_set


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
        self.groups: dict[int, _Compiler] = {}  # group size -> the compiler of `do ... on` groups of that size
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

    def group_compiler(self, size: int) -> _Compiler:
        """The compiler of procedures run on a group of ``size`` ranks: p is ``size`` there, the other globals
        keep their values."""
        sub = self.groups.get(size)
        if sub is None:
            sub = self.groups[size] = _Compiler(self.program, {**self.globals, "p": size}, self.emitter)
            sub.specialise()
        return sub

    def release(self) -> None:
        """Drop the compiled code and the memos now: they refer to one another (a cycle for the collector)."""
        for sub in self.groups.values():
            sub.release()
        self.groups.clear()
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

    def fold_failed(self, node: ast.Expr, local: Scope) -> bool:
        """Whether ``node`` is a constant whose evaluation failed when `constant` tried it."""
        return self.folded.get((id(node), len(self.globals)), self) is _MISSING

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
        span, func = node.span, node.func
        scopes, keys = [local], []  # the scope each clause's iterable sees, and where its variable lives
        for clause in node.clauses:
            inner = scopes[-1]
            if isinstance(inner, _Slots):
                inner, slot = inner.bind(clause.var)
                keys.append(slot)  # a position of its own in the function's environment
            else:
                inner = inner | {clause.var}
                keys.append(clause.var)
            scopes.append(inner)
        slots = isinstance(local, _Slots)
        elt = self.expr(node.elt, scopes[-1])  # (compiled in this order, for which compile error comes first)
        clauses = []
        for i, clause in enumerate(node.clauses):
            it = self.expr(clause.iter, scopes[i])
            conds = tuple((self.expr(c, scopes[i + 1]), c.span) for c in clause.conds)
            clauses.append((it, keys[i], conds))
        impl = BUILTINS[func][2] if func != "set" else None
        emitter = self.emitter
        last = len(clauses) - 1

        def fill(scope: Any, depth: int, items: list[Value]) -> None:
            """The items of clause ``depth`` and of the clauses nested in it, in order."""
            it, key, conds = clauses[depth]
            for v in iterate(it(scope), "comprehension"):
                left = emitter.iterations_left - 1
                emitter.iterations_left = left
                if left < 0:
                    emitter.spend(0, span)
                scope[key] = v
                for cond, cspan in conds:
                    if not _bool(cond(scope), cspan, "comprehension filter"):
                        break
                else:
                    if depth == last:
                        items.append(elt(scope))
                    else:
                        fill(scope, depth + 1, items)

        def fill_one(scope: Any, depth: int, items: list[Value]) -> None:
            """`fill` for the common comprehension: one clause, at most one condition."""
            it, key, conds = clauses[0]
            cond, cspan = conds[0] if conds else (None, span)
            for v in iterate(it(scope), "comprehension"):
                left = emitter.iterations_left - 1
                emitter.iterations_left = left
                if left < 0:
                    emitter.spend(0, span)
                scope[key] = v
                if cond is not None and not _bool(cond(scope), cspan, "comprehension filter"):
                    continue
                items.append(elt(scope))

        run_clauses = fill_one if last == 0 and len(clauses[0][2]) <= 1 else fill

        def run(env: Any) -> Value:
            scope = env if slots else dict(env)  # a dict environment is copied: the variables stay inside
            items: list[Value] = []
            try:
                run_clauses(scope, 0, items)
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
