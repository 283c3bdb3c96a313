"""Messages of the command line: option errors name the option and the bad value, bad input is refused before
any verification, no Python repr reaches a message, every constraint error shows its source line and caret,
phase names print whole.

The compression traffic figures of `collc check` are tested in test_wire_traffic.py.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
from test_cli import EXAMPLES, RING, Outcome, cli

EXIT_INPUT = 2
R = EXAMPLES / "ring_allreduce.coll"
CR = EXAMPLES / "compression" / "compressed_ring_allreduce.coll"
TORUS = EXAMPLES / "torus" / "swing_bw_torus.coll"

# Python reprs that must never reach a user: None/True/False, numpy scalars, tuples and lists of ints.
PYTHON_REPR = re.compile(
    r"\bNone\b|\bTrue\b|\bFalse\b|np\.\w+\(|array\(|frozenset|\(\d+, \d+\)|\[\d+, \d+\]|Error: \[Errno"
)


def error_line(out: Outcome) -> str:
    """The ``Error: ...`` line click prints for a usage error."""
    lines = [line for line in out.stderr.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, out.text
    return lines[0]


# --------------------------------------------------------------------------
# Every option error names its option and the value it got
# --------------------------------------------------------------------------

# (arguments, the option as the error names it, the value as the error shows it)
OPTION_ERRORS = [
    (("check", R, "-p", "2..x"), "'-p' / '--ranks'", "'2..x'"),
    (("check", R, "-p", "2,x"), "'-p' / '--ranks'", "'2,x'"),
    (("check", R, "-p", "0"), "'-p' / '--ranks'", "'0'"),
    (("check", TORUS, "--dims", "4y4"), "'--dims'", "'4y4'"),
    (("check", TORUS, "--dims", "0x4"), "'--dims'", "'0x4'"),
    (("check", R, "--dims", "4x4", "-p", "4"), "'--dims'", "'4x4'"),
    (("check", TORUS, "-p", "4"), "'-p' / '--ranks'", "'4'"),
    (("check", R, "-p", "4", "--param", "k"), "'--param'", "'k'"),
    (("check", R, "-p", "4", "--param", "k=x"), "'--param'", "'k=x'"),
    (("check", R, "-p", "4", "--param", "k="), "'--param'", "'k='"),
    (("check", R, "-p", "4", "--param", "1k=3"), "'--param'", "'1k=3'"),
    (("check", R, "-p", "4", "--param", "k=2x2"), "'--param'", "'k=2x2'"),
    (("check", R, "-p", "4", "--param", "zz=3"), "'--param'", "'zz=3'"),
    (("check", R, "-p", "4", "--param", "p=5"), "'--param'", "'p=5'"),
    (("check", CR, "-p", "4", "--codec", "q"), "'--codec'", "'q'"),
    (("check", CR, "-p", "4", "--codec", "q=foo"), "'--codec'", "'q=foo'"),
    (("check", CR, "-p", "4", "--codec", "z=ebq(eb=1e-3)"), "'--codec'", "'z=ebq(eb=1e-3)'"),
    (("check", R, "-p", "4", "--trace", "99"), "'--trace'", "99"),
    (("check", R, "-p", "4", "--show", "0"), "'--show'", "0"),
    (("check", R, "-p", "4", "--jobs", "0"), "'--jobs' / '-j'", "0"),
    (("check", R, "-p", "4", "--model", "x"), "'--model'", "'x'"),
    (("check", R, "-p", "4", "--tolerance", "x"), "'--tolerance'", "'x'"),
    (("check", R, "-p", "4", "--input-bound", "-1"), "'--input-bound'", "-1"),
    (("show", R, "-p", "4", "--rank", "9"), "'--rank'", "'9'"),
    (("show", R, "-p", "4", "--rank", "x"), "'--rank'", "'x'"),
    (("show", R, "-p", "4", "--dims", "4"), "'--dims'", "'4'"),
    (("run", R, "-p", "4", "--size", "x"), "'--size'", "'x'"),
    (("run", R, "-p", "4", "--size", "3"), "'--size'", "'3'"),
    (("run", R, "-p", "4", "--sizes", "1K:foo"), "'--sizes'", "'1K:foo'"),
    (("run", R, "-p", "4", "--sizes", "8K:1K"), "'--sizes'", "'8K:1K'"),
    (("run", R, "-p", "4", "--mpiexec-args", "'a"), "'--mpiexec-args'", '"\'a"'),
    (("run", R, "-p", "4", "--dtype", "complex64"), "'--dtype'", "'complex64'"),
    (("run", R, "-p", "4", "--op", "xor"), "'--op'", "'xor'"),
    (("run", R, "-p", "4", "--iters", "0"), "'--iters'", "0"),
    (("run", R, "-p", "4", "--backend", "x"), "'--backend'", "'x'"),
    (("compile", R, "-p", "4", "-t", "foo", "-o", "OUT"), "'--target' / '-t'", "'foo'"),
    (("export", R, "-p", "4", "--min-bytes", "x"), "'--min-bytes'", "'x'"),
    (("export", R, "-p", "4", "--min-bytes", "8K", "--max-bytes", "1K"), "'--max-bytes'", "'1K'"),
    (("export", R, "-p", "4", "--max-bytes", str(1 << 64)), "'--max-bytes'", f"'{1 << 64}'"),
    (("export", R, "-p", "4", "--proto", "y"), "'--proto'", "'y'"),
    (("export", R, "-p", "4", "--max-steps", "0"), "'--max-steps'", "0"),
    (("viz", R, "-p", "4", "-o", "OUT.jpg"), "'-o' / '--output'", "OUT.jpg"),
    (("viz", R, "-p", "4", "-o", "OUT.png", "--chunk", "99"), "'--chunk'", "99"),
    (("viz", R, "-p", "4", "-o", "OUT.png", "--steps", "a..b"), "'--steps'", "'a..b'"),
    (("viz", R, "-p", "4", "-o", "OUT.png", "--max-panels", "0"), "'--max-panels'", "0"),
    (("sim", R, "--topology", "mesh:4"), "'--topology'", "'mesh:4'"),
    (("sim", "x=", "--topology", "ring:4"), "'FILE'", "'x='"),
    (("sim", R, "--topology", "ring:4", "--sizes", "1K:x"), "'--sizes'", "'1K:x'"),
    (("sim", R, "--topology", "ring:4", "--link-bw", "0Gb/s"), "'--link-bw'", "'0Gb/s'"),
    (("sim", R, "--topology", "ring:4", "--link-latency", "x"), "'--link-latency'", "'x'"),
    (("sim", R, "--topology", "ring:4", "--hop-latency", "3 parsecs"), "'--hop-latency'", "'3 parsecs'"),
    (("sim", R, "--topology", "ring:4", "--step-overhead", "x"), "'--step-overhead'", "'x'"),
    (("sim", R, "--topology", "ring:4", "--codec-bw", "0"), "'--codec-bw'", "'0'"),
    (("sim", R, "--topology", "ring:4", "--routing", "x"), "'--routing'", "'x'"),
    (("sim", R, "--topology", "ring:4", "--plot", "OUT.jpg"), "'--plot'", "OUT.jpg"),
    (("sim", R, "--topology", "ring:4", "--param", "k=x"), "'--param'", "'k=x'"),
    (("sim", R, "--topology", "ring:4", "--param", "=3"), "'--param'", "'=3'"),
    (("sim", R, "--topology", "ring:4", "--param", "foo=1"), "'--param'", "'foo=1'"),
    (("sim", R, "--topology", "ring:4", "--param", "k=4x4"), "'--param'", "'k=4x4'"),
]


@pytest.mark.parametrize(
    ("args", "option", "value"), OPTION_ERRORS, ids=[" ".join(str(a) for a in row[0][2:]) for row in OPTION_ERRORS]
)
def test_an_option_error_names_the_option_and_the_value(
    tmp_path: Path, args: tuple[str | Path, ...], option: str, value: str
) -> None:
    args = tuple(str(a).replace("OUT", str(tmp_path / "out")) for a in args)
    value = value.replace("OUT", str(tmp_path / "out"))
    out = cli(*args)
    assert out.code == EXIT_INPUT, out.text
    line = error_line(out)
    assert line.startswith(f"Error: Invalid value for {option}: "), line
    assert value in line[len(f"Error: Invalid value for {option}: ") :], line
    assert "Traceback" not in out.text and not PYTHON_REPR.search(line), line
    assert out.stdout == ""  # nothing was checked, run or drawn first


# --------------------------------------------------------------------------
# Commands that take one instance
# --------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["compile", "run", "show", "export", "viz"])
def test_a_range_of_ranks_for_one_instance_points_to_check(tmp_path: Path, command: str) -> None:
    extra = {"compile": ("-t", "mpi-py", "-o", str(tmp_path / "x")), "viz": ("-o", str(tmp_path / "x.png"))}
    out = cli(command, R, "-p", "2..8", *extra.get(command, ()))
    assert out.code == EXIT_INPUT, out.text
    if command == "compile":  # mpi-c takes ranges: the error says which targets do
        assert error_line(out) == (
            "Error: Invalid value for '-p' / '--ranks': collc compile --target mpi-py takes one rank count, got "
            "'2..8' (7 values): a range is for --target mpi-c (one library for every p of it), -p any for mpi-c "
            "and mpi-cuda; 'collc check FILE -p 2..8' checks a range"
        )
    else:
        assert error_line(out) == (
            f"Error: Invalid value for '-p' / '--ranks': collc {command} takes one rank count, got '2..8' (7 values); "
            "'collc check FILE -p 2..8' checks a range"
        )
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.png").exists()


def test_a_range_of_another_parameter_for_one_instance_points_to_check() -> None:
    out = cli("show", R, "-p", "4", "--param", "k=1,2")
    assert error_line(out) == (
        "Error: Invalid value for '--param': collc show takes one value of k, got 'k=1,2' (2 values); "
        "'collc check FILE --param k=1,2' checks a range"
    )
    out = cli("show", TORUS, "--dims", "4x4,8x8")
    assert "collc show takes one torus shape, got '4x4,8x8' (2 values)" in error_line(out)


def test_check_takes_the_range_that_show_refuses() -> None:
    out = cli("check", R, "-p", "2..8")
    assert out.code == 0, out.text
    assert "correct for every instance, p=2 .. p=8" in out.stdout


# --------------------------------------------------------------------------
# Bad input is refused before any verification
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-p", "2..8", "--dims", "4x4"), "'4x4': unknown parameter 'dims' for ring_allreduce (its parameters: p, k)"),
        (("-p", "2..8", "--param", "zz=1..3"), "'zz=1..3': unknown parameter 'zz' for ring_allreduce"),
        (("-p", "2..8", "--param", "k=2x2,4x4"), "'k=2x2,4x4': parameter k is an int, got 2x2"),
        (("-p", "2..8", "--dims", "4x4", "--json"), "unknown parameter 'dims'"),
    ],
)
def test_check_refuses_bad_parameters_before_verifying_a_range(args: tuple[str, ...], message: str) -> None:
    out = cli("check", R, *args)
    assert out.code == EXIT_INPUT, out.text
    assert out.stdout == ""  # no FAILS report, no JSON
    assert "FAILS" not in out.text
    assert message in error_line(out)


def test_a_missing_parameter_is_refused_before_verifying_a_range(tmp_path: Path) -> None:
    path = tmp_path / "t.coll"
    path.write_text(RING.replace("chunks p\n", "param k : int where k >= 1\nchunks p\n"))
    out = cli("check", path, "-p", "2..6")
    assert out.code == EXIT_INPUT, out.text
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert lines[0] == f"{path}:4:1: error: missing value for parameter k (pass --param k=VALUE)"
    assert lines[2] == " " * 8 + "^" + "~" * (len("param k : int where k >= 1") - 1)


def test_a_range_whose_instances_all_violate_the_constraints_is_an_input_error() -> None:
    out = cli("check", R, "-p", "2..4", "--param", "k=-2..0")
    assert out.code == EXIT_INPUT, out.text
    assert "no instance in the range satisfies the program's constraints (9 skipped)" in out.stdout
    first = out.stderr.splitlines()
    assert first[0] == f"{R}:5:25: error: k=-2 violates the constraint k >= 1"
    assert first[2] == " " * 32 + "^~~~~~"


# --------------------------------------------------------------------------
# No Python repr in any message
# --------------------------------------------------------------------------


def _mutants() -> list[object]:
    benchmarks = str(Path(__file__).resolve().parents[1] / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    import mutants

    return mutants.select(mutants.generate_mutants(), 60, seed=1)


@pytest.fixture(scope="module")
def failing_reports(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str]]:
    """(mutant, check's text output) for a sample of mutants of the examples that do not verify."""
    root = tmp_path_factory.mktemp("mutants")
    shutil.copytree(EXAMPLES, root / "examples")
    reports = []
    for m in _mutants():
        target = root / m.file  # type: ignore[attr-defined]
        original = target.read_text()
        target.write_text(m.text)  # type: ignore[attr-defined]
        try:
            args = ("-p", "5", "--param", "root=1") if "root" in original or "root" in m.text else ("-p", "5")  # type: ignore[attr-defined]
            out = cli("check", root / m.program, *args, "--show", "50")  # type: ignore[attr-defined]
            if out.code != 0:
                reports.append((m.key, out.text))  # type: ignore[attr-defined]
        finally:
            target.write_text(original)
    return reports


def test_failing_reports_show_no_python_repr(failing_reports: list[tuple[str, str]]) -> None:
    assert len(failing_reports) >= 30
    notes = 0
    for key, text in failing_reports:
        for line in text.splitlines():
            if re.match(r"\s*\d+ \| ", line):  # a source line, quoted as written
                continue
            assert not PYTHON_REPR.search(line), f"{key}: {line}"
            notes += "note: expected contributions" in line
    assert notes >= 10  # the sample reaches the findings that carry contents


SENDS_UNHELD = """algorithm g : allgather
param p : int where p >= 2
chunks p
phase a:
  for step s in 0 .. p - 1:
    send {(rank + 1) mod p} to (rank + 1) mod p
    recv {rank} from (rank - 1) mod p copy
"""


def test_a_send_of_nothing_says_so_once(tmp_path: Path) -> None:
    """A finding with no expected contents (a send of data the rank does not hold) had a note "expected
    contributions None, actual {}"; its message says what is wrong, and the postcondition's note what is held."""
    path = tmp_path / "g.coll"
    path.write_text(SENDS_UNHELD)
    out = cli("check", path, "-p", "3", "--show", "50")
    assert out.code == 1, out.text
    lines = out.stdout.splitlines()
    sends = [i for i, line in enumerate(lines) if "but holds no data for it" in line]
    assert len(sends) == 6  # ranks 0..2, steps 0 and 1
    for i in sends:
        assert not lines[i + 3].startswith("  note:")  # the source line, the caret, then the next finding
    assert "note: expected contributions {0}, actual none" in out.stdout
    assert not PYTHON_REPR.search(out.stdout)


def test_an_output_left_compressed_names_the_codec(tmp_path: Path) -> None:
    src = (EXAMPLES / "lib" / "compressed_ring.coll").read_text()
    lines = [line for line in src.splitlines() if line.strip().startswith("decompress")]
    assert lines, "the library decompresses somewhere"
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    (tmp_path / "examples" / "lib" / "compressed_ring.coll").write_text(
        src.replace(lines[-1], lines[-1].replace("decompress", "# decompress"))
    )
    out = cli("check", tmp_path / "examples" / "compression" / "compressed_ring_allgather.coll", "-p", "4")
    assert out.code == 1, out.text
    assert "note: expected raw data, actual data compressed with ebq(eb=0.001)" in out.stdout
    assert not PYTHON_REPR.search(out.stdout)


def test_a_sweep_failure_shows_no_python_repr(tmp_path: Path) -> None:
    path = tmp_path / "g.coll"
    path.write_text(SENDS_UNHELD)
    out = cli("check", path, "-p", "2..6")
    assert out.code == 1 and "FAILS" in out.stdout, out.text
    assert "holds no data for it" in out.stdout and not PYTHON_REPR.search(out.stdout)


def test_parameter_type_errors_write_values_as_the_command_line_does() -> None:
    from collc import api

    alg = api.load(TORUS)
    assert alg.param_problem("dims", (0, 4)) == "parameter dims needs torus dimensions like 4x4, got 0x4"
    assert alg.param_problem("ports", (2, 2)) == "parameter ports is an int, got 2x2"
    assert alg.param_problem("dims", (4, 4)) is None


# --------------------------------------------------------------------------
# Constraint errors show the source line and the caret, in check and in sim
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "file", "line", "column", "message"),
    [
        (("check", TORUS, "--dims", "5x5"), TORUS, 19, 25, "dims=5x5 violates the constraint"),
        (("sim", TORUS, "--topology", "torus:5x5"), TORUS, 19, 25, "dims=5x5 violates the constraint"),
        (("sim", EXAMPLES / "torus" / "hamiltonian_torus.coll", "--topology", "ring:4"),
         EXAMPLES / "torus" / "hamiltonian_torus.coll", 15, 25, "dims=4 violates the constraint len(dims) == 2"),
        (("sim", R, "--topology", "ring:4", "--param", "k=0"), R, 5, 25, "k=0 violates the constraint k >= 1"),
        (("check", R, "-p", "4", "--param", "k=0"), R, 5, 25, "k=0 violates the constraint k >= 1"),
    ],
)  # fmt: skip
def test_a_constraint_error_shows_the_line_and_caret(
    args: tuple[str | Path, ...], file: Path, line: int, column: int, message: str
) -> None:
    out = cli(*args)
    assert out.code == EXIT_INPUT, out.text
    lines = out.stderr.splitlines()
    assert lines[0].startswith(f"{file}:{line}:{column}: error: {message}"), out.stderr
    gutter = f"{line:>5} | "
    assert lines[1] == gutter + file.read_text().splitlines()[line - 1]
    assert lines[2].startswith(" " * (len(gutter) + column - 1) + "^")


# --------------------------------------------------------------------------
# Phase names print whole
# --------------------------------------------------------------------------

LONG_PHASES = RING.replace("phase reduce_scatter:", "phase reduce_scatter_along_the_ring:").replace(
    "phase allgather:", "phase ag:"
)


def test_trace_and_show_print_phase_names_whole(tmp_path: Path) -> None:
    path = tmp_path / "long.coll"
    path.write_text(LONG_PHASES)
    assert cli("check", path, "-p", "4").code == 0
    width = len("reduce_scatter_along_the_ring")
    trace = cli("check", path, "-p", "4", "--trace", "1").stdout.splitlines()
    header, rows = trace[1], trace[2 : trace.index("at the end:")]
    # step (5), two spaces, the phase padded to the longest name, a space, the rank right-aligned in 5
    assert header[: 7 + width + 6] == f"{'step':>5}  {'phase':<{width}} {'rank':>5}"
    assert len(rows) > 4
    for row in rows:
        assert row[7 : 7 + width].rstrip() in ("reduce_scatter_along_the_ring", "ag"), row
        assert row[7 + width] == " " and row[7 + width + 1 : 7 + width + 6].strip().isdigit(), row
    show = cli("show", path, "-p", "4").stdout.splitlines()
    assert show[1][: 7 + width + 6] == f"{'step':>5}  {'phase':<{width}} {'rank':>5}"
    for row in show[3:]:
        assert row[7 : 7 + width].rstrip() in ("reduce_scatter_along_the_ring", "ag"), row
        assert row[7 + width + 1 : 7 + width + 6].strip().isdigit(), row
