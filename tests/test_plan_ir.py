"""MSCCL-IR plans as collc schedules (collc/frontend/plan_ir.py), checked by collc's verifier too.

* every plan of tests/data/msccl, and the plans `collc export` writes for examples of every collective (Simple and
  LL), converts in each mode it runs, and collc's verifier finds the schedule correct; an exported plan gives back
  the source program's transfers, with its verdict, in no more steps than the program when laid out earliest;
* the planted mistakes of tests/test_plans.py and random mutants (a dependency dropped, a reduce made a copy or
  back, an offset or a count moved, two steps exchanged) get the plan check's verdict from collc's verifier
  whenever they convert, and only plans the plan check finds wrong are refused;
* what a schedule cannot mean is refused with the construct, GPU, threadblock, step and line;
* `collc check PLAN.xml` prints the second verdict, and the overall one is WRONG when either check says so.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import random
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

from test_cli import EXAMPLES
from test_export import export
from test_plans import DATA, LONG_MESSAGES, MISTAKES, PLANS, ROUND_TRIP, _mutants

from collc import load
from collc.cli import main
from collc.diagnostics import CollError
from collc.frontend.msccl_plan import Plan, parse_plan, read_plan
from collc.frontend.plan_ir import MODES, plan_to_schedule
from collc.ir import Action, Collective, OpKind, Schedule
from collc.verify.check import check
from collc.verify.plans import check_plan

# The steps of the bundled plans as schedules: the shapes of their algorithms (a ring allreduce on p GPUs takes
# 2(p - 1) steps, all-pairs 2, a ring allgather p - 1, a one-shot alltoall 1).
STEPS = {
    "allpairs_allreduce_8": 2,
    "allpairs_alltoall_8": 1,
    "ring_allgather_8": 7,
    "ring_allreduce_8": 14,
    "ring_allreduce_16_4ch": 30,
    "ring_allreduce_64": 126,
    "ring_reducescatter_12": 11,
}


def _modes(plan: Plan) -> list[str]:
    return [m for m, on in zip(MODES, (plan.inplace, plan.outofplace), strict=True) if on]


def _lines(plan: Plan) -> dict[int, set[int]]:
    """gpu -> the lines of its steps."""
    return {g.id: {st.line for tb in g.tbs for st in tb.steps} for g in plan.gpus}


def _assert_converts(plan: Plan, mode: str, earliest: bool = False) -> Schedule:
    schedule = plan_to_schedule(plan, mode, earliest=earliest)
    report = check(schedule)
    assert report.ok, (mode, [f.message for f in report.findings[:3]])
    assert schedule.nranks == plan.ngpus and schedule.source == plan.file
    lines = _lines(plan)
    for _, op in schedule.ops():  # every op points at the plan's step that sends or receives it
        assert op.span.file == plan.file and op.span.line in lines[op.rank], op
    return schedule


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.stem)
def test_bundled_plans_convert_and_are_correct(path: Path) -> None:
    plan = read_plan(path)
    for mode in _modes(plan):
        schedule = _assert_converts(plan, mode)
        assert schedule.collective.value.replace("_", "") == plan.coll
        if path.stem in STEPS:
            assert len(schedule.steps) == STEPS[path.stem]
        assert len(_assert_converts(plan, mode, earliest=True).steps) <= len(schedule.steps)


def _kwargs(args: tuple[str, ...]) -> dict[str, object]:
    """``-p 6 --dims 4x4 --param k=2`` as `instantiate`'s keywords."""
    out: dict[str, object] = {}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag == "-p":
            out["p"] = int(value)
        elif flag == "--dims":
            out["dims"] = tuple(int(d) for d in value.split("x"))
        else:
            name, _, number = value.partition("=")
            out[name] = int(number)
    return out


def _transfers(schedule: Schedule) -> collections.Counter[tuple[int, int, int, str]]:
    """(sender, receiver, chunk, action) of every chunk received, with repeats."""
    out: collections.Counter[tuple[int, int, int, str]] = collections.Counter()
    for _, op in schedule.ops():
        if op.kind is OpKind.RECV:
            action = (op.action or Action.COPY).value
            out.update((op.peer, op.rank, c, action) for c in op.chunks)
    return out


EXPORTED = [
    *ROUND_TRIP,
    *LONG_MESSAGES[:3],
    ("bruck_alltoall.coll", ("-p", "6")),
    ("direct_allgather.coll", ("-p", "5")),
]


@pytest.mark.parametrize(("program", "args"), EXPORTED, ids=[f"{p}{' '.join(a)}" for p, a in EXPORTED])
def test_exported_plans_convert_back_to_their_program(tmp_path: Path, program: str, args: tuple[str, ...]) -> None:
    """`collc export` with Simple and with LL: in each mode the plan converts, correct like the source program, with
    the program's transfers (every chunk sent, received and how), and laid out earliest in no more steps."""
    source = load(EXAMPLES / program).instantiate(**_kwargs(args)).schedule
    assert check(source).ok
    for proto in ("Simple", "LL"):
        text = export(tmp_path, EXAMPLES / program, *args, *(("--proto", "LL") if proto == "LL" else ()))
        plan = parse_plan(text, f"{proto}.xml")
        assert _modes(plan) == (["out of place"] if plan.coll == "alltoall" else list(MODES))
        for mode in _modes(plan):
            schedule = _assert_converts(plan, mode)
            assert (schedule.collective, schedule.nchunks) == (source.collective, source.nchunks)
            assert _transfers(schedule) == _transfers(source), (proto, mode)
            earliest = _assert_converts(plan, mode, earliest=True)
            assert _transfers(earliest) == _transfers(source)
            assert len(earliest.steps) <= min(len(source.steps), len(schedule.steps))


# --------------------------------------------------------------------------
# Mistakes and mutants: the same verdict as the plan check
# --------------------------------------------------------------------------

# What becomes of each planted mistake of tests/test_plans.py: found WRONG by collc's verifier too, or refused
# with the reason.
MISTAKE_OUTCOMES = {
    "ring_allreduce_8": "postcondition",
    "tree_allreduce_16": "postcondition",
    "ring_allreduce_64": "reduces into an older value of gpu 0's chunk 1 than the latest",
    "ring_allreduce_16_4ch": "a second threadblock at gpu 0's end of the connection send gpu 1, channel 2",
    "ring_allgather_8": "(a race)",
    "ring_reducescatter_12": "which holds chunk 2: collc's IR reduces a chunk into the same chunk only",
    "allpairs_allreduce_8": "reads gpu 0's s[1], which nothing wrote",
    "allpairs_alltoall_8": "(a race)",
    "hierarchical_allreduce_2x4": "which holds chunk 6: collc's IR reduces a chunk into the same chunk only",
    "hierarchical_allreduce_4x8": "(a race)",
    "double_binary_tree_allreduce_32": "receives 4 chunk(s), but the matching send",
    "halving_doubling_allreduce_64": "waits forever, even with connections that buffer everything",
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_planted_mistakes_are_wrong_or_refused(name: str) -> None:
    plant, _ = MISTAKES[name]
    plan = parse_plan(plant((DATA / f"{name}.xml").read_text()), f"{name}.xml")
    want = MISTAKE_OUTCOMES[name]
    for mode in _modes(plan):
        try:
            schedule = plan_to_schedule(plan, mode)
        except CollError as err:
            assert want in str(err), str(err)
            assert str(err).startswith(f"{name}.xml:") and err.span is not None and err.span.file == f"{name}.xml"
            continue
        report = check(schedule)
        assert not report.ok and want in {f.code for f in report.findings}, [f.message for f in report.findings]


def test_mutants_get_the_plan_checks_verdict(tmp_path: Path) -> None:
    """Differential: random mutants of bundled and exported plans.  Where a mutant converts, collc's verifier gives
    the plan check's verdict in that mode; a mutant is refused only when the plan check finds it wrong (a race, a
    deadlock, a mismatch, a value the schedule cannot hold)."""
    rng = random.Random(11)
    texts = [p.read_text() for p in PLANS[::2]]
    texts += [export(tmp_path, EXAMPLES / "swing_bw.coll", "-p", "6"),
              export(tmp_path, EXAMPLES / "ring_reduce_scatter.coll", "-p", "4", "--proto", "LL"),
              export(tmp_path, EXAMPLES / "bruck_alltoall.coll", "-p", "4")]  # fmt: skip
    seen: collections.Counter[str] = collections.Counter()
    for text in texts:
        for m in _mutants(text, rng, 150 // len(texts)):
            plan = parse_plan(m, "mutant.xml")
            report = check_plan(plan)
            for mode in report.modes:
                found = [f for f in report.findings if f.mode in ("", mode)]
                try:
                    schedule = plan_to_schedule(plan, mode)
                except CollError:
                    assert found, m  # a plan the plan check finds correct always converts
                    seen["refused"] += 1
                    continue
                ok = check(schedule).ok
                explained = ok and {f.kind for f in found} <= {"deadlock", "structure"}  # buffering, limits
                assert ok == (not found) or explained, (mode, [f.message for f in found[:2]], m)
                seen["converted, correct" if ok else "converted, wrong"] += 1
    assert seen["converted, correct"] > 20 and seen["converted, wrong"] > 20 and seen["refused"] > 60, seen


# --------------------------------------------------------------------------
# Small plans: what converts, what is refused and why
# --------------------------------------------------------------------------

Steps = list[tuple]  # (type, src, dst[, (depid, deps)[, cnt]]), buffers as "i0", "o1", "s0"


def _xml(coll: str, i: int, o: int, gpus: list[list[tuple[int, int, Steps]]], *, s_chunks: int = 0,
         inplace: bool = False) -> tuple[str, dict[tuple[int, int, int], int]]:  # fmt: skip
    """A plan, one element a line, and the line of each step (gpu, threadblock, step); steps that others depend on
    get hasdep=1."""
    deps = {
        (g, st[3][0], st[3][1]) for g, tbs in enumerate(gpus) for *_, steps in tbs for st in steps if st[3:4] and st[3]
    }
    lines = [f'<algo name="small" coll="{coll}" ngpus="{len(gpus)}" nchannels="1" nchunksperloop="{max(i, o)}" '
             f'proto="Simple" inplace="{int(inplace)}" outofplace="{int(not inplace)}">']  # fmt: skip
    where = {}
    for g, tbs in enumerate(gpus):
        lines.append(f'<gpu id="{g}" i_chunks="{i}" o_chunks="{o}" s_chunks="{s_chunks}">')
        for t, (send, recv, steps) in enumerate(tbs):
            lines.append(f'<tb id="{t}" send="{send}" recv="{recv}" chan="0">')
            for k, (kind, src, dst, *more) in enumerate(steps):
                dep = more[0] if more and more[0] else (-1, -1)
                cnt = more[1] if len(more) > 1 else 1
                lines.append(f'<step s="{k}" type="{kind}" srcbuf="{src[0]}" srcoff="{src[1:]}" dstbuf="{dst[0]}" '
                             f'dstoff="{dst[1:]}" cnt="{cnt}" depid="{dep[0]}" deps="{dep[1]}" '
                             f'hasdep="{int((g, t, k) in deps)}"/>')  # fmt: skip
                where[(g, t, k)] = len(lines)
            lines.append("</tb>")
        lines.append("</gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n", where


def _pair(g: int, steps: Steps, *more: tuple[int, int, Steps]) -> list[tuple[int, int, Steps]]:
    """Gpu g of two: a threadblock with the other GPU, then ``more``."""
    return [(1 - g, 1 - g, steps), *more]


def test_a_small_allreduce_converts() -> None:
    text, _ = _xml("allreduce", 1, 1, [_pair(g, [("s", "i0", "i0"), ("rrc", "i0", "o0")]) for g in range(2)])
    schedule = _assert_converts(parse_plan(text, "two.xml"), "out of place")
    assert len(schedule.steps) == 1 and schedule.collective is Collective.ALLREDUCE
    actions = sorted((op.rank, op.kind.value, op.action.value if op.action else "") for op in schedule.steps[0].ops)
    assert actions == [(0, "recv", "reduce"), (0, "send", ""), (1, "recv", "reduce"), (1, "send", "")]


def test_a_relay_through_scratch_converts() -> None:
    """Allgather on three GPUs in a line: gpu 1 keeps gpu 0's chunk in scratch and sends it on to gpu 2, and gpu 2's
    back to gpu 0; the relay is the chunk itself, received and sent."""
    gpus = [
        [(1, 1, [("s", "i0", "i0"), ("r", "o1", "o1"), ("r", "o2", "o2")]), (-1, -1, [("cpy", "i0", "o0")])],
        [(0, 0, [("s", "i0", "i0"), ("r", "s0", "s0"), ("s", "s1", "s1", (1, 1))]),
         (2, 2, [("s", "i0", "i0"), ("r", "s1", "s1"), ("s", "s0", "s0", (0, 1))]),
         (-1, -1, [("cpy", "i0", "o1"), ("cpy", "s0", "o0", (0, 1)), ("cpy", "s1", "o2", (1, 1))])],
        [(1, 1, [("s", "i0", "i0"), ("r", "o1", "o1"), ("r", "o0", "o0")]), (-1, -1, [("cpy", "i0", "o2")])],
    ]  # fmt: skip
    plan = parse_plan(_xml("allgather", 1, 3, gpus, s_chunks=2)[0], "line.xml")
    assert check_plan(plan).ok
    schedule = _assert_converts(plan, "out of place")
    assert len(schedule.steps) == 2
    relayed = [(op.rank, op.peer, list(op.chunks)) for op in schedule.steps[1].ops if op.kind is OpKind.SEND]
    assert sorted(relayed) == [(1, 0, [2]), (1, 2, [0])]


def _refused(text: str, mode: str = "out of place") -> CollError:
    with pytest.raises(CollError) as info:
        plan_to_schedule(parse_plan(text, "small.xml"), mode)
    return info.value


def _ring2(*steps: tuple, extra: Steps | None = None, **options: int) -> tuple[str, dict[tuple[int, int, int], int]]:
    """Two GPUs, each with ``steps`` on its threadblock with the other, and ``extra`` on a second one of gpu 0."""
    gpus = [_pair(g, list(steps)) for g in range(2)]
    if extra:
        gpus[0].append((-1, -1, extra))
    return _xml("allreduce", options.pop("i", 1), options.pop("o", 1), gpus, **options)


ALLREDUCE = (("s", "i0", "i0"), ("rrc", "i0", "o0"))
ALLREDUCE2 = (*ALLREDUCE, ("s", "i1", "i1"), ("rrc", "i1", "o1"))


TANGLED = [[(1, 1, [("rrs", "i0", "i0"), ("s", "i0", "i0")])],
           [(0, 0, [("s", "i0", "i0"), ("r", "o0", "o0"), ("rrc", "o0", "o0")])]]  # fmt: skip
"""Gpu 0 forwards its chunk reduced with gpu 1's, which the schedule keeps as gpu 0's chunk, then sends its chunk as
it was: the second message must come after the first (both go to gpu 1 with chunk 0), the first after the sum."""


@pytest.mark.parametrize(
    ("plan", "step", "message"),
    [
        (_ring2(*ALLREDUCE2, extra=[("cpy", "i0", "o1", (0, 3))], i=2, o=2), (0, 1, 0),
         "copies chunk 0 into gpu 0's o[1], which holds chunk 1: collc's IR moves and reduces a chunk"),
        (_ring2(*ALLREDUCE2, extra=[("re", "i0", "o0", (0, 3))], i=2, o=2), (0, 1, 0),
         "reduces gpu 0's i[0] into gpu 0's o[0] locally: collc's IR reduces only as a chunk is received"),
        (_ring2(*ALLREDUCE, extra=[("cpy", "i0", "o0")]), (0, 0, 1),
         "writes gpu 0's o[0] and gpu 0, threadblock 1, step 0 (cpy, line 8) accesses it, with nothing ordering"),
        (_ring2(("s", "s0", "s0"), ("rrc", "i0", "o0"), s_chunks=1), (0, 0, 0),
         "(s, line 4) reads gpu 0's s[0], which nothing wrote"),
        (_ring2(("s", "o0", "o0"), ("rrc", "i0", "o0")), (0, 0, 0),
         "reads gpu 0's o[0], which nothing wrote yet, where collc's IR holds chunk 0's input"),
        (_ring2(("s", "i0", "i0"), ("r", "s0", "s0"), s_chunks=1), (1, 0, 1),
         "receives chunk 0 into gpu 1's s[0] and nothing uses it"),
        (_ring2(("s", "i0", "i0"), ("rrc", "i0", "i0")), (1, 0, 1),
         "writes gpu 1's input buffer i out of place, where the caller's send buffer is read-only"),
        (_ring2(("s", "i0", "i0"), ("r", "o1", "o1"), i=2, o=2), (1, 0, 1),
         "receives chunk 0 into gpu 1's o[1], which holds chunk 1"),
        (_ring2(("r", "o0", "o0"), ("s", "i0", "i0")), (0, 0, 0),
         "waits forever, even with connections that buffer everything (2 threadblock(s) wait)"),
        (_ring2(("s", "i0", "i0"), ("rrc", "i0", "s0"), extra=[("cpy", "i0", "o0", (0, 1))], s_chunks=1), None,
         "gpu 0's output o[0] ends as {gpu 0 chunk 0} in the plan, but its chunk 0 as {gpu 0 chunk 0, gpu 1 chunk 0}"
         " in the schedule: it keeps an older value of chunk 0 than the one received at line 5"),
        (_xml("allreduce", 1, 1, TANGLED), None, "collc's IR steps cannot order the plan's messages"),
        (_ring2(("s", "i0", "i0"), ("s", "i0", "i0"), ("rrc", "i0", "o0"), ("r", "o0", "o0")), None,
         "collc's IR steps cannot order the plan's messages"),
    ],
)  # fmt: skip
def test_what_no_schedule_means_is_refused(
    plan: tuple[str, dict[tuple[int, int, int], int]], step: tuple[int, int, int] | None, message: str
) -> None:
    text, lines = plan
    err = _refused(text)
    assert message in str(err), str(err)
    assert err.span is not None and err.span.file == "small.xml"
    assert str(err).startswith(f"small.xml:{err.span.line}: ")
    if step is not None:
        assert err.span.line == lines[step], str(err)
    assert not check_plan(parse_plan(text, "small.xml")).ok  # each is wrong, or not one the runtimes run


def test_unordered_writes_of_one_chunk_are_refused() -> None:
    """Gpu 0 reduces gpu 1's chunk into o[0] while relaying gpu 2's through scratch to gpu 1: two writes of its
    chunk 0, in two places, that nothing orders; the schedule, one value per chunk, would order them."""
    gpus = [
        [(-1, 1, [("rrc", "i0", "o0")]), (1, 2, [("rcs", "s0", "s0")])],
        [(0, -1, [("s", "i0", "i0")]), (-1, 0, [("r", "o0", "o0")])],
        [(0, -1, [("s", "i0", "i0")])],
    ]
    text, lines = _xml("allreduce", 1, 1, gpus, s_chunks=1)
    err = _refused(text)
    assert "writes gpu 0's chunk 0, and so does the receive at line" in str(err), str(err)
    assert "collc's IR holds one value per chunk" in str(err) and err.span is not None
    assert err.span.line in (lines[(0, 0, 0)], lines[(0, 1, 0)])


def test_a_contribution_counted_twice_must_reach_an_output() -> None:
    """Gpu 1 reduces gpu 0's sum into a scratch chunk that already holds it (a contribution twice), then receives the
    right sum into its output: the plan check finds the double count; the schedule's outputs would not show it."""
    gpus = [
        [(1, 1, [("s", "i0", "i0"), ("rrcs", "i0", "o0"), ("s", "o0", "o0", (0, 1))])],
        [(0, 0, [("s", "i0", "i0"), ("rrc", "i0", "s0"), ("rrc", "s0", "s0"), ("r", "o0", "o0")])],
    ]
    text, _ = _xml("allreduce", 1, 1, gpus, s_chunks=1)
    assert {f.kind for f in check_plan(parse_plan(text, "small.xml")).findings} == {"double-count"}
    assert "counts a contribution twice in a value no output keeps" in str(_refused(text))


def test_modes_and_layouts_are_checked() -> None:
    text, _ = _ring2(*ALLREDUCE)
    assert "the plan does not say it runs in place" in str(_refused(text, "in place"))
    with pytest.raises(CollError, match="mode 'sideways': a plan runs in place or out of place"):
        plan_to_schedule(parse_plan(text, "small.xml"), "sideways")
    gpus = [_pair(g, list(ALLREDUCE)) for g in range(2)]
    uneven = _xml("allreduce", 1, 1, gpus)[0].replace('<gpu id="1" i_chunks="1" o_chunks="1"',
                                                       '<gpu id="1" i_chunks="2" o_chunks="2"')  # fmt: skip
    assert "gpu 1 has i_chunks=2, o_chunks=2, gpu 0 1 and 1: collc's IR gives every rank" in str(_refused(uneven))
    assert "do not fit a allgather on 2 GPUs" in str(_refused(_xml("allgather", 1, 1, gpus)[0]))
    with_dep = _ring2(*ALLREDUCE2, extra=[("cpy", "i0", "o0", (0, 3))], i=2, o=2)[0]
    assert "which has hasdep=0" in str(_refused(with_dep.replace('hasdep="1"', 'hasdep="0"')))


# --------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------


def _check(*args: str | Path) -> tuple[int, str]:
    out = CliRunner().invoke(main, ["check", *map(str, args)])
    return out.exit_code, out.output


def test_command_line_prints_both_verdicts(tmp_path: Path) -> None:
    good = DATA / "ring_allreduce_8.xml"
    code, output = _check(good)
    assert code == 0 and output.splitlines()[-1] == "  collc's verifier on the plan as a schedule (14 steps): correct"
    code, output = _check(DATA / "ring_allgather_8.xml")
    assert code == 0 and "schedule (7 steps, in place): correct\n" in output and "(7 steps, out of place)" in output
    data = json.loads(_check(good, "--json")[1])
    assert data["ok"] and [(e["mode"], e["status"], e["steps"], e["agrees"]) for e in data["ir"]] == [
        ("in place", "correct", 14, True)
    ]
    broken = tmp_path / "broken.xml"  # found wrong by both
    broken.write_text(MISTAKES["ring_allreduce_8"][0](good.read_text()))
    code, output = _check(broken)
    assert code == 1 and "collc's verifier on the plan as a schedule (14 steps): WRONG (1 finding(s))" in output
    assert re.search(rf"    error\[postcondition\] {re.escape(str(broken))}:\d+: after the last step rank", output)
    racy = tmp_path / "racy.xml"  # refused
    racy.write_text(MISTAKES["ring_allgather_8"][0]((DATA / "ring_allgather_8.xml").read_text()))
    code, output = _check(racy, "--json")
    data = json.loads(output)
    assert code == 1 and [e["status"] for e in data["ir"]] == ["not converted"] * 2
    assert "(a race)" in data["ir"][0]["reason"]
    code, output = _check(racy)
    assert f"  not converted to collc's IR (in place): {racy}:7: gpu 0, threadblock 1, step 0 (s, line 7)" in output


def test_what_a_schedule_does_not_model_is_explained(tmp_path: Path) -> None:
    """A plan that deadlocks with the runtimes' buffering (tests/test_plans.py) has a correct schedule: the
    verdict is WRONG, and the output says why the two differ."""
    gpus = []
    for g in range(2):
        theirs = [f"o{3 * (1 - g) + j}" for j in range(3)]
        steps = [("s", f"i{j}", f"i{j}") for j in range(3)] + [("r", o, o) for o in theirs]
        gpus.append([(1 - g, 1 - g, steps), (-1, -1, [("cpy", "i0", f"o{3 * g}", None, 3)])])
    burst = tmp_path / "burst.xml"
    burst.write_text(_xml("allgather", 3, 6, gpus)[0])
    assert {f.kind for f in check_plan(read_plan(burst)).findings} == {"deadlock"}
    code, output = _check(burst)
    assert code == 1 and "collc's verifier on the plan as a schedule (3 steps): correct" in output
    assert "(the plan check's findings are about the runtimes' limits or their connections' bounded buffering" in output
    data = json.loads(_check(burst, "--json")[1])
    assert not data["ok"] and data["ir"][0]["agrees"] is False and data["ir"][0]["explained"] is True


def test_a_disagreement_is_printed_and_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    """Were collc's verifier to find the schedule of a correct plan wrong, both verdicts are printed, and the
    overall one is WRONG."""
    import collc.cli.plan_check as plan_check

    def last_step_dropped(plan: Plan, mode: str) -> Schedule:
        schedule = plan_to_schedule(plan, mode)
        return dataclasses.replace(schedule, steps=schedule.steps[:-1])

    monkeypatch.setattr(plan_check, "plan_to_schedule", last_step_dropped)
    code, output = _check(DATA / "ring_allreduce_8.xml")
    assert code == 1 and ": correct (in place" in output and "(13 steps): WRONG" in output
    assert (
        "  the two checks disagree: the plan check finds the plan correct, collc's verifier finds its schedule "
        "WRONG; the verdict is WRONG\n"
    ) in output
