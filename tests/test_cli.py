"""The `collc` command line: check, show, run and examples, their output and exit codes.

Most tests drive `collc.cli.main` in-process through click's CliRunner; a few
run the installed `collc` executable to cover the real entry point.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from collc import api
from collc.backends.local import DTYPES, OPS
from collc.cli import main
from collc.ir import Collective, Schedule, schedule_from_json

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"

EXIT_OK, EXIT_WRONG, EXIT_INPUT = 0, 1, 2

# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


def _runner() -> CliRunner:
    try:  # click < 8.2 mixes stderr into stdout unless told otherwise
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


def cli(*args: str | Path) -> Outcome:
    """Run `collc ARGS` in-process; any exception other than SystemExit fails the test."""
    result = _runner().invoke(main, [str(a) for a in args], catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"collc {' '.join(map(str, args))} crashed") from result.exception
    return Outcome(result.exit_code, result.stdout, result.stderr)


def cli_json(*args: str | Path, code: int = EXIT_OK) -> Any:
    out = cli(*args, "--json")
    assert out.code == code, out.text
    return json.loads(out.stdout)


@functools.cache
def _cached_stdout(*args: str) -> str:
    out = cli(*args, "--json")
    assert out.code == EXIT_OK, out.text
    return out.stdout


def cached_json(*args: str | Path) -> Any:
    """`cli_json` for deterministic, successful commands (check, show), run once per session.

    Every `collc` call builds its LALR parsers afresh (about a second each), so the
    same schedule is not elaborated again for each test that looks at it.
    """
    return json.loads(_cached_stdout(*map(str, args)))


def collc_command() -> list[str]:
    """The installed `collc` executable (next to this interpreter first, then on PATH)."""
    here = Path(sys.executable).parent / "collc"
    if here.is_file():
        return [str(here)]
    found = shutil.which("collc")
    if found is not None:
        return [found]
    return [sys.executable, "-c", "from collc.cli import main; main()"]


def collc_subprocess(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*collc_command(), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )


def example(name: str) -> Path:
    return EXAMPLES / f"{name}.coll"


def assert_no_traceback(out: Outcome | subprocess.CompletedProcess[str]) -> None:
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text


# --------------------------------------------------------------------------
# Programs and their mutants
# --------------------------------------------------------------------------

# A ring allreduce written out without `include`, so that mutants are self-contained.
RING = """\
# Ring allreduce, written inline.
algorithm ring_inline : allreduce
param p : int where p >= 2
chunks p

phase reduce_scatter:
  for step s in 0 .. p - 1:
    send block((rank - s - 1) mod p, 1) to ring_next(rank)
    recv block((rank - s - 2) mod p, 1) from ring_prev(rank) reduce
phase allgather:
  for step s in 0 .. p - 1:
    send block((rank - s) mod p, 1) to ring_next(rank)
    recv block((rank - s - 1) mod p, 1) from ring_prev(rank) copy
"""
RING_RS_SEND, RING_RS_RECV, RING_AG_SEND, RING_AG_RECV = 8, 9, 12, 13

# Recursive doubling on two chunks: send and receive share a line (`exchange`).
RD2 = """\
# Recursive doubling allreduce on two chunks.
algorithm rd2 : allreduce
param p : int where p >= 1 and is_pow2(p)
chunks 2

phase allreduce:
  for step s in 0 .. log2(p):
    exchange with rank ^ (1 << s): send {0, 1}; recv {0, 1} reduce
"""
RD2_EXCHANGE = 8

# A ring allreduce that insists on an even number of ranks.
EVEN = RING.replace("param p : int where p >= 2", "param p : int where p >= 2 and p % 2 == 0")
EVEN_PARAM_LINE = 3


def mutate(text: str, line: int, old: str, new: str) -> str:
    lines = text.splitlines(keepends=True)
    assert old in lines[line - 1], f"{old!r} is not on line {line}: {lines[line - 1]!r}"
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    return "".join(lines)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


MUTANTS = [
    pytest.param(RING, RING_RS_SEND, "to ring_next(rank)", "to (rank + 2) mod p", 4, id="ring-wrong-peer"),
    pytest.param(RING, RING_RS_RECV, ") reduce", ") copy", 4, id="ring-copy-instead-of-reduce"),
    pytest.param(RING, RING_AG_RECV, ") copy", ") reduce", 4, id="ring-reduce-instead-of-copy"),
    pytest.param(RD2, RD2_EXCHANGE, "send {0, 1}", "send {0}", 4, id="exchange-chunk-missing-from-send"),
]


def test_unmutated_programs_are_correct(tmp_path: Path) -> None:
    for name, text, p in (("ring.coll", RING, 5), ("rd2.coll", RD2, 8)):
        out = cli("check", write(tmp_path, name, text), "-p", p)
        assert out.code == EXIT_OK, out.text
        assert "correct" in out.stdout


# --------------------------------------------------------------------------
# collc check
# --------------------------------------------------------------------------


def test_check_swing_bw_subprocess() -> None:
    proc = collc_subprocess("check", "examples/swing_bw.coll", "-p", "16", cwd=REPO)
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    assert "swing_bw" in proc.stdout
    assert ": correct" in proc.stdout
    assert "WRONG" not in proc.stdout
    assert_no_traceback(proc)


def test_check_json_shape() -> None:
    data = cached_json("check", example("swing_bw"), "-p", "16")
    assert data["ok"] is True
    assert data["findings"] == []
    assert data["algorithm"] == "swing_bw"
    assert data["collective"] == "allreduce"
    assert data["params"] == {"p": 16}
    assert data["nranks"] == 16
    assert data["nchunks"] == 16
    assert set(data["stats"]) == {
        "steps",
        "messages",
        "max_chunks_sent",
        "max_chunks_received",
        "max_sent_fraction",
        "max_received_fraction",
        "max_fan_out",
        "max_fan_in",
        "fan_out_per_step",
        "fan_in_per_step",
        "latency_deficiency",
        "bandwidth_deficiency",
        "temp_buffer_steps",
    }
    # Swing, bandwidth-optimal: 2 log2(p) steps, 2(p-1)/p of the vector sent per rank.
    assert data["stats"]["steps"] == 8
    assert data["stats"]["max_sent_fraction"] == pytest.approx(2 * 15 / 16)


def recompute_stats(ir: dict[str, Any]) -> dict[str, Any]:
    """The check statistics, worked out from `collc show --json` alone."""
    p, n = ir["nranks"], ir["nchunks"]
    sent: dict[tuple[int, int, int], set[int]] = defaultdict(set)  # (step, src, dst) -> chunks
    got: dict[tuple[int, int, int], set[int]] = defaultdict(set)  # (step, dst, src) -> chunks
    steps = 0
    for step in ir["steps"]:
        steps += bool(step["ops"])
        for op in step["ops"]:
            table = sent if op["kind"] == "send" else got
            table[step["index"], op["rank"], op["peer"]].update(op["chunks"])
    per_rank_sent, per_rank_got = [0] * p, [0] * p
    fan_out: dict[tuple[int, int], int] = defaultdict(int)
    fan_in: dict[tuple[int, int], int] = defaultdict(int)
    for (step, src, _dst), chunks in sent.items():
        per_rank_sent[src] += len(chunks)
        fan_out[step, src] += 1
    for (step, dst, _src), chunks in got.items():
        per_rank_got[dst] += len(chunks)
        fan_in[step, dst] += 1
    vector = max(1, n // p if ir["collective"] == "alltoall" else n)
    order = sorted({step for step, _ in fan_out} | {step for step, _ in fan_in})
    bound = {"allreduce": 2 * (p - 1) / p}.get(ir["collective"], (p - 1) / p)
    if ir["collective"] in ("broadcast", "reduce") or p == 1:
        bound = 1.0
    sent_by: dict[tuple[int, int], set[int]] = defaultdict(set)
    got_by: dict[tuple[int, int], set[int]] = defaultdict(set)
    for (step, src, _dst), chunks in sent.items():
        sent_by[step, src] |= chunks
    for (step, dst, src), chunks in got.items():
        got_by[step, dst] |= chunks & sent.get((step, src, dst), set())
    return {
        "fan_out_per_step": [max((v for (st, _), v in fan_out.items() if st == s), default=0) for s in order],
        "fan_in_per_step": [max((v for (st, _), v in fan_in.items() if st == s), default=0) for s in order],
        "latency_deficiency": steps / max(1, (p - 1).bit_length()),
        "bandwidth_deficiency": max(per_rank_sent) / vector / bound,
        "temp_buffer_steps": sum(1 for key, chunks in got_by.items() if chunks & sent_by.get(key, set())),
        "steps": steps,
        "messages": len(sent),
        "max_chunks_sent": max(per_rank_sent),
        "max_chunks_received": max(per_rank_got),
        "max_sent_fraction": max(per_rank_sent) / vector,
        "max_received_fraction": max(per_rank_got) / vector,
        "max_fan_out": max(fan_out.values(), default=0),
        "max_fan_in": max(fan_in.values(), default=0),
        "per_rank_sent": per_rank_sent,
        "per_rank_received": per_rank_got,
    }


def test_check_stats_of_ring_allreduce_match_the_schedule() -> None:
    p = 8
    stats = cached_json("check", example("ring_allreduce"), "-p", p)["stats"]
    ir = cached_json("show", example("ring_allreduce"), "-p", p)
    mine = recompute_stats(ir)
    # The closed forms of the ring: 2(p-1) steps, every rank sends and receives 2(p-1) chunks.
    assert mine["steps"] == 2 * (p - 1)
    assert mine["per_rank_sent"] == [2 * (p - 1)] * p
    assert mine["per_rank_received"] == [2 * (p - 1)] * p
    assert mine["messages"] == 2 * (p - 1) * p
    assert stats == {k: v for k, v in mine.items() if k in stats}
    assert set(stats) <= set(mine)
    assert stats["max_sent_fraction"] == pytest.approx(2 * (p - 1) / p)
    assert stats["max_fan_out"] == stats["max_fan_in"] == 1


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("swing_bw", ("-p", "7")),
        ("pairwise_alltoall", ("-p", "4")),
        ("binomial_reduce", ("-p", "6", "--param", "root=4")),
    ],
)
def test_check_stats_match_the_schedule(name: str, args: tuple[str, ...]) -> None:
    stats = cached_json("check", example(name), *args)["stats"]
    mine = recompute_stats(cached_json("show", example(name), *args))
    for key, value in stats.items():
        assert mine[key] == (value if isinstance(value, list) else pytest.approx(value)), key


@pytest.mark.parametrize(("program", "line", "old", "new", "p"), MUTANTS)
def test_check_names_the_mutated_line(tmp_path: Path, program: str, line: int, old: str, new: str, p: int) -> None:
    path = write(tmp_path, "mutant.coll", mutate(program, line, old, new))
    out = cli("check", path, "-p", p)
    assert out.code == EXIT_WRONG, out.text
    assert "WRONG" in out.stdout
    assert f"{path}:{line}:" in out.stdout
    assert_no_traceback(out)

    data = cli_json("check", path, "-p", p, code=EXIT_WRONG)
    assert data["ok"] is False
    assert data["findings"]
    first = data["findings"][0]
    assert first["line"] == line, data["findings"]
    assert first["file"] == str(path)
    assert isinstance(first["column"], int) and first["column"] >= 1
    assert isinstance(first["code"], str) and first["message"]


def test_check_wrong_peer_on_a_receive_is_reported(tmp_path: Path) -> None:
    """Both sides mismatch here; whichever is reported first, the receive's line must show up."""
    path = write(tmp_path, "mutant.coll", mutate(RING, RING_AG_RECV, "from ring_prev(rank)", "from (rank - 2) mod p"))
    data = cli_json("check", path, "-p", 5, code=EXIT_WRONG)
    assert RING_AG_RECV in {f["line"] for f in data["findings"]}


# --------------------------------------------------------------------------
# Bad input: exit 2, a located message, no traceback
# --------------------------------------------------------------------------


def assert_error_at(stderr: str, path: Path, line: int) -> None:
    """A ``file:line:col: error:`` diagnostic for ``path`` at ``line``."""
    assert re.search(rf"^{re.escape(str(path))}:{line}:\d+: error: ", stderr, re.MULTILINE), stderr


def test_syntax_error_subprocess(tmp_path: Path) -> None:
    path = write(tmp_path, "syntax.coll", mutate(RING, RING_AG_SEND, "send block", "sendd block"))
    proc = collc_subprocess("check", path, "-p", "4", cwd=tmp_path)
    assert proc.returncode == EXIT_INPUT, proc.stdout + proc.stderr
    assert_error_at(proc.stderr, path, RING_AG_SEND)
    assert_no_traceback(proc)


@pytest.mark.parametrize("command", ["show", "run"])
def test_syntax_error(tmp_path: Path, command: str) -> None:
    path = write(tmp_path, "syntax.coll", mutate(RING, RING_RS_RECV, "from ring_prev(rank)", "from (ring_prev(rank)"))
    out = cli(command, path, "-p", 4)
    assert out.code == EXIT_INPUT, out.text
    assert_error_at(out.stderr, path, RING_RS_RECV)
    assert_no_traceback(out)


@pytest.mark.parametrize("command", ["check", "run"])
def test_constraint_violation(tmp_path: Path, command: str) -> None:
    path = write(tmp_path, "even.coll", EVEN)
    out = cli(command, path, "-p", 7)
    assert out.code == EXIT_INPUT, out.text
    assert_error_at(out.stderr, path, EVEN_PARAM_LINE)
    assert "p % 2 == 0" in out.stderr
    assert "7" in out.stderr
    assert_no_traceback(out)
    if command == "check":
        assert cli("check", path, "-p", 8).code == EXIT_OK


def test_missing_parameter_value(tmp_path: Path) -> None:
    out = cli("check", write(tmp_path, "ring.coll", RING))
    assert out.code == EXIT_INPUT, out.text
    assert "error:" in out.stderr and " p" in out.stderr
    assert_no_traceback(out)


@pytest.mark.parametrize(
    "args",
    [
        ("check", "swing_bw", "-p", "4", "--frobnicate"),
        ("run", "swing_bw", "-p", "4", "--dtype", "complex64"),
        ("run", "swing_bw", "-p", "4", "--op", "xor"),
        ("run", "swing_bw", "-p", "4", "--size", "12 parsecs"),
        ("run", "swing_bw", "-p", "4", "--sizes", "8K:1K"),
        ("run", "swing_bw", "-p", "4", "--size", "1K", "--sizes", "1K:2K"),
        ("check", "swing_bw", "-p", "0"),
        ("check", "swing_bw", "-p", "four"),
        ("check", "ring_allreduce", "-p", "4", "--param", "k"),
        ("nonsense-command",),
    ],
)
def test_usage_errors(args: tuple[str, ...]) -> None:
    out = cli(*args)
    assert out.code == EXIT_INPUT, out.text
    assert "Error" in out.stderr or "error" in out.stderr
    assert_no_traceback(out)


@pytest.mark.parametrize("command", ["check", "show", "run"])
def test_missing_file_argument(command: str) -> None:
    out = cli(command)
    assert out.code == EXIT_INPUT, out.text
    assert "Missing argument" in out.stderr
    assert "FILE" in out.stderr


@pytest.mark.parametrize("command", ["check", "show", "run"])
def test_nonexistent_file(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "no_such_algorithm.coll"
    out = cli(command, missing, "-p", 4)
    assert out.code == EXIT_INPUT, out.text
    assert "no such file" in out.stderr.lower()
    assert str(missing) in out.stderr
    assert_no_traceback(out)


def test_missing_include(tmp_path: Path) -> None:
    path = tmp_path / "ring_allreduce.coll"
    shutil.copy(example("ring_allreduce"), path)  # without lib/
    out = cli("check", path, "-p", 4)
    assert out.code == EXIT_INPUT, out.text
    assert_error_at(out.stderr, path, 7)
    assert "lib/ring.coll" in out.stderr
    assert_no_traceback(out)


def test_syntax_error_in_an_included_file_shows_the_source_line(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    lib = tmp_path / "examples" / "lib" / "ring.coll"
    lib.write_text(mutate(lib.read_text(), 7, "send block", "sendd block"))
    out = cli("check", tmp_path / "examples" / "ring_allreduce.coll", "-p", 4)
    assert out.code == EXIT_INPUT, out.text
    assert_error_at(out.stderr, lib, 7)
    assert "sendd block" in out.stderr  # the offending line, with a caret under it
    assert "^" in out.stderr


# --------------------------------------------------------------------------
# collc show
# --------------------------------------------------------------------------

ROW = re.compile(
    r"^\s*(?P<step>\d+)\s+(?P<phase>\S+)\s+(?P<rank>\d+)\s+(?P<kind>send|recv)\s+(?P<peer>\d+)\s+"
    r"(?:(?P<action>copy|reduce)\s+)?(?P<line>\d+)\s+(?P<chunks>\{.*\})\s*$"
)


def parse_id_set(text: str) -> list[int]:
    """``{0..3, 7}`` -> [0, 1, 2, 3, 7]."""
    inner = text.strip()[1:-1].strip()
    ids: list[int] = []
    for part in filter(None, (s.strip() for s in inner.split(","))):
        lo, _, hi = part.partition("..")
        ids.extend(range(int(lo), int(hi or lo) + 1))
    return ids


SHOW_CASES = [
    pytest.param(example("ring_allreduce"), ("-p", "4", "--param", "k=3"), id="ring_allreduce-p4-k3"),
    pytest.param(example("swing_bw"), ("-p", "7"), id="swing_bw-p7"),
    pytest.param(example("binomial_reduce"), ("-p", "6", "--param", "root=4"), id="binomial_reduce-p6"),
]


@pytest.mark.parametrize(("path", "args"), SHOW_CASES)
def test_show_table_lists_every_op(path: Path, args: tuple[str, ...]) -> None:
    out = cli("show", path, *args)
    assert out.code == EXIT_OK, out.text
    ir = cached_json("show", path, *args)
    lines = out.stdout.splitlines()
    assert ir["algorithm"] in lines[0]
    assert f"{ir['nranks']} ranks" in lines[0] and f"{len(ir['steps'])} steps" in lines[0]
    header = lines[1].split()
    assert header == ["step", "phase", "rank", "op", "peer", "action", "line", "chunks"]
    rows = []
    for text in lines[3:]:
        m = ROW.match(text)
        assert m, f"not a table row: {text!r}"
        rows.append(
            (
                int(m["step"]),
                m["phase"],
                int(m["rank"]),
                m["kind"],
                int(m["peer"]),
                m["action"],
                int(m["line"]),
                parse_id_set(m["chunks"]),
            )
        )
    expected = [
        (
            step["index"],
            step["phase"][:16],
            op["rank"],
            op["kind"],
            op["peer"],
            op.get("action"),
            op["line"],
            op["chunks"],
        )
        for step in ir["steps"]
        for op in step["ops"]
    ]
    assert rows == expected
    assert len(rows) > 0


def test_show_rank_filter() -> None:
    out = cli("show", example("swing_bw"), "-p", 7, "--rank", 2)
    assert out.code == EXIT_OK, out.text
    rows = [ROW.match(line) for line in out.stdout.splitlines()[3:]]
    assert rows and all(m is not None and int(m["rank"]) == 2 for m in rows)
    ir = cached_json("show", example("swing_bw"), "-p", 7)
    assert len(rows) == sum(op["rank"] == 2 for step in ir["steps"] for op in step["ops"])


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@pytest.mark.parametrize(("path", "args"), SHOW_CASES)
def test_show_json_schema(path: Path, args: tuple[str, ...]) -> None:
    ir = cached_json("show", path, *args)
    required = {"algorithm", "collective", "params", "nranks", "nchunks", "root", "steps"}
    assert required <= set(ir)
    assert isinstance(ir["algorithm"], str) and ir["algorithm"]
    assert ir["collective"] in {c.value for c in Collective}
    assert isinstance(ir["params"], dict) and _is_int(ir["params"]["p"])
    p, n = ir["nranks"], ir["nchunks"]
    assert _is_int(p) and _is_int(n) and p == ir["params"]["p"] and n >= 1
    if ir["collective"] in ("broadcast", "reduce"):
        assert _is_int(ir["root"]) and 0 <= ir["root"] < p
    else:
        assert ir["root"] is None
    assert isinstance(ir["steps"], list) and ir["steps"]
    for i, step in enumerate(ir["steps"]):
        assert set(step) == {"index", "phase", "ops"}
        assert step["index"] == i
        assert isinstance(step["phase"], str) and step["phase"]
        assert isinstance(step["ops"], list)
        for op in step["ops"]:
            base = {"rank", "kind", "peer", "chunks", "line", "column"}
            assert op["kind"] in {"send", "recv"}
            if "file" in op:  # only for ops written in an included file
                assert isinstance(op["file"], str) and op["file"] != ir["source"]
                base = base | {"file"}
            if op["kind"] == "recv":
                assert set(op) == base | {"action"}
                assert op["action"] in {"copy", "reduce"}
            else:
                assert set(op) == base
            assert _is_int(op["rank"]) and 0 <= op["rank"] < p
            assert _is_int(op["peer"]) and 0 <= op["peer"] < p and op["peer"] != op["rank"]
            chunks = op["chunks"]
            assert isinstance(chunks, list) and chunks
            assert all(_is_int(c) and 0 <= c < n for c in chunks)
            assert chunks == sorted(set(chunks))
            assert _is_int(op["line"]) and op["line"] >= 1
            assert _is_int(op["column"]) and op["column"] >= 1


def _comparable(schedule: Schedule) -> tuple[Any, ...]:
    """Everything in a schedule but its source spans (line and column kept)."""
    steps = tuple(
        (
            step.index,
            step.phase,
            tuple((op.rank, op.kind, op.peer, op.chunks, op.action, op.span.line, op.span.column) for op in step.ops),
        )
        for step in schedule.steps
    )
    return (
        schedule.algorithm,
        schedule.collective,
        schedule.params,
        schedule.nranks,
        schedule.nchunks,
        schedule.root,
        schedule.phases,
        steps,
    )


@pytest.mark.parametrize(("path", "args"), SHOW_CASES)
def test_show_json_round_trips(path: Path, args: tuple[str, ...]) -> None:
    ir = cached_json("show", path, *args)
    params: dict[str, int] = {"p": int(args[1])}
    if "--param" in args:
        name, value = args[args.index("--param") + 1].split("=")
        params[name] = int(value)
    instance = api.load(path).instantiate(**params)
    restored = schedule_from_json(ir)
    assert _comparable(restored) == _comparable(instance.schedule)
    assert json.loads(json.dumps(instance.to_json())) == ir


# --------------------------------------------------------------------------
# collc run
# --------------------------------------------------------------------------

HEADER_WORDS = ["size", "count", "type", "redop", "root", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong"]


def table_rows(stdout: str) -> list[list[str]]:
    """The data rows of an nccl-tests style table (comment lines start with '#')."""
    return [line.split() for line in stdout.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def table_header(stdout: str) -> list[str]:
    for line in stdout.splitlines():
        words = line.lstrip("#").split()
        if words and words[0] == "size":
            return words
    raise AssertionError(f"no header line in:\n{stdout}")


def test_run_swing_bw_table() -> None:
    out = cli("run", example("swing_bw"), "-p", 8, "--size", "64K")
    assert out.code == EXIT_OK, out.text
    assert table_header(out.stdout) == HEADER_WORDS
    rows = table_rows(out.stdout)
    assert len(rows) == 1
    row = dict(zip(HEADER_WORDS, rows[0], strict=True))
    assert int(row["size"]) == 64 * 1024
    assert int(row["count"]) == 64 * 1024 // 4
    assert row["type"] == "float32"
    assert row["redop"] == "sum"
    assert int(row["root"]) == -1
    assert float(row["time(us)"]) >= 0
    assert float(row["algbw(GB/s)"]) >= 0 and float(row["busbw(GB/s)"]) >= 0
    assert int(row["#wrong"]) == 0


def test_run_subprocess_with_bundled_name(tmp_path: Path) -> None:
    proc = collc_subprocess("run", "swing_bw", "-p", "4", "--size", "1K", cwd=tmp_path)
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    rows = table_rows(proc.stdout)
    assert len(rows) == 1
    assert rows[0][0] == "1024" and rows[0][-1] == "0"
    assert_no_traceback(proc)


def test_run_bundled_name_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no file called swing_bw here
    out = cli("run", "swing_bw", "-p", 4, "--size", "1K")
    assert out.code == EXIT_OK, out.text
    assert int(table_rows(out.stdout)[0][-1]) == 0
    assert cli("check", "swing_bw.coll", "-p", 4).code == EXIT_OK


def test_run_size_sweep() -> None:
    out = cli("run", example("swing_bw"), "-p", 8, "--sizes", "1K:8K")
    assert out.code == EXIT_OK, out.text
    rows = table_rows(out.stdout)
    assert [int(r[0]) for r in rows] == [1024, 2048, 4096, 8192]
    assert [int(r[1]) for r in rows] == [256, 512, 1024, 2048]
    assert all(r[-1] == "0" for r in rows)


def test_run_json_rows() -> None:
    p = 8
    data = cli_json("run", example("swing_bw"), "-p", p, "--sizes", "1K:8K")
    assert data["algorithm"] == "swing_bw"
    assert data["collective"] == "allreduce"
    assert data["nranks"] == p
    rows = data["rows"]
    assert [r["size_bytes"] for r in rows] == [1024, 2048, 4096, 8192]
    for row in rows:
        required = {"size_bytes", "count", "dtype", "op", "time_us", "algbw_gbps", "busbw_gbps", "wrong"}
        assert required <= set(row)
        assert row["count"] == row["size_bytes"] // 4
        assert row["dtype"] == "float32" and row["op"] == "sum"
        assert row["wrong"] == 0
        assert row["time_us"] > 0
        assert row["algbw_gbps"] == pytest.approx(row["size_bytes"] / row["time_us"] / 1e3)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 2 * (p - 1) / p)


# Every dtype and every op at least once through the CLI (each call pays for parsing) ...
DTYPE_OP = [(dtype, OPS[i % len(OPS)]) for i, dtype in enumerate(sorted(DTYPES))]
DTYPE_OP += [(DTYPE_OP[0][0], op) for op in OPS if op not in {o for _, o in DTYPE_OP}]


@pytest.mark.parametrize(("dtype", "op"), DTYPE_OP)
def test_run_every_dtype_and_op(dtype: str, op: str) -> None:
    out = cli("run", example("swing_bw"), "-p", 5, "--size", "510", "--dtype", dtype, "--op", op)
    assert out.code == EXIT_OK, out.text
    (row,) = table_rows(out.stdout)
    assert row[1] == str(510 // DTYPES[dtype].itemsize)
    assert row[2] == dtype and row[3] == op and row[-1] == "0"


def test_run_covers_every_dtype_and_op() -> None:
    assert {d for d, _ in DTYPE_OP} == set(DTYPES)
    assert {o for _, o in DTYPE_OP} == set(OPS)


def test_every_dtype_with_every_op() -> None:
    """... and the whole product on one loaded schedule, as `collc run` executes it."""
    instance = api.load(example("swing_bw")).instantiate(p=5)
    for dtype in DTYPES:
        for op in OPS:
            result = instance.run(512 // DTYPES[dtype].itemsize, dtype, op)
            assert result.wrong == 0, (dtype, op)


def test_run_alltoall_size_not_divisible_by_p() -> None:
    p = 3
    data = cli_json("run", example("pairwise_alltoall"), "-p", p, "--size", "1K")
    (row,) = data["rows"]
    assert 1024 // 4 % p != 0  # the size really does not divide
    assert row["wrong"] == 0
    assert row["count"] % p == 0
    assert 0 < row["count"] <= 1024 // 4
    assert row["size_bytes"] == row["count"] * 4
    assert row["op"] == "none"
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * (p - 1) / p)


@pytest.mark.parametrize(
    ("name", "args", "op", "root"),
    [
        ("binomial_broadcast", ("--param", "root=2"), "none", 2),
        ("binomial_reduce", ("--param", "root=3", "--op", "min"), "min", 3),
        ("bruck_allgather", (), "none", -1),
    ],
)
def test_run_other_collectives(name: str, args: tuple[str, ...], op: str, root: int) -> None:
    data = cli_json("run", example(name), "-p", 5, "--size", "4K", *args)
    (row,) = data["rows"]
    assert row["wrong"] == 0
    assert row["op"] == op
    assert row["root"] == root


def test_examples_lists_every_example() -> None:
    out = cli("examples")
    assert out.code == EXIT_OK, out.text
    listed = [line.split()[0] for line in out.stdout.splitlines() if line.strip()]
    compression = sorted(path.stem for path in EXAMPLES.glob("compression/*.coll"))
    torus = sorted(path.stem for path in EXAMPLES.glob("torus/*.coll"))
    hierarchical = sorted(path.stem for path in EXAMPLES.glob("hierarchical/*.coll"))
    assert listed == sorted(path.stem for path in EXAMPLES.glob("*.coll")) + compression + torus + hierarchical
    assert "ring" not in listed and "fold" not in listed  # lib/ holds includes, not examples
    for line in out.stdout.splitlines():
        assert len(line.split(maxsplit=1)) == 2, f"no description: {line!r}"


# --------------------------------------------------------------------------
# Running a wrong schedule
# --------------------------------------------------------------------------


def test_run_wrong_schedule_fails_the_check_first(tmp_path: Path) -> None:
    path = write(tmp_path, "mutant.coll", mutate(RING, RING_RS_RECV, ") reduce", ") copy"))
    out = cli("run", path, "-p", 4, "--size", "1K")
    assert out.code == EXIT_WRONG, out.text
    assert table_rows(out.stdout) == []  # nothing ran
    assert "WRONG" in out.stderr
    assert f"{path}:{RING_RS_RECV}:" in out.stderr


def test_run_wrong_schedule_without_check(tmp_path: Path) -> None:
    path = write(tmp_path, "mutant.coll", mutate(RING, RING_RS_RECV, ") reduce", ") copy"))
    out = cli("run", path, "-p", 4, "--size", "1K", "--no-check")
    assert out.code == EXIT_WRONG, out.text
    (row,) = table_rows(out.stdout)
    assert int(row[-1]) > 0
    data = cli_json("run", path, "-p", 4, "--sizes", "1K:2K", "--no-check", code=EXIT_WRONG)
    assert len(data["rows"]) == 2
    assert all(r["wrong"] > 0 for r in data["rows"])
