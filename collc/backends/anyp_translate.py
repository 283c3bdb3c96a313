"""The `.coll` program as C code that computes one rank's ops for any p: the translator of `mpi_c_anyp`.

Every function (``fn``), procedure and phase of the program becomes a C function over the values of
``runtime/collc_anyp.h`` (``cv``: ints, bools, sets, ranges, tuples, with the language's checks), and
the parameters and global constants become an ``instance`` function run once per p.  The C code
follows the elaborator (`collc.elaborate`) construct by construct: the same evaluation order, the
same errors (a message and the ``file:line:col`` it comes from), functions memoised per instance,
steps counted per rank; lanes run as part of their steps, chunk weights are computed per instance.
What the run-time tables do not cover is refused here, with a `CollError` at the construct:
compression points, hierarchies, ``do ... on GROUP``, torus builtins and ``dims`` parameters.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from collc.backends.csource import Sources, c_ident, c_string
from collc.diagnostics import CollError, shorten, source_lines
from collc.frontend import ast
from collc.frontend.program import Program
from collc.ir import ParamValue, Span

__all__ = ["CFunction", "Translation", "refusal", "translate"]

# Binary operators: the character cv_binop takes.
_BINOPS = {
    "+": "+", "-": "-", "*": "*", "/": "/", "//": "f", "%": "%", "mod": "m", "**": "p",
    "<<": "<", ">>": ">", "|": "|", "&": "&", "^": "^", "..": ".",
}  # fmt: skip
_UNOPS = {"-": "-", "+": "+", "~": "~", "not": "n"}
_ONE_ARG = {  # builtin -> C call on (X, a, at)
    "log2": "cv_log2({x}, {a}, {at})",
    "ceil_log2": "cv_ceil_log2({x}, {a}, {at})",
    "is_pow2": "cv_is_pow2({x}, {a}, {at})",
    "abs": "cv_abs({x}, {a}, {at})",
    "popcount": "cv_popcount({x}, {a}, {at})",
    "len": "cv_len({x}, {a}, {at})",
    "sum": "cv_sum_prod({x}, 0, {a}, {at})",
    "prod": "cv_sum_prod({x}, 1, {a}, {at})",
    "union": "cv_union({x}, {a}, {at})",
    "all": "cv_all_any({x}, 0, {a}, {at})",
    "any": "cv_all_any({x}, 1, {a}, {at})",
    "set": 'cv_as_set({x}, {a}, "the argument of set()", {at})',
    "tuple": 'cv_tuple({x}, {a}, "tuple()", {at})',
    "reversed": "cv_reversed({x}, {a}, {at})",
}
_TWO_ARGS = {"shift": "cv_shift({x}, {a}, {b}, {at})", "bitreverse": "cv_bitreverse({x}, {a}, {b}, {at})"}
_VARARGS = {"min": "cv_minmax({x}, 0, {n}, {v}, {at})", "max": "cv_minmax({x}, 1, {n}, {v}, {at})",
            "range": "cv_range({x}, {n}, {v}, {at})"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class CFunction:
    """One generated C function: what it came from (for its comment) and its text."""

    comment: str
    text: str


@dataclass(frozen=True, slots=True)
class Translation:
    """The program in C: its source files (for AT()), globals, functions, procedures, phases and instance."""

    files: tuple[str, ...]
    globals: tuple[str, ...]
    fns: tuple[str, ...]  # the memo index of each function
    prototypes: tuple[str, ...]
    functions: tuple[CFunction, ...]  # fns, procs, phases, in that order
    instance: tuple[str, ...]  # the body of the instance function (globals and checks)
    phases: tuple[str, ...]  # the C names of the phase functions, in order
    chunks_at: str = ""


def refusal(program: Program, params: Mapping[str, ParamValue]) -> CollError | None:
    """The first construct any-p compilation does not support, as an error at it; None when there is none."""
    where = f"any-p compilation ({program.name})"
    if program.hierarchy is not None:
        return CollError(f"{where} does not support a hierarchy (line {program.hierarchy.span.line})",
                         program.hierarchy.span)  # fmt: skip
    for codec in program.codecs.values():
        return CollError(f"{where} does not support compression points (codec {codec.name}, line {codec.span.line})",
                         codec.span)  # fmt: skip
    if program.param("p") is None:
        return CollError(f"{where} needs p as a parameter (param p : int), the communicator's size",
                         program.header.span)  # fmt: skip
    for param in program.params:
        if param.type != "int":
            return CollError(f"{where} does not support {param.type} parameters ({param.name}, line {param.span.line})",
                             param.span)  # fmt: skip
        if param.name != "p" and param.name not in params and param.default is None:
            return CollError(f"{where}: parameter {param.name} needs a value at compile time (--param "
                             f"{param.name}=VALUE): only p comes from the communicator", param.span)  # fmt: skip
    for name in params:
        if name == "p":
            return CollError(f"{where} takes p from the communicator: give no value for p", program.header.span)
    bodies: list[ast.Stmt] = [s for ph in program.phases for s in ph.body]
    bodies += [s for proc in program.procs.values() for s in proc.body]
    for node in _walk_stmts(bodies):
        problem = _unsupported_stmt(node)
        if problem is not None:
            return CollError(f"{where} does not support {problem} (line {node.span.line})", node.span)
    return None


def _unsupported_stmt(node: ast.Stmt) -> str | None:
    if isinstance(node, ast.Compress | ast.Decompress):
        return "compression points"
    if isinstance(node, ast.Send | ast.Recv) and node.codec is not None:
        return "compression points"
    if isinstance(node, ast.Exchange) and (node.send_codec or node.recv_codec):
        return "compression points"
    if isinstance(node, ast.Do) and node.group is not None:
        return "do ... on GROUP"
    return None


def _walk_stmts(body: list[ast.Stmt] | tuple[ast.Stmt, ...]) -> Iterator[ast.Stmt]:
    for s in body:
        yield s
        if isinstance(s, ast.For | ast.StepBlock | ast.Lane):
            yield from _walk_stmts(s.body)
        elif isinstance(s, ast.If):
            for _, b in s.branches:
                yield from _walk_stmts(b)
            yield from _walk_stmts(s.orelse)


@dataclass
class _Scope:
    """Names visible to the code being written: name -> (C expression, checked on read)."""

    names: dict[str, tuple[str, bool]] = field(default_factory=dict)

    def with_(self, name: str, c: str, checked: bool = False) -> _Scope:
        return _Scope({**self.names, name: (c, checked)})


class _Writer:
    """Writes the C code of one program (`translate`)."""

    def __init__(self, program: Program, params: Mapping[str, ParamValue], sources: Sources) -> None:
        self.program = program
        self.params = params
        self.sources = sources
        self.files: dict[str, int] = {}
        self.globals = list(dict.fromkeys([p.name for p in program.params] + [let.name for let in program.lets]))
        self.fns = sorted(program.fns)
        self.temps = 0
        self.lines: list[str] = []
        self.indent = 1

    # ------------------------------------------------------------ helpers
    def at(self, span: Span) -> str:
        f = self.files.setdefault(span.file, len(self.files))
        return f"AT({f}, {span.line}, {span.column})"

    def temp(self, stem: str) -> str:
        self.temps += 1
        return f"{stem}{self.temps}"

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    @contextmanager
    def block(self, head: str) -> Iterator[None]:
        self.line(f"{head} {{" if head else "{")
        self.indent += 1
        yield
        self.indent -= 1
        self.line("}")

    def where(self, span: Span) -> str:
        label = self.sources.label(span.file)
        return f"{label}:{span.line}: {self.sources.text(span.file, span.line)}".replace("*/", "* /")

    def text(self, span: Span) -> str:
        return c_string(_source_text(self.program, span))

    # ------------------------------------------------------------ expressions
    def expr(self, node: ast.Expr, scope: _Scope) -> str:
        return getattr(self, "_" + type(node).__name__)(node, scope)  # type: ignore[no-any-return]

    def _Num(self, node: ast.Num, scope: _Scope) -> str:
        return f"cv_int(INT64_C({node.value}))"

    def _Bool(self, node: ast.Bool, scope: _Scope) -> str:
        return f"cv_bool({int(node.value)})"

    def _Name(self, node: ast.Name, scope: _Scope) -> str:
        if node.id in scope.names:
            c, checked = scope.names[node.id]
            return f'collc_av_local(X, {c}, "{node.id}", {self.at(node.span)})' if checked else c
        if node.id in self.globals:
            return f"collc_av_global(X, G_{c_ident(node.id)}, {self.at(node.span)})"
        raise CollError(f"any-p compilation: the name {node.id!r} is not defined here", node.span)

    def _BinOp(self, node: ast.BinOp, scope: _Scope) -> str:
        a, b = self.expr(node.left, scope), self.expr(node.right, scope)
        return f"cv_binop(X, '{_BINOPS[node.op]}', \"{node.op}\", {a}, {b}, {self.at(node.span)})"

    def _UnaryOp(self, node: ast.UnaryOp, scope: _Scope) -> str:
        return f"cv_unop(X, '{_UNOPS[node.op]}', {self.expr(node.operand, scope)}, {self.at(node.span)})"

    def _BoolOp(self, node: ast.BoolOp, scope: _Scope) -> str:
        a = f'cv_test(X, {self.expr(node.left, scope)}, "operand of and/or", {self.at(node.left.span)})'
        b = f'cv_boolv(X, {self.expr(node.right, scope)}, "operand of and/or", {self.at(node.right.span)})'
        return f"({a} ? {b} : cv_bool(0))" if node.op == "and" else f"({a} ? cv_bool(1) : {b})"

    def _Compare(self, node: ast.Compare, scope: _Scope) -> str:
        at = self.at(node.span)
        operands = [self.expr(o, scope) for o in node.operands]
        if len(node.ops) == 1:
            return f'cv_bool(cv_compare(X, "{node.ops[0]}", {operands[0]}, {operands[1]}, {at}))'
        names = [self.temp("o") for _ in operands]
        r = self.temp("r")
        text = f"cv {names[0]} = {operands[0]}, {names[1]} = {operands[1]}; "
        text += f'int {r} = cv_compare(X, "{node.ops[0]}", {names[0]}, {names[1]}, {at}); '
        for k in range(1, len(node.ops)):
            text += f"if ({r}) {{ cv {names[k + 1]} = {operands[k + 1]}; "
            text += f'{r} = cv_compare(X, "{node.ops[k]}", {names[k]}, {names[k + 1]}, {at}); '
        text += "} " * (len(node.ops) - 1)
        return f"({{ {text}cv_bool({r}); }})"

    def _IfExp(self, node: ast.IfExp, scope: _Scope) -> str:
        c = f'cv_test(X, {self.expr(node.cond, scope)}, "condition", {self.at(node.cond.span)})'
        return f"({c} ? {self.expr(node.then, scope)} : {self.expr(node.orelse, scope)})"

    def _Index(self, node: ast.Index, scope: _Scope) -> str:
        t, i = self.expr(node.target, scope), self.expr(node.index, scope)
        return f"cv_index(X, {t}, {i}, {self.at(node.span)})"

    def _collect(self, elts: tuple[ast.Expr, ...], scope: _Scope, finish: str) -> str:
        lst = self.temp("l")
        pushes = "".join(f"cv_push(X, &{lst}, {self.expr(e, scope)}); " for e in elts)
        return f"({{ struct cv_list {lst} = {{NULL, 0, 0}}; {pushes}{finish.format(l=lst)}; }})"

    def _SetLit(self, node: ast.SetLit, scope: _Scope) -> str:
        if not node.elts:
            return "cv_interval(X, 0, 0)"
        return self._collect(node.elts, scope, f"cv_make_set(X, &{{l}}, {self.at(node.span)})")

    def _TupleLit(self, node: ast.TupleLit, scope: _Scope) -> str:
        return self._collect(node.elts, scope, "cv_tuple_of(&{l})")

    def _Call(self, node: ast.Call, scope: _Scope) -> str:
        args = [self.expr(a, scope) for a in node.args]
        at = self.at(node.span)
        if node.func in self.program.fns:
            return f"fn_{c_ident(node.func)}(X, {at}{''.join(', ' + a for a in args)})"
        if node.func in _ONE_ARG and len(args) == 1:
            return _ONE_ARG[node.func].format(x="X", a=args[0], at=at)
        if node.func in _TWO_ARGS and len(args) == 2:
            return _TWO_ARGS[node.func].format(x="X", a=args[0], b=args[1], at=at)
        if node.func in _VARARGS:
            v = self.temp("v")
            call = _VARARGS[node.func].format(x="X", n=len(args), v=v, at=at)
            return f"({{ cv {v}[] = {{{', '.join(args)}}}; {call}; }})"
        raise CollError(f"any-p compilation does not support the builtin {node.func}() (line {node.span.line})",
                        node.span)  # fmt: skip

    def _Comprehension(self, node: ast.Comprehension, scope: _Scope) -> str:
        at, lst = self.at(node.span), self.temp("l")
        parts = [f"struct cv_list {lst} = {{NULL, 0, 0}};"]
        inner = scope
        for clause in node.clauses:
            it, var = self.temp("it"), self.temp(f"c_{c_ident(clause.var)}_")
            parts.append(f"struct cv_iter {it}; cv {var};")
            parts.append(f'cv_iter_begin(X, &{it}, {self.expr(clause.iter, inner)}, "comprehension", {at});')
            parts.append(f"while (cv_iter_next(&{it}, &{var})) {{ collc_av_spend(X, {at});")
            inner = inner.with_(clause.var, var)
            for cond in clause.conds:
                test = f'cv_test(X, {self.expr(cond, inner)}, "comprehension filter", {self.at(cond.span)})'
                parts.append(f"if (!{test}) continue;")
        parts.append(f"cv_push(X, &{lst}, {self.expr(node.elt, inner)});" + " }" * len(node.clauses))
        if node.func == "set":
            parts.append(f"cv_make_set(X, &{lst}, {at});")
        elif node.func in ("min", "max"):
            t = self.temp("t")
            parts.append(f"cv {t} = cv_tuple_of(&{lst}); cv_minmax(X, {int(node.func == 'max')}, 1, &{t}, {at});")
        elif node.func in _ONE_ARG:
            parts.append(_ONE_ARG[node.func].format(x="X", a=f"cv_tuple_of(&{lst})", at=at) + ";")
        else:
            raise CollError(f"any-p compilation does not support {node.func}() of a comprehension", node.span)
        return "({ " + " ".join(parts) + " })"

    # ------------------------------------------------------------ statements
    def stmts(self, body: tuple[ast.Stmt, ...], scope: _Scope) -> None:
        for s in body:
            getattr(self, "_s_" + type(s).__name__)(s, scope)

    def _s_Let(self, node: ast.Let, scope: _Scope) -> None:
        self.line(f"{scope.names[node.name][0]} = {self.expr(node.value, scope)};")

    def _s_Assert(self, node: ast.Assert, scope: _Scope, rank: bool = True) -> None:
        at = self.at(node.span)
        text = c_string(node.message) if node.message is not None else self.text(node.cond.span)
        with self.block(f'if (!cv_test(X, {self.expr(node.cond, scope)}, "assertion", {at}))'):
            if rank:
                self.line(f'collc_av_fail(X, {at}, "assertion failed at rank %d: %s", X->rank, {text});')
            else:
                self.line(f'collc_av_fail(X, {at}, "assertion failed: %s", {text});')

    def _s_Pass(self, node: ast.Pass, scope: _Scope) -> None:
        self.line("/* pass */")

    def _s_For(self, node: ast.For, scope: _Scope) -> None:
        it, at = self.temp("it"), self.at(node.span)
        self.line(f"/* {self.where(node.span)} */")
        with self.block(""):
            self.line(f"struct cv_iter {it};")
            self.line(f'cv_iter_begin(X, &{it}, {self.expr(node.iter, scope)}, "for loop", {self.at(node.iter.span)});')
            with self.block(f"while (cv_iter_next(&{it}, &{scope.names[node.var][0]}))"):
                self.line(f"collc_av_spend(X, {at});")
                if node.is_step:
                    self.line(f"collc_av_open_step(X, {at});")
                self.stmts(node.body, scope)
                if node.is_step:
                    self.line("collc_av_close_step(X);")

    def _s_If(self, node: ast.If, scope: _Scope) -> None:
        for k, (cond, body) in enumerate(node.branches):
            test = f'cv_test(X, {self.expr(cond, scope)}, "condition", {self.at(cond.span)})'
            self.line(f"{'if' if k == 0 else '} else if'} ({test}) {{")
            self.indent += 1
            self.stmts(body, scope)
            self.indent -= 1
        if node.orelse:
            self.line("} else {")
            self.indent += 1
            self.stmts(node.orelse, scope)
            self.indent -= 1
        self.line("}")

    def _s_StepBlock(self, node: ast.StepBlock, scope: _Scope) -> None:
        self.line(f"/* {self.where(node.span)} */")
        self.line(f"collc_av_open_step(X, {self.at(node.span)});")
        self.stmts(node.body, scope)
        self.line("collc_av_close_step(X);")

    def _s_Lane(self, node: ast.Lane, scope: _Scope) -> None:
        """A lane only says which steps may overlap (the verifier's concern): its value is checked as the
        elaborator checks it, and its body runs as part of the step."""
        self.line(f"/* {self.where(node.span)} */")
        self.line(f"collc_av_enter_lane(X, {self.expr(node.lane, scope)}, {self.at(node.lane.span)});")
        self.stmts(node.body, scope)
        self.line("collc_av_leave_lane(X);")

    def _op(self, kind: str, peer: ast.Expr, chunks: ast.Expr, span: Span, scope: _Scope) -> None:
        self.line(f"/* {self.where(span)} */")
        with self.block(""):
            self.line(f"cv peer = {self.expr(peer, scope)};")
            self.line(f"cv chunks = {self.expr(chunks, scope)};")
            self.line(f"collc_av_emit(X, {kind}, peer, chunks, {self.at(span)}, -1);")

    def _s_Send(self, node: ast.Send, scope: _Scope) -> None:
        self._op("0", node.peer, node.chunks, node.span, scope)

    def _s_Recv(self, node: ast.Recv, scope: _Scope) -> None:
        self._op("1" if node.action == "copy" else "2", node.peer, node.chunks, node.span, scope)

    def _s_Exchange(self, node: ast.Exchange, scope: _Scope) -> None:
        self.line(f"/* {self.where(node.span)} */")
        peer_at = self.at(node.peer.span)
        with self.block(""):
            self.line(f"cv peer = {self.expr(node.peer, scope)};")
            self.line("int own = X->in_step < 0;")
            self.line(f"if (own) collc_av_open_step(X, {self.at(node.span)});")
            send = self.expr(node.send, scope)
            self.line(f"collc_av_emit(X, 0, peer, {send}, {self.at(node.send_span)}, {peer_at});")
            kind = "1" if node.action == "copy" else "2"
            recv = self.expr(node.recv, scope)
            self.line(f"collc_av_emit(X, {kind}, peer, {recv}, {self.at(node.recv_span)}, {peer_at});")
            self.line("if (own) collc_av_close_step(X);")

    def _s_Do(self, node: ast.Do, scope: _Scope) -> None:
        self.line(f"/* {self.where(node.span)} */")
        with self.block(""):
            names = []
            for a in node.args:
                names.append(self.temp("arg"))
                self.line(f"cv {names[-1]} = {self.expr(a, scope)};")
            call_args = "".join(", " + n for n in names)
            self.line(f"proc_{c_ident(node.proc)}(X, {self.at(node.span)}{call_args});")

    # ------------------------------------------------------------ definitions
    def take(self) -> str:
        text, self.lines = "\n".join(self.lines), []
        return text

    def locals_of(self, names: set[str] | list[str]) -> _Scope:
        scope = _Scope()
        for name in sorted(names):
            scope = scope.with_(name, f"l_{c_ident(name)}", True)
        return scope

    def fn(self, fn: ast.Fn) -> CFunction:
        ident, n = c_ident(fn.name), len(fn.params)
        scope = _Scope({name: (f"a_{c_ident(name)}", False) for name in fn.params})
        params = "".join(f", cv a_{c_ident(name)}" for name in fn.params)
        signature = f"static cv fn_{ident}(struct collc_av *X, int64_t at{params})"
        self.indent = 1
        self.line(f"cv args[{max(n, 1)}] = {{{', '.join(f'a_{c_ident(x)}' for x in fn.params) or 'CV_NONE'}}};")
        self.line(f"const cv *hit = collc_av_memo_get(X, F_{ident}, {n}, args);")
        self.line("cv result;")
        self.line("if (hit != NULL) return *hit;")
        self.line(f'collc_av_enter(X, "{fn.name}", at);')
        for item in fn.body:
            if isinstance(item, ast.Let):
                var = self.temp(f"v_{c_ident(item.name)}_")
                self.line(f"cv {var} = {self.expr(item.value, scope)};")
                self.line(f"(void){var};")
                scope = scope.with_(item.name, var)
            else:
                self._s_Assert(item, scope, rank=False)
        self.line(f"result = {self.expr(fn.result, scope)};")
        self.line("collc_av_leave(X);")
        self.line(f"return collc_av_memo_put(X, F_{ident}, {n}, args, result);")
        body = self.take()
        comment = f"fn {fn.name}({', '.join(fn.params)})  ({self.sources.label(fn.span.file)}:{fn.span.line})"
        return CFunction(comment, f"{signature}\n{{\n{body}\n}}")

    def proc(self, proc: ast.Proc) -> CFunction:
        ident = c_ident(proc.name)
        params = "".join(f", cv a_{c_ident(name)}" for name in proc.params)
        signature = f"static void proc_{ident}(struct collc_av *X, int64_t at{params})"
        names = {*proc.params, *_assigned(proc.body)}
        scope = self.locals_of(names).with_("rank", "cv_int(X->rank)")
        self.indent = 1
        for name in sorted(names):
            init = f"a_{c_ident(name)}" if name in proc.params else "CV_NONE"
            self.line(f"cv l_{c_ident(name)} = {init};")
            self.line(f"(void)l_{c_ident(name)};")
        self.line(f'collc_av_enter(X, "{proc.name}", at);')
        self.stmts(proc.body, scope)
        self.line("collc_av_leave(X);")
        body = self.take()
        comment = f"proc {proc.name}({', '.join(proc.params)})  ({self.sources.label(proc.span.file)}:{proc.span.line})"
        return CFunction(comment, f"{signature}\n{{\n{body}\n}}")

    def phase(self, phase: ast.Phase, ident: str) -> CFunction:
        names = _assigned(phase.body)
        scope = self.locals_of(names).with_("rank", "cv_int(X->rank)")
        self.indent = 1
        for name in sorted(names):
            self.line(f"cv l_{c_ident(name)} = CV_NONE;")
            self.line(f"(void)l_{c_ident(name)};")
        self.stmts(phase.body, scope)
        if not phase.body:
            self.line("(void)X;")
        body = self.take()
        comment = f"phase {phase.name}  ({self.sources.label(phase.span.file)}:{phase.span.line})"
        return CFunction(comment, f"static void phase_{ident}(struct collc_av *X)\n{{\n{body}\n}}")

    def instance(self) -> tuple[str, ...]:
        """The parameters, constraints, constants, assertions and checks of an instance of p ranks."""
        program, scope = self.program, _Scope()
        self.indent = 1
        for param in program.params:
            g = f"X->glob[G_{c_ident(param.name)}]"
            if param.name == "p":
                self.line(f"{g} = cv_int(X->p); /* {self.where(param.span)} */")
            elif param.name in self.params:
                value = self.params[param.name]
                self.line(f"{g} = cv_int(INT64_C({value})); /* {param.name}={value}, given at compile time */")
            else:
                assert param.default is not None  # refusal() checked
                self.line(f"{g} = {self.expr(param.default, scope)}; /* {self.where(param.span)} */")
        for param in program.params:
            if param.constraint is None:
                continue
            g = f"X->glob[G_{c_ident(param.name)}]"
            for part in _conjuncts(param.constraint):
                at = self.at(part.span)
                test = f'cv_test(X, {self.expr(part, scope)}, "constraint", {at})'
                with self.block(f"if (!{test})"):
                    self.line(f'collc_av_fail(X, {at}, "{param.name}=%lld violates the constraint %s", '
                              f"(long long){g}.a, {self.text(part.span)});")  # fmt: skip
        pspan = self.at((program.param("p") or program.header).span)
        with self.block("if (X->p > COLLC_AV_MAX_RANKS)"):
            self.line(f'collc_av_fail(X, {pspan}, "p=%d is out of the supported range 1..%d", X->p, '
                      "COLLC_AV_MAX_RANKS);")  # fmt: skip
        for let in program.lets:
            self.line(f"/* {self.where(let.span)} */")
            self.line(f"X->glob[G_{c_ident(let.name)}] = {self.expr(let.value, scope)};")
        for node in program.asserts:
            self._s_Assert(node, scope, rank=False)
        chunks = self.expr(program.chunks.count, scope)
        root = "X->glob[G_root]" if program.collective.has_root and "root" in self.globals else "cv_int(0)"
        root_at = self.at((program.param("root") or program.header).span)
        coll = f"COLLC_COLL_{program.collective.name}"
        self.line(f"collc_av_check_instance(X, {coll}, {chunks}, {self.at(program.chunks.span)});")
        weight = program.chunks.weight
        if weight is not None:
            self.line(f"/* {self.where(weight.span)}: each chunk's weight */")
            with self.block(""):
                self.line("cv w_c = CV_NONE;")
                with self.block("for (int c = 0; c < X->nchunks; c++)"):
                    self.line("w_c = cv_int(c);")
                    self.line("(void)w_c;")
                    value = self.expr(weight.value, scope.with_(weight.var, "w_c"))
                    self.line(f"collc_av_chunk_weight(X, c, {value}, {self.at(weight.value.span)});")
        self.line(f"collc_av_check_root(X, {coll}, {root}, {root_at});")
        return tuple(self.take().split("\n"))


def _assigned(body: tuple[ast.Stmt, ...]) -> set[str]:
    """Names a statement list may assign (lets and loop variables, at any depth), as the elaborator finds them."""
    return {s.name if isinstance(s, ast.Let) else s.var for s in _walk_stmts(body) if isinstance(s, ast.Let | ast.For)}


def _source_text(program: Program, span: Span) -> str:
    """The text at ``span`` on its line (a condition, for messages)."""
    lines = source_lines(program.sources.get(span.file, ""))
    if not 1 <= span.line <= len(lines):
        return "<condition>"
    line = lines[span.line - 1]
    end = span.end_column - 1 if span.end_line == span.line else len(line)
    return shorten(line[span.column - 1 : end].strip(), 100) or "<condition>"


def _conjuncts(node: ast.Expr) -> list[ast.Expr]:
    if isinstance(node, ast.BoolOp) and node.op == "and":
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _calls(nodes: list[object]) -> Iterator[tuple[str, str]]:
    """("fn", name) and ("proc", name) of every call and ``do`` in the AST nodes, at any depth."""
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            yield "fn", node.func
        elif isinstance(node, ast.Do):
            yield "proc", node.proc
        if isinstance(node, tuple | list):
            stack.extend(node)
        elif hasattr(node, "__dataclass_fields__"):
            stack.extend(getattr(node, name) for name in node.__dataclass_fields__ if name != "span")


def reachable(program: Program) -> tuple[list[str], list[str]]:
    """The functions and procedures an instance can run: called from the phases, the parameters, the constants,
    the assertions or the chunks, directly or through each other."""
    roots: list[object] = [list(program.phases), list(program.params), list(program.lets), list(program.asserts)]
    roots.append(program.chunks)
    fns: set[str] = set()
    procs: set[str] = set()
    todo = list(_calls(roots))
    while todo:
        kind, name = todo.pop()
        if kind == "fn" and name in program.fns and name not in fns:
            fns.add(name)
            todo.extend(_calls([program.fns[name]]))
        elif kind == "proc" and name in program.procs and name not in procs:
            procs.add(name)
            todo.extend(_calls([program.procs[name]]))
    return sorted(fns), sorted(procs)


def translate(program: Program, params: Mapping[str, ParamValue], sources: Sources) -> Translation:
    """The program's C code, for any p (`refusal` must have found nothing)."""
    w = _Writer(program, params, sources)
    fns, procs = reachable(program)
    w.fns = fns
    functions = [w.fn(program.fns[name]) for name in fns]
    functions += [w.proc(program.procs[name]) for name in procs]
    idents: list[str] = []
    for phase in program.phases:
        ident = c_ident(phase.name)
        while ident in idents:
            ident += "_"
        idents.append(ident)
        functions.append(w.phase(phase, ident))
    instance = w.instance()
    prototypes = [f.text.split("\n", 1)[0] + ";" for f in functions]
    files = tuple(sources.label(f) for f, _ in sorted(w.files.items(), key=lambda kv: kv[1]))
    return Translation(
        files=files,
        globals=tuple(w.globals),
        fns=tuple(w.fns),
        prototypes=tuple(prototypes),
        functions=tuple(functions),
        instance=instance,
        phases=tuple(idents),
    )
