"""Parse `.coll` text into the AST (`collc.frontend.ast`).

The grammar (``grammar/coll.lark``) is LALR; indentation becomes INDENT and
DEDENT tokens through `CollIndenter`.  Every lark error is turned into a
`CollError` with the position it happened at.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError
from lark.lark import PostLex

from collc.diagnostics import CollError, shorten, source_lines
from collc.frontend import ast
from collc.ir import Span
from collc.resources import data_dir

# --------------------------------------------------------------------------
# Indentation
# --------------------------------------------------------------------------

_OPEN = {"LPAR", "LSQB", "LBRACE"}
_PARSE_RECURSION_LIMIT = 20000  # lark builds and transforms trees recursively
MAX_NAME = 100
"""The longest name (of a parameter, constant, function, phase, codec, the algorithm ...) a program may use."""
MAX_NESTING = 2500
"""The deepest a program may nest: brackets inside brackets, and levels of its parse tree (an operator, a
block, a bracket construct each add one; a chain ``a + b + ...`` adds one per operator).  Deeper programs
are refused where the limit is crossed, before anything walks their trees recursively."""
_CLOSE = {"RPAR", "RSQB", "RBRACE"}


class _IndentError(Exception):
    """An indentation or bracket error at (line, column, width); parse_module adds the file."""

    def __init__(self, message: str, line: int, column: int, width: int = 1) -> None:
        super().__init__(message)
        self.message, self.line, self.column, self.width = message, line, column, width


class CollIndenter(PostLex):
    """Turns leading whitespace after newlines into INDENT/DEDENT tokens (stateless between parses)."""

    always_accept = ("_NL",)

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        paren_level = 0
        levels = [0]
        token: Token | None = None
        for token in stream:
            if token.type == "_NL":
                if paren_level > 0:
                    continue
                yield token
                indent_str = token.rsplit("\n", 1)[1] if "\n" in token else ""
                if "\t" in indent_str and " " in indent_str:
                    line = token.end_line or token.line or 1
                    raise _IndentError("indentation mixes tabs and spaces", line, 1)
                indent = len(indent_str.expandtabs(8))
                if indent > levels[-1]:
                    levels.append(indent)
                    yield Token.new_borrow_pos("_INDENT", indent_str, token)
                else:
                    while indent < levels[-1]:
                        levels.pop()
                        yield Token.new_borrow_pos("_DEDENT", indent_str, token)
                    if indent != levels[-1]:
                        line = token.end_line or token.line or 1
                        raise _IndentError(
                            f"this line is indented to column {indent + 1}, which matches no enclosing block "
                            f"(expected column {levels[-1] + 1})",
                            line,
                            indent + 1,
                        )
                continue
            if token.type == "NAME" and len(token) > MAX_NAME:
                raise _IndentError(
                    f"this name is {len(token)} characters long ({shorten(str(token))}); names are at most "
                    f"{MAX_NAME} characters",
                    token.line or 1,
                    token.column or 1,
                    len(token),
                )
            yield token
            if token.type in _OPEN:
                paren_level += 1
                if paren_level > MAX_NESTING:
                    raise _IndentError(
                        f"brackets are nested too deeply here: more than {MAX_NESTING} levels",
                        token.line or 1,
                        token.column or 1,
                    )
            elif token.type in _CLOSE:
                if paren_level == 0:
                    raise _IndentError(f"unmatched '{token}'", token.line or 1, token.column or 1, len(str(token)))
                paren_level -= 1
        while len(levels) > 1:
            levels.pop()
            if token is not None:
                yield Token.new_borrow_pos("_DEDENT", "", token)
            else:
                yield Token("_DEDENT", "", 0, 1, 1, 1, 1, 0)


def _token_span(file: str, token: Token, width: int | None = None) -> Span:
    line = token.line or 1
    col = token.column or 1
    if width is None:
        end_line = token.end_line or line
        end_col = token.end_column or col + max(1, len(str(token)))
    else:
        end_line, end_col = line, col + width
    return Span(file, line, col, end_line, end_col)


# --------------------------------------------------------------------------
# The parser
# --------------------------------------------------------------------------


@cache
def _grammar_text() -> str:
    return (data_dir("grammar") / "coll.lark").read_text()


@cache
def _parser() -> Lark:
    """The LALR parser, built once per process from the shipped grammar (it holds no parse state)."""
    return Lark(
        _grammar_text(),
        parser="lalr",
        start=["program", "library"],
        postlex=CollIndenter(),
        propagate_positions=True,
        maybe_placeholders=False,
    )


_FRIENDLY = {
    "NAME": "a name",
    "NUMBER": "a number",
    "STRING": "a string",
    "_NL": "end of line",
    "_INDENT": "an indented block",
    "_DEDENT": "the end of the block",
    "$END": "end of file",
    "ACTION": "'copy' or 'reduce'",
    "STEP": "'step'",
    "FLOAT": "a number",
}


def _friendly_terminals(parser: Lark, names: set[str]) -> str:
    shown = []
    for name in sorted(names):
        if name in _FRIENDLY:
            shown.append(_FRIENDLY[name])
            continue
        try:
            term = parser.get_terminal(name)
            pattern = term.pattern
            shown.append(f"'{pattern.value}'" if pattern.type == "str" else name.lower())
        except KeyError:
            shown.append(name.lower())
    shown = sorted(set(shown))
    if len(shown) > 8:
        shown = [*shown[:8], "..."]
    return ", ".join(shown)


_PAIRS = {")": "(", "]": "[", "}": "{"}


def _unclosed_bracket(text: str, upto: int) -> tuple[str, int, int] | None:
    """The innermost bracket opened before ``upto`` and not closed by then (comments skipped)."""
    stack = _brackets(text, upto)
    return stack[-1] if stack else None


def _never_closed(text: str, bracket: tuple[str, int, int]) -> bool:
    """Whether ``bracket`` (as `_unclosed_bracket` gives it) stays open to the end of ``text``."""
    return bracket in _brackets(text, len(text))


def _brackets(text: str, upto: int) -> list[tuple[str, int, int]]:
    """The brackets opened before ``upto`` and not closed by then, outermost first: (char, line, column)."""
    stack: list[tuple[str, int, int]] = []
    line, col, i = 1, 1, 0
    while i < min(upto, len(text)):
        ch = text[i]
        if ch == "#":
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        if ch == '"':
            j = text.find('"', i + 1)
            if j < 0 or "\n" in text[i:j]:
                break
            col += j - i
            i = j
        elif ch in "([{":
            stack.append((ch, line, col))
        elif ch in ")]}":
            if stack and stack[-1][0] == _PAIRS[ch]:
                stack.pop()
        if ch == "\n":
            line, col = line + 1, 1
        else:
            col += 1
        i += 1
    return stack


_FLOAT_TEXT = re.compile(r"([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+")


def _float_literal(text: str, token: Token) -> tuple[int, int] | None:
    """Where a float literal the parser stopped in (``1.5``, ``1e-3``) starts and ends in ``text``."""
    pos = token.start_pos
    if pos is None or token.type not in ("FLOAT", "NAME"):
        return None
    start = pos
    while start > 0 and text[start - 1].isdigit():
        start -= 1
    m = _FLOAT_TEXT.match(text, start)
    if m is None or m.end() <= pos or (start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_")):
        return None
    return start, m.end()


def _describe_token(token: Token) -> str:
    if token.type == "_NL":
        return "end of line"
    if token.type == "_INDENT":
        return "indentation"
    if token.type == "_DEDENT":
        return "end of the indented block"
    if token.type == "$END":
        return "end of file"
    return f"'{shorten(str(token))}'"


def normalize_line_ends(text: str) -> str:
    """``text`` with CRLF and lone CR line ends as line feeds (as reading a file in text mode gives), less
    a byte order mark at its start."""
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def parse_module(text: str, file: str, *, library: bool = False) -> ast.Module:
    """Parse one file.  ``library`` files have no header and no parameters or phases.  Line ends are
    normalized first (the caller keeps the normalized text for carets: `normalize_line_ends`)."""
    text = normalize_line_ends(text)
    if not text.endswith("\n"):
        text += "\n"
    parser = _parser()
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, _PARSE_RECURSION_LIMIT))
    try:
        return _parse(parser, text, file, library)
    except RecursionError:
        raise CollError(
            "the program is nested too deeply (an expression or block structure thousands of levels deep)",
            Span(file, 1, 1, 1, 2),
        ) from None
    finally:
        sys.setrecursionlimit(old_limit)


def _parse(parser: Lark, text: str, file: str, library: bool) -> ast.Module:
    try:
        tree = parser.parse(text, start="library" if library else "program")
    except _IndentError as err:
        raise CollError(err.message, Span(file, err.line, err.column, err.line, err.column + err.width)) from None
    except UnexpectedToken as err:
        token = err.token
        expected = _friendly_terminals(parser, set(err.expected))
        if token.type == "$END":
            lines = source_lines(text) or [""]
            span = Span(file, len(lines), len(lines[-1]) + 1, len(lines), len(lines[-1]) + 2)
        elif token.type == "_INDENT":  # positioned at the newline before the indented line
            line = token.end_line or token.line or 1
            span = Span(file, line, 1, line, max(2, len(str(token)) + 1))
        else:
            span = _token_span(file, token)
        unclosed = _unclosed_bracket(text, token.start_pos if token.start_pos is not None else len(text))
        if unclosed is not None:  # inside brackets a line goes on: the end of a line cannot come next
            expected = _friendly_terminals(parser, set(err.expected) - {"_NL"})
        if unclosed is not None and _never_closed(text, unclosed):
            char, line, col = unclosed
            raise CollError(
                f"'{char}' is never closed",
                Span(file, line, col, line, col + 1),
                (f"the parser stopped at {_describe_token(token)} on line {span.line}",),
            ) from None
        if token.type == "_INDENT":
            raise CollError("unexpected indentation: the line before does not open a block", span) from None
        literal = _float_literal(text, token)
        if literal is not None:
            start, end = literal
            raise CollError(
                f"{shorten(text[start:end])} is not an integer: numbers with a fraction or an exponent are allowed "
                "only in codec specs (codec q = ebq(eb=1e-3))",
                Span(
                    file,
                    span.line,
                    span.column - (token.start_pos - start),
                    span.line,
                    span.column - (token.start_pos - start) + end - start,
                ),
            ) from None
        raise CollError(f"unexpected {_describe_token(token)}; expected {expected}", span) from None
    except UnexpectedCharacters as err:
        line, col = err.line, err.column
        char = text[err.pos_in_stream] if 0 <= err.pos_in_stream < len(text) else "?"
        raise CollError(f"unexpected character {char!r}", Span(file, line, col, line, col + 1)) from None
    except UnexpectedEOF as err:
        lines = source_lines(text) or [""]
        expected = _friendly_terminals(parser, set(err.expected))
        raise CollError(
            f"unexpected end of file; expected {expected}",
            Span(file, len(lines), 1, len(lines), 2),
        ) from None
    except UnexpectedInput as err:  # any other positional parse error
        line = getattr(err, "line", 1) or 1
        col = getattr(err, "column", 1) or 1
        raise CollError("syntax error", Span(file, line, col, line, col + 1)) from None
    _check_nesting(tree, file)
    try:
        module = _ToAst(file).transform(tree)
    except VisitError as err:
        if isinstance(err.orig_exc, CollError):
            raise err.orig_exc from None
        raise
    assert isinstance(module, ast.Module)
    return module


def _check_nesting(tree: Tree, file: str) -> None:
    """Refuse a parse tree deeper than `MAX_NESTING`, at the first node past the limit (without recursion)."""
    stack: list[tuple[Tree, int, Any]] = [(tree, 1, tree.meta)]
    while stack:
        node, depth, outer = stack.pop()
        meta = outer if getattr(node.meta, "empty", True) else node.meta
        if depth > MAX_NESTING:
            span = Span(file, meta.line, meta.column, meta.end_line, meta.end_column)
            if getattr(meta, "empty", True):
                span = Span(file, 1, 1, 1, 2)
            raise CollError(
                f"the program is nested too deeply here: more than {MAX_NESTING} levels (blocks, brackets and "
                "operators each add a level, a chain of operators one per operator); split the expression or the block",
                span,
            )
        for child in node.children:
            if isinstance(child, Tree):
                stack.append((child, depth + 1, meta))


# --------------------------------------------------------------------------
# Parse tree -> AST
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _On:
    """The ``on GROUP`` clause of a ``do`` while the tree is transformed."""

    expr: ast.Expr


def _codec_of(rest: list[Any]) -> ast.CodecRef | None:
    """The optional codec clause among a statement's trailing children."""
    return rest[0] if rest else None


def _binop(op: str):  # type: ignore[no-untyped-def]
    def method(self: _ToAst, meta: Any, children: list[Any]) -> ast.BinOp:
        return ast.BinOp(op, children[0], children[1], self.span(meta))

    return method


def _unop(op: str):  # type: ignore[no-untyped-def]
    def method(self: _ToAst, meta: Any, children: list[Any]) -> ast.UnaryOp:
        return ast.UnaryOp(op, children[0], self.span(meta))

    return method


@v_args(meta=True)
class _ToAst(Transformer):  # type: ignore[type-arg]
    def __init__(self, file: str) -> None:
        super().__init__()
        self.file = file

    def span(self, meta: Any) -> Span:
        if getattr(meta, "empty", True):
            return Span(self.file, 0, 0, 0, 0)
        return Span(self.file, meta.line, meta.column, meta.end_line, meta.end_column)

    def tspan(self, token: Token) -> Span:
        return _token_span(self.file, token)

    # ---- modules and declarations
    def program(self, meta: Any, children: list[Any]) -> ast.Module:
        return ast.Module(self.file, children[0], tuple(children[1:]))

    def library(self, meta: Any, children: list[Any]) -> ast.Module:
        return ast.Module(self.file, None, tuple(children))

    def header(self, meta: Any, children: list[Token]) -> ast.Header:
        return ast.Header(str(children[0]), str(children[1]), self.span(meta), self.tspan(children[1]))

    def param_decl(self, meta: Any, children: list[Any]) -> ast.Param:
        name, type_tok, *rest = children
        default = next((c[1] for c in rest if c[0] == "default"), None)
        where = next((c[1] for c in rest if c[0] == "where"), None)
        return ast.Param(str(name), str(type_tok), default, where, self.span(meta), self.tspan(type_tok))

    def param_default(self, meta: Any, children: list[Any]) -> tuple[str, Any]:
        return ("default", children[0])

    def param_where(self, meta: Any, children: list[Any]) -> tuple[str, Any]:
        return ("where", children[0])

    def codec_decl(self, meta: Any, children: list[Any]) -> ast.CodecDecl:
        name, (spec, spec_span) = children
        return ast.CodecDecl(str(name), spec, self.span(meta), spec_span)

    def codec_spec(self, meta: Any, children: list[Any]) -> tuple[str, Span]:
        name, *args = children
        return (f"{name}({', '.join(args)})" if args else str(name)), self.span(meta)

    def codec_arg(self, meta: Any, children: list[Token]) -> str:
        return "=".join(str(c) for c in children)

    def codec_negative(self, meta: Any, children: list[Token]) -> str:
        return f"-{children[0]}"  # a negative value, for the codec's own check to judge

    def chunks_decl(self, meta: Any, children: list[Any]) -> ast.Chunks:
        weight = children[1] if len(children) > 1 else None
        return ast.Chunks(children[0], self.span(meta), weight)

    def chunk_weight(self, meta: Any, children: list[Any]) -> ast.ChunkWeight:
        name, value = children
        return ast.ChunkWeight(str(name), value, self.span(meta), self.tspan(name))

    def include_decl(self, meta: Any, children: list[Token]) -> ast.Include:
        return ast.Include(str(children[0])[1:-1], self.span(meta))

    def hierarchy_decl(self, meta: Any, children: list[Token]) -> ast.Hierarchy:
        seen: set[str] = set()
        for tok in children:
            if str(tok) in seen:
                raise CollError(f"level {tok} is listed twice in the hierarchy", self.tspan(tok))
            seen.add(str(tok))
        return ast.Hierarchy(tuple(ast.Name(str(t), self.tspan(t)) for t in children), self.span(meta))

    def names(self, meta: Any, children: list[Token]) -> tuple[str, ...]:
        seen: set[str] = set()
        for tok in children:
            if str(tok) in seen:
                raise CollError(f"parameter {tok} is listed twice", self.tspan(tok))
            seen.add(str(tok))
        return tuple(str(c) for c in children)

    def fn_expr(self, meta: Any, children: list[Any]) -> ast.Fn:
        name, *rest = children
        params = rest[0] if len(rest) == 2 else ()
        return ast.Fn(str(name), params, (), rest[-1], self.span(meta))

    def fn_block(self, meta: Any, children: list[Any]) -> ast.Fn:
        name, *rest = children
        params = rest[0] if len(rest) == 2 else ()
        body, result = rest[-1]
        return ast.Fn(str(name), params, body, result, self.span(meta))

    def fn_body(self, meta: Any, children: list[Any]) -> tuple[tuple[Any, ...], Any]:
        return tuple(children[:-1]), children[-1]

    def proc_decl(self, meta: Any, children: list[Any]) -> ast.Proc:
        name, *rest = children
        params = rest[0] if len(rest) == 2 else ()
        return ast.Proc(str(name), params, rest[-1], self.span(meta))

    def phase_decl(self, meta: Any, children: list[Any]) -> ast.Phase:
        return ast.Phase(str(children[0]), children[1], self.span(meta))

    def suite(self, meta: Any, children: list[Any]) -> tuple[Any, ...]:
        return tuple(children)

    # ---- statements
    def let_stmt(self, meta: Any, children: list[Any]) -> ast.Let:
        return ast.Let(str(children[0]), children[1], self.span(meta))

    def assert_stmt(self, meta: Any, children: list[Any]) -> ast.Assert:
        message = str(children[1])[1:-1] if len(children) > 1 else None
        return ast.Assert(children[0], message, self.span(meta))

    def for_stmt(self, meta: Any, children: list[Any]) -> ast.For:
        is_step = isinstance(children[0], Token) and children[0].type == "STEP"
        if is_step:
            children = children[1:]
        var, iterable, body = children
        return ast.For(str(var), iterable, body, is_step, self.span(meta))

    def if_stmt(self, meta: Any, children: list[Any]) -> ast.If:
        branches = [(children[0], children[1])]
        orelse: tuple[Any, ...] = ()
        for extra in children[2:]:
            if extra[0] == "elif":
                branches.append((extra[1], extra[2]))
            else:
                orelse = extra[1]
        return ast.If(tuple(branches), orelse, self.span(meta))

    def elif_clause(self, meta: Any, children: list[Any]) -> tuple[Any, ...]:
        return ("elif", children[0], children[1])

    def else_clause(self, meta: Any, children: list[Any]) -> tuple[Any, ...]:
        return ("else", children[0])

    def step_stmt(self, meta: Any, children: list[Any]) -> ast.StepBlock:
        return ast.StepBlock(children[1], self.span(meta))

    def exchange_stmt(self, meta: Any, children: list[Any]) -> ast.Exchange:
        peer, (send, send_span, send_codec), (recv, action, recv_span, recv_codec) = children
        return ast.Exchange(peer, send, recv, action, self.span(meta), send_span, recv_span, send_codec, recv_codec)

    def send_part(self, meta: Any, children: list[Any]) -> tuple[Any, Span, ast.CodecRef | None]:
        return children[0], self.span(meta), _codec_of(children[1:])

    def recv_part(self, meta: Any, children: list[Any]) -> tuple[Any, str, Span, ast.CodecRef | None]:
        return children[0], str(children[1]), self.span(meta), _codec_of(children[2:])

    def send_stmt(self, meta: Any, children: list[Any]) -> ast.Send:
        return ast.Send(children[0], children[1], self.span(meta), _codec_of(children[2:]))

    def recv_stmt(self, meta: Any, children: list[Any]) -> ast.Recv:
        return ast.Recv(children[0], children[1], str(children[2]), self.span(meta), _codec_of(children[3:]))

    def codec_clause(self, meta: Any, children: list[Token]) -> ast.CodecRef:
        return ast.CodecRef(str(children[0]), self.tspan(children[0]))

    def compress_stmt(self, meta: Any, children: list[Any]) -> ast.Compress:
        chunks, name = children
        return ast.Compress(chunks, ast.CodecRef(str(name), self.tspan(name)), self.span(meta))

    def decompress_stmt(self, meta: Any, children: list[Any]) -> ast.Decompress:
        return ast.Decompress(children[0], self.span(meta))

    def do_stmt(self, meta: Any, children: list[Any]) -> ast.Do:
        group = children.pop().expr if isinstance(children[-1], _On) else None
        args = children[1] if len(children) > 1 else ()
        return ast.Do(str(children[0]), args, self.span(meta), group)

    def do_on(self, meta: Any, children: list[Any]) -> _On:
        return _On(children[0])

    def lane_stmt(self, meta: Any, children: list[Any]) -> ast.Lane:
        return ast.Lane(children[0], children[1], self.span(meta))

    def pass_stmt(self, meta: Any, children: list[Any]) -> ast.Pass:
        return ast.Pass(self.span(meta))

    # ---- expressions
    def ifexp(self, meta: Any, children: list[Any]) -> ast.IfExp:
        then, cond, orelse = children
        return ast.IfExp(cond, then, orelse, self.span(meta))

    def or_op(self, meta: Any, children: list[Any]) -> ast.BoolOp:
        return ast.BoolOp("or", children[0], children[1], self.span(meta))

    def and_op(self, meta: Any, children: list[Any]) -> ast.BoolOp:
        return ast.BoolOp("and", children[0], children[1], self.span(meta))

    not_op = _unop("not")

    def compare(self, meta: Any, children: list[Any]) -> ast.Compare:
        operands = tuple(children[0::2])
        ops = tuple(children[1::2])
        return ast.Compare(ops, operands, self.span(meta))

    def comp_op(self, meta: Any, children: list[Token]) -> str:
        return " ".join(str(c) for c in children)

    range_op = _binop("..")
    bor = _binop("|")
    bxor = _binop("^")
    band = _binop("&")
    lshift = _binop("<<")
    rshift = _binop(">>")
    add = _binop("+")
    sub = _binop("-")
    mul = _binop("*")
    div = _binop("/")
    floordiv = _binop("//")
    rem = _binop("%")
    mathmod = _binop("mod")
    pow = _binop("**")
    neg = _unop("-")
    pos = _unop("+")
    invert = _unop("~")

    def index(self, meta: Any, children: list[Any]) -> ast.Index:
        return ast.Index(children[0], children[1], self.span(meta))

    def call(self, meta: Any, children: list[Any]) -> ast.Call:
        args = children[1] if len(children) > 1 else ()
        return ast.Call(str(children[0]), args, self.span(meta), self.tspan(children[0]))

    def gencall(self, meta: Any, children: list[Any]) -> ast.Comprehension:
        func, elt, clauses = children
        return ast.Comprehension(str(func), elt, clauses, self.span(meta))

    def set_comp(self, meta: Any, children: list[Any]) -> ast.Comprehension:
        elt, clauses = children
        return ast.Comprehension("set", elt, clauses, self.span(meta))

    def comp_for(self, meta: Any, children: list[Any]) -> tuple[ast.CompFor, ...]:
        return tuple(children)

    def comp_clause(self, meta: Any, children: list[Any]) -> ast.CompFor:
        var, iterable, *conds = children
        return ast.CompFor(str(var), iterable, tuple(conds), self.span(meta))

    def args(self, meta: Any, children: list[Any]) -> tuple[Any, ...]:
        return tuple(children)

    def number(self, meta: Any, children: list[Token]) -> ast.Num:
        text = str(children[0])
        based = text[:2].lower() in ("0x", "0b")
        if len((text[2:] if based else text).lstrip("0")) > 64:  # 2^64 or more, in any base (and int() has limits)
            raise CollError(f"integer literal {shorten(text)} does not fit in 64 bits", self.tspan(children[0]))
        value = int(text, 0) if based else int(text, 10)
        return ast.Num(value, self.tspan(children[0]))

    def name(self, meta: Any, children: list[Token]) -> ast.Name:
        return ast.Name(str(children[0]), self.tspan(children[0]))

    def true(self, meta: Any, children: list[Any]) -> ast.Bool:
        return ast.Bool(True, self.span(meta))

    def false(self, meta: Any, children: list[Any]) -> ast.Bool:
        return ast.Bool(False, self.span(meta))

    def tuple_lit(self, meta: Any, children: list[Any]) -> ast.TupleLit:
        return ast.TupleLit(tuple(children), self.span(meta))

    def empty_set(self, meta: Any, children: list[Any]) -> ast.SetLit:
        return ast.SetLit((), self.span(meta))

    def set_lit(self, meta: Any, children: list[Any]) -> ast.SetLit:
        return ast.SetLit(tuple(children), self.span(meta))
