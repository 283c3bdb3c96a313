"""`collc viz --node` (ranks grouped by node, arrows coloured by level) and `collc viz --timeline`.

The references are computed here by hand: the placement of rank r (block: node r // G, cyclic:
node r % N), the level of a message (same node or not), and the times of a ring allreduce on a
link per pair of ranks, where every step costs the overhead, one chunk's transfer and one hop's
latency and nothing overlaps."""

from __future__ import annotations

import functools
import math
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import collc
from collc import viz
from collc.cli import EXIT_INPUT, EXIT_OK
from collc.hierarchy import Hierarchical, parse_node
from collc.ir import OpKind, Schedule
from collc.simulate import NetworkModel, simulate
from collc.topologies import parse_topology

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import EXAMPLES, cli

ROOT = Path(__file__).resolve().parent.parent
RING, SWING = str(EXAMPLES / "ring_allreduce.coll"), str(EXAMPLES / "swing_bw.coll")
PIPELINED = str(ROOT / "benchmarks" / "data" / "pipelined_ring_allreduce.coll")  # a step per sub-chunk
LANES = str(EXAMPLES / "pipelined_ring_allreduce.coll")  # the ring's steps, a lane per sub-chunk


@functools.cache
def schedule(file: str, p: int, **params: int) -> Schedule:
    return collc.load(file).instantiate(p=p, **params).schedule


def node_of(rank: int, nodes: int, per_node: int, placement: str) -> int:
    return rank // per_node if placement == "block" else rank % nodes


def hand_members(nodes: int, per_node: int, placement: str) -> list[list[int]]:
    if placement == "block":
        return [list(range(k * per_node, (k + 1) * per_node)) for k in range(nodes)]
    return [list(range(k, nodes * per_node, nodes)) for k in range(nodes)]


def viz_cli(*args: str) -> tuple[int, str]:
    out = cli("viz", *args)
    return out.code, out.text


def arrow_colours(path: Path, prefix: str = "send") -> dict[int, Counter[str]]:
    """Per step, the stroke (arrows) or fill (bars) colours of the drawn groups ``PREFIX-STEP-N``."""
    text = path.read_text()
    out: dict[int, Counter[str]] = {}
    attr = "stroke" if prefix == "send" else "fill"
    for step, colour in re.findall(rf'<g id="{prefix}-(\d+)-\d+">\s*<path[^>]*?style="[^"]*?{attr}: (#[0-9a-f]{{6}})',
                                   text):  # fmt: skip
        out.setdefault(int(step), Counter())[colour] += 1
    return out


# --------------------------------------------------------------------------
# Ranks grouped by node
# --------------------------------------------------------------------------


@pytest.mark.parametrize(("nodes", "per_node"), [(4, 4), (2, 8), (8, 2)])
@pytest.mark.parametrize("placement", ["block", "cyclic"])
def test_nodes_hold_the_ranks_of_the_placement(nodes: int, per_node: int, placement: str) -> None:
    h = Hierarchical(parse_topology(f"full:{nodes}"), parse_node(f"nvlink:{per_node}"), placement)
    members = hand_members(nodes, per_node, placement)
    assert viz.node_members(h) == members
    # on the circle, clockwise from the top: node 0's ranks by local index, then node 1's, ...
    pos = viz.node_positions(h)
    assert np.allclose(np.hypot(pos[:, 0], pos[:, 1]), 1.0)
    clockwise = (math.pi / 2 - np.arctan2(pos[:, 1], pos[:, 0])) % (2 * math.pi)
    assert np.argsort(clockwise).tolist() == [r for node in members for r in node]
    # neighbours on a node are one place apart, nodes 1 + NODE_GAP places
    place = 2 * math.pi / (nodes * (per_node + viz.NODE_GAP))
    order = np.sort(clockwise)
    gaps = np.diff(np.append(order, order[0] + 2 * math.pi))
    expected = [(1 + viz.NODE_GAP if (i + 1) % per_node == 0 else 1) * place for i in range(nodes * per_node)]
    assert np.allclose(gaps, expected)


@pytest.mark.parametrize("placement", ["block", "cyclic"])
def test_svg_has_a_box_per_node_and_arrows_coloured_by_level(tmp_path: Path, placement: str) -> None:
    nodes, per_node = 4, 4
    out = tmp_path / "swing.svg"
    code, text = viz_cli(SWING, "-p", "16", "--node", f"nvlink:{per_node}", "--placement", placement, "--no-merge",
                         "-o", str(out))  # fmt: skip
    assert code == EXIT_OK, text
    sched = schedule(SWING, 16)
    svg = out.read_text()
    boxes = Counter(int(k) for k in re.findall(r'<g id="node-(\d+)"', svg))
    assert sorted(boxes) == list(range(nodes))  # one box per node in every panel
    assert set(boxes.values()) == {len(sched.steps)}
    intra, inter = viz.LEVEL_COLORS["intra"], viz.LEVEL_COLORS["inter"]
    drawn = arrow_colours(out)
    assert sorted(drawn) == [st.index for st in sched.steps]
    for st in sched.steps:
        sends = [op for op in st.ops if op.kind is OpKind.SEND]
        across = sum(node_of(op.rank, nodes, per_node, placement) != node_of(op.peer, nodes, per_node, placement)
                     for op in sends)  # fmt: skip
        assert drawn[st.index] == Counter({intra: len(sends) - across, inter: across}) - Counter()
    # block placement keeps Swing's first step (distance 1) inside the nodes, cyclic sends it all across
    first = drawn[sched.steps[0].index]
    assert (first[intra], first[inter]) == ((16, 0) if placement == "block" else (0, 16))


def test_step_colouring_and_chunk_flow_on_nodes(tmp_path: Path) -> None:
    out = tmp_path / "ring.svg"
    code, text = viz_cli(RING, "-p", "8", "--node", "pcie:4", "--color", "step", "-o", str(out))
    assert code == EXIT_OK, text
    colours = arrow_colours(out)
    assert viz.LEVEL_COLORS["inter"] not in {c for cs in colours.values() for c in cs}
    out = tmp_path / "chunk.svg"
    code, text = viz_cli(RING, "-p", "8", "--node", "pcie:4", "--chunk", "0", "-o", str(out))
    assert code == EXIT_OK, text
    assert sorted({int(k) for k in re.findall(r'<g id="node-(\d+)"', out.read_text())}) == [0, 1]


def test_without_nodes_the_picture_has_no_boxes(tmp_path: Path) -> None:
    out = tmp_path / "ring.svg"
    code, text = viz_cli(RING, "-p", "8", "-o", str(out))
    assert code == EXIT_OK, text
    assert "node-" not in out.read_text()


# --------------------------------------------------------------------------
# The timeline
# --------------------------------------------------------------------------


def test_timeline_bars_are_the_hand_computed_times_of_a_ring(tmp_path: Path) -> None:
    """Ring allreduce, p = 4, on full:4: each step is overhead + one chunk over one link + one hop,
    and a rank's next send waits for the chunk it receives in this step."""
    p, size = 4, 1 << 20
    sched = schedule(RING, p)
    model = NetworkModel()
    chunk = size / sched.nchunks
    step = model.step_overhead + chunk / model.link_bandwidth + model.link_latency + model.hop_latency
    out = tmp_path / "ring.svg"
    code, text = viz_cli(RING, "-p", str(p), "--timeline", "--size", "1MiB", "-o", str(out))
    assert code == EXIT_OK, text
    bars, tr = viz.timeline_bars(sched, parse_topology(f"full:{p}"), size)
    assert len(bars) == sum(op.kind is OpKind.SEND for st in sched.steps for op in st.ops) == 2 * (p - 1) * p
    for b in bars:
        s = b.step
        assert b.peer == (b.rank + 1) % p
        assert b.start == pytest.approx(s * step + model.step_overhead, rel=1e-9)
        assert b.end == pytest.approx((s + 1) * step, rel=1e-9)
        assert b.row == 0
    assert tr.time == pytest.approx(2 * (p - 1) * step, rel=1e-9)
    assert f"done at {2 * (p - 1) * step * 1e6:.4g} us" in text
    # one bar in the SVG per message, by step
    drawn = Counter(int(s) for s in re.findall(r'<g id="bar-(\d+)-\d+"', out.read_text()))
    assert drawn == Counter({st.index: p for st in sched.steps})


def overlaps(bars: list[viz.Bar]) -> int:
    """Pairs of bars of one lane, from different steps, that overlap in time (brute force)."""
    return sum(
        1
        for i, a in enumerate(bars)
        for b in bars[i + 1 :]
        if a.rank == b.rank and a.step != b.step and a.start < b.end and b.start < a.end
    )


def test_a_pipelined_ring_overlaps_its_steps_and_a_plain_ring_does_not(tmp_path: Path) -> None:
    pipelined, plain = schedule(PIPELINED, 4, k=4), schedule(RING, 4)
    full = parse_topology("full:4")
    bars, tr = viz.timeline_bars(pipelined, full)
    assert overlaps(bars) > 0
    model = NetworkModel(execution="dataflow")
    assert tr.time == pytest.approx(simulate(pipelined, full, [1 << 20], model).rows[0].time_s)
    # bars that overlap an earlier one of their lane are drawn in another row
    for a in bars:
        clash = [b for b in bars if b.rank == a.rank and b is not a and b.start < a.end and a.start < b.end]
        assert all(b.row != a.row for b in clash)
    flat, _ = viz.timeline_bars(plain, full)
    assert overlaps(flat) == 0 and {b.row for b in flat} == {0}
    out = tmp_path / "pipelined.svg"
    code, text = viz_cli(PIPELINED, "-p", "4", "--timeline", "-o", str(out))
    assert code == EXIT_OK, text
    assert f"{sum(b.row > 0 for b in bars)} bars overlap" in text and sum(b.row > 0 for b in bars) > 0


def test_a_ring_pipelined_in_lanes_overlaps_as_the_one_pipelined_in_steps(tmp_path: Path) -> None:
    """docs/simulate.md: the two pipelined rings give the same times under dataflow execution; here
    every message too: the same (sender, receiver, start, end), and bars of different lanes overlap."""
    full = parse_topology("full:4")
    lanes, _ = viz.timeline_bars(schedule(LANES, 4, k=4), full)
    steps, _ = viz.timeline_bars(schedule(PIPELINED, 4, k=4), full)
    assert {b.lane for b in lanes} == {0, 1, 2, 3} and {b.lane for b in steps} == {None}
    assert len({b.step for b in lanes}) == 2 * 3 and len({b.step for b in steps}) == 2 * 3 * 4

    def key(b: viz.Bar) -> tuple[int, int, float, float]:
        return (b.rank, b.peer, round(b.start, 15), round(b.end, 15))

    assert sorted(map(key, lanes)) == sorted(map(key, steps))
    same_step_overlaps = sum(
        1
        for i, a in enumerate(lanes)
        for b in lanes[i + 1 :]
        if a.rank == b.rank and a.step == b.step and a.lane != b.lane and a.start < b.end and b.start < a.end
    )
    assert same_step_overlaps > 0
    out = tmp_path / "lanes.svg"
    code, text = viz_cli(LANES, "-p", "4", "--timeline", "-o", str(out))
    assert code == EXIT_OK, text
    assert f"{sum(b.row > 0 for b in lanes)} bars overlap" in text


def test_timeline_on_nodes_colours_bars_by_level(tmp_path: Path) -> None:
    nodes, per_node = 2, 4
    sched = schedule(RING, 8)
    out = tmp_path / "t.svg"
    code, text = viz_cli(RING, "-p", "8", "--timeline", "--node", f"nvlink:{per_node}", "--placement", "cyclic",
                         "--topology", f"ring:{nodes}", "-o", str(out))  # fmt: skip
    assert code == EXIT_OK, text
    across = Counter()
    for st in sched.steps:
        for op in st.ops:
            if op.kind is OpKind.SEND:
                cross = node_of(op.rank, nodes, per_node, "cyclic") != node_of(op.peer, nodes, per_node, "cyclic")
                across[st.index, cross] += 1
    drawn = arrow_colours(out, "bar")
    intra, inter = viz.LEVEL_COLORS["intra"], viz.LEVEL_COLORS["inter"]
    for st in sched.steps:
        assert drawn[st.index] == Counter({intra: across[st.index, False], inter: across[st.index, True]}) - Counter()
    assert sorted({int(k) for k in re.findall(r'<g id="node-(\d+)"', out.read_text())}) == [0, 1]


def test_timeline_steps_option_keeps_the_times_of_the_whole_run(tmp_path: Path) -> None:
    sched = schedule(PIPELINED, 4, k=2)
    full = parse_topology("full:4")
    every, _ = viz.timeline_bars(sched, full)
    some, _ = viz.timeline_bars(sched, full, steps=range(2, 5))
    assert {b.step for b in some} == {2, 3, 4}
    assert [(b.rank, b.step, b.start, b.end) for b in some] == [
        (b.rank, b.step, b.start, b.end) for b in every if b.step in range(2, 5)
    ]


# --------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--node", "nvlink:5"], "Invalid value for '--node': 'nvlink:5': 5 ranks per node do not divide"),
        (["--node", "nvswitch:4"], "Invalid value for '--node'"),
        (["--node", "nvlink:4,nics=9"], "9 NICs for 4 ranks"),
        (["--placement", "cyclic"], "Invalid value for '--placement': a placement of ranks on nodes needs --node"),
        (["--placement", "diagonal", "--node", "nvlink:4"], "Invalid value for '--placement'"),
        (["--color", "level"], "Invalid value for '--color': the level a message crosses needs ranks on nodes"),
        (["--node", "nvlink:4", "--topology", "ring:3"], "for '--topology' / '--node': ring:3 x nvlink:4"),
        (["--topology", "ring:x"], "Invalid value for '--topology'"),
        (["--timeline", "--topology", "ring:8"], "ring:8 has 8 nodes, but the schedule runs on 16 ranks"),
        (["--timeline", "--size", "3"], "Invalid value for '--size': '3'"),
        (["--timeline", "--size", "lots"], "Invalid value for '--size': 'lots' is not a size"),
        (["--timeline", "--link-bw", "0Gb/s"], "Invalid value for '--link-bw'"),
        (["--timeline", "--step-overhead", "soon"], "Invalid value for '--step-overhead'"),
        (["--timeline", "--chunk", "1"], "--chunk and --timeline are two different pictures"),
        (["--timeline", "--color", "port"], "Invalid value for '--color': a timeline is coloured by step or level"),
        (["--timeline", "--max-panels", "3"], "--max-panels applies to the step view"),
        (["--timeline", "--no-merge"], "--no-merge applies to the step view"),
        (["--size", "1MiB"], "--size applies to --timeline only"),
        (["--link-latency", "1us"], "--link-latency applies to --timeline only"),
        (["--timeline", "--steps", "40.."], "Invalid value for '--steps'"),
    ],
)
def test_bad_options_exit_2_naming_the_option(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "out.svg"
    code, text = viz_cli(RING, "-p", "16", "-o", str(out), *args)
    assert code == EXIT_INPUT, text
    assert "Traceback" not in text and message in text, text
    assert not out.exists()
