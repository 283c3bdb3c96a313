"""`collc check PLAN.xml`: MSCCL-IR plans of other tools, read and checked (collc/verify/plans.py).

* the plans of tests/data/msccl (ring, tree, double binary tree, all-pairs, hierarchical, halving-doubling,
  pipelined over channels; 8 to 64 GPUs), written by make_plans.py there, are correct, and a mistake planted in
  each is found, of the kind expected;
* every example `collc export` writes is correct when read back (the round trip agrees with the .coll's verdict);
* random mutants of those plans get the same verdict from the checker as from tests/msccl_sim.py, an independent
  simulator of the same runtime semantics (random interleavings, its own vector clocks);
* the command line: the verdict, findings with file:line, exit codes, malformed XML, options that do not apply.
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
import sys
from pathlib import Path

import msccl_sim
import numpy as np
import pytest
from click.testing import CliRunner
from test_export import EXAMPLES, OTHER_EXPORTS, export, random_schedule

from collc.backends import msccl
from collc.backends.msccl_threadblocks import stalled
from collc.cli import main
from collc.diagnostics import CollError
from collc.frontend.msccl_plan import parse_plan, read_plan
from collc.ir import Collective
from collc.verify.plans import check_plan

DATA = Path(__file__).parent / "data" / "msccl"
PLANS = sorted(DATA.glob("*.xml"))


def _make_plans():  # a module loaded from its file
    spec = importlib.util.spec_from_file_location("make_plans", DATA / "make_plans.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_plans"] = module
    spec.loader.exec_module(module)
    return module


def _edit(text: str, pattern: str, old: str, new: str, nth: int = 0) -> str:
    """``text`` with ``old`` replaced by ``new`` in the nth line matching ``pattern``."""
    lines = text.splitlines()
    hits = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    i = hits[nth]
    changed = re.sub(old, new, lines[i], count=1)
    assert changed != lines[i], (pattern, old)
    lines[i] = changed
    return "\n".join(lines) + "\n"


def _swap_steps(text: str, gpu: int, tb: int, a: int) -> str:
    """Steps a and a + 1 of a threadblock exchanged (numbers kept in place)."""
    lines = text.splitlines()
    g = next(i for i, line in enumerate(lines) if f'<gpu id="{gpu}"' in line)
    t = next(i for i in range(g, len(lines)) if f'<tb id="{tb}"' in lines[i])
    i = next(k for k in range(t, len(lines)) if f'<step s="{a}"' in lines[k])
    j = next(k for k in range(i + 1, len(lines)) if f'<step s="{a + 1}"' in lines[k])
    lines[i], lines[j] = (
        lines[j].replace(f's="{a + 1}"', f's="{a}"', 1),
        lines[i].replace(f's="{a}"', f's="{a + 1}"', 1),
    )
    return "\n".join(lines) + "\n"


def test_the_data_files_are_what_make_plans_writes() -> None:
    made = _make_plans()
    assert {p.stem for p in PLANS} == set(made.PLANS)
    for path in PLANS:
        assert path.read_text() == made.PLANS[path.stem](), f"{path.name}: run tests/data/msccl/make_plans.py"


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.stem)
def test_each_plan_is_correct(path: Path) -> None:
    report = check_plan(read_plan(path))
    assert report.ok, [f.message for f in report.findings[:3]]
    assert report.modes  # checked in at least one mode
    msccl_sim.simulate(path.read_text(), seeds=1, max_steps=256)  # the independent simulator agrees


# One planted mistake per plan, and the kind of finding it must give.
MISTAKES = {
    "ring_allreduce_8": (lambda t: _edit(t, 'type="rrs"', 'type="rrs"', 'type="rcs"'), "postcondition"),
    "ring_allreduce_64": (lambda t: _edit(t, 'type="r" ', 'type="r"', 'type="rrc"'), "double-count"),
    "ring_allreduce_16_4ch": (lambda t: _edit(t, '<tb id="1"', 'chan="1"', 'chan="2"'), "structure"),
    "ring_allgather_8": (
        lambda t: _edit(t, r'type="s".*depid="0"', r'depid="0" deps="0"', 'depid="-1" deps="-1"'),
        "race",
    ),
    "ring_reducescatter_12": (lambda t: _edit(t, 'type="s"', r'srcoff="\d+"', 'srcoff="0"', 3), "postcondition"),
    "allpairs_allreduce_8": (
        lambda t: _edit(t, 'type="re"', r'depid="\d+" deps="\d+"', 'depid="-1" deps="-1"'),
        "race",
    ),
    "allpairs_alltoall_8": (lambda t: _edit(t, 'type="r"', r'dstoff="\d+"', 'dstoff="0"'), "postcondition"),
    "hierarchical_allreduce_2x4": (lambda t: _swap_steps(t, 0, 0, 0), "postcondition"),
    "hierarchical_allreduce_4x8": (
        lambda t: _edit(t, 'type="s".*depid="1"', r'depid="1" deps="\d+"', 'depid="-1" deps="-1"'),
        "race",
    ),
    "tree_allreduce_16": (lambda t: _edit(t, 'type="rrc"', 'type="rrc"', 'type="r"'), "postcondition"),
    "double_binary_tree_allreduce_32": (lambda t: _edit(t, 'type="s"', 'cnt="4"', 'cnt="3"'), "unmatched"),
    "halving_doubling_allreduce_64": (lambda t: _edit(t, '<tb id="2"', 'send="(\\d+)"', 'send="63"'), "deadlock"),
}


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.stem)
def test_a_planted_mistake_is_found(path: Path) -> None:
    plant, kind = MISTAKES[path.stem]
    broken = plant(path.read_text())
    report = check_plan(parse_plan(broken, path.name))
    kinds = {f.kind for f in report.findings}
    assert kind in kinds, (kind, [f"{f.kind}: {f.message}" for f in report.findings[:4]])
    with pytest.raises(msccl_sim.XmlError):  # the independent simulator rejects it too
        msccl_sim.simulate(broken, seeds=2, max_steps=256)


ROUND_TRIP = [
    ("ring_allreduce.coll", ("-p", "2")),
    ("ring_allreduce.coll", ("-p", "9")),
    ("swing_bw.coll", ("-p", "6")),
    ("swing_bw.coll", ("-p", "16")),
    *OTHER_EXPORTS,
]

# Sizes at which messages outgrow what a Simple connection buffers (2 chunks), some of which once deadlocked:
# exchanges of long messages both ways (Bruck from 16 ranks, Rabenseifner, the torus programs), and rings whose
# fused sends would fill the buffer (the pipelined ring).
LONG_MESSAGES = [
    ("bruck_allgather.coll", ("-p", "16")),
    ("bruck_allgather.coll", ("-p", "32")),
    ("rabenseifner.coll", ("-p", "16")),
    ("swing_bw.coll", ("-p", "32")),
    ("pipelined_ring_allreduce.coll", ("-p", "8", "--param", "k=4")),
    ("torus/swing_bw_torus.coll", ("--dims", "2x2x2")),
    ("torus/bucket_torus.coll", ("--dims", "4x4")),
    ("hierarchical/hier_allreduce_swing.coll", ("--param", "nodes=4", "--param", "local=4")),
    ("hierarchical/hier_allreduce_ring.coll", ("--param", "nodes=4", "--param", "local=4")),
]


@pytest.mark.parametrize(("program", "args"), ROUND_TRIP, ids=[f"{p}{' '.join(a)}" for p, a in ROUND_TRIP])
def test_exported_examples_are_correct_when_read_back(tmp_path: Path, program: str, args: tuple[str, ...]) -> None:
    """`collc export` writes only verified schedules, and plans that complete with the runtimes' buffering: every
    one checks correct with LL's (8 chunks per connection) and with Simple's (2 chunks)."""
    report = check_plan(parse_plan(export(tmp_path, EXAMPLES / program, *args, "--proto", "LL"), program))
    assert report.ok, [f.message for f in report.findings[:3]]
    assert report.modes == (("out of place",) if report.plan.coll == "alltoall" else ("in place", "out of place"))
    simple = check_plan(parse_plan(export(tmp_path, EXAMPLES / program, *args), program))
    assert simple.ok, [f.message for f in simple.findings[:3]]


@pytest.mark.parametrize(("program", "args"), LONG_MESSAGES, ids=[f"{p}{' '.join(a)}" for p, a in LONG_MESSAGES])
def test_long_messages_do_not_deadlock(tmp_path: Path, program: str, args: tuple[str, ...]) -> None:
    """Messages longer than a connection buffers go to receive-only threadblocks (docs/msccl.md, "Buffering"):
    correct with Simple and with LL, and the independent simulator agrees."""
    for proto in ("LL", "Simple"):
        text = export(tmp_path, EXAMPLES / program, *args, "--proto", proto, "--max-steps", "256")
        report = check_plan(parse_plan(text, program))
        assert report.ok, (proto, [f.message for f in report.findings[:3]])
    msccl_sim.simulate(text, seeds=1, max_steps=256)  # Simple's: the simulator's connections hold two messages


@pytest.mark.parametrize("proto", ["Simple", "LL"])
def test_random_schedules_are_correct_when_read_back(proto: str) -> None:
    """Random correct schedules of every collective (tests/test_export.py), messages of up to a dozen chunks in
    runs of one to three: the exported plan completes with the protocol's buffering, whatever the message sizes
    and their order (receive-only threadblocks, landings in scratch, unfused sends where they are needed)."""
    for seed in range(12):
        for i, collective in enumerate(msccl.COLL_NAMES):
            rng = np.random.default_rng(20_000 + 4 * seed + i)
            schedule = random_schedule(rng, collective, int(rng.integers(2, 11)), int(rng.integers(1, 9)))
            algo = msccl.lower(schedule, proto=proto, limits=msccl.Limits(steps_per_threadblock=256))
            report = check_plan(parse_plan(msccl.to_xml(algo), "random.xml"))
            assert report.ok, (seed, collective, [f.message for f in report.findings[:3]])


def test_sends_that_would_wait_forever_get_receive_only_threadblocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A random reduce-scatter whose transfers all fit Simple's buffer, but where, as first laid out, some sends
    would still wait forever for room (several transfers to one peer in a row): the lowering finds them by running
    the program (`stalled`), receives those peers on receive-only threadblocks, and the second run completes."""
    rng = np.random.default_rng(20_000 + 4 * 131 + 2)
    schedule = random_schedule(rng, Collective.REDUCE_SCATTER, int(rng.integers(2, 11)), int(rng.integers(1, 9)))
    runs: list[set[tuple[int, int]]] = []

    def counted(tbs: list, slots: int) -> set[tuple[int, int]]:
        runs.append(stalled(tbs, slots))
        return runs[-1]

    monkeypatch.setattr(msccl, "stalled", counted)
    algo = msccl.lower(schedule, limits=msccl.Limits(steps_per_threadblock=256))
    assert len(runs) == 2 and runs[0] and not runs[1]
    text = msccl.to_xml(algo)
    report = check_plan(parse_plan(text, "random.xml"))
    assert report.ok, [f.message for f in report.findings[:3]]
    msccl_sim.simulate(text, seeds=2, max_steps=256)


def _mutants(text: str, rng: random.Random, n: int) -> list[str]:
    """Random one-line mutations: a dependency dropped, a reduce made a copy or back, an offset or a count moved,
    two neighbouring steps exchanged."""
    lines = text.splitlines()
    steps = [i for i, line in enumerate(lines) if "<step " in line]
    out = []
    while len(out) < n:
        i = rng.choice(steps)
        line, op = lines[i], rng.randrange(6)
        mut = lines[:]
        if op == 0:
            mut[i] = re.sub(r'depid="\d+" deps="\d+"', 'depid="-1" deps="-1"', line)
        elif op == 1:
            mut[i] = re.sub(r'type="rr(c|cs|s)"', lambda m: 'type="' + {"c": "r", "cs": "rcs", "s": "rcs"}[m[1]] + '"',
                            line)  # fmt: skip
        elif op == 2:
            mut[i] = line.replace('type="r"', 'type="rrc"').replace('type="rcs"', 'type="rrcs"')
        elif op == 3:
            mut[i] = re.sub(r'srcoff="(\d+)"', lambda m: f'srcoff="{int(m[1]) + 1}"', line)
        elif op == 4:
            mut[i] = re.sub(r'cnt="(\d+)"', lambda m: f'cnt="{int(m[1]) + 1}"', line)
        elif i + 1 in steps:
            a, b = re.search(r' s="\d+"', line)[0], re.search(r' s="\d+"', lines[i + 1])[0]
            mut[i], mut[i + 1] = lines[i + 1].replace(b, a, 1), line.replace(a, b, 1)
        if mut != lines:
            out.append("\n".join(mut) + "\n")
    return out


def test_mutants_get_the_independent_simulators_verdict(tmp_path: Path) -> None:
    """Differential: 200 random mutants of bundled and exported plans, the same verdict from both, except where
    only the buffering differs (the simulator counts messages, the checker chunks: it may find a deadlock the
    simulator's looser buffering does not have)."""
    rng = random.Random(7)
    texts = [p.read_text() for p in PLANS[::2]]
    texts += [export(tmp_path, EXAMPLES / "swing_bw.coll", "-p", "8"),
              export(tmp_path, EXAMPLES / "bruck_allgather.coll", "-p", "6"),
              export(tmp_path, EXAMPLES / "hierarchical" / "hier_allreduce_swing.coll", "--param", "nodes=2",
                     "--param", "local=2")]  # fmt: skip
    rejected = 0
    for text in texts:
        for m in _mutants(text, rng, 200 // len(texts)):
            report = check_plan(parse_plan(m, "mutant.xml"))
            try:
                msccl_sim.simulate(m, seeds=2, max_steps=256)
                theirs = True
            except msccl_sim.XmlError:
                theirs = False
            looser = theirs and {f.kind for f in report.findings} == {"deadlock"}  # the simulator buffers messages
            assert report.ok == theirs or looser, m
            rejected += not report.ok
    assert rejected > 100  # most mutations break something


def test_a_deadlock_needs_the_runtimes_buffering() -> None:
    """Two GPUs that each send three chunks before receiving: a deadlock with two messages per connection (the
    runtimes' buffering), none with more."""
    gpus = []
    for g in range(2):
        peer = 1 - g
        steps = [f'<step s="{j}" type="s" srcbuf="i" srcoff="{j}" dstbuf="i" dstoff="{j}" cnt="1" depid="-1" deps="-1" '
                 'hasdep="0"/>' for j in range(3)]  # fmt: skip
        steps += [f'<step s="{3 + j}" type="r" srcbuf="o" srcoff="{3 * peer + j}" dstbuf="o" dstoff="{3 * peer + j}" '
                  'cnt="1" depid="-1" deps="-1" hasdep="0"/>' for j in range(3)]  # fmt: skip
        copy = (f'<step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="{3 * g}" cnt="3" depid="-1" '
                'deps="-1" hasdep="0"/>')  # fmt: skip
        body = f'<tb id="0" send="{peer}" recv="{peer}" chan="0">{"".join(steps)}</tb>'
        body += f'<tb id="1" send="-1" recv="-1" chan="0">{copy}</tb>'
        gpus.append(f'<gpu id="{g}" i_chunks="3" o_chunks="6" s_chunks="0">{body}</gpu>')
    text = ('<algo name="burst" proto="Simple" nchannels="1" nchunksperloop="6" ngpus="2" coll="allgather" '
            f'inplace="0" outofplace="1">{"".join(gpus)}</algo>')  # fmt: skip
    plan = parse_plan(text, "burst.xml")
    assert check_plan(plan, slots=3).ok
    report = check_plan(plan)
    assert [f.kind for f in report.findings][:1] == ["deadlock"], report.findings
    assert "waits forever for room on its connection to gpu" in report.findings[0].message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<algo coll='allreduce'><gpu id='0'>", "not well-formed XML"),
        ("<plan/>", "one <algo> element at its top"),
        ("<algo coll='broadcast' ngpus='1'/>", "coll='broadcast': collc checks allreduce"),
        ("<algo coll='allreduce' ngpus='2'><gpu id='0' i_chunks='1' o_chunks='1'/></algo>", "ngpus=2 but the plan"),
        ("<algo coll='allreduce' ngpus='1'><gpu id='0' i_chunks='1' o_chunks='1'><tb id='0' send='-1' recv='-1'>"
         "<step s='0' type='copy'/></tb></gpu></algo>", "step type 'copy' is not one of"),
        ("<algo coll='allreduce' ngpus='1'><gpu id='0' i_chunks='x' o_chunks='1'/></algo>",
         "i_chunks='x' is not an integer"),
        ("<algo coll='allreduce' ngpus='1'><gpu id='0' i_chunks='1' o_chunks='1'><tb id='0' send='-1' recv='-1'>"
         "<step s='1' type='nop'/></tb></gpu></algo>", "step s=1 is the threadblock's step 0"),
    ],
)  # fmt: skip
def test_malformed_plans_are_clear_errors(text: str, message: str) -> None:
    with pytest.raises(CollError, match=re.escape(message)) as info:
        parse_plan(text, "bad.xml")
    assert str(info.value).startswith("bad.xml:")


def test_command_line(tmp_path: Path) -> None:
    runner = CliRunner()
    good = DATA / "ring_allreduce_8.xml"
    out = runner.invoke(main, ["check", str(good)])
    assert out.exit_code == 0 and ": correct (in place" in out.output, out.output
    broken = tmp_path / "broken.xml"
    broken.write_text(MISTAKES["ring_allreduce_8"][0](good.read_text()))
    out = runner.invoke(main, ["check", str(broken)])
    assert out.exit_code == 1 and "WRONG" in out.output, out.output
    assert re.search(rf"error\[postcondition\] {re.escape(str(broken))}:\d+: gpu \d+'s output o\[\d+\]", out.output)
    out = runner.invoke(main, ["check", str(broken), "--json"])
    data = json.loads(out.output)
    assert out.exit_code == 1 and data["status"] == "wrong" and data["findings"][0]["kind"] == "postcondition"
    bad = tmp_path / "bad.xml"
    bad.write_text("<algo coll='allreduce'>\n<gpu id='0'>\n")
    out = runner.invoke(main, ["check", str(bad)])
    assert out.exit_code == 2 and f"{bad}:3: not well-formed XML" in out.output, out.output
    out = runner.invoke(main, ["check", str(good), "-p", "8"])
    assert out.exit_code == 2 and "a plan is one instance" in out.output, out.output


def test_exporter_and_reader_agree_on_the_format() -> None:
    """Every attribute the exporter writes is read back as written."""
    from collc import load

    algo = msccl.lower(load(EXAMPLES / "swing_bw.coll").instantiate(p=6).schedule)
    plan = parse_plan(msccl.to_xml(algo), "swing.xml")
    assert (plan.ngpus, plan.nchannels, plan.coll) == (algo.ngpus, algo.nchannels, algo.coll)
    for g, pg in zip(algo.gpus, plan.gpus, strict=True):
        assert (g.i_chunks, g.o_chunks, g.s_chunks) == (pg.i_chunks, pg.o_chunks, pg.s_chunks)
        for tb, ptb in zip(g.threadblocks, pg.tbs, strict=True):
            assert [(s.type, s.srcbuf, s.srcoff, s.dstbuf, s.dstoff, s.cnt, s.depid, s.deps) for s in tb.steps] == [
                (s.type, s.srcbuf, s.srcoff, s.dstbuf, s.dstoff, s.cnt, s.depid, s.deps) for s in ptb.steps
            ]
