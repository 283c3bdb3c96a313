"""Pictures of a schedule's communication (`collc viz`, docs/viz.md).

`draw_steps` draws small multiples, one panel per step: the ranks laid out by `rank_positions`
(a circle, or the torus grid when the program has a ``dims`` parameter; with a
`collc.hierarchy.Hierarchical` topology, grouped by node round the circle, `collc.viz.levels`)
and an arrow from sender to receiver for every SEND op; `plan_panels` says which steps get a panel.  `draw_chunk_flow`
draws where one chunk travels.  Both write PNG, SVG or PDF by the file's suffix; every arrow has
the SVG id ``send-STEP-N`` (the first half of a hop drawn round a torus edge ``wrap-STEP-N``).
Matplotlib is used through `Figure` objects, never pyplot: no backend switch, no global state.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from collc.hierarchy import Hierarchical
from collc.ir import Action, Op, OpKind, Schedule, Step, params_text
from collc.viz.levels import (
    LEVEL_COLORS,
    LEVELS,
    check_fit,
    hop_level,
    level_label,
    node_members,
    node_positions,
    rank_slots,
    slot_angle,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ColorBy = Literal["step", "port", "level"]
SUFFIXES = (".png", ".svg", ".pdf")
MAX_PANELS = 16
LABEL_LIMIT = 32  # chunk counts are written on the arrows of a panel with at most this many (p <= 16)
PLANE_GAP = 1.0  # grid units between the planes of a torus of three or more dimensions


def suffix_ok(path: str | Path) -> bool:
    """Whether a picture's file name asks for a format collc writes (PNG, SVG, PDF)."""
    return Path(path).suffix.lower() in SUFFIXES


def suffix_problem(path: str | Path) -> str | None:
    """Why a picture cannot be written under this name, or None."""
    return None if suffix_ok(path) else f"{path}: the picture must be .png, .svg or .pdf"


def chunk_problem(schedule: Schedule, chunk: int) -> str | None:
    """Why ``chunk`` names no chunk of the schedule, or None."""
    if 0 <= chunk < schedule.nchunks:
        return None
    return f"chunk {chunk} is out of range: {schedule.algorithm} has chunks 0..{schedule.nchunks - 1}"


def torus_dims(schedule: Schedule) -> tuple[int, ...] | None:
    """The shape of a program with a ``dims`` parameter that covers all its ranks, else None."""
    value = schedule.param_dict.get("dims")
    return value if isinstance(value, tuple) and value and math.prod(value) == schedule.nranks else None


def rank_positions(nranks: int, dims: Sequence[int] | None = None) -> np.ndarray:
    """Where each rank is drawn: an (nranks, 2) array of x, y.

    Without ``dims`` (or with one dimension) on the unit circle, rank 0 at the top, clockwise.
    On a torus ranks are row-major, the last dimension fastest (``coords``/``rank_of``): in two
    dimensions rank ``row * dims[1] + col`` is at x = col, y = -row.  With more dimensions the
    leading coordinates (row-major) number the planes of the last two, which stand side by side
    ``PLANE_GAP`` apart, ⌈√planes⌉ planes to a row.
    """
    if dims is None or len(dims) < 2:
        angle = math.pi / 2 - 2 * math.pi * np.arange(nranks) / max(nranks, 1)
        return np.stack([np.cos(angle), np.sin(angle)], axis=1)
    if math.prod(dims) != nranks:
        raise ValueError(f"dims {'x'.join(map(str, dims))} do not hold {nranks} ranks")
    rows, cols = dims[-2], dims[-1]
    plane, rest = np.divmod(np.arange(nranks), rows * cols)
    plane_row, plane_col = np.divmod(plane, math.ceil(math.sqrt(nranks // (rows * cols))))
    x = plane_col * (cols + PLANE_GAP) + rest % cols
    return np.stack([x, 0.0 - (plane_row * (rows + PLANE_GAP) + rest // cols)], axis=1).astype(float)


def torus_hop(sender: int, receiver: int, dims: Sequence[int]) -> tuple[int, int] | None:
    """``(k, delta)`` for a hop along dimension k only, by ``delta`` the shorter way round (a
    tie: the direct way); None for a hop that changes several coordinates or none."""
    a, b = np.unravel_index(sender, dims), np.unravel_index(receiver, dims)
    moved = [k for k in range(len(dims)) if a[k] != b[k]]
    if len(moved) != 1:
        return None
    k, raw = moved[0], int(b[moved[0]] - a[moved[0]])
    return k, raw if 2 * abs(raw) <= dims[k] else raw - int(math.copysign(dims[k], raw))


def hop_port(sender: int, receiver: int, nranks: int, dims: Sequence[int] | None = None) -> str:
    """The class of a hop that ``--color port`` colours.  On a torus ``dim k +`` or ``dim k −``,
    the dimension and direction of the shorter way (``other``: not along one dimension).  Else
    the distance ``(receiver - sender) mod p`` taken in (-p/2, p/2], signed, in powers of two:
    ``+1``, ``−1``, ``+2..3``, ``−4..7``, ... (``+1``: the next rank, clockwise)."""
    if dims is not None and len(dims) >= 2:
        hop = torus_hop(sender, receiver, dims)
        return "other" if hop is None else f"dim {hop[0]} {'+' if hop[1] > 0 else '−'}"
    d = (receiver - sender) % nranks
    d = d - nranks if 2 * d > nranks else d
    if d == 0:
        return "self"
    lo = 1 << (abs(d).bit_length() - 1)
    return ("+" if d > 0 else "−") + (str(lo) if lo == 1 else f"{lo}..{2 * lo - 1}")


def _port_key(label: str) -> tuple[int, int, str]:
    """Port labels in order: dimension (or distance), then + before −."""
    digits = "".join(ch if ch.isdigit() else " " for ch in label).split()
    return (int(digits[0]) if digits else 1 << 30, 0 if "+" in label else 1, label)


@dataclass(frozen=True, slots=True)
class Hop:
    """A SEND as drawn; ``action`` is the matching receive's (None: no receive matches it)."""

    step: int
    sender: int
    receiver: int
    chunks: int
    action: Action | None
    compressed: bool  # the send or its receive names a codec
    port: str  # `hop_port`
    level: str | None = None  # `collc.viz.levels.hop_level` on nodes of several ranks, else None


def step_hops(
    schedule: Schedule, step: Step, dims: Sequence[int] | None = None, chunk: int | None = None,
    hierarchy: Hierarchical | None = None,
) -> list[Hop]:  # fmt: skip
    """The SEND ops of a step (those carrying ``chunk`` when given) as hops; with ``hierarchy``,
    each with the level it crosses."""
    recvs: dict[tuple[int, int], list[Op]] = defaultdict(list)
    for op in step.ops:
        if op.kind is OpKind.RECV:
            recvs[op.rank, op.peer].append(op)
    hops = []
    for op in step.ops:
        if op.kind is not OpKind.SEND or (chunk is not None and chunk not in op.chunks):
            continue
        matches = recvs.get((op.peer, op.rank), [])
        match = next((m for m in matches if m.chunks == op.chunks), matches[0] if matches else None)
        compressed = op.codec is not None or (match is not None and match.codec is not None)
        action = match.action if match is not None else None
        port = hop_port(op.rank, op.peer, schedule.nranks, dims)
        level = hop_level(hierarchy, op.rank, op.peer) if hierarchy is not None else None
        hops.append(Hop(step.index, op.rank, op.peer, len(op.chunks), action, compressed, port, level))
    return hops


@dataclass(frozen=True, slots=True)
class PanelPlan:
    panels: tuple[tuple[int, ...], ...]  # per panel, its steps (positions in schedule.steps), alike
    selected: int  # steps in the selection
    groups: int  # panels before sampling
    note: str  # what the figure shows, for people


def _pattern(step: Step) -> tuple[Any, ...]:
    ops = sorted((op.rank, op.kind.value, op.peer, len(op.chunks), str(op.action), op.codec or "") for op in step.ops)
    return (step.phase, tuple(ops))


def plan_panels(
    schedule: Schedule, *, steps: range | None = None, max_panels: int = MAX_PANELS, merge: bool = True
) -> PanelPlan:
    """The steps whose index lies in ``steps`` (all by default); consecutive ones alike up to the
    chunk ids (same phase, peers, chunk counts, actions) share a panel when ``merge``; then at
    most ``max_panels`` panels, evenly spaced, the first and the last included."""
    chosen = [i for i, st in enumerate(schedule.steps) if steps is None or st.index in steps]
    groups: list[list[int]] = []
    for i in chosen:
        alike = merge and groups and groups[-1][-1] == i - 1
        if alike and _pattern(schedule.steps[i]) == _pattern(schedule.steps[groups[-1][0]]):
            groups[-1].append(i)
        else:
            groups.append([i])
    picks = sorted({round(x) for x in np.linspace(0, len(groups) - 1, max(max_panels, 1))} if groups else set())
    n = len(chosen)
    note = f"{n} step{'s' * (n != 1)} ({'all steps' if steps is None else f'steps {steps.start}..{steps.stop - 1}'})"
    if len(groups) < n:
        note += f" in {len(groups)} panel{'s' * (len(groups) != 1)}: consecutive steps alike up to chunk ids merged"
    if len(picks) < len(groups):
        note += f"; showing {len(picks)} of {len(groups)} {'panels' if len(groups) < n else 'steps'}, evenly spaced"
    return PanelPlan(tuple(tuple(groups[k]) for k in picks), n, len(groups), note)


@dataclass(frozen=True, slots=True)
class Picture:
    path: Path
    arrows: int  # SEND arrows drawn
    panels: int
    note: str


@dataclass(frozen=True, slots=True)
class _Canvas:
    pos: np.ndarray
    dims: tuple[int, ...] | None  # a torus of two or more dimensions, else None (a circle)
    node_r: float  # data units
    margin: float  # data units around the ranks
    pts: float  # points per data unit
    units: dict[int, np.ndarray]  # on a torus, the step drawn along each of the last two dimensions
    shapes: dict[tuple[int, int, int, bool], Any] = field(default_factory=dict)  # `_hop_shape`'s memory
    slots: float = 0.0  # on a circle, the rank places round it (more than the ranks with gaps between nodes)
    hierarchy: Hierarchical | None = None  # ranks grouped by node


def _canvas(
    nranks: int, dims: Sequence[int] | None, size_in: float, *, roomy: bool = False,
    hierarchy: Hierarchical | None = None,
) -> _Canvas:  # fmt: skip
    """A panel ``size_in`` inches wide; ``roomy``: one big picture, smaller ranks, room beside them;
    ``hierarchy``: ranks grouped by node round the circle (the torus shape is then not drawn)."""
    grid = hierarchy is None and dims is not None and len(dims) >= 2
    pos = node_positions(hierarchy) if hierarchy is not None else rank_positions(nranks, dims if grid else None)
    slots = rank_slots(hierarchy)[1] if hierarchy is not None else float(nranks)
    n = max(slots, 1.0)
    if grid:
        margin, node_r = 0.7, 0.16 if roomy else 0.22
    elif roomy:
        margin, node_r = 0.32, min(0.065, 0.3 * math.pi / n)
    else:
        margin, node_r = (0.3, 0.3 * math.pi / n) if n > 32 else (0.2, min(0.1, 0.45 * math.pi / n))
    if hierarchy is not None:
        margin += 0.08  # room for the node boxes and their names
    pts = 72 * size_in / (float(np.ptp(pos, axis=0).max()) + 2 * margin)
    shape = tuple(dims) if grid and dims is not None else None
    last_two = range(len(shape) - 2, len(shape)) if shape else range(0)
    units = {k: pos[math.prod(shape[k + 1 :])] - pos[0] for k in last_two if shape and shape[k] > 1}
    return _Canvas(pos, shape, node_r, margin, pts, units, slots=slots, hierarchy=hierarchy)


def _setup_axes(ax: Axes, cv: _Canvas) -> None:
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Circle

    lo, hi = cv.pos.min(axis=0) - cv.margin, cv.pos.max(axis=0) + cv.margin
    ax.set_xlim(lo[0], hi[0])
    ax.set_ylim(lo[1], hi[1])
    ax.set_aspect("equal")
    ax.set_axis_off()
    if cv.dims is None:
        ax.add_artist(Circle((0, 0), 1, fill=False, color="0.9", lw=0.6, zorder=0))
        if cv.hierarchy is not None:
            _draw_node_boxes(ax, cv, cv.hierarchy)
        return
    coords = np.array(np.unravel_index(np.arange(len(cv.pos)), cv.dims))
    links = [
        (cv.pos[r], cv.pos[r] + u) for k, u in cv.units.items() for r in np.flatnonzero(coords[k] + 1 < cv.dims[k])
    ]
    ax.add_collection(LineCollection(links, colors="0.9", linewidths=0.8, zorder=0), autolim=False)


def _draw_node_boxes(ax: Axes, cv: _Canvas, hierarchy: Hierarchical) -> None:
    """A shaded band round the circle behind the ranks of every node (SVG id ``node-K``), named outside it."""
    from matplotlib.patches import Wedge

    slots, total = rank_slots(hierarchy)
    half = 0.5 * 360 / total  # half a rank place, in degrees
    width = 2 * cv.node_r + 0.05
    fs = 7.5 if cv.pts * cv.margin > 20 else 6.0
    for k, members in enumerate(node_members(hierarchy)):
        first, last = (math.degrees(float(slot_angle(slots[r], total))) for r in (members[0], members[-1]))
        band = Wedge((0, 0), 1 + width / 2, last - half, first + half, width=width, facecolor="0.93",
                     edgecolor="0.6", lw=0.6, zorder=0.5)  # fmt: skip
        band.set_gid(f"node-{k}")
        ax.add_artist(band)
        middle = math.radians((first + last) / 2)
        at = 1 + width / 2 + 0.55 * cv.margin
        ax.text(at * math.cos(middle), at * math.sin(middle), f"node {k}", ha="center", va="center", fontsize=fs,
                color="0.35", zorder=4)  # fmt: skip


def _draw_nodes(ax: Axes, cv: _Canvas, faces: Sequence[Any] | None = None) -> None:
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Circle

    circles = [Circle((x, y), cv.node_r) for x, y in cv.pos]
    ax.add_collection(PatchCollection(circles, facecolors=faces or "white", edgecolors="0.25", linewidths=0.7,
                                      zorder=3), autolim=False)  # fmt: skip
    fs = min(9.0, 0.84 * cv.node_r * cv.pts)
    for r, (x, y) in enumerate(cv.pos):
        if fs >= 4.5:
            ax.text(x, y, str(r), ha="center", va="center", fontsize=fs, zorder=4)
        elif cv.dims is None and r % max(1, len(cv.pos) // 8) == 0:  # too small: every eighth, outside
            at = 1 + cv.margin * 0.6
            ax.text(at * x, at * y, str(r), ha="center", va="center", fontsize=7, color="0.3", zorder=4)


def _segments(cv: _Canvas, sender: int, receiver: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """One segment; or, for a torus hop the short way round the edge of a plane, two: out of the
    sender's side to the panel's edge (or half way to the next plane), and into the receiver's."""
    a, b = cv.pos[sender], cv.pos[receiver]
    hop = torus_hop(sender, receiver, cv.dims) if cv.dims is not None else None
    if cv.dims and hop and hop[0] in cv.units and not np.allclose(a + hop[1] * cv.units[hop[0]], b):
        unit = hop[1] * cv.units[hop[0]]
        stub = unit / np.hypot(*unit) * (0.9 * cv.margin if len(cv.dims) == 2 else 0.45 * PLANE_GAP)
        return [(a, a + stub), (b - stub, b)]
    return [(a, b)]


_T = np.linspace(0.0, 1.0, 257)[:, None]


def _arrow(
    a: np.ndarray, b: np.ndarray, rad: float, cut_a: float, cut_b: float, head: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """The quadratic Bézier from a to b bent by ``rad`` (as matplotlib's arc3: positive bends to the
    right of the way travelled), cut ``cut_a`` after a and ``cut_b`` (plus the head's length) before
    b: its three points, the head's triangle (head = length, width) and the curve's middle."""
    c = (a + b) / 2 + rad * np.array([b[1] - a[1], a[0] - b[0]])

    def blossom(t0: Any, t1: Any) -> np.ndarray:  # B(t) for t0 == t1; the control point of [t0, t1]
        return (1 - t0) * (1 - t1) * a + ((1 - t0) * t1 + t0 * (1 - t1)) * c + t0 * t1 * b

    pts = blossom(_T, _T)
    from_a, to_b = np.hypot(*(pts - a).T), np.hypot(*(pts - b).T)
    t0 = float(_T[np.argmax(from_a >= cut_a), 0]) if cut_a > 0 else 0.0
    past = np.flatnonzero(to_b >= cut_b + (head[0] if head else 0.0))
    t1 = float(_T[past[-1], 0]) if past.size else 1.0
    t0, t1 = (t0, t1) if t0 < t1 else (0.0, 1.0)
    shaft = np.array([blossom(t0, t0), blossom(t0, t1), blossom(t1, t1)])
    triangle = None
    if head:
        tips = np.flatnonzero(to_b >= cut_b)
        along = (pts[tips[-1]] if tips.size else b) - shaft[2]
        side = np.array([-along[1], along[0]]) / (float(np.hypot(*along)) or 1.0) * head[1] / 2
        triangle = np.array([shaft[2] + along, shaft[2] + side, shaft[2] - side])
    return shaft, triangle, pts[len(pts) // 2]


def _bend(cv: _Canvas, a: np.ndarray, b: np.ndarray) -> float:
    """arc3's rad for an arrow, parting the two ways of an exchange: on a circle by a fixed
    distance (long chords bent by 0.2 would hug the circle); on a grid clear of ranks passed."""
    chord = float(np.hypot(*(b - a)))
    if cv.dims is None:
        return min(0.2, 0.12 / max(chord, 1e-9) * len(cv.pos) / max(cv.slots, 1))
    return 0.2 if chord < 1.5 else max(0.2, 2.6 * cv.node_r / chord)


def _hop_shape(cv: _Canvas, hop: Hop, dup: int, big: bool) -> list[tuple[Any, np.ndarray | None, np.ndarray]]:
    """Per segment of a hop: the shaft as a matplotlib Path, the head (last segment) and the middle;
    remembered in the canvas, as panels repeat hops.  ``dup``: earlier arrows of the same pair."""
    from matplotlib.path import Path as MplPath

    key = (hop.sender, hop.receiver, dup, big)
    if key not in cv.shapes:
        spacing = (2 * math.pi / max(cv.slots, 1) if cv.dims is None else 1.0) * cv.pts  # neighbours, points apart
        head_pts = min(4.5 if big else 6.5, 0.4 * spacing)
        head, cut = (head_pts / cv.pts, 0.6 * head_pts / cv.pts), cv.node_r + 1.0 / cv.pts
        parts = _segments(cv, hop.sender, hop.receiver)
        out = []
        for i, (a, b) in enumerate(parts):
            last = i == len(parts) - 1
            ends = (cut if i == 0 else 0.0, cut if last else 0.0)
            shaft, triangle, mid = _arrow(a, b, _bend(cv, a, b) + 0.15 * dup, *ends, head if last else None)
            out.append((MplPath(shaft, [MplPath.MOVETO, MplPath.CURVE3, MplPath.CURVE3]), triangle, mid))
        cv.shapes[key] = out
    return cv.shapes[key]


_STYLES: dict[Action | None, Any] = {Action.REDUCE: "-", Action.COPY: (0, (4, 2)), None: (0, (1, 1.5))}


def _draw_hops(ax: Axes, cv: _Canvas, hops: Sequence[Hop], colors: Sequence[Any], *, label: bool) -> int:
    """An arrow per hop: a `PathPatch` shaft with the SVG id ``send-STEP-N`` (``wrap-STEP-N``: the
    first half of a hop round a torus edge) and a head, all heads in one collection."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import PathPatch
    from matplotlib.transforms import TransformedPatchPath

    unclipped = TransformedPatchPath(ax.patch)  # one for all, else add_artist makes one per arrow
    big = len(cv.pos) > 32 or len(hops) > 48
    seen: Counter[tuple[int, int]] = Counter()
    heads, head_colors = [], []
    for n, (hop, color) in enumerate(zip(hops, colors, strict=True)):
        parts = _hop_shape(cv, hop, seen[hop.sender, hop.receiver], big)
        seen[hop.sender, hop.receiver] += 1
        for i, (path, triangle, _) in enumerate(parts):
            width = (0.7 if big else 1.1) * (2.2 if hop.compressed else 1.0)
            patch = PathPatch(path, fill=False, edgecolor=color, lw=width, linestyle=_STYLES[hop.action], zorder=2)
            patch.set_gid(f"send-{hop.step}-{n}" if i == len(parts) - 1 else f"wrap-{hop.step}-{n}")
            patch.set_clip_path(unclipped)
            patch.set_clip_on(False)  # every arrow lies inside its panel
            ax.add_artist(patch)
            if triangle is not None:
                heads.append(triangle)
                head_colors.append(color)
        if label:
            ax.text(*parts[0][2], str(hop.chunks), fontsize=6.5, ha="center", va="center", color=color, zorder=5,
                    bbox={"boxstyle": "round,pad=0.08", "fc": "white", "ec": "none", "alpha": 0.9})  # fmt: skip
    if heads:
        ax.add_collection(PolyCollection(heads, facecolors=head_colors, edgecolors="none", zorder=2.5), autolim=False)
    return len(hops)


def _draw_local_ops(ax: Axes, cv: _Canvas, ops: Sequence[Op]) -> set[OpKind]:
    """A marker beside every rank that compresses (▲) or decompresses (▽) in the step."""
    kinds: set[OpKind] = set()
    for op in (op for op in ops if op.kind.local):
        x, y = cv.pos[op.rank] + 1.2 * cv.node_r
        filled = op.kind is OpKind.COMPRESS
        ax.plot(x, y, marker="^" if filled else "v", color="black", mfc="black" if filled else "white",
                ms=max(3.5, 0.6 * cv.node_r * cv.pts), zorder=6, linestyle="none")  # fmt: skip
        kinds.add(op.kind)
    return kinds


def _step_colors(schedule: Schedule) -> tuple[Any, Any]:
    """The colour map of steps (viridis less its palest end) and its norm over the schedule's steps."""
    from matplotlib import colormaps
    from matplotlib.colors import ListedColormap, Normalize

    cmap = ListedColormap(colormaps["viridis"](np.linspace(0.0, 0.88, 256)))
    return cmap, Normalize(0, max(len(schedule.steps) - 1, 1))


def _port_name(port: str, dims: Sequence[int] | None) -> str:
    """A port label with its direction on the page, for the last two torus dimensions."""
    if dims is None or len(dims) < 2 or not port.startswith("dim "):
        return port
    words = {len(dims) - 2: ("down", "up"), len(dims) - 1: ("right", "left")}.get(int(port.split()[1]))
    return f"{port} ({words[0] if port.endswith('+') else words[1]})" if words else port


def _style_handles(hops: Sequence[Hop], local: set[OpKind]) -> list[Any]:
    from matplotlib.lines import Line2D

    actions = {h.action for h in hops}
    names = {Action.REDUCE: "receive reduces", Action.COPY: "receive copies", None: "no matching receive"}
    out = [Line2D([], [], color="0.3", linestyle=_STYLES[a], label=names[a]) for a in _STYLES if a in actions]
    if any(h.compressed for h in hops):
        out.append(Line2D([], [], color="0.3", lw=2.4, label="compressed on the wire"))
    for kind, marker, face in ((OpKind.COMPRESS, "^", "black"), (OpKind.DECOMPRESS, "v", "white")):
        if kind in local:
            out.append(Line2D([], [], color="black", mfc=face, marker=marker, linestyle="none", label=kind.value))
    return out


def _where(step: Step) -> str:
    """``file.coll:7, 8``: the source lines of a step's ops, the most frequent two."""
    lines = Counter((Path(op.span.file).name, op.span.line) for op in step.ops if op.span.line)
    top = sorted(lines, key=lambda key: (-lines[key], key))[:2]
    if len({f for f, _ in top}) == 1:
        return f"{top[0][0]}:" + ", ".join(str(line) for _, line in sorted(top))
    return ", ".join(f"{f}:{line}" for f, line in top)


def _save(fig: Figure, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    return out


def _rect(fig: Figure, x: float, y: float, w: float, h: float) -> tuple[float, float, float, float]:
    """A rectangle in inches from the figure's bottom left, as figure fractions."""
    fw, fh = fig.get_size_inches()
    return (x / fw, y / fh, w / fw, h / fh)


def _check(
    path: str | Path, schedule: Schedule, chunk: int | None = None, hierarchy: Hierarchical | None = None
) -> None:
    problem = suffix_problem(path) or (chunk_problem(schedule, chunk) if chunk is not None else None)
    if problem is not None:
        raise ValueError(problem)
    if hierarchy is not None:
        check_fit(hierarchy, schedule.nranks)


def draw_steps(
    schedule: Schedule, path: str | Path, *, color_by: ColorBy = "step", dims: Sequence[int] | None = None,
    max_panels: int = MAX_PANELS, steps: range | None = None, merge: bool = True, summary: bool = True,
    hierarchy: Hierarchical | None = None,
) -> Picture:  # fmt: skip
    """Small multiples, a panel per step or run of alike steps (`plan_panels`), and a summary panel:
    the chunks each sender sent each receiver over the selected steps.  ``dims`` overrides the
    torus shape of the schedule's parameters (`torus_dims`).  ``hierarchy``: the ranks drawn
    grouped by node (the torus shape is not drawn then), and ``color_by="level"`` colours every
    arrow by the level it crosses (`collc.viz.levels.LEVEL_COLORS`)."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    _check(path, schedule, hierarchy=hierarchy)
    if color_by not in ("step", "port", "level"):
        raise ValueError(f"color_by must be 'step', 'port' or 'level', not {color_by!r}")
    if color_by == "level" and hierarchy is None:
        raise ValueError("color_by='level' needs ranks on nodes (hierarchy=)")
    shape = tuple(dims) if dims is not None else torus_dims(schedule)
    torus = hierarchy is None and shape is not None and len(shape) >= 2
    plan = plan_panels(schedule, steps=steps, max_panels=max_panels, merge=merge)
    p = schedule.nranks
    hops_of = [step_hops(schedule, schedule.steps[panel[0]], shape, hierarchy=hierarchy) for panel in plan.panels]
    ports = sorted({h.port for hops in hops_of for h in hops}, key=_port_key)
    port_color = {port: _tab(i, len(ports)) for i, port in enumerate(ports)}
    cmap, norm = _step_colors(schedule)

    size, side, gap, tspace, top, bottom = (3.0 if p <= 16 else 3.8), 0.15, 0.35, 0.62, 0.8, 1.1  # inches
    npanels = max(len(plan.panels), 1) + (1 if summary else 0)
    ncols = min(npanels, max(3, math.ceil(math.sqrt(npanels))))
    nrows = math.ceil(npanels / ncols)
    width, height = 2 * side + ncols * size + (ncols - 1) * gap + 0.3, top + nrows * (tspace + size) + bottom
    fig = Figure(figsize=(width, height))

    def panel_axes(k: int, inset: float = 0.0) -> Axes:
        y = height - top - tspace - size - (k // ncols) * (tspace + size)
        return fig.add_axes(_rect(fig, side + k % ncols * (size + gap) + inset, y + inset, size - inset, size - inset))

    cv = _canvas(p, shape, size, hierarchy=hierarchy)
    arrows, local_kinds, all_hops, labelled = 0, set(), [], False
    for k, (panel, hops) in enumerate(zip(plan.panels, hops_of, strict=True)):
        ax = panel_axes(k)
        _setup_axes(ax, cv)
        first, last = schedule.steps[panel[0]], schedule.steps[panel[-1]]
        color = cmap(norm(first.index))
        counts = sorted({h.chunks for h in hops})
        label = len(counts) > 1 and len(hops) <= LABEL_LIMIT and p <= 16
        labelled |= label
        colors = [
            color if color_by == "step" else LEVEL_COLORS[str(h.level)] if color_by == "level" else port_color[h.port]
            for h in hops
        ]
        arrows += _draw_hops(ax, cv, hops, colors, label=label)
        local_kinds |= _draw_local_ops(ax, cv, first.ops)
        _draw_nodes(ax, cv)
        all_hops += hops
        sub = [f"{len(panel)} steps alike"] if len(panel) > 1 else []
        sub.append(f"{len(hops)} sends")
        if counts:
            chunks = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
            sub.append(f"{chunks} chunk{'s' * (chunks != '1')} each")
        head = f"step {first.index}" if len(panel) == 1 else f"steps {first.index}–{last.index}"
        last_line = [_where(first)] if _where(first) else []
        if hierarchy is not None:
            last_line.append(f"{sum(h.level == 'inter' for h in hops)} between nodes")
        title = f"{head} · {first.phase}\n{', '.join(sub)}" + (f"\n{' · '.join(last_line)}" if last_line else "")
        ax.set_title(title, fontsize=8.5, color=color if color_by == "step" else "black", pad=8)
    if not plan.panels:
        ax = panel_axes(0)
        _setup_axes(ax, cv)
        _draw_nodes(ax, cv)
        ax.set_title("no steps selected", fontsize=9)
    if summary:
        _draw_summary(panel_axes(npanels - 1, inset=0.4), schedule, plan, steps)

    title = f"{schedule.algorithm} ({schedule.collective.value}) {params_text(schedule.params)}"
    if hierarchy is not None:
        node = hierarchy.node
        title += f" on {hierarchy.machines} nodes × {node.ranks} ({node.fabric}, {hierarchy.placement} placement)"
    fig.suptitle(f"{title}: one panel per step\n{plan.note}", fontsize=11, y=1 - 0.1 / height, va="top")
    lax = fig.add_axes(_rect(fig, side, 0.05, width - 2 * side, bottom - 0.15))
    lax.set_axis_off()
    handles = _style_handles(all_hops, local_kinds)
    if color_by == "port":
        handles = [Line2D([], [], color=port_color[pt], lw=2, label=_port_name(pt, shape)) for pt in ports] + handles
        what = "colour: the torus dimension and direction of the hop" if torus else (
            "colour: (receiver − sender) mod p, signed, in powers of two (+1: the next rank, clockwise)")  # fmt: skip
    elif color_by == "level" and hierarchy is not None:
        levels = [lv for lv in LEVELS if any(h.level == lv for h in all_hops)]
        handles = [Line2D([], [], color=LEVEL_COLORS[lv], lw=2, label=level_label(hierarchy, lv)) for lv in levels]
        handles += _style_handles(all_hops, local_kinds)
        what = "colour: the level the message crosses"
    else:
        what = "colour: the step (as the panel titles)"
        cax = lax.inset_axes((0.72, 0.5, 0.26, 0.13))
        fig.colorbar(ScalarMappable(norm, cmap), cax=cax, orientation="horizontal").set_label("step", fontsize=8)
        cax.tick_params(labelsize=7)
    if handles:
        lax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.0, 1.0), fontsize=8, frameon=False,
                   ncols=len(handles) if len(handles) <= 8 else math.ceil(len(handles) / 2))  # fmt: skip
    text = f"{what}; arrows from sender to receiver; " + (
        "numbers on arrows: chunks sent" if labelled else "chunks per message in the panel titles")  # fmt: skip
    if torus:
        text += "\na hop round the torus leaves the grid at one edge and enters it again at the opposite edge"
    if hierarchy is not None:
        text += "\nshaded bands: the nodes, their ranks in the order of their index on the node"
    lax.text(0.0, 0.0, text, fontsize=8, transform=lax.transAxes)
    return Picture(_save(fig, path), arrows, len(plan.panels), plan.note)


def _tab(i: int, n: int) -> Any:
    from matplotlib import colormaps

    return colormaps["tab10" if n <= 10 else "tab20"](i % (10 if n <= 10 else 20))


def _draw_summary(ax: Axes, schedule: Schedule, plan: PanelPlan, steps: range | None) -> None:
    p, messages = schedule.nranks, 0
    matrix = np.zeros((p, p))
    for step, op in schedule.ops():
        if op.kind is OpKind.SEND and (steps is None or step.index in steps):
            matrix[op.rank, op.peer] += len(op.chunks)
            messages += 1
    image = ax.imshow(np.ma.masked_equal(matrix, 0), cmap="Blues", interpolation="nearest", vmin=0)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.03).ax.tick_params(labelsize=7)
    ax.set_xticks(range(0, p, max(1, p // 8)))
    ax.set_yticks(range(0, p, max(1, p // 8)))
    ax.tick_params(labelsize=7)
    ax.set_xlabel("receiver", fontsize=8)
    ax.set_ylabel("sender", fontsize=8, labelpad=1)
    total = matrix.sum()
    over = f"all {plan.selected} steps" if steps is None else f"the {plan.selected} selected steps"
    ax.set_title(f"chunks sent, sender → receiver, {over}\n{messages} messages, "
                 f"{int(total)} chunks = {total / max(schedule.nchunks, 1):.3g} vectors", fontsize=8.5)  # fmt: skip


def draw_chunk_flow(
    schedule: Schedule, path: str | Path, chunk: int, *, dims: Sequence[int] | None = None, steps: range | None = None,
    hierarchy: Hierarchical | None = None,
) -> Picture:  # fmt: skip
    """Where chunk ``chunk`` travels: every send carrying it (in ``steps``, all by default),
    coloured by step; each rank is filled with the colour of the first step in which it receives
    the chunk, written beside it (grey, no number: it never receives it).  ``hierarchy``: the
    ranks grouped by node."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.figure import Figure

    _check(path, schedule, chunk, hierarchy)
    shape = tuple(dims) if dims is not None else torus_dims(schedule)
    p = schedule.nranks
    hops = [
        h for st in schedule.steps if steps is None or st.index in steps for h in step_hops(schedule, st, shape, chunk)
    ]
    first: dict[int, int] = {}
    for h in hops:
        first.setdefault(h.receiver, h.step)
    cmap, norm = _step_colors(schedule)
    size = 7.0 if p <= 16 else 9.0
    fig = Figure(figsize=(size + 1.4, size + 1.6))
    ax = fig.add_axes(_rect(fig, 0.1, 0.6, size, size))
    cv = _canvas(p, shape, size, roomy=True, hierarchy=hierarchy)
    _setup_axes(ax, cv)
    arrows = _draw_hops(ax, cv, hops, [cmap(norm(h.step)) for h in hops], label=False)
    _draw_nodes(ax, cv, [(*cmap(norm(first[r]))[:3], 0.35) if r in first else "0.85" for r in range(p)])
    fs = 8 if p <= 16 else 6.5
    for r, s in first.items():
        x, y = cv.pos[r]
        at = 1 + cv.node_r + 1.3 * fs / cv.pts  # the label's middle, clear of the rank
        tx, ty = (at * x, at * y) if cv.dims is None else (x + 1.6 * cv.node_r, y + 1.6 * cv.node_r)
        ax.text(tx, ty, f"s{s}", fontsize=fs, ha="center", va="center", zorder=7,
                bbox={"boxstyle": "round,pad=0.12", "fc": "white", "ec": cmap(norm(s)), "lw": 0.8})  # fmt: skip
    cax = fig.add_axes(_rect(fig, size + 0.35, 1.2, 0.2, size - 1.2))
    fig.colorbar(ScalarMappable(norm, cmap), cax=cax).set_label("step of the send", fontsize=9)
    selection = "all steps" if steps is None else f"steps {steps.start}..{steps.stop - 1}"
    title = f"{schedule.algorithm} ({schedule.collective.value}) {params_text(schedule.params)}"
    fig.suptitle(f"{title}: where chunk {chunk} travels\n{arrows} sends carry it ({selection}); {len(first)} of {p} "
                 "ranks receive it", fontsize=11, y=1 - 0.1 / (size + 1.6), va="top")  # fmt: skip
    if handles := _style_handles(hops, set()):
        fig.legend(handles=handles, loc="lower left", bbox_to_anchor=_rect(fig, 0.1, 0.25, 0, 0)[:2], fontsize=8,
                   ncols=len(handles), frameon=False)  # fmt: skip
    fig.text(*_rect(fig, 0.15, 0.1, 0, 0)[:2], "sN beside a rank: the first step in which it receives the chunk "
             "(its fill has that step's colour; grey: it never receives it)", fontsize=8)  # fmt: skip
    return Picture(_save(fig, path), arrows, 1, selection)
