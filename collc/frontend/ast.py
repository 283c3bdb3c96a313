"""The abstract syntax of `.coll` programs: one frozen dataclass per construct.

Every node carries the `Span` it was parsed from, so that every later error
can point at the text.
"""

from __future__ import annotations

from dataclasses import dataclass

from collc.ir import Span

# --------------------------------------------------------------------------
# Expressions
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Num:
    value: int
    span: Span


@dataclass(frozen=True, slots=True)
class Bool:
    value: bool
    span: Span


@dataclass(frozen=True, slots=True)
class Name:
    id: str
    span: Span


@dataclass(frozen=True, slots=True)
class BinOp:
    op: str  # + - * / // % mod ** | & ^ << >> ..
    left: Expr
    right: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class UnaryOp:
    op: str  # - + ~ not
    operand: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class BoolOp:
    op: str  # and or
    left: Expr
    right: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class Compare:
    """A chain ``a < b <= c``: ``ops[i]`` compares ``operands[i]`` and ``operands[i+1]``."""

    ops: tuple[str, ...]
    operands: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class IfExp:
    cond: Expr
    then: Expr
    orelse: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class Index:
    target: Expr
    index: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class Call:
    func: str
    args: tuple[Expr, ...]
    span: Span
    func_span: Span


@dataclass(frozen=True, slots=True)
class CompFor:
    """One clause ``for var in iter if cond if ...`` of a comprehension (no ``if``: ``conds`` is empty)."""

    var: str
    iter: Expr
    conds: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Comprehension:
    """``elt for a in A if c for b in B ...``: the clauses nest left to right (the last varies fastest), each
    sees the variables of those before it; ``func`` is the builtin applied (``set`` for ``{...}``)."""

    func: str
    elt: Expr
    clauses: tuple[CompFor, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class SetLit:
    elts: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class TupleLit:
    elts: tuple[Expr, ...]
    span: Span


Expr = Num | Bool | Name | BinOp | UnaryOp | BoolOp | Compare | IfExp | Index | Call | Comprehension | SetLit | TupleLit

# --------------------------------------------------------------------------
# Statements
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Let:
    name: str
    value: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class Assert:
    cond: Expr
    message: str | None
    span: Span


@dataclass(frozen=True, slots=True)
class For:
    var: str
    iter: Expr
    body: tuple[Stmt, ...]
    is_step: bool  # ``for step s in ...``: every iteration is one step
    span: Span


@dataclass(frozen=True, slots=True)
class If:
    branches: tuple[tuple[Expr, tuple[Stmt, ...]], ...]  # if / elif conditions with their bodies
    orelse: tuple[Stmt, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class StepBlock:
    body: tuple[Stmt, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class CodecRef:
    """A use of a declared codec by name (``compress q``)."""

    name: str
    span: Span


@dataclass(frozen=True, slots=True)
class Send:
    chunks: Expr
    peer: Expr
    span: Span
    codec: CodecRef | None = None  # the message travels compressed


@dataclass(frozen=True, slots=True)
class Recv:
    chunks: Expr
    peer: Expr
    action: str  # copy | reduce
    span: Span
    codec: CodecRef | None = None


@dataclass(frozen=True, slots=True)
class Exchange:
    """Send and receive with one peer in the same step.

    A codec written on either half compresses both directions (the peer runs the
    same exchange), unless the other half names its own.
    """

    peer: Expr
    send: Expr
    recv: Expr
    action: str
    span: Span
    send_span: Span
    recv_span: Span
    send_codec: CodecRef | None = None
    recv_codec: CodecRef | None = None


@dataclass(frozen=True, slots=True)
class Compress:
    """``compress CHUNKS with q``: the rank's slots become compressed (a local op)."""

    chunks: Expr
    codec: CodecRef
    span: Span


@dataclass(frozen=True, slots=True)
class Decompress:
    """``decompress CHUNKS``: the rank's compressed slots become raw again (a local op)."""

    chunks: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class Do:
    """``do proc(args)``; with ``on GROUP`` the procedure runs on a group of ranks, renumbered 0 .. len - 1."""

    proc: str
    args: tuple[Expr, ...]
    span: Span
    group: Expr | None = None


@dataclass(frozen=True, slots=True)
class Lane:
    """``lane J:`` inside a step: the ops of the body belong to lane J (they may overlap other lanes' steps)."""

    lane: Expr
    body: tuple[Stmt, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Pass:
    span: Span


Stmt = Let | Assert | For | If | StepBlock | Lane | Send | Recv | Exchange | Compress | Decompress | Do | Pass

# --------------------------------------------------------------------------
# Declarations
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Header:
    name: str
    collective: str
    span: Span
    collective_span: Span


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: str  # int | dims
    default: Expr | None
    constraint: Expr | None
    span: Span
    type_span: Span


@dataclass(frozen=True, slots=True)
class CodecDecl:
    """``codec q = ebq(eb=1e-3)``; ``spec`` is the text `collc.codecs.parse_codec` reads."""

    name: str
    spec: str
    span: Span
    spec_span: Span


@dataclass(frozen=True, slots=True)
class Chunks:
    count: Expr
    span: Span
    weight: ChunkWeight | None = None


@dataclass(frozen=True, slots=True)
class ChunkWeight:
    """``weight(c) = EXPR``: each chunk's relative size, ``var`` bound to the chunk id."""

    var: str
    value: Expr
    span: Span
    var_span: Span


@dataclass(frozen=True, slots=True)
class Fn:
    name: str
    params: tuple[str, ...]
    body: tuple[Let | Assert, ...]
    result: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class Proc:
    name: str
    params: tuple[str, ...]
    body: tuple[Stmt, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    body: tuple[Stmt, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Include:
    path: str
    span: Span


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """``hierarchy nodes * local``: the levels (int parameters), the outermost first; p is their product."""

    levels: tuple[Name, ...]
    span: Span


Decl = Hierarchy | Param | CodecDecl | Chunks | Let | Fn | Proc | Phase | Include | Assert


@dataclass(frozen=True, slots=True)
class Module:
    """One parsed file: a program (with a header) or a library (without)."""

    file: str
    header: Header | None
    decls: tuple[Decl, ...]
