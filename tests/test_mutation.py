"""The verifier against the local executor on mutants of the example library (benchmarks/mutation_harness.py,
with the mutation operators in benchmarks/mutants.py).

A deterministic sample of 150 mutants (round-robin over the mutation operators)
must show no false accept, no false reject and no crash; the harness's own
classification is checked with stub verifiers that are wrong on purpose.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from collc import collectives
from collc.elaborate import elaborate
from collc.frontend.program import parse_program
from collc.ir import Action, Collective, OpKind, Schedule
from collc.verify.check import CheckReport, Finding, check

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = 150
SEED = 0


def _load_harness() -> ModuleType:
    # benchmarks/ is no package: put it on the path, as running the script does, so that the harness
    # finds its sibling module `mutants` and the worker processes find both modules by name
    benchmarks = str(ROOT / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    return importlib.import_module("mutation_harness")


mh = _load_harness()


@pytest.fixture(scope="module")
def all_mutants() -> list[Any]:
    """Every mutant (``mutants.Mutant``) of the example library."""
    return list(mh.generate_mutants())


@pytest.fixture(scope="module")
def summary() -> Any:
    """The ``mutation_harness.Summary`` of the CI sample, run once for the module."""
    return mh.harness(limit=SAMPLE, seed=SEED, jobs=2)


def test_the_library_yields_over_a_thousand_distinct_mutants(all_mutants: list[Any]) -> None:
    assert len(all_mutants) >= 1000
    keys = {(m.program, m.file, m.text) for m in all_mutants}
    assert len(keys) == len(all_mutants)
    for m in all_mutants:
        assert m.text != (ROOT / m.file).read_text()
    operators = Counter(m.operator for m in all_mutants)
    for required in (
        "int-literal",
        "copy<->reduce",
        "chunk-drop-send",
        "chunk-drop-recv",
        "chunk-drop-both",
        "chunk-add-send",
        "chunk-add-recv",
        "chunk-add-both",
        "peer-offset",
        "loop-order",
        "swap-stmts",
        "swap-phases",
        "comparison",
        "mod-div",
    ):
        assert operators[required] > 0, required
    assert {m.file for m in all_mutants} >= {"examples/lib/fold.coll", "examples/lib/ring.coll"}
    assert len({m.program for m in all_mutants}) == len(list((ROOT / "examples").glob("*.coll")))


def test_selection_is_deterministic_and_spread_over_operators(all_mutants: list[Any]) -> None:
    a = mh.select(all_mutants, SAMPLE, SEED)
    b = mh.select(all_mutants, SAMPLE, SEED)
    assert [m.key for m in a] == [m.key for m in b]
    assert len({m.key for m in a}) == SAMPLE
    per_op = Counter(m.operator for m in a)
    assert len(per_op) == len({m.operator for m in all_mutants})
    assert max(per_op.values()) - min(per_op.values()) <= 1


def test_sample_has_no_false_accept_or_false_reject(summary: Any) -> None:
    text = mh.report(summary)
    assert summary.counts[mh.FALSE_ACCEPT] == 0, text
    assert summary.counts[mh.FALSE_REJECT] == 0, text
    assert summary.counts[mh.CRASH] == 0, text
    assert summary.counts[mh.TIMEOUT] == 0, text
    assert summary.agree + summary.counts[mh.FALSE_ACCEPT] == summary.compared


def test_sample_exercises_enough_mutants_and_operators(summary: Any) -> None:
    assert summary.mutants == SAMPLE
    assert summary.elaborating >= 110  # mutants that elaborate for some parameters
    assert summary.elaborating - summary.equivalent >= 70  # ... into a schedule unlike the original's
    assert summary.compared >= 700
    assert summary.counts[mh.AGREE_ACCEPT] >= 100
    assert summary.counts[mh.AGREE_REJECT] >= 100
    assert summary.counts[mh.HAZARD] >= 15  # unmatched messages are refused by the executor too (agree-reject)
    assert summary.counts[mh.BAD_INPUT] > 0
    used = [op for op, c in summary.per_operator.items() if c["elaborating"] > 0]
    assert len(used) >= 12, used
    killed_by = [op for op, c in summary.per_operator.items() if c[mh.AGREE_REJECT] > 0]
    assert len(killed_by) >= 8, killed_by


# --- the harness's classification, with stub verifiers that are wrong on purpose


def _schedule(text_edit: tuple[str, str] | None, program: str = "ring_allreduce", p: int = 5) -> Schedule:
    path = ROOT / "examples" / f"{program}.coll"
    text = path.read_text()
    if text_edit is None:
        return elaborate(parse_program(text, str(path)), {"p": p})
    # mutate the included ring library: write nothing, parse the library's text inline instead
    lib = (ROOT / "examples" / "lib" / "ring.coll").read_text()
    old, new = text_edit
    assert old in lib
    inline = text.replace('include "lib/ring.coll"\n', lib.replace(old, new, 1))
    return elaborate(parse_program(inline, str(path)), {"p": p})


def _accept_all(schedule: Schedule) -> CheckReport:
    return dataclasses.replace(check(schedule), ok=True, findings=())


def _reject_with(code: str) -> Callable[[Schedule], CheckReport]:
    def verifier(schedule: Schedule) -> CheckReport:
        report = check(schedule)
        finding = Finding(code, "stub", schedule.span, None, None, None, None, None)
        return dataclasses.replace(report, ok=False, findings=(finding,))

    return verifier


def test_judge_reports_a_false_accept() -> None:
    wrong = _schedule(("from ring_prev(rank) copy", "from ring_prev(rank) reduce"))
    assert mh.judge(wrong, 1).category == mh.AGREE_REJECT
    outcome = mh.judge(wrong, 1, verifier=_accept_all)
    assert outcome.category == mh.FALSE_ACCEPT
    assert outcome.wrong > 0


def test_judge_reports_a_false_reject_and_a_hazard() -> None:
    right = _schedule(None)
    assert mh.judge(right, 1).category == mh.AGREE_ACCEPT
    assert mh.judge(right, 1, verifier=_reject_with("postcondition")).category == mh.FALSE_REJECT
    assert mh.judge(right, 1, verifier=_reject_with("double-count")).category == mh.FALSE_REJECT
    assert mh.judge(right, 1, verifier=_reject_with("unmatched-send")).category == mh.HAZARD


DUPLICATED_EXCHANGE = "    exchange with rank ^ (1 << s): send 0; recv 0 reduce\n"


def _chunks_reduced_twice_from_one_peer(schedule: Schedule) -> list[tuple[int, int, int, int]]:
    """(step, rank, peer, chunk) for every chunk a rank reduces twice from the same peer in one step."""
    out = []
    for st in schedule.steps:
        seen: Counter[tuple[int, int, int]] = Counter()
        for op in st.ops:
            if op.kind is OpKind.RECV and op.action is Action.REDUCE:
                seen.update((op.rank, op.peer, c) for c in op.chunks)
        out += [(st.index, *key) for key, n in sorted(seen.items()) if n > 1]
    return out


def test_a_duplicated_reduce_from_the_same_peer_is_rejected() -> None:
    path = ROOT / "examples" / "recursive_doubling.coll"
    text = path.read_text()
    assert DUPLICATED_EXCHANGE in text
    schedule = elaborate(parse_program(text.replace(DUPLICATED_EXCHANGE, DUPLICATED_EXCHANGE * 2), str(path)), {"p": 2})
    # each rank reduces chunk 0 from its one peer twice in the one step
    assert _chunks_reduced_twice_from_one_peer(schedule) == [(0, 0, 1, 0), (0, 1, 0, 0)]
    assert mh.executor_wrong(schedule, 7, 0)[0] > 0  # every element double-counts the peer's value
    report = check(schedule)
    assert not report.ok and "duplicate-transfer" in {f.code for f in report.findings}


def test_an_unmatched_send_is_refused_by_the_executor_too() -> None:
    # every rank sends one extra chunk nobody receives: the local executor matches sends with receives
    # (`local.check_matching`) and refuses the schedule, as the verifier rejects it
    extra = _schedule(("send block((rank - s) mod p, k)", "send block((rank - s) mod p, k) | {0}"))
    outcome = mh.judge(extra, 3)
    assert outcome.category == mh.AGREE_REJECT and outcome.wrong == -1
    assert "unmatched-send" in outcome.codes


def test_counts_give_every_chunk_several_elements_of_uneven_sizes() -> None:
    for program, p in (("ring_allreduce", 5), ("bruck_allgather", 6), ("pairwise_alltoall", 3)):
        sched = _schedule(None, program, p)
        count = mh.count_for(sched)
        offsets = collectives.element_offsets(sched.collective, sched.nranks, sched.nchunks, count)
        sizes = set(np.diff(offsets).tolist())
        assert min(sizes) >= 3
        if sched.collective is not Collective.ALLTOALL:  # alltoall: one chunk per (src, dst) block here
            assert len(sizes) > 1
