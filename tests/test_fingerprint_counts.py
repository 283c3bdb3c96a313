"""The verifier's count of contributions per slot, beside the 64-bit fingerprint.

A slot's fingerprint is the sum of its contributions' random hashes modulo 2^64, so a schedule that
counts every contribution 2^64 + 1 times (64 doublings, then one more copy of the sum) ends with exactly
the right fingerprint whatever the hashes are.  Every path that moves fingerprints (the per-op checker
`collc.verify.check`, its numpy steps `collc.verify.fast`, the step formulas `collc.verify.vector`) also
keeps a count of contributions that cannot wrap around, and the postcondition asks for the right count:
such a schedule is wrong on every path, and the exact re-trace names the double count.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from collc.diagnostics import CollError
from collc.elaborate import elaborate, level_splits
from collc.frontend.program import Program, load_program, parse_program
from collc.ir import ParamValue, Schedule
from collc.verify import check as check_module
from collc.verify import fast as fast_module
from collc.verify import vector
from collc.verify.check import CheckReport, check
from collc.verify.fast import count_dtype
from collc.verify.findings import Collector
from collc.verify.vector import check_model, prepare

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TWICE_64 = str(2**64 + 1)  # how often the schedules below count every contribution

# p = 3: rank 1 doubles the sum 64 times with rank 0 (2^64 copies of each contribution: fingerprint 0),
# then adds rank 2's sum once more (2^64 + 1 copies: the right fingerprint) and hands it round.
WRAP = """algorithm wrap : allreduce
param p : int where p == 3
chunks 1
phase gather:
  step:
    if rank == 1:
      recv 0 from 0 reduce
    if rank == 0:
      send 0 to 1
  step:
    if rank == 1:
      recv 0 from 2 reduce
    if rank == 2:
      send 0 to 1
  step:
    if rank == 1:
      send 0 to 0
      send 0 to 2
    else:
      recv 0 from 1 copy
phase double:
  for step s in 0 .. 128:
    if s % 2 == 0:
      if rank == 1:
        recv 0 from 0 reduce
      if rank == 0:
        send 0 to 1
    else:
      if rank == 0:
        recv 0 from 1 copy
      if rank == 1:
        send 0 to 0
phase finish:
  step:
    if rank == 0:
      recv 0 from 2 reduce
    if rank == 2:
      send 0 to 0
  step:
    if rank == 0:
      send 0 to 1
      send 0 to 2
    else:
      recv 0 from 0 copy
"""

# The same at any power of two p: a correct recursive doubling, then the lower half of the ranks double
# their sum 64 times in pairs (p ops per step: the numpy steps of `collc.verify.fast` take them from
# p = 192), add the upper half's sum once more and hand it back.
WRAP_MANY = """algorithm wrap_many : allreduce
param p : int where p >= 4 and is_pow2(p)
chunks 1
phase allreduce:
  for step s in 0 .. log2(p):
    exchange with rank ^ (1 << s): send 0; recv 0 reduce
phase double:
  for step s in 0 .. 64:
    if rank < p / 2:
      exchange with rank ^ 1: send 0; recv 0 reduce
phase finish:
  step:
    if rank < p / 2:
      recv 0 from rank + p / 2 reduce
    else:
      send 0 to rank - p / 2
  step:
    if rank < p / 2:
      send 0 to rank + p / 2
    else:
      recv 0 from rank - p / 2 copy
"""

# An allgather whose reduces count chunk 0 (rank 0's) 2^64 + 1 times at the ranks of the lower half: its
# fingerprint is rank 0's hash, as it should be.  Reduces in a collective that only copies need counts too.
WRAP_ALLGATHER = """algorithm wrap_allgather : allgather
param p : int where p >= 4 and p % 4 == 0
chunks p
phase gather:
  for step s in 0 .. p - 1:
    send (rank - s) mod p to (rank + 1) mod p
    recv (rank - s - 1) mod p from (rank - 1) mod p copy
phase double:
  for step s in 0 .. 64:
    if rank < p / 2:
      exchange with rank ^ 1: send 0; recv 0 reduce
phase finish:
  step:
    if rank < p / 2:
      recv 0 from rank + p / 2 reduce
    else:
      send 0 to rank - p / 2
  step:
    if rank < p / 2:
      send 0 to rank + p / 2
    else:
      recv 0 from rank - p / 2 copy
"""


def _program(text: str) -> Program:
    return parse_program(text, f"{text.split()[1]}.coll")


def _schedule(text: str, p: int) -> Schedule:
    return elaborate(_program(text), {"p": p})


def _same(a: CheckReport, b: CheckReport) -> None:
    for field in dataclasses.fields(CheckReport):
        assert getattr(a, field.name) == getattr(b, field.name), field.name


def _assert_double_count(report: CheckReport) -> None:
    assert not report.ok
    assert [f.code for f in report.findings] == ["double-count"]
    finding = report.findings[0]
    assert "so they are counted twice" in finding.message
    assert finding.chunk == 0
    assert finding.actual is not None and f"x{TWICE_64}" in finding.actual


def test_the_fingerprint_alone_cannot_tell_the_wrap_schedule_from_a_right_one() -> None:
    schedule = _schedule(WRAP, 3)
    for fast in (None, False):
        fp = check_module._Fingerprint(schedule, Collector(20), True, fast)
        fp.run()
        assert (fp.state == fp.h.sum(dtype=np.uint64)).all()  # every slot: the right fingerprint
        # 3 (2^64 + 1) contributions per slot (float32 rounds it to 3 * 2^64): 3 expected
        assert fp.count is not None and (fp.count == np.float32(3 * 2.0**64)).all()
        assert fp.failing_chunks().tolist() == [0]


def test_wrap_is_wrong_and_the_finding_names_the_double_count() -> None:
    schedule = _schedule(WRAP, 3)
    default, exact = check(schedule), check(schedule, fast=False)
    _assert_double_count(default)
    _same(default, exact)
    finding = default.findings[0]
    assert (finding.step, finding.rank, finding.span.line) == (3, 1, 25)  # the first doubling, in phase double
    assert "ranks {0..2}" in finding.message


@pytest.mark.parametrize("p", [4, 16, 256])
def test_wrap_with_many_ranks_is_wrong_on_the_numpy_steps_and_op_by_op(p: int, monkeypatch: pytest.MonkeyPatch) -> None:
    schedule = _schedule(WRAP_MANY, p)
    applied = {"reduces": 0}
    apply = fast_module.Regular.apply

    def spy(self: fast_module.Regular, plan: fast_module.Plan, *args: object) -> bool:
        done = apply(self, plan, *args)  # type: ignore[arg-type]
        applied["reduces"] += bool(done and plan.reduce.any())
        return done

    monkeypatch.setattr(fast_module.Regular, "apply", spy)
    default = check(schedule)
    if p >= 192:  # the doubling and the finish steps went through numpy, both with and without batches
        assert applied["reduces"] >= 65
    applied["reduces"] = 0
    exact = check(schedule, fast=False)
    assert applied["reduces"] == 0
    _assert_double_count(default)
    _same(default, exact)
    _same(default, check(schedule, fast=True))


@pytest.mark.parametrize("p", [4, 12, 256])
def test_reduces_that_wrap_in_an_allgather_are_wrong(p: int) -> None:
    schedule = _schedule(WRAP_ALLGATHER, p)
    default = check(schedule)
    _assert_double_count(default)
    assert "ranks {0}" in default.findings[0].message
    _same(default, check(schedule, fast=False))
    _same(default, check(schedule, fast=True))


@pytest.mark.parametrize("text", [WRAP_MANY, WRAP_ALLGATHER], ids=["allreduce", "allgather"])
def test_the_step_formulas_hand_a_wrap_schedule_over(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    program = _program(text)
    model = prepare(program, {})
    assert model is not None
    verdicts: list[bool] = []
    postcondition = vector._postcondition

    def spy(*args: object) -> bool:
        verdicts.append(postcondition(*args))  # type: ignore[arg-type]
        return verdicts[-1]

    monkeypatch.setattr(vector, "_postcondition", spy)
    for p in (64, 128, 64):  # fresh hashes each time
        assert check_model(program, model, {"p": p}) is None
    assert verdicts == [False, False, False]  # every step was taken: the count failed at the end


def test_the_step_formulas_still_accept_the_right_schedules() -> None:
    for name, p in (
        ("ring_allreduce", 64),
        ("recursive_doubling", 128),
        ("ring_allgather", 64),
        ("ring_reduce_scatter", 96),
        ("binomial_broadcast", 65),
        ("binomial_reduce", 77),
    ):
        program = load_program(EXAMPLES / f"{name}.coll")
        model = prepare(program, {})
        assert model is not None, name
        got = check_model(program, model, {"p": p})
        assert got is not None and got[1].ok, name
        assert got[1] == check(elaborate(program, {"p": p})), name


def _examples() -> list[Path]:
    return sorted(p for p in EXAMPLES.rglob("*.coll") if p.parent.name != "lib")


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.stem)
def test_every_example_still_verifies(path: Path) -> None:
    program = load_program(path)
    names = {param.name for param in program.params}
    checked = 0
    for p in (2, 3, 4, 8, 16):
        params: dict[str, ParamValue] = {"p": p}
        if "root" in names:
            params["root"] = p - 1
        if "dims" in names:
            params = {"dims": (p,) if p > 4 else (p, p)}
        for split in level_splits(program, params)[-2:]:  # a total p split over a hierarchy's levels
            try:
                schedule = elaborate(program, split)
            except CollError:
                continue
            report = check(schedule)
            assert report.ok, (path.stem, split, report.findings[:1])
            checked += 1
    assert checked, path.stem


def test_counts_are_kept_only_once_something_is_reduced() -> None:
    for name, reduces in (("ring_allgather", False), ("binomial_broadcast", False), ("ring_allreduce", True)):
        schedule = elaborate(load_program(EXAMPLES / f"{name}.coll"), {"p": 8})
        fp = check_module._Fingerprint(schedule, Collector(20), True, None)
        fp.run()
        assert (fp.count is not None) == reduces, name
        if reduces:
            assert fp.held is None and (fp.count == 8).all()  # every slot holds data: no held flags
        assert fp.failing_chunks().size == 0


def test_count_dtype_is_exact_up_to_the_largest_count_asked_for() -> None:
    assert count_dtype(3) is np.float32 and count_dtype((1 << 24) - 1) is np.float32
    assert count_dtype(1 << 24) is np.float64
    # rounding never brings a count above 2^24 back down: 2^64 + 1 is 2^64, never p
    big = np.float32(2.0**24)
    assert big + np.float32(1) == big and big + np.float32(1) > np.float32((1 << 24) - 1)
    assert np.float32(2.0**64) + np.float32(2.0**64) + np.float32(1) == np.float32(2.0**65)
