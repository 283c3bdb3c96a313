"""Trivance (latency- and bandwidth-optimal), PAT (allgather, reduce-scatter) and IBing allreduce.

Each program is verified for many p, its peers and message sizes are compared with formulas written
here independently of the program, a fault planted in a copy of its text is caught by the verifier,
and parameters outside its constraints give a clean error.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

import collc
from collc.cli import main
from collc.diagnostics import CollError
from collc.ir import OpKind, Schedule

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PROGRAMS = ("trivance_allreduce", "trivance_bw_allreduce", "pat_allgather", "pat_reduce_scatter", "ibing_allreduce")

# (from rank, to rank) -> number of chunks, for every message of one step
Messages = dict[tuple[int, int], int]


def _load(name: str) -> collc.Algorithm:
    return collc.load(EXAMPLES / f"{name}.coll")


def _schedule(name: str, **params: int) -> Schedule:
    return _load(name).instantiate(**params).schedule


def _phase_steps(schedule: Schedule, phase: str) -> list[Messages]:
    """The messages of every step of one phase, in order, read off the sends."""
    out = []
    for step in schedule.steps:
        if step.phase != phase:
            continue
        sent: Messages = {}
        for op in step.ops:
            if op.kind is OpKind.SEND:
                sent[op.rank, op.peer] = sent.get((op.rank, op.peer), 0) + len(op.chunks)
        out.append(sent)
    return out


def _received(schedule: Schedule) -> dict[tuple[int, int], int]:
    """(step index, rank) -> chunks received, to check that sends and receives agree."""
    got: dict[tuple[int, int], int] = defaultdict(int)
    for step in schedule.steps:
        for op in step.ops:
            if op.kind is OpKind.RECV:
                got[step.index, op.rank] += len(op.chunks)
    return got


def _power_of_three_below(p: int) -> int:
    q = 1
    while 3 * q <= p:
        q *= 3
    return q


def _ceil_log2(p: int) -> int:
    return (p - 1).bit_length()


# --------------------------------------------------------------------------
# Verified for many p
# --------------------------------------------------------------------------

CASES: list[tuple[str, dict[str, int], list[int]]] = [
    ("trivance_allreduce", {}, [*range(1, 41), 81, 243]),
    ("trivance_bw_allreduce", {}, [*range(1, 41), 81]),
    ("pat_allgather", {}, [*range(1, 41), 64, 100]),
    ("pat_allgather", {"agg": 1}, list(range(1, 25))),
    ("pat_allgather", {"agg": 3}, list(range(1, 25))),
    ("pat_reduce_scatter", {}, [*range(1, 41), 64, 100]),
    ("pat_reduce_scatter", {"agg": 1}, list(range(1, 25))),
    ("pat_reduce_scatter", {"agg": 2}, list(range(1, 25))),
    ("ibing_allreduce", {}, list(range(1, 41))),
    ("ibing_allreduce", {"k": 2}, list(range(1, 17))),
]


@pytest.mark.parametrize(("name", "extra", "ranks"), CASES, ids=lambda v: str(v) if isinstance(v, dict) else None)
def test_program_verifies_for_many_p(name: str, extra: dict[str, int], ranks: list[int]) -> None:
    alg = _load(name)
    for p in ranks:
        report = alg.instantiate(p=p, **extra).verify()
        assert report.ok, f"{name} p={p} {extra}: {report.findings[0].message}"


@pytest.mark.slow
@pytest.mark.parametrize("name", PROGRAMS)
def test_program_verifies_up_to_100(name: str) -> None:
    alg = _load(name)
    for p in range(41, 101):
        report = alg.instantiate(p=p).verify()
        assert report.ok, f"{name} p={p}: {report.findings[0].message}"


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_runs_on_the_local_executor(name: str) -> None:
    alg = _load(name)
    for p in (2, 3, 5, 9, 10):
        result = alg.instantiate(p=p).run(7 * p + 3, "int64", "sum", seed=p)
        assert result.wrong == 0, f"{name} p={p}: {result.wrong} wrong"


# --------------------------------------------------------------------------
# Peers and message sizes against formulas written here
# --------------------------------------------------------------------------


@pytest.mark.parametrize("p", [3, 9, 27, 81])
def test_trivance_exchanges_with_rank_plus_and_minus_three_to_the_s(p: int) -> None:
    schedule = _schedule("trivance_allreduce", p=p)
    steps = _phase_steps(schedule, "allreduce")
    assert len(schedule.steps) == len(steps) == round(math.log(p, 3))
    for s, sent in enumerate(steps):
        d = 3**s
        want = {(r, (r + sign * d) % p): 1 for r in range(p) for sign in (1, -1)}
        assert sent == want, f"p={p} step {s}"


@pytest.mark.parametrize("p", [2, 4, 10, 20, 28, 40])
def test_trivance_folds_other_p_onto_a_power_of_three(p: int) -> None:
    q = _power_of_three_below(p)
    schedule = _schedule("trivance_allreduce", p=p)
    (fold,) = _phase_steps(schedule, "fold")
    assert fold == {(r, r % q): 1 for r in range(q, p)}
    (unfold,) = _phase_steps(schedule, "unfold")
    assert unfold == {(r % q, r): 1 for r in range(q, p)}
    steps = _phase_steps(schedule, "allreduce")
    for s, sent in enumerate(steps):
        d = 3**s
        assert sent == {(r, (r + sign * d) % q): 1 for r in range(q) for sign in (1, -1)}
    # one step more than ceil(log3 p), which a power of three would need
    log3 = 0
    while 3**log3 < p:
        log3 += 1
    assert len(schedule.steps) == log3 + 1


@pytest.mark.parametrize("p", [9, 27, 81])
def test_trivance_bw_sends_a_third_less_at_every_farther_step(p: int) -> None:
    schedule = _schedule("trivance_bw_allreduce", p=p)
    levels = round(math.log(p, 3))
    rs = _phase_steps(schedule, "reduce_scatter")
    ag = _phase_steps(schedule, "allgather")
    assert len(rs) == len(ag) == levels
    for s in range(levels):
        d, size = 3**s, p // 3 ** (s + 1)  # distance 3^s, a third of what is still held to each peer
        want = {(r, (r + sign * d) % p): size for r in range(p) for sign in (1, -1)}
        assert rs[s] == want, f"p={p} reduce-scatter step {s}"
        assert ag[levels - 1 - s] == want, f"p={p} allgather step {levels - 1 - s}"
    # each rank sends p - 1 blocks in each half: bandwidth-optimal
    sent_by: dict[int, int] = defaultdict(int)
    for step in rs + ag:
        for (r, _), n in step.items():
            sent_by[r] += n
    assert set(sent_by.values()) == {2 * (p - 1)}


@pytest.mark.parametrize("p", [2, 5, 8, 12, 16, 23])
def test_pat_distances_and_message_sizes(p: int) -> None:
    levels = _ceil_log2(p)

    def moved(d: int) -> int:  # offsets at distance d: the odd multiples of d below p
        return len([t for t in range(d, p, 2 * d)])

    ag = _phase_steps(_schedule("pat_allgather", p=p), "allgather")
    assert len(ag) == levels
    for k, sent in enumerate(ag):
        d = 1 << (levels - 1 - k)  # the farthest peer first
        assert sent == {(r, (r - d) % p): moved(d) for r in range(p)}, f"p={p} allgather step {k}"
    rs = _phase_steps(_schedule("pat_reduce_scatter", p=p), "reduce_scatter")
    assert len(rs) == levels
    for k, sent in enumerate(rs):
        d = 1 << k  # the nearest peer first
        assert sent == {(r, (r + d) % p): moved(d) for r in range(p)}, f"p={p} reduce-scatter step {k}"


@pytest.mark.parametrize("name", ["pat_allgather", "pat_reduce_scatter"])
@pytest.mark.parametrize(("p", "agg"), [(8, 1), (13, 1), (13, 2), (16, 3)])
def test_pat_cap_cuts_steps_into_messages_of_at_most_agg_blocks(name: str, p: int, agg: int) -> None:
    schedule = _schedule(name, p=p, agg=agg)
    levels = _ceil_log2(p)
    per_level = [len(range(1 << j, p, 2 << j)) for j in range(levels)]
    assert len(schedule.steps) == sum(-(-n // agg) for n in per_level)
    total = 0
    for step in schedule.steps:
        sizes = {len(op.chunks) for op in step.ops if op.kind is OpKind.SEND}
        assert max(sizes) <= agg
        total += sum(len(op.chunks) for op in step.ops if op.kind is OpKind.SEND and op.rank == 0)
    assert total == p - 1  # every other block once, whatever the cap


@pytest.mark.parametrize("p", [2, 3, 4, 7, 10, 17])
def test_ibing_uses_both_ring_neighbours_in_p_minus_1_steps(p: int) -> None:
    schedule = _schedule("ibing_allreduce", p=p)
    assert len(schedule.steps) == p - 1
    for name in ("reduce_scatter", "allgather"):
        for sent in _phase_steps(schedule, name):
            if p == 2:  # both directions lead to the same neighbour: the halves swap at once
                assert sent == {(0, 1): 2, (1, 0): 2}
            else:
                assert sent == {(r, (r + sign) % p): 1 for r in range(p) for sign in (1, -1)}
    assert len(_phase_steps(schedule, "reduce_scatter")) == p // 2
    received = _received(schedule)
    assert sum(received.values()) == p * 2 * (p - 1)  # 2(p - 1)/p of the vector per rank


# --------------------------------------------------------------------------
# Planted faults
# --------------------------------------------------------------------------

MUTANTS = [
    # a receive that overwrites instead of adding loses the other side's window
    ("trivance_allreduce", "recv 0 from (rank + d) mod q reduce", "recv 0 from (rank + d) mod q copy", [9]),
    # distances 2^s make the windows overlap: contributions counted twice
    ("trivance_allreduce", "let d = 3 ** s", "let d = 2 ** s", [9, 27]),
    # the extra ranks' data never reaches the power of three
    ("trivance_allreduce", "if rank + j * q < p:\n          recv", "if rank + j * q < p - 1:\n          recv", [5, 13]),
    # block 0 never moves in the reduce-scatter
    ("trivance_bw_allreduce", "mod q, s) == t}", "mod q, s) == t and b != 0}", [3, 9]),
    # the allgather sends the wrong blocks back
    ("trivance_bw_allreduce", "send blocks(up, s, 2) to up", "send blocks(up, s, 1) to up", [9]),
    # one offset too few at distances that do not divide p - d
    ("pat_allgather", "fn count(d) = (p - d + 2 * d - 1) // (2 * d)", "fn count(d) = (p - d) // (2 * d)", [3, 5, 6]),
    ("pat_reduce_scatter", "from (rank - d) mod p reduce", "from (rank - d) mod p copy", [4, 5]),
    ("pat_reduce_scatter", "for k in 0 .. L:", "for k in 0 .. L - 1:", [4, 6]),
    # the even-p broadcast starting from m instead of m + 1
    ("ibing_allreduce", "let late = 1 - p % 2", "let late = 0", [4, 6]),
    # forward chains one rank too long: an overlap with the backward chains
    ("ibing_allreduce", "let fwd = (p - 1) // 2", "let fwd = p // 2", [4, 6]),
]


@pytest.mark.parametrize(("name", "old", "new", "ranks"), MUTANTS)
def test_planted_fault_is_reported(name: str, old: str, new: str, ranks: list[int]) -> None:
    path = EXAMPLES / f"{name}.coll"
    text = path.read_text()
    assert text.count(old) == 1, f"{name}: the text to mutate is not there exactly once"
    alg = collc.parse(text.replace(old, new), f"{name}_mutant.coll")
    for p in ranks:
        report = alg.instantiate(p=p).verify()
        assert not report.ok, f"{name} p={p}: the mutant {new!r} verifies"


# --------------------------------------------------------------------------
# Parameters the programs do not allow
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROGRAMS)
def test_p_below_one_is_a_clean_error(name: str) -> None:
    with pytest.raises(CollError) as err:
        _load(name).instantiate(p=0)
    assert "p" in err.value.message


@pytest.mark.parametrize(("name", "param"), [("pat_allgather", "agg"), ("pat_reduce_scatter", "agg"),
                                              ("ibing_allreduce", "k")])  # fmt: skip
def test_a_cap_below_one_is_a_clean_error(name: str, param: str) -> None:
    with pytest.raises(CollError, match=f"{param}=0 violates the constraint {param} >= 1"):
        _load(name).instantiate(p=4, **{param: 0})


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_cli_rejects_an_unsupported_p_without_a_traceback(name: str) -> None:
    runner = CliRunner()
    for args in (["-p", "0"], ["-p", "4", "--param", "agg=0"] if name.startswith("pat") else ["-p", "200000"]):
        result = runner.invoke(main, ["check", str(EXAMPLES / f"{name}.coll"), *args])
        assert result.exit_code == 2, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "Traceback" not in result.output
        assert "error" in result.output.lower()
