"""Checking large allreduce instances through their rank symmetry (`collc.verify.symmetry`).

The reference is the per-op checker on the whole elaborated schedule (`check(elaborate(...))`): where the
symmetric path says correct, the per-op checker must agree and give the same statistics; it must never
call a wrong instance correct (every mutant of ring and Swing it accepts, the per-op checker accepts too),
and it must refuse instances that are not invariant, down to one rank of a late batch.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

from collc.cli import main
from collc.diagnostics import CollError
from collc.elaborate import MAX_SLOTS, elaborate
from collc.frontend.program import Program, load_program, parse_program
from collc.verify import symmetry
from collc.verify.check import check
from collc.verify.sweep import check_instance
from collc.verify.symmetry import MIN_SLOTS, Orbit, check_symmetric

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

RING = """algorithm ring_variant : allreduce
param p : int where p >= 2
chunks p
phase reduce_scatter:
  for step s in 0 .. {rs_steps}:
    send (rank - s - 1) mod p to {rs_peer}
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
phase allgather:
  for step s in 0 .. p - 1:
    send (rank - s) mod p to ring_next(rank)
    recv {ag_recv} mod p from ring_prev(rank) {ag_action}
"""


def _ring_text(
    rs_steps: str = "p - 1", rs_peer: str = "ring_next(rank)", ag_recv: str = "(rank - s - 1)", ag_action: str = "copy"
) -> str:
    return RING.format(rs_steps=rs_steps, rs_peer=rs_peer, ag_recv=ag_recv, ag_action=ag_action)


def _ring(**changes: str) -> Program:
    return parse_program(_ring_text(**changes), "ring_variant.coll")


def _reference(program: Program, p: int):  # type: ignore[no-untyped-def]
    return check(elaborate(program, {"p": p}))


@pytest.mark.parametrize(
    ("name", "sizes"),
    [
        ("swing_bw", (2, 4, 6, 8, 10, 12, 14, 16, 24, 32, 64, 128, 256)),  # even p, powers of two or not
        ("swing_bw_pow2", (4, 8, 64)),
        ("ring_allreduce", (2, 3, 5, 7, 16, 33)),
        ("rabenseifner", (8, 16, 32)),
    ],
)
def test_reports_equal_the_per_op_checker(name: str, sizes: tuple[int, ...]) -> None:
    program = load_program(EXAMPLES / f"{name}.coll")
    for p in sizes:
        got = check_symmetric(program, {"p": p}, min_slots=0)
        assert got is not None, p
        header, report, orbit = got
        ref = _reference(program, p)
        assert ref.ok and report.ok, p
        assert report.stats == ref.stats, p  # every statistic, step by step
        assert (report.findings, report.nranks, report.params) == (ref.findings, ref.nranks, ref.params)
        assert p % orbit.shift == 0 and orbit.chunks == orbit.shift * header.nchunks // p


def test_orbits_found() -> None:
    swing = load_program(EXAMPLES / "swing_bw.coll")
    ring = load_program(EXAMPLES / "ring_allreduce.coll")
    assert check_symmetric(swing, {"p": 64}, min_slots=0)[2] == Orbit(2, 2)  # type: ignore[index]
    assert check_symmetric(ring, {"p": 9}, min_slots=0)[2] == Orbit(1, 1)  # type: ignore[index]
    assert check_symmetric(ring, {"p": 9, "k": 3}, min_slots=0)[2] == Orbit(1, 3)  # type: ignore[index]


def test_batches_of_a_few_ranks_give_the_same_report() -> None:
    swing = load_program(EXAMPLES / "swing_bw.coll")
    whole = check_symmetric(swing, {"p": 48}, min_slots=0)
    steps: list[tuple[int, int]] = []
    batched = check_symmetric(swing, {"p": 48}, min_slots=0, batch=5, on_progress=lambda d, t: steps.append((d, t)))
    assert whole is not None and batched is not None
    assert batched[1] == whole[1]
    assert steps == [(d, 12) for d in range(1, 13)]  # batches of 4 ranks (a multiple of the shift, 2)


@pytest.mark.parametrize(
    ("what", "program", "p"),
    [
        ("a step short, every rank alike", _ring(rs_steps="p - 2"), 8),
        ("reduce for copy, every rank alike", _ring(ag_action="reduce"), 8),
        ("sends to a rank that receives from another", _ring(rs_peer="(rank + 2) mod p"), 8),
        ("the last rank receives another chunk", _ring(ag_recv="(rank - s - 1 + (1 if rank == p - 1 else 0))"), 12),
        (
            "rank 9 receives another chunk at one step",
            _ring(ag_recv="(rank - s - 1 + (1 if rank == 9 and s == 3 else 0))"),
            12,
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_wrong_or_asymmetric_instances_are_left_to_the_per_op_checker(what: str, program: Program, p: int) -> None:
    assert not _reference(program, p).ok, what
    for batch in (2048, 4):
        assert check_symmetric(program, {"p": p}, min_slots=0, batch=batch) is None, (what, batch)
    result = check_instance(program, {"p": p})
    assert result.status == "wrong"


def test_not_for_other_collectives_odd_swing_or_small_instances() -> None:
    allgather = load_program(EXAMPLES / "ring_allgather.coll")
    swing = load_program(EXAMPLES / "swing_bw.coll")
    pipelined = load_program(EXAMPLES / "pipelined_ring_allreduce.coll")
    assert _reference(allgather, 8).ok and check_symmetric(allgather, {"p": 8}, min_slots=0) is None
    assert check_symmetric(swing, {"p": 9}, min_slots=0) is None  # the extra rank is no shifted rank 1
    assert check_symmetric(pipelined, {"p": 8}, min_slots=0) is None  # lanes
    assert check_symmetric(swing, {"p": 64}) is None  # 4096 slots: the per-op checker's size
    assert 64 * 64 < MIN_SLOTS


def _lib_parser(tmp: Path):  # type: ignore[no-untyped-def]
    copy = tmp / "examples"
    shutil.copytree(EXAMPLES, copy)

    def parse(mutant) -> Program:  # type: ignore[no-untyped-def]
        (tmp / mutant.file).write_text(mutant.text)
        try:
            return parse_program((tmp / mutant.program).read_text(), str(tmp / mutant.program))
        finally:
            (tmp / mutant.file).write_text((ROOT / mutant.file).read_text())

    return parse


def _mutants() -> ModuleType:
    benchmarks = str(ROOT / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    return importlib.import_module("mutants")


def test_never_accepts_a_mutant_the_per_op_checker_rejects(tmp_path: Path) -> None:
    parse = _lib_parser(tmp_path)
    chosen = [
        m
        for m in _mutants().generate_mutants(EXAMPLES)
        if m.program in ("examples/swing_bw.coll", "examples/ring_allreduce.coll")
    ]
    assert len(chosen) > 150
    accepted = rejected = 0
    for i, mutant in enumerate(chosen):
        try:
            program = parse(mutant)
        except CollError:
            continue
        for p in (6 + 2 * (i % 2),):  # every other mutant at p = 6 (Swing's blocks deduplicated), at p = 8
            try:
                ref = _reference(program, p)
            except CollError:
                continue
            got = check_symmetric(program, {"p": p}, min_slots=0, batch=4)
            if got is None:
                rejected += not ref.ok
                continue
            assert ref.ok, (mutant.key, mutant.description, p)
            assert got[1].stats == ref.stats, (mutant.key, p)
            accepted += 1
    assert rejected > 120 and accepted > 100  # the mutants bite (169 here), and many are still correct (292)


def test_the_cli_says_how_it_checked(tmp_path: Path) -> None:
    runner = CliRunner()
    text = runner.invoke(main, ["check", str(EXAMPLES / "swing_bw.coll"), "-p", "4096"])
    assert text.exit_code == 0, text.output
    assert "correct" in text.output
    assert "every rank r does what rank r mod 2 does" in text.output
    assert "chunks 0..1 (one of each orbit) followed at all 4096 ranks" in text.output
    data = runner.invoke(main, ["check", str(EXAMPLES / "swing_bw.coll"), "-p", "4096", "--json"])
    assert data.exit_code == 0, data.output
    out = json.loads(data.output)
    assert out["ok"] and out["symmetry"] == {"shift": 2, "chunks": 2}
    assert out["stats"]["messages"] == 4096 * 24 and out["stats"]["steps"] == 24
    # below the size where it pays, the per-op checker runs and says nothing of symmetry
    small = runner.invoke(main, ["check", str(EXAMPLES / "swing_bw.coll"), "-p", "256"])
    assert small.exit_code == 0 and "symmetry" not in small.output


@pytest.mark.slow
def test_beyond_the_per_op_checkers_slots() -> None:
    """swing_bw at p = 32768: 2^30 (rank, chunk) slots, four times what the per-op checker keeps state for."""
    swing = load_program(EXAMPLES / "swing_bw.coll")
    with pytest.raises(CollError, match="beyond the limit"):
        elaborate(swing, {"p": 32768}, ranks=[0])
    assert 32768 * 32768 > MAX_SLOTS
    got = check_symmetric(swing, {"p": 32768})
    assert got is not None
    assert got[1].ok and got[2] == Orbit(2, 2)
    assert got[1].stats.messages == 32768 * 30 and got[1].stats.max_chunks_sent == 32767


@pytest.mark.parametrize("change", [{"rs_steps": "p - 2"}, {"ag_action": "reduce"}], ids=["short", "reduce"])
def test_a_wrong_orbit_is_reported_where_the_per_op_checker_cannot_run(
    change: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above `WRONG_ABOVE` slots (2^28, the per-op checker's limit; lowered here) the orbit's findings are the
    report: real ranks, steps and chunks of the orbit, the same kinds of finding the per-op checker makes."""
    path = tmp_path / "ring_variant.coll"
    path.write_text(_ring_text(**change))
    program = load_program(path)
    got = check_symmetric(program, {"p": 8}, min_slots=0, wrong_above=0)
    assert got is not None
    _, wrong, orbit = got
    ref = _reference(program, 8)
    assert not wrong.ok and not ref.ok
    assert wrong.findings and all(f.chunk is None or f.chunk < orbit.chunks for f in wrong.findings)
    assert {f.code for f in wrong.findings} <= {f.code for f in ref.findings}
    assert wrong.stats == ref.stats
    # collc check: the report, the orbit, and the exit code of a wrong schedule
    monkeypatch.setattr(symmetry, "MIN_SLOTS", 0)
    monkeypatch.setattr(symmetry, "WRONG_ABOVE", 0)
    out = CliRunner().invoke(main, ["check", str(path), "-p", "8"])
    assert out.exit_code == 1, out.output
    assert "WRONG" in out.output and "every chunk c fails as chunk c mod 1 does" in out.output


PHASES = (
    _ring_text()
    + """  if rank == 70:
    step: send {} to ring_next(rank)
phase tail:
  if rank == {late}:
    step: send {} to ring_next(rank)
"""
)


def test_phases_are_checked_across_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks 70 and 75 reach one (empty) step in different phases: the elaborator refuses the instance, and so
    must the batches, which elaborate the two ranks apart (their ops alone are invariant); likewise for rank 9,
    among the first ranks, which the check elaborates before its batches."""
    for late in (75, 9):
        path = tmp_path / f"phases{late}.coll"
        path.write_text(PHASES.replace("{late}", str(late)))
        program = load_program(path)
        with pytest.raises(CollError, match="reaches step") as whole:
            elaborate(program, {"p": 80})
        assert check_symmetric(program, {"p": 80}, min_slots=0, batch=4) is None
        # where the per-op checker cannot run, the same error, from the batches
        with pytest.raises(CollError, match="reaches step") as batched:
            check_symmetric(program, {"p": 80}, min_slots=0, wrong_above=0, batch=4)
        assert batched.value.message == whole.value.message
    monkeypatch.setattr(symmetry, "MIN_SLOTS", 0)
    monkeypatch.setattr(symmetry, "WRONG_ABOVE", 0)
    out = CliRunner().invoke(main, ["check", str(path), "-p", "80"])
    assert out.exit_code == 2 and "reaches step" in out.output, out.output
