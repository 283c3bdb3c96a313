"""Evaluation, include and CLI errors: located, never a traceback."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from error_helpers import (  # noqa: F401
    FILE,
    HEADER,
    assert_at,
    col,
    collc_check_subprocess,
    deadline,
    elab_error,
    parse_error,
    src,
)

from collc.cli import main as cli_main
from collc.diagnostics import CollError
from collc.elaborate import MAX_CALL_DEPTH, MAX_RANKS, elaborate
from collc.frontend.program import MAX_INCLUDE_DEPTH, PRELUDE_NAME, Program, load_program, parse_program
from collc.ir import Schedule

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
    assert "Invalid value for '--param': 'zz=3': unknown parameter 'zz' for t (its parameters: p, k)" in result.stderr
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
    proc = collc_check_subprocess(path)
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
