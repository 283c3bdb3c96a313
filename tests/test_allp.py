"""`collc check --ranks all`: proofs for every p, counterexamples, and the bounded fallback.

Every "proved" is compared with the per-p checker at rank counts the proof did not learn from, and every
counterexample with the per-p checker on both sides of it (correct below, wrong at it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from collc.cli import main
from collc.elaborate import elaborate
from collc.frontend.program import load_program, parse_program
from collc.verify.forall import check_all_p
from collc.verify.sweep import check_instance
from collc.verify.symbolic import Refusal, extract, same_steps

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PROVED = [
    "ring_allreduce", "ring_allgather", "ring_reduce_scatter", "recursive_doubling", "recursive_doubling_any",
    "pairwise_reduce_scatter", "direct_allgather", "recursive_doubling_allgather",
]  # fmt: skip

RING = """algorithm {name} : allreduce
param p : int where p >= 1
chunks p
phase reduce_scatter:
  for step s in 0 .. p - 1:
    send (rank - s - 1) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
phase allgather:
  for step s in 0 .. {ag_steps}:
    send (rank - s) mod p to ring_next(rank)
    recv {ag_recv} mod p from ring_prev(rank) copy
"""
OFF_AT_11 = "(rank - s - 1 + (1 if p == 11 and s == 3 else 0))"
OFF_AT_100 = "(rank - s - 1 + (1 if p == 100 else 0))"
RD = """algorithm {name} : allreduce
param p : int where p >= 1 and is_pow2(p)
chunks 1
phase allreduce:
  for step s in 0 .. log2(p):
    exchange with rank ^ (1 << {dist}): send 0; recv 0 reduce
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.coll"
    path.write_text(text)
    return path


def _status(program_path: Path, p: int) -> str:
    return check_instance(load_program(program_path), {"p": p}).status


@pytest.mark.parametrize("name", PROVED)
def test_examples_are_proved_and_agree_with_the_per_p_checker(name: str) -> None:
    program = load_program(EXAMPLES / f"{name}.coll")
    result = check_all_p(program, {}, bound=4)
    assert result.status == "proved", result.how
    assert result.invariants and result.checked == 0
    pow2 = name in ("recursive_doubling", "recursive_doubling_allgather")
    for p in (64, 128) if pow2 else (13, 20, 31):  # beyond the instances the invariants were learned from
        assert check_instance(program, {"p": p}).status == "ok"


def test_symbolic_model_has_the_elaborated_ops() -> None:
    for name in [*PROVED, "pairwise_alltoall", "bruck_allgather"]:
        program = load_program(EXAMPLES / f"{name}.coll")
        model = extract(program)
        sizes = (1, 2, 4, 16) if model.pow2 else (1, 2, 3, 7, 13)
        for p in sizes:
            assert same_steps(model, elaborate(program, {"p": p})) is None, (name, p)


def test_model_differs_when_the_program_differs() -> None:
    program = load_program(EXAMPLES / "ring_allreduce.coll")
    other = load_program(EXAMPLES / "ring_allgather.coll")
    assert same_steps(extract(other), elaborate(program, {"p": 5})) is not None


@pytest.mark.parametrize(
    ("name", "text", "p_fail"),
    [
        # the allgather stops a step early: wrong from p = 2 on
        ("ring_short", RING.format(name="ring_short", ag_steps="p - 2", ag_recv="(rank - s - 1)"), 2),
        # a receive off by one at p = 11 only: found by checking p in order
        ("ring_p11", RING.format(name="ring_p11", ag_steps="p - 1", ag_recv=OFF_AT_11), 11),
        # the same at p = 100, beyond the bound: z3 names the p, the per-p checker confirms it
        ("ring_p100", RING.format(name="ring_p100", ag_steps="p - 1", ag_recv=OFF_AT_100), 100),
        # recursive doubling that repeats distance 1 from step 5 on: wrong from p = 64
        ("rd_repeat", RD.format(name="rd_repeat", dist="(s if s < 5 else 0)"), 64),
    ],
)
def test_mutants_get_their_smallest_counterexample(tmp_path: Path, name: str, text: str, p_fail: int) -> None:
    path = _write(tmp_path, name, text)
    result = check_all_p(load_program(path), {}, bound=24)
    assert result.status == "counterexample"
    assert result.failure is not None and result.failure.params["p"] == p_fail
    assert _status(path, p_fail) == "wrong"
    smaller = [q for q in range(1, p_fail) if not ("rd" in name and q & (q - 1))]
    assert all(_status(path, q) == "ok" for q in smaller[-6:])


def test_mutant_within_the_learned_range_fails_the_proof(tmp_path: Path) -> None:
    path = _write(tmp_path, "rd_far", RD.format(name="rd_far", dist="(s + 1)"))
    result = check_all_p(load_program(path), {}, bound=8)
    assert result.status == "counterexample" and result.failure is not None
    assert result.failure.params["p"] == 2  # exchanges with rank ^ 2, which p = 2 does not have


def test_unsupported_construct_falls_back_to_a_bounded_check() -> None:
    result = check_all_p(load_program(EXAMPLES / "swing_bw.coll"), {}, bound=10)
    assert result.status == "checked" and result.bound == 10 and result.checked == 9
    assert "ceil_log2" in result.how and result.span is not None and result.span.line == 12  # let L = ceil_log2(n)


def test_refusals_name_the_construct() -> None:
    cases = {
        "hierarchical/hier_allreduce_ring": "hierarchy",
        "weighted_striped_ring_allreduce": "chunk weights",
        "compression/compressed_ring_allreduce": "compressed message",
    }
    for name, word in cases.items():
        with pytest.raises(Refusal) as err:
            extract(load_program(EXAMPLES / f"{name}.coll"))
        assert word in err.value.reason and err.value.span is not None


def test_recursive_function_of_the_rank_is_refused() -> None:
    text = """algorithm rec : allreduce
param p : int where p >= 2
chunks 1
fn far(r) = r if r < 1 else far(r - 1)
phase a:
  for step s in 0 .. 1:
    if rank == 0: send 0 to far(rank + 1) + 1
    if rank == 1: recv 0 from 0 reduce
"""
    with pytest.raises(Refusal) as err:
        extract(parse_program(text, "rec.coll"))
    assert "recursion of far()" in err.value.reason


def test_cli_proved_counterexample_and_json(tmp_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(main, ["check", str(EXAMPLES / "ring_allreduce.coll"), "-p", "all"])
    assert out.exit_code == 0, out.output
    assert "PROVED for every p" in out.output and "z3" in out.output and "k=1" in out.output
    path = _write(tmp_path, "ring_p11", RING.format(name="ring_p11", ag_steps="p - 1", ag_recv=OFF_AT_11))
    out = runner.invoke(main, ["check", str(path), "-p", "all", "--json"])
    assert out.exit_code == 1, out.output
    data = json.loads(out.output)
    assert data["status"] == "counterexample" and data["counterexample"]["params"]["p"] == 11
    out = runner.invoke(main, ["check", str(EXAMPLES / "swing_bw.coll"), "-p", "all", "--bound", "6"])
    assert out.exit_code == 0 and "not proved; correct for every allowed p up to 6" in out.output
    assert "swing_bw.coll:12:" in out.output


def test_cli_bad_uses_of_all() -> None:
    runner = CliRunner()
    out = runner.invoke(main, ["check", str(EXAMPLES / "ring_allreduce.coll"), "-p", "all", "--param", "k=1..3"])
    assert out.exit_code == 2 and "one integer value with --ranks all" in out.output
    out = runner.invoke(main, ["check", str(EXAMPLES / "hierarchical/hier_allreduce_ring.coll"), "-p", "all"])
    assert out.exit_code == 2 and "has a hierarchy" in out.output
    out = runner.invoke(main, ["check", str(EXAMPLES / "ring_allreduce.coll"), "-p", "all", "--solver-time", "0"])
    assert out.exit_code == 2 and "--solver-time" in out.output
    out = runner.invoke(main, ["check", str(EXAMPLES / "torus/swing_bw_torus.coll"), "-p", "all"])
    assert out.exit_code == 2 and "unknown parameter 'p'" in out.output
    assert "Traceback" not in out.output


@pytest.mark.slow
def test_other_parameters_are_fixed_by_param() -> None:
    program = load_program(EXAMPLES / "ring_allreduce.coll")
    result = check_all_p(program, {"k": 2}, bound=4)
    assert result.status == "proved" and result.fixed == (("k", 2),)


@pytest.mark.slow
@pytest.mark.parametrize("root", [0, 3])
def test_binomial_broadcast_is_proved(root: int) -> None:
    """Root 0, and a root whose distances (r - root) mod p need the remainder by a symbolic p."""
    program = load_program(EXAMPLES / "binomial_broadcast.coll")
    result = check_all_p(program, {"root": root}, bound=4)
    assert result.status == "proved", result.how
    assert "64-bit integers" in result.how  # bit operations: proved over machine integers
    for p in (17, 100):
        assert check_instance(program, {"p": p, "root": root}).status == "ok"


@pytest.mark.slow
def test_swing_latency_optimal_is_proved_for_every_p() -> None:
    """Swing's peers r +- rho(s) (a power of -2 and an exact division by 3) on the largest power of two, the
    other ranks folded onto it: the contribution sets are the ranks at a distance of s negabinary digits."""
    program = load_program(EXAMPLES / "swing_lat.coll")
    result = check_all_p(program, {}, bound=4)
    assert result.status == "proved", result.how
    assert "64-bit integers" in result.how and any("2863311530" in inv for inv in result.invariants)
    for p in (100, 128, 129):  # beyond the instances the invariants were learned from
        assert check_instance(program, {"p": p}).status == "ok"


@pytest.mark.slow
def test_swing_mutant_gets_its_smallest_counterexample(tmp_path: Path) -> None:
    """rho(5) instead of rho(4) at the fifth step: the same peers modulo 32 (-21 = 11 mod 32), so only from p = 64
    on (p = 33..63 fold onto 32) is a contribution counted twice."""
    text = (EXAMPLES / "swing_lat.coll").read_text().replace("algorithm swing_lat", "algorithm swing_skip")
    text = text.replace('include "lib/fold.coll"', f'include "{EXAMPLES / "lib" / "fold.coll"}"')
    text = text.replace("swing_peer_n(rank, s, q)", "swing_peer_n(rank, s if s < 4 else s + 1, q)")
    path = _write(tmp_path, "swing_skip", text)
    result = check_all_p(load_program(path), {}, bound=24)
    assert result.status == "counterexample" and result.failure is not None
    assert result.failure.params["p"] == 64
    assert _status(path, 64) == "wrong" and all(_status(path, q) == "ok" for q in (32, 33, 48, 63))


def _rows(schedule: object) -> list[list[tuple[object, ...]]]:
    return [
        sorted((o.rank, o.kind.value, o.peer, o.chunks.bits, str(o.action)) for o in step.ops)
        for step in schedule.steps  # type: ignore[attr-defined]
    ]


def test_swing_blocks_in_closed_form_are_swing_bws_and_have_a_model() -> None:
    """swing_bw_pow2 reads each block's step off negabinary digits; swing_bw follows the peers through the
    later steps (the prelude's recursion): the same schedule at every power of two.  Its comprehension
    {c for c in 0 .. p if ...} is a set with a condition in the model, op for op the elaborated one."""
    closed = load_program(EXAMPLES / "swing_bw_pow2.coll")
    recursive = load_program(EXAMPLES / "swing_bw.coll")
    for p in (2, 4, 8, 16, 32, 64):
        assert _rows(elaborate(closed, {"p": p})) == _rows(elaborate(recursive, {"p": p})), p
    model = extract(closed)
    assert model.pow2 and any(op.chunks[0] == "where" for loop in model.loops for op in loop.ops)
    for p in (2, 4, 8, 16):
        assert same_steps(model, elaborate(closed, {"p": p})) is None
    bruck = extract(load_program(EXAMPLES / "bruck_allgather.coll"))  # its rotations: sets with a condition
    for p in (1, 2, 3, 5, 7, 8, 12):
        assert same_steps(bruck, elaborate(load_program(EXAMPLES / "bruck_allgather.coll"), {"p": p})) is None, p


ROTATION = """algorithm rot : allgather
param p : int where p >= 1
param a : int = 3 where a >= -40
param lo : int = 1 where lo >= -20
param hi : int = 4 where hi >= -20
chunks p
phase only:
  step:
    send {{(a + i) mod p for i in lo .. hi}} to (rank + 1) mod p
    recv {{(i + a) mod p for i in lo .. hi}} from (rank - 1) mod p copy
"""


def test_rotations_are_the_sets_they_stand_for(tmp_path: Path) -> None:
    """{(a + x) mod m for x in lo .. hi} in the model is {c for c in 0 .. m if (c - a - lo) mod m < hi - lo}: the
    same chunks as the elaborator computes, for runs shorter and longer than m, empty ones and negative bounds."""
    import random

    program = load_program(_write(tmp_path, "rot", ROTATION.format()))
    rng = random.Random(3)
    for _ in range(40):
        params = {"a": rng.randrange(-40, 40), "lo": rng.randrange(-20, 20)}
        params["hi"] = params["lo"] + rng.randrange(-3, 25)
        model = extract(program, {k: v for k, v in params.items()})
        for p in (2, 5, 8):  # (p = 1 would send to itself)
            assert same_steps(model, elaborate(program, {"p": p, **params})) is None, (p, params)


def test_other_element_forms_are_refused(tmp_path: Path) -> None:
    text = ROTATION.format().replace("{(a + i) mod p for i in lo .. hi}", "{(2 * i) mod p for i in lo .. hi}")
    with pytest.raises(Refusal, match=r"nor \(e \+ x\) mod m of it"):
        extract(load_program(_write(tmp_path, "twice", text)))


@pytest.mark.slow
def test_bruck_allgather_is_proved_for_every_p() -> None:
    program = load_program(EXAMPLES / "bruck_allgather.coll")
    result = check_all_p(program, {}, bound=4)
    assert result.status == "proved", result.how
    assert check_instance(program, {"p": 37}).status == "ok"


BRUCK_SHORT = (
    (EXAMPLES / "bruck_allgather.coll")
    .read_text()
    .replace("let n = min(d, p - d)", "let n = min(d, p - d - (1 if p == 7 else 0))")
)


@pytest.mark.slow
def test_bruck_mutant_gets_its_smallest_counterexample(tmp_path: Path) -> None:
    """The last step one block short at p = 7 only: the proof fails, and the smallest failing p is found and
    confirmed by the per-p checker."""
    path = _write(tmp_path, "bruck_short", BRUCK_SHORT.replace("algorithm bruck_allgather", "algorithm bruck_short"))
    result = check_all_p(load_program(path), {}, bound=8)
    assert result.status == "counterexample" and result.failure is not None, result.how
    assert result.failure.params["p"] == 7
    assert _status(path, 7) == "wrong" and all(_status(path, q) == "ok" for q in range(1, 7))


@pytest.mark.slow
def test_swing_bandwidth_optimal_is_proved_for_every_power_of_two() -> None:
    """The reduce-scatter's invariant keeps, for a block sent at step t, the partial sum of step t: the proof's
    hardest obligation takes z3 about 100 s on a 2-core machine, hence the longer limit."""
    program = load_program(EXAMPLES / "swing_bw_pow2.coll")
    result = check_all_p(program, {}, bound=4, solver_seconds=600)
    assert result.status == "proved", result.how
    for p in (128, 256):
        assert check_instance(program, {"p": p}).status == "ok"


@pytest.mark.slow
def test_swing_bandwidth_optimal_mutant_gets_its_smallest_counterexample(tmp_path: Path) -> None:
    """rho(s + 1) for rho(s) from step 5 on: the same peers modulo 64 at p = 64 (step 5 is the last), so the
    first p it is wrong at is 128, beyond the instances the invariants are learned from (up to 32)."""
    text = (EXAMPLES / "swing_bw_pow2.coll").read_text().replace("algorithm swing_bw_pow2", "algorithm swing_bw_skip")
    text = text.replace("swing_peer(rank, s)", "swing_peer(rank, s if s < 5 else s + 1)")
    path = _write(tmp_path, "swing_bw_skip", text)
    result = check_all_p(load_program(path), {}, bound=4, solver_seconds=600)
    assert result.status == "counterexample" and result.failure is not None
    assert result.failure.params["p"] == 128
    assert _status(path, 128) == "wrong" and _status(path, 64) == "ok"


POWER = """algorithm power : allreduce
param p : int where p >= 2
chunks 1
phase a:
  for step s in 0 .. 1:
    let x = ({expr}) mod p
    if rank == 0: send 0 to 1 + x - x
    if rank == 1: recv 0 from 0 reduce
"""


def _let_x(model: object) -> object:
    """The value of POWER's ``let x``: among the values the loop computes, the one ``... mod p``."""
    lets = [t for _, t in model.loops[0].lets if t[:2] == ("bin", "mod") and t[3] == ("var", "p")]  # type: ignore[attr-defined]
    assert len(lets) == 1
    return lets[0]


def test_powers_of_a_symbol_and_exact_division_in_the_model() -> None:
    """``b ** e`` for b = +-2^k and ``/`` by a constant evaluate as the elaborator does; an inexact ``/`` and other
    bases are refused."""
    from collc.values import binop as lang_binop
    from collc.verify.symbolic import evaluate

    for base in (2, -2, 4, -8):
        text = POWER.format(expr=f"({base}) ** p")
        model = extract(parse_program(text, "power.coll"))
        let = _let_x(model)
        for p in range(2, 12):
            assert same_steps(model, elaborate(parse_program(text, "power.coll"), {"p": p})) is None
            assert evaluate(let, {"p": p, "rank": 0, "i": 0}) == lang_binop("mod", lang_binop("**", base, p), p)
    text = POWER.format(expr="(1 - (-2) ** (p + 1)) / 3")
    let = _let_x(extract(parse_program(text, "power.coll")))
    for p in range(2, 12):
        assert evaluate(let, {"p": p, "rank": 0, "i": 0}) == ((1 - (-2) ** (p + 1)) // 3) % p
    with pytest.raises(Refusal, match="not exact"):
        evaluate(("bin", "/", ("var", "p"), ("num", 3)), {"p": 4})
    for bad, word in (("3 ** p", "power of a symbol"), ("p / p", "positive constant")):
        with pytest.raises(Refusal, match=word):
            extract(parse_program(POWER.format(expr=bad), "power.coll"))


# Programs the per-p checker finds wrong (or cannot evaluate) for a reason the proof must also see:
# name -> (the smallest failing p, a word of the proof's reason or None when it only falls back).
REVIEWED = {
    "d_conflict": (4, "a copy and a reduction land in one slot"),  # write-conflict
    "e_dup": (2, "sent twice"),  # duplicate-transfer
    "f_redempty": (2, "slot without data"),  # reduce-into-empty (allgather)
    "k_redempty": (2, "slot without data"),
    "a_modneg": (13, None),  # `1 mod -2` is 1 (mod takes |divisor|); differs only from p = 13
    "c_chunks": (128, "number of chunks is at least 1"),
    "g_contract": (17, "number of chunks is 1 * p"),  # 2 * p chunks from p = 17
    "j_setcmp": (2, "comparison of sets"),  # refused, not a traceback
    "o_smallest": (3, None),  # z3 names p = 20; p = 3 fails too and is the answer
    # values the elaborator computes and cannot (an inexact '/', a shift count, 62 bits) only at a large p,
    # wherever they are: a guard, the chunk count, a constraint, an unused let of a function, a sum
    "g_guard": (20, "not exact"),
    "g_bits": (64, "can be computed"),  # a guard, over 64-bit integers
    "g_bitsshift": (64, "can be computed"),
    "g_chunks": (20, "not exact"),
    "g_constraint": (100, "a constraint can be evaluated"),
    "g_fnlet": (20, None),
    "g_sum": (20, None),
    "g_peerdiv": (20, "not exact"),  # z3's p, where learning from it fails
    "g_vec": (64, "can be computed"),  # one rank only: the model path must not say correct either
    "g_bigpow": (20, "constant power"),
    "g_hugepow": (20, "constant power"),  # refused at once, not computed
    # a second review: values dropped where a condition folds to a constant, set elements below 0, asserts in
    # functions, ints as conditions, min() of one int, a value two loops compute alike
    "r_andfalse": (20, "can be computed"),
    "r_assertor": (20, "can be computed"),
    "r_compfalse": (20, "can be computed"),
    "r_compneg": (20, "can be computed"),
    "r_constraint": (20, "can be computed"),
    "r_ortrue": (20, "can be computed"),
    "r_setneg": (20, "can be computed"),
    "r_fnassert": (20, "assert"),
    "r_intcond": (20, "a condition on one path and an int on another"),
    "r_minone": (20, "min()"),
    "h_dedup": (22, "can be computed"),
}
DATA = Path(__file__).resolve().parent / "data" / "allp"


@pytest.mark.parametrize("name", sorted(REVIEWED))
def test_reviewed_programs_are_not_proved(name: str) -> None:
    p_fail, word = REVIEWED[name]
    program = load_program(DATA / f"{name}.coll")
    result = check_all_p(program, {}, bound=24)
    assert result.status == "counterexample" and result.failure is not None
    assert result.failure.params["p"] == p_fail
    if word is not None:
        assert word in result.how
    assert check_instance(program, {"p": p_fail}).status != "ok"  # the per-p checker agrees
