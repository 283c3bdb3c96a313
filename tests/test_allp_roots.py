"""`--ranks all` for every root: a rooted program proved at its default root covers every root when its schedule
at root R is the default's with the ranks rotated by R (`collc.verify.roots`).  Every claim is checked by the
per-p checker at roots the proof did not see; every program the rotation does not hold for is shown wrong at
some other root, or left at the one root it was proved for."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from collc.frontend.program import load_program
from collc.verify.forall import check_all_p
from collc.verify.roots import at, rotation
from collc.verify.sweep import check_instance
from collc.verify.symbolic import same_steps

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
REDUCE = """algorithm {name} : reduce
param p : int where p >= 1
param root : int = 0 where 0 <= root < p
chunks 1

fn vrank(r) = (r - root) mod p
fn real(v) = (v + root) mod p

phase reduce:
  for step s in 0 .. ceil_log2(p):
    let d = 1 << s
    let v = vrank(rank)
    if v % (2 * d) == d:
      send 0 to real(v - d)
    elif v % (2 * d) == 0 and v + d < p:
      recv 0 from {source} reduce
"""


def _program(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / f"{name}.coll"
    path.write_text(REDUCE.format(name=name, source=source))
    return path


def test_the_free_model_at_a_root_is_the_schedule_there() -> None:
    """The model with the root free, set to each root, has the elaborated ops of that root."""
    from collc.elaborate import elaborate

    for name in ("binomial_reduce", "binomial_broadcast"):
        program = load_program(EXAMPLES / f"{name}.coll")
        rot = rotation(program, {})
        assert rot is not None and rot.root == 0 and rot.base.fixed == (("root", 0),)
        for p, root in ((7, 3), (12, 11), (9, 0)):
            assert same_steps(at(rot.free, "root", root), elaborate(program, {"p": p, "root": root})) is None
        assert same_steps(at(rot.free, "root", 1), elaborate(program, {"p": 7, "root": 2})) is not None
        assert rotation(program, {"root": 2}) is None  # a root the user gave: the proof is for that one


def test_a_schedule_that_is_not_rotated_is_proved_for_its_root_only(tmp_path: Path) -> None:
    """Receiving from (v + d) mod p rather than real(v + d) is the same at root 0 and wrong elsewhere: proved
    for root 0 alone, and the per-p checker finds the other roots wrong."""
    path = _program(tmp_path, "unrotated", "(v + d) mod p")
    program = load_program(path)
    result = check_all_p(program, {}, bound=4)
    assert result.status == "proved" and not result.every
    assert result.fixed == (("root", 0),) and "for root=0 only" in result.how
    assert check_instance(program, {"p": 13, "root": 0}).status == "ok"
    assert check_instance(program, {"p": 13, "root": 5}).status != "ok"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["binomial_reduce", "binomial_broadcast"])
def test_rooted_examples_are_proved_for_every_root(name: str) -> None:
    program = load_program(EXAMPLES / f"{name}.coll")
    result = check_all_p(program, {}, bound=4)
    assert result.status == "proved", result.how
    assert result.every.startswith("every root") and result.fixed == ()
    rng = random.Random(5)
    for p in (13, 17, 40, 100):  # beyond the instances the proof and the comparison saw
        for root in {0, p - 1, rng.randrange(p), rng.randrange(p)}:
            assert check_instance(program, {"p": p, "root": root}).status == "ok", (p, root)


@pytest.mark.slow
def test_a_rotation_that_fails_beyond_the_compared_instances_is_found(tmp_path: Path) -> None:
    """Rotated correctly up to p = 11, wrong at other roots from p = 12: the comparison with the elaborated
    schedules (p <= 10) cannot see it, z3 does, and the per-p checker confirms it."""
    path = _program(tmp_path, "late", "real(v + d) if p < 12 or root == 0 else (v + d) mod p")
    program = load_program(path)
    rot = rotation(program, {})
    assert rot is not None and rot.compare() is None
    ok, why, _ = rot.prove(120_000)
    assert not ok and "its peer" in why and "fails at p=" in why
    result = check_all_p(program, {}, bound=4)
    assert result.status == "proved" and result.fixed == (("root", 0),) and not result.every
    assert check_instance(program, {"p": 12, "root": 0}).status == "ok"
    assert check_instance(program, {"p": 12, "root": 3}).status != "ok"


@pytest.mark.slow
def test_chunks_that_move_with_the_root_are_proved_for_every_root() -> None:
    """Van de Geijn's broadcast keeps virtual block v on rank v: at root R every chunk moves with the ranks."""
    program = load_program(EXAMPLES / "scatter_allgather_broadcast.coll")
    result = check_all_p(program, {}, bound=4, solver_seconds=300)
    assert result.status == "proved" and "every chunk c to (c + R) mod p" in result.every, result.how
    for p, root in ((13, 5), (24, 23), (31, 1)):
        assert check_instance(program, {"p": p, "root": root}).status == "ok"


@pytest.mark.slow
def test_chunks_that_move_in_one_phase_only_are_not_proved_for_every_root(tmp_path: Path) -> None:
    """The allgather forwards chunk (v - s) mod p, not real((v - s) mod p): the same at root 0, a chunk the rank
    does not hold elsewhere; neither renaming fits, and the per-p checker finds the other roots wrong."""
    text = (EXAMPLES / "scatter_allgather_broadcast.coll").read_text()
    text = text.replace("send real((v - s) mod p) to", "send (v - s) mod p to")
    text = text.replace("recv real((v - s - 1) mod p) from", "recv (v - s - 1) mod p from")
    path = tmp_path / "unmoved.coll"
    path.write_text(text)
    program = load_program(path)
    rot = rotation(program, {})
    assert rot is not None and rot.compare() is None
    ok, why, _ = rot.prove(300_000)
    assert not ok and "its chunks" in why
    assert check_instance(program, {"p": 9, "root": 0}).status == "ok"
    assert check_instance(program, {"p": 9, "root": 4}).status != "ok"
