"""The verifier's vectorised path for regular steps (collc.verify.fast) against its exact per-op path.

`check(schedule, fast=False)` runs every step through the exact code;
``fast=True`` applies every regular step with numpy and must give the very same
report (findings, messages, locations, counterexamples, statistics) on every
schedule: the examples, mutants of their programs (benchmarks/mutants.py), and
schedules whose ops are mutated at random in the IR, regular or not.
"""

from __future__ import annotations

import dataclasses
import importlib
import random
import sys
from pathlib import Path

import pytest

from collc.diagnostics import CollError
from collc.elaborate import elaborate, level_splits
from collc.frontend.program import parse_program
from collc.ir import Action, ChunkSet, Op, OpKind, Schedule, Step, make_op
from collc.verify.check import CheckReport, check

ROOT = Path(__file__).resolve().parent.parent
P_VALUES = (2, 3, 4, 5, 6, 8, 12)
IR_MUTANTS_PER_INSTANCE = 6
PROGRAM_MUTANTS = 120


def _examples() -> list[Path]:
    return sorted(p for p in (ROOT / "examples").rglob("*.coll") if p.parent.name != "lib")


def _instances(path: Path) -> list[Schedule]:
    program = parse_program(path.read_text(), str(path))
    names = {p.name for p in program.params}
    out = []
    for p in P_VALUES:
        params: dict[str, int | tuple[int, ...]] = {"p": p}
        if "root" in names:
            params["root"] = p - 1
        if "dims" in names:  # a square torus p x p (p <= 4), or a 2 x p/2 torus and a ring of p
            params = {"dims": (p, p) if p <= 4 else (2, p // 2) if p % 2 == 0 else (p,)}
        for split in level_splits(program, params)[-2:]:  # a total p split over a hierarchy's levels
            try:
                out.append(elaborate(program, split))
            except CollError:
                continue
    return out


def _same(schedule: Schedule, **kw: object) -> CheckReport:
    fast = check(schedule, fast=True, **kw)  # type: ignore[arg-type]
    exact = check(schedule, fast=False, **kw)  # type: ignore[arg-type]
    for field in dataclasses.fields(CheckReport):
        assert getattr(fast, field.name) == getattr(exact, field.name), (schedule.algorithm, field.name)
    return fast


# --------------------------------------------------------------------------
# Random changes to the ops of a schedule
# --------------------------------------------------------------------------


def _with(op: Op, **changes: object) -> Op:
    fields = {"rank": op.rank, "kind": op.kind, "peer": op.peer, "chunks": op.chunks, "action": op.action}
    fields.update(changes)
    return make_op(span=op.span, codec=op.codec, **fields)  # type: ignore[arg-type]


def _partner(ops: list[Op], i: int) -> int | None:
    """The index of the op that matches ``ops[i]`` exactly (same chunks, the other end), if any."""
    op = ops[i]
    other = OpKind.RECV if op.kind is OpKind.SEND else OpKind.SEND
    for j, o in enumerate(ops):
        if o.kind is other and o.rank == op.peer and o.peer == op.rank and o.chunks.bits == op.chunks.bits:
            return j
    return None


def _mutate_step(ops: list[Op], rng: random.Random, p: int, n: int) -> list[Op]:
    i = rng.randrange(len(ops))
    op = ops[i]
    what = rng.choice(
        ["action", "drop", "duplicate", "peer", "chunk", "pair-chunks", "pair-action", "kind", "send-action", "move"]
    )
    chunk = rng.randrange(n + (1 if rng.random() < 0.1 else 0))
    if what == "action":
        ops[i] = _with(op, action=rng.choice([None, Action.COPY, Action.REDUCE]))
    elif what == "drop":
        del ops[i]
    elif what == "duplicate":
        ops.insert(rng.randrange(len(ops) + 1), op)
    elif what == "peer":
        ops[i] = _with(op, peer=rng.randrange(-1, p + 1))
    elif what == "chunk":
        ops[i] = _with(op, chunks=ChunkSet(op.chunks.bits ^ (1 << chunk)))
    elif what in ("pair-chunks", "pair-action"):  # both ends alike: the step stays matched
        j = _partner(ops, i)
        if j is None:
            return ops
        if what == "pair-chunks":
            new = ChunkSet(op.chunks.bits ^ (1 << min(chunk, n - 1))) if rng.random() < 0.5 else ChunkSet(1 << chunk)
            if new.bits:
                ops[i], ops[j] = _with(op, chunks=new), _with(ops[j], chunks=new)
        else:
            k = i if op.kind is OpKind.RECV else j
            flipped = Action.COPY if ops[k].action is Action.REDUCE else Action.REDUCE
            ops[k] = _with(ops[k], action=flipped)
    elif what == "kind":
        ops[i] = _with(op, kind=OpKind.RECV if op.kind is OpKind.SEND else OpKind.SEND)
    elif what == "send-action" and op.kind is OpKind.SEND:
        ops[i] = _with(op, action=Action.COPY)
    elif what == "move":  # the op and its partner to another step
        ops[i] = _with(op, rank=(op.rank + 1) % p) if p > 1 else op
    return ops


def _mutate(schedule: Schedule, rng: random.Random) -> Schedule:
    steps = list(schedule.steps)
    if not steps:
        return schedule
    for _ in range(rng.randint(1, 3)):
        k = rng.randrange(len(steps))
        step = steps[k]
        if not step.ops or step.lanes is not None:
            continue
        ops = _mutate_step(list(step.ops), rng, schedule.nranks, schedule.nchunks)
        steps[k] = Step(step.index, step.phase, tuple(ops), None)
    return dataclasses.replace(schedule, steps=tuple(steps))


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.stem)
def test_examples_and_ir_mutants_give_the_exact_report(path: Path) -> None:
    rng = random.Random(path.stem)
    schedules = _instances(path)
    assert schedules, f"no instance of {path.name} elaborates"
    for schedule in schedules:
        assert _same(schedule).ok
        for _ in range(IR_MUTANTS_PER_INSTANCE):
            _same(_mutate(schedule, rng), max_findings=rng.choice([1, 3, 20]))


def test_mutants_reach_findings_of_every_kind_the_fast_path_refuses() -> None:
    """The IR mutants above are not all harmless: they bring findings of the codes the regular path leaves to
    the exact code, and wrong data flows it applies itself (the traced postcondition and double counts)."""
    rng = random.Random(1)
    codes: set[str] = set()
    for path in _examples()[:8]:
        for schedule in _instances(path)[:4]:
            for _ in range(IR_MUTANTS_PER_INSTANCE):
                codes |= {f.code for f in _same(_mutate(schedule, rng)).findings}
    wanted = {"unmatched-send", "unmatched-recv", "duplicate-transfer", "postcondition", "recv-without-action"}
    assert wanted <= codes, wanted - codes


def _load_mutants() -> list[object]:
    benchmarks = str(ROOT / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    mutants = importlib.import_module("mutants")
    inline = [m for m in mutants.generate_mutants() if m.file == m.program]
    return random.Random(0).sample(inline, min(PROGRAM_MUTANTS, len(inline)))


def test_program_mutants_give_the_exact_report() -> None:
    checked = wrong = 0
    for mutant in _load_mutants():
        path = ROOT / mutant.program  # type: ignore[attr-defined]
        try:
            program = parse_program(mutant.text, str(path))  # type: ignore[attr-defined]
        except CollError:
            continue
        for p in (3, 4, 8):
            try:
                schedule = elaborate(program, {"p": p})
            except CollError:
                continue
            checked += 1
            wrong += not _same(schedule).ok
    assert checked >= 100 and wrong >= 20, (checked, wrong)


@pytest.mark.parametrize("name", ["ring_allreduce", "swing_bw", "ring_allgather"])
def test_the_default_path_on_steps_large_enough_for_numpy(name: str) -> None:
    path = ROOT / "examples" / f"{name}.coll"
    schedule = elaborate(parse_program(path.read_text(), str(path)), {"p": 130})
    assert max(len(st.ops) for st in schedule.steps) >= 256
    rng = random.Random(name)
    for mutant in [schedule] + [_mutate(schedule, rng) for _ in range(4)]:
        default, exact = check(mutant), check(mutant, fast=False)
        assert default == exact
