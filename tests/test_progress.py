"""Progress bars: the library's ``on_progress`` callbacks, and the bars `collc` draws from them.

A bar goes to stderr, only on a terminal (or with COLLC_PROGRESS=always), never with --json, and is
erased when the work ends: what a command prints on stdout must not change.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

import collc
from collc.cli import main
from collc.cli import progress as cli_progress
from collc.goodput import Entry, study
from collc.simulate import NetworkModel, simulate
from collc.topologies import parse_topology
from collc.verify.check import check
from collc.verify.sweep import sweep

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BAR = "\u2501"  # the heavy horizontal line rich draws bars with
ESC = "\x1b["


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str


def _runner() -> CliRunner:
    try:  # click < 8.2 mixes stderr into stdout unless told otherwise
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


def cli(*args: str | Path, mode: str | None = None) -> Outcome:
    """`collc ARGS` in-process with COLLC_PROGRESS set to ``mode`` (unset for None)."""
    env = {"COLLC_PROGRESS": mode, "TERM": "xterm-256color", "NO_COLOR": None, "FORCE_COLOR": None}
    result = _runner().invoke(main, [str(a) for a in args], env=env, catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Outcome(result.exit_code, result.stdout, result.stderr)


class Recorder:
    """An ``on_progress`` callback that keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))


def assert_counts_up(calls: list[tuple[int, int]], total: int) -> None:
    """One call per unit of work: 1, 2, ..., total, every time of ``total``."""
    assert calls == [(i, total) for i in range(1, total + 1)]


@pytest.fixture
def no_delay(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(cli_progress, "DELAY_S", 0.0)
    yield


# --------------------------------------------------------------------------
# The library's callbacks
# --------------------------------------------------------------------------


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_rank_range_sweep_reports_every_instance(jobs: int) -> None:
    program = collc.load(EXAMPLES / "ring_allreduce.coll").program
    instances = [{"p": p} for p in range(2, 14)]
    seen = Recorder()
    outcome = sweep(program, instances, jobs=jobs, on_progress=seen)
    assert outcome.ok
    assert_counts_up(seen.calls, len(instances))
    plain = sweep(program, instances, jobs=1)
    assert [r.status for r in plain.results] == [r.status for r in outcome.results]
    assert [r.report.stats for r in plain.results if r.report] == [r.report.stats for r in outcome.results if r.report]


def test_a_sweep_that_stops_early_reports_what_it_checked(tmp_path: Path) -> None:
    text = (EXAMPLES / "swing_bw.coll").read_text()
    old = "fn blocks(r, s) = swing_blocks_n(r, s, L, n)"
    assert old in text
    path = tmp_path / "swing_nodedup.coll"  # wrong from p=6 on
    path.write_text(text.replace(old, "fn blocks(r, s) = swing_send_n(r, s, L, n)"))
    seen = Recorder()
    outcome = sweep(collc.load(path).program, [{"p": p} for p in (2, 4, 6, 8, 10)], jobs=1, on_progress=seen)
    assert outcome.stopped_early and len(outcome.results) == 3
    assert seen.calls == [(1, 5), (2, 5), (3, 5)]


def test_a_single_check_reports_every_step() -> None:
    schedule = collc.load(EXAMPLES / "swing_bw.coll").instantiate(p=16).schedule
    seen = Recorder()
    report = check(schedule, on_progress=seen)
    assert report.ok
    assert_counts_up(seen.calls, len(schedule.steps))
    assert report == check(schedule)


def test_verify_passes_the_callback_on() -> None:
    inst = collc.load(EXAMPLES / "ring_allreduce.coll").instantiate(p=6)
    seen = Recorder()
    assert inst.verify(on_progress=seen).ok
    assert_counts_up(seen.calls, 2 * (6 - 1))  # a ring allreduce has 2(p-1) steps


def test_a_size_sweep_reports_every_size() -> None:
    schedule = collc.load(EXAMPLES / "ring_allreduce.coll").instantiate(p=8).schedule
    topology = parse_topology("ring:8")
    sizes = [1024 << i for i in range(7)]
    seen = Recorder()
    sim = simulate(schedule, topology, sizes, NetworkModel(), on_progress=seen)
    assert_counts_up(seen.calls, len(sizes))
    assert sim == simulate(schedule, topology, sizes, NetworkModel())


def test_a_goodput_study_counts_each_file_and_size() -> None:
    files = (str(EXAMPLES / "ring_allreduce.coll"), str(EXAMPLES / "recursive_doubling.coll"))
    entries = [Entry("best", files), Entry("", (str(EXAMPLES / "swing_bw.coll"),))]
    sizes = [4096 << i for i in range(5)]
    seen = Recorder()
    result = study(entries, parse_topology("ring:8"), sizes, NetworkModel(), on_progress=seen)
    assert_counts_up(seen.calls, 3 * (len(sizes) + 1))  # three files: elaborated, then each size
    assert result.points == study(entries, parse_topology("ring:8"), sizes, NetworkModel()).points


def test_an_mpi_run_reports_every_count() -> None:
    inst = collc.load(EXAMPLES / "ring_allreduce.coll").instantiate(p=2)
    counts = [64, 1024, 4096]
    seen = Recorder()
    rows = inst.run_mpi(counts, on_progress=seen, timeout=120)
    assert [r.count for r in rows] == counts and all(r.wrong == 0 for r in rows)
    assert_counts_up(seen.calls, len(counts))


@pytest.mark.gpu
def test_a_cuda_run_reports_every_count() -> None:
    from collc.backends import cuda
    from collc.diagnostics import CollError

    try:
        cuda.cupy_module()
    except CollError as err:
        pytest.skip(str(err))
    inst = collc.load(EXAMPLES / "ring_allreduce.coll").instantiate(p=4)
    counts = [1024, 4096, 1 << 16]
    seen = Recorder()
    rows = inst.run_cuda(counts, on_progress=seen)
    assert [r.count for r in rows] == counts and all(r.wrong == 0 for r in rows)
    assert_counts_up(seen.calls, len(counts))


# --------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------

RANGE = ("check", "ring_allreduce", "-p", "2..24", "-j", "1")
SINGLE = ("check", "swing_bw", "-p", "16")
SIM = ("sim", "ring_allreduce", "--topology", "ring:8", "--sizes", "1K:64K")
RUN = ("run", "ring_allreduce", "-p", "4", "--sizes", "8:64K")
COMMANDS = [RANGE, SINGLE, SIM, RUN]


def _stable(text: str) -> str:
    """The output without the figures that change from run to run: the times measured by collc run,
    the seconds collc sim took per program."""
    text = re.sub(r", \d+\.\d s$", ", # s", text, flags=re.M)
    if text.startswith("# collc run"):
        text = re.sub(r" +\d+\.\d+", " #", text)
    return text


def _no_bar(text: str) -> None:
    assert BAR not in text and ESC not in text and "\r" not in text


@pytest.mark.parametrize("args", COMMANDS, ids=["range", "single", "sim", "run"])
def test_without_a_terminal_the_output_is_unchanged(args: tuple[str, ...], no_delay: None) -> None:
    quiet = cli(*args, mode="never")
    assert quiet.code == 0, quiet.stdout + quiet.stderr
    for mode in (None, "auto"):
        got = cli(*args, mode=mode)
        assert (got.code, _stable(got.stdout), got.stderr) == (quiet.code, _stable(quiet.stdout), quiet.stderr)
        _no_bar(got.stdout + got.stderr)


@pytest.mark.parametrize("args", COMMANDS, ids=["range", "single", "sim", "run"])
def test_json_output_has_no_bar(args: tuple[str, ...], no_delay: None) -> None:
    got = cli(*args, "--json", mode="always")
    assert got.code == 0, got.stderr
    json.loads(got.stdout)
    assert got.stderr == ""
    _no_bar(got.stdout)


@pytest.mark.parametrize(
    ("args", "label"),
    [(RANGE, "checking ring_allreduce"), (SINGLE, "checking swing_bw"), (SIM, "simulating"), (RUN, "ring_allreduce")],
    ids=["range", "single", "sim", "run"],
)
def test_a_forced_terminal_shows_a_bar_on_stderr_only(args: tuple[str, ...], label: str, no_delay: None) -> None:
    quiet = cli(*args, mode="never")
    shown = cli(*args, mode="always")
    assert shown.code == quiet.code == 0
    assert _stable(shown.stdout) == _stable(quiet.stdout)  # the bar never touches stdout
    assert BAR in shown.stderr and label in shown.stderr
    assert shown.stderr.rstrip("\r\n").endswith(f"{ESC}2K") or f"{ESC}1A" in shown.stderr  # erased at the end


def test_a_range_bar_counts_the_instances() -> None:
    shown = cli(*RANGE, mode="always")  # a range shows its bar at once, whatever the delay
    counts = re.findall(r"(\d+)/(\d+)", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.stderr))
    assert counts and {total for _, total in counts} == {"23"}
    assert counts[-1] == ("23", "23")


def test_a_short_single_check_shows_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_progress, "DELAY_S", 3600.0)  # a check that ends before the delay
    for args in (SINGLE, SIM, RUN):
        got = cli(*args, mode="always")
        assert got.code == 0
        assert got.stderr == ""
    assert 1.0 <= cli_progress.DELAY_S  # the default waits long enough for a short command to end unseen


def test_an_error_is_printed_after_the_bar_is_erased(tmp_path: Path, no_delay: None) -> None:
    path = tmp_path / "even.coll"
    path.write_text((EXAMPLES / "ring_allreduce.coll").read_text().replace("p >= 1", "p % 2 == 0"))
    got = cli("check", path, "-p", "5", mode="always")
    assert got.code == 2
    message = got.stderr.index("error:")
    assert got.stderr.rfind(BAR) < message  # the bar (drawn at once) is gone before the message


def test_a_bad_mode_is_a_usage_error() -> None:
    got = cli(*SINGLE, mode="sometimes")
    assert got.code == 2
    assert "COLLC_PROGRESS" in got.stderr and "sometimes" in got.stderr and "auto, always, never" in got.stderr


# --------------------------------------------------------------------------
# A real terminal
# --------------------------------------------------------------------------


def _on_a_terminal(args: list[str], stdout_tty: bool) -> tuple[bytes, bytes]:
    """Run ``python -m collc.cli ARGS`` with stderr on a pseudo-terminal (stdout too when ``stdout_tty``):
    (what the terminal got, what the stdout pipe got)."""
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("COLLC_PROGRESS", "NO_COLOR", "FORCE_COLOR")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(
        [sys.executable, "-m", "collc.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave if stdout_tty else subprocess.PIPE,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    seen = bytearray()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # the other end is closed
                break
            if not data:
                break
            seen += data
        elif proc.poll() is not None:
            break
    piped = proc.stdout.read() if proc.stdout is not None else b""
    proc.wait(timeout=60)
    os.close(master)
    assert proc.returncode == 0, (bytes(seen), piped)
    return bytes(seen), piped


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_a_terminal_gets_a_bar_and_a_pipe_does_not() -> None:
    args = ["check", "ring_allreduce", "-p", "2..40", "-j", "1"]
    terminal, _ = _on_a_terminal(args, stdout_tty=True)
    assert BAR.encode() in terminal and b"checking ring_allreduce" in terminal
    assert b"correct for every instance" in terminal
    terminal, piped = _on_a_terminal(args, stdout_tty=False)  # stdout piped: no bar, even on a terminal stderr
    assert terminal == b""
    assert b"correct for every instance" in piped and BAR.encode() not in piped
