"""Goodput studies: algorithms x vector sizes on a topology, through the flow-level simulator.

`study` loads each entry (a `.coll` file, or a named group of them of which the
best at each size counts, as the Swing paper plots the best of a latency- and a
bandwidth-optimal variant), binds its rank count and torus shape from the
topology, elaborates it (long step loops sampled, `collc.elaborate.sampling`)
and simulates it for every size.  `table_text` and `plot` show the result;
`parse_rate` and `parse_duration` read the units people write (``400Gb/s``,
``100ns``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from collc.api import Algorithm, load
from collc.diagnostics import CollError
from collc.elaborate import elaborate, elaborate_sampled
from collc.ir import ParamValue, Schedule, params_text
from collc.simulate import NetworkModel, simulate
from collc.topology import Topology
from collc.viz import suffix_problem

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SAMPLE_LIMIT = 16
"""Step loops longer than this run only this many iterations when simulated (`--exact` runs them all)."""

_RATE_UNITS = {"b/s": 1 / 8, "kb/s": 1e3 / 8, "mb/s": 1e6 / 8, "gb/s": 1e9 / 8, "tb/s": 1e12 / 8}
_BYTE_RATE_UNITS = {"B/s": 1, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12, "GiB/s": 1 << 30}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_rate(text: str) -> float:
    """``400Gb/s`` (bits) or ``50GB/s`` (bytes) -> bytes per second."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*([A-Za-z]+/s)\s*", text)
    if m:
        value, unit = float(m.group(1)), m.group(2)
        if unit in _BYTE_RATE_UNITS:
            return value * _BYTE_RATE_UNITS[unit]
        if unit[-3] == "b" and unit.lower() in _RATE_UNITS:
            return value * _RATE_UNITS[unit.lower()]
    raise ValueError(f"{text!r} is not a rate (examples: 400Gb/s for bits, 50GB/s for bytes per second)")


def parse_duration(text: str) -> float:
    """``100ns``, ``0.5us``, ``1ms`` -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*([a-zµ]+)\s*", text)
    if not m or m.group(2) not in _TIME_UNITS:
        raise ValueError(f"{text!r} is not a duration (examples: 100ns, 0.5us, 2ms)")
    return float(m.group(1)) * _TIME_UNITS[m.group(2)]


@dataclass(frozen=True, slots=True)
class Entry:
    """One curve: a name and the files whose best time at each size it plots."""

    name: str
    files: tuple[str, ...]


def parse_entry(text: str) -> Entry:
    """``FILE`` or ``NAME=FILE+FILE+...`` (the best of the files at each size)."""
    name, sep, rest = text.partition("=")
    if sep and re.fullmatch(r"[A-Za-z_][\w.-]*", name):
        files = tuple(f for f in rest.split("+") if f)
        if not files:
            raise ValueError(f"{text!r}: no files after {name}=")
        return Entry(name, files)
    return Entry("", (text,))


@dataclass(frozen=True, slots=True)
class Point:
    """The simulated time of one entry at one size."""

    algorithm: str
    size_bytes: int
    time_s: float
    variant: str  # the algorithm (program name) that gave this time

    @property
    def goodput_gbps(self) -> float:
        return self.size_bytes * 8 / self.time_s / 1e9


@dataclass(frozen=True, slots=True)
class Variant:
    """How one program was elaborated for the study."""

    entry: str
    algorithm: str
    steps: int  # steps of the schedule
    elaborated: int  # steps elaborated (fewer when long loops were sampled)
    seconds: float  # elaboration and simulation


@dataclass(frozen=True, slots=True)
class Study:
    topology: Topology
    model: NetworkModel
    sizes: tuple[int, ...]
    points: tuple[Point, ...]
    variants: tuple[Variant, ...]
    collectives: tuple[str, ...] = ()  # the collectives of the programs, in order of appearance
    compressed: tuple[str, ...] = ()  # the collectives of which some program has compression points

    def names(self) -> list[str]:
        return list(dict.fromkeys(p.algorithm for p in self.points))

    def point(self, name: str, size: int) -> Point:
        for p in self.points:
            if p.algorithm == name and p.size_bytes == size:
                return p
        raise KeyError((name, size))


def bind(path: str, topology: Topology, extra: Mapping[str, ParamValue]) -> tuple[Algorithm, dict[str, ParamValue]]:
    """Load ``path`` and give it the topology's rank count (``p``) and shape (``dims``) where it takes them; a
    program with a hierarchy gets ``p`` and, on nodes of G ranks (``--node``), G ranks at its innermost level."""
    alg = load(path)
    values: dict[str, ParamValue] = {}
    names = alg.param_names
    hierarchy = alg.program.hierarchy
    if hierarchy is not None:  # p splits over the levels; the innermost is a node's ranks unless a level is given
        values["p"] = topology.nodes
        node = getattr(topology, "node", None)
        if node is not None and not any(level.id in extra for level in hierarchy.levels):
            values[hierarchy.levels[-1].id] = node.ranks
    elif "dims" in names:
        dims = getattr(topology, "dims", None)
        if dims is None:
            raise CollError(f"{path}: {alg.name} takes a torus shape (dims), which {topology.name} does not have")
        values["dims"] = dims
    elif "p" in names:
        values["p"] = topology.nodes
    else:
        raise CollError(f"{path}: {alg.name} takes neither p nor dims, so the topology cannot size it")
    values.update({k: v for k, v in extra.items() if k in names})
    return alg, values


@dataclass(frozen=True, slots=True)
class Failure:
    """A program of a study that fails verification at the instance simulated."""

    path: str
    algorithm: str
    params: dict[str, ParamValue]
    findings: int
    first: str  # the first finding, with its place: ``file:line:col: message``

    def line(self) -> str:
        """The one line `collc sim` prints for it."""
        given = " ".join(
            f"--dims {'x'.join(map(str, v))}" if isinstance(v, tuple) else f"-p {v}" if k == "p" else f"--param {k}={v}"
            for k, v in self.params.items()
        )
        return (
            f"warning: {self.algorithm} ({params_text(self.params)}) fails verification, {self.findings} finding(s), "
            f"the first at {self.first}; 'collc check {self.path} {given}' shows them"
        )


def verify(
    entries: Sequence[Entry],
    topology: Topology,
    extra: Mapping[str, ParamValue] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[Failure]:
    """Check every file of the entries at the instance the study simulates (as `collc check` does: from the step
    formulas or the rank symmetry where they apply); the files that fail.  A program that cannot be elaborated
    there is left to `study`, which reports it."""
    from collc.verify.sweep import check_instance, symbolic_for

    files = [path for entry in entries for path in entry.files]
    failures = []
    for done, path in enumerate(files, 1):
        alg, values = bind(path, topology, extra or {})
        result = check_instance(alg.program, values, symbolic=symbolic_for(alg.program, [values], "step"))
        if result.status == "wrong" and result.report is not None and result.report.findings:
            first = result.report.findings[0]
            failures.append(Failure(path, alg.name, dict(values), len(result.report.findings),
                                    f"{first.span}: {first.message}"))  # fmt: skip
        elif result.status == "wrong" and result.deadlock is not None and not result.deadlock.ok:
            failures.append(Failure(path, alg.name, dict(values), 1, result.deadlock.message))
        if on_progress is not None:
            on_progress(done, len(files))
    return failures


def schedule_for(
    path: str, topology: Topology, extra: Mapping[str, ParamValue], exact: bool
) -> tuple[Schedule, tuple[int, ...]]:
    """The schedule of ``path`` on ``topology`` and the weights of its steps (all 1 when ``exact``)."""
    alg, values = bind(path, topology, extra)
    program = alg.program
    try:
        if exact:
            schedule = elaborate(program, values)
            return schedule, (1,) * len(schedule.steps)
        return elaborate_sampled(program, values, SAMPLE_LIMIT)
    except CollError as err:
        err.sources = err.sources or dict(alg.sources)  # for the caret under a constraint or an evaluation error
        raise


def study(
    entries: Sequence[Entry],
    topology: Topology,
    sizes: Sequence[int],
    model: NetworkModel,
    extra: Mapping[str, ParamValue] | None = None,
    exact: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
) -> Study:
    """Simulate every entry at every size; an entry's time is the best of its files'.

    ``on_progress(done, total)``, when given, counts the work: for each file, one unit once it is
    elaborated, then one per size simulated (``total``: files x (sizes + 1))."""
    files = sum(len(entry.files) for entry in entries)
    total, done = files * (len(sizes) + 1), 0

    def advance(units: int = 1) -> None:
        nonlocal done
        done += units
        if on_progress is not None:
            on_progress(done, total)

    points: list[Point] = []
    variants: list[Variant] = []
    names: set[str] = set()
    collectives: dict[str, None] = {}
    compressed: dict[str, None] = {}
    for entry in entries:
        best: dict[int, tuple[float, str]] = {}
        name = entry.name
        for path in entry.files:
            start = time.perf_counter()
            schedule, weights = schedule_for(path, topology, extra or {}, exact or model.execution == "dataflow")
            if schedule.nranks != topology.nodes:
                machines = getattr(topology, "machines", None)
                room = (
                    f"{topology.nodes} nodes"
                    if machines is None
                    else f"{topology.nodes} ranks ({machines} nodes of {topology.nodes // machines} ranks)"
                )
                raise CollError(f"{path}: {schedule.nranks} ranks on a topology of {room}")
            advance()
            try:
                sim = simulate(
                    schedule, topology, list(sizes), model, weights=weights, on_progress=lambda *_: advance()
                )
            except ValueError as err:
                raise CollError(f"{path}: {err}") from None
            name = name or schedule.algorithm
            collectives.setdefault(schedule.collective.value, None)
            if schedule.compresses():
                compressed.setdefault(schedule.collective.value, None)
            variants.append(
                Variant(name, schedule.algorithm, sum(weights), len(schedule.steps), time.perf_counter() - start)
            )
            for row in sim.rows:
                old = best.get(row.size_bytes)
                if old is None or row.time_s < old[0]:
                    best[row.size_bytes] = (row.time_s, schedule.algorithm)
        if name in names:
            raise CollError(f"two curves are named {name}; name them apart with NAME=FILE")
        names.add(name)
        for size in sizes:
            t, variant = best[size]
            points.append(Point(name, size, t, variant))
    return Study(topology, model, tuple(sizes), tuple(points), tuple(variants), tuple(collectives), tuple(compressed))


def size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


def table_text(result: Study) -> str:
    """Goodput (Gb/s) per size and algorithm, the best in each row marked, times in µs below."""
    names = result.names()
    width = max(12, *(len(n) + 2 for n in names))
    lines = [f"# {'size':>8}" + "".join(f"{n:>{width}}" for n in names) + "   best"]
    for size in result.sizes:
        pts = [result.point(n, size) for n in names]
        best = min(pts, key=lambda p: p.time_s)
        cells = "".join(f"{p.goodput_gbps:>{width}.2f}" for p in pts)
        lines.append(f"  {size_text(size):>8}{cells}   {best.algorithm}")
    lines.append("# goodput in Gb/s (vector bits / time); time in us:")
    for size in result.sizes:
        cells = "".join(f"{result.point(n, size).time_s * 1e6:>{width}.2f}" for n in names)
        lines.append(f"  {size_text(size):>8}{cells}")
    return "\n".join(lines)


BOUND_SHARE = {
    "allreduce": (1, 2),  # every node sends and receives 2(n-1)/n of the vector
    "allgather": (1, 1),  # every node receives (n-1)/n of the gathered vector
    "reduce_scatter": (1, 1),  # every node sends (n-1)/n of its input
    "alltoall": (1, 1),  # every node sends (n-1)/n of its send buffer
    "broadcast": (0, 1),  # the root sends the vector once
    "reduce": (0, 1),  # the root receives the vector once
}
"""Per collective (a, b): a node's injection link carries at least b·(n - a)/n times the vector (n nodes), so the
goodput is at most injection · n / (b·(n - a))."""

MAX_TICKS = 8
"""The most size labels along the x axis (a label every k-th size)."""


def bandwidth_bounds(result: Study) -> list[tuple[str, float]]:
    """(label, Gb/s): the goodput no schedule of each collective of the study can beat on its network, set by
    a node's injection bandwidth (``2 * topology.peak_bandwidth``; with ``--node``, a node's NICs) and the data
    every node must send or receive at this node count (`BOUND_SHARE`).  Compressed data can beat it: the label
    says so where a program compresses."""
    topology = result.topology
    injection = 2 * topology.peak_bandwidth(result.model.link_bandwidth) * 8 / 1e9
    n = getattr(topology, "machines", None) or topology.nodes
    if n < 2 or injection <= 0:
        return []
    bounds = []
    for collective in result.collectives:
        a, b = BOUND_SHARE.get(collective, (1, 1))
        gbps = injection * n / (b * (n - a))
        note = ", uncompressed" if collective in result.compressed else ""
        bounds.append((f"{collective} bound {gbps:.4g} Gb/s (node injection {injection:g} Gb/s, n={n}{note})", gbps))
    return bounds


def size_ticks(sizes: Sequence[int], most: int = MAX_TICKS) -> list[int]:
    """The sizes the x axis labels: every k-th from the first, at most ``most`` of them."""
    step = max(1, -(-len(sizes) // most))
    return list(sizes)[::step]


def wide(result: Study) -> bool:
    """Whether the goodputs span more than two decades (a linear axis would flatten the small ones to zero)."""
    values = [p.goodput_gbps for p in result.points if p.goodput_gbps > 0]
    return bool(values) and max(values) > 100 * min(values)


def figure(result: Study, peak_gbps: float | None = None, yscale: str = "auto") -> Figure:
    """The goodput curves (Gb/s against vector size) as a matplotlib figure: the x axis log base 2 with at most
    `MAX_TICKS` size labels; the y axis ``linear``, ``log``, or ``auto`` (log where the goodputs are `wide`); a
    dashed line at ``peak_gbps`` when given, else at each collective's `bandwidth_bounds`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter, NullLocator

    if yscale not in ("auto", "linear", "log"):
        raise ValueError(f"yscale must be auto, linear or log, not {yscale!r}")
    log_y = yscale == "log" or (yscale == "auto" and wide(result))
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for name in result.names():
        ys = [result.point(name, s).goodput_gbps for s in result.sizes]
        ax.plot(result.sizes, ys, marker="o", markersize=3, label=name)
    lines = [(f"peak {peak_gbps:g} Gb/s", peak_gbps)] if peak_gbps is not None else bandwidth_bounds(result)
    styles = ["--", ":", "-."]
    for i, (label, gbps) in enumerate(lines):
        ax.axhline(gbps, color="grey", linestyle=styles[i % len(styles)], linewidth=1, label=label)
    ax.set_xscale("log", base=2)
    ticks = size_ticks(result.sizes)
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_text(s) for s in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    if len(result.sizes) == 1:
        ax.set_xlim(result.sizes[0] / 2, result.sizes[0] * 2)
    if log_y:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    if lines:  # room above the highest line, so that it does not run along the frame
        top = max(gbps for _, gbps in lines) * (1.6 if log_y else 1.08)
        ax.set_ylim(top=max(ax.get_ylim()[1], top))
    ax.set_xlabel("vector size")
    ax.set_ylabel("goodput (Gb/s)" + (", log scale" if log_y else ""))
    ax.set_title(f"{'/'.join(result.collectives) or 'collective'} goodput on {result.topology.name}")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def plot(result: Study, out: str | Path, peak_gbps: float | None = None, *, yscale: str = "auto") -> Path:
    """Goodput curves (`figure`) as PNG, SVG or PDF, by the file's suffix (its folder made when missing)."""
    import matplotlib.pyplot as plt

    path = Path(out)
    problem = suffix_problem(out)
    if problem is not None:
        raise CollError(f"--plot {problem}")
    fig = figure(result, peak_gbps, yscale)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
