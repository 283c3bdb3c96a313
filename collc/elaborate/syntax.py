"""Checks and walks over the AST that need no instance.

The literal checks raise what compiling an expression would (an integer
literal beyond 64 bits) without compiling it; the walks give an expression's
children, the names a statement list may assign, and the source text of a
span (for assertion and constraint messages).
"""

from __future__ import annotations

from collc.diagnostics import CollError, shorten, source_lines
from collc.frontend import ast
from collc.frontend.program import Program
from collc.ir import Span


def _check_literal(node: ast.Num) -> None:
    if node.value > (1 << 63) - 1:
        raise CollError(f"integer literal {shorten(str(node.value))} does not fit in 64 bits", node.span)


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
        parts = [e for clause in node.clauses for e in (clause.iter, *clause.conds)]
        children: tuple[ast.Expr | None, ...] = (node.elt, *parts)
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
        elif isinstance(s, ast.StepBlock | ast.Lane):
            out |= _assigned(s.body)
    return out


def _source_text(program: Program, span: Span) -> str:
    text = program.sources.get(span.file, "")
    lines = source_lines(text)
    if not 1 <= span.line <= len(lines):
        return "<condition>"
    line = lines[span.line - 1]
    end = span.end_column - 1 if span.end_line == span.line else len(line)
    return shorten(line[span.column - 1 : end].strip(), 100) or "<condition>"
