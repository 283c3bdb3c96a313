"""Regression tests for the bugs the front-end fuzzer (tests/coll_fuzz.py) found: each input used to end in a
traceback, a hang, a diagnostic without a useful location, or an unreadable message.  Each test asserts the
message and where it points."""

from __future__ import annotations

import json
import random
from pathlib import Path

from error_helpers import FILE, HEADER, assert_at, col, elab_error, parse_error, src

from collc import api
from collc.codecs import parse_codec
from collc.diagnostics import format_error
from collc.elaborate import MAX_STEPS, elaborate
from collc.frontend.parse import MAX_NAME, MAX_NESTING
from collc.frontend.program import parse_program
from collc.report import report_json, report_text
from collc.values import make_set
from collc.verify.check import check

RING_HEAD = "algorithm t : allgather\nparam p : int where p >= 1\nchunks p\n"
RING_BODY = (
    "phase a:\n  for step s in 0 .. p - 1:\n"
    "    send (rank - s) mod p to ring_next(rank) compress q\n"
    "    recv (rank - s - 1) mod p from ring_prev(rank) copy compress q\n"
)


def _codec_error(spec: str):  # type: ignore[no-untyped-def]
    text = RING_HEAD + f"codec q = {spec}\n" + RING_BODY
    err = parse_error(text)
    assert_at(err, "", 4, col(text, 4, spec.split("(")[0]), sources=src(text))
    return err


# --------------------------------------------------------------------------
# Codec specs (collc/codecs/registry.py, collc/frontend/program.py)
# --------------------------------------------------------------------------


def test_codec_integer_too_large_for_a_float_is_out_of_range() -> None:
    # was: OverflowError: int too large to convert to float (a traceback)
    err = _codec_error("ebq(eb=" + "9" * 400 + ")")
    assert "ebq: eb=" in err.message and "(400 characters) is out of range" in err.message
    assert len(err.message) < 200


def test_codec_integer_beyond_pythons_conversion_limit_is_out_of_range() -> None:
    # was: "Exceeds the limit (4300 digits) for integer string conversion", and the whole number in the message
    err = _codec_error("fwq(bits=" + "9" * 5000 + ", block=64)")
    assert "fwq: bits=" in err.message and "out of range (integers are below 2^63)" in err.message
    assert "Exceeds" not in err.message and len(err.message) < 200


def test_codec_infinite_float_is_out_of_range() -> None:
    err = _codec_error("ebq(eb=1e400)")
    assert "ebq: eb=1e400 is out of range (too large for a double)" in err.message


def test_codec_float_too_large_for_an_integer_parameter() -> None:
    try:
        parse_codec("fwq(bits=1e300, block=64)")
    except ValueError as err:
        assert str(err) == "fwq: bits is out of range, got 1e+300"
    else:
        raise AssertionError("fwq(bits=1e300) was accepted")


def test_long_codec_spec_is_shortened_in_the_message() -> None:
    # was: the 12000-character spec printed in full
    err = _codec_error("ebq(" + ", ".join(["1e-3"] * 2000) + ")")
    assert (
        err.message == "bad codec spec 'ebq(1e-3, 1e-3, 1e... 1e-3) (12003 characters)': ebq takes 1 parameter(s) (eb)"
    )
    try:  # as --codec q=SPEC gives it
        parse_codec("nosuchcodec" + "x" * 3000)
    except ValueError as error:
        assert str(error).startswith("unknown codec 'nosuchcodecxxxxxxx...xxxxxx (3011 characters)' (known: ")
    else:
        raise AssertionError("an unknown codec was accepted")


def test_long_codec_parameter_name_is_shortened() -> None:
    try:  # as --codec q=SPEC gives it (in a program, the name itself is too long: see the test of names below)
        parse_codec("ebq(eb=1e-3, x" + "y" * 3000 + "=1)")
    except ValueError as error:
        assert str(error) == "ebq: unknown parameter 'xyyyyyyyyyyyyyyyyy...yyyyyy (3001 characters)' (parameters: eb)"
    else:
        raise AssertionError("an unknown codec parameter was accepted")


# --------------------------------------------------------------------------
# Runaway programs (collc/elaborate/emitter.py, driver.py)
# --------------------------------------------------------------------------


def test_step_loop_without_a_sane_bound_stops_at_the_limit_on_steps() -> None:
    # was: a million-step loop per rank ran on for minutes and gigabytes before the iteration limit; its
    # iterations alone pass the limit, so it stops before it runs
    text = HEADER + "phase a:\n  for step s in 0 .. 1 << 25:\n    pass\n"
    err = elab_error(text, {"p": 2})
    message = (
        f"rank 0 would count {1 << 25} steps with the step loop at line 5 ({1 << 25} iterations), beyond the limit "
        f"of {MAX_STEPS} steps (2^20); is the loop's bound wrong?"
    )
    assert err.message == message
    assert_at(err, message, 5, 3, sources=src(text))
    assert err.notes == ("while elaborating rank 0",)


def test_a_step_loop_whose_steps_each_cost_stops_before_it_runs() -> None:
    # was: a mutated PAT reduce-scatter (a count of 2^26 times too many steps, each step's chunk sets computed)
    # ran for minutes before the step limit; the loop's own size passes the limit, so it stops at once
    text = (Path(__file__).resolve().parent.parent / "examples" / "pat_reduce_scatter.coll").read_text()
    bad = text.replace("(p - d + 2 * d - 1) // (2 * d)", "(p - d + 67108865 * d - 1) // (2 * d)")
    assert bad != text
    err = elab_error(bad, {"p": 6})  # the message says it stopped before the loop ran
    assert "would count 5592406 steps with the step loop" in err.message and "beyond the limit" in err.message


def test_step_blocks_in_a_plain_loop_stop_at_the_limit_on_steps() -> None:
    text = HEADER + "phase a:\n  for i in 0 .. 1 << 25:\n    step:\n      pass\n"
    err = elab_error(text, {"p": 1})
    assert_at(err, "beyond the limit of 1048576 steps", 6, 5, sources=src(text))
    assert "in the step at line 6" in err.message


def test_ops_outside_steps_count_toward_the_limit_on_steps() -> None:
    text = HEADER + "phase a:\n  for i in 0 .. 1 << 21:\n    send 0 to (rank + 1) mod p\n"
    assert_at(elab_error(text, {"p": 2}), "beyond the limit of 1048576 steps", 6, 5)


def test_ranks_times_chunks_beyond_what_collc_keeps_state_for() -> None:
    # was: accepted, then the verifier allocated p x chunks fingerprints (32 GiB here) and the machine ran out
    text = "algorithm t : allreduce\nparam p : int\nchunks 1 << 26\n"
    err = elab_error(text, {"p": 64})
    message = "64 ranks x 67108864 chunks make 4294967296 (rank, chunk) slots, beyond the limit of 268435456 (2^28)"
    assert_at(err, message + " that collc keeps state for", 3, 1, sources=src(text))
    at_limit = elaborate(parse_program(text.replace("1 << 26", "1 << 22"), FILE), {"p": 64})  # 2^28 slots
    assert at_limit.nchunks * at_limit.nranks == 1 << 28


def test_p_out_of_range_is_reported_before_the_constants_that_use_it() -> None:
    # was: "ceil_log2 of 0 ..." at the let, for a p that was never allowed
    text = "algorithm t : allreduce\nparam p : int\nchunks 1\nlet L = ceil_log2(p)\nlet q = 1 << p\n"
    assert_at(elab_error(text, {"p": 0}), "p=0 is out of the supported range 1..131072", 2, 1, sources=src(text))
    assert_at(elab_error(text, {"p": 1 << 64}), f"p={1 << 64} is out of the supported range", 2, 1)


def test_p_out_of_range_is_reported_where_its_constraint_cannot_be_evaluated() -> None:
    # was: a 64-bit overflow in the constraint, for p = 2^64
    text = "algorithm t : allreduce\nparam p : int where p * p >= 1\nchunks 1\n"
    assert_at(elab_error(text, {"p": 1 << 64}), f"p={1 << 64} is out of the supported range", 2, 1)
    violated = "algorithm t : allreduce\nparam p : int where p >= 2\nchunks 1\n"
    assert elab_error(violated, {"p": 0}).message == "p=0 violates the constraint p >= 2"  # a constraint first


def test_p_defined_by_a_constant_is_range_checked_at_it() -> None:
    text = "algorithm t : allreduce\nparam n : int\nlet p = n * 0\nlet L = ceil_log2(p)\nchunks 1\n"
    assert_at(elab_error(text, {"n": 3}), "p=0 is out of the supported range", 3, 1, sources=src(text))


def test_long_constraint_is_shortened_in_the_violation() -> None:
    # was: the whole 4000-character constraint quoted in the message
    text = "algorithm t : allreduce\nparam p : int where p >= 1" + " + 1" * 1000 + "\nchunks 1\n"
    err = elab_error(text, {"p": 2})
    shown = "p >= 1" + " + 1" * 18 + "... 1 + 1 (4006 characters)"
    assert err.message == f"p=2 violates the constraint {shown}"
    assert_at(err, "violates", 2, col(text, 2, "p >="), sources=src(text))


def test_recursion_too_deep_for_python_in_a_constant_points_at_it() -> None:
    # was: "the program recurses too deeply to evaluate" at the header, line 1
    text = HEADER + "fn f(x) = 0 if x <= 0 else " + "-" * 2400 + "f(x - 1)\nlet v = f(399)\n"
    err = elab_error(text, {"p": 2})
    assert_at(err, "evaluating constant v recurses too deeply", 5, 1, sources=src(text))


def test_recursion_too_deep_for_python_in_a_phase_points_at_it() -> None:
    text = HEADER + "fn f(x) = 0 if x <= 0 else " + "-" * 2400 + "f(x - 1)\nphase a:\n  let v = f(399)\n"
    err = elab_error(text, {"p": 2})
    assert_at(err, "phase a recurses too deeply to evaluate", 5, 1, sources=src(text))
    assert err.notes == ("while elaborating rank 0",)


# --------------------------------------------------------------------------
# Nesting (collc/frontend/parse.py, collc/elaborate)
# --------------------------------------------------------------------------


def test_brackets_nested_past_the_limit_are_refused_at_the_first_one_too_many() -> None:
    text = HEADER + "let x = " + "(" * 3000 + "1" + ")" * 3000 + "\n"
    err = parse_error(text)
    first = len("let x = ") + 1
    assert_at(err, f"brackets are nested too deeply here: more than {MAX_NESTING} levels", 4, first + MAX_NESTING)


def test_operators_nested_past_the_limit_are_refused_on_their_line() -> None:
    # was: RecursionError turned into "nested too deeply" at line 1, column 1 (or "recurses too deeply" at the header)
    for expr in ("-" * 3000 + "1", "not " * 3000 + "true", " + ".join(["1"] * 3000), " ** ".join(["2"] * 3000)):
        text = HEADER + "phase a:\n  let x = " + expr + "\n"
        err = parse_error(text)
        assert_at(err, f"the program is nested too deeply here: more than {MAX_NESTING} levels", 5, sources=src(text))
        assert err.span is not None and 11 <= err.span.column <= len(text.split("\n")[4])


def test_blocks_nested_past_the_limit_are_refused_inside() -> None:
    depth = 1300  # two levels of the parse tree a block
    body = "".join("  " * (i + 1) + "if true:\n" for i in range(depth)) + "  " * (depth + 1) + "pass\n"
    text = HEADER + "phase a:\n" + body
    err = parse_error(text)
    assert "nested too deeply here" in err.message
    assert err.span is not None and 4 + depth // 2 <= err.span.line <= 5 + depth


def test_nesting_below_the_limit_elaborates() -> None:
    for expr in ("-" * 2400 + "rank", " + ".join(["rank"] * 2400), "(" * 2400 + "rank" + ")" * 2400):
        elaborate(parse_program(HEADER + "phase a:\n  let x = " + expr + "\n", FILE), {"p": 2})


def test_deeply_nested_failing_constant_is_reported_at_its_innermost_cause() -> None:
    # was: every level tried to fold its failing subexpression again (quadratic: minutes for 2500 levels)
    depth = 2400
    text = HEADER + "phase a:\n  let x = " + "{" * depth + "1" + "}" * depth + "\n"
    err = elab_error(text, {"p": 2})
    assert_at(err, "a set element must be an int, not a set", 5, len("  let x = ") + depth - 1)  # at {{1}}


# --------------------------------------------------------------------------
# Literals and tokens (collc/frontend/parse.py, collc/elaborate/syntax.py)
# --------------------------------------------------------------------------


def test_integer_literal_beyond_pythons_conversion_limit() -> None:
    # was: VisitError: "Exceeds the limit (4300 digits) for integer string conversion" (a traceback)
    text = HEADER + "let x = " + "9" * 5000 + "\n"
    err = parse_error(text)
    assert err.message == "integer literal 999999999999999999...999999 (5000 characters) does not fit in 64 bits"
    assert_at(err, "does not fit in 64 bits", 4, 9, sources=src(text))


def test_long_integer_literal_is_shortened_in_the_message() -> None:
    text = HEADER + "let x = " + "9" * 60 + "\n"
    err = elab_error(text)
    assert err.message == "integer literal 999999999999999999...999999 (60 characters) does not fit in 64 bits"
    assert_at(err, "does not fit", 4, 9)


def test_long_unexpected_token_is_shortened() -> None:
    text = HEADER + "phase a:\n  " + "9" * 5000 + "\n"
    err = parse_error(text)
    assert err.message.startswith("unexpected '999999999999999999...999999 (5000 characters)'; expected ")
    assert_at(err, "unexpected", 5, 3)


def test_overlong_names_are_refused_where_they_are() -> None:
    # was: every message naming one (unknown name, defined twice, missing parameter ...) printed it whole
    name = "y" * 3000
    for line in (f"let x = {name}", f"let {name} = 1", f"phase a:\n  do {name}()", f"param {name} : int"):
        text = HEADER + line + "\n"
        err = parse_error(text)
        at = col(text, 4 + line.count("\n"), name)
        message = (
            "this name is 3000 characters long (yyyyyyyyyyyyyyyyyy...yyyyyy (3000 characters)); "
            f"names are at most {MAX_NAME} characters"
        )
        assert err.message == message
        assert_at(err, message, 4 + line.count("\n"), at, sources=src(text))
    parse_program(HEADER + "let " + "z" * MAX_NAME + " = 1\n", FILE)  # at the limit: fine


def test_include_path_with_a_nul_character() -> None:
    # was: ValueError: embedded null byte (a traceback)
    text = HEADER + 'include "lib/ri\x00ng.coll"\n'
    err = parse_error(text)
    assert_at(err, "cannot include 'lib/ri\\x00ng.coll': a file name has no NUL character", 4, 1)


# --------------------------------------------------------------------------
# Line ends (collc/frontend/parse.py, collc/diagnostics.py)
# --------------------------------------------------------------------------


def test_lone_carriage_returns_end_lines() -> None:
    # was: a lone CR was an "unexpected character" and the caret showed another line than the error's
    text = HEADER + "phase a:\n  send 0 to nobody\n"
    for end in ("\r", "\r\n"):
        err = parse_error(text.replace("\n", end))
        assert_at(err, "unknown name 'nobody'", 5, col(text, 5, "nobody"), sources=err.sources)
        assert format_error(err, err.sources).splitlines()[1].endswith("send 0 to nobody")


def test_programs_with_cr_line_ends_elaborate_alike() -> None:
    text = api.resolve_path("ring_allreduce").read_text()
    file = str(api.resolve_path("ring_allreduce"))
    plain = api.parse(text, file).instantiate(p=4).schedule
    for end in ("\r", "\r\n"):
        other = api.parse(text.replace("\n", end), file).instantiate(p=4).schedule
        assert other.steps == plain.steps


def test_byte_order_mark_is_ignored() -> None:
    text = api.resolve_path("ring_allreduce").read_text()
    file = str(api.resolve_path("ring_allreduce"))
    assert api.parse("\ufeff" + text, file).instantiate(p=4).verify().ok


def test_form_feed_does_not_shift_the_caret() -> None:
    # str.splitlines breaks at a form feed, the parser does not: the caret showed the wrong line
    text = HEADER + "let y = 1 \x0c+ 1\nlet x = nobody\n"
    err = parse_error(text)
    assert_at(err, "unknown name 'nobody'", 5, 9, sources=src(text))
    assert format_error(err, src(text)).splitlines()[1].endswith("let x = nobody")


# --------------------------------------------------------------------------
# Large sets (collc/values.py, collc/verify/findings.py)
# --------------------------------------------------------------------------


def test_large_set_comprehensions_build_the_same_set() -> None:
    # was: each element or-ed into a growing int (quadratic: a million elements took minutes)
    rng = random.Random(7)
    for n in (0, 1, 63, 64, 65, 1000, 200_000):
        items = [rng.randrange(3 * n + 1) for _ in range(n)]
        expected = 0
        for i in sorted(set(items)):
            expected |= 1 << i
        assert make_set(items).bits == expected
    text = HEADER + "let s = {i for i in 0 .. 300000 if i % 3 == 0}\nassert len(s) == 100000\nassert 299997 in s\n"
    elaborate(parse_program(text, FILE), {"p": 2})


def test_many_failing_chunks_are_summarised_in_a_short_message() -> None:
    # was: every failing chunk formatted by or-ing bits into an int (minutes for millions) and listed in full
    text = "algorithm t : allgather\nparam p : int\nchunks 4096 * p\nphase a:\n  pass\n"
    report = api.parse(text, FILE).instantiate(p=2).verify()
    summary = report.findings[-1].message
    assert summary.startswith("8184 more chunks fail the postcondition (not traced): {")
    text2 = (
        "algorithm t : allgather\nparam p : int\nchunks 4096 * p\nphase a:\n"
        "  exchange with 1 - rank: send {c for c in block(rank, 4096) if c % 2 == 0}; "
        "recv {c for c in block(1 - rank, 4096) if c % 2 == 0} copy\n"
    )
    report = api.parse(text2, FILE).instantiate(p=2).verify()
    summary = report.findings[-1].message
    assert "..., " in summary and "(4088 in 4088 runs)" in summary and len(summary) < 250


# --------------------------------------------------------------------------
# Findings past the verifier's cap (collc/verify/check.py, collc/report.py)
# --------------------------------------------------------------------------


def test_findings_past_the_cap_are_worded() -> None:
    # was: "... and N more (--show N prints more, --json lists them)" for findings the report never kept
    text = "algorithm t : allgather\nparam p : int\nchunks p\nphase a:\n  send 0 .. p to (rank + 1) mod p\n"
    inst = api.parse(text, FILE).instantiate(p=8)
    report = check(inst.schedule, max_findings=5)
    assert not report.ok and len(report.findings) == 5 and report.omitted > 0
    total = dict(report.omitted_by_code)
    assert sum(total.values()) == report.omitted and list(total) == ["unmatched-send", "send-not-held", "postcondition"]
    words = report.omitted_text()
    assert words is not None and words.startswith(f"{report.omitted} more finding(s) not kept: the verifier keeps")
    assert words.endswith(
        f"at most 5 per instance ({total['unmatched-send']} unmatched-send, "
        f"{total['send-not-held']} send-not-held, {total['postcondition']} postcondition)"
    )
    shown = report_text(inst.schedule, report, {FILE: text}, shown=20)
    assert f"... and {words}" in shown and "--show N prints more" not in shown
    listed = report_text(inst.schedule, report, {FILE: text}, shown=2)
    assert "... and 3 more (--show N prints more, --json lists them)" in listed
    data = json.loads(json.dumps(report_json(inst.schedule, report)))
    assert data["omitted"] == report.omitted and data["omitted_by_code"] == total
