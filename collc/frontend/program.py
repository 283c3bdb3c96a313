"""Load a `.coll` program with its prelude and includes, and check its names statically.

The result, a `Program`, is independent of parameter values: everything that
can be checked without them (syntax, unknown names, arity, misplaced
declarations) is checked here, so that an error shows up whatever ``p`` is.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from collc.codecs import parse_codec
from collc.diagnostics import CollError, shorten
from collc.frontend import ast
from collc.frontend.parse import normalize_line_ends, parse_module
from collc.ir import Collective, Span
from collc.resources import data_dir
from collc.values import BUILTINS, COMPREHENSION_FUNCS

PRELUDE_NAME = "<prelude>"
HIERARCHY_PRELUDE_NAME = "<hierarchy prelude>"
HIERARCHY_NAMES = ("p", "levels")  # the constants a hierarchy declaration defines
PARAM_TYPES = ("int", "dims")
RESERVED = {"rank"}
MAX_INCLUDE_DEPTH = 16
RECURSION_LIMIT = 20000  # parsing and name checking walk trees recursively


@dataclass(frozen=True, slots=True)
class Program:
    """A parsed, name-checked program: the input of elaboration."""

    path: str
    header: ast.Header
    collective: Collective
    params: tuple[ast.Param, ...]
    chunks: ast.Chunks
    lets: tuple[ast.Let, ...]  # global constants, prelude and includes first, in order
    asserts: tuple[ast.Assert, ...]
    fns: dict[str, ast.Fn]
    procs: dict[str, ast.Proc]
    phases: tuple[ast.Phase, ...]
    sources: dict[str, str]  # file name -> text, for error carets
    codecs: dict[str, ast.CodecDecl]  # codec name -> its declaration (spec checked by collc.codecs)
    hierarchy: ast.Hierarchy | None = None  # `hierarchy nodes * local`: defines p and levels

    @property
    def name(self) -> str:
        return self.header.name

    def param(self, name: str) -> ast.Param | None:
        return next((p for p in self.params if p.name == name), None)

    def let(self, name: str) -> ast.Let | None:
        """The global constant ``name`` (``let p = prod(dims)``), if there is one."""
        return next((x for x in self.lets if x.name == name), None)


def load_program(path: str | Path) -> Program:
    """Read, parse and check the program at ``path``."""
    file = str(path)
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise CollError(f"cannot read {file}: {_read_problem(err)}") from None
    return parse_program(text, file)


def _read_problem(err: OSError | UnicodeDecodeError) -> str:
    """Why a file could not be read, in words (no exception class names)."""
    if isinstance(err, UnicodeDecodeError):
        return f"not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start})"
    return (err.strerror or "cannot be read").lower()


def parse_program(text: str, file: str = "<input>") -> Program:
    """Parse and check program text (includes are resolved relative to ``file``).

    A `CollError` raised here carries the texts read so far in ``err.sources``.  CRLF and lone CR line ends
    count as line ends (as they do in a file read from disk).
    """
    text = normalize_line_ends(text)
    sources: dict[str, str] = {file: text}
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, RECURSION_LIMIT))
    try:
        return _parse_program(text, file, sources)
    except CollError as err:
        err.sources = dict(sources)
        raise
    except RecursionError:
        err = CollError(
            "the program is nested too deeply (an expression or block structure thousands of levels deep)",
            Span(file, 1, 1, 1, 2),
        )
        err.sources = dict(sources)
        raise err from None
    finally:
        sys.setrecursionlimit(old_limit)


def _parse_program(text: str, file: str, sources: dict[str, str]) -> Program:
    prelude_text, prelude = _prelude()
    sources[PRELUDE_NAME] = prelude_text
    main = parse_module(text, file)
    modules: list[ast.Module] = [prelude]
    if any(isinstance(d, ast.Hierarchy) for d in main.decls):
        hier_text, hier = _hierarchy_prelude()
        sources[HIERARCHY_PRELUDE_NAME] = hier_text
        modules.append(hier)
    _collect_includes(main, Path(file).parent, sources, modules, [str(Path(file).resolve())], 0)
    modules.append(main)
    return _assemble(main, modules, sources)


@cache
def _prelude() -> tuple[str, ast.Module]:
    """The standard prelude, parsed once per process (it never changes while running)."""
    text = (data_dir("grammar") / "prelude.coll").read_text()
    return text, parse_module(text, PRELUDE_NAME, library=True)


@cache
def _hierarchy_prelude() -> tuple[str, ast.Module]:
    """The helpers of programs that declare a hierarchy (node_of, local_of, ...), parsed once per process."""
    text = (data_dir("grammar") / "hierarchy.coll").read_text()
    return text, parse_module(text, HIERARCHY_PRELUDE_NAME, library=True)


def _collect_includes(
    module: ast.Module,
    base: Path,
    sources: dict[str, str],
    out: list[ast.Module],
    stack: list[str],
    depth: int,
) -> None:
    for decl in module.decls:
        if not isinstance(decl, ast.Include):
            continue
        if "\x00" in decl.path:  # the file system refuses it (Python raises ValueError)
            raise CollError(f"cannot include {shorten(decl.path)!r}: a file name has no NUL character", decl.span)
        target = (base / decl.path).resolve()
        name = str(target)
        if name in stack:
            raise CollError(f"include cycle: {' -> '.join([*stack, name])}", decl.span)
        if depth >= MAX_INCLUDE_DEPTH:
            raise CollError(f"includes nested deeper than {MAX_INCLUDE_DEPTH}", decl.span)
        if name in sources:
            continue  # already included once
        try:
            text = target.read_text()
        except (OSError, UnicodeDecodeError) as err:
            where = f" ({shorten(str(target), 120)})" if isinstance(err, OSError) else ""
            raise CollError(f"cannot include {shorten(decl.path)!r}: {_read_problem(err)}{where}", decl.span) from None
        text = sources[name] = normalize_line_ends(text)
        lib = parse_module(text, name, library=True)
        for d in lib.decls:
            if isinstance(d, ast.Param | ast.Chunks | ast.Phase | ast.CodecDecl | ast.Hierarchy):
                kind = "codec" if isinstance(d, ast.CodecDecl) else type(d).__name__.lower()
                raise CollError(f"an included file may not declare a {kind}", d.span)
        _collect_includes(lib, target.parent, sources, out, [*stack, name], depth + 1)
        out.append(lib)


def _assemble(main: ast.Module, modules: list[ast.Module], sources: dict[str, str]) -> Program:
    header = main.header
    assert header is not None
    try:
        collective = Collective(header.collective)
    except ValueError:
        known = ", ".join(c.value for c in Collective)
        raise CollError(
            f"unknown collective {header.collective!r}; expected one of {known}", header.collective_span
        ) from None

    params: list[ast.Param] = []
    chunks: ast.Chunks | None = None
    lets: list[ast.Let] = []
    asserts: list[ast.Assert] = []
    fns: dict[str, ast.Fn] = {}
    procs: dict[str, ast.Proc] = {}
    phases: list[ast.Phase] = []
    codecs: dict[str, ast.CodecDecl] = {}
    defined: dict[str, Span] = {}  # user-defined value names (params, lets)
    hierarchy: ast.Hierarchy | None = None

    for module in modules:
        is_prelude = module.file in (PRELUDE_NAME, HIERARCHY_PRELUDE_NAME)
        for decl in module.decls:
            if isinstance(decl, ast.Hierarchy):
                if hierarchy is not None:
                    raise CollError(f"the hierarchy is declared twice (first at line {hierarchy.span.line})", decl.span)
                hierarchy = decl
                for name in HIERARCHY_NAMES:
                    _define(defined, name, decl.span, "constant")
            elif isinstance(decl, ast.Param):
                _define(defined, decl.name, decl.span, "parameter")
                if decl.type not in PARAM_TYPES:
                    raise CollError(
                        f"unknown parameter type {decl.type!r}; expected one of {', '.join(PARAM_TYPES)}",
                        decl.type_span,
                    )
                params.append(decl)
            elif isinstance(decl, ast.CodecDecl):
                if decl.name in codecs:
                    first = codecs[decl.name].span.line
                    raise CollError(f"codec {decl.name!r} is declared twice (first at line {first})", decl.span)
                check_codec_spec(decl.spec, decl.spec_span)
                codecs[decl.name] = decl
            elif isinstance(decl, ast.Chunks):
                if chunks is not None:
                    raise CollError(f"the chunking is declared twice (first at line {chunks.span.line})", decl.span)
                chunks = decl
            elif isinstance(decl, ast.Let):
                _define(defined, decl.name, decl.span, "constant")
                lets.append(decl)
            elif isinstance(decl, ast.Fn):
                _check_new_callable(decl.name, decl.span, fns, procs, is_prelude)
                fns[decl.name] = decl
            elif isinstance(decl, ast.Proc):
                _check_new_callable(decl.name, decl.span, fns, procs, is_prelude)
                procs[decl.name] = decl
            elif isinstance(decl, ast.Phase):
                if any(ph.name == decl.name for ph in phases):
                    raise CollError(f"phase {decl.name!r} is defined twice", decl.span)
                phases.append(decl)
            elif isinstance(decl, ast.Assert):
                asserts.append(decl)
    if hierarchy is not None:
        _check_levels(hierarchy, params)
    if chunks is None:
        raise CollError("the program does not declare its chunking (e.g. 'chunks p')", header.span)
    if "p" not in defined:
        raise CollError(
            "the program does not define p, the number of ranks ('param p : int' or 'let p = ...')", header.span
        )

    program = Program(
        path=main.file,
        header=header,
        collective=collective,
        params=tuple(params),
        chunks=chunks,
        lets=tuple(lets),
        asserts=tuple(asserts),
        fns=fns,
        procs=procs,
        phases=tuple(phases),
        sources=sources,
        codecs=codecs,
        hierarchy=hierarchy,
    )
    if collective.has_root and "root" not in defined:
        raise CollError(
            f"a {collective.value} needs a root: declare 'param root : int = 0 where 0 <= root < p'", header.span
        )
    _Resolver(program).check()
    return program


def _check_levels(hierarchy: ast.Hierarchy, params: list[ast.Param]) -> None:
    """Every level of a hierarchy names an int parameter (its value is checked per instance)."""
    declared = {p.name: p for p in params}
    for level in hierarchy.levels:
        param = declared.get(level.id)
        if param is None:
            raise CollError(
                f"hierarchy level {level.id!r} is not a parameter; declare it: param {level.id} : int where "
                f"{level.id} >= 1",
                level.span,
            )
        if param.type != "int":
            raise CollError(f"hierarchy level {level.id!r} must be an int parameter, not {param.type}", level.span)


def check_codec_spec(spec: str, span: Span | None) -> str:
    """The canonical spelling of a codec spec; a bad spec is an error at ``span``."""
    try:
        return parse_codec(spec).spec
    except (ValueError, TypeError) as err:
        raise CollError(f"bad codec spec {shorten(spec)!r}: {err}", span) from None


def _define(defined: dict[str, Span], name: str, span: Span, what: str) -> None:
    if name in RESERVED:
        raise CollError(f"{name!r} is reserved (the current rank) and cannot be a {what}", span)
    if name in defined:
        raise CollError(f"{name!r} is defined twice (first at line {defined[name].line})", span)
    defined[name] = span


def _check_new_callable(
    name: str, span: Span, fns: dict[str, ast.Fn], procs: dict[str, ast.Proc], prelude: bool
) -> None:
    if name in BUILTINS:
        raise CollError(f"{name!r} is a builtin function and cannot be redefined", span)
    previous = fns.get(name) or procs.get(name)
    if previous is not None and previous.span.file != PRELUDE_NAME:
        raise CollError(f"{name!r} is defined twice (first at line {previous.span.line})", span)


_HIERARCHY_FUNCS = ("node_of", "local_of", "node_ranks", "local_ranks", "rank_at", "node_size", "level_of")

# --------------------------------------------------------------------------
# Static name and arity checks
# --------------------------------------------------------------------------


class _Resolver:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.globals = {p.name for p in program.params} | {let.name for let in program.lets}
        if program.hierarchy is not None:
            self.globals |= set(HIERARCHY_NAMES)

    def check(self) -> None:
        prog = self.program
        params_seen: set[str] = set()
        for param in prog.params:  # a default may name the parameters before it
            if param.default is not None:
                self.expr(param.default, set(params_seen))
            params_seen.add(param.name)
        if prog.hierarchy is not None:  # p and levels are known before the constraints
            params_seen |= set(HIERARCHY_NAMES)
        for param in prog.params:  # constraints may name any parameter
            if param.constraint is not None:
                self.expr(param.constraint, params_seen)
        self.expr(prog.chunks.count, self.globals)
        weight = prog.chunks.weight
        if weight is not None:
            if weight.var in RESERVED:
                raise CollError(
                    f"{weight.var!r} is reserved (the current rank) and cannot name the chunk", weight.var_span
                )
            self.expr(weight.value, set(self.globals) | {weight.var})
        for let in prog.lets:
            self.expr(let.value, self.globals)
        for a in prog.asserts:
            self.expr(a.cond, self.globals)
        for fn in prog.fns.values():
            scope = set(self.globals) | set(fn.params)
            for item in fn.body:
                if isinstance(item, ast.Let):
                    self.expr(item.value, scope)
                    scope.add(item.name)
                else:
                    self.expr(item.cond, scope)
            self.expr(fn.result, scope)
        for proc in prog.procs.values():
            self.stmts(proc.body, set(self.globals) | set(proc.params) | {"rank"})
        for phase in prog.phases:
            self.stmts(phase.body, set(self.globals) | {"rank"})

    def stmts(self, body: Iterable[ast.Stmt], scope: set[str]) -> None:
        for stmt in body:
            self.stmt(stmt, scope)

    def stmt(self, stmt: ast.Stmt, scope: set[str]) -> None:
        if isinstance(stmt, ast.Let):
            if stmt.name == "rank":
                raise CollError("'rank' is reserved and cannot be assigned", stmt.span)
            self.expr(stmt.value, scope)
            scope.add(stmt.name)
        elif isinstance(stmt, ast.Assert):
            self.expr(stmt.cond, scope)
        elif isinstance(stmt, ast.For):
            self.expr(stmt.iter, scope)
            scope.add(stmt.var)
            self.stmts(stmt.body, scope)
        elif isinstance(stmt, ast.If):
            for cond, body in stmt.branches:
                self.expr(cond, scope)
                self.stmts(body, scope)
            self.stmts(stmt.orelse, scope)
        elif isinstance(stmt, ast.StepBlock):
            self.stmts(stmt.body, scope)
        elif isinstance(stmt, ast.Lane):
            self.expr(stmt.lane, scope)
            self.stmts(stmt.body, scope)
        elif isinstance(stmt, ast.Send | ast.Recv):
            self.expr(stmt.chunks, scope)
            self.expr(stmt.peer, scope)
            self.codec(stmt.codec)
        elif isinstance(stmt, ast.Exchange):
            self.expr(stmt.peer, scope)
            self.expr(stmt.send, scope)
            self.expr(stmt.recv, scope)
            self.codec(stmt.send_codec)
            self.codec(stmt.recv_codec)
        elif isinstance(stmt, ast.Compress):
            self.expr(stmt.chunks, scope)
            self.codec(stmt.codec)
        elif isinstance(stmt, ast.Decompress):
            self.expr(stmt.chunks, scope)
        elif isinstance(stmt, ast.Do):
            proc = self.program.procs.get(stmt.proc)
            if proc is None:
                hint = " (it is a function: use it in an expression)" if stmt.proc in self.program.fns else ""
                raise CollError(f"unknown procedure {stmt.proc!r}{hint}", stmt.span)
            if len(stmt.args) != len(proc.params):
                raise CollError(
                    f"procedure {stmt.proc} takes {len(proc.params)} argument(s), got {len(stmt.args)}", stmt.span
                )
            for arg in stmt.args:
                self.expr(arg, scope)
            if stmt.group is not None:
                self.expr(stmt.group, scope)

    def codec(self, ref: ast.CodecRef | None) -> None:
        if ref is None or ref.name in self.program.codecs:
            return
        known = ", ".join(sorted(self.program.codecs))
        hint = f"declared codecs: {known}" if known else f"declare it in the header: codec {ref.name} = ebq(eb=1e-3)"
        raise CollError(f"unknown codec {ref.name!r} ({hint})", ref.span)

    def expr(self, node: ast.Expr, scope: set[str]) -> None:
        if isinstance(node, ast.Name):
            if node.id not in scope:
                if node.id == "rank":
                    raise CollError("'rank' is only defined inside phases and procedures", node.span)
                hint = ""
                if node.id in self.program.fns or node.id in BUILTINS:
                    hint = f" ({node.id} is a function: call it with arguments)"
                elif node.id in self.globals:
                    hint = " (it is defined later)"
                raise CollError(f"unknown name {node.id!r}{hint}", node.span)
        elif isinstance(node, ast.BinOp | ast.BoolOp):
            self.expr(node.left, scope)
            self.expr(node.right, scope)
        elif isinstance(node, ast.UnaryOp):
            self.expr(node.operand, scope)
        elif isinstance(node, ast.Compare):
            for operand in node.operands:
                self.expr(operand, scope)
        elif isinstance(node, ast.IfExp):
            self.expr(node.cond, scope)
            self.expr(node.then, scope)
            self.expr(node.orelse, scope)
        elif isinstance(node, ast.Index):
            self.expr(node.target, scope)
            self.expr(node.index, scope)
        elif isinstance(node, ast.SetLit | ast.TupleLit):
            for elt in node.elts:
                self.expr(elt, scope)
        elif isinstance(node, ast.Comprehension):
            if node.func not in COMPREHENSION_FUNCS:
                raise CollError(
                    f"{node.func}() cannot take a comprehension; one of {', '.join(COMPREHENSION_FUNCS)} can",
                    node.span,
                )
            inner = set(scope)
            for clause in node.clauses:  # each clause sees the variables of those before it
                self.expr(clause.iter, inner)
                inner = inner | {clause.var}
                for cond in clause.conds:
                    self.expr(cond, inner)
            self.expr(node.elt, inner)
        elif isinstance(node, ast.Call):
            self.call(node, scope)

    def call(self, node: ast.Call, scope: set[str]) -> None:
        fn = self.program.fns.get(node.func)
        if fn is not None:
            if len(node.args) != len(fn.params):
                raise CollError(
                    f"{node.func}() takes {len(fn.params)} argument(s), got {len(node.args)}", node.func_span
                )
        elif node.func in BUILTINS:
            lo, hi, _, _ = BUILTINS[node.func]
            if not lo <= len(node.args) <= hi:
                want = str(lo) if lo == hi else f"{lo} to {hi}"
                raise CollError(f"{node.func}() takes {want} argument(s), got {len(node.args)}", node.func_span)
        elif node.func in self.program.procs:
            raise CollError(f"{node.func} is a procedure: run it with 'do {node.func}(...)'", node.func_span)
        elif node.func in _HIERARCHY_FUNCS:
            raise CollError(
                f"{node.func}() needs a machine hierarchy: declare one, e.g. 'hierarchy nodes * local'", node.func_span
            )
        else:
            raise CollError(f"unknown function {node.func!r}", node.func_span)
        for arg in node.args:
            self.expr(arg, scope)
