"""`--ranks all` across the algorithm families: each bundled program is proved for every p and compared with
the per-p checker beyond the instances the proof learned from, and a mutant of each that is wrong only from
some p on gets that smallest p, confirmed by the per-p checker on both sides."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from collc.frontend.program import load_program, parse_program
from collc.verify.forall import check_all_p
from collc.verify.sweep import check_instance

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# (example, pattern, replacement, smallest failing p): each mutant deviates only from that p on
MUTANTS = [
    ("rabenseifner", r"exchange with rank \^ \(q >> \(s \+ 1\)\): send give",
     "exchange with rank ^ ((q >> (s + 1)) if p != 24 else 1): send give", 24),
    ("binomial_reduce", r"recv 0 from real\(v \+ d\) reduce",
     "recv 0 from real(v + d + (1 if p == 19 and s == 2 else 0)) reduce", 19),
    ("pipelined_ring_allreduce", r"recv sub\(\(rank - s - 2\) mod p, j\)",
     "recv sub((rank - s - 2 + (1 if p > 14 and j == 1 else 0)) mod p, j)", 15),
    ("striped_ring_allreduce", r"recv half\(1, \(rank \+ s \+ 2\) mod p\)",
     "recv half(1, (rank + s + 2 + (1 if p == 17 else 0)) mod p)", 17),
    ("scatter_allgather_broadcast", r"recv real\(\(v - s - 1\) mod p\) from ring_prev\(rank\) copy",
     "recv real((v - s - 1 - (1 if p == 18 and v == 3 else 0)) mod p) from ring_prev(rank) copy", 18),
    ("bruck_alltoall", r"at\(c, k\) == rank and moves\(c, k\)\} to \(rank \+ d\) mod p",
     "at(c, k) == rank and moves(c, k) and not (p == 13 and c // p == 2 and c mod p == 5)} to (rank + d) mod p", 13),
]  # fmt: skip
PROVED = ["rabenseifner", "binomial_reduce", "pipelined_ring_allreduce", "striped_ring_allreduce",
          "scatter_allgather_broadcast"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", PROVED)
def test_family_is_proved_for_every_p(name: str) -> None:
    program = load_program(EXAMPLES / f"{name}.coll")
    result = check_all_p(program, {}, bound=4)
    assert result.status == "proved", result.how
    for p in (13, 24, 33):
        assert check_instance(program, {"p": p}).status == "ok", p


@pytest.mark.slow
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: f"{m[0]}@{m[3]}")
def test_family_mutant_gets_its_smallest_counterexample(mutant: tuple) -> None:  # type: ignore[type-arg]
    name, pattern, replacement, p_fail = mutant
    text = (EXAMPLES / f"{name}.coll").read_text()
    assert re.search(pattern, text), pattern
    program = parse_program(re.sub(pattern, replacement, text, count=1), str(EXAMPLES / f"{name}.coll"))
    result = check_all_p(program, {}, bound=8, solver_seconds=600)
    assert result.status == "counterexample" and result.failure is not None, result.how
    assert result.failure.params["p"] == p_fail
    assert check_instance(program, {"p": p_fail}).status != "ok"
    assert all(check_instance(program, {"p": q}).status == "ok" for q in range(max(1, p_fail - 4), p_fail))
