"""Happens-before for overlapping steps (lanes): racing lanes are rejected naming both steps and their lines,
race-free lanes are accepted, and a schedule's lanes survive the JSON form of the IR."""

from __future__ import annotations

from pathlib import Path

import pytest

import collc
from collc.diagnostics import format_error
from collc.elaborate import elaborate
from collc.frontend.program import parse_program
from collc.ir import schedule_from_json, schedule_to_json
from collc.report import finding_text
from collc.verify.check import check

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# The pipelined ring of examples/pipelined_ring_allreduce.coll, with the allgather's lanes shifted by one:
# sub-chunk j's allgather runs in lane j + 1, which nothing orders after lane j's reduce-scatter.
RACY = """\
algorithm racy_pipeline : allreduce
param p : int where p >= 2
param k : int = 2 where k >= 2
chunks k * p
fn sub(b, j) = b * k + j

phase reduce_scatter:
  for step s in 0 .. p - 1:
    for j in 0 .. k:
      lane j:
        send sub((rank - s - 1) mod p, j) to ring_next(rank)
        recv sub((rank - s - 2) mod p, j) from ring_prev(rank) reduce
phase allgather:
  for step s in 0 .. p - 1:
    for j in 0 .. k:
      lane (j + 1) mod k:
        send sub((rank - s) mod p, j) to ring_next(rank)
        recv sub((rank - s - 1) mod p, j) from ring_prev(rank) copy
"""


def _check(text: str, **params: int):  # type: ignore[no-untyped-def]
    program = parse_program(text, "racy.coll")
    schedule = elaborate(program, params)
    return program, schedule, check(schedule)


def test_the_racing_pipeline_is_rejected_naming_both_steps() -> None:
    program, _, report = _check(RACY, p=4)
    assert not report.ok
    assert {f.code for f in report.findings} == {"race"}  # in lockstep the schedule is right: only the lanes race
    first = report.findings[0]
    # rank 0 sends sub(3, 0) = chunk 6 at step 0 in lane 0 (line 11); the allgather's first step (step 3)
    # receives chunk 6 into rank 0 in lane 1 (line 18), and no chain of lanes and messages orders it after.
    assert (first.step, first.rank, first.chunk) == (3, 0, 6)
    assert (first.span.file, first.span.line, first.span.column) == ("racy.coll", 18, 9)
    ((other, label),) = first.related
    assert (other.line, other.column) == (11, 9)
    assert "step 3 (lane 1)" in first.message and "step 0 (lane 0)" in first.message
    assert "overwrite chunk 6 of rank 0" in first.message and "sends chunk 6" in label
    text = finding_text(first, program.sources)
    assert "racy.coll:18:9: error: lanes race" in text and "racy.coll:11:9: note: the other step" in text
    assert "   18 |         recv sub((rank - s - 1) mod p, j) from ring_prev(rank) copy" in text
    assert "   11 |         send sub((rank - s - 1) mod p, j) to ring_next(rank)" in text
    assert text.count("^~~~") == 2


def test_the_same_program_in_lockstep_is_correct() -> None:
    """Without lanes every step waits for the one before, and the schedule is a plain ring."""
    lockstep = RACY.replace("      lane j:\n", "      if true:\n")
    lockstep = lockstep.replace("      lane (j + 1) mod k:\n", "      if true:\n")
    _, schedule, report = _check(lockstep, p=4)
    assert report.ok and not schedule.has_lanes()


def test_a_read_before_the_write_it_needs_is_a_race() -> None:
    """The reduce-scatter receives sub-chunk j + 1 in lane j: the next step's send of it (lane j + 1) races."""
    text = (EXAMPLES / "pipelined_ring_allreduce.coll").read_text()
    racy = text.replace(
        "recv sub((rank - s - 2) mod p, j) from ring_prev(rank) reduce",
        "recv sub((rank - s - 2) mod p, (j + 1) mod k) from ring_prev(rank) reduce",
    )
    assert racy != text
    program = parse_program(racy, str(EXAMPLES / "racy_pipeline.coll"))
    report = check(elaborate(program, {"p": 3, "k": 2}))
    first = report.findings[0]
    assert first.code == "race" and first.step == 1 and first.rank == 0
    assert "may read chunk" in first.message and "before the write of step 0" in first.message
    lines = text.splitlines()
    assert first.span.line == lines.index(next(x for x in lines if "send sub((rank - s - 1)" in x)) + 1
    assert "receives chunk" in first.related[0][1]


def test_two_lanes_of_one_step_writing_one_slot_race() -> None:
    text = """\
algorithm same_step : allreduce
param p : int where p == 2
chunks 1
phase a:
  step:
    lane 0:
      send 0 to 1 - rank
    lane 1:
      recv 0 from 1 - rank reduce
"""
    _, _, report = _check(text, p=2)
    (first, *_) = report.findings
    assert first.code == "race" and first.step == 0
    assert "the two lanes of step 0 may run in either order" in first.message
    assert first.span.line == 9 and first.related[0][0].line == 7


@pytest.mark.parametrize("name", ["pipelined_ring_allreduce", "striped_ring_allreduce"])
def test_the_race_free_lanes_are_accepted(name: str) -> None:
    alg = collc.load(EXAMPLES / f"{name}.coll")
    for p in (1, 2, 3, 5, 8):
        for k in (1, 2, 3):
            inst = alg.instantiate(p=p, k=k)
            report = inst.verify()
            assert report.ok, f"{name} p={p} k={k}: {report.findings[:1]}"
            if p > 1:
                assert inst.schedule.has_lanes()


def test_lanes_are_dependencies_across_ranks() -> None:
    """A lane-1 step that reads what a lane-0 step wrote, ordered through a message chain: accepted.

    Rank 0 receives chunks 0 and 1 from rank 1 in lane 0 at step 0; at step 1 it sends chunk 1 on in lane 0 to
    rank 1, which receives it in no lane (so its later steps, of every lane, wait for it); rank 1 sends chunk 1
    back at step 2 in lane 1, and rank 0, having received it in lane 1, sends chunk 0 at step 3 in lane 1.
    Happens-before runs through rank 1, so nothing races."""
    text = """\
algorithm chain : broadcast
param p : int where p == 2
param root : int = 1 where root == 1
chunks 2
phase a:
  step:
    lane 0:
      if rank == 1:
        send {0, 1} to 0
      else:
        recv {0, 1} from 1 copy
  step:
    if rank == 0:
      lane 0:
        send 1 to 1
    else:
      recv 1 from 0 copy
  step:
    lane 1:
      if rank == 1:
        send 1 to 0
      else:
        recv 1 from 1 copy
  step:
    lane 1:
      if rank == 0:
        send 0 to 1
      else:
        recv 0 from 0 copy
"""
    _, schedule, report = _check(text, p=2, root=1)
    assert report.ok, report.findings[:1]
    assert schedule.steps[1].lanes is not None and None in schedule.steps[1].lanes
    # Without the message back at step 2, nothing leads from rank 0's lane 0 to its lane 1: step 3's send of
    # chunk 0 may read it before step 0's receive lands.
    broken = text.replace("        send 1 to 0\n", "        pass\n")
    broken = broken.replace("        recv 1 from 1 copy\n", "        pass\n")
    _, _, report = _check(broken, p=2, root=1)
    assert [f.code for f in report.findings] == ["race"]
    (race,) = report.findings
    lines = broken.splitlines()
    assert (race.step, race.rank, race.chunk) == (2, 0, 0)  # the empty step is dropped: step 3 becomes step 2
    assert race.span.line == lines.index("        send 0 to 1") + 1
    assert race.related[0][0].line == lines.index("        recv {0, 1} from 1 copy") + 1
    assert "may read chunk 0 of rank 0 before the write of step 0 (lane 0) lands" in race.message


def test_lanes_survive_the_json_form() -> None:
    schedule = collc.load(EXAMPLES / "pipelined_ring_allreduce.coll").instantiate(p=3, k=2).schedule
    data = schedule_to_json(schedule)
    assert {op["lane"] for step in data["steps"] for op in step["ops"]} == {0, 1}
    back = schedule_from_json(data)
    assert [s.lanes for s in back.steps] == [s.lanes for s in schedule.steps]


def test_a_lane_outside_a_step_is_an_error() -> None:
    text = "algorithm a : allreduce\nparam p : int\nchunks 1\nphase x:\n  lane 0:\n    send 0 to 1 - rank\n"
    program = parse_program(text, "lane.coll")
    with pytest.raises(collc.CollError) as info:
        elaborate(program, {"p": 2})
    assert "lane.coll:5:8: error: a lane is part of a step" in format_error(info.value, program.sources)
