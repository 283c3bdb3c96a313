"""The symbolic model means what the elaborator means: scopes, joins, loops and procedures, construct by construct.

Each program is extracted (`collc.verify.symbolic.extract`) and the model's operations are compared with
the elaborated schedule at every rank (`same_steps`) at p the model was not built from, including p where
the program's rank- or p-dependent branches first matter; what the model cannot state exactly must be
refused with the construct's place, never modelled differently.
"""

from __future__ import annotations

import pytest

from collc.diagnostics import CollError
from collc.elaborate import elaborate
from collc.frontend.program import parse_program
from collc.verify.check import check
from collc.verify.forall import check_all_p
from collc.verify.symbolic import Refusal, extract, same_steps
from collc.verify.vector import check_model, prepare

HEAD = "algorithm {name} : allreduce\nparam p : int where p >= {pmin}\nchunks p\n"
ALLGATHER = """phase allgather:
  for step s in 0 .. p - 1:
    send (rank - s) mod p to ring_next(rank)
    recv (rank - s - 1) mod p from ring_prev(rank) copy
"""
SIZES = (2, 3, 13, 21, 24, 25, 64, 65, 100)

# Programs whose model must equal the elaborated schedule, every rank, every p; each deviates at rank 20 or
# from p = 13 on, through a construct the elaborator and the model must read alike.
SAME = {
    "let_in_if": """phase reduce_scatter:
  for step s in 0 .. p - 1:
    let off = 1
    if rank == 5 and p > 12:
      let off = 2
    send (rank - s - off) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
""",
    "for_variable_after_loop": """phase reduce_scatter:
  for step s in 0 .. p - 1:
    for k in 0 .. 2:
      pass
    if rank == 20:
      for k in 0 .. 3:
        pass
    send (rank - s - k) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
""",
    "let_after_step_loop": """let off = 0
phase reduce_scatter:
  for step s in 0 .. p - 1:
    let off = 1 if rank == 20 else 0
    send (rank - s - 1) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
  for step s in 0 .. p - 1:
    send (rank - s + off) mod p to ring_next(rank)
    recv (rank - s - 1) mod p from ring_prev(rank) copy
""",
    "procedure_reads_globals": """let d = 2 if p > 12 else 1
proc rs():
  for step s in 0 .. p - 1:
    send (rank - s - d) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
phase reduce_scatter:
  let d = 1
  do rs()
""",
    "elif_after_a_rank_condition": """phase reduce_scatter:
  for step s in 0 .. p - 1:
    if rank == 20:
      send (rank - s - 2) mod p to ring_next(rank)
    elif true:
      send (rank - s - 1) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
""",
    "step_block_let_escapes": """phase reduce_scatter:
  step:
    let k = 1 if rank == 20 else 0
  for step s in 0 .. p - 1:
    send (rank - s - 1 - k) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
""",
    "procedure_let_stays_inside": """proc pick():
  let off = 7
phase reduce_scatter:
  let off = 1
  for step s in 0 .. p - 1:
    do pick()
    send (rank - s - off) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
""",
    "shadowed_global_in_a_branch": """let nxt = 1
phase reduce_scatter:
  for step s in 0 .. p - 1:
    let nxt = 1
    if rank == 21 and p > 22:
      let nxt = 2
    send (rank - s - 1) mod p to (rank + nxt) mod p
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
""",
    "loop_variable_of_a_step_loop": """phase reduce_scatter:
  for step s in 0 .. p - 1:
    send (rank - s - 1) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
  for step t in 0 .. p - 1:
    send (rank - t + (s - p + 2 if rank == 20 else 0)) mod p to ring_next(rank)
    recv (rank - t - 1) mod p from ring_prev(rank) copy
""",
    "default_then_override": """phase reduce_scatter:
  let nxt = rank + 1
  if rank == p - 1:
    let nxt = 0
  let prv = rank - 1
  if rank == 0:
    let prv = p - 1
  for step s in 0 .. p - 1:
    send (rank - s - 1) mod p to nxt
    recv (rank - s - 2) mod p from prv reduce
""",
}
NO_ALLGATHER = {"let_after_step_loop", "loop_variable_of_a_step_loop"}  # their second loop is the allgather


def _program(name: str, pmin: int = 2) -> str:
    body = SAME[name]
    return HEAD.format(name=name, pmin=pmin) + body + ("" if name in NO_ALLGATHER else ALLGATHER)


@pytest.mark.parametrize("name", sorted(SAME))
def test_the_model_is_the_elaborated_schedule_at_every_rank(name: str) -> None:
    program = parse_program(_program(name), f"{name}.coll")
    model = extract(program)
    for p in SIZES:
        schedule = elaborate(program, {"p": p})
        assert same_steps(model, schedule) is None, f"{name} at p={p}"


@pytest.mark.parametrize("name", sorted(SAME))
def test_the_step_formulas_never_call_a_wrong_instance_correct(name: str) -> None:
    """Where the per-op checker finds an instance wrong, the path from the step formulas hands it over; where it
    finds it correct, that path takes it."""
    program = parse_program(_program(name), f"{name}.coll")
    model = prepare(program, {})
    assert model is not None, name
    for p in SIZES:
        ok = check(elaborate(program, {"p": p})).ok
        fast = check_model(program, model, {"p": p})
        assert fast is None if not ok else fast is not None and fast[1].ok, f"{name} at p={p}"


@pytest.mark.slow  # tests/test_soundness.py proves and refutes the scoping cases in the normal suite
@pytest.mark.parametrize("name", sorted(SAME))
def test_no_proof_for_a_wrong_program(name: str) -> None:
    """`--ranks all` does not say PROVED where the per-op checker finds an instance wrong; where it finds every
    instance correct, the program is proved."""
    program = parse_program(_program(name), f"{name}.coll")
    verdicts = {p: check(elaborate(program, {"p": p})).ok for p in SIZES}
    result = check_all_p(program, {}, bound=24, solver_seconds=30)
    if all(verdicts.values()):
        assert result.status == "proved", (name, result.how)
    else:
        assert result.status == "counterexample", (name, result.how)
        wrong = min(p for p, ok in verdicts.items() if not ok)
        assert result.failure is not None and result.failure.params["p"] <= wrong


def test_the_idiom_is_proved_where_the_rest_is() -> None:
    assert check_all_p(parse_program(_program("default_then_override"), "d.coll"), {}).status == "proved"


REFUSED = {
    "carried from one iteration to the next": (
        """phase a:
  let off = 0
  for step s in 0 .. p - 1:
    send (rank - s - 1 - off) mod p to ring_next(rank)
    recv (rank - s - 2 - off) mod p from ring_prev(rank) reduce
    let off = 0
""",
        "previous iteration of the step loop at line 6",
    ),
    "a set chosen by a condition": (
        """phase a:
  for step s in 0 .. p - 1:
    let out = {(rank - s - 1) mod p}
    if rank == 20:
      let out = {(rank - s - 1) mod p, rank}
    send out to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
""",
        "out is a set chosen by a condition",
    ),
    "steps that depend on the rank": (
        """phase a:
  for step s in 0 .. rank:
    send 0 to ring_next(rank)
    recv 0 from ring_prev(rank) reduce
""",
        "number of steps depends on the rank",
    ),
    "a long inner loop": (
        """phase a:
  for step s in 0 .. p - 1:
    for k in 0 .. 100000:
      pass
    send (rank - s - 1) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
""",
        "100000 iterations",
    ),
    "a literal beyond 64 bits": (
        """phase a:
  for step s in 0 .. p - 1:
    if rank == p:
      let big = 99999999999999999999
    send (rank - s - 1) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
""",
        "beyond 64 bits",
    ),
    "steps under a condition on the rank": (
        """phase a:
  if rank == 0:
    for step s in 0 .. p - 1:
      send (rank - s - 1) mod p to ring_next(rank)
""",
        "condition around whole steps",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_the_model_cannot_state_is_refused_at_its_place(case: str) -> None:
    body, reason = REFUSED[case]
    text = HEAD.format(name="r", pmin=1) + body
    with pytest.raises(Refusal) as err:
        extract(parse_program(text, "r.coll"))
    assert reason in err.value.reason and err.value.span is not None and err.value.span.line > 3


PARTIAL = """phase a:
  for step s in 0 .. p - 1:
    if rank >= 1:
      let prv = rank - 1
    if rank == 0:
      let prv = p - 1
    send (rank - s - 1) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from prv reduce
"""


def test_a_local_assigned_on_every_path_it_is_read_on_is_proved() -> None:
    program = parse_program(HEAD.format(name="partial", pmin=1) + PARTIAL + ALLGATHER, "partial.coll")
    assert check_all_p(program, {}).status == "proved"


def test_a_local_read_where_it_is_not_assigned_is_not_correct() -> None:
    """Rank 11 reads ``prv`` without having assigned it: the elaborator stops there (an error of the program from
    p = 12 on); the model keeps the obligation, so neither the proof nor the path from the formulas says
    correct."""
    text = HEAD.format(name="partial", pmin=1) + PARTIAL.replace("rank >= 1", "rank >= 1 and rank != 11") + ALLGATHER
    program = parse_program(text, "partial.coll")
    with pytest.raises(CollError, match="used before it is assigned"):
        elaborate(program, {"p": 12})
    model = prepare(program, {})
    assert model is not None
    assert check_model(program, model, {"p": 64}) is None
    result = check_all_p(program, {}, bound=16)
    assert result.status == "counterexample" and result.failure is not None
    assert result.failure.params["p"] == 12 and result.failure.status == "error"


def test_a_proof_that_runs_out_of_time_says_so_and_checks_the_bound() -> None:
    program = parse_program(_program("default_then_override"), "d.coll")
    result = check_all_p(program, {}, bound=8, time_limit=0)
    assert result.status == "checked" and result.bound == 8
    assert "z3 gave no answer in" in result.how and "--time-limit" in result.how
