"""Messages of `collc check` that must point the right way: the cause of a slot never written (a receive
whose peer sends nothing, a loop that ran no iteration), what an overwriting copy brought, a reduce
suggested only where one would help, a failing `--ranks all` with its counterexample first, and `--json`
on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import REPO, cli

from collc.elaborate import elaborate
from collc.frontend.program import parse_program
from collc.verify.check import check
from collc.verify.explain import explain_report, idle_parts

EXIT_WRONG, EXIT_INPUT = 1, 2
BROKEN = REPO / "tests" / "torchrun" / "broken.coll"  # an allgather whose loop runs p - 2 steps


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.coll"
    path.write_text(text)
    return path


NOSEND = """\
# rank 0 forgets to send chunk 0 to rank 1
algorithm nosend : allgather
param p : int where p == 2
chunks 2

phase gather:
  step:
    if rank == 1:
      send 1 to 0
      recv 0 from 0 copy
    else:
      recv 1 from 1 copy
"""


def test_a_receive_whose_peer_sends_nothing_is_the_cause(tmp_path: Path) -> None:
    """Rank 1's receive names chunk 0, and rank 0 never sends it: the finding says so, at that receive, and
    does not claim that the receive brings some other chunk."""
    out = cli("check", _write(tmp_path, "nosend", NOSEND), "-p", "2")
    assert out.code == EXIT_WRONG, out.text
    assert (
        "after the last step rank 1 holds nothing for chunk 0, expected {0} (missing {0}); it is never written: "
        "its receive at step 0 from rank 0 names it, but rank 0 does not send it to rank 1 in that step"
    ) in out.stdout
    assert "brings chunk 0 only" not in out.stdout and "no receive ever delivers it" not in out.stdout
    data = json.loads(cli("check", _write(tmp_path, "nosend", NOSEND), "-p", "2", "--json").stdout)
    post = next(f for f in data["findings"] if f["code"] == "postcondition")
    assert (post["line"], post["step"], post["rank"], post["chunk"]) == (10, 0, 1, 0)


def test_a_chunk_no_receive_names_says_which_receive_came_last() -> None:
    """At p = 3 the allgather's loop runs one step of two: rank 2 never receives chunk 0, and no receive of
    it names chunk 0; the finding points at its last receive, which takes another chunk."""
    out = cli("check", BROKEN, "-p", "3")
    assert out.code == EXIT_WRONG, out.text
    assert (
        "after the last step rank 2 holds nothing for chunk 0, expected {0} (missing {0}); it is never written: "
        "no receive ever delivers it, none of rank 2's names it (its last receive, at step 0 from rank 1, takes "
        "chunk 1)"
    ) in out.stdout


NOTHELD = """\
# an allgather where rank 0 sends rank 1 a chunk it does not hold, over rank 1's own
algorithm notheld : allgather
param p : int where p == 3
chunks 3

phase gather:
  step:
    if rank == 0:
      send 1 to 1
    elif rank == 1:
      recv 1 from 0 copy
  for step s in 0 .. p - 1:
    send (rank - s) mod p to ring_next(rank)
    recv (rank - s - 1) mod p from ring_prev(rank) copy
"""


def test_a_copy_of_nothing_is_not_told_to_reduce(tmp_path: Path) -> None:
    """In an allgather a reduce is never the fix: the copy that overwrote rank 1's own chunk brought nothing,
    since its sender held no data for it."""
    out = cli("check", _write(tmp_path, "notheld", NOTHELD), "-p", "3", "--show", "9")
    assert out.code == EXIT_WRONG, out.text
    assert "step 0: rank 0 sends chunk 1 to rank 1 but holds no data for it" in out.stdout
    assert (
        "ranks {1} were overwritten at step 0 by rank 1's copy from rank 0 (line 11), which brought nothing: "
        "rank 0 held no data for chunk 1"
    ) in out.stdout
    assert "a reduce would keep both" not in out.stdout


COPY_INSTEAD = """\
algorithm copies : allreduce
param p : int where p == 2
chunks 1
phase a:
  exchange with 1 - rank: send 0; recv 0 copy
"""


def test_a_reduce_is_suggested_where_it_would_keep_both(tmp_path: Path) -> None:
    out = cli("check", _write(tmp_path, "copies", COPY_INSTEAD), "-p", "2")
    assert out.code == EXIT_WRONG, out.text
    assert "whose data were disjoint: a reduce would keep both" in out.stdout


def test_a_loop_that_runs_no_iteration_is_where_the_finding_points() -> None:
    """At p = 2 the allgather's loop `for step s in 0 .. p - 2` runs no iteration: the schedule has no steps,
    and the finding points at the loop, not at the `algorithm` line."""
    out = cli("check", BROKEN, "-p", "2")
    assert out.code == EXIT_WRONG, out.text
    assert (
        "it is never written: the schedule has no steps (at p=2 the step loop of phase allgather at line 6 runs no "
        "iteration)"
    ) in out.stdout
    assert "broken.coll:6:3: error:" in out.stdout and "broken.coll:2:1" not in out.stdout
    data = json.loads(cli("check", BROKEN, "-p", "2", "--json").stdout)
    assert {f["line"] for f in data["findings"]} == {6}
    # the same through a range and through --ranks all (whose bounded check finds p = 2)
    swept = cli("check", BROKEN, "-p", "2..4")
    assert swept.code == EXIT_WRONG and "at p=2 the step loop of phase allgather at line 6" in swept.stdout


def test_a_phase_the_model_cannot_read_is_named_instead(tmp_path: Path) -> None:
    """Without a symbolic model (chunk weights are outside it), the phase that produced no step is named."""
    text = BROKEN.read_text().replace("chunks p\n", "chunks p weight(c) = 1\n")
    path = _write(tmp_path, "weighted", text)
    out = cli("check", path, "-p", "2")
    assert out.code == EXIT_WRONG, out.text
    assert "(at p=2 phase allgather, whose first step loop is at line 6, produces no step)" in out.stdout, out.stdout
    program = parse_program(text, str(path))
    schedule = elaborate(program, {"p": 2})
    assert [where.line for _, where in idle_parts(program, schedule)] == [6]
    report = check(schedule)
    assert explain_report(program, schedule, report).findings[0].span.line == 6
    # a correct instance is left as it is
    fine = elaborate(program, {"p": 3})
    fine_report = check(fine)
    assert explain_report(program, fine, fine_report) is fine_report


def test_ranks_all_prints_the_counterexample_first_and_the_invariant_on_request() -> None:
    out = cli("check", BROKEN, "--ranks", "all")
    assert out.code == EXIT_WRONG, out.text
    lines = out.stdout.splitlines()
    assert lines[0] == "broken_allgather (allgather): FAILS at p=2 (counterexample)"
    assert "after the last step rank 1 holds nothing for chunk 0" in lines[1]
    assert "invariant of step loop" not in out.stdout
    assert "(1 learned invariant(s) not shown: --verbose prints them)" in out.stdout
    first = out.stdout.index("error: after the last step")
    assert first < out.stdout.index("no proof for all p:")
    verbose = cli("check", BROKEN, "--ranks", "all", "--verbose")
    assert verbose.code == EXIT_WRONG
    assert "invariant of step loop 1: holds(r, c, j) <=>" in verbose.stdout
    assert verbose.stdout.index("error: after the last step") < verbose.stdout.index("invariant of step loop 1")


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("algorithm bad : allgather\nparam p : int\nchunks p\nphase x:\n  send 0 to\n", "unexpected end of line", 5),
        ("algorithm bad : allfoo\nparam p : int\nchunks p\n", "unknown collective 'allfoo'", 1),
        ("algorithm bad : allgather\nparam p : int\nchunks p\nphase x:\n  send 0 to p\n", "peer 2 is out of range", 5),
    ],
    ids=["syntax", "collective", "evaluation"],
)
def test_json_on_bad_input_is_json(tmp_path: Path, text: str, message: str, line: int) -> None:
    """A program that does not load, or an instance that does not elaborate: the diagnostic as JSON on stdout
    (exit 2), nothing on stderr."""
    path = _write(tmp_path, "bad", text)
    out = cli("check", path, "-p", "2", "--json")
    assert out.code == EXIT_INPUT, out.text
    assert out.stderr == ""
    data = json.loads(out.stdout)
    assert data["ok"] is False and data["status"] == "error"
    error = data["error"]
    assert message in error["message"] and error["line"] == line and error["file"] == str(path)
    assert error["text"].startswith(f"{path}:{line}:") and message in error["text"]
    if "peer" not in message:  # --ranks all likewise for a program that does not load
        assert json.loads(cli("check", path, "--ranks", "all", "--json").stdout)["error"]["line"] == line
    # without --json: the diagnostic as text on stderr, nothing on stdout
    text_out = cli("check", path, "-p", "2")
    assert text_out.code == EXIT_INPUT and text_out.stdout == "" and message in text_out.stderr


def test_json_on_a_missing_parameter_is_json(tmp_path: Path) -> None:
    path = _write(tmp_path, "noparam", "algorithm t : allgather\nparam p : int\nparam k : int\nchunks p\n")
    out = cli("check", path, "-p", "2", "--json")
    assert out.code == EXIT_INPUT, out.text
    assert "missing value for parameter k" in json.loads(out.stdout)["error"]["message"]
