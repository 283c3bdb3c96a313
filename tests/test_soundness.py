"""Soundness of the verifier's paths: none may say correct or PROVED where the per-op checker finds the
program wrong (tests/soundness_gen.py; the full campaign is benchmarks/soundness.py).

* the regression programs: the five ways the symbolic model read the language differently from the
  elaborator (a `let` in an `if` in a step dropped after the `if`, a plain `for`'s variable dropped after the
  loop, a `let` in a step loop dropped after it, a procedure seeing its caller's locals, an `if`/`elif` chain
  with a rank-dependent condition before a constant-true one), each wrong only at a rank or p the model's
  comparisons with the elaborator do not look at; and three more the campaign found (a `let` in a plain
  `for` inside a step, a step loop's variable, a `let` in a `step:` block, each read after its block);
* the idiom "a default, then an override in a branch", which is correct and which the proof should take;
* a seeded campaign of generated programs, a few hundred cases, with no unsound verdict.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import soundness_gen as sg

from collc import api
from collc.elaborate import elaborate
from collc.frontend.program import Program
from collc.verify import forall, sweep, vector
from collc.verify.check import check

_RS = """\
phase allgather:
  for step s in 0 .. p - 1:
    send (rank - s) mod p to ring_next(rank)
    recv (rank - s - 1) mod p from ring_prev(rank) copy
"""

HEAD = "algorithm {name} : allreduce\nparam p : int where p >= 1\nchunks p\n"

# A let assigned inside an `if` in a step: the elaborator keeps it after the `if`.
LET_IN_IF = (
    HEAD.format(name="let_in_if")
    + """\
phase reduce_scatter:
  for step s in 0 .. p - 1:
    let off = 1
    if rank == 20 and p > 12:
      let off = 2
    send (rank - s - off) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
"""
    + _RS
)

# The variable of a plain `for` keeps its last value after the loop.
FOR_VARIABLE = (
    HEAD.format(name="for_variable")
    + """\
phase reduce_scatter:
  for step s in 0 .. p - 1:
    let j = 0
    for j in 0 .. 2:
      pass
    let off = 2 if rank == 20 and j == 1 else 1
    send (rank - s - off) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
"""
    + _RS
)

# A let assigned in a step loop keeps its last iteration's value after the loop.
LET_IN_STEP_LOOP = (
    HEAD.format(name="let_in_step_loop")
    + """\
let off = 0
phase ring:
  for step s in 0 .. p - 1:
    let off = 1 if rank == 20 and p > 12 else 0
    send (rank - s - 1) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
  for step s in 0 .. p - 1:
    send (rank - s - off) mod p to ring_next(rank)
    recv (rank - s - 1) mod p from ring_prev(rank) copy
"""
)

# A procedure sees the parameters, `rank` and the globals, not its caller's locals.
PROC_CALLER_LOCAL = (
    HEAD.format(name="proc_caller_local")
    + """\
let off = 2 if p > 12 else 1
proc rs_step(s):
  send (rank - s - (off if rank == 20 else 1)) mod p to ring_next(rank)
  recv (rank - s - 2) mod p from ring_prev(rank) reduce
phase reduce_scatter:
  for step s in 0 .. p - 1:
    let off = 1
    do rs_step(s)
"""
    + _RS
)

# An if/elif chain around lets at the phase level: rank 20 takes the first branch, the others the second.
ELIF_CHAIN = (
    HEAD.format(name="elif_chain")
    + """\
phase reduce_scatter:
  if rank == 20 and p > 12:
    let off = 2
  elif true:
    let off = 1
  for step s in 0 .. p - 1:
    send (rank - s - off) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
"""
    + _RS
)

# Found by the campaign besides: a let assigned in a plain `for` inside a step, the variable of a step loop
# read after it, a let assigned in a `step:` block at the phase level; each escapes its block.
FOR_LET = (
    HEAD.format(name="for_let")
    + """\
phase reduce_scatter:
  for step s in 0 .. p - 1:
    let off = 1
    for j in 0 .. 2:
      if rank == 20 and j == 1:
        let off = 2
    send (rank - s - off) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
"""
    + _RS
)

STEP_VARIABLE = (
    HEAD.format(name="step_variable")
    + """\
let s = -1
phase ring:
  for step s in 0 .. p - 1:
    send (rank - s - 1) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
  for step t in 0 .. p - 1:
    let off = 1 if rank == 20 and s == p - 2 else 0
    send (rank - t - off) mod p to ring_next(rank)
    recv (rank - t - 1) mod p from ring_prev(rank) copy
"""
)

LET_IN_STEP_BLOCK = (
    HEAD.format(name="let_in_step_block")
    + """\
phase reduce_scatter:
  let off = 1
  step:
    let off = 2 if rank == 20 else 1
  for step s in 0 .. p - 1:
    send (rank - s - off) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
"""
    + _RS
)

MORE = {"for_let": FOR_LET, "step_variable": STEP_VARIABLE, "let_in_step_block": LET_IN_STEP_BLOCK}

SCOPING = {
    "let_in_if": LET_IN_IF,
    "for_variable": FOR_VARIABLE,
    "let_in_step_loop": LET_IN_STEP_LOOP,
    "proc_caller_local": PROC_CALLER_LOCAL,
    "elif_chain": ELIF_CHAIN,
}

# The idiom: a default, then an override in a branch (a correct ring).
OVERRIDE = (
    HEAD.format(name="override_ring")
    + """\
phase reduce_scatter:
  for step s in 0 .. p - 1:
    let nxt = rank + 1
    if rank == p - 1:
      let nxt = 0
    let prv = rank - 1
    if rank == 0:
      let prv = p - 1
    send (rank - s - 1) mod p to nxt
    recv (rank - s - 2) mod p from prv reduce
phase allgather:
  for step s in 0 .. p - 1:
    let nxt = rank + 1
    if rank == p - 1:
      let nxt = 0
    send (rank - s) mod p to nxt
    recv (rank - s - 1) mod p from ring_prev(rank) copy
"""
)


def _program(text: str, tmp_path: Path) -> Program:
    path = tmp_path / "program.coll"
    path.write_text(text)
    return api.load(path).program


def _per_op(program: Program, p: int) -> bool:
    return check(elaborate(program, {"p": p}), fast=False).ok


def _not_called_correct(text: str, tmp_path: Path, prover: bool) -> None:
    """The program is right at small p and wrong at 64 and 100: check_model, the sweep and (with ``prover``) the
    proof for all p must not call it correct there."""
    program = _program(text, tmp_path)
    assert all(_per_op(program, p) for p in (1, 2, 5, 8, 12)), "the deviation must hide from small instances"
    truth = {p: _per_op(program, p) for p in (13, 64, 100)}
    assert not all(truth.values()), "the deviation must show at some tested p"
    model = vector.prepare(program, {})
    if model is not None:
        for p, ok in truth.items():
            got = vector.check_model(program, model, {"p": p})
            assert ok or got is None or not got[1].ok, f"check_model says p={p} is correct; the per-op checker: wrong"
    result = sweep.sweep(program, [{"p": p} for p in truth], jobs=1, keep_going=True)
    for r in result.results:
        assert (r.status == "ok") == truth[int(r.params["p"])], f"the sweep at {r.params}: {r.status}"
    if prover:
        allp = forall.check_all_p(program, {}, bound=8, solver_seconds=3)
        wrong = [p for p, ok in truth.items() if not ok]
        assert allp.status != "proved", f"PROVED, but the per-op checker finds p in {wrong} wrong"


@pytest.mark.parametrize("name", sorted(SCOPING))
def test_scoping_case_is_not_called_correct(name: str, tmp_path: Path) -> None:
    _not_called_correct(SCOPING[name], tmp_path, prover=True)


@pytest.mark.parametrize("name", sorted(MORE))
def test_more_scoping_cases_are_not_called_correct(name: str, tmp_path: Path) -> None:
    _not_called_correct(MORE[name], tmp_path, prover=False)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MORE))
def test_more_scoping_cases_are_not_proved(name: str, tmp_path: Path) -> None:
    _not_called_correct(MORE[name], tmp_path, prover=True)


def test_default_then_override_is_proved(tmp_path: Path) -> None:
    program = _program(OVERRIDE, tmp_path)
    assert all(_per_op(program, p) for p in (1, 2, 3, 7, 13, 64))
    model = vector.prepare(program, {})
    assert model is not None, "the step formulas refuse the idiom"
    got = vector.check_model(program, model, {"p": 64})
    assert got is not None and got[1].ok, "check_model hands p=64 over"
    allp = forall.check_all_p(program, {}, bound=16, solver_seconds=20)
    assert allp.status == "proved", allp.how


def test_generator_is_deterministic_and_parses(tmp_path: Path) -> None:
    kinds: set[str] = set()
    planted = 0
    for index in range(120):
        a, b = sg.make_program(11, index), sg.make_program(11, index)
        assert a == b
        folder = tmp_path / str(index)
        folder.mkdir()
        sg.load(a, folder)  # raises if it does not parse
        kinds.add(a.family)
        planted += a.plan is not None
    assert len(kinds) >= 8 and 30 <= planted <= 90


FAST = sg.Options(small=2, mid=3, big=0, max_p=40, bound=8, solver_seconds=3, allp_every=4, path_timeout=30,
                  allp_timeout=40, planted=0.75)  # fmt: skip


def test_campaign_finds_no_unsound_verdict() -> None:
    results = [sg.run_program(index, 7, FAST) for index in range(16)]
    cases = [c for r in results for c in r.cases]
    truths = [t.status for r in results for t in r.truths]
    assert len(cases) >= 250
    assert truths.count("wrong") >= 8 and truths.count("ok") >= 40, "the planted deviations must show"
    rows = sg.table(results)
    assert rows["vector"].took > 0 and rows["allp"].took > 0
    bad = [(r.index, c) for r in results for c in r.unsound()]
    assert not bad, "unsound verdicts:\n" + "\n".join(
        f"program {i} {c.path} p={c.label}: {c.claim} where the per-op checker says {c.truth}" for i, c in bad
    )


@pytest.mark.slow
def test_campaign_longer() -> None:
    results = [sg.run_program(index, 8, sg.Options()) for index in range(150)]
    bad = [(r.index, c) for r in results for c in r.unsound()]
    assert not bad, f"{len(bad)} unsound verdicts, first: {bad[:3]}"
