"""`--ranks all` for programs with lanes: the lockstep proof, and no chunk of a rank touched by two lanes (then
every overlap of the lanes' steps computes what lockstep does).  Every verdict is compared with the per-p
checker, whose race pass (`collc.verify.races`) is independent of the proof."""

from __future__ import annotations

from pathlib import Path

import pytest

from collc.frontend.program import load_program
from collc.verify.forall import check_all_p
from collc.verify.sweep import check_instance

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PIPELINED = """algorithm {name} : allreduce
param p : int where p >= 1
param k : int = 3 where k >= 1
chunks k * p

fn sub(b, j) = b * k + j

phase reduce_scatter:
  for step s in 0 .. p - 1:
    for j in 0 .. k:
      lane {lane}:
        send sub((rank - s - 1) mod p, j) to ring_next(rank)
        recv sub((rank - s - 2) mod p, j) from ring_prev(rank) reduce

phase allgather:
  for step s in 0 .. p - 1:
    for j in 0 .. k:
      lane j:
        send sub((rank - s) mod p, j) to ring_next(rank)
        recv sub((rank - s - 1) mod p, j) from ring_prev(rank) copy
"""


def _write(tmp_path: Path, name: str, lane: str) -> Path:
    path = tmp_path / f"{name}.coll"
    path.write_text(PIPELINED.format(name=name, lane=lane))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pipelined_ring_allreduce", "striped_ring_allreduce"])
def test_lane_examples_are_proved(name: str) -> None:
    program = load_program(EXAMPLES / f"{name}.coll")
    result = check_all_p(program, {}, bound=4)
    assert result.status == "proved", result.how
    assert "no two lanes touch one chunk" in result.how
    for p in (13, 21):
        assert check_instance(program, {"p": p}).status == "ok"


def test_lanes_that_share_chunks_are_not_proved(tmp_path: Path) -> None:
    """Sub-chunk j in lane (j + s) mod k: every lockstep step is the ring's, but a lane's later step writes a
    chunk another lane's earlier step reads.  The proof's lane obligation fails and the per-p checker finds
    the race at the smallest p."""
    path = _write(tmp_path, "rotating_lanes", "(j + s) mod k")
    program = load_program(path)
    result = check_all_p(program, {}, bound=8)
    assert result.status == "counterexample" and result.failure is not None
    p = result.failure.params["p"]
    report = check_instance(program, {"p": p}).report
    assert report is not None and any(f.code == "race" for f in report.findings)
    assert all(check_instance(program, {"p": q}).status == "ok" for q in range(1, p))


def test_lanes_that_share_chunks_only_at_large_p_are_found(tmp_path: Path) -> None:
    """The lanes rotate only from p = 14 on: the instances the proof learns from are race-free, z3 finds the
    overlap, and the per-p checker confirms it there."""
    path = _write(tmp_path, "late_lanes", "(j + (s if p > 13 else 0)) mod k")
    program = load_program(path)
    result = check_all_p(program, {}, bound=8)
    assert result.status == "counterexample" and result.failure is not None
    assert result.failure.params["p"] == 14
    report = check_instance(program, {"p": 14}).report
    assert report is not None and any(f.code == "race" for f in report.findings)
    assert check_instance(program, {"p": 13}).status == "ok"
