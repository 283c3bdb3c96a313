"""Step sampling: long step loops elaborated in part, for the simulator (collc.elaborate.sampling)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collc.elaborate import elaborate, elaborate_sampled
from collc.elaborate.sampling import EDGE, picks
from collc.frontend.program import load_program, parse_program
from collc.ir import Step

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _ops_text(step: Step) -> list[tuple[int, str, int, int, int]]:
    return sorted((op.rank, op.kind.value, op.peer, op.chunks.bits, op.span.line) for op in step.ops)


def _stand_ins(weights: tuple[int, ...]) -> list[int]:
    """For every exact step, the index of the sampled step standing in for it."""
    out: list[int] = []
    for i, w in enumerate(weights):
        out.extend([i] * w)
    return out


@pytest.mark.parametrize("n, limit", [(5, 8), (8, 8), (9, 8), (63, 16), (4095, 32), (100, 9)])
def test_picks_cover_ends_and_stay_within_limit(n: int, limit: int) -> None:
    chosen = picks(n, limit)
    assert chosen == sorted(set(chosen))
    assert all(0 <= i < n for i in chosen)
    if n <= limit:
        assert chosen == list(range(n))
    else:
        assert len(chosen) <= limit
        assert chosen[:EDGE] == list(range(EDGE)) and chosen[-EDGE:] == list(range(n - EDGE, n))


@pytest.mark.parametrize("example, p", [("ring_allreduce", 40), ("ring_allgather", 33), ("swing_bw", 64)])
def test_sampled_steps_are_the_exact_steps_they_name(example: str, p: int) -> None:
    program = load_program(EXAMPLES / f"{example}.coll")
    exact = elaborate(program, {"p": p})
    sampled, weights = elaborate_sampled(program, {"p": p}, 12)
    assert sum(weights) == len(exact.steps)
    assert len(weights) == len(sampled.steps)
    # the k-th sampled step is the exact step at the start of the k-th run of stood-in steps
    first = 0
    for step, w in zip(sampled.steps, weights, strict=True):
        assert step.phase == exact.steps[first].phase
        assert _ops_text(step) == _ops_text(exact.steps[first])
        first += w
    if len(exact.steps) > 12:
        assert len(sampled.steps) < len(exact.steps)
    else:
        assert weights == (1,) * len(exact.steps)


def test_ring_loops_sampled_to_the_limit() -> None:
    program = load_program(EXAMPLES / "ring_allreduce.coll")
    sampled, weights = elaborate_sampled(program, {"p": 1024}, 16)
    assert sum(weights) == 2 * 1023
    assert len(sampled.steps) == 32  # 16 per phase
    assert max(weights) > 100


MISALIGNED = """algorithm t : allgather
param p : int
chunks p
phase main:
  if rank == 0:
    for step s in 0 .. 30:
      send 0 to 1
  elif rank == 1:
    for step s in 0 .. 10:
      recv 0 from 0 copy
    for step s in 0 .. 20:
      recv 0 from 0 copy
  for step s in 0 .. 3:
    send rank to (rank + 1) mod p
    recv (rank - 1) mod p from (rank - 1) mod p copy
"""


def test_ranks_meeting_loops_differently_get_the_exact_schedule() -> None:
    """Rank 0 runs one 30-step loop, rank 1 two shorter ones over the same steps: no sampling."""
    program = parse_program(MISALIGNED, "t.coll")
    exact = elaborate(program, {"p": 4})
    sampled, weights = elaborate_sampled(program, {"p": 4}, 8)
    assert weights == (1,) * len(exact.steps)
    assert [_ops_text(s) for s in sampled.steps] == [_ops_text(s) for s in exact.steps]
    assert _stand_ins(weights) == list(range(len(exact.steps)))
