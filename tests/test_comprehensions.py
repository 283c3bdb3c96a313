"""Comprehensions with several ``for`` clauses and ``if`` conditions, against Python's own comprehensions.

Each case is written twice, once in .coll and once in Python; ``lo .. hi`` is Python's
``range(lo, hi)``.  The clauses nest from left to right in both languages.
"""

from __future__ import annotations

import math

import pytest

from collc.diagnostics import CollError
from collc.elaborate import constants, elaborate
from collc.frontend.program import parse_program
from collc.ir import ChunkSet, OpKind

HEADER = "algorithm t : allgather\nparam p : int = 4\nparam q : int = 3\nchunks p\n"


def value_of(expr: str, p: int, q: int, extra: str = "") -> object:
    program = parse_program(f"{HEADER}{extra}let result = {expr}\n", "t.coll")
    return constants(program, {"p": p, "q": q})["result"]


def python(value: object) -> object:
    """A .coll value as the Python value it stands for (a set as a Python set)."""
    if isinstance(value, ChunkSet):
        return set(value.ids().tolist())
    return value


# (.coll, Python): the Python text sees p and q as the parameters.
CASES = [
    ("{a * 10 + b for a in 0 .. p for b in 0 .. q}", "{a * 10 + b for a in range(p) for b in range(q)}"),
    ("{a * 10 + b for a in 0 .. p for b in 0 .. a}", "{a * 10 + b for a in range(p) for b in range(a)}"),
    (
        "{a * 10 + b for a in 0 .. p if a % 2 == 0 for b in a .. q + a if (a + b) % 3 != 0}",
        "{a * 10 + b for a in range(p) if a % 2 == 0 for b in range(a, q + a) if (a + b) % 3 != 0}",
    ),
    (
        "{a + b + c for a in {0, p} for b in (q, 1) if b != a for c in 0 .. b if c > 0 if c != q}",
        "{a + b + c for a in {0, p} for b in (q, 1) if b != a for c in range(b) if c > 0 if c != q}",
    ),
    (
        "tuple(10 * a + b for a in 0 .. q for b in reversed(0 .. a))",
        "tuple(10 * a + b for a in range(q) for b in reversed(range(a)))",
    ),
    ("tuple(a - b for a in {q, 1, p} for b in (p, 0))", "tuple(a - b for a in sorted({q, 1, p}) for b in (p, 0))"),
    (
        "sum(a * b for a in 0 .. p for b in 0 .. q if a != b)",
        "sum(a * b for a in range(p) for b in range(q) if a != b)",
    ),
    ("prod(a + b for a in 1 .. p for b in 0 .. 2)", "math.prod(a + b for a in range(1, p) for b in range(2))"),
    (
        "len(0 for a in 0 .. p for b in 0 .. a for c in 0 .. b)",
        "len([0 for a in range(p) for b in range(a) for c in range(b)])",
    ),
    ("max(a * q - b for a in 0 .. p for b in 0 .. q)", "max(a * q - b for a in range(p) for b in range(q))"),
    ("min(a * q - b * b for a in 0 .. p for b in 0 .. q)", "min(a * q - b * b for a in range(p) for b in range(q))"),
    ("any(a * b == q for a in 0 .. p for b in 0 .. p)", "any(a * b == q for a in range(p) for b in range(p))"),
    ("all(a + b < p + q for a in 0 .. p for b in 0 .. q)", "all(a + b < p + q for a in range(p) for b in range(q))"),
    (
        "union({a, b + 20} for a in 0 .. p for b in 0 .. a)",
        "{x for a in range(p) for b in range(a) for x in (a, b + 20)}",
    ),
    ("{a for a in 0 .. p for a in (a, a + 10)}", "{a2 for a in range(p) for a2 in (a, a + 10)}"),  # rebinding
    (
        "any((a, b) == (1, 2) for a in 0 .. p for b in 0 .. q)",
        "any((a, b) == (1, 2) for a in range(p) for b in range(q))",
    ),
]


@pytest.mark.parametrize(("coll", "py"), CASES)
@pytest.mark.parametrize(("p", "q"), [(1, 1), (3, 2), (4, 3), (6, 5)])
def test_comprehension_matches_python(coll: str, py: str, p: int, q: int) -> None:
    assert python(value_of(coll, p, q)) == eval(py, {"p": p, "q": q, "math": math})


def test_clauses_nest_left_to_right() -> None:
    """The last clause varies fastest and sees the earlier variables, as in Python."""
    got = value_of("tuple(100 * a + 10 * b + c for a in 1 .. 3 for b in 0 .. a for c in (b, 7))", 4, 3)
    assert got == tuple(100 * a + 10 * b + c for a in range(1, 3) for b in range(a) for c in (b, 7))
    assert got[:4] == (100, 107, 200, 207)


def test_a_function_body_and_a_phase_evaluate_several_clauses() -> None:
    """Functions keep their variables at fixed positions, phases in a dictionary: both nest the clauses."""
    extra = "fn pairs(n, m) = len(0 for a in 0 .. n for b in a .. m if (a + b) % 2 == 0)\n"
    for n, m in [(0, 3), (3, 3), (5, 7)]:
        want = len([0 for a in range(n) for b in range(a, m) if (a + b) % 2 == 0])
        assert value_of(f"pairs({n}, {m})", 4, 3, extra) == want
    text = (
        f"{HEADER}phase a:\n"
        "  step:\n"
        "    send {c for r in {rank} for c in 0 .. p if c == r} to (rank + 1) mod p\n"
        "    recv {c for r in {(rank - 1) mod p} for c in {r, r}} from (rank - 1) mod p copy\n"
    )
    schedule = elaborate(parse_program(text, "t.coll"), {"p": 4, "q": 3})
    sends = {op.rank: op.chunks.ids().tolist() for op in schedule.steps[0].ops if op.kind is OpKind.SEND}
    recvs = {op.rank: op.chunks.ids().tolist() for op in schedule.steps[0].ops if op.kind is OpKind.RECV}
    assert sends == {r: [r] for r in range(4)}
    assert recvs == {r: [(r - 1) % 4] for r in range(4)}


def test_comprehension_variables_stay_inside() -> None:
    extra = "let a = 100\n"
    assert value_of("(sum(a + b for a in 0 .. 2 for b in 0 .. 2), a)", 4, 3, extra) == (4, 100)


@pytest.mark.parametrize(
    ("expr", "message", "index"),
    [
        # an earlier clause cannot see a later clause's variable
        ("{a for a in 0 .. b for b in 0 .. 3}", "unknown name 'b'", 17),
        ("{a + b for a in 0 .. 3 if b > 0 for b in 0 .. 3}", "unknown name 'b'", 26),
        ("{a for a in 0 .. 3 for b in 0 .. 3 if b}", "comprehension filter must be a bool", 38),
    ],
)
def test_errors_in_clauses_point_at_the_clause(expr: str, message: str, index: int) -> None:
    """``index``: where in ``expr`` the error is (the expression starts at column 14)."""
    column = 14 + index
    with pytest.raises(CollError) as info:
        constants(parse_program(f"{HEADER}let result = {expr}\n", "t.coll"), {"p": 4, "q": 3})
    assert message in info.value.message
    assert info.value.span is not None and (info.value.span.line, info.value.span.column) == (5, column)


def test_an_inner_clause_over_an_int_is_an_error_of_the_comprehension() -> None:
    with pytest.raises(CollError) as info:
        value_of("sum(a for a in 0 .. 3 for b in 5)", 4, 3)
    assert "an int" in info.value.message
    assert info.value.span is not None and (info.value.span.line, info.value.span.column) == (5, 14)


@pytest.mark.parametrize(
    ("expr", "message", "index"),
    [
        ("{a for a in 0 .. 3 for}", "unexpected '}'; expected a name", 22),
        ("{a for a in 0 .. 3 for b 0 .. 3}", "unexpected '0'; expected 'in'", 25),
        ("sum(a for a in 0 .. 3 if)", "unexpected ')'; expected '(', '+', '-'", 24),
        ("{a for a 0 .. 3}", "unexpected '0'; expected 'in'", 9),
    ],
)
def test_an_incomplete_clause_is_a_syntax_error_where_it_goes_wrong(expr: str, message: str, index: int) -> None:
    """Not a bracket "never closed" when it is closed: the token the parser stopped at, and what it expected
    (the end of a line cannot come inside brackets)."""
    column = 14 + index
    with pytest.raises(CollError) as info:
        parse_program(f"{HEADER}let result = {expr}\n", "t.coll")
    assert info.value.message.startswith(message), info.value.message
    assert "end of line" not in info.value.message
    assert info.value.span is not None and (info.value.span.line, info.value.span.column) == (5, column)


def test_a_bracket_left_open_is_still_said_to_be_never_closed() -> None:
    with pytest.raises(CollError) as info:
        parse_program(f"{HEADER}let result = {{a for a in 0 .. 3\n", "t.coll")
    assert info.value.message == "'{' is never closed"
    assert info.value.span is not None and (info.value.span.line, info.value.span.column) == (5, 14)


def test_nested_clauses_spend_the_iteration_budget() -> None:
    """Every iteration of every clause counts: a huge product fails fast instead of running for ever."""
    with pytest.raises(CollError) as info:
        value_of("len(0 for a in 0 .. 100000 for b in 0 .. 100000 for c in 0 .. 100000)", 4, 3)
    assert "iteration" in info.value.message or "limit" in info.value.message
