"""Pictures of a schedule (`collc viz`, docs/viz.md).

`collc.viz.steps`: who sends to whom in every step (`draw_steps`) and where one chunk travels
(`draw_chunk_flow`), ranks on a circle, on a torus grid, or grouped by node (`collc.viz.levels`).
`collc.viz.timeline`: the dataflow simulation's messages on a time axis, one lane per rank
(`draw_timeline`).  Matplotlib is used through `Figure` objects, never pyplot.
"""

from collc.viz.levels import LEVEL_COLORS, LEVELS, NODE_GAP, hop_level, level_label, node_members, node_positions
from collc.viz.steps import (
    MAX_PANELS,
    PLANE_GAP,
    SUFFIXES,
    ColorBy,
    Hop,
    PanelPlan,
    Picture,
    chunk_problem,
    draw_chunk_flow,
    draw_steps,
    hop_port,
    plan_panels,
    rank_positions,
    step_hops,
    suffix_ok,
    suffix_problem,
    torus_dims,
    torus_hop,
)
from collc.viz.timeline import Bar, Timeline, draw_timeline, timeline_bars

__all__ = [
    "LEVELS",
    "LEVEL_COLORS",
    "MAX_PANELS",
    "NODE_GAP",
    "PLANE_GAP",
    "SUFFIXES",
    "Bar",
    "ColorBy",
    "Hop",
    "PanelPlan",
    "Picture",
    "Timeline",
    "chunk_problem",
    "draw_chunk_flow",
    "draw_steps",
    "draw_timeline",
    "hop_level",
    "hop_port",
    "level_label",
    "node_members",
    "node_positions",
    "plan_panels",
    "rank_positions",
    "step_hops",
    "suffix_ok",
    "suffix_problem",
    "timeline_bars",
    "torus_dims",
    "torus_hop",
]
