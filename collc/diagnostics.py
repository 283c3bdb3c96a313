"""User-facing errors: a message, the span it is about, and caret formatting.

Library code raises `CollError`; only the CLI turns it into text and an exit
code.  Source texts are passed explicitly (a `Sources` mapping from file name
to text), never looked up in global state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from collc.ir import Span

Sources = Mapping[str, str]


class CollError(Exception):
    """An error in the user's input, located at ``span`` when known."""

    def __init__(self, message: str, span: Span | None = None, notes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.span = span
        self.notes = notes
        self.sources: dict[str, str] = {}  # texts known where the error was raised, for carets

    def with_span(self, span: Span) -> CollError:
        """The same error located at ``span`` if it had no location yet."""
        if self.span is not None:
            return self
        return CollError(self.message, span, self.notes)


@dataclass(frozen=True, slots=True)
class Diagnostic:
    severity: str  # error | warning | note
    message: str
    span: Span | None
    notes: tuple[str, ...] = field(default=())


def shorten(text: str, limit: int = 40) -> str:
    """``text`` itself when short, else its start and end around an ellipsis, with its length: a message
    quotes a long spec, literal or token without printing all of it."""
    if len(text) <= limit:
        return text
    keep = max(10, limit - 16)
    return f"{text[: keep - 6]}...{text[-6:]} ({len(text)} characters)"


def source_lines(text: str) -> list[str]:
    """The lines of a source text as the parser numbers them: ended by a line feed only (a form feed or a
    line separator, which ``str.splitlines`` also breaks at, stays inside its line)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def source_line(sources: Sources, span: Span) -> str | None:
    text = sources.get(span.file)
    if text is None or span.line < 1:
        return None
    lines = source_lines(text)
    if span.line > len(lines):
        return None
    return lines[span.line - 1]


def format_diagnostic(diag: Diagnostic, sources: Sources) -> str:
    """``file:line:col: error: message`` followed by the source line and a caret."""
    if diag.span is None or diag.span.line < 1:
        head = f"{diag.severity}: {diag.message}"
        return "\n".join([head, *(f"  note: {n}" for n in diag.notes)])
    span = diag.span
    out = [f"{span.file}:{span.line}:{span.column}: {diag.severity}: {diag.message}"]
    line = source_line(sources, span)
    if line is not None:
        col = max(span.column, 1)
        if span.end_line == span.line and span.end_column > col:
            width = span.end_column - col
        else:
            width = max(1, len(line.rstrip()) - col + 1) if span.end_line > span.line else 1
        width = max(1, min(width, max(1, len(line) - col + 1)))
        gutter = f"{span.line:>5} | "
        out.append(gutter + line.expandtabs(1))
        out.append(" " * (len(gutter) + col - 1) + "^" + "~" * (width - 1))
    out.extend(f"  note: {n}" for n in diag.notes)
    return "\n".join(out)


def format_error(err: CollError, sources: Sources) -> str:
    return format_diagnostic(Diagnostic("error", err.message, err.span, err.notes), sources)
