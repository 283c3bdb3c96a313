"""Checking instances from the symbolic model (`collc.verify.vector`) against the op-by-op checker.

The reference is `check(elaborate(...))`, the per-op checker on the whole elaborated schedule: every
report the model path gives must equal it field by field, and the model path must never call a wrong
instance correct (it returns None and the op-by-op checker names the problem).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from collc import report
from collc.cli import main
from collc.elaborate import elaborate
from collc.frontend.program import load_program, parse_program
from collc.verify.check import check
from collc.verify.sweep import check_instance, parameter_sets, sweep
from collc.verify.vector import check_model, prepare

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

RING = """algorithm {name} : allreduce
param p : int where p >= 1
chunks p
phase reduce_scatter:
  for step s in 0 .. {rs_steps}:
    send (rank - s - 1) mod p to ring_next(rank)
    recv (rank - s - 2) mod p from ring_prev(rank) reduce
phase allgather:
  for step s in 0 .. p - 1:
    send (rank - s) mod p to ring_next(rank)
    recv {ag_recv} mod p from ring_prev(rank) copy
"""


@pytest.mark.parametrize(
    ("name", "sizes"),
    [
        ("ring_allreduce", (1, 2, 3, 5, 16, 33)),
        ("ring_allgather", (1, 4, 7, 20)),
        ("ring_reduce_scatter", (2, 9, 24)),
        ("recursive_doubling", (1, 2, 8, 32, 128)),
        ("recursive_doubling_any", (3, 6, 64, 100)),  # floor log2 of any p
        ("binomial_broadcast", (5, 65, 128)),  # ceil log2 of any p, a root
        ("binomial_reduce", (7, 77)),  # % and // by 2^s
    ],
)
def test_reports_equal_the_op_by_op_checker(name: str, sizes: tuple[int, ...]) -> None:
    program = load_program(EXAMPLES / f"{name}.coll")
    model = prepare(program, {})
    assert model is not None
    for p in sizes:
        got = check_model(program, model, {"p": p})
        assert got is not None, p
        assert got[1] == check(elaborate(program, {"p": p})), p  # verdict, statistics, everything


def test_other_parameters() -> None:
    program = load_program(EXAMPLES / "ring_allreduce.coll")
    model = prepare(program, {"k": 3})
    assert model is not None
    got = check_model(program, model, {"p": 7, "k": 3})
    assert got is not None and got[1] == check(elaborate(program, {"p": 7, "k": 3}))


@pytest.mark.parametrize(
    ("rs_steps", "ag_recv", "wrong_at"),
    [
        ("p - 2", "(rank - s - 1)", 3),  # one reduce-scatter step short: matched, but the sums are wrong (p >= 2)
        ("p - 1", "(rank - s - 1 + (1 if p == 14 and s == 3 else 0))", 14),  # unmatched at p = 14 only
    ],
)
def test_wrong_instances_go_to_the_op_by_op_checker(tmp_path: Path, rs_steps: str, ag_recv: str, wrong_at: int) -> None:
    path = tmp_path / "mutant.coll"
    path.write_text(RING.format(name="mutant", rs_steps=rs_steps, ag_recv=ag_recv))
    program = load_program(path)
    model = prepare(program, {})
    assert model is not None
    assert check_instance(program, {"p": wrong_at}).status == "wrong"  # the reference
    assert check_model(program, model, {"p": wrong_at}) is None
    with_model = check_instance(program, {"p": wrong_at}, symbolic=model)
    without = check_instance(program, {"p": wrong_at})
    assert with_model.status == "wrong" and with_model.report == without.report
    outcome = sweep(program, parameter_sets({"p": list(range(2, 34))}, program), jobs=1)  # 32: the model path
    smallest = next(p for p in range(2, 34) if check_instance(program, {"p": p}).status != "ok")
    assert outcome.failures[0].params["p"] == smallest


def test_model_of_another_program_is_refused_at_the_spot_check() -> None:
    ring = load_program(EXAMPLES / "ring_allreduce.coll")
    model = prepare(load_program(EXAMPLES / "ring_allgather.coll"), {})
    assert model is not None
    assert check_model(ring, model, {"p": 6}) is None


def test_no_model_where_the_symbolic_model_cannot_express_the_program() -> None:
    for name in ("swing_bw", "pipelined_ring_allreduce", "compression/compressed_ring_allreduce"):
        assert prepare(load_program(EXAMPLES / f"{name}.coll"), {}) is None


def test_a_program_whose_small_instances_differ_from_its_model_gets_none() -> None:
    # a comprehension whose elements are not its variable is outside the model: extraction refuses it
    text = """algorithm odd : allreduce
param p : int where p >= 2
chunks 1
phase a:
  for step s in 0 .. 1:
    if rank in {x + 0 for x in 0 .. p if x % 2 == 1}: send 0 to rank - 1
"""
    assert prepare(parse_program(text, "odd.coll"), {}) is None


def test_cli_single_instance_reads_as_the_op_by_op_report() -> None:
    program_path = EXAMPLES / "ring_allreduce.coll"
    out = CliRunner().invoke(main, ["check", str(program_path), "-p", "70"])
    assert out.exit_code == 0, out.output
    schedule = elaborate(load_program(program_path), {"p": 70, "k": 1})
    from collc.api import load

    expected = report.report_text(schedule, check(schedule), load(str(program_path)).sources)
    assert out.output.strip() == expected.strip()


def test_sweeps_use_the_model_only_for_enough_work() -> None:
    from collc.verify.sweep import symbolic_for

    program = load_program(EXAMPLES / "ring_allreduce.coll")
    assert symbolic_for(program, [{"p": p} for p in range(2, 9)], "step") is None
    assert symbolic_for(program, [{"p": 128}], "step") is not None
    assert symbolic_for(program, [{"p": 128}], "blocking") is None
    assert symbolic_for(program, [{"p": 128, "k": 1}, {"p": 130, "k": 2}], "step") is None


DATA = Path(__file__).resolve().parent / "data" / "allp"


@pytest.mark.parametrize(
    ("name", "p"),
    [
        ("d_conflict", 64),
        ("k_redempty", 64),
        ("a_modneg", 128),
        ("h_shift", 64),
        ("g_vec", 64),
        ("g_vecshift", 64),
        ("g_bits", 64),
        ("v_compfalse", 64),
        ("v_fnassert", 64),
        ("v_intcond", 64),
        ("v_minone", 64),
        ("v_ortrue", 64),
        ("v_setneg", 64),
        ("hv_dedup", 64),
    ],
)
def test_model_path_never_accepts_what_the_checker_rejects(name: str, p: int) -> None:
    program = load_program(DATA / f"{name}.coll")
    reference = check_instance(program, {"p": p})
    assert reference.status in ("wrong", "error")
    model = prepare(program, {})
    if model is not None:
        assert check_model(program, model, {"p": p}) is None
    assert check_instance(program, {"p": p}, symbolic=model).status == reference.status


def test_formulas_that_grow_exponentially_are_refused() -> None:
    program = load_program(DATA / "n_blowup.coll")
    assert prepare(program, {}) is None  # refused at extraction, quickly, instead of evaluated for ever
