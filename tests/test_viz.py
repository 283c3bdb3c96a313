"""`collc viz` and collc.viz: pictures of schedules.

Counts are checked against the IR independently: every drawn SEND is an SVG group with the id
``send-STEP-N`` (``wrap-STEP-N`` for the first half of a hop drawn round a torus edge)."""

from __future__ import annotations

import functools
import math
import re
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pytest

import collc
from collc import viz
from collc.cli import EXIT_INPUT, EXIT_OK
from collc.ir import Action, OpKind, Schedule, Step, schedule_from_json

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import EXAMPLES, cli

RING, SWING, TORUS = (str(EXAMPLES / f) for f in ("ring_allreduce.coll", "swing_bw.coll", "torus/swing_bw_torus.coll"))


@functools.cache
def schedule(file: str, arg: str) -> Schedule:
    if "x" in arg:
        return collc.load(file).instantiate(dims=tuple(int(d) for d in arg.split("x"))).schedule
    return collc.load(file).instantiate(p=int(arg)).schedule


def cli_args(file: str, arg: str) -> list[str]:
    return [file, "--dims" if "x" in arg else "-p", arg]


def viz_cli(*args: str) -> tuple[int, str]:
    out = cli("viz", *args)  # fails the test on any exception other than SystemExit
    return out.code, out.text


def sends(step: Step, chunk: int | None = None) -> int:
    return sum(1 for op in step.ops if op.kind is OpKind.SEND and (chunk is None or chunk in op.chunks))


def svg_ids(path: Path, prefix: str = "send") -> Counter[int]:
    """Drawn arrows per step index, from the SVG's group ids."""
    return Counter(int(m) for m in re.findall(rf'<g id="{prefix}-(\d+)-\d+"', path.read_text()))


def alike(a: Step, b: Step) -> bool:
    """The same communication up to chunk ids (the merge rule, stated independently)."""

    def key(step: Step) -> list[tuple[object, ...]]:
        return sorted((op.rank, op.kind.value, op.peer, len(op.chunks), str(op.action)) for op in step.ops)

    return a.phase == b.phase and key(a) == key(b)


def assert_picture(path: Path) -> None:
    """A real picture: not tiny, and not one colour."""
    assert path.stat().st_size > 5000
    from matplotlib.image import imread

    pixels = imread(path)[..., :3]
    assert pixels.std() > 0.05
    rgb = (pixels * 255).astype(np.uint32)
    assert len(np.unique(rgb[..., 0] << 16 | rgb[..., 1] << 8 | rgb[..., 2])) > 20  # colours


# --------------------------------------------------------------------------
# The step view
# --------------------------------------------------------------------------

STEP_CASES = [(RING, "16"), (SWING, "16"), (SWING, "64"), (TORUS, "4x4"), (TORUS, "8x8")]


@pytest.fixture(scope="module")
def step_svg(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], tuple[Path, str]]:
    """`collc viz FILE -p/--dims ARG -o steps.svg`, drawn once per module: the file and the output."""
    done: dict[tuple[str, str], tuple[Path, str]] = {}

    def draw(file: str, arg: str) -> tuple[Path, str]:
        if (file, arg) not in done:
            out = tmp_path_factory.mktemp("steps") / "steps.svg"
            code, text = viz_cli(*cli_args(file, arg), "-o", str(out))
            assert code == EXIT_OK, text
            done[file, arg] = (out, text)
        return done[file, arg]

    return draw


@pytest.mark.parametrize(("file", "arg"), STEP_CASES, ids=lambda v: Path(v).stem if "/" in v else v)
def test_svg_has_one_arrow_per_send_of_every_shown_step(step_svg: Any, file: str, arg: str) -> None:
    out, text = step_svg(file, arg)
    sched = schedule(file, arg)
    drawn = svg_ids(out)
    shown = sorted(drawn)
    # a panel for the first step and for every step unlike the one before it (here all fit)
    expected = [i for i, st in enumerate(sched.steps) if i == 0 or not alike(st, sched.steps[i - 1])]
    assert shown == [sched.steps[i].index for i in expected]
    for i in expected:
        assert drawn[sched.steps[i].index] == sends(sched.steps[i]) > 0
    assert sum(drawn.values()) == sum(sends(sched.steps[i]) for i in expected)
    assert f"{len(shown)} panels" in text


def test_ring_steps_merge_into_one_panel_per_phase(step_svg: Any) -> None:
    sched = schedule(RING, "16")
    assert all(alike(sched.steps[i], sched.steps[i + 1]) for i in range(14))
    assert not alike(sched.steps[14], sched.steps[15])
    out, text = step_svg(RING, "16")
    assert "30 steps (all steps) in 2 panels" in text
    assert sorted(svg_ids(out)) == [0, 15]


@pytest.mark.parametrize(("file", "arg"), STEP_CASES, ids=lambda v: Path(v).stem if "/" in v else v)
def test_png_is_a_real_picture(tmp_path: Path, file: str, arg: str) -> None:
    out = tmp_path / "steps.png"
    few = ["--max-panels", "4"] if len(schedule(file, arg).steps) > 8 and schedule(file, arg).nranks > 16 else []
    code, text = viz_cli(*cli_args(file, arg), "-o", str(out), "--color", "port", *few)
    assert code == EXIT_OK, text
    assert_picture(out)


def test_long_schedules_show_evenly_spaced_steps_and_say_so(tmp_path: Path) -> None:
    out = tmp_path / "ring64.svg"
    code, text = viz_cli(*cli_args(RING, "64"), "--no-merge", "--max-panels", "6", "-o", str(out))
    assert code == EXIT_OK, text
    assert "showing 6 of 126 steps, evenly spaced" in text
    drawn = svg_ids(out)
    assert sorted(drawn) == [0, 25, 50, 75, 100, 125]
    assert all(n == 64 for n in drawn.values())
    plan = viz.plan_panels(schedule(RING, "64"), max_panels=6, merge=False)
    assert [panel[0] for panel in plan.panels] == [0, 25, 50, 75, 100, 125]
    merged = viz.plan_panels(schedule(RING, "64"))
    assert [(panel[0], len(panel)) for panel in merged.panels] == [(0, 63), (63, 63)]


def test_steps_option_selects_a_range(tmp_path: Path) -> None:
    out = tmp_path / "s.svg"
    code, text = viz_cli(*cli_args(SWING, "16"), "--steps", "2..4", "-o", str(out))
    assert code == EXIT_OK, text
    assert sorted(svg_ids(out)) == [2, 3, 4]
    code, _ = viz_cli(*cli_args(SWING, "16"), "--steps", "6..", "-o", str(out))
    assert code == EXIT_OK and sorted(svg_ids(out)) == [6, 7]


def test_torus_hops_round_the_edge_are_drawn_in_two_halves(step_svg: Any) -> None:
    sched = schedule(TORUS, "8x8")
    out, _ = step_svg(TORUS, "8x8")
    wraps: Counter[int] = Counter()
    for st in sched.steps:
        for op in st.ops:
            if op.kind is OpKind.SEND:
                (a0, a1), (b0, b1) = divmod(op.rank, 8), divmod(op.peer, 8)  # row-major, as torus_coord
                assert (a0 == b0) != (a1 == b1)  # every hop runs along one dimension
                wraps[st.index] += abs(b0 - a0) > 4 or abs(b1 - a1) > 4
    assert svg_ids(out, "wrap") == +wraps and sum(wraps.values()) > 0


# --------------------------------------------------------------------------
# The chunk-flow view
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "arg", "chunk"), [(SWING, "16", 3), (RING, "16", 0), (TORUS, "4x4", 37)], ids=["swing", "ring", "torus"]
)
def test_chunk_flow_draws_the_sends_that_carry_the_chunk(tmp_path: Path, file: str, arg: str, chunk: int) -> None:
    out = tmp_path / "c.svg"
    code, text = viz_cli(*cli_args(file, arg), "--chunk", str(chunk), "-o", str(out))
    assert code == EXIT_OK, text
    sched = schedule(file, arg)
    expected = Counter({st.index: sends(st, chunk) for st in sched.steps if sends(st, chunk)})
    assert svg_ids(out) == expected
    assert f"{sum(expected.values())} sends carry it" in text
    if "x" in arg:  # and once as a PNG, through the API
        png = tmp_path / "c.png"
        assert viz.draw_chunk_flow(sched, png, chunk).arrows == sum(expected.values())
        assert_picture(png)


def test_chunk_flow_checks_the_chunk() -> None:
    with pytest.raises(ValueError, match=r"chunk 16 is out of range: swing_bw has chunks 0\.\.15"):
        viz.draw_chunk_flow(schedule(SWING, "16"), "x.png", 16)


# --------------------------------------------------------------------------
# Layout and hop classes
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dims", [(4, 4), (8, 8), (2, 8), (6, 4)])
def test_torus_ranks_sit_on_a_row_major_grid(dims: tuple[int, int]) -> None:
    pos = viz.rank_positions(math.prod(dims), dims)
    stride = dims[1]  # torus_stride(dims, 0) of the prelude: the last dimension is the fastest
    for r in range(math.prod(dims)):
        row, col = r // stride % dims[0], r % dims[1]  # torus_coord(r, dims, 0), torus_coord(r, dims, 1)
        assert tuple(pos[r]) == (col, -row)


def test_three_dimensional_tori_put_the_planes_side_by_side() -> None:
    dims = (4, 3, 5)
    pos = viz.rank_positions(60, dims)
    per_row = math.ceil(math.sqrt(4))
    for r in range(60):
        x, rest = divmod(r, 15)
        y, z = divmod(rest, 5)
        px, py = x % per_row * (5 + viz.PLANE_GAP), x // per_row * (3 + viz.PLANE_GAP)
        assert tuple(pos[r]) == (px + z, -(py + y))
    gaps = np.hypot(*(pos[:, None, :] - pos[None, :, :]).transpose(2, 0, 1))
    assert gaps[~np.eye(60, dtype=bool)].min() == 1.0  # distinct ranks, one apart at least


def test_one_dimensional_ranks_sit_on_a_circle_clockwise() -> None:
    pos = viz.rank_positions(16)
    assert np.allclose(np.hypot(pos[:, 0], pos[:, 1]), 1.0)
    assert np.allclose(pos[0], (0, 1)) and pos[1][0] > 0 and np.allclose(pos[8], (0, -1))
    assert viz.torus_dims(schedule(SWING, "16")) is None
    assert viz.torus_dims(schedule(TORUS, "4x4")) == (4, 4)


def test_port_classes() -> None:
    ring, swing, torus = schedule(RING, "16"), schedule(SWING, "16"), schedule(TORUS, "4x4")
    assert {h.port for st in ring.steps for h in viz.step_hops(ring, st)} == {"+1"}
    assert [sorted({h.port for h in viz.step_hops(swing, st)}) for st in swing.steps[:4]] == [
        ["+1", "−1"], ["+1", "−1"], ["+2..3", "−2..3"], ["+4..7", "−4..7"]
    ]  # fmt: skip
    first = viz.step_hops(torus, torus.steps[0], (4, 4))
    assert Counter(h.port for h in first) == {"dim 0 +": 16, "dim 0 −": 16, "dim 1 +": 16, "dim 1 −": 16}
    assert viz.hop_port(0, 12, 16, (4, 4)) == "dim 0 −" and viz.hop_port(0, 5, 16, (4, 4)) == "other"
    assert {h.action for h in first} == {Action.REDUCE}


def test_a_wrong_schedule_is_drawn_too(tmp_path: Path) -> None:
    """A send without a matching receive is drawn, dotted; the picture is for debugging."""
    data = {"algorithm": "broken", "collective": "allgather", "params": {"p": 4}, "nranks": 4, "nchunks": 4,
            "root": None, "steps": [{"index": 0, "phase": "x", "ops": [
                {"rank": 0, "kind": "send", "peer": 1, "chunks": [0]},
                {"rank": 1, "kind": "send", "peer": 2, "chunks": [1]},
                {"rank": 2, "kind": "recv", "peer": 1, "chunks": [1], "action": "copy"}]}]}  # fmt: skip
    sched = schedule_from_json(data)
    assert [h.action for h in viz.step_hops(sched, sched.steps[0])] == [None, Action.COPY]
    out = tmp_path / "broken.svg"
    assert viz.draw_steps(sched, out).arrows == 2
    assert svg_ids(out) == {0: 2}


def test_drawing_leaves_matplotlib_settings_alone(tmp_path: Path) -> None:
    before = dict(matplotlib.rcParams)
    viz.draw_steps(schedule(SWING, "16"), tmp_path / "a.png", steps=range(0, 1), summary=False)
    assert dict(matplotlib.rcParams) == before


# --------------------------------------------------------------------------
# Bad input: exit 2, one clear line, no traceback
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no_such.coll", "-p", "4", "-o", "OUT.png"], "no such file"),
        ([SWING, "-p", "zz", "-o", "OUT.png"], "Invalid value for '-p' / '--ranks': 'zz'"),
        ([SWING, "-p", "16", "-o", "OUT.jpg"], "must be .png, .svg or .pdf"),
        ([SWING, "-p", "16", "-o", "OUT.png", "--chunk", "16"], "16 is out of range: swing_bw has chunks 0..15"),
        ([SWING, "-p", "16", "-o", "OUT.png", "--chunk", "-1"], "out of range"),
        ([SWING, "-p", "16", "-o", "OUT.png", "--steps", "3..99"], "the schedule has steps 0..7"),
        ([SWING, "-p", "16", "-o", "OUT.png", "--steps", "a..b"], "expected A..B"),
        ([SWING, "-p", "16", "-o", "OUT.png", "--steps", "1 5"], "expected A..B"),
        ([SWING, "-p", "16", "-o", "OUT.png", "--chunk", "1", "--color", "port"], "--color applies to the step view"),
        ([SWING, "-o", "OUT.png"], "missing value for parameter p"),
        ([TORUS, "--dims", "5x5", "-o", "OUT.png"], "error"),
        (["-p", "16", "-o", "FILE/x.png", SWING], "cannot write"),
    ],
)
def test_bad_input_exits_2_without_a_traceback(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "FILE").write_text("a file, not a folder")
    args = [a.replace("OUT", str(tmp_path / "out")).replace("FILE", str(tmp_path / "FILE")) for a in args]
    code, text = viz_cli(*args)
    assert code == EXIT_INPUT, text
    assert "Traceback" not in text and message in text
    assert not (tmp_path / "out.png").exists()
