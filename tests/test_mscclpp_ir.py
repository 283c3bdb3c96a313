"""MSCCL++ execution plans as collc schedules (collc/frontend/mscclpp_ir.py), checked by collc's verifier too.

* every plan of tests/data/mscclpp converts, every op at the line of the plan's op that moves its data, and collc's
  verifier finds the schedule correct, in the steps its algorithm takes;
* the planted mistakes of tests/test_mscclpp_plans.py, random mutants of the bundled plans (an op dropped, two
  swapped, an index moved, a reduction made a copy) and every mutant of small plans get the plan check's verdict
  from collc's verifier whenever they convert, or a verdict of correct where the plan check's only findings are
  what a schedule does not model; plans the plan check finds correct always convert;
* what a schedule cannot mean is refused with the construct, GPU, threadblock, op, line and JSON path;
* `collc check PLAN.json` prints the second verdict (and `--json` its ``ir`` entry); the overall one is WRONG when
  either check says so.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

from test_mscclpp_plans import DATA, MAKE, MISTAKES, PLANS, SMALL, _mutants, _port_allgather

from collc.cli import main
from collc.diagnostics import CollError
from collc.frontend import mscclpp_ir
from collc.frontend.mscclpp_ir import plan_to_schedule
from collc.frontend.mscclpp_plan import MscclppPlan, parse_plan, read_plan
from collc.ir import Collective, OpKind, Schedule
from collc.verify.check import check
from collc.verify.mscclpp_plans import check_plan

# The steps of the bundled plans as schedules: the shapes of their algorithms (a ring allreduce on p GPUs takes
# 2(p - 1) steps, a binary tree of depth d 2d, one-shot all-pairs 1 or 2, the hierarchical allreduce 3, a pipeline
# of 3 iterations 3).
STEPS = {
    "allgather_get_32": 1,
    "allgather_groups_16": 1,
    "allpairs_allreduce_packets_8": 2,
    "allpairs_allreduce_read_8": 2,
    "alltoall_2x8": 1,
    "hierarchical_allreduce_2x8": 3,
    "hierarchical_allreduce_8x8": 3,
    "pipelined_allgather_8": 3,
    "reducescatter_allpairs_8": 1,
    "ring_allreduce_8": 14,
    "ring_allreduce_packets_8": 14,
    "tree_allreduce_16": 8,
}
EXPLAINED = {"structure", "race", "unmatched"}  # what a schedule does not model (collc/cli/plan_check.py)


def _parse(plan: dict, file: str = "plan.json") -> MscclppPlan:
    return parse_plan(json.dumps(plan, indent=1), file)


def _lines(plan: MscclppPlan) -> dict[int, set[int]]:
    """gpu -> the lines of its ops (a pipeline's too)."""
    out: dict[int, set[int]] = {}
    for g in plan.gpus:
        ops = [x for tb in g.tbs for op in tb.ops for x in (op, *(op.pipeline[2] if op.pipeline else ()))]
        out[g.id] = {plan.line(op.path) for op in ops}
    return out


def _assert_converts(plan: MscclppPlan, earliest: bool = False) -> Schedule:
    schedule = plan_to_schedule(plan, earliest=earliest)
    report = check(schedule)
    assert report.ok, [f.message for f in report.findings[:3]]
    assert schedule.nranks == plan.ngpus and schedule.source == plan.file
    lines = _lines(plan)
    for _, op in schedule.ops():  # every op points at the op of the sender (put) or of the receiver (get)
        assert op.span.file == plan.file and op.span.line in lines[op.rank] | lines[op.peer], op
    return schedule


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.stem)
def test_bundled_plans_convert_and_are_correct(path: Path) -> None:
    plan = read_plan(path)
    schedule = _assert_converts(plan)
    assert schedule.collective.value.replace("_", "") == plan.collective
    assert len(schedule.steps) == STEPS[path.stem]
    assert len(_assert_converts(plan, earliest=True).steps) <= len(schedule.steps)


def test_a_ring_is_a_ring() -> None:
    """The ring allreduce: in step s (reduce-scatter) gpu r sends chunk r - s to gpu r + 1, which reduces it; in the
    allgather half it copies."""
    schedule = plan_to_schedule(read_plan(DATA / "ring_allreduce_8.json"))
    for step in schedule.steps:
        sends = sorted((op.rank, op.peer, list(op.chunks)) for op in step.ops if op.kind is OpKind.SEND)
        assert sends == [(r, (r + 1) % 8, [(r - step.index) % 8]) for r in range(8)], (step.index, sends)
        actions = {op.action.value for op in step.ops if op.action is not None}
        assert actions == {"reduce" if step.index < 7 else "copy"}


# --------------------------------------------------------------------------
# Mistakes and mutants: the same verdict as the plan check
# --------------------------------------------------------------------------

# What becomes of each planted mistake of tests/test_mscclpp_plans.py: found WRONG by collc's verifier too (its
# finding), a correct schedule where the plan check finds only what a schedule does not model ("explained"), or
# refused with the reason.
MISTAKE_OUTCOMES = {
    "ring_allreduce_8": "(res) reads gpu 3's s[2] and gpu 2, threadblock 0, op 10 (res) (line 1550) accesses it, "
    "with nothing ordering the two (a race)",
    "ring_allreduce_packets_8": "explained",  # a nop moved: threads of a threadblock
    "allpairs_allreduce_packets_8": "writes gpu 4's i[0] and gpu 4, threadblock 0, op 1 (upkt) (line 2387) accesses "
    "it, with nothing ordering the two (a race)",
    "allpairs_allreduce_read_8": "postcondition",
    "allgather_groups_16": "explained",  # the put of a threadblock group's slice unordered with the signal
    "allgather_get_32": "explained",  # a nop dropped
    "reducescatter_allpairs_8": "writes chunk 2 into gpu 2's s[0] and nothing uses it",
    "alltoall_2x8": "waits forever",
    "hierarchical_allreduce_2x8": "explained",  # no flush
    "hierarchical_allreduce_8x8": "waits forever (120 threadblock(s) wait): the plan deadlocks",
    "tree_allreduce_16": "explained",  # a nop moved
    "pipelined_allgather_8": "explained",
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_planted_mistakes_are_wrong_or_refused(name: str) -> None:
    plant, _ = MISTAKES[name]
    data = json.loads((DATA / f"{name}.json").read_text())
    plant(data)
    plan = _parse(data, f"{name}.json")
    found = {f.kind for f in check_plan(plan).findings}
    want = MISTAKE_OUTCOMES[name]
    try:
        schedule = plan_to_schedule(plan)
    except CollError as err:
        assert want in str(err), str(err)
        assert re.match(rf"{name}\.json:\d+: gpus\[\d+\]\.threadblocks\[\d+\]\.ops\[\d+\]: gpu \d+, thr", str(err))
        assert err.span is not None and str(err).startswith(f"{name}.json:{err.span.line}: ")
        return
    report = check(schedule)
    if want == "explained":
        assert report.ok and found and found <= EXPLAINED, (found, [f.message for f in report.findings[:2]])
    else:
        assert not report.ok and want in {f.code for f in report.findings}, [f.message for f in report.findings]


def _verdicts(text: str, seen: collections.Counter[str]) -> None:
    """The plan check's and collc's verifier's verdicts on a plan: the same where it converts, or explained."""
    try:
        plan = parse_plan(text, "mutant.json")
    except CollError:
        seen["unreadable"] += 1
        return
    report = check_plan(plan)
    found = {f.kind for f in report.findings}
    try:
        schedule = plan_to_schedule(plan)
    except CollError as err:
        assert found, str(err)  # a plan the plan check finds correct always converts
        seen["refused"] += 1
        return
    ok = check(schedule).ok
    assert ok == report.ok or (ok and found <= EXPLAINED), (ok, [f.message for f in report.findings[:2]], text)
    seen["correct" if ok and report.ok else "explained" if ok else "wrong"] += 1


def _random_mutants(plan: dict, rng: random.Random, n: int) -> list[str]:
    """An op dropped, two neighbours swapped, an operand's index moved by one, or a reduction made a copy of its
    first source into its first destination."""
    places = [(g, t) for g, gpu in enumerate(plan["gpus"]) for t, tb in enumerate(gpu["threadblocks"]) if tb["ops"]]
    out: list[str] = []
    while len(out) < n:
        g, t = rng.choice(places)
        m = json.loads(json.dumps(plan))
        ops = m["gpus"][g]["threadblocks"][t]["ops"]
        k, how = rng.randrange(len(ops)), rng.choice(("drop", "swap", "index", "copy"))
        if how == "drop":
            del ops[k]
        elif how == "swap" and k + 1 < len(ops):
            ops[k], ops[k + 1] = ops[k + 1], ops[k]
        elif how == "index" and (keys := [key for key in ("src_buff", "dst_buff") if ops[k].get(key)]):
            operand = rng.choice(ops[k][rng.choice(keys)])
            operand["index"] = max(0, operand["index"] + rng.choice((-1, 1)))
        elif how == "copy" and ops[k]["name"] in mscclpp_ir.REDUCES:
            ops[k] = {"name": "copy", "src_buff": ops[k]["src_buff"][:1], "dst_buff": ops[k]["dst_buff"][:1]}
        else:
            continue
        out.append(json.dumps(m, indent=1))
    return out


def test_random_mutants_of_the_bundled_plans_get_the_plan_checks_verdict() -> None:
    rng = random.Random(5)
    seen: collections.Counter[str] = collections.Counter()
    for path in PLANS:
        if "8x8" in path.stem:
            continue  # its mutants take the longest; the 2x8 plan has the same ops
        for text in _random_mutants(json.loads(path.read_text()), rng, 8):
            _verdicts(text, seen)
    assert seen["correct"] > 10 and seen["explained"] > 15 and seen["wrong"] > 2 and seen["refused"] > 20, seen


def test_every_mutant_of_small_plans_gets_the_plan_checks_verdict() -> None:
    """The small plans of tests/test_mscclpp_plans.py (checked there against a search of every interleaving) and
    small ones of the other kinds (port channels, threadblock groups, pipelines), each op dropped, each two
    neighbours swapped, each first destination index moved."""
    plans = [make() for make, _ in SMALL.values()]
    plans += [MAKE.hierarchical_allreduce(2, 2), MAKE.alltoall_two_nodes(2, 2), MAKE.allgather_groups(3)]
    plans += [MAKE.pipelined_allgather(2), json.dumps(_port_allgather([{"buffer_id": 0, "index": 0, "size": 1}]))]
    seen: collections.Counter[str] = collections.Counter()
    for text in plans:
        plan = json.loads(text)
        _verdicts(text, seen)
        for m in _mutants(plan):
            _verdicts(json.dumps(m, indent=1), seen)
    assert seen["correct"] > 100 and seen["explained"] > 100 and seen["wrong"] > 15 and seen["refused"] > 100, seen


# --------------------------------------------------------------------------
# Small plans: what converts, what is refused and why
# --------------------------------------------------------------------------


def _two(coll: str = "allreduce", i: int = 1, o: int = 1, s: int = 1, inplace: bool = False) -> tuple:
    """Two GPUs and a memory channel pair between them."""
    prog = MAKE.Prog("small", coll, 2, i, o, s, inplace=inplace)
    return prog, *prog.pair("memory", 0, 1)


def _exchange(then: Callable[[object, int, object], None] | None = None) -> str:
    """Out-of-place allreduce of one chunk on two GPUs: each puts its input into the other's scratch and signals,
    waits, and reduces its input with what came (``then`` instead of the reduction)."""
    prog, a, b = _two()
    for r, ch in ((0, a), (1, b)):
        prog.put(0, [(ch, ("i", 0, 1), ("s", 0, 1))])
        prog.nop(r, 0)
        prog.sync("signal", 0, [ch])
        prog.sync("wait", 0, [ch])
        prog.nop(r, 0)
        if then is None:
            prog.reduce(r, 0, "re", [("i", 0, 1), ("s", 0, 1)], ("o", 0, 1))
        else:
            then(prog, r, ch)
    return prog.json()


def test_a_small_allreduce_converts() -> None:
    plan = parse_plan(_exchange(), "two.json")
    assert check_plan(plan).ok
    schedule = _assert_converts(plan)
    assert len(schedule.steps) == 1 and schedule.collective is Collective.ALLREDUCE
    ops = sorted(
        (op.rank, op.kind.value, op.action.value if op.action else "", op.span.line) for _, op in schedule.ops()
    )
    put = [plan.line(f"gpus[{g}].threadblocks[0].ops[0]") for g in (0, 1)]
    assert ops == [(0, "recv", "reduce", put[1]), (0, "send", "", put[0]), (1, "recv", "reduce", put[0]),
                   (1, "send", "", put[1])]  # fmt: skip


def test_a_relay_through_scratch_converts() -> None:
    """Allgather on three GPUs in a line: gpu 1 keeps the ends' chunks in scratch and puts each on to the other end;
    the relay is the chunk itself, received and sent."""
    prog = MAKE.Prog("line", "allgather", 3, 1, 3, 2, inplace=False)
    a, b = prog.pair("memory", 0, 1)
    d, c = prog.pair("memory", 2, 1)
    for r, ch, slot in ((0, a, 0), (2, d, 1)):
        prog.copy(r, 0, ("i", 0, 1), ("o", r, 1))
        prog.put(0, [(ch, ("i", 0, 1), ("s", slot, 1))])
        prog.nop(r, 0)
        prog.sync("signal", 0, [ch])
        prog.sync("wait", 0, [ch])
        prog.nop(r, 0)
    prog.copy(1, 0, ("i", 0, 1), ("o", 1, 1))
    prog.sync("wait", 0, [b, c])
    prog.nop(1, 0)
    prog.copy(1, 0, ("s", 0, 1), ("o", 0, 1))
    prog.copy(1, 0, ("s", 1, 1), ("o", 2, 1))
    for ch, far in ((b, ("s", 1, 1)), (c, ("s", 0, 1))):
        prog.put(0, [(ch, ("i", 0, 1), ("o", 1, 1))])
        prog.put(0, [(ch, far, ("o", 2 - ch.dst, 1))])
    prog.nop(1, 0)
    prog.sync("signal", 0, [b, c])
    plan = parse_plan(prog.json(), "line.json")
    assert check_plan(plan).ok
    schedule = _assert_converts(plan)
    assert len(schedule.steps) == 2
    relayed = [(op.rank, op.peer, list(op.chunks)) for op in schedule.steps[1].ops if op.kind is OpKind.SEND]
    assert sorted(relayed) == [(1, 0, [1]), (1, 0, [2]), (1, 2, [0]), (1, 2, [1])]


def _edit(text: str, change: Callable[[dict], object]) -> str:
    plan = json.loads(text)
    change(plan)
    return json.dumps(plan, indent=1)


def _op(plan: dict, g: int, k: int, t: int = 0) -> dict:
    return plan["gpus"][g]["threadblocks"][t]["ops"][k]


def _tangled() -> str:
    """Gpu 1 puts its input into gpu 0's scratch; gpu 0 reduces it into its output, then puts the sum and its input
    as it was into gpu 1's output: the second message must come after the first (both move chunk 0 from gpu 0 to
    gpu 1), the first after the sum, the second no later than the sum (it reads gpu 0's chunk as it was)."""
    prog, a, b = _two()
    prog.put(0, [(b, ("i", 0, 1), ("s", 0, 1))])
    prog.nop(1, 0)
    prog.sync("signal", 0, [b])
    prog.sync("wait", 0, [b])
    prog.sync("wait", 0, [a])
    prog.nop(0, 0)
    prog.reduce(0, 0, "re", [("i", 0, 1), ("s", 0, 1)], ("o", 0, 1))
    prog.nop(0, 0)
    prog.put(0, [(a, ("o", 0, 1), ("o", 0, 1))])
    prog.put(0, [(a, ("i", 0, 1), ("o", 0, 1))])
    prog.nop(0, 0)
    prog.sync("signal", 0, [a])
    return prog.json()


def _race() -> str:
    """Gpu 1 reduces what gpu 0 puts into its scratch without waiting for it."""
    text = _exchange()
    return _edit(text, lambda p: p["gpus"][1]["threadblocks"][0]["ops"].__delitem__(3))


def _twice_plan() -> str:
    """Gpu 1 reduces gpu 0's sum into its own (a contribution twice) in scratch, then gets the right sum into its
    output from gpu 0: the plan check finds the double count; the schedule's outputs would not show it."""
    prog, a, b = _two(s=2)

    def sync(r: int, ch: object, *names: str) -> None:
        for name in names:
            if name == "nop":
                prog.nop(r, 0)
            else:
                prog.sync(name, 0, [ch])

    prog.put(0, [(a, ("i", 0, 1), ("s", 0, 1))])
    sync(0, a, "nop", "signal", "wait", "nop")
    prog.reduce(0, 0, "re", [("i", 0, 1), ("s", 0, 1)], ("o", 0, 1))
    prog.nop(0, 0)
    prog.put(0, [(a, ("o", 0, 1), ("s", 1, 1))])
    sync(0, a, "nop", "signal", "wait", "wait", "nop")
    prog.put(0, [(a, ("o", 0, 1), ("o", 0, 1))])
    sync(0, a, "nop", "signal")
    prog.put(0, [(b, ("i", 0, 1), ("s", 0, 1))])
    sync(1, b, "nop", "signal", "wait", "nop")
    prog.reduce(1, 0, "re", [("i", 0, 1), ("s", 0, 1)], ("o", 0, 1))
    sync(1, b, "nop", "signal", "wait", "nop")
    prog.reduce(1, 0, "re", [("o", 0, 1), ("s", 1, 1)], ("s", 0, 1))
    sync(1, b, "nop", "signal", "wait", "nop")
    return prog.json()


def _uneven(p: dict) -> None:
    p["gpus"][1]["input_chunks"] = p["gpus"][1]["output_chunks"] = 2


REFUSED = [
    ("race", _race(), (1, 4), "(re) reads gpu 1's s[0] and gpu 0, threadblock 0, op 0 (put) (line 17) accesses it, "
     "with nothing ordering the two (a race): collc's IR would put them in steps one after the other"),
    ("two held", _exchange(lambda prog, r, ch: (prog.copy(r, 0, ("i", 0, 1), ("o", 0, 1)),
                                                prog.reduce(r, 0, "re", [("i", 0, 1), ("o", 0, 1)], ("o", 0, 1)))),
     (1, 6), "reduces gpu 1's i[0] and gpu 1's o[0] locally: collc's IR reduces only received chunks"),
    ("reduced twice", _exchange(lambda prog, r, ch: prog.reduce(r, 0, "re", [("i", 0, 1), ("s", 0, 1), ("s", 0, 1)],
                                                         ("o", 0, 1))),
     (1, 5), "reduces gpu 1's s[0] twice: collc's IR reduces each received chunk once"),
    ("other chunk", _exchange(lambda prog, r, ch: prog.copy(r, 0, ("s", 0, 1), ("o", 0, 1))).replace(
        '"input_chunks": 1, "output_chunks": 1', '"input_chunks": 2, "output_chunks": 2').replace(
        '"dst_buff": [{"type": "o", "index": 0', '"dst_buff": [{"type": "o", "index": 1'),
     (1, 5), "copies chunk 0 into gpu 1's o[1], which holds chunk 1: collc's IR moves and reduces a chunk into the "
     "same chunk only"),
    ("nothing", _exchange().replace('"src_buff": [{"type": "i", "index": 0, "size": 1}], "dst_buff": [{"buffer_id"',
                                    '"src_buff": [{"type": "s", "index": 0, "size": 1}], "dst_buff": [{"buffer_id"'),
     (0, 0), "(put) reads gpu 0's s[0], which nothing wrote"),
    ("unused", _exchange(lambda prog, r, ch: prog.copy(r, 0, ("i", 0, 1), ("o", 0, 1))), (0, 0),
     "(put) writes chunk 0 into gpu 1's s[0] and nothing uses it: collc's IR puts every received chunk in its place"),
    ("read-only", _exchange(lambda prog, r, ch: prog.reduce(r, 0, "re", [("i", 0, 1), ("s", 0, 1)], ("i", 0, 1))),
     (1, 5), "writes gpu 1's i[0] out of place, where the caller's input is read-only"),
    ("deadlock", _edit(_exchange(), lambda p: p["gpus"][0]["threadblocks"][0]["ops"].__delitem__(2)), (1, 3),
     "(wait) waits forever (1 threadblock(s) wait): the plan deadlocks"),
    ("tangle", _tangled(), (0, 4), "collc's IR steps cannot order the plan's messages: the message of gpu 0, "
     "threadblock 0, op 4 (put) (line 15) must come in a later step than the message of gpu 1, threadblock 0, op 0 "
     "(put) (line 25) (it sends gpu 0's chunk 0 as the other wrote it)"),
    ("executor", _edit(_exchange(), lambda p: _op(p, 0, 5)["src_buff"].append({"type": "s", "index": 0, "size": 2})),
     (0, 5), "re with operands of different sizes: the executor takes src_buff[0]'s (1): collc's IR would mean what"),
    ("beyond", _edit(_exchange(), lambda p: _op(p, 1, 5)["dst_buff"][0].update(index=1)), (1, 5),
     "gpu 1's o chunks 1..1 are beyond the 1 it has"),
    ("uneven", _edit(_exchange(), _uneven), None, "gpu 1 has input_chunks=2, output_chunks=2, gpu 0 1 and 1: "
     "collc's IR gives every rank the same chunks"),
    ("alltoall in place", MAKE.alltoall_two_nodes(1, 2).replace('"inplace": false', '"inplace": true'), None,
     "an alltoall in place"),
    ("counted twice", _twice_plan(), (1, 10), "(re) counts a contribution twice in a value no output keeps: collc's "
     "verifier counts contributions at the outputs"),
    ("barrier", _edit(_exchange(), lambda p: _op(p, 0, 1).update(name="barrier", barrier_id=0, num_threadblocks=2)),
     None, "gpu 0: barrier 0 is called by threadblocks [0] with num_threadblocks [2]"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "op", "message"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_what_no_schedule_means_is_refused(text: str, op: tuple[int, int] | None, message: str) -> None:
    plan = parse_plan(text, "small.json")
    with pytest.raises(CollError) as info:
        plan_to_schedule(plan)
    err = str(info.value)
    assert message in err, err
    span = info.value.span
    assert span is not None and span.file == "small.json" and err.startswith(f"small.json:{span.line}: ")
    if op is not None:
        path = f"gpus[{op[0]}].threadblocks[0].ops[{op[1]}]"
        assert span.line == plan.line(path) and err.startswith(f"small.json:{span.line}: {path}: "), err
        assert f"gpu {op[0]}, threadblock 0, op {op[1]} (" in err
    assert not check_plan(plan).ok  # each is wrong, or not what the executor runs


def test_arguments_and_unreadable_plans() -> None:
    plan = parse_plan(_exchange(), "two.json")
    with pytest.raises(CollError, match="iterations=0: a pipeline runs at least once"):
        plan_to_schedule(plan, iterations=0)
    pipelined = parse_plan(MAKE.pipelined_allgather(2), "pipe.json")
    assert [len(plan_to_schedule(pipelined, iterations=n).steps) for n in (1, 2, 3)] == [1, 2, 3]
    assert check(plan_to_schedule(pipelined, iterations=2)).ok


# --------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------


def _cli(*args: str | Path) -> tuple[int, str]:
    out = CliRunner().invoke(main, ["check", *map(str, args)])
    return out.exit_code, out.output


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_command_line_prints_both_verdicts(tmp_path: Path) -> None:
    good = DATA / "ring_allreduce_8.json"
    code, output = _cli(good)
    assert code == 0 and output.splitlines()[-1] == "  collc's verifier on the plan as a schedule (14 steps): correct"
    data = json.loads(_cli(good, "--json")[1])
    assert data["ok"] and [(e["mode"], e["status"], e["steps"], e["agrees"]) for e in data["ir"]] == [
        ("in place", "correct", 14, True)
    ]
    wrong = json.loads((DATA / "allpairs_allreduce_read_8.json").read_text())
    MISTAKES["allpairs_allreduce_read_8"][0](wrong)
    broken = _write(tmp_path, "broken.json", json.dumps(wrong, indent=1))  # found wrong by both
    code, output = _cli(broken)
    assert code == 1 and ": WRONG (6 finding(s), in place)" in output
    assert "  collc's verifier on the plan as a schedule (2 steps): WRONG (1 finding(s))" in output
    assert re.search(rf"    error\[postcondition\] {re.escape(str(broken))}:\d+: after the last step rank 0", output)
    racy = json.loads((DATA / "ring_allreduce_8.json").read_text())
    MISTAKES["ring_allreduce_8"][0](racy)
    racy_file = _write(tmp_path, "racy.json", json.dumps(racy, indent=1))  # refused
    code, output = _cli(racy_file)
    refused = f"  not converted to collc's IR: {racy_file}:2315: gpus[3].threadblocks[0].ops[14]: gpu 3, threadblock"
    assert code == 1 and f"{refused} 0, op 14 (res) reads gpu 3's s[2]" in output
    data = json.loads(_cli(racy_file, "--json")[1])
    assert not data["ok"] and data["ir"][0]["status"] == "not converted" and "(a race)" in data["ir"][0]["reason"]
    code, output = _cli(_write(tmp_path, "bad.json", '{"name": "x",\n "gpus": [}\n'), "--json")
    assert code == 2 and json.loads(output)["status"] == "error" and "ir" not in json.loads(output)


def test_what_a_schedule_does_not_model_is_explained(tmp_path: Path) -> None:
    """A port put that nothing flushes may still read its source when the kernel ends (tests/test_mscclpp_plans.py):
    the schedule is correct, the verdict WRONG, and the output says why the two differ."""
    noflush = _write(tmp_path, "noflush.json", json.dumps(_port_allgather(None), indent=1))
    code, output = _cli(noflush)
    assert code == 1 and "collc's verifier on the plan as a schedule (1 steps): correct" in output
    assert (
        "  (the plan check's findings are about the threads of a threadblock between nops, port transfers until a "
        "signal or flush, relaxed signals and packets, the end of each GPU's kernel, signal counts or the executor's "
        "limits, which a schedule does not model; the verdict is WRONG)\n"
    ) in output
    data = json.loads(_cli(noflush, "--json")[1])
    assert not data["ok"] and data["ir"][0]["agrees"] is False and data["ir"][0]["explained"] is True


def test_a_disagreement_is_printed_and_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    """Were collc's verifier to find the schedule of a correct plan wrong, both verdicts are printed, and the overall
    one is WRONG."""

    def last_step_dropped(plan: MscclppPlan) -> Schedule:
        schedule = plan_to_schedule(plan)
        return dataclasses.replace(schedule, steps=schedule.steps[:-1])

    monkeypatch.setattr(mscclpp_ir, "plan_to_schedule", last_step_dropped)
    code, output = _cli(DATA / "ring_allreduce_8.json")
    assert code == 1 and ": correct (in place" in output and "(13 steps): WRONG" in output
    assert (
        "  the two checks disagree: the plan check finds the plan correct, collc's verifier finds its schedule "
        "WRONG; the verdict is WRONG\n"
    ) in output
    data = json.loads(_cli(DATA / "ring_allreduce_8.json", "--json")[1])
    assert not data["ok"] and data["status"] == "wrong" and data["findings"] == []
    assert data["ir"][0]["agrees"] is False and data["ir"][0]["explained"] is False
