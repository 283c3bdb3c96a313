"""Every error in a `.coll` file is the user's: a `CollError` at the right place, never a traceback.

One focused test per error category, through the API (`parse_program`,
`elaborate`) and, for a few, through the CLI (`collc check`), where an error is
``file:line:col: error: message`` then the source line and a caret line, and
exit code 2.  Known collc bugs are ``xfail(strict=True)`` with the reason.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from collc.cli import main as cli_main
from collc.diagnostics import CollError, format_error
from collc.elaborate import MAX_CALL_DEPTH, MAX_RANKS, elaborate
from collc.frontend.program import MAX_INCLUDE_DEPTH, PRELUDE_NAME, Program, load_program, parse_program
from collc.ir import Schedule

FILE = "t.coll"
# Lines 1-3 of most test programs; the interesting line is line 4 or 5.
HEADER = "algorithm t : allreduce\nparam p : int where p >= 1\nchunks 1\n"


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def parse_error(text: str, file: str = FILE) -> CollError:
    """The CollError that parsing/checking ``text`` raises."""
    with pytest.raises(CollError) as info:
        parse_program(text, file)
    return info.value


def elab_error(text: str, params: Mapping[str, Any] | None = None, file: str = FILE) -> CollError:
    """The CollError that elaborating ``text`` (which must parse) raises."""
    program = parse_program(text, file)
    with pytest.raises(CollError) as info:
        elaborate(program, {"p": 4} if params is None else params)
    return info.value


def col(text: str, line: int, needle: str) -> int:
    """1-based column of the first ``needle`` on ``line`` of ``text``."""
    source_line = text.splitlines()[line - 1]
    assert needle in source_line, (needle, source_line)
    return source_line.index(needle) + 1


def assert_at(
    err: CollError,
    phrase: str,
    line: int,
    column: int | None = None,
    *,
    file: str = FILE,
    sources: Mapping[str, str] | None = None,
) -> None:
    """``err`` says ``phrase`` and is located at ``file:line[:column]``; its formatting has a caret."""
    assert phrase in err.message, err.message
    assert err.span is not None, f"no span on {err.message!r}"
    assert err.span.file == file, err.span
    assert err.span.line == line, (err.span, err.message)
    if column is not None:
        assert err.span.column == column, (err.span, err.message)
    if sources is not None:
        text = format_error(err, sources)
        assert f"{file}:{line}:{err.span.column}: error: {err.message}" in text
        assert "^" in text.splitlines()[2]


def src(text: str, file: str = FILE) -> dict[str, str]:
    return {file: text}


class _Timeout(Exception):
    """Raised by `deadline` when the code under test runs past its time."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise `_Timeout` in the block after ``seconds`` (POSIX, main thread)."""

    def on_alarm(signum: int, frame: object) -> None:
        raise _Timeout(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# --------------------------------------------------------------------------
# Syntax errors
# --------------------------------------------------------------------------


def test_syntax_missing_colon() -> None:
    text = HEADER + "phase a\n  pass\n"
    err = parse_error(text)
    assert_at(err, "expected ':'", 4, len("phase a") + 1, sources=src(text))


def test_syntax_missing_colon_after_for() -> None:
    text = HEADER + "phase a:\n  for step s in 0 .. p\n    pass\n"
    assert_at(parse_error(text), "expected ':'", 5, len("  for step s in 0 .. p") + 1)


def test_syntax_bad_indentation() -> None:
    text = HEADER + "phase a:\n    pass\n  pass\n"
    err = parse_error(text)
    assert_at(err, "matches no enclosing block", 6, 3, sources=src(text))


def test_syntax_dedent_to_unknown_level() -> None:
    text = HEADER + "phase a:\n    if true:\n        pass\n  pass\n"
    assert_at(parse_error(text), "matches no enclosing block", 7, 3)


def test_syntax_unexpected_indent() -> None:
    text = HEADER + "let x = 1\n  let y = 2\n"
    assert_at(parse_error(text), "unexpected indentation", 5, 1)


def test_syntax_tabs_and_spaces_mixed() -> None:
    text = HEADER + "phase a:\n \tpass\n"
    assert_at(parse_error(text), "mixes tabs and spaces", 5, 1)


def test_syntax_unmatched_close_paren() -> None:
    text = HEADER + "let x = 1 + 2)\n"
    err = parse_error(text)
    assert_at(err, "unexpected ')'", 4, col(text, 4, ")"), sources=src(text))


def test_syntax_unclosed_paren_at_end_of_file() -> None:
    text = HEADER + "fn f(a) = (a + 1\n"
    assert_at(parse_error(text), "'(' is never closed", 4, len("fn f(a) = ("))


def test_syntax_unclosed_paren_before_more_code() -> None:
    text = HEADER + "let x = (1 + 2\nphase a:\n  pass\n"
    assert_at(parse_error(text), "(", 4, col(text, 4, "("))


def test_syntax_unexpected_character() -> None:
    text = HEADER + "let x = 1 $ 2\n"
    err = parse_error(text)
    assert_at(err, "unexpected character '$'", 4, col(text, 4, "$"), sources=src(text))


@pytest.mark.parametrize("char", ["@", "?", "!", "`", "\x00", "≤"])
def test_syntax_unexpected_character_variants(char: str) -> None:
    text = HEADER + f"phase a:\n  let y = 1 {char} 2\n"
    assert_at(parse_error(text), "unexpected character", 5, col(text, 5, char))


def test_syntax_truncated_mid_expression() -> None:
    text = HEADER + "phase a:\n  for step s in 0 .."
    assert_at(parse_error(text), "unexpected end of line", 5, len("  for step s in 0 ..") + 1)


def test_syntax_truncated_after_block_header() -> None:
    text = HEADER + "phase a:"
    err = parse_error(text)
    assert_at(err, "unexpected end of file; expected an indented block", 4, len("phase a:") + 1)
    assert "end of file" in format_error(err, src(text))


def test_syntax_truncated_header() -> None:
    assert_at(parse_error("algorithm t :"), "expected a name", 1, len("algorithm t :") + 1)


def test_syntax_empty_file() -> None:
    assert_at(parse_error(""), "expected 'algorithm'", 1, 1)


def test_syntax_string_where_expression_expected() -> None:
    text = HEADER + 'let x = "abc"\n'
    assert_at(parse_error(text), "unexpected '\"abc\"'", 4, col(text, 4, '"'))


def test_syntax_exchange_missing_receive() -> None:
    text = HEADER + "phase a:\n  exchange with (rank + 1) mod p: send 0\n"
    assert_at(parse_error(text), "expected ';'", 5)


def test_syntax_header_in_included_position() -> None:
    text = HEADER + "algorithm u : allreduce\n"
    assert_at(parse_error(text), "unexpected 'algorithm'", 4, 1)


def test_syntax_long_operator_chain_is_no_traceback() -> None:
    text = HEADER + "let x = " + " + ".join(["1"] * 1000) + "\n"
    program = parse_program(text, FILE)
    elaborate(program, {"p": 4})


def test_syntax_many_unary_operators_is_no_traceback() -> None:
    text = HEADER + "let x = " + "- " * 1000 + "1\n"
    program = parse_program(text, FILE)
    elaborate(program, {"p": 4})


def test_syntax_deeply_nested_blocks_parse() -> None:
    depth = 300
    body = "".join("  " * (i + 1) + "if true:\n" for i in range(depth)) + "  " * (depth + 1) + "pass\n"
    elaborate(parse_program(HEADER + "phase a:\n" + body, FILE), {"p": 2})


def test_syntax_absurdly_deep_nesting_is_an_error() -> None:
    text = HEADER + "let x = " + "- " * 30000 + "1\n"
    with pytest.raises(CollError, match="nested too deeply"):
        parse_program(text, FILE)


def test_syntax_deeply_nested_parens_parse() -> None:
    program = parse_program(HEADER + "let x = " + "(" * 2000 + "1" + ")" * 2000 + "\n", FILE)
    elaborate(program, {"p": 2})


# --------------------------------------------------------------------------
# Names, functions, arity
# --------------------------------------------------------------------------


def test_unknown_name_global() -> None:
    text = HEADER + "let x = y + 1\n"
    err = parse_error(text)
    assert_at(err, "unknown name 'y'", 4, col(text, 4, "y"), sources=src(text))


def test_unknown_name_in_phase() -> None:
    text = HEADER + "phase a:\n  send 0 to nxt\n"
    assert_at(parse_error(text), "unknown name 'nxt'", 5, col(text, 5, "nxt"))


def test_unknown_name_loop_variable_out_of_scope_in_function() -> None:
    text = HEADER + "fn f(a) = a + b\n"
    assert_at(parse_error(text), "unknown name 'b'", 4, col(text, 4, "b"))


def test_unknown_name_function_used_as_value() -> None:
    text = HEADER + "let x = log2\n"
    assert_at(parse_error(text), "log2 is a function", 4, col(text, 4, "log2"))


def test_unknown_function() -> None:
    text = HEADER + "let x = foo(1)\n"
    err = parse_error(text)
    assert_at(err, "unknown function 'foo'", 4, col(text, 4, "foo"), sources=src(text))


def test_unknown_procedure() -> None:
    text = HEADER + "phase a:\n  do nothing_here(1)\n"
    assert_at(parse_error(text), "unknown procedure 'nothing_here'", 5, col(text, 5, "do"))


def test_procedure_called_as_function() -> None:
    text = HEADER + "proc pr(a):\n  pass\nlet x = pr(1)\n"
    assert_at(parse_error(text), "pr is a procedure", 6, col(text, 6, "pr"))


def test_function_run_as_procedure() -> None:
    text = HEADER + "fn f(a) = a\nphase a:\n  do f(1)\n"
    assert_at(parse_error(text), "unknown procedure 'f' (it is a function", 6, col(text, 6, "do"))


def test_arity_user_function() -> None:
    text = HEADER + "fn f(a, b) = a + b\nlet x = f(1)\n"
    err = parse_error(text)
    assert_at(err, "f() takes 2 argument(s), got 1", 5, col(text, 5, "f("), sources=src(text))


def test_arity_builtin() -> None:
    text = HEADER + "let x = log2(1, 2)\n"
    assert_at(parse_error(text), "log2() takes 1 argument(s), got 2", 4, col(text, 4, "log2"))


def test_arity_builtin_range_of_counts() -> None:
    text = HEADER + "let x = range(1, 2, 3, 4)\n"
    assert_at(parse_error(text), "range() takes 1 to 3 argument(s), got 4", 4, col(text, 4, "range"))


def test_arity_prelude_function() -> None:
    text = HEADER + "phase a:\n  send 0 to ring_next(rank, 1)\n"
    assert_at(parse_error(text), "ring_next() takes 1 argument(s), got 2", 5, col(text, 5, "ring_next"))


def test_arity_procedure() -> None:
    text = HEADER + "proc pr(a):\n  pass\nphase a:\n  do pr(1, 2)\n"
    err = parse_error(text)
    assert_at(err, "procedure pr takes 1 argument(s), got 2", 7, col(text, 7, "do"), sources=src(text))


def test_comprehension_on_function_that_takes_none() -> None:
    text = HEADER + "let x = log2(i for i in 0 .. 3)\n"
    assert_at(parse_error(text), "log2() cannot take a comprehension", 4, col(text, 4, "log2"))


# --------------------------------------------------------------------------
# Program structure
# --------------------------------------------------------------------------


def test_unknown_collective() -> None:
    text = "algorithm t : allfoo\nparam p : int\nchunks 1\n"
    err = parse_error(text)
    assert_at(err, "unknown collective 'allfoo'", 1, col(text, 1, "allfoo"), sources=src(text))
    assert "allreduce" in err.message


def test_unknown_parameter_type() -> None:
    text = "algorithm t : allreduce\nparam p : float\nchunks 1\n"
    assert_at(parse_error(text), "unknown parameter type 'float'", 2, col(text, 2, "float"))


def test_missing_chunks_declaration() -> None:
    text = "algorithm t : allreduce\nparam p : int\nphase a:\n  pass\n"
    err = parse_error(text)
    assert_at(err, "does not declare its chunking", 1, 1, sources=src(text))


def test_missing_p() -> None:
    text = "algorithm t : allreduce\nchunks 1\n"
    assert_at(parse_error(text), "does not define p", 1, 1)


def test_rooted_collective_without_root() -> None:
    text = "algorithm t : broadcast\nparam p : int\nchunks 1\n"
    assert_at(parse_error(text), "needs a root", 1, 1)


@pytest.mark.parametrize(
    ("extra", "phrase", "line"),
    [
        ("param p : int\n", "'p' is defined twice (first at line 2)", 4),
        ("let x = 1\nlet x = 2\n", "'x' is defined twice (first at line 4)", 5),
        ("param k : int = 1\nlet k = 2\n", "'k' is defined twice (first at line 4)", 5),
        ("fn f(a) = a\nfn f(b) = b\n", "'f' is defined twice (first at line 4)", 5),
        ("proc pr(a):\n  pass\nproc pr(b):\n  pass\n", "'pr' is defined twice (first at line 4)", 6),
        ("fn g(a) = a\nproc g(b):\n  pass\n", "'g' is defined twice (first at line 4)", 5),
        ("phase a:\n  pass\nphase a:\n  pass\n", "phase 'a' is defined twice", 6),
        ("chunks 2\n", "the chunking is declared twice (first at line 3)", 4),
        ("fn log2(a) = a\n", "'log2' is a builtin function and cannot be redefined", 4),
    ],
)
def test_duplicate_definitions(extra: str, phrase: str, line: int) -> None:
    text = HEADER + extra
    err = parse_error(text)
    assert_at(err, phrase, line, 1, sources=src(text))


def test_duplicate_function_parameter() -> None:
    text = HEADER + "fn f(a, a) = a\n"
    assert_at(parse_error(text), "parameter a is listed twice", 4, col(text, 4, "a)"))


def test_user_may_redefine_prelude_function() -> None:
    program = parse_program(HEADER + "fn ring_next(r) = (r + 2) mod p\n", FILE)
    assert program.fns["ring_next"].span.file == FILE


# --------------------------------------------------------------------------
# rank outside a phase
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("let x = rank + 1\n", "rank"),
        ("fn f(a) = rank + a\n", "rank"),
        ("assert rank >= 0\n", "rank"),
    ],
)
def test_rank_outside_phase(extra: str, needle: str) -> None:
    text = HEADER + extra
    err = parse_error(text)
    phrase = "'rank' is only defined inside phases and procedures"
    assert_at(err, phrase, 4, col(text, 4, needle), sources=src(text))


def test_rank_in_parameter_default() -> None:
    text = "algorithm t : allreduce\nparam p : int = rank\nchunks 1\n"
    assert_at(parse_error(text), "'rank' is only defined inside", 2, col(text, 2, "rank"))


def test_rank_in_chunks() -> None:
    text = "algorithm t : allreduce\nparam p : int\nchunks rank\n"
    assert_at(parse_error(text), "'rank' is only defined inside", 3, col(text, 3, "rank"))


def test_rank_cannot_be_assigned() -> None:
    text = HEADER + "phase a:\n  let rank = 1\n"
    assert_at(parse_error(text), "'rank' is reserved", 5, 3)


def test_rank_cannot_be_a_parameter() -> None:
    text = HEADER + "param rank : int\n"
    assert_at(parse_error(text), "'rank' is reserved", 4, 1)


# --------------------------------------------------------------------------
# Type errors (found while elaborating)
# --------------------------------------------------------------------------


def test_type_peer_is_a_set() -> None:
    text = HEADER + "phase a:\n  send {1} | 2 to {3}\n"
    err = elab_error(text)
    assert_at(err, "a peer must be an int rank, not a set", 5, 3, sources=src(text))
    assert any("rank 0" in n for n in err.notes)


def test_type_exchange_peer_is_a_set() -> None:
    text = HEADER + "phase a:\n  exchange with {1}: send 0; recv 0 reduce\n"
    assert_at(elab_error(text), "a peer must be an int rank, not a set", 5)


def test_type_if_condition_is_an_int() -> None:
    text = HEADER + "phase a:\n  if 3:\n    pass\n"
    err = elab_error(text)
    assert_at(err, "condition must be a bool", 5, col(text, 5, "3"), sources=src(text))


def test_type_conditional_expression_condition() -> None:
    text = HEADER + "let x = 1 if 2 else 3\n"
    assert_at(elab_error(text), "condition must be a bool", 4, col(text, 4, "2"))


def test_type_len_of_int() -> None:
    text = HEADER + "let x = len(5)\n"
    err = elab_error(text)
    assert_at(err, "len() needs a set, a range or a tuple", 4, col(text, 4, "len"), sources=src(text))


def test_type_chunks_is_a_set() -> None:
    text = "algorithm t : allreduce\nparam p : int\nchunks {1}\n"
    assert_at(elab_error(text), "the number of chunks must be an int", 3, 1)


def test_type_for_over_int() -> None:
    text = HEADER + "phase a:\n  for s in 5:\n    pass\n"
    assert_at(elab_error(text), "cannot iterate over a", 5, col(text, 5, "5"))


def test_type_set_minus_int_compare() -> None:
    text = HEADER + "let x = {1} < {2}\n"
    assert_at(elab_error(text), "cannot compare set < set", 4, col(text, 4, "{1}"))


def test_type_in_needs_collection() -> None:
    text = HEADER + "let x = 1 in 2\n"
    assert_at(elab_error(text), "'in' needs a set, a range or a tuple", 4, col(text, 4, "1"))


def test_type_operands() -> None:
    text = HEADER + "let x = (1, 2) + 1\n"
    assert_at(elab_error(text), "unsupported operand types for +: tuple and int", 4, col(text, 4, "("))


def test_type_negative_set_element() -> None:
    text = HEADER + "phase a:\n  send -1 to (rank + 1) mod p\n"
    assert_at(elab_error(text), "-1 is negative", 5, 3)


def test_type_parameter_value_of_wrong_kind() -> None:
    text = HEADER + "param k : int = 1\n"
    assert_at(elab_error(text, {"p": 4, "k": (2, 2)}), "parameter k is an int", 4, 1)


# --------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------


def test_parameter_violates_constraint() -> None:
    text = "algorithm t : allreduce\nparam p : int where p >= 1 and p % 2 == 0\nchunks 1\n"
    err = elab_error(text, {"p": 7})
    assert err.message == "p=7 violates the constraint p % 2 == 0"
    assert_at(err, "violates", 2, col(text, 2, "p % 2"), sources=src(text))
    assert err.span is not None
    assert err.span.end_column == col(text, 2, "p % 2") + len("p % 2 == 0")


def test_parameter_violates_first_conjunct() -> None:
    text = "algorithm t : allreduce\nparam p : int where p >= 2 and p % 2 == 0\nchunks 1\n"
    err = elab_error(text, {"p": 0})
    assert err.message == "p=0 violates the constraint p >= 2"
    assert_at(err, "violates", 2, col(text, 2, "p >= 2"))


def test_parameter_default_violates_constraint() -> None:
    text = "algorithm t : broadcast\nparam p : int\nparam root : int = 5 where 0 <= root < p\nchunks 1\n"
    err = elab_error(text, {"p": 4})
    assert err.message == "root=5 violates the constraint 0 <= root < p"
    assert_at(err, "violates", 3, col(text, 3, "0 <= root"))


def test_parameter_missing() -> None:
    text = HEADER + "param k : int\n"
    err = elab_error(text, {"p": 4})
    assert_at(err, "missing value for parameter k (pass --param k=VALUE)", 4, 1, sources=src(text))


def test_parameter_p_missing() -> None:
    err = elab_error(HEADER, {})
    assert_at(err, "missing value for parameter p (pass -p N)", 2, 1)


def test_parameter_unknown() -> None:
    err = elab_error(HEADER, {"p": 4, "zz": 1})
    assert_at(err, "unknown parameter 'zz'", 1, 1, sources=src(HEADER))
    assert "its parameters: p" in err.message


def test_p_beyond_supported_maximum() -> None:
    err = elab_error(HEADER, {"p": MAX_RANKS + 1})
    assert_at(err, f"p={MAX_RANKS + 1} is out of the supported range 1..{MAX_RANKS}", 2, 1)


def test_p_at_supported_maximum_is_accepted_by_the_range_check() -> None:
    text = "algorithm t : allreduce\nparam p : int\nchunks 1\nassert p < 0\n"
    err = elab_error(text, {"p": MAX_RANKS})
    assert_at(err, "assertion failed", 4, 1)  # got past the range check


def test_p_zero_without_constraint() -> None:
    text = "algorithm t : allreduce\nparam p : int\nchunks 1\n"
    assert_at(elab_error(text, {"p": 0}), "p=0 is out of the supported range", 2, 1)


# --------------------------------------------------------------------------
# Evaluation errors
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "phrase"),
    [
        ("1 // 0", "division by zero"),
        ("1 / 0", "division by zero"),
        ("p // (p - p)", "division by zero"),
        ("1 % 0", "modulo by zero"),
        ("1 mod 0", "modulo by zero"),
        ("7 / 2", "7 / 2 is not exact; use // for floor division"),
        ("2 ** 70", "2 ** 70 does not fit in 64 bits"),
        ("1 << 80", "1 << 80 does not fit in 64 bits"),
        ("4294967296 * 4294967296", "does not fit in 64 bits"),
        ("9223372036854775807 + 1", "does not fit in 64 bits"),
        ("-(-9223372036854775807 - 1)", "does not fit in 64 bits"),
        ("99999999999999999999", "integer literal 99999999999999999999 does not fit in 64 bits"),
        ("2 ** -1", "negative exponent"),
        ("1 << -1", "negative shift count"),
        ("log2(0)", "log2 of 0 is undefined"),
        ("(1, 2)[5]", "index 5 out of range"),
        ("min({})", "min() of an empty collection"),
        ("range(0, 4, 0)", "range() step must not be zero"),
        ("bitreverse(1, 64)", "bit width 64 must be in 0..63"),
        ("{1 << 40}", "beyond the limit"),
        ("set(0 .. 1 << 40)", "beyond the limit"),
    ],
)
def test_evaluation_error_in_constant(expr: str, phrase: str) -> None:
    text = HEADER + f"let x = {expr}\n"
    err = elab_error(text)
    assert err.span is not None
    assert_at(err, phrase, 4, sources=src(text))
    assert err.span.column >= col(text, 4, expr[0])


def test_evaluation_error_in_function_body_points_at_function() -> None:
    text = HEADER + "fn f(a) = 10 // a\nphase a:\n  send f(0) to (rank + 1) mod p\n"
    assert_at(elab_error(text), "division by zero", 4, col(text, 4, "10"))


def test_evaluation_error_inside_prelude_function() -> None:
    text = HEADER + "phase a:\n  exchange with swing_peer(rank, 100): send 0; recv 0 reduce\n"
    program = parse_program(text, FILE)
    with pytest.raises(CollError) as info:
        elaborate(program, {"p": 4})
    prelude_line = next(
        i for i, line in enumerate(program.sources[PRELUDE_NAME].splitlines(), 1) if "fn swing_rho" in line
    )
    assert_at(info.value, "does not fit in 64 bits", prelude_line, file=PRELUDE_NAME, sources=program.sources)


def test_product_overflow_in_loop() -> None:
    text = HEADER + "fn big(n) = 1 if n == 0 else 1000 * big(n - 1)\nlet x = big(10)\n"
    assert_at(elab_error(text), "does not fit in 64 bits", 4, col(text, 4, "1000"))


def test_peer_out_of_range() -> None:
    text = HEADER + "phase a:\n  send 0 to rank + p\n"
    err = elab_error(text)
    assert_at(err, "peer 4 is out of range 0..3 (at rank 0)", 5, 3, sources=src(text))


def test_peer_negative() -> None:
    text = HEADER + "phase a:\n  recv 0 from rank - 1 copy\n"
    assert_at(elab_error(text), "peer -1 is out of range", 5, 3)


def test_rank_names_itself_as_peer() -> None:
    text = HEADER + "phase a:\n  send 0 to rank\n"
    err = elab_error(text)
    assert_at(err, "rank 0 names itself as its peer", 5, 3, sources=src(text))


def test_chunk_out_of_range() -> None:
    text = HEADER + "phase a:\n  send 5 to (rank + 1) mod p\n"
    err = elab_error(text)
    assert_at(err, "chunk 5 is out of range 0..0", 5, 3, sources=src(text))


def test_chunk_count_out_of_range() -> None:
    text = "algorithm t : allreduce\nparam p : int\nchunks 1 << 40\n"
    assert_at(elab_error(text), "must be in 1..", 3, 1)


def test_chunk_layout_mismatch() -> None:
    text = "algorithm t : allgather\nparam p : int\nchunks p + 1\n"
    assert_at(elab_error(text), "divisible by p", 3, 1)


def test_recursion_deeper_than_limit() -> None:
    text = HEADER + "fn f(n) = f(n + 1)\nlet x = f(0)\n"
    err = elab_error(text)
    assert_at(err, f"recursion deeper than {MAX_CALL_DEPTH} calls in f()", 4, col(text, 4, "f(n + 1)"))


def test_mutual_recursion_deeper_than_limit() -> None:
    text = HEADER + "fn f(n) = g(n + 1)\nfn g(n) = f(n + 1)\nlet x = f(0)\n"
    err = elab_error(text)
    assert_at(err, f"recursion deeper than {MAX_CALL_DEPTH} calls in f()", 5, col(text, 5, "f(n + 1)"))


def test_procedure_recursion_deeper_than_limit() -> None:
    text = HEADER + "proc r(n):\n  do r(n + 1)\nphase a:\n  do r(0)\n"
    assert_at(elab_error(text), f"recursion deeper than {MAX_CALL_DEPTH} calls in r", 5, 3)


def test_step_nested_in_step() -> None:
    text = HEADER + "phase a:\n  step:\n    step:\n      pass\n"
    err = elab_error(text)
    phrase = "a step cannot contain another step (the enclosing step starts at line 5)"
    assert_at(err, phrase, 6, 5, sources=src(text))


def test_step_loop_nested_in_step() -> None:
    text = HEADER + "phase a:\n  step:\n    for step s in 0 .. 2:\n      pass\n"
    assert_at(elab_error(text), "a step cannot contain another step", 6, 5)


def test_ranks_disagree_on_phase_of_a_step() -> None:
    text = HEADER + "phase a:\n  if rank == 0:\n    step:\n      pass\nphase b:\n  step:\n    pass\n"
    assert_at(elab_error(text), "every rank must count the same steps", 9, 3)


def test_assertion_failing_global() -> None:
    text = HEADER + "assert p > 100\n"
    err = elab_error(text)
    assert_at(err, "assertion failed: p > 100", 4, 1, sources=src(text))


def test_assertion_failing_with_message_at_rank() -> None:
    text = HEADER + 'phase a:\n  assert rank < 2, "small ranks only"\n'
    err = elab_error(text)
    assert_at(err, "assertion failed at rank 2: small ranks only", 5, 3)


def test_assertion_failing_in_function() -> None:
    text = HEADER + "fn f(a):\n  assert a > 0\n  return a\nlet x = f(0)\n"
    assert_at(elab_error(text), "assertion failed: a > 0", 5, 3)


def test_used_before_definition() -> None:
    text = HEADER + "let x = f(1)\nlet y = 3\nfn f(a) = y\n"
    assert_at(elab_error(text), "'y' is used before its definition is evaluated", 6, col(text, 6, "y"))


def test_len_of_huge_range_is_no_traceback() -> None:
    text = HEADER + "let x = len(-9223372036854775807 .. 9223372036854775807)\n"
    program = parse_program(text, FILE)
    with pytest.raises(CollError, match="does not fit in 64 bits"):
        elaborate(program, {"p": 2})
    # a long range that fits: no iteration needed
    text = HEADER + "let x = len(0 .. 1 << 40)\nassert x == 1 << 40\n"
    elaborate(parse_program(text, FILE), {"p": 2})


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs SIGALRM")
def test_set_comprehension_over_huge_range_fails_fast() -> None:
    text = HEADER + "let x = {i for i in 0 .. 1 << 40}\n"
    program = parse_program(text, FILE)
    with deadline(2.0), pytest.raises(CollError, match="beyond the limit"):
        elaborate(program, {"p": 2})


# --------------------------------------------------------------------------
# Includes
# --------------------------------------------------------------------------


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_include_missing_file(tmp_path: Path) -> None:
    main = _write(tmp_path / "main.coll", HEADER + 'include "lib/nope.coll"\n')
    with pytest.raises(CollError) as info:
        load_program(main)
    assert_at(info.value, "cannot include 'lib/nope.coll'", 4, 1, file=str(main))


def test_include_cycle(tmp_path: Path) -> None:
    main = _write(tmp_path / "main.coll", HEADER + 'include "lib/a.coll"\n')
    _write(tmp_path / "lib" / "a.coll", '# a\ninclude "b.coll"\n')
    b = _write(tmp_path / "lib" / "b.coll", '\n\ninclude "a.coll"\n')
    with pytest.raises(CollError) as info:
        load_program(main)
    err = info.value
    assert_at(err, "include cycle", 3, 1, file=str(b.resolve()))
    assert "a.coll -> " in err.message


def test_included_file_may_not_declare_a_phase(tmp_path: Path) -> None:
    main = _write(tmp_path / "main.coll", HEADER + 'include "lib/c.coll"\n')
    lib = _write(tmp_path / "lib" / "c.coll", "fn f(x) = x\nphase a:\n  pass\n")
    with pytest.raises(CollError) as info:
        load_program(main)
    assert_at(info.value, "an included file may not declare a phase", 2, 1, file=str(lib.resolve()))


def test_includes_nested_too_deep(tmp_path: Path) -> None:
    main = _write(tmp_path / "main.coll", HEADER + 'include "f0.coll"\n')
    for i in range(MAX_INCLUDE_DEPTH + 4):
        _write(tmp_path / f"f{i}.coll", f'# {i}\ninclude "f{i + 1}.coll"\n')
    _write(tmp_path / f"f{MAX_INCLUDE_DEPTH + 4}.coll", "\n")
    with pytest.raises(CollError) as info:
        load_program(main)
    deepest = str((tmp_path / f"f{MAX_INCLUDE_DEPTH - 1}.coll").resolve())
    assert_at(info.value, f"includes nested deeper than {MAX_INCLUDE_DEPTH}", 2, 1, file=deepest)


def test_include_of_undecodable_file(tmp_path: Path) -> None:
    main = _write(tmp_path / "main.coll", HEADER + 'include "bin.coll"\n')
    (tmp_path / "bin.coll").write_bytes(b"fn f(x) = x # \xff\xfe\n")
    with pytest.raises(CollError) as info:
        load_program(main)
    assert_at(info.value, "cannot include 'bin.coll'", 4, 1, file=str(main))


def test_syntax_error_in_included_file(tmp_path: Path) -> None:
    main = _write(tmp_path / "main.coll", HEADER + 'include "lib/c.coll"\n')
    lib = _write(tmp_path / "lib" / "c.coll", "fn f(x) = x\nfn g(x) = (x\n")
    with pytest.raises(CollError) as info:
        load_program(main)
    assert_at(info.value, "'(' is never closed", 2, len("fn g(x) = ("), file=str(lib.resolve()))


def test_self_include_is_a_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "main.coll", HEADER + 'include "main.coll"\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CollError) as info:
        load_program("main.coll")
    assert "include cycle" in info.value.message, info.value.message


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CollError, match="cannot read"):
        load_program(tmp_path / "absent.coll")


# --------------------------------------------------------------------------
# Through the CLI
# --------------------------------------------------------------------------


def _cli(args: list[str]) -> Any:
    result = CliRunner().invoke(cli_main, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result


def assert_cli_error(stderr: str, file: str, line: int, column: int, phrase: str) -> None:
    """``file:line:col: error: ...phrase...``, then the source line, then a caret under ``column``."""
    lines = stderr.splitlines()
    assert len(lines) >= 3, f"no source line and caret after the message:\n{stderr}"
    assert lines[0].startswith(f"{file}:{line}:{column}: error: "), stderr
    assert phrase in lines[0], stderr
    gutter = f"{line:>5} | "
    assert lines[1].startswith(gutter), stderr
    assert lines[2].startswith(" " * (len(gutter) + column - 1) + "^"), stderr
    assert "Traceback" not in stderr


def test_cli_syntax_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.coll", HEADER + "phase a\n  pass\n")
    result = _cli(["check", str(path), "-p", "4"])
    assert result.exit_code == 2
    assert_cli_error(result.stderr, str(path), 4, 8, "expected ':'")
    assert result.stderr.splitlines()[1] == "    4 | phase a"


def test_cli_unknown_name(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.coll", HEADER + "phase a:\n  send 0 to nxt\n")
    result = _cli(["check", str(path), "-p", "4"])
    assert result.exit_code == 2
    assert_cli_error(result.stderr, str(path), 5, 13, "unknown name 'nxt'")


def test_cli_elaboration_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.coll", HEADER + "phase a:\n  send 0 to rank + p\n")
    result = _cli(["check", str(path), "-p", "4"])
    assert result.exit_code == 2
    assert_cli_error(result.stderr, str(path), 5, 3, "peer 4 is out of range 0..3")
    assert "note: while elaborating rank 0" in result.stderr


def test_cli_constraint_violation(tmp_path: Path) -> None:
    text = "algorithm t : allreduce\nparam p : int where p >= 1 and p % 2 == 0\nchunks 1\n"
    path = _write(tmp_path / "even.coll", text)
    result = _cli(["check", str(path), "-p", "7"])
    assert result.exit_code == 2
    column = col(text, 2, "p % 2")
    assert_cli_error(result.stderr, str(path), 2, column, "p=7 violates the constraint p % 2 == 0")
    caret = result.stderr.splitlines()[2]
    assert caret.strip() == "^" + "~" * (len("p % 2 == 0") - 1)


def test_cli_unknown_and_missing_parameters(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.coll", HEADER + "param k : int\n")
    result = _cli(["check", str(path), "-p", "4", "--param", "k=1", "--param", "zz=3"])
    assert result.exit_code == 2
    assert_cli_error(result.stderr, str(path), 1, 1, "unknown parameter 'zz'")
    result = _cli(["check", str(path), "-p", "4"])
    assert result.exit_code == 2
    assert_cli_error(result.stderr, str(path), 4, 1, "missing value for parameter k")


def test_cli_p_beyond_maximum(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.coll", HEADER)
    result = _cli(["check", str(path), "-p", str(MAX_RANKS + 1)])
    assert result.exit_code == 2
    assert_cli_error(result.stderr, str(path), 2, 1, "out of the supported range")


def test_cli_missing_file(tmp_path: Path) -> None:
    result = _cli(["check", str(tmp_path / "absent.coll"), "-p", "4"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no such file")


def test_cli_error_in_included_file_names_it(tmp_path: Path) -> None:
    path = _write(tmp_path / "main.coll", HEADER + 'include "lib/c.coll"\nphase a:\n  do pr()\n')
    lib = _write(tmp_path / "lib" / "c.coll", "proc pr():\n  send 0 to rank\n")
    result = _cli(["check", str(path), "-p", "4"])
    assert result.exit_code == 2
    assert_cli_error(result.stderr, str(lib.resolve()), 2, 3, "rank 0 names itself as its peer")


def test_cli_load_error_in_included_file_shows_source(tmp_path: Path) -> None:
    path = _write(tmp_path / "main.coll", HEADER + 'include "lib/c.coll"\n')
    lib = _write(tmp_path / "lib" / "c.coll", "fn f(x) = x\nfn g(x) = nope\n")
    result = _cli(["check", str(path), "-p", "4"])
    assert result.exit_code == 2
    assert_cli_error(result.stderr, str(lib.resolve()), 2, 11, "unknown name 'nope'")


def test_cli_long_expression_is_no_traceback(tmp_path: Path) -> None:
    path = _write(tmp_path / "long.coll", HEADER + "let x = " + " + ".join(["1"] * 1000) + "\n")
    result = CliRunner().invoke(cli_main, ["check", str(path), "-p", "4"])
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 1, 2)


def test_cli_subprocess_end_to_end(tmp_path: Path) -> None:
    """The installed entry point, in a fresh interpreter: exit 2 and a located message, no traceback."""
    text = HEADER + "fn f(a, b) = a + b\nphase a:\n  send f(1) to (rank + 1) mod p\n"
    path = _write(tmp_path / "arity.coll", text)
    proc = subprocess.run(
        [sys.executable, "-m", "collc.cli", "check", str(path), "-p", "4"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert_cli_error(proc.stderr, str(path), 6, col(text, 6, "f(1)"), "f() takes 2 argument(s), got 1")


# --------------------------------------------------------------------------
# Sanity: the helpers agree with a correct program
# --------------------------------------------------------------------------


def test_valid_program_elaborates() -> None:
    text = HEADER + "phase a:\n  exchange with rank ^ 1: send 0; recv 0 reduce\n"
    program: Program = parse_program(text, FILE)
    schedule: Schedule = elaborate(program, {"p": 2})
    assert schedule.nranks == 2
    assert PRELUDE_NAME in program.sources
