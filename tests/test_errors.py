"""Every error in a `.coll` file is the user's: a `CollError` at the right place, never a traceback.

One focused test per error category, through the API (`parse_program`,
`elaborate`) and, for a few, through the CLI (`collc check`), where an error is
``file:line:col: error: message`` then the source line and a caret line, and
exit code 2.  Known collc bugs are ``xfail(strict=True)`` with the reason.
"""

from __future__ import annotations

import pytest
from error_helpers import (  # noqa: F401
    FILE,
    HEADER,
    assert_at,
    col,
    deadline,
    elab_error,
    parse_error,
    src,
)

from collc.diagnostics import CollError, format_error
from collc.elaborate import MAX_RANKS, elaborate
from collc.frontend.program import parse_program

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
