"""Environments and scopes of elaboration, and the helpers generated code calls.

An environment is a dict (phases, procedures, global expressions: a
``frozenset`` scope of the names they bind) or a function's argument tuple or
list (a `_Slots` scope: names at fixed positions).  The helpers turn a
`LangError` of `collc.values` into a `CollError` at a span, report unassigned
and undefined names, and note the call site of a function that fails.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from collc.diagnostics import CollError
from collc.ir import Span
from collc.values import LangError, Value, as_bool

Env = dict[str, Value]
_MISSING = object()
_BOUND = 1 << 63
_INT_MIN = -_BOUND
ExprFn = Callable[[Any], Value]
StmtFn = Callable[[Any], None]


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
