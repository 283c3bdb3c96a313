"""The dataflow simulation of a schedule on a time axis (`collc viz --timeline`, docs/viz.md).

`timeline_bars` runs the schedule once under dataflow execution (`collc.simulate.trace`, the
model of `collc.eventsim`) and makes one `Bar` per message: on the track of its sender, from the
moment it enters the network (the sender's engine has done the step's overhead and codec work)
to its arrival at the receiver.  Bars of one track that overlap in time stack in rows, so that
the steps a pipelined schedule runs at once stand out.  `draw_timeline` draws them: one track
per rank (grouped by node on a `collc.hierarchy.Hierarchical` topology), a thin grey strip at
the foot of a track where the rank's engine works, and a band per phase above the tracks, named
with its `.coll` lines.  Every bar is an SVG group with the id ``bar-STEP-N``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from collc.hierarchy import Hierarchical
from collc.ir import Schedule, Step, params_text
from collc.simulate import NetworkModel, trace
from collc.topology import FullyConnected, Topology
from collc.viz.levels import LEVEL_COLORS, LEVELS, hop_level, level_label, node_members
from collc.viz.steps import _rect, _save, _step_colors, suffix_problem

if TYPE_CHECKING:
    from collc.eventsim import Trace

TimelineColor = Literal["step", "level"]
SIZE = 1 << 20
"""The vector size (bytes) a timeline simulates unless told otherwise."""


@dataclass(frozen=True, slots=True)
class Bar:
    """One message on the time axis (seconds from the start of the collective)."""

    rank: int  # the sender: the track
    peer: int  # the receiver
    step: int  # Step.index
    phase: str
    start: float  # it enters the network
    end: float  # it has arrived
    row: int  # its row in the track: bars of a track that overlap in time stack
    level: str | None  # `collc.viz.levels.hop_level` on nodes of several ranks, else None
    lane: int | None = None  # the send's lane in its step (`Step.lane`), None: in none


@dataclass(frozen=True, slots=True)
class Timeline:
    path: Path
    bars: tuple[Bar, ...]
    time: float  # the simulated time of the whole schedule (s)
    note: str
    overlapping: int  # bars drawn above the first row of their track: they overlap an earlier bar in time


def _rows(bars: list[tuple[float, float, int]]) -> dict[int, int]:
    """A row for every (start, end, id) of one track: the first row whose last bar has ended by the start."""
    ends: list[float] = []
    out = {}
    for start, end, i in sorted(bars):
        row = next((k for k, e in enumerate(ends) if e <= start), len(ends))
        if row == len(ends):
            ends.append(end)
        else:
            ends[row] = end
        out[i] = row
    return out


def timeline_bars(
    schedule: Schedule, topology: Topology | None = None, size_bytes: int = SIZE, model: NetworkModel | None = None,
    steps: range | None = None,
) -> tuple[list[Bar], Trace]:  # fmt: skip
    """The bars of the messages of the steps whose index lies in ``steps`` (all by default), and the
    run's `collc.eventsim.Trace`.  ``topology``: ``full:p`` (a link per pair of ranks) by default;
    a ValueError says what does not fit, as `collc.simulate.simulate`."""
    topo = topology if topology is not None else FullyConnected(schedule.nranks)
    tr = trace(schedule, topo, size_bytes, model)
    hierarchy = topo if isinstance(topo, Hierarchical) else None
    raw: list[tuple[int, int, int, str, float, float, int | None]] = []
    for m, (g, op_i) in enumerate(zip(tr.msg_group.tolist(), tr.msg_op.tolist(), strict=True)):
        step = schedule.steps[int(tr.group_step[g])]
        if steps is not None and step.index not in steps:
            continue
        op = step.ops[op_i]
        end = float(tr.msg_arrival[m])
        raw.append((op.rank, op.peer, step.index, step.phase, float(tr.group_end[g]), end, step.lane(op_i)))
    lanes: dict[int, list[tuple[float, float, int]]] = {}
    for i, (rank, _, _, _, start, end, _) in enumerate(raw):
        lanes.setdefault(rank, []).append((start, end, i))
    row = {i: k for lane in lanes.values() for i, k in _rows(lane).items()}
    bars = [
        Bar(rank, peer, index, phase, start, end, row[i], hop_level(hierarchy, rank, peer) if hierarchy else None, lane)
        for i, (rank, peer, index, phase, start, end, lane) in enumerate(raw)
    ]
    return bars, tr


def _lines(steps: Sequence[Step]) -> str:
    """``file.coll:12, 13``: the most frequent two source lines of the ops of ``steps``."""
    lines = Counter((Path(op.span.file).name, op.span.line) for st in steps for op in st.ops if op.span.line)
    top = sorted(lines, key=lambda key: (-lines[key], key))[:2]
    if not top:
        return ""
    if len({f for f, _ in top}) == 1:
        return f"{top[0][0]}:" + ", ".join(str(line) for _, line in sorted(top))
    return ", ".join(f"{f}:{line}" for f, line in top)


def _time_unit(seconds: float) -> tuple[float, str]:
    for scale, unit in ((1e-9, "ns"), (1e-6, "µs"), (1e-3, "ms")):
        if seconds < 2000 * scale:
            return scale, unit
    return 1.0, "s"


def _size_text(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def draw_timeline(
    schedule: Schedule, path: str | Path, *, topology: Topology | None = None, size_bytes: int = SIZE,
    model: NetworkModel | None = None, color_by: TimelineColor = "step", steps: range | None = None,
) -> Timeline:  # fmt: skip
    """The timeline picture (PNG, SVG or PDF by the suffix; see the module).  ``color_by="level"``
    (on a `Hierarchical` topology only): bars coloured by the level the message crosses."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    problem = suffix_problem(path)
    if problem is not None:
        raise ValueError(problem)
    if color_by not in ("step", "level"):
        raise ValueError(f"color_by must be 'step' or 'level', not {color_by!r}")
    hierarchy = topology if isinstance(topology, Hierarchical) else None
    if color_by == "level" and hierarchy is None:
        raise ValueError("color_by='level' needs ranks on nodes (a Hierarchical topology)")
    bars, tr = timeline_bars(schedule, topology, size_bytes, model, steps)
    p = schedule.nranks
    order = [r for node in node_members(hierarchy) for r in node] if hierarchy else list(range(p))
    height_of = {r: 1 for r in order}
    for b in bars:
        height_of[b.rank] = max(height_of[b.rank], b.row + 1)
    gap, engine_h = 0.5, 0.22
    lane_y: dict[int, float] = {}
    y = 0.0
    node_of = {r: k for k, node in enumerate(node_members(hierarchy)) for r in node} if hierarchy else {}
    for i, r in enumerate(order):
        if i and hierarchy and node_of[r] != node_of[order[i - 1]]:
            y += gap  # a wider gap between nodes
        lane_y[r] = y
        y += height_of[r] + engine_h + gap
    total_units = y
    scale, unit = _time_unit(max(tr.time, 1e-12))
    end_x = tr.time / scale

    width, side, top, bottom = 11.0, 1.0, 1.25, 1.0
    phases = list(dict.fromkeys(b.phase for b in bars))
    band_h = 0.28 * max(len(phases), 1)
    lanes_h = min(max(0.16 * total_units, 2.0), 40.0)
    height = top + band_h + 0.15 + lanes_h + bottom
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes(_rect(fig, side, bottom, width - side - 0.4, lanes_h))
    bx = fig.add_axes(_rect(fig, side, bottom + lanes_h + 0.15, width - side - 0.4, band_h), sharex=ax)
    cmap, norm = _step_colors(schedule)
    pts_per_x = 72 * (width - side - 0.4) / max(end_x * 1.02, 1e-12)
    row_pts = 72 * lanes_h / max(total_units, 1)
    for n, b in enumerate(bars):
        x0, w = b.start / scale, (b.end - b.start) / scale
        y0 = lane_y[b.rank] + engine_h + b.row
        color = LEVEL_COLORS[str(b.level)] if color_by == "level" else cmap(norm(b.step))
        rect = Rectangle((x0, y0 + 0.08), w, 0.84, facecolor=color, edgecolor="white", lw=0.4, zorder=2)
        rect.set_gid(f"bar-{b.step}-{n}")
        ax.add_patch(rect)
        fs = min(7.0, 0.6 * row_pts)
        label = str(b.step) if b.lane is None else f"{b.step}·{b.lane}"
        if w * pts_per_x > fs * 0.7 * (len(label) + 1) and fs >= 4:
            ax.text(x0 + w / 2, y0 + 0.5, label, ha="center", va="center", fontsize=fs, zorder=3,
                    color="white" if color_by == "level" or norm(b.step) < 0.6 else "black")  # fmt: skip
    chosen = {i for i, st in enumerate(schedule.steps) if steps is None or st.index in steps}
    for g in range(tr.group_rank.size):
        if int(tr.group_step[g]) not in chosen:
            continue
        r, s0, s1 = int(tr.group_rank[g]), float(tr.group_start[g]), float(tr.group_end[g])
        ax.add_patch(Rectangle((s0 / scale, lane_y[r] + 0.03), (s1 - s0) / scale, engine_h - 0.06, facecolor="0.45",
                               edgecolor="none", zorder=2))  # fmt: skip
    ax.axvline(end_x, color="0.2", lw=0.8, linestyle=(0, (3, 2)), zorder=1)
    ax.set_xlim(0, end_x * 1.02 if end_x > 0 else 1)
    ax.set_ylim(total_units, -gap / 2)
    ax.set_yticks([lane_y[r] + (engine_h + height_of[r]) / 2 for r in order])
    ax.set_yticklabels([f"rank {r}" for r in order], fontsize=min(8.0, max(4.0, 0.7 * row_pts * 1.2)))
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel(f"simulated time ({unit}); the dashed line: the collective is done at {end_x:.4g} {unit}", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    for side_name in ("top", "right", "left"):
        ax.spines[side_name].set_visible(False)
    ax.grid(axis="x", color="0.92", lw=0.6, zorder=0)
    if hierarchy is not None:
        for k, node in enumerate(node_members(hierarchy)):
            y0, y1 = lane_y[node[0]] - gap / 3, lane_y[node[-1]] + height_of[node[-1]] + engine_h + gap / 3
            ax.axhspan(y0, y1, color="0.95" if k % 2 == 0 else "white", zorder=0, gid=f"node-{k}")
            ax.text(1.0, (y0 + y1) / 2, f" node {k}", transform=ax.get_yaxis_transform(), fontsize=7.5,
                    color="0.35", va="center", ha="left", rotation=90)  # fmt: skip
    # the phases: the span of their bars, with their source lines
    bx.set_axis_off()
    bx.set_ylim(len(phases), 0)
    for k, phase in enumerate(phases):
        mine = [b for b in bars if b.phase == phase]
        lo, hi = min(b.start for b in mine) / scale, max(b.end for b in mine) / scale
        phase_steps = [st for st in schedule.steps if st.phase == phase and (steps is None or st.index in steps)]
        first, last = phase_steps[0].index, phase_steps[-1].index
        span = f"step {first}" if first == last else f"steps {first}–{last}"
        bx.add_patch(Rectangle((lo, k + 0.12), hi - lo, 0.76, facecolor="0.85", edgecolor="0.5", lw=0.5))
        where = _lines(phase_steps)
        bx.text(lo, k + 0.5, f"  {phase} · {span}" + (f" · {where}" if where else ""), va="center", ha="left",
                fontsize=8)  # fmt: skip
    title = f"{schedule.algorithm} ({schedule.collective.value}) {params_text(schedule.params)}"
    net = topology.spec if topology is not None else f"full:{p}"
    overlapping = sum(1 for b in bars if b.row > 0)
    note = f"{len(bars)} messages, {_size_text(size_bytes)} vector on {net}, dataflow execution"
    if steps is not None:
        note += f", steps {steps.start}..{steps.stop - 1}"
    fig.suptitle(f"{title}: messages over time\n{note}; {overlapping} bars overlap an earlier bar of their track",
                 fontsize=11, y=1 - 0.1 / height, va="top")  # fmt: skip
    lax = fig.add_axes(_rect(fig, side, 0.05, width - side - 0.4, 0.4))
    lax.set_axis_off()
    text = (
        "a bar: a message, on its sender's track, from entering the network to its arrival (the number: its step; "
        "step·lane in a step with lanes);\nbars that overlap in time stack; grey strip under a track: the rank's "
        "engine (step overhead, codec work)"
    )
    lax.text(0.0, 0.0, text, fontsize=8, transform=lax.transAxes)
    if color_by == "level" and hierarchy is not None:
        levels = [lv for lv in LEVELS if any(b.level == lv for b in bars)]
        handles = [Line2D([], [], color=LEVEL_COLORS[lv], lw=6, label=level_label(hierarchy, lv)) for lv in levels]
        fig.legend(handles=handles, loc="upper right", bbox_to_anchor=_rect(fig, width - 0.4, height - 0.75, 0, 0)[:2],
                   ncols=2, fontsize=8, frameon=False)  # fmt: skip
    else:
        cax = fig.add_axes(_rect(fig, width - 3.4, height - 0.85, 3.0, 0.12))
        fig.colorbar(ScalarMappable(norm, cmap), cax=cax, orientation="horizontal").set_label("step", fontsize=8)
        cax.tick_params(labelsize=7)
    return Timeline(_save(fig, path), tuple(bars), tr.time, note, overlapping)
